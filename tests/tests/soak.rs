//! Soak (issue 23 item 5): the cell's whole job repeated — teach three waypoints by hand, save,
//! load and play the program, press 10 N on the table while tracing 100 mm (the demo's steps,
//! `cell::leadexp::teach`, `save_and_play`, `cell::demo::press`). After the first round
//! (warm-up) and after every round it samples, for every cell process: resident memory
//! (`VmRSS`), open file descriptors, the hot-path input latency histograms and the
//! publish/receive counters.
//!
//! **Forms** (issue 40). The full tier (`CELL_TIER=full`, `.ci/full`) runs the ten
//! minutes (600 s, ≈ 18 rounds of ≈ 33 s); the per-change tier (the default) runs the warm-up
//! round and two more; `SOAK_SECONDS=<s>` overrides both (hours by setting it; at least two
//! rounds, three for the latency comparison).
//!
//! Must hold at the end, in either form:
//!
//! - every cell process (the six services and the launcher) is in every sample, with the pid it
//!   had at the warm-up: a process that died, or was restarted, fails (a missing one used to
//!   count as −100 % RSS and pass);
//! - **RSS per round**: each process's RSS growth per round after the warm-up (the mean of its
//!   round-to-round increments without the largest: a one-off step is not a leak) is at most
//!   5 %/17 ≈ 0.29 % of its warm-up RSS — the steady growth the ten-minute form's 5 % bound over
//!   its 17 rounds after warm-up catches, so a leak that form would catch is caught by the
//!   short form too (see [`RSS_GROWTH_PER_ROUND_MAX`]);
//! - RSS of every process within 5 % of its warm-up value (the ten-minute form's bound);
//! - no file-descriptor growth;
//! - the p99 input latency of the last round not above 2 × the warm-up round's (+ 0.5 ms);
//! - every joint command control published reached robot-io (counted on both sides), none
//!   rejected; every round's steps passed.
//!
//! The figures go to `$TMPDIR/cell-soak-<pid>.json` (docs/reliability.md quotes them).
#![allow(clippy::unwrap_used)]

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use common::latency::{Histogram, Sparse};
use serde_json::Value;
use tests::{statuses, up_all, TestCell};

/// The ten-minute form's bound on each process's RSS growth from the warm-up sample to the last.
const RSS_GROWTH_MAX: f64 = 0.05;
/// Rounds the ten-minute form measures after its warm-up round: 600 s at ≈ 33 s a round is 18
/// rounds (17 in the measured 540 s run, 18 in CI's 602 s one), the first being the warm-up.
const LONG_FORM_ROUNDS_AFTER_WARMUP: f64 = 17.0;
/// The bound on RSS growth per round, as a fraction of the warm-up RSS. The arithmetic: the
/// ten-minute form fails a process whose RSS grows more than 5 % over its 17 rounds after
/// warm-up; a steady leak of `g` per round does that when `17·g > 5 %`, i.e. `g > 0.294 %`.
/// Such a leak adds at least `g` to every round's increment, so every form bounds the growth
/// per round ([`growth_per_round`]: the increments' mean without the largest; in the short
/// form, with two measured increments, the smaller) by that same 0.294 %, and the short form
/// catches from its two measured rounds what the ten-minute form catches in seventeen. Measured
/// without a leak (short form, this machine): ≤ 0.12 % a round (control, robot-io: 16–24 kB of
/// ≈ 18 MB), the simulator once 0.39 % in one round and 0 in the next; the ten-minute CI run
/// grew control 40, 12, 16 kB over rounds 2–4 (0.22 %, 0.07 %, 0.09 %). A leak 1.9× the bound,
/// broken in on purpose (robot-io: 56 bytes every 8th cycle, ≈ 66 kB a round), read 0.42 % a
/// round (+88, +72 kB) and failed.
const RSS_GROWTH_PER_ROUND_MAX: f64 = RSS_GROWTH_MAX / LONG_FORM_ROUNDS_AFTER_WARMUP;
/// The per-change form: the warm-up round and two measured ones (the latency comparison needs
/// a first and a last round after the warm-up).
const SHORT_ROUNDS: usize = 3;

/// Every process of the cell: the services of the default config and the launcher.
fn expected_processes() -> Vec<String> {
    tests::DEFAULT_SERVICES
        .iter()
        .map(|s| s.to_string())
        .chain(["launcher".to_string()])
        .collect()
}

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
    pids: BTreeMap<String, u64>,
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
    let mut pids_seen = BTreeMap::new();
    let mut hists = BTreeMap::new();
    let mut pids: Vec<(String, u64)> = st
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v["pid"].as_u64()?)))
        .collect();
    pids.push(("launcher".into(), u64::from(c.child.id())));
    for (name, pid) in pids {
        if let (Some(r), Some(f)) = (rss_kb(pid), fd_count(pid)) {
            rss.insert(name.clone(), r);
            fds.insert(name.clone(), f);
            pids_seen.insert(name, pid);
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
    let rio = st.get("robot-io").cloned().unwrap_or(Value::Null);
    let joint_cmd = input(&rio, "kin/joint_cmd");
    let published = |svc: &str| {
        st.get(svc)
            .map_or(0, |v| output_published(v, "kin/joint_cmd"))
    };
    Snap {
        t_s: t0.elapsed().as_secs_f64(),
        rss_kb: rss,
        fds,
        pids: pids_seen,
        cmd_published: published("control") + published("kinematics"),
        cmd_received: joint_cmd.and_then(|i| i["received"].as_u64()).unwrap_or(0),
        cmd_rejected: joint_cmd.and_then(|i| i["rejected"].as_u64()).unwrap_or(0),
        hists,
    }
}

/// `sim.egm.initial_q_deg` putting the TCP at `xyz_mm`, the tool pointing down (the IK
/// solution nearest the config's home joints): the robot starts where the soak's first
/// placement is instead of travelling there (≈ 5 s).
fn start_at(xyz_mm: [f64; 3]) -> String {
    cell::leadexp::set_config(
        Some(&tests::repo_root().join("deploy/config/sim.toml")),
        &[],
    );
    let arm = cell::leadexp::arm_and_poses()
        .expect("the configured arm")
        .0;
    let pose = kinematics::pose::pose_from_abb(xyz_mm, [0.0, 0.0, 1.0, 0.0]).unwrap();
    let home = [0.0, 0.0, 0.0, 0.0, 30f64.to_radians(), 0.0];
    let q = arm
        .ik_nearest(&pose, &home)
        .expect("IK of the start pose")
        .q;
    let deg: Vec<String> = q.iter().map(|v| format!("{:.9}", v.to_degrees())).collect();
    format!("sim.egm.initial_q_deg=[{}]", deg.join(", "))
}

/// Growth per round of the samples `y` (one per round, the warm-up's first): the mean of the
/// round-to-round increments without the largest one. A steady leak adds to every round, so
/// it is in every increment and in their mean; a one-off step (a buffer's capacity doubled
/// once: the simulator grew 76 kB in one round of one short run, then not at all) is in one.
/// With a single increment (two rounds) that increment.
fn growth_per_round(y: &[f64]) -> f64 {
    let mut d: Vec<f64> = y.windows(2).map(|w| w[1] - w[0]).collect();
    if d.len() > 1 {
        d.sort_by(f64::total_cmp);
        d.pop();
    }
    if d.is_empty() {
        return 0.0;
    }
    d.iter().sum::<f64>() / d.len() as f64
}

/// What the samples break: processes missing or restarted, RSS growth per round (fitted) and
/// in all, descriptor growth. Empty when every process is in every sample and flat enough.
fn memory_and_process_failures(snaps: &[Snap]) -> Vec<String> {
    let mut bad = Vec::new();
    let warm = &snaps[0];
    let last = &snaps[snaps.len() - 1];
    for name in expected_processes() {
        let Some(pid0) = warm.pids.get(&name) else {
            bad.push(format!("{name}: missing from the warm-up sample"));
            continue;
        };
        for (k, sn) in snaps.iter().enumerate().skip(1) {
            match sn.pids.get(&name) {
                None => bad.push(format!(
                    "{name}: missing from sample {k} (round {}): the process is gone",
                    k + 1
                )),
                Some(p) if p != pid0 => bad.push(format!(
                    "{name}: restarted (pid {pid0} → {p}) before sample {k} (round {})",
                    k + 1
                )),
                Some(_) => {}
            }
        }
        let (Some(r0), Some(f0)) = (warm.rss_kb.get(&name), warm.fds.get(&name)) else {
            continue;
        };
        // Over the samples it is in (a missing one has already failed).
        let rss: Vec<f64> = snaps
            .iter()
            .filter_map(|s| s.rss_kb.get(&name).map(|v| *v as f64))
            .collect();
        let per_round = growth_per_round(&rss) / *r0 as f64;
        if per_round > RSS_GROWTH_PER_ROUND_MAX {
            bad.push(format!(
                "{name}: RSS grew {:.3} % a round (the rounds' increments but the largest, over \
                 {} samples: {:?} kB), over {:.3} % (5 % over the ten-minute form's 17 rounds)",
                per_round * 100.0,
                rss.len(),
                rss,
                RSS_GROWTH_PER_ROUND_MAX * 100.0
            ));
        }
        if let Some(r1) = last.rss_kb.get(&name) {
            let g = *r1 as f64 / *r0 as f64 - 1.0;
            if g > RSS_GROWTH_MAX {
                bad.push(format!(
                    "{name}: RSS grew {:.1} % after warm-up ({r0} → {r1} kB)",
                    g * 100.0
                ));
            }
        }
        if let Some(f1) = last.fds.get(&name) {
            if f1 > f0 {
                bad.push(format!("{name}: file descriptors {f0} → {f1}"));
            }
        }
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teach_play_press_repeated_keeps_memory_fds_latency_and_counters_flat() {
    let _cell = tests::cell_lock();
    let locked = Instant::now();
    let forced: Option<f64> = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok());
    // Seconds to run and the fewest rounds.
    let (secs, min_rounds) = match forced {
        Some(s) => (s, 2),
        None if tests::full_tier() => (600.0, 2),
        None => (0.0, SHORT_ROUNDS),
    };
    eprintln!("soak: {secs} s, at least {min_rounds} rounds");
    let c = TestCell::start("soak", &[&start_at([400.0, 0.0, 400.0])]);
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
    eprintln!("soak: set up in {:.1} s", locked.elapsed().as_secs_f64());
    let t0 = Instant::now();
    let mut snaps: Vec<Snap> = Vec::new();
    let mut round = 0;
    while round < min_rounds || t0.elapsed().as_secs_f64() < secs {
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
    let mut per_round = BTreeMap::new();
    for (name, r0) in &warm.rss_kb {
        if let Some(r1) = last.rss_kb.get(name) {
            growth.insert(name.clone(), *r1 as f64 / *r0 as f64 - 1.0);
        }
        let rss: Vec<f64> = snaps
            .iter()
            .filter_map(|s| s.rss_kb.get(name).map(|v| *v as f64))
            .collect();
        per_round.insert(name.clone(), growth_per_round(&rss) / *r0 as f64);
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
        "rss_growth_per_round": per_round,
        "rss_growth_per_round_max": RSS_GROWTH_PER_ROUND_MAX,
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
        "soak growth per round (bound {:.3} %): {}",
        RSS_GROWTH_PER_ROUND_MAX * 100.0,
        serde_json::to_string(&report["rss_growth_per_round"]).unwrap()
    );
    eprintln!(
        "soak p99 (µs, first vs last round): {}",
        serde_json::to_string(&report["p99_us_first_vs_last_round"]).unwrap()
    );
    eprintln!(
        "soak report: {} ({round} rounds, {:.1} s from the cell lock)",
        path.display(),
        locked.elapsed().as_secs_f64()
    );
    let mut bad = memory_and_process_failures(&snaps);
    for (k, (a, b)) in &p99 {
        if *b > 2.0 * a + 500.0 {
            bad.push(format!(
                "{k}: p99 latency {a:.0} µs in the first round, {b:.0} µs in the last"
            ));
        }
    }
    // The counters at rest: the last round's snapshot can be taken while its final command is
    // still on its way to robot-io (the CI run of stop 56: 32582 published, 32581 received in
    // the same snapshot). Read again until they agree, for at most 2 s: a lost command keeps
    // them apart.
    let mut counters = (last.cmd_published, last.cmd_received, last.cmd_rejected);
    for _ in 0..10 {
        if counters.0 == counters.1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sn = snap(&s, &c, t0).await;
        counters = (sn.cmd_published, sn.cmd_received, sn.cmd_rejected);
    }
    if (counters.0, counters.1) != (last.cmd_published, last.cmd_received) {
        eprintln!(
            "soak: joint commands at rest {}/{} (the last round's snapshot {}/{})",
            counters.1, counters.0, last.cmd_received, last.cmd_published
        );
    }
    let (published, received, rejected) = counters;
    if received != published {
        bad.push(format!(
            "joint commands: {published} published by control and kinematics, {received} \
             received by robot-io (2 s after the last round)"
        ));
    }
    if rejected != 0 {
        bad.push(format!("robot-io rejected {rejected} joint commands"));
    }
    assert!(bad.is_empty(), "soak: {}", bad.join("\n  "));
}

#[cfg(test)]
mod rules {
    use super::*;

    fn snaps(rss: &[&[(&str, u64)]]) -> Vec<Snap> {
        rss.iter()
            .enumerate()
            .map(|(i, procs)| Snap {
                t_s: i as f64,
                rss_kb: procs.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
                fds: procs.iter().map(|(n, _)| (n.to_string(), 40)).collect(),
                // A pid per name, the same in every sample.
                pids: procs
                    .iter()
                    .map(|(n, _)| (n.to_string(), n.bytes().map(u64::from).sum()))
                    .collect(),
                cmd_published: 0,
                cmd_received: 0,
                cmd_rejected: 0,
                hists: BTreeMap::new(),
            })
            .collect()
    }

    fn all(rss: u64) -> Vec<(&'static str, u64)> {
        tests::DEFAULT_SERVICES
            .iter()
            .copied()
            .chain(["launcher"])
            .map(|n| (n, rss))
            .collect()
    }

    #[test]
    fn a_process_missing_from_a_sample_fails() {
        let mut last = all(17_000);
        last.retain(|(n, _)| *n != "force");
        let bad = memory_and_process_failures(&snaps(&[&all(17_000), &all(17_010), &last]));
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(
            bad[0].starts_with("force: missing from sample 2"),
            "{bad:?}"
        );
    }

    #[test]
    fn a_leak_the_long_form_would_catch_fails_the_short_form() {
        // 0.3 % a round of 17 000 kB: 17 rounds of it are 5.1 %, over the long form's 5 %.
        let step = 51;
        let leaking = |k: u64| {
            let mut v = all(17_000);
            v[0].1 += step * k;
            v
        };
        let bad = memory_and_process_failures(&snaps(&[&leaking(0), &leaking(1), &leaking(2)]));
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].contains("a round"), "{bad:?}");
        // Control's measured settling (+40 then +12 kB on 17 872) passes, and so does the
        // simulator's one-off step (+76 kB, then nothing, on 19 308).
        let settle = |extra: u64| {
            let mut v = all(17_872);
            v[0].1 += extra;
            v
        };
        let ok = memory_and_process_failures(&snaps(&[&settle(0), &settle(40), &settle(52)]));
        assert!(ok.is_empty(), "{ok:?}");
        let step = |extra: u64| {
            let mut v = all(19_308);
            v[5].1 += extra;
            v
        };
        let ok = memory_and_process_failures(&snaps(&[&step(0), &step(76), &step(76)]));
        assert!(ok.is_empty(), "{ok:?}");
    }
}
