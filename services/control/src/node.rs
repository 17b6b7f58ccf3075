//! control's shell: runs the core on every new tool pose with the newest wrench estimate.

use std::time::Duration;

use common::{
    bus::Node,
    clock,
    msg::{CartesianCommand, Mode, PlantEffortCommand, TaskRobot, WrenchEstimate},
    service::Shutdown,
    topic,
};

use crate::{
    config::*,
    core::{ControlCore, WrenchInput},
    hybrid::{PlantInput, WrenchPeak},
    lead::*,
    states::*,
};
use common::bus::{reply_err, reply_json};

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

    /// Steps the servo towards `target` from the joint state `js` and its TCP (once per robot
    /// cycle of `period_s`) and publishes the joint command; `false` when the servo's output
    /// is not finite (nothing sent).
    pub fn command(
        &mut self,
        js: &common::msg::JointState,
        tcp_measured: &nalgebra::Isometry3<f64>,
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
        let input = kinematics::servo::ServoInput {
            q_measured: &js.q_rad,
            target: &kinematics::node::servo_target(target),
            dt: period_s
                .filter(|p| p.is_finite() && *p > 0.0)
                .unwrap_or(0.004),
            since_last_s: since,
            cycle: js.cycle,
        };
        // `tcp_measured` is the FK of `js` (the state its tool pose was made from).
        let out = self.servo.step_measured(&input, tcp_measured);
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

/// Says once, when it happens, why a motion ended by itself (not on every cycle after).
fn report_end(node: &Node, core: &ControlCore, before: Mode) {
    if before != core.mode() {
        if let Some(why) = core.stop_reason() {
            tracing::warn!("motion ended: {why}; idle until a new command");
            node.set_error(format!("motion ended: {why}"));
        }
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
    // Every operator's deadman key (`control/enable/<identity>`), with the sender's identity.
    let mut enables = node.events_by_sender(topic::ENABLE, 16).await?;
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
    let mut guide_requests = 0u64;
    let mut enable_count = 0u64;
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
    let mut robot_clock = crate::core::RobotClock::default();
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
    // The cycle's tool pose, its arrival and robot time, and (direct chain) the TCP of the
    // kinematic state it was made from: the law and the servo step on it, with no second FK
    // and no round trip through the message's pose.
    let mut pose_in: Option<(
        common::msg::ToolPose,
        u64,
        u64,
        Option<nalgebra::Isometry3<f64>>,
    )> = None;
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
                // `mode idle` stops the plant's task too (the core's rule).
                match core.request_mode(m.msg.mode) {
                    Ok(()) => tracing::info!("mode → {:?}", m.msg.mode),
                    Err(e) => node.set_error(e.to_string()),
                }
            }
            Some((who, e)) = enables.rx.recv() => {
                enable_count += 1;
                if !core.on_enable(e.msg.token, &who) && core.mode() == Mode::LeadThrough {
                    tracing::debug!(source = e.msg.source, from = %who, "enable without this session's token and operator ignored");
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
                            token,
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
                        let rot = task.frame.to_isometry().rotation;
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
                        let name = task.name.clone();
                        let started = hcfg
                            .task_limits(&task)
                            .map_err(|e| format!("plant task {name:?}: {e}"))
                            .and_then(|limits| core.request_plant(task, limits, hcfg.plant_max_effort));
                        match started {
                            Ok(()) => tracing::info!("plant task {name:?} started"),
                            Err(e) => node.set_error(e),
                        }
                    }
                }
            }
            Some(ps) = plant_states.changed() => {
                let st = ps.msg;
                let input = PlantInput { t_s: st.t_s, q: st.q, qd: st.qd, wrist_force_n: st.wrist_force_n };
                if let Some(step) = core.step_plant(&input) {
                    let stamp = effort_pub.next_stamp();
                    effort_pub.put(&PlantEffortCommand { stamp, effort: step.effort });
                    let stamp = state_pub.next_stamp();
                    state_pub.put(&hybrid_state(stamp, 0, &step.report));
                    if step.done {
                        let name = core.plant_report().map_or("", |(n, _)| n);
                        tracing::info!("plant task {name:?} done");
                    }
                }
            }
            Some(s) = safety.rx.recv() => {
                let before = core.mode();
                let motion_before = core.motion_tag().map_or(0, |m| m.motion_id);
                // An e-stop or a protective stop stops the plant's task too (the core's rule).
                core.on_safety(&s.msg);
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
                pose_in = Some((p.msg, p.at_ns, p.msg.stamp.source_mono_ns, None));
            }
            Some(js) = next_of(&mut joints) => {
                // The direct chain: FK here, the robot-io stamp as the cycle's time.
                let stamp = common::msg::Stamp { seq: 0, source_mono_ns: clock::mono_ns() };
                match kinematics::node::tool_pose_and_state(&setup.arm, &js.msg, stamp) {
                    Some((tp, state)) => {
                        direct_js = Some(js.msg);
                        pose_in = Some((tp, js.at_ns, js.msg.stamp.source_mono_ns, Some(state.tcp)));
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
                    "plant_task": core.plant_report().map(|(n, r)| report_json(n, Some(r))),
                    "guide": core.guide_report().map(|r| serde_json::json!({
                        "law": core.guide_law().map(|l| format!("{l:?}")),
                        "enabled": r.enabled,
                        "speed_m_s": nalgebra::Vector3::from(r.twist.linear_m_s).norm(),
                        "damping_scale": r.damping_scale,
                        "steps": r.steps,
                    })),
                    "enables_received": enable_count,
                    "deadman": {
                        "bound": core.deadman_bound(),
                        "enables_accepted": core.deadman_counts().accepted,
                        "enables_ignored": core.deadman_counts().ignored,
                        "releases": core.deadman_counts().released,
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
                    "teach_waypoints": core.teach().len(),
                    "playback": core.play_report().map(|(n, r)| serde_json::json!({
                        "program": n, "state": format!("{:?}", r.state), "progress": r.progress,
                    })),
                }));
            }
        }
        if let Some((pose, arrived_ns, time_ns, state_tcp)) = pose_in.take() {
            let now_s = robot_clock.time(pose.cycle, time_ns as f64 * 1e-9);
            let before = core.mode();
            let motion_before = core.motion_tag().map_or(0, |m| m.motion_id);
            last_robot_s = now_s;
            last_pose = Some(pose);
            let newest_wrench = wrench.get();
            let (w, peak) = wrench_input(newest_wrench);
            core.set_wrench_peak(peak);
            // The deadman is the core's, on robot time (`core::session`).
            let tcp = state_tcp.unwrap_or_else(|| pose.tcp_in_base.to_isometry());
            // The robot's own period (its clock's step per cycle) when it gives one; else the
            // estimate from receive times.
            let period_s = Some(pose.period_s)
                .filter(|p| p.is_finite() && *p > 0.0)
                .or(robot_clock.period_s());
            if let Some(p) = period_s {
                core.set_cycle(pose.cycle, p);
            }
            // The dwell rule's input (the core records a waypoint on dwell while guiding).
            let speed = nalgebra::Vector3::from(pose.tcp_twist_base.linear_m_s).norm();
            core.set_measured(pose.q_rad, speed);
            let target = core.step_with_wrench(&tcp, now_s, &w);
            // The reference first: the state reports below are for recorders.
            if let (Some(target), Some(motion)) = (target, core.motion_tag()) {
                match (direct.as_mut(), direct_js) {
                    (Some(d), Some(js)) => {
                        if let Some(why) = d.other_commander(motion.motion_id, clock::mono_ns()) {
                            node.set_error(why.clone());
                            tracing::warn!("{why}: control goes idle");
                            core.stop_now(why);
                        } else if !d.command(&js, &tcp, &target, motion, period_s) {
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
                if let Some(i) = core.take_dwell_waypoint() {
                    tracing::info!("waypoint {} recorded on dwell", i + 1);
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
                        waypoints: core.teach().len() as u32,
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
        // A plant task that a stop or a fault ended: a zero effort to the plant, its last
        // state `Aborted` on the bus, the reason in the status.
        if let Some((why, report)) = core.take_plant_end() {
            tracing::warn!("{why}");
            let stamp = effort_pub.next_stamp();
            effort_pub.put(&PlantEffortCommand {
                stamp,
                effort: [0.0; 2],
            });
            if let Some(r) = report.as_ref() {
                let stamp = state_pub.next_stamp();
                state_pub.put(&hybrid_state(stamp, 0, r));
            }
            node.set_error(why);
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
