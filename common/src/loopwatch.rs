//! Where a service's loop spends its time, and when its per-cycle output paused.
//!
//! The process's scheduling watchdog ([`crate::watchdog`]) runs on a thread of its own: it
//! sees the whole process unscheduled, not one loop blocked in a call. The simulator's loop,
//! for one, emulates the IRC5 — which sends one `EgmRobot` every cycle, whatever the PC does —
//! and also publishes on the bus, answers scenario requests and writes its status; if any of
//! that blocked it, the emulated IRC5 would fall silent and robot-io would stop the cell on
//! `RobotSilent`: a fault of the simulator, not of the cell. So such a loop records here the
//! gaps between its outputs ([`LoopWatch::beat`]) and each section of an iteration that took
//! longer than [`SLOW_NS`]; both go into its status, and a stop that reads like a silence
//! names them (`cell stalls`, the sim's `egm_loop`).
//!
//! Pure: times are parameters (host monotonic ns).

use std::collections::VecDeque;

use crate::watchdog::{Gap, GapLog};
use serde::{Deserialize, Serialize};

/// A section of the loop longer than this is recorded (one EGM cycle).
pub const SLOW_NS: u64 = 4_000_000;
/// Slow sections kept (the newest).
pub const KEPT: usize = 64;

/// One section of the loop that took longer than [`SLOW_NS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slow {
    pub section: String,
    pub from_ns: u64,
    pub to_ns: u64,
}

/// The loop's record.
#[derive(Debug, Default)]
pub struct LoopWatch {
    sends: GapLog,
    slow: VecDeque<Slow>,
    slow_total: u64,
}

/// What the status carries (`egm_loop`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LoopStatus {
    /// Gaps between consecutive outputs longer than the watchdog's gap bound
    /// ([`crate::watchdog::GAP_NS`]), the newest, oldest first. (The sim's: between
    /// `EgmRobot` sends; a session that ended — comm timeout, stopped program — also leaves
    /// one, see its `egm.comm_timeouts`.)
    pub output_gaps: Vec<Gap>,
    pub output_gaps_total: u64,
    /// Sections of the loop that took longer than [`SLOW_NS`], the newest, oldest first.
    pub slow: Vec<Slow>,
    pub slow_total: u64,
}

impl LoopWatch {
    /// The loop's per-cycle output left at `now_ns`. Returns the gap since the previous one
    /// when it is recorded as a gap (ns).
    pub fn beat(&mut self, now_ns: u64) -> Option<u64> {
        let before = self.sends.total();
        let prev = self.sends.last_tick_ns();
        self.sends.tick(now_ns);
        (self.sends.total() > before)
            .then(|| prev.map(|p| now_ns.saturating_sub(p)))
            .flatten()
    }

    /// The section `section` ran from `from_ns` to `to_ns`.
    pub fn section(&mut self, section: &str, from_ns: u64, to_ns: u64) {
        if to_ns.saturating_sub(from_ns) <= SLOW_NS {
            return;
        }
        if self.slow.len() == KEPT {
            self.slow.pop_front();
        }
        self.slow.push_back(Slow {
            section: section.to_string(),
            from_ns,
            to_ns,
        });
        self.slow_total += 1;
    }

    pub fn status(&self) -> LoopStatus {
        LoopStatus {
            output_gaps: self.sends.gaps(),
            output_gaps_total: self.sends.total(),
            slow: self.slow.iter().cloned().collect(),
            slow_total: self.slow_total,
        }
    }
}

impl LoopStatus {
    /// What of this record falls inside `[from_ns, to_ns]`, in words, or None when the loop
    /// neither paused its sends nor ran a slow section there.
    pub fn describe_window(&self, from_ns: u64, to_ns: u64) -> Option<String> {
        let inside = |a: u64, b: u64| b > from_ns && a < to_ns;
        let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 * 1e-6;
        let gaps: Vec<String> = self
            .output_gaps
            .iter()
            .filter(|g| inside(g.from_ns, g.to_ns))
            .map(|g| format!("{:.0} ms", ms(g.from_ns, g.to_ns)))
            .collect();
        let slow: Vec<String> = self
            .slow
            .iter()
            .filter(|s| inside(s.from_ns, s.to_ns))
            .map(|s| format!("{} {:.0} ms", s.section, ms(s.from_ns, s.to_ns)))
            .collect();
        if gaps.is_empty() && slow.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !gaps.is_empty() {
            parts.push(format!("its output paused {}", gaps.join(", ")));
        }
        if !slow.is_empty() {
            parts.push(format!("slow loop sections: {}", slow.join(", ")));
        }
        Some(parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_pause_in_the_sends_and_a_slow_section_are_named_in_their_window() {
        let mut w = LoopWatch::default();
        let gaps: Vec<Option<u64>> = [0, 4, 8, 12, 70, 74]
            .iter()
            .map(|t| w.beat(t * MS))
            .collect();
        assert_eq!(gaps, [None, None, None, None, Some(58 * MS), None]);
        w.section("scenario reply", 13 * MS, 69 * MS);
        w.section("truth publish", 20 * MS, 21 * MS); // 1 ms: not slow
        let s = w.status();
        assert_eq!(s.output_gaps_total, 1);
        assert_eq!(s.slow_total, 1);
        let d = s.describe_window(0, 100 * MS).expect("seen");
        assert!(d.contains("output paused 58 ms"), "{d}");
        assert!(d.contains("scenario reply 56 ms"), "{d}");
        assert_eq!(s.describe_window(80 * MS, 200 * MS), None);
    }

    #[test]
    fn steady_sends_leave_nothing() {
        let mut w = LoopWatch::default();
        for k in 0..1000u64 {
            w.beat(k * 4 * MS);
            w.section("world", k * 4 * MS, k * 4 * MS + MS / 10);
        }
        assert_eq!(w.status(), LoopStatus::default());
    }
}
