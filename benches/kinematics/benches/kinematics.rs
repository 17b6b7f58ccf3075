//! Criterion benchmarks: FK, IK (all branches), Jacobian and DLS step of this crate, with the
//! same poses through `rs-opw-kinematics` (IRB 120 preset) and the `k` crate (URDF chain,
//! numeric Jacobian IK).
//!
//! Run: `cargo bench --manifest-path benches/kinematics/Cargo.toml -- --warm-up-time 1 --measurement-time 3`
//! (its own workspace and target directory: the comparison crates stay out of the cell's build)
#![allow(clippy::needless_range_loop)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use kinematics::{Arm, JacobianFrame, Joints, Twist};
use nalgebra::{Isometry3, Vector3};
use rs_opw_kinematics::constraints::{Constraints, BY_PREV};
use rs_opw_kinematics::glam::{DQuat, DVec3};
use rs_opw_kinematics::kinematic_traits::Kinematics;
use rs_opw_kinematics::kinematics_impl::OPWKinematics;
use rs_opw_kinematics::parameters::opw_kinematics::Parameters;
use rs_opw_kinematics::pose::Pose as OpwPose;

const N: usize = 64;

/// Deterministic in-limit joint sets (SplitMix64).
fn joint_sets(arm: &Arm) -> Vec<Joints> {
    let mut s: u64 = 0xC0FFEE;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let l = arm.limits();
    (0..N)
        .map(|_| {
            let mut q = [0.0; 6];
            for j in 0..6 {
                // stay 0.1 rad inside the limits
                q[j] = l.min[j] + 0.1 + (l.max[j] - l.min[j] - 0.2) * next();
            }
            q
        })
        .collect()
}

fn to_opw(p: &Isometry3<f64>) -> OpwPose {
    let t = p.translation.vector;
    let q = p.rotation.quaternion();
    OpwPose::from_parts(
        DVec3::new(t.x, t.y, t.z),
        DQuat::from_xyzw(q.i, q.j, q.k, q.w),
    )
}

fn k_chain(arm: &Arm) -> k::SerialChain<f64> {
    use k::nalgebra as kna;
    use k::{JointType, NodeBuilder};
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
    let nodes: Vec<k::Node<f64>> = (0..6)
        .map(|i| {
            let o = origins[i];
            NodeBuilder::new()
                .name(&format!("joint_{}", i + 1))
                .translation(kna::Translation3::new(o[0], o[1], o[2]))
                .joint_type(JointType::Rotational { axis: axes[i] })
                .limits(Some(k::joint::Range::new(l.min[i], l.max[i])))
                .into_node()
        })
        .collect();
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

fn to_k(p: &Isometry3<f64>) -> k::nalgebra::Isometry3<f64> {
    let t = p.translation.vector;
    let q = p.rotation.quaternion();
    k::nalgebra::Isometry3::from_parts(
        k::nalgebra::Translation3::new(t.x, t.y, t.z),
        k::nalgebra::UnitQuaternion::from_quaternion(k::nalgebra::Quaternion::new(
            q.w, q.i, q.j, q.k,
        )),
    )
}

fn benches(c: &mut Criterion) {
    let arm = Arm::irb120();
    let qs = joint_sets(&arm);
    let poses: Vec<Isometry3<f64>> = qs.iter().map(|q| arm.fk_tool0(q).expect("fk")).collect();
    let opw_poses: Vec<OpwPose> = poses.iter().map(to_opw).collect();
    let opw = OPWKinematics::new(Parameters::irb120_3_58());
    let l = arm.limits();
    let opw_limited = OPWKinematics::new_with_constraints(
        Parameters::irb120_3_58(),
        Constraints::new(l.min, l.max, BY_PREV),
    );
    let chain = k_chain(&arm);

    // Sanity: the three libraries agree on FK for the bench poses.
    for (q, p) in qs.iter().zip(&poses) {
        let o = opw.forward(q);
        let d = (o.translation - DVec3::new(p.translation.x, p.translation.y, p.translation.z))
            .length();
        assert!(d < 1e-9, "rs-opw FK differs by {d}");
        chain.set_joint_positions(q).expect("k limits");
        chain.update_transforms();
        let kt = chain.end_transform().translation.vector;
        assert!((kt.x - p.translation.x).abs() < 1e-9 && (kt.z - p.translation.z).abs() < 1e-9);
    }

    let mut g = c.benchmark_group("fk");
    let mut i = 0;
    g.bench_function("ours fk_tool0", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(arm.fk_tool0(black_box(&qs[i])))
        })
    });
    g.bench_function("rs-opw forward", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(opw.forward(black_box(&qs[i])))
        })
    });
    g.bench_function("k set+update+end_transform", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            chain.set_joint_positions_unchecked(black_box(&qs[i]));
            chain.update_transforms();
            black_box(chain.end_transform())
        })
    });
    g.finish();

    let mut g = c.benchmark_group("ik");
    g.bench_function("ours ik_tool0 (8 branches + limits)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(arm.ik_tool0(black_box(&poses[i])))
        })
    });
    g.bench_function("ours ik_nearest", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(arm.ik_nearest(black_box(&poses[i]), &qs[i]))
        })
    });
    g.bench_function("rs-opw inverse (all branches, no limits)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(opw.inverse(black_box(&opw_poses[i])))
        })
    });
    g.bench_function("rs-opw inverse (with joint limits)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(opw_limited.inverse(black_box(&opw_poses[i])))
        })
    });
    g.bench_function("rs-opw inverse_continuing", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(opw_limited.inverse_continuing(black_box(&opw_poses[i]), &qs[i]))
        })
    });
    // k: numeric IK from a start 0.05 rad away on every joint (one solution only).
    let k_targets: Vec<_> = poses.iter().map(to_k).collect();
    let solver = k::JacobianIkSolver::new(1e-6, 1e-6, 0.5, 100);
    let mut k_fail = 0usize;
    g.bench_function("k JacobianIkSolver (1 solution, numeric)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            let mut start = qs[i];
            for v in start.iter_mut() {
                *v += 0.05;
            }
            chain.set_joint_positions_unchecked(&start);
            use k::InverseKinematicsSolver;
            if solver.solve(&chain, black_box(&k_targets[i])).is_err() {
                k_fail += 1;
            }
        })
    });
    g.finish();
    if k_fail > 0 {
        eprintln!("note: k solver did not converge in {k_fail} iterations");
    }

    let mut g = c.benchmark_group("jacobian");
    g.bench_function("ours analytic (base)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(arm.jacobian(black_box(&qs[i]), JacobianFrame::Base))
        })
    });
    g.bench_function("rs-opw Jacobian::new (finite differences)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(rs_opw_kinematics::jacobian::Jacobian::new(
                &opw,
                black_box(&qs[i]),
                1e-6,
            ))
        })
    });
    g.bench_function("k jacobian (after set+update)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            chain.set_joint_positions_unchecked(black_box(&qs[i]));
            chain.update_transforms();
            black_box(k::jacobian(&chain))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("dls");
    let twist = Twist::new(Vector3::new(0.1, -0.05, 0.02), Vector3::new(0.2, 0.0, -0.1));
    g.bench_function("ours joint_velocity_dls (J + SVD + scaling)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(arm.joint_velocity_dls(black_box(&qs[i]), &twist))
        })
    });
    g.bench_function("ours servo_step_dls (FK + error + DLS + integrate)", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(arm.servo_step_dls(black_box(&qs[i]), &poses[(i + 1) % N], 0.004))
        })
    });
    g.finish();
}

criterion_group!(kin, benches);
criterion_main!(kin);
