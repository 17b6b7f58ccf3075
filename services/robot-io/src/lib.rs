//! robot-io: the robot drivers and the cell's clock.
//!
//! It publishes the measured joint state once per robot cycle and answers the robot with the
//! newest joint command — or holds the measured position when that command is stale, invalid
//! or an e-stop is latched ([`supervisor`], pure). Drivers: [`ideal`] (in-process ideal robot)
//! and ABB EGM over UDP ([`egm`]: the codec of the pure `egm` crate re-exported as
//! [`egm::proto`] and [`egm::frame`], and the pure session logic in [`egm::session`]; the socket
//! is in [`node`]).
//!
//! Its e-stop and protective-stop latches survive a restart ([`latch`]); every command must
//! carry this instance's boot id, so a restarted robot-io never continues an old motion.
//!
//! It measures the command path end to end ([`latency`]): controller message of cycle k → the
//! joint command for k back, and the cycles whose command came too late.
//!
//! It does not compute kinematics or control laws.

pub mod clamp;
pub mod config;
pub mod egm;
pub mod ideal;
pub mod latch;
pub mod latency;
pub mod node;
pub mod supervisor;
