//! Force and position profiles: their values, integrals and rates, and the corner blends
//! that bound a position reference's acceleration.

use common::msg::Profile;

/// Value of a profile at task time `t` (s).
pub fn profile_value(p: &Profile, t: f64) -> f64 {
    match p {
        Profile::Constant(v) => *v,
        Profile::Step {
            before,
            after,
            at_s,
        } => {
            if t < *at_s {
                *before
            } else {
                *after
            }
        }
        Profile::Ramp {
            from,
            to,
            start_s,
            duration_s,
        } => {
            if t <= *start_s {
                *from
            } else if *duration_s <= 0.0 || t >= start_s + duration_s {
                *to
            } else {
                from + (to - from) * (t - start_s) / duration_s
            }
        }
        Profile::Sine {
            offset,
            amplitude,
            freq_hz,
            phase_rad,
        } => offset + amplitude * (std::f64::consts::TAU * freq_hz * t + phase_rad).sin(),
        Profile::Series(pts) => {
            let Some(first) = pts.first() else {
                return 0.0;
            };
            if t <= first[0] {
                return first[1];
            }
            for w in pts.windows(2) {
                if t < w[1][0] {
                    let a = (t - w[0][0]) / (w[1][0] - w[0][0]);
                    return w[0][1] + a * (w[1][1] - w[0][1]);
                }
            }
            pts.last().map_or(0.0, |p| p[1])
        }
    }
}

/// An antiderivative of [`profile_value`] (value·s), continuous in `t`: box averages of the
/// profile are differences of it.
pub fn profile_integral(p: &Profile, t: f64) -> f64 {
    match p {
        Profile::Constant(v) => v * t,
        Profile::Step {
            before,
            after,
            at_s,
        } => {
            if t < *at_s {
                before * t
            } else {
                before * at_s + after * (t - at_s)
            }
        }
        Profile::Ramp {
            from,
            to,
            start_s,
            duration_s,
        } => {
            let d = duration_s.max(0.0);
            if t <= *start_s {
                from * t
            } else if t >= start_s + d {
                from * (start_s + d) + (to - from) * d / 2.0 + to * (t - start_s - d)
            } else {
                let u = t - start_s;
                from * t + (to - from) * u * u / (2.0 * d)
            }
        }
        Profile::Sine {
            offset,
            amplitude,
            freq_hz,
            phase_rad,
        } => {
            let w = std::f64::consts::TAU * freq_hz;
            if w.abs() < 1e-12 {
                (offset + amplitude * phase_rad.sin()) * t
            } else {
                offset * t - amplitude / w * (w * t + phase_rad).cos()
            }
        }
        Profile::Series(pts) => {
            let Some(first) = pts.first() else {
                return 0.0;
            };
            if t <= first[0] {
                return first[1] * t;
            }
            let mut acc = first[1] * first[0];
            for w in pts.windows(2) {
                let (t0, t1) = (w[0][0], w[1][0]);
                let slope = (w[1][1] - w[0][1]) / (t1 - t0);
                let u = (t.min(t1) - t0).max(0.0);
                acc += w[0][1] * u + slope * u * u / 2.0;
                if t < t1 {
                    return acc;
                }
            }
            let last = pts.last().map_or([0.0, 0.0], |p| *p);
            acc + last[1] * (t - last[0])
        }
    }
}

/// The largest change of a profile's rate at one of its corners (per s), for the blend that
/// bounds its acceleration ([`profile_blended`]); 0 for profiles that are not piecewise linear
/// (a sine is smooth; a step is a jump the law's speed limit spreads).
pub fn profile_corner_rate_change(p: &Profile) -> f64 {
    match p {
        Profile::Ramp {
            from,
            to,
            duration_s,
            ..
        } if *duration_s > 0.0 => ((to - from) / duration_s).abs(),
        Profile::Series(pts) => {
            // Held before the first point and after the last: rate 0 at both ends.
            let (mut prev, mut worst) = (0.0, 0.0f64);
            for w in pts.windows(2) {
                let slope = (w[1][1] - w[0][1]) / (w[1][0] - w[0][0]);
                worst = worst.max((slope - prev).abs());
                prev = slope;
            }
            worst.max(prev.abs())
        }
        _ => 0.0,
    }
}

/// A piecewise-linear profile with its corners rounded so that its rate changes at no more
/// than `accel` (per s²): the profile's average over the last `b = Δv_max / accel` seconds
/// (a causal box filter: straight stretches are followed exactly, `b/2` late; each corner
/// becomes a parabola of acceleration `Δv / b`). Returns the value and its rate at `t`. With
/// `accel` ≤ 0 or a profile without corners, the profile itself.
pub fn profile_blended(p: &Profile, t: f64, accel: f64) -> (f64, f64) {
    profile_blended_over(p, t, profile_blend_s(p, accel))
}

/// The blend of [`profile_blended`] (s): `Δv_max / accel`, at most
/// [`MAX_REFERENCE_BLEND_S`]; 0 (no blend) when `accel` ≤ 0 or the profile has no corners.
pub fn profile_blend_s(p: &Profile, accel: f64) -> f64 {
    let dv = profile_corner_rate_change(p);
    if accel > 0.0 && dv > 0.0 && dv.is_finite() {
        (dv / accel).min(MAX_REFERENCE_BLEND_S)
    } else {
        0.0
    }
}

/// [`profile_blended`] with its blend `b` (s) given (computed once per task,
/// [`profile_blend_s`]); `b` ≤ 0: the profile itself.
pub fn profile_blended_over(p: &Profile, t: f64, b: f64) -> (f64, f64) {
    if b.is_nan() || b <= 0.0 {
        return (profile_value(p, t), profile_rate(p, t));
    }
    let value = (profile_integral(p, t) - profile_integral(p, t - b)) / b;
    let rate = (profile_value(p, t) - profile_value(p, t - b)) / b;
    (value, rate)
}

/// The longest corner blend of a position reference (s).
pub const MAX_REFERENCE_BLEND_S: f64 = 0.25;

/// Acceleration bound of the arm's position references (m/s² along x, y, z of {C}; rad/s²
/// about them): a task's ramps and piecewise-linear series start, turn and stop with their
/// corners blended to it ([`profile_blended`]). As a step, a 20 mm/s ramp's start and end
/// asked the joints for more acceleration than robot-io allows (issue 21: the table press's
/// only limited replies).
pub const POSITION_REF_ACCEL: [f64; 2] = [1.0, 2.0];

/// Rate of change of a profile at `t` (per s); steps contribute nothing (no impulse).
pub fn profile_rate(p: &Profile, t: f64) -> f64 {
    match p {
        Profile::Constant(_) | Profile::Step { .. } => 0.0,
        Profile::Ramp {
            from,
            to,
            start_s,
            duration_s,
        } => {
            if *duration_s > 0.0 && t > *start_s && t < start_s + duration_s {
                (to - from) / duration_s
            } else {
                0.0
            }
        }
        Profile::Sine {
            amplitude,
            freq_hz,
            phase_rad,
            ..
        } => {
            let w = std::f64::consts::TAU * freq_hz;
            amplitude * w * (w * t + phase_rad).cos()
        }
        Profile::Series(pts) => {
            for w in pts.windows(2) {
                if t >= w[0][0] && t < w[1][0] {
                    return (w[1][1] - w[0][1]) / (w[1][0] - w[0][0]);
                }
            }
            0.0
        }
    }
}
