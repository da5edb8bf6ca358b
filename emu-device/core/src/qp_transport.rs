//! Per-QP transport state, kept in each QP: sequence numbers, timers, the message being
//! received, the responder's replay cache and a held ACK.

use std::collections::VecDeque;
use std::time::Instant;

use softroce_wire::{Psn, Syndrome};

use super::tm::{Rvh, TmTag};
use super::types::{WcFlags, WcOpcode};
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
    /// An ATOMIC WRITE executed: a duplicate is acknowledged again, never stored twice.
    AtomicWrite {
        psn: Psn,
    },
}

/// READ response packets still owed: built one at a time when the transmit path asks
/// (rxe's `read_reply` working from `res->cur_psn`, `read.va`, `read.resid`), so a READ of any
/// length costs the responder one packet of memory at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadCursor {
    /// The request (or duplicate) being answered: a failure NAKs this PSN.
    pub(crate) req_psn: Psn,
    /// The READ resource answered (its first PSN): a duplicate restarts this cursor.
    pub(crate) res_psn: Psn,
    /// PSN of the next response.
    pub(crate) psn: Psn,
    /// Address of its first byte.
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    /// Bytes still to send.
    pub(crate) resid: u32,
    /// The next response opens the reply (FIRST or ONLY).
    pub(crate) first: bool,
    /// The MSN the responses carry (as when the request was answered).
    pub(crate) msn: u32,
}

/// An ACK, NAK or atomic ACK owed behind READ responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckReply {
    pub(crate) psn: Psn,
    pub(crate) syndrome: Syndrome,
    pub(crate) msn: u32,
    pub(crate) kind: AckKind,
}

/// The packet an acknowledgement travels in: rxe answers each request type with its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckKind {
    /// ACKNOWLEDGE: SEND, WRITE, and every NAK.
    Plain,
    /// ATOMIC ACKNOWLEDGE with the original value.
    Atomic(u64),
    /// ATOMIC WRITE: a READ RESPONSE ONLY without data (rxe's `send_read_response_ack`).
    AtomicWrite,
}

/// What the responder still owes the peer, in request order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply {
    Read(ReadCursor),
    Ack(AckReply),
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
    /// A rendezvous request of several packets whose FIRST matched `tag`: the rest is its
    /// application header, dropped; its LAST starts the READ of `rvh` (see `tm_rndv`).
    Rndv {
        tag: TmTag,
        rvh: Rvh,
        /// The message's tag, which the FIN carries.
        msg_tag: u64,
    },
}

/// How the message being received through a tag matching SRQ completes: the opcode,
/// flags and `tm_info` its receive completion carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TmDelivery {
    pub(crate) opcode: WcOpcode,
    pub(crate) flags: WcFlags,
    pub(crate) tag: u64,
    pub(crate) app_ctx: u32,
}

/// Per-QP transport state.
#[derive(Debug, Default, Clone)]
pub(crate) struct QpTransport {
    /// The message in progress was received through a tag matching SRQ.
    pub(crate) tm_delivery: Option<TmDelivery>,
    // ---- requester / completer
    /// Next PSN for a request not sent before.
    pub(crate) sq_psn: Psn,
    /// Oldest PSN not yet acknowledged.
    pub(crate) comp_psn: Psn,
    /// The PSN after the last request packet sent (PSNs of a message not sent yet are
    /// reserved, `sq_psn`, but not in flight).
    pub(crate) sent_psn: Psn,
    /// Index in the SQ of the next WQE with packets to (re)send.
    pub(crate) send_index: usize,
    /// Retransmit deadline.
    pub(crate) retrans_at: Option<Instant>,
    /// RNR back-off deadline; sending pauses until then.
    pub(crate) rnr_at: Option<Instant>,
    /// Transport retries left for the oldest outstanding request.
    pub(crate) retry_left: u8,
    /// Copies still to come of the sequence-error NAK that last had the queue resent
    /// (nothing acknowledged since): NAKs of that PSN taken for its echoes start no other
    /// resend (softroce's responder sends each NAK `NAK_COPIES` times, see its `nak_gap`;
    /// rxe's `started_retry` ignores such echoes).
    pub(crate) nak_echoes_due: u8,
    /// The PSN a sequence-error NAK had the queue resent from, until the next progress.
    pub(crate) nak_resent: Option<Psn>,
    /// Resends on a repeat of that NAK still allowed without counting a retry.
    pub(crate) free_renak_resends: u8,
    /// RNR retries left.
    pub(crate) rnr_left: u8,
    /// The peer and the request PSNs this QP counts in the device's bound on those in
    /// flight to that peer.
    pub(crate) inflight_share: Option<(std::net::SocketAddr, u32)>,
    /// Where the outbox last found this QP's peer in its bound's table: a hint, checked
    /// against the address before use (see `transport::admission`).
    pub(crate) admission_slot: usize,
    /// Refused for lack of room under that bound; made active again when there is.
    pub(crate) awaiting_room: bool,
    /// The round trip and the early resend of a path that has shown loss.
    pub(crate) recovery: crate::transport::recovery::Recovery,
    // ---- responder
    /// Next expected request PSN.
    pub(crate) rq_psn: Psn,
    /// Messages completed (AETH MSN).
    pub(crate) msn: u32,
    /// A PSN-sequence NAK was sent for the current gap.
    pub(crate) nak_sent: bool,
    /// The PSNs 1 to 64 past the current gap (bit 0: `rq_psn` + 1) that arrived since the
    /// gap's NAK, or its last repeat: one arriving again means the requester resent and
    /// the missing packet is missing again.
    pub(crate) gap_seen: u64,
    /// Positive ACKs still to send twice since the last gap (see
    /// `transport::acks::LOSSY_ACK_COPIES`).
    pub(crate) acks_twice_left: u16,
    /// UC: drop packets until the next FIRST/ONLY.
    pub(crate) uc_resync: bool,
    pub(crate) in_progress: InProgress,
    /// XRC target: the XRC SRQ the request being handled named (checked against the
    /// QP's domain); its PD, CQ and queue serve the request.
    pub(crate) xrc_srq: Option<super::handles::SrqHandle>,
    /// XRC target: the XRC SRQ the FIRST packet of the message in progress named; its
    /// MIDDLE and LAST packets must name the same.
    pub(crate) xrc_msg_srq: Option<super::handles::SrqHandle>,
    pub(crate) resources: VecDeque<Resource>,
    /// Answers owed while READ responses are being sent (bounded: `replies_cap`).
    pub(crate) replies: VecDeque<Reply>,
    /// COMM_EST was raised.
    pub(crate) comm_est: bool,
    /// A positive ACK held back (its PSN, and when it must go at the latest).
    pub(crate) deferred_ack: Option<(Psn, Instant)>,
    /// Requests asking for an ACK that the held one answers.
    pub(crate) deferred_ack_reqs: u32,
    /// The last held ACK went out alone when its time came: the application does not
    /// answer on this QP (a one-way sender), so its ACKs go once the packets they arrived
    /// with are handled rather than waiting for an answer. Cleared when the QP sends a
    /// request again.
    pub(crate) ack_unanswered: bool,
    /// The PSN of the last held ACK sent (how far the held one reaches past it).
    pub(crate) last_ack_sent: Option<Psn>,
    /// The deadline the QP is filed under in the engine's `Timers`, if any.
    pub(crate) timer_key: Option<Instant>,
}

impl QpTransport {
    /// The peer acknowledged progress: the retry counts start again (`retry_cnt`, from
    /// the QP's attributes).
    pub(crate) fn restart_retries(&mut self, retry_cnt: u8) {
        self.retry_left = retry_cnt;
        self.nak_echoes_due = 0;
        self.nak_resent = None;
        self.free_renak_resends = crate::transport::completer::FREE_RENAK_RESENDS;
    }

    /// Whether a NAK naming `psn` as the responder's next expected falls outside what is in
    /// flight: before the oldest unacknowledged PSN or past the last one sent.
    pub(crate) fn nak_outside_flight(&self, psn: Psn) -> bool {
        psn.is_before(self.comp_psn) || self.sent_psn.is_before(psn)
    }

    pub(crate) fn on_rtr(&mut self, rq_psn: Psn) {
        self.rq_psn = rq_psn;
        self.nak_sent = false;
        self.gap_seen = 0;
        self.in_progress = InProgress::None;
    }

    pub(crate) fn on_rts(&mut self, sq_psn: Psn) {
        self.sq_psn = sq_psn;
        self.comp_psn = sq_psn;
        self.sent_psn = sq_psn;
        self.send_index = 0;
    }

    pub(crate) fn on_flush(&mut self) {
        self.send_index = 0;
        self.disarm_retransmit();
        self.rnr_at = None;
        self.in_progress = InProgress::None;
        self.tm_delivery = None;
    }
}
