//! `cell-robot-io`: robot driver and cell clock.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};
use kinematics::config::ArmSection;

#[derive(Parser)]
#[command(
    version,
    about = "Robot I/O: drives the robot, publishes joint state each cycle, holds on stale commands"
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
        "robot-io",
        args.bus,
        args.cfg,
        |l| {
            let rio: robot_io::config::RobotIoConfig = l.section("robot_io");
            let arm: ArmSection = l.section("arm");
            let limits = arm
                .params()
                .map(|p| p.limits)
                .unwrap_or(kinematics::JointLimits::irb120());
            let rt = rio.rt.clone();
            ((rio, limits), rt)
        },
        robot_io::node::run,
    )
}
