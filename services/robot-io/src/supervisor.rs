//! Command safety: what reference robot-io sends the robot each cycle. Pure: time is a parameter.
//!
//! Invariants (tested below):
//! - the outgoing reference is always finite and inside the joint limits;
//! - per cycle it moves no joint faster than its speed limit (the whole step is scaled, so the
//!   direction is kept);
//! - no fresh, valid command → hold the last measured position (never keep executing an old
//!   command); the reason is reported;
//! - an e-stop latches until reset; while latched nothing but hold goes out.

use common::msg::{JointCommand, RobotStatus, SafetyLevel, SafetyReason, AXES};
use kinematics::JointLimits;

/// Tuning of the supervisor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SupervisorParams {
    /// A command older than this (by local arrival time) is stale.
    pub command_timeout_s: f64,
    pub limits: JointLimits,
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
    last_cmd_seq: Option<u64>,
    rejected: u64,
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
            last_cmd_seq: None,
            rejected: 0,
        }
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
        let q_ref = match target {
            Some(t) => {
                self.hold_q = None;
                self.limit_step(t, i.dt_s)
            }
            None => {
                // Hold: the position measured when the hold began (never chase drift).
                match self.hold_q {
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
                }
            }
        };
        let mut qd_ref = [0.0; AXES];
        if let (Some(prev), true) = (self.last_ref, level == SafetyLevel::Active && i.dt_s > 0.0) {
            for j in 0..AXES {
                qd_ref[j] = (q_ref[j] - prev[j]) / i.dt_s;
            }
        }
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

    /// Scales the step from the last reference so that no joint exceeds its speed limit.
    fn limit_step(&self, target: [f64; AXES], dt_s: f64) -> [f64; AXES] {
        let Some(prev) = self.last_ref else {
            return target;
        };
        let mut scale: f64 = 1.0;
        for (j, (t, p)) in target.iter().zip(prev.iter()).enumerate() {
            let step = (t - p).abs();
            let max = self.p.limits.max_speed[j] * dt_s.max(0.0);
            if step > max {
                scale = scale.min(if step > 0.0 { max / step } else { 1.0 });
            }
        }
        let mut out = prev;
        for j in 0..AXES {
            out[j] = prev[j] + (target[j] - prev[j]) * scale;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::msg::Stamp;
    use proptest::prelude::*;

    fn sup() -> Supervisor {
        Supervisor::new(SupervisorParams {
            command_timeout_s: 0.008,
            limits: JointLimits::irb120(),
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
        assert_eq!(out.q_ref, [0.101; 6]);
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
        // Speed limited: A1 250°/s → 1°/cycle at 4 ms.
        assert!((out.q_ref[0] - 250f64.to_radians() * 0.004).abs() < 1e-12);
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
        #[test]
        fn reference_always_finite_in_limits_and_speed_bounded(
            cmds in proptest::collection::vec((proptest::array::uniform6(-20.0f64..20.0), any::<bool>(), 0.0f64..0.02, any::<bool>()), 1..60)
        ) {
            let mut s = sup();
            let l = JointLimits::irb120();
            let mut prev: Option<[f64; 6]> = None;
            let mut q_meas = [0.0; 6];
            for (k, (q, nan, age, present)) in cmds.iter().enumerate() {
                let mut q = *q;
                if *nan { q[k % 6] = f64::NAN; }
                let c = cmd(k as u64 + 1, q);
                let now = k as f64 * 0.004;
                let out = s.step(&input(k as u64, now, q_meas, present.then_some((&c, now - age))));
                for j in 0..6 {
                    prop_assert!(out.q_ref[j].is_finite());
                    prop_assert!(out.q_ref[j] >= l.min[j] - 1e-12 && out.q_ref[j] <= l.max[j] + 1e-12);
                    if let (Some(p), SafetyLevel::Active) = (prev, out.level) {
                        prop_assert!((out.q_ref[j] - p[j]).abs() <= l.max_speed[j] * 0.004 + 1e-12);
                    }
                }
                prev = Some(out.q_ref);
                q_meas = out.q_ref; // ideal robot
            }
        }
    }
}
