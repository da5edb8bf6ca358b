//! A UD send the host refuses to transmit (the driver's `sendmmsg` fails) is an error
//! completion and a counted drop, never a silent loss. The kernel refuses a datagram to
//! loopback's broadcast address (127.255.255.255) from a socket without SO_BROADCAST
//! (EACCES): nothing leaves. (Multicast sends take the same path; loopback offers no group
//! the kernel refuses, so `emu-device/tests/send_refused.rs` reports one to the core.) As rxe completes a request whose `rxe_xmit_packet` failed, the WR
//! completes with IBV_WC_LOC_QP_OP_ERR and `send_err` counts it (the driver's
//! `drop_send_failed` too); the UD QP then enters SQE, as every UD send error moves it
//! (IBTA 10.3.1), WRs behind the failed one are flushed, and the QP sends again once moved
//! back to RTS.

use std::time::Duration;

use softroce_verbs::grh::GRH_LEN;
use softroce_verbs::{
    Context, Gid, QpAttr, QpAttrMask, QpState, QpType, QueuePairEndpoint, SendWr, WcOpcode,
    WcStatus, WrOpcode,
};

type BoxError = Box<dyn std::error::Error>;

const QKEY: u32 = 0x2222_2222;
const WAIT: Duration = Duration::from_secs(10);

fn counter(ctx: &Context, name: &str) -> u64 {
    let line = ctx.counters_line().unwrap_or_default();
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_ud_send_the_host_refuses_completes_in_error_and_is_counted() -> Result<(), BoxError> {
    let tx = Context::open_emulated("refuse-tx", "127.79.7.1".parse()?, 4791)?;
    let rx = Context::open_emulated("refuse-rx", "127.79.7.2".parse()?, 4791)?;

    let pd = tx.alloc_pd()?;
    let cq = tx.create_cq(16, None)?;
    let mr = pd.allocate(4096)?;
    let qp = pd.create_qp(&cq, &cq, QpType::Ud).qkey(QKEY).build()?;
    let own = qp.endpoint();
    let qp = qp.handshake(own)?;

    let rpd = rx.alloc_pd()?;
    let rcq = rx.create_cq(16, None)?;
    let rmr = rpd.allocate(4 * (GRH_LEN + 64))?;
    let rqp = rpd.create_qp(&rcq, &rcq, QpType::Ud).qkey(QKEY).build()?;
    let peer = rqp.endpoint();
    let rqp = rqp.handshake(peer)?;
    for i in 0..4 {
        let at = i * (GRH_LEN + 64);
        // SAFETY: the region lives until the end of the test, after the last poll.
        unsafe { rqp.post_receive(&[rmr.slice(at..at + GRH_LEN + 64)?], i as u64)? };
    }

    let good = qp.ud_target(peer, QKEY)?;
    let broadcast = qp.ud_target(
        QueuePairEndpoint {
            gid: Gid::from_ip("127.255.255.255".parse()?),
            ..peer
        },
        QKEY,
    )?;
    let wr = |id: u64, to| -> Result<SendWr, BoxError> {
        let mut wr = SendWr::new(id, WrOpcode::Send);
        wr.sg_list = vec![mr.slice(0..64)?].into();
        wr.ud = Some(to);
        Ok(wr)
    };
    // One post: a send that leaves, one that cannot, one behind it.
    // SAFETY: the region outlives the completions polled below.
    unsafe { qp.post_send(&[wr(1, good)?, wr(2, broadcast)?, wr(3, good)?])? };
    let mut wcs = Vec::new();
    for _ in 0..3 {
        wcs.extend(cq.poll_wait(3 - wcs.len(), WAIT)?);
        if wcs.len() == 3 {
            break;
        }
    }
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::LocQpOpErr),
            // It may have left in the same batch: a flushed WR may have been executed.
            (3, WcStatus::WrFlushErr),
        ],
        "{wcs:?}"
    );
    assert_eq!(counter(&tx, "send_err"), 1, "{:?}", tx.counters_line());
    assert_eq!(
        counter(&tx, "drop_send_failed"),
        1,
        "{:?}",
        tx.counters_line()
    );
    assert_eq!(
        qp.state()?,
        QpState::Sqe,
        "a UD send error stops the send queue"
    );
    let first = rcq.poll_wait(1, WAIT)?;
    assert!(
        first.first().is_some_and(
            |w| (w.wr_id, w.status, w.opcode) == (0, WcStatus::Success, WcOpcode::Recv)
        ),
        "the send before the refused one arrived: {first:?}"
    );

    // Back in RTS the QP sends again.
    let attr = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    qp.modify(&attr, QpAttrMask::STATE)?;
    // SAFETY: as above.
    unsafe { qp.post_send(&[wr(4, good)?])? };
    let wc = cq.poll_wait(1, WAIT)?;
    assert!(
        wc.first()
            .is_some_and(|w| (w.wr_id, w.status) == (4, WcStatus::Success)),
        "{wc:?}"
    );
    assert_eq!(rcq.poll_wait(1, WAIT)?.len(), 1, "the peer received it");
    assert_eq!(counter(&tx, "send_err"), 1, "{:?}", tx.counters_line());
    Ok(())
}
