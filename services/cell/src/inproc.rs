//! The in-process baseline of `cell bench latency`: the same cores as the services, wired by
//! in-memory channels in one process, each on its own thread as each service is its own
//! process, every message postcard-encoded and decoded as on the bus.
//!
//! - **robot** thread: the simulated IRC5 (`sim::controller`, EGM messages encoded with the
//!   real protobuf codec) and robot-io's pure cycle (`robot_io::egm::cycle::EgmCore`: session
//!   and supervisor), paced by a timer at the robot cycle; it measures end-to-end latency and
//!   missed cycles exactly as robot-io does ([`robot_io::latency::CycleLatency`]);
//! - **robot-io receiver** thread: the joint commands' arrival (as zenoh's callback in
//!   robot-io: decode, keep the newest with its arrival time);
//! - **kinematics** thread: [`kinematics::node::tool_pose`] per joint state, the servo
//!   ([`kinematics::servo::Servo`]) per Cartesian command;
//! - **control** thread: [`control::core::ControlCore`] running a hybrid task (10 N down), its
//!   wrench from a virtual table under the start pose (a 2·10⁴ N/m spring: the baseline has no
//!   sensor chain; the multi-process bench's force path is measured separately).
//!
//! Four channel transfers per cycle, as the four zenoh transfers of the service chain.

use std::{
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use common::{
    clock, codec,
    latency::Histogram,
    msg::{CartesianCommand, JointCommand, JointState, SafetyState, Stamp, ToolPose},
};
use robot_io::{
    egm::{
        cycle::{Datagram, EgmCore},
        session::{EgmSession, SessionParams},
    },
    latency::{CycleLatency, LatestCommand},
    supervisor::{Supervisor, SupervisorParams},
};

/// What the baseline measured.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub end_to_end: Histogram,
    pub commanded: u64,
    pub missed: u64,
}

enum KinIn {
    Joints(Vec<u8>),
    Cartesian(Vec<u8>),
}

enum CtlIn {
    Pose(Vec<u8>),
    Safety(SafetyState),
}

fn stamp(seq: &mut u64) -> Stamp {
    *seq += 1;
    Stamp {
        seq: *seq,
        source_mono_ns: clock::mono_ns(),
    }
}

/// The start joints: the tool pointing down above the table (about (350, 0, 208) mm).
fn start_joints(arm: &kinematics::Arm) -> anyhow::Result<[f64; 6]> {
    let pose = kinematics::pose::pose_from_abb([350.0, 0.0, 208.0], [0.0, 0.0, 1.0, 0.0])
        .context("start pose")?;
    let seed = [0.0, 0.3, 0.2, 0.0, 1.0, 0.0];
    arm.ik_nearest(&pose, &seed)
        .map(|s| s.q)
        .map_err(|e| anyhow::anyhow!("start pose IK: {e}"))
}

/// Runs the baseline at `rate_hz` for `seconds` (after 2 s to make contact).
/// Runs the baseline for `seconds` after a 2 s warm-up. With `fifo`, every thread of it runs
/// under `SCHED_FIFO` at that priority, as the multi-process cell it is compared with does
/// under `--fifo` (the threads inherit the policy of the one that starts them): a baseline on
/// the default policy beside a FIFO cell compared unlike with like, and its p50 wandered
/// 48–72 µs between three runs on one idle host.
pub fn run(rate_hz: f64, seconds: f64, fifo: Option<i32>) -> anyhow::Result<Baseline> {
    let Some(prio) = fifo else {
        return run_here(rate_hz, seconds);
    };
    std::thread::Builder::new()
        .name("inproc-robot".into())
        .spawn(move || {
            let problems = common::service::apply_rt(&common::service::RtConfig {
                fifo_priority: Some(prio),
                ..Default::default()
            });
            anyhow::ensure!(
                problems.is_empty(),
                "in-process baseline: {}",
                problems.join("; ")
            );
            run_here(rate_hz, seconds)
        })?
        .join()
        .map_err(|_| anyhow::anyhow!("in-process baseline: its robot thread panicked"))?
}

fn run_here(rate_hz: f64, seconds: f64) -> anyhow::Result<Baseline> {
    let arm = kinematics::Arm::irb120();
    let limits = *arm.limits();
    let q0 = start_joints(&arm)?;
    let dt = 1.0 / rate_hz;
    let (kin_tx, kin_rx) = mpsc::channel::<KinIn>();
    let (ctl_tx, ctl_rx) = mpsc::channel::<CtlIn>();
    let (cmd_tx, cmd_rx) = mpsc::channel::<Vec<u8>>();
    let slot: Arc<Mutex<Option<(JointCommand, Instant, u64)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // robot-io's receiver: the newest joint command and its arrival.
    let rx_slot = slot.clone();
    let receiver = std::thread::Builder::new()
        .name("inproc-rio-rx".into())
        .spawn(move || {
            // Ends when the kinematics thread (the only sender) ends.
            while let Ok(b) = cmd_rx.recv() {
                let (at, at_ns) = (Instant::now(), clock::mono_ns());
                if let Ok(c) = codec::decode::<JointCommand>(&b) {
                    if let Ok(mut g) = rx_slot.lock() {
                        *g = Some((c, at, at_ns));
                    }
                }
            }
        })?;

    // kinematics.
    let karm = arm.clone();
    let ctl_tx_k = ctl_tx.clone();
    let stop_k = stop.clone();
    let kin = std::thread::Builder::new()
        .name("inproc-kin".into())
        .spawn(move || {
            let params = kinematics::node::KinematicsConfig::default().servo_params();
            let mut servo = kinematics::servo::Servo::with_params(karm.clone(), params);
            let mut js_last: Option<JointState> = None;
            let mut seq = (0u64, 0u64);
            let mut last_cmd: Option<Instant> = None;
            while !stop_k.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(m) = kin_rx.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                match m {
                    KinIn::Joints(b) => {
                        let Ok(js) = codec::decode::<JointState>(&b) else {
                            continue;
                        };
                        js_last = Some(js);
                        if let Some(tp) = kinematics::node::tool_pose(&karm, &js, stamp(&mut seq.0))
                        {
                            if let Ok(bytes) = codec::encode(&tp) {
                                let _ = ctl_tx_k.send(CtlIn::Pose(bytes));
                            }
                        }
                    }
                    KinIn::Cartesian(b) => {
                        let (Ok(cmd), Some(js)) = (codec::decode::<CartesianCommand>(&b), js_last)
                        else {
                            continue;
                        };
                        let now = Instant::now();
                        let since =
                            last_cmd.map_or(f64::INFINITY, |t| now.duration_since(t).as_secs_f64());
                        last_cmd = Some(now);
                        let target = kinematics::node::servo_target(&cmd.target);
                        let out = servo.step(&kinematics::servo::ServoInput {
                            q_measured: &js.q_rad,
                            target: &target,
                            dt,
                            since_last_s: since,
                            cycle: cmd.cycle,
                        });
                        let jc = JointCommand {
                            stamp: stamp(&mut seq.1),
                            cycle: cmd.cycle,
                            motion: cmd.motion,
                            q_rad: out.q,
                            qd_rad_s: out.qd,
                            flags: Default::default(),
                        };
                        if let Ok(bytes) = codec::encode(&jc) {
                            let _ = cmd_tx.send(bytes);
                        }
                    }
                }
            }
        })?;

    // control: a hybrid task pressing 10 N on a virtual table 2 mm under the start.
    let carm = arm.clone();
    let kin_tx_c = kin_tx.clone();
    let stop_c = stop.clone();
    let ctl = std::thread::Builder::new()
        .name("inproc-control".into())
        .spawn(move || -> anyhow::Result<()> {
            let mut core = control::core::ControlCore::new(1);
            let table_z = carm.fk(&q0).map(|p| p.translation.z).unwrap_or(0.2) - 0.002;
            let task = control::taskfile::parse(
                "name = \"inproc-press\"\nrobot = \"arm\"\nframe = \"base\"\n\
                 frame_rpy_deg = [180.0, 0.0, 0.0]\nforce_axes = [\"z\"]\nfrom_contact = true\n\
                 duration_s = 600.0\n[reference]\nz = 10.0\n\
                 x = { sine = { amplitude = 0.01, freq_hz = 0.2 } }\n[gains]\nstiffness_n_per_m = 20000.0\n",
            )
            .map_err(|e| anyhow::anyhow!("task: {}", e.join("; ")))?;
            let hcfg = control::config::HybridConfig::default();
            let setup = hcfg
                .arm_setup(&task, &task.frame.to_isometry().rotation)
                .map_err(|e| anyhow::anyhow!("task: {e}"))?;
            let mut task = Some(task);
            let mut seq = 0u64;
            let t0 = Instant::now();
            while !stop_c.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(m) = ctl_rx.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                match m {
                    CtlIn::Safety(s) => core.on_safety(&s),
                    CtlIn::Pose(b) => {
                        let Ok(p) = codec::decode::<ToolPose>(&b) else {
                            continue;
                        };
                        let tcp = p.tcp_in_base.to_isometry();
                        let now_s = t0.elapsed().as_secs_f64();
                        core.set_cycle(p.cycle, dt);
                        if let Some(t) = task.take() {
                            if core
                                .request_hybrid(t.clone(), setup, Some(common::msg::WrenchFault::None))
                                .is_err()
                            {
                                task = Some(t);
                            }
                        }
                        let pen = (table_z - tcp.translation.z).max(0.0);
                        let w: control::core::WrenchInput = Ok((
                            nalgebra::Vector3::new(0.0, 0.0, 2e4 * pen),
                            nalgebra::Vector3::zeros(),
                        ));
                        let target = core.step_with_wrench(&tcp, now_s, &w);
                        if let (Some(target), Some(motion)) = (target, core.motion_tag()) {
                            let cmd = CartesianCommand {
                                stamp: stamp(&mut seq),
                                cycle: p.cycle,
                                motion,
                                target,
                            };
                            if let Ok(bytes) = codec::encode(&cmd) {
                                let _ = kin_tx_c.send(KinIn::Cartesian(bytes));
                            }
                        }
                    }
                }
            }
            Ok(())
        })?;

    // The robot: the emulated controller and robot-io's cycle on a timer.
    let boot = robot_io::node::new_boot_id();
    let mut rio = EgmCore::new(
        EgmSession::new(SessionParams {
            nominal_cycle_s: dt,
            silence_timeout_s: 0.1,
            send_speed_ref: true,
        }),
        Supervisor::new(SupervisorParams {
            command_timeout_s: 2.0 * dt,
            limits,
            max_accel: robot_io::config::RobotIoConfig::default().max_accel_rad_s2(),
            robot_boot: boot,
            measured_limit_margin_rad: 0.05,
            command_lead_s: dt,
            resume_ramp_s: robot_io::supervisor::DEFAULT_RESUME_RAMP_S,
            protective_retrace_s: robot_io::supervisor::DEFAULT_PROTECTIVE_RETRACE_S,
            stale_contact_n: robot_io::supervisor::DEFAULT_STALE_CONTACT_N,
        }),
    );
    // The shipped IRC5 side (deploy/irc5), its home taught at the start pose: answered every
    // cycle, its session never times out.
    let irc5 = robot_io::egm::irc5::Irc5Egm::builtin()
        .map_err(|e| anyhow::anyhow!("deploy/irc5: {}", e.join("; ")))?;
    let mut ctl_sim = sim::controller::Controller::new(
        sim::world::servo::ServoModel::new(sim::world::ServoParams::default(), limits, q0),
        sim::controller::SessionParams::from_irc5(
            &irc5,
            q0,
            sim::node::EgmSimConfig::default().reply_queue,
        ),
    );
    let mut lat = CycleLatency::new().with_nominal_period_ns((dt * 1e9).round() as u64);
    let mut window_start: Option<(u64, u64, Histogram)> = None;
    let epoch = Instant::now();
    let warmup = Duration::from_secs(2);
    let end = warmup + Duration::from_secs_f64(seconds);
    let mut next = Instant::now();
    let mut js_seq = 0u64;
    let mut tm_ms = 0u32;
    let mut tx = [0u8; robot_io::egm::frame::SENSOR_REPLY_MAX];
    let result = loop {
        next += Duration::from_secs_f64(dt);
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        let elapsed = epoch.elapsed();
        if elapsed >= end {
            break Ok(());
        }
        if window_start.is_none() && elapsed >= warmup {
            window_start = Some((lat.commanded, lat.missed, lat.end_to_end.clone()));
        }
        ctl_sim.step(dt);
        tm_ms = tm_ms.wrapping_add((dt * 1e3).round() as u32);
        if !ctl_sim.sending() {
            // Homing and the fine point before the session (no EgmRobot).
            continue;
        }
        let bytes = ctl_sim.robot_message(tm_ms, None).encode();
        let (rx, rx_ns) = (Instant::now(), clock::mono_ns());
        let rx_s = rx.duration_since(epoch).as_secs_f64();
        let latest = slot.lock().ok().and_then(|g| *g);
        let cmd = latest
            .as_ref()
            .map(|(c, at, _)| (c, at.duration_since(epoch).as_secs_f64()));
        let h = rio.on_datagram(&bytes, rx_s, cmd);
        if let Some(r) = &h.reply {
            ctl_sim.apply_reply(r.encode(&mut tx));
        }
        if let Datagram::Cycle(fb) = &h.datagram {
            lat.on_cycle(
                h.cycle,
                rx_ns,
                latest.map(|(c, at, at_ns)| LatestCommand {
                    cycle: c.cycle,
                    at_ns,
                    fresh: rx.duration_since(at).as_secs_f64() <= 2.0 * dt,
                }),
            );
            let js = JointState {
                stamp: stamp(&mut js_seq),
                cycle: h.cycle,
                q_rad: fb.q_rad,
                qd_rad_s: fb.qd_rad_s.unwrap_or([0.0; 6]),
                robot: fb.status,
                period_s: fb.period_s,
            };
            if h.safety_changed || h.cycle % 25 == 1 {
                let s = SafetyState {
                    stamp: stamp(&mut js_seq),
                    level: rio.sup.level(),
                    reason: rio.sup.reason(),
                    since_cycle: rio.sup.since_cycle(),
                    rejected_commands: rio.sup.rejected(),
                    robot_boot: boot,
                    motion_id: rio.sup.active_motion().unwrap_or(0),
                };
                if ctl_tx.send(CtlIn::Safety(s)).is_err() {
                    break Err(anyhow::anyhow!("control thread gone"));
                }
            }
            if let Ok(b) = codec::encode(&js) {
                if kin_tx.send(KinIn::Joints(b)).is_err() {
                    break Err(anyhow::anyhow!("kinematics thread gone"));
                }
            }
        }
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop((kin_tx, ctl_tx));
    let _ = kin.join();
    let ctl_result = ctl.join();
    let _ = receiver.join();
    result?;
    match ctl_result {
        Ok(r) => r?,
        Err(_) => anyhow::bail!("the in-process control thread panicked"),
    }
    let (c0, m0, h0) = window_start.unwrap_or((0, 0, Histogram::new()));
    Ok(Baseline {
        end_to_end: lat.end_to_end.since(&h0),
        commanded: lat.commanded - c0,
        missed: lat.missed - m0,
    })
}
