//! The one private-cell harness: `cell up` on its own router port, cell id and device ports,
//! started under `SCHED_FIFO` as deployed. The lab's experiments and `cell demo`
//! ([`PrivateCell`]), commissioning, the latency bench and the whole-cell tests
//! (`tests::TestCell`, a thin wrapper with the tests' policy) all start their cells through
//! [`Spec::launch`]; the one real-time call is `common::service::set_thread_fifo`.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::Context;
use common::config::CellSection;
use zenoh::Session;

use client::cli;

/// The real-time priority of a harness's cell from the environment variable `var`
/// (`CELL_PRIVATE_FIFO` for the lab's, `CELL_TEST_FIFO` for the tests'): `0` none, `N` in
/// 1–99, default 50.
pub fn fifo_from_env(var: &str) -> Option<i32> {
    match std::env::var(var).ok().as_deref() {
        Some("0") => None,
        Some(v) => v.parse().ok().filter(|p| (1..=99).contains(p)).or(Some(50)),
        None => Some(50),
    }
}

/// The real-time priority of the private cell that `cell demo` and `cell experiment` start:
/// `CELL_PRIVATE_FIFO` (`0`: none; `N` in 1–99; default 50).
pub fn private_fifo_priority() -> Option<i32> {
    fifo_from_env("CELL_PRIVATE_FIFO")
}

/// The `--set`s that put every device link of a cell on its own loopback port (`ports`:
/// `[egm, controller, sri, rdt, http]`): robot-io ↔ the emulated IRC5, the SRI box, the ATI
/// box's RDT and HTTP. Pure.
pub fn device_port_sets(ports: [u16; 5]) -> Vec<String> {
    let [egm, ctl, sri, rdt, http] = ports;
    vec![
        format!("robot_io.egm.bind=\"127.0.0.1:{egm}\""),
        format!("robot_io.egm.controller=\"127.0.0.1:{ctl}\""),
        format!("sim.egm.robot_io=\"127.0.0.1:{egm}\""),
        format!("sim.egm.bind=\"127.0.0.1:{ctl}\""),
        format!("sim.sri.bind=\"127.0.0.1:{sri}\""),
        format!("sensor.sri.address=\"127.0.0.1:{sri}\""),
        format!("sim.ati.rdt_bind=\"127.0.0.1:{rdt}\""),
        format!("sim.ati.http_bind=\"127.0.0.1:{http}\""),
        format!("sensor.ati.address=\"127.0.0.1:{rdt}\""),
        format!("sensor.ati.http_port={http}"),
    ]
}

/// How to start a private cell.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The `cell` binary.
    pub exe: PathBuf,
    /// Its working directory (None: this process's).
    pub cwd: Option<PathBuf>,
    /// `--config` (None: the built-in defaults or the operator's environment).
    pub config: Option<PathBuf>,
    /// `--set`s before the private ports (the operator's: the ports override them).
    pub base_sets: Vec<String>,
    /// `--set`s after the private ports (a test's: they override the ports).
    pub overrides: Vec<String>,
    /// Enable the simulated 2-DOF plant.
    pub plant: bool,
    /// The cell id is this followed by the router's port.
    pub id_prefix: String,
    /// Where `cell up`'s output goes (created empty; a restart appends).
    pub log: PathBuf,
    /// `RUST_LOG` for `cell up` (None: inherited).
    pub rust_log: Option<String>,
    /// `SCHED_FIFO` priority for the cell and every process and thread it starts (None:
    /// normal scheduling).
    pub fifo: Option<i32>,
    /// A secured cell (`[cell.security]`, with `dir` absolute): the router is `quic/`, and the
    /// section is set on the command line whole (the config's own is replaced).
    pub security: Option<common::security::SecuritySection>,
}

/// A started cell: the `cell up` process and what a client needs to reach it.
#[derive(Debug)]
pub struct Launched {
    pub child: Child,
    pub cell: CellSection,
    /// Every `--set` it was started with, in order (for CLI calls against it, a restart).
    pub sets: Vec<String>,
    /// Whether the asked `SCHED_FIFO` was granted (Ok also when none was asked).
    pub fifo: Result<(), String>,
}

impl Spec {
    /// Picks free loopback ports (below the ephemeral range: no outgoing connection can take
    /// a device's port between this choice and the emulator's bind, `common::ports`) for the
    /// router and every device, creates the log and starts `cell up`.
    pub fn launch(&self) -> anyhow::Result<Launched> {
        let port = || -> anyhow::Result<u16> { Ok(common::ports::free_loopback_port()?) };
        let router_port = port()?;
        let id = format!("{}{router_port}", self.id_prefix);
        let scheme = if self.security.is_some() {
            common::security::SECURE_SCHEME
        } else {
            "tcp"
        };
        let router = format!("{scheme}/127.0.0.1:{router_port}");
        let (egm, ctl, sri, rdt, http) = (port()?, port()?, port()?, port()?, port()?);
        let sets = self.sets(&id, &router, [egm, ctl, sri, rdt, http]);
        if let Some(d) = self.log.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::File::create(&self.log)
            .with_context(|| format!("creating {}", self.log.display()))?;
        let (child, fifo) = self.relaunch(&sets)?;
        Ok(Launched {
            child,
            cell: CellSection {
                id,
                router,
                zenoh_config: None,
                security: self.security.clone(),
            },
            sets,
            fifo,
        })
    }

    /// Every `--set` of a launch, in order: the base sets, the router and id, the device
    /// ports (`[egm, controller, sri, rdt, http]`), the plant, then the overrides (`--set`
    /// applies in order: the last wins). Pure.
    pub fn sets(&self, id: &str, router: &str, ports: [u16; 5]) -> Vec<String> {
        let mut sets: Vec<String> = self.base_sets.clone();
        sets.extend([
            format!("cell.router=\"{router}\""),
            format!("cell.id=\"{id}\""),
        ]);
        if let Some(sec) = &self.security {
            let toml_str = |v: &str| toml::Value::String(v.to_string()).to_string();
            sets.extend([
                format!(
                    "cell.security.profile={}",
                    toml_str(match sec.profile {
                        common::security::ProfileKind::Sim => "sim",
                        common::security::ProfileKind::Real => "real",
                    })
                ),
                format!("cell.security.dir={}", toml_str(&sec.dir)),
                format!(
                    "cell.security.operators=[{}]",
                    sec.operators
                        .iter()
                        .map(|o| toml_str(o))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                format!(
                    "cell.security.operators_may_reset={}",
                    sec.operators_may_reset
                ),
            ]);
        }
        sets.extend(device_port_sets(ports));
        if self.plant {
            sets.push("sim.plant.enabled=true".into());
        }
        sets.extend(self.overrides.iter().cloned());
        sets
    }

    /// Starts `cell up` with `sets` (a launch's, again: the same router and ports), its output
    /// appended to the log; under the spec's `SCHED_FIFO` when granted.
    pub fn relaunch(&self, sets: &[String]) -> anyhow::Result<(Child, Result<(), String>)> {
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let mut cmd = self.command(sets);
        if let Some(l) = &self.rust_log {
            cmd.env("RUST_LOG", l);
        }
        cmd.arg("up")
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf);
        common::service::spawn_under_fifo(&mut cmd, self.fifo)
            .context("starting a private cell (cell up)")
    }

    /// The `cell` binary with the spec's directory, config and `sets`, to add a subcommand to
    /// (a CLI call against the cell: its log level is the caller's, not `rust_log`).
    pub fn command(&self, sets: &[String]) -> Command {
        let mut cmd = Command::new(&self.exe);
        if let Some(d) = &self.cwd {
            cmd.current_dir(d);
        }
        if let Some(c) = &self.config {
            cmd.arg("--config").arg(c);
        }
        for s in sets {
            cmd.arg("--set").arg(s);
        }
        cmd
    }
}

/// The security section a private cell of `cell` starts with: the same, its certificate
/// directory resolved (the private cell's `--set` replaces it whole).
pub fn private_security(cell: &CellSection) -> Option<common::security::SecuritySection> {
    let mut s = cell.security.clone()?;
    if let Some(d) = cell.certs_dir() {
        s.dir = d.display().to_string();
    }
    Some(s)
}

/// A cell started for the experiments, `cell demo`, commissioning and the bench (private
/// router port, cell id and device ports).
pub struct PrivateCell {
    child: Child,
    pub cell: CellSection,
    /// Whether the `SCHED_FIFO` asked for was granted (Ok also when none was asked).
    pub fifo: Result<(), String>,
    log: PathBuf,
}

impl PrivateCell {
    /// Starts `cell up` (this executable) with the operator's config and overrides plus the
    /// plant enabled, on free loopback ports; logs into `log`.
    ///
    /// A secured operator cell (`cell` with `[cell.security]`) starts secured the same way: its
    /// router on `quic/`, the same certificates ([`private_security`]).
    pub fn start(
        config: Option<&Path>,
        sets: &[String],
        log: &Path,
        fifo: Option<i32>,
        cell: &CellSection,
    ) -> anyhow::Result<PrivateCell> {
        let spec = Spec {
            exe: std::env::current_exe().context("locating the cell binary")?,
            cwd: None,
            config: config.map(Path::to_path_buf),
            base_sets: sets.to_vec(),
            overrides: Vec::new(),
            plant: true,
            id_prefix: "exp".into(),
            log: log.to_path_buf(),
            rust_log: None,
            fifo,
            security: private_security(cell),
        };
        // As deployed (deploy/systemd: every unit under CPUSchedulingPolicy=fifo) and as the
        // whole-cell tests run it: `cell up` and every process and thread it starts under
        // SCHED_FIFO, so that a service's deadlines do not depend on the host's time-sharing.
        // Under normal scheduling a 2-core host starved single services for 57 ms (a CI run,
        // 2026-12-03: control alone, during the demo's payload identification) — a hold that is
        // not a host stall (crate::stall) and so ends the step. `CELL_PRIVATE_FIFO=0` runs the
        // private cell under normal scheduling, `=N` at priority N (default 50); without the
        // privilege it runs under normal scheduling and says so.
        let l = spec.launch()?;
        match (fifo, &l.fifo) {
            (None, _) => {}
            (Some(prio), Ok(())) => eprintln!("private cell: SCHED_FIFO {prio}, as deployed"),
            (Some(prio), Err(_)) => eprintln!(
                "private cell: SCHED_FIFO {prio} not permitted here; it runs under normal \
                 scheduling, and a service the host starves past its staleness bound ends \
                 the step it was in (give the privilege, e.g. run as root or with \
                 CAP_SYS_NICE, for the deployed timing)"
            ),
        }
        Ok(PrivateCell {
            child: l.child,
            cell: l.cell,
            fifo: l.fifo,
            log: log.to_path_buf(),
        })
    }

    /// Waits until the private cell is ready — its router accepts a session, every service
    /// is live, robot-io runs its robot session and the sensor streams — and returns the
    /// session. Nothing is built at start (`cell up` runs each service as `cell service NAME`
    /// of this executable), so the bound covers process start-up only. With `progress`, says
    /// every 5 s what it still waits for. Fails at once when `cell up` exits, and at the bound
    /// with what was missing; either error ends with the last lines of the cell's log.
    pub async fn ready(
        &mut self,
        bus: &common::bus::BusArgs,
        timeout: Duration,
        progress: bool,
    ) -> anyhow::Result<Session> {
        let t0 = tokio::time::Instant::now();
        let deadline = t0 + timeout;
        let mut next_say = t0 + Duration::from_secs(5);
        let mut session: Option<Session> = None;
        let mut waiting_for = "the cell's router to accept a session".to_string();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                if let Some(s) = session.take() {
                    let _ = s.close().await;
                }
                anyhow::bail!(
                    "the private cell (cell up) exited at start ({st}); {}",
                    self.log_tail(6)
                );
            }
            if session.is_none() {
                if let Ok(s) = cli::session(bus, &self.cell).await {
                    session = Some(s);
                }
            }
            if let Some(s) = &session {
                match self.readiness(s).await {
                    None => return session.ok_or_else(|| anyhow::anyhow!("no session")),
                    Some(w) => waiting_for = w,
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                if let Some(s) = session.take() {
                    let _ = s.close().await;
                }
                anyhow::bail!(
                    "the private cell was not ready within {:.0} s: still waiting for {waiting_for}; {}",
                    timeout.as_secs_f64(),
                    self.log_tail(6)
                );
            }
            if progress && now >= next_say {
                eprintln!(
                    "  … waiting for {waiting_for} ({:.0} s)",
                    (now - t0).as_secs_f64()
                );
                next_say = now + Duration::from_secs(5);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What the cell still lacks (`None`: ready).
    async fn readiness(&self, s: &Session) -> Option<String> {
        let all = match cli::status(s, &self.cell, None).await {
            Ok(a) => a,
            Err(_) => return Some("the services' status".into()),
        };
        let live: Vec<&str> = all.iter().filter_map(|v| v["service"].as_str()).collect();
        let missing: Vec<&str> = common::service::SERVICES
            .iter()
            .copied()
            .filter(|n| !live.contains(n))
            .collect();
        if !missing.is_empty() {
            return Some(format!("services to come up: {}", missing.join(", ")));
        }
        let rio = all.iter().find(|v| v["service"] == "robot-io");
        let rio_ok = rio.is_some_and(|r| {
            let d = &r["detail"];
            d["cycles"]
                .as_u64()
                .or(d["cycle"]["cycles"].as_u64())
                .unwrap_or(0)
                > 10
                && d["safety"]["reason"] != "RobotSilent"
        });
        if !rio_ok {
            return Some("robot-io's robot session (EGM datagrams from the simulated IRC5)".into());
        }
        let sensor_ok = all
            .iter()
            .find(|v| v["service"] == "sensor")
            .is_some_and(|v| v["state"].as_str().is_some_and(|t| t.contains("streaming")));
        if !sensor_ok {
            return Some("the F/T sensor to stream".into());
        }
        None
    }

    /// `last lines of LOG: a | b | c`, library source locations removed.
    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(common::errtext::operator_line)
            .collect();
        let tail = &lines[lines.len().saturating_sub(n)..];
        if tail.is_empty() {
            format!("its log {} is empty", self.log.display())
        } else {
            format!("last lines of {}: {}", self.log.display(), tail.join(" | "))
        }
    }

    /// The `cell up` process (the launcher with the embedded router).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub fn stop(mut self) {
        self.terminate(Duration::from_secs(10));
    }

    /// SIGTERM, then SIGKILL after `timeout`; reaps the child. Does nothing once it has
    /// exited (and been reaped: its pid is never signalled again).
    fn terminate(&mut self, timeout: Duration) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // SAFETY: signalling our own child by pid; not yet reaped, so the pid is still ours.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let t0 = std::time::Instant::now();
        while t0.elapsed() < timeout {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private cell left behind by an early return or a panic is stopped (within 5 s).
impl Drop for PrivateCell {
    fn drop(&mut self) {
        self.terminate(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            exe: "cell".into(),
            cwd: None,
            config: None,
            base_sets: vec!["robot_io.egm.bind=\"10.0.0.1:1\"".into()],
            overrides: vec!["robot_io.egm.bind=\"127.0.0.1:9\"".into()],
            plant: true,
            id_prefix: "exp".into(),
            log: "cell.log".into(),
            rust_log: None,
            fifo: None,
            security: None,
        }
    }

    #[test]
    fn the_private_ports_override_the_base_and_the_overrides_win() {
        let sets = spec().sets("exp7000", "tcp/127.0.0.1:7000", [1, 2, 3, 4, 5]);
        let pos = |needle: &str| {
            sets.iter()
                .position(|s| s.contains(needle))
                .unwrap_or_else(|| panic!("{needle} missing: {sets:?}"))
        };
        assert_eq!(pos("10.0.0.1:1"), 0, "the base sets come first");
        assert!(
            pos("127.0.0.1:1\"") > 0,
            "the private EGM port follows them"
        );
        assert!(pos("sim.plant.enabled") > pos("sensor.ati.http_port=5"));
        assert_eq!(
            pos("127.0.0.1:9"),
            sets.len() - 1,
            "the overrides come last"
        );
        assert!(sets.contains(&"cell.id=\"exp7000\"".to_string()));
    }

    #[test]
    fn the_plant_is_asked_for_only_when_wanted() {
        let mut sp = spec();
        sp.plant = false;
        let sets = sp.sets("t1", "tcp/127.0.0.1:1", [1, 2, 3, 4, 5]);
        assert!(!sets.iter().any(|s| s.contains("plant")), "{sets:?}");
    }

    #[test]
    fn the_fifo_priority_comes_from_the_environment_or_defaults_to_50() {
        // A variable nobody sets: the default.
        assert_eq!(fifo_from_env("CELL_HARNESS_TEST_UNSET_FIFO"), Some(50));
    }
}
