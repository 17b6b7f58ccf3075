//! One EGM datagram in, at most one reply out: the session ([`EgmSession`]) and the command
//! [`Supervisor`] together. Pure: time and the newest command are parameters.
//!
//! The rules (item 3 of the command-path review):
//! - a **new controller cycle** (an in-order datagram, also one after lost ones) steps the
//!   supervisor exactly once and replies its reference;
//! - a datagram **without usable joints** is still a controller cycle: the supervisor steps
//!   without a measurement (an active motion goes on within its limits from the last
//!   reference; a hold holds where it began, else at the last reference);
//! - a **late** (reordered) or **duplicate** datagram is not a new cycle: the last reference
//!   is resent unchanged and the supervisor is not stepped;
//! - a **malformed** datagram is counted and not answered;
//! - a **new EGM session** ends the motion and starts again from the measured position.
//!
//! So every reply of an active motion respects the joint position, speed and acceleration
//! limits relative to the previous reply, on robot-io's clock; the exemptions are the first
//! reply of a new session, a controller that is not ready, and a hold.

use common::msg::{JointCommand, RobotStatus, AXES};

use super::{
    frame::{self, SensorReply},
    proto::ProtoError,
    session::{EgmSession, Feedback, FeedbackError},
};
use crate::supervisor::{CycleInput, CycleOutput, Supervisor};

/// What one datagram was. The feedback goes by value (a box would be an allocation per
/// datagram); the enum moves once per datagram.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Datagram {
    /// Not an `EgmRobot`: counted, not answered.
    Malformed(ProtoError),
    /// Late or duplicate: the last reference resent.
    Repeat(FeedbackError),
    /// A controller cycle without usable joints.
    Incomplete(FeedbackError),
    /// A controller cycle with feedback (by value: no allocation per datagram).
    Cycle(Feedback),
}

/// The outcome of one datagram.
#[derive(Debug, Clone, PartialEq)]
pub struct Handled {
    pub datagram: Datagram,
    /// The reply to send to the datagram's sender (none for malformed datagrams, or when
    /// nothing finite is known yet).
    pub reply: Option<SensorReply>,
    /// The supervisor's output, when it was stepped.
    pub out: Option<CycleOutput>,
    /// The safety level or reason changed.
    pub safety_changed: bool,
    /// robot-io's cycle counter after this datagram.
    pub cycle: u64,
}

/// What robot-io sent, measured on the encoded replies on robot-io's clock (the step time
/// the supervisor used): peaks of speed and acceleration relative to the joint limits over
/// consecutive active replies (the exempt replies — controller not ready, hold — start a new
/// run at rest; a session's first reply, and the first ever, are measured from the robot's
/// measured position at rest, where the supervisor starts them). For status and the
/// whole-cell tests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReferenceStats {
    pub active_replies: u64,
    pub peak_speed_ratio: f64,
    pub peak_accel_ratio: f64,
    /// Active replies outside the joint position limits.
    pub out_of_limits: u64,
    /// Replies of controlled ends (control ended the motion: hold `MotionEnded`) that follow
    /// an active reply or another such reply, and their peaks against the limits: how the
    /// reference came to rest (issue 19 item 10).
    pub end_replies: u64,
    pub end_peak_speed_ratio: f64,
    pub end_peak_accel_ratio: f64,
    /// (joints, velocity, active or braking, robot time of the step) of the previous reply.
    prev: Option<([f64; AXES], [f64; AXES], bool, f64)>,
}

impl ReferenceStats {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "active_replies": self.active_replies,
            "peak_speed_ratio": self.peak_speed_ratio,
            "peak_accel_ratio": self.peak_accel_ratio,
            "out_of_limits": self.out_of_limits,
            "end_replies": self.end_replies,
            "end_peak_speed_ratio": self.end_peak_speed_ratio,
            "end_peak_accel_ratio": self.end_peak_accel_ratio,
        })
    }
}

/// The per-datagram logic of the EGM driver.
#[derive(Debug, Clone)]
pub struct EgmCore {
    pub session: EgmSession,
    pub sup: Supervisor,
    cycle: u64,
    q_meas: Option<[f64; AXES]>,
    refs: ReferenceStats,
    contact_force: Option<[f64; 3]>,
}

impl EgmCore {
    pub fn new(session: EgmSession, sup: Supervisor) -> Self {
        Self {
            session,
            sup,
            cycle: 0,
            q_meas: None,
            refs: ReferenceStats::default(),
            contact_force: None,
        }
    }

    /// Speed and acceleration of what was sent, on robot-io's clock.
    pub fn reference_stats(&self) -> ReferenceStats {
        self.refs
    }

    /// Records one reply. `from_rest_at`: the supervisor started this reply's step from the
    /// robot's measured position at rest (a new session, or nothing sent before), so the
    /// reply is measured from there — not from a previous reply, which the robot was not at.
    fn record(
        &mut self,
        reply: &SensorReply,
        dt: f64,
        exempt: bool,
        controlled_end: bool,
        from_rest_at: Option<[f64; AXES]>,
    ) {
        if dt.is_nan() || dt <= 0.0 {
            return;
        }
        let q = reply.q_deg.map(f64::to_radians);
        let p = *self.sup.params();
        let mut v = [0.0; AXES];
        // A controlled end is measured against the limits like an active reply.
        let measured = !exempt || controlled_end;
        let prev = match from_rest_at {
            Some(q0) => Some((q0, [0.0; AXES], false, dt)),
            None => self.refs.prev,
        };
        if let (true, Some((pq, pv, was_active, pdt))) = (measured, prev) {
            // The velocity change spans the two steps' midpoints (as the supervisor's bound).
            let dt_mid = if was_active {
                crate::supervisor::dv_span(pdt, dt)
            } else {
                dt
            };
            let (mut speed, mut accel) = (0.0f64, 0.0f64);
            for k in 0..AXES {
                v[k] = (q[k] - pq[k]) / dt;
                let v0 = if was_active { pv[k] } else { 0.0 };
                speed = speed.max(v[k].abs() / p.limits.max_speed[k]);
                if p.max_accel[k].is_finite() {
                    accel = accel.max((v[k] - v0).abs() / (p.max_accel[k] * dt_mid));
                }
            }
            if exempt {
                if was_active {
                    self.refs.end_replies += 1;
                    self.refs.end_peak_speed_ratio = self.refs.end_peak_speed_ratio.max(speed);
                    self.refs.end_peak_accel_ratio = self.refs.end_peak_accel_ratio.max(accel);
                }
            } else {
                self.refs.active_replies += 1;
                self.refs.peak_speed_ratio = self.refs.peak_speed_ratio.max(speed);
                self.refs.peak_accel_ratio = self.refs.peak_accel_ratio.max(accel);
                if (0..AXES).any(|k| q[k] < p.limits.min[k] - 1e-9 || q[k] > p.limits.max[k] + 1e-9)
                {
                    self.refs.out_of_limits += 1;
                }
            }
        }
        self.refs.prev = Some((q, v, measured, dt));
    }

    /// The contact force the next cycles hand the supervisor (a clamp release's input,
    /// [`CycleInput::contact_force_base_n`]).
    pub fn set_contact_force(&mut self, f: Option<[f64; 3]>) {
        self.contact_force = f;
    }

    /// robot-io's cycle counter (+1 per controller cycle).
    pub fn cycle(&self) -> u64 {
        self.cycle
    }
    /// The newest measured joints.
    pub fn q_measured(&self) -> Option<[f64; AXES]> {
        self.q_meas
    }

    fn status(&self) -> RobotStatus {
        self.session
            .last_states()
            .map(|s| s.status())
            .unwrap_or_default()
    }

    /// Handles one datagram received at `rx_s`, with the newest joint command and its local
    /// arrival time (same epoch).
    pub fn on_datagram(
        &mut self,
        bytes: &[u8],
        rx_s: f64,
        command: Option<(&JointCommand, f64)>,
    ) -> Handled {
        let msg = match frame::decode_robot_frame(bytes) {
            Ok(m) => m,
            Err(e) => {
                return Handled {
                    datagram: Datagram::Malformed(e),
                    reply: None,
                    out: None,
                    safety_changed: false,
                    cycle: self.cycle,
                }
            }
        };
        let (datagram, q_measured, dt_s, robot) = match self.session.on_robot(msg, rx_s) {
            Err(e) if e.is_repeat() => {
                let reply = self.session.resend(rx_s);
                return Handled {
                    datagram: Datagram::Repeat(e),
                    reply,
                    out: None,
                    safety_changed: false,
                    cycle: self.cycle,
                };
            }
            Err(e) => (
                Datagram::Incomplete(e),
                None,
                self.session.last_dt_s(),
                self.status(),
            ),
            Ok(fb) => {
                let (q, dt, st) = (fb.q_rad, fb.dt_s, fb.status);
                (Datagram::Cycle(fb), Some(q), dt, st)
            }
        };
        self.cycle += 1;
        let mut changed = false;
        if self.session.last_new_session() {
            changed |= self.sup.robot_restarted(self.cycle);
        }
        if q_measured.is_some() {
            self.q_meas = q_measured;
        }
        let out = self.sup.step(&CycleInput {
            cycle: self.cycle,
            now_s: rx_s,
            dt_s,
            q_measured,
            robot,
            command,
            contact_force_base_n: self.contact_force,
        });
        let reply = match out.q_ref {
            Some(q) => self.session.reply(&q, &out.qd_ref, rx_s),
            None => None,
        };
        if let Some(r) = &reply {
            let new_session = self.session.last_new_session();
            let exempt = out.level != common::msg::SafetyLevel::Active;
            let controlled_end = !new_session
                && out.level == common::msg::SafetyLevel::Hold
                && out.reason == common::msg::SafetyReason::MotionEnded;
            // A step the supervisor started from the measured position at rest (it forgot the
            // motion: a new session, a robot not following, a silence; or it had none) is
            // measured from there. The supervisor says so: a robot restart seen on a datagram
            // without a reply (fuzz finding, regressions/egm_robot/
            // reference_stats_restart_on_an_unanswered_datagram) is not a new session on the
            // next one.
            let from_rest_at = out.from_rest_at.or(if self.refs.prev.is_none() {
                self.q_meas
            } else {
                None
            });
            self.record(r, dt_s, exempt, controlled_end, from_rest_at);
        }
        Handled {
            datagram,
            reply,
            out: Some(out),
            safety_changed: changed || out.changed,
            cycle: self.cycle,
        }
    }

    /// Silence check at `now_s`: returns (silent, safety changed).
    pub fn check_silent(&mut self, now_s: f64) -> (bool, bool) {
        let silent = self.session.check_silent(now_s);
        let changed = silent && self.sup.robot_silent(self.cycle);
        (silent, changed)
    }

    /// The reply to a datagram received while shutting down: hold where the robot is.
    pub fn on_datagram_shutdown(&mut self, bytes: &[u8], rx_s: f64) -> Option<SensorReply> {
        let msg = frame::decode_robot_frame(bytes).ok()?;
        match self.session.on_robot(msg, rx_s) {
            Err(e) if e.is_repeat() => self.session.resend(rx_s),
            r => {
                let q = r.ok().map(|fb| fb.q_rad).or(self.q_meas);
                let out = self.sup.shutdown(self.cycle, q);
                let q = out.q_ref?;
                self.session.reply(&q, &[0.0; AXES], rx_s)
            }
        }
    }

    /// The shutdown hold without a datagram (for the safety state).
    pub fn shutdown(&mut self) -> CycleOutput {
        self.sup.shutdown(self.cycle, self.q_meas)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::{
        egm::{proto::EgmRobot, session::tests::robot, session::SessionParams},
        supervisor::{irb120_max_accel, SupervisorParams},
    };
    use common::msg::{MotionTag, SafetyLevel, SafetyReason, Stamp};
    use kinematics::JointLimits;
    use proptest::prelude::*;

    const BOOT: u64 = 5;

    fn core() -> EgmCore {
        EgmCore::new(
            EgmSession::new(SessionParams::IRC5),
            Supervisor::new(SupervisorParams::irb120(BOOT)),
        )
    }

    fn cmd(seq: u64, q: [f64; 6]) -> JointCommand {
        JointCommand {
            stamp: Stamp {
                seq,
                source_mono_ns: 0,
            },
            motion: MotionTag {
                robot_boot: BOOT,
                motion_id: 1,
            },
            q_rad: q,
            ..Default::default()
        }
    }

    fn planned_rad(r: &SensorReply) -> [f64; 6] {
        r.q_deg.map(f64::to_radians)
    }

    fn bytes(r: &EgmRobot) -> Vec<u8> {
        crate::egm::proto::encode_robot(r)
    }

    #[test]
    fn late_and_duplicate_resend_the_last_reference_without_stepping() {
        // Before the fix a late datagram was answered with the last *measured* position (a
        // jump back by the tracking lag) and a duplicate stepped the supervisor twice.
        let mut c = core();
        let meas = [10.0, 5.0, 0.0, 0.0, 30.0, 0.0];
        let far = cmd(1, [1.0; 6]);
        let r0 = c.on_datagram(&bytes(&robot(0, 0, meas, true)), 0.0, Some((&far, 0.0)));
        let mut last = r0.reply.unwrap();
        for k in 1..10u32 {
            let t = f64::from(k) * 0.004;
            let h = c.on_datagram(&bytes(&robot(k, k * 4, meas, true)), t, Some((&far, t)));
            last = h.reply.unwrap();
        }
        let cycles = c.cycle();
        // The robot lags: the reference is well ahead of the measurement.
        assert!((planned_rad(&last)[0] - meas[0].to_radians()).abs() > 1e-4);
        let late = c.on_datagram(
            &bytes(&robot(7, 28, meas, true)),
            0.041,
            Some((&far, 0.041)),
        );
        assert_eq!(late.datagram, Datagram::Repeat(FeedbackError::Late));
        assert_eq!(late.reply.as_ref().unwrap().q_deg, last.q_deg);
        assert_eq!(late.reply.as_ref().unwrap().qd_deg, last.qd_deg);
        let dup = c.on_datagram(
            &bytes(&robot(9, 36, meas, true)),
            0.042,
            Some((&far, 0.042)),
        );
        assert_eq!(dup.datagram, Datagram::Repeat(FeedbackError::Duplicate));
        assert_eq!(dup.reply.unwrap().q_deg, last.q_deg);
        assert_eq!(c.cycle(), cycles, "no supervisor step for repeats");
    }

    /// Fuzz regression (`fuzz/regressions/egm_robot/reference_stats_first_answered_cycle_moving`):
    /// the statistics took the first reply they recorded (and the first of a session) as a
    /// start from rest *at that reply*, so the next reply of a stream the supervisor had
    /// already accelerated within its limits read as 1.5–2.3 × the acceleration limit. The
    /// supervisor starts such a step from the measured position at rest; so must the figure.
    #[test]
    fn reference_stats_measure_a_session_start_from_the_measured_position_at_rest() {
        let meas = [10.0, 5.0, 0.0, 0.0, 30.0, 0.0];
        let far = cmd(1, [1.0; 6]);
        // (a) The first datagram has no usable joints, the second is lost; (b) a command is
        // fresh on the session's first datagram.
        for first_without_joints in [true, false] {
            let mut c = core();
            let mut r = robot(0, 0, meas, true);
            if first_without_joints {
                r.feed_back = None;
            }
            c.on_datagram(&bytes(&r), 0.0, Some((&far, 0.0)));
            let from = if first_without_joints { 2 } else { 1 };
            for k in from..40u32 {
                let t = f64::from(k) * 0.004;
                c.on_datagram(&bytes(&robot(k, k * 4, meas, true)), t, Some((&far, t)));
            }
            let s = c.reference_stats();
            assert!(
                s.peak_accel_ratio <= 1.0 + 1e-6,
                "{first_without_joints}: {s:?}"
            );
            // Measured, not skipped: the stream accelerates at its limit from rest.
            assert!(s.peak_accel_ratio > 0.9, "{first_without_joints}: {s:?}");
            assert!(s.active_replies >= 37, "{first_without_joints}: {s:?}");
        }
    }

    /// Fuzz regression (`fuzz/regressions/egm_robot/reference_stats_restart_on_an_unanswered_datagram`,
    /// found by `.ci/full`'s 600 s run): the controller restarts its sequence on a datagram
    /// with five joints (no reply: the supervisor forgets the motion), then the next datagram
    /// finds the robot 3.4° further and a command starts a motion there. The supervisor starts
    /// from the measured position at rest; the figure measured it from the hold reply before the
    /// restart (2.6 × the speed limit, 163 × the acceleration limit).
    #[test]
    fn reference_stats_measure_a_start_after_an_unanswered_restart_from_the_measured_position() {
        let mut c = core();
        let home = [0.0, 0.0, 0.0, 0.0, 0.5, 0.0];
        let go = cmd(1, home);
        let h = c.on_datagram(
            &bytes(&robot(2, 4, [0.0, 0.0, 0.0, 0.0, 28.65, 0.0], true)),
            0.008,
            None,
        );
        assert!(h.reply.is_some());
        let mut r = robot(0, 12, [0.0; 6], true);
        if let Some(fb) = r.feed_back.as_mut() {
            fb.joints = Some(crate::egm::proto::joints(&[0.0; 5]));
        }
        let h = c.on_datagram(&bytes(&r), 0.016, Some((&go, 0.016)));
        assert!(h.reply.is_none());
        let meas = [0.0, 0.0, 0.0, 0.0, 32.0, 0.0];
        for k in 0..20u32 {
            let t = 0.020 + f64::from(k) * 0.004;
            let h = c.on_datagram(
                &bytes(&robot(5 + k, 16 + 4 * k, meas, true)),
                t,
                Some((&go, t)),
            );
            assert_eq!(h.out.map(|o| o.level), Some(SafetyLevel::Active), "{k}");
        }
        let s = c.reference_stats();
        assert!(
            s.peak_speed_ratio <= 1.0 + 1e-6 && s.peak_accel_ratio <= 1.0 + 1e-6,
            "{s:?}"
        );
        assert!(s.active_replies >= 20, "{s:?}");
    }

    #[test]
    fn a_cycle_without_joints_goes_through_the_supervisor() {
        let mut c = core();
        let meas = [10.0, 5.0, 0.0, 0.0, 30.0, 0.0];
        let far = cmd(1, [1.0; 6]);
        let mut prev = [0.0; 6];
        for k in 0..10u32 {
            let t = f64::from(k) * 0.004;
            let h = c.on_datagram(&bytes(&robot(k, k * 4, meas, true)), t, Some((&far, t)));
            prev = planned_rad(&h.reply.unwrap());
        }
        let mut r = robot(10, 40, meas, true);
        r.feed_back = None;
        let h = c.on_datagram(&bytes(&r), 0.040, Some((&far, 0.040)));
        assert!(matches!(
            h.datagram,
            Datagram::Incomplete(FeedbackError::NoJoints)
        ));
        let q = planned_rad(&h.reply.unwrap());
        // Still moving forward within the limits, not jumping back to the measurement.
        let l = JointLimits::irb120();
        for j in 0..6 {
            let v = (q[j] - prev[j]) / 0.004;
            assert!(v.abs() <= l.max_speed[j] * (1.0 + 1e-9));
            assert!(q[j] > meas[j].to_radians() + 1e-6 || j >= 1);
        }
        assert_eq!(c.sup.level(), SafetyLevel::Active);
    }

    #[test]
    fn a_new_egm_session_ends_the_motion() {
        let mut c = core();
        let meas = [0.0; 6];
        let far = cmd(1, [0.5; 6]);
        for k in 0..5u32 {
            let t = f64::from(k) * 0.004;
            c.on_datagram(&bytes(&robot(k, k * 4, meas, true)), t, Some((&far, t)));
        }
        assert_eq!(c.sup.level(), SafetyLevel::Active);
        // The controller restarts EGM after the robot was jogged elsewhere.
        let moved = [20.0; 6];
        let h = c.on_datagram(&bytes(&robot(0, 0, moved, true)), 0.03, Some((&far, 0.03)));
        let q = planned_rad(&h.reply.unwrap());
        for j in 0..6 {
            assert!(
                (q[j] - 20f64.to_radians()).abs() < 1e-12,
                "held where measured"
            );
        }
        assert_eq!(c.sup.reason(), SafetyReason::MotionEnded);
    }

    /// What the network does to one controller datagram.
    #[derive(Debug, Clone, Copy)]
    enum Net {
        Deliver,
        Lose,
        Duplicate,
        /// Held back and delivered after the next one.
        Reorder,
        /// Truncated to this fraction of its length.
        Truncate(u8),
        /// Delivered without joints.
        NoJoints,
    }

    fn net() -> impl Strategy<Value = Net> {
        prop_oneof![
            10 => Just(Net::Deliver),
            2 => Just(Net::Lose),
            2 => Just(Net::Duplicate),
            2 => Just(Net::Reorder),
            1 => (1u8..100).prop_map(Net::Truncate),
            1 => Just(Net::NoJoints),
        ]
    }

    proptest! {
        /// Arbitrary interleavings of in-order, lost, duplicated, reordered, truncated and
        /// joint-less feedback from a lagging, noisy robot following our replies, with a
        /// command target that jumps around (also beyond the limits): every reply is finite;
        /// a repeat is exactly the previous reply; every reply of an active motion is inside
        /// the limits and within the speed and acceleration limits relative to the previous
        /// reply, with the step time robot-io used (its clock follows the controller's `tm`).
        /// Exempt: the first reply of a session, the controller not ready, holds.
        #[test]
        fn replies_respect_limits_under_any_interleaving(
            events in proptest::collection::vec(
                (net(), proptest::array::uniform6(-0.05f64..0.05), 0u8..30,
                 proptest::array::uniform6(-2e-3f64..2e-3)), 1..200),
            lag in 0.1f64..0.9,
        ) {
            let mut c = core();
            let l = JointLimits::irb120();
            let a = irb120_max_accel();
            // The robot (degrees) follows the last reply it received, with lag and noise.
            let mut q_robot = [0.0, 10.0, 5.0, 0.0, 30.0, 0.0];
            let mut target = [0.0, 0.2, 0.1, 0.0, 0.5, 0.0];
            let mut held: Option<Vec<u8>> = None;
            let mut prev_reply: Option<[f64; 6]> = None;
            let mut prev_v = [0.0; 6];
            let mut prev_dt = 0.0;
            let mut was_active = false;
            let mut seq: u32 = 0;
            let mut cmd_seq = 0;
            let mut robot_ref: Option<[f64; 6]> = None;
            for (k, (n, jump, misc, noise)) in events.iter().enumerate() {
                seq += 1;
                let t = f64::from(seq) * 0.004;
                if *misc == 0 {
                    for j in 0..6 { target[j] += jump[j] * 60.0; }
                } else {
                    for j in 0..6 { target[j] += jump[j]; }
                }
                cmd_seq += 1;
                let command = cmd(cmd_seq, target);
                let mut meas = q_robot;
                for j in 0..6 { meas[j] += noise[j]; }
                let ready = *misc != 29;
                let mut r = robot(seq, seq * 4, meas, ready);
                let mut deliveries: Vec<Vec<u8>> = Vec::new();
                match n {
                    Net::Deliver => deliveries.push(bytes(&r)),
                    Net::Lose => {}
                    Net::Duplicate => { deliveries.push(bytes(&r)); deliveries.push(bytes(&r)); }
                    Net::Reorder => { held = Some(bytes(&r)); }
                    Net::Truncate(f) => {
                        let b = bytes(&r);
                        let n = b.len() * usize::from(*f) / 100;
                        deliveries.push(b[..n].to_vec());
                    }
                    Net::NoJoints => { r.feed_back = None; deliveries.push(bytes(&r)); }
                }
                if !matches!(n, Net::Reorder) {
                    if let Some(h) = held.take() { deliveries.push(h); }
                }
                for (d, b) in deliveries.iter().enumerate() {
                    let rx = t + 1e-4 * d as f64;
                    let h = c.on_datagram(b, rx, Some((&command, rx)));
                    let Some(reply) = &h.reply else {
                        prop_assert!(matches!(h.datagram, Datagram::Malformed(_)) || prev_reply.is_none(),
                            "only malformed datagrams go unanswered once something was sent: {:?}", h.datagram);
                        continue;
                    };
                    let q = planned_rad(reply);
                    prop_assert!(q.iter().all(|v| v.is_finite()));
                    match &h.datagram {
                        Datagram::Repeat(_) => {
                            prop_assert_eq!(Some(q), prev_reply, "a repeat resends the last reference");
                        }
                        Datagram::Malformed(_) => prop_assert!(false, "malformed answered"),
                        Datagram::Incomplete(_) | Datagram::Cycle(_) => {
                            let out = h.out.unwrap();
                            let active = out.level == SafetyLevel::Active;
                            let dt = match &h.datagram {
                                Datagram::Cycle(fb) => fb.dt_s,
                                _ => c.session.last_dt_s(),
                            };
                            // The first reply of a session is exempt; its velocity (from the
                            // measured position it started at) is the basis of the next.
                            let mut v = out.qd_ref;
                            if let (true, false, Some(p)) = (active, c.session.last_new_session(), prev_reply) {
                                for j in 0..6 {
                                    prop_assert!(q[j] >= l.min[j] - 1e-9 && q[j] <= l.max[j] + 1e-9);
                                    v[j] = (q[j] - p[j]) / dt;
                                    prop_assert!(v[j].abs() <= l.max_speed[j] * (1.0 + 1e-6) + 1e-9,
                                        "event {} speed j{} {} dt {}", k, j, v[j], dt);
                                    // From the previous reply's velocity: an active step's,
                                    // a brake's (a stale stream stopped a moving reference)
                                    // or a hold's (zero).
                                    let moving = was_active || prev_v.iter().any(|v| *v != 0.0);
                                    let v0 = if moving { prev_v[j] } else { 0.0 };
                                    // Between the two steps' midpoints.
                                    let dt_mid = if moving { crate::supervisor::dv_span(prev_dt, dt) } else { dt };
                                    prop_assert!((v[j] - v0).abs() <= a[j] * dt_mid * (1.0 + 1e-6) + 1e-6,
                                        "event {} accel j{} {} -> {} dt {}", k, j, v0, v[j], dt_mid);
                                }
                            }
                            was_active = active;
                            prev_v = v;
                            prev_dt = dt;
                        }
                    }
                    prev_reply = Some(q);
                    robot_ref = Some(q);
                }
                if let Some(rr) = robot_ref {
                    for j in 0..6 { q_robot[j] += lag * (rr[j].to_degrees() - q_robot[j]); }
                }
            }
        }
    }
}
