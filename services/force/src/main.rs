//! `cell-force`: force processing.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};
use kinematics::{config::ArmSection, Arm};

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
            let arm: ArmSection = l.section("arm");
            // Problems were recorded by `section`; the fallback is never run.
            (f, arm.build().unwrap_or_else(|_| Arm::irb120()))
        },
        force::node::run,
    )
}
