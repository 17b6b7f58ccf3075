//! The 3-D view's content, from what the cell measures (pure: no bus, no clock).
//!
//! - [`transforms`]: a frame per link from [`Arm::link_frames`] (`link1` … `link6`, `tool0`),
//!   the TCP, the F/T sensor and the hybrid task's constraint frame, each as its pose in
//!   `base` (Foxglove's 3-D panel resolves any frame through `base`);
//! - [`arm_scene`]: the arm drawn with primitives sized from the OPW geometry (base column,
//!   upper arm, elbow and forearm, wrist, flange), the tool (tool0 → TCP), the sensor, and the
//!   contact force as an arrow at the TCP (5 mm per N, base axes);
//! - [`world_scene`]: the simulated world's surfaces (from the simulator's scenario summary;
//!   the real cell has none to show).

use kinematics::{fk::LINK_NAMES, Arm, Joints};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

use super::fox::{
    rgba, ArrowPrimitive, Color, CubePrimitive, CylinderPrimitive, FrameTransform, FrameTransforms,
    KeyValuePair, Pose, SceneEntity, SceneUpdate, SpherePrimitive, Time,
};

/// The root frame of the view.
pub const BASE: &str = "base";
/// Arrow length per newton of contact force (m/N).
pub const ARROW_M_PER_N: f64 = 0.005;

const ORANGE: Color = rgba(1.0, 0.45, 0.0, 1.0);
const GREY: Color = rgba(0.35, 0.35, 0.38, 1.0);
const STEEL: Color = rgba(0.7, 0.7, 0.72, 1.0);
const RED: Color = rgba(0.9, 0.1, 0.1, 1.0);
const SURFACE: Color = rgba(0.4, 0.55, 0.8, 0.45);

fn tf(t: Time, child: &str, pose: &Isometry3<f64>) -> FrameTransform {
    let p = Pose::from(pose);
    FrameTransform {
        timestamp: t,
        parent_frame_id: BASE.into(),
        child_frame_id: child.into(),
        translation: p.position,
        rotation: p.orientation,
    }
}

/// Every frame of the arm at joints `q` (rad) in `base`, stamped `t_ns`; `constraint` the
/// running hybrid task's frame in base.
pub fn transforms(
    arm: &Arm,
    q: &Joints,
    t_ns: u64,
    constraint: Option<&Isometry3<f64>>,
) -> Option<FrameTransforms> {
    let t = Time::from_ns(t_ns);
    let links = arm.link_frames(q).ok()?;
    let mut out: Vec<FrameTransform> = links
        .iter()
        .zip(LINK_NAMES)
        .map(|(f, name)| tf(t, name, f))
        .collect();
    let tool0 = links[6];
    out.push(tf(t, "tcp", &(tool0 * arm.tool())));
    out.push(tf(t, "sensor", &(tool0 * arm.sensor_mount())));
    if let Some(c) = constraint {
        out.push(tf(t, "constraint", c));
    }
    Some(FrameTransforms { transforms: out })
}

fn at(x: f64, y: f64, z: f64) -> Pose {
    Pose::from(&Isometry3::from_parts(
        Translation3::new(x, y, z),
        UnitQuaternion::identity(),
    ))
}

fn cube(pose: Pose, sx: f64, sy: f64, sz: f64, color: Color) -> CubePrimitive {
    CubePrimitive {
        pose,
        size: Vector3::new(sx.abs(), sy.abs(), sz.abs()).into(),
        color,
    }
}

fn cylinder(pose: Pose, d: f64, h: f64, color: Color) -> CylinderPrimitive {
    CylinderPrimitive {
        pose,
        size: Vector3::new(d, d, h.abs()).into(),
        bottom_scale: 1.0,
        top_scale: 1.0,
        color,
    }
}

fn entity(t: Time, frame: &str, id: &str) -> SceneEntity {
    SceneEntity {
        timestamp: t,
        frame_id: frame.into(),
        id: id.into(),
        frame_locked: true,
        ..Default::default()
    }
}

/// An arrow from `from` along `v` (base axes), `len_m` long.
fn arrow(from: Vector3<f64>, v: Vector3<f64>, len_m: f64, color: Color) -> Option<ArrowPrimitive> {
    let n = v.norm();
    if !(n.is_finite() && n > 1e-9 && len_m > 1e-6) {
        return None;
    }
    let rot = UnitQuaternion::rotation_between(&Vector3::x(), &(v / n)).unwrap_or_else(|| {
        UnitQuaternion::from_axis_angle(&Vector3::z_axis(), std::f64::consts::PI)
    });
    let head = (0.25 * len_m).min(0.03);
    Some(ArrowPrimitive {
        pose: Pose::from(&Isometry3::from_parts(Translation3::from(from), rot)),
        shaft_length: (len_m - head).max(0.0),
        shaft_diameter: 0.006,
        head_length: head,
        head_diameter: 0.015,
        color,
    })
}

/// The arm, tool, sensor and force arrow at joints `q`; `force_base_n` the estimated contact
/// force at the TCP (base axes). The entities carry `q_rad` (JSON) in their metadata.
pub fn arm_scene(arm: &Arm, q: &Joints, t_ns: u64, force_base_n: Option<[f64; 3]>) -> SceneUpdate {
    let t = Time::from_ns(t_ns);
    let g = &arm.params().opw;
    let meta = vec![KeyValuePair {
        key: "q_rad".into(),
        value: serde_json::to_string(q).unwrap_or_default(),
    }];
    let mut entities = Vec::new();
    // Base column and link 1 (in base and link1: the column turns with axis 1).
    let mut e = entity(t, BASE, "arm/base");
    e.cylinders
        .push(cylinder(at(0.0, 0.0, 0.05), 0.18, 0.1, GREY));
    e.metadata = meta.clone();
    entities.push(e);
    let mut e = entity(t, "link1", "arm/link1");
    e.cylinders.push(cylinder(
        at(0.0, 0.0, 0.1 + (g.c1 - 0.1) / 2.0),
        0.14,
        g.c1 - 0.1,
        ORANGE,
    ));
    e.cubes.push(cube(
        at(g.a1 / 2.0, g.b / 2.0, g.c1),
        0.12 + g.a1.abs(),
        0.16,
        0.12,
        ORANGE,
    ));
    e.metadata = meta.clone();
    entities.push(e);
    // Upper arm: along link 2's z, c2 long.
    let mut e = entity(t, "link2", "arm/link2");
    e.cubes.push(cube(
        at(0.0, 0.0, g.c2 / 2.0),
        0.08,
        0.09,
        g.c2 + 0.08,
        ORANGE,
    ));
    e.metadata = meta.clone();
    entities.push(e);
    // Elbow offset a2 along x, then the forearm c3 along z.
    let mut e = entity(t, "link3", "arm/link3");
    e.cubes.push(cube(
        at(g.a2 / 2.0, 0.0, 0.0),
        g.a2.abs() + 0.08,
        0.1,
        0.08,
        ORANGE,
    ));
    e.cylinders
        .push(cylinder(at(g.a2, 0.0, g.c3 / 2.0), 0.07, g.c3, ORANGE));
    e.metadata = meta.clone();
    entities.push(e);
    // Wrist (axis 5) and flange (axis 6, c4 to tool0).
    let mut e = entity(t, "link5", "arm/wrist");
    e.spheres.push(SpherePrimitive {
        pose: at(0.0, 0.0, 0.0),
        size: Vector3::new(0.07, 0.07, 0.07).into(),
        color: ORANGE,
    });
    e.metadata = meta.clone();
    entities.push(e);
    let mut e = entity(t, "link6", "arm/flange");
    e.cylinders
        .push(cylinder(at(0.0, 0.0, g.c4 / 2.0), 0.05, g.c4, GREY));
    e.metadata = meta.clone();
    entities.push(e);
    // The sensor (a puck at its frame) and the tool (tool0 → TCP).
    let mut e = entity(t, "sensor", "tool/sensor");
    e.cylinders
        .push(cylinder(at(0.0, 0.0, 0.0), 0.07, 0.03, STEEL));
    entities.push(e);
    let tool = arm.tool().translation.vector;
    if tool.norm() > 1e-4 {
        let mut e = entity(t, "tool0", "tool/body");
        if let Some(a) = arrow(Vector3::zeros(), tool, tool.norm(), STEEL) {
            // A rod drawn as a headless arrow.
            e.arrows.push(ArrowPrimitive {
                shaft_length: tool.norm(),
                shaft_diameter: 0.02,
                head_length: 0.0,
                head_diameter: 0.0,
                ..a
            });
        }
        entities.push(e);
    }
    // The force arrow at the TCP, base axes.
    let mut e = entity(t, BASE, "force/arrow");
    e.frame_locked = false;
    if let (Some(f), Ok(tcp)) = (force_base_n, arm.fk(q)) {
        let v = Vector3::from(f);
        if let Some(a) = arrow(tcp.translation.vector, v, v.norm() * ARROW_M_PER_N, RED) {
            e.arrows.push(a);
        }
        e.metadata.push(KeyValuePair {
            key: "force_base_n".into(),
            value: serde_json::to_string(&f).unwrap_or_default(),
        });
    }
    entities.push(e);
    SceneUpdate {
        deletions: vec![],
        entities,
    }
}

/// The simulated world's surfaces from the simulator's scenario summary (`config.surfaces`),
/// in base; offsets of moving surfaces from `surfaces[i].offset_m`.
pub fn world_scene(summary: &serde_json::Value, t_ns: u64) -> SceneUpdate {
    let t = Time::from_ns(t_ns);
    let mut e = entity(t, BASE, "world/surfaces");
    let cfg = summary["config"]["surfaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let v3 = |v: &serde_json::Value| -> Option<Vector3<f64>> {
        let a = v.as_array()?;
        Some(Vector3::new(
            a.first()?.as_f64()?,
            a.get(1)?.as_f64()?,
            a.get(2)?.as_f64()?,
        ))
    };
    for (i, s) in cfg.iter().enumerate() {
        let off = v3(&summary["surfaces"][i]["offset_m"]).unwrap_or_else(Vector3::zeros);
        let kind = s["kind"].as_str().unwrap_or("");
        let n = v3(&s["normal"])
            .filter(|n| n.norm() > 1e-9)
            .map(|n| n.normalize());
        let slab = |centre: Vector3<f64>, normal: Vector3<f64>, thick: f64, hole: Option<f64>| {
            let rot =
                UnitQuaternion::rotation_between(&Vector3::z(), &normal).unwrap_or_else(|| {
                    UnitQuaternion::from_axis_angle(&Vector3::x_axis(), std::f64::consts::PI)
                });
            let c = centre - normal * (thick / 2.0);
            let pose = Pose::from(&Isometry3::from_parts(Translation3::from(c), rot));
            let mut out = vec![cube(pose, 0.6, 0.6, thick, SURFACE)];
            if let Some(r) = hole {
                // The hole as a dark disc on the top face.
                let top = Pose::from(&Isometry3::from_parts(Translation3::from(centre), rot));
                out.push(cube(
                    top,
                    2.0 * r,
                    2.0 * r,
                    0.0005,
                    rgba(0.05, 0.05, 0.05, 1.0),
                ));
            }
            out
        };
        match kind {
            "plane" => {
                if let (Some(p), Some(n)) = (v3(&s["point_m"]), n) {
                    e.cubes.extend(slab(p + off, n, 0.02, None));
                }
            }
            "plate_with_hole" => {
                if let (Some(p), Some(n)) = (v3(&s["hole_center_m"]), n) {
                    let th = s["thickness_m"].as_f64().unwrap_or(0.01);
                    e.cubes
                        .extend(slab(p + off, n, th, s["hole_radius_m"].as_f64()));
                }
            }
            "box" => {
                if let (Some(lo), Some(hi)) = (v3(&s["min_m"]), v3(&s["max_m"])) {
                    let c = (lo + hi) / 2.0 + off;
                    let d = hi - lo;
                    e.cubes
                        .push(cube(at(c.x, c.y, c.z), d.x, d.y, d.z, SURFACE));
                }
            }
            "sphere" => {
                if let (Some(c), Some(r)) = (v3(&s["center_m"]), s["radius_m"].as_f64()) {
                    let c = c + off;
                    e.spheres.push(SpherePrimitive {
                        pose: at(c.x, c.y, c.z),
                        size: Vector3::new(2.0 * r, 2.0 * r, 2.0 * r).into(),
                        color: SURFACE,
                    });
                }
            }
            "cylinder" => {
                let axis = v3(&s["axis"]).filter(|a| a.norm() > 1e-9);
                if let (Some(p), Some(a), Some(r)) =
                    (v3(&s["point_m"]), axis, s["radius_m"].as_f64())
                {
                    let rot = UnitQuaternion::rotation_between(&Vector3::z(), &a.normalize())
                        .unwrap_or_else(UnitQuaternion::identity);
                    let pose = Pose::from(&Isometry3::from_parts(Translation3::from(p + off), rot));
                    e.cylinders.push(cylinder(pose, 2.0 * r, 1.0, SURFACE));
                }
            }
            _ => {}
        }
        e.metadata.push(KeyValuePair {
            key: format!("surface.{i}"),
            value: format!(
                "{} ({kind}, {} N/m)",
                s["name"].as_str().unwrap_or("?"),
                s["stiffness_n_per_m"]
            ),
        });
    }
    SceneUpdate {
        deletions: vec![],
        entities: vec![e],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frames_are_the_kinematics_librarys() {
        let arm = Arm::irb120();
        let q = [0.3, -0.4, 0.5, 1.0, -0.7, 2.0];
        let tfs = transforms(&arm, &q, 1_000, None).expect("finite");
        let links = arm.link_frames(&q).expect("finite");
        for (l, name) in links.iter().zip(LINK_NAMES) {
            let t = tfs
                .transforms
                .iter()
                .find(|t| t.child_frame_id == name)
                .expect("every link");
            assert_eq!(t.parent_frame_id, BASE);
            let p = l.translation.vector;
            assert!(
                (Vector3::new(t.translation.x, t.translation.y, t.translation.z) - p).norm()
                    < 1e-12
            );
            let r = t.rotation;
            let q2 = UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(r.w, r.x, r.y, r.z));
            assert!(q2.angle_to(&l.rotation) < 1e-12);
        }
        let tcp = tfs
            .transforms
            .iter()
            .find(|t| t.child_frame_id == "tcp")
            .expect("tcp");
        let fk = arm.fk(&q).expect("finite").translation.vector;
        assert!(
            (Vector3::new(tcp.translation.x, tcp.translation.y, tcp.translation.z) - fk).norm()
                < 1e-12
        );
        assert!(transforms(&arm, &[f64::NAN; 6], 0, None).is_none());
    }

    #[test]
    fn the_force_arrow_points_along_the_force_at_the_tcp() {
        let arm = Arm::irb120();
        let q = [0.0, 0.2, 0.1, 0.0, 0.5, 0.0];
        let s = arm_scene(&arm, &q, 5, Some([0.0, 0.0, -20.0]));
        let e = s
            .entities
            .iter()
            .find(|e| e.id == "force/arrow")
            .expect("arrow entity");
        let a = &e.arrows[0];
        let tcp = arm.fk(&q).expect("finite").translation.vector;
        assert!(
            (Vector3::new(a.pose.position.x, a.pose.position.y, a.pose.position.z) - tcp).norm()
                < 1e-12
        );
        let o = a.pose.orientation;
        let rot = UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(o.w, o.x, o.y, o.z));
        assert!((rot * Vector3::x() - Vector3::new(0.0, 0.0, -1.0)).norm() < 1e-9);
        assert!((a.shaft_length + a.head_length - 20.0 * ARROW_M_PER_N).abs() < 1e-12);
        // No force: no arrow.
        let s = arm_scene(&arm, &q, 5, Some([0.0; 3]));
        assert!(s
            .entities
            .iter()
            .all(|e| e.id != "force/arrow" || e.arrows.is_empty()));
    }

    #[test]
    fn surfaces_come_from_the_scenario_summary() {
        let summary = serde_json::json!({
            "config": {"surfaces": [
                {"name": "table", "kind": "plane", "point_m": [0.4, 0.0, 0.2], "normal": [0, 0, 1], "stiffness_n_per_m": 1e5},
                {"name": "b", "kind": "box", "min_m": [0, 0, 0], "max_m": [0.1, 0.2, 0.3], "stiffness_n_per_m": 1e5},
            ]},
            "surfaces": [{"offset_m": [0.0, 0.0, 0.01]}, {"offset_m": [0, 0, 0]}],
        });
        let s = world_scene(&summary, 0);
        let e = &s.entities[0];
        assert_eq!(e.cubes.len(), 2);
        // The table's top face at z = 0.21 (offset), the slab 2 cm under it.
        assert!((e.cubes[0].pose.position.z - (0.21 - 0.01)).abs() < 1e-12);
        assert!((e.cubes[1].size.z - 0.3).abs() < 1e-12);
    }
}
