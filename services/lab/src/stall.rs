//! Proven host stalls: when may an experiment or a test repeat a step that a hold ended?
//!
//! A stop whose reason reads like a silence ([`looks_like_stall`]: a stale wrench estimate, a
//! silent robot, stale commands) may come from the whole host freezing — a loaded 2-core VM
//! does that — or from a real fault: a lost sensor, a frozen or crashed service, a controller
//! leaving EGM, a law too slow. The reason alone cannot tell them apart. So a step is repeated
//! only after the stall is **proven**: every cell process's scheduling watchdog
//! (`common::watchdog`, in each service's status) saw one common gap of at least
//! `common::watchdog::PROVEN_STALL_NS` inside the attempt. Anything else fails at once with its
//! reason and why it was not a host stall.
//!
//! Every repeat is reported: [`Retry`] (the step, the first attempt's reason, the proven stall,
//! where the first attempt's files were kept) goes into the metrics JSON under `retries` and is
//! printed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    config::CellSection,
    watchdog::{common_stall, Gap, ProvenStall},
};
use serde::Serialize;
use serde_json::{json, Value};
use zenoh::Session;

/// The services whose watchdogs must all have stalled (when they run): the whole cell.
pub const CELL_SERVICES: [&str; 6] = [
    "robot-io",
    "control",
    "force",
    "sensor",
    "kinematics",
    "sim",
];

/// A stop reason that a host stall can leave behind: an input older than its staleness bound,
/// a silent robot, stale commands. Necessary, never sufficient ([`prove`]). Pure.
pub fn looks_like_stall(why: &str) -> bool {
    ["Stale", "RobotSilent", "CommandStale"]
        .iter()
        .any(|k| why.contains(k))
}

/// The start of an attempt on the host's monotonic clock (the window a proof looks in).
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    pub from_ns: u64,
}

impl Attempt {
    pub fn start() -> Self {
        Attempt {
            from_ns: common::clock::mono_ns(),
        }
    }
}

/// One repeated step, as reported in the metrics (`retries`).
#[derive(Debug, Clone, Serialize)]
pub struct Retry {
    /// What was repeated (a case's label, a pull, "payload identification", …).
    pub step: String,
    /// The first attempt's stop reason.
    pub reason: String,
    /// The common interval every process spent unscheduled, ms, and when (host monotonic ns).
    pub stall_ms: f64,
    pub stall_from_ns: u64,
    /// Each process's own gap that contains it (service, ms).
    pub per_process_ms: Vec<(String, f64)>,
    /// Where the first attempt's files were kept, if it wrote any.
    pub first_run: Option<String>,
}

impl Retry {
    pub fn new(step: &str, reason: &str, stall: &ProvenStall) -> Self {
        let r = Retry {
            step: step.to_string(),
            reason: reason.to_string(),
            stall_ms: stall.common.len_ns() as f64 * 1e-6,
            stall_from_ns: stall.common.from_ns,
            per_process_ms: stall
                .per_process
                .iter()
                .map(|(n, g)| (n.clone(), g.len_ns() as f64 * 1e-6))
                .collect(),
            first_run: None,
        };
        r.append_to_ci_report();
        r
    }

    /// Under a harness that collects repeats (`CELL_TEST_REPORT` names its file: `.ci/run`,
    /// `.ci/full`), every repeat is also written there, so CI's closing report shows it
    /// whichever test or command ran it (a passing test's stderr is hidden).
    fn append_to_ci_report(&self) {
        let Some(path) = std::env::var_os("CELL_TEST_REPORT") else {
            return;
        };
        let what = format!(
            "{}: held by a proven host stall ({}: every process unscheduled together for {:.0} ms); once more",
            self.step, self.reason, self.stall_ms
        )
        .replace(['\t', '\n'], " ");
        // The command that repeated it (its subcommand words, without the settings).
        let cmd: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.contains('=') && !a.starts_with('-'))
            .take(4)
            .collect();
        let line = format!("retry\tcell {}\t{what}\n", cmd.join(" "));
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            use std::io::Write;
            let _ = f.write_all(line.as_bytes());
        }
    }

    /// One line for the console.
    pub fn describe(&self) -> String {
        format!(
            "{}: held by a proven host stall ({}: every process unscheduled together for {:.0} ms); once more{}",
            self.step,
            self.reason,
            self.stall_ms,
            self.first_run
                .as_ref()
                .map(|d| format!(", first attempt kept in {d}"))
                .unwrap_or_default()
        )
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The scheduling gaps of each cell service that answers its status (name, gaps), and the
/// services of [`CELL_SERVICES`] that did not answer.
pub async fn gaps(s: &Session, cell: &CellSection) -> (Vec<(String, Vec<Gap>)>, Vec<String>) {
    let all = client::cli::status(s, cell, None).await.unwrap_or_default();
    gaps_of(&all)
}

/// [`gaps`] from the statuses already fetched. Pure.
pub fn gaps_of(all: &[Value]) -> (Vec<(String, Vec<Gap>)>, Vec<String>) {
    let mut out = Vec::new();
    for v in all {
        let Some(name) = v["service"].as_str() else {
            continue;
        };
        let gs: Vec<Gap> = serde_json::from_value(v["sched"]["gaps"].clone()).unwrap_or_default();
        out.push((name.to_string(), gs));
    }
    let missing = CELL_SERVICES
        .iter()
        .filter(|n| !out.iter().any(|(m, _)| m == *n))
        .map(|n| n.to_string())
        .collect();
    (out, missing)
}

/// Proves that the stop `why` of an attempt that started at `attempt` was a host stall: its
/// reason reads like one, robot-io and control answer, and every answering service's watchdog
/// saw one common gap ≥ `PROVEN_STALL_NS` since the attempt began. Returns why not otherwise.
pub async fn prove(
    s: &Session,
    cell: &CellSection,
    why: &str,
    attempt: Attempt,
) -> Result<ProvenStall, String> {
    if !looks_like_stall(why) {
        return Err(format!("not a silence: {why}"));
    }
    // A frozen process answers late: give the statuses a moment after the stop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let to_ns = common::clock::mono_ns();
    let all = client::cli::status(s, cell, None).await.unwrap_or_default();
    let (procs, missing) = gaps_of(&all);
    for needed in ["robot-io", "control"] {
        if missing.iter().any(|m| m == needed) {
            return Err(format!(
                "not a proven host stall: {needed} did not answer its status (frozen or gone)"
            ));
        }
    }
    common_stall(&procs, attempt.from_ns, to_ns).map_err(|e| {
        match sim_loop_evidence(&all, attempt.from_ns, to_ns) {
            Some(sim) => format!("{e}; the emulated IRC5 (sim): {sim}"),
            None => e,
        }
    })
}

/// What the simulator's own loop record (`egm_loop` in its status: the gaps between its
/// `EgmRobot` sends and its slow sections, `common::loopwatch`) shows inside the window, with
/// its session counters; None when it shows nothing there or no sim answered. A silence the
/// watchdogs cannot explain is then named: the emulated IRC5 paused, and where. Pure.
pub fn sim_loop_evidence(all: &[Value], from_ns: u64, to_ns: u64) -> Option<String> {
    let sim = all.iter().find(|v| v["service"] == "sim")?;
    let detail = &sim["detail"];
    let rec: common::loopwatch::LoopStatus =
        serde_json::from_value(detail["egm_loop"].clone()).ok()?;
    let late = &detail["egm_delayed_sender"];
    let late_text = (late["late_over_gap"].as_u64().unwrap_or(0) > 0).then(|| {
        format!(
            "its delayed sender sent {} datagrams late past the gap bound (latest by {} ms)",
            late["late_over_gap"], late["late_max_ms"]
        )
    });
    let seen = match (rec.describe_window(from_ns, to_ns), late_text) {
        (None, None) => return None,
        (Some(a), None) | (None, Some(a)) => a,
        (Some(a), Some(b)) => format!("{a}; {b}"),
    };
    let egm = &detail["egm"];
    Some(format!(
        "{seen} (sessions {}, comm timeouts {})",
        egm["sessions"], egm["comm_timeouts"]
    ))
}

/// [`prove`], then the retry record for `step`, printed; or the reason the stop stands, printed.
pub async fn check(
    s: &Session,
    cell: &CellSection,
    step: &str,
    why: &str,
    attempt: Attempt,
) -> Result<Retry, String> {
    match prove(s, cell, why, attempt).await {
        Ok(stall) => Ok(Retry::new(step, why, &stall)),
        Err(e) => {
            if looks_like_stall(why) {
                eprintln!("      {step}: stopped ({why}); {e}");
            }
            Err(e)
        }
    }
}

/// Keeps the files of a first attempt: moves `dir`'s files into `dir/first-run/` (the second
/// attempt writes into `dir` again). Returns the kept directory.
pub fn keep_first_run(dir: &Path) -> anyhow::Result<PathBuf> {
    let kept = dir.join("first-run");
    if kept.exists() {
        std::fs::remove_dir_all(&kept)?;
    }
    std::fs::create_dir_all(&kept)?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        if p.is_file() {
            std::fs::rename(&p, kept.join(e.file_name()))?;
        }
    }
    Ok(kept)
}

/// Appends `retry` to `metrics["retries"]`.
/// Setup steps (placements, [`crate::steps::place`]) repeated after a proven stall, kept until
/// the case or experiment that ran them reports them (`take_setup_retries`).
static SETUP_RETRIES: std::sync::Mutex<Vec<Retry>> = std::sync::Mutex::new(Vec::new());

/// Notes a setup step's repeat after a proven stall, for the running case to report.
pub fn note_setup_retry(retry: &Retry) {
    if let Ok(mut v) = SETUP_RETRIES.lock() {
        v.push(retry.clone());
    }
}

/// The setup repeats noted since the last call (and forgets them).
pub fn take_setup_retries() -> Vec<Retry> {
    SETUP_RETRIES
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default()
}

pub fn record(metrics: &mut serde_json::Map<String, Value>, retry: &Retry) {
    let entry = metrics
        .entry("retries".to_string())
        .or_insert_with(|| json!([]));
    if let Some(a) = entry.as_array_mut() {
        a.push(retry.to_json());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_of_the_emulated_irc5_is_named_in_the_window_only() {
        let ms = 1_000_000u64;
        let mut w = common::loopwatch::LoopWatch::default();
        for t in [100u64, 104, 108, 170, 174] {
            w.beat(t * ms);
        }
        w.section("truth publish", 109 * ms, 168 * ms);
        let all = vec![
            json!({"service": "robot-io", "detail": {}}),
            json!({"service": "sim", "detail": {
                "egm_loop": w.status(),
                "egm": {"sessions": 1, "comm_timeouts": 0},
            }}),
        ];
        let e = sim_loop_evidence(&all, 0, 200 * ms).expect("named");
        assert!(e.contains("output paused 62 ms"), "{e}");
        assert!(e.contains("truth publish 59 ms"), "{e}");
        assert!(e.contains("sessions 1, comm timeouts 0"), "{e}");
        assert_eq!(sim_loop_evidence(&all, 180 * ms, 300 * ms), None);
        assert_eq!(sim_loop_evidence(&all[..1], 0, 200 * ms), None);
    }

    #[test]
    fn only_silences_read_like_a_stall() {
        for why in [
            "hold: RobotSilent",
            "wrench estimate Stale (63 ms)",
            "CommandStale",
        ] {
            assert!(looks_like_stall(why), "{why}");
        }
        for why in [
            "force limit: |F| 51.0 N > 50 N",
            "deadman released",
            "EStop",
            "NotTared",
        ] {
            assert!(!looks_like_stall(why), "{why}");
        }
    }

    #[test]
    fn the_first_run_is_kept_beside_the_second() {
        let dir = std::env::temp_dir().join(format!("stall-keep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("trace.csv"), "a").expect("write");
        let kept = keep_first_run(&dir).expect("kept");
        assert_eq!(
            std::fs::read_to_string(kept.join("trace.csv")).expect("read"),
            "a"
        );
        assert!(!dir.join("trace.csv").exists());
        std::fs::remove_dir_all(&dir).expect("clean");
    }

    #[test]
    fn a_retry_is_recorded_in_the_metrics() {
        let stall = ProvenStall {
            common: Gap {
                from_ns: 1_000_000,
                to_ns: 41_000_000,
            },
            per_process: vec![(
                "sim".into(),
                Gap {
                    from_ns: 0,
                    to_ns: 50_000_000,
                },
            )],
        };
        let r = Retry::new("press", "RobotSilent", &stall);
        let mut m = serde_json::Map::new();
        record(&mut m, &r);
        record(&mut m, &r);
        assert_eq!(m["retries"].as_array().map(Vec::len), Some(2));
        assert_eq!(m["retries"][0]["stall_ms"], json!(40.0));
        assert!(r.describe().contains("40 ms"), "{}", r.describe());
    }
}
