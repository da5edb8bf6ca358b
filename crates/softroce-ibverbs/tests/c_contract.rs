//! A C program compiled against the installed `<infiniband/verbs.h>` and linked with the
//! system libibverbs (as applications are) runs on the drop-in library and finds its
//! contract kept: see `c/verbs_contract.c`.

mod common;

use std::process::Command;
use std::time::Duration;

#[test]
fn c_program_sees_the_documented_verbs_contract() {
    common::require_tools(&["gcc"]);
    assert!(
        std::path::Path::new("/usr/include/infiniband/verbs.h").exists(),
        "libibverbs-dev is missing: run scripts/test-all.sh as root"
    );
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/verbs_contract.c");
    let exe = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("verbs_contract");
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .arg("-libverbs")
        .output()
        .expect("running gcc");
    assert!(
        out.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = common::spawn(
        "verbs_contract",
        "softroce0=127.77.30.1",
        exe.to_str().expect("UTF-8 path"),
        &[],
    )
    .finish(Duration::from_secs(60));
    assert!(
        run.ok() && run.stdout.contains("0 failures"),
        "{}",
        run.report()
    );
}
