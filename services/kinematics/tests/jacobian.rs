#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! Jacobian vs finite differences of FK, tool-frame Jacobian, manipulability and
//! singularity measures.

mod common;
use common::*;
use kinematics::{Arm, JacobianFrame};
use nalgebra::{Isometry3, Matrix6, Translation3, UnitQuaternion, Vector3};

/// Central finite-difference Jacobian of the TCP pose (base axes).
fn fd_jacobian(arm: &Arm, q: &[f64; 6]) -> Matrix6<f64> {
    let h = 1e-6;
    let mut j = Matrix6::zeros();
    for c in 0..6 {
        let mut qp = *q;
        let mut qm = *q;
        qp[c] += h;
        qm[c] -= h;
        let (pp, pm) = (arm.fk(&qp).unwrap(), arm.fk(&qm).unwrap());
        let v = (pp.translation.vector - pm.translation.vector) / (2.0 * h);
        let w = (pp.rotation * pm.rotation.inverse()).scaled_axis() / (2.0 * h);
        for r in 0..3 {
            j[(r, c)] = v[r];
            j[(r + 3, c)] = w[r];
        }
    }
    j
}

fn tooled() -> Arm {
    let mut arm = Arm::irb120();
    arm.set_tool(Isometry3::from_parts(
        Translation3::new(0.02, -0.01, 0.15),
        UnitQuaternion::from_euler_angles(0.2, 0.1, -0.4),
    ))
    .unwrap();
    arm
}

#[test]
fn jacobian_matches_finite_differences() {
    for arm in [Arm::irb120(), tooled()] {
        let mut rng = Rng::new(11);
        let mut worst: f64 = 0.0;
        for _ in 0..2_000 {
            let q = random_joints(&mut rng, &arm, 0.0);
            let j = arm.jacobian(&q, JacobianFrame::Base).unwrap();
            let fd = fd_jacobian(&arm, &q);
            worst = worst.max((j - fd).abs().max());
        }
        println!("Jacobian vs FD worst element error {worst:e}");
        assert!(worst < 1e-8, "{worst}");
    }
}

#[test]
fn tool_frame_jacobian_is_rotated_base_jacobian() {
    let arm = tooled();
    let mut rng = Rng::new(5);
    for _ in 0..500 {
        let q = random_joints(&mut rng, &arm, 0.0);
        let jb = arm.jacobian(&q, JacobianFrame::Base).unwrap();
        let jt = arm.jacobian(&q, JacobianFrame::Tool).unwrap();
        let r = arm.fk(&q).unwrap().rotation;
        let qd = Vector3::new(rng.unit(), rng.unit(), rng.unit());
        let qdot = nalgebra::Vector6::new(qd.x, qd.y, qd.z, rng.unit(), rng.unit(), rng.unit());
        let vb = jb * qdot;
        let vt = jt * qdot;
        let lin = r * Vector3::new(vt[0], vt[1], vt[2]);
        let ang = r * Vector3::new(vt[3], vt[4], vt[5]);
        assert!((lin - Vector3::new(vb[0], vb[1], vb[2])).norm() < 1e-12);
        assert!((ang - Vector3::new(vb[3], vb[4], vb[5])).norm() < 1e-12);
    }
}

#[test]
fn manipulability_equals_sqrt_det_jjt() {
    let arm = tooled();
    let mut rng = Rng::new(8);
    for _ in 0..200 {
        let q = random_joints(&mut rng, &arm, 0.0);
        let j = arm.jacobian(&q, JacobianFrame::Base).unwrap();
        let w = (j * j.transpose()).determinant().max(0.0).sqrt();
        let m = arm.manipulability(&q).unwrap();
        assert!((w - m).abs() < 1e-9 * (1.0 + w), "{w} vs {m}");
        let sv = arm.singular_values(&q).unwrap();
        let prod: f64 = sv.iter().product();
        assert!((prod - m).abs() < 1e-9 * (1.0 + m));
    }
}

#[test]
fn singularity_measures_vanish_at_the_singularities() {
    let arm = Arm::irb120();
    // Elbow: derived stretched angle −76.95° (irb120.md §1.4), not hard-coded in the library.
    let q3s = arm.elbow_stretched_q3();
    assert!(
        (q3s.to_degrees() - (-76.950)).abs() < 1e-3,
        "{}",
        q3s.to_degrees()
    );
    assert!((arm.elbow_folded_q3().to_degrees() - 103.050).abs() < 1e-3);
    assert!((arm.max_wrist_reach() - 0.580006).abs() < 1e-6);
    let q = [0.0, 0.0, q3s, 0.0, 0.5, 0.0];
    let m = arm.singularity_measures(&q).unwrap();
    assert!(m.elbow < 1e-12, "{m:?}");
    assert!(arm.singular_values(&q).unwrap()[5] < 1e-9);
    // Wrist centre at (0, 0, 870.006) mm there (irb120.md §1.4).
    let wc = arm.wrist_centre(&q).unwrap();
    assert!(
        (wc - Vector3::new(0.0, 0.0, 0.870006)).norm() < 1e-6,
        "{wc:?}"
    );
    // Wrist: q5 = 0 (the zero pose).
    let m = arm.singularity_measures(&[0.0; 6]).unwrap();
    assert!(m.wrist == 0.0 && m.manipulability < 1e-12, "{m:?}");
    assert!(arm.singular_values(&[0.0; 6]).unwrap()[5] < 1e-12);
    // Regular configuration: all measures clearly non-zero.
    let m = arm
        .singularity_measures(&[0.2, 0.3, -0.5, 0.4, 0.8, 0.1])
        .unwrap();
    assert!(
        m.wrist > 0.5 && m.elbow > 0.1 && m.shoulder > 0.1 && m.manipulability > 1e-4,
        "{m:?}"
    );
    // Shoulder measure = distance of the wrist centre from axis 1 (b = 0).
    let mut rng = Rng::new(3);
    for _ in 0..100 {
        let q = random_joints(&mut rng, &arm, 0.0);
        let wc = arm.wrist_centre(&q).unwrap();
        let m = arm.singularity_measures(&q).unwrap();
        assert!((m.shoulder - wc.x.hypot(wc.y)).abs() < 1e-12);
        assert!((m.wrist - q[4].sin().abs()).abs() < 1e-12);
    }
}

/// `Arm::state` (one evaluation of the chain per cycle) gives what the four separate calls
/// give, bit for bit, with and without a tool; non-finite joints are an error.
#[test]
fn one_state_is_the_four_calls_bit_for_bit() {
    for arm in [Arm::irb120(), tooled()] {
        let mut rng = Rng::new(5);
        for _ in 0..500 {
            let q = random_joints(&mut rng, &arm, 0.0);
            let s = arm.state(&q).unwrap();
            assert_eq!(s.tool0, arm.fk_tool0(&q).unwrap());
            assert_eq!(s.tcp, arm.fk(&q).unwrap());
            assert_eq!(
                s.jacobian_base,
                arm.jacobian(&q, JacobianFrame::Base).unwrap()
            );
            assert_eq!(s.manipulability, arm.manipulability(&q).unwrap());
        }
        assert!(arm.state(&[0.0, f64::NAN, 0.0, 0.0, 0.0, 0.0]).is_err());
    }
}
