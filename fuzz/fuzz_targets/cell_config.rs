#![no_main]
// See cell_fuzz::cell_config for what it feeds and asserts.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cell_fuzz::cell_config(data));
