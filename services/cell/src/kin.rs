//! `cell kin fk|ik`: offline kinematics as JSON (tool0, mm, ABB quaternion, degrees).

use kinematics::{
    pose::{pose_from_abb, pose_to_abb},
    Arm,
};
use serde_json::json;

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// FK of tool0 as `{"position_mm", "quaternion_wxyz", "rotation"}`.
pub fn fk_json(arm: &Arm, q: &[f64], deg: bool) -> anyhow::Result<serde_json::Value> {
    let mut j = [0.0; 6];
    anyhow::ensure!(q.len() == 6, "fk needs 6 joint values, got {}", q.len());
    for (dst, v) in j.iter_mut().zip(q) {
        *dst = if deg { v.to_radians() } else { *v };
    }
    let t0 = arm.fk_tool0(&j).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (p, quat) = pose_to_abb(&t0);
    let r = t0.rotation.to_rotation_matrix();
    let rot: Vec<Vec<f64>> = (0..3)
        .map(|i| (0..3).map(|c| round(r[(i, c)], 9)).collect())
        .collect();
    Ok(json!({
        "position_mm": p.iter().map(|v| round(*v, 6)).collect::<Vec<_>>(),
        "quaternion_wxyz": quat.iter().map(|v| round(*v, 9)).collect::<Vec<_>>(),
        "rotation": rot,
    }))
}

/// IK of tool0: every in-limit solution (deg) and the one chosen (nearest to `near_deg`, or to
/// zero).
pub fn ik_json(
    arm: &Arm,
    pos_mm: [f64; 3],
    quat_wxyz: [f64; 4],
    near_deg: Option<&[f64]>,
) -> anyhow::Result<serde_json::Value> {
    let pose = pose_from_abb(pos_mm, quat_wxyz).map_err(|e| anyhow::anyhow!("{e}"))?;
    let sols = arm.ik_tool0(&pose).map_err(|e| anyhow::anyhow!("{e}"))?;
    let deg = |q: &[f64; 6]| {
        q.iter()
            .map(|v| round(v.to_degrees(), 9))
            .collect::<Vec<_>>()
    };
    let all: Vec<_> = sols.all_within_limits(arm).iter().map(deg).collect();
    let mut near = [0.0; 6];
    if let Some(n) = near_deg {
        anyhow::ensure!(n.len() == 6, "--near needs 6 values");
        for (dst, v) in near.iter_mut().zip(n) {
            *dst = v.to_radians();
        }
    }
    let chosen = arm.ik_nearest(&pose, &near);
    let branches: Vec<_> = sols
        .branches
        .iter()
        .enumerate()
        .map(|(i, b)| json!({"branch": i, "status": format!("{:?}", b.status)}))
        .collect();
    Ok(json!({
        "solutions_deg": all,
        "branches": branches,
        "chosen_deg": chosen.as_ref().ok().map(|s| deg(&s.q)),
        "chosen_branch": chosen.as_ref().ok().map(|s| s.branch),
        "error": chosen.as_ref().err().map(|e| e.to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_pose_json() {
        let v = fk_json(&Arm::irb120(), &[0.0; 6], true).expect("fk");
        assert_eq!(v["position_mm"], json!([374.0, 0.0, 630.0]));
        let q = v["quaternion_wxyz"].as_array().expect("array");
        assert!((q[0].as_f64().unwrap_or(0.0) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert!((q[2].as_f64().unwrap_or(0.0) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }

    #[test]
    fn ik_round_trip_json() {
        let arm = Arm::irb120();
        let q = [10.0, 20.0, -30.0, 40.0, 50.0, 60.0];
        let fk = fk_json(&arm, &q, true).expect("fk");
        let p: Vec<f64> = fk["position_mm"]
            .as_array()
            .expect("p")
            .iter()
            .filter_map(|v| v.as_f64())
            .collect();
        let r: Vec<f64> = fk["quaternion_wxyz"]
            .as_array()
            .expect("q")
            .iter()
            .filter_map(|v| v.as_f64())
            .collect();
        let ik = ik_json(&arm, [p[0], p[1], p[2]], [r[0], r[1], r[2], r[3]], Some(&q)).expect("ik");
        let chosen: Vec<f64> = ik["chosen_deg"]
            .as_array()
            .expect("chosen")
            .iter()
            .filter_map(|v| v.as_f64())
            .collect();
        for (a, b) in chosen.iter().zip(q.iter()) {
            assert!((a - b).abs() < 1e-4, "{chosen:?} vs {q:?}");
        }
        assert!(ik["solutions_deg"].as_array().map_or(0, |a| a.len()) >= 1);
    }
}
