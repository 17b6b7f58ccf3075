//! Soak (issue 23 item 5): the cell's whole job repeated — teach three waypoints by hand, save,
//! load and play the program, press 10 N on the table while tracing 100 mm (the demo's steps,
//! `cell::leadexp::teach`, `save_and_play`, `cell::demo::press`) — for `SOAK_SECONDS` (CI and
//! default: 600 s, the ten minutes, ≈ 18 rounds; hours by setting it). After the first round (warm-up) and after every round it
//! samples, for every cell process: resident memory (`VmRSS`), open file descriptors, the
//! hot-path input latency histograms and the publish/receive counters. Must hold at the end:
//!
//! - RSS of every process within 5 % of its warm-up value;
//! - no file-descriptor growth;
//! - the p99 input latency of the last round not above 2 × the warm-up round's (+ 0.5 ms);
//! - every joint command control published reached robot-io (counted on both sides), none
//!   rejected; every round's steps passed.
//!
//! The figures go to `$TMPDIR/cell-soak-<pid>.json` (docs/reliability.md quotes them).
#![allow(clippy::unwrap_used)]

use std::{collections::BTreeMap, time::Instant};

use common::latency::{Histogram, Sparse};
use serde_json::Value;
use tests::{statuses, up_all, TestCell};

fn rss_kb(pid: u64) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn fd_count(pid: u64) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// One sample of every process.
#[derive(Debug, Clone, serde::Serialize)]
struct Snap {
    t_s: f64,
    rss_kb: BTreeMap<String, u64>,
    fds: BTreeMap<String, usize>,
    /// Joint commands: published by control (+ kinematics), received and rejected by robot-io.
    cmd_published: u64,
    cmd_received: u64,
    cmd_rejected: u64,
    #[serde(skip)]
    hists: BTreeMap<String, Histogram>,
}

fn output_published(v: &Value, key_tail: &str) -> u64 {
    v["outputs"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|o| o["key"].as_str().is_some_and(|k| k.ends_with(key_tail)))
                .filter_map(|o| o["published"].as_u64())
                .sum()
        })
        .unwrap_or(0)
}

fn input<'a>(v: &'a Value, key_tail: &str) -> Option<&'a Value> {
    v["inputs"]
        .as_array()?
        .iter()
        .find(|i| i["key"].as_str().is_some_and(|k| k.ends_with(key_tail)))
}

async fn snap(s: &zenoh::Session, c: &TestCell, t0: Instant) -> Snap {
    let st = statuses(s, &c.cell).await.unwrap();
    let mut rss = BTreeMap::new();
    let mut fds = BTreeMap::new();
    let mut hists = BTreeMap::new();
    let mut pids: Vec<(String, u64)> = st
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v["pid"].as_u64()?)))
        .collect();
    pids.push(("launcher".into(), u64::from(c.child.id())));
    for (name, pid) in pids {
        if let (Some(r), Some(f)) = (rss_kb(pid), fd_count(pid)) {
            rss.insert(name.clone(), r);
            fds.insert(name, f);
        }
    }
    for (svc, v) in &st {
        for i in v["inputs"].as_array().into_iter().flatten() {
            let (Some(key), Some(h)) = (i["key"].as_str(), i.get("latency_hist")) else {
                continue;
            };
            if let Ok(sp) = serde_json::from_value::<Sparse>(h.clone()) {
                if let Ok(h) = Histogram::from_sparse(&sp) {
                    let tail = key.rsplit_once("/sim/").map_or(key, |x| x.1);
                    hists.insert(format!("{svc} ← {tail}"), h);
                }
            }
        }
    }
    let rio = &st["robot-io"];
    let joint_cmd = input(rio, "kin/joint_cmd");
    Snap {
        t_s: t0.elapsed().as_secs_f64(),
        rss_kb: rss,
        fds,
        cmd_published: output_published(&st["control"], "kin/joint_cmd")
            + output_published(&st["kinematics"], "kin/joint_cmd"),
        cmd_received: joint_cmd.and_then(|i| i["received"].as_u64()).unwrap_or(0),
        cmd_rejected: joint_cmd.and_then(|i| i["rejected"].as_u64()).unwrap_or(0),
        hists,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teach_play_press_repeated_keeps_memory_fds_latency_and_counters_flat() {
    let _cell = tests::cell_lock();
    let secs: f64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600.0);
    let c = TestCell::start("soak", &[]);
    let s = up_all(&c).await;
    let cell = c.cell.clone();
    let rec = cell::leadexp::Recorder::start(&s, &cell).await.unwrap();
    let dir = std::env::temp_dir().join(format!("cell-soak-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    // The lead-through world, tared, the payload identified (a program records it).
    cell::leadexp::place(&s, &cell, [400.0, 0.0, 400.0], 150.0)
        .await
        .unwrap();
    cell::leadexp::load_scenario(&s, &cell, &serde_json::Map::new())
        .await
        .unwrap();
    cell::leadexp::place_and_tare(&s, &cell, cell::leadexp::TEACH_START_MM, 150.0)
        .await
        .unwrap();
    cell::leadexp::payload_identify(&s, &cell, None, false)
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut snaps: Vec<Snap> = Vec::new();
    let mut round = 0;
    while round < 2 || t0.elapsed().as_secs_f64() < secs {
        round += 1;
        let t = Instant::now();
        cell::leadexp::place(&s, &cell, [400.0, 0.0, 400.0], 150.0)
            .await
            .unwrap_or_else(|e| panic!("round {round}: place: {e:#}\n{}", c.log_text()));
        cell::leadexp::load_scenario(&s, &cell, &serde_json::Map::new())
            .await
            .unwrap();
        let taught = cell::leadexp::teach(&s, &cell, &rec, &dir, false, 1.0, 0.5)
            .await
            .unwrap_or_else(|e| panic!("round {round}: teach: {e:#}\n{}", c.log_text()));
        assert_eq!(taught.recorded, 3, "round {round}: waypoints");
        assert!(
            taught.pulls.iter().all(|p| p.ended.is_none()),
            "round {round}: a guide session ended during a pull"
        );
        let played = cell::leadexp::save_and_play(&s, &cell, &rec, &dir, "soak", false)
            .await
            .unwrap_or_else(|e| panic!("round {round}: play: {e:#}\n{}", c.log_text()));
        let worst = played.waypoint_errors_m.iter().copied().fold(0.0, f64::max);
        assert!(
            worst < 5e-4,
            "round {round}: a waypoint missed by {:.3} mm",
            worst * 1e3
        );
        let (figures, pass, _) = cell::demo::press(&s, &cell, &dir.join("press"))
            .await
            .unwrap_or_else(|e| panic!("round {round}: press: {e:#}\n{}", c.log_text()));
        assert!(pass, "round {round}: press: {figures}");
        // The recorder's traces are the test's own memory, not the cell's.
        let _ = rec.take();
        let sn = snap(&s, &c, t0).await;
        eprintln!(
            "round {round} ({:.0} s): waypoints ≤ {:.3} mm; press {figures}; rss {:?} kB; fds {:?}; commands {}/{} (rejected {})",
            t.elapsed().as_secs_f64(),
            worst * 1e3,
            sn.rss_kb,
            sn.fds,
            sn.cmd_received,
            sn.cmd_published,
            sn.cmd_rejected
        );
        snaps.push(sn);
    }
    let warm = &snaps[0];
    let last = &snaps[snaps.len() - 1];
    let prev = &snaps[snaps.len() - 2];
    let mut growth = BTreeMap::new();
    for (name, r0) in &warm.rss_kb {
        let r1 = last.rss_kb.get(name).copied().unwrap_or(0);
        growth.insert(name.clone(), r1 as f64 / *r0 as f64 - 1.0);
    }
    // p99 of the last round vs the first round after warm-up (each a difference of the
    // cumulative histograms).
    let mut p99 = BTreeMap::new();
    if snaps.len() >= 3 {
        let first = &snaps[1];
        for (k, h) in &last.hists {
            let (Some(hp), Some(h0), Some(h1)) =
                (prev.hists.get(k), warm.hists.get(k), first.hists.get(k))
            else {
                continue;
            };
            let a = h1.since(h0);
            let b = h.since(hp);
            if a.count() > 100 && b.count() > 100 {
                p99.insert(
                    k.clone(),
                    (
                        a.quantile(0.99) as f64 * 1e-3,
                        b.quantile(0.99) as f64 * 1e-3,
                    ),
                );
            }
        }
    }
    let report = serde_json::json!({
        "seconds": t0.elapsed().as_secs_f64(),
        "rounds": round,
        "rss_growth_after_warmup": growth,
        "p99_us_first_vs_last_round": p99,
        "snaps": snaps,
    });
    let path = std::env::temp_dir().join(format!("cell-soak-{}.json", std::process::id()));
    let _ = std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap());
    eprintln!(
        "soak: {}",
        serde_json::to_string(&report["rss_growth_after_warmup"]).unwrap()
    );
    eprintln!(
        "soak p99 (µs, first vs last round): {}",
        serde_json::to_string(&report["p99_us_first_vs_last_round"]).unwrap()
    );
    eprintln!("soak report: {}", path.display());
    for (name, g) in &growth {
        assert!(
            *g <= 0.05,
            "{name}: RSS grew {:.1} % after warm-up ({:?} → {:?} kB)",
            g * 100.0,
            warm.rss_kb.get(name),
            last.rss_kb.get(name)
        );
    }
    for (name, f0) in &warm.fds {
        let f1 = last.fds.get(name).copied().unwrap_or(0);
        assert!(f1 <= *f0, "{name}: file descriptors {f0} → {f1}");
    }
    for (k, (a, b)) in &p99 {
        assert!(
            *b <= 2.0 * a + 500.0,
            "{k}: p99 latency {a:.0} µs in the first round, {b:.0} µs in the last"
        );
    }
    assert_eq!(
        last.cmd_received, last.cmd_published,
        "joint commands published by control and kinematics vs received by robot-io"
    );
    assert_eq!(last.cmd_rejected, 0, "robot-io rejected joint commands");
}
