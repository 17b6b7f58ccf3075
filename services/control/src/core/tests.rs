//! The core's tests.

use super::*;
use common::msg::HybridPhase;
use nalgebra::{Translation3, UnitQuaternion, Vector3};

const BOOT: u64 = 9;

fn safety(level: SafetyLevel, reason: SafetyReason, motion_id: u64) -> SafetyState {
    SafetyState {
        level,
        reason,
        robot_boot: BOOT,
        motion_id,
        ..Default::default()
    }
}

/// A core that has seen robot-io idle (holding, no command).
fn ready() -> ControlCore {
    let mut c = ControlCore::new(100);
    c.on_safety(&safety(SafetyLevel::Hold, SafetyReason::CommandStale, 0));
    c
}

fn pose(x: f64, y: f64, z: f64) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::new(x, y, z),
        UnitQuaternion::from_axis_angle(&Vector3::y_axis(), std::f64::consts::FRAC_PI_2),
    )
}

#[test]
fn wrench_gate_bridges_stale_gaps_and_refuses_other_faults() {
    use common::msg::WrenchEstimate;
    let mut g = WrenchGate::new(0.05, 0.009);
    assert!(g.input(None, 0.0).is_err(), "nothing yet");
    let mut good = WrenchEstimate::default();
    good.base.force_n = [0.0, 0.0, 10.0];
    assert_eq!(
        g.input(Some((&good, 0.0)), 0.001).map(|(f, _)| f.z),
        Ok(10.0)
    );
    assert!(!g.peak().bridged);
    // A Stale flag 20 ms later: the last usable estimate is used, and said to be bridged…
    let stale = WrenchEstimate {
        fault: WrenchFault::Stale,
        ..Default::default()
    };
    assert_eq!(
        g.input(Some((&stale, 0.02)), 0.02).map(|(f, _)| f.z),
        Ok(10.0)
    );
    assert!(g.peak().bridged);
    // …until it is older than the bound.
    let e = g.input(Some((&stale, 0.06)), 0.06).expect_err("too old");
    assert!(e.to_string().starts_with("Stale"), "{e}");
    // Samples that simply stop (no flag: the force service is silent) are a gap too once
    // the newest estimate is older than `gap_s`, until it is older than the bound.
    g.input(Some((&good, 0.07)), 0.07).expect("good again");
    assert!(!g.peak().bridged);
    assert!(g.input(Some((&good, 0.07)), 0.075).is_ok());
    assert!(!g.peak().bridged, "5 ms without a sample is not a gap");
    assert!(g.input(Some((&good, 0.07)), 0.09).is_ok());
    assert!(g.peak().bridged, "20 ms without a sample is bridged");
    assert!(g.input(Some((&good, 0.07)), 0.121).is_err());
    // Any other fault is refused at once, even right after a good estimate.
    g.input(Some((&good, 0.1)), 0.1).expect("good again");
    for f in [
        WrenchFault::Spike,
        WrenchFault::Saturated,
        WrenchFault::NotTared,
        WrenchFault::NonFinite,
        WrenchFault::DeviceError,
        WrenchFault::NoPose,
    ] {
        let w = WrenchEstimate {
            fault: f,
            ..Default::default()
        };
        assert_eq!(
            g.input(Some((&w, 0.101)), 0.101),
            Err(WrenchUnusable::Fault(f))
        );
    }
    // A NaN time never passes.
    assert!(g.input(None, f64::NAN).is_err());
}

#[test]
fn robot_clock_is_uniform_under_receive_jitter_and_reanchors_after_a_pause() {
    let mut c = RobotClock::default();
    let mut prev = None;
    for k in 1..500u64 {
        let jitter = if k % 2 == 0 { 0.0006 } else { -0.0006 };
        let t = c.time(k, k as f64 * 0.004 + jitter);
        if let (Some(p), true) = (prev, k > 300) {
            let dt: f64 = t - p;
            assert!((dt - 0.004).abs() < 1e-4, "cycle {k}: dt {dt}");
        }
        prev = Some(t);
    }
    // A 100 ms pause: the clock follows the receive time again.
    let t = c.time(600, 600.0 * 0.004 + 0.1);
    assert!((t - (600.0 * 0.004 + 0.1)).abs() < 1e-12);
}

#[test]
fn idle_publishes_nothing_and_hold_captures_pose() {
    let mut c = ready();
    assert_eq!(c.step(&pose(0.3, 0.0, 0.5), 0.0), None);
    c.request_mode(Mode::Hold).expect("hold");
    let a = c.step(&pose(0.3, 0.0, 0.5), 0.0);
    let b = c.step(&pose(0.31, 0.0, 0.5), 0.004);
    assert_eq!(a, b, "hold keeps the pose captured on entry");
}

/// A core moving to `target` at `v` (m/s), robot-io executing the motion.
fn moving_to(target: &Isometry3<f64>, v: f64) -> ControlCore {
    let mut c = ready();
    c.request_move(MoveTarget {
        tcp_in_base: Pose::from_isometry(target),
        max_speed_m_s: v,
        max_rot_speed_rad_s: 1.0,
        ..Default::default()
    })
    .expect("move");
    let id = c.motion_tag().expect("a motion").motion_id;
    c.on_safety(&safety(SafetyLevel::Active, SafetyReason::None, id));
    c
}

#[test]
fn move_is_speed_bounded_and_ends_at_target() {
    let start = pose(0.374, 0.0, 0.63);
    let target = pose(0.374, 0.1, 0.53);
    let v = 0.1;
    let mut c = moving_to(&target, v);
    let dt = 0.004;
    let mut prev = start;
    let mut t = 0.0;
    let mut last = None;
    for _ in 0..2000 {
        let Some(CartesianTarget::Pose(p)) = c.step(&start, t) else {
            panic!("move must publish poses")
        };
        let iso = p.to_isometry();
        let speed = (iso.translation.vector - prev.translation.vector).norm() / dt;
        assert!(speed <= v * 1.001, "speed {speed}");
        prev = iso;
        last = Some(p);
        t += dt;
    }
    let end: Pose = last.expect("some");
    assert!((end.to_isometry().translation.vector - target.translation.vector).norm() < 1e-12);
    assert!(c.move_done());
}

/// Issue 21: a short move at a long move's speed (the peg's 3.6 mm placement at 150 mm/s)
/// took 36 ms, 17 m/s² at the TCP, which robot-io limited 7 times in a demo. Its commanded
/// acceleration stays within `[control.ending]`'s now, and its speed within the limit.
#[test]
fn a_short_move_is_acceleration_bounded() {
    let start = pose(0.350, 0.0, 0.32);
    let target = pose(0.353, 0.002, 0.32);
    let v = 0.15;
    let mut c = moving_to(&target, v);
    let a_max = c.end_params.max_accel_m_s2;
    let dt = 0.004;
    let mut t = 0.0;
    let mut p: Vec<Vector3<f64>> = vec![start.translation.vector];
    for _ in 0..200 {
        let Some(CartesianTarget::Pose(q)) = c.step(&start, t) else {
            panic!("move must publish poses")
        };
        p.push(q.to_isometry().translation.vector);
        t += dt;
    }
    let mut worst: f64 = 0.0;
    for w in p.windows(3) {
        worst = worst.max((w[2] - 2.0 * w[1] + w[0]).norm() / (dt * dt));
        assert!((w[2] - w[1]).norm() / dt <= v * 1.001);
    }
    assert!(worst <= a_max * 1.01, "peak acceleration {worst} m/s²");
    assert!((p[p.len() - 1] - target.translation.vector).norm() < 1e-12);
}

/// With the robot's cycles and period given, a move advances one period per cycle whatever
/// the robot clock does (jitter, a stall): its speed holds reference to reference.
#[test]
fn move_advances_by_robot_cycles_under_a_jittering_clock() {
    let run = |cycles: bool| {
        let start = pose(0.374, 0.0, 0.63);
        let v = 0.1;
        let mut c = moving_to(&pose(0.374, 0.1, 0.53), v);
        let (mut prev, mut t, mut worst) = (start, 0.0, 0.0f64);
        for k in 0..1000u64 {
            if cycles {
                c.set_cycle(100 + k, 0.004);
            }
            let Some(CartesianTarget::Pose(p)) = c.step(&start, t) else {
                panic!("move must publish poses")
            };
            let iso = p.to_isometry();
            worst = worst.max((iso.translation.vector - prev.translation.vector).norm() / 0.004);
            prev = iso;
            t += 0.004 + if k % 2 == 0 { 8e-4 } else { -8e-4 } + if k == 100 { 0.03 } else { 0.0 };
        }
        (worst / v, c.move_done())
    };
    let (ratio, done) = run(true);
    assert!(ratio <= 1.0 + 1e-6 && ratio > 0.99, "{ratio}");
    assert!(done);
    let (ratio, _) = run(false);
    assert!(
        ratio > 1.5,
        "the robot clock alone carries its jitter: {ratio}"
    );
}

#[test]
fn unavailable_modes_and_safety_stop_are_refused() {
    let mut c = ready();
    assert_eq!(
        c.request_mode(Mode::LeadThrough),
        Err(ModeError::NeedsGuideRequest)
    );
    assert_eq!(c.request_mode(Mode::Hybrid), Err(ModeError::NeedsTask));
    c.request_mode(Mode::Hold).expect("hold");
    c.on_safety(&safety(SafetyLevel::EmergencyStop, SafetyReason::EStop, 0));
    assert_eq!(c.mode(), Mode::Idle);
    assert!(c.request_mode(Mode::Hold).is_err());
    c.on_safety(&safety(SafetyLevel::Hold, SafetyReason::NoCommandYet, 0));
    assert!(c.request_mode(Mode::Hold).is_ok());
    // Nothing known of robot-io: refused.
    let mut u = ControlCore::new(0);
    assert_eq!(u.request_mode(Mode::Hold), Err(ModeError::RobotIoUnknown));
}

fn start_move(c: &mut ControlCore) -> MotionTag {
    c.request_move(MoveTarget {
        tcp_in_base: Pose::from_isometry(&pose(0.374, 0.1, 0.53)),
        max_speed_m_s: 0.1,
        max_rot_speed_rad_s: 1.0,
        ..Default::default()
    })
    .expect("move");
    c.motion_tag().expect("a motion")
}

/// Issue 19 item 4: a motion that goes idle (here an operator's idle request) is handed
/// to the shell once, to be ended at robot-io explicitly.
#[test]
fn a_motion_that_goes_idle_is_ended_once() {
    let mut c = ready();
    assert_eq!(c.take_ended_motion(), None);
    let tag = start_move(&mut c);
    assert!(c.step(&pose(0.374, 0.0, 0.63), 0.0).is_some());
    assert_eq!(c.take_ended_motion(), None, "still moving");
    c.request_mode(Mode::Idle).expect("idle");
    assert_eq!(c.take_ended_motion(), Some((tag, StopCategory::Controlled)));
    assert_eq!(c.take_ended_motion(), None, "once");
}

#[test]
fn an_outage_mid_move_ends_the_motion_and_nothing_resumes() {
    // Before the fix control kept its motion clock running through an outage and went on
    // publishing when robot-io came back.
    for reason in [
        SafetyReason::MotionEnded,
        SafetyReason::RobotNotReady,
        SafetyReason::RobotSilent,
    ] {
        let mut c = ready();
        let tag = start_move(&mut c);
        assert_eq!(tag.robot_boot, BOOT);
        assert!(c.step(&pose(0.374, 0.0, 0.63), 0.0).is_some());
        c.on_safety(&safety(
            SafetyLevel::Active,
            SafetyReason::None,
            tag.motion_id,
        ));
        assert!(c.step(&pose(0.374, 0.0, 0.63), 0.004).is_some());
        c.on_safety(&safety(SafetyLevel::Hold, reason, 0));
        assert_eq!(c.mode(), Mode::Idle, "{reason:?}");
        assert!(c
            .stop_reason()
            .expect("a stop reason")
            .contains(&format!("{reason:?}")));
        // robot-io back to normal: nothing is published until a new command.
        c.on_safety(&safety(SafetyLevel::Hold, SafetyReason::NoCommandYet, 0));
        assert_eq!(c.step(&pose(0.374, 0.0, 0.63), 1.0), None);
        // A new command is a new motion with a new id.
        let tag2 = start_move(&mut c);
        assert_ne!(tag2.motion_id, tag.motion_id);
        assert!(c.stop_reason().is_none());
    }
}

#[test]
fn a_robot_io_restart_ends_the_motion() {
    let mut c = ready();
    let tag = start_move(&mut c);
    c.step(&pose(0.374, 0.0, 0.63), 0.0);
    let mut s = safety(SafetyLevel::Hold, SafetyReason::NoCommandYet, 0);
    s.robot_boot = BOOT + 1;
    c.on_safety(&s);
    assert_eq!(c.mode(), Mode::Idle);
    assert!(c
        .stop_reason()
        .expect("a stop reason")
        .contains("restarted"));
    // The next motion carries the new boot id.
    assert_eq!(start_move(&mut c).robot_boot, BOOT + 1);
    assert_ne!(tag.robot_boot, BOOT + 1);
}

#[test]
fn a_motion_robot_io_never_accepts_ends_after_the_timeout() {
    let mut c = ready();
    start_move(&mut c);
    assert!(c.step(&pose(0.374, 0.0, 0.63), 0.0).is_some());
    assert!(c.step(&pose(0.374, 0.0, 0.63), 0.5).is_some());
    assert_eq!(
        c.step(&pose(0.374, 0.0, 0.63), ACCEPT_TIMEOUT_S + 0.01),
        None
    );
    assert_eq!(c.mode(), Mode::Idle);
    // Robot not ready: refused outright.
    c.on_safety(&safety(SafetyLevel::Hold, SafetyReason::RobotNotReady, 0));
    assert_eq!(
        c.request_mode(Mode::Hold),
        Err(ModeError::RobotNotReady(SafetyReason::RobotNotReady))
    );
}

const PLANT_TASK: &str = "name = \"step\"\nrobot = \"plant\"\nframe = \"base\"\n\
    force_axes = [\"x\"]\nduration_s = 3.0\nrate_hz = 60.0\n[reference]\nx = 5.0\ny = 0.0\n";

fn plant_input(t_s: f64) -> crate::hybrid::PlantInput {
    crate::hybrid::PlantInput {
        t_s,
        q: [0.0, 0.55],
        qd: [0.0, 0.0],
        wrist_force_n: [-1.0, 0.0],
    }
}

/// The plant's task lives in the core (issue 42): refused while the cell is stopped, and
/// ended, with its last report `Aborted` and the reason for the shell, by an e-stop, a
/// protective stop or an operator's `mode idle`.
#[test]
fn every_stop_of_the_cell_stops_the_plant_task() {
    let task = || crate::taskfile::parse(PLANT_TASK).expect("plant task");
    let limits = crate::hybrid::default_limits();
    type Stop = fn(&mut ControlCore);
    let stops: [(&str, Stop); 3] = [
        ("EmergencyStop", |c| {
            c.on_safety(&safety(SafetyLevel::EmergencyStop, SafetyReason::EStop, 0))
        }),
        ("ProtectiveStop", |c| {
            c.on_safety(&safety(
                SafetyLevel::ProtectiveStop,
                SafetyReason::ProtectiveRequest,
                0,
            ))
        }),
        ("operator stop", |c| {
            c.request_mode(Mode::Idle).expect("idle")
        }),
    ];
    for (name, stop) in stops {
        let mut c = ready();
        c.request_plant(task(), limits, [200.0; 2]).expect("starts");
        assert!(c.plant_running());
        let step = c.step_plant(&plant_input(0.0)).expect("first step is due");
        assert!(step.effort.iter().all(|e| e.is_finite()) && !step.done);
        assert!(c.take_plant_end().is_none());
        stop(&mut c);
        assert!(!c.plant_running(), "{name}");
        let (why, report) = c.take_plant_end().expect("ended");
        assert!(
            why.contains(name) && why.contains("\"step\""),
            "{name}: {why}"
        );
        assert_eq!(
            report.map(|r| r.phase),
            Some(HybridPhase::Aborted),
            "{name}"
        );
        assert!(c.step_plant(&plant_input(1.0)).is_none());
        assert!(c.take_plant_end().is_none(), "said once");
    }
    // Refused while the cell is stopped.
    let mut c = ready();
    c.on_safety(&safety(SafetyLevel::EmergencyStop, SafetyReason::EStop, 0));
    let e = c
        .request_plant(task(), limits, [200.0; 2])
        .expect_err("refused while stopped");
    assert!(e.contains("refused, the cell is stopped"), "{e}");
    assert!(!c.plant_running());
}

/// The deadman is the core's, on robot time, with the session's own timeout (issue 42: the
/// shell held it on the host's clock with the cell's 0.5 s even when a session had tightened
/// it to 0.2 s): an enable counts at the next step, and 0.2 s of robot time without one
/// releases the session; its token then keeps nothing, and a new guide request binds anew.
#[test]
fn the_deadman_runs_on_robot_time_with_the_sessions_timeout() {
    let mut c = ready();
    let params = crate::guide::GuideParams {
        deadman_timeout_s: 0.2,
        ..Default::default()
    };
    c.request_guide(params, Some(WrenchFault::None), 41, "")
        .expect("guide");
    assert!(c.deadman_bound());
    let tcp = pose(0.4, 0.0, 0.4);
    let w: WrenchInput = Ok((Vector3::zeros(), Vector3::zeros()));
    assert!(!c.on_enable(7, ""), "another token keeps nothing");
    assert!(c.on_enable(41, ""));
    let mut enabled_at = Vec::new();
    for k in 0..100 {
        let t = 10.0 + k as f64 * 0.004;
        c.step_with_wrench(&tcp, t, &w);
        if c.guide_report().is_some_and(|r| r.enabled) {
            enabled_at.push(t);
        }
    }
    assert_eq!(c.mode(), Mode::LeadThrough, "{:?}", c.stop_reason());
    let last = enabled_at.last().copied().unwrap_or(0.0);
    assert!(
        !enabled_at.is_empty() && (last - 10.2).abs() < 0.005,
        "{enabled_at:?}"
    );
    assert!(!c.deadman_bound(), "released");
    assert_eq!(c.deadman_counts().released, 1);
    assert!(!c.on_enable(41, ""), "a released token is void");
    c.request_guide(params, Some(WrenchFault::None), 42, "")
        .expect("guide again");
    assert!(c.on_enable(42, ""));
}

/// Teach-on-dwell is the core's (issue 42), with the session's own rule: a guide request that
/// asks `dwell_record_s` records a waypoint after that long still (the shell used the cell's
/// `[control.guide]` rule, none by default, whatever the session asked); a session without
/// one records nothing.
#[test]
fn a_guide_session_records_on_dwell_with_its_own_rule() {
    let tcp = pose(0.4, 0.0, 0.4);
    let w: WrenchInput = Ok((Vector3::zeros(), Vector3::zeros()));
    for dwell in [Some(0.3), None] {
        let mut c = ready();
        let params = crate::guide::GuideParams {
            dwell_record_s: dwell,
            ..Default::default()
        };
        c.request_guide(params, Some(WrenchFault::None), 5, "")
            .expect("guide");
        let mut recorded = Vec::new();
        for k in 0..125 {
            let t = 20.0 + k as f64 * 0.004;
            c.on_enable(5, "");
            c.set_measured([0.1; 6], 0.0);
            c.step_with_wrench(&tcp, t, &w);
            if let Some(i) = c.take_dwell_waypoint() {
                recorded.push((i, t));
            }
        }
        assert_eq!(c.mode(), Mode::LeadThrough, "{:?}", c.stop_reason());
        match dwell {
            Some(d) => {
                assert_eq!(recorded.len(), 1, "{recorded:?}");
                let (i, t) = recorded[0];
                assert_eq!(i, 0);
                // Still from the first guiding step (t = 20.004 s) for 0.3 s.
                assert!((t - 20.004 - d).abs() < 0.0045, "{t}");
                assert_eq!(c.teach().len(), 1);
                assert_eq!(c.teach().points()[0].q_rad, [0.1; 6]);
            }
            None => assert!(recorded.is_empty() && c.teach().is_empty()),
        }
    }
}
