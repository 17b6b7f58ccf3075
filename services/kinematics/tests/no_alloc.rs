//! The per-cycle path of the kinematics library allocates nothing: FK, the tool pose message,
//! the Jacobian and the servo step (twist, pose and joint targets), as run every robot cycle
//! by the kinematics service and by control's direct chain. Counted with a global allocator.
#![cfg(feature = "node")]

use common::testing::{allocations_in, CountingAlloc};
use kinematics::{
    node::{servo_target, tool_pose, KinematicsConfig},
    servo::{Servo, ServoInput, ServoTarget},
    Arm,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn servo_step_fk_and_tool_pose_do_not_allocate() {
    let arm = Arm::irb120();
    let mut servo = Servo::with_params(arm.clone(), KinematicsConfig::default().servo_params());
    let mut q = [0.1, 0.3, 0.2, 0.0, 1.0, 0.0];
    let start = arm.fk(&q).expect("fk");
    let twist = common::msg::CartesianTarget::Twist {
        twist: common::msg::Twist {
            linear_m_s: [0.05, 0.0, -0.02],
            angular_rad_s: [0.0, 0.0, 0.1],
        },
    };
    let mut step = |q: &mut [f64; 6], target: &ServoTarget, cycle: u64| {
        let out = servo.step(&ServoInput {
            q_measured: q,
            target,
            dt: 0.004,
            since_last_s: 0.004,
            cycle,
        });
        *q = out.q;
        let js = common::msg::JointState {
            q_rad: *q,
            cycle,
            ..Default::default()
        };
        tool_pose(&arm, &js, common::msg::Stamp::default()).expect("tool pose")
    };
    // Warm-up (first-use paths).
    let pose_target = ServoTarget::Pose(start);
    for k in 0..10 {
        step(&mut q, &servo_target(&twist), k);
    }
    let ((), n) = allocations_in(|| {
        for k in 10..1010 {
            let t = match k % 3 {
                0 => servo_target(&twist),
                1 => ServoTarget::Joints([0.1, 0.3, 0.2, 0.0, 1.0, 0.0]),
                _ => pose_target,
            };
            let p = step(&mut q, &t, k);
            assert!(p.manipulability.is_finite());
        }
    });
    assert_eq!(n, 0, "{n} allocations in 1000 servo cycles");
}
