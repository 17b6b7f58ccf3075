//! The command path's end-to-end latency and missed cycles, per robot cycle (pure: times are
//! parameters).
//!
//! Robot-io is where the chain starts and ends: it publishes the joint state of robot cycle
//! `k` when the controller's message for `k` arrives, and the joint command computed from it
//! comes back tagged with `k` (`JointCommand::cycle`). The end-to-end latency of cycle `k` is
//! that command's arrival minus the controller message's arrival. Cycle `k` is **missed** when,
//! at the next controller message (cycle `k + 1`, the moment robot-io must answer), no command
//! for `k` or later has arrived while commands are streaming (the newest command is still
//! fresh enough for the supervisor to use). At the end of a stream the newest command ages
//! out within the supervisor's command timeout, so a stream's end counts at most that many
//! cycles.

use common::latency::Histogram;

/// Controller-message arrivals remembered (cycles): a command older than this many cycles is
/// not matched to its cycle's arrival.
const RING: usize = 256;

/// End-to-end latency and missed-cycle counters.
#[derive(Debug, Clone)]
pub struct CycleLatency {
    /// (cycle, arrival ns) of the controller's recent messages, indexed by cycle % RING.
    ring: Vec<(u64, u64)>,
    /// The newest command's cycle already accounted.
    last_cmd_cycle: Option<u64>,
    prev_cycle: Option<u64>,
    prev_rx_ns: Option<u64>,
    /// Controller message of cycle k → joint command for k back in robot-io (ns).
    pub end_to_end: Histogram,
    /// Cycles with commands streaming.
    pub commanded: u64,
    /// Of those, cycles whose command had not arrived by the next controller message.
    pub missed: u64,
    /// Of the misses, those where the next controller message came less than 3/4 of the
    /// nominal period after this one: the chain had less than its cycle, because the
    /// controller's message for this cycle was late (its clock's jitter, or the host's), not
    /// because the chain took longer than a cycle. Counted, never excused: still in `missed`.
    pub missed_short_period: u64,
    /// The controller's nominal period (ns), for `missed_short_period`; unknown = not counted.
    nominal_period_ns: Option<u64>,
    /// The interval between consecutive controller messages as robot-io receives them (ns):
    /// a miss with a short interval is the controller's (or the host's) jitter, not the chain.
    pub period: Histogram,
}

/// The newest joint command as the shell sees it at a controller message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatestCommand {
    /// The robot cycle it was computed from.
    pub cycle: u64,
    /// Its arrival (ns, the stamps' clock).
    pub at_ns: u64,
    /// Whether the supervisor would still use it (younger than the command timeout).
    pub fresh: bool,
}

impl Default for CycleLatency {
    fn default() -> Self {
        Self::new()
    }
}

impl CycleLatency {
    pub fn new() -> Self {
        Self {
            ring: vec![(u64::MAX, 0); RING],
            last_cmd_cycle: None,
            prev_cycle: None,
            prev_rx_ns: None,
            end_to_end: Histogram::new(),
            commanded: 0,
            missed: 0,
            missed_short_period: 0,
            nominal_period_ns: None,
            period: Histogram::new(),
        }
    }

    /// The controller's nominal period (ns), which attributes misses after a short period.
    pub fn with_nominal_period_ns(mut self, ns: u64) -> Self {
        self.nominal_period_ns = Some(ns);
        self
    }

    /// At the controller's message of robot cycle `cycle`, received at `rx_ns`, with the newest
    /// joint command `latest`. Never allocates.
    pub fn on_cycle(&mut self, cycle: u64, rx_ns: u64, latest: Option<LatestCommand>) {
        if let Some(c) = latest {
            if self.last_cmd_cycle.is_none_or(|l| c.cycle > l) {
                let (k, rx) = self.ring[(c.cycle % RING as u64) as usize];
                if k == c.cycle && c.at_ns >= rx {
                    self.end_to_end.record(c.at_ns - rx);
                }
                self.last_cmd_cycle = Some(c.cycle);
            }
        }
        if let (Some(p), Some(c)) = (self.prev_cycle, latest) {
            if c.fresh && p < cycle {
                self.commanded += 1;
                if self.last_cmd_cycle.is_none_or(|l| l < p) {
                    self.missed += 1;
                    if let (Some(nom), Some(prev)) = (self.nominal_period_ns, self.prev_rx_ns) {
                        if rx_ns.saturating_sub(prev) < nom / 4 * 3 {
                            self.missed_short_period += 1;
                        }
                    }
                }
            }
        }
        if let Some(p) = self.prev_rx_ns {
            self.period.record(rx_ns.saturating_sub(p));
        }
        self.ring[(cycle % RING as u64) as usize] = (cycle, rx_ns);
        self.prev_cycle = Some(cycle);
        self.prev_rx_ns = Some(rx_ns);
    }

    /// For status: the summary (µs), the sparse histogram and the counters.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "end_to_end_us": self.end_to_end.summary(),
            "end_to_end_hist": self.end_to_end.to_sparse(),
            "commanded_cycles": self.commanded,
            "missed_cycles": self.missed,
            "missed_after_short_period": self.missed_short_period,
            "period_us": self.period.summary(),
            "period_hist": self.period.to_sparse(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(cycle: u64, at_ns: u64) -> Option<LatestCommand> {
        Some(LatestCommand {
            cycle,
            at_ns,
            fresh: true,
        })
    }

    #[test]
    fn a_command_each_cycle_is_measured_and_never_missed() {
        let mut l = CycleLatency::new();
        // Cycle k arrives at k ms; its command 300 µs later, before cycle k + 1.
        l.on_cycle(0, 0, None);
        for k in 1..100u64 {
            l.on_cycle(k, k * 1_000_000, cmd(k - 1, (k - 1) * 1_000_000 + 300_000));
        }
        assert_eq!(l.end_to_end.count(), 99);
        assert_eq!(l.commanded, 99);
        assert_eq!(l.missed, 0);
        let s = l.end_to_end.summary();
        assert!((s.p50 - 300.0).abs() < 300.0 / 16.0, "{s:?}");
    }

    #[test]
    fn a_late_command_is_a_miss_and_still_measured() {
        let mut l = CycleLatency::new();
        l.on_cycle(0, 0, None);
        l.on_cycle(1, 1_000_000, cmd(0, 200_000));
        // Cycle 1's command is late: at cycle 2 the newest is still cycle 0's.
        l.on_cycle(2, 2_000_000, cmd(0, 200_000));
        assert_eq!(l.missed, 1);
        // It arrives 1.5 ms after cycle 1 (before cycle 3): measured; cycle 2's has not come
        // by cycle 3, so that one is missed too.
        l.on_cycle(3, 3_000_000, cmd(1, 2_500_000));
        assert_eq!(l.missed, 2);
        // Cycle 3's command in time: no further miss.
        l.on_cycle(4, 4_000_000, cmd(3, 3_400_000));
        assert_eq!(l.missed, 2);
        assert_eq!(l.commanded, 4);
        assert_eq!(l.end_to_end.count(), 3);
        assert!(l.end_to_end.max() >= 1_400_000, "{}", l.end_to_end.max());
    }

    #[test]
    fn a_miss_after_a_short_controller_period_is_attributed() {
        let mut l = CycleLatency::new().with_nominal_period_ns(1_000_000);
        l.on_cycle(0, 0, None);
        l.on_cycle(1, 1_000_000, cmd(0, 200_000));
        // Cycle 2's message is 900 µs late, cycle 3's on time: cycle 2's command (300 µs
        // after its message) has not come 100 µs later. A miss, after a short period.
        l.on_cycle(2, 2_900_000, cmd(1, 1_200_000));
        l.on_cycle(3, 3_000_000, cmd(1, 1_200_000));
        assert_eq!((l.missed, l.missed_short_period), (1, 1));
        l.on_cycle(4, 4_000_000, cmd(3, 3_200_000));
        assert_eq!((l.missed, l.missed_short_period), (1, 1));
        // Cycle 4's command not back after a whole period: a miss of the chain's own.
        l.on_cycle(5, 5_000_000, cmd(3, 3_200_000));
        assert_eq!((l.missed, l.missed_short_period), (2, 1));
        l.on_cycle(6, 6_000_000, cmd(5, 5_200_000));
        assert_eq!((l.missed, l.missed_short_period), (2, 1));
    }

    #[test]
    fn no_stream_no_miss() {
        let mut l = CycleLatency::new();
        for k in 0..10u64 {
            l.on_cycle(k, k * 4_000_000, None);
        }
        // A stale command (the supervisor no longer uses it) is not a stream.
        for k in 10..20u64 {
            l.on_cycle(
                k,
                k * 4_000_000,
                Some(LatestCommand {
                    cycle: 3,
                    at_ns: 1,
                    fresh: false,
                }),
            );
        }
        assert_eq!((l.commanded, l.missed), (0, 0));
    }
}
