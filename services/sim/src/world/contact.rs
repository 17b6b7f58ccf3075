//! Contact between the tool tip and the environment's surfaces.
//!
//! The tool tip is a sphere of radius `ρ ≥ 0` centred on the TCP (ρ = 0: a point). Each
//! surface is, in the base frame, a half-space (plane), a solid axis-aligned box, a solid
//! infinite cylinder (axis point, axis direction, radius; contact on its outside) or a solid
//! sphere (centre, radius), optionally translating along a ramp (the paper's moving reaction
//! surface, Fig. 8) whose start may wait for the first contact ([`super::trigger`]).
//!
//! Penetration of the tip sphere (centre `c`) and outward normal `n` per shape:
//!
//! * plane: `δ = ρ − n·(c − p)`, `n` the plane's normal;
//! * box: from the closest point of the box (or, with `c` inside, through the nearest face);
//! * cylinder: `r = (c − a) − ((c − a)·u) u` the radial vector from the axis (point `a`, unit
//!   direction `u`), `δ = R + ρ − |r|`, `n = r/|r|` — radially outward at the contact point;
//! * sphere: `r = c − o`, `δ = R + ρ − |r|`, `n = r/|r|`.
//!
//! (With `c` exactly on a cylinder's axis or at a sphere's centre the radial direction is
//! undefined; a fixed perpendicular is used — the tip is then a whole radius deep, far outside
//! any sane contact.)
//!
//! Every shape then uses the same contact law. Per surface, with penetration `δ > 0`, outward
//! unit normal `n` (from the surface towards the tool), and the velocity of the contact point
//! relative to the surface `v_rel`:
//!
//! * normal force `F_n = max(0, K δ + D δ̇)`, `δ̇ = −v_rel·n` — a spring–damper that only
//!   pushes (the damper never makes the surface pull the tool back, and nothing acts when
//!   `δ ≤ 0`);
//! * friction `F_t = −μ F_n · tanh(|v_t|/v_s) · v_t/|v_t|`, `v_t` the tangential part of
//!   `v_rel`: opposite to the sliding velocity, magnitude `< μ F_n`, smooth through zero
//!   (`v_s` = `friction_smoothing_m_s`, the speed at which 76 % of the Coulomb level is
//!   reached).
//!
//! The force acts on the tool at the contact point `c = TCP − ρ n`; the wrench reported is
//! about the TCP in base axes, so friction on a ball tip gives a torque `(−ρ n) × F_t`.
//! Forces are those **exerted on the tool** by the environment.

use kinematics::{Twist, Wrench};
use nalgebra::{Isometry3, Vector3};
use serde::{Deserialize, Serialize};

use super::trigger::{Trigger, TriggerClock, TriggerStatus};

/// A translation of a surface over time: zero before `start_s`, `velocity·(t − start_s)` while
/// moving, frozen after `start_s + duration_s`. `t` is the ramp's own time: scenario time with
/// `trigger = "time"`, time since the first contact with this surface with
/// `trigger = "contact"` (see [`super::trigger`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Ramp {
    /// Velocity of the surface while moving (m/s, base frame).
    pub velocity_m_s: [f64; 3],
    /// Time the motion starts (s).
    pub start_s: f64,
    /// Duration of the motion (s); `f64::INFINITY` is not representable in TOML, so use a
    /// large number for "forever".
    pub duration_s: f64,
    /// What `start_s` counts from: `"time"` (scenario time 0, default) or `"contact"` (the
    /// first contact of the tool with this surface after the trigger was armed).
    pub trigger: Trigger,
}

impl Default for Ramp {
    fn default() -> Self {
        Self {
            velocity_m_s: [0.0; 3],
            start_s: 0.0,
            duration_s: 0.0,
            trigger: Trigger::Time,
        }
    }
}

impl Ramp {
    /// Displacement of the surface at time `t` (m).
    pub fn offset(&self, t: f64) -> Vector3<f64> {
        let tau = (t - self.start_s).clamp(0.0, self.duration_s.max(0.0));
        Vector3::from(self.velocity_m_s) * tau
    }

    /// Velocity of the surface at time `t` (m/s).
    pub fn velocity(&self, t: f64) -> Vector3<f64> {
        if t >= self.start_s && t < self.start_s + self.duration_s {
            Vector3::from(self.velocity_m_s)
        } else {
            Vector3::zeros()
        }
    }

    /// Every problem, keys prefixed with `prefix`.
    pub fn validate(&self, prefix: &str) -> Vec<String> {
        let mut e = Vec::new();
        for (i, v) in self.velocity_m_s.iter().enumerate() {
            if !v.is_finite() || v.abs() > 2.0 {
                e.push(format!(
                    "{prefix}.velocity_m_s[{i}]: must be finite and |v| <= 2 m/s (got {v})"
                ));
            }
        }
        if !self.start_s.is_finite() || self.start_s < 0.0 {
            e.push(format!(
                "{prefix}.start_s: must be finite and >= 0 (got {})",
                self.start_s
            ));
        }
        if !self.duration_s.is_finite() || self.duration_s < 0.0 {
            e.push(format!(
                "{prefix}.duration_s: must be finite and >= 0 (got {})",
                self.duration_s
            ));
        }
        e
    }
}

/// Geometry of a surface (base frame, at t = 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// The half-space `n·(x − point) ≤ 0` is solid; `normal` (unit) points into free space.
    Plane {
        point: Vector3<f64>,
        normal: Vector3<f64>,
    },
    /// A solid axis-aligned box `min ≤ x ≤ max`.
    Box {
        min: Vector3<f64>,
        max: Vector3<f64>,
    },
    /// A solid infinite cylinder: the points within `radius` of the line through `point` along
    /// `axis` (unit). Contact on the outside.
    Cylinder {
        point: Vector3<f64>,
        axis: Vector3<f64>,
        radius: f64,
    },
    /// A solid sphere.
    Sphere { center: Vector3<f64>, radius: f64 },
    /// A plate of `thickness` under its top face (through `center`, outward unit `normal`),
    /// unbounded laterally, with a round through hole of `hole_radius` whose axis passes
    /// through `center` along `normal`. No chamfer: the hole's edge is sharp. Touched by the
    /// tool's peg ([`Peg`]), see [`plate_with_hole_contacts`].
    PlateWithHole {
        center: Vector3<f64>,
        normal: Vector3<f64>,
        hole_radius: f64,
        thickness: f64,
    },
}

/// The tool's peg: a flat-ended cylinder of `radius` along the tool's z axis whose end face is
/// centred on the TCP, the body extending `length` back from the TCP (along −z of the tool).
/// Used by [`Shape::PlateWithHole`] only; the other shapes see the ball tip.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Peg {
    /// Radius r_p (m), ≥ 0 (0: a needle whose end is a point).
    pub radius: f64,
    /// Length L (m), > 0.
    pub length: f64,
}

/// A unit vector perpendicular to the unit vector `u` (deterministic).
fn perpendicular(u: &Vector3<f64>) -> Vector3<f64> {
    // Cross with the base axis least aligned with u.
    let a = u.map(f64::abs);
    let e = if a.x <= a.y && a.x <= a.z {
        Vector3::x()
    } else if a.y <= a.z {
        Vector3::y()
    } else {
        Vector3::z()
    };
    let p = u.cross(&e);
    let n = p.norm();
    if n > 0.0 {
        p / n
    } else {
        Vector3::z()
    }
}

/// Penetration of a sphere of radius `rho` centred `r` away from a round shape's core (the
/// radial vector from a cylinder's axis or a sphere's centre) of radius `radius`.
fn round_penetration(
    r: Vector3<f64>,
    radius: f64,
    rho: f64,
    fallback: Vector3<f64>,
) -> Option<Penetration> {
    let dist = r.norm();
    let depth = radius + rho - dist;
    if depth <= 0.0 {
        return None;
    }
    let normal = if dist > 1e-12 { r / dist } else { fallback };
    Some(Penetration { depth, normal })
}

/// One penetration of the peg into a plate with a hole.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PegPenetration {
    /// Depth (m), > 0.
    depth: f64,
    /// Unit normal from the plate towards the peg (base).
    normal: Vector3<f64>,
    /// Where the force acts on the peg (base).
    point: Vector3<f64>,
    /// This contact's share of the spring–damper force (the two ends of a wall contact split
    /// it; 1 otherwise).
    share: f64,
}

/// The wall of the hole is modelled while the peg's axis is within 30° of the plate normal.
const WALL_MAX_TILT_COS: f64 = 0.866_025_403_784_438_6;
/// The end face is modelled while it faces the plate within 60°.
const FACE_MAX_TILT_COS: f64 = 0.5;
/// Pressure-centre sampling of the end face: rays from its centre × points on each stretch of a
/// ray over the solid.
const FACE_SPOKES: usize = 128;
const FACE_RAY_POINTS: usize = 4;

/// A plate with a hole at one instant (base): top face through `o` with outward normal `n`.
#[derive(Debug, Clone, Copy)]
struct Plate {
    o: Vector3<f64>,
    n: Vector3<f64>,
    radius: f64,
    thickness: f64,
}

impl Plate {
    fn height(&self, x: &Vector3<f64>) -> f64 {
        self.n.dot(&(x - self.o))
    }

    /// The part of a vector in the plate's plane.
    fn flat(&self, v: &Vector3<f64>) -> Vector3<f64> {
        v - self.n * self.n.dot(v)
    }

    /// The peg's penetrations: either the end face on the plate's top (one contact) or the
    /// peg against the hole's wall (up to two: the lower end and the top edge), whichever is
    /// the smaller way out (see the module docs).
    fn penetrations(&self, tcp: &Isometry3<f64>, peg: &Peg) -> Vec<PegPenetration> {
        let c = tcp.translation.vector;
        let a = tcp.rotation * Vector3::z();
        let rp = peg.radius.max(0.0);
        let h_c = self.height(&c);
        let c_lat = self.flat(&(c - self.o));
        let face = self.face(&a, rp, h_c, &c_lat);
        let walls = if h_c < 0.0 && -a.dot(&self.n) >= WALL_MAX_TILT_COS {
            self.walls(&c, &(-a), rp, peg.length, h_c, &c_lat)
        } else {
            Vec::new()
        };
        let d_lat = walls.iter().map(|w| w.depth).fold(0.0, f64::max);
        match face {
            Some(f) if walls.is_empty() || f.depth <= d_lat => vec![f],
            _ => walls,
        }
    }

    /// The end face (disc of radius `rp` centred `c_lat` in the plate's plane, height `h_c`,
    /// outward normal `a`) on the solid part of the plate's top: depth of its lowest point over
    /// the solid, the force at the pressure centre of the overlap.
    fn face(
        &self,
        a: &Vector3<f64>,
        rp: f64,
        h_c: f64,
        c_lat: &Vector3<f64>,
    ) -> Option<PegPenetration> {
        let an = a.dot(&self.n);
        if an > -FACE_MAX_TILT_COS || h_c < -self.thickness {
            return None;
        }
        let e = c_lat.norm();
        let r = self.radius;
        if e + rp <= r {
            return None; // the face fits inside the hole
        }
        // Height of the face over the plate point `y` (in the plane): affine in y.
        let g = -self.flat(a) / an;
        let h = |y: &Vector3<f64>| h_c + g.dot(&(y - c_lat));
        let c_hat = if e > 1e-12 {
            c_lat / e
        } else {
            perpendicular(&self.n)
        };
        // The lowest point of the face over the solid: the lowest rim point when it is over the
        // solid, else on the boundary of the overlap (the rim/hole-edge crossings, the hole
        // edge's lowest point under the face).
        let mut cands: Vec<Vector3<f64>> = Vec::with_capacity(4);
        let gn = g.norm();
        if gn < 1e-12 {
            cands.push(c_lat + c_hat * rp);
        } else {
            let gh = g / gn;
            let y0 = c_lat - gh * rp;
            if y0.norm() >= r {
                cands.push(y0);
            }
            let y1 = -gh * r;
            if (y1 - c_lat).norm() <= rp {
                cands.push(y1);
            }
            if e > 1e-12 && e >= (rp - r).abs() && e <= rp + r {
                let x = (e * e + r * r - rp * rp) / (2.0 * e);
                let w = (r * r - x * x).max(0.0).sqrt();
                let perp = self.n.cross(&c_hat);
                cands.push(c_hat * x + perp * w);
                cands.push(c_hat * x - perp * w);
            }
            if cands.is_empty() {
                cands.push(y0);
            }
        }
        let (deepest, h_min) =
            cands
                .iter()
                .map(|y| (*y, h(y)))
                .fold(
                    (cands[0], f64::INFINITY),
                    |b, x| if x.1 < b.1 { x } else { b },
                );
        if h_min >= 0.0 {
            return None;
        }
        // Pressure centre: along FACE_SPOKES rays from the face's centre, the stretches of the
        // ray over the solid (outside the hole, from the roots of |c + ρ·d| = r) sampled at
        // FACE_RAY_POINTS midpoints each, every sample weighted by its depth and its area
        // (ρ·dρ). The hole's edge is found exactly on every ray, so a crescent by the rim is
        // resolved however thin (a fixed polar grid misses one narrower than its outer ring's
        // gap, and then the centre jumped to a rim/hole crossing, ~70° off the offset).
        let mut centre = deepest;
        if rp > 0.0 {
            let e1 = perpendicular(&self.n);
            let e2 = self.n.cross(&e1);
            let (mut sw, mut sy) = (0.0, Vector3::zeros());
            let mut add = |d: &Vector3<f64>, lo: f64, hi: f64| {
                let step = (hi - lo) / FACE_RAY_POINTS as f64;
                for k in 0..FACE_RAY_POINTS {
                    let rho = lo + step * (k as f64 + 0.5);
                    let y = c_lat + d * rho;
                    let w = (-h(&y)).max(0.0) * rho * step;
                    sw += w;
                    sy += y * w;
                }
            };
            for j in 0..FACE_SPOKES {
                let th = std::f64::consts::TAU * (j as f64 + 0.5) / FACE_SPOKES as f64;
                let d = e1 * th.cos() + e2 * th.sin();
                // Inside the hole for ρ in (ρ1, ρ2): ρ² + 2(c·d)ρ + e² − r² < 0.
                let cd = c_lat.dot(&d);
                let disc = cd * cd - e * e + r * r;
                if disc <= 0.0 {
                    add(&d, 0.0, rp);
                    continue;
                }
                let (r1, r2) = (-cd - disc.sqrt(), -cd + disc.sqrt());
                if r1 > 0.0 {
                    add(&d, 0.0, r1.min(rp));
                }
                if r2 < rp {
                    add(&d, r2.max(0.0), rp);
                }
            }
            if sw > 0.0 {
                centre = sy / sw;
            }
        }
        Some(PegPenetration {
            depth: -h_min,
            normal: self.n,
            point: self.o + centre + self.n * h(&centre),
            share: 1.0,
        })
    }

    /// The peg's side (axis through `c` along `u`, the body's direction, radius `rp`, length
    /// `len`) against the hole's wall, at the two ends of its stretch inside the plate: the
    /// lower end (the end face's rim, or the plate's underside edge) and the top edge.
    fn walls(
        &self,
        c: &Vector3<f64>,
        u: &Vector3<f64>,
        rp: f64,
        len: f64,
        h_c: f64,
        c_lat: &Vector3<f64>,
    ) -> Vec<PegPenetration> {
        let k = self.n.dot(u);
        let u_lat = self.flat(u);
        let lo = h_c.max(-self.thickness);
        let hi = (h_c + k * len).min(0.0);
        if lo > hi {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(2);
        let ends: &[f64] = if hi - lo > 1e-12 { &[lo, hi] } else { &[lo] };
        for &hh in ends {
            let s = (hh - h_c) / k;
            let r = c_lat + u_lat * s;
            let dist = r.norm();
            let depth = dist + rp - self.radius;
            if depth <= 0.0 {
                continue;
            }
            let r_hat = if dist > 1e-12 {
                r / dist
            } else {
                perpendicular(&self.n)
            };
            out.push(PegPenetration {
                depth,
                normal: -r_hat,
                point: c + u * s + r_hat * rp,
                share: 1.0,
            });
        }
        let sum: f64 = out.iter().map(|p| p.depth).sum();
        for p in &mut out {
            p.share = p.depth / sum;
        }
        out
    }
}

/// A contact surface with its contact law.
#[derive(Debug, Clone, PartialEq)]
pub struct Surface {
    /// Name for reports.
    pub name: String,
    /// Geometry at t = 0.
    pub shape: Shape,
    /// Normal stiffness K_r (N/m), ≥ 0.
    pub stiffness: f64,
    /// Normal damping (N·s/m), ≥ 0.
    pub damping: f64,
    /// Coulomb friction coefficient μ, ≥ 0.
    pub mu: f64,
    /// Optional motion.
    pub motion: Option<Ramp>,
    /// The start trigger of `motion` (a `time` trigger when there is no motion).
    pub trigger: TriggerClock,
    /// A stiffness that changes along the surface ([`Grade`]); `stiffness` where it does not.
    pub grade: Option<Grade>,
}

/// A stiffness that changes along a surface: a compliant pad set flush into a stiff table,
/// its depth tapering to nothing. A pad's column compresses in proportion to its depth, so the
/// compliance `1/K` (pad in series with the table) falls linearly along the taper. With
/// `s = axis·c` (`c` the contact point, base, at rest): `K = stiffness` for `s ≤ from_m`,
/// `K = to_stiffness` for `s ≥ to_m`, and `1/K` linear in `s` in between. The surface's
/// height does not change: only what it is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grade {
    /// Unit direction along which the stiffness changes (base).
    pub axis: Vector3<f64>,
    pub from_m: f64,
    pub to_m: f64,
    /// The stiffness from `to_m` on (N/m).
    pub to_stiffness: f64,
}

impl Grade {
    /// The stiffness at the contact point `c` (base) of a surface whose own is `k0`.
    pub fn stiffness_at(&self, k0: f64, c: &Vector3<f64>) -> f64 {
        let s = self.axis.dot(c);
        let span = self.to_m - self.from_m;
        let w = if span > 0.0 {
            ((s - self.from_m) / span).clamp(0.0, 1.0)
        } else if s >= self.to_m {
            1.0
        } else {
            0.0
        };
        if w <= 0.0 {
            return k0;
        }
        if w >= 1.0 {
            return self.to_stiffness;
        }
        if k0 <= 0.0 || self.to_stiffness <= 0.0 {
            return k0 + (self.to_stiffness - k0) * w;
        }
        1.0 / ((1.0 - w) / k0 + w / self.to_stiffness)
    }
}

/// Penetration of the tip sphere into a surface.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Penetration {
    /// Depth (m), > 0.
    pub depth: f64,
    /// Unit normal from the surface towards the tool (base).
    pub normal: Vector3<f64>,
}

/// The contact force of one surface on the tool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContactForce {
    /// Penetration depth (m).
    pub depth: f64,
    /// Unit normal (base).
    pub normal: Vector3<f64>,
    /// Normal force magnitude F_n ≥ 0 (N).
    pub normal_force: f64,
    /// Friction force (N, base), tangential.
    pub friction: Vector3<f64>,
    /// Contact point on the tip sphere (m, base).
    pub point: Vector3<f64>,
}

impl ContactForce {
    /// Total force on the tool (N, base).
    pub fn force(&self) -> Vector3<f64> {
        self.normal * self.normal_force + self.friction
    }
}

impl Surface {
    /// A surface at rest or moving along `motion`, its trigger armed.
    pub fn new(
        name: impl Into<String>,
        shape: Shape,
        stiffness: f64,
        damping: f64,
        mu: f64,
        motion: Option<Ramp>,
    ) -> Self {
        Self {
            name: name.into(),
            shape,
            stiffness,
            damping,
            mu,
            motion,
            trigger: TriggerClock::new(motion.map_or(Trigger::Time, |m| m.trigger)),
            grade: None,
        }
    }

    /// The same surface with a stiffness that changes along it.
    pub fn with_grade(mut self, grade: Option<Grade>) -> Self {
        self.grade = grade;
        self
    }

    /// The normal stiffness at the contact point `c` (base, the surface's own coordinates).
    pub fn stiffness_at(&self, c: &Vector3<f64>) -> f64 {
        match &self.grade {
            Some(g) => g.stiffness_at(self.stiffness, c),
            None => self.stiffness,
        }
    }

    /// Displacement of the surface at scenario time `t` (zero while its trigger waits).
    pub fn offset(&self, t: f64) -> Vector3<f64> {
        match (self.motion, self.trigger.local_time(t)) {
            (Some(m), Some(tl)) => m.offset(tl),
            _ => Vector3::zeros(),
        }
    }

    /// Velocity of the surface at scenario time `t`.
    pub fn velocity(&self, t: f64) -> Vector3<f64> {
        match (self.motion, self.trigger.local_time(t)) {
            (Some(m), Some(tl)) => m.velocity(tl),
            _ => Vector3::zeros(),
        }
    }

    /// The motion trigger's state.
    pub fn trigger_status(&self) -> TriggerStatus {
        self.trigger.status()
    }

    /// Penetration of a sphere (centre `c`, radius `rho`) at time `t`, if any.
    pub fn penetration(&self, c: &Vector3<f64>, rho: f64, t: f64) -> Option<Penetration> {
        let c = c - self.offset(t);
        match self.shape {
            Shape::Plane { point, normal } => {
                let depth = rho - normal.dot(&(c - point));
                (depth > 0.0).then_some(Penetration { depth, normal })
            }
            Shape::Box { min, max } => {
                let closest = Vector3::new(
                    c.x.clamp(min.x, max.x),
                    c.y.clamp(min.y, max.y),
                    c.z.clamp(min.z, max.z),
                );
                let d = c - closest;
                let dist = d.norm();
                if dist > 0.0 {
                    let depth = rho - dist;
                    (depth > 0.0).then(|| Penetration {
                        depth,
                        normal: d / dist,
                    })
                } else {
                    // Centre inside the box: push out through the nearest face.
                    let faces = [
                        (c.x - min.x, -Vector3::x()),
                        (max.x - c.x, Vector3::x()),
                        (c.y - min.y, -Vector3::y()),
                        (max.y - c.y, Vector3::y()),
                        (c.z - min.z, -Vector3::z()),
                        (max.z - c.z, Vector3::z()),
                    ];
                    let mut best = faces[0];
                    for f in faces.iter().skip(1) {
                        if f.0 < best.0 {
                            best = *f;
                        }
                    }
                    Some(Penetration {
                        depth: rho + best.0,
                        normal: best.1,
                    })
                }
            }
            Shape::Cylinder {
                point,
                axis,
                radius,
            } => {
                let d = c - point;
                let r = d - axis * axis.dot(&d);
                round_penetration(r, radius, rho, perpendicular(&axis))
            }
            Shape::Sphere { center, radius } => {
                round_penetration(c - center, radius, rho, Vector3::z())
            }
            // Touched by the peg only ([`Surface::contacts`]).
            Shape::PlateWithHole { .. } => None,
        }
    }

    /// Every contact of this surface with the tool at pose `tcp` (base) moving with
    /// `tcp_twist`: the ball tip (radius `rho`) for the plain shapes, the `peg` for
    /// [`Shape::PlateWithHole`].
    pub fn contacts(
        &self,
        tcp: &Isometry3<f64>,
        tcp_twist: &Twist,
        rho: f64,
        peg: &Peg,
        v_s: f64,
        t: f64,
    ) -> Vec<ContactForce> {
        match self.shape {
            Shape::PlateWithHole {
                center,
                normal,
                hole_radius,
                thickness,
            } => {
                let plate = Plate {
                    o: center + self.offset(t),
                    n: normal,
                    radius: hole_radius,
                    thickness,
                };
                plate
                    .penetrations(tcp, peg)
                    .into_iter()
                    .filter_map(|p| self.law(p, tcp, tcp_twist, v_s, t))
                    .collect()
            }
            _ => self
                .contact(&tcp.translation.vector, tcp_twist, rho, v_s, t)
                .into_iter()
                .collect(),
        }
    }

    /// The contact law at one penetration of the peg (depth, normal, point, share of the
    /// spring–damper force).
    fn law(
        &self,
        p: PegPenetration,
        tcp: &Isometry3<f64>,
        tcp_twist: &Twist,
        v_s: f64,
        t: f64,
    ) -> Option<ContactForce> {
        let n = p.normal;
        let r = p.point - tcp.translation.vector;
        let v_point = tcp_twist.linear + tcp_twist.angular.cross(&r);
        let v_rel = v_point - self.velocity(t);
        let depth_rate = -v_rel.dot(&n);
        let normal_force =
            (p.share * (self.stiffness * p.depth + self.damping * depth_rate)).max(0.0);
        let v_t = v_rel - n * v_rel.dot(&n);
        let speed = v_t.norm();
        let friction = if speed > 0.0 && normal_force > 0.0 && self.mu > 0.0 {
            -v_t * (self.mu * normal_force * (speed / v_s).tanh() / speed)
        } else {
            Vector3::zeros()
        };
        Some(ContactForce {
            depth: p.depth,
            normal: n,
            normal_force,
            friction,
            point: p.point,
        })
    }

    /// Contact force on a tip sphere of radius `rho` centred at the TCP moving with `tcp_twist`
    /// (velocity of the TCP and angular velocity, base), at time `t`. `v_s` is the friction
    /// smoothing speed (m/s, > 0).
    pub fn contact(
        &self,
        tcp: &Vector3<f64>,
        tcp_twist: &Twist,
        rho: f64,
        v_s: f64,
        t: f64,
    ) -> Option<ContactForce> {
        let p = self.penetration(tcp, rho, t)?;
        let n = p.normal;
        let r = -n * rho; // TCP → contact point
        let point = tcp + r;
        let v_point = tcp_twist.linear + tcp_twist.angular.cross(&r);
        let v_rel = v_point - self.velocity(t);
        let depth_rate = -v_rel.dot(&n);
        let k = self.stiffness_at(&(point - self.offset(t)));
        let normal_force = (k * p.depth + self.damping * depth_rate).max(0.0);
        let v_t = v_rel - n * v_rel.dot(&n);
        let speed = v_t.norm();
        let friction = if speed > 0.0 && normal_force > 0.0 && self.mu > 0.0 {
            -v_t * (self.mu * normal_force * (speed / v_s).tanh() / speed)
        } else {
            Vector3::zeros()
        };
        Some(ContactForce {
            depth: p.depth,
            normal: n,
            normal_force,
            friction,
            point,
        })
    }
}

/// The sum of all surfaces' contacts on the tool.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ContactSummary {
    /// Wrench on the tool about the TCP, base axes (N, N·m).
    pub wrench_at_tcp: Wrench,
    /// Number of surfaces penetrated.
    pub contacts: usize,
    /// Largest penetration depth (m), 0 when free.
    pub max_depth: f64,
    /// Sum of the normal force magnitudes (N).
    pub normal_force: f64,
    /// Sum of the friction force magnitudes (N).
    pub friction_force: f64,
}

/// All surfaces plus the tip geometry.
#[derive(Debug, Clone, PartialEq)]
pub struct ContactModel {
    /// The surfaces.
    pub surfaces: Vec<Surface>,
    /// Tip sphere radius ρ (m), ≥ 0.
    pub tip_radius: f64,
    /// Friction smoothing speed v_s (m/s), > 0.
    pub friction_smoothing: f64,
    /// The peg (plates with a hole only).
    pub peg: Peg,
}

impl ContactSummary {
    fn add(&mut self, c: &ContactForce, tcp: &Vector3<f64>) {
        let f = c.force();
        let r = c.point - tcp;
        self.wrench_at_tcp.force += f;
        self.wrench_at_tcp.torque += r.cross(&f);
        self.max_depth = self.max_depth.max(c.depth);
        self.normal_force += c.normal_force;
        self.friction_force += c.friction.norm();
    }
}

/// The tool pointing straight down (tool z along −z of base) at `p`.
pub fn tool_down(p: &Vector3<f64>) -> Isometry3<f64> {
    Isometry3::from_parts(
        nalgebra::Translation3::from(*p),
        nalgebra::UnitQuaternion::from_axis_angle(&Vector3::x_axis(), std::f64::consts::PI),
    )
}

impl ContactModel {
    fn v_s(&self) -> f64 {
        if self.friction_smoothing > 0.0 {
            self.friction_smoothing
        } else {
            1e-3
        }
    }

    /// Sums the contacts of every surface on the tool at `tcp` pointing straight down (see
    /// [`ContactModel::evaluate_at`]).
    pub fn evaluate(&self, tcp: &Vector3<f64>, tcp_twist: &Twist, t: f64) -> ContactSummary {
        self.evaluate_at(&tool_down(tcp), tcp_twist, t)
    }

    /// Sums the contacts of every surface on the tool at pose `tcp` (no trigger changes: see
    /// [`ContactModel::step`]).
    pub fn evaluate_at(&self, tcp: &Isometry3<f64>, tcp_twist: &Twist, t: f64) -> ContactSummary {
        let mut s = ContactSummary::default();
        let v_s = self.v_s();
        let p = tcp.translation.vector;
        for surf in &self.surfaces {
            let cs = surf.contacts(tcp, tcp_twist, self.tip_radius, &self.peg, v_s, t);
            for c in &cs {
                s.add(c, &p);
            }
            s.contacts += usize::from(!cs.is_empty());
        }
        s
    }

    /// [`ContactModel::evaluate_at`] at scenario time `t`, then fires the `contact` trigger of
    /// every surface touched (so a triggered ramp starts counting from `t`).
    pub fn step(&mut self, tcp: &Isometry3<f64>, tcp_twist: &Twist, t: f64) -> ContactSummary {
        let mut s = ContactSummary::default();
        let (v_s, rho, peg) = (self.v_s(), self.tip_radius, self.peg);
        let p = tcp.translation.vector;
        for surf in &mut self.surfaces {
            let cs = surf.contacts(tcp, tcp_twist, rho, &peg, v_s, t);
            for c in &cs {
                s.add(c, &p);
            }
            if !cs.is_empty() {
                s.contacts += 1;
                surf.trigger.observe(true, t);
            }
        }
        s
    }

    /// Re-arms every `contact` trigger.
    pub fn arm_triggers(&mut self) {
        for s in &mut self.surfaces {
            s.trigger.arm();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn table(mu: f64, damping: f64) -> Surface {
        Surface::new(
            "table",
            Shape::Plane {
                point: Vector3::new(0.0, 0.0, 0.1),
                normal: Vector3::z(),
            },
            2e4,
            damping,
            mu,
            None,
        )
    }

    fn still() -> Twist {
        Twist::default()
    }

    fn moving(v: Vector3<f64>) -> Twist {
        Twist::new(v, Vector3::zeros())
    }

    /// A pad set flush into a steel table, tapering out along x: the same depth presses
    /// with the pad's stiffness before the taper, the steel's after it, and in between the
    /// compliance falls linearly (pad and steel in series); the height does not change.
    #[test]
    fn a_graded_surface_changes_stiffness_along_it_not_height() {
        let g = Grade {
            axis: Vector3::x(),
            from_m: 0.40,
            to_m: 0.42,
            to_stiffness: 1e6,
        };
        let t = table(0.0, 0.0).with_grade(Some(g));
        let k0 = t.stiffness;
        let at = |x: f64| {
            t.contact(
                &Vector3::new(x, 0.0, 0.101 - 1e-5),
                &still(),
                0.001,
                1e-3,
                0.0,
            )
            .map(|c| (c.depth, c.normal_force))
            .expect("contact")
        };
        let (d0, f0) = at(0.35);
        let (d1, f1) = at(0.45);
        let (dm, fm) = at(0.41);
        assert!((d0 - 1e-5).abs() < 1e-12 && (d1 - d0).abs() < 1e-12 && (dm - d0).abs() < 1e-12);
        assert!((f0 - k0 * 1e-5).abs() < 1e-9, "{f0}");
        assert!((f1 - 1e6 * 1e-5).abs() < 1e-6, "{f1}");
        let km = 1.0 / (0.5 / k0 + 0.5 / 1e6);
        assert!((fm - km * 1e-5).abs() < 1e-6, "{fm} vs {}", km * 1e-5);
        // Monotonic through the taper.
        let mut prev = 0.0;
        for i in 0..=40 {
            let x = 0.395 + i as f64 * 0.0005;
            let k = g.stiffness_at(k0, &Vector3::new(x, 0.0, 0.0));
            assert!(k >= prev && (k0..=1e6).contains(&k), "x {x}: {k}");
            prev = k;
        }
    }

    #[test]
    fn penetration_gives_pushing_normal_force() {
        let s = table(0.0, 0.0);
        // 1 mm below the table surface: 20 N upwards.
        let c = s
            .contact(&Vector3::new(0.3, 0.0, 0.099), &still(), 0.0, 1e-3, 0.0)
            .unwrap();
        assert!((c.depth - 1e-3).abs() < 1e-12);
        assert!((c.force() - Vector3::new(0.0, 0.0, 20.0)).norm() < 1e-9);
        // Above: nothing.
        assert!(s
            .contact(&Vector3::new(0.3, 0.0, 0.1001), &still(), 0.0, 1e-3, 0.0)
            .is_none());
    }

    #[test]
    fn tip_radius_moves_the_contact() {
        let s = table(0.0, 0.0);
        let c = s
            .contact(&Vector3::new(0.0, 0.0, 0.105), &still(), 0.006, 1e-3, 0.0)
            .unwrap();
        assert!((c.depth - 1e-3).abs() < 1e-12);
        assert!((c.point.z - 0.099).abs() < 1e-12);
    }

    #[test]
    fn damping_only_in_contact_and_never_pulls() {
        let s = table(0.0, 500.0);
        // Free, moving fast towards the table: no force.
        assert!(s
            .contact(
                &Vector3::new(0.0, 0.0, 0.11),
                &moving(Vector3::new(0.0, 0.0, -1.0)),
                0.0,
                1e-3,
                0.0
            )
            .is_none());
        // In contact, pressing in: spring + damper.
        let c = s
            .contact(
                &Vector3::new(0.0, 0.0, 0.099),
                &moving(Vector3::new(0.0, 0.0, -0.01)),
                0.0,
                1e-3,
                0.0,
            )
            .unwrap();
        assert!((c.normal_force - (20.0 + 5.0)).abs() < 1e-9);
        // In contact, leaving fast: the damper would pull, the force is clamped to zero.
        let c = s
            .contact(
                &Vector3::new(0.0, 0.0, 0.099),
                &moving(Vector3::new(0.0, 0.0, 1.0)),
                0.0,
                1e-3,
                0.0,
            )
            .unwrap();
        assert_eq!(c.normal_force, 0.0);
    }

    #[test]
    fn friction_opposes_sliding_and_is_bounded() {
        let s = table(0.3, 0.0);
        let v = Vector3::new(0.05, -0.02, 0.0);
        let c = s
            .contact(&Vector3::new(0.0, 0.0, 0.099), &moving(v), 0.0, 1e-3, 0.0)
            .unwrap();
        assert!(c.friction.dot(&v) < 0.0);
        assert!(c.friction.cross(&v).norm() < 1e-12, "antiparallel");
        assert!(c.friction.norm() <= 0.3 * c.normal_force);
        // Fast sliding reaches the Coulomb level.
        assert!((c.friction.norm() - 0.3 * 20.0).abs() < 1e-6);
        // Smooth through zero: small speed, small friction, no jump.
        let c0 = s
            .contact(
                &Vector3::new(0.0, 0.0, 0.099),
                &moving(Vector3::new(1e-6, 0.0, 0.0)),
                0.0,
                1e-3,
                0.0,
            )
            .unwrap();
        assert!(c0.friction.norm() < 0.3 * 20.0 * 1.1e-3);
        let cz = s
            .contact(&Vector3::new(0.0, 0.0, 0.099), &still(), 0.0, 1e-3, 0.0)
            .unwrap();
        assert_eq!(cz.friction, Vector3::zeros());
    }

    #[test]
    fn friction_on_ball_tip_gives_torque_about_tcp() {
        let m = ContactModel {
            surfaces: vec![table(0.5, 0.0)],
            tip_radius: 0.01,
            friction_smoothing: 1e-3,
            peg: Peg::default(),
        };
        let tcp = Vector3::new(0.0, 0.0, 0.109);
        let s = m.evaluate(&tcp, &moving(Vector3::new(1.0, 0.0, 0.0)), 0.0);
        let f = s.wrench_at_tcp.force;
        assert!((f.z - 20.0).abs() < 1e-9 && (f.x + 10.0).abs() < 1e-6);
        // τ = r × F with r = (0, 0, −ρ): (−0.01 ẑ) × (−10 x̂) = +0.1 ŷ.
        let tau = s.wrench_at_tcp.torque;
        assert!((tau - Vector3::new(0.0, 0.1, 0.0)).norm() < 1e-6, "{tau}");
    }

    #[test]
    fn moving_plane_follows_the_ramp() {
        let mut s = table(0.0, 100.0);
        s.motion = Some(Ramp {
            velocity_m_s: [0.0, 0.0, -0.0065],
            start_s: 1.0,
            duration_s: 2.0,
            trigger: Trigger::Time,
        });
        let tcp = Vector3::new(0.0, 0.0, 0.095); // 5 mm into the table at rest
        let f = |t: f64| {
            s.contact(&tcp, &still(), 0.0, 1e-3, t)
                .map_or(0.0, |c| c.normal_force)
        };
        // Before the ramp: spring only.
        assert!((f(0.5) - 100.0).abs() < 1e-9);
        // At t = 1.5 the surface is 3.25 mm lower and moving away at 6.5 mm/s: the tool (at
        // rest) sees δ = 1.75 mm, δ̇ = −6.5 mm/s → 35 − 0.65 N.
        assert!((f(1.5) - (2e4 * 0.00175 - 100.0 * 0.0065)).abs() < 1e-9);
        // After the ramp (13 mm down): contact lost, the surface stays put.
        assert_eq!(f(3.5), 0.0);
        assert_eq!(s.offset(10.0), Vector3::new(0.0, 0.0, -0.013));
        assert_eq!(s.velocity(10.0), Vector3::zeros());
    }

    #[test]
    fn box_contacts_faces_edges_and_inside() {
        let b = Surface::new(
            "block",
            Shape::Box {
                min: Vector3::new(0.0, 0.0, 0.0),
                max: Vector3::new(0.1, 0.1, 0.1),
            },
            1e4,
            0.0,
            0.0,
            None,
        );
        // Sphere above the top face.
        let p = b
            .penetration(&Vector3::new(0.05, 0.05, 0.105), 0.01, 0.0)
            .unwrap();
        assert!((p.depth - 0.005).abs() < 1e-12 && p.normal == Vector3::z());
        // Near an edge: normal along the diagonal.
        let p = b
            .penetration(&Vector3::new(0.104, 0.05, 0.104), 0.01, 0.0)
            .unwrap();
        let s = std::f64::consts::FRAC_1_SQRT_2;
        assert!((p.normal - Vector3::new(s, 0.0, s)).norm() < 1e-12);
        // Point inside, nearest face −x.
        let p = b
            .penetration(&Vector3::new(0.01, 0.05, 0.05), 0.0, 0.0)
            .unwrap();
        assert!((p.depth - 0.01).abs() < 1e-12 && p.normal == -Vector3::x());
        // Outside.
        assert!(b
            .penetration(&Vector3::new(0.2, 0.2, 0.2), 0.01, 0.0)
            .is_none());
    }

    /// A cylinder along base x through (0, 0, 0.12), radius 80 mm: crest at z = 0.20.
    fn pipe(mu: f64, damping: f64) -> Surface {
        Surface::new(
            "pipe",
            Shape::Cylinder {
                point: Vector3::new(0.0, 0.0, 0.12),
                axis: Vector3::x(),
                radius: 0.08,
            },
            2e4,
            damping,
            mu,
            None,
        )
    }

    #[test]
    fn cylinder_penetration_and_radial_normal() {
        let c = pipe(0.0, 0.0);
        // On the crest, 0.5 mm in: 10 N straight up; the position along the axis does not
        // matter (infinite cylinder).
        for x in [-1.0, 0.0, 0.4] {
            let f = c
                .contact(&Vector3::new(x, 0.0, 0.1995), &still(), 0.0, 1e-3, 0.0)
                .unwrap();
            assert!((f.depth - 5e-4).abs() < 1e-12);
            assert!((f.force() - Vector3::new(0.0, 0.0, 10.0)).norm() < 1e-9);
        }
        // 30° off the crest towards +y, a 5 mm ball tip 1 mm in: the normal is radial
        // (0, sin 30°, cos 30°), the contact point on the ball lies along −n, F = K δ n.
        let a = 30f64.to_radians();
        let n = Vector3::new(0.0, a.sin(), a.cos());
        let axis_pt = Vector3::new(0.3, 0.0, 0.12);
        let tcp = axis_pt + n * (0.08 + 0.005 - 0.001);
        let f = c.contact(&tcp, &still(), 0.005, 1e-3, 0.0).unwrap();
        assert!((f.depth - 0.001).abs() < 1e-12);
        assert!((f.normal - n).norm() < 1e-12);
        assert!((f.point - (tcp - n * 0.005)).norm() < 1e-12);
        assert!((f.force() - n * 20.0).norm() < 1e-9);
        // Free just outside, and below the axis the normal points down (contact from outside
        // all round).
        assert!(c
            .penetration(&Vector3::new(0.0, 0.0, 0.2001), 0.0, 0.0)
            .is_none());
        let p = c
            .penetration(&Vector3::new(0.0, 0.0, 0.0401), 0.0, 0.0)
            .unwrap();
        assert!((p.normal + Vector3::z()).norm() < 1e-12 && (p.depth - 1e-4).abs() < 1e-12);
        // Tilted axis: the normal is perpendicular to it.
        let u = Vector3::new(1.0, 1.0, 0.0).normalize();
        let t = Surface::new(
            "tilted",
            Shape::Cylinder {
                point: Vector3::zeros(),
                axis: u,
                radius: 0.1,
            },
            1e4,
            0.0,
            0.0,
            None,
        );
        let p = t
            .penetration(&Vector3::new(0.3, 0.3, 0.09), 0.0, 0.0)
            .unwrap();
        assert!(p.normal.dot(&u).abs() < 1e-12);
        assert!((p.normal - Vector3::z()).norm() < 1e-12 && (p.depth - 0.01).abs() < 1e-12);
        // On the axis: a whole radius deep, some unit normal perpendicular to the axis.
        let p = t.penetration(&Vector3::zeros(), 0.0, 0.0).unwrap();
        assert!((p.depth - 0.1).abs() < 1e-12);
        assert!((p.normal.norm() - 1.0).abs() < 1e-12 && p.normal.dot(&u).abs() < 1e-12);
    }

    #[test]
    fn sphere_penetration_and_radial_normal() {
        let s = Surface::new(
            "ball",
            Shape::Sphere {
                center: Vector3::new(0.4, 0.0, 0.1),
                radius: 0.05,
            },
            4e4,
            100.0,
            0.0,
            None,
        );
        let dir = Vector3::new(1.0, -2.0, 2.0) / 3.0;
        let tcp = Vector3::new(0.4, 0.0, 0.1) + dir * (0.05 + 0.002 - 0.0005);
        let c = s.contact(&tcp, &still(), 0.002, 1e-3, 0.0).unwrap();
        assert!((c.depth - 5e-4).abs() < 1e-12);
        assert!((c.normal - dir).norm() < 1e-12);
        assert!((c.force() - dir * 20.0).norm() < 1e-9);
        // Pressing in along −n adds the damper: D·v.
        let c = s
            .contact(&tcp, &moving(-dir * 0.01), 0.002, 1e-3, 0.0)
            .unwrap();
        assert!((c.normal_force - 21.0).abs() < 1e-9);
        // Outside: nothing; at the centre: a whole radius deep.
        assert!(s
            .penetration(&Vector3::new(0.4, 0.0, 0.1521), 0.002, 0.0)
            .is_none());
        let p = s
            .penetration(&Vector3::new(0.4, 0.0, 0.1), 0.0, 0.0)
            .unwrap();
        assert!((p.depth - 0.05).abs() < 1e-12 && (p.normal.norm() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn friction_on_curved_surfaces_opposes_tangential_sliding() {
        // Sliding along y over the pipe's flank, with some velocity into the surface: friction
        // is tangent to the pipe (⊥ the radial normal), opposite to the tangential velocity,
        // at the Coulomb level μ F_n when fast.
        let c = pipe(0.4, 0.0);
        let a = 20f64.to_radians();
        let n = Vector3::new(0.0, a.sin(), a.cos());
        let tcp = Vector3::new(0.35, 0.0, 0.12) + n * (0.08 - 0.001);
        let v = Vector3::new(0.0, 0.05, -0.01);
        let f = c.contact(&tcp, &moving(v), 0.0, 1e-3, 0.0).unwrap();
        let v_t = v - n * v.dot(&n);
        assert!(f.friction.dot(&n).abs() < 1e-12, "tangent");
        assert!(f.friction.cross(&v_t).norm() < 1e-9, "antiparallel");
        assert!(f.friction.dot(&v_t) < 0.0);
        assert!((f.friction.norm() - 0.4 * f.normal_force).abs() < 1e-6);
        // Sliding along the axis of the pipe on its crest: friction along −x.
        let f = c
            .contact(
                &Vector3::new(0.35, 0.0, 0.199),
                &moving(Vector3::new(0.02, 0.0, 0.0)),
                0.0,
                1e-3,
                0.0,
            )
            .unwrap();
        assert!((f.friction.normalize() + Vector3::x()).norm() < 1e-12);
        // The same on a sphere.
        let s = Surface::new(
            "ball",
            Shape::Sphere {
                center: Vector3::zeros(),
                radius: 0.1,
            },
            2e4,
            0.0,
            0.3,
            None,
        );
        let n = Vector3::new(0.0, -0.6, 0.8);
        let v = Vector3::new(0.03, 0.02, 0.0);
        let f = s.contact(&(n * 0.099), &moving(v), 0.0, 1e-3, 0.0).unwrap();
        let v_t = v - n * v.dot(&n);
        assert!(f.friction.dot(&n).abs() < 1e-12);
        assert!(f.friction.cross(&v_t).norm() < 1e-9 && f.friction.dot(&v_t) < 0.0);
    }

    #[test]
    fn contact_triggered_ramp_starts_at_first_contact() {
        let mut t = table(0.0, 0.0);
        t.motion = Some(Ramp {
            velocity_m_s: [0.0, 0.0, -0.0065],
            start_s: 0.5,
            duration_s: 1.0,
            trigger: Trigger::Contact,
        });
        t.trigger = TriggerClock::new(Trigger::Contact);
        let mut m = ContactModel {
            surfaces: vec![t],
            tip_radius: 0.0,
            friction_smoothing: 1e-3,
            peg: Peg::default(),
        };
        let above = Vector3::new(0.0, 0.0, 0.11);
        let touching = Vector3::new(0.0, 0.0, 0.0995);
        // Long after start_s, but no contact yet: the table has not moved.
        for k in 0..3000 {
            let s = m.step(&tool_down(&above), &still(), k as f64 * 1e-3);
            assert_eq!(s.contacts, 0);
        }
        assert_eq!(m.surfaces[0].offset(5.0), Vector3::zeros());
        assert!(m.surfaces[0].trigger_status().armed);
        // First contact at t = 3.0 s (10 N): the ramp starts 0.5 s later.
        let s = m.step(&tool_down(&touching), &still(), 3.0);
        assert!((s.normal_force - 10.0).abs() < 1e-9);
        assert_eq!(m.surfaces[0].trigger.origin(), Some(3.0));
        assert_eq!(m.surfaces[0].offset(3.5), Vector3::zeros());
        assert!((m.surfaces[0].offset(3.6).z + 0.00065).abs() < 1e-12);
        assert_eq!(m.surfaces[0].velocity(3.6), Vector3::new(0.0, 0.0, -0.0065));
        // Losing contact does not restart it; `evaluate` never fires triggers.
        m.step(&tool_down(&above), &still(), 3.7);
        assert_eq!(m.surfaces[0].trigger.origin(), Some(3.0));
        m.arm_triggers();
        assert!(m.surfaces[0].trigger_status().armed);
        let _ = m.evaluate(&touching, &still(), 4.0);
        assert!(m.surfaces[0].trigger_status().armed);
    }

    /// A 20 mm plate, top at z = 0.1, with a 5.1 mm hole at (0.4, 0): a 5 mm peg has 0.1 mm
    /// of clearance.
    fn plate(mu: f64, damping: f64) -> ContactModel {
        ContactModel {
            surfaces: vec![Surface::new(
                "plate",
                Shape::PlateWithHole {
                    center: Vector3::new(0.4, 0.0, 0.1),
                    normal: Vector3::z(),
                    hole_radius: 0.0051,
                    thickness: 0.02,
                },
                1e5,
                damping,
                mu,
                None,
            )],
            tip_radius: 0.0,
            friction_smoothing: 1e-3,
            peg: Peg {
                radius: 0.005,
                length: 0.05,
            },
        }
    }

    fn peg_at(x: f64, y: f64, z: f64) -> Isometry3<f64> {
        tool_down(&Vector3::new(x, y, z))
    }

    #[test]
    fn peg_above_the_hole_falls_in_freely() {
        let m = plate(0.3, 50.0);
        // Centred and 0.09 mm off (inside the 0.1 mm clearance), from above the plate through
        // its whole thickness and out below: nothing touches.
        for (dx, dy) in [(0.0, 0.0), (0.00009, 0.0), (0.0, -0.00009), (6e-5, 6e-5)] {
            for k in 0..=400 {
                let z = 0.11 - k as f64 * 1e-4;
                let s = m.evaluate_at(
                    &peg_at(0.4 + dx, dy, z),
                    &moving(Vector3::new(0.0, 0.0, -0.01)),
                    0.0,
                );
                assert_eq!(s.contacts, 0, "({dx}, {dy}) at z {z}");
                assert_eq!(s.wrench_at_tcp.force, Vector3::zeros());
            }
        }
    }

    #[test]
    fn peg_off_centre_lands_on_the_plate() {
        let m = plate(0.0, 0.0);
        // 3 mm off in x, 0.1 mm into the plate: K δ = 10 N straight up.
        let s = m.evaluate_at(&peg_at(0.403, 0.0, 0.0999), &still(), 0.0);
        assert_eq!(s.contacts, 1);
        let f = s.wrench_at_tcp.force;
        assert!((f - Vector3::new(0.0, 0.0, 10.0)).norm() < 1e-9, "{f}");
        // The face overhangs the hole on its −x side: the plate carries it on the +x side, so
        // the reaction acts beyond the TCP in +x: τ_y = −r_x F_z < 0, τ_x ≈ 0.
        let tau = s.wrench_at_tcp.torque;
        assert!(tau.y < -0.005, "{tau}");
        assert!(tau.x.abs() < 1e-6 && tau.z.abs() < 1e-9, "{tau}");
        // Just beyond the clearance (0.15 mm off) and just touching: still carried by the rim.
        let s = m.evaluate_at(&peg_at(0.40015, 0.0, 0.09999), &still(), 0.0);
        assert!((s.wrench_at_tcp.force - Vector3::new(0.0, 0.0, 1.0)).norm() < 1e-9);
        // Far from the hole the whole face bears evenly: no torque.
        let s = m.evaluate_at(&peg_at(0.43, 0.01, 0.0999), &still(), 0.0);
        assert!((s.wrench_at_tcp.force.z - 10.0).abs() < 1e-9);
        assert!(
            s.wrench_at_tcp.torque.norm() < 1e-9,
            "{}",
            s.wrench_at_tcp.torque
        );
        // Above the plate: free.
        assert_eq!(
            m.evaluate_at(&peg_at(0.403, 0.0, 0.1001), &still(), 0.0)
                .contacts,
            0
        );
    }

    /// The centroid's distance from the face's centre (away from the hole) of a disc of radius
    /// `rp` whose centre is `e` from the axis of a hole of radius `r`, minus the hole: exact,
    /// from the two circular segments that make up the lens where they overlap.
    fn crescent_centroid(e: f64, rp: f64, r: f64) -> f64 {
        // Area and first moment (about its circle's centre, along the axis) of the part of a
        // disc of radius R beyond a chord at signed distance d.
        let seg = |big_r: f64, d: f64| {
            let s = (big_r * big_r - d * d).max(0.0);
            (
                big_r * big_r * (d / big_r).clamp(-1.0, 1.0).acos() - d * s.sqrt(),
                2.0 / 3.0 * s.powf(1.5),
            )
        };
        let x0 = (e * e + r * r - rp * rp) / (2.0 * e); // the chord, from the hole's axis
        let (a1, m1) = seg(r, x0); // the hole's cap beyond the chord (towards the face)
        let (a2, m2) = seg(rp, e - x0); // the face's cap on the hole's side
        let lens_area = a1 + a2;
        let lens_moment = m1 + (a2 * e - m2); // both about the hole's axis
        let area = std::f64::consts::PI * rp * rp - lens_area;
        let moment = std::f64::consts::PI * rp * rp * e - lens_moment;
        moment / area - e
    }

    #[test]
    fn peg_face_pressure_centre_matches_the_crescent_however_thin() {
        let m = plate(0.0, 0.0);
        let (rp, r) = (0.005, 0.0051);
        // From just beyond the clearance (a crescent 10 µm wide) to 3 mm, in six directions.
        for e in [0.00011, 0.00015, 0.0002, 0.0003, 0.0005, 0.001, 0.003] {
            let want = crescent_centroid(e, rp, r);
            for k in 0..6 {
                let phi = 0.37 + k as f64 * std::f64::consts::TAU / 6.0;
                let (dx, dy) = (e * phi.cos(), e * phi.sin());
                // 1 µm into the plate: less than the way out sideways (the wall), so the face
                // bears (0.1 N).
                let s = m.evaluate_at(&peg_at(0.4 + dx, dy, 0.1 - 1e-6), &still(), 0.0);
                let (f, tau) = (s.wrench_at_tcp.force, s.wrench_at_tcp.torque);
                assert!(
                    (f - Vector3::new(0.0, 0.0, 0.1)).norm() < 1e-9,
                    "e {e}: {f}"
                );
                // τ = r × F with F along z: r_x = −τ_y/F_z, r_y = τ_x/F_z.
                let (rx, ry) = (-tau.y / f.z, tau.x / f.z);
                let along = rx * phi.cos() + ry * phi.sin();
                let across = -rx * phi.sin() + ry * phi.cos();
                assert!(
                    (along - want).abs() <= 0.01 * want,
                    "e {:.2} mm, φ {phi:.2}: pressure centre {:.4} mm along the offset, want {:.4}",
                    e * 1e3,
                    along * 1e3,
                    want * 1e3
                );
                assert!(
                    across.abs() <= 0.01 * want,
                    "e {:.2} mm, φ {phi:.2}: {:.4} mm across the offset",
                    e * 1e3,
                    across * 1e3
                );
            }
        }
        // The reference itself: a thin crescent's centre lies by the rim; 3 mm off, the face
        // bears on most of its area and its centre is well inside.
        assert!(crescent_centroid(0.00011, rp, r) > 0.004);
        assert!(crescent_centroid(0.003, rp, r) < 0.004);
    }

    #[test]
    fn peg_in_the_hole_pushed_sideways_meets_the_wall() {
        let m = plate(0.0, 0.0);
        // 10 mm deep, 0.15 mm off in +x: 0.05 mm into the wall, K δ = 5 N back towards the
        // axis, shared by the end face's rim and the hole's top edge.
        let s = m.evaluate_at(&peg_at(0.40015, 0.0, 0.09), &still(), 0.0);
        let f = s.wrench_at_tcp.force;
        assert!((f - Vector3::new(-5.0, 0.0, 0.0)).norm() < 1e-9, "{f}");
        // 2.5 N at the TCP's level and 2.5 N at the top edge 10 mm above it: τ_y = 0.01 × −2.5.
        let tau = s.wrench_at_tcp.torque;
        assert!(
            (tau - Vector3::new(0.0, -0.025, 0.0)).norm() < 1e-9,
            "{tau}"
        );
        // The same along a diagonal.
        let d = Vector3::new(1.0, 1.0, 0.0).normalize();
        let p = Vector3::new(0.4, 0.0, 0.09) + d * 0.00015;
        let s = m.evaluate_at(&tool_down(&p), &still(), 0.0);
        assert!((s.wrench_at_tcp.force + d * 5.0).norm() < 1e-9);
        // Friction opposes sliding down along the wall.
        let m = plate(0.3, 0.0);
        let s = m.evaluate_at(
            &peg_at(0.40015, 0.0, 0.09),
            &moving(Vector3::new(0.0, 0.0, -0.01)),
            0.0,
        );
        let f = s.wrench_at_tcp.force;
        assert!(f.z > 0.0 && f.z <= 0.3 * 5.0 + 1e-9, "{f}");
        // A tilted peg (2° about y) centred at its end touches at the top edge only: the axis
        // crosses the top 10 mm · tan 2° ≈ 0.35 mm off the hole's axis.
        let tilt = nalgebra::UnitQuaternion::from_axis_angle(&Vector3::y_axis(), 2f64.to_radians());
        let pose = Isometry3::from_parts(
            nalgebra::Translation3::new(0.4, 0.0, 0.09),
            tilt * peg_at(0.0, 0.0, 0.0).rotation,
        );
        let s = m.evaluate_at(&pose, &still(), 0.0);
        assert_eq!(s.contacts, 1);
        assert!(
            s.wrench_at_tcp.force.x.abs() > 10.0,
            "{}",
            s.wrench_at_tcp.force
        );
    }

    #[test]
    fn plate_forces_are_continuous() {
        let m = plate(0.3, 0.0);
        let f = |x: f64, z: f64| {
            m.evaluate_at(&peg_at(x, 0.0, z), &still(), 0.0)
                .wrench_at_tcp
                .force
        };
        // Descending at several offsets (1 µm steps): the force grows from zero, its magnitude
        // without jumps; the vector too while the face stays on the plate (the offset beyond
        // the clearance exceeds the depth). Deeper than the offset beyond the clearance, the
        // sharp edge's way out is sideways: the force turns towards the hole's axis at equal
        // magnitude (the corner).
        for dx in [0.0, 0.00009, 0.00011, 0.0003, 0.003, 0.0101, 0.02] {
            let mut prev = f(0.4 + dx, 0.101);
            assert_eq!(prev, Vector3::zeros());
            for k in 1..=3000 {
                let z = 0.101 - k as f64 * 1e-6;
                let now = f(0.4 + dx, z);
                assert!(now.iter().all(|v| v.is_finite()));
                let step = 1e5 * 1e-6 * 1.0001;
                assert!((now.norm() - prev.norm()).abs() <= step, "dx {dx} z {z}");
                if 0.1 - z < dx - 0.0001 - 2e-6 || dx < 0.0001 {
                    assert!((now - prev).norm() <= step, "dx {dx} z {z}: {prev} → {now}");
                }
                prev = now;
            }
        }
        // Sliding across the hole's edge on the plate, pressing 0.05 mm (5 N): the magnitude
        // changes by no more than K × the step; where the face's way out (up) and the wall's
        // (sideways) are equal the direction turns — the sharp corner.
        for z in [0.09995, 0.0999, 0.095] {
            let mut prev = f(0.41, z).norm();
            for k in 1..=12000 {
                let x = 0.41 - k as f64 * 1e-6;
                let now = f(x, z).norm();
                assert!(now.is_finite());
                assert!(
                    (now - prev).abs() <= 1e5 * 1e-6 * 1.0001,
                    "z {z} x {x}: {prev} → {now}"
                );
                prev = now;
            }
        }
    }

    proptest! {
        /// Any pose near the hole, any motion: finite, never pulling, friction bounded.
        #[test]
        fn plate_contact_is_finite_and_never_pulls(
            p in proptest::array::uniform3(-0.012f64..0.012),
            tilt in proptest::array::uniform2(-0.7f64..0.7),
            v in proptest::array::uniform3(-0.5f64..0.5),
            w in proptest::array::uniform3(-2.0f64..2.0),
            d in 0.0f64..500.0,
        ) {
            let m = plate(0.4, d);
            let rot = nalgebra::UnitQuaternion::from_euler_angles(tilt[0], tilt[1], 0.0)
                * peg_at(0.0, 0.0, 0.0).rotation;
            let pose = Isometry3::from_parts(
                nalgebra::Translation3::new(0.4 + p[0], p[1], 0.1 + p[2]),
                rot,
            );
            let tw = Twist::new(Vector3::from(v), Vector3::from(w));
            let s = &m.surfaces[0];
            for c in s.contacts(&pose, &tw, 0.0, &m.peg, 1e-3, 0.0) {
                prop_assert!(c.depth > 0.0 && c.depth.is_finite());
                prop_assert!((c.normal.norm() - 1.0).abs() < 1e-9);
                prop_assert!(c.normal_force >= 0.0 && c.normal_force.is_finite());
                prop_assert!(c.point.iter().all(|x| x.is_finite()));
                prop_assert!(c.force().dot(&c.normal) >= -1e-9);
                prop_assert!(c.friction.norm() <= 0.4 * c.normal_force * (1.0 + 1e-12));
            }
            let sum = m.evaluate_at(&pose, &tw, 0.0);
            prop_assert!(sum.wrench_at_tcp.force.iter().all(|x| x.is_finite()));
            prop_assert!(sum.wrench_at_tcp.torque.iter().all(|x| x.is_finite()));
        }
    }

    proptest! {
        /// Curved shapes obey the same law: the normal is unit and radial (⊥ a cylinder's
        /// axis), the depth matches the distance, the force never pulls, friction is tangent
        /// and bounded by μ F_n and opposes the contact point's sliding.
        #[test]
        fn curved_contact_is_radial_and_never_pulls(
            c in proptest::array::uniform3(-0.3f64..0.3),
            axis in proptest::array::uniform3(-1.0f64..1.0),
            v in proptest::array::uniform3(-1.0f64..1.0),
            radius in 0.01f64..0.3, rho in 0.0f64..0.02,
            k in 0.0f64..1e6, d in 0.0f64..1e3, mu in 0.0f64..1.5,
            sphere in proptest::bool::ANY,
        ) {
            let a = Vector3::from(axis);
            prop_assume!(a.norm() > 0.1);
            let u = a.normalize();
            let shape = if sphere {
                Shape::Sphere { center: Vector3::zeros(), radius }
            } else {
                Shape::Cylinder { point: Vector3::zeros(), axis: u, radius }
            };
            let s = Surface::new("s", shape, k, d, mu, None);
            let p = Vector3::from(c);
            let radial = if sphere { p } else { p - u * u.dot(&p) };
            let tw = Twist::new(Vector3::from(v), Vector3::zeros());
            match s.contact(&p, &tw, rho, 1e-3, 0.0) {
                Some(f) => {
                    prop_assert!(radial.norm() < radius + rho);
                    prop_assert!((f.depth - (radius + rho - radial.norm())).abs() < 1e-12);
                    prop_assert!((f.normal.norm() - 1.0).abs() < 1e-12);
                    if !sphere {
                        prop_assert!(f.normal.dot(&u).abs() < 1e-9);
                    }
                    if radial.norm() > 1e-9 {
                        prop_assert!((f.normal - radial.normalize()).norm() < 1e-9);
                    }
                    prop_assert!(f.normal_force >= 0.0);
                    prop_assert!(f.force().dot(&f.normal) >= -1e-9);
                    prop_assert!(f.friction.norm() <= mu * f.normal_force * (1.0 + 1e-12));
                    prop_assert!(f.friction.dot(&f.normal).abs() <= 1e-9 * (1.0 + f.friction.norm()));
                    prop_assert!(f.friction.dot(&tw.linear) <= 1e-12);
                }
                None => prop_assert!(radial.norm() >= radius + rho - 1e-12),
            }
        }
    }

    proptest! {
        #[test]
        fn contact_never_pulls_and_friction_bounded(
            z in -0.02f64..0.02,
            v in proptest::array::uniform3(-2.0f64..2.0),
            w in proptest::array::uniform3(-5.0f64..5.0),
            k in 0.0f64..1e6, d in 0.0f64..1e3, mu in 0.0f64..1.5, rho in 0.0f64..0.02,
        ) {
            let s = Surface { stiffness: k, damping: d, mu, ..table(0.0, 0.0) };
            let tw = Twist::new(Vector3::from(v), Vector3::from(w));
            if let Some(c) = s.contact(&Vector3::new(0.0, 0.0, 0.1 + z), &tw, rho, 1e-3, 0.0) {
                prop_assert!(c.normal_force >= 0.0);
                prop_assert!(c.force().dot(&c.normal) >= -1e-9);
                prop_assert!(c.friction.norm() <= mu * c.normal_force * (1.0 + 1e-12));
                prop_assert!(c.friction.dot(&c.normal).abs() <= 1e-9 * (1.0 + c.friction.norm()));
                // Friction opposes the contact point's tangential velocity.
                let r = -c.normal * rho;
                let vp = tw.linear + tw.angular.cross(&r);
                prop_assert!(c.friction.dot(&vp) <= 1e-12);
            } else {
                prop_assert!(0.1 + z - rho >= 0.1 - 1e-15);
            }
        }
    }
}
