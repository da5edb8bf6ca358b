//! Sequences of requests against a device's RC responder, the device sending only part of
//! what it owes between them: new and duplicate READs from any PSN and offset (so replays
//! restart answers still being built), atomics and their replays, raw datagrams:
//! `cargo +nightly fuzz run responder`. Panics if a byte outside the writable region changes.
#![no_main]

use softroce_emu::sim::fuzzing::Target;
use softroce_wire::{AtomicEthRepr, BthRepr, ExtRepr, Opcode, Psn, Qpn, RethRepr, RoceRepr};

/// One record: a kind byte (low 3 bits: what; high 5: how many datagrams the device may send
/// after it, in fours), five argument bytes, and for raw datagrams the bytes themselves.
fn request(t: &Target, kind: u8, arg: [u8; 5], raw: &[u8]) -> Vec<u8> {
    let qpn = Qpn::from_wire(t.qpns().first().copied().unwrap_or(0));
    let psn = Psn::new(100 + u32::from(arg[0] % 64));
    // Offsets reach a little outside the window on both sides.
    let va = (t.va as i64 + i64::from(u16::from_le_bytes([arg[1], arg[2]])) - 4096) as u64;
    let len = u32::from(u16::from_le_bytes([arg[3], arg[4]]));
    let (op, ext) = match kind & 7 {
        0..=2 => (
            Opcode::RC_RDMA_READ_REQUEST,
            ExtRepr {
                reth: Some(RethRepr {
                    va,
                    rkey: t.rkey,
                    dma_len: len,
                }),
                ..ExtRepr::default()
            },
        ),
        3 | 4 => (
            if kind & 7 == 3 {
                Opcode::RC_FETCH_ADD
            } else {
                Opcode::RC_COMPARE_SWAP
            },
            ExtRepr {
                atomic_eth: Some(AtomicEthRepr {
                    va,
                    rkey: t.rkey,
                    swap_add: u64::from(len),
                    compare: 0,
                }),
                ..ExtRepr::default()
            },
        ),
        _ => return raw.to_vec(),
    };
    let repr = RoceRepr::new(BthRepr::new(op, qpn, psn), ext, 0);
    let mut out = vec![0u8; repr.buffer_len()];
    let _ = repr.emit_with_payload(&[], &mut out);
    out
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut t = Target::new();
    let mut rest = data;
    for _ in 0..64 {
        let Some((&kind, tail)) = rest.split_first() else {
            break;
        };
        let mut arg = [0u8; 5];
        let n = tail.len().min(5);
        arg[..n].copy_from_slice(&tail[..n]);
        let tail = &tail[n..];
        let raw_len = usize::from(arg[0]).min(tail.len());
        let (raw, tail) = if kind & 7 >= 5 {
            tail.split_at(raw_len)
        } else {
            (&[][..], tail)
        };
        rest = tail;
        let packet = request(&t, kind, arg, raw);
        let sends = usize::from(kind >> 3) * 4;
        t.deliver_then_send(t.peer(), &packet, true, sends);
    }
    t.check_guards();
});
