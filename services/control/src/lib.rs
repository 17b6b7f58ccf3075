//! control: the cell's modes. A pure [`core`] steps once per tool pose (robot cycle) and
//! yields a Cartesian target; the [`node`] shell feeds it from the bus.
//!
//! It does not talk to the robot (robot-io does) nor solve IK (kinematics does).

pub mod config;
pub mod core;
pub mod deadman;
pub mod ending;
pub mod guide;
pub mod hybrid;
pub mod kf;
pub mod lead;
pub mod node;
pub mod program;
pub mod states;
pub mod stiffness;
pub mod taskfile;
pub mod teach;
pub mod trajectory;

/// The time a law's step spans (s), for a law that publishes one reference per robot cycle:
/// one robot period when the shell knows it (the host's jitter and stalls then stay out of the
/// reference), else the robot-clock difference clamped to 50 ms; 0 on the first step.
/// Records `now_s` as the last step's time.
pub fn law_step_dt(last_s: &mut Option<f64>, now_s: f64, cycle_period_s: Option<f64>) -> f64 {
    let dt = match (*last_s, cycle_period_s) {
        (None, _) => 0.0,
        (Some(_), Some(p)) if p.is_finite() && p > 0.0 => p.min(0.05),
        (Some(l), _) => (now_s - l).clamp(0.0, 0.05),
    };
    *last_s = Some(now_s);
    dt
}
