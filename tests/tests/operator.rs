//! Operator errors and bad configuration (issue 23 item 6), through the real `cell` binary:
//!
//! - a corpus of invalid cell configs fails `--check-config` with a non-zero exit, naming every
//!   bad key at once (not only the first);
//! - a corpus of invalid task files is refused by `cell hybrid` before anything moves, naming
//!   the key;
//! - commands given in the wrong mode (against a running cell) are refused with a reason and a
//!   non-zero exit, and nothing moves.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tests::{bin_dir, repo_root, up_all, TestCell};

fn cell(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(bin_dir().join("cell"))
        .current_dir(repo_root())
        .args(["--config", "deploy/config/sim.toml"])
        .args(args)
        .output()
        .expect("run cell");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout),
    )
}

/// Each entry: the `--set` overrides and the keys the error must name.
const BAD_CONFIGS: &[(&[&str], &[&str])] = &[
    (
        &["robot_io.command_timeout_ms=-1"],
        &["robot_io.command_timeout_ms"],
    ),
    (&["force.cutoff_hz=0"], &["force.cutoff_hz"]),
    (&["force.stale_ms=nan"], &["force.stale_ms"]),
    (
        &["control.guide.max_speed_m_s=-0.1"],
        &["control.guide.max_speed_m_s"],
    ),
    (&["sensor.driver=\"usb\""], &["sensor.driver"]),
    (&["sim.egm.cycle_ms=3.3"], &["sim.egm.cycle_ms"]),
    (
        // Several problems at once: every one listed.
        &[
            "force.cutoff_hz=-5",
            "control.guide.deadman_timeout_s=0",
            "robot_io.command_timeout_ms=0",
        ],
        &[
            "force.cutoff_hz",
            "control.guide.deadman_timeout_s",
            "robot_io.command_timeout_ms",
        ],
    ),
];

#[test]
fn invalid_configs_fail_at_start_naming_every_bad_key() {
    let _cell = tests::cell_lock();
    let (ok, out) = cell(&["--check-config", "up"]);
    assert!(ok, "the shipped config must validate: {out}");
    for (sets, keys) in BAD_CONFIGS {
        let mut args = Vec::new();
        for s in *sets {
            args.push("--set");
            args.push(s);
        }
        args.push("--check-config");
        args.push("up");
        let (ok, out) = cell(&args);
        assert!(!ok, "{sets:?} was accepted: {out}");
        for k in *keys {
            assert!(
                out.contains(k),
                "{sets:?}: the error does not name {k}: {out}"
            );
        }
    }
}

/// Each entry: a change to `tasks/press-table.toml` and the key the refusal must name.
const BAD_TASKS: &[(&str, &str, &str)] = &[
    ("z = 10.0", "z = nan", "reference.z"),
    ("z = 10.0", "z = 10.0\nq = 1.0", "unknown field `q`"),
    ("force_axes = [\"z\"]", "force_axes = [\"q\"]", "force_axes"),
    ("duration_s = 9.0", "duration_s = -1.0", "duration_s"),
    ("robot = \"arm\"", "robot = \"crane\"", "robot"),
    (
        "frame_rpy_deg = [180.0, 0.0, 0.0]",
        "frame_rpy_deg = [180.0, 0.0]",
        "frame_rpy_deg",
    ),
    (
        "duration_s = 9.0",
        "duration_s = 9.0\n[limits]\nmax_force_n = -1.0",
        "limits.max_force_n",
    ),
    ("from_contact = true", "from_contact = 1", "boolean"),
];

#[test]
fn invalid_task_files_are_refused_naming_the_key() {
    let _cell = tests::cell_lock();
    let good = std::fs::read_to_string(repo_root().join("tasks/press-table.toml")).unwrap();
    let dir = std::env::temp_dir().join(format!("cell-bad-tasks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (from, to, key)) in BAD_TASKS.iter().enumerate() {
        assert!(good.contains(from), "the shipped task has no {from:?}");
        let path = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, good.replacen(from, to, 1)).unwrap();
        // No cell runs at this router: a task that got past its checks would fail on the bus
        // instead, which the assertion on the key tells apart.
        let (ok, out) = cell(&[
            "--set",
            "cell.router=\"tcp/127.0.0.1:9\"",
            "hybrid",
            path.to_str().unwrap(),
        ]);
        assert!(!ok, "{to:?} was accepted: {out}");
        assert!(
            out.contains(key),
            "{to:?}: the refusal does not name {key}: {out}"
        );
    }
}

/// Commands that do not fit the cell's mode: refused with the reason, exit non-zero, nothing
/// moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_in_the_wrong_mode_are_refused_with_a_reason() {
    let _cell = tests::cell_lock();
    let c = TestCell::start("operator", &[]);
    let s = up_all(&c).await;
    let js = s
        .declare_subscriber(common::topic::JOINT_STATE.key(&c.cell.id))
        .with(zenoh::handlers::FifoChannel::new(16384))
        .await
        .unwrap();
    let cases: &[(&[&str], &str)] = &[
        // No playback runs.
        (&["playback", "pause"], "no playback is running"),
        // No such program.
        (&["play", "no-such-program"], "no-such-program"),
        // Never tared: a force task is refused.
        (&["hybrid", "tasks/press-table.toml"], "NotTared"),
        // Nothing taught yet.
        (&["teach", "save", "x"], "teach buffer is empty"),
        (&["teach", "undo"], "teach buffer is empty"),
        // Probing a fixture needs a tared wrench too.
        (&["identify", "stiffness", "--into=-z"], "NotTared"),
    ];
    for (args, why) in cases {
        let (ok, out, err) = c.cli(args);
        eprintln!(
            "cell {}: ok {ok}: {}{}",
            args.join(" "),
            out.trim(),
            err.trim()
        );
        assert!(!ok, "cell {args:?} was accepted: {out}");
        assert!(
            (out.clone() + &err).contains(why),
            "cell {args:?}: the refusal does not say {why:?}: {out}{err}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut q: Vec<common::msg::JointState> = Vec::new();
    while let Ok(Some(sample)) = js.try_recv() {
        if let Ok(m) = common::codec::decode(&sample.payload().to_bytes()) {
            q.push(m);
        }
    }
    assert!(q.len() > 100, "{} joint states", q.len());
    assert!(
        tests::joint_spread(&q) < 1e-6,
        "the robot moved {} rad",
        tests::joint_spread(&q)
    );
}
