//! The cell's experiments, out of the CLI (issue 22): scenarios and cases, recording, scoring,
//! plots and the report, the demo's steps, and the proven-stall rule for a repeat.
//!
//! Module graph (no cycles): [`score`] (pure: targets, checks, value format) and [`plot`] and
//! [`stall`] and [`harness`] (the one private-cell harness) and [`trace`] (every recorded trace
//! and its CSV files) at the bottom; [`steps`] (placement, tare, scenario RPC) on them; [`leadexp`]
//! (lead-through experiments) and [`peg`] (peg-in-hole) and [`cases`] (the hybrid experiments'
//! cases, read from `experiments.toml`) on those; [`experiment`] (the hybrid experiments, `cell experiment`'s dispatch and report) on those; [`demo`]
//! on top. The `cell` binary parses arguments and calls in.

use std::path::PathBuf;

use serde_json::Value;

pub mod cases;
pub mod demo;
pub mod experiment;
pub mod harness;
pub mod leadexp;
pub mod peg;
pub mod plot;
pub mod score;
pub mod stall;
pub mod steps;
pub mod trace;

/// Options of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The plant law's rate (Hz); `None`: the experiment's (the paper's) rate.
    pub rate_hz: Option<f64>,
    /// Output directory of this experiment.
    pub out: PathBuf,
    /// Progress lines on stderr.
    pub progress: bool,
    /// Scenario `set` key paths applied after each case's scenario is loaded.
    pub world: serde_json::Map<String, Value>,
    /// The CI short form: fewer cases.
    pub short: bool,
}
