//! The same `softroce ops` program on both backends: one side on the emulator directly,
//! the other through the libibverbs backend (`--backend ibverbs`, libibverbs loaded at run
//! time) — here the drop-in libibverbs.so.1 over an emulated device, so the hardware
//! backend's whole C path (device list, objects, the inline post/poll ops, events) runs in
//! every test run. Against rdma_rxe it runs in the interop harness (scripts/rxe).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{server_and_client as pair, softroce as bin};

/// The drop-in library cargo built for these tests (a dev-dependency).
fn dropin_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    [deps.join("libibverbs.so"), deps.join("../libibverbs.so")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("libibverbs.so not built next to {}", deps.display()))
}

fn ibverbs_side(ip: &str, port: u16) -> Command {
    let mut c = Command::new(bin());
    c.env("SOFTROCE_LIBIBVERBS", dropin_library())
        .env("SOFTROCE_DEVICES", format!("hw0={ip}"))
        .args([
            "ops",
            "--backend",
            "ibverbs",
            "--device",
            "hw0",
            "-p",
            &port.to_string(),
        ]);
    c
}

fn emulated_side(ip: &str, port: u16) -> Command {
    let mut c = Command::new(bin());
    c.args(["ops", "--bind", ip, "-p", &port.to_string()]);
    c
}

#[test]
fn the_ibverbs_backend_is_requester_against_the_emulator() {
    let out = pair(
        &mut emulated_side("127.0.0.161", 18761),
        ibverbs_side("127.0.0.162", 18761).arg("127.0.0.161"),
    );
    assert!(out.contains("requester hw0 (ibverbs)"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("PASS ")).count(),
        // with ATOMIC WRITE (ibv_wr_atomic_write), 2 window ops x 4 sizes and 2 refused
        // window accesses x 2 sizes
        53 + 1 + 8 + 4,
        "{out}"
    );
}

#[test]
fn the_ibverbs_backend_is_responder_to_the_emulator() {
    let out = pair(
        &mut ibverbs_side("127.0.0.163", 18763),
        emulated_side("127.0.0.164", 18763).args(["-m", "4096", "127.0.0.163"]),
    );
    assert!(!out.contains("FAIL"), "{out}");
    assert!(out.contains("PASS rc-fetch-add 8"), "{out}");
}
