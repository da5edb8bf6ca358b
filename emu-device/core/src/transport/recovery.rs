//! Loss recovery beyond the sequence NAK: a narrower window on a lossy path, and adaptive
//! retransmission (`HcaConfig::adaptive_retransmit`, off by default).
//!
//! A lossy path sends with a narrower window ([`Recovery::window`]): go-back-N resends
//! everything sent after a lost packet, and a requester sends its whole window before the
//! NAK can come back, so each loss cost about a window (67 of rxe's 128 PSNs on average, at
//! 1 % loss 40 % of all packets sent were resends). A quarter of the window and an ACK
//! asked for four times as often cut that, at a cost a loss-free path never pays. How much
//! a requester keeps in flight is its own business, so this holds with or without adaptive
//! retransmission (1 MiB WRITEs under 1 % loss through perftest: 1.4-2.0 GB/s with the full
//! window, 2.6-3.7 with the narrow one).
//!
//! Adaptive retransmission: once an RC requester's path has shown loss (a sequence-error
//! NAK or an ACK timeout), a stall of a few measured round trips resends from the oldest
//! unacknowledged PSN instead of waiting out the whole local ACK timeout.
//!
//! The local ACK timeout (`timeout`, 4.096 us * 2^N: 67 ms for rdma-core's default 14) is
//! sized for a fabric's worst case. Against softroce's responder (which NAKs each gap thrice
//! and NAKs a resend that lost its first packet again, see the responder's `nak_gap`) only a
//! lost last packet before a pause needs it; against rxe's (one NAK per gap, then silence)
//! a lost NAK and a lost resend do too. ConnectX offers the same (adaptive retransmission).
//! It departs from ibv_modify_qp(3), whose `timeout` is the least a QP waits for an ACK or
//! NAK before retransmitting, hence opt-in. What stays as the man pages say: only the
//! local ACK timeout and sequence NAKs count against `retry_cnt`; an early resend is a
//! duplicate the responder acknowledges again, counted in `early_retransmits`. A path that
//! never lost anything (a clean interop run) never resends early: nothing spurious for a
//! slow peer.

use std::time::{Duration, Instant};

use softroce_wire::Psn;

use super::ack_timeout;
use crate::qp_transport::QpTransport;

/// Early resends between two ACKs that make progress, each after twice the wait before.
const EARLY_RESENDS: u8 = 3;
/// How long loss keeps a path in adaptive mode after it was last seen.
const LOSS_MEMORY: Duration = Duration::from_secs(1);
/// How many PSNs an RC requester may have unacknowledged, and every how many packets of a
/// long message it asks for an ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) psns: u32,
    pub(crate) pkts_per_ack: u32,
}

/// What a path that lost nothing gets: twice rxe's RXE_MAX_UNACKED_PSNS (128), an ACK asked
/// every RXE_MAX_PKT_PER_ACK (64) packets as rxe. With 128 a sender at 4 KiB MTU waits for
/// the ACK of one half of its window while the peer still copies the other: 1 MiB READ
/// 4.6-4.8 GB/s with 128, 6.9 with 256, SEND 5.2-6.6 against 6.2-6.5; 512 made SEND worse
/// (4.6-4.8: the peer's socket buffer overflowed into go-back-N). Loopback, Zen 5, perftest.
pub(crate) const FULL_WINDOW: Window = Window {
    psns: 256,
    pkts_per_ack: 64,
};
/// A lossy path's. Measured on loopback, 1 MiB WRITEs
/// under 1 % loss: 128/64 moved 1.9-2.1 GB/s, 96/16 2.1-2.2, 64/16 2.2-2.4, 32/8 2.3-2.5,
/// 16/4 1.75; 32 would cost a path that lost a single packet most (2.6 GB/s loss-free
/// with 32, 4.4 with 128).
const LOSSY_WINDOW: Window = Window {
    psns: 64,
    pkts_per_ack: 16,
};

/// The shortest stall that starts an early resend: above a busy host's scheduling
/// hiccups, far below any timeout an application picks.
const MIN_STALL: Duration = Duration::from_micros(500);

/// A QP's view of its round trip, RFC 6298 style, from one packet timed at a time.
#[derive(Debug, Default, Clone)]
pub(crate) struct Recovery {
    /// Smoothed round trip (zero until the first sample).
    srtt: Duration,
    /// Its mean deviation.
    rttvar: Duration,
    /// The packet being timed: its PSN and when it first left. A resend stops the timing
    /// (Karn: an ACK after a resend says nothing about either copy).
    probe: Option<(Psn, Instant)>,
    /// When loss was last seen on the path.
    loss_seen_at: Option<Instant>,
    /// When the stall that starts an early resend ends.
    pub(crate) early_at: Option<Instant>,
    /// Early resends left before the next progress.
    early_left: u8,
    /// Whether a stall may start a resend before the ACK timeout (adaptive
    /// retransmission); without, loss only narrows the window.
    early_resends: bool,
}

impl Recovery {
    /// A request packet left for the first time.
    pub(crate) fn on_first_send(&mut self, psn: Psn, now: Instant) {
        if self.probe.is_none() {
            self.probe = Some((psn, now));
        }
    }

    /// Everything before `next` is acknowledged (as of `now`): progress.
    pub(crate) fn on_acked_before(&mut self, next: Psn, now: Instant) {
        self.early_left = EARLY_RESENDS;
        if let Some((psn, sent)) = self.probe
            && psn.is_before(next)
        {
            self.probe = None;
            let sample = now.saturating_duration_since(sent);
            if self.srtt.is_zero() {
                self.srtt = sample;
                self.rttvar = sample / 2;
            } else {
                let deviation = self.srtt.abs_diff(sample);
                self.rttvar = (self.rttvar * 3 + deviation) / 4;
                self.srtt = (self.srtt * 7 + sample) / 8;
            }
        }
    }

    /// Packets go out again (a NAK, a timeout, an early resend).
    pub(crate) fn on_resend(&mut self) {
        self.probe = None;
    }

    /// The path lost something (a sequence-error NAK or an ACK timeout); `early_resends`
    /// is the device's `adaptive_retransmit`.
    pub(crate) fn on_loss(&mut self, now: Instant, early_resends: bool) {
        self.loss_seen_at = Some(now);
        self.early_resends = early_resends;
    }

    /// Whether the path lost something within the last [`LOSS_MEMORY`].
    fn lossy(&self, now: Instant) -> bool {
        self.loss_seen_at
            .is_some_and(|t| now.saturating_duration_since(t) < LOSS_MEMORY)
    }

    /// The send window as of `now`: narrower while the path is lossy.
    pub(crate) fn window(&self, now: Instant) -> Window {
        if self.lossy(now) {
            LOSSY_WINDOW
        } else {
            FULL_WINDOW
        }
    }

    /// The stall before an early resend, on a lossy path whose round trip is known and
    /// well inside the local ACK timeout.
    fn stall(&self, now: Instant, timeout: u8) -> Option<Duration> {
        if !self.early_resends || !self.lossy(now) || self.srtt.is_zero() {
            return None;
        }
        let stall = (self.srtt + (self.rttvar * 4).max(self.srtt)).max(MIN_STALL);
        ack_timeout(timeout)
            .filter(|t| stall * 2 <= *t)
            .map(|_| stall)
    }

    /// The requester made progress or (re)started sending at `now`: arm the early resend
    /// (if it has any left: only progress gives them back, so a dead peer gets three, then
    /// the ACK timeouts alone, `retry_cnt` + 1 of them, as before).
    pub(crate) fn arm(&mut self, now: Instant, timeout: u8) {
        if self.early_left == 0 {
            self.early_at = None;
            return;
        }
        self.early_at = self.stall(now, timeout).map(|s| now + s);
    }

    /// Nothing outstanding: nothing to resend early.
    pub(crate) fn disarm(&mut self) {
        self.early_at = None;
    }

    /// The early resend's time has come: whether to resend now (the next one, if any, is
    /// armed after twice the wait).
    pub(crate) fn fire(&mut self, now: Instant, timeout: u8) -> bool {
        if self.early_at.is_none_or(|t| t > now) {
            return false;
        }
        self.early_at = None;
        if self.early_left == 0 {
            return false;
        }
        self.early_left -= 1;
        let spent = u32::from(EARLY_RESENDS - self.early_left);
        self.early_at = self
            .stall(now, timeout)
            .filter(|_| self.early_left > 0)
            .map(|s| s * (1 << spent))
            .filter(|s| ack_timeout(timeout).is_some_and(|t| *s < t))
            .map(|s| now + s);
        true
    }
}

impl QpTransport {
    /// Re-arm the retransmit timers after progress (or the first packet) at `now`.
    pub(crate) fn arm_retransmit(&mut self, now: Instant, timeout: u8) {
        self.retrans_at = ack_timeout(timeout).map(|t| now + t);
        self.recovery.arm(now, timeout);
    }

    /// Nothing outstanding: no retransmit timer.
    pub(crate) fn disarm_retransmit(&mut self) {
        self.retrans_at = None;
        self.recovery.disarm();
    }
}
