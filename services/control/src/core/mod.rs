//! The control modes' pure core: one `step` per tool pose (i.e. per robot cycle).
//!
//! Modes: `Idle` (publishes nothing → robot-io holds), `Hold` (actively holds the TCP pose
//! captured on entry), `Move` (straight-line TCP move with a smooth profile bounded in speed
//! and, by `[control.ending]`'s accelerations, in acceleration; then hold at the target),
//! `Hybrid` (a Raibert–Craig task on the arm, [`crate::hybrid`]), `LeadThrough` (hand guiding,
//! [`crate::guide`]) and `Playback` (a taught program, [`crate::trajectory`]). Every mode has
//! one shape ([`law`]): the same input each cycle, the command and its report or how the motion
//! ends; the core starts a requested mode from the measured pose, steps it, and carries out
//! its end (an [`Ending`] that comes to rest, or a stop at once). The 2-DOF plant's task runs
//! beside the arm's mode ([`plant`]); the lead-through session's deadman and teach-on-dwell
//! are in [`session`].
//!
//! **Every motion is tied to robot-io** (item 2 of the command-path review): entering a mode
//! that moves the robot starts a new motion with a new id and the boot id robot-io published
//! in its safety state ([`MotionTag`]); every command carries it. A drop of robot-io's safety
//! level from `Active` during the motion (robot not ready, robot silent, command stale, stop),
//! a different robot-io boot id (a restart), or no acceptance within
//! [`ACCEPT_TIMEOUT_S`] ends the motion: control goes `Idle` and says why
//! ([`ControlCore::stop_reason`]). Nothing moves again until an operator command starts a new
//! motion from the measured pose.

use common::msg::{
    CartesianTarget, HybridGains, HybridLimits, HybridTask, Mode, MotionTag, MoveTarget, Pose,
    ProtectiveCause, SafetyLevel, SafetyReason, SafetyState, StopCategory, WrenchFault,
};
use nalgebra::{Isometry3, Vector3};

use crate::ending::{EndParams, Ending};
use crate::guide::{GuideParams, GuideReport, GuideRun};
use crate::hybrid::{ArmRun, StepReport, WrenchPeak};
use crate::trajectory::PlaybackState;

mod inputs;
mod law;
mod plant;
mod play;
mod session;
pub use inputs::{RobotClock, WrenchGate, WrenchInput, WrenchUnusable};
pub use law::{HoldPose, ModeEnd, ModeInput, ModeLaw, ModeStep, MoveState};
pub use plant::PlantStep;
pub use play::{PlayCommand, PlayReport, PlayRun};

/// What a hybrid task needs beyond its message: gains and limits resolved from the task or
/// control's configuration, and the contact stiffness per axis of {C} (force feedforward).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridSetup {
    pub gains: HybridGains,
    pub limits: HybridLimits,
    pub stiffness: [f64; 6],
    /// The stiffest contact the cell declares it may meet (N/m): bounds the approach speed.
    pub worst_case_n_per_m: f64,
    /// Effective force-loop delay (s).
    pub loop_delay_s: f64,
    /// The force gains follow an on-line stiffness estimate, down to this softest stiffness
    /// (N/m) and up to `worst_case_n_per_m` (`None`: fixed gains).
    pub adapt_softest_n_per_m: Option<f64>,
    /// Speed adaptation's force bound (N; 0: off), `[control.hybrid] slowdown_error_n`.
    pub slowdown_error_n: f64,
    /// The position axes' speed bound (m/s, rad/s; on the norm), `[control.hybrid]
    /// position_speed_m_s`, `position_speed_rad_s`.
    pub position_speed: (f64, f64),
    /// `[control.hybrid] max_reference_lag_s`.
    pub max_reference_lag_s: f64,
}

/// A motion robot-io has not accepted (level `Active` with its id) within this time ends.
pub const ACCEPT_TIMEOUT_S: f64 = 1.0;

/// Time that passes between steps of a timed motion (move, playback): robot cycles × the
/// robot's period when the shell gives them, else robot-clock differences; 0 on the first step;
/// at most 50 ms a step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct StepClock {
    last_cycle: Option<u64>,
    last_s: Option<f64>,
}

impl StepClock {
    /// The time since the previous step (s) for a step at `cycle` (cycle, period) and `now_s`.
    fn advance(&mut self, cycle: Option<(u64, f64)>, now_s: f64) -> f64 {
        let dt = match (cycle, self.last_cycle, self.last_s) {
            (Some((c, p)), Some(lc), _) => (c.wrapping_sub(lc) as f64 * p).clamp(0.0, 0.05),
            (None, _, Some(l)) => (now_s - l).clamp(0.0, 0.05),
            _ => 0.0,
        };
        self.last_s = Some(now_s);
        self.last_cycle = cycle.map(|c| c.0);
        dt
    }
}

/// Mode request outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeError {
    NotAvailable(Mode),
    SafetyStop(SafetyLevel),
    /// robot-io has not published its safety state yet.
    RobotIoUnknown,
    /// robot-io says the robot cannot move now.
    RobotNotReady(SafetyReason),
    /// A force mode needs a tared, fault-free, fresh wrench estimate.
    WrenchNotUsable(String),
    InvalidTask(String),
    /// `Hybrid` is entered by sending a task, not by a bare mode request.
    NeedsTask,
    /// `Playback` is entered with a program (`cell play NAME`).
    NeedsProgram,
    /// `LeadThrough` is entered by a guide request (`control/rpc/lead`), whose reply carries
    /// the token that binds the deadman; a bare mode request has no way to return it.
    NeedsGuideRequest,
    /// A playback command without a playback running.
    NotPlaying,
}

impl std::fmt::Display for ModeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModeError::NotAvailable(m) => write!(f, "mode {m:?} is not available in this build"),
            ModeError::SafetyStop(l) => write!(f, "refused: robot-io is in {l:?}; reset first"),
            ModeError::RobotIoUnknown => {
                write!(
                    f,
                    "refused: no safety state from robot-io yet (is it running?)"
                )
            }
            ModeError::RobotNotReady(r) => write!(f, "refused: robot-io reports {r:?}"),
            ModeError::WrenchNotUsable(w) => {
                write!(
                    f,
                    "refused: the wrench estimate is not usable ({w}); tare first"
                )
            }
            ModeError::InvalidTask(e) => write!(f, "refused: {e}"),
            ModeError::NeedsTask => {
                write!(f, "hybrid is started with a task (cell hybrid TASK.toml)")
            }
            ModeError::NeedsProgram => {
                write!(f, "playback is started with a program (cell play NAME)")
            }
            ModeError::NotPlaying => write!(f, "no playback is running"),
            ModeError::NeedsGuideRequest => write!(
                f,
                "lead-through is started by a guide request (cell guide), whose reply binds \
                 the deadman to its enable token"
            ),
        }
    }
}

/// The last Cartesian command of the motion, and its velocity (base; by the robot clock).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct CmdTrack {
    last: Option<Isometry3<f64>>,
    v_m_s: Vector3<f64>,
    w_rad_s: Vector3<f64>,
    clock: StepClock,
}

/// What to start once a motion that is ending has come to rest (a mode switch).
#[derive(Debug, Clone)]
enum Next {
    Hold,
    Move(MoveTarget),
    Hybrid(Box<(HybridTask, HybridSetup)>),
    Guide(Box<GuideParams>),
    Play(Box<(String, PlayRun)>),
}

/// The motion in progress and what robot-io said about it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Motion {
    tag: MotionTag,
    /// Time of the first step of the motion (s), set on that step.
    start_s: Option<f64>,
    /// robot-io executed this motion at least once.
    accepted: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ControlCore {
    mode: Mode,
    hold: Option<HoldPose>,
    mv: Option<MoveState>,
    pending_move: Option<MoveTarget>,
    safety: Option<SafetyState>,
    motion: Option<Motion>,
    /// The motion that went idle and how it stops, not yet ended at robot-io.
    ended_motion: Option<(MotionTag, StopCategory)>,
    /// How the motion ending now stops (set for the length of [`Self::end_motion_as`]).
    stop_category: StopCategory,
    /// Motion ids: `id_base` + counter (the base differs per process so that a restarted
    /// control never reuses an id robot-io has seen end).
    id_base: u64,
    next_id: u64,
    stop_reason: Option<String>,
    pending_hybrid: Option<(HybridTask, HybridSetup)>,
    hybrid: Option<ArmRun>,
    report: Option<StepReport>,
    pending_guide: Option<GuideParams>,
    guide: Option<GuideRun>,
    guide_report: Option<GuideReport>,
    /// The deadman is held this step (`session`: on robot time).
    deadman_held: bool,
    /// The lead-through session's deadman binding.
    deadman_binding: crate::deadman::Deadman,
    /// The teach buffer, and the measured joints and TCP speed of this step (set by the shell
    /// before it; the dwell rule's input), and a waypoint recorded on dwell not yet said.
    teach: crate::teach::TeachBuffer,
    measured: Option<([f64; 6], f64)>,
    dwell_recorded: Option<usize>,
    pending_play: Option<(String, PlayRun)>,
    play: Option<(String, PlayRun)>,
    play_report: Option<PlayReport>,
    /// The running mode's step clock (reset when a mode is entered): its [`ModeInput::dt_s`].
    mode_clock: StepClock,
    /// The robot cycle of this step and the robot's cycle period (s), when the shell knows
    /// them: playback advances by whole cycles (uniform steps: the receive-time jitter left in
    /// the robot clock would show as acceleration spikes in the joint references).
    cycle: Option<(u64, f64)>,
    /// The unfiltered peaks of the wrench estimate in use (set by the shell before each step,
    /// from [`WrenchGate::peak`]): the force limits' input.
    wrench_peak: WrenchPeak,
    /// How a motion control ends comes to rest (`[control.ending]`).
    end_params: EndParams,
    /// A motion coming to rest (issue 19 item 10), and what to start after it.
    ending: Option<(Ending, Option<Next>)>,
    end_clock: StepClock,
    /// The force and torque limits (N, N·m) the ending motion ran under: still checked while
    /// it comes to rest (issue 41 item 4), a protective stop beyond them.
    end_limits: Option<(f64, f64)>,
    /// The motion's last command and its velocity, where an ending starts from.
    track: CmdTrack,
    /// The newest usable contact force on the tool (base, N): what an ending unloads.
    last_force: Option<Vector3<f64>>,
    /// Guiding ended on a protective stop, or a task on an impact or a saturated sensor:
    /// robot-io is to latch one (issue 19 item 6, issue 41 item 2).
    protective_request: bool,
    /// The tag reserved for the motion queued behind an ending (a request's reply names it).
    queued_tag: Option<MotionTag>,
    /// Counts the changes of `stop_reason` (the shell refreshes its status on a change).
    stop_changes: u64,
    /// The 2-DOF plant's task (beside the arm's mode; stopped by every stop of the cell).
    plant: plant::PlantTask,
}

/// Duration of a smoothstep move whose peak speeds and accelerations stay within the limits
/// (`v` m/s, `w` rad/s, `a` m/s², `alpha` rad/s²). Smoothstep s(τ) = 3τ² − 2τ³ peaks at
/// ds/dτ = 1.5 and |d²s/dτ²| = 6, so T = max(1.5·d/v, 1.5·θ/ω, √(6·d/a), √(6·θ/α)).
///
/// Without the acceleration terms a short move was as fast as a long one's speed allowed: the
/// peg's 3.6 mm placement at 150 mm/s took 36 ms, 17 m/s² at the TCP, and robot-io limited
/// its joint references 7 times (issue 21). Non-positive or non-finite `a`/`alpha` leave the
/// acceleration unbounded.
pub fn move_duration_s(
    from: &Isometry3<f64>,
    to: &Isometry3<f64>,
    v: f64,
    w: f64,
    a: f64,
    alpha: f64,
) -> f64 {
    let d = (to.translation.vector - from.translation.vector).norm();
    let th = from.rotation.angle_to(&to.rotation);
    let mut t = 1.5 * (d / v).max(th / w);
    if a.is_finite() && a > 0.0 {
        t = t.max((6.0 * d / a).sqrt());
    }
    if alpha.is_finite() && alpha > 0.0 {
        t = t.max((6.0 * th / alpha).sqrt());
    }
    t.max(1e-3)
}

/// Smoothstep interpolation between two poses (position linear, orientation slerp).
pub fn interpolate(from: &Isometry3<f64>, to: &Isometry3<f64>, tau: f64) -> Isometry3<f64> {
    let tau = tau.clamp(0.0, 1.0);
    let s = tau * tau * (3.0 - 2.0 * tau);
    let p = from.translation.vector.lerp(&to.translation.vector, s);
    let r = from.rotation.slerp(&to.rotation, s);
    Isometry3::from_parts(p.into(), r)
}

pub fn is_stop(l: SafetyLevel) -> bool {
    matches!(l, SafetyLevel::ProtectiveStop | SafetyLevel::EmergencyStop)
}

impl ControlCore {
    /// The cell is stopped (an e-stop or a protective stop latched at robot-io): no machine
    /// of the cell may start moving, the 2-DOF plant included. Returns the level.
    pub fn cell_stopped(&self) -> Option<SafetyLevel> {
        self.safety.map(|s| s.level).filter(|l| is_stop(*l))
    }

    /// A core whose motion ids start above `id_base` (give each process a different one).
    pub fn new(id_base: u64) -> Self {
        Self {
            id_base,
            ..Default::default()
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How motions control ends come to rest.
    pub fn set_end_params(&mut self, p: EndParams) {
        self.end_params = p;
    }

    /// A guide session is queued behind an ending (its deadman binding must stay).
    pub fn guide_queued(&self) -> bool {
        matches!(self.ending, Some((_, Some(Next::Guide(_)))))
    }

    /// Whether the motion is coming to rest (an ending), and whether it unloads a surface.
    pub fn ending(&self) -> Option<bool> {
        self.ending.as_ref().map(|(e, _)| e.unloads())
    }

    /// The unfiltered peaks of this cycle's wrench estimate ([`WrenchGate::peak`]).
    pub fn set_wrench_peak(&mut self, peak: WrenchPeak) {
        self.wrench_peak = peak;
    }

    fn set_stop_reason(&mut self, r: Option<String>) {
        if self.stop_reason != r {
            self.stop_changes += 1;
        }
        self.stop_reason = r;
    }

    /// How often the stop reason changed (a status snapshot older than a change is stale).
    pub fn stop_changes(&self) -> u64 {
        self.stop_changes
    }

    /// Why the last motion ended without an operator asking (cleared by a new motion).
    pub fn stop_reason(&self) -> Option<&str> {
        self.stop_reason.as_deref()
    }

    /// The tag every command of the current motion carries.
    pub fn motion_tag(&self) -> Option<MotionTag> {
        self.motion.map(|m| m.tag)
    }

    /// Whether a move is done (or no move active).
    pub fn move_done(&self) -> bool {
        self.mv.is_none_or(|m| m.done())
    }

    /// Ends the motion at once (no ending): robot-io brakes from its last reference and holds.
    pub fn stop_now(&mut self, why: String) {
        self.end_motion(why);
    }

    /// A controlled end at once: robot-io brakes from its last reference.
    fn end_motion(&mut self, why: String) {
        self.end_motion_as(why, StopCategory::Controlled);
    }

    /// Ends the motion at once, as `stop` says: a protective end holds where the arm is.
    fn end_motion_as(&mut self, why: String, stop: StopCategory) {
        self.queued_tag = None;
        if self.mode != Mode::Idle {
            self.set_stop_reason(Some(why));
            self.stop_category = stop;
            self.enter(Mode::Idle);
            self.stop_category = StopCategory::Controlled;
        }
    }

    /// Safety state from robot-io: a stop, a restart of robot-io, or a drop from `Active`
    /// during the motion ends it (→ `Idle`, reason kept).
    pub fn on_safety(&mut self, s: &SafetyState) {
        self.on_safety_arm(s);
        if let Some(level) = self.cell_stopped() {
            // An e-stop or a protective stop stops every machine of the cell.
            self.end_plant(&format!("robot-io {level:?}"));
        }
    }

    fn on_safety_arm(&mut self, s: &SafetyState) {
        self.safety = Some(*s);
        if is_stop(s.level) {
            self.end_motion(format!("robot-io {:?} ({:?})", s.level, s.reason));
            return;
        }
        let Some(m) = self.motion.as_mut() else {
            return;
        };
        if s.robot_boot != m.tag.robot_boot {
            self.end_motion("robot-io restarted during the motion".into());
            return;
        }
        if s.level == SafetyLevel::Active && s.motion_id == m.tag.motion_id {
            m.accepted = true;
        } else if m.accepted
            && s.level != SafetyLevel::Active
            && s.reason != SafetyReason::CommandStale
        {
            // A stale blip holds and may resume; robot-io ends the motion (`MotionEnded`)
            // when the stream stays stale.
            self.end_motion(format!(
                "robot-io dropped from Active to {:?} ({:?})",
                s.level, s.reason
            ));
        } else if !m.accepted
            && matches!(
                s.reason,
                SafetyReason::RobotNotReady | SafetyReason::RobotSilent
            )
        {
            self.end_motion(format!("robot-io reports {:?}", s.reason));
        }
    }

    /// Checks that a motion may start now; returns robot-io's boot id.
    fn may_move(&self) -> Result<u64, ModeError> {
        let s = self.safety.ok_or(ModeError::RobotIoUnknown)?;
        if is_stop(s.level) {
            return Err(ModeError::SafetyStop(s.level));
        }
        if matches!(
            s.reason,
            SafetyReason::RobotNotReady | SafetyReason::RobotSilent
        ) {
            return Err(ModeError::RobotNotReady(s.reason));
        }
        Ok(s.robot_boot)
    }

    /// Whether the running motion can come to rest through an [`Ending`]: a mode that
    /// streams Cartesian poses, a motion robot-io has accepted, a command to start from.
    fn can_end_smoothly(&self) -> bool {
        matches!(
            self.mode,
            Mode::Hybrid | Mode::LeadThrough | Mode::Move | Mode::Hold
        ) && self.motion.is_some_and(|m| m.accepted)
            && self.track.last.is_some()
    }

    /// Ends the running motion through an [`Ending`] (see [`crate::ending`]): `why` is the
    /// stop reason (none for an operator's request), `next` what starts once at rest. A force
    /// task that ends pressing unloads its surface, unless another force task or a hold
    /// follows. Without a running motion: idle at once, then `next`.
    fn end_smoothly(&mut self, why: Option<String>, next: Option<Next>) {
        if let Some(w) = why {
            self.set_stop_reason(Some(w));
        }
        if next.is_none() {
            self.queued_tag = None;
        }
        if let Some((_, n)) = self.ending.as_mut() {
            *n = next;
            return;
        }
        if !self.can_end_smoothly() {
            self.finish_now(next);
            return;
        }
        let Some(last) = self.track.last else {
            self.finish_now(next);
            return;
        };
        // A force task followed by another keeps its contact; one asked to hold holds where
        // it is (e.g. a peg at its depth); any other end unloads the surface.
        let unload = match (self.mode, &next, &self.hybrid, self.last_force) {
            (Mode::Hybrid, Some(Next::Hybrid(_) | Next::Hold), _, _) => None,
            (Mode::Hybrid, _, Some(run), Some(f)) => {
                run.unload(&f, self.end_params.release_force_n)
            }
            _ => None,
        };
        if self.mode == Mode::Hybrid {
            if let Some(r) = self.report.as_mut() {
                if r.phase != common::msg::HybridPhase::Done {
                    r.phase = common::msg::HybridPhase::Aborted;
                }
            }
        }
        self.end_limits = match self.mode {
            Mode::Hybrid => self
                .hybrid
                .as_ref()
                .map(|r| (r.sup.limits.max_force_n, r.sup.limits.max_torque_nm)),
            Mode::LeadThrough => self
                .guide
                .as_ref()
                .map(|g| (g.params.max_force_n, g.params.max_torque_nm)),
            _ => None,
        };
        self.ending = Some((
            Ending::new(
                self.end_params,
                last,
                self.track.v_m_s,
                self.track.w_rad_s,
                unload,
            ),
            next,
        ));
        self.end_clock = self.track.clock;
    }

    /// Idle now (the motion ends at robot-io, which brakes and holds), then `next`.
    fn finish_now(&mut self, next: Option<Next>) {
        self.enter(Mode::Idle);
        if let Some(n) = next {
            match self.may_move() {
                Ok(boot) => self.begin(n, boot),
                Err(e) => {
                    self.queued_tag = None;
                    self.set_stop_reason(Some(format!(
                        "the requested mode did not start after the previous motion ended: {e}"
                    )))
                }
            }
        }
    }

    /// Starts `next` now as a new motion.
    fn begin(&mut self, next: Next, boot: u64) {
        match next {
            Next::Hold => self.enter(Mode::Hold),
            Next::Move(t) => {
                self.enter(Mode::Move);
                self.pending_move = Some(t);
            }
            Next::Hybrid(b) => {
                self.enter(Mode::Hybrid);
                self.pending_hybrid = Some(*b);
            }
            Next::Guide(p) => {
                self.enter(Mode::LeadThrough);
                self.pending_guide = Some(*p);
            }
            Next::Play(b) => {
                self.enter(Mode::Playback);
                self.pending_play = Some(*b);
            }
        }
        self.start_motion(boot);
    }

    /// A new motion: after the running one has come to rest when it moves, else now. Its tag
    /// is chosen now either way ([`Self::requested_motion_tag`]).
    fn switch(&mut self, next: Next, boot: u64) {
        if self.ending.is_some() || self.can_end_smoothly() {
            self.queued_tag = Some(self.new_tag(boot));
            self.end_smoothly(None, Some(next));
        } else {
            self.begin(next, boot);
        }
    }

    fn new_tag(&mut self, robot_boot: u64) -> MotionTag {
        self.next_id += 1;
        MotionTag {
            robot_boot,
            motion_id: self.id_base.wrapping_add(self.next_id).max(1),
        }
    }

    /// The tag of the motion the last request started, or queued behind an ending.
    pub fn requested_motion_tag(&self) -> Option<MotionTag> {
        self.queued_tag.or(self.motion_tag())
    }

    fn start_motion(&mut self, robot_boot: u64) {
        self.track = CmdTrack::default();
        let tag = match self.queued_tag.take() {
            Some(t) if t.robot_boot == robot_boot => t,
            _ => self.new_tag(robot_boot),
        };
        self.motion = Some(Motion {
            tag,
            start_s: None,
            accepted: false,
        });
        self.set_stop_reason(None);
    }

    pub fn request_mode(&mut self, mode: Mode) -> Result<(), ModeError> {
        match mode {
            Mode::Idle => {
                // An operator's stop: the motion comes to rest (and a force task unloads);
                // the plant's task stops too (issue 41 item 7).
                self.end_smoothly(None, None);
                self.end_plant("operator stop (mode idle)");
                Ok(())
            }
            // Lead-through: `request_guide`, through the guide request that binds the deadman.
            Mode::LeadThrough => Err(ModeError::NeedsGuideRequest),
            Mode::Playback => Err(ModeError::NeedsProgram),
            Mode::Hybrid => Err(ModeError::NeedsTask),
            // Move needs a target (`request_move`); without one it holds where it is.
            Mode::Hold | Mode::Move => {
                let boot = self.may_move()?;
                self.switch(Next::Hold, boot);
                Ok(())
            }
        }
    }

    /// Starts a straight-line move on the next step (switches to `Move`), from the measured
    /// pose, as a new motion.
    pub fn request_move(&mut self, target: MoveTarget) -> Result<(), ModeError> {
        let boot = self.may_move()?;
        self.switch(Next::Move(target), boot);
        Ok(())
    }

    /// Starts a hybrid task on the arm on the next step, from the measured pose, as a new
    /// motion. Needs a robot that may move and a usable wrench (`wrench_fault` is the newest
    /// estimate's fault, `None` when there is no fresh estimate).
    pub fn request_hybrid(
        &mut self,
        task: HybridTask,
        setup: HybridSetup,
        wrench_fault: Option<WrenchFault>,
    ) -> Result<(), ModeError> {
        use common::msg::Check;
        task.check().map_err(ModeError::InvalidTask)?;
        if task.robot != common::msg::TaskRobot::Arm {
            return Err(ModeError::InvalidTask(
                "a plant task is not run on the arm".into(),
            ));
        }
        let boot = self.may_move()?;
        match wrench_fault {
            None => return Err(ModeError::WrenchNotUsable("no fresh estimate".into())),
            Some(WrenchFault::None) => {}
            Some(f) => return Err(ModeError::WrenchNotUsable(format!("{f:?}"))),
        }
        self.switch(Next::Hybrid(Box::new((task, setup))), boot);
        Ok(())
    }

    /// Starts hand guiding with `params` on the next step, from the measured pose, as a new
    /// motion, its deadman bound to `token` and to the requester's `identity` (only enables on
    /// that identity's key carrying the token keep the session's deadman: docs/safety.md,
    /// docs/security.md). Needs a robot that may move and a usable wrench.
    pub fn request_guide(
        &mut self,
        params: GuideParams,
        wrench_fault: Option<WrenchFault>,
        token: u64,
        identity: &str,
    ) -> Result<(), ModeError> {
        let problems = params.problems("guide");
        if !problems.is_empty() {
            return Err(ModeError::InvalidTask(problems.join("; ")));
        }
        let boot = self.may_move()?;
        match wrench_fault {
            None => return Err(ModeError::WrenchNotUsable("no fresh estimate".into())),
            Some(WrenchFault::None) => {}
            Some(f) => return Err(ModeError::WrenchNotUsable(format!("{f:?}"))),
        }
        self.switch(Next::Guide(Box::new(params)), boot);
        self.deadman_binding.bind(token, identity);
        Ok(())
    }

    /// The robot cycle of the next step and the cycle period (s).
    pub fn set_cycle(&mut self, cycle: u64, period_s: f64) {
        self.cycle = (period_s.is_finite() && period_s > 0.0).then_some((cycle, period_s));
    }

    /// The newest guiding report.
    pub fn guide_report(&self) -> Option<&GuideReport> {
        self.guide_report.as_ref()
    }

    /// The running guiding session's law.
    pub fn guide_law(&self) -> Option<common::msg::GuideLaw> {
        self.guide
            .as_ref()
            .map(|g| g.params.law)
            .or(self.pending_guide.map(|p| p.law))
    }

    /// The guiding law's commanded TCP speed (m/s), when guiding.
    pub fn guide_speed_m_s(&self) -> Option<f64> {
        self.guide.as_ref().map(|g| g.speed_m_s())
    }

    /// Starts a planned playback (its first segment starts at the measured joints) on the
    /// next step, as a new motion.
    pub fn request_play(&mut self, name: String, playback: PlayRun) -> Result<(), ModeError> {
        let boot = self.may_move()?;
        self.switch(Next::Play(Box::new((name, playback))), boot);
        Ok(())
    }

    /// Pause / resume / stop of the running playback.
    pub fn play_command(&mut self, cmd: PlayCommand) -> Result<PlaybackState, ModeError> {
        let (_, pb) = self
            .play
            .as_mut()
            .or(self.pending_play.as_mut())
            .filter(|_| self.mode == Mode::Playback)
            .ok_or(ModeError::NotPlaying)?;
        Ok(match (cmd, pb) {
            (PlayCommand::Pause, PlayRun::Joint(p)) => p.pause(),
            (PlayCommand::Resume, PlayRun::Joint(p)) => p.resume(),
            (PlayCommand::Stop, PlayRun::Joint(p)) => p.stop(),
            (PlayCommand::Pause, PlayRun::Cartesian(p)) => p.pause(),
            (PlayCommand::Resume, PlayRun::Cartesian(p)) => p.resume(),
            (PlayCommand::Stop, PlayRun::Cartesian(p)) => p.stop(),
        })
    }

    /// The running (or last) playback: its program name and newest sample.
    pub fn play_report(&self) -> Option<(&str, &PlayReport)> {
        let (n, _) = self.play.as_ref()?;
        Some((n.as_str(), self.play_report.as_ref()?))
    }

    /// The newest hybrid step's report (also the final one of an aborted task).
    pub fn hybrid_report(&self) -> Option<&StepReport> {
        self.report.as_ref()
    }

    /// The running (or last) hybrid task's name.
    pub fn hybrid_task(&self) -> Option<&HybridTask> {
        self.hybrid
            .as_ref()
            .map(|h| &h.task)
            .or(self.pending_hybrid.as_ref().map(|p| &p.0))
    }

    fn enter(&mut self, mode: Mode) {
        self.mode = mode;
        self.hold = None;
        self.mv = None;
        self.pending_move = None;
        self.pending_hybrid = None;
        self.pending_guide = None;
        self.guide = None;
        self.pending_play = None;
        self.mode_clock = StepClock::default();
        self.ending = None;
        // Idle keeps the last hybrid run and playback (name and final report for the status).
        if mode != Mode::Idle {
            self.hybrid = None;
            self.play = None;
            self.play_report = None;
        }
        if mode == Mode::Idle {
            if let Some(m) = self.motion.take() {
                self.ended_motion = Some((m.tag, self.stop_category));
            }
        }
    }

    /// Whether a protective stop was raised since the last call (to be latched at robot-io:
    /// `EStopAction::Protective`; the operator resets it with `cell reset --protective`).
    pub fn take_protective_request(&mut self) -> bool {
        std::mem::take(&mut self.protective_request)
    }

    /// The motion that went idle since the last call and how it stops (to be ended at
    /// robot-io explicitly: a protective end holds where the arm is measured).
    pub fn take_ended_motion(&mut self) -> Option<(MotionTag, StopCategory)> {
        self.ended_motion.take()
    }

    /// One cycle without a wrench (a running hybrid task ends: no wrench).
    pub fn step(&mut self, tcp: &Isometry3<f64>, now_s: f64) -> Option<CartesianTarget> {
        self.step_with_wrench(tcp, now_s, &Err(WrenchUnusable::NoneReceived))
    }

    /// One cycle: the measured TCP pose, the cycle time and the newest contact wrench → the
    /// Cartesian target, or `None` (Idle: robot-io holds by itself).
    pub fn step_with_wrench(
        &mut self,
        tcp: &Isometry3<f64>,
        now_s: f64,
        wrench: &WrenchInput,
    ) -> Option<CartesianTarget> {
        self.update_deadman(now_s);
        let before = self.mode;
        let target = self.step_once(tcp, now_s, wrench);
        self.observe_dwell(before, tcp, now_s);
        target
    }

    fn step_once(
        &mut self,
        tcp: &Isometry3<f64>,
        now_s: f64,
        wrench: &WrenchInput,
    ) -> Option<CartesianTarget> {
        if let Some(m) = self.motion.as_mut() {
            let start = *m.start_s.get_or_insert(now_s);
            if !m.accepted && now_s - start > ACCEPT_TIMEOUT_S {
                let why = match self.safety {
                    Some(s) => format!(
                        "robot-io did not accept the motion within {ACCEPT_TIMEOUT_S} s ({:?}, {:?})",
                        s.level, s.reason
                    ),
                    None => "robot-io did not accept the motion".into(),
                };
                self.end_motion(why);
            }
        }
        if let Ok((f, _)) = wrench {
            if f.iter().all(|v| v.is_finite()) {
                self.last_force = Some(*f);
            }
        }
        if self.ending.is_some() {
            return self.step_ending(wrench, now_s);
        }
        let target = self.step_mode(tcp, now_s, wrench);
        if self.ending.is_some() {
            // The mode ended this cycle: its first step of coming to rest.
            return self.step_ending(wrench, now_s);
        }
        match &target {
            Some(CartesianTarget::Pose(p)) if self.motion.is_some() => {
                let pose = p.to_isometry();
                let dt = self.track.clock.advance(self.cycle, now_s);
                if let (Some(prev), true) = (self.track.last, dt > 0.0) {
                    self.track.v_m_s = (pose.translation.vector - prev.translation.vector) / dt;
                    self.track.w_rad_s =
                        (pose.rotation * prev.rotation.inverse()).scaled_axis() / dt;
                }
                self.track.last = Some(pose);
            }
            _ => self.track = CmdTrack::default(),
        }
        target
    }

    /// One cycle of an [`Ending`]; at rest the motion ends (and the next one is started).
    fn step_ending(&mut self, wrench: &WrenchInput, now_s: f64) -> Option<CartesianTarget> {
        let dt = self.end_clock.advance(self.cycle, now_s);
        let force = wrench.as_ref().ok().map(|(f, _)| *f);
        if let Some(why) = self.over_end_limits(wrench) {
            // Coming to rest is no licence to push: the motion's limits hold to its end.
            self.ending = None;
            self.end_motion_as(why.0, StopCategory::Protective(why.1));
            return None;
        }
        let (e, _) = self.ending.as_mut()?;
        let s = e.step(dt, force.as_ref());
        if s.done {
            let next = self.ending.take().and_then(|(_, n)| n);
            self.finish_now(next);
            return None;
        }
        Some(CartesianTarget::Pose(Pose::from_isometry(&s.pose)))
    }

    /// The ending motion's force or torque limit exceeded (the unfiltered peak or the
    /// estimate), or an impact or a saturated sensor: why, and the cause.
    fn over_end_limits(&self, wrench: &WrenchInput) -> Option<(String, ProtectiveCause)> {
        let (max_f, max_t) = self.end_limits?;
        let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
        match wrench {
            Ok((f, t)) => {
                let fp = f.norm().max(finite(self.wrench_peak.force_n));
                let tp = t.norm().max(finite(self.wrench_peak.torque_nm));
                if fp > max_f {
                    Some((
                        format!("while coming to rest: contact force {fp:.1} N > max {max_f:.1} N"),
                        ProtectiveCause::ForceLimit,
                    ))
                } else if tp > max_t {
                    Some((
                        format!(
                            "while coming to rest: contact torque {tp:.2} N·m > max {max_t:.2} N·m"
                        ),
                        ProtectiveCause::TorqueLimit,
                    ))
                } else {
                    None
                }
            }
            Err(e) => e
                .protective_cause()
                .map(|c| (format!("while coming to rest: wrench estimate {e}"), c)),
        }
    }

    /// One cycle of the running mode: a mode requested since the last step starts from the
    /// measured pose; then every mode steps the same way ([`ModeLaw`]) and the core carries out
    /// what it answers: the command, a smooth end, or a stop at once (latched at robot-io when
    /// the mode says so).
    fn step_mode(
        &mut self,
        tcp: &Isometry3<f64>,
        now_s: f64,
        wrench: &WrenchInput,
    ) -> Option<CartesianTarget> {
        if self.mode == Mode::Idle {
            return None;
        }
        if let Err(why) = self.start_requested(tcp) {
            self.end_motion(why);
            return None;
        }
        let input = ModeInput {
            tcp,
            now_s,
            wrench,
            peak: self.wrench_peak,
            cycle_period_s: self.cycle.map(|(_, period)| period),
            dt_s: self.mode_clock.advance(self.cycle, now_s),
            deadman_held: self.deadman_held,
        };
        let step = match self.mode {
            Mode::Idle => return None,
            Mode::Hold => keep_report(
                self.hold.get_or_insert(HoldPose(*tcp)).cycle(&input),
                &mut None,
            ),
            Mode::Move => keep_report(self.mv.as_mut()?.cycle(&input), &mut None),
            Mode::Hybrid => keep_report(self.hybrid.as_mut()?.cycle(&input), &mut self.report),
            Mode::LeadThrough => {
                keep_report(self.guide.as_mut()?.cycle(&input), &mut self.guide_report)
            }
            Mode::Playback => {
                let (_, run) = self.play.as_mut()?;
                keep_report(run.cycle(&input), &mut self.play_report)
            }
        };
        let end = match step {
            Ok(target) => return Some(target),
            Err(end) => end,
        };
        if self.mode == Mode::Hybrid {
            if let Some(r) = self.report.as_mut() {
                r.phase = common::msg::HybridPhase::Aborted;
            }
        }
        match end {
            ModeEnd::Smoothly(why) => self.end_smoothly(Some(why), None),
            ModeEnd::Now { why, stop, latch } => {
                self.protective_request |= latch;
                self.end_motion_as(why, stop);
            }
        }
        None
    }

    /// Starts the mode requested since the last step (at most one is: entering a mode drops
    /// the others' requests) from the measured pose `tcp`; `Err` says why it cannot start.
    fn start_requested(&mut self, tcp: &Isometry3<f64>) -> Result<(), String> {
        if let Some(t) = self.pending_move.take() {
            let to = t.tcp_in_base.to_isometry();
            // No harder than a motion's end decelerates (`[control.ending]`).
            let duration_s = move_duration_s(
                tcp,
                &to,
                t.max_speed_m_s,
                t.max_rot_speed_rad_s,
                self.end_params.max_accel_m_s2,
                self.end_params.max_rot_accel_rad_s2,
            );
            self.mv = Some(MoveState {
                from: *tcp,
                to,
                duration_s,
                elapsed_s: 0.0,
            });
        }
        if let Some((task, setup)) = self.pending_hybrid.take() {
            let run = ArmRun::new(
                task,
                setup.gains,
                setup.limits,
                setup.stiffness,
                setup.worst_case_n_per_m,
                setup.loop_delay_s,
                tcp,
            )
            .map_err(|e| e.to_string())?
            .with_speed_adaptation(setup.slowdown_error_n)
            .with_position_speed(setup.position_speed.0, setup.position_speed.1)
            .with_max_lag(setup.max_reference_lag_s);
            self.hybrid = Some(match setup.adapt_softest_n_per_m {
                Some(soft) => {
                    run.with_adaptation(crate::stiffness::StiffnessParams::default(), soft)
                }
                None => run,
            });
        }
        if let Some(params) = self.pending_guide.take() {
            let g = GuideRun::new(params, tcp).map_err(|e| format!("lead-through refused: {e}"))?;
            self.guide = Some(g);
        }
        if let Some(p) = self.pending_play.take() {
            self.play = Some(p);
        }
        Ok(())
    }
}

/// A mode's step, its report kept in `slot` (the newest, for the bus and the status).
fn keep_report<R>(step: ModeStep<R>, slot: &mut Option<R>) -> Result<CartesianTarget, ModeEnd> {
    step.map(|(target, report)| {
        *slot = Some(report);
        target
    })
}

#[cfg(test)]
mod tests;
