//! Test helpers: a seeded RNG, random joints, an independent standard-DH FK of the IRB 120
//! and a URDF chain built with the `k` crate.
#![allow(dead_code, clippy::needless_range_loop)]

use kinematics::{Arm, Joints};
use nalgebra::{Isometry3, Matrix4, Rotation3, UnitQuaternion, Vector3};

/// SplitMix64: tiny, seeded, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    pub fn vec3(&mut self, s: f64) -> Vector3<f64> {
        Vector3::new(self.range(-s, s), self.range(-s, s), self.range(-s, s))
    }
}

/// Uniform random joints within the arm's limits shrunk by `margin` (rad) on each side.
pub fn random_joints(rng: &mut Rng, arm: &Arm, margin: f64) -> Joints {
    let l = arm.limits();
    let mut q = [0.0; 6];
    for j in 0..6 {
        q[j] = rng.range(l.min[j] + margin, l.max[j] - margin);
    }
    q
}

/// Standard (distal) DH product for the IRB 120 from irb120.md §1.3 (ARTE):
/// A_i = Rz(θ_i)·Tz(d_i)·Tx(a_i)·Rx(α_i), θ = [q1, q2 − 90°, q3, q4, q5, q6 + 180°].
/// Its end frame is ABB tool0.
pub fn dh_fk_irb120(q: &Joints) -> Matrix4<f64> {
    use std::f64::consts::{FRAC_PI_2, PI};
    let d = [0.290, 0.0, 0.0, 0.302, 0.0, 0.072];
    let a = [0.0, 0.270, 0.070, 0.0, 0.0, 0.0];
    let alpha = [-FRAC_PI_2, 0.0, -FRAC_PI_2, FRAC_PI_2, -FRAC_PI_2, 0.0];
    let off = [0.0, -FRAC_PI_2, 0.0, 0.0, 0.0, PI];
    let mut t = Matrix4::identity();
    for i in 0..6 {
        let th = q[i] + off[i];
        let (st, ct) = th.sin_cos();
        let (sa, ca) = alpha[i].sin_cos();
        #[rustfmt::skip]
        let ai = Matrix4::new(
            ct, -st * ca,  st * sa, a[i] * ct,
            st,  ct * ca, -ct * sa, a[i] * st,
            0.0,      sa,       ca,      d[i],
            0.0,     0.0,      0.0,       1.0,
        );
        t *= ai;
    }
    t
}

/// Homogeneous matrix of an isometry.
pub fn iso_matrix(p: &Isometry3<f64>) -> Matrix4<f64> {
    p.to_homogeneous()
}

/// Position / rotation distance between poses (m, rad).
pub fn pose_dist(a: &Isometry3<f64>, b: &Isometry3<f64>) -> (f64, f64) {
    kinematics::pose::pose_distance(a, b)
}

/// Max abs difference between joint vectors.
pub fn max_abs_diff(a: &Joints, b: &Joints) -> f64 {
    (0..6).map(|j| (a[j] - b[j]).abs()).fold(0.0, f64::max)
}

/// Rotation about y.
pub fn ry(a: f64) -> UnitQuaternion<f64> {
    UnitQuaternion::from_rotation_matrix(&Rotation3::from_axis_angle(&Vector3::y_axis(), a))
}
