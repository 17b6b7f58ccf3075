//! Device sequence-number bookkeeping shared by the SRI (u16 packet number) and ATI (u32 RDT
//! sequence) codecs: counts lost samples with wrapping arithmetic.

use serde::Serialize;

/// Counts gaps in a wrapping sequence counter of `bits` bits (16 or 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SeqTracker {
    bits: u32,
    last: Option<u32>,
    /// Samples missing between consecutive received sequence numbers.
    pub lost: u64,
    /// Events where a sequence number repeated or went backwards (device restart, reorder).
    pub out_of_order: u64,
}

impl SeqTracker {
    pub fn new(bits: u32) -> Self {
        Self {
            bits: bits.clamp(1, 32),
            last: None,
            lost: 0,
            out_of_order: 0,
        }
    }

    fn modulus(&self) -> u64 {
        1u64 << self.bits
    }

    /// Records a received sequence number; returns the number of samples missing before it.
    pub fn observe(&mut self, seq: u32) -> u64 {
        let m = self.modulus();
        let seq = u64::from(seq) % m;
        let gap = match self.last {
            None => 0,
            Some(last) => {
                let delta = (seq + m - u64::from(last)) % m;
                if delta == 0 || delta > m / 2 {
                    self.out_of_order += 1;
                    0
                } else {
                    delta - 1
                }
            }
        };
        self.lost += gap;
        self.last = u32::try_from(seq).ok();
        gap
    }

    /// Forgets the last number (new stream), keeping the counters.
    pub fn restart(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_wrap() {
        let mut t = SeqTracker::new(16);
        assert_eq!(t.observe(65534), 0);
        assert_eq!(t.observe(65535), 0);
        assert_eq!(t.observe(0), 0);
        assert_eq!(t.observe(3), 2);
        assert_eq!(t.lost, 2);
        assert_eq!(t.observe(3), 0);
        assert_eq!(t.out_of_order, 1);
        let mut u = SeqTracker::new(32);
        u.observe(u32::MAX);
        assert_eq!(u.observe(1), 1);
    }
}
