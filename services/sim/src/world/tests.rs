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
    // The hand now has mass and a reaction delay (`hand.rs`): it grabs the tool where it is
    // (zero force at first) and settles, against the standing robot, where the operator's arm
    // (K_m) and the grasp (K_g) balance — the tool feels the grasp spring's force
    // K_g (x_h − p) = K_g K_m / (K_g + K_m) · (a − p), no longer K_g (a − p) at once.
    let a = arm();
    let tcp = a.fk(&Q_DOWN).unwrap().translation.vector;
    let target = tcp + Vector3::new(0.02, 0.0, 0.0);
    let hand = HandParams {
        enabled: true,
        path: vec![[target.x, target.y, target.z]],
        stiffness_n_per_m: 500.0,
        max_force_n: 1000.0,
        ..Default::default()
    };
    let k_series = 500.0 * hand.muscle_stiffness_n_per_m / (500.0 + hand.muscle_stiffness_n_per_m);
    let cfg = WorldConfig {
        gravity_m_s2: [0.0; 3],
        hand,
        ..Default::default()
    };
    let mut w = world(cfg);
    let t0 = w.sensor_wrench(&Q_DOWN, &[0.0; 6], 0.0, 0.001).unwrap();
    assert!(t0.hand_active && t0.hand_force_base == [0.0; 3]);
    assert_eq!(t0.hand_pos_base, Some([tcp.x, tcp.y, tcp.z]));
    let mut t = t0;
    for k in 1..6000 {
        t = w
            .sensor_wrench(&Q_DOWN, &[0.0; 6], k as f64 * 0.001, 0.001)
            .unwrap();
    }
    let f = Vector3::from(t.hand_force_base);
    let hand_pos = Vector3::from(t.hand_pos_base.unwrap());
    assert!((f - (hand_pos - tcp) * 500.0).norm() < 1e-6);
    assert!(
        (f - Vector3::new(0.02 * k_series, 0.0, 0.0)).norm() < 1e-3,
        "{f}"
    );
    let back = a.sensor_wrench_to_base_at_tcp(&Q_DOWN, &t.wrench).unwrap();
    assert!((back.force - f).norm() < 1e-9);
    assert!(back.torque.norm() < 1e-9);
}

/// The centre of mass of the default tool (base), by FK: for finite differences independent
/// of the world's Jacobian.
fn com_base(a: &Arm, q: &[f64; 6]) -> Vector3<f64> {
    let s = a.fk_sensor(q).unwrap();
    (s * nalgebra::Point3::from(ToolParams::default().com())).coords
}

#[test]
fn accelerating_the_tool_shows_m_a_in_the_sensor() {
    // Joint 1 from rest at a constant 2 rad/s² (and joint 2 at −1 rad/s²): the sensor reads
    // m (g_s − a_s), a_s the centre of mass's acceleration (here by FK second differences).
    let a = arm();
    let mut w = world(WorldConfig::default());
    let alpha = [2.0, -1.0, 0.0, 0.0, 0.0, 0.0];
    let dt = 0.001;
    let q_at = |t: f64| {
        let mut q = Q_DOWN;
        for (qj, aj) in q.iter_mut().zip(alpha.iter()) {
            *qj += 0.5 * aj * t * t;
        }
        q
    };
    let m = 0.5;
    let g = Vector3::new(0.0, 0.0, -9.81);
    let mut worst = 0.0f64;
    let mut peak_ma = 0.0f64;
    for k in 0..300 {
        let t = k as f64 * dt;
        let q = q_at(t);
        let qd: [f64; 6] = std::array::from_fn(|j| alpha[j] * t);
        let tr = w.sensor_wrench(&q, &qd, t, dt).unwrap();
        if k == 0 {
            // The first evaluation has no previous velocity: no acceleration, no spike.
            assert_eq!(tr.inertial_sensor.force, Vector3::zeros());
            continue;
        }
        // Mean acceleration over the last tick, from FK positions: centred at t − dt/2.
        let acc = |tc: f64| {
            let h = 1e-4;
            (com_base(&a, &q_at(tc + h)) - 2.0 * com_base(&a, &q_at(tc))
                + com_base(&a, &q_at(tc - h)))
                / (h * h)
        };
        let a_b = acc(t - 0.5 * dt);
        let r = tr.sensor_in_base.rotation;
        let expect = r.inverse() * ((g - a_b) * m);
        let f = Vector3::from(tr.force_n);
        worst = worst.max((f - expect).norm());
        peak_ma = peak_ma.max(m * a_b.norm());
        assert!((Vector3::from(tr.com_accel_base) - a_b).norm() < 2e-3 + 1e-2 * a_b.norm());
    }
    assert!(
        peak_ma > 0.3,
        "a meaningful acceleration: m·a = {peak_ma} N"
    );
    assert!(worst < 2e-3, "{worst} N");
}

#[test]
fn static_readings_are_unchanged_and_reset_has_no_spike() {
    let mut w = world(WorldConfig::default());
    let q = [0.3, -0.2, 0.4, 0.5, 0.7, -1.0];
    let first = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001).unwrap();
    for k in 1..50 {
        let t = w
            .sensor_wrench(&q, &[0.0; 6], k as f64 * 0.001, 0.001)
            .unwrap();
        assert_eq!(t.force_n, first.force_n);
        assert_eq!(t.torque_nm, first.torque_nm);
        assert_eq!(t.inertial_sensor.force, Vector3::zeros());
        assert_eq!(t.inertial_sensor.torque, Vector3::zeros());
        assert_eq!(t.wrench.force, t.gravity_sensor.force);
    }
    // Moving fast, then a reset: the next evaluation (velocity jumps to the arm's) is not a
    // spike.
    let qd = [1.0, 0.5, -0.5, 2.0, 1.0, 3.0];
    w.sensor_wrench(&q, &qd, 0.05, 0.001).unwrap();
    w.reset();
    let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001).unwrap();
    assert_eq!(t.inertial_sensor.force, Vector3::zeros());
    assert_eq!(t.force_n, first.force_n);
    // So is a call with a bad dt.
    let t = w.sensor_wrench(&q, &qd, 0.001, 0.0).unwrap();
    assert_eq!(t.inertial_sensor.force, Vector3::zeros());
}

#[test]
fn spinning_tool_shows_the_gyroscopic_term() {
    // The sensor mounted tilted 30° about tool0 x and the tool spinning about the flange
    // (joint 6 at a constant 6 rad/s): ω is constant in the sensor frame but off the tool's
    // principal axes, so the sensor carries −ω × I ω on top of the lever of −m a.
    let mut a = arm();
    let tilt = UnitQuaternion::from_euler_angles(std::f64::consts::FRAC_PI_6, 0.0, 0.0);
    a.set_sensor_mount(Isometry3::from_parts(
        Translation3::new(0.0, 0.0, 0.03),
        tilt,
    ))
    .unwrap();
    let tool = ToolParams {
        inertia_kg_m2: [2e-3, 2e-3, 5e-4],
        ..Default::default()
    };
    let cfg = WorldConfig {
        tool,
        gravity_m_s2: [0.0; 3],
        ..Default::default()
    };
    let mut w = World::new(cfg, a).unwrap();
    let w6 = 6.0;
    let dt = 0.001;
    let mut last = None;
    for k in 0..20 {
        let t = k as f64 * dt;
        let mut q = Q_DOWN;
        q[5] += w6 * t;
        let qd = [0.0, 0.0, 0.0, 0.0, 0.0, w6];
        last = Some(w.sensor_wrench(&q, &qd, t, dt).unwrap());
    }
    let tr = last.unwrap();
    // ω in sensor axes: the flange's z seen from the tilted sensor.
    let om = tilt.inverse() * Vector3::new(0.0, 0.0, w6);
    let inertia = Vector3::from(tool.inertia_kg_m2);
    let gyro = om.cross(&om.component_mul(&inertia));
    assert!(gyro.norm() > 0.01, "a meaningful gyroscopic torque: {gyro}");
    let lever = tool.com().cross(&tr.inertial_sensor.force);
    let euler = lever - tr.inertial_sensor.torque;
    assert!((euler - gyro).norm() < 1e-6, "{euler} vs {gyro}");
    assert!(Vector3::from(tr.angular_accel_base).norm() < 1e-6);
    // Gravity off and nothing else acting: the reading is exactly the inertial part.
    assert!((Vector3::from(tr.torque_nm) - tr.inertial_sensor.torque).norm() < 1e-12);
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

#[test]
fn a_sensor_mounted_a_quarter_turn_off_reads_in_its_true_axes() {
    // Configured mount: identity rotation. True mount: 90° about the sensor's z. The same
    // world with the arm's mount turned by hand must read identically; a sideways pull
    // (gravity tilted towards base x) moves from one sensor axis to the other.
    let cfg = WorldConfig {
        gravity_m_s2: [5.0, 0.0, -9.81],
        sensor_mount_error_rpy_deg: [0.0, 0.0, 90.0],
        ..Default::default()
    };
    let mut turned = world(cfg.clone());
    let mut a = arm();
    a.set_sensor_mount(Isometry3::from_parts(
        Translation3::new(0.0, 0.0, 0.03),
        UnitQuaternion::from_euler_angles(0.0, 0.0, FRAC_PI_2),
    ))
    .unwrap();
    let mut by_hand = World::new(
        WorldConfig {
            sensor_mount_error_rpy_deg: [0.0; 3],
            ..cfg.clone()
        },
        a,
    )
    .unwrap();
    let mut plain = world(WorldConfig {
        sensor_mount_error_rpy_deg: [0.0; 3],
        ..cfg
    });
    let a = turned
        .sensor_wrench(&Q_DOWN, &[0.0; 6], 0.0, 0.004)
        .unwrap();
    let b = by_hand
        .sensor_wrench(&Q_DOWN, &[0.0; 6], 0.0, 0.004)
        .unwrap();
    let c = plain.sensor_wrench(&Q_DOWN, &[0.0; 6], 0.0, 0.004).unwrap();
    for i in 0..3 {
        assert!((a.force_n[i] - b.force_n[i]).abs() < 1e-9, "{a:?} vs {b:?}");
        assert!((a.torque_nm[i] - b.torque_nm[i]).abs() < 1e-9);
    }
    // A quarter turn about z: (x, y) of the plain reading is (y, −x) of the turned one.
    assert!((a.force_n[0] - c.force_n[1]).abs() < 1e-9, "{a:?} vs {c:?}");
    assert!((a.force_n[1] + c.force_n[0]).abs() < 1e-9);
    assert!((a.force_n[2] - c.force_n[2]).abs() < 1e-9);
    assert!(c.force_n[0].abs().max(c.force_n[1].abs()) > 1.0, "{c:?}");
    let bad = WorldConfig {
        sensor_mount_error_rpy_deg: [0.0, f64::NAN, 200.0],
        ..Default::default()
    };
    let errs = bad.validate();
    assert_eq!(
        errs.iter()
            .filter(|e| e.starts_with("sensor_mount_error_rpy_deg"))
            .count(),
        2,
        "{errs:?}"
    );
}
