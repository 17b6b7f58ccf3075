//! `cell-control`: the cell's control modes.

use clap::Parser;
use common::{bus::BusArgs, service::ConfigArgs};

#[derive(Parser)]
#[command(
    version,
    about = "Control: hold, move, hybrid position/force tasks, hand-guided lead-through with teach, and playback"
)]
struct Args {
    #[command(flatten)]
    cfg: ConfigArgs,
    #[command(flatten)]
    bus: BusArgs,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    control::node::service_main(args.cfg, args.bus)
}
