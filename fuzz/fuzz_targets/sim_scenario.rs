#![no_main]
// See cell_fuzz::sim_scenario for what it feeds and asserts.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cell_fuzz::sim_scenario(data));
