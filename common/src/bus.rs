//! Zenoh plumbing shared by every service: session from CLI args, typed publishers and
//! latest-value subscribers with counters, liveliness token and JSON status queryable.
//!
//! QoS: hot-path topics (joint state, commands, wrenches) publish `RealTime`, `express`,
//! `CongestionControl::Drop`: a late sample is worthless, and the control loop never blocks on
//! the network. Event topics (mode, e-stop, safety) publish `InteractiveHigh`, `Block`: they must
//! not be lost.
//!
//! Receiving events: [`Node::events`] queues up to a capacity and sheds (counting) beyond it;
//! [`Node::events_unbounded`] never sheds a decodable, plausible message (use it where losing
//! one is worse than a growing queue: the e-stop input).

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
    codec::{self, DecodeError, EncodeError},
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
    /// A secured cell refuses overrides of its transport, listeners and access control.
    #[arg(long = "cfg", value_name = "KEY:JSON5")]
    pub cfg: Vec<String>,
    /// Who this CLI session is on a secured cell: its certificate `<dir>/<identity>.pem`
    /// (`control-host` on the control host; default `operator`). Services are always
    /// themselves.
    #[arg(long = "identity", env = "CELL_IDENTITY", value_name = "NAME")]
    pub identity: Option<String>,
}

impl BusArgs {
    /// The identity of a CLI session.
    pub fn cli_identity(&self) -> String {
        self.identity
            .clone()
            .unwrap_or_else(|| crate::security::DEFAULT_OPERATOR.to_string())
    }
}

/// Builds the zenoh config of a session of the cell. Services are peers (direct links between
/// them once the router has introduced them); tools use `client` mode, so every query and
/// subscription goes through the router and sees the whole cell from the first request.
///
/// On a secured cell (`[cell.security]`) every session adds mutual TLS with its identity's
/// certificate and the cell's access control ([`crate::security::session_settings`]); a
/// client's identity is [`BusArgs::cli_identity`], a service's its name ([`zenoh_config_as`]).
pub fn zenoh_config(
    args: &BusArgs,
    cell: &CellSection,
    mode: SessionMode,
) -> anyhow::Result<zenoh::Config> {
    zenoh_config_as(args, cell, mode, &args.cli_identity())
}

/// [`zenoh_config`] for a session of identity `identity`.
pub fn zenoh_config_as(
    args: &BusArgs,
    cell: &CellSection,
    mode: SessionMode,
    identity: &str,
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
    } else if mode == SessionMode::Peer && cell.security.is_some() {
        // One QUIC listener, on the configured interface (default: the router's host).
        vec![secure_listen(cell, identity)?]
    } else if mode == SessionMode::Peer && connect.iter().all(|e| is_loopback_endpoint(e)) {
        vec!["tcp/127.0.0.1:0".to_string()]
    } else {
        Vec::new()
    };
    if cell.security.is_some() {
        for ep in connect.iter().chain(listen.iter()) {
            crate::security::secure_endpoint(ep)
                .map_err(|e| anyhow::anyhow!("a secured cell ([cell.security]): {e}"))?;
        }
    }
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
        if cell.security.is_some()
            && SECURED_KEYS
                .iter()
                .any(|p| k.trim_matches('/').starts_with(p))
        {
            anyhow::bail!(
                "--cfg {k}: a secured cell ([cell.security]) does not take overrides of its transport, listeners, scouting or access control"
            );
        }
        insert(&mut cfg, k, v)?;
    }
    // zenoh's own introspection stays on; on a secured cell the CLI identities alone read it.
    for (k, v) in secure_settings(cell, identity)? {
        insert(&mut cfg, &k, &v)?;
    }
    Ok(cfg)
}

/// The zenoh settings (`path`, JSON5) a session of `identity` adds on a secured cell: mutual
/// TLS with its certificate and the cell's access control ([`crate::security`]); none on an
/// unsecured cell. A missing certificate file is an error that names it. Every session's one
/// source: services, the CLI and the launcher's router.
pub fn secure_settings(
    cell: &CellSection,
    identity: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let Some(sec) = &cell.security else {
        return Ok(Vec::new());
    };
    let dir = cell.certs_dir().unwrap_or_default();
    let files = crate::security::CertFiles::of(&dir, identity);
    let missing = files.missing();
    if !missing.is_empty() {
        anyhow::bail!(
            "identity {identity:?} has no certificate: {} missing (make them with `cell certs init {}`)",
            missing.join(", "),
            dir.display()
        );
    }
    Ok(crate::security::session_settings(sec, &cell.id, &files))
}

/// The zenoh config paths a secured cell's sessions own.
const SECURED_KEYS: [&str; 6] = [
    "transport",
    "listen",
    "connect",
    "scouting",
    "access_control",
    "mode",
];

/// The QUIC listener of a service on a secured cell: `[cell.security] listen_by_service.<it>`,
/// else `listen`, else the router's host with port 0.
fn secure_listen(cell: &CellSection, identity: &str) -> anyhow::Result<String> {
    if let Some(sec) = &cell.security {
        if let Some(l) = sec.listen_by_service.get(identity).or(sec.listen.as_ref()) {
            return Ok(l.clone());
        }
    }
    let host = crate::security::secure_endpoint(&cell.router)
        .map_err(|e| anyhow::anyhow!("cell.router: {e}"))?;
    Ok(format!("{}/{host}:0", crate::security::SECURE_SCHEME))
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
    /// Stamp → arrival delays of stamped (hot-path) messages.
    latency: crate::latency::AtomicHistogram,
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
    fn accept(&self, at: Instant, delay_ns: Option<u64>) {
        if let Some(d) = delay_ns {
            self.latency.record(d);
        }
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
            latency_us: None,
            latency_hist: None,
        }
        .with_latency(self.latency.snapshot())
    }
}

impl InputStatus {
    fn with_latency(mut self, h: crate::latency::Histogram) -> Self {
        if h.count() > 0 {
            self.latency_us = Some(h.summary());
            self.latency_hist = Some(h.to_sparse());
        }
        self
    }
}

/// The delay of a stamped message from its production to `at_ns` (its arrival).
fn delay_ns<T: Check>(msg: &T, at_ns: u64) -> Option<u64> {
    msg.source_mono_ns()
        .filter(|s| *s > 0)
        .map(|s| at_ns.saturating_sub(s))
}

/// Counters of one published topic.
#[derive(Debug, Default)]
pub struct OutputStats {
    pub key: String,
    pub published: AtomicU64,
    /// Messages not sent because they could not be encoded (see [`codec::EncodeError`]).
    pub encode_failed: AtomicU64,
}

impl OutputStats {
    /// Counts an encoding failure; logs the first and then every 1024th (a per-cycle topic
    /// must not flood the log).
    fn encode_failed(&self, e: &EncodeError) {
        let n = self.encode_failed.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n.is_multiple_of(1024) {
            tracing::error!(key = %self.key, failures = n, "not published: {e}");
        }
    }
}

/// A message received on a latest-value slot, with its local arrival time.
#[derive(Debug, Clone, Copy)]
pub struct Received<T> {
    pub msg: T,
    pub at: Instant,
    /// The arrival on the monotonic clock of the stamps ([`clock::mono_ns`]), ns.
    pub at_ns: u64,
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

/// Every message of an event topic, in arrival order. Made by [`Node::events`] (bounded: a
/// full queue sheds the new message and counts it as rejected) or [`Node::events_unbounded`]
/// (lossless).
pub struct Events<T> {
    pub rx: EventQueue<T>,
    pub stats: Arc<InputStats>,
    _sub: zenoh::pubsub::Subscriber<()>,
}

/// Every message of an event topic and the keys under it, with the sender's chunk of the key
/// ([`Node::events_by_sender`]).
pub struct KeyedEvents<T> {
    pub rx: mpsc::Receiver<(String, Received<T>)>,
    pub stats: Arc<InputStats>,
    _sub: zenoh::pubsub::Subscriber<()>,
}

/// The receiving end of an [`Events`] queue. Both kinds answer the same `recv`/`try_recv` as
/// tokio's receivers, so code reading events does not depend on the kind.
pub enum EventQueue<T> {
    /// At most the capacity given to [`Node::events`] waiting; beyond it messages are shed.
    Bounded(mpsc::Receiver<Received<T>>),
    /// Never sheds: every message that decodes and passes its `Check` is queued, however many
    /// are waiting ([`Node::events_unbounded`]).
    Unbounded(mpsc::UnboundedReceiver<Received<T>>),
}

impl<T> EventQueue<T> {
    /// The next message, waiting for one; `None` once the subscription is gone. Cancel-safe
    /// (like tokio's `recv`): usable in `tokio::select!` without losing messages.
    pub async fn recv(&mut self) -> Option<Received<T>> {
        match self {
            EventQueue::Bounded(rx) => rx.recv().await,
            EventQueue::Unbounded(rx) => rx.recv().await,
        }
    }

    /// The next message if one is waiting.
    pub fn try_recv(&mut self) -> Result<Received<T>, mpsc::error::TryRecvError> {
        match self {
            EventQueue::Bounded(rx) => rx.try_recv(),
            EventQueue::Unbounded(rx) => rx.try_recv(),
        }
    }

    /// True for a queue that never sheds.
    pub fn is_lossless(&self) -> bool {
        matches!(self, EventQueue::Unbounded(_))
    }
}

/// The sending end of an event queue, used by the subscriber callback.
enum EventSender<T> {
    Bounded(mpsc::Sender<Received<T>>),
    Unbounded(mpsc::UnboundedSender<Received<T>>),
}

impl<T: DeserializeOwned + Check> EventSender<T> {
    fn channel(capacity: Option<usize>) -> (EventSender<T>, EventQueue<T>) {
        match capacity {
            Some(c) => {
                let (tx, rx) = mpsc::channel(c.max(1));
                (EventSender::Bounded(tx), EventQueue::Bounded(rx))
            }
            None => {
                let (tx, rx) = mpsc::unbounded_channel();
                (EventSender::Unbounded(tx), EventQueue::Unbounded(rx))
            }
        }
    }

    /// Decodes, checks and queues one payload; whatever is not queued is counted as rejected
    /// with its reason. The unbounded queue can only refuse once its receiver is gone.
    fn deliver(&self, bytes: &[u8], stats: &InputStats) {
        let msg = match decode_checked::<T>(bytes) {
            Ok(msg) => msg,
            Err(why) => return stats.reject(why),
        };
        let at = Instant::now();
        let at_ns = clock::mono_ns();
        let delay = delay_ns(&msg, at_ns);
        let queued = match self {
            EventSender::Bounded(tx) => match tx.try_send(Received { msg, at, at_ns }) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => Err("event queue full"),
                Err(mpsc::error::TrySendError::Closed(_)) => Err("event queue closed"),
            },
            EventSender::Unbounded(tx) => tx
                .send(Received { msg, at, at_ns })
                .map_err(|_| "event queue closed"),
        };
        match queued {
            Ok(()) => stats.accept(at, delay),
            Err(why) => stats.reject(why.into()),
        }
    }
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

    /// Publishes without waiting for the network beyond zenoh's own queueing policy. A message
    /// that cannot be encoded is not sent at all: it is counted in `encode_failed` and logged.
    pub fn put(&self, msg: &T) {
        let bytes = match codec::encode(msg) {
            Ok(bytes) => bytes,
            Err(e) => return self.stats.encode_failed(&e),
        };
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
        let cfg = zenoh_config_as(args, cell, SessionMode::Peer, service)?;
        let session = zenoh::open(cfg)
            .await
            .map_err(|e| anyhow::anyhow!("cannot open zenoh session: {e}"))?;
        // Every service records its scheduling gaps from its start (status `sched`).
        crate::watchdog::process_log();
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
            .encoding(encoding_of(&t.info));
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
            ..Default::default()
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
                let at_ns = clock::mono_ns();
                match decode_checked::<T>(&sample.payload().to_bytes()) {
                    Ok(msg) => {
                        st.accept(at, delay_ns(&msg, at_ns));
                        tx.send_replace(Some(Received { msg, at, at_ns }));
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

    /// Subscribes to an event topic with a bounded queue: up to `capacity` messages wait; when
    /// the queue is full a new message is shed and counted as rejected ("event queue full").
    /// For inputs that must never lose a message use [`Node::events_unbounded`].
    pub async fn events<T>(&self, t: Topic<T>, capacity: usize) -> anyhow::Result<Events<T>>
    where
        T: DeserializeOwned + Check + Send + 'static,
    {
        self.subscribe_events(t, Some(capacity)).await
    }

    /// Subscribes to an event topic losslessly: every message that decodes and passes its
    /// `Check` is queued, however long the reader takes (an unbounded tokio channel; the
    /// subscriber callback never blocks and never sheds). Malformed or implausible messages
    /// are still counted as rejected and dropped. Memory grows with the backlog, so use it
    /// only for low-rate inputs whose loss would be worse: the e-stop.
    ///
    /// Lossless end to end needs the publisher side too: event topics publish with
    /// `CongestionControl::Block` on zenoh's reliable transport (see the module docs).
    pub async fn events_unbounded<T>(&self, t: Topic<T>) -> anyhow::Result<Events<T>>
    where
        T: DeserializeOwned + Check + Send + 'static,
    {
        self.subscribe_events(t, None).await
    }

    /// Subscribes to an event topic *and every key under it* (`<key>/**`) with a bounded
    /// queue, each message with the chunks after the topic's key (`""` for the key itself): a
    /// per-sender key such as the deadman's `control/enable/<identity>`, where access control
    /// lets each identity publish only under its own name. Counted under the topic's key.
    pub async fn events_by_sender<T>(
        &self,
        t: Topic<T>,
        capacity: usize,
    ) -> anyhow::Result<KeyedEvents<T>>
    where
        T: DeserializeOwned + Check + Send + 'static,
    {
        let key = t.key(&self.cell_id);
        let stats = self.input_stats(&key);
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let st = stats.clone();
        let prefix = format!("{key}/");
        let base = key.clone();
        let sub = self
            .session
            .declare_subscriber(format!("{key}/**"))
            .callback(move |sample| {
                let k = sample.key_expr().as_str();
                let sender = if k == base {
                    String::new()
                } else {
                    k.strip_prefix(&prefix).unwrap_or(k).to_string()
                };
                let msg = match decode_checked::<T>(&sample.payload().to_bytes()) {
                    Ok(m) => m,
                    Err(why) => return st.reject(why),
                };
                let at = Instant::now();
                let at_ns = clock::mono_ns();
                let delay = delay_ns(&msg, at_ns);
                match tx.try_send((sender, Received { msg, at, at_ns })) {
                    Ok(()) => st.accept(at, delay),
                    Err(mpsc::error::TrySendError::Full(_)) => st.reject("event queue full".into()),
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        st.reject("event queue closed".into())
                    }
                }
            })
            .await
            .map_err(|e| anyhow::anyhow!("subscriber {key}/**: {e}"))?;
        Ok(KeyedEvents {
            rx,
            stats,
            _sub: sub,
        })
    }

    async fn subscribe_events<T>(
        &self,
        t: Topic<T>,
        capacity: Option<usize>,
    ) -> anyhow::Result<Events<T>>
    where
        T: DeserializeOwned + Check + Send + 'static,
    {
        let key = t.key(&self.cell_id);
        let stats = self.input_stats(&key);
        let (tx, rx) = EventSender::channel(capacity);
        let st = stats.clone();
        let sub = self
            .session
            .declare_subscriber(key.clone())
            .callback(move |sample| tx.deliver(&sample.payload().to_bytes(), &st))
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
            sched: crate::watchdog::process_status(),
        }
    }

    /// Closes the session (undeclares everything).
    pub async fn close(self) {
        if let Err(e) = self.session.close().await {
            tracing::debug!("session close: {e}");
        }
    }
}

/// The zenoh encoding of a topic's payloads ([`topic::postcard_encoding`]): zenoh's tools
/// show the type and wire version of every sample without flags.
pub fn encoding_of(info: &topic::TopicInfo) -> zenoh::bytes::Encoding {
    zenoh::bytes::Encoding::from(topic::postcard_encoding(info))
}

/// One message on a topic from a client (CLI, tools): command QoS (interactive, blocking),
/// the topic's encoding declared. `key` is the topic's key or a sub-key of it (the deadman's).
pub async fn put_message<T: Serialize>(
    s: &Session,
    t: Topic<T>,
    key: &str,
    msg: &T,
) -> anyhow::Result<()> {
    s.put(key, codec::encode(msg)?)
        .encoding(encoding_of(&t.info))
        .priority(Priority::InteractiveHigh)
        .congestion_control(CongestionControl::Block)
        .await
        .map_err(|e| anyhow::anyhow!("put {key}: {e}"))
}

/// Decodes and checks a message; the error says why it was rejected.
pub fn decode_checked<T: DeserializeOwned + Check>(bytes: &[u8]) -> Result<T, String> {
    let msg: T = codec::decode(bytes).map_err(|e: DecodeError| e.to_string())?;
    msg.check()?;
    Ok(msg)
}

/// Answers a JSON request queryable with a JSON value (the services' RPC convention).
pub fn reply_json(q: &zenoh::query::Query, v: serde_json::Value) {
    use zenoh::Wait;
    let key = q.key_expr().clone();
    if let Err(e) = q
        .reply(key, v.to_string())
        .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
        .wait()
    {
        tracing::debug!("reply failed: {e}");
    }
}

/// Answers a JSON request queryable with an error `{"error": msg}`.
pub fn reply_err(q: &zenoh::query::Query, msg: String) {
    use zenoh::Wait;
    if let Err(e) = q
        .reply_err(serde_json::json!({ "error": msg }).to_string())
        .encoding(zenoh::bytes::Encoding::APPLICATION_JSON)
        .wait()
    {
        tracing::debug!("reply failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{EStop, EStopAction};

    fn estop(seq: u64) -> Vec<u8> {
        codec::encode(&EStop {
            stamp: Stamp {
                seq,
                source_mono_ns: 0,
            },
            action: EStopAction::Engage,
        })
        .expect("EStop encodes")
    }

    #[test]
    fn unbounded_events_never_shed() {
        let stats = InputStats::new("estop".into());
        let (tx, mut rx) = EventSender::<EStop>::channel(None);
        assert!(rx.is_lossless());
        // Far more than any bounded queue of the cell holds, with nobody reading meanwhile.
        for seq in 1..=10_000 {
            tx.deliver(&estop(seq), &stats);
        }
        // Malformed input is still rejected (and counted), not queued.
        tx.deliver(&[codec::WIRE_VERSION, 0xff], &stats);
        for seq in 1..=10_000 {
            let e = rx.try_recv().expect("every message queued");
            assert_eq!(e.msg.stamp.seq, seq);
        }
        assert!(rx.try_recv().is_err());
        assert_eq!(stats.received.load(Ordering::Relaxed), 10_000);
        assert_eq!(stats.rejected.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn bounded_events_shed_beyond_capacity_and_count_it() {
        let stats = InputStats::new("mode".into());
        let (tx, mut rx) = EventSender::<EStop>::channel(Some(16));
        assert!(!rx.is_lossless());
        for seq in 1..=20 {
            tx.deliver(&estop(seq), &stats);
        }
        let mut got = Vec::new();
        while let Ok(e) = rx.try_recv() {
            got.push(e.msg.stamp.seq);
        }
        assert_eq!(got, (1..=16).collect::<Vec<_>>());
        assert_eq!(stats.received.load(Ordering::Relaxed), 16);
        assert_eq!(stats.rejected.load(Ordering::Relaxed), 4);
        assert_eq!(
            stats.snapshot().last_reject.as_deref(),
            Some("event queue full")
        );
    }

    #[test]
    fn unbounded_recv_waits_and_ends_when_the_subscription_goes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let stats = InputStats::new("estop".into());
        let (tx, mut rx) = EventSender::<EStop>::channel(None);
        tx.deliver(&estop(7), &stats);
        drop(tx);
        rt.block_on(async {
            assert_eq!(rx.recv().await.map(|e| e.msg.stamp.seq), Some(7));
            assert!(rx.recv().await.is_none());
        });
    }
}
