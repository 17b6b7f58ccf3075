//! Lead-through teaching from the CLI: `cell guide`, `cell enable`, `cell teach …`,
//! `cell play NAME`, `cell playback pause|resume|stop`.
//!
//! Everything goes through control's `control/rpc/lead` queryable (JSON) and the
//! `control/enable` keep-alive; programs are TOML files in a directory on this machine
//! (`--dir`, default `programs/`), written by `cell teach save` from control's teach buffer, the
//! mounted tool control reports and the payload the force service identified.

use std::{path::Path, time::Duration};

use anyhow::Context;
use common::{
    codec,
    config::CellSection,
    msg::{Enable, PlaybackPhase, PlaybackState},
    topic,
};
use control::program::{PayloadSpec, Program, ToolSpec, Waypoint, FORMAT_VERSION};
use zenoh::Session;

use crate::cli;

/// Keep-alive period of `cell enable` / `cell guide` (20 Hz; control's timeout is 0.5 s).
pub const ENABLE_PERIOD: Duration = Duration::from_millis(50);

/// One request to control's lead queryable; `Err` carries control's reason.
pub async fn rpc(
    s: &Session,
    cell: &CellSection,
    mut body: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    // A guide request names who guides: its enables come on that identity's key.
    if let Some(g) = body.get_mut("guide").and_then(|g| g.as_object_mut()) {
        g.entry("operator")
            .or_insert_with(|| serde_json::Value::String(cli::identity()));
    }
    let key = format!("cell/{}/{}", cell.id, topic::CONTROL_RPC_LEAD);
    cli::request(s, &key, Some(body.to_string()), Duration::from_secs(3)).await
}

/// The deadman token of a guide request's reply (`enable_token`).
pub fn enable_token(reply: &serde_json::Value) -> anyhow::Result<u64> {
    reply["enable_token"]
        .as_u64()
        .filter(|t| *t != 0)
        .with_context(|| format!("the guide reply carries no enable_token: {reply}"))
}

/// Streams the deadman keep-alive, bound to the guide session's `token`, on this process's
/// identity's key (`control/enable/<identity>`, [`cli::identity`]), until `stop` resolves (or
/// `seconds` pass).
pub async fn stream_enable(
    s: &Session,
    cell: &CellSection,
    token: u64,
    seconds: Option<f64>,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<u64> {
    let key = topic::enable_key(&cell.id, &cli::identity());
    let publisher = s
        .declare_publisher(key.clone())
        .encoding(common::bus::encoding_of(&topic::ENABLE.info))
        .congestion_control(zenoh::qos::CongestionControl::Block)
        .priority(zenoh::qos::Priority::InteractiveHigh)
        .await
        .map_err(|e| anyhow::anyhow!("publisher {key}: {e}"))?;
    let source = std::process::id();
    let end = seconds.map(|v| tokio::time::Instant::now() + Duration::from_secs_f64(v.max(0.0)));
    let mut tick = tokio::time::interval(ENABLE_PERIOD);
    let mut sent = 0u64;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                if end.is_some_and(|e| tokio::time::Instant::now() >= e) {
                    break;
                }
                let msg = Enable { stamp: cli::stamp(), source, token };
                let bytes = codec::encode(&msg).map_err(|e| anyhow::anyhow!("{e}"))?;
                publisher.put(bytes).await.map_err(|e| anyhow::anyhow!("put: {e}"))?;
                sent += 1;
            }
        }
    }
    Ok(sent)
}

/// `KEY=VALUE` guide overrides → a JSON object (values parsed as JSON, else strings).
pub fn overrides(law: Option<&str>, params: &[String]) -> anyhow::Result<serde_json::Value> {
    let mut m = serde_json::Map::new();
    if let Some(l) = law {
        let name = match l {
            "admittance" => "Admittance",
            "stiffness" => "Stiffness",
            "staircase" => "Staircase",
            other => anyhow::bail!("unknown law {other:?}: admittance | stiffness | staircase"),
        };
        m.insert("law".into(), name.into());
    }
    for p in params {
        let (k, v) = p
            .split_once('=')
            .with_context(|| format!("--param {p:?}: expected KEY=VALUE"))?;
        let val = serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.into()));
        m.insert(k.trim().to_string(), val);
    }
    Ok(serde_json::Value::Object(m))
}

/// The payload the force service identified (its status detail), if any.
pub async fn mounted_payload(
    s: &Session,
    cell: &CellSection,
) -> anyhow::Result<Option<PayloadSpec>> {
    let st = cli::status(s, cell, Some("force")).await?;
    let p = st
        .first()
        .and_then(|v| v["detail"]["payload"].as_object().cloned());
    Ok(p.and_then(|p| {
        let mass_kg = p.get("mass_kg")?.as_f64()?;
        let c = p.get("com_m")?.as_array()?;
        let com = [
            c.first()?.as_f64()?,
            c.get(1)?.as_f64()?,
            c.get(2)?.as_f64()?,
        ];
        Some(PayloadSpec {
            mass_kg,
            com_m: com,
        })
    }))
}

/// RFC 3339 UTC time of now (for program files).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// `cell teach save NAME`: the teach buffer as a program file.
pub async fn save(
    s: &Session,
    cell: &CellSection,
    dir: &Path,
    name: &str,
) -> anyhow::Result<std::path::PathBuf> {
    control::program::valid_name(name).map_err(|e| anyhow::anyhow!("{e}"))?;
    let list = rpc(s, cell, serde_json::json!({ "list": {} })).await?;
    let waypoints: Vec<Waypoint> =
        serde_json::from_value(list["waypoints"].clone()).context("control's waypoint list")?;
    if waypoints.is_empty() {
        anyhow::bail!("the teach buffer is empty: record waypoints first (cell teach record)");
    }
    let tool: ToolSpec = serde_json::from_value(list["tool"].clone()).context("control's tool")?;
    let payload = mounted_payload(s, cell).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "the force service has no identified payload: run `cell payload identify` first \
             (a program records the tool's mass and centre of mass)"
        )
    })?;
    let program = Program {
        format_version: FORMAT_VERSION,
        name: name.to_string(),
        created: now_rfc3339(),
        arm_model: list["arm_model"].as_str().unwrap_or("irb120").to_string(),
        tool,
        payload,
        waypoints,
    };
    program.save(dir, name).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `cell teach load NAME`: a program's waypoints into control's teach buffer.
pub async fn load(
    s: &Session,
    cell: &CellSection,
    dir: &Path,
    name: &str,
) -> anyhow::Result<Program> {
    let p = Program::load(dir, name).map_err(|e| anyhow::anyhow!("{e}"))?;
    let pts: Vec<serde_json::Value> = p
        .waypoints
        .iter()
        .map(|w| serde_json::json!({ "label": w.label, "q_deg": w.q_deg }))
        .collect();
    rpc(s, cell, serde_json::json!({ "load": { "waypoints": pts } })).await?;
    Ok(p)
}

/// The result of `cell play`.
#[derive(Debug, Clone)]
pub struct PlayOutcome {
    pub phase: PlaybackPhase,
    pub states: Vec<PlaybackState>,
}

/// `cell play NAME`: starts the program and follows it to its end (progress on stderr when
/// `progress`); Ctrl-C stops it (the robot decelerates on the path and holds).
pub async fn play(
    s: &Session,
    cell: &CellSection,
    program: &Program,
    speed_scale: f64,
    cartesian: bool,
    progress: bool,
) -> anyhow::Result<PlayOutcome> {
    let sub = playback_states(s, cell).await?;
    let payload = mounted_payload(s, cell).await?;
    let reply = rpc(
        s,
        cell,
        serde_json::json!({ "play": {
            "program": program,
            "speed_scale": speed_scale,
            "mounted_payload": payload,
            "cartesian": cartesian,
        }}),
    )
    .await?;
    if progress {
        eprintln!(
            "playing {:?}: {} waypoints, {:.1} s{}{}",
            program.name,
            reply["waypoints"],
            reply["duration_s"].as_f64().unwrap_or(0.0),
            if reply["approach"].as_bool() == Some(true) {
                " (first to waypoint 1 at reduced speed)"
            } else {
                ""
            },
            if payload.is_none() {
                "; payload not checked: force has no identified payload"
            } else {
                ""
            }
        );
    }
    let motion_id = reply["motion_id"].as_u64();
    follow(s, cell, &sub, &program.name, motion_id, progress).await
}

/// `cell move-joints`: a joint-space move (control's `move_joints`: one synchronised,
/// jerk-limited segment from the measured joints) to `q_deg`, followed to its end like a
/// playback (progress on stderr when `progress`; Ctrl-C stops it).
pub async fn move_joints(
    s: &Session,
    cell: &CellSection,
    q_deg: [f64; 6],
    speed_scale: Option<f64>,
    progress: bool,
) -> anyhow::Result<PlayOutcome> {
    let sub = playback_states(s, cell).await?;
    let mut req = serde_json::json!({ "move_joints": { "q_deg": q_deg } });
    if let Some(k) = speed_scale {
        req["move_joints"]["speed_scale"] = serde_json::json!(k);
    }
    let reply = rpc(s, cell, req).await?;
    if progress {
        eprintln!(
            "joint move to {q_deg:?}°: {:.1} s at {} × the joint limits",
            reply["duration_s"].as_f64().unwrap_or(0.0),
            reply["speed_scale"]
        );
    }
    let motion_id = reply["motion_id"].as_u64();
    follow(
        s,
        cell,
        &sub,
        control::lead::MOVE_JOINTS_NAME,
        motion_id,
        progress,
    )
    .await
}

type StateSub =
    zenoh::pubsub::Subscriber<zenoh::handlers::RingChannelHandler<zenoh::sample::Sample>>;

/// A subscriber to control's playback states (declared before the request, so the first
/// state is not missed).
async fn playback_states(s: &Session, cell: &CellSection) -> anyhow::Result<StateSub> {
    s.declare_subscriber(topic::PLAYBACK_STATE.key(&cell.id))
        .with(zenoh::handlers::RingChannel::new(8192))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))
}

/// Follows the playback `name` (motion `motion_id` when known) on `sub` to its end.
async fn follow(
    s: &Session,
    cell: &CellSection,
    sub: &StateSub,
    name: &str,
    motion_id: Option<u64>,
    progress: bool,
) -> anyhow::Result<PlayOutcome> {
    let mut states = Vec::new();
    let mut last_print = std::time::Instant::now();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut stopping = false;
    let mut quiet_since = std::time::Instant::now();
    loop {
        // States of another motion (an earlier playback that keeps publishing `Done`) do not
        // count as this one's: 2 s without one of this playback's states is an end (5 s
        // before the first: the motion before it may take up to 3 s to come to rest).
        let quiet = Duration::from_secs(if states.is_empty() { 5 } else { 2 });
        if quiet_since.elapsed() > quiet {
            match crate::cli::control_errors(s, cell).await.1 {
                Some(why) => anyhow::bail!("the playback ended: {why}"),
                None => anyhow::bail!("no playback state from control for 2 s (did the motion end? see `cell status control`)"),
            }
        }
        tokio::select! {
            _ = &mut ctrl_c, if !stopping => {
                stopping = true;
                eprintln!("stopping (the robot decelerates on the path and holds)");
                let _ = rpc(s, cell, serde_json::json!({ "stop": {} })).await;
            }
            r = tokio::time::timeout(Duration::from_millis(200), sub.recv_async()) => {
                let Ok(Ok(sample)) = r else {
                    if quiet_since.elapsed() > quiet {
                        // Say why when control knows (a hold ends the motion without a last
                        // state on some paths).
                        match crate::cli::control_errors(s, cell).await.1 {
                            Some(why) => anyhow::bail!("the playback ended: {why}"),
                            None => anyhow::bail!("no playback state from control for 2 s (did the motion end? see `cell status control`)"),
                        }
                    }
                    continue;
                };
                let Ok(st) = codec::decode::<PlaybackState>(&sample.payload().to_bytes()) else { continue };
                // This playback's states only (a finished one keeps publishing `Done`).
                if st.program != name || motion_id.is_some_and(|m| m != st.motion_id) {
                    continue;
                }
                quiet_since = std::time::Instant::now();
                if progress && last_print.elapsed() > Duration::from_millis(500) {
                    last_print = std::time::Instant::now();
                    eprintln!(
                        "  {:>5.1} %  {:?}  waypoint {}/{}  t {:.1}/{:.1} s",
                        st.progress * 100.0,
                        st.phase,
                        (st.waypoint + 1).min(st.waypoints),
                        st.waypoints,
                        st.t_s,
                        st.duration_s
                    );
                }
                let phase = st.phase;
                states.push(st);
                if matches!(phase, PlaybackPhase::Done | PlaybackPhase::Stopped | PlaybackPhase::Aborted) {
                    if progress {
                        eprintln!("  {phase:?}");
                    }
                    return Ok(PlayOutcome { phase, states });
                }
            }
        }
    }
}
