//! The core's reports as bus messages (`control/hybrid_state`, `control/playback`) and the
//! status' JSON. Pure.

use common::msg::HybridState;

use crate::{core::PlayReport, hybrid::StepReport};

pub fn hybrid_state(stamp: common::msg::Stamp, motion_id: u64, r: &StepReport) -> HybridState {
    HybridState {
        stamp,
        motion_id,
        t_s: r.t_s,
        clock_s: r.clock_s,
        phase: r.phase,
        force_ref: r.force_ref,
        force: r.force,
        position_ref: r.position_ref,
        position: r.position,
        output: r.output,
        limited: r.limited,
        bridged: r.bridged,
        seating: r.seating,
        frame_in_base: r.frame_in_base,
        gains_for_n_per_m: r.gains_for_n_per_m,
        stiffness_estimate_n_per_m: r.stiffness_estimate_n_per_m,
        ref_time_s: r.ref_time_s,
        speed_scale: r.speed_scale,
    }
}

pub fn report_json(name: &str, r: Option<&StepReport>) -> serde_json::Value {
    serde_json::json!({
        "task": name,
        "phase": r.map(|r| format!("{:?}", r.phase)),
        "t_s": r.map(|r| r.t_s),
        "force_ref": r.map(|r| r.force_ref),
        "force": r.map(|r| r.force),
        "position_ref": r.map(|r| r.position_ref),
        "position": r.map(|r| r.position),
    })
}

/// The playback state to publish for program `name`'s report `r` under motion `motion_id`
/// (the motion being played: an ended motion's id, not 0, so clients that follow it see the
/// end); `q_fallback` when the report has no joint reference.
pub fn play_state(
    stamp: common::msg::Stamp,
    motion_id: u64,
    name: &str,
    r: &PlayReport,
    phase: common::msg::PlaybackPhase,
    q_fallback: [f64; 6],
) -> common::msg::PlaybackState {
    common::msg::PlaybackState {
        stamp,
        motion_id,
        program: name.to_string(),
        phase,
        waypoint: r.waypoint as u32,
        waypoints: r.waypoints as u32,
        progress: r.progress.clamp(0.0, 1.0),
        t_s: r.t_s,
        duration_s: r.duration_s,
        q_ref_rad: r.q_ref.unwrap_or(q_fallback),
    }
}

pub fn playback_phase(
    st: crate::trajectory::PlaybackState,
    approach: bool,
) -> common::msg::PlaybackPhase {
    use crate::trajectory::PlaybackState as S;
    use common::msg::PlaybackPhase as P;
    match st {
        S::Running if approach => P::Approach,
        S::Running => P::Running,
        S::Pausing => P::Pausing,
        S::Paused => P::Paused,
        S::Stopping => P::Stopping,
        S::Stopped => P::Stopped,
        S::Done => P::Done,
    }
}
