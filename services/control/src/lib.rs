//! control: the cell's modes. A pure [`core`] steps once per tool pose (robot cycle) and
//! yields a Cartesian target; the [`node`] shell feeds it from the bus.
//!
//! It does not talk to the robot (robot-io does) nor solve IK (kinematics does).

pub mod core;
pub mod guide;
pub mod hybrid;
pub mod metrics;
pub mod node;
pub mod program;
pub mod taskfile;
pub mod teach;
pub mod trajectory;
