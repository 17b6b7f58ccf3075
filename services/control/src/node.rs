//! control's shell: runs the core on every new tool pose with the newest wrench estimate.

use std::time::Duration;

use common::{
    bus::Node,
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
    core::{ControlCore, HybridSetup, WrenchInput},
    hybrid::{self, PlantInput, PlantRun, StepReport},
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
    /// Effective force-loop delay of the arm (s): EGM + servo lag, ≈ 30 ms on an IRC5.
    pub loop_delay_s: f64,
    /// Default limits of a task without its own (all fields).
    pub limits: HybridLimits,
    /// A wrench estimate older than this is stale → a running task holds (ms).
    pub wrench_stale_ms: f64,
    /// The 2-DOF plant's joint effort bound [N·m, N].
    pub plant_max_effort: [f64; 2],
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            stiffness_n_per_m: [2.0e4; 3],
            stiffness_nm_per_rad: [50.0; 3],
            loop_delay_s: 0.03,
            limits: hybrid::default_limits(),
            wrench_stale_ms: 50.0,
            plant_max_effort: [200.0, 200.0],
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
        let l = &self.limits;
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
        ] {
            if !(v.is_finite() && v > 0.0 && v <= hi) {
                errors.push(
                    format!("{prefix}.limits.{name}"),
                    format!("{v} must be in (0, {hi}]"),
                );
            }
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
    ) -> HybridSetup {
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
        HybridSetup {
            gains: task
                .gains
                .unwrap_or_else(|| hybrid::default_arm_gains(kt, kr, self.loop_delay_s)),
            limits: task.limits.unwrap_or(self.limits),
            stiffness,
            loop_delay_s: self.loop_delay_s,
        }
    }
}

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
        frame_in_base: r.frame_in_base,
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

pub async fn run(node: Node, cfg: ControlConfig, mut shutdown: Shutdown) -> anyhow::Result<()> {
    let mut poses = node.latest(topic::TOOL_POSE).await?;
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
    let hcfg = cfg.hybrid.clone();
    let stale = Duration::from_secs_f64(hcfg.wrench_stale_ms * 1e-3);
    // The newest usable estimate and when it arrived: a `Stale` flag from the force service
    // (no sample for its `stale_ms`, 9 ms by default) is a gap in the samples, bridged with the
    // last usable estimate for up to `wrench_stale_ms`; every other fault ends a task at once.
    let mut gate = crate::core::WrenchGate::new(stale.as_secs_f64());
    let epoch = std::time::Instant::now();
    let mut wrench_input = |w: Option<common::bus::Received<WrenchEstimate>>| -> WrenchInput {
        let since = |t: std::time::Instant| t.saturating_duration_since(epoch).as_secs_f64();
        let now = since(std::time::Instant::now());
        gate.input(w.as_ref().map(|r| (&r.msg, since(r.at))), now)
    };
    let mut plant: Option<PlantRun> = None;
    let mut robot_clock = crate::core::RobotClock::default();
    let mut plant_report: Option<(String, StepReport)> = None;
    let _presence = node.announce().await?;

    // Motion ids differ per process start (a restarted control never reuses an id).
    let mut core =
        ControlCore::new(common::clock::mono_ns() ^ (u64::from(std::process::id()) << 40));
    // `initial_mode = "hold"` is applied once robot-io's safety state is known.
    let mut initial_hold = cfg.initial_mode == InitialMode::Hold;
    let mut status_tick = tokio::time::interval(Duration::from_millis(250));
    let mut published = 0u64;

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(m) = modes.rx.recv() => {
                match core.request_mode(m.msg.mode) {
                    Ok(()) => tracing::info!("mode → {:?}", m.msg.mode),
                    Err(e) => node.set_error(e.to_string()),
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
                        let setup = hcfg.arm_setup(&task, &rot);
                        let name = task.name.clone();
                        match core.request_hybrid(task, setup, fault) {
                            Ok(()) => tracing::info!("hybrid task {name:?} started"),
                            Err(e) => node.set_error(format!("hybrid task {name:?}: {e}")),
                        }
                    }
                    TaskRobot::Plant => {
                        let gains = task.gains.unwrap_or_else(hybrid::default_plant_gains);
                        let limits = task.limits.unwrap_or(hcfg.limits);
                        let name = task.name.clone();
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
                    Err(why) => {
                        let stamp = effort_pub.next_stamp();
                        effort_pub.put(&PlantEffortCommand { stamp, effort: [0.0; 2] });
                        if let Some((_, r)) = plant_report.as_mut() {
                            r.phase = HybridPhase::Aborted;
                            let stamp = state_pub.next_stamp();
                        state_pub.put(&hybrid_state(stamp, 0, r));
                        }
                        node.set_error(format!("plant task {name:?} ended: {why}"));
                        plant = None;
                    }
                }
            }
            Some(s) = safety.rx.recv() => {
                let before = core.mode();
                core.on_safety(&s.msg);
                report_end(&node, &core, before);
                if initial_hold {
                    initial_hold = false;
                    if let Err(e) = core.request_mode(Mode::Hold) {
                        node.set_error(format!("initial_mode hold: {e}"));
                    }
                }
            }
            Some(p) = poses.changed() => {
                let pose = p.msg;
                let now_s = robot_clock.time(pose.cycle, pose.stamp.source_mono_ns as f64 * 1e-9);
                let before = core.mode();
                let w = wrench_input(wrench.get());
                let target = core.step_with_wrench(&from_msg_pose(&pose.tcp_in_base), now_s, &w);
                if before == Mode::Hybrid {
                    if let Some(r) = core.hybrid_report() {
                        let id = core.motion_tag().map_or(0, |m| m.motion_id);
                        let stamp = state_pub.next_stamp();
                        state_pub.put(&hybrid_state(stamp, id, r));
                    }
                }
                report_end(&node, &core, before);
                if let (Some(target), Some(motion)) = (target, core.motion_tag()) {
                    let cmd = CartesianCommand { stamp: cmd_pub.next_stamp(), cycle: pose.cycle, motion, target };
                    cmd_pub.put(&cmd);
                    published += 1;
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
                    "wrench_fault": w,
                    "hybrid": core.hybrid_task().map(|t| report_json(&t.name, core.hybrid_report())),
                    "plant_task": plant_report.as_ref().map(|(n, r)| report_json(n, Some(r))),
                }));
            }
        }
    }
    drop(_presence);
    node.close().await;
    Ok(())
}
