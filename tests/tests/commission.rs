//! `cell commission` through the real processes: it passes on a simulated cell whose config
//! describes it, and each injected commissioning mistake — a wrong EGM port, a sensor mounted
//! a quarter turn about z, a tool 0.3 kg heavier than the config, 5 % EGM loss — is named by
//! the step that finds it, while the steps it does not concern still pass.
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use serde_json::Value;
use tests::{live_services, repo_root, sim_fault, up_all, wait_for, TestCell};

/// A copy of `deploy/irc5` as an integrator would load it for this cell: the UDP device
/// sending to `port` on loopback.
fn irc5_for(port: u16, tag: &str) -> PathBuf {
    let src = repo_root().join("deploy/irc5");
    let dir = std::env::temp_dir().join(format!("cell-commission-irc5-{tag}-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["CellEgm.mod", "MOC_cell.cfg"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let sio = std::fs::read_to_string(src.join("SIO_cell.cfg")).unwrap();
    assert!(sio.contains("-RemotePortNumber 6510"), "{sio}");
    let sio = sio
        .replace(
            "-RemotePortNumber 6510",
            &format!("-RemotePortNumber {port}"),
        )
        .replace("\"192.168.10.1\"", "\"127.0.0.1\"");
    std::fs::write(dir.join("SIO_cell.cfg"), sio).unwrap();
    dir
}

/// The port the simulated controller sends to (`sim.egm.robot_io`).
fn controller_target_port(c: &TestCell) -> u16 {
    let s = c
        .sets
        .iter()
        .rev()
        .find(|s| s.starts_with("sim.egm.robot_io="))
        .unwrap();
    s.trim_end_matches('"')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

struct Report {
    ok: bool,
    stdout: String,
    steps: BTreeMap<String, Value>,
}

impl Report {
    fn pass(&self, step: &str) -> Option<bool> {
        self.steps[step]["pass"].as_bool()
    }
    fn text(&self, step: &str) -> String {
        let st = &self.steps[step];
        format!("{} {}", st["figures"], st["problems"])
    }
}

fn commission(c: &TestCell, tag: &str, extra: &[&str]) -> Report {
    let out = std::env::temp_dir().join(format!("cell-commission-{tag}-{}", c.cell.id));
    let _ = std::fs::remove_dir_all(&out);
    let irc5 = irc5_for(controller_target_port(c), tag);
    let mut args = vec![
        "commission",
        "--out",
        out.to_str().unwrap(),
        "--irc5",
        irc5.to_str().unwrap(),
        "--egm-seconds",
        "5",
        "--rest-seconds",
        "5",
        // The jitter target of a real PC (2 ms) is not this shared 2-core test host's: the
        // emulated IRC5 sends on a timer of the same loaded host (measured p99 0.3–3.5 ms
        // here). 1.5 cycles keeps the step meaningful; the real target's verdicts are
        // unit-tested (commission::judge).
        "--max-jitter-ms",
        "6",
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = c.cli(&args);
    let text = std::fs::read_to_string(out.join("report.json"))
        .unwrap_or_else(|e| panic!("no report.json ({e})\n{stdout}\n{stderr}"));
    assert!(out.join("report.html").exists());
    let v: Value = serde_json::from_str(&text).unwrap();
    let steps = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s.clone()))
        .collect();
    eprintln!("{stdout}");
    assert_eq!(
        v["pass"].as_bool(),
        Some(ok),
        "exit status and report agree"
    );
    Report {
        ok,
        stdout: format!("{stdout}\n{stderr}"),
        steps,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commission_passes_on_a_correctly_configured_simulated_cell() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("comm-ok", &[]);
    let s = up_all(&c).await;
    let mut r = commission(&c, "ok", &[]);
    // A retry only for a proven cause: a timing step failed in a window where the host froze
    // every cell process together (the report carries the watchdogs' proof). Reported.
    let stalled: Vec<String> = ["egm", "round-trip"]
        .iter()
        .filter(|st| r.pass(st) == Some(false) && !r.steps[**st]["data"]["host_stall"].is_null())
        .map(|st| format!("{st}: {}", r.steps[*st]["data"]["host_stall"]))
        .collect();
    if !stalled.is_empty() {
        tests::report(
            tests::Report::Retry,
            &format!("commission repeated once after a proven host stall: {stalled:?}"),
        );
        r = commission(&c, "ok-again", &[]);
    }
    for step in [
        "services",
        "security",
        "irc5",
        "egm",
        "round-trip",
        "joints",
        "ft-rest",
        "frame",
        "payload",
        "estop",
        "restart",
    ] {
        assert_eq!(
            r.pass(step),
            Some(true),
            "{step}: {}\n{}",
            r.text(step),
            r.stdout
        );
    }
    assert!(r.ok, "{}", r.stdout);
    assert!(
        r.text("frame").contains("as configured"),
        "{}",
        r.text("frame")
    );
    // Issue 43: the shipped config describes the shipped simulated tool (no --set needed), and
    // a program stop and start is a restart robot-io sees at sequence number 0.
    assert!(
        r.text("restart").contains("first seqno 0"),
        "{}",
        r.text("restart")
    );
    let _ = s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_egm_port_is_named_by_the_irc5_and_egm_steps() {
    let _cell = tests::cell_lock();
    // robot-io listens on another port than the one the controller sends to.
    let other = tests::free_udp_port();
    let bind = format!("robot_io.egm.bind=\"127.0.0.1:{other}\"");
    let c = TestCell::start("comm-port", &[&bind]);
    let s = c.client().await;
    let live = wait_for(Duration::from_secs(30), || async {
        live_services(&s, &c.cell)
            .await
            .iter()
            .any(|n| n == "robot-io")
            .then_some(())
    })
    .await;
    assert!(live.is_some(), "{}", c.log_text());
    let r = commission(&c, "port", &["--skip", "ft-rest"]);
    assert!(!r.ok);
    assert_eq!(r.pass("irc5"), Some(false), "{}", r.stdout);
    assert!(
        r.text("irc5").contains(&format!("port {other}")),
        "{}",
        r.text("irc5")
    );
    assert_eq!(r.pass("egm"), Some(false), "{}", r.stdout);
    assert!(
        r.text("egm").contains("no EGM datagram"),
        "{}",
        r.text("egm")
    );
    assert!(r.steps["egm"]["hint"].as_str().unwrap().contains("port"));
    // What needs the link is not run, not failed.
    for step in ["round-trip", "joints", "payload", "estop", "restart"] {
        assert_eq!(r.pass(step), None, "{step}: {}", r.text(step));
    }
    let _ = s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sensor_mounted_a_quarter_turn_off_is_named_by_the_frame_step() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("comm-rot", &[]);
    let s = up_all(&c).await;
    let (ok, out, err) = c.cli(&[
        "sim-scenario",
        r#"{"set":{"sensor_mount_error_rpy_deg":[0.0,0.0,90.0]}}"#,
    ]);
    assert!(ok, "{out}{err}");
    let r = commission(&c, "rot", &["--skip", "round-trip,payload,estop,restart"]);
    assert!(!r.ok);
    assert_eq!(r.pass("frame"), Some(false), "{}", r.stdout);
    assert!(
        r.text("frame")
            .contains("rotated +90° about the sensor's z"),
        "{}",
        r.text("frame")
    );
    for step in ["irc5", "egm", "joints", "ft-rest"] {
        assert_eq!(r.pass(step), Some(true), "{step}: {}", r.text(step));
    }
    let _ = s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_0_3_kg_heavier_than_the_config_is_named_by_the_payload_step() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("comm-mass", &[]);
    let s = up_all(&c).await;
    let (ok, out, err) = c.cli(&["sim-scenario", r#"{"set":{"tool.mass_kg":0.8}}"#]);
    assert!(ok, "{out}{err}");
    let r = commission(&c, "mass", &["--skip", "round-trip,ft-rest,estop,restart"]);
    assert!(!r.ok);
    assert_eq!(r.pass("payload"), Some(false), "{}", r.stdout);
    let t = r.text("payload");
    assert!(
        t.contains("+0.300 kg") || t.contains("+0.299 kg") || t.contains("+0.301 kg"),
        "{t}"
    );
    for step in ["irc5", "egm", "joints", "frame"] {
        assert_eq!(r.pass(step), Some(true), "{step}: {}", r.text(step));
    }
    let _ = s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_percent_egm_loss_is_named_by_the_egm_step() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("comm-loss", &[]);
    let s = up_all(&c).await;
    sim_fault(&s, &c, serde_json::json!({ "packet_loss": 0.05 })).await;
    let r = commission(
        &c,
        "loss",
        &["--skip", "round-trip,frame,payload,estop,restart"],
    );
    assert!(!r.ok);
    assert_eq!(r.pass("egm"), Some(false), "{}", r.stdout);
    let loss = r.steps["egm"]["data"]["link"]["loss_pct"].as_f64().unwrap();
    assert!(
        (3.0..=7.5).contains(&loss),
        "loss {loss} %: {}",
        r.text("egm")
    );
    assert!(r.text("egm").contains("lost"), "{}", r.text("egm"));
    for step in ["irc5", "joints", "ft-rest"] {
        assert_eq!(r.pass(step), Some(true), "{step}: {}", r.text(step));
    }
    let _ = s.close().await;
}
