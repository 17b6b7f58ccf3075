//! ATI Net F/T RDT on the device's side (protocols.md §2), written from the spec: every field
//! big-endian. A request is 8 bytes, `u16 0x1234 | u16 command | u32 sample_count`; a record is
//! 36 bytes, `u32 rdt_sequence | u32 ft_sequence | u32 status | i32 Fx Fy Fz Tx Ty Tz` (counts).

/// The RDT UDP port.
pub const PORT: u16 = 49152;
pub const REQUEST_HEADER: u16 = 0x1234;
pub const RECORD_BYTES: usize = 36;

/// The commands of §2.2.
pub const STOP: u16 = 0x0000;
pub const START_REAL_TIME: u16 = 0x0002;
pub const START_BUFFERED: u16 = 0x0003;
pub const START_MULTI_UNIT: u16 = 0x0004;
pub const RESET_LATCH: u16 = 0x0041;
pub const SET_BIAS: u16 = 0x0042;

/// A request as the device reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub command: u16,
    /// 0: stream until stopped.
    pub sample_count: u32,
}

/// Reads a request; `None` when it is not 8 bytes starting with 0x1234 (the device ignores it).
pub fn read_request(b: &[u8]) -> Option<Request> {
    let b: &[u8; 8] = b.try_into().ok()?;
    if u16::from_be_bytes([b[0], b[1]]) != REQUEST_HEADER {
        return None;
    }
    Some(Request {
        command: u16::from_be_bytes([b[2], b[3]]),
        sample_count: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    })
}

/// Writes one record.
pub fn record(rdt_sequence: u32, ft_sequence: u32, status: u32, counts: &[i32; 6]) -> [u8; 36] {
    let mut b = [0u8; RECORD_BYTES];
    b[0..4].copy_from_slice(&rdt_sequence.to_be_bytes());
    b[4..8].copy_from_slice(&ft_sequence.to_be_bytes());
    b[8..12].copy_from_slice(&status.to_be_bytes());
    for (i, c) in counts.iter().enumerate() {
        b[12 + 4 * i..16 + 4 * i].copy_from_slice(&c.to_be_bytes());
    }
    b
}

/// Newtons per unit of a calibration's force unit (`scfgfu`; §2.4's unit list).
pub fn newtons_per(unit: &str) -> Option<f64> {
    Some(match unit {
        "N" => 1.0,
        "kN" => 1000.0,
        "lbf" => 4.448_221_615_260_5,
        "klbf" => 4_448.221_615_260_5,
        "kgf" => 9.806_65,
        "gf" => 0.009_806_65,
        _ => return None,
    })
}

/// Newton-metres per unit of a calibration's torque unit (`scfgtu`).
pub fn newton_metres_per(unit: &str) -> Option<f64> {
    Some(match unit {
        "Nm" | "N-m" => 1.0,
        "N-mm" | "Nmm" => 0.001,
        "kN-m" | "kNm" => 1000.0,
        "lbf-in" => 0.112_984_829_027_616_7,
        "lbf-ft" => 1.355_817_948_331_400_4,
        "kgf-cm" => 0.098_066_5,
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::vectors::{hex, load};

    #[test]
    fn every_request_vector_reads_as_its_fields() {
        let all = load("ati.json");
        for v in all["requests"].as_array().unwrap() {
            let name = v["name"].as_str().unwrap();
            let r = read_request(&hex(v)).unwrap();
            assert_eq!(
                u64::from(r.command),
                v["command"].as_u64().unwrap(),
                "{name}"
            );
            assert_eq!(
                u64::from(r.sample_count),
                v["sample_count"].as_u64().unwrap(),
                "{name}"
            );
        }
        assert_eq!(read_request(&[0x12, 0x34, 0, 2, 0, 0, 0]), None);
        assert_eq!(read_request(&[0x34, 0x12, 0, 2, 0, 0, 0, 0]), None);
    }

    #[test]
    fn every_record_vector_is_what_the_device_writes() {
        let all = load("ati.json");
        let mut both = Vec::new();
        for v in all["records"].as_array().unwrap() {
            let counts: Vec<i32> = v["counts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap() as i32)
                .collect();
            let b = record(
                v["rdt_sequence"].as_u64().unwrap() as u32,
                v["ft_sequence"].as_u64().unwrap() as u32,
                v["status"].as_u64().unwrap() as u32,
                &counts.try_into().unwrap(),
            );
            assert_eq!(b.to_vec(), hex(v), "{}", v["name"]);
            both.extend_from_slice(&b);
        }
        assert_eq!(both, hex(&all["buffered"]));
    }
}
