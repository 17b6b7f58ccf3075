//! SRI M8128 interface box emulator: a TCP server speaking the AT command set and streaming
//! `AA 55` frames (the simulator's own writer, [`crate::wire::sri`]).
//!
//! Commands: `SMPR` (set/query), `SGDM` (set/query, `C` or `E`, one point per channel), `DCPM`
//! (set/query), `AMPZ`, `CHNAPG`, `EXMV`, `ETPT`, `SFWV`, `DCKMD` queries, `DCKMD=SUM`, `GSD`
//! (start, no ACK), `GSD=STOP` (no ACK), `GOD` (one frame). Replies `ACK+<CMD>=<value>$OK\r\n`.
//! Unknown commands get no reply (the real box's error format is not documented).
//!
//! In `C` mode the raw counts are produced by inverting the box's decoupling matrix and the
//! amplifier chain: `DAT = M⁻¹·F`, `RAW = round(DAT·Gain·EXC/1000 /5·65535 + AmpZero)`, clipped
//! to 0..=65535, so that the host's conversion recovers the wrench within one count. In `E`
//! mode the reading is sent as little-endian f32 (N, N·m).

use std::{future::Future, time::Duration};

use crate::wire::sri::{self as box_wire, BoxCalibration, Mode, Request};
use anyhow::{anyhow, Context};
use nalgebra::Matrix6;
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinSet,
    time::{Instant, MissedTickBehavior},
};

use super::{BoxFaults, Imperfections, SignalModel, Truth};

/// Emulator configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SriEmulatorConfig {
    /// Listening address (the real box: port 4008).
    pub bind: String,
    /// Sample rate before any `AT+SMPR`.
    pub sample_rate_hz: u32,
    /// Output format before any `AT+SGDM`.
    pub mode: Mode,
    /// The box's conversion parameters (what `AMPZ`/`CHNAPG`/`EXMV`/`DCPM` answer).
    pub params: BoxCalibration,
    pub imperfections: Imperfections,
    /// Firmware string for `AT+SFWV=?`.
    pub firmware: String,
}

impl Default for SriEmulatorConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:4008".into(),
            sample_rate_hz: 1000,
            mode: Mode::RawCounts,
            params: default_params(),
            imperfections: Imperfections::default(),
            firmware: "M8128-EMU-1.0".into(),
        }
    }
}

/// A plausible M8128 calibration: AmpZero near mid-scale, gain 124, 5 V excitation, force rows
/// ≈ 250 N per mV/V and torque rows ≈ 6 N·m per mV/V with some cross-coupling (±~4000 N and
/// ±~100 N·m before the ADC clips; ~0.03 N and ~0.0008 N·m per count).
pub fn default_params() -> BoxCalibration {
    BoxCalibration {
        amp_zero: [32768.0, 32790.0, 32745.0, 32770.0, 32760.0, 32781.0],
        gain: [124.0, 124.5, 123.8, 124.2, 123.9, 124.1],
        excitation_v: [5.0, 5.0, 5.0, 5.0, 5.0, 5.0],
        decoupling: [
            [248.0, 3.1, -2.2, 1.5, -0.8, 0.6],
            [-2.7, 252.0, 1.9, -0.7, 1.1, -0.5],
            [1.4, -1.8, 610.0, 2.3, -2.9, 1.2],
            [0.02, -0.05, 0.03, 6.1, 0.04, -0.02],
            [-0.04, 0.03, -0.02, 0.05, 6.0, 0.03],
            [0.01, 0.02, -0.03, -0.01, 0.02, 7.9],
        ],
    }
}

/// Counts that the host's `C`-mode conversion turns back into `wrench` (within a count).
pub fn wrench_to_counts(
    params: &BoxCalibration,
    inverse: &Matrix6<f64>,
    wrench: &[f64; 6],
) -> ([u16; 6], bool) {
    let f = nalgebra::Vector6::from_column_slice(wrench);
    let dat = inverse * f;
    let mut d = [0.0; 6];
    d.copy_from_slice(dat.as_slice());
    params.counts(&d)
}

fn inverse_of(params: &BoxCalibration) -> anyhow::Result<Matrix6<f64>> {
    let m = Matrix6::from_fn(|r, c| params.decoupling[r][c]);
    m.try_inverse()
        .ok_or_else(|| anyhow!("the decoupling matrix is singular"))
}

/// Box state shared by the connections (the settings persist like the real box's flash).
#[derive(Debug, Clone)]
struct BoxState {
    rate_hz: u32,
    mode: Mode,
    params: BoxCalibration,
    inverse: Matrix6<f64>,
}

/// Binds `cfg.bind` and serves until `shutdown` resolves.
pub async fn serve(
    cfg: SriEmulatorConfig,
    truth: Truth,
    box_faults: BoxFaults,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&cfg.bind)
        .await
        .with_context(|| format!("SRI emulator: bind {}", cfg.bind))?;
    serve_on(listener, cfg, truth, box_faults, shutdown).await
}

/// Serves on an already bound listener (tests bind port 0). All connections are closed when
/// `shutdown` resolves.
pub async fn serve_on(
    listener: TcpListener,
    cfg: SriEmulatorConfig,
    truth: Truth,
    box_faults: BoxFaults,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let state = std::sync::Arc::new(tokio::sync::Mutex::new(BoxState {
        rate_hz: cfg.sample_rate_hz.max(1),
        mode: cfg.mode,
        inverse: inverse_of(&cfg.params)?,
        params: cfg.params.clone(),
    }));
    let port = listener.local_addr()?.port();
    let epoch = Instant::now();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            acc = listener.accept() => {
                let (stream, peer) = acc?;
                tracing::info!("SRI emulator: client {peer}");
                let model = SignalModel::new(cfg.imperfections.clone(), truth.clone());
                let st = state.clone();
                let fw = cfg.firmware.clone();
                let box_faults = box_faults.clone();
                conns.spawn(async move {
                    if let Err(e) = connection(stream, st, model, epoch, port, fw, box_faults).await {
                        tracing::info!("SRI emulator: client {peer}: {e:#}");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
    Ok(())
}

fn frame_for(
    st: &BoxState,
    model: &mut SignalModel,
    faults: &BoxFaults,
    t: f64,
    package_no: u16,
) -> Vec<u8> {
    let mut r = model.read(t);
    faults.apply(&mut r, &model.range());
    match st.mode {
        Mode::Calibrated => box_wire::frame_e(package_no, &r.wrench.map(|v| v as f32)),
        Mode::RawCounts => box_wire::frame_c(
            package_no,
            &wrench_to_counts(&st.params, &st.inverse, &r.wrench).0,
        ),
    }
}

async fn connection(
    mut stream: TcpStream,
    state: std::sync::Arc<tokio::sync::Mutex<BoxState>>,
    mut model: SignalModel,
    epoch: Instant,
    port: u16,
    firmware: String,
    box_faults: BoxFaults,
) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    let mut rx: Vec<u8> = Vec::new();
    let mut buf = [0u8; 1024];
    let mut streaming = false;
    let mut package_no: u16 = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut period = Duration::from_secs(1);
    let mut next_t = 0.0f64;
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    loop {
        tokio::select! {
            n = stream.read(&mut buf) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                rx.extend_from_slice(&buf[..n]);
                if rx.len() > 64 * 1024 {
                    rx.clear();
                }
                while let Some(pos) = rx.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = rx.drain(..=pos).collect();
                    let line = String::from_utf8_lossy(&line).trim().to_string();
                    if line.is_empty() {
                        continue;
                    }
                    let mut st = state.lock().await;
                    match box_wire::read_line(&line) {
                        Ok(Request::Start) => {
                            streaming = true;
                            period = Duration::from_secs_f64(1.0 / f64::from(st.rate_hz));
                            tick = tokio::time::interval(period);
                            tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
                            next_t = epoch.elapsed().as_secs_f64();
                        }
                        Ok(Request::Stop) => streaming = false,
                        Ok(Request::One) if box_faults.frozen() => {}
                        Ok(Request::One) => {
                            let t = epoch.elapsed().as_secs_f64();
                            out.extend(frame_for(&st, &mut model, &box_faults, t, package_no));
                            package_no = package_no.wrapping_add(1);
                        }
                        Ok(Request::SampleRate(hz)) => {
                            st.rate_hz = hz;
                            out.extend(box_wire::ack("SMPR", &hz.to_string()).bytes());
                        }
                        Ok(Request::Mode(m, echo)) => {
                            st.mode = m;
                            out.extend(box_wire::ack("SGDM", &echo).bytes());
                        }
                        Ok(Request::CheckModeSum) => out.extend(box_wire::ack("DCKMD", "SUM").bytes()),
                        Ok(Request::Decoupling(m)) => {
                            let mut p = st.params.clone();
                            p.decoupling = *m;
                            match inverse_of(&p) {
                                Ok(inv) => {
                                    st.params = p;
                                    st.inverse = inv;
                                    out.extend(box_wire::ack("DCPM", &box_wire::decoupling(&m)).bytes());
                                }
                                Err(e) => tracing::info!("SRI emulator: DCPM refused: {e}"),
                            }
                        }
                        Ok(Request::Query(name)) => {
                            let v = match name.as_str() {
                                "SMPR" => Some(st.rate_hz.to_string()),
                                "SGDM" => Some(box_wire::mode_value(st.mode)),
                                "DCPM" => Some(box_wire::decoupling(&st.params.decoupling)),
                                "AMPZ" => Some(box_wire::six(&st.params.amp_zero)),
                                "CHNAPG" => Some(box_wire::six(&st.params.gain)),
                                "EXMV" => Some(box_wire::six(&st.params.excitation_v)),
                                "ETPT" => Some(port.to_string()),
                                "SFWV" => Some(firmware.clone()),
                                "DCKMD" => Some("SUM".to_string()),
                                // Unknown queries get no reply (the box's error format is
                                // not documented).
                                _ => None,
                            };
                            match v {
                                Some(v) => out.extend(box_wire::ack(&name, &v).bytes()),
                                None => tracing::info!("SRI emulator: unknown query {name}"),
                            }
                        }
                        Err(e) => tracing::info!("SRI emulator: {e}"),
                    }
                }
            }
            _ = tick.tick(), if streaming => {
                if box_faults.frozen() {
                    next_t += period.as_secs_f64();
                    continue;
                }
                let st = state.lock().await;
                out.extend(frame_for(&st, &mut model, &box_faults, next_t, package_no));
                next_t += period.as_secs_f64();
                package_no = package_no.wrapping_add(1);
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn inversion_recovers_the_wrench() {
        let p = default_params();
        let inv = inverse_of(&p).unwrap();
        let w = [12.5, -40.0, 300.0, 1.25, -0.5, 3.0];
        let (c, clipped) = wrench_to_counts(&p, &inv, &w);
        assert!(!clipped);
        // The host's conversion (protocols.md §3.5): DAT = 1000·((RAW − AmpZero)/65535·5)/Gain/EXC,
        // F = M·DAT.
        let dat: [f64; 6] = std::array::from_fn(|i| {
            1000.0 * ((f64::from(c[i]) - p.amp_zero[i]) / 65535.0 * 5.0)
                / p.gain[i]
                / p.excitation_v[i]
        });
        let back: [f64; 6] =
            std::array::from_fn(|k| (0..6).map(|j| p.decoupling[k][j] * dat[j]).sum());
        // Half a count per channel through the matrix: < 0.05 N, < 0.002 N·m.
        for i in 0..6 {
            let tol = if i < 3 { 0.05 } else { 0.002 };
            assert!((back[i] - w[i]).abs() < tol, "{i}: {} vs {}", back[i], w[i]);
        }
    }
}
