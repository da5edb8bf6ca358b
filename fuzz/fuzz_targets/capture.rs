//! Arbitrary bytes as a pcap/pcapng file through the capture reader and every parser behind
//! it: `cargo +nightly fuzz run capture fuzz/corpus/capture`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softroce_wire::fuzzing::capture(data);
});
