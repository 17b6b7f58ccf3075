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
//!
//! [contact]
//! friction_smoothing_m_s = 0.001
//!
//! [[surfaces]]
//! name = "table"
//! kind = "plane"                       # plane: point_m + normal; box: min_m + max_m
//! point_m = [0.0, 0.0, 0.2]
//! normal = [0.0, 0.0, 1.0]
//! stiffness_n_per_m = 2e4
//! damping_n_s_per_m = 50.0
//! mu = 0.3
//! # motion = { velocity_m_s = [0, 0, -0.0065], start_s = 2.0, duration_s = 3.0 }
//!
//! [hand]                               # virtual operator (lead-through)
//! enabled = false
//!
//! [rc_plant]                           # the Raibert–Craig 2-DOF plant
//! ```

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
}

/// One `[[surfaces]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SurfaceParams {
    /// Name for reports.
    pub name: String,
    /// `plane` or `box`.
    pub kind: SurfaceKind,
    /// Plane: a point on it (m, base).
    pub point_m: Option<[f64; 3]>,
    /// Plane: outward normal (normalised on use).
    pub normal: Option<[f64; 3]>,
    /// Box: minimum corner (m, base).
    pub min_m: Option<[f64; 3]>,
    /// Box: maximum corner (m, base).
    pub max_m: Option<[f64; 3]>,
    /// Normal stiffness K_r (N/m), in [0, 1e9].
    pub stiffness_n_per_m: f64,
    /// Normal damping (N·s/m), in [0, 1e6].
    pub damping_n_s_per_m: f64,
    /// Coulomb friction coefficient μ, in [0, 2].
    pub mu: f64,
    /// Optional ramp motion.
    pub motion: Option<Ramp>,
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
            stiffness_n_per_m: 2e4,
            damping_n_s_per_m: 50.0,
            mu: 0.3,
            motion: None,
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
        let need = |e: &mut Vec<String>, v: &Option<[f64; 3]>, k: &str, kind: &str| {
            if v.is_none() {
                e.push(format!("{prefix}.{k}: required for kind = \"{kind}\""));
            }
        };
        let forbid = |e: &mut Vec<String>, v: &Option<[f64; 3]>, k: &str, kind: &str| {
            if v.is_some() {
                e.push(format!("{prefix}.{k}: not used by kind = \"{kind}\""));
            }
        };
        match self.kind {
            SurfaceKind::Plane => {
                need(&mut e, &self.point_m, "point_m", "plane");
                need(&mut e, &self.normal, "normal", "plane");
                forbid(&mut e, &self.min_m, "min_m", "plane");
                forbid(&mut e, &self.max_m, "max_m", "plane");
            }
            SurfaceKind::Box => {
                need(&mut e, &self.min_m, "min_m", "box");
                need(&mut e, &self.max_m, "max_m", "box");
                forbid(&mut e, &self.point_m, "point_m", "box");
                forbid(&mut e, &self.normal, "normal", "box");
            }
        }
        if let Some(p) = &self.point_m {
            check_vec(&mut e, &format!("{prefix}.point_m"), p, 10.0);
        }
        if let Some(n) = &self.normal {
            let v = Vector3::from(*n);
            if !v.iter().all(|x| x.is_finite()) || v.norm() < 1e-9 {
                e.push(format!(
                    "{prefix}.normal: must be finite and non-zero (got {n:?})"
                ));
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
        e
    }

    /// The runtime surface (`None` if the geometry keys are missing or degenerate; validate
    /// first).
    pub fn build(&self, index: usize) -> Option<Surface> {
        let shape = match self.kind {
            SurfaceKind::Plane => {
                let n = Vector3::from(self.normal?);
                let len = n.norm();
                if !(len.is_finite() && len > 1e-9) {
                    return None;
                }
                Shape::Plane {
                    point: Vector3::from(self.point_m?),
                    normal: n / len,
                }
            }
            SurfaceKind::Box => Shape::Box {
                min: Vector3::from(self.min_m?),
                max: Vector3::from(self.max_m?),
            },
        };
        let name = if self.name.is_empty() {
            format!("surface{index}")
        } else {
            self.name.clone()
        };
        Some(Surface {
            name,
            shape,
            stiffness: self.stiffness_n_per_m,
            damping: self.damping_n_s_per_m,
            mu: self.mu,
            motion: self.motion,
        })
    }
}

impl WorldConfig {
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
            }),
            ..Default::default()
        });
        let text = toml::to_string(&c).unwrap();
        let back = WorldConfig::load_str(&text).unwrap();
        assert_eq!(back, c);
        // The normal is normalised when built.
        let m = back.contact_model();
        match m.surfaces[0].shape {
            Shape::Plane { normal, .. } => assert!((normal - Vector3::z()).norm() < 1e-15),
            Shape::Box { .. } => panic!("plane expected"),
        }
    }
}
