//! `cell-sim`: simulated hardware at the wire — an EGM robot controller and an F/T sensor box
//! around the world model.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};
use kinematics::config::load_arm;

#[derive(Parser)]
#[command(
    version,
    about = "Simulated hardware: EGM robot controller + SRI/ATI F/T sensor emulators"
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
        "sim",
        args.bus,
        args.cfg,
        |l| {
            let s: sim::node::SimConfig = l.section("sim");
            (s, load_arm(l))
        },
        sim::node::run,
    )
}
