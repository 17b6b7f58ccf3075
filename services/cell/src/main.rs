//! `cell`: launcher/supervisor of the cell's services and the operator CLI.

use std::{process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use common::{
    bus::BusArgs,
    config::CellSection,
    msg::{EStopAction, Mode, ResetScope, TaskRobot},
    service::{self, ConfigArgs, Loader},
};
use kinematics::{config::ArmSection, Arm};
use nalgebra::Isometry3;

use cell::{cli, launcher, lead};
use kinematics::rpc as kin;

#[derive(Parser)]
#[command(
    version,
    about = "Force-controlled robot cell: launcher and operator CLI"
)]
struct Args {
    /// Operator commands log zenoh's and the CLI's own messages (info) too; without it only
    /// warnings (zenoh: errors) are shown. `cell up` always logs at info. RUST_LOG overrides.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(flatten)]
    cfg: ConfigArgs,
    #[command(flatten)]
    bus: BusArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The command path's latency through the real processes while a hybrid task runs:
    /// end to end (EgmRobot k → joint command k), per hop, in-service, the force loop,
    /// missed cycles, CPU per process, and an in-process baseline of the same cores. Exits
    /// non-zero on missed cycles only (timings are reported, not judged).
    Latency {
        /// Robot cycle rate (Hz): a whole number of ms (1000, 500, 250, …).
        #[arg(long = "rate", default_value_t = 250.0)]
        rate_hz: f64,
        /// Measured window (s), after the workload reaches contact.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Skip the in-process baseline.
        #[arg(long)]
        no_baseline: bool,
        /// Run the private cell under SCHED_FIFO at this priority (1–99; needs the privilege),
        /// every thread of every process, as the systemd units' CPUSchedulingPolicy=fifo.
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..=99))]
        fifo: Option<i32>,
        /// Record every cell topic into this MCAP file while measuring (the recorder's cost
        /// on the command path: compare a run with and one without).
        #[arg(long, value_name = "FILE")]
        record: Option<std::path::PathBuf>,
        /// With --record: record through the router, as a client (the recorder's cost before
        /// it had a peer session of its own; for the comparison in docs/performance.md).
        #[arg(long, requires = "record")]
        record_via_router: bool,
    },
}

#[derive(Subcommand)]
enum CertsCmd {
    /// Make a test CA and one certificate and key per identity (router, services, control
    /// host, operators), each with its identity as the common name. DIR: the loaded config's
    /// `[cell.security] dir`, else the one deploy/config/sim-secure.toml names.
    Init {
        dir: Option<std::path::PathBuf>,
        /// Subject alternative names (IP addresses, host names) the nodes are reached at.
        #[arg(long = "ip", default_values_t = ["127.0.0.1".to_string(), "localhost".to_string()])]
        names: Vec<String>,
        /// Operator identities beyond the config's (`[cell.security] operators`).
        #[arg(long = "operator")]
        operators: Vec<String>,
        /// Validity in days.
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Replace an existing CA (every node then needs its new certificate).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the cell: embedded zenoh router + every service as a supervised process.
    Up,
    /// Run one service in this process (what `cell up` starts for each service; the same code
    /// as the `cell-<name>` binary): robot-io, kinematics, control, force, sensor or sim.
    Service { name: launcher::Service },
    /// Run only the cell's zenoh router (for deployments where systemd or compose start the
    /// services).
    Router,
    /// Certificates of a secured cell (`[cell.security]`, docs/security.md).
    Certs {
        #[command(subcommand)]
        cmd: CertsCmd,
    },
    /// List live services (liveliness tokens).
    Ls,
    /// Status of one or every service.
    Status {
        service: Option<String>,
        /// One JSON object per service, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Scheduling gaps of every service (their watchdogs, `common::watchdog`); with
    /// `--prove-since-ns`, whether every process was unscheduled together since that host
    /// monotonic time (a proven host stall: exit 0; not proven: the reason, exit 1).
    Stalls {
        #[arg(long)]
        prove_since_ns: Option<u64>,
        /// The stop reason to prove (a proof needs a silence: Stale, RobotSilent, CommandStale).
        #[arg(long, default_value = "Stale")]
        why: String,
    },
    /// Print decoded messages of a topic (suffix like `robot/joint_state` or full key).
    Echo {
        topic: String,
        #[arg(long, short = 'n')]
        count: Option<u64>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Record the cell's topics into an MCAP file (Foxglove opens it; `cell replay` plays it
    /// back): each message as JSON with a JSON schema per channel, and its raw bus payload on
    /// `raw/<key>`. Until --seconds or Ctrl-C; a killed recording keeps all but its last
    /// second. See docs/observability.md.
    Record {
        file: std::path::PathBuf,
        /// Only these topics (suffixes like `force/wrench`; default: every cell topic).
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// Publish a recording's raw payloads back onto the cell at recorded timing. With
    /// robot-io live, command and device-feedback topics are skipped; --commands replays them
    /// too, and is refused while robot-io reports an active robot.
    Replay {
        file: std::path::PathBuf,
        /// Playback rate (2: twice as fast).
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Start again at the end (Ctrl-C stops).
        #[arg(long = "loop")]
        looped: bool,
        /// Only these topics (suffixes, comma separated).
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// Also replay command topics onto a cell whose robot-io is live (refused while a
        /// robot is active).
        #[arg(long)]
        commands: bool,
    },
    /// A Foxglove WebSocket server: the running cell live (topics as plottable JSON, the arm
    /// in 3-D with the force arrow and the constraint frame, a log of safety and mode
    /// changes, operator services), or a recording with play/pause/seek (--replay). Open
    /// Foxglove → Open connection → ws://ADDR, layout deploy/foxglove/cell.json.
    Viz {
        /// Replay this recording instead of the live cell.
        #[arg(long, value_name = "FILE")]
        replay: Option<std::path::PathBuf>,
        /// Address to listen on (HOST:PORT; Foxglove's default port is 8765).
        #[arg(long, default_value = cell::viz::DEFAULT_LISTEN)]
        listen: String,
        /// Replay: initial playback speed.
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Replay: start again at the end.
        #[arg(long = "loop")]
        looped: bool,
        /// Stop after this many seconds (default: until Ctrl-C).
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// Print a topic's rate once per second.
    Hz {
        topic: String,
        /// Stop after this many seconds.
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// Switch control mode.
    Mode { mode: ModeArg },
    /// Straight-line TCP move (position in mm, ABB quaternion w x y z; default: keep the
    /// zero-pose orientation).
    Move {
        #[arg(allow_negative_numbers = true)]
        x_mm: f64,
        #[arg(allow_negative_numbers = true)]
        y_mm: f64,
        #[arg(allow_negative_numbers = true)]
        z_mm: f64,
        #[arg(num_args = 4, allow_negative_numbers = true, value_names = ["QW", "QX", "QY", "QZ"])]
        quat: Option<Vec<f64>>,
        #[arg(long, default_value_t = 100.0)]
        speed_mm_s: f64,
        #[arg(long, default_value_t = 30.0)]
        rot_speed_deg_s: f64,
        /// Wait until the TCP is at the target (progress on stderr); exit non-zero when
        /// control refuses the move or the motion ends without reaching it.
        #[arg(long)]
        wait: bool,
    },
    /// Joint-space move (like RAPID's MoveAbsJ) to six joint angles in degrees: one
    /// synchronised, jerk-limited segment from the measured joints; waits for its end (Ctrl-C
    /// stops it) and exits non-zero when it does not arrive.
    MoveJoints {
        #[arg(num_args = 6, allow_negative_numbers = true, value_names = ["A1", "A2", "A3", "A4", "A5", "A6"])]
        q_deg: Vec<f64>,
        /// Fraction of the joint speed and acceleration limits, in (0, 1] (default
        /// `[control.playback] approach_speed_scale`).
        #[arg(long)]
        speed_scale: Option<f64>,
    },
    /// Tare the F/T sensor (robot still, no contact): averages samples in force processing.
    Tare,
    /// Tool payload (mass, centre of mass, sensor offsets).
    Payload {
        #[command(subcommand)]
        cmd: PayloadCmd,
    },
    /// Simulator faults and injections: prints them, or merges a JSON object into them, e.g.
    /// '{"packet_loss":0.1,"jitter_ms":2}', '{"sensor_unplugged":true}',
    /// '{"external_force_base_n":[0,0,-10]}', '{"controller_stopped":true}'.
    SimFault { json: Option<String> },
    /// Simulator scenario (`sim/rpc/scenario`): prints it, or applies a JSON request, e.g.
    /// '{"set":{"surfaces.0.stiffness_n_per_m":1e5}}', '{"load":"scenarios/curved-contact.toml"}',
    /// '{"reset":true}', '{"arm":true}' (re-arm contact triggers). See docs/simulator.md.
    SimScenario { json: Option<String> },
    /// Engage the e-stop (latches in robot-io, survives its restart, until `cell reset`).
    /// Waits for robot-io's acknowledgement; exits non-zero when none comes within 0.5 s.
    Estop,
    /// Reset the e-stop latch and a protective stop (waits for the acknowledgement).
    Reset {
        /// Reset a protective stop only, never an e-stop.
        #[arg(long)]
        protective: bool,
    },
    /// Run a hybrid position/force task (TOML, see tasks/README.md): shows progress, writes
    /// trace.csv and metrics.json, exits non-zero when the task is refused or aborted.
    Hybrid {
        task: std::path::PathBuf,
        /// Output directory (default runs/<task name>-<unix time>).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Print the metrics as one JSON object (no progress lines).
        #[arg(long)]
        json: bool,
        /// Contact stiffness (N/m) for the task's default force gains (e.g. from `cell
        /// identify stiffness`), when the task file gives no [gains]; without it control uses
        /// its configured `[control.hybrid] stiffness_n_per_m`.
        #[arg(long)]
        stiffness_n_per_m: Option<f64>,
        /// Record the cell's topics while the task runs (MCAP; default OUT/run.mcap).
        #[arg(long, value_name = "FILE", num_args = 0..=1)]
        record: Option<Option<std::path::PathBuf>>,
    },
    /// Run a paper's experiment against the simulator (the running cell, or a private one it
    /// starts): force-step, ramp-disturbance, sine-force-step, force-ramp, contour,
    /// unknown-surface, peg-in-hole, lead-through-axes, lead-through-45, teach-playback; `all` runs every one
    /// and regenerates docs/experiments.md (definitions, retries: docs/experiments.md). Writes traces (CSV), plots (SVG, PNG) and
    /// metrics (JSON) into --out; exits non-zero when a gate target fails.
    Experiment {
        name: String,
        /// The 2-DOF plant law's rate (Hz; the paper: 60, 80, 120). Default: the paper's.
        #[arg(long = "rate")]
        rate_hz: Option<f64>,
        /// Output directory (default out/experiments/NAME; `all`: out/experiments).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Print the metrics JSON (one object per experiment) instead of progress.
        #[arg(long)]
        json: bool,
        /// World parameter for every case, through the simulator's scenario `set`
        /// (docs/experiments.md): e.g. --world surfaces.0.mu=0.5 --world tool.mass_kg=1.2.
        #[arg(long, value_name = "KEY=VALUE")]
        world: Vec<String>,
        /// The CI short form (fewer cases).
        #[arg(long)]
        short: bool,
        /// `all`: the docs directory to regenerate (default: the repository's docs/).
        #[arg(long)]
        docs: Option<std::path::PathBuf>,
        /// Record the bus while the experiments run (MCAP; default OUT/experiment.mcap).
        #[arg(long, value_name = "FILE", num_args = 0..=1)]
        record: Option<Option<std::path::PathBuf>>,
    },
    /// The cell doing its job, end to end: starts a private simulated cell (unless one runs),
    /// tares, identifies the payload, hand-guides (scripted operator) through three waypoints
    /// while teaching them, saves and plays the program back, presses 10 N on a table while
    /// tracing a line, and the peg-in-hole when available; prints a summary table and writes
    /// plots and report.html into --out. Exits non-zero when a step misses its tolerance.
    Demo {
        /// Output directory (default out/demo).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Leave out the peg-in-hole.
        #[arg(long)]
        no_peg: bool,
        /// Record the whole demo's bus traffic (MCAP; default OUT/demo.mcap), linked from the
        /// report.
        #[arg(long, value_name = "FILE", num_args = 0..=1)]
        record: Option<Option<std::path::PathBuf>>,
    },
    /// Check a cell step by step before its first force task (meant for the real arm, tested
    /// on the simulator): services, the config against the IRC5 side, the EGM link (rate,
    /// jitter, loss), the command round trip (a 5 mm jog), joints and controller state, the
    /// F/T sensor at rest, its mounting frame (pushes along +x, +y, +z of the base: the
    /// operator's, or the simulator's scripted ones), the payload, the e-stop round trip.
    /// PASS/FAIL per step with figures and a fix hint; report.html + report.json in --out.
    /// Uses the running cell (a simulated config without one: a private cell). Exit 0 only
    /// when no step failed. See docs/commissioning.md.
    Commission {
        /// Output directory (default out/commission).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// EGM link window (s).
        #[arg(long, default_value_t = 10.0)]
        egm_seconds: f64,
        /// F/T at-rest window (s).
        #[arg(long, default_value_t = 30.0)]
        rest_seconds: f64,
        /// Force of each mounting-frame push (N).
        #[arg(long, default_value_t = 15.0)]
        push_n: f64,
        /// Ask the operator to push, also on the simulator (default there: scripted pushes).
        #[arg(long)]
        operator: bool,
        /// The EGM step's target for the arrival jitter's p99 (ms). The default suits a real
        /// PC with robot-io on its real-time core; a shared or virtual test host needs more.
        #[arg(long, default_value_t = 2.0)]
        max_jitter_ms: f64,
        /// The IRC5 side as loaded on the controller (default deploy/irc5, else the built-in).
        #[arg(long)]
        irc5: Option<std::path::PathBuf>,
        /// Leave out steps (comma separated): egm, round-trip, joints, ft-rest, frame, payload,
        /// estop.
        #[arg(long, value_delimiter = ',')]
        skip: Vec<String>,
        /// Let a real cell pass the `security` step unsecured (an isolated network).
        #[arg(long)]
        allow_unsecured: bool,
    },
    /// Benchmarks (`cell bench latency`): a private simulated cell at a given robot cycle.
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
    /// Hand guiding (lead-through): starts guiding and streams the deadman keep-alive from this
    /// terminal until Ctrl-C or --seconds (then the arm decelerates and holds). Laws:
    /// admittance (default), stiffness (Cai et al.), staircase (baseline). Exits non-zero with
    /// control's reason when control ends the session (a protective stop, a fault).
    Guide {
        #[arg(long)]
        law: Option<String>,
        /// Override a `[control.guide]` field for this session, e.g. --param damping_n_s_per_m=80.
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
        #[arg(long)]
        seconds: Option<f64>,
        /// Record the session into DIR: guide.csv (control's guide states, through the end
        /// and 1 s after it), after_end.csv (the force estimate, and the simulator's truth,
        /// over the second after the end) and metrics.json (how it ended).
        #[arg(long, value_name = "DIR")]
        trace: Option<std::path::PathBuf>,
        /// Record the cell's topics during the session (MCAP; default
        /// out/recordings/guide-<time>.mcap).
        #[arg(long, value_name = "FILE", num_args = 0..=1)]
        record: Option<Option<std::path::PathBuf>>,
    },
    /// Stream the deadman keep-alive (20 Hz) until Ctrl-C or --seconds, for the guide session
    /// whose reply gave TOKEN (`enable_token`; `cell guide` streams its own). Enables without
    /// the running session's token are ignored by control.
    Enable {
        #[arg(long)]
        token: u64,
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// The teach buffer and program files.
    Teach {
        #[command(subcommand)]
        cmd: TeachCmd,
    },
    /// Play a taught program (programs/NAME.toml): progress until done; Ctrl-C stops it on the
    /// path. Refused when the program's tool or payload differs from the mounted one.
    Play {
        name: String,
        #[arg(long, default_value = "programs")]
        dir: std::path::PathBuf,
        /// Speed scale in (0, 1].
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Straight TCP lines between the waypoints (default: synchronised joint moves).
        #[arg(long)]
        cartesian: bool,
    },
    /// Pause, resume or stop the running playback.
    Playback {
        #[command(subcommand)]
        cmd: PlaybackCmd,
    },
    /// Identify the environment: `cell identify stiffness` probes a fixture.
    Identify {
        #[command(subcommand)]
        cmd: IdentifyCmd,
    },
    /// Offline kinematics of the configured arm (no running cell needed).
    Kin {
        #[command(subcommand)]
        cmd: KinCmd,
    },
}

#[derive(Subcommand)]
enum TeachCmd {
    /// Record the robot's pose as the next waypoint.
    Record { label: Option<String> },
    /// Remove the last waypoint.
    Undo,
    /// Show the waypoints.
    List,
    /// Remove every waypoint.
    Clear,
    /// Save the waypoints as programs/NAME.toml (with the mounted tool and payload).
    Save {
        name: String,
        #[arg(long, default_value = "programs")]
        dir: std::path::PathBuf,
    },
    /// Load programs/NAME.toml into the teach buffer.
    Load {
        name: String,
        #[arg(long, default_value = "programs")]
        dir: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum PlaybackCmd {
    Pause,
    Resume,
    Stop,
}

#[derive(Subcommand)]
enum PayloadCmd {
    /// Visit the configured pose set (`force.identification_poses_deg`), average the sensor at
    /// each, and identify mass, centre of mass and offsets by least squares.
    Identify {
        /// Store the result in this cell config's `[force.payload]` (comments kept).
        #[arg(long)]
        write: Option<std::path::PathBuf>,
        /// Also write the load the IRC5 models (`cell_tool`'s tload in `DIR/CellEgm.mod`: the
        /// identified mass, its centre of gravity moved into tool0, plus the sensor body's):
        /// then load the module on the controller again.
        #[arg(long, value_name = "DIR")]
        write_irc5: Option<std::path::PathBuf>,
        /// The part of the F/T sensor the sensor cannot weigh (above its measuring plane, and
        /// the adapter): mass from its data sheet (kg), added to the IRC5's load only.
        #[arg(long, default_value_t = 0.0)]
        sensor_body_kg: f64,
        /// That body's centre of gravity in tool0 (mm: x,y,z).
        #[arg(long, value_delimiter = ',', num_args = 3, default_values_t = [0.0, 0.0, 0.0], allow_negative_numbers = true)]
        sensor_body_cog_mm: Vec<f64>,
        /// Joint moves between the poses at this fraction of the joint speed and
        /// acceleration limits (default `[control.playback] approach_speed_scale`).
        #[arg(long)]
        speed_scale: Option<f64>,
    },
}

#[derive(Subcommand)]
enum IdentifyCmd {
    /// Contact stiffness of a fixture along one base axis (Cai's probing): start with the
    /// tool tared, pointing at the fixture a few mm away (or touching it).
    Stiffness {
        /// Direction into the fixture: x, -x, y, -y, z, -z (base axes).
        #[arg(long, default_value = "-z", allow_hyphen_values = true)]
        into: String,
        /// Force added by the probing steps (N).
        #[arg(long, default_value_t = 15.0)]
        probe_force_n: f64,
        /// Longest approach before giving up (mm).
        #[arg(long, default_value_t = 20.0)]
        max_approach_mm: f64,
        /// Store the result in this cell config's `[control.hybrid] stiffness_n_per_m`.
        #[arg(long)]
        write: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum KinCmd {
    /// Forward kinematics of tool0: joints in rad (or deg with --deg).
    Fk {
        #[arg(num_args = 6, allow_negative_numbers = true, value_names = ["Q1", "Q2", "Q3", "Q4", "Q5", "Q6"])]
        q: Vec<f64>,
        #[arg(long)]
        deg: bool,
    },
    /// Inverse kinematics of tool0: position mm, ABB quaternion w x y z.
    Ik {
        #[arg(allow_negative_numbers = true)]
        x_mm: f64,
        #[arg(allow_negative_numbers = true)]
        y_mm: f64,
        #[arg(allow_negative_numbers = true)]
        z_mm: f64,
        #[arg(allow_negative_numbers = true)]
        qw: f64,
        #[arg(allow_negative_numbers = true)]
        qx: f64,
        #[arg(allow_negative_numbers = true)]
        qy: f64,
        #[arg(allow_negative_numbers = true)]
        qz: f64,
        /// Current joints (deg) to choose the nearest solution.
        #[arg(long, num_args = 6, allow_negative_numbers = true)]
        near: Option<Vec<f64>>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Idle,
    Hold,
    LeadThrough,
    Hybrid,
    Playback,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Idle => Mode::Idle,
            ModeArg::Hold => Mode::Hold,
            ModeArg::LeadThrough => Mode::LeadThrough,
            ModeArg::Hybrid => Mode::Hybrid,
            ModeArg::Playback => Mode::Playback,
        }
    }
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    // `cell service NAME`: this process becomes that service (its own config check, tracing,
    // runtime and bus session), before anything of the operator CLI is set up.
    if let Cmd::Service { name } = args.cmd {
        return launcher::service_main(name, args.cfg, args.bus);
    }
    // `cell --set world.<path>=VALUE experiment …`: world settings ride on the top-level
    // `--set` too (they are the scenario's, not the config's): moved to the experiment's world.
    if let Cmd::Experiment { world, .. } = &mut args.cmd {
        let (w, rest): (Vec<String>, Vec<String>) = args
            .cfg
            .set
            .drain(..)
            .partition(|s| s.trim_start().starts_with("world."));
        args.cfg.set = rest;
        world.extend(
            w.iter()
                .map(|s| s.trim_start().trim_start_matches("world.").to_string()),
        );
    }
    if matches!(args.cmd, Cmd::Up | Cmd::Router) || args.verbose {
        service::init_tracing();
    } else {
        service::init_tracing_with("warn,zenoh=error");
    }
    let mut loader = match Loader::new(&args.cfg) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cell: {e}");
            return ExitCode::from(service::EXIT_CONFIG as u8);
        }
    };
    let cell = loader.cell();
    let launcher_cfg: launcher::LauncherConfig = loader.section("launcher");
    let arm_cfg: ArmSection = loader.section("arm");
    let force_cfg: force::node::ForceConfig = loader.section("force");
    let control_cfg: control::config::ControlConfig = loader.section("control");
    let mut latch_file = None;
    let mut commission_cfg = None;
    if matches!(args.cmd, Cmd::Commission { .. }) {
        let rio: robot_io::config::RobotIoConfig = loader.section("robot_io");
        let sen: sensor::config::SensorConfig = loader.section("sensor");
        let sim_cfg: sim::node::SimConfig = loader.section("sim");
        let has_sim = launcher_cfg.services.iter().any(|s| s == "sim");
        commission_cfg = Some((rio, sen, has_sim.then_some(sim_cfg)));
    }
    if matches!(args.cmd, Cmd::Up) || args.cfg.check_config {
        // The launcher validates every table, so a bad config fails before anything starts.
        let rio: robot_io::config::RobotIoConfig = loader.section("robot_io");
        latch_file = Some(rio.latch_path(&cell.id));
        let _: kinematics::node::KinematicsConfig = loader.section("kinematics");
        let _: sensor::config::SensorConfig = loader.section("sensor");
        let _: sim::node::SimConfig = loader.section("sim");
    }
    if let Err(e) = loader.finish() {
        eprintln!("cell: {e}");
        return ExitCode::from(service::EXIT_CONFIG as u8);
    }
    if args.cfg.check_config {
        println!("cell: configuration valid");
        return ExitCode::SUCCESS;
    }
    if let Cmd::Kin { cmd } = &args.cmd {
        let arm = arm_cfg.build().unwrap_or_else(|_| Arm::irb120());
        return match kin_cmd(arm, cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cell kin: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cell: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let arm = arm_cfg.build().unwrap_or_else(|_| Arm::irb120());
    let setup = commission_cfg.map(|(robot_io, sensor, sim)| cell::commission::Setup {
        config_name: args
            .cfg
            .config
            .as_ref()
            .map_or("built-in defaults".into(), |p| p.display().to_string()),
        config: args.cfg.config.clone(),
        sets: args.cfg.set.clone(),
        services: launcher_cfg.services.clone(),
        robot_io,
        sensor,
        sim,
        force: force_cfg.clone(),
        arm: arm.clone(),
        catalog_limits: match arm_cfg.model {
            kinematics::config::ArmModel::Irb120 => Some(kinematics::ArmParams::irb120().limits),
            kinematics::config::ArmModel::Irb120t => Some(kinematics::ArmParams::irb120t().limits),
            kinematics::config::ArmModel::Custom => None,
        },
    });
    let verbose = args.verbose;
    let result = rt.block_on(run(
        args,
        cell,
        launcher_cfg,
        arm,
        force_cfg,
        control_cfg,
        latch_file,
        setup,
    ));
    let code = match result {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            // One line in the product's words; `-v` keeps the libraries' own text.
            if verbose {
                eprintln!("cell: {e:#}");
            } else {
                eprintln!(
                    "cell: {}",
                    common::errtext::operator_line(&format!("{e:#}"))
                );
            }
            1
        }
    };
    // Every child has exited and every session is closed: skip zenoh's runtime teardown at
    // exit (it takes about a second) so that `cell up` stops promptly on SIGTERM.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process without running atexit handlers; nothing is pending.
    unsafe { libc::_exit(code) }
}

/// `--record [FILE]` of a job: starts a recording on a session of its own, in peer mode
/// (`client::record::direct_session`; `FILE` empty: `default()`).
async fn start_recording(
    bus: &BusArgs,
    cell: &CellSection,
    record: Option<Option<std::path::PathBuf>>,
    default: impl FnOnce() -> std::path::PathBuf,
) -> anyhow::Result<Option<client::record::Recording>> {
    let Some(path) = record else {
        return Ok(None);
    };
    let path = path.unwrap_or_else(default);
    let rec = client::record::Recording::start_direct(bus, cell, &path, &[]).await?;
    eprintln!("recording to {}", path.display());
    Ok(Some(rec))
}

/// Ends a job's recording and says where it is (a failure is reported, not the job's).
async fn finish_recording(rec: Option<client::record::Recording>) {
    if let Some(rec) = rec {
        match rec.finish().await {
            Ok(sum) => eprintln!("{}", sum.line()),
            Err(e) => eprintln!("recording failed: {e:#}"),
        }
    }
}

#[allow(clippy::too_many_arguments)] // the sections main has already read and checked
async fn run(
    args: Args,
    cell: CellSection,
    launcher_cfg: launcher::LauncherConfig,
    arm: Arm,
    force_cfg: force::node::ForceConfig,
    control_cfg: control::config::ControlConfig,
    latch_file: Option<std::path::PathBuf>,
    setup: Option<cell::commission::Setup>,
) -> anyhow::Result<bool> {
    if let Cmd::Up = args.cmd {
        if cell
            .security
            .as_ref()
            .is_some_and(|s| s.profile == common::security::ProfileKind::Real)
            && launcher_cfg.services.iter().any(|s| s == "sim")
        {
            anyhow::bail!(
                "cell.security.profile = \"real\" with \"sim\" in launcher.services: a real cell has no simulator (use profile = \"sim\" for the simulated cell)"
            );
        }
        // A deliberate start comes up unlatched (and idle); the launcher's restarts of a
        // crashed robot-io keep the latch file, so an e-stop survives them.
        if let Some(f) = &latch_file {
            if f.exists() {
                tracing::warn!(path = %f.display(), "clearing the safety latch of an earlier run (deliberate start)");
            }
            robot_io::latch::clear(f).map_err(|e| {
                anyhow::anyhow!("cannot clear the safety latch {}: {e}", f.display())
            })?;
        }
        launcher::up(
            cell,
            launcher_cfg,
            args.cfg.config.clone(),
            args.cfg.set.clone(),
            Box::pin(service::shutdown_signal()),
        )
        .await?;
        return Ok(true);
    }
    if let Cmd::Certs {
        cmd:
            CertsCmd::Init {
                dir,
                names,
                operators,
                days,
                force,
            },
    } = &args.cmd
    {
        let sec = cell
            .security
            .clone()
            .unwrap_or(common::security::SecuritySection {
                profile: common::security::ProfileKind::Sim,
                ..Default::default()
            });
        let dir = match (dir, cell.certs_dir()) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => d,
            (None, None) => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../deploy/config")
                .join(common::security::SIM_SECURE_CERTS_DIR),
        };
        let mut identities = sec.identities();
        for o in operators {
            if !identities.contains(o) {
                identities.push(o.clone());
            }
        }
        let written = cell::certs::init(&cell::certs::CertsRequest {
            dir: dir.clone(),
            identities: identities.clone(),
            names: names.clone(),
            days: *days,
            force: *force,
        })?;
        println!(
            "{} files in {}: CA and {} identities ({}), valid {days} days, names {}",
            written.len(),
            dir.display(),
            identities.len(),
            identities.join(", "),
            names.join(", ")
        );
        return Ok(true);
    }
    if let Cmd::Router = args.cmd {
        let router = launcher::open_router(&cell).await?;
        tracing::info!(router = %cell.router, zid = %router.zid(), "cell router up");
        service::shutdown_signal().await;
        let _ = router.close().await;
        return Ok(true);
    }
    if let Cmd::Experiment {
        name,
        rate_hz,
        out,
        json,
        world,
        short,
        docs,
        record,
    } = args.cmd
    {
        let req = cell::experiment::Request {
            name,
            rate_hz,
            out,
            json,
            world,
            short,
            docs,
            record: record.map(Option::unwrap_or_default),
        };
        let cfg = args.cfg.config.as_deref();
        return cell::experiment::command(&args.bus, &cell, cfg, &args.cfg.set, req).await;
    }
    if let Cmd::Bench {
        what:
            BenchCmd::Latency {
                rate_hz,
                seconds,
                json,
                no_baseline,
                fifo,
                record,
                record_via_router,
            },
    } = args.cmd
    {
        let req = cell::bench::Request {
            rate_hz,
            seconds,
            json,
            no_baseline,
            fifo,
            record,
            record_via_router,
        };
        let cfg = args.cfg.config.as_deref();
        return cell::bench::command(&args.bus, &cell, cfg, &args.cfg.set, req).await;
    }
    if let Cmd::Commission {
        out,
        egm_seconds,
        rest_seconds,
        push_n,
        operator,
        max_jitter_ms,
        irc5,
        skip,
        allow_unsecured,
    } = args.cmd
    {
        let setup = setup.ok_or_else(|| anyhow::anyhow!("commission: no setup"))?;
        anyhow::ensure!(
            egm_seconds > 0.0 && rest_seconds > 0.0 && push_n > 0.0 && max_jitter_ms > 0.0,
            "--egm-seconds, --rest-seconds, --push-n and --max-jitter-ms must be positive"
        );
        for k in &skip {
            anyhow::ensure!(
                cell::commission::STEPS.iter().any(|(n, _)| n == k),
                "--skip {k}: no such step (steps: {})",
                cell::commission::STEPS.map(|(n, _)| n).join(", ")
            );
        }
        let req = cell::commission::Request {
            out,
            egm_seconds,
            rest_seconds,
            push_n,
            operator,
            max_jitter_ms,
            irc5,
            skip,
            allow_unsecured,
        };
        return cell::commission::command(&args.bus, &cell, setup, req).await;
    }
    if let Cmd::Demo {
        out,
        no_peg,
        record,
    } = args.cmd
    {
        let req = cell::demo::Request {
            out,
            no_peg,
            record: record.map(Option::unwrap_or_default),
        };
        let cfg = args.cfg.config.as_deref();
        return cell::demo::command(&args.bus, &cell, cfg, &args.cfg.set, req).await;
    }
    if let Cmd::Viz {
        replay,
        listen,
        speed,
        looped,
        seconds,
    } = args.cmd
    {
        anyhow::ensure!(
            speed.is_finite() && speed > 0.0,
            "--speed must be a positive number"
        );
        let req = cell::viz::Request {
            listen,
            replay,
            speed,
            looped,
            seconds,
        };
        let s = if req.replay.is_none() {
            // Every topic, straight from the services (peer mode: the router forwards none).
            Some(cli::peer_session(&args.bus, &cell).await?)
        } else {
            None
        };
        return cell::viz::command(s, &cell, arm, req).await;
    }
    // A task file is checked before the bus: its problems come first, each with its key, and
    // need no running cell.
    if let Cmd::Hybrid { task, .. } = &args.cmd {
        control::taskfile::load(task).map_err(|e| anyhow::anyhow!(e.join("\n")))?;
    }
    let s = cli::session(&args.bus, &cell).await?;
    match args.cmd {
        Cmd::Up
        | Cmd::Router
        | Cmd::Certs { .. }
        | Cmd::Service { .. }
        | Cmd::Kin { .. }
        | Cmd::Experiment { .. }
        | Cmd::Demo { .. }
        | Cmd::Commission { .. }
        | Cmd::Viz { .. }
        | Cmd::Bench { .. } => {}
        Cmd::Guide {
            law,
            params,
            seconds,
            trace,
            record,
        } => {
            let body = lead::overrides(law.as_deref(), &params)?;
            let recording = start_recording(&args.bus, &cell, record, || {
                client::record::default_path("guide")
            })
            .await?;
            let stop = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            let run = client::guide::run(&s, &cell, body, seconds, stop, trace.is_some()).await;
            finish_recording(recording).await;
            let run = run?;
            let run = match &trace {
                Some(dir) => {
                    let t = cell::trace::guide::finish(run).await;
                    t.write(dir)?;
                    cell::score::write_metrics(dir, &cell::score::lead::guide_metrics(&t))?;
                    eprintln!("trace written to {}", dir.display());
                    t.session
                }
                None => run,
            };
            if let Some(why) = &run.ended_by_control {
                anyhow::bail!(
                    "guiding ended by control after {} keep-alives: {why}",
                    run.enables_sent
                );
            }
            eprintln!(
                "enable released after {} keep-alives: the arm stops and holds; guiding \
                 resumes only by a new `cell guide`",
                run.enables_sent
            );
        }
        Cmd::Enable { token, seconds } => {
            let stop = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            let n = lead::stream_enable(&s, &cell, token, seconds, stop).await?;
            eprintln!("enable released after {n} keep-alives");
        }
        Cmd::Teach { cmd } => {
            let v = match cmd {
                TeachCmd::Record { label } => {
                    lead::rpc(
                        &s,
                        &cell,
                        serde_json::json!({ "record": { "label": label.unwrap_or_default() } }),
                    )
                    .await?
                }
                TeachCmd::Undo => lead::rpc(&s, &cell, serde_json::json!({ "undo": {} })).await?,
                TeachCmd::Clear => lead::rpc(&s, &cell, serde_json::json!({ "clear": {} })).await?,
                TeachCmd::List => lead::rpc(&s, &cell, serde_json::json!({ "list": {} })).await?,
                TeachCmd::Save { name, dir } => {
                    let path = lead::save(&s, &cell, &dir, &name).await?;
                    serde_json::json!({ "saved": path })
                }
                TeachCmd::Load { name, dir } => {
                    let p = lead::load(&s, &cell, &dir, &name).await?;
                    serde_json::json!({ "loaded": p.name, "waypoints": p.waypoints.len() })
                }
            };
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Cmd::Play {
            name,
            dir,
            speed,
            cartesian,
        } => {
            let p =
                control::program::Program::load(&dir, &name).map_err(|e| anyhow::anyhow!("{e}"))?;
            let out = lead::play(&s, &cell, &p, speed, cartesian, true).await?;
            if out.phase == common::msg::PlaybackPhase::Aborted {
                // The stop reason (status detail, refreshed periodically) or the error
                // control set as the motion ended (at once).
                let (err, stop) = cli::control_errors(&s, &cell).await;
                let why = stop.or(err);
                eprintln!(
                    "playback aborted: {}",
                    why.as_deref().unwrap_or("see `cell status control`")
                );
            }
            return Ok(out.phase == common::msg::PlaybackPhase::Done);
        }
        Cmd::Playback { cmd } => {
            let body = match cmd {
                PlaybackCmd::Pause => serde_json::json!({ "pause": {} }),
                PlaybackCmd::Resume => serde_json::json!({ "resume": {} }),
                PlaybackCmd::Stop => serde_json::json!({ "stop": {} }),
            };
            println!("{}", lead::rpc(&s, &cell, body).await?);
        }
        Cmd::Stalls {
            prove_since_ns,
            why,
        } => {
            if let Some(from_ns) = prove_since_ns {
                let attempt = cell::stall::Attempt { from_ns };
                return match cell::stall::prove(&s, &cell, &why, attempt).await {
                    Ok(p) => {
                        println!("{}", serde_json::to_string(&p)?);
                        Ok(true)
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        Ok(false)
                    }
                };
            }
            let (procs, missing) = cell::stall::gaps(&s, &cell).await;
            let now = common::clock::mono_ns();
            for (name, gaps) in &procs {
                let longest = gaps.iter().map(|g| g.len_ns()).max().unwrap_or(0);
                println!(
                    "{name:<11} {:>3} gaps ≥ {} ms kept, longest {:.1} ms, newest {}",
                    gaps.len(),
                    common::watchdog::GAP_NS / 1_000_000,
                    longest as f64 * 1e-6,
                    gaps.last().map_or("-".to_string(), |g| format!(
                        "{:.1} s ago",
                        now.saturating_sub(g.to_ns) as f64 * 1e-9
                    ))
                );
            }
            if !missing.is_empty() {
                println!("no status from: {}", missing.join(", "));
            }
        }
        Cmd::Ls => {
            let live = cli::ls(&s, &cell).await?;
            if live.is_empty() {
                eprintln!("no live services in cell {:?} at {}", cell.id, cell.router);
                return Ok(false);
            }
            for l in live {
                println!("{l}");
            }
        }
        Cmd::Status { service, json } => {
            let all = cli::status(&s, &cell, service.as_deref()).await?;
            if all.is_empty() {
                eprintln!("no status replies");
                return Ok(false);
            }
            if !json {
                println!("{}", cell.security_line());
            }
            for v in all {
                if json {
                    println!("{v}");
                } else {
                    println!(
                        "{:<11} {:<40} up {:>8.1} s  pid {:<7} last error: {}",
                        v["service"].as_str().unwrap_or("?"),
                        v["state"].as_str().unwrap_or("?"),
                        v["uptime_s"].as_f64().unwrap_or(0.0),
                        v["pid"],
                        v["last_error"].as_str().unwrap_or("-"),
                    );
                    for i in v["inputs"].as_array().into_iter().flatten() {
                        println!(
                            "    in  {:<40} received {:>9} rejected {:>5} age {}",
                            i["key"].as_str().unwrap_or("?"),
                            i["received"],
                            i["rejected"],
                            i["age_ms"]
                                .as_f64()
                                .map(|a| format!("{a:.1} ms"))
                                .unwrap_or("-".into())
                        );
                    }
                    for o in v["outputs"].as_array().into_iter().flatten() {
                        println!(
                            "    out {:<40} published {:>8}",
                            o["key"].as_str().unwrap_or("?"),
                            o["published"]
                        );
                    }
                    if !v["detail"].is_null() {
                        println!("    detail {}", v["detail"]);
                    }
                }
            }
        }
        Cmd::Echo { topic, count, json } => cli::echo(&s, &cell, &topic, count, json).await?,
        Cmd::Record {
            file,
            topics,
            seconds,
        } => {
            let sum = client::record::record(&args.bus, &cell, &file, &topics, seconds).await?;
            eprintln!("{}", sum.line());
        }
        Cmd::Replay {
            file,
            speed,
            looped,
            topics,
            commands,
        } => {
            let opts = client::replay::Options {
                speed,
                looped,
                topics,
                commands,
            };
            let sum = client::replay::replay(&s, &cell, &file, &opts).await?;
            if let Some(t) = &sum.truncated {
                eprintln!("replay: the file ends inside a record ({t}): its complete chunks were replayed");
            }
            eprintln!(
                "replayed {} messages in {:.1} s ({} loop(s))",
                sum.published.values().sum::<u64>(),
                sum.seconds,
                sum.loops
            );
            println!("{}", serde_json::to_string(&sum)?);
        }
        Cmd::Hz { topic, seconds } => cli::hz(&s, &cell, &topic, seconds).await?,
        Cmd::Mode { mode } => match mode {
            // Control refuses these as bare mode requests; say how they start instead.
            ModeArg::LeadThrough => anyhow::bail!(
                "lead-through is started by `cell guide` (its guide request binds the deadman \
                 to the session's enable token)"
            ),
            ModeArg::Hybrid => {
                anyhow::bail!("hybrid is started with a task: `cell hybrid TASK.toml`")
            }
            ModeArg::Playback => {
                anyhow::bail!("playback is started with a program: `cell play NAME`")
            }
            _ => cli::set_mode(&s, &cell, mode.into()).await?,
        },
        Cmd::Move {
            x_mm,
            y_mm,
            z_mm,
            quat,
            speed_mm_s,
            rot_speed_deg_s,
            wait,
        } => {
            let q = quat.unwrap_or(vec![
                std::f64::consts::FRAC_1_SQRT_2,
                0.0,
                std::f64::consts::FRAC_1_SQRT_2,
                0.0,
            ]);
            let pose =
                kinematics::pose::pose_from_abb([x_mm, y_mm, z_mm], [q[0], q[1], q[2], q[3]])
                    .context("target pose")?;
            let target = common::msg::Pose::from_isometry(&pose);
            let before = if wait {
                cli::control_errors(&s, &cell).await
            } else {
                (None, None)
            };
            cli::move_to(
                &s,
                &cell,
                target,
                speed_mm_s * 1e-3,
                rot_speed_deg_s.to_radians(),
            )
            .await?;
            if wait {
                let t = cli::latest_move_time(&s, &cell, &target, speed_mm_s * 1e-3).await;
                cli::wait_move(&s, &cell, &target, before, t, true).await?;
            }
        }
        Cmd::MoveJoints { q_deg, speed_scale } => {
            let q: [f64; 6] = q_deg
                .as_slice()
                .try_into()
                .map_err(|_| anyhow::anyhow!("give six joint angles (degrees)"))?;
            let out = cell::lead::move_joints(&s, &cell, q, speed_scale, true).await?;
            if out.phase != common::msg::PlaybackPhase::Done {
                let why = cli::control_errors(&s, &cell)
                    .await
                    .1
                    .unwrap_or_else(|| "no stop reason reported".into());
                anyhow::bail!("the joint move ended {:?}: {why}", out.phase);
            }
        }
        Cmd::Tare => {
            let v = cli::request(
                &s,
                &force::node::rpc_key(&cell.id, "tare"),
                None,
                Duration::from_secs(10),
            )
            .await?;
            println!("{v}");
        }
        Cmd::Payload {
            cmd:
                PayloadCmd::Identify {
                    write,
                    write_irc5,
                    sensor_body_kg,
                    sensor_body_cog_mm,
                    speed_scale,
                },
        } => {
            anyhow::ensure!(
                sensor_body_kg.is_finite()
                    && sensor_body_kg >= 0.0
                    && sensor_body_cog_mm.len() == 3
                    && sensor_body_cog_mm.iter().all(|c| c.is_finite()),
                "--sensor-body-kg must be ≥ 0 and --sensor-body-cog-mm three finite numbers"
            );
            let v = payload_identify(&s, &cell, &arm, &force_cfg, speed_scale).await?;
            println!("{}", serde_json::to_string_pretty(&v)?);
            if let Some(file) = write {
                cli::write_payload(&file, &v["payload"])?;
                eprintln!("stored in {} [force.payload]", file.display());
            }
            if let Some(dir) = write_irc5 {
                let m = v["payload"]["mass_kg"].as_f64().unwrap_or(f64::NAN);
                let c = &v["payload"]["com_m"];
                let com_s = nalgebra::Point3::new(
                    c[0].as_f64().unwrap_or(f64::NAN),
                    c[1].as_f64().unwrap_or(f64::NAN),
                    c[2].as_f64().unwrap_or(f64::NAN),
                );
                // The identified centre of mass is in the sensor frame: into tool0 (mm).
                let com_t0 = arm.sensor_mount() * com_s;
                let body = [
                    sensor_body_cog_mm[0],
                    sensor_body_cog_mm[1],
                    sensor_body_cog_mm[2],
                ];
                let total = m + sensor_body_kg;
                let cog_mm =
                    [0, 1, 2].map(|i| (m * com_t0[i] * 1e3 + sensor_body_kg * body[i]) / total);
                let path = dir.join(robot_io::egm::irc5::RAPID_FILE);
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let out = robot_io::egm::irc5::with_tool_load(&text, "cell_tool", total, cog_mm)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                let tmp = path.with_extension("mod.tmp");
                std::fs::write(&tmp, out)?;
                std::fs::rename(&tmp, &path)?;
                eprintln!(
                    "stored in {} cell_tool: {total:.3} kg at ({:.1}, {:.1}, {:.1}) mm in tool0; load the module on the controller again",
                    path.display(),
                    cog_mm[0],
                    cog_mm[1],
                    cog_mm[2]
                );
            }
        }
        Cmd::Hybrid {
            task,
            out,
            json,
            stiffness_n_per_m,
            record,
        } => {
            let mut t =
                control::taskfile::load(&task).map_err(|e| anyhow::anyhow!(e.join("\n")))?;
            if let (Some(k), None, TaskRobot::Arm) = (stiffness_n_per_m, &t.gains, t.robot) {
                anyhow::ensure!(k.is_finite() && k > 0.0, "--stiffness-n-per-m must be > 0");
                t.gains = Some(control::hybrid::default_arm_gains(
                    [k; 3],
                    control_cfg.hybrid.stiffness_nm_per_rad,
                    control_cfg.hybrid.loop_delay_s,
                ));
            }
            let out = out.unwrap_or_else(|| {
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                std::path::PathBuf::from(format!("runs/{}-{secs}", t.name))
            });
            let opts = cell::trace::hybrid::RunOptions {
                out: Some(out.clone()),
                progress: !json,
            };
            let recording =
                start_recording(&args.bus, &cell, record, || out.join("run.mcap")).await?;
            let o = cell::trace::hybrid::run(&s, &cell, t, &opts).await;
            finish_recording(recording).await;
            let o = o?;
            let metrics = cell::score::hybrid::score_run(&o, Some(&out))?;
            if json {
                println!("{metrics}");
            } else {
                println!("{}", serde_json::to_string_pretty(&metrics)?);
                eprintln!("traces and metrics in {}", out.display());
            }
            if let Some(why) = o.aborted {
                eprintln!("task aborted: {why}");
                let _ = s.close().await;
                return Ok(false);
            }
        }
        Cmd::Identify {
            cmd:
                IdentifyCmd::Stiffness {
                    into,
                    probe_force_n,
                    max_approach_mm,
                    write,
                },
        } => {
            let (axis, sign) = match into.as_str() {
                "x" | "+x" => (0, 1.0),
                "-x" => (0, -1.0),
                "y" | "+y" => (1, 1.0),
                "-y" => (1, -1.0),
                "z" | "+z" => (2, 1.0),
                "-z" => (2, -1.0),
                o => anyhow::bail!("--into {o:?}: use x, -x, y, -y, z or -z"),
            };
            let mut dir = nalgebra::Vector3::zeros();
            dir[axis] = sign;
            let probe = cell::identify::Probe {
                into: dir,
                probe_force_n,
                max_approach_m: max_approach_mm * 1e-3,
                approach_timeout_ceiling_s: control_cfg.hybrid.limits.approach_timeout_s,
            };
            let v = cell::identify::stiffness(&s, &cell, probe, control_cfg.hybrid.loop_delay_s)
                .await?;
            println!("{}", serde_json::to_string_pretty(&v)?);
            if let Some(file) = write {
                let k = v["stiffness_n_per_m"].as_f64().unwrap_or(0.0);
                cell::identify::write_stiffness(&file, axis, k)?;
                eprintln!(
                    "stored in {} [control.hybrid] stiffness_n_per_m (axis {axis}); restart control to use it",
                    file.display()
                );
            }
        }
        Cmd::SimScenario { json } => {
            let key = format!("cell/{}/sim/rpc/scenario", cell.id);
            let v = cli::request(&s, &key, json, Duration::from_secs(3)).await?;
            println!("{v}");
        }
        Cmd::SimFault { json } => {
            let key = format!("cell/{}/sim/rpc/fault", cell.id);
            let v = cli::request(&s, &key, json, Duration::from_secs(3)).await?;
            println!("{v}");
        }
        Cmd::Estop => {
            let st = cli::estop(&s, &cell, cli::SafetyRequest::Stop(EStopAction::Engage)).await?;
            println!("e-stop engaged: robot-io {:?} ({:?})", st.level, st.reason);
        }
        Cmd::Reset { protective } => {
            // A secured cell's roles table says who may reset: refuse before sending rather
            // than wait for an acknowledgement that cannot come.
            let me = args.bus.cli_identity();
            if let Some(sec) = &cell.security {
                if !sec.may_publish(&cell.id, &me, common::topic::ESTOP_RESET.info.suffix) {
                    anyhow::bail!(
                        "identity {me:?} may not reset on this cell ({:?} profile: the control host{}); run it as `--identity control-host` on the control host (docs/security.md)",
                        sec.profile,
                        if sec.operators_may_reset {
                            " and the operators"
                        } else {
                            " only"
                        }
                    );
                }
            }
            let scope = if protective {
                ResetScope::ProtectiveOnly
            } else {
                ResetScope::All
            };
            let st = cli::estop(&s, &cell, cli::SafetyRequest::Reset(scope)).await?;
            println!(
                "reset: robot-io {:?} ({:?}); nothing moves until a new command",
                st.level, st.reason
            );
        }
    }
    let _ = s.close().await;
    Ok(true)
}

/// Moves through the identification poses, captures a static average at each, identifies.
async fn payload_identify(
    s: &zenoh::Session,
    cell: &CellSection,
    arm: &Arm,
    force_cfg: &force::node::ForceConfig,
    speed_scale: Option<f64>,
) -> anyhow::Result<serde_json::Value> {
    cell::leadexp::identify_payload_at(
        s,
        cell,
        arm,
        &force_cfg.identification_poses_deg,
        speed_scale,
        |k, q_deg, v| eprintln!("pose {k} {q_deg:?}: {v}"),
    )
    .await
}

fn kin_cmd(mut arm: Arm, cmd: &KinCmd) -> anyhow::Result<()> {
    // These commands speak of tool0, whatever tool the config mounts.
    arm.set_tool(Isometry3::identity())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let out = match cmd {
        KinCmd::Fk { q, deg } => {
            let v = kin::fk_json(&arm, q, *deg)?;
            if v["within_limits"] == false {
                eprintln!(
                    "cell kin fk: joints {} are outside the arm's limits (the pose is computed, the robot cannot reach it)",
                    v["outside_limits_axes"]
                );
            }
            v
        }
        KinCmd::Ik {
            x_mm,
            y_mm,
            z_mm,
            qw,
            qx,
            qy,
            qz,
            near,
        } => kin::ik_json(
            &arm,
            [*x_mm, *y_mm, *z_mm],
            [*qw, *qx, *qy, *qz],
            near.as_deref(),
        )?,
    };
    println!("{out}");
    if let Some(e) = out["error"].as_str() {
        anyhow::bail!("no usable solution: {e}");
    }
    Ok(())
}
