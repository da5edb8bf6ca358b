//! Two verbs beyond rxe through the safe API, the same story on emulated devices (real UDP
//! sockets on loopback) and on the simulated fabric:
//! - a null memory region (ibv_alloc_null_mr(3)): a SEND gathered from it delivers zeros, a
//!   receive entry in it swallows its share of the message and the next entry gets the rest;
//! - completion event moderation (ibv_modify_cq(3)): an armed CQ's event waits for its
//!   count of completions, or for its period after the first of them.

use std::time::Duration;

use softroce_verbs::{
    CompletionChannel, CompletionQueue, Context, QpType, SendWr, WcStatus, WrOpcode, sim,
};

type BoxError = Box<dyn std::error::Error>;

const WAIT: Duration = Duration::from_secs(10);
/// Long enough for anything in flight to have arrived (a look for what must not come).
const QUIET: Duration = Duration::from_millis(200);

/// Whether an event comes on `ch` within `within`; a taken event is acknowledged.
fn event_within(ch: &CompletionChannel, cq: &CompletionQueue, within: Duration) -> bool {
    match ch.get_cq_event(Some(within)) {
        Ok(_) => cq.ack_events(1).is_ok(),
        Err(_) => false,
    }
}

fn story(a: &Context, b: &Context) -> Result<(), BoxError> {
    let (apd, bpd) = (a.alloc_pd()?, b.alloc_pd()?);
    let acq = a.create_cq(16, None)?;
    let channel = b.create_comp_channel()?;
    let bcq = b.create_cq(16, Some(&channel))?;
    let (amr, bmr) = (apd.allocate(4096)?, bpd.allocate(4096)?);
    let (a_null, b_null) = (apd.alloc_null_mr()?, bpd.alloc_null_mr()?);
    let aqp = apd.create_qp(&acq, &acq, QpType::Rc).build()?;
    let bqp = bpd.create_qp(&bcq, &bcq, QpType::Rc).build()?;
    let (ae, be) = (aqp.endpoint(), bqp.endpoint());
    let aqp = aqp.handshake(be)?;
    let bqp = bqp.handshake(ae)?;

    let send = |wr_id: u64, sge| -> Result<(), BoxError> {
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![sge].into();
        // SAFETY: the regions outlive the completion polled below.
        unsafe { aqp.post_send(&[wr])? };
        let wc = acq.poll_wait(1, WAIT)?;
        assert!(
            wc.first()
                .is_some_and(|w| (w.wr_id, w.status) == (wr_id, WcStatus::Success)),
            "send {wr_id}: {wc:?}"
        );
        Ok(())
    };
    let received = |wr_id: u64| -> Result<u32, BoxError> {
        let wc = bcq.poll_wait(1, WAIT)?;
        let w = wc.first().ok_or("no receive completion")?;
        assert_eq!((w.wr_id, w.status), (wr_id, WcStatus::Success), "{wc:?}");
        Ok(w.byte_len)
    };

    // A SEND of 32 bytes from the null region: 32 zero bytes arrive.
    bmr.write(0, &[0xAB; 64])?;
    // SAFETY: the region lives until the end of the story, after the last poll.
    unsafe { bqp.post_receive(&[bmr.slice(0..64)?], 1)? };
    send(10, a_null.sge(32))?;
    assert_eq!(received(1)?, 32);
    let mut got = [0u8; 64];
    bmr.read(0, &mut got)?;
    assert!(got[..32].iter().all(|&x| x == 0) && got[32..].iter().all(|&x| x == 0xAB));

    // A receive whose first 8 bytes are the null region's: the rest lands in the next entry.
    amr.write(0, b"0123456789abcdef01234567")?;
    // SAFETY: as above.
    unsafe { bqp.post_receive(&[b_null.sge(8), bmr.slice(100..116)?], 2)? };
    send(11, amr.slice(0..24)?)?;
    assert_eq!(received(2)?, 24);
    let mut rest = [0u8; 16];
    bmr.read(100, &mut rest)?;
    assert_eq!(&rest, b"89abcdef01234567");

    // Moderation: three completions per event.
    let limits = b.query_device()?;
    assert!(limits.max_cq_moderation_count >= 3 && limits.max_cq_moderation_period > 0);
    bcq.moderate(3, 0)?;
    bcq.req_notify(false)?;
    for i in 0..2 {
        // SAFETY: as above.
        unsafe { bqp.post_receive(&[bmr.slice(0..64)?], 20 + i)? };
        send(30 + i, amr.slice(0..8)?)?;
        received(20 + i)?;
    }
    assert!(
        !event_within(&channel, &bcq, QUIET),
        "two completions of three: no event"
    );
    // SAFETY: as above.
    unsafe { bqp.post_receive(&[bmr.slice(0..64)?], 22)? };
    send(32, amr.slice(0..8)?)?;
    received(22)?;
    assert!(event_within(&channel, &bcq, WAIT), "the third sends it");

    // Or a period: one completion of a hundred, and the event still comes.
    bcq.moderate(100, limits.max_cq_moderation_period)?;
    bcq.req_notify(false)?;
    // SAFETY: as above.
    unsafe { bqp.post_receive(&[bmr.slice(0..64)?], 23)? };
    send(33, amr.slice(0..8)?)?;
    received(23)?;
    assert!(
        event_within(&channel, &bcq, WAIT),
        "the event once the period ended"
    );
    assert_eq!(
        bcq.moderate(0, limits.max_cq_moderation_period.saturating_add(1))
            .map_err(|e| e.errno())
            .err(),
        (limits.max_cq_moderation_period < u16::MAX).then_some(libc::EINVAL),
        "a period beyond the device's"
    );
    Ok(())
}

#[test]
fn null_regions_and_cq_moderation_on_emulated_devices() -> Result<(), BoxError> {
    let open = |name: &str, ip: &str| Context::open_emulated(name, ip.parse().unwrap(), 4791);
    story(&open("nm-a", "127.79.10.1")?, &open("nm-b", "127.79.10.2")?)
}

#[test]
fn null_regions_and_cq_moderation_on_the_simulated_fabric() {
    sim::check(20, |fabric| -> Result<(), BoxError> {
        let a = fabric.device("nm-a", "127.79.11.1".parse()?)?;
        let b = fabric.device("nm-b", "127.79.11.2".parse()?)?;
        story(&a, &b)
    });
}
