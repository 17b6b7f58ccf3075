//! `cell up`: embedded zenoh router + every service as its own supervised process.
//!
//! - every service runs as `cell service NAME`, a new process of the launcher's own executable
//!   (`/proc/self/exe`, so a rebuild while the cell runs changes nothing): there is nothing else
//!   to build and no separate binary that could be stale. `[launcher] bin_dir` instead starts
//!   installed `cell-NAME` binaries from that directory, and says so when one is older than
//!   the launcher;
//! - children get their own process group (a terminal's Ctrl-C reaches only the launcher, which
//!   stops them in a safe order) and `PR_SET_PDEATHSIG = SIGTERM` (a killed launcher leaves no
//!   orphans);
//! - a child that exits unexpectedly is restarted with exponential back-off (reset after it
//!   has run for 10 s);
//! - on SIGINT/SIGTERM: every service but robot-io is stopped first (SIGTERM, then SIGKILL after
//!   `stop_timeout_ms`), then robot-io, which holds the robot as its terminal state.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use common::config::{check_range, CellSection, ConfigErrors, Validate};
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::watch,
};
use zenoh::Wait;

/// Services the launcher knows, in start order ([`common::service::SERVICES`]). robot-io is
/// always stopped last.
pub use common::service::SERVICES;

/// `[launcher]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LauncherConfig {
    /// Services to run, each as its own process `cell-<name>`.
    pub services: Vec<String>,
    /// First restart delay after a crash (ms); doubles up to `restart_backoff_max_ms`.
    pub restart_backoff_ms: u64,
    pub restart_backoff_max_ms: u64,
    /// Time a service gets to exit after SIGTERM before SIGKILL (ms).
    pub stop_timeout_ms: u64,
    /// Start installed `cell-NAME` binaries from this directory instead of `cell service NAME`
    /// (the launcher's own executable, the default).
    pub bin_dir: Option<String>,
}

impl Default for LauncherConfig {
    fn default() -> Self {
        Self {
            services: [
                "sim",
                "robot-io",
                "kinematics",
                "control",
                "force",
                "sensor",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            restart_backoff_ms: 250,
            restart_backoff_max_ms: 8000,
            stop_timeout_ms: 1000,
            bin_dir: None,
        }
    }
}

impl Validate for LauncherConfig {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        for (i, s) in self.services.iter().enumerate() {
            if !SERVICES.contains(&s.as_str()) {
                errors.push(
                    format!("{prefix}.services[{i}]"),
                    format!("unknown service {s:?}; known: {}", SERVICES.join(", ")),
                );
            }
        }
        check_range(
            errors,
            format!("{prefix}.restart_backoff_ms"),
            self.restart_backoff_ms as f64,
            10.0,
            60_000.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.restart_backoff_max_ms"),
            self.restart_backoff_max_ms as f64,
            self.restart_backoff_ms as f64,
            600_000.0,
            "ms",
        );
        check_range(
            errors,
            format!("{prefix}.stop_timeout_ms"),
            self.stop_timeout_ms as f64,
            50.0,
            10_000.0,
            "ms",
        );
    }
}

/// What to start for one service.
#[derive(Debug, Clone)]
struct Spec {
    name: String,
    exe: PathBuf,
    args: Vec<String>,
    /// `SCHED_FIFO` priority the service starts under (the launcher's own, before it lowered
    /// its threads: [`ROUTER_FIFO_BELOW`]); `None`: inherited.
    fifo: Option<i32>,
    backoff: Duration,
    backoff_max: Duration,
    stop_timeout: Duration,
}

/// Under `SCHED_FIFO` (a cell started `--fifo P`, as deployed) the launcher's own threads —
/// the embedded router's among them — run this many priorities below the services it starts:
/// the router is not on the command path (the services are peers and talk directly), but it
/// forwards everything a client subscribes to (a recorder: every topic), and at the services'
/// priority that work took the command path's CPU (docs/performance.md, issue 45).
pub const ROUTER_FIFO_BELOW: i32 = 10;

/// Opens the embedded router of the cell.
pub async fn open_router(cell: &CellSection) -> anyhow::Result<zenoh::Session> {
    let mut cfg = match &cell.zenoh_config {
        Some(f) => {
            zenoh::Config::from_file(f).map_err(|e| anyhow::anyhow!("zenoh config {f}: {e}"))?
        }
        None => zenoh::Config::default(),
    };
    let set = |cfg: &mut zenoh::Config, k: &str, v: String| {
        cfg.insert_json5(k, &v)
            .map_err(|e| anyhow::anyhow!("router config {k}: {e}"))
    };
    set(&mut cfg, "mode", "\"router\"".into())?;
    set(
        &mut cfg,
        "listen/endpoints",
        serde_json::to_string(&[&cell.router])?,
    )?;
    set(&mut cfg, "scouting/multicast/enabled", "false".into())?;
    set(&mut cfg, "adminspace/enabled", "true".into())?;
    for (k, v) in common::bus::secure_settings(cell, common::security::ROUTER)? {
        set(&mut cfg, &k, v)?;
    }
    zenoh::open(cfg)
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the cell router on {}: {e}", cell.router))
}

/// A service the launcher can run (`cell service NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Service {
    #[value(name = "robot-io")]
    RobotIo,
    Kinematics,
    Control,
    Force,
    Sensor,
    Sim,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::RobotIo => "robot-io",
            Service::Kinematics => "kinematics",
            Service::Control => "control",
            Service::Force => "force",
            Service::Sensor => "sensor",
            Service::Sim => "sim",
        }
    }
}

/// `cell service NAME`: this process becomes the service (same entry as `cell-NAME`). Its
/// thread name becomes `cell-NAME`, so `ps`, `top` and `pgrep cell-control` tell the services
/// apart as with separate binaries.
pub fn service_main(
    service: Service,
    cfg: common::service::ConfigArgs,
    bus: common::bus::BusArgs,
) -> std::process::ExitCode {
    if let Ok(name) = std::ffi::CString::new(format!("cell-{}", service.name())) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes (longer ones
        // are truncated by the kernel); `name` outlives the call.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0);
        }
    }
    match service {
        Service::RobotIo => robot_io::node::service_main(cfg, bus),
        Service::Kinematics => kinematics::node::service_main(cfg, bus),
        Service::Control => control::node::service_main(cfg, bus),
        Service::Force => force::node::service_main(cfg, bus),
        Service::Sensor => sensor::node::service_main(cfg, bus),
        Service::Sim => sim::node::service_main(cfg, bus),
    }
}

/// Installed service binaries in `dir` that are older than `launcher_mtime`: each as
/// `cell-NAME (N s older than the launcher)`. Missing ones are the caller's error.
pub fn older_binaries(
    dir: &Path,
    services: &[String],
    launcher_mtime: std::time::SystemTime,
) -> Vec<String> {
    let mut out = Vec::new();
    for s in services {
        let exe = dir.join(format!("cell-{s}"));
        let Ok(m) = std::fs::metadata(&exe).and_then(|m| m.modified()) else {
            continue;
        };
        if let Ok(d) = launcher_mtime.duration_since(m) {
            if d > Duration::from_secs(1) {
                out.push(format!(
                    "{} ({:.0} s older than the launcher)",
                    exe.display(),
                    d.as_secs_f64()
                ));
            }
        }
    }
    out
}

/// How each service is started: `cell service NAME` from the launcher's own image, or the
/// installed `cell-NAME` binaries of `[launcher] bin_dir`.
fn service_command(cfg: &LauncherConfig, name: &str, common: &[String]) -> (PathBuf, Vec<String>) {
    match &cfg.bin_dir {
        Some(d) => (Path::new(d).join(format!("cell-{name}")), common.to_vec()),
        None => {
            let mut args = common.to_vec();
            args.push("service".into());
            args.push(name.into());
            (PathBuf::from("/proc/self/exe"), args)
        }
    }
}

/// Runs the cell until `shutdown` resolves. Returns after every child has exited.
pub async fn up(
    cell: CellSection,
    cfg: LauncherConfig,
    config_file: Option<PathBuf>,
    sets: Vec<String>,
    shutdown: common::service::Shutdown,
) -> anyhow::Result<()> {
    if let Some(d) = &cfg.bin_dir {
        let dir = Path::new(d);
        let missing: Vec<String> = cfg
            .services
            .iter()
            .map(|s| dir.join(format!("cell-{s}")))
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "[launcher] bin_dir: service binaries not found: {} (install every binary of one \
                 build, or remove bin_dir to run them as `cell service NAME`)",
                missing.join(", ")
            );
        }
        let launcher_mtime = std::env::current_exe()
            .and_then(std::fs::metadata)
            .and_then(|m| m.modified());
        if let Ok(t) = launcher_mtime {
            for old in older_binaries(dir, &cfg.services, t) {
                tracing::warn!(
                    "{old}: possibly a stale build; install every binary of one build together"
                );
            }
        }
    }
    // Under SCHED_FIFO: the services keep the launcher's priority, the launcher and its
    // router go below them (before the router's threads start, so they inherit it).
    let services_fifo = common::service::thread_fifo_priority();
    if let Some(p) = services_fifo {
        let own = (p - ROUTER_FIFO_BELOW).max(1);
        match common::service::set_process_threads_fifo(own) {
            Ok(_) => {
                tracing::info!("SCHED_FIFO: services at {p}, the launcher and its router at {own}")
            }
            Err(e) => tracing::warn!(
                "SCHED_FIFO: could not lower the launcher and its router to {own} ({e}): \
                 they stay at the services' {p}"
            ),
        }
    }
    let router = open_router(&cell).await?;
    tracing::info!(router = %cell.router, zid = %router.zid(), "cell router up");
    if cell.security.is_some() {
        tracing::info!("{}", cell.security_line());
    } else {
        tracing::warn!("{}", cell.security_line());
    }

    let mut common_args = Vec::new();
    if let Some(f) = &config_file {
        common_args.push("--config".to_string());
        common_args.push(f.display().to_string());
    }
    for s in &sets {
        common_args.push("--set".to_string());
        common_args.push(s.clone());
    }
    common_args.push("--connect".to_string());
    common_args.push(cell.router.clone());

    let mut handles = Vec::new();
    for name in &cfg.services {
        let (exe, args) = service_command(&cfg, name, &common_args);
        let spec = Spec {
            name: name.clone(),
            exe,
            args,
            fifo: services_fifo,
            backoff: Duration::from_millis(cfg.restart_backoff_ms),
            backoff_max: Duration::from_millis(cfg.restart_backoff_max_ms),
            stop_timeout: Duration::from_millis(cfg.stop_timeout_ms),
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(supervise(spec, stop_rx));
        handles.push((name.clone(), stop_tx, task));
    }

    shutdown.await;
    tracing::info!("stopping the cell: services first, robot-io last (holding)");
    let (last, first): (Vec<_>, Vec<_>) =
        handles.into_iter().partition(|(n, _, _)| n == "robot-io");
    for phase in [first, last] {
        for (_, stop, _) in &phase {
            let _ = stop.send(true);
        }
        for (name, _, task) in phase {
            if let Err(e) = task.await {
                tracing::warn!("supervisor of {name} failed: {e}");
            }
        }
    }
    if let Err(e) = router.close().wait() {
        tracing::debug!("router close: {e}");
    }
    tracing::info!("cell stopped");
    Ok(())
}

fn spawn(spec: &Spec) -> std::io::Result<Child> {
    let mut cmd = Command::new(&spec.exe);
    cmd.arg0(format!("cell-{}", spec.name))
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let fifo = spec.fifo;
    // SAFETY: only async-signal-safe calls (setpgid, prctl, and sched_setscheduler through
    // `set_thread_fifo`, which allocates nothing) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if let Some(p) = fifo {
                // Back up to the services' priority (the launcher runs below it); a refusal is
                // seen and reported after the spawn.
                let _ = common::service::set_thread_fifo(Some(p));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    if let (Some(p), Some(pid)) = (fifo, child.id()) {
        let got = common::service::process_fifo_priority(pid);
        if got != Some(p) {
            tracing::warn!(
                service = %spec.name,
                "started under SCHED_FIFO {got:?}, not the services' {p}"
            );
        }
    }
    for (stream, is_err) in [
        (
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            false,
        ),
        (
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            true,
        ),
    ] {
        if let Some(s) = stream {
            let name = spec.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(s).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if is_err {
                        eprintln!("[{name:>10}] {line}");
                    } else {
                        println!("[{name:>10}] {line}");
                    }
                }
            });
        }
    }
    Ok(child)
}

async fn terminate(name: &str, child: &mut Child, timeout: Duration) {
    if let Some(pid) = child.id() {
        // SAFETY: signalling our own child by pid.
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        }
    }
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(st)) => tracing::info!("{name} stopped ({st})"),
        Ok(Err(e)) => tracing::warn!("{name}: wait failed: {e}"),
        Err(_) => {
            tracing::warn!("{name} did not stop within {timeout:?}: SIGKILL");
            let _ = child.kill().await;
        }
    }
}

async fn supervise(spec: Spec, mut stop: watch::Receiver<bool>) {
    let mut backoff = spec.backoff;
    let mut restarts = 0u32;
    loop {
        if *stop.borrow() {
            return;
        }
        let started = Instant::now();
        let mut child = match spawn(&spec) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("cannot start {}: {e}", spec.exe.display());
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(spec.backoff_max);
                continue;
            }
        };
        tracing::info!(
            "started {} (pid {}){}",
            spec.name,
            child.id().unwrap_or(0),
            if restarts > 0 {
                format!(", restart #{restarts}")
            } else {
                String::new()
            }
        );
        tokio::select! {
            status = child.wait() => {
                let why = match status {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                };
                if *stop.borrow() {
                    return;
                }
                if started.elapsed() > Duration::from_secs(10) {
                    backoff = spec.backoff;
                }
                tracing::error!("{} exited unexpectedly ({why}); restarting in {backoff:?}", spec.name);
                restarts += 1;
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => return,
                }
                backoff = (backoff * 2).min(spec.backoff_max);
            }
            _ = stop.changed() => {
                terminate(&spec.name, &mut child, spec.stop_timeout).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_binary_older_than_the_launcher_is_named() {
        let dir = std::env::temp_dir().join(format!("launcher-bins-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        for s in ["control", "force"] {
            std::fs::write(dir.join(format!("cell-{s}")), b"").expect("bin");
        }
        let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
        let f = std::fs::File::options()
            .write(true)
            .open(dir.join("cell-control"))
            .expect("open");
        f.set_modified(old).expect("mtime");
        let services = vec![
            "control".to_string(),
            "force".to_string(),
            "sim".to_string(),
        ];
        let launcher = std::time::SystemTime::now();
        let found = older_binaries(&dir, &services, launcher);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("cell-control"), "{found:?}");
        // Same build (not older): nothing named.
        assert!(
            older_binaries(&dir, &["force".into()], launcher - Duration::from_secs(60)).is_empty()
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn services_run_as_cell_service_of_the_launchers_own_image() {
        let common = vec!["--connect".to_string(), "tcp/127.0.0.1:1".to_string()];
        let (exe, args) = service_command(&LauncherConfig::default(), "control", &common);
        assert_eq!(exe, PathBuf::from("/proc/self/exe"));
        assert_eq!(
            args[args.len() - 2..],
            ["service".to_string(), "control".to_string()]
        );
        let installed = LauncherConfig {
            bin_dir: Some("/opt/cell/bin".into()),
            ..LauncherConfig::default()
        };
        let (exe, args) = service_command(&installed, "control", &common);
        assert_eq!(exe, PathBuf::from("/opt/cell/bin/cell-control"));
        assert_eq!(args, common);
        for s in SERVICES {
            use clap::ValueEnum;
            let parsed = Service::from_str(s, false).expect("every launcher service parses");
            assert_eq!(parsed.name(), *s);
        }
    }
}
