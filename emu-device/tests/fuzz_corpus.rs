//! Replays the device and responder cargo-fuzz corpora (fuzz/corpus/device and responder,
//! minimized from campaigns of millions of executions with valid ICRCs) on stable, through
//! the entry points the fuzz targets use: no input panics or touches memory outside the
//! remotely writable region.

use std::path::PathBuf;

use softroce_emu::sim::fuzzing::{datagram, responder_sequence};

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(name);
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .to_string();
            (name, std::fs::read(&path).expect("corpus file readable"))
        })
        .collect();
    seeds.sort();
    seeds
}

#[test]
fn device_corpus_replays_without_a_panic_or_a_stray_write() {
    let seeds = corpus("device");
    assert!(
        seeds.len() >= 50,
        "device corpus has only {} seeds",
        seeds.len()
    );
    for (name, data) in seeds {
        let run = std::panic::catch_unwind(|| datagram(&data));
        assert!(run.is_ok(), "device seed {name} failed");
    }
}

#[test]
fn responder_corpus_replays_without_a_panic_or_a_stray_write() {
    let seeds = corpus("responder");
    assert!(
        seeds.len() >= 50,
        "responder corpus has only {} seeds",
        seeds.len()
    );
    for (name, data) in seeds {
        let run = std::panic::catch_unwind(|| responder_sequence(&data));
        assert!(run.is_ok(), "responder seed {name} failed");
    }
}
