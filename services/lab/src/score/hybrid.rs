//! The hybrid experiments' scoring (pure functions of recorded traces; issue 22): what each
//! case measures — a force step's figures, errors in a window placed on an event, the first
//! contact — on the simulator's ground truth, and the verdict. Unit-tested on synthetic traces
//! whose answers are known (`experiment`'s tests). `docs/experiments.md` quotes these
//! definitions.

use super::signal::{error_stats, lowpass_zero_phase, resample, step_figures};
use crate::trace::{
    hybrid::{Outcome, Row},
    AfterRow,
};
use common::msg::{HybridPhase, HybridTask, Profile};
use control::hybrid::AXES;
use serde_json::{json, Value};

use super::{checks, Target};

/// A finished run in figures ([`task_metrics`] with what happened after its end), written as
/// `metrics.json` into `out` when given (beside the traces `crate::trace::hybrid::run` wrote).
pub fn score_run(o: &Outcome, out: Option<&std::path::Path>) -> anyhow::Result<Value> {
    let mut m = task_metrics(&o.task, &o.rows, &o.truth, o.aborted.as_deref());
    if let Some(obj) = m.as_object_mut() {
        obj.insert("after_end".into(), after_end_figures(&o.after));
    }
    if let Some(dir) = out {
        super::write_metrics(dir, &m)?;
    }
    Ok(m)
}

/// Scoring: per force axis RMS / max error while in contact (12 Hz-filtered like the paper's
/// plots, first 0.1 s after contact excluded), step figures when the reference is a step, peak
/// force at first contact, contact losses; per position axis the largest deviation.
#[allow(clippy::needless_range_loop)] // axis k of several arrays
pub fn task_metrics(
    task: &HybridTask,
    rows: &[Row],
    truth: &[(f64, [f64; 2])],
    aborted: Option<&str>,
) -> serde_json::Value {
    let t: Vec<f64> = rows.iter().map(|r| r.state.t_s).collect();
    let contact_at = rows
        .iter()
        .find(|r| r.state.phase == HybridPhase::Contact)
        .map(|r| r.state.t_s);
    let losses = contact_losses(rows);
    // Reference times count from contact on `from_contact` tasks.
    let shift = if task.from_contact {
        contact_at.unwrap_or(0.0)
    } else {
        0.0
    };
    let mut axes = serde_json::Map::new();
    let fs = if t.len() > 1 {
        (t.len() - 1) as f64 / (t[t.len() - 1] - t[0]).max(1e-9)
    } else {
        1.0
    };
    for k in 0..6 {
        if task.force_axes[k] {
            let f: Vec<f64> = rows.iter().map(|r| r.state.force[k]).collect();
            let fr: Vec<f64> = rows.iter().map(|r| r.state.force_ref[k]).collect();
            let (tu, fu) = resample(&t, &f, fs.round().max(1.0));
            let (_, ru) = resample(&t, &fr, fs.round().max(1.0));
            let ff = lowpass_zero_phase(&fu, 12.0, fs.round().max(1.0));
            let from = contact_at.map_or(f64::INFINITY, |c| c + 0.1);
            let to = t.last().copied().unwrap_or(0.0);
            let (rms, max) = error_stats(&tu, &ff, &ru, from, to);
            let peak = f
                .iter()
                .zip(&t)
                .filter(|(_, ti)| contact_at.is_some_and(|c| **ti <= c + 0.5))
                .map(|(v, _)| v.abs())
                .fold(0.0, f64::max);
            let mut a = serde_json::json!({
                "kind": "force",
                "rms_error": rms, "max_error": max,
                "peak_first_contact": peak,
                "unit": if k < 3 { "N" } else { "N·m" },
            });
            if let Profile::Step {
                before,
                after,
                at_s,
            } = task.reference[k]
            {
                let at_s = at_s + shift;
                let fig = step_figures(&tu, &ff, at_s, before, after, 1.0);
                a["step"] = serde_json::to_value(fig).unwrap_or_default();
            }
            // Ground truth (arm on the simulator): the world's contact force at each row, in
            // {C}, filtered like the estimate.
            if k < 3
                && truth.is_empty()
                && !rows.is_empty()
                && rows.iter().all(|r| r.truth_force.is_some())
            {
                let g: Vec<f64> = rows
                    .iter()
                    .map(|r| r.truth_force.map_or(0.0, |v| v[k]))
                    .collect();
                let (_, gu) = resample(&t, &g, fs.round().max(1.0));
                let gf = lowpass_zero_phase(&gu, 12.0, fs.round().max(1.0));
                let (grms, gmax) = error_stats(&tu, &gf, &ru, from, to);
                a["truth_rms_error"] = serde_json::json!(grms);
                a["truth_max_error"] = serde_json::json!(gmax);
                // The true first-contact peak, unfiltered: from the start to 0.5 s after the
                // contact was declared (or over the whole run when none was).
                let first = g
                    .iter()
                    .zip(&t)
                    .filter(|(_, ti)| contact_at.is_none_or(|c| **ti <= c + 0.5))
                    .map(|(v, _)| v.abs())
                    .fold(0.0, f64::max);
                a["truth_peak_first_contact"] = serde_json::json!(first);
            }
            // Ground truth (plant, 1 kHz): the same figures on the true contact force.
            if k < 2 && truth.len() > 1 {
                let tt: Vec<f64> = truth.iter().map(|(t, _)| *t).collect();
                let g: Vec<f64> = truth.iter().map(|(_, f)| f[k]).collect();
                let fs_t = ((tt.len() - 1) as f64 / (tt[tt.len() - 1] - tt[0]).max(1e-9)).round();
                let (tg, gu) = resample(&tt, &g, fs_t.max(1.0));
                let gf = lowpass_zero_phase(&gu, 12.0, fs_t.max(1.0));
                let rg: Vec<f64> = tg
                    .iter()
                    .map(|t| control::hybrid::profile_value(&task.reference[k], *t - shift))
                    .collect();
                let (grms, gmax) = error_stats(&tg, &gf, &rg, from, to);
                a["truth_rms_error"] = serde_json::json!(grms);
                a["truth_max_error"] = serde_json::json!(gmax);
                if let Profile::Step {
                    before,
                    after,
                    at_s,
                } = task.reference[k]
                {
                    a["truth_step"] = serde_json::to_value(step_figures(
                        &tg,
                        &gf,
                        at_s + shift,
                        before,
                        after,
                        1.0,
                    ))
                    .unwrap_or_default();
                }
            }
            axes.insert(AXES[k].into(), a);
        } else {
            let dev = rows
                .iter()
                .map(|r| (r.state.position[k] - r.state.position_ref[k]).abs())
                .fold(0.0, f64::max);
            axes.insert(
                AXES[k].into(),
                serde_json::json!({
                    "kind": "position",
                    "max_deviation": dev,
                    "unit": if k < 3 { "m" } else { "rad" },
                }),
            );
        }
    }
    serde_json::json!({
        "task": task.name,
        "robot": format!("{:?}", task.robot),
        "samples": rows.len(),
        "duration_s": t.last().copied().unwrap_or(0.0),
        "rate_hz": fs,
        "contact_at_s": contact_at,
        "contact_losses": losses,
        "bridged_cycles": rows.iter().filter(|r| r.state.bridged).count(),
        // The stiffness the force gains were made for at the end, and the on-line estimate
        // (per translational axis of {C}; 0 = position axis / none).
        "gains_for_n_per_m": rows.last().map(|r| r.state.gains_for_n_per_m),
        "stiffness_estimate_n_per_m": rows.last().map(|r| r.state.stiffness_estimate_n_per_m),
        // Speed adaptation: the slowest the reference clock ran (1: as planned) and how far
        // behind task time it ended (s).
        "min_speed_scale": rows
            .iter()
            .map(|r| r.state.speed_scale)
            .filter(|v| *v > 0.0)
            .fold(1.0, f64::min),
        "reference_lag_s": rows.last().map(|r| {
            let shift = if task.from_contact { contact_at.unwrap_or(0.0) } else { 0.0 };
            (r.state.t_s - shift - r.state.ref_time_s).max(0.0)
        }),
        "aborted": aborted,
        "axes": axes,
    })
}

/// The trace after the end in figures: peak and last force magnitude, of the estimate and
/// of the truth (null without samples).
pub fn after_end_figures(after: &[AfterRow]) -> serde_json::Value {
    let norm = |f: &[f64; 3]| (f[0] * f[0] + f[1] * f[1] + f[2] * f[2]).sqrt();
    let figs = |truth: bool| {
        let v: Vec<f64> = after
            .iter()
            .filter(|r| r.truth == truth)
            .map(|r| norm(&r.force_base_n))
            .filter(|f| f.is_finite())
            .collect();
        serde_json::json!({
            "samples": v.len(),
            "peak_n": v.iter().copied().reduce(f64::max),
            "last_n": v.last(),
        })
    };
    serde_json::json!({
        "seconds": crate::trace::AFTER_END_S,
        "estimate": figs(false),
        "truth": figs(true),
    })
}

/// Times control declared the contact lost (entries into `ContactLost`).
fn contact_losses(rows: &[Row]) -> usize {
    rows.windows(2)
        .filter(|w| {
            w[0].state.phase != HybridPhase::ContactLost
                && w[1].state.phase == HybridPhase::ContactLost
        })
        .count()
}

/// How a case's force is scored.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Score {
    /// A step of the force reference (task time, shifted by contact for `from_contact`).
    Step { before: f64, after: f64, at_s: f64 },
    /// Errors within `[from_s, to_s]` after the event `anchor`; the paper's exclusion, if it
    /// made one, in `ends_excluded_s` (a second pair of figures, `*_excl_ends_n`).
    Window {
        anchor: Anchor,
        from_s: f64,
        to_s: f64,
        ends_excluded_s: f64,
    },
}

/// The event a scoring window is measured from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Anchor {
    /// The reference's own clock: task time 0, or control's contact for `from_contact` tasks
    /// (the reference starts there).
    Reference,
    /// The first instant the true contact force is above zero (ground truth): the event a
    /// scenario's trigger (`trigger = "contact"`) fires on.
    TruthTouch,
}

#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) label: String,
    /// Scenario RPC request that sets the world up (`load` implies a reset).
    pub(crate) scenario: Value,
    /// Arm: place the tool (pointing down) here (mm, base) and tare before the task.
    pub(crate) place_mm: Option<[f64; 3]>,
    pub(crate) task: HybridTask,
    pub(crate) force_axis: usize,
    pub(crate) score: Score,
    pub(crate) targets: Vec<Target>,
    pub(crate) note: Option<String>,
    /// The case is expected to end by a limit (reported, not a failure).
    pub(crate) may_abort: bool,
    /// Score the first contact too and plot the stiffness (`unknown-surface`).
    pub(crate) first_contact: Option<TrueStiffness>,
}

/// The stiffness of a case's world under the tool, for the plot beside the estimate: `k0`,
/// and where it changes along {C} x (from, to: the displacement from the task's start, m;
/// the stiffness from `to` on), the compliance linear in between (the simulator's `grade`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrueStiffness {
    pub(crate) k0: f64,
    pub(crate) grade: Option<(f64, f64, f64)>,
}

impl TrueStiffness {
    pub(crate) fn at(&self, x: f64) -> f64 {
        match self.grade {
            Some((a, b, k1)) if b > a => {
                let w = ((x - a) / (b - a)).clamp(0.0, 1.0);
                1.0 / ((1.0 - w) / self.k0 + w / k1)
            }
            _ => self.k0,
        }
    }
}

/// A case's verdict from its scored metrics (pure): the targets' checks; a gate missed, an
/// unexpected end (`aborted` when the case may not abort) or missing ground truth (≥ 10 % of
/// the law steps without it, or no true touch for a window placed on one: `truth_missing` is
/// added to the metrics) fails it, whatever its numbers.
pub(crate) fn judge(
    case: &Case,
    metrics: &mut serde_json::Map<String, Value>,
    aborted: bool,
) -> (Vec<Value>, bool) {
    let (checks, mut passed) = checks(metrics, &case.targets);
    if aborted && !case.may_abort {
        passed = false;
    }
    let coverage = metrics["truth_coverage"].as_f64().unwrap_or(0.0);
    let touch_needed = matches!(
        case.score,
        Score::Window {
            anchor: Anchor::TruthTouch,
            ..
        }
    );
    let untouched = touch_needed && metrics["touched"] != json!(true);
    if coverage < 0.9 || untouched {
        passed = false;
        metrics.insert(
            "truth_missing".into(),
            json!(format!(
                "ground truth on {:.0} % of the law steps{}",
                coverage * 100.0,
                if untouched {
                    "; no true touch to place the window on"
                } else {
                    ""
                }
            )),
        );
    }
    (checks, passed)
}

/// The plotted series of a case.
pub(crate) struct CaseSeries {
    /// Force: time, reference, filtered truth, raw truth (plant) or the estimate (arm).
    pub(crate) t: Vec<f64>,
    pub(crate) reference: Vec<f64>,
    pub(crate) filtered: Vec<f64>,
    pub(crate) raw: Vec<(f64, f64)>,
    pub(crate) raw_label: &'static str,
    /// Position: time, reference, measured, and the axis name.
    pub(crate) pos_t: Vec<f64>,
    pub(crate) pos_ref: Vec<f64>,
    pub(crate) pos: Vec<f64>,
    pub(crate) pos_axis: String,
}

/// The reference clock of a recorded task against the rows' time (pure): from each row's
/// `(t_s, ref_time_s)` once the reference runs (from contact for a task that starts there);
/// before the first such row and after the last it runs at rate 1 (as planned). Without
/// rows it is task time less `shift`.
pub(crate) struct RefClock {
    pts: Vec<(f64, f64)>,
    shift: f64,
}

impl RefClock {
    pub(crate) fn new(rows: &[Row], shift: f64) -> Self {
        let pts = rows
            .iter()
            .filter(|r| r.state.t_s >= shift)
            .map(|r| (r.state.t_s, r.state.ref_time_s))
            .filter(|(t, x)| t.is_finite() && x.is_finite())
            .collect::<Vec<_>>();
        // A record without the clock (every row 0: a plant recording or an older trace) runs
        // on task time less the shift.
        let pts = if pts.iter().all(|p| p.1 == 0.0) {
            Vec::new()
        } else {
            pts
        };
        RefClock { pts, shift }
    }

    /// Reference time at row time `t`.
    pub(crate) fn ref_at(&self, t: f64) -> f64 {
        let (Some(first), Some(last)) = (self.pts.first(), self.pts.last()) else {
            return t - self.shift;
        };
        if t <= first.0 {
            return first.1 - (first.0 - t);
        }
        if t >= last.0 {
            return last.1 + (t - last.0);
        }
        let i = self.pts.partition_point(|p| p.0 <= t);
        let (a, b) = (self.pts[i - 1], self.pts[i]);
        if b.0 > a.0 {
            a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0)
        } else {
            a.1
        }
    }

    /// The first row time at which the reference clock reaches `x` (rate 1 outside the rows).
    pub(crate) fn time_of(&self, x: f64) -> f64 {
        let (Some(first), Some(last)) = (self.pts.first(), self.pts.last()) else {
            return x + self.shift;
        };
        if x <= first.1 {
            return first.0 - (first.1 - x);
        }
        if x > last.1 {
            return last.0 + (x - last.1);
        }
        match self.pts.windows(2).find(|w| w[1].1 >= x) {
            Some(w) if w[1].1 > w[0].1 => {
                w[0].0 + (w[1].0 - w[0].0) * (x - w[0].1) / (w[1].1 - w[0].1)
            }
            Some(w) => w[1].0,
            None => last.0,
        }
    }
}

/// Scores a recorded case: the force axis on the 12 Hz-filtered ground truth.
#[allow(clippy::needless_range_loop)] // axis k of several arrays
pub(crate) fn score(case: &Case, o: &Outcome) -> (serde_json::Map<String, Value>, CaseSeries) {
    let k = case.force_axis;
    let rows = &o.rows;
    let contact_at = rows
        .iter()
        .find(|r| r.state.phase == HybridPhase::Contact)
        .map(|r| r.state.t_s);
    let shift = if case.task.from_contact {
        contact_at.unwrap_or(0.0)
    } else {
        0.0
    };
    // The task's reference clock as control ran it (`HybridState::ref_time_s`: task time from
    // contact, less what speed adaptation held it back), against the rows' time: reference
    // values and windows placed on the reference are read on it.
    let clock = RefClock::new(rows, shift);
    // Ground truth only: the plant at 1 kHz; the arm once per law step (the rows that have
    // it). Never the estimate in its place: a missing truth fails the case (`truth_coverage`).
    let (tt, raw, raw_label): (Vec<f64>, Vec<f64>, &str) = if !o.truth.is_empty() {
        (
            o.truth.iter().map(|(t, _)| *t).collect(),
            o.truth.iter().map(|(_, f)| f[k.min(1)]).collect(),
            "raw truth (1 kHz)",
        )
    } else {
        let (t, f): (Vec<f64>, Vec<f64>) = rows
            .iter()
            .filter_map(|r| r.truth_force.map(|f| (r.state.t_s, f[k.min(2)])))
            .unzip();
        (t, f, "truth (per law step)")
    };
    let truth_coverage = if o.truth.is_empty() {
        rows.iter().filter(|r| r.truth_force.is_some()).count() as f64 / rows.len().max(1) as f64
    } else {
        1.0
    };
    let fs = if tt.len() > 1 {
        ((tt.len() - 1) as f64 / (tt[tt.len() - 1] - tt[0]).max(1e-9))
            .round()
            .max(1.0)
    } else {
        1.0
    };
    let (tg, gu) = resample(&tt, &raw, fs);
    let gf = lowpass_zero_phase(&gu, 12.0, fs);
    let rg: Vec<f64> = tg
        .iter()
        .map(|t| control::hybrid::profile_value(&case.task.reference[k], clock.ref_at(*t)))
        .collect();
    let end = tg.last().copied().unwrap_or(0.0);
    let mut m = serde_json::Map::new();
    // Step cases: errors after the transient (0.5 s after the step), the force reaching 0 only
    // counts from the step (before it the reference may be 0 N).
    // The true first touch: the first raw truth sample pressing (> 0 N).
    let touch = tt
        .iter()
        .zip(&raw)
        .find(|(_, f)| **f > 0.0)
        .map(|(t, _)| *t);
    let (from, to, lost_from) = match case.score {
        Score::Step { at_s, .. } => {
            let at = clock.time_of(at_s);
            (at + 0.5, end, at)
        }
        Score::Window {
            anchor,
            from_s,
            to_s,
            ..
        } => {
            match anchor {
                // On the reference clock: a move slowed by speed adaptation is scored whole.
                Anchor::Reference => {
                    let (a, b) = (clock.time_of(from_s), clock.time_of(to_s));
                    (a, b.min(end), a)
                }
                // No touch: the window cannot be placed; scored from task time 0 and the
                // case fails on `touched` below.
                Anchor::TruthTouch => {
                    let at = touch.unwrap_or(0.0);
                    (from_s + at, (to_s + at).min(end), from_s + at)
                }
            }
        }
    };
    m.insert("window_from_s".into(), json!(from));
    m.insert("window_to_s".into(), json!(to));
    m.insert("touched".into(), json!(touch.is_some()));
    m.insert("touch_at_s".into(), json!(touch));
    let (rms, max) = error_stats(&tg, &gf, &rg, from, to);
    if let Score::Window {
        ends_excluded_s, ..
    } = case.score
    {
        if ends_excluded_s > 0.0 {
            let (r, mx) = error_stats(&tg, &gf, &rg, from + ends_excluded_s, to - ends_excluded_s);
            m.insert("rms_force_error_excl_ends_n".into(), json!(finite(r)));
            m.insert("max_force_error_excl_ends_n".into(), json!(finite(mx)));
            m.insert("ends_excluded_s".into(), json!(ends_excluded_s));
        }
    }
    if let Score::Step {
        before,
        after,
        at_s,
    } = case.score
    {
        let at = clock.time_of(at_s);
        let f = step_figures(&tg, &gf, at, before, after, 1.0);
        m.insert("rise_time_s".into(), json!(f.rise_time_s));
        m.insert("t90_s".into(), json!(f.t90_s));
        m.insert("overshoot_pct".into(), json!(f.overshoot_pct));
        m.insert(
            "steady_state_error_n".into(),
            json!(finite(f.steady_state_error)),
        );
        m.insert(
            "steady_state_mean_error_n".into(),
            json!(finite(f.steady_state_mean_error)),
        );
        m.insert("limit_cycle_n".into(), json!(f.limit_cycle_amplitude));
        let band = (0.1 * (after - before).abs()).max(1.0);
        m.insert(
            "settling_time_s".into(),
            json!(settling(&tg, &gf, at, after, band)),
        );
        m.insert("settling_band_n".into(), json!(band));
    }
    m.insert("rms_force_error_n".into(), json!(finite(rms)));
    m.insert("max_force_error_n".into(), json!(finite(max)));
    // Contact: control's view (losses) or the filtered truth at or below zero after contact.
    let losses = contact_losses(rows);
    let filtered_zero = tg
        .iter()
        .zip(&gf)
        .any(|(t, f)| *t >= lost_from && *t <= to && *f <= 0.0);
    m.insert("contact_lost".into(), json!(losses > 0 || filtered_zero));
    if !o.truth.is_empty() {
        let dt = 1.0 / fs;
        let off = tt
            .iter()
            .zip(&raw)
            .filter(|(t, f)| **t >= lost_from && **t <= to && **f <= 0.0)
            .count() as f64
            * dt;
        m.insert("raw_off_surface_s".into(), json!(off));
    }
    // Position axes: the largest deviation from the reference after contact — the plant's
    // true hand position; the arm's TCP as control measures it (joint feedback through FK:
    // not gated on the arm).
    let plant = !o.truth.is_empty();
    let mut dev: Option<f64> = Some(0.0);
    for kk in 0..3 {
        if case.task.force_axes[kk] {
            continue;
        }
        for r in rows {
            if contact_at.is_some_and(|c| r.state.t_s >= c) {
                let p = if plant {
                    r.truth_position.map(|p| p[kk])
                } else {
                    Some(r.state.position[kk])
                };
                dev = match (dev, p) {
                    (Some(d), Some(p)) => Some(d.max((p - r.state.position_ref[kk]).abs())),
                    _ => None,
                };
            }
        }
    }
    m.insert("max_position_error_m".into(), json!(dev));
    m.insert("truth_coverage".into(), json!(truth_coverage));
    // Where each figure comes from.
    let truth = if plant {
        "truth: plant (sim/plant/state), 12 Hz filtered"
    } else {
        "truth: sim/truth at the tool, 12 Hz filtered"
    };
    let mut sources = serde_json::Map::new();
    for key in [
        "rise_time_s",
        "t90_s",
        "overshoot_pct",
        "steady_state_error_n",
        "steady_state_mean_error_n",
        "limit_cycle_n",
        "settling_time_s",
        "rms_force_error_n",
        "max_force_error_n",
        "rms_force_error_excl_ends_n",
        "max_force_error_excl_ends_n",
        "touch_at_s",
        "raw_off_surface_s",
    ] {
        sources.insert(key.into(), json!(truth));
    }
    sources.insert(
        "contact_lost".into(),
        json!(format!("{truth}, or control's contact losses")),
    );
    sources.insert(
        "max_position_error_m".into(),
        json!(if plant {
            "truth: the plant's hand position"
        } else {
            "control: TCP from joint feedback (FK)"
        }),
    );
    sources.insert("completed".into(), json!("control"));
    sources.insert("late_law_cycles".into(), json!("control's law clock"));
    m.insert("sources".into(), json!(sources));
    // Context for the scores above: law cycles the host ran late inside the scored window
    // (the law's own clock stepping more than 1.5 periods). Not a gate; a run with late cycles
    // perturbs the plant's stick-slip sequence (docs/hybrid.md, Fig. 8).
    let law_period_s = 1.0
        / if case.task.rate_hz > 0.0 {
            case.task.rate_hz
        } else {
            250.0
        };
    let law_t: Vec<f64> = rows.iter().map(|r| r.state.t_s).collect();
    m.insert(
        "late_law_cycles".into(),
        json!(super::signal::late_steps(&law_t, law_period_s, from, to)),
    );
    m.insert("completed".into(), json!(o.aborted.is_none()));
    m.insert("aborted".into(), json!(o.aborted));
    m.insert("contact_at_s".into(), json!(contact_at));
    m.insert(
        "law_rate_hz".into(),
        json!(if case.task.rate_hz > 0.0 {
            case.task.rate_hz
        } else {
            250.0
        }),
    );
    if o.truth.is_empty() {
        // Arm: the F/T estimate (what control regulates) too.
        let t: Vec<f64> = rows.iter().map(|r| r.state.t_s).collect();
        let f: Vec<f64> = rows.iter().map(|r| r.state.force[k]).collect();
        let r: Vec<f64> = rows.iter().map(|r| r.state.force_ref[k]).collect();
        let (erms, emax) = error_stats(&t, &f, &r, from, to);
        m.insert("estimate_rms_force_error_n".into(), json!(finite(erms)));
        m.insert("estimate_max_force_error_n".into(), json!(finite(emax)));
    }
    // Position panel: the position axis whose reference moves most, else the force axis's
    // displacement.
    let span = |kk: usize| {
        let v: Vec<f64> = rows.iter().map(|r| r.state.position_ref[kk]).collect();
        v.iter().fold(f64::NEG_INFINITY, |a, b| a.max(*b))
            - v.iter().fold(f64::INFINITY, |a, b| a.min(*b))
    };
    let pos_k = (0..3)
        .filter(|kk| !case.task.force_axes[*kk])
        .filter(|kk| span(*kk) > 1e-6)
        .max_by(|a, b| span(*a).total_cmp(&span(*b)))
        .unwrap_or(k);
    let axis = control::hybrid::AXES[pos_k];
    let raw_pts: Vec<(f64, f64)> = if !o.truth.is_empty() {
        // Thin the 1 kHz raw truth for the plot.
        tt.iter()
            .zip(&raw)
            .step_by(2)
            .map(|(a, b)| (*a, *b))
            .collect()
    } else {
        rows.iter()
            .map(|r| (r.state.t_s, r.state.force[k]))
            .collect()
    };
    let series = CaseSeries {
        t: tg,
        reference: rg,
        filtered: gf,
        raw: raw_pts,
        raw_label,
        pos_t: rows.iter().map(|r| r.state.t_s).collect(),
        pos_ref: rows.iter().map(|r| r.state.position_ref[pos_k]).collect(),
        pos: rows.iter().map(|r| r.state.position[pos_k]).collect(),
        pos_axis: if case.task.force_axes[pos_k] {
            format!("{axis} (force axis)")
        } else {
            axis.to_string()
        },
    };
    (m, series)
}

pub(crate) fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The first contact on the true force of the force axis (raw, per law step): its peak
/// within 1 s of the touch, the rise from 10 to 90 % of the setpoint, the overshoot past it
/// until the move starts (2 s after control's contact), and what control ended believing
/// (estimate, the stiffness the gains were made for).
pub(crate) fn first_contact_figures(
    case: &Case,
    o: &Outcome,
    m: &mut serde_json::Map<String, Value>,
) {
    let k = case.force_axis;
    let f_d = control::hybrid::profile_value(&case.task.reference[k], 0.0).abs();
    let truth: Vec<(f64, f64)> = o
        .rows
        .iter()
        .filter_map(|r| r.truth_force.map(|f| (r.state.t_s, f[k.min(2)])))
        .collect();
    let contact = o
        .rows
        .iter()
        .find(|r| r.state.phase == HybridPhase::Contact)
        .map(|r| r.state.t_s);
    let touch = truth.iter().find(|(_, f)| *f > 0.0).map(|p| p.0);
    let peak = touch.map(|t0| {
        truth
            .iter()
            .filter(|(t, _)| *t >= t0 && *t <= t0 + 1.0)
            .fold(0.0f64, |a, p| a.max(p.1))
    });
    let t10 = truth.iter().find(|(_, f)| *f >= 0.1 * f_d).map(|p| p.0);
    let t90 = truth.iter().find(|(_, f)| *f >= 0.9 * f_d).map(|p| p.0);
    let rise = t10.zip(t90).map(|(a, b)| b - a);
    let overshoot = t90.zip(contact).map(|(t9, c)| {
        let top = truth
            .iter()
            .filter(|(t, _)| *t >= t9 && *t <= c + 2.0)
            .fold(0.0f64, |a, p| a.max(p.1));
        ((top - f_d).max(0.0) / f_d * 100.0).max(0.0)
    });
    m.insert("truth_peak_first_contact_n".into(), json!(peak));
    m.insert("first_contact_rise_s".into(), json!(rise));
    m.insert("first_contact_overshoot_pct".into(), json!(overshoot));
    // Speed adaptation: the slowest the reference clock ran, and the move's length in time.
    let min_scale = o
        .rows
        .iter()
        .map(|r| r.state.speed_scale)
        .filter(|v| *v > 0.0)
        .fold(1.0, f64::min);
    m.insert("min_speed_scale".into(), json!(min_scale));
    if let (Some(a), Some(b)) = (
        m.get("window_from_s").and_then(Value::as_f64),
        m.get("window_to_s").and_then(Value::as_f64),
    ) {
        m.insert("move_duration_s".into(), json!(b - a));
        // A surface whose stiffness changes along the move (`grade`, along {C} x from the
        // start): the raw true force error (per law step) through the transition — the taper
        // and 5 mm past it, where the press re-seats — and outside it, within the window.
        if let Some((g0, g1, _)) = case.first_contact.and_then(|t| t.grade) {
            let f_ref = |t: f64| control::hybrid::profile_value(&case.task.reference[k], t);
            let (mut inside, mut outside) = (Vec::new(), Vec::new());
            for r in o
                .rows
                .iter()
                .filter(|r| r.state.t_s >= a && r.state.t_s <= b)
            {
                let Some(f) = r.truth_force else { continue };
                let e = f[k.min(2)] - f_ref(r.state.ref_time_s);
                let x = r.state.position[0];
                if x >= g0 && x <= g1 + 0.005 {
                    inside.push(e);
                } else {
                    outside.push(e);
                }
            }
            let rms =
                |v: &[f64]| (v.iter().map(|e| e * e).sum::<f64>() / v.len().max(1) as f64).sqrt();
            let max = |v: &[f64]| v.iter().fold(0.0f64, |a, e| a.max(e.abs()));
            m.insert(
                "transition_max_force_error_n".into(),
                json!((!inside.is_empty()).then(|| max(&inside))),
            );
            m.insert(
                "outside_transition_rms_force_error_n".into(),
                json!((!outside.is_empty()).then(|| rms(&outside))),
            );
            m.insert(
                "outside_transition_max_force_error_n".into(),
                json!((!outside.is_empty()).then(|| max(&outside))),
            );
            if let Some(Value::Object(src)) = m.get_mut("sources") {
                for key in [
                    "transition_max_force_error_n",
                    "outside_transition_rms_force_error_n",
                    "outside_transition_max_force_error_n",
                ] {
                    src.insert(
                        key.into(),
                        json!("truth: sim/truth at the tool, raw per law step; placed by control's measured TCP along the move"),
                    );
                }
            }
        }
    }
    let last = o.rows.last().map(|r| &r.state);
    m.insert(
        "stiffness_estimate_end_n_per_m".into(),
        json!(last.map(|s| s.stiffness_estimate_n_per_m[k.min(2)])),
    );
    m.insert(
        "gains_for_end_n_per_m".into(),
        json!(last.map(|s| s.gains_for_n_per_m[k.min(2)])),
    );
    if let Some(Value::Object(src)) = m.get_mut("sources") {
        for key in [
            "truth_peak_first_contact_n",
            "first_contact_rise_s",
            "first_contact_overshoot_pct",
        ] {
            src.insert(
                key.into(),
                json!("truth: sim/truth at the tool, raw per law step"),
            );
        }
        for key in ["stiffness_estimate_end_n_per_m", "gains_for_end_n_per_m"] {
            src.insert(key.into(), json!("control"));
        }
    }
}

/// From `at` until the filtered force stays within ±`band` of `target` to the end.
pub(crate) fn settling(t: &[f64], y: &[f64], at: f64, target: f64, band: f64) -> Option<f64> {
    let mut last_out = None;
    let mut any = false;
    for (ti, yi) in t.iter().zip(y) {
        if *ti < at {
            continue;
        }
        any = true;
        if (yi - target).abs() > band {
            last_out = Some(*ti);
        }
    }
    if !any {
        return None;
    }
    match last_out {
        None => Some(0.0),
        Some(tl) if t.last().is_some_and(|e| e - tl > 0.2) => Some(tl - at),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::msg::HybridState;

    fn row(t: f64, r: f64) -> Row {
        Row {
            state: HybridState {
                t_s: t,
                ref_time_s: r,
                ..Default::default()
            },
            truth_force: None,
            truth_position: None,
        }
    }

    /// A reference clock held back by speed adaptation: contact at 1 s, the clock at rate 1
    /// for 2 s, then at 0.25 for 4 s (1 s of reference), then 1 again. A window on the
    /// reference [2, 4] s spans row time 3 → 8 s: the slowed stretch is scored whole.
    #[test]
    fn windows_on_the_reference_follow_a_slowed_clock() {
        let mut rows = vec![row(0.0, 0.0), row(0.5, 0.0)];
        let mut t = 1.0;
        let mut r = 0.0;
        while t < 12.0 {
            rows.push(row(t, r));
            let rate = if (3.0..7.0).contains(&t) { 0.25 } else { 1.0 };
            t += 0.004;
            r += rate * 0.004;
        }
        let c = RefClock::new(&rows, 1.0);
        assert!((c.time_of(2.0) - 3.0).abs() < 0.01, "{}", c.time_of(2.0));
        assert!((c.time_of(3.0) - 7.0).abs() < 0.01, "{}", c.time_of(3.0));
        assert!((c.time_of(4.0) - 8.0).abs() < 0.01, "{}", c.time_of(4.0));
        assert!((c.ref_at(5.0) - 2.5).abs() < 0.01, "{}", c.ref_at(5.0));
        // Before contact and past the rows: rate 1.
        assert!((c.ref_at(0.5) - -0.5).abs() < 1e-9);
        assert!(
            (c.time_of(100.0) - (rows[rows.len() - 1].state.t_s + 100.0 - r + 0.004)).abs() < 0.01
        );
        // No rows: task time less the shift.
        let c = RefClock::new(&[], 1.0);
        assert_eq!(c.time_of(2.0), 3.0);
        assert_eq!(c.ref_at(3.0), 2.0);
    }
}
