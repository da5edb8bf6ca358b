//! `softroce ops` between two processes on loopback: every RC/UC/UD/SRQ operation at every
//! size class, verified by both sides. The same program runs with `--backend ibverbs` against
//! rdma_rxe in the interop harness (scripts/rxe).

mod common;

use std::process::Command;

use common::{server_and_client, softroce};

/// Runs a server and a client; returns the client's stdout after checking both succeeded.
fn run_ops(server_ip: &str, client_ip: &str, tcp_port: u16, mtu: &str) -> String {
    server_and_client(
        Command::new(softroce()).args(["ops", "--bind", server_ip, "-p", &tcp_port.to_string()]),
        Command::new(softroce())
            .args(["ops", "--bind", client_ip, "-p", &tcp_port.to_string()])
            .args(["-m", mtu, server_ip]),
    )
}

fn passed(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("PASS ")).collect()
}

#[test]
fn every_op_and_size_passes_between_two_processes_at_mtu_1024() {
    let out = run_ops("127.0.0.71", "127.0.0.72", 18671, "1024");
    let pass = passed(&out);
    // RC: 5 data ops x 6 sizes, 3 atomics (CMP_SWAP, FETCH_ADD, ATOMIC_WRITE), 2 window
    // ops x 4 sizes, 2 refused window accesses x 2 sizes; UC 2 x 6, UD 3, SRQ 6.
    assert_eq!(pass.len(), 30 + 3 + 8 + 4 + 12 + 3 + 6, "{out}");
    for cell in [
        "PASS rc-read 1048576",
        "PASS rc-write-imm 1025",
        "PASS rc-cmp-swap 8",
        "PASS rc-fetch-add 8",
        "PASS rc-atomic-write 8",
        "PASS rc-mw-write 65536",
        "PASS rc-mw-read 1025",
        "PASS rc-mw-write-outside 1",
        "PASS rc-mw-write-outside 1025",
        "PASS rc-mw-read-no-rights 1025",
        "PASS ud-send 1024",
        "PASS srq-send 65536",
        "PASS uc-write 0",
    ] {
        assert!(pass.contains(&cell), "missing {cell}:\n{out}");
    }
}

#[test]
fn every_op_passes_at_mtu_4096() {
    let out = run_ops("127.0.0.73", "127.0.0.74", 18673, "4096");
    assert!(out.contains("MTU 4096"), "{out}");
    assert!(out.contains("PASS rc-send 4097"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}
