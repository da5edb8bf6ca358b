//! Arbitrary datagrams against a device with live QPs and memory regions:
//! `cargo +nightly fuzz run device`. Panics if a byte outside the writable region changes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softroce_emu::sim::fuzzing::datagram(data);
});
