//! `cell-kinematics`: tool pose and Jacobian for every joint state; IK for every Cartesian command.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};
use kinematics::{config::load_arm, node::KinematicsConfig};

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
            (k, load_arm(l))
        },
        kinematics::node::run,
    )
}
