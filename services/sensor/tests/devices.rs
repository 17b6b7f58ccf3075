//! Driver ↔ device emulator, end to end on 127.0.0.1 (no zenoh): the simulator's SRI M8128
//! box and ATI Net F/T emulators are driven with a known constant wrench; the drivers' decoded
//! samples must match within the configured noise / quantisation, for both devices and both
//! SRI modes; killing the emulator and bringing it back must be survived by reconnecting.
#![allow(clippy::unwrap_used)]

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sensor::{
    config::{SensorConfig, SensorDriver},
    driver::{self, DeviceSample, DriverStats, SharedStats},
    sri::DataFormat,
};
use sim::sensor::{
    ati::AtiEmulatorConfig,
    constant,
    sri::{default_params, SriEmulatorConfig},
    Imperfections,
};
use tokio::{
    net::{TcpListener, UdpSocket},
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

const TRUTH: [f64; 6] = [12.5, -40.0, 300.0, 1.25, -0.5, 3.0];

fn quiet() -> Imperfections {
    Imperfections {
        range: [5000.0, 5000.0, 5000.0, 100.0, 100.0, 100.0],
        ..Default::default()
    }
}

struct Emu {
    task: JoinHandle<anyhow::Result<()>>,
    stop: oneshot::Sender<()>,
}

impl Emu {
    async fn kill(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

async fn sri_emulator(listener: TcpListener, cfg: SriEmulatorConfig) -> Emu {
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(sim::sensor::sri::serve_on(
        listener,
        cfg,
        constant(TRUTH),
        sim::sensor::BoxFaults::default(),
        async move {
            let _ = rx.await;
        },
    ));
    Emu { task, stop }
}

async fn ati_emulator(udp: UdpSocket, http: TcpListener, cfg: AtiEmulatorConfig) -> Emu {
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(sim::sensor::ati::serve_on(
        udp,
        Some(http),
        cfg,
        constant(TRUTH),
        sim::sensor::BoxFaults::default(),
        async move {
            let _ = rx.await;
        },
    ));
    Emu { task, stop }
}

struct Driver {
    rx: mpsc::UnboundedReceiver<(Instant, DeviceSample)>,
    stats: SharedStats,
    task: JoinHandle<()>,
}

impl Driver {
    fn start(cfg: SensorConfig) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats: SharedStats = Arc::new(Mutex::new(DriverStats::default()));
        let st = stats.clone();
        let task = tokio::spawn(async move {
            let mut sink = move |s: DeviceSample| {
                let _ = tx.send((Instant::now(), s));
            };
            driver::run(&cfg, st, &mut sink).await;
        });
        Self { rx, stats, task }
    }

    async fn take(&mut self, n: usize, within: Duration) -> Vec<(Instant, DeviceSample)> {
        let deadline = tokio::time::Instant::now() + within;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(s)) => out.push(s),
                _ => panic!("got {} of {n} samples; stats {:?}", out.len(), self.stats()),
            }
        }
        out
    }

    fn drain(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }

    fn stats(&self) -> DriverStats {
        self.stats.lock().unwrap().clone()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn base_cfg(driver: SensorDriver) -> SensorConfig {
    SensorConfig {
        driver,
        data_timeout_ms: 100,
        reconnect_min_ms: 20,
        reconnect_max_ms: 200,
        ..Default::default()
    }
}

fn assert_close(samples: &[(Instant, DeviceSample)], tol: [f64; 6], what: &str) {
    for (_, s) in samples {
        for i in 0..6 {
            assert!(
                (s.wrench[i] - TRUTH[i]).abs() <= tol[i],
                "{what}: axis {i}: {} vs {} (tol {})",
                s.wrench[i],
                TRUTH[i],
                tol[i]
            );
        }
    }
}

fn assert_consecutive(samples: &[(Instant, DeviceSample)], modulus: u64) {
    for w in samples.windows(2) {
        let d = (u64::from(w[1].1.device_seq) + modulus - u64::from(w[0].1.device_seq)) % modulus;
        assert_eq!(
            d, 1,
            "sequence {} → {}",
            w[0].1.device_seq, w[1].1.device_seq
        );
    }
}

fn rate_hz(samples: &[(Instant, DeviceSample)]) -> f64 {
    let dt = samples
        .last()
        .unwrap()
        .0
        .duration_since(samples[0].0)
        .as_secs_f64();
    (samples.len() - 1) as f64 / dt
}

async fn local_listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

/// `C` mode, conversion parameters queried from the box (AMPZ, CHNAPG, EXMV, DCPM).
/// Quantisation: ≤ ½ count per channel = 6.2e-5 mV/V, through the default matrix rows
/// (Σ|m| ≤ 619 N and ≤ 8 N·m per mV/V) → ≤ 0.04 N and ≤ 0.0005 N·m.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sri_raw_counts_params_from_box() {
    let (l, addr) = local_listener().await;
    let emu = sri_emulator(
        l,
        SriEmulatorConfig {
            imperfections: quiet(),
            ..Default::default()
        },
    )
    .await;
    let mut cfg = base_cfg(SensorDriver::Sri);
    cfg.sri.address = addr;
    cfg.sri.mode = DataFormat::RawCounts;
    cfg.sri.sample_rate_hz = 1000;
    let mut d = Driver::start(cfg);
    let s = d.take(1000, Duration::from_secs(5)).await;
    assert_close(&s, [0.04, 0.04, 0.04, 5e-4, 5e-4, 5e-4], "sri C");
    assert_consecutive(&s, 1 << 16);
    let st = d.stats();
    eprintln!(
        "sri C: {:.0} Hz over 1000 samples; stats {st:?}",
        rate_hz(&s)
    );
    assert!(st.calibration.starts_with("device"), "{}", st.calibration);
    assert_eq!((st.lost, st.checksum_errors, st.length_errors), (0, 0, 0));
    assert!(st.connected);
    assert!(rate_hz(&s) > 800.0, "{}", rate_hz(&s));
    drop(d);
    emu.kill().await;
}

/// `E` mode: the box sends f32, so the error is f32 rounding (≤ 3e-5 N at 300 N).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sri_calibrated_floats() {
    let (l, addr) = local_listener().await;
    let emu = sri_emulator(
        l,
        SriEmulatorConfig {
            imperfections: quiet(),
            mode: sim::wire::sri::Mode::RawCounts, // the driver switches it with AT+SGDM
            ..Default::default()
        },
    )
    .await;
    let mut cfg = base_cfg(SensorDriver::Sri);
    cfg.sri.address = addr;
    cfg.sri.mode = DataFormat::Calibrated;
    cfg.sri.sample_rate_hz = 500;
    let mut d = Driver::start(cfg);
    let s = d.take(500, Duration::from_secs(5)).await;
    assert_close(&s, [1e-4, 1e-4, 1e-4, 1e-6, 1e-6, 1e-6], "sri E");
    assert_consecutive(&s, 1 << 16);
    eprintln!("sri E at 500 Hz: {:.0} Hz measured", rate_hz(&s));
    assert!((400.0..600.0).contains(&rate_hz(&s)), "{}", rate_hz(&s));
    assert_eq!(d.stats().calibration, "box (E mode)");
    drop(d);
    emu.kill().await;
}

/// `C` mode with parameters from the config and seeded noise (σ = 0.2 N, 0.004 N·m): every
/// sample within 5σ + quantisation, the mean within 4σ/√n + quantisation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sri_raw_counts_params_from_config_with_noise() {
    let (l, addr) = local_listener().await;
    let sigma = [0.2, 0.2, 0.2, 0.004, 0.004, 0.004];
    let emu = sri_emulator(
        l,
        SriEmulatorConfig {
            imperfections: Imperfections {
                noise_std: sigma,
                seed: 42,
                ..quiet()
            },
            ..Default::default()
        },
    )
    .await;
    let mut cfg = base_cfg(SensorDriver::Sri);
    cfg.sri.address = addr;
    // The emulated box's calibration, entered in the config as an integrator types it in.
    let box_cal = default_params();
    cfg.sri.params = Some(sensor::sri::SriParams {
        amp_zero: box_cal.amp_zero,
        gain: box_cal.gain,
        excitation_v: box_cal.excitation_v,
        decoupling: box_cal.decoupling,
    });
    let mut d = Driver::start(cfg);
    let s = d.take(2000, Duration::from_secs(6)).await;
    let q = [0.04, 0.04, 0.04, 5e-4, 5e-4, 5e-4];
    let tol: Vec<f64> = (0..6).map(|i| 5.0 * sigma[i] + q[i]).collect();
    assert_close(&s, tol.try_into().unwrap(), "sri C noisy");
    for i in 0..6 {
        let mean = s.iter().map(|(_, x)| x.wrench[i]).sum::<f64>() / s.len() as f64;
        let lim = 4.0 * sigma[i] / (s.len() as f64).sqrt() + q[i];
        assert!((mean - TRUTH[i]).abs() < lim, "axis {i}: mean {mean}");
    }
    assert_eq!(d.stats().calibration, "config");
    drop(d);
    emu.kill().await;
}

/// The connection dies (emulator stopped): the driver notices, backs off, and resumes on its
/// own when the box returns on the same port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sri_reconnects_after_the_box_returns() {
    let (l, addr) = local_listener().await;
    let emu_cfg = SriEmulatorConfig {
        imperfections: quiet(),
        ..Default::default()
    };
    let emu = sri_emulator(l, emu_cfg.clone()).await;
    let mut cfg = base_cfg(SensorDriver::Sri);
    cfg.sri.address = addr.clone();
    let mut d = Driver::start(cfg);
    d.take(100, Duration::from_secs(5)).await;
    emu.kill().await;
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let st = d.stats();
    assert!(!st.connected, "{st:?}");
    assert!(st.last_error.is_some());
    d.drain();
    let emu = sri_emulator(TcpListener::bind(&addr).await.unwrap(), emu_cfg).await;
    let s = d.take(100, Duration::from_secs(5)).await;
    assert_close(&s, [0.04, 0.04, 0.04, 5e-4, 5e-4, 5e-4], "after reconnect");
    let st = d.stats();
    eprintln!(
        "sri: back {:.0} ms after the kill (300 ms of outage); stats {st:?}",
        s[0].0.duration_since(killed).as_secs_f64() * 1e3
    );
    assert!(st.connected);
    assert_eq!(st.reconnects, 1);
    assert!(st.failures >= 1);
    drop(d);
    emu.kill().await;
}

async fn ati_sockets() -> (UdpSocket, TcpListener, String, u16) {
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = udp.local_addr().unwrap().to_string();
    let (http, haddr) = local_listener().await;
    let hport = haddr.rsplit_once(':').unwrap().1.parse().unwrap();
    (udp, http, addr, hport)
}

/// Counts per unit read from `netftapi2.xml` (torque calibrated in N·mm): 1e6 counts/N and
/// 1000 counts/N·mm = 1e6 counts/N·m → quantisation 5e-7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ati_rdt_with_calibration_over_http() {
    let (udp, http, addr, hport) = ati_sockets().await;
    let emu = ati_emulator(
        udp,
        http,
        AtiEmulatorConfig {
            counts_per_torque: 1000.0,
            torque_unit: "N-mm".into(),
            imperfections: quiet(),
            ..Default::default()
        },
    )
    .await;
    let mut cfg = base_cfg(SensorDriver::Ati);
    cfg.ati.address = addr;
    cfg.ati.http_port = hport;
    let mut d = Driver::start(cfg);
    let s = d.take(1000, Duration::from_secs(5)).await;
    assert_close(&s, [1e-6; 6], "ati");
    assert_consecutive(&s, 1 << 32);
    let st = d.stats();
    eprintln!("ati: {:.0} Hz over 1000 samples; stats {st:?}", rate_hz(&s));
    assert!(st.calibration.contains("netftapi2"), "{}", st.calibration);
    assert_eq!((st.lost, st.device_status), (0, 0));
    assert!(rate_hz(&s) > 800.0);
    drop(d);
    emu.kill().await;
}

/// Counts per unit from the config, noise and a saturated axis: the status word says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ati_config_calibration_noise_and_saturation_status() {
    let (udp, http, addr, _) = ati_sockets().await;
    let sigma = [0.1, 0.1, 0.1, 0.002, 0.002, 0.002];
    let emu = ati_emulator(
        udp,
        http,
        AtiEmulatorConfig {
            counts_per_force: 1e4,
            counts_per_torque: 1e5,
            imperfections: Imperfections {
                noise_std: sigma,
                range: [5000.0, 5000.0, 250.0, 100.0, 100.0, 100.0],
                seed: 3,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let mut cfg = base_cfg(SensorDriver::Ati);
    cfg.ati.address = addr;
    cfg.ati.http_port = 1; // not used: both counts per unit are configured
    cfg.ati.counts_per_force = Some(1e4);
    cfg.ati.counts_per_torque = Some(1e5);
    let mut d = Driver::start(cfg);
    let s = d.take(500, Duration::from_secs(5)).await;
    for (_, x) in &s {
        assert_eq!(x.device_status, 0x8002_0000);
        assert_eq!(x.wrench[2], 250.0, "Fz clips at its range");
        for i in [0, 1, 3, 4, 5] {
            assert!((x.wrench[i] - TRUTH[i]).abs() < 5.0 * sigma[i] + 1e-4);
        }
    }
    let st = d.stats();
    assert_eq!(st.calibration, "config");
    assert_eq!(st.status_flags, vec!["error_summary", "saturation_or_adc"]);
    drop(d);
    emu.kill().await;
}

/// The device vanishes (emulator stopped: no data, ICMP refusals) and comes back on the same
/// ports: the driver re-reads the calibration, restarts the stream and carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ati_reconnects_after_the_device_returns() {
    let (udp, http, addr, hport) = ati_sockets().await;
    let emu_cfg = AtiEmulatorConfig {
        imperfections: quiet(),
        ..Default::default()
    };
    let emu = ati_emulator(udp, http, emu_cfg.clone()).await;
    let mut cfg = base_cfg(SensorDriver::Ati);
    cfg.ati.address = addr.clone();
    cfg.ati.http_port = hport;
    let mut d = Driver::start(cfg);
    d.take(100, Duration::from_secs(5)).await;
    emu.kill().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!d.stats().connected);
    d.drain();
    let udp = UdpSocket::bind(&addr).await.unwrap();
    let http = TcpListener::bind(("127.0.0.1", hport)).await.unwrap();
    let emu = ati_emulator(udp, http, emu_cfg).await;
    let s = d.take(100, Duration::from_secs(5)).await;
    assert_close(&s, [1e-6; 6], "ati after reconnect");
    let st = d.stats();
    eprintln!("ati reconnect stats {st:?}");
    assert_eq!(st.reconnects, 1);
    assert!(st.connected);
    drop(d);
    emu.kill().await;
}

/// Both devices at 2 kHz (the topic's upper rate): no samples lost, the rate held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_devices_hold_2_khz() {
    let (l, addr) = local_listener().await;
    let sri_emu = sri_emulator(
        l,
        SriEmulatorConfig {
            imperfections: quiet(),
            ..Default::default()
        },
    )
    .await;
    let mut cfg = base_cfg(SensorDriver::Sri);
    cfg.sri.address = addr;
    cfg.sri.sample_rate_hz = 2000;
    let mut d = Driver::start(cfg);
    d.take(200, Duration::from_secs(5)).await;
    let s = d.take(4000, Duration::from_secs(6)).await;
    assert_consecutive(&s, 1 << 16);
    let sri_rate = rate_hz(&s);
    drop(d);
    sri_emu.kill().await;

    let (udp, http, addr, hport) = ati_sockets().await;
    let ati_emu = ati_emulator(
        udp,
        http,
        AtiEmulatorConfig {
            rdt_rate_hz: 2000.0,
            imperfections: quiet(),
            ..Default::default()
        },
    )
    .await;
    let mut cfg = base_cfg(SensorDriver::Ati);
    cfg.ati.address = addr;
    cfg.ati.http_port = hport;
    let mut d = Driver::start(cfg);
    d.take(200, Duration::from_secs(5)).await;
    let s = d.take(4000, Duration::from_secs(6)).await;
    let ati_rate = rate_hz(&s);
    let lost = d.stats().lost;
    eprintln!("2 kHz: sri {sri_rate:.0} Hz, ati {ati_rate:.0} Hz (lost {lost})");
    assert!(
        sri_rate > 1800.0 && ati_rate > 1800.0,
        "{sri_rate} {ati_rate}"
    );
    assert_eq!(lost, 0);
    drop(d);
    ati_emu.kill().await;
}
