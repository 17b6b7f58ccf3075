//! One joint reference step within speed, acceleration and position-braking limits. Pure: the
//! robot time a step spans is a parameter.
//!
//! Shared by robot-io's supervisor (the last word on what reaches the robot) and by the
//! kinematics servo (so that the stream it sends is already within the limits robot-io checks,
//! and robot-io replies it unchanged: a servo chasing an IK solution near a wrist singularity at
//! the joint speed limits used to ask for speed changes of up to the full speed limit in one
//! cycle, which robot-io had to limit — 1628 of the demo's payload-identification cycles, 1150
//! of them one joint at a time).
//!
//! The step from `prev` towards `target` over `dt`:
//! - no joint faster than its speed limit;
//! - no joint's velocity changes by more than its acceleration limit × [`dv_span`] (velocity
//!   = step / dt, each step with its own dt);
//! - braking for the position limits: a joint never moves faster towards a limit than it can
//!   stop from within its acceleration limit (v ≤ −a·dt + √((a·dt)² + 2·a·d) for distance d);
//! - braking for the target: speed bounded by the target's own speed plus the braking speed for
//!   the remaining distance, so an accelerating-limited reference does not overshoot a target
//!   that jumped and stayed;
//! - one common scale of the desired velocity for all joints when one exists (the joints stay
//!   on the line to the target, in step); only when none does is each joint limited on its own
//!   ([`LimitedStep::per_joint`]);
//! - a step within every limit lands exactly on the target ([`LimitedStep::limited`] false);
//! - a **departure ramp** ([`StepLimiter::arm_departure_ramp`]): after a hold that interrupted
//!   a motion, the next departure from rest raises each joint's acceleration bound from 0 at
//!   its jerk limit (`a_j / ramp_s`) over `ramp_s` of robot time, so the reference leaves with
//!   bounded jerk, not with a step of the full acceleration limit (a joint stopped at once by
//!   an outage, then asked to chase its plan, used to leave at `a_max` on its first cycle).
//!   The ramp bounds speeding up only; slowing down keeps the full acceleration limit (braking
//!   keeps its priority). A departure whose stream is itself within limits and ramps no harder
//!   is not limited by it.

use crate::JointLimits;

/// Joints.
const AXES: usize = 6;

/// A desired joint speed at or below this (rad/s) counts as zero for the common scale.
const NEGLIGIBLE_SPEED_RAD_S: f64 = 1e-12;
/// Bound of the common scale (its limits come from joints that move; this only keeps it
/// finite).
const MAX_SCALE: f64 = 1e6;

/// Default joint acceleration limits for the IRB 120 (rad/s²): 1000, 1000, 1000, 1280, 1280,
/// 1680 °/s², i.e. each joint reaches its data-sheet speed (250, 250, 250, 320, 320, 420 °/s)
/// in 0.25 s. ABB does not publish joint accelerations for the IRB 120; this is a conservative
/// choice (the robot's own motion control accelerates harder), to be raised after measuring.
pub fn irb120_max_accel() -> [f64; AXES] {
    [1000.0, 1000.0, 1000.0, 1280.0, 1280.0, 1680.0].map(f64::to_radians)
}

/// The time a velocity change between a step of `dt0` and the next of `dt` spans (s): the
/// time between their midpoints, (dt₀ + dt)/2, when the next step is the shorter one (after
/// a lost datagram's 8 ms step, the plan's own acceleration would read 1.5× too high against
/// a·4 ms and the reference would fall behind it), else `dt` (the braking bound for the
/// position limits is built on a·dt). `dt0` = 0: no step before (from rest).
pub fn dv_span(dt0: f64, dt: f64) -> f64 {
    if dt0 > 0.0 {
        dt.max(0.5 * (dt0 + dt))
    } else {
        dt
    }
}

/// The result of one [`StepLimiter::step`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitedStep {
    /// The next reference (rad).
    pub q: [f64; AXES],
    /// Its velocity over the step (rad/s).
    pub v: [f64; AXES],
    /// The step differs from the target (some limit acted).
    pub limited: bool,
    /// No common scale fitted: each joint was limited on its own.
    pub per_joint: bool,
    /// When limited: the bound that acted, on the joint whose desired velocity was furthest
    /// outside it (a diagnostic: which limit a stream runs into).
    pub binding: Option<Binding>,
}

/// Which bound a limited step ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LimitKind {
    /// The joint speed limit.
    Speed,
    /// The acceleration limit (a speed change over the step beyond a·dt).
    Accel,
    /// The departure ramp's reduced acceleration after a hold.
    Ramp,
    /// Braking in time for a joint position limit.
    PositionLimit,
    /// Braking in time for a target that stopped (the target's own speed plus the braking
    /// speed for the distance left).
    TargetBrake,
    /// No time passed (a step over dt ≤ 0 or not finite) or rounding.
    Other,
}

impl LimitKind {
    /// The name used in status JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Speed => "speed",
            Self::Accel => "accel",
            Self::Ramp => "ramp",
            Self::PositionLimit => "position_limit",
            Self::TargetBrake => "target_brake",
            Self::Other => "other",
        }
    }
}

/// The bound behind a limited step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Binding {
    pub kind: LimitKind,
    /// The joint (0-based).
    pub joint: usize,
    /// That joint's desired velocity (target − previous) / dt (rad/s).
    pub v_des: f64,
    /// The velocity it got (rad/s).
    pub v: f64,
    /// Its velocity on the step before (rad/s).
    pub v_prev: f64,
}

/// The velocity state of a reference stream and its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct StepLimiter {
    limits: JointLimits,
    /// rad/s² per joint; not finite or ≤ 0: no acceleration limit on that joint.
    max_accel: [f64; AXES],
    /// Velocity of the last step (rad/s); zero at rest.
    last_v: [f64; AXES],
    /// Robot time the last step spanned (s); 0 at rest.
    last_dt: f64,
    /// Target of the last step (for the target's own speed).
    last_target: Option<[f64; AXES]>,
    /// Length of the departure ramp (s of robot time); not finite or ≤ 0: no ramp.
    ramp_s: f64,
    /// A departure ramp is owed: the next departure from rest ramps.
    ramp_armed: bool,
    /// Robot time into the running departure ramp (s); `None`: none running.
    ramp_t: Option<f64>,
}

fn all_finite(q: &[f64; AXES]) -> bool {
    q.iter().all(|v| v.is_finite())
}

impl StepLimiter {
    /// At rest.
    pub fn new(limits: JointLimits, max_accel: [f64; AXES]) -> Self {
        Self {
            limits,
            max_accel,
            last_v: [0.0; AXES],
            last_dt: 0.0,
            last_target: None,
            ramp_s: 0.0,
            ramp_armed: false,
            ramp_t: None,
        }
    }

    /// With a departure ramp of `ramp_s` seconds of robot time (see the module doc); not
    /// finite or ≤ 0: none.
    pub fn with_departure_ramp(mut self, ramp_s: f64) -> Self {
        self.ramp_s = ramp_s;
        self
    }

    /// The next departure from rest ramps its acceleration up (a hold interrupted the motion).
    /// Without a ramp length configured, nothing changes.
    pub fn arm_departure_ramp(&mut self) {
        self.ramp_armed = self.ramp_s.is_finite() && self.ramp_s > 0.0;
    }

    /// A departure ramp is owed or running.
    pub fn ramping(&self) -> bool {
        self.ramp_armed || self.ramp_t.is_some()
    }

    /// The next step starts at rest (after a hold, a resync, a new motion).
    pub fn rest(&mut self) {
        self.last_v = [0.0; AXES];
        self.last_dt = 0.0;
        self.last_target = None;
        // A ramp cut short by another hold is owed again on the next departure.
        if self.ramp_t.take().is_some() {
            self.ramp_armed = true;
        }
    }

    /// Records that the step actually made from `prev` was to `q` over `dt` (a caller that
    /// changed [`Self::step`]'s result, e.g. held it back on another bound).
    pub fn taken(&mut self, prev: [f64; AXES], q: [f64; AXES], dt: f64) {
        if dt.is_finite() && dt > 0.0 {
            for j in 0..AXES {
                self.last_v[j] = (q[j] - prev[j]) / dt;
            }
            // The next step's velocity change spans from this step's midpoint.
            self.last_dt = dt;
        }
    }

    /// Velocity of the last step (rad/s).
    pub fn last_v(&self) -> [f64; AXES] {
        self.last_v
    }

    pub fn max_accel(&self) -> [f64; AXES] {
        self.max_accel
    }

    /// The next reference from `prev` towards `target` over `dt` (s) within the limits; the
    /// velocity state advances. `dt` not finite or ≤ 0: no time passes, no motion, the state
    /// is kept.
    pub fn step(&mut self, prev: [f64; AXES], target: [f64; AXES], dt: f64) -> LimitedStep {
        if !(dt.is_finite() && dt > 0.0) {
            return LimitedStep {
                q: prev,
                v: self.last_v,
                limited: prev != target,
                per_joint: false,
                binding: (prev != target).then_some(Binding {
                    kind: LimitKind::Other,
                    joint: 0,
                    v_des: f64::NAN,
                    v: 0.0,
                    v_prev: self.last_v[0],
                }),
            };
        }
        let l = &self.limits;
        let dt_mid = dv_span(self.last_dt, dt);
        // The departure ramp: robot time at the end of this step, from the departure.
        let at_rest = self.last_v.iter().all(|v| *v == 0.0);
        if self.ramp_armed && at_rest && prev != target {
            self.ramp_armed = false;
            self.ramp_t = Some(0.0);
        }
        let ramp_at = self.ramp_t.map(|t| t + dt);
        let mut lo = [0.0; AXES];
        let mut hi = [0.0; AXES];
        let mut cap_t = [0.0; AXES];
        let mut v_des = [0.0; AXES];
        // The acceleration window and the position braking, per joint (for the diagnostic).
        let mut acc = [(f64::NEG_INFINITY, f64::INFINITY); AXES];
        let mut pos = [(f64::NEG_INFINITY, f64::INFINITY); AXES];
        for j in 0..AXES {
            let a = self.max_accel[j];
            let vmax = l.max_speed[j];
            let e = target[j] - prev[j];
            v_des[j] = e / dt;
            if !(a.is_finite() && a > 0.0) {
                // No acceleration limit: speed limits only (position limits: the final clamp).
                lo[j] = -vmax;
                hi[j] = vmax;
                cap_t[j] = f64::INFINITY;
                continue;
            }
            // The speed from which braking at `a` stops within `d` after one cycle at it
            // (`brake::braking_speed`, without the cancellation that made it 0 for a tiny d: a
            // joint off its target by 1e-21 rad of IK noise capped the whole step to nearly
            // nothing through the common scale, found as a stalled reference in contact).
            let brake = |d: f64| crate::brake::braking_speed(d, a, dt);
            let v0 = self.last_v[j];
            let dv = a * dt_mid;
            // Speeding up: within the departure ramp's acceleration (a · t / ramp_s, the
            // jerk limit a / ramp_s) while it runs; slowing down: the full limit.
            let dv_up = match ramp_at {
                Some(t) => a * (t / self.ramp_s).min(1.0) * dt_mid,
                None => dv,
            };
            let (dv_neg, dv_pos) = if v0 >= 0.0 {
                (dv.min(v0 + dv_up), dv_up)
            } else {
                (dv_up, dv.min(-v0 + dv_up))
            };
            acc[j] = (v0 - dv_neg, v0 + dv_pos);
            pos[j] = (-brake(prev[j] - l.min[j]), brake(l.max[j] - prev[j]));
            lo[j] = (-vmax).max(acc[j].0).max(pos[j].0);
            hi[j] = vmax.min(acc[j].1).min(pos[j].1);
            if lo[j] > hi[j] {
                // Only by rounding (the braking invariant keeps the window non-empty): brake.
                let v = crate::brake::brake_axis(v0, a * dt);
                lo[j] = v;
                hi[j] = v;
            }
            let v_target = self.last_target.map_or(0.0, |lt| (target[j] - lt[j]) / dt);
            // Landing on the target is always allowed at a speed the next step can brake to
            // zero whatever its length (dv_span ≥ dt / 2): without it the first step of every
            // stream from rest (no target speed known yet: taken as 0) was cut short by
            // rounding, brake(d) < d / dt — a limited reply at each motion's start.
            let land = (e.abs() / dt).min(0.5 * a * dt);
            cap_t[j] = (v_target.abs() + brake(e.abs())).max(land);
        }
        // The common scale s of the desired velocity nearest 1 that satisfies every joint:
        // below 1 the whole path slows down; above 1 it goes faster than this cycle's target
        // asks (a reference that leads its plan and cannot brake to it within the
        // acceleration limits); below 0 it carries on past a target it overshot while it
        // brakes. The joints stay in step on the line to the target either way.
        // The limits (speed, acceleration, position braking) and the braking for the target
        // (`cap_t`) all bound s. (Applying the target braking only where it left a scale was
        // tried: the reference then arrived harder and the tool rang for over 0.4 s after a
        // 120 °/s wrist move — `hardware.rs::payload_identification_and_gravity_compensation`.)
        let (mut s_lo, mut s_hi) = (f64::NEG_INFINITY, f64::INFINITY);
        for j in 0..AXES {
            let d = v_des[j];
            // A joint asked to move by rounding noise only (1e-320 rad was seen) is a joint
            // asked to stay: dividing by it would make the scale infinite.
            if d.abs() <= NEGLIGIBLE_SPEED_RAD_S {
                if lo[j] > 0.0 || hi[j] < 0.0 {
                    s_hi = f64::NEG_INFINITY;
                }
                continue;
            }
            let (a, b) = (lo[j] / d, hi[j] / d);
            let cap = cap_t[j] / d.abs();
            s_lo = s_lo.max(a.min(b)).max(-cap);
            s_hi = s_hi.min(a.max(b)).min(cap);
        }
        let mut v = [0.0; AXES];
        let common = s_lo <= s_hi;
        if common {
            // Finite: a bound of ±∞ only remains when no joint moves.
            let sc = 1.0f64.clamp(s_lo, s_hi).clamp(-MAX_SCALE, MAX_SCALE);
            for j in 0..AXES {
                v[j] = (sc * v_des[j]).clamp(lo[j], hi[j]);
            }
        }
        let per_joint = !common || !all_finite(&v);
        if per_joint {
            for j in 0..AXES {
                v[j] = v_des[j].clamp(-cap_t[j], cap_t[j]).clamp(lo[j], hi[j]);
            }
        }
        let mut q = prev;
        for j in 0..AXES {
            // A step taken whole lands exactly on the target (no rounding through v·dt).
            let next = if v[j] == v_des[j] {
                target[j]
            } else {
                prev[j] + v[j] * dt
            };
            // Inside the limits, or (a joint outside them, e.g. measured there after a reset)
            // never further out than where it starts.
            q[j] = next.clamp(l.min[j].min(prev[j]), l.max[j].max(prev[j]));
            v[j] = (q[j] - prev[j]) / dt;
        }
        let limited = q != target;
        let binding = limited.then(|| {
            // The joint whose desired velocity lies furthest outside its window, relative to
            // its acceleration step (a·dt), and the first bound it breaks in this order.
            let mut worst = (0usize, f64::NEG_INFINITY);
            for j in 0..AXES {
                let d = v_des[j];
                let over = (d - hi[j]).max(lo[j] - d).max(d.abs() - cap_t[j]);
                let scale = (self.max_accel[j] * dt).max(1e-9);
                if over / scale > worst.1 {
                    worst = (j, over / scale);
                }
            }
            if worst.1 <= 0.0 {
                // Inside every window (e.g. the final position clamp): the joint that moved
                // furthest off its target.
                for j in 0..AXES {
                    let off = (target[j] - q[j]).abs();
                    if off > worst.1 {
                        worst = (j, off);
                    }
                }
            }
            let j = worst.0;
            let d = v_des[j];
            let vmax = l.max_speed[j];
            let kind = if d.abs() > vmax {
                LimitKind::Speed
            } else if d < acc[j].0 || d > acc[j].1 {
                if ramp_at.is_some() {
                    LimitKind::Ramp
                } else {
                    LimitKind::Accel
                }
            } else if d < pos[j].0 || d > pos[j].1 {
                LimitKind::PositionLimit
            } else if d.abs() > cap_t[j] {
                LimitKind::TargetBrake
            } else {
                LimitKind::Other
            };
            Binding {
                kind,
                joint: j,
                v_des: d,
                v: v[j],
                v_prev: self.last_v[j],
            }
        });
        self.last_v = v;
        self.last_dt = dt;
        self.last_target = Some(target);
        self.ramp_t = ramp_at.filter(|t| *t < self.ramp_s);
        LimitedStep {
            q,
            v,
            limited,
            per_joint,
            binding,
        }
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;

    fn lim() -> StepLimiter {
        StepLimiter::new(JointLimits::irb120(), irb120_max_accel())
    }

    #[test]
    fn a_step_within_the_limits_lands_on_the_target() {
        let mut l = lim();
        let a = irb120_max_accel();
        let dt = 0.004;
        // Accelerate every joint at half its limit from rest: never limited. (The stream
        // starts with its first point: a target with no speed of its own is one to stop at.)
        let mut q = [0.0; 6];
        assert!(!l.step(q, q, dt).limited);
        for k in 1..50 {
            let t = k as f64 * dt;
            let mut target = [0.0; 6];
            for j in 0..6 {
                target[j] = 0.25 * a[j] * t * t;
            }
            let r = l.step(q, target, dt);
            assert!(!r.limited, "cycle {k}: {r:?}");
            assert_eq!(r.q, target);
            q = r.q;
        }
    }

    /// A stream that leaves rest already moving (its first point one cycle into a
    /// jerk-limited plan, as control's playback and joint moves send it) is replied unchanged
    /// from its first step. Before, the first step of every stream was cut short by rounding
    /// (no target speed known yet, and brake(d) < d / dt): one limited reply per motion start.
    #[test]
    fn a_stream_leaving_rest_is_not_limited_on_its_first_step() {
        let a = irb120_max_accel();
        let dt = 0.004;
        let t_jerk = 0.08;
        for scale in [0.05, 0.5, 0.9] {
            let mut l = lim();
            let mut q = [0.0; 6];
            for k in 1..=20 {
                let t = k as f64 * dt;
                let target: [f64; 6] =
                    std::array::from_fn(|j| scale * a[j] / t_jerk * t.powi(3) / 6.0);
                let r = l.step(q, target, dt);
                assert!(!r.limited, "scale {scale}, cycle {k}: {r:?}");
                assert_eq!(r.binding, None);
                q = r.q;
            }
        }
    }

    /// A limited step names the bound that acted and the joint.
    #[test]
    fn a_limited_step_names_its_bound_and_joint() {
        let a = irb120_max_accel();
        let vmax = JointLimits::irb120().max_speed;
        let dt = 0.004;
        // Moving A3 down at a steady 0.1 rad/s, then a command that reverses it in one step.
        let mut l = lim();
        let mut q = [0.0; 6];
        for _ in 0..10 {
            let mut t = q;
            t[2] -= 0.1 * dt;
            q = l.step(q, t, dt).q;
        }
        let mut t = q;
        t[2] += 0.1 * dt;
        let r = l.step(q, t, dt);
        let b = r.binding.expect("limited");
        assert_eq!((b.kind, b.joint), (LimitKind::Accel, 2), "{r:?}");
        assert!((b.v_des - 0.1).abs() < 1e-9 && (b.v_prev + 0.1).abs() < 1e-9);
        assert!((b.v - b.v_prev).abs() <= a[2] * dt * (1.0 + 1e-9));
        // A target beyond A6's speed limit, reached only through the acceleration bound: at
        // full speed the speed limit binds.
        let mut l = lim();
        let mut q = [0.0; 6];
        let mut last = None;
        for _ in 0..400 {
            let mut t = q;
            t[5] += 2.0 * vmax[5] * dt;
            let r = l.step(q, t, dt);
            last = r.binding;
            q = r.q;
        }
        assert_eq!(last.map(|b| (b.kind, b.joint)), Some((LimitKind::Speed, 5)));
    }

    #[test]
    fn a_jump_is_taken_within_the_acceleration_limit_with_the_joints_in_step() {
        let mut l = lim();
        let a = irb120_max_accel();
        let dt = 0.004;
        let target = [0.2, -0.1, 0.05, 0.3, -0.2, 0.4];
        let mut q = [0.0; 6];
        let mut v_prev = [0.0; 6];
        for _ in 0..400 {
            let r = l.step(q, target, dt);
            assert!(!r.per_joint);
            for j in 0..6 {
                assert!(
                    (r.v[j] - v_prev[j]).abs() <= a[j] * dt * (1.0 + 1e-9),
                    "{r:?}"
                );
                // On the line from 0 to the target: q_j / target_j equal for every joint.
                let s0 = r.q[0] / target[0];
                assert!((r.q[j] / target[j] - s0).abs() < 1e-9, "{r:?}");
            }
            v_prev = r.v;
            q = r.q;
        }
        assert_eq!(q, target);
    }

    #[test]
    fn no_time_no_motion() {
        let mut l = lim();
        let r = l.step([0.0; 6], [0.1; 6], 0.0);
        assert_eq!(r.q, [0.0; 6]);
        assert!(r.limited);
        let r = l.step([0.0; 6], [0.0; 6], f64::NAN);
        assert!(!r.limited);
    }
}
