//! The lead-through experiments' figures (pure functions of recorded traces): a pull's
//! response, path, speed, force and steps ([`pull`], [`pull_metrics`], [`true_travel_m`],
//! [`rms_above`]), and playback's path and joint-reference fractions ([`max_deviation_m`],
//! [`from_closest`], [`joint_fractions`]). Time is the record's; nothing here talks to a bus.

use common::msg::{GuideState, JointCommand, SimTruth};
use nalgebra::Vector3;
use serde_json::{json, Value};

use crate::stall;

/// Cai's step d (`[control.guide] step_m` default, m).
pub const STEP_M: f64 = 0.01;
/// The robot cycle (EGM, s): a joint step's period where its state's was not recorded.
pub const CYCLE_S: f64 = 0.004;

/// What the recorder collected.
#[derive(Default, Debug, Clone)]
pub struct Rec {
    pub truth: Vec<SimTruth>,
    pub guide: Vec<GuideState>,
    pub joint_cmd: Vec<JointCommand>,
    /// Robot-time period (s) of each joint state received, by robot-io cycle
    /// (`JointState::period_s`: 8 ms after a lost datagram).
    pub periods: std::collections::BTreeMap<u64, f64>,
}

/// What one pull gave (SI units).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pull {
    pub label: String,
    /// Where the TCP stood when the pull began (base, m): the origin of every distance below.
    pub from_m: [f64; 3],
    /// From the hand force reaching 3 N to the TCP having moved 1 mm along the pull (s).
    pub response_time_s: f64,
    /// RMS and max distance of the TCP from the pull line while moving (m).
    pub rms_path_deviation_m: f64,
    pub max_path_deviation_m: f64,
    /// Distance travelled along the pull (m).
    pub path_length_m: f64,
    /// From the hand force reaching 3 N to the TCP at 80 % of the hand's path (s; the tool
    /// comes to rest short of the hand's end by the grasp spring's stretch at the dead band).
    pub time_to_target_s: Option<f64>,
    /// Mean |hand force| while the TCP moved at 0.1 m/s ± 20 % (N).
    pub guide_force_at_0_1_m_s_n: Option<f64>,
    /// Largest commanded TCP speed (m/s), and the TCP speed from the truth (m/s).
    pub max_cmd_speed_m_s: f64,
    pub max_tcp_speed_m_s: f64,
    /// Stepping laws: the step lengths (m) from the commanded positions at step ends (control's
    /// view: the law sets them by construction).
    pub steps_m: Vec<f64>,
    /// The same steps made by the true TCP (m): where it stood just before each next step
    /// The true TCP's travel over the pull and the steps made ([`true_travel_m`]).
    pub true_travel: Option<(f64, u32)>,
    /// RMS of the TCP velocity along the pull above 2 Hz (m/s), from the truth: jitter a
    /// hand would feel.
    pub band_rms_above_2hz_m_s: f64,
    pub max_damping_scale: f64,
    /// The guide session ended during the pull: control's stop reason (`None`: still
    /// guiding when the pull's record ended).
    pub ended: Option<String>,
    /// This is a second pull: the first ended on a proven host stall ([`crate::stall`]).
    pub retried_after: Option<stall::Retry>,
}

/// RMS above `hz` of a uniformly sampled signal (a DFT; `dt` the sample period; the mean
/// removed). Pure.
pub fn rms_above(x: &[f64], dt: f64, hz: f64) -> f64 {
    let n = x.len();
    if n < 8 || dt.is_nan() || dt <= 0.0 {
        return 0.0;
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    let mut power = 0.0;
    let k0 = (hz * n as f64 * dt).ceil() as usize;
    for k in k0.max(1)..n / 2 {
        let (mut re, mut im) = (0.0, 0.0);
        for (i, v) in x.iter().enumerate() {
            let a = -2.0 * std::f64::consts::PI * (k * i) as f64 / n as f64;
            re += (v - mean) * a.cos();
            im += (v - mean) * a.sin();
        }
        power += 2.0 * (re * re + im * im) / (n as f64 * n as f64);
    }
    power.sqrt()
}

/// Scores a pull from `from` along `dir`.
pub fn pull(
    label: &str,
    rec: &Rec,
    from: &Vector3<f64>,
    dir: &Vector3<f64>,
    length_m: f64,
) -> anyhow::Result<Pull> {
    let u = dir.normalize();
    let tr = &rec.truth;
    anyhow::ensure!(
        tr.len() > 100,
        "{label}: too few truth samples ({})",
        tr.len()
    );
    let t_force = tr
        .iter()
        .find(|t| Vector3::from(t.hand_force_base_n).norm() >= 3.0)
        .map(|t| t.t_s);
    let t_move = tr
        .iter()
        .find(|t| (Vector3::from(t.tcp_in_base_m) - from).dot(&u) >= 0.001)
        .map(|t| t.t_s);
    let t_target = tr
        .iter()
        .find(|t| (Vector3::from(t.tcp_in_base_m) - from).dot(&u) >= 0.8 * length_m)
        .map(|t| t.t_s);
    let response_time_s = match (t_force, t_move) {
        (Some(a), Some(b)) => (b - a).max(0.0),
        _ => f64::INFINITY,
    };
    let mut dev = Vec::new();
    let mut along: f64 = 0.0;
    let mut speeds = Vec::new();
    let mut vu = Vec::new();
    let mut forces = Vec::new();
    for w in tr.windows(2) {
        let p = Vector3::from(w[1].tcp_in_base_m) - from;
        let a = p.dot(&u);
        along = along.max(a);
        let dt = w[1].t_s - w[0].t_s;
        if dt <= 0.0 {
            continue;
        }
        let v = (Vector3::from(w[1].tcp_in_base_m) - Vector3::from(w[0].tcp_in_base_m)) / dt;
        speeds.push(v.norm());
        vu.push(v.dot(&u));
        if a > 0.002 {
            dev.push((p - u * a).norm());
        }
        if (v.norm() - 0.1).abs() < 0.02 {
            forces.push(Vector3::from(w[1].hand_force_base_n).norm());
        }
    }
    let rms = (dev.iter().map(|d| d * d).sum::<f64>() / dev.len().max(1) as f64).sqrt();
    let max_dev = dev.iter().fold(0.0f64, |m, d| m.max(*d));
    let mut steps_m = Vec::new();
    let mut prev = rec
        .guide
        .first()
        .map_or(*from, |g| Vector3::from(g.tcp_cmd_m));
    for w in rec.guide.windows(2) {
        if w[1].steps > w[0].steps {
            let e = Vector3::from(w[1].tcp_cmd_m);
            steps_m.push((e - prev).norm());
            prev = e;
        }
    }
    Ok(Pull {
        label: label.into(),
        from_m: [from.x, from.y, from.z],
        response_time_s,
        rms_path_deviation_m: rms,
        max_path_deviation_m: max_dev,
        path_length_m: along,
        time_to_target_s: t_force.zip(t_target).map(|(a, b)| (b - a).max(0.0)),
        guide_force_at_0_1_m_s_n: (forces.len() > 20)
            .then(|| forces.iter().sum::<f64>() / forces.len() as f64),
        max_cmd_speed_m_s: rec
            .guide
            .iter()
            .map(|g| Vector3::from(g.twist.linear_m_s).norm())
            .fold(0.0, f64::max),
        max_tcp_speed_m_s: speeds.iter().fold(0.0, |m, v| m.max(*v)),
        steps_m,
        true_travel: true_travel_m(tr, &rec.guide),
        band_rms_above_2hz_m_s: rms_above(
            &vu,
            (tr[tr.len() - 1].t_s - tr[0].t_s) / (tr.len() - 1) as f64,
            2.0,
        ),
        max_damping_scale: rec
            .guide
            .iter()
            .map(|g| g.damping_scale)
            .fold(1.0, f64::max),
        ended: None,
        retried_after: None,
    })
}

/// The true TCP's travel over a stepping pull (pure): from the record's first truth sample (the
/// arm at rest before the hand pulls) to its last (at rest after the hand let go), with the
/// steps the law made in between (each rise of the guide state's step count). The law's steps
/// follow each other while the servo still lags the last one, so a step's own length is not
/// observable on the true TCP; the travel is — n steps of d must move the tool n·d.
/// `None` without truth or without a step.
pub fn true_travel_m(truth: &[SimTruth], guide: &[GuideState]) -> Option<(f64, u32)> {
    let (a, b) = (truth.first()?, truth.last()?);
    let steps: u32 = guide
        .windows(2)
        .map(|w| w[1].steps.saturating_sub(w[0].steps))
        .sum();
    (steps > 0).then(|| {
        (
            (Vector3::from(b.tcp_in_base_m) - Vector3::from(a.tcp_in_base_m)).norm(),
            steps,
        )
    })
}

/// A pull's metrics (the JSON a pull case reports; gates are the experiment's).
pub fn pull_metrics(p: &Pull) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert(
        "response_time_s".into(),
        json!(p.response_time_s.is_finite().then_some(p.response_time_s)),
    );
    m.insert("path_length_m".into(), json!(p.path_length_m));
    m.insert("rms_path_deviation_m".into(), json!(p.rms_path_deviation_m));
    m.insert("max_path_deviation_m".into(), json!(p.max_path_deviation_m));
    m.insert("time_to_target_s".into(), json!(p.time_to_target_s));
    m.insert(
        "guide_force_at_0_1_m_s_n".into(),
        json!(p.guide_force_at_0_1_m_s_n),
    );
    m.insert("max_cmd_speed_m_s".into(), json!(p.max_cmd_speed_m_s));
    m.insert("max_tcp_speed_m_s".into(), json!(p.max_tcp_speed_m_s));
    m.insert("max_damping_scale".into(), json!(p.max_damping_scale));
    if !p.steps_m.is_empty() {
        let n = p.steps_m.len() as f64;
        m.insert("steps".into(), json!(p.steps_m.len()));
        m.insert("step_m".into(), json!(p.steps_m.iter().sum::<f64>() / n));
        m.insert(
            "max_step_error_m".into(),
            json!(p
                .steps_m
                .iter()
                .map(|s| (s - STEP_M).abs())
                .fold(0.0, f64::max)),
        );
    }
    if let Some((travel, n)) = p.true_travel {
        m.insert("true_travel_m".into(), json!(travel));
        m.insert(
            "true_travel_error_m".into(),
            json!((travel - f64::from(n) * STEP_M).abs()),
        );
        m.insert("true_step_m".into(), json!(travel / f64::from(n)));
        m.insert(
            "step_sources".into(),
            json!({
                "step_m": "control: commanded TCP at each step (set by the law)",
                "true_travel_m": "truth: sim/truth TCP at rest before the pull and after it",
            }),
        );
    }
    // A session that ended during the pull (null: still guiding at its end; gated in every
    // pull case), a pull repeated after a proven host stall (only when it happened).
    m.insert("guide_ended".into(), json!(p.ended));
    if let Some(retry) = &p.retried_after {
        stall::record(&mut m, retry);
    }
    m
}

/// The part of `path` from its closest approach to `start` on (the program itself, without
/// the approach to its first waypoint).
pub fn from_closest(path: &[[f64; 3]], start: [f64; 3]) -> &[[f64; 3]] {
    let s = Vector3::from(start);
    let i = path
        .iter()
        .enumerate()
        .map(|(i, p)| (i, (Vector3::from(*p) - s).norm()))
        .fold((0, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a })
        .0;
    &path[i.min(path.len())..]
}

/// The largest distance from a point of `path` to the polyline `reference` (m); infinite when
/// `reference` is empty, 0 when `path` is.
pub fn max_deviation_m(path: &[[f64; 3]], reference: &[[f64; 3]]) -> f64 {
    let seg = |p: &Vector3<f64>, a: &Vector3<f64>, b: &Vector3<f64>| -> f64 {
        let ab = b - a;
        let l2 = ab.norm_squared();
        let t = if l2 > 0.0 {
            ((p - a).dot(&ab) / l2).clamp(0.0, 1.0)
        } else {
            0.0
        };
        (p - (a + ab * t)).norm()
    };
    let r: Vec<Vector3<f64>> = reference.iter().map(|q| Vector3::from(*q)).collect();
    let mut worst = 0.0f64;
    for p in path {
        let p = Vector3::from(*p);
        let d = match r.len() {
            0 => f64::INFINITY,
            1 => (p - r[0]).norm(),
            _ => r
                .windows(2)
                .map(|w| seg(&p, &w[0], &w[1]))
                .fold(f64::INFINITY, f64::min),
        };
        worst = worst.max(d);
    }
    worst
}

/// Joint references per robot cycle (consecutive cycles only), on the robot's time: per
/// cycle the worst speed and acceleration as fractions of the limits, and the worst of each.
///
/// Command *k* answers joint state *k* and is for one cycle after it, so the step from
/// command *k−1* to *k* spans the robot time from state *k−1* to state *k*: that state's
/// `period_s` (`periods`, by cycle: robot time since the previous state, 8 ms after a lost
/// datagram; the nominal 4 ms where a state was not recorded). The acceleration between two steps is taken over
/// [`robot_io::supervisor::dv_span`], as robot-io bounds it. `t` is robot time since the
/// first command.
pub fn joint_fractions(
    cmds: &[JointCommand],
    periods: &std::collections::BTreeMap<u64, f64>,
    vmax: &[f64; 6],
    amax: &[f64; 6],
) -> (Vec<(f64, f64, f64)>, f64, f64) {
    let period = |cycle: u64| {
        periods
            .get(&cycle)
            .copied()
            .filter(|p| p.is_finite() && *p > 0.0)
            .unwrap_or(CYCLE_S)
    };
    let mut out = Vec::new();
    let (mut wv, mut wa) = (0.0f64, 0.0f64);
    let c0 = cmds.first().map_or(0, |c| c.cycle);
    // Robot time of cycle `t_at.0` since `c0` (cycles arrive in order; recomputed if not).
    let mut t_at = (c0, 0.0f64);
    for w in cmds.windows(3) {
        let (a, b, c) = (w[0].cycle, w[1].cycle, w[2].cycle);
        if b != a + 1 || c != b + 1 {
            continue;
        }
        let (dt1, dt2) = (period(b), period(c));
        let span = robot_io::supervisor::dv_span(dt1, dt2);
        let (mut v_c, mut a_c) = (0.0f64, 0.0f64);
        for j in 0..6 {
            let v1 = (w[1].q_rad[j] - w[0].q_rad[j]) / dt1;
            let v2 = (w[2].q_rad[j] - w[1].q_rad[j]) / dt2;
            v_c = v_c.max(v2.abs() / vmax[j]);
            a_c = a_c.max(((v2 - v1) / span).abs() / amax[j]);
        }
        wv = wv.max(v_c);
        wa = wa.max(a_c);
        if b < t_at.0 {
            t_at = (c0, 0.0);
        }
        t_at.1 += (t_at.0 + 1..=b).map(period).sum::<f64>();
        t_at.0 = b;
        out.push((t_at.1, v_c, a_c));
    }
    (out, wv, wa)
}

/// A guide session in figures (`metrics.json` of `cell guide --trace`).
pub fn guide_metrics(trace: &crate::trace::guide::GuideTrace) -> serde_json::Value {
    let run = &trace.session;
    let end = run.end_mono_ns as f64 * 1e-9;
    let last_state_after_end_s = run
        .states
        .last()
        .map(|g| g.stamp.source_mono_ns as f64 * 1e-9 - end);
    serde_json::json!({
        "law": run.reply["guiding"],
        "enables_sent": run.enables_sent,
        "ended_by": if run.ended_by_control.is_some() { "control" } else { "operator" },
        "reason": run.ended_by_control,
        "guide_states": run.states.len(),
        "last_guide_state_after_end_s": last_state_after_end_s,
        "after_end": super::hybrid::after_end_figures(&trace.after),
    })
}

#[cfg(test)]
mod tests {
    use super::{from_closest, joint_fractions, max_deviation_m, rms_above, true_travel_m};

    #[test]
    fn path_deviation_is_the_distance_to_the_reference_polyline() {
        // Reference: an L from (0,0,0) to (1,0,0) to (1,1,0).
        let reference = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]];
        // On the polyline, anywhere along it (not only at its vertices): 0.
        let on = [[0.3, 0.0, 0.0], [1.0, 0.5, 0.0], [1.0, 1.0, 0.0]];
        assert!(max_deviation_m(&on, &reference) < 1e-12);
        // 2 mm off the second leg, 1 mm above the first: the worst is 2 mm.
        let off = [[0.5, 0.0, 0.001], [1.002, 0.5, 0.0]];
        assert!((max_deviation_m(&off, &reference) - 0.002).abs() < 1e-12);
        assert_eq!(max_deviation_m(&off, &[]), f64::INFINITY);
        assert_eq!(max_deviation_m(&[], &reference), 0.0);
        // The approach (before the closest pass of the first waypoint) is cut off.
        let played = [[5.0, 5.0, 0.0], [0.1, 0.0, 0.0], [0.5, 0.0, 0.0]];
        assert_eq!(from_closest(&played, [0.0, 0.0, 0.0]).len(), 2);
        assert!(from_closest(&[], [0.0; 3]).is_empty());
    }
    use common::msg::JointCommand;
    use std::collections::BTreeMap;

    #[test]
    fn joint_fractions_are_read_on_robot_time_across_a_lost_datagram() {
        // Joint 0 accelerates at 2 rad/s² from rest; the commands sit at each state's robot
        // time. State 10's datagram came after a lost one: its period is 8 ms.
        let a = 2.0;
        let mut periods = BTreeMap::new();
        let mut t = 0.0;
        let mut cmds = Vec::new();
        for k in 0..20u64 {
            let p = if k == 10 { 0.008 } else { 0.004 };
            if k > 0 {
                t += p;
            }
            periods.insert(k, p);
            let mut q = [0.0; 6];
            q[0] = 0.5 * a * t * t;
            cmds.push(JointCommand {
                cycle: k,
                q_rad: q,
                ..Default::default()
            });
        }
        let vmax = [10.0; 6];
        let amax = [a; 6];
        let (per_cycle, wv, wa) = joint_fractions(&cmds, &periods, &vmax, &amax);
        assert_eq!(per_cycle.len(), 18);
        // A constant acceleration reads as 100 % of it on every cycle (dv_span at the
        // 8 ms step: the midpoints of the steps are 6 ms apart).
        assert!((wa - 1.0).abs() < 1e-6, "worst accel fraction {wa}");
        assert!(wv > 0.0 && wv < 0.02, "{wv}");
        // Robot time: the lost cycle's 8 ms is counted (cycle 18: 17 × 4 ms + 8 ms).
        let t_last = per_cycle.last().map_or(0.0, |c| c.0);
        assert!((t_last - 0.076).abs() < 1e-9, "{t_last}");
        // Read on the nominal 4 ms (no periods), the lost datagram is a spike: the test
        // can tell the two apart.
        let (_, _, wa_nominal) = joint_fractions(&cmds, &BTreeMap::new(), &vmax, &amax);
        assert!(wa_nominal > 2.0, "{wa_nominal}");
    }

    #[test]
    fn true_travel_is_measured_on_the_true_tcp_not_the_command() {
        use common::msg::{GuideState, SimTruth, Stamp};
        let stamp = |ms: u64| Stamp {
            seq: ms,
            source_mono_ns: ms * 1_000_000,
        };
        // Two steps (the counter rises at 100 and 300 ms; it started at 5, as a session's
        // counter may), the command would say 20 mm; the true TCP lags and ends 19 mm along
        // x, at rest.
        let guide: Vec<GuideState> = (0..50)
            .map(|i| GuideState {
                stamp: stamp(i * 10),
                steps: 5 + u32::from(i >= 10) + u32::from(i >= 30),
                ..GuideState::default()
            })
            .collect();
        let x = |ms: u64| (ms as f64 * 1e-4 - 0.01).clamp(0.0, 0.019);
        let truth: Vec<SimTruth> = (0..125)
            .map(|i| SimTruth {
                stamp: stamp(i * 4),
                tcp_in_base_m: [0.4 + x(i * 4), 0.0, 0.3],
                ..SimTruth::default()
            })
            .collect();
        let (travel, n) = true_travel_m(&truth, &guide).expect("two steps");
        assert_eq!(n, 2);
        assert!((travel - 0.019).abs() < 1e-12, "{travel}");
        assert!(true_travel_m(&[], &guide).is_none());
        let no_steps: Vec<GuideState> = guide
            .iter()
            .map(|g| GuideState { steps: 5, ..*g })
            .collect();
        assert!(true_travel_m(&truth, &no_steps).is_none());
    }

    #[test]
    fn rms_above_keeps_what_is_above_the_cut_and_drops_what_is_below() {
        let dt = 1e-3;
        let sine = |hz: f64, amp: f64| -> Vec<f64> {
            (0..2000)
                .map(|i| 3.0 + amp * (2.0 * std::f64::consts::PI * hz * i as f64 * dt).sin())
                .collect()
        };
        // 10 Hz, amplitude 0.2: RMS 0.2/√2 above 2 Hz; the offset is not counted.
        let hi = rms_above(&sine(10.0, 0.2), dt, 2.0);
        assert!((hi - 0.2 / 2f64.sqrt()).abs() < 1e-3, "{hi}");
        // 1 Hz (below the cut): nothing.
        let lo = rms_above(&sine(1.0, 0.2), dt, 2.0);
        assert!(lo < 1e-3, "{lo}");
        // Too short or a bad period: 0, never NaN.
        assert_eq!(rms_above(&[1.0, 2.0], dt, 2.0), 0.0);
        assert_eq!(rms_above(&sine(10.0, 0.2), f64::NAN, 2.0), 0.0);
    }
}
