//! Command-path safety through the real processes (issue: "close the holes a review found"):
//! an e-stop survives a crash and restart of robot-io; an outage or a robot-io restart in the
//! middle of a move ends it, and nothing moves again until a new operator command.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use common::{
    codec,
    msg::{JointState, SafetyLevel, SafetyState},
    topic,
};
use tests::{joint_spread as spread, sim_fault, statuses, up_all, wait_for, TestCell};

type Sub = zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>;

async fn subscribe(s: &zenoh::Session, key: String) -> Sub {
    s.declare_subscriber(key)
        .with(zenoh::handlers::FifoChannel::new(16384))
        .await
        .unwrap()
}

fn drain<T: serde::de::DeserializeOwned>(sub: &Sub) -> Vec<T> {
    let mut v = Vec::new();
    while let Ok(Some(sample)) = sub.try_recv() {
        if let Ok(m) = codec::decode(&sample.payload().to_bytes()) {
            v.push(m);
        }
    }
    v
}

async fn robot_io_pid(s: &zenoh::Session, c: &TestCell) -> u64 {
    statuses(s, &c.cell).await.unwrap()["robot-io"]["pid"]
        .as_u64()
        .unwrap()
}

/// robot-io's status once its EGM session is running (a restarted instance included).
async fn robot_io_running(s: &zenoh::Session, c: &TestCell, not_pid: u64) -> serde_json::Value {
    wait_for(Duration::from_secs(20), || async {
        let st = statuses(s, &c.cell).await.ok()?;
        let r = st.get("robot-io")?.clone();
        let running = r["pid"].as_u64()? != not_pid
            && r["detail"]["cycles"].as_u64().unwrap_or(0) > 10
            && !r["detail"]["safety"].is_null();
        running.then_some(r)
    })
    .await
    .unwrap_or_else(|| panic!("robot-io not running\n{}", c.log_text()))
}

fn kill9(pid: u64) {
    // SAFETY: killing the test's own grandchild.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
}

/// Watches the robot for `d`: the joint states and safety states seen.
async fn watch(js: &Sub, safety: &Sub, d: Duration) -> (Vec<JointState>, Vec<SafetyState>) {
    drain::<JointState>(js);
    drain::<SafetyState>(safety);
    tokio::time::sleep(d).await;
    (drain(js), drain(safety))
}

async fn control_detail(s: &zenoh::Session, c: &TestCell) -> serde_json::Value {
    statuses(s, &c.cell).await.unwrap()["control"]["detail"].clone()
}

/// Waits for control to go idle; returns its `stop_reason`.
async fn control_went_idle(s: &zenoh::Session, c: &TestCell) -> String {
    let d = wait_for(Duration::from_secs(3), || async {
        let d = control_detail(s, c).await;
        (d["mode"] == "Idle").then_some(d)
    })
    .await
    .unwrap_or_else(|| panic!("control did not go idle\n{}", c.log_text()));
    d["stop_reason"].as_str().unwrap_or_default().to_string()
}

/// Over 1.5 s: joint states flow, nothing moves, robot-io is never `Active`.
async fn assert_nothing_moves(js: &Sub, safety: &Sub) {
    let (j, st) = watch(js, safety, Duration::from_millis(1500)).await;
    assert!(j.len() > 100, "{} joint states", j.len());
    assert!(
        spread(&j) < 1e-6,
        "the robot moved {} rad without a new command",
        spread(&j)
    );
    assert!(st.iter().all(|x| x.level != SafetyLevel::Active));
}

/// A new operator command moves the robot (within 1.5 s); returns the safety states seen.
async fn assert_a_new_command_moves(c: &TestCell, js: &Sub, safety: &Sub) -> Vec<SafetyState> {
    let (ok, _, err) = c.cli(&["move", "350", "100", "500"]);
    assert!(ok, "{err}");
    let (j, st) = watch(js, safety, Duration::from_millis(1500)).await;
    assert!(
        spread(&j) > 1e-3,
        "the robot did not move for a new command"
    );
    st
}

/// E-stop → SIGKILL robot-io → the launcher restarts it: still stopped, commands refused
/// (nothing moves, never `Active`) until `cell reset`; then a new command moves the robot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn estop_survives_a_robot_io_crash_until_reset() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("estopcrash", &[]);
    let s = up_all(&c).await;
    let (ok, out, err) = c.cli(&["estop"]);
    assert!(ok, "cell estop: {out}{err}");
    assert!(out.contains("EmergencyStop"), "{out}");
    let pid = robot_io_pid(&s, &c).await;
    kill9(pid);
    let r = robot_io_running(&s, &c, pid).await;
    assert_eq!(r["detail"]["safety"]["level"], "EmergencyStop", "{r}");
    assert_eq!(r["detail"]["safety"]["estop_latched"], true);
    assert!(c.log_text().contains("robot-io exited unexpectedly"));
    // A move is refused by control (robot-io is stopped) and nothing moves.
    let js = subscribe(&s, topic::JOINT_STATE.key(&c.cell.id)).await;
    let safety = subscribe(&s, topic::SAFETY_STATE.key(&c.cell.id)).await;
    let (ok, _, err) = c.cli(&["move", "350", "100", "500"]);
    assert!(ok, "{err}");
    let (j, st) = watch(&js, &safety, Duration::from_millis(1500)).await;
    assert!(j.len() > 100, "{} joint states", j.len());
    assert!(
        spread(&j) < 1e-6,
        "the robot moved {} rad while stopped",
        spread(&j)
    );
    assert!(st.iter().all(|x| x.level == SafetyLevel::EmergencyStop));
    assert_eq!(control_detail(&s, &c).await["mode"], "Idle");
    // Reset: acknowledged; a new command moves the robot.
    let (ok, out, err) = c.cli(&["reset"]);
    assert!(ok, "cell reset: {out}{err}");
    let st = assert_a_new_command_moves(&c, &js, &safety).await;
    assert!(st.iter().any(|x| x.level == SafetyLevel::Active));
}

/// `cell estop` with no robot-io to acknowledge it exits non-zero, with a clear message,
/// once its acknowledgement timeout (`cell::cli::ESTOP_ACK_TIMEOUT`, 0.5 s) has passed and
/// not much later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn estop_without_acknowledgement_fails() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("estopnoack", &["launcher.services=[\"kinematics\"]"]);
    let s = c.client().await;
    let live = wait_for(Duration::from_secs(20), || async {
        (tests::live_services(&s, &c.cell).await == ["kinematics"]).then_some(())
    })
    .await;
    assert!(live.is_some(), "{}", c.log_text());
    let t0 = Instant::now();
    let (ok, out, err) = c.cli(&["estop"]);
    let took = t0.elapsed();
    assert!(!ok, "{out}");
    assert!(err.contains("no acknowledgement from robot-io"), "{err}");
    eprintln!("unacknowledged e-stop reported after {took:?}");
    // It waited the whole timeout (no earlier give-up: a slow robot-io still acknowledges),
    // and reported within 1 s of it: the rest is the CLI process's own start, its zenoh
    // session to the local router and its exit (measured 14 ms: 514 ms in all), and must not
    // keep an operator from the hardware e-stop; 1 s leaves a loaded host its room.
    let timeout = cell::cli::ESTOP_ACK_TIMEOUT;
    assert!(
        took >= timeout && took <= timeout + Duration::from_secs(1),
        "unacknowledged e-stop reported after {took:?} (timeout {timeout:?})"
    );
}

/// Starts a slow move and waits until robot-io executes it.
async fn start_slow_move(c: &TestCell, safety: &Sub) {
    let (ok, _, err) = c.cli(&["move", "350", "120", "480", "--speed-mm-s", "40"]);
    assert!(ok, "{err}");
    let active = wait_for(Duration::from_secs(5), || async {
        drain::<SafetyState>(safety)
            .iter()
            .any(|x| x.level == SafetyLevel::Active)
            .then_some(())
    })
    .await;
    assert!(active.is_some(), "the move did not start\n{}", c.log_text());
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// A controller outage (motors off / EGM stopped, 300 ms) in the middle of a move ends the
/// move: control goes idle with the reason, robot-io holds, and after the controller is back
/// nothing moves until a new command — which then starts from the measured pose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_mid_move_ends_it_and_nothing_moves_until_a_new_command() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("outage", &[]);
    let s = up_all(&c).await;
    let js = subscribe(&s, topic::JOINT_STATE.key(&c.cell.id)).await;
    let safety = subscribe(&s, topic::SAFETY_STATE.key(&c.cell.id)).await;
    start_slow_move(&c, &safety).await;
    sim_fault(&s, &c, serde_json::json!({"controller_stopped": true})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim_fault(&s, &c, serde_json::json!({"controller_stopped": false})).await;
    let why = control_went_idle(&s, &c).await;
    // The emulated IRC5 stops sending while stopped (silent) or reports motors off.
    assert!(
        why.contains("RobotNotReady") || why.contains("RobotSilent"),
        "stop reason: {why}"
    );
    // Let the controller come back and the robot settle, then watch: nothing moves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_nothing_moves(&js, &safety).await;
    // The program's start is a new EGM session whose first EgmRobot has sequence number 0
    // (issue 43: the emulated IRC5 kept counting, so robot-io saw a resumed link): robot-io
    // counts a restart, and reads the V1.1 schema (feedBack.time sent).
    let st = statuses(&s, &c.cell).await.unwrap();
    let egm = &st["robot-io"]["detail"]["egm"];
    assert!(egm["restarts"].as_u64().unwrap_or(0) >= 1, "{egm}");
    assert_eq!(egm["session_first_seqno"], 0, "{egm}");
    // The new session started from a fine point (the emulator waited for the arm at rest).
    assert_eq!(st["sim"]["detail"]["egm"]["rapid"], "running");
    assert_ne!(st["robot-io"]["detail"]["schema"], "V10");
    assert_a_new_command_moves(&c, &js, &safety).await;
    assert_eq!(
        control_detail(&s, &c).await["stop_reason"],
        serde_json::Value::Null
    );
}

/// robot-io is SIGKILLed in the middle of a move: the restarted instance comes up holding,
/// control goes idle (robot-io restarted), and nothing moves until a new command; no reset is
/// needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robot_io_crash_mid_move_comes_back_holding() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("crashmove", &[]);
    let s = up_all(&c).await;
    let js = subscribe(&s, topic::JOINT_STATE.key(&c.cell.id)).await;
    let safety = subscribe(&s, topic::SAFETY_STATE.key(&c.cell.id)).await;
    start_slow_move(&c, &safety).await;
    let pid = robot_io_pid(&s, &c).await;
    kill9(pid);
    let r = robot_io_running(&s, &c, pid).await;
    assert_ne!(r["detail"]["safety"]["level"], "EmergencyStop", "{r}");
    let why = control_went_idle(&s, &c).await;
    assert!(why.contains("restarted"), "stop reason: {why}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_nothing_moves(&js, &safety).await;
    assert_a_new_command_moves(&c, &js, &safety).await;
}

fn signal(pid: u64, sig: i32) {
    // SAFETY: signalling the test's own grandchild.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// cell-sim's EGM status, asked of cell-sim alone (a frozen robot-io must not delay it).
async fn sim_egm(s: &zenoh::Session, c: &TestCell) -> serde_json::Value {
    let ask = || async {
        let replies = s
            .get(format!("cell/{}/sim/status", c.cell.id))
            .timeout(Duration::from_millis(500))
            .await
            .ok()?;
        let r = replies.recv_async().await.ok()?;
        let v: serde_json::Value =
            serde_json::from_slice(&r.result().ok()?.payload().to_bytes()).ok()?;
        Some(v["detail"]["egm"].clone())
    };
    wait_for(Duration::from_secs(3), ask)
        .await
        .unwrap_or_else(|| panic!("no sim status\n{}", c.log_text()))
}

/// robot-io frozen (SIGSTOP, not dead) for 0.6–0.9 s in the middle of a move: the emulated IRC5
/// (deploy/irc5/CellEgm.mod's session, `\CommTimeout` 0.2 s) keeps robot-io's last reference —
/// the reference never moves past it — then ends the session with `EGM_STOP_HOLD` and starts a
/// new one after `RampOutTime + WaitTime`. Once robot-io runs again nothing resumes by itself:
/// control is idle, the arm does not move until a new operator command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_robot_io_ends_the_controllers_session_and_nothing_resumes() {
    let _cell = tests::cell_lock();
    let irc5 = robot_io::egm::irc5::Irc5Egm::builtin().unwrap().session;
    let c = TestCell::start("frozenrio", &[]);
    let s = up_all(&c).await;
    let js = subscribe(&s, topic::JOINT_STATE.key(&c.cell.id)).await;
    let safety = subscribe(&s, topic::SAFETY_STATE.key(&c.cell.id)).await;
    let truth = subscribe(&s, topic::SIM_TRUTH.key(&c.cell.id)).await;
    assert_eq!(sim_egm(&s, &c).await["comm_timeouts"], 0);
    start_slow_move(&c, &safety).await;
    let pid = robot_io_pid(&s, &c).await;
    drain::<common::msg::SimTruth>(&truth);
    signal(pid, libc::SIGSTOP);
    let frozen_at = Instant::now();
    // Mid-freeze (after the timeout): the session has ended and the controller is silent.
    // cell-sim refreshes its status every 250 ms: polled until it shows the end (≤ 0.9 s).
    tokio::time::sleep(Duration::from_millis(250)).await;
    let ended = |e: &serde_json::Value| e["comm_timeouts"] == 1 && e["session_running"] == false;
    let mut mid = sim_egm(&s, &c).await;
    while !ended(&mid) && frozen_at.elapsed() < Duration::from_millis(900) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        mid = sim_egm(&s, &c).await;
    }
    if let Some(rest) = Duration::from_millis(600).checked_sub(frozen_at.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let during: Vec<(Duration, common::msg::SimTruth)> = {
        let mut v = Vec::new();
        while let Ok(Some(sample)) = truth.try_recv() {
            if let Ok(m) = codec::decode::<common::msg::SimTruth>(&sample.payload().to_bytes()) {
                v.push((frozen_at.elapsed(), m));
            }
        }
        v
    };
    signal(pid, libc::SIGCONT);
    assert_eq!(mid["comm_timeouts"], 1, "sim egm status mid-freeze: {mid}");
    assert_eq!(mid["session_running"], false, "{mid}");
    // The reference: whatever robot-io sent last before the freeze (a datagram in flight may
    // land in the first cycles), then still — never extrapolated, never moved by the
    // controller — through the timeout and the stop.
    let settled: Vec<[f64; 6]> = during
        .iter()
        .map(|(_, t)| t.q_ref_rad)
        .skip(10) // 40 ms of robot time: the freeze's own delivery and any reply in flight
        .collect();
    assert!(settled.len() > 50, "{} truth samples", settled.len());
    let first = settled[0];
    let moved = settled
        .iter()
        .flat_map(|q| (0..6).map(move |j| (q[j] - first[j]).abs()))
        .fold(0.0, f64::max);
    assert!(
        moved < 1e-4,
        "the controller's reference moved {moved} rad while robot-io was frozen"
    );
    // robot-io runs again: the controller starts a new session by itself (the RAPID loop),
    // robot-io answers it holding, control has ended the move, nothing moves.
    let back = wait_for(Duration::from_secs(5), || async {
        let e = sim_egm(&s, &c).await;
        (e["session_running"] == true && e["sessions"].as_u64()? >= 2).then_some(e)
    })
    .await;
    assert!(
        back.is_some(),
        "no new EGM session after the freeze (RampOutTime {} s + WaitTime {} s)\n{}",
        irc5.ramp_out_s,
        irc5.restart_wait_s,
        c.log_text()
    );
    let why = control_went_idle(&s, &c).await;
    eprintln!("control's stop reason after the freeze: {why}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_nothing_moves(&js, &safety).await;
    assert_a_new_command_moves(&c, &js, &safety).await;
    // One session ended by the timeout in the whole test.
    assert_eq!(sim_egm(&s, &c).await["comm_timeouts"], 1);
}
