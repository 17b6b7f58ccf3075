//! Parameters of an [`Arm`](crate::Arm): OPW geometry, joint limits and speeds, tool and
//! F/T-sensor mount transforms, IK and DLS tuning. Every struct derives `serde::Deserialize`, so
//! a whole arm can be read from a TOML table, e.g.
//!
//! ```toml
//! [arm.opw]            # metres / radians
//! a1 = 0.0
//! a2 = -0.070
//! b = 0.0
//! c1 = 0.290
//! c2 = 0.270
//! c3 = 0.302
//! c4 = 0.072
//! offsets = [0.0, 0.0, -1.5707963267948966, 0.0, 0.0, 0.0]
//! sign_corrections = [1, 1, 1, 1, 1, 1]
//! [arm.limits]         # rad, rad/s
//! min = [-2.87979, -1.91986, -1.91986, -2.79253, -2.094395, -6.98132]
//! max = [2.87979, 1.91986, 1.22173, 2.79253, 2.094395, 6.98132]
//! max_speed = [4.36332, 4.36332, 4.36332, 5.58505, 5.58505, 7.33038]
//! [arm.tool]           # tool0 -> TCP
//! translation = [0.0, 0.0, 0.120]
//! quaternion = [1.0, 0.0, 0.0, 0.0]   # ABB order w, x, y, z
//! [arm.sensor_mount]   # tool0 -> F/T sensor frame
//! translation = [0.0, 0.0, 0.035]
//! rpy = [0.0, 0.0, 0.0]
//! ```
//!
//! [`ArmParams::validate`] returns *all* problems at once, each message naming its field.

use nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion};
use serde::{Deserialize, Serialize};
use std::f64::consts::{FRAC_PI_2, PI};

/// Geometry of an ortho-parallel arm with spherical wrist, after Brandstötter, Angerer &
/// Hofbaur (2014). Lengths in metres, angles in radians.
///
/// Internal OPW angles are `θ_j = sign_j · q_j − offset_j`; `q` are the maker's joint values.
/// With all θ = 0 the arm points straight up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpwParams {
    /// x offset from axis 1 to axis 2 (m).
    pub a1: f64,
    /// Offset of axis 4 from axis 3, perpendicular to the forearm (m; negative for ABB).
    pub a2: f64,
    /// Lateral (y) offset (m).
    pub b: f64,
    /// Height of axis 2 above the base (m).
    pub c1: f64,
    /// Upper-arm length, axis 2 → axis 3 (m).
    pub c2: f64,
    /// Forearm length, axis 3 → wrist centre, along the forearm (m).
    pub c3: f64,
    /// Wrist centre → flange (tool0) distance (m).
    pub c4: f64,
    /// Joint offsets (rad): `θ_j = sign_j · q_j − offset_j`.
    pub offsets: [f64; 6],
    /// Joint sign corrections, each +1 or −1.
    pub sign_corrections: [i8; 6],
}

impl OpwParams {
    /// ABB IRB 120-3/0.58 (ROS-Industrial / ABB joint coordinates, ABB `tool0`).
    /// Source: `irb120.md` §0/§2.1 (rs-opw-kinematics `irb120_3_58`, RobotComponents).
    pub fn irb120() -> Self {
        Self {
            a1: 0.0,
            a2: -0.070,
            b: 0.0,
            c1: 0.290,
            c2: 0.270,
            c3: 0.302,
            c4: 0.072,
            offsets: [0.0, 0.0, -FRAC_PI_2, 0.0, 0.0, 0.0],
            sign_corrections: [1; 6],
        }
    }

    fn validate_into(&self, errs: &mut Vec<String>) {
        let scalars = [
            ("a1", self.a1),
            ("a2", self.a2),
            ("b", self.b),
            ("c1", self.c1),
            ("c2", self.c2),
            ("c3", self.c3),
            ("c4", self.c4),
        ];
        for (name, v) in scalars {
            if !v.is_finite() {
                errs.push(format!("opw.{name}: must be finite (got {v})"));
            } else if v.abs() > 100.0 {
                errs.push(format!(
                    "opw.{name}: {v} m is implausible (|value| > 100 m)"
                ));
            }
        }
        if self.c2.is_finite() && self.c2 <= 0.0 {
            errs.push(format!(
                "opw.c2: upper-arm length must be > 0 (got {})",
                self.c2
            ));
        }
        if self.c4.is_finite() && self.c4 < 0.0 {
            errs.push(format!("opw.c4: must be >= 0 (got {})", self.c4));
        }
        if self.a2.is_finite() && self.c3.is_finite() && self.a2.hypot(self.c3) <= 1e-9 {
            errs.push("opw.a2/opw.c3: forearm length sqrt(a2²+c3²) must be > 0".to_string());
        }
        for (j, o) in self.offsets.iter().enumerate() {
            if !o.is_finite() {
                errs.push(format!("opw.offsets[{j}]: must be finite (got {o})"));
            } else if o.abs() > 2.0 * PI {
                errs.push(format!(
                    "opw.offsets[{j}]: |offset| must be <= 2π rad (got {o})"
                ));
            }
        }
        for (j, s) in self.sign_corrections.iter().enumerate() {
            if *s != 1 && *s != -1 {
                errs.push(format!(
                    "opw.sign_corrections[{j}]: must be +1 or -1 (got {s})"
                ));
            }
        }
    }
}

/// Joint position limits (rad) and maximum joint speeds (rad/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JointLimits {
    /// Lower position limit per joint (rad).
    pub min: [f64; 6],
    /// Upper position limit per joint (rad).
    pub max: [f64; 6],
    /// Maximum joint speed per joint (rad/s), > 0.
    pub max_speed: [f64; 6],
}

impl JointLimits {
    /// IRB 120 limits from the ROS-I URDF / ABB data sheet: A1 ±165°, A2 ±110°, A3 −110/+70°,
    /// A4 ±160°, A5 ±120°, A6 ±400°; speeds 250, 250, 250, 320, 320, 420 °/s.
    pub fn irb120() -> Self {
        let d = |deg: f64| deg.to_radians();
        Self {
            min: [
                d(-165.0),
                d(-110.0),
                d(-110.0),
                d(-160.0),
                d(-120.0),
                d(-400.0),
            ],
            max: [d(165.0), d(110.0), d(70.0), d(160.0), d(120.0), d(400.0)],
            max_speed: [d(250.0), d(250.0), d(250.0), d(320.0), d(320.0), d(420.0)],
        }
    }

    /// IRB 120T: same ranges, faster wrist (420, 590, 600 °/s on A4..A6).
    pub fn irb120t() -> Self {
        let d = |deg: f64| deg.to_radians();
        Self {
            max_speed: [d(250.0), d(250.0), d(250.0), d(420.0), d(590.0), d(600.0)],
            ..Self::irb120()
        }
    }

    /// True if every joint lies within `[min, max]` (and is finite).
    pub fn contains(&self, q: &[f64; 6]) -> bool {
        (0..6).all(|j| q[j] >= self.min[j] && q[j] <= self.max[j])
    }

    fn validate_into(&self, errs: &mut Vec<String>) {
        for j in 0..6 {
            let (lo, hi, v) = (self.min[j], self.max[j], self.max_speed[j]);
            if !lo.is_finite() {
                errs.push(format!("limits.min[{j}]: must be finite (got {lo})"));
            }
            if !hi.is_finite() {
                errs.push(format!("limits.max[{j}]: must be finite (got {hi})"));
            }
            if lo.is_finite() && hi.is_finite() {
                if lo >= hi {
                    errs.push(format!(
                        "limits.min[{j}]/max[{j}]: min ({lo}) must be < max ({hi})"
                    ));
                } else if hi - lo > 8.0 * PI {
                    errs.push(format!(
                        "limits.min[{j}]/max[{j}]: range {} rad exceeds 4 turns",
                        hi - lo
                    ));
                }
            }
            if !(v.is_finite() && v > 0.0) {
                errs.push(format!(
                    "limits.max_speed[{j}]: must be finite and > 0 (got {v})"
                ));
            }
        }
    }
}

/// A rigid transform given as a translation (m) and an orientation, either as fixed-axis
/// roll-pitch-yaw (rad, URDF convention `R = Rz(yaw)·Ry(pitch)·Rx(roll)`) or as a quaternion in
/// ABB order `[w, x, y, z]` (normalised if its norm is within 1e-3 of 1). Neither given = no
/// rotation; both given is an error.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameParams {
    /// Translation (m).
    #[serde(default)]
    pub translation: [f64; 3],
    /// Roll, pitch, yaw (rad).
    #[serde(default)]
    pub rpy: Option<[f64; 3]>,
    /// Quaternion `[w, x, y, z]`.
    #[serde(default)]
    pub quaternion: Option<[f64; 4]>,
}

impl FrameParams {
    /// Identity transform.
    pub fn identity() -> Self {
        Self::default()
    }

    /// From an isometry (stored as translation + quaternion).
    pub fn from_isometry(iso: &Isometry3<f64>) -> Self {
        let q = iso.rotation.quaternion();
        Self {
            translation: [iso.translation.x, iso.translation.y, iso.translation.z],
            rpy: None,
            quaternion: Some([q.w, q.i, q.j, q.k]),
        }
    }

    /// Converts to an isometry, or returns the list of problems (prefixed with `field`).
    pub fn to_isometry(&self, field: &str) -> Result<Isometry3<f64>, Vec<String>> {
        let mut errs = Vec::new();
        for (i, t) in self.translation.iter().enumerate() {
            if !t.is_finite() {
                errs.push(format!(
                    "{field}.translation[{i}]: must be finite (got {t})"
                ));
            }
        }
        let mut rot = UnitQuaternion::identity();
        match (self.rpy, self.quaternion) {
            (Some(_), Some(_)) => {
                errs.push(format!("{field}: give either rpy or quaternion, not both"));
            }
            (Some(rpy), None) => {
                if rpy.iter().all(|v| v.is_finite()) {
                    rot = UnitQuaternion::from_euler_angles(rpy[0], rpy[1], rpy[2]);
                } else {
                    errs.push(format!("{field}.rpy: must be finite (got {rpy:?})"));
                }
            }
            (None, Some(q)) => {
                let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
                if !n.is_finite() {
                    errs.push(format!("{field}.quaternion: must be finite (got {q:?})"));
                } else if (n - 1.0).abs() > 1e-3 {
                    errs.push(format!(
                        "{field}.quaternion: norm must be 1 within 1e-3 (got {n})"
                    ));
                } else {
                    rot = UnitQuaternion::from_quaternion(Quaternion::new(q[0], q[1], q[2], q[3]));
                }
            }
            (None, None) => {}
        }
        if errs.is_empty() {
            let t = self.translation;
            Ok(Isometry3::from_parts(
                Translation3::new(t[0], t[1], t[2]),
                rot,
            ))
        } else {
            Err(errs)
        }
    }
}

/// IK tuning. Defaults are chosen so that every returned solution reproduces the pose to
/// better than 1e-9 m / 1e-9 rad.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IkConfig {
    /// Wrist lock band: when `|sin q5| <` this (rad), q4 is taken from the previous joints (or
    /// 0) and q6 gets the q4+q6 sum. The orientation error this introduces is ≤ the band.
    pub wrist_lock_eps: f64,
    /// Shoulder lock band (m): when the wrist centre is closer than this to axis 1, q1 is taken
    /// from the previous joints. Position error ≤ 2 × band.
    pub shoulder_lock_eps: f64,
    /// Report `NEAR_WRIST_SINGULAR` when `|sin q5|` < this.
    pub near_wrist: f64,
    /// Report `NEAR_ELBOW_SINGULAR` when `|sin(θ3 + ψ3)|` < this (0 = stretched/folded).
    pub near_elbow: f64,
    /// Report `NEAR_SHOULDER_SINGULAR` when the wrist-centre distance from the shoulder
    /// singular plane (m) < this.
    pub near_shoulder: f64,
    /// Weights of the joint distance used by `ik_nearest`: cost = Σ (w_j·Δq_j)².
    /// `None` = `1 / max_speed_j` (cost ≈ squared time per joint).
    pub weights: Option<[f64; 6]>,
}

impl Default for IkConfig {
    fn default() -> Self {
        Self {
            wrist_lock_eps: 1e-10,
            shoulder_lock_eps: 1e-10,
            near_wrist: 0.05,
            near_elbow: 0.05,
            near_shoulder: 0.02,
            weights: None,
        }
    }
}

impl IkConfig {
    fn validate_into(&self, errs: &mut Vec<String>) {
        let vals = [
            ("ik.wrist_lock_eps", self.wrist_lock_eps),
            ("ik.shoulder_lock_eps", self.shoulder_lock_eps),
            ("ik.near_wrist", self.near_wrist),
            ("ik.near_elbow", self.near_elbow),
            ("ik.near_shoulder", self.near_shoulder),
        ];
        for (name, v) in vals {
            if !(v.is_finite() && v >= 0.0) {
                errs.push(format!("{name}: must be finite and >= 0 (got {v})"));
            }
        }
        if self.wrist_lock_eps.is_finite() && self.wrist_lock_eps > 0.1 {
            errs.push(format!(
                "ik.wrist_lock_eps: {} rad is too large (<= 0.1)",
                self.wrist_lock_eps
            ));
        }
        if let Some(w) = self.weights {
            for (j, v) in w.iter().enumerate() {
                if !(v.is_finite() && *v >= 0.0) {
                    errs.push(format!(
                        "ik.weights[{j}]: must be finite and >= 0 (got {v})"
                    ));
                }
            }
        }
    }
}

/// Damped-least-squares tuning (see [`crate::dls`]).
///
/// The damping is `λ = λ_max · (1 − (σ_min/σ_threshold)²)` when the smallest singular value of
/// the Jacobian (rows in m/s and rad/s) is below the threshold, else 0 — continuous and with a
/// continuous derivative at the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DlsConfig {
    /// σ_min below which damping starts (same mixed units as J).
    pub sigma_threshold: f64,
    /// Damping at σ_min = 0.
    pub lambda_max: f64,
}

impl Default for DlsConfig {
    fn default() -> Self {
        Self {
            sigma_threshold: 0.04,
            lambda_max: 0.04,
        }
    }
}

impl DlsConfig {
    fn validate_into(&self, errs: &mut Vec<String>) {
        if !(self.sigma_threshold.is_finite() && self.sigma_threshold > 0.0) {
            errs.push(format!(
                "dls.sigma_threshold: must be finite and > 0 (got {})",
                self.sigma_threshold
            ));
        }
        if !(self.lambda_max.is_finite() && self.lambda_max > 0.0) {
            errs.push(format!(
                "dls.lambda_max: must be finite and > 0 (got {})",
                self.lambda_max
            ));
        }
    }
}

/// All parameters of a 6-axis [`Arm`](crate::Arm).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmParams {
    /// OPW geometry.
    pub opw: OpwParams,
    /// Joint limits and speeds.
    pub limits: JointLimits,
    /// tool0 → TCP transform (identity = TCP at tool0).
    #[serde(default)]
    pub tool: FrameParams,
    /// tool0 → F/T sensor frame transform.
    #[serde(default)]
    pub sensor_mount: FrameParams,
    /// IK tuning.
    #[serde(default)]
    pub ik: IkConfig,
    /// DLS tuning.
    #[serde(default)]
    pub dls: DlsConfig,
}

impl ArmParams {
    /// ABB IRB 120-3/0.58, no tool, sensor frame at tool0.
    pub fn irb120() -> Self {
        Self {
            opw: OpwParams::irb120(),
            limits: JointLimits::irb120(),
            tool: FrameParams::identity(),
            sensor_mount: FrameParams::identity(),
            ik: IkConfig::default(),
            dls: DlsConfig::default(),
        }
    }

    /// ABB IRB 120T (faster wrist), otherwise as [`ArmParams::irb120`].
    pub fn irb120t() -> Self {
        Self {
            limits: JointLimits::irb120t(),
            ..Self::irb120()
        }
    }

    /// Checks every field and returns all problems at once (each message names its field).
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut errs = Vec::new();
        self.opw.validate_into(&mut errs);
        self.limits.validate_into(&mut errs);
        if let Err(e) = self.tool.to_isometry("tool") {
            errs.extend(e);
        }
        if let Err(e) = self.sensor_mount.to_isometry("sensor_mount") {
            errs.extend(e);
        }
        self.ik.validate_into(&mut errs);
        self.dls.validate_into(&mut errs);
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    }
}
