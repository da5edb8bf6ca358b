//! QP1, the General Services Interface: the special UD QP every port has for management
//! datagrams (the CM's REQ, REP, … on RoCE). The core only moves MADs: received ones are
//! checked as rxe checks a GSI packet and queued for the layer above (`Hca::poll_mad`);
//! MADs given to `Hca::send_mad` leave as the kernel's MAD layer sends them through rxe.
//! What a MAD means is the business of that layer (the CM).
//!
//! On the wire (kernel `mad.c` + rxe `rxe_req.c`): UD SEND_ONLY to QPN 1, BTH P_Key 0xFFFF,
//! AckReq set (rxe sets it for every QP type but UD and UC, and QP1 is GSI), PSN counting
//! from 0 (`IB_MAD_SEND_Q_PSN`), DETH Q_Key 0x80010000 with source QP 1, a 256-byte MAD
//! (no pad). The UDP source port is the device's socket port, as for all its traffic
//! (receivers ignore it; rxe would use `ud_source_port(1)`).

use std::collections::VecDeque;
use std::net::SocketAddr;

use softroce_wire::mad::{MAD_LEN, QP1_QKEY};
use softroce_wire::{BthRepr, DethRepr, ExtRepr, Gid, Opcode, Psn, Qpn, RocePacket, RoceRepr};

use super::{Engine, IncomingDatagram};
use crate::counters::DropReason;

/// The GSI QP's number.
pub const GSI_QPN: u32 = 1;

/// MADs received and not yet taken by the layer above; more are dropped (and counted), so
/// a flood of MADs costs bounded memory, as the kernel's bounded QP1 receive queue does.
pub const GSI_RX_QUEUE_LEN: usize = 512;

/// A MAD that arrived on QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMad {
    /// The sender's address and UDP port (answers go back there).
    pub src: SocketAddr,
    /// The sender's GID (its address as a RoCEv2 GID).
    pub sgid: Gid,
    /// The sending QP (DETH source QP; 1 for the peer's GSI agent).
    pub src_qpn: Qpn,
    /// The BTH P_Key.
    pub pkey: u16,
    /// The 256-byte MAD, unparsed: the layer above decodes it.
    pub mad: Box<[u8; MAD_LEN]>,
}

/// QP1's state: the receive queue and the send PSN.
#[derive(Debug, Default)]
pub(crate) struct Gsi {
    rx: VecDeque<ReceivedMad>,
    next_psn: u32,
}

impl Gsi {
    pub(crate) fn poll(&mut self) -> Option<ReceivedMad> {
        self.rx.pop_front()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// A datagram for QP1 (BTH, P_Key and ICRC already checked): rxe's checks for a GSI QP,
/// then the MAD is queued.
pub(crate) fn on_datagram(
    eng: &mut Engine<'_>,
    packet: &RocePacket<&[u8]>,
    bth: &BthRepr,
    d: IncomingDatagram<'_>,
) {
    if bth.opcode != Opcode::UD_SEND_ONLY {
        eng.counters.drop(DropReason::OpcodeForQpType);
        return;
    }
    let Some(deth) = packet.deth() else {
        eng.counters.drop(DropReason::Malformed);
        return;
    };
    if deth.qkey() != QP1_QKEY {
        eng.counters.qkey_violation += 1;
        eng.counters.drop(DropReason::BadQkey);
        return;
    }
    let Ok(mad) = <[u8; MAD_LEN]>::try_from(packet.payload()) else {
        // A GSI receive buffer holds exactly one MAD; anything else is not one.
        eng.counters.drop(DropReason::Malformed);
        return;
    };
    if eng.gsi.rx.len() >= GSI_RX_QUEUE_LEN {
        eng.counters.mad_rx_overflow += 1;
        eng.counters.drop(DropReason::NoReceiveWqe);
        return;
    }
    eng.counters.rcvd_pkts += 1;
    eng.counters.mad_rcvd += 1;
    eng.gsi.rx.push_back(ReceivedMad {
        src: d.src,
        sgid: Gid::from_ip(d.src.ip()),
        src_qpn: deth.src_qpn(),
        pkey: bth.pkey,
        mad: Box::new(mad),
    });
}

/// Queue `mad` from QP1 to `remote_qpn` at `dst`.
pub(crate) fn send(eng: &mut Engine<'_>, dst: SocketAddr, remote_qpn: Qpn, mad: &[u8; MAD_LEN]) {
    let psn = Psn::new(eng.gsi.next_psn);
    eng.gsi.next_psn = psn.next().value();
    let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, remote_qpn, psn);
    bth.ack_req = true;
    let ext = ExtRepr {
        deth: Some(DethRepr {
            qkey: QP1_QKEY,
            reserved: 0,
            src_qpn: Qpn::from_wire(GSI_QPN),
        }),
        ..ExtRepr::default()
    };
    eng.flush_held_acks();
    // MADs leave with traffic class 0 (the CM's path carries the connection's own).
    let dst = super::Dest {
        addr: dst,
        traffic_class: 0,
    };
    eng.queue_packet(dst, &RoceRepr::new(bth, ext, MAD_LEN), mad);
    eng.counters.mad_sent += 1;
}
