#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! The Raibert & Craig revolute–prismatic arm: FK/IK round trip, Jacobian vs finite
//! differences, τ = Jᵀ F and its inverse, errors.

mod common;
use common::Rng;
use kinematics::{KinError, PlanarRP};
use nalgebra::Vector2;

#[test]
fn planar_fk_ik_jacobian() {
    let arm = PlanarRP::default();
    arm.validate().unwrap();
    let mut rng = Rng::new(77);
    for _ in 0..1_000 {
        let q = [rng.range(-3.0, 3.0), rng.range(0.1, 1.0)];
        let p = arm.fk(&q).unwrap();
        let back = arm.ik(&p).unwrap();
        assert!((back[0] - q[0]).abs() < 1e-12 && (back[1] - q[1]).abs() < 1e-12);
        let j = arm.jacobian(&q).unwrap();
        let h = 1e-6;
        for c in 0..2 {
            let mut qp = q;
            let mut qm = q;
            qp[c] += h;
            qm[c] -= h;
            let d = (arm.fk(&qp).unwrap() - arm.fk(&qm).unwrap()) / (2.0 * h);
            assert!((d - j.column(c)).norm() < 1e-8);
        }
        assert!((j.determinant() + q[1]).abs() < 1e-12);
        // Virtual work and inverse force mapping.
        let f = Vector2::new(rng.range(-10.0, 10.0), rng.range(-10.0, 10.0));
        let tau = arm.joint_efforts(&q, &f).unwrap();
        let qd = Vector2::new(rng.range(-1.0, 1.0), rng.range(-1.0, 1.0));
        assert!((f.dot(&(j * qd)) - tau.dot(&qd)).abs() < 1e-9);
        assert!((arm.hand_force(&q, &tau).unwrap() - f).norm() < 1e-9);
        let v = j * qd;
        assert!((arm.joint_velocity(&q, &v).unwrap() - qd).norm() < 1e-9);
    }
}

#[test]
fn planar_errors() {
    let arm = PlanarRP::default();
    assert_eq!(arm.ik(&Vector2::new(2.0, 0.0)), Err(KinError::Unreachable));
    assert_eq!(arm.ik(&Vector2::new(0.0, 0.0)), Err(KinError::Unreachable));
    assert!(matches!(
        arm.ik(&Vector2::new(f64::NAN, 0.0)),
        Err(KinError::InvalidInput(_))
    ));
    assert!(arm
        .hand_force(&[0.3, 0.0], &Vector2::new(1.0, 1.0))
        .is_err());
    let narrow = PlanarRP {
        theta_min: 0.0,
        theta_max: 1.0,
        ..PlanarRP::default()
    };
    assert_eq!(
        narrow.ik(&Vector2::new(-0.5, 0.0)),
        Err(KinError::OutOfLimits)
    );
    let bad = PlanarRP {
        r_min: 2.0,
        r_max: 1.0,
        theta_min: f64::NAN,
        theta_max: 0.0,
    };
    assert!(bad.validate().unwrap_err().len() >= 2);
}
