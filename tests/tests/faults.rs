//! Process and device faults **in contact and while guiding**, through the real processes
//! (issue 23, items 1 and 2). Each case starts a 10 N press that slides along the table
//! (`tasks/press-table.toml`, 0.5 s into its 20 mm/s move) or a hand-guided pull at 0.1 m/s,
//! then kills (SIGKILL) or freezes for 1 s (SIGSTOP … SIGCONT) one process, or makes the F/T box
//! die (`sensor_unplugged`) or hang (`sensor_frozen`) for 1 s. What must hold, each measured
//! on what the robot and the world saw (the bus's robot-side messages and the simulator's
//! ground truth), never on what control believes:
//!
//! 1. **robot-io holds within 2 robot cycles of the last command**: the first non-`Active`
//!    safety state after the fault is entered at most 3 robot cycles after the newest command's
//!    cycle (a command for cycle c answers c + 1 and stays fresh through c + 2). When robot-io
//!    itself is the fault, the emulated IRC5's reference must stand still from the fault on
//!    (it keeps the last reference, then ends the session on its `\CommTimeout`).
//! 2. **The force stays bounded**: the true contact force (surfaces on the tool) never exceeds
//!    the task's `max_force_n` (50 N) during and after the fault; while guiding, the
//!    operator's hand force never exceeds the guide's ceiling (60 N).
//! 3. **No reference step above one cycle at the speed limit**: between two consecutive
//!    robot cycles the IRC5's joint reference moves at most `max_speed_j · Δt` on every joint.
//! 4. **Nothing resumes by itself**: once the fault is over (the process restarted or thawed,
//!    the box back), control is idle, robot-io is not `Active` and the joints stay still for
//!    1 s; the next case's operator commands (move, tare, task) are the recovery.
//!
//! Every case writes a row (safe state, time to reach it, peak force, recovery) to
//! `$TMPDIR/cell-faults-<pid>.json`; docs/reliability.md quotes those rows.
//!
//! The controller's own faults run the same way: it leaves EGM (RAPID stopped) or its motors go
//! off, for 1 s.
//!
//! CI (the default) runs every process × signal × mode and the controller's faults in both
//! modes: 28 cases, ≈ 300 s. `FAULTS_SHORT=1` runs each process and each signal once (the
//! signal alternating between the press and the pull; 16 cases); `FAULTS_FULL=1` adds every
//! press case on each untuned world; `FAULTS_ONLY=<text>` only the cases whose process or
//! fault names contain the text.
#![allow(clippy::unwrap_used)]

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{
    clock::mono_ns,
    codec,
    msg::{JointCommand, JointState, SafetyLevel, SafetyState, SimTruth},
    topic,
};
use nalgebra::Vector3;
use serde_json::{json, Value};
use tests::{emulink::ip, repo_root, statuses, up_all, wait_for, TestCell};


/// The press task's force limit (the cell's `[control.hybrid.limits] max_force_n`).
const PRESS_MAX_FORCE_N: f64 = 50.0;
/// The guide's protective ceiling (`[control.guide] max_force_n`).
const GUIDE_MAX_FORCE_N: f64 = 60.0;
/// How long a frozen process or a hung box stays so.
const FREEZE: Duration = Duration::from_millis(1000);

type Log<T> = Arc<Mutex<Vec<(u64, T)>>>;
type Sub = zenoh::pubsub::Subscriber<()>;

async fn tap<T: serde::de::DeserializeOwned + Send + 'static>(
    s: &zenoh::Session,
    key: String,
    log: Log<T>,
) -> Sub {
    s.declare_subscriber(key)
        .callback(move |smp| {
            if let Ok(m) = codec::decode::<T>(&smp.payload().to_bytes()) {
                if let Ok(mut g) = log.lock() {
                    g.push((mono_ns(), m));
                }
            }
        })
        .await
        .unwrap()
}

/// What the robot side and the world saw, stamped with this host's monotonic arrival time.
struct Tap {
    cmds: Log<JointCommand>,
    safety: Log<SafetyState>,
    truth: Log<SimTruth>,
    joints: Log<JointState>,
    _subs: Vec<Sub>,
}

impl Tap {
    async fn start(s: &zenoh::Session, c: &TestCell) -> Tap {
        let id = &c.cell.id;
        let (cmds, safety, truth, joints) = (
            Log::default(),
            Log::default(),
            Log::default(),
            Log::default(),
        );
        let subs = vec![
            tap(s, topic::JOINT_COMMAND.key(id), cmds.clone()).await,
            tap(s, topic::SAFETY_STATE.key(id), safety.clone()).await,
            tap(s, topic::SIM_TRUTH.key(id), truth.clone()).await,
            tap(s, topic::JOINT_STATE.key(id), joints.clone()).await,
        ];
        Tap {
            cmds,
            safety,
            truth,
            joints,
            _subs: subs,
        }
    }

    fn clear(&self) {
        self.cmds.lock().unwrap().clear();
        self.safety.lock().unwrap().clear();
        self.truth.lock().unwrap().clear();
        self.joints.lock().unwrap().clear();
    }

    fn truth_now(&self) -> Option<SimTruth> {
        self.truth.lock().unwrap().last().map(|x| x.1)
    }
}

fn since<T: Clone>(log: &Log<T>, from_ns: u64) -> Vec<(u64, T)> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t >= from_ns)
        .cloned()
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Sensor,
    Force,
    Control,
    Kinematics,
    RobotIo,
    FtBox,
    /// The controller leaves EGM for 1 s (RAPID stopped: it stops sending).
    EgmStopped,
    /// The controller's motors go off for 1 s (it reports motors off).
    MotorsOff,
    /// The F/T box reads full scale for 1 s.
    FtSaturated,
    /// The F/T box sends NaN for 1 s (calibrated float format).
    FtNan,
    /// A 150 N spike on the box's Fz for 3 samples (over the force service's 100 N jump).
    FtSpike,
    /// A 30 N glitch on the box's Fz for 3 samples (under the jump and the force limit).
    FtGlitch,
    /// The box's zero drifts by +5 N on Fz over 1 s and stays there (beyond the tare).
    FtDrift,
    /// 30 % of EGM datagrams lost for 1 s.
    EgmLoss,
    /// For 1 s, 30 % of EGM datagrams overtaken by the next one and 30 % delivered twice, in
    /// both directions.
    EgmReorder,
    /// The link between the Raspberry Pi (sensor node) and the PC cut for 3 s.
    LinkCut,
    /// The Pi ↔ PC link delays every packet by 20 ms and loses 5 %, each way, for 3 s.
    LinkImpaired,
}

/// What a fault must lead to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// robot-io holds because of the fault (the rules in the module's docs).
    Hold,
    /// The fault is ridden through: the motion goes on, the force stays bounded.
    RideThrough,
}

impl Target {
    fn expect(self) -> Expect {
        match self {
            Target::FtDrift | Target::EgmLoss | Target::EgmReorder | Target::FtGlitch => {
                Expect::RideThrough
            }
            _ => Expect::Hold,
        }
    }
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Sensor => "sensor",
            Target::Force => "force",
            Target::Control => "control",
            Target::Kinematics => "kinematics",
            Target::RobotIo => "robot-io",
            Target::FtBox => "F/T box",
            Target::EgmStopped | Target::MotorsOff | Target::EgmLoss | Target::EgmReorder => "IRC5",
            Target::LinkCut | Target::LinkImpaired => "Pi ↔ PC link",
            Target::FtSaturated
            | Target::FtNan
            | Target::FtSpike
            | Target::FtGlitch
            | Target::FtDrift => "F/T box",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sig {
    /// SIGKILL (the box: its server dies, `sensor_unplugged`, back after 1 s).
    Kill,
    /// SIGSTOP for 1 s, then SIGCONT (the box: it hangs, `sensor_frozen`, for 1 s).
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Press,
    Guide,
}

fn signal(pid: u64, sig: i32) {
    // SAFETY: signalling one of the test cell's own processes.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

async fn pid_of(s: &zenoh::Session, c: &TestCell, svc: &str) -> u64 {
    statuses(s, &c.cell).await.unwrap()[svc]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid for {svc}"))
}

/// Injects the fault and, for a freeze or a dead box, ends it after [`FREEZE`].
async fn inject(s: &zenoh::Session, c: &TestCell, target: Target, sig: Sig) {
    let device = match target {
        Target::EgmStopped => Some(("controller_stopped", json!(true), json!(false))),
        Target::MotorsOff => Some(("motors_off", json!(true), json!(false))),
        Target::FtSaturated => Some(("sensor_saturated", json!(true), json!(false))),
        Target::FtNan => Some(("sensor_nan", json!(true), json!(false))),
        Target::FtSpike => Some((
            "sensor_spike",
            json!([0.0, 0.0, 150.0, 0.0, 0.0, 0.0]),
            json!([0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        )),
        Target::FtGlitch => Some((
            "sensor_spike",
            json!([0.0, 0.0, 30.0, 0.0, 0.0, 0.0]),
            json!([0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        )),
        Target::FtDrift => Some((
            "sensor_drift_per_s",
            json!([0.0, 0.0, 5.0, 0.0, 0.0, 0.0]),
            json!([0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        )),
        Target::EgmLoss => Some(("packet_loss", json!(0.3), json!(0.0))),
        Target::EgmReorder => {
            tests::sim_fault(s, c, json!({ "egm_reorder": 0.3, "egm_duplicate": 0.3 })).await;
            tokio::time::sleep(FREEZE).await;
            tests::sim_fault(s, c, json!({ "egm_reorder": 0.0, "egm_duplicate": 0.0 })).await;
            return;
        }
        _ => None,
    };
    if let Some((key, on, off)) = device {
        tests::sim_fault(s, c, json!({ key: on })).await;
        tokio::time::sleep(FREEZE).await;
        tests::sim_fault(s, c, json!({ key: off })).await;
        return;
    }
    if target == Target::LinkCut {
        let dev = LINK.lock().unwrap().clone().expect("the two-host link");
        ip(&["link", "set", &dev, "down"]).expect("cut the link");
        tokio::time::sleep(Duration::from_secs(3)).await;
        ip(&["link", "set", &dev, "up"]).expect("restore the link");
        return;
    }
    if target == Target::LinkImpaired {
        let link = EMU
            .lock()
            .unwrap()
            .clone()
            .expect("the emulated two-host link");
        let before = link.totals();
        link.set(tests::emulink::Impairment {
            delay: Duration::from_millis(20),
            loss: 0.05,
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        link.set(tests::emulink::Impairment::NONE);
        let after = link.totals();
        let (sent, lost) = (after.0 - before.0, after.1 - before.1);
        eprintln!(
            "impaired link: {sent} packets forwarded 20 ms late, {lost} lost ({:.1} %)",
            100.0 * lost as f64 / (sent + lost).max(1) as f64
        );
        assert!(sent > 100 && lost > 0, "the impairment saw no traffic");
        return;
    }
    if target == Target::FtBox {
        let key = match sig {
            Sig::Kill => "sensor_unplugged",
            Sig::Stop => "sensor_frozen",
        };
        tests::sim_fault(s, c, json!({ key: true })).await;
        tokio::time::sleep(FREEZE).await;
        tests::sim_fault(s, c, json!({ key: false })).await;
        return;
    }
    let pid = pid_of(s, c, target.name()).await;
    match sig {
        Sig::Kill => {
            signal(pid, libc::SIGKILL);
            tokio::time::sleep(FREEZE).await;
        }
        Sig::Stop => {
            signal(pid, libc::SIGSTOP);
            tokio::time::sleep(FREEZE).await;
            signal(pid, libc::SIGCONT);
        }
    }
}

/// Moves the tool (pointing down) to `xyz_mm` and tares there once it is still.
fn place_and_tare(c: &TestCell, xyz_mm: [f64; 3]) {
    let [x, y, z] = xyz_mm.map(|v| v.to_string());
    let (ok, _, err) =
        c.cli_repeat_after_stall(&["move", &x, &y, &z, "0", "0", "1", "0", "--wait"]);
    assert!(ok, "move: {err}\n{}", c.log_text());
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(400));
        let (ok, out, err) = c.cli(&["tare"]);
        if ok {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "tare never succeeded: {out} {err}"
        );
    }
}

/// The cell back to an operator's start: every service live (restarted ones included),
/// robot-io's session running, a protective stop cleared.
async fn ready(s: &zenoh::Session, c: &TestCell) {
    let live = wait_for(Duration::from_secs(20), || async {
        (tests::live_services(s, &c.cell).await == tests::DEFAULT_SERVICES).then_some(())
    })
    .await;
    assert!(live.is_some(), "services not back\n{}", c.log_text());
    let _ = c.cli(&["reset"]);
    let _ = up_all(c).await;
}

/// Starts the fault's motion; returns when the fault is due.
async fn start_motion(
    s: &zenoh::Session,
    c: &TestCell,
    tap: &Tap,
    mode: Mode,
    label: &str,
) -> Motion {
    match mode {
        Mode::Press => {
            let (ok, _, err) = c
                .cli_repeat_after_stall(&["move", "350", "0", "230", "0", "0", "1", "0", "--wait"]);
            assert!(ok, "{label}: move off the table: {err}");
            place_and_tare(c, [350.0, 0.0, 206.0]);
            let out = std::env::temp_dir().join(format!(
                "faults-{}-{}",
                label.replace([' ', '/'], "-"),
                std::process::id()
            ));
            let mut cmd = c.command();
            cmd.arg("hybrid")
                .arg(repo_root().join("tasks/press-table.toml"))
                .args(["--json", "--out"])
                .arg(out);
            let run = tokio::task::spawn_blocking(move || cmd.output().expect("run cell hybrid"));
            // Contact, then 2.5 s: 0.5 s into the 20 mm/s move along the table.
            let touched = wait_for(Duration::from_secs(20), || async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                tap.truth_now()
                    .filter(|t| t.contact_force_base_n[2].abs() > 5.0)
                    .map(|_| ())
            })
            .await;
            assert!(touched.is_some(), "{label}: the press never touched");
            tokio::time::sleep(Duration::from_millis(2500)).await;
            let t = tap.truth_now().unwrap();
            assert!(
                t.in_contact,
                "{label}: out of contact before the fault\n{}",
                c.log_text()
            );
            Motion::Press(run)
        }
        Mode::Guide => {
            place_and_tare(c, [400.0, -150.0, 400.0]);
            let key = format!("cell/{}/sim/rpc/scenario", c.cell.id);
            let ask = |body: Value| {
                let key = key.clone();
                async move {
                    cell::cli::request(s, &key, Some(body.to_string()), Duration::from_secs(3))
                        .await
                        .unwrap_or_else(|e| panic!("scenario: {e}"))
                }
            };
            ask(json!({ "set": { "hand.enabled": false } })).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let from = Vector3::from(tap.truth_now().unwrap().tcp_in_base_m);
            let r = cell::lead::rpc(s, &c.cell, json!({ "guide": {} }))
                .await
                .unwrap_or_else(|e| panic!("{label}: guide: {e:#}"));
            let token = cell::lead::enable_token(&r).unwrap();
            let enable = cell::leadexp::hold_enable(s, &c.cell, token);
            // 0.15 m at 0.1 m/s from 0.3 s; the hand lets go 0.3 s after its path ends
            // (an operator feels the arm stop and lets go).
            let mut spec = cell::leadexp::PullSpec::new(
                label,
                "admittance",
                Vector3::new(0.0, 1.0, 0.0),
                0.15,
            );
            spec.speed_m_s = 0.1;
            spec.release_after_s = 0.3;
            ask(cell::leadexp::hand_request(&from, &spec)).await;
            // 0.7 s into the pull: the arm follows at about the hand's speed.
            tokio::time::sleep(Duration::from_millis(1000)).await;
            let tr = since(&tap.truth, mono_ns() - 200_000_000);
            let (a, b) = (tr.first().unwrap(), tr.last().unwrap());
            let v = (Vector3::from(b.1.tcp_in_base_m) - Vector3::from(a.1.tcp_in_base_m)).norm()
                / (b.1.t_s - a.1.t_s).max(1e-3);
            assert!(
                v > 0.03,
                "{label}: the arm is not following the hand ({v:.3} m/s)\n{}",
                c.log_text()
            );
            Motion::Guide(enable)
        }
    }
}

enum Motion {
    Press(tokio::task::JoinHandle<std::process::Output>),
    Guide(tokio::sync::oneshot::Sender<()>),
}

/// One case's figures.
#[derive(Debug, serde::Serialize)]
struct Row {
    mode: &'static str,
    process: &'static str,
    fault: &'static str,
    /// robot-io's first non-Active state after the fault (level, reason).
    robot_io: String,
    /// Control's stop reason once idle.
    control: String,
    /// From the fault to robot-io's hold (ms, host arrival of the safety state); for a
    /// robot-io fault, to the last change of the IRC5's reference.
    to_hold_ms: f64,
    /// Robot cycles from the newest command's cycle to the hold (≤ 3: fresh through c + 2).
    hold_cycles_after_last_command: Option<i64>,
    /// Peak true contact force from the fault on (N); while guiding, the hand's force.
    peak_force_n: f64,
    /// Largest per-cycle reference step over the fault, as a fraction of `max_speed · Δt`.
    max_reference_step: f64,
    /// The task's outcome as `cell hybrid` reported it (press) or the guide's end (pull).
    task: String,
}

fn fault_name(target: Target, sig: Sig) -> &'static str {
    match (target, sig) {
        (Target::FtBox, Sig::Kill) => "dead 1 s",
        (Target::FtBox, Sig::Stop) => "hung 1 s",
        (Target::EgmStopped, _) => "leaves EGM 1 s",
        (Target::MotorsOff, _) => "motors off 1 s",
        (Target::FtSaturated, _) => "saturated 1 s",
        (Target::FtNan, _) => "NaN 1 s",
        (Target::FtSpike, _) => "150 N spike, 3 samples",
        (Target::FtGlitch, _) => "30 N glitch, 3 samples",
        (Target::FtDrift, _) => "zero drifts +5 N in 1 s",
        (Target::EgmLoss, _) => "30 % EGM loss 1 s",
        (Target::EgmReorder, _) => "30 % EGM reordered + 30 % duplicated 1 s",
        (Target::LinkCut, _) => "cut 3 s",
        (Target::LinkImpaired, _) => "20 ms delay + 5 % loss 3 s",
        (_, Sig::Kill) => "SIGKILL",
        (_, Sig::Stop) => "SIGSTOP 1 s",
    }
}

fn max_reference_step(truth: &[(u64, SimTruth)]) -> f64 {
    let vmax = kinematics::JointLimits::irb120().max_speed;
    truth
        .windows(2)
        .filter_map(|w| {
            let dt = w[1].1.t_s - w[0].1.t_s;
            (dt > 1e-4).then(|| {
                (0..6)
                    .map(|j| (w[1].1.q_ref_rad[j] - w[0].1.q_ref_rad[j]).abs() / (vmax[j] * dt))
                    .fold(0.0, f64::max)
            })
        })
        .fold(0.0, f64::max)
}

async fn run_case(
    s: &zenoh::Session,
    c: &TestCell,
    tap: &Tap,
    mode: Mode,
    target: Target,
    sig: Sig,
) -> Row {
    let label = format!(
        "{} {} {}",
        match mode {
            Mode::Press => "press",
            Mode::Guide => "guide",
        },
        target.name(),
        fault_name(target, sig)
    );
    eprintln!("== {label}");
    ready(s, c).await;
    let motion = start_motion(s, c, tap, mode, &label).await;
    let before = mono_ns() - 300_000_000;
    let at = mono_ns();
    inject(s, c, target, sig).await;
    // The motion's own end: the task's report, the deadman released, the hand let go.
    let mut released_at = u64::MAX;
    let task = match motion {
        Motion::Press(run) => {
            let out = tokio::time::timeout(Duration::from_secs(30), run)
                .await
                .unwrap_or_else(|_| panic!("{label}: cell hybrid never returned"))
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let m = text
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str::<Value>(l).ok())
                .unwrap_or(Value::Null);
            let why = m["aborted"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| {
                    if out.status.success() {
                        "completed".into()
                    } else {
                        String::from_utf8_lossy(&out.stderr)
                            .lines()
                            .last()
                            .unwrap_or("")
                            .to_string()
                    }
                });
            why
        }
        Motion::Guide(enable) => {
            released_at = mono_ns();
            let _ = enable.send(());
            let key = format!("cell/{}/sim/rpc/scenario", c.cell.id);
            let _ = cell::cli::request(
                s,
                &key,
                Some(json!({ "set": { "hand.enabled": false } }).to_string()),
                Duration::from_secs(3),
            )
            .await;
            String::new()
        }
    };
    let expect = target.expect();
    if expect == Expect::RideThrough {
        if mode == Mode::Press {
            assert_eq!(task, "completed", "{label}: the press did not ride through");
        }
        // A completed press keeps its force, a released guide session holds in its mode,
        // until the operator ends them.
        let (ok, _, err) = c.cli(&["mode", "idle"]);
        assert!(ok, "{label}: cell mode idle: {err}");
    }
    // Idle and not Active, every service back.
    let settled = wait_for(Duration::from_secs(15), || async {
        let st = statuses(s, &c.cell).await.ok()?;
        let ctl = &st.get("control")?["detail"];
        let rio = &st.get("robot-io")?["detail"]["safety"];
        (ctl["mode"] == "Idle" && rio["level"] != "Active" && st.len() == 6)
            .then(|| ctl["stop_reason"].as_str().unwrap_or("-").to_string())
    })
    .await;
    let control = settled.unwrap_or_else(|| {
        panic!(
            "{label}: the cell did not settle idle and holding\n{}",
            c.log_text()
        )
    });
    // Nothing resumes by itself: 1 s still, never Active.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let quiet_from = mono_ns();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let js: Vec<JointState> = since(&tap.joints, quiet_from)
        .into_iter()
        .map(|x| x.1)
        .collect();
    assert!(js.len() > 100, "{label}: {} joint states in 1 s", js.len());
    let moved = tests::joint_spread(&js);
    assert!(
        moved < 1e-6,
        "{label}: the robot moved {moved} rad after the fault, by itself"
    );
    let safety = since(&tap.safety, at);
    assert!(
        since(&tap.safety, quiet_from)
            .iter()
            .all(|(_, x)| x.level != SafetyLevel::Active),
        "{label}: robot-io went Active again without an operator command"
    );

    // 1. The hold.
    let cmds = since(&tap.cmds, before);
    let truth = since(&tap.truth, before);
    let first_hold = safety.iter().find(|(_, x)| x.level != SafetyLevel::Active);
    let robot_io = first_hold
        .map(|(_, x)| format!("{:?} ({:?})", x.level, x.reason))
        .unwrap_or_else(|| "-".into());
    let (to_hold_ms, hold_cycles) = if target == Target::RobotIo {
        // The IRC5 keeps robot-io's last reference: find the last change after the fault,
        // up to robot-io's return (its first safety state after the fault).
        let back = safety
            .iter()
            .find(|(t, _)| *t >= at + 100_000_000)
            .map_or(u64::MAX, |x| x.0);
        let during: Vec<&(u64, SimTruth)> = truth
            .iter()
            .filter(|(t, _)| *t >= at && *t < back)
            .collect();
        let last_change = during
            .windows(2)
            .rev()
            .find(|w| (0..6).any(|j| (w[1].1.q_ref_rad[j] - w[0].1.q_ref_rad[j]).abs() > 1e-9))
            .map(|w| w[1].0)
            .unwrap_or(at);
        ((last_change.saturating_sub(at)) as f64 * 1e-6, None)
    } else {
        let (t_hold, h) = first_hold.unwrap_or_else(|| {
            panic!(
                "{label}: robot-io never left Active after the fault\n{}",
                c.log_text()
            )
        });
        let newest = cmds
            .iter()
            .filter(|(t, _)| *t <= *t_hold)
            .map(|(_, x)| x.cycle)
            .max()
            .unwrap_or(0);
        let after = h.since_cycle as i64 - newest as i64;
        ((t_hold.saturating_sub(at)) as f64 * 1e-6, Some(after))
    };
    if let Some(n) = hold_cycles {
        assert!(
            n <= 3,
            "{label}: robot-io held {n} robot cycles after the newest command's cycle (≤ 3)"
        );
    }
    if expect == Expect::RideThrough && mode == Mode::Guide {
        let t_hold = first_hold.map_or(u64::MAX, |x| x.0);
        assert!(
            t_hold >= released_at,
            "{label}: guiding ended {:.0} ms after the fault, before the operator let go",
            t_hold.saturating_sub(at) as f64 * 1e-6
        );
    }
    if target != Target::RobotIo && expect == Expect::Hold {
        // The fault itself held the robot, not the task's own end nor a released deadman.
        // Guiding: the deadman is released after the fault's 1 s. The press: its move runs
        // 5 s and the fault comes 0.5 s into it, so its own end is ≥ 4 s later; a task ended by
        // the fault first backs off the surface (blind on a lost wrench: the release takes
        // longer the softer the part, ≈ 0.3 s on the 2·10⁴ N/m table, ≈ 1 s on 5·10³ N/m).
        let bound_ms = match mode {
            Mode::Guide => FREEZE.as_secs_f64() * 1e3,
            Mode::Press => 3000.0,
        };
        assert!(
            to_hold_ms < bound_ms,
            "{label}: robot-io held only {to_hold_ms:.0} ms after the fault (< {bound_ms:.0})"
        );
        if mode == Mode::Press {
            assert_ne!(
                task, "completed",
                "{label}: the press completed through the fault"
            );
        }
    }
    if target == Target::RobotIo {
        // The reference stands still once the datagram in flight has landed.
        assert!(
            to_hold_ms < 60.0,
            "{label}: the IRC5's reference moved {to_hold_ms:.1} ms after robot-io's fault"
        );
    }
    // 2. The force.
    let after_fault: Vec<&SimTruth> = truth
        .iter()
        .filter(|(t, _)| *t >= at)
        .map(|x| &x.1)
        .collect();
    assert!(
        after_fault.len() > 100,
        "{label}: {} truth samples",
        after_fault.len()
    );
    let peak_force_n = after_fault
        .iter()
        .map(|t| match mode {
            Mode::Press => Vector3::from(t.contact_force_base_n).norm(),
            Mode::Guide => Vector3::from(t.hand_force_base_n).norm(),
        })
        .fold(0.0, f64::max);
    let bound = match mode {
        Mode::Press => PRESS_MAX_FORCE_N,
        Mode::Guide => GUIDE_MAX_FORCE_N,
    };
    assert!(
        peak_force_n <= bound,
        "{label}: peak force {peak_force_n:.1} N over the {bound} N bound"
    );
    // 3. The reference.
    let step = max_reference_step(&truth);
    assert!(
        step <= 1.0,
        "{label}: a reference step of {step:.2} × max_speed · Δt"
    );
    let row = Row {
        mode: match mode {
            Mode::Press => "sliding 10 N press",
            Mode::Guide => "guiding at 0.1 m/s",
        },
        process: target.name(),
        fault: fault_name(target, sig),
        robot_io,
        control,
        to_hold_ms,
        hold_cycles_after_last_command: hold_cycles,
        peak_force_n,
        max_reference_step: step,
        task,
    };
    eprintln!("{label}: {}", serde_json::to_string(&row).unwrap());
    row
}

fn cases(mode: Mode) -> Vec<(Target, Sig)> {
    // CI (the default): every process × signal in both modes, as the issue asks.
    let full = !std::env::var("FAULTS_SHORT").is_ok_and(|v| v == "1");
    let targets = [
        Target::Sensor,
        Target::Force,
        Target::Control,
        Target::Kinematics,
        Target::RobotIo,
        Target::FtBox,
    ];
    let mut v = Vec::new();
    for (i, t) in targets.into_iter().enumerate() {
        for sig in [Sig::Kill, Sig::Stop] {
            // Short form: each process and each signal once, the signal alternating by mode.
            let pick = (i % 2 == 0) == (sig == Sig::Kill);
            if full || (pick == (mode == Mode::Press)) {
                v.push((t, sig));
            }
        }
    }
    // The controller's own faults, in every form.
    v.push((Target::EgmStopped, Sig::Stop));
    v.push((Target::MotorsOff, Sig::Stop));
    // `FAULTS_ONLY=<text>`: only the cases whose process or fault contains it.
    if let Ok(only) = std::env::var("FAULTS_ONLY") {
        v.retain(|(t, sig)| t.name().contains(&only) || fault_name(*t, *sig).contains(&only));
    }
    v
}

fn write_rows(name: &str, rows: &[Row]) {
    let path = std::env::temp_dir().join(format!("cell-faults-{name}-{}.json", std::process::id()));
    let _ = std::fs::write(&path, serde_json::to_string_pretty(rows).unwrap());
    eprintln!("rows: {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_faults_during_a_sliding_press_hold_bounded_and_do_not_resume() {
    let _cell = tests::cell_lock();
    let c = TestCell::start(
        "faultpress",
        &["sim.scenario=\"scenarios/table-contact.toml\""],
    );
    let s = up_all(&c).await;
    let tap = Tap::start(&s, &c).await;
    let mut rows = Vec::new();
    for (t, sig) in cases(Mode::Press) {
        tap.clear();
        rows.push(run_case(&s, &c, &tap, Mode::Press, t, sig).await);
    }
    write_rows("press", &rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_faults_while_guiding_hold_bounded_and_do_not_resume() {
    let _cell = tests::cell_lock();
    let c = TestCell::start(
        "faultguide",
        &["sim.scenario=\"scenarios/lead-through.toml\""],
    );
    let s = up_all(&c).await;
    let tap = Tap::start(&s, &c).await;
    let mut rows = Vec::new();
    for (t, sig) in cases(Mode::Guide) {
        tap.clear();
        rows.push(run_case(&s, &c, &tap, Mode::Guide, t, sig).await);
    }
    write_rows("guide", &rows);
}

/// A process of the test's own that must not outlive a failing test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The launcher killed or frozen during the sliding press. `cell up` is the cell's zenoh
/// router as well as its services' supervisor: frozen, the whole bus stops; killed, the router
/// goes and every service with it (`PR_SET_PDEATHSIG`). The simulator — the robot and the
/// world — runs outside the launcher here, as a real robot would, so the outcome is read from
/// it: its own peak contact force and reference speed since start, and where the tool is once
/// a new `cell up` (same router address) brought the bus back.
///
/// Must hold: the arm stays where the fault found it (TCP within 1 mm), the force bounded by
/// the task's limit, no reference faster than the joint speed limit, and nothing resumes by
/// itself — control idle, robot-io not `Active`, the joints still — until the operator's next
/// command, which works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_or_frozen_launcher_leaves_the_press_held_and_bounded() {
    let _cell = tests::cell_lock();
    let mut rows = Vec::new();
    for sig in [Sig::Stop, Sig::Kill] {
        let label = format!("press launcher {}", fault_name(Target::Sensor, sig));
        eprintln!("== {label}");
        let mut c = TestCell::start(
            "faultlauncher",
            &[
                "sim.scenario=\"scenarios/table-contact.toml\"",
                "launcher.services=[\"robot-io\",\"kinematics\",\"control\",\"force\",\"sensor\"]",
            ],
        );
        let _sim = KillOnDrop(c.spawn_cli(&["service", "sim"]));
        let s = up_all(&c).await;
        let tap = Tap::start(&s, &c).await;
        let Motion::Press(run) = start_motion(&s, &c, &tap, Mode::Press, &label).await else {
            unreachable!()
        };
        let before = tap.truth_now().unwrap();
        let at = mono_ns();
        let pid = u64::from(c.child.id());
        let s = match sig {
            Sig::Stop => {
                signal(pid, libc::SIGSTOP);
                tokio::time::sleep(FREEZE).await;
                signal(pid, libc::SIGCONT);
                s
            }
            Sig::Kill => {
                signal(pid, libc::SIGKILL);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                c.restart_up();
                // A new session: the old one's router is gone.
                c.client().await
            }
        };
        let out = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .unwrap_or_else(|_| panic!("{label}: cell hybrid never returned"))
            .unwrap();
        let task = String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
            .to_string();
        // Frozen, the launcher stops only its router: the services are zenoh peers that
        // reach each other directly once the router has introduced them, so the task runs
        // through. Killed, it takes every service with it: the task cannot complete.
        match sig {
            Sig::Stop => assert!(
                out.status.success(),
                "{label}: a frozen router ended the press: {task}\n{}",
                c.log_text()
            ),
            Sig::Kill => assert!(
                !out.status.success(),
                "{label}: the press completed through the fault"
            ),
        }
        if sig == Sig::Stop {
            // A completed press keeps its force until the operator ends it.
            let (ok, _, err) = c.cli(&["mode", "idle"]);
            assert!(ok, "{label}: cell mode idle: {err}");
        }
        let settled = wait_for(Duration::from_secs(30), || async {
            let st = statuses(&s, &c.cell).await.ok()?;
            let ctl = &st.get("control")?["detail"];
            let rio = &st.get("robot-io")?["detail"]["safety"];
            let sim = &st.get("sim")?["detail"];
            (st.len() == 6
                && ctl["mode"] == "Idle"
                && rio["level"] != "Active"
                && rio["reason"] != "RobotSilent")
                .then(|| {
                    (
                        ctl["stop_reason"].as_str().unwrap_or("-").to_string(),
                        format!(
                            "{} ({})",
                            rio["level"].as_str().unwrap_or("?"),
                            rio["reason"].as_str().unwrap_or("?")
                        ),
                        sim.clone(),
                    )
                })
        })
        .await;
        let Some((control, robot_io, _)) = settled else {
            let st = statuses(&s, &c.cell).await.unwrap_or_default();
            let brief: Vec<String> = st
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}: mode {} stop {} safety {}",
                        v["detail"]["mode"], v["detail"]["stop_reason"], v["detail"]["safety"]
                    )
                })
                .collect();
            panic!(
                "{label}: the cell did not come back idle and holding: {}",
                brief.join("; ")
            )
        };
        // Nothing resumes: 1 s still, never Active (a new tap: the bus may be new). As in
        // `run_case`, the window opens 300 ms after the cell settled: the settle is seen on the
        // hold's first cycle, while the robot's own servo still converges onto the held
        // reference (a CI run measured 2.6 µrad of that tail in a window opened at once).
        let tap2 = Tap::start(&s, &c).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let quiet_from = mono_ns();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let js: Vec<JointState> = since(&tap2.joints, quiet_from)
            .into_iter()
            .map(|x| x.1)
            .collect();
        assert!(js.len() > 100, "{label}: {} joint states in 1 s", js.len());
        let moved = tests::joint_spread(&js);
        assert!(
            moved < 1e-6,
            "{label}: the robot moved {moved} rad by itself"
        );
        assert!(
            since(&tap2.safety, 0)
                .iter()
                .all(|(_, x)| x.level != SafetyLevel::Active),
            "{label}: robot-io went Active again without an operator command"
        );
        let now = tap2.truth_now().unwrap();
        let drift = (Vector3::from(now.tcp_in_base_m) - Vector3::from(before.tcp_in_base_m)).norm();
        assert!(
            sig == Sig::Stop || drift < 1e-3,
            "{label}: the tool moved {:.2} mm from where the fault found it",
            drift * 1e3
        );
        let sim_st = statuses(&s, &c.cell).await.unwrap()["sim"]["detail"].clone();
        let peak_force_n = sim_st["contact_force_peak_n"].as_f64().unwrap();
        let ref_ratio = sim_st["egm"]["reference_peak_speed_ratio"]
            .as_f64()
            .unwrap();
        assert!(
            peak_force_n <= PRESS_MAX_FORCE_N,
            "{label}: peak true contact force {peak_force_n:.1} N"
        );
        assert!(
            ref_ratio <= 1.0,
            "{label}: the IRC5's reference reached {ref_ratio:.2} × the speed limit"
        );
        // The task's own end holds robot-io within 3 cycles of its last command.
        let (to_hold_ms, hold_cycles) = if sig == Sig::Stop {
            let first_hold = since(&tap.safety, at)
                .into_iter()
                .find(|(_, x)| x.level != SafetyLevel::Active)
                .unwrap_or_else(|| panic!("{label}: no hold seen after the task"));
            let newest = since(&tap.cmds, at)
                .iter()
                .filter(|(t, _)| *t <= first_hold.0)
                .map(|(_, x)| x.cycle)
                .max()
                .unwrap_or(0);
            let n = first_hold.1.since_cycle as i64 - newest as i64;
            assert!(
                n <= 3,
                "{label}: robot-io held {n} robot cycles after the newest command's cycle"
            );
            (f64::NAN, Some(n))
        } else {
            let e = &sim_st["egm"];
            assert!(
                e["comm_timeouts"].as_u64().unwrap_or(0) >= 1,
                "{label}: the IRC5 never timed its session out: {e}"
            );
            (f64::NAN, None)
        };
        // Recovery: the operator's command works.
        let (ok, _, err) =
            c.cli_repeat_after_stall(&["move", "350", "0", "230", "0", "0", "1", "0", "--wait"]);
        assert!(ok, "{label}: the operator's move after the fault: {err}");
        let row = Row {
            mode: "sliding 10 N press",
            process: "launcher (cell up: router + supervisor)",
            fault: fault_name(Target::Sensor, sig),
            robot_io,
            control,
            to_hold_ms,
            hold_cycles_after_last_command: hold_cycles,
            peak_force_n,
            max_reference_step: ref_ratio,
            task,
        };
        eprintln!("{label}: {}", serde_json::to_string(&row).unwrap());
        rows.push(row);
        c.terminate(Duration::from_secs(5));
    }
    write_rows("launcher", &rows);
}

/// The process and network faults on worlds the cell was not tuned for: a steel table 50×
/// stiffer than the configured 2·10⁴ N/m (not identified: the gains follow control's on-line
/// estimate), a soft 5·10³ N/m pad, and the shipped table read through a sensor 3× noisier than
/// the shipped one with 2 ms of EGM jitter. The same rules as on the shipped world (hold
/// within 3 robot cycles of the newest command, the force bounded, no reference step above the
/// speed limit, nothing resumes). CI form: 3 cases a world; `FAULTS_FULL=1`: every press case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_faults_on_untuned_worlds_hold_bounded_and_do_not_resume() {
    let _cell = tests::cell_lock();
    let full = std::env::var("FAULTS_FULL").is_ok_and(|v| v == "1");
    let noisy = "sim.sri.imperfections.noise_std=[0.09, 0.09, 0.225, 0.00225, 0.00225, 0.003]";
    /// (name, settings, table stiffness set at run time, the CI form's cases)
    type World<'a> = (&'a str, Vec<&'a str>, Option<f64>, Vec<(Target, Sig)>);
    let worlds: [World; 3] = [
        (
            "steel table 1e6 N/m, not identified",
            vec![],
            Some(1e6),
            vec![
                (Target::Control, Sig::Kill),
                (Target::RobotIo, Sig::Stop),
                (Target::EgmReorder, Sig::Stop),
            ],
        ),
        (
            "soft pad 5e3 N/m, not identified",
            vec![],
            Some(5e3),
            vec![(Target::Force, Sig::Kill), (Target::FtBox, Sig::Stop)],
        ),
        (
            "3x sensor noise, 2 ms EGM jitter",
            vec![noisy, "sim.egm.jitter_ms=2.0"],
            None,
            vec![
                (Target::Sensor, Sig::Kill),
                (Target::Kinematics, Sig::Stop),
                (Target::EgmLoss, Sig::Stop),
            ],
        ),
    ];
    let mut rows = Vec::new();
    for (world, settings, stiffness, ci_cases) in worlds {
        let mut set = vec!["sim.scenario=\"scenarios/table-contact.toml\""];
        set.extend(settings);
        let c = TestCell::start("faultworld", &set);
        let s = up_all(&c).await;
        if let Some(k) = stiffness {
            let key = format!("cell/{}/sim/rpc/scenario", c.cell.id);
            cell::cli::request(
                &s,
                &key,
                Some(json!({ "set": { "surfaces.0.stiffness_n_per_m": k } }).to_string()),
                Duration::from_secs(3),
            )
            .await
            .unwrap_or_else(|e| panic!("{world}: scenario: {e}"));
        }
        let tap = Tap::start(&s, &c).await;
        let mut list = if full { cases(Mode::Press) } else { ci_cases };
        if full {
            list.extend([
                (Target::EgmLoss, Sig::Stop),
                (Target::EgmReorder, Sig::Stop),
            ]);
        }
        if let Ok(only) = std::env::var("FAULTS_ONLY") {
            list.retain(|(t, sig)| {
                t.name().contains(&only) || fault_name(*t, *sig).contains(&only)
            });
        }
        for (t, sig) in list {
            eprintln!("== world: {world}");
            tap.clear();
            let row = run_case(&s, &c, &tap, Mode::Press, t, sig).await;
            rows.push(json!({ "world": world, "row": row }));
        }
    }
    let path = std::env::temp_dir().join(format!("cell-faults-worlds-{}.json", std::process::id()));
    let _ = std::fs::write(&path, serde_json::to_string_pretty(&rows).unwrap());
    eprintln!("rows: {}", path.display());
}

/// The F/T box's values gone wrong and EGM loss, during the sliding press and while guiding
/// (issue 23 item 2). The box runs its calibrated float format here (`sensor.sri.mode =
/// "calibrated"`, the SRI box's mode E), the only one that can carry a NaN. Saturation, NaN and
/// a spike must end the motion on the force service's flag (its reason in control's status)
/// and hold; a glitch under the spike threshold and the force limit, a slow zero drift beyond
/// the tare and 30 % EGM loss are ridden through, the force
/// bounded — the drift shifts the true force by the drift (nothing on the cell can tell a
/// drifting zero from a changing contact force while pressing), which the row shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_faults_in_force_modes_end_or_ride_through_bounded() {
    let _cell = tests::cell_lock();
    let mut rows = Vec::new();
    for (mode, scenario) in [
        (Mode::Press, "scenarios/table-contact.toml"),
        (Mode::Guide, "scenarios/lead-through.toml"),
    ] {
        let sc = format!("sim.scenario=\"{scenario}\"");
        let c = TestCell::start("faultdevice", &[&sc, "sensor.sri.mode=\"calibrated\""]);
        let s = up_all(&c).await;
        let tap = Tap::start(&s, &c).await;
        for t in [
            Target::FtSaturated,
            Target::FtNan,
            Target::FtSpike,
            Target::FtGlitch,
            Target::FtDrift,
            Target::EgmLoss,
            Target::EgmReorder,
        ] {
            if std::env::var("FAULTS_ONLY").is_ok_and(|o| !fault_name(t, Sig::Stop).contains(&o)) {
                continue;
            }
            tap.clear();
            let before = statuses(&s, &c.cell).await.unwrap();
            rows.push(run_case(&s, &c, &tap, mode, t, Sig::Stop).await);
            if t == Target::EgmReorder {
                // The fault reached robot-io: the simulated network reordered and duplicated
                // datagrams, and robot-io took them for late and duplicate ones (resent the
                // last reference, no supervisor step) — not new cycles.
                let after = statuses(&s, &c.cell).await.unwrap();
                let grew = |svc: &str, key: &str| {
                    let n = |v: &std::collections::BTreeMap<String, Value>| {
                        v.get(svc)
                            .map_or(0, |x| x["detail"]["egm"][key].as_u64().unwrap_or(0))
                    };
                    n(&after) - n(&before)
                };
                let (reordered, duplicated) = (grew("sim", "reordered"), grew("sim", "duplicated"));
                let (late, dups) = (grew("robot-io", "late"), grew("robot-io", "duplicates"));
                eprintln!(
                    "reordering: sim reordered {reordered}, duplicated {duplicated}; \
                     robot-io late {late}, duplicates {dups}"
                );
                assert!(
                    reordered >= 20 && duplicated >= 20,
                    "the fault did not happen: {reordered} reordered, {duplicated} duplicated"
                );
                assert!(
                    late >= 5 && dups >= 5,
                    "robot-io did not see the late or duplicate datagrams: {late}, {dups}"
                );
            }
            if t == Target::FtDrift {
                // At rest and off any surface, the drifted zero reads as a 5 N contact: the
                // tare refuses it (the drift is seen at rest, with its reason); the box is
                // power-cycled (its zero back), as a technician would.
                let (ok, _, err) = c.cli_repeat_after_stall(&[
                    "move", "350", "0", "260", "0", "0", "1", "0", "--wait",
                ]);
                assert!(ok, "move off: {err}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                let (ok, out, err) = c.cli(&["tare"]);
                eprintln!("tare after the drift: ok {ok}: {out} {err}");
                assert!(!ok, "a tare took the drifted zero in as bias: {out}");
                tests::sim_fault(&s, &c, json!({ "sensor_unplugged": true })).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                tests::sim_fault(&s, &c, json!({ "sensor_unplugged": false })).await;
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
        }
    }
    write_rows("device", &rows);
}

/// The PC side of the two-host test's veth pair, for [`inject`].
static LINK: Mutex<Option<String>> = Mutex::new(None);
/// The two-host test's emulated (delaying, lossy) link, for [`inject`].
static EMU: Mutex<Option<Arc<tests::emulink::EmuLink>>> = Mutex::new(None);

/// The Raspberry Pi as a network namespace joined to this host (the PC) by a veth pair;
/// removed on drop.
struct PiHost {
    ns: String,
    pc_dev: String,
    pc_ip: String,
}

impl PiHost {
    fn create() -> Result<PiHost, String> {
        let id = std::process::id() % 10_000;
        let net = 20 + std::process::id() % 200;
        let ns = format!("cellpi{id}");
        let (pc_dev, pi_dev) = (format!("vpc{id}"), format!("vpi{id}"));
        let (pc_ip, pi_ip) = (format!("10.77.{net}.1"), format!("10.77.{net}.2"));
        ip(&["netns", "add", &ns])?;
        let host = PiHost {
            ns: ns.clone(),
            pc_dev: pc_dev.clone(),
            pc_ip: pc_ip.clone(),
        };
        ip(&[
            "link", "add", &pc_dev, "type", "veth", "peer", "name", &pi_dev,
        ])?;
        ip(&["link", "set", &pi_dev, "netns", &ns])?;
        ip(&["addr", "add", &format!("{pc_ip}/24"), "dev", &pc_dev])?;
        ip(&["link", "set", &pc_dev, "up"])?;
        let in_ns = |args: &[&str]| {
            let mut v = vec!["netns", "exec", ns.as_str(), "ip"];
            v.extend_from_slice(args);
            ip(&v)
        };
        in_ns(&["addr", "add", &format!("{pi_ip}/24"), "dev", &pi_dev])?;
        in_ns(&["link", "set", &pi_dev, "up"])?;
        in_ns(&["link", "set", "lo", "up"])?;
        Ok(host)
    }
}

impl Drop for PiHost {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.pc_dev]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// One two-host case: a cell on the PC, its sensor service in namespace `ns` reaching the
/// router and the F/T box at `pc_ip`, the link fault `target` during `mode`; afterwards the
/// sensor must have rejoined by itself (an operator's tare over it works).
async fn two_host_case(ns: &str, pc_ip: &str, mode: Mode, target: Target) -> Row {
    let scenario = match mode {
        Mode::Press => "scenarios/table-contact.toml",
        Mode::Guide => "scenarios/lead-through.toml",
    };
    let port = tests::free_port();
    let sri = tests::free_port();
    let router = format!("tcp/{pc_ip}:{port}");
    let sets = [
        format!("sim.scenario=\"{scenario}\""),
        format!("cell.router=\"{router}\""),
        "cell.zenoh_config=\"deploy/zenoh/router.json5\"".to_string(),
        "launcher.services=[\"sim\",\"robot-io\",\"kinematics\",\"control\",\"force\"]".to_string(),
        format!("sim.sri.bind=\"{pc_ip}:{sri}\""),
        format!("sensor.sri.address=\"{pc_ip}:{sri}\""),
    ];
    let set_refs: Vec<&str> = sets.iter().map(String::as_str).collect();
    let mut c = TestCell::start("twohost", &set_refs);
    c.cell.router = router.clone();
    // The sensor service on the Pi.
    let logf = std::fs::OpenOptions::new()
        .append(true)
        .open(&c.log)
        .unwrap();
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(tests::bin_dir().join("cell"))
        .current_dir(repo_root())
        .args(["--config", "deploy/config/sim.toml"]);
    for x in &c.sets {
        cmd.arg("--set").arg(x);
    }
    cmd.args([
        "--zenoh-config",
        "deploy/zenoh/pi-sensor.json5",
        "--connect",
    ])
    .arg(&router)
    .args(["service", "sensor"])
    .stdin(std::process::Stdio::null())
    .stdout(logf.try_clone().unwrap())
    .stderr(logf)
    .env("RUST_LOG", "info,zenoh=warn");
    let _pi_sensor = KillOnDrop(cmd.spawn().expect("start the Pi's sensor"));
    let s = up_all(&c).await;
    let tap = Tap::start(&s, &c).await;
    let row = run_case(&s, &c, &tap, mode, target, Sig::Stop).await;
    // The sensor rejoined by itself: the next operator command (a tare) works over it.
    ready(&s, &c).await;
    let (ok, out, err) = c.cli(&["tare"]);
    assert!(ok, "tare over the restored link: {out} {err}");
    c.terminate(Duration::from_secs(5));
    row
}

/// Two hosts over a real link (issue 23 item 4): the sensor service runs on the "Raspberry
/// Pi" — a network namespace of its own, joined to the PC by a veth pair — and reaches the
/// router and its F/T box over TCP on that link, with the shipped zenoh configs
/// (`deploy/zenoh/pi-sensor.json5` on the Pi, `router.json5` on the PC). During the sliding
/// press and during guiding the link is cut for 3 s (longer than the 2 s zenoh lease): control
/// leaves the force mode and robot-io holds as for any lost sensor, the force stays bounded,
/// and once the link is back the sensor rejoins by itself while the cell waits for the
/// operator (the next case's commands). Skipped, saying so, where network namespaces cannot
/// be made (no `ip`, no CAP_NET_ADMIN). Then the same two cases with the link delaying every
/// packet 20 ms and losing 5 % each way for 3 s (`tc netem delay 20ms loss 5%`, emulated in
/// user space by [`tests::emulink`] because this kernel has no `sch_netem`): the sensor's
/// wrench goes stale in TCP's retransmission stalls, so the same hold must follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_a_cut_or_lossy_link_to_the_sensor_node_holds_and_the_sensor_rejoins() {
    let _cell = tests::cell_lock();
    let pi = match PiHost::create() {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "SKIPPED: the two-host test needs network namespaces (ip netns, veth; root or \
                 CAP_NET_ADMIN): {e}"
            );
            return;
        }
    };
    *LINK.lock().unwrap() = Some(pi.pc_dev.clone());
    let mut rows = Vec::new();
    for mode in [Mode::Press, Mode::Guide] {
        rows.push(two_host_case(&pi.ns, &pi.pc_ip, mode, Target::LinkCut).await);
    }
    drop(pi);
    // 20 ms delay and 5 % loss (issue 23 item 4's `tc netem delay 20ms loss 5%`). This
    // kernel has no `sch_netem`, so the link is emulated in user space (tests::emulink): two
    // TUN devices, packets moved between them late and with random loss — real IP packets,
    // so TCP, zenoh and the SRI connection see real retransmissions and stalls.
    match tests::emulink::EmuLink::create() {
        Ok(link) => {
            let link = Arc::new(link);
            *EMU.lock().unwrap() = Some(link.clone());
            for mode in [Mode::Press, Mode::Guide] {
                rows.push(two_host_case(&link.ns, &link.pc_ip, mode, Target::LinkImpaired).await);
            }
            *EMU.lock().unwrap() = None;
        }
        Err(e) => eprintln!("SKIPPED: 20 ms delay and 5 % loss: no emulated link: {e}"),
    }
    write_rows("twohost", &rows);
}
