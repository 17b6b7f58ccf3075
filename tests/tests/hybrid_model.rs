//! The hybrid law on the Raibert–Craig 2-DOF plant model, in process (no bus): the plant
//! integrates at its own rate and is stepped every 1 ms; the law runs at the task's rate on
//! plant time, and its effort reaches the plant one plant tick (1 ms) later, as over the bus.
//! The plant is the simulator's (`sim::world::RcPlant`, nominal parameters); the law is
//! control's (`control::hybrid::PlantRun`), the same code the services run.
//!
//! These are the law's model tests (step responses on a model plant, the limiter, friction
//! robustness); the same scenarios through the real processes are in `hybrid.rs`.

use common::msg::{FrameKind, HybridGains, HybridTask, Pose, Profile, TaskRobot};
use control::{
    hybrid::{default_limits, default_plant_gains, PlantInput, PlantRun},
    metrics::{lowpass_zero_phase, step_figures, StepFigures},
};
use sim::world::{RcPlant, RcPlantParams};

struct Run {
    t: Vec<f64>,
    force: Vec<f64>,
    contact: Vec<f64>,
    y: Vec<f64>,
    lost_contact: bool,
}

/// Hand against the surface at rest: the surface at x = 0.55 m, the hand 0.1 mm away.
fn params() -> RcPlantParams {
    RcPlantParams {
        initial_q: [0.0, 0.5499],
        ..Default::default()
    }
}

fn task(reference_x: Profile, rate_hz: f64, duration_s: f64) -> HybridTask {
    let mut reference: [Profile; 6] = Default::default();
    reference[0] = reference_x;
    HybridTask {
        name: "model".into(),
        robot: TaskRobot::Plant,
        frame_kind: FrameKind::Base,
        frame: Pose::IDENTITY,
        force_axes: [true, false, false, false, false, false],
        reference,
        duration_s,
        rate_hz,
        ..Default::default()
    }
}

fn simulate(p: RcPlantParams, task: HybridTask, gains: HybridGains) -> Run {
    let mut plant = RcPlant::new(p).expect("plant");
    let mut limits = default_limits();
    limits.force_axis_speed_m_s = 0.05;
    let duration = task.duration_s;
    let mut run = PlantRun::new(task, gains, limits, [200.0, 200.0]).expect("task");
    let dt = 1e-3;
    let mut effort = [0.0; 2];
    let mut pending: Option<[f64; 2]> = None;
    let mut st = plant.step([0.0; 2], dt);
    let mut out = Run {
        t: vec![],
        force: vec![],
        contact: vec![],
        y: vec![],
        lost_contact: false,
    };
    let mut touched = false;
    while st.t < duration {
        if let Some(e) = pending.take() {
            effort = e;
        }
        if run.due(st.t) {
            let (e, _r) = run
                .step(&PlantInput {
                    t_s: st.t,
                    q: st.q,
                    qd: st.qd,
                    wrist_force_n: st.wrist_force,
                })
                .expect("law step");
            pending = Some(e);
        }
        st = plant.step(effort, dt);
        // The applied force on the surface (ground truth, for scoring only).
        let fc = -st.contact_force[0];
        if st.in_contact {
            touched = true;
        } else if touched && st.t > 0.3 {
            out.lost_contact = true;
        }
        out.t.push(st.t);
        out.force.push(st.wrist_force[0]);
        out.contact.push(fc);
        out.y.push(st.hand_pos[1]);
    }
    out
}

fn figures(r: &Run, step_at: f64, to: f64) -> StepFigures {
    let f = lowpass_zero_phase(&r.contact, 12.0, 1000.0);
    step_figures(&r.t, &f, step_at, 0.0, to, 1.0)
}

fn y_disturbance(r: &Run) -> f64 {
    let y0 = r.y[0];
    r.y.iter().map(|y| (y - y0).abs()).fold(0.0, f64::max)
}

#[test]
fn force_steps_at_60_hz_meet_the_papers_figures() {
    for f in [1.0, 5.0, 10.0] {
        for rate in [60.0, 80.0, 120.0] {
            let t = task(
                Profile::Step {
                    before: 0.0,
                    after: f,
                    at_s: 0.5,
                },
                rate,
                3.0,
            );
            let r = simulate(params(), t, default_plant_gains());
            let fig = figures(&r, 0.5, f);
            let dy = y_disturbance(&r);
            eprintln!(
                "{f:>4} N @ {rate:>3} Hz: rise {:?} s, overshoot {:.1} %, ss {:.3} N, lc {:.3} N, dy {:.3} mm, lost {}",
                fig.rise_time_s, fig.overshoot_pct, fig.steady_state_error, fig.limit_cycle_amplitude, dy * 1e3, r.lost_contact
            );
        }
    }
}
