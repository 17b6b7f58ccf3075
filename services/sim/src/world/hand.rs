//! The virtual operator's hand (lead-through): an arm with mass and a reaction delay that holds
//! the tool by a spring–damper grasp and moves it along a scripted path.
//!
//! # The path (the operator's intent)
//!
//! An **attractor** starts at `path[0]` at `start_s` and moves along the polyline at
//! `speed_m_s`; it waits while the TCP lags more than `max_lead_m` behind it (an operator does
//! not walk away from the tool), stops at the last point and, if `release_after_s` is set, the
//! hand lets go that long after arriving.
//!
//! # The hand (mechanics)
//!
//! The hand is a point mass `m = arm_mass_kg` (the operator's effective arm mass at the hand)
//! at `x_h` (base), connected to the TCP `p` by the **grasp** spring–damper
//! (`K_g = stiffness_n_per_m`, `D_g = damping_n_s_per_m`). The force on the tool, at the TCP,
//! is the grasp force, scaled down to `|F_g| ≤ max_force_n` (the grip gives):
//!
//! ```text
//! F_g = K_g (x_h − p) + D_g (ẋ_h − ṗ)
//! m ẍ_h = F_m + B_a (v_ff − ẋ_h) − F_g
//! ```
//!
//! plus an optional constant torque `torque_nm` (base) while the hand holds the tool.
//!
//! # The operator (control, with a reaction delay)
//!
//! The operator's muscles drive the hand towards the attractor `a` acting on what the operator
//! perceived `τ = reaction_delay_s` ago (the error between the intended and the felt hand
//! position and velocity):
//!
//! ```text
//! u(t)       = sat_max_force( K_m (a − x_h)(t − τ) + D_m (ȧ − ẋ_h)(t − τ) )
//! T_a Ḟ_m    = u − F_m                      (muscle activation, T_a = muscle_time_constant_s)
//! v_ff(t)    = ȧ(t − τ)                      (the planned velocity, reaching the arm τ late)
//! ```
//!
//! `B_a = arm_damping_n_s_per_m` is the arm's **passive** (intrinsic, reflex-free) viscosity:
//! a mechanical property of the contracted muscles, so it acts on the *current* hand velocity
//! without delay, relative to the velocity the operator plans (`v_ff`: an operator moving
//! their hand at 5 cm/s does not fight their own viscosity).
//!
//! The perceived errors are kept in a time-stamped ring buffer (zero-order hold: the newest
//! sample at least `τ` old); before the operator has held the tool for `τ` the muscle force
//! is zero — a step of the attractor shows no muscle response before `τ`.
//!
//! **Defaults** (`m` 2 kg, `τ` 0.15 s, `K_m` 100 N/m, `D_m` 10 N·s/m, `B_a` 50 N·s/m,
//! `T_a` 0.05 s) make a ≈ 1.1 Hz positioning loop (`√(K_m/m)/2π`), well damped: against a fixed
//! tool it settles without overshoot for grasp stiffnesses 100–3000 N/m (< 2 % at 3000) at
//! the default delay and still settles (≈ 20 % overshoot) at τ = 0.4 s; it pulls a free
//! admittance (M = 5 kg, D = 60 N·s/m, 30 ms delay) along a straight path at the path speed.
//! Where the numbers come from: `docs/simulator.md` ("Operator hand").
//!
//! **Steady state.** Against a fixed tool the operator's arm (`K_m`) and the grasp (`K_g`) are
//! springs in series: the hand settles where `K_g (x_h − p) = K_m (a − x_h)`, so the tool feels
//! `F = K_g (x_h − p) = K_g K_m / (K_g + K_m) · (a − p)`. Pulling a free tool at speed `v`
//! against a resistance `F_r` the hand lags the attractor by `F_r / K_m` and the TCP lags the
//! hand by `F_r / K_g` (set `max_lead_m` larger than the sum).
//!
//! **Integration.** Per call, substeps `h ≤ 1 ms`: implicit Euler for the grasp spring, grasp
//! damper and passive viscosity (stable for any stiffness and mass in range), the muscle force
//! constant over the call, the TCP at its given position and velocity. When the linear grasp
//! force would exceed `max_force_n`, the substep is redone with the saturated force.
//!
//! A released, disabled or not yet started hand applies exactly zero force and torque; the
//! next grab starts the hand at the TCP, at the TCP's velocity (no jerk on the tool).
//!
//! Times (`start_s`, the release) are scenario times measured from the hand's trigger origin:
//! scenario time 0 (`trigger = "time"`, default) or the first contact of the tool with any
//! surface after the trigger was armed (`trigger = "contact"`, see [`super::trigger`]). The
//! reaction-delay buffer runs on scenario time.

use std::collections::VecDeque;

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
    /// Grasp stiffness between hand and TCP (N/m), in [0, 1e5].
    pub stiffness_n_per_m: f64,
    /// Grasp damping between hand and TCP (N·s/m), in [0, 1e4].
    pub damping_n_s_per_m: f64,
    /// Force saturation of the grasp and of the operator's muscles (N), in (0, 1000].
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
    /// The operator's effective arm mass at the hand (kg), in [0.1, 20].
    pub arm_mass_kg: f64,
    /// The operator's reaction delay (s), in [0, 0.5].
    pub reaction_delay_s: f64,
    /// Stiffness of the operator's (delayed) positioning loop (N/m), in [0, 1e4].
    pub muscle_stiffness_n_per_m: f64,
    /// Damping of the operator's (delayed) positioning loop (N·s/m), in [0, 1e3].
    pub muscle_damping_n_s_per_m: f64,
    /// The arm's passive (undelayed) viscosity (N·s/m), in [0, 1e3].
    pub arm_damping_n_s_per_m: f64,
    /// Muscle activation time constant (s), in [0, 0.5]; 0 = instant.
    pub muscle_time_constant_s: f64,
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
            arm_mass_kg: 2.0,
            reaction_delay_s: 0.15,
            muscle_stiffness_n_per_m: 100.0,
            muscle_damping_n_s_per_m: 10.0,
            arm_damping_n_s_per_m: 50.0,
            muscle_time_constant_s: 0.05,
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
        let ranges: [(&str, f64, f64, f64, &str); 10] = [
            ("speed_m_s", self.speed_m_s, 0.0, 2.0, "m/s"),
            ("stiffness_n_per_m", self.stiffness_n_per_m, 0.0, 1e5, "N/m"),
            (
                "damping_n_s_per_m",
                self.damping_n_s_per_m,
                0.0,
                1e4,
                "N·s/m",
            ),
            ("arm_mass_kg", self.arm_mass_kg, 0.1, 20.0, "kg"),
            ("reaction_delay_s", self.reaction_delay_s, 0.0, 0.5, "s"),
            (
                "muscle_stiffness_n_per_m",
                self.muscle_stiffness_n_per_m,
                0.0,
                1e4,
                "N/m",
            ),
            (
                "muscle_damping_n_s_per_m",
                self.muscle_damping_n_s_per_m,
                0.0,
                1e3,
                "N·s/m",
            ),
            (
                "arm_damping_n_s_per_m",
                self.arm_damping_n_s_per_m,
                0.0,
                1e3,
                "N·s/m",
            ),
            (
                "muscle_time_constant_s",
                self.muscle_time_constant_s,
                0.0,
                0.5,
                "s",
            ),
            ("start_s", self.start_s, 0.0, 1e6, "s"),
        ];
        for (key, v, lo, hi, unit) in ranges {
            if bad(v, lo, hi) {
                e.push(format!(
                    "{prefix}.{key}: must be in [{lo}, {hi}] {unit} (got {v})"
                ));
            }
        }
        if bad(self.max_force_n, 0.0, 1e3) || self.max_force_n == 0.0 {
            e.push(format!(
                "{prefix}.max_force_n: must be in (0, 1000] N (got {})",
                self.max_force_n
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
    /// Force on the tool at the TCP (N, base): the grasp force; exactly zero when not active.
    pub force: Vector3<f64>,
    /// Torque on the tool (N·m, base).
    pub torque: Vector3<f64>,
    /// Attractor position (m, base).
    pub target: Vector3<f64>,
    /// The grasp force was clipped to `max_force_n`.
    pub saturated: bool,
    /// The attractor reached the end of the path.
    pub at_end: bool,
    /// The hand's position (m, base), while it holds the tool.
    pub hand_pos: Option<Vector3<f64>>,
    /// The hand's velocity (m/s, base); zero when not holding.
    pub hand_vel: Vector3<f64>,
    /// The operator's muscle force on the hand (N, base; after the activation lag).
    pub muscle_force: Vector3<f64>,
}

/// One perceived sample: what the operator feels at scenario time `t_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Perceived {
    t_s: f64,
    /// Attractor − hand (m).
    pos_err: Vector3<f64>,
    /// Attractor velocity − hand velocity (m/s).
    vel_err: Vector3<f64>,
    /// Attractor velocity (m/s): the planned velocity.
    plan_vel: Vector3<f64>,
}

/// Hard bound of the perception buffer (samples); with the minimum spacing below it is never
/// reached for `τ ≤ 0.5 s`.
const MAX_PERCEIVED: usize = 8192;

/// The hand's mechanical state while it holds the tool.
#[derive(Debug, Clone, PartialEq)]
struct Grip {
    pos: Vector3<f64>,
    vel: Vector3<f64>,
    /// Muscle force after the activation lag (N).
    muscle: Vector3<f64>,
    /// What the operator perceived, oldest first.
    perceived: VecDeque<Perceived>,
}

impl Grip {
    fn new(pos: Vector3<f64>, vel: Vector3<f64>) -> Self {
        Self {
            pos,
            vel,
            muscle: Vector3::zeros(),
            perceived: VecDeque::new(),
        }
    }

    /// Records what is perceived at `t` (samples closer than `delay/2000` to the previous one
    /// are skipped: bounded memory for any `dt`).
    fn perceive(&mut self, sample: Perceived, delay: f64) {
        if let Some(last) = self.perceived.back() {
            if sample.t_s < last.t_s {
                // Time went backwards (a new scenario clock): forget.
                self.perceived.clear();
            } else if sample.t_s - last.t_s < delay / 2000.0 && delay > 0.0 {
                return;
            }
        }
        self.perceived.push_back(sample);
        while self.perceived.len() > MAX_PERCEIVED {
            self.perceived.pop_front();
        }
    }

    /// The newest sample at least `delay` old at `t` (zero-order hold), dropping older ones.
    /// `None` before the operator has held the tool that long.
    fn delayed(&mut self, t: f64, delay: f64) -> Option<Perceived> {
        let due = t - delay + 1e-9;
        while self.perceived.len() > 1 && self.perceived[1].t_s <= due {
            self.perceived.pop_front();
        }
        self.perceived.front().copied().filter(|p| p.t_s <= due)
    }
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
    grip: Option<Grip>,
}

impl Hand {
    /// A hand at the start of its path, not holding the tool.
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
            grip: None,
        }
    }

    /// New parameters, keeping the progress along the path (clamped to the new path's length),
    /// the arrival time, the hand's state (position, velocity, what the operator perceived)
    /// and, when its kind is unchanged, the trigger's state.
    pub fn set_params(&mut self, params: HandParams) {
        let mut h = Hand::new(params);
        h.s = self.s.min(h.length);
        h.end_time = if h.s >= h.length { self.end_time } else { None };
        h.clock = TriggerClock::carried_from(h.params.trigger, Some(&self.clock));
        h.grip = self.grip.take();
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

    /// The hand's position (m, base) while it holds the tool.
    pub fn hand_position(&self) -> Option<[f64; 3]> {
        self.grip.as_ref().map(|g| [g.pos.x, g.pos.y, g.pos.z])
    }

    /// Back to the start of the path, trigger re-armed, tool released.
    pub fn reset(&mut self) {
        self.s = 0.0;
        self.end_time = None;
        self.grip = None;
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

    /// Lets go of the tool: exactly zero force.
    fn released(&mut self, target: Vector3<f64>, at_end: bool) -> HandOutput {
        self.grip = None;
        HandOutput {
            target,
            at_end,
            ..Default::default()
        }
    }

    /// The hand's action at scenario time `t` (s) over a step of `dt` (s), given the TCP
    /// position and velocity (base). Advances the attractor by `speed·dt` unless it is
    /// waiting, and the hand's mechanics by `dt` (see the module docs). A non-finite or
    /// non-positive `dt` advances nothing.
    pub fn step(
        &mut self,
        tcp: &Vector3<f64>,
        v_tcp: &Vector3<f64>,
        t: f64,
        dt: f64,
    ) -> HandOutput {
        // The hand's own time (from its trigger's origin); none while the trigger waits.
        let Some(t_local) = self.clock.local_time(t) else {
            return self.released(Vector3::zeros(), false);
        };
        let p = &self.params;
        if !p.enabled || self.points.is_empty() || t_local < p.start_s {
            return self.released(Vector3::zeros(), false);
        }
        if !(tcp.iter().chain(v_tcp.iter()).all(|v| v.is_finite()) && t.is_finite()) {
            return self.released(Vector3::zeros(), false);
        }
        if let (Some(te), Some(r)) = (self.end_time, p.release_after_s) {
            if t_local >= te + r {
                let (target, _) = self.point_at(self.s);
                return self.released(target, true);
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
        let dt_ok = dt.is_finite() && dt > 0.0;
        let (delay, km, dm, ta, speed) = (
            p.reaction_delay_s,
            p.muscle_stiffness_n_per_m,
            p.muscle_damping_n_s_per_m,
            p.muscle_time_constant_s,
            p.speed_m_s,
        );
        let (kg, dg, ba, m, fmax) = (
            p.stiffness_n_per_m,
            p.damping_n_s_per_m,
            p.arm_damping_n_s_per_m,
            p.arm_mass_kg,
            p.max_force_n,
        );
        let torque = Vector3::from(p.torque_nm);

        // The grab: the hand starts at the TCP, moving with it.
        let grip = self.grip.get_or_insert_with(|| Grip::new(*tcp, *v_tcp));
        let now = Perceived {
            t_s: t,
            pos_err: target - grip.pos,
            vel_err: v_att - grip.vel,
            plan_vel: v_att,
        };
        grip.perceive(now, delay);
        let seen = grip.delayed(t, delay);
        let (command, plan_vel) = match seen {
            Some(s) => {
                let mut u = s.pos_err * km + s.vel_err * dm;
                let n = u.norm();
                if n > fmax {
                    u *= fmax / n;
                }
                (u, s.plan_vel)
            }
            None => (Vector3::zeros(), Vector3::zeros()),
        };
        if dt_ok {
            // Muscle activation: first-order lag (implicit Euler: stable for any dt).
            grip.muscle += (command - grip.muscle) * (dt / (ta + dt));
            let n = (dt / 1e-3).ceil().max(1.0) as usize;
            let h = dt / n as f64;
            for _ in 0..n {
                // Implicit Euler: m (v' − v) = h (F_m + B_a (v_ff − v') − K_g (x + h v' − p)
                // − D_g (v' − ṗ)).
                let rhs = grip.vel * m
                    + (grip.muscle + plan_vel * ba - (grip.pos - tcp) * kg + v_tcp * dg) * h;
                let mut v = rhs / (m + h * (dg + ba) + h * h * kg);
                let mut x = grip.pos + v * h;
                let f_lin = (x - tcp) * kg + (v - v_tcp) * dg;
                let n_lin = f_lin.norm();
                if n_lin > fmax {
                    // The grip gives: a constant saturated force over the substep.
                    let f_sat = f_lin * (fmax / n_lin);
                    v = (grip.vel * m + (grip.muscle + plan_vel * ba - f_sat) * h) / (m + h * ba);
                    x = grip.pos + v * h;
                }
                grip.pos = x;
                grip.vel = v;
            }
        }
        let mut force = (grip.pos - tcp) * kg + (grip.vel - v_tcp) * dg;
        let mag = force.norm();
        let saturated = mag > fmax;
        if saturated {
            force *= fmax / mag;
        }
        let (hand_pos, hand_vel, muscle_force) = (grip.pos, grip.vel, grip.muscle);

        if moving && dt_ok {
            self.s = (self.s + speed * dt).min(self.length);
        }
        let at_end = self.s >= self.length;
        if at_end && self.end_time.is_none() {
            self.end_time = Some(t_local);
        }
        HandOutput {
            active: true,
            force,
            torque,
            target,
            saturated,
            at_end,
            hand_pos: Some(hand_pos),
            hand_vel,
            muscle_force,
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

    /// A hand holding a tool that does not move (the robot stands still), with the attractor
    /// fixed at `target`; returns the force history at `dt`.
    fn against_fixed_tool(
        p: HandParams,
        tcp: Vector3<f64>,
        dt: f64,
        t_end: f64,
    ) -> (Hand, Vec<HandOutput>) {
        let mut h = Hand::new(p);
        let n = (t_end / dt).round() as usize;
        let out = (0..n)
            .map(|k| h.step(&tcp, &Vector3::zeros(), k as f64 * dt, dt))
            .collect();
        (h, out)
    }

    #[test]
    fn spring_pulls_towards_target() {
        // The physics changed with the arm's mass and reaction delay: the hand grabs the tool
        // where it is (zero force at the grab, no jerk), nothing happens before the reaction
        // delay, then the grasp pulls towards the attractor (here the attractor also starts
        // moving along +y at 0.1 m/s).
        let mut h = Hand::new(params());
        let tcp = Vector3::new(0.39, 0.0, 0.3);
        let o = h.step(&tcp, &Vector3::zeros(), 0.0, 0.001);
        assert!(o.active && !o.saturated);
        assert_eq!(o.force, Vector3::zeros());
        assert_eq!(o.hand_pos, Some(tcp));
        let mut o = o;
        for k in 1..=140 {
            o = h.step(&tcp, &Vector3::zeros(), k as f64 * 0.001, 0.001);
            assert_eq!(
                o.force,
                Vector3::zeros(),
                "before the reaction delay ({k} ms)"
            );
        }
        for k in 141..600 {
            o = h.step(&tcp, &Vector3::zeros(), k as f64 * 0.001, 0.001);
        }
        assert!(o.force.x > 0.5 && o.force.y > 0.0, "{}", o.force);
        assert!(o.force.z.abs() < 1e-9);
    }

    #[test]
    fn saturates_at_max_force_keeping_direction() {
        // The attractor is ~0.5 m away from a fixed tool: the operator pulls as hard as they
        // can (muscles and grip both limited to max_force_n), towards the attractor.
        let mut p = params();
        p.path = vec![[0.4, 0.0, 0.3]];
        let (_, out) = against_fixed_tool(p, Vector3::zeros(), 0.001, 5.0);
        for o in &out {
            assert!(o.force.norm() <= 20.0 * (1.0 + 1e-12));
        }
        let o = out.last().copied().unwrap_or_default();
        assert!((o.force.norm() - 20.0).abs() < 0.05, "{}", o.force.norm());
        let dir = Vector3::new(0.4, 0.0, 0.3).normalize();
        assert!(o.force.normalize().cross(&dir).norm() < 1e-6);
        assert!(out.iter().any(|o| o.saturated));
    }

    #[test]
    fn fixed_tool_settles_without_oscillation_at_the_spring_force() {
        let tcp = Vector3::new(0.4, 0.0, 0.3);
        let offset = Vector3::new(0.02, 0.0, 0.0);
        for kg in [100.0, 300.0, 3000.0] {
            let p = HandParams {
                enabled: true,
                path: vec![[0.42, 0.0, 0.3]],
                stiffness_n_per_m: kg,
                ..Default::default()
            };
            let km = p.muscle_stiffness_n_per_m;
            let (h, out) = against_fixed_tool(p, tcp, 0.001, 8.0);
            let last = out.last().copied().unwrap_or_default();
            let hand = last.hand_pos.unwrap_or_default();
            // Steady: the grasp spring's force, K_g · (hand − TCP) …
            assert!((last.force - (hand - tcp) * kg).norm() < 1e-6, "K_g = {kg}");
            assert!(last.hand_vel.norm() < 1e-6);
            // … which is the operator's arm and the grasp in series.
            let f_series = offset * (kg * km / (kg + km));
            assert!(
                (last.force - f_series).norm() < 1e-3 * f_series.norm(),
                "K_g = {kg}: {} vs {}",
                last.force,
                f_series
            );
            assert_eq!(h.hand_position(), Some([hand.x, hand.y, hand.z]));
            // No oscillation: under 3 % overshoot, and once within 2 % it stays within 3 %.
            let fin = last.force.x;
            let peak = out.iter().map(|o| o.force.x).fold(0.0, f64::max);
            assert!(peak <= fin * 1.03, "K_g = {kg}: peak {peak} vs {fin}");
            let first_in = out
                .iter()
                .position(|o| (o.force.x - fin).abs() < 0.02 * fin)
                .unwrap_or(out.len());
            assert!(
                out[first_in..]
                    .iter()
                    .all(|o| (o.force.x - fin).abs() < 0.03 * fin),
                "K_g = {kg}"
            );
            assert!(out
                .iter()
                .all(|o| o.force.y.abs() < 1e-12 && o.force.z.abs() < 1e-12));
        }
    }

    #[test]
    fn released_hand_applies_exactly_zero_force() {
        let mut p = params();
        p.path = vec![[0.42, 0.0, 0.3]];
        p.release_after_s = Some(1.0);
        let tcp = Vector3::new(0.4, 0.0, 0.3);
        let mut h = Hand::new(p.clone());
        let mut o = HandOutput::default();
        for k in 0..900 {
            o = h.step(&tcp, &Vector3::zeros(), k as f64 * 0.001, 0.001);
        }
        assert!(
            o.active && o.force.norm() > 1.0,
            "pulling before the release"
        );
        for k in 1000..2000 {
            o = h.step(&tcp, &Vector3::new(0.1, 0.0, 0.0), k as f64 * 0.001, 0.001);
            assert!(!o.active);
            assert_eq!((o.force, o.torque), (Vector3::zeros(), Vector3::zeros()));
            assert_eq!(o.hand_pos, None);
        }
        assert_eq!(h.hand_position(), None);
        // Disabled at run time: lets go at once, exactly.
        p.release_after_s = None;
        let mut h = Hand::new(p.clone());
        for k in 0..900 {
            h.step(&tcp, &Vector3::zeros(), k as f64 * 0.001, 0.001);
        }
        p.enabled = false;
        h.set_params(p);
        let o = h.step(&tcp, &Vector3::zeros(), 0.9, 0.001);
        assert!(!o.active && o.force == Vector3::zeros() && o.torque == Vector3::zeros());
    }

    #[test]
    fn reaction_delay_really_delays() {
        for delay in [0.0, 0.15, 0.3] {
            // Holding still at the attractor: every error is exactly zero.
            let tcp = Vector3::new(0.4, 0.0, 0.3);
            let mut p = HandParams {
                enabled: true,
                path: vec![[0.4, 0.0, 0.3]],
                reaction_delay_s: delay,
                ..Default::default()
            };
            let mut h = Hand::new(p.clone());
            let dt = 0.001;
            for k in 0..1000 {
                let o = h.step(&tcp, &Vector3::zeros(), k as f64 * dt, dt);
                assert_eq!(o.muscle_force, Vector3::zeros());
            }
            // A step of the attractor at t = 1 s (a live set).
            p.path = vec![[0.43, 0.0, 0.3]];
            h.set_params(p);
            let step_k = 1000;
            let delay_k = (delay / dt).round() as usize;
            let mut first = None;
            for k in step_k..step_k + 1000 {
                let o = h.step(&tcp, &Vector3::zeros(), k as f64 * dt, dt);
                if first.is_none() && o.muscle_force != Vector3::zeros() {
                    first = Some(k - step_k);
                }
            }
            assert_eq!(first, Some(delay_k), "delay {delay}");
        }
    }

    #[test]
    fn free_admittance_tool_is_pulled_along_the_path_at_the_path_speed() {
        // The robot as a simple admittance M ẍ + D ẋ = F(t − 30 ms), M = 5 kg, D = 60 N·s/m.
        let (m_r, d_r, delay_k) = (5.0, 60.0, 30usize);
        let dir = Vector3::new(1.0, 1.0, 0.0).normalize(); // 45° in the xy plane
        let start = Vector3::new(0.4, 0.0, 0.3);
        for (kg, speed) in [(300.0, 0.05), (3000.0, 0.05), (300.0, 0.1), (3000.0, 0.1)] {
            let end = start + dir * (speed * 8.0);
            let p = HandParams {
                enabled: true,
                path: vec![[start.x, start.y, start.z], [end.x, end.y, end.z]],
                speed_m_s: speed,
                stiffness_n_per_m: kg,
                max_lead_m: Some(0.2),
                ..Default::default()
            };
            let mut h = Hand::new(p);
            let dt = 0.001;
            let (mut x, mut v) = (start, Vector3::zeros());
            let mut forces = VecDeque::from(vec![Vector3::zeros(); delay_k]);
            let mut mid_speeds = Vec::new();
            for k in 0..14_000 {
                let t = k as f64 * dt;
                let o = h.step(&x, &v, t, dt);
                forces.push_back(o.force);
                let f = forces.pop_front().unwrap_or_default();
                v += (f - v * d_r) / m_r * dt;
                x += v * dt;
                if (4.0..7.5).contains(&t) {
                    mid_speeds.push(v);
                }
            }
            for s in &mid_speeds {
                let along = s.dot(&dir);
                assert!(
                    (along - speed).abs() < 0.02 * speed,
                    "K_g {kg} v {speed}: {along}"
                );
                assert!((s - dir * along).norm() < 1e-6 * speed.max(1.0));
            }
            // Arrives and stops at the end of the path.
            assert!(
                (x - end).norm() < 1e-3,
                "K_g {kg} v {speed}: {}",
                (x - end).norm()
            );
            assert!(v.norm() < 1e-3);
        }
    }

    #[test]
    fn parameters_are_validated_with_every_problem_listed() {
        let p = HandParams {
            enabled: true,
            path: vec![],
            speed_m_s: -1.0,
            stiffness_n_per_m: f64::NAN,
            damping_n_s_per_m: -1.0,
            max_force_n: 0.0,
            start_s: -1.0,
            max_lead_m: Some(0.0),
            release_after_s: Some(f64::INFINITY),
            torque_nm: [0.0, 200.0, 0.0],
            arm_mass_kg: 0.0,
            reaction_delay_s: 0.6,
            muscle_stiffness_n_per_m: -5.0,
            muscle_damping_n_s_per_m: f64::INFINITY,
            arm_damping_n_s_per_m: 2e3,
            muscle_time_constant_s: -0.1,
            trigger: Trigger::Time,
        };
        let e = p.validate("hand");
        for key in [
            "hand.path:",
            "hand.speed_m_s",
            "hand.stiffness_n_per_m",
            "hand.damping_n_s_per_m",
            "hand.max_force_n",
            "hand.start_s",
            "hand.max_lead_m",
            "hand.release_after_s",
            "hand.torque_nm[1]",
            "hand.arm_mass_kg",
            "hand.reaction_delay_s",
            "hand.muscle_stiffness_n_per_m",
            "hand.muscle_damping_n_s_per_m",
            "hand.arm_damping_n_s_per_m",
            "hand.muscle_time_constant_s",
        ] {
            assert!(
                e.iter().any(|m| m.starts_with(key)),
                "{key} missing in {e:#?}"
            );
        }
        assert_eq!(e.len(), 15, "{e:#?}");
        assert!(HandParams::default().validate("hand").is_empty());
        assert!(params().validate("hand").is_empty());
    }

    #[test]
    fn live_parameter_change_keeps_the_hand_state() {
        let tcp = Vector3::new(0.4, 0.0, 0.3);
        let mut p = params();
        p.path = vec![[0.42, 0.0, 0.3]];
        let mut h = Hand::new(p.clone());
        for k in 0..500 {
            h.step(&tcp, &Vector3::zeros(), k as f64 * 0.001, 0.001);
        }
        let before = h.hand_position();
        assert!(before.is_some());
        p.stiffness_n_per_m = 3000.0;
        p.arm_mass_kg = 3.0;
        p.reaction_delay_s = 0.2;
        h.set_params(p);
        assert_eq!(h.hand_position(), before);
        let o = h.step(&tcp, &Vector3::zeros(), 0.5, 0.001);
        assert!(o.active && o.force.iter().all(|v| v.is_finite()));
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
            mass in 0.1f64..20.0, delay in 0.0f64..0.5,
        ) {
            let mut h = Hand::new(HandParams {
                stiffness_n_per_m: k, damping_n_s_per_m: d, max_force_n: fmax,
                arm_mass_kg: mass, reaction_delay_s: delay, ..params()
            });
            for i in 0..600 {
                let o = h.step(&Vector3::from(tcp), &Vector3::from(v), 0.1 + i as f64 * 0.001, 0.001);
                prop_assert!(o.force.norm() <= fmax * (1.0 + 1e-12));
                prop_assert!(o.hand_pos.is_some_and(|p| p.iter().all(|x| x.is_finite())));
            }
        }
    }
}
