#![allow(clippy::unwrap_used, clippy::needless_range_loop)]
//! Straight-line Cartesian paths sampled at 4 ms (EGM rate) through and near the wrist
//! singularity (q5 = 0).
//!
//! * Through the singularity: `ik_step` (nearest solution + speed check) never moves a joint
//!   faster than its limit, q5 really changes sign, q4 is held at the singular sample, every
//!   solution reproduces its pose; a naive fixed-branch IK on the same path jumps by ~π.
//! * Near the singularity (the line misses it by 0.1 mm): the exact IK would need a q4/q6
//!   flip far above the speed limits; `ik_step` flags exactly those steps, and the documented
//!   fallback (`servo_step_dls`) keeps every joint within its speed limit and re-converges to
//!   the path afterwards.

mod common;
use common::*;
use kinematics::{Arm, IkFlags, Joints};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

const DT: f64 = 0.004;

fn arm_with_tool() -> Arm {
    let mut arm = Arm::irb120();
    arm.set_tool(Isometry3::from_parts(
        Translation3::new(0.0, 0.0, 0.10),
        UnitQuaternion::identity(),
    ))
    .unwrap();
    arm
}

/// Singular configuration and the TCP pose there.
fn singular_start(arm: &Arm) -> (Joints, Isometry3<f64>) {
    let qs = [0.3, 0.2, -0.4, 0.5, 0.0, 0.7];
    (qs, arm.fk(&qs).unwrap())
}

/// Pose on the line through `p0 + offset` with direction `dir` (m/s) at time t, fixed
/// orientation.
fn on_line(
    p0: &Isometry3<f64>,
    dir: &Vector3<f64>,
    offset: &Vector3<f64>,
    t: f64,
) -> Isometry3<f64> {
    let mut p = *p0;
    p.translation.vector += offset + dir * t;
    p
}

fn step_within_speed(arm: &Arm, a: &Joints, b: &Joints) -> bool {
    (0..6).all(|j| (b[j] - a[j]).abs() <= arm.limits().max_speed[j] * DT * (1.0 + 1e-9))
}

/// Runs `ik_step` along the line; returns the joint trajectory and flags.
fn run_ik(
    arm: &Arm,
    p0: &Isometry3<f64>,
    dir: &Vector3<f64>,
    t_shift: f64,
) -> Vec<(Joints, IkFlags, f64)> {
    let n = 125i32; // ±0.5 s = ±5 cm
    let start = on_line(p0, dir, &Vector3::zeros(), -(n as f64) * DT + t_shift);
    // Initial joints: the nearest solution to a configuration with q5 > 0 on this branch.
    let mut q = arm
        .ik_nearest(&start, &[0.3, 0.2, -0.4, 0.5, 0.3, 0.7])
        .unwrap()
        .q;
    let mut out = Vec::new();
    for k in -n..=n {
        let t = k as f64 * DT + t_shift;
        let target = on_line(p0, dir, &Vector3::zeros(), t);
        let s = arm.ik_step(&target, &q, DT).unwrap();
        let (dp, dr) = pose_dist(&arm.fk(&s.q).unwrap(), &target);
        assert!(
            dp < 1e-9 && dr < 1e-9,
            "pose error {dp} m {dr} rad at t={t}"
        );
        assert!(arm.limits().contains(&s.q));
        q = s.q;
        out.push((s.q, s.flags, t));
    }
    out
}

#[test]
fn line_through_wrist_singularity_keeps_joint_steps_within_speed_limits() {
    let arm = arm_with_tool();
    let (qs, p0) = singular_start(&arm);
    assert_eq!(qs[4], 0.0);
    // 0.1 m/s in a generic direction.
    let dir = Vector3::new(0.3, -0.5, 0.4).normalize() * 0.1;
    // t_shift = 0: the singular pose is sampled exactly; otherwise it falls between samples.
    for t_shift in [0.0, 0.0013, -0.0021] {
        let traj = run_ik(&arm, &p0, &dir, t_shift);
        let mut pos = 0;
        let mut neg = 0;
        let mut max_ratio: f64 = 0.0;
        for w in traj.windows(2) {
            let (a, b) = (&w[0].0, &w[1].0);
            assert!(
                step_within_speed(&arm, a, b),
                "joint step too fast at t={}: {:?} -> {:?}",
                w[1].2,
                a,
                b
            );
            assert!(!w[1].1.contains(IkFlags::SPEED_LIMIT_EXCEEDED));
            max_ratio = max_ratio.max(arm.min_move_time(a, b) / DT);
        }
        for (q, _, _) in &traj {
            if q[4] > 1e-6 {
                pos += 1;
            } else if q[4] < -1e-6 {
                neg += 1;
            }
        }
        // q5 really crosses zero (meaningful path): many samples on each side.
        assert!(pos > 50 && neg > 50, "q5 does not cross 0: {pos} / {neg}");
        // The samples closest to the crossing are flagged near-singular.
        assert!(traj
            .iter()
            .any(|(_, f, _)| f.contains(IkFlags::NEAR_WRIST_SINGULAR)));
        if t_shift == 0.0 {
            // The singular sample itself: q4 held (lock), q6 absorbs the sum.
            let (q, f, _) = traj[125];
            assert!(f.contains(IkFlags::WRIST_LOCKED), "{f:?}");
            assert_eq!(q[3], traj[124].0[3]);
        }
        println!("t_shift {t_shift}: max speed ratio {max_ratio:.3}");
        assert!(
            max_ratio < 0.5,
            "path should be comfortably feasible, ratio {max_ratio}"
        );
    }

    // The same path through a naive fixed-branch IK (always branch of the start) flips the
    // wrist by π at the crossing: that is the jump the library avoids.
    let start = on_line(&p0, &dir, &Vector3::zeros(), -0.5 + 0.0013);
    let q0 = arm
        .ik_nearest(&start, &[0.3, 0.2, -0.4, 0.5, 0.3, 0.7])
        .unwrap();
    let mut prev = q0.q;
    let mut naive_jump: f64 = 0.0;
    for k in -125..=125 {
        let target = on_line(&p0, &dir, &Vector3::zeros(), k as f64 * DT + 0.0013);
        let sols = arm.ik(&target).unwrap();
        let q = sols.branches[q0.branch as usize].q;
        if q.iter().all(|v| v.is_finite()) {
            naive_jump = naive_jump.max((q[3] - prev[3]).abs());
            prev = q;
        }
    }
    assert!(
        naive_jump > 3.0,
        "naive branch tracking should flip q4, got {naive_jump}"
    );
}

#[test]
fn line_near_wrist_singularity_is_flagged_and_dls_fallback_stays_within_limits() {
    let arm = arm_with_tool();
    let (_, p0) = singular_start(&arm);
    let dir = Vector3::new(0.3, -0.5, 0.4).normalize() * 0.1;
    // Miss the singular pose by 0.1 mm, perpendicular to the motion.
    let offset = dir.cross(&Vector3::z()).normalize() * 1e-4;
    let n = 125i32;
    let hold = 300; // then hold the final target for 1.2 s
    let start = on_line(&p0, &dir, &offset, -(n as f64) * DT);
    let mut q = arm
        .ik_nearest(&start, &[0.3, 0.2, -0.4, 0.5, 0.3, 0.7])
        .unwrap()
        .q;
    let mut q_exact = q;
    let mut flagged = 0;
    let mut exact_worst_ratio: f64 = 0.0;
    let mut worst_lag = (0.0f64, 0.0f64);
    let mut fallback_steps = 0;
    let mut last_error = (0.0, 0.0);
    for k in -n..=(n + hold) {
        let target = on_line(&p0, &dir, &offset, k.min(n) as f64 * DT);
        // The exact IK along the path (what a pure IK streamer would command).
        let e = arm.ik_step(&target, &q_exact, DT).unwrap();
        exact_worst_ratio = exact_worst_ratio.max(e.speed_ratio.unwrap());
        assert_eq!(
            e.flags.contains(IkFlags::SPEED_LIMIT_EXCEEDED),
            !step_within_speed(&arm, &q_exact, &e.q),
            "flag must be set exactly when the step exceeds max_speed·dt"
        );
        q_exact = e.q;
        // The controller as documented: IK when the step is feasible, DLS fallback otherwise.
        let s = arm.ik_step(&target, &q, DT).unwrap();
        let next = if s.flags.contains(IkFlags::SPEED_LIMIT_EXCEEDED) {
            flagged += 1;
            fallback_steps += 1;
            let st = arm.servo_step_dls(&q, &target, DT).unwrap();
            assert!(st.dls.scale <= 1.0);
            st.q_next
        } else {
            s.q
        };
        assert!(
            step_within_speed(&arm, &q, &next),
            "commanded step too fast at k={k}"
        );
        assert!(arm.limits().contains(&next));
        q = next;
        let (dp, dr) = pose_dist(&arm.fk(&q).unwrap(), &target);
        worst_lag = (worst_lag.0.max(dp), worst_lag.1.max(dr));
        last_error = (dp, dr);
    }
    println!(
        "near miss: exact IK worst speed ratio {exact_worst_ratio:.1}, {fallback_steps} fallback steps, worst lag {:.2e} m / {:.2e} rad",
        worst_lag.0,
        worst_lag.1
    );
    // The exact solution really is infeasible near the singularity (meaningful test) ...
    assert!(exact_worst_ratio > 10.0);
    assert!(flagged > 0);
    // ... and the fallback re-converges to the target.
    assert!(last_error.0 < 1e-9 && last_error.1 < 1e-9, "{last_error:?}");
}
