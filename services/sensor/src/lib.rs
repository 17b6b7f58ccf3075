//! sensor: F/T acquisition. Device drivers turn the sensor's wire protocol into raw wrench
//! samples (sensor frame, SI units) published at the device rate.
//!
//! - [`sri`], [`ati`]: pure protocol codecs (SRI M8128 AT commands and binary frames; ATI
//!   Net F/T RDT), also used by the simulator's device emulators;
//! - [`sri_driver`], [`ati_driver`]: tokio drivers with reconnect and back-off, independent of
//!   the bus ([`driver::run`] hands samples to a callback);
//! - [`node`]: the shell publishing `sensor/wrench_raw`.
//!
//! Drivers (`[sensor] driver`): `none` (a cell without a F/T sensor: the service runs,
//! reports that no device is configured and publishes nothing), `sri`, `ati`.

pub mod ati;
pub mod ati_driver;
pub mod config;
pub mod driver;
pub mod node;
pub mod seq;
pub mod sri;
pub mod sri_driver;
