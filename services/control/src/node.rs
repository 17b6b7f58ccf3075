//! control's shell: runs the core on every new tool pose with the newest wrench estimate.

use std::time::Duration;

use common::{
    bus::Node,
    config::{ConfigErrors, Validate},
    msg::{CartesianCommand, Mode},
    service::Shutdown,
    topic,
};
use kinematics::node::from_msg_pose;
use serde::{Deserialize, Serialize};

use crate::core::ControlCore;

/// `[control]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// Mode at start-up: only `idle` or `hold` (a restart never resumes motion).
    pub initial_mode: InitialMode,
    /// Real-time placement of control's node thread (`[control.rt]`): the whole service event
    /// loop (not only the per-cycle step) runs on one thread with a single-threaded runtime.
    pub rt: common::service::RtConfig,
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

pub async fn run(node: Node, cfg: ControlConfig, mut shutdown: Shutdown) -> anyhow::Result<()> {
    let mut poses = node.latest(topic::TOOL_POSE).await?;
    let wrench = node.latest(topic::WRENCH_ESTIMATE).await?;
    // Every safety state, in order (a drop from Active must not be coalesced away).
    let mut safety = node.events_unbounded(topic::SAFETY_STATE).await?;
    let mut modes = node.events(topic::MODE_COMMAND, 16).await?;
    let mut moves = node.events(topic::MOVE_TARGET, 16).await?;
    let mut tasks = node.events(topic::HYBRID_TASK, 16).await?;
    let mut cmd_pub = node.publisher(topic::CARTESIAN_COMMAND).await?;
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
            Some(_t) = tasks.rx.recv() => {
                node.set_error("hybrid tasks are not available in this build");
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
                let now_s = pose.stamp.source_mono_ns as f64 * 1e-9;
                let before = core.mode();
                let target = core.step(&from_msg_pose(&pose.tcp_in_base), now_s);
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
                }));
            }
        }
    }
    drop(_presence);
    node.close().await;
    Ok(())
}
