//! The emulated IRC5 runs ABB's EGM rules through the real processes (issue 43): a module
//! without the fine-point move gets its session refused and robot-io says why; a reference
//! beyond a joint limit, sent as a raw `EgmSensor` (robot-io's supervisor never sends one), ends
//! the session with an EGM error instead of being clamped. (Motors off mid-press needing a
//! program start: faults.rs's per-change press case; a restart seen as a restart: safety.rs's
//! outage test and commission.rs's `restart` step.)
#![allow(clippy::unwrap_used)]

use std::{path::PathBuf, time::Duration};

use robot_io::egm::proto::{decode_robot, MciStateType};
use serde_json::Value;
use tests::{free_udp_port, live_services, repo_root, statuses, wait_for, TestCell};

/// A copy of `deploy/irc5` whose module has no non-EGM motion: the home move and the
/// per-session `WaitRob \InPos` + `MoveAbsJ … fine` removed (what the module shipped before
/// issue 43 did).
fn module_without_fine_point() -> PathBuf {
    let src = repo_root().join("deploy/irc5");
    let dir = std::env::temp_dir().join(format!("cell-irc5-nofine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["SIO_cell.cfg", "MOC_cell.cfg"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let m = std::fs::read_to_string(src.join("CellEgm.mod")).unwrap();
    let kept: Vec<&str> = m
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("MoveAbsJ") || t.starts_with("WaitRob"))
        })
        .collect();
    assert_eq!(
        m.lines().count() - kept.len(),
        3,
        "the shipped module's home move, WaitRob and fine-point move"
    );
    std::fs::write(dir.join("CellEgm.mod"), kept.join("\n") + "\n").unwrap();
    let i = robot_io::egm::irc5::Irc5Egm::load_dir(&dir).expect("the stripped module parses");
    assert!(!i.waits_for_fine_point() && i.module.home.is_none());
    dir
}

fn detail<'a>(st: &'a std::collections::BTreeMap<String, Value>, svc: &str) -> &'a Value {
    &st[svc]["detail"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_the_fine_point_is_refused_and_robot_io_says_why() {
    let _cell = tests::cell_lock();
    let dir = module_without_fine_point();
    let set = format!("sim.egm.irc5=\"{}\"", dir.display());
    let c = TestCell::start("nofine", &[&set]);
    let s = c.client().await;
    let up = wait_for(Duration::from_secs(30), || async {
        (live_services(&s, &c.cell).await == tests::DEFAULT_SERVICES).then_some(())
    })
    .await;
    assert!(up.is_some(), "services did not come up\n{}", c.log_text());
    // The emulated program starts with the simulator, before robot-io may be listening (under
    // SCHED_FIFO the launcher runs below the services it starts, so the simulator can reach its
    // first EGM instruction before robot-io is spawned): its one error datagram may be lost, as
    // on a real cell whose program is started before the PC side. The operator's Start, now
    // that robot-io listens, runs the routine again from the top: the same refusal.
    tests::sim_program_start(&s, &c).await;
    // The emulator refuses the first session (its first motion would be EGM, from no fine
    // point) and says so in one EgmRobot with MCI state ERROR; robot-io records it.
    let seen = wait_for(Duration::from_secs(10), || async {
        let st = statuses(&s, &c.cell).await.ok()?;
        let egm = &detail(&st, "robot-io")["egm"];
        (egm["controller_errors"].as_u64()? >= 1).then(|| st.clone())
    })
    .await;
    let st = seen.unwrap_or_else(|| {
        panic!(
            "robot-io never saw the controller's error\n{}",
            c.log_text()
        )
    });
    let sim = &detail(&st, "sim")["egm"];
    assert_eq!(sim["last_error"], "FirstMotionEgm", "{sim}");
    assert_eq!(sim["sessions"], 0, "{sim}");
    assert_eq!(sim["rapid"], "stopped (EgmError(FirstMotionEgm))", "{sim}");
    let rio = detail(&st, "robot-io");
    assert_eq!(rio["egm"]["last_controller_error"]["mci"], "Error", "{rio}");
    assert_eq!(rio["controller"]["mci"], "Error", "{rio}");
    // Nothing runs afterwards: the routine ended (a program start would run it again).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let st = statuses(&s, &c.cell).await.unwrap();
    assert_eq!(detail(&st, "sim")["egm"]["sessions"], 0);
    assert!(
        c.log_text().contains("ended the session with an EGM error"),
        "robot-io's log names the error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_beyond_a_joint_limit_ends_the_session_with_an_egm_error() {
    let _cell = tests::cell_lock();
    // The simulator alone, its EgmRobot sent to this test's socket: the test is the PC side.
    let port = free_udp_port();
    let sock = tokio::net::UdpSocket::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let to = format!("sim.egm.robot_io=\"127.0.0.1:{port}\"");
    let c = TestCell::start("egmlimit", &["launcher.services=[\"sim\"]", &to]);
    let mut buf = [0u8; 2048];
    let mut seq = 0u32;
    let mut last_q = [0.0f64; 6];
    let limit_deg = kinematics::ArmParams::irb120().limits.max[2].to_degrees();
    let mut mci_after = Vec::new();
    let mut sent_bad = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = tokio::time::timeout_at(deadline, sock.recv_from(&mut buf)).await;
        let Ok(Ok((n, from))) = r else { break };
        let m = decode_robot(&buf[..n]).expect("an EgmRobot");
        let q: Vec<f64> = m
            .feed_back
            .as_ref()
            .and_then(|f| f.joints.as_ref())
            .map(|j| j.joints.clone())
            .unwrap_or_default();
        assert!(q.len() >= 6);
        assert!(
            q[2] <= limit_deg + 1e-6,
            "joint 3 measured beyond its limit: {q:?}"
        );
        let mci = m.mci_state.as_ref().map(|s| s.state).unwrap_or(0);
        if sent_bad {
            mci_after.push(mci);
            if mci != MciStateType::Running as i32 {
                break;
            }
        }
        last_q.copy_from_slice(&q[..6]);
        seq = seq.wrapping_add(1);
        // 50 answers at the measured joints (the session runs), then one with joint 3 half a
        // degree beyond its limit.
        let mut reply = last_q;
        if seq > 50 {
            reply[2] = limit_deg + 0.5;
            sent_bad = true;
        }
        let d = sim::wire::egm::sensor_message(seq, 0, &reply);
        sock.send_to(&d, from).await.unwrap();
    }
    assert!(
        sent_bad,
        "the session never ran 50 cycles\n{}",
        c.log_text()
    );
    assert_eq!(
        mci_after.last().copied(),
        Some(MciStateType::Error as i32),
        "MCI states after the bad reference: {mci_after:?}"
    );
    // No further EgmRobot: the routine ended.
    let more = tokio::time::timeout(Duration::from_millis(1500), sock.recv_from(&mut buf)).await;
    assert!(
        more.is_err(),
        "the controller kept streaming after its EGM error"
    );
    let s = c.client().await;
    let st = statuses(&s, &c.cell).await.unwrap();
    let egm = &detail(&st, "sim")["egm"];
    assert_eq!(egm["egm_errors"], 1, "{egm}");
    assert_eq!(egm["last_error"]["OutOfLimits"]["joint"], 2, "{egm}");
    assert!(
        egm["rapid"]
            .as_str()
            .unwrap()
            .starts_with("stopped (EgmError"),
        "{egm}"
    );
    // Never applied: the arm stayed where it was.
    let q_now = egm["q_deg"].as_array().unwrap()[2].as_f64().unwrap();
    assert!((q_now - last_q[2]).abs() < 0.01, "{q_now} vs {}", last_q[2]);
}
