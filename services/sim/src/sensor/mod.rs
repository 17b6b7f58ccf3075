//! F/T device emulators at the wire: an SRI M8128 interface box ([`sri`], TCP, AT commands,
//! `AA 55` frames in `C` and `E` mode) and an ATI Net F/T ([`ati`], RDT over UDP and
//! `netftapi2.xml` over HTTP). Both use the protocol codecs of the `sensor` crate.
//!
//! Both are fed by a [`Truth`] closure giving the true wrench at time `t` (seconds since the
//! emulator started; sensor frame, N and N·m) and add the imperfections of a real sensor
//! ([`Imperfections`]: bias, seeded Gaussian noise, linear thermal drift, a per-axis random
//! walk, saturation). In `cell-sim` the truth closure returns the world's newest true wrench,
//! which the simulator updates every 1 ms base tick.
//!
//! `Imperfections::default()` is a **perfect** sensor (no bias, noise or drift): tests that
//! need one construct it explicitly. The deployed simulator turns realistic imperfections on in
//! `deploy/config/sim.toml` (`[sim.sri.imperfections]`, `[sim.ati.imperfections]`; figures and
//! sources in `docs/simulator.md`). The drift terms use the emulator's own sample clock (the
//! device's clock, as on a real box), not the world's scenario time.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub mod ati;
pub mod sri;

/// The true wrench at the sensor at `t` seconds: Fx Fy Fz (N), Tx Ty Tz (N·m), sensor frame.
pub type Truth = Arc<dyn Fn(f64) -> [f64; 6] + Send + Sync>;

/// Faults of the sensor box itself, set at run time (`cell sim-fault`), shared by the
/// emulator's connections: what a real box does when it fails, on top of the measurement model.
#[derive(Debug, Clone, Default)]
pub struct BoxFaults(Arc<std::sync::Mutex<BoxFaultState>>);

/// See [`BoxFaults`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BoxFaultState {
    /// Hung (its firmware stuck, its process frozen): connections stay open and commands are
    /// read, but nothing is measured or sent. The box's clock runs on.
    pub frozen: bool,
    /// Every axis at full scale (+range) and the reading flagged saturated.
    pub saturated: bool,
    /// Every value NaN (only the calibrated float format can carry it; raw counts cannot).
    pub nan: bool,
    /// Added to the next `spike_samples` readings.
    pub spike: [f64; 6],
    pub spike_samples: u32,
    /// Zero offset added to every reading (grows while a drift is on).
    pub offset: [f64; 6],
}

impl BoxFaults {
    pub fn state(&self) -> BoxFaultState {
        self.0.lock().map(|g| *g).unwrap_or_default()
    }
    pub fn update(&self, f: impl FnOnce(&mut BoxFaultState)) {
        if let Ok(mut g) = self.0.lock() {
            f(&mut g);
        }
    }
    pub fn frozen(&self) -> bool {
        self.state().frozen
    }
    /// Applies the faults to one reading (`range`: the box's measuring range per axis; 0 =
    /// none). A spike counts down one sample per reading.
    pub fn apply(&self, r: &mut Reading, range: &[f64; 6]) {
        let Ok(mut f) = self.0.lock() else { return };
        let spike = f.spike_samples > 0;
        if spike {
            f.spike_samples -= 1;
        }
        for ((w, rg), (o, sp)) in r
            .wrench
            .iter_mut()
            .zip(range)
            .zip(f.offset.iter().zip(f.spike))
        {
            *w += o + if spike { sp } else { 0.0 };
            if *rg > 0.0 && w.abs() > *rg {
                *w = w.clamp(-rg, *rg);
                r.saturated = true;
            }
        }
        if f.saturated {
            for (w, rg) in r.wrench.iter_mut().zip(range) {
                if *rg > 0.0 {
                    *w = *rg;
                }
            }
            r.saturated = true;
        }
        if f.nan {
            r.wrench = [f64::NAN; 6];
        }
    }
}

/// A constant true wrench.
pub fn constant(w: [f64; 6]) -> Truth {
    Arc::new(move |_| w)
}

/// What the emulated sensor adds to the truth (per axis Fx Fy Fz Tx Ty Tz; N, N·m).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Imperfections {
    /// Constant offset.
    pub bias: [f64; 6],
    /// Standard deviation of white Gaussian noise.
    pub noise_std: [f64; 6],
    /// Thermal drift, added linearly: `drift_per_s · t`.
    pub drift_per_s: [f64; 6],
    /// Random-walk drift of the zero (per √s): each reading's offset moves by a Gaussian step
    /// of standard deviation `random_walk_per_sqrt_s · √Δt` (Δt since the previous reading), so
    /// after T seconds it has wandered by about `random_walk_per_sqrt_s · √T`.
    pub random_walk_per_sqrt_s: [f64; 6],
    /// Measuring range ±range; readings clip there and the sample is flagged saturated.
    pub range: [f64; 6],
    /// Noise seed (same seed, same noise sequence).
    pub seed: u64,
}

impl Default for Imperfections {
    fn default() -> Self {
        Self {
            bias: [0.0; 6],
            noise_std: [0.0; 6],
            drift_per_s: [0.0; 6],
            random_walk_per_sqrt_s: [0.0; 6],
            range: [1000.0, 1000.0, 2000.0, 50.0, 50.0, 50.0],
            seed: 1,
        }
    }
}

impl Imperfections {
    /// Every problem, keys prefixed with `prefix` (e.g. `sim.sri.imperfections`).
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        let rows: [(&str, &[f64; 6], bool); 5] = [
            ("bias", &self.bias, true),
            ("noise_std", &self.noise_std, false),
            ("drift_per_s", &self.drift_per_s, true),
            (
                "random_walk_per_sqrt_s",
                &self.random_walk_per_sqrt_s,
                false,
            ),
            ("range", &self.range, false),
        ];
        for (k, v, signed) in rows {
            for (i, x) in v.iter().enumerate() {
                if !x.is_finite() || (!signed && *x < 0.0) {
                    let what = if signed { "finite" } else { "finite and >= 0" };
                    e.push(format!("{prefix}.{k}[{i}]: must be {what} (got {x})"));
                }
            }
        }
        e
    }
}

/// A sensor reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub wrench: [f64; 6],
    /// Any axis clipped at its range.
    pub saturated: bool,
}

/// Deterministic measurement model: truth + bias + drift·t + random walk + noise, clipped to
/// the range.
pub struct SignalModel {
    cfg: Imperfections,
    truth: Truth,
    rng: SplitMix64,
    walk: [f64; 6],
    last_t: Option<f64>,
}

impl SignalModel {
    pub fn new(cfg: Imperfections, truth: Truth) -> Self {
        let rng = SplitMix64(cfg.seed);
        Self {
            cfg,
            truth,
            rng,
            walk: [0.0; 6],
            last_t: None,
        }
    }

    /// The random-walk offset accumulated so far (per axis).
    pub fn walk(&self) -> [f64; 6] {
        self.walk
    }

    /// The reading at `t` seconds (draws fresh noise; advances the random walk by the time
    /// since the previous reading — a reading at an earlier `t` does not move it).
    /// The measuring range per axis (0 = unlimited).
    pub fn range(&self) -> [f64; 6] {
        self.cfg.range.map(f64::abs)
    }

    pub fn read(&mut self, t: f64) -> Reading {
        let truth = (self.truth)(t);
        let dt = match self.last_t {
            Some(l) if t.is_finite() && t > l => t - l,
            _ => 0.0,
        };
        if t.is_finite() {
            self.last_t = Some(self.last_t.map_or(t, |l| l.max(t)));
        }
        let mut w = [0.0; 6];
        let mut saturated = false;
        for i in 0..6 {
            let n = if self.cfg.noise_std[i] > 0.0 {
                self.cfg.noise_std[i] * self.rng.gaussian()
            } else {
                0.0
            };
            if self.cfg.random_walk_per_sqrt_s[i] > 0.0 && dt > 0.0 {
                self.walk[i] +=
                    self.cfg.random_walk_per_sqrt_s[i] * dt.sqrt() * self.rng.gaussian();
            }
            let v = truth[i] + self.cfg.bias[i] + self.cfg.drift_per_s[i] * t + self.walk[i] + n;
            let r = self.cfg.range[i].abs();
            if r > 0.0 && v.abs() > r {
                saturated = true;
            }
            w[i] = if r > 0.0 { v.clamp(-r, r) } else { v };
        }
        Reading {
            wrench: w,
            saturated,
        }
    }
}

/// SplitMix64 with a Box–Muller Gaussian: tiny, seedable, good enough for sensor noise.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
    /// A standard normal variate.
    pub fn gaussian(&mut self) -> f64 {
        let u1 = self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_adds_bias_drift_noise_and_clips() {
        let cfg = Imperfections {
            bias: [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            drift_per_s: [0.0, 0.5, 0.0, 0.0, 0.0, 0.0],
            noise_std: [0.0, 0.0, 0.1, 0.0, 0.0, 0.0],
            random_walk_per_sqrt_s: [0.0; 6],
            range: [100.0, 100.0, 100.0, 2.0, 2.0, 2.0],
            seed: 7,
        };
        let mut m = SignalModel::new(cfg.clone(), constant([10.0, 0.0, 0.0, 5.0, 0.0, 0.0]));
        let r = m.read(2.0);
        assert_eq!(r.wrench[0], 11.0);
        assert_eq!(r.wrench[1], 1.0);
        assert_eq!(r.wrench[3], 2.0);
        assert!(r.saturated);
        // Noise: zero mean, the configured spread, reproducible from the seed.
        let zs: Vec<f64> = (0..20000).map(|_| m.read(0.0).wrench[2]).collect();
        let mean = zs.iter().sum::<f64>() / zs.len() as f64;
        let sd = (zs.iter().map(|z| (z - mean).powi(2)).sum::<f64>() / zs.len() as f64).sqrt();
        assert!(mean.abs() < 0.005, "{mean}");
        assert!((sd - 0.1).abs() < 0.005, "{sd}");
        let mut m2 = SignalModel::new(cfg, constant([0.0; 6]));
        let mut m3 = SignalModel::new(m2.cfg.clone(), constant([0.0; 6]));
        assert_eq!(m2.read(0.0), m3.read(0.0));
    }

    #[test]
    fn random_walk_spreads_with_the_square_root_of_time() {
        // 400 independent sensors read at 1 kHz for 4 s: the walk's spread across them is
        // σ_rw·√T (±10 %), its mean near zero; no white noise, so the reading is truth + walk.
        let sigma = 0.01;
        let cfg = |seed| Imperfections {
            random_walk_per_sqrt_s: [sigma, 0.0, 0.0, 0.0, 0.0, 0.0],
            seed,
            ..Default::default()
        };
        let mut finals = Vec::new();
        for seed in 1..=400u64 {
            let mut m = SignalModel::new(cfg(seed), constant([5.0, 0.0, 0.0, 0.0, 0.0, 0.0]));
            let mut r = m.read(0.0);
            assert_eq!(r.wrench[0], 5.0, "no walk at the first reading");
            for k in 1..=4000 {
                r = m.read(k as f64 * 1e-3);
            }
            assert_eq!(r.wrench[1], 0.0, "other axes untouched");
            assert!((r.wrench[0] - 5.0 - m.walk()[0]).abs() < 1e-12);
            finals.push(m.walk()[0]);
        }
        let n = finals.len() as f64;
        let mean = finals.iter().sum::<f64>() / n;
        let sd = (finals.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let expect = sigma * 4f64.sqrt();
        assert!((sd - expect).abs() < 0.1 * expect, "{sd} vs {expect}");
        assert!(mean.abs() < 3.0 * expect / n.sqrt(), "{mean}");
        // A reading back in time does not move the walk.
        let mut m = SignalModel::new(cfg(9), constant([0.0; 6]));
        m.read(1.0);
        m.read(2.0);
        let w = m.walk();
        m.read(1.5);
        assert_eq!(m.walk(), w);
    }

    #[test]
    fn validation_names_bad_entries() {
        let mut i = Imperfections::default();
        assert!(i.validate("x").is_empty());
        i.noise_std[2] = -0.1;
        i.bias[0] = f64::NAN;
        i.random_walk_per_sqrt_s[5] = -1.0;
        let e = i.validate("sim.sri.imperfections");
        for k in ["noise_std[2]", "bias[0]", "random_walk_per_sqrt_s[5]"] {
            assert!(
                e.iter()
                    .any(|m| m.starts_with(&format!("sim.sri.imperfections.{k}"))),
                "{k}: {e:?}"
            );
        }
    }
}
