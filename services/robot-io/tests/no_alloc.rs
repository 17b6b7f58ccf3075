//! robot-io's per-cycle work, counted with a global allocator:
//! - the supervisor's step (limits, hold, motion tags) and the latency bookkeeping allocate
//!   nothing;
//! - the EGM datagram path (`EgmCore::on_datagram`: the allocation-free decode of
//!   `egm::frame`, the session, the supervisor, the reply and its encoding into a fixed
//!   buffer) allocates nothing either, with the controller's newer fields (measuredForce,
//!   test signals, planned) in every datagram. Before `egm::frame` it was 6 allocations per
//!   datagram in prost's `Vec` fields and the encoded reply.

use common::{
    msg::{JointCommand, MotionTag, RobotStatus},
    testing::{allocations_in, CountingAlloc},
};
use robot_io::{
    egm::{
        cycle::EgmCore,
        frame::SENSOR_REPLY_MAX,
        session::{EgmSession, SessionParams},
    },
    latency::{CycleLatency, LatestCommand},
    supervisor::{CycleInput, Supervisor, SupervisorParams},
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn supervisor() -> Supervisor {
    Supervisor::new(SupervisorParams {
        command_timeout_s: 0.008,
        limits: kinematics::JointLimits::irb120(),
        max_accel: [20.0; 6],
        robot_boot: 7,
        measured_limit_margin_rad: 0.01,
        command_lead_s: 0.004,
        resume_ramp_s: robot_io::supervisor::DEFAULT_RESUME_RAMP_S,
        protective_retrace_s: robot_io::supervisor::DEFAULT_PROTECTIVE_RETRACE_S,
        stale_contact_n: robot_io::supervisor::DEFAULT_STALE_CONTACT_N,
    })
}

fn ready() -> RobotStatus {
    RobotStatus {
        motors_on: true,
        external_control_active: true,
        program_running: true,
    }
}

fn command(k: u64) -> JointCommand {
    let a = 0.2 * (k as f64 * 0.004).sin();
    JointCommand {
        cycle: k,
        motion: MotionTag {
            robot_boot: 7,
            motion_id: 3,
        },
        q_rad: [a, 0.1, 0.1, 0.0, 0.5, a],
        ..Default::default()
    }
}

#[test]
fn the_supervisor_step_and_the_latency_bookkeeping_do_not_allocate() {
    let mut sup = supervisor();
    let mut lat = CycleLatency::new();
    let mut q = [0.0, 0.1, 0.1, 0.0, 0.5, 0.0];
    let cycle = |sup: &mut Supervisor, lat: &mut CycleLatency, k: u64, q: &mut [f64; 6]| {
        let c = command(k);
        let out = sup.step(&CycleInput {
            cycle: k,
            now_s: k as f64 * 0.004,
            dt_s: 0.004,
            q_measured: Some(*q),
            robot: ready(),
            command: Some((&c, k as f64 * 0.004 - 0.001)),
            contact_force_base_n: None,
        });
        if let Some(r) = out.q_ref {
            *q = r;
        }
        lat.on_cycle(
            k,
            k * 4_000_000,
            Some(LatestCommand {
                cycle: k.saturating_sub(1),
                at_ns: k * 4_000_000 - 1_000_000,
                fresh: true,
            }),
        );
    };
    for k in 0..50 {
        cycle(&mut sup, &mut lat, k, &mut q);
    }
    let ((), n) = allocations_in(|| {
        for k in 50..1050 {
            cycle(&mut sup, &mut lat, k, &mut q);
        }
    });
    assert_eq!(n, 0, "{n} allocations in 1000 supervisor cycles");
    assert!(lat.end_to_end.count() > 1000);
}

#[test]
fn the_egm_datagram_path_does_not_allocate() {
    let mut core = EgmCore::new(
        EgmSession::new(SessionParams {
            nominal_cycle_s: 0.004,
            silence_timeout_s: 0.1,
            send_speed_ref: true,
        }),
        supervisor(),
    );
    let mut ctl = sim_like::Robot;
    for k in 0..50u64 {
        let bytes = ctl.datagram(k);
        let c = command(k);
        let _ = core.on_datagram(&bytes, k as f64 * 0.004, Some((&c, k as f64 * 0.004)));
    }
    let datagrams: Vec<Vec<u8>> = (50..1050u64).map(|k| ctl.datagram(k)).collect();
    let cmds: Vec<JointCommand> = (50..1050u64).map(command).collect();
    let mut tx = [0u8; SENSOR_REPLY_MAX];
    let (replies, n) = allocations_in(|| {
        let mut replies = 0u64;
        for (i, (b, c)) in datagrams.iter().zip(&cmds).enumerate() {
            let t = (50 + i) as f64 * 0.004;
            let h = core.on_datagram(b, t, Some((c, t)));
            if let Some(r) = h.reply {
                let bytes = r.encode(&mut tx);
                replies += u64::from(!bytes.is_empty());
            }
        }
        replies
    });
    assert_eq!(replies, 1000);
    assert_eq!(n, 0, "{n} allocations in 1000 EGM datagrams");
}

/// A minimal EGM controller for the test (the simulator's is in `cell-sim`).
mod sim_like {
    use prost::Message;
    use robot_io::egm::proto::{
        self, EgmCartesian, EgmClock, EgmFeedBack, EgmHeader, EgmMciState, EgmMeasuredForceV11,
        EgmMotorState, EgmPlanned, EgmPose, EgmQuaternion, EgmRapidCtrlExecState, EgmRobot,
        EgmTestSignals, MciStateType, MessageType, MotorStateType, RapidCtrlExecStateType,
    };

    #[derive(Default)]
    pub struct Robot;

    impl Robot {
        pub fn datagram(&mut self, k: u64) -> Vec<u8> {
            let q = [0.0, 5.7, 5.7, 0.0, 28.6, 0.0];
            let msg = EgmRobot {
                header: Some(EgmHeader {
                    seqno: Some(k as u32 + 1),
                    tm: Some((k * 4) as u32),
                    mtype: Some(MessageType::Data as i32),
                }),
                feed_back: Some(EgmFeedBack {
                    joints: Some(proto::joints(&q)),
                    cartesian: Some(EgmPose {
                        pos: Some(EgmCartesian {
                            x: 374.0,
                            y: 0.0,
                            z: 630.0,
                        }),
                        orient: Some(EgmQuaternion {
                            u0: 0.0,
                            u1: 0.0,
                            u2: 1.0,
                            u3: 0.0,
                        }),
                        euler: None,
                    }),
                    time: Some(EgmClock {
                        sec: 1_700_000_000 + k / 250,
                        usec: (k % 250) * 4000,
                    }),
                    ..Default::default()
                }),
                planned: Some(EgmPlanned {
                    joints: Some(proto::joints(&q)),
                    ..Default::default()
                }),
                test_signals: Some(EgmTestSignals {
                    signals: vec![0.5; 6],
                }),
                measured_force: Some(
                    EgmMeasuredForceV11 {
                        force: vec![1.0, 2.0, 3.0, 0.1, 0.2, 0.3],
                    }
                    .encode_to_vec(),
                ),
                utilization_rate: Some(12.5),
                motor_state: Some(EgmMotorState {
                    state: MotorStateType::On as i32,
                }),
                mci_state: Some(EgmMciState {
                    state: MciStateType::Running as i32,
                }),
                rapid_exec_state: Some(EgmRapidCtrlExecState {
                    state: RapidCtrlExecStateType::Running as i32,
                }),
                ..Default::default()
            };
            proto::encode_robot(&msg)
        }
    }
}
