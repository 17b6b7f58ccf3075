//! Which file a scenario RPC's `"load"` may read: a **name** from the scenario directory
//! (`<config dir>/scenarios/`), never a path. Anyone who can query `sim/rpc/scenario` could
//! otherwise make the simulator read any file its process can read (and echo it in the parse
//! error). `[sim] scenario` and `"load_toml"` are unchanged: the first is the operator's own
//! config, the second carries its text.

use std::path::{Path, PathBuf};

/// The scenario directory under the cell config's directory.
pub const SCENARIO_DIR: &str = "scenarios";

/// The longest scenario name accepted.
pub const NAME_MAX: usize = 64;

/// The scenario name in a `"load"` request: `NAME`, `NAME.toml` or `scenarios/NAME[.toml]`,
/// where NAME is 1 to [`NAME_MAX`] of `[A-Za-z0-9_-]`. Anything else (an absolute path, `..`,
/// another directory) is refused with the rule named.
pub fn scenario_name(request: &str) -> Result<&str, String> {
    let base = request.strip_prefix("scenarios/").unwrap_or(request);
    let name = base.strip_suffix(".toml").unwrap_or(base);
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(name)
    } else {
        Err(format!(
            "\"load\" takes a scenario name from the scenario directory ({SCENARIO_DIR}/NAME.toml, \
             NAME of 1 to {NAME_MAX} letters, digits, '-' or '_'), not a path: {:?} refused",
            truncate(request)
        ))
    }
}

/// The file a `"load"` request names under `config_dir`: `config_dir/scenarios/NAME.toml`,
/// which must exist and, with every symlink resolved, stay inside the scenario directory.
pub fn scenario_file(config_dir: &Path, request: &str) -> Result<PathBuf, String> {
    let name = scenario_name(request)?;
    let dir = config_dir.join(SCENARIO_DIR);
    let dir_real = dir
        .canonicalize()
        .map_err(|e| format!("the scenario directory {}: {e}", dir.display()))?;
    let file = dir.join(format!("{name}.toml"));
    let real = file.canonicalize().map_err(|e| {
        format!(
            "no scenario {name:?} in {} ({e}); the directory has: {}",
            dir.display(),
            available(&dir_real).join(", ")
        )
    })?;
    if !real.starts_with(&dir_real) || !real.is_file() {
        return Err(format!(
            "scenario {name:?} leads out of the scenario directory {} (a symlink?): refused",
            dir.display()
        ));
    }
    Ok(real)
}

/// The scenario names in a directory, sorted.
pub fn available(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n.strip_suffix(".toml")
                        .filter(|s| scenario_name(s).is_ok())
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_config() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "sim-scenario-files-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(SCENARIO_DIR)).expect("tmp dir");
        std::fs::write(dir.join("sim.toml"), "secret = 1\n").expect("write");
        std::fs::write(dir.join("scenarios/table-contact.toml"), "x = 1\n").expect("write");
        dir
    }

    #[test]
    fn scenario_load_takes_names_from_the_scenario_directory_only() {
        let dir = tmp_config();
        let want = dir
            .join("scenarios/table-contact.toml")
            .canonicalize()
            .expect("exists");
        for ok in [
            "table-contact",
            "table-contact.toml",
            "scenarios/table-contact.toml",
            "scenarios/table-contact",
        ] {
            assert_eq!(scenario_file(&dir, ok), Ok(want.clone()), "{ok}");
        }
        for bad in [
            "/etc/passwd",
            "../sim.toml",
            "scenarios/../sim.toml",
            "scenarios/../../etc/passwd",
            "sub/table-contact.toml",
            "",
            ".toml",
            "table contact",
        ] {
            let e = scenario_file(&dir, bad).expect_err(bad);
            assert!(e.contains("not a path"), "{bad}: {e}");
            // The refusal never reads, so never echoes, the file.
            assert!(!e.contains("secret"), "{e}");
        }
        let e = scenario_file(&dir, "missing").expect_err("missing");
        assert!(
            e.contains("no scenario \"missing\"") && e.contains("table-contact"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symlink_out_of_the_scenario_directory_is_refused() {
        let dir = tmp_config();
        std::os::unix::fs::symlink(dir.join("sim.toml"), dir.join("scenarios/escape.toml"))
            .expect("symlink");
        let e = scenario_file(&dir, "escape").expect_err("a link out");
        assert!(e.contains("leads out of the scenario directory"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_shipped_scenario_is_a_valid_name() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config");
        let names = available(&dir.join(SCENARIO_DIR));
        assert!(names.len() >= 8, "{names:?}");
        for (rel, _) in common::config::BUILTIN_SCENARIOS {
            assert!(scenario_file(&dir, rel).is_ok(), "{rel}");
        }
    }
}
