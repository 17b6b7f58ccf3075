//! The ideal robot: applies each reference exactly (after robot-io's own limits). Pure: the
//! node calls it once per cycle.

use common::msg::{RobotStatus, AXES};

#[derive(Debug, Clone)]
pub struct IdealRobot {
    q: [f64; AXES],
    qd: [f64; AXES],
}

impl IdealRobot {
    pub fn new(q0: [f64; AXES]) -> Self {
        Self {
            q: q0,
            qd: [0.0; AXES],
        }
    }
    /// What the robot reports this cycle.
    pub fn feedback(&self) -> ([f64; AXES], [f64; AXES], RobotStatus) {
        (
            self.q,
            self.qd,
            RobotStatus {
                motors_on: true,
                external_control_active: true,
                program_running: true,
            },
        )
    }
    /// Applies a reference; the next feedback reports it.
    pub fn apply(&mut self, q_ref: [f64; AXES], qd_ref: [f64; AXES]) {
        self.q = q_ref;
        self.qd = qd_ref;
    }
}
