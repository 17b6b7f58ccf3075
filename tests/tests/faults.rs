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
//! 2. **The force stays bounded**: pressing, the true contact force (surfaces on the tool) never
//!    exceeds the task's `max_force_n` (50 N) during and after the fault. Guiding, what the cell
//!    bounds is the arm, not the operator's pull (a person can pull a held arm as hard as they
//!    like): the operator's hand here can pull up to 200 N (`hand.max_force_n`; the scenario's
//!    30 N default could never reach the guide's 60 N ceiling), and on the IRC5's joint
//!    reference (`SimTruth.q_ref_rad`, as TCP through the arm's FK with the mounted tool):
//!    - **speed**: from 0.3 s before the fault (the pull at its speed) to the case's end, the
//!      reference TCP never moves faster than the guide's cap (0.25 m/s) over any 40 ms;
//!    - **hold**: from robot-io's hold on (its first non-`Active` state after the fault)
//!      robot-io never returns to `Active`, and 150 ms after it (braking a controlled or
//!      protective end; a dead or frozen robot-io: 60 ms after the fault, the datagram in
//!      flight) the reference stands still but for one step — robot-io or the IRC5's new
//!      session re-holding at the measured position. (A thawed robot-io that reports `Active`
//!      while it drains the EGM datagrams queued during its own freeze — within 200 ms of its
//!      return, the reference still — is reported as a figure, not failed: seen once, 26
//!      cycles, the IRC5's session already timed out);
//!    - **the ceiling**: once the hand's true force exceeds 60 N, robot-io holds within 40 ms
//!      (10 robot cycles: the force sample's way to control and its protective stop to
//!      robot-io). One guide case makes the operator pull over it (a yank with a stiff grip),
//!      so the rule is exercised, not only vacuously true.
//! 3. **No reference step above one cycle at the speed limit**: between two consecutive
//!    robot cycles the IRC5's joint reference moves at most `max_speed_j · Δt` on every joint.
//! 4. **Nothing resumes by itself**: once the fault is over (the process restarted or thawed,
//!    the box back), control is idle, robot-io is not `Active` and the joints stay still for
//!    1 s; the next case's operator commands (move, tare, task) are the recovery.
//!
//! Every case writes a row (safe state, time to reach it, peak force, recovery) to
//! `$TMPDIR/cell-faults-<pid>.json`; docs/reliability.md quotes those rows. A failing case does
//! not stop its test: every case runs, and the test fails once at the end listing every
//! failed case (each one's full message is printed when it fails).
//!
//! The controller's own faults run the same way: it leaves EGM (RAPID stopped) or its motors go
//! off, for 1 s.
//!
//! **Tiers** (`tests::full_tier()`, issue 40). The full tier (`CELL_TIER=full`, `.ci/full`)
//! runs the whole matrix, as before the tiers with `FAULTS_FULL=1`: every process × signal in
//! both modes and the controller's two faults in both modes (28), the launcher killed and
//! frozen (2), every press case on each of the three untuned worlds (48), every device fault in
//! both modes (14), the two-host cut and lossy link in both modes (4) — plus the guide's
//! ceiling case (1). The per-change tier (the default: `.ci/run`, a developer's `cargo test`)
//! keeps one case per fault class and mode ([`process_list`], [`world_list`],
//! [`device_list`], [`launcher_list`], [`two_host_list`]): 22 cases, 179 s from the cell lock
//! on this 2-core machine (2026-12-05; the lock waits for other tests' cells). Knobs: `FAULTS_FULL=1` is kept as
//! this file's alias of `CELL_TIER=full`; `FAULTS_SHORT` is folded into the per-change tier
//! (ignored, said so); `FAULTS_ONLY=<text>` keeps, within the tier, only the cases whose
//! process or fault names contain the text (every test of this file).
//!
//! Each cell's robot starts where its cases begin (`sim.egm.initial_q_deg`, by the arm's IK)
//! instead of travelling there from the config's home pose (5–6 s a cell), and a press starts
//! 0.5 mm above the table (`PRESS_START_Z_MM`; the task's approach to an unknown surface is
//! 0.2 mm/s, so 1 mm cost 5 s of approach a case). Fixed waits are events awaited with a
//! deadline where there is one to await (the arm still before a tare, the hold after a kill,
//! the sensor back after a power cycle); the remaining fixed times are what a case is made of
//! (a freeze's 1 s, the 1 s nothing may move, the press's 2.5 s from touch to 0.5 s into its
//! slide, the pull's first 0.7 s) and the killed launcher's 1.5 s (no bus to await on).
#![allow(clippy::unwrap_used)]

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, OnceLock},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use common::{
    clock::mono_ns,
    codec,
    msg::{
        JointCommand, JointState, SafetyLevel, SafetyState, SimTruth, WrenchEstimate, WrenchFault,
    },
    topic,
};
use nalgebra::Vector3;
use serde_json::{json, Value};
use tests::{emulink::ip, repo_root, statuses, up_all, wait_for, TestCell};

/// The press task's force limit (the cell's `[control.hybrid.limits] max_force_n`).
const PRESS_MAX_FORCE_N: f64 = 50.0;
/// The guide's protective ceiling (`[control.guide] max_force_n`).
const GUIDE_MAX_FORCE_N: f64 = 60.0;
/// The guide's speed cap (`[control.guide] max_speed_m_s`, ISO 10218-1 reduced speed).
const GUIDE_MAX_SPEED_M_S: f64 = 0.25;
/// How hard the simulated operator can pull (`hand.max_force_n`): above the ceiling.
const HAND_MAX_FORCE_N: f64 = 200.0;
/// Once the hand's force is over the ceiling, robot-io holds within this (10 robot cycles).
const CEILING_REACTION: Duration = Duration::from_millis(40);
/// After robot-io's hold, the reference may still brake this long (a controlled or protective
/// end: from ≤ 0.25 m/s within the joint acceleration limits).
const HOLD_BRAKING: Duration = Duration::from_millis(150);
/// How long a frozen process or a hung box stays so.
const FREEZE: Duration = Duration::from_millis(1000);
/// Where a press starts (TCP z, mm): its 5 mm ball tip 0.5 mm above the table (z = 200 mm).
const PRESS_START_Z_MM: f64 = 205.5;
/// Off the table, where a press case starts from.
const PRESS_ABOVE_MM: [f64; 3] = [350.0, 0.0, 230.0];
/// Where a pull starts.
const GUIDE_START_MM: [f64; 3] = [400.0, -150.0, 400.0];

type Log<T> = Arc<Mutex<Vec<(u64, T)>>>;
type Sub = zenoh::pubsub::Subscriber<()>;

/// Records a broken rule (a case checks every rule, then fails with all it broke).
macro_rules! check {
    ($bad:ident, $cond:expr, $($msg:tt)+) => {{
        let held: bool = $cond;
        if !held {
            $bad.push(format!($($msg)+));
        }
    }};
}

/// A lock that a panicking case cannot poison for the next one.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn tap<T: serde::de::DeserializeOwned + Send + 'static>(
    s: &zenoh::Session,
    key: String,
    log: Log<T>,
) -> Sub {
    s.declare_subscriber(key)
        .callback(move |smp| {
            if let Ok(m) = codec::decode::<T>(&smp.payload().to_bytes()) {
                lock(&log).push((mono_ns(), m));
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
    /// The newest wrench estimate's fault and its arrival (not logged: 1 kHz).
    wrench: Arc<Mutex<Option<(u64, WrenchFault)>>>,
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
        let wrench: Arc<Mutex<Option<(u64, WrenchFault)>>> = Arc::default();
        let newest = wrench.clone();
        let wrench_sub = s
            .declare_subscriber(topic::WRENCH_ESTIMATE.key(id))
            .callback(move |smp| {
                if let Ok(m) = codec::decode::<WrenchEstimate>(&smp.payload().to_bytes()) {
                    *lock(&newest) = Some((mono_ns(), m.fault));
                }
            })
            .await
            .unwrap();
        let subs = vec![
            tap(s, topic::JOINT_COMMAND.key(id), cmds.clone()).await,
            tap(s, topic::SAFETY_STATE.key(id), safety.clone()).await,
            tap(s, topic::SIM_TRUTH.key(id), truth.clone()).await,
            tap(s, topic::JOINT_STATE.key(id), joints.clone()).await,
            wrench_sub,
        ];
        Tap {
            cmds,
            safety,
            truth,
            joints,
            wrench,
            _subs: subs,
        }
    }

    fn clear(&self) {
        lock(&self.cmds).clear();
        lock(&self.safety).clear();
        lock(&self.truth).clear();
        lock(&self.joints).clear();
    }

    fn truth_now(&self) -> Option<SimTruth> {
        lock(&self.truth).last().map(|x| x.1)
    }

    /// Waits until the true TCP has moved less than 20 µm over the last 100 ms (0.2 mm/s:
    /// a tenth of the force service's "still" bound for a tare), at most `timeout`.
    async fn await_still(&self, timeout: Duration) -> bool {
        wait_for(timeout, || async {
            let now = mono_ns();
            let tr = since(&self.truth, now.saturating_sub(100_000_000));
            let (a, b) = (tr.first()?, tr.last()?);
            let spread = tr
                .iter()
                .map(|x| {
                    (Vector3::from(x.1.tcp_in_base_m) - Vector3::from(a.1.tcp_in_base_m)).norm()
                })
                .fold(0.0, f64::max);
            (tr.len() >= 10 && b.0 - a.0 > 80_000_000 && spread < 2e-5).then_some(())
        })
        .await
        .is_some()
    }
}

fn since<T: Clone>(log: &Log<T>, from_ns: u64) -> Vec<(u64, T)> {
    lock(log)
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
    /// Guiding only: the operator yanks — grips hard (3000 N/m), pulls with stiff muscles
    /// (3000 N/m) and hurries along (0.5 m/s): the hand's force goes over the guide's ceiling.
    HandOverCeiling,
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
            Target::HandOverCeiling => "operator's hand",
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

// ---- The tiers' case lists ----

/// The full tier: `CELL_TIER=full`, or this file's older `FAULTS_FULL=1`.
fn full() -> bool {
    static SAID: std::sync::Once = std::sync::Once::new();
    if std::env::var_os("FAULTS_SHORT").is_some() {
        SAID.call_once(|| {
            eprintln!("FAULTS_SHORT is ignored: the per-change tier (the default) replaces it");
        });
    }
    tests::full_tier() || std::env::var("FAULTS_FULL").is_ok_and(|v| v == "1")
}

/// `FAULTS_ONLY=<text>`: only the cases whose process or fault names contain the text.
fn selected(target: Target, sig: Sig) -> bool {
    std::env::var("FAULTS_ONLY").map_or(true, |o| {
        target.name().contains(&o) || fault_name(target, sig).contains(&o)
    })
}

/// Every process × signal, then the controller's two faults (14): a mode's full list.
fn every_process_case() -> Vec<(Target, Sig)> {
    let mut v = Vec::new();
    for t in [
        Target::Sensor,
        Target::Force,
        Target::Control,
        Target::Kinematics,
        Target::RobotIo,
        Target::FtBox,
    ] {
        for sig in [Sig::Kill, Sig::Stop] {
            v.push((t, sig));
        }
    }
    v.push((Target::EgmStopped, Sig::Stop));
    v.push((Target::MotorsOff, Sig::Stop));
    v
}

/// The process tests' cases. Per-change: a process killed and another frozen, and one of the
/// controller's faults, in each mode — every process once over the two modes and the untuned
/// worlds ([`world_list`]: robot-io frozen, the box hung); the F/T box dies while guiding.
/// Guiding ends with the operator pulling over the ceiling, in both tiers.
fn process_list(mode: Mode, full: bool) -> Vec<(Target, Sig)> {
    let mut v = if full {
        every_process_case()
    } else {
        match mode {
            Mode::Press => vec![
                (Target::Control, Sig::Kill),
                (Target::Kinematics, Sig::Stop),
                (Target::EgmStopped, Sig::Stop),
            ],
            // Motors off (issue 43: RAPID stops, the operator starts it again); mid-press in
            // the full tier.
            Mode::Guide => vec![
                (Target::Force, Sig::Kill),
                (Target::Sensor, Sig::Stop),
                (Target::FtBox, Sig::Kill),
                (Target::MotorsOff, Sig::Stop),
            ],
        }
    };
    if mode == Mode::Guide {
        v.push((Target::HandOverCeiling, Sig::Stop));
    }
    v
}

/// The untuned worlds' press cases: full, every press case and the EGM network faults on each
/// (16); per-change, one a world — the frozen robot-io on steel (the IRC5 keeps its last
/// reference against a 10⁶ N/m table), the hung box on the soft pad (the slowest hold: the
/// blind back-off), the killed sensor under 3× noise and 2 ms jitter.
fn world_list(world: usize, full: bool) -> Vec<(Target, Sig)> {
    if full {
        let mut v = every_process_case();
        v.extend([
            (Target::EgmLoss, Sig::Stop),
            (Target::EgmReorder, Sig::Stop),
        ]);
        v
    } else {
        match world {
            0 => vec![(Target::RobotIo, Sig::Stop)],
            1 => vec![(Target::FtBox, Sig::Stop)],
            _ => vec![(Target::Sensor, Sig::Kill)],
        }
    }
}

/// Every device fault (7).
const DEVICE_FAULTS: [Target; 7] = [
    Target::FtSaturated,
    Target::FtNan,
    Target::FtSpike,
    Target::FtGlitch,
    Target::FtDrift,
    Target::EgmLoss,
    Target::EgmReorder,
];

/// The device faults: full, all seven in each mode; per-change, one a class and mode — values
/// that end the motion (press: a spike; guiding: NaN), values ridden through (press: a glitch;
/// guiding: the drift, with its refused tare at rest), the EGM network (press: reordering and
/// duplicates, with robot-io's counters; guiding: loss).
fn device_list(mode: Mode, full: bool) -> Vec<Target> {
    if full {
        DEVICE_FAULTS.to_vec()
    } else {
        match mode {
            Mode::Press => vec![Target::FtSpike, Target::FtGlitch, Target::EgmReorder],
            Mode::Guide => vec![Target::FtNan, Target::FtDrift, Target::EgmLoss],
        }
    }
}

/// The launcher: full, frozen and killed; per-change, killed (the router and every service
/// gone, a new `cell up`).
fn launcher_list(full: bool) -> Vec<Sig> {
    if full {
        vec![Sig::Stop, Sig::Kill]
    } else {
        vec![Sig::Kill]
    }
}

/// The two-host cases: full, the cut and the lossy link in both modes; per-change, the cut
/// during the press and the lossy link while guiding.
fn two_host_list(full: bool) -> Vec<(Mode, Target)> {
    if full {
        vec![
            (Mode::Press, Target::LinkCut),
            (Mode::Guide, Target::LinkCut),
            (Mode::Press, Target::LinkImpaired),
            (Mode::Guide, Target::LinkImpaired),
        ]
    } else {
        vec![
            (Mode::Press, Target::LinkCut),
            (Mode::Guide, Target::LinkImpaired),
        ]
    }
}

/// This run's lists: the tier's, then `FAULTS_ONLY`.
fn process_cases(mode: Mode) -> Vec<(Target, Sig)> {
    let mut v = process_list(mode, full());
    v.retain(|(t, sig)| selected(*t, *sig));
    v
}

fn world_cases(world: usize) -> Vec<(Target, Sig)> {
    let mut v = world_list(world, full());
    v.retain(|(t, sig)| selected(*t, *sig));
    v
}

fn device_cases(mode: Mode) -> Vec<Target> {
    let mut v = device_list(mode, full());
    v.retain(|t| selected(*t, Sig::Stop));
    v
}

fn launcher_cases() -> Vec<Sig> {
    let mut v = launcher_list(full());
    v.retain(|sig| {
        std::env::var("FAULTS_ONLY").map_or(true, |o| {
            "launcher".contains(&o) || fault_name(Target::Sensor, *sig).contains(&o)
        })
    });
    v
}

fn two_host_cases() -> Vec<(Mode, Target)> {
    let mut v = two_host_list(full());
    v.retain(|(_, t)| selected(*t, Sig::Stop));
    v
}

/// The full tier is the whole matrix as it ran before the tiers (with `FAULTS_FULL=1`: 96
/// cases) plus the guide's ceiling case; the per-change tier is part of it and keeps, in each
/// mode, a process killed and another frozen, a controller fault, and a device fault of each
/// class; every process is faulted somewhere in it.
#[test]
fn the_full_tier_is_the_whole_matrix_and_the_per_change_tier_a_part_of_it() {
    let count = |full: bool| {
        let p: usize = [Mode::Press, Mode::Guide]
            .iter()
            .map(|m| process_list(*m, full).len() + device_list(*m, full).len())
            .sum();
        let w: usize = (0..3).map(|i| world_list(i, full).len()).sum();
        p + w + launcher_list(full).len() + two_host_list(full).len()
    };
    // 28 process + 2 launcher + 48 worlds + 14 device + 4 two-host, + the ceiling.
    assert_eq!(count(true), 96 + 1);
    for mode in [Mode::Press, Mode::Guide] {
        assert_eq!(
            process_list(mode, true),
            every_process_case()
                .into_iter()
                .chain((mode == Mode::Guide).then_some((Target::HandOverCeiling, Sig::Stop)))
                .collect::<Vec<_>>()
        );
        assert_eq!(device_list(mode, true), DEVICE_FAULTS.to_vec());
        let short = process_list(mode, false);
        assert!(short.iter().all(|c| process_list(mode, true).contains(c)));
        let killed: Vec<Target> = short
            .iter()
            .filter(|(t, s)| *s == Sig::Kill && *t != Target::FtBox)
            .map(|x| x.0)
            .collect();
        let frozen: Vec<Target> = short
            .iter()
            .filter(|(t, s)| {
                *s == Sig::Stop
                    && matches!(
                        t,
                        Target::Sensor
                            | Target::Force
                            | Target::Control
                            | Target::Kinematics
                            | Target::RobotIo
                    )
            })
            .map(|x| x.0)
            .collect();
        assert!(
            !killed.is_empty() && !frozen.is_empty(),
            "{mode:?}: {short:?}"
        );
        assert!(
            killed.iter().all(|k| !frozen.contains(k)),
            "{mode:?}: {short:?}"
        );
        assert!(
            short
                .iter()
                .any(|(t, _)| matches!(t, Target::EgmStopped | Target::MotorsOff)),
            "{mode:?}: no controller fault"
        );
        // One device fault a class: ends the motion, ridden through, the EGM network.
        let dev = device_list(mode, false);
        assert!(dev.iter().all(|t| DEVICE_FAULTS.contains(t)));
        for class in [
            &[Target::FtSaturated, Target::FtNan, Target::FtSpike][..],
            &[Target::FtGlitch, Target::FtDrift][..],
            &[Target::EgmLoss, Target::EgmReorder][..],
        ] {
            assert_eq!(
                dev.iter().filter(|t| class.contains(t)).count(),
                1,
                "{mode:?}: {dev:?}"
            );
        }
    }
    for i in 0..3 {
        let full = world_list(i, true);
        assert_eq!(full.len(), 16);
        let short = world_list(i, false);
        assert!(!short.is_empty() && short.iter().all(|c| full.contains(c)));
    }
    assert_eq!(launcher_list(true), vec![Sig::Stop, Sig::Kill]);
    assert!(launcher_list(false).len() == 1);
    let two = two_host_list(false);
    assert!(two.iter().all(|c| two_host_list(true).contains(c)));
    assert!(two.iter().any(|(_, t)| *t == Target::LinkCut));
    assert!(two.iter().any(|(_, t)| *t == Target::LinkImpaired));
    assert_ne!(two[0].0, two[1].0);
    // Every process and the box are faulted in the per-change tier.
    let mut hit: Vec<Target> = Vec::new();
    for mode in [Mode::Press, Mode::Guide] {
        hit.extend(process_list(mode, false).iter().map(|x| x.0));
    }
    for i in 0..3 {
        hit.extend(world_list(i, false).iter().map(|x| x.0));
    }
    for t in [
        Target::Sensor,
        Target::Force,
        Target::Control,
        Target::Kinematics,
        Target::RobotIo,
        Target::FtBox,
    ] {
        assert!(hit.contains(&t), "{t:?} never faulted per change");
    }
}

// ---- Every case runs; the test fails once, at the end ----

/// A future whose panic is caught and returned as its message.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = &mut self.get_mut().0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(p) => Poll::Ready(Err(p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic without a message".into()))),
        }
    }
}

/// Runs `fut` to its end or its panic.
async fn caught<T>(fut: impl Future<Output = T>) -> Result<T, String> {
    CatchUnwind(Box::pin(fut)).await
}

/// The failed cases of a test, and its time from the cell lock on.
struct Failures {
    ran: usize,
    failed: Vec<(String, String)>,
    locked_at: Instant,
}

/// Takes the cell lock; the test's own time starts once it holds it (another test's cell may
/// hold the lock for minutes).
fn lock_cell() -> (tests::CellLock, Failures) {
    let t = Instant::now();
    let lock = tests::cell_lock();
    eprintln!("cell lock taken after {:.1} s", t.elapsed().as_secs_f64());
    let failures = Failures {
        ran: 0,
        failed: Vec::new(),
        locked_at: Instant::now(),
    };
    (lock, failures)
}

impl Failures {
    /// Records one case's outcome; Some(its value) when it passed.
    fn record<T>(&mut self, label: &str, r: Result<T, String>) -> Option<T> {
        self.ran += 1;
        match r {
            Ok(v) => Some(v),
            Err(msg) => {
                eprintln!("== FAILED: {label}");
                self.failed.push((label.to_string(), msg));
                None
            }
        }
    }

    /// Records a cell's setup: Some(it) when it worked, else its failure (not a case).
    fn setup<T>(&mut self, what: &str, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(msg) => {
                eprintln!("== FAILED: {what}");
                self.failed.push((what.to_string(), msg));
                None
            }
        }
    }

    /// Fails the test when any case failed, listing each (its message's first 600 characters:
    /// the whole message, with the cell's log, was printed when it failed).
    fn finish(self) {
        eprintln!(
            "{} cases, {} failed, {:.1} s from the cell lock",
            self.ran,
            self.failed.len(),
            self.locked_at.elapsed().as_secs_f64()
        );
        if self.failed.is_empty() {
            return;
        }
        let list: Vec<String> = self
            .failed
            .iter()
            .map(|(label, msg)| {
                let short: String = msg.chars().take(600).collect();
                let more = if short.len() < msg.len() {
                    " […]"
                } else {
                    ""
                };
                format!("- {label}: {short}{more}")
            })
            .collect();
        panic!(
            "{} of {} cases failed:\n{}",
            self.failed.len(),
            self.ran,
            list.join("\n")
        );
    }
}

// ---- The cell, its faults and motions ----

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

/// The configured arm with its mounted tool (for the reference's TCP).
fn arm() -> &'static kinematics::Arm {
    static ARM: OnceLock<kinematics::Arm> = OnceLock::new();
    ARM.get_or_init(|| {
        let cfg = repo_root().join("deploy/config/sim.toml");
        cell::leadexp::set_config(Some(&cfg), &[]);
        cell::leadexp::arm_and_poses()
            .expect("the configured arm")
            .0
    })
}

/// The reference TCP (m, base) of joints `q`.
fn tcp_of(q: &[f64; 6]) -> Option<Vector3<f64>> {
    arm().fk(q).ok().map(|t| t.translation.vector)
}

/// `sim.egm.initial_q_deg` putting the TCP at `xyz_mm`, the tool pointing down (the IK
/// solution nearest the config's home joints): the cell starts where its cases begin.
fn start_at(xyz_mm: [f64; 3]) -> String {
    let pose = kinematics::pose::pose_from_abb(xyz_mm, [0.0, 0.0, 1.0, 0.0]).unwrap();
    let home = [0.0, 0.0, 0.0, 0.0, 30f64.to_radians(), 0.0];
    let q = arm()
        .ik_nearest(&pose, &home)
        .unwrap_or_else(|e| panic!("no IK for the start pose {xyz_mm:?}: {e:?}"))
        .q;
    let deg: Vec<String> = q.iter().map(|v| format!("{:.9}", v.to_degrees())).collect();
    format!("sim.egm.initial_q_deg=[{}]", deg.join(", "))
}

/// Where a mode's cell starts.
fn start_of(mode: Mode) -> String {
    start_at(match mode {
        Mode::Press => PRESS_ABOVE_MM,
        Mode::Guide => GUIDE_START_MM,
    })
}

/// Sets scenario values at run time (`sim/rpc/scenario`).
async fn scenario(s: &zenoh::Session, c: &TestCell, body: Value) -> Value {
    let key = format!("cell/{}/sim/rpc/scenario", c.cell.id);
    cell::cli::request(s, &key, Some(body.to_string()), Duration::from_secs(3))
        .await
        .unwrap_or_else(|e| panic!("scenario {body}: {e}"))
}

/// A status detail's field as text ("-" when absent).
fn brief(st: &std::collections::BTreeMap<String, Value>, svc: &str, path: &[&str]) -> String {
    let mut v = st.get(svc).map_or(&Value::Null, |v| &v["detail"]);
    for k in path {
        v = &v[*k];
    }
    match v {
        Value::String(x) => x.clone(),
        Value::Null => "-".into(),
        x => x.to_string(),
    }
}

/// Waits until robot-io's first non-`Active` state since `from_ns` (at most `timeout`).
async fn await_hold(tap: &Tap, from_ns: u64, timeout: Duration) {
    let _ = wait_for(timeout, || async {
        since(&tap.safety, from_ns)
            .iter()
            .any(|(_, x)| x.level != SafetyLevel::Active)
            .then_some(())
    })
    .await;
}

/// Injects the fault and, for a freeze or a dead box, ends it after [`FREEZE`]. A killed
/// process is not waited for (the launcher restarts it; the case waits for its motion's end),
/// except while guiding, where the deadman is released when this returns: that waits for
/// robot-io's hold (at most [`FREEZE`]), so the hold seen is the fault's.
async fn inject(s: &zenoh::Session, c: &TestCell, tap: &Tap, mode: Mode, target: Target, sig: Sig) {
    let at = mono_ns();
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
        if target == Target::MotorsOff {
            // Motors off stopped RAPID; with the shipped MOC entry
            // (-do_not_restart_after_motors_off) motors on alone starts nothing: the operator
            // presses Start.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let rapid = tests::sim_rapid(s, c).await;
            assert_eq!(
                rapid.as_deref(),
                Some("stopped (MotorsOff)"),
                "motors on restarted the IRC5's program on its own"
            );
            tests::sim_program_start(s, c).await;
        }
        return;
    }
    if target == Target::HandOverCeiling {
        scenario(
            s,
            c,
            json!({ "set": {
                "hand.stiffness_n_per_m": 3000.0,
                "hand.muscle_stiffness_n_per_m": 3000.0,
                "hand.speed_m_s": 0.5,
            } }),
        )
        .await;
        await_hold(tap, at, FREEZE).await;
        return;
    }
    if target == Target::LinkCut {
        let dev = lock(&LINK).clone().expect("the two-host link");
        ip(&["link", "set", &dev, "down"]).expect("cut the link");
        tokio::time::sleep(Duration::from_secs(3)).await;
        ip(&["link", "set", &dev, "up"]).expect("restore the link");
        return;
    }
    if target == Target::LinkImpaired {
        let link = lock(&EMU).clone().expect("the emulated two-host link");
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
            if mode == Mode::Guide {
                await_hold(tap, at, FREEZE).await;
            }
        }
        Sig::Stop => {
            signal(pid, libc::SIGSTOP);
            tokio::time::sleep(FREEZE).await;
            signal(pid, libc::SIGCONT);
        }
    }
}

/// Moves the tool (pointing down) to `xyz_mm` and tares there once it is still. A refused
/// tare is tried again (reported) for up to 20 s.
async fn place_and_tare(c: &TestCell, tap: &Tap, xyz_mm: [f64; 3]) {
    let [x, y, z] = xyz_mm.map(|v| v.to_string());
    let (ok, _, err) =
        c.cli_repeat_after_stall(&["move", &x, &y, &z, "0", "0", "1", "0", "--wait"]);
    assert!(ok, "move: {err}\n{}", c.log_text());
    let t0 = Instant::now();
    loop {
        tap.await_still(Duration::from_secs(3)).await;
        let (ok, out, err) = c.cli(&["tare"]);
        if ok {
            // The filter restarts from the new bias: the estimate is flagged until it settled.
            let tared = mono_ns();
            let usable = wait_for(Duration::from_secs(2), || async {
                lock(&tap.wrench)
                    .filter(|(t, f)| *t > tared && *f == WrenchFault::None)
                    .map(|_| ())
            })
            .await;
            assert!(
                usable.is_some(),
                "no usable wrench estimate after the tare: {:?}",
                *lock(&tap.wrench)
            );
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "tare never succeeded: {out} {err}"
        );
        tests::report(
            tests::Report::Retry,
            &format!(
                "tare at {xyz_mm:?} mm refused ({}); once more",
                err.trim().lines().last().unwrap_or("")
            ),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
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
            // A press that ends before it touched is started once more only when a proven
            // host stall ended it (reported); any other early end fails the case.
            for attempt in 0..2 {
                let [x, y, z] = PRESS_ABOVE_MM.map(|v| v.to_string());
                let (ok, _, err) =
                    c.cli_repeat_after_stall(&["move", &x, &y, &z, "0", "0", "1", "0", "--wait"]);
                assert!(ok, "{label}: move off the table: {err}");
                place_and_tare(c, tap, [350.0, 0.0, PRESS_START_Z_MM]).await;
                let out_dir = std::env::temp_dir().join(format!(
                    "faults-{}-{}",
                    label.replace([' ', '/'], "-"),
                    std::process::id()
                ));
                let mut cmd = c.command();
                cmd.arg("hybrid")
                    .arg(repo_root().join("tasks/press-table.toml"))
                    .args(["--json", "--out"])
                    .arg(&out_dir);
                let started = mono_ns();
                let run =
                    tokio::task::spawn_blocking(move || cmd.output().expect("run cell hybrid"));
                // Contact (or the task's end before it), then 2.5 s: the task's 2 s settle,
                // then 0.5 s into the 20 mm/s move along the table (its schedule, from the
                // first contact).
                let touched = wait_for(Duration::from_secs(20), || async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if run.is_finished() {
                        return Some(false);
                    }
                    tap.truth_now()
                        .filter(|t| t.contact_force_base_n[2].abs() > 5.0)
                        .map(|_| true)
                })
                .await;
                match touched {
                    Some(true) => {}
                    Some(false) => {
                        let out = run.await.unwrap();
                        let why = String::from_utf8_lossy(&out.stderr)
                            .lines()
                            .last()
                            .unwrap_or("")
                            .to_string();
                        let proof = if attempt > 0 {
                            Err("it was the second attempt".to_string())
                        } else if cell::stall::looks_like_stall(&why) {
                            c.proven_stall(&why, started)
                        } else {
                            Err("not a host stall's reason".to_string())
                        };
                        match proof {
                            Ok(proof) => {
                                // The aborted task wrote its trace: keep it beside the second.
                                let kept = cell::stall::keep_first_run(&out_dir)
                                    .map(|d| d.display().to_string())
                                    .unwrap_or_else(|e| format!("not kept: {e}"));
                                tests::report(
                                    tests::Report::Retry,
                                    &format!(
                                        "{label}: the press ended before it touched ({why}), \
                                         held by a proven host stall ({proof}); once more \
                                         (first attempt kept in {kept})"
                                    ),
                                );
                                ready(s, c).await;
                                continue;
                            }
                            Err(e) => panic!(
                                "{label}: the press ended before it touched: {why} (not \
                                 repeated: {e})\n{}",
                                c.log_text()
                            ),
                        }
                    }
                    None => panic!("{label}: the press never touched\n{}", c.log_text()),
                }
                tokio::time::sleep(Duration::from_millis(2500)).await;
                let t = tap.truth_now().unwrap();
                assert!(
                    t.in_contact,
                    "{label}: out of contact before the fault\n{}",
                    c.log_text()
                );
                return Motion::Press(run);
            }
            unreachable!("the second attempt returns or fails")
        }
        Mode::Guide => {
            place_and_tare(c, tap, GUIDE_START_MM).await;
            let asked = mono_ns();
            scenario(s, c, json!({ "set": { "hand.enabled": false } })).await;
            // The world without the hand, seen after the request.
            let seen = wait_for(Duration::from_secs(2), || async {
                since(&tap.truth, asked)
                    .iter()
                    .rev()
                    .find(|(_, t)| !t.hand_active)
                    .map(|x| x.1)
            })
            .await;
            let from = Vector3::from(
                seen.unwrap_or_else(|| panic!("{label}: no truth without the hand"))
                    .tcp_in_base_m,
            );
            let r = cell::lead::rpc(s, &c.cell, json!({ "guide": {} }))
                .await
                .unwrap_or_else(|e| panic!("{label}: guide: {e:#}"));
            let token = cell::lead::enable_token(&r).unwrap();
            let enable = cell::leadexp::hold_enable(s, &c.cell, token);
            // 0.15 m at 0.1 m/s from 0.3 s; the hand lets go 0.3 s after its path ends
            // (an operator feels the arm stop and lets go). The operator can pull harder than
            // the guide's ceiling (the scenario's 30 N clip could not).
            let mut spec = cell::leadexp::PullSpec::new(
                label,
                "admittance",
                Vector3::new(0.0, 1.0, 0.0),
                0.15,
            );
            spec.speed_m_s = 0.1;
            spec.release_after_s = 0.3;
            let mut req = cell::leadexp::hand_request(&from, &spec);
            req["set"]["hand.max_force_n"] = json!(HAND_MAX_FORCE_N);
            let reply = scenario(s, c, req).await;
            assert_eq!(
                reply["config"]["hand"]["max_force_n"].as_f64(),
                Some(HAND_MAX_FORCE_N),
                "{label}: the hand's force limit did not take: {}",
                reply["config"]["hand"]
            );
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
    /// Guiding: the reference TCP's top speed over 40 ms, pull, fault and after (m/s).
    #[serde(skip_serializing_if = "Option::is_none")]
    reference_speed_m_s: Option<f64>,
    /// Guiding: robot cycles in which the reference changed after the hold and its braking.
    #[serde(skip_serializing_if = "Option::is_none")]
    reference_changes_after_hold: Option<usize>,
    /// Guiding: from the hand's force first over the ceiling to robot-io's hold (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    over_ceiling_to_hold_ms: Option<f64>,
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
        (Target::HandOverCeiling, _) => "yanks over the 60 N ceiling",
        (_, Sig::Kill) => "SIGKILL",
        (_, Sig::Stop) => "SIGSTOP 1 s",
    }
}

fn case_label(mode: Mode, target: Target, sig: Sig) -> String {
    format!(
        "{} {} {}",
        match mode {
            Mode::Press => "press",
            Mode::Guide => "guide",
        },
        target.name(),
        fault_name(target, sig)
    )
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

/// The reference TCP's top speed (m/s) over any 40 ms (10 EGM cycles, simulator time) of
/// `truth`.
fn reference_tcp_speed(truth: &[(u64, SimTruth)]) -> f64 {
    let tcp: Vec<(f64, Vector3<f64>)> = truth
        .iter()
        .filter_map(|(_, t)| Some((t.t_s, tcp_of(&t.q_ref_rad)?)))
        .collect();
    let mut top = 0.0f64;
    let mut j = 0;
    for i in 0..tcp.len() {
        while j < i && tcp[i].0 - tcp[j + 1].0 >= 0.04 - 1e-6 {
            j += 1;
        }
        let dt = tcp[i].0 - tcp[j].0;
        if dt >= 0.04 - 1e-6 {
            top = top.max((tcp[i].1 - tcp[j].1).norm() / dt);
        }
    }
    top
}

async fn run_case(
    s: &zenoh::Session,
    c: &TestCell,
    tap: &Tap,
    mode: Mode,
    target: Target,
    sig: Sig,
) -> Row {
    let label = case_label(mode, target, sig);
    eprintln!("== {label}");
    let t0 = Instant::now();
    ready(s, c).await;
    let motion = start_motion(s, c, tap, mode, &label).await;
    let started_s = t0.elapsed().as_secs_f64();
    let before = mono_ns() - 300_000_000;
    let at = mono_ns();
    inject(s, c, tap, mode, target, sig).await;
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
    // Every rule is checked; the case fails once with every one it broke.
    let mut bad: Vec<String> = Vec::new();
    // Idle and not Active, every service back.
    // …and robot-io's robot session running again (joint states arriving: after a dead or
    // frozen robot-io the IRC5 starts a new session 1.1 s after its comm timeout), so that the
    // second of stillness below is a second of robot cycles.
    let idle = || async {
        let cycling = since(&tap.joints, mono_ns().saturating_sub(100_000_000)).len() >= 10;
        let st = statuses(s, &c.cell).await.ok()?;
        let ctl = &st.get("control")?["detail"];
        let rio = &st.get("robot-io")?["detail"]["safety"];
        (cycling && ctl["mode"] == "Idle" && rio["level"] != "Active" && st.len() == 6).then(|| {
            (
                ctl["stop_reason"].as_str().unwrap_or("-").to_string(),
                rio["level"].as_str().unwrap_or("?").to_string(),
            )
        })
    };
    let (control, robot_io_now) = match wait_for(Duration::from_secs(15), idle).await {
        Some(x) => x,
        None => {
            // A broken rule, not the end of the case: the operator stops the motion, and the
            // case's other rules are still checked.
            let st = statuses(s, &c.cell).await.unwrap_or_default();
            bad.push(format!(
                "the cell did not settle idle and holding by itself in 15 s: control {} ({}), \
                 robot-io {} ({}), {} services",
                brief(&st, "control", &["mode"]),
                brief(&st, "control", &["stop_reason"]),
                brief(&st, "robot-io", &["safety", "level"]),
                brief(&st, "robot-io", &["safety", "reason"]),
                st.len()
            ));
            let _ = c.cli(&["mode", "idle"]);
            wait_for(Duration::from_secs(15), idle)
                .await
                .unwrap_or_else(|| {
                    panic!(
                        "{label}: the cell did not settle idle and holding, not even after \
                         `cell mode idle`\n{}",
                        c.log_text()
                    )
                })
        }
    };
    // Nothing resumes by itself: 1 s still, never Active. The window opens once the robot's
    // own servo has converged onto the held reference (a CI run measured 2.6 µrad of that
    // tail in a window opened at once), at most 300 ms after the cell settled.
    let settled_at = mono_ns();
    let _ = wait_for(Duration::from_millis(300), || async {
        let js = since(&tap.joints, mono_ns().saturating_sub(40_000_000));
        let js: Vec<JointState> = js.into_iter().map(|x| x.1).collect();
        (js.len() >= 5 && tests::joint_spread(&js) < 1e-8).then_some(())
    })
    .await;
    let quiet_from = mono_ns();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let js: Vec<JointState> = since(&tap.joints, quiet_from)
        .into_iter()
        .map(|x| x.1)
        .collect();
    check!(bad, js.len() > 100, "{} joint states in 1 s", js.len());
    let moved = tests::joint_spread(&js);
    check!(
        bad,
        moved < 1e-6,
        "the robot moved {moved} rad after the fault, by itself"
    );
    let safety = since(&tap.safety, at);
    check!(
        bad,
        since(&tap.safety, quiet_from)
            .iter()
            .all(|(_, x)| x.level != SafetyLevel::Active),
        "robot-io went Active again without an operator command"
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
                "robot-io never left Active after the fault\n{}",
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
        // A latched protective stop keeps the since_cycle of the state it latched over (the
        // guide session's Active): its cycle count says nothing; the ceiling's own timing rule
        // (rule 2) bounds it instead.
        let after = (h.level != SafetyLevel::ProtectiveStop).then_some(after);
        ((t_hold.saturating_sub(at)) as f64 * 1e-6, after)
    };
    if let Some(n) = hold_cycles {
        check!(
            bad,
            n <= 3,
            "robot-io held {n} robot cycles after the newest command's cycle (≤ 3)"
        );
    }
    if expect == Expect::RideThrough && mode == Mode::Guide {
        let t_hold = first_hold.map_or(u64::MAX, |x| x.0);
        check!(
            bad,
            t_hold >= released_at,
            "guiding ended {:.0} ms after the fault, before the operator let go",
            t_hold.saturating_sub(at) as f64 * 1e-6
        );
    }
    if target != Target::RobotIo && expect == Expect::Hold {
        // The fault itself held the robot, not the task's own end nor a released deadman.
        // Guiding: the deadman is released after the fault's 1 s (a kill or the yank: once
        // robot-io held, at most 1 s). The press: its move runs 5 s and the fault comes 0.5 s
        // into it, so its own end is ≥ 4 s later; a task ended by the fault first backs off the
        // surface (blind on a lost wrench: the release takes longer the softer the part,
        // ≈ 0.3 s on the 2·10⁴ N/m table, ≈ 1 s on 5·10³ N/m).
        // The two-host link faults last 3 s before the deadman is released (`inject`): the
        // lossy link stales the wrench in TCP's first long retransmission stall, at random
        // within them (measured 377 ms, and 1692 ms in a run of 2026-12-05 that failed the
        // 1 s bound the other guide faults have).
        let link = matches!(target, Target::LinkCut | Target::LinkImpaired);
        let bound_ms = match mode {
            Mode::Guide if link => 3000.0,
            Mode::Guide => FREEZE.as_secs_f64() * 1e3,
            Mode::Press => 3000.0,
        };
        check!(
            bad,
            to_hold_ms < bound_ms,
            "robot-io held only {to_hold_ms:.0} ms after the fault (< {bound_ms:.0})"
        );
        if mode == Mode::Press {
            check!(
                bad,
                task != "completed",
                "the press completed through the fault"
            );
        }
    }
    if target == Target::RobotIo {
        // The reference stands still once the datagram in flight has landed.
        check!(
            bad,
            to_hold_ms < 60.0,
            "the IRC5's reference moved {to_hold_ms:.1} ms after robot-io's fault"
        );
    }
    // 2. The force.
    let after_fault: Vec<&(u64, SimTruth)> = truth.iter().filter(|(t, _)| *t >= at).collect();
    check!(
        bad,
        after_fault.len() > 100,
        "{} truth samples",
        after_fault.len()
    );
    let force_of = |t: &SimTruth| match mode {
        Mode::Press => Vector3::from(t.contact_force_base_n).norm(),
        Mode::Guide => Vector3::from(t.hand_force_base_n).norm(),
    };
    let peak_force_n = after_fault
        .iter()
        .map(|(_, t)| force_of(t))
        .fold(0.0, f64::max);
    let (mut reference_speed_m_s, mut reference_changes_after_hold, mut over_ceiling_to_hold_ms) =
        (None, None, None);
    match mode {
        Mode::Press => check!(
            bad,
            peak_force_n <= PRESS_MAX_FORCE_N,
            "peak force {peak_force_n:.1} N over the {PRESS_MAX_FORCE_N} N bound"
        ),
        Mode::Guide => {
            // The arm, not the operator's pull: the reference's speed, its hold, and the hold
            // once the hand is over the ceiling (module docs, rule 2).
            let speed = reference_tcp_speed(&truth);
            reference_speed_m_s = Some(speed);
            check!(
                bad,
                speed <= GUIDE_MAX_SPEED_M_S * 1.02,
                "the reference TCP moved at {speed:.3} m/s over 40 ms (cap \
                 {GUIDE_MAX_SPEED_M_S} m/s)"
            );
            // robot-io's own hold (its first non-Active state after the fault; a dead or
            // frozen robot-io's is the one it reports once back: a thawed one may first
            // publish the Active it had before the freeze), and when the arm is held: from that
            // hold on, or — robot-io itself the fault — from the fault on (the IRC5 keeps its
            // last reference; the datagram in flight lands within 60 ms, rule 1).
            let t_state = first_hold.map_or(u64::MAX, |x| x.0);
            let (t_hold, rest_from) = if target == Target::RobotIo {
                (at, at + 60_000_000)
            } else {
                (
                    t_state,
                    t_state.saturating_add(HOLD_BRAKING.as_nanos() as u64),
                )
            };
            let mut changes = 0;
            if t_hold != u64::MAX {
                let rest: Vec<&(u64, SimTruth)> =
                    truth.iter().filter(|(t, _)| *t >= rest_from).collect();
                changes = rest
                    .windows(2)
                    .filter(|w| {
                        (0..6).any(|j| (w[1].1.q_ref_rad[j] - w[0].1.q_ref_rad[j]).abs() > 1e-9)
                    })
                    .count();
                reference_changes_after_hold = Some(changes);
                check!(
                    bad,
                    changes <= 1,
                    "the IRC5's reference changed in {changes} cycles from {:.0} ms after the \
                     arm was held on (it must stand still, but for one re-hold step)",
                    rest_from.saturating_sub(t_hold) as f64 * 1e-6
                );
            }
            if t_state != u64::MAX {
                let active_again: Vec<u64> = safety
                    .iter()
                    .filter(|(t, x)| *t > t_state && x.level == SafetyLevel::Active)
                    .map(|x| x.0)
                    .collect();
                let span_ms = active_again
                    .last()
                    .map_or(0.0, |t| t.saturating_sub(t_state) as f64 * 1e-6);
                if target == Target::RobotIo && !active_again.is_empty() && span_ms < 200.0 {
                    // A thawed robot-io drains the EGM datagrams queued while it was frozen
                    // and answers them with control's replies to its own backlog joint states:
                    // it reports Active for those cycles until control ends the motion (seen:
                    // 26 cycles, ≈ 4 ms). The IRC5's session has timed out by then and the
                    // reference stands still (the rule above): reported, not failed.
                    tests::report(
                        tests::Report::Figure,
                        &format!(
                            "{label}: robot-io reported Active again within {span_ms:.1} ms \
                             of its return (draining its backlog); the IRC5's reference \
                             changed in {changes} cycles after the fault"
                        ),
                    );
                } else {
                    check!(
                        bad,
                        active_again.is_empty(),
                        "robot-io Active again {:.0} ms after its hold, without an \
                         operator command",
                        active_again[0].saturating_sub(t_state) as f64 * 1e-6
                    );
                }
            }
            let over = truth
                .iter()
                .find(|(_, t)| Vector3::from(t.hand_force_base_n).norm() > GUIDE_MAX_FORCE_N);
            if let Some((t_over, _)) = over {
                let held_after_ms = t_hold.saturating_sub(*t_over) as f64 * 1e-6;
                over_ceiling_to_hold_ms = Some((t_hold as f64 - *t_over as f64) * 1e-6);
                check!(
                    bad,
                    t_hold <= t_over + CEILING_REACTION.as_nanos() as u64,
                    "the hand's force went over the {GUIDE_MAX_FORCE_N} N ceiling and \
                     robot-io held only {} later (≤ {} ms)",
                    if t_hold == u64::MAX {
                        "never".to_string()
                    } else {
                        format!("{held_after_ms:.0} ms")
                    },
                    CEILING_REACTION.as_millis()
                );
            }
        }
    }
    if target == Target::HandOverCeiling {
        // The ceiling exercised: over it, a protective stop, latched until the operator resets.
        check!(
            bad,
            peak_force_n > GUIDE_MAX_FORCE_N,
            "the hand's force peaked at {peak_force_n:.1} N, never over the \
             {GUIDE_MAX_FORCE_N} N ceiling: the ceiling was not exercised"
        );
        check!(
            bad,
            control.contains("protective stop"),
            "control ended with '{control}', not a protective stop"
        );
        check!(
            bad,
            robot_io_now == "ProtectiveStop",
            "robot-io is {robot_io_now}, not latched in a protective stop"
        );
        let (ok, _, err) = c.cli(&["reset", "--protective"]);
        check!(bad, ok, "cell reset --protective: {err}");
    }
    // 3. The reference.
    let step = max_reference_step(&truth);
    check!(
        bad,
        step <= 1.0,
        "a reference step of {step:.2} × max_speed · Δt"
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
        reference_speed_m_s,
        reference_changes_after_hold,
        over_ceiling_to_hold_ms,
    };
    let row_json = serde_json::to_string(&row).unwrap();
    eprintln!(
        "{label}: {row_json} (motion started after {started_s:.1} s, settled {:.1} s after \
         the fault, case {:.1} s)",
        settled_at.saturating_sub(at) as f64 * 1e-9,
        t0.elapsed().as_secs_f64()
    );
    assert!(
        bad.is_empty(),
        "{label}: {}\n  row: {row_json}",
        bad.join(";\n  ")
    );
    row
}

fn write_rows(name: &str, rows: &[Row]) {
    let path = std::env::temp_dir().join(format!("cell-faults-{name}-{}.json", std::process::id()));
    let _ = std::fs::write(&path, serde_json::to_string_pretty(rows).unwrap());
    eprintln!("rows: {}", path.display());
}

/// One mode's process cases on one cell.
async fn process_test(mut failures: Failures, name: &str, mode: Mode, scenario_file: &str) {
    let cases = process_cases(mode);
    if cases.is_empty() {
        return;
    }
    let sc = format!("sim.scenario=\"{scenario_file}\"");
    let setup = caught(async {
        let c = TestCell::start(name, &[&sc, &start_of(mode)]);
        let s = up_all(&c).await;
        let tap = Tap::start(&s, &c).await;
        (c, s, tap)
    })
    .await;
    let Some((c, s, tap)) = failures.setup(&format!("{name}: the cell"), setup) else {
        failures.finish();
        return;
    };
    let mut rows = Vec::new();
    for (t, sig) in cases {
        tap.clear();
        let r = caught(run_case(&s, &c, &tap, mode, t, sig)).await;
        rows.extend(failures.record(&case_label(mode, t, sig), r));
    }
    write_rows(name.trim_start_matches("fault"), &rows);
    failures.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_faults_during_a_sliding_press_hold_bounded_and_do_not_resume() {
    let (_cell, failures) = lock_cell();
    process_test(
        failures,
        "faultpress",
        Mode::Press,
        "scenarios/table-contact.toml",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_faults_while_guiding_hold_bounded_and_do_not_resume() {
    let (_cell, failures) = lock_cell();
    process_test(
        failures,
        "faultguide",
        Mode::Guide,
        "scenarios/lead-through.toml",
    )
    .await;
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
/// command, which works. Per-change tier: killed only ([`launcher_cases`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_or_frozen_launcher_leaves_the_press_held_and_bounded() {
    let (_cell, mut failures) = lock_cell();
    let mut rows = Vec::new();
    for sig in launcher_cases() {
        let label = format!("press launcher {}", fault_name(Target::Sensor, sig));
        let r = caught(launcher_case(&label, sig)).await;
        rows.extend(failures.record(&label, r));
    }
    write_rows("launcher", &rows);
    failures.finish();
}

async fn launcher_case(label: &str, sig: Sig) -> Row {
    eprintln!("== {label}");
    let t0 = Instant::now();
    let mut c = TestCell::start(
        "faultlauncher",
        &[
            "sim.scenario=\"scenarios/table-contact.toml\"",
            "launcher.services=[\"robot-io\",\"kinematics\",\"control\",\"force\",\"sensor\"]",
            &start_of(Mode::Press),
        ],
    );
    let _sim = KillOnDrop(c.spawn_cli(&["service", "sim"]));
    let s = up_all(&c).await;
    let tap = Tap::start(&s, &c).await;
    let Motion::Press(run) = start_motion(&s, &c, &tap, Mode::Press, label).await else {
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
            // A fixed wait: with the router gone there is no bus to await anything on. Its
            // services stop (PR_SET_PDEATHSIG) and the IRC5 times its session out (0.2 s)
            // before a new `cell up` takes the same addresses.
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
    // `run_case`, the window opens once the robot's own servo has converged onto the held
    // reference (at most 300 ms after the cell settled: the settle is seen on the hold's first
    // cycle; a CI run measured 2.6 µrad of that tail in a window opened at once).
    let tap2 = Tap::start(&s, &c).await;
    let _ = wait_for(Duration::from_millis(300), || async {
        let js = since(&tap2.joints, mono_ns().saturating_sub(40_000_000));
        let js: Vec<JointState> = js.into_iter().map(|x| x.1).collect();
        (js.len() >= 5 && tests::joint_spread(&js) < 1e-8).then_some(())
    })
    .await;
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
    let [x, y, z] = PRESS_ABOVE_MM.map(|v| v.to_string());
    let (ok, _, err) =
        c.cli_repeat_after_stall(&["move", &x, &y, &z, "0", "0", "1", "0", "--wait"]);
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
        reference_speed_m_s: None,
        reference_changes_after_hold: None,
        over_ceiling_to_hold_ms: None,
    };
    eprintln!(
        "{label}: {} (case {:.1} s)",
        serde_json::to_string(&row).unwrap(),
        t0.elapsed().as_secs_f64()
    );
    c.terminate(Duration::from_secs(5));
    row
}

/// The process and network faults on worlds the cell was not tuned for: a steel table 50×
/// stiffer than the configured 2·10⁴ N/m (not identified: the gains follow control's on-line
/// estimate), a soft 5·10³ N/m pad, and the shipped table read through a sensor 3× noisier than
/// the shipped one with 2 ms of EGM jitter. The same rules as on the shipped world (hold
/// within 3 robot cycles of the newest command, the force bounded, no reference step above the
/// speed limit, nothing resumes). Full tier: every press case on each; per-change: one a world
/// ([`world_cases`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_faults_on_untuned_worlds_hold_bounded_and_do_not_resume() {
    let (_cell, mut failures) = lock_cell();
    let noisy = "sim.sri.imperfections.noise_std=[0.09, 0.09, 0.225, 0.00225, 0.00225, 0.003]";
    /// (name, settings, table stiffness set at run time)
    type World<'a> = (&'a str, Vec<&'a str>, Option<f64>);
    let worlds: [World; 3] = [
        ("steel table 1e6 N/m, not identified", vec![], Some(1e6)),
        ("soft pad 5e3 N/m, not identified", vec![], Some(5e3)),
        (
            "3x sensor noise, 2 ms EGM jitter",
            vec![noisy, "sim.egm.jitter_ms=2.0"],
            None,
        ),
    ];
    let start = start_of(Mode::Press);
    let mut rows = Vec::new();
    for (i, (world, settings, stiffness)) in worlds.into_iter().enumerate() {
        let list = world_cases(i);
        if list.is_empty() {
            continue;
        }
        let mut set = vec![
            "sim.scenario=\"scenarios/table-contact.toml\"",
            start.as_str(),
        ];
        set.extend(settings);
        let setup = caught(async {
            let c = TestCell::start("faultworld", &set);
            let s = up_all(&c).await;
            if let Some(k) = stiffness {
                scenario(
                    &s,
                    &c,
                    json!({ "set": { "surfaces.0.stiffness_n_per_m": k } }),
                )
                .await;
            }
            let tap = Tap::start(&s, &c).await;
            (c, s, tap)
        })
        .await;
        let Some((c, s, tap)) = failures.setup(&format!("{world}: the cell"), setup) else {
            continue;
        };
        for (t, sig) in list {
            eprintln!("== world: {world}");
            tap.clear();
            let label = format!("{world}: {}", case_label(Mode::Press, t, sig));
            let r = caught(run_case(&s, &c, &tap, Mode::Press, t, sig)).await;
            if let Some(row) = failures.record(&label, r) {
                rows.push(json!({ "world": world, "row": row }));
            }
        }
    }
    let path = std::env::temp_dir().join(format!("cell-faults-worlds-{}.json", std::process::id()));
    let _ = std::fs::write(&path, serde_json::to_string_pretty(&rows).unwrap());
    eprintln!("rows: {}", path.display());
    failures.finish();
}

/// The F/T box's values gone wrong and EGM loss, during the sliding press and while guiding
/// (issue 23 item 2). The box runs its calibrated float format here (`sensor.sri.mode =
/// "calibrated"`, the SRI box's mode E), the only one that can carry a NaN. Saturation, NaN and
/// a spike must end the motion on the force service's flag (its reason in control's status)
/// and hold; a glitch under the spike threshold and the force limit, a slow zero drift beyond
/// the tare and 30 % EGM loss are ridden through, the force
/// bounded — the drift shifts the true force by the drift (nothing on the cell can tell a
/// drifting zero from a changing contact force while pressing), which the row shows.
/// Per-change tier: one a class and mode ([`device_cases`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_faults_in_force_modes_end_or_ride_through_bounded() {
    let (_cell, mut failures) = lock_cell();
    let mut rows = Vec::new();
    for (mode, scenario_file) in [
        (Mode::Press, "scenarios/table-contact.toml"),
        (Mode::Guide, "scenarios/lead-through.toml"),
    ] {
        let list = device_cases(mode);
        if list.is_empty() {
            continue;
        }
        let sc = format!("sim.scenario=\"{scenario_file}\"");
        let setup = caught(async {
            // One log per cell (the press cell's was overwritten by the guide cell's).
            let name = match mode {
                Mode::Press => "faultdevicepress",
                Mode::Guide => "faultdeviceguide",
            };
            let c = TestCell::start(
                name,
                &[&sc, "sensor.sri.mode=\"calibrated\"", &start_of(mode)],
            );
            let s = up_all(&c).await;
            let tap = Tap::start(&s, &c).await;
            (c, s, tap)
        })
        .await;
        let Some((c, s, tap)) = failures.setup(&format!("{scenario_file}: the cell"), setup) else {
            continue;
        };
        for t in list {
            tap.clear();
            let r = caught(device_case(&s, &c, &tap, mode, t)).await;
            rows.extend(failures.record(&case_label(mode, t, Sig::Stop), r));
        }
    }
    write_rows("device", &rows);
    failures.finish();
}

/// One device fault, with the reordering's and the drift's own checks.
async fn device_case(s: &zenoh::Session, c: &TestCell, tap: &Tap, mode: Mode, t: Target) -> Row {
    let before = statuses(s, &c.cell).await.unwrap();
    let row = run_case(s, c, tap, mode, t, Sig::Stop).await;
    if t == Target::EgmReorder {
        // The fault reached robot-io: the simulated network reordered and duplicated
        // datagrams, and robot-io took them for late and duplicate ones (resent the
        // last reference, no supervisor step) — not new cycles.
        let after = statuses(s, &c.cell).await.unwrap();
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
        let (ok, _, err) =
            c.cli_repeat_after_stall(&["move", "350", "0", "260", "0", "0", "1", "0", "--wait"]);
        assert!(ok, "move off: {err}");
        assert!(
            tap.await_still(Duration::from_secs(3)).await,
            "the arm never came to rest after the move"
        );
        let (ok, out, err) = c.cli(&["tare"]);
        eprintln!("tare after the drift: ok {ok}: {out} {err}");
        assert!(!ok, "a tare took the drifted zero in as bias: {out}");
        assert!(
            err.contains("compensated force"),
            "the tare was refused, but not for the drifted zero: {err}"
        );
        let connected = |want: bool| async move {
            wait_for(Duration::from_secs(5), || async {
                let st = statuses(s, &c.cell).await.ok()?;
                let d = &st.get("sensor")?["detail"];
                (d["connected"].as_bool() == Some(want)).then(|| d["samples"].as_u64())
            })
            .await
        };
        tests::sim_fault(s, c, json!({ "sensor_unplugged": true })).await;
        assert!(
            connected(false).await.is_some(),
            "the sensor never saw its box unplugged"
        );
        tests::sim_fault(s, c, json!({ "sensor_unplugged": false })).await;
        let n0 = connected(true)
            .await
            .unwrap_or_else(|| panic!("the sensor never reconnected to its box"));
        let streaming = wait_for(Duration::from_secs(5), || async {
            let st = statuses(s, &c.cell).await.ok()?;
            (st.get("sensor")?["detail"]["samples"].as_u64() > n0).then_some(())
        })
        .await;
        assert!(streaming.is_some(), "the box's stream did not come back");
    }
    row
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
    let scenario_file = match mode {
        Mode::Press => "scenarios/table-contact.toml",
        Mode::Guide => "scenarios/lead-through.toml",
    };
    let port = tests::free_port();
    let sri = tests::free_port();
    let router = format!("tcp/{pc_ip}:{port}");
    let sets = [
        format!("sim.scenario=\"{scenario_file}\""),
        format!("cell.router=\"{router}\""),
        "cell.zenoh_config=\"deploy/zenoh/router.json5\"".to_string(),
        "launcher.services=[\"sim\",\"robot-io\",\"kinematics\",\"control\",\"force\"]".to_string(),
        format!("sim.sri.bind=\"{pc_ip}:{sri}\""),
        format!("sensor.sri.address=\"{pc_ip}:{sri}\""),
        start_of(mode),
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
/// operator (the next case's commands). Then the same two cases with the link delaying every
/// packet 20 ms and losing 5 % each way for 3 s (`tc netem delay 20ms loss 5%`, emulated in
/// user space by [`tests::emulink`] because this kernel has no `sch_netem`): the sensor's
/// wrench goes stale in TCP's retransmission stalls, so the same hold must follow.
/// Per-change tier: the cut during the press, the lossy link while guiding
/// ([`two_host_cases`]). Where network namespaces cannot be made (no `ip`, no CAP_NET_ADMIN)
/// the cases are skipped and reported — or, with `CELL_REQUIRE_NETNS=1` (CI), fail with the
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_a_cut_or_lossy_link_to_the_sensor_node_holds_and_the_sensor_rejoins() {
    let (_cell, mut failures) = lock_cell();
    let cases = two_host_cases();
    let mut rows = Vec::new();
    let cut: Vec<Mode> = cases
        .iter()
        .filter(|(_, t)| *t == Target::LinkCut)
        .map(|x| x.0)
        .collect();
    let lossy: Vec<Mode> = cases
        .iter()
        .filter(|(_, t)| *t == Target::LinkImpaired)
        .map(|x| x.0)
        .collect();
    if !cut.is_empty() {
        match PiHost::create() {
            Ok(pi) => {
                *lock(&LINK) = Some(pi.pc_dev.clone());
                for mode in cut {
                    let r = caught(two_host_case(&pi.ns, &pi.pc_ip, mode, Target::LinkCut)).await;
                    rows.extend(failures.record(&case_label(mode, Target::LinkCut, Sig::Stop), r));
                }
                *lock(&LINK) = None;
            }
            Err(e) => tests::require_or_skip(
                "CELL_REQUIRE_NETNS",
                &format!(
                    "two hosts, the cut link: no network namespace (ip netns, veth; root or \
                     CAP_NET_ADMIN): {e}"
                ),
            ),
        }
    }
    // 20 ms delay and 5 % loss (issue 23 item 4's `tc netem delay 20ms loss 5%`). This
    // kernel has no `sch_netem`, so the link is emulated in user space (tests::emulink): two
    // TUN devices, packets moved between them late and with random loss — real IP packets,
    // so TCP, zenoh and the SRI connection see real retransmissions and stalls.
    if !lossy.is_empty() {
        match tests::emulink::EmuLink::create() {
            Ok(link) => {
                let link = Arc::new(link);
                *lock(&EMU) = Some(link.clone());
                for mode in lossy {
                    let r = caught(two_host_case(
                        &link.ns,
                        &link.pc_ip,
                        mode,
                        Target::LinkImpaired,
                    ))
                    .await;
                    rows.extend(
                        failures.record(&case_label(mode, Target::LinkImpaired, Sig::Stop), r),
                    );
                }
                *lock(&EMU) = None;
            }
            Err(e) => tests::require_or_skip(
                "CELL_REQUIRE_NETNS",
                &format!(
                    "two hosts, 20 ms delay and 5 % loss: no emulated link (network \
                     namespaces and TUN devices; root or CAP_NET_ADMIN): {e}"
                ),
            ),
        }
    }
    write_rows("twohost", &rows);
    failures.finish();
}
