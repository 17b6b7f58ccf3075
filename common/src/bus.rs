//! Zenoh plumbing shared by every service: session from CLI args, typed publishers and
//! latest-value subscribers with counters, liveliness token and JSON status queryable.
//!
//! QoS: hot-path topics (joint state, commands, wrenches) publish `RealTime`, `express`,
//! `CongestionControl::Drop`: a late sample is worthless, and the control loop never blocks on
//! the network. Event topics (mode, e-stop, safety) publish `InteractiveHigh`, `Block`: they must
//! not be lost.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Instant,
};

use anyhow::Context;
use serde::{de::DeserializeOwned, Serialize};
use tokio::sync::{mpsc, watch};
use zenoh::{
    qos::{CongestionControl, Priority},
    Session, Wait,
};

use crate::{
    clock,
    codec::{self, DecodeError},
    config::CellSection,
    msg::{Check, InputStatus, OutputStatus, ServiceStatus, Stamp},
    topic::{self, Topic, QOS_HOT},
};

/// Bus arguments shared by every binary (mirrors zenoh's examples' `CommonArgs`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BusArgs {
    /// zenoh json5 configuration file (applied first; overrides `cell.zenoh_config`).
    #[arg(long = "zenoh-config", value_name = "FILE")]
    pub zenoh_config: Option<String>,
    /// Endpoint(s) to connect to, e.g. tcp/127.0.0.1:7447 (default: the cell's router).
    #[arg(short = 'e', long = "connect", value_name = "ENDPOINT")]
    pub connect: Vec<String>,
    /// Endpoint(s) to listen on (default: an ephemeral loopback port when the router is local).
    #[arg(short = 'l', long = "listen", value_name = "ENDPOINT")]
    pub listen: Vec<String>,
    /// Raw zenoh config override `PATH:JSON5`, e.g. `--cfg 'transport/unicast/lowlatency:true'`.
    #[arg(long = "cfg", value_name = "KEY:JSON5")]
    pub cfg: Vec<String>,
}

/// Builds the zenoh config of a session of the cell. Services are peers (direct links between
/// them once the router has introduced them); tools use `client` mode, so every query and
/// subscription goes through the router and sees the whole cell from the first request.
pub fn zenoh_config(
    args: &BusArgs,
    cell: &CellSection,
    mode: SessionMode,
) -> anyhow::Result<zenoh::Config> {
    let file = args.zenoh_config.as_ref().or(cell.zenoh_config.as_ref());
    let mut cfg = match file {
        Some(f) => {
            zenoh::Config::from_file(f).map_err(|e| anyhow::anyhow!("zenoh config {f}: {e}"))?
        }
        None => zenoh::Config::default(),
    };
    let connect = if args.connect.is_empty() {
        vec![cell.router.clone()]
    } else {
        args.connect.clone()
    };
    let listen = if !args.listen.is_empty() {
        args.listen.clone()
    } else if mode == SessionMode::Peer && connect.iter().all(|e| is_loopback_endpoint(e)) {
        vec!["tcp/127.0.0.1:0".to_string()]
    } else {
        Vec::new()
    };
    let mode_json = match mode {
        SessionMode::Peer => "\"peer\"",
        SessionMode::Client => "\"client\"",
    };
    insert(&mut cfg, "mode", mode_json)?;
    insert(
        &mut cfg,
        "connect/endpoints",
        &serde_json::to_string(&connect)?,
    )?;
    if !listen.is_empty() {
        insert(
            &mut cfg,
            "listen/endpoints",
            &serde_json::to_string(&listen)?,
        )?;
    }
    // Deterministic start-up: explicit endpoints, no multicast.
    insert(&mut cfg, "scouting/multicast/enabled", "false")?;
    // Let zenoh's own tools inspect every service.
    insert(&mut cfg, "adminspace/enabled", "true")?;
    for kv in &args.cfg {
        let (k, v) = kv
            .split_once(':')
            .with_context(|| format!("--cfg {kv}: expected PATH:JSON5"))?;
        insert(&mut cfg, k, v)?;
    }
    Ok(cfg)
}

/// zenoh session mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMode {
    Peer,
    Client,
}

fn insert(cfg: &mut zenoh::Config, key: &str, json5: &str) -> anyhow::Result<()> {
    cfg.insert_json5(key, json5)
        .map_err(|e| anyhow::anyhow!("zenoh config {key} = {json5}: {e}"))
}

fn is_loopback_endpoint(ep: &str) -> bool {
    ep.contains("127.0.0.1") || ep.contains("localhost") || ep.contains("[::1]")
}

/// Counters of one subscribed topic.
#[derive(Debug, Default)]
pub struct InputStats {
    pub key: String,
    pub received: AtomicU64,
    pub rejected: AtomicU64,
    last_reject: Mutex<Option<String>>,
    last_rx: Mutex<Option<Instant>>,
}

impl InputStats {
    fn new(key: String) -> Self {
        Self {
            key,
            ..Default::default()
        }
    }
    fn reject(&self, why: String) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(key = %self.key, "rejected message: {why}");
        if let Ok(mut g) = self.last_reject.lock() {
            *g = Some(why);
        }
    }
    fn accept(&self, at: Instant) {
        self.received.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = self.last_rx.lock() {
            *g = Some(at);
        }
    }
    fn snapshot(&self) -> InputStatus {
        InputStatus {
            key: self.key.clone(),
            received: self.received.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            last_reject: self.last_reject.lock().ok().and_then(|g| g.clone()),
            age_ms: self
                .last_rx
                .lock()
                .ok()
                .and_then(|g| *g)
                .map(|t| t.elapsed().as_secs_f64() * 1e3),
        }
    }
}

/// Counters of one published topic.
#[derive(Debug, Default)]
pub struct OutputStats {
    pub key: String,
    pub published: AtomicU64,
}

/// A message received on a latest-value slot, with its local arrival time.
#[derive(Debug, Clone, Copy)]
pub struct Received<T> {
    pub msg: T,
    pub at: Instant,
}

/// The newest sample of a topic (a `watch` channel: readers see the latest, can await changes).
pub struct Latest<T> {
    pub rx: watch::Receiver<Option<Received<T>>>,
    pub stats: Arc<InputStats>,
    _sub: zenoh::pubsub::Subscriber<()>,
}

impl<T: Clone> Latest<T> {
    /// The newest sample, if any.
    pub fn get(&self) -> Option<Received<T>> {
        self.rx.borrow().clone()
    }
    /// Waits for a sample newer than the last one seen through `changed`.
    pub async fn changed(&mut self) -> Option<Received<T>> {
        self.rx.changed().await.ok()?;
        self.rx.borrow_and_update().clone()
    }
}

/// Every message of an event topic (bounded; overflow counted as rejected).
pub struct Events<T> {
    pub rx: mpsc::Receiver<Received<T>>,
    pub stats: Arc<InputStats>,
    _sub: zenoh::pubsub::Subscriber<()>,
}

/// Typed publisher that stamps messages.
pub struct Publisher<T> {
    inner: zenoh::pubsub::Publisher<'static>,
    seq: u64,
    stats: Arc<OutputStats>,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T: Serialize> Publisher<T> {
    /// The stamp for the next message (sequence + 1, monotonic now).
    pub fn next_stamp(&mut self) -> Stamp {
        self.seq += 1;
        Stamp {
            seq: self.seq,
            source_mono_ns: clock::mono_ns(),
        }
    }

    /// Publishes without waiting for the network beyond zenoh's own queueing policy.
    pub fn put(&self, msg: &T) {
        let bytes = codec::encode(msg);
        match self.inner.put(bytes).wait() {
            Ok(()) => {
                self.stats.published.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(key = %self.stats.key, "publish failed: {e}"),
        }
    }

    pub fn key(&self) -> &str {
        &self.stats.key
    }
}

/// A service's presence on the bus: session, identity, status, counters.
#[derive(Clone)]
pub struct Node {
    pub session: Session,
    pub cell_id: String,
    pub service: String,
    started: Instant,
    inputs: Arc<Mutex<Vec<Arc<InputStats>>>>,
    outputs: Arc<Mutex<Vec<Arc<OutputStats>>>>,
    state: Arc<Mutex<String>>,
    last_error: Arc<Mutex<Option<String>>>,
    detail: Arc<Mutex<serde_json::Value>>,
}

/// Keeps the liveliness token and status queryable alive.
pub struct Presence {
    _token: zenoh::liveliness::LivelinessToken,
    _status: zenoh::query::Queryable<()>,
}

impl Node {
    /// Opens the session of a service.
    pub async fn open(args: &BusArgs, cell: &CellSection, service: &str) -> anyhow::Result<Node> {
        let cfg = zenoh_config(args, cell, SessionMode::Peer)?;
        let session = zenoh::open(cfg)
            .await
            .map_err(|e| anyhow::anyhow!("cannot open zenoh session: {e}"))?;
        Ok(Node {
            session,
            cell_id: cell.id.clone(),
            service: service.to_string(),
            started: Instant::now(),
            inputs: Arc::default(),
            outputs: Arc::default(),
            state: Arc::new(Mutex::new("starting".into())),
            last_error: Arc::default(),
            detail: Arc::new(Mutex::new(serde_json::Value::Null)),
        })
    }

    /// Declares the liveliness token `cell/<id>/alive/<service>` and the JSON status queryable
    /// `cell/<id>/<service>/status`. Call after the subscribers and publishers exist.
    pub async fn announce(&self) -> anyhow::Result<Presence> {
        let node = self.clone();
        let key = topic::status_key(&self.cell_id, &self.service);
        let status = self
            .session
            .declare_queryable(key.clone())
            .callback(move |q| {
                let json = serde_json::to_string(&node.status()).unwrap_or_else(|e| {
                    format!("{{\"error\":\"status serialization failed: {e}\"}}")
                });
                if let Err(e) = q
                    .reply(key.clone(), json)
                    .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
                    .wait()
                {
                    tracing::debug!("status reply failed: {e}");
                }
            })
            .await
            .map_err(|e| anyhow::anyhow!("status queryable: {e}"))?;
        let token = self
            .session
            .liveliness()
            .declare_token(topic::alive_key(&self.cell_id, &self.service))
            .await
            .map_err(|e| anyhow::anyhow!("liveliness token: {e}"))?;
        self.set_state("running");
        Ok(Presence {
            _token: token,
            _status: status,
        })
    }

    /// Typed, stamping publisher with the topic's QoS class.
    pub async fn publisher<T: Serialize>(&self, t: Topic<T>) -> anyhow::Result<Publisher<T>> {
        let key = t.key(&self.cell_id);
        let hot = t.info.qos == QOS_HOT;
        let builder = self
            .session
            .declare_publisher(key.clone())
            .encoding(zenoh::bytes::Encoding::APPLICATION_OCTET_STREAM);
        let builder = if hot {
            builder
                .priority(Priority::RealTime)
                .express(true)
                .congestion_control(CongestionControl::Drop)
        } else {
            builder
                .priority(Priority::InteractiveHigh)
                .congestion_control(CongestionControl::Block)
        };
        let inner = builder
            .await
            .map_err(|e| anyhow::anyhow!("publisher {key}: {e}"))?;
        let stats = Arc::new(OutputStats {
            key,
            published: AtomicU64::new(0),
        });
        if let Ok(mut o) = self.outputs.lock() {
            o.push(stats.clone());
        }
        Ok(Publisher {
            inner,
            seq: 0,
            stats,
            _t: std::marker::PhantomData,
        })
    }

    fn input_stats(&self, key: &str) -> Arc<InputStats> {
        let stats = Arc::new(InputStats::new(key.to_string()));
        if let Ok(mut i) = self.inputs.lock() {
            i.push(stats.clone());
        }
        stats
    }

    /// Subscribes into a latest-value slot. Malformed or implausible messages are counted in
    /// the status and dropped.
    pub async fn latest<T>(&self, t: Topic<T>) -> anyhow::Result<Latest<T>>
    where
        T: DeserializeOwned + Check + Clone + Send + Sync + 'static,
    {
        let key = t.key(&self.cell_id);
        let stats = self.input_stats(&key);
        let (tx, rx) = watch::channel(None);
        let st = stats.clone();
        let sub = self
            .session
            .declare_subscriber(key.clone())
            .callback(move |sample| {
                let at = Instant::now();
                match decode_checked::<T>(&sample.payload().to_bytes()) {
                    Ok(msg) => {
                        st.accept(at);
                        tx.send_replace(Some(Received { msg, at }));
                    }
                    Err(why) => st.reject(why),
                }
            })
            .await
            .map_err(|e| anyhow::anyhow!("subscriber {key}: {e}"))?;
        Ok(Latest {
            rx,
            stats,
            _sub: sub,
        })
    }

    /// Subscribes to an event topic: every message is delivered (up to `capacity` queued).
    pub async fn events<T>(&self, t: Topic<T>, capacity: usize) -> anyhow::Result<Events<T>>
    where
        T: DeserializeOwned + Check + Send + 'static,
    {
        let key = t.key(&self.cell_id);
        let stats = self.input_stats(&key);
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let st = stats.clone();
        let sub = self
            .session
            .declare_subscriber(key.clone())
            .callback(
                move |sample| match decode_checked::<T>(&sample.payload().to_bytes()) {
                    Ok(msg) => {
                        let at = Instant::now();
                        if tx.try_send(Received { msg, at }).is_ok() {
                            st.accept(at);
                        } else {
                            st.reject("event queue full".into());
                        }
                    }
                    Err(why) => st.reject(why),
                },
            )
            .await
            .map_err(|e| anyhow::anyhow!("subscriber {key}: {e}"))?;
        Ok(Events {
            rx,
            stats,
            _sub: sub,
        })
    }

    pub fn set_state(&self, state: &str) {
        if let Ok(mut s) = self.state.lock() {
            if *s != state {
                tracing::info!(service = %self.service, "state: {state}");
                *s = state.to_string();
            }
        }
    }

    pub fn set_error(&self, err: impl Into<String>) {
        let err = err.into();
        tracing::warn!(service = %self.service, "{err}");
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(err);
        }
    }

    /// Replaces the service-specific part of the status.
    pub fn set_detail(&self, detail: serde_json::Value) {
        if let Ok(mut d) = self.detail.lock() {
            *d = detail;
        }
    }

    /// The current status (what the queryable answers).
    pub fn status(&self) -> ServiceStatus {
        ServiceStatus {
            service: self.service.clone(),
            cell_id: self.cell_id.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            state: self.state.lock().map(|s| s.clone()).unwrap_or_default(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            inputs: self
                .inputs
                .lock()
                .map(|v| v.iter().map(|s| s.snapshot()).collect())
                .unwrap_or_default(),
            outputs: self
                .outputs
                .lock()
                .map(|v| {
                    v.iter()
                        .map(|s| OutputStatus {
                            key: s.key.clone(),
                            published: s.published.load(Ordering::Relaxed),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
            detail: self
                .detail
                .lock()
                .map(|d| d.clone())
                .unwrap_or(serde_json::Value::Null),
        }
    }

    /// Closes the session (undeclares everything).
    pub async fn close(self) {
        if let Err(e) = self.session.close().await {
            tracing::debug!("session close: {e}");
        }
    }
}

/// Decodes and checks a message; the error says why it was rejected.
pub fn decode_checked<T: DeserializeOwned + Check>(bytes: &[u8]) -> Result<T, String> {
    let msg: T = codec::decode(bytes).map_err(|e: DecodeError| e.to_string())?;
    msg.check()?;
    Ok(msg)
}
