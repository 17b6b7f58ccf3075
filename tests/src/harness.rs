//! What every whole-cell test shares besides the cell itself: the tier it runs in, the one
//! lock that keeps two cells off the 2 cores at once, and the report of retries and skips
//! that `.ci/run` prints at its end (`cargo test` hides a passing test's stderr).

use std::{
    io::Write,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex, MutexGuard,
    },
};

/// The full tier (`CELL_TIER=full`, `.ci/full`): every long form — the whole fault matrix, every
/// world, the 10-minute soak. Unset (the per-change tier, `.ci/run` and a developer's
/// `cargo test`): one representative case per fault class and mode.
pub fn full_tier() -> bool {
    std::env::var("CELL_TIER").is_ok_and(|v| v == "full")
}

/// What a report line records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// A step run again after a proven cause (a host stall, a named transient).
    Retry,
    /// A test (or part of one) that did not run for a missing capability.
    Skip,
    /// A figure a test measures but does not gate (a goal beside its gate).
    Figure,
}

impl Report {
    fn tag(self) -> &'static str {
        match self {
            Report::Retry => "retry",
            Report::Skip => "skip",
            Report::Figure => "figure",
        }
    }
}

/// The report file: `CELL_TEST_REPORT`, else `cell-test-report.txt` in the system's temp dir.
pub fn report_path() -> std::path::PathBuf {
    std::env::var_os("CELL_TEST_REPORT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("cell-test-report.txt"))
}

/// Appends one line `kind<TAB>test<TAB>what` to the report (and to stderr). The test is the
/// libtest thread's name (the test's path), or the binary's name outside one.
pub fn report(kind: Report, what: &str) {
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(str::to_string)
        .unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_name().map(|f| f.to_string_lossy().to_string()))
                .unwrap_or_else(|| "?".into())
        });
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|f| f.to_string_lossy().to_string()))
        .map(|s| s.split('-').next().unwrap_or("").to_string())
        .unwrap_or_default();
    let what = what.replace(['\n', '\t'], " ");
    eprintln!("[{}] {bin}::{test}: {what}", kind.tag());
    let line = format!("{}\t{bin}::{test}\t{what}\n", kind.tag());
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(report_path())
    {
        Ok(mut f) => {
            // One write call per line: appends from parallel tests do not interleave.
            let _ = f.write_all(line.as_bytes());
        }
        Err(e) => eprintln!("test report {}: {e}", report_path().display()),
    }
}

/// A capability a test needs and the host may lack. With `<var>=1` (CI provides it) its
/// absence fails the test with `why`; without, the skip is reported and the caller goes on
/// without it.
pub fn require_or_skip(var: &str, why: &str) {
    if std::env::var(var).is_ok_and(|v| v == "1") {
        panic!("{why} ({var}=1: required here)");
    }
    report(Report::Skip, why);
}

static IN_PROCESS: Mutex<()> = Mutex::new(());
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Held while a test runs a cell: one cell at a time on the machine, across the threads of
/// one test binary (a mutex) and across processes (an exclusive `flock` on a file in the temp
/// dir), so no two cells share the 2 cores and no figure measures another test's cell.
pub struct CellLock {
    _file: std::fs::File,
    _guard: MutexGuard<'static, ()>,
}

impl Drop for CellLock {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
        // The flock goes with the file's close, the mutex with the guard.
    }
}

/// Takes the cell lock (blocking). Take it once, first thing, in every test that starts a
/// cell: a `TestCell`, `cell demo`, `cell experiment`, `cell bench`, `cell up` of its own.
pub fn cell_lock() -> CellLock {
    cell_lock_at(&std::env::temp_dir().join("cell-tests.lock"))
}

fn cell_lock_at(path: &std::path::Path) -> CellLock {
    let guard = IN_PROCESS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cell lock {}: {e}", path.display()));
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor this function owns.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if r == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            panic!("cell lock {}: {e}", path.display());
        }
    }
    HELD.fetch_add(1, Ordering::SeqCst);
    CellLock {
        _file: file,
        _guard: guard,
    }
}

/// Panics when a cell is started without the lock (every cell-starting test takes it).
pub fn assert_cell_lock_held(name: &str) {
    assert!(
        HELD.load(Ordering::SeqCst) > 0,
        "test cell {name} started without tests::cell_lock(): take it first in the test"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_excludes_a_second_holder_until_dropped() {
        // A lock file of its own: a cell test elsewhere on the machine may hold the real one.
        let path = std::env::temp_dir().join(format!("cell-lock-test-{}", std::process::id()));
        let a = cell_lock_at(&path);
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = path.clone();
        let t = std::thread::spawn(move || {
            let _b = cell_lock_at(&p2);
            tx.send(()).ok();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(a);
        assert!(rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok());
        t.join().ok();
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn a_report_line_names_its_test() {
        let path = std::env::temp_dir().join(format!("cell-report-{}.txt", std::process::id()));
        std::env::set_var("CELL_TEST_REPORT", &path);
        report(Report::Skip, "no netns\there");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::remove_file(&path).ok();
        assert!(text.starts_with("skip\t"), "{text}");
        assert!(text.contains("a_report_line_names_its_test"), "{text}");
        assert!(text.contains("no netns here"), "{text}");
    }
}
