//! ATI Net F/T RDT (Raw Data Transfer) over UDP: pure protocol codec (no I/O, no clocks).
//!
//! Wire facts (protocols.md §2): all fields big-endian. Request, 8 bytes:
//! `u16 0x1234 | u16 command | u32 sample_count` (0 = stream until stopped). Response record,
//! 36 bytes: `u32 rdt_sequence | u32 ft_sequence | u32 status | i32 Fx Fy Fz Tx Ty Tz` (counts);
//! buffered mode packs several records in one datagram. Force = counts / CPF, torque = counts /
//! CPT (`cfgcpf`/`cfgcpt` of `netftapi2.xml`).

use serde::Serialize;

/// UDP port of RDT.
pub const RDT_PORT: u16 = 49152;
/// First field of every request.
pub const COMMAND_HEADER: u16 = 0x1234;
pub const REQUEST_LEN: usize = 8;
pub const RECORD_LEN: usize = 36;

/// RDT commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdtCommand {
    Stop,
    StartRealTime,
    StartBuffered,
    StartMultiUnit,
    ResetLatch,
    SetBias,
    /// Any other code (kept so a device can ignore it).
    Other(u16),
}

impl RdtCommand {
    pub fn code(self) -> u16 {
        match self {
            RdtCommand::Stop => 0x0000,
            RdtCommand::StartRealTime => 0x0002,
            RdtCommand::StartBuffered => 0x0003,
            RdtCommand::StartMultiUnit => 0x0004,
            RdtCommand::ResetLatch => 0x0041,
            RdtCommand::SetBias => 0x0042,
            RdtCommand::Other(c) => c,
        }
    }
    pub fn from_code(c: u16) -> Self {
        match c {
            0x0000 => RdtCommand::Stop,
            0x0002 => RdtCommand::StartRealTime,
            0x0003 => RdtCommand::StartBuffered,
            0x0004 => RdtCommand::StartMultiUnit,
            0x0041 => RdtCommand::ResetLatch,
            0x0042 => RdtCommand::SetBias,
            c => RdtCommand::Other(c),
        }
    }
}

/// An RDT request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdtRequest {
    pub command: RdtCommand,
    /// Samples to send; 0 = until stopped.
    pub sample_count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtiError {
    #[error("request must be {REQUEST_LEN} bytes, got {0}")]
    RequestLength(usize),
    #[error("request header 0x{0:04X} is not 0x1234")]
    RequestHeader(u16),
    #[error("datagram of {0} bytes is not a whole number of 36-byte records")]
    DatagramLength(usize),
}

impl RdtRequest {
    pub fn new(command: RdtCommand, sample_count: u32) -> Self {
        Self {
            command,
            sample_count,
        }
    }

    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..2].copy_from_slice(&COMMAND_HEADER.to_be_bytes());
        b[2..4].copy_from_slice(&self.command.code().to_be_bytes());
        b[4..8].copy_from_slice(&self.sample_count.to_be_bytes());
        b
    }

    /// The device's side.
    pub fn decode(b: &[u8]) -> Result<Self, AtiError> {
        if b.len() != REQUEST_LEN {
            return Err(AtiError::RequestLength(b.len()));
        }
        let header = u16::from_be_bytes([b[0], b[1]]);
        if header != COMMAND_HEADER {
            return Err(AtiError::RequestHeader(header));
        }
        Ok(Self {
            command: RdtCommand::from_code(u16::from_be_bytes([b[2], b[3]])),
            sample_count: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }
}

/// One 36-byte RDT record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdtRecord {
    pub rdt_sequence: u32,
    pub ft_sequence: u32,
    pub status: u32,
    /// Fx Fy Fz Tx Ty Tz, counts.
    pub counts: [i32; 6],
}

fn be_u32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

impl RdtRecord {
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..4].copy_from_slice(&self.rdt_sequence.to_be_bytes());
        b[4..8].copy_from_slice(&self.ft_sequence.to_be_bytes());
        b[8..12].copy_from_slice(&self.status.to_be_bytes());
        for (i, c) in self.counts.iter().enumerate() {
            b[12 + 4 * i..16 + 4 * i].copy_from_slice(&c.to_be_bytes());
        }
        b
    }

    /// Decodes exactly one record.
    pub fn decode(b: &[u8; RECORD_LEN]) -> Self {
        let mut counts = [0i32; 6];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = be_u32(b, 12 + 4 * i) as i32;
        }
        Self {
            rdt_sequence: be_u32(b, 0),
            ft_sequence: be_u32(b, 4),
            status: be_u32(b, 8),
            counts,
        }
    }

    /// Force (counts / CPF) and torque (counts / CPT), in the calibration's units.
    pub fn wrench(&self, counts_per_force: f64, counts_per_torque: f64) -> [f64; 6] {
        let mut w = [0.0; 6];
        for (i, o) in w.iter_mut().enumerate() {
            let per = if i < 3 {
                counts_per_force
            } else {
                counts_per_torque
            };
            *o = f64::from(self.counts[i]) / per;
        }
        w
    }
}

/// Every record of a datagram (real-time: one; buffered: several back to back).
pub fn decode_datagram(b: &[u8]) -> Result<Vec<RdtRecord>, AtiError> {
    if b.is_empty() || !b.chunks_exact(RECORD_LEN).remainder().is_empty() {
        return Err(AtiError::DatagramLength(b.len()));
    }
    Ok(b.chunks_exact(RECORD_LEN)
        .filter_map(|c| <&[u8; RECORD_LEN]>::try_from(c).ok())
        .map(RdtRecord::decode)
        .collect())
}

/// Net F/T status word bits (0 = healthy), protocols.md §2.6.
pub const STATUS_BITS: [(u32, &str); 30] = [
    (0x8000_0000, "error_summary"),
    (0x4000_0000, "cpu_ram"),
    (0x2000_0000, "digital_board"),
    (0x1000_0000, "analog_board"),
    (0x0800_0000, "serial_link"),
    (0x0400_0000, "program_memory"),
    (0x0200_0000, "halted_config_error"),
    (0x0100_0000, "settings_validation"),
    (0x0080_0000, "config_incompatible_with_calibration"),
    (0x0040_0000, "network_comm"),
    (0x0020_0000, "can"),
    (0x0010_0000, "rdt_comm"),
    (0x0008_0000, "ethernet_ip"),
    (0x0004_0000, "devicenet"),
    (0x0002_0000, "saturation_or_adc"),
    (0x0001_0000, "monitor_condition_latched"),
    (0x0000_4000, "watchdog"),
    (0x0000_2000, "stack_check"),
    (0x0000_1000, "eeprom_i2c"),
    (0x0000_0800, "flash_spi"),
    (0x0000_0400, "analog_watchdog"),
    (0x0000_0200, "excitation_current_high"),
    (0x0000_0100, "excitation_current_low"),
    (0x0000_0080, "artificial_ground"),
    (0x0000_0040, "analog_supply_high"),
    (0x0000_0020, "analog_supply_low"),
    (0x0000_0010, "serial_data_unavailable"),
    (0x0000_0008, "reference_power_monitor"),
    (0x0000_0004, "internal_temperature"),
    (0x0000_0002, "http_failure"),
];

/// Health of a status word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Ok,
    /// Exactly "error summary + monitor condition latched" (0x80010000): a threshold latched.
    Warning,
    Error,
}

/// A decoded status word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub word: u32,
    pub health: Health,
    /// Names of the set bits, most significant first (unknown bits as `bit<n>`).
    pub flags: Vec<String>,
}

pub fn decode_status(word: u32) -> Status {
    let mut flags = Vec::new();
    for bit in (0..32).rev() {
        let mask = 1u32 << bit;
        if word & mask != 0 {
            match STATUS_BITS.iter().find(|(m, _)| *m == mask) {
                Some((_, name)) => flags.push((*name).to_string()),
                None => flags.push(format!("bit{bit}")),
            }
        }
    }
    let health = match word {
        0 => Health::Ok,
        0x8001_0000 => Health::Warning,
        _ => Health::Error,
    };
    Status {
        word,
        health,
        flags,
    }
}

/// Values read from `netftapi2.xml`.
#[derive(Debug, Clone, PartialEq)]
pub struct NetFtConfig {
    pub counts_per_force: f64,
    pub counts_per_torque: f64,
    /// `scfgfu`, e.g. `N`.
    pub force_unit: Option<String>,
    /// `scfgtu`, e.g. `Nm`, `N-mm`.
    pub torque_unit: Option<String>,
    /// `comrdtrate`, Hz.
    pub rdt_rate_hz: Option<f64>,
}

fn xml_element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(xml[start..start + len].trim())
}

/// Parses the elements the driver needs from `netftapi2.xml` (`cfgcpf`, `cfgcpt` required).
pub fn parse_netftapi2(xml: &str) -> Option<NetFtConfig> {
    let num = |n: &str| {
        xml_element(xml, n)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite())
    };
    Some(NetFtConfig {
        counts_per_force: num("cfgcpf").filter(|v| *v > 0.0)?,
        counts_per_torque: num("cfgcpt").filter(|v| *v > 0.0)?,
        force_unit: xml_element(xml, "scfgfu").map(str::to_string),
        torque_unit: xml_element(xml, "scfgtu").map(str::to_string),
        rdt_rate_hz: num("comrdtrate"),
    })
}

/// Newtons per unit of a force unit string (`N`, `lbf`, `kN`, `kgf`, `gf`, `klbf`).
pub fn force_unit_to_n(unit: &str) -> Option<f64> {
    match unit.trim().to_ascii_lowercase().as_str() {
        "n" => Some(1.0),
        "kn" => Some(1000.0),
        "lbf" | "lb" => Some(4.448_221_615_260_5),
        "klbf" => Some(4_448.221_615_260_5),
        "kgf" => Some(9.806_65),
        "gf" | "g" => Some(0.009_806_65),
        _ => None,
    }
}

/// N·m per unit of a torque unit string (`Nm`, `N-m`, `N-mm`, `lbf-in`, `lbf-ft`, …).
pub fn torque_unit_to_nm(unit: &str) -> Option<f64> {
    let u: String = unit
        .trim()
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, '-' | '·' | '*' | ' ' | '.'))
        .collect();
    match u.as_str() {
        "nm" => Some(1.0),
        "nmm" => Some(0.001),
        "knm" => Some(1000.0),
        "lbfin" | "lbin" | "inlb" | "inlbf" => Some(0.112_984_829_027_6),
        "lbfft" | "lbft" | "ftlb" | "ftlbf" => Some(1.355_817_948_331_4),
        "kgfcm" => Some(0.098_066_5),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_bytes_per_spec() {
        // 12 34 | 00 02 | 00 00 00 00: start real-time streaming, infinite.
        assert_eq!(
            RdtRequest::new(RdtCommand::StartRealTime, 0).encode(),
            [0x12, 0x34, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00]
        );
        // Sample count as a plain big-endian u32 (not netft_utils' >>8,>>0,>>8,>>0).
        assert_eq!(
            RdtRequest::new(RdtCommand::StartBuffered, 0x0102_0304).encode(),
            [0x12, 0x34, 0x00, 0x03, 0x01, 0x02, 0x03, 0x04]
        );
        assert_eq!(
            RdtRequest::new(RdtCommand::SetBias, 0).encode(),
            [0x12, 0x34, 0x00, 0x42, 0, 0, 0, 0]
        );
        assert_eq!(
            RdtRequest::decode(&[0x12, 0x34, 0x00, 0x00, 0, 0, 0, 5]).unwrap(),
            RdtRequest::new(RdtCommand::Stop, 5)
        );
        assert_eq!(
            RdtRequest::decode(&[0x43, 0x21, 0, 2, 0, 0, 0, 0]),
            Err(AtiError::RequestHeader(0x4321))
        );
        assert_eq!(
            RdtRequest::decode(&[0x12, 0x34, 0, 2]),
            Err(AtiError::RequestLength(4))
        );
    }

    /// rdt_sequence 0x00000102, ft_sequence 0x0A0B0C0D, status 0x80010000,
    /// Fx = 1_000_000 (0x000F4240), Fy = −1_000_000 (0xFFF0BDC0), Fz = 2_500_000 (0x002625A0),
    /// Tx = 1000 (0x000003E8), Ty = −1 (0xFFFFFFFF), Tz = 0.
    const RECORD: [u8; 36] = [
        0x00, 0x00, 0x01, 0x02, 0x0A, 0x0B, 0x0C, 0x0D, 0x80, 0x01, 0x00, 0x00, //
        0x00, 0x0F, 0x42, 0x40, 0xFF, 0xF0, 0xBD, 0xC0, 0x00, 0x26, 0x25, 0xA0, //
        0x00, 0x00, 0x03, 0xE8, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn record_decodes_big_endian() {
        let r = decode_datagram(&RECORD).unwrap();
        assert_eq!(r.len(), 1);
        let r = r[0];
        assert_eq!(r.rdt_sequence, 0x102);
        assert_eq!(r.ft_sequence, 0x0A0B_0C0D);
        assert_eq!(r.status, 0x8001_0000);
        assert_eq!(r.counts, [1_000_000, -1_000_000, 2_500_000, 1000, -1, 0]);
        // CPF 1e6 counts/N, CPT 1e3 counts/N·m (a N / N·m calibration of the fixtures).
        let w = r.wrench(1e6, 1e3);
        assert_eq!(w, [1.0, -1.0, 2.5, 1.0, -0.001, 0.0]);
        assert_eq!(r.encode(), RECORD);
    }

    #[test]
    fn buffered_datagram_and_bad_lengths() {
        let mut two = RECORD.to_vec();
        two.extend_from_slice(&RECORD);
        assert_eq!(decode_datagram(&two).unwrap().len(), 2);
        assert_eq!(
            decode_datagram(&RECORD[..35]),
            Err(AtiError::DatagramLength(35))
        );
        assert_eq!(decode_datagram(&[]), Err(AtiError::DatagramLength(0)));
    }

    #[test]
    fn status_bits() {
        let s = decode_status(0x8001_0000);
        assert_eq!(s.health, Health::Warning);
        assert_eq!(s.flags, vec!["error_summary", "monitor_condition_latched"]);
        let s = decode_status(0x8002_0004);
        assert_eq!(s.health, Health::Error);
        assert_eq!(
            s.flags,
            vec!["error_summary", "saturation_or_adc", "internal_temperature"]
        );
        assert_eq!(decode_status(0).health, Health::Ok);
        assert_eq!(decode_status(1).flags, vec!["bit0"]);
        assert_eq!(decode_status(0x0000_8000).flags, vec!["bit15"]);
    }

    #[test]
    fn netftapi2_parses() {
        let xml = "<?xml version=\"1.0\"?><netft><prodname>Net F/T</prodname>\
                   <cfgcpf>1000000</cfgcpf><cfgcpt>1000</cfgcpt><scfgfu>N</scfgfu>\
                   <scfgtu>N-mm</scfgtu><comrdtrate>1000</comrdtrate></netft>";
        let c = parse_netftapi2(xml).unwrap();
        assert_eq!(c.counts_per_force, 1e6);
        assert_eq!(c.counts_per_torque, 1e3);
        assert_eq!(
            torque_unit_to_nm(c.torque_unit.as_deref().unwrap()),
            Some(0.001)
        );
        assert_eq!(force_unit_to_n("N"), Some(1.0));
        assert_eq!(torque_unit_to_nm("Nm"), Some(1.0));
        assert_eq!(c.rdt_rate_hz, Some(1000.0));
        assert!(parse_netftapi2("<netft><cfgcpf>0</cfgcpf><cfgcpt>1</cfgcpt></netft>").is_none());
    }

    proptest! {
        #[test]
        fn arbitrary_datagrams_never_panic(b in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode_datagram(&b);
            let _ = RdtRequest::decode(&b);
            let _ = parse_netftapi2(&String::from_utf8_lossy(&b));
            let _ = decode_status(b.len() as u32);
        }

        #[test]
        fn records_round_trip(recs in prop::collection::vec((any::<u32>(), any::<u32>(), any::<u32>(), prop::array::uniform6(any::<i32>())), 1..20)) {
            let recs: Vec<RdtRecord> = recs.into_iter().map(|(a, b, c, d)| RdtRecord { rdt_sequence: a, ft_sequence: b, status: c, counts: d }).collect();
            let bytes: Vec<u8> = recs.iter().flat_map(|r| r.encode()).collect();
            prop_assert_eq!(decode_datagram(&bytes).unwrap(), recs);
        }

        #[test]
        fn requests_round_trip(code in any::<u16>(), count in any::<u32>()) {
            let r = RdtRequest::new(RdtCommand::from_code(code), count);
            prop_assert_eq!(RdtRequest::decode(&r.encode()).unwrap(), r);
            prop_assert_eq!(r.command.code(), code);
        }
    }
}
