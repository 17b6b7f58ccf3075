//! sensor's shell.

use std::time::Duration;

use common::{
    bus::Node,
    config::{ConfigErrors, Validate},
    service::Shutdown,
    topic,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SensorDriver {
    /// No F/T sensor in this cell.
    #[default]
    None,
}

/// `[sensor]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SensorConfig {
    pub driver: SensorDriver,
}

impl Validate for SensorConfig {
    fn validate(&self, _prefix: &str, _errors: &mut ConfigErrors) {}
}

pub async fn run(node: Node, cfg: SensorConfig, mut shutdown: Shutdown) -> anyhow::Result<()> {
    let _raw_pub = node.publisher(topic::WRENCH_RAW).await?;
    let _presence = node.announce().await?;
    let SensorDriver::None = cfg.driver;
    node.set_state("idle: no sensor driver configured (sensor.driver = \"none\")");
    let mut status_tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = status_tick.tick() => {
                node.set_detail(serde_json::json!({ "driver": "none", "samples": 0 }));
            }
        }
    }
    drop(_presence);
    node.close().await;
    Ok(())
}
