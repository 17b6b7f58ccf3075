use super::*;
use crate::proto::{
    self, EgmClock, EgmCollisionInfo, EgmFeedBack, EgmMciState, EgmMotorState, EgmPose,
    EgmRapidCtrlExecState, EgmRapidData, EgmTestSignals,
};
use proptest::prelude::*;
use prost::Message;

/// prost's answer and ours: both rejected, or both accepted with the same fields (compared
/// through `Debug` so that NaN equals NaN).
fn same_answer(bytes: &[u8]) -> Result<(), String> {
    let theirs = proto::decode_robot(bytes);
    let ours = decode_robot_frame(bytes);
    match (&theirs, &ours) {
        (Ok(m), Ok(f)) => {
            let want = format!("{:?}", RobotFrame::from(m));
            let got = format!("{f:?}");
            if want == got {
                Ok(())
            } else {
                Err(format!(
                    "fields differ on {bytes:02x?}\nprost {want}\nours  {got}"
                ))
            }
        }
        (Err(_), Err(_)) => Ok(()),
        _ => Err(format!(
            "accept/reject differs on {bytes:02x?}: prost {theirs:?}, ours {ours:?}"
        )),
    }
}

fn robot_strategy() -> impl Strategy<Value = EgmRobot> {
    let joints = prop::collection::vec(-400.0f64..400.0, 0..14).prop_map(|v| proto::joints(&v));
    let header = (
        prop::option::of(any::<u32>()),
        prop::option::of(any::<u32>()),
        prop::option::of(-1i32..6),
    )
        .prop_map(|(seqno, tm, mtype)| EgmHeader { seqno, tm, mtype });
    let feed_back = (
        prop::option::of(joints.clone()),
        prop::option::of(joints.clone()),
        prop::option::of((any::<u64>(), any::<u64>())),
        any::<bool>(),
    )
        .prop_map(|(joints, external_joints, time, pose)| EgmFeedBack {
            joints,
            cartesian: pose.then_some(EgmPose {
                pos: Some(proto::EgmCartesian {
                    x: 1.0,
                    y: 2.0,
                    z: 3.0,
                }),
                orient: None,
                euler: None,
            }),
            external_joints,
            time: time.map(|(sec, usec)| EgmClock { sec, usec }),
        });
    let force = prop::collection::vec(-100.0f64..100.0, 0..8).prop_map(|v| {
        proto::EgmMeasuredForce {
            fc_active: Some(true),
            force: v,
        }
        .encode_to_vec()
    });
    (
        (
            prop::option::of(header),
            prop::option::of(feed_back),
            prop::option::of(joints),
            prop::option::of(0i32..4),
            prop::option::of(0i32..5),
            prop::option::of(any::<bool>()),
        ),
        (
            prop::option::of(prop::collection::vec(-1e3f64..1e3, 0..4)),
            prop::option::of(0i32..4),
            prop::option::of(force),
            prop::option::of(0.0f64..100.0),
            prop::option::of(any::<u32>()),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (header, feed_back, planned, motor, mci, conv),
                (signals, rapid, force, util, mi, coll, rfr),
            )| {
                EgmRobot {
                    header,
                    feed_back,
                    planned: planned.map(|j| proto::EgmPlanned {
                        joints: Some(j),
                        ..Default::default()
                    }),
                    motor_state: motor.map(|state| EgmMotorState { state }),
                    mci_state: mci.map(|state| EgmMciState { state }),
                    mci_convergence_met: conv,
                    test_signals: signals.map(|signals| EgmTestSignals { signals }),
                    rapid_exec_state: rapid.map(|state| EgmRapidCtrlExecState { state }),
                    measured_force: force,
                    utilization_rate: util,
                    move_index: mi,
                    collision_info: coll.then(|| EgmCollisionInfo {
                        collsion_triggered: Some(false),
                        coll_det_quota: vec![0.5, 0.25],
                    }),
                    rapid_from_robot: rfr.then(|| EgmRapidData {
                        dig_val: Some(true),
                        dnum: vec![1.0],
                    }),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn valid_datagrams_decode_as_prost_does(m in robot_strategy()) {
        let bytes = m.encode_to_vec();
        prop_assert_eq!(same_answer(&bytes), Ok(()));
        let f = decode_robot_frame(&bytes).unwrap();
        let fj = f.feedback_joints.map(|j| j.as_slice().to_vec());
        let mj = m.feed_back.as_ref().and_then(|f| f.joints.as_ref()).map(|j| {
            j.joints.iter().copied().take(MAX_JOINTS).collect::<Vec<_>>()
        });
        prop_assert_eq!(fj, mj);
    }

    #[test]
    fn corrupted_datagrams_get_prosts_answer(
        m in robot_strategy(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
    ) {
        let mut bytes = m.encode_to_vec();
        for (i, v, op) in edits {
            if bytes.is_empty() {
                bytes.push(v);
                continue;
            }
            let at = i.index(bytes.len());
            match op {
                0 => bytes[at] = v,
                1 => bytes.truncate(at),
                _ => bytes.insert(at, v),
            }
        }
        prop_assert_eq!(same_answer(&bytes), Ok(()));
    }

    #[test]
    fn arbitrary_bytes_get_prosts_answer(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(same_answer(&bytes), Ok(()));
    }

    #[test]
    fn the_reply_encodes_as_prost_does(
        seqno in any::<u32>(),
        tm in any::<u32>(),
        q in prop::array::uniform6(-1e4f64..1e4),
        qd in prop::option::of(prop::array::uniform6(-1e3f64..1e3)),
    ) {
        let r = SensorReply { seqno, tm, q_deg: q, qd_deg: qd };
        let mut buf = [0u8; SENSOR_REPLY_MAX];
        let ours = r.encode(&mut buf).to_vec();
        prop_assert_eq!(&ours, &r.to_proto().encode_to_vec());
        prop_assert_eq!(proto::decode_sensor(&ours).unwrap(), r.to_proto());
    }
}

#[test]
fn hand_made_edge_cases_agree() {
    let cases: &[&[u8]] = &[
        &[],
        &[0x00],                                     // tag 0
        &[0x0F],                                     // wire type 7
        &[0x0C],                                     // end group at top level
        &[0x0B, 0x0C], // empty group, field 1: wire type mismatch for header
        &[0xFB, 0x01, 0xFC, 0x01], // group 31, skipped
        &[0xFB, 0x01, 0xF4, 0x01], // group 31 closed by 30
        &[0x12, 0x02, 0x0A, 0x00], // feedBack { joints {} }
        &[0x12, 0x04, 0x0A, 0x02, 0x0A, 0x00], // joints packed, empty
        &[0x12, 0x05, 0x0A, 0x03, 0x0A, 0x01, 0x00], // packed length 1
        &[0x22, 0x00, 0x22, 0x02, 0x08, 0x01], // motor state merged: 1
        &[0x22, 0x02, 0x08, 0x02, 0x22, 0x00], // motor state 2, then empty: stays 2
        &[
            0x30, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
        ], // 10-byte varint
        &[
            0x30, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02,
        ], // 10th byte 2
        &[0x51, 0, 0, 0, 0, 0, 0, 0xF8, 0x7F], // utilizationRate NaN
        &[0x4A, 0x03, 0x08, 0x01, 0x99], // measuredForce: raw (parsed later)
        &[0x0A, 0x02, 0x08, 0x80], // header: truncated varint inside
        &[0x80, 0x80, 0x80, 0x80, 0x10], // key > u32::MAX
    ];
    for c in cases {
        assert_eq!(same_answer(c), Ok(()), "{c:02x?}");
    }
}

#[test]
fn joints_beyond_the_array_are_counted() {
    let v: Vec<f64> = (0..20).map(f64::from).collect();
    let m = EgmRobot {
        header: None,
        feed_back: Some(EgmFeedBack {
            joints: Some(proto::joints(&v)),
            cartesian: None,
            external_joints: None,
            time: None,
        }),
        planned: None,
        motor_state: None,
        mci_state: None,
        mci_convergence_met: None,
        test_signals: None,
        rapid_exec_state: None,
        measured_force: None,
        utilization_rate: None,
        move_index: None,
        collision_info: None,
        rapid_from_robot: None,
    };
    let bytes = m.encode_to_vec();
    let f = decode_robot_frame(&bytes).unwrap();
    let j = f.feedback_joints.unwrap();
    assert_eq!(j.len(), 20);
    assert_eq!(j.as_slice(), &v[..MAX_JOINTS]);
}
