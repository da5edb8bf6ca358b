//! Build-script helper for softroce's drop-in C libraries (`libibverbs.so.1`,
//! `librdmacm.so.1`): from an export table (`NODE symbol` a line, `#` comments) it makes the
//! GNU version script and the `.symver name, name@@@NODE` directives that bind each export to
//! its version node, and tells cargo to link the cdylib with them and with its SONAME.
//!
//! Why both: rustc passes its own anonymous version script first, so the nodes of ours are
//! created but the symbols stay unversioned; `.symver …@@@NODE` renames each definition to
//! the default versioned symbol. The library includes the directives with
//! `global_asm!(include_str!(concat!(env!("OUT_DIR"), "/symver.s")))`.
//!
//! Codegen units: a `.symver` directive binds only a symbol defined in the same object
//! file, and a crate built in several codegen units (any build without our workspace
//! profile, such as `cargo install` from crates.io) spreads its exports over several
//! objects. So every module that defines exports includes the whole directive file:
//! rustc keeps a module's non-generic items, `global_asm!` included, in one codegen unit,
//! and the assembler drops directives for symbols an object neither defines nor uses. The
//! build stops if a source file with `no_mangle` or `export_name` lacks the include
//! (`/symver.s"` or a `symver_directives!()` macro of the crate's own).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Reads the export table `exports` (relative to the crate), writes `<stem>.map` and
/// `symver.s` into `OUT_DIR`, and links the cdylib with the map and `soname`.
///
/// Nodes are ordered as rdma-core's maps order them: public `PREFIX_1.N` nodes by `N`, then
/// the rest (private nodes) by name.
///
/// # Panics
///
/// When run outside a build script or when the table is unreadable or malformed: a build
/// script should stop there, saying why.
pub fn link_with_version_nodes(exports: &str, soname: &str) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let list = manifest.join(exports);
    println!("cargo:rerun-if-changed={}", list.display());
    let text = std::fs::read_to_string(&list)
        .unwrap_or_else(|e| panic!("reading {}: {e}", list.display()));
    let (map, symver) = version_script(&text).unwrap_or_else(|e| panic!("{exports}: {e}"));
    let src = manifest.join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    let missing =
        files_without_directives(&src).unwrap_or_else(|e| panic!("reading {}: {e}", src.display()));
    assert!(
        missing.is_empty(),
        "these files define exports but do not include the .symver directives, so their \
         exports would stay unversioned when built in several codegen units: {missing:?}"
    );
    let stem = soname.split('.').next().unwrap_or(soname);
    let map_path = out.join(format!("{stem}.map"));
    write(&map_path, &map);
    write(&out.join("symver.s"), &symver);
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
}

/// The `.rs` files under `dir` that define exports (`no_mangle`, `export_name`) without
/// including the directives.
fn files_without_directives(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    // Bounded by the source tree.
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)?;
                if exports_without_directives(&text) {
                    missing.push(path);
                }
            }
        }
    }
    missing.sort();
    Ok(missing)
}

/// Whether a source file defines exports but does not include the directives.
fn exports_without_directives(text: &str) -> bool {
    let exports = text.contains("no_mangle") || text.contains("export_name");
    let includes = text.contains("/symver.s\"") || text.contains("symver_directives!();");
    exports && !includes
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The version script and the `.symver` directives of an export table.
///
/// # Errors
///
/// A line that is not `NODE symbol`.
pub fn version_script(table: &str) -> Result<(String, String), String> {
    let mut nodes: Vec<(String, Vec<String>)> = Vec::new();
    let mut symver = String::new();
    for line in table.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((node, sym)) = line.split_once(' ') else {
            return Err(format!("'{line}' is not 'NODE symbol'"));
        };
        match nodes.iter_mut().find(|(n, _)| n == node) {
            Some((_, syms)) => syms.push(sym.to_string()),
            None => nodes.push((node.to_string(), vec![sym.to_string()])),
        }
        writeln!(symver, ".symver {sym}, {sym}@@@{node}").expect("writing to a String");
    }
    nodes.sort_by_key(|(n, _)| (public_minor(n).unwrap_or(u32::MAX), n.clone()));
    let mut map = String::new();
    for (i, (node, syms)) in nodes.iter().enumerate() {
        writeln!(map, "{node} {{\n  global:").expect("writing to a String");
        for s in syms {
            writeln!(map, "    {s};").expect("writing to a String");
        }
        if i == 0 {
            writeln!(map, "  local: *;").expect("writing to a String");
        }
        writeln!(map, "}};").expect("writing to a String");
    }
    Ok((map, symver))
}

/// `N` of a public node `PREFIX_1.N`.
fn public_minor(node: &str) -> Option<u32> {
    node.rsplit_once("_1.")?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_nodes_come_in_version_order_and_private_ones_last() {
        let table =
            "# comment\nX_PRIVATE_1 p\nRDMACM_1.10 d\nRDMACM_1.2 c\nRDMACM_1.0 a\nRDMACM_1.0 b\n";
        let (map, symver) = version_script(table).unwrap();
        let order: Vec<&str> = map
            .lines()
            .filter(|l| l.ends_with('{'))
            .map(|l| l.trim_end_matches(" {"))
            .collect();
        assert_eq!(
            order,
            ["RDMACM_1.0", "RDMACM_1.2", "RDMACM_1.10", "X_PRIVATE_1"]
        );
        assert!(map.starts_with("RDMACM_1.0 {\n  global:\n    a;\n    b;\n  local: *;\n};"));
        assert!(symver.contains(".symver p, p@@@X_PRIVATE_1\n"));
    }

    #[test]
    fn a_module_defining_exports_must_include_the_directives() {
        let export = "#[unsafe(no_mangle)]\nextern \"C\" fn f() {}\n";
        assert!(exports_without_directives(export));
        assert!(!exports_without_directives(&format!(
            "symver_directives!();\n{export}"
        )));
        assert!(!exports_without_directives(&format!(
            "global_asm!(include_str!(concat!(env!(\"OUT_DIR\"), \"/symver.s\")));\n{export}"
        )));
        assert!(!exports_without_directives("fn not_exported() {}\n"));
    }

    #[test]
    fn a_malformed_line_is_named() {
        assert_eq!(
            version_script("RDMACM_1.0\n").unwrap_err(),
            "'RDMACM_1.0' is not 'NODE symbol'"
        );
    }
}
