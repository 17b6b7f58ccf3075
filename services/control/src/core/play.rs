//! A playback as the core runs it, its report and the operator's commands.

use common::msg::{CartesianTarget, Pose, ProtectiveCause, StopCategory};

use super::law::{ModeEnd, ModeInput, ModeLaw, ModeStep};
use crate::trajectory::{CartesianPlayback, Playback, PlaybackState, SegmentKind};

/// A playback: joint-space (default) or Cartesian lines (on request).
#[derive(Debug, Clone)]
pub enum PlayRun {
    Joint(Playback),
    Cartesian(CartesianPlayback),
}

/// The newest playback step, for the bus and the status.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlayReport {
    pub state: PlaybackState,
    pub approach: bool,
    pub waypoint: usize,
    pub waypoints: usize,
    pub progress: f64,
    pub t_s: f64,
    pub duration_s: f64,
    /// The joint reference sent (joint playback).
    pub q_ref: Option<[f64; 6]>,
}

/// Operator commands of a running playback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlayCommand {
    Pause,
    Resume,
    Stop,
}

/// Playback as one of the core's modes: it advances by the mode's step time (whole robot
/// cycles); a non-finite joint reference stops at once, protectively.
impl ModeLaw for PlayRun {
    type Report = PlayReport;
    fn cycle(&mut self, input: &ModeInput) -> ModeStep<PlayReport> {
        match self {
            PlayRun::Joint(pb) => {
                let sample = pb.step(input.dt_s);
                let traj = pb.trajectory();
                let seg = traj.segments().get(sample.segment);
                let report = PlayReport {
                    state: sample.state,
                    approach: seg.is_some_and(|s| s.kind == SegmentKind::Approach),
                    waypoint: seg.map_or(0, |s| s.waypoint),
                    waypoints: traj.waypoints().len(),
                    progress: sample.progress,
                    t_s: sample.tau,
                    duration_s: traj.duration(),
                    q_ref: Some(sample.q),
                };
                if !sample.q.iter().all(|v| v.is_finite()) {
                    return Err(ModeEnd::Now {
                        why: "playback produced a non-finite reference".into(),
                        stop: StopCategory::Protective(ProtectiveCause::NonFinite),
                        latch: false,
                    });
                }
                Ok((CartesianTarget::Joints { q_rad: sample.q }, report))
            }
            PlayRun::Cartesian(pb) => {
                let sample = pb.step(input.dt_s);
                let report = PlayReport {
                    state: sample.state,
                    approach: sample.approach,
                    waypoint: sample.waypoint,
                    waypoints: pb.waypoints(),
                    progress: sample.progress,
                    t_s: sample.tau,
                    duration_s: sample.duration,
                    q_ref: None,
                };
                Ok((
                    CartesianTarget::Pose(Pose::from_isometry(&sample.pose)),
                    report,
                ))
            }
        }
    }
}
