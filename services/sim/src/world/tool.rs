//! The tool carried by the F/T sensor: its mass, centre of mass, rotational inertia and contact
//! tip.
//!
//! The sensor carries the tool: by Newton–Euler on the rigid tool, the wrench the tool puts on
//! the sensor (sensor frame, about the sensor origin) is its weight minus what it takes to
//! accelerate it, plus the external wrenches (contact, hand; [`super::World`] adds those):
//!
//! ```text
//! f_s = m · (g_s − a_s),   τ_s = c × f_s − (I α_s + ω_s × I ω_s),   x_s = R_bsᵀ x_b
//! ```
//!
//! with `c` the centre of mass (sensor frame), `a` the acceleration of the centre of mass,
//! `ω`, `α` the tool's angular velocity and acceleration, and `I` the inertia about the centre
//! of mass in sensor axes (`inertia_kg_m2` = its diagonal: the tool's principal axes are taken
//! along the sensor's). At rest this is the static model the payload identification of
//! `irb120.md` §5.3 inverts (`f_s = m g_s + f0`, `t_s = c × m g_s + t0`, here with zero offsets:
//! offsets belong to the sensor emulator) — [`ToolParams::gravity_wrench`]; the inertial part
//! is [`ToolParams::inertial_wrench`]. Accelerating the tool shows up in the sensor as it does
//! on a real wrist (a 0.5 kg tool at 5 m/s² reads 2.5 N); how the world gets the accelerations
//! is documented on [`super::World::sensor_wrench`].

use kinematics::Wrench;
use nalgebra::{Isometry3, Vector3};
use serde::{Deserialize, Serialize};

/// `[tool]` in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolParams {
    /// Tool mass (kg), in [0, 10].
    pub mass_kg: f64,
    /// Centre of mass in the sensor frame (m).
    pub com_m: [f64; 3],
    /// Radius of the contact tip sphere centred on the TCP (m), in [0, 0.1]. 0 = a point.
    pub tip_radius_m: f64,
    /// Radius of the peg (m), in [0, 0.05]: a flat-ended cylinder along the tool's z axis whose
    /// end face is centred on the TCP. Only plates with a hole (`plate_with_hole`) see the
    /// peg; the other surfaces see the ball tip. 0 = a needle (its end a point).
    pub peg_radius_m: f64,
    /// Length of the peg back from the TCP (m), in (0, 0.5].
    pub peg_length_m: f64,
    /// Principal moments of inertia about the centre of mass, along the sensor axes
    /// (kg·m²): `[Ixx, Iyy, Izz]`, each in [0, 1], satisfying the triangle inequality
    /// (`Ixx + Iyy ≥ Izz`, …) as every rigid body does.
    pub inertia_kg_m2: [f64; 3],
}

impl Default for ToolParams {
    fn default() -> Self {
        Self {
            mass_kg: 0.5,
            com_m: [0.0, 0.0, 0.04],
            tip_radius_m: 0.0,
            peg_radius_m: 0.0,
            peg_length_m: 0.05,
            // A 0.5 kg solid cylinder of radius 30 mm and length 100 mm along sensor z:
            // Ixx = Iyy = m (3r² + L²) / 12, Izz = m r² / 2.
            inertia_kg_m2: [5.29e-4, 5.29e-4, 2.25e-4],
        }
    }
}

impl ToolParams {
    /// Every problem, keys prefixed with `prefix`.
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        if !self.mass_kg.is_finite() || !(0.0..=10.0).contains(&self.mass_kg) {
            e.push(format!(
                "{prefix}.mass_kg: must be in [0, 10] kg (got {})",
                self.mass_kg
            ));
        }
        for (i, c) in self.com_m.iter().enumerate() {
            if !c.is_finite() || c.abs() > 1.0 {
                e.push(format!(
                    "{prefix}.com_m[{i}]: must be finite and |c| <= 1 m (got {c})"
                ));
            }
        }
        if !self.tip_radius_m.is_finite() || !(0.0..=0.1).contains(&self.tip_radius_m) {
            e.push(format!(
                "{prefix}.tip_radius_m: must be in [0, 0.1] m (got {})",
                self.tip_radius_m
            ));
        }
        if !self.peg_radius_m.is_finite() || !(0.0..=0.05).contains(&self.peg_radius_m) {
            e.push(format!(
                "{prefix}.peg_radius_m: must be in [0, 0.05] m (got {})",
                self.peg_radius_m
            ));
        }
        if !self.peg_length_m.is_finite() || self.peg_length_m <= 0.0 || self.peg_length_m > 0.5 {
            e.push(format!(
                "{prefix}.peg_length_m: must be in (0, 0.5] m (got {})",
                self.peg_length_m
            ));
        }
        let i = self.inertia_kg_m2;
        for (k, v) in i.iter().enumerate() {
            if !v.is_finite() || !(0.0..=1.0).contains(v) {
                e.push(format!(
                    "{prefix}.inertia_kg_m2[{k}]: must be in [0, 1] kg·m² (got {v})"
                ));
            }
        }
        if i.iter().all(|v| v.is_finite()) {
            let tol = 1e-12;
            for (a, b, c) in [(0, 1, 2), (1, 2, 0), (2, 0, 1)] {
                if i[a] + i[b] < i[c] - tol {
                    e.push(format!(
                        "{prefix}.inertia_kg_m2: no rigid body has these moments (I[{a}] + I[{b}] = {} < I[{c}] = {})",
                        i[a] + i[b],
                        i[c]
                    ));
                }
            }
        }
        e
    }

    /// Centre of mass as a vector (sensor frame, m).
    pub fn com(&self) -> Vector3<f64> {
        Vector3::from(self.com_m)
    }

    /// The wrench the tool's weight puts on the sensor (sensor frame, about its origin), given
    /// the sensor pose in base and the gravity vector in base (m/s²).
    pub fn gravity_wrench(
        &self,
        sensor_in_base: &Isometry3<f64>,
        gravity: &Vector3<f64>,
    ) -> Wrench {
        let g_s = sensor_in_base.rotation.inverse() * gravity;
        let f = g_s * self.mass_kg;
        Wrench::new(f, self.com().cross(&f))
    }

    /// The inertial part of the wrench on the sensor (sensor frame, about its origin): what
    /// the sensor must add to accelerate the tool, with the sign of a reading —
    /// `f = −m a_s`, `τ = c × f − (I α_s + ω_s × I ω_s)` — given the sensor pose in base, the
    /// acceleration of the centre of mass (m/s², base) and the tool's angular velocity
    /// (rad/s) and acceleration (rad/s²), base axes.
    pub fn inertial_wrench(
        &self,
        sensor_in_base: &Isometry3<f64>,
        a_com_base: &Vector3<f64>,
        omega_base: &Vector3<f64>,
        alpha_base: &Vector3<f64>,
    ) -> Wrench {
        let r_inv = sensor_in_base.rotation.inverse();
        let a_s = r_inv * a_com_base;
        let w = r_inv * omega_base;
        let al = r_inv * alpha_base;
        let inertia = Vector3::from(self.inertia_kg_m2);
        let i_w = w.component_mul(&inertia);
        let euler = al.component_mul(&inertia) + w.cross(&i_w);
        let f = -a_s * self.mass_kg;
        Wrench::new(f, self.com().cross(&f) - euler)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::{Translation3, UnitQuaternion};
    use proptest::prelude::*;

    #[test]
    fn sensor_pointing_down_feels_weight_along_its_z() {
        // Sensor z pointing down (rotated 180° about base x): weight along +z_s, CoM on the
        // z axis → no torque.
        let t = ToolParams::default();
        let pose = Isometry3::from_parts(
            Translation3::new(0.3, 0.0, 0.4),
            UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
        );
        let w = t.gravity_wrench(&pose, &Vector3::new(0.0, 0.0, -9.81));
        assert!((w.force - Vector3::new(0.0, 0.0, 0.5 * 9.81)).norm() < 1e-12);
        assert!(w.torque.norm() < 1e-12);
    }

    #[test]
    fn horizontal_sensor_sees_lever_torque() {
        // Sensor z along base +x (R = Ry(90°), as tool0 at the IRB 120's zero pose):
        // g_s = Rᵀ(0, 0, −g) = (g, 0, 0), τ = c × f = (0, 0, 0.04) × (m g, 0, 0).
        let t = ToolParams::default();
        let pose = Isometry3::from_parts(
            Translation3::new(0.374, 0.0, 0.63),
            UnitQuaternion::from_euler_angles(0.0, std::f64::consts::FRAC_PI_2, 0.0),
        );
        let g = Vector3::new(0.0, 0.0, -9.81);
        let w = t.gravity_wrench(&pose, &g);
        let g_s = pose.rotation.inverse() * g;
        assert!((g_s - Vector3::new(9.81, 0.0, 0.0)).norm() < 1e-12);
        // |τ| = m g · 40 mm = 0.196 N·m about y_s.
        assert!((w.torque - Vector3::new(0.0, 0.5 * 9.81 * 0.04, 0.0)).norm() < 1e-12);
    }

    #[test]
    fn inertial_wrench_is_minus_m_a_and_the_euler_terms() {
        let t = ToolParams {
            inertia_kg_m2: [1e-3, 2e-3, 3e-3],
            ..Default::default()
        };
        let pose = Isometry3::from_parts(
            Translation3::new(0.3, 0.0, 0.4),
            UnitQuaternion::from_euler_angles(0.3, -0.2, 0.7),
        );
        let r = pose.rotation;
        // Pure linear acceleration of 4 m/s² along sensor x: −m a along x, lever torque.
        let a_b = r * Vector3::new(4.0, 0.0, 0.0);
        let w = t.inertial_wrench(&pose, &a_b, &Vector3::zeros(), &Vector3::zeros());
        assert!((w.force - Vector3::new(-2.0, 0.0, 0.0)).norm() < 1e-12);
        assert!((w.torque - t.com().cross(&w.force)).norm() < 1e-12);
        // Angular acceleration about sensor y: −I_yy α.
        let al = r * Vector3::new(0.0, 10.0, 0.0);
        let w = t.inertial_wrench(&pose, &Vector3::zeros(), &Vector3::zeros(), &al);
        assert!(w.force.norm() < 1e-15);
        assert!((w.torque - Vector3::new(0.0, -0.02, 0.0)).norm() < 1e-12);
        // Spinning at constant ω = (1, 1, 0) rad/s (sensor axes), off the principal axes:
        // the gyroscopic torque −ω × Iω = −(0, 0, I_yy − I_xx).
        let om = r * Vector3::new(1.0, 1.0, 0.0);
        let w = t.inertial_wrench(&pose, &Vector3::zeros(), &om, &Vector3::zeros());
        assert!((w.torque - Vector3::new(0.0, 0.0, -1e-3)).norm() < 1e-12);
        // About a principal axis there is none.
        let om = r * Vector3::new(0.0, 0.0, 5.0);
        let w = t.inertial_wrench(&pose, &Vector3::zeros(), &om, &Vector3::zeros());
        assert!(w.torque.norm() < 1e-12);
    }

    #[test]
    fn inertia_is_validated() {
        assert!(ToolParams::default().validate("tool").is_empty());
        let t = ToolParams {
            inertia_kg_m2: [1e-3, 1e-3, 3e-3],
            ..Default::default()
        };
        let e = t.validate("tool");
        assert!(
            e.iter()
                .any(|m| m.starts_with("tool.inertia_kg_m2: no rigid body")),
            "{e:?}"
        );
        let t = ToolParams {
            inertia_kg_m2: [-1.0, f64::NAN, 2.0],
            ..Default::default()
        };
        let e = t.validate("tool");
        for k in [
            "tool.inertia_kg_m2[0]",
            "tool.inertia_kg_m2[1]",
            "tool.inertia_kg_m2[2]",
        ] {
            assert!(e.iter().any(|m| m.starts_with(k)), "{k}: {e:?}");
        }
    }

    proptest! {
        #[test]
        fn torque_is_r_cross_f(
            m in 0.0f64..5.0,
            c in proptest::array::uniform3(-0.2f64..0.2),
            rpy in proptest::array::uniform3(-3.0f64..3.0),
        ) {
            let t = ToolParams { mass_kg: m, com_m: c, tip_radius_m: 0.0, ..Default::default() };
            let pose = Isometry3::from_parts(
                Translation3::new(0.1, 0.2, 0.3),
                UnitQuaternion::from_euler_angles(rpy[0], rpy[1], rpy[2]),
            );
            let g = Vector3::new(0.0, 0.0, -9.81);
            let w = t.gravity_wrench(&pose, &g);
            prop_assert!((w.torque - Vector3::from(c).cross(&w.force)).norm() < 1e-12);
            prop_assert!((w.force.norm() - m * 9.81).abs() < 1e-9);
            // Back in base, the force is the weight.
            prop_assert!((pose.rotation * w.force - g * m).norm() < 1e-9);
            // In base about the base origin: τ = (p + R c) × m g.
            let wb = w.transform(&pose);
            let arm = pose * nalgebra::Point3::from(Vector3::from(c));
            prop_assert!((wb.torque - arm.coords.cross(&(g * m))).norm() < 1e-9);
        }
    }
}
