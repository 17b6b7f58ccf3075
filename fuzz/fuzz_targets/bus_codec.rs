#![no_main]
// See cell_fuzz::bus_codec for what it feeds and asserts.
libfuzzer_sys::fuzz_target!(|data: &[u8]| cell_fuzz::bus_codec(data));
