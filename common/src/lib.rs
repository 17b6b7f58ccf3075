//! `common`: the cell's bus contract and the plumbing every service shares.
//!
//! - [`msg`]: every wire type (units in names, frames named, stamped);
//! - [`codec`]: the only postcard calls (version byte, trailing bytes rejected);
//! - [`topic`]: every key expression, typed; generates ARCHITECTURE.md's topic table;
//! - [`bus`]: zenoh session from CLI args, typed publishers/subscribers, liveliness, status;
//! - [`config`]: one TOML per cell, file → env → `--set`, every error listed at once;
//! - [`service`]: tracing, shutdown signal, config loading for binaries;
//! - [`clock`]: the monotonic clock used for stamps;
//! - [`commander`]: one commander of the robot at a time (the rule both commanders apply);
//! - [`latency`]: latency histograms (per-hop and end-to-end figures in the services' status);
//! - [`watchdog`]: each process's scheduling gaps, and the proof of a host stall;
//! - [`loopwatch`]: one loop's output gaps and slow sections (what the watchdog cannot see).
//!
//! It deliberately holds no control law, kinematics or device protocol: those live in the
//! services' pure cores.

pub mod bus;
pub mod clock;
pub mod codec;
pub mod commander;
pub mod config;
pub mod errtext;
pub mod latency;
pub mod loopwatch;
pub mod msg;
pub mod ports;
pub mod security;
pub mod service;
pub mod testing;
pub mod topic;
pub mod watchdog;
