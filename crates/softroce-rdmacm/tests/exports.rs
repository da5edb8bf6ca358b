//! The built library carries rdma-core 44's librdmacm export table: SONAME librdmacm.so.1,
//! every symbol at its RDMACM_1.x node, the same set as Debian's librdmacm.so.1.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

const SYSTEM_LIB: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

/// `(node, symbol)` of every defined default-version function objdump -T lists.
fn exports(lib: &str) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("running objdump (binutils; scripts/test-all.sh installs it)");
    assert!(out.status.success(), "objdump -T {lib} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" DF ") && !l.contains("*UND*"))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let (node, sym) = (cols[cols.len() - 2], cols[cols.len() - 1]);
            (!node.starts_with('(')).then(|| (node.to_string(), sym.to_string()))
        })
        .collect()
}

fn built() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    [deps.join("librdmacm.so"), deps.join("../librdmacm.so")]
        .into_iter()
        .find(|p| p.is_file())
        .expect("librdmacm.so is built before the tests")
}

#[test]
fn exports_equal_rdma_core_44_and_the_system_library() {
    let lib = built();
    let ours = exports(lib.to_str().expect("UTF-8 path"));
    let listed: BTreeSet<(String, String)> = include_str!("../exports.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (n, s) = l.split_once(' ').expect("NODE symbol");
            (n.to_string(), s.to_string())
        })
        .collect();
    assert_eq!(
        listed.len(),
        74,
        "exports.txt is rdma-core 44's table, RDMACM_1.4's and RDMACM_1.5's three calls each"
    );
    assert_eq!(ours, listed, "the built library exports exports.txt");
    assert!(
        std::path::Path::new(SYSTEM_LIB).exists(),
        "{SYSTEM_LIB} is missing: run scripts/test-all.sh as root (librdmacm1)"
    );
    let newer: BTreeSet<(String, String)> = [
        ("RDMACM_1.4", "rdma_query_addrinfo"),
        ("RDMACM_1.4", "rdma_resolve_addrinfo"),
        ("RDMACM_1.4", "rdma_write_cm_event"),
        ("RDMACM_1.5", "repoll_create"),
        ("RDMACM_1.5", "repoll_ctl"),
        ("RDMACM_1.5", "repoll_wait"),
    ]
    .iter()
    .map(|(n, s)| ((*n).to_string(), (*s).to_string()))
    .collect();
    assert_eq!(
        ours.difference(&newer).cloned().collect::<BTreeSet<_>>(),
        exports(SYSTEM_LIB),
        "Debian's librdmacm.so.1 table, and the calls of a newer librdmacm"
    );
    let dynamic = Command::new("objdump")
        .arg("-p")
        .arg(&lib)
        .output()
        .expect("objdump -p");
    let text = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["SONAME", "librdmacm.so.1"]),
        "SONAME librdmacm.so.1:\n{text}"
    );
}
