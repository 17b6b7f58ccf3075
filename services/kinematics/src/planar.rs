//! The 2-DOF revolute–prismatic planar arm of Raibert & Craig (1981), Fig. 5 (Scheinman arm
//! joints 1 and 3) moving in a horizontal plane.
//!
//! Joints `q = [θ, r]`: θ (rad) rotates the arm about the vertical axis through the base
//! origin, r (m) is the prismatic extension; the hand is at `(r cos θ, r sin θ)` in the base
//! plane. Force `F = [f_x, f_y]` (N) at the hand and joint efforts `τ = [torque (N·m),
//! force (N)]` are related by `τ = Jᵀ F`.

use crate::error::{check_finite, KinError};
use nalgebra::{Matrix2, Vector2};
use serde::{Deserialize, Serialize};

/// Revolute–prismatic planar arm with joint limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanarRP {
    /// θ range (rad).
    pub theta_min: f64,
    /// θ range (rad).
    pub theta_max: f64,
    /// Minimum extension r (m), > 0 keeps the arm away from its singularity at r = 0.
    pub r_min: f64,
    /// Maximum extension r (m).
    pub r_max: f64,
}

impl Default for PlanarRP {
    fn default() -> Self {
        Self {
            theta_min: -std::f64::consts::PI,
            theta_max: std::f64::consts::PI,
            r_min: 0.1,
            r_max: 1.0,
        }
    }
}

impl PlanarRP {
    /// All problems with the parameters (field-named).
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut e = Vec::new();
        for (n, v) in [
            ("theta_min", self.theta_min),
            ("theta_max", self.theta_max),
            ("r_min", self.r_min),
            ("r_max", self.r_max),
        ] {
            if !v.is_finite() {
                e.push(format!("{n}: must be finite (got {v})"));
            }
        }
        if self.theta_min >= self.theta_max {
            e.push("theta_min/theta_max: min must be < max".to_string());
        }
        if self.r_min < 0.0 {
            e.push(format!("r_min: must be >= 0 (got {})", self.r_min));
        }
        if self.r_min >= self.r_max {
            e.push("r_min/r_max: min must be < max".to_string());
        }
        if e.is_empty() {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Hand position (m) for `q = [θ, r]`.
    pub fn fk(&self, q: &[f64; 2]) -> Result<Vector2<f64>, KinError> {
        check_finite(q, "q")?;
        let (s, c) = q[0].sin_cos();
        Ok(Vector2::new(q[1] * c, q[1] * s))
    }

    /// Jacobian `∂(x, y)/∂(θ, r)` = `[[−r sin θ, cos θ], [r cos θ, sin θ]]`; det = −r.
    pub fn jacobian(&self, q: &[f64; 2]) -> Result<Matrix2<f64>, KinError> {
        check_finite(q, "q")?;
        let (s, c) = q[0].sin_cos();
        Ok(Matrix2::new(-q[1] * s, c, q[1] * c, s))
    }

    /// Joints for a hand position (m): `θ = atan2(y, x)`, `r = |p|`, checked against the
    /// limits (also tries θ ± 2π). Errors: `InvalidInput`, `Unreachable` (r outside range or
    /// at r = 0), `OutOfLimits` (θ outside range).
    pub fn ik(&self, p: &Vector2<f64>) -> Result<[f64; 2], KinError> {
        check_finite(p.as_slice(), "p")?;
        let r = p.norm();
        if r < self.r_min || r > self.r_max || r == 0.0 {
            return Err(KinError::Unreachable);
        }
        let th = p.y.atan2(p.x);
        let tau = std::f64::consts::TAU;
        [th, th - tau, th + tau]
            .into_iter()
            .find(|t| *t >= self.theta_min && *t <= self.theta_max)
            .map(|t| [t, r])
            .ok_or(KinError::OutOfLimits)
    }

    /// Joint efforts `τ = Jᵀ F` (N·m, N) for a hand force F (N).
    pub fn joint_efforts(&self, q: &[f64; 2], f: &Vector2<f64>) -> Result<Vector2<f64>, KinError> {
        check_finite(f.as_slice(), "f")?;
        Ok(self.jacobian(q)?.transpose() * f)
    }

    /// Hand force from joint efforts, `F = (Jᵀ)⁻¹ τ`; `Unreachable`-free but errors with
    /// `Numerical` at the singularity r = 0.
    pub fn hand_force(&self, q: &[f64; 2], tau: &Vector2<f64>) -> Result<Vector2<f64>, KinError> {
        check_finite(tau.as_slice(), "tau")?;
        self.jacobian(q)?
            .transpose()
            .try_inverse()
            .filter(|_| q[1].abs() > 1e-12)
            .map(|m| m * tau)
            .ok_or(KinError::Numerical("singular Jacobian (r = 0)"))
    }

    /// Joint velocity for a hand velocity (m/s), `q̇ = J⁻¹ v`; errors at r = 0.
    pub fn joint_velocity(&self, q: &[f64; 2], v: &Vector2<f64>) -> Result<Vector2<f64>, KinError> {
        check_finite(v.as_slice(), "v")?;
        self.jacobian(q)?
            .try_inverse()
            .filter(|_| q[1].abs() > 1e-12)
            .map(|m| m * v)
            .ok_or(KinError::Numerical("singular Jacobian (r = 0)"))
    }
}
