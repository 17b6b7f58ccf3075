//! Bad input on the bus, through the real processes (issue 23 item 3): random and mutated
//! postcard frames on every data key of the cell, an old wire version, truncated and
//! over-long frames, and well-formed joint commands carrying NaN/Inf. Every service counts and
//! drops them (its `inputs[].rejected`), none crashes or restarts, nothing reaches the robot
//! (the joints do not move, robot-io is never `Active`), and a real command still works after.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use common::{
    codec,
    msg::{self, JointState, SafetyLevel, SafetyState},
    topic,
};
use tests::{joint_spread, statuses, up_all, wait_for, TestCell};

/// Whether `b` decodes as the message type of the topic with this suffix (then it is not
/// garbage for that key and is not sent).
fn decodes(suffix: &str, b: &[u8]) -> bool {
    macro_rules! any_of {
        ($($t:ident: $ty:ty),* $(,)?) => {
            $( if suffix == topic::$t.info.suffix { return codec::decode::<$ty>(b).is_ok(); } )*
        };
    }
    any_of!(
        JOINT_STATE: msg::JointState,
        SAFETY_STATE: msg::SafetyState,
        ESTOP: msg::EStop,
        ESTOP_RESET: msg::EStopReset,
        MOTION_END: msg::MotionEnd,
        TOOL_POSE: msg::ToolPose,
        JOINT_COMMAND: msg::JointCommand,
        WRENCH_RAW: msg::WrenchSample,
        WRENCH_ESTIMATE: msg::WrenchEstimate,
        CARTESIAN_COMMAND: msg::CartesianCommand,
        MODE_COMMAND: msg::ModeCommand,
        HYBRID_TASK: msg::HybridTask,
        HYBRID_STATE: msg::HybridState,
        SIM_TRUTH: msg::SimTruth,
        PLANT_STATE: msg::PlantState,
        PLANT_EFFORT: msg::PlantEffortCommand,
        MOVE_TARGET: msg::MoveTarget,
        ENABLE: msg::Enable,
        GUIDE_STATE: msg::GuideState,
        PLAYBACK_STATE: msg::PlaybackState,
    );
    panic!("topic {suffix} has no type in this test: add it");
}

/// A small deterministic generator (the test repeats exactly).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// The bad frames for one key: random bodies behind the right version byte, random bytes,
/// an old version, empty, a valid frame of another type cut short or with a byte too many.
fn garbage(suffix: &str, rng: &mut Lcg) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let valid_other = codec::encode(&msg::JointState {
        period_s: 0.004,
        ..Default::default()
    })
    .unwrap();
    for k in 0..40 {
        let len = (rng.next() % 120) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        match k % 5 {
            0 | 1 => b.insert(0, codec::WIRE_VERSION),
            2 => b.insert(0, codec::WIRE_VERSION.wrapping_sub(1)),
            3 => {
                b = valid_other[..(k % valid_other.len())].to_vec();
            }
            _ => {
                b = valid_other.clone();
                b.push(rng.next() as u8);
            }
        }
        if !decodes(suffix, &b) {
            out.push(b);
        }
    }
    out.push(Vec::new());
    out
}

/// (pid, rejected per input key) of every service.
type Snapshot = std::collections::BTreeMap<String, (u64, std::collections::BTreeMap<String, u64>)>;

async fn snapshot(s: &zenoh::Session, c: &TestCell) -> Snapshot {
    let st = statuses(s, &c.cell).await.unwrap();
    st.iter()
        .map(|(name, v)| {
            let inputs = v["inputs"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|i| {
                            (
                                i["key"].as_str().unwrap_or_default().to_string(),
                                i["rejected"].as_u64().unwrap_or(0),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            (name.clone(), (v["pid"].as_u64().unwrap_or(0), inputs))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_every_key_is_counted_and_dropped_and_never_reaches_the_robot() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("badinput", &[]);
    let s = up_all(&c).await;
    let id = c.cell.id.clone();
    let js_sub = s
        .declare_subscriber(topic::JOINT_STATE.key(&id))
        .with(zenoh::handlers::FifoChannel::new(65536))
        .await
        .unwrap();
    let safety_sub = s
        .declare_subscriber(topic::SAFETY_STATE.key(&id))
        .with(zenoh::handlers::FifoChannel::new(65536))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = snapshot(&s, &c).await;
    while let Ok(Some(_)) = js_sub.try_recv() {}
    while let Ok(Some(_)) = safety_sub.try_recv() {}

    let mut rng = Lcg(0x5eed);
    let mut sent: std::collections::BTreeMap<String, u64> = Default::default();
    for info in topic::TOPICS {
        let key = format!("cell/{id}/{}", info.suffix);
        let frames = garbage(info.suffix, &mut rng);
        let p = s.declare_publisher(key.clone()).await.unwrap();
        for f in &frames {
            p.put(f.clone()).await.unwrap();
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        sent.insert(key, frames.len() as u64);
    }
    // Well-formed joint commands for robot-io with non-finite references: refused by the
    // bus's check, never executed.
    let jc_key = topic::JOINT_COMMAND.key(&id);
    let p = s.declare_publisher(jc_key.clone()).await.unwrap();
    for (k, v) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
        .iter()
        .enumerate()
    {
        let mut q = [0.0; 6];
        q[k] = *v;
        let m = msg::JointCommand {
            q_rad: q,
            cycle: 1,
            ..Default::default()
        };
        p.put(codec::encode(&m).unwrap()).await.unwrap();
    }
    *sent.get_mut(&jc_key).unwrap() += 3;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let after = wait_for(Duration::from_secs(5), || async {
        let a = snapshot(&s, &c).await;
        (a.len() == before.len()).then_some(a)
    })
    .await
    .unwrap_or_else(|| panic!("a service is missing after the garbage\n{}", c.log_text()));
    let mut counted = 0;
    for (name, (pid, inputs)) in &after {
        let (pid0, inputs0) = &before[name];
        assert_eq!(pid, pid0, "{name} restarted (crashed?)\n{}", c.log_text());
        for (key, rejected) in inputs {
            let Some(n) = sent.get(key) else { continue };
            let delta = rejected - inputs0.get(key).copied().unwrap_or(0);
            eprintln!("{name} {key}: {delta} of {n} rejected");
            assert!(delta >= 1, "{name} did not count garbage on {key}");
            assert!(delta <= *n, "{name} {key}: {delta} rejected of {n} sent");
            counted += 1;
        }
    }
    assert!(counted >= 10, "only {counted} subscribed keys checked");
    // Nothing reached the robot.
    let mut js = Vec::new();
    while let Ok(Some(sm)) = js_sub.try_recv() {
        if let Ok(m) = codec::decode::<JointState>(&sm.payload().to_bytes()) {
            js.push(m);
        }
    }
    assert!(js.len() > 200, "{} joint states", js.len());
    assert!(
        joint_spread(&js) < 1e-6,
        "the robot moved {} rad",
        joint_spread(&js)
    );
    while let Ok(Some(sm)) = safety_sub.try_recv() {
        if let Ok(m) = codec::decode::<SafetyState>(&sm.payload().to_bytes()) {
            assert_ne!(m.level, SafetyLevel::Active, "robot-io went Active: {m:?}");
        }
    }
    // And the cell still works.
    let (ok, _, err) = c.cli(&["move", "350", "100", "500"]);
    assert!(
        ok,
        "a real command after the garbage: {err}\n{}",
        c.log_text()
    );
}
