//! The ABB EGM protobuf messages (`package abb.egm`, proto2), written by hand as
//! [`prost::Message`] structs — no `protoc`, no build script.
//!
//! This is the newest superset of the schema (see `shared/reference/protocols.md` §1.4): V1.1
//! (RobotWare ≥ 6.07) plus the newer fields (`moveIndex`, `CollisionInfo`, `RAPIDfromRobot`,
//! `RAPIDtoRobot`). Field numbers and labels follow the spec exactly; the Rust names are the
//! proto names in snake case (`feedBack` → `feed_back`, `RAPIDfromRobot` → `rapid_from_robot`).
//!
//! Wire rules that matter:
//! - **proto2**: repeated scalars are encoded **unpacked** (one key per value, `packed = "false"`);
//!   the decoder accepts packed and unpacked alike (prost does both for repeated scalars).
//! - **required** fields (`EgmCartesian.x/y/z`, `EgmQuaternion.u0..u3`, `EgmClock`, the state
//!   enums, `EgmPathCorr`) are always encoded, also when zero.
//! - **units**: joints in degrees (deg/s for speeds), positions in mm, Euler angles in degrees.
//! - `EgmRobot.measuredForce` (tag 9) is **wire-incompatible between schema generations**
//!   (V1.1: `force = 1`; newer: `fcActive = 1`, `force = 2`). It is therefore kept as raw bytes
//!   ([`EgmRobot::measured_force`]) and parsed by hand with [`MeasuredForce::parse`], which
//!   understands both layouts, so a controller of either generation never fails the whole
//!   `EgmRobot`. [`EgmMeasuredForceV11`] and [`EgmMeasuredForce`] (newer) are the typed forms
//!   for encoding (e.g. by a controller emulator).
//!
//! Entry points: [`decode_robot`] / [`encode_robot`] (controller → sensor) and
//! [`decode_sensor`] / [`encode_sensor`] (sensor → controller). Decoding never panics on any
//! input; errors are [`ProtoError`].

use prost::Message;

use crate::frame::{self, Doubles};

/// What went wrong decoding an EGM datagram.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The protobuf decoder rejected the bytes (truncated, bad wire type, bad varint, …).
    #[error("protobuf: {0}")]
    Decode(#[from] prost::DecodeError),
    /// A hand-parsed sub-message (measuredForce) is malformed.
    #[error("measuredForce: {0}")]
    Force(&'static str),
    /// The allocation-free decoder ([`super::frame`]) rejected the bytes (where prost does).
    #[error("protobuf: {0}")]
    Wire(&'static str),
}

/// `EgmHeader.MessageType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MessageType {
    /// `MSGTYPE_UNDEFINED`
    Undefined = 0,
    /// `MSGTYPE_COMMAND` (future use)
    Command = 1,
    /// `MSGTYPE_DATA`: sent by the controller.
    Data = 2,
    /// `MSGTYPE_CORRECTION`: sensor → controller position guidance (joint or pose mode).
    Correction = 3,
    /// `MSGTYPE_PATH_CORRECTION`: sensor → controller path correction.
    PathCorrection = 4,
}

/// `EgmHeader`: 1 seqno, 2 tm (ms), 3 mtype.
#[derive(Clone, PartialEq, Message)]
pub struct EgmHeader {
    /// Sequence number, to detect lost messages.
    #[prost(uint32, optional, tag = "1")]
    pub seqno: Option<u32>,
    /// Sender's time stamp (ms).
    #[prost(uint32, optional, tag = "2")]
    pub tm: Option<u32>,
    #[prost(enumeration = "MessageType", optional, tag = "3")]
    pub mtype: Option<i32>,
}

/// `EgmCartesian`: position in **mm**, all required.
#[derive(Clone, PartialEq, Message)]
pub struct EgmCartesian {
    #[prost(double, required, tag = "1")]
    pub x: f64,
    #[prost(double, required, tag = "2")]
    pub y: f64,
    #[prost(double, required, tag = "3")]
    pub z: f64,
}

/// `EgmQuaternion`: `u0` is the scalar part (w, x, y, z order), all required.
#[derive(Clone, PartialEq, Message)]
pub struct EgmQuaternion {
    #[prost(double, required, tag = "1")]
    pub u0: f64,
    #[prost(double, required, tag = "2")]
    pub u1: f64,
    #[prost(double, required, tag = "3")]
    pub u2: f64,
    #[prost(double, required, tag = "4")]
    pub u3: f64,
}

/// `EgmEuler`: orientation in **degrees**, all required (convention unconfirmed: prefer
/// quaternions).
#[derive(Clone, PartialEq, Message)]
pub struct EgmEuler {
    #[prost(double, required, tag = "1")]
    pub x: f64,
    #[prost(double, required, tag = "2")]
    pub y: f64,
    #[prost(double, required, tag = "3")]
    pub z: f64,
}

/// `EgmClock`: time since 1970, both required.
#[derive(Clone, PartialEq, Message)]
pub struct EgmClock {
    #[prost(uint64, required, tag = "1")]
    pub sec: u64,
    #[prost(uint64, required, tag = "2")]
    pub usec: u64,
}

/// `EgmPose`: 1 pos, 2 orient, 3 euler (Euler has priority when both are sent).
#[derive(Clone, PartialEq, Message)]
pub struct EgmPose {
    #[prost(message, optional, tag = "1")]
    pub pos: Option<EgmCartesian>,
    #[prost(message, optional, tag = "2")]
    pub orient: Option<EgmQuaternion>,
    #[prost(message, optional, tag = "3")]
    pub euler: Option<EgmEuler>,
}

/// `EgmCartesianSpeed`: 6 values, mm/s ×3 then deg/s ×3.
#[derive(Clone, PartialEq, Message)]
pub struct EgmCartesianSpeed {
    #[prost(double, repeated, packed = "false", tag = "1")]
    pub value: Vec<f64>,
}

/// `EgmJoints`: robot joints in **degrees** (deg/s in a speed reference).
#[derive(Clone, PartialEq, Message)]
pub struct EgmJoints {
    #[prost(double, repeated, packed = "false", tag = "1")]
    pub joints: Vec<f64>,
}

/// `EgmExternalJoints`: deg (rotary) or mm (linear). Declared by the schema; the
/// `externalJoints` fields of planned/feedback/speedRef actually use [`EgmJoints`].
#[derive(Clone, PartialEq, Message)]
pub struct EgmExternalJoints {
    #[prost(double, repeated, packed = "false", tag = "1")]
    pub joints: Vec<f64>,
}

/// `EgmPlanned`: 1 joints, 2 cartesian, 3 externalJoints, 4 time (V1.1+).
#[derive(Clone, PartialEq, Message)]
pub struct EgmPlanned {
    #[prost(message, optional, tag = "1")]
    pub joints: Option<EgmJoints>,
    #[prost(message, optional, tag = "2")]
    pub cartesian: Option<EgmPose>,
    #[prost(message, optional, tag = "3")]
    pub external_joints: Option<EgmJoints>,
    #[prost(message, optional, tag = "4")]
    pub time: Option<EgmClock>,
}

/// `EgmSpeedRef`: 1 joints (deg/s), 2 cartesians, 3 externalJoints.
#[derive(Clone, PartialEq, Message)]
pub struct EgmSpeedRef {
    #[prost(message, optional, tag = "1")]
    pub joints: Option<EgmJoints>,
    #[prost(message, optional, tag = "2")]
    pub cartesians: Option<EgmCartesianSpeed>,
    #[prost(message, optional, tag = "3")]
    pub external_joints: Option<EgmJoints>,
}

/// `EgmPathCorr`: 1 pos (mm, path frame) and 2 age (ms), both required.
#[derive(Clone, PartialEq, Message)]
pub struct EgmPathCorr {
    #[prost(message, required, tag = "1")]
    pub pos: EgmCartesian,
    #[prost(uint32, required, tag = "2")]
    pub age: u32,
}

/// `EgmFeedBack` (measured): 1 joints, 2 cartesian, 3 externalJoints, 4 time (V1.1+; its
/// presence is how V1.0 controllers are told apart).
#[derive(Clone, PartialEq, Message)]
pub struct EgmFeedBack {
    #[prost(message, optional, tag = "1")]
    pub joints: Option<EgmJoints>,
    #[prost(message, optional, tag = "2")]
    pub cartesian: Option<EgmPose>,
    #[prost(message, optional, tag = "3")]
    pub external_joints: Option<EgmJoints>,
    #[prost(message, optional, tag = "4")]
    pub time: Option<EgmClock>,
}

/// `EgmMotorState.MotorStateType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MotorStateType {
    Undefined = 0,
    On = 1,
    Off = 2,
}

/// `EgmMotorState`: 1 state, required.
#[derive(Clone, PartialEq, Message)]
pub struct EgmMotorState {
    #[prost(enumeration = "MotorStateType", required, tag = "1")]
    pub state: i32,
}

/// `EgmMCIState.MCIStateType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MciStateType {
    Undefined = 0,
    Error = 1,
    Stopped = 2,
    Running = 3,
}

/// `EgmMCIState` (the EGM motion state): 1 state, required.
#[derive(Clone, PartialEq, Message)]
pub struct EgmMciState {
    #[prost(enumeration = "MciStateType", required, tag = "1")]
    pub state: i32,
}

/// `EgmRapidCtrlExecState.RapidCtrlExecStateType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum RapidCtrlExecStateType {
    Undefined = 0,
    Stopped = 1,
    Running = 2,
}

/// `EgmRapidCtrlExecState`: 1 state, required.
#[derive(Clone, PartialEq, Message)]
pub struct EgmRapidCtrlExecState {
    #[prost(enumeration = "RapidCtrlExecStateType", required, tag = "1")]
    pub state: i32,
}

/// `EgmTestSignals`: 1 signals.
#[derive(Clone, PartialEq, Message)]
pub struct EgmTestSignals {
    #[prost(double, repeated, packed = "false", tag = "1")]
    pub signals: Vec<f64>,
}

/// `EgmMeasuredForce`, **V1.1** layout (RW 6.07–6.x, abb_libegm): 1 force (6 values).
/// For encoding; decoding goes through [`MeasuredForce::parse`].
#[derive(Clone, PartialEq, Message)]
pub struct EgmMeasuredForceV11 {
    #[prost(double, repeated, packed = "false", tag = "1")]
    pub force: Vec<f64>,
}

/// `EgmMeasuredForce`, **newer** layout: 1 fcActive, 2 force (N and Nm). Force is valid only
/// if `fc_active` is absent or true. For encoding; decoding goes through
/// [`MeasuredForce::parse`].
#[derive(Clone, PartialEq, Message)]
pub struct EgmMeasuredForce {
    #[prost(bool, optional, tag = "1")]
    pub fc_active: Option<bool>,
    #[prost(double, repeated, packed = "false", tag = "2")]
    pub force: Vec<f64>,
}

/// `EgmCollisionInfo` (newer): 1 collsionTriggered (sic), 2 collDetQuota.
#[derive(Clone, PartialEq, Message)]
pub struct EgmCollisionInfo {
    #[prost(bool, optional, tag = "1")]
    pub collsion_triggered: Option<bool>,
    #[prost(double, repeated, packed = "false", tag = "2")]
    pub coll_det_quota: Vec<f64>,
}

/// `EgmRAPIDdata` (newer): 1 digVal, 2 dnum.
#[derive(Clone, PartialEq, Message)]
pub struct EgmRapidData {
    #[prost(bool, optional, tag = "1")]
    pub dig_val: Option<bool>,
    #[prost(double, repeated, packed = "false", tag = "2")]
    pub dnum: Vec<f64>,
}

/// `EgmRobot`: controller → sensor, one per controller cycle. All fields optional.
#[derive(Clone, PartialEq, Message)]
pub struct EgmRobot {
    #[prost(message, optional, tag = "1")]
    pub header: Option<EgmHeader>,
    #[prost(message, optional, tag = "2")]
    pub feed_back: Option<EgmFeedBack>,
    #[prost(message, optional, tag = "3")]
    pub planned: Option<EgmPlanned>,
    #[prost(message, optional, tag = "4")]
    pub motor_state: Option<EgmMotorState>,
    #[prost(message, optional, tag = "5")]
    pub mci_state: Option<EgmMciState>,
    #[prost(bool, optional, tag = "6")]
    pub mci_convergence_met: Option<bool>,
    #[prost(message, optional, tag = "7")]
    pub test_signals: Option<EgmTestSignals>,
    #[prost(message, optional, tag = "8")]
    pub rapid_exec_state: Option<EgmRapidCtrlExecState>,
    /// `measuredForce` (tag 9) as the raw bytes of the sub-message: its layout differs between
    /// schema generations; parse with [`MeasuredForce::parse`] (or [`EgmRobot::force`]).
    #[prost(bytes = "vec", optional, tag = "9")]
    pub measured_force: Option<Vec<u8>>,
    /// `utilizationRate` (sent from RW 6.10).
    #[prost(double, optional, tag = "10")]
    pub utilization_rate: Option<f64>,
    #[prost(uint32, optional, tag = "11")]
    pub move_index: Option<u32>,
    #[prost(message, optional, tag = "12")]
    pub collision_info: Option<EgmCollisionInfo>,
    #[prost(message, optional, tag = "13")]
    pub rapid_from_robot: Option<EgmRapidData>,
}

/// `EgmSensor`: sensor → controller, joint or pose guidance. All fields optional.
#[derive(Clone, PartialEq, Message)]
pub struct EgmSensor {
    #[prost(message, optional, tag = "1")]
    pub header: Option<EgmHeader>,
    #[prost(message, optional, tag = "2")]
    pub planned: Option<EgmPlanned>,
    #[prost(message, optional, tag = "3")]
    pub speed_ref: Option<EgmSpeedRef>,
    #[prost(message, optional, tag = "4")]
    pub rapid_to_robot: Option<EgmRapidData>,
}

/// `EgmSensorPathCorr`: sensor → controller path correction (mtype PATH_CORRECTION).
#[derive(Clone, PartialEq, Message)]
pub struct EgmSensorPathCorr {
    #[prost(message, optional, tag = "1")]
    pub header: Option<EgmHeader>,
    #[prost(message, optional, tag = "2")]
    pub path_corr: Option<EgmPathCorr>,
}

/// Which `EgmMeasuredForce` layout a controller sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceSchema {
    /// No distinguishing field present (empty sub-message).
    Unknown,
    /// V1.1: force at tag 1.
    V11,
    /// Newer: fcActive at tag 1 and/or force at tag 2.
    Newer,
}

/// `measuredForce` decoded from either layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredForce {
    pub schema: ForceSchema,
    /// `fcActive` (newer layout only).
    pub fc_active: Option<bool>,
    /// The force values as sent (normally 6: N ×3, Nm ×3; up to 12 kept, all counted).
    pub force: Doubles<12>,
}

impl MeasuredForce {
    /// Parses the bytes of an `EgmMeasuredForce` of either generation:
    /// tag 1 as varint → newer `fcActive`; tag 1 as fixed64 or length-delimited → V1.1 `force`
    /// (unpacked or packed); tag 2 as fixed64/length-delimited → newer `force`; any other field
    /// is skipped. Malformed bytes → error (never a panic).
    pub fn parse(mut b: &[u8]) -> Result<Self, ProtoError> {
        let mut out = MeasuredForce {
            schema: ForceSchema::Unknown,
            fc_active: None,
            force: Doubles::default(),
        };
        // The wire rules are `frame`'s (prost's); the errors say where they came from.
        let in_force = |e: ProtoError| match e {
            ProtoError::Wire(w) => ProtoError::Force(w),
            other => other,
        };
        while !b.is_empty() {
            let (tag, wire) = frame::key(&mut b).map_err(in_force)?;
            match (tag, wire) {
                (1, 0) => {
                    out.fc_active = Some(frame::varint(&mut b).map_err(in_force)? != 0);
                    out.schema = ForceSchema::Newer;
                }
                (1, 1) | (1, 2) => {
                    frame::doubles(&mut b, wire, |v| out.force.push(v)).map_err(in_force)?;
                    out.schema = ForceSchema::V11;
                }
                (2, 1) | (2, 2) => {
                    frame::doubles(&mut b, wire, |v| out.force.push(v)).map_err(in_force)?;
                    out.schema = ForceSchema::Newer;
                }
                _ => frame::skip(&mut b, tag, wire, 1).map_err(in_force)?,
            }
        }
        Ok(out)
    }

    /// True when the force may be used: values present and `fcActive` absent or true.
    pub fn valid(&self) -> bool {
        !self.force.is_empty() && self.fc_active != Some(false)
    }
}

impl EgmRobot {
    /// `measuredForce` parsed from either schema generation; `None` when absent.
    pub fn force(&self) -> Option<Result<MeasuredForce, ProtoError>> {
        self.measured_force.as_deref().map(MeasuredForce::parse)
    }
    /// `header.seqno`, if sent.
    pub fn seqno(&self) -> Option<u32> {
        self.header.as_ref().and_then(|h| h.seqno)
    }
    /// `header.tm` (controller ms), if sent.
    pub fn tm(&self) -> Option<u32> {
        self.header.as_ref().and_then(|h| h.tm)
    }
    /// Measured joints (deg), if sent.
    pub fn feedback_joints_deg(&self) -> Option<&[f64]> {
        self.feed_back
            .as_ref()
            .and_then(|f| f.joints.as_ref())
            .map(|j| j.joints.as_slice())
    }
    /// Motor state (`Undefined` when absent or unknown).
    pub fn motor_state_type(&self) -> MotorStateType {
        self.motor_state
            .as_ref()
            .map_or(MotorStateType::Undefined, |s| s.state())
    }
    /// EGM (MCI) state (`Undefined` when absent or unknown).
    pub fn mci_state_type(&self) -> MciStateType {
        self.mci_state
            .as_ref()
            .map_or(MciStateType::Undefined, |s| s.state())
    }
    /// RAPID execution state (`Undefined` when absent or unknown).
    pub fn rapid_state_type(&self) -> RapidCtrlExecStateType {
        self.rapid_exec_state
            .as_ref()
            .map_or(RapidCtrlExecStateType::Undefined, |s| s.state())
    }
}

/// Decodes one `EgmRobot` datagram. Any byte string is safe to pass.
pub fn decode_robot(datagram: &[u8]) -> Result<EgmRobot, ProtoError> {
    Ok(EgmRobot::decode(datagram)?)
}

/// Encodes an `EgmRobot` (proto2: unpacked repeated fields) — for controller emulators.
pub fn encode_robot(msg: &EgmRobot) -> Vec<u8> {
    msg.encode_to_vec()
}

/// Decodes one `EgmSensor` datagram — for controller emulators. Any byte string is safe.
pub fn decode_sensor(datagram: &[u8]) -> Result<EgmSensor, ProtoError> {
    Ok(EgmSensor::decode(datagram)?)
}

/// Encodes an `EgmSensor` (proto2: unpacked repeated fields).
pub fn encode_sensor(msg: &EgmSensor) -> Vec<u8> {
    msg.encode_to_vec()
}

/// Builds `EgmJoints` from values in degrees.
pub fn joints(values_deg: &[f64]) -> EgmJoints {
    EgmJoints {
        joints: values_deg.to_vec(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
