//! `cell hybrid TASK.toml`'s bus side: publishes a hybrid task and follows control's states
//! to its end ([`follow`]), with a progress line; the record (traces, truth, the second after
//! the end) is `lab::trace::hybrid`'s and the figures `lab::score::hybrid`'s.

use std::time::Duration;

use anyhow::Context;
use common::{
    codec,
    config::CellSection,
    msg::{self, HybridPhase, HybridState, HybridTask, Profile, TaskRobot},
    topic,
};
use control::hybrid::AXES;
use zenoh::Session;

/// Publishes `task` (stamped now) and follows control's states of it to its end, calling
/// `on_state` with each of this task's states as it arrives (an earlier task's trailing states
/// are skipped: a plant task's carry motion id 0, an arm task's its motion's; a task coming to
/// rest republishes its terminal state until the next starts). With `progress`, prints a line
/// every 0.5 s. Returns `Some(reason)` when the task was aborted or control went silent (its
/// word on why), `None` when it completed; an error when it did not start within 3 s.
pub async fn follow(
    s: &Session,
    cell: &CellSection,
    task: &mut HybridTask,
    progress: bool,
    mut on_state: impl FnMut(&HybridState),
) -> anyhow::Result<Option<String>> {
    let states = s
        .declare_subscriber(topic::HYBRID_STATE.key(&cell.id))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    if task.robot == TaskRobot::Arm {
        wait_for_usable_wrench(s, cell, Duration::from_secs(1)).await;
    }
    task.stamp = crate::cli::stamp();
    crate::cli::permitted(cell, topic::HYBRID_TASK.info.suffix)?;
    let key = topic::HYBRID_TASK.key(&cell.id);
    common::bus::put_message(s, topic::HYBRID_TASK, &key, &*task)
        .await
        .context("publish the task")?;
    let mut seen = 0usize;
    let mut last_print = std::time::Instant::now();
    let first_timeout = Duration::from_secs(3);
    let started = std::time::Instant::now();
    let mut motion_id = None;
    let mut seen_live = false;
    loop {
        let timeout = if seen == 0 {
            first_timeout.saturating_sub(started.elapsed())
        } else {
            Duration::from_secs(2)
        };
        let sample = match tokio::time::timeout(timeout, states.recv_async()).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => anyhow::bail!("subscription closed"),
            Err(_) => {
                let why = control_error(s, cell, seen == 0).await;
                if seen == 0 {
                    anyhow::bail!("the task did not start within {first_timeout:?}: {why}");
                }
                return Ok(Some(format!("control went silent: {why}")));
            }
        };
        let Ok(st) = codec::decode::<HybridState>(&sample.payload().to_bytes()) else {
            continue;
        };
        // A task's states: one motion (arm) — ignore states of an earlier task.
        // Plant states carry motion id 0, arm states their motion's: the trailing states of an
        // earlier task of the other kind are not this task's (found running an arm task right
        // before a plant task: the arm's late `Done` ended the plant task at its first row).
        if (task.robot == TaskRobot::Plant) != (st.motion_id == 0) {
            continue;
        }
        // A task that is coming to rest (issue 19 item 10) keeps publishing its last,
        // terminal state until the next task starts: this task's first state is a live one.
        let terminal = matches!(st.phase, HybridPhase::Done | HybridPhase::Aborted);
        if !seen_live && terminal {
            continue;
        }
        seen_live = true;
        if task.robot == TaskRobot::Arm && *motion_id.get_or_insert(st.motion_id) != st.motion_id {
            continue;
        }
        on_state(&st);
        seen += 1;
        if progress && last_print.elapsed() > Duration::from_millis(500) {
            last_print = std::time::Instant::now();
            eprintln!("{}", progress_line(task, &st));
        }
        match st.phase {
            HybridPhase::Done => return Ok(None),
            HybridPhase::Aborted => return Ok(Some(control_error(s, cell, false).await)),
            _ => {}
        }
    }
}

/// Right after `cell tare` the estimate settles for a moment (flagged `NotTared`): waits up to
/// `timeout` for a usable one so that a task sent straight after a tare is not refused. Control
/// makes the decision; this only avoids the race.
pub async fn wait_for_usable_wrench(s: &Session, cell: &CellSection, timeout: Duration) {
    let Ok(sub) = s
        .declare_subscriber(topic::WRENCH_ESTIMATE.key(&cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
    else {
        return;
    };
    let deadline = tokio::time::Instant::now() + timeout;
    while let Ok(Ok(sample)) = tokio::time::timeout_at(deadline, sub.recv_async()).await {
        if let Ok(w) = codec::decode::<msg::WrenchEstimate>(&sample.payload().to_bytes()) {
            if w.fault == msg::WrenchFault::None {
                return;
            }
        }
    }
}

/// Control's word on why a task ended (its stop reason), or — `not_started`: a task that never
/// started — why it was refused (its last error; an older stop reason would be another task's).
async fn control_error(s: &Session, cell: &CellSection, not_started: bool) -> String {
    // Control's status is a snapshot refreshed right after the cycle that ended the task,
    // which can reach a client after the task's last state: a task that ended without a stop
    // reason in the snapshot is asked again, for up to 0.6 s, before an older error counts.
    if !not_started {
        for _ in 0..4 {
            let stop = crate::cli::status(s, cell, Some("control"))
                .await
                .ok()
                .and_then(|v| v.first().map(|c| c["detail"]["stop_reason"].is_string()));
            if stop != Some(false) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
    match crate::cli::status(s, cell, Some("control")).await {
        Ok(v) => v
            .first()
            .map(|c| {
                let (stop, err) = (
                    c["detail"]["stop_reason"].as_str(),
                    c["last_error"].as_str(),
                );
                let why = if not_started {
                    err.or(stop)
                } else {
                    stop.or(err)
                };
                why.unwrap_or("no fault reported: an operator's stop or another mode requested")
                    .to_string()
            })
            .unwrap_or_else(|| "control did not answer its status".into()),
        Err(e) => format!("control status: {e}"),
    }
}

#[allow(clippy::needless_range_loop)] // axis k of several arrays
fn progress_line(task: &HybridTask, st: &HybridState) -> String {
    let mut parts = vec![format!(
        "t {:>6.2}/{:.1} s  {:<11}",
        st.t_s,
        task.duration_s,
        format!("{:?}", st.phase)
    )];
    for k in 0..6 {
        if task.force_axes[k] {
            let unit = if k < 3 { "N" } else { "N·m" };
            parts.push(format!(
                "F{} {:>6.2}/{:.2} {unit}",
                AXES[k], st.force[k], st.force_ref[k]
            ));
        } else if !matches!(task.reference[k], Profile::Constant(v) if v == 0.0) {
            let (scale, unit) = if k < 3 {
                (1e3, "mm")
            } else {
                (1f64.to_degrees(), "°")
            };
            parts.push(format!(
                "{} {:>7.2}/{:.2} {unit}",
                AXES[k],
                st.position[k] * scale,
                st.position_ref[k] * scale
            ));
        }
    }
    parts.join("  ")
}
