#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! Parameters: TOML deserialization, presets, validate() reporting every problem.

use kinematics::{Arm, ArmParams, KinError};

const TOML: &str = r#"
[opw]
a1 = 0.0
a2 = -0.070
b = 0.0
c1 = 0.290
c2 = 0.270
c3 = 0.302
c4 = 0.072
offsets = [0.0, 0.0, -1.5707963267948966, 0.0, 0.0, 0.0]
sign_corrections = [1, 1, 1, 1, 1, 1]

[limits]
min = [-2.87979, -1.91986, -1.91986, -2.79253, -2.094395, -6.98132]
max = [2.87979, 1.91986, 1.22173, 2.79253, 2.094395, 6.98132]
max_speed = [4.36332, 4.36332, 4.36332, 5.58505, 5.58505, 7.33038]

[tool]
translation = [0.0, 0.0, 0.120]
quaternion = [1.0, 0.0, 0.0, 0.0]

[sensor_mount]
translation = [0.0, 0.0, 0.035]
rpy = [0.0, 0.0, 0.5]

[ik]
near_wrist = 0.1
"#;

#[test]
fn toml_table_builds_an_arm() {
    let p: ArmParams = toml::from_str(TOML).unwrap();
    p.validate().unwrap();
    assert_eq!(p.opw, ArmParams::irb120().opw);
    assert_eq!(p.ik.near_wrist, 0.1);
    assert_eq!(p.ik.wrist_lock_eps, 1e-10); // default kept
    let arm = Arm::new(p).unwrap();
    let tcp = arm.fk(&[0.0; 6]).unwrap();
    assert!(
        (tcp.translation.vector - nalgebra::Vector3::new(0.374 + 0.12, 0.0, 0.630)).norm() < 1e-12
    );
    // Same FK as the preset at the same joints (tool0).
    let q = [0.1, -0.2, 0.3, -0.4, 0.5, -0.6];
    let a = arm.fk_tool0(&q).unwrap();
    let b = Arm::irb120().fk_tool0(&q).unwrap();
    assert!(kinematics::pose::pose_distance(&a, &b).0 < 1e-15);
}

#[test]
fn presets_validate() {
    ArmParams::irb120().validate().unwrap();
    ArmParams::irb120t().validate().unwrap();
    assert!(Arm::new(ArmParams::irb120()).is_ok());
    let l = ArmParams::irb120().limits;
    assert!((l.max[5].to_degrees() - 400.0).abs() < 1e-9);
    assert!(
        (l.min[2].to_degrees() + 110.0).abs() < 1e-9 && (l.max[2].to_degrees() - 70.0).abs() < 1e-9
    );
    assert!((l.max_speed[5].to_degrees() - 420.0).abs() < 1e-9);
}

#[test]
fn validate_reports_all_problems_by_field() {
    let mut p = ArmParams::irb120();
    p.opw.c2 = -0.1;
    p.opw.a1 = f64::NAN;
    p.opw.sign_corrections[3] = 0;
    p.limits.min[2] = 2.0; // > max
    p.limits.max_speed[5] = 0.0;
    p.tool.quaternion = Some([2.0, 0.0, 0.0, 0.0]);
    p.sensor_mount.rpy = Some([0.0, f64::INFINITY, 0.0]);
    p.ik.wrist_lock_eps = -1.0;
    p.dls.lambda_max = 0.0;
    let errs = p.validate().unwrap_err();
    for field in [
        "opw.c2",
        "opw.a1",
        "opw.sign_corrections[3]",
        "limits.min[2]",
        "limits.max_speed[5]",
        "tool.quaternion",
        "sensor_mount.rpy",
        "ik.wrist_lock_eps",
        "dls.lambda_max",
    ] {
        assert!(
            errs.iter().any(|e| e.starts_with(field)),
            "missing {field} in {errs:#?}"
        );
    }
    match Arm::new(p) {
        Err(KinError::InvalidParams(e)) => assert_eq!(e, errs),
        other => panic!("expected InvalidParams, got {other:?}"),
    }
}

#[test]
fn toml_rejects_unknown_fields_and_both_rotations() {
    let bad = TOML.replace("near_wrist = 0.1", "near_wrsit = 0.1");
    assert!(toml::from_str::<ArmParams>(&bad).is_err());
    let both = TOML.replace(
        "rpy = [0.0, 0.0, 0.5]",
        "rpy = [0.0, 0.0, 0.5]\nquaternion = [1.0, 0.0, 0.0, 0.0]",
    );
    let p: ArmParams = toml::from_str(&both).unwrap();
    let errs = p.validate().unwrap_err();
    assert!(
        errs.iter().any(|e| e.starts_with("sensor_mount")),
        "{errs:?}"
    );
}
