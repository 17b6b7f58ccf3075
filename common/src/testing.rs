//! Test support for the services' binary-level configuration tests (no zenoh, no clocks):
//! run a service binary with `--check-config` on a config text or on every shipped config.

use std::process::Command;

/// Writes `toml` to a private temporary file and runs `exe --config FILE --check-config
/// [extra…]`; returns the exit code and stderr.
pub fn check_config(exe: &str, extra: &[&str], toml: &str) -> (i32, String) {
    let dir = std::env::temp_dir().join(
        format!(
            "cfgcheck-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        )
        .replace(['(', ')'], ""),
    );
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return (-1, format!("tmp dir: {e}"));
    }
    let file = dir.join("check.toml");
    if let Err(e) = std::fs::write(&file, toml) {
        return (-1, format!("write config: {e}"));
    }
    let out = Command::new(exe)
        .arg("--config")
        .arg(&file)
        .arg("--check-config")
        .args(extra)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Ok(o) => (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).to_string(),
        ),
        Err(e) => (-1, format!("cannot run {exe}: {e}")),
    }
}

/// Asserts that `toml` is refused with exit code 2 and that every key is named.
pub fn assert_rejected_naming(exe: &str, extra: &[&str], toml: &str, keys: &[&str]) {
    let (code, err) = check_config(exe, extra, toml);
    assert_eq!(code, 2, "{exe}: expected exit 2:\n{err}");
    for key in keys {
        assert!(err.contains(key), "{key} not named by {exe} in:\n{err}");
    }
}

/// Asserts that every `deploy/config/*.toml` of the repository passes `--check-config`.
pub fn assert_shipped_configs_valid(exe: &str, extra: &[&str]) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/config");
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    let mut checked = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = Command::new(exe)
                .arg("--config")
                .arg(&path)
                .arg("--check-config")
                .args(extra)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {exe}: {e}"));
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no shipped configs found in {dir}");
}

/// A global allocator for no-allocation tests: the system allocator, counting the
/// allocations (and reallocations) made on this thread while [`allocations_in`] runs. A test
/// binary installs it with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

thread_local! {
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static COUNT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_one() {
    // `try_with`: no panic while the thread's locals are being torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counting touches
// only const-initialised thread locals (no allocation, no lock).
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

/// The allocations `f` makes on this thread (with [`CountingAlloc`] installed; 0 without).
pub fn allocations_in<R>(f: impl FnOnce() -> R) -> (R, u64) {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|on| on.set(true));
    let r = f();
    COUNTING.with(|on| on.set(false));
    (r, COUNT.with(|c| c.get()))
}
