//! Process plumbing every service binary shares: tracing, shutdown signal, config loading.

use std::path::PathBuf;

use crate::config::{CellSection, ConfigErrors, RawConfig, Validate};

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
}

impl ConfigArgs {
    /// Loads file → env → --set.
    pub fn load(&self) -> Result<RawConfig, ConfigErrors> {
        RawConfig::load(self.config.as_deref(), std::env::vars(), &self.set)
    }
}

/// Loads the `[cell]` table and one service table, failing with every problem listed.
pub fn load_service_config<T>(
    args: &ConfigArgs,
    table: &str,
) -> Result<(CellSection, T), ConfigErrors>
where
    T: serde::de::DeserializeOwned + Default + Validate,
{
    let raw = args.load()?;
    let mut errors = ConfigErrors::default();
    let cell: CellSection = raw.section("cell", &mut errors);
    let svc: T = raw.section(table, &mut errors);
    errors.into_result().map(|()| (cell, svc))
}
