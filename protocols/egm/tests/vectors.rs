//! The driver's codec against the spec's test vectors (`protocols/vectors/egm.json`, written by
//! `make_vectors.py` from the field tables, independently of this crate and of the simulator).
//! Every `EgmRobot` vector decodes, with both decoders, to the fields it was written from; every
//! `EgmSensor` vector is exactly what this crate encodes for those fields, and decodes back.
#![allow(clippy::unwrap_used)]

use egm::{
    frame::{decode_robot_frame, SensorReply, SENSOR_REPLY_MAX},
    proto::{self, MessageType},
};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../vectors/egm.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn hex(v: &Value) -> Vec<u8> {
    let s = v["hex"].as_str().unwrap();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn six(v: &Value) -> [f64; 6] {
    f64s(v).try_into().unwrap()
}

#[test]
fn every_robot_vector_decodes_to_its_fields() {
    let all = vectors();
    let robots = all["robot"].as_array().unwrap();
    assert!(robots.len() >= 2);
    for v in robots {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v);
        let m = proto::decode_robot(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let h = m.header.clone().unwrap();
        assert_eq!(h.seqno, Some(v["seqno"].as_u64().unwrap() as u32), "{name}");
        assert_eq!(h.tm, Some(v["tm_ms"].as_u64().unwrap() as u32), "{name}");
        assert_eq!(h.mtype, Some(v["mtype"].as_i64().unwrap() as i32), "{name}");
        let fb = m.feed_back.as_ref().unwrap();
        assert_eq!(
            fb.joints.as_ref().unwrap().joints,
            f64s(&v["feedback_joints_deg"]),
            "{name}"
        );
        match fb.cartesian.as_ref() {
            Some(p) => {
                let pos = p.pos.as_ref().unwrap();
                let q = p.orient.as_ref().unwrap();
                assert_eq!(
                    vec![pos.x, pos.y, pos.z],
                    f64s(&v["feedback_pos_mm"]),
                    "{name}"
                );
                assert_eq!(
                    vec![q.u0, q.u1, q.u2, q.u3],
                    f64s(&v["feedback_quat_wxyz"]),
                    "{name}"
                );
            }
            None => assert!(v["feedback_pos_mm"].is_null(), "{name}"),
        }
        // feedBack.time (V1.1): the controller's clock since 1970.
        match fb.time.as_ref() {
            Some(t) => assert_eq!(
                t.sec * 1_000_000 + t.usec,
                v["feedback_time_us"].as_u64().unwrap(),
                "{name}"
            ),
            None => assert!(v["feedback_time_us"].is_null(), "{name}"),
        }
        assert_eq!(
            m.planned.as_ref().unwrap().joints.as_ref().unwrap().joints,
            f64s(&v["planned_joints_deg"]),
            "{name}"
        );
        assert_eq!(
            m.motor_state.as_ref().unwrap().state as i64,
            v["motor_state"].as_i64().unwrap()
        );
        assert_eq!(
            m.mci_state.as_ref().unwrap().state as i64,
            v["mci_state"].as_i64().unwrap()
        );
        assert_eq!(
            m.mci_convergence_met,
            Some(v["mci_convergence_met"].as_bool().unwrap())
        );
        assert_eq!(
            m.rapid_exec_state.as_ref().unwrap().state as i64,
            v["rapid_exec_state"].as_i64().unwrap()
        );
        // The allocation-free decoder reads the same.
        let f = decode_robot_frame(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(f.seqno(), h.seqno, "{name}");
        assert_eq!(f.tm(), h.tm, "{name}");
        assert_eq!(
            f.feedback_joints.unwrap().as_slice(),
            f64s(&v["feedback_joints_deg"]).as_slice(),
            "{name}"
        );
        assert_eq!(
            f.motor_state,
            Some(v["motor_state"].as_i64().unwrap() as i32)
        );
        assert_eq!(f.mci_state, Some(v["mci_state"].as_i64().unwrap() as i32));
        assert_eq!(
            f.rapid_exec_state,
            Some(v["rapid_exec_state"].as_i64().unwrap() as i32)
        );
        // And prost writes the same bytes back (field order, unpacked doubles, required zeros).
        assert_eq!(proto::encode_robot(&m), bytes, "{name}: re-encoded");
    }
}

#[test]
fn every_sensor_vector_is_what_the_driver_writes() {
    let all = vectors();
    let sensors = all["sensor"].as_array().unwrap();
    let mut written = 0;
    for v in sensors {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v);
        assert_eq!(v["mtype"].as_i64().unwrap(), MessageType::Correction as i64);
        let reply = SensorReply {
            seqno: v["seqno"].as_u64().unwrap() as u32,
            tm: v["tm_ms"].as_u64().unwrap() as u32,
            q_deg: six(&v["planned_joints_deg"]),
            qd_deg: (!v["speed_joints_deg_s"].is_null()).then(|| six(&v["speed_joints_deg_s"])),
        };
        if !v["decode_only"].as_bool().unwrap_or(false) {
            let mut buf = [0u8; SENSOR_REPLY_MAX];
            assert_eq!(
                reply.encode(&mut buf),
                bytes.as_slice(),
                "{name}: frame codec"
            );
            assert_eq!(
                proto::encode_sensor(&reply.to_proto()),
                bytes,
                "{name}: prost"
            );
            written += 1;
        }
        let back = proto::decode_sensor(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back, reply.to_proto(), "{name}: decoded");
    }
    assert!(written >= 2);
    for v in all["sensor_malformed"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        assert!(proto::decode_sensor(&hex(v)).is_err(), "{name}: accepted");
    }
}
