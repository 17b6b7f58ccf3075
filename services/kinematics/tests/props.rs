#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! proptest properties: IK solutions within limits; ik_nearest continuity along small
//! steps, including through q5 = 0; DLS output within joint speed limits and parallel to the
//! unclamped solution.

mod common;
use common::max_abs_diff;
use kinematics::{Arm, IkFlags, Twist};
use nalgebra::{Isometry3, Matrix6, Translation3, UnitQuaternion, Vector3, Vector6};
use proptest::prelude::*;

fn arm() -> Arm {
    let mut a = Arm::irb120();
    a.set_tool(Isometry3::from_parts(
        Translation3::new(0.0, 0.02, 0.11),
        UnitQuaternion::from_euler_angles(0.0, 0.2, 0.0),
    ))
    .unwrap();
    a
}

/// Joints anywhere in a range wider than the limits (±1.5× on each axis).
fn wide_joints() -> impl Strategy<Value = [f64; 6]> {
    let l = Arm::irb120().limits().to_owned();
    let mut v = Vec::new();
    for j in 0..6 {
        v.push((l.min[j] * 1.5)..(l.max[j] * 1.5));
    }
    (
        v[0].clone(),
        v[1].clone(),
        v[2].clone(),
        v[3].clone(),
        v[4].clone(),
        v[5].clone(),
    )
        .prop_map(|(a, b, c, d, e, f)| [a, b, c, d, e, f])
}

/// Joints within the limits shrunk by `m` rad.
fn in_limits(m: f64) -> impl Strategy<Value = [f64; 6]> {
    let l = Arm::irb120().limits().to_owned();
    let r = |j: usize| (l.min[j] + m)..(l.max[j] - m);
    (r(0), r(1), r(2), r(3), r(4), r(5)).prop_map(|(a, b, c, d, e, f)| [a, b, c, d, e, f])
}

fn small_vec(s: f64) -> impl Strategy<Value = [f64; 6]> {
    prop::array::uniform6(-s..s)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Every returned (Valid) branch, every listed 2π variant and the nearest solution lie
    /// within the joint limits, and reproduce the pose.
    #[test]
    fn ik_solutions_within_limits(q in wide_joints(), cur in in_limits(0.0)) {
        let arm = arm();
        let pose = arm.fk(&q).unwrap();
        let sols = arm.ik(&pose).unwrap();
        for (_, b) in sols.valid() {
            prop_assert!(arm.limits().contains(&b.q));
        }
        for s in sols.all_within_limits(&arm) {
            prop_assert!(arm.limits().contains(&s));
            let (dp, dr) = kinematics::pose::pose_distance(&arm.fk(&s).unwrap(), &pose);
            prop_assert!(dp < 1e-9 && dr < 1e-9, "dp {dp:e} dr {dr:e} for {s:?}");
        }
        match arm.ik_nearest(&pose, &cur) {
            Ok(s) => {
                prop_assert!(arm.limits().contains(&s.q));
                prop_assert!(sols.count_valid() > 0);
            }
            Err(_) => prop_assert_eq!(sols.count_valid(), 0),
        }
    }

    /// Small joint-space moves away from singularities: ik_nearest returns exactly the moved
    /// joints (no branch change, no jump).
    #[test]
    fn ik_nearest_continuity_small_steps(q in in_limits(0.05), dq in small_vec(1e-3)) {
        let arm = arm();
        let m = arm.singularity_measures(&q).unwrap();
        prop_assume!(m.wrist > 0.05 && m.elbow > 0.05 && m.shoulder > 0.02);
        let mut q1 = q;
        for j in 0..6 { q1[j] += dq[j]; }
        let s = arm.ik_nearest(&arm.fk(&q1).unwrap(), &q).unwrap();
        prop_assert!(max_abs_diff(&s.q, &q1) < 1e-8, "{:?} vs {:?}", s.q, q1);
    }

    /// Through the wrist singularity: a joint-space segment in which q5 changes sign (q4
    /// nearly constant), sampled finely; following the Cartesian poses with ik_nearest never
    /// jumps (every joint step is bounded by a small multiple of the segment's step), and the
    /// exact sample at q5 = 0 holds q4.
    #[test]
    fn ik_nearest_continuity_through_q5_zero(
        q in in_limits(0.2),
        q5 in 0.001f64..0.05,
        d in small_vec(0.02),
        steps in 20usize..80,
    ) {
        let arm = arm();
        let mut qa = q;
        qa[4] = q5;
        let mut qb = q;
        for j in 0..6 { qb[j] += d[j]; }
        qb[4] = -q5 * 0.7;
        let m = arm.singularity_measures(&qa).unwrap();
        prop_assume!(m.elbow > 0.05 && m.shoulder > 0.05);
        // Include the exact q5 = 0 sample.
        let s0 = q5 / (q5 + 0.7 * q5);
        let mut ts: Vec<f64> = (0..=steps).map(|i| i as f64 / steps as f64).collect();
        ts.push(s0);
        ts.sort_by(|a, b| a.total_cmp(b));
        let lerp = |t: f64| {
            let mut x = [0.0; 6];
            for j in 0..6 { x[j] = qa[j] + (qb[j] - qa[j]) * t; }
            if (t - s0).abs() < 1e-15 { x[4] = 0.0; }
            x
        };
        let mut prev = qa;
        let mut prev_t = 0.0;
        let mut saw_lock = false;
        let mut prev_seg = 0.0;
        for &t in &ts {
            let target = lerp(t);
            let s = arm.ik_nearest(&arm.fk(&target).unwrap(), &prev).unwrap();
            let seg = max_abs_diff(&lerp(prev_t), &target);
            let step = max_abs_diff(&s.q, &prev);
            // A locked sample holds q4 from the sample before it, so the step after it may span
            // two segments.
            prop_assert!(
                step <= 3.0 * (seg + prev_seg) + 1e-6,
                "jump {step} for segment step {seg} at t={t}"
            );
            prev_seg = seg;
            if s.flags.contains(IkFlags::WRIST_LOCKED) {
                saw_lock = true;
                prop_assert_eq!(s.q[3], prev[3]);
            } else {
                prop_assert!(max_abs_diff(&s.q, &target) < 1e-6, "{:?} vs {:?}", s.q, target);
            }
            prev = s.q;
            prev_t = t;
        }
        prop_assert!(saw_lock);
        prop_assert!(prev[4] < 0.0);
    }

    /// DLS: never above the joint speed limits, parallel to (a positive multiple of) the
    /// unclamped solution, which itself equals the independently computed
    /// (JᵀJ + λ²I)⁻¹ Jᵀ v.
    #[test]
    fn dls_within_speed_limits_and_parallel(
        q in in_limits(0.0),
        near_wrist in prop::bool::ANY,
        v in prop::array::uniform3(-3.0f64..3.0),
        w in prop::array::uniform3(-10.0f64..10.0),
    ) {
        let arm = arm();
        let mut q = q;
        if near_wrist { q[4] *= 1e-3; }
        let twist = Twist::new(Vector3::from(v), Vector3::from(w));
        let r = arm.joint_velocity_dls(&q, &twist).unwrap();
        let lim = arm.limits().max_speed;
        for j in 0..6 {
            prop_assert!(r.qdot[j].abs() <= lim[j] * (1.0 + 1e-12));
        }
        prop_assert!(r.scale > 0.0 && r.scale <= 1.0);
        let a = Vector6::from_column_slice(&r.qdot);
        let b = Vector6::from_column_slice(&r.qdot_unscaled);
        if b.norm() > 0.0 {
            prop_assert!(a.dot(&b) / (a.norm() * b.norm()) > 1.0 - 1e-12);
            prop_assert!((a - b * r.scale).norm() <= 1e-12 * b.norm());
        }
        // Independent normal-equation solution with the reported damping.
        let j = arm.jacobian(&q, kinematics::JacobianFrame::Base).unwrap();
        let lhs = j.transpose() * j + Matrix6::identity() * (r.lambda * r.lambda);
        if let Some(inv) = lhs.try_inverse() {
            let x = inv * j.transpose() * twist.to_vector();
            if r.lambda > 0.0 || r.sigma_min > 1e-3 {
                prop_assert!((x - b).norm() <= 1e-6 * (1.0 + b.norm()), "{} vs {}", x, b);
            }
        }
        if near_wrist { prop_assert!(r.flags.damped); }
    }
}
