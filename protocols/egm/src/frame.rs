//! The EGM codec of robot-io's per-datagram path, without allocation.
//!
//! - [`decode_robot_frame`] reads an `EgmRobot` into a [`RobotFrame`]: the fields the session
//!   uses, by value (joints in a fixed array, `measuredForce` as a slice of the datagram).
//!   It accepts and rejects exactly what the prost decoder of [`super::proto`] does — the
//!   fields it does not keep (poses, planned, test signals, …) are still checked against the
//!   schema's wire types, unknown fields are skipped, groups included — and a property test
//!   holds the two to the same answer on valid, truncated and corrupted datagrams.
//! - [`SensorReply`] is the `EgmSensor` robot-io sends (header, `planned.joints`, optionally
//!   `speedRef.joints`), encoded into a caller's fixed buffer with the bytes prost produces
//!   for the same message (tested).
//!
//! prost stays the schema's reference (the controller emulator, conformance tests, the
//! typed messages); this module exists so that a datagram in and a reply out cost no heap.

use crate::proto::{
    EgmHeader, EgmJoints, EgmPlanned, EgmRobot, EgmSensor, EgmSpeedRef, MciStateType,
    MeasuredForce, MessageType, MotorStateType, ProtoError, RapidCtrlExecStateType,
};

/// A repeated double kept in a fixed array: up to `N` values stored, every value counted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Doubles<const N: usize> {
    buf: [f64; N],
    len: usize,
}

impl<const N: usize> Default for Doubles<N> {
    fn default() -> Self {
        Self {
            buf: [0.0; N],
            len: 0,
        }
    }
}

impl<const N: usize> Doubles<N> {
    /// Appends a value (counted; stored while there is room).
    pub fn push(&mut self, v: f64) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = v;
        }
        self.len = self.len.saturating_add(1);
    }
    /// How many values were sent.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The stored values (all of them when `len() <= N`).
    pub fn as_slice(&self) -> &[f64] {
        &self.buf[..self.len.min(N)]
    }
    /// From a slice (tests, conversions): values beyond `N` are counted.
    pub fn from_slice(v: &[f64]) -> Self {
        let mut d = Self::default();
        for x in v {
            d.push(*x);
        }
        d
    }
}

/// Joint values kept per `EgmJoints` (an IRB 120 sends 6; up to 12 stored, more counted).
pub const MAX_JOINTS: usize = 12;

/// What robot-io reads of one `EgmRobot`. Presence follows proto2: a sub-message sent empty
/// is present (`Some` with its defaults), as prost decodes it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RobotFrame<'a> {
    pub header: bool,
    pub seqno: Option<u32>,
    pub tm: Option<u32>,
    pub mtype: Option<i32>,
    /// `feedBack` present.
    pub feed_back: bool,
    /// `feedBack.joints` (deg), when the sub-message was sent.
    pub feedback_joints: Option<Doubles<MAX_JOINTS>>,
    /// `feedBack.time` present (V1.1+).
    pub feedback_time: bool,
    pub motor_state: Option<i32>,
    pub mci_state: Option<i32>,
    pub mci_convergence_met: Option<bool>,
    pub rapid_exec_state: Option<i32>,
    /// `measuredForce`'s raw bytes (its layout differs between schema generations).
    pub measured_force: Option<&'a [u8]>,
    pub utilization_rate: Option<f64>,
    pub move_index: Option<u32>,
    pub collision_info: bool,
    pub rapid_from_robot: bool,
}

impl<'a> RobotFrame<'a> {
    /// `header.seqno`, if sent.
    pub fn seqno(&self) -> Option<u32> {
        self.seqno
    }
    /// `header.tm` (controller ms), if sent.
    pub fn tm(&self) -> Option<u32> {
        self.tm
    }
    /// Motor state (`Undefined` when absent or unknown).
    pub fn motor_state_type(&self) -> MotorStateType {
        self.motor_state
            .and_then(|v| MotorStateType::try_from(v).ok())
            .unwrap_or(MotorStateType::Undefined)
    }
    /// EGM (MCI) state (`Undefined` when absent or unknown).
    pub fn mci_state_type(&self) -> MciStateType {
        self.mci_state
            .and_then(|v| MciStateType::try_from(v).ok())
            .unwrap_or(MciStateType::Undefined)
    }
    /// RAPID execution state (`Undefined` when absent or unknown).
    pub fn rapid_state_type(&self) -> RapidCtrlExecStateType {
        self.rapid_exec_state
            .and_then(|v| RapidCtrlExecStateType::try_from(v).ok())
            .unwrap_or(RapidCtrlExecStateType::Undefined)
    }
    /// `measuredForce` parsed from either schema generation; `None` when absent.
    pub fn force(&self) -> Option<Result<MeasuredForce, ProtoError>> {
        self.measured_force.map(MeasuredForce::parse)
    }
}

impl<'a> From<&'a EgmRobot> for RobotFrame<'a> {
    fn from(m: &'a EgmRobot) -> Self {
        let fb = m.feed_back.as_ref();
        RobotFrame {
            header: m.header.is_some(),
            seqno: m.header.as_ref().and_then(|h| h.seqno),
            tm: m.header.as_ref().and_then(|h| h.tm),
            mtype: m.header.as_ref().and_then(|h| h.mtype),
            feed_back: fb.is_some(),
            feedback_joints: fb
                .and_then(|f| f.joints.as_ref())
                .map(|j| Doubles::from_slice(&j.joints)),
            feedback_time: fb.is_some_and(|f| f.time.is_some()),
            motor_state: m.motor_state.as_ref().map(|s| s.state),
            mci_state: m.mci_state.as_ref().map(|s| s.state),
            mci_convergence_met: m.mci_convergence_met,
            rapid_exec_state: m.rapid_exec_state.as_ref().map(|s| s.state),
            measured_force: m.measured_force.as_deref(),
            utilization_rate: m.utilization_rate,
            move_index: m.move_index,
            collision_info: m.collision_info.is_some(),
            rapid_from_robot: m.rapid_from_robot.is_some(),
        }
    }
}

// ---- wire primitives (the rules of prost's decoder) ----

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_START_GROUP: u8 = 3;
const WIRE_END_GROUP: u8 = 4;
const WIRE_FIXED32: u8 = 5;
/// prost's default recursion limit.
const RECURSION_LIMIT: u32 = 100;

fn err(what: &'static str) -> ProtoError {
    ProtoError::Wire(what)
}

/// A varint of at most 10 bytes whose 10th byte is 0 or 1.
pub(super) fn varint(b: &mut &[u8]) -> Result<u64, ProtoError> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = b.split_first().ok_or(err("invalid varint"))?;
        *b = rest;
        if i == 9 && byte > 1 {
            return Err(err("invalid varint"));
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(err("invalid varint"))
}

fn take<'a>(b: &mut &'a [u8], n: u64) -> Result<&'a [u8], ProtoError> {
    let n = usize::try_from(n).map_err(|_| err("buffer underflow"))?;
    if b.len() < n {
        return Err(err("buffer underflow"));
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

fn fixed64(b: &mut &[u8]) -> Result<f64, ProtoError> {
    let s = take(b, 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(f64::from_le_bytes(a))
}

/// (field number, wire type).
pub(super) fn key(b: &mut &[u8]) -> Result<(u32, u8), ProtoError> {
    let k = varint(b)?;
    if k > u64::from(u32::MAX) {
        return Err(err("invalid key value"));
    }
    let wire = (k & 7) as u8;
    if wire > 5 {
        return Err(err("invalid wire type value"));
    }
    let tag = (k as u32) >> 3;
    if tag == 0 {
        return Err(err("invalid tag value: 0"));
    }
    Ok((tag, wire))
}

fn length_delimited<'a>(b: &mut &'a [u8]) -> Result<&'a [u8], ProtoError> {
    let n = varint(b)?;
    take(b, n)
}

/// Skips one field's value (groups to their matching end).
pub(super) fn skip(b: &mut &[u8], tag: u32, wire: u8, depth: u32) -> Result<(), ProtoError> {
    if depth >= RECURSION_LIMIT {
        return Err(err("recursion limit reached"));
    }
    match wire {
        WIRE_VARINT => {
            varint(b)?;
        }
        WIRE_FIXED64 => {
            take(b, 8)?;
        }
        WIRE_LEN => {
            length_delimited(b)?;
        }
        WIRE_FIXED32 => {
            take(b, 4)?;
        }
        WIRE_START_GROUP => loop {
            let (t, w) = key(b)?;
            if w == WIRE_END_GROUP {
                if t != tag {
                    return Err(err("unexpected end group tag"));
                }
                break;
            }
            skip(b, t, w, depth + 1)?;
        },
        _ => return Err(err("unexpected end group tag")),
    }
    Ok(())
}

fn expect(wire: u8, want: u8) -> Result<(), ProtoError> {
    if wire == want {
        Ok(())
    } else {
        Err(err("invalid wire type"))
    }
}

/// One value (fixed64) or a packed run (length-delimited) of a repeated double.
pub(super) fn doubles(
    b: &mut &[u8],
    wire: u8,
    mut push: impl FnMut(f64),
) -> Result<(), ProtoError> {
    match wire {
        WIRE_FIXED64 => push(fixed64(b)?),
        WIRE_LEN => {
            let mut body = length_delimited(b)?;
            while !body.is_empty() {
                push(fixed64(&mut body)?);
            }
        }
        _ => return Err(err("invalid wire type")),
    }
    Ok(())
}

/// The kinds of the schema's fields, for the sub-messages checked but not kept.
#[derive(Clone, Copy)]
enum Kind {
    Varint,
    Double,
    RepeatedDouble,
    Message(&'static [(u32, Kind)]),
}

const CARTESIAN: &[(u32, Kind)] = &[(1, Kind::Double), (2, Kind::Double), (3, Kind::Double)];
const QUATERNION: &[(u32, Kind)] = &[
    (1, Kind::Double),
    (2, Kind::Double),
    (3, Kind::Double),
    (4, Kind::Double),
];
const POSE: &[(u32, Kind)] = &[
    (1, Kind::Message(CARTESIAN)),
    (2, Kind::Message(QUATERNION)),
    (3, Kind::Message(CARTESIAN)),
];
const JOINTS: &[(u32, Kind)] = &[(1, Kind::RepeatedDouble)];
const CLOCK: &[(u32, Kind)] = &[(1, Kind::Varint), (2, Kind::Varint)];
const PLANNED: &[(u32, Kind)] = &[
    (1, Kind::Message(JOINTS)),
    (2, Kind::Message(POSE)),
    (3, Kind::Message(JOINTS)),
    (4, Kind::Message(CLOCK)),
];
const FLAG_AND_DOUBLES: &[(u32, Kind)] = &[(1, Kind::Varint), (2, Kind::RepeatedDouble)];

/// Checks a sub-message against its schema (as prost's decoder would, keeping nothing).
fn check(mut b: &[u8], schema: &[(u32, Kind)], depth: u32) -> Result<(), ProtoError> {
    if depth >= RECURSION_LIMIT {
        return Err(err("recursion limit reached"));
    }
    while !b.is_empty() {
        let (tag, wire) = key(&mut b)?;
        match schema.iter().find(|(t, _)| *t == tag).map(|(_, k)| *k) {
            Some(Kind::Varint) => {
                expect(wire, WIRE_VARINT)?;
                varint(&mut b)?;
            }
            Some(Kind::Double) => {
                expect(wire, WIRE_FIXED64)?;
                fixed64(&mut b)?;
            }
            Some(Kind::RepeatedDouble) => doubles(&mut b, wire, |_| {})?,
            Some(Kind::Message(s)) => {
                expect(wire, WIRE_LEN)?;
                let body = length_delimited(&mut b)?;
                check(body, s, depth + 1)?;
            }
            None => skip(&mut b, tag, wire, depth)?,
        }
    }
    Ok(())
}

/// A sub-message with one enum `state` at tag 1 (motor, MCI, RAPID states): merged into `v`.
fn state(body: &[u8], v: &mut Option<i32>) -> Result<(), ProtoError> {
    let mut s = v.unwrap_or(0);
    let mut b = body;
    while !b.is_empty() {
        let (tag, wire) = key(&mut b)?;
        if tag == 1 {
            expect(wire, WIRE_VARINT)?;
            s = varint(&mut b)? as i32;
        } else {
            skip(&mut b, tag, wire, 1)?;
        }
    }
    *v = Some(s);
    Ok(())
}

fn header(mut b: &[u8], f: &mut RobotFrame<'_>) -> Result<(), ProtoError> {
    f.header = true;
    while !b.is_empty() {
        let (tag, wire) = key(&mut b)?;
        match tag {
            1..=3 => {
                expect(wire, WIRE_VARINT)?;
                let v = varint(&mut b)?;
                match tag {
                    1 => f.seqno = Some(v as u32),
                    2 => f.tm = Some(v as u32),
                    _ => f.mtype = Some(v as i32),
                }
            }
            _ => skip(&mut b, tag, wire, 1)?,
        }
    }
    Ok(())
}

fn feed_back(mut b: &[u8], f: &mut RobotFrame<'_>) -> Result<(), ProtoError> {
    f.feed_back = true;
    while !b.is_empty() {
        let (tag, wire) = key(&mut b)?;
        match tag {
            1 => {
                expect(wire, WIRE_LEN)?;
                let mut body = length_delimited(&mut b)?;
                let j = f.feedback_joints.get_or_insert_with(Doubles::default);
                while !body.is_empty() {
                    let (t, w) = key(&mut body)?;
                    if t == 1 {
                        doubles(&mut body, w, |v| j.push(v))?;
                    } else {
                        skip(&mut body, t, w, 2)?;
                    }
                }
            }
            2 => {
                expect(wire, WIRE_LEN)?;
                check(length_delimited(&mut b)?, POSE, 2)?;
            }
            3 => {
                expect(wire, WIRE_LEN)?;
                check(length_delimited(&mut b)?, JOINTS, 2)?;
            }
            4 => {
                expect(wire, WIRE_LEN)?;
                check(length_delimited(&mut b)?, CLOCK, 2)?;
                f.feedback_time = true;
            }
            _ => skip(&mut b, tag, wire, 1)?,
        }
    }
    Ok(())
}

/// Decodes one `EgmRobot` datagram without allocating. Any byte string is safe to pass;
/// the answer (accepted or not, and every kept field) is prost's.
pub fn decode_robot_frame(datagram: &[u8]) -> Result<RobotFrame<'_>, ProtoError> {
    let mut f = RobotFrame::default();
    let mut b = datagram;
    while !b.is_empty() {
        let (tag, wire) = key(&mut b)?;
        match tag {
            1..=5 | 7 | 8 | 9 | 12 | 13 => {
                expect(wire, WIRE_LEN)?;
                let body = length_delimited(&mut b)?;
                match tag {
                    1 => header(body, &mut f)?,
                    2 => feed_back(body, &mut f)?,
                    3 => check(body, PLANNED, 1)?,
                    4 => state(body, &mut f.motor_state)?,
                    5 => state(body, &mut f.mci_state)?,
                    7 => check(body, JOINTS, 1)?,
                    8 => state(body, &mut f.rapid_exec_state)?,
                    9 => f.measured_force = Some(body),
                    12 => {
                        check(body, FLAG_AND_DOUBLES, 1)?;
                        f.collision_info = true;
                    }
                    _ => {
                        check(body, FLAG_AND_DOUBLES, 1)?;
                        f.rapid_from_robot = true;
                    }
                }
            }
            6 => {
                expect(wire, WIRE_VARINT)?;
                f.mci_convergence_met = Some(varint(&mut b)? != 0);
            }
            10 => {
                expect(wire, WIRE_FIXED64)?;
                f.utilization_rate = Some(fixed64(&mut b)?);
            }
            11 => {
                expect(wire, WIRE_VARINT)?;
                f.move_index = Some(varint(&mut b)? as u32);
            }
            _ => skip(&mut b, tag, wire, 0)?,
        }
    }
    Ok(f)
}

// ---- the reply ----

/// Room for the largest [`SensorReply`] encoding (136 bytes).
pub const SENSOR_REPLY_MAX: usize = 160;

/// The `EgmSensor` robot-io sends: header (seqno, tm, mtype CORRECTION), `planned.joints`
/// (deg) and, when configured, `speedRef.joints` (deg/s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SensorReply {
    pub seqno: u32,
    pub tm: u32,
    pub q_deg: [f64; 6],
    pub qd_deg: Option<[f64; 6]>,
}

fn put(out: &mut [u8], at: &mut usize, byte: u8) {
    if let Some(b) = out.get_mut(*at) {
        *b = byte;
    }
    *at += 1;
}

fn put_varint(out: &mut [u8], at: &mut usize, mut v: u64) {
    while v >= 0x80 {
        put(out, at, (v as u8) | 0x80);
        v >>= 7;
    }
    put(out, at, v as u8);
}

fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// `EgmJoints` with six unpacked doubles: 6 × (key + 8 bytes).
const JOINTS_BODY: usize = 6 * 9;

fn put_joints_in(out: &mut [u8], at: &mut usize, outer_tag: u8, v: &[f64; 6]) {
    // outer { 1: EgmJoints { 1: double × 6 } }
    put(out, at, (outer_tag << 3) | WIRE_LEN);
    put(out, at, (JOINTS_BODY + 2) as u8);
    put(out, at, (1 << 3) | WIRE_LEN);
    put(out, at, JOINTS_BODY as u8);
    for x in v {
        put(out, at, (1 << 3) | WIRE_FIXED64);
        for byte in x.to_le_bytes() {
            put(out, at, byte);
        }
    }
}

impl SensorReply {
    /// Encodes into `out` (the bytes prost writes for [`SensorReply::to_proto`]); returns
    /// the encoded slice.
    pub fn encode<'o>(&self, out: &'o mut [u8; SENSOR_REPLY_MAX]) -> &'o [u8] {
        let mut at = 0usize;
        let mtype = MessageType::Correction as u64;
        let header_len = 3
            + varint_len(u64::from(self.seqno))
            + varint_len(u64::from(self.tm))
            + varint_len(mtype);
        put(out, &mut at, (1 << 3) | WIRE_LEN);
        put(out, &mut at, header_len as u8);
        put(out, &mut at, 1 << 3);
        put_varint(out, &mut at, u64::from(self.seqno));
        put(out, &mut at, 2 << 3);
        put_varint(out, &mut at, u64::from(self.tm));
        put(out, &mut at, 3 << 3);
        put_varint(out, &mut at, mtype);
        // planned { joints }
        put_joints_in(out, &mut at, 2, &self.q_deg);
        if let Some(qd) = &self.qd_deg {
            // speedRef { joints }
            put_joints_in(out, &mut at, 3, qd);
        }
        &out[..at.min(SENSOR_REPLY_MAX)]
    }

    /// The same message as prost's typed `EgmSensor` (tests, tools).
    pub fn to_proto(&self) -> EgmSensor {
        EgmSensor {
            header: Some(EgmHeader {
                seqno: Some(self.seqno),
                tm: Some(self.tm),
                mtype: Some(MessageType::Correction as i32),
            }),
            planned: Some(EgmPlanned {
                joints: Some(EgmJoints {
                    joints: self.q_deg.to_vec(),
                }),
                ..Default::default()
            }),
            speed_ref: self.qd_deg.map(|qd| EgmSpeedRef {
                joints: Some(EgmJoints {
                    joints: qd.to_vec(),
                }),
                ..Default::default()
            }),
            rapid_to_robot: None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
