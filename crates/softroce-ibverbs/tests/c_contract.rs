//! C programs compiled against the installed `<infiniband/verbs.h>` and linked with the
//! system libibverbs (as applications are) run on the drop-in library and find its contract
//! kept: see `c/*.c`.

mod common;

use std::time::Duration;

fn run_c_program(name: &str, device: &str) {
    run_c_program_with(name, device, &[]);
}

/// [`run_c_program`] with more environment variables; the finished run, for what its
/// output must also say.
fn run_c_program_with(name: &str, device: &str, env: &[(&str, &str)]) -> common::Finished {
    let exe = common::compile_c(name);
    let run = common::spawn_env(name, device, exe.to_str().expect("UTF-8 path"), &[], env)
        .finish(Duration::from_secs(60));
    assert!(
        run.ok() && run.stdout.contains("0 failures"),
        "{}",
        run.report()
    );
    run
}

#[test]
fn c_program_sees_the_documented_verbs_contract() {
    run_c_program("verbs_contract", "softroce0=127.77.30.1");
}

#[test]
fn registering_memory_that_is_not_there_fails_as_pinning_would() {
    run_c_program("hostile_registration", "softroce0=127.77.30.2");
}

/// ibv_post_send(3), ibv_post_recv(3), ibv_post_srq_recv(3): the WRs before `bad_wr` are
/// posted and complete.
#[test]
fn man_pages_post_lists_run_the_wrs_before_bad_wr() {
    run_c_program("man_post_lists", "softroce0=127.77.30.3");
}

/// Every verb's return convention, argument checks and EBUSY rules, per its man page.
#[test]
fn man_pages_return_conventions_and_argument_rules() {
    run_c_program("man_verb_errors", "softroce0=127.77.30.4");
}

/// Every advertised GID carries traffic; completion events, solicited-only and one-shot
/// arming (ibv_req_notify_cq(3)).
#[test]
fn man_pages_every_gid_carries_traffic_and_events_follow_arming() {
    run_c_program("man_gid_traffic", "softroce0=127.77.30.5");
}

/// ibv_get_cq_event(3), ibv_get_async_event(3): destroying a CQ (a QP) waits for its
/// completion (async) events to be acknowledged.
#[test]
fn man_pages_destroy_cq_waits_for_event_acknowledgements() {
    run_c_program("man_destroy_waits", "softroce0=127.77.30.6");
}

/// ibv_alloc_mw(3), ibv_bind_mw(3), ibv_post_send(3): memory windows of type 1 and 2 —
/// binds, their keys and completions, access checked against the window (range, rights,
/// type 2's QP), zero-based windows, invalidation by zero-length bind, LOCAL_INV,
/// SEND_WITH_INV and dealloc, ibv_dereg_mr refused while a window is bound.
#[test]
fn man_pages_memory_windows() {
    run_c_program("man_memory_windows", "softroce0=127.77.30.7");
}

/// ibv_rereg_mr(3): access, PD and translation change in place; input errors leave the
/// region valid; a region with a bound window is not re-registered. A QP moved to RESET
/// leaves no unpolled completions behind.
#[test]
fn man_pages_rereg_mr_and_reset() {
    run_c_program("man_rereg_mr", "softroce0=127.77.30.10");
}

/// ibv_alloc_td(3), ibv_alloc_parent_domain(3): a parent domain is interchangeable with its
/// PD (regions, QPs and extended CQs of either work together); the PD and thread domain stay
/// while it uses them.
#[test]
fn man_pages_thread_and_parent_domains() {
    run_c_program("man_parent_domain", "softroce0=127.77.30.11");
}

/// ibv_query_device_ex(3) odp_caps, ibv_reg_mr(3) IBV_ACCESS_ON_DEMAND, ibv_advise_mr(3):
/// explicit and implicit ODP for every operation (an unmapped page fails the work request,
/// not the process), and each errno advise_mr lists.
#[test]
fn man_pages_on_demand_paging() {
    run_c_program("man_odp", "softroce0=127.77.30.12");
}

/// ibv_modify_qp(3), ibv_query_qp(3), ibv_create_qp(3), ibv_post_send(3), ibv_post_recv(3):
/// required attributes per transition and QP type, transitions that do not exist, a refused
/// modify changing nothing, query_qp returning what was set, the opcode table per QP type,
/// inline rules, sq_sig_all, SRQ rules, flushing in the Error state.
#[test]
fn man_pages_qp_state_rules_and_opcode_table() {
    run_c_program("man_qp_rules", "softroce0=127.78.18.1");
}

/// ibv_get_device_list(3), ibv_get_device_guid(3), ibv_query_gid_ex(3),
/// ibv_query_gid_table(3), ibv_get_pkey_index(3), ibv_fork_init(3), ibv_query_ece(3) …:
/// the device-level verbs' rules and errno values.
#[test]
fn man_pages_device_queries() {
    run_c_program("man_device_queries", "softroce0=127.78.18.3");
}

/// ibv_rate_to_mult(3), ibv_rate_to_mbps(3), ibv_event_type_str(3), ibv_wc_status_str:
/// pure functions print the same lines on the drop-in as on rdma-core's libibverbs.
#[test]
fn man_pages_pure_functions_answer_as_rdma_core() {
    let exe = common::compile_c("man_pure_functions");
    let exe = exe.to_str().expect("UTF-8 path");
    // These functions need no device: the system library answers them on a machine without
    // RDMA hardware.
    let system = std::process::Command::new(exe)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("running man_pure_functions on the system libibverbs");
    assert!(
        system.status.success(),
        "on the system libibverbs: {system:?}"
    );
    let dropin = common::spawn("man_pure_functions", "softroce0=127.78.18.2", exe, &[])
        .finish(Duration::from_secs(60));
    assert!(dropin.ok(), "{}", dropin.report());
    let system = String::from_utf8_lossy(&system.stdout);
    let differ: Vec<String> = system
        .lines()
        .zip(dropin.stdout.lines())
        .filter(|(s, d)| s != d)
        .map(|(s, d)| format!("rdma-core: {s}\n  drop-in: {d}"))
        .collect();
    assert!(
        differ.is_empty() && system.lines().count() == dropin.stdout.lines().count(),
        "the drop-in departs from rdma-core:\n{}",
        differ.join("\n")
    );
}

/// ibv_modify_srq(3)/ibv_query_srq(3) (limit armed once, reads 0 after firing),
/// ibv_create_srq(3) limits, ibv_get_async_event(3) (SRQ_LIMIT_REACHED, LAST_WQE_REACHED
/// once per entry into Error, QP_ACCESS_ERR, CQ_ERR; no readable fd for events of destroyed
/// QPs), ibv_resize_cq(3) (never below the unpolled entries), ibv_req_notify_cq(3) (error
/// completions are solicited), ibv_reg_mr(3) access rules, ibv_create_ah_from_wc(3).
#[test]
fn man_pages_async_events_srq_limit_resize_and_ah_from_wc() {
    run_c_program("man_events_srq_ah", "softroce0=127.78.18.6");
}

/// ibv_wr_post(3) and ibv_create_cq_ex(3): send ops a QP type lacks refuse the QP; several
/// WRs per critical region; ibv_wr_abort; a failing ibv_wr_complete aborts the entire
/// posting; ibv_wr_set_ud_addr is mandatory on UD; ENOENT from an empty extended CQ.
#[test]
fn man_pages_wr_api_and_extended_cq() {
    run_c_program("man_wr_api", "softroce0=127.78.18.7");
}

/// ibv_get_async_event(3), ibv_modify_qp(3): COMM_EST for a QP receiving in RTR;
/// SQ_DRAINED on entering SQD with en_sqd_async_notify; SQD back to RTS.
#[test]
fn man_pages_comm_est_and_sq_drained() {
    run_c_program("man_qp_events", "softroce0=127.78.18.9");
}

/// ibv_reg_mr(3): IBV_ACCESS_ZERO_BASED and ibv_reg_mr_iova — lkeys and rkeys address the
/// region from its iova (offsets for zero-based), windows bound by those addresses.
#[test]
fn man_pages_zero_based_and_iova_regions() {
    run_c_program("man_mr_iova", "softroce0=127.78.18.10");
}

/// ibv_alloc_dm(3): device memory bounded by max_dm_size, 4-byte copies inside it,
/// zero-based regions over it that peers and SGEs address by offset, EBUSY while covered.
#[test]
fn man_pages_device_memory() {
    run_c_program("man_device_memory", "softroce0=127.78.18.11");
}

/// ibv_alloc_null_mr(3): a region of the maximum length that reads as zeros (SEND and RDMA
/// WRITE gathered from it deliver zeros) and discards writes (receives and READ responses
/// into it complete, a receive's later entries get the rest, a UD receive's GRH area can go
/// there), only its lkey valid (a peer
/// naming it as rkey: IBV_WC_REM_ACCESS_ERR), its PD's only, busy PD, no rereg or bind.
#[test]
fn man_pages_null_memory_region() {
    run_c_program("man_null_mr", "softroce0=127.78.18.17");
}

/// ibv_modify_cq(3): completion event moderation (IBV_CQ_ATTR_MODERATE) within
/// ibv_query_device_ex's cq_mod_caps: an armed CQ's event waits for cq_count completions
/// or cq_period microseconds; both zero turn it off; EINVAL for a bad attr_mask or period.
#[test]
fn man_pages_cq_moderation() {
    run_c_program("man_cq_moderation", "softroce0=127.78.18.18");
}

/// Threads: ibv_wr_post(3)'s per-QP critical section from ibv_wr_start to ibv_wr_complete
/// (two builders on one QP, every WRITE once and in its slot), ibv_start_poll .. ibv_end_poll
/// exclusive (two pollers of one extended CQ), a CQ destroyed with an unread event leaving
/// its channel unreadable, a channel's refcnt kept by four threads making and destroying CQs.
#[test]
fn man_pages_thread_sections() {
    run_c_program("man_thread_sections", "softroce0=127.78.18.19");
}

/// ibv_create_cq_ex(3), ibv_query_rt_values_ex(3), ibv_query_device_ex(3): completion
/// timestamps in the device clock (CLOCK_MONOTONIC nanoseconds) and in wall-clock
/// nanoseconds, monotonic and between raw-clock readings taken around them; flushes
/// stamped too; CVLAN and flow tags refused with EOPNOTSUPP.
#[test]
fn man_pages_completion_timestamps() {
    run_c_program("man_completion_timestamps", "softroce0=127.78.18.13");
}

/// RDMA ATOMIC WRITE (verbs.h's ibv_wr_atomic_write; no rdma-core 44 man page): advertised
/// in device_cap_flags_ex, 8 bytes stored at the target with IBV_WC_ATOMIC_WRITE; a
/// misaligned target IBV_WC_REM_INV_REQ_ERR and a region without remote write
/// IBV_WC_REM_ACCESS_ERR, as rxe's responder answers; refused on UC (ibv_wr_post(3)).
#[test]
fn atomic_write_through_the_wr_api() {
    run_c_program("man_atomic_write", "softroce0=127.78.18.14");
}

/// XRC (ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_get_srq_num(3), ibv_create_qp_ex(3),
/// ibv_open_qp(3), qp_type.xrc.remote_srqn, ibv_wr_set_xrc_srqn(3)): domains shared by file
/// and busy while used, target QPs without queues, sends landing in the SRQ they name, an
/// SRQ of another domain an invalid request, RDMA WRITE checked against the SRQ's PD, a
/// target entering ERR raising IBV_EVENT_QP_LAST_WQE_REACHED (ibv_get_async_event(3)).
#[test]
fn man_pages_xrc() {
    run_c_program("man_xrc", "softroce0=127.78.18.15");
}

/// Tag matching (ibv_query_device_ex(3) tm_caps, ibv_create_cq_ex(3)
/// IBV_WC_EX_WITH_TM_INFO, ibv_create_srq_ex(3) IBV_SRQT_TM, ibv_post_srq_ops(3)): the tag
/// list and its limits and errors, EAGER matches, unexpected messages and the sync they
/// require, NO_TAG, and a rendezvous read by the device and answered with a FIN, in one
/// packet or several.
#[test]
fn man_pages_tag_matching() {
    run_c_program("man_tag_matching", "softroce0=127.78.18.16");
}

/// ibv_poll_cq(3), IBV_WC_LOC_PROT_ERR: an lkey that does not match the WR's address is a
/// completion error (the QP goes to Error), not a failed post.
#[test]
fn man_pages_local_protection_errors_complete() {
    run_c_program("man_local_protection", "softroce0=127.78.18.12");
}

/// ibv_get_device_list(3): no devices (SOFTROCE_DEVICES set and empty) is an empty list
/// with num_devices 0, not an error.
#[test]
fn man_pages_no_devices_is_an_empty_list() {
    run_c_program("man_no_devices", "");
}

/// `man_multicast`, compiled once for the tests that run it side by side (a program being
/// rewritten cannot be started).
fn multicast_program() -> &'static std::path::Path {
    static EXE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| common::compile_c("man_multicast"))
}

/// ibv_attach_mcast(3), ibv_detach_mcast(3) as the kernel's uverbs and rxe answer them: UD
/// QPs only (EINVAL), multicast GIDs only (EINVAL), attaching twice is one membership, a
/// detach of what is not attached is EINVAL, destroying an attached QP is EBUSY, and
/// ibv_query_device's limits are rxe's and enforced (ENOMEM).
#[test]
fn man_pages_multicast_attach_rules() {
    let exe = multicast_program();
    let run = common::spawn(
        "man_multicast rules",
        "mc0=127.79.1.1",
        exe.to_str().expect("UTF-8 path"),
        &["rules"],
    )
    .finish(Duration::from_secs(60));
    assert!(
        run.ok() && run.stdout.contains("0 failures"),
        "{}",
        run.report()
    );
}

/// One sender process, two receiver processes with two attached QPs each: every attached
/// QP gets each message once, with the GRH area and src_qp of a unicast UD receive; an
/// attached QP with another Q_Key and a QP of a device that never attached get nothing.
#[test]
fn multicast_reaches_every_attached_qp_in_other_processes() {
    const GROUP: &str = "239.79.2.1";
    const N: &str = "40";
    let exe = multicast_program();
    let exe = exe.to_str().expect("UTF-8 path");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcast-ready");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("ready dir");
    let ready: Vec<String> = (1..=2)
        .map(|i| dir.join(format!("rx{i}")).display().to_string())
        .collect();
    let rx1 = common::spawn(
        "receiver 1",
        "rx1=127.79.2.2",
        exe,
        &["recv", &ready[0], N, GROUP],
    );
    let rx2 = common::spawn(
        "receiver 2",
        "rx2=127.79.2.3,idle=127.79.2.4",
        exe,
        &["recv", &ready[1], N, GROUP],
    );
    // Bounded: both receivers have attached and posted their buffers within 30 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.iter().all(|r| std::path::Path::new(r).exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "receivers never got ready:\n{}\n{}",
            rx1.finish(Duration::from_secs(1)).report(),
            rx2.finish(Duration::from_secs(1)).report()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let tx = common::spawn("sender", "tx=127.79.2.1", exe, &["send", N, GROUP])
        .finish(Duration::from_secs(60));
    let rx1 = rx1.finish(Duration::from_secs(60));
    let rx2 = rx2.finish(Duration::from_secs(60));
    for run in [&tx, &rx1, &rx2] {
        assert!(
            run.ok() && run.stdout.contains("0 failures"),
            "{}\n{}\n{}",
            tx.report(),
            rx1.report(),
            rx2.report()
        );
    }
}

/// A process that forks with the device open: the child opens a device of its own (the
/// parent's is only a copy there, without its engine), and both move traffic.
#[test]
fn a_forked_child_opens_a_working_device() {
    run_c_program("fork_child_opens_device", "softroce0=127.77.30.40");
}

/// A multithreaded program forks while its other threads are inside verbs (creating and
/// destroying CQs, opening and closing the device, moving traffic): every child opens a
/// device of its own and moves an RC SEND, none inheriting a lock another thread held.
#[test]
fn a_child_forked_while_other_threads_use_verbs_opens_a_working_device() {
    run_c_program("fork_while_threads_use_verbs", "softroce0=127.77.30.52");
}

/// ibv_get_async_event(3) with several waiting threads: closing the context while they
/// take events gives every one of them back and returns.
#[test]
fn closing_a_context_wakes_every_thread_waiting_for_its_async_events() {
    run_c_program("close_wakes_every_async_waiter", "softroce0=127.77.30.53");
}

/// Opening and closing the device in a loop from several threads holds the threads and
/// fds of the open contexts only.
#[test]
fn opening_and_closing_in_a_loop_leaves_no_threads_behind() {
    run_c_program("open_close_churn_is_bounded", "softroce0=127.77.30.54");
}

/// A library's signal handler that calls exit() while the program is inside a verb (as
/// libinfinipath's SIGTERM handler does under libfabric): the process ends, its counters
/// printed or a line saying why not, instead of hanging in the drop-in's exit-time work.
/// Several runs, as the signal lands inside the device lock only part of the time.
#[test]
fn exit_from_a_signal_handler_inside_a_verb_ends_the_process() {
    let exe = common::compile_c("exit_from_signal_handler");
    for run in 0..8 {
        let done = common::spawn_env(
            "exit_from_signal_handler",
            "softroce0=127.77.30.41",
            exe.to_str().expect("UTF-8 path"),
            &[],
            &[("SOFTROCE_COUNTERS", "stderr")],
        )
        .finish(Duration::from_secs(15));
        assert!(
            done.ok() && done.stdout.contains("0 failures"),
            "run {run}: {}",
            done.report()
        );
        assert!(
            done.stderr.contains("softroce counters"),
            "run {run}: the counters (or why they are missing) at exit: {}",
            done.report()
        );
    }
}

/// Two contexts of one device: an async fd each, each QP's events to its own context.
#[test]
fn man_pages_async_events_are_per_context() {
    run_c_program("man_async_per_context", "softroce0=127.77.30.42");
}

/// ibv_close_device with objects left while another context keeps the device open: they
/// go with the context (a peer's WRITE into its QP no longer lands).
#[test]
fn closing_a_context_destroys_the_objects_left_on_it() {
    run_c_program("man_close_device", "softroce0=127.77.30.50");
}

/// A UD send the host refuses (the socket's sendmmsg fails) completes
/// IBV_WC_LOC_QP_OP_ERR and is counted in `send_err`; the QP recovers from SQE.
#[test]
fn a_ud_send_the_host_refuses_completes_in_error_and_is_counted() {
    let run = run_c_program_with(
        "man_send_refused",
        "softroce0=127.77.30.43",
        &[("SOFTROCE_COUNTERS", "stderr")],
    );
    assert!(
        run.stderr.contains(" send_err=1 ") && run.stderr.contains(" drop_send_failed=1"),
        "the refused datagram is counted: {}",
        run.report()
    );
}

/// Port and device events on the fault plan's schedule (SOFTROCE_FAULTS): PORT_ERR with
/// the port DOWN, a WRITE posted meanwhile landing once PORT_ACTIVE came, DEVICE_FATAL.
#[test]
fn scheduled_port_and_device_events_reach_a_c_program() {
    run_c_program_with(
        "man_port_events",
        "softroce0=127.77.30.44",
        &[(
            "SOFTROCE_FAULTS",
            "port_down=1000,port_up=2000,device_fatal=3500",
        )],
    );
}

/// Async events reach each context in the order the device raised them: 120 port flaps
/// read by two contexts' spinning threads alternate PORT_ERR/PORT_ACTIVE on both (threads
/// routing events at once queued them out of order).
#[test]
fn async_events_reach_every_context_in_the_order_raised() {
    let flaps: Vec<String> = (0..120)
        .map(|i| {
            let at = 200 + 4 * i;
            format!("port_down={at},port_up={at}")
        })
        .collect();
    run_c_program_with(
        "man_async_order",
        "softroce0=127.77.30.51",
        &[("SOFTROCE_FAULTS", &flaps.join(","))],
    );
}

/// Blocking event waits end as a read of the kernel's event file ends: EINTR for a signal
/// without SA_RESTART, on with it; ibv_close_device ends an async wait and returns even
/// while another context of the device destroys CQs (it hung: the destroys took the close's
/// wake-up).
#[test]
fn event_waits_end_on_signals_and_close_as_kernel_reads_do() {
    run_c_program("man_event_waits", "softroce0=127.77.30.45");
}

/// num_sge and the ibv_wr_* setters' counts beyond the queue's size: EINVAL before the list
/// is read (they crashed the process or aborted it on a huge allocation).
#[test]
fn wild_counts_are_refused_before_their_lists_are_read() {
    run_c_program("man_wild_counts", "softroce0=127.77.30.46");
}

/// A device whose port another program holds: queries answer, object verbs fail with
/// EADDRINUSE, and the first failure says why on stderr without `SOFTROCE_LOG` (it took
/// `SOFTROCE_LOG=verbs` to learn that the port was taken, or that 64 processes shared it).
#[test]
fn a_device_whose_port_is_held_elsewhere_says_why_its_verbs_fail() {
    let _holder = std::net::UdpSocket::bind("127.77.30.48:4791").expect("holding the port");
    let run = run_c_program_with(
        "man_port_held",
        "softroce0=127.77.30.48",
        &[("SOFTROCE_LOG", "")],
    );
    assert_eq!(
        run.stderr.matches("softroce: ibv_").count(),
        1,
        "one line, from the first verb that failed: {}",
        run.report()
    );
    assert!(
        run.stderr.contains("softroce: ibv_alloc_pd:"),
        "{}",
        run.report()
    );
}
