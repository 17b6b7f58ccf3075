//! Supervision: default limits and speed bounds, task ends ([`Abort`], [`TaskError`]), the
//! contact phase and force limits, travel bounds, and the oscillation watch.

use common::msg::{HybridLimits, HybridPhase, ProtectiveCause, StopCategory};
use nalgebra::Isometry3;

use super::{ArmRun, AXES};

/// The cell's speed bound on a task's translational position axes by default (m/s;
/// `[control.hybrid] position_speed_m_s`).
pub const DEFAULT_POSITION_SPEED_M_S: f64 = 0.25;
/// The same for rotational position axes (rad/s; `position_speed_rad_s`).
pub const DEFAULT_POSITION_SPEED_RAD_S: f64 = 1.0;

/// The per-axis speed bounds hold on the norm of each group's vector (issue 41 item 5: a
/// task moving along three axes at once went √3× its bound along the diagonal): the
/// translational force axes, the translational position axes, and the same two groups of
/// rotational axes, each scaled down as a whole (the direction kept) to its smallest bound.
pub fn clamp_norms(u: &mut [f64; 6], force_axes: &[bool; 6], bound: &[f64; 6]) {
    for base in [0, 3] {
        for force in [true, false] {
            let in_group = |k: &usize| force_axes[*k] == force;
            let n = (base..base + 3).filter(in_group).count();
            let lim = (base..base + 3)
                .filter(in_group)
                .map(|k| bound[k])
                .fold(f64::INFINITY, f64::min);
            let norm = (base..base + 3)
                .filter(in_group)
                .map(|k| u[k] * u[k])
                .sum::<f64>()
                .sqrt();
            if n > 1 && lim.is_finite() && lim >= 0.0 && norm > lim {
                let scale = lim / norm;
                for k in (base..base + 3).filter(in_group) {
                    u[k] *= scale;
                }
            }
        }
    }
}

/// The cell's default ceiling on an arm task's position deviation (m): see [`default_limits`].
pub const DEFAULT_DEVIATION_M: f64 = 0.005;
/// The same about rotational position axes (rad, ≈ 2.9°).
pub const DEFAULT_DEVIATION_RAD: f64 = 0.05;
/// The 2-DOF R&C plant's default ceiling (m): Fig. 9's 30 cm sine on the plant's boom leads
/// its hand by up to 8.4 mm (measured) before the paper's contact bounce ends it.
pub const DEFAULT_PLANT_DEVIATION_M: f64 = 0.02;

/// Default limits (UR `force_mode`-like): approach at 5 mm/s, 50 N; a position axis more
/// than 5 mm (0.05 rad) off its reference is a protective stop. The deviation bound is a few
/// millimetres (issue 41): the shipped arm tasks reach 0.7 mm (press), 1.9 mm (contour), 0.05
/// mm (peg), 0.7 mm under two cycles of EGM jitter — a task that leaves its path by more is
/// no longer doing what it was written for, and 50 mm of wander is a collision.
pub fn default_limits() -> HybridLimits {
    HybridLimits {
        force_axis_speed_m_s: 0.005,
        force_axis_speed_rad_s: 0.05,
        deviation_m: DEFAULT_DEVIATION_M,
        deviation_rad: DEFAULT_DEVIATION_RAD,
        max_force_n: 50.0,
        max_torque_nm: 5.0,
        contact_threshold_n: 1.0,
        contact_loss_s: 0.1,
        // The travel bound (`approach_travel_m`) is what stops a dive; the timeout ends a search
        // that stalls, and leaves room for slow probing (`cell identify stiffness`: 0.1 mm/s).
        approach_timeout_s: 120.0,
        approach_travel_m: 0.05,
        reapproach_travel_m: 0.005,
        contact_travel_m: 0.02,
    }
}

/// Why a task ended by itself, and how it stops ([`StopCategory`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Abort {
    pub why: String,
    pub stop: StopCategory,
}

impl Abort {
    /// An end that comes to rest through a [`crate::ending::Ending`] that unloads the surface.
    pub fn controlled(why: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            stop: StopCategory::Controlled,
        }
    }
    /// A protective end: it stops at once, robot-io holds where the arm is measured.
    pub fn protective(cause: ProtectiveCause, why: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            stop: StopCategory::Protective(cause),
        }
    }
    /// The wrench could not be used: an impact (`Spike`) or a saturated sensor is protective
    /// (for safety a collision until proven otherwise); a gap or a missing tare is not.
    pub fn wrench(e: &crate::core::WrenchUnusable) -> Self {
        let why = format!("wrench estimate {e}");
        match e.protective_cause() {
            Some(c) => Self::protective(c, why),
            None => Self::controlled(why),
        }
    }
    /// A force or torque over the task's limit, a position axis pushed past its deviation
    /// limit, a non-finite input, an impact or a saturated sensor.
    pub fn is_protective(&self) -> bool {
        self.stop.is_protective()
    }
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// A task refused before it starts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskError {
    #[error("invalid task: {0}")]
    Invalid(String),
}

/// Contact phase and the force/torque limits, shared by both stages.
#[derive(Debug, Clone, PartialEq)]
pub struct Supervision {
    pub limits: HybridLimits,
    pub phase: HybridPhase,
    below_since: Option<f64>,
}

impl Supervision {
    pub fn new(limits: HybridLimits) -> Self {
        Self {
            limits,
            phase: HybridPhase::Approach,
            below_since: None,
        }
    }

    /// Updates the phase from the applied force on the force axes with a non-zero reference;
    /// checks the maximum contact force/torque (`f` the applied force vector, any frame).
    /// Returns whether the phase just became `ContactLost`.
    pub fn update(
        &mut self,
        t: f64,
        f_c: &[f64; 6],
        f_ref: &[f64; 6],
        sel: &[bool; 6],
        force_norm: f64,
        torque_norm: f64,
    ) -> Result<bool, Abort> {
        let l = &self.limits;
        if !(force_norm.is_finite() && torque_norm.is_finite()) {
            return Err(Abort::protective(
                ProtectiveCause::NonFinite,
                "non-finite wrench",
            ));
        }
        if force_norm > l.max_force_n {
            return Err(Abort::protective(
                ProtectiveCause::ForceLimit,
                format!(
                    "contact force {force_norm:.1} N > max {:.1} N",
                    l.max_force_n
                ),
            ));
        }
        if torque_norm > l.max_torque_nm {
            return Err(Abort::protective(
                ProtectiveCause::TorqueLimit,
                format!(
                    "contact torque {torque_norm:.2} N·m > max {:.2} N·m",
                    l.max_torque_nm
                ),
            ));
        }
        // Contact: any force axis pressing in its reference's direction with at least
        // `contact_threshold_n`, or half the reference when that is smaller.
        let threshold = |k: usize| {
            if f_ref[k] != 0.0 {
                l.contact_threshold_n.min(0.5 * f_ref[k].abs())
            } else {
                l.contact_threshold_n
            }
        };
        let dir = |k: usize| if f_ref[k] < 0.0 { -1.0 } else { 1.0 };
        // The axes that define contact: the force axes pressing (a non-zero reference). A
        // zero-reference force axis is compliance (a peg's lateral axes in its hole, a
        // contour's tangent): a wall it meets is not the surface the task presses on, so it
        // neither makes nor keeps a contact. With no pressing axis at all (every reference
        // zero, a ramp at its start) every force axis counts.
        let pressing_any = (0..6).any(|k| sel[k] && f_ref[k] != 0.0);
        let sel: [bool; 6] = std::array::from_fn(|k| sel[k] && (f_ref[k] != 0.0 || !pressing_any));
        let sel = &sel;
        let mut pressing = false;
        let mut any = false;
        for k in 0..6 {
            if !sel[k] {
                continue;
            }
            any = true;
            if dir(k) * f_c[k] >= threshold(k) {
                pressing = true;
            }
        }
        if !any {
            self.phase = HybridPhase::Contact;
            return Ok(false);
        }
        let mut lost_now = false;
        match self.phase {
            HybridPhase::Approach | HybridPhase::ContactLost => {
                if pressing {
                    self.phase = HybridPhase::Contact;
                    self.below_since = None;
                }
            }
            HybridPhase::Contact => {
                let weak = (0..6)
                    .filter(|k| sel[*k])
                    .all(|k| dir(k) * f_c[k] < 0.5 * threshold(k));
                if weak {
                    let since = *self.below_since.get_or_insert(t);
                    if t - since >= l.contact_loss_s {
                        self.phase = HybridPhase::ContactLost;
                        lost_now = true;
                    }
                } else {
                    self.below_since = None;
                }
            }
            HybridPhase::Done | HybridPhase::Aborted => {}
        }
        Ok(lost_now)
    }

    pub fn in_contact(&self) -> bool {
        self.phase == HybridPhase::Contact
    }
}

/// Swings within [`OSC_WINDOW_S`] that mean a force loop oscillates.
pub const OSC_SWINGS: usize = 4;
/// The oscillation observer's window (s).
pub const OSC_WINDOW_S: f64 = 1.0;

/// Observer of a force loop that oscillates (a limit cycle, a tool bouncing on a surface
/// stiffer than the gains were made for): on every force axis, the force (torque) error's
/// extrema are confirmed with a hysteresis of twice the amplitude `max(25 % of |F_ref|, 2 N)`
/// (rotational: `max(25 % of |τ_ref|, 0.2 N·m)`; an axis with a zero reference — compliant,
/// e.g. a peg's sides — with [`OSC_ZERO_REF_AMPLITUDE`]'s wider floor, as contact there comes
/// and goes); each confirmed extremum is a swing, and [`OSC_SWINGS`] swings within
/// [`OSC_WINDOW_S`] on any axis mean the loop oscillates (issue 41 item 8: the rotational and
/// the zero-reference axes were not watched). A step's overshoot and one
/// undershoot (the first contact on a stiff surface: 10 → −17 → +6 → −1 N of error) make at
/// most three; a 5 Hz chatter makes four in 0.4 s. Pure, allocation-free; time is a parameter.
#[derive(Debug, Clone, Copy, Default)]
pub struct OscillationWatch {
    axes: [SwingAxis; 6],
}

/// The swing amplitude floor on a force axis whose reference is zero: (N, N·m).
pub const OSC_ZERO_REF_AMPLITUDE: (f64, f64) = (5.0, 0.5);

/// One axis' swings (kinematics' one detector), the last [`OSC_SWINGS`] kept.
type SwingAxis = kinematics::swing::SwingCounter<OSC_SWINGS>;

impl OscillationWatch {
    /// One cycle: the applied wrench and its reference in {C}. Returns the axis (0..6) that
    /// oscillates and the swing amplitude band (N or N·m), if one does.
    pub fn step(
        &mut self,
        t: f64,
        f_c: &[f64; 6],
        f_ref: &[f64; 6],
        sel: &[bool; 6],
    ) -> Option<(usize, f64)> {
        for k in 0..6 {
            if !(sel[k] && f_c[k].is_finite() && f_ref[k].is_finite()) {
                continue;
            }
            let (floor, zero) = if k < 3 {
                (2.0, OSC_ZERO_REF_AMPLITUDE.0)
            } else {
                (0.2, OSC_ZERO_REF_AMPLITUDE.1)
            };
            let band = if f_ref[k] == 0.0 {
                2.0 * zero
            } else {
                2.0 * (0.25 * f_ref[k].abs()).max(floor)
            };
            let a = &mut self.axes[k];
            if a.step(t, f_ref[k] - f_c[k], band, OSC_SWINGS).is_some()
                && a.recent(t, OSC_WINDOW_S, OSC_SWINGS) >= OSC_SWINGS
            {
                return Some((k, band));
            }
        }
        None
    }
}

/// The force service's confirmed, unfiltered window peaks of the estimate in use
/// (`WrenchEstimate::peak_force_n`, `peak_torque_nm`): the force limits' input.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WrenchPeak {
    pub force_n: f64,
    pub torque_nm: f64,
    /// The wrench is the last usable estimate bridged over a gap in the samples (the force
    /// service flags `Stale`): force axes hold their command, the force integral stops.
    pub bridged: bool,
    /// The fast band of the oscillation watch (`WrenchEstimate::fast_swing_n`, N peak to
    /// peak; 0: none).
    pub fast_swing_n: f64,
}

/// The fast band of the oscillation watch for a task's force axes (N peak to peak): the
/// force service measures swings of the unfiltered force faster than the 12 Hz estimate
/// shows (`WrenchEstimate::fast_swing_n`); a task ends when they reach twice the slow watch's
/// amplitude on its translational force reference — `2·max(25 % of |F_ref|, 2 N)`, or
/// `2·OSC_ZERO_REF_AMPLITUDE` when that reference is zero. `None` without a translational
/// force axis.
pub fn fast_swing_band(f_ref: &[f64; 6], sel: &[bool; 6]) -> Option<f64> {
    if !sel[..3].iter().any(|s| *s) {
        return None;
    }
    let fr = (0..3)
        .filter(|k| sel[*k])
        .map(|k| f_ref[k] * f_ref[k])
        .sum::<f64>()
        .sqrt();
    Some(if fr == 0.0 {
        2.0 * OSC_ZERO_REF_AMPLITUDE.0
    } else {
        2.0 * (0.25 * fr).max(2.0)
    })
}

impl ArmRun {
    /// The travel bound of a search for the surface: along the translational force axes of
    /// {C}, the measured TCP may move at most `approach_travel_m` from the task's start before
    /// the first contact, and at most `reapproach_travel_m` from where a contact was declared
    /// lost (off an edge, into a hole) until the surface is found again. Past it the task ends.
    /// (Rotational force axes are bounded by their speed and the task's duration only.)
    pub(super) fn check_travel(&mut self, tcp: &Isometry3<f64>) -> Result<(), Abort> {
        self.check_contact_travel(tcp)?;
        if self.sup.in_contact() || !self.task.force_axes[..3].iter().any(|s| *s) {
            self.approach_from = None;
            return Ok(());
        }
        let p = tcp.translation.vector;
        let from = *self.approach_from.get_or_insert(p);
        let d = self.frame.rotation.inverse() * (p - from);
        let travel = (0..3)
            .filter(|k| self.task.force_axes[*k])
            .map(|k| d[k].abs())
            .fold(0.0, f64::max);
        let (bound, name, what) = if self.contact_s.is_none() {
            (
                self.sup.limits.approach_travel_m,
                "approach_travel_m",
                "no contact",
            )
        } else {
            (
                self.sup.limits.reapproach_travel_m,
                "reapproach_travel_m",
                "contact lost and not found again",
            )
        };
        if travel > bound {
            return Err(Abort::controlled(format!(
                "{what} within {:.1} mm of travel along the force axes (limits.{name})",
                bound * 1e3
            )));
        }
        Ok(())
    }

    /// The travel bound in contact: from the first contact on, the measured TCP's net travel
    /// along each translational force axis of {C} (its steps resolved along {C} as it is at
    /// each step, summed with their signs) stays within `contact_travel_m`. Pressing on a
    /// still surface it stays at the surface's compliance; sliding along a surface or round a
    /// contour (a tracking frame's normal turns with it) adds nothing; a surface that yields or
    /// moves away, or one force axis sliding off its edge while another still touches (the
    /// search bounds above run only while no axis touches), adds up to it, and the task ends
    /// there, naming the axis.
    fn check_contact_travel(&mut self, tcp: &Isometry3<f64>) -> Result<(), Abort> {
        let p = tcp.translation.vector;
        let Some(prev) = self.travel_prev.replace(p) else {
            return Ok(());
        };
        if self.contact_s.is_none() {
            return Ok(());
        }
        let d = self.frame.rotation.inverse() * (p - prev);
        let bound = self.sup.limits.contact_travel_m;
        for k in 0..3 {
            if !self.task.force_axes[k] {
                continue;
            }
            self.contact_travel[k] += d[k];
            if self.contact_travel[k].abs() > bound {
                return Err(Abort::controlled(format!(
                    "{:.1} mm of travel along {} in contact (limits.contact_travel_m {:.1} mm): \
                     the surface yields or moves away, or the tool slid off it",
                    self.contact_travel[k] * 1e3,
                    AXES[k],
                    bound * 1e3
                )));
            }
        }
        Ok(())
    }
}
