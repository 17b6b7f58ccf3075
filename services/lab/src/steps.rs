//! The scripted steps every experiment and the demo share: the simulator's scenario RPC, a
//! placement move (repeated once only after a proven host stall or a move that did not
//! settle), and a tare. Bus I/O only; no scoring.

use std::time::Duration;

use anyhow::Context;
use client::cli;
use common::config::CellSection;
use serde_json::Value;
use zenoh::Session;

use crate::stall;

/// One request to the simulator's scenario RPC.
pub async fn scenario(s: &Session, cell: &CellSection, body: Value) -> anyhow::Result<Value> {
    let key = format!("cell/{}/sim/rpc/scenario", cell.id);
    cli::request(s, &key, Some(body.to_string()), Duration::from_secs(3))
        .await
        .with_context(|| format!("scenario {body}"))
}

/// Moves the tool (pointing down) to `xyz_mm` at `speed_mm_s` and waits until it is still.
pub async fn place(
    s: &Session,
    cell: &CellSection,
    xyz_mm: [f64; 3],
    speed_mm_s: f64,
) -> anyhow::Result<()> {
    let pose =
        kinematics::pose::pose_from_abb(xyz_mm, [0.0, 0.0, 1.0, 0.0]).context("placement pose")?;
    let target = common::msg::Pose::from_isometry(&pose);
    let mut last = None;
    // A second attempt only when a proven host stall's hold ended the first move (robot-io
    // held on an EGM silence of the frozen host: the motion ends and must be commanded
    // again); the repeat is said and noted for the running case to report
    // ([`stall::take_setup_retries`]). Any other end — a stop, a refusal, a move that did not
    // arrive within 20 s — fails at once with its reason.
    for attempt in 0..2 {
        let started = stall::Attempt::start();
        let before = cli::control_errors(s, cell).await;
        cli::move_to(s, cell, target, speed_mm_s * 1e-3, 45f64.to_radians()).await?;
        match cli::wait_move(s, cell, &target, before, Duration::from_secs(20), false).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                let why = format!("{e:#}");
                let step = format!("placement at {xyz_mm:?} mm");
                if attempt > 0 {
                    // No third attempt: nothing is proven (or reported as a repeat) again.
                    last = Some(e);
                    break;
                }
                match stall::check(s, cell, &step, &why, started).await {
                    Ok(retry) => {
                        eprintln!("      {}", retry.describe());
                        stall::note_setup_retry(&retry);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        last = Some(e);
                        continue;
                    }
                    _ => {
                        last = Some(e);
                        break;
                    }
                }
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("move failed")))
        .with_context(|| format!("moving to {xyz_mm:?} mm"))
}

/// Tares, retrying while the estimate settles (the force service refuses a tare while the
/// wrench is not static).
pub async fn tare(s: &Session, cell: &CellSection) -> anyhow::Result<()> {
    let key = force::node::rpc_key(&cell.id, "tare");
    let mut tries = 0;
    loop {
        tries += 1;
        let e = match cli::request(s, &key, None, Duration::from_secs(10)).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let why = e.to_string();
        // Only a named, passing cause is waited out (for up to 12 s); anything else — contact
        // during the window, a faulted sensor — is the answer.
        match tare_transient(&why) {
            Some(cause) if tries < 40 => {
                if tries == 1 || tries % 10 == 0 {
                    eprintln!("      tare: {cause} ({why}); again in 0.3 s");
                }
                report_retry_to_ci("tare", &format!("{cause}: {why}"));
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            _ => return Err(e),
        }
    }
}

/// The tare refusals that pass by themselves, named: the sensor not streaming yet (a cell
/// just started, a sensor reconnecting), another window still open, the arm still settling
/// after a placement, a tool pose late from a loaded host. `None`: a refusal to report.
pub fn tare_transient(why: &str) -> Option<&'static str> {
    if why.contains("no sensor samples") || why.contains("sensor stale") {
        Some("the sensor is not streaming yet")
    } else if why.starts_with("busy") {
        Some("another tare or capture is in progress")
    } else if why.contains("the robot is moving") {
        Some("the arm is still settling")
    } else if why.contains("no fresh tool pose") {
        Some("the tool pose is late")
    } else if why.contains("no reply from") {
        Some("the force service is not answering yet")
    } else {
        None
    }
}

/// A repeat of a step for a named cause, into the CI report when a harness collects one
/// (`CELL_TEST_REPORT`): one line per repeat.
pub fn report_retry_to_ci(step: &str, why: &str) {
    let Some(path) = std::env::var_os("CELL_TEST_REPORT") else {
        return;
    };
    let line = format!("retry\tcell {step}\t{}\n", why.replace(['\t', '\n'], " "));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        use std::io::Write;
        let _ = f.write_all(line.as_bytes());
    }
}

/// [`place`] then [`tare`].
pub async fn place_and_tare(
    s: &Session,
    cell: &CellSection,
    xyz_mm: [f64; 3],
    speed_mm_s: f64,
) -> anyhow::Result<()> {
    place(s, cell, xyz_mm, speed_mm_s).await?;
    tare(s, cell).await.context("tare")
}

#[cfg(test)]
mod tests {
    use super::tare_transient;

    #[test]
    fn only_named_passing_tare_refusals_are_waited_out() {
        assert!(tare_transient("no sensor samples").is_some());
        assert!(tare_transient("busy: a tare or capture is in progress").is_some());
        assert!(tare_transient("the robot is moving").is_some());
        assert!(tare_transient("tare refused: 12.0 N of contact force").is_none());
        assert!(tare_transient("3 faulted samples (last: Saturated) during the window").is_none());
    }
}
