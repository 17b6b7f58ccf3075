//! The core's inputs as the shell hands them over: which wrench a force mode may use
//! ([`WrenchGate`]) and the robot's clock ([`RobotClock`]). Pure: times are parameters.

use common::msg::WrenchFault;
use nalgebra::Vector3;

use crate::hybrid::WrenchPeak;

/// The contact wrench on the tool at the TCP in base axes, or why it cannot be used.
pub type WrenchInput = Result<(Vector3<f64>, Vector3<f64>), WrenchUnusable>;

/// Why no wrench may be used this cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum WrenchUnusable {
    /// The force service flagged the estimate (never `None` or `Stale`: a `Stale` flag is a
    /// gap, bridged until it is too old).
    Fault(WrenchFault),
    /// No usable estimate for this long (ms): a gap longer than the bridge.
    Stale { age_ms: f64 },
    /// None received yet.
    NoneReceived,
}

impl WrenchUnusable {
    /// An impact (a `Spike`) or a saturated sensor: for safety a collision until proven
    /// otherwise, so the force mode stops protectively.
    pub fn protective_cause(&self) -> Option<common::msg::ProtectiveCause> {
        match self {
            Self::Fault(WrenchFault::Spike) => Some(common::msg::ProtectiveCause::Impact),
            Self::Fault(WrenchFault::Saturated) => Some(common::msg::ProtectiveCause::Saturated),
            _ => None,
        }
    }
}

impl std::fmt::Display for WrenchUnusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fault(x) => write!(f, "{x:?}"),
            Self::Stale { age_ms } => write!(f, "Stale (no usable estimate for {age_ms:.0} ms)"),
            Self::NoneReceived => f.write_str("none received"),
        }
    }
}

/// Which wrench a force mode may use (pure; times are parameters, any epoch). A `Stale` flag
/// from the force service (no sample for its `stale_ms`), or no estimate at all for `gap_s`
/// (the force service itself silent), is a gap in the samples, bridged with the last usable
/// estimate for up to `max_age_s`; any other fault is refused at once.
#[derive(Debug, Clone, Copy)]
pub struct WrenchGate {
    pub max_age_s: f64,
    /// An estimate older than this is a gap (the force service publishes one per sample).
    pub gap_s: f64,
    last_good: Option<(common::msg::WrenchEstimate, f64)>,
    /// The last input was the last usable estimate bridged over a `Stale` gap.
    bridging: bool,
}

impl WrenchGate {
    pub fn new(max_age_s: f64, gap_s: f64) -> Self {
        Self {
            max_age_s,
            gap_s,
            last_good: None,
            bridging: false,
        }
    }

    /// The newest estimate (`None`: none yet) received at `received_s`, judged at `now_s`.
    pub fn input(
        &mut self,
        newest: Option<(&common::msg::WrenchEstimate, f64)>,
        now_s: f64,
    ) -> WrenchInput {
        self.bridging = false;
        if let Some((w, at)) = newest {
            match w.fault {
                WrenchFault::None => self.last_good = Some((*w, at)),
                WrenchFault::Stale => self.bridging = true,
                f => return Err(WrenchUnusable::Fault(f)),
            }
        }
        let Some((good, at)) = self.last_good else {
            return Err(WrenchUnusable::NoneReceived);
        };
        let age = now_s - at;
        if age > self.gap_s {
            // The samples stopped without a flag (the force service is silent).
            self.bridging = true;
        }
        if age.is_nan() || age > self.max_age_s {
            return Err(WrenchUnusable::Stale { age_ms: age * 1e3 });
        }
        let b = good.base;
        Ok((Vector3::from(b.force_n), Vector3::from(b.torque_nm)))
    }

    /// The unfiltered peaks carried by the estimate [`WrenchGate::input`] last accepted (zero
    /// before the first).
    pub fn peak(&self) -> WrenchPeak {
        self.last_good
            .map_or(WrenchPeak::default(), |(w, _)| WrenchPeak {
                force_n: w.peak_force_n,
                torque_nm: w.peak_torque_nm,
                fast_swing_n: w.fast_swing_n,
                bridged: self.bridging,
            })
    }
}

/// The robot's clock as control sees it: tool poses carry the robot cycle they belong to and
/// the time robot-io received that cycle; the receive times jitter with the host (±0.6 ms on a
/// loaded laptop), the robot's cycles do not. `RobotClock` gives each cycle a time on a uniform
/// grid — cycle count × the mean cycle period — re-anchored to the receive time when the two
/// part by more than [`RobotClock::REANCHOR_S`] (a pause, a new robot session). Laws that
/// integrate a command (hybrid, moves) use it, so the jitter of the host does not become jitter
/// of the reference.
#[derive(Debug, Clone, Copy, Default)]
pub struct RobotClock {
    /// The last cycle and the time given to it.
    last: Option<(u64, f64)>,
    period_s: Option<f64>,
}

impl RobotClock {
    pub const REANCHOR_S: f64 = 0.02;

    /// The estimated robot cycle period (s), once two cycles were seen.
    pub fn period_s(&self) -> Option<f64> {
        self.period_s
    }
    /// How much of the receive-time error one cycle corrects (a first-order phase lock).
    const PHASE_GAIN: f64 = 0.05;
    /// How fast the period estimate follows (per cycle).
    const PERIOD_GAIN: f64 = 0.002;

    /// The time of `cycle`, received at `stamp_s`.
    pub fn time(&mut self, cycle: u64, stamp_s: f64) -> f64 {
        let t = match (self.last, self.period_s) {
            (Some((c0, t0)), Some(p)) if (1..=10).contains(&cycle.wrapping_sub(c0)) => {
                let pred = t0 + cycle.wrapping_sub(c0) as f64 * p;
                let err = stamp_s - pred;
                if err.abs() > Self::REANCHOR_S {
                    stamp_s
                } else {
                    self.period_s = Some(p + Self::PERIOD_GAIN * err);
                    pred + Self::PHASE_GAIN * err
                }
            }
            (Some((c0, t0)), None) if (1..=10).contains(&cycle.wrapping_sub(c0)) => {
                self.period_s = Some((stamp_s - t0) / cycle.wrapping_sub(c0) as f64);
                stamp_s
            }
            _ => stamp_s,
        };
        self.last = Some((cycle, t));
        t
    }
}
