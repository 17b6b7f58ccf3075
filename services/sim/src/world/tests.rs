#![allow(clippy::unwrap_used)]

use super::*;
use nalgebra::{Translation3, UnitQuaternion};
use proptest::prelude::*;
use std::f64::consts::FRAC_PI_2;

/// IRB 120 with a 100 mm tool (20 mm off-axis in x) on a 30 mm sensor.
fn arm() -> Arm {
    let mut a = Arm::irb120();
    a.set_tool(Isometry3::from_parts(
        Translation3::new(0.02, 0.0, 0.13),
        UnitQuaternion::identity(),
    ))
    .unwrap();
    a.set_sensor_mount(Isometry3::from_parts(
        Translation3::new(0.0, 0.0, 0.03),
        UnitQuaternion::identity(),
    ))
    .unwrap();
    a
}

/// Tool pointing straight down.
const Q_DOWN: [f64; 6] = [0.0, 0.2, 0.1, 0.0, FRAC_PI_2 - 0.3, 0.0];

fn world(cfg: WorldConfig) -> World {
    World::new(cfg, arm()).unwrap()
}

fn table_at(z: f64, mu: f64, damping: f64) -> SurfaceParams {
    SurfaceParams {
        name: "table".into(),
        kind: SurfaceKind::Plane,
        point_m: Some([0.0, 0.0, z]),
        normal: Some([0.0, 0.0, 1.0]),
        stiffness_n_per_m: 2e4,
        damping_n_s_per_m: damping,
        mu,
        ..Default::default()
    }
}

#[test]
fn q_down_points_the_tool_down() {
    let tcp = arm().fk(&Q_DOWN).unwrap();
    let z = tcp.rotation * Vector3::z();
    assert!((z - (-Vector3::z())).norm() < 1e-12, "{z}");
}

#[test]
fn force_along_tool_axis_at_tcp_gives_offset_cross_force_at_sensor() {
    let a = arm();
    let tcp = a.fk(&Q_DOWN).unwrap();
    let sensor = a.fk_sensor(&Q_DOWN).unwrap();
    // 10 N along the tool axis, at the TCP, given in base axes.
    let f_tool = Vector3::new(0.0, 0.0, 10.0);
    let w = Wrench::new(tcp.rotation * f_tool, Vector3::zeros());
    let ws = tcp_base_wrench_to_sensor(&w, &tcp, &sensor);
    // Sensor and tool axes coincide: same force, torque = offset × F with the TCP at
    // (0.02, 0, 0.10) in the sensor frame.
    let offset = Vector3::new(0.02, 0.0, 0.10);
    assert!((ws.force - f_tool).norm() < 1e-12);
    assert!((ws.torque - offset.cross(&f_tool)).norm() < 1e-12);
    assert!((ws.torque - Vector3::new(0.0, -0.2, 0.0)).norm() < 1e-12);
    // Round trip through the kinematics crate's own transform.
    let back = a.sensor_wrench_to_base_at_tcp(&Q_DOWN, &ws).unwrap();
    assert!((back.force - w.force).norm() < 1e-12 && back.torque.norm() < 1e-12);
}

#[test]
fn free_space_reads_only_the_tool_weight() {
    let mut w = world(WorldConfig::default());
    let t = w.sensor_wrench(&Q_DOWN, &[0.0; 6], 0.0, 0.004).unwrap();
    assert!(!t.in_contact && !t.hand_active);
    // Tool down: weight along +z of the sensor, CoM on the axis → no torque.
    assert!((Vector3::from(t.force_n) - Vector3::new(0.0, 0.0, 0.5 * 9.81)).norm() < 1e-9);
    assert!(Vector3::from(t.torque_nm).norm() < 1e-9);
    // Another pose: the force is the weight rotated into the sensor, torque = c × f.
    let q = [0.3, -0.2, 0.4, 0.5, 0.7, -1.0];
    let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.004).unwrap();
    let f = Vector3::from(t.force_n);
    assert!((t.sensor_in_base.rotation * f - Vector3::new(0.0, 0.0, -0.5 * 9.81)).norm() < 1e-9);
    let c = Vector3::new(0.0, 0.0, 0.04);
    assert!((Vector3::from(t.torque_nm) - c.cross(&f)).norm() < 1e-12);
}

#[test]
fn pressing_on_the_table() {
    let a = arm();
    let z_tcp = a.fk(&Q_DOWN).unwrap().translation.z;
    let cfg = WorldConfig {
        surfaces: vec![table_at(z_tcp + 0.001, 0.3, 100.0)],
        ..Default::default()
    };
    let mut w = world(cfg);
    let t = w.sensor_wrench(&Q_DOWN, &[0.0; 6], 0.0, 0.004).unwrap();
    assert!(t.in_contact);
    assert!((t.penetration_m - 0.001).abs() < 1e-9);
    assert!((Vector3::from(t.contact_force_base) - Vector3::new(0.0, 0.0, 20.0)).norm() < 1e-6);
    // In the sensor frame (z down): the table pushes along −z_s; the weight pulls along +z_s.
    // The 20 mm lateral TCP offset gives a torque about y_s.
    assert!((t.contact_sensor.force - Vector3::new(0.0, 0.0, -20.0)).norm() < 1e-6);
    assert!((t.contact_sensor.torque - Vector3::new(0.0, 0.4, 0.0)).norm() < 1e-6);
    assert!((t.force_n[2] - (-20.0 + 0.5 * 9.81)).abs() < 1e-6);

    // Moving down into the table (joint 2 forward): the damper adds force, and sliding
    // (joint 1) gives friction opposite to the TCP's tangential velocity.
    let qd = [0.0, 0.05, 0.0, 0.0, 0.0, 0.0];
    let t2 = w.sensor_wrench(&Q_DOWN, &qd, 0.0, 0.004).unwrap();
    let v = t2.tcp_twist_base.linear;
    assert!(v.z < 0.0, "moving down: {v}");
    let f = Vector3::from(t2.contact_force_base);
    assert!(f.z > 20.0);
    let v_t = Vector3::new(v.x, v.y, 0.0);
    let f_t = Vector3::new(f.x, f.y, 0.0);
    assert!(f_t.dot(&v_t) < 0.0);
    assert!(f_t.norm() <= 0.3 * f.z + 1e-9);
}

#[test]
fn ramp_moving_table_releases_the_tool() {
    let a = arm();
    let z_tcp = a.fk(&Q_DOWN).unwrap().translation.z;
    let mut table = table_at(z_tcp + 0.002, 0.0, 0.0);
    table.motion = Some(Ramp {
        velocity_m_s: [0.0, 0.0, -0.0065],
        start_s: 1.0,
        duration_s: 1.0,
        trigger: Trigger::Time,
    });
    let mut w = world(WorldConfig {
        surfaces: vec![table],
        ..Default::default()
    });
    let f = |w: &mut World, t: f64| {
        w.sensor_wrench(&Q_DOWN, &[0.0; 6], t, 0.004)
            .unwrap()
            .contact_force_base[2]
    };
    assert!((f(&mut w, 0.5) - 40.0).abs() < 1e-6);
    // 1.0 → 1.2 s: 1.3 mm lower → 0.7 mm penetration (the damper is 0).
    assert!((f(&mut w, 1.2) - 14.0).abs() < 1e-6);
    assert_eq!(f(&mut w, 1.5), 0.0);
}

#[test]
fn hand_force_reaches_the_sensor() {
    let a = arm();
    let tcp = a.fk(&Q_DOWN).unwrap().translation.vector;
    let target = tcp + Vector3::new(0.02, 0.0, 0.0);
    let cfg = WorldConfig {
        gravity_m_s2: [0.0; 3],
        hand: HandParams {
            enabled: true,
            path: vec![[target.x, target.y, target.z]],
            stiffness_n_per_m: 500.0,
            max_force_n: 1000.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut w = world(cfg);
    let t = w.sensor_wrench(&Q_DOWN, &[0.0; 6], 0.0, 0.004).unwrap();
    assert!(t.hand_active);
    assert!((Vector3::from(t.hand_force_base) - Vector3::new(10.0, 0.0, 0.0)).norm() < 1e-9);
    let back = a.sensor_wrench_to_base_at_tcp(&Q_DOWN, &t.wrench).unwrap();
    assert!((back.force - Vector3::new(10.0, 0.0, 0.0)).norm() < 1e-9);
    assert!(back.torque.norm() < 1e-9);
}

#[test]
fn non_finite_inputs_are_errors() {
    let mut w = world(WorldConfig::default());
    let mut q = Q_DOWN;
    q[3] = f64::NAN;
    assert!(w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.004).is_err());
    assert!(w
        .sensor_wrench(&Q_DOWN, &[f64::INFINITY; 6], 0.0, 0.004)
        .is_err());
    assert!(w
        .sensor_wrench(&Q_DOWN, &[0.0; 6], f64::NAN, 0.004)
        .is_err());
}

#[test]
fn invalid_scenario_is_rejected_with_keys() {
    let cfg = WorldConfig {
        tool: ToolParams {
            mass_kg: f64::NAN,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = World::new(cfg, arm()).unwrap_err();
    assert!(e.iter().any(|m| m.starts_with("tool.mass_kg")));
}

#[test]
fn world_builds_servo_and_plant() {
    let w = world(WorldConfig::default());
    let mut s = w.servo([0.0; 6]);
    let (q, _) = s.step(&[0.1; 6], 0.004);
    assert!(q.iter().all(|v| v.is_finite()));
    assert!(w.rc_plant().is_ok());
}

proptest! {
    /// The sensor truth maps back (through the kinematics crate's sensor → TCP transform) to
    /// the contact + hand wrench at the TCP; gravity maps to the weight; contact never pulls.
    #[test]
    fn sensor_truth_is_consistent_with_kinematics(
        q in proptest::array::uniform6(-1.0f64..1.0),
        qd in proptest::array::uniform6(-0.5f64..0.5),
        tool in proptest::array::uniform3(-0.1f64..0.2),
        mount_rpy in proptest::array::uniform3(-1.0f64..1.0),
        dz in -0.01f64..0.01,
    ) {
        let mut a = Arm::irb120();
        a.set_tool(Isometry3::from_parts(Translation3::new(tool[0], tool[1], tool[2]), UnitQuaternion::identity())).unwrap();
        a.set_sensor_mount(Isometry3::from_parts(
            Translation3::new(0.0, 0.0, 0.03),
            UnitQuaternion::from_euler_angles(mount_rpy[0], mount_rpy[1], mount_rpy[2]),
        )).unwrap();
        let z_tcp = a.fk(&q).unwrap().translation.z;
        let target = a.fk(&q).unwrap().translation.vector + Vector3::new(0.01, -0.01, 0.0);
        let cfg = WorldConfig {
            surfaces: vec![table_at(z_tcp + dz, 0.4, 200.0)],
            hand: HandParams { enabled: true, path: vec![[target.x, target.y, target.z]], ..Default::default() },
            ..Default::default()
        };
        let mut w = World::new(cfg, a.clone()).unwrap();
        let t = w.sensor_wrench(&q, &qd, 0.0, 0.004).unwrap();
        let ext = Wrench::new(t.contact_sensor.force + t.hand_sensor.force, t.contact_sensor.torque + t.hand_sensor.torque);
        let back = a.sensor_wrench_to_base_at_tcp(&q, &ext).unwrap();
        let expect_f = t.contact_wrench_tcp_base.force + Vector3::from(t.hand_force_base);
        prop_assert!((back.force - expect_f).norm() < 1e-9);
        prop_assert!((back.torque - t.contact_wrench_tcp_base.torque).norm() < 1e-9);
        prop_assert!((t.sensor_in_base.rotation * t.gravity_sensor.force - Vector3::new(0.0, 0.0, -0.5 * 9.81)).norm() < 1e-9);
        // The table only pushes up; friction is bounded by μ F_n.
        let f = Vector3::from(t.contact_force_base);
        prop_assert!(f.z >= 0.0);
        prop_assert!((f.x * f.x + f.y * f.y).sqrt() <= 0.4 * f.z * (1.0 + 1e-12) + 1e-12);
        prop_assert_eq!(t.in_contact, dz > 0.0);
    }
}
