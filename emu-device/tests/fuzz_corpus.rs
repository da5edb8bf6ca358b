//! Replays the device, responder and connection manager cargo-fuzz corpora (fuzz/corpus/
//! device, responder and cm, minimized from campaigns of millions of executions) on stable,
//! through the entry points the fuzz targets use: no input panics or touches memory outside
//! the remotely writable region, and no connection outlives its peers' hanging up.

use std::path::PathBuf;

use softroce_emu::sim::fuzzing::cm::exchange;
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

#[test]
fn cm_corpus_replays_without_a_panic_or_a_connection_left_behind() {
    let seeds = corpus("cm");
    assert!(seeds.len() >= 7, "cm corpus has only {} seeds", seeds.len());
    let mut connected = 0;
    for (name, data) in seeds {
        let run = std::panic::catch_unwind(|| exchange(&data));
        let outcome = run.unwrap_or_else(|_| panic!("cm seed {name} failed"));
        if outcome.established == [1, 1] {
            connected += 1;
        }
    }
    assert!(
        connected > 0,
        "no seed brought a connection up on both sides"
    );
}

#[test]
fn a_cm_script_that_connects_and_hangs_up_comes_up_once_on_each_side() {
    // REQ to the listener, which accepts; REP back, RTU sent and delivered; the connecting
    // side disconnects, the listener answers the DREQ, and time-wait passes.
    let script = [
        0x00, 0x86, 0x00, 0x00, 0x06, 0x00, 0x00, 0x07, 0x05, 0x00, 0x00, 0x86, 0x00, 0x00, 0x45,
        0x05,
    ];
    assert_eq!(exchange(&script).established, [1, 1]);
    // The same with the REQ lost: its retry goes after a CM response timeout (5 s pass).
    let mut lost = vec![0x02, 0x45, 0x05];
    lost.extend_from_slice(&script);
    assert_eq!(exchange(&lost).established, [1, 1]);
}
