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

    /// tool0 pose for a given TCP pose: `tcp · tool⁻¹` (both in base).
    pub fn tool0_from_tcp(&self, tcp_in_base: &Isometry3<f64>) -> Result<Isometry3<f64>, KinError> {
        check_iso(tcp_in_base, "tcp_in_base")?;
        Ok(tcp_in_base * self.tool_inv)
    }
}

#[inline(always)]
pub(crate) fn iso_from(r: &Matrix3<f64>, p: &Vector3<f64>) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::from(*p),
        UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(*r)),
    )
}
