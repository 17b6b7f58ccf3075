//! Cartesian velocity → joint velocity by damped least squares (DLS), with joint-speed
//! scaling that preserves the direction of the joint-velocity vector.
//!
//! `q̇ = Jᵀ (J Jᵀ + λ² I)⁻¹ v`, computed through the SVD `J = U Σ Vᵀ` as
//! `q̇ = Σ_i σ_i/(σ_i² + λ²) · v_i u_iᵀ v`. The damping follows the smallest singular value:
//! `λ = λ_max (1 − (σ_min/σ_thr)²)` for `σ_min < σ_thr`, else 0 (continuous, C¹ at σ_thr).
//! If any `|q̇_j| > max_speed_j`, the **whole** vector is divided by
//! `max_j |q̇_j| / max_speed_j`, so the direction of motion is kept.

use crate::arm::{check_iso, Arm};
use crate::error::{check_finite, KinError};
use crate::jacobian::JacobianFrame;
use crate::params::DlsConfig;
use crate::pose::pose_error;
use crate::wrench::Twist;
use crate::Joints;
use nalgebra::{Isometry3, Matrix6, Vector6};
use serde::{Deserialize, Serialize};

/// Flags of a DLS result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DlsFlags {
    /// Damping was active (σ_min below the threshold): the Cartesian velocity is followed only
    /// approximately.
    pub damped: bool,
    /// The joint velocity was scaled down to respect the joint speed limits.
    pub speed_scaled: bool,
    /// (servo step only) the step was shortened to stay within the joint position limits.
    pub position_limited: bool,
}

/// Result of a DLS velocity solve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DlsResult {
    /// Joint velocity to command (rad/s), within the speed limits.
    pub qdot: Joints,
    /// Joint velocity before speed scaling (rad/s).
    pub qdot_unscaled: Joints,
    /// Scale applied (`qdot = scale · qdot_unscaled`, 0 < scale ≤ 1).
    pub scale: f64,
    /// Damping used.
    pub lambda: f64,
    /// Smallest singular value of J.
    pub sigma_min: f64,
    /// Flags.
    pub flags: DlsFlags,
}

/// Result of [`Arm::servo_step_dls`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServoStep {
    /// Next joint command (rad) = q + q̇·dt (shortened at position limits).
    pub q_next: Joints,
    /// The velocity solve behind it.
    pub dls: DlsResult,
}

/// Damping for a given smallest singular value.
#[inline]
pub fn damping(sigma_min: f64, cfg: &DlsConfig) -> f64 {
    if sigma_min >= cfg.sigma_threshold {
        0.0
    } else {
        let r = sigma_min / cfg.sigma_threshold;
        cfg.lambda_max * (1.0 - r * r)
    }
}

/// Damped least-squares solve of `m x ≈ y` (6×6). Returns `(x, λ, σ_min)`.
pub fn dls_solve(
    m: &Matrix6<f64>,
    y: &Vector6<f64>,
    cfg: &DlsConfig,
) -> Result<(Vector6<f64>, f64, f64), KinError> {
    if !(m.iter().all(|v| v.is_finite()) && y.iter().all(|v| v.is_finite())) {
        return Err(KinError::InvalidInput("dls input"));
    }
    let svd = m.svd(true, true);
    let (Some(u), Some(vt)) = (svd.u, svd.v_t) else {
        return Err(KinError::Numerical("svd"));
    };
    let sigma_min = svd
        .singular_values
        .iter()
        .fold(f64::INFINITY, |a, &b| a.min(b));
    let lambda = damping(sigma_min, cfg);
    let l2 = lambda * lambda;
    let uty = u.transpose() * y;
    let mut z = Vector6::zeros();
    for i in 0..6 {
        let s = svd.singular_values[i];
        let d = s * s + l2;
        z[i] = if d > 0.0 { s / d * uty[i] } else { 0.0 };
    }
    Ok((vt.transpose() * z, lambda, sigma_min))
}

/// Scales the whole vector so that `|q̇_j| ≤ max_speed_j`; returns the scaled vector and the
/// scale (≤ 1).
pub fn scale_to_speed_limits(qdot: &Joints, max_speed: &Joints) -> (Joints, f64) {
    let mut ratio: f64 = 0.0;
    for j in 0..6 {
        ratio = ratio.max(qdot[j].abs() / max_speed[j]);
    }
    if ratio > 1.0 {
        let s = 1.0 / ratio;
        let mut out = *qdot;
        for v in out.iter_mut() {
            *v *= s;
        }
        (out, s)
    } else {
        (*qdot, 1.0)
    }
}

impl Arm {
    /// Joint velocity (rad/s) for a TCP twist given in **base axes** (linear velocity of the
    /// TCP point, m/s; angular velocity, rad/s), by damped least squares near singularities and
    /// scaled as a whole to the joint speed limits.
    pub fn joint_velocity_dls(
        &self,
        q: &Joints,
        twist_base: &Twist,
    ) -> Result<DlsResult, KinError> {
        if !twist_base.is_finite() {
            return Err(KinError::InvalidInput("twist_base"));
        }
        let j = self.jacobian(q, JacobianFrame::Base)?;
        let (x, lambda, sigma_min) = dls_solve(&j, &twist_base.to_vector(), self.dls_config())?;
        let raw = [x[0], x[1], x[2], x[3], x[4], x[5]];
        let (qdot, scale) = scale_to_speed_limits(&raw, &self.params.limits.max_speed);
        Ok(DlsResult {
            qdot,
            qdot_unscaled: raw,
            scale,
            lambda,
            sigma_min,
            flags: DlsFlags {
                damped: lambda > 0.0,
                speed_scaled: scale < 1.0,
                position_limited: false,
            },
        })
    }

    /// One velocity-path servo step towards a TCP target pose (base): twist = pose error / dt,
    /// DLS joint velocity within the speed limits, integrated over `dt` (s, > 0); the step is
    /// shortened (direction kept) if it would leave the joint position limits. This is the
    /// fallback when [`Arm::ik_step`] reports `SPEED_LIMIT_EXCEEDED`: it never moves a joint
    /// faster than its limit, at the price of lagging the target near singularities.
    pub fn servo_step_dls(
        &self,
        q: &Joints,
        target_tcp: &Isometry3<f64>,
        dt: f64,
    ) -> Result<ServoStep, KinError> {
        if !(dt.is_finite() && dt > 0.0) {
            return Err(KinError::InvalidInput("dt"));
        }
        check_finite(q, "q")?;
        check_iso(target_tcp, "target_tcp")?;
        let cur = self.fk(q)?;
        let e = pose_error(&cur, target_tcp) / dt;
        let mut dls = self.joint_velocity_dls(q, &Twist::from_vector(&e))?;
        let lim = &self.params.limits;
        // Largest fraction of the step that keeps every joint in its range (joints already
        // outside may only move back inwards).
        let mut frac: f64 = 1.0;
        for j in 0..6 {
            let d = dls.qdot[j] * dt;
            let next = q[j] + d;
            if next > lim.max[j] && d > 0.0 {
                frac = frac.min(((lim.max[j] - q[j]) / d).max(0.0));
            } else if next < lim.min[j] && d < 0.0 {
                frac = frac.min(((lim.min[j] - q[j]) / d).max(0.0));
            }
        }
        if frac < 1.0 {
            dls.flags.position_limited = true;
            for v in dls.qdot.iter_mut() {
                *v *= frac;
            }
            dls.scale *= frac;
        }
        let mut q_next = *q;
        for j in 0..6 {
            q_next[j] += dls.qdot[j] * dt;
        }
        Ok(ServoStep { q_next, dls })
    }
}
