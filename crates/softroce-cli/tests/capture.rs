//! Our own traffic, captured with SOFTROCE_PCAP, is RoCEv2 to tshark and every ICRC in it
//! verifies with the full IP header.

use std::process::Command as Std;

use assert_cmd::Command;

#[test]
fn demo_traffic_captured_with_softroce_pcap_decodes_in_tshark_and_verifies() {
    let dir = std::env::temp_dir().join(format!("softroce-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("demo.pcap");
    Command::cargo_bin("softroce")
        .unwrap()
        .args(["demo", "--a", "127.0.0.5", "--b", "127.0.0.6"])
        .env("SOFTROCE_PCAP", &pcap)
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .success();
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .arg("decode")
        .arg(&pcap)
        .assert()
        .success();
    let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let summary = stdout.lines().last().unwrap();
    let roce: u64 = summary
        .split(' ')
        .nth(1)
        .unwrap()
        .trim_start_matches("roce=")
        .parse()
        .unwrap();
    assert!(roce >= 20, "{summary}");
    assert!(summary.ends_with("icrc_bad=0 malformed=0"), "{summary}");
    assert!(summary.contains(&format!("icrc_ok={roce}")), "{summary}");

    // tshark must be installed (scripts/test-all.sh installs it); a missing tool is a
    // failure, not a skip.
    let tshark = Std::new("tshark")
        .args(["-r"])
        .arg(&pcap)
        .args(["-T", "fields", "-e", "infiniband.bth.opcode"])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run tshark ({e}): run scripts/test-all.sh, which installs it")
        });
    assert!(
        tshark.status.success(),
        "{}",
        String::from_utf8_lossy(&tshark.stderr)
    );
    let fields = String::from_utf8(tshark.stdout).unwrap();
    let decoded = fields.lines().filter(|l| !l.trim().is_empty()).count() as u64;
    assert_eq!(
        decoded, roce,
        "tshark decoded every packet's BTH:\n{fields}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One `SOFTROCE_PCAP` for the two processes of a job (a server and a client): the first
/// writes the file, the second one of its own beside it (`NAME.PID.pcap`, said on stderr);
/// both decode whole, every ICRC verified. Two writers of one file left a capture no
/// reader could follow past the first overlap.
#[test]
fn two_processes_given_one_capture_file_each_write_a_whole_one() {
    let dir = std::env::temp_dir().join(format!("softroce-capture2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("job.pcap");
    let softroce = assert_cmd::cargo::cargo_bin("softroce");
    let server = Std::new(&softroce)
        .args(["perf", "write", "--bind", "127.0.0.7", "-p", "18533"])
        .env("SOFTROCE_PCAP", &pcap)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = Command::cargo_bin("softroce")
        .unwrap()
        .args(["perf", "write", "--bind", "127.0.0.8", "-p", "18533"])
        .args(["-s", "4096", "-n", "200", "127.0.0.7"])
        .env("SOFTROCE_PCAP", &pcap)
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .success();
    let server_done = server.wait_with_output().unwrap();
    assert!(server_done.status.success(), "server: {server_done:?}");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&server_done.stderr),
        String::from_utf8_lossy(&client.get_output().stderr)
    );
    let beside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != &pcap)
        .collect();
    assert_eq!(beside.len(), 1, "one file beside the first: {beside:?}");
    assert!(
        said.contains("is being written by another process")
            && said.contains(&beside[0].display().to_string()),
        "the second process says where it captures: {said}"
    );
    for file in [&pcap, &beside[0]] {
        let out = Command::cargo_bin("softroce")
            .unwrap()
            .arg("decode")
            .arg(file)
            .assert()
            .success();
        let stdout = String::from_utf8(out.get_output().stdout.clone()).unwrap();
        let summary = stdout.lines().last().unwrap();
        assert!(
            summary.ends_with("icrc_bad=0 malformed=0") && !summary.contains("roce=0 "),
            "{}: {summary}",
            file.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
