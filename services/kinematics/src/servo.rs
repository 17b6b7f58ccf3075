//! Cartesian command → joint command, one robot cycle at a time. Pure: `dt` is a parameter.
//!
//! # Where a cycle starts
//! Each cycle starts from the joints commanded last cycle (continuity of the reference) while
//! the command stream is fresh and the robot follows. It restarts from the **measured** joints
//! (flag `resynced`) on the first command, after a pause in the stream longer than
//! [`ServoParams::resync_after_s`], and when the robot has not followed: the last reference
//! leads the measurement by more than [`NOT_FOLLOWED_LEAD_RATIO`] × the lead bounds (the robot
//! was pushed away, or stopped on its own). Between 1 and that ratio (the robot backed off a
//! little, e.g. measurement noise while blocked) the last reference is pulled back onto the
//! bounds, towards the measured joints.
//!
//! # Lead bound
//! The reference never leads the measured robot by more than [`ServoParams`]'
//! `max_lead_joint_rad` on any joint, `max_lead_tcp_m` in TCP position and
//! `max_lead_tcp_rad` in TCP orientation. A step that would go beyond is held back along its
//! own direction to the farthest point within the bounds (flags `lead_limited` and
//! `speed_limited`). So a robot that lags (an EGM servo lags several cycles; a reduced-speed
//! robot, or one that is blocked or held, does not follow at all) is never run away from: when
//! the stream stops, the robot settles within the bounds of where it was. The bounds also cap
//! the speed a lagging robot can be driven at (≈ bound / lag); the defaults leave full joint
//! speed to the simulated IRC5 (see the `[kinematics]` table).
//!
//! # Targets
//! * **Hold**: stay at the start point.
//! * **Pose**: the closed-form IK (nearest branch to the start point). When that solution is
//!   more than one cycle at the joint speed limits away (a pass near a wrist singularity, or a
//!   jump in the target):
//!   - if it is within [`ServoParams::max_joint_chase_cycles`] cycles and within the joint lead
//!     bound, the reference moves in joint space towards it at the speed limits, direction kept
//!     (a brief deviation from the path, like ABB's `SingArea\Wrist`; flag `speed_limited`);
//!   - otherwise (a far solution: a branch flip near a wrist singularity, a target left behind
//!     while the reference was held back, or a target far from where the robot was found after a
//!     resync) it is **not** chased in joint space: the reference approaches the pose along the
//!     Cartesian line by damped least squares ([`Arm::servo_step_dls`]: the branch is kept, the
//!     whole step scaled to the speed limits; flags `far_solution` and `speed_limited`). A
//!     joint-space shortcut to a far configuration would sweep the TCP off the path.
//! * **Twist** (base axes): damped least squares, integrated over one robot cycle `dt` per
//!   command whatever the sender's rate.
//!
//! Every output is finite (unless there is neither a previous reference nor a finite
//! measurement: then it is NaN and flagged `unreachable`, and must not be sent), inside the
//! joint limits, within one cycle at the speed limits of where the cycle started, within the
//! lead bounds of the measured joints, and flagged. The servo acts only when called: when the
//! command stream stops, the reference stops.

use nalgebra::Isometry3;

use crate::{dls::scale_to_speed_limits, ik::IkFlags, step_limit::StepLimiter, Arm, Joints, Twist};

/// The last reference is taken to be "not followed" (restart from the measured joints) when it
/// leads the measurement by more than this multiple of the lead bounds.
pub const NOT_FOLLOWED_LEAD_RATIO: f64 = 1.25;

/// What the cycle asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServoTarget {
    /// Stay at the reference.
    Hold,
    /// TCP pose in base.
    Pose(Isometry3<f64>),
    /// TCP twist in base axes, applied for `dt`.
    Twist(Twist),
    /// Joints (rad): approached in joint space at the speed limits (direction kept), after
    /// clamping into the joint limits (flag `position_limited`). No IK: joint-space playback.
    Joints(Joints),
}

/// Flags of one cycle's result. The wire (`msg::KinFlags`, filled by the node) carries the
/// first four; `lead_limited` and `far_solution` always come with `speed_limited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServoFlags {
    pub unreachable: bool,
    pub near_singular: bool,
    pub position_limited: bool,
    /// The reference moves slower than asked (speed limits, lead bound, far solution).
    pub speed_limited: bool,
    /// The reference was held back (or pulled back) to stay within the lead bounds of the
    /// measured joints.
    pub lead_limited: bool,
    /// The pose target's nearest IK solution was too far for a joint-space step: approached along
    /// the Cartesian line by DLS instead.
    pub far_solution: bool,
    /// This cycle started from the measured joints (first command, a pause in the stream, or the
    /// robot did not follow the last reference).
    pub resynced: bool,
    /// The step was limited by the acceleration bound ([`ServoParams::max_accel_rad_s2`]).
    pub accel_limited: bool,
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
    /// Robot cycle (s): a twist is integrated over this, once per command.
    pub dt: f64,
    /// Time since the previous call (s).
    pub since_last_s: f64,
    /// The robot cycle (joint-state counter) the command was computed from. Several commands
    /// for the same cycle replace each other instead of adding up: the reference never runs
    /// ahead of the robot by more than one step per cycle.
    pub cycle: u64,
}

/// Tuning of the servo (the node fills it from the `[kinematics]` table). All values > 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServoParams {
    /// If no command was computed for longer than this (s), the stream was interrupted:
    /// restart from the measurement.
    pub resync_after_s: f64,
    /// The reference never leads the measured joints by more than this on any joint (rad).
    pub max_lead_joint_rad: f64,
    /// The reference's TCP never leads the measured TCP by more than this distance (m).
    pub max_lead_tcp_m: f64,
    /// The reference's TCP orientation never leads the measured one by more than this (rad).
    pub max_lead_tcp_rad: f64,
    /// A pose target's IK solution farther than this many cycles at the joint speed limits is
    /// not chased in joint space (see the module docs).
    pub max_joint_chase_cycles: f64,
    /// Joint acceleration bound of the reference stream (rad/s² per joint; infinite = none):
    /// every output step is limited by [`StepLimiter`] (one common scale for all joints
    /// where one fits) so that robot-io, which checks the same bound at its own (higher)
    /// limits, replies the stream unchanged. Flag `accel_limited`.
    pub max_accel_rad_s2: Joints,
}

impl Default for ServoParams {
    /// 50 ms; 20°, 50 mm, 20°; 5 cycles.
    fn default() -> Self {
        Self {
            resync_after_s: 0.05,
            max_lead_joint_rad: 20f64.to_radians(),
            max_lead_tcp_m: 0.050,
            max_lead_tcp_rad: 20f64.to_radians(),
            max_joint_chase_cycles: 5.0,
            max_accel_rad_s2: [f64::INFINITY; 6],
        }
    }
}

/// The measured robot, once per cycle.
struct Measured {
    q: Joints,
    tcp: Isometry3<f64>,
}

/// Explicit state: the last commanded joints.
#[derive(Debug, Clone)]
pub struct Servo {
    arm: Arm,
    params: ServoParams,
    last: Option<Joints>,
    /// The base the last output was computed from, and its cycle.
    last_base: Option<(u64, Joints)>,
    /// Approaching a far pose target along the Cartesian line after a resync.
    far_approach: bool,
    /// The reference's velocity state (acceleration bound).
    lim: StepLimiter,
    /// The velocity state before the last cycle's first step (restored when another command
    /// for the same cycle redoes it).
    lim_base: StepLimiter,
}

impl Servo {
    /// A servo with the default [`ServoParams`].
    pub fn new(arm: Arm) -> Self {
        Self::with_params(arm, ServoParams::default())
    }

    pub fn with_params(arm: Arm, params: ServoParams) -> Self {
        let lim = StepLimiter::new(*arm.limits(), params.max_accel_rad_s2);
        Self {
            arm,
            params,
            last: None,
            last_base: None,
            far_approach: false,
            lim_base: lim.clone(),
            lim,
        }
    }

    pub fn arm(&self) -> &Arm {
        &self.arm
    }

    pub fn params(&self) -> &ServoParams {
        &self.params
    }

    /// Forgets the last command (next cycle starts from the measurement).
    pub fn reset(&mut self) {
        self.last = None;
        self.last_base = None;
        self.lim.rest();
    }

    /// How far `q` leads the measured robot, as a multiple of the lead bounds (≤ 1: within).
    /// Infinite when `q` has no forward kinematics.
    pub fn lead_ratio(&self, q: &Joints, q_measured: &Joints) -> f64 {
        match self.arm.fk(q_measured) {
            Ok(tcp) => self.lead_ratio_to(
                q,
                &Measured {
                    q: *q_measured,
                    tcp,
                },
            ),
            Err(_) => f64::INFINITY,
        }
    }

    fn lead_ratio_to(&self, q: &Joints, m: &Measured) -> f64 {
        let p = &self.params;
        let mut r: f64 = 0.0;
        for j in 0..6 {
            let d = (q[j] - m.q[j]).abs() / p.max_lead_joint_rad;
            if !d.is_finite() {
                return f64::INFINITY;
            }
            r = r.max(d);
        }
        match self.arm.fk(q) {
            Ok(t) => {
                let dp = (t.translation.vector - m.tcp.translation.vector).norm();
                let dr = t.rotation.angle_to(&m.tcp.rotation);
                let r = r.max(dp / p.max_lead_tcp_m).max(dr / p.max_lead_tcp_rad);
                if r.is_finite() {
                    r
                } else {
                    f64::INFINITY
                }
            }
            Err(_) => f64::INFINITY,
        }
    }

    /// The farthest point of the segment `from` → `to` within the lead bounds (`from` must be
    /// within them), and whether it falls short of `to`.
    fn within_lead(&self, from: &Joints, to: &Joints, m: &Measured) -> (Joints, bool) {
        if self.lead_ratio_to(to, m) <= 1.0 {
            return (*to, false);
        }
        let at = |s: f64| {
            let mut q = *from;
            for j in 0..6 {
                q[j] += s * (to[j] - from[j]);
            }
            q
        };
        // Bisection; `lo` always satisfies the bounds (the lead along a short segment is not
        // monotonic in general, but the point returned is always checked).
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..32 {
            let mid = 0.5 * (lo + hi);
            if self.lead_ratio_to(&at(mid), m) <= 1.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (at(lo), true)
    }

    /// Computes this cycle's joint reference.
    pub fn step(&mut self, input: &ServoInput) -> ServoOutput {
        let tcp = if input.q_measured.iter().all(|v| v.is_finite()) {
            self.arm.fk(input.q_measured).ok()
        } else {
            None
        };
        self.step_from(input, tcp)
    }

    /// [`Self::step`] with the measured TCP already known: `tcp_measured` must be this arm's
    /// FK of `input.q_measured` (e.g. the state the cycle's tool pose was made from,
    /// [`crate::Arm::state`]), so the cycle evaluates the measured configuration once.
    pub fn step_measured(
        &mut self,
        input: &ServoInput,
        tcp_measured: &Isometry3<f64>,
    ) -> ServoOutput {
        let finite = input.q_measured.iter().all(|v| v.is_finite())
            && tcp_measured
                .translation
                .vector
                .iter()
                .all(|v| v.is_finite());
        self.step_from(input, finite.then_some(*tcp_measured))
    }

    fn step_from(
        &mut self,
        input: &ServoInput,
        tcp_measured: Option<Isometry3<f64>>,
    ) -> ServoOutput {
        let ServoInput {
            q_measured,
            target,
            dt,
            since_last_s,
            cycle,
        } = *input;
        let mut flags = ServoFlags::default();
        let measured = tcp_measured.map(|tcp| Measured {
            q: *q_measured,
            tcp,
        });
        let fresh = since_last_s.is_finite() && since_last_s <= self.params.resync_after_s;
        let redo = matches!(self.last_base, Some((c, _)) if c == cycle && fresh);
        let previous = match self.last_base {
            // Another command for the cycle already served: redo that cycle's step.
            Some((_, b)) if redo => Some(b),
            _ => self.last,
        };
        if redo {
            self.lim = self.lim_base.clone();
        } else {
            self.lim_base = self.lim.clone();
        }
        let Some(m) = measured else {
            // No usable measurement (the bus never delivers one; defensive): the lead cannot
            // be checked, so nothing moves (NaN without a previous reference: never sent).
            let q = self.last.unwrap_or([f64::NAN; 6]);
            return ServoOutput {
                q,
                qd: [0.0; 6],
                flags: ServoFlags {
                    unreachable: true,
                    ..Default::default()
                },
            };
        };
        let base = match previous {
            Some(l) if fresh => {
                let r = self.lead_ratio_to(&l, &m);
                if r <= 1.0 {
                    l
                } else if r <= NOT_FOLLOWED_LEAD_RATIO {
                    // The robot backed off a little: pull the reference back onto the bounds.
                    flags.lead_limited = true;
                    flags.speed_limited = true;
                    self.within_lead(&m.q, &l, &m).0
                } else {
                    // The robot has not followed: restart from it.
                    flags.resynced = true;
                    m.q
                }
            }
            _ => {
                flags.resynced = true;
                m.q
            }
        };
        self.last_base = Some((cycle, base));
        if flags.resynced {
            // From the measured robot, at rest.
            self.lim.rest();
        }
        let dt = if dt.is_finite() && dt > 0.0 {
            dt
        } else {
            0.004
        };
        let wanted = match target {
            ServoTarget::Hold => base,
            ServoTarget::Pose(p) => {
                let far_mode = flags.resynced || self.far_approach;
                let q = self.pose_step(p, &base, dt, far_mode, &mut flags);
                self.far_approach = flags.far_solution;
                q
            }
            ServoTarget::Twist(t) => match self.arm.joint_velocity_dls(&base, t) {
                Ok(r) => {
                    flags.near_singular = r.flags.damped;
                    flags.speed_limited |= r.flags.speed_scaled;
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
            ServoTarget::Joints(goal) => {
                let lim = self.arm.limits();
                let mut g = *goal;
                for j in 0..6 {
                    let c = goal[j].clamp(lim.min[j], lim.max[j]);
                    if c != goal[j] {
                        flags.position_limited = true;
                    }
                    g[j] = c;
                }
                let q = self.joint_step_towards(&base, &g, dt);
                if (0..6).any(|j| (q[j] - g[j]).abs() > 1e-12) {
                    flags.speed_limited = true;
                }
                q
            }
        };
        let (q, held) = self.within_lead(&base, &wanted, &m);
        if held {
            flags.lead_limited = true;
            flags.speed_limited = true;
        }
        // The acceleration bound, then the lead bound again (a step the bound carried past
        // its target, braking, is held back onto the lead bounds; the velocity state takes
        // the step actually made).
        let r = self.lim.step(base, q, dt);
        let mut q = r.q;
        if r.limited {
            flags.accel_limited = true;
            flags.speed_limited = true;
            let (q2, held) = self.within_lead(&base, &q, &m);
            if held {
                flags.lead_limited = true;
                q = q2;
                self.lim.taken(base, q, dt);
            }
        }
        let mut qd = [0.0; 6];
        for j in 0..6 {
            qd[j] = (q[j] - base[j]) / dt;
        }
        self.last = Some(q);
        ServoOutput { q, qd, flags }
    }

    /// The unbounded step towards a pose target (see the module docs).
    fn pose_step(
        &self,
        p: &Isometry3<f64>,
        base: &Joints,
        dt: f64,
        far_mode: bool,
        flags: &mut ServoFlags,
    ) -> Joints {
        match self.arm.ik_step(p, base, dt) {
            Ok(s) if !s.flags.contains(IkFlags::SPEED_LIMIT_EXCEEDED) => {
                flags.near_singular = s.flags.near_singular();
                s.q
            }
            Ok(s) => {
                flags.speed_limited = true;
                flags.near_singular = s.flags.near_singular();
                let cycles = s.speed_ratio.unwrap_or(f64::INFINITY);
                let near =
                    (0..6).all(|j| (s.q[j] - base[j]).abs() <= self.params.max_lead_joint_rad);
                // The far-solution rule applies right after a resync (a restart from the
                // measured robot) and for the approach that follows it: continuous tracking through a wrist flip chases the exact
                // solution in joint space (bounded by the lead over the measured robot), as a
                // DLS crawl along the line would stall at the singularity.
                if (cycles <= self.params.max_joint_chase_cycles && near) || !far_mode {
                    // A few cycles away (a near-singular pass): joint space at the speed limits,
                    // direction kept. Converges to the exact pose without stalling.
                    self.joint_step_towards(base, &s.q, dt)
                } else {
                    // Far: along the Cartesian line, on the current branch.
                    flags.far_solution = true;
                    match self.arm.servo_step_dls(base, p, dt) {
                        Ok(st) => {
                            flags.near_singular |= st.dls.flags.damped;
                            flags.position_limited = st.dls.flags.position_limited;
                            st.q_next
                        }
                        Err(_) => {
                            flags.unreachable = true;
                            *base
                        }
                    }
                }
            }
            Err(_) => {
                flags.unreachable = true;
                *base
            }
        }
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

    /// The direct chain steps the servo on the tool pose's own FK (`step_measured`): the same
    /// references, bit for bit, as `step`, which evaluates it again.
    #[test]
    fn a_known_measured_tcp_gives_the_same_references() {
        let arm = Arm::irb120();
        let (mut a, mut b) = (Servo::new(arm.clone()), Servo::new(arm.clone()));
        let q0 = [0.1, 0.2, -0.1, 0.3, 0.6, -0.2];
        let goal = arm.fk(&q0).expect("fk")
            * Isometry3::from_parts(
                Translation3::new(0.03, -0.02, 0.01),
                UnitQuaternion::from_euler_angles(0.05, 0.0, -0.04),
            );
        let (mut qa, mut qb) = (q0, q0);
        let target = ServoTarget::Pose(goal);
        for k in 0..200u64 {
            let input = |q| ServoInput {
                q_measured: q,
                target: &target,
                dt: 0.004,
                since_last_s: 0.004,
                cycle: 10_000 + k,
            };
            // The robot lags the reference by one cycle.
            let oa = a.step(&input(&qa));
            let state = arm.state(&qb).expect("state");
            let ob = b.step_measured(&input(&qb), &state.tcp);
            assert_eq!(oa.q, ob.q, "cycle {k}");
            assert_eq!(oa.qd, ob.qd, "cycle {k}");
            (qa, qb) = (oa.q, ob.q);
        }
        // A non-finite measured TCP is no measurement, as a non-finite joint is: nothing to
        // send (NaN, flagged unreachable) without a previous reference.
        let mut nan = arm.fk(&q0).expect("fk");
        nan.translation.vector.x = f64::NAN;
        let input = ServoInput {
            q_measured: &q0,
            target: &ServoTarget::Pose(goal),
            dt: 0.004,
            since_last_s: 0.004,
            cycle: 20_000,
        };
        let out = Servo::new(arm.clone()).step_measured(&input, &nan);
        assert!(
            out.flags.unreachable && out.q.iter().all(|v| v.is_nan()),
            "{out:?}"
        );
    }

    #[test]
    fn joints_target_is_reached_within_speed_and_joint_limits() {
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q0 = [0.0, 0.0, 0.0, 0.0, 0.5, 0.0];
        let near = [0.001, -0.002, 0.0, 0.0, 0.5, 0.003];
        let step = |servo: &mut Servo, q_meas: &Joints, goal: Joints| {
            servo.step(&ServoInput {
                q_measured: q_meas,
                target: &ServoTarget::Joints(goal),
                dt: 0.004,
                since_last_s: 0.004,
                cycle: next_cycle(),
            })
        };
        // A goal within one cycle at the speed limits: reached exactly, no flags.
        let out = step(&mut servo, &q0, near);
        assert_eq!(out.q, near);
        assert!(!out.flags.speed_limited && !out.flags.position_limited);
        // A far goal: one step at the speed limits, direction kept.
        let far = [0.5, 0.0, 0.0, 0.0, 0.5, 0.0];
        let out2 = step(&mut servo, &near, far);
        assert!(out2.flags.speed_limited);
        assert!(within_speed(&arm, &near, &out2.q, 0.004));
        assert!(out2.q[0] > near[0]);
        // A goal beyond the joint limits is clamped into them.
        let beyond = [0.0, 0.0, 0.0, 0.0, 0.5, 100.0];
        let mut q = out2.q;
        for _ in 0..2000 {
            q = step(&mut servo, &q, beyond).q;
        }
        assert!((q[5] - arm.limits().max[5]).abs() < 1e-9, "{}", q[5]);
        let last = step(&mut servo, &q, beyond);
        assert!(last.flags.position_limited);
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

    /// The wrist-singular line of the test above; returns the worst joint velocity change per
    /// cycle as a fraction of `a·dt`, and whether the end was reached.
    fn singular_line_accel(params: ServoParams, a: Joints) -> (f64, bool) {
        let arm = Arm::irb120();
        let mut servo = Servo::with_params(arm.clone(), params);
        let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.2, 0.0];
        let p0 = arm.fk(&q0).expect("fk");
        let q1: Joints = [0.0, 0.25, 0.05, 0.3, -0.2, 0.0];
        let p1 = arm.fk(&q1).expect("fk");
        let dt = 0.004;
        let n = 500;
        let mut q_meas = q0;
        let mut v_prev = [0.0; 6];
        let mut worst = 0.0f64;
        for k in 0..=n + 300 {
            let s = (k as f64 / n as f64).min(1.0);
            let t = p0.translation.vector.lerp(&p1.translation.vector, s);
            let r = p0.rotation.slerp(&p1.rotation, s);
            let out = servo.step(&ServoInput {
                q_measured: &q_meas,
                target: &ServoTarget::Pose(Isometry3::from_parts(Translation3::from(t), r)),
                dt,
                since_last_s: dt,
                cycle: next_cycle(),
            });
            assert!(within_speed(&arm, &q_meas, &out.q, dt));
            for j in 0..6 {
                let v = (out.q[j] - q_meas[j]) / dt;
                worst = worst.max((v - v_prev[j]).abs() / (a[j] * dt));
                v_prev[j] = v;
            }
            q_meas = out.q;
        }
        let reached = arm.fk(&q_meas).expect("fk");
        (
            worst,
            (reached.translation.vector - p1.translation.vector).norm() < 1e-3,
        )
    }

    #[test]
    fn the_acceleration_bound_holds_through_a_wrist_singular_chase() {
        let a = crate::step_limit::irb120_max_accel().map(|x| 0.95 * x);
        let bounded = ServoParams {
            max_accel_rad_s2: a,
            ..ServoParams::default()
        };
        let (worst, reached) = singular_line_accel(bounded, a);
        assert!(worst <= 1.0 + 1e-9, "velocity change {worst} × a·dt");
        assert!(reached, "the bounded servo still reaches the end");
        // Without the bound the chase changes speed far faster (the test can tell).
        let (worst_free, _) = singular_line_accel(ServoParams::default(), a);
        assert!(worst_free > 2.0, "{worst_free}");
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

    // ---- Lead bound, resync and stream-stop tests (safety review items 6 and 2) ----

    const DT: f64 = 0.004;

    /// The lead bounds the tests check against: (joint rad, TCP m, TCP rad).
    fn bounds(servo: &Servo) -> (f64, f64, f64) {
        let p = servo.params();
        (p.max_lead_joint_rad, p.max_lead_tcp_m, p.max_lead_tcp_rad)
    }

    /// How far `q` leads `measured`, as a fraction of the bounds (≤ 1: within).
    fn lead_ratio(servo: &Servo, q: &Joints, measured: &Joints) -> f64 {
        let (bj, bp, br) = bounds(servo);
        let arm = servo.arm();
        let mut r: f64 = 0.0;
        for j in 0..6 {
            r = r.max((q[j] - measured[j]).abs() / bj);
        }
        let (a, b) = (arm.fk(q).expect("fk"), arm.fk(measured).expect("fk"));
        r = r.max((a.translation.vector - b.translation.vector).norm() / bp);
        r.max(a.rotation.angle_to(&b.rotation) / br)
    }

    /// A robot that follows the reference as a first-order lag of `tau_cycles` robot cycles,
    /// each joint at most `speed_scale` × its speed limit (a reduced-speed mode, or a robot
    /// that cannot keep up).
    struct LaggingRobot {
        q: Joints,
        tau_cycles: f64,
        speed_scale: f64,
    }

    impl LaggingRobot {
        fn step(&mut self, arm: &Arm, reference: &Joints) {
            let a = 1.0 - (-1.0 / self.tau_cycles).exp();
            for j in 0..6 {
                let vmax = self.speed_scale * arm.limits().max_speed[j] * DT;
                self.q[j] += ((reference[j] - self.q[j]) * a).clamp(-vmax, vmax);
            }
        }
    }

    fn input<'a>(q: &'a Joints, target: &'a ServoTarget, cycle: u64) -> ServoInput<'a> {
        ServoInput {
            q_measured: q,
            target,
            dt: DT,
            since_last_s: DT,
            cycle,
        }
    }

    /// Distance of `p` from the segment `a`–`b`.
    fn off_line(p: &Vector3<f64>, a: &Vector3<f64>, b: &Vector3<f64>) -> f64 {
        let ab = b - a;
        let s = ((p - a).dot(&ab) / ab.norm_squared()).clamp(0.0, 1.0);
        (p - (a + ab * s)).norm()
    }

    #[test]
    fn reference_never_leads_a_stalled_robot_beyond_the_bound() {
        // The robot does not move (blocked, or robot-io holding it) while the stream goes on:
        // the reference stops at the lead bound instead of running away.
        let arm = Arm::irb120();
        let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.6, -2.0];
        let p0 = arm.fk(&q0).expect("fk");
        let line = |k: usize| {
            let mut p = p0;
            p.translation.vector.y += 0.25 * DT * k.min(200) as f64; // 20 cm, then stays
            ServoTarget::Pose(p)
        };
        let twist =
            |_| ServoTarget::Twist(Twist::new(Vector3::new(0.3, 0.3, 0.0), Vector3::zeros()));
        // Spin about the flange axis (TCP = tool0 here): A6 alone, near its full speed.
        let axis = p0.rotation * Vector3::z();
        let spin = |_| ServoTarget::Twist(Twist::new(Vector3::zeros(), axis * 7.0));
        let streams: [(&str, &dyn Fn(usize) -> ServoTarget); 3] = [
            ("pose line", &line),
            ("twist", &twist),
            ("wrist spin", &spin),
        ];
        for (name, stream) in streams {
            let mut servo = Servo::new(arm.clone());
            let mut prev = q0;
            let mut worst: f64 = 0.0;
            let mut last = None;
            for k in 1..=400 {
                let target = stream(k);
                let out = servo.step(&input(&q0, &target, next_cycle()));
                let r = lead_ratio(&servo, &out.q, &q0);
                worst = worst.max(r);
                assert!(
                    r <= 1.0 + 1e-9,
                    "{name}: cycle {k}: lead {r:.3} of the bound"
                );
                assert!(within_speed(&arm, &prev, &out.q, DT), "{name}: cycle {k}");
                prev = out.q;
                last = Some(out);
            }
            let last = last.expect("ran");
            // Meaningful: the stream asked for more, the reference sits at the bound, flagged.
            assert!(worst > 0.99, "{name}: the bound was reached ({worst:.3})");
            assert!(
                last.flags.lead_limited && last.flags.speed_limited,
                "{name}: held back and flagged: {:?}",
                last.flags
            );
        }
    }

    #[test]
    fn robot_that_did_not_follow_restarts_from_the_measurement() {
        // The stream is fresh, but the robot ended up far from the last reference (pushed away,
        // or it stopped on its own): the next step starts from where the robot is.
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.6, 0.0];
        let held = ServoTarget::Hold;
        let a = servo.step(&input(&q0, &held, next_cycle()));
        assert_eq!(a.q, q0);
        let mut pushed = q0;
        pushed[0] += 0.5; // 29° away on A1
        let b = servo.step(&input(&pushed, &held, next_cycle()));
        assert!(lead_ratio(&servo, &b.q, &pushed) <= 1.0 + 1e-9, "{:?}", b.q);
        assert_eq!(b.q, pushed, "a hold restarts at the measured joints");
        assert!(b.flags.resynced);
    }

    #[test]
    fn slow_twist_stream_integrates_one_robot_cycle_per_command() {
        // Control sends a twist only every third robot cycle: each command moves the reference
        // by one robot cycle of the twist, never by the time since the previous command.
        let arm = Arm::irb120();
        let v = 0.1;
        let twist = ServoTarget::Twist(Twist::new(Vector3::new(0.0, 0.0, v), Vector3::zeros()));
        for robot_lags in [false, true] {
            let mut servo = Servo::new(arm.clone());
            let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.6, 0.0];
            let mut robot = LaggingRobot {
                q: q0,
                tau_cycles: 3.0,
                speed_scale: 1.0,
            };
            let z0 = arm.fk(&q0).expect("fk").translation.vector.z;
            let mut z_prev = z0;
            let mut cycle = next_cycle() + 1000;
            let n = 50;
            let mut reference = q0;
            for k in 0..n {
                let measured = if robot_lags { robot.q } else { reference };
                let out = servo.step(&ServoInput {
                    q_measured: &measured,
                    target: &twist,
                    dt: DT,
                    since_last_s: if k == 0 { f64::INFINITY } else { 3.0 * DT },
                    cycle,
                });
                cycle += 3;
                reference = out.q;
                let z = arm.fk(&out.q).expect("fk").translation.vector.z;
                let dz = z - z_prev;
                assert!((dz - v * DT).abs() < 0.02 * v * DT, "command {k}: dz {dz}");
                z_prev = z;
                for _ in 0..3 {
                    robot.step(&arm, &reference);
                }
            }
            let total = z_prev - z0;
            assert!(
                (total - n as f64 * v * DT).abs() < 0.02 * n as f64 * v * DT,
                "lagging robot {robot_lags}: {total} m after {n} commands"
            );
        }
    }

    #[test]
    fn stopped_twist_stream_leaves_no_accumulated_lead() {
        // A twist faster than the robot follows (here a reduced-speed robot: 20 % of the joint
        // speed limits, first-order lag of 3 cycles), then the stream stops mid-motion.
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.6, 0.0];
        let mut robot = LaggingRobot {
            q: q0,
            tau_cycles: 3.0,
            speed_scale: 0.2,
        };
        let twist = ServoTarget::Twist(Twist::new(Vector3::new(0.0, 0.6, 0.0), Vector3::zeros()));
        let mut last = None;
        for k in 0..100 {
            let out = servo.step(&input(&robot.q, &twist, next_cycle()));
            let r = lead_ratio(&servo, &out.q, &robot.q);
            assert!(r <= 1.0 + 1e-9, "cycle {k}: lead {r:.3} of the bound");
            robot.step(&arm, &out.q);
            last = Some((out, robot.q));
        }
        let (last, measured_at_stop) = last.expect("ran");
        // The stream stops: the servo is not called any more (the node publishes only on a
        // command), so the robot is left with the last reference and settles on it.
        for _ in 0..500 {
            robot.step(&arm, &last.q);
        }
        for j in 0..6 {
            assert!(
                (robot.q[j] - last.q[j]).abs() < 1e-6,
                "settled on the last reference"
            );
        }
        let travelled = lead_ratio(&servo, &robot.q, &measured_at_stop);
        assert!(
            travelled <= 1.0 + 1e-6,
            "after the stream stopped the robot moved {travelled:.3} of the lead bound"
        );
        // A command after a long pause restarts at the robot: no jump back.
        let c = servo.step(&ServoInput {
            q_measured: &robot.q,
            target: &ServoTarget::Hold,
            dt: DT,
            since_last_s: 1.0,
            cycle: next_cycle(),
        });
        assert_eq!(c.q, robot.q);
    }

    #[test]
    fn resync_with_a_far_target_stays_near_the_robot_and_never_jumps() {
        // The stream stops; meanwhile the robot is moved 20 cm sideways (jogged); the stream
        // resumes with the old pose target. The servo restarts from the measured joints, never
        // leads the robot (here at half speed) beyond the bound, never jumps, and does not take
        // the joint-space shortcut: the TCP stays on the straight line to the target.
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q_a: Joints = [0.25, 0.2, 0.1, 0.3, 0.6, 0.0];
        let p_a = arm.fk(&q_a).expect("fk");
        let target = ServoTarget::Pose(p_a);
        let first = servo.step(&input(&q_a, &target, next_cycle()));
        assert!((0..6).all(|j| (first.q[j] - q_a[j]).abs() < 1e-9));
        let mut p_b = p_a;
        p_b.translation.vector.y -= 0.2;
        let q_b = arm.ik_nearest(&p_b, &q_a).expect("reachable").q;
        let mut robot = LaggingRobot {
            q: q_b,
            tau_cycles: 3.0,
            speed_scale: 0.5,
        };
        let (line_a, line_b) = (p_b.translation.vector, p_a.translation.vector);
        let mut prev = q_b;
        let mut worst_off: f64 = 0.0;
        for k in 0..1500 {
            let out = servo.step(&ServoInput {
                q_measured: &robot.q,
                target: &target,
                dt: DT,
                since_last_s: if k == 0 { 2.0 } else { DT },
                cycle: next_cycle(),
            });
            assert!(
                within_speed(&arm, &prev, &out.q, DT),
                "cycle {k}: jump {:?} -> {:?}",
                prev,
                out.q
            );
            let r = lead_ratio(&servo, &out.q, &robot.q);
            assert!(r <= 1.0 + 1e-9, "cycle {k}: lead {r:.3} of the bound");
            if k == 0 {
                assert!(out.flags.resynced, "{:?}", out.flags);
                assert!(
                    out.flags.far_solution && out.flags.speed_limited,
                    "far target flagged"
                );
            }
            let p = arm.fk(&out.q).expect("fk").translation.vector;
            worst_off = worst_off.max(off_line(&p, &line_a, &line_b));
            prev = out.q;
            robot.step(&arm, &out.q);
        }
        assert!(worst_off < 2e-3, "TCP left the line by {worst_off} m");
        // Approached, not stalled: the robot gets to the target.
        let reached = arm.fk(&robot.q).expect("fk");
        assert!((reached.translation.vector - line_b).norm() < 1e-3);
    }

    #[test]
    fn robot_backing_off_a_little_pulls_the_reference_back_onto_the_bound() {
        // Blocked robot, reference at the bound; the robot then backs off slightly (less than
        // the not-followed ratio): the reference is pulled back onto the bound, no restart.
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.6, -2.0];
        let axis = arm.fk(&q0).expect("fk").rotation * Vector3::z();
        let spin = ServoTarget::Twist(Twist::new(Vector3::zeros(), axis * 5.0));
        let mut last = q0;
        for _ in 0..100 {
            last = servo.step(&input(&q0, &spin, next_cycle())).q;
        }
        assert!(lead_ratio(&servo, &last, &q0) > 0.99);
        let mut backed = q0;
        backed[5] -= 0.1 * servo.params().max_lead_joint_rad;
        let out = servo.step(&input(&backed, &ServoTarget::Hold, next_cycle()));
        assert!(
            out.flags.lead_limited && !out.flags.resynced,
            "{:?}",
            out.flags
        );
        assert!(lead_ratio(&servo, &out.q, &backed) <= 1.0 + 1e-9);
        assert!((out.q[5] - last[5]).abs() <= 0.1 * servo.params().max_lead_joint_rad + 1e-9);
    }

    /// The simulated IRC5 as `cell-sim` runs it with the shipped scenarios
    /// (services/sim/src/world/servo.rs): per joint a critically damped loop of 10 Hz bandwidth
    /// behind a 2-cycle transport delay, within the joint speed limits; plus the EGM round trip
    /// (the reference computed from measurement k goes out with the reply to EgmRobot k+1 and is
    /// taken by the controller's next cycle): reference k first acts on measurement k+4.
    struct SimIrc5 {
        q: Joints,
        qd: Joints,
        queue: std::collections::VecDeque<Joints>,
        wn: f64,
    }

    impl SimIrc5 {
        fn new(q: Joints) -> Self {
            let zeta_ratio = (2f64.sqrt() - 1.0).sqrt(); // ω_b/ωn at ζ = 1
            Self {
                q,
                qd: [0.0; 6],
                queue: std::collections::VecDeque::from(vec![q; 3]),
                wn: 2.0 * std::f64::consts::PI * 10.0 / zeta_ratio,
            }
        }

        fn step(&mut self, arm: &Arm, reference: &Joints) {
            self.queue.push_back(*reference);
            let active = self.queue.pop_front().unwrap_or(*reference);
            let n = 20;
            let h = DT / n as f64;
            for _ in 0..n {
                for j in 0..6 {
                    let a =
                        self.wn * self.wn * (active[j] - self.q[j]) - 2.0 * self.wn * self.qd[j];
                    let vmax = arm.limits().max_speed[j];
                    self.qd[j] = (self.qd[j] + h * a).clamp(-vmax, vmax);
                    self.q[j] += h * self.qd[j];
                }
            }
        }
    }

    #[test]
    fn defaults_do_not_limit_tracking_of_the_simulated_irc5() {
        let arm = Arm::irb120();
        let q0: Joints = [0.0, 0.2, 0.1, 0.3, 0.6, -3.0];
        let p0 = arm.fk(&q0).expect("fk");
        // A6 alone at 95 % of its speed limit (TCP = tool0, on the axis).
        let w6 = 0.95 * arm.limits().max_speed[5];
        let spin = ServoTarget::Twist(Twist::new(
            Vector3::zeros(),
            p0.rotation * Vector3::z() * w6,
        ));
        // A 25 cm line with control's smoothstep profile, 1 m/s at its peak.
        let (len, peak) = (0.25, 1.0);
        let duration = 1.5 * len / peak;
        let line = |k: usize| {
            let tau = (k as f64 * DT / duration).min(1.0);
            let mut p = p0;
            p.translation.vector.y += len * tau * tau * (3.0 - 2.0 * tau);
            ServoTarget::Pose(p)
        };
        let spin_stream = |_| spin;
        let streams: [(&str, &dyn Fn(usize) -> ServoTarget); 2] =
            [("A6 at 95 % speed", &spin_stream), ("1 m/s line", &line)];
        for (name, stream) in streams {
            let mut servo = Servo::new(arm.clone());
            let mut robot = SimIrc5::new(q0);
            let mut worst: f64 = 0.0;
            let mut last_lead = [0.0; 6];
            for k in 0..200 {
                let out = servo.step(&input(&robot.q, &stream(k), next_cycle()));
                assert!(
                    !out.flags.lead_limited && !out.flags.far_solution,
                    "{name}: cycle {k}: {:?}",
                    out.flags
                );
                worst = worst.max(lead_ratio(&servo, &out.q, &robot.q));
                for j in 0..6 {
                    last_lead[j] = out.q[j] - robot.q[j];
                }
                robot.step(&arm, &out.q);
            }
            println!("{name}: worst lead {worst:.2} of the default bounds");
            if name.starts_with("A6") {
                println!(
                    "A6 lags {:.1} cycles at steady speed",
                    last_lead[5] / (w6 * DT)
                );
            }
            assert!(worst > 0.3, "{name}: meaningful ({worst})");
        }
    }

    #[test]
    fn wrist_singular_line_with_the_simulated_irc5_reaches_the_end() {
        // The whole-cell test's path (tests/tests/kinematics.rs): q5 from 30° to −20° along a
        // straight line in 400 cycles, then 100 cycles holding the end, the simulated IRC5
        // lagging behind. Every step within the speed limits; the reference ends on the target.
        let arm = Arm::irb120();
        let mut servo = Servo::new(arm.clone());
        let q0: Joints = [0.0, 0.0, 0.0, 0.0, 30f64.to_radians(), 0.0];
        let q1: Joints = [0.05, 0.15, 0.1, 0.0, (-20f64).to_radians(), 0.1];
        let (p0, p1) = (arm.fk(&q0).expect("fk"), arm.fk(&q1).expect("fk"));
        let mut robot = SimIrc5::new(q0);
        let n = 400;
        let mut prev = q0;
        let mut counts = (0, 0, 0);
        for k in 0..=n + 100 {
            let sfrac = k.min(n) as f64 / n as f64;
            let t = p0.translation.vector.lerp(&p1.translation.vector, sfrac);
            let r = p0.rotation.slerp(&p1.rotation, sfrac);
            let target = ServoTarget::Pose(Isometry3::from_parts(Translation3::from(t), r));
            let out = servo.step(&input(&robot.q, &target, next_cycle()));
            assert!(within_speed(&arm, &prev, &out.q, DT), "cycle {k}");
            assert!(!out.flags.unreachable && !out.flags.resynced || k == 0);
            counts.0 += out.flags.speed_limited as usize;
            counts.1 += out.flags.far_solution as usize;
            counts.2 += out.flags.lead_limited as usize;
            prev = out.q;
            robot.step(&arm, &out.q);
        }
        let err = (arm.fk(&prev).expect("fk").translation.vector - p1.translation.vector).norm();
        println!(
            "wrist line: {} speed-limited, {} far-solution (DLS), {} lead-limited; end error {err:.1e} m",
            counts.0, counts.1, counts.2
        );
        assert!(err < 1e-6, "ended {err} m from the line's end");
        assert_eq!(counts.2, 0, "the simulated IRC5 is never lead-limited here");
    }
}
