//! Swings of a signal: the one extremum detector behind the cell's oscillation watches
//! (issue 42: control's hybrid watch on the 12 Hz force error and the force service's fast
//! band on the filter's residual had the same detector written twice). The guide law's
//! damping observer is a different detector on purpose (zero-mean high-passed velocity,
//! lobes by sign; `control::guide`).
//!
//! The signal's extrema are confirmed with a hysteresis `band` (peak to peak): an extremum is
//! a swing once the signal has retreated from it by more than `band`; each swing carries the
//! peak-to-peak amplitude of the half-cycle it ends. The last swings are kept in a ring.
//! Pure, allocation-free, `Copy`; time is a parameter (seconds, or a sample count: integers
//! below 2⁵³ are exact in `f64`).

/// The swing detector on one signal, keeping up to `N` swings.
#[derive(Debug, Clone, Copy)]
pub struct SwingCounter<const N: usize> {
    /// +1 tracking a maximum, −1 a minimum, 0 not yet decided.
    dir: i8,
    hi: f64,
    lo: f64,
    started: bool,
    /// (time, peak-to-peak amplitude) of the last swings (ring of `keep` ≤ N).
    ring: [(f64, f64); N],
    n: usize,
}

impl<const N: usize> Default for SwingCounter<N> {
    fn default() -> Self {
        Self {
            dir: 0,
            hi: 0.0,
            lo: 0.0,
            started: false,
            ring: [(0.0, 0.0); N],
            n: 0,
        }
    }
}

impl<const N: usize> SwingCounter<N> {
    /// Forgets every swing (a gap in the samples, a new start).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Swings confirmed since the start.
    pub fn count(&self) -> usize {
        self.n
    }

    /// One sample `x` at time `t` with the hysteresis `band`, keeping the last `keep` swings
    /// (`1..=N`; clamped). Returns the peak-to-peak amplitude of the swing this sample
    /// confirmed, if it confirmed one. The first sample only starts the detector.
    pub fn step(&mut self, t: f64, x: f64, band: f64, keep: usize) -> Option<f64> {
        let keep = keep.clamp(1, N.max(1));
        if !self.started {
            *self = Self {
                started: true,
                hi: x,
                lo: x,
                ..Self::default()
            };
            return None;
        }
        let mut swing = None;
        match self.dir {
            1 if x > self.hi => self.hi = x,
            1 if x < self.hi - band => {
                swing = Some(self.hi - self.lo.min(x));
                self.dir = -1;
                self.lo = x;
            }
            -1 if x < self.lo => self.lo = x,
            -1 if x > self.lo + band => {
                swing = Some(self.hi.max(x) - self.lo);
                self.dir = 1;
                self.hi = x;
            }
            0 => {
                self.hi = self.hi.max(x);
                self.lo = self.lo.min(x);
                if x < self.hi - band {
                    // Fell from a maximum: a swing (its first extremum), now tracking down.
                    swing = Some(self.hi - self.lo);
                    self.dir = -1;
                    self.lo = x;
                } else if x > self.lo + band {
                    swing = Some(self.hi - self.lo);
                    self.dir = 1;
                    self.hi = x;
                }
            }
            _ => {}
        }
        if let Some(a) = swing {
            if N > 0 {
                self.ring[self.n % keep] = (t, a);
            }
            self.n += 1;
        }
        swing
    }

    /// Of the last `keep` swings, those within `window` before `t` (`t − s ≤ window`).
    pub fn recent(&self, t: f64, window: f64, keep: usize) -> usize {
        let n = self.n.min(keep.clamp(1, N.max(1))).min(N);
        self.ring[..n]
            .iter()
            .filter(|(s, _)| t - *s <= window)
            .count()
    }

    /// The smallest amplitude of the last `keep` swings when there are `keep` and all lie
    /// within `window` before `t` (`t − s ≤ window`), else `None`.
    pub fn all_within(&self, t: f64, window: f64, keep: usize) -> Option<f64> {
        let keep = keep.clamp(1, N.max(1)).min(N);
        if self.n < keep {
            return None;
        }
        let mut smallest = f64::INFINITY;
        for &(at, a) in &self.ring[..keep] {
            if t - at > window {
                return None;
            }
            smallest = smallest.min(a);
        }
        Some(smallest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sine_swings_twice_a_period_with_its_peak_to_peak() {
        let mut s = SwingCounter::<8>::default();
        let (f, fs, amp) = (5.0, 1000.0, 3.0);
        let mut swings = Vec::new();
        for k in 0..1000 {
            let t = k as f64 / fs;
            let x = amp * (2.0 * std::f64::consts::PI * f * t).sin();
            if let Some(a) = s.step(t, x, 1.0, 8) {
                swings.push((t, a));
            }
        }
        // The start counts as the first minimum once the sine has risen past the band
        // (0.011 s), then 5 Hz over 1 s: 10 extrema.
        assert_eq!(swings.len(), 11, "{swings:?}");
        for (_, a) in &swings[2..] {
            assert!((a - 2.0 * amp).abs() < 0.01, "{swings:?}");
        }
        // Confirmed 27 ms after each extremum: 0.577, 0.677, 0.777, 0.877, 0.977 s.
        assert_eq!(s.recent(1.0, 0.45, 8), 5);
        assert!(s.all_within(1.0, 1.0, 8).is_some_and(|a| a > 5.9));
        assert_eq!(s.all_within(1.0, 0.3, 8), None);
    }

    #[test]
    fn noise_within_the_band_and_one_step_are_not_an_oscillation() {
        let mut s = SwingCounter::<4>::default();
        let mut n = 0;
        for k in 0..2000 {
            let t = k as f64 * 0.004;
            // ±0.4 within a band of 1, then one step of 10 with a small overshoot.
            let x = if k < 1000 {
                0.4 * if k % 2 == 0 { 1.0 } else { -1.0 }
            } else if k < 1010 {
                11.0
            } else {
                10.0
            };
            n += usize::from(s.step(t, x, 1.0, 4).is_some());
        }
        assert!(n <= 2, "{n}");
        assert!(s.recent(8.0, 1.0, 4) < 4);
    }

    #[test]
    fn the_ring_keeps_the_last_swings_only() {
        let mut s = SwingCounter::<4>::default();
        let mut t = 0.0;
        for k in 0..40 {
            t = k as f64;
            s.step(t, if k % 2 == 0 { 1.0 } else { -1.0 }, 0.5, 4);
        }
        assert_eq!(s.count(), 39);
        assert_eq!(s.recent(t, 3.0, 4), 4);
        assert_eq!(s.recent(t, 1.0, 4), 2);
        s.reset();
        assert_eq!(s.count(), 0);
        assert_eq!(s.recent(t, 100.0, 4), 0);
    }
}
