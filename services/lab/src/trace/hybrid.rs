//! A hybrid task's record: control's `control/hybrid_state` (references, measured force and
//! position in {C}, phase, output) through the task and, on the simulator, its ground truth —
//! `sim/plant/state` for plant tasks (the surface's force on the hand), `sim/truth` for arm
//! tasks (the surfaces' force on the tool) — used for scoring only; then the second after the
//! end. `cell hybrid`, the demo and the experiments record through [`run`];
//! `crate::score::hybrid` scores the record.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::Context;
use common::{
    codec,
    config::CellSection,
    msg::{self, HybridState, HybridTask, TaskRobot},
    topic,
};
use control::hybrid::AXES;
use zenoh::Session;

use super::{ring, trace_after_end, write_after_end, AfterRow};

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
    /// What the cell did for [`super::AFTER_END_S`] after the task's end — a stop and its
    /// coming to rest (issue 41: the trace ended at the stop; what the force did after it was
    /// recorded nowhere).
    pub after: Vec<AfterRow>,
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Directory for the traces (`trace.csv`, `truth.csv`, `after_end.csv`; created). The
    /// metrics (`metrics.json`) are the scorer's: `crate::score::hybrid::score_run`.
    pub out: Option<PathBuf>,
    /// Print a progress line every so often (none when quiet).
    pub progress: bool,
}

/// Publishes `task`, follows it to its end (`client::hybrid::follow`) and records it, then
/// the second after the end; returns the record (scored by
/// `crate::score::hybrid::score_run`).
pub async fn run(
    s: &Session,
    cell: &CellSection,
    mut task: HybridTask,
    opts: &RunOptions,
) -> anyhow::Result<Outcome> {
    let plant = ring(s, topic::PLANT_STATE.key(&cell.id), 4096).await?;
    // The world's truth at the tool (arm tasks on the simulator; absent on a real cell).
    let world = ring(s, topic::SIM_TRUTH.key(&cell.id), 8192).await?;
    // The force service's estimate, for the trace after the end.
    let estimates = ring(s, topic::WRENCH_ESTIMATE.key(&cell.id), 4096).await?;
    let mut world_truth: Vec<(std::time::Instant, [f64; 3])> = Vec::new();
    let mut row_at: Vec<std::time::Instant> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut truth: Vec<(f64, [f64; 2])> = Vec::new();
    let mut truth_pos: Vec<[f64; 2]> = Vec::new();
    let aborted = client::hybrid::follow(s, cell, &mut task, opts.progress, |st| {
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
            state: *st,
            truth_force: None,
            truth_position: None,
        });
        row_at.push(std::time::Instant::now());
    })
    .await?;
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
