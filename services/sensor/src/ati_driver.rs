//! ATI Net F/T driver: RDT over UDP.
//!
//! Per session: counts-per-force/-torque from the config or `GET /netftapi2.xml` (`cfgcpf`,
//! `cfgcpt`, `scfgfu`, `scfgtu`), a UDP socket connected to the device, "start real-time
//! streaming" (0x0002, count 0), then records until the device is silent for
//! `data_timeout_ms` (the start request is re-sent once in between, since UDP may lose it).
//! A stop request (0x0000) is sent when the driver is dropped.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::{anyhow, bail, Context};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{lookup_host, TcpStream, UdpSocket},
    time::timeout,
};

use crate::{
    ati::{self, RdtCommand, RdtRequest},
    config::AtiConfig,
    driver::{
        mark_connected, record_failure, with_stats, Backoff, DeviceSample, SharedStats, Timing,
    },
    seq::SeqTracker,
};

/// Minimal HTTP/1.1 GET (`Connection: close`), returns the body of a 200 answer.
pub async fn http_get(addr: SocketAddr, path: &str, limit: Duration) -> anyhow::Result<String> {
    let fut = async {
        let mut s = TcpStream::connect(addr).await?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAccept: */*\r\n\r\n",
            addr.ip()
        );
        s.write_all(req.as_bytes()).await?;
        let mut body = Vec::new();
        s.take(1 << 20).read_to_end(&mut body).await?;
        anyhow::Ok(body)
    };
    let raw = timeout(limit, fut)
        .await
        .map_err(|_| anyhow!("GET http://{addr}{path}: timed out"))??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("GET {path}: malformed HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET {path}: {status}");
    }
    Ok(body.to_string())
}

/// Counts per N and per N·m: from the config when both are set, else from the device.
async fn calibration(
    cfg: &AtiConfig,
    device: SocketAddr,
    timing: Timing,
) -> anyhow::Result<(f64, f64, String)> {
    if let (Some(f), Some(t)) = (cfg.counts_per_force, cfg.counts_per_torque) {
        return Ok((f, t, "config".into()));
    }
    let http = SocketAddr::new(device.ip(), cfg.http_port);
    let xml = http_get(http, "/netftapi2.xml", timing.connect_timeout).await?;
    let c = ati::parse_netftapi2(&xml)
        .ok_or_else(|| anyhow!("netftapi2.xml without usable cfgcpf/cfgcpt"))?;
    let fu = c.force_unit.as_deref().unwrap_or("N");
    let tu = c.torque_unit.as_deref().unwrap_or("Nm");
    let f_si = ati::force_unit_to_n(fu).ok_or_else(|| anyhow!("unknown force unit {fu:?}"))?;
    let t_si = ati::torque_unit_to_nm(tu).ok_or_else(|| anyhow!("unknown torque unit {tu:?}"))?;
    // force[N] = counts / cpf · f_si → counts per N = cpf / f_si. Config values win.
    let cpf = cfg.counts_per_force.unwrap_or(c.counts_per_force / f_si);
    let cpt = cfg.counts_per_torque.unwrap_or(c.counts_per_torque / t_si);
    Ok((
        cpf,
        cpt,
        format!(
            "device netftapi2.xml (cfgcpf {} /{fu}, cfgcpt {} /{tu})",
            c.counts_per_force, c.counts_per_torque
        ),
    ))
}

/// Sends "stop streaming" when the session ends (also on cancellation).
struct StopOnDrop(Arc<UdpSocket>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self
            .0
            .try_send(&RdtRequest::new(RdtCommand::Stop, 0).encode());
    }
}

#[allow(clippy::too_many_arguments)]
async fn session(
    cfg: &AtiConfig,
    timing: Timing,
    stats: &SharedStats,
    seq: &mut SeqTracker,
    ever_connected: &mut bool,
    delivered: &mut bool,
    sink: &mut (dyn FnMut(DeviceSample) + Send),
) -> anyhow::Result<()> {
    let device = lookup_host(&cfg.address)
        .await
        .with_context(|| format!("resolve {}", cfg.address))?
        .next()
        .ok_or_else(|| anyhow!("{} resolves to nothing", cfg.address))?;
    let (cpf, cpt, source) = calibration(cfg, device, timing).await?;
    with_stats(stats, |s| s.calibration = source);
    let local: SocketAddr = if device.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = Arc::new(UdpSocket::bind(local).await?);
    sock.connect(device).await?;
    let _stop = StopOnDrop(sock.clone());
    let start = RdtRequest::new(RdtCommand::StartRealTime, 0).encode();
    sock.send(&start).await?;
    seq.restart();
    let mut buf = vec![0u8; 65536];
    let mut silent_periods = 0u32;
    loop {
        let n = match timeout(timing.data_timeout / 2, sock.recv(&mut buf)).await {
            Ok(r) => r.context("receive")?,
            Err(_) => {
                silent_periods += 1;
                if silent_periods >= 2 {
                    bail!("no RDT data for {} ms", timing.data_timeout.as_millis());
                }
                // The start request (or the stream) may have been lost: ask again.
                sock.send(&start).await?;
                continue;
            }
        };
        silent_periods = 0;
        let records = match ati::decode_datagram(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("ati: {e}");
                with_stats(stats, |s| s.length_errors += 1);
                continue;
            }
        };
        if !*delivered {
            *delivered = true;
            mark_connected(stats, ever_connected);
        }
        let mut last_status = 0;
        for r in &records {
            seq.observe(r.rdt_sequence);
            last_status = r.status;
            sink(DeviceSample {
                device_seq: r.rdt_sequence,
                device_status: r.status,
                wrench: r.wrench(cpf, cpt),
            });
        }
        let sq = *seq;
        with_stats(stats, |s| {
            s.samples += records.len() as u64;
            s.lost = sq.lost;
            s.out_of_order = sq.out_of_order;
            if s.device_status != last_status || (s.status_flags.is_empty() && last_status != 0) {
                s.status_flags = ati::decode_status(last_status).flags;
            }
            s.device_status = last_status;
        });
    }
}

/// Runs the ATI driver forever.
pub async fn run(
    cfg: &AtiConfig,
    timing: Timing,
    stats: SharedStats,
    sink: &mut (dyn FnMut(DeviceSample) + Send),
) {
    with_stats(&stats, |s| {
        s.driver = "ati".into();
        s.address = cfg.address.clone();
    });
    let mut seq = SeqTracker::new(32);
    let mut backoff = Backoff::new(timing.reconnect_min, timing.reconnect_max);
    let mut ever_connected = false;
    loop {
        let mut delivered = false;
        let err = match session(
            cfg,
            timing,
            &stats,
            &mut seq,
            &mut ever_connected,
            &mut delivered,
            sink,
        )
        .await
        {
            Ok(()) => anyhow!("session ended"),
            Err(e) => e,
        };
        record_failure(&stats, &err);
        if delivered {
            backoff.reset();
        }
        tokio::time::sleep(backoff.step()).await;
    }
}
