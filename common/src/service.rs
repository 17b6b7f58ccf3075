//! Process plumbing every service binary shares: tracing, shutdown signal, config loading.

use std::path::PathBuf;

use crate::config::{CellSection, ConfigErrors, RawConfig, Validate};

/// Exit code for an invalid configuration.
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
    F: FnOnce(crate::bus::Node, C, Shutdown) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use std::process::ExitCode;
    init_tracing();
    let (cell, svc) = match Loader::new(&cfg).and_then(|mut l| {
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
    let result = rt.block_on(async move {
        let node = crate::bus::Node::open(&bus, &cell, service).await?;
        tracing::info!(service, cell = %cell.id, router = %cell.router, "joined the bus");
        run(node, svc, Box::pin(shutdown_signal())).await
    });
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

/// The shutdown future handed to a service.
pub type Shutdown = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
