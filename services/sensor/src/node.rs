//! sensor's shell: runs the configured driver and publishes every device sample on
//! `sensor/wrench_raw` (stamped by the publisher), with driver counters in the status.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{
    bus::Node,
    msg::{Wrench, WrenchSample},
    service::Shutdown,
    topic,
};

pub use crate::config::{AtiConfig, SensorConfig, SensorDriver, SriConfig};
use crate::driver::{self, DeviceSample, DriverStats};

pub async fn run(node: Node, cfg: SensorConfig, mut shutdown: Shutdown) -> anyhow::Result<()> {
    let mut raw_pub = node.publisher(topic::WRENCH_RAW).await?;
    let _presence = node.announce().await?;
    let mut status_tick = tokio::time::interval(Duration::from_millis(500));
    if cfg.driver == SensorDriver::None {
        node.set_state("idle: no sensor driver configured (sensor.driver = \"none\")");
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = status_tick.tick() => {
                    node.set_detail(serde_json::json!({ "driver": "none", "samples": 0 }));
                }
            }
        }
    } else {
        let stats = Arc::new(Mutex::new(DriverStats::default()));
        let mut sink = move |s: DeviceSample| {
            let stamp = raw_pub.next_stamp();
            raw_pub.put(&WrenchSample {
                stamp,
                device_seq: s.device_seq,
                device_status: s.device_status,
                wrench_sensor: Wrench {
                    force_n: [s.wrench[0], s.wrench[1], s.wrench[2]],
                    torque_nm: [s.wrench[3], s.wrench[4], s.wrench[5]],
                },
            });
        };
        let drv = driver::run(&cfg, stats.clone(), &mut sink);
        tokio::pin!(drv);
        let mut last = (Instant::now(), 0u64);
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                () = &mut drv => break,
                _ = status_tick.tick() => {
                    let s = stats.lock().map(|s| s.clone()).unwrap_or_default();
                    let now = Instant::now();
                    let dt = now.duration_since(last.0).as_secs_f64();
                    let rate = if dt > 0.0 { (s.samples.saturating_sub(last.1)) as f64 / dt } else { 0.0 };
                    last = (now, s.samples);
                    node.set_state(&if s.connected {
                        format!("running: {} {} streaming", s.driver, s.address)
                    } else {
                        format!("waiting for {} device at {}", s.driver, s.address)
                    });
                    if s.last_error != last_error {
                        if let Some(e) = &s.last_error {
                            node.set_error(e.clone());
                        }
                        last_error = s.last_error.clone();
                    }
                    let mut detail = serde_json::to_value(&s).unwrap_or_default();
                    if let Some(o) = detail.as_object_mut() {
                        o.insert("rate_hz".into(), serde_json::json!((rate * 10.0).round() / 10.0));
                    }
                    node.set_detail(detail);
                }
            }
        }
    }
    drop(_presence);
    node.close().await;
    Ok(())
}

/// The service's process entry: config (every problem listed, exit 2), tracing, runtime, bus,
/// then [`run`]. Both `cell-sensor` and the multi-call `cell service sensor` (what `cell up` starts)
/// call it, so the two cannot differ.
pub fn service_main(
    cfg: common::service::ConfigArgs,
    bus: common::bus::BusArgs,
) -> std::process::ExitCode {
    common::service::run_service(
        "sensor",
        bus,
        cfg,
        |l| l.section::<crate::node::SensorConfig>("sensor"),
        crate::node::run,
    )
}
