//! The fast band of the oscillation watch (issue 41).
//!
//! Control watches a force loop's oscillation on the 12 Hz estimate (`control::hybrid::
//! OscillationWatch`); a faster oscillation — a tool chattering on a stiff surface, a
//! structural mode — is mostly filtered out of that estimate before control sees it (at 30 Hz
//! the 2nd-order 12 Hz low-pass passes ≈ 16 %). This watch runs here, on every sample, on what
//! the filter removes: the unfiltered compensated force minus the filtered one, per axis. Its
//! extrema are confirmed with a hysteresis of `min_swing_n` (peak to peak); each confirmed
//! extremum is a swing with the peak-to-peak amplitude of the half-cycle it ends. When the
//! last `swings` swings of an axis all fall within `window_s` (at the defaults 6 within
//! 0.25 s: faster than 12 Hz) the measure is the smallest of their amplitudes, else 0; the
//! estimate carries the largest over the axes (`WrenchEstimate::fast_swing_n`), and control
//! compares it with a task's band. Noise does not reach the hysteresis (2 N peak to peak is
//! ≈ 10 σ of a 0.2 N sensor); one impact makes two or three swings, not six.
//!
//! Pure and allocation-free: time is the sample count at the sensor's rate.

use serde::{Deserialize, Serialize};

/// Swings kept per axis (the most `swings` may be).
pub const MAX_SWINGS: usize = 16;

/// `[force.fast_swing]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FastSwingParams {
    /// The hysteresis that confirms an extremum (N, peak to peak).
    pub min_swing_n: f64,
    /// Swings that must fall within `window_s`.
    pub swings: usize,
    /// (s).
    pub window_s: f64,
}

impl Default for FastSwingParams {
    fn default() -> Self {
        Self {
            min_swing_n: 2.0,
            swings: 6,
            window_s: 0.25,
        }
    }
}

impl FastSwingParams {
    /// Every problem, `(field, why)`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !(self.min_swing_n.is_finite() && self.min_swing_n > 0.0 && self.min_swing_n <= 100.0) {
            out.push((
                "min_swing_n",
                format!("{} must be in (0, 100] N", self.min_swing_n),
            ));
        }
        if !(3..=MAX_SWINGS).contains(&self.swings) {
            out.push((
                "swings",
                format!("{} must be in [3, {MAX_SWINGS}]", self.swings),
            ));
        }
        if !(self.window_s.is_finite() && self.window_s > 0.0 && self.window_s <= 2.0) {
            out.push(("window_s", format!("{} must be in (0, 2] s", self.window_s)));
        }
        out
    }
}

/// One axis' swings (kinematics' one detector; time is the sample count).
type Axis = kinematics::swing::SwingCounter<MAX_SWINGS>;

/// The watch over the three force axes.
#[derive(Debug, Clone, Copy)]
pub struct FastSwingWatch {
    p: FastSwingParams,
    window: u64,
    axes: [Axis; 3],
    k: u64,
}

impl FastSwingWatch {
    /// At `sample_rate_hz` (> 0); invalid params (see [`FastSwingParams::problems`]) are
    /// clamped into range.
    pub fn new(p: FastSwingParams, sample_rate_hz: f64) -> Self {
        let p = FastSwingParams {
            swings: p.swings.clamp(3, MAX_SWINGS),
            ..p
        };
        let window = (p.window_s * sample_rate_hz).round();
        Self {
            p,
            window: if window.is_finite() && window >= 1.0 {
                window as u64
            } else {
                1
            },
            axes: [Axis::default(); 3],
            k: 0,
        }
    }

    /// Starts afresh (a gap in the samples, a new bias).
    pub fn reset(&mut self) {
        self.axes = [Axis::default(); 3];
    }

    /// One sample: the unfiltered minus the filtered force (N, any fixed axes). Returns the
    /// measure (N peak to peak; 0: no fast oscillation).
    pub fn push(&mut self, residual: [f64; 3]) -> f64 {
        self.k += 1;
        let keep = self.p.swings;
        let mut out: f64 = 0.0;
        for (a, e) in self.axes.iter_mut().zip(residual) {
            if !e.is_finite() {
                a.reset();
                continue;
            }
            // Sample counts are exact in f64 (below 2⁵³).
            let k = self.k as f64;
            a.step(k, e, self.p.min_swing_n, keep);
            out = out.max(a.all_within(k, self.window as f64, keep).unwrap_or(0.0));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FS: f64 = 1000.0;

    /// A sine of `amp` (N, peak) at `f` Hz on x, with deterministic noise of ±`noise` on all
    /// axes; the largest measure over `seconds`.
    fn run(f: f64, amp: f64, noise: f64, seconds: f64) -> f64 {
        let mut w = FastSwingWatch::new(FastSwingParams::default(), FS);
        let mut worst: f64 = 0.0;
        let mut seed: u64 = 7;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2.0 * noise
        };
        for i in 0..(seconds * FS) as usize {
            let t = i as f64 / FS;
            let x = amp * (2.0 * std::f64::consts::PI * f * t).sin() + rnd();
            worst = worst.max(w.push([x, rnd(), rnd()]));
        }
        worst
    }

    #[test]
    fn a_fast_oscillation_is_measured_by_its_swing() {
        // 30 Hz, ±5 N: 10 N peak to peak.
        let m = run(30.0, 5.0, 0.0, 1.0);
        assert!((m - 10.0).abs() < 0.1, "{m}");
        // With ±0.5 N of noise on top: still measured (a little more than 10).
        let m = run(30.0, 5.0, 0.5, 1.0);
        assert!(m > 9.0 && m < 12.0, "{m}");
    }

    #[test]
    fn noise_slow_motion_and_an_impact_are_not_a_fast_oscillation() {
        assert_eq!(run(30.0, 0.0, 0.5, 2.0), 0.0, "noise of ±0.5 N");
        // 5 Hz: six swings take 0.5 s, longer than the window (the slow watch's band).
        assert_eq!(run(5.0, 5.0, 0.0, 2.0), 0.0, "5 Hz");
        // An impact: a step of 150 N that rings down in three half-cycles.
        let mut w = FastSwingWatch::new(FastSwingParams::default(), FS);
        let mut worst: f64 = 0.0;
        for (i, x) in [0.0, 150.0, -60.0, 20.0, -5.0, 0.0].into_iter().enumerate() {
            for _ in 0..15 {
                worst = worst.max(w.push([x, 0.0, 0.0]));
            }
            assert!(i < 6);
        }
        for _ in 0..1000 {
            worst = worst.max(w.push([0.0; 3]));
        }
        assert_eq!(worst, 0.0, "an impact");
    }

    #[test]
    fn the_measure_lapses_when_the_oscillation_stops_and_bad_params_are_named() {
        let mut w = FastSwingWatch::new(FastSwingParams::default(), FS);
        let mut last = 0.0;
        for i in 0..500 {
            let t = i as f64 / FS;
            last = w.push([
                5.0 * (2.0 * std::f64::consts::PI * 40.0 * t).sin(),
                0.0,
                0.0,
            ]);
        }
        assert!(last > 9.0);
        for _ in 0..300 {
            last = w.push([0.0; 3]);
        }
        assert_eq!(last, 0.0);
        let bad = FastSwingParams {
            min_swing_n: 0.0,
            swings: 1,
            window_s: f64::NAN,
        };
        let names: Vec<_> = bad.problems().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["min_swing_n", "swings", "window_s"]);
    }
}
