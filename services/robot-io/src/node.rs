//! robot-io's shell: the cycle loop around the driver and the supervisor.

use std::time::{Duration, Instant};

use common::{
    bus::Node,
    msg::{EStopAction, JointState, SafetyState},
    service::Shutdown,
    topic,
};
use kinematics::JointLimits;
use tokio::time::MissedTickBehavior;

use crate::{
    config::{DriverKind, RobotIoConfig},
    ideal::IdealRobot,
    supervisor::{irb120_max_accel, CycleInput, Supervisor, SupervisorParams},
};

/// Cycle timing statistics (for status).
#[derive(Debug, Default)]
struct CycleStats {
    count: u64,
    last: Option<Instant>,
    sum_dt: f64,
    sum_dt2: f64,
    max_dt: f64,
    n_dt: u64,
}

impl CycleStats {
    fn tick(&mut self, now: Instant) {
        self.count += 1;
        if let Some(prev) = self.last {
            let dt = now.duration_since(prev).as_secs_f64();
            self.sum_dt += dt;
            self.sum_dt2 += dt * dt;
            self.max_dt = self.max_dt.max(dt);
            self.n_dt += 1;
        }
        self.last = Some(now);
    }
    fn json(&self) -> serde_json::Value {
        let n = self.n_dt.max(1) as f64;
        let mean = self.sum_dt / n;
        let std = (self.sum_dt2 / n - mean * mean).max(0.0).sqrt();
        serde_json::json!({
            "cycles": self.count,
            "rate_hz": if mean > 0.0 { 1.0 / mean } else { 0.0 },
            "period_mean_ms": mean * 1e3,
            "jitter_std_ms": std * 1e3,
            "period_max_ms": self.max_dt * 1e3,
        })
    }
}

pub async fn run(
    node: Node,
    cfg: (RobotIoConfig, JointLimits),
    mut shutdown: Shutdown,
) -> anyhow::Result<()> {
    let (cfg, limits) = cfg;
    let commands = node.latest(topic::JOINT_COMMAND).await?;
    let mut estops = node.events(topic::ESTOP, 16).await?;
    let mut js_pub = node.publisher(topic::JOINT_STATE).await?;
    let mut safety_pub = node.publisher(topic::SAFETY_STATE).await?;
    let _presence = node.announce().await?;

    let mut sup = Supervisor::new(SupervisorParams {
        command_timeout_s: cfg.command_timeout_ms * 1e-3,
        limits,
        max_accel: irb120_max_accel(),
    });
    let DriverKind::Ideal = cfg.driver;
    let mut q0 = [0.0; 6];
    for (q, d) in q0.iter_mut().zip(cfg.initial_q_deg.iter()) {
        *q = d.to_radians();
    }
    let mut robot = IdealRobot::new(q0);
    let dt_s = cfg.cycle_ms * 1e-3;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(dt_s));
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let epoch = Instant::now();
    let mut stats = CycleStats::default();
    let mut cycle: u64 = 0;
    let mut last_safety_pub = Instant::now();
    let mut last_status = Instant::now();
    let mut q_meas = q0;

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        stats.tick(now);
        cycle += 1;
        let (q, qd, status) = robot.feedback();
        q_meas = q;
        let js = JointState {
            stamp: js_pub.next_stamp(),
            cycle,
            q_rad: q,
            qd_rad_s: qd,
            robot: status,
        };
        js_pub.put(&js);

        while let Ok(e) = estops.rx.try_recv() {
            match e.msg.action {
                EStopAction::Engage => {
                    tracing::warn!("e-stop engaged");
                    sup.engage_estop();
                }
                EStopAction::Reset => {
                    tracing::info!("e-stop reset");
                    sup.reset_estop();
                }
            }
        }
        let latest = commands.get();
        let cmd = latest
            .as_ref()
            .map(|r| (&r.msg, r.at.duration_since(epoch).as_secs_f64()));
        let out = sup.step(&CycleInput {
            cycle,
            now_s: now.duration_since(epoch).as_secs_f64(),
            dt_s,
            q_measured: q,
            robot: status,
            command: cmd,
        });
        robot.apply(out.q_ref, out.qd_ref);

        if out.changed {
            tracing::info!(level = ?out.level, reason = ?out.reason, cycle, "safety state");
        }
        if out.changed || last_safety_pub.elapsed() >= Duration::from_millis(100) {
            let st = SafetyState {
                stamp: safety_pub.next_stamp(),
                level: out.level,
                reason: out.reason,
                since_cycle: sup.since_cycle(),
                rejected_commands: sup.rejected(),
            };
            safety_pub.put(&st);
            last_safety_pub = Instant::now();
        }
        if last_status.elapsed() >= Duration::from_millis(250) {
            node.set_detail(serde_json::json!({
                "driver": "ideal",
                "cycle": stats.json(),
                "safety": { "level": format!("{:?}", out.level), "reason": format!("{:?}", out.reason),
                            "since_cycle": sup.since_cycle(), "rejected_commands": sup.rejected(),
                            "estop_latched": sup.estop_latched() },
                "q_deg": q.iter().map(|v| v.to_degrees()).collect::<Vec<_>>(),
            }));
            last_status = Instant::now();
        }
    }

    // Terminal state: hold where the robot is, and say so.
    let out = sup.shutdown(cycle, q_meas);
    robot.apply(out.q_ref, out.qd_ref);
    let st = SafetyState {
        stamp: safety_pub.next_stamp(),
        level: out.level,
        reason: out.reason,
        since_cycle: cycle,
        rejected_commands: sup.rejected(),
    };
    safety_pub.put(&st);
    node.set_state("stopped (holding)");
    drop(_presence);
    node.close().await;
    Ok(())
}
