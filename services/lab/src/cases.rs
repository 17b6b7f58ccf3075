//! The hybrid experiments' cases, as data (`services/lab/experiments.toml`, embedded): the file's
//! format is described at its top. Pure: this module reads the text and builds the cases
//! ([`Case`]: a task over a world, how it is scored and the targets it is held to); it knows
//! nothing of the bus. Every problem of the file is reported at once, so a case added wrong
//! fails `cell experiment` at start-up and the unit tests, not half-way through a run.

use std::borrow::Cow;

use common::msg::{HybridTask, TaskRobot};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::score::hybrid::{Anchor, Case, Score, TrueStiffness};
use crate::score::Target;

/// The shipped experiments.
pub const EXPERIMENTS_TOML: &str = include_str!("../experiments.toml");

/// The task files a case may name (tasks/, embedded so the binary runs from anywhere).
const TASK_FILES: &[(&str, &str)] = &[
    (
        "rc-fig7-force-step.toml",
        include_str!("../../../tasks/rc-fig7-force-step.toml"),
    ),
    (
        "rc-fig8-ramp-disturbance.toml",
        include_str!("../../../tasks/rc-fig8-ramp-disturbance.toml"),
    ),
    (
        "rc-fig9-sine-force-step.toml",
        include_str!("../../../tasks/rc-fig9-sine-force-step.toml"),
    ),
    (
        "rc-fig10-force-ramp.toml",
        include_str!("../../../tasks/rc-fig10-force-ramp.toml"),
    ),
    (
        "contour-cylinder.toml",
        include_str!("../../../tasks/contour-cylinder.toml"),
    ),
    (
        "press-table.toml",
        include_str!("../../../tasks/press-table.toml"),
    ),
    (
        "arm-press-step.toml",
        include_str!("../../../tasks/arm-press-step.toml"),
    ),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    targets: toml::Table,
    experiment: Vec<ExperimentFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    name: String,
    rate_hz: f64,
    paper: toml::Table,
    case: Vec<CaseFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    label: String,
    #[serde(default = "yes")]
    short: bool,
    task: String,
    #[serde(default)]
    task_set: toml::Table,
    scenario: String,
    #[serde(default)]
    world: toml::Table,
    place_mm: Option<[f64; 3]>,
    force_axis: usize,
    score: ScoreFile,
    targets: Vec<TargetItem>,
    #[serde(default)]
    may_abort: bool,
    true_stiffness: Option<StiffnessFile>,
    note: Option<String>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum ScoreFile {
    Step {
        before: f64,
        after: f64,
        at_s: f64,
    },
    Window {
        anchor: AnchorFile,
        from_s: f64,
        to_s: f64,
        ends_excluded_s: f64,
    },
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum AnchorFile {
    Reference,
    TruthTouch,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StiffnessFile {
    k0: f64,
    grade: Option<[f64; 3]>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum TargetItem {
    /// `"@name"`: the list `[targets.name]`.
    Group(String),
    One(TargetFile),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetFile {
    metric: String,
    op: String,
    value: toml::Value,
    gate: bool,
    source: String,
}

/// One experiment of the file.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub name: String,
    /// The plant's law rate unless `--rate` says otherwise (Hz).
    pub rate_hz: f64,
    /// The figure reproduced and what the paper reports.
    pub paper: Value,
}

/// The experiments the shipped file defines, in its order.
pub fn experiments() -> anyhow::Result<Vec<Experiment>> {
    Ok(parse_file(EXPERIMENTS_TOML)?
        .experiment
        .into_iter()
        .map(|e| Experiment {
            name: e.name,
            rate_hz: e.rate_hz,
            paper: toml_to_json(&toml::Value::Table(e.paper)),
        })
        .collect())
}

/// The shipped experiment `name`, if the file defines it.
pub fn experiment(name: &str) -> anyhow::Result<Option<Experiment>> {
    Ok(experiments()?.into_iter().find(|e| e.name == name))
}

/// The cases of the shipped experiment `name` with the plant's law at `rate_hz`; `short`: only
/// those of the CI short form.
pub(crate) fn cases(name: &str, rate_hz: f64, short: bool) -> anyhow::Result<Vec<Case>> {
    cases_from(EXPERIMENTS_TOML, name, rate_hz, short)
}

fn parse_file(text: &str) -> anyhow::Result<File> {
    let f: File = toml::from_str(text).map_err(|e| anyhow::anyhow!("experiments.toml: {e}"))?;
    let errors = check(&f);
    anyhow::ensure!(
        errors.is_empty(),
        "experiments.toml: {} problem(s):\n  {}",
        errors.len(),
        errors.join("\n  ")
    );
    Ok(f)
}

/// Every problem of the file (names, labels, task files, targets, score windows), with where.
fn check(f: &File) -> Vec<String> {
    let mut errors = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for e in &f.experiment {
        if !names.insert(e.name.as_str()) {
            errors.push(format!("experiment {:?} is defined twice", e.name));
        }
        if !(e.rate_hz.is_finite() && (10.0..=1000.0).contains(&e.rate_hz)) {
            errors.push(format!(
                "{}: rate_hz {} (use 10 … 1000 Hz)",
                e.name, e.rate_hz
            ));
        }
        if e.case.is_empty() {
            errors.push(format!("{}: no case", e.name));
        }
        let mut labels = std::collections::BTreeSet::new();
        for c in &e.case {
            let at = format!("{} / {:?}", e.name, c.label);
            if !labels.insert(c.label.as_str()) {
                errors.push(format!("{at}: the label is used twice"));
            }
            if let Err(e) = task(c, 60.0) {
                errors.push(format!("{at}: {e}"));
            }
            if c.force_axis > 5 {
                errors.push(format!("{at}: force_axis {} (0 … 5)", c.force_axis));
            }
            if let ScoreFile::Window { from_s, to_s, .. } = c.score {
                if !(from_s.is_finite() && to_s.is_finite() && to_s > from_s) {
                    errors.push(format!("{at}: score window {from_s} … {to_s} s"));
                }
            }
            match targets(&f.targets, &c.targets, 0) {
                Ok(ts) if ts.is_empty() => errors.push(format!("{at}: no target")),
                Ok(_) => {}
                Err(e) => errors.push(format!("{at}: {e}")),
            }
        }
    }
    errors
}

fn cases_from(text: &str, name: &str, rate_hz: f64, short: bool) -> anyhow::Result<Vec<Case>> {
    let f = parse_file(text)?;
    let Some(e) = f.experiment.iter().find(|e| e.name == name) else {
        anyhow::bail!("no experiment {name:?} in experiments.toml");
    };
    e.case
        .iter()
        .filter(|c| c.short || !short)
        .map(|c| {
            Ok(Case {
                label: label(c, rate_hz),
                scenario: scenario(c),
                place_mm: c.place_mm,
                task: task(c, rate_hz)?,
                force_axis: c.force_axis,
                score: match c.score {
                    ScoreFile::Step {
                        before,
                        after,
                        at_s,
                    } => Score::Step {
                        before,
                        after,
                        at_s,
                    },
                    ScoreFile::Window {
                        anchor,
                        from_s,
                        to_s,
                        ends_excluded_s,
                    } => Score::Window {
                        anchor: match anchor {
                            AnchorFile::Reference => Anchor::Reference,
                            AnchorFile::TruthTouch => Anchor::TruthTouch,
                        },
                        from_s,
                        to_s,
                        ends_excluded_s,
                    },
                },
                targets: targets(&f.targets, &c.targets, 0)?,
                note: c.note.clone(),
                may_abort: c.may_abort,
                first_contact: c.true_stiffness.as_ref().map(|s| TrueStiffness {
                    k0: s.k0,
                    grade: s.grade.map(|[a, b, k1]| (a, b, k1)),
                }),
            })
        })
        .collect()
}

fn label(c: &CaseFile, rate_hz: f64) -> String {
    c.label.replace("{rate}", &format!("{rate_hz}"))
}

/// The scenario request: load the file (a reset), then the case's settings.
fn scenario(c: &CaseFile) -> Value {
    let load = format!("scenarios/{}", c.scenario);
    if c.world.is_empty() {
        json!({ "load": load })
    } else {
        json!({ "load": load, "set": toml_to_json(&toml::Value::Table(c.world.clone())) })
    }
}

/// The case's task: its file with `task_set` merged over it, parsed and checked as `cell hybrid`
/// parses a task file; a plant task runs at `rate_hz` and is named by the case's label.
fn task(c: &CaseFile, rate_hz: f64) -> anyhow::Result<HybridTask> {
    let Some((_, text)) = TASK_FILES.iter().find(|(n, _)| *n == c.task) else {
        anyhow::bail!(
            "task {:?} is not one of {}",
            c.task,
            TASK_FILES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let mut table: toml::Table =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("task {}: {e}", c.task))?;
    merge(&mut table, &c.task_set);
    let merged = toml::to_string(&table).map_err(|e| anyhow::anyhow!("task {}: {e}", c.task))?;
    let mut t = control::taskfile::parse(&merged)
        .map_err(|e| anyhow::anyhow!("task {} with task_set: {}", c.task, e.join("; ")))?;
    if t.robot == TaskRobot::Plant {
        t.rate_hz = rate_hz;
        t.name = label(c, rate_hz).chars().take(60).collect();
    }
    Ok(t)
}

/// `over` onto `base`: tables merged key by key, anything else replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The targets of a case, groups expanded (a group may name groups, up to 4 deep).
fn targets(
    groups: &toml::Table,
    items: &[TargetItem],
    depth: usize,
) -> anyhow::Result<Vec<Target>> {
    anyhow::ensure!(depth < 4, "target groups nest more than 4 deep");
    let mut out = Vec::new();
    for item in items {
        match item {
            TargetItem::Group(name) => {
                let Some(key) = name.strip_prefix('@') else {
                    anyhow::bail!("target {name:?}: a group is named \"@name\"");
                };
                let Some(group) = groups.get(key) else {
                    anyhow::bail!("target group {key:?} is not in [targets]");
                };
                let list: Vec<TargetItem> = group
                    .clone()
                    .try_into()
                    .map_err(|e| anyhow::anyhow!("target group {key:?}: {e}"))?;
                out.extend(targets(groups, &list, depth + 1)?);
            }
            TargetItem::One(t) => {
                anyhow::ensure!(
                    ["<=", ">=", "=="].contains(&t.op.as_str()),
                    "target {}: op {:?} (use <=, >= or ==)",
                    t.metric,
                    t.op
                );
                let value = toml_to_json(&t.value);
                anyhow::ensure!(
                    value.is_number() || value.is_boolean(),
                    "target {}: value {} (a number or true/false)",
                    t.metric,
                    t.value
                );
                out.push(Target {
                    metric: Cow::Owned(t.metric.clone()),
                    op: Cow::Owned(t.op.clone()),
                    value,
                    gate: t.gate,
                    source: Cow::Owned(t.source.clone()),
                });
            }
        }
    }
    Ok(out)
}

/// TOML to JSON (numbers as written: a float stays a float, an integer an integer).
fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => json!(i),
        toml::Value::Float(x) => json!(x),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_is_valid_and_names_its_experiments_in_order() {
        let names: Vec<String> = experiments()
            .expect("experiments.toml")
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(
            names,
            [
                "force-step",
                "ramp-disturbance",
                "sine-force-step",
                "force-ramp",
                "contour",
                "unknown-surface"
            ]
        );
        for n in &names {
            assert!(crate::experiment::NAMES.contains(&n.as_str()), "{n}");
            for short in [false, true] {
                let cs = cases(n, 60.0, short).expect("cases");
                assert!(!cs.is_empty(), "{n} short={short}");
            }
        }
    }

    #[test]
    fn the_short_form_leaves_out_what_the_file_marks() {
        let full = cases("force-step", 60.0, false).expect("cases");
        let short = cases("force-step", 60.0, true).expect("cases");
        let labels = |cs: &[Case]| cs.iter().map(|c| c.label.clone()).collect::<Vec<_>>();
        assert_eq!(
            labels(&full),
            [
                "plant 1 N @ 60 Hz",
                "plant 5 N @ 60 Hz",
                "plant 10 N @ 60 Hz",
                "IRB 120 press 2 → 10 N"
            ]
        );
        assert_eq!(
            labels(&short),
            ["plant 10 N @ 60 Hz", "IRB 120 press 2 → 10 N"]
        );
    }

    #[test]
    fn a_case_sets_its_task_rate_label_world_and_target_groups() {
        let cs = cases("sine-force-step", 80.0, false).expect("cases");
        let c = &cs[1];
        assert_eq!(c.label, "plant 3 cm (scaled) @ 80 Hz");
        assert_eq!(c.task.rate_hz, 80.0);
        assert_eq!(c.task.name, c.label);
        assert_eq!(
            c.task.reference[1],
            common::msg::Profile::Sine {
                offset: 0.03,
                amplitude: -0.03,
                freq_hz: 0.375,
                phase_rad: std::f64::consts::FRAC_PI_2
            }
        );
        // The rest of the task file is kept.
        assert_eq!(
            c.task.duration_s,
            cases("sine-force-step", 60.0, false).expect("cases")[0]
                .task
                .duration_s
        );
        let arm = &cases("contour", 80.0, true).expect("cases")[0];
        assert_eq!(arm.task.rate_hz, 0.0, "arm tasks keep their file's rate");
        assert_eq!(arm.task.name, "contour-cylinder");
        let pad = cases("unknown-surface", 60.0, true).expect("cases");
        assert_eq!(
            pad[1].scenario["set"]["surfaces.0.grade"]["to_stiffness_n_per_m"],
            json!(1e6)
        );
        let step = &cases("force-step", 60.0, true).expect("cases")[0];
        let metrics: Vec<&str> = step.targets.iter().map(|t| t.metric.as_ref()).collect();
        assert_eq!(
            metrics,
            [
                "rise_time_s",
                "t90_s",
                "steady_state_error_n",
                "steady_state_error_n",
                "steady_state_mean_error_n",
                "limit_cycle_n",
                "contact_lost",
                "overshoot_pct",
                "max_position_error_m"
            ]
        );
    }

    #[test]
    fn a_wrong_file_lists_every_problem() {
        let text = r#"
[targets]
a = [ { metric = "m", op = "<", value = 1.0, gate = true, source = "s" } ]
[[experiment]]
name = "x"
rate_hz = 5.0
paper = {}
[[experiment.case]]
label = "one"
task = "no-such-task.toml"
scenario = "s.toml"
force_axis = 7
score = { window = { anchor = "reference", from_s = 2.0, to_s = 1.0, ends_excluded_s = 0.0 } }
targets = ["@a", "@missing"]
[[experiment.case]]
label = "one"
task = "rc-fig7-force-step.toml"
task_set = { force_axes = ["w"] }
scenario = "s.toml"
force_axis = 0
score = { step = { before = 0.0, after = 1.0, at_s = 0.5 } }
targets = []
"#;
        let e = cases_from(text, "x", 60.0, false)
            .expect_err("invalid")
            .to_string();
        for want in [
            "rate_hz 5",
            "no-such-task.toml",
            "force_axis 7",
            "score window 2 … 1 s",
            "op \"<\"",
            "used twice",
            "unknown axis \"w\"",
            "no target",
        ] {
            assert!(e.contains(want), "{want:?} missing from:\n{e}");
        }
    }
}
