//! A zenoh client that is not ours sees the cell: the Python `eclipse-zenoh` package lists the
//! liveliness tokens, reads every service's JSON status and hand-decodes a postcard joint state
//! (`tests/python/check_cell.py`). Without the package installed the test is skipped, unless
//! `CELL_REQUIRE_PYTHON_ZENOH=1` (CI sets it) makes that a failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use tests::{live_services, wait_for, TestCell, DEFAULT_SERVICES};

fn python_has_zenoh() -> bool {
    Command::new("python3")
        .args(["-c", "import zenoh"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_eclipse_zenoh_sees_the_cell() {
    let _cell = tests::cell_lock();
    if !python_has_zenoh() {
        tests::require_or_skip(
            "CELL_REQUIRE_PYTHON_ZENOH",
            "python3 has no `zenoh` module (pip install eclipse-zenoh==1.10.2)",
        );
        return;
    }
    let c = TestCell::start("python", &[]);
    let s = c.client().await;
    let up = wait_for(std::time::Duration::from_secs(20), || async {
        (live_services(&s, &c.cell).await == DEFAULT_SERVICES).then_some(())
    })
    .await;
    assert!(up.is_some(), "{}", c.log_text());
    let out = Command::new("python3")
        .arg(tests::repo_root().join("tests/python/check_cell.py"))
        .arg(&c.cell.router)
        .arg(&c.cell.id)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}
