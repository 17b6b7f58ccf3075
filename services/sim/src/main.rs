//! `cell-sim`: simulated hardware. Not built yet: exits with a clear message.

fn main() -> std::process::ExitCode {
    eprintln!(
        "cell-sim: the simulated EGM robot and F/T sensors are not implemented yet; \
         the default cell uses robot-io's ideal robot (robot_io.driver = \"ideal\")"
    );
    std::process::ExitCode::from(2)
}
