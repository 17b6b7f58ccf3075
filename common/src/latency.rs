//! Latency histograms (pure: values in, percentiles out; no clock, no I/O).
//!
//! Log-linear buckets over nanoseconds, like HdrHistogram with 4 significant bits: values
//! below 16 ns have their own bucket, above that every power of two is split into 16 buckets,
//! so a bucket is at most 1/16 (6.25 %) of its value wide. The whole `u64` range fits in
//! [`BUCKETS`] buckets. Percentiles are reported at the bucket's midpoint, never above the
//! largest value recorded.
//!
//! [`Histogram`] is the plain form (one owner); [`AtomicHistogram`] is the lock-free form a
//! subscriber callback records into while the status queryable reads it. Both are allocated
//! once: recording never allocates. [`Histogram::to_sparse`] / [`Histogram::from_sparse`] carry
//! one through a status JSON, and [`Histogram::since`] takes the difference of two snapshots of
//! the same histogram, so a benchmark can measure a window of a long-running service.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Sub-bucket bits: 2^4 = 16 buckets per power of two.
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets covering every `u64`.
pub const BUCKETS: usize = ((64 - SUB_BITS + 1) as usize) * SUB as usize;

/// The bucket of a value (ns).
pub fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = ((v >> shift) & (SUB - 1)) as usize;
    (shift as usize + 1) * SUB as usize + sub
}

/// The values of bucket `i`: `[lower, upper)` (ns).
pub fn bucket_range(i: usize) -> (u64, u64) {
    let sub_n = SUB as usize;
    if i < sub_n {
        return (i as u64, i as u64 + 1);
    }
    let shift = (i / sub_n - 1) as u32;
    let sub = (i % sub_n) as u64;
    let lower = (SUB + sub) << shift;
    let upper = u64::try_from(u128::from(SUB + sub + 1) << shift).unwrap_or(u64::MAX);
    (lower, upper)
}

/// Percentiles of a histogram, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Summary {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

/// A latency histogram (ns).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram (allocates its buckets once).
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }

    /// Records one value (ns). Never allocates.
    pub fn record(&mut self, v: u64) {
        if let Some(c) = self.counts.get_mut(bucket_of(v)) {
            *c += 1;
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest value recorded (ns); for a [`Histogram::since`] difference, the upper edge
    /// of its highest bucket, capped by the newer snapshot's maximum.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value below which a fraction `q` (0–1) of the values lie (ns): the midpoint of the
    /// bucket holding that rank, at most [`Histogram::max`]. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let q = if q.is_finite() {
            q.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bucket_range(i);
                let mid = lo + (hi - lo) / 2;
                return mid.min(self.max).max(lo.min(self.max));
            }
        }
        self.max
    }

    /// p50, p90, p99, p99.9, max and mean in µs.
    pub fn summary(&self) -> Summary {
        let us = |ns: u64| ns as f64 * 1e-3;
        Summary {
            count: self.count,
            p50: us(self.quantile(0.5)),
            p90: us(self.quantile(0.9)),
            p99: us(self.quantile(0.99)),
            p999: us(self.quantile(0.999)),
            max: us(self.max),
            mean: if self.count > 0 {
                us(self.sum) / self.count as f64
            } else {
                0.0
            },
        }
    }

    /// Adds another histogram's values.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    /// The values recorded after `older` (a snapshot of the same histogram taken earlier).
    /// Its maximum is the upper edge of its highest non-empty bucket, capped by `self`'s.
    pub fn since(&self, older: &Histogram) -> Histogram {
        let mut h = Histogram::new();
        let mut top = None;
        for (i, (a, b)) in self.counts.iter().zip(&older.counts).enumerate() {
            let c = a.saturating_sub(*b);
            h.counts[i] = c;
            if c > 0 {
                top = Some(i);
            }
        }
        h.count = self.count.saturating_sub(older.count);
        h.sum = self.sum.saturating_sub(older.sum);
        h.max = top.map_or(0, |i| (bucket_range(i).1 - 1).min(self.max));
        h
    }

    /// The non-empty buckets as `(index, count)`, plus the sum and max, for a status JSON.
    pub fn to_sparse(&self) -> Sparse {
        Sparse {
            buckets: self
                .counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| (i as u32, *c))
                .collect(),
            sum_ns: self.sum,
            max_ns: self.max,
        }
    }

    /// Back from [`Histogram::to_sparse`]; bucket indices out of range are an error.
    pub fn from_sparse(s: &Sparse) -> Result<Histogram, String> {
        let mut h = Histogram::new();
        for &(i, c) in &s.buckets {
            let slot = h
                .counts
                .get_mut(i as usize)
                .ok_or_else(|| format!("bucket {i} out of range (< {BUCKETS})"))?;
            *slot += c;
            h.count += c;
        }
        h.sum = s.sum_ns;
        h.max = s.max_ns;
        Ok(h)
    }
}

/// A histogram's non-empty buckets (see [`Histogram::to_sparse`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Sparse {
    pub buckets: Vec<(u32, u64)>,
    pub sum_ns: u64,
    pub max_ns: u64,
}

/// A histogram recorded from one thread (a subscriber callback) and read from another
/// (status): relaxed atomics, no lock, no allocation per value.
#[derive(Debug)]
pub struct AtomicHistogram {
    counts: Box<[AtomicU64]>,
    count: AtomicU64,
    sum: AtomicU64,
    max: AtomicU64,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicHistogram {
    pub fn new() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Records one value (ns).
    pub fn record(&self, v: u64) {
        if let Some(c) = self.counts.get(bucket_of(v)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.max.fetch_max(v, Ordering::Relaxed);
    }

    /// A copy (counts read one by one: a value recorded meanwhile may be half in).
    pub fn snapshot(&self) -> Histogram {
        let mut h = Histogram::new();
        for (a, b) in h.counts.iter_mut().zip(self.counts.iter()) {
            *a = b.load(Ordering::Relaxed);
        }
        h.count = h.counts.iter().sum();
        h.sum = self.sum.load(Ordering::Relaxed);
        h.max = self.max.load(Ordering::Relaxed);
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_narrow() {
        let mut prev_upper = 0;
        for i in 0..BUCKETS {
            let (lo, hi) = bucket_range(i);
            assert_eq!(lo, prev_upper, "bucket {i}");
            assert!(hi > lo || hi == u64::MAX, "bucket {i}");
            if lo >= 16 {
                assert!(
                    (hi - lo) as f64 <= lo as f64 / 16.0 + 1.0,
                    "bucket {i}: {lo}..{hi}"
                );
            }
            prev_upper = hi;
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(hi - 1), i, "bucket {i}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_within_a_bucket_of_the_exact_ones() {
        let mut h = Histogram::new();
        let mut v: Vec<u64> = (0..10_000u64)
            .map(|i| 1_000 + (i * 7919) % 400_000)
            .collect();
        for x in &v {
            h.record(*x);
        }
        v.sort_unstable();
        for q in [0.5, 0.9, 0.99, 0.999] {
            let exact = v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1] as f64;
            let got = h.quantile(q) as f64;
            assert!(
                (got - exact).abs() <= exact / 16.0 + 1.0,
                "q {q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.quantile(1.0), *v.last().unwrap_or(&0));
        assert_eq!(h.max(), 400_999.min(*v.last().unwrap_or(&0)));
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        assert!(s.p50 < s.p90 && s.p90 < s.p99 && s.p99 <= s.p999 && s.p999 <= s.max);
    }

    #[test]
    fn empty_is_zero_and_sparse_round_trips() {
        let h = Histogram::new();
        assert_eq!(h.summary(), Summary::default());
        let mut h = Histogram::new();
        for x in [5, 17, 17, 250_000, 3_000_000_000] {
            h.record(x);
        }
        let back = Histogram::from_sparse(&h.to_sparse()).expect("round trip");
        assert_eq!(back, h);
        let bad = Sparse {
            buckets: vec![(BUCKETS as u32, 1)],
            ..Default::default()
        };
        assert!(Histogram::from_sparse(&bad).is_err());
    }

    #[test]
    fn since_is_the_window_between_two_snapshots() {
        let a = AtomicHistogram::new();
        for _ in 0..100 {
            a.record(1_000_000); // 1 ms, before the window
        }
        let older = a.snapshot();
        for _ in 0..50 {
            a.record(100_000); // 100 µs in the window
        }
        let newer = a.snapshot();
        let w = newer.since(&older);
        assert_eq!(w.count(), 50);
        let s = w.summary();
        assert!((s.p50 - 100.0).abs() < 100.0 / 16.0, "{s:?}");
        // The window's max is its own bucket's, not the 1 ms before it.
        assert!(s.max < 107.0, "{s:?}");
        let mut m = older.clone();
        m.merge(&w);
        assert_eq!(m.count(), newer.count());
    }
}
