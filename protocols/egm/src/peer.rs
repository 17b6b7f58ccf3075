//! The EGM controller's address: who may drive an EGM session (pure, std types only).
//!
//! robot-io's UDP socket answers whoever sends it a datagram, and a datagram decides the
//! session (a sequence number of 0 is a controller restart), feeds the supervisor and is
//! published as the robot's joint state. A [`PeerPin`] names the one controller that may: a
//! datagram from anyone else is dropped before any of that (no reply, no joint state, no
//! session change), counted and reported.
//!
//! The IRC5 chooses its own source port unless its SIO `UDPUC` entry fixes one
//! (`-LocalPortNumber 0`, the default shipped in `deploy/irc5/SIO_cell.cfg`): pin the address
//! only then. A port, when given, must match too.

use std::net::{IpAddr, SocketAddr};

/// The pinned controller: an address, and a port when the controller's is fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerPin {
    pub ip: IpAddr,
    pub port: Option<u16>,
}

impl PeerPin {
    /// `a.b.c.d`, `a.b.c.d:port`, `::1` or `[::1]:port`. Unspecified (`0.0.0.0`, `::`) and
    /// multicast addresses, and port 0, are refused: they pin nothing.
    pub fn parse(s: &str) -> Result<PeerPin, String> {
        let s = s.trim();
        let pin = if let Ok(a) = s.parse::<SocketAddr>() {
            if a.port() == 0 {
                return Err(format!(
                    "{s:?}: port 0 pins nothing (give no port to admit any)"
                ));
            }
            PeerPin {
                ip: a.ip(),
                port: Some(a.port()),
            }
        } else if let Ok(ip) = s.parse::<IpAddr>() {
            PeerPin { ip, port: None }
        } else {
            return Err(format!(
                "{s:?} is not an IP address with an optional port (192.168.125.1, 192.168.125.1:6511, [fe80::1]:6511); host names are not resolved"
            ));
        };
        if pin.ip.is_unspecified() || pin.ip.is_multicast() {
            return Err(format!(
                "{s:?}: an unspecified or multicast address pins nothing: give the controller's own address"
            ));
        }
        Ok(pin)
    }

    /// Whether a datagram from `from` is the controller's. An IPv4 sender seen through an
    /// IPv6 socket (`::ffff:a.b.c.d`) is compared as IPv4.
    pub fn admits(&self, from: SocketAddr) -> bool {
        let ip = match from.ip() {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        ip == self.ip && self.port.is_none_or(|p| p == from.port())
    }

    /// The pin as `ip[:port]`.
    pub fn describe(&self) -> String {
        match self.port {
            Some(p) => SocketAddr::new(self.ip, p).to_string(),
            None => self.ip.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().expect("a socket address")
    }

    #[test]
    fn a_pin_admits_only_its_address_and_port() {
        let pin = PeerPin::parse("127.0.0.1:6511").expect("a pin");
        assert!(pin.admits(a("127.0.0.1:6511")));
        assert!(!pin.admits(a("127.0.0.1:6512")), "another port");
        assert!(!pin.admits(a("127.0.0.2:6511")), "another loopback address");
        assert!(
            pin.admits(a("[::ffff:127.0.0.1]:6511")),
            "IPv4 through IPv6"
        );
        assert!(!pin.admits(a("[::ffff:127.0.0.2]:6511")));
        assert!(!pin.admits(a("[::1]:6511")));
        // An address-only pin admits any source port of that address, nothing else.
        let ip_only = PeerPin::parse("192.168.125.1").expect("a pin");
        assert!(ip_only.admits(a("192.168.125.1:1024")));
        assert!(ip_only.admits(a("192.168.125.1:60000")));
        assert!(!ip_only.admits(a("192.168.125.2:60000")));
        let v6 = PeerPin::parse("[fe80::1]:6511").expect("a pin");
        assert!(v6.admits(a("[fe80::1]:6511")) && !v6.admits(a("[fe80::2]:6511")));
        assert_eq!(pin.describe(), "127.0.0.1:6511");
        assert_eq!(ip_only.describe(), "192.168.125.1");
    }

    #[test]
    fn a_pin_that_pins_nothing_is_refused() {
        for bad in [
            "0.0.0.0",
            "0.0.0.0:6511",
            "::",
            "[::]:6511",
            "224.0.0.1",
            "127.0.0.1:0",
            "irc5.local",
            "",
            "127.0.0.1:70000",
        ] {
            assert!(PeerPin::parse(bad).is_err(), "{bad}");
        }
    }
}
