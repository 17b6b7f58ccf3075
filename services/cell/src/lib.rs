//! `cell`: the binary's own commands — the launcher ([`launcher`]: `cell up`, the embedded
//! router and every service as a supervised process; the only crate that links every
//! service), commissioning ([`commission`]) and the latency bench ([`bench`], with its
//! in-process baseline [`inproc`]), the Foxglove live view and replay ([`viz`]) — over the operator client ([`client`]: requests, modes,
//! hybrid tasks, lead-through) and the experiments
//! ([`lab`]: cases, scoring, plots, the demo). Their modules are re-exported here under their
//! old paths (`cell::cli`, `cell::experiment`, …).

pub mod bench;
pub mod certs;
pub mod commission;
pub mod inproc;
pub mod launcher;
pub mod viz;

pub use client::{cli, hybrid, identify, lead, record, replay};
pub use lab::{demo, experiment, harness, leadexp, peg, plot, score, stall, steps, trace};
