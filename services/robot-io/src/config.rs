//! `[robot_io]` table.

use common::config::{check_range, ConfigErrors, Validate};
use serde::{Deserialize, Serialize};

/// Which robot robot-io talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// In-process ideal robot: applies each reference exactly, at `cycle_ms`. For tests and
    /// for running the cell's data flow without a simulator.
    #[default]
    Ideal,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RobotIoConfig {
    pub driver: DriverKind,
    /// Robot cycle of the ideal driver (ms). EGM controllers run at 4 ms.
    pub cycle_ms: f64,
    /// A joint command older than this is stale → hold (ms). Default: 2 cycles.
    pub command_timeout_ms: f64,
    /// Start position of the ideal robot (deg).
    pub initial_q_deg: [f64; 6],
}

impl Default for RobotIoConfig {
    fn default() -> Self {
        Self {
            driver: DriverKind::Ideal,
            cycle_ms: 4.0,
            command_timeout_ms: 8.0,
            initial_q_deg: [0.0, 0.0, 0.0, 0.0, 30.0, 0.0],
        }
    }
}

impl Validate for RobotIoConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        check_range(
            errors,
            format!("{prefix}.cycle_ms"),
            self.cycle_ms,
            0.5,
            100.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.command_timeout_ms"),
            self.command_timeout_ms,
            1.0,
            1000.0,
            "ms",
        );
        for (j, v) in self.initial_q_deg.iter().enumerate() {
            check_range(
                errors,
                format!("{prefix}.initial_q_deg[{j}]"),
                *v,
                -400.0,
                400.0,
                "deg",
            );
        }
    }
}
