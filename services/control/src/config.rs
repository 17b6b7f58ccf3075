//! control's configuration: the `[control]` table, its checks, and the rules that keep a task
//! or a guide session inside the cell's ceilings. Pure: no bus, no clock.

use common::{
    config::{check_range, ConfigErrors, Validate},
    msg::{HybridLimits, HybridTask, TaskRobot},
};
use serde::{Deserialize, Serialize};

use crate::{
    core::HybridSetup,
    guide::GuideParams,
    hybrid::{self},
};

/// `[control.hybrid]`: defaults for hybrid tasks that do not bring their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HybridConfig {
    /// Contact stiffness along base x, y, z (N/m): from `cell identify stiffness`. Sets the
    /// default force gains (`control::hybrid::default_arm_gains`).
    pub stiffness_n_per_m: [f64; 3],
    /// Rotational contact stiffness about base x, y, z (N·m/rad).
    pub stiffness_nm_per_rad: [f64; 3],
    /// The stiffest contact this cell may meet (N/m), identified or not: an arm task's
    /// approach is slow enough that a surface up to this stiffness is first touched below the
    /// task's `max_force_n` (`control::hybrid::ArmRun::approach_speed`).
    pub worst_case_stiffness_n_per_m: f64,
    /// Effective force-loop delay of the arm (s): EGM + servo lag, ≈ 30 ms on an IRC5.
    pub loop_delay_s: f64,
    /// An arm task's force gains follow an on-line estimate of the contact stiffness along
    /// each translational force axis (`control::stiffness`): the stiffness above is what they
    /// are made for until the estimate is usable, then the estimate's upper confidence bound,
    /// between `softest_stiffness_n_per_m` and `worst_case_stiffness_n_per_m`.
    pub adapt_gains: bool,
    /// The softest contact the gains may be made for when they follow the estimate (N/m).
    pub softest_stiffness_n_per_m: f64,
    /// The softest rotational contact a task's rotational force gains may be made for
    /// (N·m/rad): their ceiling (a higher loop gain than any contact the cell declares can
    /// carry is refused).
    pub softest_stiffness_nm_per_rad: f64,
    /// Speed adaptation of an arm task in contact (`control::hybrid::ArmRun::
    /// with_speed_adaptation`): the task's reference clock slows down so that a sudden stop
    /// of the force axes' current motion (a surface rising, falling or stiffening under the
    /// sliding tool, then ending) costs at most this force (N); 0 turns it off.
    pub slowdown_error_n: f64,
    /// The limits of an arm task, and their ceilings: a task may tighten any field (all
    /// fields when the table is given; the travel bounds may be left out).
    pub limits: HybridLimits,
    /// The same for tasks on the 2-DOF R&C plant, a machine of its own (its approach is
    /// 50 mm/s: the paper's plant starts at the surface).
    pub plant_limits: HybridLimits,
    /// A wrench estimate older than this is stale → a running task holds (ms).
    pub wrench_stale_ms: f64,
    /// No wrench estimate for this long is a gap in the samples (the force service publishes
    /// one per sample): the last one is bridged, the force axes frozen, until
    /// `wrench_stale_ms` (ms).
    pub wrench_gap_ms: f64,
    /// The 2-DOF plant's joint effort bound [N·m, N].
    pub plant_max_effort: [f64; 2],
    /// The longest task the cell runs (s): a task asking for more is refused.
    pub max_duration_s: f64,
    /// The speed bound on an arm task's position axes (m/s; on the norm of their vector):
    /// tasks cannot lift it.
    pub position_speed_m_s: f64,
    /// The same about rotational position axes (rad/s).
    pub position_speed_rad_s: f64,
    /// The largest position-loop gain an arm task's `[gains] kp` may ask (1/s): the loop's
    /// bandwidth, well inside the delay's bound (≈ 1/(2·loop_delay_s)).
    pub max_position_gain_per_s: f64,
    /// The most speed adaptation may hold an arm task behind its plan (s): past it the task
    /// ends with a named fault.
    pub max_reference_lag_s: f64,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            stiffness_n_per_m: [2.0e4; 3],
            stiffness_nm_per_rad: [50.0; 3],
            worst_case_stiffness_n_per_m: hybrid::DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
            loop_delay_s: 0.03,
            adapt_gains: true,
            softest_stiffness_n_per_m: 2.0e3,
            softest_stiffness_nm_per_rad: 5.0,
            slowdown_error_n: 2.0,
            limits: hybrid::default_limits(),
            plant_limits: HybridLimits {
                force_axis_speed_m_s: 0.05,
                deviation_m: hybrid::DEFAULT_PLANT_DEVIATION_M,
                deviation_rad: 0.2,
                ..hybrid::default_limits()
            },
            wrench_stale_ms: 50.0,
            wrench_gap_ms: 9.0,
            plant_max_effort: [200.0, 200.0],
            max_duration_s: 600.0,
            position_speed_m_s: hybrid::DEFAULT_POSITION_SPEED_M_S,
            position_speed_rad_s: hybrid::DEFAULT_POSITION_SPEED_RAD_S,
            max_position_gain_per_s: 10.0,
            max_reference_lag_s: hybrid::DEFAULT_MAX_REFERENCE_LAG_S,
        }
    }
}

impl Validate for HybridConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        for (k, v) in self.stiffness_n_per_m.iter().enumerate() {
            check_range(
                errors,
                format!("{prefix}.stiffness_n_per_m[{k}]"),
                *v,
                1.0,
                1e9,
                "N/m",
            );
        }
        for (k, v) in self.stiffness_nm_per_rad.iter().enumerate() {
            check_range(
                errors,
                format!("{prefix}.stiffness_nm_per_rad[{k}]"),
                *v,
                0.01,
                1e7,
                "N·m/rad",
            );
        }
        check_range(
            errors,
            format!("{prefix}.slowdown_error_n"),
            self.slowdown_error_n,
            0.0,
            1e3,
            "N",
        );
        check_range(
            errors,
            format!("{prefix}.worst_case_stiffness_n_per_m"),
            self.worst_case_stiffness_n_per_m,
            1.0,
            1e9,
            "N/m",
        );
        check_range(
            errors,
            format!("{prefix}.softest_stiffness_n_per_m"),
            self.softest_stiffness_n_per_m,
            1.0,
            1e9,
            "N/m",
        );
        check_range(
            errors,
            format!("{prefix}.softest_stiffness_nm_per_rad"),
            self.softest_stiffness_nm_per_rad,
            0.01,
            1e6,
            "N·m/rad",
        );
        if self.softest_stiffness_n_per_m > self.worst_case_stiffness_n_per_m {
            errors.push(
                format!("{prefix}.softest_stiffness_n_per_m"),
                format!(
                    "{} N/m is stiffer than worst_case_stiffness_n_per_m ({} N/m)",
                    self.softest_stiffness_n_per_m, self.worst_case_stiffness_n_per_m
                ),
            );
        }
        check_range(
            errors,
            format!("{prefix}.loop_delay_s"),
            self.loop_delay_s,
            0.001,
            1.0,
            "s",
        );
        check_range(
            errors,
            format!("{prefix}.wrench_stale_ms"),
            self.wrench_stale_ms,
            1.0,
            1000.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.wrench_gap_ms"),
            self.wrench_gap_ms,
            1.0,
            self.wrench_stale_ms,
            "ms",
        );
        for (table, l) in [
            ("limits", &self.limits),
            ("plant_limits", &self.plant_limits),
        ] {
            for (name, v, hi) in [
                ("force_axis_speed_m_s", l.force_axis_speed_m_s, 0.25),
                ("force_axis_speed_rad_s", l.force_axis_speed_rad_s, 1.0),
                ("deviation_m", l.deviation_m, 1.0),
                ("deviation_rad", l.deviation_rad, 3.2),
                ("max_force_n", l.max_force_n, 1000.0),
                ("max_torque_nm", l.max_torque_nm, 100.0),
                ("contact_threshold_n", l.contact_threshold_n, 100.0),
                ("contact_loss_s", l.contact_loss_s, 10.0),
                ("approach_timeout_s", l.approach_timeout_s, 600.0),
                ("approach_travel_m", l.approach_travel_m, 1.0),
                ("reapproach_travel_m", l.reapproach_travel_m, 0.1),
                ("contact_travel_m", l.contact_travel_m, 0.5),
            ] {
                if !(v.is_finite() && v > 0.0 && v <= hi) {
                    errors.push(
                        format!("{prefix}.{table}.{name}"),
                        format!("{v} must be in (0, {hi}]"),
                    );
                }
            }
        }
        for (name, v, lo, hi, unit) in [
            ("max_duration_s", self.max_duration_s, 0.1, 86400.0, "s"),
            (
                "max_reference_lag_s",
                self.max_reference_lag_s,
                0.1,
                3600.0,
                "s",
            ),
            (
                "position_speed_m_s",
                self.position_speed_m_s,
                1e-4,
                1.0,
                "m/s",
            ),
            (
                "position_speed_rad_s",
                self.position_speed_rad_s,
                1e-3,
                3.2,
                "rad/s",
            ),
            (
                "max_position_gain_per_s",
                self.max_position_gain_per_s,
                0.1,
                100.0,
                "1/s",
            ),
        ] {
            check_range(errors, format!("{prefix}.{name}"), v, lo, hi, unit);
        }
        for (k, v) in self.plant_max_effort.iter().enumerate() {
            check_range(
                errors,
                format!("{prefix}.plant_max_effort[{k}]"),
                *v,
                0.1,
                1e4,
                "",
            );
        }
    }
}

impl HybridConfig {
    /// Gains, limits and per-axis stiffness of {C} for an arm task: the stiffness is the
    /// configured (base-axis) diagonal seen along {C}'s axes, `diag(Rᵀ K R)`.
    pub fn arm_setup(
        &self,
        task: &HybridTask,
        frame_rot: &nalgebra::UnitQuaternion<f64>,
    ) -> Result<HybridSetup, String> {
        let limits = self.task_limits(task)?;
        let r = frame_rot.to_rotation_matrix();
        let m = r.matrix();
        let along =
            |k: &[f64; 3], c: usize| -> f64 { (0..3).map(|j| m[(j, c)] * m[(j, c)] * k[j]).sum() };
        let kt = [0, 1, 2].map(|c| along(&self.stiffness_n_per_m, c));
        let kr = [0, 1, 2].map(|c| along(&self.stiffness_nm_per_rad, c));
        let mut stiffness = [kt[0], kt[1], kt[2], kr[0], kr[1], kr[2]];
        if let Some(g) = &task.gains {
            // The task's own force gains say what stiffness they were made for.
            for (k, s) in stiffness.iter_mut().enumerate() {
                if let Some(ke) = hybrid::stiffness_of_gain(g.kp_f[k], self.loop_delay_s) {
                    *s = ke;
                }
            }
        }
        Ok(HybridSetup {
            gains: task
                .gains
                .unwrap_or_else(|| hybrid::default_arm_gains(kt, kr, self.loop_delay_s)),
            limits,
            stiffness,
            worst_case_n_per_m: self.worst_case_stiffness_n_per_m,
            loop_delay_s: self.loop_delay_s,
            adapt_softest_n_per_m: (self.adapt_gains && !task.fixed_gains)
                .then_some(self.softest_stiffness_n_per_m),
            slowdown_error_n: self.slowdown_error_n,
            position_speed: (self.position_speed_m_s, self.position_speed_rad_s),
            max_reference_lag_s: self.max_reference_lag_s,
        })
    }

    /// The limits a task runs with: the cell's `[control.hybrid.limits]` as ceilings, each
    /// field tightened by the task where it asks. A task asking for more than a ceiling is
    /// refused, every such field named with its value and the ceiling.
    pub fn task_limits(&self, task: &HybridTask) -> Result<HybridLimits, String> {
        let (ceiling, table) = match task.robot {
            TaskRobot::Arm => (&self.limits, "[control.hybrid.limits]"),
            TaskRobot::Plant => (&self.plant_limits, "[control.hybrid.plant_limits]"),
        };
        let limits = task.limits.within(ceiling);
        let mut problems = limits.as_ref().err().cloned().unwrap_or_default();
        problems.extend(self.beyond_ceilings(task));
        match limits {
            Ok(l) if problems.is_empty() => Ok(l),
            _ => Err(format!(
                "refused: {} (ceilings: {table}, [control.hybrid])",
                problems.join("; ")
            )),
        }
    }

    /// What else in a task could weaken the cell's safety, each named with its value and the
    /// ceiling: a duration past `max_duration_s`; an arm task's `[gains]` faster than the
    /// cell allows — the position gain past `max_position_gain_per_s`, translational force
    /// gains made for a surface softer than `softest_stiffness_n_per_m` (a higher loop gain
    /// than any surface the cell declares can carry), their integral past
    /// `MAX_FORCE_INTEGRAL_CORNER_PER_S` × that gain.
    pub fn beyond_ceilings(&self, task: &HybridTask) -> Vec<String> {
        let mut e = Vec::new();
        if task.duration_s > self.max_duration_s {
            e.push(format!(
                "duration_s = {} exceeds the cell's ceiling {} (max_duration_s)",
                task.duration_s, self.max_duration_s
            ));
        }
        if let (Some(g), TaskRobot::Arm) = (&task.gains, task.robot) {
            for (k, kp) in g.kp.iter().enumerate() {
                if *kp > self.max_position_gain_per_s {
                    e.push(format!(
                        "gains.kp[{k}] = {kp} exceeds the cell's ceiling {} \
                         (max_position_gain_per_s)",
                        self.max_position_gain_per_s
                    ));
                }
            }
            let softest = hybrid::default_arm_gains(
                [self.softest_stiffness_n_per_m; 3],
                [self.softest_stiffness_nm_per_rad; 3],
                self.loop_delay_s,
            );
            for k in 0..6 {
                let kp_f_max = softest.kp_f[k];
                let (name, value, unit) = if k < 3 {
                    (
                        "softest_stiffness_n_per_m",
                        self.softest_stiffness_n_per_m,
                        "N/m",
                    )
                } else {
                    (
                        "softest_stiffness_nm_per_rad",
                        self.softest_stiffness_nm_per_rad,
                        "N·m/rad",
                    )
                };
                if g.kp_f[k] > kp_f_max {
                    e.push(format!(
                        "gains.kp_f[{k}] = {} exceeds the cell's ceiling {kp_f_max:.3e} (the \
                         gain made for {name} = {value} {unit})",
                        g.kp_f[k]
                    ));
                }
                let ki_max = MAX_FORCE_INTEGRAL_CORNER_PER_S * kp_f_max;
                if g.ki_f[k] > ki_max {
                    e.push(format!(
                        "gains.ki_f[{k}] = {} exceeds the cell's ceiling {ki_max:.3e} \
                         ({MAX_FORCE_INTEGRAL_CORNER_PER_S}/s × the largest kp_f)",
                        g.ki_f[k]
                    ));
                }
            }
        }
        e
    }
}

/// The force integral's corner frequency an arm task's `[gains] ki_f / kp_f` may reach (1/s):
/// the defaults use 2/s (`control::hybrid::default_arm_gains`).
pub const MAX_FORCE_INTEGRAL_CORNER_PER_S: f64 = 10.0;

/// `[control]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// Mode at start-up: only `idle` or `hold` (a restart never resumes motion).
    pub initial_mode: InitialMode,
    /// Real-time placement of control's node thread (`[control.rt]`): the whole service event
    /// loop (not only the per-cycle step) runs on one thread with a single-threaded runtime.
    pub rt: common::service::RtConfig,
    pub hybrid: HybridConfig,
    /// `[control.guide]`: the lead-through defaults (a session may override any field).
    pub guide: GuideParams,
    pub playback: PlaybackConfig,
    /// `[control.ending]`: how a motion control ends (a task's fault or completion, an
    /// operator's stop, a mode switch) comes to rest: decelerated, in contact unloaded
    /// (`control::ending`). Protective stops (force or torque over a limit) stop at once.
    pub ending: crate::ending::EndParams,
    /// Who turns control's Cartesian reference into the joint command (docs/performance.md):
    /// `direct` (default) — control subscribes to the joint state, computes FK and runs the
    /// servo (the kinematics library's) itself, and publishes `kin/joint_cmd`: 2 transfers per
    /// cycle; `kinematics` — through the kinematics service (tool pose in, Cartesian command
    /// out): 4 transfers.
    pub chain: Chain,
}

/// `[control] chain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Chain {
    #[default]
    Direct,
    Kinematics,
}

/// `[control.playback]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlaybackConfig {
    /// Joint acceleration limits the trajectories are planned within (°/s²); keep them at or
    /// below robot-io's supervisor limits (IRB 120 defaults: 1000, 1000, 1000, 1280, 1280,
    /// 1680).
    pub max_accel_deg_s2: [f64; 6],
    /// Speed scale of the move to a program's first waypoint when the robot starts away from it.
    pub approach_speed_scale: f64,
}

impl Default for PlaybackConfig {
    fn default() -> Self {
        Self {
            max_accel_deg_s2: [1000.0, 1000.0, 1000.0, 1280.0, 1280.0, 1680.0],
            approach_speed_scale: crate::trajectory::APPROACH_SPEED_SCALE,
        }
    }
}

impl Validate for PlaybackConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        for (k, v) in self.max_accel_deg_s2.iter().enumerate() {
            check_range(
                errors,
                format!("{prefix}.max_accel_deg_s2[{k}]"),
                *v,
                1.0,
                1e5,
                "°/s²",
            );
        }
        check_range(
            errors,
            format!("{prefix}.approach_speed_scale"),
            self.approach_speed_scale,
            0.01,
            1.0,
            "",
        );
    }
}

/// What control's service needs: its table and the arm.
#[derive(Debug, Clone)]
pub struct ControlSetup {
    pub cfg: ControlConfig,
    pub arm: kinematics::Arm,
    /// The servo's settings (`[kinematics]`), for the direct chain.
    pub servo: kinematics::servo::ServoParams,
    /// `[arm] model`, for program files.
    pub arm_model: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum InitialMode {
    #[default]
    Idle,
    Hold,
}

impl Validate for ControlConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        self.rt.validate(&format!("{prefix}.rt"), errors);
        self.hybrid.validate(&format!("{prefix}.hybrid"), errors);
        for e in self.guide.problems(&format!("{prefix}.guide")) {
            let (k, m) = e.split_once(": ").unwrap_or((e.as_str(), "invalid"));
            errors.push(k.to_string(), m.to_string());
        }
        self.playback
            .validate(&format!("{prefix}.playback"), errors);
        for e in self.ending.problems(&format!("{prefix}.ending")) {
            let (k, m) = e.split_once(": ").unwrap_or((e.as_str(), "invalid"));
            errors.push(k.to_string(), m.to_string());
        }
    }
}

/// The session's guide parameters: `[control.guide]` with `overrides` applied; unknown keys
/// and bad values are errors (all listed).
pub fn guide_params(
    base: &GuideParams,
    overrides: &serde_json::Map<String, serde_json::Value>,
) -> Result<GuideParams, String> {
    let mut v = serde_json::to_value(base).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    for (k, val) in overrides {
        // The law by its snake_case name too (`"stiffness"`), as the CLI and docs spell it.
        let val = match (k.as_str(), val.as_str()) {
            ("law", Some(name)) => {
                let mut c = name.chars();
                match c.next() {
                    Some(f) => serde_json::Value::String(f.to_uppercase().chain(c).collect()),
                    None => val.clone(),
                }
            }
            _ => val.clone(),
        };
        match v.get_mut(k) {
            Some(slot) => *slot = val,
            None => unknown.push(k.clone()),
        }
    }
    if !unknown.is_empty() {
        return Err(format!(
            "unknown guide parameter(s): {}",
            unknown.join(", ")
        ));
    }
    let p: GuideParams = serde_json::from_value(v).map_err(|e| format!("guide parameters: {e}"))?;
    let mut problems = p.problems("guide");
    problems.extend(guide_above_ceilings(base, &p));
    if problems.is_empty() {
        Ok(p)
    } else {
        Err(problems.join("; "))
    }
}

/// A session may tighten the cell's guiding caps (`[control.guide]`), never lift them: the
/// speed and acceleration caps, the deadman timeout and the workspace box (a session's box
/// must lie inside the cell's). Each field above its ceiling is named with both values.
pub fn guide_above_ceilings(cell: &GuideParams, p: &GuideParams) -> Vec<String> {
    let mut e = Vec::new();
    for (name, v, ceiling) in [
        ("max_speed_m_s", p.max_speed_m_s, cell.max_speed_m_s),
        (
            "max_rot_speed_rad_s",
            p.max_rot_speed_rad_s,
            cell.max_rot_speed_rad_s,
        ),
        ("max_accel_m_s2", p.max_accel_m_s2, cell.max_accel_m_s2),
        (
            "max_rot_accel_rad_s2",
            p.max_rot_accel_rad_s2,
            cell.max_rot_accel_rad_s2,
        ),
        (
            "deadman_timeout_s",
            p.deadman_timeout_s,
            cell.deadman_timeout_s,
        ),
        ("max_force_n", p.max_force_n, cell.max_force_n),
        ("max_torque_nm", p.max_torque_nm, cell.max_torque_nm),
        (
            "collision_force_n",
            p.collision_force_n,
            cell.collision_force_n,
        ),
        (
            "collision_time_s",
            p.collision_time_s,
            cell.collision_time_s,
        ),
    ] {
        if v > ceiling {
            e.push(format!(
                "guide.{name} = {v} exceeds the cell's ceiling {ceiling} ([control.guide]; a \
                 session may only tighten it)"
            ));
        }
    }
    // The collision watch resets whenever the TCP moves this far: a smaller travel is the
    // weaker watch (a tiny one never fires), so the cell's value is a floor (issue 41 item 5).
    if p.collision_travel_m < cell.collision_travel_m {
        e.push(format!(
            "guide.collision_travel_m = {} is below the cell's floor {} ([control.guide]; a \
             smaller travel weakens the collision watch, a session may only raise it)",
            p.collision_travel_m, cell.collision_travel_m
        ));
    }
    for k in 0..3 {
        if p.workspace_min_m[k] < cell.workspace_min_m[k]
            || p.workspace_max_m[k] > cell.workspace_max_m[k]
        {
            e.push(format!(
                "guide workspace {:?}..{:?} m leaves the cell's box {:?}..{:?} m on axis {}",
                p.workspace_min_m,
                p.workspace_max_m,
                cell.workspace_min_m,
                cell.workspace_max_m,
                ["x", "y", "z"][k]
            ));
            break;
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_from(toml: &str) -> HybridTask {
        crate::taskfile::parse(toml).expect("task parses")
    }

    const PRESS: &str = "name = \"press\"\nrobot = \"arm\"\nframe = \"base\"\n\
        force_axes = [\"z\"]\nduration_s = 5.0\n[reference]\nz = 10.0\n";

    /// The cell's `[control.hybrid.limits]` are ceilings: a task may tighten a field, never
    /// lift one (a task file with `max_force_n = 1e9` was obeyed before).
    #[test]
    fn a_task_cannot_lift_the_cells_limits() {
        let cfg = HybridConfig::default();
        let rot = nalgebra::UnitQuaternion::identity();
        let lifted = task_from(&format!(
            "{PRESS}[limits]\nmax_force_n = 1e9\nforce_axis_speed_m_s = 0.2\n"
        ));
        let e = cfg.arm_setup(&lifted, &rot).expect_err("refused");
        assert!(e.contains("limits.max_force_n = 1000000000"), "{e}");
        assert!(
            e.contains(&format!("ceiling {}", cfg.limits.max_force_n)),
            "{e}"
        );
        assert!(e.contains("limits.force_axis_speed_m_s = 0.2"), "{e}");
        // Plant tasks go through the same ceiling.
        assert!(cfg.task_limits(&lifted).is_err());
        // Tightening one field keeps every other at the cell's (not the code's defaults).
        let mut cell = cfg.clone();
        cell.limits.max_force_n = 30.0;
        cell.limits.deviation_m = 0.01;
        let tight = task_from(&format!("{PRESS}[limits]\nmax_force_n = 20.0\n"));
        let l = cell
            .arm_setup(&tight, &rot)
            .expect("tighter is fine")
            .limits;
        assert_eq!(l.max_force_n, 20.0);
        assert_eq!(l.deviation_m, 0.01);
        // A partial table asking for the code's default above the cell's is refused.
        let over = task_from(&format!("{PRESS}[limits]\nmax_force_n = 50.0\n"));
        assert!(cell.arm_setup(&over, &rot).is_err());
        // No [limits]: the cell's.
        assert_eq!(
            cell.arm_setup(&task_from(PRESS), &rot).expect("ok").limits,
            cell.limits
        );
    }

    /// A guide session may tighten the guiding caps, not lift them.
    #[test]
    fn a_guide_session_cannot_lift_the_cells_caps() {
        let cell = GuideParams::default();
        let over = |k: &str, v: serde_json::Value| {
            let mut m = serde_json::Map::new();
            m.insert(k.into(), v);
            guide_params(&cell, &m)
        };
        let e = over("max_speed_m_s", serde_json::json!(0.25 + 1e-9)).expect_err("above");
        assert!(e.contains("max_speed_m_s") && e.contains("ceiling"), "{e}");
        assert!(over("deadman_timeout_s", serde_json::json!(2.0)).is_err());
        // The protective stop's ceilings (issue 19 item 6).
        assert!(over("max_force_n", serde_json::json!(200.0)).is_err());
        assert!(over("max_torque_nm", serde_json::json!(20.0)).is_err());
        assert!(over("collision_force_n", serde_json::json!(100.0)).is_err());
        assert!(over("collision_time_s", serde_json::json!(1.0)).is_err());
        assert!(over("max_force_n", serde_json::json!(30.0)).is_ok());
        assert!(over("workspace_max_m", serde_json::json!([0.9, 0.35, 0.6])).is_err());
        let ok = over("max_speed_m_s", serde_json::json!(0.1)).expect("tighter");
        assert_eq!(ok.max_speed_m_s, 0.1);
        assert!(over("workspace_max_m", serde_json::json!([0.5, 0.3, 0.5])).is_ok());
        // Issue 41 item 5: the collision travel is a floor (a tiny one disables the watch).
        let e = over(
            "collision_travel_m",
            serde_json::json!(cell.collision_travel_m * 0.1),
        )
        .expect_err("below the floor");
        assert!(
            e.contains("collision_travel_m") && e.contains("floor"),
            "{e}"
        );
        assert!(over(
            "collision_travel_m",
            serde_json::json!(cell.collision_travel_m * 2.0)
        )
        .is_ok());
    }

    /// Issue 41 item 5: a task's duration and its `[gains]` are bounded by the cell, each
    /// field beyond its ceiling named with both values, all of them in one refusal.
    #[test]
    fn a_task_cannot_ask_for_more_gain_or_time_than_the_cell_allows() {
        let cfg = HybridConfig::default();
        let rot = nalgebra::UnitQuaternion::identity();
        let long = task_from(&PRESS.replace("duration_s = 5.0", "duration_s = 7200.0"));
        let e = cfg.arm_setup(&long, &rot).expect_err("too long");
        assert!(
            e.contains("duration_s = 7200") && e.contains("max_duration_s"),
            "{e}"
        );
        // Gains made for the softest declared surface are the ceiling; 10× them is refused,
        // with the position gain and the integral, all named at once.
        let soft = hybrid::default_arm_gains(
            [cfg.softest_stiffness_n_per_m; 3],
            cfg.stiffness_nm_per_rad,
            cfg.loop_delay_s,
        );
        let mut hot = long.clone();
        hot.duration_s = 5.0;
        let mut g = soft;
        g.kp_f[2] *= 10.0;
        g.ki_f[2] = g.kp_f[2] * 20.0;
        g.kp[0] = 50.0;
        // A rotational force gain made for a contact 100× softer than the cell's softest.
        g.kp_f[4] = 100.0
            * hybrid::default_arm_gains(
                [cfg.softest_stiffness_n_per_m; 3],
                [cfg.softest_stiffness_nm_per_rad; 3],
                cfg.loop_delay_s,
            )
            .kp_f[4];
        hot.gains = Some(g);
        let e = cfg.arm_setup(&hot, &rot).expect_err("too fast");
        for what in [
            "gains.kp_f[2]",
            "gains.ki_f[2]",
            "gains.kp[0]",
            "gains.kp_f[4]",
            "softest_stiffness_nm_per_rad",
        ] {
            assert!(e.contains(what), "{what}: {e}");
        }
        // At the ceiling (and the configured surface's default gains): accepted.
        hot.gains = Some(soft);
        assert!(cfg.arm_setup(&hot, &rot).is_ok());
        hot.gains = None;
        assert!(cfg.arm_setup(&hot, &rot).is_ok());
    }
}
