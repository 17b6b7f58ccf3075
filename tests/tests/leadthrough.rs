//! Hand-guided lead-through, teach and playback through the real service processes against
//! `cell-sim` (issue: lead-through teaching). The operator is the simulator's scripted hand
//! (a 2 kg arm on a grasp spring–damper, 0.15 s reaction delay, docs/simulator.md); the tool's
//! inertia is in the F/T truth. Control sees only the F/T sensor and the joints.
//!
//! Scored on the simulator's ground truth (`sim/truth`: TCP position, the hand's force) and on
//! what control commanded (`control/guide_state`), what kinematics sent robot-io
//! (`kin/joint_cmd`, on the robot's cycle count) and robot-io's own counters.
//!
//! Every run writes its traces (CSV) and metrics (JSON) under `<tmp>/leadthrough-<pid>/`.
//!
//! Tiers (`tests::full_tier()`, issue 40). Per change: the 45° pull with all three laws (the
//! experiments' `lead-through-45` short form is its duplicate and runs in the full tier only),
//! stability on the stiff grasp with the light tool and hands off, the speed cap, wall and
//! deadman, teach → save → restart → play (the experiments' `teach-playback` short form's
//! proof), the protective stop. Full tier only: the pulls along all three tool axes with both
//! laws (per change: `tests/experiments.rs`'s `lead-through-axes` short form, tool x with both
//! laws, held to the same bounds) and the other three grasp × tool combinations.
// A failed check is written `!(figure <= bound)`, so that a NaN figure fails it too.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::time::Duration;

use cell::leadexp::{self, hand_request, Pull, PullSpec, Rec, Recorder};
use common::msg::{JointCommand, SimTruth};
use nalgebra::Vector3;
use tests::{up_all, wait_for, Report, TestCell};

const TOOL_DOWN: [&str; 4] = ["0", "0", "1", "0"];

fn out_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("leadthrough-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&d);
    d
}

fn lead_cell(name: &str, extra: &[&str]) -> TestCell {
    let mut sets = vec!["sim.scenario=\"scenarios/lead-through.toml\""];
    sets.extend_from_slice(extra);
    TestCell::start(name, &sets)
}

async fn scenario(s: &zenoh::Session, c: &TestCell, body: serde_json::Value) -> serde_json::Value {
    let key = format!("cell/{}/sim/rpc/scenario", c.cell.id);
    cell::cli::request(s, &key, Some(body.to_string()), Duration::from_secs(3))
        .await
        .unwrap_or_else(|e| panic!("scenario {body}: {e}"))
}

async fn lead(
    s: &zenoh::Session,
    c: &TestCell,
    body: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    cell::lead::rpc(s, &c.cell, body).await
}

/// Waits (at most 2 s) for a wrench estimate without a fault flag: after a tare the filter
/// restarts on the new zero and the estimates are flagged until it has settled.
async fn wrench_usable(s: &zenoh::Session, c: &TestCell) {
    use common::msg::{WrenchEstimate, WrenchFault};
    let sub = s
        .declare_subscriber(common::topic::WRENCH_ESTIMATE.key(&c.cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
        .expect("subscribe wrench");
    let usable = wait_for(Duration::from_secs(2), || async {
        let smp = tokio::time::timeout(Duration::from_millis(200), sub.recv_async())
            .await
            .ok()?
            .ok()?;
        let e: WrenchEstimate = common::codec::decode(&smp.payload().to_bytes()).ok()?;
        (e.fault == WrenchFault::None).then_some(())
    })
    .await;
    assert!(
        usable.is_some(),
        "no usable wrench estimate 2 s after the tare\n{}",
        c.log_text()
    );
}

/// Moves the tool (pointing down) to `xyz_mm`, waits, tares there.
async fn place_and_tare(c: &TestCell, xyz_mm: [f64; 3]) {
    let [x, y, z] = xyz_mm.map(|v| v.to_string());
    let mut args = vec!["move", &x, &y, &z];
    args.extend_from_slice(&TOOL_DOWN);
    args.push("--wait");
    let (ok, _, err) = c.cli_repeat_after_stall(&args);
    assert!(ok, "move: {err}\n{}", c.log_text());
    if let Err(why) = tests::tare_named_causes(c, Duration::from_secs(12)).await {
        panic!("tare at {xyz_mm:?} mm refused: {why}\n{}", c.log_text());
    }
}

fn write_trace(label: &str, rec: &Rec) {
    let mut s =
        String::from("t_s,tcp_x_m,tcp_y_m,tcp_z_m,hand_fx_n,hand_fy_n,hand_fz_n,hand_active\n");
    for t in &rec.truth {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            t.t_s,
            t.tcp_in_base_m[0],
            t.tcp_in_base_m[1],
            t.tcp_in_base_m[2],
            t.hand_force_base_n[0],
            t.hand_force_base_n[1],
            t.hand_force_base_n[2],
            u8::from(t.hand_active)
        ));
    }
    let _ = std::fs::write(out_dir().join(format!("{label}.csv")), s);
}

/// One pull with `law` from the current TCP along `dir` (cell::leadexp's pull: repeated
/// once when a proven host stall held the session, cell::stall); returns its score. A guide session that ended
/// during the pull fails the test with control's reason and the cell's log.
#[allow(clippy::too_many_arguments)]
async fn pull(
    s: &zenoh::Session,
    c: &TestCell,
    rec: &Recorder,
    label: &str,
    law: &str,
    dir: Vector3<f64>,
    length_m: f64,
    speed_m_s: f64,
    grasp: f64,
) -> Pull {
    let guide = serde_json::json!({ "law": law });
    pull_with(s, c, rec, label, guide, dir, length_m, speed_m_s, grasp)
        .await
        .0
}

/// A pull with a guide request of its own (law and parameter overrides).
#[allow(clippy::too_many_arguments)]
async fn pull_with(
    s: &zenoh::Session,
    c: &TestCell,
    rec: &Recorder,
    label: &str,
    guide: serde_json::Value,
    dir: Vector3<f64>,
    length_m: f64,
    speed_m_s: f64,
    grasp: f64,
) -> (Pull, Rec) {
    let mut spec = PullSpec::new(label, "admittance", dir, length_m);
    spec.guide = guide;
    spec.speed_m_s = speed_m_s;
    spec.grasp_n_per_m = grasp;
    let slug: String = label
        .chars()
        .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '-' })
        .collect();
    // The cell's id (unique per test cell) in the name: two tests' pulls of the same label
    // never overwrite each other's kept first pull.
    let keep = std::env::temp_dir().join(format!("leadthrough-{}-{slug}-first-run.csv", c.cell.id));
    let (p, data) = match leadexp::pull(s, &c.cell, rec, &spec, &keep).await {
        Ok(r) => r,
        Err(e) => panic!("{label}: {e:#}\n{}", c.log_text()),
    };
    write_trace(label, &data);
    eprintln!("{label}: {}", serde_json::to_string(&p).unwrap_or_default());
    if let Some(first) = &p.retried_after {
        tests::report(
            Report::Retry,
            &format!(
                "{label}: pulled again after a proven host stall of {:.0} ms (first pull: {})",
                first.stall_ms, first.reason
            ),
        );
    }
    assert!(
        p.ended.is_none(),
        "{label}: guiding ended during the pull: {:?}\n{}",
        p.ended,
        c.log_text()
    );
    (p, data)
}

/// Cai Figs. 6–7: pulls along tool x, y and z with both laws. The TCP starts following within
/// 0.2 s; with the stiffness law each step is d = 10 mm within 0.5 mm.
///
/// Full tier: per change, `tests/experiments.rs` runs the experiments' `lead-through-axes`
/// short form (tool x with both laws) to the same bounds (response ≤ 0.2 s, path ≥ 40 mm,
/// steps 10 mm ± 0.5, and the true TCP's travel n·d ± 0.5 mm).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full tier (.ci/full runs ignored tests): per change tests/experiments.rs runs lead-through-axes' short form"]
async fn pulls_along_tool_axes_with_both_laws() {
    let _cell = tests::cell_lock();
    let c = lead_cell("axes", &[]);
    let s = up_all(&c).await;
    let rec = Recorder::start(&s, &c.cell).await.expect("recorder");
    place_and_tare(&c, [400.0, 0.0, 400.0]).await;
    // Tool pointing down: tool x = base −x, tool y = base +y, tool z = base −z.
    let axes = [
        ("x", Vector3::new(-1.0, 0.0, 0.0)),
        ("y", Vector3::new(0.0, 1.0, 0.0)),
        ("z", Vector3::new(0.0, 0.0, -1.0)),
    ];
    let mut all = Vec::new();
    let mut failures = Vec::new();
    for law in ["admittance", "stiffness"] {
        for (name, dir) in axes {
            let label = format!("{law}-tool-{name}");
            let p = pull(&s, &c, &rec, &label, law, dir, 0.06, 0.1, 300.0).await;
            if !(p.response_time_s <= 0.2) {
                failures.push(format!(
                    "{label}: TCP started following after {:.3} s",
                    p.response_time_s
                ));
            }
            if !(p.path_length_m > 0.04) {
                failures.push(format!("{label}: moved only {:.3} m", p.path_length_m));
            }
            if law == "stiffness" {
                if p.steps_m.is_empty() {
                    failures.push(format!("{label}: no steps"));
                }
                for st in &p.steps_m {
                    if !((st - 0.01).abs() <= 0.0005) {
                        failures.push(format!("{label}: step {st:.4} m"));
                    }
                }
            }
            all.push(p);
        }
        // Back towards the start for the second law.
        let (ok, _, err) = c.cli(&["move", "400", "0", "400", "0", "0", "1", "0", "--wait"]);
        assert!(ok, "{err}");
    }
    let _ = std::fs::write(
        out_dir().join("axes-metrics.json"),
        serde_json::to_string_pretty(&all).unwrap_or_default(),
    );
    assert!(failures.is_empty(), "{failures:#?}\n{}", c.log_text());
}

/// Cai Fig. 8: a 45° pull between tool x and y. Both laws stay within 2 mm RMS of the pull
/// line; the per-axis staircase baseline, in the same run, does not; guiding at 0.1 m/s with
/// the admittance law takes ≤ 10 N.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_at_45_degrees_smooth_laws_versus_staircase() {
    let _cell = tests::cell_lock();
    let c = lead_cell("fortyfive", &[]);
    let s = up_all(&c).await;
    let rec = Recorder::start(&s, &c.cell).await.expect("recorder");
    let dir = Vector3::new(-1.0, 1.0, 0.0).normalize();
    let mut all = Vec::new();
    let mut failures = Vec::new();
    for law in ["admittance", "stiffness", "staircase"] {
        place_and_tare(&c, [450.0, -100.0, 350.0]).await;
        let label = format!("{law}-45deg");
        let p = pull(&s, &c, &rec, &label, law, dir, 0.1, 0.1, 300.0).await;
        if !(p.path_length_m > 0.06) {
            failures.push(format!("{label}: moved only {:.3} m", p.path_length_m));
        }
        all.push(p);
    }
    let (adm, stf, stair) = (&all[0], &all[1], &all[2]);
    for p in [adm, stf] {
        if !(p.rms_path_deviation_m <= 0.002) {
            failures.push(format!(
                "{}: {:.2} mm RMS from the pull line",
                p.label,
                p.rms_path_deviation_m * 1e3
            ));
        }
    }
    if !(stair.rms_path_deviation_m > 2.0 * stf.rms_path_deviation_m.max(adm.rms_path_deviation_m))
    {
        failures.push(format!(
            "the staircase baseline should deviate more: {:.2} mm vs {:.2}/{:.2} mm",
            stair.rms_path_deviation_m * 1e3,
            adm.rms_path_deviation_m * 1e3,
            stf.rms_path_deviation_m * 1e3
        ));
    }
    match adm.guide_force_at_0_1_m_s_n {
        Some(f) if f <= 10.0 => {}
        Some(f) => failures.push(format!("guiding at 0.1 m/s took {f:.1} N")),
        None => failures.push("the admittance pull never reached 0.1 m/s".into()),
    }
    let _ = std::fs::write(
        out_dir().join("45deg-metrics.json"),
        serde_json::to_string_pretty(&all).unwrap_or_default(),
    );
    assert!(failures.is_empty(), "{failures:#?}\n{}", c.log_text());
}

/// Stable and non-drifting: grasp stiffness 300 and 3000 N/m, tool 0.5 and 3 kg; the TCP's
/// velocity above 2 Hz stays below 10 mm/s RMS (an oscillation of 1 mm at 7 Hz is 31 mm/s);
/// then hands off for 10 s with the sensor's noise and drift on: TCP drift ≤ 1 mm.
///
/// Per change: the stiff grasp (3000 N/m) with the light tool (0.5 kg), the combination that
/// moved most above 2 Hz (3.5 mm/s RMS measured; the other three 1.1–2.5 mm/s), then hands
/// off with it; the full tier runs all four combinations and the hands-off with the 3 kg tool
/// as well (both drifted 0.000 mm in 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stable_with_stiff_grasp_and_heavy_tool_and_no_drift_hands_off() {
    let _cell = tests::cell_lock();
    let c = lead_cell("stable", &[]);
    let s = up_all(&c).await;
    let rec = Recorder::start(&s, &c.cell).await.expect("recorder");
    let mut all = Vec::new();
    let mut failures = Vec::new();
    let combos: &[(f64, f64)] = if tests::full_tier() {
        &[(0.5, 300.0), (0.5, 3000.0), (3.0, 300.0), (3.0, 3000.0)]
    } else {
        &[(0.5, 3000.0)]
    };
    let mut tool_kg = 0.5;
    for &(mass, grasp) in combos {
        if mass != tool_kg || all.is_empty() {
            // A new tool: identify its payload (the force service compensates its weight).
            scenario(
                &s,
                &c,
                serde_json::json!({ "set": { "hand.enabled": false, "tool.mass_kg": mass } }),
            )
            .await;
            let (ok, out, err) = c.cli_repeat_after_stall(&["payload", "identify"]);
            assert!(ok, "payload identify ({mass} kg): {out} {err}");
            tool_kg = mass;
        }
        place_and_tare(&c, [400.0, -50.0, 400.0]).await;
        let label = format!("admittance-grasp{grasp}-tool{mass}kg");
        let p = pull(
            &s,
            &c,
            &rec,
            &label,
            "admittance",
            Vector3::new(0.0, 1.0, 0.0),
            0.08,
            0.1,
            grasp,
        )
        .await;
        if !(p.band_rms_above_2hz_m_s <= 0.01) {
            failures.push(format!(
                "{label}: {:.1} mm/s RMS above 2 Hz (damping scale up to {:.1})",
                p.band_rms_above_2hz_m_s * 1e3,
                p.max_damping_scale
            ));
        }
        all.push(p);
    }
    // Hands off, guiding enabled, 10 s: with the tool on (per change 0.5 kg), and in the full
    // tier with both tools.
    let mut drifts = Vec::new();
    let hands_off: &[f64] = if tests::full_tier() {
        &[3.0, 0.5]
    } else {
        &[0.5]
    };
    for &mass in hands_off {
        if mass != tool_kg {
            scenario(
                &s,
                &c,
                serde_json::json!({ "set": { "hand.enabled": false, "tool.mass_kg": mass } }),
            )
            .await;
            let (ok, out, err) = c.cli_repeat_after_stall(&["payload", "identify"]);
            assert!(ok, "payload identify ({mass} kg): {out} {err}");
            tool_kg = mass;
        } else {
            scenario(
                &s,
                &c,
                serde_json::json!({ "set": { "hand.enabled": false } }),
            )
            .await;
        }
        place_and_tare(&c, [400.0, 0.0, 400.0]).await;
        // The filter restarts on the tare's new zero: guiding needs a usable estimate.
        wrench_usable(&s, &c).await;
        let r = lead(&s, &c, serde_json::json!({ "guide": {} })).await;
        let token = cell::lead::enable_token(r.as_ref().expect("guide")).expect("token");
        let en = leadexp::hold_enable(&s, &c.cell, token);
        // Guiding is on once control says so (at most 2 s), then the record starts.
        let guiding = wait_for(Duration::from_secs(2), || async {
            let st = tests::statuses(&s, &c.cell).await.ok()?;
            (st.get("control")?["detail"]["mode"] == "LeadThrough").then_some(())
        })
        .await;
        assert!(
            guiding.is_some(),
            "hands off ({mass} kg): guiding did not start"
        );
        let p0 = rec.tcp_now().await.expect("sim truth");
        rec.take();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let data = rec.take();
        let _ = en.send(());
        let drift = data
            .truth
            .iter()
            .map(|t| (Vector3::from(t.tcp_in_base_m) - p0).norm())
            .fold(0.0f64, f64::max);
        eprintln!(
            "hands off 10 s ({mass} kg tool): drift {:.3} mm",
            drift * 1e3
        );
        if !(drift <= 0.001) {
            failures.push(format!(
                "hands off ({mass} kg tool): drift {:.3} mm",
                drift * 1e3
            ));
        }
        drifts.push(serde_json::json!({ "tool_kg": mass, "drift_m": drift }));
        let (ok, _, err) = c.cli(&["mode", "idle"]);
        assert!(ok, "{err}");
    }
    let _ = std::fs::write(
        out_dir().join("stability-metrics.json"),
        serde_json::to_string_pretty(&serde_json::json!({ "pulls": all, "hands_off": drifts }))
            .unwrap_or_default(),
    );
    assert!(failures.is_empty(), "{failures:#?}\n{}", c.log_text());
}

const WALL_Y: f64 = 0.3;

/// The speed cap (0.25 m/s) and a virtual wall (workspace y ≤ 0.3 m) are never exceeded
/// while a stiff grasp pulls fast into the wall; releasing the deadman stops the arm within
/// 0.5 s + braking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speed_cap_walls_and_deadman() {
    let _cell = tests::cell_lock();
    // The cell's box (the ceiling a session may only tighten) reaches x 0.6, z 0.7 here; the
    // session moves the y wall in to 0.3 m.
    let c = lead_cell(
        "limits",
        &["control.guide.workspace_max_m=[0.6, 0.35, 0.7]"],
    );
    let s = up_all(&c).await;
    let rec = Recorder::start(&s, &c.cell).await.expect("recorder");
    place_and_tare(&c, [400.0, 100.0, 400.0]).await;
    let (p, data) = pull_with(
        &s,
        &c,
        &rec,
        "wall",
        serde_json::json!({ "law": "admittance", "workspace_max_m": [0.6, WALL_Y, 0.7] }),
        Vector3::new(0.0, 1.0, 0.0),
        0.35,
        0.5,
        3000.0,
    )
    .await;
    let max_y = rec_max_y(&out_dir().join("wall.csv"));
    eprintln!(
        "wall: max TCP y {:.4} m, max speed cmd {:.3} / truth {:.3} m/s",
        max_y, p.max_cmd_speed_m_s, p.max_tcp_speed_m_s
    );
    assert!(
        p.max_cmd_speed_m_s <= 0.25 + 1e-9,
        "commanded {:.3} m/s",
        p.max_cmd_speed_m_s
    );
    // What the cell put on the wire for the robot: the joint references per robot cycle
    // (kin/joint_cmd), as TCP speed through the arm's FK with the mounted tool.
    let arm = {
        let cfg = tests::repo_root().join("deploy/config/sim.toml");
        leadexp::set_config(Some(&cfg), &c.sets);
        leadexp::arm_and_poses().expect("arm").0
    };
    let tcp = |q: &[f64; 6]| arm.fk(q).map(|t| t.translation.vector).ok();
    let ref_speed = data
        .joint_cmd
        .windows(2)
        .filter(|w| w[1].cycle == w[0].cycle + 1)
        .filter_map(|w| Some((tcp(&w[1].q_rad)? - tcp(&w[0].q_rad)?).norm() / 0.004))
        .fold(0.0f64, f64::max);
    eprintln!("wall: references on the wire up to {ref_speed:.3} m/s (TCP)");
    assert!(ref_speed <= 0.25 * 1.02, "references at {ref_speed:.3} m/s");
    // The simulated robot tracks them, in its own time: 0.250–0.255 m/s measured, also under a
    // 3-process CPU load. (Before the robot's period went on the wire the references advanced
    // in wall time, and a simulator slowed by the load saw up to 0.29 m/s.) A late command that
    // robot-io replaced by a hold is caught up by the servo: bounded loosely, as a check of the
    // simulator, not of the cell.
    assert!(
        p.max_tcp_speed_m_s <= 0.25 * 1.3,
        "TCP {:.3} m/s",
        p.max_tcp_speed_m_s
    );
    assert!(max_y <= WALL_Y + 2e-4, "passed the wall: y {max_y:.4} m");
    assert!(
        max_y > WALL_Y - 0.01,
        "never reached the wall: y {max_y:.4} m"
    );

    // Deadman: pull, then stop refreshing the enable mid-pull.
    place_and_tare(&c, [400.0, -150.0, 400.0]).await;
    scenario(
        &s,
        &c,
        serde_json::json!({ "set": { "hand.enabled": false } }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let from = rec.tcp_now().await.expect("sim truth");
    // A second client streams enables without the session's token from the start: they must
    // not keep the session alive (issue 19 item 7).
    let rogue = leadexp::hold_enable(&s, &c.cell, 0);
    let r = lead(&s, &c, serde_json::json!({ "guide": {} })).await;
    let token = cell::lead::enable_token(r.as_ref().expect("guide")).expect("token");
    let en = leadexp::hold_enable(&s, &c.cell, token);
    rec.take();
    let mut spec = PullSpec::new("deadman", "admittance", Vector3::new(0.0, 1.0, 0.0), 0.3);
    spec.speed_m_s = 0.15;
    scenario(&s, &c, hand_request(&from, &spec)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The release, on the host's monotonic clock (every bus stamp's clock, the simulator's
    // truth included): the enable stream ends here.
    let released_ns = common::clock::mono_ns();
    let _ = en.send(());
    // After the release the session's own token comes back (a pendant reconnecting): it must
    // not resume guiding either; only a new guide request would.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let back = leadexp::hold_enable(&s, &c.cell, token);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let data = rec.take();
    let status = tests::statuses(&s, &c.cell)
        .await
        .expect("status")
        .remove("control")
        .expect("control status");
    let _ = (rogue.send(()), back.send(()));
    let deadman = &status["detail"]["deadman"];
    eprintln!("deadman binding: {deadman}");
    assert!(
        deadman["enables_ignored"].as_u64().unwrap_or(0) >= 20,
        "the other client's and the released token's enables were not ignored: {deadman}"
    );
    assert_eq!(deadman["releases"].as_u64(), Some(1), "{deadman}");
    assert_eq!(deadman["bound"].as_bool(), Some(false), "{deadman}");
    // No enabled cycle after the release: once `enabled` goes false after having been true,
    // it stays false (the first cycles may run before the first enable arrives).
    let first_on = data
        .guide
        .iter()
        .position(|g| g.enabled)
        .expect("an enabled cycle");
    let first_off = first_on
        + data.guide[first_on..]
            .iter()
            .position(|g| !g.enabled)
            .expect("a released cycle");
    assert!(
        data.guide[first_off..].iter().all(|g| !g.enabled),
        "guiding resumed after the release"
    );
    scenario(
        &s,
        &c,
        serde_json::json!({ "set": { "hand.enabled": false } }),
    )
    .await;
    // On control's side: from the last enabled cycle to a zero command.
    let last_on = data
        .guide
        .iter()
        .rposition(|g| g.enabled)
        .expect("enabled cycles");
    let v0 = Vector3::from(data.guide[last_on].twist.linear_m_s).norm();
    let t_on = data.guide[last_on].t_s;
    let stop = data.guide[last_on..]
        .iter()
        .find(|g| Vector3::from(g.twist.linear_m_s).norm() == 0.0)
        .expect("stopped");
    let braking = stop.t_s - t_on;
    eprintln!("deadman: moving at {v0:.3} m/s; zero command {braking:.3} s after the timeout");
    assert!(v0 > 0.02, "was not moving when released ({v0})");
    assert!(braking <= v0 / 3.0 + 0.02, "braking took {braking:.3} s");
    // The timeout itself, from the measured release: the TCP (truth, by its stamp on the same
    // monotonic clock) is still within the deadman timeout (0.5 s; the last enable went out at
    // most one 50 ms period before the release) + braking + the servo's lag (0.15 s) of it.
    let tr = &data.truth;
    let p_end = Vector3::from(tr.last().expect("truth").tcp_in_base_m);
    let moved_last_ns = tr
        .iter()
        .rev()
        .find(|t| (Vector3::from(t.tcp_in_base_m) - p_end).norm() > 1e-4)
        .map_or(0, |t| t.stamp.source_mono_ns);
    assert!(
        tr.first()
            .is_some_and(|t| t.stamp.source_mono_ns < released_ns)
            && tr
                .last()
                .is_some_and(|t| t.stamp.source_mono_ns > released_ns + 1_500_000_000),
        "the truth record does not span the release and 1.5 s after it"
    );
    let after_release = (moved_last_ns as f64 - released_ns as f64) * 1e-9;
    eprintln!("deadman: TCP still {after_release:.3} s after the release");
    assert!(
        after_release <= 0.5 + v0 / 3.0 + 0.15,
        "TCP moved until {after_release:.3} s after the release"
    );
}

/// `cell play three --dir DIR` against the cell, in the background (output piped).
fn spawn_play(c: &TestCell, dir: &str) -> std::process::Child {
    let mut cmd = std::process::Command::new(tests::bin_dir().join("cell"));
    cmd.current_dir(tests::repo_root())
        .arg("--config")
        .arg("deploy/config/sim.toml");
    for st in &c.sets {
        cmd.arg("--set").arg(st);
    }
    cmd.args(["play", "three", "--dir", dir])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cell play")
}

fn rec_max_y(csv: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(csv).expect("trace");
    text.lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(2)?.parse::<f64>().ok())
        .fold(f64::MIN, f64::max)
}

/// Teach three waypoints by hand, save, stop and restart the whole cell, load and play: the
/// TCP passes each waypoint within 0.5 mm, no joint reference exceeds its speed or
/// acceleration limit (per robot cycle), and progress reaches 100 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teach_save_restart_load_and_play() {
    let _cell = tests::cell_lock();
    let dir = out_dir().join("programs");
    let dir_s = dir.to_str().expect("path").to_string();
    let mut taught = Vec::new();
    {
        let c = lead_cell("teach", &[]);
        let s = up_all(&c).await;
        let rec = Recorder::start(&s, &c.cell).await.expect("recorder");
        place_and_tare(&c, [400.0, -100.0, 400.0]).await;
        let (ok, out, err) = c.cli(&["teach", "clear"]);
        assert!(ok, "{out} {err}");
        for (i, d) in [
            Vector3::new(0.0, 1.0, 0.0),
            Vector3::new(-1.0, 0.0, -0.5),
            Vector3::new(0.5, 1.0, 0.0),
        ]
        .iter()
        .enumerate()
        {
            pull(
                &s,
                &c,
                &rec,
                &format!("teach-{i}"),
                "admittance",
                *d,
                0.07,
                0.1,
                300.0,
            )
            .await;
            let (ok, out, err) = c.cli(&["teach", "record", &format!("wp{i}")]);
            assert!(ok, "record: {out} {err}");
            taught.push(rec.tcp_now().await.expect("sim truth"));
        }
        let (ok, out, err) = c.cli_repeat_after_stall(&["payload", "identify"]);
        assert!(ok, "payload identify: {out} {err}");
        let (ok, out, err) = c.cli(&["teach", "save", "three", "--dir", &dir_s]);
        assert!(ok, "save: {out} {err}");
    }
    // A new cell (the old one is stopped): load and play from elsewhere.
    let c = lead_cell("play", &[]);
    let s = up_all(&c).await;
    let rec = Recorder::start(&s, &c.cell).await.expect("recorder");
    let (ok, _, err) = c.cli(&["move", "350", "100", "300", "0", "0", "1", "0", "--wait"]);
    assert!(ok, "{err}");
    let (ok, out, err) = c.cli(&["teach", "load", "three", "--dir", &dir_s]);
    assert!(ok, "load: {out} {err}");
    let (ok, out, err) = c.cli_repeat_after_stall(&["payload", "identify"]);
    assert!(ok, "payload identify: {out} {err}");
    // A program taught with another tool is refused, saying what differs.
    let mut other = control::program::Program::load(&dir, "three").expect("program");
    other.tool.translation_m[2] += 0.005;
    other.save(&dir, "other-tool").expect("save");
    let (ok, _, err) = c.cli(&["play", "other-tool", "--dir", &dir_s]);
    assert!(!ok && err.contains("tool translation differs"), "{err}");
    let limited = |st: &std::collections::BTreeMap<String, serde_json::Value>| {
        st["robot-io"]["detail"]["safety"]["limited_cycles"]
            .as_u64()
            .expect("limited_cycles")
    };
    let limited_before = limited(&tests::statuses(&s, &c.cell).await.expect("status"));
    rec.take();
    // Play in the background; pause, check the arm stands, resume.
    let child = spawn_play(&c, &dir_s);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (ok, out, err) = c.cli(&["playback", "pause"]);
    assert!(ok, "pause: {out} {err}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let a = rec.tcp_now().await.expect("sim truth");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = rec.tcp_now().await.expect("sim truth");
    assert!(
        (a - b).norm() < 1e-5,
        "paused arm moved {:.3} mm",
        (a - b).norm() * 1e3
    );
    let (ok, out, err) = c.cli(&["playback", "resume"]);
    assert!(ok, "resume: {out} {err}");
    let done = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("cell play output");
    let err = String::from_utf8_lossy(&done.stderr).to_string();
    assert!(done.status.success(), "play: {err}\n{}", c.log_text());
    assert!(err.contains("Paused") && err.contains("Done"), "{err}");
    let st = tests::statuses(&s, &c.cell).await.expect("status");
    let limited_after = limited(&st);
    // The references robot-io put on the wire, on its clock: within the limits (its
    // supervisor's guarantee), and how often it had to step in: on a loaded host its clock's
    // jitter (datagrams handled back to back) makes some of our 0.8 × a_max steps look faster
    // than they are.
    let sent = &st["robot-io"]["detail"]["egm"]["references"];
    let (sv, sa) = (
        sent["peak_speed_ratio"].as_f64().expect("speed ratio"),
        sent["peak_accel_ratio"].as_f64().expect("accel ratio"),
    );
    let cycles = rec.joint_commands();
    let n = cycles.max(1) as f64;
    let frac = (limited_after - limited_before) as f64 / n;
    eprintln!(
        "robot-io: references ≤ {sv:.2} speed, {sa:.2} acceleration × limits; limited {} of {} playback cycles",
        limited_after - limited_before,
        cycles
    );
    let mut failures = Vec::new();
    if !(sv <= 1.0 + 1e-6 && sa <= 1.0 + 1e-6) {
        failures.push(format!("robot-io's references over the limits: {sent}"));
    }
    // Reported, not gated: it measures this host's load (quiet: 0 %; the full suite: 7 %;
    // four cells on two cores: 53 %), not the planner, whose references are gated per robot
    // cycle on kin/joint_cmd below.
    eprintln!(
        "robot-io limited {:.0} % of the playback cycles",
        frac * 100.0
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let data = rec.take();
    // What the emulated IRC5 received over the playback (robot-io's figure above is its own,
    // recomputed from its replies: it cannot see a reply spoilt after it). The lead-through
    // world is clean (no EGM jitter): gated like robot-io's.
    let peaks = tests::received_reference_peaks(&data.truth);
    eprintln!("playback: {peaks}");
    if let Err(e) = peaks.check() {
        failures.push(e);
    }
    let program = control::program::Program::load(&dir, "three").expect("program");
    for (i, w) in program.waypoints.iter().enumerate() {
        let wp = Vector3::from(w.tcp_position_m);
        let closest = data
            .truth
            .iter()
            .map(|t| (Vector3::from(t.tcp_in_base_m) - wp).norm())
            .fold(f64::INFINITY, f64::min);
        eprintln!(
            "waypoint {i}: closest {:.3} mm (taught at {:.3} mm from it)",
            closest * 1e3,
            (taught[i] - wp).norm() * 1e3
        );
        if !(closest <= 0.0005) {
            failures.push(format!("waypoint {i} missed by {:.3} mm", closest * 1e3));
        }
    }
    // Joint references, per robot cycle (4 ms).
    let lim = kinematics::JointLimits::irb120();
    let acc = [1000.0f64, 1000.0, 1000.0, 1280.0, 1280.0, 1680.0].map(f64::to_radians);
    let cmds: Vec<&JointCommand> = data.joint_cmd.iter().collect();
    let mut worst_v: f64 = 0.0;
    let mut worst_a: f64 = 0.0;
    let mut where_a = String::new();
    for w in cmds.windows(3) {
        let (c0, c1, c2) = (w[0].cycle, w[1].cycle, w[2].cycle);
        if c1 != c0 + 1 || c2 != c1 + 1 {
            continue;
        }
        #[allow(clippy::needless_range_loop)]
        for j in 0..6 {
            let v1 = (w[1].q_rad[j] - w[0].q_rad[j]) / 0.004;
            let v2 = (w[2].q_rad[j] - w[1].q_rad[j]) / 0.004;
            worst_v = worst_v.max(v2.abs() / lim.max_speed[j]);
            let r = ((v2 - v1) / 0.004).abs() / acc[j];
            if r > worst_a {
                worst_a = r;
                where_a = format!("cycle {c1} joint {j}: v {v1:.4} → {v2:.4} rad/s");
            }
        }
    }
    eprintln!(
        "playback: worst joint speed {:.0} %, acceleration {:.0} % of the limits",
        worst_v * 100.0,
        worst_a * 100.0
    );
    if !(worst_v <= 1.0) {
        failures.push(format!("joint speed {:.0} % of its limit", worst_v * 100.0));
    }
    if !(worst_a <= 1.0) {
        failures.push(format!(
            "joint acceleration {:.0} % of its limit at {where_a}",
            worst_a * 100.0
        ));
    }
    assert!(failures.is_empty(), "{failures:#?}\n{}", c.log_text());

    // On request: straight TCP lines between the waypoints (from the last one, so with an
    // approach line to the first).
    rec.take();
    let (ok, out, err) = c.cli(&["play", "three", "--dir", &dir_s, "--cartesian"]);
    assert!(ok, "cartesian play: {out} {err}\n{}", c.log_text());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let data = rec.take();
    for (i, w) in program.waypoints.iter().enumerate() {
        let wp = Vector3::from(w.tcp_position_m);
        let closest = data
            .truth
            .iter()
            .map(|t| (Vector3::from(t.tcp_in_base_m) - wp).norm())
            .fold(f64::INFINITY, f64::min);
        eprintln!("cartesian: waypoint {i}: closest {:.3} mm", closest * 1e3);
        if !(closest <= 0.0005) {
            failures.push(format!(
                "cartesian: waypoint {i} missed by {:.3} mm",
                closest * 1e3
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}\n{}", c.log_text());
    // Straight: between waypoints 1 and 2 the TCP stays near the line.
    let (a, b) = (
        Vector3::from(program.waypoints[1].tcp_position_m),
        Vector3::from(program.waypoints[2].tcp_position_m),
    );
    let u = (b - a).normalize();
    // The stretch from passing waypoint 1 to arriving at waypoint 2 (the approach line from
    // waypoint 2 back to waypoint 0 comes first in the record).
    let near =
        |t: &SimTruth, p: &Vector3<f64>| (Vector3::from(t.tcp_in_base_m) - p).norm() <= 0.0005;
    let w0 = Vector3::from(program.waypoints[0].tcp_position_m);
    let i0 = data
        .truth
        .iter()
        .position(|t| near(t, &w0))
        .expect("passed waypoint 0");
    let i1 = i0
        + data.truth[i0..]
            .iter()
            .position(|t| near(t, &a))
            .expect("passed waypoint 1");
    let i2 = i1
        + data.truth[i1..]
            .iter()
            .position(|t| near(t, &b))
            .expect("reached waypoint 2");
    let worst_line = data.truth[i1..=i2]
        .iter()
        .map(|t| Vector3::from(t.tcp_in_base_m) - a)
        .map(|d| (d - u * d.dot(&u)).norm())
        .fold(0.0f64, f64::max);
    eprintln!(
        "cartesian: worst distance from the line 1→2 {:.3} mm",
        worst_line * 1e3
    );
    assert!(
        worst_line <= 0.002,
        "cartesian path left the line by {:.3} mm",
        worst_line * 1e3
    );

    // A hold mid-playback (the controller stops EGM for 0.3 s: robot-io holds on the silence)
    // ends the playback for good, and `cell play` says so at once, with the reason: control
    // publishes the last state as Aborted under the playback's motion. From away from the
    // program, so that it is still approaching when the silence comes.
    let (ok, _, err) =
        c.cli_repeat_after_stall(&["move", "350", "100", "300", "0", "0", "1", "0", "--wait"]);
    assert!(ok, "{err}");
    let child = spawn_play(&c, &dir_s);
    tokio::time::sleep(Duration::from_millis(700)).await;
    tests::sim_fault(&s, &c, serde_json::json!({ "controller_stopped": true })).await;
    let stopped = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tests::sim_fault(&s, &c, serde_json::json!({ "controller_stopped": false })).await;
    let done = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("cell play output");
    let took = stopped.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&done.stderr).to_string();
    eprintln!("aborted playback: cell play ended {took:.2} s after the silence began");
    assert!(
        !done.status.success(),
        "an aborted playback exited 0: {err}"
    );
    assert!(
        err.contains("Aborted") && err.contains("RobotSilent"),
        "cell play should report the abort and its reason: {err}"
    );
    assert!(
        took < 1.5,
        "cell play noticed the abort only after {took:.2} s: {err}"
    );
}

/// Issue 19 item 6: a wrench above the guide's ceiling (60 N) ends the session with a
/// protective stop — checked on the unfiltered peak — that robot-io latches; the session's
/// deadman stream no longer moves the arm, a guide request is refused until the operator's
/// `cell reset --protective`, and then guides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrench_above_the_guide_ceiling_is_a_protective_stop() {
    let _cell = tests::cell_lock();
    let c = lead_cell("protect", &[]);
    let s = up_all(&c).await;
    let rec = Recorder::start(&s, &c.cell).await.expect("recorder");
    place_and_tare(&c, [400.0, 0.0, 400.0]).await;
    // The tare's average is taken over the next samples.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = lead(&s, &c, serde_json::json!({ "guide": {} })).await;
    let token = cell::lead::enable_token(r.as_ref().expect("guide")).expect("token");
    let en = leadexp::hold_enable(&s, &c.cell, token);
    tokio::time::sleep(Duration::from_millis(600)).await;
    rec.take();
    // A tool driven into something: 80 N on the tool along base −z.
    let hit = std::time::Instant::now();
    tests::sim_fault(
        &s,
        &c,
        serde_json::json!({"external_force_base_n": [0.0, 0.0, -80.0]}),
    )
    .await;
    let status = |s: zenoh::Session, cell: common::config::CellSection| async move {
        tests::statuses(&s, &cell)
            .await
            .ok()
            .and_then(|mut m| m.remove("control"))
    };
    let ended = wait_for(Duration::from_secs(3), || async {
        let st = status(s.clone(), c.cell.clone()).await?;
        (st["detail"]["mode"] == "Idle").then_some(st)
    })
    .await
    .expect("guiding did not end on 80 N");
    let seen_after = hit.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let data = rec.take();
    tests::sim_fault(
        &s,
        &c,
        serde_json::json!({"external_force_base_n": [0.0, 0.0, 0.0]}),
    )
    .await;
    let why = format!("{} {}", ended["detail"]["stop_reason"], ended["last_error"]);
    assert!(why.contains("protective stop: force"), "{why}");
    // The law pushed for at most a few cycles: the TCP's travel after the hit (truth).
    let p0 = Vector3::from(data.truth.first().expect("truth").tcp_in_base_m);
    let travel = data
        .truth
        .iter()
        .map(|t| (Vector3::from(t.tcp_in_base_m) - p0).norm())
        .fold(0.0, f64::max);
    // Guide states from the hit on: the last one, and how many cycles it pushed.
    let pushed = data.guide.iter().filter(|g| g.force_n[2] < -10.0).count();
    eprintln!(
        "protective stop: {why}; seen idle by a status poll {seen_after:.2} s after the \
         injection; the law ran {pushed} cycles with > 10 N; TCP travel {:.2} mm",
        travel * 1e3
    );
    assert!(travel < 0.005, "the TCP travelled {travel} m after the hit");
    // robot-io latched the protective stop (it survives control; `cell reset --protective`).
    let latched = wait_for(Duration::from_secs(1), || async {
        let st = tests::statuses(&s, &c.cell).await.ok()?;
        let safety = &st.get("robot-io")?["detail"]["safety"];
        (safety["level"] == "ProtectiveStop" && safety["reason"] == "ProtectiveRequest")
            .then_some(())
    })
    .await;
    assert!(
        latched.is_some(),
        "robot-io did not latch the protective stop: {:?}",
        tests::statuses(&s, &c.cell)
            .await
            .map(|m| m.get("robot-io").cloned())
    );
    // The session's own enable stream is still running: it must not resume anything.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let st = status(s.clone(), c.cell.clone()).await.expect("status");
    assert_eq!(st["detail"]["mode"], "Idle");
    assert_eq!(st["detail"]["deadman"]["bound"], false, "{}", st["detail"]);
    let _ = en.send(());
    // While latched a new guide request is refused; after the operator's reset one guides.
    let r = lead(&s, &c, serde_json::json!({ "guide": {} })).await;
    assert!(
        r.is_err(),
        "guiding while the protective stop is latched: {r:?}"
    );
    let (ok, _, err) = c.cli(&["reset", "--protective"]);
    assert!(ok, "reset: {err}");
    let r = lead(&s, &c, serde_json::json!({ "guide": {} })).await;
    assert!(r.is_ok(), "guide again: {r:?}");
    // The status is an observation refreshed on a mode change: wait for it (up to 1 s).
    let guiding = wait_for(Duration::from_secs(1), || async {
        let st = status(s.clone(), c.cell.clone()).await?;
        (st["detail"]["mode"] == "LeadThrough").then_some(())
    })
    .await;
    assert!(guiding.is_some(), "the new guide request did not guide");

    // Issue 41 item 2: an impact — 150 N on the tool within one sample, flagged `Spike` by
    // the force service (a jump > 100 N) and left out of the peak — is a protective stop in
    // guiding too, latched at robot-io (before: "wrench not usable: Spike", a smooth end).
    // This session is the operator's `cell guide --trace` (its guide request replaces the one
    // above, which never got an enable): it must exit non-zero naming control's stop, and its
    // trace must go on through the stop for a second (issue 41: the trace ended at the stop).
    let trace_dir = out_dir().join("impact-guide");
    let _ = std::fs::remove_dir_all(&trace_dir);
    let trace_arg = trace_dir.display().to_string();
    let accepted = |st: &serde_json::Value| st["detail"]["deadman"]["enables_accepted"].as_u64();
    let accepted_before = status(s.clone(), c.cell.clone())
        .await
        .and_then(|st| accepted(&st))
        .expect("control's deadman counts");
    let mut guide_cli = c.spawn_cli(&["guide", "--seconds", "20", "--trace", &trace_arg]);
    let bound = wait_for(Duration::from_secs(5), || async {
        let st = status(s.clone(), c.cell.clone()).await?;
        (st["detail"]["mode"] == "LeadThrough"
            && st["detail"]["deadman"]["bound"] == true
            && accepted(&st)? > accepted_before)
            .then_some(())
    })
    .await;
    assert!(
        bound.is_some(),
        "`cell guide` did not start a held session\n{}",
        c.log_text()
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    tests::sim_fault(
        &s,
        &c,
        serde_json::json!({"external_force_base_n": [0.0, 0.0, -150.0]}),
    )
    .await;
    let ended = wait_for(Duration::from_secs(3), || async {
        let st = status(s.clone(), c.cell.clone()).await?;
        (st["detail"]["mode"] == "Idle").then_some(st)
    })
    .await
    .expect("guiding did not end on the impact");
    // `cell guide` sees the end by itself (not at its 20 s), records a second more, exits.
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    let exited = loop {
        match guide_cli.try_wait() {
            Ok(Some(code)) => break Some(code),
            _ if std::time::Instant::now() >= deadline => break None,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    tests::sim_fault(
        &s,
        &c,
        serde_json::json!({"external_force_base_n": [0.0, 0.0, 0.0]}),
    )
    .await;
    let Some(code) = exited else {
        let _ = guide_cli.kill();
        panic!(
            "`cell guide` still ran 8 s after control ended its session\n{}",
            c.log_text()
        );
    };
    assert!(
        !code.success(),
        "`cell guide` exited 0 after a protective stop\n{}",
        c.log_text()
    );
    let metrics: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(trace_dir.join("metrics.json")).expect("guide metrics.json"),
    )
    .expect("metrics JSON");
    eprintln!("cell guide --trace: {metrics}");
    assert_eq!(metrics["ended_by"], "control", "{metrics}");
    assert!(
        metrics["reason"]
            .as_str()
            .is_some_and(|r| r.contains("protective stop")),
        "{metrics}"
    );
    // The trace goes on after the end: the estimate over (nearly) the whole second after it,
    // and the guide states recorded up to it.
    let after = std::fs::read_to_string(trace_dir.join("after_end.csv")).expect("after_end.csv");
    let estimate_s: Vec<f64> = after
        .lines()
        .skip(1)
        .filter(|l| l.contains(",estimate,"))
        .filter_map(|l| l.split(',').next()?.parse::<f64>().ok())
        .collect();
    let first_estimate_s = estimate_s.iter().copied().fold(f64::NAN, f64::min);
    let last_estimate_s = estimate_s.iter().copied().fold(f64::NAN, f64::max);
    // From the stop (control's last guide state), not from when `cell guide` saw it.
    assert!(
        first_estimate_s <= 0.02 && last_estimate_s >= 0.9,
        "the estimate's trace after the end covers {first_estimate_s}–{last_estimate_s} s"
    );
    assert!(
        after.lines().any(|l| l.contains(",truth,")),
        "no simulator truth after the end"
    );
    let guide_rows = std::fs::read_to_string(trace_dir.join("guide.csv")).expect("guide.csv");
    let pushed = guide_rows
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(6)?.parse::<f64>().ok())
        .filter(|fz| *fz < -100.0)
        .count();
    eprintln!("cell guide --trace: {pushed} guide state(s) with the impact's force");
    let why = format!("{} {}", ended["detail"]["stop_reason"], ended["last_error"]);
    assert!(
        why.contains("protective stop: wrench estimate Spike")
            || why.contains("protective stop: wrench estimate Saturated"),
        "{why}"
    );
    let latched = wait_for(Duration::from_secs(1), || async {
        let st = tests::statuses(&s, &c.cell).await.ok()?;
        let safety = &st.get("robot-io")?["detail"]["safety"];
        (safety["level"] == "ProtectiveStop" && safety["reason"] == "ProtectiveRequest")
            .then_some(())
    })
    .await;
    assert!(
        latched.is_some(),
        "robot-io did not latch the impact's stop"
    );
}
