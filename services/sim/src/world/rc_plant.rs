//! The Raibert & Craig (1981) 2-DOF simulation plant (their Fig. 5).
//!
//! A planar arm in a plane normal to gravity (so gravity does not enter): a **revolute** joint θ
//! about the vertical axis and a **prismatic** joint r along the boom (Scheinman arm joints 1
//! and 3), driven by pure torque / force sources `τ = [τ_θ (N·m), f_r (N)]`. The boom end (the
//! wrist, `W = r·(cos θ, sin θ)`) carries the hand of mass `M3` through the force-sensing wrist,
//! an isotropic planar spring `K_w` (with a small structural damping `c_w`). The hand touches a
//! reaction surface, a line with outward normal `n` that acts as a spring `K_r`:
//! `f = K_r·δ` along `n` while the hand penetrates by `δ` (the paper's
//! `f_x = K_r (C_x − C_xf)`), optionally with damping and Coulomb friction, and optionally
//! moving along a ramp (Fig. 8: the surface moves away at 0.65 cm/s).
//!
//! # Equations of motion
//! Boom modelled as a point mass `m_b` at the wrist plus a constant inertia `I_θ` about the
//! vertical axis (column, boom and drive):
//!
//! ```text
//! (I_θ + m_b r²) θ̈ = τ_θ + Q_θ − 2 m_b r ṙ θ̇ + friction_θ
//!  m_b r̈           = f_r + Q_r + m_b r θ̇²    + friction_r
//!  M3 ḧ            = F_w + F_c
//!  F_w = K_w (W − h) + c_w (Ẇ − ḣ)         (force of the wrist on the hand = sensor reading)
//!  Q   = Jᵀ (−F_w),  Ẇ = J q̇,  J = [[−r sin θ, cos θ], [r cos θ, sin θ]]
//! ```
//!
//! Joint friction is the paper's static + Coulomb law: a joint at rest stays at rest while the
//! net effort `|N| ≤ T_s` (friction = −N, i.e. `−sgn·min(T_s, |N|)`), a moving joint feels
//! `−sgn(q̇)·T_c` (plus an optional viscous `−b q̇`); a joint whose velocity would change sign
//! within a substep sticks (Karnopp-style), so the integration never chatters through zero.
//! Joint ranges are hard stops (the velocity into the stop is zeroed).
//!
//! # Integration
//! Joint efforts are held over a caller step. The simulator steps the plant every 1 ms base
//! tick on the simulator's one clock ([`RcPlant::set_time`] keeps the plant's time equal to
//! scenario time); a surface ramp may start from the first contact of the hand with the
//! surface (`trigger = "contact"`, see [`super::trigger`]).
//!
//! Semi-implicit (symplectic) Euler at `substep_hz` (default 20 kHz, at least 10 kHz): all
//! forces from the state at the start of the substep, then velocities, then positions with the
//! new velocities. For the 280 Hz hand mode, `ω h = 0.088` at 20 kHz: the method's frequency
//! error `(ωh)²/24 ≈ 0.03 %` and it does not add energy. The caller steps at its own rate
//! (`dt`); the plant takes `ceil(dt·substep_hz)` equal substeps.
//!
//! # Parameters the paper does not give (chosen here, documented)
//! The paper gives `K_w = 8×10⁵ N/m` and the hand mode `f_n = √((K_r + K_w)/M3)/2π = 280 Hz`
//! (286 Hz observed) but neither `M3` nor `K_r`, nor the arm's inertia, mass or friction
//! levels. Defaults: `M3 = 0.3 kg` and `K_r = 1.3×10⁵ N/m` (so `(K_r+K_w)/M3 = 3.1×10⁶ s⁻²`,
//! `f_n = 280.2 Hz`); `I_θ = 1.0 kg·m²`, `m_b = 5 kg` (a Stanford-arm-sized boom);
//! static / Coulomb friction `[1.0 N·m, 4 N]` / `[0.8 N·m, 3 N]` ("Coulomb friction
//! dominates"); wrist damping `c_w = 10 N·s/m` (ζ ≈ 1 % on the hand mode, so the ripple rings
//! for tens of periods as in the paper's ±0.5 N ripple).
//!
//! The hand-mode formula assumes the wrist is immobile — true while the joints are held by
//! static friction (or a stiff servo). With a free, frictionless boom the mode is that of a
//! two-mass chain and lies a little higher (≈ 286 Hz for the defaults; see the tests).

use kinematics::PlanarRP;
use nalgebra::{Matrix2, Vector2};
use serde::{Deserialize, Serialize};

use super::trigger::{Trigger, TriggerClock, TriggerStatus};

/// A translation of the reaction surface over time (m/s, base plane). Times count from the
/// trigger's origin (scenario time 0, or the hand's first contact with the surface).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlanarRamp {
    /// Surface velocity while moving (m/s).
    pub velocity_m_s: [f64; 2],
    /// Start time (s).
    pub start_s: f64,
    /// Duration (s).
    pub duration_s: f64,
    /// What `start_s` counts from: `"time"` (default) or `"contact"` (the hand's first
    /// contact with the surface after the trigger was armed).
    pub trigger: Trigger,
}

impl Default for PlanarRamp {
    fn default() -> Self {
        Self {
            velocity_m_s: [0.0; 2],
            start_s: 0.0,
            duration_s: 0.0,
            trigger: Trigger::Time,
        }
    }
}

impl PlanarRamp {
    fn offset(&self, t: f64) -> Vector2<f64> {
        Vector2::from(self.velocity_m_s) * (t - self.start_s).clamp(0.0, self.duration_s.max(0.0))
    }
    fn velocity(&self, t: f64) -> Vector2<f64> {
        if t >= self.start_s && t < self.start_s + self.duration_s {
            Vector2::from(self.velocity_m_s)
        } else {
            Vector2::zeros()
        }
    }
}

/// The reaction surface of the 2-DOF plant (`[rc_plant.surface]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RcSurface {
    /// Whether there is a surface.
    pub enabled: bool,
    /// A point on the surface line at t = 0 (m).
    pub point_m: [f64; 2],
    /// Outward normal (towards the hand; normalised on use), non-zero.
    pub normal: [f64; 2],
    /// Stiffness K_r (N/m).
    pub stiffness_n_per_m: f64,
    /// Damping (N·s/m).
    pub damping_n_s_per_m: f64,
    /// Coulomb friction coefficient μ of the surface (tangential force on the hand).
    pub mu: f64,
    /// Optional ramp motion.
    pub motion: Option<PlanarRamp>,
}

impl Default for RcSurface {
    fn default() -> Self {
        Self {
            enabled: true,
            point_m: [0.55, 0.0],
            normal: [-1.0, 0.0],
            stiffness_n_per_m: 1.3e5,
            damping_n_s_per_m: 0.0,
            mu: 0.0,
            motion: None,
        }
    }
}

/// Parameters of the 2-DOF plant (`[rc_plant]`). See the module docs for the chosen values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RcPlantParams {
    /// Inertia about the revolute axis independent of r (kg·m²), > 0.
    pub revolute_inertia_kg_m2: f64,
    /// Boom mass, moving with r (kg), > 0.
    pub boom_mass_kg: f64,
    /// Hand mass M3 (kg), > 0.
    pub hand_mass_kg: f64,
    /// Wrist spring K_w (N/m), > 0. Paper: 8×10⁵.
    pub wrist_stiffness_n_per_m: f64,
    /// Wrist structural damping (N·s/m), ≥ 0.
    pub wrist_damping_n_s_per_m: f64,
    /// Static friction `[N·m, N]`, ≥ Coulomb.
    pub static_friction: [f64; 2],
    /// Coulomb friction `[N·m, N]`, ≥ 0.
    pub coulomb_friction: [f64; 2],
    /// Viscous friction `[N·m·s/rad, N·s/m]`, ≥ 0.
    pub viscous_friction: [f64; 2],
    /// Joint ranges.
    pub limits: PlanarRP,
    /// Initial joints `[θ (rad), r (m)]`, inside the ranges; at rest, hand at the wrist.
    pub initial_q: [f64; 2],
    /// Internal integration rate (Hz), in [10 kHz, 1 MHz].
    pub substep_hz: f64,
    /// Reaction surface.
    pub surface: RcSurface,
}

impl Default for RcPlantParams {
    fn default() -> Self {
        Self {
            revolute_inertia_kg_m2: 1.0,
            boom_mass_kg: 5.0,
            hand_mass_kg: 0.3,
            wrist_stiffness_n_per_m: 8e5,
            wrist_damping_n_s_per_m: 10.0,
            static_friction: [1.0, 4.0],
            coulomb_friction: [0.8, 3.0],
            viscous_friction: [0.0, 0.0],
            limits: PlanarRP::default(),
            initial_q: [0.0, 0.5],
            substep_hz: 20_000.0,
            surface: RcSurface::default(),
        }
    }
}

impl RcPlantParams {
    /// Every problem, keys prefixed with `prefix` (e.g. `rc_plant`).
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        let mut pos = |k: &str, v: f64, allow_zero: bool| {
            if !v.is_finite() || v < 0.0 || (!allow_zero && v == 0.0) {
                let rel = if allow_zero { ">= 0" } else { "> 0" };
                e.push(format!("{prefix}.{k}: must be finite and {rel} (got {v})"));
            }
        };
        pos("revolute_inertia_kg_m2", self.revolute_inertia_kg_m2, false);
        pos("boom_mass_kg", self.boom_mass_kg, false);
        pos("hand_mass_kg", self.hand_mass_kg, false);
        pos(
            "wrist_stiffness_n_per_m",
            self.wrist_stiffness_n_per_m,
            false,
        );
        pos(
            "wrist_damping_n_s_per_m",
            self.wrist_damping_n_s_per_m,
            true,
        );
        for i in 0..2 {
            pos(
                &format!("static_friction[{i}]"),
                self.static_friction[i],
                true,
            );
            pos(
                &format!("coulomb_friction[{i}]"),
                self.coulomb_friction[i],
                true,
            );
            pos(
                &format!("viscous_friction[{i}]"),
                self.viscous_friction[i],
                true,
            );
        }
        let s = &self.surface;
        pos("surface.stiffness_n_per_m", s.stiffness_n_per_m, true);
        pos("surface.damping_n_s_per_m", s.damping_n_s_per_m, true);
        pos("surface.mu", s.mu, true);
        for i in 0..2 {
            if self.static_friction[i] < self.coulomb_friction[i] {
                e.push(format!(
                    "{prefix}.static_friction[{i}]: must be >= coulomb_friction[{i}] ({} < {})",
                    self.static_friction[i], self.coulomb_friction[i]
                ));
            }
        }
        if let Err(errs) = self.limits.validate() {
            e.extend(errs.into_iter().map(|m| format!("{prefix}.limits.{m}")));
        }
        let [th, r] = self.initial_q;
        if !(th.is_finite()
            && r.is_finite()
            && th >= self.limits.theta_min
            && th <= self.limits.theta_max
            && r >= self.limits.r_min
            && r <= self.limits.r_max)
        {
            e.push(format!(
                "{prefix}.initial_q: must lie inside the limits (got [{th}, {r}])"
            ));
        }
        if !self.substep_hz.is_finite() || !(1e4..=1e6).contains(&self.substep_hz) {
            e.push(format!(
                "{prefix}.substep_hz: must be in [10000, 1000000] Hz (got {})",
                self.substep_hz
            ));
        }
        for (i, v) in s.point_m.iter().enumerate() {
            if !v.is_finite() {
                e.push(format!(
                    "{prefix}.surface.point_m[{i}]: must be finite (got {v})"
                ));
            }
        }
        let n = Vector2::from(s.normal);
        if !(n.x.is_finite() && n.y.is_finite()) || n.norm() < 1e-9 {
            e.push(format!(
                "{prefix}.surface.normal: must be finite and non-zero (got {:?})",
                s.normal
            ));
        }
        if let Some(m) = s.motion {
            for (i, v) in m.velocity_m_s.iter().enumerate() {
                if !v.is_finite() || v.abs() > 2.0 {
                    e.push(format!(
                        "{prefix}.surface.motion.velocity_m_s[{i}]: must be within ±2 m/s (got {v})"
                    ));
                }
            }
            if !m.start_s.is_finite() || m.start_s < 0.0 {
                e.push(format!(
                    "{prefix}.surface.motion.start_s: must be finite and >= 0 (got {})",
                    m.start_s
                ));
            }
            if !m.duration_s.is_finite() || m.duration_s < 0.0 {
                e.push(format!(
                    "{prefix}.surface.motion.duration_s: must be finite and >= 0 (got {})",
                    m.duration_s
                ));
            }
        }
        e
    }

    /// The paper's hand-mode formula `√((K_r + K_w)/M3)/2π` (Hz) for these parameters. (A
    /// reference for tests and docs; the plant itself never uses it.)
    pub fn hand_mode_formula_hz(&self) -> f64 {
        ((self.surface.stiffness_n_per_m + self.wrist_stiffness_n_per_m) / self.hand_mass_kg).sqrt()
            / (2.0 * std::f64::consts::PI)
    }
}

/// What the plant reports after a step (SI, base plane unless noted).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PlantState {
    /// Plant time (s).
    pub t: f64,
    /// Joints `[θ (rad), r (m)]`.
    pub q: [f64; 2],
    /// Joint velocities `[rad/s, m/s]`.
    pub qd: [f64; 2],
    /// Wrist (boom end) position (m).
    pub wrist_pos: [f64; 2],
    /// Hand position (m).
    pub hand_pos: [f64; 2],
    /// Hand velocity (m/s).
    pub hand_vel: [f64; 2],
    /// Force the wrist exerts on the hand through the sensing spring (N, base axes) — what a
    /// force sensor between wrist and hand measures. Pressing on the surface it points into the
    /// surface (it equals the force the hand applies to the surface at rest).
    pub wrist_force: [f64; 2],
    /// The same in the hand frame {H} (x along the boom, y = θ direction).
    pub wrist_force_hand: [f64; 2],
    /// Force of the surface on the hand (N).
    pub contact_force: [f64; 2],
    /// Whether the hand penetrates the surface.
    pub in_contact: bool,
    /// Penetration depth (m), 0 when free.
    pub penetration: f64,
    /// Surface displacement from its initial position (m).
    pub surface_offset: [f64; 2],
    /// Joint efforts actually applied (after rejecting non-finite commands).
    pub torque_applied: [f64; 2],
}

/// The Raibert–Craig 2-DOF plant. See the module docs.
#[derive(Debug, Clone)]
pub struct RcPlant {
    p: RcPlantParams,
    n: Vector2<f64>,
    t: f64,
    q: Vector2<f64>,
    qd: Vector2<f64>,
    h: Vector2<f64>,
    hd: Vector2<f64>,
    tau: Vector2<f64>,
    rejected: u64,
    surface_clock: TriggerClock,
}

/// One joint's velocity update under static + Coulomb (+ viscous) friction.
fn friction_update(v: f64, net: f64, m: f64, ts: f64, tc: f64, b: f64, h: f64) -> f64 {
    if v == 0.0 {
        if net.abs() <= ts {
            return 0.0;
        }
        return v + h * (net - net.signum() * tc) / m;
    }
    let v_new = v + h * (net - v.signum() * tc - b * v) / m;
    if v_new * v < 0.0 {
        0.0
    } else {
        v_new
    }
}

fn jac(q: &Vector2<f64>) -> Matrix2<f64> {
    let (s, c) = q.x.sin_cos();
    let r = q.y;
    Matrix2::new(-r * s, c, r * c, s)
}

fn wrist(q: &Vector2<f64>) -> Vector2<f64> {
    let (s, c) = q.x.sin_cos();
    Vector2::new(q.y * c, q.y * s)
}

impl RcPlant {
    /// A plant at rest at `initial_q`, hand at the wrist. `Err` lists every parameter problem.
    pub fn new(params: RcPlantParams) -> Result<Self, Vec<String>> {
        let errs = params.validate("rc_plant");
        if !errs.is_empty() {
            return Err(errs);
        }
        let q = Vector2::from(params.initial_q);
        let n = Vector2::from(params.surface.normal).normalize();
        let trigger = params.surface.motion.map_or(Trigger::Time, |m| m.trigger);
        Ok(Self {
            p: params,
            n,
            t: 0.0,
            q,
            qd: Vector2::zeros(),
            h: wrist(&q),
            hd: Vector2::zeros(),
            tau: Vector2::zeros(),
            rejected: 0,
            surface_clock: TriggerClock::new(trigger),
        })
    }

    /// Parameters.
    pub fn params(&self) -> &RcPlantParams {
        &self.p
    }

    /// New parameters at run time, keeping the state (joints clamped into the new ranges,
    /// velocities, hand, time, applied effort) and, when its kind is unchanged, the surface
    /// trigger. `initial_q` takes effect at the next reset. `Err` lists every problem and
    /// changes nothing.
    pub fn set_params(&mut self, params: RcPlantParams) -> Result<(), Vec<String>> {
        let mut next = RcPlant::new(params)?;
        next.t = self.t;
        next.qd = self.qd;
        next.h = self.h;
        next.hd = self.hd;
        next.tau = self.tau;
        next.rejected = self.rejected;
        let l = &next.p.limits;
        next.q = Vector2::new(
            self.q.x.clamp(l.theta_min, l.theta_max),
            self.q.y.clamp(l.r_min, l.r_max),
        );
        let kind = params.surface.motion.map_or(Trigger::Time, |m| m.trigger);
        next.surface_clock = TriggerClock::carried_from(kind, Some(&self.surface_clock));
        *self = next;
        Ok(())
    }

    /// Sets the plant's clock (s): the simulator keeps it equal to scenario time, so the
    /// surface ramp runs on the one simulator clock. Non-finite values are ignored.
    pub fn set_time(&mut self, t: f64) {
        if t.is_finite() {
            self.t = t;
        }
    }

    /// Re-arms the surface ramp's `contact` trigger.
    pub fn arm_trigger(&mut self) {
        self.surface_clock.arm();
    }

    /// The surface ramp's trigger.
    pub fn trigger_status(&self) -> TriggerStatus {
        self.surface_clock.status()
    }

    /// Number of non-finite torque commands replaced by zero.
    pub fn rejected_commands(&self) -> u64 {
        self.rejected
    }

    /// Sets the full state (for tests and scenario set-up). Non-finite values are ignored;
    /// joints are clamped into the ranges.
    pub fn set_state(&mut self, q: [f64; 2], qd: [f64; 2], hand_pos: [f64; 2], hand_vel: [f64; 2]) {
        let all = [q, qd, hand_pos, hand_vel];
        if all.iter().flatten().any(|v| !v.is_finite()) {
            return;
        }
        let l = &self.p.limits;
        self.q = Vector2::new(
            q[0].clamp(l.theta_min, l.theta_max),
            q[1].clamp(l.r_min, l.r_max),
        );
        self.qd = Vector2::from(qd);
        self.h = Vector2::from(hand_pos);
        self.hd = Vector2::from(hand_vel);
    }

    /// An instantaneous impulse (N·s) on the hand: `Δḣ = J/M3`.
    pub fn apply_hand_impulse(&mut self, impulse_n_s: [f64; 2]) {
        let j = Vector2::from(impulse_n_s);
        if j.x.is_finite() && j.y.is_finite() {
            self.hd += j / self.p.hand_mass_kg;
        }
    }

    fn surface_now(&self, t: f64) -> (Vector2<f64>, Vector2<f64>) {
        let s = &self.p.surface;
        match (s.motion, self.surface_clock.local_time(t)) {
            (Some(m), Some(tl)) => (m.offset(tl), m.velocity(tl)),
            _ => (Vector2::zeros(), Vector2::zeros()),
        }
    }

    /// Wrist spring force on the hand and contact force on the hand (+ penetration).
    fn forces(&self) -> (Vector2<f64>, Vector2<f64>, f64) {
        let p = &self.p;
        let w = wrist(&self.q);
        let wd = jac(&self.q) * self.qd;
        let f_w =
            (w - self.h) * p.wrist_stiffness_n_per_m + (wd - self.hd) * p.wrist_damping_n_s_per_m;
        let s = &p.surface;
        if !s.enabled {
            return (f_w, Vector2::zeros(), 0.0);
        }
        let (off, v_s) = self.surface_now(self.t);
        let point = Vector2::from(s.point_m) + off;
        let depth = -self.n.dot(&(self.h - point));
        if depth <= 0.0 {
            return (f_w, Vector2::zeros(), 0.0);
        }
        let v_rel = self.hd - v_s;
        let f_n = (s.stiffness_n_per_m * depth - s.damping_n_s_per_m * v_rel.dot(&self.n)).max(0.0);
        let v_t = v_rel - self.n * v_rel.dot(&self.n);
        let speed = v_t.norm();
        let fric = if speed > 0.0 && s.mu > 0.0 {
            -v_t * (s.mu * f_n * (speed / 1e-3).tanh() / speed)
        } else {
            Vector2::zeros()
        };
        (f_w, self.n * f_n + fric, depth)
    }

    /// One caller step of `dt` seconds with joint efforts `[τ_θ (N·m), f_r (N)]`, held over the
    /// step; the plant substeps at `substep_hz`. Non-finite efforts are replaced by 0 (and
    /// counted); a non-finite or non-positive `dt` only reports the state.
    pub fn step(&mut self, torque_cmd: [f64; 2], dt: f64) -> PlantState {
        let mut tau = Vector2::from(torque_cmd);
        for i in 0..2 {
            if !tau[i].is_finite() {
                tau[i] = 0.0;
                self.rejected += 1;
            }
        }
        self.tau = tau;
        if dt.is_finite() && dt > 0.0 {
            let n = (dt * self.p.substep_hz).ceil().max(1.0) as usize;
            let h = dt / n as f64;
            let t0 = self.t;
            for i in 0..n {
                self.t = t0 + i as f64 * h;
                self.substep(h);
            }
            self.t = t0 + dt;
        }
        self.state()
    }

    fn substep(&mut self, h: f64) {
        let p = self.p;
        let (f_w, f_c, depth) = self.forces();
        if depth > 0.0 {
            self.surface_clock.observe(true, self.t);
        }
        // Hand.
        let hd_new = self.hd + (f_w + f_c) * (h / p.hand_mass_kg);
        // Arm: generalised forces from the wrist spring and the velocity-product terms.
        let j = jac(&self.q);
        let q_w = j.transpose() * (-f_w);
        let r = self.q.y;
        let (th_d, r_d) = (self.qd.x, self.qd.y);
        let m_th = p.revolute_inertia_kg_m2 + p.boom_mass_kg * r * r;
        let m_r = p.boom_mass_kg;
        let net_th = self.tau.x + q_w.x - 2.0 * p.boom_mass_kg * r * r_d * th_d;
        let net_r = self.tau.y + q_w.y + p.boom_mass_kg * r * th_d * th_d;
        let mut qd_new = Vector2::new(
            friction_update(
                th_d,
                net_th,
                m_th,
                p.static_friction[0],
                p.coulomb_friction[0],
                p.viscous_friction[0],
                h,
            ),
            friction_update(
                r_d,
                net_r,
                m_r,
                p.static_friction[1],
                p.coulomb_friction[1],
                p.viscous_friction[1],
                h,
            ),
        );
        let mut q_new = self.q + qd_new * h;
        let l = &p.limits;
        if q_new.x >= l.theta_max {
            q_new.x = l.theta_max;
            qd_new.x = qd_new.x.min(0.0);
        } else if q_new.x <= l.theta_min {
            q_new.x = l.theta_min;
            qd_new.x = qd_new.x.max(0.0);
        }
        if q_new.y >= l.r_max {
            q_new.y = l.r_max;
            qd_new.y = qd_new.y.min(0.0);
        } else if q_new.y <= l.r_min {
            q_new.y = l.r_min;
            qd_new.y = qd_new.y.max(0.0);
        }
        self.q = q_new;
        self.qd = qd_new;
        self.hd = hd_new;
        self.h += hd_new * h;
    }

    /// The current state (no time passes).
    pub fn state(&self) -> PlantState {
        let (f_w, f_c, depth) = self.forces();
        let w = wrist(&self.q);
        let (s, c) = self.q.x.sin_cos();
        let f_h = [c * f_w.x + s * f_w.y, -s * f_w.x + c * f_w.y];
        let (off, _) = self.surface_now(self.t);
        PlantState {
            t: self.t,
            q: [self.q.x, self.q.y],
            qd: [self.qd.x, self.qd.y],
            wrist_pos: [w.x, w.y],
            hand_pos: [self.h.x, self.h.y],
            hand_vel: [self.hd.x, self.hd.y],
            wrist_force: [f_w.x, f_w.y],
            wrist_force_hand: f_h,
            contact_force: [f_c.x, f_c.y],
            in_contact: depth > 0.0,
            penetration: depth,
            surface_offset: [off.x, off.y],
            torque_applied: [self.tau.x, self.tau.y],
        }
    }

    /// Total mechanical energy (J): kinetic energy of arm and hand plus the wrist and surface
    /// springs' potential energy (for conservation tests).
    pub fn energy(&self) -> f64 {
        let p = &self.p;
        let r = self.q.y;
        let ke = 0.5 * (p.revolute_inertia_kg_m2 + p.boom_mass_kg * r * r) * self.qd.x.powi(2)
            + 0.5 * p.boom_mass_kg * self.qd.y.powi(2)
            + 0.5 * p.hand_mass_kg * self.hd.norm_squared();
        let pe_w = 0.5 * p.wrist_stiffness_n_per_m * (wrist(&self.q) - self.h).norm_squared();
        let (_, _, depth) = self.forces();
        let pe_s = 0.5 * p.surface.stiffness_n_per_m * depth * depth;
        ke + pe_w + pe_s
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn frictionless() -> RcPlantParams {
        RcPlantParams {
            static_friction: [0.0; 2],
            coulomb_friction: [0.0; 2],
            wrist_damping_n_s_per_m: 0.0,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_validate_and_give_280_hz() {
        let p = RcPlantParams::default();
        assert!(p.validate("rc_plant").is_empty());
        assert!((p.hand_mode_formula_hz() - 280.2).abs() < 0.1);
    }

    #[test]
    fn validation_lists_every_problem() {
        let p = RcPlantParams {
            hand_mass_kg: 0.0,
            substep_hz: 1000.0,
            static_friction: [0.1, 1.0],
            initial_q: [0.0, 5.0],
            surface: RcSurface {
                normal: [0.0, 0.0],
                ..Default::default()
            },
            ..Default::default()
        };
        let e = p.validate("rc_plant");
        for key in [
            "rc_plant.hand_mass_kg",
            "rc_plant.substep_hz",
            "rc_plant.static_friction[0]",
            "rc_plant.static_friction[1]",
            "rc_plant.initial_q",
            "rc_plant.surface.normal",
        ] {
            assert!(
                e.iter().any(|m| m.starts_with(key)),
                "{key} missing in {e:?}"
            );
        }
    }

    #[test]
    fn static_friction_holds_small_efforts_and_coulomb_slides() {
        let mut pl = RcPlant::new(RcPlantParams {
            surface: RcSurface {
                enabled: false,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        for _ in 0..100 {
            pl.step([0.9, 3.9], 0.001);
        }
        let s = pl.state();
        assert_eq!(s.qd, [0.0, 0.0]);
        assert_eq!(s.q, [0.0, 0.5]);
        // Above static: the prismatic joint accelerates at (f − T_c)/(m_b + M3) once the hand
        // follows: 2 N / 5.3 kg (wrist stiff, hand rides along).
        let mut pl2 = pl.clone();
        for _ in 0..200 {
            pl2.step([0.0, 5.0], 0.001);
        }
        let s2 = pl2.state();
        let a = s2.qd[1] / 0.2;
        assert!((a - 2.0 / 5.3).abs() < 0.02 * (2.0 / 5.3), "a = {a}");
        // Release: Coulomb friction stops it and it sticks.
        for _ in 0..2000 {
            pl2.step([0.0, 0.0], 0.001);
        }
        assert_eq!(pl2.state().qd[1], 0.0);
    }

    #[test]
    fn frictionless_free_plant_conserves_energy() {
        let mut pl = RcPlant::new(RcPlantParams {
            surface: RcSurface {
                enabled: false,
                ..Default::default()
            },
            ..frictionless()
        })
        .unwrap();
        pl.set_state(
            [0.1, 0.5],
            [0.5, 0.1],
            [0.5 * 0.1f64.cos() + 1e-4, 0.05],
            [0.0, 0.0],
        );
        let e0 = pl.energy();
        for _ in 0..1000 {
            pl.step([0.0, 0.0], 0.001);
        }
        let e1 = pl.energy();
        assert!(((e1 - e0) / e0).abs() < 5e-3, "{e0} → {e1}");
    }

    #[test]
    fn contact_force_is_surface_spring_and_wrist_force_balances_at_rest() {
        let mut pl = RcPlant::new(RcPlantParams::default()).unwrap();
        // Push the boom out with 20 N until it rests on the surface.
        let mut s = pl.state();
        for _ in 0..3000 {
            s = pl.step([0.0, 20.0], 0.001);
        }
        assert!(s.in_contact);
        // At rest the wrist force equals the force on the surface (= −contact force) and
        // the contact force is K_r δ along the normal.
        assert!((s.wrist_force[0] + s.contact_force[0]).abs() < 1e-3);
        assert!((s.contact_force[0] + 1.3e5 * s.penetration).abs() < 1e-6);
        // Static friction ±4 N around the 20 N push.
        assert!(
            (s.wrist_force[0] - 20.0).abs() <= 4.0 + 1e-3,
            "{:?}",
            s.wrist_force
        );
        assert!(s.wrist_force_hand[0] > 15.0);
    }

    #[test]
    fn ramp_moves_the_surface() {
        let mut pl = RcPlant::new(RcPlantParams {
            surface: RcSurface {
                motion: Some(PlanarRamp {
                    velocity_m_s: [0.0065, 0.0],
                    start_s: 0.5,
                    duration_s: 1.0,
                    trigger: Trigger::Time,
                }),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        let s = pl.step([0.0, 0.0], 1.0);
        assert!((s.surface_offset[0] - 0.00325).abs() < 1e-9);
        let s = pl.step([0.0, 0.0], 1.0);
        assert!((s.surface_offset[0] - 0.0065).abs() < 1e-9);
    }

    #[test]
    fn contact_triggered_ramp_waits_for_the_hand() {
        // Surface at x = 0.55 m; the hand starts at r = 0.5 (5 cm away). The ramp would have
        // ended by t = 1.5 s on a time trigger; with a contact trigger it starts 0.5 s after the
        // hand first touches.
        let mut pl = RcPlant::new(RcPlantParams {
            surface: RcSurface {
                motion: Some(PlanarRamp {
                    velocity_m_s: [0.0065, 0.0],
                    start_s: 0.5,
                    duration_s: 1.0,
                    trigger: Trigger::Contact,
                }),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        let mut s = pl.state();
        let mut k = 0u64;
        while !s.in_contact {
            k += 1;
            pl.set_time(k as f64 * 1e-3 - 1e-3);
            s = pl.step([0.0, 20.0], 1e-3);
            assert_eq!(s.surface_offset, [0.0, 0.0]);
            assert!(k < 5000, "never touched");
        }
        let t_contact = pl.trigger_status().origin_s.unwrap();
        assert!(t_contact > 0.0 && t_contact <= s.t);
        assert!(
            (s.t - k as f64 * 1e-3).abs() < 1e-12,
            "set_time keeps the clock"
        );
        // Still before start_s after contact: no motion; then the ramp.
        let s1 = pl.step([0.0, 20.0], 0.4);
        assert_eq!(s1.surface_offset, [0.0, 0.0]);
        let s2 = pl.step([0.0, 20.0], 0.6);
        let expect = 0.0065 * (s2.t - t_contact - 0.5);
        assert!((s2.surface_offset[0] - expect).abs() < 1e-12, "{s2:?}");
        // Re-armed: the surface is back home and waits for the next contact (the unservoed
        // boom bounces, so that may take a while).
        pl.arm_trigger();
        assert!(pl.trigger_status().armed);
        assert_eq!(pl.state().surface_offset, [0.0, 0.0]);
        let mut n = 0;
        loop {
            let s3 = pl.step([0.0, 20.0], 1e-3);
            if s3.in_contact {
                break;
            }
            assert_eq!(s3.surface_offset, [0.0, 0.0]);
            n += 1;
            assert!(n < 5000, "never touched again");
        }
        assert!(!pl.trigger_status().armed);
    }

    #[test]
    fn set_params_keeps_the_state() {
        let mut pl = RcPlant::new(RcPlantParams::default()).unwrap();
        for _ in 0..200 {
            pl.step([0.0, 20.0], 1e-3);
        }
        let before = pl.state();
        let p = RcPlantParams {
            static_friction: [2.0, 8.0],
            ..*pl.params()
        };
        pl.set_params(p).unwrap();
        let after = pl.state();
        assert_eq!(before.q, after.q);
        assert_eq!(before.qd, after.qd);
        assert_eq!(before.hand_pos, after.hand_pos);
        assert_eq!(before.t, after.t);
        assert_eq!(pl.params().static_friction, [2.0, 8.0]);
        // Invalid parameters change nothing.
        let bad = RcPlantParams {
            hand_mass_kg: -1.0,
            ..*pl.params()
        };
        assert!(pl.set_params(bad).is_err());
        assert_eq!(pl.params().static_friction, [2.0, 8.0]);
        assert_eq!(pl.state(), after);
    }

    #[test]
    fn non_finite_inputs_are_harmless() {
        let mut pl = RcPlant::new(RcPlantParams::default()).unwrap();
        let s = pl.step([f64::NAN, f64::INFINITY], 0.01);
        assert_eq!(pl.rejected_commands(), 2);
        assert_eq!(s.torque_applied, [0.0, 0.0]);
        let s = pl.step([0.0, 1.0], f64::NAN);
        assert_eq!(s.t, 0.01);
    }
}
