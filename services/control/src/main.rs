//! `cell-control`: the cell's control modes.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

#[derive(Parser)]
#[command(
    version,
    about = "Control: hold, move (lead-through, hybrid and playback arrive with their issues)"
)]
struct Args {
    #[command(flatten)]
    cfg: ConfigArgs,
    #[command(flatten)]
    bus: BusArgs,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    common::service::run_service_rt(
        "control",
        args.bus,
        args.cfg,
        |l| {
            let c = l.section::<control::node::ControlConfig>("control");
            let rt = c.rt.clone();
            (c, rt)
        },
        control::node::run,
    )
}
