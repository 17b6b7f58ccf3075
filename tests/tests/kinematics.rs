//! The kinematics service inside the running cell.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use common::{
    codec,
    msg::{
        CartesianCommand, CartesianTarget, JointCommand, JointState, MotionTag, SafetyState, Stamp,
    },
    topic,
};
use kinematics::{node::to_msg_pose, Arm};
use nalgebra::Isometry3;
use tests::{up_all as up, TestCell};

/// A stream of Cartesian commands along a straight line through a wrist singularity (q5
/// crosses 0), paced at the robot cycle, becomes joint commands whose every step stays within
/// the joint speed limits (where the exact IK would jump, the service moves in joint space
/// towards that solution at the speed limits), and the robot ends at the line's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_through_wrist_singularity_respects_speed_limits() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("wrist", &[]);
    let s = up(&c).await;
    let arm = Arm::irb120();
    let js_sub = s
        .declare_subscriber(topic::JOINT_STATE.key(&c.cell.id))
        .await
        .unwrap();
    let first = js_sub.recv_async().await.unwrap();
    let js: JointState = codec::decode(&first.payload().to_bytes()).unwrap();
    drop(js_sub);
    // Like control, tag each command with the newest robot cycle (a ring of one never
    // back-pressures the router).
    let latest_js = s
        .declare_subscriber(topic::JOINT_STATE.key(&c.cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
        .unwrap();
    let mut cycle = js.cycle;
    // Default start: q5 = 30°. End: q5 = −20°, so the path crosses the wrist singularity.
    let q0 = js.q_rad;
    let q1 = [0.05, 0.15, 0.1, 0.0, (-20f64).to_radians(), 0.1];
    let p0 = arm.fk(&q0).unwrap();
    let p1 = arm.fk(&q1).unwrap();
    let cmd_sub = s
        .declare_subscriber(topic::JOINT_COMMAND.key(&c.cell.id))
        .with(zenoh::handlers::FifoChannel::new(8192))
        .await
        .unwrap();
    // Like control, tag the motion with robot-io's boot id (else robot-io refuses it).
    let safety = s
        .declare_subscriber(topic::SAFETY_STATE.key(&c.cell.id))
        .await
        .unwrap();
    let st: SafetyState = codec::decode(
        &tokio::time::timeout(Duration::from_secs(5), safety.recv_async())
            .await
            .expect("a safety state")
            .unwrap()
            .payload()
            .to_bytes(),
    )
    .unwrap();
    let motion = MotionTag {
        robot_boot: st.robot_boot,
        motion_id: 1,
    };
    let key = topic::CARTESIAN_COMMAND.key(&c.cell.id);
    let n = 400;
    let mut tick = tokio::time::interval(Duration::from_millis(4));
    for k in 0..=n + 100 {
        tick.tick().await;
        while let Ok(Some(sample)) = latest_js.try_recv() {
            if let Ok(j) = codec::decode::<JointState>(&sample.payload().to_bytes()) {
                cycle = j.cycle;
            }
        }
        let sfrac = (k.min(n)) as f64 / n as f64;
        let t = p0.translation.vector.lerp(&p1.translation.vector, sfrac);
        let r = p0.rotation.slerp(&p1.rotation, sfrac);
        let cmd = CartesianCommand {
            stamp: Stamp {
                seq: k as u64 + 1,
                source_mono_ns: common::clock::mono_ns(),
            },
            cycle,
            motion,
            target: CartesianTarget::Pose(to_msg_pose(&Isometry3::from_parts(t.into(), r))),
        };
        s.put(&key, codec::encode(&cmd).expect("encodable"))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut cmds: Vec<JointCommand> = Vec::new();
    while let Ok(Some(sample)) = cmd_sub.try_recv() {
        cmds.push(codec::decode(&sample.payload().to_bytes()).unwrap());
    }
    assert!(cmds.len() > n / 2, "only {} joint commands", cmds.len());
    let lim = arm.limits();
    let mut crossed = false;
    let mut speed_limited = 0;
    for w in cmds.windows(2) {
        if w[1].cycle == w[0].cycle {
            // Same robot cycle: the second replaces the first; compare with the one before.
            continue;
        }
        for j in 0..6 {
            // The service limits each step to max_speed × its estimate of the robot cycle
            // (4 ms here); allow 25 % for that estimate.
            let step = (w[1].q_rad[j] - w[0].q_rad[j]).abs();
            assert!(
                step <= lim.max_speed[j] * 0.004 * 1.25,
                "joint {j} stepped {step} rad between commands {} and {}",
                w[0].stamp.seq,
                w[1].stamp.seq
            );
        }
        if w[0].q_rad[4].signum() != w[1].q_rad[4].signum() {
            crossed = true;
        }
        speed_limited += w[1].flags.speed_limited as usize;
        assert!(!w[1].flags.unreachable);
    }
    assert!(crossed, "q5 never crossed zero");
    let last = cmds.last().unwrap();
    let reached = arm.fk(&last.q_rad).unwrap();
    let err = (reached.translation.vector - p1.translation.vector).norm();
    assert!(err < 1e-6, "ended {err} m from the line's end");
    assert!(
        speed_limited > 0,
        "the pass near the singularity should have been speed-limited"
    );
    eprintln!(
        "{} commands, {speed_limited} speed-limited (DLS) steps",
        cmds.len()
    );
}

/// FK/IK requests over the bus: JSON in, JSON out; bad requests get an error reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fk_ik_queryables_answer_json() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("kinrpc", &[]);
    let s = up(&c).await;
    let get = |op: &str, body: &str| {
        let s = s.clone();
        let key = format!("cell/{}/kin/rpc/{op}", c.cell.id);
        let body = body.to_string();
        async move {
            let replies = s
                .get(&key)
                .payload(body)
                .timeout(Duration::from_secs(2))
                .await
                .unwrap();
            let r = replies.recv_async().await.unwrap();
            match r.result() {
                Ok(sample) => Ok(serde_json::from_slice::<serde_json::Value>(
                    &sample.payload().to_bytes(),
                )
                .unwrap()),
                Err(e) => Err(e.payload().try_to_string().unwrap().to_string()),
            }
        }
    };
    let fk = get("fk", r#"{"q_deg":[0,0,0,0,0,0]}"#).await.unwrap();
    assert_eq!(fk["position_mm"], serde_json::json!([374.0, 0.0, 630.0]));
    let ik = get(
        "ik",
        r#"{"position_mm":[374,0,630],"quaternion_wxyz":[0.70710678,0,0.70710678,0],"near_deg":[0,0,0,0,0,0]}"#,
    )
    .await
    .unwrap();
    assert_eq!(ik["chosen_deg"].as_array().unwrap().len(), 6);
    let bad = get("fk", r#"{"q_deg":[1,2]}"#).await;
    assert!(bad.unwrap_err().contains("q_deg"));
}
