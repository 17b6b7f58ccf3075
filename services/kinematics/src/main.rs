//! `cell-kinematics`: tool pose and Jacobian for every joint state; IK for every Cartesian command.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

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
    kinematics::node::service_main(args.cfg, args.bus)
}
