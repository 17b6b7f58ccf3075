//! egm: ABB Externally Guided Motion (EGM, UDP "UdpUc") on the wire, pure (no I/O, no clocks,
//! no bus).
//!
//! - [`proto`]: the egm.proto messages as hand-written prost structs, tolerant `measuredForce`
//!   decoding; the reference decoder and encoder;
//! - [`peer`]: the controller's pinned address ([`peer::PeerPin`]): who may drive a session;
//! - [`frame`]: the per-datagram codec without allocation (`EgmRobot` → [`frame::RobotFrame`],
//!   [`frame::SensorReply`] → bytes), held to prost's answers by property tests.
//!
//! robot-io's EGM driver uses these. The simulated IRC5 does **not**: it writes and reads its
//! datagrams with its own encoder from the spec, and both sides are held to the test vectors in
//! `protocols/vectors/`.

pub mod frame;
pub mod peer;
pub mod proto;
