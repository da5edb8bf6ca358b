//! Every size, alignment and offset of the Rust mirror equals what gcc computes from the
//! installed `<infiniband/verbs.h>` (libibverbs-dev; `scripts/test-all.sh` installs it).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use softroce_ibverbs_abi::{FIELD_OFFSETS, STRUCT_SIZES};

const HEADER: &str = "/usr/include/infiniband/verbs.h";

/// Install libibverbs-dev when missing (as root, like scripts/test-all.sh), else fail loudly.
fn ensure_header() {
    if std::path::Path::new(HEADER).exists() {
        return;
    }
    let status = Command::new("sh")
        .arg("-c")
        .arg(
            "export DEBIAN_FRONTEND=noninteractive; \
             apt-get -o DPkg::Lock::Timeout=600 install -y -qq libibverbs-dev gcc >/dev/null \
             || (apt-get -o DPkg::Lock::Timeout=600 update -qq && \
                 apt-get -o DPkg::Lock::Timeout=600 install -y -qq libibverbs-dev gcc >/dev/null)",
        )
        .status()
        .expect("running apt-get");
    assert!(
        status.success() && std::path::Path::new(HEADER).exists(),
        "{HEADER} is missing and installing libibverbs-dev failed: run scripts/test-all.sh as root"
    );
}

fn c_program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdalign.h>\n\
         #include <infiniband/verbs.h>\n\
         #define FSIZE(s, f) sizeof(((struct s *)0)->f)\n\
         int main(void) {\n",
    );
    for (name, _, _) in STRUCT_SIZES {
        writeln!(
            c,
            "  printf(\"{name} %zu %zu\\n\", sizeof(struct {name}), alignof(struct {name}));"
        )
        .unwrap();
    }
    for (name, field, _, _) in FIELD_OFFSETS {
        writeln!(
            c,
            "  printf(\"{name}.{field} %zu %zu\\n\", offsetof(struct {name}, {field}), FSIZE({name}, {field}));"
        )
        .unwrap();
    }
    c.push_str("  return 0;\n}\n");
    c
}

#[test]
fn rust_mirror_layout_equals_the_installed_header() {
    ensure_header();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("abi-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program()).unwrap();
    let out = Command::new("gcc")
        .arg("-std=c11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("running gcc (install build-essential)");
    assert!(
        out.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let mut mismatches = Vec::new();
    for (name, size, align) in STRUCT_SIZES {
        let want = format!("{name} {size} {align}");
        let got = lines.next().unwrap_or_default();
        if got != want {
            mismatches.push(format!("C: {got:40} Rust: {want}"));
        }
    }
    for (name, field, offset, size) in FIELD_OFFSETS {
        let want = format!("{name}.{field} {offset} {size}");
        let got = lines.next().unwrap_or_default();
        if got != want {
            mismatches.push(format!("C: {got:40} Rust: {want}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "layout differs from {HEADER}:\n{}",
        mismatches.join("\n")
    );
    assert!(
        STRUCT_SIZES.len() >= 30 && FIELD_OFFSETS.len() >= 400,
        "the comparison covers every mirrored struct"
    );
}
