//! FK against an independent implementation: the IRB 120 as a URDF chain in the `k` crate.
//! Here, beside the comparison bench, so `k` and its URDF stack stay out of the cell's
//! per-change build; run by `.ci/full` (`cargo test --manifest-path benches/kinematics/Cargo.toml`).
//! The per-change tier keeps FK against the DH convention (services/kinematics/tests/fk.rs).
#![allow(clippy::needless_range_loop)]

#[path = "../../../services/kinematics/tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use common::*;
use kinematics::Arm;
use nalgebra::{Isometry3, Translation3, UnitQuaternion};

/// IRB 120 as a `k` serial chain from the ROS-Industrial `irb120_3_58_macro.xacro` joint
/// origins (irb120.md §1.1), with a fixed `tool0` = link_6 · Ry(+90°).
pub fn k_chain_irb120() -> k::SerialChain<f64> {
    use k::nalgebra as kna;
    use k::{JointType, NodeBuilder};
    let arm = Arm::irb120();
    let l = arm.limits();
    let origins = [
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.29],
        [0.0, 0.0, 0.27],
        [0.0, 0.0, 0.07],
        [0.302, 0.0, 0.0],
        [0.072, 0.0, 0.0],
    ];
    let axes = [
        kna::Vector3::z_axis(),
        kna::Vector3::y_axis(),
        kna::Vector3::y_axis(),
        kna::Vector3::x_axis(),
        kna::Vector3::y_axis(),
        kna::Vector3::x_axis(),
    ];
    let mut nodes: Vec<k::Node<f64>> = Vec::new();
    for i in 0..6 {
        let o = origins[i];
        nodes.push(
            NodeBuilder::new()
                .name(&format!("joint_{}", i + 1))
                .translation(kna::Translation3::new(o[0], o[1], o[2]))
                .joint_type(JointType::Rotational { axis: axes[i] })
                .limits(Some(k::joint::Range::new(l.min[i], l.max[i])))
                .into_node(),
        );
    }
    let tool0: k::Node<f64> = NodeBuilder::new()
        .name("tool0")
        .rotation(kna::UnitQuaternion::from_euler_angles(
            0.0,
            std::f64::consts::FRAC_PI_2,
            0.0,
        ))
        .joint_type(JointType::Fixed)
        .into_node();
    for i in 1..6 {
        nodes[i].set_parent(&nodes[i - 1]);
    }
    tool0.set_parent(&nodes[5]);
    k::SerialChain::from_end(&tool0)
}

/// Converts a k (nalgebra 0.30) isometry into ours.
pub fn from_k_iso(p: &k::nalgebra::Isometry3<f64>) -> Isometry3<f64> {
    let t = p.translation.vector;
    let q = p.rotation.quaternion();
    Isometry3::from_parts(
        Translation3::new(t.x, t.y, t.z),
        UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(q.w, q.i, q.j, q.k)),
    )
}

#[test]
fn fk_matches_urdf_chain_in_k() {
    let arm = Arm::irb120();
    let chain = k_chain_irb120();
    let mut rng = Rng::new(99);
    let mut worst_mm: f64 = 0.0;
    for _ in 0..2_000 {
        let q = random_joints(&mut rng, &arm, 0.0);
        chain.set_joint_positions(&q).unwrap();
        chain.update_transforms();
        let kp = from_k_iso(&chain.end_transform());
        let ours = arm.fk_tool0(&q).unwrap();
        let (dp, dr) = pose_dist(&kp, &ours);
        worst_mm = worst_mm.max(dp * 1e3);
        assert!(dr < 1e-7, "rotation differs by {dr} rad at {q:?}");
    }
    assert!(worst_mm < 1e-9, "worst {worst_mm} mm");
}
