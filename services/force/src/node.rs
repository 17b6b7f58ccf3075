//! force's shell.

use std::time::Duration;

use common::{
    bus::Node,
    config::{ConfigErrors, Validate},
    msg::{WrenchEstimate, WrenchFault},
    service::Shutdown,
    topic,
};
use serde::{Deserialize, Serialize};

/// `[force]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ForceConfig {}

impl Validate for ForceConfig {
    fn validate(&self, _prefix: &str, _errors: &mut ConfigErrors) {}
}

pub async fn run(node: Node, _cfg: ForceConfig, mut shutdown: Shutdown) -> anyhow::Result<()> {
    let mut raw = node.latest(topic::WRENCH_RAW).await?;
    let _poses = node.latest(topic::TOOL_POSE).await?;
    let mut est_pub = node.publisher(topic::WRENCH_ESTIMATE).await?;
    let _presence = node.announce().await?;
    let mut status_tick = tokio::time::interval(Duration::from_millis(500));
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(s) = raw.changed() => {
                let est = WrenchEstimate {
                    stamp: est_pub.next_stamp(),
                    sample_seq: s.msg.stamp.seq,
                    fault: WrenchFault::NotTared,
                    sensor: s.msg.wrench_sensor,
                    ..Default::default()
                };
                est_pub.put(&est);
                n += 1;
            }
            _ = status_tick.tick() => {
                node.set_detail(serde_json::json!({ "estimates": n, "fault": "NotTared" }));
            }
        }
    }
    drop(_presence);
    node.close().await;
    Ok(())
}
