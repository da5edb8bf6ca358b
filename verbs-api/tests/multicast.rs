//! UD multicast through the safe API, the same story on emulated devices (real UDP sockets
//! on 127.79.5.x, the group joined on loopback) and on the simulated fabric: a sender's
//! messages to a group reach every attached QP of every member device once, a QP with
//! another Q_Key and a device that never attached get nothing, and a detached QP stops
//! receiving.

use std::time::Duration;

use softroce_verbs::grh::{GRH_LEN, parse_grh};
use softroce_verbs::{Context, Gid, QpType, SendWr, WcOpcode, WcStatus, WrOpcode, sim};

type BoxError = Box<dyn std::error::Error>;

const QKEY: u32 = 0x1111_1111;
const WAIT: Duration = Duration::from_secs(10);
/// Long enough for anything in flight to have arrived (a look for what must not come).
const QUIET: Duration = Duration::from_millis(200);

fn story(
    sender: &Context,
    members: [&Context; 2],
    bystander: &Context,
    group: Gid,
) -> Result<(), BoxError> {
    let sp = sender.alloc_pd()?;
    let scq = sender.create_cq(16, None)?;
    let smr = sp.allocate(4096)?;
    let sq = sp.create_qp(&scq, &scq, QpType::Ud).qkey(QKEY).build()?;
    let se = sq.endpoint();
    let sq = sq.handshake(se)?;

    // Two QPs of the first member and one of the second attach; the second member also has
    // a QP with another Q_Key attached, and the bystander a QP that never attaches.
    let mut receivers = Vec::new();
    for (ctx, qkey, attach) in [
        (members[0], QKEY, true),
        (members[0], QKEY, true),
        (members[1], QKEY, true),
        (members[1], QKEY ^ 1, true),
        (bystander, QKEY, false),
    ] {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(16, None)?;
        let mr = pd.allocate(8 * (GRH_LEN + 64))?;
        let qp = pd.create_qp(&cq, &cq, QpType::Ud).qkey(qkey).build()?;
        let e = qp.endpoint();
        let qp = qp.handshake(e)?;
        for i in 0..8 {
            let at = i * (GRH_LEN + 64);
            // SAFETY: the region lives until the end of the story, after the last poll.
            unsafe { qp.post_receive(&[mr.slice(at..at + GRH_LEN + 64)?], i as u64)? };
        }
        if attach {
            qp.attach_mcast(group)?;
            // Attaching twice is one membership.
            qp.attach_mcast(group)?;
        }
        receivers.push((qp, cq, mr, qkey == QKEY && attach));
    }

    let target = sq.multicast_target(group, QKEY)?;
    let send = |i: u8| -> Result<(), BoxError> {
        smr.write(64 * usize::from(i), &[i; 64])?;
        let mut wr = SendWr::new(u64::from(i), WrOpcode::Send);
        let at = 64 * usize::from(i);
        wr.sg_list = vec![smr.slice(at..at + 64)?].into();
        wr.ud = Some(target);
        // SAFETY: the region outlives the completion polled below.
        unsafe { sq.post_send(&[wr])? };
        let wc = scq.poll_wait(1, WAIT)?;
        assert!(
            wc.first().is_some_and(|w| w.status == WcStatus::Success),
            "send {i}: {wc:?}"
        );
        Ok(())
    };
    for i in 0..3 {
        send(i)?;
    }
    for (n, (qp, cq, mr, receives)) in receivers.iter().enumerate() {
        let want = if *receives { 3 } else { 0 };
        let mut got = cq.poll_wait(want.max(1), if want > 0 { WAIT } else { QUIET })?;
        got.extend(cq.poll_wait(1, QUIET)?);
        assert_eq!(
            got.len(),
            want,
            "receiver {n} (QPN {:#x}): {got:?}",
            qp.qpn()
        );
        let mut seen = [0u32; 3];
        for wc in &got {
            assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
            assert_eq!(wc.src_qp, se.qpn, "the sender's QPN");
            assert_eq!(wc.byte_len as usize, GRH_LEN + 64);
            let at = wc.wr_id as usize * (GRH_LEN + 64);
            let mut area = [0u8; GRH_LEN + 64];
            mr.read(at, &mut area)?;
            let grh = parse_grh(&area[..GRH_LEN])?;
            assert_eq!(grh.sgid, se.gid, "the GRH area holds the sender's address");
            assert_eq!(grh.dgid, group, "and the group as destination");
            seen[usize::from(area[GRH_LEN])] += 1;
        }
        if *receives {
            assert_eq!(seen, [1, 1, 1], "receiver {n}: each message once");
        }
    }

    // Detached, the first QP stops receiving.
    let (first, first_cq, _, _) = &receivers[0];
    first.detach_mcast(group)?;
    assert!(
        first.detach_mcast(group).is_err(),
        "detaching twice is refused"
    );
    send(0)?;
    assert!(
        first_cq.poll_wait(1, QUIET)?.is_empty(),
        "a detached QP received"
    );
    assert_eq!(
        receivers[1].1.poll_wait(1, WAIT)?.len(),
        1,
        "the other QP still receives"
    );
    assert_eq!(
        receivers[2].1.poll_wait(1, WAIT)?.len(),
        1,
        "the other member too"
    );
    for (qp, ..) in &receivers[1..4] {
        qp.detach_mcast(group)?;
    }
    Ok(())
}

#[test]
fn multicast_on_emulated_devices_over_loopback() -> Result<(), BoxError> {
    let open = |name: &str, ip: &str| Context::open_emulated(name, ip.parse().unwrap(), 4791);
    let (sender, m1, m2, by) = (
        open("tx", "127.79.5.1")?,
        open("m1", "127.79.5.2")?,
        open("m2", "127.79.5.3")?,
        open("by", "127.79.5.4")?,
    );
    story(
        &sender,
        [&m1, &m2],
        &by,
        Gid::from_ip("239.79.5.1".parse()?),
    )
}

#[test]
fn multicast_on_the_simulated_fabric() {
    sim::check(20, |fabric| -> Result<(), BoxError> {
        let sender = fabric.device("tx", "127.79.6.1".parse()?)?;
        let m1 = fabric.device("m1", "127.79.6.2".parse()?)?;
        let m2 = fabric.device("m2", "127.79.6.3".parse()?)?;
        let by = fabric.device("by", "127.79.6.4".parse()?)?;
        story(
            &sender,
            [&m1, &m2],
            &by,
            Gid::from_ip("239.79.6.1".parse()?),
        )
    });
}
