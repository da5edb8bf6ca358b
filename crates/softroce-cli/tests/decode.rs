//! `softroce decode` on real rxe captures, a corrupted capture and unreadable files.

use std::path::PathBuf;

use assert_cmd::Command;

fn capture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name)
}

fn summary_of(stdout: &str) -> (u64, u64, u64, u64, u64) {
    let line = stdout.lines().last().expect("summary line");
    let mut v = [0u64; 5];
    for (i, (part, key)) in line
        .split(' ')
        .zip(["packets=", "roce=", "icrc_ok=", "icrc_bad=", "malformed="])
        .enumerate()
    {
        v[i] = part
            .strip_prefix(key)
            .unwrap_or_else(|| panic!("summary line {line:?}"))
            .parse()
            .unwrap();
    }
    (v[0], v[1], v[2], v[3], v[4])
}

#[test]
fn every_shared_capture_decodes_with_every_icrc_ok() {
    for name in [
        "rc_pingpong.pcap",
        "uc_pingpong.pcap",
        "ud_pingpong.pcap",
        "srq_pingpong.pcap",
        "write_bw.pcap",
        "read_bw.pcap",
        "send_bw.pcap",
        "send_lat.pcap",
        "write_lat.pcap",
    ] {
        let out = Command::cargo_bin("softroce")
            .unwrap()
            .args(["decode", "--stats"])
            .arg(capture(name))
            .assert()
            .success();
        let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        let (packets, roce, ok, bad, malformed) = summary_of(&stdout);
        assert!(roce > 0 && packets >= roce, "{name}");
        assert_eq!((ok, bad, malformed), (roce, 0, 0), "{name}");
        let lines = stdout.lines().filter(|l| l.contains("icrc=ok")).count() as u64;
        assert_eq!(lines, roce, "{name}: one line per packet");
    }
}

#[test]
fn rc_pingpong_stats_name_the_opcodes_ibta_style() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode", "--stats", "--quiet"])
        .arg(capture("rc_pingpong.pcap"))
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(stdout.contains("opcode RC_SEND_FIRST "), "{stdout}");
    assert!(stdout.contains("opcode RC_ACKNOWLEDGE "), "{stdout}");
    let read = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode", "--stats", "--quiet"])
        .arg(capture("read_bw.pcap"))
        .assert()
        .success();
    let stdout = String::from_utf8(read.get_output().stdout.clone()).unwrap();
    assert!(stdout.contains("opcode RC_RDMA_READ_REQUEST "), "{stdout}");
    assert!(
        stdout.contains("opcode RC_RDMA_READ_RESPONSE_MIDDLE "),
        "{stdout}"
    );
}

#[test]
fn one_flipped_payload_byte_is_reported_and_fails_the_run() {
    let original = std::fs::read(capture("send_lat.pcap")).unwrap();
    // Flip a byte near the end of the file: inside the last frame's RoCE payload.
    let mut bytes = original.clone();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x01;
    let dir = std::env::temp_dir().join(format!("softroce-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("flipped.pcap");
    std::fs::write(&bad, &bytes).unwrap();
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode"])
        .arg(&bad)
        .assert()
        .code(1);
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let (_, roce, ok, badc, malformed) = summary_of(&stdout);
    assert_eq!((badc, malformed), (1, 0));
    assert_eq!(ok, roce - 1);
    assert!(stdout.contains("icrc=bad (ICRC mismatch"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unreadable_files_give_a_clear_error_and_exit_2() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode", "/nonexistent/capture.pcap"])
        .assert()
        .code(2);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(stderr.contains("/nonexistent/capture.pcap"), "{stderr}");
    assert!(stderr.contains("No such file"), "{stderr}");

    let text = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode"])
        .arg(&text)
        .assert()
        .code(2);
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(stderr.contains("not a readable pcap file"), "{stderr}");
}

#[test]
fn wireshark_pcapng_decodes_like_pcap() {
    let ng = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/pcapng/ud_pingpong_first6.pcapng");
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode", "--stats"])
        .arg(&ng)
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(summary_of(&stdout), (6, 6, 6, 0, 0));
    assert!(stdout.contains("opcode UD_SEND_ONLY 6\n"), "{stdout}");
    let first = stdout.lines().next().unwrap();
    assert!(
        first.contains(" 10.99.0.12:53368 > 10.99.0.11:4791 UD_SEND_ONLY "),
        "{first}"
    );
    assert!(first.ends_with(" icrc=ok"), "{first}");
}

#[test]
fn capture_cut_short_counts_what_was_read_and_exits_2() {
    let original = std::fs::read(capture("send_lat.pcap")).unwrap();
    // A capture whose writer was killed mid-record: the last record is incomplete.
    let cut = &original[..original.len() - 7];
    let dir = std::env::temp_dir().join(format!("softroce-decode-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.pcap");
    std::fs::write(&path, cut).unwrap();
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .args(["decode", "--quiet"])
        .arg(&path)
        .arg(capture("write_lat.pcap"))
        .assert()
        .code(2);
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let stderr = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert!(stderr.contains("cut.pcap"), "{stderr}");
    // send_lat has 202 RoCE packets, the last one lost; write_lat's 200 still decode.
    assert_eq!(summary_of(&stdout), (401, 401, 401, 0, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
