//! Every wire type of the cell, and only here.
//!
//! Rules (see ARCHITECTURE.md):
//! - units are in field names (`q_rad`, `force_n`, `position_m`); SI units throughout;
//! - spatial data names its frame, either in the field name (`tcp_in_base`) or with a [`Frame`];
//! - every message starts with a [`Stamp`] (per-publisher sequence number + the publisher's
//!   monotonic clock), so drops and latency can be measured per hop;
//! - postcard is positional: **field order is protocol**. Append new fields only with a
//!   [`crate::codec::WIRE_VERSION`] bump; the golden-bytes tests in `codec` freeze every encoding.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Number of robot axes the cell handles.
pub const AXES: usize = 6;

/// Per-message provenance: which sample of a publisher this is, and when it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub struct Stamp {
    /// Per-publisher sequence number, +1 per message; gaps mean drops.
    pub seq: u64,
    /// The publisher's monotonic clock (CLOCK_MONOTONIC on Linux; comparable between processes
    /// on one host, not across hosts) at the time the message content was produced, in ns.
    pub source_mono_ns: u64,
}

/// Named coordinate frames. Poses are "child in parent"; wrenches are expressed at the frame's
/// origin, in its axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum Frame {
    /// Robot base frame (ABB: base frame, z up through axis 1).
    #[default]
    Base,
    /// Robot flange frame `tool0`.
    Tool0,
    /// Tool centre point frame (`tool0` · tool transform).
    Tool,
    /// The F/T sensor's measurement frame.
    Sensor,
    /// The task's constraint frame (hybrid control).
    Constraint,
}

/// A rigid transform: position in metres and unit quaternion (w, x, y, z).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Pose {
    pub position_m: [f64; 3],
    pub quat_wxyz: [f64; 4],
}

impl Default for Pose {
    fn default() -> Self {
        Self::IDENTITY
    }
}

impl Pose {
    /// From a nalgebra rigid transform.
    pub fn from_isometry(p: &nalgebra::Isometry3<f64>) -> Pose {
        let t = p.translation.vector;
        let q = p.rotation.quaternion();
        Pose {
            position_m: [t.x, t.y, t.z],
            quat_wxyz: [q.w, q.i, q.j, q.k],
        }
    }

    /// As a nalgebra rigid transform (the quaternion renormalised; the bus has already checked
    /// it is finite and unit).
    pub fn to_isometry(&self) -> nalgebra::Isometry3<f64> {
        let [w, x, y, z] = self.quat_wxyz;
        nalgebra::Isometry3::from_parts(
            nalgebra::Translation3::new(self.position_m[0], self.position_m[1], self.position_m[2]),
            nalgebra::UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(w, x, y, z)),
        )
    }

    pub const IDENTITY: Pose = Pose {
        position_m: [0.0; 3],
        quat_wxyz: [1.0, 0.0, 0.0, 0.0],
    };

    /// True when every number is finite and the quaternion has unit norm (±1e-6).
    pub fn is_valid(&self) -> bool {
        let finite = self
            .position_m
            .iter()
            .chain(self.quat_wxyz.iter())
            .all(|v| v.is_finite());
        let n2: f64 = self.quat_wxyz.iter().map(|v| v * v).sum();
        finite && (n2 - 1.0).abs() < 2e-6
    }
}

/// Linear and angular velocity of a frame, both expressed in the named frame's axes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct Twist {
    pub linear_m_s: [f64; 3],
    pub angular_rad_s: [f64; 3],
}

/// Force and torque, at a frame's origin, in its axes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct Wrench {
    pub force_n: [f64; 3],
    pub torque_nm: [f64; 3],
}

impl Wrench {
    pub fn is_finite(&self) -> bool {
        self.force_n
            .iter()
            .chain(self.torque_nm.iter())
            .all(|v| v.is_finite())
    }
}

/// Controller states reported by the robot (EGM: motors, MCI, RAPID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub struct RobotStatus {
    pub motors_on: bool,
    /// The robot accepts external references (EGM: MCI running / EGM state "running").
    pub external_control_active: bool,
    pub program_running: bool,
}

/// Measured joint state, published by robot-io once per robot cycle. The cell's clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct JointState {
    pub stamp: Stamp,
    /// Robot cycle counter (robot-io's own, +1 per robot message).
    pub cycle: u64,
    pub q_rad: [f64; AXES],
    pub qd_rad_s: [f64; AXES],
    pub robot: RobotStatus,
    /// Robot time since the previous joint state (s) on the robot's own clock: the step of
    /// its timestamp (EGM `header.tm`; 8 ms after a lost 4 ms datagram), else robot-io's
    /// nominal cycle (`robot_io.cycle_ms`). Laws advance their references by this per
    /// cycle, so a plan keeps to robot time across lost datagrams; the receive times carry
    /// the host's jitter (and, on the simulator under load, wall time that the simulated
    /// robot does not live in).
    pub period_s: f64,
}

/// Flags a kinematics answer carries instead of silently bad output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub struct KinFlags {
    /// The requested pose has no valid IK solution; the command holds the last reachable joints.
    pub unreachable: bool,
    /// Near a singularity: motion was computed by damped least squares.
    pub near_singular: bool,
    /// A joint position limit clamped the command.
    pub position_limited: bool,
    /// Joint speed limits scaled the step (direction preserved).
    pub speed_limited: bool,
}

impl KinFlags {
    pub fn any(&self) -> bool {
        self.unreachable || self.near_singular || self.position_limited || self.speed_limited
    }
}

/// Which motion a command belongs to, and which robot-io instance it was started against.
///
/// Control gives every operator-started motion a new `motion_id` (never 0) and records the
/// `robot_boot` id robot-io published in its [`SafetyState`] when the motion started;
/// kinematics copies the tag from each [`CartesianCommand`] into its [`JointCommand`].
/// robot-io refuses a command whose `robot_boot` is not its own (a motion computed for an
/// instance that crashed never moves the restarted one) and a command of a motion that an
/// outage ended (see `SafetyReason::MotionEnded`). Nothing moves again after an outage until
/// an operator command starts a new motion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub struct MotionTag {
    /// robot-io's boot id (random per process start, never 0).
    pub robot_boot: u64,
    /// Per-motion id chosen by the commanding service (never 0 for a real motion).
    pub motion_id: u64,
}

/// Joint-space reference for the robot, published by kinematics for robot-io.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct JointCommand {
    pub stamp: Stamp,
    /// The robot cycle (JointState::cycle) this command was computed from.
    pub cycle: u64,
    /// The motion this command belongs to (copied from the Cartesian command).
    pub motion: MotionTag,
    pub q_rad: [f64; AXES],
    /// Feed-forward joint velocity (EGM speedRef), may be zero.
    pub qd_rad_s: [f64; AXES],
    pub flags: KinFlags,
}

/// Tool pose and velocity kinematics for one joint state, published by kinematics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct ToolPose {
    pub stamp: Stamp,
    /// The robot cycle this pose was computed from.
    pub cycle: u64,
    pub q_rad: [f64; AXES],
    pub tool0_in_base: Pose,
    pub tcp_in_base: Pose,
    /// TCP twist, base axes.
    pub tcp_twist_base: Twist,
    /// Geometric Jacobian of the TCP in base axes, row-major; rows (vx, vy, vz, wx, wy, wz).
    pub jacobian_base: [[f64; AXES]; 6],
    /// Yoshikawa manipulability sqrt(det(J Jᵀ)).
    pub manipulability: f64,
    /// The robot's cycle period (s), copied from [`JointState::period_s`].
    pub period_s: f64,
}

/// What a Cartesian command asks the kinematics service to do.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub enum CartesianTarget {
    /// Go to this TCP pose (base frame) this cycle.
    #[default]
    Hold,
    Pose(Pose),
    /// Move the TCP with this twist (base axes) for one robot cycle (kinematics integrates it
    /// over its own robot-cycle estimate, never over a sender's time step).
    Twist {
        twist: Twist,
    },
    /// Go to these joints (rad) this cycle: joint-space playback. kinematics passes them
    /// through its lead bound and the joint limits (no IK, so no branch choice).
    Joints {
        q_rad: [f64; AXES],
    },
}

/// Cartesian reference from control, turned into a [`JointCommand`] by kinematics.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct CartesianCommand {
    pub stamp: Stamp,
    /// The robot cycle this command was computed from.
    pub cycle: u64,
    /// The motion this command belongs to (see [`MotionTag`]).
    pub motion: MotionTag,
    pub target: CartesianTarget,
}

/// Raw wrench sample from the F/T sensor, sensor frame, device units converted to SI.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct WrenchSample {
    pub stamp: Stamp,
    /// The device's own sample counter (RDT sequence / SRI packet number).
    pub device_seq: u32,
    /// Device status word (0 = healthy), device-specific.
    pub device_status: u32,
    pub wrench_sensor: Wrench,
}

/// Why a wrench estimate must not be used for force control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum WrenchFault {
    #[default]
    None,
    NotTared,
    Stale,
    NonFinite,
    Saturated,
    Spike,
    DeviceError,
    NoPose,
}

/// Processed wrench from force processing, in every frame control needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct WrenchEstimate {
    pub stamp: Stamp,
    /// Stamp.seq of the raw sample this estimate was computed from.
    pub sample_seq: u64,
    /// That raw sample's stamp (`source_mono_ns`: when the sensor service received it from
    /// the device): the start of the force loop's delay (wire v6).
    pub sample_mono_ns: u64,
    /// `None` = usable; anything else = force modes must not use it.
    pub fault: WrenchFault,
    /// Contact wrench (bias and tool weight removed, filtered) at the sensor origin.
    pub sensor: Wrench,
    /// The same at the TCP, tool axes.
    pub tool: Wrench,
    /// The same at the TCP, base axes. (A task's constraint frame is control's: control
    /// transforms this into {C}.)
    pub base: Wrench,
    /// Force limits are checked on these, not on the filtered wrenches above (a 12 Hz filter
    /// sees an impact after it is over): the largest magnitude of the *unfiltered* compensated
    /// contact force (N) and torque at the TCP (N·m) over the samples of the last
    /// [`PEAK_WINDOW_S`], each sample confirmed by the one before it (the smaller of the two,
    /// so a single-sample spike does not count). Whichever estimate a subscriber reads, every
    /// sample since its previous read is in it (wire v8). Zero when none is known.
    pub peak_force_n: f64,
    pub peak_torque_nm: f64,
    /// The fast band of the oscillation watch (issue 41; wire v16): a force oscillating faster
    /// than the 12 Hz estimate shows, measured on what the filter removes — the smallest
    /// peak-to-peak amplitude (N) of the last swings of the unfiltered force when they all fall
    /// within a short window (the force service's `[force.fast_swing]`: 6 within 0.25 s), the
    /// largest over the axes; 0 when there is none. Control ends a task whose pressing force
    /// swings by its oscillation band.
    pub fast_swing_n: f64,
}

/// The window of [`WrenchEstimate::peak_force_n`] (s): longer than two robot cycles of the
/// slowest supported robot (EGM at 250 Hz), so a reader once per cycle misses no sample.
pub const PEAK_WINDOW_S: f64 = 0.012;

/// Control modes. Restart always comes up in `Idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum Mode {
    /// Publishes nothing: robot-io holds.
    #[default]
    Idle,
    /// Holds the current TCP pose actively.
    Hold,
    /// Hand-guided lead-through (force-free tracking).
    LeadThrough,
    /// Hybrid position/force task (see [`HybridTask`]).
    Hybrid,
    /// Plays back a taught program.
    Playback,
    /// Straight-line Cartesian move to a [`MoveTarget`], then hold there.
    Move,
}

/// Operator/programme request to change mode.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct ModeCommand {
    pub stamp: Stamp,
    pub mode: Mode,
}

/// A reference over task time `t` (s since the task started). Force axes: N or N·m applied
/// by the tool on the environment; position axes: displacement (m or rad) along the
/// constraint frame's axis from where the task started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub enum Profile {
    /// The same value throughout.
    Constant(f64),
    /// `before` until `at_s`, `after` from then on.
    Step { before: f64, after: f64, at_s: f64 },
    /// `from` until `start_s`, linear to `to` over `duration_s`, then `to`.
    Ramp {
        from: f64,
        to: f64,
        start_s: f64,
        duration_s: f64,
    },
    /// `offset + amplitude·sin(2π·freq_hz·t + phase_rad)`.
    Sine {
        offset: f64,
        amplitude: f64,
        freq_hz: f64,
        phase_rad: f64,
    },
    /// Piecewise linear through `(t_s, value)` points (strictly increasing times), held
    /// before the first and after the last.
    Series(Vec<[f64; 2]>),
}

impl Default for Profile {
    fn default() -> Self {
        Profile::Constant(0.0)
    }
}

/// Longest `Profile::Series` a task may carry.
pub const MAX_SERIES_POINTS: usize = 4096;

/// What a hybrid task drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum TaskRobot {
    /// The arm, position-controlled (EGM): the law's output is a TCP velocity in {C},
    /// integrated into the Cartesian command that kinematics turns into joints.
    #[default]
    Arm,
    /// The simulator's Raibert–Craig 2-DOF plant, torque-controlled: `τ = Jᵀ·f` on
    /// `sim/plant/effort_cmd`. Axes x, y of {C} are in the plant's plane.
    Plant,
}

/// Where the constraint frame {C} lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum FrameKind {
    /// Fixed in base: `HybridTask::frame` is {C} in base.
    #[default]
    Base,
    /// Attached to the tool: `frame` is {C} in the TCP frame; it moves with the TCP.
    Tool,
    /// Starts as `frame` in base; its z axis then follows the measured contact normal
    /// (friction along the motion removed), for contour following.
    Tracking,
}

/// Per-axis gains of the hybrid law (axes x, y, z, rx, ry, rz of {C}).
///
/// Arm: position gains map metres (rad) of error to m/s (rad/s) of TCP velocity
/// (`kp` in 1/s, `ki` in 1/s², `kd` dimensionless); force gains map newtons to m/s
/// (`kp_f` in m/(N·s), `ki_f` in m/(N·s²)). Plant: position gains map m to N, force gains are
/// dimensionless (N per N). `limit_n` is the paper's saturation-type limiter: the force error
/// entering the integral is clamped to ±`limit_n` (N, N·m), so large errors integrate at a
/// bounded rate (a lower effective integral gain) while small ones integrate fully.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct HybridGains {
    pub kp: [f64; 6],
    pub ki: [f64; 6],
    pub kd: [f64; 6],
    pub kp_f: [f64; 6],
    pub ki_f: [f64; 6],
    /// Active damping on force axes (velocity feedback; plant: N·s/m). The paper used none
    /// ("damping is mechanical"); 0 = off.
    pub kd_f: [f64; 6],
    pub limit_n: [f64; 6],
    /// Force feedforward weight (0 = off, 1 = full).
    pub feedforward: f64,
    /// Coulomb-friction feedforward on force axes (plant: N): adds
    /// `friction_n·tanh(e_f / 0.25 N)`, so the drive breaks the static friction at once
    /// instead of waiting for the integral (0 = off; arm: unused).
    pub friction_n: [f64; 6],
}

/// Limits of a hybrid task (UR `force_mode` is the anchor).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct HybridLimits {
    /// Speed limit along each translational force axis (m/s): also the approach speed while
    /// there is no contact.
    pub force_axis_speed_m_s: f64,
    /// Speed limit about each rotational force axis (rad/s).
    pub force_axis_speed_rad_s: f64,
    /// Largest allowed deviation from the reference on each translational position axis (m);
    /// beyond → hold, reason.
    pub deviation_m: f64,
    /// The same for rotational position axes (rad).
    pub deviation_rad: f64,
    /// Largest allowed contact force magnitude (N); beyond → hold, reason.
    pub max_force_n: f64,
    /// Largest allowed contact torque magnitude (N·m); beyond → hold, reason.
    pub max_torque_nm: f64,
    /// Contact is made when the *measured* force (the F/T estimate in {C}) along the force
    /// axes reaches this (N): a threshold on the sensor, not simulator ground truth.
    pub contact_threshold_n: f64,
    /// Contact is lost when, after contact, the force stays below `contact_threshold_n / 2` this
    /// long (s): reported; the axis approaches again at its speed limit.
    pub contact_loss_s: f64,
    /// A `from_contact` task that finds no contact within this time (s) ends (hold, reason).
    pub approach_timeout_s: f64,
    /// Longest travel (m) along the translational force axes before the first contact: past
    /// it the task ends (hold, reason), whatever its kind or duration.
    #[serde(default = "default_approach_travel_m")]
    pub approach_travel_m: f64,
    /// Longest travel (m) along the translational force axes after a contact is lost (off a
    /// table's edge, into a hole) before the surface is found again: past it the task ends.
    #[serde(default = "default_reapproach_travel_m")]
    pub reapproach_travel_m: f64,
    /// Largest net travel (m) along each translational force axis of {C} from the first
    /// contact on (signed: the tool's motion along the axis, summed; sliding along a surface or
    /// round a contour adds nothing): a surface that yields or moves away, or one axis sliding
    /// off its edge while another still touches, ends the task there.
    #[serde(default = "default_contact_travel_m")]
    pub contact_travel_m: f64,
}

fn default_approach_travel_m() -> f64 {
    0.05
}

fn default_reapproach_travel_m() -> f64 {
    0.005
}

fn default_contact_travel_m() -> f64 {
    0.02
}

/// Raibert–Craig task in a constraint frame {C}. Starting one switches control to `Hybrid`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct HybridTask {
    pub stamp: Stamp,
    /// Name for reports (≤ 64 bytes).
    pub name: String,
    pub robot: TaskRobot,
    pub frame_kind: FrameKind,
    /// {C}: in base (`Base`, initial `Tracking`) or in the TCP frame (`Tool`). Plant: a pose
    /// in the plant plane (z rotation only).
    pub frame: Pose,
    /// Selection vector S over (x, y, z, rx, ry, rz) of {C}: true = force-controlled.
    pub force_axes: [bool; 6],
    /// The reference of every axis: force (N, N·m) on S axes, displacement (m, rad) on the
    /// others.
    pub reference: [Profile; 6],
    /// Task length (s); then control holds where the task ended (`Hold`).
    pub duration_s: f64,
    /// Reference time (and the duration) counts from the first contact instead of the task's
    /// start: until contact the force axes approach at their speed limit with the references
    /// at t = 0 and the position axes hold.
    pub from_contact: bool,
    /// Law rate (Hz): 0 = every robot cycle (arm); the plant law runs at this rate on the
    /// plant's time (the paper: 60, 80, 120).
    pub rate_hz: f64,
    /// `None`: gains derived from the identified contact stiffness (control's config).
    pub gains: Option<HybridGains>,
    /// Limits the task tightens, field by field; every field left `None` is the cell's
    /// configured `[control.hybrid.limits]`, which are ceilings: a task asking for more than
    /// one of them is refused before anything moves.
    pub limits: LimitRequest,
    /// The force gains stay as given (or derived from the configured stiffness) for the whole
    /// task, even where control's `[control.hybrid] adapt_gains` lets them follow an on-line
    /// stiffness estimate (arm tasks; plant tasks never adapt).
    pub fixed_gains: bool,
}

/// A task's own limits, each `None` (the cell's) or a value at most the cell's
/// (`[control.hybrid.limits]`, the ceiling). Every field bounds the task the more, the smaller
/// it is: speeds, deviations, force and torque, the contact threshold (a larger one approaches
/// at speed into more force), the time that declares a contact lost and the approach time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct LimitRequest {
    pub force_axis_speed_m_s: Option<f64>,
    pub force_axis_speed_rad_s: Option<f64>,
    pub deviation_m: Option<f64>,
    pub deviation_rad: Option<f64>,
    pub max_force_n: Option<f64>,
    pub max_torque_nm: Option<f64>,
    pub contact_threshold_n: Option<f64>,
    pub contact_loss_s: Option<f64>,
    pub approach_timeout_s: Option<f64>,
    pub approach_travel_m: Option<f64>,
    pub reapproach_travel_m: Option<f64>,
    pub contact_travel_m: Option<f64>,
}

impl LimitRequest {
    /// The fields by name, in [`HybridLimits::fields_mut`]'s order.
    pub fn fields(&self) -> [(&'static str, Option<f64>); 12] {
        [
            ("force_axis_speed_m_s", self.force_axis_speed_m_s),
            ("force_axis_speed_rad_s", self.force_axis_speed_rad_s),
            ("deviation_m", self.deviation_m),
            ("deviation_rad", self.deviation_rad),
            ("max_force_n", self.max_force_n),
            ("max_torque_nm", self.max_torque_nm),
            ("contact_threshold_n", self.contact_threshold_n),
            ("contact_loss_s", self.contact_loss_s),
            ("approach_timeout_s", self.approach_timeout_s),
            ("approach_travel_m", self.approach_travel_m),
            ("reapproach_travel_m", self.reapproach_travel_m),
            ("contact_travel_m", self.contact_travel_m),
        ]
    }

    /// Every field given.
    pub fn all(l: &HybridLimits) -> Self {
        Self {
            force_axis_speed_m_s: Some(l.force_axis_speed_m_s),
            force_axis_speed_rad_s: Some(l.force_axis_speed_rad_s),
            deviation_m: Some(l.deviation_m),
            deviation_rad: Some(l.deviation_rad),
            max_force_n: Some(l.max_force_n),
            max_torque_nm: Some(l.max_torque_nm),
            contact_threshold_n: Some(l.contact_threshold_n),
            contact_loss_s: Some(l.contact_loss_s),
            approach_timeout_s: Some(l.approach_timeout_s),
            approach_travel_m: Some(l.approach_travel_m),
            reapproach_travel_m: Some(l.reapproach_travel_m),
            contact_travel_m: Some(l.contact_travel_m),
        }
    }

    /// The limits a task runs with under the cell's `ceiling`: each requested field that is at
    /// most its ceiling replaces it; every field above its ceiling (or not finite and > 0) is
    /// listed, named with its value and the ceiling, and the task is refused.
    pub fn within(&self, ceiling: &HybridLimits) -> Result<HybridLimits, Vec<String>> {
        let mut out = *ceiling;
        let mut problems = Vec::new();
        for ((name, req), (_, slot)) in self.fields().into_iter().zip(out.fields_mut()) {
            let Some(v) = req else { continue };
            if !(v.is_finite() && v > 0.0) {
                problems.push(format!("limits.{name} = {v} must be finite and > 0"));
            } else if v > *slot {
                problems.push(format!(
                    "limits.{name} = {v} exceeds the cell's ceiling {slot} (a task may only \
                     tighten it)"
                ));
            } else {
                *slot = v;
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }
}

impl HybridLimits {
    /// The fields by name, mutable, in [`LimitRequest::fields`]'s order.
    pub fn fields_mut(&mut self) -> [(&'static str, &mut f64); 12] {
        [
            ("force_axis_speed_m_s", &mut self.force_axis_speed_m_s),
            ("force_axis_speed_rad_s", &mut self.force_axis_speed_rad_s),
            ("deviation_m", &mut self.deviation_m),
            ("deviation_rad", &mut self.deviation_rad),
            ("max_force_n", &mut self.max_force_n),
            ("max_torque_nm", &mut self.max_torque_nm),
            ("contact_threshold_n", &mut self.contact_threshold_n),
            ("contact_loss_s", &mut self.contact_loss_s),
            ("approach_timeout_s", &mut self.approach_timeout_s),
            ("approach_travel_m", &mut self.approach_travel_m),
            ("reapproach_travel_m", &mut self.reapproach_travel_m),
            ("contact_travel_m", &mut self.contact_travel_m),
        ]
    }
}

/// Phase of a running hybrid task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum HybridPhase {
    /// Force axes approach at their speed limit: no contact yet.
    #[default]
    Approach,
    /// In contact: the force law runs.
    Contact,
    /// Contact was lost after being made: approaching again.
    ContactLost,
    /// The task ran its duration: holding.
    Done,
    /// A limit or a fault ended the task: control is idle, robot-io holds.
    Aborted,
}

/// One step of the hybrid law, for progress and experiments (`control/hybrid_state`).
/// All axis values in {C}: force applied by the tool (N, N·m), position as displacement from
/// the start (m, rad).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct HybridState {
    pub stamp: Stamp,
    /// The task's motion (0 for plant tasks).
    pub motion_id: u64,
    /// Task time (s).
    pub t_s: f64,
    /// The law's clock at this step (s): plant time for plant tasks (the same clock as
    /// `PlantState::t_s`), the tool pose's source time for arm tasks.
    pub clock_s: f64,
    pub phase: HybridPhase,
    pub force_ref: [f64; 6],
    pub force: [f64; 6],
    pub position_ref: [f64; 6],
    pub position: [f64; 6],
    /// The law's output in {C} (m/s, rad/s for the arm; N, N·m for the plant).
    pub output: [f64; 6],
    /// Bit k set: the force integral of axis k is at its limiter.
    pub limited: u8,
    /// The wrench of this step is the last usable estimate bridged over a gap in the samples:
    /// the force axes did not advance and the force integral stood still.
    pub bridged: bool,
    /// Seating (arm tasks): the force axes have not yet reached the setpoint since the
    /// approach or a bounce, so they move into the surface no faster than the approach.
    pub seating: bool,
    /// {C} in base (plant: in the plant plane).
    pub frame_in_base: Pose,
    /// Per translational axis of {C}: the contact stiffness the force gains are made for at
    /// this step (N/m; 0 on a position axis and for plant tasks) — the configured or identified
    /// value, or the on-line estimate once it is usable (`[control.hybrid] adapt_gains`).
    pub gains_for_n_per_m: [f64; 3],
    /// Per translational axis of {C}: the on-line contact stiffness estimate (N/m; 0 = none).
    pub stiffness_estimate_n_per_m: [f64; 3],
    /// The task's reference clock (s): where along its profiles the task is — task time
    /// (from contact for a task that starts there) less what speed adaptation has held it
    /// back (`[control.hybrid] slowdown_error_n`). Wire v13.
    pub ref_time_s: f64,
    /// The reference clock's rate now (1: as planned; speed adaptation slows it in contact).
    pub speed_scale: f64,
}

/// Straight-line TCP move (mode `Move`): position interpolated linearly, orientation by slerp,
/// both speed-limited. Sending one switches control to `Move`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct MoveTarget {
    pub stamp: Stamp,
    pub tcp_in_base: Pose,
    pub max_speed_m_s: f64,
    pub max_rot_speed_rad_s: f64,
}

/// Robot-io's safety supervisor state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum SafetyLevel {
    /// Commands are being executed.
    Active,
    /// Holding the last measured position (no fresh command, or startup/shutdown).
    #[default]
    Hold,
    /// Protective stop: holding, and commands are refused until a reset.
    ProtectiveStop,
    /// Emergency stop latched: holding until reset.
    EmergencyStop,
}

/// Why robot-io is not (or is) executing commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum SafetyReason {
    None,
    #[default]
    NoCommandYet,
    CommandStale,
    CommandInvalid,
    JointLimit,
    SpeedLimit,
    EStop,
    RobotNotReady,
    ShuttingDown,
    /// The robot stopped sending (EGM: no `EgmRobot` within `robot_io.egm.silence_timeout_ms`):
    /// nothing can be commanded; the controller holds by itself.
    RobotSilent,
    /// A command of a motion that an outage (robot not ready, silent, command stale, stop)
    /// ended: refused until a new motion starts.
    MotionEnded,
    /// A command started against another robot-io instance (before a restart): refused.
    OtherRobotBoot,
    /// Protective stop: a joint was measured outside its configured limits.
    MeasuredOutOfLimits,
    /// Protective stop raised by a commander (`EStopAction::Protective`: guiding met its
    /// force ceiling or a collision).
    ProtectiveRequest,
}

/// Published by robot-io on every change and periodically.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct SafetyState {
    pub stamp: Stamp,
    pub level: SafetyLevel,
    pub reason: SafetyReason,
    /// Robot cycle at which this state was entered.
    pub since_cycle: u64,
    /// Commands rejected since start (limits, NaN, stale).
    pub rejected_commands: u64,
    /// robot-io's boot id (random per process start, never 0): commands must carry it.
    pub robot_boot: u64,
    /// The motion being executed (0 = none).
    pub motion_id: u64,
}

/// A stop request on `robot/estop`: any identity of the cell may send one (the access-control
/// roles table never blocks it). It latches until an [`EStopReset`] on `robot/reset`, a key
/// of its own so that a rule can say "anyone may stop, only the control host may reset".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum EStopAction {
    /// The software e-stop: robot-io latches `EmergencyStop`.
    #[default]
    Engage,
    /// A commander's protective stop (control: guiding met its force ceiling or the collision
    /// signature): robot-io latches `ProtectiveStop` (`ProtectiveRequest`) like one it raises
    /// itself; a reset of either scope (`cell reset`, `cell reset --protective`) clears it.
    Protective,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub struct EStop {
    pub stamp: Stamp,
    pub action: EStopAction,
}

/// What a reset clears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum ResetScope {
    /// The e-stop latch and a protective stop (`cell reset`).
    #[default]
    All,
    /// A protective stop only, never an e-stop (`cell reset --protective`).
    ProtectiveOnly,
}

/// A reset request on `robot/reset` (the control host's, or an operator's where the cell's
/// security profile allows it). robot-io applies stops and resets in their order of arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub struct EStopReset {
    pub stamp: Stamp,
    pub scope: ResetScope,
}

/// What a protective stop protects against: the limit or the signal that raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum ProtectiveCause {
    /// A contact force over its limit (a task's, a guide session's ceiling).
    #[default]
    ForceLimit,
    /// A contact torque over its limit.
    TorqueLimit,
    /// A position axis pushed past its deviation bound.
    Deviation,
    /// A non-finite measurement or reference.
    NonFinite,
    /// An impact: a jump of the force between two samples the force service flags `Spike`.
    Impact,
    /// The sensor saturated: the force it cannot measure may be anything.
    Saturated,
    /// Guiding's collision signature (force without the motion the hand asks for).
    Collision,
}

/// How a motion ends (wire v14). A controlled end brakes from the last reference within
/// the acceleration limits (the arm was where it was asked to be); a protective end holds at
/// once where the arm is measured, never further into what it hit (the reference leads the
/// arm by the servo's lag: at 20 mm/s into 10⁶ N/m that lead is hundreds of newtons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum StopCategory {
    #[default]
    Controlled,
    Protective(ProtectiveCause),
}

impl StopCategory {
    pub fn is_protective(&self) -> bool {
        matches!(self, StopCategory::Protective(_))
    }
}

/// A motion ended by its commander (a fault, a limit, an operator stop): robot-io holds at
/// once, on its next robot cycle, instead of when the motion's command stream goes stale
/// (2 robot cycles later), and refuses the motion's commands from then on. It can only stop
/// motion: a tag that is not robot-io's (another boot) or id 0 is ignored. `stop` says how
/// ([`StopCategory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub struct MotionEnd {
    pub stamp: Stamp,
    pub motion: MotionTag,
    pub stop: StopCategory,
}

/// State of the simulated Raibert–Craig 2-DOF plant (revolute + prismatic, planar), published
/// by cell-sim each plant period. Joint 1 in rad, joint 2 in m; plane coordinates in m.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct PlantState {
    pub stamp: Stamp,
    /// Plant time (s).
    pub t_s: f64,
    /// Joint positions: revolute (rad), prismatic (m).
    pub q: [f64; 2],
    /// Joint velocities (rad/s, m/s).
    pub qd: [f64; 2],
    /// Hand position in the plane (m).
    pub hand_pos_m: [f64; 2],
    /// Force the wrist spring puts on the hand (what a wrist force sensor reads), plane axes (N).
    pub wrist_force_n: [f64; 2],
    /// Force of the reaction surface on the hand (N).
    pub contact_force_n: [f64; 2],
    pub in_contact: bool,
    /// Effort actually applied (after limits): N·m, N.
    pub effort_applied: [f64; 2],
}

/// The simulated world's ground truth at the tool (`sim/truth`, once per EGM cycle): for
/// scoring experiments only — control never subscribes to it (a real cell has no such topic).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct SimTruth {
    pub stamp: Stamp,
    /// Simulator time (s).
    pub t_s: f64,
    /// Force of the surfaces on the tool, base axes (N).
    pub contact_force_base_n: [f64; 3],
    /// Force of the operator's hand on the tool, base axes (N).
    pub hand_force_base_n: [f64; 3],
    pub in_contact: bool,
    /// TCP position in base (m).
    pub tcp_in_base_m: [f64; 3],
    /// Whether the operator's (scripted) hand holds the tool.
    pub hand_active: bool,
    /// Where the operator's hand is (m, base); meaningful while `hand_active`.
    pub hand_pos_base_m: [f64; 3],
    /// The joint reference the emulated controller holds this cycle: the newest one it
    /// received on the EGM wire (rad). What robot-io's references look like to the robot, for
    /// scoring transitions (issue 19 item 10).
    pub q_ref_rad: [f64; 6],
    /// The header seqno of the `EgmSensor` reply `q_ref_rad` came from (`None` before the
    /// first applied reply, or when it carried none). The same seqno twice: the controller got
    /// no new reply in time and held a cycle; a jump of more than one: replies that arrived
    /// after another within one cycle were superseded by the newest, never applied. What tells
    /// robot-io's references apart from their delivery.
    pub q_ref_seqno: Option<u32>,
}

/// Deadman keep-alive for hand guiding (`control/enable`): guiding moves only while these
/// keep arriving with the session's token (`cell guide` streams them at 20 Hz). No accepted
/// enable for `[control.guide] deadman_timeout_s` (0.5 s) → the arm decelerates to a stop and
/// holds, and the token is void: guiding resumes only by a new guide request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct Enable {
    pub stamp: Stamp,
    /// Who sends it (free text id, e.g. a pendant's serial; for the log).
    pub source: u32,
    /// The `enable_token` of the guide request's reply (`control/rpc/lead`): an enable without
    /// the running session's token (0, an old session's, another client's) is ignored and
    /// counted (`cell status control`: `detail.deadman.enables_ignored`).
    pub token: u64,
}

/// Which hand-guiding law a lead-through session runs (`control::guide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum GuideLaw {
    /// `M ẍ + D ẋ = F` per Cartesian axis with oscillation-adaptive damping (default).
    #[default]
    Admittance,
    /// Cai et al. 2017: force direction prediction, fixed steps of `d` at the speed `K_f⁻¹·F`.
    Stiffness,
    /// The per-axis stepwise method Cai improves on (Liu et al. 2016): steps of `d` along the
    /// single tool axis with the largest force — a baseline for comparisons, not for use.
    Staircase,
}

/// A lead-through session's state, every robot cycle while guiding (`control/guide_state`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct GuideState {
    pub stamp: Stamp,
    pub motion_id: u64,
    pub law: GuideLaw,
    /// Robot time since the session started (s).
    pub t_s: f64,
    /// The deadman keep-alive is fresh.
    pub enabled: bool,
    /// The contact wrench the law used (after the dead band): force (N) and torque about the
    /// TCP (N·m), base axes.
    pub force_n: [f64; 3],
    pub torque_nm: [f64; 3],
    /// Commanded TCP twist (base axes).
    pub twist: Twist,
    /// Commanded TCP position (m, base).
    pub tcp_cmd_m: [f64; 3],
    /// Damping scale of the admittance law (1 = nominal; > 1 = oscillation suppressed).
    pub damping_scale: f64,
    /// The speed cap reduced the command this cycle.
    pub speed_limited: bool,
    /// A virtual wall acted this cycle.
    pub wall_limited: bool,
    /// Stepping laws: steps completed.
    pub steps: u32,
    /// Waypoints recorded in the teach buffer.
    pub waypoints: u32,
}

/// Phase of a program playback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum PlaybackPhase {
    /// Moving to the first waypoint at reduced speed (the robot started away from it).
    #[default]
    Approach,
    Running,
    Pausing,
    Paused,
    Stopping,
    /// Stopped by the operator before the end.
    Stopped,
    /// Reached the last waypoint.
    Done,
    /// Ended by a fault (reason in control's status).
    Aborted,
}

/// Playback progress, every robot cycle while playing (`control/playback_state`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct PlaybackState {
    pub stamp: Stamp,
    pub motion_id: u64,
    pub program: String,
    pub phase: PlaybackPhase,
    /// Next waypoint to reach (index in the program; the approach has index 0).
    pub waypoint: u32,
    pub waypoints: u32,
    /// Fraction of the program's path time done, 0..=1 (1 only when the last waypoint is
    /// reached).
    pub progress: f64,
    /// Path time done and total (s, at full rate).
    pub t_s: f64,
    pub duration_s: f64,
    /// The joint reference sent this cycle (rad).
    pub q_ref_rad: [f64; AXES],
}

/// Effort command for the simulated 2-DOF plant: the torque-command variant of the robot
/// interface (revolute torque N·m, prismatic force N).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct PlantEffortCommand {
    pub stamp: Stamp,
    pub effort: [f64; 2],
}

/// The JSON status every service answers on its status queryable
/// (JSON, not postcard, so that any zenoh tool can read it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceStatus {
    pub service: String,
    pub cell_id: String,
    pub version: String,
    pub pid: u32,
    pub state: String,
    pub uptime_s: f64,
    /// Per subscribed topic: received, rejected, age of the newest sample.
    pub inputs: Vec<InputStatus>,
    /// Per published topic: messages sent.
    pub outputs: Vec<OutputStatus>,
    pub last_error: Option<String>,
    /// Service-specific figures.
    pub detail: serde_json::Value,
    /// The process's scheduling gaps (`common::watchdog`): the evidence of a host stall.
    #[serde(default)]
    pub sched: crate::watchdog::SchedStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputStatus {
    pub key: String,
    pub received: u64,
    pub rejected: u64,
    pub last_reject: Option<String>,
    pub age_ms: Option<f64>,
    /// Hot-path inputs: the delay from the message's stamp (its production, by the publisher)
    /// to its arrival in this process's subscriber, µs — one hop of the chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<crate::latency::Summary>,
    /// The same as a sparse histogram (`latency::Histogram::from_sparse`), so that a benchmark
    /// can take the difference of two status snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_hist: Option<crate::latency::Sparse>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputStatus {
    pub key: String,
    pub published: u64,
}

/// Plausibility checks of a decoded message (NaN, non-unit quaternions, …). Messages failing
/// them are counted as rejected by the bus and never reach a service.
pub trait Check {
    fn check(&self) -> Result<(), String>;

    /// The monotonic time the message's content was produced (its stamp), for hot-path types:
    /// the receiver records its arrival delay per input (`InputStatus::latency_us`).
    fn source_mono_ns(&self) -> Option<u64> {
        None
    }
}

fn finite(name: &str, v: &[f64]) -> Result<(), String> {
    if v.iter().all(|x| x.is_finite()) {
        Ok(())
    } else {
        Err(format!("{name} contains NaN or infinity"))
    }
}

fn pose(name: &str, p: &Pose) -> Result<(), String> {
    if p.is_valid() {
        Ok(())
    } else {
        Err(format!("{name} is not finite with a unit quaternion"))
    }
}

fn wrench(name: &str, w: &Wrench) -> Result<(), String> {
    if w.is_finite() {
        Ok(())
    } else {
        Err(format!("{name} contains NaN or infinity"))
    }
}

/// A robot cycle period: finite, in [0, 1] s (0: unknown).
fn period(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("{name} {v} is not a cycle period in [0, 1] s"))
    }
}

impl Check for JointState {
    fn source_mono_ns(&self) -> Option<u64> {
        Some(self.stamp.source_mono_ns)
    }
    fn check(&self) -> Result<(), String> {
        finite("q_rad", &self.q_rad)?;
        finite("qd_rad_s", &self.qd_rad_s)?;
        period("period_s", self.period_s)
    }
}

impl Check for JointCommand {
    fn source_mono_ns(&self) -> Option<u64> {
        Some(self.stamp.source_mono_ns)
    }
    fn check(&self) -> Result<(), String> {
        finite("q_rad", &self.q_rad)?;
        finite("qd_rad_s", &self.qd_rad_s)
    }
}

impl Check for ToolPose {
    fn source_mono_ns(&self) -> Option<u64> {
        Some(self.stamp.source_mono_ns)
    }
    fn check(&self) -> Result<(), String> {
        finite("q_rad", &self.q_rad)?;
        pose("tool0_in_base", &self.tool0_in_base)?;
        pose("tcp_in_base", &self.tcp_in_base)?;
        finite("tcp_twist_base", &self.tcp_twist_base.linear_m_s)?;
        finite("tcp_twist_base", &self.tcp_twist_base.angular_rad_s)?;
        for row in &self.jacobian_base {
            finite("jacobian_base", row)?;
        }
        finite("manipulability", &[self.manipulability])?;
        period("period_s", self.period_s)
    }
}

impl Check for CartesianCommand {
    fn source_mono_ns(&self) -> Option<u64> {
        Some(self.stamp.source_mono_ns)
    }
    fn check(&self) -> Result<(), String> {
        match &self.target {
            CartesianTarget::Hold => Ok(()),
            CartesianTarget::Pose(p) => pose("target pose", p),
            CartesianTarget::Twist { twist } => {
                finite("twist", &twist.linear_m_s)?;
                finite("twist", &twist.angular_rad_s)
            }
            CartesianTarget::Joints { q_rad } => finite("q_rad", q_rad),
        }
    }
}

impl Check for WrenchSample {
    fn source_mono_ns(&self) -> Option<u64> {
        Some(self.stamp.source_mono_ns)
    }
    fn check(&self) -> Result<(), String> {
        wrench("wrench_sensor", &self.wrench_sensor)
    }
}

impl Check for WrenchEstimate {
    fn source_mono_ns(&self) -> Option<u64> {
        Some(self.stamp.source_mono_ns)
    }
    fn check(&self) -> Result<(), String> {
        wrench("sensor", &self.sensor)?;
        wrench("tool", &self.tool)?;
        wrench("base", &self.base)?;
        for (name, v) in [
            ("peak_force_n", self.peak_force_n),
            ("peak_torque_nm", self.peak_torque_nm),
            ("fast_swing_n", self.fast_swing_n),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} {v} must be finite and ≥ 0"));
            }
        }
        Ok(())
    }
}

impl Check for ModeCommand {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Check for HybridTask {
    fn check(&self) -> Result<(), String> {
        if self.name.len() > 64 {
            return Err(format!("name is {} bytes (≤ 64)", self.name.len()));
        }
        pose("frame", &self.frame)?;
        const AXIS: [&str; 6] = ["x", "y", "z", "rx", "ry", "rz"];
        for (k, p) in self.reference.iter().enumerate() {
            let axis = AXIS.get(k).copied().unwrap_or("?");
            p.check().map_err(|e| format!("reference.{axis}: {e}"))?;
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0) {
            return Err(format!("duration_s {} must be > 0", self.duration_s));
        }
        if !(self.rate_hz.is_finite() && (0.0..=1000.0).contains(&self.rate_hz)) {
            return Err(format!("rate_hz {} must be in [0, 1000]", self.rate_hz));
        }
        if let Some(g) = &self.gains {
            for (name, a) in [
                ("kp", &g.kp),
                ("ki", &g.ki),
                ("kd", &g.kd),
                ("kp_f", &g.kp_f),
                ("ki_f", &g.ki_f),
                ("kd_f", &g.kd_f),
                ("limit_n", &g.limit_n),
                ("friction_n", &g.friction_n),
            ] {
                if !a.iter().all(|v| v.is_finite() && *v >= 0.0) {
                    return Err(format!("gains.{name} must be finite and ≥ 0: {a:?}"));
                }
            }
            if !(0.0..=1.0).contains(&g.feedforward) {
                return Err(format!("gains.feedforward {} not in [0, 1]", g.feedforward));
            }
        }
        for (name, v) in self.limits.fields() {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!("limits.{name} {v} must be > 0"));
                }
            }
        }
        Ok(())
    }
}

impl Profile {
    /// Finite numbers, a sane series.
    pub fn check(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite();
        match self {
            Profile::Constant(v) => ok(*v).then_some(()).ok_or("not finite".into()),
            Profile::Step {
                before,
                after,
                at_s,
            } => [*before, *after, *at_s]
                .iter()
                .all(|v| ok(*v))
                .then_some(())
                .ok_or("step: not finite".into()),
            Profile::Ramp {
                from,
                to,
                start_s,
                duration_s,
            } => {
                let finite = [*from, *to, *start_s].iter().all(|v| ok(*v));
                if !(finite && duration_s.is_finite() && *duration_s >= 0.0) {
                    return Err("ramp: not finite or negative duration".into());
                }
                Ok(())
            }
            Profile::Sine {
                offset,
                amplitude,
                freq_hz,
                phase_rad,
            } => [*offset, *amplitude, *freq_hz, *phase_rad]
                .iter()
                .all(|v| ok(*v))
                .then_some(())
                .ok_or("sine: not finite".into()),
            Profile::Series(pts) => {
                if pts.is_empty() || pts.len() > MAX_SERIES_POINTS {
                    return Err(format!(
                        "series needs 1..={MAX_SERIES_POINTS} points, has {}",
                        pts.len()
                    ));
                }
                if !pts.iter().all(|p| ok(p[0]) && ok(p[1])) {
                    return Err("series: not finite".into());
                }
                if pts.windows(2).any(|w| w[1][0] <= w[0][0]) {
                    return Err("series: times must increase strictly".into());
                }
                Ok(())
            }
        }
    }
}

impl Check for SimTruth {
    fn check(&self) -> Result<(), String> {
        finite("contact_force_base_n", &self.contact_force_base_n)?;
        finite("hand_force_base_n", &self.hand_force_base_n)?;
        finite("tcp_in_base_m", &self.tcp_in_base_m)?;
        finite("hand_pos_base_m", &self.hand_pos_base_m)?;
        finite("q_ref_rad", &self.q_ref_rad)?;
        finite("t_s", &[self.t_s])
    }
}

impl Check for Enable {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Check for GuideState {
    fn check(&self) -> Result<(), String> {
        finite("force_n", &self.force_n)?;
        finite("torque_nm", &self.torque_nm)?;
        finite("tcp_cmd_m", &self.tcp_cmd_m)?;
        finite("twist", &self.twist.linear_m_s)?;
        finite("twist", &self.twist.angular_rad_s)?;
        finite("t_s", &[self.t_s, self.damping_scale])
    }
}

impl Check for PlaybackState {
    fn check(&self) -> Result<(), String> {
        finite("q_ref_rad", &self.q_ref_rad)?;
        let p = self.progress;
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("progress {p} outside 0..=1"));
        }
        finite("t_s", &[self.t_s, self.duration_s])
    }
}

impl Check for HybridState {
    fn check(&self) -> Result<(), String> {
        for (n, a) in [
            ("force_ref", &self.force_ref),
            ("force", &self.force),
            ("position_ref", &self.position_ref),
            ("position", &self.position),
            ("output", &self.output),
        ] {
            finite(n, a)?;
        }
        finite("gains_for_n_per_m", &self.gains_for_n_per_m)?;
        finite(
            "stiffness_estimate_n_per_m",
            &self.stiffness_estimate_n_per_m,
        )?;
        finite(
            "t_s",
            &[self.t_s, self.clock_s, self.ref_time_s, self.speed_scale],
        )?;
        finite("frame_in_base", &self.frame_in_base.position_m)?;
        finite("frame_in_base", &self.frame_in_base.quat_wxyz)
    }
}

impl Check for MoveTarget {
    fn check(&self) -> Result<(), String> {
        pose("tcp_in_base", &self.tcp_in_base)?;
        for (name, v) in [
            ("max_speed_m_s", self.max_speed_m_s),
            ("max_rot_speed_rad_s", self.max_rot_speed_rad_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name} {v} must be > 0"));
            }
        }
        Ok(())
    }
}

impl Check for PlantState {
    fn check(&self) -> Result<(), String> {
        finite("q", &self.q)?;
        finite("qd", &self.qd)?;
        finite("wrist_force_n", &self.wrist_force_n)?;
        finite("t_s", &[self.t_s])?;
        finite("hand_pos_m", &self.hand_pos_m)?;
        finite("contact_force_n", &self.contact_force_n)?;
        finite("effort_applied", &self.effort_applied)
    }
}

impl Check for PlantEffortCommand {
    fn check(&self) -> Result<(), String> {
        finite("effort", &self.effort)
    }
}

impl Check for SafetyState {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Check for EStop {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Check for EStopReset {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Check for MotionEnd {
    fn check(&self) -> Result<(), String> {
        if self.motion.motion_id == 0 {
            return Err("motion id 0 names no motion".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_reject_nan_and_bad_quaternions() {
        let mut js = JointState::default();
        assert!(js.check().is_ok());
        js.q_rad[3] = f64::NAN;
        assert!(js.check().is_err());
        let mut cmd = CartesianCommand {
            target: CartesianTarget::Pose(Pose {
                position_m: [0.3, 0.0, 0.5],
                quat_wxyz: [0.5, 0.5, 0.5, 0.5],
            }),
            ..Default::default()
        };
        assert!(cmd.check().is_ok());
        cmd.target = CartesianTarget::Pose(Pose {
            position_m: [0.3, 0.0, 0.5],
            quat_wxyz: [1.0, 1.0, 0.0, 0.0],
        });
        assert!(cmd.check().is_err());
        cmd.target = CartesianTarget::Twist {
            twist: Twist {
                linear_m_s: [f64::NAN, 0.0, 0.0],
                angular_rad_s: [0.0; 3],
            },
        };
        assert!(cmd.check().is_err());
        let mt = MoveTarget {
            max_speed_m_s: -1.0,
            max_rot_speed_rad_s: 1.0,
            ..Default::default()
        };
        assert!(mt.check().is_err());
    }
}
