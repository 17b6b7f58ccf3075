//! The pure side of an EGM session (no sockets, no clocks: every time is a parameter, in
//! seconds of any monotonic epoch).
//!
//! Per received `EgmRobot` ([`EgmSession::on_robot`]): measured joints (deg → rad), a joint
//! velocity estimate (EGM feedback carries no velocities: finite difference over the
//! controller's own clock, between consecutive sequence numbers), the controller states
//! mapped to [`RobotStatus`], seqno gap counting (lost datagrams), session start/restart and
//! controller stop detection, timing statistics.
//!
//! Per reply ([`EgmSession::reply`]): an `EgmSensor` with header seqno +1 per reply (0 at the
//! start of each EGM session, like abb_libegm), `tm` = our clock in ms, mtype CORRECTION,
//! `planned.joints` in degrees and, optionally, `speedRef.joints` in deg/s. **Nothing
//! non-finite is ever encoded**: a non-finite reference is replaced by the last sent
//! reference, resent unchanged ([`EgmSession::resend`]). The session never invents a position of
//! its own: what goes out is the supervisor's reference or a resend of the last one.

use common::msg::{RobotStatus, AXES};
use serde::Serialize;

use super::{
    frame::{RobotFrame, SensorReply},
    proto::{ForceSchema, MciStateType, MeasuredForce, MotorStateType, RapidCtrlExecStateType},
};

/// A seqno jump forward larger than this (or any jump backwards beyond [`REORDER_WINDOW`]) is a
/// new session, not a loss.
pub const MAX_GAP: u32 = 10_000;
/// A seqno at most this far behind the newest one is a late (reordered) datagram.
pub const REORDER_WINDOW: u32 = 16;

/// Session tuning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionParams {
    /// Nominal controller cycle (s): the fallback step time when the controller's clock does not
    /// give a plausible one.
    pub nominal_cycle_s: f64,
    /// No `EgmRobot` for this long → the robot is silent (s).
    pub silence_timeout_s: f64,
    /// Send `speedRef.joints` (deg/s) along with `planned.joints`.
    pub send_speed_ref: bool,
}

impl SessionParams {
    /// An IRC5 at its 4 ms EGM cycle: silent after 50 ms, speed references sent (robot-io's
    /// defaults).
    pub const IRC5: SessionParams = SessionParams {
        nominal_cycle_s: 0.004,
        silence_timeout_s: 0.05,
        send_speed_ref: true,
    };
}

/// The controller's reported states, as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ControllerStates {
    #[serde(serialize_with = "ser_debug")]
    pub motor: MotorStateType,
    #[serde(serialize_with = "ser_debug")]
    pub mci: MciStateType,
    #[serde(serialize_with = "ser_debug")]
    pub rapid: RapidCtrlExecStateType,
    pub mci_convergence_met: Option<bool>,
}

fn ser_debug<T: std::fmt::Debug, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:?}"))
}

impl ControllerStates {
    /// The cell's view: motors on, EGM (MCI) running, RAPID running. RAPID `Undefined` counts
    /// as running while MCI runs (a known controller bug leaves it undefined after a restart;
    /// abb_libegm accepts it the same way).
    pub fn status(&self) -> RobotStatus {
        let mci_running = self.mci == MciStateType::Running;
        RobotStatus {
            motors_on: self.motor == MotorStateType::On,
            external_control_active: mci_running,
            program_running: self.rapid == RapidCtrlExecStateType::Running
                || (self.rapid == RapidCtrlExecStateType::Undefined && mci_running),
        }
    }
    fn ready(&self) -> bool {
        let s = self.status();
        s.motors_on && s.external_control_active
    }
}

/// Which schema generation the controller speaks (from the fields it sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SchemaGuess {
    /// No `feedBack.time`: RobotWare < 6.07 (inconsistent units; not supported for motion).
    V10,
    /// `feedBack.time` present (RW ≥ 6.07).
    V11,
    /// V1.1 with `utilizationRate` (RW ≥ 6.10).
    V11Rw610,
    /// Newer fields seen (`moveIndex`, `CollisionInfo`, `RAPIDfromRobot`, newer measuredForce).
    Newer,
}

/// Session-level events worth logging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// First `EgmRobot` ever.
    Started,
    /// The controller started a new EGM session (seqno 0 or a jump).
    Restarted,
    /// Datagrams arrive again after a silence.
    Resumed,
    /// Motors went off or EGM (MCI) stopped running.
    ControllerStopped(ControllerStates),
    /// Motors on and EGM running again.
    ControllerReady,
}

/// What one `EgmRobot` says, in the cell's units.
#[derive(Debug, Clone, PartialEq)]
pub struct Feedback {
    pub seqno: Option<u32>,
    pub tm_ms: Option<u32>,
    pub q_rad: [f64; AXES],
    /// Finite-difference estimate over the controller's clock; `None` for the first message of
    /// a session or after a gap of unknown duration.
    pub qd_rad_s: Option<[f64; AXES]>,
    pub status: RobotStatus,
    pub states: ControllerStates,
    /// Time this reference step spans on the controller (s): Δtm since the previous datagram
    /// (lost datagrams included) when plausible, else the nominal cycle. Published as
    /// `JointState::period_s`.
    pub dt_s: f64,
    /// The controller's cycle period (s): Δtm per cycle (over any lost datagrams) when
    /// plausible, else the nominal cycle.
    pub period_s: f64,
    /// Datagrams lost just before this one (seqno gap).
    pub lost_before: u32,
    pub schema: SchemaGuess,
    /// measuredForce, when sent and parseable, and valid (`fcActive` absent or true).
    pub force: Option<MeasuredForce>,
    pub events: Vec<SessionEvent>,
}

/// Why an `EgmRobot` gives no usable feedback (it is still answered, holding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FeedbackError {
    #[error("no feedBack.joints")]
    NoJoints,
    #[error("feedBack.joints has {0} values, expected 6")]
    JointCount(usize),
    #[error("non-finite feedBack.joints")]
    NonFinite,
    #[error("late datagram (seqno behind the newest)")]
    Late,
    #[error("duplicate datagram (same seqno as the newest)")]
    Duplicate,
}

impl FeedbackError {
    /// Late and duplicate datagrams are not a new controller cycle: the answer is the last
    /// reference, resent unchanged, and the supervisor is not stepped.
    pub fn is_repeat(&self) -> bool {
        matches!(self, FeedbackError::Late | FeedbackError::Duplicate)
    }
}

/// Running mean / standard deviation / min / max (Welford).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunningStats {
    pub n: u64,
    mean: f64,
    m2: f64,
    pub min: f64,
    pub max: f64,
}

impl RunningStats {
    pub fn add(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        self.n += 1;
        if self.n == 1 {
            self.min = x;
            self.max = x;
        } else {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
    pub fn mean(&self) -> f64 {
        self.mean
    }
    pub fn std(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            (self.m2 / (self.n - 1) as f64).max(0.0).sqrt()
        }
    }
    /// `{n, mean, std, min, max}` scaled by `k` (e.g. 1e3 for ms).
    pub fn json(&self, k: f64) -> serde_json::Value {
        serde_json::json!({
            "n": self.n,
            "mean": self.mean * k,
            "std": self.std() * k,
            "min": self.min * k,
            "max": self.max * k,
        })
    }
}

/// Counters and timing of the session (for status).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionStats {
    /// Datagrams handed to [`EgmSession::on_robot`].
    pub received: u64,
    /// Seqno gaps (datagrams the controller sent that never arrived).
    pub lost: u64,
    /// Late (reordered) or duplicate datagrams.
    pub late: u64,
    pub duplicates: u64,
    /// Decoded but without usable joints.
    pub incomplete: u64,
    /// EGM sessions seen (start + restarts).
    pub sessions: u64,
    /// Sessions the controller restarted after the first (sequence number 0 or a jump): a
    /// controller restart, a program stop and start, or a session after a comm timeout.
    pub restarts: u64,
    /// Silences (no datagram for the timeout) since start.
    pub silences: u64,
    /// Times the controller reported MCI state ERROR (an EGM error ended its session: a
    /// reference beyond a limit or `\MaxSpeedDeviation`, a session not started from a fine
    /// point), and the newest: (seqno, tm ms, our time s).
    pub controller_errors: u64,
    /// The sequence number of the newest session's first datagram (0 when the controller
    /// restarted it as ABB documents and nothing was lost).
    pub session_first_seqno: Option<u32>,
    pub last_controller_error: Option<(Option<u32>, Option<u32>, f64)>,
    pub replies: u64,
    /// Replies whose reference was not finite and was replaced by the measured position.
    pub replaced_non_finite: u64,
    /// Local arrival period (s), silences excluded.
    pub period: RunningStats,
    /// Controller period from Δtm (s).
    pub controller_period: RunningStats,
    /// Our turnaround: datagram received → reply sent (s).
    pub turnaround: RunningStats,
    /// Robot send → our reply (s), estimated: the controller's send time is mapped to our clock
    /// with the smallest observed (arrival − tm) offset of the session, so this is the
    /// turnaround plus the arrival delay beyond the best case seen.
    pub robot_to_reply: RunningStats,
}

impl SessionStats {
    pub fn json(&self) -> serde_json::Value {
        let mean = self.period.mean();
        serde_json::json!({
            "received": self.received,
            "lost": self.lost,
            "late": self.late,
            "duplicates": self.duplicates,
            "incomplete": self.incomplete,
            "sessions": self.sessions,
            "restarts": self.restarts,
            "silences": self.silences,
            "controller_errors": self.controller_errors,
            "session_first_seqno": self.session_first_seqno,
            "last_controller_error": self.last_controller_error.map(|(seqno, tm, at)| serde_json::json!({
                "mci": "Error", "seqno": seqno, "tm_ms": tm, "at_s": at,
            })),
            "replies": self.replies,
            "replaced_non_finite": self.replaced_non_finite,
            "rate_hz": if mean > 0.0 { 1.0 / mean } else { 0.0 },
            "period_ms": self.period.json(1e3),
            "jitter_std_ms": self.period.std() * 1e3,
            "controller_period_ms": self.controller_period.json(1e3),
            "turnaround_ms": self.turnaround.json(1e3),
            "robot_to_reply_ms": self.robot_to_reply.json(1e3),
        })
    }
}

/// One EGM session's state, across controller restarts.
#[derive(Debug, Clone)]
pub struct EgmSession {
    p: SessionParams,
    stats: SessionStats,
    /// Seqno of the next reply.
    reply_seq: u32,
    last_seqno: Option<u32>,
    last_tm: Option<u32>,
    last_q: Option<[f64; AXES]>,
    last_states: Option<ControllerStates>,
    last_schema: Option<SchemaGuess>,
    last_rx_s: Option<f64>,
    /// Minimum (arrival − tm) of this session (s).
    min_offset_s: Option<f64>,
    /// Estimated controller send time of the newest datagram, on our clock (s).
    last_robot_send_s: Option<f64>,
    /// Measured joints of the newest datagram (deg), finite.
    measured_deg: Option<[f64; AXES]>,
    /// The same in rad, as handed out in [`Feedback::q_rad`].
    measured_rad: Option<[f64; AXES]>,
    /// The last reference sent (deg) and its speed (deg/s), finite.
    sent_deg: Option<[f64; AXES]>,
    sent_speed_deg: [f64; AXES],
    /// Step time of the newest datagram (s): Δtm when plausible, else the nominal cycle.
    last_dt_s: f64,
    /// The newest datagram started a new EGM session.
    last_new_session: bool,
    /// The newest controller clock (`tm`, ms) seen, across sessions: a datagram behind in
    /// sequence but ahead in time is a new session whose first datagrams were lost.
    newest_tm: Option<u32>,
    silent: bool,
}

impl EgmSession {
    pub fn new(p: SessionParams) -> Self {
        Self {
            p,
            stats: SessionStats::default(),
            reply_seq: 0,
            last_seqno: None,
            last_tm: None,
            last_q: None,
            last_states: None,
            last_schema: None,
            last_rx_s: None,
            min_offset_s: None,
            last_robot_send_s: None,
            measured_deg: None,
            measured_rad: None,
            sent_deg: None,
            sent_speed_deg: [0.0; AXES],
            last_dt_s: p.nominal_cycle_s,
            last_new_session: false,
            newest_tm: None,
            silent: true,
        }
    }

    pub fn params(&self) -> &SessionParams {
        &self.p
    }
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }
    pub fn last_states(&self) -> Option<ControllerStates> {
        self.last_states
    }
    pub fn schema(&self) -> Option<SchemaGuess> {
        self.last_schema
    }
    /// Step time of the newest (non-repeat) datagram (s), also when it had no usable joints.
    pub fn last_dt_s(&self) -> f64 {
        self.last_dt_s
    }
    /// The newest (non-repeat) datagram started a new EGM session (its reply is the first of
    /// the session).
    pub fn last_new_session(&self) -> bool {
        self.last_new_session
    }
    /// Time of the newest datagram (s).
    pub fn last_rx_s(&self) -> Option<f64> {
        self.last_rx_s
    }

    /// True when no datagram arrived within the silence timeout (or none ever). The first
    /// call that finds a new silence counts it.
    pub fn check_silent(&mut self, now_s: f64) -> bool {
        let silent = match self.last_rx_s {
            None => true,
            Some(t) => {
                let age = now_s - t;
                age.is_nan() || age > self.p.silence_timeout_s
            }
        };
        if silent && !self.silent {
            self.stats.silences += 1;
            // Velocity estimates must not span the silence.
            self.last_q = None;
        }
        self.silent = silent;
        silent
    }

    /// Digests one decoded `EgmRobot` received at `now_s`.
    /// Takes the allocation-free [`RobotFrame`] (or a prost `&EgmRobot`, converted).
    pub fn on_robot<'a>(
        &mut self,
        msg: impl Into<RobotFrame<'a>>,
        now_s: f64,
    ) -> Result<Feedback, FeedbackError> {
        let msg: RobotFrame<'a> = msg.into();
        self.stats.received += 1;
        let mut events = Vec::new();
        let seqno = msg.seqno();
        let tm = msg.tm();

        // Sequence: start, restart, gap, duplicate, late.
        let mut lost_before = 0;
        let mut new_session = false;
        let mut continuous = false;
        match (self.last_seqno, seqno) {
            (None, _) => {
                new_session = true;
                events.push(SessionEvent::Started);
            }
            (Some(_), Some(0)) => new_session = true,
            (Some(last), Some(s)) => {
                let fwd = s.wrapping_sub(last);
                let back = last.wrapping_sub(s);
                // Ahead of every datagram seen on the controller's clock (by less than half
                // its range): not a late or repeated datagram.
                let newer_clock = match (self.newest_tm, tm) {
                    (Some(n), Some(t)) => (1..=u32::MAX / 2).contains(&t.wrapping_sub(n)),
                    _ => false,
                };
                if (fwd == 0 || (fwd > MAX_GAP && back <= REORDER_WINDOW)) && newer_clock {
                    // A restarted session whose seqno-0 datagram (and maybe more) was lost.
                    new_session = true;
                } else if fwd == 0 {
                    self.stats.duplicates += 1;
                    return Err(FeedbackError::Duplicate);
                } else if fwd <= MAX_GAP {
                    lost_before = fwd - 1;
                    continuous = true;
                } else if back <= REORDER_WINDOW {
                    self.stats.late += 1;
                    return Err(FeedbackError::Late);
                } else {
                    new_session = true;
                }
            }
            (Some(_), None) => {}
        }
        self.last_new_session = new_session;
        if new_session {
            if !events.contains(&SessionEvent::Started) {
                events.push(SessionEvent::Restarted);
                self.stats.restarts += 1;
            }
            self.stats.sessions += 1;
            self.stats.session_first_seqno = seqno;
            self.reply_seq = 0;
            self.min_offset_s = None;
            self.last_tm = None;
            self.last_q = None;
        } else if self.silent {
            events.push(SessionEvent::Resumed);
        }
        self.stats.lost += u64::from(lost_before);
        if seqno.is_some() {
            self.last_seqno = seqno;
        }
        if let Some(t) = tm {
            let ahead = self
                .newest_tm
                .is_none_or(|n| (1..=u32::MAX / 2).contains(&t.wrapping_sub(n)));
            if ahead {
                self.newest_tm = Some(t);
            }
        }
        self.silent = false;

        // Timing.
        if let Some(prev) = self.last_rx_s {
            let dt = now_s - prev;
            if dt >= 0.0 && dt <= self.p.silence_timeout_s && !new_session {
                self.stats.period.add(dt);
            }
        }
        self.last_rx_s = Some(now_s);
        let mut dt_s = self.p.nominal_cycle_s;
        self.last_dt_s = dt_s;
        let mut dtm_s = None;
        if let (Some(prev), Some(t), true) = (self.last_tm, tm, continuous) {
            let d = f64::from(t.wrapping_sub(prev)) * 1e-3;
            // Plausible: up to 3 nominal cycles per cycle spanned (lost datagrams included).
            if d > 0.0 && d <= 3.0 * self.p.nominal_cycle_s.max(1e-3) * f64::from(lost_before + 1) {
                dt_s = d;
                self.last_dt_s = d;
                dtm_s = Some(d);
                self.stats
                    .controller_period
                    .add(d / f64::from(lost_before + 1));
            }
        }
        if let Some(t) = tm {
            let offset = now_s - f64::from(t) * 1e-3;
            let m = self.min_offset_s.map_or(offset, |m| m.min(offset));
            self.min_offset_s = Some(m);
            self.last_robot_send_s = Some(f64::from(t) * 1e-3 + m);
            self.last_tm = tm;
        } else {
            self.last_robot_send_s = None;
        }

        // Controller states.
        let states = ControllerStates {
            motor: msg.motor_state_type(),
            mci: msg.mci_state_type(),
            rapid: msg.rapid_state_type(),
            mci_convergence_met: msg.mci_convergence_met,
        };
        if states.mci == MciStateType::Error
            && self.last_states.map(|p| p.mci) != Some(MciStateType::Error)
        {
            self.stats.controller_errors += 1;
            self.stats.last_controller_error = Some((seqno, tm, now_s));
        }
        match self.last_states {
            Some(prev) if prev.ready() && !states.ready() => {
                events.push(SessionEvent::ControllerStopped(states))
            }
            None if !states.ready() => events.push(SessionEvent::ControllerStopped(states)),
            Some(prev) if !prev.ready() && states.ready() => {
                events.push(SessionEvent::ControllerReady)
            }
            None if states.ready() => events.push(SessionEvent::ControllerReady),
            _ => {}
        }
        self.last_states = Some(states);

        // Schema generation and force.
        let force = msg.force().and_then(|r| r.ok());
        let has_time = msg.feedback_time;
        let schema = if msg.move_index.is_some()
            || msg.collision_info
            || msg.rapid_from_robot
            || force
                .as_ref()
                .is_some_and(|f| f.schema == ForceSchema::Newer)
        {
            SchemaGuess::Newer
        } else if !has_time {
            SchemaGuess::V10
        } else if msg.utilization_rate.is_some() {
            SchemaGuess::V11Rw610
        } else {
            SchemaGuess::V11
        };
        self.last_schema = Some(schema);

        // Joints.
        let joints = match &msg.feedback_joints {
            None => return self.incomplete(FeedbackError::NoJoints),
            Some(j) if j.len() != AXES => {
                return self.incomplete(FeedbackError::JointCount(j.len()))
            }
            Some(j) if !j.as_slice().iter().all(|v| v.is_finite()) => {
                return self.incomplete(FeedbackError::NonFinite)
            }
            Some(j) => *j,
        };
        let mut q_deg = [0.0; AXES];
        q_deg.copy_from_slice(joints.as_slice());
        let q_rad = q_deg.map(f64::to_radians);
        let qd_rad_s = match (self.last_q, dtm_s) {
            (Some(prev), Some(d)) => {
                let mut v = [0.0; AXES];
                for j in 0..AXES {
                    v[j] = (q_rad[j] - prev[j]) / d;
                }
                Some(v)
            }
            _ => None,
        };
        self.last_q = Some(q_rad);
        self.measured_deg = Some(q_deg);
        self.measured_rad = Some(q_rad);

        Ok(Feedback {
            seqno,
            tm_ms: tm,
            q_rad,
            qd_rad_s,
            status: states.status(),
            states,
            dt_s,
            period_s: dtm_s.map_or(self.p.nominal_cycle_s, |d| d / f64::from(lost_before + 1)),
            lost_before,
            schema,
            force: force.filter(MeasuredForce::valid),
            events,
        })
    }

    fn incomplete(&mut self, e: FeedbackError) -> Result<Feedback, FeedbackError> {
        self.stats.incomplete += 1;
        self.last_q = None;
        Err(e)
    }

    /// The reply to the newest `EgmRobot`: `q_ref_rad` as `planned.joints` (deg) and, when
    /// configured, `qd_ref_rad_s` as `speedRef.joints` (deg/s). If any reference value is not
    /// finite, the last measured position is sent instead (speed 0). `None` only if nothing
    /// finite is known at all (no measurement yet and a non-finite reference).
    pub fn reply(
        &mut self,
        q_ref_rad: &[f64; AXES],
        qd_ref_rad_s: &[f64; AXES],
        now_s: f64,
    ) -> Option<SensorReply> {
        let mut q_deg = q_ref_rad.map(f64::to_degrees);
        // A joint held exactly at its measured value goes back exactly as measured (no
        // deg → rad → deg rounding).
        if let (Some(m_rad), Some(m_deg)) = (self.measured_rad, self.measured_deg) {
            for j in 0..AXES {
                if q_ref_rad[j] == m_rad[j] {
                    q_deg[j] = m_deg[j];
                }
            }
        }
        let qd_deg = qd_ref_rad_s.map(f64::to_degrees);
        let finite = q_deg.iter().chain(qd_deg.iter()).all(|v| v.is_finite());
        if finite {
            return Some(self.build(q_deg, qd_deg, now_s));
        }
        self.stats.replaced_non_finite += 1;
        self.resend(now_s)
    }

    /// The last reference sent, unchanged (position and speed), with a new header. `None`
    /// when nothing was sent yet in this process.
    pub fn resend(&mut self, now_s: f64) -> Option<SensorReply> {
        let q = self.sent_deg?;
        Some(self.build(q, self.sent_speed_deg, now_s))
    }

    fn build(&mut self, q_deg: [f64; AXES], qd_deg: [f64; AXES], now_s: f64) -> SensorReply {
        let seqno = self.reply_seq;
        self.reply_seq = self.reply_seq.wrapping_add(1);
        self.stats.replies += 1;
        self.sent_deg = Some(q_deg);
        self.sent_speed_deg = qd_deg;
        // Our clock in ms; wraps like the controller's u32 tm.
        let tm = if now_s.is_finite() && now_s >= 0.0 {
            ((now_s * 1e3) as u64 & u64::from(u32::MAX)) as u32
        } else {
            0
        };
        SensorReply {
            seqno,
            tm,
            q_deg,
            qd_deg: self.p.send_speed_ref.then_some(qd_deg),
        }
    }

    /// Records that the reply to the newest datagram left at `sent_s`.
    pub fn on_reply_sent(&mut self, sent_s: f64) {
        if let Some(rx) = self.last_rx_s {
            self.stats.turnaround.add(sent_s - rx);
        }
        if let Some(tx) = self.last_robot_send_s {
            self.stats.robot_to_reply.add(sent_s - tx);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::needless_range_loop)]
pub(crate) mod tests {
    use super::*;
    use crate::egm::proto::{
        joints, EgmClock, EgmFeedBack, EgmHeader, EgmMciState, EgmMeasuredForce, EgmMotorState,
        EgmRapidCtrlExecState, EgmRobot, EgmSensor, MessageType,
    };
    use proptest::prelude::*;
    use prost::Message;

    const P: SessionParams = SessionParams::IRC5;

    /// The replies as prost's typed `EgmSensor`, for field-by-field checks.
    trait Typed {
        fn reply_p(&mut self, q: &[f64; 6], qd: &[f64; 6], t: f64) -> Option<EgmSensor>;
        fn resend_p(&mut self, t: f64) -> Option<EgmSensor>;
    }
    impl Typed for EgmSession {
        fn reply_p(&mut self, q: &[f64; 6], qd: &[f64; 6], t: f64) -> Option<EgmSensor> {
            self.reply(q, qd, t).map(|r| r.to_proto())
        }
        fn resend_p(&mut self, t: f64) -> Option<EgmSensor> {
            self.resend(t).map(|r| r.to_proto())
        }
    }

    /// A controller's `EgmRobot` (V1.1 fields) for tests.
    pub(crate) fn robot(seq: u32, tm: u32, q_deg: [f64; 6], ready: bool) -> EgmRobot {
        EgmRobot {
            header: Some(EgmHeader {
                seqno: Some(seq),
                tm: Some(tm),
                mtype: Some(MessageType::Data as i32),
            }),
            feed_back: Some(EgmFeedBack {
                joints: Some(joints(&q_deg)),
                time: Some(EgmClock { sec: 1, usec: 0 }),
                ..Default::default()
            }),
            motor_state: Some(EgmMotorState {
                state: if ready {
                    MotorStateType::On
                } else {
                    MotorStateType::Off
                } as i32,
            }),
            mci_state: Some(EgmMciState {
                state: if ready {
                    MciStateType::Running
                } else {
                    MciStateType::Stopped
                } as i32,
            }),
            rapid_exec_state: Some(EgmRapidCtrlExecState {
                state: RapidCtrlExecStateType::Running as i32,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn joints_states_and_velocity() {
        let mut s = EgmSession::new(P);
        let f = s.on_robot(&robot(0, 100, [0.0; 6], true), 1.0).unwrap();
        assert_eq!(
            f.events,
            vec![SessionEvent::Started, SessionEvent::ControllerReady]
        );
        assert!(f.status.motors_on && f.status.external_control_active && f.status.program_running);
        assert_eq!(f.qd_rad_s, None);
        assert_eq!(f.schema, SchemaGuess::V11);
        let f = s
            .on_robot(
                &robot(1, 104, [4.0, 0.0, 0.0, 0.0, 0.0, -90.0], true),
                1.004,
            )
            .unwrap();
        assert!((f.q_rad[5] + std::f64::consts::FRAC_PI_2).abs() < 1e-15);
        let qd = f.qd_rad_s.unwrap();
        assert!((qd[0] - 1000f64.to_radians()).abs() < 1e-9, "{qd:?}");
        assert!((f.dt_s - 0.004).abs() < 1e-12);
        assert!((f.period_s - 0.004).abs() < 1e-12);
        assert!(f.events.is_empty());
    }

    /// The period published with each joint state is the robot clock's step per cycle, not
    /// the receive times' (which carry the host's jitter), and spans lost datagrams.
    #[test]
    fn period_is_the_robot_clocks_step_per_cycle() {
        let mut s = EgmSession::new(P);
        let q = [0.0; 6];
        let first = s.on_robot(&robot(1, 1000, q, true), 0.0).unwrap();
        assert_eq!(first.period_s, P.nominal_cycle_s, "no step yet: nominal");
        // A robot on a 5 ms clock, received 3.1 ms and 6.9 ms apart.
        let f = s.on_robot(&robot(2, 1005, q, true), 0.0031).unwrap();
        assert!((f.period_s - 0.005).abs() < 1e-12, "{}", f.period_s);
        let f = s.on_robot(&robot(3, 1010, q, true), 0.0100).unwrap();
        assert!((f.period_s - 0.005).abs() < 1e-12, "{}", f.period_s);
        // A datagram lost: 10 ms of robot time over two cycles; the step spans both.
        let f = s.on_robot(&robot(5, 1020, q, true), 0.0200).unwrap();
        assert_eq!(f.lost_before, 1);
        assert!((f.period_s - 0.005).abs() < 1e-12, "{}", f.period_s);
        assert!((f.dt_s - 0.010).abs() < 1e-12, "{}", f.dt_s);
        // Three lost: 20 ms spanned (beyond 3 nominal cycles, plausible for 4 cycles).
        let f = s.on_robot(&robot(9, 1040, q, true), 0.0400).unwrap();
        assert_eq!(f.lost_before, 3);
        assert!((f.dt_s - 0.020).abs() < 1e-12, "{}", f.dt_s);
    }

    #[test]
    fn seqno_gaps_restart_late_and_duplicates() {
        let mut s = EgmSession::new(P);
        let q = [0.0; 6];
        s.on_robot(&robot(10, 0, q, true), 0.0).unwrap();
        let f = s.on_robot(&robot(13, 12, q, true), 0.012).unwrap();
        assert_eq!(f.lost_before, 2);
        assert!((f.dt_s - 0.012).abs() < 1e-12);
        assert_eq!(s.stats().lost, 2);
        assert_eq!(
            s.on_robot(&robot(12, 8, q, true), 0.013),
            Err(FeedbackError::Late)
        );
        assert_eq!(
            s.on_robot(&robot(13, 12, q, true), 0.014),
            Err(FeedbackError::Duplicate)
        );
        assert_eq!(s.stats().duplicates, 1);
        // Wrap-around is a gap, not a restart.
        let mut w = EgmSession::new(P);
        w.on_robot(&robot(u32::MAX, 0, q, true), 0.0).unwrap();
        assert_eq!(
            w.on_robot(&robot(1, 8, q, true), 0.008)
                .unwrap()
                .lost_before,
            1
        );
        // Seqno 0 again: new session, reply seqno restarts.
        s.reply_p(&[0.0; 6], &[0.0; 6], 0.015).unwrap();
        let f = s.on_robot(&robot(0, 0, q, true), 0.02).unwrap();
        assert!(f.events.contains(&SessionEvent::Restarted));
        assert_eq!(s.stats().sessions, 2);
        assert_eq!(s.stats().restarts, 1);
        let r = s.reply_p(&[0.0; 6], &[0.0; 6], 0.021).unwrap();
        assert_eq!(r.header.unwrap().seqno, Some(0));
    }

    #[test]
    fn a_restart_whose_first_datagrams_were_lost_is_a_restart_not_late() {
        // A short session (seqnos 0..5, tm 100..120) ends; the next one's seqno 0 and 1 are
        // lost; seqno 2 (behind in sequence, ahead on the controller's clock) starts a new
        // session. Fails if it is dropped as late. A real late datagram (older clock) still
        // is one, and a duplicate (same clock) still is one.
        let mut s = EgmSession::new(P);
        let q = [0.0; 6];
        for k in 0..6u32 {
            s.on_robot(&robot(k, 100 + 4 * k, q, true), f64::from(k) * 0.004)
                .unwrap();
        }
        let f = s.on_robot(&robot(2, 1500, q, true), 1.5).unwrap();
        assert!(
            f.events.contains(&SessionEvent::Restarted),
            "{:?}",
            f.events
        );
        assert_eq!(s.stats().restarts, 1);
        assert_eq!(
            s.on_robot(&robot(2, 1500, q, true), 1.501),
            Err(FeedbackError::Duplicate)
        );
        s.on_robot(&robot(3, 1504, q, true), 1.504).unwrap();
        assert_eq!(
            s.on_robot(&robot(1, 1496, q, true), 1.505),
            Err(FeedbackError::Late)
        );
        assert_eq!(s.stats().restarts, 1);
        // A new session whose seqno happens to equal the last one seen, on a newer clock.
        let f = s.on_robot(&robot(3, 3000, q, true), 3.0).unwrap();
        assert!(f.events.contains(&SessionEvent::Restarted));
        assert_eq!(s.stats().restarts, 2);
    }

    #[test]
    fn a_controller_error_is_counted_and_kept() {
        // MCI state ERROR (the controller ended EGM with an error): counted once per entry,
        // with its seqno and clock; the status says the controller is not ready.
        let mut s = EgmSession::new(P);
        let q = [0.0; 6];
        s.on_robot(&robot(0, 0, q, true), 0.0).unwrap();
        let mut m = robot(1, 4, q, true);
        m.mci_state = Some(EgmMciState {
            state: MciStateType::Error as i32,
        });
        let f = s.on_robot(&m, 0.004).unwrap();
        assert!(!f.status.external_control_active);
        assert!(matches!(f.events[0], SessionEvent::ControllerStopped(_)));
        assert_eq!(s.stats().controller_errors, 1);
        assert_eq!(
            s.stats().last_controller_error,
            Some((Some(1), Some(4), 0.004))
        );
        let json = s.stats().json();
        assert_eq!(json["last_controller_error"]["mci"], "Error");
        assert_eq!(json["controller_errors"], 1);
    }

    #[test]
    fn controller_stop_and_silence() {
        let mut s = EgmSession::new(P);
        let q = [0.0; 6];
        assert!(s.check_silent(0.0));
        s.on_robot(&robot(1, 0, q, true), 0.0).unwrap();
        assert!(!s.check_silent(0.04));
        let f = s.on_robot(&robot(2, 4, q, false), 0.004).unwrap();
        assert!(!f.status.motors_on && !f.status.external_control_active);
        assert!(matches!(f.events[0], SessionEvent::ControllerStopped(_)));
        assert!(s.check_silent(0.06));
        assert_eq!(s.stats().silences, 1);
        assert!(s.check_silent(0.07));
        assert_eq!(s.stats().silences, 1);
        let f = s.on_robot(&robot(3, 70, q, true), 0.08).unwrap();
        assert!(f.events.contains(&SessionEvent::Resumed));
        assert!(f.events.contains(&SessionEvent::ControllerReady));
        assert_eq!(f.qd_rad_s, None, "no velocity across a silence");
    }

    #[test]
    fn reply_units_seqno_and_nan_replacement() {
        let mut s = EgmSession::new(P);
        let meas = [10.0, 20.0, -30.0, 0.0, 45.0, 90.0];
        s.on_robot(&robot(0, 0, meas, true), 0.0).unwrap();
        let q = [0.1, -0.2, 0.3, 0.0, 1.0, -1.0];
        let qd = [0.0, 0.0, 0.0, 0.0, 0.0, 0.5];
        let r = s.reply_p(&q, &qd, 1.2345).unwrap();
        let h = r.header.as_ref().unwrap();
        assert_eq!(h.seqno, Some(0));
        assert_eq!(h.tm, Some(1234));
        assert_eq!(h.mtype(), MessageType::Correction);
        let pj = &r.planned.as_ref().unwrap().joints.as_ref().unwrap().joints;
        for j in 0..6 {
            assert!((pj[j] - q[j].to_degrees()).abs() < 1e-12);
        }
        let sj = &r
            .speed_ref
            .as_ref()
            .unwrap()
            .joints
            .as_ref()
            .unwrap()
            .joints;
        assert!((sj[5] - 0.5f64.to_degrees()).abs() < 1e-12);
        let r = s.reply_p(&q, &qd, 1.3).unwrap();
        assert_eq!(r.header.unwrap().seqno, Some(1));
        // NaN / Inf → the last sent reference resent unchanged (never the measured position).
        let sent = s.reply_p(&q, &qd, 1.35).unwrap();
        let mut bad = q;
        bad[2] = f64::NAN;
        let r = s.reply_p(&bad, &qd, 1.4).unwrap();
        assert_eq!(r.planned, sent.planned);
        assert_eq!(r.speed_ref, sent.speed_ref);
        assert_ne!(r.planned.unwrap().joints.unwrap().joints, meas.to_vec());
        let mut badv = qd;
        badv[0] = f64::INFINITY;
        let r = s.reply_p(&q, &badv, 1.5).unwrap();
        assert_eq!(r.planned, sent.planned);
        assert_eq!(s.stats().replaced_non_finite, 2);
        // Without speedRef configured, none is sent.
        let mut n = EgmSession::new(SessionParams {
            send_speed_ref: false,
            ..P
        });
        n.on_robot(&robot(0, 0, meas, true), 0.0).unwrap();
        assert!(n.reply_p(&q, &qd, 0.0).unwrap().speed_ref.is_none());
        // Nothing known → no reply at all rather than a NaN.
        let mut e = EgmSession::new(P);
        assert!(e.reply_p(&[f64::NAN; 6], &[0.0; 6], 0.0).is_none());
    }

    #[test]
    fn incomplete_feedback_is_an_error_and_resend_repeats_the_last_reference() {
        let mut s = EgmSession::new(P);
        let mut r = robot(0, 0, [0.0; 6], true);
        r.feed_back = None;
        assert_eq!(s.on_robot(&r, 0.0), Err(FeedbackError::NoJoints));
        assert!(s.resend_p(0.0).is_none());
        let mut r = robot(1, 4, [1.0; 6], true);
        r.feed_back.as_mut().unwrap().joints = Some(joints(&[1.0; 7]));
        assert_eq!(s.on_robot(&r, 0.004), Err(FeedbackError::JointCount(7)));
        let mut r = robot(2, 8, [1.0; 6], true);
        r.feed_back.as_mut().unwrap().joints = Some(joints(&[1.0, 1.0, f64::NAN, 1.0, 1.0, 1.0]));
        assert_eq!(s.on_robot(&r, 0.008), Err(FeedbackError::NonFinite));
        assert_eq!(s.stats().incomplete, 3);
        assert!(
            (s.last_dt_s() - 0.004).abs() < 1e-12,
            "Δtm kept for a cycle without joints"
        );
        s.on_robot(&robot(3, 12, [1.0; 6], true), 0.012).unwrap();
        let first = s
            .reply_p(&[0.5f64.to_radians(); 6], &[0.1; 6], 0.0125)
            .unwrap();
        let h = s.resend_p(0.013).unwrap();
        assert_eq!(h.planned, first.planned);
        assert_eq!(h.speed_ref, first.speed_ref);
        assert_eq!(
            h.header.unwrap().seqno,
            Some(first.header.unwrap().seqno.unwrap() + 1)
        );
    }

    #[test]
    fn schema_guess_and_force() {
        let mut s = EgmSession::new(P);
        let mut r = robot(0, 0, [0.0; 6], true);
        r.measured_force = Some(
            EgmMeasuredForce {
                fc_active: Some(true),
                force: vec![1.0, 2.0, 3.0, 0.0, 0.0, 0.0],
            }
            .encode_to_vec(),
        );
        let f = s.on_robot(&r, 0.0).unwrap();
        assert_eq!(f.schema, SchemaGuess::Newer);
        assert_eq!(f.force.unwrap().force.as_slice()[2], 3.0);
        let mut r = robot(1, 4, [0.0; 6], true);
        r.feed_back.as_mut().unwrap().time = None;
        assert_eq!(s.on_robot(&r, 0.004).unwrap().schema, SchemaGuess::V10);
        let mut r = robot(2, 8, [0.0; 6], true);
        r.utilization_rate = Some(12.0);
        assert_eq!(s.on_robot(&r, 0.008).unwrap().schema, SchemaGuess::V11Rw610);
    }

    #[test]
    fn timing_statistics_from_given_timestamps() {
        let mut s = EgmSession::new(P);
        // The controller sends every 4 ms (tm); arrivals have 0.5 ms of extra delay on odd
        // datagrams; we answer 0.1 ms after arrival.
        for k in 0..100u32 {
            let t = 10.0 + f64::from(k) * 0.004 + if k % 2 == 1 { 0.0005 } else { 0.0 };
            s.on_robot(&robot(k, 4 * k, [0.0; 6], true), t).unwrap();
            s.reply_p(&[0.0; 6], &[0.0; 6], t + 0.0001).unwrap();
            s.on_reply_sent(t + 0.0001);
        }
        let st = s.stats();
        assert_eq!(st.period.n, 99);
        assert!((st.period.mean() - 0.004).abs() < 1e-5);
        assert!((st.period.max - 0.0045).abs() < 1e-9);
        assert!((st.controller_period.mean() - 0.004).abs() < 1e-12);
        assert!((st.turnaround.mean() - 0.0001).abs() < 1e-9);
        assert!((st.robot_to_reply.min - 0.0001).abs() < 1e-9);
        assert!((st.robot_to_reply.max - 0.0006).abs() < 1e-9);
    }

    proptest! {
        /// Whatever the controller sends and whatever reference the supervisor gives, every
        /// reply is finite, in degrees of a finite value, and reply seqnos count up by one
        /// within a session.
        #[test]
        fn replies_always_finite(
            steps in proptest::collection::vec(
                (any::<u32>(), proptest::array::uniform6(-1e3f64..1e3), any::<bool>(),
                 proptest::array::uniform6(prop_oneof![Just(f64::NAN), Just(f64::INFINITY), -10.0f64..10.0])),
                1..50)
        ) {
            let mut s = EgmSession::new(P);
            let mut last_reply_seq: Option<u32> = None;
            for (k, (seq, q, ready, r)) in steps.iter().enumerate() {
                let t = k as f64 * 0.004;
                let restarted = match s.on_robot(&robot(*seq, *seq, *q, *ready), t) {
                    Ok(f) => f.events.iter().any(|e| matches!(e, SessionEvent::Started | SessionEvent::Restarted)),
                    Err(_) => false,
                };
                if let Some(reply) = s.reply_p(r, r, t) {
                    let h = reply.header.clone().unwrap();
                    if let (Some(prev), false) = (last_reply_seq, restarted) {
                        prop_assert_eq!(h.seqno, Some(prev.wrapping_add(1)));
                    }
                    last_reply_seq = h.seqno;
                    let bytes = crate::egm::proto::encode_sensor(&reply);
                    let mut buf = [0u8; crate::egm::frame::SENSOR_REPLY_MAX];
                    let raw = s.resend(t).map(|r| r.encode(&mut buf).len());
                    prop_assert!(raw.is_some_and(|n| n > 0));
                    let back = crate::egm::proto::decode_sensor(&bytes).unwrap();
                    for v in back.planned.unwrap().joints.unwrap().joints
                        .iter().chain(back.speed_ref.unwrap().joints.unwrap().joints.iter()) {
                        prop_assert!(v.is_finite());
                    }
                }
            }
        }
    }
}
