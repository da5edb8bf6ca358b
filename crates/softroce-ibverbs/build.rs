//! Makes the GNU version script (defines the IBVERBS_1.0 … IBVERBS_1.14 and
//! IBVERBS_PRIVATE_34 nodes) and the `.symver name, name@@@NODE` directives that bind each
//! export to its node, from `exports.txt`.
//!
//! Why both: rustc passes its own anonymous version script first, so the nodes of ours are
//! created but the symbols stay unversioned; `.symver …@@@NODE` renames each definition to
//! the default versioned symbol.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let list = manifest.join("exports.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    let text = std::fs::read_to_string(&list).expect("reading exports.txt");
    let mut nodes: Vec<(String, Vec<String>)> = Vec::new();
    let mut symver = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (node, sym) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("exports.txt: '{line}' is not 'NODE symbol'"));
        match nodes.iter_mut().find(|(n, _)| n == node) {
            Some((_, syms)) => syms.push(sym.to_string()),
            None => nodes.push((node.to_string(), vec![sym.to_string()])),
        }
        writeln!(symver, ".symver {sym}, {sym}@@@{node}").expect("writing to a String");
    }
    // Public nodes in version order, the private one last (as rdma-core's map does).
    nodes.sort_by_key(|(n, _)| {
        let minor = n
            .strip_prefix("IBVERBS_1.")
            .and_then(|m| m.parse::<u32>().ok())
            .unwrap_or(u32::MAX);
        (minor, n.clone())
    });
    let mut map = String::new();
    for (i, (node, syms)) in nodes.iter().enumerate() {
        writeln!(map, "{node} {{").expect("writing to a String");
        writeln!(map, "  global:").expect("writing to a String");
        for s in syms {
            writeln!(map, "    {s};").expect("writing to a String");
        }
        if i == 0 {
            writeln!(map, "  local: *;").expect("writing to a String");
        }
        writeln!(map, "}};").expect("writing to a String");
    }
    let map_path = out.join("libibverbs.map");
    std::fs::write(&map_path, map).expect("writing the version script");
    std::fs::write(out.join("symver.s"), symver).expect("writing the .symver directives");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map_path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
