//! `cell-force`: force processing.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};
use kinematics::config::load_arm;

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
    common::service::run_service(
        "force",
        args.bus,
        args.cfg,
        |l| {
            let f: force::node::ForceConfig = l.section("force");
            (f, load_arm(l))
        },
        force::node::run,
    )
}
