//! `cell-robot-io`: robot driver and cell clock.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

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
    robot_io::node::service_main(args.cfg, args.bus)
}
