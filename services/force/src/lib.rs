//! force: force processing. Raw sensor-frame samples in, a wrench estimate out, per sample.
//!
//! Pure cores: [`filter`] (Butterworth low-pass, smooth dead band), [`payload`] (least-squares
//! payload identification, gravity compensation), [`pipeline`] (checks, bias/tare, gravity,
//! filter, frames, with explicit state). Shell: [`node`] (bus, stale detection, the tare and
//! identification request/reply queryables).
//!
//! It does not talk to the sensor (sensor does) nor move the robot (`cell payload identify`
//! moves it through control).
//!
//! The estimate is in the sensor, TCP/tool and TCP/base frames only: control expresses the
//! wrench in a task's constraint frame {C} itself (see `control::hybrid`), since {C} belongs
//! to the task (fixed, tool-attached or tracking).

pub mod filter;
pub mod node;
pub mod payload;
pub mod pipeline;
pub mod swing;
