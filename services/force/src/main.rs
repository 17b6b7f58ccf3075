//! `cell-force`: force processing.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

#[derive(Parser)]
#[command(
    version,
    about = "Force processing: raw wrench samples → bias/gravity-compensated, filtered wrench estimate"
)]
struct Args {
    #[command(flatten)]
    cfg: ConfigArgs,
    #[command(flatten)]
    bus: BusArgs,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    force::node::service_main(args.cfg, args.bus)
}
