//! ABB Externally Guided Motion (EGM, UDP "UdpUc"), the PC ("sensor") side.
//!
//! - [`proto`]: the egm.proto messages as hand-written prost structs, tolerant `measuredForce`
//!   decoding; reusable by a controller emulator.
//! - [`frame`]: the per-datagram codec without allocation (`EgmRobot` → [`frame::RobotFrame`],
//!   [`frame::SensorReply`] → bytes), held to prost's answers by property tests.
//! - [`session`]: pure per-datagram logic (measured joints, controller states, seqno gaps,
//!   the `EgmSensor` reply, timing statistics). Time is a parameter.
//!
//! - [`cycle`]: one datagram → at most one reply: the session and the supervisor together,
//!   pure; the only place a reply's reference is chosen.
//!
//! - [`irc5`]: the IRC5 side as shipped in `deploy/irc5/` (RAPID module, SIO and MOC entries),
//!   read so the simulated controller runs the same parameters and tests can check them.
//!
//! The UDP socket lives in [`crate::node`].

pub mod cycle;
pub mod frame;
pub mod irc5;
pub mod proto;
pub mod session;
