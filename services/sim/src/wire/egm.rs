//! EGM on the controller's side of the wire: the `EgmRobot` the emulated IRC5 sends and the
//! `EgmSensor` it reads, written here from the spec (protocols.md §1.3–1.4: `abb.egm`, proto2),
//! independently of robot-io's codec.
//!
//! Protobuf, as much as EGM needs: a key is `field << 3 | wire type` as a varint; varints
//! (type 0) carry integers, enums and bools; doubles are 8 little-endian bytes (type 1);
//! sub-messages and packed repeated doubles are length-delimited (type 2). proto2 writes repeated
//! doubles unpacked (one key per value) and readers accept both forms. Fields are written in
//! field-number order; a reader skips fields it does not know.

/// `EgmHeader.MessageType`.
pub const MSGTYPE_DATA: u64 = 2;
/// `EgmMotorState.MotorStateType`.
pub const MOTORS_ON: u64 = 1;
pub const MOTORS_OFF: u64 = 2;
/// `EgmMCIState.MCIStateType`.
pub const MCI_ERROR: u64 = 1;
pub const MCI_STOPPED: u64 = 2;
pub const MCI_RUNNING: u64 = 3;
/// `EgmRapidCtrlExecState.RapidCtrlExecStateType`.
pub const RAPID_STOPPED: u64 = 1;
pub const RAPID_RUNNING: u64 = 2;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// What the emulated controller reports in one cycle (`EgmRobot`).
#[derive(Debug, Clone, PartialEq)]
pub struct RobotMsg {
    /// `header.seqno`.
    pub seqno: u32,
    /// `header.tm`: the controller's clock, ms.
    pub tm_ms: u32,
    /// `feedBack.joints`, degrees.
    pub feedback_deg: [f64; 6],
    /// `feedBack.cartesian`: the flange position (mm) and orientation (quaternion w x y z).
    pub tool0: Option<([f64; 3], [f64; 4])>,
    /// `feedBack.time` (EgmClock, V1.1: RobotWare ≥ 6.07): the controller's clock, µs since
    /// 1970, written as its `sec` and `usec`.
    pub feedback_time_us: Option<u64>,
    /// `planned.joints`, degrees.
    pub planned_deg: [f64; 6],
    pub motors_on: bool,
    /// `mciState.state`: [`MCI_ERROR`], [`MCI_STOPPED`] or [`MCI_RUNNING`].
    pub mci_state: u64,
    pub mci_convergence_met: bool,
    pub rapid_running: bool,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire));
}

fn put_varint(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, VARINT);
    varint(out, v);
}

fn put_double(out: &mut Vec<u8>, field: u32, v: f64) {
    key(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_message(out: &mut Vec<u8>, field: u32, body: &[u8]) {
    key(out, field, LEN);
    varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// `EgmJoints { repeated double joints = 1; }`, unpacked.
fn joints(v: &[f64]) -> Vec<u8> {
    let mut b = Vec::with_capacity(v.len() * 9);
    for x in v {
        put_double(&mut b, 1, *x);
    }
    b
}

/// A message with one enum field 1 (the three state messages).
fn state(v: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(2);
    put_varint(&mut b, 1, v);
    b
}

impl RobotMsg {
    /// The datagram.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        let mut header = Vec::with_capacity(12);
        put_varint(&mut header, 1, u64::from(self.seqno));
        put_varint(&mut header, 2, u64::from(self.tm_ms));
        put_varint(&mut header, 3, MSGTYPE_DATA);
        put_message(&mut out, 1, &header);

        let mut fb = Vec::with_capacity(128);
        put_message(&mut fb, 1, &joints(&self.feedback_deg));
        if let Some((p, q)) = &self.tool0 {
            let mut pos = Vec::with_capacity(27);
            for (i, v) in p.iter().enumerate() {
                put_double(&mut pos, i as u32 + 1, *v);
            }
            let mut orient = Vec::with_capacity(36);
            for (i, v) in q.iter().enumerate() {
                put_double(&mut orient, i as u32 + 1, *v);
            }
            let mut pose = Vec::with_capacity(70);
            put_message(&mut pose, 1, &pos);
            put_message(&mut pose, 2, &orient);
            put_message(&mut fb, 2, &pose);
        }
        if let Some(us) = self.feedback_time_us {
            let mut clock = Vec::with_capacity(16);
            put_varint(&mut clock, 1, us / 1_000_000);
            put_varint(&mut clock, 2, us % 1_000_000);
            put_message(&mut fb, 4, &clock);
        }
        put_message(&mut out, 2, &fb);

        let mut planned = Vec::with_capacity(60);
        put_message(&mut planned, 1, &joints(&self.planned_deg));
        put_message(&mut out, 3, &planned);

        let on = |b: bool, yes: u64, no: u64| if b { yes } else { no };
        put_message(
            &mut out,
            4,
            &state(on(self.motors_on, MOTORS_ON, MOTORS_OFF)),
        );
        put_message(&mut out, 5, &state(self.mci_state));
        put_varint(&mut out, 6, u64::from(self.mci_convergence_met));
        put_message(
            &mut out,
            8,
            &state(on(self.rapid_running, RAPID_RUNNING, RAPID_STOPPED)),
        );
        out
    }
}

/// What the controller reads of an `EgmSensor`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SensorMsg {
    pub seqno: Option<u32>,
    pub tm_ms: Option<u32>,
    pub mtype: Option<u64>,
    /// `planned.joints` (degrees), when `planned.joints` was sent.
    pub planned_deg: Option<Vec<f64>>,
    /// `speedRef.joints` (deg/s), when sent.
    pub speed_deg_s: Option<Vec<f64>>,
}

/// Why a datagram is not an `EgmSensor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The bytes end inside a field.
    Truncated,
    /// A varint longer than 10 bytes.
    LongVarint,
    /// A wire type protobuf does not have (3, 4: groups, are not in egm.proto either).
    WireType(u8),
    /// A field of a known number came with another wire type than the schema's.
    FieldType { field: u32, wire: u8 },
    /// Field number 0.
    FieldZero,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Truncated => write!(f, "truncated"),
            WireError::LongVarint => write!(f, "varint longer than 10 bytes"),
            WireError::WireType(w) => write!(f, "wire type {w}"),
            WireError::FieldType { field, wire } => {
                write!(f, "field {field} with wire type {wire}")
            }
            WireError::FieldZero => write!(f, "field number 0"),
        }
    }
}

impl std::error::Error for WireError {}

/// One field as read.
enum Value<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(&'a [u8]),
    Fixed32,
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&byte, rest) = self.b.split_first().ok_or(WireError::Truncated)?;
            self.b = rest;
            v |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::LongVarint)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn next(&mut self) -> Option<Result<(u32, Value<'a>), WireError>> {
        if self.b.is_empty() {
            return None;
        }
        Some(self.field())
    }

    fn field(&mut self) -> Result<(u32, Value<'a>), WireError> {
        let k = self.varint()?;
        let field = u32::try_from(k >> 3).map_err(|_| WireError::Truncated)?;
        if field == 0 {
            return Err(WireError::FieldZero);
        }
        let v = match (k & 7) as u8 {
            VARINT => Value::Varint(self.varint()?),
            FIXED64 => {
                let mut a = [0u8; 8];
                a.copy_from_slice(self.take(8)?);
                Value::Fixed64(a)
            }
            LEN => {
                let n = usize::try_from(self.varint()?).map_err(|_| WireError::Truncated)?;
                Value::Bytes(self.take(n)?)
            }
            FIXED32 => {
                self.take(4)?;
                Value::Fixed32
            }
            w => return Err(WireError::WireType(w)),
        };
        Ok((field, v))
    }
}

fn wrong(field: u32, v: &Value<'_>) -> WireError {
    let wire = match v {
        Value::Varint(_) => VARINT,
        Value::Fixed64(_) => FIXED64,
        Value::Bytes(_) => LEN,
        Value::Fixed32 => FIXED32,
    };
    WireError::FieldType { field, wire }
}

/// `EgmJoints.joints`: unpacked (fixed64 per value) or packed (one length-delimited run);
/// values of several occurrences are concatenated, as protobuf merges them.
fn read_joints(body: &[u8]) -> Result<Vec<f64>, WireError> {
    let mut out = Vec::with_capacity(6);
    let mut r = Reader { b: body };
    while let Some(f) = r.next() {
        match f? {
            (1, Value::Fixed64(a)) => out.push(f64::from_le_bytes(a)),
            (1, Value::Bytes(run)) => {
                if run.len() % 8 != 0 {
                    return Err(WireError::Truncated);
                }
                for c in run.chunks_exact(8) {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    out.push(f64::from_le_bytes(a));
                }
            }
            (1, v) => return Err(wrong(1, &v)),
            _ => {}
        }
    }
    Ok(out)
}

/// The `joints` (field 1, an `EgmJoints`) of an `EgmPlanned` or `EgmSpeedRef`.
fn read_joints_of(body: &[u8]) -> Result<Option<Vec<f64>>, WireError> {
    let mut r = Reader { b: body };
    let mut out: Option<Vec<f64>> = None;
    while let Some(f) = r.next() {
        match f? {
            (1, Value::Bytes(j)) => out.get_or_insert_with(Vec::new).extend(read_joints(j)?),
            (1, v) => return Err(wrong(1, &v)),
            // cartesian, externalJoints, time: checked for shape, not used.
            (2..=4, Value::Bytes(b)) => check(b)?,
            (n @ 2..=4, v) => return Err(wrong(n, &v)),
            _ => {}
        }
    }
    Ok(out)
}

/// Walks a sub-message to its end (its fields well formed).
fn check(body: &[u8]) -> Result<(), WireError> {
    let mut r = Reader { b: body };
    while let Some(f) = r.next() {
        f?;
    }
    Ok(())
}

/// Reads an `EgmSensor` datagram.
pub fn decode_sensor(datagram: &[u8]) -> Result<SensorMsg, WireError> {
    let mut m = SensorMsg::default();
    let mut r = Reader { b: datagram };
    while let Some(f) = r.next() {
        match f? {
            (1, Value::Bytes(h)) => {
                let mut hr = Reader { b: h };
                while let Some(hf) = hr.next() {
                    match hf? {
                        (1, Value::Varint(v)) => m.seqno = Some(v as u32),
                        (2, Value::Varint(v)) => m.tm_ms = Some(v as u32),
                        (3, Value::Varint(v)) => m.mtype = Some(v),
                        (n @ 1..=3, v) => return Err(wrong(n, &v)),
                        _ => {}
                    }
                }
            }
            (2, Value::Bytes(p)) => {
                if let Some(j) = read_joints_of(p)? {
                    m.planned_deg.get_or_insert_with(Vec::new).extend(j);
                }
            }
            (3, Value::Bytes(s)) => {
                if let Some(j) = read_joints_of(s)? {
                    m.speed_deg_s.get_or_insert_with(Vec::new).extend(j);
                }
            }
            (4, Value::Bytes(b)) => check(b)?,
            (n @ 1..=4, v) => return Err(wrong(n, &v)),
            _ => {}
        }
    }
    Ok(m)
}

/// An `EgmSensor` with a joint reference, as a sensor writes it (header with
/// `MSGTYPE_CORRECTION`, `planned.joints` in degrees): for tests and tools that play the
/// sensor's side against the emulated controller.
pub fn sensor_message(seqno: u32, tm_ms: u32, q_deg: &[f64]) -> Vec<u8> {
    sensor_message_with_speed(seqno, tm_ms, q_deg, None)
}

/// [`sensor_message`] with `speedRef.joints` (deg/s) when given.
pub fn sensor_message_with_speed(
    seqno: u32,
    tm_ms: u32,
    q_deg: &[f64],
    speed_deg_s: Option<&[f64]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(140);
    let mut header = Vec::with_capacity(12);
    put_varint(&mut header, 1, u64::from(seqno));
    put_varint(&mut header, 2, u64::from(tm_ms));
    put_varint(&mut header, 3, 3);
    put_message(&mut out, 1, &header);
    let mut planned = Vec::with_capacity(60);
    put_message(&mut planned, 1, &joints(q_deg));
    put_message(&mut out, 2, &planned);
    if let Some(v) = speed_deg_s {
        let mut speed = Vec::with_capacity(60);
        put_message(&mut speed, 1, &joints(v));
        put_message(&mut out, 3, &speed);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::vectors::{f64s, hex, load, six};

    #[test]
    fn every_robot_vector_is_what_the_emulator_writes() {
        let all = load("egm.json");
        let robots = all["robot"].as_array().unwrap();
        assert!(robots.len() >= 2);
        for v in robots {
            let name = v["name"].as_str().unwrap();
            assert_eq!(v["mtype"].as_u64().unwrap(), MSGTYPE_DATA);
            let m = RobotMsg {
                seqno: v["seqno"].as_u64().unwrap() as u32,
                tm_ms: v["tm_ms"].as_u64().unwrap() as u32,
                feedback_deg: six(&v["feedback_joints_deg"]),
                tool0: (!v["feedback_pos_mm"].is_null()).then(|| {
                    let p = f64s(&v["feedback_pos_mm"]);
                    let q = f64s(&v["feedback_quat_wxyz"]);
                    ([p[0], p[1], p[2]], [q[0], q[1], q[2], q[3]])
                }),
                feedback_time_us: v["feedback_time_us"].as_u64(),
                planned_deg: six(&v["planned_joints_deg"]),
                motors_on: v["motor_state"].as_u64().unwrap() == MOTORS_ON,
                mci_state: v["mci_state"].as_u64().unwrap(),
                mci_convergence_met: v["mci_convergence_met"].as_bool().unwrap(),
                rapid_running: v["rapid_exec_state"].as_u64().unwrap() == RAPID_RUNNING,
            };
            assert_eq!(m.encode(), hex(v), "{name}");
        }
    }

    #[test]
    fn every_sensor_vector_reads_as_its_fields() {
        let all = load("egm.json");
        for v in all["sensor"].as_array().unwrap() {
            let name = v["name"].as_str().unwrap();
            let m = decode_sensor(&hex(v)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(m.seqno, Some(v["seqno"].as_u64().unwrap() as u32), "{name}");
            assert_eq!(m.tm_ms, Some(v["tm_ms"].as_u64().unwrap() as u32), "{name}");
            assert_eq!(m.mtype, v["mtype"].as_u64(), "{name}");
            assert_eq!(
                m.planned_deg,
                Some(f64s(&v["planned_joints_deg"])),
                "{name}"
            );
            let speed =
                (!v["speed_joints_deg_s"].is_null()).then(|| f64s(&v["speed_joints_deg_s"]));
            assert_eq!(m.speed_deg_s, speed, "{name}");
            if speed.is_none() && !v["decode_only"].as_bool().unwrap_or(false) {
                let q = f64s(&v["planned_joints_deg"]);
                let b = sensor_message(m.seqno.unwrap(), m.tm_ms.unwrap(), &q);
                assert_eq!(b, hex(v), "{name}: written");
            }
        }
        for v in all["sensor_malformed"].as_array().unwrap() {
            let name = v["name"].as_str().unwrap();
            assert!(decode_sensor(&hex(v)).is_err(), "{name}: accepted");
        }
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in 0..200 {
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = decode_sensor(&b);
        }
        assert_eq!(
            decode_sensor(&[0x12, 0x05, 0x0a]),
            Err(WireError::Truncated)
        );
        assert_eq!(
            decode_sensor(&[0x08, 0x01]),
            Err(WireError::FieldType { field: 1, wire: 0 })
        );
        assert_eq!(decode_sensor(&[]), Ok(SensorMsg::default()));
    }
}
