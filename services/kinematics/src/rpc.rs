//! FK/IK as JSON (tool0, mm, ABB quaternion, degrees): what `cell kin fk|ik` prints and what
//! the `cell/<id>/kin/rpc/{fk,ik}` queryables answer.

use crate::{
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
    let l = arm.limits();
    let outside: Vec<usize> = (0..6)
        .filter(|&k| j[k] < l.min[k] || j[k] > l.max[k])
        .map(|k| k + 1)
        .collect();
    let (p, quat) = pose_to_abb(&t0);
    let r = t0.rotation.to_rotation_matrix();
    let rot: Vec<Vec<f64>> = (0..3)
        .map(|i| (0..3).map(|c| round(r[(i, c)], 9)).collect())
        .collect();
    // Every link's frame in base (the 3-D view's frames, `Arm::link_frames`).
    let links: Vec<serde_json::Value> = arm
        .link_frames(&j)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .iter()
        .zip(crate::fk::LINK_NAMES)
        .map(|(f, name)| {
            let (p, q) = pose_to_abb(f);
            json!({
                "frame": name,
                "position_mm": p.iter().map(|v| round(*v, 6)).collect::<Vec<_>>(),
                "quaternion_wxyz": q.iter().map(|v| round(*v, 9)).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({
        "position_mm": p.iter().map(|v| round(*v, 6)).collect::<Vec<_>>(),
        "quaternion_wxyz": quat.iter().map(|v| round(*v, 9)).collect::<Vec<_>>(),
        "rotation": rot,
        "links": links,
        "within_limits": outside.is_empty(),
        "outside_limits_axes": outside,
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

/// A queryable request: `{"q_deg": [..6]}` or `{"q_rad": [..6]}` for FK;
/// `{"position_mm": [x,y,z], "quaternion_wxyz": [w,x,y,z], "near_deg": [..6]?}` for IK.
pub fn answer(arm: &Arm, op: &str, request: &[u8]) -> Result<serde_json::Value, String> {
    let req: serde_json::Value =
        serde_json::from_slice(request).map_err(|e| format!("request is not JSON: {e}"))?;
    let nums = |key: &str| -> Option<Vec<f64>> {
        req.get(key)?
            .as_array()?
            .iter()
            .map(|v| v.as_f64())
            .collect()
    };
    match op {
        "fk" => {
            let six = |v: Vec<f64>| (v.len() == 6).then_some(v);
            let (q, deg) = match (nums("q_deg").and_then(six), nums("q_rad").and_then(six)) {
                (Some(q), None) => (q, true),
                (None, Some(q)) => (q, false),
                _ => return Err("fk needs exactly one of q_deg or q_rad (6 numbers)".into()),
            };
            fk_json(arm, &q, deg).map_err(|e| e.to_string())
        }
        "ik" => {
            let p = nums("position_mm").filter(|v| v.len() == 3);
            let q = nums("quaternion_wxyz").filter(|v| v.len() == 4);
            let (Some(p), Some(q)) = (p, q) else {
                return Err(
                    "ik needs position_mm (3 numbers) and quaternion_wxyz (4 numbers)".into(),
                );
            };
            let near = nums("near_deg");
            ik_json(
                arm,
                [p[0], p[1], p[2]],
                [q[0], q[1], q[2], q[3]],
                near.as_deref(),
            )
            .map_err(|e| e.to_string())
        }
        other => Err(format!("unknown operation {other:?}: use fk or ik")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_requests_and_rejects_bad_ones() {
        let arm = Arm::irb120();
        let v = answer(&arm, "fk", br#"{"q_deg":[0,0,0,0,0,0]}"#).expect("fk");
        assert_eq!(v["position_mm"], json!([374.0, 0.0, 630.0]));
        let v = answer(
            &arm,
            "ik",
            br#"{"position_mm":[374,0,630],"quaternion_wxyz":[0.70710678,0,0.70710678,0]}"#,
        )
        .expect("ik");
        assert_eq!(v["chosen_branch"], json!(0));
        assert!(answer(&arm, "fk", b"nope").is_err());
        assert!(answer(&arm, "fk", br#"{"q_deg":[0,0]}"#).is_err());
        assert!(answer(&arm, "ik", br#"{"position_mm":[1,2]}"#).is_err());
        assert!(answer(&arm, "jump", b"{}").is_err());
    }

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
