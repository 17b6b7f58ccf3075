//! Scoring shared by every experiment (pure): targets (`metric op value`, gate or goal, with
//! where the number comes from), the checks of metrics against them, and how values print.
//! The hybrid experiments' metric definitions and verdict are in [`hybrid`], the lead-through
//! pulls' and playback's in [`lead`], the peg-in-hole's in [`peg`]; `docs/experiments.md`
//! quotes them. The signal measures they share (the paper's 12 Hz low-pass, step figures, error
//! statistics) are in [`signal`]; every metric of the cell is computed here.

use std::borrow::Cow;

use serde_json::{json, Value};

pub mod hybrid;
pub mod lead;
pub mod peg;
pub mod signal;

/// Writes `metrics.json` (pretty JSON) into `dir` (created).
pub fn write_metrics(dir: &std::path::Path, m: &Value) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("metrics.json");
    std::fs::write(&path, serde_json::to_string_pretty(m)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// A target: `metric op value` (`<=`, `>=`, `==`); `gate`: `cell experiment` (and the CI short
/// form) fails when it is not met. Shared by every experiment module.
#[derive(Debug, Clone)]
pub struct Target {
    pub metric: Cow<'static, str>,
    pub op: Cow<'static, str>,
    pub value: Value,
    pub gate: bool,
    pub source: Cow<'static, str>,
}

pub fn target(
    metric: &'static str,
    op: &'static str,
    value: Value,
    gate: bool,
    source: &'static str,
) -> Target {
    Target {
        metric: Cow::Borrowed(metric),
        op: Cow::Borrowed(op),
        value,
        gate,
        source: Cow::Borrowed(source),
    }
}

/// Checks `metrics` against `targets`: the checks (JSON, as `cell experiment`'s) and whether
/// every gate held.
pub fn checks(metrics: &serde_json::Map<String, Value>, targets: &[Target]) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut passed = true;
    for tg in targets {
        let v = metrics
            .get(tg.metric.as_ref())
            .cloned()
            .unwrap_or(Value::Null);
        let num = |x: &Value| x.as_f64().unwrap_or(f64::NAN);
        let pass = match tg.op.as_ref() {
            "<=" => num(&v) <= num(&tg.value),
            ">=" => num(&v) >= num(&tg.value),
            "==" => v == tg.value,
            _ => false,
        };
        if tg.gate && !pass {
            passed = false;
        }
        out.push(json!({
            "metric": tg.metric, "op": tg.op, "target": tg.value, "value": v,
            "pass": pass, "gate": tg.gate, "source": tg.source,
        }));
    }
    (out, passed)
}

pub fn fmt_value(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if x != 0.0 && x.abs() < 0.01 => format!("{x:.2e}"),
            Some(x) => format!("{x:.3}"),
            None => n.to_string(),
        },
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
