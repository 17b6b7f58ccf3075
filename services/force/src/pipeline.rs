//! The force-processing pipeline, one raw sample at a time, with explicit state. Pure: time and
//! the tool pose are parameters.
//!
//! raw sensor wrench → checks (non-finite, saturation, spike, device status) → bias and tool
//! gravity compensation (payload model, orientation from kinematics) → 2nd-order Butterworth
//! low-pass → smooth dead band → frames (sensor, TCP/tool, TCP/base, constraint).
//!
//! Until the sensor has been tared (or the payload identified) in this session every estimate is
//! flagged `NotTared`: offsets drift, and a stale bias is the commonest cause of a robot that
//! creeps in force mode.

use common::msg::{Wrench as MsgWrench, WrenchFault};
use kinematics::Wrench;
use nalgebra::{Isometry3, Vector3};
use serde::{Deserialize, Serialize};

use crate::{
    filter::{smooth_deadband, Biquad, LowPass},
    payload::{identify, Identification, IdentifyError, Payload, PoseSample},
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
    /// Constraint frame in base (for the `constraint` output).
    pub constraint_in_base: kinematics::FrameParams,
    /// Shell: no raw sample for this long → estimates flagged `Stale` (ms).
    pub stale_ms: f64,
    /// Shell: a tool pose older than this is not used for gravity compensation (ms).
    pub pose_max_age_ms: f64,
    /// Joint poses (deg) the robot visits for `cell payload identify` (≥ 6, distinct tool
    /// orientations).
    pub identification_poses_deg: Vec<[f64; 6]>,
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
            constraint_in_base: kinematics::FrameParams::identity(),
            stale_ms: 9.0,
            pose_max_age_ms: 50.0,
            identification_poses_deg: default_identification_poses(),
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
        if self.identification_poses_deg.len() < 6 {
            p.push((
                "identification_poses_deg".into(),
                format!(
                    "{} poses given, at least 6 needed",
                    self.identification_poses_deg.len()
                ),
            ));
        }
        if let Err(errs) = self.constraint_in_base.to_isometry("constraint_in_base") {
            for e in errs {
                let (k, v) = e
                    .split_once(':')
                    .unwrap_or(("constraint_in_base", e.as_str()));
                p.push((k.trim().to_string(), v.trim().to_string()));
            }
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
}

/// One processed sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Estimate {
    pub fault: WrenchFault,
    pub sensor: Wrench,
    pub tool: Wrench,
    pub base: Wrench,
    pub constraint: Wrench,
}

/// An averaging window in progress (tare or identification capture).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Averaging {
    Tare,
    Capture,
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Accum {
    n: usize,
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

/// The pipeline's explicit state.
#[derive(Debug, Clone)]
pub struct Pipeline {
    p: PipelineParams,
    sensor_in_tcp: Isometry3<f64>,
    base_in_constraint: Isometry3<f64>,
    filt: [LowPass; 6],
    tared: bool,
    last_raw: Option<[f64; 6]>,
    averaging: Option<(Averaging, Accum)>,
    outcome: Option<WindowOutcome>,
    captures: Vec<PoseSample>,
}

impl Pipeline {
    /// `sensor_in_tcp` from the arm model; `constraint_in_base` the configured constraint frame.
    pub fn new(
        p: PipelineParams,
        sensor_in_tcp: Isometry3<f64>,
        constraint_in_base: Isometry3<f64>,
    ) -> Result<Self, String> {
        let c = Biquad::butterworth_lowpass(p.cutoff_hz, p.sample_rate_hz).ok_or_else(|| {
            format!(
                "cutoff {} Hz invalid at {} Hz",
                p.cutoff_hz, p.sample_rate_hz
            )
        })?;
        Ok(Self {
            filt: [LowPass::new(c); 6],
            p,
            sensor_in_tcp,
            base_in_constraint: constraint_in_base.inverse(),
            tared: false,
            last_raw: None,
            averaging: None,
            outcome: None,
            captures: Vec::new(),
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
        self.reset_filters();
        Ok(id)
    }

    fn reset_filters(&mut self) {
        // Next sample primes the filters: no step through the filter after a bias change.
        if let Some(c) = Biquad::butterworth_lowpass(self.p.cutoff_hz, self.p.sample_rate_hz) {
            self.filt = [LowPass::new(c); 6];
        }
    }

    fn gravity_sensor(&self, pose: &PoseInput) -> Vector3<f64> {
        let r_bs = pose.tcp_in_base.rotation * self.sensor_in_tcp.rotation;
        r_bs.inverse() * Vector3::from(self.p.gravity_base)
    }

    /// Processes one raw sample (sensor frame, SI) with the newest tool pose (`None` when there
    /// is no fresh pose) and the device status word (0 = healthy).
    pub fn step(
        &mut self,
        raw: [f64; 6],
        device_status: u32,
        pose: Option<&PoseInput>,
    ) -> Estimate {
        let mut fault = WrenchFault::None;
        if !raw.iter().all(|v| v.is_finite()) {
            self.averaging_refuse("non-finite sample");
            return Estimate {
                fault: WrenchFault::NonFinite,
                ..Default::default()
            };
        }
        if device_status != 0 {
            fault = WrenchFault::DeviceError;
        }
        if raw
            .iter()
            .zip(self.p.range.iter())
            .any(|(v, r)| v.abs() >= 0.98 * r)
        {
            fault = WrenchFault::Saturated;
        }
        if let Some(prev) = self.last_raw {
            let jump = (0..3)
                .map(|i| (raw[i] - prev[i]).powi(2))
                .sum::<f64>()
                .sqrt();
            if jump > self.p.spike_force_n && fault == WrenchFault::None {
                fault = WrenchFault::Spike;
            }
        }
        self.last_raw = Some(raw);
        let f_raw = Vector3::new(raw[0], raw[1], raw[2]);
        let t_raw = Vector3::new(raw[3], raw[4], raw[5]);

        let Some(pose) = pose else {
            self.averaging_refuse("no fresh tool pose");
            return Estimate {
                fault: if fault == WrenchFault::None {
                    WrenchFault::NoPose
                } else {
                    fault
                },
                sensor: Wrench::new(f_raw, t_raw),
                ..Default::default()
            };
        };
        let g_s = self.gravity_sensor(pose);
        let (fc, _) = self.p.payload.compensate(&f_raw, &t_raw, &g_s);
        self.accumulate(f_raw, t_raw, g_s, fc, pose);
        // Compensate after accumulating: a tare finishing on this sample applies to it.
        let (fc, tc) = self.p.payload.compensate(&f_raw, &t_raw, &g_s);

        // Filter, then dead band.
        let comp = [fc.x, fc.y, fc.z, tc.x, tc.y, tc.z];
        let mut out = [0.0; 6];
        for i in 0..6 {
            let y = self.filt[i].step(comp[i]);
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
        let sensor_in_base = pose.tcp_in_base * self.sensor_in_tcp;
        let constraint = sensor.transform(&(self.base_in_constraint * sensor_in_base));
        if fault == WrenchFault::None && !self.tared {
            fault = WrenchFault::NotTared;
        }
        Estimate {
            fault,
            sensor,
            tool,
            base,
            constraint,
        }
    }

    fn averaging_refuse(&mut self, why: &str) {
        if self.averaging.take().is_some() {
            self.outcome = Some(WindowOutcome::Refused(why.to_string()));
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
                self.reset_filters();
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
    use super::*;
    use nalgebra::{Translation3, UnitQuaternion};

    fn still(r: UnitQuaternion<f64>) -> PoseInput {
        PoseInput {
            tcp_in_base: Isometry3::from_parts(Translation3::new(0.4, 0.0, 0.5), r),
            linear_speed_m_s: 0.0,
            angular_speed_rad_s: 0.0,
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
        let mut pl = Pipeline::new(params(), Isometry3::identity(), Isometry3::identity())
            .expect("pipeline");
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
        let mut pl = Pipeline::new(params(), Isometry3::identity(), Isometry3::identity())
            .expect("pipeline");
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

    #[test]
    fn tool_and_constraint_frames() {
        // Sensor 0.1 m behind the TCP along z; constraint frame = base shifted.
        let sensor_in_tcp = Isometry3::translation(0.0, 0.0, -0.1);
        let constraint_in_base = Isometry3::translation(0.4, 0.0, 0.0);
        let mut pl = Pipeline::new(params(), sensor_in_tcp, constraint_in_base).expect("pipeline");
        pl.tared = true;
        let pose = still(UnitQuaternion::identity());
        let raw = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let e = pl.step(raw, 0, Some(&pose));
        // At the TCP: torque = p × f with p = (0,0,-0.1): (0, -0.1, 0).
        assert!((e.tool.torque - Vector3::new(0.0, -0.1, 0.0)).norm() < 1e-12);
        // Constraint origin at (0.4,0,0) in base; sensor origin at (0.4, 0, 0.4): r = (0,0,0.4).
        assert!(
            (e.constraint.torque - Vector3::new(0.0, 0.4, 0.0)).norm() < 1e-12,
            "{}",
            e.constraint.torque
        );
    }
}
