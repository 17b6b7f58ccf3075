//! The simulator's pure world model: what the simulated robot does with a joint reference
//! ([`servo`]), what the environment does to the tool ([`contact`], [`hand`], [`tool`]), the
//! resulting "true" wrench at the F/T sensor ([`World::sensor_wrench`]), and the Raibert–Craig
//! 2-DOF torque-driven plant ([`rc_plant`]). Scenarios are TOML ([`config::WorldConfig`]);
//! events (surface ramps, the hand) may start on the first contact ([`trigger`]).
//!
//! No I/O, clocks or threads: time is a parameter, every call is deterministic. The simulator
//! calls [`World::sensor_wrench`] every 1 ms base tick with *scenario time* (ticks × 1 ms since
//! the scenario was loaded or reset), the one clock every part of the world advances on.
//!
//! # Sign convention of the sensor truth
//! The sensor reports the wrench **the tool exerts on the sensor**: the sum of the external
//! wrenches acting on the tool — its weight, the contact forces of the surfaces and the
//! operator's hand — minus what it takes to accelerate the tool (`m a`, `I α + ω × I ω`,
//! see [`tool`]). So a tool hanging still reads `f_s = m g_s` (as in `irb120.md` §5.3),
//! pressing the tool down on a table reads the table's upward reaction, and accelerating the
//! tool upwards reads more than its weight. All in the **sensor frame, about the sensor origin,
//! SI**.
//!
//! # Where the accelerations come from
//! [`World::sensor_wrench`] gets the joints `q`, `q̇` of the servo each 1 ms base tick, not
//! their accelerations. The tool's acceleration is the **finite difference of the centre of
//! mass's velocity and of the angular velocity** (both from `J(q) q̇`, base axes) over the
//! tick `dt`: the mean acceleration over the tick, exact for the servo's piecewise-smooth
//! motion up to half a tick of lag, `J̇ q̇` included without deriving it. The servo's own `q̈`
//! was not used: it jumps every EGM cycle (reference steps) and is not part of the world's API.
//! The first evaluation after [`World::new`] or [`World::reset`] (no previous velocity) and a
//! call with a non-finite or non-positive `dt` use zero acceleration — no spike.

pub mod config;
pub mod contact;
pub mod hand;
pub mod rc_plant;
pub mod servo;
pub mod tool;
pub mod trigger;

pub use config::{ContactParams, SurfaceKind, SurfaceParams, WorldConfig};
pub use contact::{ContactModel, ContactSummary, Peg, Ramp, Shape, Surface};
pub use hand::{Hand, HandOutput, HandParams};
pub use rc_plant::{PlanarRamp, PlantState, RcPlant, RcPlantParams, RcSurface};
pub use servo::{ServoModel, ServoParams};
pub use tool::ToolParams;
pub use trigger::{Trigger, TriggerClock, TriggerStatus};

use kinematics::{Arm, JacobianFrame, KinError, Twist, Wrench};
use nalgebra::{Isometry3, Vector3, Vector6};

/// Why the world could not evaluate a configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorldError {
    /// A non-finite input (named).
    #[error("non-finite input: {0}")]
    NonFinite(&'static str),
    /// The kinematics rejected the joints.
    #[error("kinematics: {0}")]
    Kinematics(#[from] KinError),
}

/// The true wrench at the sensor and what produced it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SensorTruth {
    /// Total force on the sensor (N, sensor frame).
    pub force_n: [f64; 3],
    /// Total torque on the sensor about its origin (N·m, sensor frame).
    pub torque_nm: [f64; 3],
    /// The same total as a [`Wrench`].
    pub wrench: Wrench,
    /// Contact part (sensor frame, about the sensor origin).
    pub contact_sensor: Wrench,
    /// Hand part (sensor frame, about the sensor origin).
    pub hand_sensor: Wrench,
    /// Tool weight part (sensor frame, about the sensor origin).
    pub gravity_sensor: Wrench,
    /// Tool inertia part, `−m a` and `−(I α + ω × I ω)` (sensor frame, about the sensor
    /// origin).
    pub inertial_sensor: Wrench,
    /// Acceleration of the tool's centre of mass (m/s², base).
    pub com_accel_base: [f64; 3],
    /// Angular acceleration of the tool (rad/s², base).
    pub angular_accel_base: [f64; 3],
    /// Contact force on the tool (N, base).
    pub contact_force_base: [f64; 3],
    /// Contact wrench on the tool about the TCP (base axes).
    pub contact_wrench_tcp_base: Wrench,
    /// Hand force on the tool at the TCP (N, base).
    pub hand_force_base: [f64; 3],
    /// Whether any surface is penetrated.
    pub in_contact: bool,
    /// Number of surfaces touched.
    pub contacts: usize,
    /// Largest penetration (m).
    pub penetration_m: f64,
    /// Whether the hand holds the tool.
    pub hand_active: bool,
    /// The hand's attractor (m, base), when active.
    pub hand_target_base: Option<[f64; 3]>,
    /// The operator's hand (m, base), while it holds the tool.
    pub hand_pos_base: Option<[f64; 3]>,
    /// TCP pose in base.
    pub tcp_in_base: Isometry3<f64>,
    /// Sensor pose in base.
    pub sensor_in_base: Isometry3<f64>,
    /// TCP twist (velocity of the TCP, angular velocity; base axes).
    pub tcp_twist_base: Twist,
}

/// The world around the simulated arm.
#[derive(Debug, Clone)]
pub struct World {
    arm: Arm,
    config: WorldConfig,
    gravity: Vector3<f64>,
    contact: ContactModel,
    hand: Hand,
    /// The previous evaluation's centre-of-mass velocity and angular velocity (base), for the
    /// tool's accelerations; `None` after a reset.
    prev_motion: Option<(Vector3<f64>, Vector3<f64>)>,
}

/// A wrench about the TCP in base axes → the sensor frame about the sensor origin.
pub fn tcp_base_wrench_to_sensor(
    w_base_at_tcp: &Wrench,
    tcp_in_base: &Isometry3<f64>,
    sensor_in_base: &Isometry3<f64>,
) -> Wrench {
    let w_tcp = w_base_at_tcp.rotate(&tcp_in_base.rotation.inverse());
    w_tcp.transform(&(sensor_in_base.inverse() * tcp_in_base))
}

impl World {
    /// Builds the world from a scenario and the arm (tool and sensor mount from the cell's
    /// `[arm]` table). `Err` lists every scenario problem.
    pub fn new(config: WorldConfig, arm: Arm) -> Result<Self, Vec<String>> {
        let errs = config.validate();
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Self {
            arm,
            gravity: Vector3::from(config.gravity_m_s2),
            contact: config.contact_model(),
            hand: Hand::new(config.hand.clone()),
            config,
            prev_motion: None,
        })
    }

    /// The arm model.
    pub fn arm(&self) -> &Arm {
        &self.arm
    }

    /// The scenario.
    pub fn config(&self) -> &WorldConfig {
        &self.config
    }

    /// The contact model.
    pub fn contact_model(&self) -> &ContactModel {
        &self.contact
    }

    /// The hand.
    pub fn hand(&self) -> &Hand {
        &self.hand
    }

    /// A joint servo for this arm and scenario, at rest at `q0`.
    pub fn servo(&self, q0: [f64; 6]) -> ServoModel {
        ServoModel::new(self.config.servo.clone(), *self.arm.limits(), q0)
    }

    /// The scenario's 2-DOF plant.
    pub fn rc_plant(&self) -> Result<RcPlant, Vec<String>> {
        RcPlant::new(self.config.rc_plant)
    }

    /// Back to the scenario's initial state: surfaces at their initial places with their
    /// triggers armed, the hand at the start of its path, trigger armed. (Scenario time is the
    /// caller's: restart it at 0.)
    pub fn reset(&mut self) {
        self.contact = self.config.contact_model();
        self.hand.reset();
        self.prev_motion = None;
    }

    /// Re-arms every `contact` trigger (surfaces and hand) without resetting anything else: a
    /// triggered surface returns to its initial place and the hand lets go until the next
    /// contact.
    pub fn arm_triggers(&mut self) {
        self.contact.arm_triggers();
        self.hand.arm_trigger();
    }

    /// A new scenario at run time, keeping the running state where it still applies: each
    /// surface's trigger (by index, when its kind is unchanged), the hand's progress and
    /// trigger. The servo and plant parameters in `config` are the caller's to apply to the
    /// servo and plant it owns. `Err` lists every problem and changes nothing.
    pub fn set_config(&mut self, config: WorldConfig) -> Result<(), Vec<String>> {
        let errs = config.validate();
        if !errs.is_empty() {
            return Err(errs);
        }
        let mut contact = config.contact_model();
        for (i, s) in contact.surfaces.iter_mut().enumerate() {
            s.trigger = TriggerClock::carried_from(
                s.trigger.kind(),
                self.contact.surfaces.get(i).map(|o| &o.trigger),
            );
        }
        self.contact = contact;
        self.hand.set_params(config.hand.clone());
        self.gravity = Vector3::from(config.gravity_m_s2);
        self.config = config;
        Ok(())
    }

    /// The true wrench at the sensor for joints `q` (rad) moving at `qd` (rad/s), at scenario
    /// time `t` (s; moves the surfaces, fires contact triggers), over a step of `dt` (s; the
    /// time since the previous call: advances the hand and differentiates the tool's velocity
    /// into its acceleration, see the module docs).
    pub fn sensor_wrench(
        &mut self,
        q: &[f64; 6],
        qd: &[f64; 6],
        t: f64,
        dt: f64,
    ) -> Result<SensorTruth, WorldError> {
        if !qd.iter().all(|v| v.is_finite()) {
            return Err(WorldError::NonFinite("qd"));
        }
        if !t.is_finite() {
            return Err(WorldError::NonFinite("t"));
        }
        let tcp = self.arm.fk(q)?;
        let sensor = self.arm.fk_sensor(q)? * self.config.sensor_mount_error();
        let j = self.arm.jacobian(q, JacobianFrame::Base)?;
        let tw = j * Vector6::from_column_slice(qd);
        let twist = Twist::from_vector(&tw);
        let p_tcp = tcp.translation.vector;

        let c = self.contact.step(&tcp, &twist, t);
        self.hand.observe_contact(c.contacts > 0, t);
        let h = self.hand.step(&p_tcp, &twist.linear, t, dt);
        let hand_w = Wrench::new(h.force, h.torque);

        let contact_sensor = tcp_base_wrench_to_sensor(&c.wrench_at_tcp, &tcp, &sensor);
        let hand_sensor = tcp_base_wrench_to_sensor(&hand_w, &tcp, &sensor);
        let gravity_sensor = self.config.tool.gravity_wrench(&sensor, &self.gravity);

        // The tool's accelerations: finite differences over the tick (module docs).
        let p_com = sensor * nalgebra::Point3::from(self.config.tool.com());
        let omega = twist.angular;
        let v_com = twist.linear + omega.cross(&(p_com.coords - p_tcp));
        let (a_com, alpha) = match self.prev_motion {
            Some((v0, w0)) if dt.is_finite() && dt > 0.0 => ((v_com - v0) / dt, (omega - w0) / dt),
            _ => (Vector3::zeros(), Vector3::zeros()),
        };
        self.prev_motion = Some((v_com, omega));
        let inertial_sensor = self
            .config
            .tool
            .inertial_wrench(&sensor, &a_com, &omega, &alpha);

        let total = Wrench::new(
            contact_sensor.force + hand_sensor.force + gravity_sensor.force + inertial_sensor.force,
            contact_sensor.torque
                + hand_sensor.torque
                + gravity_sensor.torque
                + inertial_sensor.torque,
        );
        let cf = c.wrench_at_tcp.force;
        Ok(SensorTruth {
            force_n: [total.force.x, total.force.y, total.force.z],
            torque_nm: [total.torque.x, total.torque.y, total.torque.z],
            wrench: total,
            contact_sensor,
            hand_sensor,
            gravity_sensor,
            inertial_sensor,
            com_accel_base: [a_com.x, a_com.y, a_com.z],
            angular_accel_base: [alpha.x, alpha.y, alpha.z],
            contact_force_base: [cf.x, cf.y, cf.z],
            contact_wrench_tcp_base: c.wrench_at_tcp,
            hand_force_base: [h.force.x, h.force.y, h.force.z],
            in_contact: c.contacts > 0,
            contacts: c.contacts,
            penetration_m: c.max_depth,
            hand_active: h.active,
            hand_target_base: h.active.then(|| [h.target.x, h.target.y, h.target.z]),
            hand_pos_base: h.hand_pos.map(|p| [p.x, p.y, p.z]),
            tcp_in_base: tcp,
            sensor_in_base: sensor,
            tcp_twist_base: twist,
        })
    }
}

#[cfg(test)]
mod tests;
