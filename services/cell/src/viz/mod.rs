//! `cell viz`: a Foxglove WebSocket server beside the running cell, or replaying a recording.
//!
//! Channels (every one JSON with a JSON schema, so Foxglove needs no plugin):
//! - every cell topic on `/<key>` (`/cell/<id>/force/wrench`, …): the wrench in sensor, tool and
//!   base frames, joint states, the hybrid task's references, selection output and errors, the
//!   guide's state and the deadman, … as plottable fields;
//! - `/tf` (`foxglove.FrameTransforms`): `link1` … `link6`, `tool0`, `tcp`, `sensor` and the
//!   hybrid task's `constraint` frame, each in `base` ([`scene::transforms`]);
//! - `/scene/arm` and `/scene/world` (`foxglove.SceneUpdate`): the arm, tool, sensor and force
//!   arrow; the simulated world's surfaces;
//! - `/tcp` (`foxglove.PoseInFrame`) and `/log` (`foxglove.Log`: safety-state changes, stop
//!   reasons, mode requests, task phases, the deadman taken and released).
//!
//! Live, `cell viz` also offers services (Foxglove's Service Call panel, or buttons of the
//! shipped layout): `estop`, `protective_stop`, `set_mode`, `tare`, `teach_record`,
//! `teach_undo`, `teach_save`, `play`, `playback_stop` — each the CLI's own function, through
//! this process's session, so the same rules apply (robot-io's acknowledgement, control's
//! refusals, and on a secured cell this identity's row of the roles table). There is no reset
//! service: a reset stays a deliberate act at the control host (`cell reset`).
//!
//! With `--replay FILE` it plays a recording's JSON channels (and the 3-D scene derived from
//! its joint states) with Foxglove's playback control: play, pause, seek, speed.

pub mod fox;
pub mod scene;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use common::{
    config::CellSection,
    msg::{self, Mode},
    topic::{self, TopicInfo},
};
use foxglove::{
    websocket::{
        service::{Service, ServiceSchema},
        Capability, PlaybackCommand, PlaybackControlRequest, PlaybackState, PlaybackStatus,
        ServerListener,
    },
    ChannelBuilder, Context as FoxContext, PartialMetadata, RawChannel, Schema,
};
use kinematics::Arm;
use serde_json::{json, Value};
use zenoh::Session;

use client::{
    cli, lead,
    record::{until_stopped, wall_ns},
};

/// Foxglove's default port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";
/// The 3-D scene is refreshed at most this often (Hz): the joint states arrive at 250 Hz.
pub const SCENE_HZ: f64 = 30.0;

/// `cell viz`'s request.
#[derive(Debug, Clone)]
pub struct Request {
    pub listen: String,
    pub replay: Option<PathBuf>,
    pub speed: f64,
    pub looped: bool,
    /// Stop after this long (tests, unattended runs); None: until Ctrl-C.
    pub seconds: Option<f64>,
}

/// The channels of one view and what the derived ones need to remember.
pub struct View {
    cell_id: String,
    arm: Arm,
    topics: HashMap<&'static str, Arc<RawChannel>>,
    tf: Arc<RawChannel>,
    arm_scene: Arc<RawChannel>,
    world_scene: Arc<RawChannel>,
    tcp: Arc<RawChannel>,
    log: Arc<RawChannel>,
    force_base_n: Option<[f64; 3]>,
    constraint: Option<nalgebra::Isometry3<f64>>,
    last_scene_ns: u64,
    last_safety: Option<(msg::SafetyLevel, msg::SafetyReason)>,
    last_phase: Option<msg::HybridPhase>,
    last_enabled: Option<bool>,
}

fn json_channel(
    ctx: &Arc<FoxContext>,
    topic: &str,
    name: &str,
    schema: Vec<u8>,
) -> anyhow::Result<Arc<RawChannel>> {
    ChannelBuilder::new(topic)
        .context(ctx)
        .message_encoding("json")
        .schema(Schema::new(name, "jsonschema", schema))
        .build_raw()
        .map_err(|e| anyhow::anyhow!("channel {topic}: {e}"))
}

impl View {
    /// Every channel, advertised at once (a client may subscribe before the first message).
    pub fn new(ctx: &Arc<FoxContext>, cell_id: &str, arm: Arm) -> anyhow::Result<View> {
        let mut topics = HashMap::new();
        for t in topic::TOPICS {
            let schema = topic::json_schema(t).context("topic schema")?;
            let ch = json_channel(
                ctx,
                &format!("/cell/{cell_id}/{}", t.suffix),
                &topic::schema_name(t),
                serde_json::to_vec(&schema)?,
            )?;
            topics.insert(t.suffix, ch);
        }
        Ok(View {
            cell_id: cell_id.to_string(),
            arm,
            topics,
            tf: json_channel(
                ctx,
                "/tf",
                "foxglove.FrameTransforms",
                fox::schema_of::<fox::FrameTransforms>(),
            )?,
            arm_scene: json_channel(
                ctx,
                "/scene/arm",
                "foxglove.SceneUpdate",
                fox::schema_of::<fox::SceneUpdate>(),
            )?,
            world_scene: json_channel(
                ctx,
                "/scene/world",
                "foxglove.SceneUpdate",
                fox::schema_of::<fox::SceneUpdate>(),
            )?,
            tcp: json_channel(
                ctx,
                "/tcp",
                "foxglove.PoseInFrame",
                fox::schema_of::<fox::PoseInFrame>(),
            )?,
            log: json_channel(ctx, "/log", "foxglove.Log", fox::schema_of::<fox::Log>())?,
            force_base_n: None,
            constraint: None,
            last_scene_ns: 0,
            last_safety: None,
            last_phase: None,
            last_enabled: None,
        })
    }

    fn put<T: serde::Serialize>(ch: &RawChannel, v: &T, t_ns: u64) {
        if let Ok(bytes) = serde_json::to_vec(v) {
            ch.log_with_meta(&bytes, PartialMetadata::with_log_time(t_ns));
        }
    }

    fn say(&self, level: u8, name: &str, message: String, t_ns: u64) {
        Self::put(
            &self.log,
            &fox::Log {
                timestamp: fox::Time::from_ns(t_ns),
                level,
                message,
                name: name.into(),
                ..Default::default()
            },
            t_ns,
        );
    }

    /// The simulated world's surfaces (the simulator's scenario summary).
    pub fn world(&self, summary: &Value, t_ns: u64) {
        Self::put(&self.world_scene, &scene::world_scene(summary, t_ns), t_ns);
    }

    /// One message of topic `t` (JSON, as decoded from the bus or read from a recording),
    /// received at `t_ns` (wall): its own channel, then what is derived from it.
    pub fn on_message(&mut self, t: &'static TopicInfo, v: &Value, t_ns: u64) {
        if let Some(ch) = self.topics.get(t.suffix) {
            Self::put(ch.as_ref(), v, t_ns);
        }
        match t.suffix {
            s if s == topic::JOINT_STATE.info.suffix => {
                let Ok(js) = serde_json::from_value::<msg::JointState>(v.clone()) else {
                    return;
                };
                if (t_ns.saturating_sub(self.last_scene_ns) as f64) < 1e9 / SCENE_HZ {
                    return;
                }
                self.last_scene_ns = t_ns;
                let q = js.q_rad;
                if let Some(tfs) = scene::transforms(&self.arm, &q, t_ns, self.constraint.as_ref())
                {
                    Self::put(&self.tf, &tfs, t_ns);
                }
                Self::put(
                    &self.arm_scene,
                    &scene::arm_scene(&self.arm, &q, t_ns, self.force_base_n),
                    t_ns,
                );
                if let Ok(tcp) = self.arm.fk(&q) {
                    Self::put(
                        &self.tcp,
                        &fox::PoseInFrame {
                            timestamp: fox::Time::from_ns(t_ns),
                            frame_id: scene::BASE.into(),
                            pose: fox::Pose::from(&tcp),
                        },
                        t_ns,
                    );
                }
            }
            s if s == topic::WRENCH_ESTIMATE.info.suffix => {
                if let Ok(w) = serde_json::from_value::<msg::WrenchEstimate>(v.clone()) {
                    self.force_base_n =
                        (w.fault == msg::WrenchFault::None).then_some(w.base.force_n);
                }
            }
            s if s == topic::SAFETY_STATE.info.suffix => {
                if let Ok(st) = serde_json::from_value::<msg::SafetyState>(v.clone()) {
                    let now = (st.level, st.reason);
                    if self.last_safety != Some(now) {
                        let level = match st.level {
                            msg::SafetyLevel::EmergencyStop | msg::SafetyLevel::ProtectiveStop => {
                                fox::level::ERROR
                            }
                            _ => fox::level::INFO,
                        };
                        self.say(
                            level,
                            "robot-io",
                            format!("safety: {:?} ({:?})", st.level, st.reason),
                            t_ns,
                        );
                        self.last_safety = Some(now);
                    }
                }
            }
            s if s == topic::HYBRID_STATE.info.suffix => {
                if let Ok(h) = serde_json::from_value::<msg::HybridState>(v.clone()) {
                    self.constraint = Some(h.frame_in_base.to_isometry());
                    if self.last_phase != Some(h.phase) {
                        let level = if matches!(h.phase, msg::HybridPhase::Aborted) {
                            fox::level::ERROR
                        } else {
                            fox::level::INFO
                        };
                        self.say(
                            level,
                            "control",
                            format!("hybrid task {}: phase {:?}", h.motion_id, h.phase),
                            t_ns,
                        );
                        self.last_phase = Some(h.phase);
                    }
                }
            }
            s if s == topic::GUIDE_STATE.info.suffix => {
                if let Ok(g) = serde_json::from_value::<msg::GuideState>(v.clone()) {
                    if self.last_enabled != Some(g.enabled) {
                        let m = if g.enabled {
                            "deadman held: guiding"
                        } else {
                            "deadman released: holding"
                        };
                        self.say(
                            fox::level::INFO,
                            "control",
                            format!("guide ({:?}): {m}", g.law),
                            t_ns,
                        );
                        self.last_enabled = Some(g.enabled);
                    }
                }
            }
            s if s == topic::MODE_COMMAND.info.suffix => {
                if let Ok(m) = serde_json::from_value::<msg::ModeCommand>(v.clone()) {
                    self.say(
                        fox::level::INFO,
                        "operator",
                        format!("mode requested: {:?}", m.mode),
                        t_ns,
                    );
                }
            }
            s if s == topic::ESTOP.info.suffix => {
                if let Ok(e) = serde_json::from_value::<msg::EStop>(v.clone()) {
                    self.say(
                        fox::level::WARNING,
                        "stop",
                        format!("stop requested: {:?}", e.action),
                        t_ns,
                    );
                }
            }
            s if s == topic::ESTOP_RESET.info.suffix => {
                if let Ok(r) = serde_json::from_value::<msg::EStopReset>(v.clone()) {
                    self.say(
                        fox::level::WARNING,
                        "stop",
                        format!("reset requested: {:?}", r.scope),
                        t_ns,
                    );
                }
            }
            _ => {}
        }
    }

    /// A bus sample (key, payload) received at `t_ns`.
    pub fn on_sample(&mut self, key: &str, payload: &[u8], t_ns: u64) {
        let Some(t) = topic::from_key(&self.cell_id, key) else {
            return;
        };
        if let Ok(v) = topic::to_json(t, payload) {
            self.on_message(t, &v, t_ns);
        }
    }
}

fn listen_addr(listen: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = listen
        .rsplit_once(':')
        .with_context(|| format!("--listen {listen:?}: expected HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("--listen {listen:?}: bad port"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

fn obj_schema(name: &str, props: Value, required: &[&str]) -> Schema {
    let s = json!({"type": "object", "properties": props, "required": required});
    Schema::new(
        name,
        "jsonschema",
        serde_json::to_vec(&s).unwrap_or_default(),
    )
}

fn service(
    name: &str,
    request: Value,
    required: &[&str],
    s: &Session,
    cell: &CellSection,
    call: impl Fn(Session, CellSection, Value) -> futures_like::BoxFut + Send + Sync + 'static,
) -> Service {
    let schema = ServiceSchema::new(format!("cell.{name}"))
        .with_request(
            "json",
            obj_schema(&format!("cell.{name}.Request"), request, required),
        )
        .with_response(
            "json",
            obj_schema(&format!("cell.{name}.Response"), json!({}), &[]),
        );
    let (s, cell) = (s.clone(), cell.clone());
    let call = Arc::new(call);
    Service::builder(name, schema).async_handler_fn(move |req| {
        let (s, cell, call) = (s.clone(), cell.clone(), call.clone());
        async move {
            let body: Value = if req.payload().is_empty() {
                json!({})
            } else {
                serde_json::from_slice(req.payload())
                    .map_err(|e| format!("request is not JSON: {e}"))?
            };
            match call(s, cell, body).await {
                Ok(v) => Ok::<Vec<u8>, String>(serde_json::to_vec(&v).unwrap_or_default()),
                Err(e) => Err(format!("{e:#}")),
            }
        }
    })
}

/// Boxed futures for the services' table.
mod futures_like {
    pub type BoxFut = std::pin::Pin<
        Box<dyn std::future::Future<Output = anyhow::Result<serde_json::Value>> + Send>,
    >;
}

fn mode_of(v: &Value) -> anyhow::Result<Mode> {
    let m = v["mode"].as_str().unwrap_or("");
    Ok(match m {
        "idle" => Mode::Idle,
        "hold" => Mode::Hold,
        "lead-through" | "lead_through" => Mode::LeadThrough,
        "hybrid" => Mode::Hybrid,
        "playback" => Mode::Playback,
        _ => anyhow::bail!("mode {m:?}: one of idle, hold, lead-through, hybrid, playback"),
    })
}

/// The operator services `cell viz` offers live (the shipped layout's buttons call them).
pub const SERVICE_NAMES: [&str; 9] = [
    "estop",
    "protective_stop",
    "set_mode",
    "tare",
    "teach_record",
    "teach_undo",
    "teach_save",
    "play",
    "playback_stop",
];

/// The operator's services (see the module doc).
fn services(s: &Session, cell: &CellSection, programs: PathBuf) -> Vec<Service> {
    let p1 = programs.clone();
    vec![
        service("estop", json!({}), &[], s, cell, |s, cell, _| {
            Box::pin(async move {
                let st = cli::estop(
                    &s,
                    &cell,
                    cli::SafetyRequest::Stop(msg::EStopAction::Engage),
                )
                .await?;
                Ok(json!({"level": format!("{:?}", st.level)}))
            })
        }),
        service("protective_stop", json!({}), &[], s, cell, |s, cell, _| {
            Box::pin(async move {
                let st = cli::estop(
                    &s,
                    &cell,
                    cli::SafetyRequest::Stop(msg::EStopAction::Protective),
                )
                .await?;
                Ok(json!({"level": format!("{:?}", st.level)}))
            })
        }),
        service(
            "set_mode",
            json!({"mode": {"type": "string", "enum": ["idle", "hold", "lead-through", "hybrid", "playback"]}}),
            &["mode"],
            s,
            cell,
            |s, cell, v| {
                Box::pin(async move {
                    let m = mode_of(&v)?;
                    cli::set_mode(&s, &cell, m).await?;
                    Ok(json!({"requested": format!("{m:?}")}))
                })
            },
        ),
        service("tare", json!({}), &[], s, cell, |s, cell, _| {
            Box::pin(async move {
                cli::request(
                    &s,
                    &force::node::rpc_key(&cell.id, "tare"),
                    None,
                    Duration::from_secs(10),
                )
                .await
            })
        }),
        service(
            "teach_record",
            json!({"label": {"type": "string"}}),
            &[],
            s,
            cell,
            |s, cell, v| {
                Box::pin(async move {
                    let label = v["label"].as_str().unwrap_or("").to_string();
                    lead::rpc(&s, &cell, json!({"record": {"label": label}})).await
                })
            },
        ),
        service("teach_undo", json!({}), &[], s, cell, |s, cell, _| {
            Box::pin(async move { lead::rpc(&s, &cell, json!({"undo": {}})).await })
        }),
        service(
            "teach_save",
            json!({"name": {"type": "string"}}),
            &["name"],
            s,
            cell,
            move |s, cell, v| {
                let dir = p1.clone();
                Box::pin(async move {
                    let name = v["name"].as_str().unwrap_or("").to_string();
                    anyhow::ensure!(!name.is_empty(), "name: the program's name");
                    let path = lead::save(&s, &cell, &dir, &name).await?;
                    Ok(json!({"saved": path}))
                })
            },
        ),
        service(
            "play",
            json!({"name": {"type": "string"}, "speed": {"type": "number"}}),
            &["name"],
            s,
            cell,
            move |s, cell, v| {
                let dir = programs.clone();
                Box::pin(async move {
                    let name = v["name"].as_str().unwrap_or("").to_string();
                    let speed = v["speed"].as_f64().unwrap_or(1.0);
                    let p = control::program::Program::load(&dir, &name)
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    let payload = lead::mounted_payload(&s, &cell).await?;
                    lead::rpc(
                        &s,
                        &cell,
                        json!({"play": {"program": p, "speed_scale": speed, "mounted_payload": payload, "cartesian": false}}),
                    )
                    .await
                })
            },
        ),
        service("playback_stop", json!({}), &[], s, cell, |s, cell, _| {
            Box::pin(async move { lead::rpc(&s, &cell, json!({"stop": {}})).await })
        }),
    ]
}

/// `cell viz`.
pub async fn command(
    s: Option<Session>,
    cell: &CellSection,
    arm: Arm,
    req: Request,
) -> anyhow::Result<bool> {
    let (host, port) = listen_addr(&req.listen)?;
    let ctx = FoxContext::new();
    match (&req.replay, s) {
        (Some(path), _) => replay(ctx, arm, &host, port, path, &req).await,
        (None, Some(s)) => {
            let view = View::new(&ctx, &cell.id, arm)?;
            live(ctx, view, &host, port, s, cell, &req).await
        }
        (None, None) => anyhow::bail!("cell viz: no session"),
    }
}

async fn live(
    ctx: Arc<FoxContext>,
    view: View,
    host: &str,
    port: u16,
    s: Session,
    cell: &CellSection,
    req: &Request,
) -> anyhow::Result<bool> {
    let server = ctx
        .websocket_server()
        .name(format!("cell {}", cell.id))
        .bind(host, port)
        .capabilities([Capability::Services])
        .services(services(&s, cell, PathBuf::from("programs")))
        .start()
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the Foxglove server on {}: {e}", req.listen))?;
    eprintln!(
        "cell viz: Foxglove WebSocket server on ws://{host}:{} (open it in Foxglove: Open connection → Foxglove WebSocket; layout deploy/foxglove/cell.json), live from cell {} — Ctrl-C to stop",
        server.port(),
        cell.id
    );
    let view = Arc::new(Mutex::new(view));
    let v2 = view.clone();
    let key = format!("cell/{}/**", cell.id);
    let sub = s
        .declare_subscriber(&key)
        .callback(move |sample| {
            if let Ok(mut v) = v2.lock() {
                v.on_sample(
                    sample.key_expr().as_str(),
                    &sample.payload().to_bytes(),
                    wall_ns(),
                );
            }
        })
        .await
        .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))?;
    // The simulated world, refreshed every 2 s (a real cell has no simulator: nothing drawn).
    let world = {
        let (s, cell, view) = (s.clone(), cell.clone(), view.clone());
        tokio::spawn(async move {
            let key = format!("cell/{}/sim/rpc/scenario", cell.id);
            loop {
                if let Ok(summary) = cli::request(&s, &key, None, Duration::from_secs(1)).await {
                    if let Ok(v) = view.lock() {
                        v.world(&summary, wall_ns());
                    }
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    };
    until_stopped(req.seconds).await;
    world.abort();
    let _ = sub.undeclare().await;
    let _ = server.stop();
    Ok(true)
}

/// One recorded JSON message.
struct Recorded {
    log_ns: u64,
    topic: &'static TopicInfo,
    json: Value,
}

fn read_recording(path: &std::path::Path) -> anyhow::Result<(Vec<Recorded>, String)> {
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let opts = mcap::read::Options::IgnoreEndMagic.into();
    let stream = mcap::MessageStream::new_with_options(&bytes, opts).context("not an MCAP file")?;
    let mut out = Vec::new();
    let mut cell_id = String::new();
    for m in stream {
        let Ok(m) = m else { break };
        if m.channel.message_encoding != "json" {
            continue;
        }
        let Some((id, t)) = topic::split_key(m.channel.topic.trim_start_matches('/')) else {
            continue;
        };
        let Ok(json) = serde_json::from_slice::<Value>(&m.data) else {
            continue;
        };
        if cell_id.is_empty() {
            cell_id = id.to_string();
        }
        out.push(Recorded {
            log_ns: m.log_time,
            topic: t,
            json,
        });
    }
    out.sort_by_key(|r| r.log_ns);
    Ok((out, cell_id))
}

/// Playback state shared with Foxglove's playback-control callback.
#[derive(Debug)]
struct Playhead {
    playing: bool,
    speed: f64,
    /// Recorded time the playhead is at (ns).
    at_ns: u64,
    seek: bool,
    request_id: Option<String>,
}

struct PlaybackListener {
    head: Arc<Mutex<Playhead>>,
    range: (u64, u64),
}

impl PlaybackListener {
    fn state(&self, h: &Playhead) -> PlaybackState {
        PlaybackState {
            status: if h.at_ns >= self.range.1 {
                PlaybackStatus::Ended
            } else if h.playing {
                PlaybackStatus::Playing
            } else {
                PlaybackStatus::Paused
            },
            current_time: h.at_ns,
            playback_speed: h.speed as f32,
            did_seek: h.seek,
            request_id: h.request_id.clone(),
        }
    }
}

impl ServerListener for PlaybackListener {
    fn on_playback_control_request(&self, r: PlaybackControlRequest) -> Option<PlaybackState> {
        let mut h = self.head.lock().ok()?;
        h.playing = matches!(r.playback_command, PlaybackCommand::Play);
        if r.playback_speed.is_finite() && r.playback_speed > 0.0 {
            h.speed = r.playback_speed as f64;
        }
        if let Some(t) = r.seek_time {
            h.at_ns = t.clamp(self.range.0, self.range.1);
            h.seek = true;
        }
        h.request_id = Some(r.request_id);
        Some(self.state(&h))
    }
}

async fn replay(
    ctx: Arc<FoxContext>,
    arm: Arm,
    host: &str,
    port: u16,
    path: &std::path::Path,
    req: &Request,
) -> anyhow::Result<bool> {
    let (msgs, recorded_id) = read_recording(path)?;
    anyhow::ensure!(
        !msgs.is_empty(),
        "{} holds no JSON channel of a cell topic",
        path.display()
    );
    // The view's channels are named after the recorded cell.
    let mut view = View::new(&ctx, &recorded_id, arm)?;
    let range = (msgs[0].log_ns, msgs[msgs.len() - 1].log_ns);
    let head = Arc::new(Mutex::new(Playhead {
        playing: true,
        speed: req.speed,
        at_ns: range.0,
        seek: false,
        request_id: None,
    }));
    let listener = Arc::new(PlaybackListener {
        head: head.clone(),
        range,
    });
    let server = ctx
        .websocket_server()
        .name(format!("cell replay {}", path.display()))
        .bind(host, port)
        .capabilities([Capability::PlaybackControl, Capability::Time])
        .playback_time_range(range.0, range.1)
        .listener(listener.clone())
        .start()
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the Foxglove server on {}: {e}", req.listen))?;
    eprintln!(
        "cell viz: replaying {} ({} messages, {:.1} s) on ws://{host}:{} — Foxglove's playback bar plays, pauses and seeks",
        path.display(),
        msgs.len(),
        (range.1 - range.0) as f64 * 1e-9,
        server.port()
    );
    let tick = Duration::from_millis(20);
    let mut idx = 0usize;
    let run = async {
        loop {
            tokio::time::sleep(tick).await;
            let (from, to, seek) = {
                let Ok(mut h) = head.lock() else { break };
                let seek = std::mem::take(&mut h.seek);
                let from = h.at_ns;
                if h.playing && h.at_ns < range.1 {
                    h.at_ns = (h.at_ns + (tick.as_nanos() as f64 * h.speed) as u64).min(range.1);
                }
                if h.at_ns >= range.1 && req.looped {
                    h.at_ns = range.0;
                    h.seek = true;
                }
                (from, h.at_ns, seek)
            };
            if seek || to < from {
                idx = msgs.partition_point(|m| m.log_ns < to);
                view.last_scene_ns = 0;
            }
            while idx < msgs.len() && msgs[idx].log_ns <= to {
                let m = &msgs[idx];
                view.on_message(m.topic, &m.json, m.log_ns);
                idx += 1;
            }
            server.broadcast_time(to);
            if seek || to >= range.1 {
                if let Ok(h) = head.lock() {
                    server.broadcast_playback_state(listener.state(&h));
                }
            }
        }
    };
    tokio::select! {
        _ = run => {}
        _ = until_stopped(req.seconds) => {}
    }
    let _ = server.stop();
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Follows a message path (`base.force_n[2]`) through a JSON Schema (schemars' `$defs`).
    fn resolves(schema: &Value, path: &str) -> bool {
        fn follow(defs: &Value, n: &Value) -> Value {
            let mut n = n.clone();
            while let Some(r) = n["$ref"].as_str().map(str::to_string) {
                n = defs[r.trim_start_matches("#/$defs/")].clone();
            }
            n
        }
        let defs = &schema["$defs"];
        let deref = |n: &Value| follow(defs, n);
        let mut node = deref(schema);
        for part in path.split('.') {
            let (name, index) = match part.split_once('[') {
                Some((n, i)) => (n, Some(i.trim_end_matches(']'))),
                None => (part, None),
            };
            node = deref(&node["properties"][name]);
            if node.is_null() {
                return false;
            }
            if let Some(i) = index {
                let Ok(i) = i.parse::<u64>() else {
                    return false;
                };
                if node["maxItems"].as_u64().is_some_and(|m| i >= m) {
                    return false;
                }
                node = deref(&node["items"]);
            }
        }
        true
    }

    /// The shipped layout names only topics, fields and services that exist.
    #[test]
    fn the_foxglove_layout_is_current() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/foxglove/cell.json"
        );
        let layout: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("layout")).expect("JSON");
        let mut checked = 0;
        for (id, cfg) in layout["configById"].as_object().expect("panels") {
            let mut paths: Vec<String> = cfg["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["value"].as_str().map(String::from))
                .collect();
            if let Some(t) = cfg["topicPath"].as_str() {
                paths.push(t.to_string());
            }
            for p in paths {
                let (topic_key, field) = p.split_once('.').unwrap_or((p.as_str(), ""));
                let key = topic_key.trim_start_matches('/');
                let t =
                    topic::from_key("sim", key).unwrap_or_else(|| panic!("{id}: no topic {key}"));
                let schema = topic::json_schema(t).expect("schema");
                assert!(
                    field.is_empty() || resolves(&schema, field),
                    "{id}: {p} names no field"
                );
                checked += 1;
            }
            if let Some(name) = cfg["serviceName"].as_str() {
                assert!(SERVICE_NAMES.contains(&name), "{id}: no service {name}");
                checked += 1;
            }
            for (topic, _) in cfg["topics"].as_object().into_iter().flatten() {
                assert!(
                    ["/scene/arm", "/scene/world", "/tcp", "/tf"].contains(&topic.as_str()),
                    "{id}: {topic}"
                );
            }
        }
        assert!(checked > 20, "{checked}");
        assert!(!resolves(
            &topic::json_schema(&topic::WRENCH_ESTIMATE.info).expect("s"),
            "base.force_n[3]"
        ));
        assert!(!resolves(
            &topic::json_schema(&topic::WRENCH_ESTIMATE.info).expect("s"),
            "nope"
        ));
    }

    #[test]
    fn listen_addresses_parse() {
        assert_eq!(
            listen_addr("127.0.0.1:8765").ok(),
            Some(("127.0.0.1".into(), 8765))
        );
        assert_eq!(listen_addr("[::1]:9000").ok(), Some(("::1".into(), 9000)));
        assert!(listen_addr("8765").is_err());
        assert!(listen_addr("h:x").is_err());
    }
}
