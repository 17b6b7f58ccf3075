#![no_main]
// See cell_fuzz::netftapi2 for what it feeds and asserts.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cell_fuzz::netftapi2(data));
