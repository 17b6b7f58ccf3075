//! Whole-cell tests: `cell up` starts real service processes around its embedded router on a
//! private loopback port; the tests talk to the cell over zenoh as any client would.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use common::{
    codec,
    msg::{JointState, MoveTarget, Pose, SafetyLevel, SafetyReason, SafetyState, Stamp, ToolPose},
    topic,
};
use tests::{live_services, statuses, up_all, wait_for, TestCell, DEFAULT_SERVICES};

async fn next<T: serde::de::DeserializeOwned>(
    sub: &zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>,
) -> T {
    let s = tokio::time::timeout(Duration::from_secs(5), sub.recv_async())
        .await
        .expect("sample within 5 s")
        .expect("subscriber open");
    codec::decode(&s.payload().to_bytes()).expect("decodable")
}

/// Proves the data flow end to end on the direct chain (the default): a move command to
/// control becomes joint commands (FK and the servo in control), robot-io applies them to the
/// (ideal) robot, and the measured joints come back through kinematics as a tool pose at the
/// target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_travels_control_robot_and_back_on_the_direct_chain() {
    let _cell = tests::cell_lock();
    command_travels(false).await;
}

/// The same through the kinematics service (`[control] chain = "kinematics"`): control's
/// Cartesian commands become joint commands in kinematics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_travels_control_kinematics_robot_and_back() {
    let _cell = tests::cell_lock();
    command_travels(true).await;
}

async fn command_travels(via_kinematics: bool) {
    let sets: &[&str] = if via_kinematics {
        &["control.chain=\"kinematics\""]
    } else {
        &[]
    };
    let c = TestCell::start(if via_kinematics { "chain-k" } else { "chain-d" }, sets);
    let s = up_all(&c).await;
    let poses = s
        .declare_subscriber(topic::TOOL_POSE.key(&c.cell.id))
        .await
        .unwrap();
    let start: ToolPose = next(&poses).await;
    let target = Pose {
        position_m: [
            start.tcp_in_base.position_m[0] - 0.03,
            start.tcp_in_base.position_m[1] + 0.05,
            start.tcp_in_base.position_m[2] - 0.04,
        ],
        quat_wxyz: start.tcp_in_base.quat_wxyz,
    };
    let mv = MoveTarget {
        stamp: Stamp {
            seq: 1,
            source_mono_ns: common::clock::mono_ns(),
        },
        tcp_in_base: target,
        max_speed_m_s: 0.2,
        max_rot_speed_rad_s: 1.0,
    };
    s.put(
        topic::MOVE_TARGET.key(&c.cell.id),
        codec::encode(&mv).expect("encodable"),
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    let mut reached = None;
    while t0.elapsed() < Duration::from_secs(10) {
        let p: ToolPose = next(&poses).await;
        let d: f64 = (0..3)
            .map(|i| (p.tcp_in_base.position_m[i] - target.position_m[i]).powi(2))
            .sum::<f64>()
            .sqrt();
        if d < 1e-4 {
            reached = Some(p);
            break;
        }
    }
    let p =
        reached.unwrap_or_else(|| panic!("tool pose never reached the target\n{}", c.log_text()));
    assert!(p.cycle > start.cycle);
    // Every hop counted its traffic.
    let st = statuses(&s, &c.cell).await.unwrap();
    let published = |svc: &str, suffix: &str| -> u64 {
        st[svc]["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["key"].as_str().unwrap().ends_with(suffix))
            .map(|o| o["published"].as_u64().unwrap())
            .unwrap_or(0)
    };
    if via_kinematics {
        assert!(published("control", "control/cartesian_cmd") > 10);
        assert!(published("kinematics", "kin/joint_cmd") > 10);
        assert_eq!(published("control", "kin/joint_cmd"), 0);
    } else {
        assert!(published("control", "kin/joint_cmd") > 10);
        assert_eq!(published("control", "control/cartesian_cmd"), 0);
        assert_eq!(published("kinematics", "kin/joint_cmd"), 0);
    }
    assert!(published("kinematics", "kin/tool_pose") > 10);
    assert!(published("robot-io", "robot/joint_state") > 10);
    assert_eq!(st["robot-io"]["detail"]["safety"]["level"], "Active");
}

/// `ls` and `status` see every service; each status is one JSON object with the contract's
/// fields; the robot cycle rate is the configured 250 Hz.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn liveliness_and_json_status_for_every_service() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("status", &[]);
    let s = up_all(&c).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let st = statuses(&s, &c.cell).await.unwrap();
    let names: Vec<&str> = st.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, DEFAULT_SERVICES);
    for (name, v) in &st {
        assert_eq!(v["cell_id"], c.cell.id.as_str(), "{name}");
        assert!(v["pid"].as_u64().unwrap() > 0);
        assert_eq!(v["state"].as_str().map(|s| !s.is_empty()), Some(true));
        assert!(v["inputs"].is_array() && v["outputs"].is_array());
    }
    // robot-io reports the EGM cycle statistics of the simulated IRC5 (4 ms).
    let egm = &st["robot-io"]["detail"]["egm"];
    let rate = egm["rate_hz"].as_f64().unwrap();
    assert!((200.0..300.0).contains(&rate), "robot cycle rate {rate}");
    for k in ["lost", "jitter_std_ms", "robot_to_reply_ms", "period_ms"] {
        assert!(!egm[k].is_null(), "robot-io status lacks egm.{k}: {egm}");
    }
}

/// SIGKILL a service: the launcher restarts it (new pid) and it is live again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_service_is_restarted() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("restart", &[]);
    let s = up_all(&c).await;
    let st = statuses(&s, &c.cell).await.unwrap();
    let pid = st["kinematics"]["pid"].as_u64().unwrap();
    // SAFETY: killing the test's own grandchild.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let back = wait_for(Duration::from_secs(10), || async {
        let st = statuses(&s, &c.cell).await.ok()?;
        let new = st.get("kinematics")?["pid"].as_u64()?;
        (new != pid).then_some(new)
    })
    .await;
    assert!(back.is_some(), "kinematics not restarted\n{}", c.log_text());
    assert!(c.log_text().contains("kinematics exited unexpectedly"));
    assert_eq!(live_services(&s, &c.cell).await, DEFAULT_SERVICES);
}

/// SIGTERM to `cell up`: exit 0 within 3 s, robot-io stops last in hold, no orphans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_everything_cleanly() {
    let _cell = tests::cell_lock();
    let mut c = TestCell::start("sigterm", &[]);
    let s = up_all(&c).await;
    let st = statuses(&s, &c.cell).await.unwrap();
    let pids: Vec<i32> = st
        .values()
        .map(|v| v["pid"].as_i64().unwrap() as i32)
        .collect();
    let safety = s
        .declare_subscriber(topic::SAFETY_STATE.key(&c.cell.id))
        .await
        .unwrap();
    let (code, took) = c.terminate(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", c.log_text());
    assert!(took < Duration::from_secs(3), "took {took:?}");
    std::thread::sleep(Duration::from_millis(200));
    for pid in pids {
        // SAFETY: signal 0 only probes for existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "orphan pid {pid}");
    }
    // The last safety state robot-io published says it holds because it is shutting down.
    let mut last: Option<SafetyState> = None;
    while let Ok(Some(sample)) = safety.try_recv() {
        last = codec::decode(&sample.payload().to_bytes()).ok();
    }
    let last = last.expect("safety states");
    assert_eq!(last.level, SafetyLevel::Hold);
    assert_eq!(last.reason, SafetyReason::ShuttingDown);
    let log = c.log_text();
    let pos = |needle: &str| {
        log.rfind(needle)
            .unwrap_or_else(|| panic!("{needle} in log"))
    };
    assert!(pos("robot-io stopped") > pos("kinematics stopped"));
    assert!(pos("robot-io stopped") > pos("control stopped"));
}

/// Garbage on every key any service subscribes to: nobody crashes, everyone counts rejects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_counted_and_dropped() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("garbage", &[]);
    let s = up_all(&c).await;
    let before = statuses(&s, &c.cell).await.unwrap();
    let garbage: [&[u8]; 4] = [b"", b"\x01", b"\xff\xff\xff\xff\xff\xff", &[1u8; 300]];
    // Also a well-formed joint command full of NaN: decodes, fails the plausibility check.
    let nan_cmd = common::msg::JointCommand {
        q_rad: [f64::NAN; 6],
        ..Default::default()
    };
    for t in topic::TOPICS {
        let key = format!("cell/{}/{}", c.cell.id, t.suffix);
        for g in garbage {
            s.put(&key, g.to_vec()).await.unwrap();
        }
    }
    s.put(
        topic::JOINT_COMMAND.key(&c.cell.id),
        codec::encode(&nan_cmd).expect("encodable"),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after = statuses(&s, &c.cell).await.unwrap();
    for (name, v) in &after {
        assert_eq!(v["pid"], before[name]["pid"], "{name} restarted");
        for i in v["inputs"].as_array().unwrap() {
            let key = i["key"].as_str().unwrap();
            assert!(
                i["rejected"].as_u64().unwrap() >= 4,
                "{name} did not count rejects on {key}: {i}"
            );
            assert!(i["last_reject"].is_string(), "{name} {key}");
        }
    }
    // robot-io still runs its cycle and never applied the NaN command.
    let js = s
        .declare_subscriber(topic::JOINT_STATE.key(&c.cell.id))
        .await
        .unwrap();
    let j: JointState = next(&js).await;
    assert!(j.q_rad.iter().all(|v| v.is_finite()));
}

/// The offline CLI: zero pose and a JSON shape integrators can script against.
#[test]
fn cell_kin_fk_zero_pose() {
    let _cell = tests::cell_lock();
    let out = std::process::Command::new(tests::bin_dir().join("cell"))
        .args(["kin", "fk", "0", "0", "0", "0", "0", "0", "--deg"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["position_mm"], serde_json::json!([374.0, 0.0, 630.0]));
}

/// CLI habits: an unreachable IK exits non-zero (the JSON still printed); FK beyond the joint
/// limits is flagged; with no cell running an operator command prints one clear line, not
/// zenoh's own warnings (unless `-v`).
#[test]
fn cell_kin_failures_are_exit_codes_and_operator_errors_are_one_line() {
    let _cell = tests::cell_lock();
    let cell = |args: &[&str]| {
        std::process::Command::new(tests::bin_dir().join("cell"))
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let out = cell(&["kin", "ik", "2000", "0", "630", "1", "0", "0", "0"]);
    assert!(!out.status.success(), "unreachable IK must fail");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"], "pose unreachable");
    let out = cell(&["kin", "fk", "0", "0", "0", "0", "170", "0", "--deg"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["within_limits"], false);
    assert_eq!(v["outside_limits_axes"], serde_json::json!([5]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside the arm's limits"));
    // Nothing listens on this router: one line, no WARN lines from zenoh.
    let port = tests::free_port();
    let router = format!("cell.router=\"tcp/127.0.0.1:{port}\"");
    let out = cell(&["--set", &router, "status"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("WARN"), "zenoh warnings leaked:\n{err}");
    assert!(err.contains("cannot reach the cell"), "{err}");
}

/// `cell move --wait` returns once the TCP is at the target, and exits non-zero with control's
/// reason when the move is refused (here: an engaged e-stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_wait_reaches_the_target_or_fails_with_the_reason() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("movewait", &[]);
    let _s = up_all(&c).await;
    let (ok, _, err) = c.cli(&["move", "400", "50", "550", "--wait"]);
    assert!(ok, "{err}\n{}", c.log_text());
    assert!(err.contains("at the target"), "{err}");
    let (ok, _, err) = c.cli(&["estop"]);
    assert!(ok, "{err}");
    let (ok, _, err) = c.cli(&["move", "380", "0", "500", "--wait"]);
    assert!(!ok, "a refused move must fail");
    assert!(err.contains("EmergencyStop"), "{err}");
}

/// Issue 22's proof of a host stall, through the real processes: SIGSTOP of **one** service
/// (robot-io, 150 ms) is not a host stall — the proof names the processes that ran on; a
/// freeze of **every** cell process together (150 ms) is proven, with the common gap; a stop
/// reason that is no silence proves nothing whatever the gaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_stall_is_proven_only_when_every_process_froze_together() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("stall", &[]);
    let s = up_all(&c).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let st = statuses(&s, &c.cell).await.unwrap();
    let pid = |name: &str| st[name]["pid"].as_u64().unwrap() as i32;
    let freeze = |pids: &[i32], ms: u64| {
        // SAFETY: signalling the test's own grandchildren; SIGCONT follows.
        for p in pids {
            unsafe {
                libc::kill(*p, libc::SIGSTOP);
            }
        }
        std::thread::sleep(Duration::from_millis(ms));
        for p in pids {
            unsafe {
                libc::kill(*p, libc::SIGCONT);
            }
        }
    };

    let since = common::clock::mono_ns();
    freeze(&[pid("robot-io")], 150);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let one = c.proven_stall("robot-io holds: RobotSilent", since);
    let why = one.expect_err("one frozen service is not a host stall");
    assert!(why.contains("not a host stall"), "{why}");
    assert!(why.contains("control") && why.contains("sim"), "{why}");
    assert!(why.contains("gaps only in robot-io"), "{why}");

    let since = common::clock::mono_ns();
    let all: Vec<i32> = DEFAULT_SERVICES.iter().map(|n| pid(n)).collect();
    freeze(&all, 150);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let proof = c
        .proven_stall("wrench estimate Stale (63 ms)", since)
        .expect("every process frozen together is a host stall");
    let v: serde_json::Value = serde_json::from_str(&proof).expect("proof JSON");
    let ms = (v["common"]["to_ns"].as_u64().unwrap() - v["common"]["from_ns"].as_u64().unwrap())
        as f64
        * 1e-6;
    assert!((100.0..400.0).contains(&ms), "common gap {ms} ms: {proof}");
    assert_eq!(
        v["per_process"].as_array().map(Vec::len),
        Some(DEFAULT_SERVICES.len()),
        "{proof}"
    );
    // The same freeze, but the stop was no silence: never a retry.
    let why = c
        .proven_stall("maximum contact force 40.0 N exceeded", since)
        .expect_err("a limit is never retried");
    assert!(why.contains("not a silence"), "{why}");
    eprintln!("proven stall: {ms:.0} ms together: {proof}");
}

/// `cell experiment --help` names every experiment `cell experiment all` runs (issue 22: it
/// named 5 of 9).
#[test]
fn experiment_help_names_every_experiment() {
    let _cell = tests::cell_lock();
    let out = std::process::Command::new(tests::bin_dir().join("cell"))
        .args(["experiment", "--help"])
        .output()
        .expect("cell experiment --help");
    let text = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
    for name in cell::experiment::NAMES {
        assert!(text.contains(name), "{name} not in the help: {text}");
    }
}
