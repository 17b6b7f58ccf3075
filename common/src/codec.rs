//! The only place that calls postcard.
//!
//! Frame on the wire: one byte [`WIRE_VERSION`], then the postcard encoding of the message.
//! Decoding rejects a wrong version, malformed postcard and trailing bytes, so a message of
//! another type that happens to be a prefix-valid encoding is still refused. Encoding failures
//! are errors ([`EncodeError`]), never a short or empty payload.

use serde::{de::DeserializeOwned, Serialize};

/// Bumped whenever any message's encoding changes (postcard is positional).
pub const WIRE_VERSION: u8 = 18;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty payload")]
    Empty,
    #[error("wire version {got}, expected {expected}")]
    Version { got: u8, expected: u8 },
    #[error("malformed {type_name}: {detail}")]
    Malformed {
        type_name: &'static str,
        detail: String,
    },
    #[error("{extra} trailing byte(s) after {type_name}")]
    Trailing {
        type_name: &'static str,
        extra: usize,
    },
}

/// A value postcard cannot encode (e.g. a sequence of unknown length, or a `Serialize` impl
/// that fails). None of the cell's wire types can produce it; a type that does must not be
/// put on the bus, so the publisher sends nothing rather than a truncated frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode {type_name}: {detail}")]
pub struct EncodeError {
    pub type_name: &'static str,
    pub detail: String,
}

/// Encodes a message: version byte + postcard.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(64);
    out.push(WIRE_VERSION);
    postcard::to_extend(msg, out).map_err(|e| EncodeError {
        type_name: short_type_name::<T>(),
        detail: e.to_string(),
    })
}

/// Decodes a message, refusing version mismatches and trailing bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let type_name = short_type_name::<T>();
    let (&version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if version != WIRE_VERSION {
        return Err(DecodeError::Version {
            got: version,
            expected: WIRE_VERSION,
        });
    }
    let (msg, rest) = postcard::take_from_bytes::<T>(body).map_err(|e| DecodeError::Malformed {
        type_name,
        detail: e.to_string(),
    })?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing {
            type_name,
            extra: rest.len(),
        });
    }
    Ok(msg)
}

fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::*;
    use std::fmt::Debug;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Hex text (whitespace ignored) → bytes.
    fn unhex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s
            .bytes()
            .filter(|c| !c.is_ascii_whitespace())
            .map(|c| match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                _ => panic!("not a hex digit: {}", c as char),
            })
            .collect();
        assert!(
            digits.len().is_multiple_of(2),
            "odd number of hex digits in {s}"
        );
        digits.chunks(2).map(|p| (p[0] << 4) | p[1]).collect()
    }

    fn enc<T: Serialize>(msg: &T) -> Vec<u8> {
        encode(msg).expect("every wire type encodes")
    }

    // f64 values as postcard writes them: the 8 IEEE-754 bytes, little-endian (no varint).
    // Written by hand from the bit patterns; `float_constants_are_the_ieee_bytes` checks them
    // against the standard library, independently of postcard.
    const Z: &str = "0000000000000000"; // 0.0
    const ONE: &str = "000000000000f03f"; // 1.0 = 0x3ff0_0000_0000_0000
    const M1: &str = "000000000000f0bf"; // -1.0 = 0xbff0_0000_0000_0000
    const TWO: &str = "0000000000000040"; // 2.0 = 0x4000_0000_0000_0000
    const M2: &str = "00000000000000c0"; // -2.0 = 0xc000_0000_0000_0000
    const HALF: &str = "000000000000e03f"; // 0.5 = 0x3fe0_0000_0000_0000
    const MHALF: &str = "000000000000e0bf"; // -0.5 = 0xbfe0_0000_0000_0000
    const QUARTER: &str = "000000000000d03f"; // 0.25 = 0x3fd0_0000_0000_0000
    const ONE_HALF: &str = "000000000000f83f"; // 1.5 = 0x3ff8_0000_0000_0000
    const THREE: &str = "0000000000000840"; // 3.0 = 0x4008_0000_0000_0000
    const M10: &str = "00000000000024c0"; // -10.0 = 0xc024_0000_0000_0000

    // Varints (LEB128, 7 bits per byte, low group first, 0x80 = more follows), checked by hand:
    // 300 = 0b10_0101100 → 0xac (0x2c | 0x80), 0x02.
    const V300: &str = "ac02";
    // 128 = 0b1_0000000 → 0x80, 0x01.
    const V128: &str = "8001";
    // 1_000_000 = 0xf4240: groups 0x40, 0x04, 0x3d → 0xc0, 0x84, 0x3d
    // (0x3d·2¹⁴ + 0x04·2⁷ + 0x40 = 999_424 + 512 + 64).
    const V1E6: &str = "c0843d";

    fn z(n: usize) -> String {
        Z.repeat(n)
    }

    /// Asserts the exact bytes, and that the golden bytes decode back to the message.
    fn golden<T>(msg: &T, expected: &str)
    where
        T: Serialize + DeserializeOwned + PartialEq + Debug,
    {
        let want = unhex(expected);
        assert_eq!(hex(&enc(msg)), hex(&want), "encoding of {msg:?}");
        assert_eq!(
            decode::<T>(&want).as_ref(),
            Ok(msg),
            "decoding golden bytes"
        );
    }

    /// Every message type carried by a topic has a golden test below; the list is checked
    /// against `topic::TOPICS` so a new topic cannot slip through unpinned.
    const PINNED: &[&str] = &[
        "msg::JointState",
        "msg::JointCommand",
        "msg::ToolPose",
        "msg::CartesianCommand",
        "msg::WrenchSample",
        "msg::WrenchEstimate",
        "msg::ModeCommand",
        "msg::HybridTask",
        "msg::HybridState",
        "msg::MoveTarget",
        "msg::SafetyState",
        "msg::EStop",
        "msg::EStopReset",
        "msg::MotionEnd",
        "msg::PlantState",
        "msg::PlantEffortCommand",
        "msg::SimTruth",
        "msg::Enable",
        "msg::GuideState",
        "msg::PlaybackState",
    ];

    #[test]
    fn every_topic_type_is_pinned() {
        for t in crate::topic::TOPICS {
            assert!(
                PINNED.contains(&t.type_name),
                "{} ({}) has no golden-bytes test",
                t.type_name,
                t.suffix
            );
        }
    }

    #[test]
    fn float_constants_are_the_ieee_bytes() {
        for (text, v) in [
            (Z, 0.0f64),
            (ONE, 1.0),
            (M1, -1.0),
            (TWO, 2.0),
            (M2, -2.0),
            (HALF, 0.5),
            (MHALF, -0.5),
            (QUARTER, 0.25),
            (ONE_HALF, 1.5),
            (THREE, 3.0),
            (M10, -10.0),
        ] {
            assert_eq!(text, hex(&v.to_le_bytes()), "{v}");
        }
    }

    #[test]
    fn round_trip_and_trailing_rejected() {
        let js = JointState {
            stamp: Stamp {
                seq: 7,
                source_mono_ns: 1_000,
            },
            cycle: 3,
            q_rad: [0.1, -0.2, 0.3, 0.0, 1.0, -1.0],
            qd_rad_s: [0.0; 6],
            robot: RobotStatus {
                motors_on: true,
                external_control_active: true,
                program_running: false,
            },
            period_s: 0.004,
        };
        let bytes = enc(&js);
        assert_eq!(decode::<JointState>(&bytes), Ok(js));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode::<JointState>(&longer),
            Err(DecodeError::Trailing { extra: 1, .. })
        ));
        let mut wrong_version = bytes.clone();
        wrong_version[0] = 99;
        assert!(matches!(
            decode::<JointState>(&wrong_version),
            Err(DecodeError::Version { got: 99, .. })
        ));
        assert_eq!(decode::<JointState>(&[]), Err(DecodeError::Empty));
        assert!(matches!(
            decode::<JointState>(&bytes[..bytes.len() - 1]),
            Err(DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn other_types_are_rejected() {
        let estop = enc(&EStopReset {
            stamp: Stamp::default(),
            scope: ResetScope::All,
        });
        assert!(decode::<JointState>(&estop).is_err());
        // An out-of-range enum discriminant is malformed, not a panic.
        assert!(decode::<EStop>(&[WIRE_VERSION, 0, 0, 9]).is_err());
    }

    /// A value postcard refuses: a sequence whose length is not known up front.
    struct UnknownLength;
    impl Serialize for UnknownLength {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            let mut seq = s.serialize_seq(None)?;
            seq.serialize_element(&1u8)?;
            seq.end()
        }
    }

    /// A `Serialize` impl that fails.
    struct Failing;
    impl Serialize for Failing {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refused"))
        }
    }

    #[test]
    fn encode_failure_is_an_error_not_a_short_payload() {
        let e = encode(&UnknownLength).expect_err("unknown-length sequence");
        assert_eq!(e.type_name, "UnknownLength");
        let e = encode(&Failing).expect_err("failing Serialize");
        assert_eq!(e.type_name, "Failing");
        assert!(e.to_string().contains("Failing"), "{e}");
    }

    // Golden bytes: these freeze the encodings. If one fails, you changed the wire format:
    // bump WIRE_VERSION and update the vectors deliberately. Layout rules (postcard): the
    // version byte (WIRE_VERSION); structs and arrays are their fields in order with no length or tag;
    // u64/u32 are varints; f64 are 8 bytes little-endian; bool is one byte 00/01; an enum is
    // its variant index as a varint followed by the variant's fields.

    #[test]
    fn golden_stamp() {
        let s = Stamp {
            seq: 300,
            source_mono_ns: 1,
        };
        // version 10, seq 300 = ac 02, ns 1 = 01.
        golden(&s, "12 ac02 01");
        // u64::MAX: nine 7-bit groups of ones (ff ×9) and the last bit (01).
        golden(
            &Stamp {
                seq: u64::MAX,
                source_mono_ns: 0,
            },
            "12 ffffffffffffffffff01 00",
        );
    }

    #[test]
    fn golden_joint_state() {
        let js = JointState {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 2,
            },
            cycle: 5,
            q_rad: [1.0, 0.0, 0.0, 0.0, 0.0, -2.0],
            qd_rad_s: [0.0; 6],
            robot: RobotStatus {
                motors_on: true,
                external_control_active: false,
                program_running: true,
            },
            period_s: 0.25,
        };
        // stamp 01 02 | cycle 05 | q_rad 6 f64 | qd_rad_s 6 f64 | robot: three bools 01 00 01 |
        // period_s f64.
        golden(
            &js,
            &format!("12 01 02 05 {ONE}{}{M2} {} 01 00 01 {QUARTER}", z(4), z(6)),
        );
    }

    #[test]
    fn golden_joint_command_with_motion_tag() {
        let c = JointCommand {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 2,
            },
            cycle: 3,
            motion: MotionTag {
                robot_boot: 1_000_000,
                motion_id: 300,
            },
            q_rad: [0.5, 0.0, 0.0, 0.0, 0.0, 0.0],
            qd_rad_s: [0.0, 0.0, 0.0, 0.0, 0.0, -1.0],
            flags: KinFlags {
                unreachable: false,
                near_singular: true,
                position_limited: false,
                speed_limited: true,
            },
        };
        // stamp | cycle 03 | motion: robot_boot c0 84 3d, motion_id ac 02 | q | qd | 4 bools.
        golden(
            &c,
            &format!(
                "12 01 02 03 {V1E6} {V300} {HALF}{} {}{M1} 00 01 00 01",
                z(5),
                z(5)
            ),
        );
    }

    #[test]
    fn golden_tool_pose() {
        let mut jacobian_base = [[0.0; 6]; 6];
        jacobian_base[0][0] = 1.0;
        jacobian_base[5][5] = -2.0;
        let p = ToolPose {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            cycle: 7,
            q_rad: [0.0, -0.5, 0.0, 0.0, 0.0, 0.0],
            tool0_in_base: Pose {
                position_m: [0.0, 0.0, 1.0],
                quat_wxyz: [1.0, 0.0, 0.0, 0.0],
            },
            tcp_in_base: Pose {
                position_m: [0.5, 0.0, 1.0],
                quat_wxyz: [0.0, 1.0, 0.0, 0.0],
            },
            tcp_twist_base: Twist {
                linear_m_s: [0.0, 0.0, 0.25],
                angular_rad_s: [0.0, 0.0, -1.0],
            },
            jacobian_base,
            manipulability: 1.5,
            period_s: 0.5,
        };
        // Pose = position (3 f64) then quaternion (4 f64); the Jacobian is 36 f64, row-major.
        golden(
            &p,
            &format!(
                "12 01 01 07 {Z}{MHALF}{} \
                 {Z}{Z}{ONE} {ONE}{Z}{Z}{Z} \
                 {HALF}{Z}{ONE} {Z}{ONE}{Z}{Z} \
                 {Z}{Z}{QUARTER} {Z}{Z}{M1} \
                 {ONE}{}{M2} \
                 {ONE_HALF} {HALF}",
                z(4),
                z(34)
            ),
        );
    }

    /// The variant index of each `CartesianTarget` (exhaustive: a new variant breaks the build
    /// here until it has a vector).
    fn target_index(t: &CartesianTarget) -> &'static str {
        match t {
            CartesianTarget::Hold => "00",
            CartesianTarget::Pose(_) => "01",
            CartesianTarget::Twist { .. } => "02",
            CartesianTarget::Joints { .. } => "03",
        }
    }

    #[test]
    fn golden_cartesian_command_every_target() {
        let cmd = |target| CartesianCommand {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            cycle: 9,
            motion: MotionTag {
                robot_boot: 2,
                motion_id: 3,
            },
            target,
        };
        // stamp 01 01 | cycle 09 | motion 02 03 | target.
        let head = "12 01 01 09 02 03";
        let hold = CartesianTarget::Hold;
        assert_eq!(target_index(&hold), "00");
        golden(&cmd(hold), &format!("{head} 00"));
        let pose = CartesianTarget::Pose(Pose {
            position_m: [0.5, 0.0, 0.25],
            quat_wxyz: [0.0, 0.0, 0.0, 1.0],
        });
        assert_eq!(target_index(&pose), "01");
        // Newtype variant: index, then the pose's 7 f64.
        golden(
            &cmd(pose),
            &format!("{head} 01 {HALF}{Z}{QUARTER} {Z}{Z}{Z}{ONE}"),
        );
        let twist = CartesianTarget::Twist {
            twist: Twist {
                linear_m_s: [0.0, 0.0, -0.5],
                angular_rad_s: [1.0, 0.0, 0.0],
            },
        };
        assert_eq!(target_index(&twist), "02");
        // Struct variant: index, then its one field (6 f64); no dt_s since version 3.
        golden(&cmd(twist), &format!("{head} 02 {Z}{Z}{MHALF} {ONE}{Z}{Z}"));
        let joints = CartesianTarget::Joints {
            q_rad: [0.5, 0.0, 0.0, 0.0, 0.0, -1.0],
        };
        assert_eq!(target_index(&joints), "03");
        // Struct variant (since version 5): index, then 6 f64.
        golden(&cmd(joints), &format!("{head} 03 {HALF}{Z}{Z}{Z}{Z}{M1}"));
        // Exactly four variants: index 4 is malformed.
        assert!(decode::<CartesianCommand>(&unhex(&format!("{head} 04"))).is_err());
    }

    #[test]
    fn golden_wrench_sample() {
        let w = WrenchSample {
            stamp: Stamp {
                seq: 2,
                source_mono_ns: 3,
            },
            device_seq: 4,
            // ATI "error + saturation" status word.
            device_status: 0x8002_0000,
            wrench_sensor: Wrench {
                force_n: [0.0, 0.0, 1.0],
                torque_nm: [0.0, 0.5, 0.0],
            },
        };
        // u32 is a varint too: 0x8002_0000 has bit 17 (group 2, bit 3 → 0x08) and bit 31
        // (group 4, bit 3 → 0x08): 80 80 88 80 08.
        golden(
            &w,
            &format!("12 02 03 04 8080888008 {Z}{Z}{ONE} {Z}{HALF}{Z}"),
        );
    }

    fn fault_index(f: WrenchFault) -> &'static str {
        match f {
            WrenchFault::None => "00",
            WrenchFault::NotTared => "01",
            WrenchFault::Stale => "02",
            WrenchFault::NonFinite => "03",
            WrenchFault::Saturated => "04",
            WrenchFault::Spike => "05",
            WrenchFault::DeviceError => "06",
            WrenchFault::NoPose => "07",
        }
    }

    #[test]
    fn golden_wrench_estimate_every_fault() {
        let all = [
            WrenchFault::None,
            WrenchFault::NotTared,
            WrenchFault::Stale,
            WrenchFault::NonFinite,
            WrenchFault::Saturated,
            WrenchFault::Spike,
            WrenchFault::DeviceError,
            WrenchFault::NoPose,
        ];
        let wrenches = format!("{ONE}{}  {}{M1}  {Z}{Z}{TWO}{}", z(5), z(5), z(3));
        for (i, fault) in all.into_iter().enumerate() {
            assert_eq!(fault_index(fault), format!("{i:02x}"));
            let e = WrenchEstimate {
                stamp: Stamp {
                    seq: 1,
                    source_mono_ns: 2,
                },
                sample_seq: 128,
                sample_mono_ns: 3,
                fault,
                sensor: Wrench {
                    force_n: [1.0, 0.0, 0.0],
                    torque_nm: [0.0; 3],
                },
                tool: Wrench {
                    force_n: [0.0; 3],
                    torque_nm: [0.0, 0.0, -1.0],
                },
                base: Wrench {
                    force_n: [0.0, 0.0, 2.0],
                    torque_nm: [0.0; 3],
                },
                peak_force_n: 2.0,
                peak_torque_nm: 1.0,
                fast_swing_n: 0.5,
            };
            // stamp | sample_seq 128 = 80 01 | sample_mono_ns 3 | fault index | 3 wrenches × 6 f64
            // | peak force, peak torque | fast swing (wire v16).
            golden(
                &e,
                &format!(
                    "12 01 02 {V128} 03 {} {wrenches} {TWO}{ONE}{HALF}",
                    fault_index(fault)
                ),
            );
        }
        let beyond = format!("12 01 02 {V128} 03 08 {}", z(18));
        assert!(decode::<WrenchEstimate>(&unhex(&beyond)).is_err());
    }

    fn mode_index(m: Mode) -> &'static str {
        match m {
            Mode::Idle => "00",
            Mode::Hold => "01",
            Mode::LeadThrough => "02",
            Mode::Hybrid => "03",
            Mode::Playback => "04",
            Mode::Move => "05",
        }
    }

    #[test]
    fn golden_mode_command_every_mode() {
        let all = [
            Mode::Idle,
            Mode::Hold,
            Mode::LeadThrough,
            Mode::Hybrid,
            Mode::Playback,
            Mode::Move,
        ];
        for (i, mode) in all.into_iter().enumerate() {
            assert_eq!(mode_index(mode), format!("{i:02x}"));
            let m = ModeCommand {
                stamp: Stamp {
                    seq: 300,
                    source_mono_ns: 1,
                },
                mode,
            };
            golden(&m, &format!("12 {V300} 01 {}", mode_index(mode)));
        }
        assert!(decode::<ModeCommand>(&unhex(&format!("12 {V300} 01 06"))).is_err());
    }

    fn profile_index(p: &Profile) -> &'static str {
        match p {
            Profile::Constant(_) => "00",
            Profile::Step { .. } => "01",
            Profile::Ramp { .. } => "02",
            Profile::Sine { .. } => "03",
            Profile::Series(_) => "04",
        }
    }

    #[test]
    fn golden_hybrid_task_every_profile_frame_and_robot() {
        let reference = [
            Profile::Constant(1.0),
            Profile::Step {
                before: 0.0,
                after: 2.0,
                at_s: 0.5,
            },
            Profile::Ramp {
                from: 0.0,
                to: -1.0,
                start_s: 0.25,
                duration_s: 1.5,
            },
            Profile::Sine {
                offset: 0.5,
                amplitude: -0.5,
                freq_hz: 0.25,
                phase_rad: 1.0,
            },
            Profile::Series(vec![[0.0, 1.0], [2.0, 3.0]]),
            Profile::Constant(0.0),
        ];
        let idx: Vec<_> = reference.iter().map(profile_index).collect();
        assert_eq!(idx, ["00", "01", "02", "03", "04", "00"]);
        let mut t = HybridTask {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            name: "ab".into(),
            robot: TaskRobot::Plant,
            frame_kind: FrameKind::Tracking,
            frame: Pose {
                position_m: [0.0, 0.0, 0.5],
                quat_wxyz: [1.0, 0.0, 0.0, 0.0],
            },
            force_axes: [false, false, true, false, false, false],
            reference,
            duration_s: 2.0,
            from_contact: true,
            rate_hz: 0.5,
            gains: None,
            limits: LimitRequest::default(),
            fixed_gains: false,
        };
        // stamp | name: len 02 "ab" | robot 01 | frame_kind 02 | pose | 6 bools | 6 profiles
        // (variant index, fields; the series: length 02, points) | duration | from_contact 01
        // | rate | gains: None 00 | limits: twelve fields, each None 00 | fixed_gains 00.
        let head = format!("12 01 01 02 6162 01 02 {Z}{Z}{HALF} {ONE}{Z}{Z}{Z} 000001000000");
        let profiles = format!(
            "00 {ONE} 01 {Z}{TWO}{HALF} 02 {Z}{M1}{QUARTER}{ONE_HALF} \
             03 {HALF}{MHALF}{QUARTER}{ONE} 04 02 {Z}{ONE}{TWO}{THREE} 00 {Z}"
        );
        golden(
            &t,
            &format!(
                "{head} {profiles} {TWO} 01 {HALF} 00 {} 00",
                "00".repeat(12)
            ),
        );
        for (kind, i) in [(FrameKind::Base, "00"), (FrameKind::Tool, "01")] {
            t.frame_kind = kind;
            t.robot = TaskRobot::Arm;
            let head = format!("12 01 01 02 6162 00 {i} {Z}{Z}{HALF} {ONE}{Z}{Z}{Z} 000001000000");
            golden(
                &t,
                &format!(
                    "{head} {profiles} {TWO} 01 {HALF} 00 {} 00",
                    "00".repeat(12)
                ),
            );
        }
        // Some gains (01 then the fields in order) and every limit (each 01 then its value).
        t.gains = Some(HybridGains {
            kp: [1.0; 6],
            feedforward: 0.5,
            ..Default::default()
        });
        t.limits = LimitRequest::all(&HybridLimits {
            force_axis_speed_m_s: 0.25,
            force_axis_speed_rad_s: 0.5,
            deviation_m: 1.0,
            deviation_rad: 2.0,
            max_force_n: 3.0,
            max_torque_nm: 1.5,
            contact_threshold_n: 1.0,
            contact_loss_s: 0.25,
            approach_timeout_s: 2.0,
            approach_travel_m: 0.5,
            reapproach_travel_m: 0.25,
            contact_travel_m: 1.0,
        });
        let head = format!("12 01 01 02 6162 00 01 {Z}{Z}{HALF} {ONE}{Z}{Z}{Z} 000001000000");
        let gains = format!("01 {} {} {HALF} {}", ONE.repeat(6), z(36), z(6));
        let limits = format!(
            "01{QUARTER} 01{HALF} 01{ONE} 01{TWO} 01{THREE} 01{ONE_HALF} 01{ONE} 01{QUARTER} 01{TWO} \
             01{HALF} 01{QUARTER} 01{ONE}"
        );
        golden(
            &t,
            &format!("{head} {profiles} {TWO} 01 {HALF} {gains} {limits} 00"),
        );
        // A partial request: only max_force_n.
        t.limits = LimitRequest {
            max_force_n: Some(3.0),
            ..Default::default()
        };
        let limits = format!("00 00 00 00 01{THREE} 00 00 00 00 00 00 00");
        // … and fixed gains (the last field, 01).
        t.fixed_gains = true;
        golden(
            &t,
            &format!("{head} {profiles} {TWO} 01 {HALF} {gains} {limits} 01"),
        );
    }

    #[test]
    fn golden_hybrid_state_every_phase() {
        for (i, phase) in [
            HybridPhase::Approach,
            HybridPhase::Contact,
            HybridPhase::ContactLost,
            HybridPhase::Done,
            HybridPhase::Aborted,
        ]
        .into_iter()
        .enumerate()
        {
            let s = HybridState {
                stamp: Stamp {
                    seq: 1,
                    source_mono_ns: 2,
                },
                motion_id: 300,
                t_s: 0.5,
                clock_s: 2.0,
                phase,
                force_ref: [0.0, 0.0, 2.0, 0.0, 0.0, 0.0],
                force: [0.0, 0.0, 1.5, 0.0, 0.0, 0.0],
                position_ref: [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                position: [0.5, 0.0, 0.0, 0.0, 0.0, 0.0],
                output: [0.0, 0.0, 0.0, 0.0, 0.0, -1.0],
                limited: 4,
                bridged: true,
                seating: false,
                frame_in_base: Pose::IDENTITY,
                gains_for_n_per_m: [0.0, 0.0, 2.0],
                stiffness_estimate_n_per_m: [0.0, 0.0, 0.5],
                ref_time_s: 2.0,
                speed_scale: 0.5,
            };
            golden(
                &s,
                &format!(
                    "12 01 02 {V300} {HALF} {TWO} {i:02x} {Z}{Z}{TWO}{} {Z}{Z}{ONE_HALF}{} \
                     {ONE}{} {HALF}{} {}{M1} 04 01 00 {} {ONE}{} {Z}{Z}{TWO} {Z}{Z}{HALF} \
                     {TWO}{HALF}",
                    z(3),
                    z(3),
                    z(5),
                    z(5),
                    z(5),
                    z(3),
                    z(3)
                ),
            );
        }
    }

    #[test]
    fn golden_sim_truth() {
        let t = SimTruth {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 2,
            },
            t_s: 0.5,
            contact_force_base_n: [0.0, 0.0, 2.0],
            hand_force_base_n: [-1.0, 0.0, 0.0],
            in_contact: true,
            tcp_in_base_m: [0.25, 0.0, 1.5],
            hand_active: true,
            hand_pos_base_m: [0.5, 0.0, 1.0],
            q_ref_rad: [0.5, 0.0, 0.0, 0.0, 0.0, -1.0],
            q_ref_seqno: Some(300),
        };
        golden(
            &t,
            &format!(
                "12 01 02 {HALF} {Z}{Z}{TWO} {M1}{Z}{Z} 01 {QUARTER}{Z}{ONE_HALF} 01 {HALF}{Z}{ONE} \
                 {HALF}{Z}{Z}{Z}{Z}{M1} 01 ac02"
            ),
        );
    }

    #[test]
    fn golden_enable() {
        let e = Enable {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 2,
            },
            source: 300,
            token: 5,
        };
        // v9 appended the session token.
        golden(&e, "12 01 02 ac02 05");
    }

    #[test]
    fn golden_guide_state_every_law() {
        for (law, idx) in [
            (GuideLaw::Admittance, "00"),
            (GuideLaw::Stiffness, "01"),
            (GuideLaw::Staircase, "02"),
        ] {
            let g = GuideState {
                stamp: Stamp {
                    seq: 1,
                    source_mono_ns: 2,
                },
                motion_id: 3,
                law,
                t_s: 0.5,
                enabled: true,
                force_n: [1.0, 0.0, 0.0],
                torque_nm: [0.0, 0.0, -1.0],
                twist: Twist {
                    linear_m_s: [0.25, 0.0, 0.0],
                    angular_rad_s: [0.0; 3],
                },
                tcp_cmd_m: [0.5, 0.0, 1.0],
                damping_scale: 2.0,
                speed_limited: false,
                wall_limited: true,
                steps: 4,
                waypoints: 128,
            };
            golden(
                &g,
                &format!(
                    "12 01 02 03 {idx} {HALF} 01 {ONE}{Z}{Z} {Z}{Z}{M1} {QUARTER}{Z}{Z} {Z}{Z}{Z} \
                     {HALF}{Z}{ONE} {TWO} 00 01 04 {V128}"
                ),
            );
        }
    }

    #[test]
    fn golden_playback_state_every_phase() {
        let phases = [
            PlaybackPhase::Approach,
            PlaybackPhase::Running,
            PlaybackPhase::Pausing,
            PlaybackPhase::Paused,
            PlaybackPhase::Stopping,
            PlaybackPhase::Stopped,
            PlaybackPhase::Done,
            PlaybackPhase::Aborted,
        ];
        for (i, phase) in phases.into_iter().enumerate() {
            let p = PlaybackState {
                stamp: Stamp {
                    seq: 1,
                    source_mono_ns: 2,
                },
                motion_id: 3,
                program: "ab".into(),
                phase,
                waypoint: 1,
                waypoints: 3,
                progress: 0.5,
                t_s: 1.0,
                duration_s: 2.0,
                q_ref_rad: [0.0, 0.0, 0.0, 0.0, 0.0, 0.25],
            };
            // String: varint length, then UTF-8 ("ab" = 61 62).
            golden(
                &p,
                &format!(
                    "12 01 02 03 02 6162 {i:02x} 01 03 {HALF} {ONE} {TWO} {Z}{Z}{Z}{Z}{Z}{QUARTER}"
                ),
            );
        }
    }

    #[test]
    fn golden_move_target() {
        let m = MoveTarget {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            tcp_in_base: Pose {
                position_m: [0.5, 0.0, 0.25],
                quat_wxyz: [1.0, 0.0, 0.0, 0.0],
            },
            max_speed_m_s: 0.25,
            max_rot_speed_rad_s: 1.0,
        };
        golden(
            &m,
            &format!("12 01 01 {HALF}{Z}{QUARTER} {ONE}{Z}{Z}{Z} {QUARTER} {ONE}"),
        );
    }

    fn level_index(l: SafetyLevel) -> &'static str {
        match l {
            SafetyLevel::Active => "00",
            SafetyLevel::Hold => "01",
            SafetyLevel::ProtectiveStop => "02",
            SafetyLevel::EmergencyStop => "03",
        }
    }

    fn reason_index(r: SafetyReason) -> &'static str {
        match r {
            SafetyReason::None => "00",
            SafetyReason::NoCommandYet => "01",
            SafetyReason::CommandStale => "02",
            SafetyReason::CommandInvalid => "03",
            SafetyReason::JointLimit => "04",
            SafetyReason::SpeedLimit => "05",
            SafetyReason::EStop => "06",
            SafetyReason::RobotNotReady => "07",
            SafetyReason::ShuttingDown => "08",
            SafetyReason::RobotSilent => "09",
            SafetyReason::MotionEnded => "0a",
            SafetyReason::OtherRobotBoot => "0b",
            SafetyReason::MeasuredOutOfLimits => "0c",
            SafetyReason::ProtectiveRequest => "0d",
        }
    }

    fn safety(level: SafetyLevel, reason: SafetyReason) -> SafetyState {
        SafetyState {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            level,
            reason,
            since_cycle: 300,
            rejected_commands: 2,
            robot_boot: 1_000_000,
            motion_id: 0,
        }
    }

    #[test]
    fn golden_safety_state_every_level_and_reason() {
        // stamp | level | reason | since_cycle ac 02 | rejected 02 | robot_boot c0 84 3d |
        // motion_id 00.
        let vector = |l: &str, r: &str| format!("12 01 01 {l} {r} {V300} 02 {V1E6} 00");
        let levels = [
            SafetyLevel::Active,
            SafetyLevel::Hold,
            SafetyLevel::ProtectiveStop,
            SafetyLevel::EmergencyStop,
        ];
        for (i, level) in levels.into_iter().enumerate() {
            assert_eq!(level_index(level), format!("{i:02x}"));
            golden(
                &safety(level, SafetyReason::None),
                &vector(level_index(level), "00"),
            );
        }
        let reasons = [
            SafetyReason::None,
            SafetyReason::NoCommandYet,
            SafetyReason::CommandStale,
            SafetyReason::CommandInvalid,
            SafetyReason::JointLimit,
            SafetyReason::SpeedLimit,
            SafetyReason::EStop,
            SafetyReason::RobotNotReady,
            SafetyReason::ShuttingDown,
            SafetyReason::RobotSilent,
            SafetyReason::MotionEnded,
            SafetyReason::OtherRobotBoot,
            SafetyReason::MeasuredOutOfLimits,
            SafetyReason::ProtectiveRequest,
        ];
        for (i, reason) in reasons.into_iter().enumerate() {
            assert_eq!(reason_index(reason), format!("{i:02x}"));
            golden(
                &safety(SafetyLevel::Hold, reason),
                &vector("01", reason_index(reason)),
            );
        }
        // A running motion with a large id: the last field is a 10-byte varint.
        let running = SafetyState {
            motion_id: u64::MAX,
            ..safety(SafetyLevel::Active, SafetyReason::None)
        };
        golden(
            &running,
            &format!("12 01 01 00 00 {V300} 02 {V1E6} ffffffffffffffffff01"),
        );
        // Exactly four levels and fourteen reasons.
        assert!(decode::<SafetyState>(&unhex(&vector("04", "00"))).is_err());
        assert!(decode::<SafetyState>(&unhex(&vector("01", "0e"))).is_err());
    }

    fn action_index(a: EStopAction) -> &'static str {
        match a {
            EStopAction::Engage => "00",
            EStopAction::Protective => "01",
        }
    }

    fn scope_index(s: ResetScope) -> &'static str {
        match s {
            ResetScope::All => "00",
            ResetScope::ProtectiveOnly => "01",
        }
    }

    #[test]
    fn golden_motion_end() {
        let m = MotionEnd {
            stamp: Stamp {
                seq: 300,
                source_mono_ns: 1,
            },
            motion: MotionTag {
                robot_boot: 2,
                motion_id: 300,
            },
            stop: StopCategory::Controlled,
        };
        // stamp (seq 300, ns 1) | robot_boot 2 | motion 300 | Controlled 00.
        golden(&m, &format!("12 {V300} 01 02 {V300} 00"));
        // Protective(Impact): variant 1, cause 4.
        let p = MotionEnd {
            stop: StopCategory::Protective(ProtectiveCause::Impact),
            ..m
        };
        golden(&p, &format!("12 {V300} 01 02 {V300} 01 04"));
    }

    #[test]
    fn golden_estop_every_action() {
        // Only stops travel on `robot/estop`: a reset there (the old variants 1 and 2) is
        // malformed, so a rule on that key can never let one through.
        let all = [EStopAction::Engage, EStopAction::Protective];
        for (i, action) in all.into_iter().enumerate() {
            assert_eq!(action_index(action), format!("{i:02x}"));
            let e = EStop {
                stamp: Stamp {
                    seq: 300,
                    source_mono_ns: 1,
                },
                action,
            };
            golden(&e, &format!("12 {V300} 01 {}", action_index(action)));
        }
        assert!(decode::<EStop>(&unhex(&format!("12 {V300} 01 02"))).is_err());
    }

    #[test]
    fn golden_estop_reset_every_scope() {
        let all = [ResetScope::All, ResetScope::ProtectiveOnly];
        for (i, scope) in all.into_iter().enumerate() {
            assert_eq!(scope_index(scope), format!("{i:02x}"));
            let r = EStopReset {
                stamp: Stamp {
                    seq: 300,
                    source_mono_ns: 1,
                },
                scope,
            };
            golden(&r, &format!("12 {V300} 01 {}", scope_index(scope)));
        }
        assert!(decode::<EStopReset>(&unhex(&format!("12 {V300} 01 02"))).is_err());
    }

    #[test]
    fn golden_plant_state() {
        let p = PlantState {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            t_s: 0.5,
            q: [1.0, 0.25],
            qd: [0.0, -1.0],
            hand_pos_m: [0.5, 0.0],
            wrist_force_n: [0.0, 2.0],
            contact_force_n: [0.0, -2.0],
            in_contact: true,
            effort_applied: [1.5, 0.0],
        };
        golden(
            &p,
            &format!(
                "12 01 01 {HALF} {ONE}{QUARTER} {Z}{M1} {HALF}{Z} {Z}{TWO} {Z}{M2} 01 \
                 {ONE_HALF}{Z}"
            ),
        );
    }

    #[test]
    fn golden_plant_effort_command() {
        let c = PlantEffortCommand {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            effort: [3.0, -0.5],
        };
        golden(&c, &format!("12 01 01 {THREE}{MHALF}"));
    }
}

/// Property tests of the bus codec: every frame round-trips bit-exactly, anything else —
/// random bytes, truncations, trailing bytes, another wire version, one mutated byte — is
/// refused with an error or decodes to a message that re-encodes consistently; nothing panics.
/// A decoded message with a non-finite value is refused by its `Check` (the bus drops it).
#[cfg(test)]
mod props {
    use super::*;
    use crate::msg::*;
    use proptest::prelude::*;

    fn f6() -> impl Strategy<Value = [f64; AXES]> {
        prop::array::uniform6(any::<f64>())
    }

    fn stamp() -> impl Strategy<Value = Stamp> {
        (any::<u64>(), any::<u64>()).prop_map(|(seq, source_mono_ns)| Stamp {
            seq,
            source_mono_ns,
        })
    }

    fn joint_command() -> impl Strategy<Value = JointCommand> {
        (
            stamp(),
            any::<u64>(),
            (any::<u64>(), any::<u64>()),
            f6(),
            f6(),
            any::<[bool; 4]>(),
        )
            .prop_map(
                |(stamp, cycle, (robot_boot, motion_id), q_rad, qd_rad_s, f)| JointCommand {
                    stamp,
                    cycle,
                    motion: MotionTag {
                        robot_boot,
                        motion_id,
                    },
                    q_rad,
                    qd_rad_s,
                    flags: KinFlags {
                        unreachable: f[0],
                        near_singular: f[1],
                        position_limited: f[2],
                        speed_limited: f[3],
                    },
                },
            )
    }

    fn joint_state() -> impl Strategy<Value = JointState> {
        (
            stamp(),
            any::<u64>(),
            f6(),
            f6(),
            any::<[bool; 3]>(),
            any::<f64>(),
        )
            .prop_map(|(stamp, cycle, q_rad, qd_rad_s, r, period_s)| JointState {
                stamp,
                cycle,
                q_rad,
                qd_rad_s,
                robot: RobotStatus {
                    motors_on: r[0],
                    external_control_active: r[1],
                    program_running: r[2],
                },
                period_s,
            })
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Decodes `bytes` as several wire types; none may panic, and whatever decodes must
    /// re-encode to a frame that decodes to the same message.
    fn decode_any(bytes: &[u8]) {
        if let Ok(m) = decode::<JointCommand>(bytes) {
            let again: JointCommand = decode(&encode(&m).unwrap_or_default()).unwrap_or_default();
            assert_eq!(bits(&again.q_rad), bits(&m.q_rad));
            if m.q_rad
                .iter()
                .chain(m.qd_rad_s.iter())
                .any(|v| !v.is_finite())
            {
                assert!(m.check().is_err(), "a non-finite command passed its check");
            }
        }
        if let Ok(m) = decode::<JointState>(bytes) {
            let again: JointState = decode(&encode(&m).unwrap_or_default()).unwrap_or_default();
            assert_eq!(bits(&again.q_rad), bits(&m.q_rad));
            if m.q_rad.iter().any(|v| !v.is_finite()) {
                assert!(
                    m.check().is_err(),
                    "a non-finite joint state passed its check"
                );
            }
        }
        let _ = decode::<HybridTask>(bytes);
        let _ = decode::<WrenchEstimate>(bytes);
        let _ = decode::<CartesianCommand>(bytes);
        let _ = decode::<SafetyState>(bytes);
        let _ = decode::<EStop>(bytes);
        let _ = decode::<MoveTarget>(bytes);
        let _ = decode::<ModeCommand>(bytes);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn joint_commands_round_trip_bit_exactly(m in joint_command()) {
            let b = encode(&m).expect("encodes");
            prop_assert_eq!(b[0], WIRE_VERSION);
            let back: JointCommand = decode(&b).expect("decodes");
            prop_assert_eq!(bits(&back.q_rad), bits(&m.q_rad));
            prop_assert_eq!(bits(&back.qd_rad_s), bits(&m.qd_rad_s));
            prop_assert_eq!((back.stamp, back.cycle, back.motion, back.flags), (m.stamp, m.cycle, m.motion, m.flags));
            let finite = m.q_rad.iter().chain(m.qd_rad_s.iter()).all(|v| v.is_finite());
            prop_assert_eq!(m.check().is_ok(), finite);
        }

        #[test]
        fn joint_states_round_trip_bit_exactly(m in joint_state()) {
            let b = encode(&m).expect("encodes");
            let back: JointState = decode(&b).expect("decodes");
            prop_assert_eq!(bits(&back.q_rad), bits(&m.q_rad));
            prop_assert_eq!(bits(&back.qd_rad_s), bits(&m.qd_rad_s));
            prop_assert_eq!(back.period_s.to_bits(), m.period_s.to_bits());
            prop_assert_eq!((back.stamp, back.cycle, back.robot), (m.stamp, m.cycle, m.robot));
        }

        #[test]
        fn every_strict_prefix_and_any_trailing_byte_is_refused(m in joint_command(), extra in any::<u8>()) {
            let b = encode(&m).expect("encodes");
            for cut in 0..b.len() {
                prop_assert!(decode::<JointCommand>(&b[..cut]).is_err(), "prefix of {} bytes decoded", cut);
            }
            let mut long = b.clone();
            long.push(extra);
            let trailing = matches!(decode::<JointCommand>(&long), Err(DecodeError::Trailing { extra: 1, .. }));
            prop_assert!(trailing);
        }

        #[test]
        fn another_wire_version_is_refused(m in joint_state(), v in any::<u8>()) {
            prop_assume!(v != WIRE_VERSION);
            let mut b = encode(&m).expect("encodes");
            b[0] = v;
            let refused = matches!(decode::<JointState>(&b), Err(DecodeError::Version { got, .. }) if got == v);
            prop_assert!(refused);
        }

        #[test]
        fn random_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..300)) {
            let mut b = vec![WIRE_VERSION];
            b.extend_from_slice(&body);
            decode_any(&b);
            decode_any(&body);
        }

        #[test]
        fn a_mutated_byte_never_panics(m in joint_command(), at in any::<prop::sample::Index>(), x in any::<u8>()) {
            let mut b = encode(&m).expect("encodes");
            let i = at.index(b.len());
            b[i] ^= x;
            decode_any(&b);
        }
    }
}
