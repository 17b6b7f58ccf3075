//! Scheduling watchdog: each process records when it was not scheduled, so that a "host stall"
//! is a measured fact, not a guess from a hold's reason.
//!
//! Every service runs one watchdog thread ([`spawn`]) that wakes every [`TICK_NS`] and records
//! each wake-up that came more than [`GAP_NS`] after the previous one as a [`Gap`] on the host's
//! monotonic clock (comparable between the processes of one host). The gaps are in the
//! service's status (`sched_gaps`). A stop that looks like a stall (a stale input, a silent
//! robot) may be repeated by an experiment only when [`common_stall`] finds one interval of at
//! least [`PROVEN_STALL_NS`] inside a gap of **every** cell process: the whole host froze. One
//! frozen or slow process (SIGSTOP, a bug, a starved service) is not a host stall and its stop
//! stands.
//!
//! The log ([`GapLog`]) and the proof ([`common_stall`]) are pure: time is a parameter.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The watchdog's period: 5 ms (200 wake-ups a second per process). The thread inherits the
/// service's real-time policy; at 2 ms the six processes' 3 000 real-time wake-ups a second
/// were suspected of loading a 2-vCPU VM (a local CI run, 2026-12-03, failed the latency
/// smoke and a stale-estimate count; not proven).
pub const TICK_NS: u64 = 5_000_000;
/// A wake-up later than this after the previous one is recorded as a gap (more than 2 ticks).
pub const GAP_NS: u64 = 12_000_000;
/// The shortest common gap that proves a host stall: every process frozen together for this
/// long (no single process can cause that). 20 ms: a local CI run (2026-12-03) stopped on
/// "no usable estimate for 51 ms" with all six processes frozen together for 19.6–23.8 ms —
/// with the input's own period and delivery that reaches a 50 ms staleness bound. (30 ms
/// refused those.)
pub const PROVEN_STALL_NS: u64 = 20_000_000;
/// Gaps kept per process (the newest).
pub const KEPT: usize = 64;

/// One interval in which the process was not scheduled: from its last wake-up to the late one
/// (host monotonic ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    pub from_ns: u64,
    pub to_ns: u64,
}

impl Gap {
    pub fn len_ns(&self) -> u64 {
        self.to_ns.saturating_sub(self.from_ns)
    }
}

/// The recent scheduling gaps of one process. Pure.
#[derive(Debug, Clone, Default)]
pub struct GapLog {
    last_ns: Option<u64>,
    gaps: VecDeque<Gap>,
    total: u64,
}

impl GapLog {
    /// One wake-up at `now_ns`.
    pub fn tick(&mut self, now_ns: u64) {
        if let Some(last) = self.last_ns {
            if now_ns > last && now_ns - last > GAP_NS {
                if self.gaps.len() == KEPT {
                    self.gaps.pop_front();
                }
                self.gaps.push_back(Gap {
                    from_ns: last,
                    to_ns: now_ns,
                });
                self.total += 1;
            }
        }
        self.last_ns = Some(self.last_ns.map_or(now_ns, |l| l.max(now_ns)));
    }

    /// The kept gaps, oldest first.
    pub fn gaps(&self) -> Vec<Gap> {
        self.gaps.iter().copied().collect()
    }

    /// Gaps recorded since start (kept or not).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The newest wake-up.
    pub fn last_tick_ns(&self) -> Option<u64> {
        self.last_ns
    }
}

/// The watchdog's part of a service's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SchedStatus {
    /// The newest gaps (at most [`KEPT`]), oldest first.
    pub gaps: Vec<Gap>,
    /// Gaps recorded since the service started.
    pub total: u64,
    /// The watchdog's newest wake-up (host monotonic ns): a status whose watchdog has not
    /// ticked recently comes from a process that is frozen right now.
    pub last_tick_ns: Option<u64>,
}

/// A host stall proven from every process's gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProvenStall {
    /// The interval every process spent unscheduled together.
    pub common: Gap,
    /// Each process's gap that contains it.
    pub per_process: Vec<(String, Gap)>,
}

/// Finds the longest interval inside `[from_ns, to_ns]` that lies inside a gap of every
/// process in `processes` (name, gaps) and is at least [`PROVEN_STALL_NS`] long, while no
/// process was unscheduled alone (its longest gap in the window beyond that interval) for more
/// than [`PROVEN_STALL_NS`] or the common interval, whichever is longer. When there is none, says why: which processes saw no gap in the
/// window at all, which one stalled alone, or the longest common interval found. An empty
/// process list proves nothing. Pure.
pub fn common_stall(
    processes: &[(String, Vec<Gap>)],
    from_ns: u64,
    to_ns: u64,
) -> Result<ProvenStall, String> {
    if processes.is_empty() {
        return Err("no process reported its scheduling gaps".into());
    }
    let in_window = |g: &Gap| g.to_ns > from_ns && g.from_ns < to_ns;
    let quiet: Vec<&str> = processes
        .iter()
        .filter(|(_, gs)| !gs.iter().any(in_window))
        .map(|(n, _)| n.as_str())
        .collect();
    if !quiet.is_empty() {
        let stalled: Vec<&str> = processes
            .iter()
            .filter(|(_, gs)| gs.iter().any(in_window))
            .map(|(n, _)| n.as_str())
            .collect();
        return Err(format!(
            "not a host stall: {} ran without a scheduling gap ≥ {} ms in the attempt{}",
            quiet.join(", "),
            GAP_NS / 1_000_000,
            if stalled.is_empty() {
                String::new()
            } else {
                format!(" (gaps only in {})", stalled.join(", "))
            }
        ));
    }
    // Candidate intervals: every gap of the first process clipped to the window, intersected
    // with each other process's gaps in turn.
    let mut cands: Vec<(Gap, Vec<(String, Gap)>)> = processes[0]
        .1
        .iter()
        .filter(|g| in_window(g))
        .map(|g| {
            (
                Gap {
                    from_ns: g.from_ns.max(from_ns),
                    to_ns: g.to_ns.min(to_ns),
                },
                vec![(processes[0].0.clone(), *g)],
            )
        })
        .collect();
    for (name, gs) in &processes[1..] {
        let mut next = Vec::new();
        for (c, owners) in &cands {
            for g in gs {
                let lo = c.from_ns.max(g.from_ns);
                let hi = c.to_ns.min(g.to_ns);
                if hi > lo {
                    let mut o = owners.clone();
                    o.push((name.clone(), *g));
                    next.push((
                        Gap {
                            from_ns: lo,
                            to_ns: hi,
                        },
                        o,
                    ));
                }
            }
        }
        cands = next;
    }
    let best = cands.into_iter().max_by_key(|(g, _)| g.len_ns());
    // A process unscheduled alone for longer than a stall's bound beyond the common interval
    // (its own longest gap in the window) is a fault of its own — a frozen or starved service
    // — that explains a stop as well as the host's stall does: not proven. A real host stall
    // pauses every process alike, but they do not wake alike: after a freeze of T every
    // process has T of input queued (the sensor's 1 kHz, the EGM cycles), and on two cores
    // the last to be scheduled waits while the others drain theirs, so its gap runs on by up
    // to about T. The bound on running alone is therefore the longer of [`PROVEN_STALL_NS`]
    // and the common interval itself (CI, 2026-12-03: a 31.9 ms common freeze, then force
    // unscheduled 30.0 ms longer; a SIGSTOPped process runs alone for far longer than the
    // freeze it hides behind, see the tests).
    if let Some((common, _)) = &best {
        let alone_bound = PROVEN_STALL_NS.max(common.len_ns());
        for (name, gs) in processes {
            let longest = gs
                .iter()
                .filter(|g| in_window(g))
                .map(|g| g.to_ns.min(to_ns).saturating_sub(g.from_ns.max(from_ns)))
                .max()
                .unwrap_or(0);
            let alone = longest.saturating_sub(common.len_ns());
            if alone > alone_bound {
                return Err(format!(
                    "not a host stall: {name} was unscheduled for {:.1} ms, {:.1} ms longer \
                     than every process together ({:.1} ms)",
                    longest as f64 * 1e-6,
                    alone as f64 * 1e-6,
                    common.len_ns() as f64 * 1e-6
                ));
            }
        }
    }
    match best {
        Some((common, per_process)) if common.len_ns() >= PROVEN_STALL_NS => Ok(ProvenStall {
            common,
            per_process,
        }),
        Some((common, _)) => Err(format!(
            "not a host stall: every process saw a gap, but they overlap for only {:.1} ms \
             (a proven stall: ≥ {} ms together)",
            common.len_ns() as f64 * 1e-6,
            PROVEN_STALL_NS / 1_000_000
        )),
        None => Err(format!(
            "not a host stall: every process saw a gap, but never at the same time \
             (a proven stall: ≥ {} ms together)",
            PROVEN_STALL_NS / 1_000_000
        )),
    }
}

type SharedLog = std::sync::Arc<std::sync::Mutex<GapLog>>;

static PROCESS_LOG: std::sync::OnceLock<SharedLog> = std::sync::OnceLock::new();

/// The watchdog of this process, started on first use: one thread per process, whatever the
/// number of bus nodes in it. It ticks every [`TICK_NS`] on the monotonic clock and lives as
/// long as the process.
pub fn process_log() -> SharedLog {
    PROCESS_LOG
        .get_or_init(|| {
            let log = SharedLog::default();
            let shared = log.clone();
            let spawned = std::thread::Builder::new()
                .name("sched-watchdog".into())
                .spawn(move || loop {
                    let now = crate::clock::mono_ns();
                    if let Ok(mut l) = shared.lock() {
                        l.tick(now);
                    }
                    std::thread::sleep(std::time::Duration::from_nanos(TICK_NS));
                });
            if let Err(e) = spawned {
                tracing::warn!("no scheduling watchdog: {e}");
            }
            log
        })
        .clone()
}

/// This process's watchdog status (starts the watchdog when it is not running yet).
pub fn process_status() -> SchedStatus {
    process_log()
        .lock()
        .map(|l| SchedStatus {
            gaps: l.gaps(),
            total: l.total(),
            last_tick_ns: l.last_tick_ns(),
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn log_with(ticks: &[u64]) -> Vec<Gap> {
        let mut l = GapLog::default();
        for t in ticks {
            l.tick(t * MS);
        }
        l.gaps()
    }

    #[test]
    fn only_late_wake_ups_are_gaps() {
        let g = log_with(&[0, 5, 10, 15, 75, 80, 85, 96, 110]);
        // 15 → 75 (60 ms) and 96 → 110 (14 ms); 85 → 96 is 11 ms, under the 12 ms bound.
        assert_eq!(
            g,
            vec![
                Gap {
                    from_ns: 15 * MS,
                    to_ns: 75 * MS
                },
                Gap {
                    from_ns: 96 * MS,
                    to_ns: 110 * MS
                }
            ]
        );
    }

    #[test]
    fn the_log_keeps_the_newest_gaps_and_counts_all() {
        let mut l = GapLog::default();
        for k in 0..(KEPT as u64 + 10) {
            l.tick(k * 40 * MS);
        }
        assert_eq!(l.gaps().len(), KEPT);
        assert_eq!(l.total(), KEPT as u64 + 9);
        assert_eq!(l.gaps()[KEPT - 1].to_ns, (KEPT as u64 + 9) * 40 * MS);
        // A clock that went backwards is not a gap and does not move the log back.
        l.tick(0);
        assert_eq!(l.total(), KEPT as u64 + 9);
    }

    fn gap(a: u64, b: u64) -> Gap {
        Gap {
            from_ns: a * MS,
            to_ns: b * MS,
        }
    }

    #[test]
    fn every_process_frozen_together_is_a_proven_stall() {
        let p = vec![
            ("sim".to_string(), vec![gap(100, 170), gap(500, 520)]),
            ("control".to_string(), vec![gap(105, 168)]),
            ("robot-io".to_string(), vec![gap(90, 160), gap(300, 320)]),
        ];
        let s = common_stall(&p, 0, 1000 * MS).expect("proven");
        assert_eq!(s.common, gap(105, 160));
        assert_eq!(s.per_process.len(), 3);
        assert_eq!(s.per_process[1], ("control".to_string(), gap(105, 168)));
    }

    #[test]
    fn one_frozen_process_is_not_a_host_stall() {
        let p = vec![
            ("sim".to_string(), vec![]),
            ("robot-io".to_string(), vec![gap(100, 400)]),
            ("control".to_string(), vec![gap(900, 910)]),
        ];
        let e = common_stall(&p, 0, 800 * MS).expect_err("one process");
        assert!(e.contains("sim, control"), "{e}");
        assert!(e.contains("gaps only in robot-io"), "{e}");
    }

    #[test]
    fn gaps_that_do_not_overlap_long_enough_prove_nothing() {
        // Each process starved in turn (CPU contention), never all at once.
        let p = vec![
            ("a".to_string(), vec![gap(100, 150)]),
            ("b".to_string(), vec![gap(150, 200)]),
        ];
        let e = common_stall(&p, 0, 1000 * MS).expect_err("in turn");
        assert!(e.contains("never at the same time"), "{e}");
        // Overlapping by 20 ms, but b was unscheduled 50 ms beyond: b's own stall.
        let p = vec![
            ("a".to_string(), vec![gap(100, 150)]),
            ("b".to_string(), vec![gap(130, 200)]),
        ];
        let e = common_stall(&p, 0, 1000 * MS).expect_err("short");
        assert!(e.contains("not a host stall"), "{e}");
        // Alike, but together for 15 ms only: under the 20 ms bound.
        let p = vec![
            ("a".to_string(), vec![gap(100, 116)]),
            ("b".to_string(), vec![gap(101, 117)]),
        ];
        let e = common_stall(&p, 0, 1000 * MS).expect_err("short");
        assert!(e.contains("15.0 ms"), "{e}");
        // Outside the attempt's window: not this attempt's stall.
        let p = vec![
            ("a".to_string(), vec![gap(100, 200)]),
            ("b".to_string(), vec![gap(100, 200)]),
        ];
        assert!(common_stall(&p, 300 * MS, 900 * MS).is_err());
        // Clipped to the window: 40 ms of a 100 ms stall inside it still proves.
        let s = common_stall(&p, 160 * MS, 900 * MS).expect("clipped");
        assert_eq!(s.common, gap(160, 200));
        assert!(common_stall(&[], 0, 1).is_err());
    }

    #[test]
    fn a_process_frozen_alone_beyond_a_common_stall_is_not_a_host_stall() {
        // Seen through the processes: force SIGSTOPped 200 ms while the host also paused
        // every process for 35 ms in the same attempt — the stop was force's, not the host's.
        let p = vec![
            ("force".to_string(), vec![gap(1000, 1200)]),
            ("control".to_string(), vec![gap(1100, 1136)]),
            ("sim".to_string(), vec![gap(1100, 1136)]),
        ];
        let e = common_stall(&p, 0, 2000 * MS).expect_err("force alone");
        assert!(e.contains("force was unscheduled for 200.0 ms"), "{e}");
        // The same host stall with every process paused alike is proven.
        let p = vec![
            ("force".to_string(), vec![gap(1099, 1137)]),
            ("control".to_string(), vec![gap(1100, 1136)]),
            ("sim".to_string(), vec![gap(1100, 1138)]),
        ];
        assert_eq!(
            common_stall(&p, 0, 2000 * MS).expect("alike").common,
            gap(1100, 1136)
        );
        // Seen in CI: every process frozen together for 32 ms, force woken 30 ms after the
        // others (draining the freeze's backlog on two cores): proven — it ran on alone for
        // less than the freeze itself.
        let p = vec![
            ("force".to_string(), vec![gap(1100, 1162)]),
            ("control".to_string(), vec![gap(1100, 1133)]),
            ("sim".to_string(), vec![gap(1101, 1132)]),
            ("robot-io".to_string(), vec![gap(1100, 1140)]),
        ];
        assert_eq!(
            common_stall(&p, 0, 2000 * MS).expect("backlog").common,
            gap(1101, 1132)
        );
        // The same freeze with force on for 46 ms beyond it: force's own stall.
        let p = vec![
            ("force".to_string(), vec![gap(1100, 1177)]),
            ("control".to_string(), vec![gap(1100, 1133)]),
            ("sim".to_string(), vec![gap(1101, 1132)]),
        ];
        let e = common_stall(&p, 0, 2000 * MS).expect_err("force alone");
        assert!(e.contains("force was unscheduled for 77.0 ms"), "{e}");
    }
}
