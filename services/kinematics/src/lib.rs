//! Pure kinematics of a 6-axis ortho-parallel arm with a spherical wrist (OPW class;
//! preset: ABB IRB 120-3/0.58) and of the 2-DOF revolute–prismatic planar arm of
//! Raibert & Craig (1981).
//!
//! # Conventions
//! * **Units**: SI everywhere — metres, radians, seconds, newtons, newton-metres.
//!   Conversions to ABB units (mm, degrees, quaternion `[w, x, y, z]`) live in [`pose`].
//! * **Joints**: `[f64; 6]` in the robot maker's joint coordinates (for the IRB 120: the ABB /
//!   ROS-Industrial sign convention, q = 0 is the calibration pose with the upper arm vertical and
//!   the forearm horizontal along +x of the base).
//! * **Poses**: [`nalgebra::Isometry3<f64>`]; `pose_a_in_b` maps coordinates of frame A into
//!   frame B (`p_b = pose_a_in_b * p_a`).
//! * **Frames**: `base` (robot base, z up, x forward; ABB "base frame"), `tool0` (the flange frame
//!   in the **ABB tool0 convention**: origin at the flange centre, z out of the flange, x towards
//!   −z of base at q = 0), `tcp` (= tool0 · tool transform), `sensor` (= tool0 · sensor-mount
//!   transform, the F/T sensor measuring frame).
//! * **Twists and wrenches** are stacked linear first: `[v; ω]` (m/s, rad/s) and `[f; τ]` (N, N·m).
//! * **Jacobians** are 6×6 geometric Jacobians, rows `v` then `ω`, reference point the TCP.
//!
//! # Failure policy
//! No function panics on any input. Non-finite input (NaN/∞) yields
//! [`KinError::InvalidInput`]; unreachable or out-of-limit targets yield typed errors or flags.
//!
//! # Modules
//! * [`brake`]: braking to rest, one formula for every mode (speed at a distance, one cycle
//!   towards rest).
//! * [`params`]: serde-deserializable parameters (OPW geometry, limits, tool, sensor mount,
//!   tuning), presets and `validate()`.
//! * [`arm`]: the [`Arm`] model built from parameters.
//! * [`fk`]: forward kinematics (tool0, TCP, sensor, wrist centre).
//! * [`ik`]: closed-form OPW inverse kinematics (8 branches, limits, 2π variants, nearest,
//!   continuity through wrist/shoulder singularities, speed-step check).
//! * [`jacobian`]: geometric Jacobian (base / tool frame), manipulability, singularity measures.
//! * [`dls`]: damped-least-squares Cartesian → joint velocity with joint-speed scaling.
//! * [`wrench`]: wrench frame transforms, joint torque ↔ wrench.
//! * [`planar`]: 2-DOF revolute–prismatic arm.
//! * [`pose`]: pose helpers (ABB conversion, pose error, twist from poses).
//! * [`swing`]: the swing (extremum) detector of the oscillation watches.

// Index loops over the 6 joints mirror the math (q_j, w_j, limits_j) more clearly than zips.
#![allow(clippy::needless_range_loop)]

pub mod arm;
pub mod brake;
pub mod config;
pub mod dls;
pub mod error;
pub mod fk;
pub mod ik;
pub mod jacobian;
pub mod params;
pub mod planar;
pub mod pose;
pub mod servo;
pub mod step_limit;
pub mod swing;
pub mod wrench;

#[cfg(feature = "node")]
pub mod node;
#[cfg(feature = "node")]
pub mod rpc;

pub use arm::Arm;
pub use dls::{DlsFlags, DlsResult};
pub use error::KinError;
pub use ik::{BranchStatus, IkBranch, IkFlags, IkSolution, IkSolutions};
pub use jacobian::{ArmState, JacobianFrame, SingularityMeasures};
pub use params::{ArmParams, DlsConfig, FrameParams, IkConfig, JointLimits, OpwParams};
pub use planar::PlanarRP;
pub use wrench::{Twist, Wrench};

/// Joint vector of a 6-axis arm (rad).
pub type Joints = [f64; 6];
