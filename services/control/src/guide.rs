//! Hand-guiding (lead-through) laws: pure, one call per robot cycle, time as a parameter.
//!
//! Input each cycle: the contact wrench on the tool at the TCP in base axes (the force
//! service's `base` estimate: what the operator's hand applies, tool weight and bias removed),
//! the measured TCP pose, the robot time and whether the deadman keep-alive is fresh. Output:
//! the commanded TCP pose (integrated here, like the hybrid law's velocity stage) and a report.
//!
//! # Laws ([`GuideLaw`])
//! * **Admittance** (default): per Cartesian axis `M ẍ + D ẋ = F` (translation in base axes;
//!   the torque about the TCP turns the tool, `J ω̇ + D_r ω = τ`), integrated implicitly
//!   (`v⁺ = (M v + dt F)/(M + dt D)`: stable for any dt). `D` is set directly (never derived
//!   from a damping ratio with `K = 0`, the ros2_controllers pitfall). A **smooth dead band** on
//!   the force and torque magnitudes (direction kept, C¹: `g(x) = (x−d)²/2d` on `[d, 2d]`, then
//!   `x − 1.5 d`) keeps sensor noise and drift from creeping the robot. Per-axis enable mask
//!   (base or tool axes).
//! * **Stiffness** (Cai et al. 2017, as published): when the force exceeds `start_force_n`, the
//!   direction is predicted from the decoupled forces in the tool frame, `tan β = Fy/Fx`,
//!   `tan α = √(Fx²+Fy²)/Fz` (eq. 10), and the TCP moves to `P2 = P1 + d·(sin α cos β,
//!   sin α sin β, cos α)` (eq. 9) — a step of exactly `d`. The speed along the step is the
//!   position increment of eq. 12, `Δx = K_f⁻¹ F` per command period (`kf_period_s`, the
//!   paper's position-command loop), bounded by the speed cap. At the end of a step a new one
//!   starts if the force is still above the threshold (direction predicted anew); otherwise the
//!   robot stops there. A hand that lets go mid-step (force below the dead band) brakes the
//!   step at the acceleration limit and abandons it (not in the paper: a safety choice).
//! * **Staircase** — the per-axis stepwise method Cai improves on (Liu et al. 2016): the same
//!   stepping, along the single tool axis with the largest force. For comparisons only.
//!
//! # Limits (every law)
//! * Speed cap `max_speed_m_s` (default 0.25 m/s: the reduced speed of ISO 10218-1 for manual
//!   modes) and `max_rot_speed_rad_s`; acceleration `max_accel_m_s2` / `max_rot_accel_rad_s2`.
//! * **Virtual walls**: a workspace box. Within `wall_zone_m` of a wall the operator feels a
//!   spring pushing back (`wall_stiffness_n_per_m` × depth into the zone, admittance law); the
//!   speed towards a wall is bounded by the braking curve `√(2 a d)` and by `d / dt`, so the
//!   commanded TCP never passes a wall (a TCP outside the box may only move back in).
//! * **Deadman**: without a fresh keep-alive the command decelerates at `max_accel` to rest and
//!   holds; guiding resumes when the keep-alive returns (an enabling device released and
//!   pressed again).
//! * A wrench that is not usable (fault, stale, NaN) ends the session ([`GuideError`]).
//!
//! # Stability with a stiff grasp ([`OscillationObserver`])
//! A fixed admittance in a loop with the robot's position-control lag (≈ 30 ms through EGM)
//! and the operator's grasp stiffness `K_g` is a delayed integrator of gain `K_g / D`: with a
//! soft grasp (300 N/m) it is far from its stability limit, with a stiff one (3000 N/m and
//! `D = 60`) the loop crosses over near 8 Hz with a phase margin close to zero and oscillates.
//! Raising `D` for every case would make guiding heavy (the ≤ 10 N at 0.1 m/s target needs
//! `D ≲ 80 N·s/m`). So damping is **variable**: an observer watches the band of the commanded
//! velocity where intentional guiding has no energy (a second-order high-pass at
//! `osc_corner_hz`, 3 Hz; human hand-guiding motion is below ~2 Hz) and, when its RMS (energy
//! smoothed over `osc_window_s`) exceeds `osc_threshold_m_s`, raises the scale σ of both M and D
//! (keeping the time constant M/D; the loop gain `K_g/(σ D)` drops) at a rate proportional to
//! the excess, up to `max_damping_scale`; σ relaxes back to 1 with `damping_decay_s` once the
//! band is quiet. This is the frequency-domain detection of Dimeas & Aspragathos (2016) applied
//! to the command, which — unlike the force — carries no sensor noise, so the threshold can be
//! low. Its effect is measured by the whole-cell test with grasp stiffness 300 and 3000 N/m.

use common::msg::{GuideLaw, StopCategory, Twist};
use kinematics::brake::{brake_vec3, braking_speed};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use serde::{Deserialize, Serialize};

/// Which axes the per-axis enable mask refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MaskFrame {
    #[default]
    Base,
    Tool,
}

/// A guiding session's parameters (`[control.guide]`; a session may override any of them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuideParams {
    pub law: GuideLaw,
    // --- admittance ---
    /// Virtual mass (kg).
    pub mass_kg: f64,
    /// Translational damping (N·s/m): 10 N → 10/D m/s.
    pub damping_n_s_per_m: f64,
    /// Virtual rotational inertia (kg·m²).
    pub inertia_kg_m2: f64,
    /// Rotational damping (N·m·s/rad).
    pub damping_nm_s_per_rad: f64,
    /// Enabled axes: x, y, z, rx, ry, rz of `mask_frame`.
    pub axes: [bool; 6],
    pub mask_frame: MaskFrame,
    /// Smooth dead band on the force magnitude (N) and the torque magnitude (N·m).
    pub deadband_force_n: f64,
    pub deadband_torque_nm: f64,
    // --- limits ---
    pub max_speed_m_s: f64,
    pub max_rot_speed_rad_s: f64,
    pub max_accel_m_s2: f64,
    pub max_rot_accel_rad_s2: f64,
    /// Workspace box of the TCP (m, base): the virtual walls.
    pub workspace_min_m: [f64; 3],
    pub workspace_max_m: [f64; 3],
    /// Depth of the zone inside each wall where the operator feels it (m).
    pub wall_zone_m: f64,
    /// Spring of that zone (N/m).
    pub wall_stiffness_n_per_m: f64,
    // --- oscillation observer ---
    pub osc_corner_hz: f64,
    pub osc_window_s: f64,
    pub osc_threshold_m_s: f64,
    pub max_damping_scale: f64,
    /// σ rises by this much per second per unit of relative excess.
    pub damping_rise_per_s: f64,
    pub damping_decay_s: f64,
    // --- stepping laws (stiffness, staircase) ---
    /// Step length d (m).
    pub step_m: f64,
    /// Force magnitude that starts a step (N).
    pub start_force_n: f64,
    /// Stiffness K_f along tool x, y, z (N/m), the diagonal of Cai's 6×6 K_f, from config.
    /// (`cell identify stiffness` fits a contact stiffness for the hybrid law, not this; the
    /// 6×6 fit from fixture probes is [`crate::kf::identify`], issue 46.)
    pub kf_n_per_m: [f64; 3],
    /// Period of the position increments `Δx = K_f⁻¹ F` (s).
    pub kf_period_s: f64,
    /// Slowest step speed (m/s) while the hand pushes: such a step always finishes (a hand
    /// that lets go brakes it instead).
    pub min_step_speed_m_s: f64,
    // --- protective stop (issue 19 item 6) ---
    /// The compensated force (N) and torque about the TCP (N·m) above which the session ends
    /// with a protective stop: checked each cycle on the unfiltered peak (the force service's
    /// confirmed window peak), well above a guiding hand and below the sensor's saturation.
    pub max_force_n: f64,
    pub max_torque_nm: f64,
    /// Collision signature: a force of at least `collision_force_n` held `collision_time_s`
    /// while the measured TCP moved less than `collision_travel_m` (the deadman held, not at a
    /// virtual wall) — the tool is blocked and the law would push on — ends the session too.
    pub collision_force_n: f64,
    pub collision_time_s: f64,
    pub collision_travel_m: f64,
    // --- deadman and teach ---
    pub deadman_timeout_s: f64,
    /// Record a waypoint when the TCP stays still this long (s); `None` = only on command.
    pub dwell_record_s: Option<f64>,
    /// "Still" means slower than this (m/s) ...
    pub dwell_speed_m_s: f64,
    /// ... at least this far from the last waypoint (m).
    pub dwell_min_distance_m: f64,
}

impl Default for GuideParams {
    fn default() -> Self {
        Self {
            law: GuideLaw::Admittance,
            mass_kg: 5.0,
            damping_n_s_per_m: 60.0,
            inertia_kg_m2: 0.05,
            damping_nm_s_per_rad: 2.0,
            axes: [true; 6],
            mask_frame: MaskFrame::Base,
            deadband_force_n: 1.0,
            deadband_torque_nm: 0.1,
            max_speed_m_s: 0.25,
            max_rot_speed_rad_s: 0.5,
            max_accel_m_s2: 3.0,
            max_rot_accel_rad_s2: 6.0,
            // A conservative box in front of an IRB 120 with the tool pointing down; the
            // reach is a sphere, not a box: set the cell's own.
            workspace_min_m: [0.2, -0.35, 0.1],
            workspace_max_m: [0.55, 0.35, 0.6],
            wall_zone_m: 0.03,
            wall_stiffness_n_per_m: 400.0,
            osc_corner_hz: 3.0,
            osc_window_s: 0.15,
            osc_threshold_m_s: 0.01,
            max_damping_scale: 10.0,
            damping_rise_per_s: 20.0,
            damping_decay_s: 2.0,
            step_m: 0.01,
            start_force_n: 3.0,
            kf_n_per_m: [2.0e4; 3],
            kf_period_s: 0.004,
            min_step_speed_m_s: 0.01,
            max_force_n: 60.0,
            max_torque_nm: 6.0,
            collision_force_n: 40.0,
            collision_time_s: 0.2,
            collision_travel_m: 0.002,
            deadman_timeout_s: 0.5,
            dwell_record_s: None,
            dwell_speed_m_s: 0.003,
            dwell_min_distance_m: 0.02,
        }
    }
}

impl GuideParams {
    /// Every problem, keys prefixed with `prefix`.
    pub fn problems(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        let mut pos = |name: &str, v: f64, hi: f64| {
            if !(v.is_finite() && v > 0.0 && v <= hi) {
                e.push(format!("{prefix}.{name}: {v} must be in (0, {hi}]"));
            }
        };
        pos("mass_kg", self.mass_kg, 1000.0);
        pos("damping_n_s_per_m", self.damping_n_s_per_m, 1e5);
        pos("inertia_kg_m2", self.inertia_kg_m2, 100.0);
        pos("damping_nm_s_per_rad", self.damping_nm_s_per_rad, 1e4);
        pos("deadband_force_n", self.deadband_force_n, 50.0);
        pos("deadband_torque_nm", self.deadband_torque_nm, 5.0);
        pos("max_speed_m_s", self.max_speed_m_s, 0.25);
        pos("max_rot_speed_rad_s", self.max_rot_speed_rad_s, 3.0);
        pos("max_accel_m_s2", self.max_accel_m_s2, 50.0);
        pos("max_rot_accel_rad_s2", self.max_rot_accel_rad_s2, 100.0);
        pos("wall_zone_m", self.wall_zone_m, 1.0);
        pos("wall_stiffness_n_per_m", self.wall_stiffness_n_per_m, 1e5);
        pos("osc_corner_hz", self.osc_corner_hz, 50.0);
        pos("osc_window_s", self.osc_window_s, 10.0);
        pos("osc_threshold_m_s", self.osc_threshold_m_s, 1.0);
        pos("damping_rise_per_s", self.damping_rise_per_s, 1e4);
        pos("damping_decay_s", self.damping_decay_s, 100.0);
        pos("step_m", self.step_m, 0.2);
        pos("start_force_n", self.start_force_n, 100.0);
        pos("kf_period_s", self.kf_period_s, 1.0);
        pos("min_step_speed_m_s", self.min_step_speed_m_s, 0.25);
        pos("deadman_timeout_s", self.deadman_timeout_s, 5.0);
        pos("max_force_n", self.max_force_n, 500.0);
        pos("max_torque_nm", self.max_torque_nm, 50.0);
        pos("collision_force_n", self.collision_force_n, 500.0);
        pos("collision_time_s", self.collision_time_s, 5.0);
        pos("collision_travel_m", self.collision_travel_m, 0.1);
        pos("dwell_speed_m_s", self.dwell_speed_m_s, 0.1);
        pos("dwell_min_distance_m", self.dwell_min_distance_m, 1.0);
        for (k, v) in self.kf_n_per_m.iter().enumerate() {
            pos(&format!("kf_n_per_m[{k}]"), *v, 1e9);
        }
        if let Some(d) = self.dwell_record_s {
            pos("dwell_record_s", d, 60.0);
        }
        if !(self.max_damping_scale.is_finite() && (1.0..=100.0).contains(&self.max_damping_scale))
        {
            e.push(format!(
                "{prefix}.max_damping_scale: {} must be in [1, 100]",
                self.max_damping_scale
            ));
        }
        for k in 0..3 {
            let (lo, hi) = (self.workspace_min_m[k], self.workspace_max_m[k]);
            if !(lo.is_finite() && hi.is_finite() && lo < hi && lo.abs() <= 5.0 && hi.abs() <= 5.0)
            {
                e.push(format!(
                    "{prefix}.workspace_min_m[{k}] / workspace_max_m[{k}]: need finite min < max within ±5 m (got {lo}, {hi})"
                ));
            }
        }
        e
    }
}

/// Why a session ended by itself.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GuideError {
    #[error("wrench not usable: {0}")]
    Wrench(crate::core::WrenchUnusable),
    #[error("non-finite input: {0}")]
    NonFinite(&'static str),
    /// A force ceiling or the collision signature: the session ends and robot-io holds; only a
    /// new guide request (a new deadman token) guides again.
    #[error("protective stop: {1}; `cell reset --protective`, then guide again")]
    ProtectiveStop(common::msg::ProtectiveCause, String),
}

/// C¹ smooth dead band on a magnitude: 0 below `d`, `(x−d)²/(2d)` on `[d, 2d]`, `x − 1.5 d`
/// above (slope 1: beyond the band a force increment gives the same speed increment).
pub fn smooth_deadband(x: f64, d: f64) -> f64 {
    if x <= d {
        0.0
    } else if x <= 2.0 * d {
        (x - d) * (x - d) / (2.0 * d)
    } else {
        x - 1.5 * d
    }
}

/// The dead band applied to a vector's magnitude, direction kept.
pub fn deadband_vec(v: &Vector3<f64>, d: f64) -> Vector3<f64> {
    let n = v.norm();
    if n <= d || n == 0.0 {
        Vector3::zeros()
    } else {
        v * (smooth_deadband(n, d) / n)
    }
}

/// Cai's direction prediction (eq. 10 and 9): α, β from the tool-frame force, and the unit
/// direction `(sin α cos β, sin α sin β, cos α)`.
pub fn cai_direction(f_tool: &Vector3<f64>) -> (f64, f64, Vector3<f64>) {
    let alpha = (f_tool.x.hypot(f_tool.y)).atan2(f_tool.z);
    let beta = f_tool.y.atan2(f_tool.x);
    let u = Vector3::new(
        alpha.sin() * beta.cos(),
        alpha.sin() * beta.sin(),
        alpha.cos(),
    );
    (alpha, beta, u)
}

/// The staircase baseline's direction: ± the tool axis with the largest force component.
pub fn staircase_direction(f_tool: &Vector3<f64>) -> Vector3<f64> {
    let k = f_tool.iamax();
    let mut u = Vector3::zeros();
    u[k] = f_tool[k].signum();
    u
}

/// Second-order high-pass (Butterworth, bilinear) on a 3-vector, with `dt` a parameter (its
/// coefficients are recomputed when dt changes).
#[derive(Debug, Clone, Copy)]
struct HighPass3 {
    corner_hz: f64,
    coeffs: Option<(f64, [f64; 3], [f64; 2])>,
    x1: Vector3<f64>,
    x2: Vector3<f64>,
    y1: Vector3<f64>,
    y2: Vector3<f64>,
}

impl HighPass3 {
    fn new(corner_hz: f64) -> Self {
        Self {
            corner_hz,
            coeffs: None,
            x1: Vector3::zeros(),
            x2: Vector3::zeros(),
            y1: Vector3::zeros(),
            y2: Vector3::zeros(),
        }
    }

    fn step(&mut self, x: &Vector3<f64>, dt: f64) -> Vector3<f64> {
        let (b, a) = match self.coeffs {
            Some((d, b, a)) if (d - dt).abs() <= 1e-4 * dt => (b, a),
            _ => {
                let k = (std::f64::consts::PI * self.corner_hz * dt).tan();
                let q = std::f64::consts::FRAC_1_SQRT_2;
                let norm = 1.0 / (1.0 + k / q + k * k);
                let b = [norm, -2.0 * norm, norm];
                let a = [2.0 * (k * k - 1.0) * norm, (1.0 - k / q + k * k) * norm];
                self.coeffs = Some((dt, b, a));
                (b, a)
            }
        };
        let y = x * b[0] + self.x1 * b[1] + self.x2 * b[2] - self.y1 * a[0] - self.y2 * a[1];
        self.x2 = self.x1;
        self.x1 = *x;
        self.y2 = self.y1;
        self.y1 = y;
        y
    }
}

/// Alternation detector on one axis of the high-passed command: counts the lobes (runs of
/// one sign) whose peak exceeded the threshold, over the last `window_s`. A pull's onset gives
/// one big lobe (and a small undershoot); an oscillation gives one per half period.
#[derive(Debug, Clone, Default)]
struct LobeCounter {
    sign: f64,
    peak: f64,
    ends: std::collections::VecDeque<f64>,
}

impl LobeCounter {
    fn step(&mut self, x: f64, t: f64, thr: f64, window_s: f64) -> usize {
        let sg = if x > 0.0 {
            1.0
        } else if x < 0.0 {
            -1.0
        } else {
            self.sign
        };
        if sg != self.sign {
            if self.peak > thr {
                self.ends.push_back(t);
            }
            self.sign = sg;
            self.peak = 0.0;
        }
        self.peak = self.peak.max(x.abs());
        while self.ends.front().is_some_and(|&e| t - e > window_s) {
            self.ends.pop_front();
        }
        self.ends.len() + usize::from(self.peak > thr)
    }
}

/// Lobes within the window that make an oscillation (1.5 periods).
const OSC_LOBES: usize = 3;
/// Window of the lobe count (s): 3 lobes within it means ≥ 1.5 Hz.
const OSC_WINDOW_S: f64 = 1.0;

/// The variable-damping stability method (module docs): band energy of the commanded velocity
/// → damping scale σ ≥ 1. σ rises only while the band alternates (≥ 3 lobes above the
/// threshold within 1 s on one axis): a pull's onset is one lobe and never raises it.
#[derive(Debug, Clone)]
pub struct OscillationObserver {
    hp_lin: HighPass3,
    hp_rot: HighPass3,
    lobes: [LobeCounter; 6],
    t_s: f64,
    energy: f64,
    scale: f64,
    oscillating: bool,
}

impl OscillationObserver {
    pub fn new(p: &GuideParams) -> Self {
        Self {
            hp_lin: HighPass3::new(p.osc_corner_hz),
            hp_rot: HighPass3::new(p.osc_corner_hz),
            lobes: Default::default(),
            t_s: 0.0,
            energy: 0.0,
            scale: 1.0,
            oscillating: false,
        }
    }

    /// The damping scale σ.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Whether the band alternates now.
    pub fn oscillating(&self) -> bool {
        self.oscillating
    }

    /// RMS of the band (m/s; rotation counted as 0.1 m per rad).
    pub fn band_rms(&self) -> f64 {
        self.energy.sqrt()
    }

    /// One cycle with the commanded twist; returns σ for the next cycle.
    pub fn step(&mut self, v: &Vector3<f64>, w: &Vector3<f64>, dt: f64, p: &GuideParams) -> f64 {
        self.t_s += dt;
        let hv = self.hp_lin.step(v, dt);
        let hw = self.hp_rot.step(w, dt) * 0.1;
        let e = hv.norm_squared() + hw.norm_squared();
        let a = (dt / p.osc_window_s).min(1.0);
        self.energy += a * (e - self.energy);
        let thr = p.osc_threshold_m_s;
        let mut most = 0;
        for k in 0..6 {
            let x = if k < 3 { hv[k] } else { hw[k - 3] };
            most = most.max(self.lobes[k].step(x, self.t_s, thr, OSC_WINDOW_S));
        }
        self.oscillating = most >= OSC_LOBES;
        let rel = self.band_rms() / thr - 1.0;
        if self.oscillating && rel > 0.0 {
            self.scale += p.damping_rise_per_s * rel.min(4.0) * dt;
        } else if !self.oscillating {
            self.scale -= (self.scale - 1.0) * (dt / p.damping_decay_s).min(1.0);
        }
        self.scale = self.scale.clamp(1.0, p.max_damping_scale);
        self.scale
    }
}

/// One cycle's inputs.
#[derive(Debug, Clone)]
pub struct GuideInput<'a> {
    /// Measured TCP pose in base.
    pub tcp: &'a Isometry3<f64>,
    /// Contact wrench on the tool at the TCP, base axes (force N, torque N·m), or why not.
    pub wrench_base: crate::core::WrenchInput,
    /// Robot time (s).
    pub now_s: f64,
    /// The robot's cycle period (s) when the shell knows it. Each step is one reference for one
    /// robot cycle, so the law then advances by exactly one period per step: the speed cap holds
    /// on the wire (reference to reference) whatever the host's timing. The robot-clock
    /// difference instead carries the host's jitter and stalls into the reference (a phase
    /// correction of 0.1 ms is a 2.5 % faster step; a 50 ms stall a 12.5 mm jump). A skipped
    /// cycle then leaves the reference one cycle behind the hand, which the hand makes up.
    /// `None`: the robot-clock difference (clamped to 50 ms).
    pub cycle_period_s: Option<f64>,
    /// The deadman keep-alive is fresh.
    pub enabled: bool,
    /// The unfiltered peaks since the last cycle (the ceilings' input; `wrench_base` is the
    /// filtered estimate). Zero when unknown.
    pub peak: crate::hybrid::WrenchPeak,
}

/// One cycle's report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuideReport {
    pub t_s: f64,
    pub enabled: bool,
    pub force_n: [f64; 3],
    pub torque_nm: [f64; 3],
    pub twist: Twist,
    pub tcp_cmd_m: [f64; 3],
    pub damping_scale: f64,
    pub speed_limited: bool,
    pub wall_limited: bool,
    pub steps: u32,
}

/// A step of a stepping law in progress.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Step {
    from: Vector3<f64>,
    dir: Vector3<f64>,
    /// Distance done along the step (m).
    s: f64,
}

/// A guiding session on the arm.
#[derive(Debug, Clone)]
pub struct GuideRun {
    pub params: GuideParams,
    cmd: Isometry3<f64>,
    v: Vector3<f64>,
    w: Vector3<f64>,
    last_s: Option<f64>,
    start_s: Option<f64>,
    observer: OscillationObserver,
    step: Option<Step>,
    /// Step speed (m/s), acceleration-limited.
    step_speed: f64,
    steps: u32,
    /// Collision watch: since when (robot time) and from where (measured TCP) the force has
    /// stayed at or above `collision_force_n`.
    blocked: Option<(f64, Vector3<f64>)>,
}

/// Speed towards a wall allowed at `dist` from it (m) within `a` and one cycle.
fn wall_speed(dist: f64, a: f64, dt: f64) -> f64 {
    if dist <= 0.0 {
        0.0
    } else {
        braking_speed(dist, a, 0.0).min(dist / dt)
    }
}

impl GuideRun {
    /// A session starting from the measured TCP.
    pub fn new(params: GuideParams, tcp: &Isometry3<f64>) -> Result<Self, String> {
        let problems = params.problems("guide");
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(Self {
            observer: OscillationObserver::new(&params),
            params,
            cmd: *tcp,
            v: Vector3::zeros(),
            w: Vector3::zeros(),
            last_s: None,
            start_s: None,
            step: None,
            step_speed: 0.0,
            steps: 0,
            blocked: None,
        })
    }

    /// The commanded TCP pose.
    pub fn command(&self) -> &Isometry3<f64> {
        &self.cmd
    }

    /// The commanded TCP speed (m/s).
    pub fn speed_m_s(&self) -> f64 {
        self.v.norm()
    }

    /// One cycle. `Err` ends the session (the caller holds).
    pub fn step(&mut self, i: &GuideInput) -> Result<(Isometry3<f64>, GuideReport), GuideError> {
        // An impact or a saturated sensor is a collision until proven otherwise.
        let (f, t) = i
            .wrench_base
            .clone()
            .map_err(|e| match e.protective_cause() {
                Some(c) => GuideError::ProtectiveStop(c, format!("wrench estimate {e}")),
                None => GuideError::Wrench(e),
            })?;
        if !(f.iter().chain(t.iter()).all(|x| x.is_finite())) {
            return Err(GuideError::NonFinite("wrench"));
        }
        if !i.now_s.is_finite() {
            return Err(GuideError::NonFinite("time"));
        }
        let p = self.params;
        // The ceilings, on the unfiltered peak (an impact is over before the filter sees it).
        let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
        let f_peak = f.norm().max(finite(i.peak.force_n));
        let t_peak = t.norm().max(finite(i.peak.torque_nm));
        if f_peak > p.max_force_n {
            return Err(GuideError::ProtectiveStop(
                common::msg::ProtectiveCause::ForceLimit,
                format!("force {f_peak:.1} N > max {:.1} N", p.max_force_n),
            ));
        }
        if t_peak > p.max_torque_nm {
            return Err(GuideError::ProtectiveStop(
                common::msg::ProtectiveCause::TorqueLimit,
                format!("torque {t_peak:.2} N·m > max {:.2} N·m", p.max_torque_nm),
            ));
        }
        let start = *self.start_s.get_or_insert(i.now_s);
        let dt = crate::law_step_dt(&mut self.last_s, i.now_s, i.cycle_period_s);
        let rot = self.cmd.rotation;
        let fm = self.masked(&f, 0, &rot);
        let tm = self.masked(&t, 3, &rot);
        let stepping = matches!(p.law, GuideLaw::Stiffness | GuideLaw::Staircase);
        // The stepping laws have their start threshold instead of a dead band (Cai).
        let (fd, td) = if stepping {
            (fm, tm)
        } else {
            (
                deadband_vec(&fm, p.deadband_force_n),
                deadband_vec(&tm, p.deadband_torque_nm),
            )
        };
        let mut flags = (false, false);
        if dt > 0.0 {
            if !i.enabled {
                self.deadman_stop(dt);
            } else if stepping {
                flags.1 = self.stepping(&fd, &rot, dt);
            } else {
                flags = self.admittance(&fd, &td, dt);
            }
        }
        self.watch_collision(i, f.norm(), flags.1)?;
        let c = self.cmd.translation.vector;
        Ok((
            self.cmd,
            GuideReport {
                t_s: i.now_s - start,
                enabled: i.enabled,
                force_n: [fd.x, fd.y, fd.z],
                torque_nm: [td.x, td.y, td.z],
                twist: Twist {
                    linear_m_s: [self.v.x, self.v.y, self.v.z],
                    angular_rad_s: [self.w.x, self.w.y, self.w.z],
                },
                tcp_cmd_m: [c.x, c.y, c.z],
                damping_scale: self.observer.scale(),
                speed_limited: flags.0,
                wall_limited: flags.1,
                steps: self.steps,
            },
        ))
    }

    /// The collision signature: the force held at or above `collision_force_n` for
    /// `collision_time_s` while the measured TCP stays within `collision_travel_m` — with the
    /// deadman held and the command not stopped by a virtual wall, so the law is asking the
    /// arm to move and it does not.
    fn watch_collision(
        &mut self,
        i: &GuideInput,
        force_n: f64,
        wall_limited: bool,
    ) -> Result<(), GuideError> {
        let p = self.params;
        if !(i.enabled && !wall_limited && force_n >= p.collision_force_n) {
            self.blocked = None;
            return Ok(());
        }
        let here = i.tcp.translation.vector;
        let (since, from) = *self.blocked.get_or_insert((i.now_s, here));
        let moved = (here - from).norm();
        if moved >= p.collision_travel_m {
            self.blocked = Some((i.now_s, here));
        } else if i.now_s - since >= p.collision_time_s {
            return Err(GuideError::ProtectiveStop(
                common::msg::ProtectiveCause::Collision,
                format!(
                    "collision: {force_n:.1} N for {:.2} s while the TCP moved {:.1} mm",
                    i.now_s - since,
                    moved * 1e3
                ),
            ));
        }
        Ok(())
    }

    fn masked(&self, v: &Vector3<f64>, off: usize, rot: &UnitQuaternion<f64>) -> Vector3<f64> {
        let axes = self.params.axes;
        let keep =
            |x: Vector3<f64>| Vector3::from_fn(|k, _| if axes[off + k] { x[k] } else { 0.0 });
        match self.params.mask_frame {
            MaskFrame::Base => keep(*v),
            MaskFrame::Tool => rot * keep(rot.inverse() * v),
        }
    }

    /// Moves the command by the twist (v, w) over dt.
    fn integrate(&mut self, dt: f64) {
        let pos = self.cmd.translation.vector + self.v * dt;
        let r = UnitQuaternion::from_scaled_axis(self.w * dt) * self.cmd.rotation;
        self.cmd = Isometry3::from_parts(Translation3::from(pos), r);
    }

    /// Deadman released: decelerate to rest at the acceleration limits, then hold. A stepping
    /// law's step is abandoned (the stop takes priority over landing on P2).
    fn deadman_stop(&mut self, dt: f64) {
        let p = self.params;
        self.v = brake_vec3(&self.v, p.max_accel_m_s2 * dt);
        self.w = brake_vec3(&self.w, p.max_rot_accel_rad_s2 * dt);
        self.step = None;
        self.step_speed = self.v.norm();
        self.integrate(dt);
    }

    /// The admittance law with its limits; returns (speed_limited, wall_limited).
    fn admittance(&mut self, fd: &Vector3<f64>, td: &Vector3<f64>, dt: f64) -> (bool, bool) {
        let p = self.params;
        let pos = self.cmd.translation.vector;
        let (mut speed_limited, mut wall_limited) = (false, false);
        // The walls' zone: a spring the operator feels.
        let mut fw = Vector3::zeros();
        for k in 0..3 {
            let lo = pos[k] - p.workspace_min_m[k];
            let hi = p.workspace_max_m[k] - pos[k];
            if lo < p.wall_zone_m {
                fw[k] += p.wall_stiffness_n_per_m * (p.wall_zone_m - lo).min(p.wall_zone_m);
            }
            if hi < p.wall_zone_m {
                fw[k] -= p.wall_stiffness_n_per_m * (p.wall_zone_m - hi).min(p.wall_zone_m);
            }
        }
        let s = self.observer.scale();
        let (m, d) = (p.mass_kg * s, p.damping_n_s_per_m * s);
        let (j, dr) = (p.inertia_kg_m2 * s, p.damping_nm_s_per_rad * s);
        let mut v = (self.v * m + (fd + fw) * dt) / (m + dt * d);
        let mut w = (self.w * j + td * dt) / (j + dt * dr);
        // Speed caps.
        let n = v.norm();
        if n > p.max_speed_m_s {
            v *= p.max_speed_m_s / n;
            speed_limited = true;
        }
        let n = w.norm();
        if n > p.max_rot_speed_rad_s {
            w *= p.max_rot_speed_rad_s / n;
            speed_limited = true;
        }
        // Acceleration limits.
        let dv = v - self.v;
        if dv.norm() > p.max_accel_m_s2 * dt {
            v = self.v + dv * (p.max_accel_m_s2 * dt / dv.norm());
        }
        let dw = w - self.w;
        if dw.norm() > p.max_rot_accel_rad_s2 * dt {
            w = self.w + dw * (p.max_rot_accel_rad_s2 * dt / dw.norm());
        }
        // Hard walls: never past one; the braking curve towards it.
        for k in 0..3 {
            let lo = pos[k] - p.workspace_min_m[k];
            let hi = p.workspace_max_m[k] - pos[k];
            if v[k] > 0.0 {
                let cap = wall_speed(hi, p.max_accel_m_s2, dt);
                if v[k] > cap {
                    v[k] = cap;
                    wall_limited = true;
                }
            } else if v[k] < 0.0 {
                let cap = wall_speed(lo, p.max_accel_m_s2, dt);
                if -v[k] > cap {
                    v[k] = -cap;
                    wall_limited = true;
                }
            }
        }
        wall_limited |= fw != Vector3::zeros();
        self.v = v;
        self.w = w;
        self.integrate(dt);
        self.observer.step(&v, &w, dt, &p);
        (speed_limited, wall_limited)
    }

    /// The stepping laws (stiffness, staircase): advances or starts a step; lands exactly on
    /// each step's end point. Returns whether a wall refused a step.
    fn stepping(&mut self, f: &Vector3<f64>, rot: &UnitQuaternion<f64>, dt: f64) -> bool {
        let p = self.params;
        let f_tool = rot.inverse() * f;
        let pushing = f.norm() >= p.start_force_n;
        let direction = |f_tool: &Vector3<f64>| match p.law {
            GuideLaw::Staircase => staircase_direction(f_tool),
            _ => cai_direction(f_tool).2,
        };
        let inside = |q: &Vector3<f64>| {
            (0..3).all(|k| q[k] >= p.workspace_min_m[k] && q[k] <= p.workspace_max_m[k])
        };
        let here = self.cmd.translation.vector;
        let mut wall = false;
        if self.step.is_none() && pushing {
            let dir = rot * direction(&f_tool);
            if inside(&(here + dir * p.step_m)) {
                self.step = Some(Step {
                    from: here,
                    dir,
                    s: 0.0,
                });
            } else {
                wall = true;
            }
        }
        let Some(mut st) = self.step else {
            self.step_speed = 0.0;
            self.v = Vector3::zeros();
            return wall;
        };
        // Eq. 12: the position increment per command period is K_f⁻¹ F (tool axes).
        let dx = Vector3::from_fn(|k, _| f_tool[k] / p.kf_n_per_m[k]);
        let wanted = (dx.norm() / p.kf_period_s).clamp(p.min_step_speed_m_s, p.max_speed_m_s);
        let left = p.step_m - st.s;
        // Brake to land on P2 unless another step will follow.
        let target = if pushing {
            wanted
        } else {
            wanted.min(braking_speed(left, p.max_accel_m_s2, 0.0))
        };
        let a = p.max_accel_m_s2 * dt;
        // The hand let go (the force below the dead band): brake at the acceleration limit and
        // abandon the step where the TCP stops (within v²/2a + v·dt), never completing it. A
        // force still on the tool but under the start threshold finishes the step (Cai).
        let released = f.norm() < p.deadband_force_n;
        let speed = if released {
            self.step_speed = (self.step_speed - a).max(0.0);
            self.step_speed
        } else {
            self.step_speed = target.clamp(self.step_speed - a, self.step_speed + a);
            // At least the minimum speed: a step the hand still pushes always finishes.
            self.step_speed.max(p.min_step_speed_m_s)
        };
        let s0 = st.s;
        st.s = (st.s + speed * dt).min(p.step_m);
        self.v = st.dir * ((st.s - s0) / dt);
        let point = st.from + st.dir * st.s;
        self.step = Some(st);
        if released && speed == 0.0 && st.s < p.step_m {
            // Stopped short: the step is abandoned here.
            self.step = None;
        } else if st.s >= p.step_m {
            self.steps += 1;
            self.step = None;
            if pushing {
                let dir = rot * direction(&f_tool);
                if inside(&(point + dir * p.step_m)) {
                    self.step = Some(Step {
                        from: point,
                        dir,
                        s: 0.0,
                    });
                } else {
                    wall = true;
                }
            }
            if self.step.is_none() {
                self.step_speed = 0.0;
            }
        }
        self.cmd = Isometry3::from_parts(Translation3::from(point), self.cmd.rotation);
        wall
    }
}

/// Guiding as one of the core's modes: a protective stop (a force ceiling, the collision
/// signature, an impact, a saturated sensor) stops at once and is latched at robot-io (only a
/// new guide request guides again); a non-finite input stops at once, protectively; any other
/// end comes to rest.
impl crate::core::ModeLaw for GuideRun {
    type Report = GuideReport;
    fn cycle(&mut self, i: &crate::core::ModeInput) -> crate::core::ModeStep<GuideReport> {
        let input = GuideInput {
            tcp: i.tcp,
            wrench_base: i.wrench.clone(),
            now_s: i.now_s,
            cycle_period_s: i.cycle_period_s,
            enabled: i.deadman_held,
            peak: i.peak,
        };
        match self.step(&input) {
            Ok((cmd, report)) => Ok((
                common::msg::CartesianTarget::Pose(common::msg::Pose::from_isometry(&cmd)),
                report,
            )),
            Err(why) => {
                let reason = format!("lead-through ended: {why}");
                let (stop, latch) = match why {
                    GuideError::ProtectiveStop(c, _) => (StopCategory::Protective(c), true),
                    GuideError::NonFinite(_) => (
                        StopCategory::Protective(common::msg::ProtectiveCause::NonFinite),
                        false,
                    ),
                    GuideError::Wrench(_) => return Err(crate::core::ModeEnd::Smoothly(reason)),
                };
                Err(crate::core::ModeEnd::Now {
                    why: reason,
                    stop,
                    latch,
                })
            }
        }
    }
}

/// A rotation's angle-axis vector (for reports and tests).
pub fn rotation_vector(r: &UnitQuaternion<f64>) -> Vector3<f64> {
    r.scaled_axis()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT: f64 = 0.004;

    fn tcp() -> Isometry3<f64> {
        // Tool z pointing down (base −z), as on a table.
        Isometry3::from_parts(
            Translation3::new(0.3, 0.0, 0.4),
            UnitQuaternion::from_axis_angle(&Vector3::y_axis(), std::f64::consts::PI),
        )
    }

    /// The law alone, without the protective stop (tests that drive it with forces far above
    /// a hand's, to check the speed cap or the damping).
    fn without_ceilings(p: GuideParams) -> GuideParams {
        GuideParams {
            max_force_n: 500.0,
            max_torque_nm: 50.0,
            collision_force_n: 500.0,
            ..p
        }
    }

    /// One cycle with the measured TCP at `meas`, a filtered force `f` and an unfiltered peak.
    fn cycle(
        g: &mut GuideRun,
        meas: &Isometry3<f64>,
        f: Vector3<f64>,
        peak: (f64, f64),
        k: usize,
        enabled: bool,
    ) -> Result<(Isometry3<f64>, GuideReport), GuideError> {
        g.step(&GuideInput {
            tcp: meas,
            wrench_base: Ok((f, Vector3::zeros())),
            now_s: k as f64 * DT,
            cycle_period_s: Some(DT),
            enabled,
            peak: crate::hybrid::WrenchPeak {
                force_n: peak.0,
                torque_nm: peak.1,
                bridged: false,
                fast_swing_n: 0.0,
            },
        })
    }

    /// As one of the core's modes (`core::ModeLaw`): a ceiling, an impact or a saturated
    /// sensor is a stop at once that robot-io latches; a non-finite wrench a stop at once it
    /// does not latch; a gap in the estimate a smooth end; the deadman reaches the law.
    #[test]
    fn as_a_mode_a_protective_stop_is_latched_and_a_gap_ends_smoothly() {
        use crate::core::{ModeEnd, ModeInput, ModeLaw, WrenchInput, WrenchUnusable};
        use common::msg::{ProtectiveCause, WrenchFault};
        let nan = Vector3::new(f64::NAN, 0.0, 0.0);
        /// The wrench, its unfiltered peak (N), and the stop's cause and latch expected.
        type Case = (WrenchInput, f64, Option<(ProtectiveCause, bool)>);
        let cases: [Case; 5] = [
            (
                Ok((Vector3::new(10.0, 0.0, 0.0), Vector3::zeros())),
                61.0,
                Some((ProtectiveCause::ForceLimit, true)),
            ),
            (
                Err(WrenchUnusable::Fault(WrenchFault::Spike)),
                0.0,
                Some((ProtectiveCause::Impact, true)),
            ),
            (
                Err(WrenchUnusable::Fault(WrenchFault::Saturated)),
                0.0,
                Some((ProtectiveCause::Saturated, true)),
            ),
            (
                Ok((nan, Vector3::zeros())),
                0.0,
                Some((ProtectiveCause::NonFinite, false)),
            ),
            (Err(WrenchUnusable::Stale { age_ms: 80.0 }), 0.0, None),
        ];
        for (wrench, peak_n, expect) in cases {
            let mut g = GuideRun::new(GuideParams::default(), &tcp()).expect("params");
            let input = ModeInput {
                tcp: &tcp(),
                now_s: 0.0,
                wrench: &wrench,
                peak: crate::hybrid::WrenchPeak {
                    force_n: peak_n,
                    ..Default::default()
                },
                cycle_period_s: Some(DT),
                dt_s: 0.0,
                deadman_held: true,
            };
            match (g.cycle(&input), expect) {
                (Err(ModeEnd::Now { stop, latch, why }), Some((cause, latched))) => {
                    assert_eq!(stop, StopCategory::Protective(cause), "{why}");
                    assert_eq!(latch, latched, "{why}");
                    assert!(why.starts_with("lead-through ended: "), "{why}");
                }
                (Err(ModeEnd::Smoothly(why)), None) => {
                    assert!(why.contains("wrench not usable"), "{why}")
                }
                (other, _) => panic!("{wrench:?}: {other:?}"),
            }
        }
        // The deadman held reaches the law as its enable.
        let mut g = GuideRun::new(GuideParams::default(), &tcp()).expect("params");
        let wrench: WrenchInput = Ok((Vector3::new(10.0, 0.0, 0.0), Vector3::zeros()));
        for held in [true, false] {
            let input = ModeInput {
                tcp: &tcp(),
                now_s: 0.0,
                wrench: &wrench,
                peak: crate::hybrid::WrenchPeak::default(),
                cycle_period_s: Some(DT),
                dt_s: 0.0,
                deadman_held: held,
            };
            let (_, report) = g.cycle(&input).expect("a command");
            assert_eq!(report.enabled, held);
        }
    }

    /// Issue 19 item 6: a wrench above the guide's ceiling ends the session with a protective
    /// stop — on the unfiltered peak, which an impact reaches long before the 12 Hz estimate.
    #[test]
    fn a_wrench_above_the_ceiling_is_a_protective_stop() {
        let p = GuideParams::default();
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let f = Vector3::new(10.0, 0.0, 0.0);
        for k in 0..10 {
            assert!(cycle(&mut g, &tcp(), f, (12.0, 0.5), k, true).is_ok());
        }
        // The filtered estimate still reads 10 N; the peak is 61 N.
        let e = cycle(&mut g, &tcp(), f, (61.0, 0.5), 10, true).expect_err("ceiling");
        assert!(
            matches!(&e, GuideError::ProtectiveStop(_, w) if w.contains("61.0 N > max 60.0 N")),
            "{e}"
        );
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let e = cycle(&mut g, &tcp(), f, (12.0, 6.5), 0, true).expect_err("torque");
        assert!(e.to_string().contains("torque 6.50 N·m"), "{e}");
        // Also without the deadman: the ceiling is not a guiding command.
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        assert!(cycle(&mut g, &tcp(), f * 7.0, (0.0, 0.0), 0, false).is_err());
    }

    /// The collision signature: 45 N held while the measured TCP does not follow ends the
    /// session after `collision_time_s`; the same force with the arm following (the speed cap
    /// reached) does not, nor at a virtual wall, nor with the deadman released.
    #[test]
    fn a_blocked_tool_is_a_protective_stop_a_following_one_is_not() {
        let p = GuideParams::default();
        let f = Vector3::new(45.0, 0.0, 0.0);
        // Blocked: the measured TCP stays where it started.
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let mut ended = None;
        for k in 0..200 {
            if let Err(e) = cycle(&mut g, &tcp(), f, (45.0, 0.0), k, true) {
                ended = Some((k, e));
                break;
            }
        }
        let (k, e) = ended.expect("a blocked tool was pushed on");
        let t = k as f64 * DT;
        assert!(
            (p.collision_time_s..=p.collision_time_s + 2.0 * DT).contains(&t),
            "ended at {t} s"
        );
        assert!(e.to_string().contains("collision: 45.0 N"), "{e}");
        // Following: the measured TCP is the command of the cycle before.
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let mut meas = tcp();
        for k in 0..250 {
            let (c, _) = cycle(&mut g, &meas, f, (45.0, 0.0), k, true).expect("following");
            meas = c;
        }
        // At a wall: the box ends 1 mm in front of the TCP along +x.
        let mut at_wall = p;
        at_wall.workspace_max_m[0] = tcp().translation.vector.x + 0.001;
        let mut g = GuideRun::new(at_wall, &tcp()).expect("params");
        let mut meas = tcp();
        for k in 0..250 {
            let (c, _) = cycle(&mut g, &meas, f, (45.0, 0.0), k, true).expect("at the wall");
            meas = c;
        }
        // Deadman released: braking, not pushing.
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        for k in 0..250 {
            assert!(cycle(&mut g, &tcp(), f, (45.0, 0.0), k, false).is_ok());
        }
    }

    /// Runs `n` cycles with a constant wrench; returns the last report.
    fn run(g: &mut GuideRun, f: Vector3<f64>, t: Vector3<f64>, t0: f64, n: usize) -> GuideReport {
        let mut last = None;
        for k in 0..n {
            let cmd = *g.command();
            let (_, r) = g
                .step(&GuideInput {
                    tcp: &cmd,
                    wrench_base: Ok((f, t)),
                    now_s: t0 + k as f64 * DT,
                    cycle_period_s: None,
                    enabled: true,
                    peak: Default::default(),
                })
                .expect("step");
            last = Some(r);
        }
        last.expect("ran")
    }

    #[test]
    fn dead_band_is_smooth_and_keeps_direction() {
        let d = 1.5;
        assert_eq!(smooth_deadband(1.0, d), 0.0);
        assert_eq!(smooth_deadband(d, d), 0.0);
        // Continuous value and slope at 2d.
        let e = 1e-7;
        assert!((smooth_deadband(2.0 * d - e, d) - smooth_deadband(2.0 * d + e, d)).abs() < 1e-6);
        let slope = (smooth_deadband(2.0 * d + e, d) - smooth_deadband(2.0 * d - e, d)) / (2.0 * e);
        assert!((slope - 1.0).abs() < 1e-3);
        assert_eq!(smooth_deadband(10.0, d), 10.0 - 1.5 * d);
        let v = deadband_vec(&Vector3::new(3.0, 4.0, 0.0), 1.0);
        assert!((v.normalize() - Vector3::new(0.6, 0.8, 0.0)).norm() < 1e-12);
        assert!((v.norm() - 3.5).abs() < 1e-12);
    }

    #[test]
    fn admittance_step_force_gives_first_order_velocity() {
        let p = GuideParams::default();
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        // 10 N along x: steady speed (10 − 1.5·1.0)/60 = 0.142 m/s, time constant M/D.
        let f = Vector3::new(10.0, 0.0, 0.0);
        let r = run(&mut g, f, Vector3::zeros(), 0.0, 1);
        assert_eq!(
            r.twist.linear_m_s, [0.0; 3],
            "first cycle only sets the clock"
        );
        let tau = p.mass_kg / p.damping_n_s_per_m;
        let r = run(&mut g, f, Vector3::zeros(), DT, (tau / DT).round() as usize);
        let v_ss = (10.0 - 1.5 * p.deadband_force_n) / p.damping_n_s_per_m;
        let v = r.twist.linear_m_s[0];
        // After one time constant ≈ 63 % (implicit Euler: a little less).
        assert!(v > 0.58 * v_ss && v < 0.66 * v_ss, "{v} vs {v_ss}");
        let r = run(&mut g, f, Vector3::zeros(), 1.0, 300);
        assert!(
            (r.twist.linear_m_s[0] - v_ss).abs() < 1e-4,
            "{:?} {}",
            r.twist,
            r.damping_scale
        );
        assert_eq!(r.twist.linear_m_s[1], 0.0);
        assert!(
            r.damping_scale < 1.01,
            "a steady pull is not an oscillation"
        );
        // The command integrates the velocity.
        assert!(g.command().translation.x > 0.3 + 0.1);
    }

    #[test]
    fn admittance_inside_dead_band_does_not_move() {
        let mut g = GuideRun::new(GuideParams::default(), &tcp()).expect("params");
        run(
            &mut g,
            Vector3::new(0.8, -0.3, 0.4),
            Vector3::new(0.08, 0.0, 0.0),
            0.0,
            2500,
        );
        assert_eq!(g.command().translation.vector, tcp().translation.vector);
        assert_eq!(g.command().rotation, tcp().rotation);
    }

    #[test]
    fn torque_turns_the_tool_about_the_tcp() {
        let mut g = GuideRun::new(GuideParams::default(), &tcp()).expect("params");
        let r = run(
            &mut g,
            Vector3::zeros(),
            Vector3::new(0.0, 0.0, 0.5),
            0.0,
            500,
        );
        assert!(r.twist.angular_rad_s[2] > 0.1);
        assert_eq!(g.command().translation.vector, tcp().translation.vector);
        let turned = (tcp().rotation.inverse() * g.command().rotation).angle();
        assert!(turned > 0.05, "{turned}");
    }

    #[test]
    fn mask_blocks_axes_in_base_and_tool_frames() {
        let p = GuideParams {
            axes: [true, false, false, false, false, false],
            ..Default::default()
        };
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let r = run(
            &mut g,
            Vector3::new(5.0, 8.0, 8.0),
            Vector3::new(1.0, 1.0, 1.0),
            0.0,
            300,
        );
        assert!(r.twist.linear_m_s[0] > 0.0);
        assert_eq!(r.twist.linear_m_s[1], 0.0);
        assert_eq!(r.twist.linear_m_s[2], 0.0);
        assert_eq!(r.twist.angular_rad_s, [0.0; 3]);
        // Tool frame: the tool is turned 180° about base y, so tool z is base −z.
        let p = GuideParams {
            axes: [false, false, true, false, false, false],
            mask_frame: MaskFrame::Tool,
            ..Default::default()
        };
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let r = run(
            &mut g,
            Vector3::new(5.0, 0.0, -8.0),
            Vector3::zeros(),
            0.0,
            300,
        );
        assert!(r.twist.linear_m_s[0].abs() < 1e-12);
        assert!(r.twist.linear_m_s[2] < -0.01);
    }

    #[test]
    fn speed_cap_is_never_exceeded() {
        let mut g =
            GuideRun::new(without_ceilings(GuideParams::default()), &tcp()).expect("params");
        let mut max: f64 = 0.0;
        for k in 0..1000 {
            let cmd = *g.command();
            let (_, r) = g
                .step(&GuideInput {
                    tcp: &cmd,
                    wrench_base: Ok((Vector3::new(0.0, 200.0, 0.0), Vector3::new(0.0, 0.0, 20.0))),
                    now_s: k as f64 * DT,
                    cycle_period_s: None,
                    enabled: true,
                    peak: Default::default(),
                })
                .expect("step");
            max = max.max(Vector3::from(r.twist.linear_m_s).norm());
            assert!(Vector3::from(r.twist.angular_rad_s).norm() <= 0.5 + 1e-12);
            if k > 200 && g.command().translation.y < 0.25 {
                assert!(r.speed_limited);
            }
        }
        assert!(max <= 0.25 + 1e-12, "{max}");
    }

    #[test]
    fn walls_are_felt_and_never_passed() {
        let p = GuideParams::default();
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let mut felt = false;
        let mut max_x: f64 = 0.0;
        for k in 0..5000 {
            let cmd = *g.command();
            let (c, r) = g
                .step(&GuideInput {
                    tcp: &cmd,
                    wrench_base: Ok((Vector3::new(40.0, 0.0, 0.0), Vector3::zeros())),
                    now_s: k as f64 * DT,
                    cycle_period_s: None,
                    enabled: true,
                    peak: Default::default(),
                })
                .expect("step");
            max_x = max_x.max(c.translation.x);
            felt |= r.wall_limited;
        }
        assert!(felt);
        assert!(max_x <= p.workspace_max_m[0] + 1e-12, "{max_x}");
        // Pushed with 40 N against the zone's spring (400 N/m × 30 mm = 12 N max) it reaches
        // the wall and stays on it.
        assert!(max_x > p.workspace_max_m[0] - 1e-3);
        // Pulling back in moves away from the wall.
        let before = g.command().translation.x;
        run(
            &mut g,
            Vector3::new(-10.0, 0.0, 0.0),
            Vector3::zeros(),
            20.0,
            200,
        );
        assert!(g.command().translation.x < before);
    }

    #[test]
    fn deadman_release_stops_within_the_deceleration_limit() {
        let p = GuideParams::default();
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let f = Vector3::new(0.0, 30.0, 0.0);
        let r = run(&mut g, f, Vector3::zeros(), 0.0, 150);
        let v0 = Vector3::from(r.twist.linear_m_s).norm();
        assert!(v0 > 0.2, "{v0} {}", r.damping_scale);
        let t_off = 150.0 * DT;
        let mut t = t_off;
        let mut prev = v0;
        let mut stopped_at = None;
        for _ in 0..500 {
            let cmd = *g.command();
            let (_, r) = g
                .step(&GuideInput {
                    tcp: &cmd,
                    wrench_base: Ok((f, Vector3::zeros())),
                    now_s: t,
                    cycle_period_s: None,
                    enabled: false,
                    peak: Default::default(),
                })
                .expect("step");
            let v = Vector3::from(r.twist.linear_m_s).norm();
            assert!(prev - v <= p.max_accel_m_s2 * DT * 1.0001 + 1e-9);
            if v == 0.0 && stopped_at.is_none() {
                stopped_at = Some(t);
            }
            prev = v;
            t += DT;
        }
        let took = stopped_at.expect("stopped") - t_off;
        assert!(took <= v0 / p.max_accel_m_s2 + 2.0 * DT, "{took}");
        let held = g.command().translation.vector;
        run(&mut g, Vector3::zeros(), Vector3::zeros(), t, 10);
        assert_eq!(g.command().translation.vector, held);
    }

    /// The speed cap holds reference to reference when the robot's period is given, whatever
    /// the robot clock does between steps (phase corrections, a stall); from the clock alone
    /// it would not.
    #[test]
    fn speed_cap_holds_per_cycle_under_a_jittering_clock() {
        let p = without_ceilings(GuideParams::default());
        let worst = |period: Option<f64>| {
            let mut g = GuideRun::new(p, &tcp()).expect("params");
            let mut t = 0.0;
            let mut prev = g.command().translation.vector;
            let mut worst: f64 = 0.0;
            for k in 0..300 {
                // A hard pull; the clock runs 4 ms ± 0.3 ms with a 40 ms stall at k = 200.
                t += DT + if k % 2 == 0 { 3e-4 } else { -3e-4 } + if k == 200 { 0.04 } else { 0.0 };
                let cmd = *g.command();
                let (c, _) = g
                    .step(&GuideInput {
                        tcp: &cmd,
                        wrench_base: Ok((Vector3::new(0.0, 80.0, 0.0), Vector3::zeros())),
                        now_s: t,
                        cycle_period_s: period,
                        enabled: true,
                        peak: Default::default(),
                    })
                    .expect("step");
                worst = worst.max((c.translation.vector - prev).norm() / DT);
                prev = c.translation.vector;
            }
            worst
        };
        let per_cycle = worst(Some(DT));
        assert!(per_cycle <= p.max_speed_m_s * (1.0 + 1e-9), "{per_cycle}");
        assert!(
            per_cycle > p.max_speed_m_s * 0.99,
            "never reached the cap: {per_cycle}"
        );
        let by_clock = worst(None);
        assert!(by_clock > p.max_speed_m_s * 2.0, "{by_clock}");
    }

    #[test]
    fn nan_or_unusable_wrench_ends_the_session() {
        let mut g = GuideRun::new(GuideParams::default(), &tcp()).expect("params");
        let bad = g.step(&GuideInput {
            tcp: &tcp(),
            wrench_base: Ok((Vector3::new(f64::NAN, 0.0, 0.0), Vector3::zeros())),
            now_s: 0.0,
            cycle_period_s: None,
            enabled: true,
            peak: Default::default(),
        });
        assert_eq!(bad.err(), Some(GuideError::NonFinite("wrench")));
        let stale = g.step(&GuideInput {
            tcp: &tcp(),
            wrench_base: Err(crate::core::WrenchUnusable::Stale { age_ms: 60.0 }),
            now_s: 0.0,
            cycle_period_s: None,
            enabled: true,
            peak: Default::default(),
        });
        assert!(matches!(stale, Err(GuideError::Wrench(_))));
        // An impact or a saturated sensor is a protective stop (issue 41 item 2).
        for (fault, cause) in [
            (
                common::msg::WrenchFault::Spike,
                common::msg::ProtectiveCause::Impact,
            ),
            (
                common::msg::WrenchFault::Saturated,
                common::msg::ProtectiveCause::Saturated,
            ),
        ] {
            let hit = g.step(&GuideInput {
                tcp: &tcp(),
                wrench_base: Err(crate::core::WrenchUnusable::Fault(fault)),
                now_s: 0.0,
                cycle_period_s: None,
                enabled: true,
                peak: Default::default(),
            });
            assert!(
                matches!(&hit, Err(GuideError::ProtectiveStop(c, _)) if *c == cause),
                "{hit:?}"
            );
        }
    }

    #[test]
    fn bad_params_are_all_listed() {
        let p = GuideParams {
            mass_kg: 0.0,
            max_speed_m_s: 1.0,
            workspace_min_m: [1.0, 0.0, 0.0],
            workspace_max_m: [0.5, 1.0, 1.0],
            ..Default::default()
        };
        let e = p.problems("guide");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e.iter().any(|m| m.contains("mass_kg")));
        assert!(e.iter().any(|m| m.contains("max_speed_m_s")));
        assert!(e.iter().any(|m| m.contains("workspace_min_m[0]")));
        assert!(GuideRun::new(p, &tcp()).is_err());
    }

    #[test]
    fn cai_direction_matches_eq_9_and_10() {
        let (a, b, u) = cai_direction(&Vector3::new(3.0, 3.0, 0.0));
        assert!((a - std::f64::consts::FRAC_PI_2).abs() < 1e-12);
        assert!((b - std::f64::consts::FRAC_PI_4).abs() < 1e-12);
        assert!((u - Vector3::new(1.0, 1.0, 0.0).normalize()).norm() < 1e-12);
        let (_, _, u) = cai_direction(&Vector3::new(0.0, 0.0, -5.0));
        assert!((u - Vector3::new(0.0, 0.0, -1.0)).norm() < 1e-12);
        // Any force: the direction is the force's.
        let f = Vector3::new(-1.0, 2.0, -0.5);
        assert!((cai_direction(&f).2 - f.normalize()).norm() < 1e-12);
        assert_eq!(
            staircase_direction(&Vector3::new(-3.0, 2.0, 1.0)),
            Vector3::new(-1.0, 0.0, 0.0)
        );
    }

    /// Steps of exactly d; the speed follows K_f⁻¹F per command period; the step finishes when
    /// the force goes away, and lands exactly on P2.
    #[test]
    fn stiffness_law_moves_in_steps_of_d() {
        let p = GuideParams {
            law: GuideLaw::Stiffness,
            ..Default::default()
        };
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let x0 = tcp().translation.vector;
        // Below the start threshold: nothing.
        run(
            &mut g,
            Vector3::new(2.5, 0.0, 0.0),
            Vector3::zeros(),
            0.0,
            100,
        );
        assert_eq!(g.command().translation.vector, x0);
        // 10 N along base x for 0.3 s: speed K_f⁻¹F/T = 10/2e4/0.004 = 0.125 m/s.
        let r = run(
            &mut g,
            Vector3::new(10.0, 0.0, 0.0),
            Vector3::zeros(),
            1.0,
            75,
        );
        let v = Vector3::from(r.twist.linear_m_s).norm();
        assert!((v - 0.125).abs() < 1e-9, "{v}");
        // Below the start threshold but still pushing (2 N > the 1 N dead band): the step in
        // progress finishes on a multiple of d (Cai).
        let r = run(
            &mut g,
            Vector3::new(2.0, 0.0, 0.0),
            Vector3::zeros(),
            2.0,
            400,
        );
        let moved = g.command().translation.vector - x0;
        let n = (moved.x / p.step_m).round();
        assert!(n >= 3.0, "{moved:?}");
        assert!((moved.x - n * p.step_m).abs() < 1e-9, "{moved:?}");
        assert!(moved.y.abs() < 1e-12 && moved.z.abs() < 1e-12);
        assert_eq!(r.steps as f64, n);
    }

    /// Issue (force modes inside their bounds, item 8): the hand letting go mid-step stops the
    /// TCP within the braking distance v²/2a + v·dt; the step is not completed (before: a
    /// started step always ran its full 10 mm after the hand was gone).
    #[test]
    fn letting_go_mid_step_stops_within_the_braking_distance() {
        let p = GuideParams {
            law: GuideLaw::Stiffness,
            ..Default::default()
        };
        let mut g = GuideRun::new(p, &tcp()).expect("params");
        let x0 = tcp().translation.vector;
        // 10 N along x: steps at 0.125 m/s; let go 0.12 s later, a few mm into the second.
        let r = run(
            &mut g,
            Vector3::new(10.0, 0.0, 0.0),
            Vector3::zeros(),
            0.0,
            30,
        );
        let v = Vector3::from(r.twist.linear_m_s).norm();
        let at_release = g.command().translation.vector - x0;
        let s_release = at_release.x - (at_release.x / p.step_m).floor() * p.step_m;
        assert!(
            s_release > 1e-3 && s_release < p.step_m - 2e-3,
            "mid-step: {s_release}"
        );
        let r = run(&mut g, Vector3::zeros(), Vector3::zeros(), 1.0, 200);
        let after = g.command().translation.vector - x0;
        let braking = v * v / (2.0 * p.max_accel_m_s2) + v * DT;
        let slid = after.x - at_release.x;
        assert!(slid <= braking + 1e-9, "slid {slid} > braking {braking}");
        let s_end = after.x - (after.x / p.step_m).floor() * p.step_m;
        assert!(s_end > 1e-4, "completed the step: {after:?}");
        assert_eq!(Vector3::from(r.twist.linear_m_s).norm(), 0.0);
    }

    /// A 45° pull: the stiffness law goes along it, the staircase baseline zig-zags.
    #[test]
    fn pull_at_45_degrees_stiffness_is_straight_staircase_is_not() {
        let f = Vector3::new(7.0, 7.0, 0.0);
        let dev = |law| {
            let mut g = GuideRun::new(
                GuideParams {
                    law,
                    ..Default::default()
                },
                &tcp(),
            )
            .expect("params");
            let x0 = tcp().translation.vector;
            let mut worst: f64 = 0.0;
            for k in 0..400 {
                let cmd = *g.command();
                let (c, _) = g
                    .step(&GuideInput {
                        tcp: &cmd,
                        // Slight alternation, as a real hand: the largest axis flips.
                        wrench_base: Ok((
                            f + Vector3::new(0.3, -0.3, 0.0) * if k % 50 < 25 { 1.0 } else { -1.0 },
                            Vector3::zeros(),
                        )),
                        now_s: k as f64 * DT,
                        cycle_period_s: None,
                        enabled: true,
                        peak: Default::default(),
                    })
                    .expect("step");
                let d = c.translation.vector - x0;
                let along = Vector3::new(1.0, 1.0, 0.0).normalize();
                worst = worst.max((d - along * d.dot(&along)).norm());
            }
            worst
        };
        let smooth = dev(GuideLaw::Stiffness);
        let stairs = dev(GuideLaw::Staircase);
        assert!(smooth < 0.002, "{smooth}");
        assert!(stairs > 0.005, "{stairs}");
    }

    /// The observer raises damping on an oscillating command and leaves a smooth pull alone.
    #[test]
    fn oscillation_observer_raises_damping_only_on_oscillation() {
        let p = GuideParams::default();
        let mut o = OscillationObserver::new(&p);
        // A smooth 0.5 Hz hand motion of 0.1 m/s amplitude.
        for k in 0..2500 {
            let t = k as f64 * DT;
            let v = Vector3::new(0.1 * (std::f64::consts::PI * t).sin(), 0.0, 0.0);
            o.step(&v, &Vector3::zeros(), DT, &p);
        }
        assert!(o.scale() < 1.05, "smooth motion: {}", o.scale());
        // A 7 Hz oscillation of 0.05 m/s on top.
        for k in 0..250 {
            let t = k as f64 * DT;
            let v = Vector3::new(
                0.05 * (2.0 * std::f64::consts::PI * 7.0 * t).sin(),
                0.0,
                0.0,
            );
            o.step(&v, &Vector3::zeros(), DT, &p);
        }
        assert!(o.scale() > 3.0, "oscillation: {}", o.scale());
        assert!(o.scale() <= p.max_damping_scale);
        // Quiet again: relaxes back.
        for _ in 0..5000 {
            o.step(&Vector3::zeros(), &Vector3::zeros(), DT, &p);
        }
        assert!(o.scale() < 1.01);
    }

    /// The stability method in a loop: admittance + 30 ms lag + a stiff grasp spring to a
    /// hand moving at 0.1 m/s. Fixed damping oscillates; the observer suppresses it.
    #[test]
    fn variable_damping_stabilises_a_stiff_grasp() {
        let osc = |max_scale: f64| {
            let p = without_ceilings(GuideParams {
                max_damping_scale: max_scale,
                workspace_max_m: [5.0, 5.0, 5.0],
                ..Default::default()
            });
            let mut g = GuideRun::new(p, &tcp()).expect("params");
            let lag = (0.03 / DT) as usize;
            let mut hist = vec![tcp().translation.x; lag + 1];
            let mut hp = HighPass3::new(3.0);
            let mut band = Vec::new();
            for k in 0..2500 {
                let t = k as f64 * DT;
                let meas = hist[0];
                let hand = 0.4 + 0.1 * (t - 0.2).max(0.0);
                let f = 3000.0 * (hand - meas);
                let cmd = Isometry3::from_parts(Translation3::new(meas, 0.0, 0.4), tcp().rotation);
                let (c, _) = g
                    .step(&GuideInput {
                        tcp: &cmd,
                        wrench_base: Ok((Vector3::new(f, 0.0, 0.0), Vector3::zeros())),
                        now_s: t,
                        cycle_period_s: None,
                        enabled: true,
                        peak: Default::default(),
                    })
                    .expect("step");
                hist.remove(0);
                hist.push(c.translation.x);
                let vel = Vector3::new((hist[lag] - hist[lag - 1]) / DT, 0.0, 0.0);
                let h = hp.step(&vel, DT);
                if t > 5.0 {
                    band.push(h.x * h.x);
                }
            }
            (band.iter().sum::<f64>() / band.len() as f64).sqrt()
        };
        let fixed = osc(1.0);
        let adaptive = osc(GuideParams::default().max_damping_scale);
        assert!(
            fixed > 0.02,
            "fixed admittance should oscillate here: {fixed}"
        );
        assert!(adaptive < 0.005, "adaptive: {adaptive}");
    }
}
