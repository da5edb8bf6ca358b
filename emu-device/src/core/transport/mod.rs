//! The transport engine's entry points: requester, responder and completer for RC, UC and
//! UD hang off these functions.
//!
//! Plug-in points for the objects layer: WQEs live in `Qp::sq` / `Qp::rq` (or the SRQ via
//! `Hca::take_srq_wqe`); completions go through `Hca::push_completion` /
//! `Hca::push_recv_completion`; fatal errors through `Hca::qp_to_error`; memory through
//! `core::memory` after `Hca::mr_by_key` checks; counters in `Hca::counters`.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use softroce_wire::Psn;

use super::counters::DropReason;
use super::handles::QpHandle;
use super::hca::Hca;

/// A datagram as the driver received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingDatagram<'a> {
    /// Sender address and port.
    pub src: SocketAddr,
    /// The local address it was received on.
    pub dst: IpAddr,
    /// The UDP payload: a RoCEv2 packet.
    pub payload: &'a [u8],
}

/// A datagram to send; its bytes are in the buffer given to `poll_transmit`.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub destination: SocketAddr,
    /// Source address (the device's).
    pub source: SocketAddr,
    /// Bytes written to the buffer.
    pub len: usize,
}

/// Per-QP transport state.
#[derive(Debug, Default, Clone)]
pub(crate) struct QpTransport {
    /// Next PSN the requester sends.
    pub(crate) sq_psn: Psn,
    /// Next PSN the responder expects.
    pub(crate) rq_psn: Psn,
    /// WQEs of the SQ that have been (partly) sent and not completed.
    pub(crate) in_flight: usize,
}

impl QpTransport {
    pub(crate) fn on_rtr(&mut self, rq_psn: Psn) {
        self.rq_psn = rq_psn;
    }

    pub(crate) fn on_rts(&mut self, sq_psn: Psn) {
        self.sq_psn = sq_psn;
    }

    pub(crate) fn on_flush(&mut self) {
        self.in_flight = 0;
    }

    pub(crate) fn nothing_in_flight(&self) -> bool {
        self.in_flight == 0
    }
}

pub(crate) fn handle_datagram(hca: &mut Hca, _now: Instant, _datagram: IncomingDatagram<'_>) {
    hca.counters.drop(DropReason::Unsupported);
}

pub(crate) fn poll_transmit(_hca: &mut Hca, _now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
    buf.clear();
    None
}

pub(crate) fn poll_timeout(_hca: &Hca) -> Option<Instant> {
    None
}

pub(crate) fn handle_timeout(_hca: &mut Hca, _now: Instant) {}

pub(crate) fn on_post_send(_hca: &mut Hca, _qp: QpHandle) {}

pub(crate) fn on_post_recv(_hca: &mut Hca, _qp: QpHandle) {}
