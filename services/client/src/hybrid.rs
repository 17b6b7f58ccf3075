//! `cell hybrid TASK.toml`: starts a hybrid task, reports progress, records its traces (CSV);
//! `lab::score::hybrid` scores them (`metrics.json`).
//!
//! The traces are control's `control/hybrid_state` (references, measured force and position
//! in {C}, phase, output) and, for plant tasks, the simulator's ground truth from
//! `sim/plant/state` (the surface's force on the hand) — used for scoring only.

use std::{
    io::Write,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use common::{
    codec,
    config::CellSection,
    msg::{self, HybridPhase, HybridState, HybridTask, Profile, TaskRobot},
    topic,
};
use control::hybrid::AXES;
use zenoh::Session;

/// One recorded row.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub state: HybridState,
    /// Ground truth of the plant (surface force on the hand, x and y), when recorded.
    /// Ground truth: the force applied by the tool (hand) in {C}, x, y, z; plant: x, y.
    pub truth_force: Option<[f64; 3]>,
    /// Plant tasks: the hand's true position in the plane (x, y, 0; base = {C}), the truth
    /// sample at or just before the row.
    pub truth_position: Option<[f64; 3]>,
}

/// A finished (or aborted) run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub task: HybridTask,
    pub rows: Vec<Row>,
    /// Plant tasks: the ground truth at the plant's rate (1 kHz), task time and the surface's
    /// force on the hand turned into the force applied by the hand (x, y).
    pub truth: Vec<(f64, [f64; 2])>,
    pub aborted: Option<String>,
    /// What the cell did for [`AFTER_END_S`] after the task's end — a stop and its coming to
    /// rest (issue 41: the trace ended at the stop; what the force did after it was recorded
    /// nowhere).
    pub after: Vec<AfterRow>,
}

/// How long the trace goes on after a task's end (s).
pub const AFTER_END_S: f64 = 1.0;

/// One sample after a task's end: the force service's estimate (what control saw, base, at
/// the TCP) or the simulator's truth (the surfaces' force on the tool, base, and the true
/// TCP), `t_s` after the end (the estimate on the host's monotonic clock, the truth on the
/// simulator's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AfterRow {
    pub t_s: f64,
    pub truth: bool,
    pub force_base_n: [f64; 3],
    pub tcp_m: Option<[f64; 3]>,
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Directory for the traces (`trace.csv`, `truth.csv`, `after_end.csv`; created). The
    /// metrics (`metrics.json`) are the scorer's: `lab::score::hybrid::score_run`.
    pub out: Option<PathBuf>,
    /// Print a progress line every so often (none when quiet).
    pub progress: bool,
}

/// Publishes `task`, follows it to its end, returns the traces (scored by
/// `lab::score::hybrid::score_run`).
pub async fn run(
    s: &Session,
    cell: &CellSection,
    mut task: HybridTask,
    opts: &RunOptions,
) -> anyhow::Result<Outcome> {
    let states = s
        .declare_subscriber(topic::HYBRID_STATE.key(&cell.id))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    let plant = s
        .declare_subscriber(topic::PLANT_STATE.key(&cell.id))
        .with(zenoh::handlers::RingChannel::new(4096))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    if task.robot == TaskRobot::Arm {
        wait_for_usable_wrench(s, cell, Duration::from_secs(1)).await;
    }
    // The world's truth at the tool (arm tasks on the simulator; absent on a real cell).
    let world = s
        .declare_subscriber(topic::SIM_TRUTH.key(&cell.id))
        .with(zenoh::handlers::RingChannel::new(8192))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    let mut world_truth: Vec<(std::time::Instant, [f64; 3])> = Vec::new();
    // The force service's estimate, for the trace after the end.
    let estimates = s
        .declare_subscriber(topic::WRENCH_ESTIMATE.key(&cell.id))
        .with(zenoh::handlers::RingChannel::new(4096))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    let mut row_at: Vec<std::time::Instant> = Vec::new();
    task.stamp = crate::cli::stamp();
    let bytes = codec::encode(&task)?;
    s.put(topic::HYBRID_TASK.key(&cell.id), bytes)
        .await
        .map_err(|e| anyhow::anyhow!("publish the task: {e}"))?;
    let mut rows: Vec<Row> = Vec::new();
    let mut truth: Vec<(f64, [f64; 2])> = Vec::new();
    let mut truth_pos: Vec<[f64; 2]> = Vec::new();
    let mut aborted = None;
    let mut last_print = std::time::Instant::now();
    let first_timeout = Duration::from_secs(3);
    let started = std::time::Instant::now();
    let mut motion_id = None;
    let mut seen_live = false;
    loop {
        let timeout = if rows.is_empty() {
            first_timeout.saturating_sub(started.elapsed())
        } else {
            Duration::from_secs(2)
        };
        let sample = match tokio::time::timeout(timeout, states.recv_async()).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => anyhow::bail!("subscription closed"),
            Err(_) => {
                let why = control_error(s, cell, rows.is_empty()).await;
                if rows.is_empty() {
                    anyhow::bail!("the task did not start within {first_timeout:?}: {why}");
                }
                aborted = Some(format!("control went silent: {why}"));
                break;
            }
        };
        let Ok(st) = codec::decode::<HybridState>(&sample.payload().to_bytes()) else {
            continue;
        };
        // A task's states: one motion (arm) — ignore states of an earlier task.
        // Plant states carry motion id 0, arm states their motion's: the trailing states of an
        // earlier task of the other kind are not this task's (found running an arm task right
        // before a plant task: the arm's late `Done` ended the plant task at its first row).
        if (task.robot == TaskRobot::Plant) != (st.motion_id == 0) {
            continue;
        }
        // A task that is coming to rest (issue 19 item 10) keeps publishing its last,
        // terminal state until the next task starts: this task's first state is a live one.
        let terminal = matches!(st.phase, HybridPhase::Done | HybridPhase::Aborted);
        if !seen_live && terminal {
            continue;
        }
        seen_live = true;
        if task.robot == TaskRobot::Arm && *motion_id.get_or_insert(st.motion_id) != st.motion_id {
            continue;
        }
        while let Ok(Some(p)) = plant.try_recv() {
            if let Ok(ps) = codec::decode::<msg::PlantState>(&p.payload().to_bytes()) {
                truth.push((ps.t_s, [-ps.contact_force_n[0], -ps.contact_force_n[1]]));
                truth_pos.push(ps.hand_pos_m);
            }
        }
        while let Ok(Some(w)) = world.try_recv() {
            if let Ok(t) = codec::decode::<msg::SimTruth>(&w.payload().to_bytes()) {
                world_truth.push((std::time::Instant::now(), t.contact_force_base_n));
            }
        }
        rows.push(Row {
            state: st,
            truth_force: None,
            truth_position: None,
        });
        row_at.push(std::time::Instant::now());
        if opts.progress && last_print.elapsed() > Duration::from_millis(500) {
            last_print = std::time::Instant::now();
            eprintln!("{}", progress_line(&task, &st));
        }
        match st.phase {
            HybridPhase::Done => break,
            HybridPhase::Aborted => {
                aborted = Some(control_error(s, cell, false).await);
                break;
            }
            _ => {}
        }
    }
    let after = trace_after_end(&world, &estimates, common::clock::mono_ns()).await;
    // The plant states' time is the law's clock (`clock_s`): task time = clock − (clock − t)
    // of the first row.
    let mut truth_task = Vec::new();
    if let (TaskRobot::Plant, Some(first)) = (task.robot, rows.first().copied()) {
        attach_truth(&mut rows, &truth, &truth_pos);
        let t0 = first.state.clock_s - first.state.t_s;
        let last = rows.last().map_or(0.0, |r| r.state.t_s);
        truth_task = truth
            .iter()
            .map(|(t, f)| (t - t0, *f))
            .filter(|(t, _)| *t >= 0.0 && *t <= last)
            .collect();
    }
    if task.robot == TaskRobot::Arm && !world_truth.is_empty() {
        attach_world_truth(&mut rows, &row_at, &world_truth);
    }
    let out = Outcome {
        task,
        rows,
        truth: truth_task,
        aborted,
        after,
    };
    if let Some(dir) = &opts.out {
        write(dir, &out)?;
    }
    Ok(out)
}

/// The force service's estimate and the simulator's truth from `end_ns` (host monotonic) to
/// [`AFTER_END_S`] after it, timed from it (both stamped on the host's monotonic clock). The
/// rings must still hold the samples since `end_ns` (`cell hybrid` drains them through the
/// task; `cell guide` does not, its rings hold seconds of samples).
pub(crate) async fn trace_after_end(
    world: &zenoh::pubsub::Subscriber<zenoh::handlers::RingChannelHandler<zenoh::sample::Sample>>,
    estimates: &zenoh::pubsub::Subscriber<
        zenoh::handlers::RingChannelHandler<zenoh::sample::Sample>,
    >,
    end_ns: u64,
) -> Vec<AfterRow> {
    let until_ns = end_ns + (AFTER_END_S * 1e9) as u64;
    let mut after = Vec::new();
    loop {
        let now = common::clock::mono_ns();
        while let Ok(Some(w)) = world.try_recv() {
            if let Ok(t) = codec::decode::<common::msg::SimTruth>(&w.payload().to_bytes()) {
                let at = t.stamp.source_mono_ns;
                if (end_ns..=until_ns).contains(&at) {
                    after.push(AfterRow {
                        t_s: (at - end_ns) as f64 * 1e-9,
                        truth: true,
                        force_base_n: t.contact_force_base_n,
                        tcp_m: Some(t.tcp_in_base_m),
                    });
                }
            }
        }
        while let Ok(Some(e)) = estimates.try_recv() {
            if let Ok(w) = codec::decode::<common::msg::WrenchEstimate>(&e.payload().to_bytes()) {
                let at = w.stamp.source_mono_ns;
                if (end_ns..=until_ns).contains(&at) {
                    after.push(AfterRow {
                        t_s: (at - end_ns) as f64 * 1e-9,
                        truth: false,
                        force_base_n: w.base.force_n,
                        tcp_m: None,
                    });
                }
            }
        }
        if now >= until_ns {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    after.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    after
}

/// Hybrid states of a plant task carry the plant time of their step (`clock_s`), the clock of
/// `PlantState::t_s`: each row gets the truth sample at or just before it.
fn attach_truth(rows: &mut [Row], truth: &[(f64, [f64; 2])], position: &[[f64; 2]]) {
    let mut j = 0;
    for r in rows.iter_mut() {
        let t = r.state.clock_s;
        while j + 1 < truth.len() && truth[j + 1].0 <= t {
            j += 1;
        }
        let Some(tr) = truth.get(j) else {
            return;
        };
        r.truth_force = Some([tr.1[0], tr.1[1], 0.0]);
        r.truth_position = position.get(j).map(|p| [p[0], p[1], 0.0]);
    }
}

/// Arm tasks: the simulator's contact force (surfaces on the tool, base) nearest in arrival
/// time to each row (the two clocks differ; arrival order is what both share, to a few ms),
/// turned into the force the tool applies, in the row's {C}.
fn attach_world_truth(
    rows: &mut [Row],
    row_at: &[std::time::Instant],
    truth: &[(std::time::Instant, [f64; 3])],
) {
    let mut j = 0;
    for (r, at) in rows.iter_mut().zip(row_at) {
        while j + 1 < truth.len() && truth[j + 1].0 <= *at {
            j += 1;
        }
        let q = r.state.frame_in_base.quat_wxyz;
        let rot = nalgebra::UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(
            q[0], q[1], q[2], q[3],
        ));
        let applied = -nalgebra::Vector3::from(truth[j].1);
        let c = rot.inverse() * applied;
        r.truth_force = Some([c.x, c.y, c.z]);
    }
}

/// Right after `cell tare` the estimate settles for a moment (flagged `NotTared`): waits up to
/// `timeout` for a usable one so that a task sent straight after a tare is not refused. Control
/// makes the decision; this only avoids the race.
pub async fn wait_for_usable_wrench(s: &Session, cell: &CellSection, timeout: Duration) {
    let Ok(sub) = s
        .declare_subscriber(topic::WRENCH_ESTIMATE.key(&cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
    else {
        return;
    };
    let deadline = tokio::time::Instant::now() + timeout;
    while let Ok(Ok(sample)) = tokio::time::timeout_at(deadline, sub.recv_async()).await {
        if let Ok(w) = codec::decode::<msg::WrenchEstimate>(&sample.payload().to_bytes()) {
            if w.fault == msg::WrenchFault::None {
                return;
            }
        }
    }
}

/// Control's word on why a task ended (its stop reason), or — `not_started`: a task that never
/// started — why it was refused (its last error; an older stop reason would be another task's).
async fn control_error(s: &Session, cell: &CellSection, not_started: bool) -> String {
    // Control's status is a snapshot refreshed right after the cycle that ended the task,
    // which can reach a client after the task's last state: a task that ended without a stop
    // reason in the snapshot is asked again, for up to 0.6 s, before an older error counts.
    if !not_started {
        for _ in 0..4 {
            let stop = crate::cli::status(s, cell, Some("control"))
                .await
                .ok()
                .and_then(|v| v.first().map(|c| c["detail"]["stop_reason"].is_string()));
            if stop != Some(false) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
    match crate::cli::status(s, cell, Some("control")).await {
        Ok(v) => v
            .first()
            .map(|c| {
                let (stop, err) = (
                    c["detail"]["stop_reason"].as_str(),
                    c["last_error"].as_str(),
                );
                let why = if not_started {
                    err.or(stop)
                } else {
                    stop.or(err)
                };
                why.unwrap_or("no fault reported: an operator's stop or another mode requested")
                    .to_string()
            })
            .unwrap_or_else(|| "control did not answer its status".into()),
        Err(e) => format!("control status: {e}"),
    }
}

#[allow(clippy::needless_range_loop)] // axis k of several arrays
fn progress_line(task: &HybridTask, st: &HybridState) -> String {
    let mut parts = vec![format!(
        "t {:>6.2}/{:.1} s  {:<11}",
        st.t_s,
        task.duration_s,
        format!("{:?}", st.phase)
    )];
    for k in 0..6 {
        if task.force_axes[k] {
            let unit = if k < 3 { "N" } else { "N·m" };
            parts.push(format!(
                "F{} {:>6.2}/{:.2} {unit}",
                AXES[k], st.force[k], st.force_ref[k]
            ));
        } else if !matches!(task.reference[k], Profile::Constant(v) if v == 0.0) {
            let (scale, unit) = if k < 3 {
                (1e3, "mm")
            } else {
                (1f64.to_degrees(), "°")
            };
            parts.push(format!(
                "{} {:>7.2}/{:.2} {unit}",
                AXES[k],
                st.position[k] * scale,
                st.position_ref[k] * scale
            ));
        }
    }
    parts.join("  ")
}

/// Writes the traces (`trace.csv`, `truth.csv`, `after_end.csv`) into `dir`.
pub fn write(dir: &Path, out: &Outcome) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("trace.csv");
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut head = vec!["t_s".to_string(), "phase".into()];
    for pre in ["force_ref", "force", "position_ref", "position", "output"] {
        for a in AXES {
            head.push(format!("{pre}_{a}"));
        }
    }
    head.push("limited".into());
    head.push("bridged".into());
    head.push("seating".into());
    head.push("truth_force_x".into());
    head.push("truth_force_y".into());
    head.push("truth_force_z".into());
    for pre in ["gains_for_n_per_m", "stiffness_estimate_n_per_m"] {
        for a in &AXES[..3] {
            head.push(format!("{pre}_{a}"));
        }
    }
    head.push("truth_position_x".into());
    head.push("truth_position_y".into());
    head.push("ref_time_s".into());
    head.push("speed_scale".into());
    writeln!(f, "{}", head.join(","))?;
    for r in &out.rows {
        let s = &r.state;
        let mut v = vec![format!("{:.6}", s.t_s), format!("{:?}", s.phase)];
        for a in [s.force_ref, s.force, s.position_ref, s.position, s.output] {
            v.extend(a.iter().map(|x| format!("{x:.6}")));
        }
        v.push(s.limited.to_string());
        v.push(u8::from(s.bridged).to_string());
        v.push(u8::from(s.seating).to_string());
        match r.truth_force {
            Some(f) => v.extend(f.iter().map(|x| format!("{x:.6}"))),
            None => v.extend([String::new(), String::new(), String::new()]),
        }
        for a in [s.gains_for_n_per_m, s.stiffness_estimate_n_per_m] {
            v.extend(a.iter().map(|x| format!("{x:.1}")));
        }
        match r.truth_position {
            Some(p) => v.extend(p[..2].iter().map(|x| format!("{x:.7}"))),
            None => v.extend([String::new(), String::new()]),
        }
        v.push(format!("{:.6}", s.ref_time_s));
        v.push(format!("{:.4}", s.speed_scale));
        writeln!(f, "{}", v.join(","))?;
    }
    f.flush()?;
    if !out.truth.is_empty() {
        let path = dir.join("truth.csv");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        writeln!(f, "t_s,truth_force_x,truth_force_y")?;
        for (t, [x, y]) in &out.truth {
            writeln!(f, "{t:.6},{x:.6},{y:.6}")?;
        }
        f.flush()?;
    }
    write_after_end(&dir.join("after_end.csv"), &out.after)?;
    Ok(())
}

/// Writes the trace after an end (`after_end.csv`); nothing when there is none.
pub(crate) fn write_after_end(path: &Path, after: &[AfterRow]) -> anyhow::Result<()> {
    if after.is_empty() {
        return Ok(());
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(
        f,
        "t_after_end_s,source,force_base_x,force_base_y,force_base_z,tcp_x,tcp_y,tcp_z"
    )?;
    for r in after {
        let [x, y, z] = r.force_base_n;
        let tcp = r.tcp_m.map_or(",,".to_string(), |p| {
            format!("{:.7},{:.7},{:.7}", p[0], p[1], p[2])
        });
        writeln!(
            f,
            "{:.6},{},{x:.4},{y:.4},{z:.4},{tcp}",
            r.t_s,
            if r.truth { "truth" } else { "estimate" }
        )?;
    }
    f.flush()?;
    Ok(())
}
