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
//! * [`scenario`]: the running scenario (pure): world + plant on the one simulator clock
//!   (1 kHz base ticks, scenario time = ticks × 1 ms), and the scenario RPC's pure half
//!   (requests, dotted key paths, validation before anything changes).
//! * [`controller`]: the EGM controller side (pure): `EgmRobot` out, `EgmSensor` in, servo
//!   (reference per EGM cycle, integrated per base tick).
//! * [`sensor`]: SRI M8128 and ATI Net F/T device emulators (bias, noise, drift).
//! * [`wire`]: the emulated devices' side of EGM, SRI and ATI RDT, written from the specs,
//!   not from the drivers (the simulator depends on no driver crate); held to the shared test
//!   vectors in `protocols/vectors/`.
//! * [`node`]: the `cell-sim` process: the 1 kHz base-tick loop, EGM over UDP, a sensor
//!   emulator fed by the world, the plant on the bus, run-time faults and injected forces
//!   (`sim/rpc/fault`), the scenario RPC (`sim/rpc/scenario`).
//!
//! `docs/simulator.md` describes the time base, the scenario RPC, triggers, sensor
//! imperfections and the curved surfaces for users.

pub mod controller;
pub mod node;
pub mod scenario;
pub mod sensor;
pub mod wire;
pub mod world;
