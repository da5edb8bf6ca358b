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
