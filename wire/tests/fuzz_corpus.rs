//! Replays the cargo-fuzz corpus (fuzz/corpus/packet) on stable, plus every truncation and
//! single-byte mutation of each seed, through the same entry point the fuzz target uses.

use std::path::PathBuf;

#[test]
fn fuzz_corpus_replays_without_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/packet");
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        seeds += 1;
        softroce_wire::fuzzing::packet(&data);
        for n in 0..data.len().min(128) {
            softroce_wire::fuzzing::packet(&data[..n]);
        }
        for i in 0..data.len().min(96) {
            let mut m = data.clone();
            m[i] ^= 0xFF;
            softroce_wire::fuzzing::packet(&m);
        }
    }
    assert!(
        seeds >= 10,
        "corpus in {} has only {seeds} seeds",
        dir.display()
    );
}
