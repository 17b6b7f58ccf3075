//! Wrenches and twists, their frame transforms, and joint torque ↔ wrench mappings.
//!
//! A [`Wrench`] is a force `f` (N) and a torque `τ` (N·m) *about a reference point*, both
//! expressed in some frame's axes. Throughout this crate "a wrench in frame A" means: reference
//! point = A's origin, components in A's axes. The frame chain of the cell is
//! `sensor → tool0/TCP → base → constraint frame {C}`; each hop is one
//! [`Wrench::transform`] with the pose of the source frame in the destination frame.
//!
//! The sign convention (wrench *exerted on* the tool by the environment, or by the tool on the
//! environment) is the caller's; every transform here is linear and preserves it.

use crate::arm::{check_iso, Arm};
use crate::dls::dls_solve;
use crate::error::{check_finite, KinError};
use crate::jacobian::JacobianFrame;
use crate::Joints;
use nalgebra::{Isometry3, UnitQuaternion, Vector3, Vector6};
use serde::{Deserialize, Serialize};

/// Force (N) and torque (N·m) about a reference point, in some frame's axes.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Wrench {
    /// Force (N).
    pub force: Vector3<f64>,
    /// Torque about the reference point (N·m).
    pub torque: Vector3<f64>,
}

/// Linear velocity (m/s) of a reference point and angular velocity (rad/s), in some frame's
/// axes.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Twist {
    /// Linear velocity of the reference point (m/s).
    pub linear: Vector3<f64>,
    /// Angular velocity (rad/s).
    pub angular: Vector3<f64>,
}

impl Wrench {
    /// New wrench from force (N) and torque (N·m).
    pub fn new(force: Vector3<f64>, torque: Vector3<f64>) -> Self {
        Self { force, torque }
    }

    /// Stacked `[f; τ]`.
    pub fn to_vector(&self) -> Vector6<f64> {
        Vector6::new(
            self.force.x,
            self.force.y,
            self.force.z,
            self.torque.x,
            self.torque.y,
            self.torque.z,
        )
    }

    /// From stacked `[f; τ]`.
    pub fn from_vector(v: &Vector6<f64>) -> Self {
        Self {
            force: Vector3::new(v[0], v[1], v[2]),
            torque: Vector3::new(v[3], v[4], v[5]),
        }
    }

    /// True if every component is finite.
    pub fn is_finite(&self) -> bool {
        self.force
            .iter()
            .chain(self.torque.iter())
            .all(|v| v.is_finite())
    }

    /// Given this wrench in frame A (at A's origin, A's axes) and the pose of A in B, returns
    /// the equivalent wrench in frame B (at B's origin, B's axes):
    /// `f_B = R f_A`, `τ_B = R τ_A + p × (R f_A)`, with `(R, p)` = `a_in_b`.
    pub fn transform(&self, a_in_b: &Isometry3<f64>) -> Wrench {
        let f = a_in_b.rotation * self.force;
        let t = a_in_b.rotation * self.torque + a_in_b.translation.vector.cross(&f);
        Wrench {
            force: f,
            torque: t,
        }
    }

    /// Re-expresses the components in other axes without moving the reference point.
    pub fn rotate(&self, rot: &UnitQuaternion<f64>) -> Wrench {
        Wrench {
            force: rot * self.force,
            torque: rot * self.torque,
        }
    }

    /// Moves the reference point: `offset` is the vector from the new point to the old one
    /// (same axes). `τ_new = τ + offset × f`.
    pub fn shift(&self, offset: &Vector3<f64>) -> Wrench {
        Wrench {
            force: self.force,
            torque: self.torque + offset.cross(&self.force),
        }
    }

    /// Power (W) delivered with a twist about the same point in the same axes: `f·v + τ·ω`.
    pub fn power(&self, twist: &Twist) -> f64 {
        self.force.dot(&twist.linear) + self.torque.dot(&twist.angular)
    }
}

/// Free-function form of [`Wrench::transform`].
pub fn transform_wrench(w_in_a: &Wrench, a_in_b: &Isometry3<f64>) -> Wrench {
    w_in_a.transform(a_in_b)
}

impl Twist {
    /// New twist from linear (m/s) and angular (rad/s) velocity.
    pub fn new(linear: Vector3<f64>, angular: Vector3<f64>) -> Self {
        Self { linear, angular }
    }

    /// Stacked `[v; ω]`.
    pub fn to_vector(&self) -> Vector6<f64> {
        Vector6::new(
            self.linear.x,
            self.linear.y,
            self.linear.z,
            self.angular.x,
            self.angular.y,
            self.angular.z,
        )
    }

    /// From stacked `[v; ω]`.
    pub fn from_vector(v: &Vector6<f64>) -> Self {
        Self {
            linear: Vector3::new(v[0], v[1], v[2]),
            angular: Vector3::new(v[3], v[4], v[5]),
        }
    }

    /// True if every component is finite.
    pub fn is_finite(&self) -> bool {
        self.linear
            .iter()
            .chain(self.angular.iter())
            .all(|v| v.is_finite())
    }

    /// Given this twist in frame A (velocity of A's origin, A's axes) of a rigid body, and the
    /// pose of A in B, returns the same motion as the velocity of B's origin in B's axes:
    /// `ω_B = R ω_A`, `v_B = R v_A + p × ω_B`. Power is preserved with [`Wrench::transform`].
    pub fn transform(&self, a_in_b: &Isometry3<f64>) -> Twist {
        let w = a_in_b.rotation * self.angular;
        let v = a_in_b.rotation * self.linear + a_in_b.translation.vector.cross(&w);
        Twist {
            linear: v,
            angular: w,
        }
    }
}

impl Arm {
    /// Pose of the sensor frame in the TCP frame (`tool⁻¹ · sensor_mount`).
    pub fn sensor_in_tcp(&self) -> Isometry3<f64> {
        self.tool_inv * self.sensor_mount
    }

    /// Sensor wrench (sensor origin, sensor axes) → TCP wrench (TCP origin, TCP axes).
    /// Independent of the joints.
    pub fn sensor_wrench_to_tcp(&self, w_sensor: &Wrench) -> Result<Wrench, KinError> {
        if !w_sensor.is_finite() {
            return Err(KinError::InvalidInput("w_sensor"));
        }
        Ok(w_sensor.transform(&self.sensor_in_tcp()))
    }

    /// Sensor wrench → wrench at the TCP point in **base axes** (the form used by
    /// `τ = Jᵀ F` with the base Jacobian).
    pub fn sensor_wrench_to_base_at_tcp(
        &self,
        q: &Joints,
        w_sensor: &Wrench,
    ) -> Result<Wrench, KinError> {
        let tcp = self.fk(q)?;
        Ok(self.sensor_wrench_to_tcp(w_sensor)?.rotate(&tcp.rotation))
    }

    /// Sensor wrench → wrench at the base origin in base axes.
    pub fn sensor_wrench_to_base(&self, q: &Joints, w_sensor: &Wrench) -> Result<Wrench, KinError> {
        if !w_sensor.is_finite() {
            return Err(KinError::InvalidInput("w_sensor"));
        }
        Ok(w_sensor.transform(&self.fk_sensor(q)?))
    }

    /// Sensor wrench → constraint frame {C} (origin of C, C's axes), given the pose of {C} in
    /// base (Raibert & Craig: sensed forces must be brought into {C} before errors are formed).
    pub fn sensor_wrench_to_frame(
        &self,
        q: &Joints,
        w_sensor: &Wrench,
        frame_in_base: &Isometry3<f64>,
    ) -> Result<Wrench, KinError> {
        check_iso(frame_in_base, "frame_in_base")?;
        let sensor_in_frame = frame_in_base.inverse() * self.fk_sensor(q)?;
        if !w_sensor.is_finite() {
            return Err(KinError::InvalidInput("w_sensor"));
        }
        Ok(w_sensor.transform(&sensor_in_frame))
    }

    /// Joint torques (N·m) statically equivalent to a wrench applied at the TCP, given in base
    /// axes: `τ = Jᵀ F` (base Jacobian at the TCP). Virtual work: `F·v = τ·q̇` for `v = J q̇`.
    pub fn joint_torques(&self, q: &Joints, w_base_at_tcp: &Wrench) -> Result<Joints, KinError> {
        if !w_base_at_tcp.is_finite() {
            return Err(KinError::InvalidInput("w_base_at_tcp"));
        }
        let j = self.jacobian(q, JacobianFrame::Base)?;
        let tau = j.transpose() * w_base_at_tcp.to_vector();
        Ok([tau[0], tau[1], tau[2], tau[3], tau[4], tau[5]])
    }

    /// Wrench at the TCP in base axes from joint torques (N·m): `F = (Jᵀ)⁻¹ τ` (the seed's
    /// `F_d = (Jᵀ)⁻¹ F_i`), computed as a damped pseudo-inverse so it stays bounded near
    /// singularities (damping per [`crate::DlsConfig`]). Returns the wrench and the damping λ
    /// used (0 = exact inverse).
    pub fn wrench_from_joint_torques(
        &self,
        q: &Joints,
        tau: &Joints,
    ) -> Result<(Wrench, f64), KinError> {
        check_finite(tau, "tau")?;
        let j = self.jacobian(q, JacobianFrame::Base)?;
        let (f, lambda, _) = dls_solve(
            &j.transpose(),
            &Vector6::from_column_slice(tau),
            self.dls_config(),
        )?;
        Ok((Wrench::from_vector(&f), lambda))
    }
}
