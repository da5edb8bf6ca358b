//! Per-QP transport state, kept in each QP: sequence numbers, timers, the message being
//! received, the responder's replay cache and a held ACK.

use std::collections::VecDeque;
use std::time::Instant;

use softroce_wire::Psn;

use super::wr::RecvWr;

/// A READ or atomic the responder executed, kept to answer duplicates without
/// re-executing (IBTA 9.7.5.1.4; rxe's `resp_res`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    Read {
        first_psn: Psn,
        npkts: u32,
        va: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

/// A message being received in several packets.
#[derive(Debug, Clone, Default)]
pub(crate) enum InProgress {
    #[default]
    None,
    Send {
        wqe: RecvWr,
        from_srq: bool,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        len: u32,
        offset: u64,
    },
}

/// Per-QP transport state.
#[derive(Debug, Default, Clone)]
pub(crate) struct QpTransport {
    // ---- requester / completer
    /// Next PSN for a request not sent before.
    pub(crate) sq_psn: Psn,
    /// Oldest PSN not yet acknowledged.
    pub(crate) comp_psn: Psn,
    /// Index in the SQ of the next WQE with packets to (re)send.
    pub(crate) send_index: usize,
    /// Retransmit deadline.
    pub(crate) retrans_at: Option<Instant>,
    /// RNR back-off deadline; sending pauses until then.
    pub(crate) rnr_at: Option<Instant>,
    /// Transport retries left for the oldest outstanding request.
    pub(crate) retry_left: u8,
    /// RNR retries left.
    pub(crate) rnr_left: u8,
    // ---- responder
    /// Next expected request PSN.
    pub(crate) rq_psn: Psn,
    /// Messages completed (AETH MSN).
    pub(crate) msn: u32,
    /// A PSN-sequence NAK was sent for the current gap.
    pub(crate) nak_sent: bool,
    /// UC: drop packets until the next FIRST/ONLY.
    pub(crate) uc_resync: bool,
    pub(crate) in_progress: InProgress,
    pub(crate) resources: VecDeque<Resource>,
    /// COMM_EST was raised.
    pub(crate) comm_est: bool,
    /// A positive ACK held back (its PSN, and when it must go at the latest).
    pub(crate) deferred_ack: Option<(Psn, Instant)>,
}

impl QpTransport {
    pub(crate) fn on_rtr(&mut self, rq_psn: Psn) {
        self.rq_psn = rq_psn;
        self.nak_sent = false;
        self.in_progress = InProgress::None;
    }

    pub(crate) fn on_rts(&mut self, sq_psn: Psn) {
        self.sq_psn = sq_psn;
        self.comp_psn = sq_psn;
        self.send_index = 0;
    }

    pub(crate) fn on_flush(&mut self) {
        self.send_index = 0;
        self.retrans_at = None;
        self.rnr_at = None;
        self.in_progress = InProgress::None;
    }
}
