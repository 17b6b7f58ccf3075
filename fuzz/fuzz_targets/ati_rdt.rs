#![no_main]
// See cell_fuzz::ati_rdt for what it feeds and asserts.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cell_fuzz::ati_rdt(data));
