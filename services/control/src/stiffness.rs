//! On-line contact stiffness along one translational force axis, and the force gains it
//! schedules. Pure: no bus, no clock; `dt` is a parameter.
//!
//! # The model
//! In contact along axis k of {C} the applied force is `F = K·(x − x₀)` (a spring: the
//! surface, the tool and the arm's own compliance in series), `x` the measured TCP position
//! along the axis (joint feedback through FK, so it is where the robot *is*, after the EGM
//! lag), `x₀` the unknown, possibly drifting, surface height. Control sees `F` through the
//! force service's low-pass (12 Hz: ≈ 20–26 ms of lag), so the estimator passes `x` through
//! the same kind of low-pass ([`StiffnessParams::matched_cutoff_hz`], two first-order stages)
//! before pairing it with `F`: both then carry the same lag and the same transient at the
//! contact's kink. `x₀` is eliminated by differences over a window `W`:
//!
//! ```text
//! ΔF(t) = F(t) − F(t−W),  Δx(t) = x_f(t) − x_f(t−W),   ΔF = K·Δx + noise
//! ```
//!
//! `K` is the weighted least-squares fit through the origin of the pairs `(Δx, ΔF)`, with
//! exponential forgetting (time constant [`StiffnessParams::forget_s`]). Forgetting is
//! *directional*: it acts only on pairs that excite the fit (`|Δx| ≥ min_dx_m`, both ends in
//! contact), so a task that holds still (no motion into the surface: nothing to learn) keeps
//! its estimate instead of forgetting it.
//!
//! # Confidence
//! The standard error of the fit, `se = σ/√(Σ w·Δx²)` with `σ²` the weighted residual
//! variance, relative to the estimate. The estimate is *usable* once the relative standard
//! error is ≤ [`StiffnessParams::max_rel_se`] and at least [`StiffnessParams::min_pairs`]
//! excited pairs have entered.
//!
//! # Gains
//! [`scheduled_stiffness`]: the force gains follow the estimate's upper confidence bound
//! `K̂ + 2·se` (an over-estimate only slows the loop; an under-estimate raises its gain
//! towards the delay's stability bound), clamped between the cell's softest and stiffest
//! declared surfaces. Before the estimate is usable they are made for the stiffest: on a
//! stiff surface the seating ends within a few cycles of the touch (10 N is 10 µm into
//! 10⁶ N/m), before there is anything to estimate from, and gains made for a softer surface
//! would then run the loop past its stability bound; on a soft one the seating lasts long
//! enough for the estimate to be usable before it ends.

/// Parameters of [`StiffnessEstimator`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StiffnessParams {
    /// Cut-off of the low-pass the force estimate went through (Hz); `x` is passed through
    /// the same (two first-order stages). 0 = no matched filter.
    pub matched_cutoff_hz: f64,
    /// Difference window (s).
    pub window_s: f64,
    /// A pair excites the fit when `|Δx|` over the window is at least this (m).
    pub min_dx_m: f64,
    /// Both ends of a pair must press at least this hard (N): the spring model holds.
    pub min_force_n: f64,
    /// ... and the older end must come at least this long after the force first reached
    /// `min_force_n` (s): the low-pass's transient after the contact's kink (the filtered
    /// force rises slower than `K·Δx_f` there, which would read as a softer surface).
    pub settle_s: f64,
    /// Forgetting time constant over excited pairs (s).
    pub forget_s: f64,
    /// Usable once the relative standard error is at most this.
    pub max_rel_se: f64,
    /// ... and at least this many excited pairs entered.
    pub min_pairs: u32,
}

impl Default for StiffnessParams {
    /// 12 Hz (the force service's default filter), a 24 ms window, 4 µm, 0.5 N, 20 ms,
    /// 0.25 s, 25 %, 3 pairs.
    fn default() -> Self {
        Self {
            matched_cutoff_hz: 12.0,
            window_s: 0.024,
            min_dx_m: 4e-6,
            min_force_n: 0.5,
            settle_s: 0.02,
            forget_s: 0.25,
            max_rel_se: 0.25,
            min_pairs: 3,
        }
    }
}

/// The estimate at one step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StiffnessEstimate {
    /// Least-squares stiffness (N/m); `None` before the first excited pair.
    pub k_n_per_m: Option<f64>,
    /// Its standard error (N/m).
    pub se_n_per_m: f64,
    /// Excited pairs so far.
    pub pairs: u32,
    /// Usable ([`StiffnessParams::max_rel_se`], [`StiffnessParams::min_pairs`]).
    pub usable: bool,
}

impl StiffnessEstimate {
    /// The upper confidence bound `K̂ + 2·se`, when usable.
    pub fn upper(&self) -> Option<f64> {
        match (self.usable, self.k_n_per_m) {
            (true, Some(k)) => Some(k + 2.0 * self.se_n_per_m),
            _ => None,
        }
    }
}

/// Weighted least-squares stiffness along one axis (see the module docs).
#[derive(Debug, Clone)]
pub struct StiffnessEstimator {
    p: StiffnessParams,
    lp: Option<[f64; 2]>,
    /// Time since start and (x_f, F) per step, for the window.
    hist: std::collections::VecDeque<(f64, f64, f64)>,
    t_s: f64,
    /// When the force last reached `min_force_n` from below.
    pressing_since: Option<f64>,
    sxx: f64,
    sxy: f64,
    syy: f64,
    /// Sum of weights (for the residual variance's degrees of freedom).
    sw: f64,
    pairs: u32,
}

impl StiffnessEstimator {
    pub fn new(p: StiffnessParams) -> Self {
        Self {
            p,
            lp: None,
            hist: std::collections::VecDeque::with_capacity(64),
            t_s: 0.0,
            pressing_since: None,
            sxx: 0.0,
            sxy: 0.0,
            syy: 0.0,
            sw: 0.0,
            pairs: 0,
        }
    }

    /// Forgets everything (a new contact may be a new surface).
    /// The parameters it was made with.
    pub fn params(&self) -> &StiffnessParams {
        &self.p
    }

    pub fn reset(&mut self) {
        *self = Self::new(self.p);
    }

    /// The model does not hold for a while (the caller's tool slides, the surface moves): the
    /// fit is kept, the window and the matched filter start afresh at the next step, and the
    /// settle time applies again.
    pub fn pause(&mut self) {
        self.hist.clear();
        self.lp = None;
        self.pressing_since = None;
    }

    /// One step of `dt` (s): `x_m` the measured position along the axis (into the surface
    /// positive), `f_n` the applied force along it (the filtered estimate control uses).
    /// Non-finite inputs are ignored.
    pub fn step(&mut self, x_m: f64, f_n: f64, dt: f64) -> StiffnessEstimate {
        if !(x_m.is_finite() && f_n.is_finite() && dt.is_finite() && dt >= 0.0) {
            return self.estimate();
        }
        self.t_s += dt;
        // The matched low-pass on x.
        let xf = match (self.lp.as_mut(), self.p.matched_cutoff_hz > 0.0) {
            (Some(s), true) => {
                let tau = 1.0 / (std::f64::consts::TAU * self.p.matched_cutoff_hz);
                // Sub-step so that a long dt stays a first-order response.
                let n = (dt / 0.001).ceil().max(1.0);
                let a = ((dt / n) / tau).min(1.0);
                for _ in 0..n as usize {
                    s[0] += (x_m - s[0]) * a;
                    s[1] += (s[0] - s[1]) * a;
                }
                s[1]
            }
            (None, true) => {
                self.lp = Some([x_m; 2]);
                x_m
            }
            (_, false) => x_m,
        };
        if f_n < self.p.min_force_n {
            self.pressing_since = None;
        } else if self.pressing_since.is_none() {
            self.pressing_since = Some(self.t_s);
        }
        self.hist.push_back((self.t_s, xf, f_n));
        // The oldest entry at least a window back is the pair's other end.
        while self.hist.len() > 2 && self.t_s - self.hist[1].0 >= self.p.window_s {
            self.hist.pop_front();
        }
        let Some(&(t0, x0, f0)) = self.hist.front() else {
            return self.estimate();
        };
        if self.t_s - t0 + 1e-9 < self.p.window_s {
            return self.estimate();
        }
        let (dx, df) = (xf - x0, f_n - f0);
        let settled = self
            .pressing_since
            .is_some_and(|since| t0 + 1e-9 >= since + self.p.settle_s);
        if dx.abs() >= self.p.min_dx_m
            && settled
            && f0.min(f_n) >= self.p.min_force_n
            && dx.is_finite()
            && df.is_finite()
        {
            // Forgetting per excited pair, by the time since the last one would over-forget
            // after a pause; per pair at the step's dt it is the same as over time while
            // excited.
            let lambda = if self.p.forget_s > 0.0 {
                (-dt / self.p.forget_s).exp()
            } else {
                1.0
            };
            self.sxx = lambda * self.sxx + dx * dx;
            self.sxy = lambda * self.sxy + dx * df;
            self.syy = lambda * self.syy + df * df;
            self.sw = lambda * self.sw + 1.0;
            self.pairs = self.pairs.saturating_add(1);
        }
        self.estimate()
    }

    /// The current estimate.
    pub fn estimate(&self) -> StiffnessEstimate {
        if self.pairs == 0 || self.sxx <= 0.0 {
            return StiffnessEstimate::default();
        }
        let k = self.sxy / self.sxx;
        // Residual sum of squares of the fit through the origin; one parameter.
        let rss = (self.syy - k * self.sxy).max(0.0);
        let dof = (self.sw - 1.0).max(1.0);
        let se = (rss / dof / self.sxx).sqrt();
        let usable = k > 0.0
            && self.pairs >= self.p.min_pairs
            && se <= self.p.max_rel_se * k
            && se.is_finite();
        StiffnessEstimate {
            k_n_per_m: Some(k),
            se_n_per_m: se,
            pairs: self.pairs,
            usable,
        }
    }
}

/// The stiffness the force gains are made for: the estimate's upper confidence bound when it
/// is usable, else `before` (the gains before an estimate: the cell's stiffest declared
/// surface, so that a contact stiffer than configured is not met with gains past the loop's
/// stability bound); clamped to `[softest, stiffest]` (the cell's declared range).
pub fn scheduled_stiffness(
    est: &StiffnessEstimate,
    before: f64,
    softest: f64,
    stiffest: f64,
) -> f64 {
    let k = est.upper().unwrap_or(before);
    let (lo, hi) = (softest.min(stiffest), stiffest.max(softest));
    k.clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spring behind a delay and a 12 Hz two-stage filter, driven into the surface.
    fn drive(k: f64, v_m_s: f64, noise_n: f64, seconds: f64) -> Vec<StiffnessEstimate> {
        let dt = 0.004;
        let mut est = StiffnessEstimator::new(StiffnessParams::default());
        let tau = 1.0 / (std::f64::consts::TAU * 12.0);
        let mut lp = [0.0f64; 2];
        let mut out = Vec::new();
        let mut seed = 12345u64;
        let surface = 0.0005;
        let mut t = 0.0;
        while t < seconds {
            let x = v_m_s * t;
            let f = k * (x - surface).max(0.0);
            for _ in 0..4 {
                let a = 0.001 / tau;
                lp[0] += (f - lp[0]) * a;
                lp[1] += (lp[0] - lp[1]) * a;
            }
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            out.push(est.step(x, lp[1] + noise_n * u, dt));
            t += dt;
        }
        out
    }

    #[test]
    fn recovers_the_stiffness_on_every_surface_soon_after_contact() {
        for k in [2e4_f64, 1e5, 1e6] {
            // Into the surface at the speed that meets it with ≤ 25 N of overshoot.
            let v: f64 = (25.0 / (k * 0.03_f64)).min(0.005);
            let contact_s = 0.0005 / v;
            let out = drive(k, v, 0.05, contact_s + 0.3);
            let first = out
                .iter()
                .position(|e| e.usable)
                .expect("usable within 0.3 s of contact");
            let first_s = first as f64 * 0.004 - contact_s;
            let last = out.last().and_then(|e| e.k_n_per_m).expect("an estimate");
            eprintln!(
                "k {k:e}: usable {:.0} ms after contact at {:.3e}, final {last:.3e}",
                first_s * 1e3,
                out[first].k_n_per_m.unwrap_or(0.0)
            );
            assert!(first_s <= 0.1, "k {k:e}: usable only after {first_s} s");
            assert!((last / k - 1.0).abs() < 0.1, "k {k:e}: {last:e}");
            // Once usable, the scheduling bound never says softer than 70 % of the truth (an
            // under-estimate raises the loop gain).
            for e in &out[first..] {
                let up = e.upper().expect("stays usable");
                assert!(up >= 0.7 * k, "k {k:e}: upper bound {up:e}");
            }
        }
    }

    #[test]
    fn holding_still_keeps_the_estimate_and_free_motion_teaches_nothing() {
        // The force here is unfiltered: no matched filter on x either.
        let mut est = StiffnessEstimator::new(StiffnessParams {
            matched_cutoff_hz: 0.0,
            ..Default::default()
        });
        // Free motion: no force, nothing learnt.
        for i in 0..100 {
            let e = est.step(i as f64 * 1e-5, 0.0, 0.004);
            assert_eq!(e.k_n_per_m, None);
        }
        // Pressing on a 5·10⁴ N/m spring, moving in; then holding still for 10 s.
        let k = 5e4;
        let mut x = 0.0;
        for _ in 0..100 {
            x += 2e-6;
            est.step(x, 5.0 + k * x, 0.004);
        }
        // The window passes over the stop.
        for _ in 0..10 {
            est.step(x, 5.0 + k * x, 0.004);
        }
        let before = est.estimate();
        assert!(before.usable, "{before:?}");
        assert!((before.k_n_per_m.unwrap_or(0.0) / k - 1.0).abs() < 1e-9);
        for _ in 0..2500 {
            est.step(x, 5.0 + k * x, 0.004);
        }
        assert_eq!(est.estimate(), before);
        // Non-finite inputs change nothing.
        est.step(f64::NAN, 1.0, 0.004);
        est.step(x, f64::INFINITY, 0.004);
        assert_eq!(est.estimate(), before);
        // A pause (the tool slides): the fit is kept; pairs never span it.
        est.pause();
        est.step(x + 1e-3, 5.0, 0.004);
        for _ in 0..20 {
            est.step(x + 1e-3, 5.0, 0.004);
        }
        assert_eq!(est.estimate(), before);
        est.reset();
        assert_eq!(est.estimate(), StiffnessEstimate::default());
    }

    #[test]
    fn the_estimate_follows_a_change_of_surface() {
        // 2·10⁴ N/m, then 10⁶ N/m: a sinusoidal motion into the surface keeps exciting it.
        let mut est = StiffnessEstimator::new(StiffnessParams {
            matched_cutoff_hz: 0.0,
            ..Default::default()
        });
        let dt = 0.004;
        let mut t = 0.0;
        let mut last = StiffnessEstimate::default();
        for (k, secs) in [(2e4, 1.0), (1e6, 1.0)] {
            let end = t + secs;
            while t < end {
                let x = 1e-4 * (1.0 + (std::f64::consts::TAU * 2.0 * t).sin());
                last = est.step(x, 2.0 + k * x, dt);
                t += dt;
            }
            let got = last.k_n_per_m.expect("an estimate");
            assert!((got / k - 1.0).abs() < 0.05, "{k:e}: {got:e}");
        }
        assert!(last.usable);
    }

    #[test]
    fn scheduling_uses_the_upper_bound_inside_the_declared_range() {
        let none = StiffnessEstimate::default();
        assert_eq!(scheduled_stiffness(&none, 2e4, 2e3, 1e6), 2e4);
        assert_eq!(scheduled_stiffness(&none, 1e7, 2e3, 1e6), 1e6);
        let e = StiffnessEstimate {
            k_n_per_m: Some(1e5),
            se_n_per_m: 1e4,
            pairs: 10,
            usable: true,
        };
        assert_eq!(scheduled_stiffness(&e, 2e4, 2e3, 1e6), 1.2e5);
        let soft = StiffnessEstimate {
            k_n_per_m: Some(100.0),
            se_n_per_m: 1.0,
            ..e
        };
        assert_eq!(scheduled_stiffness(&soft, 2e4, 2e3, 1e6), 2e3);
        let unusable = StiffnessEstimate { usable: false, ..e };
        assert_eq!(scheduled_stiffness(&unusable, 2e4, 2e3, 1e6), 2e4);
    }
}
