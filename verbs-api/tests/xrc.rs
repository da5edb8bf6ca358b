//! XRC through the safe API, the same story on emulated devices (real UDP sockets on
//! loopback) and on the simulated fabric: an XRC initiator on one device sends through one
//! XRC target QP on the other to two XRC SRQs of the target's domain; each message lands
//! in the SRQ it named, completing on that SRQ's own CQ with the target QP's number. A
//! second handle opened on the target QP (`ibv_open_qp`) keeps it alive after the
//! creator's handle is dropped.

use std::time::Duration;

use softroce_verbs::{Context, QpState, QpType, SendWr, WcOpcode, WcStatus, WrOpcode, sim};

type BoxError = Box<dyn std::error::Error>;

const WAIT: Duration = Duration::from_secs(10);
/// Long enough for anything in flight to have arrived (a look for what must not come).
const QUIET: Duration = Duration::from_millis(200);

fn story(initiator: &Context, target: &Context) -> Result<(), BoxError> {
    // The initiator: an ordinary QP of type XRC_SEND, with a send CQ only.
    let ipd = initiator.alloc_pd()?;
    let icq = initiator.create_cq(16, None)?;
    let imr = ipd.allocate(4096)?;
    let iqp = ipd.create_qp(&icq, &icq, QpType::XrcSend).build()?;

    // The target: a domain, two XRC SRQs completing on CQs of their own, one target QP.
    let xrcd = target.open_xrcd()?;
    let tpd = target.alloc_pd()?;
    let tmr = tpd.allocate(4096)?;
    let cqs = [target.create_cq(16, None)?, target.create_cq(16, None)?];
    let srqs = [
        tpd.create_xrc_srq(&xrcd, &cqs[0], 8, 1)?,
        tpd.create_xrc_srq(&xrcd, &cqs[1], 8, 1)?,
    ];
    let srq_nums = [srqs[0].srq_num(), srqs[1].srq_num()];
    assert!(
        srq_nums.iter().all(Option::is_some) && srq_nums[0] != srq_nums[1],
        "each XRC SRQ has a number of its own: {srq_nums:?}"
    );
    let tqp = xrcd.create_target_qp()?;
    let (ie, te) = (iqp.endpoint(), tqp.endpoint());
    let iqp = iqp.handshake(te)?;
    let tqp = tqp.handshake(ie)?;
    assert_eq!(tqp.state()?, QpState::Rts);

    for (i, srq) in srqs.iter().enumerate() {
        for k in 0..2 {
            let at = 1024 * i + 64 * k;
            // SAFETY: the region lives until the end of the story, after the last poll.
            unsafe { srq.post_receive(&[tmr.slice(at..at + 64)?], (10 * i + k) as u64)? };
        }
    }
    let send = |wr_id: u64, srq: usize, text: &[u8]| -> Result<(), BoxError> {
        let at = 64 * wr_id as usize;
        imr.write(at, text)?;
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![imr.slice(at..at + text.len())?].into();
        wr.xrc_remote_srqn = srq_nums[srq].unwrap_or_default();
        // SAFETY: the region outlives the completion polled below.
        unsafe { iqp.post_send(&[wr])? };
        let wc = icq.poll_wait(1, WAIT)?;
        assert!(
            wc.first()
                .is_some_and(|w| (w.wr_id, w.status) == (wr_id, WcStatus::Success)),
            "send {wr_id}: {wc:?}"
        );
        Ok(())
    };
    send(1, 0, b"for the first SRQ")?;
    send(2, 1, b"for the second SRQ")?;

    for (i, (cq, text)) in cqs
        .iter()
        .zip([&b"for the first SRQ"[..], b"for the second SRQ"])
        .enumerate()
    {
        let wc = cq.poll_wait(1, WAIT)?;
        let w = wc
            .first()
            .ok_or_else(|| format!("nothing on SRQ {i}'s CQ"))?;
        assert_eq!(
            (w.status, w.opcode, w.wr_id, w.byte_len as usize, w.qp_num),
            (
                WcStatus::Success,
                WcOpcode::Recv,
                10 * i as u64,
                text.len(),
                tqp.qpn()
            ),
            "SRQ {i}'s CQ: the message it was named by, through the target QP"
        );
        let mut got = vec![0u8; text.len()];
        tmr.read(1024 * i, &mut got)?;
        assert_eq!(got, text);
        assert!(
            cq.poll_wait(1, QUIET)?.is_empty(),
            "one message per SRQ, none on the other's CQ"
        );
    }

    // ibv_open_qp: a second handle; the QP outlives its creator's handle.
    let opened = xrcd.open_qp(tqp.qpn())?;
    assert_eq!(opened.state()?, QpState::Rts);
    drop(tqp);
    send(3, 1, b"after the creator let go")?;
    let wc = cqs[1].poll_wait(1, WAIT)?;
    assert!(
        wc.first()
            .is_some_and(|w| (w.status, w.wr_id, w.qp_num) == (WcStatus::Success, 11, opened.qpn())),
        "{wc:?}"
    );
    // An ordinary SRQ has no XRC number.
    assert_eq!(tpd.create_srq(4, 1)?.srq_num(), None);
    Ok(())
}

#[test]
fn xrc_on_emulated_devices_over_loopback() -> Result<(), BoxError> {
    let open = |name: &str, ip: &str| Context::open_emulated(name, ip.parse().unwrap(), 4791);
    story(&open("xrc-i", "127.79.8.1")?, &open("xrc-t", "127.79.8.2")?)
}

#[test]
fn xrc_on_the_simulated_fabric() {
    sim::check(20, |fabric| -> Result<(), BoxError> {
        let i = fabric.device("xrc-i", "127.79.9.1".parse()?)?;
        let t = fabric.device("xrc-t", "127.79.9.2".parse()?)?;
        story(&i, &t)
    });
}
