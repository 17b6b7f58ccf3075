//! Teach programs: human-readable TOML files of joint and Cartesian waypoints with the tool,
//! the payload and the units in every key name. Pure apart from the file helpers
//! ([`Program::save`], [`Program::load`], [`Program::list`]); no clock (the creation time is
//! passed in).
//!
//! ```toml
//! format_version = 1
//! name = "pick-a"
//! created = "2025-05-01T10:00:00Z"      # RFC 3339, as given by the caller
//! arm_model = "irb120"
//!
//! [tool]                                # tool0 → TCP
//! translation_m = [0.0, 0.0, 0.12]
//! rpy_deg = [0.0, 0.0, 0.0]
//!
//! [payload]
//! mass_kg = 0.8
//! com_m = [0.0, 0.0, 0.05]              # in the F/T sensor frame
//!
//! [[waypoint]]
//! label = "above"
//! q_deg = [0.0, 10.0, 20.0, 0.0, 60.0, 0.0]
//! tcp_position_m = [0.4, 0.0, 0.45]
//! tcp_rpy_deg = [180.0, 0.0, 0.0]
//! dwell_s = 0.5                         # optional
//! speed_scale = 0.5                     # optional, (0, 1]
//! ```
//!
//! # Conventions
//! * **Joints are in degrees** (`q_deg`, A1..A6, the maker's joint coordinates as shown on the
//!   FlexPendant): integrators and operators read degrees. Inside the controller they are
//!   radians ([`Waypoint::q_rad`]).
//! * **Cartesian poses** are the TCP in the robot base frame: position in metres and
//!   roll-pitch-yaw in degrees about the fixed axes x, y, z, `R = Rz(yaw)·Ry(pitch)·Rx(roll)` —
//!   the convention of `kinematics::pose::pose_from_xyz_rpy` and of `FrameParams::rpy`.
//! * **Tool**: the tool0 → TCP transform, same units. **Payload**: mass (kg) and centre of
//!   mass (m) in the F/T sensor frame, as the force service identifies it.
//!
//! [`Program::from_toml`] reports *every* problem at once, each naming its key (and line).

// Index loops over the 6 joints read like the math (q_j, limits_j).
#![allow(clippy::needless_range_loop)]

use std::path::{Path, PathBuf};

use kinematics::{Arm, FrameParams, JointLimits, Joints, KinError};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::trajectory::JointWaypoint;

/// The file format version this code reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// Orientation tolerance of [`Program::check_consistency`] (degrees).
pub const CONSISTENCY_TOL_DEG: f64 = 0.1;

/// tool0 → TCP transform.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Translation (m).
    pub translation_m: [f64; 3],
    /// Roll, pitch, yaw (degrees), `R = Rz(yaw)·Ry(pitch)·Rx(roll)`.
    pub rpy_deg: [f64; 3],
}

impl ToolSpec {
    /// As an isometry (tool0 → TCP).
    pub fn to_isometry(&self) -> Isometry3<f64> {
        let r = self.rpy_deg.map(f64::to_radians);
        Isometry3::from_parts(
            Translation3::from(Vector3::from(self.translation_m)),
            UnitQuaternion::from_euler_angles(r[0], r[1], r[2]),
        )
    }

    /// From an isometry (tool0 → TCP).
    pub fn from_isometry(iso: &Isometry3<f64>) -> Self {
        let t = iso.translation.vector;
        let (r, p, y) = iso.rotation.euler_angles();
        Self {
            translation_m: [t.x, t.y, t.z],
            rpy_deg: [r, p, y].map(f64::to_degrees),
        }
    }

    /// From the arm table's `[arm.tool]` (rpy or quaternion).
    pub fn from_frame_params(f: &FrameParams) -> Result<Self, Vec<String>> {
        f.to_isometry("tool").map(|iso| Self::from_isometry(&iso))
    }
}

/// The tool's mass properties.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PayloadSpec {
    /// Mass (kg, ≥ 0).
    pub mass_kg: f64,
    /// Centre of mass (m) in the F/T sensor frame.
    pub com_m: [f64; 3],
}

/// One taught point: the joints (authoritative for joint playback) and the TCP pose they gave
/// (for Cartesian playback and for checking).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waypoint {
    /// Operator's name for the point (may be empty).
    pub label: String,
    /// Joints A1..A6 (degrees).
    pub q_deg: [f64; 6],
    /// TCP position in base (m).
    pub tcp_position_m: [f64; 3],
    /// TCP orientation in base: roll, pitch, yaw (degrees, fixed axes x, y, z).
    pub tcp_rpy_deg: [f64; 3],
    /// Time to wait at this point (s, ≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dwell_s: Option<f64>,
    /// Speed scale of the move into this point, (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_scale: Option<f64>,
}

impl Waypoint {
    /// A waypoint at joints `q_rad`, its TCP pose from `arm`'s FK at tool0 followed by `tool`.
    pub fn from_joints(
        label: &str,
        q_rad: &Joints,
        arm: &Arm,
        tool: &ToolSpec,
    ) -> Result<Self, KinError> {
        let tcp = arm.fk_tool0(q_rad)? * tool.to_isometry();
        let t = tcp.translation.vector;
        let (r, p, y) = tcp.rotation.euler_angles();
        Ok(Self {
            label: label.to_string(),
            q_deg: q_rad.map(f64::to_degrees),
            tcp_position_m: [t.x, t.y, t.z],
            tcp_rpy_deg: [r, p, y].map(f64::to_degrees),
            dwell_s: None,
            speed_scale: None,
        })
    }

    /// Joints in radians.
    pub fn q_rad(&self) -> Joints {
        self.q_deg.map(f64::to_radians)
    }

    /// The recorded TCP pose in base.
    pub fn tcp_pose(&self) -> Isometry3<f64> {
        ToolSpec {
            translation_m: self.tcp_position_m,
            rpy_deg: self.tcp_rpy_deg,
        }
        .to_isometry()
    }

    fn name(&self, i: usize) -> String {
        if self.label.is_empty() {
            format!("waypoint[{i}]")
        } else {
            format!("waypoint[{i}] ({:?})", self.label)
        }
    }
}

/// A teach program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// Must be [`FORMAT_VERSION`].
    pub format_version: u32,
    pub name: String,
    /// Creation time, RFC 3339 (given by the caller).
    pub created: String,
    /// Arm model the program was taught on, e.g. "irb120".
    pub arm_model: String,
    pub tool: ToolSpec,
    pub payload: PayloadSpec,
    #[serde(rename = "waypoint")]
    pub waypoints: Vec<Waypoint>,
}

/// Tolerances of [`Program::matches_mounted`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MountTolerance {
    /// Tool translation (mm).
    pub translation_mm: f64,
    /// Tool rotation (degrees).
    pub rotation_deg: f64,
    /// Payload mass, absolute (kg); the allowed difference is the larger of this and
    /// `mass_rel` × the mounted mass.
    pub mass_kg: f64,
    /// Payload mass, relative to the mounted mass.
    pub mass_rel: f64,
    /// Payload centre of mass (mm).
    pub com_mm: f64,
}

impl Default for MountTolerance {
    /// 1 mm, 0.5°, max(0.05 kg, 5 %), 5 mm.
    fn default() -> Self {
        Self {
            translation_mm: 1.0,
            rotation_deg: 0.5,
            mass_kg: 0.05,
            mass_rel: 0.05,
            com_mm: 5.0,
        }
    }
}

/// Program errors.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The program (text or values) is invalid; every problem is listed, each naming its key.
    #[error("{}{} problem(s):\n  - {}", .file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default(), .problems.len(), .problems.join("\n  - "))]
    Invalid {
        file: Option<PathBuf>,
        problems: Vec<String>,
    },
    #[error(
        "invalid program name {0:?}: use 1 to 64 letters, digits, '_' or '-' (no path separators)"
    )]
    BadName(String),
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ProgramError {
    /// The listed problems (empty for name and I/O errors).
    pub fn problems(&self) -> &[String] {
        match self {
            ProgramError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }

    fn invalid(problems: Vec<String>) -> Self {
        ProgramError::Invalid {
            file: None,
            problems,
        }
    }
}

fn result(problems: Vec<String>) -> Result<(), ProgramError> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ProgramError::invalid(problems))
    }
}

// ---------------------------------------------------------------------------------------------
// Value checks (shared by parsing, saving and validation)
// ---------------------------------------------------------------------------------------------

fn check_finite(key: &str, v: &[f64], errs: &mut Vec<String>) {
    for (i, x) in v.iter().enumerate() {
        if !x.is_finite() {
            errs.push(format!("{key}[{i}]: must be finite (got {x})"));
        }
    }
}

fn check_version(v: u32, at: &str, errs: &mut Vec<String>) {
    if v != FORMAT_VERSION {
        errs.push(format!(
            "format_version{at}: {v} is not supported (this controller reads version {FORMAT_VERSION})"
        ));
    }
}

fn check_name(key: &str, v: &str, errs: &mut Vec<String>) {
    if v.trim().is_empty() {
        errs.push(format!("{key}: must not be empty"));
    }
}

fn check_tool(t: &ToolSpec, errs: &mut Vec<String>) {
    check_tool_translation(&t.translation_m, errs);
    check_finite("tool.rpy_deg", &t.rpy_deg, errs);
}

fn check_tool_translation(t: &[f64; 3], errs: &mut Vec<String>) {
    check_finite("tool.translation_m", t, errs);
    if t.iter().any(|x| x.abs() > 2.0) {
        errs.push(format!(
            "tool.translation_m: {t:?} m is implausible (|value| > 2 m; metres, not mm?)"
        ));
    }
}

fn check_payload(p: &PayloadSpec, errs: &mut Vec<String>) {
    check_mass(p.mass_kg, errs);
    check_finite("payload.com_m", &p.com_m, errs);
}

fn check_mass(m: f64, errs: &mut Vec<String>) {
    if !(m.is_finite() && m >= 0.0) {
        errs.push(format!(
            "payload.mass_kg: must be finite and >= 0 (got {m})"
        ));
    }
}

fn check_waypoint(i: usize, w: &Waypoint, errs: &mut Vec<String>) {
    let n = w.name(i);
    check_finite(&format!("{n}.q_deg"), &w.q_deg, errs);
    check_finite(&format!("{n}.tcp_position_m"), &w.tcp_position_m, errs);
    check_finite(&format!("{n}.tcp_rpy_deg"), &w.tcp_rpy_deg, errs);
    check_dwell(&n, w.dwell_s, errs);
    check_scale(&n, w.speed_scale, errs);
}

fn check_dwell(n: &str, d: Option<f64>, errs: &mut Vec<String>) {
    if let Some(d) = d {
        if !(d.is_finite() && d >= 0.0) {
            errs.push(format!("{n}.dwell_s: must be finite and >= 0 (got {d})"));
        }
    }
}

fn check_scale(n: &str, s: Option<f64>, errs: &mut Vec<String>) {
    if let Some(s) = s {
        if !(s.is_finite() && s > 0.0 && s <= 1.0) {
            errs.push(format!("{n}.speed_scale: must be in (0, 1] (got {s})"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing, field by field, collecting every problem
// ---------------------------------------------------------------------------------------------

/// 1-based line of byte offset `pos` in `text`.
fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()
        .iter()
        .take(pos)
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Reads `key` of `table` as `T`; records a problem naming `path.key` (and `at`, a line
/// note) when missing (unless `optional`) or of the wrong type/shape.
fn field<T: DeserializeOwned>(
    table: &toml::Table,
    path: &str,
    key: &str,
    at: &str,
    optional: bool,
    errs: &mut Vec<String>,
) -> Option<T> {
    let full = if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    };
    match table.get(key) {
        None => {
            if !optional {
                errs.push(format!("{full}{at}: missing"));
            }
            None
        }
        Some(v) => match T::deserialize(v.clone()) {
            Ok(x) => Some(x),
            Err(e) => {
                let msg = e.message().trim().to_string();
                errs.push(format!("{full}{at}: {msg} (got {})", short(v)));
                None
            }
        },
    }
}

/// A value shortened for messages.
fn short(v: &toml::Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn unknown_keys(table: &toml::Table, path: &str, at: &str, known: &[&str], errs: &mut Vec<String>) {
    for k in table.keys() {
        if !known.contains(&k.as_str()) {
            let full = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            errs.push(format!(
                "{full}{at}: unknown key (expected one of: {})",
                known.join(", ")
            ));
        }
    }
}

/// A sub-table `key` of `root`, or a problem.
fn sub_table<'a>(
    root: &'a toml::Table,
    key: &str,
    at: &str,
    errs: &mut Vec<String>,
) -> Option<&'a toml::Table> {
    match root.get(key) {
        None => {
            errs.push(format!("[{key}]: missing table"));
            None
        }
        Some(toml::Value::Table(t)) => Some(t),
        Some(v) => {
            errs.push(format!(
                "{key}{at}: must be a table [{key}] (got {})",
                v.type_str()
            ));
            None
        }
    }
}

const TOP_KEYS: [&str; 7] = [
    "format_version",
    "name",
    "created",
    "arm_model",
    "tool",
    "payload",
    "waypoint",
];
const TOOL_KEYS: [&str; 2] = ["translation_m", "rpy_deg"];
const PAYLOAD_KEYS: [&str; 2] = ["mass_kg", "com_m"];
const WAYPOINT_KEYS: [&str; 6] = [
    "label",
    "q_deg",
    "tcp_position_m",
    "tcp_rpy_deg",
    "dwell_s",
    "speed_scale",
];

/// Line numbers of the top-level keys and of the `[[waypoint]]` entries, when the document
/// has that shape (best effort: messages just lose the line otherwise).
fn spans(text: &str) -> (std::collections::BTreeMap<String, usize>, Vec<usize>) {
    let top: std::collections::BTreeMap<String, usize> =
        toml::from_str::<std::collections::BTreeMap<String, toml::Spanned<toml::Value>>>(text)
            .map(|m| {
                m.into_iter()
                    .map(|(k, v)| (k, line_of(text, v.span().start)))
                    .collect()
            })
            .unwrap_or_default();
    #[derive(Deserialize)]
    struct Wps {
        #[serde(default)]
        waypoint: Vec<toml::Spanned<toml::Value>>,
    }
    let wps = toml::from_str::<Wps>(text)
        .map(|w| {
            w.waypoint
                .iter()
                .map(|v| line_of(text, v.span().start))
                .collect()
        })
        .unwrap_or_default();
    (top, wps)
}

fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(" (line {l})")).unwrap_or_default()
}

impl Program {
    /// Parses a program file. Every problem is reported at once, each naming its key (and
    /// line): TOML syntax (line and column from the toml crate), missing/unknown keys, wrong
    /// types or array lengths, wrong `format_version`, non-finite values, out-of-range
    /// `dwell_s` / `speed_scale` / `mass_kg`, an empty waypoint list.
    pub fn from_toml(text: &str) -> Result<Program, ProgramError> {
        let root: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => {
                return Err(ProgramError::invalid(vec![e
                    .to_string()
                    .trim()
                    .to_string()]));
            }
        };
        let (lines, wp_lines) = spans(text);
        let at = |k: &str| at_line(lines.get(k).copied());
        let mut errs = Vec::new();
        for k in root.keys() {
            if !TOP_KEYS.contains(&k.as_str()) {
                errs.push(format!(
                    "{k}{}: unknown key (expected one of: {})",
                    at(k),
                    TOP_KEYS.join(", ")
                ));
            }
        }

        let format_version: Option<u32> = field(
            &root,
            "",
            "format_version",
            &at("format_version"),
            false,
            &mut errs,
        );
        if let Some(v) = format_version {
            check_version(v, &at("format_version"), &mut errs);
        }
        let name: Option<String> = field(&root, "", "name", &at("name"), false, &mut errs);
        if let Some(n) = &name {
            check_name("name", n, &mut errs);
        }
        let created: Option<String> = field(&root, "", "created", &at("created"), false, &mut errs);
        let arm_model: Option<String> =
            field(&root, "", "arm_model", &at("arm_model"), false, &mut errs);
        if let Some(m) = &arm_model {
            check_name("arm_model", m, &mut errs);
        }

        let tool = sub_table(&root, "tool", &at("tool"), &mut errs).and_then(|t| {
            let a = at("tool");
            unknown_keys(t, "tool", &a, &TOOL_KEYS, &mut errs);
            let tr: Option<[f64; 3]> = field(t, "tool", "translation_m", &a, false, &mut errs);
            if let Some(tr) = &tr {
                check_tool_translation(tr, &mut errs);
            }
            let rpy: Option<[f64; 3]> = field(t, "tool", "rpy_deg", &a, false, &mut errs);
            if let Some(rpy) = &rpy {
                check_finite("tool.rpy_deg", rpy, &mut errs);
            }
            Some(ToolSpec {
                translation_m: tr?,
                rpy_deg: rpy?,
            })
        });
        let payload = sub_table(&root, "payload", &at("payload"), &mut errs).and_then(|t| {
            let a = at("payload");
            unknown_keys(t, "payload", &a, &PAYLOAD_KEYS, &mut errs);
            let m: Option<f64> = field(t, "payload", "mass_kg", &a, false, &mut errs);
            if let Some(m) = m {
                check_mass(m, &mut errs);
            }
            let c: Option<[f64; 3]> = field(t, "payload", "com_m", &a, false, &mut errs);
            if let Some(c) = &c {
                check_finite("payload.com_m", c, &mut errs);
            }
            Some(PayloadSpec {
                mass_kg: m?,
                com_m: c?,
            })
        });

        let mut waypoints = Some(Vec::new());
        match root.get("waypoint") {
            None => errs.push(
                "waypoint: no [[waypoint]] entries (a program needs at least one)".to_string(),
            ),
            Some(toml::Value::Array(arr)) => {
                if arr.is_empty() {
                    errs.push(format!(
                        "waypoint{}: empty (a program needs at least one)",
                        at("waypoint")
                    ));
                }
                for (i, v) in arr.iter().enumerate() {
                    let a = at_line(wp_lines.get(i).copied());
                    let Some(t) = v.as_table() else {
                        errs.push(format!(
                            "waypoint[{i}]{a}: must be a table (got {})",
                            v.type_str()
                        ));
                        waypoints = None;
                        continue;
                    };
                    let label: Option<String> = field(t, "", "label", "", true, &mut errs);
                    let p = match &label {
                        Some(l) if !l.is_empty() => format!("waypoint[{i}] ({l:?})"),
                        _ => format!("waypoint[{i}]"),
                    };
                    unknown_keys(t, &p, &a, &WAYPOINT_KEYS, &mut errs);
                    let q: Option<[f64; 6]> = field(t, &p, "q_deg", &a, false, &mut errs);
                    let pos: Option<[f64; 3]> =
                        field(t, &p, "tcp_position_m", &a, false, &mut errs);
                    let rpy: Option<[f64; 3]> = field(t, &p, "tcp_rpy_deg", &a, false, &mut errs);
                    let dwell: Option<f64> = field(t, &p, "dwell_s", &a, true, &mut errs);
                    let scale: Option<f64> = field(t, &p, "speed_scale", &a, true, &mut errs);
                    if let Some(q) = &q {
                        check_finite(&format!("{p}.q_deg"), q, &mut errs);
                    }
                    if let Some(x) = &pos {
                        check_finite(&format!("{p}.tcp_position_m"), x, &mut errs);
                    }
                    if let Some(x) = &rpy {
                        check_finite(&format!("{p}.tcp_rpy_deg"), x, &mut errs);
                    }
                    check_dwell(&p, dwell, &mut errs);
                    check_scale(&p, scale, &mut errs);
                    let bad_optional = (t.contains_key("dwell_s") && dwell.is_none())
                        || (t.contains_key("speed_scale") && scale.is_none())
                        || (t.contains_key("label") && label.is_none());
                    match (q, pos, rpy, bad_optional) {
                        (Some(q_deg), Some(tcp_position_m), Some(tcp_rpy_deg), false) => {
                            let w = Waypoint {
                                label: label.unwrap_or_default(),
                                q_deg,
                                tcp_position_m,
                                tcp_rpy_deg,
                                dwell_s: dwell,
                                speed_scale: scale,
                            };
                            if let Some(ws) = waypoints.as_mut() {
                                ws.push(w);
                            }
                        }
                        _ => waypoints = None,
                    }
                }
            }
            Some(v) => {
                errs.push(format!(
                    "waypoint{}: must be an array of tables [[waypoint]] (got {})",
                    at("waypoint"),
                    v.type_str()
                ));
                waypoints = None;
            }
        }

        match (
            format_version,
            name,
            created,
            arm_model,
            tool,
            payload,
            waypoints,
        ) {
            (
                Some(format_version),
                Some(name),
                Some(created),
                Some(arm_model),
                Some(tool),
                Some(payload),
                Some(waypoints),
            ) if errs.is_empty() => Ok(Program {
                format_version,
                name,
                created,
                arm_model,
                tool,
                payload,
                waypoints,
            }),
            _ => {
                if errs.is_empty() {
                    // Unreachable in practice: every `None` above recorded a problem.
                    errs.push("program: incomplete".to_string());
                }
                Err(ProgramError::invalid(errs))
            }
        }
    }

    /// The file text: a header comment stating the units, then the TOML. Floats are written
    /// in their shortest exact form, so `from_toml(to_toml(p)) == p` for finite values.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self)
            // Cannot fail for this type (no maps with non-string keys, no unsupported values);
            // if it ever did, the text would not parse back and `save` would refuse it.
            .unwrap_or_else(|e| format!("# serialisation failed: {e}\n"));
        format!("{HEADER}\n{body}")
    }

    /// The value checks of [`Self::from_toml`] on an in-memory program: version, names,
    /// finite values, ranges, at least one waypoint.
    pub fn check(&self) -> Result<(), ProgramError> {
        let mut errs = Vec::new();
        self.check_into(&mut errs);
        result(errs)
    }

    fn check_into(&self, errs: &mut Vec<String>) {
        check_version(self.format_version, "", errs);
        check_name("name", &self.name, errs);
        check_name("arm_model", &self.arm_model, errs);
        check_tool(&self.tool, errs);
        check_payload(&self.payload, errs);
        if self.waypoints.is_empty() {
            errs.push("waypoint: empty (a program needs at least one)".to_string());
        }
        for (i, w) in self.waypoints.iter().enumerate() {
            check_waypoint(i, w, errs);
        }
    }

    /// [`Self::check`] plus every joint of every waypoint within `limits` (all listed).
    pub fn validate(&self, limits: &JointLimits) -> Result<(), ProgramError> {
        let mut errs = Vec::new();
        self.check_into(&mut errs);
        for (i, w) in self.waypoints.iter().enumerate() {
            let q = w.q_rad();
            for j in 0..6 {
                if q[j].is_finite() && (q[j] < limits.min[j] || q[j] > limits.max[j]) {
                    errs.push(format!(
                        "{}.q_deg[{j}]: A{} = {:.3}° is outside the joint limits [{:.3}°, {:.3}°]",
                        w.name(i),
                        j + 1,
                        w.q_deg[j],
                        limits.min[j].to_degrees(),
                        limits.max[j].to_degrees()
                    ));
                }
            }
        }
        result(errs)
    }

    /// The Cartesian part agrees with the joint part: for every waypoint, `arm`'s FK of
    /// `q_deg` at tool0 followed by this program's tool is within `tol_m` (position) and
    /// [`CONSISTENCY_TOL_DEG`] (orientation) of the recorded TCP pose (all listed).
    pub fn check_consistency(&self, arm: &Arm, tol_m: f64) -> Result<(), ProgramError> {
        let mut errs = Vec::new();
        let tool = self.tool.to_isometry();
        for (i, w) in self.waypoints.iter().enumerate() {
            let fk = match arm.fk_tool0(&w.q_rad()) {
                Ok(t) => t * tool,
                Err(e) => {
                    errs.push(format!("{}.q_deg: no forward kinematics ({e})", w.name(i)));
                    continue;
                }
            };
            let rec = w.tcp_pose();
            let dp = (fk.translation.vector - rec.translation.vector).norm();
            let dr = fk.rotation.angle_to(&rec.rotation).to_degrees();
            if exceeds(dp, tol_m) {
                let p = fk.translation.vector;
                errs.push(format!(
                    "{}.tcp_position_m: {:?} m is {:.2} mm from the forward kinematics of q_deg \
                     ([{:.4}, {:.4}, {:.4}] m; tolerance {:.2} mm)",
                    w.name(i),
                    w.tcp_position_m,
                    dp * 1e3,
                    p.x,
                    p.y,
                    p.z,
                    tol_m * 1e3
                ));
            }
            if exceeds(dr, CONSISTENCY_TOL_DEG) {
                errs.push(format!(
                    "{}.tcp_rpy_deg: {:?} is {:.3}° from the forward kinematics of q_deg \
                     (tolerance {CONSISTENCY_TOL_DEG}°)",
                    w.name(i),
                    w.tcp_rpy_deg,
                    dr
                ));
            }
        }
        result(errs)
    }

    /// `Ok` when the mounted tool and payload match the program's within `tol`; otherwise
    /// says exactly what differs (tool translation in mm, rotation in degrees, mass in kg,
    /// centre of mass in mm), all differences in one message.
    pub fn matches_mounted(
        &self,
        tool: &ToolSpec,
        payload: &PayloadSpec,
        tol: &MountTolerance,
    ) -> Result<(), String> {
        let mut diffs = Vec::new();
        let (a, b) = (self.tool.to_isometry(), tool.to_isometry());
        let dt_mm = (a.translation.vector - b.translation.vector).norm() * 1e3;
        if exceeds(dt_mm, tol.translation_mm) {
            diffs.push(format!(
                "tool translation differs by {dt_mm:.1} mm (program {} mm, mounted {} mm; \
                 tolerance {} mm)",
                mm(&self.tool.translation_m),
                mm(&tool.translation_m),
                tol.translation_mm
            ));
        }
        let dr = a.rotation.angle_to(&b.rotation).to_degrees();
        if exceeds(dr, tol.rotation_deg) {
            diffs.push(format!(
                "tool rotation differs by {dr:.2}° (program rpy {} °, mounted rpy {} °; \
                 tolerance {}°)",
                deg3(&self.tool.rpy_deg),
                deg3(&tool.rpy_deg),
                tol.rotation_deg
            ));
        }
        let dm = (self.payload.mass_kg - payload.mass_kg).abs();
        let tol_m = tol.mass_kg.max(tol.mass_rel * payload.mass_kg.abs());
        if exceeds(dm, tol_m) {
            diffs.push(format!(
                "payload mass differs by {dm:.3} kg (program {:.3} kg, mounted {:.3} kg; \
                 tolerance {tol_m:.3} kg)",
                self.payload.mass_kg, payload.mass_kg
            ));
        }
        let dc_mm = (Vector3::from(self.payload.com_m) - Vector3::from(payload.com_m)).norm() * 1e3;
        if exceeds(dc_mm, tol.com_mm) {
            diffs.push(format!(
                "payload centre of mass differs by {dc_mm:.1} mm (program {} mm, mounted {} mm; \
                 tolerance {} mm)",
                mm(&self.payload.com_m),
                mm(&payload.com_m),
                tol.com_mm
            ));
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "program {:?} was taught with another tool or payload: {}",
                self.name,
                diffs.join("; ")
            ))
        }
    }

    /// The joint waypoints for [`crate::trajectory::JointTrajectory::plan`] (rad, with dwell
    /// and speed scale).
    pub fn joint_waypoints(&self) -> Vec<JointWaypoint> {
        self.waypoints
            .iter()
            .map(|w| JointWaypoint {
                q: w.q_rad(),
                speed_scale: w.speed_scale,
                dwell_s: w.dwell_s.unwrap_or(0.0),
            })
            .collect()
    }

    /// The recorded TCP poses (base frame) for Cartesian playback.
    pub fn tcp_poses(&self) -> Vec<Isometry3<f64>> {
        self.waypoints.iter().map(Waypoint::tcp_pose).collect()
    }

    // -----------------------------------------------------------------------------------------
    // Files
    // -----------------------------------------------------------------------------------------

    /// `dir/name.toml`, after checking `name` (1–64 of `[A-Za-z0-9_-]`).
    pub fn path(dir: &Path, name: &str) -> Result<PathBuf, ProgramError> {
        valid_name(name)?;
        Ok(dir.join(format!("{name}.toml")))
    }

    /// Writes the program to `dir/name.toml` atomically (temporary file in `dir`, fsync,
    /// rename), creating `dir` if needed. Refuses a program that fails [`Self::check`].
    pub fn save(&self, dir: &Path, name: &str) -> Result<PathBuf, ProgramError> {
        let path = Self::path(dir, name)?;
        self.check()?;
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| ProgramError::Io { path: p, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let tmp = dir.join(format!(".{name}.toml.tmp"));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            f.write_all(self.to_toml().as_bytes()).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        // Make the rename durable (best effort: not every platform can sync a directory).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(path)
    }

    /// Reads and parses `dir/name.toml`; problems carry the file path.
    pub fn load(dir: &Path, name: &str) -> Result<Program, ProgramError> {
        let path = Self::path(dir, name)?;
        let text = std::fs::read_to_string(&path).map_err(|source| ProgramError::Io {
            path: path.clone(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ProgramError::Invalid { problems, .. } => ProgramError::Invalid {
                file: Some(path),
                problems,
            },
            other => other,
        })
    }

    /// The program names in `dir` (files `<name>.toml` with a valid name), sorted; a missing
    /// directory has none.
    pub fn list(dir: &Path) -> Result<Vec<String>, ProgramError> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(ProgramError::Io {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        };
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|source| ProgramError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            let p = entry.path();
            if p.extension().and_then(|e| e.to_str()) != Some("toml") || !p.is_file() {
                continue;
            }
            if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                if valid_name(stem).is_ok() {
                    names.push(stem.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Checks a program (file) name: 1–64 characters of `[A-Za-z0-9_-]`.
pub fn valid_name(name: &str) -> Result<(), ProgramError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ProgramError::BadName(name.to_string()))
    }
}

/// `x > tol`, or `x` is NaN (a difference that cannot be computed is a difference).
fn exceeds(x: f64, tol: f64) -> bool {
    x.is_nan() || x > tol
}

fn mm(v: &[f64; 3]) -> String {
    format!("[{:.1}, {:.1}, {:.1}]", v[0] * 1e3, v[1] * 1e3, v[2] * 1e3)
}

fn deg3(v: &[f64; 3]) -> String {
    format!("[{:.2}, {:.2}, {:.2}]", v[0], v[1], v[2])
}

const HEADER: &str = "\
# Teach program (cell controller), format_version 1.
# Units are in every key name: _m metres, _deg degrees, _kg kilograms, _s seconds.
# q_deg: joints A1..A6 in degrees, the robot maker's joint coordinates (as on the FlexPendant).
# tcp_position_m / tcp_rpy_deg: the TCP pose in the robot base frame; rpy = roll, pitch, yaw
#   about the fixed axes x, y, z: R = Rz(yaw)·Ry(pitch)·Rx(roll).
# [tool]: tool0 -> TCP. [payload]: mass and centre of mass (in the F/T sensor frame).
# Optional per waypoint: dwell_s (>= 0) and speed_scale (0 < s <= 1).
";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> Program {
        let arm = Arm::irb120();
        let tool = ToolSpec {
            translation_m: [0.0, 0.01, 0.12],
            rpy_deg: [0.0, 0.0, 30.0],
        };
        let mut a = Waypoint::from_joints(
            "above",
            &[0.0, 10.0, 20.0, 0.0, 60.0, 0.0].map(f64::to_radians),
            &arm,
            &tool,
        )
        .unwrap();
        a.dwell_s = Some(0.5);
        let mut b = Waypoint::from_joints("", &[0.1, 0.3, -0.2, 0.4, 0.9, -1.0 / 3.0], &arm, &tool)
            .unwrap();
        b.speed_scale = Some(0.25);
        Program {
            format_version: FORMAT_VERSION,
            name: "pick-a".into(),
            created: "2025-05-01T10:00:00Z".into(),
            arm_model: "irb120".into(),
            tool,
            payload: PayloadSpec {
                mass_kg: 0.8,
                com_m: [0.0, 0.001, 0.05],
            },
            waypoints: vec![a, b],
        }
    }

    fn problems(text: &str) -> Vec<String> {
        match Program::from_toml(text) {
            Ok(p) => panic!("accepted: {p:?}"),
            Err(e) => {
                let all = e.to_string();
                for p in e.problems() {
                    assert!(all.contains(p.as_str()));
                }
                e.problems().to_vec()
            }
        }
    }

    fn has(problems: &[String], needles: &[&str]) {
        for n in needles {
            assert!(
                problems.iter().any(|p| p.contains(n)),
                "no problem mentions {n:?}: {problems:#?}"
            );
        }
    }

    #[test]
    fn round_trip_is_exact() {
        let p = sample();
        let text = p.to_toml();
        assert!(text.starts_with("# Teach program"), "{text}");
        assert!(
            text.contains("[[waypoint]]") && text.contains("q_deg = ["),
            "{text}"
        );
        let back = Program::from_toml(&text).unwrap();
        assert_eq!(back, p);
        // And once more through the text.
        assert_eq!(back.to_toml(), text);
        p.check().unwrap();
        p.validate(&JointLimits::irb120()).unwrap();
        p.check_consistency(&Arm::irb120(), 1e-9).unwrap();
    }

    #[test]
    fn integers_are_accepted_for_floats_and_optionals_may_be_left_out() {
        let text = r#"
format_version = 1
name = "p"
created = ""
arm_model = "irb120"
[tool]
translation_m = [0, 0, 0]
rpy_deg = [0, 0, 0]
[payload]
mass_kg = 1
com_m = [0, 0, 0]
[[waypoint]]
label = "home"
q_deg = [0, 0, 0, 0, 30, 0]
tcp_position_m = [0.4, 0, 0.5]
tcp_rpy_deg = [0, 90, 0]
"#;
        let p = Program::from_toml(text).unwrap();
        assert_eq!(p.payload.mass_kg, 1.0);
        assert_eq!(p.waypoints[0].dwell_s, None);
        assert_eq!(p.joint_waypoints()[0].dwell_s, 0.0);
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let text = sample()
            .to_toml()
            .replace("mass_kg = 0.8", "mass_kg = = 0.8");
        let p = problems(&text);
        assert_eq!(p.len(), 1);
        has(&p, &["line", "column"]);
    }

    #[test]
    fn every_problem_is_listed_with_its_key() {
        let text = r#"
format_version = 2
name = ""
arm_model = "irb120"
colour = "red"
[tool]
translation_m = [0.0, 0.0]
rpy_deg = [0.0, 0.0, nan]
[payload]
mass_kg = -1.0
com_m = [0.0, 0.0, inf]
extra = 1
[[waypoint]]
label = "a"
q_deg = [0.0, 0.0, 0.0, 0.0, 0.0]
tcp_position_m = [0.4, 0.0, 0.5]
tcp_rpy_deg = [0.0, 0.0, 0.0]
[[waypoint]]
q_deg = [0.0, 0.0, 0.0, 0.0, 0.0, nan]
tcp_position_m = "here"
tcp_rpy_deg = [0.0, 0.0, 0.0]
dwell_s = -1.0
speed_scale = 2.0
[[waypoint]]
label = "c"
q_deg = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
tcp_position_m = [0.4, 0.0, 0.5]
tcp_rpy_deg = [0.0, 0.0, 0.0]
speed_scale = "fast"
"#;
        let p = problems(text);
        has(
            &p,
            &[
                "format_version (line 2): 2 is not supported",
                "name: must not be empty",
                "created: missing",
                "colour (line 5): unknown key",
                "tool.translation_m (line 6): invalid length 2",
                "tool.rpy_deg[2]: must be finite",
                "payload.mass_kg: must be finite and >= 0",
                "payload.com_m[2]: must be finite",
                "payload.extra",
                "waypoint[0] (\"a\").q_deg (line 13): invalid length 5",
                "waypoint[1].tcp_position_m (line 18): invalid type",
                "waypoint[1].q_deg[5]: must be finite",
                "waypoint[1].dwell_s: must be finite and >= 0",
                "waypoint[1].speed_scale: must be in (0, 1]",
                "waypoint[2] (\"c\").speed_scale (line 24): invalid type",
            ],
        );
        assert_eq!(p.len(), 15, "{p:#?}");
    }

    #[test]
    fn missing_tables_and_empty_program() {
        let p =
            problems("format_version = 1\nname = \"x\"\ncreated = \"\"\narm_model = \"irb120\"\n");
        has(
            &p,
            &[
                "[tool]: missing table",
                "[payload]: missing table",
                "waypoint: no [[waypoint]]",
            ],
        );
        let p = problems(
            "format_version = 1\nname = \"x\"\ncreated = \"\"\narm_model = \"a\"\nwaypoint = []\n\
             tool = 3\n[payload]\nmass_kg = 0.0\ncom_m = [0.0, 0.0, 0.0]\n",
        );
        has(
            &p,
            &["waypoint (line 5): empty", "tool (line 6): must be a table"],
        );
        let mut e = sample();
        e.waypoints.clear();
        has(e.check().unwrap_err().problems(), &["waypoint: empty"]);
    }

    #[test]
    fn validate_lists_every_joint_outside_the_limits() {
        let mut p = sample();
        p.waypoints[0].q_deg[2] = 80.0; // A3 max 70°
        p.waypoints[1].q_deg[0] = -170.0; // A1 min −165°
        let e = p.validate(&JointLimits::irb120()).unwrap_err();
        has(
            e.problems(),
            &[
                "waypoint[0] (\"above\").q_deg[2]: A3 = 80.000° is outside the joint limits [-110.000°, 70.000°]",
                "waypoint[1].q_deg[0]: A1 = -170.000°",
            ],
        );
        assert_eq!(e.problems().len(), 2);
    }

    #[test]
    fn consistency_compares_fk_with_the_recorded_tcp() {
        let arm = Arm::irb120();
        let mut p = sample();
        p.check_consistency(&arm, 1e-4).unwrap();
        p.waypoints[1].tcp_position_m[2] += 0.003;
        p.waypoints[0].tcp_rpy_deg[0] += 1.0;
        let e = p.check_consistency(&arm, 1e-3).unwrap_err();
        has(
            e.problems(),
            &[
                "waypoint[1].tcp_position_m",
                "3.00 mm from the forward kinematics",
                "waypoint[0] (\"above\").tcp_rpy_deg",
            ],
        );
        assert_eq!(e.problems().len(), 2);
        // The program's tool counts, not the arm's.
        let mut q = sample();
        q.tool.translation_m[2] += 0.01;
        has(
            q.check_consistency(&arm, 1e-3).unwrap_err().problems(),
            &["10.00 mm"],
        );
    }

    #[test]
    fn mounted_tool_and_payload_must_match() {
        let p = sample();
        let tol = MountTolerance::default();
        p.matches_mounted(&p.tool, &p.payload, &tol).unwrap();
        // Within tolerance: 0.5 mm, 0.3°, 0.03 kg, 3 mm.
        let mut t = p.tool;
        t.translation_m[0] += 0.0005;
        t.rpy_deg[2] += 0.3;
        let mut l = p.payload;
        l.mass_kg += 0.03;
        l.com_m[2] += 0.003;
        p.matches_mounted(&t, &l, &tol).unwrap();
        // Beyond: each difference is named with its size and unit.
        t.translation_m[2] += 0.005;
        t.rpy_deg[0] += 2.0;
        l.mass_kg = 1.2;
        l.com_m[0] += 0.01;
        let m = p.matches_mounted(&t, &l, &tol).unwrap_err();
        for n in [
            "pick-a",
            "tool translation differs by 5.0 mm",
            "tool rotation differs by 2.0",
            "payload mass differs by 0.400 kg (program 0.800 kg, mounted 1.200 kg; tolerance 0.060 kg)",
            "payload centre of mass differs by 10.",
        ] {
            assert!(m.contains(n), "{n:?} not in {m}");
        }
        // Only the tool differs: only the tool is named.
        let mut t2 = p.tool;
        t2.translation_m[1] = 0.0;
        let m = p.matches_mounted(&t2, &p.payload, &tol).unwrap_err();
        assert!(m.contains("tool translation differs by 10.0 mm"), "{m}");
        assert!(
            !m.contains("payload mass") && !m.contains("centre of mass"),
            "{m}"
        );
        // A 5 % relative mass tolerance for heavy tools.
        let mut heavy = p.clone();
        heavy.payload.mass_kg = 2.0;
        let mut l2 = heavy.payload;
        l2.mass_kg = 2.09;
        heavy.matches_mounted(&p.tool, &l2, &tol).unwrap();
    }

    #[test]
    fn tool_spec_conversions() {
        let t = ToolSpec {
            translation_m: [0.01, 0.02, 0.15],
            rpy_deg: [10.0, -20.0, 30.0],
        };
        let back = ToolSpec::from_isometry(&t.to_isometry());
        for i in 0..3 {
            assert!((back.translation_m[i] - t.translation_m[i]).abs() < 1e-12);
            assert!((back.rpy_deg[i] - t.rpy_deg[i]).abs() < 1e-9);
        }
        let f = FrameParams {
            translation: [0.0, 0.0, 0.12],
            rpy: Some([0.0, 0.0, std::f64::consts::FRAC_PI_2]),
            quaternion: None,
        };
        let s = ToolSpec::from_frame_params(&f).unwrap();
        assert!((s.rpy_deg[2] - 90.0).abs() < 1e-9);
        // Same convention as kinematics' pose helper.
        let w = &sample().waypoints[0];
        let k = kinematics::pose::pose_from_xyz_rpy(
            w.tcp_position_m,
            w.tcp_rpy_deg.map(f64::to_radians),
        );
        assert!(k.rotation.angle_to(&w.tcp_pose().rotation) < 1e-12);
    }

    #[test]
    fn files_save_load_list() {
        let dir = std::env::temp_dir().join(format!("control-program-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(Program::list(&dir).unwrap(), Vec::<String>::new());
        let p = sample();
        let path = p.save(&dir, "pick_a-1").unwrap();
        assert_eq!(path, dir.join("pick_a-1.toml"));
        p.save(&dir, "b").unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        std::fs::write(dir.join("bad name.toml"), "x").unwrap();
        assert_eq!(Program::list(&dir).unwrap(), vec!["b", "pick_a-1"]);
        assert_eq!(Program::load(&dir, "pick_a-1").unwrap(), p);
        // No temporary file left behind.
        assert!(!dir.join(".pick_a-1.toml.tmp").exists());
        // Names with separators or dots are refused.
        for bad in ["../x", "a/b", "a\\b", "", "a.b", "..", &"x".repeat(65)] {
            assert!(
                matches!(p.save(&dir, bad), Err(ProgramError::BadName(_))),
                "{bad}"
            );
            assert!(matches!(
                Program::load(&dir, bad),
                Err(ProgramError::BadName(_))
            ));
        }
        // A missing file is an I/O error naming the path; a bad file names path and key.
        let e = Program::load(&dir, "nope").unwrap_err();
        assert!(matches!(e, ProgramError::Io { .. }) && e.to_string().contains("nope.toml"));
        std::fs::write(
            dir.join("broken.toml"),
            p.to_toml().replace("mass_kg = 0.8", "mass_kg = \"heavy\""),
        )
        .unwrap();
        let e = Program::load(&dir, "broken").unwrap_err().to_string();
        assert!(
            e.contains("broken.toml") && e.contains("payload.mass_kg"),
            "{e}"
        );
        // An invalid program is not written.
        let mut bad = p.clone();
        bad.waypoints[0].q_deg[0] = f64::NAN;
        assert!(bad.save(&dir, "bad").is_err());
        assert!(!dir.join("bad.toml").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// A saved program with one character replaced, a line dropped or the text cut: parsed
        /// (and then checked) or refused with every problem named, never a panic.
        #[test]
        fn mutated_program_files_are_parsed_or_refused_never_panic(
            at in 0usize..8192,
            c in proptest::prelude::any::<char>(),
            cut in 0usize..8192,
        ) {
            let text = sample().to_toml();
            for t in crate::taskfile::text_mutations(&text, at, c, cut) {
                match Program::from_toml(&t) {
                    Ok(p) => {
                        let _ = p.check();
                    }
                    Err(e) => {
                        proptest::prop_assert!(
                            !e.problems().is_empty() && e.problems().iter().all(|x| !x.is_empty()),
                            "{e}"
                        );
                    }
                }
            }
        }
    }
}
