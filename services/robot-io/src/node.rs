//! robot-io's shell: the cycle loop around the driver and the supervisor.
//!
//! - `ideal`: a local timer is the robot cycle; the in-process ideal robot applies each
//!   reference.
//! - `egm`: the controller is the clock. Every `EgmRobot` datagram is decoded (malformed →
//!   counted and dropped), run through the supervisor with the newest joint command, answered
//!   at once with an `EgmSensor` to the datagram's sender address, then published as one
//!   `JointState`. No datagram for `egm.silence_timeout_ms` → nothing new is published and the
//!   safety state says `RobotSilent`.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use common::{
    bus::{Events, Latest, Node, Publisher},
    msg::{EStop, EStopAction, JointCommand, JointState, SafetyState},
    service::Shutdown,
    topic,
};
use kinematics::JointLimits;
use tokio::{net::UdpSocket, time::MissedTickBehavior};

use crate::{
    config::{DriverKind, EgmConfig, RobotIoConfig},
    egm::{
        proto,
        session::{EgmSession, SessionEvent, SessionParams},
    },
    ideal::IdealRobot,
    supervisor::{CycleInput, CycleOutput, Supervisor, SupervisorParams},
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

/// What both drivers share: bus endpoints, the supervisor, safety publishing.
struct Shell {
    node: Node,
    commands: Latest<JointCommand>,
    estops: Events<EStop>,
    js_pub: Publisher<JointState>,
    safety_pub: Publisher<SafetyState>,
    sup: Supervisor,
    epoch: Instant,
    last_safety_pub: Instant,
}

impl Shell {
    fn secs(&self, t: Instant) -> f64 {
        t.duration_since(self.epoch).as_secs_f64()
    }

    fn drain_estops(&mut self) {
        while let Ok(e) = self.estops.rx.try_recv() {
            match e.msg.action {
                EStopAction::Engage => {
                    tracing::warn!("e-stop engaged");
                    self.sup.engage_estop();
                }
                EStopAction::Reset => {
                    tracing::info!("e-stop reset");
                    self.sup.reset_estop();
                }
            }
        }
    }

    /// One supervisor cycle with the newest joint command.
    fn step(
        &mut self,
        cycle: u64,
        now: Instant,
        dt_s: f64,
        q: [f64; 6],
        robot: common::msg::RobotStatus,
    ) -> CycleOutput {
        self.drain_estops();
        let latest = self.commands.get();
        let cmd = latest.as_ref().map(|r| (&r.msg, self.secs(r.at)));
        let out = self.sup.step(&CycleInput {
            cycle,
            now_s: self.secs(now),
            dt_s,
            q_measured: q,
            robot,
            command: cmd,
        });
        if out.changed {
            tracing::info!(level = ?out.level, reason = ?out.reason, cycle, "safety state");
        }
        out
    }

    /// Publishes the safety state when `changed`, else at 10 Hz.
    fn publish_safety(&mut self, changed: bool) {
        if changed || self.last_safety_pub.elapsed() >= Duration::from_millis(100) {
            let st = SafetyState {
                stamp: self.safety_pub.next_stamp(),
                level: self.sup.level(),
                reason: self.sup.reason(),
                since_cycle: self.sup.since_cycle(),
                rejected_commands: self.sup.rejected(),
            };
            self.safety_pub.put(&st);
            self.last_safety_pub = Instant::now();
        }
    }

    fn safety_json(&self) -> serde_json::Value {
        serde_json::json!({
            "level": format!("{:?}", self.sup.level()),
            "reason": format!("{:?}", self.sup.reason()),
            "since_cycle": self.sup.since_cycle(),
            "rejected_commands": self.sup.rejected(),
            "estop_latched": self.sup.estop_latched(),
            "limited_cycles": self.sup.limited_cycles(),
            "per_joint_limited_cycles": self.sup.per_joint_cycles(),
        })
    }

    /// Terminal state: hold where the robot is, and say so.
    fn publish_shutdown(&mut self, cycle: u64, out: &CycleOutput) {
        let st = SafetyState {
            stamp: self.safety_pub.next_stamp(),
            level: out.level,
            reason: out.reason,
            since_cycle: cycle,
            rejected_commands: self.sup.rejected(),
        };
        self.safety_pub.put(&st);
    }

    async fn close(self) {
        self.node.set_state("stopped (holding)");
        self.node.close().await;
    }
}

pub async fn run(
    node: Node,
    cfg: (RobotIoConfig, JointLimits),
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let (cfg, limits) = cfg;
    let commands = node.latest(topic::JOINT_COMMAND).await?;
    let estops = node.events(topic::ESTOP, 16).await?;
    let js_pub = node.publisher(topic::JOINT_STATE).await?;
    let safety_pub = node.publisher(topic::SAFETY_STATE).await?;
    let presence = node.announce().await?;

    let sup = Supervisor::new(SupervisorParams {
        command_timeout_s: cfg.command_timeout_ms * 1e-3,
        limits,
        max_accel: cfg.max_accel_rad_s2(),
    });
    let shell = Shell {
        node,
        commands,
        estops,
        js_pub,
        safety_pub,
        sup,
        epoch: Instant::now(),
        last_safety_pub: Instant::now(),
    };
    let result = match cfg.driver {
        DriverKind::Ideal => run_ideal(shell, &cfg, shutdown).await,
        DriverKind::Egm => run_egm(shell, &cfg, shutdown).await,
    };
    drop(presence);
    result
}

async fn run_ideal(
    mut sh: Shell,
    cfg: &RobotIoConfig,
    mut shutdown: Shutdown,
) -> anyhow::Result<()> {
    let mut q0 = [0.0; 6];
    for (q, d) in q0.iter_mut().zip(cfg.initial_q_deg.iter()) {
        *q = d.to_radians();
    }
    let mut robot = IdealRobot::new(q0);
    let dt_s = cfg.cycle_ms * 1e-3;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(dt_s));
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut stats = CycleStats::default();
    let mut cycle: u64 = 0;
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
            stamp: sh.js_pub.next_stamp(),
            cycle,
            q_rad: q,
            qd_rad_s: qd,
            robot: status,
        };
        sh.js_pub.put(&js);

        let out = sh.step(cycle, now, dt_s, q, status);
        robot.apply(out.q_ref, out.qd_ref);
        sh.publish_safety(out.changed);
        if last_status.elapsed() >= Duration::from_millis(250) {
            sh.node.set_detail(serde_json::json!({
                "driver": "ideal",
                "cycle": stats.json(),
                "safety": sh.safety_json(),
                "q_deg": q.iter().map(|v| v.to_degrees()).collect::<Vec<_>>(),
            }));
            last_status = Instant::now();
        }
    }

    let out = sh.sup.shutdown(cycle, q_meas);
    robot.apply(out.q_ref, out.qd_ref);
    sh.publish_shutdown(cycle, &out);
    sh.close().await;
    Ok(())
}

/// EGM driver state beyond the pure session.
struct EgmShell {
    sock: UdpSocket,
    session: EgmSession,
    cfg: EgmConfig,
    cycle: u64,
    q_meas: Option<[f64; 6]>,
    peer: Option<SocketAddr>,
    malformed: u64,
    last_malformed: Option<String>,
    send_errors: u64,
    recv_errors: u64,
    incomplete_last: Option<String>,
}

impl EgmShell {
    /// Sends a reply to `to`; errors are counted, never fatal.
    async fn send(&mut self, sh: &Shell, reply: &proto::EgmSensor, to: SocketAddr) {
        let bytes = proto::encode_sensor(reply);
        match self.sock.send_to(&bytes, to).await {
            Ok(_) => self.session.on_reply_sent(sh.secs(Instant::now())),
            Err(e) => {
                self.send_errors += 1;
                tracing::debug!("EGM reply to {to}: {e}");
            }
        }
    }

    /// Handles one datagram: decode, supervise, reply to the sender, publish.
    async fn on_datagram(&mut self, sh: &mut Shell, bytes: &[u8], from: SocketAddr, rx: Instant) {
        let msg = match proto::decode_robot(bytes) {
            Ok(m) => m,
            Err(e) => {
                self.malformed += 1;
                if self.malformed.is_power_of_two() {
                    tracing::warn!(from = %from, count = self.malformed, "malformed EGM datagram: {e}");
                }
                self.last_malformed = Some(format!("{from}: {e}"));
                return;
            }
        };
        let rx_s = sh.secs(rx);
        if self.peer != Some(from) {
            tracing::info!(peer = %from, "EGM controller");
            self.peer = Some(from);
        }
        let fb = match self.session.on_robot(&msg, rx_s) {
            Ok(fb) => fb,
            Err(e) => {
                // Still answered (holding) so the controller's session does not stall.
                self.incomplete_last = Some(e.to_string());
                if let Some(r) = self.session.reply_hold(rx_s) {
                    self.send(sh, &r, from).await;
                }
                return;
            }
        };
        for ev in &fb.events {
            match ev {
                SessionEvent::ControllerStopped(s) => {
                    tracing::warn!(motor = ?s.motor, mci = ?s.mci, rapid = ?s.rapid, "EGM controller not ready")
                }
                other => {
                    tracing::info!(event = ?other, seqno = ?fb.seqno, schema = ?fb.schema, "EGM session")
                }
            }
        }
        self.cycle += 1;
        let out = sh.step(self.cycle, rx, fb.dt_s, fb.q_rad, fb.status);
        let reply = self.session.reply(&out.q_ref, &out.qd_ref, rx_s);
        if let Some(r) = reply {
            self.send(sh, &r, from).await;
        }
        self.q_meas = Some(fb.q_rad);
        let js = JointState {
            stamp: sh.js_pub.next_stamp(),
            cycle: self.cycle,
            q_rad: fb.q_rad,
            qd_rad_s: fb.qd_rad_s.unwrap_or([0.0; 6]),
            robot: fb.status,
        };
        sh.js_pub.put(&js);
        sh.publish_safety(out.changed);
    }

    fn status_json(&self, sh: &Shell, silent: bool) -> serde_json::Value {
        let mut egm = self.session.stats().json();
        if let Some(o) = egm.as_object_mut() {
            o.insert("malformed".into(), self.malformed.into());
            o.insert(
                "last_malformed".into(),
                serde_json::to_value(&self.last_malformed).unwrap_or_default(),
            );
            o.insert(
                "last_incomplete".into(),
                serde_json::to_value(&self.incomplete_last).unwrap_or_default(),
            );
            o.insert("send_errors".into(), self.send_errors.into());
            o.insert("recv_errors".into(), self.recv_errors.into());
        }
        serde_json::json!({
            "driver": "egm",
            "bind": self.cfg.bind,
            "peer": self.peer.map(|p| p.to_string()),
            "silent": silent,
            "cycles": self.cycle,
            "egm": egm,
            "controller": self.session.last_states(),
            "schema": self.session.schema(),
            "safety": sh.safety_json(),
            "q_deg": self.q_meas.map(|q| q.iter().map(|v| v.to_degrees()).collect::<Vec<_>>()),
        })
    }
}

async fn run_egm(mut sh: Shell, cfg: &RobotIoConfig, mut shutdown: Shutdown) -> anyhow::Result<()> {
    let egm = cfg.egm.clone();
    let addr = egm
        .bind_addr()
        .map_err(|e| anyhow::anyhow!("robot_io.egm.bind: {e}"))?;
    let sock = UdpSocket::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("EGM: cannot bind UDP {addr}: {e}"))?;
    tracing::info!(bind = %sock.local_addr().unwrap_or(addr), "EGM driver listening");
    sh.node.set_state("waiting for the EGM controller");
    let mut e = EgmShell {
        sock,
        session: EgmSession::new(SessionParams {
            nominal_cycle_s: cfg.cycle_ms * 1e-3,
            silence_timeout_s: egm.silence_timeout_ms * 1e-3,
            send_speed_ref: egm.send_speed_ref,
        }),
        cfg: egm.clone(),
        cycle: 0,
        q_meas: None,
        peer: None,
        malformed: 0,
        last_malformed: None,
        send_errors: 0,
        recv_errors: 0,
        incomplete_last: None,
    };
    // Housekeeping: silence detection, periodic safety state, status.
    let house_ms = (egm.silence_timeout_ms / 4.0).clamp(1.0, 10.0);
    let mut house = tokio::time::interval(Duration::from_secs_f64(house_ms * 1e-3));
    house.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut buf = vec![0u8; 65536];
    let mut last_status = Instant::now();
    let mut was_silent = true;

    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            r = e.sock.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    let rx = Instant::now();
                    let bytes = buf.get(..n).unwrap_or(&[]);
                    e.on_datagram(&mut sh, bytes, from, rx).await;
                }
                Err(err) => {
                    // e.g. ICMP port unreachable reported on a later receive: not fatal.
                    e.recv_errors += 1;
                    tracing::debug!("EGM receive: {err}");
                }
            },
            _ = house.tick() => {
                sh.drain_estops();
                let now_s = sh.secs(Instant::now());
                let silent = e.session.check_silent(now_s);
                let mut changed = false;
                if silent {
                    changed = sh.sup.robot_silent(e.cycle);
                    if changed {
                        tracing::warn!(timeout_ms = egm.silence_timeout_ms, "EGM robot silent: holding");
                    }
                }
                if silent != was_silent {
                    sh.node.set_state(if silent { "robot silent" } else { "running" });
                    was_silent = silent;
                }
                if silent {
                    sh.publish_safety(changed);
                }
                if last_status.elapsed() >= Duration::from_millis(250) {
                    sh.node.set_detail(e.status_json(&sh, silent));
                    last_status = Instant::now();
                }
            }
        }
    }

    // Shutdown: answer the next datagram (if any comes within the silence timeout) with a hold
    // at the measured position.
    let deadline = Duration::from_secs_f64(egm.silence_timeout_ms * 1e-3);
    let mut out = sh.sup.shutdown(e.cycle, e.q_meas.unwrap_or([f64::NAN; 6]));
    let _ = tokio::time::timeout(deadline, async {
        loop {
            let Ok((n, from)) = e.sock.recv_from(&mut buf).await else {
                continue;
            };
            let Ok(msg) = proto::decode_robot(buf.get(..n).unwrap_or(&[])) else {
                continue;
            };
            let rx_s = sh.secs(Instant::now());
            let reply = match e.session.on_robot(&msg, rx_s) {
                Ok(fb) => {
                    out = sh.sup.shutdown(e.cycle, fb.q_rad);
                    e.session.reply(&out.q_ref, &[0.0; 6], rx_s)
                }
                Err(_) => e.session.reply_hold(rx_s),
            };
            if let Some(r) = reply {
                e.send(&sh, &r, from).await;
            }
            break;
        }
    })
    .await;
    sh.publish_shutdown(e.cycle, &out);
    sh.node.set_detail(e.status_json(&sh, true));
    sh.close().await;
    Ok(())
}
