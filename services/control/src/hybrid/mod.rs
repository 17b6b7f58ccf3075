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

mod adapt;
mod arm;
mod gains;
mod plant;
mod profile;
mod seating;
mod supervise;
#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests;

pub use adapt::{
    next_speed_scale, stop_cost_n, DEFAULT_MAX_REFERENCE_LAG_S, DEPTH_UNCERTAINTY_M,
    MIN_SPEED_SCALE, PRE_ESTIMATE_S, RETUNE_FRACTION, SPEED_SCALE_FALL_PER_S,
    SPEED_SCALE_RISE_PER_S, SPEED_WATCH_TAU_S, STIFFENING_MEMORY_S,
};
pub use arm::{
    ArmInput, ArmRun, FORCE_PREFILTER_S, PREFILTER_MATCH, TRACKING_MAX_TRAVEL_COS,
    TRACKING_MIN_SPEED_M_S, TRACKING_TAU_S,
};
pub use gains::{
    default_arm_gains, default_plant_gains, stiffness_of_gain, ARM_LOOP_GAIN_DELAY,
    DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
};
pub use plant::{PlantInput, PlantRun};
pub use profile::{
    profile_blend_s, profile_blended, profile_blended_over, profile_corner_rate_change,
    profile_integral, profile_rate, profile_value, MAX_REFERENCE_BLEND_S, POSITION_REF_ACCEL,
};
pub use seating::{
    along_axis, seat_secant, stop_velocity, APPROACH_MAX_FORCE_FRACTION, APPROACH_PEAK_FRACTION,
    APPROACH_SETPOINT_FRACTION, COMPLETION_ROT_ACCEL_RAD_S2, SEATED_FRACTION,
    SEATING_STOP_ACCEL_M_S2, SECANT_MIN_DF_N, SECANT_MIN_DX_M, STOP_LAG_FRACTION,
};
pub use supervise::{
    clamp_norms, default_limits, fast_swing_band, Abort, OscillationWatch, Supervision, TaskError,
    WrenchPeak, DEFAULT_DEVIATION_M, DEFAULT_DEVIATION_RAD, DEFAULT_PLANT_DEVIATION_M,
    DEFAULT_POSITION_SPEED_M_S, DEFAULT_POSITION_SPEED_RAD_S, OSC_SWINGS, OSC_WINDOW_S,
    OSC_ZERO_REF_AMPLITUDE,
};

use common::msg::{HybridGains, HybridPhase, HybridTask, Pose};
use nalgebra::Vector3;

/// Axis names of {C}.
pub const AXES: [&str; 6] = ["x", "y", "z", "rx", "ry", "rz"];

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

fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
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
