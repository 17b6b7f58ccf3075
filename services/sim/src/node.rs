//! `cell-sim`'s shell: one 1 kHz base-tick loop drives everything — the EGM controller
//! emulator on UDP, the world and its true F/T wrench, the Raibert–Craig plant on the bus —
//! plus one F/T sensor emulator (SRI box on TCP or ATI Net F/T on UDP/HTTP) fed by the world,
//! and two JSON queryables: `cell/<id>/sim/rpc/fault` (faults and injected forces) and
//! `cell/<id>/sim/rpc/scenario` (load/reset/set/arm the scenario, see [`crate::scenario`]).
//!
//! # Time base
//! One 1 ms tick from a thread of its own (absolute deadlines; missed ticks skipped). Each tick that runs advances the
//! simulator by exactly one base tick: the servo integrates 1 ms, scenario time advances 1 ms
//! (the world's surfaces, triggers and hand, and the plant, all on that time), the true
//! wrench the sensor emulator reads is updated. Every `cycle_ms / 1 ms` ticks an EGM cycle
//! starts (the newest reply becomes the reference) and ends with an `EgmRobot` datagram whose
//! `tm` advances by `cycle_ms` per cycle. A host that misses wall-clock ticks runs fewer
//! ticks: simulated time then runs slower than wall time (reported as `wall_minus_sim_s` in
//! the status), but every part of the simulator sees the same time.
//!
//! The plant's effort commands come from another process; their staleness is judged on wall
//! time since arrival (`[sim.plant] command_timeout_ms`).

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use common::{
    bus::Node,
    config::{check_range, ConfigErrors, Validate},
    loopwatch::LoopWatch,
    service::Shutdown,
};
use kinematics::{Arm, Wrench};
use nalgebra::Vector3;
use serde::{Deserialize, Serialize};
use tokio::{net::UdpSocket, sync::watch};
use zenoh::{query::Query, Wait};

use crate::{
    controller::Controller,
    scenario::{PlantRuntime, PlantTick, Request, Scenario, BASE_TICK_S},
    sensor::{ati::AtiEmulatorConfig, sri::SriEmulatorConfig, Truth},
    world::{tcp_base_wrench_to_sensor, SensorTruth, WorldConfig},
};

/// The base tick in ms (every period of the simulator is a whole number of these).
pub const BASE_TICK_MS: f64 = 1.0;

/// The fault queryable's key.
pub fn fault_rpc_key(cell_id: &str) -> String {
    format!("cell/{cell_id}/sim/rpc/fault")
}

/// The scenario queryable's key.
pub fn scenario_rpc_key(cell_id: &str) -> String {
    format!("cell/{cell_id}/sim/rpc/scenario")
}

/// Which F/T device the simulator emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SimSensor {
    None,
    #[default]
    Sri,
    Ati,
}

/// `[sim.egm]`: the emulated IRC5's EGM side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgmSimConfig {
    /// Where the controller sends `EgmRobot` (robot-io's `[robot_io.egm] bind`).
    pub robot_io: String,
    /// The controller's own UDP address.
    pub bind: String,
    /// Controller cycle (ms): 4 like IRC5; down to 1 for stress tests. A whole number of 1 ms
    /// base ticks.
    pub cycle_ms: f64,
    /// Start position (deg).
    pub initial_q_deg: [f64; 6],
    /// The IRC5 side the emulator runs: a directory with `CellEgm.mod`, `SIO_cell.cfg` and
    /// `MOC_cell.cfg` (relative to the config file). Unset: the files built in from the
    /// checkout's `deploy/irc5/`. Its session timing (communication timeout, ramps, restart
    /// wait) is the emulator's; `cycle_ms` stays this section's (tests/deploy.rs holds the
    /// shipped configs to `\SampleRate`).
    pub irc5: Option<String>,
    /// The emulated controller's reply queue (R9 in `controller`): with N ≥ 1 replies are read
    /// in arrival order, one per cycle, and an arrival to a full queue is dropped (counted,
    /// `egm.reply_queue_drops`); 0 (the default) reads the newest reply of each cycle. The
    /// real controller's behaviour is not public. The default stays 0 because this simulator
    /// reads a cycle's reply 1 ms after sending its `EgmRobot` (a PC answering a real IRC5 has
    /// nearly the whole 4 ms cycle), so its replies are late far more often than on a real
    /// cell, and both queue lengths then add artefacts (measured, docs/commissioning.md §2):
    /// with 2 one late reply at start-up kept every later one a cycle behind (+4 ms of lag for
    /// the run); with 1 a late reply's successor is dropped, the next reference steps two
    /// replies in one cycle, and a joint moving at robot-io's cap (= `\MaxSpeedDeviation`)
    /// then ends the session with an EGM error.
    pub reply_queue: usize,
    /// Emulated loss of EgmRobot datagrams (0..1).
    pub packet_loss: f64,
    /// Emulated send jitter: uniform extra delay in [0, jitter_ms] (ms).
    pub jitter_ms: f64,
    pub seed: u64,
}

impl EgmSimConfig {
    /// The IRC5 side's EGM session (`irc5`, or the built-in files).
    pub fn irc5(&self) -> Result<irc5::Irc5Egm, Vec<String>> {
        match &self.irc5 {
            Some(dir) => irc5::Irc5Egm::load_dir(&common::config::resolve_path(dir)),
            None => irc5::Irc5Egm::builtin(),
        }
    }

    /// The session part of [`EgmSimConfig::irc5`], errors joined.
    pub fn irc5_session(&self) -> anyhow::Result<irc5::EgmSession> {
        self.irc5()
            .map(|i| i.session)
            .map_err(|e| anyhow::anyhow!("sim.egm.irc5: {}", e.join("; ")))
    }
}

impl Default for EgmSimConfig {
    fn default() -> Self {
        Self {
            robot_io: "127.0.0.1:6510".into(),
            bind: "127.0.0.1:6511".into(),
            cycle_ms: 4.0,
            initial_q_deg: [0.0, 0.0, 0.0, 0.0, 30.0, 0.0],
            irc5: None,
            reply_queue: 0,
            packet_loss: 0.0,
            jitter_ms: 0.0,
            seed: 1,
        }
    }
}

/// `[sim.plant]`: the Raibert–Craig 2-DOF plant, driven by effort commands over the bus. The
/// plant steps every 1 ms base tick (integrating internally at its own ≥ 10 kHz rate) on the
/// simulator's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlantSimConfig {
    pub enabled: bool,
    /// Rate at which the plant's state is published (Hz): 1000 / a whole number of base
    /// ticks (1000, 500, 250, …).
    pub rate_hz: f64,
    /// An effort command older than this (wall time since it arrived; commands come from
    /// another process) is stale → zero effort (ms). 40 ms ≥ 2 periods of the slowest
    /// documented law (60 Hz). Settable at run time (`plant.command_timeout_ms`).
    pub command_timeout_ms: f64,
    /// White noise on the published wrist force (N, standard deviation per axis). Raibert &
    /// Craig do not give their wrist sensor's noise: 0.05 N is an assumption (a good strain-gauge
    /// wrist sensor). Settable at run time (`plant.wrist_force_noise_std_n`); 0 = perfect.
    pub wrist_force_noise_std_n: f64,
    /// Seed of that noise (reseeded on every scenario reset, so a reset experiment repeats).
    pub noise_seed: u64,
}

impl Default for PlantSimConfig {
    fn default() -> Self {
        let rt = PlantRuntime::default();
        Self {
            enabled: false,
            rate_hz: 1000.0,
            command_timeout_ms: rt.command_timeout_ms,
            wrist_force_noise_std_n: rt.wrist_force_noise_std_n,
            noise_seed: 1,
        }
    }
}

impl PlantSimConfig {
    /// The settings that may change at run time.
    pub fn runtime(&self) -> PlantRuntime {
        PlantRuntime {
            command_timeout_ms: self.command_timeout_ms,
            wrist_force_noise_std_n: self.wrist_force_noise_std_n,
        }
    }
}

/// `[sim]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// World scenario file (TOML, see `deploy/config/scenarios/`; a relative path is relative
    /// to the cell config's directory); none = free space with the default tool.
    pub scenario: Option<String>,
    pub egm: EgmSimConfig,
    pub sensor: SimSensor,
    pub sri: SriEmulatorConfig,
    pub ati: AtiEmulatorConfig,
    pub plant: PlantSimConfig,
}

/// The base tick on its own thread, by absolute deadlines (timer slack 1 µs): tokio's timer
/// wheel has a 1 ms granularity, which at a 1 ms EGM cycle delivered the ticks in bursts
/// (10 % of the controller's messages came within 65 µs of the previous one, `cell bench
/// latency --rate 1000`). A tick the loop has not taken yet is not queued twice, and a late
/// thread skips the deadlines it missed (the loop's "missed ticks skipped"). The thread ends
/// with the receiver.
fn precise_ticks(period: Duration) -> anyhow::Result<tokio::sync::mpsc::Receiver<()>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::Builder::new()
        .name("sim-tick".into())
        .spawn(move || {
            // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64);
            }
            let mut next = Instant::now();
            loop {
                next += period;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else if now.duration_since(next) > period {
                    // Woken this late: the thread was not scheduled (or the whole process).
                    let late = now.duration_since(next);
                    if late.as_nanos() > u128::from(common::watchdog::GAP_NS) {
                        tracing::warn!(
                            "the sim's tick thread woke {:.1} ms late",
                            late.as_secs_f64() * 1e3
                        );
                    }
                    next = now;
                }
                if let Err(tokio::sync::mpsc::error::TrySendError::Closed(())) = tx.try_send(()) {
                    break;
                }
            }
        })
        .map_err(|e| anyhow::anyhow!("starting the tick thread: {e}"))?;
    Ok(rx)
}

/// Base ticks in `period_ms` when it is a whole number of them.
fn whole_ticks(period_ms: f64) -> Option<u64> {
    let n = (period_ms / BASE_TICK_MS).round();
    (period_ms.is_finite() && n >= 1.0 && (period_ms - n * BASE_TICK_MS).abs() < 1e-9)
        .then_some(n as u64)
}

impl Validate for SimConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        let e = &self.egm;
        for (k, v) in [("robot_io", &e.robot_io), ("bind", &e.bind)] {
            if v.parse::<SocketAddr>().is_err() {
                errors.push(
                    format!("{prefix}.egm.{k}"),
                    format!("{v:?} is not an ip:port"),
                );
            }
        }
        check_range(
            errors,
            format!("{prefix}.egm.cycle_ms"),
            e.cycle_ms,
            1.0,
            100.0,
            "ms",
        );
        if let Err(errs) = e.irc5() {
            for x in errs {
                errors.push(format!("{prefix}.egm.irc5"), x);
            }
        }
        if e.cycle_ms.is_finite() && whole_ticks(e.cycle_ms).is_none() {
            errors.push(
                format!("{prefix}.egm.cycle_ms"),
                format!(
                    "must be a whole number of the simulator's 1 ms base ticks (1, 2, 4, …; got {})",
                    e.cycle_ms
                ),
            );
        }
        check_range(
            errors,
            format!("{prefix}.egm.packet_loss"),
            e.packet_loss,
            0.0,
            1.0,
            "",
        );
        check_range(
            errors,
            format!("{prefix}.egm.jitter_ms"),
            e.jitter_ms,
            0.0,
            100.0,
            "ms",
        );
        let p = &self.plant;
        check_range(
            errors,
            format!("{prefix}.plant.rate_hz"),
            p.rate_hz,
            1.0,
            1000.0,
            "Hz",
        );
        if p.rate_hz.is_finite() && p.rate_hz > 0.0 && whole_ticks(1000.0 / p.rate_hz).is_none() {
            errors.push(
                format!("{prefix}.plant.rate_hz"),
                format!(
                    "the period must be a whole number of 1 ms base ticks (1000, 500, 250, … Hz; got {} Hz)",
                    p.rate_hz
                ),
            );
        }
        for m in p.runtime().validate(&format!("{prefix}.plant")) {
            let (key, problem) = m.split_once(": ").unwrap_or((m.as_str(), ""));
            errors.push(key.to_string(), problem.to_string());
        }
        for (dev, imp) in [
            ("sri", &self.sri.imperfections),
            ("ati", &self.ati.imperfections),
        ] {
            for m in imp.validate(&format!("{prefix}.{dev}.imperfections")) {
                let (key, problem) = m.split_once(": ").unwrap_or((m.as_str(), ""));
                errors.push(key.to_string(), problem.to_string());
            }
        }
        if let Some(s) = &self.scenario {
            if let Err(errs) = WorldConfig::load_file(&common::config::resolve_path(s)) {
                for x in errs {
                    errors.push(format!("{prefix}.scenario"), x);
                }
            }
        }
    }
}

/// Faults and injections settable at run time.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    pub packet_loss: f64,
    pub jitter_ms: f64,
    /// Probability that an EGM datagram is overtaken by the next one (held back one datagram
    /// and delivered after it), in each direction: the controller's `EgmRobot` to robot-io, and
    /// robot-io's `EgmSensor` to the controller (which applies the reference that arrives
    /// last, as a receiver that does not check `seqno`).
    pub egm_reorder: f64,
    /// Probability that an EGM datagram is delivered twice, in each direction.
    pub egm_duplicate: f64,
    /// The operator's program stop while true (RAPID stopped, no EGM); false again continues
    /// the program (its next session, from the fine point).
    pub controller_stopped: bool,
    /// The motors are off while true (an e-stop, the enabling device): RAPID stops.
    pub motors_off: bool,
    /// The operator presses Start: each change to a new value is one press (after motors off
    /// with `-do_not_restart_after_motors_off`, or after the routine ended).
    pub program_start: u32,
    /// The module's stop trap (`cell_egm_run := FALSE` → `EGMStop`): each change to a new
    /// value is one.
    pub egm_stop: u32,
    /// The sensor emulator is "unplugged" (its server is down) while true.
    pub sensor_unplugged: bool,
    /// The sensor box hangs (connections open, nothing sent) while true: a frozen box, where
    /// `sensor_unplugged` is a dead one.
    pub sensor_frozen: bool,
    /// The box reads full scale on every axis (saturated) while true.
    pub sensor_saturated: bool,
    /// The box sends NaN while true (the calibrated float format only; raw counts cannot).
    pub sensor_nan: bool,
    /// A spike on the box's readings (N, N·m): added to 3 readings each time this is set to a
    /// new non-zero value.
    pub sensor_spike: [f64; 6],
    /// The box's zero drifts at this rate (N/s, N·m/s) while non-zero; the offset it built up
    /// stays (a tare takes it out) until the box is unplugged (power-cycled).
    pub sensor_drift_per_s: [f64; 6],
    /// Extra force on the tool at the TCP, base axes (N): a known contact.
    pub external_force_base_n: [f64; 3],
}

/// Small deterministic PRNG (xorshift64*), for loss and jitter.
struct Rng(u64);
impl Rng {
    fn next_f64(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Reads a scenario file for the scenario RPC: a name from the scenario directory under the
/// cell config's directory ([`crate::scenario::files`]), never a path.
fn read_scenario_file(request: &str) -> Result<(String, String), String> {
    let dir = common::config::config_dir().unwrap_or_default();
    let path = crate::scenario::files::scenario_file(&dir, request)?;
    let shown = path.display().to_string();
    std::fs::read_to_string(&path)
        .map(|t| (t, shown.clone()))
        .map_err(|e| format!("{shown}: {e}"))
}

/// Records a section of the tick loop that began at `from_ns` and ends now; one longer than
/// the watchdog's gap bound is also logged (the loop is the emulated IRC5: it must not pause).
fn timed(watch: &mut LoopWatch, section: &str, from_ns: u64) {
    note(watch, section, from_ns, common::clock::mono_ns());
}

/// [`timed`] for a section that ended at `to_ns`.
fn note(watch: &mut LoopWatch, section: &str, from_ns: u64, to_ns: u64) {
    watch.section(section, from_ns, to_ns);
    let ms = to_ns.saturating_sub(from_ns) as f64 * 1e-6;
    if to_ns.saturating_sub(from_ns) > common::watchdog::GAP_NS {
        tracing::warn!("the EGM loop spent {ms:.1} ms in {section}");
    }
}

/// Sends a scenario reply off the tick loop: a reply waits on zenoh's reliable queue
/// (`Block`), and the loop that emulates the IRC5 must never wait on the bus.
fn reply_json(q: Query, v: &serde_json::Value) {
    let body = v.to_string();
    tokio::spawn(async move {
        let r = q
            .reply(q.key_expr().clone(), body)
            .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
            .await;
        if let Err(e) = r {
            tracing::debug!("scenario reply: {e}");
        }
    });
}

/// [`reply_json`] for a refused request.
fn reply_error(q: Query, errors: &[String], scenario: &serde_json::Value) {
    let body = serde_json::json!({
        "error": errors.join("; "),
        "errors": errors,
        "scenario": scenario,
    })
    .to_string();
    tokio::spawn(async move {
        if let Err(e) = q
            .reply_err(body)
            .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
            .await
        {
            tracing::debug!("scenario reply: {e}");
        }
    });
}

/// Answers one scenario RPC: applies it (nothing changes unless all of it is valid), passes a
/// servo change on to the controller, replies with the summary or the errors (sent off the
/// loop).
fn answer_scenario(q: Query, scenario: &mut Scenario, ctl: &mut Controller) {
    let body = q
        .payload()
        .map(|p| p.to_bytes().into_owned())
        .unwrap_or_default();
    let res = Request::parse(&body)
        .map_err(|e| vec![e])
        .and_then(|req| scenario.apply(&req, &read_scenario_file));
    match res {
        Ok(applied) => {
            if let Some(p) = applied.servo {
                ctl.set_servo_params(p);
            }
            reply_json(q, &scenario.summary());
        }
        Err(errors) => {
            tracing::info!("scenario request refused: {}", errors.join("; "));
            reply_error(q, &errors, &scenario.summary());
        }
    }
}

/// The plant's bus side.
struct PlantIo {
    cmds: common::bus::Latest<common::msg::PlantEffortCommand>,
    state_pub: common::bus::Publisher<common::msg::PlantState>,
    publish_every: u64,
    stale_ticks: u64,
    last: Option<PlantTick>,
}

impl PlantIo {
    /// The newest command and its age (s, wall time since arrival).
    fn command(&self) -> Option<([f64; 2], f64)> {
        self.cmds
            .get()
            .map(|c| (c.msg.effort, c.at.elapsed().as_secs_f64()))
    }

    fn publish(&mut self, p: &PlantTick) {
        let st = &p.state;
        let msg = common::msg::PlantState {
            stamp: self.state_pub.next_stamp(),
            t_s: st.t,
            q: st.q,
            qd: st.qd,
            hand_pos_m: st.hand_pos,
            wrist_force_n: p.wrist_force_measured,
            contact_force_n: st.contact_force,
            in_contact: st.in_contact,
            effort_applied: st.torque_applied,
        };
        self.state_pub.put(&msg);
    }
}

/// Sends `EgmRobot` datagrams off the tick loop when they are delayed (jitter), in order.
/// Each delayed datagram leaves at its own deadline (when it was built + its delay) or right
/// after the one before it, whichever is later: late by at most its delay plus what the one
/// before it was, so never by more than the largest delay. (Until 2026-12-06 the sender slept
/// each delay *after* the previous datagram had gone: the delays added up, and at
/// `jitter_ms` = 8 — a mean of 4 ms per 4 ms cycle — the queue grew without bound, the
/// datagrams arriving seconds late; at 6 ms, mean 3 ms, it queued up at times.)
struct EgmSender {
    sock: Arc<UdpSocket>,
    target: SocketAddr,
    delayed: tokio::sync::mpsc::UnboundedSender<(Vec<u8>, tokio::time::Instant)>,
    in_flight: Arc<AtomicUsize>,
    sent: Arc<AtomicU64>,
    /// The delayed sender's lateness past a datagram's deadline: the largest (ns) and how
    /// many were later than the watchdog's gap bound (a starved runtime would show here).
    late_max_ns: Arc<AtomicU64>,
    late_over_gap: Arc<AtomicU64>,
}

impl EgmSender {
    fn new(sock: Arc<UdpSocket>, target: SocketAddr) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) =
            tokio::sync::mpsc::unbounded_channel::<(Vec<u8>, tokio::time::Instant)>();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let late_max_ns = Arc::new(AtomicU64::new(0));
        let late_over_gap = Arc::new(AtomicU64::new(0));
        let task = {
            let (sock, in_flight, sent) = (sock.clone(), in_flight.clone(), sent.clone());
            let (late_max_ns, late_over_gap) = (late_max_ns.clone(), late_over_gap.clone());
            tokio::spawn(async move {
                while let Some((bytes, deadline)) = rx.recv().await {
                    tokio::time::sleep_until(deadline).await;
                    let late = tokio::time::Instant::now().saturating_duration_since(deadline);
                    let late_ns = late.as_nanos().min(u64::MAX as u128) as u64;
                    late_max_ns.fetch_max(late_ns, Ordering::Relaxed);
                    if late_ns > common::watchdog::GAP_NS {
                        late_over_gap.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            "delayed EgmRobot left {:.1} ms after its deadline",
                            late_ns as f64 * 1e-6
                        );
                    }
                    if sock.send_to(&bytes, target).await.is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                }
            })
        };
        (
            Self {
                sock,
                target,
                delayed: tx,
                in_flight,
                sent,
                late_max_ns,
                late_over_gap,
            },
            task,
        )
    }

    /// Sends now (the tick loop never waits for a delayed datagram); with a delay, or while
    /// delayed datagrams are queued (order is kept), through the sender task.
    fn send(&self, bytes: Vec<u8>, delay: Duration) {
        if delay.is_zero() && self.in_flight.load(Ordering::Relaxed) == 0 {
            match self.sock.try_send_to(&bytes, self.target) {
                Ok(_) => {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    tracing::debug!("EGM send: {e}");
                    return;
                }
            }
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + delay;
        if self.delayed.send((bytes, deadline)).is_err() {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// The delayed sender's record, for the status.
    fn lateness(&self) -> serde_json::Value {
        serde_json::json!({
            "late_max_ms": self.late_max_ns.load(Ordering::Relaxed) as f64 * 1e-6,
            "late_over_gap": self.late_over_gap.load(Ordering::Relaxed),
        })
    }
}

/// The true wrench at the sensor plus an injected external force at the TCP (base axes).
fn with_external(truth: &SensorTruth, ext_base_n: [f64; 3]) -> [f64; 6] {
    let mut w = truth.wrench;
    let ext = Vector3::from(ext_base_n);
    if ext.norm() > 0.0 {
        let e = tcp_base_wrench_to_sensor(
            &Wrench::new(ext, Vector3::zeros()),
            &truth.tcp_in_base,
            &truth.sensor_in_base,
        );
        w = Wrench::new(w.force + e.force, w.torque + e.torque);
    }
    [
        w.force.x, w.force.y, w.force.z, w.torque.x, w.torque.y, w.torque.z,
    ]
}

fn truth_detail(t: &SensorTruth) -> serde_json::Value {
    let p = t.tcp_in_base.translation.vector;
    serde_json::json!({
        "tcp_m": [p.x, p.y, p.z],
        "contact_force_base_n": t.contact_force_base,
        "contact_torque_tcp_base_nm": [t.contact_wrench_tcp_base.torque.x,
            t.contact_wrench_tcp_base.torque.y, t.contact_wrench_tcp_base.torque.z],
        "contacts": t.contacts,
        "penetration_m": t.penetration_m,
        "hand_active": t.hand_active,
        "hand_force_base_n": t.hand_force_base,
        "hand_target_base_m": t.hand_target_base,
        "hand_pos_base_m": t.hand_pos_base,
        "com_accel_base_m_s2": t.com_accel_base,
    })
}

fn plant_detail(io: &PlantIo) -> serde_json::Value {
    match &io.last {
        None => serde_json::Value::Null,
        Some(p) => {
            let st = &p.state;
            serde_json::json!({
                "t_s": st.t,
                "q": st.q,
                "qd": st.qd,
                "hand_pos_m": st.hand_pos,
                "hand_vel_m_s": st.hand_vel,
                "wrist_force_true_n": st.wrist_force,
                "wrist_force_measured_n": p.wrist_force_measured,
                "contact_force_n": st.contact_force,
                "in_contact": st.in_contact,
                "penetration_m": st.penetration,
                "surface_offset_m": st.surface_offset,
                "effort_applied": st.torque_applied,
                "command_stale": p.command_stale,
                "stale_ticks": io.stale_ticks,
            })
        }
    }
}

pub async fn run(node: Node, cfg: (SimConfig, Arm), mut shutdown: Shutdown) -> anyhow::Result<()> {
    let (cfg, arm) = cfg;
    let (world_cfg, source) = match &cfg.scenario {
        Some(s) => {
            let path = common::config::resolve_path(s);
            let c = WorldConfig::load_file(&path).map_err(|e| anyhow::anyhow!(e.join("; ")))?;
            (c, path.display().to_string())
        }
        None => (
            WorldConfig::default(),
            "free space (no [sim] scenario)".into(),
        ),
    };
    let mut scenario = Scenario::new(
        world_cfg,
        source,
        arm.clone(),
        cfg.plant.enabled,
        cfg.plant.runtime(),
        cfg.plant.noise_seed,
    )
    .map_err(|e| anyhow::anyhow!(e.join("; ")))?;
    let q0 = cfg.egm.initial_q_deg.map(f64::to_radians);
    let irc5 = cfg
        .egm
        .irc5()
        .map_err(|e| anyhow::anyhow!("sim.egm.irc5: {}", e.join("; ")))?;
    // The cell's taught home is where this simulated arm starts (`initial_q_deg`): the
    // routine's first move goes there (tests/deploy.rs holds the shipped module's `cell_home`
    // to the shipped config's).
    let mut ctl = Controller::new(
        scenario.world().servo(q0),
        crate::controller::SessionParams::from_irc5(&irc5, q0, cfg.egm.reply_queue),
    );
    if let Some(e) = ctl.last_error {
        tracing::error!(error = ?e, rapid = %ctl.rapid_label(), "emulated IRC5: EGM error");
    }
    // The controller's real-time clock (feedBack.time): the host's, read once at `tm` 0.
    ctl.set_clock_epoch_us(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    );
    let ticks_per_cycle = whole_ticks(cfg.egm.cycle_ms)
        .ok_or_else(|| anyhow::anyhow!("sim.egm.cycle_ms: not a whole number of base ticks"))?;
    let cycle_s = cfg.egm.cycle_ms * 1e-3;

    let faults = Arc::new(Mutex::new(Faults {
        packet_loss: cfg.egm.packet_loss,
        jitter_ms: cfg.egm.jitter_ms,
        ..Default::default()
    }));
    // The newest true wrench at the sensor (sensor frame, N and N·m), updated every base tick.
    let truth_now = Arc::new(Mutex::new([0.0f64; 6]));

    // Fault queryable: GET with a JSON body merges fields into the faults; answers the faults.
    let f2 = faults.clone();
    let fault_key = fault_rpc_key(&node.cell_id);
    let reply_key = fault_key.clone();
    let _fault_q = node
        .session
        .declare_queryable(fault_key.clone())
        .callback(move |q| {
            let body = q
                .payload()
                .map(|p| p.to_bytes().into_owned())
                .unwrap_or_default();
            let result = (|| -> Result<Faults, String> {
                let mut f = f2.lock().map_err(|_| "poisoned".to_string())?;
                if !body.is_empty() {
                    let mut cur = serde_json::to_value(*f).map_err(|e| e.to_string())?;
                    let patch: serde_json::Value =
                        serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))?;
                    let obj = patch.as_object().ok_or("expected a JSON object")?;
                    for (k, v) in obj {
                        if cur.get(k).is_none() {
                            return Err(format!("unknown fault {k:?}"));
                        }
                        cur[k] = v.clone();
                    }
                    let new: Faults = serde_json::from_value(cur).map_err(|e| e.to_string())?;
                    if !(0.0..=1.0).contains(&new.packet_loss)
                        || !(0.0..=1.0).contains(&new.egm_reorder)
                        || !(0.0..=1.0).contains(&new.egm_duplicate)
                        || !(0.0..=100.0).contains(&new.jitter_ms)
                        || !new.external_force_base_n.iter().all(|v| v.is_finite())
                    {
                        return Err("packet_loss, egm_reorder, egm_duplicate in [0,1], \
                             jitter_ms in [0,100], forces finite"
                            .into());
                    }
                    *f = new;
                }
                Ok(*f)
            })();
            let r = match result {
                Ok(f) => q
                    .reply(reply_key.clone(), serde_json::json!(f).to_string())
                    .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
                    .wait(),
                Err(e) => q
                    .reply_err(serde_json::json!({ "error": e }).to_string())
                    .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
                    .wait(),
            };
            if let Err(e) = r {
                tracing::debug!("fault reply: {e}");
            }
        })
        .await
        .map_err(|e| anyhow::anyhow!("queryable {fault_key}: {e}"))?;
    // Scenario queryable: answered inside the tick loop, which owns the scenario.
    let scenario_key = scenario_rpc_key(&node.cell_id);
    let scenario_q = node
        .session
        .declare_queryable(scenario_key.clone())
        .await
        .map_err(|e| anyhow::anyhow!("queryable {scenario_key}: {e}"))?;
    let _presence = node.announce().await?;

    // Sensor emulator, restartable ("unplug"/"plug").
    let truth: Truth = {
        let t = truth_now.clone();
        Arc::new(move |_t| t.lock().map(|g| *g).unwrap_or([0.0; 6]))
    };
    let (plug_tx, plug_rx) = watch::channel(true);
    let box_faults = crate::sensor::BoxFaults::default();
    let sensor_task = tokio::spawn(sensor_supervisor(
        cfg.clone(),
        truth,
        box_faults.clone(),
        plug_rx,
    ));

    // The 2-DOF plant's bus side (the plant itself is in the scenario, on the base tick).
    let mut plant_io = if cfg.plant.enabled {
        Some(PlantIo {
            cmds: node.latest(common::topic::PLANT_EFFORT).await?,
            state_pub: node.publisher(common::topic::PLANT_STATE).await?,
            publish_every: whole_ticks(1000.0 / cfg.plant.rate_hz).unwrap_or(1),
            stale_ticks: 0,
            last: None,
        })
    } else {
        None
    };

    // Ground truth for scoring (never a control input).
    let mut truth_pub = node.publisher(common::topic::SIM_TRUTH).await?;

    // EGM controller.
    let sock = Arc::new(UdpSocket::bind(&cfg.egm.bind).await?);
    let target: SocketAddr = cfg.egm.robot_io.parse()?;
    let (egm_out, egm_task) = EgmSender::new(sock.clone(), target);
    let mut tick = precise_ticks(Duration::from_secs_f64(BASE_TICK_S))?;
    let started = Instant::now();
    let mut rng = Rng(cfg.egm.seed.max(1));
    let mut buf = vec![0u8; 4096];
    let mut dropped = 0u64;
    // Reordering and duplicates (faults `egm_reorder`, `egm_duplicate`): the datagram held
    // back in each direction, and the counts.
    let mut held_robot: Option<Vec<u8>> = None;
    let mut held_reply: Option<Vec<u8>> = None;
    let (mut reordered, mut duplicated) = (0u64, 0u64);
    let mut last_status = Instant::now();
    let mut last_truth = [0.0; 6];
    let mut last_world: Option<SensorTruth> = None;
    let mut base_ticks: u64 = 0;
    let mut cycles: u64 = 0;
    let mut peak_joint_speed_ratio: f64 = 0.0;
    // The largest true contact force on the tool since start (N): what a fault that also took
    // the bus away (a frozen or killed router) can still be scored on.
    let mut contact_force_peak_n: f64 = 0.0;
    let mut last_spike = [0.0; 6];
    let (mut last_start, mut last_egm_stop) = (0u32, 0u32);
    let mut watch = LoopWatch::default();
    let mono = common::clock::mono_ns;
    let mut last_tick_ns: Option<u64> = None;

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(()) = tick.recv() => {}
            r = sock.recv_from(&mut buf) => {
                let t0 = mono();
                if let Ok((n, _from)) = r {
                    let f = faults.lock().map(|g| *g).unwrap_or_default();
                    let bytes = &buf[..n];
                    if held_reply.is_none() && f.egm_reorder > 0.0 && rng.next_f64() < f.egm_reorder {
                        held_reply = Some(bytes.to_vec());
                        reordered += 1;
                    } else {
                        ctl.apply_reply(bytes);
                        if f.egm_duplicate > 0.0 && rng.next_f64() < f.egm_duplicate {
                            ctl.apply_reply(bytes);
                            duplicated += 1;
                        }
                        if let Some(late) = held_reply.take() {
                            ctl.apply_reply(&late);
                        }
                    }
                }
                timed(&mut watch, "EgmSensor receive", t0);
                continue;
            }
            Ok(query) = scenario_q.recv_async() => {
                let t0 = mono();
                answer_scenario(query, &mut scenario, &mut ctl);
                timed(&mut watch, "scenario request", t0);
                continue;
            }
        }
        let tick_ns = mono();
        if let Some(last) = last_tick_ns.replace(tick_ns) {
            note(&mut watch, "tick to tick", last, tick_ns);
        }
        let phase = base_ticks % ticks_per_cycle;
        base_ticks += 1;
        let f = faults.lock().map(|g| *g).unwrap_or_default();
        ctl.state.egm_running = !f.controller_stopped;
        ctl.state.motors_on = !f.motors_off;
        if f.program_start != last_start {
            last_start = f.program_start;
            ctl.program_start();
            tracing::info!(rapid = %ctl.rapid_label(), "operator: program start");
        }
        if f.egm_stop != last_egm_stop {
            last_egm_stop = f.egm_stop;
            ctl.egm_stop();
            tracing::info!(rapid = %ctl.rapid_label(), "RAPID: EGMStop");
        }
        box_faults.update(|b| {
            b.frozen = f.sensor_frozen;
            b.saturated = f.sensor_saturated;
            b.nan = f.sensor_nan;
            if f.sensor_spike != last_spike && f.sensor_spike != [0.0; 6] {
                b.spike = f.sensor_spike;
                b.spike_samples = 3;
            }
            if f.sensor_unplugged {
                // Power-cycled: the box's zero is its own again.
                b.offset = [0.0; 6];
            }
            for (o, d) in b.offset.iter_mut().zip(f.sensor_drift_per_s) {
                *o += d * BASE_TICK_S;
            }
        });
        last_spike = f.sensor_spike;
        let _ = plug_tx.send_if_modified(|v| {
            let want = !f.sensor_unplugged;
            let changed = *v != want;
            *v = want;
            changed
        });
        if phase == 0 {
            let errors_before = ctl.stats.egm_errors;
            ctl.begin_cycle(cycle_s);
            if ctl.stats.egm_errors != errors_before {
                // The controller's event log: which rule ended (or refused) the session.
                tracing::error!(
                    error = ?ctl.last_error,
                    rapid = %ctl.rapid_label(),
                    q_deg = ?ctl.joints().0.map(f64::to_degrees),
                    "emulated IRC5: EGM error"
                );
            }
        }
        let t0 = mono();
        let (q, qd) = ctl.advance(BASE_TICK_S);
        for (v, m) in qd.iter().zip(arm.limits().max_speed.iter()) {
            peak_joint_speed_ratio = peak_joint_speed_ratio.max(v.abs() / m);
        }
        let cmd = plant_io.as_ref().and_then(PlantIo::command);
        let out = scenario.tick(&q, &qd, cmd);
        match out.truth {
            Ok(truth) => {
                last_truth = with_external(&truth, f.external_force_base_n);
                if let Ok(mut g) = truth_now.lock() {
                    *g = last_truth;
                }
                let fc = truth.contact_force_base;
                contact_force_peak_n = contact_force_peak_n
                    .max((fc[0] * fc[0] + fc[1] * fc[1] + fc[2] * fc[2]).sqrt());
                last_world = Some(truth);
            }
            Err(e) => node.set_error(format!("world: {e}")),
        }
        let t1 = mono();
        note(&mut watch, "world", t0, t1);
        if let (Some(io), Some(p)) = (plant_io.as_mut(), out.plant) {
            if p.command_stale {
                io.stale_ticks += 1;
            }
            if base_ticks.is_multiple_of(io.publish_every) {
                io.publish(&p);
                timed(&mut watch, "plant state publish", t1);
            }
            io.last = Some(p);
        }
        if phase + 1 == ticks_per_cycle {
            if let Some(w) = &last_world {
                let p = w.tcp_in_base.translation.vector;
                let msg = common::msg::SimTruth {
                    stamp: truth_pub.next_stamp(),
                    t_s: base_ticks as f64 * BASE_TICK_S,
                    contact_force_base_n: w.contact_force_base,
                    hand_force_base_n: w.hand_force_base,
                    in_contact: w.in_contact,
                    tcp_in_base_m: [p.x, p.y, p.z],
                    hand_active: w.hand_active,
                    // Not holding: reported at the TCP (finite; meaningless then).
                    hand_pos_base_m: w.hand_pos_base.unwrap_or([p.x, p.y, p.z]),
                    q_ref_rad: ctl.reference(),
                    q_ref_seqno: ctl.reference_seqno(),
                };
                let t0 = mono();
                truth_pub.put(&msg);
                timed(&mut watch, "truth publish", t0);
            }
        }
        if phase + 1 == ticks_per_cycle && ctl.sending() {
            // The datagram is built (its seqno used) even when the network loses it.
            // The IRC5's clock advances one cycle per cycle, whatever this host's timer jitter.
            let t0 = mono();
            cycles += 1;
            let tm_ms = (cycles as f64 * cfg.egm.cycle_ms).round() as u32;
            let tool0 = arm
                .fk_tool0(&q)
                .ok()
                .map(|p| kinematics::pose::pose_to_abb(&p));
            let msg = ctl.robot_message(tm_ms, tool0);
            if rng.next_f64() < f.packet_loss {
                dropped += 1;
            } else {
                let delay = if f.jitter_ms > 0.0 {
                    Duration::from_secs_f64(rng.next_f64() * f.jitter_ms * 1e-3)
                } else {
                    Duration::ZERO
                };
                let bytes = msg.encode();
                if held_robot.is_none() && f.egm_reorder > 0.0 && rng.next_f64() < f.egm_reorder {
                    held_robot = Some(bytes);
                    reordered += 1;
                } else {
                    if f.egm_duplicate > 0.0 && rng.next_f64() < f.egm_duplicate {
                        egm_out.send(bytes.clone(), delay);
                        duplicated += 1;
                    }
                    egm_out.send(bytes, delay);
                    if let Some(late) = held_robot.take() {
                        egm_out.send(late, delay);
                    }
                }
            }
            // A lost datagram counts as sent: the IRC5 did its part.
            let t1 = mono();
            if let Some(gap) = watch.beat(t1) {
                tracing::warn!(
                    "EgmRobot sends paused {:.1} ms (session running; sessions {}, comm timeouts {})",
                    gap as f64 * 1e-6,
                    ctl.stats.sessions,
                    ctl.stats.comm_timeouts
                );
            }
            note(&mut watch, "EgmRobot send", t0, t1);
        } else if phase + 1 == ticks_per_cycle {
            // Not sending: a datagram held back is not delivered seconds later into another
            // session (no real network holds one that long).
            held_robot = None;
        }
        if last_status.elapsed() >= Duration::from_millis(250) {
            last_status = Instant::now();
            let t0 = mono();
            ctl.stats.sent = egm_out.sent();
            let sim_elapsed = base_ticks as f64 * BASE_TICK_S;
            node.set_detail(serde_json::json!({
                "sim_time_s": scenario.time_s(),
                "base_ticks": base_ticks,
                "wall_minus_sim_s": started.elapsed().as_secs_f64() - sim_elapsed,
                "egm": { "sent": ctl.stats.sent, "replies": ctl.stats.replies, "dropped": dropped,
                         "reordered": reordered, "duplicated": duplicated,
                         "cycle_ms": cfg.egm.cycle_ms,
                         "malformed_replies": ctl.stats.malformed_replies,
                         "nonfinite_replies": ctl.stats.nonfinite_replies,
                         "session_running": ctl.session_running(),
                         "rapid": ctl.rapid_label(),
                         "egm_errors": ctl.stats.egm_errors,
                         "last_error": ctl.last_error,
                         "converged": ctl.stats.converged,
                         "reply_queue": cfg.egm.reply_queue,
                         "reply_queue_drops": ctl.stats.reply_queue_drops,
                         "reply_queue_depth_mean": if ctl.stats.queue_reads > 0 {
                             ctl.stats.queue_depth_sum as f64 / ctl.stats.queue_reads as f64
                         } else { 0.0 },
                         "sessions": ctl.stats.sessions,
                         "comm_timeouts": ctl.stats.comm_timeouts,
                         "reference_peak_speed_ratio": ctl.refs.peak_speed_ratio,
                         "joint_peak_speed_ratio": peak_joint_speed_ratio,
                         "reference_out_of_limits": ctl.refs.out_of_limits,
                         "q_deg": q.map(f64::to_degrees), "qd_deg_s": qd.map(f64::to_degrees) },
                "faults": f,
                "sensor": format!("{:?}", cfg.sensor),
                "truth_sensor": last_truth,
                "in_contact": last_world.as_ref().is_some_and(|t| t.in_contact),
                "contact_force_peak_n": contact_force_peak_n,
                "world": last_world.as_ref().map(truth_detail),
                "plant": plant_io.as_ref().map(plant_detail),
                "scenario": {
                    "source": scenario.source(),
                    "plant": scenario.runtime(),
                },
                "egm_loop": watch.status(),
                "egm_delayed_sender": egm_out.lateness(),
            }));
            timed(&mut watch, "status", t0);
        }
    }
    let _ = plug_tx.send(false);
    sensor_task.abort();
    egm_task.abort();
    drop(_presence);
    node.close().await;
    Ok(())
}

/// Runs the configured sensor emulator while "plugged in"; restarts it when plugged back.
async fn sensor_supervisor(
    cfg: SimConfig,
    truth: Truth,
    box_faults: crate::sensor::BoxFaults,
    mut plugged: watch::Receiver<bool>,
) {
    loop {
        if !*plugged.borrow() {
            if plugged.changed().await.is_err() {
                return;
            }
            continue;
        }
        let mut unplug = plugged.clone();
        let stop = async move {
            while *unplug.borrow() {
                if unplug.changed().await.is_err() {
                    return;
                }
            }
        };
        let res = match cfg.sensor {
            SimSensor::None => {
                stop.await;
                Ok(())
            }
            SimSensor::Sri => {
                crate::sensor::sri::serve(cfg.sri.clone(), truth.clone(), box_faults.clone(), stop)
                    .await
            }
            SimSensor::Ati => {
                crate::sensor::ati::serve(cfg.ati.clone(), truth.clone(), box_faults.clone(), stop)
                    .await
            }
        };
        if let Err(e) = res {
            tracing::error!("sensor emulator: {e:#}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        } else {
            tracing::info!("sensor emulator unplugged");
        }
    }
}

/// The service's process entry: config (every problem listed, exit 2), tracing, runtime, bus,
/// then [`run`]. Both `cell-sim` and the multi-call `cell service sim` (what `cell up` starts)
/// call it, so the two cannot differ.
pub fn service_main(
    cfg: common::service::ConfigArgs,
    bus: common::bus::BusArgs,
) -> std::process::ExitCode {
    common::service::run_service(
        "sim",
        bus,
        cfg,
        |l| {
            let s: crate::node::SimConfig = l.section("sim");
            (s, kinematics::config::load_arm(l))
        },
        crate::node::run,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of delayed datagrams is late by at most the largest delay, however many
    /// follow each other: with every datagram 7 ms late and one built every 4 ms, the old
    /// sender (each delay slept after the previous datagram had gone) delivered the 100th
    /// ≈ 300 ms late.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delayed_datagrams_are_late_by_their_delay_not_by_the_sum_of_delays() {
        let rx = UdpSocket::bind("127.0.0.1:0").await.expect("bind rx");
        let tx = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind tx"));
        let target = rx.local_addr().expect("rx addr");
        let (sender, task) = EgmSender::new(tx, target);
        let n = 100u32;
        let start = tokio::time::Instant::now();
        let recv = tokio::spawn(async move {
            let mut late_ms = Vec::new();
            let mut buf = [0u8; 16];
            for _ in 0..n {
                let Ok(Ok((len, _))) =
                    tokio::time::timeout(Duration::from_secs(5), rx.recv_from(&mut buf)).await
                else {
                    break;
                };
                let i = u32::from_le_bytes(buf[..len.min(4)].try_into().unwrap_or([0; 4]));
                let built = start + Duration::from_millis(4 * u64::from(i));
                late_ms.push(built.elapsed().as_secs_f64() * 1e3);
            }
            late_ms
        });
        let mut tick = tokio::time::interval_at(start, Duration::from_millis(4));
        for i in 0..n {
            tick.tick().await;
            sender.send(i.to_le_bytes().to_vec(), Duration::from_millis(7));
        }
        let late_ms = recv.await.expect("receiver");
        task.abort();
        assert_eq!(late_ms.len(), n as usize, "datagrams lost on loopback");
        let worst = late_ms.iter().copied().fold(0.0f64, f64::max);
        // 7 ms of delay, plus this host's timer and scheduling slack (generous: the failure
        // this guards against is hundreds of ms).
        assert!(
            worst < 7.0 + 40.0,
            "a datagram arrived {worst:.1} ms after it was built"
        );
    }
}
