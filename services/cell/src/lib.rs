//! `cell`: the binary's own commands — commissioning ([`commission`]) and the latency bench
//! ([`bench`], with its in-process baseline [`inproc`]) — over the operator client
//! ([`client`]: requests, modes, hybrid tasks, lead-through, the launcher) and the experiments
//! ([`lab`]: cases, scoring, plots, the demo). Their modules are re-exported here under their
//! old paths (`cell::cli`, `cell::experiment`, …).

pub mod bench;
pub mod commission;
pub mod inproc;

pub use client::{cli, hybrid, identify, launcher, lead};
pub use lab::{demo, experiment, leadexp, peg, plot, score, stall, steps};
