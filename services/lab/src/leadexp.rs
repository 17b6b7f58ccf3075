//! Lead-through experiments (`cell experiment lead-through-axes | lead-through-45 |
//! teach-playback`) and the scripted-operator helpers they share with `cell demo` and the
//! whole-cell tests.
//!
//! The operator is the simulator's scripted hand (`docs/simulator.md`, "Operator hand"), set
//! through the scenario RPC; guiding is started on control's `control/rpc/lead` queryable and
//! kept alive by streaming `control/enable` ([`client::lead`]). Every pull is scored on the
//! simulator's ground truth (`sim/truth`: TCP position, the hand's force) and on what control
//! commanded (`control/guide_state`); playback also on what kinematics sent robot-io
//! (`kin/joint_cmd`, per robot cycle). Control sees only the F/T sensor and the joints.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use anyhow::Context;
use common::{
    codec,
    config::CellSection,
    msg::{GuideState, JointCommand, JointState, PlaybackPhase, SimTruth},
    service::{ConfigArgs, Loader},
    topic,
};
use kinematics::{config::ArmSection, Arm};
use nalgebra::Vector3;
use serde_json::{json, Value};
use zenoh::Session;

use client::{cli, lead};

/// The figures moved to [`crate::score::lead`]; the old paths keep working.
pub use crate::score::lead::{
    from_closest, joint_fractions, max_deviation_m, pull as score, rms_above, true_travel_m, Pull,
    Rec,
};

use crate::{
    plot::{self, Figure, Panel, Series},
    score::{
        checks, fmt_value,
        lead::{pull_metrics, CYCLE_S, STEP_M},
        target, Target,
    },
    stall,
};

pub use crate::steps::{place, place_and_tare, scenario, tare};

/// The lead-through experiments, in the order `cell experiment all` runs them.
pub const NAMES: &[&str] = &["lead-through-axes", "lead-through-45", "teach-playback"];

/// The free-space scenario with the (disabled) operator hand.
pub const SCENARIO: &str = "scenarios/lead-through.toml";

/// An operator pulling on purpose: a firmer arm than the scenario's relaxed 100 N/m (human
/// endpoint stiffness is a few hundred N/m in posture tasks).
const MUSCLE_N_PER_M: f64 = 300.0;

static CONFIG: OnceLock<(Option<PathBuf>, Vec<String>)> = OnceLock::new();

/// The cell config this process was started with (file and `--set`s), for the arm and the
/// payload identification poses. Without it the built-in defaults are used.
pub fn set_config(config: Option<&Path>, sets: &[String]) {
    let _ = CONFIG.set((config.map(Path::to_path_buf), sets.to_vec()));
}

/// The configured arm and the payload identification poses (degrees).
pub fn arm_and_poses() -> anyhow::Result<(Arm, Vec<[f64; 6]>)> {
    let (config, set) = CONFIG.get().cloned().unwrap_or_default();
    let args = ConfigArgs {
        config,
        set,
        check_config: false,
    };
    let mut l = Loader::new(&args).map_err(|e| anyhow::anyhow!("config: {e}"))?;
    let arm: ArmSection = l.section("arm");
    let force: force::node::ForceConfig = l.section("force");
    l.finish().map_err(|e| anyhow::anyhow!("config: {e}"))?;
    let arm = arm
        .build()
        .map_err(|e| anyhow::anyhow!("[arm]: {}", e.join("; ")))?;
    Ok((arm, force.identification_poses_deg))
}

/// `cell payload identify` with the configured arm and poses; a scripted run's: when a proven
/// host stall ([`crate::stall`]) held one of its moves it runs once more, and the answer says
/// so (`retries`). Returns the force service's answer.
pub async fn payload_identify(
    s: &Session,
    cell: &CellSection,
    speed_scale: Option<f64>,
    progress: bool,
) -> anyhow::Result<Value> {
    let (arm, poses) = arm_and_poses()?;
    let report = |k: usize, _: &[f64; 6], _: &Value| {
        if progress {
            eprintln!("      payload pose {}/{} captured", k + 1, poses.len());
        }
    };
    let attempt = stall::Attempt::start();
    match identify_payload_at(s, cell, &arm, &poses, speed_scale, report).await {
        Err(e) => {
            let why = format!("{e:#}");
            let retry = stall::check(s, cell, "payload identification", &why, attempt)
                .await
                .map_err(|_| e)?;
            eprintln!("      {}", retry.describe());
            let mut v = identify_payload_at(s, cell, &arm, &poses, speed_scale, report).await?;
            v["retries"] = json!([retry.to_json()]);
            Ok(v)
        }
        r => r,
    }
}

/// Visits the identification poses (joint angles, degrees) by joint moves (control's
/// `move_joints`, at `speed_scale` of the joint limits, default the config's approach scale),
/// captures a static average at each once the tool is still at the pose (`report(k, pose,
/// capture)` after each), identifies (mass, centre of mass, offsets). A move that ends before
/// its pose (control's stop reason, e.g. a hold) fails with that reason. Returns the force
/// service's answer.
pub async fn identify_payload_at(
    s: &Session,
    cell: &CellSection,
    arm: &Arm,
    poses: &[[f64; 6]],
    speed_scale: Option<f64>,
    report: impl Fn(usize, &[f64; 6], &Value),
) -> anyhow::Result<Value> {
    let timeout = Duration::from_secs(10);
    cli::request(s, &force::node::rpc_key(&cell.id, "clear"), None, timeout).await?;
    for (k, q_deg) in poses.iter().enumerate() {
        let q = q_deg.map(f64::to_radians);
        let target = arm.fk(&q).map_err(|e| anyhow::anyhow!("pose {k}: {e}"))?;
        let pose = common::msg::Pose::from_isometry(&target);
        let out = lead::move_joints(s, cell, *q_deg, speed_scale, false)
            .await
            .with_context(|| format!("pose {k} {q_deg:?}"))?;
        if out.phase != PlaybackPhase::Done {
            let why = cli::control_errors(s, cell)
                .await
                .1
                .unwrap_or_else(|| "no stop reason reported".into());
            anyhow::bail!(
                "pose {k} {q_deg:?}: the joint move ended {:?}: {why}",
                out.phase
            );
        }
        // The arm follows its reference a few EGM cycles behind: capture once it is still.
        cli::wait_at_pose(s, cell, &pose, Duration::from_secs(5))
            .await
            .with_context(|| format!("pose {k} {q_deg:?}: still at the pose"))?;
        let v = cli::request(s, &force::node::rpc_key(&cell.id, "capture"), None, timeout)
            .await
            .with_context(|| format!("capture at pose {k}"))?;
        report(k, q_deg, &v);
    }
    cli::request(
        s,
        &force::node::rpc_key(&cell.id, "identify"),
        None,
        timeout,
    )
    .await
}

/// Records `sim/truth`, `control/guide_state`, `kin/joint_cmd` and the robot-time period of
/// each `robot/joint_state` while alive.
pub struct Recorder {
    rec: Arc<Mutex<Rec>>,
    _subs: Vec<zenoh::pubsub::Subscriber<()>>,
}

impl Recorder {
    pub async fn start(s: &Session, cell: &CellSection) -> anyhow::Result<Recorder> {
        let rec = Arc::new(Mutex::new(Rec::default()));
        let mut subs = Vec::new();
        let r = rec.clone();
        subs.push(
            s.declare_subscriber(topic::SIM_TRUTH.key(&cell.id))
                .callback(move |smp| {
                    if let Ok(m) = codec::decode::<SimTruth>(&smp.payload().to_bytes()) {
                        if let Ok(mut g) = r.lock() {
                            g.truth.push(m);
                        }
                    }
                })
                .await
                .map_err(|e| anyhow::anyhow!("subscribe sim/truth: {e}"))?,
        );
        let r = rec.clone();
        subs.push(
            s.declare_subscriber(topic::GUIDE_STATE.key(&cell.id))
                .callback(move |smp| {
                    if let Ok(m) = codec::decode::<GuideState>(&smp.payload().to_bytes()) {
                        if let Ok(mut g) = r.lock() {
                            g.guide.push(m);
                        }
                    }
                })
                .await
                .map_err(|e| anyhow::anyhow!("subscribe guide_state: {e}"))?,
        );
        let r = rec.clone();
        subs.push(
            s.declare_subscriber(topic::JOINT_COMMAND.key(&cell.id))
                .callback(move |smp| {
                    if let Ok(m) = codec::decode::<JointCommand>(&smp.payload().to_bytes()) {
                        if let Ok(mut g) = r.lock() {
                            g.joint_cmd.push(m);
                        }
                    }
                })
                .await
                .map_err(|e| anyhow::anyhow!("subscribe joint_cmd: {e}"))?,
        );
        let r = rec.clone();
        subs.push(
            s.declare_subscriber(topic::JOINT_STATE.key(&cell.id))
                .callback(move |smp| {
                    if let Ok(m) = codec::decode::<JointState>(&smp.payload().to_bytes()) {
                        if let Ok(mut g) = r.lock() {
                            g.periods.insert(m.cycle, m.period_s);
                        }
                    }
                })
                .await
                .map_err(|e| anyhow::anyhow!("subscribe joint_state: {e}"))?,
        );
        Ok(Recorder { rec, _subs: subs })
    }

    /// Everything recorded since the last `take` (and clears it).
    pub fn take(&self) -> Rec {
        self.rec
            .lock()
            .map(|mut g| std::mem::take(&mut *g))
            .unwrap_or_default()
    }

    /// Joint commands recorded since the last `take`.
    pub fn joint_commands(&self) -> usize {
        self.rec.lock().map_or(0, |g| g.joint_cmd.len())
    }

    /// The TCP position from the newest truth sample (m); waits up to 5 s for one.
    pub async fn tcp_now(&self) -> anyhow::Result<Vector3<f64>> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(p) = self
                .rec
                .lock()
                .ok()
                .and_then(|g| g.truth.last().map(|t| Vector3::from(t.tcp_in_base_m)))
            {
                return Ok(p);
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no sim/truth within 5 s (is the cell a simulated one?)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One scripted pull.
#[derive(Debug, Clone)]
pub struct PullSpec {
    pub label: String,
    /// The guide request (`{"law": "admittance"}`, parameter overrides).
    pub guide: Value,
    /// Direction of the pull (base axes).
    pub dir: Vector3<f64>,
    pub length_m: f64,
    pub speed_m_s: f64,
    /// Grasp stiffness (N/m).
    pub grasp_n_per_m: f64,
    /// The hand lets go this long after the end of its path (s).
    pub release_after_s: f64,
    /// Recorded after the release (s).
    pub settle_s: f64,
}

impl PullSpec {
    pub fn new(label: &str, law: &str, dir: Vector3<f64>, length_m: f64) -> PullSpec {
        PullSpec {
            label: label.into(),
            guide: json!({ "law": law }),
            dir,
            length_m,
            speed_m_s: 0.1,
            grasp_n_per_m: 300.0,
            release_after_s: 2.0,
            settle_s: 1.0,
        }
    }
}

/// The scenario request of a hand pull from `from` along `dir`.
pub fn hand_request(from: &Vector3<f64>, p: &PullSpec) -> Value {
    let to = from + p.dir.normalize() * p.length_m;
    json!({
        "set": {
            "hand.enabled": true,
            "hand.path": [[from.x, from.y, from.z], [to.x, to.y, to.z]],
            "hand.speed_m_s": p.speed_m_s,
            "hand.stiffness_n_per_m": p.grasp_n_per_m,
            "hand.release_after_s": p.release_after_s,
            "hand.start_s": 0.3,
            "hand.muscle_stiffness_n_per_m": MUSCLE_N_PER_M,
        },
        "reset": true,
    })
}

/// Streams the deadman keep-alive of the guide session `token` until the returned sender is
/// sent or dropped.
pub fn hold_enable(
    s: &Session,
    cell: &CellSection,
    token: u64,
) -> tokio::sync::oneshot::Sender<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (s, cell) = (s.clone(), cell.clone());
    tokio::spawn(async move {
        let stop = async {
            let _ = rx.await;
        };
        let _ = lead::stream_enable(&s, &cell, token, None, stop).await;
    });
    tx
}

/// One pull with the guide session of `p`, from the current TCP; returns its score and the
/// record (truth time starts at 0 with the hand's reset). When the guide session ended
/// during the pull on a proven host stall ([`crate::stall`]), the arm is placed back where
/// the first pull began (tool down, as every pull's placement) and the pull is repeated once
/// from there, so the repeat asks the same of the cell (a pull into a wall repeated from the
/// wall would ask nothing); `Pull::retried_after` names the first stop and the stall. Any
/// other end, or a second one, is returned in `Pull::ended` for the caller to judge.
/// The first pull's truth is written to `keep_first` when it is repeated.
pub async fn pull(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    p: &PullSpec,
    keep_first: &Path,
) -> anyhow::Result<(Pull, Rec)> {
    let attempt = stall::Attempt::start();
    let (mut score, mut data) = pull_once(s, cell, rec, p).await?;
    if let Some(why) = score.ended.clone() {
        if let Ok(mut retry) = stall::check(s, cell, &p.label, &why, attempt).await {
            if let Some(d) = keep_first.parent() {
                std::fs::create_dir_all(d)?;
            }
            write_truth_csv(keep_first, &data)?;
            retry.first_run = Some(keep_first.display().to_string());
            eprintln!("      {}", retry.describe());
            let start_mm = score.from_m.map(|v| v * 1e3);
            place(s, cell, start_mm, 150.0)
                .await
                .with_context(|| format!("{}: back to the first pull's start", p.label))?;
            (score, data) = pull_once(s, cell, rec, p).await?;
            score.retried_after = Some(retry);
        }
    }
    Ok((score, data))
}

async fn pull_once(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    p: &PullSpec,
) -> anyhow::Result<(Pull, Rec)> {
    scenario(s, cell, json!({ "set": { "hand.enabled": false } })).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let from = rec.tcp_now().await?;
    let r = lead::rpc(s, cell, json!({ "guide": p.guide }))
        .await
        .with_context(|| format!("{}: guide refused", p.label))?;
    let en = hold_enable(s, cell, lead::enable_token(&r)?);
    rec.take();
    scenario(s, cell, hand_request(&from, p)).await?;
    let secs = 0.3 + p.length_m / p.speed_m_s + p.release_after_s + p.settle_s;
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let data = rec.take();
    // Still guiding (the deadman keeps the session), or ended during the pull, and why.
    let ended = guide_ended(s, cell).await;
    let _ = en.send(());
    // The operator lets go when the pull's time is over. A hand whose path waited on a
    // lagging tool (a wall, a stop) never reaches its end and so never releases by itself: it
    // would hang on the tool at its grip's limit through the next move and tare.
    scenario(s, cell, json!({ "set": { "hand.enabled": false } })).await?;
    let mut score = score(&p.label, &data, &from, &p.dir, p.length_m)?;
    score.ended = ended;
    Ok((score, data))
}

/// `Some(reason)` when control is no longer in lead-through (its stop reason, or its mode).
async fn guide_ended(s: &Session, cell: &CellSection) -> Option<String> {
    let st = cli::status(s, cell, Some("control")).await.ok()?;
    let d = &st.first()?["detail"];
    let mode = d["mode"].as_str().unwrap_or("?");
    (mode != "LeadThrough").then(|| {
        d["stop_reason"].as_str().map_or_else(
            || format!("control left lead-through (mode {mode})"),
            str::to_string,
        )
    })
}

/// Writes the truth of a pull as CSV.
pub fn write_truth_csv(path: &Path, rec: &Rec) -> anyhow::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(
        f,
        "t_s,tcp_x_m,tcp_y_m,tcp_z_m,hand_fx_n,hand_fy_n,hand_fz_n,hand_active"
    )?;
    for t in &rec.truth {
        writeln!(
            f,
            "{},{},{},{},{},{},{},{}",
            t.t_s,
            t.tcp_in_base_m[0],
            t.tcp_in_base_m[1],
            t.tcp_in_base_m[2],
            t.hand_force_base_n[0],
            t.hand_force_base_n[1],
            t.hand_force_base_n[2],
            u8::from(t.hand_active)
        )?;
    }
    f.flush()?;
    Ok(())
}

fn write_guide_csv(path: &Path, rec: &Rec) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    writeln!(
        f,
        "t_s,enabled,force_x_n,force_y_n,force_z_n,cmd_x_m,cmd_y_m,cmd_z_m,vx_m_s,vy_m_s,vz_m_s,steps,damping_scale"
    )?;
    for g in &rec.guide {
        writeln!(
            f,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            g.t_s,
            u8::from(g.enabled),
            g.force_n[0],
            g.force_n[1],
            g.force_n[2],
            g.tcp_cmd_m[0],
            g.tcp_cmd_m[1],
            g.tcp_cmd_m[2],
            g.twist.linear_m_s[0],
            g.twist.linear_m_s[1],
            g.twist.linear_m_s[2],
            g.steps,
            g.damping_scale
        )?;
    }
    f.flush()?;
    Ok(())
}

/// The paper's figure and what it reports, per experiment.
pub fn paper(name: &str) -> Value {
    match name {
        "lead-through-axes" => json!({
            "figure": "Cai et al. 2017, Figs. 6–7 (hand-guided moves along the tool's x, y and z; stiffness law with steps of d)",
            "response_time_s_below": 1.0,
            "step_m": STEP_M,
        }),
        "lead-through-45" => json!({
            "figure": "Cai et al. 2017, Fig. 8 (a 45° pull between tool x and y: a smooth straight path with direction prediction, a staircase per axis without)",
            "path": "smooth 45° line",
        }),
        "teach-playback" => json!({
            "figure": "teach by hand, save, play back (no paper figure; the lead-through issue's targets)",
        }),
        _ => Value::Null,
    }
}

/// How a lead-through experiment runs and is scored (for docs/experiments.md).
pub fn method(name: &str) -> String {
    let common = "The guiding law runs every EGM cycle (250 Hz); the operator is the simulator's \
                  scripted hand (a 2 kg arm on a 300 N/m grasp, 0.15 s reaction delay; \
                  docs/simulator.md) moving at 0.1 m/s, scored on the simulator's ground truth";
    let metrics = match name {
        "lead-through-axes" | "lead-through-45" => {
            ". `response_time_s`: hand force ≥ 3 N → TCP moved 1 mm along the pull; \
             `rms_path_deviation_m`: distance of the TCP from the pull line while moving; \
             `time_to_target_s`: hand force ≥ 3 N → TCP at 80 % of the hand's path; \
             `guide_force_at_0_1_m_s_n`: mean |hand force| while the TCP moves at 0.1 m/s ± 20 %; \
             `step_m`: mean step between control's commanded positions at step ends \
             (`max_step_error_m` the largest |step − d|); `true_travel_error_m`: |the true TCP's travel from rest before the pull to rest after it − steps · d| (ground truth: the law's steps follow each other while the servo still lags, so one step's own length is not observable on the true TCP, the travel is)"
        }
        "teach-playback" => {
            ". Three 70 mm admittance pulls, `cell teach record` after each, `cell payload \
             identify`, `cell teach save`, `cell teach load`, `cell play`; \
             `max_waypoint_error_m`: closest approach of the played TCP (truth) to each \
             waypoint; joint speed and acceleration fractions: the worst joint's reference on \
             `kin/joint_cmd` per robot cycle (4 ms) against the IRB 120 limits"
        }
        _ => "",
    };
    format!("{common}{metrics}")
}

/// Options of a lead-through experiment.
#[derive(Debug, Clone)]
pub struct Options {
    pub out: PathBuf,
    pub progress: bool,
    /// Scenario `set` key paths applied after the scenario is loaded.
    pub world: serde_json::Map<String, Value>,
    pub short: bool,
}

/// One scored case.
struct CaseOut {
    label: String,
    metrics: serde_json::Map<String, Value>,
    checks: Vec<Value>,
    note: Option<String>,
    passed: bool,
}

fn case_json(c: &CaseOut) -> Value {
    json!({
        "label": c.label,
        "metrics": Value::Object(c.metrics.clone()),
        "checks": c.checks,
        "note": c.note,
    })
}

fn progress_line(c: &CaseOut) -> String {
    c.checks
        .iter()
        .map(|ch| {
            format!(
                "{} {} ({} {} {}){}",
                ch["metric"].as_str().unwrap_or("?"),
                fmt_value(&ch["value"]),
                ch["op"].as_str().unwrap_or("?"),
                fmt_value(&ch["target"]),
                if ch["pass"] == true { "✓" } else { "✗" },
                if ch["gate"] == true { "" } else { " goal" },
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Loads the lead-through scenario (and the operator's `--world` settings).
pub async fn load_scenario(
    s: &Session,
    cell: &CellSection,
    world: &serde_json::Map<String, Value>,
) -> anyhow::Result<()> {
    scenario(s, cell, json!({ "load": SCENARIO })).await?;
    if !world.is_empty() {
        scenario(
            s,
            cell,
            json!({"set": Value::Object(world.clone()), "reset": true}),
        )
        .await
        .context("--world")?;
    }
    Ok(())
}

/// Runs lead-through experiment `name`; writes its files; returns the metrics JSON
/// (`{"experiment", "rate_hz", "cases", "paper", "passed"}`, as [`crate::experiment::run`]).
pub async fn run(
    s: &Session,
    cell: &CellSection,
    name: &str,
    opts: &Options,
) -> anyhow::Result<Value> {
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    let rec = Recorder::start(s, cell).await?;
    let _ = stall::take_setup_retries();
    // Above everything before the world changes.
    place(s, cell, [400.0, 0.0, 400.0], 150.0).await?;
    load_scenario(s, cell, &opts.world).await?;
    let (cases, fig) = match name {
        "lead-through-axes" => axes(s, cell, &rec, opts).await?,
        "lead-through-45" => forty_five(s, cell, &rec, opts).await?,
        "teach-playback" => {
            let mut r = teach_playback(s, cell, &rec, &opts.out, opts.progress).await?;
            r.replays = replay_in_faults(
                s,
                cell,
                &rec,
                &opts.out,
                &fault_worlds(opts.short),
                opts.progress,
            )
            .await?;
            let fig = teach_figure(&r);
            let mut cases = vec![teach_case(&r)];
            for (w, p) in &r.replays {
                let c = replay_case(w, p, &r.played);
                if opts.progress {
                    eprintln!("      {}: {}", c.label, progress_line(&c));
                }
                cases.push(c);
            }
            (cases, fig)
        }
        other => anyhow::bail!("unknown lead-through experiment {other:?}"),
    };
    let cols = fig.cols;
    plot::write(
        &fig,
        &opts.out,
        name,
        ((420 * cols as u32).clamp(900, 1500), 620),
    )?;
    let passed = cases.iter().all(|c| c.passed);
    let out = json!({
        "experiment": name,
        "rate_hz": 1.0 / CYCLE_S,
        "short": opts.short,
        "world": Value::Object(opts.world.clone()),
        "cases": cases.iter().map(case_json).collect::<Vec<_>>(),
        // Placements repeated after a proven host stall during the experiment.
        "setup_retries": stall::take_setup_retries().iter().map(stall::Retry::to_json).collect::<Vec<_>>(),
        "paper": paper(name),
        "passed": passed,
    });
    std::fs::write(
        opts.out.join("metrics.json"),
        serde_json::to_string_pretty(&out)?,
    )
    .with_context(|| format!("writing {}/metrics.json", opts.out.display()))?;
    Ok(out)
}

/// The gate every pull case shares: the guide session never ended during the pull.
fn guide_ended_target() -> Target {
    target(
        "guide_ended",
        "==",
        Value::Null,
        true,
        "guiding never ended during the pull",
    )
}

/// The first truth time of a record (plots start at 0 with the pull).
pub fn t0(rec: &Rec) -> f64 {
    rec.truth.first().map_or(0.0, |t| t.t_s)
}

/// Displacement along `u` from `from` (mm) vs time from the start of the record.
pub fn along_mm(rec: &Rec, from: &Vector3<f64>, u: &Vector3<f64>) -> Vec<(f64, f64)> {
    rec.truth
        .iter()
        .map(|t| {
            (
                t.t_s - t0(rec),
                (Vector3::from(t.tcp_in_base_m) - from).dot(u) * 1e3,
            )
        })
        .collect()
}

/// The hand's position along `u` from `from` (mm) while it holds the tool.
pub fn hand_along_mm(rec: &Rec, from: &Vector3<f64>, u: &Vector3<f64>) -> Vec<(f64, f64)> {
    rec.truth
        .iter()
        .filter(|t| t.hand_active)
        .map(|t| {
            (
                t.t_s - t0(rec),
                (Vector3::from(t.hand_pos_base_m) - from).dot(u) * 1e3,
            )
        })
        .collect()
}

/// Control's commanded TCP along `u` from `from` (mm), on the truth record's time axis (the
/// publishers' monotonic stamps are comparable on one host).
pub fn cmd_along_mm(rec: &Rec, from: &Vector3<f64>, u: &Vector3<f64>) -> Vec<(f64, f64)> {
    let Some(first) = rec.truth.first() else {
        return Vec::new();
    };
    let ns0 = first.stamp.source_mono_ns as f64;
    rec.guide
        .iter()
        .map(|g| {
            (
                (g.stamp.source_mono_ns as f64 - ns0) * 1e-9,
                (Vector3::from(g.tcp_cmd_m) - from).dot(u) * 1e3,
            )
        })
        .collect()
}

/// The hand's force along `u` (N) vs truth time.
pub fn force_along(rec: &Rec, u: &Vector3<f64>) -> Vec<(f64, f64)> {
    rec.truth
        .iter()
        .map(|t| (t.t_s - t0(rec), Vector3::from(t.hand_force_base_n).dot(u)))
        .collect()
}

/// Cai Figs. 6–7: pulls along tool x, y and z with the admittance and the stiffness law.
async fn axes(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    opts: &Options,
) -> anyhow::Result<(Vec<CaseOut>, Figure)> {
    const START: [f64; 3] = [400.0, 0.0, 400.0];
    place_and_tare(s, cell, START, 150.0).await?;
    // Tool pointing down: tool x = base −x, tool y = base +y, tool z = base −z.
    let all_axes = [
        ("x", Vector3::new(-1.0, 0.0, 0.0)),
        ("y", Vector3::new(0.0, 1.0, 0.0)),
        ("z", Vector3::new(0.0, 0.0, -1.0)),
    ];
    let axes: &[(&str, Vector3<f64>)] = if opts.short {
        &all_axes[..1]
    } else {
        &all_axes
    };
    let laws = ["admittance", "stiffness"];
    let mut cases = Vec::new();
    // Per axis: (law, displacement, hand position, force, commanded).
    type Traces = Vec<(
        &'static str,
        Vec<(f64, f64)>,
        Vec<(f64, f64)>,
        Vec<(f64, f64)>,
        Vec<(f64, f64)>,
    )>;
    let mut traces: Vec<Traces> = vec![Vec::new(); axes.len()];
    let total = laws.len() * axes.len();
    for (li, law) in laws.iter().enumerate() {
        for (ai, (name, dir)) in axes.iter().enumerate() {
            let label = format!("{law}, tool {name}");
            if opts.progress {
                eprintln!(
                    "[{}/{total}] lead-through-axes: {label}",
                    li * axes.len() + ai + 1
                );
            }
            let spec = PullSpec::new(&label, law, *dir, 0.06);
            let dir_out = opts.out.join(slug(&label));
            let (p, data) = pull(s, cell, rec, &spec, &dir_out.join("truth-first-run.csv")).await?;
            let from = Vector3::from(p.from_m);
            std::fs::create_dir_all(&dir_out)?;
            write_truth_csv(&dir_out.join("truth.csv"), &data)?;
            write_guide_csv(&dir_out.join("guide.csv"), &data)?;
            let u = dir.normalize();
            traces[ai].push((
                law,
                along_mm(&data, &from, &u),
                hand_along_mm(&data, &from, &u),
                force_along(&data, &u),
                cmd_along_mm(&data, &from, &u),
            ));
            let metrics = pull_metrics(&p);
            let mut targets = vec![
                target(
                    "response_time_s",
                    "<=",
                    json!(0.2),
                    true,
                    "lead-through issue",
                ),
                target("response_time_s", "<=", json!(1.0), false, "paper: < 1 s"),
                target(
                    "path_length_m",
                    ">=",
                    json!(0.04),
                    true,
                    "follows a 60 mm pull",
                ),
                guide_ended_target(),
            ];
            if *law == "stiffness" {
                targets.push(target(
                    "steps",
                    ">=",
                    json!(1),
                    true,
                    "steps of d were made",
                ));
                targets.push(target(
                    "max_step_error_m",
                    "<=",
                    json!(0.0005),
                    true,
                    "lead-through issue: d = 10 mm ± 0.5 mm (commanded)",
                ));
                targets.push(target(
                    "true_travel_error_m",
                    "<=",
                    json!(0.0005),
                    true,
                    "lead-through issue: d = 10 mm ± 0.5 mm; n steps move the true TCP n·d",
                ));
            }
            let (checks, passed) = checks(&metrics, &targets);
            let c = CaseOut {
                label,
                metrics,
                checks,
                note: (*law == "stiffness").then(|| {
                    "step_m: mean step from the commanded positions at step ends (control/guide_state)"
                        .to_string()
                }),
                passed,
            };
            if opts.progress {
                eprintln!("      {}", progress_line(&c));
            }
            cases.push(c);
        }
        // Back to the start for the next law.
        place(s, cell, START, 150.0).await?;
    }
    let colors = [plot::MEASURED, plot::ESTIMATE];
    let mut pos_panels = Vec::new();
    let mut force_panels = Vec::new();
    for (ai, (name, _)) in axes.iter().enumerate() {
        let mut ps = Vec::new();
        let mut fs = Vec::new();
        for (i, (law, pos, hand, force, cmd)) in traces[ai].iter().enumerate() {
            let c = colors[i % colors.len()];
            ps.push(Series::line(&format!("hand ({law} run)"), hand.clone(), plot::RAW).thin());
            ps.push(Series::line(&format!("TCP, {law}"), pos.clone(), c));
            if *law == "stiffness" {
                ps.push(
                    Series::line(
                        "commanded, stiffness (steps of d)",
                        cmd.clone(),
                        plot::REFERENCE,
                    )
                    .dashed()
                    .thin(),
                );
            }
            fs.push(Series::line(law, force.clone(), c));
        }
        pos_panels.push(Panel {
            title: format!("pull along tool {name}: position"),
            x_label: "t (s)".into(),
            y_label: "along the pull (mm)".into(),
            series: ps,
        });
        force_panels.push(Panel {
            title: format!("tool {name}: the hand's force"),
            x_label: "t (s)".into(),
            y_label: "F along the pull (N)".into(),
            series: fs,
        });
    }
    let cols = axes.len();
    pos_panels.extend(force_panels);
    let fig = Figure {
        title: format!(
            "lead-through-axes — {}",
            paper("lead-through-axes")["figure"]
                .as_str()
                .unwrap_or_default()
        ),
        rows: 2,
        cols,
        panels: pos_panels,
    };
    Ok((cases, fig))
}

/// Cai Fig. 8: a 45° pull between tool x and y with the admittance, stiffness and staircase
/// laws, in one plot.
async fn forty_five(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    opts: &Options,
) -> anyhow::Result<(Vec<CaseOut>, Figure)> {
    const START: [f64; 3] = [450.0, -100.0, 350.0];
    const LENGTH: f64 = 0.1;
    // Tool x = base −x, tool y = base +y: halfway between them.
    let dir = Vector3::new(-1.0, 1.0, 0.0).normalize();
    let laws = ["admittance", "stiffness", "staircase"];
    let mut pulls = Vec::new();
    for (i, law) in laws.iter().enumerate() {
        let label = format!("{law}, 45°");
        if opts.progress {
            eprintln!("[{}/{}] lead-through-45: {label}", i + 1, laws.len());
        }
        place_and_tare(s, cell, START, 150.0).await?;
        let spec = PullSpec::new(&label, law, dir, LENGTH);
        let d = opts.out.join(slug(&label));
        let (p, data) = pull(s, cell, rec, &spec, &d.join("truth-first-run.csv")).await?;
        let from = Vector3::from(p.from_m);
        std::fs::create_dir_all(&d)?;
        write_truth_csv(&d.join("truth.csv"), &data)?;
        write_guide_csv(&d.join("guide.csv"), &data)?;
        pulls.push((law, p, data, from));
    }
    let smooth_max = pulls
        .iter()
        .filter(|(l, ..)| **l != "staircase")
        .map(|(_, p, ..)| p.rms_path_deviation_m)
        .fold(0.0, f64::max);
    let mut cases = Vec::new();
    for (law, p, _, _) in &pulls {
        let mut metrics = pull_metrics(p);
        let mut targets = vec![
            target(
                "path_length_m",
                ">=",
                json!(0.06),
                true,
                "follows a 100 mm pull",
            ),
            guide_ended_target(),
        ];
        match **law {
            "staircase" => {
                metrics.insert(
                    "deviation_vs_smooth_laws".into(),
                    json!(p.rms_path_deviation_m / smooth_max.max(1e-9)),
                );
                targets.push(target(
                    "deviation_vs_smooth_laws",
                    ">=",
                    json!(1.0),
                    true,
                    "the staircase deviates more than both laws",
                ));
                targets.push(target(
                    "deviation_vs_smooth_laws",
                    ">=",
                    json!(2.0),
                    false,
                    "tests/leadthrough.rs",
                ));
            }
            l => {
                targets.push(target(
                    "rms_path_deviation_m",
                    "<=",
                    json!(0.002),
                    true,
                    "lead-through issue",
                ));
                if l == "admittance" {
                    targets.push(target(
                        "guide_force_at_0_1_m_s_n",
                        "<=",
                        json!(10.0),
                        true,
                        "lead-through issue",
                    ));
                }
            }
        }
        let (checks, passed) = checks(&metrics, &targets);
        let c = CaseOut {
            label: p.label.clone(),
            metrics,
            checks,
            note: (**law == "staircase").then(|| {
                "the per-axis baseline Cai improves on (steps along the single tool axis with the largest force)".to_string()
            }),
            passed,
        };
        if opts.progress {
            eprintln!("      {}: {}", c.label, progress_line(&c));
        }
        cases.push(c);
    }
    // XY paths (mm from the start, base x and y), the pull line; deviation along the path;
    // the hand's force.
    let colors = [plot::MEASURED, plot::ESTIMATE, plot::FOURTH];
    let mut xy = vec![Series::line(
        "pull line",
        vec![(0.0, 0.0), (dir.x * LENGTH * 1e3, dir.y * LENGTH * 1e3)],
        plot::REFERENCE,
    )
    .dashed()];
    let mut devs = Vec::new();
    let mut forces = Vec::new();
    for (i, (law, _, data, from)) in pulls.iter().enumerate() {
        let c = colors[i % colors.len()];
        xy.push(Series::line(
            law,
            data.truth
                .iter()
                .map(|t| {
                    (
                        (t.tcp_in_base_m[0] - from.x) * 1e3,
                        (t.tcp_in_base_m[1] - from.y) * 1e3,
                    )
                })
                .collect(),
            c,
        ));
        devs.push(Series::line(
            law,
            data.truth
                .iter()
                .map(|t| {
                    let p = Vector3::from(t.tcp_in_base_m) - from;
                    let a = p.dot(&dir);
                    (a * 1e3, (p - dir * a).norm() * 1e3)
                })
                .collect(),
            c,
        ));
        forces.push(Series::line(
            law,
            data.truth
                .iter()
                .map(|t| (t.t_s - t0(data), Vector3::from(t.hand_force_base_n).norm()))
                .collect(),
            c,
        ));
    }
    let fig = Figure {
        title: format!(
            "lead-through-45 — {}",
            paper("lead-through-45")["figure"]
                .as_str()
                .unwrap_or_default()
        ),
        rows: 1,
        cols: 3,
        panels: vec![
            Panel {
                title: "TCP path (top view, from the start)".into(),
                x_label: "base x (mm)".into(),
                y_label: "base y (mm)".into(),
                series: xy,
            },
            Panel {
                title: "distance from the pull line".into(),
                x_label: "along the pull (mm)".into(),
                y_label: "deviation (mm)".into(),
                series: devs,
            },
            Panel {
                title: "the hand's force".into(),
                x_label: "t (s)".into(),
                y_label: "|F| (N)".into(),
                series: forces,
            },
        ],
    };
    Ok((cases, fig))
}

/// What teaching gave.
#[derive(Debug, Clone)]
pub struct Taught {
    /// The teaching pulls.
    pub pulls: Vec<Pull>,
    /// The TCP (truth) while teaching, every pull (m, base).
    pub taught_path: Vec<[f64; 3]>,
    /// The teach buffer's size after the last record.
    pub recorded: usize,
    /// Per pull: the start (m), the direction and the record.
    pub runs: Vec<(Vector3<f64>, Vector3<f64>, Rec)>,
}

/// What save → load → play gave.
#[derive(Debug, Clone)]
pub struct Played {
    /// The taught waypoints (the program's TCP positions, m).
    pub waypoints: Vec<[f64; 3]>,
    /// The TCP (truth) during playback (m, base), with playback time (s).
    pub played_path: Vec<(f64, [f64; 3])>,
    /// Closest approach of the played TCP to each waypoint (m).
    pub waypoint_errors_m: Vec<f64>,
    pub progress: f64,
    pub phase: PlaybackPhase,
    pub duration_s: f64,
    /// Per robot cycle: (t, worst joint speed / limit, worst acceleration / limit).
    pub joint_fractions: Vec<(f64, f64, f64)>,
    pub worst_speed_fraction: f64,
    pub worst_accel_fraction: f64,
    pub program_file: PathBuf,
    /// The payload the program records.
    pub payload: control::program::PayloadSpec,
    /// This is a second playback: the first was aborted by this host-stall hold.
    pub repeated_after_hold: Option<stall::Retry>,
    /// robot-io's counters over the playback (before, after).
    pub robot_io: (Option<cli::RobotIoCounters>, Option<cli::RobotIoCounters>),
}

/// What teach → save → play gave.
#[derive(Debug, Clone)]
pub struct TeachPlay {
    pub taught: Taught,
    pub played: Played,
    /// The same program played again in EGM fault worlds.
    pub replays: Vec<(FaultWorld, Played)>,
}

/// Start of the teaching pulls (mm, tool down).
pub const TEACH_START_MM: [f64; 3] = [400.0, -100.0, 400.0];

/// Teaches three waypoints by hand: from [`TEACH_START_MM`] (placed and tared), three
/// admittance pulls of 70 mm, `cell teach record` after each. `release_after_s`/`settle_s`:
/// see [`PullSpec`].
pub async fn teach(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    dir: &Path,
    progress: bool,
    release_after_s: f64,
    settle_s: f64,
) -> anyhow::Result<Taught> {
    place_and_tare(s, cell, TEACH_START_MM, 150.0).await?;
    lead::rpc(s, cell, json!({ "clear": {} })).await?;
    let mut taught_path = Vec::new();
    let mut scored = Vec::new();
    let mut recorded = 0;
    let mut runs = Vec::new();
    let pulls = [
        Vector3::new(0.0, 1.0, 0.0),
        Vector3::new(-1.0, 0.0, -0.5),
        Vector3::new(0.5, 1.0, 0.0),
    ];
    for (i, d) in pulls.iter().enumerate() {
        let label = format!("teach-{i}");
        let mut spec = PullSpec::new(&label, "admittance", *d, 0.07);
        spec.release_after_s = release_after_s;
        spec.settle_s = settle_s;
        let (p, data) = pull(
            s,
            cell,
            rec,
            &spec,
            &dir.join(format!("{label}-first-run.csv")),
        )
        .await?;
        let from = Vector3::from(p.from_m);
        std::fs::create_dir_all(dir)?;
        write_truth_csv(&dir.join(format!("{label}.csv")), &data)?;
        taught_path.extend(data.truth.iter().map(|t| t.tcp_in_base_m));
        lead::rpc(s, cell, json!({ "record": { "label": format!("wp{i}") } })).await?;
        let list = lead::rpc(s, cell, json!({ "list": {} })).await?;
        recorded = list["waypoints"].as_array().map_or(0, Vec::len);
        if progress {
            eprintln!(
                "      pulled {:.0} mm by hand (TCP followed after {:.2} s); waypoint {} recorded",
                p.path_length_m * 1e3,
                p.response_time_s,
                i + 1,
            );
        }
        scored.push(p);
        runs.push((from, d.normalize(), data));
    }
    Ok(Taught {
        pulls: scored,
        taught_path,
        recorded,
        runs,
    })
}

/// Saves the teach buffer as `dir/programs/NAME.toml` (`cell teach save`: needs an identified
/// payload), loads it (`cell teach load`) and plays it (`cell play`); scores waypoint errors
/// on the truth and the joint references per robot cycle.
pub async fn save_and_play(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    dir: &Path,
    name: &str,
    progress: bool,
) -> anyhow::Result<Played> {
    let programs = dir.join("programs");
    let file = lead::save(s, cell, &programs, name).await?;
    if progress {
        eprintln!("      saved {}", file.display());
    }
    let program = lead::load(s, cell, &programs, name).await?;
    play_program(s, cell, rec, dir, &program, file, "playback", progress).await
}

/// Plays the loaded `program` (`cell play`) once (once more after a host stall's hold);
/// writes `dir/CSV.csv` (the truth) and `dir/CSV-joints.csv` (joint fractions); scores
/// waypoint errors on the truth and the joint references per robot cycle.
#[allow(clippy::too_many_arguments)]
pub async fn play_program(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    dir: &Path,
    program: &control::program::Program,
    file: PathBuf,
    csv: &str,
    progress: bool,
) -> anyhow::Result<Played> {
    rec.take();
    let mut rio_before = cli::RobotIoCounters::read(s, cell).await;
    // Where the first playback starts: a repeat is placed back here first, so it runs the
    // same approach (playback plans its approach from the measured joints).
    let start_q_rad = cli::latest_joints(s, cell, Duration::from_secs(2)).await?;
    let attempt = stall::Attempt::start();
    let first = lead::play(s, cell, program, 1.0, false, progress).await;
    let mut repeated_after_hold = None;
    // Aborted (or control's states stopped) by a proven host stall — the safety path, not
    // the playback: once more, from where the first one started. Any other end is returned
    // as it is.
    let ended = match &first {
        Ok(o) => o.phase == PlaybackPhase::Aborted,
        Err(_) => true,
    };
    let retry = if ended {
        let (err, stop) = cli::control_errors(s, cell).await;
        match stop.or(err) {
            Some(why) => stall::check(s, cell, csv, &why, attempt).await.ok(),
            None => None,
        }
    } else {
        None
    };
    let out = match retry {
        Some(mut retry) => {
            // The first playback's record is kept beside the second's.
            let first_data = rec.take();
            let kept = dir.join(format!("{csv}-first-run.csv"));
            write_truth_csv(&kept, &first_data)?;
            retry.first_run = Some(kept.display().to_string());
            eprintln!("      {}", retry.describe());
            lead::move_joints(s, cell, start_q_rad.map(f64::to_degrees), None, false).await?;
            rec.take();
            rio_before = cli::RobotIoCounters::read(s, cell).await;
            repeated_after_hold = Some(retry);
            lead::play(s, cell, program, 1.0, false, progress).await?
        }
        None => first?,
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let data = rec.take();
    let rio_after = cli::RobotIoCounters::read(s, cell).await;
    let waypoints: Vec<[f64; 3]> = program.waypoints.iter().map(|w| w.tcp_position_m).collect();
    let waypoint_errors_m = waypoints
        .iter()
        .map(|wp| {
            let wp = Vector3::from(*wp);
            data.truth
                .iter()
                .map(|t| (Vector3::from(t.tcp_in_base_m) - wp).norm())
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let (arm, _) = arm_and_poses()?;
    let vmax = arm.limits().max_speed;
    let amax = robot_io::supervisor::irb120_max_accel();
    let (joint_fractions, worst_v, worst_a) =
        joint_fractions(&data.joint_cmd, &data.periods, &vmax, &amax);
    let last = out.states.last();
    let t0 = data.truth.first().map_or(0.0, |t| t.t_s);
    write_truth_csv(&dir.join(format!("{csv}.csv")), &data)?;
    let mut jf = String::from("t_s,worst_speed_fraction,worst_accel_fraction\n");
    for (t, v, a) in &joint_fractions {
        jf.push_str(&format!("{t:.3},{v:.5},{a:.5}\n"));
    }
    let jpath = dir.join(format!("{csv}-joints.csv"));
    std::fs::write(&jpath, jf).with_context(|| format!("writing {}", jpath.display()))?;
    Ok(Played {
        waypoints,
        played_path: data
            .truth
            .iter()
            .map(|t| (t.t_s - t0, t.tcp_in_base_m))
            .collect(),
        waypoint_errors_m,
        progress: last.map_or(0.0, |s| s.progress),
        phase: out.phase,
        duration_s: last.map_or(0.0, |s| s.duration_s),
        joint_fractions,
        worst_speed_fraction: worst_v,
        worst_accel_fraction: worst_a,
        program_file: file,
        payload: program.payload,
        repeated_after_hold,
        robot_io: (rio_before, rio_after),
    })
}

/// An EGM fault world the taught program is played back in again (`sim/rpc/fault`), scored
/// against the clean playback.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultWorld {
    pub label: String,
    /// Fraction of EGM datagrams lost (each direction).
    pub packet_loss: f64,
    /// Extra delay of the simulated IRC5's datagrams, uniform in [0, jitter_ms] (ms).
    pub jitter_ms: f64,
    /// The targets gate this world; otherwise they are goals (characterisation).
    pub gate: bool,
}

/// The replays of the teach-playback experiment: 5 % loss 10 times (2 with `short`) and 2 ms
/// jitter (gated: issue 21's targets), and 6 ms jitter (datagrams late by more than a 4 ms
/// cycle: characterised, not gated).
pub fn fault_worlds(short: bool) -> Vec<FaultWorld> {
    let runs = if short { 2 } else { 10 };
    let mut v: Vec<FaultWorld> = (1..=runs)
        .map(|k| FaultWorld {
            label: format!("playback, 5 % EGM loss, run {k}"),
            packet_loss: 0.05,
            jitter_ms: 0.0,
            gate: true,
        })
        .collect();
    v.push(FaultWorld {
        label: "playback, 2 ms EGM jitter".into(),
        packet_loss: 0.0,
        jitter_ms: 2.0,
        gate: true,
    });
    v.push(FaultWorld {
        label: "playback, 6 ms EGM jitter (late datagrams)".into(),
        packet_loss: 0.0,
        jitter_ms: 6.0,
        gate: false,
    });
    v
}

/// Sets the simulated IRC5's EGM loss and jitter (`cell/<id>/sim/rpc/fault`).
pub async fn set_egm_faults(
    s: &Session,
    cell: &CellSection,
    packet_loss: f64,
    jitter_ms: f64,
) -> anyhow::Result<()> {
    cli::request(
        s,
        &format!("cell/{}/sim/rpc/fault", cell.id),
        Some(json!({ "packet_loss": packet_loss, "jitter_ms": jitter_ms }).to_string()),
        Duration::from_secs(3),
    )
    .await
    .context("setting the simulated EGM faults")?;
    Ok(())
}

/// Teaches three waypoints by hand, identifies the payload (a program records it), saves,
/// loads and plays the program (`teach-playback`).
pub async fn teach_playback(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    dir: &Path,
    progress: bool,
) -> anyhow::Result<TeachPlay> {
    let taught = teach(s, cell, rec, dir, progress, 2.0, 1.0).await?;
    if progress {
        eprintln!("      identifying the payload (a program records it)");
    }
    payload_identify(s, cell, None, progress).await?;
    let played = save_and_play(s, cell, rec, dir, "taught", progress).await?;
    Ok(TeachPlay {
        taught,
        played,
        replays: Vec::new(),
    })
}

/// Plays the program `teach_playback` saved once more in each of `worlds` (the fault set
/// before, cleared after, whatever the outcome).
pub async fn replay_in_faults(
    s: &Session,
    cell: &CellSection,
    rec: &Recorder,
    dir: &Path,
    worlds: &[FaultWorld],
    progress: bool,
) -> anyhow::Result<Vec<(FaultWorld, Played)>> {
    let programs = dir.join("programs");
    let program = lead::load(s, cell, &programs, "taught").await?;
    let file = programs.join("taught.toml");
    let mut out = Vec::new();
    for w in worlds {
        if progress {
            eprintln!("      {}", w.label);
        }
        set_egm_faults(s, cell, w.packet_loss, w.jitter_ms).await?;
        let r = play_program(
            s,
            cell,
            rec,
            dir,
            &program,
            file.clone(),
            &format!("replay-{}", out.len() + 1),
            progress,
        )
        .await;
        set_egm_faults(s, cell, 0.0, 0.0).await?;
        out.push((w.clone(), r?));
    }
    Ok(out)
}

/// A playback's metrics and targets (gates when `gate`, else goals).
fn playback_metrics(r: &Played, gate: bool) -> (serde_json::Map<String, Value>, Vec<Target>) {
    let mut m = serde_json::Map::new();
    let max_err = r.waypoint_errors_m.iter().copied().fold(0.0, f64::max);
    m.insert("max_waypoint_error_m".into(), json!(max_err));
    m.insert("waypoint_errors_m".into(), json!(r.waypoint_errors_m));
    m.insert("progress".into(), json!(r.progress));
    m.insert("completed".into(), json!(r.phase == PlaybackPhase::Done));
    m.insert("duration_s".into(), json!(r.duration_s));
    m.insert(
        "max_joint_speed_fraction".into(),
        json!(r.worst_speed_fraction),
    );
    m.insert(
        "max_joint_accel_fraction".into(),
        json!(r.worst_accel_fraction),
    );
    m.insert("payload".into(), json!(r.payload));
    cli::RobotIoCounters::insert_metrics(&mut m, r.robot_io.0, r.robot_io.1);
    if let Some(retry) = &r.repeated_after_hold {
        stall::record(&mut m, retry);
    }
    let targets = vec![
        target(
            "max_waypoint_error_m",
            "<=",
            json!(0.0005),
            gate,
            "lead-through issue",
        ),
        target("progress", ">=", json!(0.999), gate, "reaches 100 %"),
        target("completed", "==", json!(true), gate, "ends Done"),
        target(
            "max_joint_speed_fraction",
            "<=",
            json!(1.0),
            gate,
            "joint speed limits, per robot cycle on robot time (kin/joint_cmd)",
        ),
        target(
            "max_joint_accel_fraction",
            "<=",
            json!(1.0),
            gate,
            "joint acceleration limits, per robot cycle on robot time (kin/joint_cmd)",
        ),
    ];
    (m, targets)
}

/// The teach-playback case's metrics and checks.
fn teach_case(tp: &TeachPlay) -> CaseOut {
    let r = &tp.played;
    let (m, targets) = playback_metrics(r, true);
    let (checks, passed) = checks(&m, &targets);
    CaseOut {
        label: "3 waypoints taught by hand, played back".into(),
        metrics: m,
        checks,
        note: Some(format!(
            "taught with the admittance law by the scripted hand; the program is {}",
            r.program_file
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default()
        )),
        passed,
    }
}

/// A replay in an EGM fault world, scored as the clean playback plus the TCP's deviation from
/// the clean playback's path (each from its closest approach to the first waypoint on:
/// the program, not the approach to it, which starts elsewhere).
fn replay_case(w: &FaultWorld, r: &Played, clean: &Played) -> CaseOut {
    let (mut m, mut targets) = playback_metrics(r, w.gate);
    let first = r.waypoints.first().copied().unwrap_or_default();
    let pts = |p: &Played| p.played_path.iter().map(|(_, x)| *x).collect::<Vec<_>>();
    let (mine, theirs) = (pts(r), pts(clean));
    let dev = max_deviation_m(from_closest(&mine, first), from_closest(&theirs, first));
    m.insert("max_path_deviation_m".into(), json!(dev));
    m.insert("packet_loss".into(), json!(w.packet_loss));
    m.insert("jitter_ms".into(), json!(w.jitter_ms));
    targets.push(target(
        "max_path_deviation_m",
        "<=",
        json!(0.0002),
        w.gate,
        "motion-fidelity issue: from the clean playback's path",
    ));
    let (checks, passed) = checks(&m, &targets);
    CaseOut {
        label: w.label.clone(),
        metrics: m,
        checks,
        note: Some(format!(
            "the same program again, simulated IRC5 with {:.0} % EGM loss and {} ms send jitter{}",
            w.packet_loss * 100.0,
            w.jitter_ms,
            if w.gate {
                ""
            } else {
                "; characterised, not gated"
            }
        )),
        passed,
    }
}

/// Taught vs played path (top and side views) and the joint references' use of the limits.
pub fn teach_figure(tp: &TeachPlay) -> Figure {
    let r = &tp.played;
    let mm = |p: &[f64; 3], i: usize, j: usize| (p[i] * 1e3, p[j] * 1e3);
    let view = |i: usize, j: usize| -> Vec<Series> {
        vec![
            Series::line(
                "taught (hand-guided)",
                tp.taught.taught_path.iter().map(|p| mm(p, i, j)).collect(),
                plot::RAW,
            ),
            Series::line(
                "played back",
                r.played_path.iter().map(|(_, p)| mm(p, i, j)).collect(),
                plot::MEASURED,
            ),
            Series::points(
                "waypoints",
                r.waypoints.iter().map(|p| mm(p, i, j)).collect(),
                plot::FOURTH,
            ),
        ]
    };
    Figure {
        title: "teach-playback — three waypoints taught by hand, saved, played back".into(),
        rows: 1,
        cols: 3,
        panels: vec![
            Panel {
                title: "top view".into(),
                x_label: "base x (mm)".into(),
                y_label: "base y (mm)".into(),
                series: view(0, 1),
            },
            Panel {
                title: "side view".into(),
                x_label: "base x (mm)".into(),
                y_label: "base z (mm)".into(),
                series: view(0, 2),
            },
            Panel {
                title: "joint references per robot cycle".into(),
                x_label: "t (s)".into(),
                y_label: "% of the limit (worst joint)".into(),
                series: vec![
                    Series::line(
                        "speed",
                        r.joint_fractions
                            .iter()
                            .map(|(t, v, _)| (*t, v * 100.0))
                            .collect(),
                        plot::MEASURED,
                    )
                    // Thin: plotters' wide lines draw miter spikes at sharp reversals.
                    .thin(),
                    Series::line(
                        "acceleration",
                        r.joint_fractions
                            .iter()
                            .map(|(t, _, a)| (*t, a * 100.0))
                            .collect(),
                        plot::ESTIMATE,
                    )
                    .thin(),
                    Series::line(
                        "limit",
                        vec![
                            (0.0, 100.0),
                            (r.joint_fractions.last().map_or(1.0, |(t, ..)| *t), 100.0),
                        ],
                        plot::REFERENCE,
                    )
                    .dashed(),
                ],
            },
        ],
    }
}

fn slug(label: &str) -> String {
    let mut s = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    s.trim_matches('-').to_string()
}
