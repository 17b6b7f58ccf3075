#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! FK acceptance: ABB zero pose, agreement with an independent DH product (10 000 seeded
//! random configurations, 1e-9 mm) and with a URDF chain built in the `k` crate.

mod common;
use common::*;
use kinematics::pose::{pose_from_abb, pose_to_abb};
use kinematics::{Arm, KinError};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

#[test]
#[allow(clippy::approx_constant)] // 0.70711 is the value printed in irb120.md
fn zero_pose_is_abb_tool0() {
    let arm = Arm::irb120();
    let p = arm.fk_tool0(&[0.0; 6]).unwrap();
    let (mm, quat) = pose_to_abb(&p);
    let expect_mm = [374.0, 0.0, 630.0];
    for i in 0..3 {
        assert!((mm[i] - expect_mm[i]).abs() < 1e-9, "pos {mm:?}");
    }
    let s = std::f64::consts::FRAC_1_SQRT_2;
    let expect_q = [s, 0.0, s, 0.0];
    for i in 0..4 {
        assert!((quat[i] - expect_q[i]).abs() < 1e-12, "quat {quat:?}");
    }
    // Printed values of irb120.md (5 decimals).
    assert!((quat[0] - 0.70711).abs() < 1e-5 && (quat[2] - 0.70711).abs() < 1e-5);
    // z of tool0 points out of the flange (+x of base), x of tool0 = −z of base.
    let r = p.rotation.to_rotation_matrix();
    assert!((r * Vector3::z() - Vector3::x()).norm() < 1e-15);
    assert!((r * Vector3::x() + Vector3::z()).norm() < 1e-15);
    // Without a tool TCP = tool0; sensor frame = tool0.
    assert_eq!(arm.fk(&[0.0; 6]).unwrap(), p);
    // Wrist centre (302, 0, 630) mm.
    let wc = arm.wrist_centre(&[0.0; 6]).unwrap();
    assert!((wc - Vector3::new(0.302, 0.0, 0.630)).norm() < 1e-15);
}

#[test]
fn fk_matches_standard_dh_10000_random() {
    let arm = Arm::irb120();
    let mut rng = Rng::new(0x1234_5678);
    let mut worst_mm: f64 = 0.0;
    let mut worst_rot: f64 = 0.0;
    for _ in 0..10_000 {
        let q = random_joints(&mut rng, &arm, 0.0);
        let ours = iso_matrix(&arm.fk_tool0(&q).unwrap());
        let dh = dh_fk_irb120(&q);
        for r in 0..3 {
            worst_mm = worst_mm.max((ours[(r, 3)] - dh[(r, 3)]).abs() * 1e3);
            for c in 0..3 {
                worst_rot = worst_rot.max((ours[(r, c)] - dh[(r, c)]).abs());
            }
        }
    }
    println!("FK vs DH: worst position {worst_mm:e} mm, worst rotation element {worst_rot:e}");
    assert!(worst_mm < 1e-9, "worst position error {worst_mm} mm");
    assert!(worst_rot < 1e-12, "worst rotation error {worst_rot}");
}

#[test]
fn tcp_and_sensor_frames_compose_with_tool0() {
    let mut arm = Arm::irb120();
    let tool = Isometry3::from_parts(
        Translation3::new(0.01, -0.02, 0.15),
        UnitQuaternion::from_euler_angles(0.1, -0.2, 0.3),
    );
    let mount = Isometry3::from_parts(Translation3::new(0.0, 0.0, 0.035), ry(0.0));
    arm.set_tool(tool).unwrap();
    arm.set_sensor_mount(mount).unwrap();
    let q = [0.1, 0.2, -0.3, 0.4, 0.5, 0.6];
    let t0 = arm.fk_tool0(&q).unwrap();
    let (dp, dr) = pose_dist(&arm.fk(&q).unwrap(), &(t0 * tool));
    assert!(dp < 1e-15 && dr < 1e-15);
    let (dp, dr) = pose_dist(&arm.fk_sensor(&q).unwrap(), &(t0 * mount));
    assert!(dp < 1e-15 && dr < 1e-15);
    // ABB conversion round trip.
    let (mm, qu) = pose_to_abb(&t0);
    let back = pose_from_abb(mm, qu).unwrap();
    let (dp, dr) = pose_dist(&back, &t0);
    assert!(dp < 1e-15 && dr < 1e-12);
}

#[test]
fn fk_rejects_non_finite() {
    let arm = Arm::irb120();
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        for j in 0..6 {
            let mut q = [0.0; 6];
            q[j] = bad;
            assert!(matches!(arm.fk(&q), Err(KinError::InvalidInput(_))));
            assert!(matches!(arm.fk_tool0(&q), Err(KinError::InvalidInput(_))));
            assert!(arm.jacobian(&q, kinematics::JacobianFrame::Base).is_err());
        }
    }
    // Out-of-limit joints are evaluated (FK is defined everywhere).
    assert!(arm.fk(&[10.0, -10.0, 7.0, 100.0, -3.0, 1e3]).is_ok());
}
