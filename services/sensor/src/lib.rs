//! sensor: F/T acquisition. Device drivers turn the sensor's wire protocol into raw wrench
//! samples (sensor frame, SI units) published at the device rate.
//!
//! - [`sri`], [`ati`]: the pure protocol codecs of the `ft` crate (`protocols/ft`: SRI M8128 AT
//!   commands and binary frames; ATI Net F/T RDT), re-exported;
//! - [`sri_driver`], [`ati_driver`]: tokio drivers with reconnect and back-off, independent of
//!   the bus ([`driver::run`] hands samples to a callback);
//! - [`node`]: the shell publishing `sensor/wrench_raw`.
//!
//! Drivers (`[sensor] driver`): `none` (a cell without a F/T sensor: the service runs,
//! reports that no device is configured and publishes nothing), `sri`, `ati`.

pub use ft::{ati, seq, sri};

pub mod ati_driver;
pub mod config;
pub mod driver;
pub mod node;
pub mod sri_driver;
