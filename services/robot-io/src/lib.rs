//! robot-io: the robot drivers and the cell's clock.
//!
//! It publishes the measured joint state once per robot cycle and answers the robot with the
//! newest joint command — or holds the measured position when that command is stale, invalid
//! or an e-stop is latched ([`supervisor`], pure). Drivers: [`ideal`] (in-process ideal robot).
//! The ABB EGM driver arrives with the robot I/O issue.
//!
//! It does not compute kinematics or control laws.

pub mod config;
pub mod egm;
pub mod ideal;
pub mod node;
pub mod supervisor;
