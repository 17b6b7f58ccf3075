//! The monotonic clock used in message stamps (shell code only: cores take time as a parameter).

/// CLOCK_MONOTONIC in nanoseconds: comparable between processes on one host.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Age of a stamp in seconds, as seen now on this host (negative clamps to 0).
pub fn age_s(source_mono_ns: u64) -> f64 {
    mono_ns().saturating_sub(source_mono_ns) as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic() {
        let a = super::mono_ns();
        let b = super::mono_ns();
        assert!(a > 0 && b >= a);
    }
}
