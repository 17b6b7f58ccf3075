//! Braking to rest: the one home of the braking formulas every mode uses (issue 42: braking
//! was written out in the hybrid law, the guide laws, the ending, the step limiter and
//! robot-io's controlled end, four Cartesian formulas and one in joint space). Pure scalars
//! and 3-vectors, any length unit `L` (m or rad) and time in seconds.
//!
//! Two families:
//! * **The speed allowed at a distance** from where the motion must be at rest (a wall, a
//!   position limit, the end of an unloading travel, the end of a step):
//!   `d = v²/(2a) + v·τ` ⇔ [`braking_speed`] `v = √((a·τ)² + 2·a·d) − a·τ`. The margin τ is
//!   the travel a sampled stream makes before its first braking step: 0 for the continuous
//!   curve (a cap with a final clip), one cycle for a cap the stream can follow within `a`
//!   every cycle (the step limiter's position limits).
//! * **One cycle towards rest** at a deceleration `a`: `v ← v·(1 − dt/T)`, `T` the time to
//!   rest (`|v|/a` for one axis or a norm; the slowest joint's for robot-io's controlled end,
//!   so every joint stops together on the path); zero once `T ≤ dt`. [`brake_axis`] per axis,
//!   [`brake_vec3`] on a norm (the direction kept), [`rest_scale`] from a time to rest;
//!   [`toward_vec3`] the same norm-rate limit towards any target velocity.
//!
//! The simulator brakes on its own (it must not use the cell's code: tests/boundaries.rs).

use nalgebra::Vector3;

/// The speed (L/s) from which braking at `accel_per_s2` (L/s², > 0) stops within `dist` (L)
/// after `margin_s` of travel at that speed: `dist = v²/(2a) + v·margin_s`. A distance ≤ 0 or
/// NaN allows 0. With a margin, written as `2ad / (a·τ + √((a·τ)² + 2ad))`: the difference
/// `√(…) − a·τ` cancelled to 0 for a tiny `d` (a joint 1e-21 rad off its target by IK noise
/// capped a whole step to nearly nothing through the step limiter's common scale).
pub fn braking_speed(dist: f64, accel_per_s2: f64, margin_s: f64) -> f64 {
    let d = dist.max(0.0);
    let a = accel_per_s2;
    if margin_s == 0.0 {
        (2.0 * a * d).sqrt()
    } else {
        let am = a * margin_s;
        2.0 * a * d / (am + (am.powi(2) + 2.0 * a * d).sqrt())
    }
}

/// The distance (L) braking from `speed` (L/s) at `accel_per_s2` (L/s²) takes after
/// `margin_s` at that speed: `v²/(2a) + v·margin_s` (the inverse of [`braking_speed`]).
pub fn braking_distance(speed: f64, accel_per_s2: f64, margin_s: f64) -> f64 {
    speed * speed / (2.0 * accel_per_s2) + speed * margin_s
}

/// One axis one cycle towards rest: `v` reduced by `dv` (L/s, ≥ 0) in magnitude, exactly 0
/// once within it.
pub fn brake_axis(v: f64, dv: f64) -> f64 {
    v - v.signum() * dv.min(v.abs())
}

/// A vector one cycle towards rest on its norm: reduced by `dv` (L/s) with its direction
/// kept, zero once within it (or not finite). The scale `(|v| − dv)/|v|` is `1 − dt/T` with
/// `T = |v|/a` and `dv = a·dt`.
pub fn brake_vec3(v: &Vector3<f64>, dv: f64) -> Vector3<f64> {
    let n = v.norm();
    if n <= dv || !n.is_finite() {
        Vector3::zeros()
    } else {
        v * ((n - dv) / n)
    }
}

/// `v` moved towards `target` by at most `dv` (L/s) on the norm of the difference: the
/// target once within it (or when the difference is not finite).
pub fn toward_vec3(v: &Vector3<f64>, target: &Vector3<f64>, dv: f64) -> Vector3<f64> {
    let d = target - v;
    let n = d.norm();
    if n <= dv || !n.is_finite() {
        *target
    } else {
        v + d * (dv / n)
    }
}

/// The velocity scale of one cycle of `dt_s` towards rest for a motion whose time to rest is
/// `time_to_rest_s`: `1 − dt/T`, or 0 once `T ≤ dt` (or not finite): at rest.
pub fn rest_scale(time_to_rest_s: f64, dt_s: f64) -> f64 {
    if time_to_rest_s > dt_s && time_to_rest_s.is_finite() {
        1.0 - dt_s / time_to_rest_s
    } else {
        0.0
    }
}

/// The velocity (L/s) of this cycle for a command `e` (L, signed) away from where it must
/// come to rest, moving at `v0` (L/s) in the last cycle, with the deceleration bound `a`
/// (L/s²) and the cycle `dt` (s): as fast as it can brake to rest on the target (braking by
/// a·dt a cycle: [`braking_speed`] with half a cycle of margin, exact on the lattice
/// `v = n·a·dt`), never past it in one step, and within a·dt of `v0`. Invalid input (dt or
/// a ≤ 0, a non-finite `e` or `v0`): 0.
pub fn stop_velocity(e: f64, v0: f64, a: f64, dt: f64) -> f64 {
    if !(dt > 0.0 && a > 0.0 && e.is_finite() && v0.is_finite()) {
        return 0.0;
    }
    let d = e.abs();
    let brake = a * dt * ((0.25 + 2.0 * d / (a * dt * dt)).sqrt() - 0.5);
    let v_des = e.signum() * brake.min(d / dt);
    v_des.clamp(v0 - a * dt, v0 + a * dt)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn braking_speed_and_distance_are_inverse() {
        for &a in &[0.5, 1.0, 3.0, 17.45] {
            for &m in &[0.0, 0.002, 0.004] {
                for &d in &[0.0, 1e-9, 1e-4, 0.01, 0.3] {
                    let v = braking_speed(d, a, m);
                    let back = braking_distance(v, a, m);
                    assert!(
                        (back - d).abs() <= 1e-12 + 1e-9 * d,
                        "a {a} m {m} d {d}: {back}"
                    );
                }
            }
        }
        assert_eq!(braking_speed(-1.0, 1.0, 0.004), 0.0);
        assert_eq!(braking_speed(f64::NAN, 1.0, 0.004), 0.0);
        // No cancellation: a tiny distance still allows a speed of its own order.
        let v = braking_speed(1e-21, 17.45, 0.004);
        assert!(v > 0.0 && (v * 0.004 - 1e-21).abs() < 1e-22, "{v}");
    }

    /// With one cycle of margin, consecutive caps differ by at most a·dt: a stream that
    /// follows the cap decelerates within the bound (the step limiter's position limits).
    #[test]
    fn a_cap_with_one_cycle_of_margin_is_followed_within_the_bound() {
        let (a, dt) = (3.0, 0.004);
        let mut d = 0.01;
        let mut v = braking_speed(d, a, dt);
        while d > 0.0 {
            d -= v * dt;
            let next = braking_speed(d, a, dt);
            assert!(v - next <= a * dt * (1.0 + 1e-9), "{v} → {next} at {d}");
            if next < 1e-12 {
                break;
            }
            v = next;
        }
    }

    #[test]
    fn one_cycle_towards_rest() {
        assert_eq!(brake_axis(1.0, 0.25), 0.75);
        assert_eq!(brake_axis(-1.0, 0.25), -0.75);
        assert_eq!(brake_axis(0.1, 0.25), 0.0);
        assert_eq!(brake_axis(-0.1, 0.25), 0.0);
        let v = Vector3::new(3.0, 4.0, 0.0);
        let b = brake_vec3(&v, 1.0);
        assert!((b.norm() - 4.0).abs() < 1e-12 && (b.normalize() - v.normalize()).norm() < 1e-12);
        assert_eq!(brake_vec3(&v, 5.0), Vector3::zeros());
        assert_eq!(
            brake_vec3(&Vector3::new(f64::NAN, 0.0, 0.0), 1.0),
            Vector3::zeros()
        );
        let t = toward_vec3(&Vector3::zeros(), &Vector3::new(0.0, 2.0, 0.0), 0.5);
        assert_eq!(t, Vector3::new(0.0, 0.5, 0.0));
        assert_eq!(rest_scale(0.004, 0.004), 0.0);
        assert!((rest_scale(0.04, 0.004) - 0.9).abs() < 1e-12);
        assert_eq!(rest_scale(f64::INFINITY, 0.004), 0.0);
        // The vector brake's scale is the time-to-rest scale, T = |v|/a.
        let (a, dt) = (3.0, 0.004);
        let n = v.norm();
        assert!(((n - a * dt) / n - rest_scale(n / a, dt)).abs() < 1e-15);
    }

    /// The former places' own expressions, bit for bit, on a grid (the step limiter's
    /// braking cap, the guide's wall cap, the per-axis brake).
    #[test]
    fn the_shared_forms_equal_the_ones_they_replaced() {
        for &a in &[0.7, 1.0, 3.0, 17.453292519943295, 29.32153143350474] {
            for &dt in &[0.001, 0.004, 0.008] {
                for i in 0..200 {
                    let d = 1e-9 * 1.2f64.powi(i);
                    let old = {
                        let d = d.max(0.0);
                        2.0 * a * d / (a * dt + ((a * dt).powi(2) + 2.0 * a * d).sqrt())
                    };
                    assert_eq!(braking_speed(d, a, dt).to_bits(), old.to_bits());
                    assert_eq!(
                        braking_speed(d, a, 0.0).to_bits(),
                        (2.0 * a * d).sqrt().to_bits()
                    );
                    let v0 = d * if i % 2 == 0 { 1.0 } else { -1.0 } / dt;
                    let old = v0 - (a * dt).min(v0.abs()) * v0.signum();
                    assert_eq!(brake_axis(v0, a * dt).to_bits(), old.to_bits());
                }
            }
        }
    }

    /// Ported from control::hybrid: braking from any speed onto the target lands at rest
    /// within the bound.
    #[test]
    fn stop_velocity_lands_at_rest_within_its_bound() {
        let (a, dt) = (1.0, 0.004);
        for &(e0, v0) in &[(0.01, 0.0), (0.01, 0.02), (-0.003, 0.05), (0.0005, -0.02)] {
            let (mut x, mut v) = (0.0, v0);
            let mut landed = false;
            for _ in 0..5000 {
                let nv = stop_velocity(e0 - x, v, a, dt);
                assert!((nv - v).abs() <= a * dt * (1.0 + 1e-9), "{v} → {nv}");
                v = nv;
                x += v * dt;
                if (e0 - x).abs() < 1e-9 && v.abs() <= a * dt {
                    landed = true;
                    break;
                }
            }
            assert!(landed, "e0 {e0} v0 {v0}: at {x} moving {v}");
        }
        assert_eq!(stop_velocity(f64::NAN, 0.0, 1.0, 0.004), 0.0);
        assert_eq!(stop_velocity(0.01, 0.0, 0.0, 0.004), 0.0);
    }
}
