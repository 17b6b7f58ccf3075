//! Signal shaping: 2nd-order Butterworth low-pass and a smooth dead band. Pure, per channel.

use std::f64::consts::{PI, SQRT_2};

/// Direct-form II transposed biquad coefficients (a0 normalised to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Biquad {
    b: [f64; 3],
    a: [f64; 2],
}

impl Biquad {
    /// 2nd-order Butterworth low-pass, cutoff `fc_hz` at sample rate `fs_hz` (bilinear
    /// transform with frequency pre-warping, so the −3 dB point is exactly at `fc_hz`).
    /// `None` unless 0 < fc < fs/2 and both finite.
    pub fn butterworth_lowpass(fc_hz: f64, fs_hz: f64) -> Option<Biquad> {
        if !(fc_hz.is_finite() && fs_hz.is_finite() && fc_hz > 0.0 && fc_hz < 0.5 * fs_hz) {
            return None;
        }
        let k = (PI * fc_hz / fs_hz).tan();
        let k2 = k * k;
        let norm = 1.0 / (1.0 + SQRT_2 * k + k2);
        let b0 = k2 * norm;
        Some(Biquad {
            b: [b0, 2.0 * b0, b0],
            a: [2.0 * (k2 - 1.0) * norm, (1.0 - SQRT_2 * k + k2) * norm],
        })
    }

    /// Samples after which a disturbance of the filter's state has decayed to at most `tol`
    /// (e.g. 0.01) of its size: how long the output must be distrusted after the state was
    /// re-initialised (see `pipeline`).
    ///
    /// Derivation. The two poles are complex conjugates `r·e^{±jθ}` (for every design of
    /// [`Biquad::butterworth_lowpass`]: `a1² − 4a2 = −8k²/(1 + √2k + k²)² < 0`), with `r² = a2`
    /// and `2r·cos θ = −a1`. Two copies of the filter fed the same input but started from
    /// different states differ by the free response `C·r^k·cos(θk + φ)`. Started from two steady
    /// states (re-initialising at one sample's value instead of the running state is that,
    /// to first order) the difference is the step-response error, whose envelope is
    /// `r^k/√(1 − ζ²)` with the damping `ζ = σ/√(σ² + θ²)`, `σ = −ln r` (ζ = 1/√2 for
    /// Butterworth, envelope constant √2). So `N = ⌈ln(tol·√(1 − ζ²)) / ln r⌉`.
    ///
    /// 12 Hz at 1 kHz, `tol` 1 %: r = 0.9481, N = 93 samples (93 ms ≈ 4.95/(ζ·ωc), the usual
    /// 4/(ζ·ωn) 2 % settling time of a second-order system, taken to 1 %).
    pub fn settle_samples(&self, tol: f64) -> u32 {
        let (a1, a2) = (self.a[0], self.a[1]);
        let r = a2.max(f64::MIN_POSITIVE).sqrt();
        let theta = (-a1 / (2.0 * r)).clamp(-1.0, 1.0).acos();
        let sigma = -r.ln();
        // √(1 − ζ²) = θ/√(σ² + θ²).
        let sqrt_1_minus_zeta2 = theta / sigma.hypot(theta);
        let n = (tol.clamp(1e-12, 1.0) * sqrt_1_minus_zeta2).ln() / r.ln();
        if n.is_finite() {
            n.ceil().clamp(1.0, f64::from(u32::MAX)) as u32
        } else {
            1
        }
    }

    /// Magnitude response at `f_hz` for sample rate `fs_hz`.
    pub fn gain_at(&self, f_hz: f64, fs_hz: f64) -> f64 {
        let w = 2.0 * PI * f_hz / fs_hz;
        let (c1, s1) = (w.cos(), -w.sin());
        let (c2, s2) = ((2.0 * w).cos(), -(2.0 * w).sin());
        let num = (
            self.b[0] + self.b[1] * c1 + self.b[2] * c2,
            self.b[1] * s1 + self.b[2] * s2,
        );
        let den = (
            1.0 + self.a[0] * c1 + self.a[1] * c2,
            self.a[0] * s1 + self.a[1] * s2,
        );
        (num.0.hypot(num.1)) / (den.0.hypot(den.1))
    }
}

/// One filtered channel (explicit state).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LowPass {
    c: Biquad,
    z: [f64; 2],
    primed: bool,
}

impl LowPass {
    pub fn new(c: Biquad) -> Self {
        Self {
            c,
            z: [0.0; 2],
            primed: false,
        }
    }

    /// Sets the state to the steady state of a constant input `x` (no start-up transient).
    pub fn reset_to(&mut self, x: f64) {
        // Steady state of DF2T with unity DC gain: y = x, z1 = x - b0 x, z2 = b2 x - a2 x.
        let b = self.c.b;
        let a = self.c.a;
        self.z = [x * (1.0 - b[0]), x * (b[2] - a[1])];
        self.primed = true;
    }

    /// Filters one sample. The first sample primes the state (output = input).
    pub fn step(&mut self, x: f64) -> f64 {
        if !self.primed {
            self.reset_to(x);
        }
        let b = self.c.b;
        let a = self.c.a;
        let y = b[0] * x + self.z[0];
        self.z[0] = b[1] * x - a[0] * y + self.z[1];
        self.z[1] = b[2] * x - a[1] * y;
        y
    }
}

/// Smooth dead band: `y = x·(1 − exp(−(x/d)²))`. Smooth, odd, monotone, ≈ x³/d² near zero
/// (noise well below `d` barely moves the output) and → x far out (no bias on real forces:
/// at 3d the output is within 0.02 % of the input). `d ≤ 0` disables it.
pub fn smooth_deadband(x: f64, d: f64) -> f64 {
    if d > 0.0 {
        let u = x / d;
        x * (1.0 - (-u * u).exp())
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn butterworth_response() {
        let fs = 1000.0;
        let c = Biquad::butterworth_lowpass(12.0, fs).expect("valid");
        assert!((c.gain_at(0.0, fs) - 1.0).abs() < 1e-12, "unity DC gain");
        assert!(
            (c.gain_at(12.0, fs) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-9,
            "-3 dB at fc"
        );
        // 2nd order: −40 dB/decade well above fc.
        let g = c.gain_at(120.0, fs);
        assert!(
            (g.log10() * 20.0 + 40.0).abs() < 1.5,
            "{} dB at 10 fc",
            g.log10() * 20.0
        );
        assert!(Biquad::butterworth_lowpass(600.0, fs).is_none());
        assert!(Biquad::butterworth_lowpass(0.0, fs).is_none());
    }

    #[test]
    fn filter_has_no_startup_jump_and_tracks_steps() {
        let c = Biquad::butterworth_lowpass(12.0, 1000.0).expect("valid");
        let mut f = LowPass::new(c);
        assert_eq!(f.step(5.0), 5.0);
        for _ in 0..100 {
            assert!((f.step(5.0) - 5.0).abs() < 1e-12);
        }
        let mut y = 0.0;
        for _ in 0..1000 {
            y = f.step(10.0);
        }
        assert!((y - 10.0).abs() < 1e-6);
    }

    #[test]
    fn filter_attenuates_noise_at_measured_gain() {
        let fs = 1000.0;
        let c = Biquad::butterworth_lowpass(12.0, fs).expect("valid");
        let mut f = LowPass::new(c);
        let mut peak: f64 = 0.0;
        f.reset_to(0.0);
        for k in 0..5000 {
            let y = f.step((2.0 * PI * 100.0 * k as f64 / fs).sin());
            if k > 2000 {
                peak = peak.max(y.abs());
            }
        }
        assert!((peak - c.gain_at(100.0, fs)).abs() < 2e-3, "{peak}");
    }

    /// After a re-initialisation the output settles within the computed window: a filter
    /// started at the steady state of 1 and fed 0 (the deviation between a re-initialised and
    /// an undisturbed filter) stays within the tolerance from `settle_samples` on, and the
    /// window is not grossly oversized (the deviation still exceeds the tolerance in its
    /// second half).
    #[test]
    fn settle_window_covers_the_state_disturbance() {
        let tol = 0.01;
        for (fc, fs) in [
            (12.0, 1000.0),
            (1.0, 1000.0),
            (50.0, 1000.0),
            (200.0, 1000.0),
            (12.0, 7000.0),
            (30.0, 250.0),
        ] {
            let c = Biquad::butterworth_lowpass(fc, fs).expect("valid");
            let n = c.settle_samples(tol) as usize;
            let mut f = LowPass::new(c);
            f.reset_to(1.0);
            let dev: Vec<f64> = (0..20 * n + 100).map(|_| f.step(0.0)).collect();
            let late = dev[n..].iter().fold(0.0f64, |m, d| m.max(d.abs()));
            assert!(late <= tol, "{fc} Hz at {fs} Hz: {late} after {n} samples");
            let second_half = dev[n / 2..n].iter().fold(0.0f64, |m, d| m.max(d.abs()));
            assert!(
                second_half > tol,
                "{fc} Hz at {fs} Hz: window {n} oversized ({second_half})"
            );
        }
        let c = Biquad::butterworth_lowpass(12.0, 1000.0).expect("valid");
        assert_eq!(c.settle_samples(tol), 93);
    }

    #[test]
    fn deadband_shape() {
        assert_eq!(smooth_deadband(0.0, 3.0), 0.0);
        assert!(smooth_deadband(1.0, 3.0).abs() < 0.11);
        assert!((smooth_deadband(0.3, 3.0) - 0.3f64.powi(3) / 9.0).abs() < 1e-4);
        assert!((smooth_deadband(9.0, 3.0) - 9.0).abs() < 2e-3);
        assert!((smooth_deadband(-30.0, 3.0) + 30.0).abs() < 1e-12);
        assert_eq!(smooth_deadband(2.0, 0.0), 2.0);
    }

    proptest! {
        #[test]
        fn deadband_monotone_odd_and_shrinking(a in -100.0f64..100.0, b in -100.0f64..100.0, d in 0.01f64..10.0) {
            let (ya, yb) = (smooth_deadband(a, d), smooth_deadband(b, d));
            if a < b { prop_assert!(ya <= yb + 1e-12); }
            prop_assert!((smooth_deadband(-a, d) + ya).abs() < 1e-9);
            prop_assert!(ya.abs() <= a.abs() + 1e-12);
        }

        #[test]
        fn lowpass_output_bounded_by_input_range(xs in proptest::collection::vec(-50.0f64..50.0, 1..300)) {
            let c = Biquad::butterworth_lowpass(12.0, 1000.0).expect("valid");
            // BIBO bound: |y| ≤ max|x| · Σ|h[k]| (impulse response L1 norm), from the zero state.
            let mut imp = LowPass::new(c);
            imp.reset_to(0.0);
            let l1: f64 = (0..5000).map(|k| imp.step(if k == 0 { 1.0 } else { 0.0 }).abs()).sum();
            let mut f = LowPass::new(c);
            f.reset_to(0.0);
            for x in &xs {
                let y = f.step(*x);
                prop_assert!(y.abs() <= 50.0 * l1 + 1e-9, "{} > {}", y, 50.0 * l1);
            }
        }
    }
}
