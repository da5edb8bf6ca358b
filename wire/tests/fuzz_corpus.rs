//! Replays the cargo-fuzz corpora (fuzz/corpus/packet, capture and mad) on stable,
//! plus truncations and single-byte mutations of each seed, through the same entry points
//! the fuzz targets use, so CI exercises them without nightly.

use std::path::PathBuf;

fn seeds(corpus: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(corpus);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    seeds.sort();
    seeds
}

/// The seed, up to `limit` of its prefixes (spread over its length), and up to `limit`
/// copies with one byte inverted.
fn variants(data: &[u8], limit: usize) -> impl Iterator<Item = Vec<u8>> + '_ {
    let step = data.len().div_ceil(limit).max(1);
    let prefixes = (0..data.len()).step_by(step).map(|n| data[..n].to_vec());
    let flips = (0..data.len()).step_by(step).map(|i| {
        let mut m = data.to_vec();
        m[i] ^= 0xFF;
        m
    });
    std::iter::once(data.to_vec()).chain(prefixes).chain(flips)
}

#[test]
fn packet_corpus_replays_without_panics() {
    let seeds = seeds("packet");
    assert!(
        seeds.len() >= 20,
        "packet corpus has only {} seeds",
        seeds.len()
    );
    for (_, data) in &seeds {
        for input in variants(data, 128) {
            softroce_wire::fuzzing::packet(&input);
        }
    }
}

#[test]
fn mad_corpus_replays_without_panics() {
    let seeds = seeds("mad");
    let names: Vec<&str> = seeds.iter().map(|(n, _)| n.as_str()).collect();
    // Every modelled CM message, plus the attributes kept verbatim.
    for needed in [
        "req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep", "lap",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(&format!("cm_{needed}"))),
            "no cm_{needed} seed in {names:?}"
        );
    }
    for (_, data) in &seeds {
        // Every byte of a MAD is a field or private data: mutate each one.
        for input in variants(data, 256) {
            softroce_wire::fuzzing::mad(&input);
            softroce_wire::fuzzing::packet(&input);
        }
    }
}

#[test]
fn capture_corpus_replays_without_panics() {
    let seeds = seeds("capture");
    let names: Vec<&str> = seeds.iter().map(|(n, _)| n.as_str()).collect();
    // Classic pcap with Ethernet, Linux cooked v1 and v2, and pcapng.
    for needed in ["sll.pcap", "sll2.pcap", ".pcapng", "write_lat"] {
        assert!(
            names.iter().any(|n| n.contains(needed)),
            "no {needed} seed in {names:?}"
        );
    }
    for (_, data) in &seeds {
        for input in variants(data, 64) {
            softroce_wire::fuzzing::capture(&input);
        }
    }
}

mod mutated_captures {
    use proptest::prelude::*;

    proptest! {
        /// Random damage anywhere in a real capture, plus a random cut: the reader reports
        /// errors, never panics, and never loops.
        #[test]
        fn reader_survives_random_damage(
            seed in 0usize..16,
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let seeds = super::seeds("capture");
            let (_, data) = &seeds[seed % seeds.len()];
            let mut data = data.clone();
            for (at, byte) in edits {
                let i = at.index(data.len());
                data[i] = byte;
            }
            let keep = cut.index(data.len() + 1);
            softroce_wire::fuzzing::capture(&data[..keep]);
        }
    }
}
