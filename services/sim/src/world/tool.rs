//! The tool carried by the F/T sensor: its mass, centre of mass and contact tip.
//!
//! The weight of the tool acts at its centre of mass `c` (sensor frame). Quasi-statically the
//! sensor carries it, so the wrench the tool puts on the sensor (sensor frame, about the sensor
//! origin) is
//!
//! ```text
//! f_s = m · g_s,   τ_s = c × f_s,   g_s = R_bsᵀ g_b
//! ```
//!
//! which is exactly the model the payload identification of `irb120.md` §5.3 inverts
//! (`f_s = m g_s + f0`, `t_s = c × m g_s + t0`, here with zero offsets: offsets belong to the
//! sensor emulator). Tool inertia (m·a, ω×Iω) is neglected: with a 0.5 kg tool and the
//! accelerations of a 10 Hz servo (a few m/s² at the TCP) it is about 1 N during fast moves and
//! nothing at rest; a dynamic term would need the TCP acceleration, which the world's API
//! (q, q̇) does not carry yet.

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
}

impl Default for ToolParams {
    fn default() -> Self {
        Self {
            mass_kg: 0.5,
            com_m: [0.0, 0.0, 0.04],
            tip_radius_m: 0.0,
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

    proptest! {
        #[test]
        fn torque_is_r_cross_f(
            m in 0.0f64..5.0,
            c in proptest::array::uniform3(-0.2f64..0.2),
            rpy in proptest::array::uniform3(-3.0f64..3.0),
        ) {
            let t = ToolParams { mass_kg: m, com_m: c, tip_radius_m: 0.0 };
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
