//! Sequences of requests against a device's RC responder, the device sending only part of
//! what it owes between them (see `softroce_emu::sim::fuzzing::responder_sequence`):
//! `cargo +nightly fuzz run responder`. Panics if a byte outside the writable region changes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softroce_emu::sim::fuzzing::responder_sequence(data);
});
