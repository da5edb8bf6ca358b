//! Every size, alignment, offset and constant of the Rust mirror equals what gcc computes
//! from the installed `<infiniband/verbs.h>` (libibverbs-dev; `scripts/test-all.sh` installs
//! it).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use softroce_ibverbs_abi::{CONSTANTS, FIELD_OFFSETS, STRUCT_SIZES};

const HEADER: &str = "/usr/include/infiniband/verbs.h";

/// The header and gcc come from Debian's libibverbs-dev and gcc, which
/// `scripts/test-all.sh` installs; tests never install packages themselves.
fn ensure_header() {
    assert!(
        std::path::Path::new(HEADER).exists(),
        "{HEADER} is missing: run scripts/test-all.sh as root (it installs libibverbs-dev and gcc)"
    );
}

/// Compile `body` (statements of `main` after the header's includes) with gcc, run it and
/// return its output.
fn run_c(name: &str, body: &str) -> String {
    ensure_header();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("abi-check");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    let program = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdalign.h>\n\
         #include <infiniband/verbs.h>\n\
         #define FSIZE(s, f) sizeof(((struct s *)0)->f)\n\
         int main(void) {{\n{body}  return 0;\n}}\n"
    );
    std::fs::write(&src, program).unwrap();
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
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of C output that differ from the Rust side's.
fn mismatches(c: &str, rust: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut lines = c.lines();
    rust.into_iter()
        .filter_map(|want| {
            let got = lines.next().unwrap_or_default();
            (got != want).then(|| format!("C: {got:40} Rust: {want}"))
        })
        .collect()
}

#[test]
fn rust_mirror_layout_equals_the_installed_header() {
    let mut body = String::new();
    for (name, _, _) in STRUCT_SIZES {
        writeln!(
            body,
            "  printf(\"{name} %zu %zu\\n\", sizeof(struct {name}), alignof(struct {name}));"
        )
        .unwrap();
    }
    for (name, field, _, _) in FIELD_OFFSETS {
        writeln!(
            body,
            "  printf(\"{name}.{field} %zu %zu\\n\", offsetof(struct {name}, {field}), FSIZE({name}, {field}));"
        )
        .unwrap();
    }
    let c = run_c("layout", &body);
    let rust = STRUCT_SIZES
        .iter()
        .map(|(name, size, align)| format!("{name} {size} {align}"))
        .chain(
            FIELD_OFFSETS
                .iter()
                .map(|(name, field, offset, size)| format!("{name}.{field} {offset} {size}")),
        );
    let wrong = mismatches(&c, rust);
    assert!(
        wrong.is_empty(),
        "layout differs from {HEADER}:\n{}",
        wrong.join("\n")
    );
    assert!(
        STRUCT_SIZES.len() >= 30 && FIELD_OFFSETS.len() >= 400,
        "the comparison covers every mirrored struct"
    );
}

#[test]
fn constants_equal_the_installed_header() {
    let mut body = String::new();
    for (name, _) in CONSTANTS {
        writeln!(body, "  printf(\"{name} %lld\\n\", (long long){name});").unwrap();
    }
    let c = run_c("constants", &body);
    let rust = CONSTANTS
        .iter()
        .map(|(name, value)| format!("{name} {value}"));
    let wrong = mismatches(&c, rust);
    assert!(
        wrong.is_empty(),
        "constants differ from {HEADER}:\n{}",
        wrong.join("\n")
    );
    assert!(
        CONSTANTS.len() >= 200,
        "the comparison covers every constant"
    );
}
