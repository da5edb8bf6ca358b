//! Building and queueing packets, and ACKs: the held (deferred) positive ACK of each QP and
//! the ACKs and NAKs sent at once.

use std::net::SocketAddr;
use std::time::Instant;

use softroce_wire::icrc::{self, UdpEndpoints};
use softroce_wire::{BthRepr, ExtRepr, Opcode, Psn, Qpn, RocePacket, RoceRepr};

use super::super::handles::QpHandle;
use super::super::types::QpState;
use super::{Engine, OutPacket};

impl Engine<'_> {
    /// Where packets of a QP go: its address vector's GID and UDP port.
    pub(crate) fn qp_peer(&self, qp: QpHandle) -> Option<SocketAddr> {
        Some(self.store.get(qp)?.attr.ah_attr.destination())
    }

    /// Build a packet from a repr and payload bytes, fill its ICRC for our UDP socket, and
    /// queue it.
    pub(crate) fn queue_packet(&mut self, dst: SocketAddr, repr: &RoceRepr, payload: &[u8]) {
        let mut data = vec![0u8; repr.buffer_len()];
        if repr.emit_with_payload(payload, &mut data).is_err() {
            // A bug in the engine, never input-driven: count it rather than panic.
            self.counters.send_err += 1;
            return;
        }
        let src = self.device.local_addr();
        let ep = UdpEndpoints {
            src: src.ip(),
            dst: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
        };
        let body = data.len() - softroce_wire::ICRC_LEN;
        let Ok(crc) = icrc::compute_for_udp_socket(&ep, &data[..body]) else {
            self.counters.send_err += 1;
            return;
        };
        RocePacket::new_unchecked(&mut data[..]).set_icrc(crc);
        self.counters.sent_pkts += 1;
        self.outbox.packets.push_back(OutPacket { dst, data });
    }

    /// Queue an ACK or NAK now (a held positive ACK goes first, keeping PSN order).
    pub(crate) fn queue_ack(&mut self, qp: QpHandle, psn: Psn, syndrome: softroce_wire::Syndrome) {
        self.flush_deferred_ack(qp);
        self.queue_ack_now(qp, psn, syndrome);
    }

    /// A positive ACK for `psn`, received at `now`: held back up to `ack_defer` for the
    /// QP's next packet, or sent at once when deferral is off.
    pub(crate) fn ack(&mut self, now: Instant, qp: QpHandle, psn: Psn) {
        let defer = self.device.config().ack_defer;
        if defer.is_zero() {
            return self.queue_ack(qp, psn, softroce_wire::Syndrome::ACK);
        }
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        let due = q.transport.deferred_ack.map_or(now + defer, |(_, due)| due);
        q.transport.deferred_ack = Some((psn, due));
        self.counters.ack_deferred += 1;
    }

    /// Send the QP's held ACK, if any (before its next packet, or when it is due).
    pub(crate) fn flush_deferred_ack(&mut self, qp: QpHandle) {
        let Some(q) = self.store.get_mut(qp) else {
            return;
        };
        let Some((psn, _)) = q.transport.deferred_ack.take() else {
            return;
        };
        if matches!(q.attr.qp_state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            self.queue_ack_now(qp, psn, softroce_wire::Syndrome::ACK);
        }
    }

    fn queue_ack_now(&mut self, qp: QpHandle, psn: Psn, syndrome: softroce_wire::Syndrome) {
        let Some(q) = self.store.get(qp) else {
            return;
        };
        let dest = Qpn::from_wire(q.attr.dest_qp_num);
        let msn = softroce_wire::Msn::new(q.transport.msn);
        let Some(dst) = self.qp_peer(qp) else {
            return;
        };
        let repr = RoceRepr::new(
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, dest, psn),
            ExtRepr {
                aeth: Some(softroce_wire::AethRepr { syndrome, msn }),
                ..ExtRepr::default()
            },
            0,
        );
        self.queue_packet(dst, &repr, &[]);
    }
}
