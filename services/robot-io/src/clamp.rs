//! Releasing a clamp after a protective stop (issue 41).
//!
//! A protective stop on what the arm hit (a force or torque limit, an impact, a collision)
//! holds the arm where it was measured, back along its path ([`crate::supervisor`]'s
//! retrace). That stops the arm driving further in, but where the force stays above the
//! release threshold with the arm still — a part or fixture pushing on the held tool, a
//! retrace too short for a laggier servo — the tool is clamped. Then robot-io moves the held
//! reference slowly **along the measured contact force** (the force the surroundings put on
//! the tool points away from them) until the force is below the threshold, within a travel
//! bound; like a robot controller's collision back-off that relieves the forces after a
//! collision stop.
//!
//! Only a task's unlatched protective end (its force or torque limit) is released: a latched
//! stop (an e-stop, an impact, a saturated sensor, a guide session's stop) holds still until
//! it is reset — in guiding the force after a stop is the operator's hand ([`crate::supervisor`]
//! disarms the release there).
//!
//! Pure: the force (base axes, at the TCP, the force service's filtered estimate; `None` when
//! there is no fresh, usable one) and the cycle's duration come in, a TCP velocity goes out.
//! Without a usable force nothing moves (hold); past the travel bound nothing moves again
//! until the next stop. The speed ramps at `accel_m_s2` both ways.

use nalgebra::Vector3;
use serde::{Deserialize, Serialize};

/// `[robot_io.clamp_release]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClampParams {
    /// Off: a protective stop holds whatever force remains.
    pub enabled: bool,
    /// A contact force above this (N) in a protective hold is a clamp: released down to it.
    /// Set it at or below the smallest `max_force_n` the cell's tasks use.
    pub release_force_n: f64,
    /// Release speed of the TCP (m/s).
    pub speed_m_s: f64,
    /// Its acceleration and deceleration (m/s²).
    pub accel_m_s2: f64,
    /// The most the TCP moves releasing one stop (m); then it holds.
    pub max_travel_m: f64,
}

impl Default for ClampParams {
    fn default() -> Self {
        Self {
            enabled: true,
            release_force_n: 20.0,
            speed_m_s: 0.005,
            accel_m_s2: 0.1,
            max_travel_m: 0.01,
        }
    }
}

impl ClampParams {
    /// Every problem, `(field, why)`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (name, v, lo, hi) in [
            ("release_force_n", self.release_force_n, 1.0, 1000.0),
            ("speed_m_s", self.speed_m_s, 1e-4, 0.05),
            ("accel_m_s2", self.accel_m_s2, 1e-3, 5.0),
            ("max_travel_m", self.max_travel_m, 1e-4, 0.05),
        ] {
            if !(v.is_finite() && v >= lo && v <= hi) {
                out.push((name, format!("{v} must be in [{lo}, {hi}]")));
            }
        }
        out
    }
}

/// Where a release stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ClampState {
    /// No protective hold on what the arm hit.
    #[default]
    Idle,
    /// Held; the force is below the threshold (or nothing moved yet).
    Holding,
    /// Moving along the force.
    Releasing,
    /// No fresh, usable force estimate: holding.
    NoForce,
    /// The travel bound is used up: holding whatever force remains.
    Exhausted,
}

/// One stop's release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClampRelease {
    p: ClampParams,
    state: ClampState,
    speed_m_s: f64,
    dir: Vector3<f64>,
    travelled_m: f64,
    /// The largest force seen in this hold (N).
    peak_n: f64,
}

impl ClampRelease {
    pub fn new(p: ClampParams) -> Self {
        Self {
            p,
            state: ClampState::Idle,
            speed_m_s: 0.0,
            dir: Vector3::zeros(),
            travelled_m: 0.0,
            peak_n: 0.0,
        }
    }

    pub fn params(&self) -> &ClampParams {
        &self.p
    }
    pub fn state(&self) -> ClampState {
        self.state
    }
    pub fn travelled_m(&self) -> f64 {
        self.travelled_m
    }
    pub fn peak_n(&self) -> f64 {
        self.peak_n
    }
    pub fn armed(&self) -> bool {
        self.state != ClampState::Idle
    }

    /// A protective hold on what the arm hit begins: a fresh travel budget.
    pub fn arm(&mut self) {
        if self.p.enabled {
            *self = Self {
                state: ClampState::Holding,
                ..Self::new(self.p)
            };
        }
    }

    /// The hold is over (a new motion, an e-stop, a reset): nothing more moves.
    pub fn disarm(&mut self) {
        self.state = ClampState::Idle;
        self.speed_m_s = 0.0;
    }

    /// One cycle of `dt_s` with the contact force on the tool (N, base axes; `None`: no fresh,
    /// usable estimate). Returns the TCP's velocity (m/s, base axes): zero unless releasing.
    pub fn step(&mut self, force_base_n: Option<Vector3<f64>>, dt_s: f64) -> Vector3<f64> {
        if self.state == ClampState::Idle || !(dt_s.is_finite() && dt_s > 0.0) {
            return Vector3::zeros();
        }
        let force = force_base_n.filter(|f| f.iter().all(|v| v.is_finite()));
        let braking_m = kinematics::brake::braking_distance(self.speed_m_s, self.p.accel_m_s2, 0.0);
        let target = match force {
            None => {
                if self.state != ClampState::Exhausted {
                    self.state = ClampState::NoForce;
                }
                0.0
            }
            Some(f) => {
                let n = f.norm();
                self.peak_n = self.peak_n.max(n);
                if self.state == ClampState::Exhausted
                    || self.travelled_m + braking_m >= self.p.max_travel_m
                {
                    self.state = ClampState::Exhausted;
                    0.0
                } else if n > self.p.release_force_n {
                    self.dir = f / n;
                    self.state = ClampState::Releasing;
                    self.p.speed_m_s
                } else {
                    self.state = ClampState::Holding;
                    0.0
                }
            }
        };
        let dv = self.p.accel_m_s2 * dt_s;
        self.speed_m_s = if target > self.speed_m_s {
            (self.speed_m_s + dv).min(target)
        } else {
            (self.speed_m_s - dv).max(target)
        };
        let remaining = (self.p.max_travel_m - self.travelled_m).max(0.0);
        self.speed_m_s = self.speed_m_s.min(remaining / dt_s);
        self.travelled_m += self.speed_m_s * dt_s;
        self.dir * self.speed_m_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT: f64 = 0.004;

    /// A tool clamped against a spring surface at `x_s` (force along +z on the tool while the
    /// tool is below it): the release moves it out until the force is below the threshold.
    #[test]
    fn a_clamp_is_released_along_the_force_until_below_the_threshold() {
        let mut c = ClampRelease::new(ClampParams::default());
        let k = 2e4;
        let mut z = -0.003; // 3 mm into the surface: 60 N
        let force = |z: f64| Vector3::new(0.0, 0.0, (-z).max(0.0) * k);
        // Not armed: nothing moves.
        assert_eq!(c.step(Some(force(z)), DT), Vector3::zeros());
        c.arm();
        let mut max_v: f64 = 0.0;
        for _ in 0..1000 {
            let v = c.step(Some(force(z)), DT);
            assert!(v.x == 0.0 && v.y == 0.0 && v.z >= 0.0, "{v}");
            max_v = max_v.max(v.z);
            z += v.z * DT;
        }
        let f = force(z).norm();
        assert!(f <= 20.0 && f > 17.0, "released to {f} N");
        assert!((max_v - 0.005).abs() < 1e-9);
        assert_eq!(c.state(), ClampState::Holding);
        assert!((c.travelled_m() - (z + 0.003)).abs() < 1e-9);
        assert!((c.peak_n() - 60.0).abs() < 1e-9);
    }

    #[test]
    fn no_force_or_a_spent_travel_budget_holds() {
        let mut c = ClampRelease::new(ClampParams::default());
        c.arm();
        assert_eq!(c.step(None, DT), Vector3::zeros());
        assert_eq!(c.state(), ClampState::NoForce);
        let nan = Vector3::new(f64::NAN, 0.0, 0.0);
        assert_eq!(c.step(Some(nan), DT), Vector3::zeros());
        // A force that never falls (pushed by something that follows): stops within the
        // travel bound and stays stopped.
        let mut travel = 0.0;
        for _ in 0..2000 {
            let v = c.step(Some(Vector3::new(100.0, 0.0, 0.0)), DT);
            travel += v.norm() * DT;
        }
        assert!(travel <= 0.01 + 1e-12 && travel > 0.0099, "{travel}");
        assert_eq!(c.state(), ClampState::Exhausted);
        assert_eq!(
            c.step(Some(Vector3::new(100.0, 0.0, 0.0)), DT),
            Vector3::zeros()
        );
        // Disarmed (a new motion, an e-stop): nothing.
        c.disarm();
        assert_eq!(
            c.step(Some(Vector3::new(100.0, 0.0, 0.0)), DT),
            Vector3::zeros()
        );
        // Disabled: arming does nothing.
        let mut off = ClampRelease::new(ClampParams {
            enabled: false,
            ..ClampParams::default()
        });
        off.arm();
        assert_eq!(
            off.step(Some(Vector3::new(100.0, 0.0, 0.0)), DT),
            Vector3::zeros()
        );
    }

    #[test]
    fn bad_params_are_named() {
        let p = ClampParams {
            release_force_n: f64::NAN,
            speed_m_s: 1.0,
            max_travel_m: 0.0,
            ..ClampParams::default()
        };
        let names: Vec<_> = p.problems().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["release_force_n", "speed_m_s", "max_travel_m"]);
    }
}
