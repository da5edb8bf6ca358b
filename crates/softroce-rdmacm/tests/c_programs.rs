//! C programs built against the system's `<rdma/rdma_cma.h>` and linked with the system's
//! librdmacm and libibverbs, as applications are, run on softroce's drop-ins of both
//! (`LD_LIBRARY_PATH`), each checking the rules of the librdmacm man pages it names.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `target/<profile>/lib<name>.so`, as cargo built it for this test run.
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    let profile = deps.parent().expect("profile dir");
    [deps.join(name), profile.join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not built in {}", profile.display()))
}

/// A directory holding `libibverbs.so.1` and `librdmacm.so.1` → the built drop-ins.
fn library_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        links(
            "dropin-rdmacm",
            &[
                ("libibverbs.so.1", "libibverbs.so"),
                ("librdmacm.so.1", "librdmacm.so"),
            ],
        )
    })
}

/// A directory holding only `librdmacm.so.1` → ours: the system's libibverbs is loaded.
fn rdmacm_only_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| links("rdmacm-only", &[("librdmacm.so.1", "librdmacm.so")]))
}

/// A fresh directory of symlinks `(link name, built library)`.
fn links(name: &str, libs: &[(&str, &str)]) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the library dir");
    for &(link, lib) in libs {
        let link = dir.join(link);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(built(lib), &link).expect("linking a drop-in");
    }
    dir
}

/// Compiles `tests/c/NAME.c` with the shared helpers of the libibverbs drop-in's C tests.
fn compile(name: &str) -> PathBuf {
    for header in [
        "/usr/include/rdma/rdma_cma.h",
        "/usr/include/infiniband/verbs.h",
    ] {
        assert!(
            Path::new(header).exists(),
            "{header} is missing: run scripts/test-all.sh as root (it installs librdmacm-dev \
             and libibverbs-dev)"
        );
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-I"])
        .arg(manifest.join("../softroce-ibverbs/tests/c"))
        .arg("-o")
        .arg(&exe)
        .arg(manifest.join(format!("tests/c/{name}.c")))
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("running gcc (scripts/test-all.sh installs it)");
    assert!(
        out.status.success(),
        "gcc failed on {name}.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs a compiled program on device `softroce0` at `address`, within 60 s; returns its
/// stderr.
fn run(name: &str, address: &str) -> String {
    run_with(name, &[address], library_dir())
}

/// Runs a compiled program with `addresses` as its arguments and one device per address
/// (`softroce0`, `softroce1`, …), within 60 s; returns its stderr.
fn run_with(name: &str, addresses: &[&str], libraries: &Path) -> String {
    run_after(name, addresses, libraries, None)
}

/// [`run_with`], the program started by `sh -c SETUP` in a mount namespace of its own when
/// `setup` is given (files the program reads can be put in place there, the host's stay).
fn run_after(name: &str, addresses: &[&str], libraries: &Path, setup: Option<&str>) -> String {
    let exe = compile(name);
    let devices: Vec<String> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| format!("softroce{i}={a}"))
        .collect();
    let mut command = match setup {
        None => Command::new(&exe),
        Some(setup) => {
            let mut c = Command::new("unshare");
            c.args([
                "--mount",
                "sh",
                "-c",
                &format!("{setup} && exec \"$0\" \"$@\""),
            ])
            .arg(&exe);
            c
        }
    };
    let mut child = command
        .args(addresses)
        .env("LD_LIBRARY_PATH", libraries)
        .env("SOFTROCE_DEVICES", devices.join(","))
        .env_remove("SOFTROCE_CONFIG")
        .env_remove("SOFTROCE_FAULTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the program");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collecting the output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("0 failures"),
        "{name} ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stderr.into_owned()
}

/// Event channels, ids, binding, ports, address and route resolution, synchronous ids,
/// rdma_create_qp's defaults, rdma_getaddrinfo, rdma_create_ep, rdma_migrate_id, misuse.
/// A second device is configured on an address this host does not have (TEST-NET-1).
#[test]
fn rdma_cm_addressing_follows_the_man_pages() {
    run_with(
        "rdmacm_addressing",
        &["127.77.31.1", "192.0.2.9"],
        library_dir(),
    );
}

/// With another libibverbs loaded, calls fail with ENOSYS and one line says why.
#[test]
fn without_the_dropin_libibverbs_calls_fail_cleanly_saying_why() {
    let stderr = run_with("rdmacm_without_dropin", &["127.77.31.2"], rdmacm_only_dir());
    assert!(
        stderr.contains("not softroce's drop-in") && stderr.contains("softroce exec"),
        "the reason is printed: {stderr}"
    );
}

/// A thousand connections made, used and torn down in one process (two devices): every
/// cycle ends cleanly and none leaves a file descriptor or memory behind.
#[test]
fn a_thousand_connect_disconnect_cycles_leak_nothing() {
    run_with(
        "rdmacm_cycles",
        &["127.77.31.3", "127.77.31.4"],
        library_dir(),
    );
}

/// A connection's life by the man pages: the event data both sides see (private data,
/// crossed responder resources and initiator depth, retry counts, srq, qp_num), the QP
/// attributes the CMs set, one-sided data, disconnect flushing posted work, private-data
/// limits, rejects with private data, SRQs, and rdma_establish for an id without a QP.
#[test]
fn a_connection_follows_the_man_pages() {
    run_with(
        "rdmacm_connection",
        &["127.77.31.5", "127.77.31.6"],
        library_dir(),
    );
}

/// Every rdma_cm call misused (NULLs, destroyed ids, calls out of order, an event acked
/// twice) is refused with EINVAL, never a crash, and the library works on afterwards.
#[test]
fn misused_calls_are_refused_and_nothing_breaks() {
    run("rdmacm_misuse", "127.77.31.7");
}

/// UD multicast through rdma_cm as the kernel runs it on RoCEv2: misuse refused as the
/// kernel and librdmacm refuse it, the MULTICAST_JOIN event field by field, data through
/// the event's address vector, attach at retrieval (not for send-only joins or ids without
/// a QP), leave stops delivery and cancels an unretrieved join, a unicast group is a
/// MULTICAST_ERROR, destroying an id leaves its groups.
#[test]
fn multicast_joins_follow_the_man_pages() {
    run_with(
        "rdmacm_multicast",
        &["127.79.3.1", "127.79.3.2"],
        library_dir(),
    );
}

/// The man pages' rules the other programs leave alone (two devices): rdma_getaddrinfo's
/// variants; all-zero addresses and ports of unbound and unconnected ids, IPv4 and IPv6
/// wildcard binds; rdma_set_option's REUSEADDR, AFONLY, ACK_TIMEOUT and TOS, and
/// RDMA_OPTION_IB_PATH in place of rdma_resolve_route (the primary GMP record, what it
/// refuses, a connection at the record's MTU, traffic class, hop limit and SL); what
/// rdma_create_qp refuses and returns, rdma_create_ep with a PD; rdma_get_cm_event,
/// rdma_destroy_id and rdma_migrate_id blocking until events are acked; synchronous ids
/// through rdma_create_ep, rdma_get_request and rdma_migrate_id to NULL; depth limits, 3-bit
/// retry counts, the server disconnecting first and TIMEWAIT_EXIT; REJECTED status 8 where
/// nobody listens, listens scoped to an address or across devices; rdma_notify forcing
/// ESTABLISHED; destroying a connected id; RDMA_PS_UDP private-data limits and rejects;
/// vector posts, inline sends without an MR, rdma_reg_read/rdma_reg_write remote access.
#[test]
fn the_man_pages_other_rules_hold() {
    run_with(
        "rdmacm_manpages",
        &["127.77.32.1", "127.77.32.2"],
        library_dir(),
    );
}

/// What outlives what (two devices): the ids' PD goes with the last id on its device (a
/// region left on it is foreign to the next id's QP: LOC_PROT_ERR) and rdma_get_devices'
/// list keeps it meanwhile; ids destroyed while another thread waits in rdma_get_cm_event on
/// the same channel; a listener destroyed with an unretrieved request rejects it (28);
/// rdma_init_qp_attr's state check and zeroed attributes, rdma_set_option without a value.
#[test]
fn lifetimes_and_races_hold() {
    run_with(
        "rdmacm_lifetimes",
        &["127.77.34.1", "127.77.34.2"],
        library_dir(),
    );
}

/// Where the man pages leave a rule to the kernel and librdmacm v44 (two devices): rdma_reject
/// at every stage a request is in flight, both sides told REJECTED 28; resolving a source of
/// another family (EINVAL, the id stays bound), an unknown family, IPoIB on RoCE (ADDR_ERROR
/// -EINVAL), a route with no time; a multicast address vector without the TOS, one of two
/// joins of a group left; rdma_create_ep honouring ai_route and ai_connect; rdma_destroy_srq
/// of an XRC target taking its CQs.
#[test]
fn the_kernels_rules_hold() {
    run_with(
        "rdmacm_kernel_checks",
        &["127.77.36.1", "127.77.36.2"],
        library_dir(),
    );
}

/// A process exiting with a connected id it never destroyed: its peer hears DISCONNECTED
/// at once (the kernel destroys the ids of an exiting process, which sends a DREQ).
#[test]
fn a_process_exiting_with_a_connection_says_goodbye() {
    run_with(
        "rdmacm_exit_farewell",
        &["127.77.38.1", "127.77.38.2"],
        library_dir(),
    );
}

/// A listener accepts in the background (a forked child on the second device connects and
/// dies without another call): the connection is ready before raccept, taken at once, and
/// reads end; the listener serves the next, live, client; a keepalive probe finds a killed
/// idle peer.
#[test]
fn raccept_survives_a_dead_requester() {
    run_with(
        "rsocket_dead_peer",
        &["127.77.37.1", "127.77.37.2"],
        library_dir(),
    );
}

/// Port sharing as the kernel's rdma_cm has it (two devices): REUSEADDR ids share an address
/// until one listens (rdma_listen then EADDRINUSE, or EADDRNOTAVAIL on a wildcard), the
/// option turned on after binding or resolving but off only before, AFONLY only before
/// resolving; a wildcard conflicts as EADDRNOTAVAIL, the same address as EADDRINUSE, another
/// address not at all, a resolved wildcard id by its routed source; IPv4 ids and AFONLY
/// [::] ids keep to their family (no conflict, each listener hears its own family), a [::]
/// id taking both conflicts with 0.0.0.0 and hears IPv4 requests.
#[test]
fn ports_are_shared_as_the_kernel_shares_them() {
    run_with(
        "rdmacm_port_sharing",
        &["127.77.32.5", "127.77.32.6"],
        library_dir(),
    );
}

/// rsocket(7): stream rsockets as the socket calls they are named after (a server thread on
/// one device, the client on the other): refused blocking and non-blocking connects with
/// SO_ERROR, addresses, MSG_PEEK/MSG_DONTWAIT/MSG_WAITALL, readv/writev, a megabyte through
/// the ring both ways, SHUT_WR half-close, EOF after the peer's close, rpoll/rselect with an
/// ordinary fd, options, rfcntl and the calls' errors.
#[test]
fn rsockets_behave_as_the_socket_calls_they_are_named_after() {
    run_with(
        "rsocket_semantics",
        &["127.77.33.1", "127.77.33.2"],
        library_dir(),
    );
}

/// rlisten in a process that may start no more threads (nobody, RLIMIT_NPROC at its thread
/// count): EAGAIN, and raccept says EAGAIN rather than wait for what nothing accepts; rlisten
/// again once threads may start, and a client's connection is accepted.
#[test]
fn rlisten_fails_cleanly_without_its_thread_and_can_be_retried() {
    run_with(
        "rsocket_listen_retry",
        &["127.77.45.1", "127.77.45.2"],
        library_dir(),
    );
}

/// rdma_listen(3) on a wildcard that fails part-way (softroce1 cannot start its receiving
/// thread in a process that may start none) listens nowhere: softroce0, where it had
/// begun, refuses a connect and the id hears nothing; listening again succeeds.
#[test]
fn a_wildcard_listen_that_fails_part_way_listens_nowhere() {
    run_with(
        "rdmacm_listen_without_threads",
        &["127.77.45.3", "127.77.45.4"],
        library_dir(),
    );
}

/// rdma_connect(3) to one of the process's own devices that nothing opened, where nobody
/// listens: REJECTED status 8 (ECONNREFUSED for a synchronous id), as from a kernel's
/// configured device, instead of a REQ lost on a port nobody had bound.
#[test]
fn a_device_nothing_opened_yet_refuses_a_connect_nobody_listens_for() {
    run_with(
        "rdmacm_unopened_device",
        &["127.77.46.1", "127.77.46.2", "127.77.46.3"],
        library_dir(),
    );
}

/// Datagram rsockets (rsocket(7), SOCK_DGRAM) behave as the UDP socket calls they are named
/// after: sources, message boundaries, truncation, MSG_PEEK/MSG_DONTWAIT, non-blocking
/// sockets, rpoll, connect with send/recv, sendmsg/recvmsg, an unbound sender, the errors.
#[test]
fn datagram_rsockets_behave_as_udp_sockets() {
    run_with(
        "rsocket_dgram_semantics",
        &["127.77.33.9", "127.77.33.10"],
        library_dir(),
    );
}

/// repoll_create, repoll_ctl and repoll_wait (rsocket(7)) behave as the epoll calls they
/// are named after, over rsockets and pipes together: errors, level-triggered readiness,
/// maxevents taking turns, EPOLLONESHOT, a listener's pending connection, the peer's close,
/// a descriptor added while another thread waits, closed descriptors leaving the set.
#[test]
fn repoll_watches_rsockets_as_epoll_watches_sockets() {
    run_with(
        "repoll_semantics",
        &["127.77.33.5", "127.77.33.6"],
        library_dir(),
    );
}

/// RDMACM_1.4's calls as their man pages have them: rdma_resolve_addrinfo reports
/// ADDRINFO_RESOLVED (failures fail the call, no event; one at a time: EBUSY),
/// rdma_query_addrinfo hands the result out once (ENOENT otherwise), rdma_write_cm_event
/// queues RDMA_CM_EVENT_USER with its status and value and refuses other events.
#[test]
fn newer_librdmacm_calls_follow_their_man_pages() {
    run_with("rdmacm_newer_calls", &["127.77.33.7"], library_dir());
}

/// ECE, rdma_notify and address errors as librdmacm and the kernel have them (two
/// devices): rdma_set_local_ece refuses a NULL ece, vendor_id 0, a comp_mask, and (with
/// rdma_get_remote_ece) ids with a QP; with external QPs the client's ECE reaches the
/// passive side in the request and the passive side's options come back in the response;
/// a client without ECE shows vendor 0; rdma_reject_ece is REJECTED status 35 (rdma_reject
/// 28); rdma_notify is EINVAL for ids never connected or disconnected, and on a connection
/// for events the CM does not take (QP_FATAL, LID_CHANGE, SQ_DRAINED; COMM_EST is
/// EISCONN, PATH_MIG taken); a destination no device reaches (198.51.100.7, never sent to)
/// is a synchronous failure or ADDR_ERROR -ENODEV, never ADDR_RESOLVED, and the id resolves
/// a device's address afterwards; a wildcard destination is this host; rdma_listen's
/// backlog (a request beyond it dropped and back with its retry, a UDP one refused);
/// destroying a request's new id before acking the request; a second listen EINVAL, the
/// events' flow control and retry count as sent, a REJECTED id's QP in ERR, a second
/// disconnect 0.
#[test]
fn ece_notify_and_address_errors_follow_librdmacm_and_the_kernel() {
    run_with(
        "rdmacm_ece_notify_addr",
        &["127.77.32.3", "127.77.32.4"],
        library_dir(),
    );
}

/// rsocket(7)'s /etc/rdma/rsocket files, in a mount namespace of the test's own: a number is
/// read (sqsize_default), a FIFO (as anything but a regular file) is not: the program's
/// first rsocket call does not wait for a writer that never comes, the default stands, and
/// stderr names the file.
#[test]
fn rsocket_config_files_are_read_only_when_regular() {
    let stderr = run_after(
        "rsocket_config_files",
        &["127.77.39.1"],
        library_dir(),
        Some(
            "mount -t tmpfs softroce-test /etc/rdma && mkdir /etc/rdma/rsocket && \
             mkfifo /etc/rdma/rsocket/mem_default && echo 100 > /etc/rdma/rsocket/sqsize_default",
        ),
    );
    assert!(
        stderr.contains("/etc/rdma/rsocket/mem_default is not a regular file"),
        "stderr: {stderr}"
    );
}
