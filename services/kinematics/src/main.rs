//! `cell-kinematics`: tool pose and Jacobian for every joint state; IK for every Cartesian command.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};
use kinematics::{config::ArmSection, node::KinematicsConfig, Arm};

#[derive(Parser)]
#[command(
    version,
    about = "Kinematics: FK/Jacobian per joint state, IK per Cartesian command"
)]
struct Args {
    #[command(flatten)]
    cfg: ConfigArgs,
    #[command(flatten)]
    bus: BusArgs,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    common::service::run_service(
        "kinematics",
        args.bus,
        args.cfg,
        |l| {
            let k: KinematicsConfig = l.section("kinematics");
            let arm: ArmSection = l.section("arm");
            // Problems were recorded by `section`; the fallback is never run.
            (k, arm.build().unwrap_or_else(|_| Arm::irb120()))
        },
        kinematics::node::run,
    )
}
