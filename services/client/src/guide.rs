//! `cell guide`: one lead-through session from this terminal — the guide request, the deadman
//! keep-alive, how the session ended (the operator's release, or control's stop and its
//! reason) and, with `--trace DIR`, the subscribers its record needs: control's guide states
//! through the session, and the force service's estimate and the simulator's truth, left open
//! past the end (`lab::trace::guide::finish` records the second after it; issue 41: what the
//! force did after a stop was recorded nowhere).

use std::time::Duration;

use common::{codec, config::CellSection, msg::GuideState, topic};
use zenoh::{
    handlers::{RingChannel, RingChannelHandler},
    pubsub::Subscriber,
    sample::Sample,
    Session,
};

use crate::{cli, lead};

/// Guide states kept for a trace (250 Hz: 80 s between two drains would be needed to lose one).
const STATE_RING: usize = 20_000;
/// How often the session's end is looked for (control's status) while the enable streams.
const WATCH_PERIOD: Duration = Duration::from_millis(200);

/// A finished session.
pub struct GuideRun {
    /// Control's reply to the guide request (law, parameters, token).
    pub reply: serde_json::Value,
    pub enables_sent: u64,
    /// `Some(reason)`: control ended the session while the enable was held (a protective
    /// stop, a fault, another mode); `None`: the operator released the enable (Ctrl-C,
    /// `--seconds`).
    pub ended_by_control: Option<String>,
    /// Host monotonic time of the end (ns): the release, or control's stop (its last guide
    /// state; without a trace, when the end was seen).
    pub end_mono_ns: u64,
    /// Host monotonic time of the guide request (ns).
    pub requested_ns: u64,
    /// With a trace: control's guide states from the request to the end.
    pub states: Vec<GuideState>,
    /// With a trace: the subscribers, still open, that record the second after the end.
    pub rings: Option<GuideRings>,
}

/// The subscribers of a traced session: control's guide states, the simulator's truth and the
/// force service's estimate.
pub struct GuideRings {
    pub states: Ring,
    pub world: Ring,
    pub estimates: Ring,
}

/// A subscriber that keeps the newest samples.
pub type Ring = Subscriber<RingChannelHandler<Sample>>;

async fn ring(s: &Session, key: String, n: usize) -> anyhow::Result<Ring> {
    s.declare_subscriber(key.clone())
        .with(RingChannel::new(n))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))
}

/// Moves the guide states in `sub` into `into`.
pub fn drain_states(sub: &Ring, into: &mut Vec<GuideState>) {
    while let Ok(Some(smp)) = sub.try_recv() {
        if let Ok(g) = codec::decode::<GuideState>(&smp.payload().to_bytes()) {
            into.push(g);
        }
    }
}

/// Waits until control, having been seen guiding, is no longer in lead-through; returns its
/// stop reason (or the mode it went to). Guide states are drained into `states` meanwhile
/// (when a trace is kept).
async fn control_end(
    s: &Session,
    cell: &CellSection,
    sub: Option<&Ring>,
    states: &mut Vec<GuideState>,
) -> String {
    let mut seen_guiding = false;
    loop {
        tokio::time::sleep(WATCH_PERIOD).await;
        if let Some(sub) = sub {
            drain_states(sub, states);
        }
        let Ok(st) = cli::status(s, cell, Some("control")).await else {
            continue;
        };
        let Some(d) = st.first().map(|v| &v["detail"]) else {
            continue;
        };
        let mode = d["mode"].as_str().unwrap_or("?");
        if mode == "LeadThrough" {
            seen_guiding = true;
        } else if seen_guiding {
            return d["stop_reason"].as_str().map_or_else(
                || format!("control left lead-through (mode {mode})"),
                str::to_string,
            );
        }
    }
}

/// Starts guiding with the `body` overrides and holds the enable until `stop` resolves,
/// `seconds` pass or control ends the session; with `trace`, records the session's guide
/// states and keeps the subscribers open for the second after its end
/// (`lab::trace::guide::finish`).
pub async fn run(
    s: &Session,
    cell: &CellSection,
    body: serde_json::Value,
    seconds: Option<f64>,
    stop: impl std::future::Future<Output = ()>,
    trace: bool,
) -> anyhow::Result<GuideRun> {
    let (states_sub, world, estimates) = if trace {
        (
            Some(ring(s, topic::GUIDE_STATE.key(&cell.id), STATE_RING).await?),
            Some(ring(s, topic::SIM_TRUTH.key(&cell.id), 8192).await?),
            Some(ring(s, topic::WRENCH_ESTIMATE.key(&cell.id), 4096).await?),
        )
    } else {
        (None, None, None)
    };
    let requested_ns = common::clock::mono_ns();
    let reply = lead::rpc(s, cell, serde_json::json!({ "guide": body })).await?;
    let token = lead::enable_token(&reply)?;
    eprintln!(
        "guiding ({}): this terminal holds the enable; Ctrl-C releases it",
        reply["guiding"].as_str().unwrap_or("?")
    );
    let mut states = Vec::new();
    let mut ended_by_control = None;
    let enables_sent = {
        let until = async {
            tokio::select! {
                _ = stop => {}
                why = control_end(s, cell, states_sub.as_ref(), &mut states) => {
                    ended_by_control = Some(why);
                }
            }
        };
        lead::stream_enable(s, cell, token, seconds, until).await?
    };
    let mut end_mono_ns = common::clock::mono_ns();
    let rings = match (states_sub, world, estimates) {
        (Some(sub), Some(world), Some(estimates)) => {
            drain_states(&sub, &mut states);
            // This session's states only (an earlier session's last ones may be in the ring).
            states.retain(|g| g.stamp.source_mono_ns >= requested_ns);
            if ended_by_control.is_some() {
                // Control stopped publishing guide states at its stop, up to a status poll
                // before the end was seen: the trace after the end starts at the stop.
                if let Some(last) = states.last() {
                    end_mono_ns = end_mono_ns.min(last.stamp.source_mono_ns);
                }
            }
            Some(GuideRings {
                states: sub,
                world,
                estimates,
            })
        }
        _ => None,
    };
    Ok(GuideRun {
        reply,
        enables_sent,
        ended_by_control,
        end_mono_ns,
        requested_ns,
        states,
        rings,
    })
}
