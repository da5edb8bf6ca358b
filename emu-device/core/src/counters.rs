//! Counters like rxe's hw_counters, plus drops by reason.

use core::fmt;

/// Why a received packet was dropped before delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The headers did not parse.
    Malformed,
    /// The ICRC did not verify.
    IcrcMismatch,
    /// P_Key other than the default.
    BadPkey,
    /// No QP with the destination QPN.
    UnknownQpn,
    /// The QP is not in a state that accepts this packet.
    QpNotReady,
    /// The opcode's transport does not match the QP type.
    OpcodeForQpType,
    /// Source or destination IP does not match the QP's address vector (RC/UC).
    AddressMismatch,
    /// UD Q_Key mismatch.
    BadQkey,
    /// The port is down.
    PortDown,
    /// Out-of-sequence packet dropped silently after the NAK was sent.
    OutOfSequence,
    /// A response for no outstanding request.
    UnexpectedResponse,
    /// A packet type the transport engine does not implement, or a UC message dropped.
    Unsupported,
    /// UD/UC: no receive WQE posted.
    NoReceiveWqe,
}

impl DropReason {
    /// Every reason.
    pub const ALL: [Self; 13] = [
        Self::Malformed,
        Self::IcrcMismatch,
        Self::BadPkey,
        Self::UnknownQpn,
        Self::QpNotReady,
        Self::OpcodeForQpType,
        Self::AddressMismatch,
        Self::BadQkey,
        Self::PortDown,
        Self::OutOfSequence,
        Self::UnexpectedResponse,
        Self::Unsupported,
        Self::NoReceiveWqe,
    ];

    /// Counter name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Malformed => "drop_malformed",
            Self::IcrcMismatch => "drop_icrc",
            Self::BadPkey => "drop_bad_pkey",
            Self::UnknownQpn => "drop_unknown_qpn",
            Self::QpNotReady => "drop_qp_not_ready",
            Self::OpcodeForQpType => "drop_opcode_for_qp_type",
            Self::AddressMismatch => "drop_address_mismatch",
            Self::BadQkey => "drop_bad_qkey",
            Self::PortDown => "drop_port_down",
            Self::OutOfSequence => "drop_out_of_sequence",
            Self::UnexpectedResponse => "drop_unexpected_response",
            Self::Unsupported => "drop_unsupported",
            Self::NoReceiveWqe => "drop_no_receive_wqe",
        }
    }
}

/// The device's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent.
    pub sent_pkts: u64,
    /// Packets received and accepted.
    pub rcvd_pkts: u64,
    /// Duplicate requests received (re-ACKed, not re-delivered).
    pub duplicate_request: u64,
    /// Out-of-sequence requests received.
    pub out_of_seq_request: u64,
    /// RNR NAKs received.
    pub rcvd_rnr_err: u64,
    /// RNR NAKs sent.
    pub send_rnr_err: u64,
    /// Sequence-error NAKs received (softroce's responder NAKs a gap three times: the
    /// copies after the first, taken for its echoes, are not counted).
    pub rcvd_seq_err: u64,
    /// ACKs held back to travel with the QP's next packet (`HcaConfig::ack_defer`).
    pub ack_deferred: u64,
    /// Transport retries exhausted.
    pub retry_exceeded_err: u64,
    /// RNR retries exhausted.
    pub retry_rnr_exceeded_err: u64,
    /// Retransmissions started by the requester.
    pub completer_retry_err: u64,
    /// Send errors.
    pub send_err: u64,
    /// Packets retransmitted.
    pub retransmitted_pkts: u64,
    /// Resends started before the local ACK timeout: a path that has shown loss stalled
    /// for a few round trips (adaptive retransmission, not counted against `retry_cnt`).
    pub early_retransmits: u64,
    /// Sequence-error NAKs sent again for a gap: the requester's resend came without the
    /// missing packet (see the responder's `nak_gap`).
    pub seq_nak_repeated: u64,
    /// Bad P_Key packets (port counter).
    pub bad_pkey: u64,
    /// Q_Key violations (port counter).
    pub qkey_violation: u64,
    /// Completions lost to a CQ overrun.
    pub cqe_overrun_lost: u64,
    /// Answers (ACKs, NAKs) a responder dropped, and READ or atomic requests it left
    /// unseen, because its QP already owed as many answers as its responder resources
    /// allow; the requester retries (a request left unseen: on the NAK of what follows).
    pub replies_dropped: u64,
    /// MADs received on QP1 and queued for the layer above (`Hca::poll_mad`).
    pub mad_rcvd: u64,
    /// MADs sent from QP1 (`Hca::send_mad`).
    pub mad_sent: u64,
    /// MADs dropped because the layer above left [`crate::transport::gsi::GSI_RX_QUEUE_LEN`]
    /// of them untaken.
    pub mad_rx_overflow: u64,
    /// Drops by reason, indexed like [`DropReason::ALL`].
    pub drops: [u64; 13],
}

impl Counters {
    /// Count a drop.
    pub fn drop(&mut self, reason: DropReason) {
        let i = DropReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.drops[i] += 1;
    }

    /// Drops of one reason.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        DropReason::ALL
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.drops[i])
    }

    /// Every counter as `(name, value)`, rxe's names first.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        [
            ("sent_pkts", self.sent_pkts),
            ("rcvd_pkts", self.rcvd_pkts),
            ("duplicate_request", self.duplicate_request),
            ("out_of_seq_request", self.out_of_seq_request),
            ("rcvd_rnr_err", self.rcvd_rnr_err),
            ("send_rnr_err", self.send_rnr_err),
            ("rcvd_seq_err", self.rcvd_seq_err),
            ("ack_deferred", self.ack_deferred),
            ("retry_exceeded_err", self.retry_exceeded_err),
            ("retry_rnr_exceeded_err", self.retry_rnr_exceeded_err),
            ("completer_retry_err", self.completer_retry_err),
            ("send_err", self.send_err),
            ("retransmitted_pkts", self.retransmitted_pkts),
            ("bad_pkey", self.bad_pkey),
            ("qkey_violation", self.qkey_violation),
            ("cqe_overrun_lost", self.cqe_overrun_lost),
            ("replies_dropped", self.replies_dropped),
            ("mad_rcvd", self.mad_rcvd),
            ("mad_sent", self.mad_sent),
            ("mad_rx_overflow", self.mad_rx_overflow),
            ("early_retransmits", self.early_retransmits),
            ("seq_nak_repeated", self.seq_nak_repeated),
        ]
        .into_iter()
        .chain(
            DropReason::ALL
                .iter()
                .map(|r| (r.name(), self.drops_of(*r))),
        )
    }
}

impl fmt::Display for Counters {
    /// `name=value` pairs separated by spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, value) in self.iter() {
            if !first {
                f.write_str(" ")?;
            }
            write!(f, "{name}={value}")?;
            first = false;
        }
        Ok(())
    }
}
