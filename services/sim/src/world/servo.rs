//! Joint servo model of the simulated robot: position reference in, measured position and
//! velocity out.
//!
//! Per joint, the controller's axis servo is modelled as a **second-order** closed loop
//!
//! ```text
//! q̈ = ωn² (r(t − N·T) − q) − 2 ζ ωn q̇
//! ```
//!
//! with natural frequency `ωn` derived from the configured −3 dB bandwidth (`bandwidth_hz`) and
//! damping ratio `ζ` (default 1: critically damped, no overshoot), a transport delay of exactly
//! `N = delay_cycles` calls of [`ServoModel::step`], and the robot's limits:
//!
//! * the reference is clamped into the joint range before it enters the loop;
//! * `|q̇|` never exceeds the joint's max speed (the velocity state is clamped every substep);
//! * an optional `|q̈|` limit (with braking: when approaching the reference faster than a stop
//!   at the limit allows, the joint decelerates at the limit, so the limit does not turn into
//!   overshoot);
//! * the position is clamped into the joint range (a hard stop: the velocity into the stop is
//!   zeroed).
//!
//! Why second order: an industrial position servo (cascaded position/velocity loops around a
//! stiff gearbox) looks, from the position reference, like a well-damped second-order low-pass
//! whose velocity is continuous — a first-order model would let the measured velocity jump on
//! every reference step, which no real arm does and which would make the velocity the EGM
//! controller reports meaningless.
//!
//! Integration: semi-implicit (symplectic) Euler with substeps `h ≤ min(1 ms, 0.02/ωn)` so the
//! discretisation error on the loop dynamics is far below a per cent; deterministic for equal
//! inputs (no clocks, no randomness).
//!
//! The reference enters once per robot cycle ([`ServoModel::push_reference`]: the delay line
//! advances one cycle) and the loop is integrated over any number of shorter steps in between
//! ([`ServoModel::advance`]); [`ServoModel::step`] is both for one whole cycle. The simulator
//! pushes a reference every EGM cycle and advances every 1 ms base tick, so the measured joints
//! (and the F/T truth computed from them) evolve at 1 kHz while the transport delay stays
//! `delay_cycles` EGM cycles: with the same substep size the result at the end of each cycle
//! is the same as one `step` over the cycle (tested), so the documented lag (≈ 30 ms at the
//! 4 ms cycle, `algorithms.md` §D) is unchanged.
//!
//! Motors off: the brakes hold — the position stays, the velocity is zero, references are
//! consumed but ignored; when the motors come back on, the delay line is refilled with the held
//! position so no stale reference is ever executed.

// Index loops over the 6 joints mirror the per-joint math (q_j, ωn_j, limits_j).
#![allow(clippy::needless_range_loop)]

use std::collections::VecDeque;

use kinematics::JointLimits;
use serde::{Deserialize, Serialize};

/// Servo parameters (`[servo]` in a scenario).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServoParams {
    /// Closed-loop −3 dB bandwidth per joint (Hz), > 0.
    pub bandwidth_hz: [f64; 6],
    /// Damping ratio ζ of the closed loop, in [0.3, 3]. 1 = critically damped.
    pub damping_ratio: f64,
    /// Transport delay of the reference, in calls of `step` (robot cycles), ≤ 50.
    pub delay_cycles: usize,
    /// Optional joint acceleration limit (rad/s²), each > 0.
    pub max_accel_rad_s2: Option<[f64; 6]>,
}

impl Default for ServoParams {
    fn default() -> Self {
        Self {
            bandwidth_hz: [10.0; 6],
            damping_ratio: 1.0,
            delay_cycles: 2,
            max_accel_rad_s2: None,
        }
    }
}

impl ServoParams {
    /// Every problem, keys prefixed with `prefix` (e.g. `servo`).
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        for (j, b) in self.bandwidth_hz.iter().enumerate() {
            if !b.is_finite() || *b <= 0.0 || *b > 500.0 {
                e.push(format!(
                    "{prefix}.bandwidth_hz[{j}]: must be in (0, 500] Hz (got {b})"
                ));
            }
        }
        let z = self.damping_ratio;
        if !z.is_finite() || !(0.3..=3.0).contains(&z) {
            e.push(format!(
                "{prefix}.damping_ratio: must be in [0.3, 3] (got {z})"
            ));
        }
        if self.delay_cycles > 50 {
            e.push(format!(
                "{prefix}.delay_cycles: must be <= 50 (got {})",
                self.delay_cycles
            ));
        }
        if let Some(a) = self.max_accel_rad_s2 {
            for (j, v) in a.iter().enumerate() {
                if !v.is_finite() || *v <= 0.0 {
                    e.push(format!(
                        "{prefix}.max_accel_rad_s2[{j}]: must be finite and > 0 (got {v})"
                    ));
                }
            }
        }
        e
    }
}

/// Natural frequency ωn (rad/s) of a second-order low-pass with damping ratio `zeta` whose
/// −3 dB bandwidth is `bandwidth_hz`:
/// `ω_b = ωn·√(1 − 2ζ² + √(4ζ⁴ − 4ζ² + 2))`.
pub fn natural_frequency(bandwidth_hz: f64, zeta: f64) -> f64 {
    let z2 = zeta * zeta;
    let ratio = (1.0 - 2.0 * z2 + (4.0 * z2 * z2 - 4.0 * z2 + 2.0).sqrt()).sqrt();
    2.0 * std::f64::consts::PI * bandwidth_hz / ratio
}

/// The per-joint servo of the simulated arm. See the module docs for the law.
#[derive(Debug, Clone)]
pub struct ServoModel {
    params: ServoParams,
    limits: JointLimits,
    wn: [f64; 6],
    h_max: f64,
    q: [f64; 6],
    qd: [f64; 6],
    delay: VecDeque<[f64; 6]>,
    last_ref: [f64; 6],
    /// The reference the loop tracks now (out of the delay line).
    active: [f64; 6],
    motors_on: bool,
    rejected: u64,
    cycles: u64,
}

impl ServoModel {
    /// A servo at rest at `q0` (clamped into the limits), motors on. `params` must be valid
    /// ([`ServoParams::validate`]); invalid bandwidths fall back to 10 Hz, invalid ζ to 1.
    pub fn new(params: ServoParams, limits: JointLimits, q0: [f64; 6]) -> Self {
        let zeta = if params.damping_ratio.is_finite() && params.damping_ratio > 0.0 {
            params.damping_ratio
        } else {
            1.0
        };
        let mut wn = [0.0; 6];
        for j in 0..6 {
            let b = params.bandwidth_hz[j];
            let b = if b.is_finite() && b > 0.0 { b } else { 10.0 };
            wn[j] = natural_frequency(b, zeta);
        }
        let wn_max = wn.iter().cloned().fold(0.0, f64::max);
        let h_max = (0.02 / wn_max).min(1e-3);
        let mut q = [0.0; 6];
        for j in 0..6 {
            let v = if q0[j].is_finite() { q0[j] } else { 0.0 };
            q[j] = v.clamp(limits.min[j], limits.max[j]);
        }
        let delay = VecDeque::from(vec![q; params.delay_cycles]);
        let params = ServoParams {
            damping_ratio: zeta,
            ..params
        };
        Self {
            params,
            limits,
            wn,
            h_max,
            q,
            qd: [0.0; 6],
            delay,
            last_ref: q,
            active: q,
            motors_on: true,
            rejected: 0,
            cycles: 0,
        }
    }

    /// Parameters in use.
    pub fn params(&self) -> &ServoParams {
        &self.params
    }

    /// Limits in use.
    pub fn limits(&self) -> &JointLimits {
        &self.limits
    }

    /// Natural frequency ωn per joint (rad/s).
    pub fn natural_frequencies(&self) -> [f64; 6] {
        self.wn
    }

    /// Measured position (rad).
    pub fn q(&self) -> [f64; 6] {
        self.q
    }

    /// Measured velocity (rad/s).
    pub fn qd(&self) -> [f64; 6] {
        self.qd
    }

    /// Whether the motors are on.
    pub fn motors_on(&self) -> bool {
        self.motors_on
    }

    /// Number of reference components rejected as non-finite (the previous reference of that
    /// joint was used instead).
    pub fn rejected_refs(&self) -> u64 {
        self.rejected
    }

    /// Number of `step` calls so far.
    pub fn cycles(&self) -> u64 {
        self.cycles
    }

    /// Switches the motors. Off: brakes hold the position (velocity zero). On: the delay line
    /// is refilled with the held position.
    pub fn set_motors_on(&mut self, on: bool) {
        if on && !self.motors_on {
            for r in self.delay.iter_mut() {
                *r = self.q;
            }
            self.last_ref = self.q;
            self.active = self.q;
        }
        if !on {
            self.qd = [0.0; 6];
        }
        self.motors_on = on;
    }

    /// Places the arm at `q` at rest (clamped into the limits), refilling the delay line.
    pub fn reset(&mut self, q: [f64; 6]) {
        for j in 0..6 {
            let v = if q[j].is_finite() { q[j] } else { self.q[j] };
            self.q[j] = v.clamp(self.limits.min[j], self.limits.max[j]);
        }
        self.qd = [0.0; 6];
        for r in self.delay.iter_mut() {
            *r = self.q;
        }
        self.last_ref = self.q;
        self.active = self.q;
    }

    /// New parameters at run time, keeping the position, velocity and the references in the
    /// delay line (a longer line is padded with the oldest reference, a shorter one drops the
    /// oldest). `params` must be valid ([`ServoParams::validate`]).
    pub fn set_params(&mut self, params: ServoParams) {
        let mut next = ServoModel::new(params, self.limits, self.q);
        next.qd = self.qd;
        next.last_ref = self.last_ref;
        next.active = self.active;
        next.motors_on = self.motors_on;
        next.rejected = self.rejected;
        next.cycles = self.cycles;
        let mut line = self.delay.clone();
        let n = next.params.delay_cycles;
        while line.len() > n {
            line.pop_front();
        }
        while line.len() < n {
            line.push_front(line.front().copied().unwrap_or(self.active));
        }
        next.delay = line;
        *self = next;
    }

    /// One robot cycle of `dt` seconds with a new position reference. Returns the measured
    /// `(q, q̇)` at the end of the cycle. Non-finite reference components repeat the previous
    /// reference; a non-finite or non-positive `dt` advances nothing but the delay line.
    pub fn step(&mut self, q_ref: &[f64; 6], dt: f64) -> ([f64; 6], [f64; 6]) {
        self.push_reference(q_ref);
        self.advance(dt)
    }

    /// A new robot cycle's reference: enters the delay line, and the reference that leaves it
    /// (`delay_cycles` pushes ago) becomes the one tracked. Non-finite components repeat the
    /// previous reference.
    pub fn push_reference(&mut self, q_ref: &[f64; 6]) {
        self.cycles += 1;
        let mut r = self.last_ref;
        for j in 0..6 {
            if q_ref[j].is_finite() {
                r[j] = q_ref[j].clamp(self.limits.min[j], self.limits.max[j]);
            } else {
                self.rejected += 1;
            }
        }
        self.last_ref = r;
        self.delay.push_back(r);
        self.active = self.delay.pop_front().unwrap_or(r);
    }

    /// Integrates the loop over `dt` seconds towards the tracked reference (no new
    /// reference). Returns the measured `(q, q̇)`. Motors off: held, velocity zero; a
    /// non-finite or non-positive `dt` advances nothing.
    pub fn advance(&mut self, dt: f64) -> ([f64; 6], [f64; 6]) {
        let active = self.active;
        if !self.motors_on {
            self.qd = [0.0; 6];
            return (self.q, self.qd);
        }
        if !(dt.is_finite() && dt > 0.0) {
            return (self.q, self.qd);
        }
        let n = (dt / self.h_max).ceil().max(1.0) as usize;
        let h = dt / n as f64;
        let zeta = self.params.damping_ratio;
        for _ in 0..n {
            for j in 0..6 {
                let wn = self.wn[j];
                let e = active[j] - self.q[j];
                let mut a = wn * wn * e - 2.0 * zeta * wn * self.qd[j];
                if let Some(amax) = self.params.max_accel_rad_s2 {
                    let amax = amax[j];
                    a = a.clamp(-amax, amax);
                    // Brake in time: approaching faster than a stop at amax allows.
                    let v = self.qd[j];
                    if v * e > 0.0 && v * v > 2.0 * amax * e.abs() {
                        a = -v.signum() * amax;
                    }
                }
                let vmax = self.limits.max_speed[j];
                let mut v = (self.qd[j] + h * a).clamp(-vmax, vmax);
                let mut p = self.q[j] + h * v;
                if p >= self.limits.max[j] {
                    p = self.limits.max[j];
                    v = v.min(0.0);
                } else if p <= self.limits.min[j] {
                    p = self.limits.min[j];
                    v = v.max(0.0);
                }
                self.q[j] = p;
                self.qd[j] = v;
            }
        }
        (self.q, self.qd)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn servo(delay: usize) -> ServoModel {
        let p = ServoParams {
            delay_cycles: delay,
            ..Default::default()
        };
        ServoModel::new(p, JointLimits::irb120(), [0.0; 6])
    }

    #[test]
    fn natural_frequency_of_critical_damping() {
        // ζ = 1: ω_b = ωn·√(√2 − 1) ≈ 0.6436 ωn.
        let wn = natural_frequency(1.0, 1.0);
        let expect = 2.0 * std::f64::consts::PI / (2f64.sqrt() - 1.0).sqrt();
        assert!((wn - expect).abs() < 1e-12);
        // ζ = 1/√2: ω_b = ωn.
        let wn = natural_frequency(1.0, std::f64::consts::FRAC_1_SQRT_2);
        assert!((wn - 2.0 * std::f64::consts::PI).abs() < 1e-9);
    }

    #[test]
    fn step_response_settles_without_overshoot() {
        let mut s = servo(0);
        let target = [0.1, -0.05, 0.05, 0.2, -0.1, 0.3];
        let mut peak = [0.0f64; 6];
        for _ in 0..250 {
            let (q, _) = s.step(&target, 0.004);
            for j in 0..6 {
                peak[j] = peak[j].max(q[j].abs());
            }
        }
        let (q, qd) = (s.q(), s.qd());
        for j in 0..6 {
            assert!((q[j] - target[j]).abs() < 1e-6, "joint {j}: {}", q[j]);
            assert!(qd[j].abs() < 1e-4);
            assert!(
                peak[j] <= target[j].abs() * (1.0 + 1e-9),
                "overshoot on {j}"
            );
        }
    }

    #[test]
    fn settling_time_matches_bandwidth() {
        // Critically damped, ωn from 10 Hz bandwidth: the 2 % settling time of (1+ωn t)e^(−ωn t)
        // is ≈ 5.83/ωn ≈ 60 ms. Small step so the speed limit does not act.
        let mut s = servo(0);
        let wn = s.natural_frequencies()[0];
        let target = [0.01, 0.0, 0.0, 0.0, 0.0, 0.0];
        let dt = 0.0005;
        let mut t_settle = 0.0;
        for k in 1..=2000 {
            let (q, _) = s.step(&target, dt);
            if (q[0] - 0.01).abs() > 0.02 * 0.01 {
                t_settle = k as f64 * dt;
            }
        }
        let expect = 5.834 / wn;
        assert!(
            (t_settle - expect).abs() < 0.03 * expect + dt,
            "{t_settle} vs {expect}"
        );
    }

    #[test]
    fn sine_gain_at_bandwidth_is_minus_3_db() {
        let mut s = servo(0);
        let f = 10.0;
        let dt = 0.0005;
        let amp = 0.001; // small: no speed limiting
        let mut max_late: f64 = 0.0;
        for k in 0..4000 {
            let t = k as f64 * dt;
            let r = amp * (2.0 * std::f64::consts::PI * f * t).sin();
            let (q, _) = s.step(&[r, 0.0, 0.0, 0.0, 0.0, 0.0], dt);
            if t > 1.0 {
                max_late = max_late.max(q[0].abs());
            }
        }
        let gain = max_late / amp;
        assert!(
            (gain - std::f64::consts::FRAC_1_SQRT_2).abs() < 0.01,
            "{gain}"
        );
    }

    #[test]
    fn delay_is_exactly_n_cycles() {
        for n in [0usize, 1, 3, 7] {
            let mut s = servo(n);
            let target = [0.1; 6];
            let mut first_move = None;
            for k in 0..20 {
                let (q, _) = s.step(&target, 0.004);
                if first_move.is_none() && q[0] != 0.0 {
                    first_move = Some(k);
                }
            }
            assert_eq!(first_move, Some(n), "delay {n}");
        }
    }

    #[test]
    fn large_step_is_speed_limited_and_stays_in_limits() {
        let mut s = servo(2);
        let lim = JointLimits::irb120();
        let target = [10.0, -10.0, 10.0, -10.0, 10.0, -100.0]; // far beyond the limits
        let dt = 0.004;
        let mut prev = s.q();
        let mut reached_speed = [false; 6];
        for _ in 0..2000 {
            let (q, qd) = s.step(&target, dt);
            for j in 0..6 {
                assert!(qd[j].abs() <= lim.max_speed[j] * (1.0 + 1e-12));
                assert!((q[j] - prev[j]).abs() <= lim.max_speed[j] * dt * (1.0 + 1e-9));
                assert!(q[j] >= lim.min[j] && q[j] <= lim.max[j]);
                if qd[j].abs() >= lim.max_speed[j] * (1.0 - 1e-9) {
                    reached_speed[j] = true;
                }
            }
            prev = q;
        }
        assert!(
            reached_speed.iter().all(|&b| b),
            "speed limit engaged on every joint"
        );
        let q = s.q();
        for j in 0..6 {
            let bound = if target[j] > 0.0 {
                lim.max[j]
            } else {
                lim.min[j]
            };
            assert!((q[j] - bound).abs() < 1e-6, "joint {j} ends at its limit");
        }
    }

    #[test]
    fn accel_limit_is_respected() {
        let p = ServoParams {
            delay_cycles: 0,
            max_accel_rad_s2: Some([5.0; 6]),
            ..Default::default()
        };
        let mut s = ServoModel::new(p, JointLimits::irb120(), [0.0; 6]);
        let dt = 0.004;
        let mut prev_qd = s.qd();
        let mut peak = 0.0f64;
        for _ in 0..1000 {
            let (_, qd) = s.step(&[1.0; 6], dt);
            for j in 0..6 {
                assert!(
                    (qd[j] - prev_qd[j]).abs() <= 5.0 * dt * (1.0 + 1e-9),
                    "joint {j}: {} -> {}",
                    prev_qd[j],
                    qd[j]
                );
            }
            prev_qd = qd;
            peak = peak.max(s.q()[0]);
        }
        assert!((s.q()[0] - 1.0).abs() < 1e-6, "settled: {}", s.q()[0]);
        assert!(peak < 1.0 + 0.01, "overshoot {peak}");
    }

    #[test]
    fn motors_off_holds_and_on_does_not_replay_stale_refs() {
        let mut s = servo(3);
        for _ in 0..10 {
            s.step(&[0.2; 6], 0.004);
        }
        s.set_motors_on(false);
        let held = s.q();
        for _ in 0..50 {
            let (q, qd) = s.step(&[-0.5; 6], 0.004);
            assert_eq!(q, held);
            assert_eq!(qd, [0.0; 6]);
        }
        s.set_motors_on(true);
        // The next 3 cycles track the held position (delay line refilled), not -0.5.
        for _ in 0..3 {
            let (q, _) = s.step(&held, 0.004);
            for j in 0..6 {
                assert!((q[j] - held[j]).abs() < 1e-3);
            }
        }
    }

    #[test]
    fn non_finite_reference_repeats_previous() {
        let mut s = servo(0);
        s.step(&[0.1; 6], 0.004);
        let mut r = [0.1; 6];
        r[2] = f64::NAN;
        let (q, qd) = s.step(&r, 0.004);
        assert!(q.iter().chain(qd.iter()).all(|v| v.is_finite()));
        assert_eq!(s.rejected_refs(), 1);
        let (q, _) = s.step(&[0.1; 6], f64::NAN);
        assert!(q.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn base_ticks_between_cycles_match_whole_cycles() {
        // One push per 4 ms cycle and four 1 ms advances give the same trajectory at the cycle
        // ends as one 4 ms step (same substep size): the delay is still counted in cycles.
        let mut whole = servo(2);
        let mut ticked = servo(2);
        let mut worst = 0.0f64;
        for k in 0..500 {
            let r = [0.3 * (k as f64 * 0.02).sin(); 6];
            let (qa, va) = whole.step(&r, 0.004);
            ticked.push_reference(&r);
            let mut qb = ([0.0; 6], [0.0; 6]);
            for _ in 0..4 {
                qb = ticked.advance(0.001);
            }
            for j in 0..6 {
                worst = worst
                    .max((qa[j] - qb.0[j]).abs())
                    .max((va[j] - qb.1[j]).abs());
            }
        }
        assert!(worst < 1e-9, "{worst}");
        // Delay: the first movement comes after exactly delay_cycles pushes.
        let mut s = servo(3);
        let mut first = None;
        for k in 0..10 {
            s.push_reference(&[0.1; 6]);
            for _ in 0..4 {
                s.advance(0.001);
            }
            if first.is_none() && s.q()[0] != 0.0 {
                first = Some(k);
            }
        }
        assert_eq!(first, Some(3));
    }

    #[test]
    fn set_params_keeps_state_and_resizes_the_delay_line() {
        let mut s = servo(2);
        for k in 0..20 {
            s.step(&[0.01 * k as f64; 6], 0.004);
        }
        let (q, qd) = (s.q(), s.qd());
        s.set_params(ServoParams {
            delay_cycles: 4,
            bandwidth_hz: [5.0; 6],
            ..Default::default()
        });
        assert_eq!((s.q(), s.qd()), (q, qd));
        assert_eq!(s.params().delay_cycles, 4);
        assert_eq!(s.delay.len(), 4);
        s.set_params(ServoParams {
            delay_cycles: 0,
            ..Default::default()
        });
        assert!(s.delay.is_empty());
        let (q2, _) = s.step(&[0.5; 6], 0.004);
        assert!(q2.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn deterministic() {
        let run = || {
            let mut s = servo(2);
            let mut out = Vec::new();
            for k in 0..300 {
                let r = [(k as f64 * 0.01).sin(); 6];
                out.push(s.step(&r, 0.004));
            }
            out
        };
        assert_eq!(run(), run());
    }

    proptest! {
        #[test]
        fn never_exceeds_limits(
            refs in proptest::collection::vec(proptest::array::uniform6(-8.0f64..8.0), 1..60),
            bw in 0.5f64..60.0,
            zeta in 0.3f64..3.0,
            delay in 0usize..5,
            dt in 0.0005f64..0.02,
        ) {
            let lim = JointLimits::irb120();
            let p = ServoParams { bandwidth_hz: [bw; 6], damping_ratio: zeta, delay_cycles: delay, max_accel_rad_s2: None };
            let mut s = ServoModel::new(p, lim, [0.0; 6]);
            let mut prev = s.q();
            for r in &refs {
                // Hold each reference a few cycles.
                for _ in 0..5 {
                    let (q, qd) = s.step(r, dt);
                    for j in 0..6 {
                        prop_assert!(q[j] >= lim.min[j] && q[j] <= lim.max[j]);
                        prop_assert!(qd[j].abs() <= lim.max_speed[j] * (1.0 + 1e-12));
                        prop_assert!((q[j] - prev[j]).abs() <= lim.max_speed[j] * dt * (1.0 + 1e-9));
                    }
                    prev = q;
                }
            }
        }
    }
}
