//! `softroce inject SCENARIO`: drive one error path between two emulated devices on loopback
//! (real UDP sockets, the real driver) and print exactly what the verbs report — work
//! completions with the fields ibv_poll_cq(3) says are valid, async events with their
//! element, QP states — each next to what the man pages promise; then recover where
//! recovery is possible (reset and reconnect) and show traffic flowing again. Exit status 1
//! when anything differs from the expectation.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use softroce_verbs::{
    AccessFlags, AsyncEvent, CompletionQueue, Context, EventElement, EventType, MemoryRegion,
    ProtectionDomain, QpState, QpType, QueuePair, SendWr, VendorErr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// An error path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// The receiver's CQ overruns: IBV_EVENT_CQ_ERR, its QP to ERR (QP_FATAL).
    CqOverrun,
    /// The receiver's QP is forced to ERR with IBV_EVENT_QP_FATAL; receives are flushed.
    QpFatal,
    /// As qp-fatal, with IBV_EVENT_QP_REQ_ERR.
    QpReqErr,
    /// As qp-fatal, with IBV_EVENT_QP_ACCESS_ERR.
    QpAccessErr,
    /// The receiver's port goes down (PORT_ERR), the sender's retries run out, the port
    /// comes back (PORT_ACTIVE) and the reconnected QPs carry traffic again.
    PortDown,
    /// IBV_EVENT_DEVICE_FATAL on the receiver: every QP to ERR, work requests flushed.
    DeviceFatal,
    /// The receiver posts no receive: RNR NAKs until the sender's RNR retries run out.
    Rnr,
    /// Every ACK to the sender is lost: transport retries run out (RETRY_EXC_ERR).
    RetryExceeded,
    /// An RDMA WRITE to memory registered without remote write: REM_ACCESS_ERR at the
    /// sender, IBV_EVENT_QP_ACCESS_ERR at the receiver.
    RemoteAccess,
}

/// Arguments of `softroce inject`.
#[derive(Debug, Args)]
pub(crate) struct InjectArgs {
    /// The error path to drive.
    #[arg(value_enum)]
    scenario: Scenario,
    /// The sender's device address.
    #[arg(long, default_value = "127.0.0.61")]
    a: IpAddr,
    /// The receiver's device address.
    #[arg(long, default_value = "127.0.0.62")]
    b: IpAddr,
}

pub(crate) fn run(args: &InjectArgs) -> ExitCode {
    let mut report = Report::default();
    match scenario(args, &mut report) {
        Ok(()) if report.failed == 0 => {
            println!("{:?}: every observation as expected", args.scenario);
            ExitCode::SUCCESS
        }
        Ok(()) => {
            println!(
                "{:?}: {} observation(s) differ from the expectation",
                args.scenario, report.failed
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("softroce inject: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Observations and their verdicts, printed as they come.
#[derive(Default)]
struct Report {
    failed: usize,
}

impl Report {
    fn expect(&mut self, ok: bool, what: impl std::fmt::Display) {
        if ok {
            println!("  ok        {what}");
        } else {
            self.failed += 1;
            println!("  MISMATCH  {what}");
        }
    }

    fn note(&self, what: impl std::fmt::Display) {
        println!("  observed  {what}");
    }
}

/// The sender (A) and receiver (B) with one connected RC QP each.
struct Pair {
    a: Context,
    b: Context,
    cqa: CompletionQueue,
    cqb: CompletionQueue,
    ma: MemoryRegion,
    mb: MemoryRegion,
    qa: QueuePair,
    qb: QueuePair,
    _pds: (ProtectionDomain, ProtectionDomain),
}

/// How the sender retries: local ACK timeout exponent, retry count, RNR retry count.
struct Retry {
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
}

const SHORT: Retry = Retry {
    timeout: 10, // 4.2 ms
    retry_cnt: 2,
    rnr_retry: 2,
};

fn pair(args: &InjectArgs, b_access: AccessFlags, retry: &Retry) -> anyhow::Result<Pair> {
    let a = Context::open_emulated("inject-a", args.a, 0).context("device A")?;
    let b = Context::open_emulated("inject-b", args.b, 0).context("device B")?;
    let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cqa, cqb) = (a.create_cq(64, None)?, b.create_cq(64, None)?);
    let ma = pa.allocate(4096)?;
    let mb = pb.allocate_with(4096, b_access)?;
    let qa = pa
        .create_qp(&cqa, &cqa, QpType::Rc)
        .reliability(retry.timeout, retry.retry_cnt, retry.rnr_retry)
        .build()?;
    let qb = pb.create_qp(&cqb, &cqb, QpType::Rc).build()?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    Ok(Pair {
        qa: qa.handshake(eb)?,
        qb: qb.handshake(ea)?,
        a,
        b,
        cqa,
        cqb,
        ma,
        mb,
        _pds: (pa, pb),
    })
}

impl Pair {
    fn recv(&self, wr_id: u64) -> anyhow::Result<()> {
        // SAFETY: `mb` lives as long as the pair; receives complete or are flushed first.
        unsafe { self.qb.post_receive(&[self.mb.slice(0..64)?], wr_id)? };
        Ok(())
    }

    fn send(&self, wr_id: u64, op: WrOpcode) -> anyhow::Result<()> {
        let mut wr = SendWr::new(wr_id, op);
        wr.sg_list = vec![self.ma.slice(0..64)?].into();
        wr.rdma.remote_addr = self.mb.addr(0);
        wr.rdma.rkey = self.mb.rkey();
        // SAFETY: `ma` lives as long as the pair; sends complete or are flushed first.
        unsafe { self.qa.post_send(&[wr])? };
        Ok(())
    }

    /// Reset both QPs and connect them again.
    fn reconnect(&self) -> anyhow::Result<()> {
        self.qa.reconnect(self.qb.endpoint())?;
        self.qb.reconnect(self.qa.endpoint())?;
        Ok(())
    }

    /// One SEND from A to B after recovery, both sides succeeding.
    fn traffic_flows(&self, r: &mut Report) -> anyhow::Result<()> {
        self.recv(900)?;
        self.send(901, WrOpcode::Send)?;
        let a = wait(&self.cqa, 1, 5)?;
        let b = wait(&self.cqb, 1, 5)?;
        r.expect(
            a.first().is_some_and(|w| w.status == WcStatus::Success)
                && b.first().is_some_and(|w| w.status == WcStatus::Success),
            "after reset and reconnect a SEND completes on both sides",
        );
        Ok(())
    }
}

fn wait(cq: &CompletionQueue, n: usize, secs: u64) -> anyhow::Result<Vec<WorkCompletion>> {
    Ok(cq.poll_wait(n, Duration::from_secs(secs))?)
}

fn show(wc: &WorkCompletion) -> String {
    if wc.status == WcStatus::Success {
        format!(
            "wr_id={} {} {} byte_len={}",
            wc.wr_id, wc.status, wc.opcode, wc.byte_len
        )
    } else {
        // ibv_poll_cq(3): only wr_id, status, qp_num and vendor_err are valid on error.
        format!(
            "wr_id={} {} qp_num={:#x} vendor_err={:#x}",
            wc.wr_id, wc.status, wc.qp_num, wc.vendor_err
        )
    }
}

/// An error completion carries nothing but wr_id, status, qp_num and vendor_err.
fn only_error_fields(wc: &WorkCompletion) -> bool {
    wc.byte_len == 0 && wc.imm_data == 0 && wc.src_qp == 0 && wc.wc_flags.is_empty()
}

fn next_event(ctx: &Context, secs: u64) -> anyhow::Result<AsyncEvent> {
    let ev = ctx
        .get_async_event(Some(Duration::from_secs(secs)))
        .context("waiting for an async event")?;
    ctx.ack_async_event(&ev)?;
    Ok(ev)
}

fn element(ev: &AsyncEvent, pair: &Pair) -> String {
    match ev.element {
        EventElement::Qp(h) if h.to_raw() == pair.qb.raw_handle() => "B's QP".into(),
        EventElement::Qp(h) if h.to_raw() == pair.qa.raw_handle() => "A's QP".into(),
        EventElement::Cq(h) if h.to_raw() == pair.cqb.raw_handle() => "B's CQ".into(),
        EventElement::Port(p) => format!("port {p}"),
        EventElement::Device => "the device".into(),
        other => format!("{other:?}"),
    }
}

fn expect_event(
    r: &mut Report,
    ctx: &Context,
    pair: &Pair,
    want: EventType,
    on: &str,
) -> anyhow::Result<()> {
    let ev = next_event(ctx, 5)?;
    let got = element(&ev, pair);
    r.expect(
        ev.event_type == want && got == on,
        format!(
            "async event {} on {got} (expected {want} on {on})",
            ev.event_type
        ),
    );
    Ok(())
}

fn expect_flushed(r: &mut Report, wcs: &[WorkCompletion], ids: &[u64], qp_num: u32) {
    for wc in wcs {
        r.note(show(wc));
    }
    let got: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    r.expect(
        got == ids
            && wcs.iter().all(|w| {
                w.status == WcStatus::WrFlushErr
                    && w.vendor_err == VendorErr::Flushed as u32
                    && w.qp_num == qp_num
                    && only_error_fields(w)
            }),
        format!("work requests {ids:?} flushed in order with IBV_WC_WR_FLUSH_ERR, only the error fields set"),
    );
}

/// A's first completion must end with `status` and `vendor_err` (all of A's are shown).
fn expect_a_first(
    r: &mut Report,
    a: &[WorkCompletion],
    status: WcStatus,
    vendor: VendorErr,
    what: &str,
) {
    for wc in a {
        r.note(format!("A: {}", show(wc)));
    }
    r.expect(
        a.first()
            .is_some_and(|w| w.status == status && w.vendor_err == vendor as u32),
        what,
    );
}

fn expect_state(r: &mut Report, who: &str, qp: &QueuePair, want: QpState) -> anyhow::Result<()> {
    let got = qp.state()?;
    r.expect(
        got == want,
        format!("{who} QP state {got} (expected {want})"),
    );
    Ok(())
}

fn scenario(args: &InjectArgs, r: &mut Report) -> anyhow::Result<()> {
    println!("scenario {:?}", args.scenario);
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    match args.scenario {
        Scenario::CqOverrun => {
            let p = pair(args, all, &SHORT)?;
            p.cqb.limit_depth(Some(2))?;
            for i in 0..4 {
                p.recv(i)?;
            }
            for i in 0..3 {
                p.send(100 + i, WrOpcode::Send)?;
            }
            expect_event(r, &p.b, &p, EventType::CqErr, "B's CQ")?;
            expect_event(r, &p.b, &p, EventType::QpFatal, "B's QP")?;
            expect_state(r, "B's", &p.qb, QpState::Err)?;
            let mut wcs = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); 8];
            let n = p.cqb.poll(&mut wcs)?;
            r.expect(
                n == 2 && wcs[..n].iter().all(|w| w.status == WcStatus::Success),
                format!("B's CQ returns the {n} completions it held before the overrun"),
            );
            let after = p.cqb.poll(&mut wcs);
            r.expect(
                after.as_ref().is_err_and(|e| e.errno() == libc::EIO),
                format!(
                    "then polling it fails with EIO ({})",
                    after.map_or_else(|e| e.to_string(), |n| format!("{n} entries"))
                ),
            );
            let a = wait(&p.cqa, 3, 10)?;
            for wc in &a {
                r.note(format!("A: {}", show(wc)));
            }
            r.expect(
                a.iter().take(2).all(|w| w.status == WcStatus::Success),
                "A's first two SENDs succeed",
            );
        }
        Scenario::QpFatal | Scenario::QpReqErr | Scenario::QpAccessErr => {
            let event = match args.scenario {
                Scenario::QpFatal => EventType::QpFatal,
                Scenario::QpReqErr => EventType::QpReqErr,
                _ => EventType::QpAccessErr,
            };
            let p = pair(args, all, &SHORT)?;
            for i in 0..3 {
                p.recv(i)?;
            }
            p.qb.force_error(event)?;
            expect_event(r, &p.b, &p, event, "B's QP")?;
            expect_state(r, "B's", &p.qb, QpState::Err)?;
            let wcs = wait(&p.cqb, 3, 5)?;
            expect_flushed(r, &wcs, &[0, 1, 2], p.qb.qpn());
            p.reconnect()?;
            expect_state(r, "B's", &p.qb, QpState::Rts)?;
            p.traffic_flows(r)?;
        }
        Scenario::PortDown => {
            let p = pair(args, all, &SHORT)?;
            p.b.set_port_active(false)?;
            expect_event(r, &p.b, &p, EventType::PortErr, "port 1")?;
            p.recv(0)?;
            p.send(100, WrOpcode::Send)?;
            let a = wait(&p.cqa, 1, 10)?;
            expect_a_first(
                r,
                &a,
                WcStatus::RetryExcErr,
                VendorErr::RetryExceeded,
                "A's SEND to the downed port ends in IBV_WC_RETRY_EXC_ERR",
            );
            expect_state(r, "A's", &p.qa, QpState::Err)?;
            p.b.set_port_active(true)?;
            expect_event(r, &p.b, &p, EventType::PortActive, "port 1")?;
            p.reconnect()?;
            p.traffic_flows(r)?;
        }
        Scenario::DeviceFatal => {
            let p = pair(args, all, &SHORT)?;
            for i in 0..2 {
                p.recv(i)?;
            }
            p.b.inject_device_fatal()?;
            expect_event(r, &p.b, &p, EventType::DeviceFatal, "the device")?;
            expect_state(r, "B's", &p.qb, QpState::Err)?;
            let wcs = wait(&p.cqb, 2, 5)?;
            expect_flushed(r, &wcs, &[0, 1], p.qb.qpn());
        }
        Scenario::Rnr => {
            let p = pair(args, all, &SHORT)?;
            p.send(100, WrOpcode::Send)?;
            let a = wait(&p.cqa, 1, 20)?;
            expect_a_first(
                r,
                &a,
                WcStatus::RnrRetryExcErr,
                VendorErr::RnrRetryExceeded,
                "with no receive posted, A's SEND ends in IBV_WC_RNR_RETRY_EXC_ERR",
            );
            let c = p.a.counters().unwrap_or_default();
            r.note(format!("A's counters: rcvd_rnr_err={}", c.rcvd_rnr_err));
            expect_state(r, "A's", &p.qa, QpState::Err)?;
            p.reconnect()?;
            p.traffic_flows(r)?;
        }
        Scenario::RetryExceeded => {
            let p = pair(args, all, &SHORT)?;
            p.recv(0)?;
            // A hears nothing back: every ACK is lost on arrival.
            p.a.set_faults(Some("drop=1,dir=rx"))?;
            p.send(100, WrOpcode::Send)?;
            let a = wait(&p.cqa, 1, 10)?;
            for wc in &a {
                r.note(format!("A: {}", show(wc)));
            }
            r.expect(
                a.first().is_some_and(|w| {
                    w.status == WcStatus::RetryExcErr
                        && w.vendor_err == VendorErr::RetryExceeded as u32
                        && only_error_fields(w)
                }),
                "A's SEND ends in IBV_WC_RETRY_EXC_ERR after its retries",
            );
            let b = wait(&p.cqb, 1, 5)?;
            r.expect(
                b.len() == 1 && b[0].status == WcStatus::Success,
                "B received the message exactly once (duplicates were re-ACKed, not delivered)",
            );
            let c = p.a.counters().unwrap_or_default();
            r.note(format!(
                "A's counters: retransmitted_pkts={} retry_exceeded_err={}; {}",
                c.retransmitted_pkts,
                c.retry_exceeded_err,
                p.a.fault_counters().unwrap_or_default()
            ));
            p.a.set_faults(None)?;
            p.reconnect()?;
            p.traffic_flows(r)?;
        }
        Scenario::RemoteAccess => {
            let p = pair(args, AccessFlags::LOCAL_WRITE, &SHORT)?;
            p.send(100, WrOpcode::RdmaWrite)?;
            let a = wait(&p.cqa, 1, 10)?;
            expect_a_first(
                r,
                &a,
                WcStatus::RemAccessErr,
                VendorErr::RemoteAccess,
                "A's WRITE to memory without remote write ends in IBV_WC_REM_ACCESS_ERR",
            );
            expect_event(r, &p.b, &p, EventType::QpAccessErr, "B's QP")?;
            expect_state(r, "A's", &p.qa, QpState::Err)?;
            expect_state(r, "B's", &p.qb, QpState::Err)?;
            let mut first = [0u8; 4];
            p.mb.read(0, &mut first)?;
            r.expect(first == [0; 4], "B's memory is untouched");
        }
    }
    Ok(())
}
