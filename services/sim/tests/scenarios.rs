//! The documented scenario files load, validate and build a world.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use kinematics::Arm;
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use sim::world::{SurfaceKind, Trigger, World, WorldConfig};

fn scenario(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/config/scenarios")
        .join(name)
}

fn load(name: &str) -> WorldConfig {
    match WorldConfig::load_file(&scenario(name)) {
        Ok(c) => c,
        Err(e) => panic!("{name}: {e:#?}"),
    }
}

#[test]
fn free_space_scenario() {
    let c = load("free-space.toml");
    assert!(c.validate().is_empty());
    assert!(c.surfaces.is_empty());
    assert!(!c.hand.enabled);
    assert_eq!(c.tool.mass_kg, 0.5);
    assert_eq!(c.tool.com_m, [0.0, 0.0, 0.04]);
    let mut w = World::new(c, Arm::irb120()).unwrap();
    let t = w
        .sensor_wrench(&[0.0, 0.0, 0.0, 0.0, 0.5, 0.0], &[0.0; 6], 0.0, 0.004)
        .unwrap();
    assert!(!t.in_contact);
    let f = nalgebra::Vector3::from(t.force_n);
    assert!((f.norm() - 0.5 * 9.81).abs() < 1e-9);
}

#[test]
fn table_contact_scenario() {
    let c = load("table-contact.toml");
    assert!(c.validate().is_empty());
    assert_eq!(c.surfaces.len(), 1);
    let s = &c.surfaces[0];
    assert_eq!(s.stiffness_n_per_m, 2e4);
    assert_eq!(s.mu, 0.3);
    assert!(s.motion.is_none());
    let mut w = World::new(c, Arm::irb120()).unwrap();
    // Tool pointing down (q5 = 90°) at tool0's zero-pose height: free.
    let q_free = [0.0, 0.0, 0.0, 0.0, std::f64::consts::FRAC_PI_2, 0.0];
    let t = w.sensor_wrench(&q_free, &[0.0; 6], 0.0, 0.004).unwrap();
    assert!(
        !t.in_contact,
        "tool0 at z = {}",
        t.tcp_in_base.translation.z
    );
    // Tool pointing down, its 5 mm ball tip 0.5 mm into the table top (z = 0.20 m): the
    // table pushes up with K_r·δ = 10 N; the sensor (z down) reads −10 N + the tool weight.
    let arm = w.arm().clone();
    let pose = nalgebra::Isometry3::from_parts(
        nalgebra::Translation3::new(0.40, 0.0, 0.20 + 0.005 - 0.0005),
        nalgebra::UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
    );
    let q = arm.ik_nearest(&pose, &q_free).unwrap().q;
    let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.004).unwrap();
    assert!(t.in_contact);
    assert!((t.penetration_m - 0.0005).abs() < 1e-9);
    assert!((t.contact_force_base[2] - 10.0).abs() < 1e-6);
    assert!(
        (t.force_n[2] - (-10.0 + 0.5 * 9.81)).abs() < 1e-6,
        "{:?}",
        t.force_n
    );
}

#[test]
fn table_contact_ramp_variant_is_valid() {
    // The commented ramp line, uncommented, still validates.
    let text = std::fs::read_to_string(scenario("table-contact.toml")).unwrap();
    let ramp = text.replace("# motion = { velocity_m_s", "motion = { velocity_m_s");
    assert_ne!(ramp, text);
    let c = WorldConfig::load_str(&ramp).unwrap();
    let m = c.surfaces[0].motion.unwrap();
    assert_eq!(m.velocity_m_s, [0.0, 0.0, -0.0065]);
    assert_eq!(
        m.trigger,
        Trigger::Contact,
        "Fig. 8: the ramp starts after contact"
    );
    // And so does the hand, enabled.
    let hand = text.replace(
        "enabled = false                      # set true",
        "enabled = true # set true",
    );
    let c = WorldConfig::load_str(&hand).unwrap();
    assert!(c.hand.enabled && c.hand.path.len() == 3);
}

/// Joints putting the TCP (default tool: tool0) at `p` with the tool pointing straight down.
fn tool_down_at(arm: &Arm, p: Vector3<f64>) -> [f64; 6] {
    let pose = Isometry3::from_parts(
        Translation3::from(p),
        UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
    );
    let seed = [0.0, 0.3, 0.2, 0.0, 1.0, 0.0];
    match arm.ik_nearest(&pose, &seed) {
        Ok(s) => s.q,
        Err(e) => panic!("{p} not reachable tool-down: {e:?}"),
    }
}

#[test]
fn curved_contact_scenario_supports_contour_following_over_the_crest() {
    let c = load("curved-contact.toml");
    assert_eq!(c.surfaces.len(), 1);
    let s = &c.surfaces[0];
    assert_eq!(s.kind, SurfaceKind::Cylinder);
    assert_eq!(s.axis, Some([1.0, 0.0, 0.0]));
    assert_eq!(s.stiffness_n_per_m, 2e4);
    let (axis_pt, r) = (Vector3::from(s.point_m.unwrap()), s.radius_m.unwrap());
    let rho = c.tool.tip_radius_m;
    let arm = Arm::irb120();
    let mut w = World::new(c, arm.clone()).unwrap();
    // Along y over the crest at x = 0.40 with the tool pointing down, the ball tip 0.5 mm into
    // the pipe along the local normal: 10 N along that (radial) normal everywhere, reachable.
    for y in [-0.05, -0.025, 0.0, 0.025, 0.05] {
        let radial = Vector3::new(0.0, y, (r * r - y * y).sqrt()).normalize();
        let tcp = Vector3::new(0.40, 0.0, axis_pt.z) + radial * (r + rho - 0.0005);
        assert!(
            (0.2..0.4).contains(&tcp.z),
            "TCP z {} in the usual band",
            tcp.z
        );
        let q = tool_down_at(&arm, tcp);
        let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001).unwrap();
        assert!(t.in_contact, "y = {y}");
        let f = Vector3::from(t.contact_force_base);
        assert!(
            (f - radial * 10.0).norm() < 1e-6,
            "y = {y}: {f} vs {}",
            radial * 10.0
        );
    }
    // Lifted 1 cm off the crest: free.
    let q = tool_down_at(&arm, Vector3::new(0.40, 0.0, 0.22 + rho + 0.01));
    assert!(
        !w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001)
            .unwrap()
            .in_contact
    );
}

#[test]
fn tilted_table_scenario_pushes_along_its_tilted_normal() {
    let c = load("tilted-table.toml");
    let s = &c.surfaces[0];
    let n = Vector3::from(s.normal.unwrap());
    assert!((n.norm() - 1.0).abs() < 1e-12);
    // 15° about base x.
    assert!((n.dot(&Vector3::z()).acos().to_degrees() - 15.0).abs() < 1e-9);
    assert!(n.x.abs() < 1e-15);
    let rho = c.tool.tip_radius_m;
    let arm = Arm::irb120();
    let mut w = World::new(c, arm.clone()).unwrap();
    let on = Vector3::new(0.40, 0.0, 0.20);
    for dy in [-0.04, 0.0, 0.04] {
        // A point on the plane at this y, TCP 0.5 mm in along the normal.
        let p = on + Vector3::new(0.0, dy, -dy * n.y / n.z);
        let q = tool_down_at(&arm, p + n * (rho - 0.0005));
        let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001).unwrap();
        let f = Vector3::from(t.contact_force_base);
        assert!((f - n * 10.0).norm() < 1e-6, "dy {dy}: {f}");
    }
}

#[test]
fn lead_through_scenario_hand_is_set_at_run_time() {
    use sim::scenario::{PlantRuntime, Request, Scenario};
    let c = load("lead-through.toml");
    assert!(c.validate().is_empty());
    assert!(c.surfaces.is_empty());
    assert!(!c.hand.enabled);
    assert_eq!(c.tool.mass_kg, 0.5);
    let arm = Arm::irb120();
    let q = tool_down_at(&arm, Vector3::new(0.40, 0.0, 0.35));
    let tcp = arm.fk(&q).unwrap().translation.vector;
    let mut s = Scenario::new(c, "lead-through", arm, false, PlantRuntime::default(), 1).unwrap();
    let weight_only = s.tick(&q, &[0.0; 6], None).truth.unwrap();
    assert!(!weight_only.hand_active);
    assert!((Vector3::from(weight_only.force_n).norm() - 0.5 * 9.81).abs() < 1e-9);
    let no_files = |_: &str| -> Result<(String, String), String> { Err("no files".into()) };

    // Every hand parameter at once, live; a bad request changes nothing and lists every
    // problem.
    let bad = Request::parse(
        br#"{"set": {"hand.enabled": true, "hand.reaction_delay_s": 0.6, "hand.arm_mass_kg": -1}}"#,
    )
    .unwrap();
    let e = s.apply(&bad, &no_files).unwrap_err();
    assert!(
        e.iter().any(|m| m.starts_with("hand.reaction_delay_s")),
        "{e:?}"
    );
    assert!(e.iter().any(|m| m.starts_with("hand.arm_mass_kg")), "{e:?}");
    assert!(!s.world().hand().params().enabled);
    let target = tcp + Vector3::new(0.0, 0.02, 0.0);
    let body = serde_json::json!({"set": {
        "hand.enabled": true,
        "hand.path": [[target.x, target.y, target.z]],
        "hand.speed_m_s": 0.08,
        "hand.stiffness_n_per_m": 3000.0,
        "hand.damping_n_s_per_m": 30.0,
        "hand.max_force_n": 25.0,
        "hand.start_s": 0.0,
        "hand.max_lead_m": 0.1,
        "hand.release_after_s": 100.0,
        "hand.torque_nm": [0.0, 0.0, 0.0],
        "hand.trigger": "time",
        "hand.arm_mass_kg": 3.0,
        "hand.reaction_delay_s": 0.2,
        "hand.muscle_stiffness_n_per_m": 120.0,
        "hand.muscle_damping_n_s_per_m": 12.0,
        "hand.arm_damping_n_s_per_m": 45.0,
        "hand.muscle_time_constant_s": 0.04,
    }});
    s.apply(
        &Request::parse(body.to_string().as_bytes()).unwrap(),
        &no_files,
    )
    .unwrap();
    let h = s.world().hand().params().clone();
    assert!(h.enabled && h.path.len() == 1);
    assert_eq!(
        (
            h.speed_m_s,
            h.stiffness_n_per_m,
            h.damping_n_s_per_m,
            h.max_force_n
        ),
        (0.08, 3000.0, 30.0, 25.0)
    );
    assert_eq!((h.max_lead_m, h.release_after_s), (Some(0.1), Some(100.0)));
    assert_eq!(
        (
            h.arm_mass_kg,
            h.reaction_delay_s,
            h.muscle_stiffness_n_per_m
        ),
        (3.0, 0.2, 120.0)
    );
    assert_eq!(
        (
            h.muscle_damping_n_s_per_m,
            h.arm_damping_n_s_per_m,
            h.muscle_time_constant_s
        ),
        (12.0, 45.0, 0.04)
    );
    // Against the standing robot the hand settles at the series spring force.
    let mut t = weight_only;
    for _ in 0..5000 {
        t = s.tick(&q, &[0.0; 6], None).truth.unwrap();
    }
    assert!(t.hand_active);
    let f = Vector3::from(t.hand_force_base);
    let expect = 0.02 * 3000.0 * 120.0 / 3120.0;
    assert!(
        (f - Vector3::new(0.0, expect, 0.0)).norm() < 1e-3 * expect,
        "{f}"
    );
    let hand = Vector3::from(t.hand_pos_base.unwrap());
    assert!((f - (hand - tcp) * 3000.0).norm() < 1e-6);
    assert!(s.summary()["hand"]["hand_pos_m"].is_array());
    // Released by a set: exactly zero, the reading is the weight again.
    s.apply(
        &Request::parse(br#"{"set": {"hand.enabled": false}}"#).unwrap(),
        &no_files,
    )
    .unwrap();
    let t = s.tick(&q, &[0.0; 6], None).truth.unwrap();
    assert!(!t.hand_active && t.hand_force_base == [0.0; 3] && t.hand_pos_base.is_none());
    assert_eq!(t.force_n, weight_only.force_n);
    assert!(s.summary()["hand"]["hand_pos_m"].is_null());
}

#[test]
fn peg_in_hole_scenario_lands_off_centre_and_falls_in_over_the_hole() {
    let c = load("peg-in-hole.toml");
    assert!(c.validate().is_empty());
    let s = &c.surfaces[0];
    assert_eq!(s.kind, SurfaceKind::PlateWithHole);
    let hole = Vector3::from(s.hole_center_m.unwrap());
    let clearance = s.hole_radius_m.unwrap() - c.tool.peg_radius_m;
    assert!((clearance - 1e-4).abs() < 1e-12, "{clearance}");
    let arm = Arm::irb120();
    let mut w = World::new(c, arm.clone()).unwrap();
    // Centred, 10 mm into the hole: nothing touches; the sensor reads the tool's weight.
    let q = tool_down_at(&arm, hole + Vector3::new(0.0, 0.0, -0.01));
    let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001).unwrap();
    assert!(!t.in_contact);
    // 3 mm / 2 mm off, 50 µm into the plate: 5 N up, and a torque about the TCP (the face
    // overhangs the hole on one side).
    let q = tool_down_at(&arm, hole + Vector3::new(0.003, 0.002, -5e-5));
    let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001).unwrap();
    let f = Vector3::from(t.contact_force_base);
    assert!((f - Vector3::new(0.0, 0.0, 5.0)).norm() < 1e-6, "{f}");
    assert!(t.contact_wrench_tcp_base.torque.norm() > 1e-3);
    // In the hole, 0.15 mm off in +y: the wall pushes back along −y, and the sensor sees the
    // torque of the wall reaction (10 mm above the TCP at the top edge).
    let q = tool_down_at(&arm, hole + Vector3::new(0.0, 0.00015, -0.01));
    let t = w.sensor_wrench(&q, &[0.0; 6], 0.0, 0.001).unwrap();
    let f = Vector3::from(t.contact_force_base);
    assert!((f - Vector3::new(0.0, -5.0, 0.0)).norm() < 1e-6, "{f}");
    assert!(
        t.contact_sensor.torque.norm() > 0.02,
        "{}",
        t.contact_sensor.torque
    );
}
