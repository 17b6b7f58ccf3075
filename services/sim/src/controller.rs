//! The EGM *controller* side, as an IRC5 running `EGMRunJoint` would behave. Pure: the shell
//! owns the UDP socket and the clock.
//!
//! Each cycle the controller sends one `EgmRobot` (header seqno/tm/DATA, measured joints in
//! degrees, planned joints, motor/MCI/RAPID states) and applies the newest `EgmSensor`'s
//! `planned.joints` (degrees) as the servo reference. Without a fresh reply the reference stays
//! where it was (EGM keeps the last position) — robot-io's own supervisor decides holds.
//!
//! **The session** ([`SessionParams`], read from the shipped RAPID module `deploy/irc5/
//! CellEgm.mod` by the `irc5` crate): a session that gets no valid reply for
//! `\CommTimeout` ends (`EGMRunJoint` raises `ERR_UDPUC_COMM`) with `EGM_STOP_HOLD`: the arm
//! stays where it is — its reference has been still since the last reply, so the ramp-out has
//! no speed left to ramp — and no `EgmRobot` is sent until the RAPID loop starts the next
//! session `RampOutTime + WaitTime` later. A new session starts from the measured joints and
//! blends the replies in over `\RampInTime` (reference = start + α·(reply − start), α: 0 → 1).
//! Counted in [`ControllerStats::comm_timeouts`] and [`ControllerStats::sessions`].
//!
//! Timing: [`Controller::begin_cycle`] starts an EGM cycle (the newest reply becomes the
//! reference and enters the servo's delay line); [`Controller::advance`] integrates the servo
//! over a shorter base tick, so the simulator's joints (and the F/T truth) move at 1 kHz while
//! EGM runs at its own cycle. [`Controller::step`] is one whole cycle at once.

use crate::wire::egm::{decode_sensor, RobotMsg};

use crate::world::servo::ServoModel;

/// Controller states the emulator reports (and that faults change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerState {
    pub motors_on: bool,
    pub egm_running: bool,
    pub rapid_running: bool,
}

impl Default for ControllerState {
    fn default() -> Self {
        Self {
            motors_on: true,
            egm_running: true,
            rapid_running: true,
        }
    }
}

/// Counters of the emulated controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControllerStats {
    pub sent: u64,
    pub replies: u64,
    pub malformed_replies: u64,
    pub nonfinite_replies: u64,
    /// Sessions ended by the communication timeout.
    pub comm_timeouts: u64,
    /// Sessions started (the first one included).
    pub sessions: u64,
}

/// The EGM session's timing, as `CellEgm.mod` sets it (`irc5::EgmSession`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionParams {
    /// `\CommTimeout` (s); infinite: the session never times out.
    pub comm_timeout_s: f64,
    /// `\RampInTime` (s).
    pub ramp_in_s: f64,
    /// `\RampOutTime` (s).
    pub ramp_out_s: f64,
    /// The RAPID loop's wait before the next session (s).
    pub restart_wait_s: f64,
}

impl SessionParams {
    /// A session that never ends and takes every reply at once: for tests of the servo and the
    /// world, not of the EGM session.
    pub const ALWAYS_ON: Self = Self {
        comm_timeout_s: f64::INFINITY,
        ramp_in_s: 0.0,
        ramp_out_s: 0.0,
        restart_wait_s: 0.0,
    };

    /// From the IRC5 side's parsed session.
    pub fn from_irc5(s: &irc5::EgmSession) -> Self {
        Self {
            comm_timeout_s: s.comm_timeout_s,
            ramp_in_s: s.ramp_in_s,
            ramp_out_s: s.ramp_out_s,
            restart_wait_s: s.restart_wait_s,
        }
    }
}

/// Where the emulated EGM session is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Session {
    /// Running for `age_s`, `since_reply_s` since the last valid reply (or the start), blending
    /// from the joints `from` over the ramp-in.
    Running {
        age_s: f64,
        since_reply_s: f64,
        from: [f64; 6],
    },
    /// No session: ended, the next one starts after `wait_s`.
    Ended { wait_s: f64 },
}

/// What the emulator observes of the references it receives.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReferenceStats {
    /// Largest reference speed seen, as a fraction of the joint's speed limit:
    /// max over joints of |Δref| / (max_speed · cycles elapsed · dt).
    pub peak_speed_ratio: f64,
    /// References outside the joint limits.
    pub out_of_limits: u64,
}

/// The emulated controller: a joint servo plus the EGM message logic.
#[derive(Debug, Clone)]
pub struct Controller {
    servo: ServoModel,
    q_ref: [f64; 6],
    /// The header seqno of the reply `q_ref` came from (`None`: not from a reply).
    q_ref_seqno: Option<u32>,
    seqno: u32,
    pub state: ControllerState,
    pub stats: ControllerStats,
    pub refs: ReferenceStats,
    cycle: u64,
    last_ref_cycle: u64,
    last_dt: f64,
    /// The newest reply received since the last cycle (applied at the next cycle, as an IRC5
    /// takes the newest correction each cycle).
    pending: Option<([f64; 6], Option<u32>)>,
    params: SessionParams,
    session: Session,
    /// The program was stopped (no EGM): a new session starts when it runs again.
    program_stopped: bool,
    /// A session started and has not sent its first `EgmRobot` yet: that one carries sequence
    /// number 0, which is how the PC side (abb_libegm, robot-io) tells a new session from a
    /// resumed one (reference/protocols.md §1.6: "a sequence number of 0 as a new session").
    session_unsent: bool,
    /// The controller's clock at `tm` 0, µs since 1970 (`feedBack.time` = this + `tm`).
    clock_epoch_us: u64,
}

impl Controller {
    /// A controller whose first session starts now, from the servo's joints.
    pub fn new(servo: ServoModel, params: SessionParams) -> Self {
        let q_ref = servo.q();
        Self {
            params,
            program_stopped: false,
            session_unsent: true,
            clock_epoch_us: 0,
            session: Session::Running {
                age_s: 0.0,
                since_reply_s: 0.0,
                from: q_ref,
            },
            servo,
            q_ref,
            q_ref_seqno: None,
            seqno: 0,
            state: ControllerState::default(),
            stats: ControllerStats {
                sessions: 1,
                ..Default::default()
            },
            refs: ReferenceStats::default(),
            cycle: 0,
            last_ref_cycle: 0,
            last_dt: 0.004,
            pending: None,
        }
    }

    /// The session's state.
    pub fn session(&self) -> Session {
        self.session
    }

    /// Whether a session runs: only then does the controller send `EgmRobot` (the RAPID module
    /// starts no position streaming between sessions).
    pub fn session_running(&self) -> bool {
        matches!(self.session, Session::Running { .. })
    }

    /// The reference of this cycle (rad): the newest one received on the EGM wire, held.
    pub fn reference(&self) -> [f64; 6] {
        self.q_ref
    }

    /// The header seqno of the reply the reference came from (`None` before the first reply
    /// of a session, or when the program stopped and the controller holds its own joints).
    pub fn reference_seqno(&self) -> Option<u32> {
        self.q_ref_seqno
    }

    /// Measured joints (rad) and velocities (rad/s).
    pub fn joints(&self) -> ([f64; 6], [f64; 6]) {
        (self.servo.q(), self.servo.qd())
    }

    /// One whole EGM cycle of `dt` seconds: [`Controller::begin_cycle`] then
    /// [`Controller::advance`] over the cycle.
    pub fn step(&mut self, dt: f64) -> ([f64; 6], [f64; 6]) {
        self.begin_cycle(dt);
        self.advance(dt)
    }

    /// Starts an EGM cycle of `cycle_s` seconds: the newest reply (if any) becomes the
    /// reference, which enters the servo's delay line. Not under EGM control (motors off, EGM
    /// stopped) the controller holds where it is.
    pub fn begin_cycle(&mut self, cycle_s: f64) {
        self.cycle += 1;
        self.last_dt = cycle_s;
        let pending = self.pending.take();
        if !self.state.egm_running {
            // The program is stopped (the `controller_stopped` fault): no session runs; the
            // next starts when the program runs again, from the arm's joints.
            self.program_stopped = true;
            self.q_ref = self.servo.q();
            self.q_ref_seqno = None;
            self.servo.set_motors_on(self.state.motors_on);
            self.servo.push_reference(&self.q_ref);
            return;
        }
        if std::mem::take(&mut self.program_stopped) {
            self.stats.sessions += 1;
            self.session_unsent = true;
            self.session = Session::Running {
                age_s: 0.0,
                since_reply_s: 0.0,
                from: self.servo.q(),
            };
        }
        self.session = match self.session {
            Session::Running {
                age_s,
                since_reply_s,
                from,
            } => {
                let age_s = age_s + cycle_s;
                let since_reply_s = match pending {
                    Some((new, seqno)) => {
                        let a = if self.params.ramp_in_s > 0.0 {
                            (age_s / self.params.ramp_in_s).min(1.0)
                        } else {
                            1.0
                        };
                        let mut blended = new;
                        for (b, (n, f)) in blended.iter_mut().zip(new.iter().zip(from.iter())) {
                            *b = f + a * (n - f);
                        }
                        self.apply_reference(blended, seqno);
                        0.0
                    }
                    None => since_reply_s + cycle_s,
                };
                // Not `>=`: a reply arriving exactly on the timeout still counts (and keeps an
                // infinite timeout from ending anything).
                if since_reply_s > self.params.comm_timeout_s + 1e-12 {
                    self.stats.comm_timeouts += 1;
                    Session::Ended {
                        wait_s: self.params.ramp_out_s + self.params.restart_wait_s,
                    }
                } else {
                    Session::Running {
                        age_s,
                        since_reply_s,
                        from,
                    }
                }
            }
            Session::Ended { wait_s } => {
                let wait_s = wait_s - cycle_s;
                if wait_s <= 1e-12 {
                    self.stats.sessions += 1;
                    self.session_unsent = true;
                    Session::Running {
                        age_s: 0.0,
                        since_reply_s: 0.0,
                        from: self.servo.q(),
                    }
                } else {
                    Session::Ended { wait_s }
                }
            }
        };
        self.servo.set_motors_on(self.state.motors_on);
        if !(self.state.motors_on && self.state.egm_running && self.session_running()) {
            // EGM_STOP_HOLD (and no EGM at all): the arm stays where it is.
            self.q_ref = self.servo.q();
            self.q_ref_seqno = None;
        }
        self.servo.push_reference(&self.q_ref);
    }

    /// Integrates the servo over `dt` seconds (a base tick) towards the cycle's reference.
    pub fn advance(&mut self, dt: f64) -> ([f64; 6], [f64; 6]) {
        self.servo.set_motors_on(self.state.motors_on);
        self.servo.advance(dt)
    }

    /// New servo parameters (a scenario change), keeping the arm's state.
    pub fn set_servo_params(&mut self, params: crate::world::ServoParams) {
        self.servo.set_params(params);
    }

    /// The servo's parameters.
    pub fn servo_params(&self) -> &crate::world::ServoParams {
        self.servo.params()
    }

    /// Sets the controller's real-time clock: `epoch_us` (µs since 1970) is its reading at
    /// `tm` 0. `feedBack.time` is this plus `tm` (the shell reads the host's clock once).
    pub fn set_clock_epoch_us(&mut self, epoch_us: u64) {
        self.clock_epoch_us = epoch_us;
    }

    /// The `EgmRobot` for this cycle; `tm_ms` is the controller's clock; `tool0` the measured
    /// flange pose (mm, quaternion w x y z) for the Cartesian feedback, when known.
    pub fn robot_message(&mut self, tm_ms: u32, tool0: Option<([f64; 3], [f64; 4])>) -> RobotMsg {
        // Every session's first message is sequence number 0, then 1, 2, … (wrapping).
        self.seqno = if std::mem::take(&mut self.session_unsent) {
            0
        } else {
            self.seqno.wrapping_add(1)
        };
        let (q, _) = self.joints();
        let s = self.state;
        RobotMsg {
            seqno: self.seqno,
            tm_ms,
            feedback_deg: q.map(f64::to_degrees),
            tool0,
            feedback_time_us: Some(
                self.clock_epoch_us
                    .saturating_add(u64::from(tm_ms).saturating_mul(1000)),
            ),
            planned_deg: self.q_ref.map(f64::to_degrees),
            motors_on: s.motors_on,
            mci_running: s.egm_running && self.session_running(),
            mci_convergence_met: true,
            rapid_running: s.rapid_running,
        }
    }

    /// Applies one `EgmSensor` datagram: its planned joints (degrees) become the reference.
    /// Malformed or non-finite replies are counted and ignored.
    pub fn apply_reply(&mut self, datagram: &[u8]) {
        let Ok(msg) = decode_sensor(datagram) else {
            self.stats.malformed_replies += 1;
            return;
        };
        let Some(j) = msg.planned_deg.as_ref() else {
            self.stats.malformed_replies += 1;
            return;
        };
        if j.len() < 6 {
            self.stats.malformed_replies += 1;
            return;
        }
        if !j.iter().take(6).all(|v| v.is_finite()) {
            self.stats.nonfinite_replies += 1;
            return;
        }
        self.stats.replies += 1;
        let mut q = [0.0; 6];
        for (dst, v) in q.iter_mut().zip(j.iter()) {
            *dst = v.to_radians();
        }
        self.pending = Some((q, msg.seqno));
    }

    fn apply_reference(&mut self, new: [f64; 6], seqno: Option<u32>) {
        if !(self.state.motors_on && self.state.egm_running && self.session_running()) {
            return;
        }
        let lim = *self.servo.limits();
        let cycles = self.cycle.saturating_sub(self.last_ref_cycle).max(1) as f64;
        for (i, (r, v)) in self.q_ref.iter_mut().zip(new.iter()).enumerate() {
            let ratio = (v - *r).abs() / (lim.max_speed[i] * cycles * self.last_dt);
            self.refs.peak_speed_ratio = self.refs.peak_speed_ratio.max(ratio);
            if *v < lim.min[i] - 1e-9 || *v > lim.max[i] + 1e-9 {
                self.refs.out_of_limits += 1;
            }
            *r = *v;
        }
        self.q_ref_seqno = seqno;
        self.last_ref_cycle = self.cycle;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::world::servo::ServoParams;
    use kinematics::JointLimits;

    fn servo() -> ServoModel {
        ServoModel::new(
            ServoParams::default(),
            JointLimits::irb120(),
            [0.0, 0.0, 0.0, 0.0, 0.5, 0.0],
        )
    }

    fn ctl() -> Controller {
        Controller::new(servo(), SessionParams::ALWAYS_ON)
    }

    #[test]
    fn robot_message_reports_degrees_and_counts_its_sequence() {
        let mut c = ctl();
        c.set_clock_epoch_us(1_796_601_600_000_000);
        let m = c.robot_message(1234, Some(([374.0, 0.0, 630.0], [0.5, 0.5, 0.5, 0.5])));
        // A session's first message is sequence number 0 (a new session for the PC).
        assert_eq!(m.seqno, 0);
        assert_eq!(m.tm_ms, 1234);
        assert_eq!(m.feedback_time_us, Some(1_796_601_601_234_000));
        assert!((m.feedback_deg[4] - 0.5f64.to_degrees()).abs() < 1e-12);
        assert_eq!(m.tool0.map(|t| t.0[0]), Some(374.0));
        assert!(m.motors_on && m.mci_running && m.rapid_running);
        assert_eq!(c.robot_message(0, None).seqno, 1);
        assert_eq!(c.robot_message(0, None).seqno, 2);
    }

    #[test]
    fn every_new_session_starts_its_sequence_at_zero_and_the_clock_runs_on() {
        // After a comm timeout and after a program stop, the next session's first EgmRobot
        // has seqno 0 (so robot-io sees a restart, not a resumed link); feedBack.time keeps
        // counting with tm. Fails if the sequence keeps counting across sessions.
        let mut c = Controller::new(
            servo(),
            SessionParams {
                comm_timeout_s: 0.02,
                ramp_out_s: 0.0,
                restart_wait_s: 0.02,
                ..SessionParams::ALWAYS_ON
            },
        );
        let mut tm = 0u32;
        let mut seqnos = Vec::new();
        let mut times = Vec::new();
        for _ in 0..40 {
            c.step(0.004);
            tm += 4;
            if c.session_running() {
                let m = c.robot_message(tm, None);
                seqnos.push(m.seqno);
                times.push(m.feedback_time_us.unwrap());
            }
        }
        assert!(c.stats.sessions >= 3, "{:?}", c.stats);
        let zeros = seqnos.iter().filter(|s| **s == 0).count();
        assert_eq!(zeros as u64, c.stats.sessions, "{seqnos:?}");
        for w in seqnos.windows(2) {
            assert!(w[1] == 0 || w[1] == w[0] + 1, "{seqnos:?}");
        }
        assert!(times.windows(2).all(|w| w[1] > w[0]), "{times:?}");
        // A program stop and start: the next message is a new session's.
        c.state.egm_running = false;
        c.step(0.004);
        c.state.egm_running = true;
        c.step(0.004);
        assert!(c.session_running());
        assert_eq!(c.robot_message(tm + 8, None).seqno, 0);
    }

    #[test]
    fn replies_drive_the_servo_and_bad_ones_are_ignored() {
        let mut c = ctl();
        let reply = joint_reply;
        c.apply_reply(&reply([10.0, 0.0, 0.0, 0.0, 30.0, 0.0]));
        for _ in 0..1000 {
            c.step(0.004);
        }
        assert!((c.joints().0[0] - 10f64.to_radians()).abs() < 1e-3);
        c.apply_reply(&reply([f64::NAN, 0.0, 0.0, 0.0, 30.0, 0.0]));
        c.apply_reply(b"\xff\xff\xff");
        assert_eq!(c.stats.nonfinite_replies, 1);
        assert_eq!(c.stats.malformed_replies, 1);
        // Motors off: the reference follows the measurement, nothing moves.
        c.state.motors_on = false;
        c.apply_reply(&reply([-10.0, 0.0, 0.0, 0.0, 30.0, 0.0]));
        for _ in 0..100 {
            c.step(0.004);
        }
        assert!((c.joints().0[0] - 10f64.to_radians()).abs() < 1e-3);
    }

    #[test]
    fn the_reference_names_the_reply_it_came_from_and_the_newest_of_a_cycle_wins() {
        let mut c = ctl();
        assert_eq!(c.reference_seqno(), None);
        let q = [0.0, 0.0, 0.0, 0.0, 30.0, 0.0];
        c.apply_reply(&crate::wire::egm::sensor_message(7, 0, &q));
        c.step(0.004);
        assert_eq!(c.reference_seqno(), Some(7));
        // No reply this cycle: the controller holds the reference and its seqno.
        c.step(0.004);
        assert_eq!(c.reference_seqno(), Some(7));
        // Two replies within one cycle: the newest is applied, the other never is.
        c.apply_reply(&crate::wire::egm::sensor_message(8, 0, &q));
        c.apply_reply(&crate::wire::egm::sensor_message(9, 0, &q));
        c.step(0.004);
        assert_eq!(c.reference_seqno(), Some(9));
        // Motors off: the controller holds its own joints, from no reply.
        c.state.motors_on = false;
        c.apply_reply(&crate::wire::egm::sensor_message(10, 0, &q));
        c.step(0.004);
        assert_eq!(c.reference_seqno(), None);
    }

    fn joint_reply(deg: [f64; 6]) -> Vec<u8> {
        crate::wire::egm::sensor_message(0, 0, &deg)
    }

    fn shipped() -> SessionParams {
        SessionParams::from_irc5(
            &irc5::Irc5Egm::builtin()
                .expect("deploy/irc5 parses")
                .session,
        )
    }

    #[test]
    fn a_silent_pc_ends_the_session_after_the_comm_timeout_and_the_arm_holds() {
        let p = shipped();
        let mut c = Controller::new(servo(), p);
        let dt = 0.004;
        // robot-io moves joint 1 at 20 deg/s for 1 s, answering every cycle...
        let mut t = 0.0;
        for _ in 0..250 {
            c.begin_cycle(dt);
            c.advance(dt);
            t += dt;
            c.apply_reply(&joint_reply([
                20.0 * t,
                0.0,
                0.0,
                0.0,
                0.5f64.to_degrees(),
                0.0,
            ]));
        }
        // ... then falls silent (frozen, crashed, link cut): its last reply is applied at the
        // next cycle, which starts the timeout.
        c.begin_cycle(dt);
        c.advance(dt);
        let last = c.reference();
        assert!(last[0] > 19f64.to_radians(), "{last:?}");
        let timeout_cycles = (p.comm_timeout_s / dt).round() as usize;
        for k in 0..timeout_cycles {
            c.begin_cycle(dt);
            c.advance(dt);
            assert!(c.session_running(), "cycle {k}: ended before the timeout");
            // The reference never moves past the last command.
            assert_eq!(c.reference(), last, "cycle {k}");
            let m = c.robot_message(0, None);
            assert!(m.mci_running);
        }
        c.begin_cycle(dt);
        c.advance(dt);
        assert!(!c.session_running(), "{:?}", c.session());
        assert_eq!(c.stats.comm_timeouts, 1);
        // EGM_STOP_HOLD: the arm stays where it is; a late reply moves nothing.
        let q_end = c.joints().0;
        assert!((q_end[0] - last[0]).abs() < 1e-3, "{q_end:?} vs {last:?}");
        let m = c.robot_message(0, None);
        assert!(!m.mci_running);
        let wait_cycles = ((p.ramp_out_s + p.restart_wait_s) / dt).round() as usize;
        for k in 1..wait_cycles {
            c.apply_reply(&joint_reply([40.0, 0.0, 0.0, 0.0, 30.0, 0.0]));
            c.begin_cycle(dt);
            c.advance(dt);
            assert!(!c.session_running(), "cycle {k} of the wait");
            assert!((c.joints().0[0] - q_end[0]).abs() < 1e-3);
        }
        // The RAPID loop starts the next session: from the measured joints, replies ramped in.
        c.begin_cycle(dt);
        c.advance(dt);
        assert!(c.session_running());
        assert_eq!(c.stats.sessions, 2);
        let start = c.reference();
        let target = start[0].to_degrees() + 1.0;
        c.apply_reply(&joint_reply([
            target,
            0.0,
            0.0,
            0.0,
            0.5f64.to_degrees(),
            0.0,
        ]));
        c.begin_cycle(dt);
        let moved = (c.reference()[0] - start[0]).to_degrees();
        let a = dt / p.ramp_in_s;
        assert!(
            (moved - a).abs() < 1e-9,
            "first reference of the new session moved {moved} deg, the ramp-in allows {a}"
        );
        for _ in 0..((p.ramp_in_s / dt) as usize + 1) {
            c.apply_reply(&joint_reply([
                target,
                0.0,
                0.0,
                0.0,
                0.5f64.to_degrees(),
                0.0,
            ]));
            c.begin_cycle(dt);
        }
        assert!((c.reference()[0].to_degrees() - target).abs() < 1e-9);
    }

    #[test]
    fn a_reply_within_the_timeout_keeps_the_session() {
        let p = shipped();
        let mut c = Controller::new(servo(), p);
        let dt = 0.004;
        let every = (p.comm_timeout_s / dt).round() as usize;
        for k in 0..(every * 5) {
            if k % every == 0 {
                c.apply_reply(&joint_reply([0.0, 0.0, 0.0, 0.0, 0.5f64.to_degrees(), 0.0]));
            }
            c.begin_cycle(dt);
        }
        assert!(c.session_running());
        assert_eq!(c.stats.comm_timeouts, 0);
        // Always on: never ends.
        let mut c = ctl();
        for _ in 0..10_000 {
            c.begin_cycle(dt);
        }
        assert!(c.session_running());
    }

    /// Measured lag (s) of joint 1 behind a constant-speed reference once in steady state,
    /// replies applied as the emulator does (one per cycle, applied at the next cycle).
    fn ramp_lag(ticks_per_cycle: usize) -> f64 {
        let mut c = ctl();
        let cycle = 0.004;
        let tick = cycle / ticks_per_cycle as f64;
        let speed = 0.2; // rad/s, well below the speed limit
        let mut t = 0.0;
        let mut lag = 0.0;
        for _ in 0..500 {
            c.begin_cycle(cycle);
            for _ in 0..ticks_per_cycle {
                c.advance(tick);
                t += tick;
            }
            // robot-io answers the EgmRobot of this cycle with the reference for "now".
            let r = speed * t;
            let q = c.joints().0[0];
            lag = (r - q) / speed;
            let deg = [r.to_degrees(), 0.0, 0.0, 0.0, 0.5f64.to_degrees(), 0.0];
            c.apply_reply(&joint_reply(deg));
        }
        lag
    }

    #[test]
    fn base_tick_stepping_keeps_the_effective_lag() {
        // algorithms.md §D: ≈ 30 ms effective lag at the 4 ms cycle (2ζ/ωn ≈ 20.5 ms of the
        // 10 Hz loop + 2 cycles of transport delay + the reply applied one cycle later). The
        // same whether the servo is advanced in 1 ms base ticks or once per cycle.
        let whole = ramp_lag(1);
        let ticked = ramp_lag(4);
        assert!((whole - ticked).abs() < 1e-9, "{whole} vs {ticked}");
        assert!((0.028..0.036).contains(&ticked), "lag {ticked} s");
    }
}
