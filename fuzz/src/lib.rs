//! The bodies of the cell's fuzz targets: one public function per target, each feeding bytes
//! from outside to the real decoder (and the code right behind it) and asserting what that code
//! promises. `fuzz_targets/<name>.rs` only wraps [`<name>`](crate) in libFuzzer's entry point;
//! [`seeds`] writes the seed corpus. See `fuzz/README.md`.
//!
//! Input framing of the targets that take several messages (a datagram stream, a TCP byte
//! stream): a sequence of chunks `[head: u8][len: u16 BE][len bytes]`, the last one cut short
//! when the input ends ([`chunks`]). `head` carries per-chunk knobs (a receive-time step, a
//! flag), so every byte string is a valid input.

pub mod scan;
pub mod seeds;
pub mod targets;

pub use targets::*;

/// One chunk of a multi-message input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub head: u8,
    pub body: &'a [u8],
}

/// Splits an input into chunks `[head][len u16 BE][body]` (see the crate docs).
pub fn chunks(mut data: &[u8]) -> Vec<Chunk<'_>> {
    let mut out = Vec::new();
    while let Some((&head, rest)) = data.split_first() {
        let (len, rest) = match rest {
            [a, b, rest @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), rest),
            // No whole length left: the rest is the body.
            _ => {
                out.push(Chunk { head, body: rest });
                break;
            }
        };
        let (body, rest) = rest.split_at(len.min(rest.len()));
        out.push(Chunk { head, body });
        data = rest;
    }
    out
}

/// The inverse of [`chunks`] (seeds, regression inputs).
pub fn join_chunks(parts: &[(u8, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (head, body) in parts {
        let len = u16::try_from(body.len()).unwrap_or(u16::MAX);
        out.push(*head);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&body[..usize::from(len)]);
    }
    out
}

/// A target's body: takes any byte string.
pub type Target = fn(&[u8]);

/// Every target by name, for replaying files through the target functions without libFuzzer
/// (`cargo test` in this crate replays the corpus and the regressions).
pub const TARGETS: [(&str, Target); 11] = [
    ("bus_codec", targets::bus_codec),
    ("egm_robot", targets::egm_robot),
    ("egm_sensor", targets::egm_sensor),
    ("sri_frames", targets::sri_frames),
    ("sri_text", targets::sri_text),
    ("ati_rdt", targets::ati_rdt),
    ("netftapi2", targets::netftapi2),
    ("taskfile", targets::taskfile),
    ("program", targets::program),
    ("cell_config", targets::cell_config),
    ("sim_scenario", targets::sim_scenario),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip_and_take_any_input() {
        let parts: [(u8, &[u8]); 3] = [(1, b"abc"), (2, b""), (3, &[0xff; 300])];
        let bytes = join_chunks(&parts);
        let back: Vec<(u8, &[u8])> = chunks(&bytes).iter().map(|c| (c.head, c.body)).collect();
        assert_eq!(back, parts);
        // Cut anywhere: still chunks, never a panic.
        for cut in 0..bytes.len() {
            let _ = chunks(&bytes[..cut]);
        }
        assert_eq!(chunks(&[7]), vec![Chunk { head: 7, body: &[] }]);
        assert_eq!(
            chunks(&[7, 1]),
            vec![Chunk {
                head: 7,
                body: &[1]
            }]
        );
    }
}
