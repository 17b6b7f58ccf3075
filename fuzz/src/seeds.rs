//! The seed corpus: small valid inputs per target, made with the cell's own encoders (and the
//! files the repository ships), so the fuzzer starts from what the decoders really receive.
//! `cargo run --example seeds` writes them to `corpus/<target>/` (see the README).

use std::path::Path;

use common::{
    codec,
    msg::{self, Stamp},
};
use robot_io::egm::{
    frame::{SensorReply, SENSOR_REPLY_MAX},
    proto,
};
use sensor::{ati, sri};

use crate::join_chunks;

/// One seed: the target, a file name, the bytes.
pub type Seed = (&'static str, String, Vec<u8>);

/// The repository's root (this crate lives in `<root>/fuzz`).
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Every seed of every target.
pub fn all() -> Vec<Seed> {
    let mut out = Vec::new();
    out.extend(bus_codec());
    out.extend(egm_robot());
    out.extend(egm_sensor());
    out.extend(sri_frames());
    out.extend(sri_text());
    out.extend(ati_rdt());
    out.extend(netftapi2());
    out.extend(files("taskfile", "tasks", "toml"));
    out.extend(program());
    out.extend(cell_config());
    out.extend(sim_scenario());
    out
}

fn stamp() -> Stamp {
    Stamp {
        seq: 42,
        source_mono_ns: 1_000_000,
    }
}

fn bus<T: serde::Serialize>(which: usize, m: &T) -> Vec<u8> {
    let mut b = vec![u8::try_from(which).unwrap_or(0)];
    b.extend(codec::encode(m).expect("a sample message encodes"));
    b
}

fn bus_codec() -> Vec<Seed> {
    use msg::*;
    let pose = Pose {
        position_m: [0.4, 0.0, 0.3],
        quat_wxyz: [0.0, 1.0, 0.0, 0.0],
    };
    let wrench = Wrench {
        force_n: [0.5, -0.25, 10.0],
        torque_nm: [0.0, 0.01, 0.0],
    };
    let motion = MotionTag {
        robot_boot: 7,
        motion_id: 3,
    };
    let q = [0.1, 0.2, -0.1, 0.0, 0.5, 0.0];
    let mut s: Vec<(String, Vec<u8>)> = vec![
        (
            "joint_state".into(),
            bus(
                0,
                &JointState {
                    stamp: stamp(),
                    cycle: 9,
                    q_rad: q,
                    qd_rad_s: [0.0, 0.01, 0.0, 0.0, 0.0, 0.0],
                    robot: RobotStatus {
                        motors_on: true,
                        external_control_active: true,
                        program_running: true,
                    },
                    period_s: 0.004,
                },
            ),
        ),
        (
            "joint_command".into(),
            bus(
                1,
                &JointCommand {
                    stamp: stamp(),
                    cycle: 9,
                    motion,
                    q_rad: q,
                    qd_rad_s: [0.0; 6],
                    flags: KinFlags {
                        near_singular: true,
                        ..Default::default()
                    },
                },
            ),
        ),
        (
            "tool_pose".into(),
            bus(
                2,
                &ToolPose {
                    stamp: stamp(),
                    cycle: 9,
                    q_rad: q,
                    tool0_in_base: pose,
                    tcp_in_base: pose,
                    jacobian_base: [[0.5; 6]; 6],
                    manipulability: 0.01,
                    period_s: 0.004,
                    ..Default::default()
                },
            ),
        ),
        (
            "wrench_sample".into(),
            bus(
                4,
                &WrenchSample {
                    stamp: stamp(),
                    device_seq: 17,
                    device_status: 0,
                    wrench_sensor: wrench,
                },
            ),
        ),
        (
            "wrench_estimate".into(),
            bus(
                5,
                &WrenchEstimate {
                    stamp: stamp(),
                    sample_seq: 41,
                    sample_mono_ns: 999_000,
                    fault: WrenchFault::None,
                    sensor: wrench,
                    tool: wrench,
                    base: wrench,
                    peak_force_n: 10.1,
                    peak_torque_nm: 0.02,
                    fast_swing_n: 0.0,
                },
            ),
        ),
        (
            "mode_command".into(),
            bus(
                6,
                &ModeCommand {
                    stamp: stamp(),
                    mode: Mode::Hold,
                },
            ),
        ),
        (
            "move_target".into(),
            bus(
                9,
                &MoveTarget {
                    stamp: stamp(),
                    tcp_in_base: pose,
                    max_speed_m_s: 0.05,
                    max_rot_speed_rad_s: 0.5,
                },
            ),
        ),
        (
            "safety_state".into(),
            bus(
                10,
                &SafetyState {
                    stamp: stamp(),
                    level: SafetyLevel::Active,
                    reason: SafetyReason::None,
                    since_cycle: 100,
                    rejected_commands: 0,
                    robot_boot: 7,
                    motion_id: 3,
                },
            ),
        ),
        (
            "estop".into(),
            bus(
                11,
                &EStop {
                    stamp: stamp(),
                    action: EStopAction::Engage,
                },
            ),
        ),
        (
            "estop_reset".into(),
            bus(
                19,
                &EStopReset {
                    stamp: stamp(),
                    scope: ResetScope::ProtectiveOnly,
                },
            ),
        ),
        (
            "motion_end".into(),
            bus(
                12,
                &MotionEnd {
                    stamp: stamp(),
                    motion,
                    stop: common::msg::StopCategory::Protective(
                        common::msg::ProtectiveCause::ForceLimit,
                    ),
                },
            ),
        ),
        (
            "plant_state".into(),
            bus(
                13,
                &PlantState {
                    stamp: stamp(),
                    t_s: 1.5,
                    q: [0.1, 0.5],
                    in_contact: true,
                    wrist_force_n: [0.0, 5.0],
                    ..Default::default()
                },
            ),
        ),
        (
            "plant_effort".into(),
            bus(
                14,
                &PlantEffortCommand {
                    stamp: stamp(),
                    effort: [0.5, -1.0],
                },
            ),
        ),
        (
            "sim_truth".into(),
            bus(
                15,
                &SimTruth {
                    stamp: stamp(),
                    t_s: 2.0,
                    in_contact: true,
                    contact_force_base_n: [0.0, 0.0, 10.0],
                    q_ref_rad: q,
                    q_ref_seqno: Some(41),
                    ..Default::default()
                },
            ),
        ),
        (
            "enable".into(),
            bus(
                16,
                &Enable {
                    stamp: stamp(),
                    source: 1,
                    token: 0xdead_beef,
                },
            ),
        ),
        (
            "guide_state".into(),
            bus(
                17,
                &GuideState {
                    stamp: stamp(),
                    motion_id: 3,
                    t_s: 1.0,
                    enabled: true,
                    damping_scale: 1.0,
                    ..Default::default()
                },
            ),
        ),
        (
            "playback_state".into(),
            bus(
                18,
                &PlaybackState {
                    stamp: stamp(),
                    motion_id: 3,
                    program: "pick-a".into(),
                    phase: PlaybackPhase::Running,
                    waypoint: 1,
                    waypoints: 3,
                    progress: 0.25,
                    t_s: 1.0,
                    duration_s: 4.0,
                    q_ref_rad: q,
                },
            ),
        ),
        (
            "hybrid_state".into(),
            bus(
                8,
                &HybridState {
                    stamp: stamp(),
                    motion_id: 3,
                    t_s: 0.5,
                    clock_s: 10.5,
                    phase: HybridPhase::Contact,
                    force_ref: [0.0, 0.0, 10.0, 0.0, 0.0, 0.0],
                    frame_in_base: pose,
                    ..Default::default()
                },
            ),
        ),
    ];
    for (i, target) in [
        CartesianTarget::Hold,
        CartesianTarget::Pose(pose),
        CartesianTarget::Twist {
            twist: Twist {
                linear_m_s: [0.0, 0.0, -0.005],
                angular_rad_s: [0.0; 3],
            },
        },
        CartesianTarget::Joints { q_rad: q },
    ]
    .into_iter()
    .enumerate()
    {
        s.push((
            format!("cartesian_command_{i}"),
            bus(
                3,
                &CartesianCommand {
                    stamp: stamp(),
                    cycle: 9,
                    motion,
                    target,
                },
            ),
        ));
    }
    // Hybrid tasks: the shipped task files as `cell task` sends them.
    for (name, text) in text_files("tasks", "toml") {
        let task = control::taskfile::parse(&text).expect("a shipped task parses");
        s.push((format!("hybrid_task_{name}"), bus(7, &task)));
    }
    s.into_iter().map(|(n, b)| ("bus_codec", n, b)).collect()
}

/// The emulated IRC5's `EgmRobot` datagrams (`sim::controller::Controller::robot_message`),
/// plus the newer schema's fields.
fn egm_datagrams() -> Vec<Vec<u8>> {
    use sim::{
        controller::{Controller, SessionParams},
        world::{ServoModel, ServoParams},
    };
    let servo = ServoModel::new(
        ServoParams::default(),
        kinematics::JointLimits::irb120(),
        crate::HOME,
    );
    let mut c = Controller::new(servo, SessionParams::ALWAYS_ON);
    let mut out = Vec::new();
    for k in 0..4u32 {
        c.step(0.004);
        let m = c.robot_message(k * 4, Some(([374.0, 0.0, 630.0], [0.0, 0.0, 1.0, 0.0])));
        out.push(m.encode());
    }
    // The newer schema: measuredForce (fcActive + force), moveIndex, collision info.
    let mut m = proto::decode_robot(&c.robot_message(16, None).encode())
        .expect("the emulator's datagram decodes");
    m.measured_force = Some(prost::Message::encode_to_vec(&proto::EgmMeasuredForce {
        fc_active: Some(true),
        force: vec![1.0, 2.0, 3.0, 0.1, 0.2, 0.3],
    }));
    m.move_index = Some(5);
    m.utilization_rate = Some(12.5);
    m.collision_info = Some(proto::EgmCollisionInfo {
        collsion_triggered: Some(false),
        coll_det_quota: vec![0.1; 6],
    });
    out.push(proto::encode_robot(&m));
    // V1.1 measuredForce.
    let mut m = proto::decode_robot(&c.robot_message(20, None).encode())
        .expect("the emulator's datagram decodes");
    m.measured_force = Some(prost::Message::encode_to_vec(&proto::EgmMeasuredForceV11 {
        force: vec![0.5; 6],
    }));
    out.push(proto::encode_robot(&m));
    out
}

fn egm_robot() -> Vec<Seed> {
    let dgs = egm_datagrams();
    let mut s = Vec::new();
    // One controller cycle every 4 ms, with and without commands.
    let stream: Vec<(u8, &[u8])> = dgs.iter().map(|d| (0x44, d.as_slice())).collect();
    s.push(("stream_commanded".to_string(), join_chunks(&stream)));
    let stream: Vec<(u8, &[u8])> = dgs.iter().map(|d| (0x04, d.as_slice())).collect();
    s.push(("stream_idle".to_string(), join_chunks(&stream)));
    // A late and a duplicate datagram, then a shutdown.
    let d = &dgs;
    let stream: Vec<(u8, &[u8])> = vec![
        (0x64, &d[0]),
        (0x64, &d[2]),
        (0x64, &d[1]),
        (0x64, &d[2]),
        (0x64, &d[3]),
        (0x84, &d[3]),
    ];
    s.push(("late_duplicate_shutdown".to_string(), join_chunks(&stream)));
    for (i, dg) in dgs.iter().enumerate() {
        s.push((format!("single_{i}"), join_chunks(&[(0x44, dg)])));
    }
    s.into_iter().map(|(n, b)| ("egm_robot", n, b)).collect()
}

fn egm_sensor() -> Vec<Seed> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for (k, qd) in [
        (0u32, None),
        (1, Some([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])),
        (2, Some([0.5; 6])),
    ] {
        let r = SensorReply {
            seqno: k,
            tm: 4 * k,
            q_deg: [1.0, 2.0, -1.0, 0.0, 28.6, 0.0],
            qd_deg: qd,
        };
        let mut buf = [0u8; SENSOR_REPLY_MAX];
        parts.push(r.encode(&mut buf).to_vec());
    }
    let all: Vec<(u8, &[u8])> = parts.iter().map(|p| (0, p.as_slice())).collect();
    let mut s = vec![("replies".to_string(), join_chunks(&all))];
    let stopped: Vec<(u8, &[u8])> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| (u8::try_from(i % 4).unwrap_or(0), p.as_slice()))
        .collect();
    s.push((
        "replies_motors_off_egm_stopped".to_string(),
        join_chunks(&stopped),
    ));
    s.into_iter().map(|(n, b)| ("egm_sensor", n, b)).collect()
}

fn sri_frames() -> Vec<Seed> {
    let e: Vec<u8> = (0..3u16)
        .flat_map(|k| {
            sri::encode_frame(&sri::Frame {
                package_no: k,
                data: sri::FrameData::Calibrated([0.32, 1.41, -0.14, 0.004, -0.003, 1.1e-5]),
            })
        })
        .collect();
    let c: Vec<u8> = (65534..=65535u16)
        .chain(0..2)
        .flat_map(|k| {
            sri::encode_frame(&sri::Frame {
                package_no: k,
                data: sri::FrameData::Raw([32768, 33768, 31768, 32769, 32767, 65535]),
            })
        })
        .collect();
    let mut noisy = b"ACK+GSD$OK\r\n\xaa".to_vec();
    noisy.extend_from_slice(&c);
    noisy.extend_from_slice(&c[..10]);
    vec![
        // mode byte: bit 0 = format (1: E), bits 1..: read size − 1.
        (
            "sri_frames",
            "e_frames".to_string(),
            [&[1u8 | (30 << 1)][..], &e].concat(),
        ),
        (
            "sri_frames",
            "c_frames_wrapping".to_string(),
            [&[19u8 << 1][..], &c].concat(),
        ),
        (
            "sri_frames",
            "c_noise_bytewise".to_string(),
            [&[0u8][..], &noisy].concat(),
        ),
    ]
}

fn sri_text() -> Vec<Seed> {
    let p = sim::sensor::sri::default_params();
    let acks = [
        sri::encode_ack("SMPR", "1000"),
        sri::encode_ack("SGDM", &sri::format_format(sri::DataFormat::RawCounts)),
        sri::encode_ack("DCKMD", "SUM"),
        sri::encode_ack("AMPZ", &sri::format_six(&p.amp_zero)),
        sri::encode_ack("CHNAPG", &sri::format_six(&p.gain)),
        sri::encode_ack("EXMV", &sri::format_six(&p.excitation_v)),
        sri::encode_ack("DCPM", &sri::format_matrix(&p.decoupling)),
    ];
    let mut parts: Vec<(u8, Vec<u8>)> = acks.iter().map(|a| (0, a.as_bytes().to_vec())).collect();
    let commands = [
        sri::Command::StopStream,
        sri::Command::SetSampleRate(1000),
        sri::Command::SetFormat(sri::DataFormat::Calibrated),
        sri::Command::SetCheckModeSum,
        sri::Command::Query(sri::Param::Decoupling),
        sri::Command::SetDecoupling(Box::new(p.decoupling)),
        sri::Command::StartStream,
        sri::Command::GetOne,
    ];
    parts.extend(commands.iter().map(|c| (1, c.encode().into_bytes())));
    let refs: Vec<(u8, &[u8])> = parts.iter().map(|(h, b)| (*h, b.as_slice())).collect();
    // A reply split over two reads, with stream bytes before it.
    let whole = acks[3].as_bytes();
    let mut first = vec![0xaa, 0x55, 0x00];
    first.extend_from_slice(&whole[..10]);
    let split: Vec<(u8, &[u8])> = vec![(0, &first), (0, &whole[10..])];
    vec![
        ("sri_text", "session".to_string(), join_chunks(&refs)),
        ("sri_text", "split_reply".to_string(), join_chunks(&split)),
    ]
}

fn ati_rdt() -> Vec<Seed> {
    let rec = |seq: u32, status: u32| ati::RdtRecord {
        rdt_sequence: seq,
        ft_sequence: seq.wrapping_mul(7),
        status,
        counts: [1_000_000, -1_000_000, 2_500_000, 1000, -1, 0],
    };
    let one = rec(0x102, 0).encode().to_vec();
    let buffered: Vec<u8> = [rec(u32::MAX, 0), rec(0, 0x8001_0000), rec(2, 0x8002_0004)]
        .iter()
        .flat_map(|r| r.encode())
        .collect();
    vec![
        ("ati_rdt", "record".to_string(), one),
        ("ati_rdt", "buffered_records".to_string(), buffered),
        (
            "ati_rdt",
            "request_start".to_string(),
            ati::RdtRequest::new(ati::RdtCommand::StartRealTime, 0)
                .encode()
                .to_vec(),
        ),
        (
            "ati_rdt",
            "request_bias".to_string(),
            ati::RdtRequest::new(ati::RdtCommand::SetBias, 10)
                .encode()
                .to_vec(),
        ),
    ]
}

fn netftapi2() -> Vec<Seed> {
    let emulated = sim::sensor::ati::AtiEmulatorConfig::default().netftapi2_xml();
    let minimal = "<?xml version=\"1.0\"?><netft><prodname>Net F/T</prodname>\
                   <cfgcpf>1000000</cfgcpf><cfgcpt>1000</cfgcpt><scfgfu>lbf</scfgfu>\
                   <scfgtu>lbf-in</scfgtu><comrdtrate>7000</comrdtrate></netft>";
    vec![
        ("netftapi2", "emulated".to_string(), emulated.into_bytes()),
        (
            "netftapi2",
            "imperial".to_string(),
            minimal.as_bytes().to_vec(),
        ),
    ]
}

/// The text files `dir/*.ext` of the repository, sorted by name.
fn text_files(dir: &str, ext: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(root().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
    for entry in rd.flatten() {
        let p = entry.path();
        if p.extension().and_then(|e| e.to_str()) == Some(ext) {
            let name = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("file")
                .to_string();
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            out.push((name, text));
        }
    }
    out.sort();
    out
}

fn files(target: &'static str, dir: &str, ext: &str) -> Vec<Seed> {
    text_files(dir, ext)
        .into_iter()
        .map(|(n, t)| (target, n, t.into_bytes()))
        .collect()
}

fn program() -> Vec<Seed> {
    use control::program::{PayloadSpec, Program, ToolSpec, Waypoint};
    let arm = kinematics::Arm::irb120();
    let tool = ToolSpec {
        translation_m: [0.0, 0.0, 0.12],
        rpy_deg: [0.0, 0.0, 0.0],
    };
    let qs = [
        [0.0, 10.0, 20.0, 0.0, 60.0, 0.0],
        [15.0, 20.0, 10.0, 5.0, 55.0, -10.0],
        [-10.0, 5.0, 25.0, 0.0, 58.0, 20.0],
    ];
    let mut waypoints = Vec::new();
    for (i, q) in qs.iter().enumerate() {
        let q_rad = q.map(f64::to_radians);
        let mut w = Waypoint::from_joints(&format!("wp{i}"), &q_rad, &arm, &tool)
            .expect("the sample joints have forward kinematics");
        if i == 1 {
            w.dwell_s = Some(0.5);
            w.speed_scale = Some(0.5);
        }
        waypoints.push(w);
    }
    let p = Program {
        format_version: control::program::FORMAT_VERSION,
        name: "pick-a".into(),
        created: "2025-05-01T10:00:00Z".into(),
        arm_model: "irb120".into(),
        tool,
        payload: PayloadSpec {
            mass_kg: 0.8,
            com_m: [0.0, 0.0, 0.05],
        },
        waypoints,
    };
    let saved = p.to_toml();
    assert_eq!(
        Program::from_toml(&saved).ok().as_ref(),
        Some(&p),
        "the sample program round-trips"
    );
    vec![("program", "taught".to_string(), saved.into_bytes())]
}

fn cell_config() -> Vec<Seed> {
    let mut s = files("cell_config", "deploy/config", "toml");
    s.push((
        "cell_config",
        "set_overrides".to_string(),
        b"--set robot_io.cycle_ms=4\n--set sim.scenario=\"scenarios/table-contact.toml\"\n\
          --set cell.id=lab-1\n"
            .to_vec(),
    ));
    s
}

fn sim_scenario() -> Vec<Seed> {
    let mut s = vec![
        ("empty".to_string(), b"{}".to_vec()),
        (
            "load".to_string(),
            br#"{"load": "scenarios/table-contact.toml", "arm": true}"#.to_vec(),
        ),
        (
            "set".to_string(),
            br#"{"load": "scenarios/table-contact.toml", "set": {"surfaces[0].stiffness_n_per_m": 50000.0, "plant.wrist_force_noise_std_n": 0.1}, "reset": true}"#
                .to_vec(),
        ),
    ];
    for (rel, text) in common::config::BUILTIN_SCENARIOS {
        let body = serde_json::json!({ "load_toml": text, "reset": true });
        let name = rel
            .trim_start_matches("scenarios/")
            .trim_end_matches(".toml")
            .to_string();
        s.push((format!("load_toml_{name}"), body.to_string().into_bytes()));
    }
    s.into_iter().map(|(n, b)| ("sim_scenario", n, b)).collect()
}
