//! Nothing here: the benchmarks are in `benches/kinematics.rs` (`cargo bench` in this folder).
