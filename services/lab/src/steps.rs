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
    let target = kinematics::node::to_msg_pose(&pose);
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
                match stall::check(s, cell, &step, &why, started).await {
                    Ok(retry) if attempt == 0 => {
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
    let mut last = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        match cli::request(s, &key, None, Duration::from_secs(10)).await {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("tare failed")))
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
