//! Scripts of MAD deliveries, corruptions, injected bytes, timeouts and application calls
//! against two connection managers, one listening and one connecting (see
//! `softroce_emu::sim::fuzzing::cm::exchange`): `cargo +nightly fuzz run cm`. Panics if a refused
//! call changed anything or a connection outlives its peers' hanging up.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    softroce_emu::sim::fuzzing::cm::exchange(data);
});
