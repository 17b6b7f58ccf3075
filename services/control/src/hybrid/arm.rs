//! The arm stage ([`ArmRun`]): a hybrid task on the position-controlled arm, with its force
//! reference pre-filter and tracking frame.

use common::msg::{
    FrameKind, HybridGains, HybridLimits, HybridPhase, HybridTask, ProtectiveCause, TaskRobot,
};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

use super::adapt::Adaptation;
use super::{
    along_axis, check_task, clamp_norms, fast_swing_band, finite_or_zero, join, profile_blend_s,
    profile_blended_over, ref_time, seat_secant, split, stop_velocity, Abort, Feedforward,
    HybridLaw, LawInput, OscillationWatch, StepReport, Supervision, TaskError, WrenchPeak, AXES,
    COMPLETION_ROT_ACCEL_RAD_S2, DEFAULT_MAX_REFERENCE_LAG_S, DEFAULT_POSITION_SPEED_M_S,
    DEFAULT_POSITION_SPEED_RAD_S, OSC_SWINGS, OSC_WINDOW_S, POSITION_REF_ACCEL, SEATED_FRACTION,
    SEATING_STOP_ACCEL_M_S2, STOP_LAG_FRACTION,
};

/// The arm stage's inputs for one robot cycle.
#[derive(Debug, Clone)]
pub struct ArmInput<'a> {
    /// Measured TCP in base.
    pub tcp: &'a Isometry3<f64>,
    /// The unfiltered peaks the force limits are checked on (the filtered `wrench_base` only
    /// when they are larger; zero when unknown).
    pub peak: WrenchPeak,
    /// Contact wrench on the tool at the TCP, base axes (the force service's `base`):
    /// `Err(why)` when the estimate is faulted or stale.
    pub wrench_base: crate::core::WrenchInput,
    /// Robot time (s).
    pub now_s: f64,
    /// The robot's cycle period (s) when the shell knows it: each step is one robot cycle, so
    /// the task's time and integrals advance by exactly one period per step (the host's jitter
    /// and stalls stay out of the references; see `guide::GuideInput::cycle_period_s`).
    /// `None`: the robot-clock difference (clamped to 50 ms).
    pub cycle_period_s: Option<f64>,
}

/// A hybrid task on the position-controlled arm.
#[derive(Debug, Clone)]
pub struct ArmRun {
    pub task: HybridTask,
    pub law: HybridLaw,
    pub sup: Supervision,
    /// The measured TCP (base) where the current search for the surface began: the task's
    /// start before the first contact, the TCP when a contact was declared lost after it.
    /// `None` while in contact.
    pub(super) approach_from: Option<Vector3<f64>>,
    /// Net travel (m) along each translational axis of {C} since the first contact (the
    /// measured TCP's steps, each resolved along {C} as it was then, summed), and the TCP of
    /// the last step: bounded on the force axes by `limits.contact_travel_m`.
    pub(super) contact_travel: [f64; 3],
    pub(super) travel_prev: Option<Vector3<f64>>,
    /// Reference time (s) held back while a contact made is lost: the reference clock stops
    /// until the surface is found again (or the travel bound ends the search), so the
    /// position axes do not run on with the tool off its part.
    paused_s: f64,
    /// Task time (s) the current `ContactLost` began.
    lost_since: Option<f64>,
    /// The force loop's oscillation observer (from the first contact on).
    osc: OscillationWatch,
    /// Task time (s): the sum of the steps' dt.
    pub(super) t_s: f64,
    /// The robot-clock time of the last step (`None`: the first step is yet to come; it
    /// spans no time, as the task starts at the measured pose of that cycle).
    last_s: Option<f64>,
    /// {C} in base (tracking: updated every step).
    pub(super) frame: Isometry3<f64>,
    /// Desired pose (position axes integrate the references in it).
    desired: Isometry3<f64>,
    /// Commanded pose (integrated output).
    command: Isometry3<f64>,
    r_prev: [f64; 6],
    /// Displacement of the TCP since the start along {C} (for reports).
    start_tcp: Isometry3<f64>,
    pub(super) done: bool,
    /// The stiffest contact the cell declares (N/m), for the approach speed.
    pub(super) worst_case_n_per_m: f64,
    /// Seating: from the start (and from a bounce or contact loss) until every force axis with a
    /// non-zero reference has first reached [`SEATED_FRACTION`] of it. While seating in
    /// contact the force axes move into the surface no faster than the approach and the
    /// force integral stands still, so gains made for a softer surface cannot drive the
    /// first contact's force up before the loop has seen the setpoint.
    pub(super) seating: bool,
    /// Effective loop delay (s), for the approach speed.
    pub(super) loop_delay_s: f64,
    /// Task time of the first contact.
    pub(super) contact_s: Option<f64>,
    /// Tracking: low-pass of the estimated normal (base), the TCP's velocity estimate.
    normal: Option<Vector3<f64>>,
    prev_p: Option<Vector3<f64>>,
    v_est: Vector3<f64>,
    /// On-line stiffness and the gains that follow it ([`ArmRun::with_adaptation`]).
    pub(super) adapt: Option<Adaptation>,
    /// The unfiltered peak force and torque of the last cycle (the seating's rate of rise).
    prev_peak: Option<[f64; 2]>,
    /// Per translational axis: the seating stopped it (its command pulled back to the
    /// measured pose, within [`SEATING_STOP_ACCEL_M_S2`]).
    stopped: [bool; 3],
    /// Per translational axis: where the seating's stop is pulling the command back to
    /// (its coordinate along the axis of {C}, base metres), until it is there at rest.
    retract_to: [Option<f64>; 3],
    /// The last cycle's output (the velocities of the command along {C}), for the stop's
    /// acceleration bound.
    u_prev: [f64; 6],
    /// Per axis of {C}: the corner blend of its reference (s; 0 on force axes and profiles
    /// without corners), from [`profile_blend_s`] once per task.
    ref_blend_s: [f64; 6],
    /// Per translational axis: where the seating touched (the position along the axis, the
    /// unfiltered force), and the secant stiffness from there to the seated pose.
    touch: [Option<(f64, f64)>; 3],
    pub(super) seat_secant: [Option<f64>; 3],
    /// The force reference's pre-filter (issue 20 item 3): per axis its value and rate, the
    /// time constant (s, 0 = none), and the filtered values of the last loop delay (task
    /// time, values) — the feedback compares the force with the reference as it was one loop
    /// delay ago, the feedforward drives the change now.
    pf: [(f64, f64); 6],
    pub prefilter_s: f64,
    pf_hist: std::collections::VecDeque<(f64, [f64; 6])>,
    /// Speed adaptation ([`ArmRun::with_speed_adaptation`]): the force error (N) a sudden
    /// stop of the force axes' current motion may cost (0: off), the scale of the reference
    /// clock now (1: as planned), how far that clock has fallen behind task time (s), and a
    /// low-pass of the translational force axes' output (m/s).
    pub slowdown_error_n: f64,
    /// The most the reference clock may fall behind task time (s; [`ArmRun::with_max_lag`]):
    /// past it the task ends with a named fault instead of stretching without end.
    pub max_lag_s: f64,
    pub(super) speed: f64,
    pub(super) lag_s: f64,
    pub(super) u_lp: [f64; 3],
    /// Speed adaptation: per translational axis the stiffness the gains were made for last
    /// cycle, and the task time it last rose (the surface stiffening under the tool).
    pub(super) k_prev: [f64; 3],
    pub(super) k_rose_s: [f64; 3],
}

/// Time constant of the force reference's pre-filter on the arm (s): a critically damped
/// second order, 10 → 90 % of a step in ≈ 3.4 × this (0.13 s), its rate the feedforward.
pub const FORCE_PREFILTER_S: f64 = 0.04;
/// The feedback compares the force with the shaped reference of this many loop delays ago:
/// how late the (12 Hz-filtered) force answers the feedforward — the servo's ≈ T plus the
/// filter's lag. On the model 1 × T left a 7 % overshoot of a 2 → 10 N step, 1.5 × T 0.8 %
/// (rise 0.14 s), 2 × T 0.5 % (rise 0.19 s).
pub const PREFILTER_MATCH: f64 = 1.5;

/// Tracking frame: time constant of the normal estimate's (and the travel velocity's)
/// low-pass (s).
pub const TRACKING_TAU_S: f64 = 0.1;
/// Tracking frame: the normal is updated only while the TCP slides at least this fast (m/s).
pub const TRACKING_MIN_SPEED_M_S: f64 = 0.005;
/// Tracking frame: travel closer than 60° to the applied force's line (|cos| above this) is
/// moving into or off the surface — the approach's last millimetres, a bounce — not sliding;
/// the normal is not estimated from it. Sliding with friction μ keeps the travel within
/// atan μ of 90° from the force (μ = 0.5: |cos| ≤ 0.45).
pub const TRACKING_MAX_TRAVEL_COS: f64 = 0.5;

impl ArmRun {
    /// Starts a task at the measured TCP pose (its first step spans no time). `stiffness` = K_e per axis of {C}
    /// (force feedforward, approach speed), `worst_case_n_per_m` the stiffest contact the cell
    /// declares it may meet (bounds the approach speed whatever `stiffness` says),
    /// `loop_delay_s` the effective loop delay.
    pub fn new(
        task: HybridTask,
        gains: HybridGains,
        limits: HybridLimits,
        stiffness: [f64; 6],
        worst_case_n_per_m: f64,
        loop_delay_s: f64,
        tcp: &Isometry3<f64>,
    ) -> Result<Self, TaskError> {
        check_task(&task)?;
        if task.robot != TaskRobot::Arm {
            return Err(TaskError::Invalid("not an arm task".into()));
        }
        let frame = match task.frame_kind {
            FrameKind::Base | FrameKind::Tracking => task.frame.to_isometry(),
            FrameKind::Tool => tcp * task.frame.to_isometry(),
        };
        let out_limit = [
            limits.force_axis_speed_m_s,
            limits.force_axis_speed_m_s,
            limits.force_axis_speed_m_s,
            limits.force_axis_speed_rad_s,
            limits.force_axis_speed_rad_s,
            limits.force_axis_speed_rad_s,
        ];
        // Position axes: bounded by the cell's position speed (`[control.hybrid]
        // position_speed_m_s`, `_rad_s`; [`ArmRun::with_position_speed`]), by default these.
        let mut lim = out_limit;
        for k in 0..6 {
            if !task.force_axes[k] {
                lim[k] = if k < 3 {
                    DEFAULT_POSITION_SPEED_M_S
                } else {
                    DEFAULT_POSITION_SPEED_RAD_S
                };
            }
        }
        // Position axes: corners blended within the acceleration bound; force axes as given
        // (their pre-filter shapes them).
        let ref_blend_s: [f64; 6] = std::array::from_fn(|k| {
            if task.force_axes[k] {
                0.0
            } else {
                profile_blend_s(&task.reference[k], POSITION_REF_ACCEL[k / 3])
            }
        });
        let r0: [f64; 6] = std::array::from_fn(|k| {
            profile_blended_over(&task.reference[k], 0.0, ref_blend_s[k]).0
        });
        let law = HybridLaw::new(
            task.force_axes,
            gains,
            Feedforward::RateOverStiffness(stiffness),
            lim,
            true,
        );
        Ok(Self {
            law,
            sup: Supervision::new(limits),
            approach_from: None,
            contact_travel: [0.0; 3],
            travel_prev: None,
            paused_s: 0.0,
            lost_since: None,
            osc: OscillationWatch::default(),
            t_s: 0.0,
            last_s: None,
            frame,
            desired: *tcp,
            command: *tcp,
            r_prev: std::array::from_fn(|k| if task.force_axes[k] { 0.0 } else { r0[k] }),
            start_tcp: *tcp,
            done: false,
            worst_case_n_per_m,
            seating: true,
            loop_delay_s,
            contact_s: None,
            normal: None,
            prev_p: None,
            v_est: Vector3::zeros(),
            adapt: None,
            prev_peak: None,
            stopped: [false; 3],
            retract_to: [None; 3],
            u_prev: [0.0; 6],
            ref_blend_s,
            touch: [None; 3],
            seat_secant: [None; 3],
            pf: [(0.0, 0.0); 6],
            prefilter_s: FORCE_PREFILTER_S,
            pf_hist: std::collections::VecDeque::with_capacity(32),
            slowdown_error_n: 0.0,
            max_lag_s: DEFAULT_MAX_REFERENCE_LAG_S,
            speed: 1.0,
            lag_s: 0.0,
            u_lp: [0.0; 3],
            k_prev: [0.0; 3],
            k_rose_s: [f64::NEG_INFINITY; 3],
            task,
        })
    }

    /// The cell's speed bound on the task's position axes (m/s translational, rad/s
    /// rotational), on the norm of their vector ([`clamp_norms`]).
    pub fn with_position_speed(mut self, m_s: f64, rad_s: f64) -> Self {
        for k in 0..6 {
            if !self.task.force_axes[k] {
                self.law.out_limit[k] = if k < 3 { m_s } else { rad_s };
            }
        }
        self
    }

    pub fn command(&self) -> Isometry3<f64> {
        self.command
    }

    /// How the task backs off its surface when it ends pressing `force_on_tool_n` (the
    /// surface's force on the tool, base): along the translational force axes of {C}, at the
    /// task's force-axis speed; the blind distance from the softest stiffness believed (the
    /// on-line estimate when there is one, else the one the gains are made for). `None`: not
    /// pressing along the force axes.
    pub fn unload(
        &self,
        force_on_tool_n: &Vector3<f64>,
        release_force_n: f64,
    ) -> Option<crate::ending::Unload> {
        let rc = self.frame.rotation;
        let axes: Vec<Vector3<f64>> = (0..3)
            .filter(|&k| self.task.force_axes[k])
            .map(|k| rc * Vector3::ith(k, 1.0))
            .collect();
        if axes.is_empty() {
            return None;
        }
        let (gains_for, est) = self.stiffness_report();
        let k = (0..3)
            .filter(|&k| self.task.force_axes[k])
            .map(|k| if est[k] > 0.0 { est[k] } else { gains_for[k] })
            .filter(|k| *k > 0.0)
            .fold(f64::INFINITY, f64::min);
        let k = if k.is_finite() {
            k
        } else {
            self.worst_case_n_per_m
        };
        crate::ending::Unload::from_force(
            force_on_tool_n,
            &axes,
            self.sup.limits.force_axis_speed_m_s,
            k,
            release_force_n,
        )
    }

    /// Whether the task ran its duration (`Done`: it holds its last command).
    pub fn done(&self) -> bool {
        self.done
    }

    pub fn frame(&self) -> Isometry3<f64> {
        self.frame
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Applied wrench in {C} from the contact wrench on the tool at the TCP (base axes):
    /// `F_C = −R_Cᵀ f`, `τ_C = −R_Cᵀ (τ + (p_tcp − p_C) × f)`.
    pub fn applied_in_frame(
        frame: &Isometry3<f64>,
        tcp: &Isometry3<f64>,
        f: &Vector3<f64>,
        tau: &Vector3<f64>,
    ) -> [f64; 6] {
        let rt = frame.rotation.inverse();
        let lever = tcp.translation.vector - frame.translation.vector;
        let fc = -(rt * f);
        let tc = -(rt * (tau + lever.cross(f)));
        join(&fc, &tc)
    }

    /// One robot cycle: the commanded TCP pose and the report, or why the task ended.
    pub fn step(&mut self, i: &ArmInput) -> Result<(Isometry3<f64>, StepReport), Abort> {
        let (f, tau) = i.wrench_base.clone().map_err(|e| Abort::wrench(&e))?;
        if !(f.iter().chain(tau.iter()).all(|v| v.is_finite())
            && i.tcp.translation.vector.iter().all(|v| v.is_finite()))
        {
            return Err(Abort::protective(
                ProtectiveCause::NonFinite,
                "non-finite measurement",
            ));
        }
        let dt = crate::law_step_dt(&mut self.last_s, i.now_s, i.cycle_period_s);
        self.t_s += dt;
        let t = self.t_s;
        let sel = self.task.force_axes;
        // The frame this cycle.
        match self.task.frame_kind {
            FrameKind::Base => {}
            FrameKind::Tool => self.frame = i.tcp * self.task.frame.to_isometry(),
            FrameKind::Tracking => self.track(i.tcp, &f, dt),
        }
        let fc = Self::applied_in_frame(&self.frame, i.tcp, &f, &tau);
        // The reference clock: task time (from contact for a task that starts there), less
        // what speed adaptation has held it back; its rates run at the clock's scale.
        // While a contact made is lost, the reference clock stops (`paused_s`): the position
        // axes wait where the surface was left (issue 41: a press that lost its contact ran
        // its x reference on to 49.7 mm with the arm still).
        let paused = self.sup.phase == HybridPhase::ContactLost && !self.done;
        if paused {
            self.paused_s += dt;
        }
        let tr = ref_time(&self.task, t, self.contact_s) - self.lag_s - self.paused_s;
        let shaped: [(f64, f64); 6] = std::array::from_fn(|k| {
            profile_blended_over(&self.task.reference[k], tr, self.ref_blend_s[k])
        });
        let r: [f64; 6] = std::array::from_fn(|k| shaped[k].0);
        let rd: [f64; 6] = std::array::from_fn(|k| {
            if (self.task.from_contact && self.contact_s.is_none()) || paused {
                0.0
            } else {
                shaped[k].1 * self.speed
            }
        });
        let mut f_ref = [0.0; 6];
        let mut f_rate = [0.0; 6];
        let mut v_ref = [0.0; 6];
        let mut dr = [0.0; 6];
        for k in 0..6 {
            if sel[k] {
                f_ref[k] = r[k];
                f_rate[k] = rd[k];
            } else {
                v_ref[k] = rd[k];
                dr[k] = r[k] - self.r_prev[k];
                self.r_prev[k] = r[k];
            }
        }
        let rc = self.frame.rotation;
        // Desired pose: advance the position axes by the reference increments (along {C}).
        let (dl, da) = split(&dr);
        self.desired.translation.vector += rc * dl;
        self.desired.rotation = UnitQuaternion::from_scaled_axis(rc * da) * self.desired.rotation;
        // Errors in {C}; along force axes the desired pose follows the measurement.
        let e_lin = rc.inverse() * (self.desired.translation.vector - i.tcp.translation.vector);
        let e_ang = rc.inverse() * (self.desired.rotation * i.tcp.rotation.inverse()).scaled_axis();
        let mut e = join(&e_lin, &e_ang);
        for k in 0..6 {
            if sel[k] {
                e[k] = 0.0;
            }
        }
        let (el, ea) = split(&e);
        self.desired = Isometry3::from_parts(
            Translation3::from(i.tcp.translation.vector + rc * el),
            UnitQuaternion::from_scaled_axis(rc * ea) * i.tcp.rotation,
        );
        // Deviation limit on position axes.
        let l = self.sup.limits;
        for k in 0..6 {
            if sel[k] {
                continue;
            }
            let lim = if k < 3 {
                l.deviation_m
            } else {
                l.deviation_rad
            };
            if e[k].abs() > lim {
                return Err(Abort::protective(
                    ProtectiveCause::Deviation,
                    format!("deviation on {} {:.4} > limit {lim}", AXES[k], e[k]),
                ));
            }
        }
        // Phase and force limits.
        // The limits see the unfiltered peak of every sample since the last cycle (a 12 Hz
        // filter shows an impact after it is over), or the filtered value when it is larger.
        let force_norm = f.norm().max(finite_or_zero(i.peak.force_n));
        let torque_norm = tau.norm().max(finite_or_zero(i.peak.torque_nm));
        let lost = self
            .sup
            .update(t, &fc, &f_ref, &sel, force_norm, torque_norm)?;
        // Re-seat as soon as the force axes no longer touch (a bounce), before a loss is
        // declared: the next touch is met at the approach speed too.
        let touching = (0..6)
            .filter(|k| sel[*k] && f_ref[*k] != 0.0)
            .any(|k| fc[k] * f_ref[k].signum() >= self.sup.limits.contact_threshold_n);
        if lost || (self.contact_s.is_some() && !touching) {
            if lost {
                self.law.reset_force_integral();
            }
            self.seating = true;
        }
        // Along {C} from the start: where the tool is (for the seating's secant and the
        // estimator).
        let p_c = rc.inverse() * (i.tcp.translation.vector - self.start_tcp.translation.vector);
        if self.seating && self.sup.in_contact() {
            for k in 0..3 {
                if sel[k] && f_ref[k] != 0.0 && self.touch[k].is_none() {
                    let s = f_ref[k].signum();
                    let f1 = along_axis(finite_or_zero(i.peak.force_n), &fc, k);
                    self.touch[k] = Some((s * p_c[k], f1));
                }
            }
        }
        if self.seating
            && self.sup.in_contact()
            && (0..6)
                .filter(|k| sel[*k] && f_ref[*k] != 0.0)
                .all(|k| fc[k] * f_ref[k].signum() >= SEATED_FRACTION * f_ref[k].abs())
        {
            self.seating = false;
            // The seating's secant: from the touch (unfiltered force, measured pose) to the
            // seated pose (the filtered force, settled by now: the arm has stopped).
            let f_peak = finite_or_zero(i.peak.force_n);
            for k in 0..3 {
                if let Some(touch) = self.touch[k].take() {
                    let s = f_ref[k].signum();
                    let seated = (s * p_c[k], s * fc[k], along_axis(f_peak, &fc, k));
                    self.seat_secant[k] = seat_secant(touch, seated);
                }
            }
        }
        if self.sup.in_contact() && self.contact_s.is_none() {
            self.contact_s = Some(t);
        }
        if self.task.from_contact
            && self.contact_s.is_none()
            && t > self.sup.limits.approach_timeout_s
        {
            return Err(Abort::controlled(format!(
                "no contact within {} s of approach",
                self.sup.limits.approach_timeout_s
            )));
        }
        // A search for a lost surface that stalls (its travel bound not reached: a slow
        // approach speed) ends like a first approach that stalls: the stopped reference clock
        // no longer ends it by the task's duration.
        if self.sup.phase == HybridPhase::ContactLost {
            let since = *self.lost_since.get_or_insert(t);
            if t - since > self.sup.limits.approach_timeout_s {
                return Err(Abort::controlled(format!(
                    "contact lost and not found again within {} s (limits.approach_timeout_s)",
                    self.sup.limits.approach_timeout_s
                )));
            }
        } else {
            self.lost_since = None;
        }
        self.check_travel(i.tcp)?;
        if self.contact_s.is_some() && !self.done {
            if let Some((k, band)) = self.osc.step(t, &fc, &f_ref, &sel) {
                return Err(Abort::controlled(format!(
                    "force loop oscillating on {}: {OSC_SWINGS} swings of the force error of \
                     ≥ {band:.1} {} within {OSC_WINDOW_S} s (gains too high for this surface?)",
                    AXES[k],
                    if k < 3 { "N" } else { "N·m" }
                )));
            }
            let fast = finite_or_zero(i.peak.fast_swing_n);
            if let Some(band) = fast_swing_band(&f_ref, &sel).filter(|b| fast >= *b) {
                return Err(Abort::controlled(format!(
                    "force oscillating fast: the unfiltered force swings by {fast:.1} N peak to \
                     peak (band {band:.1} N), faster than the 12 Hz estimate shows (a tool \
                     chattering on a stiff surface?)"
                )));
            }
        }
        if !self.done && !i.peak.bridged {
            // The spring model needs a still surface under a still tool: while the position
            // axes move (sliding, a contour: the surface height under the tool changes, and
            // a tracking frame turns) the estimate is held.
            let still = v_ref.iter().all(|v| *v == 0.0);
            self.adapt_step(&p_c, &fc, &f_ref, dt, still);
        }
        let mut u = if self.done {
            [0.0; 6]
        } else {
            let inp = LawInput {
                e_pos: e,
                v_ref,
                v_meas: None,
                f_ref,
                f_ref_rate: f_rate,
                f_meas: fc,
            };
            // While the wrench is bridged (a gap in the samples), the force integral does not
            // integrate a force that is no longer measured.
            let integrate = self.sup.in_contact() && !i.peak.bridged && !self.seating;
            let inp = self.prefiltered(inp, t, dt);
            self.law.step(&inp, dt, integrate)
        };
        // Approach and seating: into the surface no faster than the approach speed
        // ([`ArmRun::approach_speed`]: the overshoot ≈ K·v·T). The filtered estimate lags an
        // impact by ~25 ms, so once the unfiltered force (the force service's confirmed peak)
        // has reached the setpoint the axis stops advancing until the estimate catches up.
        let peak = [
            finite_or_zero(i.peak.force_n),
            finite_or_zero(i.peak.torque_nm),
        ];
        let along_peak = |k: usize| along_axis(peak[k / 3], &fc, k);
        // The unfiltered peak's rate of rise (per second), for the seating's stop.
        let rise_rate = match (self.prev_peak, dt > 0.0) {
            (Some(p), true) => [
                ((peak[0] - p[0]) / dt).max(0.0),
                ((peak[1] - p[1]) / dt).max(0.0),
            ],
            _ => [0.0; 2],
        };
        self.prev_peak = Some(peak);
        if !self.done && (!self.sup.in_contact() || self.seating) {
            // Where the force will be when the arm has stopped: it moves on for about
            // `STOP_LAG_FRACTION·T` after a stop is decided (the reference is pulled back to
            // the measured pose, below), the force rising at its current rate.
            let t_stop = STOP_LAG_FRACTION * self.loop_delay_s;
            for k in 0..6 {
                if !(sel[k] && f_ref[k] != 0.0) {
                    continue;
                }
                let s = f_ref[k].signum();
                let predicted = along_peak(k) + rise_rate[k / 3] * t_stop;
                let stop = predicted >= SEATED_FRACTION * f_ref[k].abs();
                let cap = if stop {
                    0.0
                } else {
                    self.approach_speed(k, f_ref[k])
                };
                // No contact yet (or lost), or seating: the force axes move towards the
                // reference's sign at the approach speed, a guarded move that ends on the
                // predicted force (the law's own output, with gains made for the worst case
                // until the estimate is usable, would creep: 0.1 mm/s on a soft surface).
                u[k] = s * cap;
                if k < 3 {
                    let ax = rc * Vector3::ith(k, 1.0);
                    let x = ax.dot(&self.command.translation.vector);
                    if stop && !self.stopped[k] {
                        // Stop where the arm is: the command leads the measured pose by the
                        // tracking lag (v·T); left there, the arm would travel it into the
                        // surface after the decision (the first contact's overshoot).
                        let lead =
                            ax.dot(&(self.command.translation.vector - i.tcp.translation.vector));
                        if lead * s > 0.0 {
                            self.retract_to[k] = Some(x - lead);
                        }
                    }
                    if !stop {
                        self.retract_to[k] = None;
                    }
                    self.stopped[k] = stop;
                    let a = SEATING_STOP_ACCEL_M_S2;
                    if let Some(target) = self.retract_to[k] {
                        // Back to the measured pose at once, but within the acceleration
                        // bound: brake, reverse, land on it at rest.
                        let v = stop_velocity(target - x, self.u_prev[k], a, dt);
                        u[k] = v;
                        if (target - x - v * dt).abs() < 1e-9 && v.abs() <= a * dt {
                            self.retract_to[k] = None;
                        }
                    } else if dt > 0.0 {
                        // Off again after a stop (or from rest): the same bound.
                        u[k] = u[k].clamp(self.u_prev[k] - a * dt, self.u_prev[k] + a * dt);
                    }
                }
            }
        } else {
            self.retract_to = [None; 3];
        }
        if i.peak.bridged {
            // Bridged: the command does not advance along the force axes (the position axes
            // finish their cycle).
            for k in 0..6 {
                if sel[k] {
                    u[k] = 0.0;
                }
            }
        }
        clamp_norms(&mut u, &sel, &self.law.out_limit);
        if !self.done
            && ref_time(&self.task, t, self.contact_s) - self.lag_s - self.paused_s
                >= self.task.duration_s
        {
            // A task timed from its contact that ends pressing on nothing did not do its job
            // (issue 41: a press that slid off its part's edge ended `Done` after 3.3 s in
            // `ContactLost`). A task timed from its start may lose its contact on purpose (a
            // peg's search step ends as the peg starts into the hole): its caller judges.
            let pressing = (0..6).any(|k| sel[k] && f_ref[k] != 0.0);
            if pressing && self.task.from_contact && !self.sup.in_contact() {
                return Err(Abort::controlled(format!(
                    "contact lost at the end of the task ({:?}): the force axes pressed on \
                     nothing",
                    self.sup.phase
                )));
            }
            self.done = true;
        }
        if self.done {
            // A completed task holds its last command; its position references may still have
            // been moving at the end (a sine, a path cut by the duration): those axes come to
            // rest within the ending's deceleration (1 m/s², 2 rad/s²) instead of in one cycle.
            // The force axes stop where they are (they hold the contact).
            for k in 0..6 {
                let a = if k < 3 {
                    SEATING_STOP_ACCEL_M_S2
                } else {
                    COMPLETION_ROT_ACCEL_RAD_S2
                };
                let v0 = finite_or_zero(self.u_prev[k]);
                u[k] = if sel[k] || dt <= 0.0 {
                    0.0
                } else {
                    kinematics::brake::brake_axis(v0, a * dt)
                };
            }
        }
        // Sliding: a position axis' reference moving (the surface may change under the tool).
        let sliding = (0..6).any(|k| !sel[k] && rd[k].abs() > 1e-9);
        self.adapt_speed(&u, &f_ref, dt, tr, sliding);
        if self.lag_s > self.max_lag_s {
            return Err(Abort::controlled(format!(
                "speed adaptation held the task {:.1} s behind its plan (more than \
                 max_reference_lag_s {:.1} s): the surface stays stiffer or steeper than the \
                 task's speed allows",
                self.lag_s, self.max_lag_s
            )));
        }
        self.u_prev = u;
        let (ul, ua) = split(&u);
        let v_b = rc * ul;
        let w_b = rc * ua;
        self.command = Isometry3::from_parts(
            Translation3::from(self.command.translation.vector + v_b * dt),
            UnitQuaternion::from_scaled_axis(w_b * dt) * self.command.rotation,
        );
        // Reports: position as displacement from the start along {C}.
        let p_lin = rc.inverse() * (i.tcp.translation.vector - self.start_tcp.translation.vector);
        let p_ang =
            rc.inverse() * (i.tcp.rotation * self.start_tcp.rotation.inverse()).scaled_axis();
        let phase = if self.done {
            HybridPhase::Done
        } else {
            self.sup.phase
        };
        let mut position_ref = [0.0; 6];
        for k in 0..6 {
            if !sel[k] {
                position_ref[k] = r[k];
            }
        }
        let (gains_for, stiffness_est) = self.stiffness_report();
        Ok((
            self.command,
            StepReport {
                t_s: t,
                clock_s: i.now_s,
                phase,
                force_ref: f_ref,
                force: fc,
                position_ref,
                position: join(&p_lin, &p_ang),
                output: u,
                limited: self.law.limited(),
                bridged: i.peak.bridged,
                seating: self.seating && !self.done,
                frame_in_base: common::msg::Pose::from_isometry(&self.frame),
                gains_for_n_per_m: gains_for,
                stiffness_estimate_n_per_m: stiffness_est,
                ref_time_s: tr,
                speed_scale: self.speed,
            },
        ))
    }

    /// The force reference through its pre-filter ([`FORCE_PREFILTER_S`]): until the axis is
    /// seated in contact the filter sits at the task's reference (the seating's last 10 % are
    /// the feedback's, as before: a feedforward made for the wrong stiffness would push them
    /// 50× too far on an unknown stiff surface); from then on a critically damped second
    /// order shapes the task's reference, its rate is the feedforward (`Ḟ/K_e`), and
    /// the feedback compares the force with the shaped reference of one loop delay ago (the
    /// force answers the feedforward that late; compared with the reference of now, the
    /// feedback would push on top of it: the overshoot of a step).
    fn prefiltered(&mut self, mut inp: LawInput, t: f64, dt: f64) -> LawInput {
        if self.prefilter_s <= 0.0 {
            return inp;
        }
        let w = 1.0 / self.prefilter_s;
        let live = self.sup.in_contact() && !self.seating;
        let mut now = [0.0; 6];
        for k in 0..6 {
            if !self.task.force_axes[k] {
                continue;
            }
            let (mut v, mut rd) = self.pf[k];
            if !live {
                (v, rd) = (inp.f_ref[k], 0.0);
            } else if dt > 0.0 {
                // Semi-implicit Euler, sub-stepped so that dt·w stays small.
                let n = (dt * w / 0.1).ceil().max(1.0) as usize;
                let h = dt / n as f64;
                for _ in 0..n {
                    rd += (w * w * (inp.f_ref[k] - v) - 2.0 * w * rd) * h;
                    v += rd * h;
                }
            }
            self.pf[k] = (v, rd);
            now[k] = v;
        }
        self.pf_hist.push_back((t, now));
        while self.pf_hist.len() > 1
            && self
                .pf_hist
                .get(1)
                .is_some_and(|(t1, _)| *t1 <= t - PREFILTER_MATCH * self.loop_delay_s)
        {
            self.pf_hist.pop_front();
        }
        let past = self.pf_hist.front().map_or(now, |(_, v)| *v);
        if live {
            for k in 0..6 {
                if self.task.force_axes[k] {
                    inp.f_ref[k] = past[k];
                    inp.f_ref_rate[k] = self.pf[k].1;
                }
            }
        }
        inp
    }

    /// Tracking frame: turn z of {C} towards the measured contact normal, low-passed with
    /// [`TRACKING_TAU_S`], only while pressing and sliding. The normal is the direction of the
    /// applied force with its component along the TCP's measured direction of travel removed:
    /// sliding, friction acts along the travel, so what is left is the normal force. At rest
    /// friction can point anywhere within its cone (±atan μ) and cannot be told from the
    /// normal, so the frame keeps its last estimate until the tool slides steadily
    /// ([`TRACKING_MIN_SPEED_M_S`]), along the surface ([`TRACKING_MAX_TRAVEL_COS`]).
    pub(super) fn track(&mut self, tcp: &Isometry3<f64>, f_on_tool: &Vector3<f64>, dt: f64) {
        let applied = -f_on_tool;
        let p = tcp.translation.vector;
        if let (Some(prev), true) = (self.prev_p, dt > 0.0) {
            let v = (p - prev) / dt;
            let a = (dt / TRACKING_TAU_S).min(1.0);
            self.v_est = self.v_est * (1.0 - a) + v * a;
        }
        self.prev_p = Some(p);
        let rc = self.frame.rotation;
        // Keep the origin at the TCP whatever happens below.
        self.frame = Isometry3::from_parts(Translation3::from(p), rc);
        let z = rc * Vector3::z();
        // Sliding in contact, the TCP's own velocity is tangent to the surface (projecting it
        // on the plane of the current estimate would keep the estimate where it is).
        let travel = self.v_est;
        if travel.norm() < TRACKING_MIN_SPEED_M_S
            || applied.norm() < self.sup.limits.contact_threshold_n
        {
            return;
        }
        let t = travel.normalize();
        if t.dot(&applied.normalize()).abs() > TRACKING_MAX_TRAVEL_COS {
            // Into or off the surface: removing the travel's direction would leave only the
            // stray lateral force (found as a frame turned towards it at first contact).
            return;
        }
        let n = applied - t * applied.dot(&t);
        if n.norm() < 1e-9 {
            return;
        }
        let n = n.normalize();
        let alpha = (dt / TRACKING_TAU_S).min(1.0);
        let est = match self.normal {
            Some(prev) => (prev * (1.0 - alpha) + n * alpha).normalize(),
            None => (z * (1.0 - alpha) + n * alpha).normalize(),
        };
        self.normal = Some(est);
        if let Some(rot) = UnitQuaternion::rotation_between(&z, &est) {
            self.frame = Isometry3::from_parts(Translation3::from(p), rot * rc);
        }
    }
}

/// The hybrid task as one of the core's modes: a protective end stops at once (robot-io holds
/// where the arm is measured), latched at robot-io when it was an impact or a saturated sensor
/// (for safety a collision until an operator has looked, as guiding's protective stops are);
/// any other end comes to rest and unloads the surface.
impl crate::core::ModeLaw for ArmRun {
    type Report = StepReport;
    fn cycle(&mut self, i: &crate::core::ModeInput) -> crate::core::ModeStep<StepReport> {
        let input = ArmInput {
            tcp: i.tcp,
            peak: i.peak,
            wrench_base: i.wrench.clone(),
            now_s: i.now_s,
            cycle_period_s: i.cycle_period_s,
        };
        match self.step(&input) {
            Ok((cmd, report)) => Ok((
                common::msg::CartesianTarget::Pose(common::msg::Pose::from_isometry(&cmd)),
                report,
            )),
            Err(why) => {
                let reason = format!("hybrid task ended: {why}");
                Err(if why.is_protective() {
                    crate::core::ModeEnd::Now {
                        why: reason,
                        stop: why.stop,
                        latch: matches!(
                            why.stop,
                            common::msg::StopCategory::Protective(
                                ProtectiveCause::Impact | ProtectiveCause::Saturated
                            )
                        ),
                    }
                } else {
                    crate::core::ModeEnd::Smoothly(reason)
                })
            }
        }
    }
}
