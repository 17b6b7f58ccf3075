//! The EGM *controller* side, as an IRC5 running the shipped RAPID module (`deploy/irc5/
//! CellEgm.mod`, read by the `irc5` crate) would behave. Pure: the shell owns the UDP socket
//! and the clock.
//!
//! Each cycle of a running session the controller sends one `EgmRobot` (header seqno/tm/DATA,
//! measured joints in degrees, `feedBack.time`, planned joints, motor/MCI/RAPID states) and
//! applies the oldest queued `EgmSensor`'s `planned.joints` (degrees) as the servo reference.
//!
//! **The RAPID program** ([`Rapid`]) runs the module's steps, and the controller enforces the
//! rules ABB documents for EGM. Each rule cites its source: `P:` is
//! `reference/protocols.md` §1.6/§1.8, `[TRobEGM]` ABB's StateMachine Add-In module.
//!
//! * **R1 program start** (P §1.8 "the first movement after a controller restart cannot be an
//!   EGM movement"; [TRobEGM] `MoveAbsJ` to a taught target): the routine's first motion is a
//!   joint move to the taught home ([`Rapid::Homing`]); no `EgmRobot` is sent before a session.
//! * **R2 fine point** (P §1.8 "EGM motion must start and end in a fine point"; [TRobEGM]
//!   `WaitRob \InPos`): a session starts only from a fine point — the module's fine-point
//!   wait ([`Rapid::FinePoint`]) or the home move's — and after a non-EGM motion since the
//!   program start. Otherwise [`EgmError::FirstMotionEgm`] / [`EgmError::NotFinePoint`].
//! * **R3 motors off** (P §1.8 "Motors off stops RAPID on a real controller"): the session
//!   ends (one `EgmRobot` reporting motors off, MCI and RAPID stopped), RAPID stops; when the
//!   motors come back, the controller restarts EGM only if the MOC entry lacks
//!   `-do_not_restart_after_motors_off`; otherwise the operator starts the program
//!   ([`Controller::program_start`]). UNCONFIRMED: the flag is only named in public material;
//!   this is its plain reading.
//! * **R4 speedRef** (P §1.8 "after silence the controller keeps the last position (and, with
//!   `speedRef`, the last speed) until `\CommTimeout`"): a cycle without a reply moves the
//!   reference on at the last reply's `speedRef` until the timeout; then `EGM_STOP_HOLD`
//!   ramps that speed down over `\RampOutTime`. While replies flow `speedRef` is not a
//!   feed-forward here (the servo model's lag is identified without one: docs/simulator.md).
//! * **R5 EGM errors, not clamps** (P §1.8 "references beyond the axis limits raise an EGM
//!   error (they are not clamped)"; P §1.6 "EGM error (references out of bounds, e.g.
//!   `\MaxSpeedDeviation`)"): a reference beyond a joint limit, or moving a joint faster than
//!   `\MaxSpeedDeviation`, is never applied: the session ends with an EGM error (one
//!   `EgmRobot` with MCI state ERROR — ASSUMPTION: how the error shows on the wire), the arm
//!   ramps out and holds, and the module's error handler ends the routine.
//! * **R6 restart identity** (P §1.8 "abb_libegm treats a sequence number of 0 as a new
//!   session"; P §1.3 `feedBack.time`): every session's first message is seqno 0; the clock
//!   runs on.
//! * **R7 `EGMStop`** (P §1.8 "`EGMStop id, EGM_STOP_HOLD;` ends it"): the module's stop trap
//!   ([`Controller::egm_stop`]) ramps out and ends the routine; the next program start runs it
//!   from the top (its run flag starts TRUE).
//! * **R8 `\CondTime`** (P §1.6 "convergence criteria met (`\CondTime` with the per-axis
//!   egm_minmax condition)"): every joint's reference minus position within the band for
//!   `\CondTime` ends the session normally; the module's loop starts the next one.
//! * **R9 reply order** (P §1.6: what the controller does with late replies is UNCONFIRMED):
//!   replies queue in arrival order, one is read per cycle, a full queue drops the arrival
//!   (socket-buffer semantics), so replies that arrive late add a cycle of lag that shows.
//!   `reply_queue = 0` is the older emulation (the newest reply of a cycle wins).
//!
//! Timing: [`Controller::begin_cycle`] starts an EGM cycle (a queued reply becomes the
//! reference and enters the servo's delay line); [`Controller::advance`] integrates the servo
//! over a shorter base tick, so the simulator's joints (and the F/T truth) move at 1 kHz while
//! EGM runs at its own cycle. [`Controller::step`] is one whole cycle at once.

// Index loops over the 6 joints mirror the per-joint rules (q_j, limits_j).
#![allow(clippy::needless_range_loop)]

use std::collections::VecDeque;

use serde::Serialize;

use crate::wire::egm::{decode_sensor, RobotMsg, MCI_ERROR, MCI_RUNNING, MCI_STOPPED};

use crate::world::servo::ServoModel;

/// Controller states the shell sets from the operator's faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerState {
    pub motors_on: bool,
    /// False: the operator stopped the program (RAPID Stop); true again continues it.
    pub egm_running: bool,
}

impl Default for ControllerState {
    fn default() -> Self {
        Self {
            motors_on: true,
            egm_running: true,
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
    /// Sessions ended by an EGM error (R2, R5).
    pub egm_errors: u64,
    /// Sessions ended because the convergence condition held for `\CondTime` (R8).
    pub converged: u64,
    /// Replies dropped because the reply queue was full (R9).
    pub reply_queue_drops: u64,
    /// Replies read from the queue, and the queue depth summed when each was read (R9).
    pub queue_reads: u64,
    pub queue_depth_sum: u64,
}

/// Why a session was refused or ended with an EGM error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum EgmError {
    /// R2: no non-EGM motion since the program started (the first motion would be EGM).
    FirstMotionEgm,
    /// R2: the session did not start from a fine point.
    NotFinePoint,
    /// R5: a reference beyond joint `joint`'s (0-based) limits (rad), from the reply with
    /// header seqno `reply_seqno`.
    OutOfLimits {
        joint: usize,
        q_rad: f64,
        reply_seqno: Option<u32>,
    },
    /// R5: a reference moving joint `joint` faster than `\MaxSpeedDeviation` (rad/s): from
    /// `from_rad` to `to_rad` over `cycles` EGM cycles, from the reply with seqno `reply_seqno`.
    SpeedDeviation {
        joint: usize,
        speed_rad_s: f64,
        from_rad: f64,
        to_rad: f64,
        cycles: u32,
        reply_seqno: Option<u32>,
    },
}

/// Why RAPID is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum StopWhy {
    /// The operator stopped the program: starting it continues where it was.
    Operator,
    /// The motors went off (R3): starting it continues where it was.
    MotorsOff,
    /// An EGM error ended the routine (its handler ends cleanly): a start runs it from the top.
    EgmError(EgmError),
    /// `EGMStop` ended the routine (R7): a start runs it from the top.
    Ended,
}

impl StopWhy {
    /// The routine ended (a start runs it from the top, with its home move).
    fn routine_ended(self) -> bool {
        matches!(self, Self::EgmError(_) | Self::Ended)
    }
}

/// What follows a ramp-out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum AfterRamp {
    /// The module's loop waits and starts the next session (comm timeout, convergence).
    NextSession,
    /// RAPID stops.
    Stop(StopWhy),
}

/// Where the emulated RAPID program is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Rapid {
    /// R1: `MoveAbsJ cell_home … fine`, joint-interpolated from `from` to `to` over `dur_s`.
    Homing {
        from: [f64; 6],
        to: [f64; 6],
        t_s: f64,
        dur_s: f64,
    },
    /// R2: `WaitRob \InPos` and a zero-length `MoveAbsJ … fine`: the arm must be in position
    /// and still for [`INPOS_S`]; `still_s` so far.
    FinePoint { still_s: f64 },
    /// A session runs for `age_s`, `since_reply_s` since the last valid reply (or the start),
    /// blending from the joints `from` over the ramp-in; `cond_s`: how long the convergence
    /// condition has held.
    Running {
        age_s: f64,
        since_reply_s: f64,
        from: [f64; 6],
        cond_s: f64,
    },
    /// `EGM_STOP_HOLD`: the reference's speed `v` ramps down to 0 over the `left_s` that remain.
    RampOut {
        v: [f64; 6],
        left_s: f64,
        then: AfterRamp,
    },
    /// The module's `WaitTime` before the next session.
    Waiting { wait_s: f64 },
    /// RAPID stopped.
    Stopped(StopWhy),
}

/// R2's fine point: in position within [`INPOS_RAD`] and slower than [`INPOS_SPEED_RAD_S`] on
/// every joint for this long (s). ASSUMPTION: the controller's own inpos data are not public;
/// these stand for a `fine` zone.
pub const INPOS_S: f64 = 0.02;
pub const INPOS_RAD: f64 = 0.01 * std::f64::consts::PI / 180.0;
pub const INPOS_SPEED_RAD_S: f64 = 0.1 * std::f64::consts::PI / 180.0;
/// R1's home move runs every joint at most this fraction of its maximum speed. ASSUMPTION: the
/// module's `speeddata` (v100) is not modelled.
pub const HOME_SPEED_FRACTION: f64 = 0.1;

/// The session's timing and the rules, as the IRC5 side (`irc5::Irc5Egm`) sets them.
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
    /// `\MaxSpeedDeviation` (rad/s); infinite: unchecked.
    pub max_speed_dev_rad_s: f64,
    /// `\CondTime` (s); infinite: the condition never ends a session.
    pub cond_time_s: f64,
    /// The convergence band of reference − position (rad).
    pub cond_rad: [f64; 2],
    /// The module waits for a fine point before every session.
    pub fine_point: bool,
    /// The routine's first motion, to the taught home (rad); `None`: the module has none.
    pub home: Option<[f64; 6]>,
    /// The controller enforces R2 and R5 (false: a session starts at once and references are
    /// only counted, for tests of the servo and the world).
    pub enforce: bool,
    /// R3: the controller restarts EGM on its own when the motors come back on.
    pub restart_after_motors_off: bool,
    /// R9: replies queued in arrival order (0: the newest reply of a cycle wins).
    pub reply_queue: usize,
}

impl SessionParams {
    /// A session that starts at once, never ends, takes every reply at once and enforces no
    /// rule: for tests of the servo and the world, not of the EGM session.
    pub const ALWAYS_ON: Self = Self {
        comm_timeout_s: f64::INFINITY,
        ramp_in_s: 0.0,
        ramp_out_s: 0.0,
        restart_wait_s: 0.0,
        max_speed_dev_rad_s: f64::INFINITY,
        cond_time_s: f64::INFINITY,
        cond_rad: [-f64::INFINITY, f64::INFINITY],
        fine_point: false,
        home: None,
        enforce: false,
        restart_after_motors_off: true,
        reply_queue: 0,
    };

    /// From the IRC5 side's files. `home_rad` is where the module's taught home is in this
    /// cell (the simulator's start pose: tests/deploy.rs holds the shipped module's `cell_home`
    /// to the shipped config's); `reply_queue` is R9's queue length.
    pub fn from_irc5(i: &irc5::Irc5Egm, home_rad: [f64; 6], reply_queue: usize) -> Self {
        let s = &i.session;
        let cond = i.module.cond_deg.unwrap_or([-f64::INFINITY, f64::INFINITY]);
        Self {
            comm_timeout_s: s.comm_timeout_s,
            ramp_in_s: s.ramp_in_s,
            ramp_out_s: s.ramp_out_s,
            restart_wait_s: s.restart_wait_s,
            max_speed_dev_rad_s: s.max_speed_deviation_deg_s.to_radians(),
            cond_time_s: s.cond_time_s,
            cond_rad: cond.map(f64::to_radians),
            fine_point: i.waits_for_fine_point(),
            home: i.module.home.as_ref().map(|_| home_rad),
            enforce: true,
            restart_after_motors_off: i.restarts_after_motors_off(),
            reply_queue,
        }
    }
}

/// What the emulator observes of the references it receives.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReferenceStats {
    /// Largest reference speed seen, as a fraction of the joint's speed limit:
    /// max over joints of |Δref| / (max_speed · cycles elapsed · dt).
    pub peak_speed_ratio: f64,
    /// References outside the joint limits (an EGM error when the rules are enforced).
    pub out_of_limits: u64,
}

/// One queued reply: joints (rad), `speedRef` (rad/s) when sent, header seqno.
type Reply = ([f64; 6], Option<[f64; 6]>, Option<u32>);

/// The emulated controller: a joint servo plus the EGM message logic and the RAPID program.
#[derive(Debug, Clone)]
pub struct Controller {
    servo: ServoModel,
    q_ref: [f64; 6],
    /// The reference's speed over the last cycle (rad/s): what a ramp-out ramps down.
    ref_speed: [f64; 6],
    /// The header seqno of the reply `q_ref` came from (`None`: not from a reply).
    q_ref_seqno: Option<u32>,
    /// The last applied reply's `speedRef` (rad/s): R4 keeps it through a silence.
    speed_ref: Option<[f64; 6]>,
    seqno: u32,
    pub state: ControllerState,
    pub stats: ControllerStats,
    pub refs: ReferenceStats,
    cycle: u64,
    last_ref_cycle: u64,
    /// The reference applied before the current one, and its cycle: R5's speed is checked
    /// over the last two applied references (see `apply_reference`).
    prev_ref: [f64; 6],
    prev_ref_cycle: u64,
    last_dt: f64,
    /// Replies received, not yet read (R9).
    pending: VecDeque<Reply>,
    params: SessionParams,
    rapid: Rapid,
    /// A non-EGM motion ran since the program started (R1/R2).
    moved_non_egm: bool,
    /// The last motion ended in a fine point and no EGM motion has run since (R2).
    at_fine_point: bool,
    /// The message that ends a session (R3, R5): one more `EgmRobot` after it ended, with
    /// this MCI state.
    farewell: Option<u64>,
    /// The last EGM error, kept.
    pub last_error: Option<EgmError>,
    /// A session started and has not sent its first `EgmRobot` yet: that one carries sequence
    /// number 0, which is how the PC side (abb_libegm, robot-io) tells a new session from a
    /// resumed one (R6).
    session_unsent: bool,
    /// The controller's clock at `tm` 0, µs since 1970 (`feedBack.time` = this + `tm`).
    clock_epoch_us: u64,
}

impl Controller {
    /// A controller whose program starts now, from the servo's joints: with the rules, the
    /// home move and the fine point come first (R1, R2); without, a session starts at once.
    pub fn new(servo: ServoModel, params: SessionParams) -> Self {
        let q_ref = servo.q();
        let mut c = Self {
            params,
            session_unsent: true,
            clock_epoch_us: 0,
            rapid: Rapid::Stopped(StopWhy::Ended),
            moved_non_egm: false,
            at_fine_point: false,
            farewell: None,
            last_error: None,
            servo,
            q_ref,
            ref_speed: [0.0; 6],
            q_ref_seqno: None,
            speed_ref: None,
            seqno: 0,
            state: ControllerState::default(),
            stats: ControllerStats::default(),
            refs: ReferenceStats::default(),
            cycle: 0,
            last_ref_cycle: 0,
            prev_ref: q_ref,
            prev_ref_cycle: 0,
            last_dt: 0.004,
            pending: VecDeque::new(),
        };
        if params.enforce {
            c.rapid = c.routine_start();
        } else {
            c.rapid = c.session_start();
        }
        c
    }

    /// Where the RAPID program is.
    pub fn rapid(&self) -> Rapid {
        self.rapid
    }

    /// Whether a session runs.
    pub fn session_running(&self) -> bool {
        matches!(self.rapid, Rapid::Running { .. })
    }

    /// Whether the controller sends an `EgmRobot` this cycle: while a session runs, and once
    /// more when one ended with motors off or an EGM error.
    pub fn sending(&self) -> bool {
        self.session_running() || self.farewell.is_some()
    }

    /// RAPID's state for the status: "homing", "fine point", "running", "ramp out",
    /// "waiting", or "stopped (why)".
    pub fn rapid_label(&self) -> String {
        match self.rapid {
            Rapid::Homing { .. } => "homing".into(),
            Rapid::FinePoint { .. } => "fine point".into(),
            Rapid::Running { .. } => "running".into(),
            Rapid::RampOut { .. } => "ramp out".into(),
            Rapid::Waiting { .. } => "waiting".into(),
            Rapid::Stopped(w) => format!("stopped ({w:?})"),
        }
    }

    /// The reference of this cycle (rad).
    pub fn reference(&self) -> [f64; 6] {
        self.q_ref
    }

    /// The header seqno of the reply the reference came from (`None` before the first reply
    /// of a session, or when the controller holds its own joints).
    pub fn reference_seqno(&self) -> Option<u32> {
        self.q_ref_seqno
    }

    /// Measured joints (rad) and velocities (rad/s).
    pub fn joints(&self) -> ([f64; 6], [f64; 6]) {
        (self.servo.q(), self.servo.qd())
    }

    /// Replies waiting in the queue.
    pub fn queued(&self) -> usize {
        self.pending.len()
    }

    /// One whole EGM cycle of `dt` seconds: [`Controller::begin_cycle`] then
    /// [`Controller::advance`] over the cycle.
    pub fn step(&mut self, dt: f64) -> ([f64; 6], [f64; 6]) {
        self.begin_cycle(dt);
        self.advance(dt)
    }

    /// The operator starts the program (R3, R7): after a stop it continues (the module's loop
    /// goes to its next session); after the routine ended it runs from the top (home move).
    /// Ignored while motors are off or the program is held stopped, or while it runs.
    pub fn program_start(&mut self) {
        if !(self.state.motors_on && self.state.egm_running) {
            return;
        }
        if let Rapid::Stopped(why) = self.rapid {
            self.rapid = if why.routine_ended() {
                self.routine_start()
            } else {
                self.next_session()
            };
        }
    }

    /// The module's stop trap (`cell_egm_run := FALSE` → `EGMStop id, EGM_STOP_HOLD`, R7): a
    /// running session ramps out and the routine ends; between sessions it ends at once.
    pub fn egm_stop(&mut self) {
        self.rapid = match self.rapid {
            Rapid::Running { .. } => Rapid::RampOut {
                v: self.ref_speed,
                left_s: self.params.ramp_out_s,
                then: AfterRamp::Stop(StopWhy::Ended),
            },
            Rapid::RampOut { v, left_s, .. } => Rapid::RampOut {
                v,
                left_s,
                then: AfterRamp::Stop(StopWhy::Ended),
            },
            Rapid::Stopped(w) => Rapid::Stopped(w),
            _ => Rapid::Stopped(StopWhy::Ended),
        };
        if !self.session_running() {
            self.pending.clear();
        }
    }

    /// The routine from the top (R1): the home move, or the first session.
    fn routine_start(&mut self) -> Rapid {
        self.moved_non_egm = false;
        self.at_fine_point = false;
        match self.params.home {
            Some(to) => {
                let from = self.servo.q();
                let lim = self.servo.limits();
                let mut dur_s: f64 = 0.0;
                for i in 0..6 {
                    let v = HOME_SPEED_FRACTION * lim.max_speed[i];
                    dur_s = dur_s.max((to[i] - from[i]).abs() / v);
                }
                Rapid::Homing {
                    from,
                    to,
                    t_s: 0.0,
                    dur_s,
                }
            }
            None => self.next_session(),
        }
    }

    /// The module's next session: the fine point first when it has one (R2).
    fn next_session(&mut self) -> Rapid {
        if self.params.fine_point {
            self.q_ref = self.servo.q();
            Rapid::FinePoint { still_s: 0.0 }
        } else {
            self.session_start()
        }
    }

    /// `EGMRunJoint` (R2): a session, or the error that refuses it.
    fn session_start(&mut self) -> Rapid {
        if self.params.enforce {
            let refused = if !self.moved_non_egm {
                Some(EgmError::FirstMotionEgm)
            } else if !self.at_fine_point {
                Some(EgmError::NotFinePoint)
            } else {
                None
            };
            if let Some(e) = refused {
                self.raise(e);
                return Rapid::Stopped(StopWhy::EgmError(e));
            }
        }
        self.at_fine_point = false;
        self.stats.sessions += 1;
        self.session_unsent = true;
        self.pending.clear();
        self.speed_ref = None;
        self.last_ref_cycle = self.cycle;
        self.prev_ref = self.q_ref;
        self.prev_ref_cycle = self.cycle;
        Rapid::Running {
            age_s: 0.0,
            since_reply_s: 0.0,
            from: self.servo.q(),
            cond_s: 0.0,
        }
    }

    /// An EGM error: counted, kept, and reported in one last `EgmRobot` (MCI ERROR).
    fn raise(&mut self, e: EgmError) {
        self.stats.egm_errors += 1;
        self.last_error = Some(e);
        self.farewell = Some(MCI_ERROR);
    }

    /// Starts an EGM cycle of `cycle_s` seconds: RAPID's step, and a queued reply (if any)
    /// becomes the reference, which enters the servo's delay line.
    pub fn begin_cycle(&mut self, cycle_s: f64) {
        self.cycle += 1;
        self.last_dt = cycle_s;
        let before = self.q_ref;
        if !self.state.motors_on {
            // R3: the session ends (one message says so), RAPID stops, the brakes hold.
            match self.rapid {
                Rapid::Stopped(_) => {}
                Rapid::Running { .. } | Rapid::RampOut { .. } => {
                    self.farewell = Some(MCI_STOPPED);
                    self.rapid = Rapid::Stopped(StopWhy::MotorsOff);
                }
                _ => self.rapid = Rapid::Stopped(StopWhy::MotorsOff),
            }
        } else if !self.state.egm_running {
            // The operator's program stop: no session runs; starting again continues.
            if !matches!(self.rapid, Rapid::Stopped(_)) {
                self.rapid = Rapid::Stopped(StopWhy::Operator);
            }
        } else if let Rapid::Stopped(why) = self.rapid {
            // Continued after a stop; after motors off only if the controller restarts EGM
            // on its own (R3); an ended routine waits for a program start.
            let go = match why {
                StopWhy::Operator => true,
                StopWhy::MotorsOff => self.params.restart_after_motors_off,
                _ => false,
            };
            if go {
                self.rapid = self.next_session();
            }
        }
        self.rapid = match self.rapid {
            Rapid::Homing {
                from,
                to,
                t_s,
                dur_s,
            } => {
                let t_s = t_s + cycle_s;
                let a = if dur_s > 0.0 {
                    (t_s / dur_s).min(1.0)
                } else {
                    1.0
                };
                for i in 0..6 {
                    self.q_ref[i] = from[i] + a * (to[i] - from[i]);
                }
                self.q_ref_seqno = None;
                if a >= 1.0 && self.in_position() {
                    // The home move ended in its fine point.
                    self.moved_non_egm = true;
                    self.at_fine_point = true;
                    self.next_session()
                } else {
                    Rapid::Homing {
                        from,
                        to,
                        t_s,
                        dur_s,
                    }
                }
            }
            Rapid::FinePoint { still_s } => {
                self.q_ref_seqno = None;
                let still_s = if self.in_position() {
                    still_s + cycle_s
                } else {
                    0.0
                };
                if still_s >= INPOS_S - 1e-12 {
                    // The zero-length MoveAbsJ … fine is a non-EGM motion (ASSUMPTION: a
                    // zero-length move counts; the module's home move makes it not matter).
                    self.moved_non_egm = true;
                    self.at_fine_point = true;
                    self.session_start()
                } else {
                    Rapid::FinePoint { still_s }
                }
            }
            Rapid::Running {
                age_s,
                since_reply_s,
                from,
                cond_s,
            } => self.run_session(cycle_s, age_s, since_reply_s, from, cond_s),
            Rapid::RampOut { v, left_s, then } => {
                // The reference's speed ramps linearly to 0 over what is left (EGM_STOP_HOLD).
                let left_after = left_s - cycle_s;
                let k = if left_s > 0.0 {
                    (left_after / left_s).max(0.0)
                } else {
                    0.0
                };
                let v_next = v.map(|x| x * k);
                let lim = *self.servo.limits();
                for i in 0..6 {
                    self.q_ref[i] += 0.5 * (v[i] + v_next[i]) * cycle_s.min(left_s.max(0.0));
                    // The controller's own stop respects the joint range.
                    self.q_ref[i] = self.q_ref[i].clamp(lim.min[i], lim.max[i]);
                }
                self.q_ref_seqno = None;
                if left_after <= 1e-12 {
                    self.pending.clear();
                    match then {
                        AfterRamp::NextSession => Rapid::Waiting {
                            wait_s: self.params.restart_wait_s,
                        },
                        AfterRamp::Stop(w) => Rapid::Stopped(w),
                    }
                } else {
                    Rapid::RampOut {
                        v: v_next,
                        left_s: left_after,
                        then,
                    }
                }
            }
            Rapid::Waiting { wait_s } => {
                let wait_s = wait_s - cycle_s;
                if wait_s <= 1e-12 {
                    self.next_session()
                } else {
                    Rapid::Waiting { wait_s }
                }
            }
            Rapid::Stopped(w) => {
                // The brakes or the servo hold the arm where it is.
                self.q_ref = self.servo.q();
                self.q_ref_seqno = None;
                self.pending.clear();
                Rapid::Stopped(w)
            }
        };
        if matches!(self.rapid, Rapid::Waiting { .. }) {
            // Between sessions the controller holds; a datagram that arrives is not read.
            self.pending.clear();
        }
        for i in 0..6 {
            self.ref_speed[i] = (self.q_ref[i] - before[i]) / cycle_s.max(1e-9);
        }
        self.servo.set_motors_on(self.state.motors_on);
        if !self.state.motors_on {
            self.q_ref = self.servo.q();
        }
        self.servo.push_reference(&self.q_ref);
    }

    /// One cycle of a running session: the next reply (R9) checked (R5) and blended in over
    /// the ramp-in, or `speedRef` kept through a silence (R4); the comm timeout; R8.
    fn run_session(
        &mut self,
        cycle_s: f64,
        age_s: f64,
        since_reply_s: f64,
        from: [f64; 6],
        cond_s: f64,
    ) -> Rapid {
        let age_s = age_s + cycle_s;
        let next = if self.params.reply_queue == 0 {
            // The older emulation: the newest reply of the cycle.
            let n = self.pending.pop_back();
            self.pending.clear();
            n
        } else {
            let depth = self.pending.len() as u64;
            let n = self.pending.pop_front();
            if n.is_some() {
                self.stats.queue_reads += 1;
                self.stats.queue_depth_sum += depth;
            }
            n
        };
        let since_reply_s = match next {
            Some((new, qd, seqno)) => {
                let a = if self.params.ramp_in_s > 0.0 {
                    (age_s / self.params.ramp_in_s).min(1.0)
                } else {
                    1.0
                };
                let mut blended = new;
                for (b, (n, f)) in blended.iter_mut().zip(new.iter().zip(from.iter())) {
                    *b = f + a * (n - f);
                }
                if let Err(e) = self.apply_reference(blended, seqno) {
                    return self.error_ramp_out(e);
                }
                self.speed_ref = qd;
                0.0
            }
            None => {
                let s = since_reply_s + cycle_s;
                if let (Some(qd), true) = (self.speed_ref, s <= self.params.comm_timeout_s + 1e-12)
                {
                    // R4: the last speed is kept until the timeout.
                    let mut q = self.q_ref;
                    for (x, v) in q.iter_mut().zip(qd.iter()) {
                        *x += v * cycle_s;
                    }
                    let seqno = self.q_ref_seqno;
                    if let Err(e) = self.apply_reference(q, seqno) {
                        return self.error_ramp_out(e);
                    }
                }
                s
            }
        };
        // Not `>=`: a reply arriving exactly on the timeout still counts (and keeps an
        // infinite timeout from ending anything).
        if since_reply_s > self.params.comm_timeout_s + 1e-12 {
            self.stats.comm_timeouts += 1;
            return Rapid::RampOut {
                v: self.speed_ref.unwrap_or([0.0; 6]),
                left_s: self.params.ramp_out_s,
                then: AfterRamp::NextSession,
            };
        }
        // R8: the convergence condition (reference − position within the band on every joint).
        let q = self.servo.q();
        let within = self.converged_now(&q);
        let cond_s = if within { cond_s + cycle_s } else { 0.0 };
        if cond_s >= self.params.cond_time_s - 1e-12 {
            self.stats.converged += 1;
            return Rapid::RampOut {
                v: [0.0; 6],
                left_s: self.params.ramp_out_s,
                then: AfterRamp::NextSession,
            };
        }
        Rapid::Running {
            age_s,
            since_reply_s,
            from,
            cond_s,
        }
    }

    fn converged_now(&self, q: &[f64; 6]) -> bool {
        let [lo, hi] = self.params.cond_rad;
        self.q_ref
            .iter()
            .zip(q.iter())
            .all(|(r, m)| (lo..=hi).contains(&(r - m)))
    }

    /// R5: the session ends with an EGM error; the reference ramps out from its speed.
    fn error_ramp_out(&mut self, e: EgmError) -> Rapid {
        self.raise(e);
        Rapid::RampOut {
            v: self.ref_speed,
            left_s: self.params.ramp_out_s,
            then: AfterRamp::Stop(StopWhy::EgmError(e)),
        }
    }

    /// In position and still (R2's fine point).
    fn in_position(&self) -> bool {
        let (q, qd) = (self.servo.q(), self.servo.qd());
        (0..6).all(|i| (q[i] - self.q_ref[i]).abs() < INPOS_RAD && qd[i].abs() < INPOS_SPEED_RAD_S)
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
    /// flange pose (mm, quaternion w x y z) for the Cartesian feedback, when known. After a
    /// session ended with motors off or an EGM error, the one message that says so.
    pub fn robot_message(&mut self, tm_ms: u32, tool0: Option<([f64; 3], [f64; 4])>) -> RobotMsg {
        // Every session's first message is sequence number 0, then 1, 2, … (wrapping).
        self.seqno = if std::mem::take(&mut self.session_unsent) {
            0
        } else {
            self.seqno.wrapping_add(1)
        };
        let (q, _) = self.joints();
        let running = self.session_running();
        let mci_state = match self.farewell.take() {
            Some(m) if !running => m,
            _ if running => MCI_RUNNING,
            _ => MCI_STOPPED,
        };
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
            motors_on: self.state.motors_on,
            mci_state,
            mci_convergence_met: self.converged_now(&q),
            rapid_running: !matches!(self.rapid, Rapid::Stopped(_)),
        }
    }

    /// Receives one `EgmSensor` datagram: its planned joints (degrees) and `speedRef` (deg/s)
    /// join the reply queue (R9). Malformed or non-finite replies are counted and ignored.
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
        let speed = msg.speed_deg_s.as_ref().filter(|s| s.len() >= 6);
        if !j.iter().take(6).all(|v| v.is_finite())
            || speed.is_some_and(|s| !s.iter().take(6).all(|v| v.is_finite()))
        {
            self.stats.nonfinite_replies += 1;
            return;
        }
        self.stats.replies += 1;
        let mut q = [0.0; 6];
        for (dst, v) in q.iter_mut().zip(j.iter()) {
            *dst = v.to_radians();
        }
        let qd = speed.map(|s| {
            let mut v = [0.0; 6];
            for (dst, x) in v.iter_mut().zip(s.iter()) {
                *dst = x.to_radians();
            }
            v
        });
        if self.params.reply_queue > 0 && self.pending.len() >= self.params.reply_queue {
            self.stats.reply_queue_drops += 1;
            return;
        }
        self.pending.push_back((q, qd, msg.seqno));
        if self.params.reply_queue == 0 {
            while self.pending.len() > 1 {
                self.pending.pop_front();
            }
        }
    }

    /// Applies a reference (R5 checked): beyond a limit, or faster than `\MaxSpeedDeviation`
    /// over the span of the last two applied references, it is an EGM error and not applied
    /// (counted either way). The two-reference span: one reply that arrives late and is
    /// applied a cycle later makes the next one step twice in a cycle (the PC's reference is
    /// on the controller's clock, its delivery is not); the controller's own motion filter
    /// (MOC `-ext_motion_filter_bandwidth`) does not pass a one-cycle spike as a speed, and a
    /// sustained speed above the limit is caught on its second cycle. ASSUMPTION: the real
    /// check's window is not public.
    fn apply_reference(&mut self, new: [f64; 6], seqno: Option<u32>) -> Result<(), EgmError> {
        let lim = *self.servo.limits();
        let cycles = self.cycle.saturating_sub(self.last_ref_cycle).max(1) as f64;
        let span = self.cycle.saturating_sub(self.prev_ref_cycle).max(1) as f64;
        let mut err = None;
        for i in 0..6 {
            let v = new[i];
            let speed = (v - self.q_ref[i]).abs() / (cycles * self.last_dt);
            self.refs.peak_speed_ratio = self.refs.peak_speed_ratio.max(speed / lim.max_speed[i]);
            let sustained = (v - self.prev_ref[i]).abs() / (span * self.last_dt);
            if v < lim.min[i] - 1e-9 || v > lim.max[i] + 1e-9 {
                self.refs.out_of_limits += 1;
                err = err.or(Some(EgmError::OutOfLimits {
                    joint: i,
                    q_rad: v,
                    reply_seqno: seqno,
                }));
            } else if sustained > self.params.max_speed_dev_rad_s * (1.0 + 1e-9) {
                // (A reference at exactly the limit — robot-io's cap — is within it: the
                // relative 1e-9 keeps the rounding of deg ↔ rad and of the division out.)
                err = err.or(Some(EgmError::SpeedDeviation {
                    joint: i,
                    speed_rad_s: sustained,
                    from_rad: self.prev_ref[i],
                    to_rad: v,
                    cycles: span as u32,
                    reply_seqno: seqno,
                }));
            }
        }
        if let (Some(e), true) = (err, self.params.enforce) {
            return Err(e);
        }
        self.prev_ref = self.q_ref;
        self.prev_ref_cycle = self.last_ref_cycle;
        self.q_ref = new;
        self.q_ref_seqno = seqno;
        self.last_ref_cycle = self.cycle;
        Ok(())
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
        assert!(m.motors_on && m.mci_state == MCI_RUNNING && m.rapid_running);
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

    const Q0: [f64; 6] = [0.0, 0.0, 0.0, 0.0, 0.5, 0.0];

    /// The shipped module's rules, its home taught at the servo's start pose.
    fn shipped() -> SessionParams {
        SessionParams::from_irc5(
            &irc5::Irc5Egm::builtin().expect("deploy/irc5 parses"),
            Q0,
            2,
        )
    }

    /// Steps until a session runs (at most `max` cycles), answering nothing; the cycles taken.
    fn until_running(c: &mut Controller, max: usize) -> usize {
        for k in 0..max {
            if c.session_running() {
                return k;
            }
            c.step(0.004);
        }
        panic!("no session after {max} cycles: {:?}", c.rapid());
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
            assert_eq!(m.mci_state, MCI_RUNNING);
        }
        c.begin_cycle(dt);
        c.advance(dt);
        assert!(!c.session_running(), "{:?}", c.rapid());
        assert_eq!(c.stats.comm_timeouts, 1);
        // EGM_STOP_HOLD: the arm stays where it is; a late reply moves nothing.
        let q_end = c.joints().0;
        assert!((q_end[0] - last[0]).abs() < 1e-3, "{q_end:?} vs {last:?}");
        assert!(!c.sending(), "a comm timeout ends the session silently");
        let wait_cycles = ((p.ramp_out_s + p.restart_wait_s) / dt).round() as usize;
        for k in 1..wait_cycles {
            c.apply_reply(&joint_reply([40.0, 0.0, 0.0, 0.0, 30.0, 0.0]));
            c.begin_cycle(dt);
            c.advance(dt);
            assert!(!c.session_running(), "cycle {k} of the wait");
            assert!((c.joints().0[0] - q_end[0]).abs() < 1e-3);
        }
        // The RAPID loop waits for the fine point (R2), then starts the next session: from the
        // measured joints, seqno 0, replies ramped in.
        let fine = until_running(&mut c, 100);
        assert!(
            fine as f64 * dt >= INPOS_S - 1e-9,
            "the session started {fine} cycles after the wait, before a fine point"
        );
        assert!((c.joints().0[0] - q_end[0]).abs() < 1e-3);
        assert_eq!(c.stats.sessions, 2);
        assert_eq!(c.robot_message(0, None).seqno, 0);
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
    fn ramp_lag(mut c: Controller, ticks_per_cycle: usize) -> f64 {
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
        // same whether the servo is advanced in 1 ms base ticks or once per cycle, and with
        // the shipped rules and reply queue (one reply per cycle never waits in the queue).
        let whole = ramp_lag(ctl(), 1);
        let ticked = ramp_lag(ctl(), 4);
        assert!((whole - ticked).abs() < 1e-9, "{whole} vs {ticked}");
        assert!((0.028..0.036).contains(&ticked), "lag {ticked} s");
        let mut c = Controller::new(servo(), shipped());
        until_running(&mut c, 100);
        let rules = ramp_lag(c, 4);
        assert!((rules - ticked).abs() < 1e-9, "{rules} vs {ticked}");
    }

    fn with(p: SessionParams) -> Controller {
        Controller::new(servo(), p)
    }

    /// Answers the controller for `n` cycles with `q` (deg), `speed` (deg/s) when given.
    fn answer(c: &mut Controller, n: usize, q: [f64; 6], speed: Option<[f64; 6]>) {
        for _ in 0..n {
            c.apply_reply(&crate::wire::egm::sensor_message_with_speed(
                0,
                0,
                &q,
                speed.as_ref().map(|s| &s[..]),
            ));
            c.step(0.004);
        }
    }

    fn q0_deg() -> [f64; 6] {
        Q0.map(f64::to_degrees)
    }

    #[test]
    fn program_start_homes_then_waits_for_the_fine_point() {
        // R1: the routine's first motion goes to the taught home, non-EGM, sending nothing;
        // the session starts there at rest. Fails if a session starts before the home move.
        let home = [0.2, 0.0, 0.0, 0.0, 0.5, 0.0];
        let mut c = with(SessionParams {
            home: Some(home),
            ..shipped()
        });
        assert!(matches!(c.rapid(), Rapid::Homing { .. }), "{:?}", c.rapid());
        let mut cycles = 0;
        while !c.session_running() {
            assert!(!c.sending(), "an EgmRobot during {:?}", c.rapid());
            c.step(0.004);
            cycles += 1;
            assert!(cycles < 2000, "never reached the session: {:?}", c.rapid());
        }
        let (q, qd) = c.joints();
        assert!((q[0] - 0.2).abs() < INPOS_RAD, "{q:?}");
        assert!(qd.iter().all(|v| v.abs() < INPOS_SPEED_RAD_S), "{qd:?}");
        // 0.2 rad at 10 % of 250 deg/s takes ≈ 0.46 s.
        let t = cycles as f64 * 0.004;
        assert!(t > 0.45, "homed in {t} s");
        assert_eq!(c.robot_message(0, None).seqno, 0);
        assert_eq!(c.stats.sessions, 1);
    }

    #[test]
    fn the_first_motion_after_a_program_start_must_not_be_egm() {
        // R2: a module without the home move and the fine point: the controller refuses the
        // session with an EGM error, says so once (MCI ERROR) and RAPID stops. Fails if a
        // session starts.
        let mut c = with(SessionParams {
            home: None,
            fine_point: false,
            ..shipped()
        });
        assert_eq!(c.last_error, Some(EgmError::FirstMotionEgm));
        assert!(c.sending());
        let m = c.robot_message(4, None);
        assert_eq!(m.mci_state, MCI_ERROR);
        assert!(!m.rapid_running);
        for _ in 0..500 {
            c.step(0.004);
            assert!(!c.sending() && !c.session_running(), "{:?}", c.rapid());
        }
        assert_eq!(c.stats.sessions, 0);
        assert_eq!(c.stats.egm_errors, 1);
    }

    #[test]
    fn a_session_without_the_fine_point_is_refused_after_the_first() {
        // R2: with the home move but no fine point per session, the first session starts (from
        // the home move's fine point); the next one, after a comm timeout, does not.
        let p = SessionParams {
            fine_point: false,
            ..shipped()
        };
        let mut c = with(p);
        until_running(&mut c, 50);
        assert_eq!(c.stats.sessions, 1);
        for _ in 0..((p.comm_timeout_s + p.ramp_out_s + p.restart_wait_s) / 0.004) as usize + 10 {
            c.step(0.004);
        }
        assert_eq!(
            c.last_error,
            Some(EgmError::NotFinePoint),
            "{:?}",
            c.rapid()
        );
        assert_eq!(
            c.rapid(),
            Rapid::Stopped(StopWhy::EgmError(EgmError::NotFinePoint))
        );
        assert_eq!(c.robot_message(0, None).mci_state, MCI_ERROR);
        // The routine ended: a program start runs it from the top (home move) and the session
        // starts again.
        c.program_start();
        assert!(matches!(c.rapid(), Rapid::Homing { .. }), "{:?}", c.rapid());
        until_running(&mut c, 50);
        assert_eq!(c.stats.sessions, 2);
    }

    #[test]
    fn motors_off_stops_rapid_and_needs_a_program_start() {
        // R3 with the shipped MOC entry (-do_not_restart_after_motors_off): one message says
        // motors off, then silence; motors on alone starts nothing; Start continues with the
        // fine point. Without the flag, motors on restarts the session on its own.
        for flag in [true, false] {
            let mut c = with(SessionParams {
                restart_after_motors_off: !flag,
                ..shipped()
            });
            assert_eq!(c.params.restart_after_motors_off, !flag);
            until_running(&mut c, 50);
            answer(&mut c, 10, q0_deg(), None);
            c.state.motors_on = false;
            c.step(0.004);
            assert_eq!(c.rapid(), Rapid::Stopped(StopWhy::MotorsOff));
            let m = c.robot_message(0, None);
            assert!(!m.motors_on && m.mci_state == MCI_STOPPED && !m.rapid_running);
            assert!(!c.sending());
            c.state.motors_on = true;
            if flag {
                for _ in 0..100 {
                    c.step(0.004);
                }
                assert_eq!(c.rapid(), Rapid::Stopped(StopWhy::MotorsOff), "flag {flag}");
                c.program_start();
                assert!(
                    matches!(c.rapid(), Rapid::FinePoint { .. }),
                    "{:?}",
                    c.rapid()
                );
            }
            until_running(&mut c, 50);
            assert_eq!(c.stats.sessions, 2);
            assert_eq!(c.robot_message(0, None).seqno, 0);
        }
        assert!(
            !shipped().restart_after_motors_off,
            "the shipped MOC entry carries -do_not_restart_after_motors_off"
        );
    }

    #[test]
    fn speed_ref_is_kept_through_the_comm_timeout_then_ramped_out() {
        // R4: replies with speedRef 10 deg/s on joint 1, then silence: the reference moves on
        // at 10 deg/s until \CommTimeout, then ramps to 0 over \RampOutTime and stays. Fails
        // if it holds at once or keeps moving after the ramp.
        let p = shipped();
        let mut c = with(p);
        until_running(&mut c, 50);
        let dt = 0.004;
        let mut q = q0_deg();
        for _ in 0..100 {
            q[0] += 10.0 * dt;
            c.apply_reply(&crate::wire::egm::sensor_message_with_speed(
                0,
                0,
                &q,
                Some(&[10.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
            ));
            c.step(dt);
        }
        let last = c.reference()[0].to_degrees();
        assert!((last - q[0]).abs() < 1e-9);
        let n = (p.comm_timeout_s / dt).round() as usize;
        for k in 1..=n {
            c.step(dt);
            let r = c.reference()[0].to_degrees();
            assert!(
                (r - (last + 10.0 * dt * k as f64)).abs() < 1e-9,
                "cycle {k}: {r} deg"
            );
        }
        let at_timeout = c.reference()[0].to_degrees();
        for _ in 0..((p.ramp_out_s / dt).round() as usize + 300) {
            c.step(dt);
        }
        let end = c.reference()[0].to_degrees();
        let ramp = 0.5 * 10.0 * p.ramp_out_s;
        assert!(
            end > at_timeout + 0.8 * ramp && end < at_timeout + ramp + 0.05,
            "ramped {} deg, half the speed over the ramp-out is {ramp}",
            end - at_timeout
        );
        assert_eq!(c.stats.comm_timeouts, 1);
        // Without speedRef the same silence holds at the last reference.
        let mut c = with(p);
        until_running(&mut c, 50);
        answer(
            &mut c,
            50,
            [5.0, 0.0, 0.0, 0.0, 0.5f64.to_degrees(), 0.0],
            None,
        );
        let last = c.reference();
        for _ in 0..200 {
            c.step(dt);
        }
        assert_eq!(c.reference()[0], last[0]);
    }

    #[test]
    fn a_reference_beyond_a_joint_limit_is_an_egm_error_not_a_clamp() {
        // R5: the reference is never applied, the session ends with an EGM error (MCI ERROR
        // once), the arm holds, RAPID stops. Fails if it is clamped or applied.
        let mut c = with(shipped());
        until_running(&mut c, 50);
        answer(&mut c, 40, q0_deg(), None);
        let before = c.reference();
        let lim = *c.servo.limits();
        let mut q = q0_deg();
        q[2] = lim.max[2].to_degrees() + 0.5;
        // Close to the current reference in every other joint: only the limit is wrong.
        answer(&mut c, 1, q, None);
        assert_eq!(
            c.last_error
                .map(|e| matches!(e, EgmError::OutOfLimits { joint: 2, .. })),
            Some(true),
            "{:?}",
            c.last_error
        );
        assert_eq!(c.reference(), before, "the reference was applied");
        assert_eq!(c.robot_message(0, None).mci_state, MCI_ERROR);
        for _ in 0..100 {
            c.step(0.004);
        }
        assert!(matches!(c.rapid(), Rapid::Stopped(StopWhy::EgmError(_))));
        assert!((c.joints().0[2] - before[2]).abs() < 1e-6);
        assert_eq!(c.refs.out_of_limits, 1);
    }

    #[test]
    fn a_reference_faster_than_max_speed_deviation_is_an_egm_error() {
        // R5: a speed just under \MaxSpeedDeviation is taken; one over it, sustained, is an
        // EGM error; a one-cycle spike from a late reply is not. (The ramp-in is over first.)
        let p = shipped();
        let msd_deg = p.max_speed_dev_rad_s.to_degrees();
        assert!((msd_deg - 250.0).abs() < 1e-9);
        let mut c = with(p);
        until_running(&mut c, 50);
        let mut q = q0_deg();
        answer(&mut c, 40, q, None);
        // One step of 1.9 × the limit after a still cycle (a reply applied a cycle late, the
        // next one on time): 0.95 × over the two-reference span, taken.
        q[5] += 1.9 * msd_deg * 0.004;
        answer(&mut c, 1, q, None);
        assert_eq!(c.last_error, None);
        assert!((c.reference()[5].to_degrees() - q[5]).abs() < 1e-9);
        answer(&mut c, 2, q, None);
        // A sustained 0.99 × is taken; 1.01 × is an EGM error on its second cycle.
        for _ in 0..3 {
            q[5] += 0.99 * msd_deg * 0.004;
            answer(&mut c, 1, q, None);
        }
        assert_eq!(c.last_error, None);
        q[5] += 1.01 * msd_deg * 0.004;
        answer(&mut c, 1, q, None);
        q[5] += 1.01 * msd_deg * 0.004;
        answer(&mut c, 1, q, None);
        assert_eq!(
            c.last_error
                .map(|e| matches!(e, EgmError::SpeedDeviation { joint: 5, .. })),
            Some(true),
            "{:?}",
            c.last_error
        );
        assert!(!c.session_running());
    }

    #[test]
    fn egm_stop_ramps_out_and_ends_the_routine_and_a_start_runs_it_again() {
        // R7: the stop trap ends the session with a ramp-out, RAPID stops (the routine left);
        // a program start runs it from the top: home move, fine point, a new session.
        let p = shipped();
        let mut c = with(p);
        until_running(&mut c, 50);
        answer(&mut c, 20, q0_deg(), None);
        c.egm_stop();
        assert!(matches!(c.rapid(), Rapid::RampOut { .. }));
        for _ in 0..((p.ramp_out_s / 0.004) as usize + 2) {
            c.step(0.004);
        }
        assert_eq!(c.rapid(), Rapid::Stopped(StopWhy::Ended));
        for _ in 0..500 {
            c.step(0.004);
        }
        assert_eq!(
            c.rapid(),
            Rapid::Stopped(StopWhy::Ended),
            "no session without a start"
        );
        c.program_start();
        assert!(matches!(c.rapid(), Rapid::Homing { .. }));
        until_running(&mut c, 50);
        assert_eq!(c.stats.sessions, 2);
        assert_eq!(c.stats.egm_errors, 0);
    }

    #[test]
    fn the_convergence_condition_held_for_cond_time_ends_the_session() {
        // R8, with \CondTime 0.1 s: a reference standing still converges, the session ends
        // normally and the loop starts the next one; the shipped 1e6 s never ends one.
        let p = SessionParams {
            cond_time_s: 0.1,
            ..shipped()
        };
        let mut c = with(p);
        until_running(&mut c, 50);
        answer(&mut c, 60, q0_deg(), None);
        assert_eq!(c.stats.converged, 1, "{:?}", c.rapid());
        until_running(&mut c, 400);
        assert_eq!(c.stats.sessions, 2);
        let mut c = with(shipped());
        until_running(&mut c, 50);
        answer(&mut c, 500, q0_deg(), None);
        assert_eq!(c.stats.converged, 0);
        assert!(c.robot_message(0, None).mci_convergence_met);
    }

    #[test]
    fn replies_are_read_in_order_and_a_full_queue_drops_the_arrival() {
        // R9: two replies in one cycle are applied over two cycles (a late reply adds a
        // cycle); a third to a full queue of 2 is dropped and counted. Fails with newest-wins.
        let mut c = with(shipped());
        until_running(&mut c, 50);
        answer(&mut c, 40, q0_deg(), None);
        let q = q0_deg();
        for s in [8, 9, 10] {
            c.apply_reply(&crate::wire::egm::sensor_message(s, 0, &q));
        }
        assert_eq!(c.stats.reply_queue_drops, 1);
        c.step(0.004);
        assert_eq!(c.reference_seqno(), Some(8));
        c.step(0.004);
        assert_eq!(c.reference_seqno(), Some(9));
        c.step(0.004);
        assert_eq!(c.reference_seqno(), Some(9), "10 was dropped");
    }
}
