//! A playback as the core runs it, its report and the operator's commands.

use crate::trajectory::{CartesianPlayback, Playback, PlaybackState};

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
