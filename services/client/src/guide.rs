//! `cell guide`: one lead-through session from this terminal — the guide request, the deadman
//! keep-alive, how the session ended (the operator's release, or control's stop and its
//! reason) and, with `--trace DIR`, its record: control's guide states through the session
//! and for [`AFTER_END_S`] after its end, with the force service's estimate (and the
//! simulator's truth, on a simulated cell) over that second (issue 41: what the force did
//! after a stop was recorded nowhere).

use std::{io::Write, path::Path, time::Duration};

use anyhow::Context;
use common::{codec, config::CellSection, msg::GuideState, topic};
use zenoh::{
    handlers::{RingChannel, RingChannelHandler},
    pubsub::Subscriber,
    sample::Sample,
    Session,
};

use crate::{
    cli,
    hybrid::{self, AfterRow, AFTER_END_S},
    lead,
};

/// Guide states kept for a trace (250 Hz: 80 s between two drains would be needed to lose one).
const STATE_RING: usize = 20_000;
/// How often the session's end is looked for (control's status) while the enable streams.
const WATCH_PERIOD: Duration = Duration::from_millis(200);

/// A finished session.
#[derive(Debug, Clone)]
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
    /// With a trace: control's guide states from the request to [`AFTER_END_S`] after the end.
    pub states: Vec<GuideState>,
    /// With a trace: the estimate and the truth over [`AFTER_END_S`] after the end.
    pub after: Vec<AfterRow>,
}

impl GuideRun {
    /// Writes `guide.csv` (control's guide states, timed from the end: negative before it) and
    /// `after_end.csv` into `dir` (the figures, `metrics.json`, are
    /// `lab::score::lead::guide_metrics`).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("guide.csv");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        writeln!(
            f,
            "t_from_end_s,t_s,motion_id,enabled,force_x_n,force_y_n,force_z_n,torque_x_nm,\
             torque_y_nm,torque_z_nm,v_x_m_s,v_y_m_s,v_z_m_s,w_x_rad_s,w_y_rad_s,w_z_rad_s,\
             tcp_cmd_x_m,tcp_cmd_y_m,tcp_cmd_z_m,damping_scale,speed_limited,wall_limited,steps"
        )?;
        for g in &self.states {
            let t = (g.stamp.source_mono_ns as f64 - self.end_mono_ns as f64) * 1e-9;
            let mut v = vec![
                format!("{t:.6}"),
                format!("{:.6}", g.t_s),
                g.motion_id.to_string(),
                u8::from(g.enabled).to_string(),
            ];
            for a in [
                g.force_n,
                g.torque_nm,
                g.twist.linear_m_s,
                g.twist.angular_rad_s,
            ] {
                v.extend(a.iter().map(|x| format!("{x:.5}")));
            }
            v.extend(g.tcp_cmd_m.iter().map(|x| format!("{x:.7}")));
            v.push(format!("{:.3}", g.damping_scale));
            v.push(u8::from(g.speed_limited).to_string());
            v.push(u8::from(g.wall_limited).to_string());
            v.push(g.steps.to_string());
            writeln!(f, "{}", v.join(","))?;
        }
        f.flush()?;
        hybrid::write_after_end(&dir.join("after_end.csv"), &self.after)?;
        Ok(())
    }
}

type Ring = Subscriber<RingChannelHandler<Sample>>;

async fn ring(s: &Session, key: String, n: usize) -> anyhow::Result<Ring> {
    s.declare_subscriber(key.clone())
        .with(RingChannel::new(n))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))
}

fn drain_states(sub: &Ring, into: &mut Vec<GuideState>) {
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
/// `seconds` pass or control ends the session; with `trace`, records the session and the
/// second after its end.
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
    let mut after = Vec::new();
    if let (Some(sub), Some(world), Some(est)) = (&states_sub, &world, &estimates) {
        drain_states(sub, &mut states);
        // This session's states only (an earlier session's last ones may be in the ring).
        states.retain(|g| g.stamp.source_mono_ns >= requested_ns);
        if ended_by_control.is_some() {
            // Control stopped publishing guide states at its stop, up to a status poll before
            // the end was seen: the trace after the end starts at the stop.
            if let Some(last) = states.last() {
                end_mono_ns = end_mono_ns.min(last.stamp.source_mono_ns);
            }
        }
        after = hybrid::trace_after_end(world, est, end_mono_ns).await;
        drain_states(sub, &mut states);
        let last_ns = end_mono_ns + (AFTER_END_S * 1e9) as u64;
        states.retain(|g| (requested_ns..=last_ns).contains(&g.stamp.source_mono_ns));
    }
    Ok(GuideRun {
        reply,
        enables_sent,
        ended_by_control,
        end_mono_ns,
        states,
        after,
    })
}
