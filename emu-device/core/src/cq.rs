//! Completion queues and completion channels: owns every CQ (entries, arming, overrun
//! state, event counts) and every channel with its pending completion events.
//!
//! Counting follows ibv_get_cq_event(3): every event retrieved with [`Hca::get_cq_event`](super::Hca::get_cq_event)
//! must be acknowledged with [`Hca::ack_cq_events`](super::Hca::ack_cq_events) before the CQ can be destroyed. The core
//! refuses such a destroy with EBUSY; the verbs API may block instead, as libibverbs does.
//!
//! Overrun (rxe's rule, documented here because applications see it): when a completion
//! arrives at a full CQ, the CQ enters the error state, IBV_EVENT_CQ_ERR is queued once, and
//! the completion is lost. A receive completion that overruns also moves its QP to ERR (rxe's
//! responder does); a send completion that overruns is only lost (rxe's completer ignores
//! the failure). [`Hca::poll_cq`](super::Hca::poll_cq) keeps returning the completions stored before the overrun,
//! then fails with EIO for as long as the CQ exists.

use std::time::Instant;

use super::counters::Counters;
use super::device::DeviceAttr;
use super::error::{VerbsError, VerbsResult};
use super::events::{EventElement, Events};
use super::handles::{ChannelHandle, CqHandle, Table};
use super::objects::{Channel, Cq, CqModeration};
use super::types::{EventType, WcOpcode, WcStatus};
use super::wr::WorkCompletion;

/// What happened to a completion pushed into a CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushOutcome {
    /// Stored.
    Stored,
    /// Lost: the CQ was full (now in error) or already in error.
    Overrun,
}

/// The device clock completions are stamped with: nanoseconds since its epoch, never
/// going back. The core reads no clock; it moves with each `now` it is given.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    /// The instant the clock reads 0 (`HcaConfig::clock_epoch`, else the first `now`).
    epoch: Option<Instant>,
    /// The latest `now` given. Read as nanoseconds only when a completion is stamped or
    /// the clock is queried: every packet and verb advances the clock, and the conversion
    /// cost more than the comparison.
    latest: Option<Instant>,
}

impl Clock {
    pub(crate) fn new(epoch: Option<Instant>) -> Self {
        Self {
            epoch,
            latest: None,
        }
    }

    /// Move to `now`; an earlier `now` (two callers racing to the lock) leaves it be.
    pub(crate) fn advance(&mut self, now: Instant) {
        if self.latest.is_none_or(|latest| now > latest) {
            self.epoch.get_or_insert(now);
            self.latest = Some(now);
        }
    }

    /// The latest `now` given, if any was.
    pub(crate) fn latest(&self) -> Option<Instant> {
        self.latest
    }

    pub(crate) fn ns(&self) -> u64 {
        match (self.epoch, self.latest) {
            (Some(epoch), Some(latest)) => {
                u64::try_from(latest.saturating_duration_since(epoch).as_nanos())
                    .unwrap_or(u64::MAX)
            }
            _ => 0,
        }
    }
}

/// The CQs and completion channels.
#[derive(Debug, Default)]
pub(crate) struct Completions {
    cqs: Table<CqHandle, Cq>,
    channels: Table<ChannelHandle, Channel>,
    pub(crate) clock: Clock,
    /// CQs whose event waits for its moderation period, by when it is due (few: only
    /// moderated CQs armed with completions waiting).
    moderation_timers: Vec<(Instant, CqHandle)>,
}

impl Completions {
    pub(crate) fn new(clock_epoch: Option<Instant>) -> Self {
        Self {
            clock: Clock::new(clock_epoch),
            ..Self::default()
        }
    }

    pub(crate) fn create_channel(&mut self) -> ChannelHandle {
        self.channels.insert(Channel::default())
    }

    /// Refused with EBUSY while CQs use the channel.
    pub(crate) fn destroy_channel(&mut self, ch: ChannelHandle) -> VerbsResult<()> {
        const VERB: &str = "destroy_comp_channel";
        let c = self.channels.lookup(VERB, ch)?;
        if c.users > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{} CQs still use the channel", c.users),
            ));
        }
        self.channels.remove(VERB, ch)?;
        Ok(())
    }

    /// A CQ of at least `cqe` entries within the device's limits; returns its real size.
    pub(crate) fn create(
        &mut self,
        attr: &DeviceAttr,
        cqe: u32,
        channel: Option<ChannelHandle>,
        comp_vector: u32,
        context: u64,
    ) -> VerbsResult<(CqHandle, u32)> {
        const VERB: &str = "create_cq";
        if cqe == 0 || cqe > attr.max_cqe {
            return Err(VerbsError::invalid(
                VERB,
                format!("cqe {cqe} outside 1..={}", attr.max_cqe),
            ));
        }
        if comp_vector >= attr.num_comp_vectors {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "comp_vector {comp_vector} >= num_comp_vectors {}",
                    attr.num_comp_vectors
                ),
            ));
        }
        if let Some(ch) = channel {
            self.channels.lookup(VERB, ch)?;
        }
        if self.cqs.len() >= attr.max_cq as usize {
            return Err(VerbsError::no_resources(VERB, "max_cq reached"));
        }
        let capacity = real_cq_size(cqe);
        let handle = self.cqs.insert(Cq {
            capacity,
            entries: std::collections::VecDeque::with_capacity(capacity.min(4096) as usize),
            channel,
            context,
            armed: None,
            events_unacked: 0,
            users: 0,
            in_error: false,
            lost: 0,
            async_unacked: 0,
            depth_limit: None,
            moderation: CqModeration::default(),
            held_event: None,
        });
        if let Some(ch) = channel
            && let Some(c) = self.channels.get_mut(ch)
        {
            c.users += 1;
        }
        Ok((handle, capacity))
    }

    pub(crate) fn get_mut(&mut self, cq: CqHandle) -> Option<&mut Cq> {
        self.cqs.get_mut(cq)
    }

    pub(crate) fn lookup(&self, verb: &'static str, cq: CqHandle) -> VerbsResult<&Cq> {
        self.cqs.lookup(verb, cq)
    }

    pub(crate) fn lookup_mut(&mut self, verb: &'static str, cq: CqHandle) -> VerbsResult<&mut Cq> {
        self.cqs.lookup_mut(verb, cq)
    }

    /// Count one more (`delta` 1) or one fewer (-1) QP or SRQ using the CQ.
    pub(crate) fn add_users(&mut self, cq: CqHandle, delta: i32) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.users = c.users.saturating_add_signed(delta);
        }
    }

    /// Resize to at least `cqe` entries (at most `max_cqe`, not below the entries held).
    pub(crate) fn resize(&mut self, cq: CqHandle, cqe: u32, max_cqe: u32) -> VerbsResult<u32> {
        const VERB: &str = "resize_cq";
        let c = self.cqs.lookup_mut(VERB, cq)?;
        if cqe == 0 || cqe > max_cqe {
            return Err(VerbsError::invalid(
                VERB,
                format!("cqe {cqe} outside 1..={max_cqe}"),
            ));
        }
        if (cqe as usize) < c.entries.len() {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "cqe {cqe} is less than the {} completions held",
                    c.entries.len()
                ),
            ));
        }
        c.capacity = real_cq_size(cqe);
        Ok(c.capacity)
    }

    /// Destroy a CQ nothing uses and whose events are all acknowledged; its pending channel
    /// events go with it.
    pub(crate) fn destroy(&mut self, events: &mut Events, cq: CqHandle) -> VerbsResult<()> {
        const VERB: &str = "destroy_cq";
        let c = self.cqs.lookup(VERB, cq)?;
        if c.users > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{} QPs/SRQs still use the CQ", c.users),
            ));
        }
        if c.events_unacked > 0 {
            return Err(VerbsError::unacknowledged(
                VERB,
                format!(
                    "{} completion events retrieved with get_cq_event are not acknowledged",
                    c.events_unacked
                ),
            ));
        }
        if c.async_unacked > 0 {
            return Err(VerbsError::unacknowledged(
                VERB,
                format!(
                    "{} async events about the CQ are not acknowledged",
                    c.async_unacked
                ),
            ));
        }
        self.moderation_timers.retain(|(_, h)| *h != cq);
        let channel = self.cqs.remove(VERB, cq)?.channel;
        if let Some(ch) = channel
            && let Some(chan) = self.channels.get_mut(ch)
        {
            chan.users = chan.users.saturating_sub(1);
            let had_events = !chan.pending.is_empty();
            chan.pending.retain(|(h, _)| *h != cq);
            if had_events && chan.pending.is_empty() {
                events.channel_emptied(ch);
            }
        }
        Ok(())
    }

    /// Arm for the next completion, or with `solicited_only` the next solicited or error one.
    /// A CQ without a channel may be armed too (ibv_req_notify_cq(3) states no error, and
    /// rxe and rdma-core accept it); its event has nowhere to go and is not queued.
    pub(crate) fn req_notify(&mut self, cq: CqHandle, solicited_only: bool) -> VerbsResult<()> {
        const VERB: &str = "req_notify_cq";
        let c = self.cqs.lookup_mut(VERB, cq)?;
        // Arming for "next" overrides a "solicited only" arming (IBTA 11.4.2.2).
        c.armed = Some(match c.armed {
            Some(prev) => prev && solicited_only,
            None => solicited_only,
        });
        Ok(())
    }

    /// Move up to `out.len()` completions into `out`, oldest first.
    pub(crate) fn poll(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        let c = self.cqs.lookup_mut("poll_cq", cq)?;
        let n = out.len().min(c.entries.len());
        for slot in out.iter_mut().take(n) {
            if let Some(wc) = c.entries.pop_front() {
                *slot = wc;
            }
        }
        if n == 0 && c.in_error {
            return Err(VerbsError::CqInError { lost: c.lost });
        }
        Ok(n)
    }

    /// The CQ and context of the oldest event on the channel, now awaiting its ack.
    pub(crate) fn take_event(&mut self, ch: ChannelHandle) -> VerbsResult<(CqHandle, u64)> {
        const VERB: &str = "get_cq_event";
        let (cq, context) = self
            .channels
            .lookup_mut(VERB, ch)?
            .pending
            .pop_front()
            .ok_or(VerbsError::WouldBlock { verb: VERB })?;
        if let Some(c) = self.cqs.get_mut(cq) {
            c.events_unacked += 1;
        }
        Ok((cq, context))
    }

    pub(crate) fn channel_pending(&self, ch: ChannelHandle) -> VerbsResult<usize> {
        Ok(self.channels.lookup("channel_pending", ch)?.pending.len())
    }

    /// Acknowledge `n` events retrieved for `cq`.
    pub(crate) fn ack_events(&mut self, cq: CqHandle, n: u32) -> VerbsResult<()> {
        const VERB: &str = "ack_cq_events";
        let c = self.cqs.lookup_mut(VERB, cq)?;
        if n > c.events_unacked {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "acknowledging {n} events but only {} were retrieved and not acknowledged",
                    c.events_unacked
                ),
            ));
        }
        c.events_unacked -= n;
        Ok(())
    }

    /// Remove the completions of QP `qpn` not yet polled from `cq`.
    pub(crate) fn remove_qp_entries(&mut self, cq: CqHandle, qpn: u32) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.entries.retain(|w| w.qp_num != qpn);
        }
    }

    /// Remove from `cq` the completions of the destroyed QP `qpn` not yet polled, except
    /// those of its send work that finished (successfully or with an error of its own):
    /// a receive names a buffer the program may repost, a flush work that never ran, but a
    /// finished send is news about work the peer acknowledged. A program that drains its
    /// CQ after destroying the QP (libfabric does, and reports every request it does not
    /// find there as flushed) learns the truth.
    pub(crate) fn remove_destroyed_qp_entries(&mut self, cq: CqHandle, qpn: u32) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.entries.retain(|w| {
                // Receive-side opcodes start at IBV_WC_RECV (128); send-side ones lie below.
                let finished_send =
                    (w.opcode as u32) < (WcOpcode::Recv as u32) && w.status != WcStatus::WrFlushErr;
                w.qp_num != qpn || finished_send
            });
        }
    }

    /// Store a completion stamped with the clock, firing the channel event if armed.
    /// `solicited` marks a receive completion of a message with the SE bit.
    pub(crate) fn push(
        &mut self,
        events: &mut Events,
        counters: &mut Counters,
        cq: CqHandle,
        mut wc: WorkCompletion,
        solicited: bool,
    ) -> PushOutcome {
        wc.completion_ts = self.clock.ns();
        let Some(c) = self.cqs.get_mut(cq) else {
            return PushOutcome::Overrun;
        };
        if c.in_error {
            c.lost += 1;
            counters.cqe_overrun_lost += 1;
            return PushOutcome::Overrun;
        }
        let usable = c.depth_limit.map_or(c.capacity, |d| d.min(c.capacity));
        if c.entries.len() >= usable as usize {
            c.in_error = true;
            c.lost += 1;
            counters.cqe_overrun_lost += 1;
            events.raise(EventType::CqErr, EventElement::Cq(cq));
            return PushOutcome::Overrun;
        }
        c.entries.push_back(wc);
        if let Some(solicited_only) = c.armed {
            let counts = !solicited_only || solicited || wc.status != WcStatus::Success;
            // Without a time given yet nothing can be timed: the event goes at once.
            if counts && let Some(now) = self.clock.latest() {
                let (held, first) = c.held_event.map_or((1, now), |(n, first)| (n + 1, first));
                c.held_event = Some((held, first));
                let moderation = c.moderation;
                if moderation.fires_with(held) {
                    self.fire(events, cq);
                } else if held == 1
                    && let Some(due) = moderation.deadline(first)
                {
                    self.moderation_timers.push((due, cq));
                }
            } else if counts {
                self.fire(events, cq);
            }
        }
        PushOutcome::Stored
    }

    /// The armed CQ's completion event goes to its channel now (none without a channel).
    fn fire(&mut self, events: &mut Events, cq: CqHandle) {
        let Some(c) = self.cqs.get_mut(cq) else {
            return;
        };
        c.armed = None;
        c.held_event = None;
        let context = c.context;
        if let Some(ch) = c.channel
            && let Some(chan) = self.channels.get_mut(ch)
        {
            chan.pending.push_back((cq, context));
            events.completion_queued(ch);
        }
        self.moderation_timers.retain(|(_, h)| *h != cq);
    }

    /// Set the CQ's event moderation (ibv_modify_cq(3)): at most `max_count` completions
    /// and `max_period_us` microseconds (EINVAL beyond, as mlx5). Completions already held
    /// are weighed against the new setting at once.
    pub(crate) fn moderate(
        &mut self,
        events: &mut Events,
        cq: CqHandle,
        moderation: CqModeration,
        max_period_us: u16,
    ) -> VerbsResult<()> {
        const VERB: &str = "modify_cq";
        if moderation.period_us > max_period_us {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "cq_period {} us beyond the device's {max_period_us} us",
                    moderation.period_us
                ),
            ));
        }
        let c = self.cqs.lookup_mut(VERB, cq)?;
        c.moderation = moderation;
        let Some((held, first)) = c.held_event else {
            return Ok(());
        };
        self.moderation_timers.retain(|(_, h)| *h != cq);
        let due = moderation.deadline(first);
        if moderation.fires_with(held)
            || due.is_some_and(|d| self.clock.latest().is_none_or(|now| d <= now))
        {
            self.fire(events, cq);
        } else if let Some(due) = due {
            self.moderation_timers.push((due, cq));
        }
        Ok(())
    }

    /// When the next moderation period ends.
    pub(crate) fn next_moderation_deadline(&self) -> Option<Instant> {
        self.moderation_timers.iter().map(|(due, _)| *due).min()
    }

    /// Every held event whose moderation period ended by `now` goes.
    pub(crate) fn handle_moderation_timeout(&mut self, events: &mut Events, now: Instant) {
        let due: Vec<CqHandle> = self
            .moderation_timers
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, cq)| *cq)
            .collect();
        for cq in due {
            self.fire(events, cq);
        }
    }
}

/// rxe sizes queues to a power of two and keeps one slot free.
fn real_cq_size(cqe: u32) -> u32 {
    (cqe + 1).next_power_of_two() - 1
}
