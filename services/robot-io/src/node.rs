//! robot-io's shell: the cycle loop around the driver and the supervisor.
//!
//! - `ideal`: a local timer is the robot cycle; the in-process ideal robot applies each
//!   reference.
//! - `egm`: the controller is the clock. Every `EgmRobot` datagram goes through the pure
//!   [`EgmCore`] (session + supervisor: malformed → counted, not answered; late or duplicate
//!   → the last reference resent; otherwise one supervisor step), the reply goes at once to
//!   the datagram's sender address, then the `JointState` is handed to the publishing task.
//!   No datagram for `egm.silence_timeout_ms` → nothing new is published and the safety
//!   state says `RobotSilent`.
//!
//! Nothing in the per-datagram path waits on the network except the UDP reply: joint and
//! safety states go through an unbounded channel to a separate publishing task (item 5 of
//! the command-path review). The e-stop latch is persisted ([`crate::latch`]) before the stop
//! is acknowledged on the bus, and restored at start-up.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use common::{
    bus::{Events, Latest, Node, Publisher},
    clock,
    msg::{
        EStop, EStopAction, EStopReset, JointCommand, JointState, MotionEnd, ResetScope,
        SafetyState,
    },
    service::Shutdown,
    topic,
};
use kinematics::JointLimits;
use tokio::{net::UdpSocket, time::MissedTickBehavior};

use crate::{
    config::{DriverKind, EgmConfig, RobotIoConfig},
    egm::{
        cycle::{Datagram, EgmCore},
        frame::{SensorReply, SENSOR_REPLY_MAX},
        proto::MciStateType,
        session::{EgmSession, SessionEvent, SessionParams},
    },
    ideal::IdealRobot,
    latch,
    supervisor::{
        in_arrival_order, CycleInput, CycleOutput, Latches, StopRequest, Supervisor,
        SupervisorParams,
    },
};

/// Publishes the safety state (`Block` congestion control: it must not be lost) off the
/// cycle path, so that a congested link never delays the handling of the next datagram.
/// Stamps keep the time the content was produced. The joint state is published on the cycle
/// path itself, right after the reply: its QoS is express with `Drop` congestion control, so
/// the put never waits for the network, and the hand-off to this task had cost a task wake-up
/// per cycle on the chain's first hop (`cell bench latency`, docs/performance.md).
async fn publish_task(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<SafetyState>,
    mut safety_pub: Publisher<SafetyState>,
) {
    while let Some(mut st) = rx.recv().await {
        // The publisher's sequence number; the production time the cycle path gave.
        let produced = st.stamp.source_mono_ns;
        st.stamp = safety_pub.next_stamp();
        st.stamp.source_mono_ns = produced;
        safety_pub.put(&st);
    }
}

/// A random, non-zero boot id for this process.
pub fn new_boot_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(clock::mono_ns());
    h.write_u32(std::process::id());
    h.finish().max(1)
}

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
    js_pub: Publisher<JointState>,
    commands: Latest<JointCommand>,
    /// The force service's estimates: a clamp release's input.
    wrenches: Latest<common::msg::WrenchEstimate>,
    estops: Events<EStop>,
    resets: Events<EStopReset>,
    motion_ends: Events<MotionEnd>,
    /// Motion ends received, and those that ended the motion being executed.
    motion_end_counts: (u64, u64),
    /// How the last motion its commander ended stops (a controlled end brakes from the
    /// reference, a protective one holds where the arm is).
    last_end_stop: Option<common::msg::StopCategory>,
    out: tokio::sync::mpsc::UnboundedSender<SafetyState>,
    epoch: Instant,
    last_safety_pub: Instant,
    robot_boot: u64,
    latch_path: std::path::PathBuf,
    /// Latches as last written to the file.
    persisted: Latches,
    latch_errors: u64,
}

impl Shell {
    fn secs(&self, t: Instant) -> f64 {
        t.duration_since(self.epoch).as_secs_f64()
    }

    /// The contact force on the tool (N, base axes) from the newest estimate, when it is
    /// fresh (≤ [`CLAMP_FORCE_MAX_AGE`]) and usable (no fault): a clamp release's input.
    fn contact_force(&self) -> Option<[f64; 3]> {
        self.wrenches
            .get()
            .filter(|w| {
                w.at.elapsed() <= CLAMP_FORCE_MAX_AGE
                    && w.msg.fault == common::msg::WrenchFault::None
            })
            .map(|w| w.msg.base.force_n)
    }

    /// Applies every pending stop and reset request in their order of arrival (two keys, one
    /// order: [`in_arrival_order`]), persists the latches if they changed, then acknowledges a
    /// changed safety state on the bus (persisted first); then every motion end from a
    /// commander.
    fn drain_estops(&mut self, sup: &mut Supervisor) {
        let mut stops = Vec::new();
        while let Ok(e) = self.estops.rx.try_recv() {
            stops.push((e.at_ns, e.msg.action));
        }
        let mut resets = Vec::new();
        while let Ok(e) = self.resets.rx.try_recv() {
            resets.push((e.at_ns, e.msg.scope));
        }
        let mut changed = false;
        for r in in_arrival_order(&stops, &resets) {
            match r {
                StopRequest::Stop(EStopAction::Engage) => tracing::warn!("e-stop engaged"),
                StopRequest::Stop(EStopAction::Protective) => {
                    tracing::warn!("protective stop requested by a commander")
                }
                StopRequest::Reset(ResetScope::All) => {
                    tracing::info!("e-stop reset (and protective stop)")
                }
                StopRequest::Reset(ResetScope::ProtectiveOnly) => {
                    tracing::info!("protective stop reset")
                }
            }
            changed |= sup.apply_stop_request(r);
        }
        self.persist(sup);
        if changed {
            self.publish_safety(sup, true);
        }
        // A motion ended by its commander holds on this cycle (not when its stream goes stale).
        while let Ok(m) = self.motion_ends.rx.try_recv() {
            self.motion_end_counts.0 += 1;
            if sup.end_motion(m.msg.motion, m.msg.stop) {
                self.motion_end_counts.1 += 1;
                self.last_end_stop = Some(m.msg.stop);
                tracing::info!(
                    motion = m.msg.motion.motion_id,
                    stop = ?m.msg.stop,
                    "motion ended by its commander"
                );
            }
        }
    }

    /// Writes the latch file when the supervisor's latches differ from the file's.
    fn persist(&mut self, sup: &Supervisor) {
        let l = sup.latches();
        if l == self.persisted {
            return;
        }
        match latch::store(&self.latch_path, &l) {
            Ok(()) => self.persisted = l,
            Err(e) => {
                self.latch_errors += 1;
                tracing::error!(path = %self.latch_path.display(), "cannot persist the safety latch: {e}");
            }
        }
    }

    /// One supervisor cycle with the newest joint command.
    fn step(
        &mut self,
        sup: &mut Supervisor,
        cycle: u64,
        now: Instant,
        dt_s: f64,
        q: [f64; 6],
        robot: common::msg::RobotStatus,
    ) -> CycleOutput {
        self.drain_estops(sup);
        let latest = self.commands.get();
        let cmd = latest.as_ref().map(|r| (&r.msg, self.secs(r.at)));
        let out = sup.step(&CycleInput {
            cycle,
            now_s: self.secs(now),
            dt_s,
            q_measured: Some(q),
            robot,
            command: cmd,
            contact_force_base_n: self.contact_force(),
        });
        log_limited(cycle, out.limited.as_ref());
        if out.changed {
            tracing::info!(level = ?out.level, reason = ?out.reason, cycle, "safety state");
            self.persist(sup);
        }
        out
    }

    fn safety_state(&self, sup: &Supervisor) -> SafetyState {
        SafetyState {
            stamp: common::msg::Stamp {
                seq: 0,
                source_mono_ns: clock::mono_ns(),
            },
            level: sup.level(),
            reason: sup.reason(),
            since_cycle: sup.since_cycle(),
            rejected_commands: sup.rejected(),
            robot_boot: self.robot_boot,
            motion_id: sup.active_motion().unwrap_or(0),
        }
    }

    /// Hands the safety state to the publishing task when `changed`, else at 10 Hz.
    fn publish_safety(&mut self, sup: &Supervisor, changed: bool) {
        if changed || self.last_safety_pub.elapsed() >= Duration::from_millis(100) {
            let _ = self.out.send(self.safety_state(sup));
            self.last_safety_pub = Instant::now();
        }
    }

    fn publish_joints(
        &mut self,
        cycle: u64,
        q: [f64; 6],
        qd: [f64; 6],
        robot: common::msg::RobotStatus,
        period_s: f64,
    ) {
        let js = JointState {
            stamp: self.js_pub.next_stamp(),
            cycle,
            q_rad: q,
            qd_rad_s: qd,
            robot,
            period_s,
        };
        self.js_pub.put(&js);
    }

    fn safety_json(&self, sup: &Supervisor) -> serde_json::Value {
        serde_json::json!({
            "level": format!("{:?}", sup.level()),
            "reason": format!("{:?}", sup.reason()),
            "since_cycle": sup.since_cycle(),
            "rejected_commands": sup.rejected(),
            "estop_latched": sup.estop_latched(),
            "protective_stop": sup.latches().protective.map(|r| format!("{r:?}")),
            "robot_boot": format!("{:016x}", self.robot_boot),
            "active_motion": sup.active_motion(),
            "ended_motion": sup.ended_motion(),
            "latch_file": self.latch_path.display().to_string(),
            "latch_write_errors": self.latch_errors,
            "clamp_release": sup.clamp_release().map(|c| serde_json::json!({
                "state": format!("{:?}", c.state()),
                "travelled_mm": c.travelled_m() * 1e3,
                "peak_force_n": c.peak_n(),
                "release_force_n": c.params().release_force_n,
            })),
            "limited_cycles": sup.limited_cycles(),
            "per_joint_limited_cycles": sup.per_joint_cycles(),
            "aligned_cycles": sup.aligned_cycles(),
            "limited_after_alignment": sup.limited_after_alignment(),
            "limited_by": sup
                .limited_by()
                .map(|(k, n)| (k.to_string(), serde_json::json!(n)))
                .collect::<serde_json::Map<_, _>>(),
            "last_limited": sup.last_limited().map(|e| serde_json::json!({
                "robot_time_s": e.robot_time_s,
                "motion_id": e.motion_id,
                "per_joint": e.per_joint,
                "bound": e.binding.kind.name(),
                "joint": e.binding.joint + 1,
                "v_des_deg_s": finite_or_null(e.binding.v_des.to_degrees()),
                "v_deg_s": finite_or_null(e.binding.v.to_degrees()),
                "v_prev_deg_s": finite_or_null(e.binding.v_prev.to_degrees()),
            })),
            "motion_ends": {
                "received": self.motion_end_counts.0,
                "ended": self.motion_end_counts.1,
                "last_stop": self.last_end_stop.map(|s| format!("{s:?}")),
            },
        })
    }

    /// Terminal state: hold where the robot is, say so, and let the publishing task drain.
    async fn close(self, sup: &Supervisor, publisher: tokio::task::JoinHandle<()>) {
        let _ = self.out.send(self.safety_state(sup));
        drop(self.out);
        let _ = tokio::time::timeout(Duration::from_millis(200), publisher).await;
        self.node.set_state("stopped (holding)");
        self.node.close().await;
    }
}

pub async fn run(
    node: Node,
    cfg: (RobotIoConfig, JointLimits, Option<kinematics::Arm>),
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let (cfg, mut limits, arm) = cfg;
    if cfg.driver == DriverKind::Egm {
        // The controller's \MaxSpeedDeviation: a faster reference is an EGM error there.
        limits.max_speed = cfg.egm.capped_speeds(limits.max_speed);
    }
    let commands = node.latest(topic::JOINT_COMMAND).await?;
    let wrenches = node.latest(topic::WRENCH_ESTIMATE).await?;
    // Lossless: an e-stop is never shed by a full queue.
    let estops = node.events_unbounded(topic::ESTOP).await?;
    let resets = node.events_unbounded(topic::ESTOP_RESET).await?;
    let motion_ends = node.events_unbounded(topic::MOTION_END).await?;
    let js_pub = node.publisher(topic::JOINT_STATE).await?;
    let safety_pub = node.publisher(topic::SAFETY_STATE).await?;
    let presence = node.announce().await?;

    let robot_boot = new_boot_id();
    let sup = Supervisor::new(SupervisorParams {
        command_timeout_s: cfg.command_timeout_ms * 1e-3,
        limits,
        max_accel: cfg.max_accel_rad_s2(),
        robot_boot,
        measured_limit_margin_rad: cfg.measured_limit_margin_deg.to_radians(),
        command_lead_s: cfg.cycle_ms * 1e-3,
        resume_ramp_s: cfg.resume_ramp_ms * 1e-3,
        protective_retrace_s: cfg.protective_retrace_ms * 1e-3,
        stale_contact_n: cfg.stale_contact_n,
    });
    let mut sup = match arm {
        Some(arm) => sup.with_clamp_release(arm, cfg.clamp_release),
        None => sup,
    };
    let latch_path = cfg.latch_path(&node.cell_id);
    let (restored, problem) = latch::load(&latch_path);
    if let Some(p) = problem {
        tracing::error!("{p}");
        node.set_error(p);
    }
    if restored != Latches::default() {
        tracing::warn!(
            estop = restored.estop,
            protective = ?restored.protective,
            path = %latch_path.display(),
            "safety latch restored from before a restart: holding until `cell reset`"
        );
    }
    sup.restore(restored);
    let (out, rx) = tokio::sync::mpsc::unbounded_channel();
    let publisher = tokio::spawn(publish_task(rx, safety_pub));
    let mut shell = Shell {
        node,
        js_pub,
        commands,
        wrenches,
        estops,
        resets,
        motion_ends,
        motion_end_counts: (0, 0),
        last_end_stop: None,
        out,
        epoch: Instant::now(),
        last_safety_pub: Instant::now(),
        robot_boot,
        latch_path,
        persisted: restored,
        latch_errors: 0,
    };
    tracing::info!(
        robot_boot = format!("{robot_boot:016x}"),
        "robot-io boot id"
    );
    shell.publish_safety(&sup, true);
    let result = match cfg.driver {
        DriverKind::Ideal => run_ideal(shell, sup, &cfg, shutdown, publisher).await,
        DriverKind::Egm => run_egm(shell, sup, &cfg, shutdown, publisher).await,
    };
    drop(presence);
    result
}

async fn run_ideal(
    mut sh: Shell,
    mut sup: Supervisor,
    cfg: &RobotIoConfig,
    mut shutdown: Shutdown,
    publisher: tokio::task::JoinHandle<()>,
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
        sh.publish_joints(cycle, q, qd, status, dt_s);

        let out = sh.step(&mut sup, cycle, now, dt_s, q, status);
        if let Some(r) = out.q_ref {
            robot.apply(r, out.qd_ref);
        }
        sh.publish_safety(&sup, out.changed);
        if last_status.elapsed() >= Duration::from_millis(250) {
            sh.node.set_detail(serde_json::json!({
                "driver": "ideal",
                "cycle": stats.json(),
                "safety": sh.safety_json(&sup),
                "q_deg": q.iter().map(|v| v.to_degrees()).collect::<Vec<_>>(),
            }));
            last_status = Instant::now();
        }
    }

    let out = sup.shutdown(cycle, Some(q_meas));
    if let Some(r) = out.q_ref {
        robot.apply(r, out.qd_ref);
    }
    sh.close(&sup, publisher).await;
    Ok(())
}

/// EGM driver state beyond the pure core.
struct EgmShell {
    sock: UdpSocket,
    core: EgmCore,
    cfg: EgmConfig,
    peer: Option<SocketAddr>,
    /// The controller pinned by `[robot_io.egm] controller` (None: every sender is admitted).
    pin: Option<egm::peer::PeerPin>,
    /// Datagrams from anyone the pin does not admit: dropped before anything else.
    strangers: u64,
    /// The last stranger: its address, the datagram's size and when (s since start).
    last_stranger: Option<(SocketAddr, usize, f64)>,
    malformed: u64,
    last_malformed: Option<String>,
    send_errors: u64,
    recv_errors: u64,
    incomplete_last: Option<String>,
    repeats: u64,
    /// End-to-end latency of the command path and missed cycles.
    lat: crate::latency::CycleLatency,
    /// The reply's encoding buffer (reused: no allocation per datagram).
    tx: [u8; SENSOR_REPLY_MAX],
    /// The supervisor's command timeout (s): a newer command is "streaming".
    command_timeout_s: f64,
}

impl EgmShell {
    /// Whether a datagram from `from` may reach the session: from the pinned controller (or
    /// any sender when unpinned). A stranger's is counted and dropped here, before the
    /// e-stop drain, the session, the supervisor, the reply and the joint state.
    fn admit(&mut self, sh: &Shell, from: SocketAddr, n: usize, rx: Instant) -> bool {
        match self.pin {
            Some(pin) if !pin.admits(from) => {
                self.strangers += 1;
                self.last_stranger = Some((from, n, sh.secs(rx)));
                if self.strangers.is_power_of_two() {
                    tracing::warn!(from = %from, bytes = n, count = self.strangers, pinned = %pin.describe(),
                        "EGM datagram from a stranger dropped (not the pinned controller)");
                }
                false
            }
            _ => true,
        }
    }

    /// Sends a reply to `to`; errors are counted, never fatal.
    async fn send(&mut self, sh: &Shell, reply: &SensorReply, to: SocketAddr) {
        let bytes = reply.encode(&mut self.tx);
        match self.sock.send_to(bytes, to).await {
            Ok(_) => self.core.session.on_reply_sent(sh.secs(Instant::now())),
            Err(e) => {
                self.send_errors += 1;
                tracing::debug!("EGM reply to {to}: {e}");
            }
        }
    }

    /// Handles one datagram: core (decode, session, supervisor), reply to the sender, then
    /// hand the joint state to the publishing task.
    async fn on_datagram(&mut self, sh: &mut Shell, bytes: &[u8], from: SocketAddr, rx: Instant) {
        let rx_ns = clock::mono_ns();
        let rx_s = sh.secs(rx);
        sh.drain_estops(&mut self.core.sup);
        let latest = sh.commands.get();
        let cmd = latest.as_ref().map(|r| (&r.msg, sh.secs(r.at)));
        self.core.set_contact_force(sh.contact_force());
        let h = self.core.on_datagram(bytes, rx_s, cmd);
        if let Some(r) = &h.reply {
            self.send(sh, r, from).await;
        }
        match &h.datagram {
            Datagram::Malformed(e) => {
                self.malformed += 1;
                if self.malformed.is_power_of_two() {
                    tracing::warn!(from = %from, count = self.malformed, "malformed EGM datagram: {e}");
                }
                self.last_malformed = Some(format!("{from}: {e}"));
                return;
            }
            Datagram::Repeat(_) => {
                self.repeats += 1;
                return;
            }
            Datagram::Incomplete(e) => self.incomplete_last = Some(e.to_string()),
            Datagram::Cycle(fb) => {
                let newest = latest.as_ref().map(|r| crate::latency::LatestCommand {
                    cycle: r.msg.cycle,
                    at_ns: r.at_ns,
                    fresh: rx_s - sh.secs(r.at) <= self.command_timeout_s,
                });
                self.lat.on_cycle(h.cycle, rx_ns, newest);
                for ev in &fb.events {
                    match ev {
                        SessionEvent::ControllerStopped(s) if s.mci == MciStateType::Error => {
                            tracing::error!(motor = ?s.motor, rapid = ?s.rapid, seqno = ?fb.seqno,
                                "the EGM controller ended the session with an EGM error (MCI state ERROR: a reference beyond a limit or \\MaxSpeedDeviation, or a session not started from a fine point); its event log says which; the program must be started again")
                        }
                        SessionEvent::ControllerStopped(s) => {
                            tracing::warn!(motor = ?s.motor, mci = ?s.mci, rapid = ?s.rapid, "EGM controller not ready")
                        }
                        other => {
                            tracing::info!(event = ?other, seqno = ?fb.seqno, schema = ?fb.schema, "EGM session")
                        }
                    }
                }
                sh.publish_joints(
                    h.cycle,
                    fb.q_rad,
                    fb.qd_rad_s.unwrap_or([0.0; 6]),
                    fb.status,
                    // Robot time since the previous joint state, lost datagrams included: the
                    // plan advances by it (the controller's per-cycle period left a lost
                    // cycle out, and every loss slipped the commands one cycle behind the
                    // robot time robot-io placed them at).
                    fb.dt_s,
                );
            }
        }
        if self.peer != Some(from) {
            tracing::info!(peer = %from, "EGM controller");
            self.peer = Some(from);
        }
        if let Some(out) = &h.out {
            log_limited(h.cycle, out.limited.as_ref());
        }
        if h.safety_changed {
            tracing::info!(level = ?self.core.sup.level(), reason = ?self.core.sup.reason(), cycle = h.cycle, "safety state");
            sh.persist(&self.core.sup);
        }
        sh.publish_safety(&self.core.sup, h.safety_changed);
    }

    fn status_json(&self, sh: &Shell, silent: bool) -> serde_json::Value {
        let mut egm = self.core.session.stats().json();
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
            o.insert("repeats_resent".into(), self.repeats.into());
            o.insert("references".into(), self.core.reference_stats().json());
            o.insert("send_errors".into(), self.send_errors.into());
            o.insert("recv_errors".into(), self.recv_errors.into());
            o.insert(
                "pinned".into(),
                serde_json::to_value(self.pin.map(|p| p.describe())).unwrap_or_default(),
            );
            o.insert("strangers".into(), self.strangers.into());
            o.insert(
                "last_stranger".into(),
                self.last_stranger
                    .map(|(from, bytes, at_s)| {
                        serde_json::json!({"from": from.to_string(), "bytes": bytes, "at_s": at_s})
                    })
                    .unwrap_or_default(),
            );
        }
        serde_json::json!({
            "driver": "egm",
            "bind": self.cfg.bind,
            "peer": self.peer.map(|p| p.to_string()),
            "silent": silent,
            "cycles": self.core.cycle(),
            "egm": egm,
            "controller": self.core.session.last_states(),
            "schema": self.core.session.schema(),
            "safety": sh.safety_json(&self.core.sup),
            "q_deg": self.core.q_measured().map(|q| q.iter().map(|v| v.to_degrees()).collect::<Vec<_>>()),
            "latency": self.lat.json(),
        })
    }
}

async fn run_egm(
    mut sh: Shell,
    sup: Supervisor,
    cfg: &RobotIoConfig,
    mut shutdown: Shutdown,
    publisher: tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    let egm = cfg.egm.clone();
    let addr = egm
        .bind_addr()
        .map_err(|e| anyhow::anyhow!("robot_io.egm.bind: {e}"))?;
    let sock = UdpSocket::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("EGM: cannot bind UDP {addr}: {e}"))?;
    let pin = egm
        .controller_pin()
        .map_err(|e| anyhow::anyhow!("robot_io.egm.controller: {e}"))?;
    match pin {
        Some(p) => {
            tracing::info!(bind = %sock.local_addr().unwrap_or(addr), controller = %p.describe(), "EGM driver listening (pinned controller)")
        }
        None => tracing::warn!(bind = %sock.local_addr().unwrap_or(addr),
            "EGM driver listening UNPINNED: any host that reaches this port can drive the session and feed joint states; set robot_io.egm.controller"),
    }
    sh.node.set_state("waiting for the EGM controller");
    let mut e = EgmShell {
        sock,
        core: EgmCore::new(
            EgmSession::new(SessionParams {
                nominal_cycle_s: cfg.cycle_ms * 1e-3,
                silence_timeout_s: egm.silence_timeout_ms * 1e-3,
                send_speed_ref: egm.send_speed_ref,
            }),
            sup,
        ),
        cfg: egm.clone(),
        peer: None,
        pin,
        strangers: 0,
        last_stranger: None,
        malformed: 0,
        last_malformed: None,
        send_errors: 0,
        recv_errors: 0,
        incomplete_last: None,
        repeats: 0,
        tx: [0; SENSOR_REPLY_MAX],
        lat: crate::latency::CycleLatency::new()
            .with_nominal_period_ns((cfg.cycle_ms * 1e6).round() as u64),
        command_timeout_s: cfg.command_timeout_ms * 1e-3,
    };
    // Housekeeping: e-stops between datagrams, silence detection, periodic safety state,
    // status.
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
                    if e.admit(&sh, from, n, rx) {
                        let bytes = buf.get(..n).unwrap_or(&[]);
                        e.on_datagram(&mut sh, bytes, from, rx).await;
                    }
                }
                Err(err) => {
                    // e.g. ICMP port unreachable reported on a later receive: not fatal.
                    e.recv_errors += 1;
                    tracing::debug!("EGM receive: {err}");
                }
            },
            _ = house.tick() => {
                sh.drain_estops(&mut e.core.sup);
                let now_s = sh.secs(Instant::now());
                let (silent, changed) = e.core.check_silent(now_s);
                if changed {
                    tracing::warn!(timeout_ms = egm.silence_timeout_ms, "EGM robot silent: holding");
                }
                if silent != was_silent {
                    sh.node.set_state(if silent { "robot silent" } else { "running" });
                    was_silent = silent;
                }
                // Between datagrams too, so that the 10 Hz state keeps flowing while the robot
                // is silent (an e-stop was acknowledged by `drain_estops` already).
                if silent || changed {
                    sh.publish_safety(&e.core.sup, changed);
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
    e.core.shutdown();
    let _ = tokio::time::timeout(deadline, async {
        loop {
            let Ok((n, from)) = e.sock.recv_from(&mut buf).await else {
                continue;
            };
            if !e.admit(&sh, from, n, Instant::now()) {
                continue;
            }
            let rx_s = sh.secs(Instant::now());
            if let Some(r) = e
                .core
                .on_datagram_shutdown(buf.get(..n).unwrap_or(&[]), rx_s)
            {
                e.send(&sh, &r, from).await;
                break;
            }
        }
    })
    .await;
    sh.node.set_detail(e.status_json(&sh, true));
    sh.close(&e.core.sup, publisher).await;
    Ok(())
}

/// The service's process entry: config (every problem listed, exit 2), tracing, runtime, bus,
/// then [`run`]. Both `cell-robot-io` and the multi-call `cell service robot-io` (what `cell up` starts)
/// call it, so the two cannot differ.
pub fn service_main(
    cfg: common::service::ConfigArgs,
    bus: common::bus::BusArgs,
) -> std::process::ExitCode {
    common::service::run_service_rt(
        "robot-io",
        bus,
        cfg,
        |l| {
            let rio: crate::config::RobotIoConfig = l.section("robot_io");
            let arm: kinematics::config::ArmSection = l.section("arm");
            let limits = arm
                .params()
                .map(|p| p.limits)
                .unwrap_or(kinematics::JointLimits::irb120());
            // The clamp release's Jacobian (the kinematics service refuses a bad `[arm]`).
            let model = arm.build().ok();
            let rt = rio.rt.clone();
            ((rio, limits, model), rt)
        },
        crate::node::run,
    )
}

/// A force estimate older than this is not a clamp release's input (the release holds).
const CLAMP_FORCE_MAX_AGE: Duration = Duration::from_millis(50);

/// A JSON number, or null when not finite (JSON has no NaN).
fn finite_or_null(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else {
        serde_json::Value::Null
    }
}

/// Logs one limited reply (a reply that differs from its command) with the bound that acted:
/// `RUST_LOG=robot_io=debug`; counted in the status's `detail.safety` either way.
fn log_limited(cycle: u64, e: Option<&crate::supervisor::LimitedEvent>) {
    if let Some(e) = e {
        tracing::debug!(
            cycle,
            robot_time_s = e.robot_time_s,
            motion = e.motion_id,
            bound = ?e.binding.kind,
            joint = e.binding.joint + 1,
            v_des_deg_s = e.binding.v_des.to_degrees(),
            v_deg_s = e.binding.v.to_degrees(),
            v_prev_deg_s = e.binding.v_prev.to_degrees(),
            per_joint = e.per_joint,
            "limited reply"
        );
    }
}
