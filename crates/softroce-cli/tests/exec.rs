//! `softroce exec` runs unmodified libibverbs programs on the drop-in library.

mod dropin;

use assert_cmd::Command;
use dropin::dropin_library;

/// `softroce exec ARGS` on the drop-in, which must succeed within 60 s: its stdout.
fn exec_stdout(args: &[&str]) -> String {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .env("SOFTROCE_IBVERBS_LIB", dropin_library())
        .env_remove("SOFTROCE_DEVICES")
        .arg("exec")
        .args(args)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Tests do not install packages: `scripts/test-all.sh` does (ibverbs-utils has ibv_devices).
fn ibv_devices_installed() {
    let ok = std::process::Command::new("sh")
        .args(["-c", "command -v ibv_devices"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "ibv_devices is missing: run scripts/test-all.sh, which installs it"
    );
}

#[test]
fn exec_runs_ibv_devices_on_the_given_devices() {
    ibv_devices_installed();
    let stdout = exec_stdout(&[
        "--devices",
        "execdev0=127.77.40.1,execdev1=127.77.40.2",
        "--",
        "ibv_devices",
    ]);
    assert!(
        stdout.contains("execdev0") && stdout.contains("execdev1"),
        "{stdout}"
    );
}

#[test]
fn exec_without_the_library_says_how_to_build_it() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .env("SOFTROCE_IBVERBS_LIB", "/nonexistent/libibverbs.so")
        .args(["exec", "--", "true"])
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SOFTROCE_IBVERBS_LIB=/nonexistent/libibverbs.so is not a file"),
        "{stderr}"
    );
}

/// A device list the drop-in would refuse stops exec before the program runs (a program
/// that never asks for a device would otherwise run on none without a word), and says why.
#[test]
fn exec_refuses_a_bad_device_list_before_the_program_starts() {
    let marker = scratch("bad-devices").join("ran");
    for spec in [
        "bad name=127.77.40.3",
        "x=300.1.1.1",
        "a=127.77.40.4,a=127.77.40.5",
    ] {
        let out = Command::cargo_bin("softroce")
            .unwrap()
            .env("SOFTROCE_IBVERBS_LIB", dropin_library())
            .args(["exec", "--devices", spec, "--", "touch"])
            .arg(&marker)
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {stderr}");
        assert!(
            stderr.contains("softroce exec: --devices") && stderr.contains("SOFTROCE_DEVICES="),
            "{spec}: {stderr}"
        );
        assert!(!marker.exists(), "{spec}: the program ran");
    }
}
/// `ibv_rc_pingpong -r 100000000` asks for a CQ beyond the device's limit; the drop-in says
/// why only when SOFTROCE_LOG=verbs asks (rdma-core prints nothing either).
#[test]
fn failed_verbs_are_logged_only_with_softroce_log_verbs() {
    ibv_devices_installed();
    let run = |log: Option<&str>| {
        let mut cmd = Command::cargo_bin("softroce").unwrap();
        cmd.env("SOFTROCE_IBVERBS_LIB", dropin_library())
            .env_remove("SOFTROCE_LOG")
            .args(["exec", "--devices", "softroce0=127.77.42.1", "--"])
            .args(["ibv_rc_pingpong", "-g", "0", "-r", "100000000", "-p", "1"]);
        if let Some(v) = log {
            cmd.env("SOFTROCE_LOG", v);
        }
        let out = cmd
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        assert!(!out.status.success(), "the CQ cannot be created");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let quiet = run(None);
    assert!(
        quiet.contains("Couldn't create CQ") && !quiet.contains("softroce:"),
        "{quiet}"
    );
    let logged = run(Some("verbs"));
    assert!(
        logged.contains("softroce: ibv_create_cq: ") && logged.contains("outside 1..="),
        "{logged}"
    );
}

/// The program sees the device node and the sysfs files a kernel device has (in its own
/// mount namespace), with what the drop-in answers.
#[test]
fn exec_shows_the_program_dev_infiniband_and_sysfs() {
    let script = "test -c /dev/infiniband/uverbs0 && test -r /dev/infiniband/uverbs0 \
                  && test -w /dev/infiniband/uverbs0 && cd /sys/class/infiniband/sysdev0 \
                  && cat node_type ports/1/state ports/1/link_layer ports/1/gids/1 \
                  ports/1/gid_attrs/types/1 ports/1/gid_attrs/ndevs/1 device/numa_node \
                  /sys/class/infiniband_verbs/uverbs0/ibdev && ls device/net";
    let stdout = exec_stdout(&["--devices", "sysdev0=127.77.43.1", "--", "sh", "-c", script]);
    let want = "1: CA\n4: ACTIVE\nEthernet\n0000:0000:0000:0000:0000:ffff:7f4d:2b01\nRoCE v2\n\
                lo\n-1\nsysdev0\nlo\n";
    assert_eq!(stdout, want);
}

/// A fresh directory for one test: `<tmp>/softroce-exec-<name>-<pid>`.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("softroce-exec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// How many copies of the embedded drop-in were written to `home`'s cache.
fn extracted(home: &std::path::Path) -> usize {
    std::fs::read_dir(home.join(".cache/softroce")).map_or(0, |entries| {
        entries
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("dropin-"))
            })
            .count()
    })
}

/// Run `<bin>/softroce exec --devices … -- ibv_devices` with `home` as HOME: its stdout.
fn installed_exec_ibv_devices(softroce: &std::path::Path, home: &std::path::Path) -> String {
    let out = std::process::Command::new(softroce)
        .env("HOME", home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("SOFTROCE_IBVERBS_LIB")
        .args([
            "exec",
            "--devices",
            "installed0=127.77.41.1",
            "--",
            "ibv_devices",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn an_installed_softroce_alone_runs_programs_on_its_embedded_drop_in() {
    // What `cargo install` leaves: the binary, with no library beside it.
    ibv_devices_installed();
    let root = scratch("embedded");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    let softroce = root.join("bin/softroce");
    std::fs::copy(assert_cmd::cargo::cargo_bin("softroce"), &softroce).unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();

    let stdout = installed_exec_ibv_devices(&softroce, &home);
    assert!(stdout.contains("installed0"), "{stdout}");
    // The library was written once to the user's cache, private to them, and is reused.
    let cache = home.join(".cache/softroce");
    assert_eq!(extracted(&home), 1);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "cache dir mode {mode:o}");
    let stdout = installed_exec_ibv_devices(&softroce, &home);
    assert!(stdout.contains("installed0"), "{stdout}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_stale_library_beside_the_binary_gives_way_to_the_newer_build_in_deps() {
    // cargo's layout after `cargo build` then `cargo test`: the test rebuilt
    // `deps/libibverbs.so` (and the binary), `cargo build`'s copy beside the binary is older.
    ibv_devices_installed();
    let root = scratch("stale");
    std::fs::create_dir_all(root.join("profile/deps")).unwrap();
    std::fs::create_dir_all(root.join("home")).unwrap();
    let softroce = root.join("profile/softroce");
    std::fs::copy(assert_cmd::cargo::cargo_bin("softroce"), &softroce).unwrap();
    for lib in ["libibverbs.so", "librdmacm.so"] {
        std::fs::copy(
            dropin_library().with_file_name(lib),
            root.join("profile/deps").join(lib),
        )
        .unwrap();
        // Not even a library: loading it would fail.
        let stale = root.join("profile").join(lib);
        std::fs::write(&stale, b"an old build").unwrap();
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
    }

    let stdout = installed_exec_ibv_devices(&softroce, &root.join("home"));
    assert!(stdout.contains("installed0"), "{stdout}");
    // The build in deps was used: nothing was extracted.
    assert_eq!(extracted(&root.join("home")), 0);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_debian_style_install_finds_the_drop_in_in_lib_softroce() {
    // /usr/bin/softroce and /usr/lib/softroce/lib{ibverbs,rdmacm}.so.1, under a scratch root.
    ibv_devices_installed();
    let root = scratch("debian");
    for dir in ["usr/bin", "usr/lib/softroce", "home"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let softroce = root.join("usr/bin/softroce");
    std::fs::copy(assert_cmd::cargo::cargo_bin("softroce"), &softroce).unwrap();
    std::fs::copy(
        dropin_library(),
        root.join("usr/lib/softroce/libibverbs.so.1"),
    )
    .unwrap();
    // The drop-in librdmacm is built beside it.
    std::fs::copy(
        dropin_library().with_file_name("librdmacm.so"),
        root.join("usr/lib/softroce/librdmacm.so.1"),
    )
    .unwrap();

    let stdout = installed_exec_ibv_devices(&softroce, &root.join("home"));
    assert!(stdout.contains("installed0"), "{stdout}");
    // The packaged library was used: nothing was extracted.
    assert_eq!(extracted(&root.join("home")), 0);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_cache_directory_someone_else_can_write_to_is_refused() {
    let root = scratch("unsafe-cache");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    let softroce = root.join("bin/softroce");
    std::fs::copy(assert_cmd::cargo::cargo_bin("softroce"), &softroce).unwrap();
    let cache = root.join("cache/softroce");
    std::fs::create_dir_all(&cache).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();

    let out = std::process::Command::new(&softroce)
        .env("XDG_CACHE_HOME", root.join("cache"))
        .env_remove("SOFTROCE_IBVERBS_LIB")
        .args(["exec", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("only it can write to"), "{stderr}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// The directory of library links that comes first on the program's LD_LIBRARY_PATH is
/// the user's own (in their cache, mode 0700), never one in the shared temporary directory:
/// there another user could create it first, with a library of theirs in it, and have
/// their code run as whoever runs `softroce exec`.
#[test]
fn the_programs_libraries_come_from_a_directory_only_its_user_can_write_to() {
    let root = scratch("links");
    let (cache, tmp) = (root.join("cache"), root.join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    use std::os::unix::fs::PermissionsExt;
    // A shared temporary directory, as /tmp: anyone may create entries in it.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .env("SOFTROCE_IBVERBS_LIB", dropin_library())
        .env("XDG_CACHE_HOME", &cache)
        .env("TMPDIR", &tmp)
        .args([
            "exec",
            "--no-namespace",
            "--",
            "sh",
            "-c",
            "echo \"$LD_LIBRARY_PATH\"",
        ])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).into_owned();
    let first = std::path::PathBuf::from(path.trim().split(':').next().unwrap_or_default());
    assert!(first.starts_with(cache.join("softroce")), "{first:?}");
    let mode = std::fs::metadata(&first).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{first:?} mode {mode:o}");
    assert!(first.join("libibverbs.so.1").exists(), "{first:?}");
    let in_tmp: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(
        in_tmp.is_empty(),
        "left in the temporary directory: {in_tmp:?}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// A SOFTROCE_IBVERBS_LIB naming another libibverbs (the system's) is refused saying so,
/// not blamed on --devices after its device list came back empty.
#[test]
fn a_library_that_is_not_the_drop_in_is_refused_as_such() {
    let out = Command::cargo_bin("softroce")
        .unwrap()
        .env(
            "SOFTROCE_IBVERBS_LIB",
            "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        )
        .args(["exec", "--devices", "softroce0=127.77.40.9", "--", "true"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not softroce's drop-in libibverbs"),
        "{stderr}"
    );
    assert!(!stderr.contains("--devices"), "{stderr}");
}

/// `softroce devinfo` describes the device as it runs: what rdma-core's `ibv_devinfo -v`
/// reads from the drop-in about the same address (capability flags — XRC, memory windows —
/// ODP and tag matching capabilities, the link's MTU) is what devinfo prints.
#[test]
fn devinfo_agrees_with_ibv_devinfo_on_the_running_device() {
    ibv_devices_installed();
    let ours = Command::cargo_bin("softroce")
        .unwrap()
        .args(["devinfo", "--bind", "127.0.0.22"])
        .output()
        .unwrap();
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    let theirs = exec_stdout(&[
        "--devices",
        "softroce0=127.0.0.22",
        "--",
        "ibv_devinfo",
        "-v",
    ]);
    let field = |text: &str, name: &str| -> String {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name}:")))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    for name in [
        "device_cap_flags",
        "active_mtu",
        "max_mtu",
        "max_qp_rd_atom",
        "max_num_tags",
    ] {
        assert_eq!(
            field(&ours, name).to_lowercase(),
            field(&theirs, name).to_lowercase(),
            "{name}\nsoftroce devinfo:\n{ours}\nibv_devinfo -v:\n{theirs}"
        );
    }
    for flag in [
        "XRC",
        "MEM_WINDOW_TYPE_2B",
        "ODP_SUPPORT_IMPLICIT",
        "SUPPORT_SRQ",
    ] {
        assert!(
            ours.contains(flag) && theirs.contains(flag),
            "{flag}\nsoftroce devinfo:\n{ours}\nibv_devinfo -v:\n{theirs}"
        );
    }
}
