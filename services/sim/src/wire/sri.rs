//! The SRI M812x box's side of its protocol (protocols.md §3), written from the spec.
//!
//! - Commands arrive as ASCII lines `AT+<CMD>=<args>\r\n` (queries `=?`); replies are
//!   `ACK+<CMD>=<value>$OK\r\n`, six values separated by `;`, the decoupling matrix as
//!   `(r1c1,…,r1c6);…;(r6c1,…,r6c6)`. `AT+GSD` starts streaming without a reply.
//! - Frames: `AA 55 | PackageLength u16 BE | PackageNo u16 BE | data | sum of the data bytes
//!   mod 256`; PackageLength counts the bytes after itself. `E`: 6 × f32 little-endian; `C`:
//!   6 × u16 big-endian ADC counts.
//! - `C` conversion on the host: `DAT [mV/V] = 1000·((RAW − AmpZero)/65535·5)/Gain/EXC`,
//!   `F = M·DAT`; the box produces the counts the other way round.

use serde::{Deserialize, Serialize};

/// The box's port.
pub const PORT: u16 = 4008;
/// The channel list `SGDM` names (all six, one point each).
pub const CHANNELS: &str = "(A01,A02,A03,A04,A05,A06)";

/// The output mode `SGDM` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `C`: raw ADC counts.
    #[default]
    RawCounts,
    /// `E`: engineering units (f32).
    Calibrated,
}

impl Mode {
    fn letter(self) -> &'static str {
        match self {
            Mode::RawCounts => "C",
            Mode::Calibrated => "E",
        }
    }
}

/// The box's amplifier chain and calibration (what `AMPZ`, `CHNAPG`, `EXMV`, `DCPM` answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxCalibration {
    /// AmpZero per channel, ADC counts.
    pub amp_zero: [f64; 6],
    /// Amplifier gain per channel.
    pub gain: [f64; 6],
    /// Bridge excitation per channel, V.
    pub excitation_v: [f64; 6],
    /// Decoupling matrix, row k → output k, column j → channel j (units per mV/V).
    pub decoupling: [[f64; 6]; 6],
}

impl BoxCalibration {
    /// ADC counts of bridge signals `mvv` (mV/V), rounded, clipped to 0..=65535; and whether
    /// a channel clipped.
    pub fn counts(&self, mvv: &[f64; 6]) -> ([u16; 6], bool) {
        let mut out = [0u16; 6];
        let mut clipped = false;
        for i in 0..6 {
            let volts = mvv[i] * self.gain[i] * self.excitation_v[i] / 1000.0;
            let raw = (volts / 5.0 * 65535.0 + self.amp_zero[i]).round();
            let raw = if raw.is_finite() { raw } else { 0.0 };
            clipped |= !(0.0..=65535.0).contains(&raw);
            // Clamped into the u16 range first: the cast is exact.
            out[i] = raw.clamp(0.0, 65535.0) as u16;
        }
        (out, clipped)
    }
}

/// A command line as the box reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `AT+SMPR=<Hz>`.
    SampleRate(u32),
    /// `AT+SGDM=<channels>;<E|C>;<points>;(WMA:n)`, one point per channel; the value as sent
    /// (the reply echoes it).
    Mode(Mode, String),
    /// `AT+DCKMD=SUM`.
    CheckModeSum,
    /// `AT+DCPM=<matrix>`.
    Decoupling(Box<[[f64; 6]; 6]>),
    /// `AT+<NAME>=?`.
    Query(String),
    /// `AT+GSD`.
    Start,
    /// `AT+GSD=STOP`.
    Stop,
    /// `AT+GOD`.
    One,
}

/// Why a line is not a command the box knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine(pub String);

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not a command the box knows: {:?}", self.0)
    }
}

fn numbers<const N: usize>(s: &str, sep: char) -> Option<[f64; N]> {
    let parts: Vec<&str> = s.split(sep).collect();
    if parts.len() != N {
        return None;
    }
    let mut out = [0.0; N];
    for (o, p) in out.iter_mut().zip(parts) {
        *o = p.trim().parse::<f64>().ok().filter(|v| v.is_finite())?;
    }
    Some(out)
}

fn matrix(s: &str) -> Option<[[f64; 6]; 6]> {
    let rows: Vec<&str> = s.split(';').collect();
    if rows.len() != 6 {
        return None;
    }
    let mut m = [[0.0; 6]; 6];
    for (row, text) in m.iter_mut().zip(rows) {
        let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
        *row = numbers::<6>(inner, ',')?;
    }
    Some(m)
}

/// Reads one command line (line end optional).
pub fn read_line(line: &str) -> Result<Request, BadLine> {
    let bad = || BadLine(line.to_string());
    let body = line.trim().strip_prefix("AT+").ok_or_else(bad)?;
    let (name, arg) = match body.split_once('=') {
        Some((n, a)) => (n.trim(), Some(a.trim())),
        None => (body.trim(), None),
    };
    Ok(match (name, arg) {
        (n, Some("?")) if !n.is_empty() => Request::Query(n.to_string()),
        ("GSD", None) => Request::Start,
        ("GSD", Some("STOP")) => Request::Stop,
        ("GOD", None) => Request::One,
        ("SMPR", Some(a)) => {
            Request::SampleRate(a.parse().ok().filter(|hz| *hz > 0).ok_or_else(bad)?)
        }
        ("SGDM", Some(a)) => {
            let f: Vec<&str> = a.split(';').map(str::trim).collect();
            let mode = match f.get(1).copied() {
                Some("C") => Mode::RawCounts,
                Some("E") => Mode::Calibrated,
                _ => return Err(bad()),
            };
            if f.get(2).is_some_and(|p| p.parse::<u32>().ok() != Some(1)) {
                return Err(bad());
            }
            Request::Mode(mode, a.to_string())
        }
        ("DCKMD", Some("SUM")) => Request::CheckModeSum,
        ("DCPM", Some(a)) => Request::Decoupling(Box::new(matrix(a).ok_or_else(bad)?)),
        _ => return Err(bad()),
    })
}

/// `ACK+<name>=<value>$OK\r\n`.
pub fn ack(name: &str, value: &str) -> String {
    format!("ACK+{name}={value}$OK\r\n")
}

/// Six values separated by `;`.
pub fn six(v: &[f64; 6]) -> String {
    v.map(|x| x.to_string()).join(";")
}

/// The matrix as `(…);(…)`.
pub fn decoupling(m: &[[f64; 6]; 6]) -> String {
    m.map(|r| format!("({})", r.map(|x| x.to_string()).join(",")))
        .join(";")
}

/// The `SGDM` query's value, as the box answers it.
pub fn mode_value(m: Mode) -> String {
    format!("{CHANNELS};{};1;(WMA:1.000000)", m.letter())
}

fn frame(package_no: u16, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(data.len() + 7);
    f.extend_from_slice(&[0xAA, 0x55]);
    // PackageLength: number (2) + data + checksum (1); data ≤ 24 bytes.
    f.extend_from_slice(&((data.len() + 3) as u16).to_be_bytes());
    f.extend_from_slice(&package_no.to_be_bytes());
    f.extend_from_slice(data);
    f.push(data.iter().fold(0u8, |s, b| s.wrapping_add(*b)));
    f
}

/// An `E` frame: six little-endian f32.
pub fn frame_e(package_no: u16, values: &[f32; 6]) -> Vec<u8> {
    let mut d = [0u8; 24];
    for (i, v) in values.iter().enumerate() {
        d[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    frame(package_no, &d)
}

/// A `C` frame: six big-endian u16 counts.
pub fn frame_c(package_no: u16, counts: &[u16; 6]) -> Vec<u8> {
    let mut d = [0u8; 12];
    for (i, c) in counts.iter().enumerate() {
        d[2 * i..2 * i + 2].copy_from_slice(&c.to_be_bytes());
    }
    frame(package_no, &d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::vectors::{f64s, hex, load};

    #[test]
    fn every_frame_vector_is_what_the_box_writes() {
        let all = load("sri.json");
        for v in all["frames"].as_array().unwrap() {
            let name = v["name"].as_str().unwrap();
            let n = v["package_no"].as_u64().unwrap() as u16;
            let b = match v["mode"].as_str().unwrap() {
                "E" => {
                    let x: Vec<f32> = f64s(&v["values"]).iter().map(|x| *x as f32).collect();
                    frame_e(n, &x.try_into().unwrap())
                }
                _ => {
                    let c: Vec<u16> = f64s(&v["counts"]).iter().map(|x| *x as u16).collect();
                    frame_c(n, &c.try_into().unwrap())
                }
            };
            assert_eq!(b, hex(v), "{name}");
        }
    }

    #[test]
    fn every_command_vector_reads_as_its_command() {
        let all = load("sri.json");
        for v in all["commands"].as_array().unwrap() {
            let line = v["line"].as_str().unwrap();
            let r = read_line(line).unwrap();
            let mode = |m: &str| {
                if m == "E" {
                    Mode::Calibrated
                } else {
                    Mode::RawCounts
                }
            };
            match v["command"].as_str().unwrap() {
                "SMPR" => assert_eq!(r, Request::SampleRate(v["value"].as_u64().unwrap() as u32)),
                "SGDM" => {
                    assert!(
                        matches!(r, Request::Mode(m, _) if m == mode(v["mode"].as_str().unwrap()))
                    )
                }
                "DCKMD" => assert_eq!(r, Request::CheckModeSum),
                "GSD" => assert_eq!(r, Request::Start),
                "GSD=STOP" => assert_eq!(r, Request::Stop),
                "GOD" => assert_eq!(r, Request::One),
                "query" => assert_eq!(r, Request::Query(v["param"].as_str().unwrap().into())),
                other => panic!("vector command {other}"),
            }
        }
        assert!(read_line("AT+SMPR=0").is_err());
        assert!(read_line("AT+SGDM=(A01);X;1").is_err());
        assert!(read_line("HELLO").is_err());
    }

    #[test]
    fn every_reply_vector_is_what_the_box_writes() {
        let all = load("sri.json");
        for v in all["acks"].as_array().unwrap() {
            let line = v["line"].as_str().unwrap();
            let name = v["name"].as_str().unwrap();
            let value = if let Some(x) = v.get("value") {
                x.as_str().unwrap().to_string()
            } else if let Some(x) = v.get("six") {
                six(&f64s(x).try_into().unwrap())
            } else if let Some(x) = v.get("mode") {
                mode_value(if x == "E" {
                    Mode::Calibrated
                } else {
                    Mode::RawCounts
                })
            } else {
                let rows: Vec<[f64; 6]> = v["matrix"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| f64s(r).try_into().unwrap())
                    .collect();
                decoupling(&rows.try_into().unwrap())
            };
            assert_eq!(ack(name, &value), line);
        }
    }

    #[test]
    fn counts_invert_the_hosts_conversion() {
        let all = load("sri.json");
        let c = &all["conversion"];
        let s = |k: &str| -> [f64; 6] { f64s(&c[k]).try_into().unwrap() };
        let cal = BoxCalibration {
            amp_zero: s("amp_zero"),
            gain: s("gain"),
            excitation_v: s("excitation_v"),
            decoupling: [[0.0; 6]; 6],
        };
        let (counts, clipped) = cal.counts(&s("mvv"));
        assert!(!clipped);
        let want: Vec<u16> = f64s(&c["counts"]).iter().map(|x| *x as u16).collect();
        assert_eq!(counts.to_vec(), want);
    }
}
