//! Cartesian command → joint command, one robot cycle at a time. Pure: `dt` is a parameter.
//!
//! Each cycle starts from the joints commanded last cycle (continuity of the reference), or
//! from the measured joints when there is no previous command or the robot has not followed it.
//! A pose target goes through the closed-form IK (nearest branch); when that step would exceed a
//! joint speed limit (a pass near a wrist singularity, or a jump in the target) the reference
//! moves in joint space towards that exact solution at the speed limits, direction kept (the
//! path deviates briefly, like ABB's `SingArea\Wrist`, and never stalls). A twist target goes
//! through damped least squares directly. Every
//! output is finite, inside the joint limits, within the speed limits, and flagged.

use nalgebra::Isometry3;

use crate::{dls::scale_to_speed_limits, ik::IkFlags, Arm, Joints, KinError, Twist};

/// What the cycle asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServoTarget {
    /// Stay at the reference.
    Hold,
    /// TCP pose in base.
    Pose(Isometry3<f64>),
    /// TCP twist in base axes, applied for `dt`.
    Twist(Twist),
}

/// Flags of one cycle's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServoFlags {
    pub unreachable: bool,
    pub near_singular: bool,
    pub position_limited: bool,
    pub speed_limited: bool,
}

/// One cycle's joint reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServoOutput {
    pub q: Joints,
    pub qd: Joints,
    pub flags: ServoFlags,
}

/// One cycle's inputs.
#[derive(Debug, Clone, Copy)]
pub struct ServoInput<'a> {
    pub q_measured: &'a Joints,
    pub target: &'a ServoTarget,
    /// Robot cycle (s).
    pub dt: f64,
    /// Time since the previous call (s).
    pub since_last_s: f64,
    /// The robot cycle (joint-state counter) the command was computed from. Several commands
    /// for the same cycle replace each other instead of adding up: the reference never runs
    /// ahead of the robot by more than one step per cycle.
    pub cycle: u64,
}

/// Explicit state: the last commanded joints.
#[derive(Debug, Clone)]
pub struct Servo {
    arm: Arm,
    last: Option<Joints>,
    /// The base the last output was computed from, and its cycle.
    last_base: Option<(u64, Joints)>,
    /// If no command was computed for longer than this (s), the stream was interrupted:
    /// restart from the measurement.
    pub resync_after_s: f64,
}

impl Servo {
    pub fn new(arm: Arm) -> Self {
        Self {
            arm,
            last: None,
            last_base: None,
            resync_after_s: 0.05,
        }
    }

    pub fn arm(&self) -> &Arm {
        &self.arm
    }

    /// Forgets the last command (next cycle starts from the measurement).
    pub fn reset(&mut self) {
        self.last = None;
        self.last_base = None;
    }

    /// Computes this cycle's joint reference.
    pub fn step(&mut self, input: &ServoInput) -> ServoOutput {
        let ServoInput {
            q_measured,
            target,
            dt,
            since_last_s,
            cycle,
        } = *input;
        let measured_ok = q_measured.iter().all(|v| v.is_finite());
        let fresh = since_last_s.is_finite() && since_last_s <= self.resync_after_s;
        let previous = match self.last_base {
            // Another command for the cycle already served: redo that cycle's step.
            Some((c, b)) if c == cycle && fresh => Some(b),
            _ => self.last,
        };
        // Continue from the last command while the stream is fresh, however far the robot lags
        // (robot-io limits speed and acceleration itself, so a fast reference legitimately
        // leads the measurement); restart from the measurement after a pause.
        let base = match previous {
            Some(l) if fresh || !measured_ok => l,
            _ if measured_ok => *q_measured,
            _ => {
                // Neither a previous command nor a usable measurement: nothing safe to say.
                return ServoOutput {
                    q: [0.0; 6],
                    qd: [0.0; 6],
                    flags: ServoFlags {
                        unreachable: true,
                        ..Default::default()
                    },
                };
            }
        };
        self.last_base = Some((cycle, base));
        let mut flags = ServoFlags::default();
        let dt = if dt.is_finite() && dt > 0.0 {
            dt
        } else {
            0.004
        };
        let q = match target {
            ServoTarget::Hold => base,
            ServoTarget::Pose(p) => match self.arm.ik_step(p, &base, dt) {
                Ok(s) if !s.flags.contains(IkFlags::SPEED_LIMIT_EXCEEDED) => {
                    flags.near_singular = s.flags.near_singular();
                    s.q
                }
                Ok(s) => {
                    // Too fast for one cycle (a near-singular pass, or a jump in the target):
                    // move in joint space towards the nearest exact solution at the speed
                    // limits, direction kept. Converges to the exact pose without stalling.
                    flags.speed_limited = true;
                    flags.near_singular = s.flags.near_singular();
                    self.joint_step_towards(&base, &s.q, dt)
                }
                Err(KinError::Unreachable) | Err(KinError::OutOfLimits) => {
                    flags.unreachable = true;
                    base
                }
                Err(_) => {
                    flags.unreachable = true;
                    base
                }
            },
            ServoTarget::Twist(t) => match self.arm.joint_velocity_dls(&base, t) {
                Ok(r) => {
                    flags.near_singular = r.flags.damped;
                    flags.speed_limited = r.flags.speed_scaled;
                    let lim = self.arm.limits();
                    let mut q = base;
                    for j in 0..6 {
                        let next = base[j] + r.qdot[j] * dt;
                        let c = next.clamp(lim.min[j], lim.max[j]);
                        if c != next {
                            flags.position_limited = true;
                        }
                        q[j] = c;
                    }
                    q
                }
                Err(_) => {
                    flags.unreachable = true;
                    base
                }
            },
        };
        let mut qd = [0.0; 6];
        for j in 0..6 {
            qd[j] = (q[j] - base[j]) / dt;
        }
        self.last = Some(q);
        ServoOutput { q, qd, flags }
    }

    fn joint_step_towards(&self, base: &Joints, goal: &Joints, dt: f64) -> Joints {
        let mut qdot = [0.0; 6];
        for j in 0..6 {
            qdot[j] = (goal[j] - base[j]) / dt;
        }
        let (scaled, _) = scale_to_speed_limits(&qdot, &self.arm.limits().max_speed);
        let mut q = *base;
        for j in 0..6 {
            q[j] += scaled[j] * dt;
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static CYCLE: AtomicU64 = AtomicU64::new(1);
    fn next_cycle() -> u64 {
        CYCLE.fetch_add(1, Ordering::Relaxed)
    }
    use nalgebra::{Translation3, UnitQuaternion, Vector3};

    fn within_speed(arm: &Arm, a: &Joints, b: &Joints, dt: f64) -> bool {
        (0..6).all(|j| (a[j] - b[j]).abs() <= arm.limits().max_speed[j] * dt * (1.0 + 1e-9))
    }

    #[test]
    fn line_through_wrist_singularity_respects_speed_limits() {
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        // Start with q5 slightly positive; move the TCP along a line that makes q5 cross 0.
        let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.2, 0.0];
        let p0 = arm.fk(&q0).expect("fk");
        let q1: Joints = [0.0, 0.25, 0.05, 0.3, -0.2, 0.0];
        let p1 = arm.fk(&q1).expect("fk");
        let dt = 0.004;
        let n = 500;
        let mut q_meas = q0;
        let mut crossed_sign = false;
        for k in 0..=n {
            let s = k as f64 / n as f64;
            let t = p0.translation.vector.lerp(&p1.translation.vector, s);
            let r = p0.rotation.slerp(&p1.rotation, s);
            let target = Isometry3::from_parts(Translation3::from(t), r);
            let out = servo.step(&ServoInput {
                q_measured: &q_meas,
                target: &ServoTarget::Pose(target),
                dt,
                since_last_s: dt,
                cycle: next_cycle(),
            });
            assert!(
                within_speed(&arm, &q_meas, &out.q, dt),
                "step {k}: {:?} → {:?}",
                q_meas,
                out.q
            );
            assert!(arm.limits().contains(&out.q));
            if out.q[4].signum() != q_meas[4].signum() {
                crossed_sign = true;
            }
            q_meas = out.q;
        }
        assert!(
            crossed_sign || q_meas[4].abs() < 0.05,
            "path should reach the wrist singularity"
        );
        // It gets to the end (a few more hold cycles allowed for DLS lag).
        for _ in 0..200 {
            q_meas = servo
                .step(&ServoInput {
                    q_measured: &q_meas,
                    target: &ServoTarget::Pose(p1),
                    dt,
                    since_last_s: dt,
                    cycle: next_cycle(),
                })
                .q;
        }
        let reached = arm.fk(&q_meas).expect("fk");
        assert!((reached.translation.vector - p1.translation.vector).norm() < 1e-3);
    }

    #[test]
    fn continues_from_last_command_despite_lag_but_resyncs_after_a_pause() {
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q0: Joints = [0.0, 0.0, 0.0, 0.0, 0.5, 0.0];
        let p = arm.fk(&[0.0, 0.0, 0.0, 0.0, 0.6, 0.0]).expect("fk");
        let a = servo.step(&ServoInput {
            q_measured: &q0,
            target: &ServoTarget::Pose(p),
            dt: 0.004,
            since_last_s: f64::INFINITY,
            cycle: next_cycle(),
        });
        // The robot lags (measured still q0): the next step continues from the last command.
        let b = servo.step(&ServoInput {
            q_measured: &q0,
            target: &ServoTarget::Pose(p),
            dt: 0.004,
            since_last_s: 0.004,
            cycle: next_cycle(),
        });
        assert!(within_speed(&arm, &a.q, &b.q, 0.004));
        // A second command for the same robot cycle replaces the step instead of adding one.
        let cyc = next_cycle();
        let p2 = arm.fk(&[0.0, 0.0, 0.0, 0.0, 0.9, 0.0]).expect("fk");
        let d1 = servo.step(&ServoInput {
            q_measured: &q0,
            target: &ServoTarget::Pose(p2),
            dt: 0.004,
            since_last_s: 0.004,
            cycle: cyc,
        });
        let d2 = servo.step(&ServoInput {
            q_measured: &q0,
            target: &ServoTarget::Pose(p2),
            dt: 0.004,
            since_last_s: 0.001,
            cycle: cyc,
        });
        assert_eq!(d1.q, d2.q);
        // After a pause in the stream it restarts from the measurement.
        let c = servo.step(&ServoInput {
            q_measured: &q0,
            target: &ServoTarget::Hold,
            dt: 0.004,
            since_last_s: 1.0,
            cycle: next_cycle(),
        });
        assert_eq!(c.q, q0);
    }

    #[test]
    fn unreachable_holds_and_flags() {
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm);
        let q0: Joints = [0.0, 0.0, 0.0, 0.0, 0.5, 0.0];
        let far =
            Isometry3::from_parts(Translation3::new(3.0, 0.0, 0.5), UnitQuaternion::identity());
        let out = servo.step(&ServoInput {
            q_measured: &q0,
            target: &ServoTarget::Pose(far),
            dt: 0.004,
            since_last_s: 0.004,
            cycle: next_cycle(),
        });
        assert!(out.flags.unreachable);
        assert_eq!(out.q, q0);
        assert_eq!(out.qd, [0.0; 6]);
    }

    #[test]
    fn twist_moves_tcp_and_is_speed_limited() {
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q0: Joints = [0.0, 0.0, 0.0, 0.0, 0.5, 0.0];
        let p0 = arm.fk(&q0).expect("fk");
        let slow = ServoTarget::Twist(Twist::new(Vector3::new(0.0, 0.0, 0.1), Vector3::zeros()));
        let out = servo.step(&ServoInput {
            q_measured: &q0,
            target: &slow,
            dt: 0.004,
            since_last_s: 0.004,
            cycle: next_cycle(),
        });
        let p1 = arm.fk(&out.q).expect("fk");
        let dz = p1.translation.vector.z - p0.translation.vector.z;
        assert!((dz - 0.0004).abs() < 2e-5, "dz {dz}");
        let quick = ServoTarget::Twist(Twist::new(Vector3::new(0.0, 0.0, 100.0), Vector3::zeros()));
        let fast = servo.step(&ServoInput {
            q_measured: &out.q,
            target: &quick,
            dt: 0.004,
            since_last_s: 0.004,
            cycle: next_cycle(),
        });
        assert!(fast.flags.speed_limited);
        assert!(within_speed(&arm, &out.q, &fast.q, 0.004));
    }
}
