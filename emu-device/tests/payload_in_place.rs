//! A request packet's payload can leave straight from registered memory
//! (`HcaConfig::payload_by_reference`): the core writes the headers, takes the ICRC over the
//! memory where it lies through the installed copier, and names the piece in
//! `Transmit::payload` for the driver to send from there (the kernel's copy then being the
//! only one). Full-MTU pieces of one gather entry go that way, shorter ones are copied; what
//! a peer receives is, byte for byte, what the copying path sends.

mod common;

use std::time::{Duration, Instant};

use common::*;
use softroce_emu::core::*;
use softroce_wire::{Mtu, icrc};

/// The driver's copier without its fault safety (the memory here stays mapped); the CRC
/// hook is what lets payloads stay in place. Installed once for this test binary.
fn install_plain_copier() {
    unsafe fn read(src: u64, dst: &mut [u8]) -> usize {
        // SAFETY: the core passes registered, mapped ranges.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        0
    }
    unsafe fn write(dst: u64, src: &[u8]) -> usize {
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        0
    }
    unsafe fn store(dst: u64, value: u64) -> usize {
        // SAFETY: an aligned, registered 8 bytes.
        unsafe { (dst as *mut u64).write_volatile(value) };
        0
    }
    unsafe fn crc(so_far: u32, addr: u64, len: usize) -> Option<u32> {
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        Some(icrc::continue_crc(so_far, bytes))
    }
    install_copier(AppCopier {
        read,
        write,
        store_u64_release: store,
        crc,
    });
}

fn pair(payload_by_reference: bool) -> Pair {
    Pair::new(Options {
        mtu: Mtu::Mtu1024,
        payload_by_reference,
        ..Options::default()
    })
}

/// Every datagram `side` has to send now, with the payload each names.
fn drain(p: &mut Pair, side: char) -> Vec<(Transmit, Vec<u8>)> {
    let now = Instant::now();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    // Bounded: one message's packets.
    for _ in 0..64 {
        let Some(t) = p.hca(side).poll_transmit(now, &mut buf) else {
            break;
        };
        out.push((t, buf[..t.len].to_vec()));
    }
    out
}

#[test]
fn a_messages_full_pieces_leave_from_where_they_lie_and_make_whole_packets_there() {
    install_plain_copier();
    let data = pattern(7, 5000);
    let (mut in_place, mut copying) = (pair(true), pair(false));
    for p in [&mut in_place, &mut copying] {
        p.side('a').mem.write(0, &data);
        let wr = p.rdma_wr('a', WrOpcode::RdmaWrite, 1, 0, 0, data.len());
        p.post_send('a', wr);
    }
    let copied = drain(&mut copying, 'a');
    assert!(
        copied.iter().all(|(t, _)| t.payload.is_none()),
        "off by default: every packet is whole in its buffer"
    );
    let sent = drain(&mut in_place, 'a');
    assert_eq!(sent.len(), 5, "FIRST, three MIDDLE and a LAST of 904 bytes");
    let lens = |v: &[(Transmit, Vec<u8>)]| v.iter().map(|(t, _)| t.len).collect::<Vec<_>>();
    assert_eq!(lens(&sent), lens(&copied), "the same packets either way");

    let src = in_place.side('a').mem.addr(0);
    for (k, (t, mut bytes)) in sent.into_iter().enumerate() {
        let headers = if k == 0 { 12 + 16 } else { 12 };
        if k < 4 {
            let p = t
                .payload
                .expect("a full MTU of one gather entry stays in place");
            assert_eq!(
                (p.at, p.addr, p.len),
                (headers, src + 1024 * k as u64, 1024)
            );
            // SAFETY: the pair's registered memory, alive.
            unsafe { p.fill(&mut bytes) };
        } else {
            assert_eq!(t.payload, None, "904 bytes are copied: below the minimum");
        }
        let chunk = &data[1024 * k..(1024 * (k + 1)).min(data.len())];
        assert_eq!(
            &bytes[headers..headers + chunk.len()],
            chunk,
            "packet {k}'s payload"
        );
        let ep = icrc::UdpEndpoints::between(t.source, t.destination);
        let (body, icrc_bytes) = bytes.split_at(bytes.len() - 4);
        assert_eq!(
            icrc::compute_for_udp_socket(&ep, body)
                .unwrap()
                .to_le_bytes(),
            icrc_bytes,
            "packet {k}: the ICRC taken over the memory in place is the whole packet's"
        );
        in_place.hca('b').handle_datagram(
            Instant::now(),
            IncomingDatagram {
                src: t.source,
                dst: t.destination.ip(),
                payload: &bytes,
                traffic_class: 0,
                ipv4_id: None,
            },
        );
    }
    assert_eq!(
        in_place.side('b').mem.read(0, data.len()),
        data,
        "the WRITE landed"
    );
    assert_eq!(
        in_place.counters('b').drops.iter().sum::<u64>(),
        0,
        "no packet was refused"
    );
}

#[test]
fn through_a_fabric_that_copies_the_named_pieces_in_messages_of_every_shape_arrive_intact() {
    install_plain_copier();
    let mut p = Pair::new(Options {
        mtu: Mtu::Mtu4096,
        payload_by_reference: true,
        mem_len: 1 << 20,
        ..Options::default()
    });
    // Sizes around the minimum and the MTU, a message of many packets, a SEND split over
    // two gather entries (its piece across both is copied), and a READ.
    let mut expected = Vec::new();
    let mut off = 0;
    for (i, len) in [1023usize, 1024, 4095, 4096, 4097, 65536, 200_000]
        .into_iter()
        .enumerate()
    {
        let data = pattern(i as u8, len);
        p.side('a').mem.write(off, &data);
        let wr = p.rdma_wr('a', WrOpcode::RdmaWrite, i as u64, off, off, len);
        p.post_send('a', wr);
        expected.push((off, data));
        off += len.next_multiple_of(4096);
    }
    let split = pattern(99, 10_000);
    p.side('a').mem.write(off, &split);
    p.post_recv('b', 100, off, split.len());
    let mut wr = p.send_wr('a', 100, off, 6000);
    wr.sg_list.push(p.side('a').mem.sge(off + 6000, 4000));
    p.post_send('a', wr);
    expected.push((off, split));

    // READ responses leave from the responder's region the same way.
    let served = pattern(42, 150_000);
    let (there, here) = (off + 16_384, off + 16_384 + 151_552);
    p.side('b').mem.write(there, &served);
    let read = p.rdma_wr('a', WrOpcode::RdmaRead, 200, here, there, served.len());
    p.post_send('a', read);

    let done = p.completions('a', 9, Duration::from_secs(5));
    assert_eq!(done.len(), 9, "every request completed: {done:?}");
    assert!(
        done.iter().all(|c| c.status == WcStatus::Success),
        "{done:?}"
    );
    for (off, data) in expected {
        assert_eq!(
            p.side('b').mem.read(off, data.len()),
            data,
            "{} bytes at {off}",
            data.len()
        );
    }
    assert_eq!(p.side('a').mem.read(here, served.len()), served, "the READ");
}
