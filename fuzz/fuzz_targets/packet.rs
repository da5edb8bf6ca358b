//! Arbitrary bytes through every wire parser: `cargo +nightly fuzz run packet`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softroce_wire::fuzzing::packet(data);
});
