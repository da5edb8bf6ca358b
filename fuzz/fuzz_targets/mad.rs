//! Arbitrary bytes as a QP1 payload through the MAD, CM and rdma_cm header parsers:
//! `cargo +nightly fuzz run mad`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softroce_wire::fuzzing::mad(data);
});
