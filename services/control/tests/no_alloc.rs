//! Control's per-cycle step allocates nothing in steady state: the hybrid law (10 N against a
//! spring surface, x on a sine) and hand guiding (admittance), each through
//! `ControlCore::step_with_wrench`, the call the service makes every robot cycle. Counted with
//! a global allocator after a warm-up (the first cycles set up the run).

use common::{
    msg::{SafetyLevel, SafetyReason, SafetyState, WrenchFault},
    testing::{allocations_in, CountingAlloc},
};
use control::core::{ControlCore, WrenchInput};
use nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn active(core: &ControlCore) -> SafetyState {
    SafetyState {
        level: SafetyLevel::Active,
        reason: SafetyReason::None,
        robot_boot: 42,
        motion_id: core.motion_tag().map_or(0, |m| m.motion_id),
        ..Default::default()
    }
}

/// Runs `cycles` robot cycles of 4 ms; the TCP follows the commanded twist or pose exactly,
/// a spring surface 2 mm under the start pushes back (2·10⁴ N/m).
/// `cycles` steps from cycle `t0`; with `enable`, the operator's keep-alive with that token
/// every cycle (the deadman is on robot time).
fn run(
    core: &mut ControlCore,
    tcp: &mut Isometry3<f64>,
    t0: u64,
    cycles: u64,
    enable: Option<u64>,
) {
    let table_z = 0.198;
    for k in t0..t0 + cycles {
        if let Some(token) = enable {
            core.on_enable(token, "");
        }
        let now_s = k as f64 * 0.004;
        core.set_cycle(k, 0.004);
        let pen = (table_z - tcp.translation.z).max(0.0);
        let w: WrenchInput = Ok((Vector3::new(0.0, 0.0, 2e4 * pen), Vector3::zeros()));
        match core.step_with_wrench(tcp, now_s, &w) {
            Some(common::msg::CartesianTarget::Twist { twist }) => {
                tcp.translation.vector += Vector3::from(twist.linear_m_s) * 0.004;
            }
            Some(common::msg::CartesianTarget::Pose(p)) => {
                tcp.translation.vector = Vector3::from(p.position_m);
            }
            _ => {}
        }
        let s = active(core);
        core.on_safety(&s);
    }
}

fn start() -> (ControlCore, Isometry3<f64>) {
    let mut core = ControlCore::new(1);
    let s = SafetyState {
        level: SafetyLevel::Hold,
        reason: SafetyReason::NoCommandYet,
        robot_boot: 42,
        ..Default::default()
    };
    core.on_safety(&s);
    let tcp = Isometry3::from_parts(
        Translation3::new(0.35, 0.0, 0.2),
        UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
    );
    (core, tcp)
}

#[test]
fn a_hybrid_cycle_does_not_allocate() {
    let (mut core, mut tcp) = start();
    let task = control::taskfile::parse(
        "name = \"press\"\nrobot = \"arm\"\nframe = \"base\"\nframe_rpy_deg = [180.0, 0.0, 0.0]\n\
         force_axes = [\"z\"]\nfrom_contact = true\nduration_s = 600.0\n[reference]\nz = 10.0\n\
         x = { sine = { amplitude = 0.01, freq_hz = 0.2 } }\n",
    )
    .expect("task");
    let setup = control::config::HybridConfig::default()
        .arm_setup(&task, &task.frame.to_isometry().rotation)
        .expect("within the cell's limits");
    core.request_hybrid(task, setup, Some(WrenchFault::None))
        .expect("hybrid");
    run(&mut core, &mut tcp, 0, 500, None);
    assert_eq!(
        core.mode(),
        common::msg::Mode::Hybrid,
        "{:?}",
        core.stop_reason()
    );
    let ((), n) = allocations_in(|| run(&mut core, &mut tcp, 500, 1000, None));
    assert_eq!(
        core.mode(),
        common::msg::Mode::Hybrid,
        "{:?}",
        core.stop_reason()
    );
    assert_eq!(n, 0, "{n} allocations in 1000 hybrid cycles");
}

/// The guide session's deadman token.
const TOKEN: u64 = 77;

#[test]
fn a_guiding_cycle_does_not_allocate() {
    let (mut core, mut tcp) = start();
    let params = control::config::ControlConfig::default().guide;
    core.request_guide(params, Some(WrenchFault::None), TOKEN, "")
        .expect("guide");
    run(&mut core, &mut tcp, 0, 200, Some(TOKEN));
    assert_eq!(
        core.mode(),
        common::msg::Mode::LeadThrough,
        "{:?}",
        core.stop_reason()
    );
    let ((), n) = allocations_in(|| run(&mut core, &mut tcp, 200, 1000, Some(TOKEN)));
    assert_eq!(
        core.mode(),
        common::msg::Mode::LeadThrough,
        "{:?}",
        core.stop_reason()
    );
    assert_eq!(n, 0, "{n} allocations in 1000 guiding cycles");
}
