#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! IK acceptance: FK(IK(p)) = p for every returned branch, limits, 2π variants of axis 6,
//! nearest selection, flags and errors.

mod common;
use common::*;
use kinematics::{Arm, BranchStatus, IkFlags, KinError};
use nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion, Vector3};
use std::f64::consts::{PI, TAU};

fn tooled_arm() -> Arm {
    let mut arm = Arm::irb120();
    arm.set_tool(Isometry3::from_parts(
        Translation3::new(0.005, 0.01, 0.12),
        UnitQuaternion::from_euler_angles(0.0, 0.3, 0.1),
    ))
    .unwrap();
    arm
}

#[test]
fn fk_of_every_branch_reproduces_pose() {
    for arm in [Arm::irb120(), tooled_arm()] {
        let mut rng = Rng::new(7);
        let mut worst_p: f64 = 0.0;
        let mut worst_r: f64 = 0.0;
        let mut branches = 0usize;
        let mut original_found = 0usize;
        let n = 10_000;
        for _ in 0..n {
            let q = random_joints(&mut rng, &arm, 0.0);
            let pose = arm.fk(&q).unwrap();
            let sols = arm.ik(&pose).unwrap();
            for br in sols.branches.iter() {
                if br.status == BranchStatus::Unreachable {
                    assert!(br.q.iter().all(|v| v.is_nan()));
                    continue;
                }
                branches += 1;
                let (dp, dr) = pose_dist(&arm.fk(&br.q).unwrap(), &pose);
                worst_p = worst_p.max(dp);
                worst_r = worst_r.max(dr);
                if br.status == BranchStatus::Valid {
                    assert!(arm.limits().contains(&br.q), "{:?}", br.q);
                }
            }
            // The generating joints are among the solutions (axis 6 up to 2π).
            let all = sols.all_within_limits(&arm);
            if all.iter().any(|s| max_abs_diff(s, &q) < 1e-7) {
                original_found += 1;
            }
        }
        println!("{branches} branches, worst {worst_p:e} m / {worst_r:e} rad");
        assert!(worst_p < 1e-9, "position error {worst_p}");
        assert!(worst_r < 1e-9, "rotation error {worst_r}");
        assert_eq!(
            original_found, n,
            "the generating joints must be among the solutions"
        );
    }
}

#[test]
fn known_branches_of_zero_pose() {
    let arm = Arm::irb120();
    let pose = arm.fk_tool0(&[0.0; 6]).unwrap();
    let sols = arm.ik_tool0(&pose).unwrap();
    // Zero pose is wrist-singular: lock sets q4 = 0 and q6 gets the sum (= 0).
    let b0 = sols.branches[0];
    assert_eq!(b0.status, BranchStatus::Valid);
    assert!(b0.flags.contains(IkFlags::WRIST_LOCKED));
    assert!(max_abs_diff(&b0.q, &[0.0; 6]) < 1e-12, "{:?}", b0.q);
    // Elbow mirror: q3' = −153.90° − q3 (irb120.md §2.2) on the other elbow branch.
    let b1 = sols.branches[1];
    assert!(
        (b1.q[2].to_degrees() - (-153.900)).abs() < 1e-2,
        "{:?}",
        b1.q
    );
    // q3 = −153.9° is outside −110..70: out of limits.
    assert_eq!(b1.status, BranchStatus::OutOfLimits);
    // Shoulder-back branches have q1 = ±180°: outside ±165°.
    for b in [2, 3, 6, 7] {
        assert_ne!(sols.branches[b].status, BranchStatus::Valid);
    }
}

#[test]
fn axis6_variants_are_listed() {
    let arm = Arm::irb120();
    let q = [0.2, 0.1, -0.2, 0.3, 0.6, 0.5];
    let pose = arm.fk_tool0(&q).unwrap();
    let sols = arm.ik_tool0(&pose).unwrap();
    let all = sols.all_within_limits(&arm);
    // q6 = 0.5 rad: 0.5, 0.5 − 2π and 0.5 + 2π are all within ±400° (±6.98 rad).
    let with_q = all
        .iter()
        .filter(|s| {
            max_abs_diff(
                &[s[0], s[1], s[2], s[3], s[4], 0.0],
                &[q[0], q[1], q[2], q[3], q[4], 0.0],
            ) < 1e-9
        })
        .count();
    assert_eq!(with_q, 3);
    for s in &all {
        assert!(arm.limits().contains(s));
        let (dp, dr) = pose_dist(&arm.fk_tool0(s).unwrap(), &pose);
        assert!(dp < 1e-9 && dr < 1e-9);
    }
    // ik_nearest follows the current q6 turn.
    for turn in [-1.0, 0.0, 1.0] {
        let mut cur = q;
        cur[5] += turn * TAU + 0.01;
        let s = arm.ik_nearest(&pose, &cur).unwrap();
        assert!((s.q[5] - (q[5] + turn * TAU)).abs() < 1e-9, "{:?}", s.q);
    }
}

#[test]
fn nearest_picks_the_current_branch() {
    let arm = tooled_arm();
    let mut rng = Rng::new(42);
    for _ in 0..2_000 {
        let q = random_joints(&mut rng, &arm, 0.05);
        let pose = arm.fk(&q).unwrap();
        let s = arm.ik_nearest(&pose, &q).unwrap();
        if s.flags.contains(IkFlags::WRIST_LOCKED) {
            continue;
        }
        assert!(max_abs_diff(&s.q, &q) < 1e-7, "{:?} vs {:?}", s.q, q);
        assert!(s.cost < 1e-12);
    }
}

#[test]
fn unreachable_out_of_limits_and_bad_input() {
    let arm = Arm::irb120();
    let far = Isometry3::from_parts(Translation3::new(2.0, 0.0, 0.5), UnitQuaternion::identity());
    let sols = arm.ik(&far).unwrap();
    assert!(!sols.any_reachable());
    assert!(sols
        .branches
        .iter()
        .all(|b| b.status == BranchStatus::Unreachable && b.q.iter().all(|v| v.is_nan())));
    assert_eq!(arm.ik_nearest(&far, &[0.0; 6]), Err(KinError::Unreachable));
    // Reachable only by configurations outside the limits: behind the robot, below the base.
    let behind = arm.fk_tool0(&[PI, 0.0, 0.0, 0.0, 0.5, 0.0]).unwrap();
    let sols = arm.ik_tool0(&behind).unwrap();
    assert!(sols.any_reachable());
    assert_eq!(
        arm.ik_nearest(&behind, &[0.0; 6]),
        Err(KinError::OutOfLimits)
    );
    // NaN everywhere.
    let nan_pose = Isometry3::from_parts(
        Translation3::new(f64::NAN, 0.0, 0.5),
        UnitQuaternion::identity(),
    );
    assert!(matches!(arm.ik(&nan_pose), Err(KinError::InvalidInput(_))));
    let nan_rot = Isometry3::from_parts(
        Translation3::new(0.3, 0.0, 0.5),
        UnitQuaternion::new_unchecked(Quaternion::new(f64::NAN, 0.0, 0.0, 0.0)),
    );
    assert!(matches!(arm.ik(&nan_rot), Err(KinError::InvalidInput(_))));
    let non_unit = Isometry3::from_parts(
        Translation3::new(0.3, 0.0, 0.5),
        UnitQuaternion::new_unchecked(Quaternion::new(2.0, 0.0, 0.0, 0.0)),
    );
    assert!(matches!(arm.ik(&non_unit), Err(KinError::InvalidInput(_))));
    let ok = arm.fk(&[0.1; 6]).unwrap();
    assert!(matches!(
        arm.ik_nearest(&ok, &[0.0, f64::NAN, 0.0, 0.0, 0.0, 0.0]),
        Err(KinError::InvalidInput(_))
    ));
    for dt in [0.0, -1.0, f64::NAN] {
        assert!(matches!(
            arm.ik_step(&ok, &[0.1; 6], dt),
            Err(KinError::InvalidInput(_))
        ));
    }
}

#[test]
fn stretched_elbow_boundary_is_solved() {
    let arm = Arm::irb120();
    let q3s = arm.elbow_stretched_q3();
    let q = [0.3, 0.4, q3s, 0.2, 0.7, -0.4];
    let pose = arm.fk_tool0(&q).unwrap();
    let s = arm.ik_nearest(&pose, &q).unwrap();
    assert!(s.flags.contains(IkFlags::NEAR_ELBOW_SINGULAR));
    let (dp, dr) = pose_dist(&arm.fk_tool0(&s.q).unwrap(), &pose);
    assert!(dp < 1e-9 && dr < 1e-9, "{dp} {dr}");
    assert!(max_abs_diff(&s.q, &q) < 1e-5, "{:?}", s.q);
    // 1 mm beyond the reach along the stretched arm is unreachable.
    let wc = arm.wrist_centre(&q).unwrap();
    let axis2 = Vector3::new(0.0, 0.0, 0.29);
    let dir = (wc - axis2).normalize();
    let mut beyond = pose;
    beyond.translation.vector += dir * 1e-3;
    assert_eq!(arm.ik_nearest(&beyond, &q), Err(KinError::Unreachable));
}

#[test]
fn shoulder_singularity_keeps_q1() {
    let arm = Arm::irb120();
    // Tool pointing straight up with the wrist centre on axis 1.
    let rot = UnitQuaternion::identity();
    let pose = Isometry3::from_parts(Translation3::new(0.0, 0.0, 0.70 + 0.072), rot);
    for q1 in [-1.0, 0.0, 0.4, 2.0] {
        let cur = [q1, 0.3, -0.8, 0.0, 0.4, 0.0];
        let s = arm.ik_nearest(&pose, &cur).unwrap();
        assert!(s.flags.contains(IkFlags::SHOULDER_LOCKED));
        assert!(s.flags.contains(IkFlags::NEAR_SHOULDER_SINGULAR));
        assert!((s.q[0] - q1).abs() < 1e-12, "{:?}", s.q);
        let (dp, dr) = pose_dist(&arm.fk_tool0(&s.q).unwrap(), &pose);
        assert!(dp < 1e-9 && dr < 1e-9);
        let m = arm.singularity_measures(&s.q).unwrap();
        assert!(m.shoulder < 1e-12 && m.manipulability < 1e-12, "{m:?}");
    }
}
