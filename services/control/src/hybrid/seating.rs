//! The arm's approach and seating: approach speeds, the seating's stop and its secant
//! stiffness.

use super::{ArmRun, Feedforward};

/// The approach speed's design fraction of the setpoint: `v ≤ c·|F_d|/(K_e·T)`
/// ([`ArmRun::approach_speed`]).
pub const APPROACH_SETPOINT_FRACTION: f64 = 0.5;
/// Seating ends when the force first reaches this fraction of its setpoint.
pub const SEATED_FRACTION: f64 = 0.9;
/// How long the arm moves on after the seating decides to stop, as a fraction of the loop
/// delay `T`, with the reference pulled back to the measured pose: the servo's transport
/// delay and its deceleration, not the tracking lag (which the pull-back removes).
pub const STOP_LAG_FRACTION: f64 = 0.5;
/// The acceleration (m/s²) of the command along a force axis while the seating stops it and
/// pulls it back to the measured pose, and while it starts again towards the surface after
/// such a stop. Pulled back in one cycle, the command's step (the tracking lag v·T) asked
/// the joints for more than robot-io allows (a whole demo's only limited replies without
/// faults: issue 21); at 1 m/s² the IRB 120's joints stay well inside their limits over its
/// workspace, and the pull-back of an approach's lag (≤ 0.1 mm) takes ≤ 20 ms.
pub const SEATING_STOP_ACCEL_M_S2: f64 = 1.0;
/// The angular deceleration a completed task's rotational position axes come to rest within
/// (rad/s²; `[control.ending] max_rot_accel_rad_s2`'s default).
pub const COMPLETION_ROT_ACCEL_RAD_S2: f64 = 2.0;
/// The first contact's overshoot on the cell's worst-case surface, as a fraction of the
/// setpoint: until the surface is known the approach moves no faster than
/// `c·|F_d| / (K_wc·STOP_LAG_FRACTION·T)`.
pub const APPROACH_PEAK_FRACTION: f64 = 0.3;
/// The seating's secant stiffness needs at least this travel (m) and this force rise (N)
/// between the touch and the seated pose.
pub const SECANT_MIN_DX_M: f64 = 1e-6;
pub const SECANT_MIN_DF_N: f64 = 1.0;
/// The seating's secant stiffness (N/m) from the touch `(x, F)` to the seated step
/// `(x, filtered F, unfiltered peak F along the axis)`, when both rises are large enough.
///
/// The seated step's force is the larger of the filtered and the unfiltered reading: the
/// seating ends on the filtered force crossing [`SEATED_FRACTION`], which lags the contact's
/// rise (12 Hz: 20–26 ms), while the measured pose does not — paired with the pose, the
/// filtered force alone reads the surface softer than it is (on 10⁶ N/m after an 11 N first
/// contact: filtered 9.1 N against a true 10.9 N, a secant of 0.77·K, and gains 1.3× too
/// high). The unfiltered window peak carries no lag and errs high with the noise: the
/// secant errs stiff, which only slows the loop (and is clamped to the cell's worst case).
pub fn seat_secant(touch: (f64, f64), seated: (f64, f64, f64)) -> Option<f64> {
    let (x1, f1) = touch;
    let (x2, f_filtered, f_peak) = seated;
    let (dx, df) = (x2 - x1, f_filtered.max(f_peak) - f1);
    (dx > SECANT_MIN_DX_M && df > SECANT_MIN_DF_N).then(|| df / dx)
}

/// The approach speed's design fraction of the force limit on the worst-case stiffness:
/// `v ≤ c·max_force_n/(K_wc·T)`.
pub const APPROACH_MAX_FORCE_FRACTION: f64 = 0.5;

/// The velocity of a cycle braking onto a target (kinematics' one braking home).
pub use kinematics::brake::stop_velocity;

/// Pure: the part of an unfiltered peak *magnitude* `peak` (force, or torque for k ≥ 3)
/// that lies along axis `k` of {C}, taking off what the filtered force (or torque) `fc`
/// carries across it. A peg pressed against a hole's wall, or a tool sliding with friction,
/// carries a steady force across the pressing axis that is not the surface ahead; the filter
/// lags a rise, so an impact along the axis still counts in full.
pub fn along_axis(peak: f64, fc: &[f64; 6], k: usize) -> f64 {
    let b = (k / 3) * 3;
    let across2: f64 = (b..b + 3).filter(|j| *j != k).map(|j| fc[j] * fc[j]).sum();
    (peak * peak - across2).max(0.0).sqrt()
}

impl ArmRun {
    /// Approach speed of force axis `k` for the reference `f_ref`: the first-contact
    /// overshoot is about `K·v·T` (the arm moves on at `v` for the loop delay `T` before the
    /// law reacts), so the speed is the slowest of
    /// * the speed limit (`force_axis_speed_m_s` / `_rad_s`);
    /// * `APPROACH_SETPOINT_FRACTION·|F_d| / (K_e·T)`, the stiffness the task's gains are
    ///   made for (identified or configured): the overshoot stays a fraction of the setpoint;
    /// * along a translational axis, `APPROACH_MAX_FORCE_FRACTION·max_force_n / (K_wc·T)`
    ///   with `K_wc` the cell's declared worst-case stiffness: whatever the gains were made
    ///   for, an un-identified stiffer surface up to `K_wc` is met below the force limit;
    ///
    /// never below 0.1 mm/s or 1 mrad/s.
    pub fn approach_speed(&self, k: usize, f_ref: f64) -> f64 {
        let lim = self.law.out_limit[k];
        let t = self.loop_delay_s;
        if t <= 0.0 {
            return lim;
        }
        let mut v = f64::INFINITY;
        // The worst case stands until the surface under the tool is known: in contact with
        // a usable estimate (which the feedforward's stiffness then follows) it is not
        // assumed any more; a lost contact searches for an unknown surface again.
        let known = k < 3
            && self.adapt.as_ref().is_some_and(|a| {
                (self.sup.in_contact() || a.pressing[k]) && a.last[k].upper().is_some()
            });
        // The stiffness the gains are made for: with adaptation it is the worst case until
        // the surface is known, which the bound below covers (slower still would leave the
        // estimator's pairs below their excitation on a soft surface).
        if let Feedforward::RateOverStiffness(ke) = self.law.ff {
            if ke[k] > 0.0 && (self.adapt.is_none() || known || k >= 3) {
                v = v.min(APPROACH_SETPOINT_FRACTION * f_ref.abs() / (ke[k] * t));
            }
        }
        if k < 3 && self.worst_case_n_per_m > 0.0 && !known {
            v = v.min(
                APPROACH_MAX_FORCE_FRACTION * self.sup.limits.max_force_n
                    / (self.worst_case_n_per_m * t),
            );
            // A task whose gains follow the surface does not know it: its first contact is
            // bounded to a fraction of the setpoint over the worst case. (A task on fixed
            // gains declares them made for its surface — the peg's plate — and keeps the
            // force limit's bound above: a peg searching 10 mm down a hole at 0.1 mm/s
            // would not be inserted in its time.)
            if self.adapt.is_some() {
                v = v.min(
                    APPROACH_PEAK_FRACTION * f_ref.abs()
                        / (self.worst_case_n_per_m * STOP_LAG_FRACTION * t),
                );
            }
        }
        let floor = if k < 3 { 1e-4 } else { 1e-3 };
        lim.min(v.max(floor))
    }
}
