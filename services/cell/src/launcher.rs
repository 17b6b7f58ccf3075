//! `cell up`: embedded zenoh router + every service as its own supervised process.
//!
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

use anyhow::Context;
use common::config::{check_range, CellSection, ConfigErrors, Validate};
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::watch,
};
use zenoh::Wait;

/// Services the launcher knows, in start order. robot-io is always stopped last.
pub const SERVICES: &[&str] = &[
    "robot-io",
    "kinematics",
    "control",
    "force",
    "sensor",
    "sim",
];

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
    /// Directory of the service binaries (default: the directory of `cell`).
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
    backoff: Duration,
    backoff_max: Duration,
    stop_timeout: Duration,
}

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
    zenoh::open(cfg)
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the cell router on {}: {e}", cell.router))
}

fn bin_dir(cfg: &LauncherConfig) -> anyhow::Result<PathBuf> {
    match &cfg.bin_dir {
        Some(d) => Ok(PathBuf::from(d)),
        None => {
            let exe = std::env::current_exe().context("locating the cell binary")?;
            exe.parent()
                .map(Path::to_path_buf)
                .context("the cell binary has no parent directory")
        }
    }
}

/// Variables `cargo run` sets for the binary it runs (besides `CARGO_PKG_*`), which a plain
/// `cargo build` in a shell does not have.
const CARGO_RUN_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
];

/// On a fresh checkout `cargo run --bin cell` builds only `cell`. Under `cargo run` (the
/// `CARGO` variable is set) and when a service binary is missing, build every binary of the
/// workspace (same profile and target directory) before starting. After a code change,
/// `cargo build --release --workspace` rebuilds them. `CELL_NO_AUTOBUILD=1` turns this off.
fn build_services_if_missing(dir: &Path, services: &[String]) -> anyhow::Result<()> {
    let exe = |s: &String| dir.join(format!("cell-{s}"));
    let missing = services.iter().any(|s| !exe(s).exists());
    let Ok(cargo) = std::env::var("CARGO") else {
        return Ok(());
    };
    if std::env::var_os("CELL_NO_AUTOBUILD").is_some() {
        return Ok(());
    }
    if !missing {
        return Ok(());
    }
    // The workspace this binary was built from (services/cell → ../..).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !root.join("Cargo.toml").exists() {
        return Ok(());
    }
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(&root)
        .args(["build", "--workspace", "--bins"]);
    // `cargo run` gives this process the package's build-time variables (CARGO_MANIFEST_DIR,
    // CARGO_PKG_*, …). Build scripts that declare `rerun-if-env-changed` on them (ring's does,
    // on CARGO_MANIFEST_DIR) would see them changed from the outer build, where they are unset,
    // and rerun: ring, rustls, zenoh and everything above were compiled a second time (found with
    // CARGO_LOG=cargo::core::compiler::fingerprint=info: `EnvVarChanged { name:
    // "CARGO_MANIFEST_DIR", old_value: None, … }`). The inner build gets the outer environment.
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str() {
            if CARGO_RUN_VARS.contains(&k) || k.starts_with("CARGO_PKG_") {
                cmd.env_remove(k);
            }
        }
    }
    if dir.ends_with("release") {
        cmd.arg("--release");
    }
    tracing::info!("building the service binaries ({})", root.display());
    let status = cmd
        .status()
        .context("running cargo build for the services")?;
    anyhow::ensure!(
        status.success(),
        "cargo build of the service binaries failed"
    );
    Ok(())
}

/// Runs the cell until `shutdown` resolves. Returns after every child has exited.
pub async fn up(
    cell: CellSection,
    cfg: LauncherConfig,
    config_file: Option<PathBuf>,
    sets: Vec<String>,
    shutdown: common::service::Shutdown,
) -> anyhow::Result<()> {
    let dir = bin_dir(&cfg)?;
    if cfg.bin_dir.is_none() {
        build_services_if_missing(&dir, &cfg.services)?;
    }
    let mut missing = Vec::new();
    for s in &cfg.services {
        let exe = dir.join(format!("cell-{s}"));
        if !exe.exists() {
            missing.push(exe.display().to_string());
        }
    }
    if !missing.is_empty() {
        anyhow::bail!(
            "service binaries not found: {} (build them with `cargo build --release --workspace`)",
            missing.join(", ")
        );
    }
    let router = open_router(&cell).await?;
    tracing::info!(router = %cell.router, zid = %router.zid(), "cell router up");

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
        let spec = Spec {
            name: name.clone(),
            exe: dir.join(format!("cell-{name}")),
            args: common_args.clone(),
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
    cmd.args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: only async-signal-safe calls (setpgid, prctl) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
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
