//! The short CI version of the two-process soak: 2 000 mixed RC messages (SEND, WRITE with
//! immediate, READ, FETCH_ADD) between two `softroce` processes over real UDP sockets under
//! 20 % loss, 5 % duplication, 5 % reordering and 1 % corruption on both devices, each
//! message checked exactly once and in order by the side that can see it.

use assert_cmd::Command;

#[test]
fn two_process_soak_under_loss_duplication_reordering_and_corruption_verifies_every_message() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["soak", "--processes", "-n", "2000", "--timeout", "120"])
        .args([
            "--faults",
            "drop=0.2,dup=0.05,reorder=0.05,corrupt=0.01,seed=11",
        ])
        .args(["--addresses", "127.0.0.151", "127.0.0.152"])
        .timeout(std::time::Duration::from_secs(180))
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        stdout.contains("soak ok (two processes, real UDP): messages=2000"),
        "{stdout}"
    );
    let responder = stdout
        .lines()
        .find(|l| l.starts_with("responder:"))
        .unwrap();
    assert!(responder.contains("received="), "{stdout}");
    // Loss really happened on both sides, and the transport recovered from it.
    let requester = stdout
        .lines()
        .find(|l| l.starts_with("requester:"))
        .unwrap();
    assert!(!requester.contains("retransmitted_pkts=0 "), "{stdout}");
    assert!(
        !requester.contains(" dropped=0 ") && !responder.contains(" dropped=0 "),
        "{stdout}"
    );
}

#[test]
fn a_bad_fault_spec_is_refused_before_any_process_starts() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args([
            "soak",
            "--processes",
            "-n",
            "10",
            "--faults",
            "drop=0.2,dup=7",
        ])
        .assert()
        .code(2);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(stderr.contains("'dup=7'"), "{stderr}");
}

/// The README's simulated soak, as written there (100 000 messages, seed 1) and over a few
/// more seeds: every message verified under 20 % loss. (It failed once sequence-error NAKs
/// counted against `retry_cnt`: seven losses in a row exhausted a READ's retries.)
#[test]
fn the_readme_simulated_soak_verifies_every_message_whatever_the_seed() {
    for seed in ["1", "2", "7", "8"] {
        let out = Command::cargo_bin("softroce")
            .unwrap()
            .args(["soak", "-n", "100000", "--seed", seed])
            .timeout(std::time::Duration::from_secs(120))
            .assert()
            .success();
        let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        assert!(
            stdout.contains("soak ok: messages=100000 "),
            "seed {seed}: {stdout}"
        );
    }
}
