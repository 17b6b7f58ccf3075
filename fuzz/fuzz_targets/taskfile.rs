#![no_main]
// See cell_fuzz::taskfile for what it feeds and asserts.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cell_fuzz::taskfile(data));
