//! Command safety: what reference robot-io sends the robot each cycle. Pure: time is a parameter.
//!
//! Invariants (tested below):
//! - the outgoing reference is always finite and inside the joint limits;
//! - while active, per cycle no joint moves faster than its speed limit, and no joint's
//!   velocity changes by more than its acceleration limit × dt (velocity = step / dt, with the
//!   cycle's own dt, jitter included);
//! - the step is scaled as a whole when that satisfies every limit (direction kept, the joints
//!   stay synchronised); only when no common scale exists (e.g. a command that reverses one
//!   joint while it is moving fast) is each joint limited on its own;
//! - the reference brakes in time for the joint position limits: a joint never moves faster
//!   towards a limit than it can stop from within its acceleration limit
//!   (v ≤ −a·dt + √((a·dt)² + 2·a·d) for distance d), so the position limits and the
//!   acceleration limit hold together whatever the dt sequence;
//! - it also brakes in time for a target that stopped (speed bounded by the target's own speed
//!   plus the braking speed for the remaining distance), so an accelerating-limited reference
//!   does not overshoot a command that jumped and stayed;
//! - no fresh, valid command → hold the last measured position (never keep executing an old
//!   command); the reason is reported. **Hold takes priority over the acceleration limit**: the
//!   issue's requirement is "command stops → within 2 robot cycles the robot holds its
//!   measured position", so a hold jumps the reference to the measured position at once
//!   instead of ramping down. The measured position is where the robot already is, so this
//!   asks the robot's own servo to stop (with its own acceleration limits), it does not ask
//!   for a reference jump away from the robot. A ramped stop would keep executing the old
//!   command's velocity for v/a seconds (up to 0.25 s with the defaults), which is exactly what
//!   the "silence means hold" invariant forbids;
//! - an e-stop latches until reset; while latched nothing but hold goes out;
//! - a silent robot ([`Supervisor::robot_silent`]) holds with reason `RobotSilent`, and the
//!   next motion starts from the then-measured position at rest.

use common::msg::{JointCommand, RobotStatus, SafetyLevel, SafetyReason, AXES};
use kinematics::JointLimits;

/// Tuning of the supervisor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SupervisorParams {
    /// A command older than this (by local arrival time) is stale.
    pub command_timeout_s: f64,
    pub limits: JointLimits,
    /// Maximum joint acceleration of the outgoing reference (rad/s², > 0). `f64::INFINITY`
    /// = no acceleration limit on that joint (then only speed and position limits apply, as
    /// for the ideal driver by default).
    pub max_accel: [f64; AXES],
}

/// Default joint acceleration limits for the IRB 120 (rad/s²): 1000, 1000, 1000, 1280, 1280,
/// 1680 °/s², i.e. each joint reaches its data-sheet speed (250, 250, 250, 320, 320, 420 °/s)
/// in 0.25 s. ABB does not publish joint accelerations for the IRB 120; this is a conservative
/// choice (the robot's own motion control accelerates harder), to be raised after measuring.
pub fn irb120_max_accel() -> [f64; AXES] {
    [1000.0, 1000.0, 1000.0, 1280.0, 1280.0, 1680.0].map(f64::to_radians)
}

/// One cycle's inputs.
#[derive(Debug, Clone, Copy)]
pub struct CycleInput<'a> {
    pub cycle: u64,
    /// Local time of this cycle (s, any epoch, monotonic).
    pub now_s: f64,
    /// Cycle duration used for speed limiting (s).
    pub dt_s: f64,
    pub q_measured: [f64; AXES],
    pub robot: RobotStatus,
    /// Newest command and its local arrival time (s, same epoch as `now_s`).
    pub command: Option<(&'a JointCommand, f64)>,
}

/// One cycle's output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CycleOutput {
    pub q_ref: [f64; AXES],
    pub qd_ref: [f64; AXES],
    pub level: SafetyLevel,
    pub reason: SafetyReason,
    /// Level or reason changed this cycle.
    pub changed: bool,
}

/// The supervisor's explicit state.
#[derive(Debug, Clone)]
pub struct Supervisor {
    p: SupervisorParams,
    level: SafetyLevel,
    reason: SafetyReason,
    since_cycle: u64,
    estop: bool,
    /// Reference sent last cycle.
    last_ref: Option<[f64; AXES]>,
    /// Position held while not active.
    hold_q: Option<[f64; AXES]>,
    /// Velocity of the last reference step (rad/s); zero after a hold.
    last_v: [f64; AXES],
    /// Target of the last active cycle (for the target's own speed).
    last_target: Option<[f64; AXES]>,
    last_cmd_seq: Option<u64>,
    rejected: u64,
    limited_cycles: u64,
    per_joint_cycles: u64,
}

impl Supervisor {
    pub fn new(p: SupervisorParams) -> Self {
        Self {
            p,
            level: SafetyLevel::Hold,
            reason: SafetyReason::NoCommandYet,
            since_cycle: 0,
            estop: false,
            last_ref: None,
            hold_q: None,
            last_v: [0.0; AXES],
            last_target: None,
            last_cmd_seq: None,
            rejected: 0,
            limited_cycles: 0,
            per_joint_cycles: 0,
        }
    }

    pub fn params(&self) -> &SupervisorParams {
        &self.p
    }
    /// Active cycles whose step was reduced by a speed, acceleration or braking limit.
    pub fn limited_cycles(&self) -> u64 {
        self.limited_cycles
    }
    /// Active cycles where no common scale existed and joints were limited one by one.
    pub fn per_joint_cycles(&self) -> u64 {
        self.per_joint_cycles
    }

    /// The robot went silent (no feedback within its timeout): nothing can be sent; report a
    /// hold with reason `RobotSilent`, and forget the motion state so that the next reference
    /// starts from the then-measured position at rest. Returns true when the state changed.
    pub fn robot_silent(&mut self, cycle: u64) -> bool {
        self.last_ref = None;
        self.hold_q = None;
        self.last_v = [0.0; AXES];
        self.last_target = None;
        let (level, reason) = if self.estop {
            (SafetyLevel::EmergencyStop, SafetyReason::EStop)
        } else {
            (SafetyLevel::Hold, SafetyReason::RobotSilent)
        };
        let changed = level != self.level || reason != self.reason;
        if changed {
            self.level = level;
            self.reason = reason;
            self.since_cycle = cycle;
        }
        changed
    }

    pub fn level(&self) -> SafetyLevel {
        self.level
    }
    pub fn reason(&self) -> SafetyReason {
        self.reason
    }
    pub fn since_cycle(&self) -> u64 {
        self.since_cycle
    }
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Latches the e-stop.
    pub fn engage_estop(&mut self) {
        self.estop = true;
    }
    /// Clears the e-stop latch; the robot stays in hold until a fresh command arrives.
    pub fn reset_estop(&mut self) {
        self.estop = false;
    }
    pub fn estop_latched(&self) -> bool {
        self.estop
    }

    /// Computes this cycle's reference.
    pub fn step(&mut self, i: &CycleInput) -> CycleOutput {
        let measured_ok = i.q_measured.iter().all(|v| v.is_finite());
        let (level, reason, target) = self.decide(i);
        if reason == SafetyReason::RobotNotReady && measured_ok {
            // The controller is not following our references (motors off, EGM not running):
            // the robot may be moved by other means, so hold wherever it is now, and start any
            // later motion from there, at rest.
            self.hold_q = None;
            self.last_ref = None;
        }
        // Where an active step starts: the last reference, else the measured position.
        let start = self
            .last_ref
            .or_else(|| measured_ok.then(|| self.clamp(i.q_measured)));
        let (q_ref, qd_ref) = match (target, start) {
            (Some(t), Some(prev)) => {
                self.hold_q = None;
                let (q, v) = self.limit_step(prev, t, i.dt_s);
                self.last_v = v;
                self.last_target = Some(t);
                (q, v)
            }
            _ => {
                self.last_v = [0.0; AXES];
                self.last_target = None;
                // Hold: the position measured when the hold began (never chase drift).
                let h = match self.hold_q {
                    Some(h) => h,
                    None => {
                        let h = if measured_ok {
                            self.clamp(i.q_measured)
                        } else {
                            self.last_ref.unwrap_or([0.0; AXES])
                        };
                        self.hold_q = Some(h);
                        h
                    }
                };
                (h, [0.0; AXES])
            }
        };
        let level = if target.is_some() && start.is_none() {
            SafetyLevel::Hold
        } else {
            level
        };
        let reason = if target.is_some() && start.is_none() {
            SafetyReason::RobotNotReady
        } else {
            reason
        };
        self.last_ref = Some(q_ref);
        let changed = level != self.level || reason != self.reason;
        if changed {
            self.level = level;
            self.reason = reason;
            self.since_cycle = i.cycle;
        }
        CycleOutput {
            q_ref,
            qd_ref,
            level,
            reason,
            changed,
        }
    }

    /// The reference to send on shutdown: hold where the robot is.
    pub fn shutdown(&mut self, cycle: u64, q_measured: [f64; AXES]) -> CycleOutput {
        let q = if q_measured.iter().all(|v| v.is_finite()) {
            self.clamp(q_measured)
        } else {
            self.last_ref.unwrap_or([0.0; AXES])
        };
        self.hold_q = Some(q);
        self.last_ref = Some(q);
        self.last_v = [0.0; AXES];
        self.last_target = None;
        let changed = self.reason != SafetyReason::ShuttingDown;
        self.level = SafetyLevel::Hold;
        self.reason = SafetyReason::ShuttingDown;
        self.since_cycle = cycle;
        CycleOutput {
            q_ref: q,
            qd_ref: [0.0; AXES],
            level: self.level,
            reason: self.reason,
            changed,
        }
    }

    fn decide(&mut self, i: &CycleInput) -> (SafetyLevel, SafetyReason, Option<[f64; AXES]>) {
        if self.estop {
            return (SafetyLevel::EmergencyStop, SafetyReason::EStop, None);
        }
        if !(i.robot.motors_on && i.robot.external_control_active) {
            return (SafetyLevel::Hold, SafetyReason::RobotNotReady, None);
        }
        let Some((cmd, arrived_s)) = i.command else {
            return (SafetyLevel::Hold, SafetyReason::NoCommandYet, None);
        };
        let age = i.now_s - arrived_s;
        if !(age.is_finite() && age <= self.p.command_timeout_s) {
            return (SafetyLevel::Hold, SafetyReason::CommandStale, None);
        }
        if !cmd.q_rad.iter().all(|v| v.is_finite()) {
            if self.last_cmd_seq != Some(cmd.stamp.seq) {
                self.rejected += 1;
                self.last_cmd_seq = Some(cmd.stamp.seq);
            }
            return (SafetyLevel::Hold, SafetyReason::CommandInvalid, None);
        }
        let clamped = self.clamp(cmd.q_rad);
        let reason = if clamped != cmd.q_rad {
            if self.last_cmd_seq != Some(cmd.stamp.seq) {
                self.rejected += 1;
            }
            SafetyReason::JointLimit
        } else {
            SafetyReason::None
        };
        self.last_cmd_seq = Some(cmd.stamp.seq);
        (SafetyLevel::Active, reason, Some(clamped))
    }

    fn clamp(&self, q: [f64; AXES]) -> [f64; AXES] {
        let l = &self.p.limits;
        let mut out = q;
        for j in 0..AXES {
            out[j] = q[j].clamp(l.min[j], l.max[j]);
        }
        out
    }

    /// The next reference from `prev` towards `target` within the speed, acceleration and
    /// braking limits; returns it and its velocity.
    fn limit_step(
        &mut self,
        prev: [f64; AXES],
        target: [f64; AXES],
        dt: f64,
    ) -> ([f64; AXES], [f64; AXES]) {
        if !(dt.is_finite() && dt > 0.0) {
            // No time passes: no motion, the velocity state is kept.
            return (prev, self.last_v);
        }
        let l = &self.p.limits;
        let mut lo = [0.0; AXES];
        let mut hi = [0.0; AXES];
        let mut cap_t = [0.0; AXES];
        let mut v_des = [0.0; AXES];
        for j in 0..AXES {
            let a = self.p.max_accel[j];
            let vmax = l.max_speed[j];
            let e = target[j] - prev[j];
            v_des[j] = e / dt;
            if !(a.is_finite() && a > 0.0) {
                // No acceleration limit: speed limits only (position limits: the final clamp).
                lo[j] = -vmax;
                hi[j] = vmax;
                cap_t[j] = f64::INFINITY;
                continue;
            }
            let brake = |d: f64| -a * dt + ((a * dt).powi(2) + 2.0 * a * d.max(0.0)).sqrt();
            let v0 = self.last_v[j];
            lo[j] = (-vmax).max(v0 - a * dt).max(-brake(prev[j] - l.min[j]));
            hi[j] = vmax.min(v0 + a * dt).min(brake(l.max[j] - prev[j]));
            if lo[j] > hi[j] {
                // Only by rounding (the braking invariant keeps the window non-empty): brake.
                let v = v0 - (a * dt).min(v0.abs()) * v0.signum();
                lo[j] = v;
                hi[j] = v;
            }
            let v_target = self.last_target.map_or(0.0, |lt| (target[j] - lt[j]) / dt);
            cap_t[j] = v_target.abs() + brake(e.abs());
        }
        // Largest common scale s ∈ [0, 1] of the desired velocity satisfying every joint.
        let mut s_lo: f64 = 0.0;
        let mut s_hi: f64 = 1.0;
        for j in 0..AXES {
            let d = v_des[j];
            if d == 0.0 {
                if lo[j] > 0.0 || hi[j] < 0.0 {
                    s_hi = -1.0;
                }
                continue;
            }
            let (a, b) = (lo[j] / d, hi[j] / d);
            s_lo = s_lo.max(a.min(b));
            s_hi = s_hi.min(a.max(b)).min(cap_t[j] / d.abs());
        }
        let mut v = [0.0; AXES];
        if s_lo <= s_hi && s_hi >= 0.0 {
            for j in 0..AXES {
                v[j] = (s_hi * v_des[j]).clamp(lo[j], hi[j]);
            }
            if s_hi < 1.0 {
                self.limited_cycles += 1;
            }
        } else {
            self.limited_cycles += 1;
            self.per_joint_cycles += 1;
            for j in 0..AXES {
                v[j] = v_des[j].clamp(-cap_t[j], cap_t[j]).clamp(lo[j], hi[j]);
            }
        }
        let mut q = prev;
        for j in 0..AXES {
            // A step taken whole lands exactly on the target (no rounding through v·dt).
            let next = if v[j] == v_des[j] {
                target[j]
            } else {
                prev[j] + v[j] * dt
            };
            q[j] = next.clamp(l.min[j], l.max[j]);
            v[j] = (q[j] - prev[j]) / dt;
        }
        (q, v)
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use common::msg::Stamp;
    use proptest::prelude::*;

    fn sup() -> Supervisor {
        Supervisor::new(SupervisorParams {
            command_timeout_s: 0.008,
            limits: JointLimits::irb120(),
            max_accel: irb120_max_accel(),
        })
    }
    const READY: RobotStatus = RobotStatus {
        motors_on: true,
        external_control_active: true,
        program_running: true,
    };
    fn cmd(seq: u64, q: [f64; 6]) -> JointCommand {
        JointCommand {
            stamp: Stamp {
                seq,
                source_mono_ns: 0,
            },
            q_rad: q,
            ..Default::default()
        }
    }
    fn input<'a>(
        cycle: u64,
        now: f64,
        q: [f64; 6],
        c: Option<(&'a JointCommand, f64)>,
    ) -> CycleInput<'a> {
        CycleInput {
            cycle,
            now_s: now,
            dt_s: 0.004,
            q_measured: q,
            robot: READY,
            command: c,
        }
    }

    #[test]
    fn holds_without_command_and_when_stale() {
        let mut s = sup();
        let q0 = [0.1; 6];
        let out = s.step(&input(1, 0.0, q0, None));
        assert_eq!(out.q_ref, q0);
        assert_eq!(out.reason, SafetyReason::NoCommandYet);
        let c = cmd(1, [0.101; 6]);
        let out = s.step(&input(2, 0.004, q0, Some((&c, 0.004))));
        assert_eq!(out.level, SafetyLevel::Active);
        // From rest, the first step is bounded by the acceleration limit (a·dt²).
        let a = irb120_max_accel();
        for j in 0..6 {
            assert!(out.q_ref[j] > 0.1);
            assert!(out.q_ref[j] - 0.1 <= a[j] * 0.004 * 0.004 + 1e-15);
        }
        // Converges onto the target without overshoot.
        let mut out = out;
        for k in 0..40 {
            out = s.step(&input(3, 0.004, out.q_ref, Some((&c, 0.004))));
            for j in 0..6 {
                assert!(out.q_ref[j] <= 0.101 + 1e-12, "cycle {k}: {:?}", out.q_ref);
            }
        }
        for j in 0..6 {
            assert!((out.q_ref[j] - 0.101).abs() < 1e-9, "{:?}", out.q_ref);
        }
        // Two cycles later the same command is stale: hold the measured position.
        let qm = [0.1005; 6];
        let out = s.step(&input(5, 0.016, qm, Some((&c, 0.004))));
        assert_eq!(out.level, SafetyLevel::Hold);
        assert_eq!(out.reason, SafetyReason::CommandStale);
        assert_eq!(out.q_ref, qm);
        assert_eq!(out.qd_ref, [0.0; 6]);
        assert!(out.changed);
        // Measured drift while holding does not move the hold target.
        let out = s.step(&input(6, 0.020, [0.2; 6], Some((&c, 0.004))));
        assert_eq!(out.q_ref, qm);
    }

    #[test]
    fn estop_latches_until_reset() {
        let mut s = sup();
        let q0 = [0.0; 6];
        s.engage_estop();
        let c = cmd(1, [0.001; 6]);
        let out = s.step(&input(1, 0.0, q0, Some((&c, 0.0))));
        assert_eq!(out.level, SafetyLevel::EmergencyStop);
        assert_eq!(out.q_ref, q0);
        let c2 = cmd(2, [0.001; 6]);
        let out = s.step(&input(2, 0.004, q0, Some((&c2, 0.004))));
        assert_eq!(out.level, SafetyLevel::EmergencyStop);
        s.reset_estop();
        let c3 = cmd(3, [0.001; 6]);
        let out = s.step(&input(3, 0.008, q0, Some((&c3, 0.008))));
        assert_eq!(out.level, SafetyLevel::Active);
    }

    #[test]
    fn limits_and_nan() {
        let mut s = sup();
        let q0 = [0.0; 6];
        s.step(&input(1, 0.0, q0, None));
        let bad = cmd(1, [f64::NAN, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let out = s.step(&input(2, 0.004, q0, Some((&bad, 0.004))));
        assert_eq!(out.reason, SafetyReason::CommandInvalid);
        assert_eq!(out.q_ref, q0);
        assert_eq!(s.rejected(), 1);
        let far = cmd(2, [10.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let out = s.step(&input(3, 0.008, q0, Some((&far, 0.008))));
        assert_eq!(out.reason, SafetyReason::JointLimit);
        // From rest: acceleration limited, a·dt² = 1000°/s² · (4 ms)².
        let a1 = 1000f64.to_radians();
        assert!((out.q_ref[0] - a1 * 0.004 * 0.004).abs() < 1e-12);
        // Keeps accelerating, then cruises at the speed limit: A1 250°/s → 1°/cycle.
        let mut q = out.q_ref;
        let mut prev = q;
        for k in 0..100 {
            let far = cmd(3 + k, [10.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
            let now = 0.012 + k as f64 * 0.004;
            let out = s.step(&input(4 + k, now, q, Some((&far, now))));
            prev = q;
            q = out.q_ref;
        }
        assert!((q[0] - prev[0] - 250f64.to_radians() * 0.004).abs() < 1e-12);
    }

    #[test]
    fn brakes_for_position_limits_within_acceleration() {
        // A6 beyond its +400° limit commanded from -390°: it must arrive at +400° exactly,
        // never pass it, never exceed 1680°/s² on the way.
        let mut s = sup();
        let l = JointLimits::irb120();
        let a = irb120_max_accel();
        let mut q = [0.0; 6];
        q[5] = l.min[5] + 0.17;
        s.step(&input(0, 0.0, q, None));
        let mut v_prev = 0.0;
        for k in 1..2000u64 {
            let mut t = q;
            t[5] = 100.0;
            let c = cmd(k, t);
            let now = k as f64 * 0.004;
            let out = s.step(&input(k, now, q, Some((&c, now))));
            let v = (out.q_ref[5] - q[5]) / 0.004;
            assert!(out.q_ref[5] <= l.max[5] + 1e-12);
            assert!((v - v_prev).abs() <= a[5] * 0.004 + 1e-9, "cycle {k}");
            v_prev = v;
            q = out.q_ref;
        }
        assert!((q[5] - l.max[5]).abs() < 1e-9);
        assert!(v_prev.abs() < 1e-9);
    }

    #[test]
    fn without_acceleration_limit_only_speed_limits_apply() {
        // The ideal driver's default: the previous behaviour (whole step scaled to the speed
        // limits, direction kept, no ramp).
        let mut s = Supervisor::new(SupervisorParams {
            command_timeout_s: 0.008,
            limits: JointLimits::irb120(),
            max_accel: [f64::INFINITY; 6],
        });
        let q0 = [0.0; 6];
        s.step(&input(1, 0.0, q0, None));
        let far = cmd(1, [10.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        let out = s.step(&input(2, 0.004, q0, Some((&far, 0.004))));
        let step = 250f64.to_radians() * 0.004;
        assert!((out.q_ref[0] - step).abs() < 1e-12);
        assert!((out.q_ref[1] - step * 1.0 / 165f64.to_radians()).abs() < 1e-12);
        let near = cmd(2, [0.001; 6]);
        let out = s.step(&input(3, 0.008, out.q_ref, Some((&near, 0.008))));
        assert_eq!(out.q_ref, [0.001; 6]);
        assert!(out.q_ref.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn step_direction_is_kept_when_possible() {
        let mut s = sup();
        s.step(&input(0, 0.0, [0.0; 6], None));
        let c = cmd(1, [0.2, 0.1, -0.05, 0.0, 0.0, 0.0]);
        let out = s.step(&input(1, 0.004, [0.0; 6], Some((&c, 0.004))));
        let r = out.q_ref;
        assert!((r[1] / r[0] - 0.5).abs() < 1e-9 && (r[2] / r[0] + 0.25).abs() < 1e-9);
    }

    #[test]
    fn silent_robot_holds_with_reason_and_restarts_at_rest() {
        let mut s = sup();
        let c = cmd(1, [0.01; 6]);
        let out = s.step(&input(1, 0.0, [0.0; 6], Some((&c, 0.0))));
        assert_eq!(out.level, SafetyLevel::Active);
        assert!(s.robot_silent(2));
        assert!(!s.robot_silent(3));
        assert_eq!(
            (s.level(), s.reason()),
            (SafetyLevel::Hold, SafetyReason::RobotSilent)
        );
        assert_eq!(s.since_cycle(), 2);
        // Back: starts from the measured position, at rest.
        let qm = [0.3; 6];
        let c = cmd(2, [0.31; 6]);
        let out = s.step(&input(4, 1.0, qm, Some((&c, 1.0))));
        assert_eq!(out.level, SafetyLevel::Active);
        let a = irb120_max_accel();
        for j in 0..6 {
            assert!(out.q_ref[j] >= 0.3 && out.q_ref[j] - 0.3 <= a[j] * 1.6e-5 + 1e-15);
        }
        // An e-stop stays the reported reason while silent.
        s.engage_estop();
        s.robot_silent(5);
        assert_eq!(s.reason(), SafetyReason::EStop);
    }

    #[test]
    fn robot_not_ready_holds() {
        let mut s = sup();
        let c = cmd(1, [0.01; 6]);
        let mut i = input(1, 0.0, [0.0; 6], Some((&c, 0.0)));
        i.robot.motors_on = false;
        let out = s.step(&i);
        assert_eq!(out.reason, SafetyReason::RobotNotReady);
        assert_eq!(out.q_ref, [0.0; 6]);
    }

    proptest! {
        /// Random commands (NaN, missing, stale, far outside the limits), jittered dt (2–6 ms),
        /// robot not ready now and then: the reference is always finite and inside the
        /// position limits; while active its speed and acceleration (per cycle, with that
        /// cycle's dt) are within the limits; a stale command holds the measured position at
        /// once.
        #[test]
        fn reference_finite_in_limits_speed_and_accel_bounded(
            cmds in proptest::collection::vec((
                proptest::array::uniform6(-20.0f64..20.0),
                any::<bool>(),
                0.0f64..0.02,
                any::<bool>(),
                0.002f64..0.006,
                0u8..20,
            ), 1..120)
        ) {
            let mut s = sup();
            let l = JointLimits::irb120();
            let a = irb120_max_accel();
            // The first active step starts from the measured position, at rest.
            let mut prev: Option<[f64; 6]> = Some([0.0; 6]);
            let mut v_prev = [0.0; 6];
            let mut q_meas = [0.0; 6];
            let mut now = 0.0;
            let mut hold_start: Option<[f64; 6]> = None;
            for (k, (q, nan, age, present, dt, misc)) in cmds.iter().enumerate() {
                let mut q = *q;
                if *nan && misc % 3 == 0 { q[k % 6] = f64::NAN; }
                // Small commands near the current reference most of the time, so that the
                // reference actually moves at speed and reverses.
                if misc % 4 != 0 {
                    for j in 0..6 { q[j] = q_meas[j] + q[j] * 0.01; }
                }
                let c = cmd(k as u64 + 1, q);
                now += dt;
                let mut inp = input(k as u64, now, q_meas, present.then_some((&c, now - age)));
                inp.dt_s = *dt;
                if *misc == 7 { inp.robot.motors_on = false; }
                let out = s.step(&inp);
                let mut v = [0.0; 6];
                for j in 0..6 {
                    prop_assert!(out.q_ref[j].is_finite());
                    prop_assert!(out.q_ref[j] >= l.min[j] - 1e-12 && out.q_ref[j] <= l.max[j] + 1e-12);
                    if let (Some(p), SafetyLevel::Active) = (prev, out.level) {
                        v[j] = (out.q_ref[j] - p[j]) / dt;
                        prop_assert!(v[j].abs() <= l.max_speed[j] * (1.0 + 1e-9), "speed j{} {}", j, v[j]);
                        prop_assert!((v[j] - v_prev[j]).abs() <= a[j] * dt * (1.0 + 1e-6) + 1e-9,
                            "accel j{} {} -> {} over {}", j, v_prev[j], v[j], dt);
                    }
                }
                if out.level == SafetyLevel::Active {
                    hold_start = None;
                } else if out.reason == SafetyReason::RobotNotReady {
                    prop_assert_eq!(out.q_ref, q_meas);
                    hold_start = Some(q_meas);
                } else {
                    // Hold: the position measured when the hold began, at once.
                    let h = *hold_start.get_or_insert(q_meas);
                    prop_assert_eq!(out.q_ref, h);
                }
                if *present && *age > 0.008 && out.level != SafetyLevel::EmergencyStop {
                    prop_assert_eq!(out.reason, if *misc == 7 { SafetyReason::RobotNotReady } else { SafetyReason::CommandStale });
                }
                v_prev = v;
                prev = Some(out.q_ref);
                q_meas = out.q_ref; // ideal robot
            }
        }
    }
}
