//! C programs compiled against the installed `<infiniband/verbs.h>` and linked with the
//! system libibverbs (as applications are) run on the drop-in library and find its contract
//! kept: see `c/*.c`.

mod common;

use std::time::Duration;

fn run_c_program(name: &str, device: &str) {
    let exe = common::compile_c(name);
    let run = common::spawn(name, device, exe.to_str().expect("UTF-8 path"), &[])
        .finish(Duration::from_secs(60));
    assert!(
        run.ok() && run.stdout.contains("0 failures"),
        "{}",
        run.report()
    );
}

#[test]
fn c_program_sees_the_documented_verbs_contract() {
    run_c_program("verbs_contract", "softroce0=127.77.30.1");
}

#[test]
fn registering_memory_that_is_not_there_fails_as_pinning_would() {
    run_c_program("hostile_registration", "softroce0=127.77.30.2");
}
