//! Operator commands that talk to a running cell over zenoh.

use std::time::{Duration, Instant};

use anyhow::Context;
use common::{
    bus::{self, BusArgs},
    codec,
    config::CellSection,
    msg::{
        self, EStop, EStopAction, EStopReset, Mode, ModeCommand, MoveTarget, Pose, ResetScope,
        Stamp,
    },
    topic::{self, TopicInfo},
};
use serde::Serialize;
use zenoh::Session;

/// The identity this CLI process speaks as (its certificate on a secured cell): set by
/// [`session`], else the default operator. A guide request names it and the deadman's enables
/// go on its key (`topic::enable_key`).
static IDENTITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// This process's identity ([`IDENTITY`]).
pub fn identity() -> String {
    IDENTITY
        .get()
        .cloned()
        .unwrap_or_else(|| common::security::DEFAULT_OPERATOR.to_string())
}

/// A client session to the cell, through its router.
pub async fn session(bus_args: &BusArgs, cell: &CellSection) -> anyhow::Result<Session> {
    open(bus_args, cell, bus::SessionMode::Client).await
}

/// Opens this CLI's session in `mode`, as its identity (which [`identity`] then returns).
async fn open(
    bus_args: &BusArgs,
    cell: &CellSection,
    mode: bus::SessionMode,
) -> anyhow::Result<Session> {
    let _ = IDENTITY.set(bus_args.cli_identity());
    let cfg = bus::zenoh_config(bus_args, cell, mode)?;
    zenoh::open(cfg).await.map_err(|e| {
        tracing::debug!("zenoh open towards {}: {e}", cell.router);
        anyhow::anyhow!(
            "{}",
            common::errtext::unreachable_router(&cell.router, &e.to_string())
        )
    })
}

/// A session in zenoh's peer mode, for a tool that subscribes to every topic (`cell record`,
/// `--record`, `cell viz`): the services are peers, so each sends straight to it and the
/// router forwards nothing. Through a [`session`] every message of every topic also crossed
/// the router, on the cell's host, at the command path's priority: measured at 1 kHz, the
/// router took a third of a core and the command path's p50 rose 41 µs, against 25 µs this way
/// (docs/performance.md, issue 45). A peer the services cannot reach (another host, no route
/// back) still gets its messages through the router.
pub async fn peer_session(bus_args: &BusArgs, cell: &CellSection) -> anyhow::Result<Session> {
    open(bus_args, cell, bus::SessionMode::Peer).await
}

/// Live services, from their liveliness tokens.
pub async fn ls(s: &Session, cell: &CellSection) -> anyhow::Result<Vec<String>> {
    let key = format!("cell/{}/alive/*", cell.id);
    let replies = s
        .liveliness()
        .get(&key)
        .timeout(Duration::from_secs(2))
        .await
        .map_err(|e| anyhow::anyhow!("liveliness query: {e}"))?;
    let mut out = Vec::new();
    while let Ok(r) = replies.recv_async().await {
        if let Ok(sample) = r.result() {
            if let Some(name) = sample.key_expr().as_str().rsplit('/').next() {
                out.push(name.to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// JSON status of one or every service.
pub async fn status(
    s: &Session,
    cell: &CellSection,
    service: Option<&str>,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let key = topic::status_key(&cell.id, service.unwrap_or("*"));
    let replies = s
        .get(&key)
        .timeout(Duration::from_secs(2))
        .await
        .map_err(|e| anyhow::anyhow!("status query: {e}"))?;
    let mut out = Vec::new();
    while let Ok(r) = replies.recv_async().await {
        match r.result() {
            Ok(sample) => {
                let bytes = sample.payload().to_bytes();
                match serde_json::from_slice::<serde_json::Value>(&bytes) {
                    Ok(v) => out.push(v),
                    Err(e) => out.push(serde_json::json!({
                        "key": sample.key_expr().as_str(), "error": format!("not JSON: {e}")
                    })),
                }
            }
            Err(e) => out.push(serde_json::json!({
                "error": e.payload().try_to_string().map(|s| s.to_string()).unwrap_or_default()
            })),
        }
    }
    out.sort_by_key(|v| v["service"].as_str().unwrap_or("").to_string());
    Ok(out)
}

/// Decodes a payload by the topic's type (every topic: one dispatch, `topic::visit_type`).
pub fn decode_json(t: &TopicInfo, bytes: &[u8]) -> Result<serde_json::Value, String> {
    topic::to_json(t, bytes)
}

fn resolve(name: &str) -> anyhow::Result<&'static TopicInfo> {
    topic::find(name).with_context(|| {
        let known: Vec<&str> = topic::TOPICS.iter().map(|t| t.suffix).collect();
        format!("unknown topic {name:?}; known: {}", known.join(", "))
    })
}

/// Prints decoded samples of a topic.
pub async fn echo(
    s: &Session,
    cell: &CellSection,
    name: &str,
    count: Option<u64>,
    json: bool,
) -> anyhow::Result<()> {
    let t = resolve(name)?;
    let key = format!("cell/{}/{}", cell.id, t.suffix);
    let sub = s
        .declare_subscriber(&key)
        .await
        .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))?;
    let mut n = 0;
    while let Ok(sample) = sub.recv_async().await {
        match decode_json(t, &sample.payload().to_bytes()) {
            Ok(v) => {
                if json {
                    println!("{v}");
                } else {
                    println!(
                        "{key}: {}",
                        serde_json::to_string_pretty(&v).unwrap_or_default()
                    );
                }
            }
            Err(e) => eprintln!("{key}: undecodable sample ({e})"),
        }
        n += 1;
        if count.is_some_and(|c| n >= c) {
            break;
        }
    }
    Ok(())
}

/// Prints the rate of a topic once per second (and gaps from stamps).
pub async fn hz(
    s: &Session,
    cell: &CellSection,
    name: &str,
    seconds: Option<u64>,
) -> anyhow::Result<()> {
    let t = resolve(name)?;
    let key = format!("cell/{}/{}", cell.id, t.suffix);
    let sub = s
        .declare_subscriber(&key)
        .await
        .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))?;
    let start = Instant::now();
    let mut window_start = Instant::now();
    let mut n = 0u64;
    let mut gaps = 0u64;
    let mut last_seq: Option<u64> = None;
    loop {
        let deadline = window_start + Duration::from_secs(1);
        match tokio::time::timeout_at(deadline.into(), sub.recv_async()).await {
            Ok(Ok(sample)) => {
                n += 1;
                if let Ok(v) = decode_json(t, &sample.payload().to_bytes()) {
                    if let Some(seq) = v["stamp"]["seq"].as_u64() {
                        if let Some(prev) = last_seq {
                            if seq > prev + 1 {
                                gaps += seq - prev - 1;
                            }
                        }
                        last_seq = Some(seq);
                    }
                }
            }
            Ok(Err(_)) => break,
            Err(_) => {
                let dt = window_start.elapsed().as_secs_f64();
                println!(
                    "{key}: {:.1} Hz ({n} msgs in {dt:.2} s, {gaps} missing by sequence)",
                    n as f64 / dt
                );
                n = 0;
                gaps = 0;
                window_start = Instant::now();
                if seconds.is_some_and(|sec| start.elapsed().as_secs() >= sec) {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Publishes `msg` on `t`, after [`permitted`].
async fn put<T: Serialize>(
    s: &Session,
    t: topic::Topic<T>,
    cell: &CellSection,
    msg: &T,
) -> anyhow::Result<()> {
    permitted(cell, t.info.suffix)?;
    bus::put_message(s, t, &t.key(&cell.id), msg).await
}

/// On a secured cell: whether this process's identity may publish on topic `suffix`, as the
/// roles table says; refused with the reason otherwise. The cell's access control drops such
/// a message without a word (a put it denies still succeeds locally), so the CLI and
/// `cell viz` ask first and say so instead of reporting a request that never arrived.
pub fn permitted(cell: &CellSection, suffix: &str) -> anyhow::Result<()> {
    if let Some(sec) = &cell.security {
        let me = identity();
        if !sec.may_publish(&cell.id, &me, suffix) {
            anyhow::bail!(
                "identity {me:?} may not publish {suffix} on this cell (the roles table of its \
                 {:?} profile, docs/security.md): nothing was sent",
                sec.profile
            );
        }
    }
    Ok(())
}

pub fn stamp() -> Stamp {
    Stamp {
        seq: 1,
        source_mono_ns: common::clock::mono_ns(),
    }
}

pub async fn set_mode(s: &Session, cell: &CellSection, mode: Mode) -> anyhow::Result<()> {
    put(
        s,
        topic::MODE_COMMAND,
        cell,
        &ModeCommand {
            stamp: stamp(),
            mode,
        },
    )
    .await
}

/// How long `cell estop` / `cell reset` wait for robot-io's acknowledgement.
pub const ESTOP_ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// What the operator asks of robot-io's safety latch: a stop goes on `robot/estop` (any
/// identity may send it), a reset on `robot/reset` (the roles table says who).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SafetyRequest {
    Stop(EStopAction),
    Reset(ResetScope),
}

impl SafetyRequest {
    pub fn describe(self) -> &'static str {
        match self {
            SafetyRequest::Stop(EStopAction::Engage) => "e-stop",
            SafetyRequest::Stop(EStopAction::Protective) => "protective stop",
            SafetyRequest::Reset(ResetScope::All) => "reset",
            SafetyRequest::Reset(ResetScope::ProtectiveOnly) => "protective-stop reset",
        }
    }
}

/// Sends an e-stop or reset request and waits for robot-io's acknowledgement: a safety state
/// showing the stop (engage) or no longer showing it (reset). Fails with a clear message when
/// none comes within [`ESTOP_ACK_TIMEOUT`]; returns the acknowledging state.
pub async fn estop(
    s: &Session,
    cell: &CellSection,
    request: SafetyRequest,
) -> anyhow::Result<msg::SafetyState> {
    use msg::SafetyLevel as L;
    let sub = s
        .declare_subscriber(topic::SAFETY_STATE.key(&cell.id))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe to the safety state: {e}"))?;
    match request {
        SafetyRequest::Stop(action) => {
            put(
                s,
                topic::ESTOP,
                cell,
                &EStop {
                    stamp: stamp(),
                    action,
                },
            )
            .await?
        }
        SafetyRequest::Reset(scope) => {
            put(
                s,
                topic::ESTOP_RESET,
                cell,
                &EStopReset {
                    stamp: stamp(),
                    scope,
                },
            )
            .await?
        }
    }
    let acked = |st: &msg::SafetyState| match request {
        SafetyRequest::Stop(EStopAction::Engage) => st.level == L::EmergencyStop,
        SafetyRequest::Stop(EStopAction::Protective) => {
            matches!(st.level, L::ProtectiveStop | L::EmergencyStop)
        }
        SafetyRequest::Reset(ResetScope::All) => {
            !matches!(st.level, L::EmergencyStop | L::ProtectiveStop)
        }
        SafetyRequest::Reset(ResetScope::ProtectiveOnly) => st.level != L::ProtectiveStop,
    };
    let deadline = tokio::time::Instant::now() + ESTOP_ACK_TIMEOUT;
    loop {
        let sample = match tokio::time::timeout_at(deadline, sub.recv_async()).await {
            Ok(Ok(sample)) => sample,
            Ok(Err(_)) | Err(_) => anyhow::bail!(
                "no acknowledgement from robot-io within {} ms: the {} is NOT confirmed — check that robot-io is running (`cell status robot-io`) and use the hardware e-stop",
                ESTOP_ACK_TIMEOUT.as_millis(),
                request.describe()
            ),
        };
        let Ok(st) = codec::decode::<msg::SafetyState>(&sample.payload().to_bytes()) else {
            continue;
        };
        if acked(&st) {
            return Ok(st);
        }
    }
}

pub async fn move_to(
    s: &Session,
    cell: &CellSection,
    tcp_in_base: Pose,
    speed_m_s: f64,
    rot_speed_rad_s: f64,
) -> anyhow::Result<()> {
    put(
        s,
        topic::MOVE_TARGET,
        cell,
        &MoveTarget {
            stamp: stamp(),
            tcp_in_base,
            max_speed_m_s: speed_m_s,
            max_rot_speed_rad_s: rot_speed_rad_s,
        },
    )
    .await
}

/// Sends a JSON request to a request/reply queryable and returns the JSON answer.
pub async fn request(
    s: &Session,
    key: &str,
    body: Option<String>,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    let mut get = s.get(key).timeout(timeout);
    if let Some(b) = body {
        get = get.payload(b);
    }
    let replies = get.await.map_err(|e| anyhow::anyhow!("query {key}: {e}"))?;
    let reply = replies
        .recv_async()
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "no reply from {key} (is the service running? on a secured cell, an identity the roles table does not let ask it gets no reply: this one is {:?}, docs/security.md)",
                identity()
            )
        })?;
    match reply.result() {
        Ok(sample) => serde_json::from_slice(&sample.payload().to_bytes())
            .map_err(|e| anyhow::anyhow!("{key}: reply is not JSON: {e}")),
        Err(e) => {
            let text = e
                .payload()
                .try_to_string()
                .map(|s| s.to_string())
                .unwrap_or_default();
            let msg = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or(text);
            anyhow::bail!("{msg}")
        }
    }
}

/// control's `last_error` and `stop_reason` now (to tell a new refusal from an old one).
pub async fn control_errors(s: &Session, cell: &CellSection) -> (Option<String>, Option<String>) {
    match status(s, cell, Some("control")).await {
        Ok(v) => v
            .first()
            .map(|c| {
                (
                    c["last_error"].as_str().map(str::to_string),
                    c["detail"]["stop_reason"].as_str().map(str::to_string),
                )
            })
            .unwrap_or_default(),
        Err(_) => (None, None),
    }
}

/// robot-io's reference counters (`cell status robot-io`, `detail.safety`), read before and
/// after a piece of work so its metrics can say what robot-io did to the commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RobotIoCounters {
    /// Replies that differ from the time-aligned command (any limit acted).
    pub limited_cycles: u64,
    /// Of those, replies where no common scale fitted and joints were limited one by one.
    pub per_joint_limited_cycles: u64,
    /// Replies whose command was held in time (a lost datagram, a late or repeated command).
    pub aligned_cycles: u64,
    /// Limited replies by the bound that acted, in `robot_io::supervisor::LIMIT_KINDS` order.
    pub limited_by: [u64; 6],
    /// Of the limited replies, those that corrected a time-aligned one (a late command, a
    /// lost datagram); the others are the command stream's own.
    pub limited_after_alignment: u64,
}

impl RobotIoCounters {
    /// robot-io's counters now; `None` when it does not answer or reports none.
    pub async fn read(s: &Session, cell: &CellSection) -> Option<Self> {
        let v = status(s, cell, Some("robot-io")).await.ok()?;
        let d = &v.first()?["detail"]["safety"];
        Some(Self {
            limited_cycles: d["limited_cycles"].as_u64()?,
            per_joint_limited_cycles: d["per_joint_limited_cycles"].as_u64()?,
            aligned_cycles: d["aligned_cycles"].as_u64()?,
            limited_by: robot_io::supervisor::LIMIT_KINDS
                .map(|k| d["limited_by"][k.name()].as_u64().unwrap_or(0)),
            limited_after_alignment: d["limited_after_alignment"].as_u64().unwrap_or(0),
        })
    }

    /// The bounds that acted, e.g. "accel 10, target_brake 2" ("" when none).
    pub fn bounds(&self) -> String {
        robot_io::supervisor::LIMIT_KINDS
            .iter()
            .zip(self.limited_by)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What was counted from `before` to `self` (a restarted robot-io counts from 0: then
    /// `self` as it is).
    pub fn since(self, before: Self) -> Self {
        if self.limited_cycles < before.limited_cycles
            || self.aligned_cycles < before.aligned_cycles
            || self.per_joint_limited_cycles < before.per_joint_limited_cycles
        {
            return self;
        }
        Self {
            limited_cycles: self.limited_cycles - before.limited_cycles,
            per_joint_limited_cycles: self.per_joint_limited_cycles
                - before.per_joint_limited_cycles,
            aligned_cycles: self.aligned_cycles - before.aligned_cycles,
            limited_by: std::array::from_fn(|k| {
                self.limited_by[k].saturating_sub(before.limited_by[k])
            }),
            limited_after_alignment: self
                .limited_after_alignment
                .saturating_sub(before.limited_after_alignment),
        }
    }

    /// The counters as metrics (`robot_io_limited_cycles`, …); `null` when unread.
    pub fn insert_metrics(
        m: &mut serde_json::Map<String, serde_json::Value>,
        before: Option<Self>,
        after: Option<Self>,
    ) {
        let d = before.zip(after).map(|(b, a)| a.since(b));
        let f = |x: fn(&Self) -> u64| {
            d.as_ref()
                .map(x)
                .map_or(serde_json::Value::Null, |n| n.into())
        };
        m.insert("robot_io_limited_cycles".into(), f(|c| c.limited_cycles));
        m.insert(
            "robot_io_per_joint_limited_cycles".into(),
            f(|c| c.per_joint_limited_cycles),
        );
        m.insert("robot_io_aligned_cycles".into(), f(|c| c.aligned_cycles));
        m.insert(
            "robot_io_limited_after_alignment".into(),
            f(|c| c.limited_after_alignment),
        );
        m.insert(
            "robot_io_limited_by".into(),
            d.as_ref().map_or(serde_json::Value::Null, |c| {
                robot_io::supervisor::LIMIT_KINDS
                    .iter()
                    .zip(c.limited_by)
                    .map(|(k, n)| (k.name().to_string(), serde_json::json!(n)))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            }),
        );
    }
}

/// `cell move --wait`: follows the TCP to `target` (with a progress line when `progress`); fails when control
/// refuses the move, the motion ends without reaching it (an outage, a stop), or `timeout`
/// passes. `before` is control's (last_error, stop_reason) from before the move was sent.
pub async fn wait_move(
    s: &Session,
    cell: &CellSection,
    target: &Pose,
    before: (Option<String>, Option<String>),
    timeout: Duration,
    progress: bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_check = Instant::now();
    loop {
        let slice = Duration::from_millis(500);
        match wait_at_pose(s, cell, target, slice).await {
            Ok(()) => {
                if progress {
                    eprintln!("at the target");
                }
                return Ok(());
            }
            Err(_) if Instant::now() >= deadline => {
                anyhow::bail!("the move did not reach the target within {timeout:?}")
            }
            Err(_) => {}
        }
        if last_check.elapsed() >= Duration::from_millis(400) {
            last_check = Instant::now();
            let now = control_errors(s, cell).await;
            if now.0 != before.0 {
                if let Some(e) = &now.0 {
                    anyhow::bail!("control: {e}");
                }
            }
            if now.1 != before.1 {
                if let Some(r) = &now.1 {
                    anyhow::bail!("the move ended: {r}");
                }
            }
            if !progress {
                continue;
            }
            if let Ok(p) = latest_tcp(s, cell, Duration::from_millis(200)).await {
                let d: f64 = (0..3)
                    .map(|i| (p.position_m[i] - target.position_m[i]).powi(2))
                    .sum::<f64>()
                    .sqrt();
                eprintln!("moving: {:.1} mm to go", d * 1e3);
            }
        }
    }
}

/// A generous bound on how long a move to `target` at `speed` takes (1.5 × distance / speed +
/// 10 s to settle and rotate).
pub async fn latest_move_time(
    s: &Session,
    cell: &CellSection,
    target: &Pose,
    speed_m_s: f64,
) -> Duration {
    let d = latest_tcp(s, cell, Duration::from_millis(200))
        .await
        .map(|p| {
            (0..3)
                .map(|i| (p.position_m[i] - target.position_m[i]).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .unwrap_or(1.0);
    Duration::from_secs_f64(1.5 * d / speed_m_s.max(1e-3) + 10.0)
}

/// The newest TCP pose (waits up to `timeout` for one).
pub async fn latest_tcp(
    s: &Session,
    cell: &CellSection,
    timeout: Duration,
) -> anyhow::Result<Pose> {
    let m: msg::ToolPose = latest(s, topic::TOOL_POSE.key(&cell.id), "tool pose", timeout).await?;
    Ok(m.tcp_in_base)
}

/// The newest measured joints (rad; waits up to `timeout` for a joint state).
pub async fn latest_joints(
    s: &Session,
    cell: &CellSection,
    timeout: Duration,
) -> anyhow::Result<[f64; 6]> {
    let m: msg::JointState =
        latest(s, topic::JOINT_STATE.key(&cell.id), "joint state", timeout).await?;
    Ok(m.q_rad)
}

/// The next message on `key` (waits up to `timeout`; `what` names it in the error).
async fn latest<T: serde::de::DeserializeOwned>(
    s: &Session,
    key: String,
    what: &str,
    timeout: Duration,
) -> anyhow::Result<T> {
    let sub = s
        .declare_subscriber(key)
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    let sample = tokio::time::timeout(timeout, sub.recv_async())
        .await
        .with_context(|| format!("no {what} within {timeout:?} (is the cell running?)"))?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    codec::decode::<T>(&sample.payload().to_bytes()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Waits until the tool pose is within `tol_m`/`tol_rad` of `target` and (nearly) still.
pub async fn wait_at_pose(
    s: &Session,
    cell: &CellSection,
    target: &Pose,
    timeout: Duration,
) -> anyhow::Result<()> {
    let sub = s
        .declare_subscriber(topic::TOOL_POSE.key(&cell.id))
        .with(zenoh::handlers::RingChannel::new(1))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    let deadline = Instant::now() + timeout;
    let mut still_since: Option<Instant> = None;
    while Instant::now() < deadline {
        let Ok(sample) = tokio::time::timeout(Duration::from_millis(200), sub.recv_async()).await
        else {
            continue;
        };
        let Ok(sample) = sample else { break };
        let Ok(p) = codec::decode::<msg::ToolPose>(&sample.payload().to_bytes()) else {
            continue;
        };
        let d: f64 = (0..3)
            .map(|i| (p.tcp_in_base.position_m[i] - target.position_m[i]).powi(2))
            .sum::<f64>()
            .sqrt();
        let dot: f64 = (0..4)
            .map(|i| p.tcp_in_base.quat_wxyz[i] * target.quat_wxyz[i])
            .sum::<f64>()
            .abs()
            .min(1.0);
        let ang = 2.0 * dot.acos();
        let speed: f64 = p
            .tcp_twist_base
            .linear_m_s
            .iter()
            .map(|v| v * v)
            .sum::<f64>()
            .sqrt();
        let rot: f64 = p
            .tcp_twist_base
            .angular_rad_s
            .iter()
            .map(|v| v * v)
            .sum::<f64>()
            .sqrt();
        if d < 5e-4 && ang < 5e-3 && speed < 1e-3 && rot < 5e-3 {
            let since = *still_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_millis(300) {
                return Ok(());
            }
        } else {
            still_since = None;
        }
    }
    anyhow::bail!("the robot did not settle at the target pose within {timeout:?}")
}

/// Writes the identified payload into `[force.payload]` of a cell config, keeping comments.
pub fn write_payload(file: &std::path::Path, payload: &serde_json::Value) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut doc = text
        .parse::<toml_edit::DocumentMut>()
        .with_context(|| format!("parsing {}", file.display()))?;
    let force = doc
        .entry("force")
        .or_insert(toml_edit::table())
        .as_table_mut()
        .context("[force] is not a table")?;
    let mut t = toml_edit::Table::new();
    let arr = |v: &serde_json::Value| {
        let mut a = toml_edit::Array::new();
        for x in v.as_array().into_iter().flatten() {
            a.push(x.as_f64().unwrap_or(0.0));
        }
        toml_edit::value(a)
    };
    t["mass_kg"] = toml_edit::value(payload["mass_kg"].as_f64().unwrap_or(0.0));
    t["com_m"] = arr(&payload["com_m"]);
    t["force_offset_n"] = arr(&payload["force_offset_n"]);
    t["torque_offset_nm"] = arr(&payload["torque_offset_nm"]);
    force["payload"] = toml_edit::Item::Table(t);
    std::fs::write(file, doc.to_string()).with_context(|| format!("writing {}", file.display()))?;
    Ok(())
}
