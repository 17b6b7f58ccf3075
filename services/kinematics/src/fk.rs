//! Forward kinematics (closed-form OPW product).
//!
//! The end frame of the OPW model is the flange frame in the ABB `tool0` convention (z out of
//! the flange; at q = 0 for the IRB 120: position (0.374, 0, 0.630) m, rotation Ry(+90°),
//! ABB quaternion `[w, x, y, z]` = [0.70711, 0, 0.70711, 0]). It equals the ROS-Industrial
//! `tool0` of `irb120_3_58_macro.xacro` (link_6 · Ry(+90°)); the legacy ROS-I `irb120.urdf`
//! `tool0` is link_6 itself (x = approach axis), i.e. ABB tool0 · Ry(−90°).

use crate::arm::{check_iso, Arm};
use crate::error::{check_finite, KinError};
use crate::Joints;
use nalgebra::{Isometry3, Matrix3, Rotation3, Translation3, UnitQuaternion, Vector3};

/// Intermediate kinematic quantities of one configuration (internal).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chain {
    /// sin/cos of θ1.
    pub s1: f64,
    pub c1: f64,
    /// sin/cos of θ2.
    pub s2: f64,
    pub c2: f64,
    /// sin/cos of θ4.
    pub s4: f64,
    pub c4: f64,
    /// sin/cos of θ5.
    pub s5: f64,
    /// sin(θ3 + ψ3): 0 at the elbow singularities.
    pub elbow: f64,
    /// x of the wrist centre in the frame rotated by θ1 (0 at the shoulder singularity).
    pub cx1: f64,
    /// Base → forearm rotation Rz(θ1)·Ry(θ2+θ3).
    pub r0c: Matrix3<f64>,
    /// tool0 rotation in base.
    pub r: Matrix3<f64>,
    /// Wrist centre in base (m).
    pub wc: Vector3<f64>,
    /// tool0 origin in base (m).
    pub p: Vector3<f64>,
}

impl Arm {
    /// Computes the chain quantities; `q` must be finite (callers check).
    #[inline]
    pub(crate) fn chain(&self, q: &Joints) -> Chain {
        let g = &self.geo;
        let t = g.theta(q);
        let (s1, c1) = t[0].sin_cos();
        let (s2, c2) = t[1].sin_cos();
        let (s3, c3) = t[2].sin_cos();
        let (s4, c4) = t[3].sin_cos();
        let (s5, c5) = t[4].sin_cos();
        let (s6, c6) = t[5].sin_cos();
        let s23 = s2 * c3 + c2 * s3;
        let c23 = c2 * c3 - s2 * s3;
        // Wrist centre in the θ1-rotated frame.
        let cx1 = g.c2 * s2 + g.c3 * s23 + g.a2 * c23 + g.a1;
        let cz1 = g.c2 * c2 + g.c3 * c23 - g.a2 * s23 + g.c1;
        let wc = Vector3::new(c1 * cx1 - s1 * g.b, s1 * cx1 + c1 * g.b, cz1);
        let r0c = Matrix3::new(
            c1 * c23,
            -s1,
            c1 * s23,
            s1 * c23,
            c1,
            s1 * s23,
            -s23,
            0.0,
            c23,
        );
        // Rz(θ4)·Ry(θ5)·Rz(θ6)
        let rce = Matrix3::new(
            c4 * c5 * c6 - s4 * s6,
            -c4 * c5 * s6 - s4 * c6,
            c4 * s5,
            s4 * c5 * c6 + c4 * s6,
            -s4 * c5 * s6 + c4 * c6,
            s4 * s5,
            -s5 * c6,
            s5 * s6,
            c5,
        );
        let r = r0c * rce;
        let p = wc + r.column(2) * g.c4;
        // sin(θ3 + ψ3) = (s3·c3_len + c3·a2)/k
        let elbow = (s3 * g.c3 + c3 * g.a2) / g.k;
        Chain {
            s1,
            c1,
            s2,
            c2,
            s4,
            c4,
            s5,
            elbow,
            cx1,
            r0c,
            r,
            wc,
            p,
        }
    }

    #[inline]
    pub(crate) fn tool0_unchecked(&self, q: &Joints) -> Isometry3<f64> {
        let ch = self.chain(q);
        iso_from(&ch.r, &ch.p)
    }

    /// Pose of `tool0` (ABB convention, flange) in the base frame. `q` in rad; values outside
    /// the joint limits are evaluated anyway (check with [`crate::JointLimits::contains`]).
    /// Errors only on non-finite input.
    #[inline]
    pub fn fk_tool0(&self, q: &Joints) -> Result<Isometry3<f64>, KinError> {
        check_finite(q, "q")?;
        Ok(self.tool0_unchecked(q))
    }

    /// Pose of the TCP (tool0 · tool) in the base frame.
    #[inline]
    pub fn fk(&self, q: &Joints) -> Result<Isometry3<f64>, KinError> {
        Ok(self.fk_tool0(q)? * self.tool)
    }

    /// Pose of the F/T sensor frame (tool0 · sensor_mount) in the base frame.
    pub fn fk_sensor(&self, q: &Joints) -> Result<Isometry3<f64>, KinError> {
        Ok(self.fk_tool0(q)? * self.sensor_mount)
    }

    /// Wrist centre (intersection of axes 4, 5, 6) in the base frame (m).
    pub fn wrist_centre(&self, q: &Joints) -> Result<Vector3<f64>, KinError> {
        check_finite(q, "q")?;
        Ok(self.chain(q).wc)
    }

    /// Every link's frame in base, in chain order: `link1` … `link6`, then `tool0`
    /// ([`LINK_NAMES`]). Link i's frame turns with joint i: its origin is on joint i's axis
    /// (the points and axes [`Arm::jacobian`] uses) — link 1 at the base origin, link 2 at the
    /// shoulder (z along the upper arm at θ2 = 0, axis 2 its y), link 3 at the elbow (axis 3 its
    /// y), links 4–6 at the wrist centre (axes 4 and 6 their z, axis 5 link 5's y); tool0 at
    /// the flange, `c4` along link 6's z. Errors only on non-finite input.
    pub fn link_frames(&self, q: &Joints) -> Result<[Isometry3<f64>; 7], KinError> {
        check_finite(q, "q")?;
        let g = &self.geo;
        let t = g.theta(q);
        let ch = self.chain(q);
        let rz = |a: f64| Rotation3::from_axis_angle(&Vector3::z_axis(), a).into_inner();
        let ry = |a: f64| Rotation3::from_axis_angle(&Vector3::y_axis(), a).into_inner();
        let r1 = rz(t[0]);
        let r2 = r1 * ry(t[1]);
        let o2 = r1 * Vector3::new(g.a1, g.b, g.c1);
        let o3 = o2 + r2 * Vector3::new(0.0, 0.0, g.c2);
        let r4 = ch.r0c * rz(t[3]);
        let r5 = r4 * ry(t[4]);
        Ok([
            iso_from(&r1, &Vector3::zeros()),
            iso_from(&r2, &o2),
            iso_from(&ch.r0c, &o3),
            iso_from(&r4, &ch.wc),
            iso_from(&r5, &ch.wc),
            iso_from(&ch.r, &ch.wc),
            iso_from(&ch.r, &ch.p),
        ])
    }

    /// tool0 pose for a given TCP pose: `tcp · tool⁻¹` (both in base).
    pub fn tool0_from_tcp(&self, tcp_in_base: &Isometry3<f64>) -> Result<Isometry3<f64>, KinError> {
        check_iso(tcp_in_base, "tcp_in_base")?;
        Ok(tcp_in_base * self.tool_inv)
    }
}

/// The frames of [`Arm::link_frames`], by name (the 3-D view's frame ids).
pub const LINK_NAMES: [&str; 7] = [
    "link1", "link2", "link3", "link4", "link5", "link6", "tool0",
];

#[inline(always)]
pub(crate) fn iso_from(r: &Matrix3<f64>, p: &Vector3<f64>) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::from(*p),
        UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(*r)),
    )
}

#[cfg(test)]
mod link_tests {
    use super::*;
    use crate::jacobian::JacobianFrame;

    fn configs() -> Vec<Joints> {
        let mut out = vec![[0.0; 6]];
        let mut x = 0.37_f64;
        for _ in 0..50 {
            let mut q = [0.0; 6];
            for v in q.iter_mut() {
                x = (x * 7919.0 + 0.123).fract();
                *v = (x - 0.5) * 3.0;
            }
            out.push(q);
        }
        out
    }

    #[test]
    fn link_frames_sit_on_the_jacobians_joint_axes_and_end_at_tool0() {
        let arm = Arm::irb120();
        let g = &arm.geo;
        for q in configs() {
            let l = arm.link_frames(&q).expect("finite");
            let tool0 = arm.fk_tool0(&q).expect("finite");
            assert!((l[6].translation.vector - tool0.translation.vector).norm() < 1e-12);
            assert!(l[6].rotation.angle_to(&tool0.rotation) < 1e-12);
            let wc = arm.wrist_centre(&q).expect("finite");
            for f in &l[3..6] {
                assert!((f.translation.vector - wc).norm() < 1e-12);
            }
            // Rigid links: consecutive origins at the geometry's distances.
            let o = |i: usize| l[i].translation.vector;
            assert!(((o(2) - o(1)).norm() - g.c2).abs() < 1e-12);
            assert!(((o(3) - o(2)).norm() - (g.a2 * g.a2 + g.c3 * g.c3).sqrt()).abs() < 1e-12);
            assert!(((o(6) - o(5)).norm() - g.c4).abs() < 1e-12);
            // Joint i's axis is the link frame's z (joints 1, 4, 6) or y (2, 3, 5), through its
            // origin: the Jacobian's column i is ±(axis, axis × (tcp − origin)).
            let j = arm.jacobian(&q, JacobianFrame::Base).expect("finite");
            let tcp = arm.fk(&q).expect("finite").translation.vector;
            for i in 0..6 {
                let axis = if [1, 2, 4].contains(&i) {
                    l[i].rotation * Vector3::y()
                } else {
                    l[i].rotation * Vector3::z()
                };
                let w = Vector3::new(j[(3, i)], j[(4, i)], j[(5, i)]);
                let v = Vector3::new(j[(0, i)], j[(1, i)], j[(2, i)]);
                let s = w.dot(&axis).signum();
                assert!(
                    (w - axis * s).norm() < 1e-12,
                    "joint {} axis at {q:?}",
                    i + 1
                );
                let v_link = (axis * s).cross(&(tcp - o(i)));
                assert!(
                    (v - v_link).norm() < 1e-12,
                    "joint {} origin at {q:?}",
                    i + 1
                );
            }
        }
        assert!(arm.link_frames(&[f64::NAN; 6]).is_err());
    }
}
