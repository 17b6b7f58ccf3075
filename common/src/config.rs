//! Cell configuration: one TOML file per cell, one table per service.
//!
//! Precedence: file → environment (`CELL__<TABLE>__<KEY>=value`) → `--set table.key=value`.
//! Values from env and `--set` are parsed as TOML values (`4`, `1.5`, `true`, `"x"`, `[1, 2]`)
//! and fall back to a plain string.
//!
//! Every table is deserialized with `deny_unknown_fields` and defaults for missing keys; all
//! problems (unknown keys, wrong types, out-of-range values) are collected and reported at once,
//! each naming its key, before anything starts.

use std::{fmt, path::Path};

use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// One configuration problem, naming its key (`robot_io.cycle_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    pub key: String,
    pub problem: String,
}

/// Every problem found in a configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigIssue>);

impl ConfigErrors {
    pub fn push(&mut self, key: impl Into<String>, problem: impl Into<String>) {
        self.0.push(ConfigIssue {
            key: key.into(),
            problem: problem.into(),
        });
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn into_result(self) -> Result<(), ConfigErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration ({} problem(s)):", self.0.len())?;
        for i in &self.0 {
            writeln!(f, "  - {}: {}", i.key, i.problem)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Range and consistency checks of a config table, beyond what its types enforce.
pub trait Validate {
    /// Pushes every problem, with keys prefixed by `prefix` (the table name).
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors);
}

/// Helpers for `Validate` implementations.
pub fn check_range(
    errors: &mut ConfigErrors,
    key: String,
    value: f64,
    min: f64,
    max: f64,
    unit: &str,
) {
    if !value.is_finite() || value < min || value > max {
        errors.push(
            key,
            format!("{value} out of range [{min}, {max}] {unit}").trim_end(),
        );
    }
}

/// Every top-level table a cell config may have.
pub const KNOWN_SECTIONS: &[&str] = &[
    "cell",
    "launcher",
    "arm",
    "robot_io",
    "kinematics",
    "control",
    "force",
    "sensor",
    "sim",
];

/// The `[cell]` table: identity and bus of the cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CellSection {
    /// Key prefix chunk: everything is under `cell/<id>/…`.
    pub id: String,
    /// The zenoh router of the cell: `cell up` listens here, services and the CLI connect here.
    pub router: String,
    /// Optional zenoh json5 file applied to every session (before command-line overrides).
    pub zenoh_config: Option<String>,
    /// `[cell.security]`: mutual TLS and deny-by-default access control on every session
    /// ([`crate::security`]). Absent: the cell is **unsecured** (plain TCP, anyone on the
    /// network can command it), and `cell status` and `cell up` say so.
    pub security: Option<crate::security::SecuritySection>,
}

impl Default for CellSection {
    fn default() -> Self {
        Self {
            id: "sim".into(),
            router: "tcp/127.0.0.1:7447".into(),
            zenoh_config: None,
            security: None,
        }
    }
}

impl Validate for CellSection {
    fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
        if !crate::topic::valid_cell_id(&self.id) {
            errors.push(
                format!("{prefix}.id"),
                format!("{:?}: use letters, digits, '-' or '_'", self.id),
            );
        }
        if !self.router.contains('/') {
            errors.push(
                format!("{prefix}.router"),
                format!(
                    "{:?} is not a zenoh endpoint like tcp/127.0.0.1:7447",
                    self.router
                ),
            );
        }
        if let Some(sec) = &self.security {
            if let Err(e) = crate::security::secure_endpoint(&self.router) {
                errors.push(format!("{prefix}.router"), e);
            }
            for (k, why) in sec.problems() {
                errors.push(format!("{prefix}.security.{k}"), why);
            }
        }
    }
}

impl CellSection {
    /// The certificate directory of a secured cell (relative: to the config file's directory).
    pub fn certs_dir(&self) -> Option<std::path::PathBuf> {
        let sec = self.security.as_ref()?;
        let p = std::path::Path::new(&sec.dir);
        let dir = match (p.is_relative(), CONFIG_DIR.get()) {
            (true, Some(dir)) => dir.join(p),
            _ => p.to_path_buf(),
        };
        // Absolute, so that a process started elsewhere (a private cell, a service) with it
        // reads the same files.
        Some(if dir.is_relative() {
            std::env::current_dir().map(|c| c.join(&dir)).unwrap_or(dir)
        } else {
            dir
        })
    }

    /// One line on how the cell is secured, for `cell status` and the launcher.
    pub fn security_line(&self) -> String {
        match &self.security {
            Some(s) => format!(
                "security: {:?} profile, mutual TLS over QUIC and access control (certificates in {})",
                s.profile,
                self.certs_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            ),
            None => "security: UNSECURED — plain TCP, no access control: anyone on the cell network can command the arm (docs/security.md)".into(),
        }
    }
}

/// The merged configuration tree (file + env + `--set`), before typed extraction.
#[derive(Debug, Clone, Default)]
pub struct RawConfig {
    tree: toml::Table,
    /// Where it came from, for messages.
    pub origin: String,
}

static CONFIG_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// The built-in defaults, used when no config file is given: the simulated cell of
/// `deploy/config/sim.toml` (EGM robot and SRI sensor through `cell-sim`), embedded at build time
/// so that `cell up` without `-c` runs exactly what the README describes.
pub const BUILTIN_CONFIG: &str = include_str!("../../deploy/config/sim.toml");

/// Where the built-in defaults say they come from (messages, `origin`).
pub const BUILTIN_ORIGIN: &str = "built-in defaults (deploy/config/sim.toml)";

/// The scenario files the built-in defaults may name (`[sim] scenario`, the scenario RPC's
/// `load`), embedded for binaries that run away from their checkout.
pub const BUILTIN_SCENARIOS: &[(&str, &str)] = &[
    (
        "scenarios/curved-contact.toml",
        include_str!("../../deploy/config/scenarios/curved-contact.toml"),
    ),
    (
        "scenarios/free-space.toml",
        include_str!("../../deploy/config/scenarios/free-space.toml"),
    ),
    (
        "scenarios/lead-through.toml",
        include_str!("../../deploy/config/scenarios/lead-through.toml"),
    ),
    (
        "scenarios/peg-in-hole.toml",
        include_str!("../../deploy/config/scenarios/peg-in-hole.toml"),
    ),
    (
        "scenarios/rc-plant-ramp.toml",
        include_str!("../../deploy/config/scenarios/rc-plant-ramp.toml"),
    ),
    (
        "scenarios/rc-plant.toml",
        include_str!("../../deploy/config/scenarios/rc-plant.toml"),
    ),
    (
        "scenarios/table-contact.toml",
        include_str!("../../deploy/config/scenarios/table-contact.toml"),
    ),
    (
        "scenarios/tilted-table.toml",
        include_str!("../../deploy/config/scenarios/tilted-table.toml"),
    ),
];

/// The directory relative paths of the built-in defaults resolve against: the checkout's
/// `deploy/config` this binary was built from (so an edited scenario file takes effect, as with
/// `-c deploy/config/sim.toml`); when that is gone (the binary was copied elsewhere, e.g. into a
/// container), the embedded scenarios written to `<tmp>/cell-builtin-config-<uid>/`. `None`
/// when neither is possible (paths then resolve against the working directory).
pub fn builtin_config_dir() -> Option<std::path::PathBuf> {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config");
    if BUILTIN_SCENARIOS
        .iter()
        .all(|(rel, _)| checkout.join(rel).is_file())
    {
        return Some(checkout);
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("cell-builtin-config-{uid}"));
    for (rel, text) in BUILTIN_SCENARIOS {
        let path = dir.join(rel);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == *text) {
            continue;
        }
        let parent = path.parent()?;
        std::fs::create_dir_all(parent).ok()?;
        // Written whole then renamed: a concurrent reader sees the old or the new file.
        let tmp = parent.join(format!(".{}.{}", std::process::id(), rel.replace('/', "_")));
        std::fs::write(&tmp, text).ok()?;
        std::fs::rename(&tmp, &path).ok()?;
    }
    Some(dir)
}

/// The directory of the loaded config file (or of the built-in defaults' scenarios), once a
/// config was loaded.
pub fn config_dir() -> Option<std::path::PathBuf> {
    CONFIG_DIR.get().cloned()
}

/// Resolves a path given in the config: a relative path is taken relative to the directory of
/// the config file (when that file exists there), else as given (relative to the working
/// directory).
pub fn resolve_path(p: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(p);
    if path.is_relative() {
        if let Some(dir) = CONFIG_DIR.get() {
            let candidate = dir.join(path);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    path.to_path_buf()
}

/// Environment variable prefix for overrides.
pub const ENV_PREFIX: &str = "CELL__";

impl RawConfig {
    /// Loads a file (or nothing), then applies env overrides and `--set` overrides.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        sets: &[String],
    ) -> Result<Self, ConfigErrors> {
        let mut errors = ConfigErrors::default();
        let (tree, origin) = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    let mut errs = ConfigErrors::default();
                    errs.push(path.display().to_string(), format!("cannot read: {e}"));
                    errs
                })?;
                let tree = text.parse::<toml::Table>().map_err(|e| {
                    let mut errs = ConfigErrors::default();
                    errs.push(path.display().to_string(), format!("not valid TOML: {e}"));
                    errs
                })?;
                if let Some(dir) = path.parent() {
                    let _ = CONFIG_DIR.set(dir.to_path_buf());
                }
                (tree, path.display().to_string())
            }
            None => {
                let tree = BUILTIN_CONFIG.parse::<toml::Table>().map_err(|e| {
                    let mut errs = ConfigErrors::default();
                    errs.push(BUILTIN_ORIGIN, format!("not valid TOML: {e}"));
                    errs
                })?;
                if let Some(dir) = builtin_config_dir() {
                    let _ = CONFIG_DIR.set(dir);
                }
                (tree, BUILTIN_ORIGIN.to_string())
            }
        };
        let mut raw = RawConfig { tree, origin };
        let mut envs: Vec<(String, String)> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with(ENV_PREFIX))
            .collect();
        envs.sort();
        for (k, v) in envs {
            let path = k[ENV_PREFIX.len()..]
                .to_ascii_lowercase()
                .replace("__", ".");
            raw.set(&path, &v, &k, &mut errors);
        }
        for s in sets {
            match s.split_once('=') {
                Some((k, v)) => raw.set(k.trim(), v.trim(), &format!("--set {s}"), &mut errors),
                None => errors.push(
                    s.clone(),
                    "--set expects table.key=value (e.g. robot_io.cycle_ms=4)",
                ),
            }
        }
        errors.into_result().map(|()| raw)
    }

    /// Loads a file from a TOML string (tests, embedded defaults).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigErrors> {
        let tree = text.parse::<toml::Table>().map_err(|e| {
            let mut errs = ConfigErrors::default();
            errs.push("<string>", format!("not valid TOML: {e}"));
            errs
        })?;
        Ok(RawConfig {
            tree,
            origin: "<string>".into(),
        })
    }

    fn set(&mut self, path: &str, value: &str, what: &str, errors: &mut ConfigErrors) {
        let parts: Vec<&str> = path.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            errors.push(path, format!("bad key in {what}"));
            return;
        }
        let parsed = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        let mut table = &mut self.tree;
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                table.insert((*part).to_string(), parsed);
                return;
            }
            let entry = table
                .entry((*part).to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(t) => table = t,
                _ => {
                    errors.push(
                        parts[..=i].join("."),
                        format!("is not a table; cannot apply {what}"),
                    );
                    return;
                }
            }
        }
    }

    /// Names of the top-level tables present.
    pub fn sections(&self) -> impl Iterator<Item = &str> {
        self.tree.keys().map(|k| k.as_str())
    }

    /// Reports top-level tables that are not in `known`.
    pub fn check_sections(&self, known: &[&str], errors: &mut ConfigErrors) {
        for k in self.tree.keys() {
            if !known.contains(&k.as_str()) {
                errors.push(
                    k.clone(),
                    format!("unknown table; known tables: {}", known.join(", ")),
                );
            }
        }
    }

    /// Extracts and validates one table. Missing table → defaults. Every unknown key and type
    /// error in the table is reported (the offending key is dropped and extraction retried, so
    /// one bad key does not hide the next).
    pub fn section<T>(&self, name: &str, errors: &mut ConfigErrors) -> T
    where
        T: DeserializeOwned + Default + Validate,
    {
        let value = self
            .tree
            .get(name)
            .cloned()
            .unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
        let parsed = deserialize_collecting::<T>(value, name, errors);
        parsed.validate(name, errors);
        parsed
    }
}

/// Deserializes `value`; on an error at a path, records it, removes that key and tries again.
fn deserialize_collecting<T>(mut value: toml::Value, prefix: &str, errors: &mut ConfigErrors) -> T
where
    T: DeserializeOwned + Default,
{
    for _ in 0..64 {
        match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(v) => return v,
            Err(e) => {
                let path = e.path().to_string();
                let key = if path == "." || path.is_empty() {
                    prefix.to_string()
                } else {
                    format!("{prefix}.{path}")
                };
                let msg = e.inner().to_string();
                errors.push(key, msg);
                if path == "." || path.is_empty() || !remove_path(&mut value, &path) {
                    return T::default();
                }
            }
        }
    }
    T::default()
}

fn remove_path(value: &mut toml::Value, path: &str) -> bool {
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur = value;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        match cur {
            toml::Value::Table(t) => {
                if last {
                    return t.remove(*part).is_some();
                }
                match t.get_mut(*part) {
                    Some(next) => cur = next,
                    None => return false,
                }
            }
            toml::Value::Array(a) => {
                let idx = part
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<usize>();
                match idx {
                    Ok(idx) if idx < a.len() => {
                        if last {
                            a.remove(idx);
                            return true;
                        }
                        cur = &mut a[idx];
                    }
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
    #[serde(deny_unknown_fields, default)]
    struct Demo {
        cycle_ms: f64,
        name: String,
        inner: Inner,
    }
    #[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Inner {
        gain: f64,
    }
    impl Default for Demo {
        fn default() -> Self {
            Demo {
                cycle_ms: 4.0,
                name: "x".into(),
                inner: Inner::default(),
            }
        }
    }
    impl Validate for Demo {
        fn validate(&self, prefix: &str, errors: &mut ConfigErrors) {
            check_range(
                errors,
                format!("{prefix}.cycle_ms"),
                self.cycle_ms,
                0.5,
                100.0,
                "ms",
            );
        }
    }

    #[test]
    fn defaults_when_missing() {
        let raw = RawConfig::from_toml_str("").expect("parse");
        let mut errs = ConfigErrors::default();
        let d: Demo = raw.section("demo", &mut errs);
        assert!(errs.is_empty());
        assert_eq!(d, Demo::default());
    }

    #[test]
    fn every_problem_is_listed_with_its_key() {
        let raw = RawConfig::from_toml_str(
            "[demo]\ncycle_ms = 1000.0\nbogus = 1\nname = 5\n[demo.inner]\ngain = \"high\"\ntypo = 2\n",
        )
        .expect("parse");
        let mut errs = ConfigErrors::default();
        let _d: Demo = raw.section("demo", &mut errs);
        let keys: Vec<&str> = errs.0.iter().map(|i| i.key.as_str()).collect();
        for k in [
            "demo.bogus",
            "demo.name",
            "demo.inner.gain",
            "demo.inner.typo",
            "demo.cycle_ms",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        assert_eq!(errs.0.len(), 5, "{errs}");
    }

    #[test]
    fn precedence_file_env_set() {
        let dir = std::env::temp_dir().join(format!("cellcfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("c.toml");
        std::fs::write(&file, "[demo]\ncycle_ms = 2.0\nname = \"file\"\n").expect("write");
        let env = vec![
            ("CELL__DEMO__CYCLE_MS".to_string(), "3".to_string()),
            ("CELL__DEMO__NAME".to_string(), "env".to_string()),
            ("OTHER".to_string(), "1".to_string()),
        ];
        let raw = RawConfig::load(Some(&file), env, &["demo.cycle_ms=5.5".into()]).expect("load");
        let mut errs = ConfigErrors::default();
        let d: Demo = raw.section("demo", &mut errs);
        assert!(errs.is_empty(), "{errs}");
        assert_eq!(d.cycle_ms, 5.5);
        assert_eq!(d.name, "env");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Without `-c` the cell is the simulated cell of `deploy/config/sim.toml`: the same robot
    /// and sensor drivers, simulated sensor, scenario and services (addresses may differ), and
    /// the scenario resolves to a file.
    #[test]
    fn builtin_defaults_are_the_simulated_cell_of_sim_toml() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/sim.toml");
        let from_file = RawConfig::load(Some(&file), vec![], &[]).expect("sim.toml");
        let builtin = RawConfig::load(None, vec![], &[]).expect("built-in defaults");
        assert_eq!(builtin.origin, BUILTIN_ORIGIN);
        let get = |raw: &RawConfig, path: &str| -> Option<toml::Value> {
            let mut v = toml::Value::Table(raw.tree.clone());
            for p in path.split('.') {
                v = v.get(p)?.clone();
            }
            Some(v)
        };
        for key in [
            "robot_io.driver",
            "sensor.driver",
            "sim.sensor",
            "sim.scenario",
            "sim.plant.enabled",
            "launcher.services",
            "arm.model",
        ] {
            let b = get(&builtin, key);
            assert!(b.is_some(), "built-in defaults lack {key}");
            assert_eq!(b, get(&from_file, key), "{key}");
        }
        assert_eq!(
            get(&builtin, "robot_io.driver").and_then(|v| v.as_str().map(String::from)),
            Some("egm".into())
        );
        assert_eq!(
            get(&builtin, "sensor.driver").and_then(|v| v.as_str().map(String::from)),
            Some("sri".into())
        );
        let scenario = get(&builtin, "sim.scenario")
            .and_then(|v| v.as_str().map(String::from))
            .expect("scenario");
        assert!(
            resolve_path(&scenario).is_file(),
            "{scenario} does not resolve"
        );
    }

    /// Every scenario shipped in deploy/config/scenarios is embedded, byte for byte.
    #[test]
    fn builtin_scenarios_are_the_shipped_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/scenarios");
        let mut shipped: Vec<String> = std::fs::read_dir(&dir)
            .expect("scenarios dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".toml"))
            .map(|n| format!("scenarios/{n}"))
            .collect();
        shipped.sort();
        let embedded: Vec<String> = BUILTIN_SCENARIOS
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(
            embedded, shipped,
            "add new scenario files to BUILTIN_SCENARIOS"
        );
        for (rel, text) in BUILTIN_SCENARIOS {
            let on_disk = std::fs::read_to_string(dir.join("..").join(rel)).expect("read");
            assert_eq!(&on_disk, text, "{rel}");
        }
    }

    #[test]
    fn bad_set_and_unknown_table() {
        let err = RawConfig::load(None, vec![], &["nokey".into()]).expect_err("must fail");
        assert_eq!(err.0[0].key, "nokey");
        let raw = RawConfig::from_toml_str("[demo]\n[nope]\n").expect("parse");
        let mut errs = ConfigErrors::default();
        raw.check_sections(&["demo"], &mut errs);
        assert_eq!(errs.0.len(), 1);
        assert_eq!(errs.0[0].key, "nope");
    }
}
