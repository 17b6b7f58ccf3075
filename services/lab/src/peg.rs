//! `cell experiment peg-in-hole` (Raibert & Craig 1981, Fig. 11): the simulated IRB 120 puts a
//! 5 mm peg into a hole in a plate (`deploy/config/scenarios/peg-in-hole.toml`, no chamfer)
//! from a position error of 3 mm in x and 2 mm in y, through the real processes, using only what
//! a real cell has (the F/T estimate and the measured TCP, through control's `HybridState`):
//!
//! 1. **approach**: a hybrid task, 5 N along −z of base until contact, x/y held, then 1 s of
//!    pressing;
//! 2. **torque-guided search**: a flat face pressed on a plate that overhangs the hole is carried
//!    by the part over the solid plate, so the contact's pressure centre lies on the side away
//!    from the hole: the measured torque about the TCP, `d = τ × F / |F|²`, points away from the
//!    hole, and its length — known from the peg's and the hole's radii (the part geometry, not
//!    the simulator) — gives the distance on the first reading. Near the hole that length is
//!    ill-conditioned, so the search then goes on the direction alone: a line search that
//!    grows its step until the direction flips and bisects after ([`Search`]). Each step is a
//!    hybrid task pressing 5 N along z while x/y ramp (position axes, 2 mm/s) by the planned
//!    move, then re-measures; the hole is found when the peg drops (z descends 0.5 mm below the
//!    plate);
//! 3. **insertion**: a hybrid task with x, y and z all force axes (0 N laterally: compliance
//!    that lets the wall's reaction centre the peg; 5 N down), stopped (hold) at 10 mm depth.
//!    A peg that enters wedged and slips free falls more than control's 5 mm travel bound after
//!    a lost contact; that task ends there and the next goes on from the TCP below the plate
//!    (at most 4, each said in the case's `notes`).
//!
//! Scored on the simulator's ground truth (`sim/truth`: the plate's force on the tool, the TCP)
//! and control's states: `success`, `time_to_target_s` (first contact → 10 mm deep),
//! `peak_force_n`, `max_position_error_m` (the position axes' largest deviation from their
//! reference during the search), the XY path. The clearance is a scenario parameter
//! (`surfaces.0.hole_radius_m`); the cases are 0.1 mm and the paper's 0.025 mm, both gated.

use std::{io::Write, path::Path, time::Duration};

use anyhow::Context;
use common::{
    codec,
    config::CellSection,
    msg::{self, HybridPhase, HybridState, HybridTask, Mode},
    topic,
};
use serde_json::{json, Value};
use zenoh::Session;

use client::cli;

use crate::{
    plot::{self, Figure, Panel, Series},
    score::{
        checks, fmt_value,
        peg::{Rec, Truth},
        target,
    },
    Options,
};

/// The peg's radius (m), as in the scenario.
const PEG_RADIUS_M: f64 = 0.005;
/// The hole's centre on the plate's top (m, base), as in the scenario.
const HOLE_M: [f64; 3] = [0.35, 0.0, 0.20];
/// Where the peg starts: the position error (m, base x and y).
const OFFSET_M: [f64; 2] = [0.003, 0.002];
/// Pressing force (N) during the search and the insertion.
const FORCE_N: f64 = 5.0;
/// The plate's contact stiffness the gains are designed for (N/m): the scenario's.
const STIFFNESS_N_PER_M: f64 = 1e5;
/// Insertion depth below the plate's top (m).
const DEPTH_M: f64 = 0.010;
/// The peg has dropped into the hole when it is this far below the plate level (m).
const DROP_M: f64 = 0.0005;
/// Scoring: the true TCP counts as inserted this close to `DEPTH_M` (control stops on its own
/// view of the depth; the true TCP trails it by the EGM round trip at the insertion's speed).
const DEPTH_TOLERANCE_M: f64 = 0.0005;
/// Lateral speed of a search step (m/s).
const STEP_SPEED_M_S: f64 = 0.002;
/// Search steps before giving up.
const MAX_STEPS: usize = 20;
/// Presses in place in a row (a reading at less than half the press force) before giving up.
const MAX_REPRESSES: usize = 3;
/// How long a press in place lasts (s): the re-approach after a lost contact runs at a few
/// mm/s, so the peg falls past `DROP_M` or re-seats on the plate well within it.
const REPRESS_S: f64 = 1.0;
/// Insertion tasks (each bounded by control's travel after a lost contact) before giving up.
const MAX_INSERT_TASKS: usize = 4;
/// Above this fraction of the peg's radius the pressure centre is on a thin crescent by the
/// rim, where its length says little about the offset: the search uses its direction only.
const CRESCENT: f64 = 0.85;
/// The line search's first step and its largest (m).
const LINE_STEP_M: f64 = 5e-4;
const LINE_STEP_MAX_M: f64 = 2e-3;

struct Follower {
    states: zenoh::pubsub::Subscriber<zenoh::handlers::RingChannelHandler<zenoh::sample::Sample>>,
    truth: zenoh::pubsub::Subscriber<zenoh::handlers::RingChannelHandler<zenoh::sample::Sample>>,
    t0: std::time::Instant,
    recs: Vec<Rec>,
    truths: Vec<Truth>,
    /// Motions of earlier tasks (control keeps publishing a finished task's states while it
    /// holds).
    done: Vec<u64>,
}

impl Follower {
    async fn new(s: &Session, cell: &CellSection) -> anyhow::Result<Self> {
        let states = s
            .declare_subscriber(topic::HYBRID_STATE.key(&cell.id))
            .with(zenoh::handlers::RingChannel::new(8192))
            .await
            .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
        let truth = s
            .declare_subscriber(topic::SIM_TRUTH.key(&cell.id))
            .with(zenoh::handlers::RingChannel::new(8192))
            .await
            .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
        Ok(Self {
            states,
            truth,
            t0: std::time::Instant::now(),
            recs: Vec::new(),
            truths: Vec::new(),
            done: Vec::new(),
        })
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn drain_truth(&mut self) {
        while let Ok(Some(w)) = self.truth.try_recv() {
            if let Ok(t) = codec::decode::<msg::SimTruth>(&w.payload().to_bytes()) {
                let now = self.now();
                self.truths.push(Truth {
                    t: now,
                    force: t.contact_force_base_n,
                    tcp: t.tcp_in_base_m,
                });
            }
        }
    }

    /// Drops whatever arrived before a new task; `motion` (the previous task's) is ignored
    /// from now on.
    fn flush(&mut self, motion: Option<u64>) {
        self.done.extend(motion);
        while let Ok(Some(_)) = self.states.try_recv() {}
        self.drain_truth();
    }

    /// The next state of motion `motion` (the first state seen fixes it), or `None` after
    /// `timeout` of silence.
    async fn next(
        &mut self,
        motion: &mut Option<u64>,
        stage: &'static str,
        timeout: Duration,
    ) -> anyhow::Result<Option<HybridState>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let sample = match tokio::time::timeout_at(deadline, self.states.recv_async()).await {
                Ok(Ok(s)) => s,
                Ok(Err(_)) => anyhow::bail!("subscription closed"),
                Err(_) => return Ok(None),
            };
            self.drain_truth();
            let Ok(st) = codec::decode::<HybridState>(&sample.payload().to_bytes()) else {
                continue;
            };
            if st.motion_id == 0
                || self.done.contains(&st.motion_id)
                || *motion.get_or_insert(st.motion_id) != st.motion_id
            {
                continue;
            }
            let t = self.now();
            self.recs.push(Rec { t, stage, st });
            return Ok(Some(st));
        }
    }
}

/// A hybrid task in a base-aligned frame with z down (`frame_rpy_deg = [180, 0, 0]`) whose
/// origin is `origin` (the TCP where the task starts, so torques are about the TCP).
///
/// The gains are fixed, made for the plate's stiffness: the search steps and the insertion are
/// short tasks whose tool slides from the start, so an on-line stiffness estimate (restarted
/// with each task) would never become usable and each task would only begin with 0.3 s of
/// gains for the cell's stiffest surface — with them the 0.1 mm peg took 19.5 s in one run and
/// was not inserted in another (the demo in a CI run, 2026-12-03).
fn task(
    name: &str,
    origin: [f64; 3],
    force_axes: &str,
    reference: &str,
    from_contact: bool,
    duration_s: f64,
) -> anyhow::Result<HybridTask> {
    let text = format!(
        "name = \"{name}\"\nrobot = \"arm\"\nframe = \"base\"\n\
         frame_origin_m = [{}, {}, {}]\nframe_rpy_deg = [180.0, 0.0, 0.0]\n\
         force_axes = [{force_axes}]\nfrom_contact = {from_contact}\nduration_s = {duration_s}\n\
         fixed_gains = true\n[reference]\n{reference}\n[gains]\nstiffness_n_per_m = {STIFFNESS_N_PER_M}\n\
         [limits]\nmax_force_n = 40.0\ndeviation_m = 0.002\n",
        origin[0], origin[1], origin[2]
    );
    control::taskfile::parse(&text).map_err(|e| anyhow::anyhow!("task: {}", e.join("; ")))
}

async fn send(s: &Session, cell: &CellSection, mut t: HybridTask) -> anyhow::Result<()> {
    client::hybrid::wait_for_usable_wrench(s, cell, Duration::from_secs(1)).await;
    t.stamp = cli::stamp();
    common::bus::put_message(s, topic::HYBRID_TASK, &topic::HYBRID_TASK.key(&cell.id), &t)
        .await
        .context("publish the task")
}

async fn tcp(s: &Session, cell: &CellSection) -> anyhow::Result<[f64; 3]> {
    Ok(cli::latest_tcp(s, cell, Duration::from_secs(2))
        .await?
        .position_m)
}

/// The pressure centre's distance from the TCP (m) of an aligned flat face of radius `rp`
/// pressed on a plate with a hole of radius `r`, its centre `e` from the hole's axis: the
/// centroid of the face minus the hole (the part geometry; uniform pressure).
fn centre_offset(e: f64, rp: f64, r: f64) -> f64 {
    let n = 80;
    let (mut a, mut sx) = (0.0, 0.0);
    for i in 0..n {
        for j in 0..n {
            let x = -rp + 2.0 * rp * (i as f64 + 0.5) / n as f64;
            let y = -rp + 2.0 * rp * (j as f64 + 0.5) / n as f64;
            if x * x + y * y > rp * rp || (x + e).powi(2) + y * y < r * r {
                continue;
            }
            a += 1.0;
            sx += x;
        }
    }
    if a > 0.0 {
        sx / a
    } else {
        0.0
    }
}

/// Inverts [`centre_offset`]: the offset from the hole whose pressure centre lies `d` from the
/// TCP (the largest e with centre_offset(e) ≥ d: it decreases with e).
fn offset_from_centre(d: f64, rp: f64, r: f64) -> f64 {
    let lo = (r - rp).max(0.0);
    let hi = rp + r;
    let k = 300;
    let mut best = lo;
    for i in 0..=k {
        let e = lo + (hi - lo) * i as f64 / k as f64;
        if centre_offset(e, rp, r) >= d {
            best = e;
        }
    }
    best
}

/// The torque-guided search's planner (pure: geometry and the measured pressure centre in, the
/// next lateral move out).
///
/// On the first reading, while the pressure centre lies well inside the face, its distance
/// inverts to the offset from the hole ([`offset_from_centre`]) and one move goes there. After
/// that, or when the first reading is on the crescent by the rim (`d ≥ CRESCENT · r_p`), only
/// its direction is used — near the hole the overlap is a crescent whose centroid hardly moves
/// with the offset (it tends to π/4 · r_p as the offset shrinks to the clearance), so its
/// length is ill-conditioned and noise or a lateral force can push it past the rim; the
/// direction —
/// it points from the hole's axis through the peg's, exactly, for a flat aligned face — and the
/// search becomes a line search along it: steps grow by 1.5× while the direction stays, and
/// once it flips (the peg crossed the hole) the hole is bracketed and every further step
/// halves (bisection). A step is within the clearance of the axis after about
/// log2(first step / clearance) flips. A bracket that shrinks below a quarter of the clearance
/// without a drop (the direction was off the line) starts the line search again.
#[derive(Debug, Clone, Default)]
struct Search {
    /// The line search's step (m), once it has begun.
    step_m: Option<f64>,
    /// Whether a flip has bracketed the hole.
    bracketed: bool,
    /// The direction of the last move (unit, base xy).
    prev_dir: Option<[f64; 2]>,
}

/// The next move of the search.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plan {
    /// Move by this much (m, base x and y); `line` when it is a line-search step.
    Move { by_m: [f64; 2], line: bool },
    /// No torque: the face is not pressing off-centre.
    NoTorque,
}

impl Search {
    /// From the pressure centre's offset `p` from the TCP (m, base x and y), the peg's radius
    /// `rp` and the hole's radius `r`: the next move.
    fn plan(&mut self, p: [f64; 2], rp: f64, r: f64) -> Plan {
        let d = p[0].hypot(p[1]);
        if d.is_nan() || d < 2e-4 {
            return Plan::NoTorque;
        }
        let u = [-p[0] / d, -p[1] / d];
        let flipped = self
            .prev_dir
            .is_some_and(|q| q[0] * u[0] + q[1] * u[1] < 0.0);
        let first = self.prev_dir.is_none();
        self.prev_dir = Some(u);
        let s = match self.step_m {
            None if first && d < CRESCENT * rp => {
                let e = offset_from_centre(d, rp, r);
                return Plan::Move {
                    by_m: [u[0] * e, u[1] * e],
                    line: false,
                };
            }
            None => LINE_STEP_M,
            Some(s) if self.bracketed => 0.5 * s,
            Some(s) if flipped => {
                self.bracketed = true;
                0.5 * s
            }
            Some(s) => (1.5 * s).min(LINE_STEP_MAX_M),
        };
        let s = if self.bracketed && s < 0.25 * (r - rp).max(1e-6) {
            self.bracketed = false;
            LINE_STEP_M * 0.4
        } else {
            s
        };
        self.step_m = Some(s);
        Plan::Move {
            by_m: [u[0] * s, u[1] * s],
            line: true,
        }
    }
}

/// Mean of the states' values `f` over the last `window` s of `recs` (one task's).
fn mean_last(recs: &[Rec], window: f64, f: impl Fn(&HybridState) -> f64) -> Option<f64> {
    let end = recs.last()?.t;
    let v: Vec<f64> = recs
        .iter()
        .filter(|r| r.t >= end - window && r.st.phase != HybridPhase::Done)
        .map(|r| f(&r.st))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// What one case measured.
struct CaseOut {
    label: String,
    clearance_m: f64,
    metrics: serde_json::Map<String, Value>,
    recs: Vec<Rec>,
    truths: Vec<Truth>,
    passed: bool,
    checks: Vec<Value>,
}

#[allow(clippy::too_many_lines)]
async fn run_case(
    s: &Session,
    cell: &CellSection,
    scenario_key: &str,
    clearance_m: f64,
    gate: bool,
    opts: &Options,
) -> anyhow::Result<CaseOut> {
    let label = format!("clearance {:.3} mm", clearance_m * 1e3);
    let timeout = Duration::from_secs(3);
    let start_mm = [
        (HOLE_M[0] + OFFSET_M[0]) * 1e3,
        (HOLE_M[1] + OFFSET_M[1]) * 1e3,
        HOLE_M[2] * 1e3 + 3.0,
    ];
    crate::steps::place(s, cell, [start_mm[0], start_mm[1], 320.0], 100.0).await?;
    cli::request(
        s,
        scenario_key,
        Some(json!({"load": "scenarios/peg-in-hole.toml"}).to_string()),
        timeout,
    )
    .await
    .context("loading the scenario")?;
    let mut set = opts.world.clone();
    set.insert(
        "surfaces.0.hole_radius_m".into(),
        json!(PEG_RADIUS_M + clearance_m),
    );
    cli::request(
        s,
        scenario_key,
        Some(json!({"set": Value::Object(set), "reset": true}).to_string()),
        timeout,
    )
    .await
    .context("setting the clearance")?;
    crate::steps::place(s, cell, start_mm, 100.0).await?;
    crate::steps::tare(s, cell).await?;

    let mut f = Follower::new(s, cell).await?;
    let mut notes: Vec<String> = Vec::new();
    let mut aborted: Option<String> = None;
    let mut contact_at: Option<f64> = None;
    let mut found_at: Option<f64> = None;
    let mut target_at: Option<f64> = None;
    let mut steps = 0usize;
    let quiet = Duration::from_secs(3);

    // 1. Approach and press.
    let origin = tcp(s, cell).await?;
    f.flush(None);
    send(
        s,
        cell,
        task(
            "peg-approach",
            origin,
            "\"z\"",
            &format!("z = {FORCE_N}"),
            true,
            1.0,
        )?,
    )
    .await?;
    let mut motion = None;
    let first = f.recs.len();
    loop {
        let Some(st) = f.next(&mut motion, "approach", quiet).await? else {
            aborted = Some(format!(
                "control went silent during the approach: {}",
                control_reason(s, cell).await
            ));
            break;
        };
        if contact_at.is_none() && st.phase == HybridPhase::Contact {
            contact_at = Some(f.now());
        }
        match st.phase {
            HybridPhase::Done => break,
            HybridPhase::Aborted => {
                aborted = Some(format!("approach: {}", control_reason(s, cell).await));
                break;
            }
            _ => {}
        }
    }
    // The plate's level: the TCP's height pressing on it (the measured TCP, base).
    let plate_z = tcp(s, cell).await?[2];
    let mut last = f.recs[first..].to_vec();
    let mut prev_motion = motion;

    // 2. Torque-guided search.
    let mut search = Search::default();
    let mut represses = 0usize;
    while aborted.is_none() && found_at.is_none() && steps < MAX_STEPS {
        let fz = mean_last(&last, 0.3, |s| s.force[2]).unwrap_or(0.0);
        let tx = mean_last(&last, 0.3, |s| s.force[3]).unwrap_or(0.0);
        let ty = mean_last(&last, 0.3, |s| s.force[4]).unwrap_or(0.0);
        // The pressure centre's offset from the TCP (base): τ_C = (−d_y F, −d_x F).
        let dx = -ty / fz.max(0.5);
        let dy = -tx / fz.max(0.5);
        let d = dx.hypot(dy);
        let hole_r = PEG_RADIUS_M + clearance_m;
        // A reading at less than half the press force is not planned from: the torque is then
        // mostly noise and friction on a wall, and the usual cause is a peg that started to
        // fall into the hole (contact lost, the task's time ran out before it was `DROP_M`
        // deep). A step sideways would wedge it; instead it presses again in place (no lateral
        // motion: it drops, or re-seats on the plate and gives a reading), at most
        // `MAX_REPRESSES` times in a row.
        // The next task: a press in place, or a search step towards the hole (its lateral
        // move, its length in time, its name, and what the progress line says).
        let (mx, my, dur, name, said) = if fz < 0.5 * FORCE_N {
            represses += 1;
            if represses > MAX_REPRESSES {
                notes.push(format!(
                    "after step {steps}: still only {fz:.2} N after {MAX_REPRESSES} presses in place"
                ));
                break;
            }
            let said =
                format!("after step {steps}: pressing only {fz:.2} N; pressing again in place");
            notes.push(said.clone());
            (
                0.0,
                0.0,
                REPRESS_S,
                format!("peg-repress-{steps}-{represses}"),
                said,
            )
        } else {
            represses = 0;
            // Towards the hole; {C} has y along −y of base.
            let (mx, my, line) = match search.plan([dx, dy], PEG_RADIUS_M, hole_r) {
                Plan::NoTorque => {
                    notes.push(format!(
                        "step {steps}: no torque ({:.2} mm pressure centre): the hole is not under the peg",
                        d * 1e3
                    ));
                    break;
                }
                Plan::Move { by_m, line } => (by_m[0], by_m[1], line),
            };
            steps += 1;
            let said = format!(
                "search step {steps}: pressure centre {:.2} mm at {fz:.1} N → {} ({:.3}, {:.3}) mm",
                d * 1e3,
                if line { "line step" } else { "move" },
                mx * 1e3,
                my * 1e3
            );
            let dur = (mx.hypot(my) / STEP_SPEED_M_S).max(0.3);
            (mx, my, dur, format!("peg-search-{steps}"), said)
        };
        let origin = tcp(s, cell).await?;
        let t = task(
            &name,
            origin,
            "\"z\"",
            &format!(
                "z = {FORCE_N}\nx = {{ ramp = {{ from = 0.0, to = {mx}, start_s = 0.0, duration_s = {dur} }} }}\n\
                 y = {{ ramp = {{ from = 0.0, to = {}, start_s = 0.0, duration_s = {dur} }} }}",
                -my
            ),
            false,
            dur + 0.8,
        )?;
        if opts.progress {
            eprintln!("      {said}");
        }
        f.flush(prev_motion);
        send(s, cell, t).await?;
        let mut motion = None;
        let first = f.recs.len();
        loop {
            let Some(st) = f.next(&mut motion, "search", quiet).await? else {
                aborted = Some(format!(
                    "control went silent during the search: {}",
                    control_reason(s, cell).await
                ));
                break;
            };
            // Dropped: the measured TCP below the plate's level.
            let z_now = origin[2] - st.position[2];
            if plate_z - z_now > DROP_M {
                found_at = Some(f.now());
                break;
            }
            match st.phase {
                HybridPhase::Done => break,
                HybridPhase::Aborted => {
                    aborted = Some(format!("search: {}", control_reason(s, cell).await));
                    break;
                }
                _ => {}
            }
        }
        last = f.recs[first..].to_vec();
        prev_motion = motion;
    }

    // 3. Insertion: compliant laterally, 5 N down, until 10 mm deep. The peg often enters
    // wedged (friction on the wall carries the 5 N: a contact), then slips free and falls
    // into the hole: control's travel bound after a lost contact (`reapproach_travel_m`,
    // 5 mm, the cell's ceiling) ends that task, as it would off a table's edge. Here the
    // application knows the peg is in the hole (the TCP below the plate's top), so it goes on
    // with a fresh task from where the last one ended — each one bounded by the same 5 mm —
    // and says so in the notes; at most `MAX_INSERT_TASKS` of them.
    if found_at.is_some() && aborted.is_none() {
        let mut segment = 0;
        'insert: while segment < MAX_INSERT_TASKS {
            segment += 1;
            let origin = tcp(s, cell).await?;
            let t = task(
                &format!("peg-insert-{segment}"),
                origin,
                "\"x\", \"y\", \"z\"",
                &format!("z = {FORCE_N}"),
                false,
                30.0,
            )?;
            f.flush(prev_motion);
            send(s, cell, t).await?;
            let mut motion = None;
            loop {
                let Some(st) = f.next(&mut motion, "insert", quiet).await? else {
                    aborted = Some(format!(
                        "control went silent during the insertion: {}",
                        control_reason(s, cell).await
                    ));
                    break 'insert;
                };
                let z_now = origin[2] - st.position[2];
                if plate_z - z_now >= DEPTH_M {
                    target_at = Some(f.now());
                    cli::set_mode(s, cell, Mode::Hold).await?;
                    break 'insert;
                }
                match st.phase {
                    HybridPhase::Done => {
                        notes.push("insertion: the task ended before the depth".into());
                        break 'insert;
                    }
                    HybridPhase::Aborted => {
                        let why = control_reason(s, cell).await;
                        let in_hole = plate_z - z_now > DROP_M;
                        if why.contains("reapproach_travel_m") && in_hole {
                            notes.push(format!(
                                "insertion task {segment} ended {:.1} mm deep by the travel \
                                 bound after a lost contact (the peg slipped free of the \
                                 wall); the next one goes on from there",
                                (plate_z - z_now) * 1e3
                            ));
                            prev_motion = motion;
                            continue 'insert;
                        }
                        aborted = Some(format!("insertion: {why}"));
                        break 'insert;
                    }
                    _ => {}
                }
            }
        }
        if target_at.is_none() && aborted.is_none() && segment >= MAX_INSERT_TASKS {
            aborted = Some(format!(
                "insertion: not {:.0} mm deep after {MAX_INSERT_TASKS} tasks",
                DEPTH_M * 1e3
            ));
        }
    } else {
        cli::set_mode(s, cell, Mode::Hold).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    f.drain_truth();

    // Scoring, on the simulator's truth (score::peg): inserted when the true TCP got `DEPTH_M`
    // below the plate's top less `DEPTH_TOLERANCE_M`. Control's view is context.
    let m = crate::score::peg::metrics(
        &crate::score::peg::Case {
            hole_m: HOLE_M,
            depth_m: DEPTH_M,
            depth_tolerance_m: DEPTH_TOLERANCE_M,
            clearance_m,
            initial_offset_m: OFFSET_M[0].hypot(OFFSET_M[1]),
        },
        &crate::score::peg::Events {
            contact_at,
            found_at,
            target_at,
            steps,
            aborted: aborted.clone(),
            notes,
        },
        &f.recs,
        &f.truths,
    );
    let targets = [
        target(
            "success",
            "==",
            json!(true),
            gate,
            if gate {
                "experiments issue: peg inserted"
            } else {
                "reported, not gated"
            },
        ),
        target(
            "peak_force_n",
            "<=",
            json!(30.0),
            gate,
            "below the task's 40 N limit with margin",
        ),
        target(
            "time_to_target_s",
            "<=",
            json!(30.0),
            false,
            "a usable cycle time",
        ),
    ];
    let (checks, gates_met) = checks(&m, &targets);
    let passed = gates_met && (aborted.is_none() || !gate);
    Ok(CaseOut {
        label,
        clearance_m,
        metrics: m,
        recs: f.recs,
        truths: f.truths,
        passed,
        checks,
    })
}

async fn control_reason(s: &Session, cell: &CellSection) -> String {
    match cli::status(s, cell, Some("control")).await {
        Ok(v) => v
            .first()
            .and_then(|c| {
                c["detail"]["stop_reason"]
                    .as_str()
                    .or(c["last_error"].as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "no reason given".into()),
        Err(e) => format!("control status: {e}"),
    }
}

fn write_csv(dir: &Path, c: &CaseOut) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("trace.csv");
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(
        w,
        "t_s,stage,phase,task_t_s,force_x,force_y,force_z,torque_x,torque_y,position_x,position_y,position_z,position_ref_x,position_ref_y"
    )?;
    for r in &c.recs {
        let s = &r.st;
        writeln!(
            w,
            "{:.4},{},{:?},{:.4},{:.5},{:.5},{:.5},{:.6},{:.6},{:.7},{:.7},{:.7},{:.7},{:.7}",
            r.t,
            r.stage,
            s.phase,
            s.t_s,
            s.force[0],
            s.force[1],
            s.force[2],
            s.force[3],
            s.force[4],
            s.position[0],
            s.position[1],
            s.position[2],
            s.position_ref[0],
            s.position_ref[1]
        )?;
    }
    w.flush()?;
    let path = dir.join("truth.csv");
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(w, "t_s,force_x,force_y,force_z,tcp_x,tcp_y,tcp_z")?;
    for t in &c.truths {
        writeln!(
            w,
            "{:.4},{:.5},{:.5},{:.5},{:.7},{:.7},{:.7}",
            t.t, t.force[0], t.force[1], t.force[2], t.tcp[0], t.tcp[1], t.tcp[2]
        )?;
    }
    w.flush()?;
    Ok(())
}

fn panels(c: &CaseOut) -> [Panel; 3] {
    let depth: Vec<(f64, f64)> = c
        .truths
        .iter()
        .map(|t| (t.t, (HOLE_M[2] - t.tcp[2]) * 1e3))
        .collect();
    let fz: Vec<(f64, f64)> = c.truths.iter().map(|t| (t.t, t.force[2])).collect();
    let flat: Vec<(f64, f64)> = c
        .truths
        .iter()
        .map(|t| (t.t, t.force[0].hypot(t.force[1])))
        .collect();
    let est: Vec<(f64, f64)> = c.recs.iter().map(|r| (r.t, r.st.force[2])).collect();
    let path: Vec<(f64, f64)> = c
        .truths
        .iter()
        .map(|t| ((t.tcp[0] - HOLE_M[0]) * 1e3, (t.tcp[1] - HOLE_M[1]) * 1e3))
        .collect();
    let r = (PEG_RADIUS_M + c.clearance_m) * 1e3;
    let hole: Vec<(f64, f64)> = (0..=72)
        .map(|i| {
            let a = std::f64::consts::TAU * i as f64 / 72.0;
            (r * a.cos(), r * a.sin())
        })
        .collect();
    let capture: Vec<(f64, f64)> = (0..=72)
        .map(|i| {
            let a = std::f64::consts::TAU * i as f64 / 72.0;
            let k = c.clearance_m * 1e3;
            (k * a.cos(), k * a.sin())
        })
        .collect();
    [
        Panel {
            title: format!("{}: depth below the plate's top", c.label),
            x_label: "t (s)".into(),
            y_label: "mm".into(),
            series: vec![Series::line("TCP depth (truth)", depth, plot::MEASURED)],
        },
        Panel {
            title: "forces on the peg".into(),
            x_label: "t (s)".into(),
            y_label: "N".into(),
            series: vec![
                Series::line("F/T estimate, pressing (z)", est, plot::RAW).thin(),
                Series::line("plate's Fz (truth)", fz, plot::MEASURED),
                Series::line("plate's |Fxy| (truth)", flat, plot::FOURTH),
            ],
        },
        Panel {
            title: "XY path relative to the hole".into(),
            x_label: "x (mm)".into(),
            y_label: "y (mm)".into(),
            series: vec![
                Series::line("hole edge", hole, plot::REFERENCE).dashed(),
                Series::line("clearance (peg centre fits)", capture, plot::THIRD),
                Series::line("TCP (truth)", path, plot::MEASURED),
            ],
        },
    ]
}

/// Runs the experiment; writes traces, plots and metrics into `opts.out`; returns the metrics
/// JSON (`{"experiment", "rate_hz", "cases", "paper", "passed"}`).
pub async fn run(s: &Session, cell: &CellSection, opts: &Options) -> anyhow::Result<Value> {
    let name = "peg-in-hole";
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    let scenario_key = format!("cell/{}/sim/rpc/scenario", cell.id);
    // Both clearances are gated: the default 0.1 mm and the paper's 0.025 mm.
    let cases: &[(f64, bool)] = if opts.short {
        &[(1e-4, true)]
    } else {
        &[(1e-4, true), (2.5e-5, true)]
    };
    let _ = crate::stall::take_setup_retries();
    let mut outs = Vec::new();
    for (i, &(clearance, gate)) in cases.iter().enumerate() {
        if opts.progress {
            eprintln!(
                "[{}/{}] {name}: clearance {:.3} mm",
                i + 1,
                cases.len(),
                clearance * 1e3
            );
        }
        let attempt = crate::stall::Attempt::start();
        let mut c = run_case(s, cell, &scenario_key, clearance, gate, opts).await?;
        // Held by a proven host stall (the safety path, not the search): once more, said,
        // and the first attempt kept beside the second.
        if let Some(why) = c.metrics["aborted"].as_str().map(str::to_string) {
            let step = format!("peg clearance {:.3} mm", clearance * 1e3);
            if let Ok(mut retry) = crate::stall::check(s, cell, &step, &why, attempt).await {
                let kept = opts
                    .out
                    .join(format!("clearance-{:.3}mm-first-run", clearance * 1e3));
                write_csv(&kept, &c)?;
                retry.first_run = Some(kept.display().to_string());
                eprintln!("      {}", retry.describe());
                c = run_case(s, cell, &scenario_key, clearance, gate, opts).await?;
                crate::stall::record(&mut c.metrics, &retry);
            }
        }
        write_csv(
            &opts.out.join(format!("clearance-{:.3}mm", clearance * 1e3)),
            &c,
        )?;
        if opts.progress {
            let line: Vec<String> = [
                "success",
                "time_to_target_s",
                "search_steps",
                "peak_force_n",
                "final_lateral_offset_m",
                "aborted",
            ]
            .iter()
            .map(|k| format!("{k} {}", fmt_value(&c.metrics[*k])))
            .collect();
            eprintln!("      {}", line.join(", "));
        }
        outs.push(c);
    }
    let cols = outs.len();
    let mut ps: Vec<Panel> = Vec::new();
    let all: Vec<[Panel; 3]> = outs.iter().map(panels).collect();
    for row in 0..3 {
        for p in &all {
            ps.push(p[row].clone());
        }
    }
    let fig = Figure {
        // The paper's figure is cited as the paper states it; the cases run are named beside
        // it (the short form runs only the 0.1 mm clearance).
        title: format!(
            "{name} — {}; this run: {}",
            paper()["figure"].as_str().unwrap_or_default(),
            outs.iter()
                .map(|c| c.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        rows: 3,
        cols,
        panels: ps,
    };
    plot::write(&fig, &opts.out, name, ((600 * cols as u32).max(900), 900))?;
    let passed = outs.iter().all(|c| c.passed);
    let out = json!({
        "experiment": name,
        "rate_hz": 250.0,
        "short": opts.short,
        "world": Value::Object(opts.world.clone()),
        "cases": outs.iter().map(|c| json!({
            "label": c.label,
            "metrics": Value::Object(c.metrics.clone()),
            "checks": c.checks,
            "note": "torque-guided search (the pressure centre of the face on the plate), then a compliant insertion; the arm's law every EGM cycle (250 Hz); forces are the simulator's truth",
        })).collect::<Vec<_>>(),
        // Placements repeated after a proven host stall during the experiment.
        "setup_retries": crate::stall::take_setup_retries().iter().map(crate::stall::Retry::to_json).collect::<Vec<_>>(),
        "paper": paper(),
        "passed": passed,
    });
    std::fs::write(
        opts.out.join("metrics.json"),
        serde_json::to_string_pretty(&out)?,
    )
    .with_context(|| format!("writing {}/metrics.json", opts.out.display()))?;
    Ok(out)
}

/// The paper's figure.
pub fn paper() -> Value {
    json!({
        "figure": "Raibert & Craig 1981, Fig. 11 (peg-in-hole with the hybrid controller; 0.025 mm clearance)",
        "clearance_m": 2.5e-5,
        "success": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_centre_offset_decreases_and_inverts() {
        let (rp, r) = (0.005, 0.0051);
        let mut prev = f64::INFINITY;
        for i in 1..40 {
            let e = 1e-4 + i as f64 * 2.5e-4;
            let d = centre_offset(e, rp, r);
            assert!(d <= prev + 1e-5, "{e}: {d} > {prev}");
            prev = d;
        }
        for e in [0.0005, 0.0015, 0.0036] {
            let d = centre_offset(e, rp, r);
            let back = offset_from_centre(d, rp, r);
            assert!((back - e).abs() < 2e-4, "{e} → {d} → {back}");
        }
    }

    /// Runs the planner against the face-on-plate geometry: the pressure centre lies away from
    /// the hole, `centre_offset` from the peg's axis (the rim when the crescent is thinner than
    /// the model's grid), scaled by `gain` (a reading off by a lateral force or noise), each
    /// move executed with a 5 µm error across it. Returns the steps to the drop.
    fn steps_to_drop(start_m: [f64; 2], clearance_m: f64, gain: f64) -> Option<usize> {
        let (rp, r) = (0.005, 0.005 + clearance_m);
        let mut c = start_m;
        let mut search = Search::default();
        for step in 0..MAX_STEPS {
            let e = c[0].hypot(c[1]);
            if e < r - rp {
                return Some(step);
            }
            let d = match centre_offset(e, rp, r) {
                d if d > 0.0 => d,
                _ => rp,
            } * gain;
            let p = [c[0] / e * d, c[1] / e * d];
            match search.plan(p, rp, r) {
                Plan::NoTorque => return None,
                Plan::Move { by_m, .. } => {
                    let n = by_m[0].hypot(by_m[1]).max(1e-12);
                    let across = if step % 2 == 0 { 5e-6 } else { -5e-6 };
                    c[0] += by_m[0] - by_m[1] / n * across;
                    c[1] += by_m[1] + by_m[0] / n * across;
                }
            }
        }
        let e = c[0].hypot(c[1]);
        (e < r - rp).then_some(MAX_STEPS)
    }

    #[test]
    fn search_finds_the_hole_at_both_clearances() {
        for clearance in [1e-4, 2.5e-5] {
            for start in [
                [0.003, 0.002],
                [-0.002, 0.0035],
                [0.0004, -0.0001],
                [0.0011, 0.0],
                [0.0002, 0.00012],
            ] {
                for gain in [1.0, 1.04, 0.97, 1.6] {
                    let n = steps_to_drop(start, clearance, gain);
                    assert!(
                        n.is_some_and(|n| n <= 14),
                        "clearance {clearance}, start {start:?}, gain {gain}: {n:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn search_bisects_after_a_flip_and_grows_before() {
        let (rp, r) = (0.005, 0.005025);
        let mut s = Search::default();
        // On the crescent, +x of the hole: a line step of LINE_STEP_M towards −x.
        let Plan::Move { by_m, line } = s.plan([0.00495, 0.0], rp, r) else {
            panic!("no move")
        };
        assert!(line && (by_m[0] + LINE_STEP_M).abs() < 1e-12 && by_m[1] == 0.0);
        // Same side: 1.5× the step.
        let Plan::Move { by_m, .. } = s.plan([0.00496, 0.0], rp, r) else {
            panic!("no move")
        };
        assert!((by_m[0] + 1.5 * LINE_STEP_M).abs() < 1e-12);
        // Crossed: back by half of it, then halving every step.
        let Plan::Move { by_m, .. } = s.plan([-0.00496, 0.0], rp, r) else {
            panic!("no move")
        };
        assert!((by_m[0] - 0.75 * LINE_STEP_M).abs() < 1e-12);
        let Plan::Move { by_m, .. } = s.plan([-0.00497, 0.0], rp, r) else {
            panic!("no move")
        };
        assert!((by_m[0] - 0.375 * LINE_STEP_M).abs() < 1e-12);
        assert_eq!(s.plan([0.0, 1e-5], rp, r), Plan::NoTorque);
    }
}
