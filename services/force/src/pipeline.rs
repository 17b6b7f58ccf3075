//! The force-processing pipeline, one raw sample at a time, with explicit state. Pure: time and
//! the tool pose are parameters.
//!
//! raw sensor wrench → checks (non-finite, saturation, spike, device status) → bias and tool
//! gravity compensation (payload model, orientation from kinematics) → 2nd-order Butterworth
//! low-pass → smooth dead band → frames (sensor, TCP/tool, TCP/base).
//!
//! Until the sensor has been tared (or the payload identified) in this session every estimate is
//! flagged `NotTared`: offsets drift, and a stale bias is the commonest cause of a robot that
//! creeps in force mode.
//!
//! A faulted sample never enters the filter or an average, and the estimates stay flagged until
//! the filter has re-settled: see [`Pipeline`] for the rule and its settle window.

use common::msg::{Wrench as MsgWrench, WrenchFault};
use kinematics::Wrench;
use nalgebra::{Isometry3, Vector3};
use serde::{Deserialize, Serialize};

use crate::{
    filter::{smooth_deadband, Biquad, LowPass},
    payload::{identify, Identification, IdentifyError, Payload, PoseSample},
    swing::{FastSwingParams, FastSwingWatch},
};

/// Pipeline parameters (the `[force]` table feeds these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineParams {
    /// Expected sample rate of the sensor (Hz), used to design the filter.
    pub sample_rate_hz: f64,
    /// Low-pass cutoff (Hz); the papers plot at 12 Hz.
    pub cutoff_hz: f64,
    /// Smooth dead band on each force axis (N) and torque axis (N·m); 0 disables.
    pub deadband_force_n: f64,
    pub deadband_torque_nm: f64,
    /// Sensor measuring range per axis (Fx, Fy, Fz in N; Tx, Ty, Tz in N·m); a raw value at or
    /// beyond 98 % of it is saturation.
    pub range: [f64; 6],
    /// A raw force (N) change larger than this between two samples is a spike.
    pub spike_force_n: f64,
    /// Gravity in the base frame (m/s²).
    pub gravity_base: [f64; 3],
    /// Tool model (mass, centre of mass in the sensor frame, sensor offsets).
    pub payload: Payload,
    /// Samples averaged by a tare or a payload-identification capture.
    pub average_samples: usize,
    /// Tare/capture refused while the TCP moves faster than this (m/s, rad/s).
    pub still_linear_m_s: f64,
    pub still_angular_rad_s: f64,
    /// Tare refused while the compensated force exceeds this (N): that is contact, not bias.
    pub tare_max_contact_n: f64,
    /// Shell: no raw sample for this long → estimates flagged `Stale` (ms).
    pub stale_ms: f64,
    /// Shell: a tool pose older than this is not used for gravity compensation (ms).
    pub pose_max_age_ms: f64,
    /// Joint poses (deg) the robot visits for `cell payload identify` (≥ 6, distinct tool
    /// orientations).
    pub identification_poses_deg: Vec<[f64; 6]>,
    /// Remove the tool's own inertia (`m·a`, the identified payload's mass times the TCP's
    /// measured acceleration, [`AccelEstimator`]) from the filtered estimate, as its weight is
    /// removed: an arm that jerks (EGM jitter, a stop) then shows no force that is not
    /// contact, so control declares no contact on it (issue 41). The limits' unfiltered peak
    /// keeps only the weight removed: an estimate of motion never lowers what they see.
    pub compensate_inertia: bool,
    /// `[force.fast_swing]`: the fast band of the oscillation watch, on what the filter
    /// removes ([`crate::swing`]; `WrenchEstimate::fast_swing_n`).
    pub fast_swing: FastSwingParams,
}

impl Default for PipelineParams {
    fn default() -> Self {
        Self {
            sample_rate_hz: 1000.0,
            cutoff_hz: 12.0,
            deadband_force_n: 0.1,
            deadband_torque_nm: 0.005,
            range: [200.0, 200.0, 400.0, 10.0, 10.0, 10.0],
            spike_force_n: 100.0,
            gravity_base: [0.0, 0.0, -9.81],
            payload: Payload::default(),
            average_samples: 200,
            still_linear_m_s: 0.002,
            still_angular_rad_s: 0.01,
            tare_max_contact_n: 3.0,
            stale_ms: 9.0,
            pose_max_age_ms: 50.0,
            identification_poses_deg: default_identification_poses(),
            compensate_inertia: true,
            fast_swing: FastSwingParams::default(),
        }
    }
}

/// Eight IRB 120 poses with the tool pointing down, up-ish, sideways and tilted, reachable from
/// the home position without passing through the floor (TCP ≥ 300 mm above the base).
pub fn default_identification_poses() -> Vec<[f64; 6]> {
    vec![
        [0.0, 0.0, 0.0, 0.0, 90.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 90.0, 60.0, 0.0],
        [0.0, 0.0, 0.0, -90.0, 60.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, -60.0, 90.0],
        [0.0, 0.0, 0.0, 45.0, 30.0, -90.0],
        [0.0, 0.0, -30.0, 0.0, -30.0, 180.0],
        [0.0, 0.0, 0.0, 150.0, 90.0, 45.0],
    ]
}

impl PipelineParams {
    /// Every problem, each naming its key (relative to the table).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut p = Vec::new();
        let mut range = |k: &str, v: f64, lo: f64, hi: f64| {
            if !(v.is_finite() && v >= lo && v <= hi) {
                p.push((k.to_string(), format!("{v} out of range [{lo}, {hi}]")));
            }
        };
        range("sample_rate_hz", self.sample_rate_hz, 10.0, 20_000.0);
        range(
            "cutoff_hz",
            self.cutoff_hz,
            0.1,
            0.45 * self.sample_rate_hz.max(10.0),
        );
        range("deadband_force_n", self.deadband_force_n, 0.0, 50.0);
        range("deadband_torque_nm", self.deadband_torque_nm, 0.0, 5.0);
        for (i, r) in self.range.iter().enumerate() {
            range(&format!("range[{i}]"), *r, 1e-3, 1e5);
        }
        range("spike_force_n", self.spike_force_n, 1.0, 1e5);
        range("payload.mass_kg", self.payload.mass_kg, 0.0, 100.0);
        // Finite and plausible: a non-finite payload would make every estimate NonFinite.
        for (name, v, lim) in [
            ("com_m", self.payload.com_m, 10.0),
            ("force_offset_n", self.payload.force_offset_n, 1e5),
            ("torque_offset_nm", self.payload.torque_offset_nm, 1e5),
        ] {
            for (i, x) in v.iter().enumerate() {
                range(&format!("payload.{name}[{i}]"), *x, -lim, lim);
            }
        }
        for (i, v) in self.gravity_base.iter().enumerate() {
            range(&format!("gravity_base[{i}]"), *v, -20.0, 20.0);
        }
        range(
            "average_samples",
            self.average_samples as f64,
            10.0,
            100_000.0,
        );
        range("still_linear_m_s", self.still_linear_m_s, 0.0, 1.0);
        range("still_angular_rad_s", self.still_angular_rad_s, 0.0, 10.0);
        range("tare_max_contact_n", self.tare_max_contact_n, 0.0, 1000.0);
        range("stale_ms", self.stale_ms, 1.0, 10_000.0);
        range("pose_max_age_ms", self.pose_max_age_ms, 1.0, 10_000.0);
        for (k, why) in self.fast_swing.problems() {
            p.push((format!("fast_swing.{k}"), why));
        }
        if self.identification_poses_deg.len() < 6 {
            p.push((
                "identification_poses_deg".into(),
                format!(
                    "{} poses given, at least 6 needed",
                    self.identification_poses_deg.len()
                ),
            ));
        }
        p
    }
}

/// The tool's pose and motion for one sample (from kinematics).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoseInput {
    pub tcp_in_base: Isometry3<f64>,
    pub linear_speed_m_s: f64,
    pub angular_speed_rad_s: f64,
    /// The TCP's measured linear acceleration (m/s², base axes; [`AccelEstimator`]), `None`
    /// when it is not known (no two consecutive robot cycles): then only the weight is
    /// compensated.
    pub tcp_accel_base_m_s2: Option<Vector3<f64>>,
}

/// An acceleration above this (m/s²) is not the arm's (an IRB 120's TCP reaches ≈ 30 m/s² at
/// most): a glitch in the feedback, so no inertia is compensated on it.
pub const MAX_PLAUSIBLE_ACCEL_M_S2: f64 = 50.0;

/// The TCP's linear acceleration from the tool poses' twists: the difference of two
/// consecutive robot cycles' measured velocity over the cycle period (kinematics computes the
/// twist from robot-io's joint velocities, themselves measured on the robot's clock). Pure: the
/// cycle number and period come with each pose. Unknown after a gap in the cycles, a
/// non-finite or non-positive period, or an implausible value.
#[derive(Debug, Clone, Default)]
pub struct AccelEstimator {
    last: Option<(u64, Vector3<f64>)>,
    accel: Option<Vector3<f64>>,
}

impl AccelEstimator {
    /// Feeds the pose of robot cycle `cycle` (its TCP velocity, base axes, m/s); a pose already
    /// seen changes nothing. Returns the current estimate.
    pub fn push(&mut self, cycle: u64, v: Vector3<f64>, period_s: f64) -> Option<Vector3<f64>> {
        if self.last.is_some_and(|(c, _)| c == cycle) {
            return self.accel;
        }
        self.accel = match self.last {
            Some((c, v0))
                if c.checked_add(1) == Some(cycle) && period_s.is_finite() && period_s > 0.0 =>
            {
                let a = (v - v0) / period_s;
                (a.iter().all(|x| x.is_finite()) && a.norm() <= MAX_PLAUSIBLE_ACCEL_M_S2)
                    .then_some(a)
            }
            _ => None,
        };
        self.last = v.iter().all(|x| x.is_finite()).then_some((cycle, v));
        self.accel
    }
}

/// One processed sample.
///
/// A flagged estimate's wrenches are for diagnosis only. For a faulted sample (non-finite,
/// device error, saturated, spike) or one without a fresh pose, `sensor` is the raw reading
/// (zero when it is not finite) and the other frames are zero; during a settle window they are
/// the filter's output, computed as usual. Every number is finite, so an estimate is never
/// dropped by the bus's `Check` (a dropped estimate would leave a subscriber with the last one
/// it accepted).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Estimate {
    pub fault: WrenchFault,
    pub sensor: Wrench,
    pub tool: Wrench,
    pub base: Wrench,
    /// [`PeakTracker`]'s confirmed window peak of the unfiltered compensated force (N) and of
    /// its torque at the TCP (N·m); zero on a faulted estimate.
    pub peak_force_n: f64,
    pub peak_torque_nm: f64,
    /// [`FastSwingWatch`]'s measure (N peak to peak, 0: none); zero on a faulted estimate.
    pub fast_swing_n: f64,
}

/// Samples the peak window can hold (7 kHz × 12 ms = 84 for an ATI Net F/T at full rate).
const PEAK_RING: usize = 128;

/// The force limits' input (`WrenchEstimate::peak_force_n`): per sample, the magnitude of the
/// unfiltered compensated force and torque, confirmed by the previous sample (the smaller of
/// the two: one spiking sample does not count, two in a row do), and the largest confirmed
/// value over the last [`common::msg::PEAK_WINDOW_S`]. Pure and allocation-free.
#[derive(Debug, Clone)]
pub struct PeakTracker {
    ring: [(f64, f64); PEAK_RING],
    len: usize,
    head: usize,
    prev: Option<(f64, f64)>,
}

impl PeakTracker {
    /// A window of `PEAK_WINDOW_S` at `sample_rate_hz` (at least 2 samples, at most 128).
    pub fn new(sample_rate_hz: f64) -> Self {
        let n = (common::msg::PEAK_WINDOW_S * sample_rate_hz).ceil();
        let len = if n.is_finite() {
            (n as usize).clamp(2, PEAK_RING)
        } else {
            2
        };
        Self {
            ring: [(0.0, 0.0); PEAK_RING],
            len,
            head: 0,
            prev: None,
        }
    }

    /// The window in samples.
    pub fn window_samples(&self) -> usize {
        self.len
    }

    /// One fine sample's force and torque magnitudes; returns the window's confirmed peaks.
    pub fn push(&mut self, force_n: f64, torque_nm: f64) -> (f64, f64) {
        let c = match self.prev {
            Some((pf, pt)) => (force_n.min(pf), torque_nm.min(pt)),
            None => (0.0, 0.0),
        };
        self.prev = Some((force_n, torque_nm));
        self.ring[self.head] = c;
        self.head = (self.head + 1) % self.len;
        self.ring[..self.len]
            .iter()
            .fold((0.0, 0.0), |(f, t), (cf, ct)| {
                (f64::max(f, *cf), f64::max(t, *ct))
            })
    }

    /// A sample that was not fine: the next one needs a fresh confirmation.
    pub fn break_chain(&mut self) {
        self.prev = None;
    }
}

/// Settle tolerance: the filter counts as re-settled once a state disturbance has decayed to
/// 1 % of its size (see [`Biquad::settle_samples`]).
pub const SETTLE_TOLERANCE: f64 = 0.01;

/// At most this fraction of a tare or capture window may be faulted samples (they are left out
/// of the average); more, and the window is refused: the sensor is not giving a clean static
/// reading.
pub const MAX_EXCLUDED_FRACTION: f64 = 0.1;

/// An averaging window in progress (tare or identification capture).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Averaging {
    Tare,
    Capture,
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Accum {
    n: usize,
    /// Faulted samples left out of this window.
    excluded: usize,
    f: Vector3<f64>,
    t: Vector3<f64>,
    g: Vector3<f64>,
}

/// Outcome of a tare or capture, for the shell to report.
#[derive(Debug, Clone, PartialEq)]
pub enum WindowOutcome {
    Tared {
        force_offset_n: [f64; 3],
        torque_offset_nm: [f64; 3],
    },
    Captured {
        pose: usize,
    },
    Refused(String),
}

/// The filter is being re-settled: estimates carry `fault` until `remaining` more samples have
/// been filtered.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Settling {
    fault: WrenchFault,
    remaining: u32,
    /// The filter state is re-initialised from the next sample that enters it.
    reinit: bool,
}

/// The pipeline's explicit state.
///
/// # Faulted samples and re-settling
///
/// A faulted sample (non-finite, device error, saturated, spike — or any non-finite number
/// computed from it) never enters the filter, nor a tare or capture average. It also starts a
/// settle window: the next sample that is fine re-initialises the filter to its own value
/// (the steady state of that input, [`LowPass::reset_to`]), and that sample and the following
/// ones are flagged with the same fault until [`Pipeline::settle_samples`] samples have been
/// filtered since (93 at 12 Hz / 1 kHz: the filter's 1 % settling time). A new fault inside the
/// window starts it again.
///
/// Why re-initialise rather than carry on from the state before the fault: a fault can last
/// arbitrarily long (saturation during an impact, a device error), and the old state describes
/// the signal before it. Carrying on would replay a step through the filter from the old to
/// the new signal, an error as large as that change; re-initialising leaves the noise of one
/// sample, which then decays with the filter's free response — bounded by the envelope used for
/// the window. The faulted sample itself leaves the state untouched, so after the window the
/// estimates are those of a run that never saw it (to the tolerance).
///
/// Samples that are fine but never reach the filter — no fresh pose (`NoPose`), or samples the
/// shell reports missing with [`Pipeline::missed`] (`Stale`) — are a gap, not a fault: a gap
/// shorter than the settle window leaves the state lagging by less than the filter's own
/// memory and the filter carries on; a longer one re-initialises it and flags the window with
/// `NoPose` or `Stale`. Every re-initialisation after a tare or identification (the bias
/// changed) flags the window `NotTared`.
///
/// `NonFinite` is produced here for a non-finite raw sample (the bus already drops those: the
/// shell never sees them, they show as `Stale`), for a non-finite gravity-compensated wrench
/// (e.g. a non-finite payload handed to [`Pipeline::new`]; config validation refuses one) and
/// for a non-finite output frame: a `sensor_in_tcp` handed to [`Pipeline::new`] can be absurdly
/// far away, and the moment of a force about the TCP overflows. The tool pose's position enters
/// no frame (the TCP and base wrenches are both at the TCP), only its orientation.
#[derive(Debug, Clone)]
pub struct Pipeline {
    p: PipelineParams,
    sensor_in_tcp: Isometry3<f64>,
    filt: [LowPass; 6],
    settle_n: u32,
    settling: Option<Settling>,
    /// Consecutive fine samples that did not reach the filter, and why.
    gap: (u64, WrenchFault),
    tared: bool,
    last_raw: Option<[f64; 6]>,
    averaging: Option<(Averaging, Accum)>,
    outcome: Option<WindowOutcome>,
    captures: Vec<PoseSample>,
    peak: PeakTracker,
    swing: FastSwingWatch,
}

fn finite(w: &Wrench) -> bool {
    w.force.iter().chain(w.torque.iter()).all(|v| v.is_finite())
}

impl Pipeline {
    /// `sensor_in_tcp` from the arm model.
    pub fn new(p: PipelineParams, sensor_in_tcp: Isometry3<f64>) -> Result<Self, String> {
        let c = Biquad::butterworth_lowpass(p.cutoff_hz, p.sample_rate_hz).ok_or_else(|| {
            format!(
                "cutoff {} Hz invalid at {} Hz",
                p.cutoff_hz, p.sample_rate_hz
            )
        })?;
        let peak = PeakTracker::new(p.sample_rate_hz);
        let swing = FastSwingWatch::new(p.fast_swing, p.sample_rate_hz);
        Ok(Self {
            filt: [LowPass::new(c); 6],
            settle_n: c.settle_samples(SETTLE_TOLERANCE),
            settling: None,
            gap: (0, WrenchFault::None),
            p,
            sensor_in_tcp,
            tared: false,
            last_raw: None,
            averaging: None,
            outcome: None,
            captures: Vec::new(),
            peak,
            swing,
        })
    }

    pub fn payload(&self) -> &Payload {
        &self.p.payload
    }
    pub fn is_tared(&self) -> bool {
        self.tared
    }
    pub fn captures(&self) -> usize {
        self.captures.len()
    }

    /// Length of the settle window in samples (see the type's docs).
    pub fn settle_samples(&self) -> u32 {
        self.settle_n
    }

    /// The fault estimates carry while the filter re-settles, if it is re-settling.
    pub fn settling(&self) -> Option<WrenchFault> {
        self.settling.map(|s| s.fault)
    }

    /// Starts a tare over the next `average_samples` samples.
    pub fn start_tare(&mut self) {
        self.averaging = Some((Averaging::Tare, Accum::default()));
        self.outcome = None;
    }

    /// Starts capturing one static pose for payload identification.
    pub fn start_capture(&mut self) {
        self.averaging = Some((Averaging::Capture, Accum::default()));
        self.outcome = None;
    }

    /// Forgets captured poses.
    pub fn clear_captures(&mut self) {
        self.captures.clear();
    }

    /// The result of the last tare/capture, once finished.
    pub fn take_outcome(&mut self) -> Option<WindowOutcome> {
        self.outcome.take()
    }

    /// True while a tare or capture window is open.
    pub fn averaging(&self) -> bool {
        self.averaging.is_some()
    }

    /// Identifies the payload from the captured poses; on success it replaces the payload and
    /// offsets and the sensor counts as tared.
    pub fn identify(&mut self) -> Result<Identification, IdentifyError> {
        let id = identify(&self.captures)?;
        self.p.payload = id.payload;
        self.tared = true;
        self.resettle(WrenchFault::NotTared);
        Ok(id)
    }

    /// The shell's report that `samples` samples never arrived (sequence or time gap before
    /// the sample it is about to pass to [`Pipeline::step`]).
    pub fn missed(&mut self, samples: u64) {
        if samples > 0 {
            self.gap = (self.gap.0.saturating_add(samples), WrenchFault::Stale);
        }
    }

    /// Re-initialise the filter from the next sample that enters it, and flag `fault` until
    /// it has re-settled.
    fn resettle(&mut self, fault: WrenchFault) {
        self.swing.reset();
        self.settling = Some(Settling {
            fault,
            remaining: self.settle_n.max(1),
            reinit: true,
        });
        self.gap = (0, WrenchFault::None);
    }

    fn gravity_sensor(&self, pose: &PoseInput) -> Vector3<f64> {
        self.to_sensor(pose, Vector3::from(self.p.gravity_base))
    }

    /// A base-axes vector in sensor axes at this pose.
    fn to_sensor(&self, pose: &PoseInput, v_base: Vector3<f64>) -> Vector3<f64> {
        let r_bs = pose.tcp_in_base.rotation * self.sensor_in_tcp.rotation;
        r_bs.inverse() * v_base
    }

    /// The sample's own fault, if any (precedence: non-finite, then saturated, device error,
    /// spike). Keeps every finite sample as the reference for the next spike check, so that a
    /// real step is flagged once (then re-settles) rather than forever.
    fn sample_fault(&mut self, raw: &[f64; 6], device_status: u32) -> Option<WrenchFault> {
        if !raw.iter().all(|v| v.is_finite()) {
            return Some(WrenchFault::NonFinite);
        }
        let mut fault = None;
        if device_status != 0 {
            fault = Some(WrenchFault::DeviceError);
        }
        if raw
            .iter()
            .zip(self.p.range.iter())
            .any(|(v, r)| v.abs() >= 0.98 * r)
        {
            fault = Some(WrenchFault::Saturated);
        }
        if let Some(prev) = self.last_raw {
            let jump = (0..3)
                .map(|i| (raw[i] - prev[i]).powi(2))
                .sum::<f64>()
                .sqrt();
            if jump > self.p.spike_force_n && fault.is_none() {
                fault = Some(WrenchFault::Spike);
            }
        }
        self.last_raw = Some(*raw);
        fault
    }

    /// A faulted sample: kept out of the filter and of any average, starts a settle window.
    fn faulted(&mut self, fault: WrenchFault, raw: &[f64; 6]) -> Estimate {
        self.peak.break_chain();
        self.resettle(fault);
        self.exclude_from_average(fault);
        let sensor = if raw.iter().all(|v| v.is_finite()) {
            Wrench::new(
                Vector3::new(raw[0], raw[1], raw[2]),
                Vector3::new(raw[3], raw[4], raw[5]),
            )
        } else {
            Wrench::default()
        };
        Estimate {
            fault,
            sensor,
            ..Default::default()
        }
    }

    /// Processes one raw sample (sensor frame, SI) with the newest tool pose (`None` when there
    /// is no fresh pose) and the device status word (0 = healthy).
    pub fn step(
        &mut self,
        raw: [f64; 6],
        device_status: u32,
        pose: Option<&PoseInput>,
    ) -> Estimate {
        if let Some(fault) = self.sample_fault(&raw, device_status) {
            return self.faulted(fault, &raw);
        }
        let f_raw = Vector3::new(raw[0], raw[1], raw[2]);
        let t_raw = Vector3::new(raw[3], raw[4], raw[5]);

        let Some(pose) = pose else {
            self.peak.break_chain();
            self.gap = (self.gap.0.saturating_add(1), WrenchFault::NoPose);
            // A tare or capture waits out a pose gap (a late kinematics service on a loaded
            // host): without a pose the sample cannot be paired with gravity, so it is left out
            // of the average, not counted against the sensor's fault budget — the sensor is
            // fine. The robot is checked still on every sample that is averaged. A gap longer
            // than a whole window refuses it.
            if self.gap.0 > self.p.average_samples as u64 {
                self.averaging_refuse(&format!(
                    "no fresh tool pose for {} samples (longer than the {}-sample window)",
                    self.gap.0, self.p.average_samples
                ));
            }
            return Estimate {
                fault: WrenchFault::NoPose,
                sensor: Wrench::new(f_raw, t_raw),
                ..Default::default()
            };
        };
        let g_s = self.gravity_sensor(pose);
        let (fc, tc) = self.p.payload.compensate(&f_raw, &t_raw, &g_s);
        // The estimate's input: the tool's inertia removed too — the sensor reads the tool as
        // m·(g − a) (its weight less what accelerating it takes), so gravity is replaced by
        // g − a. The TCP's acceleration stands for the centre of mass's (a few cm away; the
        // rotational terms are left in).
        let (fd, td) = match pose
            .tcp_accel_base_m_s2
            .filter(|_| self.p.compensate_inertia)
        {
            Some(a) => {
                let g_dyn = self.to_sensor(pose, Vector3::from(self.p.gravity_base) - a);
                self.p.payload.compensate(&f_raw, &t_raw, &g_dyn)
            }
            None => (fc, tc),
        };
        let comp = [fd.x, fd.y, fd.z, td.x, td.y, td.z];
        if !(comp.iter().all(|v| v.is_finite())
            && g_s.iter().all(|v| v.is_finite())
            && fc.iter().chain(tc.iter()).all(|v| v.is_finite()))
        {
            return self.faulted(WrenchFault::NonFinite, &raw);
        }

        // A gap longer than the filter's memory: start it afresh.
        if self.gap.0 >= u64::from(self.settle_n) {
            self.resettle(self.gap.1);
        }
        // Filter, then dead band; the state is restored if the result turns out non-finite.
        let before = self.filt;
        if let Some(s) = self.settling.as_mut().filter(|s| s.reinit) {
            for (f, x) in self.filt.iter_mut().zip(comp) {
                f.reset_to(x);
            }
            s.reinit = false;
        }
        let mut out = [0.0; 6];
        let mut residual = [0.0; 3];
        for i in 0..6 {
            let y = self.filt[i].step(comp[i]);
            if i < 3 {
                residual[i] = comp[i] - y;
            }
            let d = if i < 3 {
                self.p.deadband_force_n
            } else {
                self.p.deadband_torque_nm
            };
            out[i] = smooth_deadband(y, d);
        }
        let sensor = Wrench::new(
            Vector3::new(out[0], out[1], out[2]),
            Vector3::new(out[3], out[4], out[5]),
        );
        let tool = sensor.transform(&self.sensor_in_tcp);
        let base = tool.rotate(&pose.tcp_in_base.rotation);
        if ![sensor, tool, base].iter().all(finite) {
            self.filt = before;
            return self.faulted(WrenchFault::NonFinite, &raw);
        }
        let fast_swing_n = self.swing.push(residual);
        self.gap = (0, WrenchFault::None);

        let mut fault = WrenchFault::None;
        if let Some(s) = self.settling.as_mut() {
            fault = s.fault;
            s.remaining = s.remaining.saturating_sub(1);
            if s.remaining == 0 {
                self.settling = None;
            }
        }
        if fault == WrenchFault::None && !self.tared {
            fault = WrenchFault::NotTared;
        }
        // The limits' input: unfiltered, compensated, torque at the TCP.
        let at_tcp = Wrench::new(fc, tc).transform(&self.sensor_in_tcp);
        let (peak_force_n, peak_torque_nm) = if finite(&at_tcp) {
            self.peak.push(at_tcp.force.norm(), at_tcp.torque.norm())
        } else {
            self.peak.break_chain();
            (0.0, 0.0)
        };
        // Last: a tare finishing on this sample re-initialises the filter from the next one.
        self.accumulate(f_raw, t_raw, g_s, fc, pose);
        Estimate {
            fault,
            sensor,
            tool,
            base,
            peak_force_n,
            peak_torque_nm,
            fast_swing_n,
        }
    }

    fn averaging_refuse(&mut self, why: &str) {
        if self.averaging.take().is_some() {
            self.outcome = Some(WindowOutcome::Refused(why.to_string()));
        }
    }

    /// Counts a faulted sample against the open window (it is not averaged); refuses the window
    /// once more than [`MAX_EXCLUDED_FRACTION`] of it would be faulted.
    fn exclude_from_average(&mut self, fault: WrenchFault) {
        let Some((kind, mut acc)) = self.averaging else {
            return;
        };
        acc.excluded += 1;
        let max = (self.p.average_samples as f64 * MAX_EXCLUDED_FRACTION).floor() as usize;
        if acc.excluded > max {
            self.averaging_refuse(&format!(
                "{} faulted samples (last: {fault:?}) during the window; at most {max} are \
                 left out of an average of {}",
                acc.excluded, self.p.average_samples
            ));
        } else {
            self.averaging = Some((kind, acc));
        }
    }

    fn accumulate(
        &mut self,
        f: Vector3<f64>,
        t: Vector3<f64>,
        g: Vector3<f64>,
        f_comp: Vector3<f64>,
        pose: &PoseInput,
    ) {
        let Some((kind, mut acc)) = self.averaging else {
            return;
        };
        if pose.linear_speed_m_s > self.p.still_linear_m_s
            || pose.angular_speed_rad_s > self.p.still_angular_rad_s
        {
            self.averaging_refuse("the robot is moving");
            return;
        }
        if kind == Averaging::Tare && self.tared && f_comp.norm() > self.p.tare_max_contact_n {
            self.averaging_refuse(&format!(
                "contact: compensated force {:.2} N exceeds {} N",
                f_comp.norm(),
                self.p.tare_max_contact_n
            ));
            return;
        }
        acc.n += 1;
        acc.f += f;
        acc.t += t;
        acc.g += g;
        if acc.n < self.p.average_samples {
            self.averaging = Some((kind, acc));
            return;
        }
        self.averaging = None;
        let n = acc.n as f64;
        let (f, t, g) = (acc.f / n, acc.t / n, acc.g / n);
        match kind {
            Averaging::Tare => {
                let (wf, wt) = self.p.payload.weight(&g);
                let f0 = f - wf;
                let t0 = t - wt;
                self.p.payload.force_offset_n = [f0.x, f0.y, f0.z];
                self.p.payload.torque_offset_nm = [t0.x, t0.y, t0.z];
                self.tared = true;
                self.resettle(WrenchFault::NotTared);
                self.outcome = Some(WindowOutcome::Tared {
                    force_offset_n: self.p.payload.force_offset_n,
                    torque_offset_nm: self.p.payload.torque_offset_nm,
                });
            }
            Averaging::Capture => {
                self.captures.push(PoseSample {
                    gravity_sensor: g,
                    force_n: f,
                    torque_nm: t,
                });
                self.outcome = Some(WindowOutcome::Captured {
                    pose: self.captures.len(),
                });
            }
        }
    }
}

/// nalgebra wrench → wire wrench.
pub fn to_msg(w: &Wrench) -> MsgWrench {
    MsgWrench {
        force_n: [w.force.x, w.force.y, w.force.z],
        torque_nm: [w.torque.x, w.torque.y, w.torque.z],
    }
}

#[cfg(test)]
mod tests {

    /// The limits' input sees every sample within its window, ignores a lone spike, and is
    /// unfiltered: a 5 ms impact reaches its full height (a 12 Hz filter shows a fraction).
    #[test]
    fn peak_tracker_holds_confirmed_unfiltered_peaks_over_its_window() {
        let mut p = PeakTracker::new(1000.0);
        assert_eq!(p.window_samples(), 12);
        // A lone 200 N spike among 10 N samples: not confirmed.
        let mut last = (0.0, 0.0);
        for (i, f) in [10.0, 10.0, 200.0, 10.0, 10.0].into_iter().enumerate() {
            last = p.push(f, 0.0);
            assert!(last.0 <= 10.0, "sample {i}: {last:?}");
        }
        // A 5-sample impact at 128 N: held at full height for the window after it.
        for _ in 0..5 {
            last = p.push(128.0, 1.0);
        }
        assert_eq!(last, (128.0, 1.0));
        for k in 0..11 {
            last = p.push(10.0, 0.0);
            assert_eq!(last.0, 128.0, "{k} samples after the impact");
        }
        p.push(10.0, 0.0);
        last = p.push(10.0, 0.0);
        assert_eq!(last.0, 10.0, "the impact left the window");
        // A break (faulted sample) needs a fresh confirmation.
        p.break_chain();
        assert!(p.push(300.0, 0.0).0 <= 10.0);
        let mut filt = LowPass::new(Biquad::butterworth_lowpass(12.0, 1000.0).expect("filter"));
        for _ in 0..500 {
            filt.step(0.0);
        }
        let shown = (0..5).map(|_| filt.step(128.0)).fold(0.0, f64::max);
        assert!(
            shown < 0.2 * 128.0,
            "the filter shows {shown:.1} N of a 5 ms impact"
        );
    }

    use super::*;
    use nalgebra::{Translation3, UnitQuaternion};

    fn still(r: UnitQuaternion<f64>) -> PoseInput {
        PoseInput {
            tcp_in_base: Isometry3::from_parts(Translation3::new(0.4, 0.0, 0.5), r),
            linear_speed_m_s: 0.0,
            angular_speed_rad_s: 0.0,
            tcp_accel_base_m_s2: None,
        }
    }

    fn truth() -> Payload {
        Payload {
            mass_kg: 0.8,
            com_m: [0.01, -0.005, 0.04],
            force_offset_n: [2.0, -1.0, 0.5],
            torque_offset_nm: [0.02, 0.01, -0.03],
        }
    }

    /// What the sensor reads for a payload, orientation and contact force at the sensor origin.
    fn reading(p: &Payload, pose: &PoseInput, contact_sensor: Vector3<f64>) -> [f64; 6] {
        let g_s = pose.tcp_in_base.rotation.inverse() * Vector3::new(0.0, 0.0, -9.81);
        let (wf, wt) = p.weight(&g_s);
        let f = wf + Vector3::from(p.force_offset_n) + contact_sensor;
        let t = wt + Vector3::from(p.torque_offset_nm);
        [f.x, f.y, f.z, t.x, t.y, t.z]
    }

    fn params() -> PipelineParams {
        PipelineParams {
            average_samples: 20,
            deadband_force_n: 0.0,
            deadband_torque_nm: 0.0,
            ..Default::default()
        }
    }

    #[test]
    fn accel_from_consecutive_cycles_and_unknown_after_a_gap() {
        let mut a = AccelEstimator::default();
        let v = |x: f64| Vector3::new(x, 0.0, 0.0);
        assert_eq!(a.push(10, v(0.0), 0.004), None);
        let got = a.push(11, v(0.02), 0.004).expect("consecutive");
        assert!((got.x - 5.0).abs() < 1e-9, "{got}");
        // The same cycle again (a force sample between poses): unchanged.
        assert_eq!(a.push(11, v(0.5), 0.004), Some(got));
        // A gap: unknown until two consecutive cycles again.
        assert_eq!(a.push(13, v(0.02), 0.004), None);
        assert!(a.push(14, v(0.02), 0.004).is_some());
        // Implausible (a glitch: 1 m/s in one cycle) or a bad period: unknown.
        assert_eq!(a.push(15, v(1.02), 0.004), None);
        assert_eq!(a.push(16, v(1.02), 0.0), None);
        assert_eq!(a.push(17, v(f64::NAN), 0.004), None);
        assert_eq!(a.push(18, v(0.0), 0.004), None);
    }

    /// Issue 41: the tool's own inertia is not contact. A 0.8 kg tool accelerating at 5 m/s²
    /// with nothing touching it reads 4 N more than its weight; with the measured acceleration
    /// compensated the estimate stays at zero (without: 4 N, four times the contact threshold),
    /// while the limits' peak still sees the 4 N (only the weight removed from it).
    #[test]
    fn the_tools_inertia_is_compensated_in_the_estimate_not_in_the_peak() {
        let run = |compensate: bool| {
            let mut pl = Pipeline::new(
                PipelineParams {
                    payload: truth(),
                    compensate_inertia: compensate,
                    ..params()
                },
                Isometry3::identity(),
            )
            .expect("pipeline");
            pl.tared = true;
            let r = UnitQuaternion::from_euler_angles(0.3, -0.5, 0.2);
            let a_base = Vector3::new(3.0, -4.0, 0.0);
            let pose = PoseInput {
                tcp_accel_base_m_s2: Some(a_base),
                ..still(r)
            };
            // The sensor reads the tool as m·(g − a): its weight less what accelerating it
            // takes (the simulator's `ToolParams::inertial_wrench`, point mass).
            let inertial = -(r.inverse() * a_base) * truth().mass_kg;
            let mut raw = reading(&truth(), &pose, inertial);
            let com = Vector3::from(truth().com_m);
            let t_in = com.cross(&inertial);
            for k in 0..3 {
                raw[3 + k] += t_in[k];
            }
            let mut e = Estimate::default();
            for _ in 0..2000 {
                e = pl.step(raw, 0, Some(&pose));
            }
            (e.base.force.norm(), e.peak_force_n)
        };
        let (with, peak_with) = run(true);
        let (without, peak_without) = run(false);
        assert!(with < 1e-6, "compensated: {with} N");
        assert!((without - 4.0).abs() < 1e-6, "uncompensated: {without} N");
        assert!((peak_with - 4.0).abs() < 1e-6 && (peak_without - 4.0).abs() < 1e-6);
    }

    #[test]
    fn not_tared_until_tare_then_zero_at_rest() {
        let mut pl = Pipeline::new(
            PipelineParams {
                payload: Payload {
                    mass_kg: 0.8,
                    com_m: [0.01, -0.005, 0.04],
                    ..Default::default()
                },
                ..params()
            },
            Isometry3::identity(),
        )
        .expect("pipeline");
        let pose = still(UnitQuaternion::from_euler_angles(0.3, -0.5, 0.2));
        let raw = reading(&truth(), &pose, Vector3::zeros());
        assert_eq!(pl.step(raw, 0, Some(&pose)).fault, WrenchFault::NotTared);
        pl.start_tare();
        for _ in 0..20 {
            pl.step(raw, 0, Some(&pose));
        }
        assert!(matches!(
            pl.take_outcome(),
            Some(WindowOutcome::Tared { .. })
        ));
        // The bias changed: the filter restarts from the next sample and is flagged until it
        // has re-settled.
        for _ in 0..pl.settle_samples() {
            assert_eq!(pl.step(raw, 0, Some(&pose)).fault, WrenchFault::NotTared);
        }
        let e = pl.step(raw, 0, Some(&pose));
        assert_eq!(e.fault, WrenchFault::None);
        assert!(
            e.sensor.force.norm() < 1e-9 && e.sensor.torque.norm() < 1e-9,
            "{} {}",
            e.sensor.force,
            e.sensor.torque
        );
        // Rotate the tool: gravity compensation keeps it at zero.
        let pose2 = still(UnitQuaternion::from_euler_angles(-1.0, 0.7, 2.0));
        let raw2 = reading(&truth(), &pose2, Vector3::zeros());
        pl.step(raw2, 0, Some(&pose2));
        let e2 = pl.step(raw2, 0, Some(&pose2));
        assert!(e2.sensor.force.norm() < 1e-9, "{}", e2.sensor.force);
    }

    #[test]
    fn identification_through_captures_then_contact_in_base() {
        let mut pl = Pipeline::new(params(), Isometry3::identity()).expect("pipeline");
        let rots = [
            (0.0, 0.0, 0.0),
            (std::f64::consts::PI, 0.0, 0.0),
            (std::f64::consts::FRAC_PI_2, 0.0, 0.0),
            (-std::f64::consts::FRAC_PI_2, 0.0, 0.0),
            (0.0, std::f64::consts::FRAC_PI_2, 0.0),
            (0.0, -std::f64::consts::FRAC_PI_2, 0.3),
        ];
        for (r, p, y) in rots {
            let pose = still(UnitQuaternion::from_euler_angles(r, p, y));
            pl.start_capture();
            for _ in 0..20 {
                pl.step(reading(&truth(), &pose, Vector3::zeros()), 0, Some(&pose));
            }
            assert!(matches!(
                pl.take_outcome(),
                Some(WindowOutcome::Captured { .. })
            ));
        }
        let id = pl.identify().expect("identify");
        assert!((id.payload.mass_kg - 0.8).abs() < 1e-9);
        // A 10 N push along base −z with the sensor rotated: the base-frame estimate is −10 N z.
        let pose = still(UnitQuaternion::from_euler_angles(0.4, 0.2, -0.1));
        let contact_base = Vector3::new(0.0, 0.0, -10.0);
        let contact_sensor = pose.tcp_in_base.rotation.inverse() * contact_base;
        let raw = reading(&truth(), &pose, contact_sensor);
        let mut e = Estimate::default();
        for _ in 0..2000 {
            e = pl.step(raw, 0, Some(&pose));
        }
        assert_eq!(e.fault, WrenchFault::None);
        assert!(
            (e.base.force - contact_base).norm() < 1e-6,
            "{}",
            e.base.force
        );
    }

    #[test]
    fn tare_refused_while_moving_and_faults_flagged() {
        let mut pl = Pipeline::new(params(), Isometry3::identity()).expect("pipeline");
        let mut pose = still(UnitQuaternion::identity());
        pose.linear_speed_m_s = 0.1;
        pl.start_tare();
        pl.step([0.0; 6], 0, Some(&pose));
        assert!(matches!(pl.take_outcome(), Some(WindowOutcome::Refused(_))));
        let pose = still(UnitQuaternion::identity());
        assert_eq!(
            pl.step([f64::NAN; 6], 0, Some(&pose)).fault,
            WrenchFault::NonFinite
        );
        assert_eq!(
            pl.step([0.0, 0.0, 399.0, 0.0, 0.0, 0.0], 0, Some(&pose))
                .fault,
            WrenchFault::Saturated
        );
        pl.step([0.0; 6], 0, Some(&pose));
        assert_eq!(
            pl.step([150.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0, Some(&pose))
                .fault,
            WrenchFault::Spike
        );
        assert_eq!(
            pl.step([0.0; 6], 4, Some(&pose)).fault,
            WrenchFault::DeviceError
        );
        assert_eq!(pl.step([0.0; 6], 0, None).fault, WrenchFault::NoPose);
    }

    /// A deterministic, noisy static contact reading (sensor frame): 0.5 N / 0.01 N·m ripple.
    fn noisy(k: usize) -> [f64; 6] {
        let k = k as f64;
        let n = 0.3 * (0.7 * k).sin() + 0.2 * (2.3 * k + 1.0).sin();
        [
            5.0 + n,
            -3.0 - 0.5 * n,
            10.0 + 0.8 * n,
            0.1 + 0.02 * n,
            -0.01 * n,
            -0.05,
        ]
    }

    fn tared(p: PipelineParams) -> Pipeline {
        let mut pl = Pipeline::new(p, Isometry3::identity()).expect("pipeline");
        pl.tared = true;
        pl
    }

    fn max_diff(a: &Estimate, b: &Estimate) -> f64 {
        let d =
            |x: &Wrench, y: &Wrench| (x.force - y.force).amax().max((x.torque - y.torque).amax());
        d(&a.sensor, &b.sensor)
            .max(d(&a.tool, &b.tool))
            .max(d(&a.base, &b.base))
    }

    /// Item 7: a spike never enters the filter, stays flagged until the filter has re-settled,
    /// and afterwards the estimates are those of a run without the spike.
    #[test]
    fn spike_leaves_the_filter_alone_and_is_flagged_until_resettled() {
        let pose = still(UnitQuaternion::from_euler_angles(0.2, -0.3, 0.5));
        type Signal = fn(usize) -> [f64; 6];
        let cases: [(Signal, f64); 2] = [
            // Constant input: the restart lands exactly on the undisturbed trajectory.
            (|_| noisy(0), 1e-12),
            // Noisy input: the restart's one-sample noise decays to 1 % within the window
            // (ripple ≤ 0.5 N, so ≤ 0.01 N left; 2× margin for the difference of histories).
            (noisy, 0.01),
        ];
        for (signal, tol) in cases {
            let mut with = tared(params());
            let mut without = tared(params());
            let n = with.settle_samples() as usize;
            assert_eq!(n, 93);
            for k in 0..300 {
                with.step(signal(k), 0, Some(&pose));
                without.step(signal(k), 0, Some(&pose));
            }
            let before = with.filt;
            let mut spiked = signal(300);
            spiked[0] += 150.0;
            let e = with.step(spiked, 0, Some(&pose));
            without.step(signal(300), 0, Some(&pose));
            assert_eq!(e.fault, WrenchFault::Spike);
            assert_eq!(with.filt, before, "the spike changed the filter state");
            assert!(finite(&e.sensor) && e.tool == Wrench::default());
            // The return to the signal is a 150 N jump too: also flagged, also kept out.
            let e = with.step(signal(301), 0, Some(&pose));
            without.step(signal(301), 0, Some(&pose));
            assert_eq!(e.fault, WrenchFault::Spike);
            assert_eq!(with.filt, before);
            // The settle window: `n` filtered samples still flagged Spike …
            for k in 302..302 + n {
                let e = with.step(signal(k), 0, Some(&pose));
                without.step(signal(k), 0, Some(&pose));
                assert_eq!(e.fault, WrenchFault::Spike, "sample {k}");
            }
            assert_eq!(with.settling(), None);
            // … then usable, and the same as without the spike.
            for k in 302 + n..302 + 5 * n {
                let a = with.step(signal(k), 0, Some(&pose));
                let b = without.step(signal(k), 0, Some(&pose));
                assert_eq!(a.fault, WrenchFault::None, "sample {k}");
                assert_eq!(b.fault, WrenchFault::None);
                assert!(max_diff(&a, &b) <= tol, "sample {k}: {}", max_diff(&a, &b));
            }
        }
    }

    /// Item 7: every sample fault (and a non-finite raw sample) flags its own variant for
    /// exactly the settle window; a new fault inside the window starts it again.
    #[test]
    fn each_fault_is_flagged_for_the_settle_window_then_cleared() {
        let pose = still(UnitQuaternion::identity());
        let good = [1.0, 2.0, 3.0, 0.0, 0.0, 0.0];
        let saturated = [1.0, 2.0, 399.0, 0.0, 0.0, 0.0];
        for (raw, status, fault) in [
            (saturated, 0, WrenchFault::Saturated),
            (good, 0x8000, WrenchFault::DeviceError),
            ([f64::NAN; 6], 0, WrenchFault::NonFinite),
            (
                [1.0, f64::INFINITY, 3.0, 0.0, 0.0, 0.0],
                0,
                WrenchFault::NonFinite,
            ),
        ] {
            let mut pl = tared(params());
            let n = pl.settle_samples();
            for _ in 0..10 {
                assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::None);
            }
            let e = pl.step(raw, status, Some(&pose));
            assert_eq!(e.fault, fault);
            // The return from a saturated reading is itself a jump (a spike): the window runs
            // from the last faulted sample, flagged with the last fault.
            let mut last = fault;
            let mut e = pl.step(good, 0, Some(&pose));
            if e.fault == WrenchFault::Spike {
                last = WrenchFault::Spike;
                e = pl.step(good, 0, Some(&pose));
            }
            assert_eq!(e.fault, last, "{fault:?}: first good sample");
            for i in 1..n {
                assert_eq!(pl.step(good, 0, Some(&pose)).fault, last, "{fault:?}: {i}");
            }
            assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::None);
        }
        // A fault inside the window restarts it.
        let mut pl = tared(params());
        let n = pl.settle_samples();
        pl.step(good, 0, Some(&pose));
        pl.step(good, 1, Some(&pose));
        for _ in 0..n / 2 {
            assert_eq!(
                pl.step(good, 0, Some(&pose)).fault,
                WrenchFault::DeviceError
            );
        }
        pl.step(good, 2, Some(&pose));
        for _ in 0..n {
            assert_eq!(
                pl.step(good, 0, Some(&pose)).fault,
                WrenchFault::DeviceError
            );
        }
        assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::None);
    }

    /// A 50-sample window's set-up: a payload to tare or capture against, a still tilted pose
    /// and its clean reading.
    fn window_fixture() -> (PipelineParams, PoseInput, [f64; 6]) {
        let p = PipelineParams {
            average_samples: 50,
            payload: Payload {
                mass_kg: 0.8,
                com_m: [0.01, -0.005, 0.04],
                ..Default::default()
            },
            ..params()
        };
        let pose = still(UnitQuaternion::from_euler_angles(0.3, -0.5, 0.2));
        let raw = reading(&truth(), &pose, Vector3::zeros());
        (p, pose, raw)
    }

    /// Item 7: faulted samples are left out of tare and capture averages (the window waits
    /// for clean ones instead); too many of them refuse the window.
    #[test]
    fn faulted_samples_are_left_out_of_tare_and_capture_averages() {
        let (p, pose, raw) = window_fixture();
        let mut spike = raw;
        spike[1] += 150.0;
        let mut sat = raw;
        sat[2] = 399.0;
        // 5 faulted samples: spike + the jump back, saturated + the jump back, device error.
        let faulted: [([f64; 6], u32); 3] = [(spike, 0), (sat, 0), (raw, 7)];
        for capture in [false, true] {
            let window = |pl: &mut Pipeline, dirty: bool| {
                if capture {
                    pl.start_capture();
                } else {
                    pl.start_tare();
                }
                // Feed clean samples until the window closes, the faulted ones in between.
                let mut k = 0;
                while pl.averaging() && k < 100 {
                    let inject = if dirty && k % 10 == 5 {
                        faulted.get(k / 10)
                    } else {
                        None
                    };
                    if let Some((r, status)) = inject {
                        assert_ne!(pl.step(*r, *status, Some(&pose)).fault, WrenchFault::None);
                    }
                    pl.step(raw, 0, Some(&pose));
                    k += 1;
                }
                pl.take_outcome()
            };
            let mut clean = Pipeline::new(p.clone(), Isometry3::identity()).expect("pipeline");
            let mut dirty = clean.clone();
            let want = window(&mut clean, false);
            let got = window(&mut dirty, true);
            assert!(
                matches!(
                    want,
                    Some(WindowOutcome::Tared { .. } | WindowOutcome::Captured { .. })
                ),
                "{want:?}"
            );
            assert_eq!(got, want);
            if capture {
                assert_eq!(dirty.captures, clean.captures);
            } else {
                assert_eq!(dirty.payload(), clean.payload());
                let f0 = Vector3::from(dirty.payload().force_offset_n);
                assert!(
                    (f0 - Vector3::from(truth().force_offset_n)).norm() < 1e-9,
                    "{f0}"
                );
            }
        }
        // More than 10 % faulted: refused, not averaged.
        let mut pl = Pipeline::new(p, Isometry3::identity()).expect("pipeline");
        pl.start_tare();
        for k in 0..6 {
            assert!(pl.averaging(), "refused after {k} faulted samples");
            pl.step(raw, 1, Some(&pose));
        }
        assert!(!pl.averaging());
        match pl.take_outcome() {
            Some(WindowOutcome::Refused(why)) => assert!(why.contains("faulted"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(!pl.is_tared());
    }

    /// A pose gap (a late kinematics service) inside a tare or capture window is waited out:
    /// the samples without a pose are left out, the result equals a window without the gap. A
    /// gap longer than a whole window refuses it.
    #[test]
    fn a_pose_gap_is_waited_out_by_tare_and_capture() {
        let (p, pose, raw) = window_fixture();
        for capture in [false, true] {
            let window = |pl: &mut Pipeline, gap: usize| {
                if capture {
                    pl.start_capture();
                } else {
                    pl.start_tare();
                }
                let mut k = 0;
                while pl.averaging() && k < 500 {
                    let with_pose = !(10..10 + gap).contains(&k);
                    pl.step(raw, 0, with_pose.then_some(&pose));
                    k += 1;
                }
                pl.take_outcome()
            };
            let mut clean = Pipeline::new(p.clone(), Isometry3::identity()).expect("pipeline");
            let mut gapped = clean.clone();
            let want = window(&mut clean, 0);
            // 45 samples without a pose: more than the 10 % fault budget, less than a window.
            let got = window(&mut gapped, 45);
            assert!(
                matches!(
                    want,
                    Some(WindowOutcome::Tared { .. } | WindowOutcome::Captured { .. })
                ),
                "{want:?}"
            );
            assert_eq!(got, want);
            assert_eq!(gapped.payload(), clean.payload());
            assert_eq!(gapped.captures, clean.captures);
            // Longer than the window: refused.
            let mut long = Pipeline::new(p.clone(), Isometry3::identity()).expect("pipeline");
            match window(&mut long, 200) {
                Some(WindowOutcome::Refused(why)) => {
                    assert!(why.contains("no fresh tool pose"), "{why}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// Item 7: `NonFinite` is produced — for a non-finite raw sample, for a sensor mount so far
    /// from the TCP that the moment about the TCP overflows, and for a non-finite payload — and
    /// the estimate is all finite (it would be dropped by subscribers otherwise), the filter
    /// untouched. A tool pose that passes the bus's check but is absurdly far away is harmless:
    /// its position enters no frame.
    #[test]
    fn non_finite_is_produced_and_published_finite() {
        let pose = still(UnitQuaternion::identity());
        let good = [0.0, 0.0, 10.0, 0.0, 0.0, 0.0];
        let mut pl = tared(params());
        for _ in 0..10 {
            pl.step(good, 0, Some(&pose));
        }
        let before = pl.filt;
        let all_finite = |e: &Estimate| finite(&e.sensor) && finite(&e.tool) && finite(&e.base);
        let e = pl.step([f64::NAN, 0.0, 0.0, 0.0, 0.0, 0.0], 0, Some(&pose));
        assert_eq!(e.fault, WrenchFault::NonFinite);
        assert!(all_finite(&e));
        assert_eq!(pl.filt, before);

        // Finite, unit quaternion (msg::Check accepts it), but 1e308 m away: no frame is about
        // the base origin, so nothing overflows.
        let far = PoseInput {
            tcp_in_base: Isometry3::from_parts(
                Translation3::new(1e308, 0.0, 0.0),
                UnitQuaternion::identity(),
            ),
            linear_speed_m_s: 0.0,
            angular_speed_rad_s: 0.0,
            tcp_accel_base_m_s2: None,
        };
        let msg_pose = common::msg::Pose {
            position_m: [1e308, 0.0, 0.0],
            quat_wxyz: [1.0, 0.0, 0.0, 0.0],
        };
        assert!(msg_pose.is_valid());
        let mut pl = tared(params());
        for _ in 0..10 {
            pl.step(good, 0, Some(&pose));
        }
        let e = pl.step(good, 0, Some(&far));
        assert_eq!(e.fault, WrenchFault::None);
        assert!(all_finite(&e), "{e:?}");

        // The sensor 1e308 m from the TCP: r × f overflows the TCP moment.
        let mut pl =
            Pipeline::new(params(), Isometry3::translation(1e308, 0.0, 0.0)).expect("pipeline");
        pl.tared = true;
        // A force along r has no moment: these pass and set the filter state.
        let along = [10.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        for _ in 0..10 {
            assert_eq!(pl.step(along, 0, Some(&pose)).fault, WrenchFault::None);
        }
        // A device error restarts the filter from the next sample, which has a moment.
        pl.step(along, 1, Some(&pose));
        let before = pl.filt;
        let e = pl.step([10.0, 0.0, 10.0, 0.0, 0.0, 0.0], 0, Some(&pose));
        assert_eq!(e.fault, WrenchFault::NonFinite);
        assert!(all_finite(&e), "{e:?}");
        assert_eq!(pl.filt, before, "the filter state was restored");
        // … and the next good ones are flagged NonFinite while the filter re-settles.
        assert_eq!(pl.step(along, 0, Some(&pose)).fault, WrenchFault::NonFinite);

        // A non-finite payload (config validation refuses it; a library user might not).
        let nan_payload = PipelineParams {
            payload: Payload {
                com_m: [f64::NAN, 0.0, 0.0],
                mass_kg: 1.0,
                ..Default::default()
            },
            ..params()
        };
        assert!(nan_payload
            .problems()
            .iter()
            .any(|(k, _)| k == "payload.com_m[0]"));
        let mut pl = tared(nan_payload);
        let e = pl.step(good, 0, Some(&pose));
        assert_eq!(e.fault, WrenchFault::NonFinite);
        assert!(all_finite(&e));
    }

    /// Samples that never reached the filter: a gap shorter than the settle window carries on
    /// unflagged, a longer one restarts the filter and flags `Stale` / `NoPose` for the window.
    #[test]
    fn long_gaps_restart_the_filter_short_ones_do_not() {
        let pose = still(UnitQuaternion::identity());
        let good = [1.0, 0.0, 2.0, 0.0, 0.0, 0.0];
        let mut pl = tared(params());
        let n = pl.settle_samples();
        pl.step(good, 0, Some(&pose));
        pl.missed(u64::from(n) - 1);
        assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::None);
        pl.missed(u64::from(n));
        for _ in 0..n {
            assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::Stale);
        }
        assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::None);
        for _ in 0..n - 1 {
            assert_eq!(pl.step(good, 0, None).fault, WrenchFault::NoPose);
        }
        assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::None);
        for _ in 0..n {
            assert_eq!(pl.step(good, 0, None).fault, WrenchFault::NoPose);
        }
        for _ in 0..n {
            assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::NoPose);
        }
        assert_eq!(pl.step(good, 0, Some(&pose)).fault, WrenchFault::None);
    }

    #[test]
    fn tool_and_base_frames() {
        // Sensor 0.1 m behind the TCP along z; the tool turned 90° about base z.
        let sensor_in_tcp = Isometry3::translation(0.0, 0.0, -0.1);
        let mut pl = Pipeline::new(params(), sensor_in_tcp).expect("pipeline");
        pl.tared = true;
        let pose = still(UnitQuaternion::from_axis_angle(
            &Vector3::z_axis(),
            std::f64::consts::FRAC_PI_2,
        ));
        let raw = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let e = pl.step(raw, 0, Some(&pose));
        // At the TCP: torque = p × f with p = (0,0,-0.1): (0, -0.1, 0).
        assert!((e.tool.force - Vector3::new(1.0, 0.0, 0.0)).norm() < 1e-12);
        assert!((e.tool.torque - Vector3::new(0.0, -0.1, 0.0)).norm() < 1e-12);
        // Base axes, still at the TCP (the TCP's position (0.4, 0, 0.5) adds no moment): the
        // tool's x is base y, its y base −x.
        assert!(
            (e.base.force - Vector3::new(0.0, 1.0, 0.0)).norm() < 1e-12,
            "{}",
            e.base.force
        );
        assert!(
            (e.base.torque - Vector3::new(0.1, 0.0, 0.0)).norm() < 1e-12,
            "{}",
            e.base.torque
        );
    }
}
