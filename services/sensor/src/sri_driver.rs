//! SRI M8128 driver: TCP client of the interface box.
//!
//! Per connection: `AT+GSD=STOP` (in case the box still streams for a previous client),
//! `AT+SMPR=<hz>`, `AT+SGDM=…;<C|E>;1;(WMA:1)`, optionally `AT+DCKMD=SUM`, in `C` mode the
//! conversion parameters (from the config, or `AT+AMPZ=?`, `AT+CHNAPG=?`, `AT+EXMV=?`,
//! `AT+DCPM=?`), then `AT+GSD` and frames until the box goes silent or closes; then back-off
//! and reconnect.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::{timeout, Instant},
};

use crate::{
    config::SriConfig,
    driver::{
        mark_connected, record_failure, with_stats, Backoff, DeviceSample, SharedStats, Timing,
    },
    sri::{self, Ack, Command, DataFormat, FrameData, FrameParser, Param, SriParams},
};

/// Sends a command and waits for its `ACK+<name>=…` (other replies and stray bytes skipped).
async fn command(
    stream: &mut TcpStream,
    rx: &mut Vec<u8>,
    cmd: &Command,
    name: &str,
    reply_timeout: Duration,
) -> anyhow::Result<Ack> {
    stream.write_all(cmd.encode().as_bytes()).await?;
    let deadline = Instant::now() + reply_timeout;
    let mut buf = [0u8; 2048];
    loop {
        while let Some(ack) = sri::take_ack(rx) {
            match ack {
                Ok(a) if a.name == name => return Ok(a),
                Ok(_) => {}
                Err(e) => tracing::debug!("sri: unparsable reply: {e}"),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let n = timeout(left, stream.read(&mut buf))
            .await
            .map_err(|_| anyhow!("no ACK+{name} within {} ms", reply_timeout.as_millis()))??;
        if n == 0 {
            bail!("connection closed while waiting for ACK+{name}");
        }
        rx.extend_from_slice(&buf[..n]);
        // Bound the buffer if the box floods us with frames meanwhile.
        if rx.len() > 64 * 1024 {
            let cut = rx.len() - sri::ACK_MAX_LINE;
            rx.drain(..cut);
        }
    }
}

async fn query(
    stream: &mut TcpStream,
    rx: &mut Vec<u8>,
    p: Param,
    reply_timeout: Duration,
) -> anyhow::Result<String> {
    let a = command(stream, rx, &Command::Query(p), p.name(), reply_timeout).await?;
    Ok(a.ok_value()?.to_string())
}

async fn read_params(
    stream: &mut TcpStream,
    rx: &mut Vec<u8>,
    t: Duration,
) -> anyhow::Result<SriParams> {
    let amp_zero = sri::parse_six(&query(stream, rx, Param::AmpZero, t).await?).context("AMPZ")?;
    let gain = sri::parse_six(&query(stream, rx, Param::Gain, t).await?).context("CHNAPG")?;
    let excitation_v =
        sri::parse_six(&query(stream, rx, Param::Excitation, t).await?).context("EXMV")?;
    let decoupling =
        sri::parse_matrix(&query(stream, rx, Param::Decoupling, t).await?).context("DCPM")?;
    let p = SriParams {
        amp_zero,
        gain,
        excitation_v,
        decoupling,
    };
    let mut errors = common::config::ConfigErrors::default();
    for (key, problem) in p.problems("box") {
        errors.push(key, problem);
    }
    if !errors.is_empty() {
        bail!("implausible parameters from the box: {errors}");
    }
    Ok(p)
}

/// One connection. Returns why it ended and whether it delivered samples.
async fn session(
    cfg: &SriConfig,
    timing: Timing,
    stats: &SharedStats,
    parser: &mut FrameParser,
    ever_connected: &mut bool,
    sink: &mut (dyn FnMut(DeviceSample) + Send),
) -> (bool, anyhow::Error) {
    let mut delivered = false;
    let err = match session_inner(
        cfg,
        timing,
        stats,
        parser,
        ever_connected,
        &mut delivered,
        sink,
    )
    .await
    {
        Ok(()) => anyhow!("session ended"),
        Err(e) => e,
    };
    (delivered, err)
}

async fn session_inner(
    cfg: &SriConfig,
    timing: Timing,
    stats: &SharedStats,
    parser: &mut FrameParser,
    ever_connected: &mut bool,
    delivered: &mut bool,
    sink: &mut (dyn FnMut(DeviceSample) + Send),
) -> anyhow::Result<()> {
    let mut stream = timeout(timing.connect_timeout, TcpStream::connect(&cfg.address))
        .await
        .map_err(|_| anyhow!("connect to {}: timed out", cfg.address))?
        .with_context(|| format!("connect to {}", cfg.address))?;
    stream.set_nodelay(true)?;
    let rt = std::time::Duration::from_millis(cfg.reply_timeout_ms);
    let mut rx = Vec::new();
    stream
        .write_all(Command::StopStream.encode().as_bytes())
        .await?;
    command(
        &mut stream,
        &mut rx,
        &Command::SetSampleRate(cfg.sample_rate_hz),
        "SMPR",
        rt,
    )
    .await?;
    command(
        &mut stream,
        &mut rx,
        &Command::SetFormat(cfg.mode),
        "SGDM",
        rt,
    )
    .await?;
    if cfg.set_check_mode {
        if let Err(e) = command(&mut stream, &mut rx, &Command::SetCheckModeSum, "DCKMD", rt).await
        {
            tracing::info!("sri: AT+DCKMD=SUM not acknowledged ({e:#}); assuming sum checks");
        }
    }
    let params = match (cfg.mode, &cfg.params) {
        (DataFormat::Calibrated, _) => {
            with_stats(stats, |s| s.calibration = "box (E mode)".into());
            None
        }
        (DataFormat::RawCounts, Some(p)) => {
            with_stats(stats, |s| s.calibration = "config".into());
            Some(p.clone())
        }
        (DataFormat::RawCounts, None) => {
            let p = read_params(&mut stream, &mut rx, rt).await?;
            with_stats(stats, |s| {
                s.calibration = "device (AMPZ, CHNAPG, EXMV, DCPM)".into()
            });
            Some(p)
        }
    };
    stream
        .write_all(Command::StartStream.encode().as_bytes())
        .await?;
    parser.reset();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = timeout(timing.data_timeout, stream.read(&mut buf))
            .await
            .map_err(|_| anyhow!("no data for {} ms", timing.data_timeout.as_millis()))??;
        if n == 0 {
            bail!("connection closed by the box");
        }
        parser.push(&buf[..n]);
        let mut count = 0u64;
        while let Some(frame) = parser.next_frame() {
            let mut w = match (frame.data, &params) {
                (FrameData::Calibrated(v), _) => v.map(f64::from),
                (FrameData::Raw(c), Some(p)) => p.counts_to_wrench(&c),
                (FrameData::Raw(_), None) => continue,
            };
            for t in &mut w[3..] {
                *t *= cfg.torque_scale;
            }
            if !*delivered {
                *delivered = true;
                mark_connected(stats, ever_connected);
            }
            sink(DeviceSample {
                device_seq: u32::from(frame.package_no),
                device_status: 0,
                wrench: w,
            });
            count += 1;
        }
        let ps = parser.stats;
        with_stats(stats, |s| {
            s.samples += count;
            s.lost = ps.seq.lost;
            s.out_of_order = ps.seq.out_of_order;
            s.checksum_errors = ps.checksum_errors;
            s.length_errors = ps.length_errors;
            s.resyncs = ps.resyncs;
            s.discarded_bytes = ps.discarded_bytes;
        });
    }
}

/// Runs the SRI driver forever.
pub async fn run(
    cfg: &SriConfig,
    timing: Timing,
    stats: SharedStats,
    sink: &mut (dyn FnMut(DeviceSample) + Send),
) {
    with_stats(&stats, |s| {
        s.driver = "sri".into();
        s.address = cfg.address.clone();
    });
    let mut parser = FrameParser::new(cfg.mode);
    let mut backoff = Backoff::new(timing.reconnect_min, timing.reconnect_max);
    let mut ever_connected = false;
    loop {
        let (delivered, err) =
            session(cfg, timing, &stats, &mut parser, &mut ever_connected, sink).await;
        record_failure(&stats, &err);
        if delivered {
            backoff.reset();
        }
        tokio::time::sleep(backoff.step()).await;
    }
}
