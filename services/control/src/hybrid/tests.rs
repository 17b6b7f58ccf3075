//! Tests of the hybrid law, its supervision and both output stages.

use super::*;
use common::msg::{
    FrameKind, HybridLimits, HybridPhase, Profile, ProtectiveCause, StopCategory, TaskRobot,
    WrenchFault,
};
use nalgebra::{Isometry3, Translation3, UnitQuaternion};
use std::collections::VecDeque;

/// The seating's secant pairs the measured pose with a force that has no lag: the CI
/// failure of 2026-12-05 (10⁶ N/m, 11.0 N first contact, seated on a filtered 9.10 N
/// against a true 10.91 N) read 0.77·K from the filtered force alone.
#[test]
fn the_seating_secant_errs_stiff_when_the_filtered_force_lags() {
    let k = 1e6;
    let touch = (0.0, 1.0);
    // Seated 9.91 µm in: the true force 10.91 N, the filter still at 9.10 N.
    let x2 = 9.91e-6;
    let lagging = seat_secant(touch, (x2, 9.10, 10.91)).expect("a secant");
    assert!(lagging >= 0.99 * k, "{lagging:e}");
    // The peak errs high with the noise: the secant errs stiff.
    assert!(seat_secant(touch, (x2, 9.10, 11.2)).expect("a secant") > k);
    // Settled, both agree.
    let settled = seat_secant(touch, (x2, 10.91, 10.91)).expect("a secant");
    assert!((settled / k - 1.0).abs() < 1e-9, "{settled:e}");
    // Too little travel or rise: no secant.
    assert_eq!(seat_secant(touch, (0.5e-6, 10.0, 10.0)), None);
    assert_eq!(seat_secant(touch, (x2, 1.5, 1.5)), None);
}

fn gains(kp_f: f64, ki_f: f64, limit: f64) -> HybridGains {
    HybridGains {
        kp: [5.0; 6],
        ki: [0.0; 6],
        kd: [0.0; 6],
        kp_f: [kp_f; 6],
        ki_f: [ki_f; 6],
        kd_f: [0.0; 6],
        limit_n: [limit; 6],
        feedforward: 1.0,
        friction_n: [0.0; 6],
    }
}

#[test]
fn profiles_values_and_rates() {
    let step = Profile::Step {
        before: 1.0,
        after: 3.0,
        at_s: 2.0,
    };
    assert_eq!(profile_value(&step, 1.99), 1.0);
    assert_eq!(profile_value(&step, 2.0), 3.0);
    assert_eq!(profile_rate(&step, 2.0), 0.0);
    let ramp = Profile::Ramp {
        from: 0.0,
        to: 10.0,
        start_s: 1.0,
        duration_s: 2.0,
    };
    assert_eq!(profile_value(&ramp, 0.5), 0.0);
    assert_eq!(profile_value(&ramp, 2.0), 5.0);
    assert_eq!(profile_value(&ramp, 9.0), 10.0);
    assert_eq!(profile_rate(&ramp, 2.0), 5.0);
    assert_eq!(profile_rate(&ramp, 3.5), 0.0);
    // The paper's Fig. 9: c_y(t) = 30 − 30 cos(0.75 π t) cm.
    let sine = Profile::Sine {
        offset: 0.3,
        amplitude: -0.3,
        freq_hz: 0.375,
        phase_rad: std::f64::consts::FRAC_PI_2,
    };
    for t in [0.0, 0.3, 1.0, 2.2] {
        let want = 0.3 - 0.3 * (0.75 * std::f64::consts::PI * t).cos();
        assert!((profile_value(&sine, t) - want).abs() < 1e-12);
        let rate = 0.3 * 0.75 * std::f64::consts::PI * (0.75 * std::f64::consts::PI * t).sin();
        assert!((profile_rate(&sine, t) - rate).abs() < 1e-9);
    }
    let series = Profile::Series(vec![[0.0, 0.0], [1.0, 2.0], [3.0, 0.0]]);
    assert_eq!(profile_value(&series, -1.0), 0.0);
    assert_eq!(profile_value(&series, 0.5), 1.0);
    assert_eq!(profile_value(&series, 2.0), 1.0);
    assert_eq!(profile_value(&series, 5.0), 0.0);
    assert_eq!(profile_rate(&series, 2.0), -1.0);
}

#[test]
fn selection_keeps_the_two_laws_apart() {
    let sel = [true, false, false, false, false, false];
    let mut law = HybridLaw::new(
        sel,
        gains(0.01, 0.0, 5.0),
        Feedforward::Force,
        [1e3; 6],
        true,
    );
    let i = LawInput {
        e_pos: [7.0, 0.1, 0.0, 0.0, 0.0, 0.0],
        f_ref: [2.0, 9.0, 0.0, 0.0, 0.0, 0.0],
        f_meas: [1.0, -4.0, 0.0, 0.0, 0.0, 0.0],
        ..Default::default()
    };
    let u = law.step(&i, 0.01, true);
    // x: force law only (ff 2 + 0.01·1), position error on x ignored.
    assert!((u[0] - (2.0 + 0.01)).abs() < 1e-12, "{u:?}");
    // y: position law only (5·0.1), force error on y ignored.
    assert!((u[1] - 0.5).abs() < 1e-12, "{u:?}");
    assert_eq!(&u[2..], &[0.0; 4]);
}

#[test]
fn the_limiter_bounds_the_integration_rate_of_large_errors() {
    let sel = [true; 6];
    let mut law = HybridLaw::new(
        sel,
        gains(0.0, 1.0, 2.0),
        Feedforward::Force,
        [1e3; 6],
        true,
    );
    law.gains.feedforward = 0.0;
    let big = LawInput {
        f_ref: [10.0; 6],
        ..Default::default()
    };
    let mut u = [0.0; 6];
    for _ in 0..100 {
        u = law.step(&big, 0.01, true);
    }
    // 1 s of a 10 N error integrates only the limiter's 2 N·s.
    assert!((u[0] - 2.0).abs() < 1e-9, "{u:?}");
    assert_eq!(law.limited(), 0b11_1111);
    let small = LawInput {
        f_ref: [1.0; 6],
        ..Default::default()
    };
    let before = law.step(&small, 0.0, true)[0];
    let after = law.step(&small, 0.5, true)[0];
    assert!(
        (after - before - 0.5).abs() < 1e-9,
        "small errors integrate fully"
    );
    assert_eq!(law.limited(), 0);
    // Frozen (no contact): no integration at all.
    let frozen = law.step(&big, 1.0, false)[0];
    assert!((frozen - after).abs() < 1e-9);
}

#[test]
fn anti_windup_stops_the_integral_at_the_output_bound() {
    let sel = [true; 6];
    let mut law = HybridLaw::new(
        sel,
        gains(0.0, 1.0, 100.0),
        Feedforward::Force,
        [1.0; 6],
        true,
    );
    law.gains.feedforward = 0.0;
    let big = LawInput {
        f_ref: [10.0; 6],
        ..Default::default()
    };
    for _ in 0..100 {
        let u = law.step(&big, 0.1, true);
        assert!(u[0] <= 1.0);
    }
    // Reversing the error leaves the bound at once (no wound-up integral).
    let rev = LawInput {
        f_ref: [-10.0; 6],
        ..Default::default()
    };
    let u = law.step(&rev, 0.1, true);
    assert!(u[0] < 1.0, "{u:?}");
}

#[test]
fn feedforward_on_each_stage() {
    let sel = [true, false, false, false, false, false];
    let mut f = HybridLaw::new(
        sel,
        gains(0.0, 0.0, 1.0),
        Feedforward::Force,
        [1e3; 6],
        true,
    );
    let i = LawInput {
        f_ref: [4.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        f_ref_rate: [2.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        f_meas: [4.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        v_ref: [0.0, 0.3, 0.0, 0.0, 0.0, 0.0],
        ..Default::default()
    };
    assert_eq!(f.step(&i, 0.01, true)[0], 4.0, "force stage drives F_d");
    let mut v = HybridLaw::new(
        sel,
        gains(0.0, 0.0, 1.0),
        Feedforward::RateOverStiffness([1e3; 6]),
        [1e3; 6],
        true,
    );
    let u = v.step(&i, 0.01, true);
    assert!((u[0] - 2e-3).abs() < 1e-15, "velocity stage: Ḟ_d / K_e");
    assert!((u[1] - 0.3).abs() < 1e-15, "reference velocity feedforward");
}

#[test]
fn wrench_transform_into_a_rotated_offset_frame() {
    // {C}: z down (rotated π about x), origin 0.1 m beside the TCP.
    let frame = Isometry3::from_parts(
        Translation3::new(0.5, 0.1, 0.2),
        UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
    );
    let tcp = Isometry3::translation(0.5, 0.0, 0.2);
    // The table pushes the tool up with 10 N.
    let w = ArmRun::applied_in_frame(
        &frame,
        &tcp,
        &Vector3::new(0.0, 0.0, 10.0),
        &Vector3::zeros(),
    );
    // Applied by the tool: 10 N down = +z of {C}.
    assert!((w[2] - 10.0).abs() < 1e-12, "{w:?}");
    // Moment about {C}'s origin of −10 N z applied at (0, −0.1, 0) from it: r × F =
    // (−0.1 y) × (−10 z) = +1 x in base; in {C} (x kept) = +1.
    assert!((w[3] - 1.0).abs() < 1e-12, "{w:?}");
    assert!(w[4].abs() < 1e-12 && w[5].abs() < 1e-12);
}

/// A position-controlled robot (delay + first-order lag per Cartesian axis, ≈ 30 ms) with
/// the TCP above a plane z = 0 of stiffness `k`: returns the traces of a task.
struct Cell {
    k: f64,
    delay: VecDeque<Vector3<f64>>,
    pos: Vector3<f64>,
    tau: f64,
    normal: Vector3<f64>,
    surface_z: f64,
    /// The surface ends here along x (a table's edge): beyond it, no contact.
    edge_x: f64,
    /// The stiffness the task's gains are made for (the config's, not identified).
    gain_k: f64,
    /// The estimate control regulates on is low-passed like the force service's 12 Hz
    /// filter (two first-order stages, ≈ 26 ms of lag), the peak stays unfiltered.
    filtered: bool,
    lp: [Vector3<f64>; 2],
    /// The task's gains follow an on-line stiffness estimate ([`ArmRun::with_adaptation`]).
    adapt: bool,
    /// A stiffness that changes along x (from, to, stiffness from `to` on): the
    /// compliance linear in between, the height unchanged (the simulator's `grade`).
    grade: Option<(f64, f64, f64)>,
    /// Every command sent (base, m) with whether the law was seating (or approaching).
    cmds: Vec<(Vector3<f64>, bool)>,
    /// A steady force on the tool across the pressing axis (base, N): a wall.
    wall: Vector3<f64>,
    /// Speed adaptation's force bound (N; 0: off).
    slowdown_n: f64,
    max_lag_s: f64,
    /// What the force service's fast oscillation watch reports (N peak to peak).
    fast_swing_n: f64,
}

impl Cell {
    fn new(k: f64, z0: f64) -> Self {
        Self {
            k,
            delay: VecDeque::from(vec![Vector3::new(0.4, 0.0, z0); 3]),
            pos: Vector3::new(0.4, 0.0, z0),
            tau: 0.016,
            normal: Vector3::z(),
            surface_z: 0.0,
            edge_x: f64::INFINITY,
            gain_k: k,
            filtered: false,
            lp: [Vector3::zeros(); 2],
            adapt: false,
            grade: None,
            cmds: Vec::new(),
            wall: Vector3::zeros(),
            slowdown_n: 0.0,
            max_lag_s: DEFAULT_MAX_REFERENCE_LAG_S,
            fast_swing_n: 0.0,
        }
    }
    /// The surface's stiffness under the tool.
    fn k_here(&self) -> f64 {
        match self.grade {
            Some((a, b, k1)) => {
                let w = ((self.pos.x - a) / (b - a)).clamp(0.0, 1.0);
                1.0 / ((1.0 - w) / self.k + w / k1)
            }
            None => self.k,
        }
    }
    fn step(&mut self, cmd: Vector3<f64>, dt: f64) {
        self.delay.push_back(cmd);
        let c = self.delay.pop_front().unwrap_or(cmd);
        self.pos += (c - self.pos) * (dt / self.tau).min(1.0);
        // The estimate's filter, sub-stepped at 1 kHz like the samples.
        let tau = 1.0 / (2.0 * std::f64::consts::PI * 12.0);
        let f = self.force();
        let n = (dt / 0.001).round().max(1.0) as usize;
        for _ in 0..n {
            let a = (dt / n as f64) / tau;
            self.lp[0] += (f - self.lp[0]) * a;
            self.lp[1] += (self.lp[0] - self.lp[1]) * a;
        }
    }
    /// The wrench estimate control sees (base axes).
    fn estimate(&self) -> Vector3<f64> {
        if self.filtered {
            self.lp[1]
        } else {
            self.force()
        }
    }
    /// The unfiltered peak the force service would report (this model's force is
    /// unfiltered already).
    fn peak(&self) -> WrenchPeak {
        WrenchPeak {
            force_n: self.force().norm(),
            torque_nm: 0.0,
            bridged: false,
            fast_swing_n: self.fast_swing_n,
        }
    }
    /// Contact force on the tool (base axes).
    fn force(&self) -> Vector3<f64> {
        let d = -(self.pos - Vector3::new(0.0, 0.0, self.surface_z)).dot(&self.normal);
        let surface = if d > 0.0 && self.pos.x <= self.edge_x {
            self.normal * (self.k_here() * d)
        } else {
            Vector3::zeros()
        };
        surface + self.wall
    }
}

fn press_task(f: f64, duration: f64) -> HybridTask {
    let mut reference: [Profile; 6] = Default::default();
    reference[2] = Profile::Constant(f);
    HybridTask {
        name: "press".into(),
        robot: TaskRobot::Arm,
        frame_kind: FrameKind::Base,
        frame: Pose::from_isometry(&Isometry3::from_parts(
            Translation3::new(0.0, 0.0, 0.0),
            UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
        )),
        force_axes: [false, false, true, false, false, false],
        reference,
        duration_s: duration,
        ..Default::default()
    }
}

/// [`press_task`] at 10 N for `duration` with x ramping 0 → 100 mm over `ramp_s` from 3 s:
/// a press that slides (off a table's edge when the cell has one).
fn press_with_x_ramp(duration: f64, ramp_s: f64) -> HybridTask {
    let mut task = press_task(10.0, duration);
    task.reference[0] = Profile::Ramp {
        from: 0.0,
        to: 0.1,
        start_s: 3.0,
        duration_s: ramp_s,
    };
    task
}

fn run_arm(
    task: HybridTask,
    cell: &mut Cell,
    limits: HybridLimits,
    seconds: f64,
    each: impl FnMut(f64, &StepReport, &mut Cell),
) -> Result<(), Abort> {
    run_arm_with(task, cell, limits, seconds, true, each)
}

fn run_arm_with(
    task: HybridTask,
    cell: &mut Cell,
    limits: HybridLimits,
    seconds: f64,
    depth_raise: bool,
    each: impl FnMut(f64, &StepReport, &mut Cell),
) -> Result<(), Abort> {
    run_arm_full(
        task,
        cell,
        limits,
        seconds,
        depth_raise,
        FORCE_PREFILTER_S,
        each,
    )
}

fn run_arm_full(
    task: HybridTask,
    cell: &mut Cell,
    limits: HybridLimits,
    seconds: f64,
    depth_raise: bool,
    prefilter_s: f64,
    mut each: impl FnMut(f64, &StepReport, &mut Cell),
) -> Result<(), Abort> {
    let k = cell.gain_k;
    let g = default_arm_gains([k; 3], [50.0; 3], 0.03);
    let tcp = |p: Vector3<f64>| {
        Isometry3::from_parts(
            Translation3::from(p),
            UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
        )
    };
    let mut run = ArmRun::new(
        task,
        g,
        limits,
        [k, k, k, 50.0, 50.0, 50.0],
        DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
        0.03,
        &tcp(cell.pos),
    )
    .expect("task");
    if cell.adapt {
        run = run.with_adaptation(crate::stiffness::StiffnessParams::default(), 2e3);
        if let Some(a) = run.adapt.as_mut() {
            a.depth_raise = depth_raise;
        }
    }
    run.prefilter_s = prefilter_s;
    run = run
        .with_speed_adaptation(cell.slowdown_n)
        .with_max_lag(cell.max_lag_s);
    let dt = 0.004;
    let mut t = 0.0;
    while t < seconds {
        let input = ArmInput {
            peak: cell.peak(),
            tcp: &tcp(cell.pos),
            wrench_base: Ok((cell.estimate(), Vector3::zeros())),
            now_s: t,
            cycle_period_s: None,
        };
        let (cmd, rep) = run.step(&input)?;
        assert!(cmd.translation.vector.iter().all(|v| v.is_finite()));
        cell.step(cmd.translation.vector, dt);
        cell.cmds.push((cmd.translation.vector, rep.seating));
        each(t, &rep, &mut *cell);
        t += dt;
    }
    Ok(())
}

/// Issue 19 item 10, on the pure core: a press at 10 N on 2·10⁴ N/m is ended in contact
/// by an operator's stop, a mode switch (a move), a non-protective fault (the wrench
/// goes stale) and a protective stop (a force over the limit). Before, each went idle at
/// once: robot-io held the measured joints and the force stayed at 10 N. Now the first
/// three come to rest within `[control.ending]`'s deceleration and unload the surface
/// (the force decays, never rises), then end the motion at robot-io (which starts the
/// move only then); the protective stop still ends at once.
#[test]
fn ends_in_contact_come_to_rest_unloading_and_a_protective_stop_is_immediate() {
    use crate::core::{ControlCore, HybridSetup};
    use crate::ending::EndParams;
    use common::msg::{
        CartesianTarget, Mode, MoveTarget, SafetyLevel, SafetyReason, SafetyState, WrenchFault,
    };
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum End {
        Operator,
        Switch,
        StaleWrench,
        Protective,
        /// An operator's stop, and 3 cycles into the ending an obstacle (60 N).
        ObstacleWhileEnding,
    }
    let ep = EndParams::default();
    for end in [
        End::Operator,
        End::Switch,
        End::StaleWrench,
        End::Protective,
        End::ObstacleWhileEnding,
    ] {
        let k = 2e4;
        let mut cell = Cell::new(k, 0.0005);
        let tcp = |p: Vector3<f64>| {
            Isometry3::from_parts(
                Translation3::from(p),
                UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
            )
        };
        let mut core = ControlCore::new(5);
        core.set_end_params(ep);
        let safety = |level, reason, motion_id| SafetyState {
            level,
            reason,
            robot_boot: 3,
            motion_id,
            ..Default::default()
        };
        core.on_safety(&safety(SafetyLevel::Hold, SafetyReason::NoCommandYet, 0));
        let setup = HybridSetup {
            gains: default_arm_gains([k; 3], [50.0; 3], 0.03),
            limits: default_limits(),
            stiffness: [k, k, k, 50.0, 50.0, 50.0],
            worst_case_n_per_m: 2e4,
            loop_delay_s: 0.03,
            adapt_softest_n_per_m: None,
            slowdown_error_n: 0.0,
            position_speed: (DEFAULT_POSITION_SPEED_M_S, DEFAULT_POSITION_SPEED_RAD_S),
            max_reference_lag_s: DEFAULT_MAX_REFERENCE_LAG_S,
        };
        core.request_hybrid(press_task(10.0, 60.0), setup, Some(WrenchFault::None))
            .unwrap_or_else(|e| panic!("{e}"));
        let first = core.motion_tag().unwrap_or_else(|| panic!("a motion"));
        core.on_safety(&safety(
            SafetyLevel::Active,
            SafetyReason::None,
            first.motion_id,
        ));
        let dt = 0.004;
        let mut t = 0.0;
        let mut cycle = 0u64;
        let mut at_end = None;
        let mut cmds: Vec<Vector3<f64>> = Vec::new();
        let mut forces = Vec::new();
        let mut ended = None;
        let mut next_started = None;
        let mut reserved = None;
        while t < 12.0 {
            cycle += 1;
            core.set_cycle(cycle, dt);
            let mut peak = cell.peak();
            let obstacle = match end {
                End::Protective => at_end.is_some(),
                End::ObstacleWhileEnding => at_end.is_some_and(|i| cmds.len() >= i + 3),
                _ => false,
            };
            if obstacle {
                // The obstacle's 60 N stays on the sensor.
                peak.force_n = 60.0;
            }
            core.set_wrench_peak(peak);
            let stale = end == End::StaleWrench && at_end.is_some();
            let w = if stale {
                Err(crate::core::WrenchUnusable::Stale { age_ms: 51.0 })
            } else {
                Ok((cell.estimate(), Vector3::zeros()))
            };
            if at_end.is_none() && t >= 6.0 {
                at_end = Some(cmds.len());
                assert!((cell.force().z - 10.0).abs() < 0.5, "{:?}", cell.force());
                match end {
                    End::Operator | End::ObstacleWhileEnding => {
                        core.request_mode(Mode::Idle).map_err(|e| e.to_string())
                    }
                    End::Switch => core
                        .request_move(MoveTarget {
                            tcp_in_base: Pose::from_isometry(&tcp(
                                cell.pos + Vector3::new(0.0, 0.0, 0.05)
                            )),
                            max_speed_m_s: 0.05,
                            max_rot_speed_rad_s: 0.5,
                            ..Default::default()
                        })
                        .map_err(|e| e.to_string()),
                    _ => Ok(()),
                }
                .unwrap_or_else(|e| panic!("{e}"));
                reserved = core.requested_motion_tag();
            }
            let out = core.step_with_wrench(&tcp(cell.pos), t, &w);
            if let Some((m, stop)) = core.take_ended_motion() {
                assert_eq!(m, first, "{end:?}");
                // Only the force limit's end holds where the arm is (issue 41 item 3:
                // the category is a type, not the message's first words).
                assert_eq!(
                    stop,
                    if matches!(end, End::Protective | End::ObstacleWhileEnding) {
                        StopCategory::Protective(ProtectiveCause::ForceLimit)
                    } else {
                        StopCategory::Controlled
                    },
                    "{end:?}"
                );
                ended.get_or_insert(cmds.len());
            }
            if let Some(m) = core.motion_tag().filter(|m| *m != first) {
                // The move runs under the tag its request's reply named.
                assert_eq!(Some(m), reserved, "{end:?}");
                next_started.get_or_insert(cmds.len());
                core.on_safety(&safety(
                    SafetyLevel::Active,
                    SafetyReason::None,
                    m.motion_id,
                ));
            }
            match out {
                Some(CartesianTarget::Pose(p)) => {
                    let c = p.to_isometry().translation.vector;
                    cell.step(c, dt);
                    cmds.push(c);
                }
                _ => {
                    // Idle: robot-io holds where the reference was.
                    let c = *cmds.last().unwrap_or(&cell.pos);
                    cell.step(c, dt);
                    cmds.push(c);
                }
            }
            forces.push(cell.force().z);
            t += dt;
            if ended.is_some() && (end != End::Switch || cmds.len() > ended.unwrap_or(0) + 50) {
                break;
            }
        }
        let i0 = at_end.unwrap_or_else(|| panic!("{end:?}: never ended"));
        let i1 = ended.unwrap_or_else(|| panic!("{end:?}: the motion never ended"));
        let f0 = forces[i0];
        let f_max = forces[i0..].iter().fold(0.0f64, |a, b| a.max(*b));
        let f_end = forces[i1];
        // Accelerations of the command from the end on (both the deceleration and the
        // unloading may act along z: ≤ 2 × max_accel).
        let mut a_max: f64 = 0.0;
        for i in (i0 + 2)..=i1 {
            let v1 = (cmds[i] - cmds[i - 1]) / dt;
            let v0 = (cmds[i - 1] - cmds[i - 2]) / dt;
            a_max = a_max.max((v1 - v0).norm() / dt);
        }
        eprintln!(
            "{end:?}: {f0:.2} N at the end, peak after {f_max:.2} N, {f_end:.2} N when the \
             motion ended {:.0} ms later; command acceleration ≤ {a_max:.2} m/s²",
            (i1 - i0) as f64 * dt * 1e3
        );
        assert!(f_max <= f0 + 0.3, "{end:?}: the force rose to {f_max}");
        match end {
            End::ObstacleWhileEnding => {
                // Issue 41 item 4: the limits hold while coming to rest.
                assert!(
                    (3..=4).contains(&(i1 - i0)),
                    "{end:?}: stopped {} cycles after the stop, the obstacle at 3",
                    i1 - i0
                );
                assert!(core
                    .stop_reason()
                    .is_some_and(|r| r.contains("while coming to rest: contact force")));
            }
            End::Protective => {
                assert!(
                    i1 - i0 <= 1,
                    "{end:?}: a protective stop is at once ({})",
                    i1 - i0
                );
                assert!(core
                    .stop_reason()
                    .is_some_and(|r| r.contains("contact force")));
            }
            _ => {
                assert!(i1 - i0 > 1, "{end:?}: came to rest first");
                assert!(a_max <= 2.0 * ep.max_accel_m_s2 * 1.01, "{end:?}: {a_max}");
                assert!(f_end < ep.release_force_n + 0.3, "{end:?}: still {f_end} N");
                assert!(
                    (i1 - i0) as f64 * dt <= ep.timeout_s,
                    "{end:?}: {} s",
                    (i1 - i0) as f64 * dt
                );
            }
        }
        if end == End::Switch {
            let n = next_started.unwrap_or_else(|| panic!("the move never started"));
            assert!(n >= i1, "the move started before the press came to rest");
            assert_eq!(core.mode(), Mode::Move);
        }
        if end == End::StaleWrench {
            assert!(core.stop_reason().is_some_and(|r| r.contains("Stale")));
        }
    }
}

#[test]
fn arm_approaches_at_the_speed_limit_then_holds_the_force_on_every_stiffness() {
    for k in [2e4, 1e5, 1e6] {
        let mut cell = Cell::new(k, 0.002);
        let limits = default_limits();
        let mut peak: f64 = 0.0;
        let mut last = 0.0;
        let mut max_speed: f64 = 0.0;
        let mut prev_z = cell.pos.z;
        run_arm(
            press_task(10.0, 30.0),
            &mut cell,
            limits,
            25.0,
            |t, rep, c| {
                peak = peak.max(c.force().z);
                if rep.phase == HybridPhase::Approach {
                    max_speed = max_speed.max((prev_z - c.pos.z) / 0.004);
                }
                prev_z = c.pos.z;
                if t > 24.0 {
                    last = c.force().z;
                }
            },
        )
        .expect("no abort");
        assert!(
            max_speed <= limits.force_axis_speed_m_s * 1.05,
            "approach speed {max_speed}"
        );
        assert!((last - 10.0).abs() < 0.2, "k {k}: force {last}");
        eprintln!("k {k:e}: first-contact peak {peak:.1} N");
        assert!(peak <= 15.0, "k {k}: peak {peak} > 1.5 × the setpoint");
    }
}

/// Issue (force modes inside their bounds, item 3): the approach trusted the configured
/// stiffness. With gains (and so an approach speed) for 2·10⁴ N/m, a 10⁶ N/m surface was
/// met at the 5 mm/s limit and the true first-contact force peaked at 128 N against the
/// 50 N limit. Now the first-contact peak stays ≤ `max_force_n` on any surface up to the
/// cell's declared worst-case stiffness whatever the gains were made for, and ≤ 1.5 × the
/// setpoint when they were made for the surface (identified).
#[test]
fn the_first_contact_peak_is_bounded_up_to_the_worst_case_stiffness() {
    let limits = default_limits();
    for (surface, gains_for) in [
        (2e4, 2e4),
        (1e5, 1e5),
        (1e6, 1e6),
        (1e5, 2e4),
        (1e6, 2e4),
        (1e6, 1e5),
    ] {
        let mut cell = Cell::new(surface, 0.0005);
        cell.gain_k = gains_for;
        // As on the cell: the law sees the 12 Hz estimate, the limits the unfiltered peak.
        cell.filtered = true;
        // The largest force within 0.5 s of the first touch.
        let mut first: f64 = 0.0;
        let mut touched: Option<f64> = None;
        let r = run_arm(press_task(10.0, 8.0), &mut cell, limits, 8.0, |t, _, c| {
            let f = c.force().z;
            if f > 0.0 && touched.is_none() {
                touched = Some(t);
            }
            if touched.is_some_and(|t0| t - t0 <= 0.5) {
                first = first.max(f);
            }
        });
        eprintln!(
            "surface {surface:e} N/m, gains for {gains_for:e}: touched at {touched:?} s, \
             first-contact peak {first:.1} N ({})",
            r.as_ref()
                .map_or_else(|e| e.why.clone(), |_| "completed".into())
        );
        assert!(touched.is_some(), "no contact");
        assert!(
            first <= limits.max_force_n,
            "surface {surface:e}, gains for {gains_for:e}: peak {first:.1} N"
        );
        if surface == gains_for {
            assert!(r.is_ok(), "{r:?}");
            assert!(
                first <= 15.0,
                "identified {surface:e}: peak {first:.1} N > 1.5 × 10 N"
            );
        }
    }
}

/// Issue 21: the seating's stop pulled the command back to the measured pose in one cycle
/// (the tracking lag v·T as one step), which asked the joints for more acceleration than
/// robot-io allows: the only limited replies of a whole demo without faults. Now the
/// command's acceleration while approaching and seating stays within
/// [`SEATING_STOP_ACCEL_M_S2`], and the first contact stays bounded as before.
#[test]
fn the_seating_stop_keeps_the_command_within_its_acceleration_bound() {
    let limits = default_limits();
    let dt = 0.004;
    for (surface, gains_for, adapt) in [
        (2e4, 2e4, false),
        (1e5, 1e5, false),
        (1e6, 1e6, false),
        (2e4, 2e4, true),
        (1e5, 2e4, true),
        (1e6, 2e4, true),
    ] {
        let mut cell = Cell::new(surface, 0.0005);
        cell.gain_k = gains_for;
        cell.filtered = true;
        cell.adapt = adapt;
        let mut first: f64 = 0.0;
        let r = run_arm(press_task(10.0, 6.0), &mut cell, limits, 6.0, |_, _, c| {
            first = first.max(c.force().z);
        });
        assert!(r.is_ok(), "{r:?}");
        let mut worst: f64 = 0.0;
        for w in cell.cmds.windows(3) {
            if w.iter().all(|(_, seating)| *seating) {
                let a = (w[2].0 - 2.0 * w[1].0 + w[0].0).norm() / (dt * dt);
                worst = worst.max(a);
            }
        }
        eprintln!(
            "surface {surface:e} N/m, gains for {gains_for:e}, adapt {adapt}: command \
             acceleration while seating ≤ {worst:.3} m/s², first-contact peak {first:.1} N"
        );
        assert!(
            worst <= SEATING_STOP_ACCEL_M_S2 * (1.0 + 1e-6),
            "surface {surface:e}: {worst} m/s²"
        );
        assert!(
            (5.0..=15.0).contains(&first),
            "surface {surface:e}: peak {first:.1} N"
        );
    }
}

/// The blended profile follows a ramp and a series exactly on their straight stretches
/// (`b/2` late), turns their corners at the acceleration bound, is continuous with a
/// continuous rate, and arrives where the profile does.
#[test]
fn blended_references_turn_their_corners_within_the_acceleration_bound() {
    let a = 1.0;
    let profiles = [
        Profile::Ramp {
            from: 0.0,
            to: 0.1,
            start_s: 0.0,
            duration_s: 5.0,
        },
        Profile::Ramp {
            from: 0.02,
            to: -0.03,
            start_s: 1.0,
            duration_s: 0.5,
        },
        Profile::Series(vec![[0.0, 0.0], [1.0, 0.05], [1.5, 0.05], [2.0, 0.0]]),
    ];
    for p in &profiles {
        let dv = profile_corner_rate_change(p);
        let b = dv / a;
        let dt = 0.001;
        let (mut prev, mut prev_rate) = profile_blended(p, -0.5, a);
        let mut worst: f64 = 0.0;
        let mut t = -0.5 + dt;
        while t < 8.0 {
            let (v, rate) = profile_blended(p, t, a);
            // Its rate is the derivative of its value.
            let num = (v - prev) / dt;
            assert!(
                (num - rate).abs() <= a * dt + 1e-9,
                "{p:?} at {t}: {num} vs {rate}"
            );
            worst = worst.max((rate - prev_rate).abs() / dt);
            // On a straight stretch, the profile b/2 late.
            let straight = (0..20).all(|j| {
                let s = t - b * j as f64 / 19.0;
                (profile_rate(p, s) - profile_rate(p, t - b / 2.0)).abs() < 1e-12
            });
            if straight {
                assert!(
                    (v - profile_value(p, t - b / 2.0)).abs() < 1e-9,
                    "{p:?} at {t}"
                );
            }
            (prev, prev_rate) = (v, rate);
            t += dt;
        }
        assert!(worst <= a * 1.001, "{p:?}: {worst}");
        assert!((prev - profile_value(p, 8.0)).abs() < 1e-12, "{p:?}");
        assert_eq!(profile_blended(p, 3.0, 0.0).0, profile_value(p, 3.0));
    }
    // The antiderivative's differences are the profile's integrals.
    for p in &profiles {
        let (t0, t1) = (0.3, 1.7);
        let n = 20000;
        let h = (t1 - t0) / n as f64;
        let num: f64 = (0..n)
            .map(|i| profile_value(p, t0 + (i as f64 + 0.5) * h) * h)
            .sum();
        let exact = profile_integral(p, t1) - profile_integral(p, t0);
        assert!((num - exact).abs() < 1e-6, "{p:?}: {num} vs {exact}");
    }
}

#[test]
fn stop_velocity_lands_at_rest_within_its_bound() {
    let (a, dt) = (1.0, 0.004);
    for (e0, v0) in [
        (-1e-4, 0.005),
        (-2e-5, 0.0007),
        (3e-4, 0.0),
        (0.0, 0.01),
        (1e-3, -0.02),
    ] {
        let (mut x, mut v) = (0.0, v0);
        let mut settled = None;
        for n in 0..400 {
            let nv = stop_velocity(e0 - x, v, a, dt);
            assert!(
                (nv - v).abs() <= a * dt * (1.0 + 1e-9),
                "{e0} {v0}: step {n}"
            );
            v = nv;
            x += v * dt;
            if (x - e0).abs() < 1e-9 && v.abs() <= a * dt {
                settled.get_or_insert(n);
            }
        }
        assert!(settled.is_some(), "{e0} {v0}: at {x}, {v}");
        assert!(
            (x - e0).abs() < 1e-9 && v.abs() < 1e-9,
            "{e0} {v0}: at {x}, {v}"
        );
    }
}

/// Issue 20 (items 1, 2): gains made for 2·10⁴ N/m (the config default, not identified)
/// on surfaces up to 10⁶ N/m. Without adaptation the loop, 5× and 50× past its design
/// point, oscillates and the task is ended; with the on-line estimate the gains follow the
/// surface and the press holds its 10 N on every one.
#[test]
fn gains_follow_the_estimated_stiffness_on_a_surface_nobody_identified() {
    let limits = default_limits();
    for surface in [2e4, 1e5, 1e6] {
        for adapt in [false, true] {
            let mut cell = Cell::new(surface, 0.0005);
            cell.gain_k = 2e4;
            cell.filtered = true;
            cell.adapt = adapt;
            let mut touched: Option<f64> = None;
            let (mut first, mut sq, mut n, mut worst) = (0.0f64, 0.0, 0, 0.0f64);
            let mut last = StepReport::default();
            let r = run_arm(
                press_task(10.0, 6.0),
                &mut cell,
                limits,
                6.0,
                |t, rep, c| {
                    let f = c.force().z;
                    if f > 0.0 && touched.is_none() {
                        touched = Some(t);
                    }
                    if touched.is_some_and(|t0| t - t0 <= 0.5) {
                        first = first.max(f);
                    }
                    // The true force's error over the last 3 s.
                    if t >= 3.0 {
                        sq += (f - 10.0).powi(2);
                        n += 1;
                        worst = worst.max((f - 10.0).abs());
                    }
                    last = *rep;
                },
            );
            let rms = (sq / n.max(1) as f64).sqrt();
            eprintln!(
                "surface {surface:e}, adapt {adapt}: {} first peak {first:.1} N, RMS {rms:.3} \
                 N, max {worst:.2} N; gains for {:.3e}, estimate {:.3e}",
                r.as_ref()
                    .map_or_else(|e| e.why.clone(), |_| "completed,".into()),
                last.gains_for_n_per_m[2],
                last.stiffness_estimate_n_per_m[2]
            );
            if adapt {
                assert!(r.is_ok(), "surface {surface:e}: {r:?}");
                assert!(
                    rms <= 0.5 && worst <= 2.0,
                    "surface {surface:e}: {rms} {worst}"
                );
                let est = last.stiffness_estimate_n_per_m[2];
                assert!(
                    (est / surface - 1.0).abs() < 0.3,
                    "surface {surface:e}: {est:e}"
                );
                assert!(last.gains_for_n_per_m[2] >= 0.9 * surface);
            } else if surface >= 1e5 {
                // The failure this fixes (the test can fail).
                assert!(r.is_err(), "surface {surface:e} without adaptation: {r:?}");
            }
        }
    }
}

/// Issue 41 item 5: a bound per axis holds on the vector: a diagonal is no faster than an
/// axis; groups (force/position, translational/rotational) are bounded apart; a single
/// axis is left to its own bound.
#[test]
fn speed_bounds_hold_on_the_norm() {
    let axes = [false, false, true, false, false, false];
    let bound = [0.25, 0.25, 0.01, 1.0, 1.0, 1.0];
    let mut u = [0.25, 0.25, 0.01, 1.0, 1.0, 1.0];
    clamp_norms(&mut u, &axes, &bound);
    assert!(
        ((u[0] * u[0] + u[1] * u[1]).sqrt() - 0.25).abs() < 1e-12,
        "{u:?}"
    );
    assert!((u[0] - u[1]).abs() < 1e-15, "the direction is kept");
    assert_eq!(u[2], 0.01, "the force axis alone");
    let w = (u[3] * u[3] + u[4] * u[4] + u[5] * u[5]).sqrt();
    assert!((w - 1.0).abs() < 1e-12, "{u:?}");
    let mut slow = [0.1, 0.1, 0.0, 0.0, 0.0, 0.0];
    clamp_norms(&mut slow, &axes, &bound);
    assert_eq!(
        slow,
        [0.1, 0.1, 0.0, 0.0, 0.0, 0.0],
        "inside the bound: untouched"
    );
}

/// Issue 41: a press that slides off its part's edge near the end of its duration (the
/// search not yet past its travel bound) does not end `Done`: it fails, naming the lost
/// contact (before: `ContactLost` for the last seconds, then `Done`, and `cell hybrid`
/// exited 0 with the tool in the air). The same press ending on the table completes. (Only
/// a task timed from its contact: a peg's search step may end as the peg drops.)
#[test]
fn a_press_that_ends_off_its_part_fails_naming_the_lost_contact() {
    let limits = default_limits();
    let run = |edge_x: f64| {
        let mut cell = Cell::new(2e4, 0.0005);
        cell.edge_x = edge_x;
        let mut task = press_with_x_ramp(9.0, 5.0);
        task.from_contact = true;
        run_arm(task, &mut cell, limits, 40.0, |_, _, _| {})
    };
    let e = run(0.45).expect_err("off the edge");
    // The reference clock stops while the contact is lost, so the search for the surface
    // ends it (within its travel) before the task's duration can.
    assert!(e.why.contains("contact lost"), "{e}");
    assert!(!e.is_protective(), "{e}");
    run(1.0).expect("on the table to the end");
}

/// Issue 41 item 4: a completed task's position axes come to rest within the deceleration
/// bound. A press whose x follows a sine (±10 mm at 0.5 Hz, 31 mm/s at its fastest) ends
/// at the sine's fastest point: the command's x velocity falls by at most 1 m/s² × one
/// cycle a cycle, to rest (before: 31 mm/s to 0 in one cycle, 7.9 m/s²).
#[test]
fn a_completed_task_comes_to_rest_within_its_deceleration() {
    let mut cell = Cell::new(2e4, 0.0005);
    let mut task = press_task(10.0, 4.0);
    task.reference[0] = Profile::Sine {
        offset: 0.0,
        amplitude: 0.01,
        freq_hz: 0.5,
        phase_rad: 0.0,
    };
    let mut done_at: Option<usize> = None;
    // The sine starts at its full speed (a velocity step the model arm lags by 5.1 mm):
    // this test is about its end, so the deviation bound is widened.
    let limits = HybridLimits {
        deviation_m: 0.02,
        ..default_limits()
    };
    run_arm(task, &mut cell, limits, 4.5, |_, r, c| {
        if r.phase == HybridPhase::Done && done_at.is_none() {
            done_at = Some(c.cmds.len() - 1);
        }
    })
    .expect("the press completes");
    let from = done_at.expect("completed");
    let dt = 0.004;
    let vx: Vec<f64> = cell.cmds[from - 2..]
        .windows(2)
        .map(|w| (w[1].0.x - w[0].0.x) / dt)
        .collect();
    assert!(vx[0].abs() > 0.02, "not moving at the end: {:?}", &vx[..3]);
    let worst = vx
        .windows(2)
        .map(|w| (w[1] - w[0]).abs() / dt)
        .fold(0.0, f64::max);
    assert!(
        worst <= SEATING_STOP_ACCEL_M_S2 * (1.0 + 1e-6),
        "x decelerated at {worst:.2} m/s²"
    );
    assert!(vx.last().is_some_and(|v| v.abs() < 1e-12), "not at rest");
}

/// Issue 41: while a contact made is lost the reference clock stops: the position axes
/// wait where the surface was left instead of running on (a press that lost its contact ran
/// its x reference on to 49.7 mm with the arm still). Off a table's edge in the middle of
/// an x ramp: from the loss on, the x reference does not move; the task then ends by the
/// search's travel bound, naming the lost contact.
#[test]
fn the_reference_clock_stops_while_contact_is_lost() {
    let mut cell = Cell::new(2e4, 0.0005);
    cell.edge_x = 0.43;
    let task = press_with_x_ramp(60.0, 10.0);
    let mut at_loss: Option<(f64, f64)> = None;
    let mut moved_while_lost: f64 = 0.0;
    let mut lost_cycles = 0;
    let e = run_arm(task, &mut cell, default_limits(), 60.0, |_, r, _| {
        if r.phase == HybridPhase::ContactLost {
            lost_cycles += 1;
            let (x0, clock0) = *at_loss.get_or_insert((r.position_ref[0], r.ref_time_s));
            moved_while_lost = moved_while_lost.max((r.position_ref[0] - x0).abs());
            assert!(
                r.ref_time_s <= clock0 + 1e-9,
                "the reference clock ran on while lost: {} > {clock0}",
                r.ref_time_s
            );
        }
    })
    .expect_err("off the edge");
    assert!(lost_cycles > 10, "never lost: {e}");
    assert!(e.why.contains("contact lost and not found again"), "{e}");
    assert!(
        moved_while_lost < 1e-9,
        "x reference moved {moved_while_lost} m while the contact was lost"
    );
}

/// Issue 41: travel in contact is bounded. A surface that gives way under the press (it
/// moves away at 5 mm/s from 1 s after the first contact: the tool follows it, pressing
/// 10 N) ends the task at `contact_travel_m`, naming the axis; a force axis pushing into
/// nothing while another axis still touches (before, the search bounds ran only while no
/// axis touched: it drove on for the task's whole duration) ends the same way.
#[test]
fn travel_in_contact_is_bounded_on_every_force_axis() {
    let limits = default_limits();
    let dt = 0.004;
    // Surfaces softer and stiffer than the table the limits were written for, each giving
    // way at 5 mm/s.
    for k in [5e3, 2e4, 1e5, 1e6] {
        let mut cell = Cell::new(k, 0.0005);
        let mut contact_t: Option<f64> = None;
        let mut lowest: f64 = 0.0;
        let e = run_arm(
            press_task(10.0, 60.0),
            &mut cell,
            limits,
            60.0,
            |t, r, c| {
                if r.phase == HybridPhase::Contact && contact_t.is_none() {
                    contact_t = Some(t);
                }
                if contact_t.is_some_and(|t0| t > t0 + 1.0) {
                    c.surface_z -= 0.005 * dt;
                }
                lowest = lowest.min(c.pos.z);
            },
        )
        .expect_err("a surface that gives way");
        eprintln!("{k:e} N/m: {e}; lowest {:.2} mm", lowest * 1e3);
        // Followed in contact, the travel bound ends it; on the softest the loop loses the
        // receding surface (10 N of error drives the axis at about 5 mm/s there) and the
        // search's travel after the loss does.
        let in_contact = e.why.contains("limits.contact_travel_m") && e.why.contains("along z");
        assert!(
            in_contact || e.why.contains("limits.reapproach_travel_m"),
            "{k:e}: {e}"
        );
        assert!(!e.is_protective(), "{e}");
        // The tool sat 10 N / k in the surface at contact; it followed the surface no
        // further than the bound (+ the servo's lag).
        assert!(
            -lowest <= 10.0 / k + limits.contact_travel_m + 0.0005,
            "{k:e}: followed {:.2} mm",
            -lowest * 1e3
        );
    }
    // z presses the table, x pushes 5 N into nothing (no wall): z's contact is the task's.
    let mut cell = Cell::new(2e4, 0.0005);
    let mut task = press_task(10.0, 60.0);
    task.force_axes[0] = true;
    task.reference[0] = Profile::Constant(5.0);
    // (x moves at its approach speed before the contact too, bounded by the approach's
    // travel: the contact travel counts from the first contact.)
    let mut x_contact: Option<f64> = None;
    let mut furthest: f64 = 0.0;
    let e = run_arm(task, &mut cell, limits, 60.0, |_, r, c| {
        if r.phase == HybridPhase::Contact {
            let x0 = *x_contact.get_or_insert(c.pos.x);
            furthest = furthest.max(c.pos.x - x0);
        }
    })
    .expect_err("x drives into nothing");
    assert!(e.why.contains("along x"), "{e}");
    assert!(e.why.contains("limits.contact_travel_m"), "{e}");
    assert!(
        furthest <= limits.contact_travel_m + 0.0005,
        "x went {:.2} mm",
        furthest * 1e3
    );
}

/// Issue: bounded approach. The press slides off a table's edge: the force axis searches
/// for the surface again, but no further than `reapproach_travel_m`; with no surface at all
/// the approach ends after `approach_travel_m`. (Before, both drove on at approach speed
/// until the task's duration ended.)
#[test]
fn the_search_for_a_surface_is_bounded_in_travel() {
    let limits = default_limits();
    let mut cell = Cell::new(2e4, 0.0005);
    cell.edge_x = 0.45;
    let task = press_with_x_ramp(60.0, 5.0);
    let mut lowest: f64 = 0.0;
    let e = run_arm(task, &mut cell, limits, 60.0, |_, _, c| {
        lowest = lowest.min(c.pos.z)
    })
    .expect_err("off the edge");
    assert!(e.why.contains("contact lost and not found again"), "{e}");
    assert!(e.why.contains("reapproach_travel_m"), "{e}");
    // In contact the tool sat 0.5 mm in the table; from there it may search 5 mm further
    // (+ the servo's lag at the 5 mm/s approach speed).
    let drop = -lowest;
    eprintln!("lowest point below the table: {:.2} mm", drop * 1e3);
    assert!(
        drop <= 0.0005 + limits.reapproach_travel_m + 0.0005,
        "dropped {:.2} mm",
        drop * 1e3
    );
    // No surface at all: the approach ends after its travel.
    // (At the unknown surface's approach speed, 0.2 mm/s for 10 N, the timeout would end
    // it first: this search is given the time to reach its travel bound.)
    let mut void = Cell::new(2e4, 0.002);
    void.surface_z = -10.0;
    let mut travelled: f64 = 0.0;
    let mut slow = limits;
    slow.approach_timeout_s = 400.0;
    let e = run_arm(
        press_task(10.0, 400.0),
        &mut void,
        slow,
        400.0,
        |_, _, c| travelled = travelled.max(0.002 - c.pos.z),
    )
    .expect_err("no surface");
    assert!(e.why.contains("no contact within 50.0 mm"), "{e}");
    assert!(
        travelled <= limits.approach_travel_m + 0.0005,
        "{travelled}"
    );
}

/// The observer counts swings of the force error, not its size: a chatter is found within
/// 0.5 s, a step's overshoot and a first contact's ringing are not an oscillation.
#[test]
fn oscillation_watch_tells_a_chatter_from_a_transient() {
    let sel = [false, false, true, false, false, false];
    let f_ref = [0.0, 0.0, 10.0, 0.0, 0.0, 0.0];
    let dt = 0.004;
    // 0 ↔ 29 N every 0.2 s (the 10⁵ N/m table with gains for 2·10⁴ N/m).
    let mut w = OscillationWatch::default();
    let mut found = None;
    for i in 0..500 {
        let t = i as f64 * dt;
        let f = 14.5 - 14.5 * (2.0 * std::f64::consts::PI * 5.0 * t).cos();
        if w.step(t, &[0.0, 0.0, f, 0.0, 0.0, 0.0], &f_ref, &sel)
            .is_some()
        {
            found = Some(t);
            break;
        }
    }
    let t = found.expect("chatter found");
    assert!(t <= 0.5, "found after {t} s");
    // A first contact at 27.7 N, an undershoot to 4 N, settling at 10 N; and a 2 → 10 N
    // step with 19 % overshoot: no oscillation.
    for trace in [
        vec![1.0, 27.7, 4.0, 11.0, 10.0, 10.0],
        vec![2.0, 2.0, 11.9, 9.5, 10.1, 10.0],
    ] {
        let mut w = OscillationWatch::default();
        for (i, pair) in trace.windows(2).enumerate() {
            for j in 0..25 {
                let t = (i * 25 + j) as f64 * dt;
                let f = pair[0] + (pair[1] - pair[0]) * j as f64 / 25.0;
                assert!(
                    w.step(t, &[0.0, 0.0, f, 0.0, 0.0, 0.0], &f_ref, &sel)
                        .is_none(),
                    "{trace:?}: oscillation at {t} s"
                );
            }
        }
    }
}

/// Issue 41 item 8: a rotational force axis and a zero-reference force axis are watched
/// too — a torque chatter about x and a 6 N ↔ −6 N lateral chatter on a compliant axis
/// are found; a lateral force wandering within ±2 N is not.
#[test]
fn oscillation_watch_covers_rotational_and_zero_reference_axes() {
    let dt = 0.004;
    let chatter = |k: usize, amp: f64, f_ref: [f64; 6], sel: [bool; 6]| {
        let mut w = OscillationWatch::default();
        (0..500).find_map(|i| {
            let t = i as f64 * dt;
            let mut f = f_ref;
            f[k] += amp * (2.0 * std::f64::consts::PI * 5.0 * t).sin();
            w.step(t, &f, &f_ref, &sel).map(|(axis, _)| (axis, t))
        })
    };
    let torque = chatter(
        3,
        1.0,
        [0.0, 0.0, 10.0, 0.5, 0.0, 0.0],
        [false, false, true, true, false, false],
    );
    assert_eq!(torque.map(|(a, _)| a), Some(3), "{torque:?}");
    let sides = [true, true, true, false, false, false];
    let lateral = chatter(0, 6.0, [0.0, 0.0, 5.0, 0.0, 0.0, 0.0], sides);
    assert_eq!(lateral.map(|(a, _)| a), Some(0), "{lateral:?}");
    assert_eq!(chatter(1, 2.0, [0.0, 0.0, 5.0, 0.0, 0.0, 0.0], sides), None);
}

/// Issue: a force loop that oscillates is noticed. The 10 N press on a surface much stiffer
/// than the gains were made for (the configured 2·10⁴ N/m) ends with its reason instead of
/// bouncing to the task's end (before: it ran its whole duration). This model (no 12 Hz
/// estimate filter, a 28 ms lag) is still stable at 5× the stiffness, so it is pressed on
/// 50×; the 10⁵ N/m case of the issue runs through the processes (`tests/hybrid.rs`).
/// Issue 41 item 8: the fast band. A press in contact whose unfiltered force swings faster
/// than the 12 Hz estimate shows (the force service's `fast_swing_n`) ends naming it once
/// the swing reaches the band (10 N press: 2·max(2.5, 2) = 5 N peak to peak); below the
/// band, or before contact, it runs on. Without a translational force axis there is no band.
#[test]
fn a_fast_oscillation_of_the_unfiltered_force_ends_the_task() {
    let run = |swing: f64, from_s: f64| {
        let mut cell = Cell::new(2e4, 0.0005);
        run_arm(
            press_task(10.0, 3.0),
            &mut cell,
            default_limits(),
            3.5,
            |t, _, c| {
                if t >= from_s {
                    c.fast_swing_n = swing;
                }
            },
        )
    };
    let e = run(6.0, 2.0).expect_err("fast oscillation");
    assert!(e.why.contains("force oscillating fast"), "{e}");
    assert!(!e.is_protective(), "{e}");
    run(4.0, 2.0).expect("below the band");
    assert_eq!(
        fast_swing_band(
            &[0.0, 0.0, 10.0, 0.0, 0.0, 0.0],
            &[false, false, true, false, false, false]
        ),
        Some(5.0)
    );
    assert_eq!(
        fast_swing_band(
            &[0.0, 0.0, 40.0, 0.0, 0.0, 0.0],
            &[false, false, true, false, false, false]
        ),
        Some(20.0)
    );
    assert_eq!(
        fast_swing_band(&[0.0; 6], &[true, true, false, false, false, false]),
        Some(10.0)
    );
    assert_eq!(
        fast_swing_band(
            &[0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
            &[false, false, false, false, false, true]
        ),
        None
    );
}

#[test]
fn a_press_whose_loop_oscillates_ends_with_its_reason() {
    let mut cell = Cell::new(1e6, 0.002);
    cell.gain_k = 2e4;
    let mut limits = default_limits();
    limits.max_force_n = 1000.0;
    let mut swing_seen = false;
    let r = run_arm(
        press_task(10.0, 15.0),
        &mut cell,
        limits,
        15.0,
        |_, _, c| swing_seen |= c.force().z < 1.0,
    );
    match r {
        Err(e) => assert!(e.why.contains("force loop oscillating"), "{e}"),
        Ok(()) => panic!("ran to the end (contact bounced: {swing_seen})"),
    }
}

/// A 10 N press task on 2·10⁴ N/m gains, started at a TCP pointing down.
fn press_run() -> (Isometry3<f64>, ArmRun) {
    let tcp = Isometry3::from_parts(
        Translation3::new(0.4, 0.0, 0.0),
        UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
    );
    let run = ArmRun::new(
        press_task(10.0, 5.0),
        default_arm_gains([2e4; 3], [50.0; 3], 0.03),
        default_limits(),
        [2e4, 2e4, 2e4, 50.0, 50.0, 50.0],
        DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
        0.03,
        &tcp,
    )
    .expect("task");
    (tcp, run)
}

/// Issue: a bridged wrench. While the estimate is the last usable one bridged over a gap,
/// the command does not advance along the force axes and the force integral stands still.
#[test]
fn a_bridged_wrench_freezes_the_force_axes() {
    let (tcp, mut run) = press_run();
    let input = |bridged: bool, f: f64, now_s: f64| ArmInput {
        peak: WrenchPeak {
            force_n: f,
            torque_nm: 0.0,
            bridged,
            fast_swing_n: 0.0,
        },
        tcp: &tcp,
        wrench_base: Ok((Vector3::new(0.0, 0.0, f), Vector3::zeros())),
        now_s,
        cycle_period_s: Some(0.004),
    };
    // In contact at 6 N (below the 10 N setpoint: the law presses on).
    let mut now = 0.0;
    let mut last = tcp;
    for _ in 0..20 {
        last = run.step(&input(false, 6.0, now)).expect("step").0;
        now += 0.004;
    }
    assert!(run.sup.in_contact());
    let moving = run.step(&input(false, 6.0, now)).expect("step").0;
    assert!(
        (moving.translation.z - last.translation.z).abs() > 1e-7,
        "pressing"
    );
    let int_before = run.law.int_f;
    // Bridged: the command stands still along z, the integral too.
    let mut held = moving;
    for _ in 0..10 {
        now += 0.004;
        let c = run.step(&input(true, 6.0, now)).expect("bridged step").0;
        assert_eq!(
            c.translation.z, held.translation.z,
            "advanced while bridged"
        );
        held = c;
    }
    assert_eq!(run.law.int_f, int_before);
}

/// Issue: fast limit checks. The force limit is checked on the force service's unfiltered
/// peak: a filtered estimate of 10 N with a 60 N impact inside the window ends the task
/// (the 12 Hz estimate said 50.4 N while the true force reached 128 N).
#[test]
fn the_force_limit_sees_the_unfiltered_peak() {
    let (tcp, mut run) = press_run();
    let input = |peak: f64, now_s: f64| ArmInput {
        peak: WrenchPeak {
            force_n: peak,
            torque_nm: 0.0,
            bridged: false,
            fast_swing_n: 0.0,
        },
        tcp: &tcp,
        wrench_base: Ok((Vector3::new(0.0, 0.0, 10.0), Vector3::zeros())),
        now_s,
        cycle_period_s: Some(0.004),
    };
    run.step(&input(10.5, 0.0)).expect("below the limit");
    let e = run
        .step(&input(60.0, 0.004))
        .expect_err("peak above the limit");
    assert!(e.why.contains("contact force 60.0 N > max 50.0 N"), "{e}");
}

#[test]
fn limits_end_the_task_with_a_reason() {
    // Max force: a 60 N setpoint with a 50 N limit.
    let mut cell = Cell::new(2e4, 0.001);
    let mut limits = default_limits();
    limits.force_axis_speed_m_s = 0.05;
    let e = run_arm(
        press_task(60.0, 10.0),
        &mut cell,
        limits,
        10.0,
        |_, _, _| {},
    )
    .expect_err("max force");
    assert!(e.why.contains("contact force"), "{e}");
    // Deviation: a position axis pushed away (a wall along y the TCP cannot pass).
    let mut t = press_task(5.0, 10.0);
    t.reference[1] = Profile::Ramp {
        from: 0.0,
        to: 0.2,
        start_s: 0.0,
        duration_s: 0.1,
    };
    let mut cell = Cell::new(2e4, 0.001);
    let mut l = default_limits();
    l.deviation_m = 0.01;
    let e = run_arm(t, &mut cell, l, 5.0, |_, _, _| {}).expect_err("deviation");
    assert!(e.why.contains("deviation on y"), "{e}");
    // A faulted/stale wrench holds at once.
    let mut run = ArmRun::new(
        press_task(5.0, 10.0),
        default_arm_gains([2e4; 3], [50.0; 3], 0.03),
        default_limits(),
        [2e4; 6],
        DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
        0.03,
        &Isometry3::identity(),
    )
    .expect("task");
    let e = run
        .step(&ArmInput {
            peak: WrenchPeak::default(),
            tcp: &Isometry3::identity(),
            wrench_base: Err(crate::core::WrenchUnusable::Stale { age_ms: 60.0 }),
            now_s: 0.004,
            cycle_period_s: None,
        })
        .expect_err("stale");
    assert!(e.why.contains("Stale"));
    assert_eq!(e.stop, StopCategory::Controlled, "a gap is not a collision");
    // An impact (a `Spike`) or a saturated sensor is protective (issue 41 item 2).
    for (fault, cause) in [
        (WrenchFault::Spike, ProtectiveCause::Impact),
        (WrenchFault::Saturated, ProtectiveCause::Saturated),
    ] {
        let e = run
            .step(&ArmInput {
                peak: WrenchPeak::default(),
                tcp: &Isometry3::identity(),
                wrench_base: Err(crate::core::WrenchUnusable::Fault(fault)),
                now_s: 0.004,
                cycle_period_s: None,
            })
            .expect_err("impact");
        assert_eq!(e.stop, StopCategory::Protective(cause), "{e}");
        assert!(e.is_protective());
    }
    // NaN in → abort, never a NaN command.
    let e = run
        .step(&ArmInput {
            peak: WrenchPeak::default(),
            tcp: &Isometry3::identity(),
            wrench_base: Ok((Vector3::new(f64::NAN, 0.0, 0.0), Vector3::zeros())),
            now_s: 0.008,
            cycle_period_s: None,
        })
        .expect_err("nan");
    assert!(e.why.contains("non-finite"), "{e}");
}

/// The tracking frame keeps its normal while the tool moves into the surface (the
/// approach's velocity, still above the sliding threshold at first contact, is along the
/// force: removing it left the stray lateral force, and the frame turned towards it), and
/// follows a tilted surface once the tool slides along it.
#[test]
fn tracking_frame_ignores_approach_travel_and_follows_sliding() {
    let mut task = press_task(10.0, 10.0);
    task.frame_kind = FrameKind::Tracking;
    let down = UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0);
    let start = Isometry3::from_parts(Translation3::new(0.4, 0.0, 0.3), down);
    let mut run = ArmRun::new(
        task,
        default_arm_gains([2e4; 3], [50.0; 3], 0.03),
        default_limits(),
        [2e4; 6],
        DEFAULT_WORST_CASE_STIFFNESS_N_PER_M,
        0.03,
        &start,
    )
    .expect("task");
    let z0 = run.frame.rotation * Vector3::z();
    let dt = 0.004;
    // Approach at 10 mm/s into contact: the surface pushes up (5 N) with a stray 0.4 N on y.
    let mut p = start.translation.vector;
    for _ in 0..50 {
        p.z -= 0.010 * dt;
        let tcp = Isometry3::from_parts(Translation3::from(p), down);
        run.track(&tcp, &Vector3::new(0.0, 0.4, 5.0), dt);
    }
    let z = run.frame.rotation * Vector3::z();
    let turned = z.angle(&z0).to_degrees();
    assert!(
        turned < 0.01,
        "the frame turned {turned:.2}° during the approach"
    );
    // Sliding along +y at 20 mm/s over a surface tilted 10° about y (normal in the x–z
    // plane), friction 0.3 against the travel.
    let tilt = 10f64.to_radians();
    let normal_up = Vector3::new(tilt.sin(), 0.0, tilt.cos());
    let on_tool = normal_up * 10.0 + Vector3::new(0.0, -3.0, 0.0);
    for _ in 0..500 {
        p.y += 0.020 * dt;
        let tcp = Isometry3::from_parts(Translation3::from(p), down);
        run.track(&tcp, &on_tool, dt);
    }
    let z = run.frame.rotation * Vector3::z();
    let off = z.angle(&(-normal_up)).to_degrees();
    assert!(
        off < 0.5,
        "{off:.2}° from the surface normal after 2 s of sliding"
    );
}

/// Contact is made and kept on the pressing axes (a non-zero reference) only: a peg whose
/// lateral (0 N, compliant) axes meet the hole's wall has not touched the surface it
/// presses on, so it stays in its approach (and its approach's travel bound) rather than
/// entering a contact that the wall's release then reads as lost.
#[test]
fn a_wall_on_a_compliant_axis_neither_makes_nor_keeps_a_contact() {
    let sel = [true, true, true, false, false, false];
    let f_ref = [0.0, 0.0, 5.0, 0.0, 0.0, 0.0];
    let mut sup = Supervision::new(default_limits());
    // 3.6 N from a wall along y, 0.2 N along the pressing z: no contact.
    let wall = [2.2, 3.6, 0.2, 0.0, 0.0, 0.0];
    assert_eq!(sup.update(0.0, &wall, &f_ref, &sel, 4.3, 0.0), Ok(false));
    assert_eq!(sup.phase, HybridPhase::Approach);
    // Pressing along z makes it; the wall alone does not keep it.
    let press = [0.0, 0.0, 5.0, 0.0, 0.0, 0.0];
    assert_eq!(sup.update(0.1, &press, &f_ref, &sel, 5.0, 0.0), Ok(false));
    assert_eq!(sup.phase, HybridPhase::Contact);
    let loss = default_limits().contact_loss_s;
    assert_eq!(sup.update(0.2, &wall, &f_ref, &sel, 4.3, 0.0), Ok(false));
    assert_eq!(
        sup.update(0.2 + loss + 1e-3, &wall, &f_ref, &sel, 4.3, 0.0),
        Ok(true)
    );
    // Every reference zero (a ramp at its start): any force axis makes the contact.
    let mut sup = Supervision::new(default_limits());
    let zero = [0.0; 6];
    assert_eq!(sup.update(0.0, &wall, &zero, &sel, 4.3, 0.0), Ok(false));
    assert_eq!(sup.phase, HybridPhase::Contact);
}

/// A steady force across the pressing axis (a peg pressed against a hole's wall,
/// friction while sliding) is not the surface ahead: the approach goes on to the surface
/// and seats there. Before, the seating stop read the unfiltered peak's magnitude (6 N
/// across ≥ 0.9 · 5 N) and the approach stood still above the surface for the task's
/// whole time (the peg experiment's 0.025 mm case, 2026-12-05).
#[test]
fn a_force_across_the_axis_does_not_stop_the_approach() {
    let mut cell = Cell::new(1e5, 0.0005);
    cell.gain_k = 1e5;
    cell.wall = Vector3::new(6.0, 0.0, 0.0);
    let mut touched_at = None;
    let mut seated = false;
    run_arm(
        press_task(5.0, 4.0),
        &mut cell,
        default_limits(),
        4.0,
        |t, rep, c| {
            if c.force().z > 0.0 && touched_at.is_none() {
                touched_at = Some(t);
            }
            if rep.phase == HybridPhase::Contact && (c.force().z - 5.0).abs() < 0.5 {
                seated = true;
            }
        },
    )
    .expect("no abort");
    assert!(
        touched_at.is_some(),
        "the approach never reached the surface"
    );
    assert!(seated, "never pressed 5 N along z");
    // The split itself: 6 N across, a 7.8 N peak → 5 N along; a pure impact counts whole.
    let fc = [6.0, 0.0, 1.0, 0.0, 0.0, 0.0];
    assert!((along_axis(7.81, &fc, 2) - 5.0).abs() < 0.01);
    assert!((along_axis(6.0, &fc, 2)).abs() < 1e-9);
    assert!((along_axis(12.0, &[0.0; 6], 2) - 12.0).abs() < 1e-12);
}

#[test]
fn contact_loss_is_detected_and_the_axis_approaches_again() {
    let mut cell = Cell::new(2e4, 0.0005);
    let limits = default_limits();
    let mut phases = Vec::new();
    let mut dropped = false;
    run_arm(
        press_task(10.0, 30.0),
        &mut cell,
        limits,
        25.0,
        |t, rep, c| {
            if t > 3.0 && !dropped {
                // The surface drops away by 3 mm at once (the re-approach may search 5).
                c.surface_z -= 0.003;
                dropped = true;
            }
            phases.push(rep.phase);
        },
    )
    .expect("no abort");
    let i = phases
        .iter()
        .position(|p| *p == HybridPhase::ContactLost)
        .expect("contact loss reported");
    assert!(
        phases[i..].contains(&HybridPhase::Contact),
        "contact made again"
    );
}

/// The 10 N press on a surface nobody identified (gains made for 2·10⁴ N/m): the true
/// first-contact peak, the rise (10 → 90 % of the setpoint, from the first touch) and the
/// overshoot past the setpoint after the rise, with the gains following the estimate.
fn unknown_surface_press(surface: f64) -> (f64, f64, f64, Result<(), Abort>, StepReport) {
    let limits = default_limits();
    let mut cell = Cell::new(surface, 0.0005);
    cell.gain_k = 2e4;
    cell.filtered = true;
    cell.adapt = true;
    let mut touched: Option<f64> = None;
    let (mut t10, mut t90) = (None, None);
    let mut peak: f64 = 0.0;
    let mut after: f64 = 0.0;
    let mut last = StepReport::default();
    let r = run_arm(
        press_task(10.0, 8.0),
        &mut cell,
        limits,
        8.0,
        |t, rep, c| {
            let f = c.force().z;
            if f > 0.0 && touched.is_none() {
                touched = Some(t);
            }
            if touched.is_some_and(|t0| t - t0 <= 1.0) {
                peak = peak.max(f);
            }
            if f >= 1.0 && t10.is_none() {
                t10 = Some(t);
            }
            if f >= 9.0 && t90.is_none() {
                t90 = Some(t);
            }
            if t90.is_some() {
                after = after.max(f);
            }
            last = *rep;
        },
    );
    let rise = match (t10, t90) {
        (Some(a), Some(b)) => b - a,
        _ => f64::INFINITY,
    };
    let overshoot = (after - 10.0).max(0.0) / 10.0 * 100.0;
    eprintln!(
        "surface {surface:e}: peak {peak:.2} N, rise {rise:.3} s, overshoot {overshoot:.1} %, \
         estimate {:.3e}, gains for {:.3e}: {}",
        last.stiffness_estimate_n_per_m[2],
        last.gains_for_n_per_m[2],
        r.as_ref()
            .map_or_else(|e| e.why.clone(), |_| "completed".into())
    );
    (peak, rise, overshoot, r, last)
}

/// Issue 20: the first contact on a surface nobody identified, 2·10⁴ … 10⁶ N/m, gains
/// made for 2·10⁴. The approach is bounded for the worst case until the surface is known
/// (`APPROACH_PEAK_FRACTION`), the seating is a guarded move that stops on the predicted
/// force with its reference pulled back to the measured pose, and speeds up once the
/// estimate says the surface is soft; a stiff surface seats before the estimator has data
/// and its gains come from the seating's secant. Before: 29 N on 10⁶ N/m (the gains fell
/// back to the task's 2·10⁴ 0.3 s after contact with no estimate), 0.52 s to rise on 2·10⁴.
#[test]
fn unknown_surface_first_contact_rise_and_overshoot() {
    for surface in [2e4, 1e5, 1e6] {
        let (peak, rise, overshoot, r, last) = unknown_surface_press(surface);
        assert!(r.is_ok(), "{r:?}");
        assert!(peak <= 13.0, "surface {surface:e}: peak {peak:.2} N");
        assert!(overshoot <= 10.0, "surface {surface:e}: {overshoot:.1} %");
        assert!(rise <= 0.25, "surface {surface:e}: rise {rise:.3} s");
        let est = last.stiffness_estimate_n_per_m[2];
        assert!(
            (est / surface - 1.0).abs() < 0.3,
            "surface {surface:e}: {est:e}"
        );
    }
}

/// Issue 20 item 4, on the model: the 10 N press slides from a 2·10⁴ N/m pad onto a
/// 10⁶ N/m table (the pad set flush, tapering out over 20 mm, 1 s at 20 mm/s). The
/// estimate is held while sliding; the depth below the surface raises the gains as the
/// tool meets the steel. Without the raise the loop, made for the pad, chatters on the
/// steel and the task ends.
fn pad_onto_steel(raise: bool) -> (Result<(), Abort>, f64, f64, f64) {
    let (r, worst_in, rms, worst_out, _) =
        pad_onto_steel_with(raise, 0.0, DEFAULT_MAX_REFERENCE_LAG_S);
    (r, worst_in, rms, worst_out)
}

/// The pad-onto-steel press with speed adaptation's bound `slowdown_n` (0: off). Returns
/// (outcome, max |e| through the taper, RMS and max |e| outside it, whether contact was
/// lost after the first), on the true force.
fn pad_onto_steel_with(
    raise: bool,
    slowdown_n: f64,
    max_lag_s: f64,
) -> (Result<(), Abort>, f64, f64, f64, bool) {
    let limits = default_limits();
    let mut cell = Cell::new(2e4, 0.0005);
    cell.gain_k = 2e4;
    cell.filtered = true;
    cell.adapt = true;
    cell.slowdown_n = slowdown_n;
    cell.max_lag_s = max_lag_s;
    cell.grade = Some((0.43, 0.45, 1e6));
    let mut task = press_task(10.0, 10.0);
    task.from_contact = true;
    task.reference[0] = Profile::Ramp {
        from: 0.0,
        to: 0.1,
        start_s: 2.0,
        duration_s: 5.0,
    };
    let (mut worst_in, mut sq, mut n, mut worst_out) = (0.0f64, 0.0, 0usize, 0.0f64);
    let mut contact: Option<f64> = None;
    let mut lost = false;
    // Long enough for a slowed crossing; the task ends on its own clock.
    let r = run_arm_with(task, &mut cell, limits, 45.0, raise, |t, rep, c| {
        if contact.is_none() && rep.phase == HybridPhase::Contact {
            contact = Some(t);
        }
        let Some(t0) = contact else { return };
        lost |= rep.phase == HybridPhase::ContactLost;
        let e = c.force().z - 10.0;
        if t < t0 + 1.5 {
            return;
        }
        // The taper is crossed between x = 0.43 and 0.45 (the tool starts at 0.4).
        if (0.425..=0.46).contains(&c.pos.x) {
            worst_in = worst_in.max(e.abs());
        } else if rep.phase == HybridPhase::Contact || rep.phase == HybridPhase::ContactLost {
            sq += e * e;
            n += 1;
            worst_out = worst_out.max(e.abs());
        }
    });
    let rms = (sq / n.max(1) as f64).sqrt();
    eprintln!(
        "pad onto steel, raise {raise}, slowdown {slowdown_n} N: {} through the taper max \
         |e| {worst_in:.2} N; outside RMS {rms:.3} N, max {worst_out:.2} N; contact lost \
         {lost}",
        r.as_ref()
            .map_or_else(|e| e.why.clone(), |_| "completed,".into())
    );
    (r, worst_in, rms, worst_out, lost)
}

/// Issue 41 item 6: speed adaptation has a maximum lag. The pad → steel slide falls ≈ 15 s
/// behind its plan; with 2 s allowed it ends with a named fault instead of stretching.
#[test]
fn speed_adaptation_past_its_maximum_lag_ends_the_task_naming_it() {
    let (r, ..) = pad_onto_steel_with(true, 2.0, 2.0);
    let e = r.expect_err("past the lag");
    assert!(e.why.contains("behind its plan"), "{e}");
    assert!(!e.is_protective());
}

/// Issue 20 item 4's ± 3 N through the taper, with speed adaptation: the tool slides
/// slower where the loop carries the surface's motion on a stiff surface, so the taper's
/// end costs at most ≈ 2 N. Without it (the test can fail) the end of the taper drops
/// the force to 0.
#[test]
fn speed_adaptation_keeps_the_pad_to_steel_transition_within_3_n() {
    let (r, worst_in, rms, worst_out, lost) =
        pad_onto_steel_with(true, 2.0, DEFAULT_MAX_REFERENCE_LAG_S);
    assert!(r.is_ok(), "{r:?}");
    assert!(worst_in <= 3.0, "through the taper max |e| {worst_in:.2} N");
    assert!(!lost, "contact lost");
    assert!(
        rms <= 0.5 && worst_out <= 2.0,
        "outside RMS {rms:.3} N, max {worst_out:.2} N"
    );
    let (_, worst_in, _, _, lost) = pad_onto_steel_with(true, 0.0, DEFAULT_MAX_REFERENCE_LAG_S);
    assert!(
        worst_in > 3.0 && lost,
        "without: {worst_in:.2} N, lost {lost}"
    );
}

#[test]
fn the_speed_scale_keeps_a_sudden_stop_within_its_force() {
    let dt = 0.004;
    // The cost: 0.49 mm/s against kp_f = 0.3/(K·T) made for 10⁶ N/m, T = 30 ms: the
    // P-loop's error for that velocity, 49 N; on a surface made for 10⁵ that may be 10⁶,
    // the same ×10 of its own.
    let kp = |k: f64| 0.3 / (k * 0.03);
    assert!((stop_cost_n(0.49e-3, kp(1e6), 1e6, 1e6) - 49.0).abs() < 1e-9);
    assert!((stop_cost_n(0.49e-3, kp(1e5), 1e5, 1e6) - 49.0).abs() < 1e-9);
    assert!((stop_cost_n(0.49e-3, kp(1e5), 1e5, 1e5) - 4.9).abs() < 1e-9);
    assert_eq!(stop_cost_n(1.0, 0.0, 1e5, 1e6), 0.0);
    assert_eq!(stop_cost_n(f64::NAN, kp(1e5), 1e5, 1e6), 0.0);
    // Nothing moving along the force axes: full speed.
    assert_eq!(next_speed_scale(1.0, &[0.0; 3], 2.0, dt), 1.0);
    // A cost of 49 N at full speed converges to 2/49 of it (the motion scales with the
    // speed), falling at most 4/s.
    let mut s = 1.0;
    for _ in 0..250 {
        let next = next_speed_scale(s, &[0.0, 0.0, 49.0 * s], 2.0, dt);
        assert!(s - next <= SPEED_SCALE_FALL_PER_S * dt + 1e-12);
        s = next;
    }
    assert!(
        (s - 2.0 / 49.0).abs() < 1e-9 || s == MIN_SPEED_SCALE,
        "scale {s}"
    );
    let mut s = 1.0;
    for _ in 0..250 {
        s = next_speed_scale(s, &[0.0, 0.0, 10.0 * s], 2.0, dt);
    }
    assert!((s - 0.2).abs() < 1e-6, "scale {s}");
    // The motion stops: back up at most 1/s.
    let next = next_speed_scale(s, &[0.0; 3], 2.0, dt);
    assert!((next - (s + SPEED_SCALE_RISE_PER_S * dt)).abs() < 1e-12);
    // Never below the floor; off or nonsense: full speed.
    assert_eq!(
        next_speed_scale(0.06, &[100.0; 3], 2.0, 1.0),
        MIN_SPEED_SCALE
    );
    assert_eq!(next_speed_scale(0.5, &[100.0; 3], 0.0, dt), 1.0);
    assert_eq!(next_speed_scale(f64::NAN, &[100.0; 3], 2.0, dt), 1.0);
}

/// At the task's own speed (speed adaptation off): the gains follow the stiffness
/// through the taper and the press completes, on target outside it. The ±3 N through the
/// taper cannot be met at 20 mm/s: the linear taper needs the tool to retract at
/// `F·Δ(1/K)/Δx·v` = 0.49 mm/s all the way to the steel and then not at all; a velocity
/// error of 0.49 mm/s on 10⁶ N/m is 490 N/s, 15 N within the loop's 30 ms before any
/// feedback acts. Measured: the force falls to 0 for ≈ 0.1 s where the taper ends and the
/// press re-seats. Speed adaptation (next test) meets it by crossing slower.
#[test]
fn a_press_sliding_from_a_pad_onto_steel_raises_its_gains_from_the_depth() {
    let (r, _worst_in, rms, worst_out) = pad_onto_steel(true);
    assert!(r.is_ok(), "{r:?}");
    assert!(
        rms <= 0.5 && worst_out <= 2.0,
        "outside RMS {rms:.3} N, max {worst_out:.2} N"
    );
    // The failure this fixes (the test can fail): the pad's gains on steel chatter and
    // the task ends.
    let (r, _, _, _) = pad_onto_steel(false);
    assert!(r.is_err(), "{r:?}");
}

/// Issue 20 item 3 on the model: a 2 → 10 N step 1 s after contact, identified gains and
/// gains following the estimate, with and without the reference pre-filter. Returns
/// (overshoot % of the step, rise 10 → 90 % of the step in s) on the true force.
fn force_step(surface: f64, adapt: bool, prefilter_s: f64) -> (f64, f64) {
    let limits = default_limits();
    let mut cell = Cell::new(surface, 0.0005);
    cell.gain_k = surface;
    cell.filtered = true;
    cell.adapt = adapt;
    let mut task = press_task(2.0, 3.0);
    task.from_contact = true;
    task.reference[2] = Profile::Step {
        before: 2.0,
        after: 10.0,
        at_s: 1.0,
    };
    let mut contact: Option<f64> = None;
    let (mut t10, mut t90, mut peak) = (None, None, 0.0f64);
    run_arm_full(
        task,
        &mut cell,
        limits,
        8.0,
        true,
        prefilter_s,
        |t, rep, c| {
            if contact.is_none() && rep.phase == HybridPhase::Contact {
                contact = Some(t);
            }
            let Some(t0) = contact else { return };
            if t < t0 + 1.0 {
                return;
            }
            let f = c.force().z;
            if f >= 2.8 && t10.is_none() {
                t10 = Some(t);
            }
            if f >= 9.2 && t90.is_none() {
                t90 = Some(t);
            }
            peak = peak.max(f);
        },
    )
    .expect("step");
    let rise = match (t10, t90) {
        (Some(a), Some(b)) => b - a,
        _ => f64::INFINITY,
    };
    let overshoot = (peak - 10.0).max(0.0) / 8.0 * 100.0;
    eprintln!(
        "step 2 → 10 N on {surface:e}, adapt {adapt}, pre-filter {prefilter_s} s: \
         overshoot {overshoot:.1} %, rise {rise:.3} s"
    );
    (overshoot, rise)
}

#[test]
fn a_force_step_through_the_pre_filter_does_not_overshoot() {
    for surface in [2e4, 1e5, 1e6] {
        for adapt in [false, true] {
            let (os0, _) = force_step(surface, adapt, 0.0);
            let (os, rise) = force_step(surface, adapt, FORCE_PREFILTER_S);
            assert!(
                os <= 10.0,
                "{surface:e} {adapt}: overshoot {os:.1} % (without {os0:.1} %)"
            );
            assert!(rise <= 0.25, "{surface:e} {adapt}: rise {rise:.3} s");
        }
    }
}

/// As one of the core's modes (`core::ModeLaw`): an impact or a saturated sensor is a stop at
/// once that robot-io latches, a non-finite input a stop at once it does not latch, a gap in
/// the estimate a smooth end. The core carries out whatever the mode answers, the same way
/// for every mode.
#[test]
fn as_a_mode_an_impact_is_a_latched_stop_and_a_gap_a_smooth_end() {
    use crate::core::{ModeEnd, ModeInput, ModeLaw, WrenchInput, WrenchUnusable};
    let nan = Vector3::new(f64::NAN, 0.0, 0.0);
    let cases: [(WrenchInput, Option<(ProtectiveCause, bool)>); 4] = [
        (
            Err(WrenchUnusable::Fault(WrenchFault::Spike)),
            Some((ProtectiveCause::Impact, true)),
        ),
        (
            Err(WrenchUnusable::Fault(WrenchFault::Saturated)),
            Some((ProtectiveCause::Saturated, true)),
        ),
        (
            Ok((nan, Vector3::zeros())),
            Some((ProtectiveCause::NonFinite, false)),
        ),
        (Err(WrenchUnusable::Stale { age_ms: 80.0 }), None),
    ];
    /// The first cycle of a press at `tcp` with `wrench`.
    fn first<'a>(tcp: &'a Isometry3<f64>, wrench: &'a WrenchInput) -> ModeInput<'a> {
        ModeInput {
            tcp,
            now_s: 0.0,
            wrench,
            peak: WrenchPeak::default(),
            cycle_period_s: Some(0.004),
            dt_s: 0.0,
            deadman_held: false,
        }
    }
    for (wrench, expect) in cases {
        let (tcp, mut run) = press_run();
        match (run.cycle(&first(&tcp, &wrench)), expect) {
            (Err(ModeEnd::Now { stop, latch, why }), Some((cause, latched))) => {
                assert_eq!(stop, StopCategory::Protective(cause), "{why}");
                assert_eq!(latch, latched, "{why}");
                assert!(why.starts_with("hybrid task ended: "), "{why}");
            }
            (Err(ModeEnd::Smoothly(why)), None) => {
                assert!(why.contains("wrench estimate"), "{why}")
            }
            (other, _) => panic!("{wrench:?}: {other:?}"),
        }
    }
    // A usable wrench: the command and its report.
    let (tcp, mut run) = press_run();
    let wrench: WrenchInput = Ok((Vector3::zeros(), Vector3::zeros()));
    let (target, report) = run.cycle(&first(&tcp, &wrench)).expect("a command");
    assert!(matches!(target, common::msg::CartesianTarget::Pose(_)));
    assert_eq!(report.phase, HybridPhase::Approach);
}
