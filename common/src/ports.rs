//! Loopback ports for private cells (tests, `cell experiment`, `cell demo`).
//!
//! The usual trick — bind port 0, read the port, release it — hands out a port from the
//! kernel's *ephemeral* range (Linux: 32768–60999). Between the release and the device
//! emulator's own bind, any outgoing connection on the host (a zenoh session, the sensor
//! driver's TCP connect) may be given that very port as its local end, and the emulator's
//! bind then fails with `EADDRINUSE` (seen in CI: `SRI emulator: bind …: Address already in
//! use`). Ports handed out here come from below the ephemeral range, where the kernel never
//! assigns a local port on its own, and are checked free for both TCP and UDP.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

/// First port handed out.
pub const FIRST_PORT: u16 = 20_000;
/// One past the last port handed out (the default start of Linux's ephemeral range).
pub const END_PORT: u16 = 32_768;

/// 0 = not yet seeded; otherwise the next offset to try, plus one.
static NEXT: AtomicU32 = AtomicU32::new(0);

fn seed() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Processes started together (a test binary and the cells it starts) probe from
    // different places in the range.
    std::process::id()
        .wrapping_mul(7919)
        .wrapping_add(nanos / 1000)
}

fn free(port: u16) -> bool {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    TcpListener::bind(addr).is_ok() && UdpSocket::bind(addr).is_ok()
}

/// A loopback port free for both TCP and UDP right now, outside the ephemeral range; a
/// process never gets the same port twice until it has cycled through the range.
pub fn free_loopback_port() -> std::io::Result<u16> {
    let span = u32::from(END_PORT - FIRST_PORT);
    let _ = NEXT.compare_exchange(0, seed() % span + 1, Ordering::AcqRel, Ordering::Acquire);
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::AcqRel).wrapping_sub(1) % span;
        let port = FIRST_PORT + offset as u16;
        if free(port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free loopback port in {FIRST_PORT}..{END_PORT}"),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_outside_the_ephemeral_range_and_bindable() {
        let ports: Vec<u16> = (0..50).map(|_| free_loopback_port().unwrap()).collect();
        for (i, p) in ports.iter().enumerate() {
            assert!((FIRST_PORT..END_PORT).contains(p), "{p}");
            assert!(!ports[..i].contains(p), "port {p} handed out twice");
        }
        let p = ports[0];
        let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, p);
        TcpListener::bind(addr).unwrap();
        UdpSocket::bind(addr).unwrap();
    }

    #[test]
    fn a_taken_port_is_skipped() {
        let p = free_loopback_port().unwrap();
        // Hold the next candidate so the allocator must pass over it.
        let next = FIRST_PORT
            + ((u32::from(p - FIRST_PORT) + 1) % u32::from(END_PORT - FIRST_PORT)) as u16;
        let _held = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, next));
        let q = free_loopback_port().unwrap();
        assert_ne!(q, next);
    }
}
