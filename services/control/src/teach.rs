//! The teach buffer: waypoints recorded while guiding (on command, or when the TCP dwells).
//! Pure: times are parameters. Saving a program to a file is the caller's (see
//! [`crate::program`]).

use nalgebra::Isometry3;

/// One recorded point.
#[derive(Debug, Clone, PartialEq)]
pub struct TaughtPoint {
    pub label: String,
    /// Measured joints (rad).
    pub q_rad: [f64; 6],
    /// Measured TCP in base.
    pub tcp: Isometry3<f64>,
    /// When (s, the caller's clock).
    pub t_s: f64,
    /// Recorded by the dwell rule (not by a command).
    pub by_dwell: bool,
}

/// The dwell rule: record when the TCP stayed slower than `speed_m_s` for `dwell_s`, at
/// least `min_distance_m` from the last point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DwellRule {
    pub dwell_s: f64,
    pub speed_m_s: f64,
    pub min_distance_m: f64,
}

/// Recorded points, in order.
#[derive(Debug, Clone, Default)]
pub struct TeachBuffer {
    points: Vec<TaughtPoint>,
    still_since: Option<f64>,
}

/// At most this many points (a program is a list of places, not a trace).
pub const MAX_POINTS: usize = 1000;

impl TeachBuffer {
    pub fn points(&self) -> &[TaughtPoint] {
        &self.points
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Records a point; `Err` when the input is not finite or the buffer is full.
    pub fn record(
        &mut self,
        label: &str,
        q_rad: [f64; 6],
        tcp: Isometry3<f64>,
        t_s: f64,
    ) -> Result<usize, String> {
        self.push(label, q_rad, tcp, t_s, false)
    }

    fn push(
        &mut self,
        label: &str,
        q_rad: [f64; 6],
        tcp: Isometry3<f64>,
        t_s: f64,
        by_dwell: bool,
    ) -> Result<usize, String> {
        if !q_rad.iter().all(|v| v.is_finite())
            || !tcp.translation.vector.iter().all(|v| v.is_finite())
        {
            return Err("the measured pose is not finite".into());
        }
        if self.points.len() >= MAX_POINTS {
            return Err(format!("the teach buffer is full ({MAX_POINTS} points)"));
        }
        let label = if label.is_empty() {
            format!("p{}", self.points.len() + 1)
        } else {
            label.to_string()
        };
        self.points.push(TaughtPoint {
            label,
            q_rad,
            tcp,
            t_s,
            by_dwell,
        });
        Ok(self.points.len() - 1)
    }

    /// Removes the last point.
    pub fn undo(&mut self) -> Option<TaughtPoint> {
        self.points.pop()
    }

    pub fn clear(&mut self) {
        self.points.clear();
        self.still_since = None;
    }

    /// One cycle of the dwell rule with the measured state; `Some(index)` when it recorded.
    pub fn observe_dwell(
        &mut self,
        rule: &DwellRule,
        q_rad: [f64; 6],
        tcp: Isometry3<f64>,
        speed_m_s: f64,
        t_s: f64,
    ) -> Option<usize> {
        if !(speed_m_s.is_finite() && speed_m_s < rule.speed_m_s) {
            self.still_since = None;
            return None;
        }
        let since = *self.still_since.get_or_insert(t_s);
        if t_s - since < rule.dwell_s {
            return None;
        }
        let far = self.points.last().is_none_or(|p| {
            (p.tcp.translation.vector - tcp.translation.vector).norm() >= rule.min_distance_m
        });
        if !far {
            return None;
        }
        self.still_since = None;
        self.push("", q_rad, tcp, t_s, true).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::Translation3;

    fn at(x: f64) -> Isometry3<f64> {
        Isometry3::from_parts(Translation3::new(x, 0.0, 0.3), Default::default())
    }

    #[test]
    fn record_undo_clear() {
        let mut b = TeachBuffer::default();
        assert_eq!(b.record("", [0.0; 6], at(0.3), 0.0), Ok(0));
        assert_eq!(b.record("door", [0.1; 6], at(0.4), 1.0), Ok(1));
        assert_eq!(b.points()[0].label, "p1");
        assert_eq!(b.points()[1].label, "door");
        assert!(b.record("", [f64::NAN; 6], at(0.4), 1.0).is_err());
        assert_eq!(b.undo().map(|p| p.label), Some("door".into()));
        assert_eq!(b.len(), 1);
        b.clear();
        assert!(b.is_empty());
        assert!(b.undo().is_none());
    }

    #[test]
    fn dwell_records_once_per_stop_and_only_away_from_the_last_point() {
        let rule = DwellRule {
            dwell_s: 1.0,
            speed_m_s: 0.003,
            min_distance_m: 0.02,
        };
        let mut b = TeachBuffer::default();
        let mut recorded = Vec::new();
        // Still at 0.3 for 2.5 s: one point after 1 s, not again (same place).
        for k in 0..250 {
            let t = k as f64 * 0.01;
            if let Some(i) = b.observe_dwell(&rule, [0.0; 6], at(0.3), 0.0, t) {
                recorded.push((i, t));
            }
        }
        assert_eq!(recorded.len(), 1);
        assert!((recorded[0].1 - 1.0).abs() < 0.011);
        // Moving: nothing.
        for k in 0..100 {
            let t = 3.0 + k as f64 * 0.01;
            assert!(b
                .observe_dwell(&rule, [0.0; 6], at(0.3 + 0.001 * k as f64), 0.1, t)
                .is_none());
        }
        // Still again 0.1 m away: a second point.
        let mut second = None;
        for k in 0..150 {
            let t = 4.0 + k as f64 * 0.01;
            second = second.or(b.observe_dwell(&rule, [0.0; 6], at(0.4), 0.001, t));
        }
        assert_eq!(second, Some(1));
        assert!(b.points()[1].by_dwell);
    }
}
