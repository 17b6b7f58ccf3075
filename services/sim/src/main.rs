//! `cell-sim`: simulated hardware at the wire — an EGM robot controller and an F/T sensor box
//! around the world model.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};
use kinematics::{config::ArmSection, Arm};

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
            let arm: ArmSection = l.section("arm");
            // Problems were recorded by `section`; the fallback is never run.
            (s, arm.build().unwrap_or_else(|_| Arm::irb120()))
        },
        sim::node::run,
    )
}
