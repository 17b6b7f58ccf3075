//! Pose helpers: ABB (mm, quaternion `[w, x, y, z]`) conversions, pose error, twist between
//! poses.

use crate::error::{check_finite, KinError};
use nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion, Vector3, Vector6};

/// Pose from ABB robtarget-style values: position in **mm**, quaternion `[q1, q2, q3, q4]` =
/// `[w, x, y, z]` (normalised; its norm must be within 1e-3 of 1).
pub fn pose_from_abb(pos_mm: [f64; 3], quat_wxyz: [f64; 4]) -> Result<Isometry3<f64>, KinError> {
    check_finite(&pos_mm, "pos_mm")?;
    check_finite(&quat_wxyz, "quat_wxyz")?;
    let q = Quaternion::new(quat_wxyz[0], quat_wxyz[1], quat_wxyz[2], quat_wxyz[3]);
    if (q.norm() - 1.0).abs() > 1e-3 {
        return Err(KinError::InvalidInput("quat_wxyz"));
    }
    Ok(Isometry3::from_parts(
        Translation3::new(pos_mm[0] * 1e-3, pos_mm[1] * 1e-3, pos_mm[2] * 1e-3),
        UnitQuaternion::from_quaternion(q),
    ))
}

/// Pose to ABB values: position in mm and quaternion `[w, x, y, z]` with `w ≥ 0`.
pub fn pose_to_abb(pose: &Isometry3<f64>) -> ([f64; 3], [f64; 4]) {
    let t = pose.translation.vector * 1e3;
    let q = pose.rotation.quaternion();
    let s = if q.w < 0.0 { -1.0 } else { 1.0 };
    ([t.x, t.y, t.z], [s * q.w, s * q.i, s * q.j, s * q.k])
}

/// Error from `current` to `target` (both in the same base frame) as `[Δp; Δφ]`:
/// `Δp = p_target − p_current` (m) and `Δφ` the rotation vector (rad, base axes) of
/// `R_target · R_currentᵀ`.
pub fn pose_error(current: &Isometry3<f64>, target: &Isometry3<f64>) -> Vector6<f64> {
    let dp = target.translation.vector - current.translation.vector;
    let dr = (target.rotation * current.rotation.inverse()).scaled_axis();
    Vector6::new(dp.x, dp.y, dp.z, dr.x, dr.y, dr.z)
}

/// Position (m) and orientation (rad) distance between two poses.
pub fn pose_distance(a: &Isometry3<f64>, b: &Isometry3<f64>) -> (f64, f64) {
    let dp = (a.translation.vector - b.translation.vector).norm();
    // 2·atan2(|v|, |w|) of the relative quaternion: accurate for small angles, where the
    // acos of `w` (nalgebra's `angle_to`) floors at ≈ 1e-8 rad (√ of the rounding of w ≈ 1).
    let q = a.rotation.inverse() * b.rotation;
    let dr = 2.0 * q.imag().norm().atan2(q.scalar().abs());
    (dp, dr)
}

/// Pose with translation (m) and roll-pitch-yaw (rad, `Rz(yaw)·Ry(pitch)·Rx(roll)`).
pub fn pose_from_xyz_rpy(xyz: [f64; 3], rpy: [f64; 3]) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::from(Vector3::from(xyz)),
        UnitQuaternion::from_euler_angles(rpy[0], rpy[1], rpy[2]),
    )
}
