//! Geometric Jacobian, manipulability and distance-to-singularity measures.

use crate::arm::Arm;
use crate::error::{check_finite, KinError};
use crate::fk::Chain;
use crate::Joints;
use nalgebra::{Isometry3, Matrix3, Matrix6, Vector3};
use serde::{Deserialize, Serialize};

/// Frame in which the Jacobian rows are expressed. The reference point is always the TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JacobianFrame {
    /// Rows are the TCP linear velocity and angular velocity in base axes.
    Base,
    /// Rows are the TCP linear velocity and angular velocity in TCP axes.
    Tool,
}

/// Distances to the three singularities of an OPW arm (0 = singular).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SingularityMeasures {
    /// Wrist: `|sin q5|` (axes 4 and 6 aligned when 0).
    pub wrist: f64,
    /// Elbow: `|sin(θ3 + ψ3)|`, ψ3 = atan2(a2, c3); 0 when stretched
    /// (q3 = [`Arm::elbow_stretched_q3`]) or folded.
    pub elbow: f64,
    /// Shoulder: distance (m) of the wrist centre from the plane through axis 1 perpendicular
    /// to axis 2 (for b = 0: the distance from axis 1).
    pub shoulder: f64,
    /// Manipulability `sqrt(det(J·Jᵀ)) = |det J|` of the base Jacobian at the TCP
    /// (mixed units, m³ for this arm type).
    pub manipulability: f64,
}

/// One configuration's kinematic state ([`Arm::state`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmState {
    /// `tool0` (the flange) in base.
    pub tool0: Isometry3<f64>,
    /// The TCP (tool0 · tool) in base.
    pub tcp: Isometry3<f64>,
    /// The geometric Jacobian at the TCP, base axes (rows `[v; ω]`).
    pub jacobian_base: Matrix6<f64>,
    /// `|det J|`.
    pub manipulability: f64,
}

impl Arm {
    /// Jacobian columns from a chain; reference point `pt` (base coordinates).
    #[inline]
    pub(crate) fn jacobian_from_chain(&self, ch: &Chain, pt: &Vector3<f64>) -> Matrix6<f64> {
        let g = &self.geo;
        let z1 = Vector3::z();
        let o1 = Vector3::zeros();
        let z2 = Vector3::new(-ch.s1, ch.c1, 0.0);
        let o2 = Vector3::new(ch.c1 * g.a1, ch.s1 * g.a1, g.c1);
        let x3 = g.a1 + g.c2 * ch.s2;
        let o3 = Vector3::new(ch.c1 * x3, ch.s1 * x3, g.c1 + g.c2 * ch.c2);
        let z4 = ch.r0c.column(2).into_owned();
        let z5 = ch.r0c * Vector3::new(-ch.s4, ch.c4, 0.0);
        let z6 = ch.r.column(2).into_owned();
        let axes = [
            (z1, o1),
            (z2, o2),
            (z2, o3),
            (z4, ch.wc),
            (z5, ch.wc),
            (z6, ch.wc),
        ];
        let mut j = Matrix6::zeros();
        for (i, (z, o)) in axes.iter().enumerate() {
            let s = g.signs[i];
            let v = z.cross(&(pt - o)) * s;
            let w = z * s;
            j[(0, i)] = v.x;
            j[(1, i)] = v.y;
            j[(2, i)] = v.z;
            j[(3, i)] = w.x;
            j[(4, i)] = w.y;
            j[(5, i)] = w.z;
        }
        j
    }

    /// TCP rotation and position in base from a chain.
    #[inline]
    pub(crate) fn tcp_from_chain(&self, ch: &Chain) -> (Matrix3<f64>, Vector3<f64>) {
        let rt = self.tool.rotation.to_rotation_matrix().into_inner();
        let r = ch.r * rt;
        let p = ch.p + ch.r * self.tool.translation.vector;
        (r, p)
    }

    /// Geometric Jacobian (6×6, rows `[v; ω]`, columns joints) of the TCP.
    /// `q̇` (rad/s) ↦ TCP twist (m/s, rad/s) in the chosen frame's axes.
    pub fn jacobian(&self, q: &Joints, frame: JacobianFrame) -> Result<Matrix6<f64>, KinError> {
        check_finite(q, "q")?;
        let ch = self.chain(q);
        let (r, p) = self.tcp_from_chain(&ch);
        let j = self.jacobian_from_chain(&ch, &p);
        Ok(match frame {
            JacobianFrame::Base => j,
            JacobianFrame::Tool => rotate_rows(&j, &r.transpose()),
        })
    }

    /// One configuration's tool0 and TCP poses, base Jacobian at the TCP and manipulability,
    /// from one evaluation of the chain (what a tool pose needs each cycle; the separate calls
    /// [`Arm::fk_tool0`], [`Arm::fk`], [`Arm::jacobian`] and [`Arm::manipulability`] evaluate
    /// it once each and give the same values, bit for bit). Errors only on non-finite input.
    pub fn state(&self, q: &Joints) -> Result<ArmState, KinError> {
        check_finite(q, "q")?;
        let ch = self.chain(q);
        let tool0 = crate::fk::iso_from(&ch.r, &ch.p);
        let (_, p) = self.tcp_from_chain(&ch);
        let jacobian_base = self.jacobian_from_chain(&ch, &p);
        Ok(ArmState {
            tool0,
            tcp: tool0 * self.tool,
            jacobian_base,
            manipulability: jacobian_base.determinant().abs(),
        })
    }

    /// Manipulability `sqrt(det(J·Jᵀ))` (= |det J| for this square Jacobian) at the TCP.
    pub fn manipulability(&self, q: &Joints) -> Result<f64, KinError> {
        Ok(self.jacobian(q, JacobianFrame::Base)?.determinant().abs())
    }

    /// Singular values of the base Jacobian at the TCP, descending.
    pub fn singular_values(&self, q: &Joints) -> Result<[f64; 6], KinError> {
        let j = self.jacobian(q, JacobianFrame::Base)?;
        let sv = j.singular_values();
        let mut out = [0.0; 6];
        for (o, s) in out.iter_mut().zip(sv.iter()) {
            *o = *s;
        }
        out.sort_by(|a, b| b.total_cmp(a));
        Ok(out)
    }

    /// Wrist, elbow and shoulder singularity distances and manipulability at `q`.
    pub fn singularity_measures(&self, q: &Joints) -> Result<SingularityMeasures, KinError> {
        check_finite(q, "q")?;
        let ch = self.chain(q);
        let (_, p) = self.tcp_from_chain(&ch);
        let j = self.jacobian_from_chain(&ch, &p);
        Ok(SingularityMeasures {
            wrist: ch.s5.abs(),
            elbow: ch.elbow.abs(),
            shoulder: ch.cx1.abs(),
            manipulability: j.determinant().abs(),
        })
    }
}

/// Applies a rotation to both 3-row blocks: `[R 0; 0 R]·J`.
pub(crate) fn rotate_rows(j: &Matrix6<f64>, r: &Matrix3<f64>) -> Matrix6<f64> {
    let mut out = Matrix6::zeros();
    let top = r * j.fixed_view::<3, 6>(0, 0);
    let bot = r * j.fixed_view::<3, 6>(3, 0);
    out.fixed_view_mut::<3, 6>(0, 0).copy_from(&top);
    out.fixed_view_mut::<3, 6>(3, 0).copy_from(&bot);
    out
}
