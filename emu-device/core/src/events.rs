//! Async events and the driver's event queue: owns the queued async events, the count of
//! retrieved port/device events not yet acknowledged, and the [`HcaEvent`]s the driver
//! polls.

use std::collections::VecDeque;

use super::handles::{ChannelHandle, CqHandle, QpHandle, SrqHandle};
use super::types::EventType;

/// An affiliated or unaffiliated asynchronous event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: EventType,
    /// To what.
    pub element: EventElement,
}

/// The object an async event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventElement {
    /// A CQ.
    Cq(CqHandle),
    /// A QP.
    Qp(QpHandle),
    /// An SRQ.
    Srq(SrqHandle),
    /// A port (1-based).
    Port(u8),
    /// The device itself.
    Device,
}

/// What the driver must react to, polled with [`Hca::poll_event`](super::Hca::poll_event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HcaEvent {
    /// A completion event was queued on this channel: make its fd readable.
    CompletionEvent(ChannelHandle),
    /// Destroying a CQ took the last queued completion events of this channel with it:
    /// make its fd unreadable again, so a `poll` on it never wakes for an event that is
    /// gone (and a blocking `get_cq_event` after it does not wait on a stale count).
    ChannelEmptied(ChannelHandle),
    /// An async event was queued: make the async fd readable.
    AsyncEventQueued,
    /// Destroying an object took the last queued async events with it: make the async fd
    /// unreadable again, so a `poll` on it never wakes for an event that is gone.
    AsyncQueueEmptied,
    /// An RC/UC QP received its first packet, in RTR (then `IBV_EVENT_COMM_EST` is also
    /// queued as an async event) or in RTS: a connection manager waiting for its RTU
    /// treats the connection as established, as rdma_cm does on `IB_EVENT_COMM_EST`.
    CommEst(softroce_wire::Qpn),
}

/// The async event queue and the driver's notifications, in the order they happened.
#[derive(Debug, Default)]
pub(crate) struct Events {
    async_events: VecDeque<AsyncEvent>,
    /// Port and device events retrieved and not yet acknowledged (object events are
    /// counted on their objects, which cannot be destroyed while the count is non-zero).
    device_unacked: u32,
    driver: VecDeque<HcaEvent>,
}

impl Events {
    /// Queue an async event and tell the driver.
    pub(crate) fn raise(&mut self, event_type: EventType, element: EventElement) {
        self.async_events.push_back(AsyncEvent {
            event_type,
            element,
        });
        self.driver.push_back(HcaEvent::AsyncEventQueued);
    }

    /// Tell the driver the QP numbered `qpn` reached COMM_EST.
    pub(crate) fn comm_est(&mut self, qpn: softroce_wire::Qpn) {
        self.driver.push_back(HcaEvent::CommEst(qpn));
    }

    /// Tell the driver a completion event is waiting on `channel`.
    pub(crate) fn completion_queued(&mut self, channel: ChannelHandle) {
        self.driver.push_back(HcaEvent::CompletionEvent(channel));
    }

    /// Tell the driver `channel` has no completion event queued any more.
    pub(crate) fn channel_emptied(&mut self, channel: ChannelHandle) {
        self.driver.push_back(HcaEvent::ChannelEmptied(channel));
    }

    /// The oldest queued async event.
    pub(crate) fn take_async(&mut self) -> Option<AsyncEvent> {
        self.async_events.pop_front()
    }

    pub(crate) fn async_pending(&self) -> bool {
        !self.async_events.is_empty()
    }

    /// Retrieved port/device events waiting for their ack.
    pub(crate) fn device_unacked_mut(&mut self) -> &mut u32 {
        &mut self.device_unacked
    }

    /// Drop queued (not yet retrieved) events about an object being destroyed.
    pub(crate) fn purge(&mut self, element: EventElement) {
        let before = self.async_events.len();
        self.async_events.retain(|e| e.element != element);
        if before != 0 && self.async_events.is_empty() {
            self.driver.push_back(HcaEvent::AsyncQueueEmptied);
        }
    }

    pub(crate) fn poll(&mut self) -> Option<HcaEvent> {
        self.driver.pop_front()
    }
}
