#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! Wrench transforms (round trips, power invariance), τ = Jᵀ F vs virtual work, inverse
//! mapping, sensor → TCP → base → constraint frame chain.

mod common;
use common::*;
use kinematics::{Arm, JacobianFrame, Twist, Wrench};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3, Vector6};

fn random_iso(rng: &mut Rng) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::from(rng.vec3(1.0)),
        UnitQuaternion::from_scaled_axis(rng.vec3(3.0)),
    )
}

fn random_wrench(rng: &mut Rng) -> Wrench {
    Wrench::new(rng.vec3(50.0), rng.vec3(5.0))
}

#[test]
fn wrench_transform_round_trip_and_composition() {
    let mut rng = Rng::new(21);
    for _ in 0..1_000 {
        let a_in_b = random_iso(&mut rng);
        let b_in_c = random_iso(&mut rng);
        let w = random_wrench(&mut rng);
        let back = w.transform(&a_in_b).transform(&a_in_b.inverse());
        assert!((back.to_vector() - w.to_vector()).norm() < 1e-11);
        let two = w.transform(&a_in_b).transform(&b_in_c);
        let one = w.transform(&(b_in_c * a_in_b));
        assert!((two.to_vector() - one.to_vector()).norm() < 1e-11);
        // Power is frame independent.
        let t = Twist::new(rng.vec3(1.0), rng.vec3(1.0));
        let pa = w.power(&t);
        let pb = w.transform(&a_in_b).power(&t.transform(&a_in_b));
        assert!((pa - pb).abs() < 1e-10 * (1.0 + pa.abs()));
    }
}

#[test]
fn wrench_transform_lever_arm_by_hand() {
    // 10 N along −z of A, A at (0.2, 0, 0) in B, same axes: torque at B = p × f.
    let w = Wrench::new(Vector3::new(0.0, 0.0, -10.0), Vector3::zeros());
    let a_in_b = Isometry3::translation(0.2, 0.0, 0.0);
    let wb = w.transform(&a_in_b);
    assert!((wb.torque - Vector3::new(0.0, 2.0, 0.0)).norm() < 1e-15);
    // Rotation only: A rotated +90° about z in B.
    let w = Wrench::new(Vector3::x(), Vector3::y());
    let a_in_b = Isometry3::rotation(Vector3::z() * std::f64::consts::FRAC_PI_2);
    let wb = w.transform(&a_in_b);
    assert!((wb.force - Vector3::y()).norm() < 1e-15);
    assert!((wb.torque + Vector3::x()).norm() < 1e-15);
}

#[test]
fn joint_torques_satisfy_virtual_work_with_fk_velocities() {
    let mut arm = Arm::irb120();
    arm.set_tool(Isometry3::translation(0.0, 0.03, 0.12))
        .unwrap();
    let mut rng = Rng::new(31);
    for _ in 0..1_000 {
        let q = random_joints(&mut rng, &arm, 0.01);
        let qdot = [
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
            rng.range(-1.0, 1.0),
        ];
        // TCP twist from FK by central differences (independent of J).
        let h = 1e-6;
        let mut qp = q;
        let mut qm = q;
        for j in 0..6 {
            qp[j] += h * qdot[j];
            qm[j] -= h * qdot[j];
        }
        let (pp, pm) = (arm.fk(&qp).unwrap(), arm.fk(&qm).unwrap());
        let v = (pp.translation.vector - pm.translation.vector) / (2.0 * h);
        let w = (pp.rotation * pm.rotation.inverse()).scaled_axis() / (2.0 * h);
        let f = random_wrench(&mut rng);
        let tau = arm.joint_torques(&q, &f).unwrap();
        let p_cart = f.power(&Twist::new(v, w));
        let p_joint: f64 = (0..6).map(|j| tau[j] * qdot[j]).sum();
        assert!(
            (p_cart - p_joint).abs() < 1e-6 * (1.0 + p_cart.abs()),
            "{p_cart} vs {p_joint}"
        );
    }
}

#[test]
fn wrench_from_joint_torques_inverts_away_from_singularity() {
    let arm = Arm::irb120();
    let mut rng = Rng::new(41);
    let mut checked = 0;
    for _ in 0..1_000 {
        let q = random_joints(&mut rng, &arm, 0.0);
        let sv = arm.singular_values(&q).unwrap();
        let f = random_wrench(&mut rng);
        let tau = arm.joint_torques(&q, &f).unwrap();
        let (back, lambda) = arm.wrench_from_joint_torques(&q, &tau).unwrap();
        if sv[5] > arm.dls_config().sigma_threshold {
            assert_eq!(lambda, 0.0);
            let err = (back.to_vector() - f.to_vector()).norm();
            assert!(err < 1e-8 * (1.0 + f.to_vector().norm()) / sv[5], "{err}");
            checked += 1;
        } else {
            assert!(lambda > 0.0);
        }
    }
    assert!(checked > 500);
    // At the wrist singularity the damped inverse stays bounded.
    let tau = [0.0, 0.0, 0.0, 1.0, 0.0, -1.0];
    let (w, lambda) = arm.wrench_from_joint_torques(&[0.0; 6], &tau).unwrap();
    assert!(lambda > 0.0 && w.is_finite());
    assert!(w.to_vector().norm() < 1e3);
    assert!(arm
        .wrench_from_joint_torques(&[0.0; 6], &[f64::NAN; 6])
        .is_err());
}

#[test]
fn sensor_to_tcp_to_base_to_constraint_chain() {
    let mut arm = Arm::irb120();
    let tool = Isometry3::from_parts(
        Translation3::new(0.0, 0.0, 0.15),
        UnitQuaternion::from_euler_angles(0.0, 0.0, 0.3),
    );
    let mount = Isometry3::from_parts(
        Translation3::new(0.0, 0.0, 0.03),
        UnitQuaternion::from_euler_angles(0.0, 0.0, -0.5),
    );
    arm.set_tool(tool).unwrap();
    arm.set_sensor_mount(mount).unwrap();
    let mut rng = Rng::new(51);
    for _ in 0..200 {
        let q = random_joints(&mut rng, &arm, 0.0);
        let ws = random_wrench(&mut rng);
        let c_in_base = random_iso(&mut rng);
        // Two paths to {C} must agree: sensor → base → C and sensor → TCP → base → C.
        let via_base = arm
            .sensor_wrench_to_base(&q, &ws)
            .unwrap()
            .transform(&c_in_base.inverse());
        let w_tcp = arm.sensor_wrench_to_tcp(&ws).unwrap();
        let via_tcp = w_tcp
            .transform(&arm.fk(&q).unwrap())
            .transform(&c_in_base.inverse());
        let direct = arm.sensor_wrench_to_frame(&q, &ws, &c_in_base).unwrap();
        assert!((via_base.to_vector() - direct.to_vector()).norm() < 1e-10);
        assert!((via_tcp.to_vector() - direct.to_vector()).norm() < 1e-10);
        // TCP point in base axes feeds τ = Jᵀ F; equals the base wrench shifted to the TCP.
        let at_tcp = arm.sensor_wrench_to_base_at_tcp(&q, &ws).unwrap();
        let wb = arm.sensor_wrench_to_base(&q, &ws).unwrap();
        let p_tcp = arm.fk(&q).unwrap().translation.vector;
        let shifted = wb.shift(&(-p_tcp));
        assert!((at_tcp.to_vector() - shifted.to_vector()).norm() < 1e-10);
        // τ from the TCP wrench = τ from J of the same wrench (sanity of the form).
        let tau = arm.joint_torques(&q, &at_tcp).unwrap();
        let j = arm.jacobian(&q, JacobianFrame::Base).unwrap();
        let tau2 = j.transpose() * at_tcp.to_vector();
        assert!((Vector6::from_column_slice(&tau) - tau2).norm() < 1e-12);
    }
    let bad = Wrench::new(Vector3::new(f64::NAN, 0.0, 0.0), Vector3::zeros());
    assert!(arm.sensor_wrench_to_tcp(&bad).is_err());
    assert!(arm.joint_torques(&[0.0; 6], &bad).is_err());
}
