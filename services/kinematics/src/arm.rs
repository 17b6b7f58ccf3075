//! The 6-axis arm model: OPW geometry + limits + tool + sensor mount, built from
//! [`ArmParams`].

use crate::error::{check_finite, KinError};
use crate::params::{ArmParams, DlsConfig, FrameParams, IkConfig, JointLimits, OpwParams};
use crate::Joints;
use nalgebra::Isometry3;
use std::f64::consts::PI;

/// Pre-computed OPW geometry (internal).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub a1: f64,
    pub a2: f64,
    pub b: f64,
    pub c1: f64,
    pub c2: f64,
    pub c3: f64,
    pub c4: f64,
    /// sqrt(a2² + c3²)
    pub k: f64,
    /// atan2(a2, c3)
    pub psi3: f64,
    pub offsets: [f64; 6],
    pub signs: [f64; 6],
}

impl Geometry {
    fn new(p: &OpwParams) -> Self {
        let mut signs = [1.0; 6];
        for (s, &c) in signs.iter_mut().zip(p.sign_corrections.iter()) {
            *s = if c < 0 { -1.0 } else { 1.0 };
        }
        Self {
            a1: p.a1,
            a2: p.a2,
            b: p.b,
            c1: p.c1,
            c2: p.c2,
            c3: p.c3,
            c4: p.c4,
            k: p.a2.hypot(p.c3),
            psi3: p.a2.atan2(p.c3),
            offsets: p.offsets,
            signs,
        }
    }

    /// Internal OPW angles from joint values: θ_j = s_j q_j − o_j.
    #[inline(always)]
    pub fn theta(&self, q: &Joints) -> [f64; 6] {
        let mut t = [0.0; 6];
        for j in 0..6 {
            t[j] = self.signs[j] * q[j] - self.offsets[j];
        }
        t
    }

    /// Joint value from an internal angle: q_j = s_j (θ_j + o_j).
    #[inline(always)]
    pub fn q_of(&self, j: usize, theta: f64) -> f64 {
        self.signs[j] * (theta + self.offsets[j])
    }
}

/// A 6-axis OPW arm (e.g. the ABB IRB 120) with joint limits, a tool (tool0 → TCP) and an F/T
/// sensor mount (tool0 → sensor).
///
/// Build it with [`Arm::new`] from validated [`ArmParams`] or with the preset [`Arm::irb120`].
/// All methods take `&self`, never allocate on the FK/IK/Jacobian paths and never panic.
#[derive(Debug, Clone)]
pub struct Arm {
    pub(crate) params: ArmParams,
    pub(crate) geo: Geometry,
    pub(crate) tool: Isometry3<f64>,
    pub(crate) tool_inv: Isometry3<f64>,
    pub(crate) sensor_mount: Isometry3<f64>,
    pub(crate) weights: [f64; 6],
}

impl Arm {
    /// Builds an arm from parameters; on failure returns [`KinError::InvalidParams`] listing
    /// every problem found by [`ArmParams::validate`].
    pub fn new(params: ArmParams) -> Result<Self, KinError> {
        params.validate().map_err(KinError::InvalidParams)?;
        let tool = params
            .tool
            .to_isometry("tool")
            .map_err(KinError::InvalidParams)?;
        let sensor_mount = params
            .sensor_mount
            .to_isometry("sensor_mount")
            .map_err(KinError::InvalidParams)?;
        let weights = match params.ik.weights {
            Some(w) => w,
            None => {
                let mut w = [0.0; 6];
                for (wj, v) in w.iter_mut().zip(params.limits.max_speed.iter()) {
                    *wj = 1.0 / v;
                }
                w
            }
        };
        Ok(Self {
            geo: Geometry::new(&params.opw),
            tool,
            tool_inv: tool.inverse(),
            sensor_mount,
            weights,
            params,
        })
    }

    /// The ABB IRB 120-3/0.58 preset (no tool, sensor frame = tool0).
    pub fn irb120() -> Self {
        let params = ArmParams::irb120();
        let geo = Geometry::new(&params.opw);
        let mut weights = [0.0; 6];
        for (wj, v) in weights.iter_mut().zip(params.limits.max_speed.iter()) {
            *wj = 1.0 / v;
        }
        Self {
            params,
            geo,
            tool: Isometry3::identity(),
            tool_inv: Isometry3::identity(),
            sensor_mount: Isometry3::identity(),
            weights,
        }
    }

    /// The parameters this arm was built from (tool/sensor reflect the latest setters).
    pub fn params(&self) -> &ArmParams {
        &self.params
    }

    /// Joint limits (rad) and max speeds (rad/s).
    pub fn limits(&self) -> &JointLimits {
        &self.params.limits
    }

    /// IK tuning in use.
    pub fn ik_config(&self) -> &IkConfig {
        &self.params.ik
    }

    /// DLS tuning in use.
    pub fn dls_config(&self) -> &DlsConfig {
        &self.params.dls
    }

    /// Weights used by the nearest-solution distance.
    pub fn ik_weights(&self) -> &[f64; 6] {
        &self.weights
    }

    /// tool0 → TCP transform.
    pub fn tool(&self) -> &Isometry3<f64> {
        &self.tool
    }

    /// tool0 → sensor transform.
    pub fn sensor_mount(&self) -> &Isometry3<f64> {
        &self.sensor_mount
    }

    /// Replaces the tool (tool0 → TCP). Errors on non-finite input.
    pub fn set_tool(&mut self, tool0_to_tcp: Isometry3<f64>) -> Result<(), KinError> {
        check_iso(&tool0_to_tcp, "tool0_to_tcp")?;
        self.tool = tool0_to_tcp;
        self.tool_inv = tool0_to_tcp.inverse();
        self.params.tool = FrameParams::from_isometry(&tool0_to_tcp);
        Ok(())
    }

    /// Replaces the sensor mount (tool0 → sensor). Errors on non-finite input.
    pub fn set_sensor_mount(&mut self, tool0_to_sensor: Isometry3<f64>) -> Result<(), KinError> {
        check_iso(&tool0_to_sensor, "tool0_to_sensor")?;
        self.sensor_mount = tool0_to_sensor;
        self.params.sensor_mount = FrameParams::from_isometry(&tool0_to_sensor);
        Ok(())
    }

    /// Joint-3 value (rad) at which the elbow is stretched (wrist centre at maximum distance
    /// from axis 2), derived from the parameters: θ3 = −atan2(a2, c3). IRB 120: −76.950°.
    pub fn elbow_stretched_q3(&self) -> f64 {
        wrap_pi(self.geo.q_of(2, -self.geo.psi3))
    }

    /// Joint-3 value (rad) of the folded-elbow singularity (θ3 = π − atan2(a2, c3)).
    /// IRB 120: 103.05°, outside the A3 range.
    pub fn elbow_folded_q3(&self) -> f64 {
        wrap_pi(self.geo.q_of(2, PI - self.geo.psi3))
    }

    /// Maximum distance from axis 2 to the wrist centre (m): c2 + sqrt(a2² + c3²).
    /// IRB 120: 0.580006 m.
    pub fn max_wrist_reach(&self) -> f64 {
        self.geo.c2 + self.geo.k
    }

    /// Joint-space time needed (s) to move from `from` to `to` at max joint speeds:
    /// `max_j |Δq_j| / max_speed_j`.
    pub fn min_move_time(&self, from: &Joints, to: &Joints) -> f64 {
        let mut t: f64 = 0.0;
        for j in 0..6 {
            t = t.max((to[j] - from[j]).abs() / self.params.limits.max_speed[j]);
        }
        t
    }
}

pub(crate) fn check_iso(iso: &Isometry3<f64>, name: &'static str) -> Result<(), KinError> {
    let t = &iso.translation.vector;
    let q = iso.rotation.quaternion();
    check_finite(&[t.x, t.y, t.z, q.w, q.i, q.j, q.k], name)?;
    let n = q.norm();
    if (n - 1.0).abs() > 1e-6 {
        return Err(KinError::InvalidInput(name));
    }
    Ok(())
}

/// Wraps an angle to (−π, π].
#[inline(always)]
pub fn wrap_pi(a: f64) -> f64 {
    // Fast path for the common case (|a| < 3π) without a libm fmod call.
    if a > PI {
        let x = a - 2.0 * PI;
        if x <= PI {
            return x;
        }
    } else if a <= -PI {
        let x = a + 2.0 * PI;
        if x > -PI {
            return x;
        }
    } else {
        return a;
    }
    let two_pi = 2.0 * PI;
    let mut x = a % two_pi; // (−2π, 2π)
    if x > PI {
        x -= two_pi;
    } else if x <= -PI {
        x += two_pi;
    }
    x
}
