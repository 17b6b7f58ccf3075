//! The lead-through RPC (`control/rpc/lead`): guide, record, undo, clear, load, list, play,
//! move-joints, pause, resume, stop, applied to the core and the teach buffer. Pure: the
//! shell hands it the request and the state it acts on, and sends the reply.

use serde::Deserialize;

use crate::{
    config::{guide_params, ControlSetup},
    core::{ControlCore, PlayCommand, PlayRun},
    program::{MountTolerance, PayloadSpec, Program, ToolSpec},
    trajectory::{
        CartesianLimits, CartesianPlayback, CartesianTrajectory, JointTrajectory, PlanOptions,
        Playback, TrajLimits,
    },
};

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

/// State the lead requests act on.
pub(crate) struct Lead<'a> {
    pub(crate) core: &'a mut ControlCore,
    /// The token a guide request binds (fresh per request).
    pub(crate) token: u64,
    pub(crate) setup: &'a ControlSetup,
    pub(crate) pose: Option<&'a common::msg::ToolPose>,
    pub(crate) wrench_fault: Option<common::msg::WrenchFault>,
    pub(crate) now_s: f64,
}

pub(crate) fn tool_spec(setup: &ControlSetup) -> ToolSpec {
    ToolSpec::from_isometry(setup.arm.tool())
}

pub(crate) fn handle_lead(req: LeadRequest, l: Lead) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let pose = || {
        l.pose
            .ok_or("no tool pose yet (is kinematics running?)".to_string())
    };
    match req {
        LeadRequest::Guide(mut over) => {
            // Who guides: its enables come on `control/enable/<operator>`, which access control
            // lets only that identity publish (none named: the plain key).
            let operator = match over.remove("operator") {
                None => String::new(),
                Some(serde_json::Value::String(o)) if common::security::valid_identity(&o) => o,
                Some(v) => {
                    return Err(format!(
                        "guide: \"operator\" {v} is not an identity (letters, digits, '-' or '_')"
                    ))
                }
            };
            let params = guide_params(&l.setup.cfg.guide, &over)?;
            // Only enables carrying this token, from this operator, keep this session's
            // deadman (docs/safety.md, docs/security.md).
            l.core
                .request_guide(params, l.wrench_fault, l.token, &operator)
                .map_err(|e| e.to_string())?;
            Ok(json!({
                "guiding": params.law,
                "params": params,
                "enable_token": l.token,
                "operator": operator,
            }))
        }
        LeadRequest::Record { label } => {
            let p = pose()?;
            let i =
                l.core
                    .teach_mut()
                    .record(&label, p.q_rad, p.tcp_in_base.to_isometry(), l.now_s)?;
            Ok(json!({
                "index": i,
                "label": l.core.teach().points()[i].label,
                "q_deg": p.q_rad.map(f64::to_degrees),
                "tcp_position_m": p.tcp_in_base.position_m,
                "waypoints": l.core.teach().len(),
            }))
        }
        LeadRequest::Undo {} => {
            let gone = l
                .core
                .teach_mut()
                .undo()
                .ok_or("the teach buffer is empty")?;
            Ok(json!({ "removed": gone.label, "waypoints": l.core.teach().len() }))
        }
        LeadRequest::Load { waypoints } => {
            let mut fresh = crate::teach::TeachBuffer::default();
            for (i, w) in waypoints.iter().enumerate() {
                let q = w.q_deg.map(f64::to_radians);
                let tcp = l
                    .setup
                    .arm
                    .fk(&q)
                    .map_err(|e| format!("waypoint {i}: {e}"))?;
                fresh.record(&w.label, q, tcp, l.now_s)?;
            }
            *l.core.teach_mut() = fresh;
            Ok(json!({ "waypoints": l.core.teach().len() }))
        }
        LeadRequest::Clear {} => {
            l.core.teach_mut().clear();
            Ok(json!({ "waypoints": 0 }))
        }
        LeadRequest::List {} => {
            let tool = tool_spec(l.setup);
            let mut wps = Vec::new();
            for t in l.core.teach().points() {
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
pub(crate) fn cartesian_play(
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
    let here = pose.tcp_in_base.to_isometry();
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
