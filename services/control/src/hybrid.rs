//! Raibert & Craig's hybrid position/force control (1981), as one pure law with two output
//! stages. No bus, no clock: time and dt are parameters.
//!
//! # The law ([`HybridLaw`]), per axis k of the constraint frame {C}
//! Errors are formed in {C} (the caller transforms measured pose and wrench into {C}):
//!
//! ```text
//! position axes (s_k = 0):  u_pos = v_ff·ṙ + kp·e + ki·∫e + kd·ė      e = r − x (displacement)
//! force axes    (s_k = 1):  u_f   = ff·FF(F_d) + kp_f·e_f + ki_f·∫sat(e_f, ±limit_n)
//!                                                                     e_f = F_d − F (applied)
//! output                 :  u = (I − S)·u_pos + S·u_f
//! ```
//!
//! `sat` is the paper's **saturation-type feedback limiter**: the force error entering the
//! integral is clamped, so a large error (a step, first contact) integrates at a bounded rate —
//! a lower effective integral gain — while small errors integrate fully and break through the
//! Coulomb friction. The integral is also frozen whenever the output is at its bound
//! (anti-windup). `kd_f` on a force axis is optional active damping (velocity feedback); the
//! paper used none ("damping is mechanical").
//!
//! # Output stages
//! * **Arm** (position-controlled, EGM) — [`ArmRun`]: `u` is a TCP velocity in {C} (m/s,
//!   rad/s). The force feedforward is the velocity that makes the reference force change at
//!   its planned rate against the identified contact stiffness, `FF = Ḟ_d / K_e` (a constant
//!   force needs no velocity); the position feedforward is the reference velocity `ṙ`. The
//!   velocity is rotated to base and integrated into the commanded TCP pose, which the
//!   kinematics servo turns into joint references within its lead bound.
//! * **Plant** (torque-controlled, the paper's 2-DOF arm) — [`PlantRun`]: `u` is a force at
//!   the hand in {C} (N); `FF = F_d` (drive the joints with the desired force, the paper's
//!   feedforward) and the position law's `kd` term acts on the measured velocity error
//!   `ṙ − ẋ`. Joint efforts `τ = Jᵀ·R_C·u`.
//!
//! # Gains that follow the environment (arm)
//! A velocity-resolved force loop against a contact of stiffness `K_e` with an effective loop
//! delay `T` (≈ 30 ms through EGM, `algorithms.md` §D) is a first-order loop of gain
//! `kp_f·K_e` with a delay: stable for `kp_f·K_e·T < π/2`, and well damped well below. The
//! default is `kp_f = c / (K_e·T)` with `c = 0.3` (loop gain 10 s⁻¹ at 30 ms: a 0.1 s force
//! time constant, a factor 5 below the stability bound), `ki_f = 2 s⁻¹ · kp_f` (removes the
//! error of a moving surface, `v/kp_f`, in about half a second), `limit_n = 5 N`.
//! [`default_arm_gains`] implements the rule; `K_e` comes from `cell identify stiffness`.

// Per-axis laws read best with the axis index k (as in the paper's notation).
#![allow(clippy::needless_range_loop)]

use common::msg::{
    FrameKind, HybridGains, HybridLimits, HybridPhase, HybridTask, Pose, Profile, ProtectiveCause,
    StopCategory, TaskRobot,
};
use nalgebra::{Isometry3, Matrix2, Rotation2, Translation3, UnitQuaternion, Vector2, Vector3};

/// Axis names of {C}.
pub const AXES: [&str; 6] = ["x", "y", "z", "rx", "ry", "rz"];

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

/// One step's inputs to the law, all in {C}.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LawInput {
    /// Position error `r − x` (m, rad).
    pub e_pos: [f64; 6],
    /// Reference velocity `ṙ` (m/s, rad/s).
    pub v_ref: [f64; 6],
    /// Measured velocity, when the stage measures it (else the error is differenced).
    pub v_meas: Option<[f64; 6]>,
    /// Force reference (applied by the tool) and its planned rate.
    pub f_ref: [f64; 6],
    pub f_ref_rate: [f64; 6],
    /// Measured applied force.
    pub f_meas: [f64; 6],
}

/// What the force feedforward is on an output stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Feedforward {
    /// Velocity output: `Ḟ_d / K_e` per axis (K_e per axis, N/m or N·m/rad).
    RateOverStiffness([f64; 6]),
    /// Force output: `F_d`.
    Force,
}

/// Force error at which the friction feedforward reaches 76 % (tanh 1) of its value (N).
pub const FRICTION_FF_SCALE_N: f64 = 0.25;

/// The hybrid law's state: integrals and the previous error (for the derivative).
#[derive(Debug, Clone, PartialEq)]
pub struct HybridLaw {
    pub selection: [bool; 6],
    pub gains: HybridGains,
    pub ff: Feedforward,
    /// Output bound per axis (speed limits, effort bound); the integral stops growing at it.
    pub out_limit: [f64; 6],
    /// Whether the position law adds `ṙ` (velocity stages) — a force stage feeds it through kd.
    pub velocity_feedforward: bool,
    int_pos: [f64; 6],
    int_f: [f64; 6],
    prev_e: Option<[f64; 6]>,
    limited: u8,
}

impl HybridLaw {
    pub fn new(
        selection: [bool; 6],
        gains: HybridGains,
        ff: Feedforward,
        out_limit: [f64; 6],
        velocity_feedforward: bool,
    ) -> Self {
        Self {
            selection,
            gains,
            ff,
            out_limit,
            velocity_feedforward,
            int_pos: [0.0; 6],
            int_f: [0.0; 6],
            prev_e: None,
            limited: 0,
        }
    }

    /// Bit k: the force error of axis k was beyond the limiter on the last step.
    pub fn limited(&self) -> u8 {
        self.limited
    }

    /// Forgets the force integral of every force axis (contact lost: approach afresh).
    pub fn reset_force_integral(&mut self) {
        self.int_f = [0.0; 6];
    }

    /// Changes force axis `k`'s gains to `kp_f`, `ki_f` without a bump: the integral is
    /// re-scaled so that its contribution `ki_f·∫` — what the loop has learnt (a moving
    /// surface's speed, friction) — stays what it was. The proportional part changes with the
    /// gain; on the arm the output is a velocity integrated into the commanded pose, so the
    /// pose stays continuous. (Keeping `kp_f·e_f + ki_f·∫` instead would move a transient's
    /// proportional action into the integral, to be unwound later as an overshoot.)
    pub fn retune_force_axis(&mut self, k: usize, kp_f: f64, ki_f: f64) {
        if k >= 6 || !(kp_f.is_finite() && ki_f.is_finite() && kp_f >= 0.0 && ki_f >= 0.0) {
            return;
        }
        let g = &mut self.gains;
        let contribution = g.ki_f[k] * self.int_f[k];
        self.int_f[k] = if ki_f > 0.0 { contribution / ki_f } else { 0.0 };
        if !self.int_f[k].is_finite() {
            self.int_f[k] = 0.0;
        }
        g.kp_f[k] = kp_f;
        g.ki_f[k] = ki_f;
    }

    /// The force integral's contribution to axis `k`'s output (`ki_f·∫`).
    pub fn force_integral_output(&self, k: usize) -> f64 {
        self.gains.ki_f.get(k).copied().unwrap_or(0.0) * self.int_f.get(k).copied().unwrap_or(0.0)
    }

    /// One step over `dt` (s). `integrate_force = false` freezes the force integral (no
    /// contact yet). Returns `u` in {C}; never NaN for finite inputs.
    pub fn step(&mut self, i: &LawInput, dt: f64, integrate_force: bool) -> [f64; 6] {
        let g = self.gains;
        let mut u = [0.0; 6];
        self.limited = 0;
        let de = match (i.v_meas, self.prev_e) {
            (Some(v), _) => {
                let mut d = [0.0; 6];
                for k in 0..6 {
                    d[k] = i.v_ref[k] - v[k];
                }
                d
            }
            (None, Some(p)) if dt > 0.0 => {
                let mut d = [0.0; 6];
                for k in 0..6 {
                    d[k] = (i.e_pos[k] - p[k]) / dt;
                }
                d
            }
            _ => [0.0; 6],
        };
        self.prev_e = Some(i.e_pos);
        for k in 0..6 {
            let lim = self.out_limit[k];
            if self.selection[k] {
                let e = i.f_ref[k] - i.f_meas[k];
                let ff = match self.ff {
                    Feedforward::RateOverStiffness(ke) => {
                        if ke[k] > 0.0 {
                            i.f_ref_rate[k] / ke[k]
                        } else {
                            0.0
                        }
                    }
                    Feedforward::Force => i.f_ref[k],
                } * g.feedforward;
                let sat = e.clamp(-g.limit_n[k], g.limit_n[k]);
                if sat != e {
                    self.limited |= 1 << k;
                }
                let damping = match i.v_meas {
                    Some(v) => -g.kd_f[k] * v[k],
                    None => 0.0,
                };
                let friction = g.friction_n[k] * (e / FRICTION_FF_SCALE_N).tanh();
                let base = ff + g.kp_f[k] * e + damping + friction;
                let mut int = self.int_f[k];
                if integrate_force {
                    let cand = int + sat * dt;
                    let out = base + g.ki_f[k] * cand;
                    // Anti-windup: integrate only while the output is inside its bound, or
                    // when the integration moves it back inside.
                    if out.abs() <= lim || (out.abs() < (base + g.ki_f[k] * int).abs()) {
                        int = cand;
                    }
                }
                self.int_f[k] = int;
                u[k] = (base + g.ki_f[k] * int).clamp(-lim, lim);
            } else {
                let e = i.e_pos[k];
                let ff = if self.velocity_feedforward {
                    i.v_ref[k]
                } else {
                    0.0
                };
                let base = ff + g.kp[k] * e + g.kd[k] * de[k];
                let cand = self.int_pos[k] + e * dt;
                let out = base + g.ki[k] * cand;
                if out.abs() <= lim {
                    self.int_pos[k] = cand;
                }
                u[k] = (base + g.ki[k] * self.int_pos[k]).clamp(-lim, lim);
            }
            if !u[k].is_finite() {
                u[k] = 0.0;
            }
        }
        u
    }
}

/// The arm's force-loop design point `kp_f·K_e·T` (see the module docs).
pub const ARM_LOOP_GAIN_DELAY: f64 = 0.3;

/// The contact stiffness a force gain was designed for, by the same rule (`K_e = c/(kp_f·T)`):
/// a task that brings its own gains gets its approach speed and feedforward from them.
pub fn stiffness_of_gain(kp_f: f64, delay_s: f64) -> Option<f64> {
    (kp_f > 0.0 && delay_s > 0.0).then(|| ARM_LOOP_GAIN_DELAY / (kp_f * delay_s))
}

/// Default gains on the arm for contact stiffness `k_e` (N/m, per translational axis of {C})
/// and effective loop delay `delay_s`. See the module docs for the rule.
pub fn default_arm_gains(k_e: [f64; 3], k_rot: [f64; 3], delay_s: f64) -> HybridGains {
    const C: f64 = ARM_LOOP_GAIN_DELAY;
    const W_I: f64 = 2.0;
    let mut g = HybridGains {
        kp: [5.0; 6],
        ki: [0.0; 6],
        kd: [0.0; 6],
        kp_f: [0.0; 6],
        ki_f: [0.0; 6],
        kd_f: [0.0; 6],
        limit_n: [5.0, 5.0, 5.0, 0.5, 0.5, 0.5],
        feedforward: 1.0,
        friction_n: [0.0; 6],
    };
    for k in 0..6 {
        let ke = if k < 3 { k_e[k] } else { k_rot[k - 3] };
        g.kp_f[k] = C / (ke.max(1.0) * delay_s.max(1e-3));
        g.ki_f[k] = W_I * g.kp_f[k];
    }
    g
}

/// Default gains on the 2-DOF plant (torque-controlled; x, y of {C} only), chosen on the
/// model at 60 Hz (`tests/tests/hybrid_model.rs`, figures in `docs/hybrid.md`):
/// * position (C_y, effective mass ≈ 8 kg across the boom at r = 0.55 m): kp 2000 N/m,
///   ki 500 N/(m·s), kd 150 N·s/m — ≈ 16 rad/s, critically damped;
/// * force: feedforward 0.6·F_d (a full feedforward step rings the 24 Hz boom mode),
///   kp_f 0.1, ki_f 15 s⁻¹ with the limiter at 3 N (breaks the 4 N static friction of a 1 N
///   step in ≈ 0.15 s), kd_f 40 N·s/m active damping, and 1 N of Coulomb-friction
///   feedforward — below the plant's 3 N so that halving the friction does not
///   over-compensate it (at 2 N the halved plant went unstable).
pub fn default_plant_gains() -> HybridGains {
    HybridGains {
        kp: [2000.0, 2000.0, 0.0, 0.0, 0.0, 0.0],
        ki: [500.0, 500.0, 0.0, 0.0, 0.0, 0.0],
        kd: [150.0, 150.0, 0.0, 0.0, 0.0, 0.0],
        kp_f: [0.1, 0.1, 0.0, 0.0, 0.0, 0.0],
        ki_f: [15.0, 15.0, 0.0, 0.0, 0.0, 0.0],
        kd_f: [40.0, 40.0, 0.0, 0.0, 0.0, 0.0],
        limit_n: [3.0, 3.0, 0.0, 0.0, 0.0, 0.0],
        feedforward: 0.6,
        friction_n: [1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    }
}

/// The stiffest contact a cell declares it may meet, by default (N/m): steel on steel through
/// a stiff tool (`[control.hybrid] worst_case_stiffness_n_per_m`).
pub const DEFAULT_WORST_CASE_STIFFNESS_N_PER_M: f64 = 1e6;
/// How far speed adaptation may hold a task's reference clock behind by default (s;
/// `[control.hybrid] max_reference_lag_s`): the pad → steel slide measured ≈ 15 s.
pub const DEFAULT_MAX_REFERENCE_LAG_S: f64 = 60.0;

/// The cell's speed bound on a task's translational position axes by default (m/s;
/// `[control.hybrid] position_speed_m_s`).
pub const DEFAULT_POSITION_SPEED_M_S: f64 = 0.25;
/// The same for rotational position axes (rad/s; `position_speed_rad_s`).
pub const DEFAULT_POSITION_SPEED_RAD_S: f64 = 1.0;

/// The per-axis speed bounds hold on the norm of each group's vector (issue 41 item 5: a
/// task moving along three axes at once went √3× its bound along the diagonal): the
/// translational force axes, the translational position axes, and the same two groups of
/// rotational axes, each scaled down as a whole (the direction kept) to its smallest bound.
pub fn clamp_norms(u: &mut [f64; 6], force_axes: &[bool; 6], bound: &[f64; 6]) {
    for base in [0, 3] {
        for force in [true, false] {
            let in_group = |k: &usize| force_axes[*k] == force;
            let n = (base..base + 3).filter(in_group).count();
            let lim = (base..base + 3)
                .filter(in_group)
                .map(|k| bound[k])
                .fold(f64::INFINITY, f64::min);
            let norm = (base..base + 3)
                .filter(in_group)
                .map(|k| u[k] * u[k])
                .sum::<f64>()
                .sqrt();
            if n > 1 && lim.is_finite() && lim >= 0.0 && norm > lim {
                let scale = lim / norm;
                for k in (base..base + 3).filter(in_group) {
                    u[k] *= scale;
                }
            }
        }
    }
}

/// The approach speed's design fraction of the setpoint: `v ≤ c·|F_d|/(K_e·T)`
/// ([`ArmRun::approach_speed`]).
pub const APPROACH_SETPOINT_FRACTION: f64 = 0.5;
/// Seating ends when the force first reaches this fraction of its setpoint.
pub const SEATED_FRACTION: f64 = 0.9;
/// How long the arm moves on after the seating decides to stop, as a fraction of the loop
/// delay `T`, with the reference pulled back to the measured pose: the servo's transport
/// delay and its deceleration, not the tracking lag (which the pull-back removes).
pub const STOP_LAG_FRACTION: f64 = 0.5;
/// The acceleration (m/s²) of the command along a force axis while the seating stops it and
/// pulls it back to the measured pose, and while it starts again towards the surface after
/// such a stop. Pulled back in one cycle, the command's step (the tracking lag v·T) asked
/// the joints for more than robot-io allows (a whole demo's only limited replies without
/// faults: issue 21); at 1 m/s² the IRB 120's joints stay well inside their limits over its
/// workspace, and the pull-back of an approach's lag (≤ 0.1 mm) takes ≤ 20 ms.
pub const SEATING_STOP_ACCEL_M_S2: f64 = 1.0;
/// The angular deceleration a completed task's rotational position axes come to rest within
/// (rad/s²; `[control.ending] max_rot_accel_rad_s2`'s default).
pub const COMPLETION_ROT_ACCEL_RAD_S2: f64 = 2.0;
/// The first contact's overshoot on the cell's worst-case surface, as a fraction of the
/// setpoint: until the surface is known the approach moves no faster than
/// `c·|F_d| / (K_wc·STOP_LAG_FRACTION·T)`.
pub const APPROACH_PEAK_FRACTION: f64 = 0.3;
/// The seating's secant stiffness needs at least this travel (m) and this force rise (N)
/// between the touch and the seated pose.
pub const SECANT_MIN_DX_M: f64 = 1e-6;
pub const SECANT_MIN_DF_N: f64 = 1.0;
/// The seating's secant stiffness (N/m) from the touch `(x, F)` to the seated step
/// `(x, filtered F, unfiltered peak F along the axis)`, when both rises are large enough.
///
/// The seated step's force is the larger of the filtered and the unfiltered reading: the
/// seating ends on the filtered force crossing [`SEATED_FRACTION`], which lags the contact's
/// rise (12 Hz: 20–26 ms), while the measured pose does not — paired with the pose, the
/// filtered force alone reads the surface softer than it is (on 10⁶ N/m after an 11 N first
/// contact: filtered 9.1 N against a true 10.9 N, a secant of 0.77·K, and gains 1.3× too
/// high). The unfiltered window peak carries no lag and errs high with the noise: the
/// secant errs stiff, which only slows the loop (and is clamped to the cell's worst case).
pub fn seat_secant(touch: (f64, f64), seated: (f64, f64, f64)) -> Option<f64> {
    let (x1, f1) = touch;
    let (x2, f_filtered, f_peak) = seated;
    let (dx, df) = (x2 - x1, f_filtered.max(f_peak) - f1);
    (dx > SECANT_MIN_DX_M && df > SECANT_MIN_DF_N).then(|| df / dx)
}

/// The approach speed's design fraction of the force limit on the worst-case stiffness:
/// `v ≤ c·max_force_n/(K_wc·T)`.
pub const APPROACH_MAX_FORCE_FRACTION: f64 = 0.5;

/// The cell's default ceiling on an arm task's position deviation (m): see [`default_limits`].
pub const DEFAULT_DEVIATION_M: f64 = 0.005;
/// The same about rotational position axes (rad, ≈ 2.9°).
pub const DEFAULT_DEVIATION_RAD: f64 = 0.05;
/// The 2-DOF R&C plant's default ceiling (m): Fig. 9's 30 cm sine on the plant's boom leads
/// its hand by up to 8.4 mm (measured) before the paper's contact bounce ends it.
pub const DEFAULT_PLANT_DEVIATION_M: f64 = 0.02;

/// Default limits (UR `force_mode`-like): approach at 5 mm/s, 50 N; a position axis more
/// than 5 mm (0.05 rad) off its reference is a protective stop. The deviation bound is a few
/// millimetres (issue 41): the shipped arm tasks reach 0.7 mm (press), 1.9 mm (contour), 0.05
/// mm (peg), 0.7 mm under two cycles of EGM jitter — a task that leaves its path by more is
/// no longer doing what it was written for, and 50 mm of wander is a collision.
pub fn default_limits() -> HybridLimits {
    HybridLimits {
        force_axis_speed_m_s: 0.005,
        force_axis_speed_rad_s: 0.05,
        deviation_m: DEFAULT_DEVIATION_M,
        deviation_rad: DEFAULT_DEVIATION_RAD,
        max_force_n: 50.0,
        max_torque_nm: 5.0,
        contact_threshold_n: 1.0,
        contact_loss_s: 0.1,
        // The travel bound (`approach_travel_m`) is what stops a dive; the timeout ends a search
        // that stalls, and leaves room for slow probing (`cell identify stiffness`: 0.1 mm/s).
        approach_timeout_s: 120.0,
        approach_travel_m: 0.05,
        reapproach_travel_m: 0.005,
        contact_travel_m: 0.02,
    }
}

/// Why a task ended by itself, and how it stops ([`StopCategory`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Abort {
    pub why: String,
    pub stop: StopCategory,
}

impl Abort {
    /// An end that comes to rest through a [`crate::ending::Ending`] that unloads the surface.
    pub fn controlled(why: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            stop: StopCategory::Controlled,
        }
    }
    /// A protective end: it stops at once, robot-io holds where the arm is measured.
    pub fn protective(cause: ProtectiveCause, why: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            stop: StopCategory::Protective(cause),
        }
    }
    /// The wrench could not be used: an impact (`Spike`) or a saturated sensor is protective
    /// (for safety a collision until proven otherwise); a gap or a missing tare is not.
    pub fn wrench(e: &crate::core::WrenchUnusable) -> Self {
        let why = format!("wrench estimate {e}");
        match e.protective_cause() {
            Some(c) => Self::protective(c, why),
            None => Self::controlled(why),
        }
    }
    /// A force or torque over the task's limit, a position axis pushed past its deviation
    /// limit, a non-finite input, an impact or a saturated sensor.
    pub fn is_protective(&self) -> bool {
        self.stop.is_protective()
    }
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// A task refused before it starts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskError {
    #[error("invalid task: {0}")]
    Invalid(String),
}

/// Contact phase and the force/torque limits, shared by both stages.
#[derive(Debug, Clone, PartialEq)]
pub struct Supervision {
    pub limits: HybridLimits,
    pub phase: HybridPhase,
    below_since: Option<f64>,
}

impl Supervision {
    pub fn new(limits: HybridLimits) -> Self {
        Self {
            limits,
            phase: HybridPhase::Approach,
            below_since: None,
        }
    }

    /// Updates the phase from the applied force on the force axes with a non-zero reference;
    /// checks the maximum contact force/torque (`f` the applied force vector, any frame).
    /// Returns whether the phase just became `ContactLost`.
    pub fn update(
        &mut self,
        t: f64,
        f_c: &[f64; 6],
        f_ref: &[f64; 6],
        sel: &[bool; 6],
        force_norm: f64,
        torque_norm: f64,
    ) -> Result<bool, Abort> {
        let l = &self.limits;
        if !(force_norm.is_finite() && torque_norm.is_finite()) {
            return Err(Abort::protective(
                ProtectiveCause::NonFinite,
                "non-finite wrench",
            ));
        }
        if force_norm > l.max_force_n {
            return Err(Abort::protective(
                ProtectiveCause::ForceLimit,
                format!(
                    "contact force {force_norm:.1} N > max {:.1} N",
                    l.max_force_n
                ),
            ));
        }
        if torque_norm > l.max_torque_nm {
            return Err(Abort::protective(
                ProtectiveCause::TorqueLimit,
                format!(
                    "contact torque {torque_norm:.2} N·m > max {:.2} N·m",
                    l.max_torque_nm
                ),
            ));
        }
        // Contact: any force axis pressing in its reference's direction with at least
        // `contact_threshold_n`, or half the reference when that is smaller.
        let threshold = |k: usize| {
            if f_ref[k] != 0.0 {
                l.contact_threshold_n.min(0.5 * f_ref[k].abs())
            } else {
                l.contact_threshold_n
            }
        };
        let dir = |k: usize| if f_ref[k] < 0.0 { -1.0 } else { 1.0 };
        // The axes that define contact: the force axes pressing (a non-zero reference). A
        // zero-reference force axis is compliance (a peg's lateral axes in its hole, a
        // contour's tangent): a wall it meets is not the surface the task presses on, so it
        // neither makes nor keeps a contact. With no pressing axis at all (every reference
        // zero, a ramp at its start) every force axis counts.
        let pressing_any = (0..6).any(|k| sel[k] && f_ref[k] != 0.0);
        let sel: [bool; 6] = std::array::from_fn(|k| sel[k] && (f_ref[k] != 0.0 || !pressing_any));
        let sel = &sel;
        let mut pressing = false;
        let mut any = false;
        for k in 0..6 {
            if !sel[k] {
                continue;
            }
            any = true;
            if dir(k) * f_c[k] >= threshold(k) {
                pressing = true;
            }
        }
        if !any {
            self.phase = HybridPhase::Contact;
            return Ok(false);
        }
        let mut lost_now = false;
        match self.phase {
            HybridPhase::Approach | HybridPhase::ContactLost => {
                if pressing {
                    self.phase = HybridPhase::Contact;
                    self.below_since = None;
                }
            }
            HybridPhase::Contact => {
                let weak = (0..6)
                    .filter(|k| sel[*k])
                    .all(|k| dir(k) * f_c[k] < 0.5 * threshold(k));
                if weak {
                    let since = *self.below_since.get_or_insert(t);
                    if t - since >= l.contact_loss_s {
                        self.phase = HybridPhase::ContactLost;
                        lost_now = true;
                    }
                } else {
                    self.below_since = None;
                }
            }
            HybridPhase::Done | HybridPhase::Aborted => {}
        }
        Ok(lost_now)
    }

    pub fn in_contact(&self) -> bool {
        self.phase == HybridPhase::Contact
    }
}

/// One step's report (a `HybridState` without stamp and ids).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepReport {
    pub t_s: f64,
    /// The law's clock (plant time, or the pose's source time).
    pub clock_s: f64,
    pub phase: HybridPhase,
    pub force_ref: [f64; 6],
    pub force: [f64; 6],
    pub position_ref: [f64; 6],
    pub position: [f64; 6],
    pub output: [f64; 6],
    pub limited: u8,
    /// The wrench was bridged over a gap in the samples (force axes frozen).
    pub bridged: bool,
    /// Seating: into the surface no faster than the approach until the setpoint is reached.
    pub seating: bool,
    pub frame_in_base: Pose,
    /// Per translational axis of {C}: the stiffness the force gains are made for now (N/m;
    /// 0 on a position axis).
    pub gains_for_n_per_m: [f64; 3],
    /// Per translational axis of {C}: the on-line stiffness estimate (N/m; 0 = none yet).
    pub stiffness_estimate_n_per_m: [f64; 3],
    /// The reference clock (s) and its rate (speed adaptation; 1 as planned).
    pub ref_time_s: f64,
    pub speed_scale: f64,
}

/// A peak that is not finite counts as unknown (the message check refuses one anyway).
/// Pure: the velocity (m/s) of this cycle for a command `e` (m, signed) away from where it
/// must come to rest, moving at `v0` (m/s) in the last cycle, with the acceleration bound `a`
/// (m/s²) and the cycle `dt` (s): as fast as it can brake to rest on the target (braking by
/// a·dt a cycle), never past it in one step, and within a·dt of `v0`.
pub fn stop_velocity(e: f64, v0: f64, a: f64, dt: f64) -> f64 {
    if !(dt > 0.0 && a > 0.0 && e.is_finite() && v0.is_finite()) {
        return 0.0;
    }
    let d = e.abs();
    let brake = a * dt * ((0.25 + 2.0 * d / (a * dt * dt)).sqrt() - 0.5);
    let v_des = e.signum() * brake.min(d / dt);
    v_des.clamp(v0 - a * dt, v0 + a * dt)
}

/// Pure: the part of an unfiltered peak *magnitude* `peak` (force, or torque for k ≥ 3)
/// that lies along axis `k` of {C}, taking off what the filtered force (or torque) `fc`
/// carries across it. A peg pressed against a hole's wall, or a tool sliding with friction,
/// carries a steady force across the pressing axis that is not the surface ahead; the filter
/// lags a rise, so an impact along the axis still counts in full.
pub fn along_axis(peak: f64, fc: &[f64; 6], k: usize) -> f64 {
    let b = (k / 3) * 3;
    let across2: f64 = (b..b + 3).filter(|j| *j != k).map(|j| fc[j] * fc[j]).sum();
    (peak * peak - across2).max(0.0).sqrt()
}

fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

fn pose_of(iso: &Isometry3<f64>) -> Pose {
    let q = iso.rotation.quaternion();
    Pose {
        position_m: iso.translation.vector.into(),
        quat_wxyz: [q.w, q.i, q.j, q.k],
    }
}

/// A pose message as an isometry (normalising the quaternion).
pub fn iso_of(p: &Pose) -> Isometry3<f64> {
    let [w, x, y, z] = p.quat_wxyz;
    Isometry3::from_parts(
        Translation3::from(Vector3::from(p.position_m)),
        UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(w, x, y, z)),
    )
}

fn split(v: &[f64; 6]) -> (Vector3<f64>, Vector3<f64>) {
    (
        Vector3::new(v[0], v[1], v[2]),
        Vector3::new(v[3], v[4], v[5]),
    )
}

fn join(a: &Vector3<f64>, b: &Vector3<f64>) -> [f64; 6] {
    [a.x, a.y, a.z, b.x, b.y, b.z]
}

/// Reference time for task time `t`: from the start, or from the first contact
/// (`from_contact`; 0 until contact).
fn ref_time(task: &HybridTask, t: f64, contact_s: Option<f64>) -> f64 {
    if task.from_contact {
        contact_s.map_or(0.0, |c| t - c)
    } else {
        t
    }
}

/// Shared per-task setup checks.
fn check_task(task: &HybridTask) -> Result<(), TaskError> {
    use common::msg::Check;
    task.check().map_err(TaskError::Invalid)
}

/// The arm stage's inputs for one robot cycle.
#[derive(Debug, Clone)]
pub struct ArmInput<'a> {
    /// Measured TCP in base.
    pub tcp: &'a Isometry3<f64>,
    /// The unfiltered peaks the force limits are checked on (the filtered `wrench_base` only
    /// when they are larger; zero when unknown).
    pub peak: WrenchPeak,
    /// Contact wrench on the tool at the TCP, base axes (the force service's `base`):
    /// `Err(why)` when the estimate is faulted or stale.
    pub wrench_base: crate::core::WrenchInput,
    /// Robot time (s).
    pub now_s: f64,
    /// The robot's cycle period (s) when the shell knows it: each step is one robot cycle, so
    /// the task's time and integrals advance by exactly one period per step (the host's jitter
    /// and stalls stay out of the references; see `guide::GuideInput::cycle_period_s`).
    /// `None`: the robot-clock difference (clamped to 50 ms).
    pub cycle_period_s: Option<f64>,
}

/// Swings within [`OSC_WINDOW_S`] that mean a force loop oscillates.
pub const OSC_SWINGS: usize = 4;
/// The oscillation observer's window (s).
pub const OSC_WINDOW_S: f64 = 1.0;

/// Observer of a force loop that oscillates (a limit cycle, a tool bouncing on a surface
/// stiffer than the gains were made for): on every force axis, the force (torque) error's
/// extrema are confirmed with a hysteresis of twice the amplitude `max(25 % of |F_ref|, 2 N)`
/// (rotational: `max(25 % of |τ_ref|, 0.2 N·m)`; an axis with a zero reference — compliant,
/// e.g. a peg's sides — with [`OSC_ZERO_REF_AMPLITUDE`]'s wider floor, as contact there comes
/// and goes); each confirmed extremum is a swing, and [`OSC_SWINGS`] swings within
/// [`OSC_WINDOW_S`] on any axis mean the loop oscillates (issue 41 item 8: the rotational and
/// the zero-reference axes were not watched). A step's overshoot and one
/// undershoot (the first contact on a stiff surface: 10 → −17 → +6 → −1 N of error) make at
/// most three; a 5 Hz chatter makes four in 0.4 s. Pure, allocation-free; time is a parameter.
#[derive(Debug, Clone, Copy, Default)]
pub struct OscillationWatch {
    axes: [SwingAxis; 6],
}

/// The swing amplitude floor on a force axis whose reference is zero: (N, N·m).
pub const OSC_ZERO_REF_AMPLITUDE: (f64, f64) = (5.0, 0.5);

#[derive(Debug, Clone, Copy, Default)]
struct SwingAxis {
    /// +1 tracking a maximum, −1 a minimum, 0 not yet decided.
    dir: i8,
    hi: f64,
    lo: f64,
    started: bool,
    /// Times of the last swings (ring).
    swings: [f64; OSC_SWINGS],
    n: usize,
}

impl SwingAxis {
    /// One error sample; returns whether this sample confirmed a swing.
    fn step(&mut self, t: f64, e: f64, band: f64) -> bool {
        if !self.started {
            *self = SwingAxis {
                started: true,
                hi: e,
                lo: e,
                ..Default::default()
            };
            return false;
        }
        let mut swing = false;
        match self.dir {
            1 => {
                if e > self.hi {
                    self.hi = e;
                } else if e < self.hi - band {
                    swing = true;
                    self.dir = -1;
                    self.lo = e;
                }
            }
            -1 => {
                if e < self.lo {
                    self.lo = e;
                } else if e > self.lo + band {
                    swing = true;
                    self.dir = 1;
                    self.hi = e;
                }
            }
            _ => {
                self.hi = self.hi.max(e);
                self.lo = self.lo.min(e);
                if e < self.hi - band {
                    // Fell from a maximum: a swing (its first extremum), now tracking down.
                    swing = true;
                    self.dir = -1;
                    self.lo = e;
                } else if e > self.lo + band {
                    swing = true;
                    self.dir = 1;
                    self.hi = e;
                }
            }
        }
        if swing {
            self.swings[self.n % OSC_SWINGS] = t;
            self.n += 1;
        }
        swing
    }

    /// Swings within the window ending at `t`.
    fn recent(&self, t: f64) -> usize {
        let n = self.n.min(OSC_SWINGS);
        self.swings[..n]
            .iter()
            .filter(|s| t - **s <= OSC_WINDOW_S)
            .count()
    }
}

impl OscillationWatch {
    /// One cycle: the applied wrench and its reference in {C}. Returns the axis (0..6) that
    /// oscillates and the swing amplitude band (N or N·m), if one does.
    pub fn step(
        &mut self,
        t: f64,
        f_c: &[f64; 6],
        f_ref: &[f64; 6],
        sel: &[bool; 6],
    ) -> Option<(usize, f64)> {
        for k in 0..6 {
            if !(sel[k] && f_c[k].is_finite() && f_ref[k].is_finite()) {
                continue;
            }
            let (floor, zero) = if k < 3 {
                (2.0, OSC_ZERO_REF_AMPLITUDE.0)
            } else {
                (0.2, OSC_ZERO_REF_AMPLITUDE.1)
            };
            let band = if f_ref[k] == 0.0 {
                2.0 * zero
            } else {
                2.0 * (0.25 * f_ref[k].abs()).max(floor)
            };
            let a = &mut self.axes[k];
            if a.step(t, f_ref[k] - f_c[k], band) && a.recent(t) >= OSC_SWINGS {
                return Some((k, band));
            }
        }
        None
    }
}

/// The force service's confirmed, unfiltered window peaks of the estimate in use
/// (`WrenchEstimate::peak_force_n`, `peak_torque_nm`): the force limits' input.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WrenchPeak {
    pub force_n: f64,
    pub torque_nm: f64,
    /// The wrench is the last usable estimate bridged over a gap in the samples (the force
    /// service flags `Stale`): force axes hold their command, the force integral stops.
    pub bridged: bool,
    /// The fast band of the oscillation watch (`WrenchEstimate::fast_swing_n`, N peak to
    /// peak; 0: none).
    pub fast_swing_n: f64,
}

/// The fast band of the oscillation watch for a task's force axes (N peak to peak): the
/// force service measures swings of the unfiltered force faster than the 12 Hz estimate
/// shows (`WrenchEstimate::fast_swing_n`); a task ends when they reach twice the slow watch's
/// amplitude on its translational force reference — `2·max(25 % of |F_ref|, 2 N)`, or
/// `2·OSC_ZERO_REF_AMPLITUDE` when that reference is zero. `None` without a translational
/// force axis.
pub fn fast_swing_band(f_ref: &[f64; 6], sel: &[bool; 6]) -> Option<f64> {
    if !sel[..3].iter().any(|s| *s) {
        return None;
    }
    let fr = (0..3)
        .filter(|k| sel[*k])
        .map(|k| f_ref[k] * f_ref[k])
        .sum::<f64>()
        .sqrt();
    Some(if fr == 0.0 {
        2.0 * OSC_ZERO_REF_AMPLITUDE.0
    } else {
        2.0 * (0.25 * fr).max(2.0)
    })
}

/// A hybrid task on the position-controlled arm.
#[derive(Debug, Clone)]
pub struct ArmRun {
    pub task: HybridTask,
    pub law: HybridLaw,
    pub sup: Supervision,
    /// The measured TCP (base) where the current search for the surface began: the task's
    /// start before the first contact, the TCP when a contact was declared lost after it.
    /// `None` while in contact.
    approach_from: Option<Vector3<f64>>,
    /// Net travel (m) along each translational axis of {C} since the first contact (the
    /// measured TCP's steps, each resolved along {C} as it was then, summed), and the TCP of
    /// the last step: bounded on the force axes by `limits.contact_travel_m`.
    contact_travel: [f64; 3],
    travel_prev: Option<Vector3<f64>>,
    /// Reference time (s) held back while a contact made is lost: the reference clock stops
    /// until the surface is found again (or the travel bound ends the search), so the
    /// position axes do not run on with the tool off its part.
    paused_s: f64,
    /// Task time (s) the current `ContactLost` began.
    lost_since: Option<f64>,
    /// The force loop's oscillation observer (from the first contact on).
    osc: OscillationWatch,
    /// Task time (s): the sum of the steps' dt.
    t_s: f64,
    /// The robot-clock time of the last step (`None`: the first step is yet to come; it
    /// spans no time, as the task starts at the measured pose of that cycle).
    last_s: Option<f64>,
    /// {C} in base (tracking: updated every step).
    frame: Isometry3<f64>,
    /// Desired pose (position axes integrate the references in it).
    desired: Isometry3<f64>,
    /// Commanded pose (integrated output).
    command: Isometry3<f64>,
    r_prev: [f64; 6],
    /// Displacement of the TCP since the start along {C} (for reports).
    start_tcp: Isometry3<f64>,
    done: bool,
    /// The stiffest contact the cell declares (N/m), for the approach speed.
    worst_case_n_per_m: f64,
    /// Seating: from the start (and from a bounce or contact loss) until every force axis with a
    /// non-zero reference has first reached [`SEATED_FRACTION`] of it. While seating in
    /// contact the force axes move into the surface no faster than the approach and the
    /// force integral stands still, so gains made for a softer surface cannot drive the
    /// first contact's force up before the loop has seen the setpoint.
    seating: bool,
    /// Effective loop delay (s), for the approach speed.
    loop_delay_s: f64,
    /// Task time of the first contact.
    contact_s: Option<f64>,
    /// Tracking: low-pass of the estimated normal (base), the TCP's velocity estimate.
    normal: Option<Vector3<f64>>,
    prev_p: Option<Vector3<f64>>,
    v_est: Vector3<f64>,
    /// On-line stiffness and the gains that follow it ([`ArmRun::with_adaptation`]).
    adapt: Option<Adaptation>,
    /// The unfiltered peak force and torque of the last cycle (the seating's rate of rise).
    prev_peak: Option<[f64; 2]>,
    /// Per translational axis: the seating stopped it (its command pulled back to the
    /// measured pose, within [`SEATING_STOP_ACCEL_M_S2`]).
    stopped: [bool; 3],
    /// Per translational axis: where the seating's stop is pulling the command back to
    /// (its coordinate along the axis of {C}, base metres), until it is there at rest.
    retract_to: [Option<f64>; 3],
    /// The last cycle's output (the velocities of the command along {C}), for the stop's
    /// acceleration bound.
    u_prev: [f64; 6],
    /// Per axis of {C}: the corner blend of its reference (s; 0 on force axes and profiles
    /// without corners), from [`profile_blend_s`] once per task.
    ref_blend_s: [f64; 6],
    /// Per translational axis: where the seating touched (the position along the axis, the
    /// unfiltered force), and the secant stiffness from there to the seated pose.
    touch: [Option<(f64, f64)>; 3],
    seat_secant: [Option<f64>; 3],
    /// The force reference's pre-filter (issue 20 item 3): per axis its value and rate, the
    /// time constant (s, 0 = none), and the filtered values of the last loop delay (task
    /// time, values) — the feedback compares the force with the reference as it was one loop
    /// delay ago, the feedforward drives the change now.
    pf: [(f64, f64); 6],
    pub prefilter_s: f64,
    pf_hist: std::collections::VecDeque<(f64, [f64; 6])>,
    /// Speed adaptation ([`ArmRun::with_speed_adaptation`]): the force error (N) a sudden
    /// stop of the force axes' current motion may cost (0: off), the scale of the reference
    /// clock now (1: as planned), how far that clock has fallen behind task time (s), and a
    /// low-pass of the translational force axes' output (m/s).
    pub slowdown_error_n: f64,
    /// The most the reference clock may fall behind task time (s; [`ArmRun::with_max_lag`]):
    /// past it the task ends with a named fault instead of stretching without end.
    pub max_lag_s: f64,
    speed: f64,
    lag_s: f64,
    u_lp: [f64; 3],
    /// Speed adaptation: per translational axis the stiffness the gains were made for last
    /// cycle, and the task time it last rose (the surface stiffening under the tool).
    k_prev: [f64; 3],
    k_rose_s: [f64; 3],
}

/// Speed adaptation: for this long after the gains' stiffness last rose under a sliding tool
/// (the surface stiffening, `[control.hybrid]` raise from the depth) the motion's cost is
/// taken at the cell's worst-case stiffness: a stiffening surface may keep stiffening up to
/// it, and the loop learns each rise only after the tool has met it.
pub const STIFFENING_MEMORY_S: f64 = 0.5;

/// Speed adaptation: the slowest the reference clock runs (a fraction of planned).
pub const MIN_SPEED_SCALE: f64 = 0.05;
/// Speed adaptation: how fast the clock's scale may fall and rise (1/s). Falling at 4/s
/// takes 20 mm/s to 4 mm/s in 0.2 s (a deceleration of 80 mm/s²); rising is slower, so a
/// stretch that needed it is left before the speed returns.
pub const SPEED_SCALE_FALL_PER_S: f64 = 4.0;
pub const SPEED_SCALE_RISE_PER_S: f64 = 1.0;
/// Speed adaptation: the low-pass of the force axes' motion it watches (s).
pub const SPEED_WATCH_TAU_S: f64 = 0.05;

/// Pure: what a sudden stop of a force axis' motion costs (N). The axis moves at `u_m_s`
/// (the surface moving under the sliding tool); if that motion had to stop at once (the
/// surface's slope or stiffness ends where the tool is), the force loop would be left with
/// the velocity error `|u|`, which its proportional gain `kp_f` ((m/s)/N) balances only at a
/// force error `|u|/kp_f` — on the surface its gains are made for (`k_now_n_per_m`); on a
/// surface `k_cost_n_per_m` stiffer than that, in proportion.
pub fn stop_cost_n(u_m_s: f64, kp_f: f64, k_now_n_per_m: f64, k_cost_n_per_m: f64) -> f64 {
    if !(kp_f > 0.0 && k_now_n_per_m > 0.0 && u_m_s.is_finite()) {
        return 0.0;
    }
    let c = u_m_s.abs() / kp_f * (k_cost_n_per_m / k_now_n_per_m).max(1.0);
    if c.is_finite() {
        c
    } else {
        0.0
    }
}

/// Pure: the reference clock's next scale (speed adaptation). `cost_n` is what a sudden stop
/// of each force axis' motion costs ([`stop_cost_n`]) at the clock's `scale` now; the motion
/// is proportional to the sliding speed, so the scale that keeps the largest cost at
/// `error_n` is `scale · error_n / cost`, within [[`MIN_SPEED_SCALE`], 1] and the fall/rise
/// rates over `dt`.
pub fn next_speed_scale(scale: f64, cost_n: &[f64], error_n: f64, dt: f64) -> f64 {
    if !(error_n > 0.0 && dt > 0.0 && scale.is_finite()) {
        return 1.0;
    }
    let cost = cost_n
        .iter()
        .copied()
        .filter(|c| c.is_finite())
        .fold(0.0, f64::max);
    let target = if cost > 0.0 {
        (scale * error_n / cost).clamp(MIN_SPEED_SCALE, 1.0)
    } else {
        1.0
    };
    target
        .clamp(
            scale - SPEED_SCALE_FALL_PER_S * dt,
            scale + SPEED_SCALE_RISE_PER_S * dt,
        )
        .clamp(MIN_SPEED_SCALE, 1.0)
}

/// Gains that follow the surface: per translational force axis an on-line stiffness
/// estimate ([`crate::stiffness`]); the axis' force gains are the task's scaled by
/// `made_for / scheduled` (the `kp_f = c/(K·T)` rule keeps its design point), retuned
/// bumplessly whenever the scheduled stiffness moves by more than [`RETUNE_FRACTION`].
#[derive(Debug, Clone)]
struct Adaptation {
    est: [crate::stiffness::StiffnessEstimator; 3],
    last: [crate::stiffness::StiffnessEstimate; 3],
    /// The stiffness the task's own gains were made for, and those gains.
    made_for: [f64; 3],
    kp_f0: [f64; 3],
    ki_f0: [f64; 3],
    /// The stiffness the gains are made for now.
    scheduled: [f64; 3],
    softest_n_per_m: f64,
    stiffest_n_per_m: f64,
    /// Per axis: where the surface is along it (into the surface positive, from the task's
    /// start) and how uncertain that is (m), from the spring model while the tool is still
    /// and the stiffness known (`x − F/K̂`).
    surface_x: [Option<(f64, f64)>; 3],
    /// Per axis: the stiffness was raised from the depth while sliding; the estimator
    /// starts afresh and the gains are not lowered until it is usable again.
    raised: [bool; 3],
    /// Whether the depth may raise the stiffness while sliding (see [`DEPTH_UNCERTAINTY_M`]).
    depth_raise: bool,
    /// Per axis: the tool presses on a surface at least as hard as the estimator's spring
    /// model needs (`StiffnessParams::min_force_n`) — before the supervisor's contact
    /// threshold, which the 12 Hz estimate reaches ≈ 0.1 s later on a soft surface.
    pressing: [bool; 3],
}

/// Sliding on a surface whose height does not change (a base or tool frame, not a tracking
/// one), the depth below where the surface was found tells the stiffness: `K = F/d`. It may
/// only *raise* the scheduled stiffness (a pad giving way to steel along the path); `d` is
/// taken less its uncertainty, so that the reading errs stiff (slower, stable gains).
/// The floor of the depth's uncertainty (m): the measured pose's noise, the surface's
/// flatness.
pub const DEPTH_UNCERTAINTY_M: f64 = 2e-6;
/// Time constant of the force reference's pre-filter on the arm (s): a critically damped
/// second order, 10 → 90 % of a step in ≈ 3.4 × this (0.13 s), its rate the feedforward.
pub const FORCE_PREFILTER_S: f64 = 0.04;
/// The feedback compares the force with the shaped reference of this many loop delays ago:
/// how late the (12 Hz-filtered) force answers the feedforward — the servo's ≈ T plus the
/// filter's lag. On the model 1 × T left a 7 % overshoot of a 2 → 10 N step, 1.5 × T 0.8 %
/// (rise 0.14 s), 2 × T 0.5 % (rise 0.19 s).
pub const PREFILTER_MATCH: f64 = 1.5;

impl Adaptation {
    /// Makes axis `k`'s force gains for stiffness `k_n_per_m` (the task's scaled by
    /// `made_for / k`, bumpless). The feedforward (the pre-filtered reference's rate over the
    /// stiffness) and the seating speed follow: a feedforward made for a softer surface than
    /// the one met drives the force past the setpoint (41 N on 10⁶ N/m with the configured
    /// 2·10⁴ on the model).
    fn schedule(&mut self, law: &mut HybridLaw, k: usize, k_n_per_m: f64) {
        let scale = self.made_for[k] / k_n_per_m;
        law.retune_force_axis(k, self.kp_f0[k] * scale, self.ki_f0[k] * scale);
        self.scheduled[k] = k_n_per_m;
        if let Feedforward::RateOverStiffness(ke) = &mut law.ff {
            ke[k] = k_n_per_m;
        }
    }
}

/// A scheduled stiffness moving by less than this fraction leaves the gains as they are.
pub const RETUNE_FRACTION: f64 = 0.05;
/// Without a usable estimate the gains are made for the cell's stiffest surface until this
/// long after the first contact (s), then for the stiffness the task's gains were made for.
/// On a stiff surface the loop has had its first contact and its own corrections by then
/// (the estimate is usable 60–90 ms after contact when the tool is still); a task whose tool
/// slides from the start (a search, a contour) gets no estimate and runs on its own gains.
pub const PRE_ESTIMATE_S: f64 = 0.3;

/// Tracking frame: time constant of the normal estimate's (and the travel velocity's)
/// low-pass (s).
pub const TRACKING_TAU_S: f64 = 0.1;
/// Tracking frame: the normal is updated only while the TCP slides at least this fast (m/s).
pub const TRACKING_MIN_SPEED_M_S: f64 = 0.005;
/// Tracking frame: travel closer than 60° to the applied force's line (|cos| above this) is
/// moving into or off the surface — the approach's last millimetres, a bounce — not sliding;
/// the normal is not estimated from it. Sliding with friction μ keeps the travel within
/// atan μ of 90° from the force (μ = 0.5: |cos| ≤ 0.45).
pub const TRACKING_MAX_TRAVEL_COS: f64 = 0.5;

impl ArmRun {
    /// Starts a task at the measured TCP pose (its first step spans no time). `stiffness` = K_e per axis of {C}
    /// (force feedforward, approach speed), `worst_case_n_per_m` the stiffest contact the cell
    /// declares it may meet (bounds the approach speed whatever `stiffness` says),
    /// `loop_delay_s` the effective loop delay.
    pub fn new(
        task: HybridTask,
        gains: HybridGains,
        limits: HybridLimits,
        stiffness: [f64; 6],
        worst_case_n_per_m: f64,
        loop_delay_s: f64,
        tcp: &Isometry3<f64>,
    ) -> Result<Self, TaskError> {
        check_task(&task)?;
        if task.robot != TaskRobot::Arm {
            return Err(TaskError::Invalid("not an arm task".into()));
        }
        let frame = match task.frame_kind {
            FrameKind::Base | FrameKind::Tracking => iso_of(&task.frame),
            FrameKind::Tool => tcp * iso_of(&task.frame),
        };
        let out_limit = [
            limits.force_axis_speed_m_s,
            limits.force_axis_speed_m_s,
            limits.force_axis_speed_m_s,
            limits.force_axis_speed_rad_s,
            limits.force_axis_speed_rad_s,
            limits.force_axis_speed_rad_s,
        ];
        // Position axes: bounded by the cell's position speed (`[control.hybrid]
        // position_speed_m_s`, `_rad_s`; [`ArmRun::with_position_speed`]), by default these.
        let mut lim = out_limit;
        for k in 0..6 {
            if !task.force_axes[k] {
                lim[k] = if k < 3 {
                    DEFAULT_POSITION_SPEED_M_S
                } else {
                    DEFAULT_POSITION_SPEED_RAD_S
                };
            }
        }
        // Position axes: corners blended within the acceleration bound; force axes as given
        // (their pre-filter shapes them).
        let ref_blend_s: [f64; 6] = std::array::from_fn(|k| {
            if task.force_axes[k] {
                0.0
            } else {
                profile_blend_s(&task.reference[k], POSITION_REF_ACCEL[k / 3])
            }
        });
        let r0: [f64; 6] = std::array::from_fn(|k| {
            profile_blended_over(&task.reference[k], 0.0, ref_blend_s[k]).0
        });
        let law = HybridLaw::new(
            task.force_axes,
            gains,
            Feedforward::RateOverStiffness(stiffness),
            lim,
            true,
        );
        Ok(Self {
            law,
            sup: Supervision::new(limits),
            approach_from: None,
            contact_travel: [0.0; 3],
            travel_prev: None,
            paused_s: 0.0,
            lost_since: None,
            osc: OscillationWatch::default(),
            t_s: 0.0,
            last_s: None,
            frame,
            desired: *tcp,
            command: *tcp,
            r_prev: std::array::from_fn(|k| if task.force_axes[k] { 0.0 } else { r0[k] }),
            start_tcp: *tcp,
            done: false,
            worst_case_n_per_m,
            seating: true,
            loop_delay_s,
            contact_s: None,
            normal: None,
            prev_p: None,
            v_est: Vector3::zeros(),
            adapt: None,
            prev_peak: None,
            stopped: [false; 3],
            retract_to: [None; 3],
            u_prev: [0.0; 6],
            ref_blend_s,
            touch: [None; 3],
            seat_secant: [None; 3],
            pf: [(0.0, 0.0); 6],
            prefilter_s: FORCE_PREFILTER_S,
            pf_hist: std::collections::VecDeque::with_capacity(32),
            slowdown_error_n: 0.0,
            max_lag_s: DEFAULT_MAX_REFERENCE_LAG_S,
            speed: 1.0,
            lag_s: 0.0,
            u_lp: [0.0; 3],
            k_prev: [0.0; 3],
            k_rose_s: [f64::NEG_INFINITY; 3],
            task,
        })
    }

    /// Speed adaptation (as ABB Force Control's speed change on force deviation, but from
    /// what the loop is doing rather than from an error already made): while in contact the
    /// task's reference clock slows down so that a sudden stop of the force axes' current
    /// motion — the surface under a sliding tool rising, falling or stiffening, and ending —
    /// would cost at most `error_n` of force ([`next_speed_scale`]); the path and the force
    /// profile are followed as planned, later. 0 turns it off.
    pub fn with_speed_adaptation(mut self, error_n: f64) -> Self {
        self.slowdown_error_n = error_n.max(0.0);
        self
    }

    /// The cell's speed bound on the task's position axes (m/s translational, rad/s
    /// rotational), on the norm of their vector ([`clamp_norms`]).
    pub fn with_position_speed(mut self, m_s: f64, rad_s: f64) -> Self {
        for k in 0..6 {
            if !self.task.force_axes[k] {
                self.law.out_limit[k] = if k < 3 { m_s } else { rad_s };
            }
        }
        self
    }

    /// The most the reference clock may fall behind (s; `[control.hybrid]
    /// max_reference_lag_s`).
    pub fn with_max_lag(mut self, max_lag_s: f64) -> Self {
        self.max_lag_s = max_lag_s;
        self
    }

    /// The reference clock's scale now (1: as planned) and how far it is behind (s).
    pub fn speed(&self) -> (f64, f64) {
        (self.speed, self.lag_s)
    }

    /// Lets the force gains of the translational force axes follow an on-line estimate of the
    /// contact stiffness (see [`crate::stiffness`]), between `softest_n_per_m` and the cell's
    /// worst case; the stiffness given to [`ArmRun::new`] is what the task's gains are made
    /// for until the estimate is usable. The force feedforward and the seating speed follow
    /// the scheduled stiffness too.
    pub fn with_adaptation(
        mut self,
        params: crate::stiffness::StiffnessParams,
        softest_n_per_m: f64,
    ) -> Self {
        let Feedforward::RateOverStiffness(ke) = self.law.ff else {
            return self;
        };
        let made_for = [ke[0], ke[1], ke[2]];
        let g = self.law.gains;
        self.adapt = Some(Adaptation {
            est: std::array::from_fn(|_| crate::stiffness::StiffnessEstimator::new(params)),
            last: Default::default(),
            made_for,
            kp_f0: [g.kp_f[0], g.kp_f[1], g.kp_f[2]],
            ki_f0: [g.ki_f[0], g.ki_f[1], g.ki_f[2]],
            scheduled: made_for,
            softest_n_per_m,
            stiffest_n_per_m: self.worst_case_n_per_m.max(softest_n_per_m),
            surface_x: [None; 3],
            raised: [false; 3],
            depth_raise: true,
            pressing: [false; 3],
        });
        // Until the estimate is usable the gains are made for the stiffest surface.
        self.adapt_step(&Vector3::zeros(), &[0.0; 6], &[1.0; 6], 0.0, false);
        self
    }

    /// One step of the adaptation: the estimators see the position along each pressing
    /// translational axis and the applied force (in contact only), and the gains follow.
    fn adapt_step(
        &mut self,
        p_c: &Vector3<f64>,
        fc: &[f64; 6],
        f_ref: &[f64; 6],
        dt: f64,
        still: bool,
    ) {
        let in_contact = self.sup.in_contact();
        // Before the estimate is usable: the worst case from the start until
        // PRE_ESTIMATE_S after the first contact, then the stiffness the task's gains were
        // made for (a task whose tool slides from the start never gets an estimate).
        let settled_in = self
            .contact_s
            .is_some_and(|c| self.t_s - c > PRE_ESTIMATE_S);
        let flat = self.task.frame_kind != FrameKind::Tracking;
        let Some(a) = self.adapt.as_mut() else {
            return;
        };
        for k in 0..3 {
            if !(self.task.force_axes[k] && f_ref[k] != 0.0) {
                continue;
            }
            let s = f_ref[k].signum();
            let (x, f) = (s * p_c[k], s * fc[k]);
            // The estimator runs from the force its spring model needs (its own gates drop
            // the contact's transient), not from the supervisor's contact threshold: on a
            // soft surface the seating otherwise crept at the worst case's speed for
            // ≈ 0.1 s longer (issue 20: the rise).
            a.pressing[k] = f >= a.est[k].params().min_force_n;
            if (in_contact || a.pressing[k]) && still {
                a.last[k] = a.est[k].step(x, f, dt);
                // Where the surface is: x − F/K̂ (the estimate, else the seating's secant).
                let known = match (a.last[k].usable, a.last[k].k_n_per_m) {
                    (true, Some(kk)) => Some((kk, a.last[k].se_n_per_m)),
                    _ => self.seat_secant[k].map(|kk| (kk, 0.1 * kk)),
                };
                if let Some((kk, se)) = known.filter(|(kk, _)| *kk > 0.0) {
                    if f >= 1.0 {
                        let unc = 2.0 * f * se / (kk * kk) + DEPTH_UNCERTAINTY_M;
                        a.surface_x[k] = Some((x - f / kk, unc));
                    }
                }
            } else {
                a.est[k].pause();
            }
            if a.depth_raise && in_contact && !still && flat {
                if let Some((x0, unc)) = a.surface_x[k] {
                    let d = x - x0 - unc;
                    let kd = if d > DEPTH_UNCERTAINTY_M {
                        f / d
                    } else {
                        a.stiffest_n_per_m
                    };
                    let kd = kd.min(a.stiffest_n_per_m);
                    if f >= 1.0 && kd > a.scheduled[k] * (1.0 + RETUNE_FRACTION) {
                        a.schedule(&mut self.law, k, kd);
                        a.raised[k] = true;
                        a.est[k].reset();
                        a.last[k] = Default::default();
                    }
                }
            }
            if a.raised[k] && !a.last[k].usable {
                // Raised from the depth: kept until the estimator has learnt the new surface.
                continue;
            }
            let before = match self.seat_secant[k] {
                // Seated without an estimate (a stiff surface: 10 N is 10 µm into 10⁶ N/m,
                // over before the estimator has data): the seating's own secant.
                Some(ks) => ks.clamp(a.softest_n_per_m, a.stiffest_n_per_m),
                None if settled_in => a.made_for[k],
                None => a.stiffest_n_per_m,
            };
            let want = crate::stiffness::scheduled_stiffness(
                &a.last[k],
                before,
                a.softest_n_per_m,
                a.stiffest_n_per_m,
            );
            if (want / a.scheduled[k] - 1.0).abs() <= RETUNE_FRACTION {
                continue;
            }
            a.schedule(&mut self.law, k, want);
        }
    }

    /// The stiffness the force gains are made for now and the on-line estimate, per
    /// translational axis of {C} (0: a position axis / no estimate).
    /// Speed adaptation's step ([`ArmRun::with_speed_adaptation`]): watches the
    /// translational force axes' output while pressing in contact and sliding, and sets the reference
    /// clock's scale for the next cycle (the clock falls behind by `(1 − scale)·dt`).
    fn adapt_speed(&mut self, u: &[f64; 6], f_ref: &[f64; 6], dt: f64, tr: f64, sliding: bool) {
        if self.slowdown_error_n <= 0.0 || dt <= 0.0 {
            return;
        }
        let a = (dt / SPEED_WATCH_TAU_S).min(1.0);
        // Only a sliding tool meets a changing surface; pressing in place, the gains settling
        // onto the first contact's stiffness is not the surface stiffening.
        let pressing = self.sup.in_contact() && !self.seating && !self.done && sliding;
        let (gains_for, _) = self.stiffness_report();
        let mut cost = [0.0; 3];
        for j in 0..3 {
            let on = pressing && self.task.force_axes[j] && f_ref[j] != 0.0;
            self.u_lp[j] += ((if on { u[j] } else { 0.0 }) - self.u_lp[j]) * a;
            if on && self.k_prev[j] > 0.0 && gains_for[j] > 1.01 * self.k_prev[j] {
                self.k_rose_s[j] = self.t_s;
            }
            self.k_prev[j] = if on { gains_for[j] } else { 0.0 };
            if on {
                // A surface stiffening under the tool: its cost at the worst case.
                let k_cost = if self.t_s - self.k_rose_s[j] < STIFFENING_MEMORY_S {
                    gains_for[j].max(self.worst_case_n_per_m)
                } else {
                    gains_for[j]
                };
                cost[j] = stop_cost_n(self.u_lp[j], self.law.gains.kp_f[j], gains_for[j], k_cost);
            }
        }
        self.speed = next_speed_scale(self.speed, &cost, self.slowdown_error_n, dt);
        // Only a running reference clock falls behind (not before a from-contact task's
        // contact, not past the task's end).
        if tr >= 0.0 && !self.done {
            self.lag_s += (1.0 - self.speed) * dt;
        }
    }

    fn stiffness_report(&self) -> ([f64; 3], [f64; 3]) {
        let mut ke = match self.law.ff {
            Feedforward::RateOverStiffness(ke) => ke,
            Feedforward::Force => [0.0; 6],
        };
        if let Some(a) = &self.adapt {
            ke[..3].copy_from_slice(&a.scheduled);
        }
        let gains_for = std::array::from_fn(|k| if self.task.force_axes[k] { ke[k] } else { 0.0 });
        // The estimator's, else the seating's secant (a stiff surface seats before the
        // estimator has data).
        let est = std::array::from_fn(|k| {
            self.adapt
                .as_ref()
                .and_then(|a| a.last[k].k_n_per_m)
                .or(self.seat_secant[k])
                .unwrap_or(0.0)
        });
        (gains_for, est)
    }

    pub fn command(&self) -> Isometry3<f64> {
        self.command
    }

    /// How the task backs off its surface when it ends pressing `force_on_tool_n` (the
    /// surface's force on the tool, base): along the translational force axes of {C}, at the
    /// task's force-axis speed; the blind distance from the softest stiffness believed (the
    /// on-line estimate when there is one, else the one the gains are made for). `None`: not
    /// pressing along the force axes.
    pub fn unload(
        &self,
        force_on_tool_n: &Vector3<f64>,
        release_force_n: f64,
    ) -> Option<crate::ending::Unload> {
        let rc = self.frame.rotation;
        let axes: Vec<Vector3<f64>> = (0..3)
            .filter(|&k| self.task.force_axes[k])
            .map(|k| rc * Vector3::ith(k, 1.0))
            .collect();
        if axes.is_empty() {
            return None;
        }
        let (gains_for, est) = self.stiffness_report();
        let k = (0..3)
            .filter(|&k| self.task.force_axes[k])
            .map(|k| if est[k] > 0.0 { est[k] } else { gains_for[k] })
            .filter(|k| *k > 0.0)
            .fold(f64::INFINITY, f64::min);
        let k = if k.is_finite() {
            k
        } else {
            self.worst_case_n_per_m
        };
        crate::ending::Unload::from_force(
            force_on_tool_n,
            &axes,
            self.sup.limits.force_axis_speed_m_s,
            k,
            release_force_n,
        )
    }

    /// Whether the task ran its duration (`Done`: it holds its last command).
    pub fn done(&self) -> bool {
        self.done
    }

    /// The travel bound of a search for the surface: along the translational force axes of
    /// {C}, the measured TCP may move at most `approach_travel_m` from the task's start before
    /// the first contact, and at most `reapproach_travel_m` from where a contact was declared
    /// lost (off an edge, into a hole) until the surface is found again. Past it the task ends.
    /// (Rotational force axes are bounded by their speed and the task's duration only.)
    fn check_travel(&mut self, tcp: &Isometry3<f64>) -> Result<(), Abort> {
        self.check_contact_travel(tcp)?;
        if self.sup.in_contact() || !self.task.force_axes[..3].iter().any(|s| *s) {
            self.approach_from = None;
            return Ok(());
        }
        let p = tcp.translation.vector;
        let from = *self.approach_from.get_or_insert(p);
        let d = self.frame.rotation.inverse() * (p - from);
        let travel = (0..3)
            .filter(|k| self.task.force_axes[*k])
            .map(|k| d[k].abs())
            .fold(0.0, f64::max);
        let (bound, name, what) = if self.contact_s.is_none() {
            (
                self.sup.limits.approach_travel_m,
                "approach_travel_m",
                "no contact",
            )
        } else {
            (
                self.sup.limits.reapproach_travel_m,
                "reapproach_travel_m",
                "contact lost and not found again",
            )
        };
        if travel > bound {
            return Err(Abort::controlled(format!(
                "{what} within {:.1} mm of travel along the force axes (limits.{name})",
                bound * 1e3
            )));
        }
        Ok(())
    }

    /// The travel bound in contact: from the first contact on, the measured TCP's net travel
    /// along each translational force axis of {C} (its steps resolved along {C} as it is at
    /// each step, summed with their signs) stays within `contact_travel_m`. Pressing on a
    /// still surface it stays at the surface's compliance; sliding along a surface or round a
    /// contour (a tracking frame's normal turns with it) adds nothing; a surface that yields or
    /// moves away, or one force axis sliding off its edge while another still touches (the
    /// search bounds above run only while no axis touches), adds up to it, and the task ends
    /// there, naming the axis.
    fn check_contact_travel(&mut self, tcp: &Isometry3<f64>) -> Result<(), Abort> {
        let p = tcp.translation.vector;
        let Some(prev) = self.travel_prev.replace(p) else {
            return Ok(());
        };
        if self.contact_s.is_none() {
            return Ok(());
        }
        let d = self.frame.rotation.inverse() * (p - prev);
        let bound = self.sup.limits.contact_travel_m;
        for k in 0..3 {
            if !self.task.force_axes[k] {
                continue;
            }
            self.contact_travel[k] += d[k];
            if self.contact_travel[k].abs() > bound {
                return Err(Abort::controlled(format!(
                    "{:.1} mm of travel along {} in contact (limits.contact_travel_m {:.1} mm): \
                     the surface yields or moves away, or the tool slid off it",
                    self.contact_travel[k] * 1e3,
                    AXES[k],
                    bound * 1e3
                )));
            }
        }
        Ok(())
    }

    /// Approach speed of force axis `k` for the reference `f_ref`: the first-contact
    /// overshoot is about `K·v·T` (the arm moves on at `v` for the loop delay `T` before the
    /// law reacts), so the speed is the slowest of
    /// * the speed limit (`force_axis_speed_m_s` / `_rad_s`);
    /// * `APPROACH_SETPOINT_FRACTION·|F_d| / (K_e·T)`, the stiffness the task's gains are
    ///   made for (identified or configured): the overshoot stays a fraction of the setpoint;
    /// * along a translational axis, `APPROACH_MAX_FORCE_FRACTION·max_force_n / (K_wc·T)`
    ///   with `K_wc` the cell's declared worst-case stiffness: whatever the gains were made
    ///   for, an un-identified stiffer surface up to `K_wc` is met below the force limit;
    ///
    /// never below 0.1 mm/s or 1 mrad/s.
    pub fn approach_speed(&self, k: usize, f_ref: f64) -> f64 {
        let lim = self.law.out_limit[k];
        let t = self.loop_delay_s;
        if t <= 0.0 {
            return lim;
        }
        let mut v = f64::INFINITY;
        // The worst case stands until the surface under the tool is known: in contact with
        // a usable estimate (which the feedforward's stiffness then follows) it is not
        // assumed any more; a lost contact searches for an unknown surface again.
        let known = k < 3
            && self.adapt.as_ref().is_some_and(|a| {
                (self.sup.in_contact() || a.pressing[k]) && a.last[k].upper().is_some()
            });
        // The stiffness the gains are made for: with adaptation it is the worst case until
        // the surface is known, which the bound below covers (slower still would leave the
        // estimator's pairs below their excitation on a soft surface).
        if let Feedforward::RateOverStiffness(ke) = self.law.ff {
            if ke[k] > 0.0 && (self.adapt.is_none() || known || k >= 3) {
                v = v.min(APPROACH_SETPOINT_FRACTION * f_ref.abs() / (ke[k] * t));
            }
        }
        if k < 3 && self.worst_case_n_per_m > 0.0 && !known {
            v = v.min(
                APPROACH_MAX_FORCE_FRACTION * self.sup.limits.max_force_n
                    / (self.worst_case_n_per_m * t),
            );
            // A task whose gains follow the surface does not know it: its first contact is
            // bounded to a fraction of the setpoint over the worst case. (A task on fixed
            // gains declares them made for its surface — the peg's plate — and keeps the
            // force limit's bound above: a peg searching 10 mm down a hole at 0.1 mm/s
            // would not be inserted in its time.)
            if self.adapt.is_some() {
                v = v.min(
                    APPROACH_PEAK_FRACTION * f_ref.abs()
                        / (self.worst_case_n_per_m * STOP_LAG_FRACTION * t),
                );
            }
        }
        let floor = if k < 3 { 1e-4 } else { 1e-3 };
        lim.min(v.max(floor))
    }

    pub fn frame(&self) -> Isometry3<f64> {
        self.frame
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Applied wrench in {C} from the contact wrench on the tool at the TCP (base axes):
    /// `F_C = −R_Cᵀ f`, `τ_C = −R_Cᵀ (τ + (p_tcp − p_C) × f)`.
    pub fn applied_in_frame(
        frame: &Isometry3<f64>,
        tcp: &Isometry3<f64>,
        f: &Vector3<f64>,
        tau: &Vector3<f64>,
    ) -> [f64; 6] {
        let rt = frame.rotation.inverse();
        let lever = tcp.translation.vector - frame.translation.vector;
        let fc = -(rt * f);
        let tc = -(rt * (tau + lever.cross(f)));
        join(&fc, &tc)
    }

    /// One robot cycle: the commanded TCP pose and the report, or why the task ended.
    pub fn step(&mut self, i: &ArmInput) -> Result<(Isometry3<f64>, StepReport), Abort> {
        let (f, tau) = i.wrench_base.clone().map_err(|e| Abort::wrench(&e))?;
        if !(f.iter().chain(tau.iter()).all(|v| v.is_finite())
            && i.tcp.translation.vector.iter().all(|v| v.is_finite()))
        {
            return Err(Abort::protective(
                ProtectiveCause::NonFinite,
                "non-finite measurement",
            ));
        }
        let dt = crate::law_step_dt(&mut self.last_s, i.now_s, i.cycle_period_s);
        self.t_s += dt;
        let t = self.t_s;
        let sel = self.task.force_axes;
        // The frame this cycle.
        match self.task.frame_kind {
            FrameKind::Base => {}
            FrameKind::Tool => self.frame = i.tcp * iso_of(&self.task.frame),
            FrameKind::Tracking => self.track(i.tcp, &f, dt),
        }
        let fc = Self::applied_in_frame(&self.frame, i.tcp, &f, &tau);
        // The reference clock: task time (from contact for a task that starts there), less
        // what speed adaptation has held it back; its rates run at the clock's scale.
        // While a contact made is lost, the reference clock stops (`paused_s`): the position
        // axes wait where the surface was left (issue 41: a press that lost its contact ran
        // its x reference on to 49.7 mm with the arm still).
        let paused = self.sup.phase == HybridPhase::ContactLost && !self.done;
        if paused {
            self.paused_s += dt;
        }
        let tr = ref_time(&self.task, t, self.contact_s) - self.lag_s - self.paused_s;
        let shaped: [(f64, f64); 6] = std::array::from_fn(|k| {
            profile_blended_over(&self.task.reference[k], tr, self.ref_blend_s[k])
        });
        let r: [f64; 6] = std::array::from_fn(|k| shaped[k].0);
        let rd: [f64; 6] = std::array::from_fn(|k| {
            if (self.task.from_contact && self.contact_s.is_none()) || paused {
                0.0
            } else {
                shaped[k].1 * self.speed
            }
        });
        let mut f_ref = [0.0; 6];
        let mut f_rate = [0.0; 6];
        let mut v_ref = [0.0; 6];
        let mut dr = [0.0; 6];
        for k in 0..6 {
            if sel[k] {
                f_ref[k] = r[k];
                f_rate[k] = rd[k];
            } else {
                v_ref[k] = rd[k];
                dr[k] = r[k] - self.r_prev[k];
                self.r_prev[k] = r[k];
            }
        }
        let rc = self.frame.rotation;
        // Desired pose: advance the position axes by the reference increments (along {C}).
        let (dl, da) = split(&dr);
        self.desired.translation.vector += rc * dl;
        self.desired.rotation = UnitQuaternion::from_scaled_axis(rc * da) * self.desired.rotation;
        // Errors in {C}; along force axes the desired pose follows the measurement.
        let e_lin = rc.inverse() * (self.desired.translation.vector - i.tcp.translation.vector);
        let e_ang = rc.inverse() * (self.desired.rotation * i.tcp.rotation.inverse()).scaled_axis();
        let mut e = join(&e_lin, &e_ang);
        for k in 0..6 {
            if sel[k] {
                e[k] = 0.0;
            }
        }
        let (el, ea) = split(&e);
        self.desired = Isometry3::from_parts(
            Translation3::from(i.tcp.translation.vector + rc * el),
            UnitQuaternion::from_scaled_axis(rc * ea) * i.tcp.rotation,
        );
        // Deviation limit on position axes.
        let l = self.sup.limits;
        for k in 0..6 {
            if sel[k] {
                continue;
            }
            let lim = if k < 3 {
                l.deviation_m
            } else {
                l.deviation_rad
            };
            if e[k].abs() > lim {
                return Err(Abort::protective(
                    ProtectiveCause::Deviation,
                    format!("deviation on {} {:.4} > limit {lim}", AXES[k], e[k]),
                ));
            }
        }
        // Phase and force limits.
        // The limits see the unfiltered peak of every sample since the last cycle (a 12 Hz
        // filter shows an impact after it is over), or the filtered value when it is larger.
        let force_norm = f.norm().max(finite_or_zero(i.peak.force_n));
        let torque_norm = tau.norm().max(finite_or_zero(i.peak.torque_nm));
        let lost = self
            .sup
            .update(t, &fc, &f_ref, &sel, force_norm, torque_norm)?;
        // Re-seat as soon as the force axes no longer touch (a bounce), before a loss is
        // declared: the next touch is met at the approach speed too.
        let touching = (0..6)
            .filter(|k| sel[*k] && f_ref[*k] != 0.0)
            .any(|k| fc[k] * f_ref[k].signum() >= self.sup.limits.contact_threshold_n);
        if lost || (self.contact_s.is_some() && !touching) {
            if lost {
                self.law.reset_force_integral();
            }
            self.seating = true;
        }
        // Along {C} from the start: where the tool is (for the seating's secant and the
        // estimator).
        let p_c = rc.inverse() * (i.tcp.translation.vector - self.start_tcp.translation.vector);
        if self.seating && self.sup.in_contact() {
            for k in 0..3 {
                if sel[k] && f_ref[k] != 0.0 && self.touch[k].is_none() {
                    let s = f_ref[k].signum();
                    let f1 = along_axis(finite_or_zero(i.peak.force_n), &fc, k);
                    self.touch[k] = Some((s * p_c[k], f1));
                }
            }
        }
        if self.seating
            && self.sup.in_contact()
            && (0..6)
                .filter(|k| sel[*k] && f_ref[*k] != 0.0)
                .all(|k| fc[k] * f_ref[k].signum() >= SEATED_FRACTION * f_ref[k].abs())
        {
            self.seating = false;
            // The seating's secant: from the touch (unfiltered force, measured pose) to the
            // seated pose (the filtered force, settled by now: the arm has stopped).
            let f_peak = finite_or_zero(i.peak.force_n);
            for k in 0..3 {
                if let Some(touch) = self.touch[k].take() {
                    let s = f_ref[k].signum();
                    let seated = (s * p_c[k], s * fc[k], along_axis(f_peak, &fc, k));
                    self.seat_secant[k] = seat_secant(touch, seated);
                }
            }
        }
        if self.sup.in_contact() && self.contact_s.is_none() {
            self.contact_s = Some(t);
        }
        if self.task.from_contact
            && self.contact_s.is_none()
            && t > self.sup.limits.approach_timeout_s
        {
            return Err(Abort::controlled(format!(
                "no contact within {} s of approach",
                self.sup.limits.approach_timeout_s
            )));
        }
        // A search for a lost surface that stalls (its travel bound not reached: a slow
        // approach speed) ends like a first approach that stalls: the stopped reference clock
        // no longer ends it by the task's duration.
        if self.sup.phase == HybridPhase::ContactLost {
            let since = *self.lost_since.get_or_insert(t);
            if t - since > self.sup.limits.approach_timeout_s {
                return Err(Abort::controlled(format!(
                    "contact lost and not found again within {} s (limits.approach_timeout_s)",
                    self.sup.limits.approach_timeout_s
                )));
            }
        } else {
            self.lost_since = None;
        }
        self.check_travel(i.tcp)?;
        if self.contact_s.is_some() && !self.done {
            if let Some((k, band)) = self.osc.step(t, &fc, &f_ref, &sel) {
                return Err(Abort::controlled(format!(
                    "force loop oscillating on {}: {OSC_SWINGS} swings of the force error of \
                     ≥ {band:.1} {} within {OSC_WINDOW_S} s (gains too high for this surface?)",
                    AXES[k],
                    if k < 3 { "N" } else { "N·m" }
                )));
            }
            let fast = finite_or_zero(i.peak.fast_swing_n);
            if let Some(band) = fast_swing_band(&f_ref, &sel).filter(|b| fast >= *b) {
                return Err(Abort::controlled(format!(
                    "force oscillating fast: the unfiltered force swings by {fast:.1} N peak to \
                     peak (band {band:.1} N), faster than the 12 Hz estimate shows (a tool \
                     chattering on a stiff surface?)"
                )));
            }
        }
        if !self.done && !i.peak.bridged {
            // The spring model needs a still surface under a still tool: while the position
            // axes move (sliding, a contour: the surface height under the tool changes, and
            // a tracking frame turns) the estimate is held.
            let still = v_ref.iter().all(|v| *v == 0.0);
            self.adapt_step(&p_c, &fc, &f_ref, dt, still);
        }
        let mut u = if self.done {
            [0.0; 6]
        } else {
            let inp = LawInput {
                e_pos: e,
                v_ref,
                v_meas: None,
                f_ref,
                f_ref_rate: f_rate,
                f_meas: fc,
            };
            // While the wrench is bridged (a gap in the samples), the force integral does not
            // integrate a force that is no longer measured.
            let integrate = self.sup.in_contact() && !i.peak.bridged && !self.seating;
            let inp = self.prefiltered(inp, t, dt);
            self.law.step(&inp, dt, integrate)
        };
        // Approach and seating: into the surface no faster than the approach speed
        // ([`ArmRun::approach_speed`]: the overshoot ≈ K·v·T). The filtered estimate lags an
        // impact by ~25 ms, so once the unfiltered force (the force service's confirmed peak)
        // has reached the setpoint the axis stops advancing until the estimate catches up.
        let peak = [
            finite_or_zero(i.peak.force_n),
            finite_or_zero(i.peak.torque_nm),
        ];
        let along_peak = |k: usize| along_axis(peak[k / 3], &fc, k);
        // The unfiltered peak's rate of rise (per second), for the seating's stop.
        let rise_rate = match (self.prev_peak, dt > 0.0) {
            (Some(p), true) => [
                ((peak[0] - p[0]) / dt).max(0.0),
                ((peak[1] - p[1]) / dt).max(0.0),
            ],
            _ => [0.0; 2],
        };
        self.prev_peak = Some(peak);
        if !self.done && (!self.sup.in_contact() || self.seating) {
            // Where the force will be when the arm has stopped: it moves on for about
            // `STOP_LAG_FRACTION·T` after a stop is decided (the reference is pulled back to
            // the measured pose, below), the force rising at its current rate.
            let t_stop = STOP_LAG_FRACTION * self.loop_delay_s;
            for k in 0..6 {
                if !(sel[k] && f_ref[k] != 0.0) {
                    continue;
                }
                let s = f_ref[k].signum();
                let predicted = along_peak(k) + rise_rate[k / 3] * t_stop;
                let stop = predicted >= SEATED_FRACTION * f_ref[k].abs();
                let cap = if stop {
                    0.0
                } else {
                    self.approach_speed(k, f_ref[k])
                };
                // No contact yet (or lost), or seating: the force axes move towards the
                // reference's sign at the approach speed, a guarded move that ends on the
                // predicted force (the law's own output, with gains made for the worst case
                // until the estimate is usable, would creep: 0.1 mm/s on a soft surface).
                u[k] = s * cap;
                if k < 3 {
                    let ax = rc * Vector3::ith(k, 1.0);
                    let x = ax.dot(&self.command.translation.vector);
                    if stop && !self.stopped[k] {
                        // Stop where the arm is: the command leads the measured pose by the
                        // tracking lag (v·T); left there, the arm would travel it into the
                        // surface after the decision (the first contact's overshoot).
                        let lead =
                            ax.dot(&(self.command.translation.vector - i.tcp.translation.vector));
                        if lead * s > 0.0 {
                            self.retract_to[k] = Some(x - lead);
                        }
                    }
                    if !stop {
                        self.retract_to[k] = None;
                    }
                    self.stopped[k] = stop;
                    let a = SEATING_STOP_ACCEL_M_S2;
                    if let Some(target) = self.retract_to[k] {
                        // Back to the measured pose at once, but within the acceleration
                        // bound: brake, reverse, land on it at rest.
                        let v = stop_velocity(target - x, self.u_prev[k], a, dt);
                        u[k] = v;
                        if (target - x - v * dt).abs() < 1e-9 && v.abs() <= a * dt {
                            self.retract_to[k] = None;
                        }
                    } else if dt > 0.0 {
                        // Off again after a stop (or from rest): the same bound.
                        u[k] = u[k].clamp(self.u_prev[k] - a * dt, self.u_prev[k] + a * dt);
                    }
                }
            }
        } else {
            self.retract_to = [None; 3];
        }
        if i.peak.bridged {
            // Bridged: the command does not advance along the force axes (the position axes
            // finish their cycle).
            for k in 0..6 {
                if sel[k] {
                    u[k] = 0.0;
                }
            }
        }
        clamp_norms(&mut u, &sel, &self.law.out_limit);
        if !self.done
            && ref_time(&self.task, t, self.contact_s) - self.lag_s - self.paused_s
                >= self.task.duration_s
        {
            // A task timed from its contact that ends pressing on nothing did not do its job
            // (issue 41: a press that slid off its part's edge ended `Done` after 3.3 s in
            // `ContactLost`). A task timed from its start may lose its contact on purpose (a
            // peg's search step ends as the peg starts into the hole): its caller judges.
            let pressing = (0..6).any(|k| sel[k] && f_ref[k] != 0.0);
            if pressing && self.task.from_contact && !self.sup.in_contact() {
                return Err(Abort::controlled(format!(
                    "contact lost at the end of the task ({:?}): the force axes pressed on \
                     nothing",
                    self.sup.phase
                )));
            }
            self.done = true;
        }
        if self.done {
            // A completed task holds its last command; its position references may still have
            // been moving at the end (a sine, a path cut by the duration): those axes come to
            // rest within the ending's deceleration (1 m/s², 2 rad/s²) instead of in one cycle.
            // The force axes stop where they are (they hold the contact).
            for k in 0..6 {
                let a = if k < 3 {
                    SEATING_STOP_ACCEL_M_S2
                } else {
                    COMPLETION_ROT_ACCEL_RAD_S2
                };
                let v0 = finite_or_zero(self.u_prev[k]);
                u[k] = if sel[k] || dt <= 0.0 {
                    0.0
                } else {
                    v0 - v0.signum() * (a * dt).min(v0.abs())
                };
            }
        }
        // Sliding: a position axis' reference moving (the surface may change under the tool).
        let sliding = (0..6).any(|k| !sel[k] && rd[k].abs() > 1e-9);
        self.adapt_speed(&u, &f_ref, dt, tr, sliding);
        if self.lag_s > self.max_lag_s {
            return Err(Abort::controlled(format!(
                "speed adaptation held the task {:.1} s behind its plan (more than \
                 max_reference_lag_s {:.1} s): the surface stays stiffer or steeper than the \
                 task's speed allows",
                self.lag_s, self.max_lag_s
            )));
        }
        self.u_prev = u;
        let (ul, ua) = split(&u);
        let v_b = rc * ul;
        let w_b = rc * ua;
        self.command = Isometry3::from_parts(
            Translation3::from(self.command.translation.vector + v_b * dt),
            UnitQuaternion::from_scaled_axis(w_b * dt) * self.command.rotation,
        );
        // Reports: position as displacement from the start along {C}.
        let p_lin = rc.inverse() * (i.tcp.translation.vector - self.start_tcp.translation.vector);
        let p_ang =
            rc.inverse() * (i.tcp.rotation * self.start_tcp.rotation.inverse()).scaled_axis();
        let phase = if self.done {
            HybridPhase::Done
        } else {
            self.sup.phase
        };
        let mut position_ref = [0.0; 6];
        for k in 0..6 {
            if !sel[k] {
                position_ref[k] = r[k];
            }
        }
        let (gains_for, stiffness_est) = self.stiffness_report();
        Ok((
            self.command,
            StepReport {
                t_s: t,
                clock_s: i.now_s,
                phase,
                force_ref: f_ref,
                force: fc,
                position_ref,
                position: join(&p_lin, &p_ang),
                output: u,
                limited: self.law.limited(),
                bridged: i.peak.bridged,
                seating: self.seating && !self.done,
                frame_in_base: pose_of(&self.frame),
                gains_for_n_per_m: gains_for,
                stiffness_estimate_n_per_m: stiffness_est,
                ref_time_s: tr,
                speed_scale: self.speed,
            },
        ))
    }

    /// The force reference through its pre-filter ([`FORCE_PREFILTER_S`]): until the axis is
    /// seated in contact the filter sits at the task's reference (the seating's last 10 % are
    /// the feedback's, as before: a feedforward made for the wrong stiffness would push them
    /// 50× too far on an unknown stiff surface); from then on a critically damped second
    /// order shapes the task's reference, its rate is the feedforward (`Ḟ/K_e`), and
    /// the feedback compares the force with the shaped reference of one loop delay ago (the
    /// force answers the feedforward that late; compared with the reference of now, the
    /// feedback would push on top of it: the overshoot of a step).
    fn prefiltered(&mut self, mut inp: LawInput, t: f64, dt: f64) -> LawInput {
        if self.prefilter_s <= 0.0 {
            return inp;
        }
        let w = 1.0 / self.prefilter_s;
        let live = self.sup.in_contact() && !self.seating;
        let mut now = [0.0; 6];
        for k in 0..6 {
            if !self.task.force_axes[k] {
                continue;
            }
            let (mut v, mut rd) = self.pf[k];
            if !live {
                (v, rd) = (inp.f_ref[k], 0.0);
            } else if dt > 0.0 {
                // Semi-implicit Euler, sub-stepped so that dt·w stays small.
                let n = (dt * w / 0.1).ceil().max(1.0) as usize;
                let h = dt / n as f64;
                for _ in 0..n {
                    rd += (w * w * (inp.f_ref[k] - v) - 2.0 * w * rd) * h;
                    v += rd * h;
                }
            }
            self.pf[k] = (v, rd);
            now[k] = v;
        }
        self.pf_hist.push_back((t, now));
        while self.pf_hist.len() > 1
            && self
                .pf_hist
                .get(1)
                .is_some_and(|(t1, _)| *t1 <= t - PREFILTER_MATCH * self.loop_delay_s)
        {
            self.pf_hist.pop_front();
        }
        let past = self.pf_hist.front().map_or(now, |(_, v)| *v);
        if live {
            for k in 0..6 {
                if self.task.force_axes[k] {
                    inp.f_ref[k] = past[k];
                    inp.f_ref_rate[k] = self.pf[k].1;
                }
            }
        }
        inp
    }

    /// Tracking frame: turn z of {C} towards the measured contact normal, low-passed with
    /// [`TRACKING_TAU_S`], only while pressing and sliding. The normal is the direction of the
    /// applied force with its component along the TCP's measured direction of travel removed:
    /// sliding, friction acts along the travel, so what is left is the normal force. At rest
    /// friction can point anywhere within its cone (±atan μ) and cannot be told from the
    /// normal, so the frame keeps its last estimate until the tool slides steadily
    /// ([`TRACKING_MIN_SPEED_M_S`]), along the surface ([`TRACKING_MAX_TRAVEL_COS`]).
    fn track(&mut self, tcp: &Isometry3<f64>, f_on_tool: &Vector3<f64>, dt: f64) {
        let applied = -f_on_tool;
        let p = tcp.translation.vector;
        if let (Some(prev), true) = (self.prev_p, dt > 0.0) {
            let v = (p - prev) / dt;
            let a = (dt / TRACKING_TAU_S).min(1.0);
            self.v_est = self.v_est * (1.0 - a) + v * a;
        }
        self.prev_p = Some(p);
        let rc = self.frame.rotation;
        // Keep the origin at the TCP whatever happens below.
        self.frame = Isometry3::from_parts(Translation3::from(p), rc);
        let z = rc * Vector3::z();
        // Sliding in contact, the TCP's own velocity is tangent to the surface (projecting it
        // on the plane of the current estimate would keep the estimate where it is).
        let travel = self.v_est;
        if travel.norm() < TRACKING_MIN_SPEED_M_S
            || applied.norm() < self.sup.limits.contact_threshold_n
        {
            return;
        }
        let t = travel.normalize();
        if t.dot(&applied.normalize()).abs() > TRACKING_MAX_TRAVEL_COS {
            // Into or off the surface: removing the travel's direction would leave only the
            // stray lateral force (found as a frame turned towards it at first contact).
            return;
        }
        let n = applied - t * applied.dot(&t);
        if n.norm() < 1e-9 {
            return;
        }
        let n = n.normalize();
        let alpha = (dt / TRACKING_TAU_S).min(1.0);
        let est = match self.normal {
            Some(prev) => (prev * (1.0 - alpha) + n * alpha).normalize(),
            None => (z * (1.0 - alpha) + n * alpha).normalize(),
        };
        self.normal = Some(est);
        if let Some(rot) = UnitQuaternion::rotation_between(&z, &est) {
            self.frame = Isometry3::from_parts(Translation3::from(p), rot * rc);
        }
    }
}

/// The plant stage's inputs (one `sim/plant/state` sample).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlantInput {
    pub t_s: f64,
    pub q: [f64; 2],
    pub qd: [f64; 2],
    /// Force of the wrist on the hand (the wrist sensor) — quasi-statically the force the hand
    /// applies to the environment.
    pub wrist_force_n: [f64; 2],
}

/// A hybrid task on the torque-controlled 2-DOF plant (x, y of {C} in the plant plane).
#[derive(Debug, Clone)]
pub struct PlantRun {
    pub task: HybridTask,
    pub law: HybridLaw,
    pub sup: Supervision,
    pub arm: kinematics::PlanarRP,
    /// Rotation of {C} in the plane.
    rc: Matrix2<f64>,
    start: Option<(f64, Vector2<f64>)>,
    next_tick_s: f64,
    last_law_s: Option<f64>,
    effort: [f64; 2],
    max_effort: [f64; 2],
    done: bool,
    contact_s: Option<f64>,
}

impl PlantRun {
    pub fn new(
        task: HybridTask,
        gains: HybridGains,
        limits: HybridLimits,
        max_effort: [f64; 2],
    ) -> Result<Self, TaskError> {
        check_task(&task)?;
        if task.robot != TaskRobot::Plant {
            return Err(TaskError::Invalid("not a plant task".into()));
        }
        if task.frame_kind != FrameKind::Base {
            return Err(TaskError::Invalid(
                "plant tasks use a fixed frame (frame_kind base)".into(),
            ));
        }
        if task.force_axes[2..].iter().any(|s| *s) {
            return Err(TaskError::Invalid(
                "the plant is planar: only x and y of {C} may be force axes".into(),
            ));
        }
        if task.rate_hz.is_nan() || task.rate_hz <= 0.0 {
            return Err(TaskError::Invalid("plant tasks need rate_hz > 0".into()));
        }
        let yaw = iso_of(&task.frame).rotation.euler_angles().2;
        let rc = *Rotation2::new(yaw).matrix();
        // Force and position outputs are both hand forces here, bounded by the prismatic
        // joint's effort bound (the joint efforts are clamped again after Jᵀ).
        let mut lim = [max_effort[1]; 6];
        for v in lim.iter_mut().skip(2) {
            *v = 0.0;
        }
        let law = HybridLaw::new(task.force_axes, gains, Feedforward::Force, lim, false);
        Ok(Self {
            law,
            sup: Supervision::new(limits),
            arm: kinematics::PlanarRP::default(),
            rc,
            start: None,
            next_tick_s: 0.0,
            last_law_s: None,
            effort: [0.0; 2],
            max_effort,
            done: false,
            contact_s: None,
            task,
        })
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether the law runs for a state at plant time `t_s` (the law's own rate, on plant
    /// time: a 60 Hz task steps every 16.7 ms of plant time).
    pub fn due(&self, t_s: f64) -> bool {
        self.start.is_none() || t_s + 1e-9 >= self.next_tick_s
    }

    /// One law step: the joint efforts to hold until the next step, and the report.
    pub fn step(&mut self, i: &PlantInput) -> Result<([f64; 2], StepReport), Abort> {
        if !(i
            .q
            .iter()
            .chain(&i.qd)
            .chain(&i.wrist_force_n)
            .all(|v| v.is_finite())
            && i.t_s.is_finite())
        {
            return Err(Abort::protective(
                ProtectiveCause::NonFinite,
                "non-finite plant state",
            ));
        }
        let p = self
            .arm
            .fk(&i.q)
            .map_err(|e| Abort::controlled(format!("plant kinematics: {e}")))?;
        let j = self
            .arm
            .jacobian(&i.q)
            .map_err(|e| Abort::controlled(format!("plant kinematics: {e}")))?;
        let (t0, p0) = *self.start.get_or_insert((i.t_s, p));
        let period = 1.0 / self.task.rate_hz;
        let dt = self
            .last_law_s
            .map_or(0.0, |l| (i.t_s - l).clamp(0.0, 4.0 * period));
        self.last_law_s = Some(i.t_s);
        // Next tick on the law's grid from the start (no drift).
        let n = ((i.t_s - t0) / period).floor() + 1.0;
        self.next_tick_s = t0 + n * period;
        let t = i.t_s - t0;
        let sel = self.task.force_axes;
        let rt = self.rc.transpose();
        let v = j * Vector2::from(i.qd);
        let x_c = rt * (p - p0);
        let v_c = rt * v;
        let f_c = rt * Vector2::from(i.wrist_force_n);
        let tr = ref_time(&self.task, t, self.contact_s);
        let r: [f64; 6] = std::array::from_fn(|k| profile_value(&self.task.reference[k], tr));
        let rd: [f64; 6] = std::array::from_fn(|k| {
            if self.task.from_contact && self.contact_s.is_none() {
                0.0
            } else {
                profile_rate(&self.task.reference[k], tr)
            }
        });
        let mut inp = LawInput {
            v_meas: Some([v_c.x, v_c.y, 0.0, 0.0, 0.0, 0.0]),
            f_meas: [f_c.x, f_c.y, 0.0, 0.0, 0.0, 0.0],
            ..Default::default()
        };
        let mut position_ref = [0.0; 6];
        for k in 0..2 {
            if sel[k] {
                inp.f_ref[k] = r[k];
                inp.f_ref_rate[k] = rd[k];
            } else {
                position_ref[k] = r[k];
                inp.e_pos[k] = r[k] - x_c[k];
                inp.v_ref[k] = rd[k];
            }
        }
        let l = self.sup.limits;
        for k in 0..2 {
            if !sel[k] && inp.e_pos[k].abs() > l.deviation_m {
                return Err(Abort::protective(
                    ProtectiveCause::Deviation,
                    format!(
                        "deviation on {} {:.4} > limit {}",
                        AXES[k], inp.e_pos[k], l.deviation_m
                    ),
                ));
            }
        }
        let lost = self
            .sup
            .update(t, &inp.f_meas, &inp.f_ref, &sel, f_c.norm(), 0.0)?;
        if lost {
            self.law.reset_force_integral();
        }
        if self.sup.in_contact() && self.contact_s.is_none() {
            self.contact_s = Some(t);
        }
        // Torque-controlled: the force law itself approaches (F_d drives the joints, the
        // integral breaks the static friction loose), so it integrates with or without
        // contact. The speed limit brakes a force axis that moves towards the surface faster
        // than allowed while there is no contact.
        let mut u = self.law.step(&inp, dt, true);
        if !self.sup.in_contact() {
            for k in 0..2 {
                let v = inp.v_meas.map_or(0.0, |v| v[k]);
                let dir = if inp.f_ref[k] < 0.0 { -1.0 } else { 1.0 };
                if sel[k] && dir * v > l.force_axis_speed_m_s {
                    let kd = if self.law.gains.kd_f[k] > 0.0 {
                        self.law.gains.kd_f[k]
                    } else {
                        100.0
                    };
                    u[k] = (kd * (dir * l.force_axis_speed_m_s - v))
                        .clamp(-self.law.out_limit[k], self.law.out_limit[k]);
                }
            }
        }
        if ref_time(&self.task, t, self.contact_s) >= self.task.duration_s {
            self.done = true;
        }
        let f_base = self.rc * Vector2::new(u[0], u[1]);
        let tau = j.transpose() * f_base;
        let effort = [
            tau.x.clamp(-self.max_effort[0], self.max_effort[0]),
            tau.y.clamp(-self.max_effort[1], self.max_effort[1]),
        ];
        self.effort = if effort.iter().all(|v| v.is_finite()) {
            effort
        } else {
            [0.0; 2]
        };
        let yaw = self.rc[(1, 0)].atan2(self.rc[(0, 0)]);
        let frame = Isometry3::from_parts(
            Translation3::from(Vector3::new(p0.x, p0.y, 0.0)),
            UnitQuaternion::from_euler_angles(0.0, 0.0, yaw),
        );
        Ok((
            self.effort,
            StepReport {
                t_s: t,
                clock_s: i.t_s,
                phase: if self.done {
                    HybridPhase::Done
                } else {
                    self.sup.phase
                },
                force_ref: inp.f_ref,
                force: inp.f_meas,
                position_ref,
                position: [x_c.x, x_c.y, 0.0, 0.0, 0.0, 0.0],
                output: u,
                limited: self.law.limited(),
                bridged: false,
                seating: false,
                frame_in_base: pose_of(&frame),
                gains_for_n_per_m: [0.0; 3],
                stiffness_estimate_n_per_m: [0.0; 3],
                ref_time_s: tr,
                speed_scale: 1.0,
            },
        ))
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use common::msg::{HybridPhase, WrenchFault};
    use std::collections::VecDeque;

    /// The seating's secant pairs the measured pose with a force that has no lag: the CI
    /// failure of 2026-12-05 (10⁶ N/m, 11.0 N first contact, seated on a filtered 9.10 N
    /// against a true 10.91 N) read 0.77·K from the filtered force alone.
    #[test]
    fn the_seating_secant_errs_stiff_when_the_filtered_force_lags() {
        let k = 1e6;
        let touch = (0.0, 1.0);
        // Seated 9.91 µm in: the true force 10.91 N, the filter still at 9.10 N.
        let x2 = 9.91e-6;
        let lagging = seat_secant(touch, (x2, 9.10, 10.91)).expect("a secant");
        assert!(lagging >= 0.99 * k, "{lagging:e}");
        // The peak errs high with the noise: the secant errs stiff.
        assert!(seat_secant(touch, (x2, 9.10, 11.2)).expect("a secant") > k);
        // Settled, both agree.
        let settled = seat_secant(touch, (x2, 10.91, 10.91)).expect("a secant");
        assert!((settled / k - 1.0).abs() < 1e-9, "{settled:e}");
        // Too little travel or rise: no secant.
        assert_eq!(seat_secant(touch, (0.5e-6, 10.0, 10.0)), None);
        assert_eq!(seat_secant(touch, (x2, 1.5, 1.5)), None);
    }

    fn gains(kp_f: f64, ki_f: f64, limit: f64) -> HybridGains {
        HybridGains {
            kp: [5.0; 6],
            ki: [0.0; 6],
            kd: [0.0; 6],
            kp_f: [kp_f; 6],
            ki_f: [ki_f; 6],
            kd_f: [0.0; 6],
            limit_n: [limit; 6],
            feedforward: 1.0,
            friction_n: [0.0; 6],
        }
    }

    #[test]
    fn profiles_values_and_rates() {
        let step = Profile::Step {
            before: 1.0,
            after: 3.0,
            at_s: 2.0,
        };
        assert_eq!(profile_value(&step, 1.99), 1.0);
        assert_eq!(profile_value(&step, 2.0), 3.0);
        assert_eq!(profile_rate(&step, 2.0), 0.0);
        let ramp = Profile::Ramp {
            from: 0.0,
            to: 10.0,
            start_s: 1.0,
            duration_s: 2.0,
        };
        assert_eq!(profile_value(&ramp, 0.5), 0.0);
        assert_eq!(profile_value(&ramp, 2.0), 5.0);
        assert_eq!(profile_value(&ramp, 9.0), 10.0);
        assert_eq!(profile_rate(&ramp, 2.0), 5.0);
        assert_eq!(profile_rate(&ramp, 3.5), 0.0);
        // The paper's Fig. 9: c_y(t) = 30 − 30 cos(0.75 π t) cm.
        let sine = Profile::Sine {
            offset: 0.3,
            amplitude: -0.3,
            freq_hz: 0.375,
            phase_rad: std::f64::consts::FRAC_PI_2,
        };
        for t in [0.0, 0.3, 1.0, 2.2] {
            let want = 0.3 - 0.3 * (0.75 * std::f64::consts::PI * t).cos();
            assert!((profile_value(&sine, t) - want).abs() < 1e-12);
            let rate = 0.3 * 0.75 * std::f64::consts::PI * (0.75 * std::f64::consts::PI * t).sin();
            assert!((profile_rate(&sine, t) - rate).abs() < 1e-9);
        }
        let series = Profile::Series(vec![[0.0, 0.0], [1.0, 2.0], [3.0, 0.0]]);
        assert_eq!(profile_value(&series, -1.0), 0.0);
        assert_eq!(profile_value(&series, 0.5), 1.0);
        assert_eq!(profile_value(&series, 2.0), 1.0);
        assert_eq!(profile_value(&series, 5.0), 0.0);
        assert_eq!(profile_rate(&series, 2.0), -1.0);
    }

    #[test]
    fn selection_keeps_the_two_laws_apart() {
        let sel = [true, false, false, false, false, false];
        let mut law = HybridLaw::new(
            sel,
            gains(0.01, 0.0, 5.0),
            Feedforward::Force,
            [1e3; 6],
            true,
        );
        let i = LawInput {
            e_pos: [7.0, 0.1, 0.0, 0.0, 0.0, 0.0],
            f_ref: [2.0, 9.0, 0.0, 0.0, 0.0, 0.0],
            f_meas: [1.0, -4.0, 0.0, 0.0, 0.0, 0.0],
            ..Default::default()
        };
        let u = law.step(&i, 0.01, true);
        // x: force law only (ff 2 + 0.01·1), position error on x ignored.
        assert!((u[0] - (2.0 + 0.01)).abs() < 1e-12, "{u:?}");
        // y: position law only (5·0.1), force error on y ignored.
        assert!((u[1] - 0.5).abs() < 1e-12, "{u:?}");
        assert_eq!(&u[2..], &[0.0; 4]);
    }

    #[test]
    fn the_limiter_bounds_the_integration_rate_of_large_errors() {
        let sel = [true; 6];
        let mut law = HybridLaw::new(
            sel,
            gains(0.0, 1.0, 2.0),
            Feedforward::Force,
            [1e3; 6],
            true,
        );
        law.gains.feedforward = 0.0;
        let big = LawInput {
            f_ref: [10.0; 6],
            ..Default::default()
        };
        let mut u = [0.0; 6];
        for _ in 0..100 {
            u = law.step(&big, 0.01, true);
        }
        // 1 s of a 10 N error integrates only the limiter's 2 N·s.
        assert!((u[0] - 2.0).abs() < 1e-9, "{u:?}");
        assert_eq!(law.limited(), 0b11_1111);
        let small = LawInput {
            f_ref: [1.0; 6],
            ..Default::default()
        };
        let before = law.step(&small, 0.0, true)[0];
        let after = law.step(&small, 0.5, true)[0];
        assert!(
            (after - before - 0.5).abs() < 1e-9,
            "small errors integrate fully"
        );
        assert_eq!(law.limited(), 0);
        // Frozen (no contact): no integration at all.
        let frozen = law.step(&big, 1.0, false)[0];
        assert!((frozen - after).abs() < 1e-9);
    }

    #[test]
    fn anti_windup_stops_the_integral_at_the_output_bound() {
        let sel = [true; 6];
        let mut law = HybridLaw::new(
            sel,
            gains(0.0, 1.0, 100.0),
            Feedforward::Force,
            [1.0; 6],
            true,
        );
        law.gains.feedforward = 0.0;
        let big = LawInput {
            f_ref: [10.0; 6],
            ..Default::default()
        };
        for _ in 0..100 {
            let u = law.step(&big, 0.1, true);
            assert!(u[0] <= 1.0);
        }
        // Reversing the error leaves the bound at once (no wound-up integral).
        let rev = LawInput {
            f_ref: [-10.0; 6],
            ..Default::default()
        };
        let u = law.step(&rev, 0.1, true);
        assert!(u[0] < 1.0, "{u:?}");
    }

    #[test]
    fn feedforward_on_each_stage() {
        let sel = [true, false, false, false, false, false];
        let mut f = HybridLaw::new(
            sel,
            gains(0.0, 0.0, 1.0),
            Feedforward::Force,
            [1e3; 6],
            true,
        );
        let i = LawInput {
            f_ref: [4.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            f_ref_rate: [2.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            f_meas: [4.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            v_ref: [0.0, 0.3, 0.0, 0.0, 0.0, 0.0],
            ..Default::default()
        };
        assert_eq!(f.step(&i, 0.01, true)[0], 4.0, "force stage drives F_d");
        let mut v = HybridLaw::new(
            sel,
            gains(0.0, 0.0, 1.0),
            Feedforward::RateOverStiffness([1e3; 6]),
            [1e3; 6],
            true,
        );
        let u = v.step(&i, 0.01, true);
        assert!((u[0] - 2e-3).abs() < 1e-15, "velocity stage: Ḟ_d / K_e");
        assert!((u[1] - 0.3).abs() < 1e-15, "reference velocity feedforward");
    }

    #[test]
    fn wrench_transform_into_a_rotated_offset_frame() {
        // {C}: z down (rotated π about x), origin 0.1 m beside the TCP.
        let frame = Isometry3::from_parts(
            Translation3::new(0.5, 0.1, 0.2),
            UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
        );
        let tcp = Isometry3::translation(0.5, 0.0, 0.2);
        // The table pushes the tool up with 10 N.
        let w = ArmRun::applied_in_frame(
            &frame,
            &tcp,
            &Vector3::new(0.0, 0.0, 10.0),
            &Vector3::zeros(),
        );
        // Applied by the tool: 10 N down = +z of {C}.
        assert!((w[2] - 10.0).abs() < 1e-12, "{w:?}");
        // Moment about {C}'s origin of −10 N z applied at (0, −0.1, 0) from it: r × F =
        // (−0.1 y) × (−10 z) = +1 x in base; in {C} (x kept) = +1.
        assert!((w[3] - 1.0).abs() < 1e-12, "{w:?}");
        assert!(w[4].abs() < 1e-12 && w[5].abs() < 1e-12);
    }

    /// A position-controlled robot (delay + first-order lag per Cartesian axis, ≈ 30 ms) with
    /// the TCP above a plane z = 0 of stiffness `k`: returns the traces of a task.
    struct Cell {
        k: f64,
        delay: VecDeque<Vector3<f64>>,
        pos: Vector3<f64>,
        tau: f64,
        normal: Vector3<f64>,
        surface_z: f64,
        /// The surface ends here along x (a table's edge): beyond it, no contact.
        edge_x: f64,
        /// The stiffness the task's gains are made for (the config's, not identified).
        gain_k: f64,
        /// The estimate control regulates on is low-passed like the force service's 12 Hz
        /// filter (two first-order stages, ≈ 26 ms of lag), the peak stays unfiltered.
        filtered: bool,
        lp: [Vector3<f64>; 2],
        /// The task's gains follow an on-line stiffness estimate ([`ArmRun::with_adaptation`]).
        adapt: bool,
        /// A stiffness that changes along x (from, to, stiffness from `to` on): the
        /// compliance linear in between, the height unchanged (the simulator's `grade`).
        grade: Option<(f64, f64, f64)>,
        /// Every command sent (base, m) with whether the law was seating (or approaching).
        cmds: Vec<(Vector3<f64>, bool)>,
        /// A steady force on the tool across the pressing axis (base, N): a wall.
        wall: Vector3<f64>,
        /// Speed adaptation's force bound (N; 0: off).
        slowdown_n: f64,
        max_lag_s: f64,
        /// What the force service's fast oscillation watch reports (N peak to peak).
        fast_swing_n: f64,
    }

    impl Cell {
        fn new(k: f64, z0: f64) -> Self {
            Self {
                k,
                delay: VecDeque::from(vec![Vector3::new(0.4, 0.0, z0); 3]),
                pos: Vector3::new(0.4, 0.0, z0),
                tau: 0.016,
                normal: Vector3::z(),
                surface_z: 0.0,
                edge_x: f64::INFINITY,
                gain_k: k,
                filtered: false,
                lp: [Vector3::zeros(); 2],
                adapt: false,
                grade: None,
                cmds: Vec::new(),
                wall: Vector3::zeros(),
                slowdown_n: 0.0,
                max_lag_s: DEFAULT_MAX_REFERENCE_LAG_S,
                fast_swing_n: 0.0,
            }
        }
        /// The surface's stiffness under the tool.
        fn k_here(&self) -> f64 {
            match self.grade {
                Some((a, b, k1)) => {
                    let w = ((self.pos.x - a) / (b - a)).clamp(0.0, 1.0);
                    1.0 / ((1.0 - w) / self.k + w / k1)
                }
                None => self.k,
            }
        }
        fn step(&mut self, cmd: Vector3<f64>, dt: f64) {
            self.delay.push_back(cmd);
            let c = self.delay.pop_front().unwrap_or(cmd);
            self.pos += (c - self.pos) * (dt / self.tau).min(1.0);
            // The estimate's filter, sub-stepped at 1 kHz like the samples.
            let tau = 1.0 / (2.0 * std::f64::consts::PI * 12.0);
            let f = self.force();
            let n = (dt / 0.001).round().max(1.0) as usize;
            for _ in 0..n {
                let a = (dt / n as f64) / tau;
                self.lp[0] += (f - self.lp[0]) * a;
                self.lp[1] += (self.lp[0] - self.lp[1]) * a;
            }
        }
        /// The wrench estimate control sees (base axes).
        fn estimate(&self) -> Vector3<f64> {
            if self.filtered {
                self.lp[1]
            } else {
                self.force()
            }
        }
        /// The unfiltered peak the force service would report (this model's force is
        /// unfiltered already).
        fn peak(&self) -> WrenchPeak {
            WrenchPeak {
                force_n: self.force().norm(),
                torque_nm: 0.0,
                bridged: false,
                fast_swing_n: self.fast_swing_n,
            }
        }
        /// Contact force on the tool (base axes).
        fn force(&self) -> Vector3<f64> {
            let d = -(self.pos - Vector3::new(0.0, 0.0, self.surface_z)).dot(&self.normal);
            let surface = if d > 0.0 && self.pos.x <= self.edge_x {
                self.normal * (self.k_here() * d)
            } else {
                Vector3::zeros()
            };
            surface + self.wall
        }
    }

    fn press_task(f: f64, duration: f64) -> HybridTask {
        let mut reference: [Profile; 6] = Default::default();
        reference[2] = Profile::Constant(f);
        HybridTask {
            name: "press".into(),
            robot: TaskRobot::Arm,
            frame_kind: FrameKind::Base,
            frame: pose_of(&Isometry3::from_parts(
                Translation3::new(0.0, 0.0, 0.0),
                UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
            )),
            force_axes: [false, false, true, false, false, false],
            reference,
            duration_s: duration,
            ..Default::default()
        }
    }

    /// [`press_task`] at 10 N for `duration` with x ramping 0 → 100 mm over `ramp_s` from 3 s:
    /// a press that slides (off a table's edge when the cell has one).
    fn press_with_x_ramp(duration: f64, ramp_s: f64) -> HybridTask {
        let mut task = press_task(10.0, duration);
        task.reference[0] = Profile::Ramp {
            from: 0.0,
            to: 0.1,
            start_s: 3.0,
            duration_s: ramp_s,
        };
        task
    }

    fn run_arm(
        task: HybridTask,
        cell: &mut Cell,
        limits: HybridLimits,
        seconds: f64,
        each: impl FnMut(f64, &StepReport, &mut Cell),
    ) -> Result<(), Abort> {
        run_arm_with(task, cell, limits, seconds, true, each)
    }

    fn run_arm_with(
        task: HybridTask,
        cell: &mut Cell,
        limits: HybridLimits,
        seconds: f64,
        depth_raise: bool,
        each: impl FnMut(f64, &StepReport, &mut Cell),
    ) -> Result<(), Abort> {
        run_arm_full(
            task,
            cell,
            limits,
            seconds,
            depth_raise,
            FORCE_PREFILTER_S,
            each,
        )
    }

    fn run_arm_full(
        task: HybridTask,
        cell: &mut Cell,
        limits: HybridLimits,
        seconds: f64,
        depth_raise: bool,
        prefilter_s: f64,
        mut each: impl FnMut(f64, &StepReport, &mut Cell),
    ) -> Result<(), Abort> {
        let k = cell.gain_k;
        let g = default_arm_gains([k; 3], [50.0; 3], 0.03);
        let tcp = |p: Vector3<f64>| {
            Isometry3::from_parts(
                Translation3::from(p),
                UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
            )
        };
        let mut run = ArmRun::new(
            task,
            g,
            limits,
            [k, k, k, 50.0, 50.0, 50.0],
            DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
            0.03,
            &tcp(cell.pos),
        )
        .expect("task");
        if cell.adapt {
            run = run.with_adaptation(crate::stiffness::StiffnessParams::default(), 2e3);
            if let Some(a) = run.adapt.as_mut() {
                a.depth_raise = depth_raise;
            }
        }
        run.prefilter_s = prefilter_s;
        run = run
            .with_speed_adaptation(cell.slowdown_n)
            .with_max_lag(cell.max_lag_s);
        let dt = 0.004;
        let mut t = 0.0;
        while t < seconds {
            let input = ArmInput {
                peak: cell.peak(),
                tcp: &tcp(cell.pos),
                wrench_base: Ok((cell.estimate(), Vector3::zeros())),
                now_s: t,
                cycle_period_s: None,
            };
            let (cmd, rep) = run.step(&input)?;
            assert!(cmd.translation.vector.iter().all(|v| v.is_finite()));
            cell.step(cmd.translation.vector, dt);
            cell.cmds.push((cmd.translation.vector, rep.seating));
            each(t, &rep, &mut *cell);
            t += dt;
        }
        Ok(())
    }

    /// Issue 19 item 10, on the pure core: a press at 10 N on 2·10⁴ N/m is ended in contact
    /// by an operator's stop, a mode switch (a move), a non-protective fault (the wrench
    /// goes stale) and a protective stop (a force over the limit). Before, each went idle at
    /// once: robot-io held the measured joints and the force stayed at 10 N. Now the first
    /// three come to rest within `[control.ending]`'s deceleration and unload the surface
    /// (the force decays, never rises), then end the motion at robot-io (which starts the
    /// move only then); the protective stop still ends at once.
    #[test]
    fn ends_in_contact_come_to_rest_unloading_and_a_protective_stop_is_immediate() {
        use crate::core::{ControlCore, HybridSetup};
        use crate::ending::EndParams;
        use common::msg::{
            CartesianTarget, Mode, MoveTarget, SafetyLevel, SafetyReason, SafetyState, WrenchFault,
        };
        #[derive(Debug, Clone, Copy, PartialEq)]
        enum End {
            Operator,
            Switch,
            StaleWrench,
            Protective,
            /// An operator's stop, and 3 cycles into the ending an obstacle (60 N).
            ObstacleWhileEnding,
        }
        let ep = EndParams::default();
        for end in [
            End::Operator,
            End::Switch,
            End::StaleWrench,
            End::Protective,
            End::ObstacleWhileEnding,
        ] {
            let k = 2e4;
            let mut cell = Cell::new(k, 0.0005);
            let tcp = |p: Vector3<f64>| {
                Isometry3::from_parts(
                    Translation3::from(p),
                    UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
                )
            };
            let mut core = ControlCore::new(5);
            core.set_end_params(ep);
            let safety = |level, reason, motion_id| SafetyState {
                level,
                reason,
                robot_boot: 3,
                motion_id,
                ..Default::default()
            };
            core.on_safety(&safety(SafetyLevel::Hold, SafetyReason::NoCommandYet, 0));
            let setup = HybridSetup {
                gains: default_arm_gains([k; 3], [50.0; 3], 0.03),
                limits: default_limits(),
                stiffness: [k, k, k, 50.0, 50.0, 50.0],
                worst_case_n_per_m: 2e4,
                loop_delay_s: 0.03,
                adapt_softest_n_per_m: None,
                slowdown_error_n: 0.0,
                position_speed: (DEFAULT_POSITION_SPEED_M_S, DEFAULT_POSITION_SPEED_RAD_S),
                max_reference_lag_s: DEFAULT_MAX_REFERENCE_LAG_S,
            };
            core.request_hybrid(press_task(10.0, 60.0), setup, Some(WrenchFault::None))
                .unwrap_or_else(|e| panic!("{e}"));
            let first = core.motion_tag().unwrap_or_else(|| panic!("a motion"));
            core.on_safety(&safety(
                SafetyLevel::Active,
                SafetyReason::None,
                first.motion_id,
            ));
            let dt = 0.004;
            let mut t = 0.0;
            let mut cycle = 0u64;
            let mut at_end = None;
            let mut cmds: Vec<Vector3<f64>> = Vec::new();
            let mut forces = Vec::new();
            let mut ended = None;
            let mut next_started = None;
            let mut reserved = None;
            while t < 12.0 {
                cycle += 1;
                core.set_cycle(cycle, dt);
                let mut peak = cell.peak();
                let obstacle = match end {
                    End::Protective => at_end.is_some(),
                    End::ObstacleWhileEnding => at_end.is_some_and(|i| cmds.len() >= i + 3),
                    _ => false,
                };
                if obstacle {
                    // The obstacle's 60 N stays on the sensor.
                    peak.force_n = 60.0;
                }
                core.set_wrench_peak(peak);
                let stale = end == End::StaleWrench && at_end.is_some();
                let w = if stale {
                    Err(crate::core::WrenchUnusable::Stale { age_ms: 51.0 })
                } else {
                    Ok((cell.estimate(), Vector3::zeros()))
                };
                if at_end.is_none() && t >= 6.0 {
                    at_end = Some(cmds.len());
                    assert!((cell.force().z - 10.0).abs() < 0.5, "{:?}", cell.force());
                    match end {
                        End::Operator | End::ObstacleWhileEnding => {
                            core.request_mode(Mode::Idle).map_err(|e| e.to_string())
                        }
                        End::Switch => core
                            .request_move(MoveTarget {
                                tcp_in_base: pose_of(&tcp(cell.pos + Vector3::new(0.0, 0.0, 0.05))),
                                max_speed_m_s: 0.05,
                                max_rot_speed_rad_s: 0.5,
                                ..Default::default()
                            })
                            .map_err(|e| e.to_string()),
                        _ => Ok(()),
                    }
                    .unwrap_or_else(|e| panic!("{e}"));
                    reserved = core.requested_motion_tag();
                }
                let out = core.step_with_wrench(&tcp(cell.pos), t, &w);
                if let Some((m, stop)) = core.take_ended_motion() {
                    assert_eq!(m, first, "{end:?}");
                    // Only the force limit's end holds where the arm is (issue 41 item 3:
                    // the category is a type, not the message's first words).
                    assert_eq!(
                        stop,
                        if matches!(end, End::Protective | End::ObstacleWhileEnding) {
                            StopCategory::Protective(ProtectiveCause::ForceLimit)
                        } else {
                            StopCategory::Controlled
                        },
                        "{end:?}"
                    );
                    ended.get_or_insert(cmds.len());
                }
                if let Some(m) = core.motion_tag().filter(|m| *m != first) {
                    // The move runs under the tag its request's reply named.
                    assert_eq!(Some(m), reserved, "{end:?}");
                    next_started.get_or_insert(cmds.len());
                    core.on_safety(&safety(
                        SafetyLevel::Active,
                        SafetyReason::None,
                        m.motion_id,
                    ));
                }
                match out {
                    Some(CartesianTarget::Pose(p)) => {
                        let c = iso_of(&p).translation.vector;
                        cell.step(c, dt);
                        cmds.push(c);
                    }
                    _ => {
                        // Idle: robot-io holds where the reference was.
                        let c = *cmds.last().unwrap_or(&cell.pos);
                        cell.step(c, dt);
                        cmds.push(c);
                    }
                }
                forces.push(cell.force().z);
                t += dt;
                if ended.is_some() && (end != End::Switch || cmds.len() > ended.unwrap_or(0) + 50) {
                    break;
                }
            }
            let i0 = at_end.unwrap_or_else(|| panic!("{end:?}: never ended"));
            let i1 = ended.unwrap_or_else(|| panic!("{end:?}: the motion never ended"));
            let f0 = forces[i0];
            let f_max = forces[i0..].iter().fold(0.0f64, |a, b| a.max(*b));
            let f_end = forces[i1];
            // Accelerations of the command from the end on (both the deceleration and the
            // unloading may act along z: ≤ 2 × max_accel).
            let mut a_max: f64 = 0.0;
            for i in (i0 + 2)..=i1 {
                let v1 = (cmds[i] - cmds[i - 1]) / dt;
                let v0 = (cmds[i - 1] - cmds[i - 2]) / dt;
                a_max = a_max.max((v1 - v0).norm() / dt);
            }
            eprintln!(
                "{end:?}: {f0:.2} N at the end, peak after {f_max:.2} N, {f_end:.2} N when the \
                 motion ended {:.0} ms later; command acceleration ≤ {a_max:.2} m/s²",
                (i1 - i0) as f64 * dt * 1e3
            );
            assert!(f_max <= f0 + 0.3, "{end:?}: the force rose to {f_max}");
            match end {
                End::ObstacleWhileEnding => {
                    // Issue 41 item 4: the limits hold while coming to rest.
                    assert!(
                        (3..=4).contains(&(i1 - i0)),
                        "{end:?}: stopped {} cycles after the stop, the obstacle at 3",
                        i1 - i0
                    );
                    assert!(core
                        .stop_reason()
                        .is_some_and(|r| r.contains("while coming to rest: contact force")));
                }
                End::Protective => {
                    assert!(
                        i1 - i0 <= 1,
                        "{end:?}: a protective stop is at once ({})",
                        i1 - i0
                    );
                    assert!(core
                        .stop_reason()
                        .is_some_and(|r| r.contains("contact force")));
                }
                _ => {
                    assert!(i1 - i0 > 1, "{end:?}: came to rest first");
                    assert!(a_max <= 2.0 * ep.max_accel_m_s2 * 1.01, "{end:?}: {a_max}");
                    assert!(f_end < ep.release_force_n + 0.3, "{end:?}: still {f_end} N");
                    assert!(
                        (i1 - i0) as f64 * dt <= ep.timeout_s,
                        "{end:?}: {} s",
                        (i1 - i0) as f64 * dt
                    );
                }
            }
            if end == End::Switch {
                let n = next_started.unwrap_or_else(|| panic!("the move never started"));
                assert!(n >= i1, "the move started before the press came to rest");
                assert_eq!(core.mode(), Mode::Move);
            }
            if end == End::StaleWrench {
                assert!(core.stop_reason().is_some_and(|r| r.contains("Stale")));
            }
        }
    }

    #[test]
    fn arm_approaches_at_the_speed_limit_then_holds_the_force_on_every_stiffness() {
        for k in [2e4, 1e5, 1e6] {
            let mut cell = Cell::new(k, 0.002);
            let limits = default_limits();
            let mut peak: f64 = 0.0;
            let mut last = 0.0;
            let mut max_speed: f64 = 0.0;
            let mut prev_z = cell.pos.z;
            run_arm(
                press_task(10.0, 30.0),
                &mut cell,
                limits,
                25.0,
                |t, rep, c| {
                    peak = peak.max(c.force().z);
                    if rep.phase == HybridPhase::Approach {
                        max_speed = max_speed.max((prev_z - c.pos.z) / 0.004);
                    }
                    prev_z = c.pos.z;
                    if t > 24.0 {
                        last = c.force().z;
                    }
                },
            )
            .expect("no abort");
            assert!(
                max_speed <= limits.force_axis_speed_m_s * 1.05,
                "approach speed {max_speed}"
            );
            assert!((last - 10.0).abs() < 0.2, "k {k}: force {last}");
            eprintln!("k {k:e}: first-contact peak {peak:.1} N");
            assert!(peak <= 15.0, "k {k}: peak {peak} > 1.5 × the setpoint");
        }
    }

    /// Issue (force modes inside their bounds, item 3): the approach trusted the configured
    /// stiffness. With gains (and so an approach speed) for 2·10⁴ N/m, a 10⁶ N/m surface was
    /// met at the 5 mm/s limit and the true first-contact force peaked at 128 N against the
    /// 50 N limit. Now the first-contact peak stays ≤ `max_force_n` on any surface up to the
    /// cell's declared worst-case stiffness whatever the gains were made for, and ≤ 1.5 × the
    /// setpoint when they were made for the surface (identified).
    #[test]
    fn the_first_contact_peak_is_bounded_up_to_the_worst_case_stiffness() {
        let limits = default_limits();
        for (surface, gains_for) in [
            (2e4, 2e4),
            (1e5, 1e5),
            (1e6, 1e6),
            (1e5, 2e4),
            (1e6, 2e4),
            (1e6, 1e5),
        ] {
            let mut cell = Cell::new(surface, 0.0005);
            cell.gain_k = gains_for;
            // As on the cell: the law sees the 12 Hz estimate, the limits the unfiltered peak.
            cell.filtered = true;
            // The largest force within 0.5 s of the first touch.
            let mut first: f64 = 0.0;
            let mut touched: Option<f64> = None;
            let r = run_arm(press_task(10.0, 8.0), &mut cell, limits, 8.0, |t, _, c| {
                let f = c.force().z;
                if f > 0.0 && touched.is_none() {
                    touched = Some(t);
                }
                if touched.is_some_and(|t0| t - t0 <= 0.5) {
                    first = first.max(f);
                }
            });
            eprintln!(
                "surface {surface:e} N/m, gains for {gains_for:e}: touched at {touched:?} s, \
                 first-contact peak {first:.1} N ({})",
                r.as_ref()
                    .map_or_else(|e| e.why.clone(), |_| "completed".into())
            );
            assert!(touched.is_some(), "no contact");
            assert!(
                first <= limits.max_force_n,
                "surface {surface:e}, gains for {gains_for:e}: peak {first:.1} N"
            );
            if surface == gains_for {
                assert!(r.is_ok(), "{r:?}");
                assert!(
                    first <= 15.0,
                    "identified {surface:e}: peak {first:.1} N > 1.5 × 10 N"
                );
            }
        }
    }

    /// Issue 21: the seating's stop pulled the command back to the measured pose in one cycle
    /// (the tracking lag v·T as one step), which asked the joints for more acceleration than
    /// robot-io allows: the only limited replies of a whole demo without faults. Now the
    /// command's acceleration while approaching and seating stays within
    /// [`SEATING_STOP_ACCEL_M_S2`], and the first contact stays bounded as before.
    #[test]
    fn the_seating_stop_keeps_the_command_within_its_acceleration_bound() {
        let limits = default_limits();
        let dt = 0.004;
        for (surface, gains_for, adapt) in [
            (2e4, 2e4, false),
            (1e5, 1e5, false),
            (1e6, 1e6, false),
            (2e4, 2e4, true),
            (1e5, 2e4, true),
            (1e6, 2e4, true),
        ] {
            let mut cell = Cell::new(surface, 0.0005);
            cell.gain_k = gains_for;
            cell.filtered = true;
            cell.adapt = adapt;
            let mut first: f64 = 0.0;
            let r = run_arm(press_task(10.0, 6.0), &mut cell, limits, 6.0, |_, _, c| {
                first = first.max(c.force().z);
            });
            assert!(r.is_ok(), "{r:?}");
            let mut worst: f64 = 0.0;
            for w in cell.cmds.windows(3) {
                if w.iter().all(|(_, seating)| *seating) {
                    let a = (w[2].0 - 2.0 * w[1].0 + w[0].0).norm() / (dt * dt);
                    worst = worst.max(a);
                }
            }
            eprintln!(
                "surface {surface:e} N/m, gains for {gains_for:e}, adapt {adapt}: command \
                 acceleration while seating ≤ {worst:.3} m/s², first-contact peak {first:.1} N"
            );
            assert!(
                worst <= SEATING_STOP_ACCEL_M_S2 * (1.0 + 1e-6),
                "surface {surface:e}: {worst} m/s²"
            );
            assert!(
                (5.0..=15.0).contains(&first),
                "surface {surface:e}: peak {first:.1} N"
            );
        }
    }

    /// The blended profile follows a ramp and a series exactly on their straight stretches
    /// (`b/2` late), turns their corners at the acceleration bound, is continuous with a
    /// continuous rate, and arrives where the profile does.
    #[test]
    fn blended_references_turn_their_corners_within_the_acceleration_bound() {
        let a = 1.0;
        let profiles = [
            Profile::Ramp {
                from: 0.0,
                to: 0.1,
                start_s: 0.0,
                duration_s: 5.0,
            },
            Profile::Ramp {
                from: 0.02,
                to: -0.03,
                start_s: 1.0,
                duration_s: 0.5,
            },
            Profile::Series(vec![[0.0, 0.0], [1.0, 0.05], [1.5, 0.05], [2.0, 0.0]]),
        ];
        for p in &profiles {
            let dv = profile_corner_rate_change(p);
            let b = dv / a;
            let dt = 0.001;
            let (mut prev, mut prev_rate) = profile_blended(p, -0.5, a);
            let mut worst: f64 = 0.0;
            let mut t = -0.5 + dt;
            while t < 8.0 {
                let (v, rate) = profile_blended(p, t, a);
                // Its rate is the derivative of its value.
                let num = (v - prev) / dt;
                assert!(
                    (num - rate).abs() <= a * dt + 1e-9,
                    "{p:?} at {t}: {num} vs {rate}"
                );
                worst = worst.max((rate - prev_rate).abs() / dt);
                // On a straight stretch, the profile b/2 late.
                let straight = (0..20).all(|j| {
                    let s = t - b * j as f64 / 19.0;
                    (profile_rate(p, s) - profile_rate(p, t - b / 2.0)).abs() < 1e-12
                });
                if straight {
                    assert!(
                        (v - profile_value(p, t - b / 2.0)).abs() < 1e-9,
                        "{p:?} at {t}"
                    );
                }
                (prev, prev_rate) = (v, rate);
                t += dt;
            }
            assert!(worst <= a * 1.001, "{p:?}: {worst}");
            assert!((prev - profile_value(p, 8.0)).abs() < 1e-12, "{p:?}");
            assert_eq!(profile_blended(p, 3.0, 0.0).0, profile_value(p, 3.0));
        }
        // The antiderivative's differences are the profile's integrals.
        for p in &profiles {
            let (t0, t1) = (0.3, 1.7);
            let n = 20000;
            let h = (t1 - t0) / n as f64;
            let num: f64 = (0..n)
                .map(|i| profile_value(p, t0 + (i as f64 + 0.5) * h) * h)
                .sum();
            let exact = profile_integral(p, t1) - profile_integral(p, t0);
            assert!((num - exact).abs() < 1e-6, "{p:?}: {num} vs {exact}");
        }
    }

    #[test]
    fn stop_velocity_lands_at_rest_within_its_bound() {
        let (a, dt) = (1.0, 0.004);
        for (e0, v0) in [
            (-1e-4, 0.005),
            (-2e-5, 0.0007),
            (3e-4, 0.0),
            (0.0, 0.01),
            (1e-3, -0.02),
        ] {
            let (mut x, mut v) = (0.0, v0);
            let mut settled = None;
            for n in 0..400 {
                let nv = stop_velocity(e0 - x, v, a, dt);
                assert!(
                    (nv - v).abs() <= a * dt * (1.0 + 1e-9),
                    "{e0} {v0}: step {n}"
                );
                v = nv;
                x += v * dt;
                if (x - e0).abs() < 1e-9 && v.abs() <= a * dt {
                    settled.get_or_insert(n);
                }
            }
            assert!(settled.is_some(), "{e0} {v0}: at {x}, {v}");
            assert!(
                (x - e0).abs() < 1e-9 && v.abs() < 1e-9,
                "{e0} {v0}: at {x}, {v}"
            );
        }
    }

    /// Issue 20 (items 1, 2): gains made for 2·10⁴ N/m (the config default, not identified)
    /// on surfaces up to 10⁶ N/m. Without adaptation the loop, 5× and 50× past its design
    /// point, oscillates and the task is ended; with the on-line estimate the gains follow the
    /// surface and the press holds its 10 N on every one.
    #[test]
    fn gains_follow_the_estimated_stiffness_on_a_surface_nobody_identified() {
        let limits = default_limits();
        for surface in [2e4, 1e5, 1e6] {
            for adapt in [false, true] {
                let mut cell = Cell::new(surface, 0.0005);
                cell.gain_k = 2e4;
                cell.filtered = true;
                cell.adapt = adapt;
                let mut touched: Option<f64> = None;
                let (mut first, mut sq, mut n, mut worst) = (0.0f64, 0.0, 0, 0.0f64);
                let mut last = StepReport::default();
                let r = run_arm(
                    press_task(10.0, 6.0),
                    &mut cell,
                    limits,
                    6.0,
                    |t, rep, c| {
                        let f = c.force().z;
                        if f > 0.0 && touched.is_none() {
                            touched = Some(t);
                        }
                        if touched.is_some_and(|t0| t - t0 <= 0.5) {
                            first = first.max(f);
                        }
                        // The true force's error over the last 3 s.
                        if t >= 3.0 {
                            sq += (f - 10.0).powi(2);
                            n += 1;
                            worst = worst.max((f - 10.0).abs());
                        }
                        last = *rep;
                    },
                );
                let rms = (sq / n.max(1) as f64).sqrt();
                eprintln!(
                    "surface {surface:e}, adapt {adapt}: {} first peak {first:.1} N, RMS {rms:.3} \
                     N, max {worst:.2} N; gains for {:.3e}, estimate {:.3e}",
                    r.as_ref()
                        .map_or_else(|e| e.why.clone(), |_| "completed,".into()),
                    last.gains_for_n_per_m[2],
                    last.stiffness_estimate_n_per_m[2]
                );
                if adapt {
                    assert!(r.is_ok(), "surface {surface:e}: {r:?}");
                    assert!(
                        rms <= 0.5 && worst <= 2.0,
                        "surface {surface:e}: {rms} {worst}"
                    );
                    let est = last.stiffness_estimate_n_per_m[2];
                    assert!(
                        (est / surface - 1.0).abs() < 0.3,
                        "surface {surface:e}: {est:e}"
                    );
                    assert!(last.gains_for_n_per_m[2] >= 0.9 * surface);
                } else if surface >= 1e5 {
                    // The failure this fixes (the test can fail).
                    assert!(r.is_err(), "surface {surface:e} without adaptation: {r:?}");
                }
            }
        }
    }

    /// Issue 41 item 5: a bound per axis holds on the vector: a diagonal is no faster than an
    /// axis; groups (force/position, translational/rotational) are bounded apart; a single
    /// axis is left to its own bound.
    #[test]
    fn speed_bounds_hold_on_the_norm() {
        let axes = [false, false, true, false, false, false];
        let bound = [0.25, 0.25, 0.01, 1.0, 1.0, 1.0];
        let mut u = [0.25, 0.25, 0.01, 1.0, 1.0, 1.0];
        clamp_norms(&mut u, &axes, &bound);
        assert!(
            ((u[0] * u[0] + u[1] * u[1]).sqrt() - 0.25).abs() < 1e-12,
            "{u:?}"
        );
        assert!((u[0] - u[1]).abs() < 1e-15, "the direction is kept");
        assert_eq!(u[2], 0.01, "the force axis alone");
        let w = (u[3] * u[3] + u[4] * u[4] + u[5] * u[5]).sqrt();
        assert!((w - 1.0).abs() < 1e-12, "{u:?}");
        let mut slow = [0.1, 0.1, 0.0, 0.0, 0.0, 0.0];
        clamp_norms(&mut slow, &axes, &bound);
        assert_eq!(
            slow,
            [0.1, 0.1, 0.0, 0.0, 0.0, 0.0],
            "inside the bound: untouched"
        );
    }

    /// Issue 41: a press that slides off its part's edge near the end of its duration (the
    /// search not yet past its travel bound) does not end `Done`: it fails, naming the lost
    /// contact (before: `ContactLost` for the last seconds, then `Done`, and `cell hybrid`
    /// exited 0 with the tool in the air). The same press ending on the table completes. (Only
    /// a task timed from its contact: a peg's search step may end as the peg drops.)
    #[test]
    fn a_press_that_ends_off_its_part_fails_naming_the_lost_contact() {
        let limits = default_limits();
        let run = |edge_x: f64| {
            let mut cell = Cell::new(2e4, 0.0005);
            cell.edge_x = edge_x;
            let mut task = press_with_x_ramp(9.0, 5.0);
            task.from_contact = true;
            run_arm(task, &mut cell, limits, 40.0, |_, _, _| {})
        };
        let e = run(0.45).expect_err("off the edge");
        // The reference clock stops while the contact is lost, so the search for the surface
        // ends it (within its travel) before the task's duration can.
        assert!(e.why.contains("contact lost"), "{e}");
        assert!(!e.is_protective(), "{e}");
        run(1.0).expect("on the table to the end");
    }

    /// Issue 41 item 4: a completed task's position axes come to rest within the deceleration
    /// bound. A press whose x follows a sine (±10 mm at 0.5 Hz, 31 mm/s at its fastest) ends
    /// at the sine's fastest point: the command's x velocity falls by at most 1 m/s² × one
    /// cycle a cycle, to rest (before: 31 mm/s to 0 in one cycle, 7.9 m/s²).
    #[test]
    fn a_completed_task_comes_to_rest_within_its_deceleration() {
        let mut cell = Cell::new(2e4, 0.0005);
        let mut task = press_task(10.0, 4.0);
        task.reference[0] = Profile::Sine {
            offset: 0.0,
            amplitude: 0.01,
            freq_hz: 0.5,
            phase_rad: 0.0,
        };
        let mut done_at: Option<usize> = None;
        // The sine starts at its full speed (a velocity step the model arm lags by 5.1 mm):
        // this test is about its end, so the deviation bound is widened.
        let limits = HybridLimits {
            deviation_m: 0.02,
            ..default_limits()
        };
        run_arm(task, &mut cell, limits, 4.5, |_, r, c| {
            if r.phase == HybridPhase::Done && done_at.is_none() {
                done_at = Some(c.cmds.len() - 1);
            }
        })
        .expect("the press completes");
        let from = done_at.expect("completed");
        let dt = 0.004;
        let vx: Vec<f64> = cell.cmds[from - 2..]
            .windows(2)
            .map(|w| (w[1].0.x - w[0].0.x) / dt)
            .collect();
        assert!(vx[0].abs() > 0.02, "not moving at the end: {:?}", &vx[..3]);
        let worst = vx
            .windows(2)
            .map(|w| (w[1] - w[0]).abs() / dt)
            .fold(0.0, f64::max);
        assert!(
            worst <= SEATING_STOP_ACCEL_M_S2 * (1.0 + 1e-6),
            "x decelerated at {worst:.2} m/s²"
        );
        assert!(vx.last().is_some_and(|v| v.abs() < 1e-12), "not at rest");
    }

    /// Issue 41: while a contact made is lost the reference clock stops: the position axes
    /// wait where the surface was left instead of running on (a press that lost its contact ran
    /// its x reference on to 49.7 mm with the arm still). Off a table's edge in the middle of
    /// an x ramp: from the loss on, the x reference does not move; the task then ends by the
    /// search's travel bound, naming the lost contact.
    #[test]
    fn the_reference_clock_stops_while_contact_is_lost() {
        let mut cell = Cell::new(2e4, 0.0005);
        cell.edge_x = 0.43;
        let task = press_with_x_ramp(60.0, 10.0);
        let mut at_loss: Option<(f64, f64)> = None;
        let mut moved_while_lost: f64 = 0.0;
        let mut lost_cycles = 0;
        let e = run_arm(task, &mut cell, default_limits(), 60.0, |_, r, _| {
            if r.phase == HybridPhase::ContactLost {
                lost_cycles += 1;
                let (x0, clock0) = *at_loss.get_or_insert((r.position_ref[0], r.ref_time_s));
                moved_while_lost = moved_while_lost.max((r.position_ref[0] - x0).abs());
                assert!(
                    r.ref_time_s <= clock0 + 1e-9,
                    "the reference clock ran on while lost: {} > {clock0}",
                    r.ref_time_s
                );
            }
        })
        .expect_err("off the edge");
        assert!(lost_cycles > 10, "never lost: {e}");
        assert!(e.why.contains("contact lost and not found again"), "{e}");
        assert!(
            moved_while_lost < 1e-9,
            "x reference moved {moved_while_lost} m while the contact was lost"
        );
    }

    /// Issue 41: travel in contact is bounded. A surface that gives way under the press (it
    /// moves away at 5 mm/s from 1 s after the first contact: the tool follows it, pressing
    /// 10 N) ends the task at `contact_travel_m`, naming the axis; a force axis pushing into
    /// nothing while another axis still touches (before, the search bounds ran only while no
    /// axis touched: it drove on for the task's whole duration) ends the same way.
    #[test]
    fn travel_in_contact_is_bounded_on_every_force_axis() {
        let limits = default_limits();
        let dt = 0.004;
        // Surfaces softer and stiffer than the table the limits were written for, each giving
        // way at 5 mm/s.
        for k in [5e3, 2e4, 1e5, 1e6] {
            let mut cell = Cell::new(k, 0.0005);
            let mut contact_t: Option<f64> = None;
            let mut lowest: f64 = 0.0;
            let e = run_arm(
                press_task(10.0, 60.0),
                &mut cell,
                limits,
                60.0,
                |t, r, c| {
                    if r.phase == HybridPhase::Contact && contact_t.is_none() {
                        contact_t = Some(t);
                    }
                    if contact_t.is_some_and(|t0| t > t0 + 1.0) {
                        c.surface_z -= 0.005 * dt;
                    }
                    lowest = lowest.min(c.pos.z);
                },
            )
            .expect_err("a surface that gives way");
            eprintln!("{k:e} N/m: {e}; lowest {:.2} mm", lowest * 1e3);
            // Followed in contact, the travel bound ends it; on the softest the loop loses the
            // receding surface (10 N of error drives the axis at about 5 mm/s there) and the
            // search's travel after the loss does.
            let in_contact = e.why.contains("limits.contact_travel_m") && e.why.contains("along z");
            assert!(
                in_contact || e.why.contains("limits.reapproach_travel_m"),
                "{k:e}: {e}"
            );
            assert!(!e.is_protective(), "{e}");
            // The tool sat 10 N / k in the surface at contact; it followed the surface no
            // further than the bound (+ the servo's lag).
            assert!(
                -lowest <= 10.0 / k + limits.contact_travel_m + 0.0005,
                "{k:e}: followed {:.2} mm",
                -lowest * 1e3
            );
        }
        // z presses the table, x pushes 5 N into nothing (no wall): z's contact is the task's.
        let mut cell = Cell::new(2e4, 0.0005);
        let mut task = press_task(10.0, 60.0);
        task.force_axes[0] = true;
        task.reference[0] = Profile::Constant(5.0);
        // (x moves at its approach speed before the contact too, bounded by the approach's
        // travel: the contact travel counts from the first contact.)
        let mut x_contact: Option<f64> = None;
        let mut furthest: f64 = 0.0;
        let e = run_arm(task, &mut cell, limits, 60.0, |_, r, c| {
            if r.phase == HybridPhase::Contact {
                let x0 = *x_contact.get_or_insert(c.pos.x);
                furthest = furthest.max(c.pos.x - x0);
            }
        })
        .expect_err("x drives into nothing");
        assert!(e.why.contains("along x"), "{e}");
        assert!(e.why.contains("limits.contact_travel_m"), "{e}");
        assert!(
            furthest <= limits.contact_travel_m + 0.0005,
            "x went {:.2} mm",
            furthest * 1e3
        );
    }

    /// Issue: bounded approach. The press slides off a table's edge: the force axis searches
    /// for the surface again, but no further than `reapproach_travel_m`; with no surface at all
    /// the approach ends after `approach_travel_m`. (Before, both drove on at approach speed
    /// until the task's duration ended.)
    #[test]
    fn the_search_for_a_surface_is_bounded_in_travel() {
        let limits = default_limits();
        let mut cell = Cell::new(2e4, 0.0005);
        cell.edge_x = 0.45;
        let task = press_with_x_ramp(60.0, 5.0);
        let mut lowest: f64 = 0.0;
        let e = run_arm(task, &mut cell, limits, 60.0, |_, _, c| {
            lowest = lowest.min(c.pos.z)
        })
        .expect_err("off the edge");
        assert!(e.why.contains("contact lost and not found again"), "{e}");
        assert!(e.why.contains("reapproach_travel_m"), "{e}");
        // In contact the tool sat 0.5 mm in the table; from there it may search 5 mm further
        // (+ the servo's lag at the 5 mm/s approach speed).
        let drop = -lowest;
        eprintln!("lowest point below the table: {:.2} mm", drop * 1e3);
        assert!(
            drop <= 0.0005 + limits.reapproach_travel_m + 0.0005,
            "dropped {:.2} mm",
            drop * 1e3
        );
        // No surface at all: the approach ends after its travel.
        // (At the unknown surface's approach speed, 0.2 mm/s for 10 N, the timeout would end
        // it first: this search is given the time to reach its travel bound.)
        let mut void = Cell::new(2e4, 0.002);
        void.surface_z = -10.0;
        let mut travelled: f64 = 0.0;
        let mut slow = limits;
        slow.approach_timeout_s = 400.0;
        let e = run_arm(
            press_task(10.0, 400.0),
            &mut void,
            slow,
            400.0,
            |_, _, c| travelled = travelled.max(0.002 - c.pos.z),
        )
        .expect_err("no surface");
        assert!(e.why.contains("no contact within 50.0 mm"), "{e}");
        assert!(
            travelled <= limits.approach_travel_m + 0.0005,
            "{travelled}"
        );
    }

    /// The observer counts swings of the force error, not its size: a chatter is found within
    /// 0.5 s, a step's overshoot and a first contact's ringing are not an oscillation.
    #[test]
    fn oscillation_watch_tells_a_chatter_from_a_transient() {
        let sel = [false, false, true, false, false, false];
        let f_ref = [0.0, 0.0, 10.0, 0.0, 0.0, 0.0];
        let dt = 0.004;
        // 0 ↔ 29 N every 0.2 s (the 10⁵ N/m table with gains for 2·10⁴ N/m).
        let mut w = OscillationWatch::default();
        let mut found = None;
        for i in 0..500 {
            let t = i as f64 * dt;
            let f = 14.5 - 14.5 * (2.0 * std::f64::consts::PI * 5.0 * t).cos();
            if w.step(t, &[0.0, 0.0, f, 0.0, 0.0, 0.0], &f_ref, &sel)
                .is_some()
            {
                found = Some(t);
                break;
            }
        }
        let t = found.expect("chatter found");
        assert!(t <= 0.5, "found after {t} s");
        // A first contact at 27.7 N, an undershoot to 4 N, settling at 10 N; and a 2 → 10 N
        // step with 19 % overshoot: no oscillation.
        for trace in [
            vec![1.0, 27.7, 4.0, 11.0, 10.0, 10.0],
            vec![2.0, 2.0, 11.9, 9.5, 10.1, 10.0],
        ] {
            let mut w = OscillationWatch::default();
            for (i, pair) in trace.windows(2).enumerate() {
                for j in 0..25 {
                    let t = (i * 25 + j) as f64 * dt;
                    let f = pair[0] + (pair[1] - pair[0]) * j as f64 / 25.0;
                    assert!(
                        w.step(t, &[0.0, 0.0, f, 0.0, 0.0, 0.0], &f_ref, &sel)
                            .is_none(),
                        "{trace:?}: oscillation at {t} s"
                    );
                }
            }
        }
    }

    /// Issue 41 item 8: a rotational force axis and a zero-reference force axis are watched
    /// too — a torque chatter about x and a 6 N ↔ −6 N lateral chatter on a compliant axis
    /// are found; a lateral force wandering within ±2 N is not.
    #[test]
    fn oscillation_watch_covers_rotational_and_zero_reference_axes() {
        let dt = 0.004;
        let chatter = |k: usize, amp: f64, f_ref: [f64; 6], sel: [bool; 6]| {
            let mut w = OscillationWatch::default();
            (0..500).find_map(|i| {
                let t = i as f64 * dt;
                let mut f = f_ref;
                f[k] += amp * (2.0 * std::f64::consts::PI * 5.0 * t).sin();
                w.step(t, &f, &f_ref, &sel).map(|(axis, _)| (axis, t))
            })
        };
        let torque = chatter(
            3,
            1.0,
            [0.0, 0.0, 10.0, 0.5, 0.0, 0.0],
            [false, false, true, true, false, false],
        );
        assert_eq!(torque.map(|(a, _)| a), Some(3), "{torque:?}");
        let sides = [true, true, true, false, false, false];
        let lateral = chatter(0, 6.0, [0.0, 0.0, 5.0, 0.0, 0.0, 0.0], sides);
        assert_eq!(lateral.map(|(a, _)| a), Some(0), "{lateral:?}");
        assert_eq!(chatter(1, 2.0, [0.0, 0.0, 5.0, 0.0, 0.0, 0.0], sides), None);
    }

    /// Issue: a force loop that oscillates is noticed. The 10 N press on a surface much stiffer
    /// than the gains were made for (the configured 2·10⁴ N/m) ends with its reason instead of
    /// bouncing to the task's end (before: it ran its whole duration). This model (no 12 Hz
    /// estimate filter, a 28 ms lag) is still stable at 5× the stiffness, so it is pressed on
    /// 50×; the 10⁵ N/m case of the issue runs through the processes (`tests/hybrid.rs`).
    /// Issue 41 item 8: the fast band. A press in contact whose unfiltered force swings faster
    /// than the 12 Hz estimate shows (the force service's `fast_swing_n`) ends naming it once
    /// the swing reaches the band (10 N press: 2·max(2.5, 2) = 5 N peak to peak); below the
    /// band, or before contact, it runs on. Without a translational force axis there is no band.
    #[test]
    fn a_fast_oscillation_of_the_unfiltered_force_ends_the_task() {
        let run = |swing: f64, from_s: f64| {
            let mut cell = Cell::new(2e4, 0.0005);
            run_arm(
                press_task(10.0, 3.0),
                &mut cell,
                default_limits(),
                3.5,
                |t, _, c| {
                    if t >= from_s {
                        c.fast_swing_n = swing;
                    }
                },
            )
        };
        let e = run(6.0, 2.0).expect_err("fast oscillation");
        assert!(e.why.contains("force oscillating fast"), "{e}");
        assert!(!e.is_protective(), "{e}");
        run(4.0, 2.0).expect("below the band");
        assert_eq!(
            fast_swing_band(
                &[0.0, 0.0, 10.0, 0.0, 0.0, 0.0],
                &[false, false, true, false, false, false]
            ),
            Some(5.0)
        );
        assert_eq!(
            fast_swing_band(
                &[0.0, 0.0, 40.0, 0.0, 0.0, 0.0],
                &[false, false, true, false, false, false]
            ),
            Some(20.0)
        );
        assert_eq!(
            fast_swing_band(&[0.0; 6], &[true, true, false, false, false, false]),
            Some(10.0)
        );
        assert_eq!(
            fast_swing_band(
                &[0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
                &[false, false, false, false, false, true]
            ),
            None
        );
    }

    #[test]
    fn a_press_whose_loop_oscillates_ends_with_its_reason() {
        let mut cell = Cell::new(1e6, 0.002);
        cell.gain_k = 2e4;
        let mut limits = default_limits();
        limits.max_force_n = 1000.0;
        let mut swing_seen = false;
        let r = run_arm(
            press_task(10.0, 15.0),
            &mut cell,
            limits,
            15.0,
            |_, _, c| swing_seen |= c.force().z < 1.0,
        );
        match r {
            Err(e) => assert!(e.why.contains("force loop oscillating"), "{e}"),
            Ok(()) => panic!("ran to the end (contact bounced: {swing_seen})"),
        }
    }

    /// A 10 N press task on 2·10⁴ N/m gains, started at a TCP pointing down.
    fn press_run() -> (Isometry3<f64>, ArmRun) {
        let tcp = Isometry3::from_parts(
            Translation3::new(0.4, 0.0, 0.0),
            UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
        );
        let run = ArmRun::new(
            press_task(10.0, 5.0),
            default_arm_gains([2e4; 3], [50.0; 3], 0.03),
            default_limits(),
            [2e4, 2e4, 2e4, 50.0, 50.0, 50.0],
            DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
            0.03,
            &tcp,
        )
        .expect("task");
        (tcp, run)
    }

    /// Issue: a bridged wrench. While the estimate is the last usable one bridged over a gap,
    /// the command does not advance along the force axes and the force integral stands still.
    #[test]
    fn a_bridged_wrench_freezes_the_force_axes() {
        let (tcp, mut run) = press_run();
        let input = |bridged: bool, f: f64, now_s: f64| ArmInput {
            peak: WrenchPeak {
                force_n: f,
                torque_nm: 0.0,
                bridged,
                fast_swing_n: 0.0,
            },
            tcp: &tcp,
            wrench_base: Ok((Vector3::new(0.0, 0.0, f), Vector3::zeros())),
            now_s,
            cycle_period_s: Some(0.004),
        };
        // In contact at 6 N (below the 10 N setpoint: the law presses on).
        let mut now = 0.0;
        let mut last = tcp;
        for _ in 0..20 {
            last = run.step(&input(false, 6.0, now)).expect("step").0;
            now += 0.004;
        }
        assert!(run.sup.in_contact());
        let moving = run.step(&input(false, 6.0, now)).expect("step").0;
        assert!(
            (moving.translation.z - last.translation.z).abs() > 1e-7,
            "pressing"
        );
        let int_before = run.law.int_f;
        // Bridged: the command stands still along z, the integral too.
        let mut held = moving;
        for _ in 0..10 {
            now += 0.004;
            let c = run.step(&input(true, 6.0, now)).expect("bridged step").0;
            assert_eq!(
                c.translation.z, held.translation.z,
                "advanced while bridged"
            );
            held = c;
        }
        assert_eq!(run.law.int_f, int_before);
    }

    /// Issue: fast limit checks. The force limit is checked on the force service's unfiltered
    /// peak: a filtered estimate of 10 N with a 60 N impact inside the window ends the task
    /// (the 12 Hz estimate said 50.4 N while the true force reached 128 N).
    #[test]
    fn the_force_limit_sees_the_unfiltered_peak() {
        let (tcp, mut run) = press_run();
        let input = |peak: f64, now_s: f64| ArmInput {
            peak: WrenchPeak {
                force_n: peak,
                torque_nm: 0.0,
                bridged: false,
                fast_swing_n: 0.0,
            },
            tcp: &tcp,
            wrench_base: Ok((Vector3::new(0.0, 0.0, 10.0), Vector3::zeros())),
            now_s,
            cycle_period_s: Some(0.004),
        };
        run.step(&input(10.5, 0.0)).expect("below the limit");
        let e = run
            .step(&input(60.0, 0.004))
            .expect_err("peak above the limit");
        assert!(e.why.contains("contact force 60.0 N > max 50.0 N"), "{e}");
    }

    #[test]
    fn limits_end_the_task_with_a_reason() {
        // Max force: a 60 N setpoint with a 50 N limit.
        let mut cell = Cell::new(2e4, 0.001);
        let mut limits = default_limits();
        limits.force_axis_speed_m_s = 0.05;
        let e = run_arm(
            press_task(60.0, 10.0),
            &mut cell,
            limits,
            10.0,
            |_, _, _| {},
        )
        .expect_err("max force");
        assert!(e.why.contains("contact force"), "{e}");
        // Deviation: a position axis pushed away (a wall along y the TCP cannot pass).
        let mut t = press_task(5.0, 10.0);
        t.reference[1] = Profile::Ramp {
            from: 0.0,
            to: 0.2,
            start_s: 0.0,
            duration_s: 0.1,
        };
        let mut cell = Cell::new(2e4, 0.001);
        let mut l = default_limits();
        l.deviation_m = 0.01;
        let e = run_arm(t, &mut cell, l, 5.0, |_, _, _| {}).expect_err("deviation");
        assert!(e.why.contains("deviation on y"), "{e}");
        // A faulted/stale wrench holds at once.
        let mut run = ArmRun::new(
            press_task(5.0, 10.0),
            default_arm_gains([2e4; 3], [50.0; 3], 0.03),
            default_limits(),
            [2e4; 6],
            DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
            0.03,
            &Isometry3::identity(),
        )
        .expect("task");
        let e = run
            .step(&ArmInput {
                peak: WrenchPeak::default(),
                tcp: &Isometry3::identity(),
                wrench_base: Err(crate::core::WrenchUnusable::Stale { age_ms: 60.0 }),
                now_s: 0.004,
                cycle_period_s: None,
            })
            .expect_err("stale");
        assert!(e.why.contains("Stale"));
        assert_eq!(e.stop, StopCategory::Controlled, "a gap is not a collision");
        // An impact (a `Spike`) or a saturated sensor is protective (issue 41 item 2).
        for (fault, cause) in [
            (WrenchFault::Spike, ProtectiveCause::Impact),
            (WrenchFault::Saturated, ProtectiveCause::Saturated),
        ] {
            let e = run
                .step(&ArmInput {
                    peak: WrenchPeak::default(),
                    tcp: &Isometry3::identity(),
                    wrench_base: Err(crate::core::WrenchUnusable::Fault(fault)),
                    now_s: 0.004,
                    cycle_period_s: None,
                })
                .expect_err("impact");
            assert_eq!(e.stop, StopCategory::Protective(cause), "{e}");
            assert!(e.is_protective());
        }
        // NaN in → abort, never a NaN command.
        let e = run
            .step(&ArmInput {
                peak: WrenchPeak::default(),
                tcp: &Isometry3::identity(),
                wrench_base: Ok((Vector3::new(f64::NAN, 0.0, 0.0), Vector3::zeros())),
                now_s: 0.008,
                cycle_period_s: None,
            })
            .expect_err("nan");
        assert!(e.why.contains("non-finite"), "{e}");
    }

    /// The tracking frame keeps its normal while the tool moves into the surface (the
    /// approach's velocity, still above the sliding threshold at first contact, is along the
    /// force: removing it left the stray lateral force, and the frame turned towards it), and
    /// follows a tilted surface once the tool slides along it.
    #[test]
    fn tracking_frame_ignores_approach_travel_and_follows_sliding() {
        let mut task = press_task(10.0, 10.0);
        task.frame_kind = FrameKind::Tracking;
        let down = UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0);
        let start = Isometry3::from_parts(Translation3::new(0.4, 0.0, 0.3), down);
        let mut run = ArmRun::new(
            task,
            default_arm_gains([2e4; 3], [50.0; 3], 0.03),
            default_limits(),
            [2e4; 6],
            DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
            0.03,
            &start,
        )
        .expect("task");
        let z0 = run.frame.rotation * Vector3::z();
        let dt = 0.004;
        // Approach at 10 mm/s into contact: the surface pushes up (5 N) with a stray 0.4 N on y.
        let mut p = start.translation.vector;
        for _ in 0..50 {
            p.z -= 0.010 * dt;
            let tcp = Isometry3::from_parts(Translation3::from(p), down);
            run.track(&tcp, &Vector3::new(0.0, 0.4, 5.0), dt);
        }
        let z = run.frame.rotation * Vector3::z();
        let turned = z.angle(&z0).to_degrees();
        assert!(
            turned < 0.01,
            "the frame turned {turned:.2}° during the approach"
        );
        // Sliding along +y at 20 mm/s over a surface tilted 10° about y (normal in the x–z
        // plane), friction 0.3 against the travel.
        let tilt = 10f64.to_radians();
        let normal_up = Vector3::new(tilt.sin(), 0.0, tilt.cos());
        let on_tool = normal_up * 10.0 + Vector3::new(0.0, -3.0, 0.0);
        for _ in 0..500 {
            p.y += 0.020 * dt;
            let tcp = Isometry3::from_parts(Translation3::from(p), down);
            run.track(&tcp, &on_tool, dt);
        }
        let z = run.frame.rotation * Vector3::z();
        let off = z.angle(&(-normal_up)).to_degrees();
        assert!(
            off < 0.5,
            "{off:.2}° from the surface normal after 2 s of sliding"
        );
    }

    /// Contact is made and kept on the pressing axes (a non-zero reference) only: a peg whose
    /// lateral (0 N, compliant) axes meet the hole's wall has not touched the surface it
    /// presses on, so it stays in its approach (and its approach's travel bound) rather than
    /// entering a contact that the wall's release then reads as lost.
    #[test]
    fn a_wall_on_a_compliant_axis_neither_makes_nor_keeps_a_contact() {
        let sel = [true, true, true, false, false, false];
        let f_ref = [0.0, 0.0, 5.0, 0.0, 0.0, 0.0];
        let mut sup = Supervision::new(default_limits());
        // 3.6 N from a wall along y, 0.2 N along the pressing z: no contact.
        let wall = [2.2, 3.6, 0.2, 0.0, 0.0, 0.0];
        assert_eq!(sup.update(0.0, &wall, &f_ref, &sel, 4.3, 0.0), Ok(false));
        assert_eq!(sup.phase, HybridPhase::Approach);
        // Pressing along z makes it; the wall alone does not keep it.
        let press = [0.0, 0.0, 5.0, 0.0, 0.0, 0.0];
        assert_eq!(sup.update(0.1, &press, &f_ref, &sel, 5.0, 0.0), Ok(false));
        assert_eq!(sup.phase, HybridPhase::Contact);
        let loss = default_limits().contact_loss_s;
        assert_eq!(sup.update(0.2, &wall, &f_ref, &sel, 4.3, 0.0), Ok(false));
        assert_eq!(
            sup.update(0.2 + loss + 1e-3, &wall, &f_ref, &sel, 4.3, 0.0),
            Ok(true)
        );
        // Every reference zero (a ramp at its start): any force axis makes the contact.
        let mut sup = Supervision::new(default_limits());
        let zero = [0.0; 6];
        assert_eq!(sup.update(0.0, &wall, &zero, &sel, 4.3, 0.0), Ok(false));
        assert_eq!(sup.phase, HybridPhase::Contact);
    }

    /// A steady force across the pressing axis (a peg pressed against a hole's wall,
    /// friction while sliding) is not the surface ahead: the approach goes on to the surface
    /// and seats there. Before, the seating stop read the unfiltered peak's magnitude (6 N
    /// across ≥ 0.9 · 5 N) and the approach stood still above the surface for the task's
    /// whole time (the peg experiment's 0.025 mm case, 2026-12-05).
    #[test]
    fn a_force_across_the_axis_does_not_stop_the_approach() {
        let mut cell = Cell::new(1e5, 0.0005);
        cell.gain_k = 1e5;
        cell.wall = Vector3::new(6.0, 0.0, 0.0);
        let mut touched_at = None;
        let mut seated = false;
        run_arm(
            press_task(5.0, 4.0),
            &mut cell,
            default_limits(),
            4.0,
            |t, rep, c| {
                if c.force().z > 0.0 && touched_at.is_none() {
                    touched_at = Some(t);
                }
                if rep.phase == HybridPhase::Contact && (c.force().z - 5.0).abs() < 0.5 {
                    seated = true;
                }
            },
        )
        .expect("no abort");
        assert!(
            touched_at.is_some(),
            "the approach never reached the surface"
        );
        assert!(seated, "never pressed 5 N along z");
        // The split itself: 6 N across, a 7.8 N peak → 5 N along; a pure impact counts whole.
        let fc = [6.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        assert!((along_axis(7.81, &fc, 2) - 5.0).abs() < 0.01);
        assert!((along_axis(6.0, &fc, 2)).abs() < 1e-9);
        assert!((along_axis(12.0, &[0.0; 6], 2) - 12.0).abs() < 1e-12);
    }

    #[test]
    fn contact_loss_is_detected_and_the_axis_approaches_again() {
        let mut cell = Cell::new(2e4, 0.0005);
        let limits = default_limits();
        let mut phases = Vec::new();
        let mut dropped = false;
        run_arm(
            press_task(10.0, 30.0),
            &mut cell,
            limits,
            25.0,
            |t, rep, c| {
                if t > 3.0 && !dropped {
                    // The surface drops away by 3 mm at once (the re-approach may search 5).
                    c.surface_z -= 0.003;
                    dropped = true;
                }
                phases.push(rep.phase);
            },
        )
        .expect("no abort");
        let i = phases
            .iter()
            .position(|p| *p == HybridPhase::ContactLost)
            .expect("contact loss reported");
        assert!(
            phases[i..].contains(&HybridPhase::Contact),
            "contact made again"
        );
    }

    /// The 10 N press on a surface nobody identified (gains made for 2·10⁴ N/m): the true
    /// first-contact peak, the rise (10 → 90 % of the setpoint, from the first touch) and the
    /// overshoot past the setpoint after the rise, with the gains following the estimate.
    fn unknown_surface_press(surface: f64) -> (f64, f64, f64, Result<(), Abort>, StepReport) {
        let limits = default_limits();
        let mut cell = Cell::new(surface, 0.0005);
        cell.gain_k = 2e4;
        cell.filtered = true;
        cell.adapt = true;
        let mut touched: Option<f64> = None;
        let (mut t10, mut t90) = (None, None);
        let mut peak: f64 = 0.0;
        let mut after: f64 = 0.0;
        let mut last = StepReport::default();
        let r = run_arm(
            press_task(10.0, 8.0),
            &mut cell,
            limits,
            8.0,
            |t, rep, c| {
                let f = c.force().z;
                if f > 0.0 && touched.is_none() {
                    touched = Some(t);
                }
                if touched.is_some_and(|t0| t - t0 <= 1.0) {
                    peak = peak.max(f);
                }
                if f >= 1.0 && t10.is_none() {
                    t10 = Some(t);
                }
                if f >= 9.0 && t90.is_none() {
                    t90 = Some(t);
                }
                if t90.is_some() {
                    after = after.max(f);
                }
                last = *rep;
            },
        );
        let rise = match (t10, t90) {
            (Some(a), Some(b)) => b - a,
            _ => f64::INFINITY,
        };
        let overshoot = (after - 10.0).max(0.0) / 10.0 * 100.0;
        eprintln!(
            "surface {surface:e}: peak {peak:.2} N, rise {rise:.3} s, overshoot {overshoot:.1} %, \
             estimate {:.3e}, gains for {:.3e}: {}",
            last.stiffness_estimate_n_per_m[2],
            last.gains_for_n_per_m[2],
            r.as_ref()
                .map_or_else(|e| e.why.clone(), |_| "completed".into())
        );
        (peak, rise, overshoot, r, last)
    }

    /// Issue 20: the first contact on a surface nobody identified, 2·10⁴ … 10⁶ N/m, gains
    /// made for 2·10⁴. The approach is bounded for the worst case until the surface is known
    /// (`APPROACH_PEAK_FRACTION`), the seating is a guarded move that stops on the predicted
    /// force with its reference pulled back to the measured pose, and speeds up once the
    /// estimate says the surface is soft; a stiff surface seats before the estimator has data
    /// and its gains come from the seating's secant. Before: 29 N on 10⁶ N/m (the gains fell
    /// back to the task's 2·10⁴ 0.3 s after contact with no estimate), 0.52 s to rise on 2·10⁴.
    #[test]
    fn unknown_surface_first_contact_rise_and_overshoot() {
        for surface in [2e4, 1e5, 1e6] {
            let (peak, rise, overshoot, r, last) = unknown_surface_press(surface);
            assert!(r.is_ok(), "{r:?}");
            assert!(peak <= 13.0, "surface {surface:e}: peak {peak:.2} N");
            assert!(overshoot <= 10.0, "surface {surface:e}: {overshoot:.1} %");
            assert!(rise <= 0.25, "surface {surface:e}: rise {rise:.3} s");
            let est = last.stiffness_estimate_n_per_m[2];
            assert!(
                (est / surface - 1.0).abs() < 0.3,
                "surface {surface:e}: {est:e}"
            );
        }
    }

    /// Issue 20 item 4, on the model: the 10 N press slides from a 2·10⁴ N/m pad onto a
    /// 10⁶ N/m table (the pad set flush, tapering out over 20 mm, 1 s at 20 mm/s). The
    /// estimate is held while sliding; the depth below the surface raises the gains as the
    /// tool meets the steel. Without the raise the loop, made for the pad, chatters on the
    /// steel and the task ends.
    fn pad_onto_steel(raise: bool) -> (Result<(), Abort>, f64, f64, f64) {
        let (r, worst_in, rms, worst_out, _) =
            pad_onto_steel_with(raise, 0.0, DEFAULT_MAX_REFERENCE_LAG_S);
        (r, worst_in, rms, worst_out)
    }

    /// The pad-onto-steel press with speed adaptation's bound `slowdown_n` (0: off). Returns
    /// (outcome, max |e| through the taper, RMS and max |e| outside it, whether contact was
    /// lost after the first), on the true force.
    fn pad_onto_steel_with(
        raise: bool,
        slowdown_n: f64,
        max_lag_s: f64,
    ) -> (Result<(), Abort>, f64, f64, f64, bool) {
        let limits = default_limits();
        let mut cell = Cell::new(2e4, 0.0005);
        cell.gain_k = 2e4;
        cell.filtered = true;
        cell.adapt = true;
        cell.slowdown_n = slowdown_n;
        cell.max_lag_s = max_lag_s;
        cell.grade = Some((0.43, 0.45, 1e6));
        let mut task = press_task(10.0, 10.0);
        task.from_contact = true;
        task.reference[0] = Profile::Ramp {
            from: 0.0,
            to: 0.1,
            start_s: 2.0,
            duration_s: 5.0,
        };
        let (mut worst_in, mut sq, mut n, mut worst_out) = (0.0f64, 0.0, 0usize, 0.0f64);
        let mut contact: Option<f64> = None;
        let mut lost = false;
        // Long enough for a slowed crossing; the task ends on its own clock.
        let r = run_arm_with(task, &mut cell, limits, 45.0, raise, |t, rep, c| {
            if contact.is_none() && rep.phase == HybridPhase::Contact {
                contact = Some(t);
            }
            let Some(t0) = contact else { return };
            lost |= rep.phase == HybridPhase::ContactLost;
            let e = c.force().z - 10.0;
            if t < t0 + 1.5 {
                return;
            }
            // The taper is crossed between x = 0.43 and 0.45 (the tool starts at 0.4).
            if (0.425..=0.46).contains(&c.pos.x) {
                worst_in = worst_in.max(e.abs());
            } else if rep.phase == HybridPhase::Contact || rep.phase == HybridPhase::ContactLost {
                sq += e * e;
                n += 1;
                worst_out = worst_out.max(e.abs());
            }
        });
        let rms = (sq / n.max(1) as f64).sqrt();
        eprintln!(
            "pad onto steel, raise {raise}, slowdown {slowdown_n} N: {} through the taper max \
             |e| {worst_in:.2} N; outside RMS {rms:.3} N, max {worst_out:.2} N; contact lost \
             {lost}",
            r.as_ref()
                .map_or_else(|e| e.why.clone(), |_| "completed,".into())
        );
        (r, worst_in, rms, worst_out, lost)
    }

    /// Issue 41 item 6: speed adaptation has a maximum lag. The pad → steel slide falls ≈ 15 s
    /// behind its plan; with 2 s allowed it ends with a named fault instead of stretching.
    #[test]
    fn speed_adaptation_past_its_maximum_lag_ends_the_task_naming_it() {
        let (r, ..) = pad_onto_steel_with(true, 2.0, 2.0);
        let e = r.expect_err("past the lag");
        assert!(e.why.contains("behind its plan"), "{e}");
        assert!(!e.is_protective());
    }

    /// Issue 20 item 4's ± 3 N through the taper, with speed adaptation: the tool slides
    /// slower where the loop carries the surface's motion on a stiff surface, so the taper's
    /// end costs at most ≈ 2 N. Without it (the test can fail) the end of the taper drops
    /// the force to 0.
    #[test]
    fn speed_adaptation_keeps_the_pad_to_steel_transition_within_3_n() {
        let (r, worst_in, rms, worst_out, lost) =
            pad_onto_steel_with(true, 2.0, DEFAULT_MAX_REFERENCE_LAG_S);
        assert!(r.is_ok(), "{r:?}");
        assert!(worst_in <= 3.0, "through the taper max |e| {worst_in:.2} N");
        assert!(!lost, "contact lost");
        assert!(
            rms <= 0.5 && worst_out <= 2.0,
            "outside RMS {rms:.3} N, max {worst_out:.2} N"
        );
        let (_, worst_in, _, _, lost) = pad_onto_steel_with(true, 0.0, DEFAULT_MAX_REFERENCE_LAG_S);
        assert!(
            worst_in > 3.0 && lost,
            "without: {worst_in:.2} N, lost {lost}"
        );
    }

    #[test]
    fn the_speed_scale_keeps_a_sudden_stop_within_its_force() {
        let dt = 0.004;
        // The cost: 0.49 mm/s against kp_f = 0.3/(K·T) made for 10⁶ N/m, T = 30 ms: the
        // P-loop's error for that velocity, 49 N; on a surface made for 10⁵ that may be 10⁶,
        // the same ×10 of its own.
        let kp = |k: f64| 0.3 / (k * 0.03);
        assert!((stop_cost_n(0.49e-3, kp(1e6), 1e6, 1e6) - 49.0).abs() < 1e-9);
        assert!((stop_cost_n(0.49e-3, kp(1e5), 1e5, 1e6) - 49.0).abs() < 1e-9);
        assert!((stop_cost_n(0.49e-3, kp(1e5), 1e5, 1e5) - 4.9).abs() < 1e-9);
        assert_eq!(stop_cost_n(1.0, 0.0, 1e5, 1e6), 0.0);
        assert_eq!(stop_cost_n(f64::NAN, kp(1e5), 1e5, 1e6), 0.0);
        // Nothing moving along the force axes: full speed.
        assert_eq!(next_speed_scale(1.0, &[0.0; 3], 2.0, dt), 1.0);
        // A cost of 49 N at full speed converges to 2/49 of it (the motion scales with the
        // speed), falling at most 4/s.
        let mut s = 1.0;
        for _ in 0..250 {
            let next = next_speed_scale(s, &[0.0, 0.0, 49.0 * s], 2.0, dt);
            assert!(s - next <= SPEED_SCALE_FALL_PER_S * dt + 1e-12);
            s = next;
        }
        assert!(
            (s - 2.0 / 49.0).abs() < 1e-9 || s == MIN_SPEED_SCALE,
            "scale {s}"
        );
        let mut s = 1.0;
        for _ in 0..250 {
            s = next_speed_scale(s, &[0.0, 0.0, 10.0 * s], 2.0, dt);
        }
        assert!((s - 0.2).abs() < 1e-6, "scale {s}");
        // The motion stops: back up at most 1/s.
        let next = next_speed_scale(s, &[0.0; 3], 2.0, dt);
        assert!((next - (s + SPEED_SCALE_RISE_PER_S * dt)).abs() < 1e-12);
        // Never below the floor; off or nonsense: full speed.
        assert_eq!(
            next_speed_scale(0.06, &[100.0; 3], 2.0, 1.0),
            MIN_SPEED_SCALE
        );
        assert_eq!(next_speed_scale(0.5, &[100.0; 3], 0.0, dt), 1.0);
        assert_eq!(next_speed_scale(f64::NAN, &[100.0; 3], 2.0, dt), 1.0);
    }

    /// At the task's own speed (speed adaptation off): the gains follow the stiffness
    /// through the taper and the press completes, on target outside it. The ±3 N through the
    /// taper cannot be met at 20 mm/s: the linear taper needs the tool to retract at
    /// `F·Δ(1/K)/Δx·v` = 0.49 mm/s all the way to the steel and then not at all; a velocity
    /// error of 0.49 mm/s on 10⁶ N/m is 490 N/s, 15 N within the loop's 30 ms before any
    /// feedback acts. Measured: the force falls to 0 for ≈ 0.1 s where the taper ends and the
    /// press re-seats. Speed adaptation (next test) meets it by crossing slower.
    #[test]
    fn a_press_sliding_from_a_pad_onto_steel_raises_its_gains_from_the_depth() {
        let (r, _worst_in, rms, worst_out) = pad_onto_steel(true);
        assert!(r.is_ok(), "{r:?}");
        assert!(
            rms <= 0.5 && worst_out <= 2.0,
            "outside RMS {rms:.3} N, max {worst_out:.2} N"
        );
        // The failure this fixes (the test can fail): the pad's gains on steel chatter and
        // the task ends.
        let (r, _, _, _) = pad_onto_steel(false);
        assert!(r.is_err(), "{r:?}");
    }

    /// Issue 20 item 3 on the model: a 2 → 10 N step 1 s after contact, identified gains and
    /// gains following the estimate, with and without the reference pre-filter. Returns
    /// (overshoot % of the step, rise 10 → 90 % of the step in s) on the true force.
    fn force_step(surface: f64, adapt: bool, prefilter_s: f64) -> (f64, f64) {
        let limits = default_limits();
        let mut cell = Cell::new(surface, 0.0005);
        cell.gain_k = surface;
        cell.filtered = true;
        cell.adapt = adapt;
        let mut task = press_task(2.0, 3.0);
        task.from_contact = true;
        task.reference[2] = Profile::Step {
            before: 2.0,
            after: 10.0,
            at_s: 1.0,
        };
        let mut contact: Option<f64> = None;
        let (mut t10, mut t90, mut peak) = (None, None, 0.0f64);
        run_arm_full(
            task,
            &mut cell,
            limits,
            8.0,
            true,
            prefilter_s,
            |t, rep, c| {
                if contact.is_none() && rep.phase == HybridPhase::Contact {
                    contact = Some(t);
                }
                let Some(t0) = contact else { return };
                if t < t0 + 1.0 {
                    return;
                }
                let f = c.force().z;
                if f >= 2.8 && t10.is_none() {
                    t10 = Some(t);
                }
                if f >= 9.2 && t90.is_none() {
                    t90 = Some(t);
                }
                peak = peak.max(f);
            },
        )
        .expect("step");
        let rise = match (t10, t90) {
            (Some(a), Some(b)) => b - a,
            _ => f64::INFINITY,
        };
        let overshoot = (peak - 10.0).max(0.0) / 8.0 * 100.0;
        eprintln!(
            "step 2 → 10 N on {surface:e}, adapt {adapt}, pre-filter {prefilter_s} s: \
             overshoot {overshoot:.1} %, rise {rise:.3} s"
        );
        (overshoot, rise)
    }

    #[test]
    fn a_force_step_through_the_pre_filter_does_not_overshoot() {
        for surface in [2e4, 1e5, 1e6] {
            for adapt in [false, true] {
                let (os0, _) = force_step(surface, adapt, 0.0);
                let (os, rise) = force_step(surface, adapt, FORCE_PREFILTER_S);
                assert!(
                    os <= 10.0,
                    "{surface:e} {adapt}: overshoot {os:.1} % (without {os0:.1} %)"
                );
                assert!(rise <= 0.25, "{surface:e} {adapt}: rise {rise:.3} s");
            }
        }
    }
}
