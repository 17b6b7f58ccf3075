//! `cell record`: the cell's bus into an MCAP file (rosbag2's habit, Foxglove's format).
//!
//! Every cell topic (or the ones named) is written twice, on two channels that share one
//! schema record (`cell.msg.<Type>`, a JSON Schema derived from the wire type):
//! - `/<key>` (`/cell/<id>/force/wrench`): the message as JSON, so Foxglove and any MCAP
//!   reader open the file without plugins (the leading `/` is Foxglove's topic convention);
//! - `raw/<key>`: the exact payload as it crossed the bus (version byte + postcard), for
//!   `cell replay`; its metadata names the wire version and the zenoh encoding the publisher
//!   declared.
//!
//! Times: a message's **log time** is its receive wall time on the recorder's host (ns since
//! the Unix epoch); its **publish time** is the message's own stamp (`Stamp::source_mono_ns`,
//! the publisher host's monotonic clock). The `cell.clock` metadata record holds the recorder
//! host's (wall, monotonic) pair at start and end, and per channel the smallest
//! log − publish offset seen (the publisher's clock mapped to wall time, up to the one-way
//! latency).
//!
//! Files are chunked and zstd-compressed; a chunk is closed at 256 KiB or every second,
//! whichever comes first, so a recording killed mid-way (SIGKILL, power) loses at most its
//! open chunk: MCAP readers read every complete chunk of a truncated file.
//!
//! [`McapSink`] is the file side (no bus: unit-tested on its own); [`Recording`] is the shell
//! that subscribes and feeds it from a thread of its own, off the bus's callbacks.

use std::{
    collections::{BTreeMap, HashMap},
    fs::File,
    io::{BufWriter, Seek, Write},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use common::{
    bus::BusArgs,
    codec,
    config::CellSection,
    topic::{self, TopicInfo},
};
use serde::Serialize;
use zenoh::Session;

/// A chunk is closed when its uncompressed size passes this.
pub const CHUNK_BYTES: u64 = 256 * 1024;
/// ... or when it has been open this long: the most a killed recording loses.
pub const CHUNK_MAX_AGE_NS: u64 = 1_000_000_000;
/// The MCAP profile string of the cell's recordings (free-form by the spec).
pub const PROFILE: &str = "cell";
/// Message encoding of the raw channels.
pub const RAW_ENCODING: &str = "postcard";
/// Topic prefix of the raw channels.
pub const RAW_PREFIX: &str = "raw/";

/// Wall clock now, ns since the Unix epoch.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One sample off the bus, as the recorder received it.
#[derive(Debug, Clone)]
pub struct Sample {
    pub key: String,
    /// The zenoh encoding the publisher declared (`Encoding`'s display form).
    pub encoding: String,
    pub payload: Vec<u8>,
    pub recv_wall_ns: u64,
}

/// What a recording says about itself (the `cell.recording` metadata record).
#[derive(Debug, Clone, Serialize)]
pub struct RecordingInfo {
    pub cell_id: String,
    /// The topic suffixes recorded; empty: every topic.
    pub topics: Vec<String>,
    pub identity: String,
    pub command: String,
    pub host: String,
}

/// Per-topic counts of a recording.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TopicCount {
    pub messages: u64,
    /// Payloads that did not decode as the topic's type (kept on the raw channel only).
    pub undecodable: u64,
}

/// The outcome of a recording.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecordSummary {
    pub path: PathBuf,
    pub topics: BTreeMap<String, TopicCount>,
    pub messages: u64,
    /// Samples on keys of no known topic (not written).
    pub unknown_keys: u64,
    /// Samples the bus delivered while the writer was behind (queue full; not written).
    pub dropped: u64,
    pub bytes: u64,
    pub seconds: f64,
}

impl RecordSummary {
    pub fn line(&self) -> String {
        format!(
            "recorded {} messages on {} topics in {:.1} s to {} ({:.1} MiB; {} dropped, {} on unknown keys)",
            self.messages,
            self.topics.len(),
            self.seconds,
            self.path.display(),
            self.bytes as f64 / (1024.0 * 1024.0),
            self.dropped,
            self.unknown_keys
        )
    }
}

struct Channels {
    json: u16,
    raw: u16,
    sequence: u32,
    min_offset_ns: Option<i128>,
}

/// The file side of a recording: MCAP writer, schemas and channels made on first use.
pub struct McapSink<W: Write + Seek> {
    writer: mcap::Writer<W>,
    cell_id: String,
    only: Vec<String>,
    schemas: HashMap<&'static str, u16>,
    channels: HashMap<String, Channels>,
    counts: BTreeMap<String, TopicCount>,
    unknown_keys: u64,
    chunk_opened_ns: Option<u64>,
    started_wall_ns: u64,
    started_mono_ns: u64,
    last_log_ns: u64,
}

impl<W: Write + Seek> McapSink<W> {
    /// Starts a file: header, the `cell.recording` metadata.
    pub fn new(w: W, info: &RecordingInfo) -> anyhow::Result<Self> {
        let opts = mcap::WriteOptions::new()
            .profile(PROFILE)
            .library(concat!("cell ", env!("CARGO_PKG_VERSION")))
            .compression(Some(mcap::Compression::Zstd))
            .chunk_size(Some(CHUNK_BYTES));
        let mut writer = opts.create(w).context("start the MCAP file")?;
        let mut meta = BTreeMap::new();
        meta.insert("cell_id".into(), info.cell_id.clone());
        meta.insert("topics".into(), info.topics.join(","));
        meta.insert("identity".into(), info.identity.clone());
        meta.insert("command".into(), info.command.clone());
        meta.insert("host".into(), info.host.clone());
        meta.insert("wire_version".into(), codec::WIRE_VERSION.to_string());
        meta.insert(
            "channels".into(),
            "/<key>: JSON (schema cell.msg.<Type>, jsonschema); raw/<key>: the bus payload (version byte + postcard)".into(),
        );
        writer
            .write_metadata(&mcap::records::Metadata {
                name: "cell.recording".into(),
                metadata: meta,
            })
            .context("write the recording's metadata")?;
        Ok(Self {
            writer,
            cell_id: info.cell_id.clone(),
            only: info.topics.clone(),
            schemas: HashMap::new(),
            channels: HashMap::new(),
            counts: BTreeMap::new(),
            unknown_keys: 0,
            chunk_opened_ns: None,
            started_wall_ns: wall_ns(),
            started_mono_ns: common::clock::mono_ns(),
            last_log_ns: 0,
        })
    }

    fn channels_for(
        &mut self,
        t: &'static TopicInfo,
        key: &str,
        encoding: &str,
    ) -> anyhow::Result<&mut Channels> {
        if !self.channels.contains_key(key) {
            let schema_id = match self.schemas.get(t.suffix) {
                Some(id) => *id,
                None => {
                    let schema = topic::json_schema(t)
                        .with_context(|| format!("no schema for {}", t.suffix))?;
                    let data = serde_json::to_vec(&schema)?;
                    let id = self
                        .writer
                        .add_schema(&topic::schema_name(t), "jsonschema", &data)
                        .context("add a schema")?;
                    self.schemas.insert(t.suffix, id);
                    id
                }
            };
            let mut meta = BTreeMap::new();
            meta.insert("key".to_string(), key.to_string());
            meta.insert("type".to_string(), t.type_name.to_string());
            meta.insert("frame".to_string(), t.frame.to_string());
            meta.insert("qos".to_string(), t.qos.to_string());
            meta.insert("publisher".to_string(), t.publisher.to_string());
            let json = self
                .writer
                .add_channel(schema_id, &format!("/{key}"), "json", &meta)
                .context("add a channel")?;
            meta.insert("wire_version".to_string(), codec::WIRE_VERSION.to_string());
            meta.insert("zenoh_encoding".to_string(), encoding.to_string());
            let raw = self
                .writer
                .add_channel(
                    schema_id,
                    &format!("{RAW_PREFIX}{key}"),
                    RAW_ENCODING,
                    &meta,
                )
                .context("add a channel")?;
            self.channels.insert(
                key.to_string(),
                Channels {
                    json,
                    raw,
                    sequence: 0,
                    min_offset_ns: None,
                },
            );
        }
        self.channels
            .get_mut(key)
            .context("channel just added is missing")
    }

    /// Writes one sample (JSON and raw); a key of no known topic, or not asked for, is
    /// counted and skipped.
    pub fn write(&mut self, s: &Sample) -> anyhow::Result<()> {
        let Some(t) = topic::from_key(&self.cell_id, &s.key) else {
            self.unknown_keys += 1;
            return Ok(());
        };
        if !self.only.is_empty() && !self.only.iter().any(|o| o == t.suffix) {
            return Ok(());
        }
        let decoded = topic::to_json(t, &s.payload);
        let publish_ns = decoded
            .as_ref()
            .ok()
            .and_then(|v| v["stamp"]["source_mono_ns"].as_u64())
            .unwrap_or(s.recv_wall_ns);
        // Close a chunk that has been open too long before this message starts a new one.
        if self
            .chunk_opened_ns
            .is_some_and(|t0| s.recv_wall_ns.saturating_sub(t0) >= CHUNK_MAX_AGE_NS)
        {
            self.flush()?;
        }
        let ch = self.channels_for(t, &s.key, &s.encoding)?;
        ch.sequence = ch.sequence.wrapping_add(1);
        let offset = s.recv_wall_ns as i128 - publish_ns as i128;
        ch.min_offset_ns = Some(ch.min_offset_ns.map_or(offset, |m| m.min(offset)));
        let header = |channel_id| mcap::records::MessageHeader {
            channel_id,
            sequence: ch.sequence,
            log_time: s.recv_wall_ns,
            publish_time: publish_ns,
        };
        let (json_id, raw_id) = (header(ch.json), header(ch.raw));
        let count = self.counts.entry(t.suffix.to_string()).or_default();
        count.messages += 1;
        match decoded {
            Ok(v) => {
                let bytes = serde_json::to_vec(&v)?;
                self.writer.write_to_known_channel(&json_id, &bytes)?;
            }
            Err(_) => count.undecodable += 1,
        }
        self.writer.write_to_known_channel(&raw_id, &s.payload)?;
        self.chunk_opened_ns.get_or_insert(s.recv_wall_ns);
        self.last_log_ns = self.last_log_ns.max(s.recv_wall_ns);
        Ok(())
    }

    /// Closes the open chunk and flushes it to the file.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.writer.flush().context("flush the MCAP file")?;
        self.chunk_opened_ns = None;
        Ok(())
    }

    /// Closes a chunk that has been open longer than [`CHUNK_MAX_AGE_NS`] at `now_wall_ns`
    /// (called on a quiet bus, so the last second is on disk too).
    pub fn flush_if_old(&mut self, now_wall_ns: u64) -> anyhow::Result<()> {
        if self
            .chunk_opened_ns
            .is_some_and(|t0| now_wall_ns.saturating_sub(t0) >= CHUNK_MAX_AGE_NS)
        {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the `cell.clock` and `cell.counts` metadata, the summary and the footer.
    pub fn finish(
        mut self,
        dropped: u64,
    ) -> anyhow::Result<(W, BTreeMap<String, TopicCount>, u64)> {
        let mut clock = BTreeMap::new();
        clock.insert(
            "log_time".into(),
            "receive wall time on the recorder's host, ns since the Unix epoch".into(),
        );
        clock.insert(
            "publish_time".into(),
            "the message's Stamp.source_mono_ns: the publisher host's CLOCK_MONOTONIC, ns".into(),
        );
        clock.insert(
            "recorder_wall_ns_at_start".into(),
            self.started_wall_ns.to_string(),
        );
        clock.insert(
            "recorder_mono_ns_at_start".into(),
            self.started_mono_ns.to_string(),
        );
        clock.insert("recorder_wall_ns_at_end".into(), wall_ns().to_string());
        clock.insert(
            "recorder_mono_ns_at_end".into(),
            common::clock::mono_ns().to_string(),
        );
        let mut keys: Vec<_> = self.channels.iter().collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        for (key, ch) in keys {
            if let Some(m) = ch.min_offset_ns {
                clock.insert(format!("min_log_minus_publish_ns:{key}"), m.to_string());
            }
        }
        self.writer.write_metadata(&mcap::records::Metadata {
            name: "cell.clock".into(),
            metadata: clock,
        })?;
        let mut counts = BTreeMap::new();
        for (t, c) in &self.counts {
            counts.insert(t.clone(), c.messages.to_string());
        }
        counts.insert("_dropped".into(), dropped.to_string());
        counts.insert("_unknown_keys".into(), self.unknown_keys.to_string());
        self.writer.write_metadata(&mcap::records::Metadata {
            name: "cell.counts".into(),
            metadata: counts,
        })?;
        self.writer.finish().context("finish the MCAP file")?;
        let unknown = self.unknown_keys;
        let counts = std::mem::take(&mut self.counts);
        Ok((self.writer.into_inner(), counts, unknown))
    }
}

/// The default file of a recording made by `--record` with no file named.
pub fn default_path(what: &str) -> PathBuf {
    let secs = wall_ns() / 1_000_000_000;
    PathBuf::from(format!("out/recordings/{what}-{secs}.mcap"))
}

/// What the writer thread returns: per-topic counts, samples on unknown keys, file bytes.
type WriterOutcome = (BTreeMap<String, TopicCount>, u64, u64);

/// A recording running beside a job: the bus's callback queues samples, a thread writes them.
pub struct Recording {
    path: PathBuf,
    subscriber: Option<zenoh::pubsub::Subscriber<()>>,
    tx: Option<mpsc::SyncSender<Sample>>,
    dropped: Arc<AtomicU64>,
    writer: Option<std::thread::JoinHandle<anyhow::Result<WriterOutcome>>>,
    started: std::time::Instant,
    /// The recorder's own session ([`Recording::start_direct`]), closed by `finish`.
    own_session: Option<Session>,
}

/// The recorder's own session: [`crate::cli::peer_session`].
pub async fn direct_session(bus_args: &BusArgs, cell: &CellSection) -> anyhow::Result<Session> {
    crate::cli::peer_session(bus_args, cell).await
}

/// How many samples may wait for the writer (≈ 5 s of the whole cell's traffic).
const QUEUE: usize = 32_768;

impl Recording {
    /// [`Recording::start`] on a session of its own, in peer mode ([`direct_session`]): how
    /// `cell record` and every `--record` record.
    pub async fn start_direct(
        bus_args: &BusArgs,
        cell: &CellSection,
        path: &Path,
        topics: &[String],
    ) -> anyhow::Result<Recording> {
        let s = direct_session(bus_args, cell).await?;
        let mut rec = Self::start(&s, cell, path, topics).await?;
        rec.own_session = Some(s);
        Ok(rec)
    }

    /// Opens `path` (its folder made) and starts recording `cell`'s topics (`topics` empty:
    /// all of them) through `s`.
    pub async fn start(
        s: &Session,
        cell: &CellSection,
        path: &Path,
        topics: &[String],
    ) -> anyhow::Result<Recording> {
        for t in topics {
            if topic::find(t).is_none() {
                let known: Vec<&str> = topic::TOPICS.iter().map(|t| t.suffix).collect();
                anyhow::bail!("unknown topic {t:?}; known: {}", known.join(", "));
            }
        }
        let only: Vec<String> = topics
            .iter()
            .filter_map(|t| topic::find(t).map(|i| i.suffix.to_string()))
            .collect();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let file = File::create(path).with_context(|| format!("create {}", path.display()))?;
        let info = RecordingInfo {
            cell_id: cell.id.clone(),
            topics: only,
            identity: crate::cli::identity(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            host: hostname(),
        };
        let mut sink = McapSink::new(BufWriter::new(file), &info)?;
        let (tx, rx) = mpsc::sync_channel::<Sample>(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer_dropped = dropped.clone();
        let writer = std::thread::Builder::new()
            .name("cell-record".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(Duration::from_millis(200)) {
                        Ok(sample) => sink.write(&sample)?,
                        Err(mpsc::RecvTimeoutError::Timeout) => sink.flush_if_old(wall_ns())?,
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                let (mut w, counts, unknown) =
                    sink.finish(writer_dropped.load(Ordering::Relaxed))?;
                w.flush()?;
                let bytes = w.stream_position().unwrap_or(0);
                Ok((counts, unknown, bytes))
            })
            .context("start the recording thread")?;
        let cb_tx = tx.clone();
        let cb_dropped = dropped.clone();
        let key = format!("cell/{}/**", cell.id);
        let subscriber = s
            .declare_subscriber(&key)
            .callback(move |sample| {
                let s = Sample {
                    key: sample.key_expr().as_str().to_string(),
                    encoding: sample.encoding().to_string(),
                    payload: sample.payload().to_bytes().into_owned(),
                    recv_wall_ns: wall_ns(),
                };
                if cb_tx.try_send(s).is_err() {
                    cb_dropped.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await
            .map_err(|e| anyhow::anyhow!("subscribe {key}: {e}"))?;
        Ok(Recording {
            path: path.to_path_buf(),
            subscriber: Some(subscriber),
            tx: Some(tx),
            dropped,
            writer: Some(writer),
            started: std::time::Instant::now(),
            own_session: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops: undeclares the subscriber, lets the writer drain its queue and close the file.
    pub async fn finish(mut self) -> anyhow::Result<RecordSummary> {
        if let Some(sub) = self.subscriber.take() {
            if let Err(e) = sub.undeclare().await {
                tracing::debug!("undeclare the recorder: {e}");
            }
        }
        self.tx.take();
        let writer = self.writer.take().context("recording already finished")?;
        let (counts, unknown_keys, bytes) = tokio::task::spawn_blocking(move || writer.join())
            .await
            .context("join the recording thread")?
            .map_err(|_| anyhow::anyhow!("the recording thread panicked"))??;
        if let Some(s) = self.own_session.take() {
            if let Err(e) = s.close().await {
                tracing::debug!("close the recorder's session: {e}");
            }
        }
        Ok(RecordSummary {
            path: self.path.clone(),
            messages: counts.values().map(|c| c.messages).sum(),
            topics: counts,
            unknown_keys,
            dropped: self.dropped.load(Ordering::Relaxed),
            bytes,
            seconds: self.started.elapsed().as_secs_f64(),
        })
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `cell record FILE`: records until `seconds` pass or Ctrl-C.
pub async fn record(
    bus_args: &BusArgs,
    cell: &CellSection,
    path: &Path,
    topics: &[String],
    seconds: Option<f64>,
) -> anyhow::Result<RecordSummary> {
    let rec = Recording::start_direct(bus_args, cell, path, topics).await?;
    eprintln!(
        "recording cell/{}/{} to {} ({}; Ctrl-C to stop)",
        cell.id,
        if topics.is_empty() {
            "**".to_string()
        } else {
            format!("{{{}}}", topics.join(","))
        },
        path.display(),
        match seconds {
            Some(s) => format!("{s} s"),
            None => "until stopped".into(),
        }
    );
    until_stopped(seconds).await;
    rec.finish().await
}

/// Waits `seconds` (None: for ever), or until Ctrl-C: how a recording or a view runs.
pub async fn until_stopped(seconds: Option<f64>) {
    match seconds {
        Some(sec) => {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs_f64(sec.max(0.0))) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::msg::{JointState, Stamp};

    fn sample(seq: u64, t_ns: u64) -> Sample {
        let js = JointState {
            stamp: Stamp {
                seq,
                source_mono_ns: 1_000 + seq,
            },
            ..Default::default()
        };
        Sample {
            key: topic::JOINT_STATE.key("t"),
            encoding: topic::postcard_encoding(&topic::JOINT_STATE.info),
            payload: codec::encode(&js).expect("encodable"),
            recv_wall_ns: t_ns,
        }
    }

    fn info() -> RecordingInfo {
        RecordingInfo {
            cell_id: "t".into(),
            topics: vec![],
            identity: "operator".into(),
            command: "test".into(),
            host: "h".into(),
        }
    }

    fn read_all(bytes: &[u8]) -> Vec<(String, u64, u64, Vec<u8>)> {
        let mut out = Vec::new();
        let opts = mcap::read::Options::IgnoreEndMagic.into();
        let Ok(stream) = mcap::MessageStream::new_with_options(bytes, opts) else {
            return out;
        };
        for m in stream {
            let Ok(m) = m else { break };
            out.push((
                m.channel.topic.clone(),
                m.log_time,
                m.publish_time,
                m.data.into_owned(),
            ));
        }
        out
    }

    #[test]
    fn writes_json_and_raw_channels_with_the_stamp_as_publish_time() {
        let mut sink = McapSink::new(std::io::Cursor::new(Vec::new()), &info()).expect("sink");
        for i in 1..=3 {
            sink.write(&sample(i, 5_000 + i)).expect("write");
        }
        sink.write(&Sample {
            key: "cell/t/not/a/topic".into(),
            encoding: String::new(),
            payload: vec![1, 2],
            recv_wall_ns: 1,
        })
        .expect("write");
        let (cur, counts, unknown) = sink.finish(0).expect("finish");
        assert_eq!(unknown, 1);
        assert_eq!(counts["robot/joint_state"].messages, 3);
        let msgs = read_all(cur.get_ref());
        assert_eq!(msgs.len(), 6);
        let json: Vec<_> = msgs
            .iter()
            .filter(|m| m.0 == "/cell/t/robot/joint_state")
            .collect();
        let raw: Vec<_> = msgs
            .iter()
            .filter(|m| m.0 == "raw/cell/t/robot/joint_state")
            .collect();
        assert_eq!((json.len(), raw.len()), (3, 3));
        for (i, (j, r)) in json.iter().zip(&raw).enumerate() {
            let seq = i as u64 + 1;
            assert_eq!(j.1, 5_000 + seq, "log time = receive wall time");
            assert_eq!(j.2, 1_000 + seq, "publish time = the stamp");
            let v: serde_json::Value = serde_json::from_slice(&j.3).expect("json");
            assert_eq!(v["stamp"]["seq"], seq);
            assert_eq!(
                r.3,
                sample(seq, 0).payload,
                "the raw payload is the bus's bytes"
            );
        }
    }

    #[test]
    fn a_truncated_file_yields_every_message_of_its_complete_chunks() {
        let mut sink = McapSink::new(std::io::Cursor::new(Vec::new()), &info()).expect("sink");
        // Three chunks closed by age, then an open one.
        let mut t = 0;
        for i in 1..=40u64 {
            t += CHUNK_MAX_AGE_NS / 10;
            sink.write(&sample(i, t)).expect("write");
        }
        let (cur, _, _) = sink.finish(0).expect("finish");
        let bytes = cur.into_inner();
        let whole = read_all(&bytes).len();
        assert_eq!(whole, 80);
        // Cut anywhere: what is read back is a prefix, and a cut after the k-th chunk keeps
        // its messages (chunks of 10 messages a channel = 20 records).
        let mut last = 0;
        for cut in (0..bytes.len()).step_by(97) {
            let n = read_all(&bytes[..cut]).len();
            assert!(
                n >= last || cut < 8,
                "a longer prefix never reads fewer messages"
            );
            last = n;
        }
        assert_eq!(read_all(&bytes[..bytes.len() - 1]).len() % 20, 0);
    }
}
