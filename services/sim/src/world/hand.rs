//! The virtual operator's hand (lead-through): a spring–damper that pulls the TCP towards an
//! attractor point moving along a path.
//!
//! The attractor starts at `path[0]` at `start_s` and moves along the polyline at `speed_m_s`;
//! it waits while the TCP lags more than `max_lead_m` behind it (an operator does not walk
//! away from the tool), stops at the last point and, if `release_after_s` is set, lets go that
//! long after arriving. The force on the tool at the TCP (base) is
//!
//! ```text
//! F = K (p_att − p_tcp) + D (v_att − v_tcp),   scaled down to |F| ≤ max_force_n
//! ```
//!
//! plus an optional constant torque `torque_nm` (base) while the hand holds the tool.
//!
//! Times (`start_s`, the release) are scenario times measured from the hand's trigger origin:
//! scenario time 0 (`trigger = "time"`, default) or the first contact of the tool with any
//! surface after the trigger was armed (`trigger = "contact"`, see [`super::trigger`]).

use nalgebra::Vector3;
use serde::{Deserialize, Serialize};

use super::trigger::{Trigger, TriggerClock, TriggerStatus};

/// `[hand]` in a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HandParams {
    /// Whether the hand acts at all.
    pub enabled: bool,
    /// Path points (m, base), ≥ 1 when enabled.
    pub path: Vec<[f64; 3]>,
    /// Speed of the attractor along the path (m/s), in [0, 2].
    pub speed_m_s: f64,
    /// Spring stiffness (N/m), ≥ 0.
    pub stiffness_n_per_m: f64,
    /// Damping (N·s/m), ≥ 0.
    pub damping_n_s_per_m: f64,
    /// Force saturation (N), > 0.
    pub max_force_n: f64,
    /// Time the hand grabs the tool (s), ≥ 0.
    pub start_s: f64,
    /// The attractor waits while it is farther than this from the TCP (m), > 0; `None` = never
    /// waits (pure function of time).
    pub max_lead_m: Option<f64>,
    /// Let go this long after reaching the end of the path (s); `None` = hold forever.
    pub release_after_s: Option<f64>,
    /// Constant torque applied while holding (N·m, base).
    pub torque_nm: [f64; 3],
    /// What `start_s` counts from: `"time"` (default) or `"contact"` (first contact of the
    /// tool with any surface after the trigger was armed).
    pub trigger: Trigger,
}

impl Default for HandParams {
    fn default() -> Self {
        Self {
            enabled: false,
            path: Vec::new(),
            speed_m_s: 0.05,
            stiffness_n_per_m: 300.0,
            damping_n_s_per_m: 20.0,
            max_force_n: 30.0,
            start_s: 0.0,
            max_lead_m: None,
            release_after_s: None,
            torque_nm: [0.0; 3],
            trigger: Trigger::Time,
        }
    }
}

fn bad(v: f64, lo: f64, hi: f64) -> bool {
    !v.is_finite() || v < lo || v > hi
}

impl HandParams {
    /// Every problem, keys prefixed with `prefix`.
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        if self.enabled && self.path.is_empty() {
            e.push(format!(
                "{prefix}.path: needs at least one point when enabled"
            ));
        }
        for (i, p) in self.path.iter().enumerate() {
            for (k, v) in p.iter().enumerate() {
                if bad(*v, -5.0, 5.0) {
                    e.push(format!(
                        "{prefix}.path[{i}][{k}]: must be finite and within ±5 m (got {v})"
                    ));
                }
            }
        }
        if bad(self.speed_m_s, 0.0, 2.0) {
            e.push(format!(
                "{prefix}.speed_m_s: must be in [0, 2] m/s (got {})",
                self.speed_m_s
            ));
        }
        if bad(self.stiffness_n_per_m, 0.0, 1e5) {
            e.push(format!(
                "{prefix}.stiffness_n_per_m: must be in [0, 1e5] N/m (got {})",
                self.stiffness_n_per_m
            ));
        }
        if bad(self.damping_n_s_per_m, 0.0, 1e4) {
            e.push(format!(
                "{prefix}.damping_n_s_per_m: must be in [0, 1e4] N·s/m (got {})",
                self.damping_n_s_per_m
            ));
        }
        if bad(self.max_force_n, 0.0, 1e3) || self.max_force_n == 0.0 {
            e.push(format!(
                "{prefix}.max_force_n: must be in (0, 1000] N (got {})",
                self.max_force_n
            ));
        }
        if bad(self.start_s, 0.0, 1e6) {
            e.push(format!(
                "{prefix}.start_s: must be finite and >= 0 (got {})",
                self.start_s
            ));
        }
        if let Some(l) = self.max_lead_m {
            if bad(l, 0.0, 10.0) || l == 0.0 {
                e.push(format!(
                    "{prefix}.max_lead_m: must be in (0, 10] m (got {l})"
                ));
            }
        }
        if let Some(r) = self.release_after_s {
            if bad(r, 0.0, 1e6) {
                e.push(format!(
                    "{prefix}.release_after_s: must be finite and >= 0 (got {r})"
                ));
            }
        }
        for (k, v) in self.torque_nm.iter().enumerate() {
            if bad(*v, -100.0, 100.0) {
                e.push(format!(
                    "{prefix}.torque_nm[{k}]: must be within ±100 N·m (got {v})"
                ));
            }
        }
        e
    }
}

/// What the hand does this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HandOutput {
    /// Whether the hand holds the tool.
    pub active: bool,
    /// Force on the tool at the TCP (N, base).
    pub force: Vector3<f64>,
    /// Torque on the tool (N·m, base).
    pub torque: Vector3<f64>,
    /// Attractor position (m, base).
    pub target: Vector3<f64>,
    /// The spring–damper force was clipped to `max_force_n`.
    pub saturated: bool,
    /// The attractor reached the end of the path.
    pub at_end: bool,
}

/// The hand with its progress along the path.
#[derive(Debug, Clone)]
pub struct Hand {
    params: HandParams,
    points: Vec<Vector3<f64>>,
    length: f64,
    s: f64,
    end_time: Option<f64>,
    clock: TriggerClock,
}

impl Hand {
    /// A hand at the start of its path.
    pub fn new(params: HandParams) -> Self {
        let points: Vec<Vector3<f64>> = params.path.iter().map(|p| Vector3::from(*p)).collect();
        let length = points.windows(2).map(|w| (w[1] - w[0]).norm()).sum();
        let clock = TriggerClock::new(params.trigger);
        Self {
            params,
            points,
            length,
            s: 0.0,
            end_time: None,
            clock,
        }
    }

    /// New parameters, keeping the progress along the path (clamped to the new path's length),
    /// the arrival time and, when its kind is unchanged, the trigger's state.
    pub fn set_params(&mut self, params: HandParams) {
        let mut h = Hand::new(params);
        h.s = self.s.min(h.length);
        h.end_time = if h.s >= h.length { self.end_time } else { None };
        h.clock = TriggerClock::carried_from(h.params.trigger, Some(&self.clock));
        *self = h;
    }

    /// Tells the hand's trigger whether the tool touches anything at scenario time `t`.
    pub fn observe_contact(&mut self, in_contact: bool, t: f64) {
        self.clock.observe(in_contact, t);
    }

    /// Re-arms a `contact` trigger (the hand lets go until the next contact).
    pub fn arm_trigger(&mut self) {
        self.clock.arm();
    }

    /// The trigger's state.
    pub fn trigger_status(&self) -> TriggerStatus {
        self.clock.status()
    }

    /// Parameters.
    pub fn params(&self) -> &HandParams {
        &self.params
    }

    /// Path length (m).
    pub fn path_length(&self) -> f64 {
        self.length
    }

    /// Arc length travelled by the attractor (m).
    pub fn progress(&self) -> f64 {
        self.s
    }

    /// Back to the start of the path, trigger re-armed.
    pub fn reset(&mut self) {
        self.s = 0.0;
        self.end_time = None;
        self.clock.arm();
    }

    /// Point and unit tangent at arc length `s`.
    fn point_at(&self, s: f64) -> (Vector3<f64>, Vector3<f64>) {
        let Some(first) = self.points.first() else {
            return (Vector3::zeros(), Vector3::zeros());
        };
        let mut rest = s.max(0.0);
        let mut last = (*first, Vector3::zeros());
        for w in self.points.windows(2) {
            let d = w[1] - w[0];
            let l = d.norm();
            if l <= 0.0 {
                continue;
            }
            let dir = d / l;
            if rest <= l {
                return (w[0] + dir * rest, dir);
            }
            rest -= l;
            last = (w[1], dir);
        }
        last
    }

    /// The hand's action at scenario time `t` (s) over a step of `dt` (s), given the TCP
    /// position and velocity (base). Advances the attractor by `speed·dt` unless it is
    /// waiting.
    pub fn step(
        &mut self,
        tcp: &Vector3<f64>,
        v_tcp: &Vector3<f64>,
        t: f64,
        dt: f64,
    ) -> HandOutput {
        let p = &self.params;
        // The hand's own time (from its trigger's origin); none while the trigger waits.
        let Some(t) = self.clock.local_time(t) else {
            return HandOutput::default();
        };
        if !p.enabled || self.points.is_empty() || t < p.start_s {
            return HandOutput::default();
        }
        if let (Some(te), Some(r)) = (self.end_time, p.release_after_s) {
            if t >= te + r {
                let (target, _) = self.point_at(self.s);
                return HandOutput {
                    target,
                    at_end: true,
                    ..Default::default()
                };
            }
        }
        let (target, dir) = self.point_at(self.s);
        let lagging = p.max_lead_m.is_some_and(|l| (target - tcp).norm() > l);
        let moving = self.s < self.length && !lagging && p.speed_m_s > 0.0;
        let v_att = if moving {
            dir * p.speed_m_s
        } else {
            Vector3::zeros()
        };
        let mut force =
            (target - tcp) * p.stiffness_n_per_m + (v_att - v_tcp) * p.damping_n_s_per_m;
        let mag = force.norm();
        let saturated = mag > p.max_force_n;
        if saturated {
            force *= p.max_force_n / mag;
        }
        if moving && dt.is_finite() && dt > 0.0 {
            self.s = (self.s + p.speed_m_s * dt).min(self.length);
        }
        let at_end = self.s >= self.length;
        if at_end && self.end_time.is_none() {
            self.end_time = Some(t);
        }
        HandOutput {
            active: true,
            force,
            torque: Vector3::from(p.torque_nm),
            target,
            saturated,
            at_end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn params() -> HandParams {
        HandParams {
            enabled: true,
            path: vec![[0.4, 0.0, 0.3], [0.4, 0.2, 0.3]],
            speed_m_s: 0.1,
            stiffness_n_per_m: 500.0,
            damping_n_s_per_m: 10.0,
            max_force_n: 20.0,
            ..Default::default()
        }
    }

    #[test]
    fn spring_pulls_towards_target() {
        let mut h = Hand::new(params());
        let tcp = Vector3::new(0.39, 0.0, 0.3);
        let o = h.step(&tcp, &Vector3::zeros(), 0.0, 0.004);
        // K·1 cm = 5 N along +x, plus D·v_att = 1 N along +y.
        assert!((o.force - Vector3::new(5.0, 1.0, 0.0)).norm() < 1e-12);
        assert!(!o.saturated && o.active);
    }

    #[test]
    fn saturates_at_max_force_keeping_direction() {
        let mut h = Hand::new(params());
        let tcp = Vector3::new(0.0, 0.0, 0.0);
        let o = h.step(&tcp, &Vector3::zeros(), 0.0, 0.004);
        assert!(o.saturated);
        assert!((o.force.norm() - 20.0).abs() < 1e-12);
        let dir = Vector3::new(0.4, 0.0, 0.3) * 500.0 + Vector3::new(0.0, 1.0, 0.0);
        assert!(o.force.normalize().cross(&dir.normalize()).norm() < 1e-12);
    }

    #[test]
    fn moves_along_path_at_speed_and_stops() {
        let mut h = Hand::new(params());
        let dt = 0.004;
        let mut o = HandOutput::default();
        for k in 0..600 {
            let t = k as f64 * dt;
            o = h.step(&o.target, &Vector3::zeros(), t, dt);
            if k == 100 {
                // 100 steps × 0.4 mm = 40 mm along +y.
                assert!((o.target - Vector3::new(0.4, 0.04, 0.3)).norm() < 1e-12);
            }
        }
        assert!(o.at_end);
        assert!((o.target - Vector3::new(0.4, 0.2, 0.3)).norm() < 1e-12);
        assert!((h.progress() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn waits_for_a_lagging_tool_and_releases() {
        let mut p = params();
        p.max_lead_m = Some(0.05);
        p.release_after_s = Some(0.1);
        let mut h = Hand::new(p);
        let far = Vector3::new(0.4, -0.1, 0.3);
        for k in 0..100 {
            h.step(&far, &Vector3::zeros(), k as f64 * 0.004, 0.004);
        }
        assert_eq!(h.progress(), 0.0, "waited");
        // Tool follows exactly: reaches the end, then lets go after 0.1 s.
        let mut t = 0.4;
        let mut o = HandOutput::default();
        let mut tcp = Vector3::new(0.4, 0.0, 0.3);
        while t < 3.0 {
            o = h.step(&tcp, &Vector3::zeros(), t, 0.004);
            tcp = o.target;
            t += 0.004;
        }
        assert!(o.at_end && !o.active && o.force == Vector3::zeros());
    }

    #[test]
    fn inactive_before_start_and_when_disabled() {
        let mut p = params();
        p.start_s = 1.0;
        let mut h = Hand::new(p.clone());
        assert!(
            !h.step(&Vector3::zeros(), &Vector3::zeros(), 0.5, 0.004)
                .active
        );
        assert!(
            h.step(&Vector3::zeros(), &Vector3::zeros(), 1.0, 0.004)
                .active
        );
        p.enabled = false;
        let mut h = Hand::new(p);
        assert!(
            !h.step(&Vector3::zeros(), &Vector3::zeros(), 2.0, 0.004)
                .active
        );
    }

    #[test]
    fn contact_trigger_starts_the_hand_after_contact() {
        let mut p = params();
        p.start_s = 0.2;
        p.trigger = Trigger::Contact;
        let mut h = Hand::new(p);
        let tcp = Vector3::new(0.4, 0.0, 0.3);
        // No contact for 2 s: never active, the attractor does not move.
        for k in 0..500 {
            let t = k as f64 * 0.004;
            h.observe_contact(false, t);
            assert!(!h.step(&tcp, &Vector3::zeros(), t, 0.004).active);
        }
        assert_eq!(h.progress(), 0.0);
        // Contact at t = 2.0: active from 2.2 on.
        h.observe_contact(true, 2.0);
        assert!(!h.step(&tcp, &Vector3::zeros(), 2.1, 0.004).active);
        assert!(h.step(&tcp, &Vector3::zeros(), 2.2, 0.004).active);
        assert_eq!(h.trigger_status().origin_s, Some(2.0));
        // A live parameter change keeps the progress and the fired trigger.
        let before = h.progress();
        let mut p2 = h.params().clone();
        p2.stiffness_n_per_m = 100.0;
        h.set_params(p2);
        assert_eq!(h.progress(), before);
        assert_eq!(h.trigger_status().origin_s, Some(2.0));
        // Reset re-arms.
        h.reset();
        assert!(h.trigger_status().armed && h.progress() == 0.0);
        assert!(!h.step(&tcp, &Vector3::zeros(), 3.0, 0.004).active);
    }

    proptest! {
        #[test]
        fn force_never_exceeds_max(
            tcp in proptest::array::uniform3(-2.0f64..2.0),
            v in proptest::array::uniform3(-3.0f64..3.0),
            k in 0.0f64..1e4, d in 0.0f64..500.0, fmax in 0.1f64..100.0,
        ) {
            let mut h = Hand::new(HandParams { stiffness_n_per_m: k, damping_n_s_per_m: d, max_force_n: fmax, ..params() });
            let o = h.step(&Vector3::from(tcp), &Vector3::from(v), 0.1, 0.004);
            prop_assert!(o.force.norm() <= fmax * (1.0 + 1e-12));
        }
    }
}
