//! `cell-sim`: simulated hardware at the wire — an EGM robot controller and an F/T sensor box
//! around the world model.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

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
    sim::node::service_main(args.cfg, args.bus)
}
