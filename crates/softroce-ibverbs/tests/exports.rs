//! The built library carries rdma-core 44's export table: SONAME libibverbs.so.1, every
//! symbol bound to its version node (the Debian binaries are linked BIND_NOW against
//! versioned references), nothing unversioned.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

const REAL_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

/// `(version node, symbol)` of every default-version definition objdump -T lists, and the
/// defined symbols without a version.
fn exports(lib: &str) -> (BTreeSet<(String, String)>, Vec<String>) {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("running objdump (binutils)");
    assert!(out.status.success(), "objdump -T {lib} failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut versioned = BTreeSet::new();
    let mut unversioned = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 6
            || line.contains("*UND*")
            || line.contains("*ABS*")
            || !line.contains(" D")
        {
            continue;
        }
        let (ver, sym) = (cols[cols.len() - 2], cols[cols.len() - 1]);
        if ver.starts_with('(') {
            // A hidden compat alias of the real library (sym@IBVERBS_1.0): not default.
            continue;
        }
        if ver == "Base" {
            unversioned.push(sym.to_string());
        } else {
            versioned.insert((ver.to_string(), sym.to_string()));
        }
    }
    (versioned, unversioned)
}

/// softroce's own node: the entry point its librdmacm.so.1 finds the connection manager by.
const SOFTROCE_NODE: &str = "SOFTROCE_PRIVATE_1";

/// Every row of exports.txt.
fn listed() -> BTreeSet<(String, String)> {
    include_str!("../exports.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (v, s) = l.split_once(' ').expect("NODE symbol");
            (v.to_string(), s.to_string())
        })
        .collect()
}

/// The rows of exports.txt that are rdma-core's.
fn listed_from_rdma_core() -> BTreeSet<(String, String)> {
    listed()
        .into_iter()
        .filter(|(node, _)| node != SOFTROCE_NODE)
        .collect()
}

#[test]
fn every_export_carries_its_rdma_core_version_node() {
    common::require_tools(&["objdump"]);
    let lib = common::built_library();
    let (ours, unversioned) = exports(lib.to_str().expect("UTF-8 path"));
    let want = listed();
    assert_eq!(
        listed_from_rdma_core().len(),
        146,
        "exports.txt is rdma-core 44's default-version table"
    );
    assert!(
        want.contains(&(
            SOFTROCE_NODE.to_string(),
            "softroce_rdmacm_entry_points".to_string()
        )),
        "and softroce's own entry point for librdmacm"
    );
    let missing: Vec<_> = want.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing (or wrongly versioned): {missing:?}\nunexpected: {extra:?}"
    );
    assert!(
        unversioned.is_empty(),
        "exports without a version node: {unversioned:?}"
    );
    let dynamic = Command::new("objdump")
        .arg("-p")
        .arg(&lib)
        .output()
        .expect("running objdump -p");
    let text = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["SONAME", "libibverbs.so.1"]),
        "SONAME is not libibverbs.so.1:\n{text}"
    );
    for node in [
        "IBVERBS_1.0",
        "IBVERBS_1.1",
        "IBVERBS_1.8",
        "IBVERBS_1.14",
        "IBVERBS_PRIVATE_34",
    ] {
        assert!(text.contains(node), "version node {node} is not defined");
    }
}

#[test]
fn export_table_equals_the_installed_libibverbs() {
    common::require_tools(&["objdump", "ibv_devinfo"]);
    assert!(
        std::path::Path::new(REAL_LIB).exists(),
        "{REAL_LIB} missing although ibverbs-utils is installed"
    );
    let (real, _) = exports(REAL_LIB);
    let ours = listed_from_rdma_core();
    let missing: Vec<_> = real.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&real).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the installed libibverbs differs from exports.txt (another rdma-core?): \
         only there: {missing:?}\nonly ours: {extra:?}"
    );
}
