//! ABB Externally Guided Motion (EGM, UDP "UdpUc"), the PC ("sensor") side.
//!
//! - [`proto`], [`frame`]: the wire codec, from the pure `egm` crate (`protocols/egm`),
//!   re-exported;
//! - [`irc5`]: the IRC5 side as shipped in `deploy/irc5/` (the `irc5` crate, re-exported), read
//!   so the driver's config can be held against it;
//! - [`session`]: pure per-datagram logic (measured joints, controller states, seqno gaps,
//!   the `EgmSensor` reply, timing statistics). Time is a parameter.
//! - [`cycle`]: one datagram → at most one reply: the session and the supervisor together,
//!   pure; the only place a reply's reference is chosen.
//!
//! The UDP socket lives in [`crate::node`].

pub use ::egm::{frame, peer, proto};
pub use ::irc5;

pub mod cycle;
pub mod session;
