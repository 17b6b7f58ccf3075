//! Adaptation on the arm: speed adaptation (the reference clock) and gains that follow an
//! on-line stiffness estimate.

use common::msg::FrameKind;
use nalgebra::Vector3;

use super::{ArmRun, Feedforward, HybridLaw};

/// How far speed adaptation may hold a task's reference clock behind by default (s;
/// `[control.hybrid] max_reference_lag_s`): the pad → steel slide measured ≈ 15 s.
pub const DEFAULT_MAX_REFERENCE_LAG_S: f64 = 60.0;

/// Speed adaptation: for this long after the gains' stiffness last rose under a sliding tool
/// (the surface stiffening, `[control.hybrid]` raise from the depth) the motion's cost is
/// taken at the cell's worst-case stiffness: a stiffening surface may keep stiffening up to
/// it, and the loop learns each rise only after the tool has met it.
pub const STIFFENING_MEMORY_S: f64 = 0.5;

/// Speed adaptation: the slowest the reference clock runs (a fraction of planned).
pub const MIN_SPEED_SCALE: f64 = 0.05;
/// Speed adaptation: how fast the clock's scale may fall and rise (1/s). Falling at 4/s
/// takes 20 mm/s to 4 mm/s in 0.2 s (a deceleration of 80 mm/s²); rising is slower, so a
/// stretch that needed it is left before the speed returns.
pub const SPEED_SCALE_FALL_PER_S: f64 = 4.0;
pub const SPEED_SCALE_RISE_PER_S: f64 = 1.0;
/// Speed adaptation: the low-pass of the force axes' motion it watches (s).
pub const SPEED_WATCH_TAU_S: f64 = 0.05;

/// Pure: what a sudden stop of a force axis' motion costs (N). The axis moves at `u_m_s`
/// (the surface moving under the sliding tool); if that motion had to stop at once (the
/// surface's slope or stiffness ends where the tool is), the force loop would be left with
/// the velocity error `|u|`, which its proportional gain `kp_f` ((m/s)/N) balances only at a
/// force error `|u|/kp_f` — on the surface its gains are made for (`k_now_n_per_m`); on a
/// surface `k_cost_n_per_m` stiffer than that, in proportion.
pub fn stop_cost_n(u_m_s: f64, kp_f: f64, k_now_n_per_m: f64, k_cost_n_per_m: f64) -> f64 {
    if !(kp_f > 0.0 && k_now_n_per_m > 0.0 && u_m_s.is_finite()) {
        return 0.0;
    }
    let c = u_m_s.abs() / kp_f * (k_cost_n_per_m / k_now_n_per_m).max(1.0);
    if c.is_finite() {
        c
    } else {
        0.0
    }
}

/// Pure: the reference clock's next scale (speed adaptation). `cost_n` is what a sudden stop
/// of each force axis' motion costs ([`stop_cost_n`]) at the clock's `scale` now; the motion
/// is proportional to the sliding speed, so the scale that keeps the largest cost at
/// `error_n` is `scale · error_n / cost`, within [[`MIN_SPEED_SCALE`], 1] and the fall/rise
/// rates over `dt`.
pub fn next_speed_scale(scale: f64, cost_n: &[f64], error_n: f64, dt: f64) -> f64 {
    if !(error_n > 0.0 && dt > 0.0 && scale.is_finite()) {
        return 1.0;
    }
    let cost = cost_n
        .iter()
        .copied()
        .filter(|c| c.is_finite())
        .fold(0.0, f64::max);
    let target = if cost > 0.0 {
        (scale * error_n / cost).clamp(MIN_SPEED_SCALE, 1.0)
    } else {
        1.0
    };
    target
        .clamp(
            scale - SPEED_SCALE_FALL_PER_S * dt,
            scale + SPEED_SCALE_RISE_PER_S * dt,
        )
        .clamp(MIN_SPEED_SCALE, 1.0)
}

/// Gains that follow the surface: per translational force axis an on-line stiffness
/// estimate ([`crate::stiffness`]); the axis' force gains are the task's scaled by
/// `made_for / scheduled` (the `kp_f = c/(K·T)` rule keeps its design point), retuned
/// bumplessly whenever the scheduled stiffness moves by more than [`RETUNE_FRACTION`].
#[derive(Debug, Clone)]
pub(super) struct Adaptation {
    est: [crate::stiffness::StiffnessEstimator; 3],
    pub(super) last: [crate::stiffness::StiffnessEstimate; 3],
    /// The stiffness the task's own gains were made for, and those gains.
    made_for: [f64; 3],
    kp_f0: [f64; 3],
    ki_f0: [f64; 3],
    /// The stiffness the gains are made for now.
    scheduled: [f64; 3],
    softest_n_per_m: f64,
    stiffest_n_per_m: f64,
    /// Per axis: where the surface is along it (into the surface positive, from the task's
    /// start) and how uncertain that is (m), from the spring model while the tool is still
    /// and the stiffness known (`x − F/K̂`).
    surface_x: [Option<(f64, f64)>; 3],
    /// Per axis: the stiffness was raised from the depth while sliding; the estimator
    /// starts afresh and the gains are not lowered until it is usable again.
    raised: [bool; 3],
    /// Whether the depth may raise the stiffness while sliding (see [`DEPTH_UNCERTAINTY_M`]).
    pub(super) depth_raise: bool,
    /// Per axis: the tool presses on a surface at least as hard as the estimator's spring
    /// model needs (`StiffnessParams::min_force_n`) — before the supervisor's contact
    /// threshold, which the 12 Hz estimate reaches ≈ 0.1 s later on a soft surface.
    pub(super) pressing: [bool; 3],
}

/// Sliding on a surface whose height does not change (a base or tool frame, not a tracking
/// one), the depth below where the surface was found tells the stiffness: `K = F/d`. It may
/// only *raise* the scheduled stiffness (a pad giving way to steel along the path); `d` is
/// taken less its uncertainty, so that the reading errs stiff (slower, stable gains).
/// The floor of the depth's uncertainty (m): the measured pose's noise, the surface's
/// flatness.
pub const DEPTH_UNCERTAINTY_M: f64 = 2e-6;

impl Adaptation {
    /// Makes axis `k`'s force gains for stiffness `k_n_per_m` (the task's scaled by
    /// `made_for / k`, bumpless). The feedforward (the pre-filtered reference's rate over the
    /// stiffness) and the seating speed follow: a feedforward made for a softer surface than
    /// the one met drives the force past the setpoint (41 N on 10⁶ N/m with the configured
    /// 2·10⁴ on the model).
    fn schedule(&mut self, law: &mut HybridLaw, k: usize, k_n_per_m: f64) {
        let scale = self.made_for[k] / k_n_per_m;
        law.retune_force_axis(k, self.kp_f0[k] * scale, self.ki_f0[k] * scale);
        self.scheduled[k] = k_n_per_m;
        if let Feedforward::RateOverStiffness(ke) = &mut law.ff {
            ke[k] = k_n_per_m;
        }
    }
}

/// A scheduled stiffness moving by less than this fraction leaves the gains as they are.
pub const RETUNE_FRACTION: f64 = 0.05;
/// Without a usable estimate the gains are made for the cell's stiffest surface until this
/// long after the first contact (s), then for the stiffness the task's gains were made for.
/// On a stiff surface the loop has had its first contact and its own corrections by then
/// (the estimate is usable 60–90 ms after contact when the tool is still); a task whose tool
/// slides from the start (a search, a contour) gets no estimate and runs on its own gains.
pub const PRE_ESTIMATE_S: f64 = 0.3;

impl ArmRun {
    /// Speed adaptation (as ABB Force Control's speed change on force deviation, but from
    /// what the loop is doing rather than from an error already made): while in contact the
    /// task's reference clock slows down so that a sudden stop of the force axes' current
    /// motion — the surface under a sliding tool rising, falling or stiffening, and ending —
    /// would cost at most `error_n` of force ([`next_speed_scale`]); the path and the force
    /// profile are followed as planned, later. 0 turns it off.
    pub fn with_speed_adaptation(mut self, error_n: f64) -> Self {
        self.slowdown_error_n = error_n.max(0.0);
        self
    }

    /// The most the reference clock may fall behind (s; `[control.hybrid]
    /// max_reference_lag_s`).
    pub fn with_max_lag(mut self, max_lag_s: f64) -> Self {
        self.max_lag_s = max_lag_s;
        self
    }

    /// The reference clock's scale now (1: as planned) and how far it is behind (s).
    pub fn speed(&self) -> (f64, f64) {
        (self.speed, self.lag_s)
    }

    /// Lets the force gains of the translational force axes follow an on-line estimate of the
    /// contact stiffness (see [`crate::stiffness`]), between `softest_n_per_m` and the cell's
    /// worst case; the stiffness given to [`ArmRun::new`] is what the task's gains are made
    /// for until the estimate is usable. The force feedforward and the seating speed follow
    /// the scheduled stiffness too.
    pub fn with_adaptation(
        mut self,
        params: crate::stiffness::StiffnessParams,
        softest_n_per_m: f64,
    ) -> Self {
        let Feedforward::RateOverStiffness(ke) = self.law.ff else {
            return self;
        };
        let made_for = [ke[0], ke[1], ke[2]];
        let g = self.law.gains;
        self.adapt = Some(Adaptation {
            est: std::array::from_fn(|_| crate::stiffness::StiffnessEstimator::new(params)),
            last: Default::default(),
            made_for,
            kp_f0: [g.kp_f[0], g.kp_f[1], g.kp_f[2]],
            ki_f0: [g.ki_f[0], g.ki_f[1], g.ki_f[2]],
            scheduled: made_for,
            softest_n_per_m,
            stiffest_n_per_m: self.worst_case_n_per_m.max(softest_n_per_m),
            surface_x: [None; 3],
            raised: [false; 3],
            depth_raise: true,
            pressing: [false; 3],
        });
        // Until the estimate is usable the gains are made for the stiffest surface.
        self.adapt_step(&Vector3::zeros(), &[0.0; 6], &[1.0; 6], 0.0, false);
        self
    }

    /// One step of the adaptation: the estimators see the position along each pressing
    /// translational axis and the applied force (in contact only), and the gains follow.
    pub(super) fn adapt_step(
        &mut self,
        p_c: &Vector3<f64>,
        fc: &[f64; 6],
        f_ref: &[f64; 6],
        dt: f64,
        still: bool,
    ) {
        let in_contact = self.sup.in_contact();
        // Before the estimate is usable: the worst case from the start until
        // PRE_ESTIMATE_S after the first contact, then the stiffness the task's gains were
        // made for (a task whose tool slides from the start never gets an estimate).
        let settled_in = self
            .contact_s
            .is_some_and(|c| self.t_s - c > PRE_ESTIMATE_S);
        let flat = self.task.frame_kind != FrameKind::Tracking;
        let Some(a) = self.adapt.as_mut() else {
            return;
        };
        for k in 0..3 {
            if !(self.task.force_axes[k] && f_ref[k] != 0.0) {
                continue;
            }
            let s = f_ref[k].signum();
            let (x, f) = (s * p_c[k], s * fc[k]);
            // The estimator runs from the force its spring model needs (its own gates drop
            // the contact's transient), not from the supervisor's contact threshold: on a
            // soft surface the seating otherwise crept at the worst case's speed for
            // ≈ 0.1 s longer (issue 20: the rise).
            a.pressing[k] = f >= a.est[k].params().min_force_n;
            if (in_contact || a.pressing[k]) && still {
                a.last[k] = a.est[k].step(x, f, dt);
                // Where the surface is: x − F/K̂ (the estimate, else the seating's secant).
                let known = match (a.last[k].usable, a.last[k].k_n_per_m) {
                    (true, Some(kk)) => Some((kk, a.last[k].se_n_per_m)),
                    _ => self.seat_secant[k].map(|kk| (kk, 0.1 * kk)),
                };
                if let Some((kk, se)) = known.filter(|(kk, _)| *kk > 0.0) {
                    if f >= 1.0 {
                        let unc = 2.0 * f * se / (kk * kk) + DEPTH_UNCERTAINTY_M;
                        a.surface_x[k] = Some((x - f / kk, unc));
                    }
                }
            } else {
                a.est[k].pause();
            }
            if a.depth_raise && in_contact && !still && flat {
                if let Some((x0, unc)) = a.surface_x[k] {
                    let d = x - x0 - unc;
                    let kd = if d > DEPTH_UNCERTAINTY_M {
                        f / d
                    } else {
                        a.stiffest_n_per_m
                    };
                    let kd = kd.min(a.stiffest_n_per_m);
                    if f >= 1.0 && kd > a.scheduled[k] * (1.0 + RETUNE_FRACTION) {
                        a.schedule(&mut self.law, k, kd);
                        a.raised[k] = true;
                        a.est[k].reset();
                        a.last[k] = Default::default();
                    }
                }
            }
            if a.raised[k] && !a.last[k].usable {
                // Raised from the depth: kept until the estimator has learnt the new surface.
                continue;
            }
            let before = match self.seat_secant[k] {
                // Seated without an estimate (a stiff surface: 10 N is 10 µm into 10⁶ N/m,
                // over before the estimator has data): the seating's own secant.
                Some(ks) => ks.clamp(a.softest_n_per_m, a.stiffest_n_per_m),
                None if settled_in => a.made_for[k],
                None => a.stiffest_n_per_m,
            };
            let want = crate::stiffness::scheduled_stiffness(
                &a.last[k],
                before,
                a.softest_n_per_m,
                a.stiffest_n_per_m,
            );
            if (want / a.scheduled[k] - 1.0).abs() <= RETUNE_FRACTION {
                continue;
            }
            a.schedule(&mut self.law, k, want);
        }
    }

    /// The stiffness the force gains are made for now and the on-line estimate, per
    /// translational axis of {C} (0: a position axis / no estimate).
    /// Speed adaptation's step ([`ArmRun::with_speed_adaptation`]): watches the
    /// translational force axes' output while pressing in contact and sliding, and sets the reference
    /// clock's scale for the next cycle (the clock falls behind by `(1 − scale)·dt`).
    pub(super) fn adapt_speed(
        &mut self,
        u: &[f64; 6],
        f_ref: &[f64; 6],
        dt: f64,
        tr: f64,
        sliding: bool,
    ) {
        if self.slowdown_error_n <= 0.0 || dt <= 0.0 {
            return;
        }
        let a = (dt / SPEED_WATCH_TAU_S).min(1.0);
        // Only a sliding tool meets a changing surface; pressing in place, the gains settling
        // onto the first contact's stiffness is not the surface stiffening.
        let pressing = self.sup.in_contact() && !self.seating && !self.done && sliding;
        let (gains_for, _) = self.stiffness_report();
        let mut cost = [0.0; 3];
        for j in 0..3 {
            let on = pressing && self.task.force_axes[j] && f_ref[j] != 0.0;
            self.u_lp[j] += ((if on { u[j] } else { 0.0 }) - self.u_lp[j]) * a;
            if on && self.k_prev[j] > 0.0 && gains_for[j] > 1.01 * self.k_prev[j] {
                self.k_rose_s[j] = self.t_s;
            }
            self.k_prev[j] = if on { gains_for[j] } else { 0.0 };
            if on {
                // A surface stiffening under the tool: its cost at the worst case.
                let k_cost = if self.t_s - self.k_rose_s[j] < STIFFENING_MEMORY_S {
                    gains_for[j].max(self.worst_case_n_per_m)
                } else {
                    gains_for[j]
                };
                cost[j] = stop_cost_n(self.u_lp[j], self.law.gains.kp_f[j], gains_for[j], k_cost);
            }
        }
        self.speed = next_speed_scale(self.speed, &cost, self.slowdown_error_n, dt);
        // Only a running reference clock falls behind (not before a from-contact task's
        // contact, not past the task's end).
        if tr >= 0.0 && !self.done {
            self.lag_s += (1.0 - self.speed) * dt;
        }
    }

    pub(super) fn stiffness_report(&self) -> ([f64; 3], [f64; 3]) {
        let mut ke = match self.law.ff {
            Feedforward::RateOverStiffness(ke) => ke,
            Feedforward::Force => [0.0; 6],
        };
        if let Some(a) = &self.adapt {
            ke[..3].copy_from_slice(&a.scheduled);
        }
        let gains_for = std::array::from_fn(|k| if self.task.force_axes[k] { ke[k] } else { 0.0 });
        // The estimator's, else the seating's secant (a stiff surface seats before the
        // estimator has data).
        let est = std::array::from_fn(|k| {
            self.adapt
                .as_ref()
                .and_then(|a| a.last[k].k_n_per_m)
                .or(self.seat_secant[k])
                .unwrap_or(0.0)
        });
        (gains_for, est)
    }
}
