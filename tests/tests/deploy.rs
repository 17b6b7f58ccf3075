//! The deployment files agree with each other: the IRC5 side (`deploy/irc5/`) with every
//! shipped cell config that drives EGM (port, address, cycle, timeouts), and the zenoh configs
//! parse. Pure file checks: no process is started.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use robot_io::egm::irc5::{CellEgmSide, Irc5Egm};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn get<'a>(t: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    let mut v: Option<&toml::Value> = None;
    let mut table = Some(t);
    for k in path.split('.') {
        v = table?.get(k);
        table = v.and_then(|x| x.as_table());
    }
    v
}

fn num(t: &toml::Table, path: &str, default: f64) -> f64 {
    get(t, path)
        .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
        .unwrap_or(default)
}

/// The EGM side of one shipped config, or `None` when it does not drive EGM.
fn egm_side(name: &str, t: &toml::Table) -> Option<CellEgmSide> {
    if get(t, "robot_io.driver").and_then(|v| v.as_str()) != Some("egm") {
        return None;
    }
    let bind = get(t, "robot_io.egm.bind")
        .and_then(|v| v.as_str())
        .unwrap_or("0.0.0.0:6510")
        .parse()
        .unwrap_or_else(|e| panic!("{name}: robot_io.egm.bind: {e}"));
    let sim = get(t, "sim").map(|_| {
        (
            num(t, "sim.egm.cycle_ms", 4.0),
            get(t, "sim.egm.robot_io")
                .and_then(|v| v.as_str())
                .unwrap_or("127.0.0.1:6510")
                .parse()
                .unwrap_or_else(|e| panic!("{name}: sim.egm.robot_io: {e}")),
        )
    });
    Some(CellEgmSide {
        config: name.to_string(),
        bind,
        command_timeout_ms: num(t, "robot_io.command_timeout_ms", 8.0),
        silence_timeout_ms: num(t, "robot_io.egm.silence_timeout_ms", 50.0),
        real: sim.is_none(),
        sim,
        // The IRB 120's fastest axis (420 deg/s) capped at robot-io's cap.
        max_joint_speed_deg_s: num(t, "robot_io.egm.max_joint_speed_deg_s", 200.0).min(420.0),
        controller: get(t, "robot_io.egm.controller")
            .and_then(|v| v.as_str())
            .map(|p| {
                let pin = robot_io::egm::peer::PeerPin::parse(p)
                    .unwrap_or_else(|e| panic!("{name}: robot_io.egm.controller: {e}"));
                (pin.ip, pin.port)
            }),
        sim_controller_bind: get(t, "sim").map(|_| {
            get(t, "sim.egm.bind")
                .and_then(|v| v.as_str())
                .unwrap_or("127.0.0.1:6511")
                .parse()
                .unwrap_or_else(|e| panic!("{name}: sim.egm.bind: {e}"))
        }),
    })
}

#[test]
fn the_irc5_side_and_every_shipped_egm_config_agree() {
    let irc5 = Irc5Egm::load_dir(&repo().join("deploy/irc5"))
        .unwrap_or_else(|e| panic!("deploy/irc5: {}", e.join("\n")));
    let mut checked = Vec::new();
    let mut problems = Vec::new();
    let dir = repo().join("deploy/config");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/config")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    for f in files {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let text = std::fs::read_to_string(&f).expect("readable");
        let t: toml::Table = text.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(side) = egm_side(&name, &t) {
            problems.extend(irc5.disagreements(&side));
            checked.push((name, side.real));
        }
    }
    eprintln!("checked against deploy/irc5: {checked:?}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Both kinds are shipped and checked: the simulated cell and a real one.
    assert!(
        checked.iter().any(|(n, real)| n == "sim.toml" && !real),
        "{checked:?}"
    );
    assert!(
        checked
            .iter()
            .any(|(n, real)| n == "irb120-real.toml" && *real),
        "{checked:?}"
    );
}

#[test]
fn the_shipped_irc5_module_follows_abbs_rules_and_describes_the_simulated_cell() {
    // Issue 43: the rules a real IRC5 enforces (fine point, first motion not EGM, load data,
    // \MaxSpeedDeviation within the slowest axis, every session re-set-up, no RAISE, a run flag
    // that starts true, no `main`) hold for the shipped module; and its taught data is the
    // simulated cell's, which the emulator stands in for.
    let irc5 = Irc5Egm::load_dir(&repo().join("deploy/irc5")).expect("deploy/irc5");
    let arm = kinematics::ArmParams::irb120();
    let slowest = arm
        .limits
        .max_speed
        .iter()
        .fold(f64::INFINITY, |a, v| a.min(*v))
        .to_degrees();
    assert!((slowest - robot_io::egm::irc5::IRB120_SLOWEST_AXIS_DEG_S).abs() < 1e-6);
    let lints = irc5.lint(slowest);
    assert!(lints.is_empty(), "{}", lints.join("\n"));
    let m = &irc5.module;
    let home = m.home.as_ref().expect("a taught home");
    assert_eq!(home.deg, sim::node::EgmSimConfig::default().initial_q_deg);
    let tool = m.tool.as_ref().expect("the module's tooldata");
    let sim_tool = sim::world::tool::ToolParams::default();
    assert_eq!(tool.mass_kg, sim_tool.mass_kg);
    assert_eq!(tool.cog_mm, sim_tool.com_m.map(|c| c * 1e3));
    assert_eq!(tool.inertia_kg_m2, sim_tool.inertia_kg_m2);
    // The TCP is the config's tool (tool0 → TCP, identity by default) and the sensor frame is at
    // tool0 (the simulated tool's CoM is given in the sensor frame).
    assert_eq!(tool.tframe_mm, [0.0; 3]);
    assert_eq!(tool.tframe_q, [1.0, 0.0, 0.0, 0.0]);
    assert_eq!(arm.tool, kinematics::FrameParams::identity());
    assert_eq!(arm.sensor_mount, kinematics::FrameParams::identity());
}

#[test]
fn the_simulator_runs_the_shipped_irc5_session() {
    // The emulator's built-in files are the checkout's (what a real controller is loaded with).
    let on_disk = Irc5Egm::load_dir(&repo().join("deploy/irc5")).expect("deploy/irc5");
    let sim = sim::node::EgmSimConfig::default()
        .irc5()
        .expect("the simulator's IRC5 side");
    assert_eq!(sim, on_disk);
}

#[test]
fn every_zenoh_config_parses() {
    let mut n = 0;
    for sub in ["deploy/zenoh", "deploy/zenoh/secure"] {
        let dir = repo().join(sub);
        for e in std::fs::read_dir(&dir).expect(sub).flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json5") {
                zenoh::Config::from_file(&p).unwrap_or_else(|err| panic!("{}: {err}", p.display()));
                n += 1;
            }
        }
    }
    assert!(
        n >= 4,
        "router.json5, pi-sensor.json5 and the two generated access controls at least; found {n}"
    );
}

/// The compose file names only binaries the workspace builds, configs that are shipped, and
/// services the simulated cell runs; the image carries what they read. With Debian's
/// `docker-compose` installed (CI: `.ci/run`, `CELL_REQUIRE_DOCKER_COMPOSE=1`), both profiles
/// also pass `docker-compose config`.
#[test]
fn the_compose_file_names_what_exists() {
    let text = std::fs::read_to_string(repo().join("deploy/compose/docker-compose.yml"))
        .expect("compose file");
    // Binaries: every `cell-NAME` entrypoint is a [[bin]] of a workspace crate.
    let mut bins = Vec::new();
    for e in std::fs::read_dir(repo().join("services"))
        .expect("services")
        .flatten()
    {
        if let Ok(t) = std::fs::read_to_string(e.path().join("Cargo.toml")) {
            for l in t.lines() {
                if let Some(n) = l.trim().strip_prefix("name = \"cell-") {
                    bins.push(format!("cell-{}", n.trim_end_matches('"')));
                }
            }
        }
    }
    let mut named = Vec::new();
    for l in text.lines() {
        let l = l.trim();
        if l.starts_with('#') {
            continue;
        }
        if let Some(rest) = l.strip_prefix("entrypoint: [\"") {
            let bin = rest.split('"').next().unwrap_or_default().to_string();
            assert!(
                bins.contains(&bin),
                "compose names {bin}; the workspace builds {bins:?}"
            );
            named.push(bin);
        }
        // Configs: /etc/cell/config/X.toml is deploy/config/X.toml in the image.
        for part in l.split("/etc/cell/config/").skip(1) {
            let file = part.split(['"', '}']).next().unwrap_or_default();
            assert!(
                repo().join("deploy/config").join(file).is_file(),
                "compose names /etc/cell/config/{file}, not in deploy/config"
            );
        }
    }
    // The simulated cell's services are all there (sim.toml's launcher list, the router aside).
    let sim: toml::Table = std::fs::read_to_string(repo().join("deploy/config/sim.toml"))
        .expect("sim.toml")
        .parse()
        .expect("toml");
    let services = get(&sim, "launcher.services")
        .and_then(|v| v.as_array())
        .expect("launcher.services");
    for s in services {
        let bin = format!("cell-{}", s.as_str().unwrap_or_default());
        assert!(
            named.contains(&bin),
            "compose lacks {bin} (sim.toml runs it)"
        );
    }
    // The image carries what the containers read.
    let docker =
        std::fs::read_to_string(repo().join("deploy/docker/Dockerfile")).expect("Dockerfile");
    for dir in ["deploy/config", "deploy/zenoh", "deploy/irc5"] {
        assert!(
            docker.contains(&format!("COPY {dir} ")),
            "the image does not copy {dir}"
        );
    }
    // Every absolute path a shipped config names under /etc/cell is a file the image copies
    // there (the real config's /etc/cell/zenoh.json5 was not), or the certificates' volume;
    // under /run/cell, the directory the image makes for its user.
    let copies: Vec<(String, String)> = docker
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from") && !l.starts_with(". "))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect();
    for f in ["sim.toml", "sim-secure.toml", "irb120-real.toml"] {
        let t: toml::Table = std::fs::read_to_string(repo().join("deploy/config").join(f))
            .unwrap()
            .parse()
            .unwrap();
        let mut paths = Vec::new();
        fn walk(v: &toml::Value, out: &mut Vec<String>) {
            match v {
                toml::Value::String(s) if s.starts_with('/') => out.push(s.clone()),
                toml::Value::Table(t) => t.values().for_each(|v| walk(v, out)),
                toml::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        walk(&toml::Value::Table(t), &mut paths);
        for p in paths {
            if let Some(rest) = p.strip_prefix("/etc/cell/") {
                let in_image = rest.starts_with("certs")
                    && text.contains("/etc/cell/certs:/etc/cell/certs:ro")
                    || copies.iter().any(|(src, dst)| {
                        dst == &p
                            || (p.starts_with(&format!("{dst}/"))
                                && repo()
                                    .join(src)
                                    .join(p.trim_start_matches(&format!("{dst}/")))
                                    .exists())
                    });
                assert!(in_image, "{f} names {p}, which the image does not contain");
            } else if p.starts_with("/run/cell/") {
                assert!(
                    docker.contains("/run/cell"),
                    "{f} names {p}; the image makes no /run/cell"
                );
            }
        }
    }
    assert!(
        docker.lines().any(|l| l.trim() == "USER cell"),
        "the image runs as root"
    );
    assert!(
        !text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .any(|l| l.contains("cap_add")),
        "compose adds capabilities"
    );
    // docker-compose's own check, when it is installed.
    let require = std::env::var("CELL_REQUIRE_DOCKER_COMPOSE").is_ok_and(|v| v == "1");
    let file = repo().join("deploy/compose/docker-compose.yml");
    for profile in ["sim", "pc"] {
        let out = std::process::Command::new("docker-compose")
            .arg("-f")
            .arg(&file)
            .args(["--profile", profile, "config", "--services"])
            .output();
        match out {
            Ok(o) => {
                assert!(
                    o.status.success(),
                    "docker-compose config (profile {profile}): {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                let listed = String::from_utf8_lossy(&o.stdout).to_string();
                eprintln!(
                    "profile {profile}: {}",
                    listed.split_whitespace().collect::<Vec<_>>().join(" ")
                );
                // (docker-compose 1.29 lists every service whatever the profile.)
                assert!(
                    listed.contains("robot-io") && listed.contains("sim"),
                    "{listed}"
                );
            }
            Err(e) if !require => {
                tests::report(
                    tests::Report::Skip,
                    &format!("docker-compose config: docker-compose not runnable ({e}); apt install docker-compose"),
                );
                return;
            }
            Err(e) => panic!("docker-compose required (CELL_REQUIRE_DOCKER_COMPOSE=1): {e}"),
        }
    }
}

/// Every `cell-NAME` binary a workspace crate declares, and `cell`.
fn workspace_bins() -> Vec<String> {
    let mut bins = vec!["cell".to_string()];
    for e in std::fs::read_dir(repo().join("services"))
        .expect("services")
        .flatten()
    {
        if let Ok(t) = std::fs::read_to_string(e.path().join("Cargo.toml")) {
            for l in t.lines() {
                if let Some(n) = l.trim().strip_prefix("name = \"cell-") {
                    bins.push(format!("cell-{}", n.trim_end_matches('"')));
                }
            }
        }
    }
    bins
}

fn unit_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .next()
}

#[test]
fn the_systemd_units_verify_and_agree_with_the_real_config() {
    let dir = repo().join("deploy/systemd");
    let bins = workspace_bins();
    let real: toml::Table = std::fs::read_to_string(repo().join("deploy/config/irb120-real.toml"))
        .expect("irb120-real.toml")
        .parse()
        .expect("toml");
    let target = std::fs::read_to_string(dir.join("cell.target")).expect("cell.target");
    // A copy whose executables are stubs (systemd-analyze checks that ExecStart exists).
    let tmp = std::env::temp_dir().join(format!("cell-units-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("bin")).unwrap();
    let mut units = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&p).unwrap();
        if name.ends_with(".service") {
            let exec =
                unit_value(&text, "ExecStart").unwrap_or_else(|| panic!("{name}: no ExecStart"));
            let bin_path = exec.split_whitespace().next().unwrap();
            let bin = bin_path.strip_prefix("/usr/local/bin/").unwrap_or_else(|| {
                panic!("{name}: ExecStart {bin_path} is not in /usr/local/bin (docs/deploy.md)")
            });
            assert!(
                bins.iter().any(|b| b == bin),
                "{name} starts {bin}; the workspace builds {bins:?}"
            );
            assert!(
                exec.contains("--config /etc/cell/cell.toml"),
                "{name}: every unit reads /etc/cell/cell.toml: {exec}"
            );
            assert_eq!(unit_value(&text, "PartOf"), Some("cell.target"), "{name}");
            assert_eq!(unit_value(&text, "WantedBy"), Some("cell.target"), "{name}");
            assert!(
                target.contains(name.trim_end_matches(".service")),
                "cell.target does not say where {name} runs (PC or Pi)"
            );
            // Least privilege (issue 44): a system user, no capabilities, no way back to them,
            // and real time left to the limits (never RestrictRealtime).
            assert_eq!(unit_value(&text, "User"), Some("cell"), "{name}: User=");
            assert_eq!(unit_value(&text, "NoNewPrivileges"), Some("yes"), "{name}");
            assert_eq!(
                unit_value(&text, "CapabilityBoundingSet"),
                Some(""),
                "{name}: an empty CapabilityBoundingSet="
            );
            assert_eq!(unit_value(&text, "ProtectSystem"), Some("strict"), "{name}");
            assert!(
                unit_value(&text, "RestrictRealtime").is_none(),
                "{name}: RestrictRealtime would refuse the real-time threads"
            );
            let stub = tmp.join("bin").join(bin);
            std::fs::write(&stub, "#!/bin/sh\nexit 0\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
            let text = text.replace(bin_path, stub.to_str().unwrap());
            std::fs::write(tmp.join(&name), text.clone()).unwrap();
            // The real-time services: the unit grants the priority the real config asks for.
            let svc = bin.trim_start_matches("cell-").replace('-', "_");
            if let Some(prio) =
                get(&real, &format!("{svc}.rt.fifo_priority")).and_then(|v| v.as_integer())
            {
                let limit: i64 = unit_value(&text, "LimitRTPRIO")
                    .unwrap_or_else(|| panic!("{name}: [{svc}.rt] asks for SCHED_FIFO {prio}, the unit grants no LimitRTPRIO"))
                    .parse()
                    .unwrap();
                assert!(
                    limit >= prio,
                    "{name}: LimitRTPRIO {limit} < [{svc}.rt] fifo_priority {prio}"
                );
            }
            if svc == "robot_io" {
                let latch = get(&real, "robot_io.latch_file")
                    .and_then(|v| v.as_str())
                    .unwrap();
                let rd =
                    unit_value(&text, "RuntimeDirectory").expect("robot-io's RuntimeDirectory");
                assert!(
                    latch.starts_with(&format!("/run/{rd}/")),
                    "the latch file {latch} is not in the unit's RuntimeDirectory /run/{rd}"
                );
                assert_eq!(
                    unit_value(&text, "RuntimeDirectoryPreserve"),
                    Some("yes"),
                    "the latch must survive restarts"
                );
            }
        } else {
            std::fs::write(tmp.join(&name), &text).unwrap();
        }
        units.push(tmp.join(&name));
    }
    assert!(units.len() >= 7, "{units:?}");
    // systemd's own check (unknown keys, bad values, missing executables): any output fails.
    let require = std::env::var("CELL_REQUIRE_SYSTEMD_ANALYZE").is_ok_and(|v| v == "1");
    match std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&units)
        .output()
    {
        Ok(o) => {
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                o.status.success() && said.trim().is_empty(),
                "systemd-analyze verify:\n{said}"
            );
            eprintln!("systemd-analyze verify: {} units clean", units.len());
        }
        Err(e) if !require => tests::report(
            tests::Report::Skip,
            &format!("systemd-analyze verify: not runnable ({e}); apt install systemd"),
        ),
        Err(e) => panic!("systemd-analyze required (CELL_REQUIRE_SYSTEMD_ANALYZE=1): {e}"),
    }
    // systemd's exposure score of each service unit, offline, against the gate docs/deploy.md
    // states (its table of scores is the measured one: a hardening line removed fails here).
    let doc = std::fs::read_to_string(repo().join("docs/deploy.md")).expect("docs/deploy.md");
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".service") {
            continue;
        }
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("docs/deploy.md has no exposure row for {name}"));
        let cols: Vec<&str> = row.split('|').map(str::trim).collect();
        let after: f64 = cols[3].split_whitespace().next().unwrap().parse().unwrap();
        let gate: f64 = cols[4]
            .parse()
            .unwrap_or_else(|e| panic!("{row}: gate: {e}"));
        let out = match std::process::Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(format!("--threshold={}", (gate * 10.0).round() as i64))
            .arg(&p)
            .output()
        {
            Ok(o) => o,
            Err(e) if !require => {
                tests::report(
                    tests::Report::Skip,
                    &format!("systemd-analyze security: not runnable ({e})"),
                );
                return;
            }
            Err(e) => panic!("systemd-analyze required: {e}"),
        };
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let score: f64 = text
            .lines()
            .find_map(|l| l.split_once("Overall exposure level for ").map(|(_, r)| r))
            .and_then(|r| r.split(": ").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no exposure level in\n{text}"));
        assert!(
            out.status.success() && score <= gate + 1e-9,
            "{name}: systemd's exposure {score} > the gate {gate} in docs/deploy.md"
        );
        assert!(
            (score - after).abs() < 1e-9,
            "{name}: exposure {score}, docs/deploy.md says {after}: update the table"
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The README's main command (`cargo run --release --bin cell`) and its test command
/// (`cargo test --release --workspace`) resolve every shared dependency with the same features,
/// so CI's one release build serves both (a dev-dependency turning on `errno/std` made the main
/// command rebuild tokio, zenoh and every crate above them: common/Cargo.toml's
/// feature-unification block). Reads `cargo tree` (offline: the lock file and the registry
/// cache the build already used).
#[test]
fn one_feature_set_serves_the_tests_and_the_main_command() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // This host's build is the one shared (and offline, other platforms' packages may not
    // be in the cache).
    let host = tests::host_triple();
    let tree =
        |args: &[&str]| -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
            let out = std::process::Command::new(&cargo)
                .current_dir(repo())
                .args([
                    "tree",
                    "--offline",
                    "--prefix",
                    "none",
                    "--target",
                    &host,
                    "-f",
                    "{p}|{f}",
                ])
                .args(args)
                .output()
                .expect("cargo tree");
            assert!(
                out.status.success(),
                "cargo tree {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut m =
                std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
            for l in String::from_utf8_lossy(&out.stdout).lines() {
                let l = l.replace(" (*)", "");
                if let Some((p, f)) = l.split_once('|') {
                    m.entry(p.trim().to_string()).or_default().extend(
                        f.split(',')
                            .map(|x| x.trim().to_string())
                            .filter(|x| !x.is_empty()),
                    );
                }
            }
            m
        };
    let main = tree(&["-p", "cell", "-e", "normal,build"]);
    let tests = tree(&["--workspace", "-e", "normal,build,dev"]);
    let differ: Vec<String> = main
        .iter()
        .filter_map(|(p, f)| {
            let t = tests.get(p)?;
            (t != f).then(|| {
                format!(
                    "{p}: the tests add {:?}, the main command adds {:?}",
                    t.difference(f).collect::<Vec<_>>(),
                    f.difference(t).collect::<Vec<_>>()
                )
            })
        })
        .collect();
    assert!(
        differ.is_empty(),
        "features differ between `cargo run --bin cell` and `cargo test --workspace` (add them to \
         common/Cargo.toml's feature-unification block):\n{}",
        differ.join("\n")
    );
}

/// deploy/config/sim-secure.toml is sim.toml with `[cell]` secured and nothing else changed (a
/// copy, held here so that the two cannot drift), naming the directory `cell certs init`
/// makes by default.
#[test]
fn sim_secure_is_sim_plus_security() {
    let read = |f: &str| -> toml::Table {
        std::fs::read_to_string(repo().join("deploy/config").join(f))
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .parse()
            .unwrap_or_else(|e| panic!("{f}: {e}"))
    };
    let mut plain = read("sim.toml");
    let mut secure = read("sim-secure.toml");
    let cell = secure.remove("cell").expect("[cell]");
    let plain_cell = plain.remove("cell").expect("[cell]");
    assert_eq!(
        plain, secure,
        "sim-secure.toml differs from sim.toml beyond [cell]"
    );
    assert_eq!(cell.get("id"), plain_cell.get("id"));
    let router = cell.get("router").and_then(|v| v.as_str()).expect("router");
    assert!(router.starts_with("quic/"), "{router}");
    let sec = cell.get("security").expect("[cell.security]");
    assert_eq!(sec.get("profile").and_then(|v| v.as_str()), Some("sim"));
    assert_eq!(
        sec.get("dir").and_then(|v| v.as_str()),
        Some(common::security::SIM_SECURE_CERTS_DIR)
    );
}

/// The Dockerfile's toolchain builds the workspace: its `rust:X.Y` image is at least the
/// workspace's `rust-version` (the foxglove crate raised it to 1.88).
#[test]
fn the_dockerfile_toolchain_meets_the_workspace_rust_version() {
    let ws: toml::Table = std::fs::read_to_string(repo().join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let want = get(&ws, "workspace.package.rust-version")
        .and_then(|v| v.as_str())
        .unwrap()
        .to_string();
    let docker = std::fs::read_to_string(repo().join("deploy/docker/Dockerfile")).unwrap();
    let have = docker
        .lines()
        .find_map(|l| l.strip_prefix("FROM rust:"))
        .and_then(|r| r.split('-').next())
        .unwrap()
        .to_string();
    let ver = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap()).collect() };
    assert!(
        ver(&have) >= ver(&want),
        "Dockerfile builds with rust {have}, the workspace needs {want}"
    );
}
