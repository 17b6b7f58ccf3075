//! ATI Net F/T emulator: RDT over UDP (the simulator's own writer, [`crate::wire::ati`]) plus `GET /netftapi2.xml` over a
//! minimal HTTP/1.1 responder.
//!
//! RDT: requests (8 bytes, header 0x1234) on the RDT socket; "start" (0x0002 real-time,
//! 0x0003 buffered, 0x0004 multi-unit) streams 36-byte records to the address that sent it
//! (a newer start from anyone redirects the stream), `sample_count` 0 = until "stop" (0x0000);
//! 0x0042 sets the software bias (current reading), 0x0041 clears the latched monitor
//! condition. Buffered mode packs `rdt_buffer_size` records per datagram. Status word:
//! saturation → 0x80020000 (error summary + transducer saturation); with `latch_on_saturation`
//! also 0x00010000 (monitor condition latched) until 0x0041.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use crate::wire::ati::{self as rdt, RECORD_BYTES};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream, UdpSocket},
    task::JoinSet,
    time::{Instant, MissedTickBehavior},
};

use super::{BoxFaults, Imperfections, SignalModel, Truth};

/// Emulator configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AtiEmulatorConfig {
    /// RDT UDP address (the real device: port 49152).
    pub rdt_bind: String,
    /// `netftapi2.xml` HTTP address (the real device: port 80); `None` = no web server.
    pub http_bind: Option<String>,
    /// RDT output rate (`comrdtrate`), Hz.
    pub rdt_rate_hz: f64,
    /// Records per datagram in buffered mode (`comrdtbsiz`).
    pub rdt_buffer_size: u32,
    /// Counts per force unit (`cfgcpf`).
    pub counts_per_force: f64,
    /// Counts per torque unit (`cfgcpt`).
    pub counts_per_torque: f64,
    /// `scfgfu`: force unit of the calibration.
    pub force_unit: String,
    /// `scfgtu`: torque unit of the calibration (`Nm` or `N-mm`; the truth is in N·m).
    pub torque_unit: String,
    /// Latch the monitor condition on saturation (status 0x00010000 until 0x0041).
    pub latch_on_saturation: bool,
    pub imperfections: Imperfections,
}

impl Default for AtiEmulatorConfig {
    fn default() -> Self {
        Self {
            rdt_bind: format!("127.0.0.1:{}", rdt::PORT),
            http_bind: Some("127.0.0.1:80".into()),
            rdt_rate_hz: 1000.0,
            rdt_buffer_size: 1,
            counts_per_force: 1_000_000.0,
            counts_per_torque: 1_000_000.0,
            force_unit: "N".into(),
            torque_unit: "Nm".into(),
            latch_on_saturation: false,
            imperfections: Imperfections::default(),
        }
    }
}

impl AtiEmulatorConfig {
    /// The `netftapi2.xml` document.
    pub fn netftapi2_xml(&self) -> String {
        let fields = [
            ("prodname", "Net F/T (emulated)".to_string()),
            ("cfgcpf", self.counts_per_force.to_string()),
            ("cfgcpt", self.counts_per_torque.to_string()),
            ("scfgfu", self.force_unit.clone()),
            ("scfgtu", self.torque_unit.clone()),
            ("comrdte", "1".into()),
            ("comrdtrate", self.rdt_rate_hz.to_string()),
            ("comrdtbsiz", self.rdt_buffer_size.to_string()),
            ("runrate", "7000".into()),
            ("setuserfilter", "0".into()),
            ("runstat", "0".into()),
            (
                "cfgmr",
                self.imperfections.range.map(|r| r.to_string()).join(";"),
            ),
        ];
        let mut s = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\r\n<netft>\r\n");
        for (k, v) in fields {
            s.push_str(&format!("<{k}>{v}</{k}>\r\n"));
        }
        s.push_str("</netft>\r\n");
        s
    }

    fn torque_per_nm(&self) -> f64 {
        rdt::newton_metres_per(&self.torque_unit)
            .map(|f| 1.0 / f)
            .unwrap_or(1.0)
    }

    fn force_per_n(&self) -> f64 {
        rdt::newtons_per(&self.force_unit)
            .map(|f| 1.0 / f)
            .unwrap_or(1.0)
    }
}

/// Binds the RDT socket and the HTTP listener, serves until `shutdown` resolves.
pub async fn serve(
    cfg: AtiEmulatorConfig,
    truth: Truth,
    box_faults: BoxFaults,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let udp = UdpSocket::bind(&cfg.rdt_bind)
        .await
        .with_context(|| format!("ATI emulator: bind UDP {}", cfg.rdt_bind))?;
    let http = match &cfg.http_bind {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("ATI emulator: bind HTTP {a}"))?,
        ),
        None => None,
    };
    serve_on(udp, http, cfg, truth, box_faults, shutdown).await
}

struct Stream {
    to: SocketAddr,
    remaining: Option<u32>,
    buffered: bool,
}

/// Serves on already bound sockets (tests bind port 0).
pub async fn serve_on(
    udp: UdpSocket,
    http: Option<TcpListener>,
    cfg: AtiEmulatorConfig,
    truth: Truth,
    box_faults: BoxFaults,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let mut tasks = JoinSet::new();
    if let Some(listener) = http {
        let xml = Arc::new(cfg.netftapi2_xml());
        tasks.spawn(http_server(listener, xml));
    }
    let mut model = SignalModel::new(cfg.imperfections.clone(), truth);
    let period = Duration::from_secs_f64(1.0 / cfg.rdt_rate_hz.clamp(1.0, 10_000.0));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let epoch = Instant::now();
    let mut sample_index: u64 = 0;
    let mut stream: Option<Stream> = None;
    let (mut rdt_seq, mut ft_seq) = (0u32, 0u32);
    let mut bias = [0i64; 6];
    let mut latched = false;
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 1500];
    let cpf = cfg.counts_per_force * cfg.force_per_n();
    let cpt = cfg.counts_per_torque * cfg.torque_per_nm();
    let bsize = cfg.rdt_buffer_size.max(1) as usize;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            r = udp.recv_from(&mut buf) => {
                let (n, from) = match r {
                    Ok(x) => x,
                    // ICMP errors from a vanished client surface here: keep serving.
                    Err(e) => { tracing::debug!("ATI emulator: recv: {e}"); continue; }
                };
                let Some(req) = rdt::read_request(&buf[..n]) else {
                    tracing::info!("ATI emulator: not an RDT request ({n} bytes)");
                    continue;
                };
                match req.command {
                    rdt::STOP => { stream = None; pending.clear(); }
                    rdt::START_REAL_TIME | rdt::START_BUFFERED | rdt::START_MULTI_UNIT => {
                        pending.clear();
                        stream = Some(Stream {
                            to: from,
                            remaining: (req.sample_count > 0).then_some(req.sample_count),
                            buffered: req.command == rdt::START_BUFFERED,
                        });
                    }
                    rdt::SET_BIAS => {
                        let r = model.read(epoch.elapsed().as_secs_f64());
                        bias = counts_of(&r.wrench, cpf, cpt);
                    }
                    rdt::RESET_LATCH => latched = false,
                    c => tracing::info!("ATI emulator: unknown command 0x{c:04X}"),
                }
            }
            _ = tick.tick() => {
                if box_faults.frozen() {
                    sample_index += 1;
                    continue;
                }
                // The device samples whether or not anyone listens.
                let t = sample_index as f64 * period.as_secs_f64();
                sample_index += 1;
                ft_seq = ft_seq.wrapping_add(1);
                let mut r = model.read(t);
                box_faults.apply(&mut r, &model.range());
                if r.saturated && cfg.latch_on_saturation {
                    latched = true;
                }
                let Some(s) = stream.as_mut() else { continue };
                let raw = counts_of(&r.wrench, cpf, cpt);
                let mut counts = [0i32; 6];
                for i in 0..6 {
                    counts[i] = (raw[i] - bias[i]).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
                }
                let mut status = 0u32;
                if r.saturated {
                    status |= 0x8002_0000;
                }
                if latched {
                    status |= 0x8001_0000;
                }
                rdt_seq = rdt_seq.wrapping_add(1);
                pending.extend_from_slice(&rdt::record(rdt_seq, ft_seq, status, &counts));
                let full = !s.buffered || pending.len() >= bsize * RECORD_BYTES;
                if full {
                    if let Err(e) = udp.send_to(&pending, s.to).await {
                        tracing::debug!("ATI emulator: send to {}: {e}", s.to);
                    }
                    pending.clear();
                }
                if let Some(left) = s.remaining.as_mut() {
                    *left -= 1;
                    if *left == 0 {
                        if !pending.is_empty() {
                            let _ = udp.send_to(&pending, s.to).await;
                            pending.clear();
                        }
                        stream = None;
                    }
                }
            }
        }
    }
    tasks.shutdown().await;
    Ok(())
}

fn counts_of(w: &[f64; 6], cpf: f64, cpt: f64) -> [i64; 6] {
    let mut c = [0i64; 6];
    for i in 0..6 {
        let per = if i < 3 { cpf } else { cpt };
        let v = (w[i] * per).round();
        // Saturating float → int cast; NaN → 0.
        c[i] = if v.is_finite() { v as i64 } else { 0 };
    }
    c
}

async fn http_server(listener: TcpListener, xml: Arc<String>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((s, _)) => {
                    let xml = xml.clone();
                    conns.spawn(async move {
                        if let Err(e) = http_answer(s, &xml).await {
                            tracing::debug!("ATI emulator HTTP: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::info!("ATI emulator HTTP accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn http_answer(mut s: TcpStream, xml: &str) -> anyhow::Result<()> {
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            req.extend_from_slice(&buf[..n]);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), read).await??;
    let text = String::from_utf8_lossy(&req);
    let mut first = text.lines().next().unwrap_or_default().split_whitespace();
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/netftapi2.xml") => ("200 OK", "text/xml", xml.to_string()),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\r\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\r\n".to_string(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    s.shutdown().await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn xml_carries_the_calibration() {
        let cfg = AtiEmulatorConfig {
            counts_per_torque: 1000.0,
            torque_unit: "N-mm".into(),
            ..Default::default()
        };
        let xml = cfg.netftapi2_xml();
        for e in [
            "<cfgcpf>1000000</cfgcpf>",
            "<cfgcpt>1000</cfgcpt>",
            "<scfgtu>N-mm</scfgtu>",
            "<scfgfu>N</scfgfu>",
        ] {
            assert!(xml.contains(e), "{e} not in {xml}");
        }
        // 1 N·m = 1000 N·mm = 1e6 counts at 1000 counts/N·mm.
        assert_eq!(
            counts_of(
                &[0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
                1e6,
                1e3 * cfg.torque_per_nm()
            )[3],
            1_000_000
        );
    }
}
