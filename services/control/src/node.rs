//! control's shell: runs the core on every new tool pose with the newest wrench estimate.

use std::time::Duration;

use common::{
    bus::Node,
    clock,
    config::{check_range, ConfigErrors, Validate},
    msg::{
        CartesianCommand, HybridLimits, HybridPhase, HybridState, HybridTask, Mode,
        PlantEffortCommand, TaskRobot, WrenchEstimate,
    },
    service::Shutdown,
    topic,
};
use kinematics::node::from_msg_pose;
use serde::{Deserialize, Serialize};

use crate::{
    core::{ControlCore, HybridSetup, PlayCommand, PlayReport, PlayRun, WrenchInput},
    deadman::Deadman,
    guide::GuideParams,
    hybrid::{self, PlantInput, PlantRun, StepReport, WrenchPeak},
    program::{MountTolerance, PayloadSpec, Program, ToolSpec},
    teach::{DwellRule, TeachBuffer},
    trajectory::{
        CartesianLimits, CartesianPlayback, CartesianTrajectory, JointTrajectory, PlanOptions,
        Playback, TrajLimits,
    },
};
use common::bus::{reply_err, reply_json};

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

/// Stops the 2-DOF plant's running task, if any: marks its last report `Aborted` and says
/// why (the caller sends the plant a zero effort and the report).
fn stop_plant(
    plant: &mut Option<PlantRun>,
    report: &mut Option<(String, StepReport)>,
    why: &str,
) -> Option<String> {
    let run = plant.take()?;
    if let Some((_, r)) = report.as_mut() {
        r.phase = HybridPhase::Aborted;
    }
    let msg = format!("plant task {:?} ended: {why}", run.task.name);
    tracing::warn!("{msg}");
    Some(msg)
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

/// The direct chain's part of control: the servo (the kinematics service's code, run here)
/// and the joint command publisher.
pub struct DirectChain {
    servo: kinematics::servo::Servo,
    publisher: common::bus::Publisher<common::msg::JointCommand>,
    /// The newest joint command on the bus (ours included: zenoh delivers local publications).
    seen: common::bus::Latest<common::msg::JointCommand>,
    own: [u64; common::commander::OWN_MOTIONS],
    last_cmd_at: Option<std::time::Instant>,
    /// Commands computed, unreachable targets, limited steps.
    pub counts: (u64, u64, u64),
}

impl DirectChain {
    pub async fn new(node: &Node, setup: &ControlSetup) -> anyhow::Result<Self> {
        Ok(Self {
            servo: kinematics::servo::Servo::with_params(setup.arm.clone(), setup.servo),
            publisher: node.publisher(topic::JOINT_COMMAND).await?,
            seen: node.latest(topic::JOINT_COMMAND).await?,
            own: [0; common::commander::OWN_MOTIONS],
            last_cmd_at: None,
            counts: (0, 0, 0),
        })
    }

    /// [`common::commander::other_commander`] with this chain's own motions and the newest
    /// command seen.
    pub fn other_commander(&self, motion_id: u64, now_ns: u64) -> Option<String> {
        let mut own = self.own;
        own.rotate_right(1);
        own[0] = motion_id;
        let seen = self.seen.get().map(|r| (r.msg.motion.motion_id, r.at_ns));
        common::commander::other_commander(&own, seen, now_ns)
    }

    /// Steps the servo towards `target` from the joint state `js` (once per robot cycle of
    /// `period_s`) and publishes the joint command; `false` when the servo's output is not
    /// finite (nothing sent).
    pub fn command(
        &mut self,
        js: &common::msg::JointState,
        target: &common::msg::CartesianTarget,
        motion: common::msg::MotionTag,
        period_s: Option<f64>,
    ) -> bool {
        if !self.own.contains(&motion.motion_id) {
            self.own.rotate_right(1);
            self.own[0] = motion.motion_id;
        }
        let now = std::time::Instant::now();
        let since = self
            .last_cmd_at
            .map_or(f64::INFINITY, |t| now.duration_since(t).as_secs_f64());
        self.last_cmd_at = Some(now);
        let out = self.servo.step(&kinematics::servo::ServoInput {
            q_measured: &js.q_rad,
            target: &kinematics::node::servo_target(target),
            dt: period_s
                .filter(|p| p.is_finite() && *p > 0.0)
                .unwrap_or(0.004),
            since_last_s: since,
            cycle: js.cycle,
        });
        if !out.q.iter().chain(&out.qd).all(|v| v.is_finite()) {
            return false;
        }
        self.counts.0 += 1;
        self.counts.1 += u64::from(out.flags.unreachable);
        self.counts.2 += u64::from(out.flags.speed_limited || out.flags.position_limited);
        let jc = common::msg::JointCommand {
            stamp: self.publisher.next_stamp(),
            cycle: js.cycle,
            motion,
            q_rad: out.q,
            qd_rad_s: out.qd,
            flags: common::msg::KinFlags {
                unreachable: out.flags.unreachable,
                near_singular: out.flags.near_singular,
                position_limited: out.flags.position_limited,
                speed_limited: out.flags.speed_limited,
            },
        };
        self.publisher.put(&jc);
        true
    }
}

/// The next sample of an optional latest-value input (pending forever when absent).
async fn next_of<T: Clone>(
    l: &mut Option<common::bus::Latest<T>>,
) -> Option<common::bus::Received<T>> {
    match l {
        Some(l) => l.changed().await,
        None => std::future::pending().await,
    }
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

fn hybrid_state(stamp: common::msg::Stamp, motion_id: u64, r: &StepReport) -> HybridState {
    HybridState {
        stamp,
        motion_id,
        t_s: r.t_s,
        clock_s: r.clock_s,
        phase: r.phase,
        force_ref: r.force_ref,
        force: r.force,
        position_ref: r.position_ref,
        position: r.position,
        output: r.output,
        limited: r.limited,
        bridged: r.bridged,
        seating: r.seating,
        frame_in_base: r.frame_in_base,
        gains_for_n_per_m: r.gains_for_n_per_m,
        stiffness_estimate_n_per_m: r.stiffness_estimate_n_per_m,
        ref_time_s: r.ref_time_s,
        speed_scale: r.speed_scale,
    }
}

fn report_json(name: &str, r: Option<&StepReport>) -> serde_json::Value {
    serde_json::json!({
        "task": name,
        "phase": r.map(|r| format!("{:?}", r.phase)),
        "t_s": r.map(|r| r.t_s),
        "force_ref": r.map(|r| r.force_ref),
        "force": r.map(|r| r.force),
        "position_ref": r.map(|r| r.position_ref),
        "position": r.map(|r| r.position),
    })
}

/// Says once, when it happens, why a motion ended by itself (not on every cycle after).
fn report_end(node: &Node, core: &ControlCore, before: Mode) {
    if before != core.mode() {
        if let Some(why) = core.stop_reason() {
            tracing::warn!("motion ended: {why}; idle until a new command");
            node.set_error(format!("motion ended: {why}"));
        }
    }
}

fn one() -> f64 {
    1.0
}

/// Requests on `control/rpc/lead` (JSON, externally tagged: `{"record": {"label": "a"}}`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum LeadRequest {
    /// Start guiding; the object overrides fields of `[control.guide]` (e.g. `{"law":
    /// "stiffness"}`).
    Guide(serde_json::Map<String, serde_json::Value>),
    /// Record the measured pose as a waypoint.
    Record {
        #[serde(default)]
        label: String,
    },
    Undo {},
    Clear {},
    /// Replace the teach buffer with these points (a loaded program's joints, degrees).
    Load {
        waypoints: Vec<LoadPoint>,
    },
    /// The teach buffer as program waypoints, with the mounted tool and the arm model.
    List {},
    /// Play a program (checked against the mounted tool, and the payload when given).
    Play {
        program: Box<Program>,
        #[serde(default = "one")]
        speed_scale: f64,
        /// The payload the force service identified (the CLI reads it from force's status).
        #[serde(default)]
        mounted_payload: Option<PayloadSpec>,
        /// Straight TCP lines between the waypoints (default: joint-space moves).
        #[serde(default)]
        cartesian: bool,
    },
    /// A joint-space move (ABB's `MoveAbsJ`, UR's `movej`) from the measured joints to
    /// `q_deg`: one synchronised, jerk-limited segment planned like a program's approach, at
    /// `speed_scale` of the joint speed and acceleration budgets (default
    /// `[control.playback] approach_speed_scale`). It runs as a playback named
    /// [`MOVE_JOINTS_NAME`] (its states on `control/playback`; pause, resume and stop apply).
    MoveJoints {
        q_deg: [f64; 6],
        #[serde(default)]
        speed_scale: Option<f64>,
    },
    Pause {},
    Resume {},
    Stop {},
}

/// The playback name of a [`LeadRequest::MoveJoints`] motion.
pub const MOVE_JOINTS_NAME: &str = "move-joints";

/// A point of [`LeadRequest::Load`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadPoint {
    #[serde(default)]
    pub label: String,
    pub q_deg: [f64; 6],
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

/// State the lead requests act on.
struct Lead<'a> {
    core: &'a mut ControlCore,
    /// The deadman binding: a guide request binds it to a fresh token.
    deadman: &'a mut Deadman,
    /// The token a guide request binds (fresh per request).
    token: u64,
    teach: &'a mut TeachBuffer,
    setup: &'a ControlSetup,
    pose: Option<&'a common::msg::ToolPose>,
    wrench_fault: Option<common::msg::WrenchFault>,
    now_s: f64,
}

fn tool_spec(setup: &ControlSetup) -> ToolSpec {
    ToolSpec::from_isometry(setup.arm.tool())
}

fn handle_lead(req: LeadRequest, l: Lead) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let pose = || {
        l.pose
            .ok_or("no tool pose yet (is kinematics running?)".to_string())
    };
    match req {
        LeadRequest::Guide(over) => {
            let params = guide_params(&l.setup.cfg.guide, &over)?;
            l.core
                .request_guide(params, l.wrench_fault)
                .map_err(|e| e.to_string())?;
            // Only enables carrying this token keep this session's deadman (docs/safety.md).
            l.deadman.bind(l.token);
            Ok(json!({ "guiding": params.law, "params": params, "enable_token": l.token }))
        }
        LeadRequest::Record { label } => {
            let p = pose()?;
            let i = l
                .teach
                .record(&label, p.q_rad, from_msg_pose(&p.tcp_in_base), l.now_s)?;
            Ok(json!({
                "index": i,
                "label": l.teach.points()[i].label,
                "q_deg": p.q_rad.map(f64::to_degrees),
                "tcp_position_m": p.tcp_in_base.position_m,
                "waypoints": l.teach.len(),
            }))
        }
        LeadRequest::Undo {} => {
            let gone = l.teach.undo().ok_or("the teach buffer is empty")?;
            Ok(json!({ "removed": gone.label, "waypoints": l.teach.len() }))
        }
        LeadRequest::Load { waypoints } => {
            let mut fresh = TeachBuffer::default();
            for (i, w) in waypoints.iter().enumerate() {
                let q = w.q_deg.map(f64::to_radians);
                let tcp = l
                    .setup
                    .arm
                    .fk(&q)
                    .map_err(|e| format!("waypoint {i}: {e}"))?;
                fresh.record(&w.label, q, tcp, l.now_s)?;
            }
            *l.teach = fresh;
            Ok(json!({ "waypoints": l.teach.len() }))
        }
        LeadRequest::Clear {} => {
            l.teach.clear();
            Ok(json!({ "waypoints": 0 }))
        }
        LeadRequest::List {} => {
            let tool = tool_spec(l.setup);
            let mut wps = Vec::new();
            for t in l.teach.points() {
                let w =
                    crate::program::Waypoint::from_joints(&t.label, &t.q_rad, &l.setup.arm, &tool)
                        .map_err(|e| format!("waypoint {}: {e}", t.label))?;
                wps.push(w);
            }
            Ok(json!({ "waypoints": wps, "tool": tool, "arm_model": l.setup.arm_model }))
        }
        LeadRequest::Play {
            program,
            speed_scale,
            mounted_payload,
            cartesian,
        } => {
            let p = pose()?;
            program.check().map_err(|e| e.to_string())?;
            program
                .validate(l.setup.arm.limits())
                .map_err(|e| e.to_string())?;
            let payload_checked = mounted_payload.is_some();
            let payload = mounted_payload.unwrap_or(program.payload);
            program
                .matches_mounted(&tool_spec(l.setup), &payload, &MountTolerance::default())
                .map_err(|e| format!("refused: {e}"))?;
            let pc = &l.setup.cfg.playback;
            let limits = TrajLimits::from_joint_limits(
                l.setup.arm.limits(),
                pc.max_accel_deg_s2.map(f64::to_radians),
            );
            let opts = PlanOptions {
                speed_scale,
                approach_speed_scale: pc.approach_speed_scale,
                ..Default::default()
            };
            let n = program.waypoints.len();
            let (run, duration, approach) = if cartesian {
                cartesian_play(&program, l.setup, &limits, speed_scale, p)?
            } else {
                let traj = JointTrajectory::plan(
                    &program.joint_waypoints(),
                    &limits,
                    &opts,
                    Some(&p.q_rad),
                )
                .map_err(|e| e.to_string())?;
                let (duration, approach) = (traj.duration(), traj.has_approach());
                (PlayRun::Joint(Playback::new(traj)), duration, approach)
            };
            l.core
                .request_play(program.name.clone(), run)
                .map_err(|e| e.to_string())?;
            Ok(json!({
                "playing": program.name,
                "motion_id": l.core.requested_motion_tag().map(|m| m.motion_id),
                "cartesian": cartesian,
                "waypoints": n,
                "duration_s": duration,
                "approach": approach,
                "payload_checked": payload_checked,
            }))
        }
        LeadRequest::MoveJoints { q_deg, speed_scale } => {
            let p = pose()?;
            let pc = &l.setup.cfg.playback;
            let scale = speed_scale.unwrap_or(pc.approach_speed_scale);
            if !(scale > 0.0 && scale <= 1.0) {
                return Err(format!("speed_scale {scale} is outside (0, 1]"));
            }
            let q: [f64; 6] = q_deg.map(f64::to_radians);
            let limits = TrajLimits::from_joint_limits(
                l.setup.arm.limits(),
                pc.max_accel_deg_s2.map(f64::to_radians),
            );
            let opts = PlanOptions {
                speed_scale: scale,
                approach_speed_scale: scale,
                ..Default::default()
            };
            let traj = JointTrajectory::plan(&[q.into()], &limits, &opts, Some(&p.q_rad))
                .map_err(|e| format!("joint move refused: {e}"))?;
            let duration = traj.duration();
            l.core
                .request_play(
                    MOVE_JOINTS_NAME.to_string(),
                    PlayRun::Joint(Playback::new(traj)),
                )
                .map_err(|e| e.to_string())?;
            Ok(json!({
                "playing": MOVE_JOINTS_NAME,
                "motion_id": l.core.requested_motion_tag().map(|m| m.motion_id),
                "waypoints": 1,
                "duration_s": duration,
                "speed_scale": scale,
            }))
        }
        LeadRequest::Pause {} | LeadRequest::Resume {} | LeadRequest::Stop {} => {
            let c = match req {
                LeadRequest::Pause {} => PlayCommand::Pause,
                LeadRequest::Resume {} => PlayCommand::Resume,
                _ => PlayCommand::Stop,
            };
            let st = l.core.play_command(c).map_err(|e| e.to_string())?;
            Ok(json!({ "state": format!("{st:?}") }))
        }
    }
}

/// Plans straight TCP lines through the program's waypoints (their joints' FK with the mounted
/// tool), after a line from the measured pose at the approach speed when the robot is away
/// from the first waypoint; each line is slowed where the IK along it would exceed the joint
/// speed or acceleration budget (sampled at the robot cycle, nearest-branch IK).
fn cartesian_play(
    program: &Program,
    setup: &ControlSetup,
    limits: &TrajLimits,
    speed_scale: f64,
    pose: &common::msg::ToolPose,
) -> Result<(PlayRun, f64, bool), String> {
    let arm = &setup.arm;
    let mut poses = Vec::new();
    for (i, q) in program.joint_waypoints().iter().enumerate() {
        poses.push(arm.fk(&q.q).map_err(|e| format!("waypoint {i}: {e}"))?);
    }
    let here = from_msg_pose(&pose.tcp_in_base);
    let first = poses
        .first()
        .copied()
        .ok_or("the program has no waypoints")?;
    let away = (here.translation.vector - first.translation.vector).norm() > 1e-3
        || here.rotation.angle_to(&first.rotation) > 0.5f64.to_radians();
    let fit = |tr: &mut CartesianTrajectory, q0: [f64; 6]| -> Result<(), String> {
        let mut prev = q0;
        tr.fit_joint_limits(
            |p| {
                let s = arm.ik_nearest(p, &prev).ok()?;
                prev = s.q;
                Some(s.q)
            },
            limits,
            0.004,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let cl = CartesianLimits::default();
    let approach = if away {
        let mut a = CartesianTrajectory::plan(
            &[here, first],
            &cl,
            (speed_scale * setup.cfg.playback.approach_speed_scale).min(1.0),
        )
        .map_err(|e| e.to_string())?;
        fit(&mut a, pose.q_rad)?;
        Some(a)
    } else {
        None
    };
    let mut main =
        CartesianTrajectory::plan(&poses, &cl, speed_scale).map_err(|e| e.to_string())?;
    let q_first = program
        .joint_waypoints()
        .first()
        .map_or(pose.q_rad, |w| w.q);
    fit(&mut main, q_first)?;
    let pb = CartesianPlayback::new(approach, main);
    let d = pb.duration();
    Ok((PlayRun::Cartesian(pb), d, away))
}

/// The playback state to publish for program `name`'s report `r` under motion `motion_id`
/// (the motion being played: an ended motion's id, not 0, so clients that follow it see the
/// end); `q_fallback` when the report has no joint reference.
fn play_state(
    stamp: common::msg::Stamp,
    motion_id: u64,
    name: &str,
    r: &PlayReport,
    phase: common::msg::PlaybackPhase,
    q_fallback: [f64; 6],
) -> common::msg::PlaybackState {
    common::msg::PlaybackState {
        stamp,
        motion_id,
        program: name.to_string(),
        phase,
        waypoint: r.waypoint as u32,
        waypoints: r.waypoints as u32,
        progress: r.progress.clamp(0.0, 1.0),
        t_s: r.t_s,
        duration_s: r.duration_s,
        q_ref_rad: r.q_ref.unwrap_or(q_fallback),
    }
}

fn playback_phase(
    st: crate::trajectory::PlaybackState,
    approach: bool,
) -> common::msg::PlaybackPhase {
    use crate::trajectory::PlaybackState as S;
    use common::msg::PlaybackPhase as P;
    match st {
        S::Running if approach => P::Approach,
        S::Running => P::Running,
        S::Pausing => P::Pausing,
        S::Paused => P::Paused,
        S::Stopping => P::Stopping,
        S::Stopped => P::Stopped,
        S::Done => P::Done,
    }
}

pub async fn run(node: Node, setup: ControlSetup, mut shutdown: Shutdown) -> anyhow::Result<()> {
    let cfg = setup.cfg.clone();
    // The chain (docs/performance.md): direct — the joint state in, FK and the servo here,
    // the joint command out (2 transfers per cycle); kinematics — the tool pose from the
    // kinematics service, the Cartesian command to it (4 transfers).
    let (mut poses, mut joints, mut direct) = match cfg.chain {
        Chain::Direct => (
            None,
            Some(node.latest(topic::JOINT_STATE).await?),
            Some(DirectChain::new(&node, &setup).await?),
        ),
        Chain::Kinematics => (Some(node.latest(topic::TOOL_POSE).await?), None, None),
    };
    let wrench = node.latest(topic::WRENCH_ESTIMATE).await?;
    // Every safety state, in order (a drop from Active must not be coalesced away).
    let mut safety = node.events_unbounded(topic::SAFETY_STATE).await?;
    let mut modes = node.events(topic::MODE_COMMAND, 16).await?;
    let mut moves = node.events(topic::MOVE_TARGET, 16).await?;
    let mut tasks = node.events(topic::HYBRID_TASK, 16).await?;
    let mut plant_states = node.latest(topic::PLANT_STATE).await?;
    let mut cmd_pub = node.publisher(topic::CARTESIAN_COMMAND).await?;
    let mut state_pub = node.publisher(topic::HYBRID_STATE).await?;
    let mut effort_pub = node.publisher(topic::PLANT_EFFORT).await?;
    let mut enables = node.events(topic::ENABLE, 16).await?;
    let mut guide_pub = node.publisher(topic::GUIDE_STATE).await?;
    let mut play_pub = node.publisher(topic::PLAYBACK_STATE).await?;
    let mut end_pub = node.publisher(topic::MOTION_END).await?;
    // Guiding's protective stops are latched at robot-io (issue 19 item 6).
    let mut protective_pub = node.publisher(topic::ESTOP).await?;
    let lead_key = format!("cell/{}/{}", node.cell_id, topic::CONTROL_RPC_LEAD);
    let lead_q = node
        .session
        .declare_queryable(lead_key.clone())
        .await
        .map_err(|e| anyhow::anyhow!("queryable {lead_key}: {e}"))?;
    // The deadman of the lead-through session (bound by a guide request's token), on a clock
    // of seconds since start-up.
    let mut deadman = Deadman::default();
    let started = std::time::Instant::now();
    let mut guide_requests = 0u64;
    let mut enable_count = 0u64;
    let mut teach = TeachBuffer::default();
    let mut last_pose: Option<common::msg::ToolPose> = None;
    let mut last_robot_s = 0.0f64;
    let hcfg = cfg.hybrid.clone();
    let stale = Duration::from_secs_f64(hcfg.wrench_stale_ms * 1e-3);
    // The newest usable estimate and when it arrived: a `Stale` flag from the force service
    // (no sample for its `stale_ms`, 9 ms by default) is a gap in the samples, bridged with the
    // last usable estimate for up to `wrench_stale_ms`; every other fault ends a task at once.
    let mut gate = crate::core::WrenchGate::new(stale.as_secs_f64(), hcfg.wrench_gap_ms * 1e-3);
    let epoch = std::time::Instant::now();
    let mut wrench_input =
        |w: Option<common::bus::Received<WrenchEstimate>>| -> (WrenchInput, WrenchPeak) {
            let since = |t: std::time::Instant| t.saturating_duration_since(epoch).as_secs_f64();
            let now = since(std::time::Instant::now());
            let input = gate.input(w.as_ref().map(|r| (&r.msg, since(r.at))), now);
            (input, gate.peak())
        };
    let mut plant: Option<PlantRun> = None;
    let mut robot_clock = crate::core::RobotClock::default();
    let mut plant_report: Option<(String, StepReport)> = None;
    // Ends the plant's running task, if any, with `why`: a zero effort to the plant, its last
    // state `Aborted` on the bus, the reason in the status.
    macro_rules! end_plant {
        ($why:expr) => {
            if let Some(why) = stop_plant(&mut plant, &mut plant_report, $why) {
                let stamp = effort_pub.next_stamp();
                effort_pub.put(&PlantEffortCommand {
                    stamp,
                    effort: [0.0; 2],
                });
                if let Some((_, r)) = plant_report.as_ref() {
                    let stamp = state_pub.next_stamp();
                    state_pub.put(&hybrid_state(stamp, 0, r));
                }
                node.set_error(why);
            }
        };
    }
    let _presence = node.announce().await?;

    // Motion ids differ per process start (a restarted control never reuses an id).
    let mut core =
        ControlCore::new(common::clock::mono_ns() ^ (u64::from(std::process::id()) << 40));
    core.set_end_params(cfg.ending);
    // `initial_mode = "hold"` is applied once robot-io's safety state is known.
    let mut initial_hold = cfg.initial_mode == InitialMode::Hold;
    let mut status_tick = tokio::time::interval(Duration::from_millis(250));
    let mut published = 0u64;
    let (mut step_lat, mut force_loop) = (
        common::latency::Histogram::new(),
        common::latency::Histogram::new(),
    );

    // The tool pose of this cycle (with its arrival and time stamps), from kinematics or, on
    // the direct chain, computed here from the joint state.
    let mut pose_in: Option<(common::msg::ToolPose, u64, u64)> = None;
    let mut direct_js: Option<common::msg::JointState> = None;
    loop {
        let mode_at_start = core.mode();
        let stops_at_start = core.stop_changes();
        let ending_at_start = core.ending().is_some();
        tokio::select! {
            _ = &mut shutdown => break,
            Some(m) = modes.rx.recv() => {
                // A bare lead-through request is refused (`NeedsGuideRequest`): guiding starts
                // by a guide request, whose reply carries the deadman's token.
                let r = core.request_mode(m.msg.mode);
                if m.msg.mode == Mode::Idle {
                    // An operator's stop stops the plant's task too (issue 41 item 7).
                    end_plant!("operator stop (mode idle)");
                }
                match r {
                    Ok(()) => tracing::info!("mode → {:?}", m.msg.mode),
                    Err(e) => node.set_error(e.to_string()),
                }
            }
            Some(e) = enables.rx.recv() => {
                enable_count += 1;
                let now = started.elapsed().as_secs_f64();
                if !deadman.on_enable(e.msg.token, now) && core.mode() == Mode::LeadThrough {
                    tracing::debug!(source = e.msg.source, "enable without this session's token ignored");
                }
            }
            Ok(q) = lead_q.recv_async() => {
                let body = q.payload().map(|p| p.to_bytes().into_owned()).unwrap_or_default();
                match serde_json::from_slice::<LeadRequest>(&body) {
                    Err(e) => reply_err(&q, format!("bad request: {e}")),
                    Ok(req) => {
                        let fault = wrench.get().and_then(|w| (w.at.elapsed() <= stale).then_some(w.msg.fault));
                        let before = core.mode();
                        guide_requests += 1;
                        let token = crate::deadman::token_from(
                            common::clock::mono_ns()
                                ^ (u64::from(std::process::id()) << 32)
                                ^ guide_requests.rotate_left(17),
                        );
                        let r = handle_lead(req, Lead {
                            core: &mut core,
                            deadman: &mut deadman,
                            token,
                            teach: &mut teach,
                            setup: &setup,
                            pose: last_pose.as_ref(),
                            wrench_fault: fault,
                            now_s: last_robot_s,
                        });
                        match r {
                            Ok(v) => reply_json(&q, v),
                            Err(e) => {
                                node.set_error(e.clone());
                                reply_err(&q, e);
                            }
                        }
                        report_end(&node, &core, before);
                    }
                }
            }
            Some(t) = moves.rx.recv() => {
                match core.request_move(t.msg) {
                    Ok(()) => tracing::info!("move → {:?}", t.msg.tcp_in_base.position_m),
                    Err(e) => node.set_error(e.to_string()),
                }
            }
            Some(t) = tasks.rx.recv() => {
                let task = t.msg;
                match task.robot {
                    TaskRobot::Arm => {
                        let fault = wrench.get().and_then(|w| {
                            (w.at.elapsed() <= stale).then_some(w.msg.fault)
                        });
                        let rot = hybrid::iso_of(&task.frame).rotation;
                        let name = task.name.clone();
                        let setup = match hcfg.arm_setup(&task, &rot) {
                            Ok(s) => s,
                            Err(e) => {
                                node.set_error(format!("hybrid task {name:?}: {e}"));
                                continue;
                            }
                        };
                        match core.request_hybrid(task, setup, fault) {
                            Ok(()) => tracing::info!("hybrid task {name:?} started"),
                            Err(e) => node.set_error(format!("hybrid task {name:?}: {e}")),
                        }
                    }
                    TaskRobot::Plant => {
                        let gains = task.gains.unwrap_or_else(hybrid::default_plant_gains);
                        let name = task.name.clone();
                        if let Some(level) = core.cell_stopped() {
                            node.set_error(format!(
                                "plant task {name:?}: refused, the cell is stopped ({level:?})"
                            ));
                            continue;
                        }
                        let limits = match hcfg.task_limits(&task) {
                            Ok(l) => l,
                            Err(e) => {
                                node.set_error(format!("plant task {name:?}: {e}"));
                                continue;
                            }
                        };
                        match PlantRun::new(task, gains, limits, hcfg.plant_max_effort) {
                            Ok(run) => {
                                tracing::info!("plant task {name:?} started");
                                plant = Some(run);
                            }
                            Err(e) => node.set_error(format!("plant task {name:?}: {e}")),
                        }
                    }
                }
            }
            Some(ps) = plant_states.changed() => {
                let Some(run) = plant.as_mut() else { continue };
                let st = ps.msg;
                if !run.due(st.t_s) {
                    continue;
                }
                let input = PlantInput { t_s: st.t_s, q: st.q, qd: st.qd, wrist_force_n: st.wrist_force_n };
                let name = run.task.name.clone();
                match run.step(&input) {
                    Ok((effort, report)) => {
                        let stamp = effort_pub.next_stamp();
                        effort_pub.put(&PlantEffortCommand { stamp, effort });
                        let stamp = state_pub.next_stamp();
                        state_pub.put(&hybrid_state(stamp, 0, &report));
                        let done = run.is_done();
                        plant_report = Some((name.clone(), report));
                        if done {
                            tracing::info!("plant task {name:?} done");
                            plant = None;
                        }
                    }
                    Err(why) => end_plant!(&why.to_string()),
                }
            }
            Some(s) = safety.rx.recv() => {
                let before = core.mode();
                let motion_before = core.motion_tag().map_or(0, |m| m.motion_id);
                core.on_safety(&s.msg);
                if let Some(level) = core.cell_stopped() {
                    // An e-stop or a protective stop stops every machine of the cell.
                    end_plant!(&format!("robot-io {level:?}"));
                }
                // The reason first (status' last_error), then the last state.
                report_end(&node, &core, before);
                if before == Mode::Playback && core.mode() != Mode::Playback {
                    // A hold ended the playback: its last state says so.
                    if let (Some((name, r)), Some(p)) = (core.play_report(), last_pose.as_ref()) {
                        let stamp = play_pub.next_stamp();
                        play_pub.put(&play_state(
                            stamp,
                            motion_before,
                            name,
                            r,
                            common::msg::PlaybackPhase::Aborted,
                            p.q_rad,
                        ));
                    }
                }
                if initial_hold {
                    initial_hold = false;
                    if let Err(e) = core.request_mode(Mode::Hold) {
                        node.set_error(format!("initial_mode hold: {e}"));
                    }
                }
            }
            Some(p) = next_of(&mut poses) => {
                pose_in = Some((p.msg, p.at_ns, p.msg.stamp.source_mono_ns));
            }
            Some(js) = next_of(&mut joints) => {
                // The direct chain: FK here, the robot-io stamp as the cycle's time.
                let stamp = common::msg::Stamp { seq: 0, source_mono_ns: clock::mono_ns() };
                match kinematics::node::tool_pose(&setup.arm, &js.msg, stamp) {
                    Some(tp) => {
                        direct_js = Some(js.msg);
                        pose_in = Some((tp, js.at_ns, js.msg.stamp.source_mono_ns));
                    }
                    None => node.set_error(format!("FK failed for joints {:?}", js.msg.q_rad)),
                }
            }
            _ = status_tick.tick() => {
                let w = wrench.get().map(|w| format!("{:?}", w.msg.fault));
                node.set_detail(serde_json::json!({
                    "mode": format!("{:?}", core.mode()),
                    "commands": published,
                    "motion": core.motion_tag().map(|m| serde_json::json!({
                        "motion_id": m.motion_id,
                        "robot_boot": format!("{:016x}", m.robot_boot),
                    })),
                    "stop_reason": core.stop_reason(),
                    // Coming to rest after an end (issue 19 item 10): null, or whether it
                    // unloads a surface.
                    "ending": core.ending().map(|unloads| serde_json::json!({ "unloads": unloads })),
                    "wrench_fault": w,
                    "hybrid": core.hybrid_task().map(|t| report_json(&t.name, core.hybrid_report())),
                    "plant_task": plant_report.as_ref().map(|(n, r)| report_json(n, Some(r))),
                    "guide": core.guide_report().map(|r| serde_json::json!({
                        "law": core.guide_law().map(|l| format!("{l:?}")),
                        "enabled": r.enabled,
                        "speed_m_s": nalgebra::Vector3::from(r.twist.linear_m_s).norm(),
                        "damping_scale": r.damping_scale,
                        "steps": r.steps,
                    })),
                    "enables_received": enable_count,
                    "deadman": {
                        "bound": deadman.bound(),
                        "enables_accepted": deadman.counts().accepted,
                        "enables_ignored": deadman.counts().ignored,
                        "releases": deadman.counts().released,
                    },
                    "chain": format!("{:?}", cfg.chain).to_lowercase(),
                    "direct": direct.as_ref().map(|d| serde_json::json!({
                        "joint_commands": d.counts.0, "unreachable": d.counts.1, "limited": d.counts.2,
                    })),
                    // Tool pose in → reference out; F/T sample at the sensor service →
                    // reference out (hybrid and lead-through: the force loop's delay up to
                    // the reference on the wire).
                    "latency": {
                        "step_us": step_lat.summary(),
                        "step_hist": step_lat.to_sparse(),
                        "force_loop_us": force_loop.summary(),
                        "force_loop_hist": force_loop.to_sparse(),
                    },
                    "teach_waypoints": teach.len(),
                    "playback": core.play_report().map(|(n, r)| serde_json::json!({
                        "program": n, "state": format!("{:?}", r.state), "progress": r.progress,
                    })),
                }));
            }
        }
        if let Some((pose, arrived_ns, time_ns)) = pose_in.take() {
            let now_s = robot_clock.time(pose.cycle, time_ns as f64 * 1e-9);
            let before = core.mode();
            let motion_before = core.motion_tag().map_or(0, |m| m.motion_id);
            last_robot_s = now_s;
            last_pose = Some(pose);
            let newest_wrench = wrench.get();
            let (w, peak) = wrench_input(newest_wrench);
            core.set_wrench_peak(peak);
            if core.mode() != Mode::LeadThrough && !core.guide_queued() && deadman.bound() {
                deadman.unbind();
            }
            let held = deadman.held(started.elapsed().as_secs_f64(), cfg.guide.deadman_timeout_s);
            core.set_deadman(held);
            let tcp = from_msg_pose(&pose.tcp_in_base);
            // The robot's own period (its clock's step per cycle) when it gives one; else the
            // estimate from receive times.
            let period_s = Some(pose.period_s)
                .filter(|p| p.is_finite() && *p > 0.0)
                .or(robot_clock.period_s());
            if let Some(p) = period_s {
                core.set_cycle(pose.cycle, p);
            }
            let target = core.step_with_wrench(&tcp, now_s, &w);
            // The reference first: the state reports below are for recorders.
            if let (Some(target), Some(motion)) = (target, core.motion_tag()) {
                match (direct.as_mut(), direct_js) {
                    (Some(d), Some(js)) => {
                        if let Some(why) = d.other_commander(motion.motion_id, clock::mono_ns()) {
                            node.set_error(why.clone());
                            tracing::warn!("{why}: control goes idle");
                            core.stop_now(why);
                        } else if !d.command(&js, &target, motion, period_s) {
                            node.set_error("servo produced a non-finite reference: not sent");
                        }
                    }
                    _ => {
                        let cmd = CartesianCommand {
                            stamp: cmd_pub.next_stamp(),
                            cycle: pose.cycle,
                            motion,
                            target,
                        };
                        cmd_pub.put(&cmd);
                    }
                }
                published += 1;
                let now_ns = clock::mono_ns();
                step_lat.record(now_ns.saturating_sub(arrived_ns));
                if matches!(core.mode(), Mode::Hybrid | Mode::LeadThrough) {
                    if let Some(w) = newest_wrench.filter(|w| w.msg.sample_mono_ns > 0) {
                        force_loop.record(now_ns.saturating_sub(w.msg.sample_mono_ns));
                    }
                }
            }
            let motion_id = core.motion_tag().map_or(0, |m| m.motion_id);
            if before == Mode::LeadThrough && core.mode() == Mode::LeadThrough {
                if let Some(d) = cfg.guide.dwell_record_s {
                    let rule = DwellRule {
                        dwell_s: d,
                        speed_m_s: cfg.guide.dwell_speed_m_s,
                        min_distance_m: cfg.guide.dwell_min_distance_m,
                    };
                    let speed = nalgebra::Vector3::from(pose.tcp_twist_base.linear_m_s).norm();
                    if let Some(i) = teach.observe_dwell(&rule, pose.q_rad, tcp, speed, now_s) {
                        tracing::info!("waypoint {} recorded on dwell", i + 1);
                    }
                }
                if let Some(r) = core.guide_report() {
                    let stamp = guide_pub.next_stamp();
                    guide_pub.put(&common::msg::GuideState {
                        stamp,
                        motion_id,
                        law: core.guide_law().unwrap_or_default(),
                        t_s: r.t_s,
                        enabled: r.enabled,
                        force_n: r.force_n,
                        torque_nm: r.torque_nm,
                        twist: r.twist,
                        tcp_cmd_m: r.tcp_cmd_m,
                        damping_scale: r.damping_scale,
                        speed_limited: r.speed_limited,
                        wall_limited: r.wall_limited,
                        steps: r.steps,
                        waypoints: teach.len() as u32,
                    });
                }
            }
            if before == Mode::Playback {
                if let Some((name, r)) = core.play_report() {
                    let phase = if core.mode() == Mode::Playback {
                        playback_phase(r.state, r.approach)
                    } else {
                        common::msg::PlaybackPhase::Aborted
                    };
                    let stamp = play_pub.next_stamp();
                    play_pub.put(&play_state(
                        stamp,
                        motion_before,
                        name,
                        r,
                        phase,
                        pose.q_rad,
                    ));
                }
            }
            if before == Mode::Hybrid {
                if let Some(r) = core.hybrid_report() {
                    // The motion this cycle ran (an ending task's last state, `Aborted`, carries
                    // its motion id: the task has already ended, so `motion_tag()` is none).
                    let stamp = state_pub.next_stamp();
                    state_pub.put(&hybrid_state(stamp, motion_before, r));
                }
            }
            report_end(&node, &core, before);
        }
        // A motion that went idle (a fault, a limit, an operator stop) is ended at robot-io
        // explicitly: it holds on its next cycle rather than when the stream goes stale.
        if core.take_protective_request() {
            let stamp = protective_pub.next_stamp();
            protective_pub.put(&common::msg::EStop {
                stamp,
                action: common::msg::EStopAction::Protective,
            });
        }
        if let Some((motion, stop)) = core.take_ended_motion() {
            let stamp = end_pub.next_stamp();
            end_pub.put(&common::msg::MotionEnd {
                stamp,
                motion,
                stop,
            });
        }
        // A mode change shows in the status at once, not up to a status period later (a
        // client that saw a task's `Aborted` state and asks for the status reads `Idle`).
        // Likewise a stop reason or an ending that began (the mode stays while it comes to
        // rest; a client that saw `Aborted` reads the reason at once).
        if core.mode() != mode_at_start
            || core.stop_changes() != stops_at_start
            || core.ending().is_some() != ending_at_start
        {
            status_tick.reset_immediately();
        }
    }
    drop(_presence);
    node.close().await;
    Ok(())
}

/// The service's process entry: config (every problem listed, exit 2), tracing, runtime, bus,
/// then [`run`]. Both `cell-control` and the multi-call `cell service control` (what `cell up` starts)
/// call it, so the two cannot differ.
pub fn service_main(
    cfg: common::service::ConfigArgs,
    bus: common::bus::BusArgs,
) -> std::process::ExitCode {
    common::service::run_service_rt(
        "control",
        bus,
        cfg,
        |l| {
            let c = l.section::<crate::node::ControlConfig>("control");
            let rt = c.rt.clone();
            let a: kinematics::config::ArmSection = l.section("arm");
            let arm = a.build().unwrap_or_else(|_| kinematics::Arm::irb120());
            let arm_model = serde_json::to_value(a.model)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "custom".into());
            let k: kinematics::node::KinematicsConfig = l.section("kinematics");
            (
                crate::node::ControlSetup {
                    cfg: c,
                    arm,
                    servo: k.servo_params(),
                    arm_model,
                },
                rt,
            )
        },
        crate::node::run,
    )
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
