//! The 2-DOF plant's hybrid task (Raibert & Craig's planar arm, simulated) as the core runs it:
//! started by a task, stepped by the plant's own states, stopped by every stop of the cell (an
//! e-stop or a protective stop latched at robot-io, an operator's `mode idle`). Pure: the shell
//! hands over the plant's states and sends what [`PlantStep`] and [`ControlCore::take_plant_end`]
//! say (issue 42: the plant task lived in the shell).

use common::msg::{HybridLimits, HybridPhase, HybridTask};

use super::ControlCore;
use crate::hybrid::{self, PlantInput, PlantRun, StepReport};

/// The plant task's state in the core.
#[derive(Debug, Clone, Default)]
pub(super) struct PlantTask {
    run: Option<PlantRun>,
    /// The task's name and its last report (kept after the end, for the status).
    report: Option<(String, StepReport)>,
    /// A task that ended by a stop or a fault: why, not yet taken by the shell.
    ended: Option<String>,
}

/// What one plant state made of the running task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlantStep {
    /// The effort to send the plant (N·m, N).
    pub effort: [f64; 2],
    /// The law's report of this step (the task's state on the bus).
    pub report: StepReport,
    /// The task completed with this step.
    pub done: bool,
}

impl ControlCore {
    /// Starts a hybrid task on the 2-DOF plant (its gains, or the plant's defaults), refused
    /// while the cell is stopped or for an invalid task. It runs beside the arm's mode.
    pub fn request_plant(
        &mut self,
        task: HybridTask,
        limits: HybridLimits,
        max_effort: [f64; 2],
    ) -> Result<(), String> {
        let name = task.name.clone();
        if let Some(level) = self.cell_stopped() {
            return Err(format!(
                "plant task {name:?}: refused, the cell is stopped ({level:?})"
            ));
        }
        let gains = task.gains.unwrap_or_else(hybrid::default_plant_gains);
        let run = PlantRun::new(task, gains, limits, max_effort)
            .map_err(|e| format!("plant task {name:?}: {e}"))?;
        self.plant.run = Some(run);
        self.plant.ended = None;
        Ok(())
    }

    /// One plant state: the running task's step when one is due (the task's own rate), else
    /// `None`. A fault ends the task (see [`Self::take_plant_end`]).
    pub fn step_plant(&mut self, input: &PlantInput) -> Option<PlantStep> {
        let run = self.plant.run.as_mut()?;
        if !run.due(input.t_s) {
            return None;
        }
        let name = run.task.name.clone();
        match run.step(input) {
            Ok((effort, report)) => {
                let done = run.is_done();
                self.plant.report = Some((name, report));
                if done {
                    self.plant.run = None;
                }
                Some(PlantStep {
                    effort,
                    report,
                    done,
                })
            }
            Err(why) => {
                self.end_plant(&why.to_string());
                None
            }
        }
    }

    /// Ends the plant's running task, if any, with `why`: its last report `Aborted`, the
    /// reason kept for [`Self::take_plant_end`].
    pub(super) fn end_plant(&mut self, why: &str) {
        let Some(run) = self.plant.run.take() else {
            return;
        };
        if let Some((_, r)) = self.plant.report.as_mut() {
            r.phase = HybridPhase::Aborted;
        }
        self.plant.ended = Some(format!("plant task {:?} ended: {why}", run.task.name));
    }

    /// A plant task that ended by a stop or a fault since the last call: why, and its last
    /// report (`Aborted`). The shell sends the plant a zero effort and the report.
    pub fn take_plant_end(&mut self) -> Option<(String, Option<StepReport>)> {
        let why = self.plant.ended.take()?;
        Some((why, self.plant.report.as_ref().map(|(_, r)| *r)))
    }

    /// A plant task is running.
    pub fn plant_running(&self) -> bool {
        self.plant.run.is_some()
    }

    /// The plant task's name and its last report (the running one's, or the last one's).
    pub fn plant_report(&self) -> Option<(&str, &StepReport)> {
        self.plant.report.as_ref().map(|(n, r)| (n.as_str(), r))
    }
}
