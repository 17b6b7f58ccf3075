//! The crate boundaries ARCHITECTURE.md claims, read from `cargo metadata` (offline: the lock
//! file and the registry cache), so adding a forbidden dependency back fails here:
//!
//! - the simulator is an independent implementation of the devices it emulates: `sim` depends
//!   (normal, dev or build, directly or through anything) on no driver, no protocol crate and
//!   no other service;
//! - the protocol crates (`egm`, `ft`, `irc5`) are pure: nothing under them is zenoh, tokio or
//!   `common` (which carries the bus);
//! - kinematics is pure without features: its own non-optional dependencies carry no bus; only
//!   the launcher, the `cell` binary and control's shell ask for its shell (`node`); crates that
//!   read the `[arm]` table take `config` only if they depend on common themselves.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

struct Meta {
    /// Package id → name.
    names: BTreeMap<String, String>,
    /// Package id → (dependency id, kinds: "normal", "dev", "build").
    deps: BTreeMap<String, Vec<(String, BTreeSet<String>)>>,
    /// Workspace package name → its declared dependencies (as in its Cargo.toml).
    declared: BTreeMap<String, Vec<Value>>,
}

fn metadata() -> Meta {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let host = tests::host_triple();
    let out = std::process::Command::new(&cargo)
        .current_dir(tests::repo_root())
        .args([
            "metadata",
            "--offline",
            "--format-version",
            "1",
            "--filter-platform",
            &host,
        ])
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: BTreeSet<&str> = m["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut names = BTreeMap::new();
    let mut declared = BTreeMap::new();
    for p in m["packages"].as_array().unwrap() {
        let id = p["id"].as_str().unwrap().to_string();
        let name = p["name"].as_str().unwrap().to_string();
        if members.contains(id.as_str()) {
            declared.insert(name.clone(), p["dependencies"].as_array().unwrap().clone());
        }
        names.insert(id, name);
    }
    let mut deps = BTreeMap::new();
    for n in m["resolve"]["nodes"].as_array().unwrap() {
        let id = n["id"].as_str().unwrap().to_string();
        let d = n["deps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let kinds = d["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k["kind"].as_str().unwrap_or("normal").to_string())
                    .collect();
                (d["pkg"].as_str().unwrap().to_string(), kinds)
            })
            .collect();
        deps.insert(id, d);
    }
    Meta {
        names,
        deps,
        declared,
    }
}

impl Meta {
    fn id(&self, name: &str) -> String {
        self.names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("no package {name}"))
    }

    /// Every package reachable from `root`: its own dependencies of the `root_kinds`, then
    /// normal and build dependencies of those. Each with the path that reaches it.
    fn reach(&self, root: &str, root_kinds: &[&str]) -> BTreeMap<String, String> {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut todo = vec![(self.id(root), root.to_string(), root_kinds.to_vec())];
        while let Some((id, path, kinds)) = todo.pop() {
            for (dep, dk) in self.deps.get(&id).into_iter().flatten() {
                if !dk.iter().any(|k| kinds.contains(&k.as_str())) {
                    continue;
                }
                let name = self.names[dep].clone();
                if seen.contains_key(&name) {
                    continue;
                }
                let p = format!("{path} → {name}");
                seen.insert(name, p.clone());
                todo.push((dep.clone(), p, vec!["normal", "build"]));
            }
        }
        seen
    }
}

/// The bus client records and requests; the launcher (`cell up`, in the `cell` crate) is the
/// one that links every service, and scoring is lab's: `client` reaches neither.
#[test]
fn the_bus_client_links_no_launcher_simulator_or_scorer() {
    let m = metadata();
    let forbidden = ["sim", "sensor", "force", "lab", "cell"];
    let reach = m.reach("client", &["normal", "build"]);
    let bad: Vec<&String> = forbidden.iter().filter_map(|f| reach.get(*f)).collect();
    assert!(
        bad.is_empty(),
        "client is the bus client: the launcher belongs to the cell crate, scoring to lab: \
         {bad:?}"
    );
}

/// The simulator's dependencies, read from its own declarations and everything below.
#[test]
fn the_simulator_uses_no_driver_or_protocol_crate() {
    let m = metadata();
    let forbidden = [
        "sensor", "robot-io", "egm", "ft", "control", "force", "client", "lab", "cell",
    ];
    let reach = m.reach("sim", &["normal", "dev", "build"]);
    let bad: Vec<&String> = forbidden.iter().filter_map(|f| reach.get(*f)).collect();
    assert!(
        bad.is_empty(),
        "the simulator must implement the specs itself (services/sim/src/wire), not use the \
         drivers' code: {bad:?}"
    );
}

#[test]
fn the_protocol_crates_carry_no_bus_and_no_runtime() {
    let m = metadata();
    let mut bad = Vec::new();
    for root in ["egm", "ft", "irc5"] {
        let reach = m.reach(root, &["normal", "build"]);
        for f in ["zenoh", "tokio", "common"] {
            if let Some(p) = reach.get(f) {
                bad.push(p.clone());
            }
        }
    }
    assert!(
        bad.is_empty(),
        "a protocol crate pulls the bus or a runtime: {bad:?}"
    );
}

#[test]
fn kinematics_is_pure_and_only_the_launcher_takes_its_shell() {
    let m = metadata();
    let own = &m.declared["kinematics"];
    let mut bad = Vec::new();
    for d in own {
        let name = d["name"].as_str().unwrap();
        let normal = d["kind"].is_null();
        let optional = d["optional"].as_bool().unwrap_or(false);
        if normal && !optional && ["zenoh", "tokio", "common"].contains(&name) {
            bad.push(format!(
                "kinematics depends on {name} without the node feature"
            ));
        }
    }
    // The launcher (the `cell` crate) runs the kinematics service, the `cell` binary checks
    // its config section and runs it in-process, and control's shell (node.rs only: a source
    // check below) builds tool poses and servo targets with its message adapters. Nobody else
    // takes it: the bus client (`client`) links no service's shell.
    let shells = ["cell", "control"];
    for (pkg, deps) in &m.declared {
        for d in deps {
            if d["name"] != "kinematics" || shells.contains(&pkg.as_str()) {
                continue;
            }
            let feats: Vec<&str> = d["features"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            // `config` (the `[arm]` check for common's loader) only where the crate depends on
            // common itself: kinematics brings it no bus it did not have.
            let has_common = deps
                .iter()
                .any(|d| d["name"] == "common" && d["kind"].is_null());
            if feats.contains(&"config") && !has_common {
                bad.push(format!(
                    "{pkg} takes kinematics' `config` feature without depending on common"
                ));
            }
            if feats.contains(&"node") || d["uses_default_features"].as_bool() != Some(false) {
                bad.push(format!(
                    "{pkg} takes kinematics with its shell (features {feats:?}, default \
                     features {}): depend on it with `default-features = false`",
                    d["uses_default_features"]
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// control's pure core (every module but its shell, `node.rs`) imports no service's shell.
#[test]
fn controls_core_imports_no_shell() {
    let dir = tests::repo_root().join("services/control/src");
    let shells = [
        "kinematics::node",
        "robot_io::node",
        "force::node",
        "sensor::node",
        "sim::node",
    ];
    let mut bad = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs")
                || p.ends_with("node.rs")
                || p.ends_with("main.rs")
            {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for (n, line) in text.lines().enumerate() {
                if shells.iter().any(|s| line.contains(s)) && !line.trim_start().starts_with("//") {
                    bad.push(format!("{}:{}: {}", p.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "control's core imports a shell:\n{}",
        bad.join("\n")
    );
}

/// One place sets a real-time policy: `common::service::set_thread_fifo` (and its per-thread
/// form). A service's real-time thread, the launcher's `pre_exec` and every harness that starts
/// a cell under `SCHED_FIFO` (the lab's private cell, the bench, the tests' cells) go through
/// it; a second `sched_setscheduler` call (a harness's own `pre_exec`, a probe) fails this test.
#[test]
fn one_call_sets_a_real_time_policy() {
    let root = tests::repo_root();
    let mut calls = Vec::new();
    let mut reads = Vec::new();
    let mut stack: Vec<_> = ["common", "services", "tests", "fuzz/src"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("target") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                // Spelt in two halves, so this line is not a call it finds.
                let set = concat!("sched_", "setscheduler(");
                let get = concat!("sched_", "getscheduler(");
                if code.contains(set) {
                    calls.push(format!("{}:{}", p.display(), n + 1));
                }
                if code.contains(get) {
                    reads.push(format!("{}:{}", p.display(), n + 1));
                }
            }
        }
    }
    assert_eq!(
        calls.len(),
        1,
        "expected one call, in common/src/service.rs: {calls:?}"
    );
    assert!(
        calls[0].contains("common/src/service.rs"),
        "the one call is not common's: {calls:?}"
    );
    // Reading a policy is harmless, but it is read in the same module (one meaning of "the
    // cell's priority").
    assert!(
        reads.iter().all(|r| r.contains("common/src/service.rs")),
        "a policy read outside common/src/service.rs: {reads:?}"
    );
}
