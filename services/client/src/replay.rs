//! `cell replay FILE.mcap`: a recording's raw payloads back onto the bus at recorded timing.
//!
//! Only the `raw/<key>` channels are replayed (the bytes that crossed the bus, see
//! [`crate::record`]), onto the same topics of the configured cell (a recording of cell `a`
//! replays onto cell `b`'s keys), in log-time order, `--speed` times as fast, `--loop`ed.
//!
//! Safety: a replayed command moves or stops a robot. Before it publishes anything, replay asks
//! whether the cell's robot-io is live (its liveliness token):
//! - robot-io not live (a bare router, a private cell with no robot): every recorded topic;
//! - robot-io live: **no command topics** (joint/Cartesian commands, modes, tasks, moves,
//!   deadman enables, e-stops and resets, motion ends, plant efforts) and no device feedback
//!   (joint states, raw wrenches, safety, the simulator's state) — a replayed joint state would
//!   be taken for the robot's; the rest (estimates, states) is replayed;
//! - robot-io live and `--commands`: refused while robot-io reports an active robot (joint
//!   states arriving); with no robot connected, everything is replayed.
//!
//! On a secured cell the replaying identity can publish only its row of the roles table; the
//! topics it may not publish are skipped and listed, not sent to be dropped by access control.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;
use common::{
    bus,
    config::CellSection,
    topic::{self, TopicInfo},
};
use serde::Serialize;
use zenoh::Session;

use crate::record::{RAW_ENCODING, RAW_PREFIX};

/// One message to publish.
#[derive(Debug, Clone)]
pub struct Item {
    /// Recorded log time, ns.
    pub log_ns: u64,
    pub topic: &'static TopicInfo,
    /// The key's part after `cell/<id>/` (the deadman's sub-keys kept).
    pub suffix: String,
    pub payload: Vec<u8>,
}

/// A recording read for replay.
#[derive(Debug, Default)]
pub struct Plan {
    pub items: Vec<Item>,
    /// The recorded cell id.
    pub cell_id: String,
    /// The file ended inside a record (a recording that was killed): what came before is here.
    pub truncated: Option<String>,
    /// Raw channels of no known topic.
    pub unknown: u64,
}

impl Plan {
    /// Per-topic message counts.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for i in &self.items {
            *m.entry(i.topic.suffix.to_string()).or_insert(0) += 1;
        }
        m
    }

    /// Log-time span, s.
    pub fn seconds(&self) -> f64 {
        match (self.items.first(), self.items.last()) {
            (Some(a), Some(b)) => (b.log_ns.saturating_sub(a.log_ns)) as f64 * 1e-9,
            _ => 0.0,
        }
    }

    /// Keeps the items whose topic `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&TopicInfo) -> bool) {
        self.items.retain(|i| keep(i.topic));
    }
}

/// Reads the raw channels of a recording (`topics` empty: all), sorted by log time (stable:
/// the file's order among equal times). A file cut short yields what its complete chunks hold.
pub fn read(bytes: &[u8], topics: &[String]) -> anyhow::Result<Plan> {
    let opts = mcap::read::Options::IgnoreEndMagic.into();
    let stream = mcap::MessageStream::new_with_options(bytes, opts).context("not an MCAP file")?;
    let mut plan = Plan::default();
    for m in stream {
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                plan.truncated = Some(e.to_string());
                break;
            }
        };
        if m.channel.message_encoding != RAW_ENCODING {
            continue;
        }
        let Some(key) = m.channel.topic.strip_prefix(RAW_PREFIX) else {
            continue;
        };
        let Some((id, t)) = topic::split_key(key) else {
            plan.unknown += 1;
            continue;
        };
        let suffix = &key[id.len() + "cell//".len()..];
        if !topics.is_empty() && !topics.iter().any(|x| topic::find(x) == Some(t)) {
            continue;
        }
        if plan.cell_id.is_empty() {
            plan.cell_id = id.to_string();
        }
        plan.items.push(Item {
            log_ns: m.log_time,
            topic: t,
            suffix: suffix.to_string(),
            payload: m.data.into_owned(),
        });
    }
    plan.items.sort_by_key(|i| i.log_ns);
    Ok(plan)
}

/// What the gate decided, per topic class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Gate {
    /// No robot-io on the cell: everything.
    Everything,
    /// robot-io live: neither commands nor device feedback.
    NoCommands,
    /// robot-io live, no robot connected, `--commands`: everything.
    CommandsAsked,
}

/// The gate's rule (pure): `robot_io_live` from its liveliness token, `robot_active` from its
/// joint states arriving.
pub fn gate(robot_io_live: bool, robot_active: bool, commands: bool) -> Result<Gate, String> {
    match (robot_io_live, commands) {
        (false, _) => Ok(Gate::Everything),
        (true, false) => Ok(Gate::NoCommands),
        (true, true) if robot_active => Err(
            "refused: robot-io reports an active robot (joint states arriving); a replayed command would move or stop it. Stop the robot's session (or replay without --commands: command topics are then skipped)".into(),
        ),
        (true, true) => Ok(Gate::CommandsAsked),
    }
}

/// Whether the gate lets topic `t` through.
pub fn passes(g: &Gate, t: &TopicInfo) -> bool {
    match g {
        Gate::Everything | Gate::CommandsAsked => true,
        Gate::NoCommands => !topic::is_command(t) && !topic::is_device_feedback(t),
    }
}

/// The options of a replay.
#[derive(Debug, Clone)]
pub struct Options {
    pub speed: f64,
    pub looped: bool,
    pub topics: Vec<String>,
    pub commands: bool,
}

/// The outcome of a replay.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplaySummary {
    pub published: BTreeMap<String, u64>,
    pub skipped: BTreeMap<String, String>,
    pub seconds: f64,
    pub loops: u64,
    pub truncated: Option<String>,
}

async fn robot_io_state(s: &Session, cell: &CellSection) -> anyhow::Result<(bool, bool)> {
    let live = crate::cli::ls(s, cell)
        .await?
        .iter()
        .any(|n| n == "robot-io");
    if !live {
        return Ok((false, false));
    }
    let sub = s
        .declare_subscriber(topic::JOINT_STATE.key(&cell.id))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe to the joint states: {e}"))?;
    let active = matches!(
        tokio::time::timeout(Duration::from_millis(500), sub.recv_async()).await,
        Ok(Ok(_))
    );
    Ok((true, active))
}

/// `cell replay FILE`: publishes the file's raw payloads onto `cell` at recorded timing.
pub async fn replay(
    s: &Session,
    cell: &CellSection,
    path: &Path,
    opts: &Options,
) -> anyhow::Result<ReplaySummary> {
    anyhow::ensure!(
        opts.speed.is_finite() && opts.speed > 0.0,
        "--speed must be a positive number (got {})",
        opts.speed
    );
    for t in &opts.topics {
        anyhow::ensure!(topic::find(t).is_some(), "unknown topic {t:?}");
    }
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let mut plan = read(&bytes, &opts.topics)?;
    anyhow::ensure!(
        !plan.items.is_empty(),
        "{} holds no raw channel of a cell topic (is it a `cell record` file?)",
        path.display()
    );
    let mut summary = ReplaySummary {
        truncated: plan.truncated.clone(),
        ..Default::default()
    };
    let (live, active) = robot_io_state(s, cell).await?;
    let g = gate(live, active, opts.commands).map_err(|e| anyhow::anyhow!(e))?;
    let identity = crate::cli::identity();
    let before = plan.counts();
    plan.retain(|t| passes(&g, t));
    if let Some(sec) = &cell.security {
        plan.retain(|t| sec.may_publish(&cell.id, &identity, t.suffix));
    }
    let after = plan.counts();
    for (t, n) in &before {
        if !after.contains_key(t) {
            let why = if let Some(sec) = &cell.security {
                if !sec.may_publish(&cell.id, &identity, t) {
                    format!("{n} messages: identity {identity:?} may not publish it (roles table)")
                } else {
                    format!("{n} messages: robot-io is live ({g:?})")
                }
            } else {
                format!("{n} messages: robot-io is live ({g:?})")
            };
            summary.skipped.insert(t.clone(), why);
        }
    }
    for (t, why) in &summary.skipped {
        eprintln!("replay: skipping {t}: {why}");
    }
    anyhow::ensure!(
        !plan.items.is_empty(),
        "nothing left to replay onto cell {} (every recorded topic skipped)",
        cell.id
    );
    // One publisher per key, with the topic's encoding and QoS class.
    let mut publishers = BTreeMap::new();
    for i in &plan.items {
        let key = format!("cell/{}/{}", cell.id, i.suffix);
        if publishers.contains_key(&key) {
            continue;
        }
        // The topic's priority class, but blocking for every topic: a replay never drops.
        let hot = i.topic.qos == topic::QOS_HOT;
        let p = s
            .declare_publisher(key.clone())
            .encoding(bus::encoding_of(i.topic))
            .priority(if hot {
                zenoh::qos::Priority::RealTime
            } else {
                zenoh::qos::Priority::InteractiveHigh
            })
            .congestion_control(zenoh::qos::CongestionControl::Block)
            .await
            .map_err(|e| anyhow::anyhow!("publisher {key}: {e}"))?;
        publishers.insert(key, p);
    }
    eprintln!(
        "replaying {} messages ({:.1} s recorded) from cell {} onto cell {} at {}x{}",
        plan.items.len(),
        plan.seconds(),
        plan.cell_id,
        cell.id,
        opts.speed,
        if opts.looped {
            ", looped (Ctrl-C to stop)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    'outer: loop {
        let t0 = plan.items[0].log_ns;
        let wall0 = tokio::time::Instant::now();
        for i in &plan.items {
            let at = wall0 + Duration::from_secs_f64((i.log_ns - t0) as f64 * 1e-9 / opts.speed);
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = &mut ctrl_c => break 'outer,
            }
            let key = format!("cell/{}/{}", cell.id, i.suffix);
            if let Some(p) = publishers.get(&key) {
                p.put(i.payload.clone())
                    .await
                    .map_err(|e| anyhow::anyhow!("put {key}: {e}"))?;
                *summary
                    .published
                    .entry(i.topic.suffix.to_string())
                    .or_insert(0) += 1;
            }
        }
        summary.loops += 1;
        if !opts.looped {
            break;
        }
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_keeps_commands_off_a_live_robot() {
        assert_eq!(gate(false, false, false), Ok(Gate::Everything));
        assert_eq!(gate(true, true, false), Ok(Gate::NoCommands));
        assert_eq!(gate(true, false, true), Ok(Gate::CommandsAsked));
        assert!(gate(true, true, true).is_err());
        let g = Gate::NoCommands;
        for t in topic::TOPICS {
            let blocked = !passes(&g, t);
            let expected = topic::is_command(t) || topic::is_device_feedback(t);
            assert_eq!(blocked, expected, "{}", t.suffix);
        }
        for t in [
            topic::JOINT_COMMAND.info,
            topic::ESTOP.info,
            topic::ESTOP_RESET.info,
            topic::MODE_COMMAND.info,
            topic::HYBRID_TASK.info,
            topic::ENABLE.info,
        ] {
            assert!(!passes(&g, &t), "{} must not reach a live robot", t.suffix);
        }
        assert!(passes(&g, &topic::WRENCH_ESTIMATE.info));
    }
}
