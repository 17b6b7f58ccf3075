//! `cell-control`: the cell's control modes.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

#[derive(Parser)]
#[command(
    version,
    about = "Control: hold, move, hybrid position/force tasks, hand-guided lead-through with teach, and playback"
)]
struct Args {
    #[command(flatten)]
    cfg: ConfigArgs,
    #[command(flatten)]
    bus: BusArgs,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    common::service::run_service_rt(
        "control",
        args.bus,
        args.cfg,
        |l| {
            let c = l.section::<control::node::ControlConfig>("control");
            let rt = c.rt.clone();
            let a: kinematics::config::ArmSection = l.section("arm");
            let arm = a.build().unwrap_or_else(|_| kinematics::Arm::irb120());
            let arm_model = serde_json::to_value(a.model)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "custom".into());
            let k: kinematics::node::KinematicsConfig = l.section("kinematics");
            (
                control::node::ControlSetup {
                    cfg: c,
                    arm,
                    servo: k.servo_params(),
                    arm_model,
                },
                rt,
            )
        },
        control::node::run,
    )
}
