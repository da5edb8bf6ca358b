//! Embeds the drop-ins `libibverbs.so` and `librdmacm.so` in the `softroce` binary, so that
//! `cargo install` (which installs binaries only) still gives a `softroce exec` that works.
//!
//! `softroce-ibverbs` is a dependency whose library is a cdylib as well as an rlib: cargo
//! links `<target>/<profile>/deps/libibverbs.so` before it compiles this crate's binary,
//! which includes that file (`include_bytes!`, tracked for rebuilds). Builds that link
//! nothing (`cargo check`, `clippy`, `doc`) produce no such file: an empty stand-in is
//! created there, and a binary holding it says that it has no embedded library.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        println!("cargo:warning=OUT_DIR is not set: cargo runs build scripts with it");
        std::process::exit(1);
    };
    // OUT_DIR is <target>/<profile>/build/softroce-cli-<hash>/out.
    let Some(profile_dir) = out.ancestors().nth(3) else {
        println!(
            "cargo:warning=OUT_DIR {} is not cargo's layout",
            out.display()
        );
        std::process::exit(1);
    };
    for (lib, var) in [
        ("libibverbs.so", "SOFTROCE_DROPIN_SO"),
        ("librdmacm.so", "SOFTROCE_RDMACM_SO"),
    ] {
        let so = profile_dir.join("deps").join(lib);
        if !so.exists() {
            // Only if missing: the linker replaces it when it links the real library.
            let _ = std::fs::create_dir_all(profile_dir.join("deps"));
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&so);
        }
        println!("cargo:rustc-env={var}={}", so.display());
    }
}
