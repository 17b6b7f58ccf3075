//! sensor: F/T acquisition. Device drivers turn the sensor's wire protocol into raw wrench
//! samples (sensor frame, SI units) published at the device rate.
//!
//! Drivers: `none` (a cell without a F/T sensor: the service runs, reports that no device is
//! configured and publishes nothing). The SRI M8128 and ATI Net F/T drivers arrive with the
//! force-sensing issue.

pub mod node;
