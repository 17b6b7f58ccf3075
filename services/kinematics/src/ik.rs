//! Closed-form inverse kinematics of OPW arms (Brandstötter, Angerer & Hofbaur 2014),
//! with joint limits, ±2π variants, nearest-solution selection and continuity through the
//! wrist and shoulder singularities.
//!
//! # Branches
//! [`Arm::ik`] returns the 8 OPW branches in a fixed order:
//! `0..4` = (shoulder front, elbow A), (front, elbow B), (back, A), (back, B) with wrist
//! "non-flipped"; `4..8` = the same with the wrist flipped (q4+π, −q5, q6−π). Each branch is
//! [`BranchStatus::Unreachable`] (q = NaN), [`BranchStatus::OutOfLimits`] (principal values
//! given, no 2π variant fits the limits) or [`BranchStatus::Valid`] (q is the in-limit variant
//! closest to the principal value). Joints whose range exceeds 2π (IRB 120 axis 6: ±400°)
//! have further in-limit variants `q ± 2π·n`: [`IkSolutions::all_within_limits`] lists them all,
//! and [`Arm::ik_nearest`] picks, per joint, the variant closest to the current joints.
//!
//! # Singularities
//! * **Wrist** (q5 = 0): only q4 + q6 is defined. When `|sin q5| < IkConfig::wrist_lock_eps`
//!   (default 1e-10 rad) q4 is held at its previous value (or 0 without previous joints) and
//!   q6 receives the rest, so the joints never jump; the flag `WRIST_LOCKED` is set. Outside
//!   that band the exact solution is returned. A path that goes *through* the singularity is
//!   then continuous (q5 changes sign, q4 stays); a path that passes *near* it needs large
//!   q4/q6 speeds, which [`Arm::ik_step`] reports with `SPEED_LIMIT_EXCEEDED`.
//! * **Shoulder** (wrist centre on axis 1): q1 is free; within `shoulder_lock_eps` it is held.
//! * **Elbow** (stretched, q3 = [`Arm::elbow_stretched_q3`]): the two elbow branches merge;
//!   targets beyond reach by less than ~1e-12 m are accepted at the boundary.
//!
//! # When a step is too fast
//! [`Arm::ik_step`] sets `SPEED_LIMIT_EXCEEDED` and `speed_ratio > 1` when going to the nearest
//! solution within `dt` would exceed a joint speed limit (typically near a wrist singularity).
//! Callers must then **not** command that solution; instead they fall back to the velocity
//! path: [`Arm::servo_step_dls`] (damped least squares towards the target pose, whole
//! joint-velocity vector scaled to the speed limits, integrated over `dt`), and return to
//! `ik_step` once it reports no flag.

use crate::arm::{check_iso, wrap_pi, Arm};
use crate::error::{check_finite, KinError};
use crate::Joints;
use nalgebra::{Isometry3, Matrix3, Vector3};
use serde::{Deserialize, Serialize};
use std::f64::consts::{PI, TAU};

/// Flags attached to IK results (a small bit set).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct IkFlags(pub u16);

impl IkFlags {
    /// `|sin q5| < IkConfig::near_wrist`.
    pub const NEAR_WRIST_SINGULAR: IkFlags = IkFlags(1);
    /// Elbow close to stretched/folded (`|sin(θ3+ψ3)| < near_elbow`).
    pub const NEAR_ELBOW_SINGULAR: IkFlags = IkFlags(1 << 1);
    /// Wrist centre close to the shoulder-singular plane (`< near_shoulder` m).
    pub const NEAR_SHOULDER_SINGULAR: IkFlags = IkFlags(1 << 2);
    /// Inside the wrist lock band: q4 held, q6 got the q4+q6 sum.
    pub const WRIST_LOCKED: IkFlags = IkFlags(1 << 3);
    /// Inside the shoulder lock band: q1 held.
    pub const SHOULDER_LOCKED: IkFlags = IkFlags(1 << 4);
    /// The step from the current joints exceeds `max_speed·dt` on some joint
    /// (only set by [`Arm::ik_step`]). Fall back to [`Arm::servo_step_dls`].
    pub const SPEED_LIMIT_EXCEEDED: IkFlags = IkFlags(1 << 5);

    const NAMES: [(IkFlags, &'static str); 6] = [
        (Self::NEAR_WRIST_SINGULAR, "NEAR_WRIST_SINGULAR"),
        (Self::NEAR_ELBOW_SINGULAR, "NEAR_ELBOW_SINGULAR"),
        (Self::NEAR_SHOULDER_SINGULAR, "NEAR_SHOULDER_SINGULAR"),
        (Self::WRIST_LOCKED, "WRIST_LOCKED"),
        (Self::SHOULDER_LOCKED, "SHOULDER_LOCKED"),
        (Self::SPEED_LIMIT_EXCEEDED, "SPEED_LIMIT_EXCEEDED"),
    ];

    /// No flag set.
    pub const fn empty() -> Self {
        IkFlags(0)
    }
    /// True if no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// True if all flags of `other` are set.
    pub const fn contains(self, other: IkFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Sets the flags of `other`.
    pub fn insert(&mut self, other: IkFlags) {
        self.0 |= other.0;
    }
    /// True if any singularity proximity flag is set.
    pub const fn near_singular(self) -> bool {
        self.0 & 0b111 != 0
    }
}

impl std::ops::BitOr for IkFlags {
    type Output = IkFlags;
    fn bitor(self, rhs: IkFlags) -> IkFlags {
        IkFlags(self.0 | rhs.0)
    }
}

impl std::fmt::Debug for IkFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        write!(f, "IkFlags(")?;
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                if !first {
                    write!(f, " | ")?;
                }
                write!(f, "{name}")?;
                first = false;
            }
        }
        write!(f, ")")
    }
}

/// Status of one of the 8 OPW branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BranchStatus {
    /// Solution exists and (some 2π variant of it) lies within the joint limits.
    Valid,
    /// The pose is outside this branch's workspace (q is NaN).
    Unreachable,
    /// Solution exists but violates the joint limits.
    OutOfLimits,
}

/// One OPW branch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IkBranch {
    /// Joints (rad). Valid: in-limit variant closest to the principal value; OutOfLimits:
    /// principal values in (−π, π]; Unreachable: NaN.
    pub q: Joints,
    /// Reachability / limit status.
    pub status: BranchStatus,
    /// Singularity flags of this branch.
    pub flags: IkFlags,
}

impl IkBranch {
    /// True for [`BranchStatus::Valid`].
    pub fn is_valid(&self) -> bool {
        self.status == BranchStatus::Valid
    }
}

/// All 8 OPW branches for one pose (see the module docs for the order).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IkSolutions {
    /// The branches, fixed order.
    pub branches: [IkBranch; 8],
}

impl IkSolutions {
    /// Valid (in-limit) branches with their index.
    pub fn valid(&self) -> impl Iterator<Item = (usize, &IkBranch)> {
        self.branches
            .iter()
            .enumerate()
            .filter(|(_, b)| b.is_valid())
    }

    /// Number of valid branches.
    pub fn count_valid(&self) -> usize {
        self.valid().count()
    }

    /// True if at least one branch reaches the pose (ignoring limits).
    pub fn any_reachable(&self) -> bool {
        self.branches
            .iter()
            .any(|b| b.status != BranchStatus::Unreachable)
    }

    /// Every in-limit solution including all ±2π variants of joints whose range allows them
    /// (IRB 120: up to 3 variants of axis 6 per branch). Allocates.
    pub fn all_within_limits(&self, arm: &Arm) -> Vec<Joints> {
        let lim = arm.limits();
        let mut out = Vec::new();
        for (_, br) in self.valid() {
            // Candidate lists per joint.
            let mut cands: [Vec<f64>; 6] = Default::default();
            for j in 0..6 {
                let q = br.q[j];
                let n_lo = ((lim.min[j] - q) / TAU).ceil() as i64;
                let n_hi = ((lim.max[j] - q) / TAU).floor() as i64;
                for n in n_lo..=n_hi {
                    let v = q + TAU * n as f64;
                    if v >= lim.min[j] && v <= lim.max[j] {
                        cands[j].push(v);
                    }
                }
            }
            let mut idx = [0usize; 6];
            'outer: loop {
                if cands.iter().any(|c| c.is_empty()) {
                    break;
                }
                let mut q = [0.0; 6];
                for j in 0..6 {
                    q[j] = cands[j][idx[j]];
                }
                out.push(q);
                for j in (0..6).rev() {
                    idx[j] += 1;
                    if idx[j] < cands[j].len() {
                        continue 'outer;
                    }
                    idx[j] = 0;
                }
                break;
            }
        }
        out
    }
}

/// The solution chosen by [`Arm::ik_nearest`] / [`Arm::ik_step`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IkSolution {
    /// Joints (rad), within limits.
    pub q: Joints,
    /// OPW branch index 0..8.
    pub branch: u8,
    /// Singularity / lock / speed flags.
    pub flags: IkFlags,
    /// Weighted squared joint distance to the current joints, Σ (w_j·Δq_j)².
    pub cost: f64,
    /// `max_j |Δq_j| / (max_speed_j · dt)` (only from [`Arm::ik_step`]); > 1 means the step is
    /// too fast and `SPEED_LIMIT_EXCEEDED` is set.
    pub speed_ratio: Option<f64>,
}

/// Below this `|sin q5|` (outside the lock band) q6 comes from the well-conditioned θ4 ± θ6
/// of the wrist's x column instead of its own O(sin q5) components.
const WRIST_SUM_BAND: f64 = 1e-6;

/// acos with a small tolerance outside [−1, 1] (clamped); None if beyond or NaN.
#[inline(always)]
fn acos_tol(x: f64) -> Option<f64> {
    const TOL: f64 = 1e-12;
    if x.abs() <= 1.0 {
        Some(x.acos())
    } else if x.abs() <= 1.0 + TOL {
        Some(if x > 0.0 { 0.0 } else { PI })
    } else {
        None
    }
}

/// Variant `q + 2πn` within `[lo, hi]` closest to `target`, if any.
#[inline(always)]
pub(crate) fn nearest_in_limits(q: f64, target: f64, lo: f64, hi: f64) -> Option<f64> {
    let d = target - q;
    // |d| ≤ π: q itself is the closest variant (avoids libm round in the common case).
    let mut v = if d.abs() <= PI {
        q
    } else {
        q + TAU * (d / TAU).round()
    };
    if v >= lo && v <= hi {
        return Some(v);
    }
    if v > hi {
        v -= TAU;
        if v > hi {
            v -= TAU * ((v - hi) / TAU).ceil();
        }
    } else if v < lo {
        v += TAU;
        if v < lo {
            v += TAU * ((lo - v) / TAU).ceil();
        }
    }
    if v >= lo && v <= hi {
        Some(v)
    } else {
        None
    }
}

#[derive(Clone, Copy)]
struct Raw {
    q: [Joints; 8],
    ok: [bool; 8],
    flags: [IkFlags; 8],
}

impl Arm {
    /// Core closed-form solver on a tool0 pose (rotation `r`, position `p`, finite).
    /// `hint`: previous joints used for the wrist/shoulder locks.
    #[inline]
    fn solve_raw(&self, r: &Matrix3<f64>, p: &Vector3<f64>, hint: Option<&Joints>) -> Raw {
        let g = &self.geo;
        let cfg = &self.params.ik;
        let lim = &self.params.limits;
        let mut raw = Raw {
            q: [[f64::NAN; 6]; 8],
            ok: [false; 8],
            flags: [IkFlags::empty(); 8],
        };
        let z = r.column(2);
        let c = p - z * g.c4;
        let rho2 = c.x * c.x + c.y * c.y;
        let nx_sq = rho2 - g.b * g.b;
        let nx_len = if nx_sq >= 0.0 {
            nx_sq.sqrt()
        } else if nx_sq > -1e-15 * (g.b * g.b).max(1e-30) {
            0.0
        } else {
            return raw;
        };
        let nx1 = nx_len - g.a1;
        let mut common = IkFlags::empty();
        if nx_len < cfg.near_shoulder {
            common.insert(IkFlags::NEAR_SHOULDER_SINGULAR);
        }
        let off_b = g.b.atan2(nx1 + g.a1);
        let phi = if rho2.sqrt() < cfg.shoulder_lock_eps {
            common.insert(IkFlags::SHOULDER_LOCKED);
            match hint {
                Some(h) => {
                    let q1 = h[0].clamp(lim.min[0], lim.max[0]);
                    g.signs[0] * q1 - g.offsets[0] + off_b
                }
                None => off_b,
            }
        } else {
            c.y.atan2(c.x)
        };
        let t1 = [phi - off_b, phi + off_b - PI];
        let dz = c.z - g.c1;
        let k2 = g.k * g.k;
        let c22 = g.c2 * g.c2;
        let nb = nx1 + 2.0 * g.a1;
        let s1sq = nx1 * nx1 + dz * dz;
        let s2sq = nb * nb + dz * dz;
        let s1 = s1sq.sqrt();
        let s2 = s2sq.sqrt();
        let front = acos_tol((s1sq + c22 - k2) / (2.0 * s1 * g.c2))
            .zip(acos_tol((s1sq - c22 - k2) / (2.0 * g.c2 * g.k)));
        let back = acos_tol((s2sq + c22 - k2) / (2.0 * s2 * g.c2))
            .zip(acos_tol((s2sq - c22 - k2) / (2.0 * g.c2 * g.k)));
        let atf = nx1.atan2(dz);
        let atb = nb.atan2(dz);
        // Arm solutions: (θ1 index, θ2, θ3, |sin(θ3 + ψ3)|) or None.
        let el = |e: f64| e.sin().abs();
        let arms: [Option<(usize, f64, f64, f64)>; 4] = [
            front.map(|(a, e)| (0, -a + atf, e - g.psi3, el(e))),
            front.map(|(a, e)| (0, a + atf, -e - g.psi3, el(e))),
            back.map(|(a, e)| (1, -a - atb, e - g.psi3, el(e))),
            back.map(|(a, e)| (1, a - atb, -e - g.psi3, el(e))),
        ];
        let sc1 = [t1[0].sin_cos(), t1[1].sin_cos()];
        let hint_t4 = hint.map(|h| g.signs[3] * h[3].clamp(lim.min[3], lim.max[3]) - g.offsets[3]);
        for (i, arm) in arms.iter().enumerate() {
            let Some((i1, th2, th3, elbow)) = *arm else {
                continue;
            };
            let th1 = t1[i1];
            let mut fl = common;
            let (sn1, cs1) = sc1[i1];
            let (s23, c23) = (th2 + th3).sin_cos();
            // Columns of R0c = Rz(θ1)·Ry(θ2+θ3).
            let x0 = Vector3::new(cs1 * c23, sn1 * c23, -s23);
            let y0 = Vector3::new(-sn1, cs1, 0.0);
            let z0 = Vector3::new(cs1 * s23, sn1 * s23, c23);
            let rz = r.column(2);
            let (m02, m12, m22) = (x0.dot(&rz), y0.dot(&rz), z0.dot(&rz));
            let sin5 = (m02 * m02 + m12 * m12).sqrt();
            if sin5 < cfg.near_wrist {
                fl.insert(IkFlags::NEAR_WRIST_SINGULAR);
            }
            if elbow < cfg.near_elbow {
                fl.insert(IkFlags::NEAR_ELBOW_SINGULAR);
            }
            let (th4, th5, th6);
            if sin5 < cfg.wrist_lock_eps {
                fl.insert(IkFlags::WRIST_LOCKED);
                let rx = r.column(0);
                let (m00, m10) = (x0.dot(&rx), y0.dot(&rx));
                th4 = hint_t4.unwrap_or(0.0);
                if m22 >= 0.0 {
                    // R' = Rz(θ4+θ6)
                    th5 = 0.0;
                    th6 = m10.atan2(m00) - th4;
                } else {
                    // R' = Rz(θ4)·Ry(π)·Rz(θ6) depends on θ4 − θ6
                    th5 = PI;
                    th6 = th4 - (-m10).atan2(-m00);
                }
            } else {
                let (rx, ry) = (r.column(0), r.column(1));
                let (m20, m21) = (z0.dot(&rx), z0.dot(&ry));
                th4 = m12.atan2(m02);
                th5 = sin5.atan2(m22);
                th6 = if sin5 < WRIST_SUM_BAND {
                    // Near the wrist singularity θ4 and θ6 from atan2 of O(sin θ5) components
                    // each lose ε/sin θ5 of precision (8e-9 rad of pose error at
                    // |q5| = 4e-9). Whatever θ4 came out, the x column gives θ4 ± θ6 to
                    // O(θ5²): θ6 from it keeps the pose exact.
                    let (m00, m10) = (x0.dot(&rx), y0.dot(&rx));
                    if m22 >= 0.0 {
                        m10.atan2(m00) - th4
                    } else {
                        th4 - (-m10).atan2(-m00)
                    }
                } else {
                    m21.atan2(-m20)
                };
            }
            let thetas = [
                [th1, th2, th3, th4, th5, th6],
                [th1, th2, th3, th4 + PI, -th5, th6 - PI],
            ];
            for (w, th) in thetas.iter().enumerate() {
                let b = i + 4 * w;
                for j in 0..6 {
                    raw.q[b][j] = wrap_pi(g.q_of(j, th[j]));
                }
                raw.ok[b] = true;
                raw.flags[b] = fl;
            }
        }
        raw
    }

    fn tool0_parts(pose: &Isometry3<f64>) -> (Matrix3<f64>, Vector3<f64>) {
        (
            pose.rotation.to_rotation_matrix().into_inner(),
            pose.translation.vector,
        )
    }

    /// All 8 OPW branches for a **tool0** pose in base (m, unit quaternion).
    /// Errors only on non-finite / non-unit input; unreachable and out-of-limit branches are
    /// marked in the result.
    pub fn ik_tool0(&self, tool0_in_base: &Isometry3<f64>) -> Result<IkSolutions, KinError> {
        check_iso(tool0_in_base, "pose")?;
        let (r, p) = Self::tool0_parts(tool0_in_base);
        let raw = self.solve_raw(&r, &p, None);
        let lim = &self.params.limits;
        let mut out = IkSolutions {
            branches: [IkBranch {
                q: [f64::NAN; 6],
                status: BranchStatus::Unreachable,
                flags: IkFlags::empty(),
            }; 8],
        };
        for b in 0..8 {
            if !raw.ok[b] {
                continue;
            }
            let mut q = raw.q[b];
            let mut valid = true;
            for j in 0..6 {
                match nearest_in_limits(q[j], q[j], lim.min[j], lim.max[j]) {
                    Some(v) => q[j] = v,
                    None => valid = false,
                }
            }
            out.branches[b] = IkBranch {
                q: if valid { q } else { raw.q[b] },
                status: if valid {
                    BranchStatus::Valid
                } else {
                    BranchStatus::OutOfLimits
                },
                flags: raw.flags[b],
            };
        }
        Ok(out)
    }

    /// All 8 OPW branches for a **TCP** pose in base (see [`Arm::ik_tool0`]).
    pub fn ik(&self, tcp_in_base: &Isometry3<f64>) -> Result<IkSolutions, KinError> {
        let t0 = self.tool0_from_tcp(tcp_in_base)?;
        self.ik_tool0(&t0)
    }

    /// The valid IK solution for a **TCP** pose closest to `q_current` (rad), with the
    /// weighted distance Σ (w_j·Δq_j)² (default w_j = 1/max_speed_j), choosing per joint the
    /// ±2π variant closest to `q_current`. Continuity through the wrist / shoulder singularity
    /// is kept by holding q4 / q1 at their current values (see the module docs).
    ///
    /// Errors: `InvalidInput` (NaN / non-unit pose or NaN joints), `Unreachable`,
    /// `OutOfLimits`.
    pub fn ik_nearest(
        &self,
        tcp_in_base: &Isometry3<f64>,
        q_current: &Joints,
    ) -> Result<IkSolution, KinError> {
        check_finite(q_current, "q_current")?;
        let t0 = self.tool0_from_tcp(tcp_in_base)?;
        let (r, p) = Self::tool0_parts(&t0);
        let raw = self.solve_raw(&r, &p, Some(q_current));
        let lim = &self.params.limits;
        let mut best: Option<IkSolution> = None;
        let mut any = false;
        for b in 0..8 {
            if !raw.ok[b] {
                continue;
            }
            any = true;
            let mut q = raw.q[b];
            let mut cost = 0.0;
            let mut valid = true;
            for j in 0..6 {
                match nearest_in_limits(q[j], q_current[j], lim.min[j], lim.max[j]) {
                    Some(v) => {
                        q[j] = v;
                        let d = self.weights[j] * (v - q_current[j]);
                        cost += d * d;
                    }
                    None => {
                        valid = false;
                        break;
                    }
                }
            }
            let better = match &best {
                None => true,
                Some(s) => cost < s.cost,
            };
            if valid && better {
                best = Some(IkSolution {
                    q,
                    branch: b as u8,
                    flags: raw.flags[b],
                    cost,
                    speed_ratio: None,
                });
            }
        }
        match best {
            Some(s) => Ok(s),
            None if any => Err(KinError::OutOfLimits),
            None => Err(KinError::Unreachable),
        }
    }

    /// [`Arm::ik_nearest`] plus a speed check for one control period `dt` (s, > 0):
    /// `speed_ratio = max_j |Δq_j| / (max_speed_j·dt)`; if it exceeds 1 the flag
    /// `SPEED_LIMIT_EXCEEDED` is set and the caller must fall back to
    /// [`Arm::servo_step_dls`] instead of commanding `q`.
    pub fn ik_step(
        &self,
        tcp_in_base: &Isometry3<f64>,
        q_current: &Joints,
        dt: f64,
    ) -> Result<IkSolution, KinError> {
        if !(dt.is_finite() && dt > 0.0) {
            return Err(KinError::InvalidInput("dt"));
        }
        let mut s = self.ik_nearest(tcp_in_base, q_current)?;
        let ratio = self.min_move_time(q_current, &s.q) / dt;
        s.speed_ratio = Some(ratio);
        if ratio > 1.0 {
            s.flags.insert(IkFlags::SPEED_LIMIT_EXCEEDED);
        }
        Ok(s)
    }
}
