//! `cell-sim`'s shell: the EGM controller emulator on UDP, one F/T sensor emulator (SRI box on
//! TCP or ATI Net F/T on UDP/HTTP) fed by the world model, and a request/reply queryable for
//! faults and injected forces (`cell/<id>/sim/rpc/fault`, JSON).
//!
//! The world is stepped once per robot cycle with the measured joints; the sensor emulator reads
//! the newest true wrench (plus an injected external wrench, if any).

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{
    bus::Node,
    config::{check_range, ConfigErrors, Validate},
    service::Shutdown,
};
use kinematics::{Arm, Wrench};
use nalgebra::Vector3;
use serde::{Deserialize, Serialize};
use tokio::{net::UdpSocket, sync::watch};
use zenoh::Wait;

use crate::{
    controller::Controller,
    sensor::{ati::AtiEmulatorConfig, sri::SriEmulatorConfig, Truth},
    world::{tcp_base_wrench_to_sensor, World, WorldConfig},
};

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
    /// Controller cycle (ms): 4 like IRC5; down to 1 for stress tests.
    pub cycle_ms: f64,
    /// Start position (deg).
    pub initial_q_deg: [f64; 6],
    /// Emulated loss of EgmRobot datagrams (0..1).
    pub packet_loss: f64,
    /// Emulated send jitter: uniform extra delay in [0, jitter_ms] (ms).
    pub jitter_ms: f64,
    pub seed: u64,
}

impl Default for EgmSimConfig {
    fn default() -> Self {
        Self {
            robot_io: "127.0.0.1:6510".into(),
            bind: "127.0.0.1:6511".into(),
            cycle_ms: 4.0,
            initial_q_deg: [0.0, 0.0, 0.0, 0.0, 30.0, 0.0],
            packet_loss: 0.0,
            jitter_ms: 0.0,
            seed: 1,
        }
    }
}

/// `[sim.plant]`: the Raibert–Craig 2-DOF plant, driven by effort commands over the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlantSimConfig {
    pub enabled: bool,
    /// Control period at which the plant takes commands and publishes its state (Hz); the
    /// plant integrates internally at its own ≥ 10 kHz rate.
    pub rate_hz: f64,
    /// An effort command older than this is stale → zero effort (ms).
    pub command_timeout_ms: f64,
}

impl Default for PlantSimConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            rate_hz: 1000.0,
            command_timeout_ms: 5.0,
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
    /// The controller stops EGM (stops sending) while true.
    pub controller_stopped: bool,
    pub motors_off: bool,
    /// The sensor emulator is "unplugged" (its server is down) while true.
    pub sensor_unplugged: bool,
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

pub async fn run(node: Node, cfg: (SimConfig, Arm), mut shutdown: Shutdown) -> anyhow::Result<()> {
    let (cfg, arm) = cfg;
    let world_cfg = match &cfg.scenario {
        Some(s) => WorldConfig::load_file(&common::config::resolve_path(s))
            .map_err(|e| anyhow::anyhow!(e.join("; ")))?,
        None => WorldConfig::default(),
    };
    let mut world =
        World::new(world_cfg, arm.clone()).map_err(|e| anyhow::anyhow!(e.join("; ")))?;
    let q0 = cfg.egm.initial_q_deg.map(f64::to_radians);
    let mut ctl = Controller::new(world.servo(q0));

    let faults = Arc::new(Mutex::new(Faults {
        packet_loss: cfg.egm.packet_loss,
        jitter_ms: cfg.egm.jitter_ms,
        ..Default::default()
    }));
    // The newest true wrench at the sensor (sensor frame, N and N·m).
    let truth_now = Arc::new(Mutex::new([0.0f64; 6]));

    // Fault queryable: GET with a JSON body merges fields into the faults; answers the faults.
    let f2 = faults.clone();
    let fault_key = format!("cell/{}/sim/rpc/fault", node.cell_id);
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
                        || !(0.0..=100.0).contains(&new.jitter_ms)
                        || !new.external_force_base_n.iter().all(|v| v.is_finite())
                    {
                        return Err(
                            "packet_loss in [0,1], jitter_ms in [0,100], forces finite".into()
                        );
                    }
                    *f = new;
                }
                Ok(*f)
            })();
            let r = match result {
                Ok(f) => q
                    .reply(reply_key.clone(), serde_json::json!(f).to_string())
                    .wait(),
                Err(e) => q
                    .reply_err(serde_json::json!({ "error": e }).to_string())
                    .wait(),
            };
            if let Err(e) = r {
                tracing::debug!("fault reply: {e}");
            }
        })
        .await
        .map_err(|e| anyhow::anyhow!("queryable {fault_key}: {e}"))?;
    let _presence = node.announce().await?;

    // Sensor emulator, restartable ("unplug"/"plug").
    let truth: Truth = {
        let t = truth_now.clone();
        Arc::new(move |_t| t.lock().map(|g| *g).unwrap_or([0.0; 6]))
    };
    let (plug_tx, plug_rx) = watch::channel(true);
    let sensor_task = tokio::spawn(sensor_supervisor(cfg.clone(), truth, plug_rx));

    // The 2-DOF plant, on its own task.
    let plant_task = if cfg.plant.enabled {
        let plant = world
            .rc_plant()
            .map_err(|e| anyhow::anyhow!(e.join("; ")))?;
        let cmds = node.latest(common::topic::PLANT_EFFORT).await?;
        let state_pub = node.publisher(common::topic::PLANT_STATE).await?;
        Some(tokio::spawn(run_plant(
            plant,
            cfg.plant.clone(),
            cmds,
            state_pub,
        )))
    } else {
        None
    };

    // EGM controller.
    let sock = UdpSocket::bind(&cfg.egm.bind).await?;
    let target: SocketAddr = cfg.egm.robot_io.parse()?;
    let dt = cfg.egm.cycle_ms * 1e-3;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(dt));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut rng = Rng(cfg.egm.seed.max(1));
    let mut buf = vec![0u8; 4096];
    let mut dropped = 0u64;
    let mut last_status = Instant::now();
    let mut in_contact = false;
    let mut last_truth = [0.0; 6];
    let mut cycles: u64 = 0;
    let mut peak_joint_speed_ratio: f64 = 0.0;

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tick.tick() => {}
            r = sock.recv_from(&mut buf) => {
                if let Ok((n, _from)) = r {
                    ctl.apply_reply(&buf[..n]);
                }
                continue;
            }
        }
        let f = faults.lock().map(|g| *g).unwrap_or_default();
        ctl.state.egm_running = !f.controller_stopped;
        ctl.state.motors_on = !f.motors_off;
        let _ = plug_tx.send_if_modified(|v| {
            let want = !f.sensor_unplugged;
            let changed = *v != want;
            *v = want;
            changed
        });
        let (q, qd) = ctl.step(dt);
        for (v, m) in qd.iter().zip(arm.limits().max_speed.iter()) {
            peak_joint_speed_ratio = peak_joint_speed_ratio.max(v.abs() / m);
        }
        let t = start.elapsed().as_secs_f64();
        match world.sensor_wrench(&q, &qd, t, dt) {
            Ok(truth) => {
                let mut w = truth.wrench;
                let ext = Vector3::from(f.external_force_base_n);
                if ext.norm() > 0.0 {
                    let e = tcp_base_wrench_to_sensor(
                        &Wrench::new(ext, Vector3::zeros()),
                        &truth.tcp_in_base,
                        &truth.sensor_in_base,
                    );
                    w = Wrench::new(w.force + e.force, w.torque + e.torque);
                }
                last_truth = [
                    w.force.x, w.force.y, w.force.z, w.torque.x, w.torque.y, w.torque.z,
                ];
                in_contact = truth.in_contact;
                if let Ok(mut g) = truth_now.lock() {
                    *g = last_truth;
                }
            }
            Err(e) => node.set_error(format!("world: {e}")),
        }
        if !f.controller_stopped {
            // The datagram is built (its seqno used) even when the network loses it.
            // The IRC5's clock advances one cycle per cycle, whatever this host's timer jitter.
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
                if f.jitter_ms > 0.0 {
                    tokio::time::sleep(Duration::from_secs_f64(
                        rng.next_f64() * f.jitter_ms * 1e-3,
                    ))
                    .await;
                }
                let bytes = robot_io::egm::proto::encode_robot(&msg);
                if sock.send_to(&bytes, target).await.is_ok() {
                    ctl.stats.sent += 1;
                }
            }
        }
        if last_status.elapsed() >= Duration::from_millis(250) {
            last_status = Instant::now();
            node.set_detail(serde_json::json!({
                "egm": { "sent": ctl.stats.sent, "replies": ctl.stats.replies, "dropped": dropped,
                         "malformed_replies": ctl.stats.malformed_replies,
                         "nonfinite_replies": ctl.stats.nonfinite_replies,
                         "reference_peak_speed_ratio": ctl.refs.peak_speed_ratio,
                         "joint_peak_speed_ratio": peak_joint_speed_ratio,
                         "reference_out_of_limits": ctl.refs.out_of_limits,
                         "q_deg": q.map(f64::to_degrees), "qd_deg_s": qd.map(f64::to_degrees) },
                "faults": f,
                "sensor": format!("{:?}", cfg.sensor),
                "truth_sensor": last_truth,
                "in_contact": in_contact,
            }));
        }
    }
    let _ = plug_tx.send(false);
    sensor_task.abort();
    if let Some(t) = plant_task {
        t.abort();
    }
    drop(_presence);
    node.close().await;
    Ok(())
}

/// Runs the configured sensor emulator while "plugged in"; restarts it when plugged back.
async fn sensor_supervisor(cfg: SimConfig, truth: Truth, mut plugged: watch::Receiver<bool>) {
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
            SimSensor::Sri => crate::sensor::sri::serve(cfg.sri.clone(), truth.clone(), stop).await,
            SimSensor::Ati => crate::sensor::ati::serve(cfg.ati.clone(), truth.clone(), stop).await,
        };
        if let Err(e) = res {
            tracing::error!("sensor emulator: {e:#}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        } else {
            tracing::info!("sensor emulator unplugged");
        }
    }
}

/// Steps the plant at the control period with the newest fresh effort command (zero effort when
/// the command stream is silent) and publishes its state.
async fn run_plant(
    mut plant: crate::world::RcPlant,
    cfg: PlantSimConfig,
    cmds: common::bus::Latest<common::msg::PlantEffortCommand>,
    mut state_pub: common::bus::Publisher<common::msg::PlantState>,
) {
    let dt = 1.0 / cfg.rate_hz;
    let timeout = Duration::from_secs_f64(cfg.command_timeout_ms * 1e-3);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(dt));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let effort = cmds
            .get()
            .filter(|c| c.at.elapsed() <= timeout)
            .map_or([0.0; 2], |c| c.msg.effort);
        let st = plant.step(effort, dt);
        let msg = common::msg::PlantState {
            stamp: state_pub.next_stamp(),
            t_s: st.t,
            q: st.q,
            qd: st.qd,
            hand_pos_m: st.hand_pos,
            wrist_force_n: st.wrist_force,
            contact_force_n: st.contact_force,
            in_contact: st.in_contact,
            effort_applied: st.torque_applied,
        };
        state_pub.put(&msg);
    }
}
