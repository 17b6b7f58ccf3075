//! Harness for whole-cell tests: starts `cell up` as a real process tree on a private loopback
//! port and cell id, and talks to it over zenoh like any client would.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub mod emulink;
pub mod harness;

pub use harness::{cell_lock, full_tier, report, require_or_skip, CellLock, Report};

use anyhow::Context;
use common::{
    bus::{self, BusArgs, SessionMode},
    config::CellSection,
};

/// Directory holding the built binaries (`target/<profile>/`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>
    let dir = exe
        .parent()
        .and_then(|p| p.parent())
        .expect("target dir")
        .to_path_buf();
    // `cell up` runs every service as `cell service NAME` of this one binary.
    assert!(
        dir.join("cell").exists(),
        "{} missing: build with `cargo build --release --workspace` (cargo test --workspace builds it)",
        dir.join("cell").display()
    );
    dir
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// A free TCP port on loopback, outside the kernel's ephemeral range
/// (`common::ports`: an outgoing connection cannot take it before the cell binds it).
pub fn free_port() -> u16 {
    common::ports::free_loopback_port().expect("free port")
}

/// A free UDP port on loopback, outside the kernel's ephemeral range.
pub fn free_udp_port() -> u16 {
    common::ports::free_loopback_port().expect("free udp port")
}

/// A running cell (`cell up`) with its own router port, cell id and device ports, started
/// through the one private-cell harness (`cell::harness`, as the lab's); this adds the tests'
/// policy: the cell lock, panics instead of errors, a refused `SCHED_FIFO` skips or fails
/// (`CELL_REQUIRE_FIFO`).
pub struct TestCell {
    pub child: Child,
    pub cell: CellSection,
    pub log: PathBuf,
    /// Every `--set` the cell was started with (for CLI calls against it).
    pub sets: Vec<String>,
    spec: cell::harness::Spec,
}

/// The whole-cell tests run the cell as it is deployed (`deploy/systemd`: every unit under
/// `CPUSchedulingPolicy=fifo`): `cell up` and every process and thread it starts under
/// `SCHED_FIFO` 50, so the force laws' deadlines do not depend on the test host's time-sharing
/// (a CI run under normal scheduling ran the 120 Hz plant law at 117 Hz and read Fig. 8's max
/// error at 2.75 N). `CELL_TEST_FIFO=0` runs them under normal scheduling; where the privilege
/// is missing they run so and say so.
pub fn test_fifo_priority() -> Option<i32> {
    cell::harness::fifo_from_env("CELL_TEST_FIFO")
}

/// A refused `SCHED_FIFO`: CELL_REQUIRE_FIFO=1 (CI, as root) fails, else the test runs on
/// and says so.
fn check_fifo(name: &str, fifo: Option<i32>, granted: &Result<(), String>) {
    if let (Some(prio), Err(_)) = (fifo, granted) {
        // CELL_REQUIRE_FIFO=1 (CI, as root): the figures must be the deployed form's.
        require_or_skip(
            "CELL_REQUIRE_FIFO",
            &format!(
                "test cell {name}: SCHED_FIFO {prio} not permitted here; the cell runs under \
                 normal scheduling and its timing-sensitive figures measure the host too"
            ),
        );
    }
}

impl TestCell {
    /// Starts the default simulated cell with extra `--set` overrides.
    pub fn start(name: &str, sets: &[&str]) -> TestCell {
        Self::start_with(&bin_dir().join("cell"), name, sets)
    }

    /// [`TestCell::start`] with a given `cell` binary (e.g. a copy alone in a directory):
    /// the repository's `deploy/config/sim.toml`, the private ports, then `sets` (they win).
    pub fn start_with(cell_bin: &std::path::Path, name: &str, sets: &[&str]) -> TestCell {
        Self::start_spec(cell_bin, name, "deploy/config/sim.toml", None, sets)
    }

    /// The simulated cell secured: deploy/config/sim-secure.toml with `security` (its `dir`
    /// absolute, the certificates made by the test), private ports, then `sets`.
    pub fn start_secure(
        name: &str,
        security: common::security::SecuritySection,
        sets: &[&str],
    ) -> TestCell {
        Self::start_spec(
            &bin_dir().join("cell"),
            name,
            "deploy/config/sim-secure.toml",
            Some(security),
            sets,
        )
    }

    fn start_spec(
        cell_bin: &std::path::Path,
        name: &str,
        config: &str,
        security: Option<common::security::SecuritySection>,
        sets: &[&str],
    ) -> TestCell {
        harness::assert_cell_lock_held(name);
        let prefix = format!("t{}", name.replace(['-', '_'], ""));
        let spec = cell::harness::Spec {
            exe: cell_bin.to_path_buf(),
            cwd: Some(repo_root()),
            config: Some(config.into()),
            base_sets: Vec::new(),
            overrides: sets.iter().map(|s| s.to_string()).collect(),
            plant: false,
            // The log's name carries the cell id, known only once the router's port is.
            log: std::env::temp_dir()
                .join(format!("cell-test-{prefix}-{}.log", std::process::id())),
            id_prefix: prefix,
            rust_log: Some(std::env::var("CELL_TEST_RUST_LOG").unwrap_or("info,zenoh=warn".into())),
            fifo: test_fifo_priority(),
            security,
        };
        let l = spec.launch().expect("start cell up");
        check_fifo(name, spec.fifo, &l.fifo);
        TestCell {
            child: l.child,
            cell: l.cell,
            log: spec.log.clone(),
            sets: l.sets,
            spec,
        }
    }

    /// Starts `cell up` again with the same settings (same router, ports and log), after the
    /// first one died; the old child is reaped.
    pub fn restart_up(&mut self) {
        let _ = self.child.try_wait();
        let (child, granted) = self.spec.relaunch(&self.sets).expect("restart cell up");
        check_fifo(&self.cell.id, self.spec.fifo, &granted);
        self.child = child;
    }

    /// The `cell up` process's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs a `cell` subcommand as its own long-lived process with this cell's settings
    /// (e.g. `["service", "sim"]`: a service outside the launcher), output appended to the
    /// cell's log.
    /// [`TestCell::spawn_cli`] as `identity` (a secured cell's certificate).
    pub fn spawn_cli_as(&self, identity: &str, args: &[&str]) -> Child {
        let mut child_cmd = self.spawn_cli_command(args);
        child_cmd.env("CELL_IDENTITY", identity);
        child_cmd.spawn().expect("spawn cell CLI")
    }

    pub fn spawn_cli(&self, args: &[&str]) -> Child {
        self.spawn_cli_command(args).spawn().expect("spawn cell")
    }

    /// The `cell` CLI against this cell, its output appended to the cell's log.
    fn spawn_cli_command(&self, args: &[&str]) -> Command {
        let logf = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = self.command();
        cmd.arg("--connect")
            .arg(&self.cell.router)
            .args(args)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("log"))
            .stderr(logf)
            .env("RUST_LOG", "info,zenoh=warn");
        cmd
    }

    /// The `cell` binary with this cell's config and settings, to add a subcommand to.
    pub fn command(&self) -> Command {
        self.spec.command(&self.sets)
    }

    /// Runs the `cell` CLI against this cell; returns (success, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.command().args(args).output().expect("run cell CLI");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// [`TestCell::cli`] for a step a test does not measure (a placement, a payload
    /// identification): run once more when it failed on a proven host stall
    /// ([`TestCell::proven_stall`]: every cell process unscheduled together), saying so. Any
    /// other failure is returned as it is, with the reason it was not a host stall.
    pub fn cli_repeat_after_stall(&self, args: &[&str]) -> (bool, String, String) {
        let since = common::clock::mono_ns();
        let mut r = self.cli(args);
        if r.0 || !cell::stall::looks_like_stall(&r.2) {
            return r;
        }
        match self.proven_stall(&r.2, since) {
            Ok(proof) => {
                report(
                    Report::Retry,
                    &format!(
                        "cell {}: held by a proven host stall ({proof}); once more",
                        args.join(" ")
                    ),
                );
                self.cli(args)
            }
            Err(why) => {
                r.2 += &format!("\n(not repeated: {why})");
                r
            }
        }
    }

    /// Proves that a stop with reason `why` of an attempt that began at `since_ns` (host
    /// monotonic) was a host stall (`cell stalls --prove-since-ns`, [`cell::stall::prove`]):
    /// Ok(the proof's JSON) or Err(why not).
    pub fn proven_stall(&self, why: &str, since_ns: u64) -> Result<String, String> {
        let since = since_ns.to_string();
        let (ok, out, err) = self.cli(&["stalls", "--prove-since-ns", &since, "--why", why]);
        if ok {
            Ok(out.trim().to_string())
        } else {
            Err(err.trim().to_string())
        }
    }

    /// Runs the `cell` CLI against this cell as `identity` (a secured cell's certificate).
    pub fn cli_as(&self, identity: &str, args: &[&str]) -> (bool, String, String) {
        let out = self
            .command()
            .env("CELL_IDENTITY", identity)
            .args(args)
            .output()
            .expect("run cell CLI");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// Opens a zenoh client session to the cell's router, retrying until it is up.
    pub async fn client(&self) -> zenoh::Session {
        self.client_as(common::security::DEFAULT_OPERATOR).await
    }

    /// [`TestCell::client`] as `identity` (on a secured cell: its certificate).
    pub async fn client_as(&self, identity: &str) -> zenoh::Session {
        let deadline = Instant::now() + Duration::from_secs(20);
        let args = BusArgs {
            identity: Some(identity.to_string()),
            ..BusArgs::default()
        };
        loop {
            let cfg =
                bus::zenoh_config(&args, &self.cell, SessionMode::Client).expect("zenoh config");
            match zenoh::open(cfg).await {
                Ok(s) => return s,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot reach test cell: {e}\n{}", self.log_text()),
            }
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for exit; returns (exit code, time taken).
    pub fn terminate(&mut self, timeout: Duration) -> (Option<i32>, Duration) {
        let t0 = Instant::now();
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        while t0.elapsed() < timeout {
            if let Ok(Some(st)) = self.child.try_wait() {
                return (st.code(), t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let st = self.child.wait().ok().and_then(|s| s.code());
        (st, t0.elapsed())
    }
}

impl Drop for TestCell {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate(Duration::from_secs(5));
        }
    }
}

/// Polls `f` until it returns `Some` or the timeout passes.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Live services by liveliness.
pub async fn live_services(s: &zenoh::Session, cell: &CellSection) -> Vec<String> {
    let Ok(replies) = s
        .liveliness()
        .get(format!("cell/{}/alive/*", cell.id))
        .timeout(Duration::from_secs(1))
        .await
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(r) = replies.recv_async().await {
        if let Ok(sample) = r.result() {
            if let Some(n) = sample.key_expr().as_str().rsplit('/').next() {
                out.push(n.to_string());
            }
        }
    }
    out.sort();
    out
}

/// JSON status of every service, keyed by service name.
pub async fn statuses(
    s: &zenoh::Session,
    cell: &CellSection,
) -> anyhow::Result<std::collections::BTreeMap<String, serde_json::Value>> {
    let replies = s
        .get(format!("cell/{}/*/status", cell.id))
        .timeout(Duration::from_secs(2))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = std::collections::BTreeMap::new();
    while let Ok(r) = replies.recv_async().await {
        let sample = r.result().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let v: serde_json::Value =
            serde_json::from_slice(&sample.payload().to_bytes()).context("status is JSON")?;
        let name = v["service"].as_str().unwrap_or("?").to_string();
        out.insert(name, v);
    }
    Ok(out)
}

/// The services of the default config.
pub const DEFAULT_SERVICES: &[&str] = &[
    "control",
    "force",
    "kinematics",
    "robot-io",
    "sensor",
    "sim",
];

/// Waits until every default service is live; returns the client session.
pub async fn up_all(c: &TestCell) -> zenoh::Session {
    let s = c.client().await;
    let ok = wait_for(Duration::from_secs(30), || async {
        (live_services(&s, &c.cell).await == DEFAULT_SERVICES).then_some(())
    })
    .await;
    assert!(ok.is_some(), "services did not come up\n{}", c.log_text());
    // …and until robot-io runs its robot session: before that control refuses motions
    // (robot-io reports the robot silent), and a fire-and-forget `cell move` would be lost.
    let running = wait_for(Duration::from_secs(30), || async {
        let st = statuses(&s, &c.cell).await.ok()?;
        let r = &st.get("robot-io")?["detail"];
        let cycles = r["cycles"].as_u64().or(r["cycle"]["cycles"].as_u64())?;
        (cycles > 10 && r["safety"]["reason"] != "RobotSilent").then_some(())
    })
    .await;
    assert!(
        running.is_some(),
        "robot-io did not start its robot session\n{}",
        c.log_text()
    );
    s
}

/// Merges a JSON object into the simulator's faults (`sim/rpc/fault`).
pub async fn sim_fault(s: &zenoh::Session, c: &TestCell, body: serde_json::Value) {
    let key = format!("cell/{}/sim/rpc/fault", c.cell.id);
    let replies = s
        .get(&key)
        .payload(body.to_string())
        .timeout(Duration::from_secs(2))
        .await
        .expect("fault query");
    let r = replies.recv_async().await.expect("fault reply");
    assert!(r.result().is_ok(), "fault {body} refused");
}

/// The operator presses Start on the emulated IRC5 (after motors off the shipped MOC entry
/// does not restart EGM on its own; after an EGM error or `EGMStop` the routine runs again).
pub async fn sim_program_start(s: &zenoh::Session, c: &TestCell) {
    static PRESSES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = PRESSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    sim_fault(s, c, serde_json::json!({ "program_start": n })).await;
}

/// The emulated IRC5's RAPID state ("running", "stopped (MotorsOff)", …), from sim's status.
pub async fn sim_rapid(s: &zenoh::Session, c: &TestCell) -> Option<String> {
    let st = statuses(s, &c.cell).await.ok()?;
    st.get("sim")?["detail"]["egm"]["rapid"]
        .as_str()
        .map(str::to_string)
}

/// Largest joint excursion (rad) from the first of a set of joint states.
pub fn joint_spread(js: &[common::msg::JointState]) -> f64 {
    let Some(first) = js.first() else {
        return 0.0;
    };
    js.iter()
        .flat_map(|a| (0..6).map(move |j| (a.q_rad[j] - first.q_rad[j]).abs()))
        .fold(0.0, f64::max)
}

/// This host's target triple (`rustc -vV`): what `cargo metadata` and `cargo tree` are
/// filtered to, offline (the whole graph would need every platform's packages in the cache,
/// and a fresh machine's build fetched only this host's).
pub fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let vv = Command::new(&rustc).arg("-vV").output().expect("rustc -vV");
    String::from_utf8_lossy(&vv.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names the host")
}

/// What the emulated IRC5 received ([`received_reference_peaks`]).
#[derive(Debug, Clone, Default)]
pub struct ReceivedPeaks {
    /// Peak joint speed of robot-io's references, as a fraction of the limit.
    pub speed: f64,
    /// Peak joint acceleration of robot-io's references, as a fraction of the limit.
    pub accel: f64,
    /// Where each peak was (and what the samples around it were).
    pub at: String,
    /// Truth samples received.
    pub samples: usize,
    /// Controller cycles whose truth sample never arrived (lost on the bus: `SimTruth` is
    /// best-effort, dropped under congestion).
    pub lost: usize,
    /// Cycles the controller held the previous reply for want of a new one in time (a late
    /// reply: the same seqno twice).
    pub held: usize,
    /// Replies never applied: another arrived after them within the same cycle and the
    /// controller took the newest (a seqno skipped with no truth sample lost).
    pub superseded: usize,
    /// Replies applied after a newer one (the seqno went back).
    pub reordered: usize,
}

impl ReceivedPeaks {
    /// Within the limits, on enough of the stream, delivered on time often enough: `Err` says
    /// what is not.
    pub fn check(&self) -> Result<(), String> {
        let mut why = Vec::new();
        if !(self.speed <= 1.0 + 1e-6 && self.accel <= 1.0 + 1e-6) {
            why.push(format!(
                "robot-io's references reached the IRC5 at {:.3} × the speed limit, {:.3} × the \
                 acceleration limit ({})",
                self.speed, self.accel, self.at
            ));
        }
        let cycles = self.samples + self.lost;
        // More than 5 % of the cycles unseen: too little of the stream to judge it.
        if self.lost * 20 > cycles {
            why.push(format!(
                "{} of {cycles} truth samples lost on the bus: the reference stream was not \
                 observed",
                self.lost
            ));
        }
        // More than 5 % of the cycles without a reply of their own: robot-io did not keep its
        // deadline (a real IRC5 would have held and jumped as often).
        let late = self.held + self.superseded + self.reordered;
        if late * 20 > cycles {
            why.push(format!(
                "{late} of {cycles} cycles without their own reply ({} held for a late one, {} \
                 replies superseded, {} reordered): robot-io missed its deadline",
                self.held, self.superseded, self.reordered
            ));
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }
}

impl std::fmt::Display for ReceivedPeaks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "robot-io's references reached the IRC5 at up to {:.3} × the speed limit, {:.3} × \
             the acceleration limit over {} cycles ({} truth samples lost on the bus; delivery: \
             {} cycles held for a late reply, {} replies superseded, {} reordered; the steps \
             across a missing reply checked for speed only) ({})",
            self.speed,
            self.accel,
            self.samples,
            self.lost,
            self.held,
            self.superseded,
            self.reordered,
            self.at
        )
    }
}

/// What the emulated IRC5 received: the peak joint speed and acceleration of robot-io's
/// references (`SimTruth::q_ref_rad`, one sample per controller cycle on the controller's clock
/// `t_s`) as fractions of the limits robot-io's supervisor enforces (`JointLimits::irb120()`'s
/// speeds, `step_limit::irb120_max_accel()`), and where each peak was. Not robot-io's own
/// figure (recomputed from its encoded replies, on its clock): what reached the robot.
///
/// Each sample names the reply its reference came from (`SimTruth::q_ref_seqno`, the
/// `EgmSensor` header seqno, +1 per reply). robot-io answers each controller cycle with one
/// reply that advances its plan by that cycle, so consecutive seqnos are one cycle apart and the
/// references are measured on that basis: the claim is about robot-io's references, and their
/// delivery is counted apart. A reply late for its cycle leaves the controller holding the
/// previous one (the same seqno again: `held`), and when two then arrive within one cycle the
/// newest wins (a seqno skipped: `superseded`); measured on the controller's cycles, that held
/// cycle and the catch-up read as a stop and a double step (CI of ed56d8e: 11.25 × the
/// acceleration limit from one late reply under a loaded host). A step across a reply never
/// seen (superseded, or its truth sample lost on the bus) is checked for its average speed only
/// (a lower bound of the peak), and no acceleration is measured into or out of it. A stand-still
/// is robot-io sending the same reference under new seqnos, so a start from rest is measured
/// over one cycle from a known zero speed.
///
/// Not for runs with the `egm_duplicate` fault: robot-io answers a duplicated datagram with its
/// last reference again under a new seqno, which reads as a stop.
#[allow(clippy::needless_range_loop)]
pub fn received_reference_peaks(truth: &[common::msg::SimTruth]) -> ReceivedPeaks {
    /// The previous applied reply: its time, seqno and joints.
    #[derive(Clone, Copy)]
    struct Applied {
        t: f64,
        seq: Option<u32>,
        q: [f64; 6],
    }
    let vmax = kinematics::JointLimits::irb120().max_speed;
    let amax = kinematics::step_limit::irb120_max_accel();
    let cycle = truth
        .windows(2)
        .map(|w| w[1].t_s - w[0].t_s)
        .filter(|d| *d > 1e-6)
        .fold(f64::INFINITY, f64::min);
    let mut out = ReceivedPeaks::default();
    let (mut at_speed, mut at_accel) = (String::new(), String::new());
    let mut last: Option<Applied> = None;
    // The velocity of the step into `last`, when it was one reply after the one before.
    let mut step: Option<[f64; 6]> = None;
    let mut prev_t: Option<f64> = None;
    // Truth samples lost since `last`.
    let mut lost_since = 0usize;
    for (i, t) in truth.iter().enumerate() {
        if prev_t.is_some_and(|p| t.t_s <= p) {
            continue;
        }
        out.samples += 1;
        if let Some(p) = prev_t {
            let missing = ((t.t_s - p) / cycle).round() as i64 - 1;
            if missing > 0 {
                out.lost += missing as usize;
                lost_since += missing as usize;
            }
        }
        prev_t = Some(t.t_s);
        let here = Applied {
            t: t.t_s,
            seq: t.q_ref_seqno,
            q: t.q_ref_rad,
        };
        let Some(a) = last else {
            last = Some(here);
            continue;
        };
        // How many replies on from the previous applied one (None: not comparable).
        let replies = match (a.seq, here.seq) {
            (Some(s0), Some(s1)) => {
                let d = s1.wrapping_sub(s0);
                if d == 0 {
                    out.held += 1;
                    continue;
                }
                if d > u32::MAX / 2 {
                    out.reordered += 1;
                    None
                } else {
                    Some(d as usize)
                }
            }
            // The controller held its own joints (no session, motors off): nothing of
            // robot-io's to measure into or out of.
            _ => None,
        };
        let Some(n) = replies else {
            last = Some(here);
            step = None;
            lost_since = 0;
            continue;
        };
        out.superseded += (n - 1).saturating_sub(std::mem::take(&mut lost_since));
        let dt = n as f64 * cycle;
        let mut v = [0.0; 6];
        for j in 0..6 {
            v[j] = (here.q[j] - a.q[j]) / dt;
            let rv = v[j].abs() / vmax[j];
            let (v0, ra) = match step {
                Some(pv) if n == 1 => (
                    pv[j],
                    (v[j] - pv[j]).abs()
                        / (amax[j] * kinematics::step_limit::dv_span(cycle, cycle)),
                ),
                _ => (f64::NAN, 0.0),
            };
            // Where each peak was (a new speed peak must not overwrite where the acceleration
            // peak was, or a failure points at the wrong cycle).
            if rv > out.speed || ra > out.accel {
                // The samples around it (sim time, reply seqno, this joint's reference), so a
                // failure shows whether a reply was held, skipped or mis-stamped.
                let around: Vec<String> = truth[i.saturating_sub(4)..(i + 3).min(truth.len())]
                    .iter()
                    .map(|s| {
                        let seq = s.q_ref_seqno.map_or("-".to_string(), |q| q.to_string());
                        format!("{:.3} #{seq}: {:.6}", s.t_s, s.q_ref_rad[j])
                    })
                    .collect();
                let how = if n > 1 {
                    format!(", across {} replies never seen", n - 1)
                } else {
                    String::new()
                };
                let here_at = format!(
                    "t {:.3} s joint {j}: {:.4} → {:.4} rad/s over {:.1} ms ({:.1} ms after the \
                     previous reply was applied{how}); around it (t s #seqno: q_ref rad) {}",
                    here.t,
                    v0,
                    v[j],
                    dt * 1e3,
                    (here.t - a.t) * 1e3,
                    around.join(", ")
                );
                if rv > out.speed {
                    at_speed = here_at.clone();
                }
                if ra > out.accel {
                    at_accel = here_at;
                }
            }
            out.speed = out.speed.max(rv);
            out.accel = out.accel.max(ra);
        }
        last = Some(here);
        step = (n == 1).then_some(v);
    }
    out.at = format!("speed peak at {at_speed}; acceleration peak at {at_accel}");
    out
}

/// `cell tare`, repeated (every 0.3 s, for at most `within`) only while it is refused for a named
/// cause that passes by itself ([`cell::steps::tare_transient`]: a cell just started, whose sensor is not
/// streaming yet), the retried tare in the CI report; any other refusal is returned at once.
pub async fn tare_named_causes(c: &TestCell, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    // The distinct refusals and how many there were.
    let (mut refused, mut n): (Vec<String>, usize) = (Vec::new(), 0);
    loop {
        let (ok, _, err) = c.cli(&["tare"]);
        if ok {
            if !refused.is_empty() {
                report(
                    Report::Retry,
                    &format!(
                        "cell tare succeeded after {n} refusal(s) for a named passing cause: {}",
                        refused.join("; ")
                    ),
                );
            }
            return Ok(());
        }
        let why = err
            .lines()
            .find_map(|l| l.strip_prefix("Error: "))
            .unwrap_or(err.trim())
            .to_string();
        match cell::steps::tare_transient(&why) {
            Some(cause) if Instant::now() < deadline => {
                n += 1;
                let line = format!("{cause} ({why})");
                if !refused.contains(&line) {
                    refused.push(line);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            _ if refused.is_empty() => return Err(why),
            _ => {
                return Err(format!(
                    "{why} (after {n} refusals: {})",
                    refused.join("; ")
                ))
            }
        }
    }
}

/// `cell certs init DIR --operator operator-b`: the CA and every identity's certificate.
pub fn make_certs(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cell-test-certs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(bin_dir().join("cell"))
        .args(["certs", "init"])
        .arg(&dir)
        .args(["--operator", "operator-b", "--days", "2"])
        .output()
        .expect("cell certs init");
    assert!(
        out.status.success(),
        "cell certs init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in [
        "router",
        "robot-io",
        "sim",
        "sensor",
        "control-host",
        "operator",
        "operator-b",
    ] {
        assert!(dir.join(format!("{id}.pem")).is_file(), "{id}.pem");
    }
    dir
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A joint-0 reference at `v` rad/s from t = 0, one sample per 4 ms cycle, `n` cycles,
    /// each from its own reply (seqno = cycle).
    fn ramp(v: f64, n: usize) -> Vec<common::msg::SimTruth> {
        (0..n)
            .map(|k| {
                let t = k as f64 * 0.004;
                let mut q = [0.0; 6];
                q[0] = 0.1 + v * t;
                common::msg::SimTruth {
                    t_s: t,
                    q_ref_rad: q,
                    q_ref_seqno: Some(k as u32),
                    ..Default::default()
                }
            })
            .collect()
    }

    #[test]
    fn samples_lost_on_the_bus_are_not_a_start_from_rest() {
        // 1 rad/s on joint 0: 0.57 × its speed limit, no acceleration.
        let mut truth = ramp(1.0, 200);
        let whole = received_reference_peaks(&truth);
        assert!(whole.accel < 1e-6 && whole.lost == 0, "{whole}");
        // Five cycles lost on the bus: the next change spans 6 cycles. Read as a stand-still
        // it was a start from rest at 6 rad/s (≈ 86 × the acceleration limit).
        truth.drain(100..105);
        let p = received_reference_peaks(&truth);
        assert_eq!(p.lost, 5, "{p}");
        assert!(p.accel < 1e-6, "{p}");
        assert!((p.speed - whole.speed).abs() < 1e-9, "{p}");
        assert!(p.check().is_ok(), "{p}");
        // Most of the stream lost: not judged within the limits.
        let sparse: Vec<_> = ramp(1.0, 200)
            .into_iter()
            .enumerate()
            .filter(|(k, _)| k % 3 != 0)
            .map(|(_, s)| s)
            .collect();
        assert!(received_reference_peaks(&sparse).check().is_err());
    }

    #[test]
    fn a_seen_stand_still_then_a_jump_is_a_start_from_rest() {
        // Held for 10 cycles (every sample seen), then 1 rad/s again: a start from rest at
        // 1 rad/s in one cycle (1 / (17.45 · 0.004) ≈ 14 × the limit).
        let mut truth = ramp(1.0, 50);
        let held = truth[30].q_ref_rad;
        for s in &mut truth[31..41] {
            s.q_ref_rad = held;
        }
        for s in &mut truth[41..] {
            s.q_ref_rad[0] -= 11.0 * 0.004 * 1.0 - 0.004;
        }
        let p = received_reference_peaks(&truth);
        assert!(p.accel > 10.0, "{p}");
        assert!(p.check().is_err());
    }

    #[test]
    fn a_late_reply_is_delivery_and_robot_ios_own_stop_and_jump_is_not() {
        // The CI run of ed56d8e: one reply late for its cycle, so the controller held the
        // previous one for a cycle, then the late one, then the newest of two (one superseded).
        // Measured on the controller's cycles that read as 11 × the acceleration limit.
        let mut late = ramp(1.0, 60);
        let (q29, q30) = (late[29], late[30]);
        late[30] = common::msg::SimTruth {
            t_s: q30.t_s,
            ..q29
        };
        late[31] = common::msg::SimTruth {
            t_s: late[31].t_s,
            ..q30
        };
        let p = received_reference_peaks(&late);
        assert_eq!((p.held, p.superseded, p.lost), (1, 1, 0), "{p}");
        assert!(p.accel < 1e-6, "{p}");
        assert!(p.check().is_ok(), "{p}");
        // The same references as robot-io's own (consecutive seqnos): a stop and a double
        // step in its plan, which the check exists to catch.
        let mut own = late.clone();
        for (k, s) in own.iter_mut().enumerate() {
            s.q_ref_seqno = Some(k as u32);
        }
        let p = received_reference_peaks(&own);
        assert!(p.accel > 10.0, "{p}");
        assert!(p.check().is_err());
        // Late in more than 5 % of the cycles: robot-io missed its deadline.
        let mut often = ramp(1.0, 100);
        for s in often.iter_mut().skip(1).step_by(10) {
            s.q_ref_seqno = s.q_ref_seqno.map(|q| q - 1);
            s.q_ref_rad[0] -= 0.004;
        }
        let p = received_reference_peaks(&often);
        assert_eq!(p.held, 10, "{p}");
        assert!(p.accel < 1e-6 && p.speed < 1.0, "{p}");
        assert!(p.check().is_err_and(|e| e.contains("deadline")), "{p}");
    }
}
