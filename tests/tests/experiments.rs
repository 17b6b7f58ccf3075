//! The CI short form of `cell experiment` (issue: the papers' experiments reproduced): every
//! experiment runs once against a test cell through the real processes (`--short`: fewer
//! cases), its metrics JSON must carry the named metrics (never null), and this file's own
//! bounds ([`BOUNDS`], stated here, not read from the targets the code under test emits: a
//! loosened threshold in `experiment.rs` still fails here) must hold on the scored figures,
//! which come from ground truth where they are force or contact figures (`sources`). One more
//! run starts its own private cell (no cell at the configured router). The lead-through
//! experiments' short forms: one tool axis per law, the 45° pull with all three laws, and
//! teach → identify → save → play (about 100 s together).
//!
//! Tiers (`tests::full_tier()`, issue 40): per change, the short forms no other test carries
//! (`force-step`, `ramp-disturbance`, `sine-force-step`, `force-ramp`, `contour`,
//! `peg-in-hole`, `lead-through-axes`) and the private cell; the full tier adds the short forms
//! of `unknown-surface`, `lead-through-45` and `teach-playback` (per change their proofs are in
//! `tests/hybrid.rs` and `tests/leadthrough.rs`) and the proven-stall retry through the
//! runner (per change: `tests/cell.rs`'s proof of a host stall through the processes and the
//! lab's unit tests of the retry).

use std::path::PathBuf;

use serde_json::Value;
use tests::{free_port, repo_root, TestCell};

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("experiments-test-{name}-{}", std::process::id()))
}

/// Checks the JSON shape and every gate, each failure into `failures`; returns a one-line
/// summary per check.
fn check(v: &Value, name: &str, failures: &mut Vec<String>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fail = |why: String| failures.push(format!("{name}: {why}"));
    if v["experiment"] != name || v["rate_hz"].as_f64().is_none() || !v["paper"].is_object() {
        fail(format!("not an experiment's JSON: {v}"));
        return lines;
    }
    let Some(cases) = v["cases"].as_array().filter(|c| !c.is_empty()) else {
        fail(format!("no cases: {v}"));
        return lines;
    };
    for c in cases {
        let label = c["label"].as_str().unwrap_or("?");
        let m = &c["metrics"];
        let required: &[&str] = match name {
            "lead-through-axes" => &["response_time_s", "path_length_m"],
            "lead-through-45" => &[
                "rms_path_deviation_m",
                "path_length_m",
                "time_to_target_s",
                "response_time_s",
            ],
            "teach-playback" => &[
                "max_waypoint_error_m",
                "progress",
                "max_joint_speed_fraction",
                "max_joint_accel_fraction",
            ],
            "peg-in-hole" => &[
                "success",
                "time_to_target_s",
                "peak_force_n",
                "max_position_error_m",
            ],
            _ => &[
                "rms_force_error_n",
                "max_force_error_n",
                "contact_lost",
                "max_position_error_m",
            ],
        };
        for k in required {
            if m.get(k).is_none_or(Value::is_null) {
                fail(format!("{label}: metric {k} missing or null: {m}"));
            }
        }
        if name == "lead-through-axes" && label.starts_with("stiffness") {
            for k in ["step_m", "true_travel_m", "true_travel_error_m"] {
                if m[k].as_f64().is_none() {
                    fail(format!("{label}: {k}: {m}"));
                }
            }
        }
        if name == "lead-through-45"
            && label.starts_with("admittance")
            && m["guide_force_at_0_1_m_s_n"].as_f64().is_none()
        {
            fail(format!("{label}: guide force at 0.1 m/s: {m}"));
        }
        if name == "force-step" {
            // (`settling_time_s` is reported too; null there means "never settled in the
            // band", e.g. a limit cycle wider than it — a finding, not a missing figure.)
            for k in [
                "rise_time_s",
                "overshoot_pct",
                "steady_state_error_n",
                "steady_state_mean_error_n",
                "limit_cycle_n",
            ] {
                if m.get(k).is_none_or(Value::is_null) {
                    fail(format!("{label}: metric {k} missing or null: {m}"));
                }
            }
        }
        let Some(checks) = c["checks"].as_array() else {
            fail(format!("{label}: no checks"));
            continue;
        };
        for ch in checks {
            let metric = ch["metric"].as_str().unwrap_or("?");
            let value = &m[metric];
            let target = &ch["target"];
            let pass = match ch["op"].as_str() {
                Some("<=") => value
                    .as_f64()
                    .zip(target.as_f64())
                    .is_some_and(|(a, b)| a <= b),
                Some(">=") => value
                    .as_f64()
                    .zip(target.as_f64())
                    .is_some_and(|(a, b)| a >= b),
                Some("==") => value == target,
                other => panic!("unknown op {other:?}"),
            };
            if ch["gate"] == true && !pass {
                fail(format!(
                    "{label}: {metric} = {value} regressed past its target {} {target} ({})",
                    ch["op"], ch["source"]
                ));
            }
            lines.push(format!(
                "{name}/{label}: {metric} {value} {} {target}{}",
                ch["op"].as_str().unwrap_or("?"),
                if ch["gate"] == true { "" } else { " (goal)" }
            ));
            // A goal beside a looser gate on the same figure goes into the CI report every run
            // (cargo test hides a passing test's output): the gate passing says nothing of it.
            let looser_gate = |g: &&Value| {
                g["gate"] == true
                    && g["metric"] == ch["metric"]
                    && g["op"] == ch["op"]
                    && match (ch["op"].as_str(), g["target"].as_f64(), target.as_f64()) {
                        (Some("<="), Some(gt), Some(t)) => gt > t,
                        (Some(">="), Some(gt), Some(t)) => gt < t,
                        _ => false,
                    }
            };
            // (Fig. 8's is reported by [`report_fig8_goal`] from this file's own bound.)
            let fig8 = name == "ramp-disturbance" && metric == "max_force_error_excl_ends_n";
            if ch["gate"] != true && !fig8 {
                if let Some(g) = checks.iter().find(looser_gate) {
                    tests::report(
                        tests::Report::Figure,
                        &format!(
                            "{name}/{label}: {metric} = {value}: goal {} {target} {} ({}); gate {}",
                            ch["op"].as_str().unwrap_or("?"),
                            if pass { "met" } else { "NOT met" },
                            ch["source"].as_str().unwrap_or(""),
                            g["target"]
                        ),
                    );
                }
            }
        }
    }
    lines
}

/// The bounds this test holds each experiment's short form to, whatever the experiment's own
/// targets say: (experiment, case-label prefix, metric, op, bound, why).
const BOUNDS: &[(&str, &str, &str, &str, f64, &str)] = &[
    // Raibert & Craig Fig. 7: the steady-state error is the largest |e| over the last second
    // (the paper's < 1 N is a goal: the plant's stick-slip limit cycle keeps it above 1 N at
    // 60 Hz); the offset under 1 N; contact kept on every step.
    (
        "force-step",
        "",
        "t90_s",
        "<=",
        0.5,
        "reaches 90 % within 0.5 s",
    ),
    (
        "force-step",
        "",
        "steady_state_error_n",
        "<=",
        2.0,
        "max |e| in steady state",
    ),
    (
        "force-step",
        "",
        "steady_state_mean_error_n",
        "<=",
        1.0,
        "offset under the paper's 1 N",
    ),
    (
        "force-step",
        "",
        "limit_cycle_n",
        "<=",
        1.75,
        "model ≤ 1.26 N",
    ),
    ("force-step", "", "contact_lost", "==", 0.0, "contact kept"),
    (
        "force-step",
        "plant",
        "max_position_error_m",
        "<=",
        1e-3,
        "C_y held (true hand)",
    ),
    // Fig. 8: over the ramp placed on the true first touch; the paper's 1.75 N except at the
    // ramp ends.
    (
        "ramp-disturbance",
        "",
        "rms_force_error_n",
        "<=",
        1.0,
        "whole ramp",
    ),
    (
        "ramp-disturbance",
        "",
        "max_force_error_excl_ends_n",
        "<=",
        1.75,
        "paper",
    ),
    (
        "ramp-disturbance",
        "",
        "contact_lost",
        "==",
        0.0,
        "paper: contact never lost",
    ),
    (
        "ramp-disturbance",
        "",
        "touched",
        "==",
        1.0,
        "the window is placed on a true touch",
    ),
    // Fig. 9 at 3 cm (the short form): runs to the end, C_y follows within 10 mm.
    (
        "sine-force-step",
        "",
        "completed",
        "==",
        1.0,
        "runs to the end",
    ),
    (
        "sine-force-step",
        "",
        "max_position_error_m",
        "<=",
        0.01,
        "true hand",
    ),
    // Fig. 10: from the ramp's start, nothing cut.
    (
        "force-ramp",
        "",
        "rms_force_error_n",
        "<=",
        1.0,
        "paper floor",
    ),
    (
        "force-ramp",
        "",
        "max_position_error_m",
        "<=",
        1e-3,
        "C_y held (true hand)",
    ),
    (
        "contour",
        "",
        "rms_force_error_n",
        "<=",
        0.4,
        "whole move, truth",
    ),
    (
        "contour",
        "",
        "max_force_error_excl_ends_n",
        "<=",
        1.5,
        "the issue's 1.5 N, the move's 0.1 s accelerations left out (tests/hybrid.rs's bound)",
    ),
    ("contour", "", "contact_lost", "==", 0.0, "contact kept"),
    // Issue 20: the press on a surface nobody identified (the short form: 10⁶ N/m and the pad
    // onto steel).
    ("unknown-surface", "", "completed", "==", 1.0, "completed"),
    (
        "unknown-surface",
        "table",
        "truth_peak_first_contact_n",
        "<=",
        13.0,
        "first contact ≤ 1.3 × 10 N",
    ),
    (
        "unknown-surface",
        "table",
        "rms_force_error_n",
        "<=",
        0.5,
        "during the move, truth",
    ),
    (
        "peg-in-hole",
        "",
        "success",
        "==",
        1.0,
        "inserted (true depth)",
    ),
    (
        "peg-in-hole",
        "",
        "peak_force_n",
        "<=",
        30.0,
        "below the 40 N limit",
    ),
    (
        "lead-through-axes",
        "",
        "response_time_s",
        "<=",
        0.2,
        "follows within 0.2 s",
    ),
    (
        "lead-through-axes",
        "",
        "path_length_m",
        ">=",
        0.04,
        "follows a 60 mm pull",
    ),
    (
        "lead-through-axes",
        "stiffness",
        "max_step_error_m",
        "<=",
        5e-4,
        "d = 10 mm ± 0.5",
    ),
    (
        "lead-through-axes",
        "stiffness",
        "true_travel_error_m",
        "<=",
        5e-4,
        "n steps of d move the true TCP n·d (± 0.5 mm)",
    ),
    (
        "lead-through-45",
        "",
        "path_length_m",
        ">=",
        0.06,
        "follows a 100 mm pull",
    ),
    (
        "lead-through-45",
        "admittance",
        "rms_path_deviation_m",
        "<=",
        0.002,
        "straight",
    ),
    (
        "lead-through-45",
        "admittance",
        "guide_force_at_0_1_m_s_n",
        "<=",
        10.0,
        "light",
    ),
    (
        "teach-playback",
        "3 waypoints",
        "max_waypoint_error_m",
        "<=",
        5e-4,
        "0.5 mm",
    ),
    (
        "teach-playback",
        "3 waypoints",
        "completed",
        "==",
        1.0,
        "ends Done",
    ),
    (
        "teach-playback",
        "3 waypoints",
        "max_joint_speed_fraction",
        "<=",
        1.0,
        "limits",
    ),
    (
        "teach-playback",
        "3 waypoints",
        "max_joint_accel_fraction",
        "<=",
        1.0,
        "limits",
    ),
];

/// Holds the cases of experiment `name` to [`BOUNDS`]: each bounded metric present, not null,
/// within its bound, each failure into `failures`. Booleans compare as 0/1. Returns how many
/// bounds were checked.
fn check_bounds(v: &Value, name: &str, failures: &mut Vec<String>) -> usize {
    let mut n = 0;
    for c in v["cases"].as_array().map_or(&[][..], Vec::as_slice) {
        let label = c["label"].as_str().unwrap_or("?");
        let m = &c["metrics"];
        for (exp, prefix, metric, op, bound, why) in BOUNDS {
            if *exp != name || !label.starts_with(prefix) {
                continue;
            }
            n += 1;
            let x = match &m[*metric] {
                Value::Bool(b) => f64::from(u8::from(*b)),
                other => match other.as_f64() {
                    Some(x) => x,
                    None => {
                        failures.push(format!(
                            "{name}/{label}: {metric} is {other}, not a number ({why}): {m}"
                        ));
                        continue;
                    }
                },
            };
            let ok = match *op {
                "<=" => x <= *bound,
                ">=" => x >= *bound,
                "==" => x == *bound,
                other => panic!("unknown op {other}"),
            };
            if !ok {
                failures.push(format!(
                    "{name}/{label}: {metric} = {x} not {op} {bound} ({why})\n{m}"
                ));
            }
        }
        if !m["truth_missing"].is_null() {
            failures.push(format!("{name}/{label}: {}", m["truth_missing"]));
        }
    }
    n
}

/// Fig. 8's gate is the paper's 1.75 N (max error except the ramp ends, [`BOUNDS`]); the
/// experiments issue's goal, 1.0 N, is reported beside it every run (CI's report).
fn report_fig8_goal(v: &Value) {
    for c in v["cases"].as_array().map_or(&[][..], Vec::as_slice) {
        let max = c["metrics"]["max_force_error_excl_ends_n"]
            .as_f64()
            .unwrap_or(f64::NAN);
        tests::report(
            tests::Report::Figure,
            &format!(
                "Fig. 8 ({}): max error except the ramp ends {max:.3} N: gate 1.75 N (paper), \
                 goal 1.0 N {}",
                c["label"].as_str().unwrap_or("?"),
                if max <= 1.0 { "met" } else { "NOT met" }
            ),
        );
    }
}

/// The metrics JSON `cell experiment --json` printed last.
fn json_in(out: &str) -> Option<Value> {
    out.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
}

fn json_of(out: &str, err: &str) -> Value {
    json_in(out).unwrap_or_else(|| panic!("no metrics JSON\nstdout {out}\nstderr {err}"))
}

/// Every experiment's short form, run once against one test cell. Per change the ones no other
/// test carries: `unknown-surface` repeats
/// `tests/hybrid.rs`'s un-identified presses (every table, and the pad onto steel, with tighter
/// bounds there), `lead-through-45` repeats `tests/leadthrough.rs`'s 45° pull (all three laws,
/// the same bounds and the staircase comparison), `teach-playback` its teach → save → restart
/// → play (waypoints ≤ 0.5 mm, `Done`, references within the limits per cycle): those four run
/// here in the full tier. Every experiment runs, then every failure is listed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_form_of_every_experiment_meets_its_gates() {
    let _cell = tests::cell_lock();
    let c = TestCell::start(
        "exp",
        &[
            "sim.plant.enabled=true",
            "sim.scenario=\"scenarios/rc-plant.toml\"",
        ],
    );
    let _s = tests::up_all(&c).await;
    let mut names = vec![
        "force-step",
        "ramp-disturbance",
        "sine-force-step",
        "force-ramp",
        "contour",
        "peg-in-hole",
        // Lead-through: the scripted operator's hand (scenarios/lead-through.toml).
        "lead-through-axes",
    ];
    if tests::full_tier() {
        names.extend(["unknown-surface", "lead-through-45", "teach-playback"]);
    }
    let mut failures = Vec::new();
    for name in names {
        let dir = out_dir(name);
        let (ok, out, err) = c.cli(&[
            "experiment",
            name,
            "--short",
            "--json",
            "--out",
            dir.to_str().expect("path"),
        ]);
        let Some(v) = json_in(&out) else {
            failures.push(format!(
                "{name}: no metrics JSON\nstdout {out}\nstderr {err}"
            ));
            continue;
        };
        for l in check(&v, name, &mut failures) {
            eprintln!("{l}");
        }
        if check_bounds(&v, name, &mut failures) == 0 {
            failures.push(format!("{name}: no case was held to this test's bounds"));
        }
        if name == "ramp-disturbance" {
            report_fig8_goal(&v);
        }
        if !ok {
            failures.push(format!("{name}: cell experiment failed: {err}"));
        }
        for f in [
            format!("{name}.svg"),
            format!("{name}.png"),
            "metrics.json".into(),
        ] {
            if !dir.join(&f).is_file() {
                failures.push(format!("{name}: {f} not written"));
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(failures.is_empty(), "{failures:#?}\n{}", c.log_text());
}

/// No cell at the configured router: `cell experiment` starts a private one, runs, stops it.
#[test]
fn starts_a_private_cell_when_none_runs() {
    let _cell = tests::cell_lock();
    let dir = out_dir("private");
    let router = format!("cell.router=\"tcp/127.0.0.1:{}\"", free_port());
    let out = std::process::Command::new(tests::bin_dir().join("cell"))
        .current_dir(repo_root())
        .env_remove("CARGO")
        .args([
            "--set",
            &router,
            "experiment",
            "force-ramp",
            "--short",
            "--json",
        ])
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("cell experiment");
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let v = json_of(&o, &e);
    let mut failures = Vec::new();
    check(&v, "force-ramp", &mut failures);
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(out.status.success(), "{e}");
    assert!(dir.join("force-ramp.png").is_file());
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `cell experiment contour --json` against `c` and, one second into the first contact,
/// freezes the processes `pids` together for 200 ms (SIGSTOP … SIGCONT). Returns (exit ok,
/// metrics JSON, stderr, out dir).
async fn contour_with_a_freeze(
    c: &TestCell,
    s: &zenoh::Session,
    pids: Vec<i32>,
    name: &str,
) -> (bool, Value, String, PathBuf) {
    use common::{codec, msg::HybridPhase, msg::HybridState, topic};
    let dir = out_dir(name);
    let states = s
        .declare_subscriber(topic::HYBRID_STATE.key(&c.cell.id))
        .await
        .expect("subscribe");
    let mut cmd = std::process::Command::new(tests::bin_dir().join("cell"));
    cmd.current_dir(repo_root())
        .arg("--config")
        .arg("deploy/config/sim.toml");
    for set in &c.sets {
        cmd.arg("--set").arg(set);
    }
    cmd.args([
        "experiment",
        "contour",
        "--json",
        "--out",
        dir.to_str().expect("path"),
    ]);
    let run = tokio::task::spawn_blocking(move || cmd.output().expect("cell experiment"));
    // One second (250 law steps) into the first contact, once.
    let mut in_contact = 0;
    while let Ok(Ok(sample)) =
        tokio::time::timeout(std::time::Duration::from_secs(60), states.recv_async()).await
    {
        let Ok(st) = codec::decode::<HybridState>(&sample.payload().to_bytes()) else {
            continue;
        };
        if st.phase == HybridPhase::Contact {
            in_contact += 1;
        }
        if in_contact == 250 {
            // SAFETY: signalling the test's own grandchildren; SIGCONT follows.
            for p in &pids {
                unsafe {
                    libc::kill(*p, libc::SIGSTOP);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
            for p in &pids {
                unsafe {
                    libc::kill(*p, libc::SIGCONT);
                }
            }
            break;
        }
    }
    assert_eq!(
        in_contact, 250,
        "{name}: the contour never held contact for 1 s"
    );
    let out = run.await.expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.success(), json_of(&stdout, &stderr), stderr, dir)
}

/// Issue 22's acceptance through the processes: a case stopped by freezing **every** cell
/// process together (200 ms) is retried after a proven stall — reported in `retries` with the
/// common gap, the first attempt's files kept in `first-run/` — and passes; a case stopped by
/// freezing **one** service (force, 200 ms) is not retried: it fails with that stop's reason
/// and no `retries`.
///
/// Full tier (three contour runs, ≈ 135 s): per change, `tests/cell.rs`
/// (`a_host_stall_is_proven_only_when_every_process_froze_together`) proves the stall rule
/// through the processes, and the lab's unit tests the retry's record and kept first run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full tier (.ci/full runs ignored tests): per change tests/cell.rs proves the stall rule through the processes"]
async fn a_case_is_retried_only_after_a_proven_host_stall() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("exp-stall", &[]);
    let s = tests::up_all(&c).await;
    let st = tests::statuses(&s, &c.cell).await.expect("statuses");
    let pid = |n: &str| st[n]["pid"].as_u64().expect("pid") as i32;

    let all: Vec<i32> = tests::DEFAULT_SERVICES.iter().map(|n| pid(n)).collect();
    let (ok, v, err, dir) = contour_with_a_freeze(&c, &s, all, "stall-all").await;
    let m = &v["cases"][0]["metrics"];
    eprintln!("every process frozen: ok {ok}, retries {}", m["retries"]);
    let retry = &m["retries"][0];
    assert!(
        retry["stall_ms"].as_f64().is_some_and(|ms| ms >= 100.0),
        "no proven retry after freezing every process: {m}\n{err}"
    );
    assert_eq!(
        retry["per_process_ms"].as_array().map(Vec::len),
        Some(tests::DEFAULT_SERVICES.len()),
        "{retry}"
    );
    let kept = std::path::PathBuf::from(retry["first_run"].as_str().expect("first_run"));
    assert!(
        kept.join("trace.csv").is_file(),
        "first attempt not kept: {kept:?}"
    );
    assert!(ok, "the retried case failed: {err}");
    // The retried run is a whole run of the contour from its placement: held to the short
    // form's gates and this file's bounds too.
    let mut failures = Vec::new();
    for l in check(&v, "contour", &mut failures) {
        eprintln!("{l}");
    }
    if check_bounds(&v, "contour", &mut failures) == 0 {
        failures.push("contour: no case was held to this test's bounds".into());
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let _ = std::fs::remove_dir_all(dir);

    let (ok, v, err, dir) = contour_with_a_freeze(&c, &s, vec![pid("force")], "stall-one").await;
    let m = &v["cases"][0]["metrics"];
    eprintln!(
        "force frozen alone: ok {ok}, aborted {}, retries {}",
        m["aborted"], m["retries"]
    );
    assert!(!ok, "a case stopped by one frozen service passed: {m}");
    assert!(m["retries"].is_null(), "retried without a host stall: {m}");
    assert!(m["aborted"].as_str().is_some_and(|a| !a.is_empty()), "{m}");
    assert!(err.contains("not a host stall"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
