//! Codec tests against byte vectors written by hand from the protobuf wire format
//! (key = field_number << 3 | wire_type; 0 varint, 1 fixed64, 2 length-delimited;
//! doubles are IEEE-754 little-endian). Nothing here is produced by round-tripping.

use super::*;
use proptest::prelude::*;

// IEEE-754 doubles, little-endian, written by hand.
const D0: [u8; 8] = [0, 0, 0, 0, 0, 0, 0, 0]; // 0.0
const D1: [u8; 8] = [0, 0, 0, 0, 0, 0, 0xF0, 0x3F]; // 1.0
const DM1: [u8; 8] = [0, 0, 0, 0, 0, 0, 0xF0, 0xBF]; // -1.0
const D2: [u8; 8] = [0, 0, 0, 0, 0, 0, 0x00, 0x40]; // 2.0
const DHALF: [u8; 8] = [0, 0, 0, 0, 0, 0, 0xE0, 0x3F]; // 0.5
const D5: [u8; 8] = [0, 0, 0, 0, 0, 0, 0x14, 0x40]; // 5.0
const D10: [u8; 8] = [0, 0, 0, 0, 0, 0, 0x24, 0x40]; // 10.0
const D30: [u8; 8] = [0, 0, 0, 0, 0, 0, 0x3E, 0x40]; // 30.0
const DM45_5: [u8; 8] = [0, 0, 0, 0, 0, 0xC0, 0x46, 0xC0]; // -45.5
const D90: [u8; 8] = [0, 0, 0, 0, 0, 0x80, 0x56, 0x40]; // 90.0
const D400: [u8; 8] = [0, 0, 0, 0, 0, 0, 0x79, 0x40]; // 400.0

const Q_DEG: [f64; 6] = [0.0, 30.0, -45.5, 90.0, 1.0, -1.0];

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.iter().flat_map(|p| p.iter().copied()).collect()
}

/// EgmJoints{joints: Q_DEG}, unpacked: six times key 0x09 + double (54 bytes).
fn joints_unpacked() -> Vec<u8> {
    cat(&[
        &[0x09],
        &D0,
        &[0x09],
        &D30,
        &[0x09],
        &DM45_5,
        &[0x09],
        &D90,
        &[0x09],
        &D1,
        &[0x09],
        &DM1,
    ])
}

/// EgmJoints{joints: Q_DEG}, packed: key 0x0A, length 48, six doubles (50 bytes).
fn joints_packed() -> Vec<u8> {
    cat(&[&[0x0A, 0x30], &D0, &D30, &DM45_5, &D90, &D1, &DM1])
}

#[test]
fn hand_written_doubles_are_ieee754() {
    for (bytes, v) in [
        (D0, 0.0),
        (D1, 1.0),
        (DM1, -1.0),
        (D2, 2.0),
        (DHALF, 0.5),
        (D5, 5.0),
        (D10, 10.0),
        (D30, 30.0),
        (DM45_5, -45.5),
        (D90, 90.0),
        (D400, 400.0),
    ] {
        assert_eq!(f64::from_le_bytes(bytes), v);
    }
}

#[test]
fn header_decodes_and_encodes() {
    // EgmRobot{header{seqno 7, tm 1000, mtype DATA}}: tm 1000 = varint E8 07.
    let bytes = [0x0A, 0x07, 0x08, 0x07, 0x10, 0xE8, 0x07, 0x18, 0x02];
    let r = decode_robot(&bytes).unwrap();
    let h = r.header.as_ref().unwrap();
    assert_eq!(h.seqno, Some(7));
    assert_eq!(h.tm, Some(1000));
    assert_eq!(h.mtype(), MessageType::Data);
    assert_eq!(r.seqno(), Some(7));
    assert_eq!(r.tm(), Some(1000));
    assert_eq!(encode_robot(&r), bytes);
}

#[test]
fn feedback_joints_unpacked_and_packed_both_decode() {
    for inner in [joints_unpacked(), joints_packed()] {
        // EgmFeedBack{joints} = 0A len inner; EgmRobot field 2 = 12 len feedback.
        let fb = cat(&[&[0x0A, inner.len() as u8], &inner]);
        let bytes = cat(&[&[0x12, fb.len() as u8], &fb]);
        let r = decode_robot(&bytes).unwrap();
        assert_eq!(r.feedback_joints_deg().unwrap(), &Q_DEG);
    }
}

#[test]
fn repeated_doubles_are_encoded_unpacked() {
    // proto2: one key per value.
    let j = joints(&Q_DEG);
    assert_eq!(j.encode_to_vec(), joints_unpacked());
    assert_eq!(EgmJoints::decode(joints_packed().as_slice()).unwrap(), j);
    // A mix of packed and unpacked runs of the same field concatenates.
    let mixed = cat(&[&[0x09], &D5, &[0x0A, 0x10], &D1, &D2]);
    assert_eq!(
        EgmJoints::decode(mixed.as_slice()).unwrap().joints,
        vec![5.0, 1.0, 2.0]
    );
}

#[test]
fn sensor_joint_reply_encodes_exactly() {
    let s = EgmSensor {
        header: Some(EgmHeader {
            seqno: Some(1),
            tm: Some(4),
            mtype: Some(MessageType::Correction as i32),
        }),
        planned: Some(EgmPlanned {
            joints: Some(joints(&Q_DEG)),
            ..Default::default()
        }),
        speed_ref: Some(EgmSpeedRef {
            joints: Some(joints(&[0.0, 0.0, 0.0, 0.0, 0.0, 10.0])),
            ..Default::default()
        }),
        rapid_to_robot: None,
    };
    let speed = cat(&[
        &[0x09],
        &D0,
        &[0x09],
        &D0,
        &[0x09],
        &D0,
        &[0x09],
        &D0,
        &[0x09],
        &D0,
        &[0x09],
        &D10,
    ]);
    let expected = cat(&[
        // header: seqno 1, tm 4, mtype CORRECTION (3)
        &[0x0A, 0x06, 0x08, 0x01, 0x10, 0x04, 0x18, 0x03],
        // planned (2) { joints (1) { 54 bytes } }: 56 = 0x38
        &[0x12, 0x38, 0x0A, 0x36],
        &joints_unpacked(),
        // speedRef (3) { joints (1) { 54 bytes } }
        &[0x1A, 0x38, 0x0A, 0x36],
        &speed,
    ]);
    assert_eq!(encode_sensor(&s), expected);
    assert_eq!(decode_sensor(&expected).unwrap(), s);
}

#[test]
fn required_fields_are_encoded_even_when_zero() {
    let c = EgmCartesian {
        x: 0.0,
        y: 0.0,
        z: 0.0,
    };
    assert_eq!(
        c.encode_to_vec(),
        cat(&[&[0x09], &D0, &[0x11], &D0, &[0x19], &D0])
    );
    let m = EgmMotorState { state: 0 };
    assert_eq!(m.encode_to_vec(), [0x08, 0x00]);
    let k = EgmClock { sec: 0, usec: 0 };
    assert_eq!(k.encode_to_vec(), [0x08, 0x00, 0x10, 0x00]);
}

#[test]
fn pose_reply_and_path_correction_encode_exactly() {
    let s = EgmSensor {
        planned: Some(EgmPlanned {
            cartesian: Some(EgmPose {
                pos: Some(EgmCartesian {
                    x: 400.0,
                    y: 0.0,
                    z: 5.0,
                }),
                orient: Some(EgmQuaternion {
                    u0: 1.0,
                    u1: 0.0,
                    u2: 0.0,
                    u3: 0.0,
                }),
                euler: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pos = cat(&[&[0x09], &D400, &[0x11], &D0, &[0x19], &D5]); // 27 bytes
    let quat = cat(&[&[0x09], &D1, &[0x11], &D0, &[0x19], &D0, &[0x21], &D0]); // 36
    let pose = cat(&[&[0x0A, 27], &pos, &[0x12, 36], &quat]); // 67
    let expected = cat(&[&[0x12, 69, 0x12, 67], &pose]);
    assert_eq!(encode_sensor(&s), expected);
    assert_eq!(decode_sensor(&expected).unwrap(), s);

    let pc = EgmSensorPathCorr {
        header: Some(EgmHeader {
            mtype: Some(MessageType::PathCorrection as i32),
            ..Default::default()
        }),
        path_corr: Some(EgmPathCorr {
            pos: EgmCartesian {
                x: 1.0,
                y: 2.0,
                z: 0.0,
            },
            age: 48,
        }),
    };
    let pos = cat(&[&[0x09], &D1, &[0x11], &D2, &[0x19], &D0]);
    let expected = cat(&[
        &[0x0A, 0x02, 0x18, 0x04],
        &[0x12, 31, 0x0A, 27],
        &pos,
        &[0x10, 0x30],
    ]);
    assert_eq!(pc.encode_to_vec(), expected);
    assert_eq!(EgmSensorPathCorr::decode(expected.as_slice()).unwrap(), pc);
}

/// The common part of a V1.1 EgmRobot: header, feedback with time, states, test signals.
fn robot_common() -> Vec<u8> {
    let fb = cat(&[
        &[0x0A, 0x36],
        &joints_unpacked(),
        // time (4) { sec 10, usec 5 }
        &[0x22, 0x04, 0x08, 0x0A, 0x10, 0x05],
    ]);
    assert_eq!(fb.len(), 62);
    cat(&[
        &[0x0A, 0x06, 0x08, 0x07, 0x10, 0x1C, 0x18, 0x02], // header seqno 7 tm 28 DATA
        &[0x12, 62],
        &fb,
        // planned (3) { joints packed }
        &[0x1A, 52, 0x0A, 50],
        &joints_packed(),
        &[0x22, 0x02, 0x08, 0x01], // motorState ON
        &[0x2A, 0x02, 0x08, 0x03], // mciState RUNNING
        &[0x30, 0x00],             // mciConvergenceMet false
        &[0x3A, 0x09, 0x09],       // testSignals { signals [0.5] }
        &DHALF,
        &[0x42, 0x02, 0x08, 0x02], // rapidExecState RUNNING
    ])
}

fn check_common(r: &EgmRobot) {
    assert_eq!(r.seqno(), Some(7));
    assert_eq!(r.tm(), Some(28));
    assert_eq!(r.feedback_joints_deg().unwrap(), &Q_DEG);
    let t = r.feed_back.as_ref().unwrap().time.as_ref().unwrap();
    assert_eq!((t.sec, t.usec), (10, 5));
    let p = r.planned.as_ref().unwrap().joints.as_ref().unwrap();
    assert_eq!(p.joints, Q_DEG);
    assert_eq!(r.motor_state_type(), MotorStateType::On);
    assert_eq!(r.mci_state_type(), MciStateType::Running);
    assert_eq!(r.mci_convergence_met, Some(false));
    assert_eq!(r.test_signals.as_ref().unwrap().signals, vec![0.5]);
    assert_eq!(r.rapid_state_type(), RapidCtrlExecStateType::Running);
}

#[test]
fn v11_robot_with_force_decodes() {
    for force in [
        // V1.1 measuredForce, packed: force (1) [1, 2, 0.5, 0, 0, -1]
        cat(&[&[0x0A, 0x30], &D1, &D2, &DHALF, &D0, &D0, &DM1]),
        // … and unpacked
        cat(&[
            &[0x09],
            &D1,
            &[0x09],
            &D2,
            &[0x09],
            &DHALF,
            &[0x09],
            &D0,
            &[0x09],
            &D0,
            &[0x09],
            &DM1,
        ]),
    ] {
        let bytes = cat(&[
            &robot_common(),
            &[0x4A, force.len() as u8],
            &force,
            &[0x51],
            &D10, // utilizationRate 10
        ]);
        let r = decode_robot(&bytes).unwrap();
        check_common(&r);
        assert_eq!(r.utilization_rate, Some(10.0));
        let f = r.force().unwrap().unwrap();
        assert_eq!(f.schema, ForceSchema::V11);
        assert_eq!(f.fc_active, None);
        assert_eq!(f.force.as_slice(), &[1.0, 2.0, 0.5, 0.0, 0.0, -1.0]);
        assert!(f.valid());
        // Re-encoding (planned joints now unpacked: +4 bytes) decodes to the same message.
        let again = encode_robot(&r);
        assert_eq!(again.len(), bytes.len() + 4);
        assert_eq!(decode_robot(&again).unwrap(), r);
    }
}

#[test]
fn newer_schema_robot_with_force_decodes() {
    // newer measuredForce: fcActive (1) true, force (2) packed [1, 2, 0.5, 0, 0, -1]
    let force = cat(&[&[0x08, 0x01, 0x12, 0x30], &D1, &D2, &DHALF, &D0, &D0, &DM1]);
    let bytes = cat(&[
        &robot_common(),
        &[0x4A, force.len() as u8],
        &force,
        &[0x58, 0x05], // moveIndex 5
        // CollisionInfo (12) { collsionTriggered false, collDetQuota [0.5] }
        &[0x62, 0x0B, 0x08, 0x00, 0x11],
        &DHALF,
        // RAPIDfromRobot (13) { digVal true, dnum [2] }
        &[0x6A, 0x0B, 0x08, 0x01, 0x11],
        &D2,
    ]);
    let r = decode_robot(&bytes).unwrap();
    check_common(&r);
    let f = r.force().unwrap().unwrap();
    assert_eq!(f.schema, ForceSchema::Newer);
    assert_eq!(f.fc_active, Some(true));
    assert_eq!(f.force.as_slice(), &[1.0, 2.0, 0.5, 0.0, 0.0, -1.0]);
    assert!(f.valid());
    assert_eq!(r.move_index, Some(5));
    let c = r.collision_info.as_ref().unwrap();
    assert_eq!(c.collsion_triggered, Some(false));
    assert_eq!(c.coll_det_quota, vec![0.5]);
    let d = r.rapid_from_robot.as_ref().unwrap();
    assert_eq!((d.dig_val, d.dnum.clone()), (Some(true), vec![2.0]));

    // fcActive false → force not valid; unknown fields inside measuredForce are skipped.
    let off = cat(&[&[0x08, 0x00, 0x11], &D1, &[0x18, 0x07]]);
    let f = MeasuredForce::parse(&off).unwrap();
    assert_eq!(f.schema, ForceSchema::Newer);
    assert_eq!(f.force.as_slice(), &[1.0]);
    assert!(!f.valid());
}

/// The hazard the raw-bytes field avoids: a typed V1.1 measuredForce rejects the newer layout
/// and with it the whole message.
#[test]
fn typed_v11_schema_would_fail_on_newer_force() {
    #[derive(Clone, PartialEq, Message)]
    struct RobotV11 {
        #[prost(message, optional, tag = "9")]
        measured_force: Option<EgmMeasuredForceV11>,
    }
    let bytes = [0x4A, 0x02, 0x08, 0x01];
    assert!(RobotV11::decode(bytes.as_slice()).is_err());
    let r = decode_robot(&bytes).unwrap();
    assert_eq!(r.force().unwrap().unwrap().fc_active, Some(true));
}

#[test]
fn typed_force_encoders_match_hand_bytes() {
    let v11 = EgmMeasuredForceV11 {
        force: vec![1.0, 2.0],
    };
    assert_eq!(v11.encode_to_vec(), cat(&[&[0x09], &D1, &[0x09], &D2]));
    let newer = EgmMeasuredForce {
        fc_active: Some(true),
        force: vec![1.0],
    };
    assert_eq!(newer.encode_to_vec(), cat(&[&[0x08, 0x01, 0x11], &D1]));
}

#[test]
fn garbage_and_truncation_give_errors() {
    // Truncated length-delimited header.
    assert!(decode_robot(&[0x0A, 0x07, 0x08]).is_err());
    // Wrong wire type for a known field (header as varint).
    assert!(decode_robot(&[0x08, 0x01]).is_err());
    // Field number 0.
    assert!(decode_robot(&[0x00, 0x00]).is_err());
    // Unterminated varint.
    assert!(decode_robot(&[0x58, 0xFF, 0xFF]).is_err());
    // Every strict prefix of a valid message that cuts a field is an error, never a panic.
    let full = cat(&[&robot_common(), &[0x4A, 0x02, 0x08, 0x01]]);
    for n in 0..full.len() {
        let _ = decode_robot(&full[..n]);
    }
    assert!(decode_robot(&full[..full.len() - 1]).is_err());
    // Malformed measuredForce does not fail the EgmRobot; parsing it reports the error.
    let bad = decode_robot(&[0x4A, 0x03, 0x0A, 0x05, 0x00]).unwrap();
    assert!(bad.force().unwrap().is_err());
    assert!(MeasuredForce::parse(&[0x0A, 0x03, 0, 0, 0]).is_err()); // packed length % 8
    assert!(MeasuredForce::parse(&[0x09, 0, 0]).is_err()); // truncated double
    assert!(MeasuredForce::parse(&[0x0B]).is_err()); // group wire type
                                                     // Empty datagram is a valid (empty) message.
    assert_eq!(decode_robot(&[]).unwrap(), EgmRobot::default());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(r) = decode_robot(&bytes) {
            let _ = r.force();
            let _ = encode_robot(&r);
        }
        let _ = decode_sensor(&bytes);
        let _ = MeasuredForce::parse(&bytes);
    }

    #[test]
    fn mutated_valid_robot_never_panics(idx in 0usize..200, val in any::<u8>(), cut in 0usize..200) {
        let mut b = cat(&[&robot_common(), &[0x4A, 0x02, 0x08, 0x01]]);
        let i = idx % b.len();
        b[i] = val;
        b.truncate(cut.min(b.len()));
        if let Ok(r) = decode_robot(&b) {
            let _ = r.force();
        }
    }
}
