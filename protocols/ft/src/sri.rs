//! SRI M812x (M8128) interface box: pure protocol codec (no I/O, no clocks).
//!
//! Wire facts (protocols.md §3):
//! - ASCII commands `AT+<CMD>=<args>\r\n`, queries `AT+<CMD>=?\r\n`; replies
//!   `ACK+<CMD>=<value>$OK\r\n`, six-channel values separated by `;`, the decoupling matrix as
//!   `(r1c1,…,r1c6);…;(r6c1,…,r6c6)`. `AT+GSD` starts streaming without an ACK.
//! - Binary frames: `AA 55 | PackageLength u16 BE | PackageNo u16 BE | data | checksum u8`;
//!   PackageLength counts the bytes after itself (number + data + checksum), so a frame is
//!   PackageLength + 4 bytes. Checksum = sum of the data bytes (not the number) mod 256.
//! - `E` (calibrated): data = 6 × f32 **little-endian** Fx Fy Fz Mx My Mz; 31-byte frames,
//!   PackageLength 27. `C` (raw): data = 6 × u16 **big-endian** ADC counts; 19-byte frames,
//!   PackageLength 15. One point per channel only (other lengths are counted as length errors).
//! - `C` conversion: `DAT_i [mV/V] = 1000·((RAW_i − AmpZero_i)/65535·5)/Gain_i/EXC_i`, then
//!   `F = M·DAT` (row k of the decoupling matrix M → output k, column j → channel j).

use serde::{Deserialize, Serialize};

use crate::seq::SeqTracker;

/// Default TCP port of the box.
pub const DEFAULT_PORT: u16 = 4008;
/// Frame header bytes.
pub const HEADER: [u8; 2] = [0xAA, 0x55];
/// Channels per frame.
pub const CHANNELS: usize = 6;
/// The channel selection used in `AT+SGDM`.
pub const CHANNEL_LIST: &str = "(A01,A02,A03,A04,A05,A06)";
/// Full scale of the ADC in volts (16-bit, 5 V span).
pub const ADC_SPAN_V: f64 = 5.0;
/// ADC counts over the span.
pub const ADC_COUNTS: f64 = 65535.0;

pub type Matrix6 = [[f64; CHANNELS]; CHANNELS];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SriError {
    #[error("not an AT command: {0:?}")]
    NotCommand(String),
    #[error("unknown command AT+{0}")]
    UnknownCommand(String),
    #[error("bad argument for AT+{0}: {1:?}")]
    BadArgument(String, String),
    #[error("not an ACK reply: {0:?}")]
    NotAck(String),
    #[error("reply to AT+{0} is not OK: {1:?}")]
    NotOk(String, String),
    #[error("expected {expected} values, got {got} in {text:?}")]
    Count {
        expected: usize,
        got: usize,
        text: String,
    },
    #[error("not a number: {0:?}")]
    Number(String),
}

/// Output format selected with `AT+SGDM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DataFormat {
    /// `C`: raw ADC counts, converted by the host.
    #[default]
    RawCounts,
    /// `E`: engineering units computed by the box (floats).
    Calibrated,
}

impl DataFormat {
    /// The SGDM letter.
    pub fn letter(self) -> char {
        match self {
            DataFormat::RawCounts => 'C',
            DataFormat::Calibrated => 'E',
        }
    }
    pub fn from_letter(s: &str) -> Option<Self> {
        match s.trim() {
            "C" => Some(DataFormat::RawCounts),
            "E" => Some(DataFormat::Calibrated),
            _ => None,
        }
    }
    /// Bytes of the data block.
    pub fn data_len(self) -> usize {
        match self {
            DataFormat::RawCounts => 2 * CHANNELS,
            DataFormat::Calibrated => 4 * CHANNELS,
        }
    }
    /// PackageLength field: number (2) + data + checksum (1).
    pub fn package_length(self) -> u16 {
        // data_len ≤ 24: the cast cannot truncate.
        (2 + self.data_len() + 1) as u16
    }
    /// Whole frame: header (2) + length (2) + PackageLength.
    pub fn frame_len(self) -> usize {
        4 + usize::from(self.package_length())
    }
}

/// Parameters queried with `AT+<name>=?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    SampleRate,
    Format,
    Decoupling,
    AmpZero,
    Gain,
    Excitation,
    Port,
    Firmware,
    CheckMode,
}

impl Param {
    pub const ALL: [Param; 9] = [
        Param::SampleRate,
        Param::Format,
        Param::Decoupling,
        Param::AmpZero,
        Param::Gain,
        Param::Excitation,
        Param::Port,
        Param::Firmware,
        Param::CheckMode,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Param::SampleRate => "SMPR",
            Param::Format => "SGDM",
            Param::Decoupling => "DCPM",
            Param::AmpZero => "AMPZ",
            Param::Gain => "CHNAPG",
            Param::Excitation => "EXMV",
            Param::Port => "ETPT",
            Param::Firmware => "SFWV",
            Param::CheckMode => "DCKMD",
        }
    }
    pub fn from_name(name: &str) -> Option<Param> {
        Param::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The AT commands this crate speaks.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `AT+SMPR=<hz>`.
    SetSampleRate(u32),
    /// `AT+SGDM=(A01,…,A06);<E|C>;1;(WMA:1)`: all six channels, one point, unfiltered.
    SetFormat(DataFormat),
    /// `AT+DCKMD=SUM`: one-byte sum checksum.
    SetCheckModeSum,
    /// `AT+DCPM=(…);…`: write the decoupling matrix.
    SetDecoupling(Box<Matrix6>),
    /// `AT+<name>=?`.
    Query(Param),
    /// `AT+GSD`: start continuous upload (no ACK).
    StartStream,
    /// `AT+GSD=STOP`.
    StopStream,
    /// `AT+GOD`: one frame.
    GetOne,
}

impl Command {
    /// The command line including the terminating CR LF.
    pub fn encode(&self) -> String {
        let body = match self {
            Command::SetSampleRate(hz) => format!("SMPR={hz}"),
            Command::SetFormat(f) => format!("SGDM={CHANNEL_LIST};{};1;(WMA:1)", f.letter()),
            Command::SetCheckModeSum => "DCKMD=SUM".to_string(),
            Command::SetDecoupling(m) => format!("DCPM={}", format_matrix(m)),
            Command::Query(p) => format!("{}=?", p.name()),
            Command::StartStream => "GSD".to_string(),
            Command::StopStream => "GSD=STOP".to_string(),
            Command::GetOne => "GOD".to_string(),
        };
        format!("AT+{body}\r\n")
    }

    /// Parses one command line (with or without the line end) — the box's side.
    pub fn parse(line: &str) -> Result<Command, SriError> {
        let line = line.trim_end_matches(['\r', '\n']).trim();
        let rest = line
            .strip_prefix("AT+")
            .ok_or_else(|| SriError::NotCommand(line.to_string()))?;
        let (name, arg) = match rest.split_once('=') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (rest.trim(), None),
        };
        let bad = |a: &str| SriError::BadArgument(name.to_string(), a.to_string());
        if arg == Some("?") {
            return Param::from_name(name)
                .map(Command::Query)
                .ok_or_else(|| SriError::UnknownCommand(name.to_string()));
        }
        match (name, arg) {
            ("GSD", None) => Ok(Command::StartStream),
            ("GSD", Some("STOP")) => Ok(Command::StopStream),
            ("GOD", None) => Ok(Command::GetOne),
            ("SMPR", Some(a)) => a
                .parse::<u32>()
                .ok()
                .filter(|hz| *hz > 0)
                .map(Command::SetSampleRate)
                .ok_or_else(|| bad(a)),
            ("SGDM", Some(a)) => parse_format(a).map(Command::SetFormat),
            ("DCKMD", Some("SUM")) => Ok(Command::SetCheckModeSum),
            ("DCPM", Some(a)) => parse_matrix(a).map(|m| Command::SetDecoupling(Box::new(m))),
            (_, Some(a)) if Param::from_name(name).is_some() => Err(bad(a)),
            _ => Err(SriError::UnknownCommand(name.to_string())),
        }
    }
}

/// `ACK+<name>=<value>$OK\r\n`.
pub fn encode_ack(name: &str, value: &str) -> String {
    format!("ACK+{name}={value}$OK\r\n")
}

/// A parsed reply line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub name: String,
    /// The value without the `$OK` suffix.
    pub value: String,
    /// The reply ended with `$OK`.
    pub ok: bool,
}

impl Ack {
    /// The value if the reply was OK.
    pub fn ok_value(&self) -> Result<&str, SriError> {
        if self.ok {
            Ok(&self.value)
        } else {
            Err(SriError::NotOk(self.name.clone(), self.value.clone()))
        }
    }
}

/// Parses one reply line `ACK+NAME=VALUE$OK` (line end optional).
pub fn parse_ack(line: &str) -> Result<Ack, SriError> {
    let line = line.trim_end_matches(['\r', '\n']);
    let rest = line
        .strip_prefix("ACK+")
        .ok_or_else(|| SriError::NotAck(line.to_string()))?;
    let (name, value) = rest.split_once('=').unwrap_or((rest, ""));
    let (value, ok) = match value.strip_suffix("$OK") {
        Some(v) => (v, true),
        None => (value, false),
    };
    Ok(Ack {
        name: name.trim().to_string(),
        value: value.to_string(),
        ok,
    })
}

/// Takes the first complete `ACK+…\r\n` line out of a receive buffer, discarding everything
/// before it (stray frames, noise). `None` until a complete line is there; a partial line is
/// kept. At most `ACK_MAX_LINE` bytes are searched for the line end.
pub fn take_ack(buf: &mut Vec<u8>) -> Option<Result<Ack, SriError>> {
    let start = find(buf, b"ACK+")?;
    let Some(end) = find(&buf[start..], b"\r\n") else {
        if buf.len() - start > ACK_MAX_LINE {
            // No line end in sight: this "ACK+" was noise.
            buf.drain(..start + 1);
        } else {
            buf.drain(..start);
        }
        return None;
    };
    let line = String::from_utf8_lossy(&buf[start..start + end]).to_string();
    buf.drain(..start + end + 2);
    Some(parse_ack(&line))
}

/// Longest reply line accepted (a decoupling matrix is ~500 characters).
pub const ACK_MAX_LINE: usize = 4096;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_number(s: &str) -> Result<f64, SriError> {
    let s = s.trim();
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| SriError::Number(s.to_string()))
}

/// Six `;`-separated numbers (AMPZ, CHNAPG, EXMV replies).
pub fn parse_six(value: &str) -> Result<[f64; CHANNELS], SriError> {
    let parts: Vec<&str> = value.split(';').collect();
    if parts.len() != CHANNELS {
        return Err(SriError::Count {
            expected: CHANNELS,
            got: parts.len(),
            text: value.to_string(),
        });
    }
    let mut out = [0.0; CHANNELS];
    for (o, p) in out.iter_mut().zip(parts) {
        *o = parse_number(p)?;
    }
    Ok(out)
}

pub fn format_six(v: &[f64; CHANNELS]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(";")
}

/// `(r1c1,…,r1c6);…;(r6c1,…,r6c6)`.
pub fn parse_matrix(value: &str) -> Result<Matrix6, SriError> {
    let rows: Vec<&str> = value.split(';').collect();
    if rows.len() != CHANNELS {
        return Err(SriError::Count {
            expected: CHANNELS,
            got: rows.len(),
            text: value.to_string(),
        });
    }
    let mut m = [[0.0; CHANNELS]; CHANNELS];
    for (row, text) in m.iter_mut().zip(rows) {
        let t = text.trim();
        let inner = t
            .strip_prefix('(')
            .and_then(|t| t.strip_suffix(')'))
            .ok_or_else(|| SriError::BadArgument("DCPM".into(), t.to_string()))?;
        let cells: Vec<&str> = inner.split(',').collect();
        if cells.len() != CHANNELS {
            return Err(SriError::Count {
                expected: CHANNELS,
                got: cells.len(),
                text: t.to_string(),
            });
        }
        for (c, s) in row.iter_mut().zip(cells) {
            *c = parse_number(s)?;
        }
    }
    Ok(m)
}

pub fn format_matrix(m: &Matrix6) -> String {
    m.iter()
        .map(|r| format!("({})", r.map(|x| x.to_string()).join(",")))
        .collect::<Vec<_>>()
        .join(";")
}

/// The SGDM value `(A01,…,A06);C;1;(WMA:1)`: only the format letter and one point per
/// channel are supported.
pub fn parse_format(value: &str) -> Result<DataFormat, SriError> {
    let bad = || SriError::BadArgument("SGDM".into(), value.to_string());
    let fields: Vec<&str> = value.split(';').map(str::trim).collect();
    let letter = fields.get(1).ok_or_else(bad)?;
    let fmt = DataFormat::from_letter(letter).ok_or_else(bad)?;
    match fields.get(2) {
        Some(points) if points.parse::<u32>().ok() != Some(1) => Err(bad()),
        _ => Ok(fmt),
    }
}

pub fn format_format(f: DataFormat) -> String {
    format!("{CHANNEL_LIST};{};1;(WMA:1.000000)", f.letter())
}

/// One frame's data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FrameData {
    /// `E` mode: Fx Fy Fz Mx My Mz in the units of the box's decoupling matrix.
    Calibrated([f32; CHANNELS]),
    /// `C` mode: ADC counts per channel.
    Raw([u16; CHANNELS]),
}

impl FrameData {
    pub fn format(&self) -> DataFormat {
        match self {
            FrameData::Calibrated(_) => DataFormat::Calibrated,
            FrameData::Raw(_) => DataFormat::RawCounts,
        }
    }
}

/// A decoded binary frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame {
    pub package_no: u16,
    pub data: FrameData,
}

/// Sum of the bytes mod 256.
pub fn checksum(data: &[u8]) -> u8 {
    data.iter().fold(0u8, |a, b| a.wrapping_add(*b))
}

/// Encodes a frame (the box's side).
pub fn encode_frame(frame: &Frame) -> Vec<u8> {
    let fmt = frame.data.format();
    let mut out = Vec::with_capacity(fmt.frame_len());
    out.extend_from_slice(&HEADER);
    out.extend_from_slice(&fmt.package_length().to_be_bytes());
    out.extend_from_slice(&frame.package_no.to_be_bytes());
    match frame.data {
        FrameData::Calibrated(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        FrameData::Raw(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_be_bytes())),
    }
    let sum = checksum(&out[6..]);
    out.push(sum);
    out
}

/// Counters of a [`FrameParser`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParserStats {
    pub frames: u64,
    pub checksum_errors: u64,
    /// Headers whose PackageLength does not match the selected format.
    pub length_errors: u64,
    /// Times bytes were skipped to find the next `AA 55`.
    pub resyncs: u64,
    pub discarded_bytes: u64,
    pub seq: SeqTracker,
}

/// Streaming frame parser: `push` received bytes, then call `next_frame` until `None`.
/// Keeps partial frames between pushes; resynchronises on `AA 55`; drops (and counts) frames
/// with a bad checksum or a wrong length.
#[derive(Debug, Clone)]
pub struct FrameParser {
    format: DataFormat,
    buf: Vec<u8>,
    pub stats: ParserStats,
}

impl FrameParser {
    pub fn new(format: DataFormat) -> Self {
        Self {
            format,
            buf: Vec::with_capacity(1024),
            stats: ParserStats {
                frames: 0,
                checksum_errors: 0,
                length_errors: 0,
                resyncs: 0,
                discarded_bytes: 0,
                seq: SeqTracker::new(16),
            },
        }
    }

    pub fn format(&self) -> DataFormat {
        self.format
    }

    /// Bytes held waiting for the rest of a frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Forgets buffered bytes and the last packet number (a new connection); keeps counters.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.stats.seq.restart();
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn discard(&mut self, n: usize) {
        if n > 0 {
            self.stats.resyncs += 1;
            self.stats.discarded_bytes += n as u64;
            self.buf.drain(..n);
        }
    }

    /// The next complete valid frame, if any.
    pub fn next_frame(&mut self) -> Option<Frame> {
        let flen = self.format.frame_len();
        loop {
            // Align the buffer on a header.
            match find(&self.buf, &HEADER) {
                Some(i) => self.discard(i),
                None => {
                    // Keep a trailing 0xAA: it may be the first half of a header.
                    let keep = usize::from(self.buf.last() == Some(&HEADER[0]));
                    let n = self.buf.len() - keep;
                    self.discard(n);
                    return None;
                }
            }
            if self.buf.len() < 4 {
                return None;
            }
            let len = u16::from_be_bytes([self.buf[2], self.buf[3]]);
            if len != self.format.package_length() {
                self.stats.length_errors += 1;
                self.discard(1);
                continue;
            }
            if self.buf.len() < flen {
                return None;
            }
            let data = &self.buf[6..flen - 1];
            if checksum(data) != self.buf[flen - 1] {
                self.stats.checksum_errors += 1;
                self.discard(1);
                continue;
            }
            let package_no = u16::from_be_bytes([self.buf[4], self.buf[5]]);
            let data = match self.format {
                DataFormat::Calibrated => {
                    let mut v = [0f32; CHANNELS];
                    for (i, x) in v.iter_mut().enumerate() {
                        let o = 6 + 4 * i;
                        let b = [
                            self.buf[o],
                            self.buf[o + 1],
                            self.buf[o + 2],
                            self.buf[o + 3],
                        ];
                        *x = f32::from_le_bytes(b);
                    }
                    FrameData::Calibrated(v)
                }
                DataFormat::RawCounts => {
                    let mut v = [0u16; CHANNELS];
                    for (i, x) in v.iter_mut().enumerate() {
                        let o = 6 + 2 * i;
                        *x = u16::from_be_bytes([self.buf[o], self.buf[o + 1]]);
                    }
                    FrameData::Raw(v)
                }
            };
            self.buf.drain(..flen);
            self.stats.frames += 1;
            self.stats.seq.observe(u32::from(package_no));
            return Some(Frame { package_no, data });
        }
    }
}

impl Iterator for FrameParser {
    type Item = Frame;
    fn next(&mut self) -> Option<Frame> {
        self.next_frame()
    }
}

/// Conversion parameters of `C` mode (AMPZ, CHNAPG, EXMV, DCPM), from the box or the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SriParams {
    /// AmpZero per channel, ADC counts (≈ 32768).
    pub amp_zero: [f64; CHANNELS],
    /// Amplifier gain per channel (≈ 124).
    pub gain: [f64; CHANNELS],
    /// Bridge excitation per channel, V (≈ 5).
    pub excitation_v: [f64; CHANNELS],
    /// Decoupling matrix: row k → output k (Fx Fy Fz Mx My Mz), column j → channel j, in
    /// output units per mV/V.
    pub decoupling: Matrix6,
}

impl SriParams {
    /// Bridge signal per channel in mV/V.
    pub fn counts_to_mvv(&self, raw: &[u16; CHANNELS]) -> [f64; CHANNELS] {
        let mut out = [0.0; CHANNELS];
        for (i, o) in out.iter_mut().enumerate() {
            let volts = (f64::from(raw[i]) - self.amp_zero[i]) / ADC_COUNTS * ADC_SPAN_V;
            *o = 1000.0 * volts / self.gain[i] / self.excitation_v[i];
        }
        out
    }

    /// `F = M · DAT`.
    pub fn mvv_to_wrench(&self, dat: &[f64; CHANNELS]) -> [f64; CHANNELS] {
        let mut out = [0.0; CHANNELS];
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.decoupling[k].iter().zip(dat).map(|(m, d)| m * d).sum();
        }
        out
    }

    pub fn counts_to_wrench(&self, raw: &[u16; CHANNELS]) -> [f64; CHANNELS] {
        self.mvv_to_wrench(&self.counts_to_mvv(raw))
    }

    /// The inverse of [`Self::counts_to_mvv`], rounded to counts and clamped to the ADC range.
    /// Returns the counts and whether any channel clipped.
    pub fn mvv_to_counts(&self, dat: &[f64; CHANNELS]) -> ([u16; CHANNELS], bool) {
        let mut out = [0u16; CHANNELS];
        let mut clipped = false;
        for (i, o) in out.iter_mut().enumerate() {
            let volts = dat[i] * self.gain[i] * self.excitation_v[i] / 1000.0;
            let c = (volts / ADC_SPAN_V * ADC_COUNTS + self.amp_zero[i]).round();
            let c = if c.is_finite() { c } else { 0.0 };
            if !(0.0..=65535.0).contains(&c) {
                clipped = true;
            }
            // Clamped to the u16 range first: the cast is exact.
            *o = c.clamp(0.0, 65535.0) as u16;
        }
        (out, clipped)
    }

    /// Range checks: every problem as (its key under `prefix`, what is wrong). The config
    /// loaders turn them into their own error lists.
    pub fn problems(&self, prefix: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for i in 0..CHANNELS {
            let z = self.amp_zero[i];
            if !z.is_finite() || !(0.0..=65535.0).contains(&z) {
                out.push((
                    format!("{prefix}.amp_zero[{i}]"),
                    format!("{z} out of range [0, 65535] counts"),
                ));
            }
            if !(self.gain[i].is_finite() && self.gain[i] > 0.0) {
                out.push((
                    format!("{prefix}.gain[{i}]"),
                    "must be finite and > 0".into(),
                ));
            }
            if !(self.excitation_v[i].is_finite() && self.excitation_v[i] > 0.0) {
                out.push((
                    format!("{prefix}.excitation_v[{i}]"),
                    "must be finite and > 0 V".into(),
                ));
            }
            for j in 0..CHANNELS {
                if !self.decoupling[i][j].is_finite() {
                    out.push((
                        format!("{prefix}.decoupling[{i}][{j}]"),
                        "must be finite".into(),
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A captured `E` frame (protocols.md §3.4, [S65]): package number 0x0001 chosen here.
    /// Data LE floats 0.3216, 1.4127, −0.1426, 0.00401, −0.00327, 1.13e-5; sum & 0xFF = 0x8B.
    const E_FRAME: [u8; 31] = [
        0xAA, 0x55, 0x00, 0x1B, 0x00, 0x01, // header, length 27, package 1
        0x41, 0xA3, 0xA4, 0x3E, 0xCA, 0xD1, 0xB4, 0x3F, 0x36, 0x06, 0x12, 0xBE, // Fx Fy Fz
        0x6A, 0x6F, 0x83, 0x3B, 0x24, 0x02, 0x56, 0xBB, 0x00, 0xEA, 0x3C, 0x37, // Mx My Mz
        0x8B, // checksum
    ];

    /// A `C` frame, package 0x1234, counts 0x8000 (32768), 0x83E8 (33768), 0x7C18 (31768),
    /// 0x8001, 0x7FFF, 0xFFFF. Checksum = 0x80+0x00+0x83+0xE8+0x7C+0x18+0x80+0x01+0x7F+0xFF
    /// +0xFF+0xFF = 0x067C → 0x7C.
    const C_FRAME: [u8; 19] = [
        0xAA, 0x55, 0x00, 0x0F, 0x12, 0x34, // header, length 15, package 0x1234
        0x80, 0x00, 0x83, 0xE8, 0x7C, 0x18, 0x80, 0x01, 0x7F, 0xFF, 0xFF, 0xFF, 0x7C,
    ];

    fn all(p: &mut FrameParser) -> Vec<Frame> {
        p.by_ref().collect()
    }

    #[test]
    fn decodes_captured_e_frame() {
        let mut p = FrameParser::new(DataFormat::Calibrated);
        p.push(&E_FRAME);
        let f = all(&mut p);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].package_no, 1);
        let FrameData::Calibrated(v) = f[0].data else {
            panic!("mode")
        };
        // The spec quotes 4 digits; the exact f32 values of those bytes:
        let want = [
            0.321_558_03,
            1.412_652_3,
            -0.142_601_82,
            0.004_011_084_3,
            -0.003_265_508_5,
            1.126_015_6e-5,
        ];
        for (g, w) in v.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6 * w.abs(), "{g} vs {w}");
        }
        assert_eq!(p.stats.frames, 1);
        assert_eq!(p.stats.resyncs, 0);
    }

    #[test]
    fn decodes_c_frame() {
        let mut p = FrameParser::new(DataFormat::RawCounts);
        p.push(&C_FRAME);
        let f = all(&mut p);
        assert_eq!(
            f,
            vec![Frame {
                package_no: 0x1234,
                data: FrameData::Raw([32768, 33768, 31768, 32769, 32767, 65535])
            }]
        );
    }

    #[test]
    fn frame_split_across_reads() {
        let mut p = FrameParser::new(DataFormat::Calibrated);
        // Split inside the header, inside the length and inside the data.
        for chunk in [
            &E_FRAME[..1],
            &E_FRAME[1..3],
            &E_FRAME[3..17],
            &E_FRAME[17..30],
        ] {
            p.push(chunk);
            assert!(p.next_frame().is_none());
        }
        p.push(&E_FRAME[30..]);
        assert_eq!(p.next_frame().map(|f| f.package_no), Some(1));
        assert_eq!(p.pending(), 0);
        assert_eq!(p.stats.resyncs, 0);
    }

    #[test]
    fn garbage_before_header_resyncs() {
        let mut p = FrameParser::new(DataFormat::RawCounts);
        // Text, a lone AA, an AA 55 with a wrong length, then the frame.
        let mut bytes = b"ACK+SMPR=1000$OK\r\n".to_vec();
        bytes.extend_from_slice(&[0xAA, 0x01, 0xAA, 0x55, 0x00, 0x1B, 0x00]);
        bytes.extend_from_slice(&C_FRAME);
        p.push(&bytes);
        let f = all(&mut p);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].package_no, 0x1234);
        assert_eq!(p.stats.length_errors, 1);
        assert!(p.stats.resyncs >= 1);
        assert_eq!(p.stats.discarded_bytes, 18 + 2 + 5);
    }

    #[test]
    fn bad_checksum_is_counted_and_dropped() {
        let mut p = FrameParser::new(DataFormat::Calibrated);
        let mut bad = E_FRAME;
        bad[30] = 0x8C;
        let mut good2 = E_FRAME;
        // Package 2; same data, same checksum (the number is not summed).
        good2[5] = 0x02;
        p.push(&bad);
        p.push(&good2);
        let f = all(&mut p);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].package_no, 2);
        assert_eq!(p.stats.checksum_errors, 1);
        assert_eq!(p.stats.frames, 1);
    }

    #[test]
    fn packet_gaps_are_counted() {
        let mut p = FrameParser::new(DataFormat::Calibrated);
        for n in [0xFFFEu16, 0xFFFF, 0x0000, 0x0003] {
            let mut f = E_FRAME;
            f[4..6].copy_from_slice(&n.to_be_bytes());
            p.push(&f);
        }
        assert_eq!(all(&mut p).len(), 4);
        assert_eq!(p.stats.seq.lost, 2);
    }

    #[test]
    fn wrong_mode_frames_are_length_errors() {
        let mut p = FrameParser::new(DataFormat::RawCounts);
        p.push(&E_FRAME);
        assert!(p.next_frame().is_none());
        assert_eq!(p.stats.length_errors, 1);
    }

    #[test]
    fn conversion_worked_numbers() {
        // AmpZero 32768, Gain 124, EXC 5 V on every channel (typical values, protocols.md §3.3).
        // Channel 1, RAW 33768: RAW − AmpZero = 1000 counts
        //   → 1000/65535·5 = 0.0762951095 V → ×1000 = 76.2951095 mV
        //   → /124 = 0.615283141 → /5 = 0.123056628 mV/V.
        // Channel 2, RAW 31768: −0.123056628 mV/V. Channel 0 (RAW = AmpZero): 0.
        // Channel 5, RAW 65535: 32767 counts → 32767·5000/65535/124/5 = 4.03219654 mV/V.
        let p = SriParams {
            amp_zero: [32768.0; 6],
            gain: [124.0; 6],
            excitation_v: [5.0; 6],
            decoupling: [
                [100.0, 10.0, 0.0, 0.0, 0.0, 0.0],
                [0.0, 200.0, 0.0, 0.0, 0.0, 0.0],
                [0.0, 0.0, 300.0, 0.0, 0.0, 0.0],
                [0.0, 0.0, 0.0, 4.0, 0.0, 0.0],
                [0.0, 0.0, 0.0, 0.0, 5.0, 0.0],
                [0.0, 0.0, 0.0, 0.0, 0.0, 6.0],
            ],
        };
        let raw = [32768u16, 33768, 31768, 32769, 32767, 65535];
        let dat = p.counts_to_mvv(&raw);
        let want = [
            0.0,
            0.123056628,
            -0.123056628,
            1.23056628e-4,
            -1.23056628e-4,
            4.03219654,
        ];
        for (g, w) in dat.iter().zip(want) {
            assert!((g - w).abs() < 1e-8, "{g} vs {w}");
        }
        // Fx = 100·0 + 10·0.123056628 = 1.23056628 N; Fy = 200·0.123056628 = 24.6113256 N;
        // Fz = 300·(−0.123056628) = −36.9169884 N; Mx = 4·1.23056628e-4 = 4.92226512e-4;
        // My = 5·(−1.23056628e-4) = −6.1528314e-4; Mz = 6·4.03219654 = 24.1931792 N·m.
        let f = p.counts_to_wrench(&raw);
        let want = [
            1.23056628,
            24.6113256,
            -36.9169884,
            4.92226512e-4,
            -6.1528314e-4,
            24.1931792,
        ];
        for (g, w) in f.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
        // And back: counts_to_mvv ∘ mvv_to_counts is the identity on counts.
        assert_eq!(p.mvv_to_counts(&dat), (raw, false));
    }

    #[test]
    fn commands_encode_per_spec() {
        assert_eq!(Command::SetSampleRate(1000).encode(), "AT+SMPR=1000\r\n");
        assert_eq!(
            Command::SetFormat(DataFormat::Calibrated).encode(),
            "AT+SGDM=(A01,A02,A03,A04,A05,A06);E;1;(WMA:1)\r\n"
        );
        assert_eq!(
            Command::SetFormat(DataFormat::RawCounts).encode(),
            "AT+SGDM=(A01,A02,A03,A04,A05,A06);C;1;(WMA:1)\r\n"
        );
        assert_eq!(Command::StartStream.encode(), "AT+GSD\r\n");
        assert_eq!(Command::StopStream.encode(), "AT+GSD=STOP\r\n");
        assert_eq!(Command::Query(Param::AmpZero).encode(), "AT+AMPZ=?\r\n");
        assert_eq!(Command::Query(Param::Gain).encode(), "AT+CHNAPG=?\r\n");
        assert_eq!(Command::Query(Param::Excitation).encode(), "AT+EXMV=?\r\n");
        assert_eq!(Command::Query(Param::Decoupling).encode(), "AT+DCPM=?\r\n");
        assert_eq!(Command::SetCheckModeSum.encode(), "AT+DCKMD=SUM\r\n");
    }

    #[test]
    fn replies_parse() {
        let a = parse_ack("ACK+SMPR=300$OK\r\n").unwrap();
        assert_eq!(
            (a.name.as_str(), a.value.as_str(), a.ok),
            ("SMPR", "300", true)
        );
        let a = parse_ack("ACK+AMPZ=32768.5;32770;32760;32768;32768;32768$OK").unwrap();
        assert_eq!(
            parse_six(a.ok_value().unwrap()).unwrap(),
            [32768.5, 32770.0, 32760.0, 32768.0, 32768.0, 32768.0]
        );
        let m = parse_matrix("(1,2,3,4,5,6);(7,8,9,10,11,12);(0,0,1,0,0,0);(0,0,0,1,0,0);(0,0,0,0,1,0);(0,0,0,0,0,-1.5e-2)").unwrap();
        assert_eq!(m[1][5], 12.0);
        assert_eq!(m[5][5], -0.015);
        assert_eq!(
            parse_format("(A01,A02,A03,A04,A05,A06);C;1;(WMA:1.000000)").unwrap(),
            DataFormat::RawCounts
        );
        assert!(parse_six("1;2;3").is_err());
        assert!(parse_matrix("(1,2);(3,4)").is_err());
        assert!(!parse_ack("ACK+DCKMD=SUM$ERR").unwrap().ok);
    }

    #[test]
    fn take_ack_skips_frames_and_keeps_partial_lines() {
        let mut buf = C_FRAME.to_vec();
        buf.extend_from_slice(b"ACK+SGDM=(A01,A02,A03,A04,A05,A06);C;1;(WMA:1)$O");
        assert!(take_ack(&mut buf).is_none());
        buf.extend_from_slice(b"K\r\nACK+SMPR=1000$OK\r\n");
        let a = take_ack(&mut buf).unwrap().unwrap();
        assert_eq!(a.name, "SGDM");
        assert_eq!(take_ack(&mut buf).unwrap().unwrap().value, "1000");
        assert!(take_ack(&mut buf).is_none());
    }

    fn arb_format() -> impl Strategy<Value = DataFormat> {
        prop_oneof![Just(DataFormat::RawCounts), Just(DataFormat::Calibrated)]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(fmt in arb_format(), chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 0..20)) {
            let mut p = FrameParser::new(fmt);
            for c in &chunks {
                p.push(c);
                while p.next_frame().is_some() {}
            }
            let mut b = Vec::new();
            for c in &chunks { b.extend_from_slice(c); }
            let _ = take_ack(&mut b);
            let _ = parse_ack(&String::from_utf8_lossy(&b));
            let _ = Command::parse(&String::from_utf8_lossy(&b));
        }

        #[test]
        fn frames_round_trip_through_any_split(
            raw in prop::collection::vec((any::<u16>(), prop::array::uniform6(any::<u16>()), prop::array::uniform6(-1e4f32..1e4)), 1..10),
            calibrated in any::<bool>(),
            junk in prop::collection::vec(any::<u8>(), 0..40),
            split in 1usize..50,
        ) {
            let fmt = if calibrated { DataFormat::Calibrated } else { DataFormat::RawCounts };
            let frames: Vec<Frame> = raw.iter().map(|(n, c, f)| Frame {
                package_no: *n,
                data: if calibrated { FrameData::Calibrated(*f) } else { FrameData::Raw(*c) },
            }).collect();
            // Junk without a header byte in front, then the frames back to back.
            let mut bytes: Vec<u8> = junk.iter().map(|b| if *b == 0xAA { 0 } else { *b }).collect();
            for f in &frames { bytes.extend(encode_frame(f)); }
            let mut p = FrameParser::new(fmt);
            let mut got = Vec::new();
            for c in bytes.chunks(split) {
                p.push(c);
                got.extend(p.by_ref());
            }
            prop_assert_eq!(got, frames);
            prop_assert_eq!(p.stats.checksum_errors, 0);
        }

        #[test]
        fn commands_round_trip(hz in 1u32..100_000, m in prop::array::uniform6(prop::array::uniform6(-1e6f64..1e6)), calibrated in any::<bool>()) {
            let fmt = if calibrated { DataFormat::Calibrated } else { DataFormat::RawCounts };
            let mut cmds = vec![
                Command::SetSampleRate(hz), Command::SetFormat(fmt), Command::SetCheckModeSum,
                Command::SetDecoupling(Box::new(m)), Command::StartStream, Command::StopStream, Command::GetOne,
            ];
            cmds.extend(Param::ALL.into_iter().map(Command::Query));
            for c in cmds {
                prop_assert_eq!(Command::parse(&c.encode()).unwrap(), c);
            }
            let a = parse_ack(&encode_ack("DCPM", &format_matrix(&m))).unwrap();
            prop_assert_eq!(parse_matrix(a.ok_value().unwrap()).unwrap(), m);
            prop_assert_eq!(parse_format(&format_format(fmt)).unwrap(), fmt);
            let six = m[0];
            prop_assert_eq!(parse_six(&format_six(&six)).unwrap(), six);
        }
    }
}
