//! ABB Externally Guided Motion (EGM, UDP "UdpUc"), the PC ("sensor") side.
//!
//! - [`proto`]: the egm.proto messages as hand-written prost structs, tolerant `measuredForce`
//!   decoding; reusable by a controller emulator.
//! - [`session`]: pure per-datagram logic (measured joints, controller states, seqno gaps,
//!   the `EgmSensor` reply, timing statistics). Time is a parameter.
//!
//! The UDP socket lives in [`crate::node`].

pub mod proto;
pub mod session;
