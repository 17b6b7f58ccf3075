//! `cell up` without `-c`: the built-in defaults are the simulated cell of
//! `deploy/config/sim.toml` — the EGM robot and the SRI sensor through `cell-sim` — as the
//! README says (issue: experiments, "the README's main command"). Started from a directory
//! outside the repository, so the scenario path cannot resolve by accident against the
//! working directory.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use common::config::CellSection;
use tests::{bin_dir, free_port, free_udp_port, statuses, wait_for};

/// Private ports and cell id (the defaults' addresses are the shared 7447/6510/4008).
fn private_sets(name: &str) -> (CellSection, Vec<String>) {
    let port = free_port();
    let id = format!("t{name}{port}");
    let router = format!("tcp/127.0.0.1:{port}");
    let mut sets = vec![
        format!("cell.router=\"{router}\""),
        format!("cell.id=\"{id}\""),
    ];
    sets.extend(cell::harness::device_port_sets([
        free_udp_port(),
        free_udp_port(),
        free_port(),
        free_udp_port(),
        free_port(),
    ]));
    (
        CellSection {
            id,
            router,
            zenoh_config: None,
            security: None,
        },
        sets,
    )
}

fn cell_cmd(cwd: &std::path::Path, sets: &[String]) -> Command {
    let mut cmd = Command::new(bin_dir().join("cell"));
    cmd.current_dir(cwd)
        .env_remove("CELL_CONFIG")
        .env_remove("CARGO");
    for s in sets {
        cmd.arg("--set").arg(s);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cell_up_without_config_runs_egm_and_sri_through_the_simulator() {
    let (cell, sets) = private_sets("defaults");
    let cwd = std::env::temp_dir().join(format!("cell-defaults-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).expect("cwd");
    let log = cwd.join("cell.log");
    let logf = std::fs::File::create(&log).expect("log");
    let mut child = cell_cmd(&cwd, &sets)
        .arg("up")
        .env("RUST_LOG", "info,zenoh=warn")
        .stdin(Stdio::null())
        .stdout(logf.try_clone().expect("log"))
        .stderr(logf)
        .spawn()
        .expect("cell up");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let cfg = common::bus::zenoh_config(
        &common::bus::BusArgs::default(),
        &cell,
        common::bus::SessionMode::Client,
    )
    .expect("zenoh config");
    let s = wait_for(Duration::from_secs(20), || {
        let cfg = cfg.clone();
        async move { zenoh::open(cfg).await.ok() }
    })
    .await
    .unwrap_or_else(|| panic!("router never came up\n{}", log_text()));
    // Both devices streaming: robot-io cycles EGM, the sensor streams SRI.
    let st = wait_for(Duration::from_secs(40), || async {
        let st = statuses(&s, &cell).await.ok()?;
        let rio = &st.get("robot-io")?["detail"];
        let sen = st.get("sensor")?;
        let streaming = sen["state"]
            .as_str()
            .is_some_and(|t| t.contains("streaming"));
        let cycles = rio["cycles"]
            .as_u64()
            .or(rio["cycle"]["cycles"].as_u64())
            .unwrap_or(0);
        (cycles > 10 && streaming).then_some(st)
    })
    .await;
    let st = st.unwrap_or_else(|| panic!("devices not running\n{}", log_text()));
    assert_eq!(
        st["robot-io"]["detail"]["driver"], "egm",
        "{}",
        st["robot-io"]
    );
    assert_eq!(st["sensor"]["detail"]["driver"], "sri", "{}", st["sensor"]);
    assert!(st.contains_key("sim"), "cell-sim runs: {:?}", st.keys());
    // The operator's view, also without -c.
    let out = cell_cmd(&cwd, &sets)
        .arg("status")
        .output()
        .expect("cell status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\"driver\":\"egm\""), "{text}");
    assert!(text.contains("running: sri"), "{text}");
    // The default cell is not secured, and says so on the first line.
    assert!(
        text.lines().next().unwrap_or("").contains("UNSECURED"),
        "{text}"
    );
    // The simulator runs the scenario of sim.toml, resolved without the working directory.
    let v = cell_cmd(&cwd, &sets)
        .args(["sim-scenario"])
        .output()
        .expect("cell sim-scenario");
    let scen = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success(), "{scen}");
    assert!(scen.contains("free-space.toml"), "{scen}");
    let _ = s.close().await;
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let stopped = wait_for(Duration::from_secs(10), || {
        let r = child.try_wait().ok().flatten();
        async move { r }
    })
    .await;
    if stopped.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&cwd);
}
