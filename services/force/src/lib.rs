//! force: force processing. Raw sensor-frame samples in, a wrench estimate out, per sample.
//!
//! Now: the estimate carries the raw wrench in the sensor frame, flagged `NotTared` so that no
//! force mode may use it. Bias removal, tool gravity compensation, filtering, frame transforms
//! and validity checks arrive with the force-sensing issue.

pub mod node;
