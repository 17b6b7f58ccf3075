//! Playback trajectories (pure: no clocks, time is a parameter).
//!
//! # Joint mode ([`JointTrajectory`])
//! Point-to-point through joint waypoints (rad), stopping at each. Every segment
//! `q(t) = q₀ + Δ·s(t)`, `Δ = q₁ − q₀`, follows one scalar rest-to-rest profile `s: 0 → 1`
//! shared by all joints, so all joints start and end together and the path in joint space is
//! the straight line from `q₀` to `q₁` (**synchronised**). Joint `j` then moves with
//! `q̇_j = Δ_j·ṡ` and `q̈_j = Δ_j·s̈`, so the joint limits become limits on the scalar profile:
//!
//! ```text
//! ṡ ≤ V = min_j v_j / |Δ_j|,      |s̈| ≤ A = min_j a_j / |Δ_j|     (over joints with Δ_j ≠ 0)
//! ```
//!
//! and the time-optimal profile under these two bounds is the trapezoid (accelerate at `A`,
//! cruise at `V`, decelerate at `A`), or the triangle when the move is too short to reach `V`
//! (`V² > A`). Its duration `T = 1/V + V/A` (trapezoid) or `T = 2/√A` (triangle) is the
//! minimum over all synchronised straight-line profiles: the joint attaining the minimum in
//! `V` cruises at exactly its speed limit, the one attaining `A` accelerates at exactly its
//! acceleration limit (see [`ScalarProfile`]).
//!
//! Plans use the **double-S** refinement of it by default ([`PlanOptions::jerk_time_s`] =
//! [`JERK_TIME_S`]): the acceleration ramps up and down at `A / JERK_TIME_S` instead of
//! stepping, so every segment leaves rest and arrives with bounded jerk (`T` grows by
//! `JERK_TIME_S` on a move that reaches `A`). A motion that starts after a hold (from the
//! measured pose) thus never asks robot-io's departure ramp for more than it allows.
//!
//! # Limits and the safety factor
//! The profile uses `v_j = speed_scale · SPEED_SAFETY · v_max_j` and
//! `a_j = speed_scale · ACCEL_SAFETY · a_max_j` ([`SPEED_SAFETY`] = 0.9, [`ACCEL_SAFETY`] =
//! 0.8, both overridable in [`PlanOptions`]). Why: robot-io checks the references on its own
//! clock, per robot cycle of length `Δt_k` (EGM: ≈ 4 ms): `v_k = (q_k − q_{k−1})/Δt_k ≤ v_max`
//! and `|v_k − v_{k−1}| ≤ a_max·Δt_k`. For references sampled on the same cycle times, the
//! first is bounded by `max|q̇|` (mean value theorem), but the second is bounded only by
//! `max|q̈|·(Δt_k + Δt_{k−1})/(2·Δt_k)`: with cycle lengths jittering in 4 ± 0.5 ms that is up to
//! `max|q̈|·8/7 = 1.143·max|q̈|`, so the acceleration needs a factor ≤ 0.875; 0.8 leaves room
//! for the pause/resume time scaling's discretisation. The speed factor 0.9 covers a control
//! clock that disagrees with robot-io's cycle length by up to 10 % (0.4 ms of 4 ms). Both are
//! tested by sampling at 4 ms and at 4 ± 0.5 ms and checking robot-io's first and second
//! differences.
//!
//! The speed scale multiplies both speed and acceleration limits (so a 0.2 approach
//! accelerates gently too).
//!
//! # Cartesian mode ([`CartesianTrajectory`])
//! Straight TCP lines between poses, orientation along the geodesic (slerp), one double-S
//! (jerk-limited) profile in the path parameter bounded by TCP linear and angular speed and acceleration.
//! [`CartesianTrajectory::fit_joint_limits`] samples the joints along it through a caller's
//! pose → joints map (the IK) and stretches any segment whose joint speeds or accelerations
//! would exceed the limits.
//!
//! # Pause, resume, stop ([`Playback`])
//! Time scaling: the trajectory is played at path time `τ` with `τ̇ = r`, `r ∈ [0, 1]`. Then
//! `q̇ = q'(τ)·r` and `q̈ = q''(τ)·r² + q'(τ)·ṙ`; pausing/stopping drives `r` to 0 and resuming
//! back to 1 with the fastest `ṙ` that keeps `|q''_j r² + q'_j ṙ| ≤ ACCEL_SAFETY·a_max_j` for
//! every joint, so the path is kept and no joint exceeds its acceleration limit.

// Index loops over the 6 joints mirror the math (q_j, v_j, a_j) more clearly than zips.
#![allow(clippy::needless_range_loop)]

use kinematics::{JointLimits, Joints};
use nalgebra::{Isometry3, Translation3, UnitQuaternion};

/// Fraction of each joint's speed limit a trajectory plans with (see the module docs).
pub const SPEED_SAFETY: f64 = 0.9;
/// Fraction of each joint's acceleration limit a trajectory plans with (see the module docs).
pub const ACCEL_SAFETY: f64 = 0.8;
/// Default length of a planned profile's jerk phases (s): each acceleration phase ramps the
/// acceleration up and down over this time, so a joint's jerk stays within
/// `accel_safety · a_max / JERK_TIME_S` — at or below robot-io's departure ramp after a hold
/// (`robot_io::supervisor::DEFAULT_RESUME_RAMP_S`, the same 0.08 s at the full limit), which
/// therefore replies a plan leaving rest unchanged. Costs one `JERK_TIME_S` per segment.
pub const JERK_TIME_S: f64 = 0.08;
/// Default speed scale of the approach segment from the current joints to the first waypoint.
pub const APPROACH_SPEED_SCALE: f64 = 0.2;
/// Default tolerance of [`approach_needed`] (rad): 0.1°.
pub const APPROACH_TOL_RAD: f64 = 0.001_745_329_251_994_329_5;

const AXES: usize = 6;
/// A joint step larger than this (rad) in one sample of a Cartesian line is a configuration
/// change, not a fast move.
const JUMP_RAD: f64 = 0.5;

/// Planning errors. Every message names what is wrong and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrajError {
    #[error("empty program: no waypoints")]
    Empty,
    #[error("{what}: must be finite (got {value})")]
    NonFinite { what: String, value: f64 },
    #[error(
        "waypoint {waypoint}, joint {} (A{}): {value:.6} rad ({:.3}°) is outside the limits \
         [{min:.6}, {max:.6}] rad ([{:.3}°, {:.3}°])",
        joint, joint + 1, value.to_degrees(), min.to_degrees(), max.to_degrees()
    )]
    OutsideLimits {
        waypoint: usize,
        joint: usize,
        value: f64,
        min: f64,
        max: f64,
    },
    #[error(
        "start joint {joint} (A{}): {value:.6} rad is outside the limits [{min:.6}, {max:.6}] rad",
        joint + 1
    )]
    StartOutsideLimits {
        joint: usize,
        value: f64,
        min: f64,
        max: f64,
    },
    #[error("{what}: must be > 0 (got {value})")]
    NonPositiveLimit { what: String, value: f64 },
    #[error("limits joint {joint}: min ({min}) must be < max ({max})")]
    EmptyRange { joint: usize, min: f64, max: f64 },
    #[error("{what}: must be in (0, 1] (got {value})")]
    BadScale { what: String, value: f64 },
    #[error("{what}: must be finite and >= 0 (got {value})")]
    Negative { what: String, value: f64 },
    #[error("segment {segment}: no joint solution at t = {t_s:.4} s of the Cartesian line")]
    IkFailed { segment: usize, t_s: f64 },
    #[error(
        "segment {segment}: joint {joint} jumps {jump_rad:.4} rad within one sample along the \
         Cartesian line (configuration change / singularity); use a joint move"
    )]
    JointJump {
        segment: usize,
        joint: usize,
        jump_rad: f64,
    },
}

fn finite(what: impl FnOnce() -> String, v: f64) -> Result<(), TrajError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(TrajError::NonFinite {
            what: what(),
            value: v,
        })
    }
}

fn positive(what: impl Fn() -> String, v: f64) -> Result<(), TrajError> {
    finite(&what, v)?;
    if v > 0.0 {
        Ok(())
    } else {
        Err(TrajError::NonPositiveLimit {
            what: what(),
            value: v,
        })
    }
}

fn non_negative(what: impl Fn() -> String, v: f64) -> Result<(), TrajError> {
    finite(&what, v)?;
    if v >= 0.0 {
        Ok(())
    } else {
        Err(TrajError::NonPositiveLimit {
            what: what(),
            value: v,
        })
    }
}

fn unit_scale(what: impl Fn() -> String, v: f64) -> Result<(), TrajError> {
    if v.is_finite() && v > 0.0 && v <= 1.0 {
        Ok(())
    } else {
        Err(TrajError::BadScale {
            what: what(),
            value: v,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Scalar profile
// ---------------------------------------------------------------------------------------------

/// Rest-to-rest profile of a path parameter `s: 0 → 1` under `ṡ ≤ v`, `|s̈| ≤ a` and, for a
/// jerk-limited profile, `|s⃛| ≤ a / t_jerk`.
///
/// * Trapezoid ([`ScalarProfile::new`], time-optimal under `v`, `a`; `v² ≤ a`): accelerate for
///   `t_a = v/a`, cruise at `v`, decelerate for `t_a`; `T = 1/v + v/a`.
/// * Triangle (`v² > a`, the cruise speed is never reached): `t_a = 1/√a`, peak `a·t_a = √a`,
///   `T = 2·t_a`.
/// * Double S ([`ScalarProfile::jerk_limited`], time-optimal under `v`, `a` and the jerk
///   `j = a / t_jerk`): each acceleration phase ramps `s̈` up at `j` for `t_jerk`, holds it,
///   ramps it down; the acceleration limit or the cruise speed is not reached on short moves
///   (then `t_jerk` and the peaks shrink). A motion planned this way leaves rest, and arrives,
///   with bounded jerk: robot-io's departure ramp after a hold
///   (`robot_io::supervisor::DEFAULT_RESUME_RAMP_S`) replies it unchanged.
///
/// The deceleration phase is evaluated from the end (`s = 1 − s_acc(T − t)`), so `s(T) = 1`
/// exactly. A profile with `v` or `a` infinite (nothing to move) has `T = 0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalarProfile {
    /// Total duration `T` (s).
    pub duration: f64,
    /// Acceleration (= deceleration) phase length `t_a` (s), jerk phases included.
    pub t_accel: f64,
    /// Peak `ṡ` (1/s).
    pub v_peak: f64,
    /// Peak `|s̈|` (1/s²).
    pub accel: f64,
    /// Length of each jerk phase (s); 0: a trapezoid (acceleration steps).
    pub t_jerk: f64,
}

impl ScalarProfile {
    fn still() -> Self {
        Self {
            duration: 0.0,
            t_accel: 0.0,
            v_peak: 0.0,
            accel: 0.0,
            t_jerk: 0.0,
        }
    }

    /// The time-optimal trapezoid for `ṡ ≤ v`, `|s̈| ≤ a` (`v, a > 0`; infinite = no motion).
    pub fn new(v: f64, a: f64) -> Self {
        Self::jerk_limited(v, a, 0.0)
    }

    /// The time-optimal double-S profile for `ṡ ≤ v`, `|s̈| ≤ a`, `|s⃛| ≤ a / t_jerk` (s);
    /// `t_jerk` ≤ 0 or not finite: the trapezoid of [`Self::new`].
    pub fn jerk_limited(v: f64, a: f64, t_jerk: f64) -> Self {
        if !(v.is_finite() && a.is_finite()) || v <= 0.0 || a <= 0.0 {
            return Self::still();
        }
        if !(t_jerk.is_finite() && t_jerk > 0.0) {
            let (t_a, v_peak) = if v * v <= a {
                (v / a, v)
            } else {
                let t_a = (1.0 / a).sqrt();
                (t_a, a * t_a)
            };
            let duration = if v * v <= a { 1.0 / v + t_a } else { 2.0 * t_a };
            return Self {
                duration,
                t_accel: t_a,
                v_peak,
                accel: a,
                t_jerk: 0.0,
            };
        }
        let j = a / t_jerk;
        // Reaching v: with the acceleration limit (v·j ≥ a²) or without.
        let (mut tj, mut ta, mut a_lim) = if v * j >= a * a {
            (t_jerk, t_jerk + v / a, a)
        } else {
            let tj = (v / j).sqrt();
            (tj, 2.0 * tj, j * tj)
        };
        let mut v_lim = a_lim * (ta - tj);
        let mut tv = 1.0 / v - ta;
        if tv < 0.0 {
            // No cruise: the acceleration phase covers half the distance (v_lim·t_a = 1).
            tv = 0.0;
            tj = t_jerk;
            ta = 0.5 * (tj + (tj * tj + 4.0 / a).sqrt());
            a_lim = a;
            if ta < 2.0 * tj {
                // Nor the acceleration limit: jerk phases only (2·j·t_j³ = 1).
                tj = (0.5 / j).cbrt();
                ta = 2.0 * tj;
                a_lim = j * tj;
            }
            v_lim = a_lim * (ta - tj);
        }
        Self {
            duration: 2.0 * ta + tv,
            t_accel: ta,
            v_peak: v_lim,
            accel: a_lim,
            t_jerk: tj,
        }
    }

    /// The same path played `c` times slower (`c ≥ 1`): `s_c(t) = s(t / c)`.
    pub fn time_scaled(&self, c: f64) -> Self {
        Self {
            duration: self.duration * c,
            t_accel: self.t_accel * c,
            v_peak: self.v_peak / c,
            accel: self.accel / (c * c),
            t_jerk: self.t_jerk * c,
        }
    }

    /// True for a profile that never cruises (the cruise speed bound is not reached).
    pub fn is_triangular(&self) -> bool {
        self.duration > 0.0 && 2.0 * self.t_accel >= self.duration * (1.0 - 1e-12)
    }

    /// `(s, ṡ, s̈)` over the acceleration phase at `t ∈ [0, t_a]`.
    fn accel_phase(&self, t: f64) -> (f64, f64, f64) {
        let (ta, tj, a, vp) = (self.t_accel, self.t_jerk, self.accel, self.v_peak);
        if tj > 0.0 && t < tj {
            let j = a / tj;
            (j * t * t * t / 6.0, 0.5 * j * t * t, j * t)
        } else if t <= ta - tj {
            // Constant acceleration (for a trapezoid: the whole phase).
            (
                a / 6.0 * (3.0 * t * t - 3.0 * tj * t + tj * tj),
                a * (t - 0.5 * tj),
                a,
            )
        } else {
            let j = a / tj;
            let r = ta - t;
            (
                0.5 * vp * ta - vp * r + j * r * r * r / 6.0,
                vp - 0.5 * j * r * r,
                j * r,
            )
        }
    }

    /// `(s, ṡ, s̈)` at `t` (s from the start); `(0,0,0)` before, `(1,0,0)` from `T` on.
    pub fn eval(&self, t: f64) -> (f64, f64, f64) {
        let (tt, ta, vp) = (self.duration, self.t_accel, self.v_peak);
        if t.is_nan() || t <= 0.0 {
            return (0.0, 0.0, 0.0);
        }
        if t >= tt {
            return (1.0, 0.0, 0.0);
        }
        if t < ta {
            self.accel_phase(t)
        } else if t <= tt - ta {
            (0.5 * vp * ta + vp * (t - ta), vp, 0.0)
        } else {
            let (s, sd, sdd) = self.accel_phase(tt - t);
            (1.0 - s, sd, -sdd)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Joint mode
// ---------------------------------------------------------------------------------------------

/// Joint position, speed and acceleration limits used for planning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrajLimits {
    /// Lower position limit per joint (rad).
    pub min: Joints,
    /// Upper position limit per joint (rad).
    pub max: Joints,
    /// Speed limit per joint (rad/s, > 0).
    pub v_max: Joints,
    /// Acceleration limit per joint (rad/s², > 0).
    pub a_max: Joints,
}

impl TrajLimits {
    /// Position and speed limits from the arm's table plus acceleration limits.
    pub fn from_joint_limits(l: &JointLimits, a_max: Joints) -> Self {
        Self {
            min: l.min,
            max: l.max,
            v_max: l.max_speed,
            a_max,
        }
    }

    /// IRB 120 data-sheet limits and robot-io's default accelerations
    /// (`robot_io::supervisor::irb120_max_accel`: 1000, 1000, 1000, 1280, 1280, 1680 °/s²).
    pub fn irb120() -> Self {
        Self::from_joint_limits(
            &JointLimits::irb120(),
            [1000.0, 1000.0, 1000.0, 1280.0, 1280.0, 1680.0].map(f64::to_radians),
        )
    }

    /// Every value finite, ranges non-empty, speeds and accelerations > 0.
    pub fn validate(&self) -> Result<(), TrajError> {
        for j in 0..AXES {
            finite(|| format!("limits.min[{j}]"), self.min[j])?;
            finite(|| format!("limits.max[{j}]"), self.max[j])?;
            if self.min[j] >= self.max[j] {
                return Err(TrajError::EmptyRange {
                    joint: j,
                    min: self.min[j],
                    max: self.max[j],
                });
            }
            positive(|| format!("limits.v_max[{j}]"), self.v_max[j])?;
            positive(|| format!("limits.a_max[{j}]"), self.a_max[j])?;
        }
        Ok(())
    }
}

/// One waypoint of a joint program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JointWaypoint {
    /// Joints (rad).
    pub q: Joints,
    /// Speed scale of the segment *into* this waypoint, multiplied with
    /// [`PlanOptions::speed_scale`]; `None` = 1.
    pub speed_scale: Option<f64>,
    /// Time to stay at this waypoint after arriving (s, ≥ 0).
    pub dwell_s: f64,
}

impl JointWaypoint {
    pub fn new(q: Joints) -> Self {
        Self {
            q,
            speed_scale: None,
            dwell_s: 0.0,
        }
    }
}

impl From<Joints> for JointWaypoint {
    fn from(q: Joints) -> Self {
        Self::new(q)
    }
}

/// Planner options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanOptions {
    /// Program speed scale in (0, 1] (0.5 = half speed); scales speed and acceleration limits.
    pub speed_scale: f64,
    /// Speed scale of the approach segment (current joints → first waypoint), in (0, 1];
    /// applied *instead of* `speed_scale` (default [`APPROACH_SPEED_SCALE`]).
    pub approach_speed_scale: f64,
    /// Fraction of the speed limits planned with (default [`SPEED_SAFETY`]), in (0, 1].
    pub speed_safety: f64,
    /// Fraction of the acceleration limits planned with (default [`ACCEL_SAFETY`]), in (0, 1].
    pub accel_safety: f64,
    /// Length of each jerk phase (s, default [`JERK_TIME_S`]; 0 = trapezoids, acceleration
    /// steps).
    pub jerk_time_s: f64,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            speed_scale: 1.0,
            approach_speed_scale: APPROACH_SPEED_SCALE,
            speed_safety: SPEED_SAFETY,
            accel_safety: ACCEL_SAFETY,
            jerk_time_s: JERK_TIME_S,
        }
    }
}

/// What a segment does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// Reduced-speed move from the start joints to the first waypoint.
    Approach,
    /// Move from waypoint `waypoint − 1` to waypoint `waypoint`.
    Move,
    /// Standing still at waypoint `waypoint`.
    Dwell,
}

/// One synchronised segment `q(t) = from + (to − from)·s(t − t0)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JointSegment {
    pub kind: SegmentKind,
    /// Index of the program waypoint this segment ends at (or dwells at).
    pub waypoint: usize,
    pub from: Joints,
    pub to: Joints,
    /// Start time (s from the trajectory start).
    pub t0: f64,
    pub profile: ScalarProfile,
}

impl JointSegment {
    /// End time (s).
    pub fn t_end(&self) -> f64 {
        self.t0 + self.profile.duration
    }

    /// `(q, q̇, q̈)` at local time `t` (s from the segment start). The position is clamped
    /// between `from` and `to` per joint (no rounding overshoot past a waypoint at a limit) and
    /// is exactly `to` from the end on.
    pub fn eval(&self, t: f64) -> (Joints, Joints, Joints) {
        let (s, sd, sdd) = self.profile.eval(t);
        if s >= 1.0 {
            return (self.to, [0.0; AXES], [0.0; AXES]);
        }
        let mut q = [0.0; AXES];
        let mut qd = [0.0; AXES];
        let mut qdd = [0.0; AXES];
        for j in 0..AXES {
            let d = self.to[j] - self.from[j];
            let (lo, hi) = if d >= 0.0 {
                (self.from[j], self.to[j])
            } else {
                (self.to[j], self.from[j])
            };
            q[j] = (self.from[j] + d * s).clamp(lo, hi);
            qd[j] = d * sd;
            qdd[j] = d * sdd;
        }
        (q, qd, qdd)
    }
}

/// One sample of a trajectory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JointSample {
    /// Joints (rad).
    pub q: Joints,
    /// Joint speeds (rad/s).
    pub qd: Joints,
    /// Joint accelerations (rad/s²).
    pub qdd: Joints,
    /// Index into [`JointTrajectory::segments`].
    pub segment: usize,
    /// Time fraction done, 0..=1.
    pub progress: f64,
}

/// A planned point-to-point joint trajectory (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct JointTrajectory {
    start: Joints,
    waypoints: Vec<Joints>,
    segments: Vec<JointSegment>,
    arrivals: Vec<f64>,
    duration: f64,
    /// `accel_safety · a_max`, unscaled: the budget of the pause/resume time scaling.
    accel_budget: Joints,
    /// `speed_safety · v_max`, unscaled.
    speed_budget: Joints,
}

/// True when `q_now` is further than `tol_rad` from `first` on any joint (or either is not
/// finite): the program must then begin with a reduced-speed approach to its first waypoint.
pub fn approach_needed(q_now: &Joints, first: &Joints, tol_rad: f64) -> bool {
    (0..AXES).any(|j| {
        let d = (q_now[j] - first[j]).abs();
        d.is_nan() || d > tol_rad
    })
}

/// The synchronised time-optimal segment `from → to` with per-joint limits `v`, `a`.
fn sync_profile(from: &Joints, to: &Joints, v: &Joints, a: &Joints, t_jerk: f64) -> ScalarProfile {
    let mut vs = f64::INFINITY;
    let mut as_ = f64::INFINITY;
    for j in 0..AXES {
        let d = (to[j] - from[j]).abs();
        if d > 0.0 {
            vs = vs.min(v[j] / d);
            as_ = as_.min(a[j] / d);
        }
    }
    ScalarProfile::jerk_limited(vs, as_, t_jerk)
}

impl JointTrajectory {
    /// Plans through `waypoints`, stopping at each.
    ///
    /// `start`: the current joints. `None` = the trajectory starts at the first waypoint
    /// (the caller has checked [`approach_needed`]). `Some(q)` with `q` different from the
    /// first waypoint prepends an [`SegmentKind::Approach`] segment at
    /// [`PlanOptions::approach_speed_scale`], so a program never starts from far away at
    /// full speed.
    pub fn plan(
        waypoints: &[JointWaypoint],
        limits: &TrajLimits,
        opts: &PlanOptions,
        start: Option<&Joints>,
    ) -> Result<Self, TrajError> {
        limits.validate()?;
        unit_scale(|| "speed_scale".into(), opts.speed_scale)?;
        unit_scale(|| "approach_speed_scale".into(), opts.approach_speed_scale)?;
        unit_scale(|| "speed_safety".into(), opts.speed_safety)?;
        unit_scale(|| "accel_safety".into(), opts.accel_safety)?;
        non_negative(|| "jerk_time_s".into(), opts.jerk_time_s)?;
        if waypoints.is_empty() {
            return Err(TrajError::Empty);
        }
        for (i, w) in waypoints.iter().enumerate() {
            for j in 0..AXES {
                let v = w.q[j];
                finite(|| format!("waypoint {i}, joint {j}"), v)?;
                if v < limits.min[j] || v > limits.max[j] {
                    return Err(TrajError::OutsideLimits {
                        waypoint: i,
                        joint: j,
                        value: v,
                        min: limits.min[j],
                        max: limits.max[j],
                    });
                }
            }
            if let Some(s) = w.speed_scale {
                unit_scale(|| format!("waypoint {i}: speed_scale"), s)?;
            }
            if !(w.dwell_s.is_finite() && w.dwell_s >= 0.0) {
                return Err(TrajError::Negative {
                    what: format!("waypoint {i}: dwell_s"),
                    value: w.dwell_s,
                });
            }
        }
        if let Some(q) = start {
            for j in 0..AXES {
                finite(|| format!("start joint {j}"), q[j])?;
                if q[j] < limits.min[j] - 1e-9 || q[j] > limits.max[j] + 1e-9 {
                    return Err(TrajError::StartOutsideLimits {
                        joint: j,
                        value: q[j],
                        min: limits.min[j],
                        max: limits.max[j],
                    });
                }
            }
        }

        let speed_budget: Joints = std::array::from_fn(|j| opts.speed_safety * limits.v_max[j]);
        let accel_budget: Joints = std::array::from_fn(|j| opts.accel_safety * limits.a_max[j]);
        let scaled = |k: f64| -> (Joints, Joints) {
            (
                std::array::from_fn(|j| k * speed_budget[j]),
                std::array::from_fn(|j| k * accel_budget[j]),
            )
        };

        let mut segments = Vec::with_capacity(2 * waypoints.len() + 1);
        let mut arrivals = Vec::with_capacity(waypoints.len());
        let mut t = 0.0;
        let first = waypoints[0].q;
        let start_q = match start {
            Some(q) if *q != first => {
                let (v, a) = scaled(opts.approach_speed_scale);
                let profile = sync_profile(q, &first, &v, &a, opts.jerk_time_s);
                segments.push(JointSegment {
                    kind: SegmentKind::Approach,
                    waypoint: 0,
                    from: *q,
                    to: first,
                    t0: t,
                    profile,
                });
                t += profile.duration;
                *q
            }
            _ => first,
        };
        for (i, w) in waypoints.iter().enumerate() {
            if i > 0 {
                let k = opts.speed_scale * w.speed_scale.unwrap_or(1.0);
                let (v, a) = scaled(k);
                let from = waypoints[i - 1].q;
                let profile = sync_profile(&from, &w.q, &v, &a, opts.jerk_time_s);
                segments.push(JointSegment {
                    kind: SegmentKind::Move,
                    waypoint: i,
                    from,
                    to: w.q,
                    t0: t,
                    profile,
                });
                t += profile.duration;
            }
            arrivals.push(t);
            if w.dwell_s > 0.0 {
                segments.push(JointSegment {
                    kind: SegmentKind::Dwell,
                    waypoint: i,
                    from: w.q,
                    to: w.q,
                    t0: t,
                    profile: ScalarProfile {
                        duration: w.dwell_s,
                        ..ScalarProfile::still()
                    },
                });
                t += w.dwell_s;
            }
        }
        Ok(Self {
            start: start_q,
            waypoints: waypoints.iter().map(|w| w.q).collect(),
            segments,
            arrivals,
            duration: t,
            accel_budget,
            speed_budget,
        })
    }

    /// Convenience: plain joint waypoints, no start (the trajectory begins at the first).
    pub fn through(
        waypoints: &[Joints],
        limits: &TrajLimits,
        opts: &PlanOptions,
    ) -> Result<Self, TrajError> {
        let w: Vec<JointWaypoint> = waypoints.iter().copied().map(Into::into).collect();
        Self::plan(&w, limits, opts, None)
    }

    /// Total duration (s).
    pub fn duration(&self) -> f64 {
        self.duration
    }

    /// Start joints (the current joints when an approach was planned, else waypoint 0).
    pub fn start(&self) -> &Joints {
        &self.start
    }

    /// The program waypoints (rad).
    pub fn waypoints(&self) -> &[Joints] {
        &self.waypoints
    }

    /// Time at which each program waypoint is reached (s), non-decreasing.
    pub fn arrival_times(&self) -> &[f64] {
        &self.arrivals
    }

    /// The segments (approach, moves, dwells) in order.
    pub fn segments(&self) -> &[JointSegment] {
        &self.segments
    }

    /// True when the trajectory begins with an approach segment.
    pub fn has_approach(&self) -> bool {
        self.segments
            .first()
            .is_some_and(|s| s.kind == SegmentKind::Approach)
    }

    /// `accel_safety · a_max` per joint (rad/s², not speed-scaled).
    pub fn accel_budget(&self) -> &Joints {
        &self.accel_budget
    }

    /// `speed_safety · v_max` per joint (rad/s, not speed-scaled).
    pub fn speed_budget(&self) -> &Joints {
        &self.speed_budget
    }

    /// Index of the segment active at `t` (the last one from its end on; 0 for an empty list).
    pub fn segment_at(&self, t: f64) -> usize {
        let n = self.segments.partition_point(|s| s.t0 <= t);
        n.saturating_sub(1)
    }

    /// Time fraction done at `t`, 0..=1.
    pub fn progress(&self, t: f64) -> f64 {
        if self.duration <= 0.0 || t >= self.duration {
            1.0
        } else if t.is_nan() || t <= 0.0 {
            0.0
        } else {
            t / self.duration
        }
    }

    /// The state at `t` (s). Before 0: the start at rest; from [`Self::duration`] on: exactly
    /// the last waypoint at rest.
    pub fn sample(&self, t: f64) -> JointSample {
        let progress = self.progress(t);
        let last_wp = self.waypoints.last().copied().unwrap_or(self.start);
        if self.segments.is_empty() || t >= self.duration {
            return JointSample {
                q: last_wp,
                qd: [0.0; AXES],
                qdd: [0.0; AXES],
                segment: self.segments.len().saturating_sub(1),
                progress,
            };
        }
        if t.is_nan() || t <= 0.0 {
            return JointSample {
                q: self.start,
                qd: [0.0; AXES],
                qdd: [0.0; AXES],
                segment: 0,
                progress,
            };
        }
        let i = self.segment_at(t);
        let seg = &self.segments[i];
        let (q, qd, qdd) = seg.eval(t - seg.t0);
        JointSample {
            q,
            qd,
            qdd,
            segment: i,
            progress,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Playback (time scaling)
// ---------------------------------------------------------------------------------------------

/// Playback state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaybackState {
    Running,
    /// Slowing down to a pause (`r → 0`).
    Pausing,
    /// Standing on the path (`r = 0`); `resume` continues.
    Paused,
    /// Slowing down to a stop (`r → 0`), then `Stopped`.
    Stopping,
    /// Stopped on the path by `stop`; final.
    Stopped,
    /// The trajectory's end was reached; final.
    Done,
}

impl PlaybackState {
    /// True for `Stopped` and `Done`.
    pub fn is_final(self) -> bool {
        matches!(self, PlaybackState::Stopped | PlaybackState::Done)
    }
}

/// One playback step's output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlaybackSample {
    /// Reference joints (rad).
    pub q: Joints,
    /// Joint speeds `q'(τ)·r` (rad/s).
    pub qd: Joints,
    /// Joint accelerations `q''(τ)·r² + q'(τ)·ṙ` (rad/s²).
    pub qdd: Joints,
    pub state: PlaybackState,
    /// Path time τ (s).
    pub tau: f64,
    /// Rate `r = dτ/dt`.
    pub rate: f64,
    pub segment: usize,
    /// Path progress `τ / T`, 0..=1.
    pub progress: f64,
}

/// Plays a [`JointTrajectory`] with pause, resume and stop by time scaling (module docs).
#[derive(Debug, Clone)]
pub struct Playback {
    traj: JointTrajectory,
    tau: f64,
    rate: f64,
    rate_dot: f64,
    state: PlaybackState,
}

impl Playback {
    /// Starts `Running` at τ = 0 (the trajectory starts at rest, so `r = 1` at once).
    pub fn new(traj: JointTrajectory) -> Self {
        let state = if traj.duration() <= 0.0 {
            PlaybackState::Done
        } else {
            PlaybackState::Running
        };
        Self {
            traj,
            tau: 0.0,
            rate: 1.0,
            rate_dot: 0.0,
            state,
        }
    }

    pub fn trajectory(&self) -> &JointTrajectory {
        &self.traj
    }
    pub fn state(&self) -> PlaybackState {
        self.state
    }
    /// Path time τ (s).
    pub fn tau(&self) -> f64 {
        self.tau
    }
    /// Rate `r = dτ/dt` in [0, 1].
    pub fn rate(&self) -> f64 {
        self.rate
    }
    /// `τ / T`, 0..=1.
    pub fn progress(&self) -> f64 {
        self.traj.progress(self.tau)
    }

    /// Ramp to a pause (from `Running`); other states unchanged. Returns the new state.
    pub fn pause(&mut self) -> PlaybackState {
        if self.state == PlaybackState::Running {
            self.state = PlaybackState::Pausing;
        }
        self.state
    }

    /// Ramp back to full rate (from `Pausing` or `Paused`). Returns the new state.
    pub fn resume(&mut self) -> PlaybackState {
        if matches!(self.state, PlaybackState::Pausing | PlaybackState::Paused) {
            self.state = PlaybackState::Running;
        }
        self.state
    }

    /// Ramp to a stop (`Stopping`, then `Stopped`; at once from `Paused`). Returns the new state.
    pub fn stop(&mut self) -> PlaybackState {
        match self.state {
            PlaybackState::Running | PlaybackState::Pausing | PlaybackState::Stopping => {
                self.state = PlaybackState::Stopping;
            }
            PlaybackState::Paused => {
                self.state = PlaybackState::Stopped;
                self.rate = 0.0;
            }
            PlaybackState::Stopped | PlaybackState::Done => {}
        }
        self.state
    }

    /// The interval of `ṙ` keeping `|q''_j r² + q'_j ṙ| ≤ A_j` for every joint at path time
    /// `tau`. It contains 0 whenever `r ≤ 1` (the trajectory alone respects `A`).
    fn rate_dot_window(&self, tau: f64, r: f64) -> (f64, f64) {
        let s = self.traj.sample(tau);
        let a = self.traj.accel_budget();
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        for j in 0..AXES {
            let v = s.qd[j];
            if v.abs() < 1e-12 {
                continue;
            }
            let base = s.qdd[j] * r * r;
            let (l, h) = ((-a[j] - base) / v, (a[j] - base) / v);
            let (l, h) = if v > 0.0 { (l, h) } else { (h, l) };
            lo = lo.max(l);
            hi = hi.min(h);
        }
        // Rounding only (see above): never let the window exclude "keep the rate".
        (lo.min(0.0), hi.max(0.0))
    }

    /// Advances by `dt` (s, the robot cycle) and returns the reference. Non-positive or
    /// non-finite `dt`: no time passes.
    ///
    /// The rate's slope `ṙ` is the fastest towards the target rate (1 when running, 0 when
    /// pausing/stopping) that keeps every joint within its acceleration budget, checked at the
    /// step's start and at its predicted end (the trajectory's own acceleration may switch
    /// within the step).
    pub fn step(&mut self, dt: f64) -> PlaybackSample {
        if !(dt.is_finite() && dt > 0.0) || self.state.is_final() {
            if self.state.is_final() {
                self.rate = 0.0;
                self.rate_dot = 0.0;
            }
            return self.output();
        }
        let target = match self.state {
            PlaybackState::Running => 1.0,
            PlaybackState::Pausing | PlaybackState::Stopping => 0.0,
            PlaybackState::Paused | PlaybackState::Stopped | PlaybackState::Done => {
                self.rate = 0.0;
                self.rate_dot = 0.0;
                return self.output();
            }
        };
        let r0 = self.rate;
        let mut rd = if target > r0 {
            let (_, hi) = self.rate_dot_window(self.tau, r0);
            hi.min((target - r0) / dt)
        } else if target < r0 {
            let (lo, _) = self.rate_dot_window(self.tau, r0);
            lo.max((target - r0) / dt)
        } else {
            0.0
        };
        // Check at the predicted end of the step too (the rate and the trajectory's own
        // acceleration there differ); halve the slope until both ends are within budget.
        for _ in 0..40 {
            if rd == 0.0 {
                break;
            }
            let r1 = (r0 + rd * dt).clamp(0.0, 1.0);
            let tau1 = self.tau + 0.5 * (r0 + r1) * dt;
            let (lo, hi) = self.rate_dot_window(tau1, r1);
            if rd >= lo && rd <= hi {
                break;
            }
            rd *= 0.5;
            if rd.abs() < 1e-9 {
                rd = 0.0;
            }
        }
        let r1 = (r0 + rd * dt).clamp(0.0, 1.0);
        // τ advances by the area under r (linear in t until it reaches its bound).
        let advance = if rd != 0.0 && (r1 == 0.0 || r1 == 1.0) && r1 != r0 + rd * dt {
            let t_hit = (r1 - r0) / rd;
            0.5 * (r0 + r1) * t_hit + r1 * (dt - t_hit)
        } else {
            0.5 * (r0 + r1) * dt
        };
        self.rate = r1;
        self.rate_dot = if r1 == target && r1 != r0 + rd * dt {
            0.0
        } else {
            rd
        };
        self.tau = (self.tau + advance).min(self.traj.duration());
        if self.tau >= self.traj.duration() {
            self.state = PlaybackState::Done;
            self.rate = 0.0;
            self.rate_dot = 0.0;
        } else if r1 == 0.0 {
            self.state = match self.state {
                PlaybackState::Pausing => PlaybackState::Paused,
                PlaybackState::Stopping => PlaybackState::Stopped,
                s => s,
            };
            self.rate_dot = 0.0;
        }
        self.output()
    }

    fn output(&self) -> PlaybackSample {
        let s = self.traj.sample(self.tau);
        let (r, rd) = (self.rate, self.rate_dot);
        let qd = std::array::from_fn(|j| s.qd[j] * r);
        let qdd = std::array::from_fn(|j| s.qdd[j] * r * r + s.qd[j] * rd);
        PlaybackSample {
            q: s.q,
            qd,
            qdd,
            state: self.state,
            tau: self.tau,
            rate: r,
            segment: s.segment,
            progress: s.progress,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cartesian mode
// ---------------------------------------------------------------------------------------------

/// TCP speed and acceleration bounds of a Cartesian line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CartesianLimits {
    /// TCP linear speed (m/s).
    pub v_m_s: f64,
    /// TCP linear acceleration (m/s²).
    pub a_m_s2: f64,
    /// Angular speed (rad/s).
    pub w_rad_s: f64,
    /// Angular acceleration (rad/s²).
    pub alpha_rad_s2: f64,
    /// Length of each jerk phase of the path profile (s; 0 = trapezoids), see
    /// [`JERK_TIME_S`].
    pub jerk_time_s: f64,
}

impl Default for CartesianLimits {
    /// 0.25 m/s, 1 m/s², 90 °/s, 360 °/s², jerk phases of [`JERK_TIME_S`].
    fn default() -> Self {
        Self {
            v_m_s: 0.25,
            a_m_s2: 1.0,
            w_rad_s: std::f64::consts::FRAC_PI_2,
            alpha_rad_s2: 2.0 * std::f64::consts::PI,
            jerk_time_s: JERK_TIME_S,
        }
    }
}

/// One straight TCP line: `p(s) = p₀ + (p₁ − p₀)s`, `R(s) = exp(s·φ)·R₀` with `φ` the
/// rotation vector of `R₁R₀ᵀ` (the slerp geodesic).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CartesianSegment {
    pub from: Isometry3<f64>,
    pub to: Isometry3<f64>,
    /// Start time (s).
    pub t0: f64,
    pub profile: ScalarProfile,
    /// Line length (m).
    pub length_m: f64,
    /// Rotation angle (rad).
    pub angle_rad: f64,
    /// Time stretch applied by [`CartesianTrajectory::fit_joint_limits`] (1 = none).
    pub slowdown: f64,
}

impl CartesianSegment {
    /// Pose at local time `t`; exactly `to` from the end on.
    pub fn pose(&self, t: f64) -> Isometry3<f64> {
        let (s, _, _) = self.profile.eval(t);
        if s >= 1.0 {
            return self.to;
        }
        if s <= 0.0 {
            return self.from;
        }
        let p0 = self.from.translation.vector;
        let p1 = self.to.translation.vector;
        let phi = (self.to.rotation * self.from.rotation.inverse()).scaled_axis();
        Isometry3::from_parts(
            Translation3::from(p0 + (p1 - p0) * s),
            UnitQuaternion::from_scaled_axis(phi * s) * self.from.rotation,
        )
    }
}

/// One sample of a Cartesian trajectory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CartesianSample {
    pub pose: Isometry3<f64>,
    /// TCP linear speed (m/s).
    pub speed_m_s: f64,
    pub segment: usize,
    pub progress: f64,
}

/// Straight TCP lines between poses, stopping at each (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct CartesianTrajectory {
    poses: Vec<Isometry3<f64>>,
    segments: Vec<CartesianSegment>,
    duration: f64,
}

/// What [`CartesianTrajectory::fit_joint_limits`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct JointFitReport {
    /// Time stretch per segment (≥ 1; 1 = unchanged).
    pub slowdown: Vec<f64>,
    /// Worst sampled joint speed / speed budget after fitting.
    pub speed_ratio: f64,
    /// Worst sampled joint acceleration / acceleration budget after fitting.
    pub accel_ratio: f64,
}

impl CartesianTrajectory {
    /// Plans straight lines through `poses` (base frame, TCP) with `speed_scale ∈ (0, 1]`
    /// applied to all four Cartesian bounds.
    pub fn plan(
        poses: &[Isometry3<f64>],
        limits: &CartesianLimits,
        speed_scale: f64,
    ) -> Result<Self, TrajError> {
        positive(|| "cartesian.v_m_s".into(), limits.v_m_s)?;
        positive(|| "cartesian.a_m_s2".into(), limits.a_m_s2)?;
        positive(|| "cartesian.w_rad_s".into(), limits.w_rad_s)?;
        positive(|| "cartesian.alpha_rad_s2".into(), limits.alpha_rad_s2)?;
        non_negative(|| "cartesian.jerk_time_s".into(), limits.jerk_time_s)?;
        unit_scale(|| "speed_scale".into(), speed_scale)?;
        if poses.is_empty() {
            return Err(TrajError::Empty);
        }
        for (i, p) in poses.iter().enumerate() {
            let t = p.translation.vector;
            let q = p.rotation.quaternion();
            for (k, v) in [t.x, t.y, t.z, q.w, q.i, q.j, q.k].into_iter().enumerate() {
                finite(|| format!("pose {i}, component {k}"), v)?;
            }
        }
        let mut segments = Vec::with_capacity(poses.len().saturating_sub(1));
        let mut t = 0.0;
        for w in poses.windows(2) {
            let (from, to) = (w[0], w[1]);
            let length_m = (to.translation.vector - from.translation.vector).norm();
            let angle_rad = from.rotation.angle_to(&to.rotation);
            let bound = |lin: f64, ang: f64| {
                let mut b = f64::INFINITY;
                if length_m > 0.0 {
                    b = b.min(lin * speed_scale / length_m);
                }
                if angle_rad > 0.0 {
                    b = b.min(ang * speed_scale / angle_rad);
                }
                b
            };
            let profile = ScalarProfile::jerk_limited(
                bound(limits.v_m_s, limits.w_rad_s),
                bound(limits.a_m_s2, limits.alpha_rad_s2),
                limits.jerk_time_s,
            );
            segments.push(CartesianSegment {
                from,
                to,
                t0: t,
                profile,
                length_m,
                angle_rad,
                slowdown: 1.0,
            });
            t += profile.duration;
        }
        Ok(Self {
            poses: poses.to_vec(),
            segments,
            duration: t,
        })
    }

    pub fn duration(&self) -> f64 {
        self.duration
    }
    pub fn segments(&self) -> &[CartesianSegment] {
        &self.segments
    }
    pub fn poses(&self) -> &[Isometry3<f64>] {
        &self.poses
    }
    /// Time each pose is reached (s).
    pub fn arrival_times(&self) -> Vec<f64> {
        std::iter::once(0.0)
            .chain(self.segments.iter().map(|s| s.t0 + s.profile.duration))
            .collect()
    }

    fn segment_at(&self, t: f64) -> usize {
        self.segments
            .partition_point(|s| s.t0 <= t)
            .saturating_sub(1)
    }

    /// The TCP pose at `t` (s); exactly the last pose from the end on.
    pub fn sample(&self, t: f64) -> CartesianSample {
        let progress = if self.duration <= 0.0 || t >= self.duration {
            1.0
        } else if t.is_nan() || t <= 0.0 {
            0.0
        } else {
            t / self.duration
        };
        let last = self
            .poses
            .last()
            .copied()
            .unwrap_or_else(Isometry3::identity);
        if self.segments.is_empty() || t >= self.duration {
            return CartesianSample {
                pose: last,
                speed_m_s: 0.0,
                segment: self.segments.len().saturating_sub(1),
                progress,
            };
        }
        let i = if t.is_nan() || t <= 0.0 {
            0
        } else {
            self.segment_at(t)
        };
        let seg = &self.segments[i];
        let local = t - seg.t0;
        let (_, sd, _) = seg.profile.eval(local);
        CartesianSample {
            pose: seg.pose(local),
            speed_m_s: sd * seg.length_m,
            segment: i,
            progress,
        }
    }

    /// Samples every segment every `dt` (s) through `ik` (pose → joints; it may keep state,
    /// e.g. the previous solution for continuity), and stretches in time any segment whose
    /// finite-difference joint speeds or accelerations exceed
    /// `speed_safety·v_max` / `accel_safety·a_max` of `limits` (the [`SPEED_SAFETY`] /
    /// [`ACCEL_SAFETY`] defaults of [`PlanOptions`]).
    ///
    /// Stretching a segment by `c ≥ 1` (profile bounds `V/c`, `A/c²`) replays the same path
    /// with every joint speed divided by `c` and every acceleration by `c²`, so one pass with
    /// `c = max(ρ_v, √ρ_a)` (the worst ratios) fits; up to four passes absorb the sampling
    /// error. An IK failure or a joint jump of more than `max(10·v_max·dt, 0.5 rad)` in one
    /// sample (a configuration change) is an error.
    pub fn fit_joint_limits<F>(
        &mut self,
        mut ik: F,
        limits: &TrajLimits,
        dt: f64,
    ) -> Result<JointFitReport, TrajError>
    where
        F: FnMut(&Isometry3<f64>) -> Option<Joints>,
    {
        limits.validate()?;
        positive(|| "dt".into(), dt)?;
        let vb: Joints = std::array::from_fn(|j| SPEED_SAFETY * limits.v_max[j]);
        let ab: Joints = std::array::from_fn(|j| ACCEL_SAFETY * limits.a_max[j]);
        let mut report = JointFitReport {
            slowdown: vec![1.0; self.segments.len()],
            speed_ratio: 0.0,
            accel_ratio: 0.0,
        };
        for i in 0..self.segments.len() {
            let mut ratios = (0.0, 0.0);
            for _pass in 0..4 {
                ratios = Self::segment_ratios(&self.segments[i], i, &mut ik, &vb, &ab, dt)?;
                let c = ratios.0.max(ratios.1.sqrt());
                if c <= 1.0 + 1e-9 {
                    break;
                }
                // A little beyond the measured ratio so the next pass converges.
                let c = c * 1.001;
                let seg = &mut self.segments[i];
                let p = seg.profile;
                seg.profile = p.time_scaled(c);
                seg.slowdown *= c;
                report.slowdown[i] = seg.slowdown;
            }
            report.speed_ratio = report.speed_ratio.max(ratios.0);
            report.accel_ratio = report.accel_ratio.max(ratios.1);
        }
        // Re-time the segments.
        let mut t = 0.0;
        for s in &mut self.segments {
            s.t0 = t;
            t += s.profile.duration;
        }
        self.duration = t;
        Ok(report)
    }

    /// Worst (speed, acceleration) ratio of one segment sampled every `dt`.
    fn segment_ratios<F>(
        seg: &CartesianSegment,
        index: usize,
        ik: &mut F,
        vb: &Joints,
        ab: &Joints,
        dt: f64,
    ) -> Result<(f64, f64), TrajError>
    where
        F: FnMut(&Isometry3<f64>) -> Option<Joints>,
    {
        let n = (seg.profile.duration / dt).ceil() as usize;
        let mut prev: Option<Joints> = None;
        let mut prev_v: Option<Joints> = None;
        let (mut rv, mut ra) = (0.0f64, 0.0f64);
        // Rest before and after: include one sample on each side.
        for k in 0..=n + 1 {
            let t = (k as f64 * dt).min(seg.profile.duration);
            let q = ik(&seg.pose(t)).ok_or(TrajError::IkFailed {
                segment: index,
                t_s: seg.t0 + t,
            })?;
            if let Some(p) = prev {
                let mut v = [0.0; AXES];
                for j in 0..AXES {
                    let d = q[j] - p[j];
                    if d.abs() > (10.0 * vb[j] / SPEED_SAFETY * dt).max(JUMP_RAD) {
                        return Err(TrajError::JointJump {
                            segment: index,
                            joint: j,
                            jump_rad: d,
                        });
                    }
                    v[j] = d / dt;
                    rv = rv.max(v[j].abs() / vb[j]);
                }
                let pv = prev_v.unwrap_or([0.0; AXES]);
                for j in 0..AXES {
                    ra = ra.max((v[j] - pv[j]).abs() / dt / ab[j]);
                }
                prev_v = Some(v);
            }
            prev = Some(q);
        }
        Ok((rv, ra))
    }
}

// ---------------------------------------------------------------------------------------------
// Cartesian playback (lines between waypoints, on request)
// ---------------------------------------------------------------------------------------------

/// Ramp time of the Cartesian playback's rate for pause, resume and stop (s): at the 0.25 m/s
/// TCP bound the ramp adds at most 0.25 m/s² along the path.
pub const CARTESIAN_RATE_RAMP_S: f64 = 1.0;

/// One step of a [`CartesianPlayback`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CartesianPlaySample {
    pub pose: Isometry3<f64>,
    pub state: PlaybackState,
    /// In the reduced-speed approach to the first waypoint.
    pub approach: bool,
    /// Index of the program waypoint being approached.
    pub waypoint: usize,
    /// Path time done and total (s; approach included).
    pub tau: f64,
    pub duration: f64,
    pub progress: f64,
}

/// Plays straight TCP lines through the program's poses, optionally after a reduced-speed
/// approach line from where the robot is; pause, resume and stop ramp the path rate linearly
/// over [`CARTESIAN_RATE_RAMP_S`]. The caller sends each pose as a Cartesian target (the
/// kinematics service solves the IK on the current branch).
#[derive(Debug, Clone)]
pub struct CartesianPlayback {
    approach: Option<CartesianTrajectory>,
    main: CartesianTrajectory,
    tau: f64,
    rate: f64,
    target_rate: f64,
    state: PlaybackState,
}

impl CartesianPlayback {
    /// `approach` (from the measured pose to the first waypoint) is optional.
    pub fn new(approach: Option<CartesianTrajectory>, main: CartesianTrajectory) -> Self {
        Self {
            approach,
            main,
            tau: 0.0,
            rate: 1.0,
            target_rate: 1.0,
            state: PlaybackState::Running,
        }
    }

    fn approach_s(&self) -> f64 {
        self.approach.as_ref().map_or(0.0, |a| a.duration())
    }

    /// Number of program waypoints.
    pub fn waypoints(&self) -> usize {
        self.main.poses().len()
    }

    pub fn duration(&self) -> f64 {
        self.approach_s() + self.main.duration()
    }

    pub fn state(&self) -> PlaybackState {
        self.state
    }

    pub fn pause(&mut self) -> PlaybackState {
        if matches!(self.state, PlaybackState::Running) {
            self.state = PlaybackState::Pausing;
            self.target_rate = 0.0;
        }
        self.state
    }

    pub fn resume(&mut self) -> PlaybackState {
        if matches!(self.state, PlaybackState::Pausing | PlaybackState::Paused) {
            self.state = PlaybackState::Running;
            self.target_rate = 1.0;
        }
        self.state
    }

    pub fn stop(&mut self) -> PlaybackState {
        if !self.state.is_final() {
            self.state = PlaybackState::Stopping;
            self.target_rate = 0.0;
        }
        self.state
    }

    /// Advances by `dt` (s) and returns the pose to command.
    pub fn step(&mut self, dt: f64) -> CartesianPlaySample {
        if dt.is_finite() && dt > 0.0 && !self.state.is_final() {
            let dr = dt / CARTESIAN_RATE_RAMP_S;
            self.rate = if self.target_rate > self.rate {
                (self.rate + dr).min(self.target_rate)
            } else {
                (self.rate - dr).max(self.target_rate)
            };
            self.tau = (self.tau + self.rate * dt).min(self.duration());
            if self.rate == 0.0 {
                self.state = match self.state {
                    PlaybackState::Pausing => PlaybackState::Paused,
                    PlaybackState::Stopping => PlaybackState::Stopped,
                    s => s,
                };
            }
            if self.tau >= self.duration() {
                self.state = PlaybackState::Done;
            }
        }
        let a = self.approach_s();
        let (pose, approach, waypoint) = match &self.approach {
            Some(tr) if self.tau < a => (tr.sample(self.tau).pose, true, 0),
            _ => {
                let smp = self.main.sample(self.tau - a);
                let wp = if self.state == PlaybackState::Done {
                    self.main.poses().len().saturating_sub(1)
                } else {
                    (smp.segment + 1).min(self.main.poses().len().saturating_sub(1))
                };
                (smp.pose, false, wp)
            }
        };
        let d = self.duration();
        CartesianPlaySample {
            pose,
            state: self.state,
            approach,
            waypoint,
            tau: self.tau,
            duration: d,
            progress: if self.state == PlaybackState::Done || d <= 0.0 {
                1.0
            } else {
                (self.tau / d).clamp(0.0, 1.0)
            },
        }
    }
}

#[cfg(test)]
mod cartesian_playback_tests {
    use super::*;
    use nalgebra::{Translation3, UnitQuaternion, Vector3};

    fn at(x: f64, y: f64) -> Isometry3<f64> {
        Isometry3::from_parts(
            Translation3::new(x, y, 0.4),
            UnitQuaternion::from_axis_angle(&Vector3::y_axis(), std::f64::consts::PI),
        )
    }

    #[test]
    fn lines_pass_every_pose_pause_resume_and_finish_exactly() {
        let poses = [at(0.4, 0.0), at(0.4, 0.1), at(0.3, 0.1)];
        let main =
            CartesianTrajectory::plan(&poses, &CartesianLimits::default(), 1.0).expect("plan");
        let approach = CartesianTrajectory::plan(
            &[at(0.35, -0.05), poses[0]],
            &CartesianLimits::default(),
            0.2,
        )
        .expect("approach");
        let mut pb = CartesianPlayback::new(Some(approach), main);
        let dt = 0.004;
        let mut closest = [f64::INFINITY; 3];
        let mut paused_at = None;
        let mut last = pb.step(0.0);
        assert!(last.approach);
        let mut max_step: f64 = 0.0;
        for k in 0..20_000 {
            if k == 400 {
                pb.pause();
            }
            if pb.state() == PlaybackState::Paused && paused_at.is_none() {
                paused_at = Some(last.pose.translation.vector);
            }
            if k == 1200 {
                assert_eq!(pb.state(), PlaybackState::Paused);
                pb.resume();
            }
            let s = pb.step(dt);
            max_step =
                max_step.max((s.pose.translation.vector - last.pose.translation.vector).norm());
            // Straight lines: every point of the main part is on one of the two lines.
            for (i, p) in poses.iter().enumerate() {
                closest[i] =
                    closest[i].min((s.pose.translation.vector - p.translation.vector).norm());
            }
            last = s;
            if s.state == PlaybackState::Done {
                break;
            }
        }
        assert_eq!(last.state, PlaybackState::Done);
        assert_eq!(last.progress, 1.0);
        assert_eq!(last.pose.translation.vector, poses[2].translation.vector);
        assert!(closest.iter().all(|c| *c < 1e-5), "{closest:?}");
        assert!(paused_at.is_some());
        // Never faster than the 0.25 m/s bound per 4 ms step.
        assert!(max_step <= 0.25 * dt + 1e-9, "{max_step}");
    }

    #[test]
    fn stop_ramps_down_and_ends_on_the_path() {
        let poses = [at(0.4, 0.0), at(0.4, 0.3)];
        let main =
            CartesianTrajectory::plan(&poses, &CartesianLimits::default(), 1.0).expect("plan");
        let mut pb = CartesianPlayback::new(None, main);
        for _ in 0..100 {
            pb.step(0.004);
        }
        pb.stop();
        let mut s = pb.step(0.004);
        for _ in 0..1000 {
            s = pb.step(0.004);
        }
        assert_eq!(s.state, PlaybackState::Stopped);
        let y = s.pose.translation.y;
        assert!(y > 0.0 && y < 0.3, "{y}");
        assert!(s.progress < 1.0);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::needless_range_loop)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DT: f64 = 0.004;

    fn d(deg: [f64; 6]) -> Joints {
        deg.map(f64::to_radians)
    }

    /// Deterministic cycle lengths 4 ms ± `jitter` (a small LCG; no clock, no rand crate).
    fn cycles(n: usize, jitter: f64, seed: u64) -> Vec<f64> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
                DT + jitter * (2.0 * u - 1.0)
            })
            .collect()
    }

    /// robot-io's checks on references `q_k` sent on cycles of length `dts[k]` (from rest):
    /// `v_k = Δq_k/Δt_k`, `|v_k − v_{k−1}| ≤ a·Δt_k`. Returns the worst (speed, accel) ratio
    /// against `v`, `a`.
    fn robot_io_ratios(qs: &[Joints], dts: &[f64], v: &Joints, a: &Joints) -> (f64, f64) {
        let mut prev_v = [0.0; 6];
        let (mut rv, mut ra) = (0.0f64, 0.0f64);
        for k in 1..qs.len() {
            let dt = dts[k];
            for j in 0..6 {
                let vj = (qs[k][j] - qs[k - 1][j]) / dt;
                rv = rv.max(vj.abs() / v[j]);
                ra = ra.max((vj - prev_v[j]).abs() / (a[j] * dt));
                prev_v[j] = vj;
            }
        }
        (rv, ra)
    }

    /// Samples a trajectory on the given cycle lengths (plus a rest tail).
    fn sample_on(tr: &JointTrajectory, dts: &[f64]) -> (Vec<Joints>, Vec<f64>) {
        let mut t = 0.0;
        let mut qs = vec![tr.sample(0.0).q];
        let mut used = vec![DT];
        let mut k = 0;
        while t < tr.duration() + 0.02 {
            let dt = dts[k % dts.len()];
            t += dt;
            qs.push(tr.sample(t).q);
            used.push(dt);
            k += 1;
        }
        (qs, used)
    }

    fn program() -> Vec<Joints> {
        vec![
            d([0.0, 0.0, 0.0, 0.0, 30.0, 0.0]),
            d([90.0, 20.0, -30.0, 45.0, 60.0, 180.0]),
            d([90.2, 20.1, -30.0, 45.0, 60.0, 180.0]), // short: triangular
            d([-120.0, -40.0, 50.0, -150.0, -100.0, -350.0]),
            d([-120.0, -40.0, 50.0, -150.0, -100.0, -350.0]), // duplicate
            d([10.0, 5.0, 0.0, 0.0, 10.0, 0.0]),
        ]
    }

    #[test]
    fn scalar_profile_shapes() {
        let p = ScalarProfile::new(2.0, 8.0); // v² = 4 ≤ 8: trapezoid
        assert!(!p.is_triangular());
        assert!((p.duration - (0.5 + 0.25)).abs() < 1e-15);
        let t = ScalarProfile::new(4.0, 8.0); // v² = 16 > 8: triangle
        assert!(t.is_triangular());
        assert!((t.duration - 2.0 / 8f64.sqrt()).abs() < 1e-15);
        assert!(t.v_peak < 4.0);
        for p in [p, t] {
            assert_eq!(p.eval(p.duration), (1.0, 0.0, 0.0));
            assert_eq!(p.eval(0.0), (0.0, 0.0, 0.0));
            // Continuity of s and ṡ at the phase boundaries.
            for tb in [p.t_accel, p.duration - p.t_accel] {
                let (a, b) = (p.eval(tb - 1e-9), p.eval(tb + 1e-9));
                assert!(
                    (a.0 - b.0).abs() < 1e-8 && (a.1 - b.1).abs() < 1e-7,
                    "{a:?} {b:?}"
                );
            }
            // Monotone.
            let mut last = 0.0;
            for k in 0..=1000 {
                let s = p.eval(p.duration * k as f64 / 1000.0).0;
                assert!(s >= last && s <= 1.0);
                last = s;
            }
        }
        assert_eq!(ScalarProfile::new(f64::INFINITY, 1.0).duration, 0.0);
    }

    #[test]
    fn limits_respected_sampled_at_4ms() {
        let l = TrajLimits::irb120();
        for scale in [1.0, 0.5, 0.1] {
            let opts = PlanOptions {
                speed_scale: scale,
                ..PlanOptions::default()
            };
            let tr = JointTrajectory::through(&program(), &l, &opts).unwrap();
            let (qs, dts) = sample_on(&tr, &[DT]);
            let budget_v: Joints = std::array::from_fn(|j| scale * SPEED_SAFETY * l.v_max[j]);
            let budget_a: Joints = std::array::from_fn(|j| scale * ACCEL_SAFETY * l.a_max[j]);
            let (rv, ra) = robot_io_ratios(&qs, &dts, &budget_v, &budget_a);
            // On a uniform grid the differences are bounded by the planned maxima.
            assert!(rv <= 1.0 + 1e-9, "scale {scale}: speed ratio {rv}");
            assert!(ra <= 1.0 + 1e-9, "scale {scale}: accel ratio {ra}");
            assert!(rv > 0.99, "some joint cruises at its budget ({rv})");
        }
    }

    #[test]
    fn limits_respected_with_jitter() {
        let l = TrajLimits::irb120();
        let tr = JointTrajectory::through(&program(), &l, &PlanOptions::default()).unwrap();
        for seed in 0..20 {
            let dts = cycles(5000, 0.0005, seed);
            let (qs, used) = sample_on(&tr, &dts);
            let (rv, ra) = robot_io_ratios(&qs, &used, &l.v_max, &l.a_max);
            assert!(rv <= 1.0, "seed {seed}: speed ratio {rv}");
            assert!(ra <= 1.0, "seed {seed}: accel ratio {ra}");
            // The worst case 8/7 · 0.8 = 0.914 is what the factor was chosen for.
            assert!(ra <= ACCEL_SAFETY * 8.0 / 7.0 + 1e-9, "seed {seed}: {ra}");
        }
    }

    #[test]
    fn segments_are_synchronised_and_straight() {
        let l = TrajLimits::irb120();
        let tr = JointTrajectory::through(&program(), &l, &PlanOptions::default()).unwrap();
        for seg in tr.segments() {
            let dq: Joints = std::array::from_fn(|j| seg.to[j] - seg.from[j]);
            let n = dq.iter().map(|x| x * x).sum::<f64>().sqrt();
            if n == 0.0 {
                continue;
            }
            for k in 1..200 {
                let t = seg.profile.duration * k as f64 / 200.0;
                let (q, qd, _) = seg.eval(t);
                // q − from is parallel to Δ: the same fraction s on every moving joint.
                let s: Vec<f64> = (0..6)
                    .filter(|&j| dq[j].abs() > 1e-9)
                    .map(|j| (q[j] - seg.from[j]) / dq[j])
                    .collect();
                for x in &s {
                    assert!((x - s[0]).abs() < 1e-9, "segment not straight: {s:?}");
                }
                // Every moving joint is still moving (none finishes early).
                for j in 0..6 {
                    if dq[j].abs() > 1e-9 {
                        assert!(qd[j] * dq[j] > 0.0);
                    }
                }
            }
            // All joints arrive together, exactly.
            assert_eq!(seg.eval(seg.profile.duration).0, seg.to);
        }
    }

    #[test]
    fn end_points_exact() {
        let l = TrajLimits::irb120();
        let wps = program();
        let tr = JointTrajectory::through(&wps, &l, &PlanOptions::default()).unwrap();
        assert_eq!(tr.sample(tr.duration()).q, *wps.last().unwrap());
        assert_eq!(tr.sample(tr.duration() + 5.0).q, *wps.last().unwrap());
        assert_eq!(tr.sample(0.0).q, wps[0]);
        assert_eq!(tr.sample(-1.0).q, wps[0]);
        assert_eq!(tr.arrival_times().len(), wps.len());
        for (i, t) in tr.arrival_times().iter().enumerate() {
            let s = tr.sample(*t);
            assert_eq!(s.q, wps[i], "waypoint {i} at {t}");
            assert_eq!(s.qd, [0.0; 6], "stopped at waypoint {i}");
        }
        assert!(tr.arrival_times().windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(tr.progress(tr.duration()), 1.0);
        assert_eq!(tr.progress(0.0), 0.0);
        assert_eq!(tr.sample(tr.duration()).progress, 1.0);
    }

    /// Plans with trapezoids (no jerk phases): the shapes the older tests pin.
    fn trapezoids() -> PlanOptions {
        PlanOptions {
            jerk_time_s: 0.0,
            ..PlanOptions::default()
        }
    }

    #[test]
    fn short_move_is_triangular() {
        let l = TrajLimits::irb120();
        let a = d([0.0; 6]);
        let b = d([0.5, 0.0, 0.0, 0.0, 0.0, 0.0]);
        // The trapezoid's shapes (the double-S default: `double_s_plans_bound_the_jerk`).
        let tr = JointTrajectory::through(&[a, b], &l, &trapezoids()).unwrap();
        let seg = tr.segments()[0];
        assert!(seg.profile.is_triangular());
        let dist = b[0] - a[0];
        let acc = ACCEL_SAFETY * l.a_max[0];
        // Triangle: T = 2√(Δ/a), peak speed √(Δ·a) < v_max.
        assert!((tr.duration() - 2.0 * (dist / acc).sqrt()).abs() < 1e-12);
        let (_, qd, qdd) = seg.eval(tr.duration() / 2.0 - 1e-9);
        assert!((qd[0] - (dist * acc).sqrt()).abs() < 1e-6);
        assert!(qd[0] < SPEED_SAFETY * l.v_max[0]);
        assert!((qdd[0] - acc).abs() < 1e-9);
    }

    /// The double-S default: `s`, `ṡ`, `s̈` continuous, `|s⃛| ≤ A / t_jerk`, peaks within the
    /// bounds, and the known durations (trapezoid + `t_jerk` when `A` and `V` are reached).
    #[test]
    fn double_s_profiles_are_continuous_and_bound_the_jerk() {
        let tj = 0.08;
        // Cruise with A reached; cruise without A; no cruise with A; neither.
        for (v, a) in [(2.0, 8.0), (0.5, 100.0), (4.0, 8.0), (40.0, 30.0)] {
            let p = ScalarProfile::jerk_limited(v, a, tj);
            let jmax = a / tj;
            assert!(
                p.v_peak <= v * (1.0 + 1e-12) && p.accel <= a * (1.0 + 1e-12),
                "{p:?}"
            );
            assert_eq!(p.eval(p.duration), (1.0, 0.0, 0.0));
            let n = 20_000;
            let h = p.duration / n as f64;
            let mut last = p.eval(0.0);
            for k in 1..=n {
                let e = p.eval(k as f64 * h);
                assert!(e.0 >= last.0 - 1e-15 && e.0 <= 1.0, "{p:?} at {k}");
                // ṡ and s̈ continuous (s⃛ bounded): changes within one step's bounds.
                assert!(
                    (e.1 - last.1).abs() <= a * h * (1.0 + 1e-6) + 1e-12,
                    "{p:?} {k}"
                );
                assert!(
                    (e.2 - last.2).abs() <= jmax * h * (1.0 + 1e-6) + 1e-9,
                    "{p:?} {k}"
                );
                last = e;
            }
            // The path parameter's end: ∫ṡ = 1 (checked against s by the trapezoid rule).
            let mut integral = 0.0;
            for k in 0..n {
                integral += 0.5 * h * (p.eval(k as f64 * h).1 + p.eval((k + 1) as f64 * h).1);
            }
            assert!((integral - 1.0).abs() < 1e-6, "{p:?}: ∫ṡ = {integral}");
        }
        let p = ScalarProfile::jerk_limited(2.0, 8.0, tj);
        let trap = ScalarProfile::new(2.0, 8.0);
        assert!((p.duration - (trap.duration + tj)).abs() < 1e-12, "{p:?}");
        assert_eq!((p.v_peak, p.accel), (2.0, 8.0));
        // Time scaling keeps the shape.
        let c = 1.7;
        let q = p.time_scaled(c);
        for k in 0..=100 {
            let t = p.duration * k as f64 / 100.0;
            assert!((q.eval(c * t).0 - p.eval(t).0).abs() < 1e-12);
        }
    }

    /// Joint plans leave rest with their jerk within `accel_safety · a_max / JERK_TIME_S` on
    /// every joint, on robot-io's 4 ms sampling.
    #[test]
    fn double_s_plans_bound_the_jerk() {
        let l = TrajLimits::irb120();
        let tr = JointTrajectory::through(&program(), &l, &PlanOptions::default()).unwrap();
        let n = (tr.duration() / DT).ceil() as usize + 2;
        let qs: Vec<Joints> = (0..n).map(|k| tr.sample(k as f64 * DT).q).collect();
        for j in 0..6 {
            let jmax = ACCEL_SAFETY * l.a_max[j] / JERK_TIME_S;
            for w in qs.windows(4) {
                let jerk = (w[3][j] - 3.0 * w[2][j] + 3.0 * w[1][j] - w[0][j]) / DT.powi(3);
                assert!(
                    jerk.abs() <= jmax * (1.0 + 1e-6),
                    "joint {j}: {jerk} > {jmax}"
                );
            }
        }
    }

    #[test]
    fn limiting_joint_is_time_optimal() {
        let l = TrajLimits::irb120();
        // A1 moves 100°, A6 200° (faster joint, but twice the way): A6 limits speed.
        let a = d([0.0; 6]);
        let b = d([100.0, 0.0, 0.0, 0.0, 0.0, 200.0]);
        let tr = JointTrajectory::through(&[a, b], &l, &trapezoids()).unwrap();
        let seg = tr.segments()[0];
        assert!(!seg.profile.is_triangular());
        let v6 = SPEED_SAFETY * l.v_max[5];
        let a6 = ACCEL_SAFETY * l.a_max[5];
        let (v1, a1) = (SPEED_SAFETY * l.v_max[0], ACCEL_SAFETY * l.a_max[0]);
        let mid = seg.eval(tr.duration() / 2.0).1;
        let d6 = b[5];
        let d1 = b[0];
        let vs = (v6 / d6).min(v1 / d1);
        let as_ = (a6 / d6).min(a1 / d1);
        // The speed-limiting joint cruises at its limit and the accel-limiting one
        // accelerates at its limit; the duration is the trapezoid's 1/V + V/A.
        let lim_v = if v6 / d6 <= v1 / d1 { 5 } else { 0 };
        assert!((mid[lim_v].abs() - [v1, 0.0, 0.0, 0.0, 0.0, v6][lim_v]).abs() < 1e-9);
        let acc = seg.eval(1e-3).2;
        let lim_a = if a6 / d6 <= a1 / d1 { 5 } else { 0 };
        assert!((acc[lim_a].abs() - [a1, 0.0, 0.0, 0.0, 0.0, a6][lim_a]).abs() < 1e-9);
        assert!((tr.duration() - (1.0 / vs + vs / as_)).abs() < 1e-12);
        // No joint alone could have been faster than the synchronised duration by more than
        // what the shared straight line costs: the slowest joint's own optimum is a lower bound.
        let own = |dist: f64, v: f64, a: f64| {
            if dist >= v * v / a {
                dist / v + v / a
            } else {
                2.0 * (dist / a).sqrt()
            }
        };
        let lower = own(d1, v1, a1).max(own(d6, v6, a6));
        assert!(tr.duration() >= lower - 1e-12);
        assert!(tr.duration() <= lower * 1.2);
    }

    #[test]
    fn errors_name_the_problem() {
        let l = TrajLimits::irb120();
        let o = PlanOptions::default();
        assert_eq!(
            JointTrajectory::through(&[], &l, &o).unwrap_err(),
            TrajError::Empty
        );
        let mut bad = d([0.0; 6]);
        bad[2] = f64::NAN;
        let e = JointTrajectory::through(&[d([0.0; 6]), bad], &l, &o).unwrap_err();
        assert!(e.to_string().contains("waypoint 1, joint 2"), "{e}");
        let out = d([0.0, 0.0, 80.0, 0.0, 0.0, 0.0]);
        let e = JointTrajectory::through(&[d([0.0; 6]), out], &l, &o).unwrap_err();
        assert!(matches!(
            e,
            TrajError::OutsideLimits {
                waypoint: 1,
                joint: 2,
                ..
            }
        ));
        let m = e.to_string();
        assert!(
            m.contains("waypoint 1") && m.contains("A3") && m.contains("80.000°"),
            "{m}"
        );
        assert!(m.contains("70.000°") && m.contains("-110.000°"), "{m}");
        let mut l2 = l;
        l2.a_max[4] = 0.0;
        let e = JointTrajectory::through(&[d([0.0; 6])], &l2, &o).unwrap_err();
        assert!(e.to_string().contains("limits.a_max[4]"), "{e}");
        let mut l3 = l;
        l3.v_max[1] = -1.0;
        assert!(matches!(
            JointTrajectory::through(&[d([0.0; 6])], &l3, &o),
            Err(TrajError::NonPositiveLimit { .. })
        ));
        for s in [0.0, 1.5, f64::NAN] {
            let o2 = PlanOptions {
                speed_scale: s,
                ..o
            };
            assert!(matches!(
                JointTrajectory::through(&[d([0.0; 6])], &l, &o2),
                Err(TrajError::BadScale { .. })
            ));
        }
        let mut w = JointWaypoint::new(d([0.0; 6]));
        w.dwell_s = -1.0;
        assert!(matches!(
            JointTrajectory::plan(&[w], &l, &o, None),
            Err(TrajError::Negative { .. })
        ));
        let start = d([0.0, 0.0, 0.0, 0.0, 0.0, 500.0]);
        assert!(matches!(
            JointTrajectory::plan(&[w.q.into()], &l, &o, Some(&start)),
            Err(TrajError::StartOutsideLimits { joint: 5, .. })
        ));
    }

    #[test]
    fn approach_segment_at_reduced_speed() {
        let l = TrajLimits::irb120();
        let wps = program();
        let now = d([40.0, 10.0, 10.0, 0.0, 45.0, 0.0]);
        assert!(approach_needed(&now, &wps[0], APPROACH_TOL_RAD));
        assert!(!approach_needed(&wps[0], &wps[0], APPROACH_TOL_RAD));
        assert!(approach_needed(&[f64::NAN; 6], &wps[0], APPROACH_TOL_RAD));
        let w: Vec<JointWaypoint> = wps.iter().copied().map(Into::into).collect();
        let o = PlanOptions::default();
        let tr = JointTrajectory::plan(&w, &l, &o, Some(&now)).unwrap();
        assert!(tr.has_approach());
        assert_eq!(tr.start(), &now);
        assert_eq!(tr.sample(0.0).q, now);
        let ap = tr.segments()[0];
        assert_eq!(ap.kind, SegmentKind::Approach);
        assert_eq!(ap.to, wps[0]);
        assert_eq!(tr.arrival_times()[0], ap.t_end());
        // Peak joint speed of the approach is at most the approach scale of the budget.
        let mut peak: f64 = 0.0;
        let mut t = 0.0;
        while t < ap.t_end() {
            let s = tr.sample(t);
            for j in 0..6 {
                peak = peak.max(s.qd[j].abs() / (SPEED_SAFETY * l.v_max[j]));
            }
            t += 0.001;
        }
        assert!(peak <= APPROACH_SPEED_SCALE + 1e-9 && peak > 0.5 * APPROACH_SPEED_SCALE);
        // Without a start, or starting exactly on the first waypoint: no approach.
        let tr2 = JointTrajectory::plan(&w, &l, &o, Some(&wps[0])).unwrap();
        assert!(!tr2.has_approach());
        assert_eq!(
            tr2.duration(),
            JointTrajectory::plan(&w, &l, &o, None).unwrap().duration()
        );
    }

    #[test]
    fn dwell_and_waypoint_speed_scale() {
        let l = TrajLimits::irb120();
        let a = d([0.0; 6]);
        let b = d([60.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let fast = JointTrajectory::through(&[a, b], &l, &PlanOptions::default()).unwrap();
        let w = [
            JointWaypoint {
                dwell_s: 0.5,
                ..a.into()
            },
            JointWaypoint {
                speed_scale: Some(0.5),
                ..b.into()
            },
        ];
        let slow = JointTrajectory::plan(&w, &l, &PlanOptions::default(), None).unwrap();
        assert_eq!(slow.segments()[0].kind, SegmentKind::Dwell);
        assert_eq!(slow.arrival_times(), &[0.0, slow.duration()]);
        // The waypoint's scale acts like the program's speed scale on that segment.
        let half = PlanOptions {
            speed_scale: 0.5,
            ..PlanOptions::default()
        };
        let half = JointTrajectory::through(&[a, b], &l, &half).unwrap();
        assert!(half.duration() > 1.4 * fast.duration());
        assert!((slow.duration() - 0.5 - half.duration()).abs() < 1e-12);
        assert_eq!(slow.sample(0.3).q, a);
        assert_eq!(slow.sample(0.3).qd, [0.0; 6]);
    }

    /// Runs a playback on the given cycle lengths, calling `events(k, &mut pb)` before each step.
    fn run_playback(
        pb: &mut Playback,
        dts: &[f64],
        mut events: impl FnMut(usize, &mut Playback),
    ) -> (Vec<Joints>, Vec<f64>, Vec<PlaybackSample>) {
        let mut qs = vec![pb.trajectory().sample(0.0).q];
        let mut used = vec![DT];
        let mut out = vec![];
        for k in 0..200_000 {
            events(k, pb);
            let dt = dts[k % dts.len()];
            let s = pb.step(dt);
            qs.push(s.q);
            used.push(dt);
            out.push(s);
            if s.state.is_final() {
                break;
            }
        }
        (qs, used, out)
    }

    #[test]
    fn playback_runs_to_done_and_passes_waypoints() {
        let l = TrajLimits::irb120();
        let wps = program();
        let tr = JointTrajectory::through(&wps, &l, &PlanOptions::default()).unwrap();
        let mut pb = Playback::new(tr.clone());
        let (qs, _, out) = run_playback(&mut pb, &[DT], |_, _| {});
        let last = out.last().unwrap();
        assert_eq!(last.state, PlaybackState::Done);
        assert_eq!(last.progress, 1.0);
        assert_eq!(last.q, *wps.last().unwrap());
        // Progress is monotone; every waypoint is passed (the trajectory stops on it, and the
        // 4 ms samples bracket the stop: the closest sample is within a rest-phase step).
        assert!(out.windows(2).all(|w| w[1].progress >= w[0].progress));
        for (i, wp) in wps.iter().enumerate() {
            let best = qs
                .iter()
                .map(|q| (0..6).map(|j| (q[j] - wp[j]).abs()).fold(0.0, f64::max))
                .fold(f64::INFINITY, f64::min);
            // Within 4 ms of a stop at ≤ a·t: ½·a·(4 ms)² ≈ 1.4e-4 rad.
            assert!(best < 2e-4, "waypoint {i}: closest {best} rad");
        }
    }

    /// Pause at mid-cruise, resume, pause during a deceleration, resume during the ramp,
    /// then stop: robot-io's first and second differences stay within the raw limits.
    fn pause_resume_stop_case(dts: &[f64]) -> (f64, f64, Vec<PlaybackSample>) {
        let l = TrajLimits::irb120();
        let wps = program();
        // Trapezoids: a pause during the deceleration then meets a plan already braking at
        // its full budget (checked below).
        let tr = JointTrajectory::through(&wps, &l, &trapezoids()).unwrap();
        let t1 = tr.arrival_times()[1];
        let t2 = tr.arrival_times()[2];
        let mut pb = Playback::new(tr);
        let (mut phase, mut count) = (0, 0);
        let wp1 = wps[1];
        let (qs, used, out) = run_playback(&mut pb, dts, |k, pb| {
            let tau = pb.tau();
            let st = pb.state();
            match (phase, st) {
                // Pause at cruise speed, stand still, resume.
                (0, PlaybackState::Running) if k == 100 => {
                    pb.pause();
                    phase = 1;
                }
                (1 | 3, PlaybackState::Paused) => {
                    count += 1;
                    if count == 50 {
                        if phase == 3 {
                            // Paused during the deceleration: the trajectory was already
                            // braking at full budget, so it stops at waypoint 1 (give or
                            // take the last cycle's creep).
                            let q = pb.step(0.0).q;
                            for j in 0..6 {
                                assert!((q[j] - wp1[j]).abs() < 1e-3, "{q:?}");
                            }
                        }
                        pb.resume();
                        count = 0;
                        phase += 1;
                    }
                }
                (2, PlaybackState::Running) if tau > t1 - 0.1 && tau < t1 => {
                    pb.pause();
                    phase = 3;
                }
                // Pause while accelerating away, resume in the middle of the ramp.
                (4, PlaybackState::Running) if tau > t2 + 0.1 => {
                    pb.pause();
                    phase = 5;
                }
                (5, PlaybackState::Pausing) => {
                    count += 1;
                    if count == 5 {
                        assert!(pb.rate() < 1.0 && pb.rate() > 0.0);
                        pb.resume();
                        phase = 6;
                    }
                }
                (6, PlaybackState::Running) if tau > t2 + 0.6 => {
                    pb.stop();
                    phase = 7;
                }
                _ => {}
            }
        });
        assert_eq!(phase, 7, "every event happened");
        let (rv, ra) = robot_io_ratios(&qs, &used, &l.v_max, &l.a_max);
        (rv, ra, out)
    }

    #[test]
    fn pause_resume_stop_ramps_respect_limits() {
        let (rv, ra, out) = pause_resume_stop_case(&[DT]);
        assert!(rv <= 1.0, "speed ratio {rv}");
        // On a uniform grid the ramps keep the planned budget (small sampling error allowed).
        assert!(ra <= ACCEL_SAFETY * 1.05, "accel ratio {ra}");
        let states: Vec<PlaybackState> = out.iter().map(|s| s.state).collect();
        for s in [
            PlaybackState::Pausing,
            PlaybackState::Paused,
            PlaybackState::Stopping,
        ] {
            assert!(states.contains(&s), "{s:?} never reached");
        }
        let last = out.last().unwrap();
        assert_eq!(last.state, PlaybackState::Stopped);
        assert_eq!(last.rate, 0.0);
        assert_eq!(last.qd, [0.0; 6]);
        assert!(last.progress < 1.0 && last.progress > 0.0);
        // The model's own acceleration (q''r² + q'ṙ) stays within the budget.
        let l = TrajLimits::irb120();
        for s in &out {
            for j in 0..6 {
                assert!(s.qdd[j].abs() <= ACCEL_SAFETY * l.a_max[j] * (1.0 + 1e-9));
                assert!(s.qd[j].abs() <= SPEED_SAFETY * l.v_max[j] * (1.0 + 1e-9));
            }
        }
        for seed in 0..10 {
            let (rv, ra, _) = pause_resume_stop_case(&cycles(1000, 0.0005, seed));
            assert!(rv <= 1.0, "seed {seed}: speed ratio {rv}");
            assert!(ra <= 1.0, "seed {seed}: accel ratio {ra}");
        }
    }

    #[test]
    fn pause_at_full_speed_takes_speed_over_accel() {
        let l = TrajLimits::irb120();
        let a = d([0.0; 6]);
        let b = d([150.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let tr = JointTrajectory::through(&[a, b], &l, &PlanOptions::default()).unwrap();
        let mid = tr.duration() / 2.0;
        let v = tr.sample(mid).qd[0];
        let mut pb = Playback::new(tr);
        while pb.tau() < mid {
            pb.step(DT);
        }
        let tau0 = pb.tau();
        pb.pause();
        let mut n = 0;
        while pb.state() == PlaybackState::Pausing {
            pb.step(DT);
            n += 1;
        }
        assert_eq!(pb.state(), PlaybackState::Paused);
        // Cruising (q'' = 0): ṙ = −A/|q'|, so the ramp takes v/A and covers v²/(2A).
        let acc = ACCEL_SAFETY * l.a_max[0];
        let ramp = v / acc;
        assert!(
            ((n as f64) * DT - ramp).abs() <= DT,
            "{n} cycles vs {ramp} s"
        );
        let dist = (pb.tau() - tau0) * v;
        assert!(
            (dist - v * v / (2.0 * acc)).abs() < v * DT,
            "braking distance {dist}"
        );
        // Paused: nothing moves; stop from paused is immediate.
        let q = pb.step(DT).q;
        assert_eq!(pb.step(DT).q, q);
        assert_eq!(pb.stop(), PlaybackState::Stopped);
        assert_eq!(pb.step(DT).q, q);
        assert_eq!(pb.resume(), PlaybackState::Stopped);
    }

    #[test]
    fn playback_ignores_bad_dt_and_zero_length_program() {
        let l = TrajLimits::irb120();
        let a = d([0.0; 6]);
        let mut pb =
            Playback::new(JointTrajectory::through(&[a], &l, &PlanOptions::default()).unwrap());
        assert_eq!(pb.state(), PlaybackState::Done);
        assert_eq!(pb.step(DT).q, a);
        let b = d([10.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let mut pb =
            Playback::new(JointTrajectory::through(&[a, b], &l, &PlanOptions::default()).unwrap());
        for dt in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let s = pb.step(dt);
            assert_eq!(s.tau, 0.0);
            assert_eq!(s.q, a);
        }
    }

    #[test]
    fn cartesian_lines_are_straight_bounded_and_exact() {
        let p0 = Isometry3::from_parts(
            Translation3::new(0.4, 0.0, 0.5),
            UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
        );
        let p1 = Isometry3::from_parts(
            Translation3::new(0.4, 0.2, 0.4),
            UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.3, 0.5),
        );
        let lim = CartesianLimits::default();
        let tr = CartesianTrajectory::plan(&[p0, p1, p0], &lim, 1.0).unwrap();
        assert_eq!(tr.sample(tr.duration()).pose, p0);
        assert_eq!(tr.sample(tr.arrival_times()[1]).pose, p1);
        let dir = (p1.translation.vector - p0.translation.vector).normalize();
        let mut t = 0.0;
        while t < tr.arrival_times()[1] {
            let s = tr.sample(t);
            let off = s.pose.translation.vector - p0.translation.vector;
            assert!((off - dir * off.dot(&dir)).norm() < 1e-12, "off the line");
            assert!(s.speed_m_s <= lim.v_m_s + 1e-12);
            t += DT;
        }
        let e = CartesianTrajectory::plan(&[], &lim, 1.0).unwrap_err();
        assert_eq!(e, TrajError::Empty);
        let bad = CartesianLimits { v_m_s: 0.0, ..lim };
        assert!(CartesianTrajectory::plan(&[p0], &bad, 1.0)
            .unwrap_err()
            .to_string()
            .contains("cartesian.v_m_s"));
    }

    #[test]
    fn cartesian_fit_slows_down_fast_joint_segments() {
        let p0 = Isometry3::translation(0.4, -0.2, 0.5);
        let p1 = Isometry3::translation(0.4, 0.2, 0.5);
        let lim = CartesianLimits::default();
        let mut tr = CartesianTrajectory::plan(&[p0, p1], &lim, 1.0).unwrap();
        let before = tr.duration();
        let l = TrajLimits::irb120();
        // A fake "IK": joint 0 turns 20 rad per metre of y (far faster than A1 can follow).
        let ik = |p: &Isometry3<f64>| Some([20.0 * p.translation.y, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let rep = tr.fit_joint_limits(ik, &l, DT).unwrap();
        assert!(rep.slowdown[0] > 1.0, "{rep:?}");
        assert!(
            rep.speed_ratio <= 1.0 + 1e-6 && rep.accel_ratio <= 1.0 + 1e-6,
            "{rep:?}"
        );
        assert!(tr.duration() > before);
        assert_eq!(tr.sample(tr.duration()).pose, p1);
        // Sample the fitted line the way robot-io would see it.
        let mut qs = vec![];
        let mut t = 0.0;
        while t < tr.duration() + 0.02 {
            qs.push(ik(&tr.sample(t).pose).unwrap());
            t += DT;
        }
        let (rv, ra) = robot_io_ratios(&qs, &vec![DT; qs.len()], &l.v_max, &l.a_max);
        assert!(rv <= 1.0 && ra <= 1.0, "{rv} {ra}");
        // An IK failure and a configuration flip are errors.
        let mut tr2 = CartesianTrajectory::plan(&[p0, p1], &lim, 1.0).unwrap();
        assert!(matches!(
            tr2.fit_joint_limits(|_| None, &l, DT),
            Err(TrajError::IkFailed { segment: 0, .. })
        ));
        let flip = |p: &Isometry3<f64>| {
            Some([
                if p.translation.y > 0.0 { 3.0 } else { 0.0 },
                0.0,
                0.0,
                0.0,
                0.0,
                0.0,
            ])
        };
        assert!(matches!(
            tr2.fit_joint_limits(flip, &l, DT),
            Err(TrajError::JointJump { joint: 0, .. })
        ));
    }

    fn joints_in(l: &TrajLimits) -> impl Strategy<Value = Joints> {
        let l = *l;
        proptest::array::uniform6(0.0f64..1.0)
            .prop_map(move |u| std::array::from_fn(|j| l.min[j] + u[j] * (l.max[j] - l.min[j])))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn prop_random_programs_respect_limits(
            wps in proptest::collection::vec(joints_in(&TrajLimits::irb120()), 1..6),
            vscale in proptest::array::uniform6(0.2f64..3.0),
            ascale in proptest::array::uniform6(0.2f64..3.0),
            speed in 0.05f64..1.0,
            seed in 0u64..1000,
        ) {
            let mut l = TrajLimits::irb120();
            for j in 0..6 {
                l.v_max[j] *= vscale[j];
                l.a_max[j] *= ascale[j];
            }
            let o = PlanOptions { speed_scale: speed, ..PlanOptions::default() };
            let tr = JointTrajectory::through(&wps, &l, &o).unwrap();
            prop_assert_eq!(tr.sample(tr.duration()).q, *wps.last().unwrap());
            for (i, t) in tr.arrival_times().iter().enumerate() {
                prop_assert_eq!(tr.sample(*t).q, wps[i]);
            }
            // Within the position limits everywhere.
            let mut t = 0.0;
            while t <= tr.duration() {
                let q = tr.sample(t).q;
                for j in 0..6 {
                    prop_assert!(q[j] >= l.min[j] && q[j] <= l.max[j]);
                }
                t += 0.01;
            }
            let dts = cycles(4000, 0.0005, seed);
            let (qs, used) = sample_on(&tr, &dts);
            let (rv, ra) = robot_io_ratios(&qs, &used, &l.v_max, &l.a_max);
            prop_assert!(rv <= 1.0, "speed ratio {}", rv);
            prop_assert!(ra <= 1.0, "accel ratio {}", ra);
        }

        #[test]
        fn prop_pause_resume_anywhere_respects_limits(
            wps in proptest::collection::vec(joints_in(&TrajLimits::irb120()), 2..4),
            pause_at in 0.0f64..1.0,
            hold in 0usize..30,
            stop_after in 0usize..400,
            seed in 0u64..1000,
        ) {
            let l = TrajLimits::irb120();
            let tr = JointTrajectory::through(&wps, &l, &PlanOptions::default()).unwrap();
            let pause_tau = pause_at * tr.duration();
            let mut pb = Playback::new(tr);
            let mut paused = 0;
            let mut resumed_at = None;
            let dts = cycles(1000, 0.0005, seed);
            let (qs, used, out) = run_playback(&mut pb, &dts, |k, pb| {
                match pb.state() {
                    PlaybackState::Running if resumed_at.is_none() && pb.tau() >= pause_tau => {
                        pb.pause();
                    }
                    PlaybackState::Paused => {
                        paused += 1;
                        if paused > hold {
                            pb.resume();
                            resumed_at = Some(k);
                        }
                    }
                    PlaybackState::Running if resumed_at.is_some_and(|r| k == r + stop_after) => {
                        pb.stop();
                    }
                    _ => {}
                }
            });
            let (rv, ra) = robot_io_ratios(&qs, &used, &l.v_max, &l.a_max);
            prop_assert!(rv <= 1.0, "speed ratio {}", rv);
            prop_assert!(ra <= 1.0, "accel ratio {}", ra);
            let last = out.last().unwrap();
            prop_assert!(last.state.is_final());
            if last.state == PlaybackState::Done {
                prop_assert_eq!(last.q, *wps.last().unwrap());
                prop_assert_eq!(last.progress, 1.0);
            }
        }
    }
}
