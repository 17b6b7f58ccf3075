//! `cell identify stiffness`: the contact stiffness of a fixture, Cai et al.'s procedure — small
//! probing displacements against the fixture along one axis, the stiffness column
//! `K = Δwrench / Δx` — fitted by least squares over several steps.
//!
//! Sequence (all moves are ordinary `Move` motions, slow, each checked to settle):
//! 1. from the start pose (tool just above or touching the fixture, sensor tared off contact),
//!    approach along `into` in 0.5 mm steps until the force along it reaches 2 N;
//! 2. probe: a first 0.05 mm step estimates K, then four steps up to the displacement that
//!    adds `probe_force_n` (default 15 N) — never more than 2 mm;
//! 3. fit `F = F0 + K·x` over the contact points (measured TCP displacement, averaged wrench),
//!    report K, the fit's R² and the force gains it implies; go back to the start pose.

use std::time::Duration;

use anyhow::Context;
use common::{
    codec,
    config::CellSection,
    msg::{self, Pose},
    topic,
};
use nalgebra::Vector3;
use zenoh::Session;

use crate::cli;

/// Least-squares line `y = a + k·x`; returns (k, a, R²). `None` with fewer than two distinct x.
pub fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let k = sxy / sxx;
    let a = my - k * mx;
    let r2 = if syy > 0.0 {
        (sxy * sxy) / (sxx * syy)
    } else {
        1.0
    };
    Some((k, a, r2))
}

/// Averages the contact force (base axes, on the tool) and the TCP position over `window`.
async fn average(
    s: &Session,
    cell: &CellSection,
    window: Duration,
) -> anyhow::Result<(Vector3<f64>, Vector3<f64>)> {
    let w = s
        .declare_subscriber(topic::WRENCH_ESTIMATE.key(&cell.id))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    let p = s
        .declare_subscriber(topic::TOOL_POSE.key(&cell.id))
        .await
        .map_err(|e| anyhow::anyhow!("subscribe: {e}"))?;
    let deadline = tokio::time::Instant::now() + window;
    let (mut f, mut nf) = (Vector3::zeros(), 0usize);
    let (mut x, mut nx) = (Vector3::zeros(), 0usize);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            r = w.recv_async() => {
                let Ok(sample) = r else { break };
                if let Ok(e) = codec::decode::<msg::WrenchEstimate>(&sample.payload().to_bytes()) {
                    // A gap in the samples (the host was busy) is skipped, any other fault stops.
                    if e.fault == msg::WrenchFault::Stale {
                        continue;
                    }
                    anyhow::ensure!(e.fault == msg::WrenchFault::None,
                        "the wrench estimate is not usable ({:?}); tare off contact first", e.fault);
                    f += Vector3::from(e.base.force_n);
                    nf += 1;
                }
            }
            r = p.recv_async() => {
                let Ok(sample) = r else { break };
                if let Ok(t) = codec::decode::<msg::ToolPose>(&sample.payload().to_bytes()) {
                    x += Vector3::from(t.tcp_in_base.position_m);
                    nx += 1;
                }
            }
        }
    }
    anyhow::ensure!(
        nf > 0 && nx > 0,
        "no wrench estimates or tool poses (is the cell running?)"
    );
    Ok((f / nf as f64, x / nx as f64))
}

/// The approach: a hybrid task pressing 2 N along `n` (C_z = n), from contact for 1 s.
fn approach_task(
    start: &Pose,
    n: &Vector3<f64>,
    max_approach_m: f64,
    timeout_ceiling_s: f64,
) -> msg::HybridTask {
    use nalgebra::{UnitQuaternion, Vector3 as V};
    let rot = UnitQuaternion::rotation_between(&V::z(), n)
        .unwrap_or_else(|| UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0));
    let q = rot.quaternion();
    let mut reference: [msg::Profile; 6] = Default::default();
    reference[2] = msg::Profile::Constant(2.0);
    let speed = 2e-4;
    msg::HybridTask {
        name: "identify-approach".into(),
        robot: msg::TaskRobot::Arm,
        frame_kind: msg::FrameKind::Base,
        frame: Pose {
            position_m: start.position_m,
            quat_wxyz: [q.w, q.i, q.j, q.k],
        },
        force_axes: [false, false, true, false, false, false],
        reference,
        // 1 s of holding 2 N after contact; the approach is bounded by the distance.
        duration_s: 1.0,
        from_contact: true,
        gains: Some(control::hybrid::default_arm_gains(
            [1e6; 3], [50.0; 3], 0.03,
        )),
        // A probe: its gains are made for the stiffest surface on purpose.
        fixed_gains: true,
        // Tightens the cell's limits (a request above one of them is refused).
        limits: msg::LimitRequest {
            force_axis_speed_m_s: Some(speed),
            max_force_n: Some(40.0),
            approach_timeout_s: Some((max_approach_m / speed).min(timeout_ceiling_s)),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn go(s: &Session, cell: &CellSection, p: &Pose, speed_m_s: f64) -> anyhow::Result<()> {
    cli::move_to(s, cell, *p, speed_m_s, 0.2).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    cli::wait_at_pose(s, cell, p, Duration::from_secs(20)).await
}

/// Parameters of a probe.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// Unit direction into the fixture (base axes).
    pub into: Vector3<f64>,
    /// Force added by the probing steps (N).
    pub probe_force_n: f64,
    /// Longest approach before giving up (m).
    pub max_approach_m: f64,
    /// The cell's `[control.hybrid.limits] approach_timeout_s` (the ceiling of the approach
    /// task's own timeout): the approach ends at whichever bound comes first.
    pub approach_timeout_ceiling_s: f64,
}

/// Runs the probe; returns the result as JSON (`stiffness_n_per_m`, `r2`, points, gains).
pub async fn stiffness(
    s: &Session,
    cell: &CellSection,
    probe: Probe,
    loop_delay_s: f64,
) -> anyhow::Result<serde_json::Value> {
    let n = probe.into.normalize();
    crate::hybrid::wait_for_usable_wrench(s, cell, Duration::from_secs(1)).await;
    let start = cli::latest_tcp(s, cell, Duration::from_secs(2)).await?;
    let p0 = Vector3::from(start.position_m);
    let at = |d: f64| {
        let mut p = start;
        let v = p0 + n * d;
        p.position_m = [v.x, v.y, v.z];
        p
    };
    let speed = 0.002;
    let window = Duration::from_millis(300);
    let (f_free, _) = average(s, cell, window).await?;
    // Force pressing into the fixture: the reaction on the tool is against `into`.
    let press = |f: &Vector3<f64>| -(f - f_free).dot(&n);
    // 1. Approach under force control (a hybrid task: 2 N along `into`, the other axes held)
    //    at 0.2 mm/s — the first-contact overshoot is K·v·T, ≈ 6 N even on 10⁶ N/m.
    let approach = approach_task(
        &start,
        &n,
        probe.max_approach_m,
        probe.approach_timeout_ceiling_s,
    );
    let mut approach = approach;
    let aborted = crate::hybrid::follow(s, cell, &mut approach, false, |_| {}).await?;
    // The contact settles for a second before it is averaged (as long as the recorded run
    // this step used until 2026-12-06 spent tracing the second after the task's end).
    tokio::time::sleep(Duration::from_secs(1)).await;
    if let Some(why) = aborted {
        let _ = go(s, cell, &start, speed).await;
        anyhow::bail!("approach to the fixture failed: {why}");
    }
    let (f_c, x_c) = average(s, cell, window).await?;
    let d_c = (x_c - p0).dot(&n);
    let contact = (d_c, f_c, x_c);
    let (d_c, f_c, x_c) = contact;
    let mut points = vec![((x_c - p0).dot(&n), press(&f_c))];
    eprintln!(
        "contact at {:.2} mm: {:.2} N",
        points[0].0 * 1e3,
        points[0].1
    );
    // 2. A small first step (5 µm: 5 N on 10⁶ N/m), then steps up to probe_force_n more.
    let first = 5e-6;
    go(s, cell, &at(d_c + first), speed).await?;
    let (f1, x1) = average(s, cell, window).await?;
    points.push(((x1 - p0).dot(&n), press(&f1)));
    let k_est = ((points[1].1 - points[0].1) / (points[1].0 - points[0].0).max(1e-7)).max(100.0);
    let span = (probe.probe_force_n / k_est).min(2e-3);
    for i in 1..=4 {
        let di = d_c + first + span * f64::from(i) / 4.0;
        go(s, cell, &at(di), speed * 0.5).await?;
        let (fi, xi) = average(s, cell, window).await?;
        let pt = ((xi - p0).dot(&n), press(&fi));
        eprintln!("probe {:.3} mm: {:.2} N", pt.0 * 1e3, pt.1);
        points.push(pt);
        if pt.1 > 3.0 * probe.probe_force_n {
            break;
        }
    }
    // 3. Back off.
    go(s, cell, &start, speed).await?;
    let (k, _, r2) = fit_line(&points).context("probe points do not span a displacement")?;
    anyhow::ensure!(
        k > 0.0,
        "measured stiffness {k:.0} N/m is not positive: no firm contact"
    );
    let g = control::hybrid::default_arm_gains([k; 3], [50.0; 3], loop_delay_s);
    Ok(serde_json::json!({
        "stiffness_n_per_m": k,
        "r2": r2,
        "axis": [n.x, n.y, n.z],
        "points_mm_n": points.iter().map(|(x, f)| [x * 1e3, *f]).collect::<Vec<_>>(),
        "default_gains": { "kp_f_m_per_n_s": g.kp_f[0], "ki_f": g.ki_f[0], "loop_delay_s": loop_delay_s },
    }))
}

/// Stores the stiffness in `[control.hybrid] stiffness_n_per_m` of a cell config (comments
/// kept): the probed axis (`axis` = 0, 1, 2) gets `k`, the others keep their values (or `k`
/// when absent).
pub fn write_stiffness(file: &std::path::Path, axis: usize, k: f64) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut doc = text
        .parse::<toml_edit::DocumentMut>()
        .with_context(|| format!("parsing {}", file.display()))?;
    let control = doc
        .entry("control")
        .or_insert(toml_edit::table())
        .as_table_mut()
        .context("[control] is not a table")?;
    let hybrid = control
        .entry("hybrid")
        .or_insert(toml_edit::table())
        .as_table_mut()
        .context("[control.hybrid] is not a table")?;
    let mut cur = [k; 3];
    if let Some(a) = hybrid.get("stiffness_n_per_m").and_then(|v| v.as_array()) {
        for (i, v) in a.iter().enumerate().take(3) {
            if let Some(x) = v.as_float().or(v.as_integer().map(|i| i as f64)) {
                cur[i] = x;
            }
        }
    }
    cur[axis.min(2)] = k;
    let mut arr = toml_edit::Array::new();
    for v in cur {
        arr.push(v);
    }
    hybrid["stiffness_n_per_m"] = toml_edit::value(arr);
    std::fs::write(file, doc.to_string()).with_context(|| format!("writing {}", file.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_line_recovers_slope_and_quality() {
        let pts: Vec<(f64, f64)> = (0..5)
            .map(|i| (i as f64 * 1e-4, 2.0 + 2e4 * i as f64 * 1e-4))
            .collect();
        let (k, a, r2) = fit_line(&pts).expect("fit");
        assert!((k - 2e4).abs() < 1e-6 && (a - 2.0).abs() < 1e-9 && (r2 - 1.0).abs() < 1e-12);
        assert!(fit_line(&[(1.0, 2.0)]).is_none());
        assert!(fit_line(&[(1.0, 2.0), (1.0, 3.0)]).is_none());
    }

    #[test]
    fn write_keeps_comments_and_other_axes() {
        let dir = std::env::temp_dir().join(format!("stiff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join("c.toml");
        std::fs::write(
            &f,
            "# cell\n[control]\ninitial_mode = \"idle\" # keep\n[control.hybrid]\nstiffness_n_per_m = [1.0, 2.0, 3.0]\n",
        )
        .expect("write");
        write_stiffness(&f, 2, 5e4).expect("store");
        let t = std::fs::read_to_string(&f).expect("read");
        assert!(t.contains("# keep") && t.contains("# cell"), "{t}");
        assert!(t.contains("[1.0, 2.0, 50000.0]"), "{t}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
