//! `cell-kinematics` shell: tool pose + Jacobian for every joint state; joint command for every
//! Cartesian command. The math is in [`crate::servo`], [`crate::fk`], [`crate::jacobian`].

use std::time::Duration;

use common::{
    bus::Node,
    clock,
    config::{check_range, ConfigErrors, Validate},
    latency::Histogram,
    msg::{CartesianTarget, JointCommand, KinFlags, Pose, ToolPose, Twist as MsgTwist},
    service::Shutdown,
    topic,
};
use nalgebra::{Isometry3, Vector3};
use serde::{Deserialize, Serialize};
use zenoh::Wait;

use crate::{
    servo::{Servo, ServoInput, ServoParams, ServoTarget},
    Arm, Twist,
};

/// `[kinematics]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KinematicsConfig {
    /// Restart the command path from the measured joints after a pause in the Cartesian
    /// command stream longer than this (ms).
    pub resync_after_ms: f64,
    /// The joint reference never leads the measured joints by more than this on any joint
    /// (deg). Default 20°: the simulated IRC5 lags ≈ 8.6 cycles at constant speed (10 Hz
    /// critically damped servo, 2-cycle delay, EGM round trip), i.e. 14.4° on A6 at its full
    /// 420°/s.
    pub max_lead_joint_deg: f64,
    /// The reference's TCP never leads the measured TCP by more than this (mm). Default 50 mm:
    /// ≈ 1.4 m/s of TCP speed at the simulated IRC5's lag (the bound caps the speed a lagging
    /// robot is driven at to ≈ bound / lag).
    pub max_lead_tcp_mm: f64,
    /// The reference's TCP orientation never leads the measured one by more than this (deg).
    pub max_lead_tcp_deg: f64,
    /// Joint acceleration bound of the joint commands the servo sends (deg/s² per joint);
    /// unset (the default): none, robot-io alone limits acceleration. Set below robot-io's
    /// `max_accel_deg_s2` (e.g. [`SERVO_MAX_ACCEL_DEG_S2`], 95 % of the IRB 120's), the
    /// Cartesian modes' joint stream reaches robot-io within its limits whatever control
    /// commands. Not needed for a demo's 0 limited replies (control bounds its Cartesian
    /// commands' acceleration where it makes them). Off by default because with
    /// it the gravity compensation after a fast Cartesian move near the wrist singularity
    /// (A5 = −4.9°) was off by 0.0069 N·m instead of 0.0007 N·m
    /// (`tests/hardware.rs::payload_identification_and_gravity_compensation`): not
    /// understood yet (docs/leadthrough.md, motion fidelity).
    pub max_accel_deg_s2: Option<[f64; 6]>,
}

/// A servo joint acceleration bound of 95 % of the IRB 120's (robot-io's default limits).
pub const SERVO_MAX_ACCEL_DEG_S2: [f64; 6] = [950.0, 950.0, 950.0, 1216.0, 1216.0, 1596.0];

impl Default for KinematicsConfig {
    fn default() -> Self {
        Self {
            resync_after_ms: 50.0,
            max_lead_joint_deg: 20.0,
            max_lead_tcp_mm: 50.0,
            max_lead_tcp_deg: 20.0,
            max_accel_deg_s2: None,
        }
    }
}

impl KinematicsConfig {
    /// The servo's parameters (SI units).
    pub fn servo_params(&self) -> ServoParams {
        ServoParams {
            resync_after_s: self.resync_after_ms * 1e-3,
            max_lead_joint_rad: self.max_lead_joint_deg.to_radians(),
            max_lead_tcp_m: self.max_lead_tcp_mm * 1e-3,
            max_lead_tcp_rad: self.max_lead_tcp_deg.to_radians(),
            max_accel_rad_s2: self
                .max_accel_deg_s2
                .map_or([f64::INFINITY; 6], |a| a.map(f64::to_radians)),
            ..ServoParams::default()
        }
    }
}

impl Validate for KinematicsConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        check_range(
            errors,
            format!("{prefix}.resync_after_ms"),
            self.resync_after_ms,
            1.0,
            10_000.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.max_lead_joint_deg"),
            self.max_lead_joint_deg,
            0.5,
            90.0,
            "deg",
        );
        check_range(
            errors,
            format!("{prefix}.max_lead_tcp_mm"),
            self.max_lead_tcp_mm,
            1.0,
            1000.0,
            "mm",
        );
        check_range(
            errors,
            format!("{prefix}.max_lead_tcp_deg"),
            self.max_lead_tcp_deg,
            0.5,
            90.0,
            "deg",
        );
        for (j, a) in self.max_accel_deg_s2.iter().flatten().enumerate() {
            check_range(
                errors,
                format!("{prefix}.max_accel_deg_s2[{j}]"),
                *a,
                1.0,
                1e6,
                "deg/s²",
            );
        }
    }
}

/// nalgebra pose → wire pose ([`Pose::from_isometry`]).
pub fn to_msg_pose(p: &Isometry3<f64>) -> Pose {
    Pose::from_isometry(p)
}

/// Wire pose → nalgebra pose ([`Pose::to_isometry`]).
pub fn from_msg_pose(p: &Pose) -> Isometry3<f64> {
    p.to_isometry()
}

fn to_twist(t: &MsgTwist) -> Twist {
    Twist::new(Vector3::from(t.linear_m_s), Vector3::from(t.angular_rad_s))
}

/// The robot cycle a command is stepped over. The robot's own clock when the joint state
/// carries it (`JointState::period_s`, the robot time since the previous state, lost datagrams
/// included: EGM's Δtm); else an estimate from joint-state stamps: the median of the last 31
/// periods (robust to late wake-ups on a loaded host, which only ever lengthen single periods),
/// clamped to 0.5..50 ms. The stamps are host time: on a loaded host the median itself
/// stretches (every state arrives late), and a reference stepped over it would outrun the joint
/// speed limits on the robot's clock.
#[derive(Debug, Clone)]
struct CycleEstimate {
    last_ns: Option<u64>,
    periods: std::collections::VecDeque<f64>,
    estimate_s: f64,
    robot_s: Option<f64>,
}

impl CycleEstimate {
    fn new() -> Self {
        Self {
            last_ns: None,
            periods: std::collections::VecDeque::with_capacity(32),
            estimate_s: 0.004,
            robot_s: None,
        }
    }

    /// The cycle to step the next command over (s).
    fn dt_s(&self) -> f64 {
        self.robot_s.unwrap_or(self.estimate_s)
    }

    /// One joint state: its stamp (host ns) and the robot's period (s; 0 or invalid when the
    /// robot gives none).
    fn update(&mut self, ns: u64, robot_period_s: f64) {
        self.robot_s = (robot_period_s.is_finite() && (0.0005..=0.05).contains(&robot_period_s))
            .then_some(robot_period_s);
        if let Some(prev) = self.last_ns {
            let dt = ns.saturating_sub(prev) as f64 * 1e-9;
            if dt > 0.0 && dt < 0.1 {
                if self.periods.len() == 31 {
                    self.periods.pop_front();
                }
                self.periods.push_back(dt);
                let mut sorted: Vec<f64> = self.periods.iter().copied().collect();
                sorted.sort_by(f64::total_cmp);
                self.estimate_s = sorted[sorted.len() / 2].clamp(0.0005, 0.05);
            }
        }
        self.last_ns = Some(ns);
    }
}

/// The tool pose message of a joint state (FK of tool0 and the TCP, the TCP twist, the base
/// Jacobian, manipulability), or `None` when FK fails.
pub fn tool_pose(
    arm: &Arm,
    js: &common::msg::JointState,
    stamp: common::msg::Stamp,
) -> Option<ToolPose> {
    tool_pose_and_state(arm, js, stamp).map(|(p, _)| p)
}

/// [`tool_pose`] and the kinematic state it was made from (one evaluation of the chain: the
/// direct chain steps its law and servo on the state's TCP, with no second FK and no
/// round trip through the message's pose).
pub fn tool_pose_and_state(
    arm: &Arm,
    js: &common::msg::JointState,
    stamp: common::msg::Stamp,
) -> Option<(ToolPose, crate::ArmState)> {
    let state = arm.state(&js.q_rad).ok()?;
    let (t0, tcp, jac, m) = (
        state.tool0,
        state.tcp,
        state.jacobian_base,
        state.manipulability,
    );
    let v = jac * nalgebra::Vector6::from(js.qd_rad_s);
    let mut jb = [[0.0; 6]; 6];
    for (r, row) in jb.iter_mut().enumerate() {
        for (c, x) in row.iter_mut().enumerate() {
            *x = jac[(r, c)];
        }
    }
    let pose = ToolPose {
        stamp,
        cycle: js.cycle,
        period_s: js.period_s,
        q_rad: js.q_rad,
        tool0_in_base: to_msg_pose(&t0),
        tcp_in_base: to_msg_pose(&tcp),
        tcp_twist_base: MsgTwist {
            linear_m_s: [v[0], v[1], v[2]],
            angular_rad_s: [v[3], v[4], v[5]],
        },
        jacobian_base: jb,
        manipulability: m,
    };
    Some((pose, state))
}

/// The servo's target for a Cartesian command's.
pub fn servo_target(t: &CartesianTarget) -> ServoTarget {
    match *t {
        CartesianTarget::Hold => ServoTarget::Hold,
        CartesianTarget::Pose(p) => ServoTarget::Pose(from_msg_pose(&p)),
        CartesianTarget::Twist { twist, .. } => ServoTarget::Twist(to_twist(&twist)),
        CartesianTarget::Joints { q_rad } => ServoTarget::Joints(q_rad),
    }
}

pub async fn run(
    node: Node,
    cfg: (KinematicsConfig, Arm),
    mut shutdown: Shutdown,
) -> anyhow::Result<()> {
    let (cfg, arm) = cfg;
    let mut joints = node.latest(topic::JOINT_STATE).await?;
    let mut commands = node.latest(topic::CARTESIAN_COMMAND).await?;
    let mut pose_pub = node.publisher(topic::TOOL_POSE).await?;
    let mut cmd_pub = node.publisher(topic::JOINT_COMMAND).await?;
    // The newest joint command on the bus (ours included): one commander at a time.
    let seen = node.latest(topic::JOINT_COMMAND).await?;
    let mut own = [0u64; common::commander::OWN_MOTIONS];
    let mut refused = 0u64;
    let rpc = declare_rpc(&node, &arm).await?;
    let _presence = node.announce().await?;
    let mut servo = Servo::with_params(arm.clone(), cfg.servo_params());
    let mut last_cmd_at: Option<std::time::Instant> = None;
    let mut cycle = CycleEstimate::new();
    let mut counts = (0u64, 0u64, 0u64, 0u64); // poses, commands, unreachable, limited
    let mut servo_counts = (0u64, 0u64, 0u64, 0u64); // lead-limited, far solutions, resyncs, accel-limited
    let mut status_tick = tokio::time::interval(Duration::from_millis(250));
    let (mut fk_lat, mut servo_lat) = (Histogram::new(), Histogram::new());

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(js) = joints.changed() => {
                let arrived_ns = js.at_ns;
                let js = js.msg;
                cycle.update(js.stamp.source_mono_ns, js.period_s);
                let Some(msg) = tool_pose(&arm, &js, pose_pub.next_stamp()) else {
                    node.set_error(format!("FK failed for joints {:?}", js.q_rad));
                    continue;
                };
                pose_pub.put(&msg);
                fk_lat.record(clock::mono_ns().saturating_sub(arrived_ns));
                counts.0 += 1;
            }
            Some(cmd) = commands.changed() => {
                let Some(js) = joints.get() else {
                    node.set_error("Cartesian command before any joint state: ignored");
                    continue;
                };
                let (cmd, cmd_at, arrived_ns) = (cmd.msg, cmd.at, cmd.at_ns);
                let mut mine = own;
                mine.rotate_right(1);
                mine[0] = cmd.motion.motion_id;
                let newest = seen.get().map(|r| (r.msg.motion.motion_id, r.at_ns));
                if let Some(why) = common::commander::other_commander(&mine, newest, clock::mono_ns()) {
                    refused += 1;
                    node.set_error(format!("Cartesian command refused: {why} (control's direct chain?)"));
                    continue;
                }
                if !own.contains(&cmd.motion.motion_id) {
                    own = mine;
                }
                let target = servo_target(&cmd.target);
                // One robot cycle per command, whatever the sender's own rate.
                let dt = cycle.dt_s();
                let since = last_cmd_at.map_or(f64::INFINITY, |t| cmd_at.duration_since(t).as_secs_f64());
                last_cmd_at = Some(cmd_at);
                let out = servo.step(&ServoInput {
                    q_measured: &js.msg.q_rad,
                    target: &target,
                    dt,
                    since_last_s: since,
                    cycle: cmd.cycle,
                });
                if out.flags.unreachable {
                    counts.2 += 1;
                }
                if out.flags.speed_limited || out.flags.position_limited {
                    counts.3 += 1;
                }
                servo_counts.0 += u64::from(out.flags.lead_limited);
                servo_counts.1 += u64::from(out.flags.far_solution);
                servo_counts.2 += u64::from(out.flags.resynced);
                servo_counts.3 += u64::from(out.flags.accel_limited);
                if !out.q.iter().all(|v| v.is_finite()) {
                    node.set_error("servo produced a non-finite reference: not sent");
                    continue;
                }
                let jc = JointCommand {
                    stamp: cmd_pub.next_stamp(),
                    cycle: cmd.cycle,
                    motion: cmd.motion,
                    q_rad: out.q,
                    qd_rad_s: out.qd,
                    flags: KinFlags {
                        unreachable: out.flags.unreachable,
                        near_singular: out.flags.near_singular,
                        position_limited: out.flags.position_limited,
                        speed_limited: out.flags.speed_limited,
                    },
                };
                cmd_pub.put(&jc);
                servo_lat.record(clock::mono_ns().saturating_sub(arrived_ns));
                counts.1 += 1;
            }
            _ = status_tick.tick() => {
                node.set_detail(serde_json::json!({
                    "tool_poses": counts.0,
                    "joint_commands": counts.1,
                    "unreachable": counts.2,
                    "limited": counts.3,
                    "lead_limited": servo_counts.0,
                    "far_solution": servo_counts.1,
                    "resynced": servo_counts.2,
                    "accel_limited": servo_counts.3,
                    "robot_cycle_ms": cycle.dt_s() * 1e3,
                    "refused_other_commander": refused,
                    // Joint state in → tool pose out; Cartesian command in → joint command out.
                    "latency": {
                        "fk_us": fk_lat.summary(),
                        "fk_hist": fk_lat.to_sparse(),
                        "servo_us": servo_lat.summary(),
                        "servo_hist": servo_lat.to_sparse(),
                    },
                }));
            }
        }
    }
    drop(_presence);
    drop(rpc);
    node.close().await;
    Ok(())
}

/// `cell/<id>/kin/rpc/fk` and `…/ik`: JSON requests, JSON answers (see [`crate::rpc::answer`]).
async fn declare_rpc(node: &Node, arm: &Arm) -> anyhow::Result<Vec<zenoh::query::Queryable<()>>> {
    let mut out = Vec::new();
    for op in ["fk", "ik"] {
        let key = format!("cell/{}/{}/{op}", node.cell_id, topic::KIN_RPC_PREFIX);
        let arm = arm.clone();
        let reply_key = key.clone();
        let q = node
            .session
            .declare_queryable(key.clone())
            .callback(move |query| {
                let req = query
                    .payload()
                    .map(|p| p.to_bytes().into_owned())
                    .unwrap_or_default();
                let res = match crate::rpc::answer(&arm, op, &req) {
                    Ok(v) => query
                        .reply(reply_key.clone(), v.to_string())
                        .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
                        .wait(),
                    Err(e) => query
                        .reply_err(serde_json::json!({ "error": e }).to_string())
                        .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
                        .wait(),
                };
                if let Err(e) = res {
                    tracing::debug!("rpc reply failed: {e}");
                }
            })
            .await
            .map_err(|e| anyhow::anyhow!("queryable {key}: {e}"))?;
        out.push(q);
    }
    Ok(out)
}

/// The service's process entry: config (every problem listed, exit 2), tracing, runtime, bus,
/// then [`run`]. Both `cell-kinematics` and the multi-call `cell service kinematics` (what `cell up` starts)
/// call it, so the two cannot differ.
pub fn service_main(
    cfg: common::service::ConfigArgs,
    bus: common::bus::BusArgs,
) -> std::process::ExitCode {
    common::service::run_service(
        "kinematics",
        bus,
        cfg,
        |l| {
            let k: KinematicsConfig = l.section("kinematics");
            (k, crate::config::load_arm(l))
        },
        run,
    )
}

#[cfg(test)]
mod tests {
    use super::CycleEstimate;

    /// A loaded host stretches every arrival; the robot's own clock does not stretch.
    #[test]
    fn the_robot_clock_wins_over_late_arrivals() {
        let mut c = CycleEstimate::new();
        // States arrive every 6.5 ms of host time while the robot steps 4 ms per state.
        for k in 0..40u64 {
            c.update(k * 6_500_000, 0.004);
        }
        assert!((c.dt_s() - 0.004).abs() < 1e-12, "{}", c.dt_s());
        // A state after a lost datagram: two robot cycles.
        c.update(40 * 6_500_000, 0.008);
        assert!((c.dt_s() - 0.008).abs() < 1e-12);
        // No robot period (0, NaN, absurd): the median of the arrival periods.
        for p in [0.0, f64::NAN, 1.0] {
            c.update(41 * 6_500_000, p);
            assert!((c.dt_s() - 0.0065).abs() < 1e-9, "{p}: {}", c.dt_s());
        }
    }
}
