//! Scenario description: the serde/TOML form of the world (`WorldConfig`).
//!
//! Every table is `deny_unknown_fields` with defaults for missing keys; [`WorldConfig::validate`]
//! lists every range/consistency problem at once, each starting with its key
//! (`surfaces[1].normal: ...`). Units are in the key names (SI).
//!
//! ```toml
//! gravity_m_s2 = [0.0, 0.0, -9.81]     # base frame
//!
//! [servo]                              # joint servo of the simulated robot
//! bandwidth_hz = [10, 10, 10, 10, 10, 10]
//! damping_ratio = 1.0
//! delay_cycles = 2
//! # max_accel_rad_s2 = [30, 30, 30, 40, 40, 50]
//!
//! [tool]
//! mass_kg = 0.5
//! com_m = [0.0, 0.0, 0.04]             # sensor frame
//! tip_radius_m = 0.0
//! peg_radius_m = 0.0                   # the peg (plate_with_hole): radius, length
//! peg_length_m = 0.05
//! inertia_kg_m2 = [5.29e-4, 5.29e-4, 2.25e-4]   # about the CoM, sensor axes
//!
//! [contact]
//! friction_smoothing_m_s = 0.001
//!
//! [[surfaces]]
//! name = "table"
//! kind = "plane"                       # plane: point_m + normal; box: min_m + max_m;
//!                                      # cylinder: point_m + axis + radius_m;
//!                                      # sphere: center_m + radius_m;
//!                                      # plate_with_hole: hole_center_m + normal +
//!                                      #   hole_radius_m + thickness_m (touched by the peg)
//! point_m = [0.0, 0.0, 0.2]
//! normal = [0.0, 0.0, 1.0]
//! stiffness_n_per_m = 2e4
//! damping_n_s_per_m = 50.0
//! mu = 0.3
//! # motion = { velocity_m_s = [0, 0, -0.0065], start_s = 2.0, duration_s = 3.0 }
//! # motion = { velocity_m_s = [0, 0, -0.0065], start_s = 1.0, duration_s = 3.0, trigger = "contact" }
//!
//! [hand]                               # virtual operator (lead-through)
//! enabled = false
//! # arm_mass_kg = 2.0, reaction_delay_s = 0.15, … (see `hand`)
//! # trigger = "contact"                # start_s counts from the first contact
//!
//! [rc_plant]                           # the Raibert–Craig 2-DOF plant
//! # surface.motion = { velocity_m_s = [0.0065, 0.0], start_s = 1.0, duration_s = 3.0, trigger = "contact" }
//! ```
//!
//! The same tree, as JSON, is what the scenario RPC's `set` addresses with dotted keys
//! (`surfaces.0.mu`, `rc_plant.static_friction`; see [`crate::scenario`]).

use serde::{Deserialize, Serialize};

use super::contact::{ContactModel, Ramp, Shape, Surface};
use super::hand::HandParams;
use super::rc_plant::RcPlantParams;
use super::servo::ServoParams;
use super::tool::ToolParams;
use nalgebra::Vector3;

/// Surface geometry kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SurfaceKind {
    /// Half-space: `point_m` and `normal` (pointing into free space).
    #[default]
    Plane,
    /// Solid axis-aligned box: `min_m` and `max_m`.
    Box,
    /// Solid infinite cylinder: `point_m` (on the axis), `axis` (direction) and `radius_m`;
    /// contact on the outside, normal radially outward.
    Cylinder,
    /// Solid sphere: `center_m` and `radius_m`; normal radially outward.
    Sphere,
    /// A plate with a round through hole, touched by the tool's peg: `hole_center_m` (the
    /// hole's centre on the top face), `normal` (out of the top face), `hole_radius_m`,
    /// `thickness_m`.
    PlateWithHole,
}

impl SurfaceKind {
    fn name(self) -> &'static str {
        match self {
            SurfaceKind::Plane => "plane",
            SurfaceKind::Box => "box",
            SurfaceKind::Cylinder => "cylinder",
            SurfaceKind::Sphere => "sphere",
            SurfaceKind::PlateWithHole => "plate_with_hole",
        }
    }
}

/// One `[[surfaces]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SurfaceParams {
    /// Name for reports.
    pub name: String,
    /// `plane`, `box`, `cylinder` or `sphere`.
    pub kind: SurfaceKind,
    /// Plane: a point on it; cylinder: a point on its axis (m, base).
    pub point_m: Option<[f64; 3]>,
    /// Plane: outward normal (normalised on use).
    pub normal: Option<[f64; 3]>,
    /// Box: minimum corner (m, base).
    pub min_m: Option<[f64; 3]>,
    /// Box: maximum corner (m, base).
    pub max_m: Option<[f64; 3]>,
    /// Cylinder: axis direction (normalised on use).
    pub axis: Option<[f64; 3]>,
    /// Sphere: centre (m, base).
    pub center_m: Option<[f64; 3]>,
    /// Cylinder, sphere: radius (m), in (0, 10].
    pub radius_m: Option<f64>,
    /// Plate with a hole: the hole's centre on the plate's top face (m, base).
    pub hole_center_m: Option<[f64; 3]>,
    /// Plate with a hole: the hole's radius (m), in (0, 1].
    pub hole_radius_m: Option<f64>,
    /// Plate with a hole: the plate's thickness (m), in (0, 1].
    pub thickness_m: Option<f64>,
    /// Normal stiffness K_r (N/m), in [0, 1e9].
    pub stiffness_n_per_m: f64,
    /// Normal damping (N·s/m), in [0, 1e6].
    pub damping_n_s_per_m: f64,
    /// Coulomb friction coefficient μ, in [0, 2].
    pub mu: f64,
    /// Optional ramp motion.
    pub motion: Option<Ramp>,
    /// Optional stiffness that changes along the surface (a pad set flush into the table,
    /// tapering out): `{ axis = [1, 0, 0], from_m = 0.40, to_m = 0.41,
    /// to_stiffness_n_per_m = 1e6 }` (`contact::Grade`).
    pub grade: Option<GradeParams>,
}

/// `grade = { … }` of a surface.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradeParams {
    /// Direction along which the stiffness changes (base; normalised on use).
    pub axis: [f64; 3],
    /// `stiffness_n_per_m` up to here (m, along `axis`) ...
    pub from_m: f64,
    /// ... `to_stiffness_n_per_m` from here on, the compliance linear in between (m).
    pub to_m: f64,
    /// N/m, in [0, 1e9].
    pub to_stiffness_n_per_m: f64,
}

impl Default for SurfaceParams {
    fn default() -> Self {
        Self {
            name: String::new(),
            kind: SurfaceKind::Plane,
            point_m: None,
            normal: None,
            min_m: None,
            max_m: None,
            axis: None,
            center_m: None,
            radius_m: None,
            hole_center_m: None,
            hole_radius_m: None,
            thickness_m: None,
            stiffness_n_per_m: 2e4,
            damping_n_s_per_m: 50.0,
            mu: 0.3,
            motion: None,
            grade: None,
        }
    }
}

/// `[contact]`: settings shared by all surfaces.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContactParams {
    /// Friction smoothing speed v_s (m/s), in (0, 0.1]: `F_t = μ F_n tanh(|v_t|/v_s)`.
    pub friction_smoothing_m_s: f64,
}

impl Default for ContactParams {
    fn default() -> Self {
        Self {
            friction_smoothing_m_s: 1e-3,
        }
    }
}

/// The whole simulated world (one scenario file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorldConfig {
    /// Gravity (m/s², base frame). Default (0, 0, −9.81).
    pub gravity_m_s2: [f64; 3],
    /// Joint servo of the simulated robot.
    pub servo: ServoParams,
    /// The tool on the sensor.
    pub tool: ToolParams,
    /// Contact settings.
    pub contact: ContactParams,
    /// Contact surfaces (none = free space).
    pub surfaces: Vec<SurfaceParams>,
    /// The virtual operator's hand.
    pub hand: HandParams,
    /// The Raibert–Craig 2-DOF plant.
    pub rc_plant: RcPlantParams,
    /// How the F/T sensor is really mounted, relative to the cell config's `[arm]` sensor
    /// mount: roll, pitch, yaw (deg, fixed axes x, y, z of the configured sensor frame), each
    /// in [−180, 180]. Zero (default): mounted as configured. A commissioning mistake to
    /// inject, e.g. `[0, 0, 90]` for a sensor bolted on a quarter turn off; the sensor and the
    /// tool on it turn together (the tool's `com_m` stays in the true sensor frame), the TCP
    /// stays where the config puts it.
    pub sensor_mount_error_rpy_deg: [f64; 3],
}

impl Default for WorldConfig {
    fn default() -> Self {
        Self {
            gravity_m_s2: [0.0, 0.0, -9.81],
            servo: ServoParams::default(),
            tool: ToolParams::default(),
            contact: ContactParams::default(),
            surfaces: Vec::new(),
            hand: HandParams::default(),
            rc_plant: RcPlantParams::default(),
            sensor_mount_error_rpy_deg: [0.0; 3],
        }
    }
}

fn check_vec(e: &mut Vec<String>, key: &str, v: &[f64; 3], bound: f64) {
    for (i, x) in v.iter().enumerate() {
        if !x.is_finite() || x.abs() > bound {
            e.push(format!(
                "{key}[{i}]: must be finite and within ±{bound} (got {x})"
            ));
        }
    }
}

fn check_range(e: &mut Vec<String>, key: &str, v: f64, lo: f64, hi: f64, unit: &str) {
    if !v.is_finite() || v < lo || v > hi {
        e.push(format!("{key}: must be in [{lo}, {hi}] {unit} (got {v})").replace(" )", ")"));
    }
}

impl SurfaceParams {
    /// Every problem, keys prefixed with `prefix` (e.g. `surfaces[0]`).
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        let kind = self.kind.name();
        // Which geometry keys each kind needs; every other geometry key is an error.
        let keys: [(&str, bool); 10] = [
            ("point_m", self.point_m.is_some()),
            ("normal", self.normal.is_some()),
            ("min_m", self.min_m.is_some()),
            ("max_m", self.max_m.is_some()),
            ("axis", self.axis.is_some()),
            ("center_m", self.center_m.is_some()),
            ("radius_m", self.radius_m.is_some()),
            ("hole_center_m", self.hole_center_m.is_some()),
            ("hole_radius_m", self.hole_radius_m.is_some()),
            ("thickness_m", self.thickness_m.is_some()),
        ];
        let needed: &[&str] = match self.kind {
            SurfaceKind::Plane => &["point_m", "normal"],
            SurfaceKind::Box => &["min_m", "max_m"],
            SurfaceKind::Cylinder => &["point_m", "axis", "radius_m"],
            SurfaceKind::Sphere => &["center_m", "radius_m"],
            SurfaceKind::PlateWithHole => {
                &["hole_center_m", "normal", "hole_radius_m", "thickness_m"]
            }
        };
        for (k, present) in keys {
            let need = needed.contains(&k);
            if need && !present {
                e.push(format!("{prefix}.{k}: required for kind = \"{kind}\""));
            } else if !need && present {
                e.push(format!("{prefix}.{k}: not used by kind = \"{kind}\""));
            }
        }
        if let Some(p) = &self.point_m {
            check_vec(&mut e, &format!("{prefix}.point_m"), p, 10.0);
        }
        for (k, dir) in [("normal", &self.normal), ("axis", &self.axis)] {
            if let Some(n) = dir {
                let v = Vector3::from(*n);
                if !v.iter().all(|x| x.is_finite()) || v.norm() < 1e-9 {
                    e.push(format!(
                        "{prefix}.{k}: must be finite and non-zero (got {n:?})"
                    ));
                }
            }
        }
        if let Some(c) = &self.center_m {
            check_vec(&mut e, &format!("{prefix}.center_m"), c, 10.0);
        }
        if let Some(c) = &self.hole_center_m {
            check_vec(&mut e, &format!("{prefix}.hole_center_m"), c, 10.0);
        }
        for (k, v) in [
            ("hole_radius_m", self.hole_radius_m),
            ("thickness_m", self.thickness_m),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v <= 0.0 || v > 1.0 {
                    e.push(format!("{prefix}.{k}: must be in (0, 1] m (got {v})"));
                }
            }
        }
        if let Some(r) = self.radius_m {
            if !r.is_finite() || r <= 0.0 || r > 10.0 {
                e.push(format!("{prefix}.radius_m: must be in (0, 10] m (got {r})"));
            }
        }
        if let (Some(lo), Some(hi)) = (&self.min_m, &self.max_m) {
            check_vec(&mut e, &format!("{prefix}.min_m"), lo, 10.0);
            check_vec(&mut e, &format!("{prefix}.max_m"), hi, 10.0);
            for i in 0..3 {
                if lo[i] >= hi[i] {
                    e.push(format!(
                        "{prefix}.min_m[{i}]: must be < max_m[{i}] ({} >= {})",
                        lo[i], hi[i]
                    ));
                }
            }
        }
        check_range(
            &mut e,
            &format!("{prefix}.stiffness_n_per_m"),
            self.stiffness_n_per_m,
            0.0,
            1e9,
            "N/m",
        );
        check_range(
            &mut e,
            &format!("{prefix}.damping_n_s_per_m"),
            self.damping_n_s_per_m,
            0.0,
            1e6,
            "N·s/m",
        );
        check_range(&mut e, &format!("{prefix}.mu"), self.mu, 0.0, 2.0, "");
        if let Some(m) = &self.motion {
            e.extend(m.validate(&format!("{prefix}.motion")));
        }
        if let Some(g) = &self.grade {
            check_vec(&mut e, &format!("{prefix}.grade.axis"), &g.axis, 10.0);
            let n = Vector3::from(g.axis).norm();
            if !(n.is_finite() && n > 1e-9) {
                e.push(format!("{prefix}.grade.axis: must be a non-zero direction"));
            }
            for (key, v) in [("from_m", g.from_m), ("to_m", g.to_m)] {
                check_range(
                    &mut e,
                    &format!("{prefix}.grade.{key}"),
                    v,
                    -10.0,
                    10.0,
                    "m",
                );
            }
            if g.from_m.is_finite() && g.to_m.is_finite() && g.to_m < g.from_m {
                e.push(format!(
                    "{prefix}.grade.to_m: must be ≥ from_m ({} < {})",
                    g.to_m, g.from_m
                ));
            }
            check_range(
                &mut e,
                &format!("{prefix}.grade.to_stiffness_n_per_m"),
                g.to_stiffness_n_per_m,
                0.0,
                1e9,
                "N/m",
            );
        }
        e
    }

    /// The runtime surface (`None` if the geometry keys are missing or degenerate; validate
    /// first). Its motion trigger is armed.
    pub fn build(&self, index: usize) -> Option<Surface> {
        let unit = |v: [f64; 3]| {
            let n = Vector3::from(v);
            let len = n.norm();
            (len.is_finite() && len > 1e-9).then(|| n / len)
        };
        let shape = match self.kind {
            SurfaceKind::Plane => Shape::Plane {
                point: Vector3::from(self.point_m?),
                normal: unit(self.normal?)?,
            },
            SurfaceKind::Box => Shape::Box {
                min: Vector3::from(self.min_m?),
                max: Vector3::from(self.max_m?),
            },
            SurfaceKind::Cylinder => Shape::Cylinder {
                point: Vector3::from(self.point_m?),
                axis: unit(self.axis?)?,
                radius: self.radius_m.filter(|r| r.is_finite() && *r > 0.0)?,
            },
            SurfaceKind::Sphere => Shape::Sphere {
                center: Vector3::from(self.center_m?),
                radius: self.radius_m.filter(|r| r.is_finite() && *r > 0.0)?,
            },
            SurfaceKind::PlateWithHole => Shape::PlateWithHole {
                center: Vector3::from(self.hole_center_m?),
                normal: unit(self.normal?)?,
                hole_radius: self.hole_radius_m.filter(|r| r.is_finite() && *r > 0.0)?,
                thickness: self.thickness_m.filter(|r| r.is_finite() && *r > 0.0)?,
            },
        };
        let grade = match &self.grade {
            Some(g) => Some(super::contact::Grade {
                axis: unit(g.axis)?,
                from_m: g.from_m,
                to_m: g.to_m,
                to_stiffness: g.to_stiffness_n_per_m,
            }),
            None => None,
        };
        Some(
            Surface::new(
                self.display_name(index),
                shape,
                self.stiffness_n_per_m,
                self.damping_n_s_per_m,
                self.mu,
                self.motion,
            )
            .with_grade(grade),
        )
    }

    /// The name used in reports (`surface<i>` when unnamed).
    pub fn display_name(&self, index: usize) -> String {
        if self.name.is_empty() {
            format!("surface{index}")
        } else {
            self.name.clone()
        }
    }
}

impl WorldConfig {
    /// The sensor's true frame in the configured one (`sensor_mount_error_rpy_deg`).
    pub fn sensor_mount_error(&self) -> nalgebra::Isometry3<f64> {
        let [r, p, y] = self.sensor_mount_error_rpy_deg.map(f64::to_radians);
        nalgebra::Isometry3::from_parts(
            nalgebra::Translation3::identity(),
            nalgebra::UnitQuaternion::from_euler_angles(r, p, y),
        )
    }

    /// Parses a scenario from TOML text (does not validate).
    pub fn from_toml_str(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Parses and validates a scenario; `Err` lists every problem.
    pub fn load_str(text: &str) -> Result<Self, Vec<String>> {
        let cfg = Self::from_toml_str(text).map_err(|e| vec![e])?;
        let errs = cfg.validate();
        if errs.is_empty() {
            Ok(cfg)
        } else {
            Err(errs)
        }
    }

    /// Reads, parses and validates a scenario file; `Err` lists every problem.
    pub fn load_file(path: &std::path::Path) -> Result<Self, Vec<String>> {
        let text =
            std::fs::read_to_string(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
        Self::load_str(&text)
    }

    /// Every problem with the scenario, each starting with its key.
    pub fn validate(&self) -> Vec<String> {
        let mut e = Vec::new();
        check_vec(&mut e, "gravity_m_s2", &self.gravity_m_s2, 100.0);
        check_vec(
            &mut e,
            "sensor_mount_error_rpy_deg",
            &self.sensor_mount_error_rpy_deg,
            180.0,
        );
        e.extend(self.servo.validate("servo"));
        e.extend(self.tool.validate("tool"));
        let v = self.contact.friction_smoothing_m_s;
        if !v.is_finite() || v <= 0.0 || v > 0.1 {
            e.push(format!(
                "contact.friction_smoothing_m_s: must be in (0, 0.1] m/s (got {v})"
            ));
        }
        for (i, s) in self.surfaces.iter().enumerate() {
            e.extend(s.validate(&format!("surfaces[{i}]")));
        }
        e.extend(self.hand.validate("hand"));
        e.extend(self.rc_plant.validate("rc_plant"));
        e
    }

    /// The contact model (surfaces that fail to build are skipped; validate first).
    pub fn contact_model(&self) -> ContactModel {
        ContactModel {
            surfaces: self
                .surfaces
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.build(i))
                .collect(),
            tip_radius: self.tool.tip_radius_m,
            friction_smoothing: self.contact.friction_smoothing_m_s,
            peg: super::contact::Peg {
                radius: self.tool.peg_radius_m,
                length: self.tool.peg_length_m,
            },
        }
    }
}

/// Lets the process shell validate a `[sim.world]`-style table with the cell's config loader.
impl common::config::Validate for WorldConfig {
    fn validate(&self, prefix: &str, errors: &mut common::config::ConfigErrors) {
        for m in WorldConfig::validate(self) {
            let (key, problem) = m.split_once(": ").unwrap_or((m.as_str(), ""));
            let key = if prefix.is_empty() {
                key.to_string()
            } else {
                format!("{prefix}.{key}")
            };
            errors.push(key, problem.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn default_is_valid_free_space() {
        let c = WorldConfig::default();
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        assert!(c.contact_model().surfaces.is_empty());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = WorldConfig::from_toml_str("gravity = [0, 0, -9.81]").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = WorldConfig::from_toml_str("[tool]\nmass = 1.0").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = WorldConfig::from_toml_str(
            "[[surfaces]]\nkind = \"plane\"\npoint_m = [0,0,0]\nnormal = [0,0,1]\nstiff = 1",
        )
        .unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn every_problem_is_listed_with_its_key() {
        let text = r#"
            gravity_m_s2 = [0.0, 0.0, nan]
            [servo]
            damping_ratio = 0.0
            [tool]
            mass_kg = -1.0
            tip_radius_m = 0.5
            [contact]
            friction_smoothing_m_s = 0.0
            [[surfaces]]
            kind = "plane"
            point_m = [0.0, 0.0, 0.0]
            normal = [0.0, 0.0, 0.0]
            mu = -0.1
            [[surfaces]]
            kind = "box"
            min_m = [0.0, 0.0, 0.0]
            max_m = [0.1, 0.1, 0.0]
            normal = [0.0, 0.0, 1.0]
            motion = { velocity_m_s = [0.0, 0.0, 9.0], start_s = -1.0 }
            [hand]
            enabled = true
            max_force_n = 0.0
        "#;
        let c = WorldConfig::from_toml_str(text).unwrap();
        let e = c.validate();
        for key in [
            "gravity_m_s2[2]",
            "servo.damping_ratio",
            "tool.mass_kg",
            "tool.tip_radius_m",
            "contact.friction_smoothing_m_s",
            "surfaces[0].normal",
            "surfaces[0].mu",
            "surfaces[1].min_m[2]",
            "surfaces[1].normal: not used",
            "surfaces[1].motion.velocity_m_s[2]",
            "surfaces[1].motion.start_s",
            "hand.path",
            "hand.max_force_n",
        ] {
            assert!(
                e.iter().any(|m| m.starts_with(key)),
                "{key} missing in {e:#?}"
            );
        }
        assert!(WorldConfig::load_str(text).is_err());
    }

    #[test]
    fn plane_missing_geometry_is_reported() {
        let c = WorldConfig::from_toml_str("[[surfaces]]\nkind = \"plane\"").unwrap();
        let e = c.validate();
        assert!(e
            .iter()
            .any(|m| m.starts_with("surfaces[0].point_m: required")));
        assert!(e
            .iter()
            .any(|m| m.starts_with("surfaces[0].normal: required")));
    }

    #[test]
    fn roundtrips_through_toml() {
        let mut c = WorldConfig::default();
        c.surfaces.push(SurfaceParams {
            name: "table".into(),
            point_m: Some([0.0, 0.0, 0.1]),
            normal: Some([0.0, 0.0, 2.0]),
            motion: Some(Ramp {
                velocity_m_s: [0.0, 0.0, -0.0065],
                start_s: 1.0,
                duration_s: 2.0,
                trigger: super::super::trigger::Trigger::Contact,
            }),
            ..Default::default()
        });
        c.surfaces.push(SurfaceParams {
            name: "pipe".into(),
            kind: SurfaceKind::Cylinder,
            point_m: Some([0.0, 0.0, 0.12]),
            axis: Some([2.0, 0.0, 0.0]),
            radius_m: Some(0.08),
            ..Default::default()
        });
        c.surfaces.push(SurfaceParams {
            kind: SurfaceKind::Sphere,
            center_m: Some([0.4, 0.1, 0.1]),
            radius_m: Some(0.05),
            ..Default::default()
        });
        let text = toml::to_string(&c).unwrap();
        let back = WorldConfig::load_str(&text).unwrap();
        assert_eq!(back, c);
        // The normal is normalised when built.
        let m = back.contact_model();
        match m.surfaces[0].shape {
            Shape::Plane { normal, .. } => assert!((normal - Vector3::z()).norm() < 1e-15),
            _ => panic!("plane expected"),
        }
        assert!(
            m.surfaces[0].trigger_status().armed,
            "contact trigger armed"
        );
        match m.surfaces[1].shape {
            Shape::Cylinder { axis, radius, .. } => {
                assert!((axis - Vector3::x()).norm() < 1e-15 && radius == 0.08)
            }
            _ => panic!("cylinder expected"),
        }
        assert_eq!(m.surfaces[2].name, "surface2");
        assert!(matches!(m.surfaces[2].shape, Shape::Sphere { .. }));
    }

    #[test]
    fn curved_surfaces_need_their_geometry() {
        let text = r#"
            [[surfaces]]
            kind = "cylinder"
            point_m = [0.0, 0.0, 0.1]
            normal = [0.0, 0.0, 1.0]
            radius_m = -0.1
            [[surfaces]]
            kind = "sphere"
            point_m = [0.0, 0.0, 0.1]
            [[surfaces]]
            kind = "cylinder"
            point_m = [0.0, 0.0, 0.1]
            axis = [0.0, 0.0, 0.0]
            radius_m = 0.1
            [[surfaces]]
            kind = "plane"
            point_m = [0.0, 0.0, 0.1]
            normal = [0.0, 0.0, 1.0]
            radius_m = 0.1
        "#;
        let e = WorldConfig::from_toml_str(text).unwrap().validate();
        for key in [
            "surfaces[0].axis: required for kind = \"cylinder\"",
            "surfaces[0].normal: not used by kind = \"cylinder\"",
            "surfaces[0].radius_m: must be in (0, 10]",
            "surfaces[1].center_m: required",
            "surfaces[1].radius_m: required",
            "surfaces[1].point_m: not used by kind = \"sphere\"",
            "surfaces[2].axis: must be finite and non-zero",
            "surfaces[3].radius_m: not used by kind = \"plane\"",
        ] {
            assert!(
                e.iter().any(|m| m.starts_with(key)),
                "{key} missing in {e:#?}"
            );
        }
        let ok = r#"
            [[surfaces]]
            kind = "sphere"
            center_m = [0.4, 0.0, 0.1]
            radius_m = 0.05
            motion = { velocity_m_s = [0.0, 0.0, -0.001], start_s = 0.5, duration_s = 1.0, trigger = "contact" }
        "#;
        let c = WorldConfig::load_str(ok).unwrap();
        assert_eq!(
            c.surfaces[0].motion.map(|m| m.trigger),
            Some(super::super::trigger::Trigger::Contact)
        );
        let plate = r#"
            [tool]
            peg_radius_m = 0.06
            peg_length_m = 0.0
            [[surfaces]]
            kind = "plate_with_hole"
            hole_center_m = [0.35, 0.0, 0.2]
            normal = [0.0, 0.0, 1.0]
            hole_radius_m = 0.0
            [[surfaces]]
            kind = "plate_with_hole"
            hole_center_m = [0.35, 0.0, 0.2]
            point_m = [0.35, 0.0, 0.2]
            normal = [0.0, 0.0, 1.0]
            hole_radius_m = 0.0051
            thickness_m = 2.0
        "#;
        let e = WorldConfig::from_toml_str(plate).unwrap().validate();
        for key in [
            "tool.peg_radius_m: must be in [0, 0.05]",
            "tool.peg_length_m: must be in (0, 0.5]",
            "surfaces[0].thickness_m: required for kind = \"plate_with_hole\"",
            "surfaces[0].hole_radius_m: must be in (0, 1]",
            "surfaces[1].point_m: not used by kind = \"plate_with_hole\"",
            "surfaces[1].thickness_m: must be in (0, 1]",
        ] {
            assert!(
                e.iter().any(|m| m.starts_with(key)),
                "{key} missing in {e:#?}"
            );
        }
        let bad = WorldConfig::from_toml_str(
            "[[surfaces]]\nkind = \"torus\"\ncenter_m = [0,0,0]\nradius_m = 1",
        )
        .unwrap_err();
        assert!(bad.contains("unknown variant"), "{bad}");
    }
}
