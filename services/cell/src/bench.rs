//! `cell bench latency`: the command path's latency through the real service processes.
//!
//! Starts a private simulated cell at the requested robot cycle (`sim.egm.cycle_ms`,
//! `robot_io.cycle_ms`, the supervisor's command timeout at two cycles), keeps the whole chain
//! busy with a hybrid task (10 N on the table while x follows a slow sine: every cycle runs
//! FK, the hybrid law with the F/T estimate, the servo and the supervisor), then takes two
//! snapshots of every service's status `seconds` apart and reports the window between them:
//!
//! - **end to end** (robot-io): the controller's EgmRobot of cycle k received → the joint
//!   command for k back in robot-io; **missed cycles**: no command for k before k + 1; on
//!   either chain (`[control] chain`: `direct`, the default, 2 transfers; `kinematics`, 4;
//!   `cell --set 'control.chain="kinematics"' bench latency` measures the other);
//! - **hops**: each hot-path input's delay from its stamp (production by the publisher) to its
//!   arrival in the subscriber;
//! - **in-service**: kinematics (joint state in → tool pose out, Cartesian command in → joint
//!   command out), control (its input → reference out: on the direct chain joint state in →
//!   joint command out, FK and servo included);
//! - **force loop**: F/T sample received by the sensor service → the reference on the wire;
//! - **CPU**: each process's user + system time over the window (`/proc/<pid>/stat`), the
//!   router being the `cell up` process that embeds it.
//!
//! The status histograms are cumulative; the window is the difference of the two snapshots
//! ([`common::latency::Histogram::since`]). Timing figures are reported, not judged: the
//! command fails only on missed cycles (or when the workload did not run).

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::Context;
use common::{config::CellSection, latency::Histogram};
use serde_json::{json, Value};
use zenoh::Session;

use crate::{cli, harness::PrivateCell, leadexp};

/// What `cell bench latency` was asked.
#[derive(Debug, Clone)]
pub struct Request {
    pub rate_hz: f64,
    pub seconds: f64,
    pub json: bool,
    /// Skip the in-process baseline.
    pub no_baseline: bool,
    /// Run the private cell's processes (every thread, zenoh's included) under `SCHED_FIFO`
    /// at this priority, as `CPUSchedulingPolicy=fifo` in the systemd units does.
    pub fifo: Option<i32>,
    /// Record every cell topic into this MCAP file while measuring (`cell record`'s
    /// recorder in this process): what recording costs the command path.
    pub record: Option<std::path::PathBuf>,
    /// Record through the bench's client session, every message forwarded by the router (how
    /// recordings were made before they had a peer session of their own): the comparison.
    pub record_via_router: bool,
}

/// The hops: (label, service that receives, its input key suffix). On the direct chain
/// (`[control] chain = "direct"`) the command path is robot-io → control → robot-io; the
/// kinematics service still turns joint states into tool poses for the force service.
const HOPS: &[(&str, &str, &str)] = &[
    (
        "robot-io→control (joint_state)",
        "control",
        "robot/joint_state",
    ),
    (
        "robot-io→kinematics (joint_state)",
        "kinematics",
        "robot/joint_state",
    ),
    ("kinematics→control (tool_pose)", "control", "kin/tool_pose"),
    ("kinematics→force (tool_pose)", "force", "kin/tool_pose"),
    (
        "control→kinematics (cartesian_cmd)",
        "kinematics",
        "control/cartesian_cmd",
    ),
    ("→robot-io (joint_cmd)", "robot-io", "kin/joint_cmd"),
    ("sensor→force (wrench_raw)", "force", "sensor/wrench_raw"),
    ("force→control (wrench)", "control", "force/wrench"),
];

/// In-service times: (label, service, path in its status detail).
const STAGES: &[(&str, &str, &[&str])] = &[
    (
        "kinematics FK (joint_state → tool_pose)",
        "kinematics",
        &["latency", "fk_hist"],
    ),
    (
        "control step (its input → reference out)",
        "control",
        &["latency", "step_hist"],
    ),
    (
        "kinematics servo (cartesian_cmd → joint_cmd)",
        "kinematics",
        &["latency", "servo_hist"],
    ),
];

/// The robot cycle in whole milliseconds for `rate_hz`, or why not.
pub fn cycle_ms(rate_hz: f64) -> Result<u32, String> {
    let ms = 1000.0 / rate_hz;
    if !(rate_hz.is_finite() && rate_hz > 0.0) || ms < 1.0 || (ms - ms.round()).abs() > 1e-9 {
        return Err(format!(
            "--rate {rate_hz}: the simulator's robot cycle is a whole number of ms (1000, 500, 250, 125 … Hz)"
        ));
    }
    Ok(ms.round() as u32)
}

/// One snapshot: every service's status, and CPU ticks per process.
struct Snapshot {
    status: BTreeMap<String, Value>,
    cpu_ticks: BTreeMap<String, u64>,
    at: std::time::Instant,
}

fn hist_at(v: &Value) -> Option<Histogram> {
    let s: common::latency::Sparse = serde_json::from_value(v.clone()).ok()?;
    Histogram::from_sparse(&s).ok()
}

fn input_hist(status: &Value, key_suffix: &str) -> Option<Histogram> {
    status["inputs"]
        .as_array()?
        .iter()
        .find(|i| i["key"].as_str().is_some_and(|k| k.ends_with(key_suffix)))
        .and_then(|i| hist_at(&i["latency_hist"]))
}

fn detail_hist(status: &Value, path: &[&str]) -> Option<Histogram> {
    let mut v = &status["detail"];
    for p in path {
        v = &v[*p];
    }
    hist_at(v)
}

fn window(a: Option<Histogram>, b: Option<Histogram>) -> Option<Histogram> {
    match (a, b) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        (None, Some(b)) => Some(b),
        _ => None,
    }
}

fn summary_json(h: &Histogram) -> Value {
    let s = h.summary();
    json!({"p50": s.p50, "p90": s.p90, "p99": s.p99, "p999": s.p999, "max": s.max, "mean": s.mean, "count": s.count})
}

/// CPU ticks (user + system) of a process, from `/proc/<pid>/stat`.
fn proc_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ppid(4) … utime(14) stime(15) → indices 11, 12 here.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn proc_ppid_comm(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let f: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    Some((f.get(1)?.parse().ok()?, comm))
}

/// The launcher (`cell up`, with the router) and its children, by name.
fn cell_processes(launcher: u32) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    out.insert("router (cell up)".to_string(), launcher);
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((ppid, comm)) = proc_ppid_comm(pid) {
                if ppid == launcher {
                    let name = comm.strip_prefix("cell-").unwrap_or(&comm).to_string();
                    out.insert(name, pid);
                }
            }
        }
    }
    out
}

async fn snapshot(s: &Session, cell: &CellSection, procs: &BTreeMap<String, u32>) -> Snapshot {
    let mut status = BTreeMap::new();
    if let Ok(all) = cli::status(s, cell, None).await {
        for v in all {
            if let Some(name) = v["service"].as_str() {
                status.insert(name.to_string(), v.clone());
            }
        }
    }
    let cpu_ticks = procs
        .iter()
        .filter_map(|(n, pid)| proc_ticks(*pid).map(|t| (n.clone(), t)))
        .collect();
    Snapshot {
        status,
        cpu_ticks,
        at: std::time::Instant::now(),
    }
}

/// The hybrid workload: 10 N on the table (scenario table-contact.toml), x on a ±10 mm sine.
fn workload_task(seconds: f64) -> anyhow::Result<common::msg::HybridTask> {
    let text = format!(
        "name = \"bench-press\"\nrobot = \"arm\"\nframe = \"base\"\nframe_rpy_deg = [180.0, 0.0, 0.0]\n\
         force_axes = [\"z\"]\nfrom_contact = true\nduration_s = {}\n\
         [reference]\nz = 10.0\nx = {{ sine = {{ amplitude = 0.01, freq_hz = 0.2 }} }}\n",
        seconds + 30.0
    );
    control::taskfile::parse(&text).map_err(|e| anyhow::anyhow!("bench task: {}", e.join("; ")))
}

async fn start_workload(s: &Session, cell: &CellSection, seconds: f64) -> anyhow::Result<()> {
    leadexp::place(s, cell, [350.0, 0.0, 320.0], 150.0).await?;
    leadexp::scenario(s, cell, json!({ "load": "scenarios/table-contact.toml" })).await?;
    leadexp::place_and_tare(s, cell, [350.0, 0.0, 206.0], 100.0).await?;
    let mut task = workload_task(seconds)?;
    task.stamp = cli::stamp();
    crate::hybrid::wait_for_usable_wrench(s, cell, Duration::from_secs(2)).await;
    let key = common::topic::HYBRID_TASK.key(&cell.id);
    common::bus::put_message(s, common::topic::HYBRID_TASK, &key, &task)
        .await
        .context("publish the task")?;
    // In contact and pressing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let st = cli::status(s, cell, Some("control")).await?;
        let d = st.first().map(|v| v["detail"].clone()).unwrap_or_default();
        if d["mode"] == "Hybrid" && d["hybrid"]["phase"] == "Contact" {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the bench's hybrid task did not reach contact within 15 s (control: {d})"
        );
    }
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The report from two snapshots (pure but for its inputs).
fn report(
    a: &Snapshot,
    b: &Snapshot,
    rate_hz: f64,
    cycle_ms: u32,
    fifo: Option<i32>,
) -> anyhow::Result<Value> {
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let st = |snap: &Snapshot, svc: &str| snap.status.get(svc).cloned().unwrap_or(Value::Null);
    let rio = |snap: &Snapshot| st(snap, "robot-io")["detail"]["latency"].clone();
    let (ra, rb) = (rio(a), rio(b));
    let e2e = window(
        hist_at(&ra["end_to_end_hist"]),
        hist_at(&rb["end_to_end_hist"]),
    )
    .context("robot-io reported no end-to-end latency (is its driver EGM?)")?;
    let count = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let commanded = count(&rb, "commanded_cycles").saturating_sub(count(&ra, "commanded_cycles"));
    let missed = count(&rb, "missed_cycles").saturating_sub(count(&ra, "missed_cycles"));
    let missed_short = count(&rb, "missed_after_short_period")
        .saturating_sub(count(&ra, "missed_after_short_period"));
    // The controller's period as robot-io saw it: a short one (its p1, p10) is the emulated
    // controller's or the host's jitter, the cause of a miss the chain did not make.
    let period = window(hist_at(&ra["period_hist"]), hist_at(&rb["period_hist"]));
    let cycles_of = |snap: &Snapshot| {
        st(snap, "robot-io")["detail"]["cycles"]
            .as_u64()
            .unwrap_or(0)
    };
    let cycles = cycles_of(b).saturating_sub(cycles_of(a));
    let mut hops = serde_json::Map::new();
    for (label, svc, key) in HOPS {
        if let Some(h) = window(input_hist(&st(a, svc), key), input_hist(&st(b, svc), key)) {
            if h.count() > 0 {
                hops.insert((*label).into(), summary_json(&h));
            }
        }
    }
    let mut stages = serde_json::Map::new();
    for (label, svc, path) in STAGES {
        if let Some(h) = window(
            detail_hist(&st(a, svc), path),
            detail_hist(&st(b, svc), path),
        ) {
            if h.count() > 0 {
                stages.insert((*label).into(), summary_json(&h));
            }
        }
    }
    let force_loop = window(
        detail_hist(&st(a, "control"), &["latency", "force_loop_hist"]),
        detail_hist(&st(b, "control"), &["latency", "force_loop_hist"]),
    );
    let tps = ticks_per_s();
    let mut cpu = serde_json::Map::new();
    let mut services_total = 0.0;
    for (name, tb) in &b.cpu_ticks {
        if let Some(ta) = a.cpu_ticks.get(name) {
            let pct = tb.saturating_sub(*ta) as f64 / tps / secs * 100.0;
            if name != "sim" {
                services_total += pct;
            }
            cpu.insert(name.clone(), json!(pct));
        }
    }
    let mode = st(b, "control")["detail"]["mode"].clone();
    let chain = st(b, "control")["detail"]["chain"].clone();
    Ok(json!({
        "rate_hz": rate_hz,
        "cycle_ms": cycle_ms,
        "chain": chain,
        "fifo_priority": fifo,
        "seconds": secs,
        "cycles": cycles,
        "commanded_cycles": commanded,
        "missed_cycles": missed,
        "missed_after_short_period": missed_short,
        "workload": format!("hybrid task, 10 N on the table with x on a ±10 mm sine (control mode at the end: {mode})"),
        "end_to_end_us": summary_json(&e2e),
        "controller_period_us": period.as_ref().map(|h| {
            let mut v = summary_json(h);
            v["p1"] = json!(h.quantile(0.01) as f64 * 1e-3);
            v["p10"] = json!(h.quantile(0.1) as f64 * 1e-3);
            v
        }),
        "hops_us": hops,
        "in_service_us": stages,
        "force_loop_delay_us": force_loop.as_ref().map(summary_json),
        "cpu_pct": cpu,
        "cpu_pct_cell_without_sim": services_total,
    }))
}

fn fmt_row(label: &str, v: &Value) -> String {
    let f = |k: &str| v[k].as_f64().map_or("–".into(), |x| format!("{x:.0}"));
    format!(
        "  {label:<46} {:>7} {:>7} {:>7} {:>7} {:>8}",
        f("p50"),
        f("p90"),
        f("p99"),
        f("p999"),
        f("max")
    )
}

/// Prints the report as a table.
pub fn print_table(r: &Value) {
    println!(
        "latency at {} Hz ({} chain{}) over {:.1} s: {} robot cycles, {} commanded, {} missed",
        r["rate_hz"],
        r["chain"].as_str().unwrap_or("?"),
        r["fifo_priority"]
            .as_i64()
            .map_or(String::new(), |p| format!(", SCHED_FIFO {p}")),
        r["seconds"].as_f64().unwrap_or(0.0),
        r["cycles"],
        r["commanded_cycles"],
        r["missed_cycles"]
    );
    // The headline: a ratio measured in one run holds across hosts; microseconds do not.
    if let (Some(x), Some(b)) = (r["ratio_p50"].as_f64(), r["in_process_us"]["p50"].as_f64()) {
        println!(
            "  headline: multi-process / in-process end to end (p50) {x:.2}× \
             (this host's in-process p50 {b:.0} µs, measured alone after the cell stopped{})",
            r["fifo_priority"]
                .as_i64()
                .map_or(String::new(), |p| format!(
                    ", under the same SCHED_FIFO {p}"
                ))
        );
    }
    if !r["recording"].is_null() {
        let rec = &r["recording"];
        println!(
            "  recording beside it: {} messages on {} topics in {:.1} s ({} dropped) to {}",
            rec["messages"],
            rec["topics"],
            rec["seconds"].as_f64().unwrap_or(0.0),
            rec["dropped"],
            rec["path"].as_str().unwrap_or("?")
        );
    }
    if r["missed_cycles"].as_u64().unwrap_or(0) > 0 {
        println!(
            "  of the missed cycles, {} came after a controller period under 3/4 of nominal (the \
             controller's message for that cycle was late)",
            r["missed_after_short_period"]
        );
    }
    println!(
        "  {:<46} {:>7} {:>7} {:>7} {:>7} {:>8}",
        "µs", "p50", "p90", "p99", "p99.9", "max"
    );
    println!(
        "{}",
        fmt_row("end to end (EgmRobot k → joint_cmd k)", &r["end_to_end_us"])
    );
    let p = &r["controller_period_us"];
    if !p.is_null() {
        println!(
            "{}   (p1 {:.0}, p10 {:.0})",
            fmt_row("controller period seen by robot-io", p),
            p["p1"].as_f64().unwrap_or(0.0),
            p["p10"].as_f64().unwrap_or(0.0)
        );
    }
    for (k, v) in r["hops_us"].as_object().into_iter().flatten() {
        println!("{}", fmt_row(&format!("hop {k}"), v));
    }
    for (k, v) in r["in_service_us"].as_object().into_iter().flatten() {
        println!("{}", fmt_row(k, v));
    }
    if !r["force_loop_delay_us"].is_null() {
        println!(
            "{}",
            fmt_row(
                "force loop (F/T sample → reference)",
                &r["force_loop_delay_us"]
            )
        );
    }
    if let Some(b) = r.get("in_process_us").filter(|v| !v.is_null()) {
        println!("{}", fmt_row("in-process baseline, end to end", b));
    }
    let cpu: Vec<String> = r["cpu_pct"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k} {:.1} %", v.as_f64().unwrap_or(0.0)))
        .collect();
    println!(
        "  CPU (% of one core): {}; the cell without sim {:.1} %",
        cpu.join(", "),
        r["cpu_pct_cell_without_sim"].as_f64().unwrap_or(0.0)
    );
}

/// `cell bench latency`. `Ok(false)` when cycles were missed.
pub async fn command(
    bus: &common::bus::BusArgs,
    cell: &common::config::CellSection,
    config: Option<&Path>,
    sets: &[String],
    req: Request,
) -> anyhow::Result<bool> {
    let ms = cycle_ms(req.rate_hz).map_err(|e| anyhow::anyhow!(e))?;
    anyhow::ensure!(
        req.seconds.is_finite() && req.seconds >= 1.0,
        "--seconds {}: at least 1",
        req.seconds
    );
    crate::leadexp::set_config(config, sets);
    let mut all: Vec<String> = sets.to_vec();
    all.extend([
        format!("sim.egm.cycle_ms={ms}"),
        format!("robot_io.cycle_ms={ms}"),
        format!("robot_io.command_timeout_ms={}", 2 * ms),
    ]);
    let log = std::env::temp_dir().join(format!("cell-bench-{}.log", std::process::id()));
    if !req.json {
        eprintln!(
            "starting a private simulated cell at {} Hz (log: {})",
            req.rate_hz,
            log.display()
        );
    }
    let mut p = PrivateCell::start(config, &all, &log, req.fifo, cell)?;
    // A refusal, unlike the private cell's own attempt, refuses the benchmark.
    if let (Some(prio), Err(e)) = (req.fifo, &p.fifo) {
        let e = e.clone();
        p.stop();
        anyhow::bail!("--fifo {prio}: {e}");
    }
    let launcher = p.pid();
    let s = match p.ready(bus, Duration::from_secs(90), !req.json).await {
        Ok(s) => s,
        Err(e) => {
            p.stop();
            return Err(e);
        }
    };
    let cell = p.cell.clone();
    let run = async {
        if !req.json {
            eprintln!("workload: a hybrid task pressing 10 N on the table");
        }
        let recording = match &req.record {
            Some(path) if req.record_via_router => {
                Some(crate::record::Recording::start(&s, &cell, path, &[]).await?)
            }
            Some(path) => {
                Some(crate::record::Recording::start_direct(bus, &cell, path, &[]).await?)
            }
            None => None,
        };
        start_workload(&s, &cell, req.seconds).await?;
        let procs = cell_processes(launcher);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let a = snapshot(&s, &cell, &procs).await;
        let steps = req.seconds.ceil() as u64;
        for i in 0..steps {
            tokio::time::sleep(Duration::from_secs_f64(req.seconds / steps as f64)).await;
            if !req.json {
                eprint!("\r  measuring {}/{} s", i + 1, steps);
            }
        }
        if !req.json {
            eprintln!();
        }
        let b = snapshot(&s, &cell, &procs).await;
        let mut r = report(&a, &b, req.rate_hz, ms, req.fifo)?;
        if let Some(rec) = recording {
            let sum = rec.finish().await?;
            r["recording"] = json!({
                "path": sum.path,
                "messages": sum.messages,
                "topics": sum.topics.len(),
                "dropped": sum.dropped,
                "bytes": sum.bytes,
                "seconds": sum.seconds,
            });
        }
        let mode = b.status.get("control").map(|v| v["detail"]["mode"].clone());
        anyhow::ensure!(
            mode.as_ref().is_some_and(|m| m == "Hybrid"),
            "the workload ended before the window did (control mode {mode:?})"
        );
        let _ = crate::cli::set_mode(&s, &cell, common::msg::Mode::Hold).await;
        anyhow::Ok(r)
    }
    .await;
    let _ = s.close().await;
    p.stop();
    let mut r = run?;
    // The baseline runs alone, after the private cell has stopped: measured beside the cell
    // (still up in Hold under FIFO 50) it was starved — two runs on one host read its p50 as
    // 113 and 704 µs. The ratio of the two, measured minutes apart on one host, is the
    // bench's headline figure: absolute microseconds differ up to 3x from day to day.
    if !req.no_baseline {
        if !req.json {
            eprintln!(
                "in-process baseline (the cell stopped): the same cores on in-memory channels"
            );
        }
        let base = crate::inproc::run(req.rate_hz, req.seconds.min(30.0), req.fifo)?;
        let p50 = r["end_to_end_us"]["p50"].as_f64().unwrap_or(f64::NAN);
        r["in_process_us"] = summary_json(&base.end_to_end);
        r["in_process_missed_cycles"] = json!(base.missed);
        r["ratio_p50"] = json!(p50 / base.end_to_end.summary().p50);
        r["ratio_p99"] = json!(
            r["end_to_end_us"]["p99"].as_f64().unwrap_or(f64::NAN) / base.end_to_end.summary().p99
        );
    }
    if req.json {
        println!("{r}");
    } else {
        print_table(&r);
    }
    Ok(r["missed_cycles"] == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_whole_milliseconds() {
        assert_eq!(cycle_ms(1000.0), Ok(1));
        assert_eq!(cycle_ms(250.0), Ok(4));
        assert!(cycle_ms(2000.0).is_err());
        assert!(cycle_ms(300.0).is_err());
        assert!(cycle_ms(f64::NAN).is_err());
    }

    #[test]
    fn proc_stat_of_this_process_parses() {
        let me = std::process::id();
        assert!(proc_ticks(me).is_some());
        let (ppid, comm) = proc_ppid_comm(me).expect("stat");
        assert!(ppid > 0 && !comm.is_empty());
    }

    #[test]
    fn the_workload_task_parses() {
        let t = workload_task(30.0).expect("task");
        assert!(t.duration_s > 30.0);
    }
}
