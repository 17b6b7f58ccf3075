//! `cell commission`: a step-by-step check of a cell before its first force task — meant for
//! the real IRB 120 + IRC5 + F/T sensor, run against the simulator in tests.
//!
//! Against the running cell (or, for a simulated config, a private one it starts): the
//! services, the config against the IRC5 side (`deploy/irc5`), the EGM link (rate, jitter,
//! loss), the command round trip (a 5 mm jog up and back), the joints and the controller's
//! state, the F/T sensor at rest (rate, noise, bias, drift), the sensor's mounting frame (the
//! operator pushes the tool along +x, +y, +z of the base when asked, or the simulator's
//! scripted push does), the payload (identification against the config) and the e-stop round
//! trip. Each step prints PASS or FAIL with its figures and a fix hint; the report goes to
//! `out/commission/report.{json,html}`. Exit 0 only when no step failed. The verdicts are
//! pure functions in [`judge`].

pub mod judge;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context;
use common::{
    clock, codec,
    config::CellSection,
    msg::{EStopAction, JointState, Mode, WrenchEstimate, WrenchFault, WrenchSample},
    topic,
};
use kinematics::Arm;
use nalgebra::{UnitQuaternion, Vector3};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use zenoh::Session;

use crate::{cli, leadexp};
use judge::at_most;

/// What the cell's config says, for the checks.
pub struct Setup {
    /// The config file (or "built-in defaults").
    pub config_name: String,
    pub config: Option<PathBuf>,
    pub sets: Vec<String>,
    pub services: Vec<String>,
    pub robot_io: robot_io::config::RobotIoConfig,
    pub sensor: sensor::config::SensorConfig,
    /// `[sim]` when the config runs the simulator.
    pub sim: Option<sim::node::SimConfig>,
    pub force: force::node::ForceConfig,
    pub arm: Arm,
    /// The arm model's own (data sheet) joint limits; `None` for a custom arm.
    pub catalog_limits: Option<kinematics::params::JointLimits>,
}

/// What `cell commission` was asked.
#[derive(Debug, Clone)]
pub struct Request {
    pub out: Option<PathBuf>,
    /// The EGM link window (s).
    pub egm_seconds: f64,
    /// The F/T rest window (s).
    pub rest_seconds: f64,
    /// The mounting-frame pushes (N).
    pub push_n: f64,
    /// Ask the operator to push even on the simulator (otherwise its scripted push does).
    pub operator: bool,
    /// The EGM step's arrival-jitter target (p99, ms).
    pub max_jitter_ms: f64,
    /// The IRC5 side to hold the config against (default `deploy/irc5`, else the built-in copy).
    pub irc5: Option<PathBuf>,
    /// Steps to leave out (their names, e.g. `payload`).
    pub skip: Vec<String>,
    /// A real cell may run unsecured (an isolated network): the `security` step passes.
    pub allow_unsecured: bool,
}

/// One step's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    pub name: &'static str,
    pub what: &'static str,
    /// `None`: not run (left out or a step it needs failed).
    pub pass: Option<bool>,
    pub figures: String,
    pub problems: Vec<String>,
    pub hint: String,
    pub data: Value,
    pub secs: f64,
}

impl Step {
    fn new(name: &'static str, what: &'static str) -> Self {
        Step {
            name,
            what,
            pass: None,
            figures: String::new(),
            problems: Vec::new(),
            hint: String::new(),
            data: Value::Null,
            secs: 0.0,
        }
    }
    fn verdict(&self) -> &'static str {
        match self.pass {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "—",
        }
    }
    /// Sets the verdict from the problems found.
    fn judge(&mut self, problems: Vec<String>, hint: &str) {
        self.pass = Some(problems.is_empty());
        if !problems.is_empty() {
            self.hint = hint.to_string();
        }
        self.problems = problems;
    }
}

/// The names of the steps, in order.
pub const STEPS: [(&str, &str); 11] = [
    ("services", "every configured service is live"),
    (
        "security",
        "the cell's security profile and the EGM controller's pin (a real cell: secured)",
    ),
    (
        "irc5",
        "the config against the IRC5 side (RAPID module, SIO and MOC entries)",
    ),
    (
        "egm",
        "EGM datagrams arriving: rate, jitter, loss over the window",
    ),
    (
        "round-trip",
        "a 5 mm jog up and back: every cycle commanded in time, the TCP where commanded",
    ),
    (
        "joints",
        "the controller's state, the joints inside the configured limits, the limits inside the arm's",
    ),
    ("ft-rest", "the F/T sensor at rest: rate, noise, bias, drift"),
    (
        "frame",
        "the sensor's mounting frame: pushes along +x, +y, +z of the base read as such",
    ),
    ("payload", "the tool's mass and centre of mass: identified against the config"),
    (
        "estop",
        "e-stop round trip: robot-io acknowledges, the arm holds, reset acknowledged",
    ),
    (
        "restart",
        "a program stop and start: robot-io sees a restarted session (sequence number 0), which starts from a fine point",
    ),
];

fn say(msg: &str) {
    eprintln!("commission: {msg}");
}

/// A subscriber that keeps every decoded message with its arrival.
struct Collect<T> {
    v: Arc<Mutex<Vec<T>>>,
    _sub: zenoh::pubsub::Subscriber<()>,
}

impl<T: DeserializeOwned + Send + 'static> Collect<T> {
    async fn start(s: &Session, key: String) -> anyhow::Result<Self> {
        let v = Arc::new(Mutex::new(Vec::new()));
        let w = v.clone();
        let sub = s
            .declare_subscriber(key.clone())
            .callback(move |smp| {
                if let Ok(m) = codec::decode::<T>(&smp.payload().to_bytes()) {
                    if let Ok(mut g) = w.lock() {
                        g.push(m);
                    }
                }
            })
            .await
            .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))?;
        Ok(Collect { v, _sub: sub })
    }
    fn take(&self) -> Vec<T> {
        self.v
            .lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default()
    }
    fn len(&self) -> usize {
        self.v.lock().map_or(0, |g| g.len())
    }
}

/// `cell commission`: `Ok(true)` when no step failed.
pub async fn command(
    bus: &common::bus::BusArgs,
    cell: &CellSection,
    setup: Setup,
    req: Request,
) -> anyhow::Result<bool> {
    let t_start = Instant::now();
    leadexp::set_config(setup.config.as_deref(), &setup.sets);
    let out = req
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/commission"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let running = match cli::session(bus, cell).await {
        Ok(s) => {
            let live = cli::ls(&s, cell).await.unwrap_or_default();
            if live.iter().any(|l| l == "robot-io") {
                Some(s)
            } else {
                let _ = s.close().await;
                None
            }
        }
        Err(_) => None,
    };
    let (s, target, private) = match running {
        Some(s) => {
            say(&format!("checking the running cell {:?} at {}", cell.id, cell.router));
            (s, cell.clone(), None)
        }
        None if setup.sim.is_some() => {
            let log = out.join("cell.log");
            say(&format!(
                "no cell at {}: starting a private simulated cell (log: {})",
                cell.router,
                log.display()
            ));
            let mut p = crate::harness::PrivateCell::start(
                setup.config.as_deref(),
                &setup.sets,
                &log,
                crate::harness::private_fifo_priority(),
                cell,
            )?;
            match p.ready(bus, Duration::from_secs(90), true).await {
                Ok(s) => {
                    let c = p.cell.clone();
                    (s, c, Some(p))
                }
                Err(e) => {
                    p.stop();
                    return Err(e);
                }
            }
        }
        None => anyhow::bail!(
            "no cell at {} (robot-io not live): start it first (`cell up`, or the systemd units / compose profile `pc` and the Pi's sensor service)",
            cell.router
        ),
    };
    let mut steps: Vec<Step> = STEPS.iter().map(|(n, w)| Step::new(n, w)).collect();
    let work = run_steps(&s, &target, &setup, &req, &out, &mut steps);
    let interrupted = tokio::select! {
        r = work => {
            if let Err(e) = r {
                say(&format!("stopped: {e:#}"));
                if let Some(st) = steps.iter_mut().find(|st| st.pass.is_none() && !st.figures.is_empty()) {
                    st.pass = Some(false);
                    st.problems.push(format!("{e:#}"));
                }
            }
            false
        }
        _ = tokio::signal::ctrl_c() => true,
    };
    if interrupted {
        say("Ctrl-C: stopping (pushes released, control idle; robot-io holds)");
    }
    // Whatever happened: no scripted push left on, control idle.
    if setup.sim.is_some() && !req.operator {
        let _ = sim_fault(
            &s,
            &target,
            json!({ "external_force_base_n": [0.0, 0.0, 0.0] }),
        )
        .await;
    }
    let _ = cli::set_mode(&s, &target, Mode::Idle).await;
    let _ = s.close().await;
    if let Some(p) = private {
        say("ending the private cell");
        p.stop();
    }
    let total = t_start.elapsed().as_secs_f64();
    let ok = !interrupted && steps.iter().all(|st| st.pass != Some(false));
    print_summary(&steps, total, ok);
    write_report(&out, &setup, &steps, total, ok)?;
    say(&format!(
        "report: {}/report.html and report.json",
        out.canonicalize().unwrap_or(out.clone()).display()
    ));
    Ok(ok)
}

async fn sim_fault(s: &Session, cell: &CellSection, body: Value) -> anyhow::Result<Value> {
    let key = format!("cell/{}/sim/rpc/fault", cell.id);
    cli::request(s, &key, Some(body.to_string()), Duration::from_secs(3)).await
}

fn get<'a>(steps: &'a mut [Step], name: &str) -> &'a mut Step {
    let i = steps.iter().position(|s| s.name == name).unwrap_or(0);
    &mut steps[i]
}

/// A step's verdict from what it measured (figures, problems, data), or from the error that
/// stopped it.
fn settle(
    st: &mut Step,
    r: anyhow::Result<(String, Vec<String>, Value)>,
    hint: &str,
    stopped_hint: &str,
) {
    match r {
        Ok((fig, problems, data)) => {
            st.figures = fig;
            st.data = data;
            st.judge(problems, hint);
        }
        Err(e) => st.judge(vec![format!("{e:#}")], stopped_hint),
    }
}

fn not_run(st: &mut Step, why: &str) {
    st.figures = format!("not run: {why}");
}

fn host_s(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

async fn robot_io_status(s: &Session, cell: &CellSection) -> Option<Value> {
    cli::status(s, cell, Some("robot-io"))
        .await
        .ok()
        .and_then(|v| v.into_iter().next())
        .map(|v| v["detail"].clone())
}

async fn run_steps(
    s: &Session,
    cell: &CellSection,
    setup: &Setup,
    req: &Request,
    out: &Path,
    steps: &mut [Step],
) -> anyhow::Result<()> {
    let skip = |n: &str| req.skip.iter().any(|k| k == n);
    let js = Collect::<JointState>::start(s, topic::JOINT_STATE.key(&cell.id)).await?;

    // 1. Services.
    {
        let t = Instant::now();
        let st = get(steps, "services");
        let live = cli::ls(s, cell).await.unwrap_or_default();
        // The launcher's services, and the sensor node's (on the Pi, outside this launcher)
        // when the cell has a sensor.
        let mut wanted = setup.services.clone();
        if setup.sensor.driver != sensor::config::SensorDriver::None {
            for n in ["sensor", "force"] {
                if !wanted.iter().any(|w| w == n) {
                    wanted.push(n.to_string());
                }
            }
        }
        let missing: Vec<String> = wanted
            .iter()
            .filter(|n| !live.iter().any(|l| l == *n))
            .cloned()
            .collect();
        st.figures = format!("live: {}", live.join(", "));
        st.data = json!({ "live": live, "wanted": wanted });
        st.judge(
            missing
                .iter()
                .map(|m| format!("{m} is not live"))
                .collect(),
            "start the missing service (`systemctl status cell-NAME`, `journalctl -u cell-NAME`; on the Pi the sensor node); `cell ls` lists the live ones",
        );
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }

    // 1b. Security.
    if skip("security") {
        not_run(get(steps, "security"), "left out (--skip)");
    } else {
        let t = Instant::now();
        let st = get(steps, "security");
        let (figures, problems) = judge::security_problems(
            cell.security.as_ref(),
            setup.sim.is_some(),
            req.allow_unsecured,
            setup.robot_io.egm.controller.as_deref(),
            setup.robot_io.driver == robot_io::config::DriverKind::Egm,
        );
        st.figures = figures;
        st.data = json!({
            "profile": cell.security.as_ref().map(|s| format!("{:?}", s.profile)),
            "egm_controller": setup.robot_io.egm.controller,
        });
        st.judge(problems, "secure the cell (docs/security.md: `cell certs init`, [cell.security], robot_io.egm.controller), or pass --allow-unsecured for a cell on an isolated network");
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }

    // 2. Config ⇄ IRC5 side.
    let irc5 = load_irc5(req);
    let cycle_s = match &irc5 {
        Ok((_, i)) => i.session.sample_rate_ms * 1e-3,
        Err(_) => setup.robot_io.cycle_ms * 1e-3,
    };
    {
        let t = Instant::now();
        let st = get(steps, "irc5");
        match &irc5 {
            Ok((from, i)) => {
                let side = egm_side(setup);
                let mut problems = i.check();
                // The rules a real controller enforces (fine point, first motion, load data,
                // \MaxSpeedDeviation against the slowest axis, error handling): issue 43.
                let slowest_deg_s = setup
                    .arm
                    .limits()
                    .max_speed
                    .iter()
                    .fold(f64::INFINITY, |a, v| a.min(*v))
                    .to_degrees();
                problems.extend(i.lint(slowest_deg_s));
                match side {
                    Ok(side) => problems.extend(i.disagreements(&side)),
                    Err(e) => problems.push(e),
                }
                st.figures = format!(
                    "{from}: \\SampleRate {} ms, \\CommTimeout {} s, UDP → {}:{}; robot-io binds {}",
                    i.session.sample_rate_ms,
                    i.session.comm_timeout_s,
                    i.device.remote_address,
                    i.device.remote_port,
                    setup.robot_io.egm.bind
                );
                st.judge(problems, "make the config and what is loaded on the IRC5 agree: robot_io.egm.bind = SIO_cell.cfg's RemoteAdress:RemotePortNumber, sim.egm.cycle_ms = \\SampleRate; load the shipped CellEgm.mod (a fine-point move before each session, cell_tool with the arm's load) (docs/commissioning.md)");
            }
            Err(e) => {
                st.judge(vec![e.clone()], "point --irc5 at the directory with CellEgm.mod, SIO_cell.cfg and MOC_cell.cfg as loaded on the controller");
            }
        }
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }

    // 3. EGM link.
    if skip("egm") {
        not_run(get(steps, "egm"), "left out (--skip)");
    } else {
        let t = Instant::now();
        say(&format!(
            "EGM link: listening {:.0} s to what robot-io receives",
            req.egm_seconds
        ));
        let before = robot_io_status(s, cell).await;
        js.take();
        let from_ns = clock::mono_ns();
        tokio::time::sleep(Duration::from_secs_f64(req.egm_seconds)).await;
        let got = js.take();
        let after = robot_io_status(s, cell).await;
        let samples: Vec<judge::LinkSample> = got
            .iter()
            .map(|m| judge::LinkSample {
                cycle: m.cycle,
                host_s: host_s(m.stamp.source_mono_ns),
                period_s: m.period_s,
            })
            .collect();
        let link = judge::egm_link(&samples, req.egm_seconds, cycle_s);
        let d = |k: &str| {
            let a = after.as_ref().and_then(|v| v["egm"][k].as_u64());
            let b = before.as_ref().and_then(|v| v["egm"][k].as_u64());
            a.zip(b).map(|(a, b)| a.saturating_sub(b))
        };
        let st = get(steps, "egm");
        st.figures = format!(
            "{} datagrams in {:.0} s ({:.1} Hz, controller cycle {} ms), {} lost ({:.2} %), arrival jitter σ {:.2} ms, p99 {:.2} ms, longest gap {:.1} ms",
            link.received,
            link.window_s,
            link.rate_hz,
            link.expected_cycle_ms,
            link.lost,
            link.loss_pct,
            link.jitter_std_ms,
            link.jitter_p99_ms,
            link.max_gap_ms
        );
        let mut problems = link.problems(&judge::LinkTargets {
            max_jitter_p99_ms: req.max_jitter_ms,
            ..Default::default()
        });
        if let (Some(late), Some(dup)) = (d("late"), d("duplicates")) {
            if late + dup > 0 {
                problems.push(format!(
                    "{late} late (reordered) and {dup} duplicate datagrams"
                ));
            }
        }
        let strangers = d("strangers");
        let last_stranger = after
            .as_ref()
            .map(|v| v["egm"]["last_stranger"]["from"].clone())
            .unwrap_or_default();
        if let Some(n) = strangers.filter(|n| *n > 0) {
            problems.push(format!(
                "{n} datagrams from strangers dropped (last from {last_stranger}): another host sends EGM to robot-io's port, or robot_io.egm.controller does not name the controller"
            ));
        }
        st.data = json!({
            "link": link,
            "strangers": strangers,
            "last_stranger": last_stranger,
            "pinned": after.as_ref().map(|v| v["egm"]["pinned"].clone()),
            "robot_io_lost": d("lost"),
            "robot_io_received": d("received"),
            "late": d("late"),
            "duplicates": d("duplicates"),
            "bind": setup.robot_io.egm.bind,
            "peer": after.as_ref().map(|v| v["peer"].clone()),
        });
        let hint = if link.received == 0 && strangers.is_some_and(|n| n > 0) {
            format!(
                "datagrams arrive, but not from the pinned controller ({}; the last came from {last_stranger}): set robot_io.egm.controller to the IRC5's address",
                setup.robot_io.egm.controller.as_deref().unwrap_or("unpinned")
            )
        } else if link.received == 0 {
            format!(
                "nothing arrives at robot-io ({}): the IRC5 must send to this PC's address and port (SIO_cell.cfg RemoteAdress/RemotePortNumber = robot_io.egm.bind), the RAPID task CellEgm must run (motors on, AUTO or manual with the enabling device), and the firewall must let UDP {} in",
                setup.robot_io.egm.bind,
                setup.robot_io.egm.bind.rsplit(':').next().unwrap_or("?")
            )
        } else {
            "a dedicated cable between the IRC5's service/LAN port and the PC (no Wi-Fi, no shared switch); no other traffic on that NIC; robot-io on its real-time core (deploy/systemd); then run again".to_string()
        };
        st.judge(problems, &hint);
        let stall = host_stall(s, cell, from_ns).await;
        let st = get(steps, "egm");
        note_stall(st, stall);
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }
    let link_ok = get(steps, "egm").data["link"]["received"]
        .as_u64()
        .is_some_and(|n| n > 0)
        || (skip("egm") && js.len() > 0);

    // 4. Round trip: a 5 mm jog up and back.
    if skip("round-trip") {
        not_run(get(steps, "round-trip"), "left out (--skip)");
    } else if !link_ok {
        not_run(get(steps, "round-trip"), "no EGM link");
    } else {
        let t = Instant::now();
        say("round trip: the TCP moves 5 mm up and back at 20 mm/s");
        let from_ns = clock::mono_ns();
        let r = round_trip(s, cell, cycle_s).await;
        let stall = host_stall(s, cell, from_ns).await;
        let st = get(steps, "round-trip");
        match r {
            Ok((figures, problems, data)) => {
                st.figures = figures;
                st.data = data;
                st.judge(problems, "robot-io and control on the real-time core (deploy/systemd: CPUAffinity, CPUSchedulingPolicy=fifo; `cell bench latency` measures the chain); the path's services on the PC, not the Pi");
            }
            Err(e) => st.judge(
                vec![format!("{e:#}")],
                "the arm did not follow a 5 mm jog: check `cell status control` and `cell status robot-io` (safety reason), motors on, EGM running",
            ),
        }
        note_stall(st, stall);
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }

    // 5. Joints and the controller's state.
    if skip("joints") {
        not_run(get(steps, "joints"), "left out (--skip)");
    } else if !link_ok {
        not_run(get(steps, "joints"), "no EGM link");
    } else {
        let t = Instant::now();
        let now = wait_joint_state(&js).await;
        let st = get(steps, "joints");
        match now {
            Some(m) => {
                let (fig, problems, data) = joints_check(&m, setup);
                st.figures = fig;
                st.data = data;
                st.judge(problems, "jog the arm inside its limits; motors on and the RAPID task running (CellEgm, EGMRunJoint); [arm] limits inside the arm's data sheet (MOC.cfg's own limits are the controller's)");
            }
            None => st.judge(
                vec!["no joint state".into()],
                "robot-io publishes nothing: `cell status robot-io`",
            ),
        }
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }

    // 6. F/T at rest.
    let raw = Collect::<WrenchSample>::start(s, topic::WRENCH_RAW.key(&cell.id)).await?;
    if skip("ft-rest") {
        not_run(get(steps, "ft-rest"), "left out (--skip)");
    } else {
        let t = Instant::now();
        say(&format!(
            "F/T at rest: {:.0} s of raw samples; keep the cell still and nothing touching the tool",
            req.rest_seconds
        ));
        raw.take();
        js.take();
        tokio::time::sleep(Duration::from_secs_f64(req.rest_seconds)).await;
        let got = raw.take();
        let moved = joint_motion_deg(&js.take());
        let samples: Vec<(f64, u32, u32, [f64; 6])> = got
            .iter()
            .map(|m| {
                let w = &m.wrench_sensor;
                (
                    host_s(m.stamp.source_mono_ns),
                    m.device_seq,
                    m.device_status,
                    [
                        w.force_n[0],
                        w.force_n[1],
                        w.force_n[2],
                        w.torque_nm[0],
                        w.torque_nm[1],
                        w.torque_nm[2],
                    ],
                )
            })
            .collect();
        let rest = judge::ft_rest(&samples, req.rest_seconds);
        let nominal = sensor_rate_hz(setup);
        let mut problems = rest.problems(&judge::RestTargets::new(nominal));
        if moved > 0.01 {
            problems.push(format!(
                "the arm moved {moved:.3}° during the window: the figures include motion"
            ));
        }
        let st = get(steps, "ft-rest");
        st.figures = format!(
            "{} samples ({:.0}/s, configured {:.0}), {} missed; noise σ F ({:.3}, {:.3}, {:.3}) N, T ({:.4}, {:.4}, {:.4}) N·m; bias F ({:+.2}, {:+.2}, {:+.2}) N with the tool; drift over {:.0} s F ({:+.3}, {:+.3}, {:+.3}) N",
            rest.samples, rest.rate_hz, nominal, rest.missed,
            rest.noise[0], rest.noise[1], rest.noise[2], rest.noise[3], rest.noise[4], rest.noise[5],
            rest.mean[0], rest.mean[1], rest.mean[2],
            rest.window_s, rest.drift[0], rest.drift[1], rest.drift[2]
        );
        st.data = json!({ "rest": rest, "nominal_hz": nominal, "joint_motion_deg": moved });
        let hint = if rest.samples == 0 {
            "no raw samples: the sensor service must reach the box (`cell status sensor`: address, link; SRI: the box's IP and TCP port 4008; ATI: RDT over UDP 49152 and the http port)"
        } else {
            "warm the sensor up (30 min after power-on), check its cable's shield and ground, keep cables from pulling on the tool; a rate off the configured: the box's sample-rate setting (SRI SMPR, ATI RDT rate) and [sensor] sample_rate_hz must agree"
        };
        st.judge(problems, hint);
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }
    let sensor_ok =
        !skip("ft-rest") && get(steps, "ft-rest").data["rest"]["samples"].as_u64() > Some(0);

    // 7. Mounting frame.
    if skip("frame") {
        not_run(get(steps, "frame"), "left out (--skip)");
    } else if !sensor_ok && !skip("ft-rest") {
        not_run(get(steps, "frame"), "no F/T samples");
    } else if !link_ok {
        not_run(get(steps, "frame"), "no EGM link (the pose is needed)");
    } else {
        let t = Instant::now();
        let r = frame_step(s, cell, setup, req, &js).await;
        let st = get(steps, "frame");
        match r {
            Ok((check, pushes)) => {
                st.figures = format!(
                    "{}; the sensor is {}",
                    check.reads.join("; "),
                    check.mount_error
                );
                st.data = json!({ "check": check, "pushes": pushes });
                st.judge(check.problems(10.0, (0.8, 1.2)), "turn the sensor (or [arm] sensor_mount's rotation) so that its axes are where the config says: the rotation named above is the sensor's true frame in the configured one; a gain off 100 % is the sensor's calibration matrix or a tare taken under load");
            }
            Err(e) => st.judge(
                vec![format!("{e:#}")],
                "the tare needs the arm still and nothing touching the tool; each push must reach half the asked force",
            ),
        }
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }

    // 8. Payload.
    if skip("payload") {
        not_run(get(steps, "payload"), "left out (--skip)");
    } else if !link_ok || !(sensor_ok || skip("ft-rest")) {
        not_run(get(steps, "payload"), "needs the EGM link and the sensor");
    } else {
        let t = Instant::now();
        say("payload: the arm visits the configured identification poses (force.identification_poses_deg)");
        let r = leadexp::payload_identify(s, cell, None, true).await;
        let st = get(steps, "payload");
        match r {
            Ok(v) => {
                let m = v["payload"]["mass_kg"].as_f64().unwrap_or(f64::NAN);
                let com: Vec<f64> = v["payload"]["com_m"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_f64)
                    .collect();
                let com = if com.len() == 3 {
                    [com[0], com[1], com[2]]
                } else {
                    [f64::NAN; 3]
                };
                let p = &setup.force.payload;
                let c = judge::payload_check(m, com, p.mass_kg, p.com_m);
                // The load the IRC5 models (CellEgm.mod's cell_tool): not lighter than what the
                // sensor weighs (it may be heavier by the sensor body's share).
                let module_load = irc5.as_ref().ok().and_then(|(_, i)| i.module.tool.clone());
                let module_problems = module_load
                    .as_ref()
                    .map(|t| judge::module_load_problems(m, t.mass_kg))
                    .unwrap_or_default();
                st.figures = format!(
                    "identified {:.3} kg, CoM ({:.1}, {:.1}, {:.1}) mm; config {:.3} kg, CoM ({:.1}, {:.1}, {:.1}) mm; Δm {:+.3} kg, ΔCoM {:.1} mm{}",
                    m, com[0] * 1e3, com[1] * 1e3, com[2] * 1e3,
                    p.mass_kg, p.com_m[0] * 1e3, p.com_m[1] * 1e3, p.com_m[2] * 1e3,
                    c.mass_error_kg, c.com_error_mm,
                    if v["retries"].as_array().is_some_and(|r| !r.is_empty()) { " (repeated after a proven host stall)" } else { "" }
                );
                if let Some(t) = &module_load {
                    st.figures += &format!("; the IRC5 module's cell_tool {:.3} kg", t.mass_kg);
                }
                st.data = json!({ "check": c, "identification": v, "module_load_kg": module_load.as_ref().map(|t| t.mass_kg) });
                let hint = format!(
                    "the config's [force.payload] is not the mounted tool: `cell{} payload identify --write {}` stores the identified one (the force service uses it from now on)",
                    setup.config.as_ref().map(|p| format!(" --config {}", p.display())).unwrap_or_default(),
                    setup.config.as_ref().map_or("CONFIG".into(), |p| p.display().to_string())
                );
                let mut problems = c.problems();
                let hint = if module_problems.is_empty() {
                    hint
                } else {
                    problems.extend(module_problems);
                    format!("{hint}; `cell payload identify --write-irc5 DIR [--sensor-body-kg M]` writes the IRC5's cell_tool load (then load CellEgm.mod again)")
                };
                st.judge(problems, &hint);
            }
            Err(e) => st.judge(
                vec![format!("{e:#}")],
                "payload identification needs the poses reachable and the arm free to move",
            ),
        }
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }

    // 9. E-stop round trip.
    if skip("estop") {
        not_run(get(steps, "estop"), "left out (--skip)");
    } else if !link_ok {
        not_run(get(steps, "estop"), "no EGM link");
    } else {
        let t = Instant::now();
        let r = estop_step(s, cell, &js, cycle_s).await;
        let st = get(steps, "estop");
        settle(
            st,
            r,
            "robot-io must acknowledge within 0.5 s and hold; if not, check it runs (`cell status robot-io`) — and test the hardware e-stop chain of the IRC5 by hand, which this step does not replace",
            "robot-io did not acknowledge: the software e-stop is not working; use the hardware e-stop and check robot-io",
        );
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }
    // 10. Restart.
    if skip("restart") {
        not_run(get(steps, "restart"), "left out (--skip)");
    } else if !link_ok {
        not_run(get(steps, "restart"), "no EGM link");
    } else {
        let t = Instant::now();
        let scripted = setup.sim.is_some() && !req.operator;
        let r = restart_step(s, cell, &js, scripted).await;
        let st = get(steps, "restart");
        settle(
            st,
            r,
            "a restarted EGM session must begin at sequence number 0 and from a fine point: load the shipped CellEgm.mod (WaitRob \\InPos and a MoveAbsJ … fine before EGMActJoint, every session set up again), and check nothing between the controller and the PC drops the first datagram",
            "no new EGM session came after the program was started again: check the program runs (FlexPendant) and the controller's event log",
        );
        st.secs = t.elapsed().as_secs_f64();
        print_step(st);
    }
    let _ = out;
    Ok(())
}

/// The restart step: the program stopped and started (by the simulator's operator fault, or by
/// the operator on a real controller); robot-io must count one restart whose first datagram is
/// sequence number 0, and the arm must be still over the new session's first 10 cycles (it
/// started from a fine point).
async fn restart_step(
    s: &Session,
    cell: &CellSection,
    js: &Collect<JointState>,
    scripted: bool,
) -> anyhow::Result<(String, Vec<String>, Value)> {
    let count = |v: &Option<Value>, k: &str| v.as_ref().and_then(|v| v["egm"][k].as_u64());
    let before = robot_io_status(s, cell).await;
    let r0 = count(&before, "restarts")
        .ok_or_else(|| anyhow::anyhow!("robot-io reports no EGM session counters"))?;
    if scripted {
        sim_fault(s, cell, json!({ "controller_stopped": true })).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = js.take();
        sim_fault(s, cell, json!({ "controller_stopped": false })).await?;
    } else {
        say("restart: stop the program on the FlexPendant, then start it again (the program pointer where it is); waiting up to 60 s");
    }
    let deadline = Instant::now() + Duration::from_secs(if scripted { 10 } else { 60 });
    let after = loop {
        let st = robot_io_status(s, cell).await;
        if count(&st, "restarts").is_some_and(|r| r > r0) {
            break st;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "robot-io saw no new EGM session ({} restarts before and after)",
            r0
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if !scripted {
        // The operator's stop: what was collected before the silence is the old session's.
        let _ = js.take();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first: Vec<JointState> = js.take().into_iter().take(10).collect();
    let max_qd_deg_s = first
        .iter()
        .flat_map(|j| j.qd_rad_s.iter().map(|v| v.abs().to_degrees()))
        .fold(0.0f64, f64::max);
    let r1 = count(&after, "restarts").unwrap_or(r0);
    let seq0 = after
        .as_ref()
        .and_then(|v| v["egm"]["session_first_seqno"].as_u64());
    let mut problems = Vec::new();
    if r1 != r0 + 1 {
        problems.push(format!(
            "robot-io counted {} restarts for one program stop and start",
            r1 - r0
        ));
    }
    if seq0 != Some(0) {
        problems.push(format!(
            "the new session's first datagram robot-io saw has sequence number {seq0:?}, not 0 (lost, or the controller resumed the old sequence)"
        ));
    }
    if first.len() < 10 {
        problems.push(format!(
            "only {} joint states in the new session's first 0.3 s",
            first.len()
        ));
    }
    if max_qd_deg_s >= 0.1 {
        problems.push(format!(
            "the arm moved at {max_qd_deg_s:.2} deg/s in the new session's first cycles: the session did not start from a fine point"
        ));
    }
    let fig = format!(
        "restarts {r0} → {r1}; first seqno {}; max joint speed over the first {} cycles {max_qd_deg_s:.3} deg/s",
        seq0.map_or("none".into(), |v| v.to_string()),
        first.len()
    );
    Ok((
        fig,
        problems,
        json!({ "restarts_before": r0, "restarts_after": r1, "first_seqno": seq0,
                 "max_qd_deg_s": max_qd_deg_s, "cycles": first.len() }),
    ))
}

/// A host stall during a window, proven by every service's watchdog (every process
/// unscheduled together, `common::watchdog::common_stall`): its figures, for the report. A
/// stall is a real property of the PC (the verdict stands); the report says so, so that a
/// reader can tell a frozen host from a bad link.
async fn host_stall(s: &Session, cell: &CellSection, from_ns: u64) -> Option<Value> {
    let to_ns = clock::mono_ns();
    let (procs, missing) = crate::stall::gaps(s, cell).await;
    // As `stall::prove`: a robot-io or control that did not answer may be the frozen one.
    if missing.iter().any(|m| m == "robot-io" || m == "control") {
        return None;
    }
    common::watchdog::common_stall(&procs, from_ns, to_ns)
        .ok()
        .map(|st| {
            json!({
                "common_ms": st.common.len_ns() as f64 * 1e-6,
                "from_ns": st.common.from_ns,
                "per_process_ms": st.per_process.iter().map(|(n, g)| (n.clone(), g.len_ns() as f64 * 1e-6)).collect::<Vec<_>>(),
            })
        })
}

fn note_stall(st: &mut Step, stall: Option<Value>) {
    if let Some(v) = stall {
        st.figures += &format!(
            "; the host froze every cell process together for {:.0} ms in this window (proven by their watchdogs)",
            v["common_ms"].as_f64().unwrap_or(f64::NAN)
        );
        if let Some(o) = st.data.as_object_mut() {
            o.insert("host_stall".into(), v);
        }
    }
}

fn load_irc5(req: &Request) -> Result<(String, robot_io::egm::irc5::Irc5Egm), String> {
    use robot_io::egm::irc5::Irc5Egm;
    let dir = req.irc5.clone().or_else(|| {
        let d = PathBuf::from("deploy/irc5");
        d.is_dir().then_some(d)
    });
    match dir {
        Some(d) => Irc5Egm::load_dir(&d)
            .map(|i| (d.display().to_string(), i))
            .map_err(|e| format!("{}: {}", d.display(), e.join("; "))),
        None => Irc5Egm::builtin()
            .map(|i| ("the built-in deploy/irc5".to_string(), i))
            .map_err(|e| e.join("; ")),
    }
}

fn egm_side(setup: &Setup) -> Result<robot_io::egm::irc5::CellEgmSide, String> {
    let bind = setup
        .robot_io
        .egm
        .bind
        .parse()
        .map_err(|e| format!("robot_io.egm.bind {:?}: {e}", setup.robot_io.egm.bind))?;
    let sim = match &setup.sim {
        Some(sim) => Some((
            sim.egm.cycle_ms,
            sim.egm
                .robot_io
                .parse()
                .map_err(|e| format!("sim.egm.robot_io {:?}: {e}", sim.egm.robot_io))?,
        )),
        None => None,
    };
    Ok(robot_io::egm::irc5::CellEgmSide {
        config: setup.config_name.clone(),
        bind,
        command_timeout_ms: setup.robot_io.command_timeout_ms,
        silence_timeout_ms: setup.robot_io.egm.silence_timeout_ms,
        real: sim.is_none(),
        sim,
        max_joint_speed_deg_s: setup
            .robot_io
            .egm
            .capped_speeds(setup.arm.limits().max_speed)
            .iter()
            .fold(0.0f64, |m, v| m.max(v.to_degrees())),
        controller: setup
            .robot_io
            .egm
            .controller_pin()
            .map_err(|e| format!("robot_io.egm.controller: {e}"))?
            .map(|p| (p.ip, p.port)),
        sim_controller_bind: match &setup.sim {
            Some(sim) => Some(
                sim.egm
                    .bind
                    .parse()
                    .map_err(|e| format!("sim.egm.bind {:?}: {e}", sim.egm.bind))?,
            ),
            None => None,
        },
    })
}

fn sensor_rate_hz(setup: &Setup) -> f64 {
    match setup.sensor.driver {
        sensor::config::SensorDriver::Ati => setup.sensor.ati.sample_rate_hz,
        _ => f64::from(setup.sensor.sri.sample_rate_hz),
    }
}

async fn wait_joint_state(js: &Collect<JointState>) -> Option<JointState> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if let Some(m) = js.v.lock().ok().and_then(|g| g.last().copied()) {
            return Some(m);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Largest joint excursion (deg) over a set of joint states.
fn joint_motion_deg(js: &[JointState]) -> f64 {
    let mut worst = 0.0f64;
    for j in 0..6 {
        let (lo, hi) = js
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), m| {
                (l.min(m.q_rad[j]), h.max(m.q_rad[j]))
            });
        if hi >= lo {
            worst = worst.max((hi - lo).to_degrees());
        }
    }
    worst
}

#[allow(clippy::needless_range_loop)] // six joints, named by index
fn joints_check(m: &JointState, setup: &Setup) -> (String, Vec<String>, Value) {
    let lim = setup.arm.limits();
    let mut problems = Vec::new();
    let r = m.robot;
    if !r.motors_on {
        problems.push("the controller reports motors off".into());
    }
    if !r.program_running {
        problems.push("the controller's RAPID program is not running".into());
    }
    if !r.external_control_active {
        problems.push("EGM is not running on the controller (EGMRunJoint not active)".into());
    }
    let mut margins = [0.0; 6];
    for j in 0..6 {
        let q = m.q_rad[j];
        let margin = (q - lim.min[j]).min(lim.max[j] - q).to_degrees();
        margins[j] = margin;
        if margin < 1.0 {
            problems.push(format!(
                "joint {} at {:.1}° is {:.1}° from its configured limit [{:.0}, {:.0}]°",
                j + 1,
                q.to_degrees(),
                margin,
                lim.min[j].to_degrees(),
                lim.max[j].to_degrees()
            ));
        }
        // The config may narrow the arm's range, never widen it (the IRB 120's data sheet).
        let Some(cat) = &setup.catalog_limits else {
            continue;
        };
        if lim.min[j] < cat.min[j] - 1e-9 || lim.max[j] > cat.max[j] + 1e-9 {
            problems.push(format!(
                "[arm] limits of joint {} [{:.1}, {:.1}]° are wider than the arm model's [{:.0}, {:.0}]°",
                j + 1,
                lim.min[j].to_degrees(),
                lim.max[j].to_degrees(),
                cat.min[j].to_degrees(),
                cat.max[j].to_degrees()
            ));
        }
    }
    let q_deg: Vec<String> = m
        .q_rad
        .iter()
        .map(|q| format!("{:.1}", q.to_degrees()))
        .collect();
    let least = margins.iter().copied().fold(f64::INFINITY, f64::min);
    (
        format!(
            "motors {}, RAPID {}, EGM {}; q = ({})°, nearest limit {least:.1}° away",
            if r.motors_on { "on" } else { "off" },
            if r.program_running {
                "running"
            } else {
                "stopped"
            },
            if r.external_control_active {
                "running"
            } else {
                "not running"
            },
            q_deg.join(", ")
        ),
        problems,
        json!({ "q_deg": m.q_rad.map(f64::to_degrees), "margins_deg": margins, "status": {
            "motors_on": r.motors_on, "program_running": r.program_running,
            "egm_running": r.external_control_active } }),
    )
}

async fn round_trip(
    s: &Session,
    cell: &CellSection,
    cycle_s: f64,
) -> anyhow::Result<(String, Vec<String>, Value)> {
    let start = cli::latest_tcp(s, cell, Duration::from_secs(2)).await?;
    let before = robot_io_status(s, cell).await;
    let mut up = start;
    up.position_m[2] += 0.005;
    for (k, target) in [up, start].iter().enumerate() {
        let errs = cli::control_errors(s, cell).await;
        cli::move_to(s, cell, *target, 0.02, 10f64.to_radians()).await?;
        cli::wait_move(s, cell, target, errs, Duration::from_secs(10), false)
            .await
            .with_context(|| if k == 0 { "5 mm up" } else { "back" })?;
    }
    let reached = cli::latest_tcp(s, cell, Duration::from_secs(2)).await?;
    let err_mm = (Vector3::from(reached.position_m) - Vector3::from(start.position_m)).norm() * 1e3;
    let after = robot_io_status(s, cell).await;
    let lat = |v: &Option<Value>, k: &str| v.as_ref().and_then(|v| v["latency"][k].as_u64());
    let commanded = lat(&after, "commanded_cycles")
        .zip(lat(&before, "commanded_cycles"))
        .map(|(a, b)| a.saturating_sub(b));
    let missed = lat(&after, "missed_cycles")
        .zip(lat(&before, "missed_cycles"))
        .map(|(a, b)| a.saturating_sub(b));
    // The jog's own latencies: robot-io's histogram after minus before.
    let hist = |v: &Option<Value>| {
        v.as_ref()
            .and_then(|v| {
                serde_json::from_value::<common::latency::Sparse>(
                    v["latency"]["end_to_end_hist"].clone(),
                )
                .ok()
            })
            .and_then(|s| common::latency::Histogram::from_sparse(&s).ok())
    };
    let e2e = match (hist(&before), hist(&after)) {
        (Some(b), Some(a)) => serde_json::to_value(a.since(&b).summary()).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    let turnaround = after
        .as_ref()
        .map(|v| v["egm"]["turnaround_ms"].clone())
        .unwrap_or(Value::Null);
    let p99_us = e2e["p99"].as_f64().unwrap_or(f64::NAN);
    let mut problems = Vec::new();
    let (Some(commanded), Some(missed)) = (commanded, missed) else {
        anyhow::bail!("robot-io's status has no command latency (driver without EGM?)");
    };
    if commanded == 0 {
        problems.push("no cycle was commanded during the jog".into());
    }
    // A missed cycle is answered by extrapolating the last command: harmless once in a
    // while, a sign of an overloaded or mis-scheduled PC beyond 1 %.
    if missed * 100 > commanded + missed {
        problems.push(format!(
            "{missed} of {} cycles had no command in time (target ≤ 1 %)",
            commanded + missed
        ));
    }
    if !at_most(p99_us, cycle_s * 1e6) {
        problems.push(format!(
            "controller message → joint command p99 {p99_us:.0} µs, longer than the {:.0} ms cycle",
            cycle_s * 1e3
        ));
    }
    if !at_most(err_mm, 0.5) {
        problems.push(format!(
            "the TCP came back {err_mm:.2} mm from where it started"
        ));
    }
    Ok((
        format!(
            "{commanded} cycles commanded, {missed} missed; EgmRobot → joint command over the jog p50 {:.0} µs, p99 {p99_us:.0} µs, max {:.0} µs; reply turnaround mean {:.3} ms; back within {err_mm:.3} mm",
            e2e["p50"].as_f64().unwrap_or(f64::NAN),
            e2e["max"].as_f64().unwrap_or(f64::NAN),
            turnaround["mean"].as_f64().unwrap_or(f64::NAN),
        ),
        problems,
        json!({ "commanded": commanded, "missed": missed, "end_to_end_us": e2e,
                "turnaround_ms": turnaround, "return_error_mm": err_mm }),
    ))
}

async fn frame_step(
    s: &Session,
    cell: &CellSection,
    setup: &Setup,
    req: &Request,
    js: &Collect<JointState>,
) -> anyhow::Result<(judge::FrameCheck, Vec<Value>)> {
    let scripted = setup.sim.is_some() && !req.operator;
    say("sensor frame: tare (arm still, nothing touching the tool)");
    leadexp::tare(s, cell).await.context("tare")?;
    let q = wait_joint_state(js)
        .await
        .context("no joint state for the pose")?
        .q_rad;
    let sensor_in_base = setup
        .arm
        .fk_sensor(&q)
        .map_err(|e| anyhow::anyhow!("kinematics: {e}"))?
        .rotation;
    let est = Collect::<WrenchEstimate>::start(s, topic::WRENCH_ESTIMATE.key(&cell.id)).await?;
    let mut pushes = Vec::new();
    let mut raw = Vec::new();
    for (i, name) in ["+x", "+y", "+z"].iter().enumerate() {
        let mut dir = Vector3::zeros();
        dir[i] = 1.0;
        let read = if scripted {
            say(&format!(
                "sensor frame: the simulator pushes the tool {:.0} N along {name} of the base",
                req.push_n
            ));
            let f = dir * req.push_n;
            sim_fault(s, cell, json!({ "external_force_base_n": [f.x, f.y, f.z] })).await?;
            tokio::time::sleep(Duration::from_millis(600)).await;
            est.take();
            tokio::time::sleep(Duration::from_millis(500)).await;
            let got = est.take();
            sim_fault(s, cell, json!({ "external_force_base_n": [0.0, 0.0, 0.0] })).await?;
            tokio::time::sleep(Duration::from_millis(600)).await;
            mean_base_force(&got).context("no usable wrench estimate during the push")?
        } else {
            say(&format!(
                "sensor frame: PUSH the tool along {name} of the robot's base with about {:.0} N and hold it (30 s to start)",
                req.push_n
            ));
            let r = operator_push(&est, req.push_n).await?;
            say("thank you — let go");
            tokio::time::sleep(Duration::from_secs(2)).await;
            r
        };
        raw.push(json!({ "pushed": name, "read_base_n": [read.x, read.y, read.z] }));
        pushes.push(judge::Push {
            pushed_base: dir,
            read_base: read,
        });
    }
    Ok((
        judge::frame_check(&pushes, req.push_n, &UnitQuaternion::from(sensor_in_base)),
        raw,
    ))
}

fn mean_base_force(got: &[WrenchEstimate]) -> Option<Vector3<f64>> {
    let ok: Vec<&WrenchEstimate> = got
        .iter()
        .filter(|w| w.fault == WrenchFault::None)
        .collect();
    if ok.is_empty() {
        return None;
    }
    let sum = ok
        .iter()
        .fold(Vector3::zeros(), |a, w| a + Vector3::from(w.base.force_n));
    Some(sum / ok.len() as f64)
}

/// Waits for the operator's push: the force above half the asked for 0.5 s; its mean then.
async fn operator_push(est: &Collect<WrenchEstimate>, push_n: f64) -> anyhow::Result<Vector3<f64>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut held: Vec<WrenchEstimate> = Vec::new();
    let mut since: Option<Instant> = None;
    est.take();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        for w in est.take() {
            let strong =
                w.fault == WrenchFault::None && Vector3::from(w.base.force_n).norm() > 0.5 * push_n;
            if strong {
                since.get_or_insert_with(Instant::now);
                held.push(w);
            } else {
                since = None;
                held.clear();
            }
        }
        if since.is_some_and(|t| t.elapsed() >= Duration::from_millis(500)) {
            return mean_base_force(&held).context("no usable estimate");
        }
    }
    anyhow::bail!(
        "no push above {:.1} N held for 0.5 s within 30 s",
        0.5 * push_n
    )
}

async fn estop_step(
    s: &Session,
    cell: &CellSection,
    js: &Collect<JointState>,
    cycle_s: f64,
) -> anyhow::Result<(String, Vec<String>, Value)> {
    say("e-stop round trip: engaging the software e-stop (latched in robot-io), then resetting it");
    js.take();
    let t0 = clock::mono_ns();
    let st = cli::estop(s, cell, cli::SafetyRequest::Stop(EStopAction::Engage)).await?;
    let ack_ms = (clock::mono_ns() - t0) as f64 * 1e-6;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = js.take();
    let moved = joint_motion_deg(&held);
    let t1 = clock::mono_ns();
    let reset = cli::estop(
        s,
        cell,
        cli::SafetyRequest::Reset(common::msg::ResetScope::All),
    )
    .await;
    let reset_ms = (clock::mono_ns() - t1) as f64 * 1e-6;
    let mut problems = Vec::new();
    if st.level != common::msg::SafetyLevel::EmergencyStop {
        problems.push(format!("robot-io's state after the e-stop: {:?}", st.level));
    }
    if moved > 0.01 {
        problems.push(format!("the arm moved {moved:.3}° while e-stopped"));
    }
    if held.is_empty() {
        problems.push(
            "no joint state while e-stopped (robot-io must keep answering the controller, holding)"
                .into(),
        );
    }
    // Ten cycles: what robot-io's e-stop path plus the bus takes on a healthy PC.
    let bound_ms = (10.0 * cycle_s * 1e3).max(20.0);
    if ack_ms > bound_ms {
        problems.push(format!(
            "acknowledged after {ack_ms:.1} ms (target ≤ {bound_ms:.0} ms)"
        ));
    }
    if let Err(e) = &reset {
        problems.push(format!("reset: {e:#}"));
    }
    Ok((
        format!(
            "acknowledged in {ack_ms:.1} ms ({:?}), arm still within {moved:.4}° over 0.5 s ({} joint states), reset acknowledged in {}",
            st.level,
            held.len(),
            if reset.is_ok() { format!("{reset_ms:.1} ms") } else { "—".into() }
        ),
        problems,
        json!({ "ack_ms": ack_ms, "held_motion_deg": moved, "reset_ms": reset.is_ok().then_some(reset_ms) }),
    ))
}

fn print_step(st: &Step) {
    println!("{:<4}  {:<10}  {}", st.verdict(), st.name, st.figures);
    for p in &st.problems {
        println!("            ✗ {p}");
    }
    if !st.hint.is_empty() {
        println!("            fix: {}", st.hint);
    }
}

fn print_summary(steps: &[Step], total: f64, ok: bool) {
    println!();
    println!("cell commission — {:.0} s", total);
    for st in steps {
        let line = if st.pass.is_none() {
            st.figures.clone()
        } else {
            st.problems.first().cloned().unwrap_or_else(|| "ok".into())
        };
        println!("  {:<4}  {:<10}  {}", st.verdict(), st.name, line);
    }
    println!(
        "{}",
        if ok {
            "RESULT: PASS — no step failed"
        } else {
            "RESULT: FAIL — fix the failed steps (hints above and in the report), then run again"
        }
    );
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn write_report(
    out: &Path,
    setup: &Setup,
    steps: &[Step],
    total: f64,
    ok: bool,
) -> anyhow::Result<()> {
    let report = json!({
        "config": setup.config_name,
        "pass": ok,
        "seconds": total,
        "steps": steps,
    });
    let f = out.join("report.json");
    std::fs::write(&f, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", f.display()))?;
    let mut h = String::new();
    h += "<!doctype html><meta charset=utf-8><title>cell commission</title>";
    h += "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}table{border-collapse:collapse}.PASS{background:#dfd}.FAIL{background:#fdd}</style>";
    h += &format!(
        "<h1>cell commission: {}</h1><p>config {} — {:.0} s</p><table><tr><th>step</th><th>checks</th><th>verdict</th><th>figures</th><th>problems and fix</th></tr>",
        if ok { "PASS" } else { "FAIL" },
        esc(&setup.config_name),
        total
    );
    for st in steps {
        let mut p: String = st
            .problems
            .iter()
            .map(|p| format!("✗ {}<br>", esc(p)))
            .collect();
        if !st.hint.is_empty() {
            p += &format!("<b>fix:</b> {}", esc(&st.hint));
        }
        h += &format!(
            "<tr><td>{}</td><td>{}</td><td class={v}>{v}</td><td>{}</td><td>{}</td></tr>",
            st.name,
            esc(st.what),
            esc(&st.figures),
            p,
            v = st.verdict()
        );
    }
    h += "</table>";
    let f = out.join("report.html");
    std::fs::write(&f, h).with_context(|| format!("writing {}", f.display()))?;
    Ok(())
}
