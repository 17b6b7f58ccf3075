//! sim: simulated hardware at the wire (EGM robot controller, SRI/ATI sensor boxes) around a
//! pure world model.
//!
//! * [`world`]: the pure world model the emulators share — the simulated arm's joint servo
//!   ([`world::ServoModel`]), contact with configurable (moving) surfaces, the tool's weight, a
//!   virtual operator's hand, the resulting true wrench at the F/T sensor
//!   ([`world::World::sensor_wrench`]), the Raibert–Craig 2-DOF torque-driven plant
//!   ([`world::RcPlant`]) and the TOML scenario description ([`world::WorldConfig`];
//!   scenarios live in `deploy/config/scenarios/`). No I/O, clocks or threads: time is a
//!   parameter.
//!
//! * [`controller`]: the EGM controller side (pure): `EgmRobot` out, `EgmSensor` in, servo.
//! * [`sensor`]: SRI M8128 and ATI Net F/T device emulators.
//! * [`node`]: the `cell-sim` process: EGM over UDP, a sensor emulator fed by the world,
//!   run-time faults and injected forces.

pub mod controller;
pub mod node;
pub mod sensor;
pub mod world;
