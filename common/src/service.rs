//! Process plumbing every service binary shares: tracing, shutdown signal, config loading.

use std::path::PathBuf;

use crate::config::{CellSection, ConfigErrors, RawConfig, Validate};

/// Exit code for an invalid configuration.
/// The cell's services, in the launcher's start order (`cell up`; robot-io is always stopped
/// last): the names of their processes (`cell-NAME`), of their config tables and of their
/// liveliness tokens.
pub const SERVICES: &[&str] = &[
    "robot-io",
    "kinematics",
    "control",
    "force",
    "sensor",
    "sim",
];

pub const EXIT_CONFIG: i32 = 2;

/// Logging to stderr, filtered by `RUST_LOG` (default `info`, zenoh at `warn`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,zenoh=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Logging to stderr with `default` as the filter when `RUST_LOG` is not set (the operator
/// CLI keeps zenoh's own messages at error level unless asked).
pub fn init_tracing_with(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = i.recv() => tracing::info!("SIGINT: shutting down"),
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Config arguments shared by every binary.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Cell configuration file (TOML). Default: built-in simulated cell defaults.
    #[arg(short = 'c', long = "config", value_name = "FILE", env = "CELL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Override a config value: `--set robot_io.cycle_ms=4` (repeatable; wins over file and env).
    #[arg(long = "set", value_name = "TABLE.KEY=VALUE")]
    pub set: Vec<String>,
    /// Validate the configuration, print the result and exit (0 valid, 2 invalid).
    #[arg(long = "check-config")]
    pub check_config: bool,
}

impl ConfigArgs {
    /// Loads file → env → --set.
    pub fn load(&self) -> Result<RawConfig, ConfigErrors> {
        RawConfig::load(self.config.as_deref(), std::env::vars(), &self.set)
    }
}

/// A loaded config being read table by table; [`Loader::finish`] fails listing every problem.
pub struct Loader {
    pub raw: RawConfig,
    pub errors: ConfigErrors,
}

impl Loader {
    /// Loads file → env → --set, and checks that every top-level table is known.
    pub fn new(args: &ConfigArgs) -> Result<Self, ConfigErrors> {
        let raw = args.load()?;
        let mut errors = ConfigErrors::default();
        raw.check_sections(crate::config::KNOWN_SECTIONS, &mut errors);
        Ok(Self { raw, errors })
    }
    /// Reads one table (defaults when absent); problems accumulate.
    pub fn section<T>(&mut self, name: &str) -> T
    where
        T: serde::de::DeserializeOwned + Default + Validate,
    {
        self.raw.section(name, &mut self.errors)
    }
    /// The `[cell]` table.
    pub fn cell(&mut self) -> CellSection {
        self.section("cell")
    }
    pub fn finish(self) -> Result<(), ConfigErrors> {
        self.errors.into_result()
    }
}

/// The standard `main` of a service: config (every problem listed, exit 2), tracing, a
/// multi-thread tokio runtime, the bus session, then `run(node, config, shutdown)`.
pub fn run_service<C, F, Fut>(
    service: &'static str,
    bus: crate::bus::BusArgs,
    cfg: ConfigArgs,
    load: impl FnOnce(&mut Loader) -> C,
    run: F,
) -> std::process::ExitCode
where
    C: Send + 'static,
    F: FnOnce(crate::bus::Node, C, Shutdown) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    run_service_rt(service, bus, cfg, |l| (load(l), RtConfig::default()), run)
}

/// [`run_service`] with real-time placement: when `RtConfig` asks for it, `run` executes on a
/// dedicated thread (pinned to `rt.cpu`, `SCHED_FIFO` at `rt.fifo_priority`, memory locked)
/// with its own single-thread runtime. The zenoh session is opened first, from the main
/// runtime, so zenoh's own threads do not inherit the real-time core or policy.
pub fn run_service_rt<C, F, Fut>(
    service: &'static str,
    bus: crate::bus::BusArgs,
    cfg: ConfigArgs,
    load: impl FnOnce(&mut Loader) -> (C, RtConfig),
    run: F,
) -> std::process::ExitCode
where
    C: Send + 'static,
    F: FnOnce(crate::bus::Node, C, Shutdown) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use std::process::ExitCode;
    init_tracing();
    let (cell, (svc, rt_cfg)) = match Loader::new(&cfg).and_then(|mut l| {
        let cell = l.cell();
        let svc = load(&mut l);
        l.finish().map(|()| (cell, svc))
    }) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{service}: {e}");
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    };
    if service == "sim"
        && cell
            .security
            .as_ref()
            .is_some_and(|s| s.profile == crate::security::ProfileKind::Real)
    {
        eprintln!(
            "{service}: cell.security.profile = \"real\": a real cell has no simulator (its identity and RPCs are refused)"
        );
        return ExitCode::from(EXIT_CONFIG as u8);
    }
    if cfg.check_config {
        println!("{service}: configuration valid");
        return ExitCode::SUCCESS;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name(format!("{service}-rt"))
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{service}: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let node = match rt.block_on(crate::bus::Node::open(&bus, &cell, service)) {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(service, "{e:#}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(service, cell = %cell.id, router = %cell.router, "joined the bus");
    let result = if rt_cfg.is_requested() {
        let handle = std::thread::Builder::new()
            .name(format!("{service}-tick"))
            .spawn(move || -> anyhow::Result<()> {
                for problem in apply_rt(&rt_cfg) {
                    if rt_cfg.required {
                        anyhow::bail!("real-time setup failed: {problem}");
                    }
                    tracing::warn!(
                        service,
                        "real-time setup: {problem} (continuing without it)"
                    );
                }
                let local = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                local.block_on(run(node, svc, Box::pin(shutdown_signal())))
            });
        match handle {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the {service} tick thread panicked"))),
            Err(e) => Err(anyhow::anyhow!("cannot spawn the tick thread: {e}")),
        }
    } else {
        rt.block_on(run(node, svc, Box::pin(shutdown_signal())))
    };
    match result {
        Ok(()) => {
            tracing::info!(service, "stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(service, "{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Real-time placement of a service's node thread (`[control.rt]`): the service's whole
/// event loop runs on that one thread (a single-threaded runtime), not only its per-cycle step.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RtConfig {
    /// Pin the tick thread to this CPU (e.g. an `isolcpus` core).
    pub cpu: Option<usize>,
    /// `SCHED_FIFO` priority 1..=99 (needs CAP_SYS_NICE or `LimitRTPRIO`).
    pub fifo_priority: Option<i32>,
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)` (needs `LimitMEMLOCK`).
    pub lock_memory: bool,
    /// Fail at start-up instead of warning when a setting cannot be applied.
    pub required: bool,
}

impl RtConfig {
    pub fn is_requested(&self) -> bool {
        self.cpu.is_some() || self.fifo_priority.is_some() || self.lock_memory
    }
}

impl Validate for RtConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        if let Some(p) = self.fifo_priority {
            crate::config::check_range(
                errors,
                format!("{prefix}.fifo_priority"),
                p as f64,
                1.0,
                99.0,
                "",
            );
        }
        if let Some(c) = self.cpu {
            crate::config::check_range(errors, format!("{prefix}.cpu"), c as f64, 0.0, 1023.0, "");
        }
    }
}

/// Applies the real-time settings to the calling thread; returns what could not be applied.
pub fn apply_rt(rt: &RtConfig) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(cpu) = rt.cpu {
        // SAFETY: cpu_set_t is plain data; sched_setaffinity(0) targets the calling thread.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if rc != 0 {
            problems.push(format!(
                "pin to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    if let Some(prio) = rt.fifo_priority {
        if let Err(e) = set_thread_fifo(Some(prio)) {
            problems.push(format!("SCHED_FIFO {prio}: {e}"));
        }
    }
    if rt.lock_memory {
        // SAFETY: plain syscall.
        let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
        if rc != 0 {
            problems.push(format!("mlockall: {}", std::io::Error::last_os_error()));
        }
    }
    problems
}

/// Sets the calling thread's scheduling: `SCHED_FIFO` at `prio` (1–99), or back to
/// `SCHED_OTHER` (None). The workspace's one `sched_setscheduler` call: a service's real-time
/// thread ([`apply_rt`]) and every harness that starts a cell under `SCHED_FIFO`
/// ([`spawn_under_fifo`]) go through it.
pub fn set_thread_fifo(prio: Option<i32>) -> std::io::Result<()> {
    set_fifo_of(0, prio)
}

/// Sets thread `tid`'s (0: the calling one) scheduling: `SCHED_FIFO` at `prio`, or
/// `SCHED_OTHER` (None). The one `sched_setscheduler` call; it allocates nothing, so a
/// `pre_exec` hook may call it (through [`set_thread_fifo`]) between fork and exec.
fn set_fifo_of(tid: libc::pid_t, prio: Option<i32>) -> std::io::Result<()> {
    let (policy, p) = match prio {
        Some(p) => (libc::SCHED_FIFO, p),
        None => (libc::SCHED_OTHER, 0),
    };
    let param = libc::sched_param { sched_priority: p };
    // SAFETY: plain syscall with a valid sched_param.
    if unsafe { libc::sched_setscheduler(tid, policy, &param) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's `SCHED_FIFO` priority; `None` under any other policy.
pub fn thread_fifo_priority() -> Option<i32> {
    fifo_priority_of(0)
}

/// The `SCHED_FIFO` priority of thread `tid` (0: the calling one); `None` under another policy
/// or when it cannot be read.
fn fifo_priority_of(tid: libc::pid_t) -> Option<i32> {
    // SAFETY: plain syscalls with a valid out-parameter.
    unsafe {
        if libc::sched_getscheduler(tid) != libc::SCHED_FIFO {
            return None;
        }
        let mut p = libc::sched_param { sched_priority: 0 };
        (libc::sched_getparam(tid, &mut p) == 0).then_some(p.sched_priority)
    }
}

/// Sets every thread this process has now to `SCHED_FIFO` at `prio` (threads started later
/// inherit their creator's policy). Returns how many were set.
pub fn set_process_threads_fifo(prio: i32) -> std::io::Result<usize> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")? {
        if let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        {
            tids.push(tid);
        }
    }
    set_threads_fifo(tids, prio)
}

/// Sets the threads `tids` (of this process) to `SCHED_FIFO` at `prio`; a thread that ended
/// meanwhile is skipped. Returns how many were set.
pub fn set_threads_fifo(
    tids: impl IntoIterator<Item = libc::pid_t>,
    prio: i32,
) -> std::io::Result<usize> {
    let mut n = 0;
    for tid in tids {
        match set_fifo_of(tid, Some(prio)) {
            Ok(()) => n += 1,
            // A thread that ended since the listing is not an error.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The `SCHED_FIFO` priority of process `pid`'s main thread; `None` under another policy
/// or when it cannot be read.
pub fn process_fifo_priority(pid: u32) -> Option<i32> {
    fifo_priority_of(libc::pid_t::try_from(pid).ok()?)
}

/// Whether this process may run a thread under `SCHED_FIFO` (tried at priority 1 on a
/// throwaway thread).
pub fn fifo_permitted() -> bool {
    std::thread::spawn(|| set_thread_fifo(Some(1)).is_ok())
        .join()
        .unwrap_or(false)
}

/// Spawns `cmd` from a helper thread that first asks for `SCHED_FIFO` at `prio` (None: normal
/// scheduling): the child inherits the spawning thread's policy, so the child and every
/// thread it starts run under it, and the caller's threads keep theirs. Returns the child and
/// whether the policy was granted (`Err(why)` when it was refused: the child then runs under
/// normal scheduling, and the caller decides whether that is acceptable).
pub fn spawn_under_fifo(
    cmd: &mut std::process::Command,
    prio: Option<i32>,
) -> std::io::Result<(std::process::Child, Result<(), String>)> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let granted = match prio {
                None => Ok(()),
                Some(p) => set_thread_fifo(Some(p)).map_err(|e| format!("SCHED_FIFO {p}: {e}")),
            };
            cmd.spawn().map(|c| (c, granted))
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the spawning thread panicked")))
    })
}

/// The shutdown future handed to a service.
pub type Shutdown = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_under_fifo_lowers_its_threads_and_reads_them_back() {
        // Where FIFO is not permitted (an unprivileged host) there is nothing to check.
        if !fifo_permitted() {
            return;
        }
        std::thread::spawn(|| {
            assert!(set_thread_fifo(Some(20)).is_ok());
            assert_eq!(thread_fifo_priority(), Some(20));
            // A thread started now inherits 20; lowering both threads reaches it too. (Only
            // these two: the process-wide form would touch the test harness's threads.)
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (back_tx, back_rx) = std::sync::mpsc::channel();
            let t = std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                let _ = tid_tx.send(unsafe { libc::gettid() });
                let inherited = thread_fifo_priority();
                let _ = rx.recv();
                let _ = back_tx.send((inherited, thread_fifo_priority()));
            });
            let other = tid_rx.recv().expect("the thread's id");
            // SAFETY: gettid has no preconditions.
            let me = unsafe { libc::gettid() };
            assert_eq!(set_threads_fifo([me, other], 10).ok(), Some(2));
            assert_eq!(thread_fifo_priority(), Some(10));
            let _ = tx.send(());
            assert_eq!(back_rx.recv().ok(), Some((Some(20), Some(10))));
            let _ = t.join();
            assert!(set_thread_fifo(None).is_ok());
        })
        .join()
        .expect("the test thread");
    }

    #[test]
    fn normal_scheduling_is_always_granted_and_priority_zero_is_not_fifo() {
        std::thread::spawn(|| {
            assert!(set_thread_fifo(None).is_ok());
            assert!(
                set_thread_fifo(Some(0)).is_err(),
                "FIFO needs a priority of 1–99"
            );
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn a_child_spawned_without_fifo_runs_and_is_reported_granted() {
        let mut cmd = std::process::Command::new("true");
        let (mut child, granted) = spawn_under_fifo(&mut cmd, None).expect("spawn");
        assert!(granted.is_ok());
        assert!(child.wait().expect("wait").success());
    }
}
