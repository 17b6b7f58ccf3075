//! One shape for every mode the core runs on the arm (issue 42): a mode is a law that takes the
//! same [`ModeInput`] each robot cycle and answers with this cycle's command and its report, or
//! with how the motion ends ([`ModeEnd`]). What a mode's failure means for safety (a smooth end,
//! a stop at once, a stop robot-io latches) is decided by the mode, in its own module; the core
//! only carries it out, the same way for every mode.
//!
//! The laws: [`HoldPose`] and [`MoveState`] here, [`crate::hybrid::ArmRun`] (hybrid position /
//! force on the arm), [`crate::guide::GuideRun`] (lead-through) and [`super::PlayRun`]
//! (playback). The 2-DOF plant's task is not a mode of the arm: it runs beside it, on the
//! plant's own states ([`super::PlantStep`]).

use common::msg::{CartesianTarget, Pose, StopCategory};
use nalgebra::Isometry3;

use super::WrenchInput;
use crate::hybrid::WrenchPeak;

/// What every mode's law sees in one cycle.
#[derive(Debug, Clone, Copy)]
pub struct ModeInput<'a> {
    /// Measured TCP in base.
    pub tcp: &'a Isometry3<f64>,
    /// Robot time (s).
    pub now_s: f64,
    /// The contact wrench on the tool at the TCP, base axes (filtered estimate), or why it is
    /// not usable.
    pub wrench: &'a WrenchInput,
    /// The estimate's unfiltered peaks (the force limits' input).
    pub peak: WrenchPeak,
    /// The robot's cycle period (s), when the shell knows it.
    pub cycle_period_s: Option<f64>,
    /// Time since the mode's previous step (s): whole robot cycles × the period when the shell
    /// gives them, else robot-clock differences; 0 on the mode's first step; at most 50 ms.
    pub dt_s: f64,
    /// The lead-through deadman is held this step (the session's token, within its timeout).
    pub deadman_held: bool,
}

/// How a mode's step ended the motion.
#[derive(Debug, Clone, PartialEq)]
pub enum ModeEnd {
    /// A controlled end: the motion comes to rest through an [`crate::ending::Ending`]; the
    /// stop reason.
    Smoothly(String),
    /// A stop at once, as `stop` says (a protective one holds where the arm is measured);
    /// `latch`: robot-io latches it, and only an operator resets it (`cell reset --protective`).
    Now {
        why: String,
        stop: StopCategory,
        latch: bool,
    },
}

/// One cycle of a mode: the command and the mode's report, or the end of the motion.
pub type ModeStep<R> = Result<(CartesianTarget, R), ModeEnd>;

/// A mode the core steps on the arm.
pub trait ModeLaw {
    /// What the mode reports of each step (for the bus and the status).
    type Report;
    /// One robot cycle.
    fn cycle(&mut self, input: &ModeInput) -> ModeStep<Self::Report>;
}

/// `Hold`: the TCP pose captured on the mode's first step, actively held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HoldPose(pub Isometry3<f64>);

impl ModeLaw for HoldPose {
    type Report = ();
    fn cycle(&mut self, _: &ModeInput) -> ModeStep<()> {
        Ok((CartesianTarget::Pose(Pose::from_isometry(&self.0)), ()))
    }
}

/// `Move`: a straight-line move in progress (then a hold at the target).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveState {
    pub from: Isometry3<f64>,
    pub to: Isometry3<f64>,
    pub duration_s: f64,
    /// Move time elapsed (s), by the mode's step clock.
    pub elapsed_s: f64,
}

impl MoveState {
    /// Whether the move has reached its target.
    pub fn done(&self) -> bool {
        self.elapsed_s >= self.duration_s
    }
}

impl ModeLaw for MoveState {
    type Report = ();
    fn cycle(&mut self, input: &ModeInput) -> ModeStep<()> {
        self.elapsed_s += input.dt_s;
        let tau = self.elapsed_s / self.duration_s;
        let pose = super::interpolate(&self.from, &self.to, tau);
        Ok((CartesianTarget::Pose(Pose::from_isometry(&pose)), ()))
    }
}
