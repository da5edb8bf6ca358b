//! Completion queues and completion channels.
//!
//! Counting follows ibv_get_cq_event(3): every event retrieved with [`Hca::get_cq_event`]
//! must be acknowledged with [`Hca::ack_cq_events`] before the CQ can be destroyed. The core
//! refuses such a destroy with EBUSY; the verbs API may block instead, as libibverbs does.
//!
//! Overrun (rxe's rule, documented here because applications see it): when a completion
//! arrives at a full CQ, the CQ enters the error state, IBV_EVENT_CQ_ERR is queued once, and
//! the completion is lost. A receive completion that overruns also moves its QP to ERR (rxe's
//! responder does); a send completion that overruns is only lost (rxe's completer ignores
//! the failure). [`Hca::poll_cq`] keeps returning the completions stored before the overrun,
//! then fails with EIO for as long as the CQ exists.

use super::error::{VerbsError, VerbsResult};
use super::handles::{ChannelHandle, CqHandle};
use super::hca::{EventElement, Hca, HcaEvent};
use super::objects::{Channel, Cq};
use super::types::{EventType, WcStatus};
use super::wr::WorkCompletion;

/// What happened to a completion pushed into a CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushOutcome {
    /// Stored.
    Stored,
    /// Lost: the CQ was full (now in error) or already in error.
    Overrun,
}

impl Hca {
    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&mut self) -> ChannelHandle {
        let (index, generation) = self.channels.insert(Channel::default());
        ChannelHandle { index, generation }
    }

    /// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
    pub fn destroy_comp_channel(&mut self, ch: ChannelHandle) -> VerbsResult<()> {
        let c = self.channel("destroy_comp_channel", ch)?;
        if c.users > 0 {
            return Err(VerbsError::busy(
                "destroy_comp_channel",
                format!("{} CQs still use the channel", c.users),
            ));
        }
        self.channels.remove(ch.index, ch.generation);
        Ok(())
    }

    fn channel(&self, verb: &'static str, ch: ChannelHandle) -> VerbsResult<&Channel> {
        self.channels
            .get(ch.index, ch.generation)
            .ok_or(VerbsError::StaleHandle {
                verb,
                kind: ChannelHandle::KIND,
            })
    }

    /// `ibv_create_cq`: at least `cqe` entries. The real size (reported to the caller) is the
    /// next power of two minus one, as rxe's queues are sized.
    pub fn create_cq(
        &mut self,
        cqe: u32,
        channel: Option<ChannelHandle>,
        comp_vector: u32,
        context: u64,
    ) -> VerbsResult<(CqHandle, u32)> {
        const VERB: &str = "create_cq";
        if cqe == 0 || cqe > self.attr.max_cqe {
            return Err(VerbsError::invalid(
                VERB,
                format!("cqe {cqe} outside 1..={}", self.attr.max_cqe),
            ));
        }
        if comp_vector >= self.attr.num_comp_vectors {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "comp_vector {comp_vector} >= num_comp_vectors {}",
                    self.attr.num_comp_vectors
                ),
            ));
        }
        if let Some(ch) = channel {
            self.channel(VERB, ch)?;
        }
        if self.cqs.len() >= self.attr.max_cq as usize {
            return Err(VerbsError::no_resources(VERB, "max_cq reached"));
        }
        let capacity = real_cq_size(cqe);
        let (index, generation) = self.cqs.insert(Cq {
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
        });
        if let Some(ch) = channel
            && let Some(c) = self.channels.get_mut(ch.index, ch.generation)
        {
            c.users += 1;
        }
        Ok((CqHandle { index, generation }, capacity))
    }

    pub(crate) fn cq(&self, verb: &'static str, cq: CqHandle) -> VerbsResult<&Cq> {
        self.cqs
            .get(cq.index, cq.generation)
            .ok_or(VerbsError::StaleHandle {
                verb,
                kind: CqHandle::KIND,
            })
    }

    pub(crate) fn cq_mut(&mut self, verb: &'static str, cq: CqHandle) -> VerbsResult<&mut Cq> {
        self.cqs
            .get_mut(cq.index, cq.generation)
            .ok_or(VerbsError::StaleHandle {
                verb,
                kind: CqHandle::KIND,
            })
    }

    /// Fault injection: make `cq` overrun once it holds `depth` completions (`None`: at its
    /// real capacity again), to produce IBV_EVENT_CQ_ERR on demand.
    pub fn limit_cq_depth(&mut self, cq: CqHandle, depth: Option<u32>) -> VerbsResult<()> {
        self.cq_mut("limit_cq_depth", cq)?.depth_limit = depth;
        Ok(())
    }

    /// Entries the CQ holds at most (`ibv_cq.cqe`).
    pub fn cq_capacity(&self, cq: CqHandle) -> VerbsResult<u32> {
        Ok(self.cq("cq_capacity", cq)?.capacity)
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqHandle) -> VerbsResult<usize> {
        Ok(self.cq("cq_len", cq)?.entries.len())
    }

    /// `ibv_resize_cq`: cannot shrink below the completions it holds.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> VerbsResult<u32> {
        const VERB: &str = "resize_cq";
        let max = self.attr.max_cqe;
        let c = self.cq_mut(VERB, cq)?;
        if cqe == 0 || cqe > max {
            return Err(VerbsError::invalid(
                VERB,
                format!("cqe {cqe} outside 1..={max}"),
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

    /// `ibv_destroy_cq`: EBUSY while QPs or SRQs use the CQ, or while completion events
    /// retrieved from its channel are unacknowledged, or while its async events are
    /// unacknowledged. Events queued but never retrieved are discarded.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> VerbsResult<()> {
        const VERB: &str = "destroy_cq";
        let c = self.cq(VERB, cq)?;
        if c.users > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{} QPs/SRQs still use the CQ", c.users),
            ));
        }
        if c.events_unacked > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!(
                    "{} completion events retrieved with get_cq_event are not acknowledged",
                    c.events_unacked
                ),
            ));
        }
        if c.async_unacked > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!(
                    "{} async events about the CQ are not acknowledged",
                    c.async_unacked
                ),
            ));
        }
        let channel = c.channel;
        self.cqs.remove(cq.index, cq.generation);
        if let Some(ch) = channel
            && let Some(chan) = self.channels.get_mut(ch.index, ch.generation)
        {
            chan.users = chan.users.saturating_sub(1);
            chan.pending.retain(|(h, _)| *h != cq);
        }
        self.purge_async(EventElement::Cq(cq));
        Ok(())
    }

    /// `ibv_req_notify_cq`: arm the CQ for one completion event: the next completion, or with
    /// `solicited_only` the next solicited or error completion.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> VerbsResult<()> {
        const VERB: &str = "req_notify_cq";
        let c = self.cq_mut(VERB, cq)?;
        if c.channel.is_none() {
            return Err(VerbsError::invalid(
                VERB,
                "the CQ has no completion channel",
            ));
        }
        // Arming for "next" overrides a "solicited only" arming (IBTA 11.4.2.2).
        c.armed = Some(match c.armed {
            Some(prev) => prev && solicited_only,
            None => solicited_only,
        });
        Ok(())
    }

    /// `ibv_poll_cq`: move up to `out.len()` completions into `out`, oldest first.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        let c = self.cq_mut("poll_cq", cq)?;
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

    /// `ibv_get_cq_event` without blocking: the CQ (and its context) of the oldest event on
    /// the channel, or EAGAIN. Each event must be acknowledged with [`Hca::ack_cq_events`].
    pub fn get_cq_event(&mut self, ch: ChannelHandle) -> VerbsResult<(CqHandle, u64)> {
        const VERB: &str = "get_cq_event";
        let chan =
            self.channels
                .get_mut(ch.index, ch.generation)
                .ok_or(VerbsError::StaleHandle {
                    verb: VERB,
                    kind: ChannelHandle::KIND,
                })?;
        let (cq, context) = chan
            .pending
            .pop_front()
            .ok_or(VerbsError::WouldBlock { verb: VERB })?;
        if let Some(c) = self.cqs.get_mut(cq.index, cq.generation) {
            c.events_unacked += 1;
        }
        Ok((cq, context))
    }

    /// Events waiting on a channel (what its fd's readiness reflects).
    pub fn channel_pending(&self, ch: ChannelHandle) -> VerbsResult<usize> {
        Ok(self.channel("channel_pending", ch)?.pending.len())
    }

    /// `ibv_ack_cq_events`: acknowledge `n` events retrieved for `cq`.
    pub fn ack_cq_events(&mut self, cq: CqHandle, n: u32) -> VerbsResult<()> {
        const VERB: &str = "ack_cq_events";
        let c = self.cq_mut(VERB, cq)?;
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

    /// Store a completion, firing the channel event if armed. `solicited` marks a receive
    /// completion of a message with the SE bit.
    pub(crate) fn push_completion(
        &mut self,
        cq: CqHandle,
        wc: WorkCompletion,
        solicited: bool,
    ) -> PushOutcome {
        let Some(c) = self.cqs.get_mut(cq.index, cq.generation) else {
            return PushOutcome::Overrun;
        };
        if c.in_error {
            c.lost += 1;
            self.counters.cqe_overrun_lost += 1;
            return PushOutcome::Overrun;
        }
        let usable = c.depth_limit.map_or(c.capacity, |d| d.min(c.capacity));
        if c.entries.len() >= usable as usize {
            c.in_error = true;
            c.lost += 1;
            self.counters.cqe_overrun_lost += 1;
            self.raise_async(EventType::CqErr, EventElement::Cq(cq));
            return PushOutcome::Overrun;
        }
        c.entries.push_back(wc);
        if let Some(solicited_only) = c.armed {
            let fires = !solicited_only || solicited || wc.status != WcStatus::Success;
            if fires {
                c.armed = None;
                let context = c.context;
                if let Some(ch) = c.channel
                    && let Some(chan) = self.channels.get_mut(ch.index, ch.generation)
                {
                    chan.pending.push_back((cq, context));
                    self.hca_events.push_back(HcaEvent::CompletionEvent(ch));
                }
            }
        }
        PushOutcome::Stored
    }
}

/// rxe sizes queues to a power of two and keeps one slot free.
fn real_cq_size(cqe: u32) -> u32 {
    (cqe + 1).next_power_of_two() - 1
}
