//! The only place that calls postcard.
//!
//! Frame on the wire: one byte [`WIRE_VERSION`], then the postcard encoding of the message.
//! Decoding rejects a wrong version, malformed postcard and trailing bytes, so a message of
//! another type that happens to be a prefix-valid encoding is still refused.

use serde::{de::DeserializeOwned, Serialize};

/// Bumped whenever any message's encoding changes (postcard is positional).
pub const WIRE_VERSION: u8 = 2;

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

/// Encodes a message: version byte + postcard.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(WIRE_VERSION);
    // postcard into a Vec cannot fail for our types (no maps with non-string keys, no
    // unsized sequences of unknown length); keep the fallible path total anyway.
    match postcard::to_extend(msg, out) {
        Ok(v) => v,
        Err(_) => vec![WIRE_VERSION],
    }
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

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
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
        };
        let bytes = encode(&js);
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
        let estop = encode(&EStop {
            stamp: Stamp::default(),
            action: EStopAction::Reset,
        });
        assert!(decode::<JointState>(&estop).is_err());
        // An out-of-range enum discriminant is malformed, not a panic.
        assert!(decode::<EStop>(&[WIRE_VERSION, 0, 0, 9]).is_err());
    }

    // Golden bytes: these freeze the encodings. If one fails, you changed the wire format:
    // bump WIRE_VERSION and update the vectors deliberately.
    #[test]
    fn golden_stamp_and_small_messages() {
        let s = Stamp {
            seq: 300,
            source_mono_ns: 1,
        };
        // version 01, seq 300 = varint ac 02, ns 1 = 01
        assert_eq!(hex(&encode(&s)), "02ac0201");
        let e = EStop {
            stamp: s,
            action: EStopAction::Reset,
        };
        assert_eq!(hex(&encode(&e)), "02ac020101");
        let m = ModeCommand {
            stamp: s,
            mode: Mode::Hybrid,
        };
        assert_eq!(hex(&encode(&m)), "02ac020103");
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
        };
        let one = "000000000000f03f";
        let zero = "0000000000000000";
        let minus_two = "00000000000000c0";
        let expected = format!(
            "02010205{one}{z4}{minus_two}{z6}010001",
            z4 = zero.repeat(4),
            z6 = zero.repeat(6)
        );
        assert_eq!(hex(&encode(&js)), expected);
    }

    #[test]
    fn golden_wrench_sample_and_command() {
        let w = WrenchSample {
            stamp: Stamp {
                seq: 2,
                source_mono_ns: 3,
            },
            device_seq: 4,
            device_status: 0,
            wrench_sensor: Wrench {
                force_n: [0.0, 0.0, 1.0],
                torque_nm: [0.0; 3],
            },
        };
        let zero = "0000000000000000";
        let one = "000000000000f03f";
        assert_eq!(
            hex(&encode(&w)),
            format!(
                "0202030400{z2}{one}{z3}",
                z2 = zero.repeat(2),
                z3 = zero.repeat(3)
            )
        );
        let c = CartesianCommand {
            stamp: Stamp {
                seq: 1,
                source_mono_ns: 1,
            },
            cycle: 9,
            target: CartesianTarget::Hold,
        };
        assert_eq!(hex(&encode(&c)), "0201010900");
    }
}
