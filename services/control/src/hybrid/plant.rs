//! The plant stage ([`PlantRun`]): a hybrid task on the torque-controlled 2-DOF plant.

use common::msg::{
    FrameKind, HybridGains, HybridLimits, HybridPhase, HybridTask, ProtectiveCause, TaskRobot,
};
use nalgebra::{Isometry3, Matrix2, Rotation2, Translation3, UnitQuaternion, Vector2, Vector3};

use super::{
    check_task, profile_rate, profile_value, ref_time, Abort, Feedforward, HybridLaw, LawInput,
    StepReport, Supervision, TaskError, AXES,
};

/// The plant stage's inputs (one `sim/plant/state` sample).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlantInput {
    pub t_s: f64,
    pub q: [f64; 2],
    pub qd: [f64; 2],
    /// Force of the wrist on the hand (the wrist sensor) — quasi-statically the force the hand
    /// applies to the environment.
    pub wrist_force_n: [f64; 2],
}

/// A hybrid task on the torque-controlled 2-DOF plant (x, y of {C} in the plant plane).
#[derive(Debug, Clone)]
pub struct PlantRun {
    pub task: HybridTask,
    pub law: HybridLaw,
    pub sup: Supervision,
    pub arm: kinematics::PlanarRP,
    /// Rotation of {C} in the plane.
    rc: Matrix2<f64>,
    start: Option<(f64, Vector2<f64>)>,
    next_tick_s: f64,
    last_law_s: Option<f64>,
    effort: [f64; 2],
    max_effort: [f64; 2],
    done: bool,
    contact_s: Option<f64>,
}

impl PlantRun {
    pub fn new(
        task: HybridTask,
        gains: HybridGains,
        limits: HybridLimits,
        max_effort: [f64; 2],
    ) -> Result<Self, TaskError> {
        check_task(&task)?;
        if task.robot != TaskRobot::Plant {
            return Err(TaskError::Invalid("not a plant task".into()));
        }
        if task.frame_kind != FrameKind::Base {
            return Err(TaskError::Invalid(
                "plant tasks use a fixed frame (frame_kind base)".into(),
            ));
        }
        if task.force_axes[2..].iter().any(|s| *s) {
            return Err(TaskError::Invalid(
                "the plant is planar: only x and y of {C} may be force axes".into(),
            ));
        }
        if task.rate_hz.is_nan() || task.rate_hz <= 0.0 {
            return Err(TaskError::Invalid("plant tasks need rate_hz > 0".into()));
        }
        let yaw = task.frame.to_isometry().rotation.euler_angles().2;
        let rc = *Rotation2::new(yaw).matrix();
        // Force and position outputs are both hand forces here, bounded by the prismatic
        // joint's effort bound (the joint efforts are clamped again after Jᵀ).
        let mut lim = [max_effort[1]; 6];
        for v in lim.iter_mut().skip(2) {
            *v = 0.0;
        }
        let law = HybridLaw::new(task.force_axes, gains, Feedforward::Force, lim, false);
        Ok(Self {
            law,
            sup: Supervision::new(limits),
            arm: kinematics::PlanarRP::default(),
            rc,
            start: None,
            next_tick_s: 0.0,
            last_law_s: None,
            effort: [0.0; 2],
            max_effort,
            done: false,
            contact_s: None,
            task,
        })
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Whether the law runs for a state at plant time `t_s` (the law's own rate, on plant
    /// time: a 60 Hz task steps every 16.7 ms of plant time).
    pub fn due(&self, t_s: f64) -> bool {
        self.start.is_none() || t_s + 1e-9 >= self.next_tick_s
    }

    /// One law step: the joint efforts to hold until the next step, and the report.
    pub fn step(&mut self, i: &PlantInput) -> Result<([f64; 2], StepReport), Abort> {
        if !(i
            .q
            .iter()
            .chain(&i.qd)
            .chain(&i.wrist_force_n)
            .all(|v| v.is_finite())
            && i.t_s.is_finite())
        {
            return Err(Abort::protective(
                ProtectiveCause::NonFinite,
                "non-finite plant state",
            ));
        }
        let p = self
            .arm
            .fk(&i.q)
            .map_err(|e| Abort::controlled(format!("plant kinematics: {e}")))?;
        let j = self
            .arm
            .jacobian(&i.q)
            .map_err(|e| Abort::controlled(format!("plant kinematics: {e}")))?;
        let (t0, p0) = *self.start.get_or_insert((i.t_s, p));
        let period = 1.0 / self.task.rate_hz;
        let dt = self
            .last_law_s
            .map_or(0.0, |l| (i.t_s - l).clamp(0.0, 4.0 * period));
        self.last_law_s = Some(i.t_s);
        // Next tick on the law's grid from the start (no drift).
        let n = ((i.t_s - t0) / period).floor() + 1.0;
        self.next_tick_s = t0 + n * period;
        let t = i.t_s - t0;
        let sel = self.task.force_axes;
        let rt = self.rc.transpose();
        let v = j * Vector2::from(i.qd);
        let x_c = rt * (p - p0);
        let v_c = rt * v;
        let f_c = rt * Vector2::from(i.wrist_force_n);
        let tr = ref_time(&self.task, t, self.contact_s);
        let r: [f64; 6] = std::array::from_fn(|k| profile_value(&self.task.reference[k], tr));
        let rd: [f64; 6] = std::array::from_fn(|k| {
            if self.task.from_contact && self.contact_s.is_none() {
                0.0
            } else {
                profile_rate(&self.task.reference[k], tr)
            }
        });
        let mut inp = LawInput {
            v_meas: Some([v_c.x, v_c.y, 0.0, 0.0, 0.0, 0.0]),
            f_meas: [f_c.x, f_c.y, 0.0, 0.0, 0.0, 0.0],
            ..Default::default()
        };
        let mut position_ref = [0.0; 6];
        for k in 0..2 {
            if sel[k] {
                inp.f_ref[k] = r[k];
                inp.f_ref_rate[k] = rd[k];
            } else {
                position_ref[k] = r[k];
                inp.e_pos[k] = r[k] - x_c[k];
                inp.v_ref[k] = rd[k];
            }
        }
        let l = self.sup.limits;
        for k in 0..2 {
            if !sel[k] && inp.e_pos[k].abs() > l.deviation_m {
                return Err(Abort::protective(
                    ProtectiveCause::Deviation,
                    format!(
                        "deviation on {} {:.4} > limit {}",
                        AXES[k], inp.e_pos[k], l.deviation_m
                    ),
                ));
            }
        }
        let lost = self
            .sup
            .update(t, &inp.f_meas, &inp.f_ref, &sel, f_c.norm(), 0.0)?;
        if lost {
            self.law.reset_force_integral();
        }
        if self.sup.in_contact() && self.contact_s.is_none() {
            self.contact_s = Some(t);
        }
        // Torque-controlled: the force law itself approaches (F_d drives the joints, the
        // integral breaks the static friction loose), so it integrates with or without
        // contact. The speed limit brakes a force axis that moves towards the surface faster
        // than allowed while there is no contact.
        let mut u = self.law.step(&inp, dt, true);
        if !self.sup.in_contact() {
            for k in 0..2 {
                let v = inp.v_meas.map_or(0.0, |v| v[k]);
                let dir = if inp.f_ref[k] < 0.0 { -1.0 } else { 1.0 };
                if sel[k] && dir * v > l.force_axis_speed_m_s {
                    let kd = if self.law.gains.kd_f[k] > 0.0 {
                        self.law.gains.kd_f[k]
                    } else {
                        100.0
                    };
                    u[k] = (kd * (dir * l.force_axis_speed_m_s - v))
                        .clamp(-self.law.out_limit[k], self.law.out_limit[k]);
                }
            }
        }
        if ref_time(&self.task, t, self.contact_s) >= self.task.duration_s {
            self.done = true;
        }
        let f_base = self.rc * Vector2::new(u[0], u[1]);
        let tau = j.transpose() * f_base;
        let effort = [
            tau.x.clamp(-self.max_effort[0], self.max_effort[0]),
            tau.y.clamp(-self.max_effort[1], self.max_effort[1]),
        ];
        self.effort = if effort.iter().all(|v| v.is_finite()) {
            effort
        } else {
            [0.0; 2]
        };
        let yaw = self.rc[(1, 0)].atan2(self.rc[(0, 0)]);
        let frame = Isometry3::from_parts(
            Translation3::from(Vector3::new(p0.x, p0.y, 0.0)),
            UnitQuaternion::from_euler_angles(0.0, 0.0, yaw),
        );
        Ok((
            self.effort,
            StepReport {
                t_s: t,
                clock_s: i.t_s,
                phase: if self.done {
                    HybridPhase::Done
                } else {
                    self.sup.phase
                },
                force_ref: inp.f_ref,
                force: inp.f_meas,
                position_ref,
                position: [x_c.x, x_c.y, 0.0, 0.0, 0.0, 0.0],
                output: u,
                limited: self.law.limited(),
                bridged: false,
                seating: false,
                frame_in_base: common::msg::Pose::from_isometry(&frame),
                gains_for_n_per_m: [0.0; 3],
                stiffness_estimate_n_per_m: [0.0; 3],
                ref_time_s: tr,
                speed_scale: 1.0,
            },
        ))
    }
}
