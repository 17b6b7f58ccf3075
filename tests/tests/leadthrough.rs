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

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{
    codec,
    msg::{GuideState, JointCommand, SimTruth},
    topic,
};
use nalgebra::Vector3;
use tests::{up_all, wait_for, TestCell};

const TOOL_DOWN: [&str; 4] = ["0", "0", "1", "0"];
const MUSCLE_N_PER_M: f64 = 300.0;

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

/// Recorded topics.
#[derive(Default)]
struct Rec {
    truth: Vec<SimTruth>,
    guide: Vec<GuideState>,
    joint_cmd: Vec<JointCommand>,
}

/// Subscribes to the scoring topics; returns the shared record (cleared with `clear`).
async fn record(s: &zenoh::Session, c: &TestCell) -> (Arc<Mutex<Rec>>, Vec<zenoh::pubsub::Subscriber<()>>) {
    let rec = Arc::new(Mutex::new(Rec::default()));
    let mut subs = Vec::new();
    let r = rec.clone();
    subs.push(
        s.declare_subscriber(topic::SIM_TRUTH.key(&c.cell.id))
            .callback(move |smp| {
                if let Ok(m) = codec::decode::<SimTruth>(&smp.payload().to_bytes()) {
                    if let Ok(mut g) = r.lock() {
                        g.truth.push(m);
                    }
                }
            })
            .await
            .expect("sub"),
    );
    let r = rec.clone();
    subs.push(
        s.declare_subscriber(topic::GUIDE_STATE.key(&c.cell.id))
            .callback(move |smp| {
                if let Ok(m) = codec::decode::<GuideState>(&smp.payload().to_bytes()) {
                    if let Ok(mut g) = r.lock() {
                        g.guide.push(m);
                    }
                }
            })
            .await
            .expect("sub"),
    );
    let r = rec.clone();
    subs.push(
        s.declare_subscriber(topic::JOINT_COMMAND.key(&c.cell.id))
            .callback(move |smp| {
                if let Ok(m) = codec::decode::<JointCommand>(&smp.payload().to_bytes()) {
                    if let Ok(mut g) = r.lock() {
                        g.joint_cmd.push(m);
                    }
                }
            })
            .await
            .expect("sub"),
    );
    (rec, subs)
}

fn take(rec: &Arc<Mutex<Rec>>) -> Rec {
    std::mem::take(&mut *rec.lock().expect("lock"))
}

async fn scenario(s: &zenoh::Session, c: &TestCell, body: serde_json::Value) -> serde_json::Value {
    let key = format!("cell/{}/sim/rpc/scenario", c.cell.id);
    cell::cli::request(s, &key, Some(body.to_string()), Duration::from_secs(3))
        .await
        .unwrap_or_else(|e| panic!("scenario {body}: {e}"))
}

async fn lead(s: &zenoh::Session, c: &TestCell, body: serde_json::Value) -> anyhow::Result<serde_json::Value> {
    cell::lead::rpc(s, &c.cell, body).await
}

/// The TCP position from the simulator's truth (m).
async fn tcp_now(rec: &Arc<Mutex<Rec>>) -> Vector3<f64> {
    let p = wait_for(Duration::from_secs(5), || async {
        rec.lock().ok()?.truth.last().map(|t| Vector3::from(t.tcp_in_base_m))
    })
    .await;
    p.expect("sim truth")
}

/// Moves the tool (pointing down) to `xyz_mm`, waits, tares there.
async fn place_and_tare(c: &TestCell, xyz_mm: [f64; 3]) {
    let [x, y, z] = xyz_mm.map(|v| v.to_string());
    let mut args = vec!["move", &x, &y, &z];
    args.extend_from_slice(&TOOL_DOWN);
    args.push("--wait");
    let (ok, _, err) = c.cli(&args);
    assert!(ok, "move: {err}\n{}", c.log_text());
    let tared = wait_for(Duration::from_secs(30), || async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.cli(&["tare"]).0.then_some(())
    })
    .await;
    assert!(tared.is_some(), "tare never succeeded\n{}", c.log_text());
}

/// A hand pull from the TCP along `dir` for `length_m` at `speed_m_s`, released 2 s after
/// the end of its path (the hand leads the tool by its arm's and grasp's compliance).
fn hand(from: &Vector3<f64>, dir: &Vector3<f64>, length_m: f64, speed_m_s: f64, grasp: f64) -> serde_json::Value {
    let to = from + dir.normalize() * length_m;
    serde_json::json!({
        "set": {
            "hand.enabled": true,
            "hand.path": [[from.x, from.y, from.z], [to.x, to.y, to.z]],
            "hand.speed_m_s": speed_m_s,
            "hand.stiffness_n_per_m": grasp,
            "hand.release_after_s": 2.0,
            "hand.start_s": 0.3,
            // An operator pulling on purpose: a firmer arm than the scenario's relaxed 100 N/m
            // (human endpoint stiffness is a few hundred N/m in posture tasks).
            "hand.muscle_stiffness_n_per_m": MUSCLE_N_PER_M,
        },
        "reset": true,
    })
}

/// Streams the deadman keep-alive from this test until the returned sender is dropped/sent.
fn hold_enable(s: &zenoh::Session, c: &TestCell) -> tokio::sync::oneshot::Sender<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (s, cell) = (s.clone(), c.cell.clone());
    tokio::spawn(async move {
        let stop = async {
            let _ = rx.await;
        };
        let _ = cell::lead::stream_enable(&s, &cell, None, stop).await;
    });
    tx
}

/// What one pull gave.
#[derive(Debug, Clone, serde::Serialize)]
struct Pull {
    label: String,
    /// Time from the hand force reaching 3 N to the TCP having moved 1 mm along the pull (s).
    response_time_s: f64,
    /// RMS and max distance of the TCP from the pull line while moving (m).
    rms_path_deviation_m: f64,
    max_path_deviation_m: f64,
    /// Distance travelled along the pull (m).
    path_length_m: f64,
    /// Mean |hand force| while the TCP moved at 0.1 m/s ± 20 % (N).
    guide_force_at_0_1_m_s_n: Option<f64>,
    /// Largest commanded TCP speed (m/s), and the TCP speed from the truth (m/s).
    max_cmd_speed_m_s: f64,
    max_tcp_speed_m_s: f64,
    /// Stepping laws: the step lengths (m) from the commanded positions at step ends.
    steps_m: Vec<f64>,
    /// RMS of the TCP velocity above 2 Hz (m/s), from the truth.
    band_rms_above_2hz_m_s: f64,
    max_damping_scale: f64,
}

/// RMS above `hz` of a uniformly sampled signal (DFT; `dt` the sample period).
fn rms_above(x: &[f64], dt: f64, hz: f64) -> f64 {
    let n = x.len();
    if n < 8 {
        return 0.0;
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    let mut power = 0.0;
    let k0 = (hz * n as f64 * dt).ceil() as usize;
    for k in k0.max(1)..n / 2 {
        let (mut re, mut im) = (0.0, 0.0);
        for (i, v) in x.iter().enumerate() {
            let a = -2.0 * std::f64::consts::PI * (k * i) as f64 / n as f64;
            re += (v - mean) * a.cos();
            im += (v - mean) * a.sin();
        }
        power += 2.0 * (re * re + im * im) / (n as f64 * n as f64);
    }
    power.sqrt()
}

fn score(label: &str, rec: &Rec, from: &Vector3<f64>, dir: &Vector3<f64>) -> Pull {
    let u = dir.normalize();
    let tr: Vec<&SimTruth> = rec.truth.iter().collect();
    assert!(tr.len() > 100, "{label}: too few truth samples ({})", tr.len());
    let t_force = tr
        .iter()
        .find(|t| Vector3::from(t.hand_force_base_n).norm() >= 3.0)
        .map(|t| t.t_s);
    let t_move = tr
        .iter()
        .find(|t| (Vector3::from(t.tcp_in_base_m) - from).dot(&u) >= 0.001)
        .map(|t| t.t_s);
    let response_time_s = match (t_force, t_move) {
        (Some(a), Some(b)) => (b - a).max(0.0),
        _ => f64::INFINITY,
    };
    let mut dev = Vec::new();
    let mut along: f64 = 0.0;
    let mut speeds = Vec::new();
    let mut vx = Vec::new();
    let mut forces = Vec::new();
    for w in tr.windows(2) {
        let p = Vector3::from(w[1].tcp_in_base_m) - from;
        let a = p.dot(&u);
        along = along.max(a);
        let dt = w[1].t_s - w[0].t_s;
        if dt <= 0.0 {
            continue;
        }
        let v = (Vector3::from(w[1].tcp_in_base_m) - Vector3::from(w[0].tcp_in_base_m)) / dt;
        speeds.push(v.norm());
        vx.push(v.dot(&u));
        if a > 0.002 {
            dev.push((p - u * a).norm());
        }
        if (v.norm() - 0.1).abs() < 0.02 {
            forces.push(Vector3::from(w[1].hand_force_base_n).norm());
        }
    }
    let rms = (dev.iter().map(|d| d * d).sum::<f64>() / dev.len().max(1) as f64).sqrt();
    let max_dev = dev.iter().fold(0.0f64, |m, d| m.max(*d));
    let dt = (tr[tr.len() - 1].t_s - tr[0].t_s) / (tr.len() - 1) as f64;
    // Steps: the commanded position each time the step counter rises.
    let mut ends = Vec::new();
    for w in rec.guide.windows(2) {
        if w[1].steps > w[0].steps {
            ends.push(Vector3::from(w[1].tcp_cmd_m));
        }
    }
    let mut steps_m = Vec::new();
    let mut prev = *from;
    if let Some(first) = rec.guide.first() {
        prev = Vector3::from(first.tcp_cmd_m);
    }
    for e in ends {
        steps_m.push((e - prev).norm());
        prev = e;
    }
    Pull {
        label: label.into(),
        response_time_s,
        rms_path_deviation_m: rms,
        max_path_deviation_m: max_dev,
        path_length_m: along,
        guide_force_at_0_1_m_s_n: (forces.len() > 20)
            .then(|| forces.iter().sum::<f64>() / forces.len() as f64),
        max_cmd_speed_m_s: rec
            .guide
            .iter()
            .map(|g| Vector3::from(g.twist.linear_m_s).norm())
            .fold(0.0, f64::max),
        max_tcp_speed_m_s: speeds.iter().fold(0.0, |m, v| m.max(*v)),
        steps_m,
        band_rms_above_2hz_m_s: rms_above(&vx, dt, 2.0),
        max_damping_scale: rec.guide.iter().map(|g| g.damping_scale).fold(1.0, f64::max),
    }
}

fn write_trace(label: &str, rec: &Rec) {
    let mut s = String::from("t_s,tcp_x_m,tcp_y_m,tcp_z_m,hand_fx_n,hand_fy_n,hand_fz_n,hand_active\n");
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

/// One pull with `law` from the current TCP along `dir`; returns its score.
#[allow(clippy::too_many_arguments)]
async fn pull(
    s: &zenoh::Session,
    c: &TestCell,
    rec: &Arc<Mutex<Rec>>,
    label: &str,
    law: &str,
    dir: Vector3<f64>,
    length_m: f64,
    speed_m_s: f64,
    grasp: f64,
) -> Pull {
    scenario(s, c, serde_json::json!({ "set": { "hand.enabled": false } })).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let from = tcp_now(rec).await;
    let r = lead(s, c, serde_json::json!({ "guide": { "law": law } })).await;
    assert!(r.is_ok(), "{label}: guide refused: {r:?}\n{}", c.log_text());
    let en = hold_enable(s, c);
    take(rec);
    scenario(s, c, hand(&from, &dir, length_m, speed_m_s, grasp)).await;
    // The pull takes length/speed; the hand lets go 2 s after; then settle.
    let secs = 0.3 + length_m / speed_m_s + 2.0 + 1.0;
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let data = take(rec);
    let _ = en.send(());
    write_trace(label, &data);
    let p = score(label, &data, &from, &dir);
    eprintln!("{label}: {}", serde_json::to_string(&p).unwrap_or_default());
    p
}

/// Cai Figs. 6–7: pulls along tool x, y and z with both laws. The TCP starts following within
/// 0.2 s; with the stiffness law each step is d = 10 mm within 0.5 mm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_along_tool_axes_with_both_laws() {
    let c = lead_cell("axes", &[]);
    let s = up_all(&c).await;
    let (rec, _subs) = record(&s, &c).await;
    place_and_tare(&c, [400.0, 0.0, 400.0]).await;
    // Tool pointing down: tool x = base −x, tool y = base +y, tool z = base −z.
    let axes = [
        ("x", Vector3::new(-1.0, 0.0, 0.0)),
        ("y", Vector3::new(0.0, 1.0, 0.0)),
        ("z", Vector3::new(0.0, 0.0, -1.0)),
    ];
    let mut all = Vec::new();
    for law in ["admittance", "stiffness"] {
        for (name, dir) in axes {
            let label = format!("{law}-tool-{name}");
            let p = pull(&s, &c, &rec, &label, law, dir, 0.06, 0.1, 300.0).await;
            assert!(
                p.response_time_s <= 0.2,
                "{label}: TCP started following after {:.3} s",
                p.response_time_s
            );
            assert!(p.path_length_m > 0.04, "{label}: moved only {:.3} m", p.path_length_m);
            if law == "stiffness" {
                assert!(!p.steps_m.is_empty(), "{label}: no steps");
                for st in &p.steps_m {
                    assert!((st - 0.01).abs() <= 0.0005, "{label}: step {:.4} m", st);
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
}
