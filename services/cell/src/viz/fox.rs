//! Foxglove's well-known schemas, JSON-encoded (the `json` message encoding with a
//! `jsonschema` schema named `foxglove.<Name>`): what the 3-D panel, the Log panel and the
//! plots understand. Field names, nesting and enum numbers are Foxglove's (foxglove/schemas);
//! times are `{sec, nsec}`, quaternions `{x, y, z, w}` (the cell's `Pose` is w, x, y, z).
//! Only the fields the cell uses are filled; arrays the panels iterate are always present.

use nalgebra::{Isometry3, UnitQuaternion, Vector3};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A point in time (`foxglove.Time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Time {
    pub sec: u32,
    pub nsec: u32,
}

impl Time {
    pub fn from_ns(ns: u64) -> Time {
        Time {
            sec: (ns / 1_000_000_000) as u32,
            nsec: (ns % 1_000_000_000) as u32,
        }
    }
    pub fn as_ns(&self) -> u64 {
        self.sec as u64 * 1_000_000_000 + self.nsec as u64
    }
}

/// `foxglove.Duration` (same shape as a time).
pub type Duration = Time;

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Vector3f {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

impl From<Vector3<f64>> for Vector3f {
    fn from(v: Vector3<f64>) -> Self {
        Vector3f {
            x: v.x,
            y: v.y,
            z: v.z,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Quaternion {
    pub x: f64,
    pub y: f64,
    pub z: f64,
    pub w: f64,
}

impl Default for Quaternion {
    fn default() -> Self {
        Quaternion {
            x: 0.0,
            y: 0.0,
            z: 0.0,
            w: 1.0,
        }
    }
}

impl From<UnitQuaternion<f64>> for Quaternion {
    fn from(q: UnitQuaternion<f64>) -> Self {
        Quaternion {
            x: q.i,
            y: q.j,
            z: q.k,
            w: q.w,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Pose {
    pub position: Vector3f,
    pub orientation: Quaternion,
}

impl From<&Isometry3<f64>> for Pose {
    fn from(p: &Isometry3<f64>) -> Self {
        Pose {
            position: p.translation.vector.into(),
            orientation: p.rotation.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Color {
    pub r: f64,
    pub g: f64,
    pub b: f64,
    pub a: f64,
}

pub const fn rgba(r: f64, g: f64, b: f64, a: f64) -> Color {
    Color { r, g, b, a }
}

/// `foxglove.FrameTransform`: the pose of `child_frame_id` in `parent_frame_id`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct FrameTransform {
    pub timestamp: Time,
    pub parent_frame_id: String,
    pub child_frame_id: String,
    pub translation: Vector3f,
    pub rotation: Quaternion,
}

/// `foxglove.FrameTransforms`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct FrameTransforms {
    pub transforms: Vec<FrameTransform>,
}

/// `foxglove.PoseInFrame`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct PoseInFrame {
    pub timestamp: Time,
    pub frame_id: String,
    pub pose: Pose,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CubePrimitive {
    pub pose: Pose,
    pub size: Vector3f,
    pub color: Color,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct SpherePrimitive {
    pub pose: Pose,
    pub size: Vector3f,
    pub color: Color,
}

/// A cylinder along its pose's z, `size` its bounding box.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CylinderPrimitive {
    pub pose: Pose,
    pub size: Vector3f,
    pub bottom_scale: f64,
    pub top_scale: f64,
    pub color: Color,
}

/// An arrow along its pose's +x.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ArrowPrimitive {
    pub pose: Pose,
    pub shaft_length: f64,
    pub shaft_diameter: f64,
    pub head_length: f64,
    pub head_diameter: f64,
    pub color: Color,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TextPrimitive {
    pub pose: Pose,
    pub billboard: bool,
    pub font_size: f64,
    pub scale_invariant: bool,
    pub color: Color,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct KeyValuePair {
    pub key: String,
    pub value: String,
}

/// `foxglove.SceneEntity`: primitives in one frame.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct SceneEntity {
    pub timestamp: Time,
    pub frame_id: String,
    pub id: String,
    /// Zero: until replaced or deleted.
    pub lifetime: Duration,
    pub frame_locked: bool,
    pub metadata: Vec<KeyValuePair>,
    pub arrows: Vec<ArrowPrimitive>,
    pub cubes: Vec<CubePrimitive>,
    pub spheres: Vec<SpherePrimitive>,
    pub cylinders: Vec<CylinderPrimitive>,
    pub lines: Vec<serde_json::Value>,
    pub triangles: Vec<serde_json::Value>,
    pub texts: Vec<TextPrimitive>,
    pub models: Vec<serde_json::Value>,
}

/// `foxglove.SceneEntityDeletion` (type 0: the entity `id`; 1: all).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct SceneEntityDeletion {
    pub timestamp: Time,
    #[serde(rename = "type")]
    pub kind: u8,
    pub id: String,
}

/// `foxglove.SceneUpdate`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct SceneUpdate {
    pub deletions: Vec<SceneEntityDeletion>,
    pub entities: Vec<SceneEntity>,
}

/// `foxglove.Log` levels.
pub mod level {
    pub const INFO: u8 = 2;
    pub const WARNING: u8 = 3;
    pub const ERROR: u8 = 4;
}

/// `foxglove.Log`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Log {
    pub timestamp: Time,
    pub level: u8,
    pub message: String,
    pub name: String,
    pub file: String,
    pub line: u32,
}

/// The JSON Schema of a Foxglove type as the channel advertises it.
pub fn schema_of<T: JsonSchema>() -> Vec<u8> {
    serde_json::to_vec(&schemars::schema_for!(T)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_uses_foxglove_field_names_and_xyzw_quaternions() {
        let p = Isometry3::from_parts(
            nalgebra::Translation3::new(1.0, 2.0, 3.0),
            UnitQuaternion::from_axis_angle(&Vector3::z_axis(), std::f64::consts::FRAC_PI_2),
        );
        let v = serde_json::to_value(Pose::from(&p)).expect("json");
        assert_eq!(v["position"]["z"], 3.0);
        let h = std::f64::consts::FRAC_1_SQRT_2;
        assert!((v["orientation"]["w"].as_f64().unwrap_or(0.0) - h).abs() < 1e-12);
        assert!((v["orientation"]["z"].as_f64().unwrap_or(0.0) - h).abs() < 1e-12);
        assert_eq!(
            Time::from_ns(1_500_000_000),
            Time {
                sec: 1,
                nsec: 500_000_000
            }
        );
        let e = serde_json::to_value(SceneEntityDeletion::default()).expect("json");
        assert!(e.get("type").is_some());
        let u = serde_json::to_value(SceneUpdate {
            entities: vec![SceneEntity::default()],
            ..Default::default()
        })
        .expect("json");
        for k in [
            "arrows",
            "cubes",
            "spheres",
            "cylinders",
            "lines",
            "triangles",
            "texts",
            "models",
            "metadata",
        ] {
            assert!(u["entities"][0][k].is_array(), "{k} always present");
        }
    }
}
