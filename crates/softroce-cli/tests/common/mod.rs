//! Two `softroce` processes, a server and a client, run to their end.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `softroce` binary cargo built for these tests.
pub(crate) fn softroce() -> PathBuf {
    assert_cmd::cargo::cargo_bin("softroce")
}

/// Start `server`, run `client` to its end, wait (at most 60 s) for the server; both must
/// exit 0, or the test fails with both outputs. Returns the client's stdout.
pub(crate) fn server_and_client(server: &mut Command, client: &mut Command) -> String {
    let mut srv = server
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the server");
    let out = client.output().expect("running the client");
    let deadline = Instant::now() + Duration::from_secs(60);
    while srv.try_wait().expect("server status").is_none() {
        if Instant::now() > deadline {
            let _ = srv.kill();
            panic!("the server did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let srv = srv.wait_with_output().expect("server output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && srv.status.success(),
        "client ({}):\n{stdout}\n{}\nserver ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        srv.status,
        String::from_utf8_lossy(&srv.stdout),
        String::from_utf8_lossy(&srv.stderr)
    );
    stdout
}
