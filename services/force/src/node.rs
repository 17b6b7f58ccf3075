//! force's shell: one estimate per raw sample, stale flagging, and the request/reply
//! queryables `cell/<id>/force/rpc/{tare,capture,identify,clear}` (JSON answers).
//!
//! Where non-finite input is caught: a raw sample with a NaN or infinity never reaches this
//! shell — the bus drops it (`msg::Check`, counted as `rejected` on `sensor/wrench_raw` in the
//! status), so it shows as a missing sample (`Stale` after `stale_ms`, and a restart of the
//! filter when the gap is long, see [`missed_samples`]). Non-finite numbers computed here
//! (gravity compensation, frames) are flagged `NonFinite` by the pipeline, with finite
//! wrenches so that the estimate is not dropped by its subscribers.

use std::time::{Duration, Instant};

use common::bus::{reply_err, reply_json};
use common::{
    bus::Node,
    config::{ConfigErrors, Validate},
    msg::{Stamp, WrenchEstimate, WrenchFault},
    service::Shutdown,
    topic,
};
use kinematics::Arm;
use zenoh::query::Query;

use crate::pipeline::{to_msg, AccelEstimator, Pipeline, PipelineParams, PoseInput, WindowOutcome};
use nalgebra::Vector3;

/// `[force]` table.
pub type ForceConfig = PipelineParams;

impl Validate for PipelineParams {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        for (k, v) in self.problems() {
            errors.push(format!("{prefix}.{k}"), v);
        }
    }
}

/// Key of a force request/reply queryable.
pub fn rpc_key(cell_id: &str, op: &str) -> String {
    format!("cell/{cell_id}/force/rpc/{op}")
}

/// How many samples the sensor produced between the previous received one and `now` that did
/// not reach the pipeline: the larger of the sequence gap (deliveries the latest-value slot
/// overwrote or the network dropped) and the production-time gap at `sample_rate_hz`
/// (`source_mono_ns`; this also covers a sensor that stopped publishing and came back, or
/// restarted with a new sequence). Bursty stamping can overstate the time gap by a burst's
/// length; that only matters when it reaches the pipeline's settle window.
pub fn missed_samples(prev: Option<Stamp>, now: Stamp, sample_rate_hz: f64) -> u64 {
    let Some(prev) = prev else {
        return 0;
    };
    let by_seq = now.seq.saturating_sub(prev.seq).saturating_sub(1);
    let dt_s = now.source_mono_ns.saturating_sub(prev.source_mono_ns) as f64 * 1e-9;
    let periods = (dt_s * sample_rate_hz).round();
    let by_time = if periods.is_finite() && periods >= 1.0 {
        // Saturating float → int cast.
        (periods as u64).saturating_sub(1)
    } else {
        0
    };
    by_seq.max(by_time)
}

pub async fn run(
    node: Node,
    cfg: (ForceConfig, Arm),
    mut shutdown: Shutdown,
) -> anyhow::Result<()> {
    let (cfg, arm) = cfg;
    let mut pl = Pipeline::new(cfg.clone(), arm.sensor_in_tcp()).map_err(anyhow::Error::msg)?;
    let mut raw = node.latest(topic::WRENCH_RAW).await?;
    let poses = node.latest(topic::TOOL_POSE).await?;
    let mut est_pub = node.publisher(topic::WRENCH_ESTIMATE).await?;
    let mut queryables = Vec::new();
    for op in ["tare", "capture", "identify", "clear"] {
        let key = rpc_key(&node.cell_id, op);
        let q = node
            .session
            .declare_queryable(key.clone())
            .await
            .map_err(|e| anyhow::anyhow!("queryable {key}: {e}"))?;
        queryables.push(q);
    }
    let [q_tare, q_capture, q_identify, q_clear] =
        <[_; 4]>::try_from(queryables).map_err(|_| anyhow::anyhow!("queryables"))?;
    let _presence = node.announce().await?;

    let stale_after = Duration::from_secs_f64(cfg.stale_ms * 1e-3);
    let pose_max_age = Duration::from_secs_f64(cfg.pose_max_age_ms * 1e-3);
    let mut last_sample: Option<Instant> = None;
    let mut last_seq = 0u64;
    let mut last_stamp: Option<Stamp> = None;
    let mut pending: Option<Query> = None;
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    let mut stale_tick = tokio::time::interval(Duration::from_millis(1));
    let mut status_tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_fault = WrenchFault::None;
    let mut accel = AccelEstimator::default();

    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(s) = raw.changed() => {
                last_sample = Some(s.at);
                last_seq = s.msg.stamp.seq;
                pl.missed(missed_samples(last_stamp, s.msg.stamp, cfg.sample_rate_hz));
                last_stamp = Some(s.msg.stamp);
                let pose = poses.get().filter(|p| p.at.elapsed() <= pose_max_age).map(|p| {
                    let t = p.msg.tcp_twist_base;
                    let n = |v: [f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
                    let a = accel.push(p.msg.cycle, Vector3::from(t.linear_m_s), p.msg.period_s);
                    PoseInput {
                        tcp_in_base: p.msg.tcp_in_base.to_isometry(),
                        linear_speed_m_s: n(t.linear_m_s),
                        angular_speed_rad_s: n(t.angular_rad_s),
                        tcp_accel_base_m_s2: a,
                    }
                });
                let w = s.msg.wrench_sensor;
                let sample = [w.force_n[0], w.force_n[1], w.force_n[2], w.torque_nm[0], w.torque_nm[1], w.torque_nm[2]];
                let e = pl.step(sample, s.msg.device_status, pose.as_ref());
                *counts.entry(format!("{:?}", e.fault)).or_default() += 1;
                last_fault = e.fault;
                let msg = WrenchEstimate {
                    stamp: est_pub.next_stamp(),
                    sample_seq: s.msg.stamp.seq,
                    sample_mono_ns: s.msg.stamp.source_mono_ns,
                    fault: e.fault,
                    sensor: to_msg(&e.sensor),
                    tool: to_msg(&e.tool),
                    base: to_msg(&e.base),
                    peak_force_n: e.peak_force_n,
                    peak_torque_nm: e.peak_torque_nm,
                    fast_swing_n: e.fast_swing_n,
                };
                est_pub.put(&msg);
                if let Some(outcome) = pl.take_outcome() {
                    if let Some(q) = pending.take() {
                        match outcome {
                            WindowOutcome::Tared { force_offset_n, torque_offset_nm } => reply_json(&q, serde_json::json!({
                                "tared": true, "force_offset_n": force_offset_n, "torque_offset_nm": torque_offset_nm,
                            })),
                            WindowOutcome::Captured { pose } => reply_json(&q, serde_json::json!({ "captured": pose })),
                            WindowOutcome::Refused(why) => reply_err(&q, why),
                        }
                    }
                }
            }
            _ = stale_tick.tick() => {
                if let Some(t) = last_sample {
                    if t.elapsed() > stale_after {
                        // Say so, at 1 kHz, until samples return.
                        last_fault = WrenchFault::Stale;
                        let msg = WrenchEstimate {
                            stamp: est_pub.next_stamp(),
                            sample_seq: last_seq,
                            fault: WrenchFault::Stale,
                            ..Default::default()
                        };
                        est_pub.put(&msg);
                        // A short gap does not spoil a static average; a lost sensor does.
                        if t.elapsed() > Duration::from_millis(250) {
                            if let Some(q) = pending.take() {
                                reply_err(&q, "sensor stale: no samples".into());
                            }
                        }
                    }
                }
            }
            Ok(q) = q_tare.recv_async() => {
                if pending.is_some() || pl.averaging() {
                    reply_err(&q, "busy: a tare or capture is in progress".into());
                } else if last_sample.is_none_or(|t| t.elapsed() > stale_after) {
                    reply_err(&q, "no sensor samples".into());
                } else {
                    pl.start_tare();
                    pending = Some(q);
                }
            }
            Ok(q) = q_capture.recv_async() => {
                if pending.is_some() || pl.averaging() {
                    reply_err(&q, "busy: a tare or capture is in progress".into());
                } else if last_sample.is_none_or(|t| t.elapsed() > stale_after) {
                    reply_err(&q, "no sensor samples".into());
                } else {
                    pl.start_capture();
                    pending = Some(q);
                }
            }
            Ok(q) = q_identify.recv_async() => {
                match pl.identify() {
                    Ok(id) => {
                        tracing::info!("payload identified: {:?}", id.payload);
                        // The status says the new payload at once (a program saved right after
                        // must record it, not the one of the last status tick).
                        node.set_detail(serde_json::json!({
                            "tared": pl.is_tared(),
                            "payload": pl.payload(),
                            "captures": pl.captures(),
                            "last_fault": format!("{last_fault:?}"),
                        }));
                        reply_json(&q, serde_json::to_value(id).unwrap_or_default());
                    }
                    Err(e) => reply_err(&q, e.to_string()),
                }
            }
            Ok(q) = q_clear.recv_async() => {
                pl.clear_captures();
                reply_json(&q, serde_json::json!({ "cleared": true }));
            }
            _ = status_tick.tick() => {
                node.set_detail(serde_json::json!({
                    "tared": pl.is_tared(),
                    "payload": pl.payload(),
                    "captures": pl.captures(),
                    "last_fault": format!("{last_fault:?}"),
                    "settling": pl.settling().map(|f| format!("{f:?}")),
                    "settle_samples": pl.settle_samples(),
                    "estimates_by_fault": counts,
                    "sample_age_ms": last_sample.map(|t| t.elapsed().as_secs_f64() * 1e3),
                }));
            }
        }
    }
    drop(_presence);
    node.close().await;
    Ok(())
}

/// The service's process entry: config (every problem listed, exit 2), tracing, runtime, bus,
/// then [`run`]. Both `cell-force` and the multi-call `cell service force` (what `cell up` starts)
/// call it, so the two cannot differ.
pub fn service_main(
    cfg: common::service::ConfigArgs,
    bus: common::bus::BusArgs,
) -> std::process::ExitCode {
    common::service::run_service(
        "force",
        bus,
        cfg,
        |l| {
            let f: crate::node::ForceConfig = l.section("force");
            (f, kinematics::config::load_arm(l))
        },
        crate::node::run,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(seq: u64, ms: u64) -> Stamp {
        Stamp {
            seq,
            source_mono_ns: ms * 1_000_000,
        }
    }

    #[test]
    fn missed_samples_from_sequence_and_time_gaps() {
        let fs = 1000.0;
        assert_eq!(missed_samples(None, stamp(5, 5), fs), 0);
        // Consecutive.
        assert_eq!(missed_samples(Some(stamp(1, 1)), stamp(2, 2), fs), 0);
        // Three deliveries overwritten: sequence gap (stamped in one burst).
        assert_eq!(missed_samples(Some(stamp(1, 1)), stamp(5, 1), fs), 3);
        // The sensor was unplugged for 500 ms; its sequence just continues.
        assert_eq!(missed_samples(Some(stamp(9, 100)), stamp(10, 600), fs), 499);
        // The sensor service restarted: new sequence, later time.
        assert_eq!(
            missed_samples(Some(stamp(900, 100)), stamp(1, 300), fs),
            199
        );
        // Clock going backwards (another host): no gap claimed from time.
        assert_eq!(missed_samples(Some(stamp(1, 300)), stamp(2, 100), fs), 0);
    }
}
