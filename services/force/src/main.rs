//! `cell-force`: force processing.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

#[derive(Parser)]
#[command(
    version,
    about = "Force processing: raw wrench samples → wrench estimate"
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
        "force",
        args.bus,
        args.cfg,
        |l| l.section::<force::node::ForceConfig>("force"),
        force::node::run,
    )
}
