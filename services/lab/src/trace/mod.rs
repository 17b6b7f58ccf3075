//! Every recorded trace of a run, and its CSV files: a hybrid task's ([`hybrid`]: control's
//! states, the simulator's truth attached, `trace.csv`, `truth.csv`), a guide session's
//! ([`guide`]: `guide.csv`) and, for both, what the cell did for [`AFTER_END_S`] after the
//! end ([`AfterRow`], `after_end.csv`; issue 41: what the force did after a stop was recorded
//! nowhere). The bus client (`client::hybrid::follow`, `client::guide::run`) runs the task or
//! the session; this module records it; `crate::score` turns the records into figures.

use std::{io::Write, path::Path, time::Duration};

use anyhow::Context;
use common::codec;
use zenoh::{
    handlers::{RingChannel, RingChannelHandler},
    pubsub::Subscriber,
    sample::Sample,
    Session,
};

pub mod guide;
pub mod hybrid;

/// How long the trace goes on after a task's end (s).
pub const AFTER_END_S: f64 = 1.0;

/// A subscriber that keeps the newest samples.
pub type Ring = Subscriber<RingChannelHandler<Sample>>;

/// Subscribes `key` into a ring of `n` samples.
pub async fn ring(s: &Session, key: String, n: usize) -> anyhow::Result<Ring> {
    s.declare_subscriber(key.clone())
        .with(RingChannel::new(n))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))
}

/// One sample after a task's end: the force service's estimate (what control saw, base, at
/// the TCP) or the simulator's truth (the surfaces' force on the tool, base, and the true
/// TCP), `t_s` after the end (the estimate on the host's monotonic clock, the truth on the
/// simulator's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AfterRow {
    pub t_s: f64,
    pub truth: bool,
    pub force_base_n: [f64; 3],
    pub tcp_m: Option<[f64; 3]>,
}

/// The force service's estimate and the simulator's truth from `end_ns` (host monotonic) to
/// [`AFTER_END_S`] after it, timed from it (both stamped on the host's monotonic clock). The
/// rings must still hold the samples since `end_ns` (`cell hybrid` drains them through the
/// task; `cell guide` does not, its rings hold seconds of samples).
pub async fn trace_after_end(world: &Ring, estimates: &Ring, end_ns: u64) -> Vec<AfterRow> {
    let until_ns = end_ns + (AFTER_END_S * 1e9) as u64;
    let mut after = Vec::new();
    loop {
        let now = common::clock::mono_ns();
        while let Ok(Some(w)) = world.try_recv() {
            if let Ok(t) = codec::decode::<common::msg::SimTruth>(&w.payload().to_bytes()) {
                let at = t.stamp.source_mono_ns;
                if (end_ns..=until_ns).contains(&at) {
                    after.push(AfterRow {
                        t_s: (at - end_ns) as f64 * 1e-9,
                        truth: true,
                        force_base_n: t.contact_force_base_n,
                        tcp_m: Some(t.tcp_in_base_m),
                    });
                }
            }
        }
        while let Ok(Some(e)) = estimates.try_recv() {
            if let Ok(w) = codec::decode::<common::msg::WrenchEstimate>(&e.payload().to_bytes()) {
                let at = w.stamp.source_mono_ns;
                if (end_ns..=until_ns).contains(&at) {
                    after.push(AfterRow {
                        t_s: (at - end_ns) as f64 * 1e-9,
                        truth: false,
                        force_base_n: w.base.force_n,
                        tcp_m: None,
                    });
                }
            }
        }
        if now >= until_ns {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    after.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    after
}

/// Writes the trace after an end (`after_end.csv`); nothing when there is none.
pub fn write_after_end(path: &Path, after: &[AfterRow]) -> anyhow::Result<()> {
    if after.is_empty() {
        return Ok(());
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(
        f,
        "t_after_end_s,source,force_base_x,force_base_y,force_base_z,tcp_x,tcp_y,tcp_z"
    )?;
    for r in after {
        let [x, y, z] = r.force_base_n;
        let tcp = r.tcp_m.map_or(",,".to_string(), |p| {
            format!("{:.7},{:.7},{:.7}", p[0], p[1], p[2])
        });
        writeln!(
            f,
            "{:.6},{},{x:.4},{y:.4},{z:.4},{tcp}",
            r.t_s,
            if r.truth { "truth" } else { "estimate" }
        )?;
    }
    f.flush()?;
    Ok(())
}
