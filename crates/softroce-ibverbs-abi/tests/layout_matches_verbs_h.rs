//! Every size, alignment, offset and constant of the Rust mirrors equals what gcc computes
//! from the installed `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>` (libibverbs-dev and
//! librdmacm-dev; `scripts/test-all.sh` installs them).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use softroce_ibverbs_abi::{CONSTANTS, FIELD_OFFSETS, STRUCT_SIZES, kern, rdmacm};

const VERBS_H: &str = "infiniband/verbs.h";
const RDMA_CMA_H: &str = "rdma/rdma_cma.h";

/// The headers and gcc come from Debian's libibverbs-dev, librdmacm-dev and gcc, which
/// `scripts/test-all.sh` installs; tests never install packages themselves.
fn ensure_header(header: &str) {
    assert!(
        std::path::Path::new("/usr/include").join(header).exists(),
        "/usr/include/{header} is missing: run scripts/test-all.sh as root (it installs \
         libibverbs-dev, librdmacm-dev and gcc)"
    );
}

/// Compile `body` (statements of `main` after `#include <header>`) with gcc, run it and
/// return its output.
fn run_c(header: &str, name: &str, body: &str) -> String {
    ensure_header(header);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("abi-check");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    let program = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <stdalign.h>\n\
         #include <{header}>\n\
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

/// Compares the layout tables with gcc's view of `header`; returns the differences.
fn layout_mismatches(
    header: &str,
    structs: &[(&str, usize, usize)],
    fields: &[(&str, &str, usize, usize)],
) -> Vec<String> {
    let mut body = String::new();
    for (name, _, _) in structs {
        writeln!(
            body,
            "  printf(\"{name} %zu %zu\\n\", sizeof(struct {name}), alignof(struct {name}));"
        )
        .unwrap();
    }
    for (name, field, _, _) in fields {
        writeln!(
            body,
            "  printf(\"{name}.{field} %zu %zu\\n\", offsetof(struct {name}, {field}), FSIZE({name}, {field}));"
        )
        .unwrap();
    }
    let c = run_c(
        header,
        &format!("layout-{}", header.replace('/', "-")),
        &body,
    );
    let rust = structs
        .iter()
        .map(|(name, size, align)| format!("{name} {size} {align}"))
        .chain(
            fields
                .iter()
                .map(|(name, field, offset, size)| format!("{name}.{field} {offset} {size}")),
        );
    mismatches(&c, rust)
}

/// Compares the constants with gcc's view of `header`; returns the differences.
fn constant_mismatches(header: &str, constants: &[(&str, i64)]) -> Vec<String> {
    let mut body = String::new();
    for (name, _) in constants {
        writeln!(body, "  printf(\"{name} %lld\\n\", (long long){name});").unwrap();
    }
    let c = run_c(
        header,
        &format!("constants-{}", header.replace('/', "-")),
        &body,
    );
    let rust = constants
        .iter()
        .map(|(name, value)| format!("{name} {value}"));
    mismatches(&c, rust)
}

#[test]
fn rust_mirror_layout_equals_the_installed_header() {
    let wrong = layout_mismatches(VERBS_H, STRUCT_SIZES, FIELD_OFFSETS);
    assert!(
        wrong.is_empty(),
        "layout differs from <{VERBS_H}>:\n{}",
        wrong.join("\n")
    );
    assert!(
        STRUCT_SIZES.len() >= 30 && FIELD_OFFSETS.len() >= 400,
        "the comparison covers every mirrored struct"
    );
}

#[test]
fn constants_equal_the_installed_header() {
    let wrong = constant_mismatches(VERBS_H, CONSTANTS);
    assert!(
        wrong.is_empty(),
        "constants differ from <{VERBS_H}>:\n{}",
        wrong.join("\n")
    );
    assert!(
        CONSTANTS.len() >= 200,
        "the comparison covers every constant"
    );
}

#[test]
fn rdmacm_mirror_layout_and_constants_equal_the_installed_header() {
    let mut wrong = layout_mismatches(RDMA_CMA_H, rdmacm::STRUCT_SIZES, rdmacm::FIELD_OFFSETS);
    wrong.extend(constant_mismatches(RDMA_CMA_H, rdmacm::CONSTANTS));
    assert!(
        wrong.is_empty(),
        "librdmacm mirrors differ from <{RDMA_CMA_H}>:\n{}",
        wrong.join("\n")
    );
    assert!(
        rdmacm::STRUCT_SIZES.len() >= 12 && rdmacm::CONSTANTS.len() >= 30,
        "the comparison covers every librdmacm mirror"
    );
}

#[test]
fn kernel_abi_mirrors_equal_the_installed_headers() {
    let mut wrong = layout_mismatches(
        "rdma/ib_user_verbs.h",
        kern::STRUCT_SIZES,
        kern::FIELD_OFFSETS,
    );
    wrong.extend(layout_mismatches(
        "rdma/ib_user_sa.h",
        kern::SA_STRUCT_SIZES,
        kern::SA_FIELD_OFFSETS,
    ));
    assert!(
        wrong.is_empty(),
        "kernel ABI mirrors differ from the headers:\n{}",
        wrong.join("\n")
    );
    assert_eq!(kern::STRUCT_SIZES.len() + kern::SA_STRUCT_SIZES.len(), 4);
}
