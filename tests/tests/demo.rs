//! `cell demo`, the README's main command, end to end: with no cell at the configured router it
//! starts its own private simulated cell, runs every step (tare, payload identification, hand
//! guiding and teaching, save/load/playback, the 10 N table press, the peg-in-hole when the
//! build has it), prints the summary table, writes the plots and `report.html`, ends the private
//! cell and exits 0 only when every step met its tolerance.

use std::time::{Duration, Instant};

use tests::{free_port, repo_root};

#[test]
fn demo_runs_every_step_within_tolerance_and_writes_the_report() {
    let dir = std::env::temp_dir().join(format!("demo-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let router = format!("cell.router=\"tcp/127.0.0.1:{}\"", free_port());
    let t0 = Instant::now();
    let out = std::process::Command::new(tests::bin_dir().join("cell"))
        .current_dir(repo_root())
        .env("CELL_NO_AUTOBUILD", "1")
        .env_remove("CARGO")
        .args(["--set", &router, "demo", "--out"])
        .arg(&dir)
        .output()
        .expect("cell demo");
    let took = t0.elapsed();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("{o}\n(cell demo took {:.0} s)", took.as_secs_f64());
    let log = std::fs::read_to_string(dir.join("cell.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "cell demo failed\nstdout {o}\nstderr {e}\ncell log (tail) {}",
        log.lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The summary: every step named with its verdict, none failed.
    for step in [
        "start the cell",
        "tare",
        "identify the payload",
        "hand-guide and teach 3 waypoints",
        "save, load and play back",
        "press 10 N on the table",
        "peg-in-hole",
    ] {
        assert!(o.contains(step), "summary lacks {step:?}:\n{o}");
    }
    assert!(o.contains("demo PASSED"), "{o}");
    assert!(!o.contains("FAIL "), "{o}");
    // The report and its plots.
    let report = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    assert!(report.contains("<table") && report.contains("data:image/png;base64,"));
    for png in [
        "guiding.png",
        "teach-playback.png",
        "press-table.png",
        "peg-in-hole.png",
    ] {
        let bytes = std::fs::read(dir.join(png)).unwrap_or_else(|_| panic!("{png} missing"));
        assert_eq!(&bytes[1..4], b"PNG", "{png}");
        assert!(report.contains(png), "report.html does not show {png}");
    }
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("summary.json")).expect("summary.json"),
    )
    .expect("summary JSON");
    assert_eq!(summary["passed"], true, "{summary}");
    // It started its own cell and ended it.
    assert!(
        e.contains("starting a private simulated cell") && e.contains("ending the private cell"),
        "{e}"
    );
    // The budget is 2 minutes on the reference machine; here a generous bound
    // (other tests and builds share the machine).
    assert!(took < Duration::from_secs(240), "cell demo took {took:?}");
    let _ = std::fs::remove_dir_all(dir);
}
