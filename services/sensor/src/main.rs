//! `cell-sensor`: F/T sensor acquisition.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

#[derive(Parser)]
#[command(
    version,
    about = "F/T sensor acquisition: device protocol → raw wrench samples"
)]
struct Args {
    #[command(flatten)]
    cfg: ConfigArgs,
    #[command(flatten)]
    bus: BusArgs,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    sensor::node::service_main(args.cfg, args.bus)
}
