//! What the device drivers share: the sample they hand out, their status counters and the
//! reconnect back-off. Drivers are plain tokio futures that never finish on their own (they
//! reconnect forever); drop the future to stop one. No zenoh here: the node publishes.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use serde::Serialize;

use crate::config::{SensorConfig, SensorDriver};

/// One device sample, sensor frame, SI units (N, N·m).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceSample {
    /// SRI packet number / ATI RDT sequence.
    pub device_seq: u32,
    /// Device status word (0 = healthy); SRI has none (0).
    pub device_status: u32,
    /// Fx Fy Fz [N], Tx Ty Tz [N·m].
    pub wrench: [f64; 6],
}

/// Status counters of a driver (cumulative over reconnects).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DriverStats {
    pub driver: String,
    pub address: String,
    /// Receiving samples on the current connection.
    pub connected: bool,
    pub samples: u64,
    /// Samples missing according to the device's sequence numbers.
    pub lost: u64,
    /// Sequence numbers that repeated or went backwards (device restart, reorder).
    pub out_of_order: u64,
    pub checksum_errors: u64,
    /// Frames / datagrams of the wrong length.
    pub length_errors: u64,
    /// Times bytes were skipped to find a frame header (SRI).
    pub resyncs: u64,
    pub discarded_bytes: u64,
    /// Connections (sessions delivering samples) after the first.
    pub reconnects: u64,
    /// Attempts that failed (connect, setup, or a session that ended).
    pub failures: u64,
    pub last_error: Option<String>,
    /// Last device status word and its decoded flags (ATI).
    pub device_status: u32,
    pub status_flags: Vec<String>,
    /// Where the conversion parameters came from (`config`, `device`, `box (E mode)`).
    pub calibration: String,
}

pub type SharedStats = Arc<Mutex<DriverStats>>;

/// Runs `f` on the stats (a poisoned lock is ignored: stats are best effort).
pub fn with_stats(stats: &SharedStats, f: impl FnOnce(&mut DriverStats)) {
    if let Ok(mut s) = stats.lock() {
        f(&mut s);
    }
}

/// Exponential back-off between reconnect attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            next: min,
        }
    }
    /// The delay to wait now; doubles the next one (up to max).
    pub fn step(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

/// Timing shared by the drivers (from `[sensor]`).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub connect_timeout: Duration,
    pub data_timeout: Duration,
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
}

impl Timing {
    pub fn from_config(c: &SensorConfig) -> Self {
        Self {
            connect_timeout: Duration::from_millis(c.connect_timeout_ms),
            data_timeout: Duration::from_millis(c.data_timeout_ms),
            reconnect_min: Duration::from_millis(c.reconnect_min_ms),
            reconnect_max: Duration::from_millis(c.reconnect_max_ms),
        }
    }
}

/// Runs the configured device driver forever, calling `sink` for every sample. Returns at once
/// for `driver = "none"`.
pub async fn run(
    cfg: &SensorConfig,
    stats: SharedStats,
    sink: &mut (dyn FnMut(DeviceSample) + Send),
) {
    let timing = Timing::from_config(cfg);
    match cfg.driver {
        SensorDriver::None => {}
        SensorDriver::Sri => crate::sri_driver::run(&cfg.sri, timing, stats, sink).await,
        SensorDriver::Ati => crate::ati_driver::run(&cfg.ati, timing, stats, sink).await,
    }
}

/// Records why a session ended.
pub(crate) fn record_failure(stats: &SharedStats, err: &anyhow::Error) {
    let msg = format!("{err:#}");
    tracing::warn!("sensor device: {msg}");
    with_stats(stats, |s| {
        s.connected = false;
        s.failures += 1;
        s.last_error = Some(msg);
    });
}

/// Marks the start of sample delivery on a new session (counts reconnects).
pub(crate) fn mark_connected(stats: &SharedStats, ever_connected: &mut bool) {
    with_stats(stats, |s| {
        s.connected = true;
        if *ever_connected {
            s.reconnects += 1;
        }
    });
    *ever_connected = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_max_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_millis(300));
        let got: Vec<u64> = (0..5).map(|_| b.step().as_millis() as u64).collect();
        assert_eq!(got, vec![50, 100, 200, 300, 300]);
        b.reset();
        assert_eq!(b.step(), Duration::from_millis(50));
    }
}
