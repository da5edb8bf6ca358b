//! Completion channels and the async event queue as futures and streams on tokio's reactor
//! (cargo feature `tokio`).
//!
//! Each waits on the backend's real file descriptor (a completion channel's `fd`,
//! `ibv_context.async_fd`) through [`tokio::io::unix::AsyncFd`]: no thread per channel, no
//! busy loop, and it works wherever the backend has such fds (the emulated device's eventfds,
//! a libibverbs device's uverbs fds). The simulated fabric moves only when a verb waits on
//! it, so nothing would ever make its fds readable: it is refused with
//! [`Error::Unsupported`].
//!
//! * [`AsyncCq`]: a CQ with a channel of its own, read completion by completion
//!   ([`AsyncCq::next`], or as a [`futures_core::Stream`]) or in batches
//!   ([`AsyncCq::next_batch`]). Arming, event taking and acknowledgement follow
//!   `ibv_get_cq_event(3)`: arm with `ibv_req_notify_cq`, poll the CQ *again* before waiting
//!   (a completion that arrived between the last poll and the arm raises no event), wait for
//!   the channel, take the event, re-arm and poll. Events are acknowledged in batches
//!   (`ibv_ack_cq_events` takes a lock) and all of them before the CQ is destroyed.
//! * [`AsyncCompletionChannel`]: the raw verb, for one channel shared by several CQs:
//!   [`AsyncCompletionChannel::get_cq_event`] waits for the next event; the caller arms and
//!   acknowledges, as with the blocking verb.
//! * [`AsyncEvents`]: `ibv_get_async_event` as a stream; each event is acknowledged
//!   (`ibv_ack_async_event`) as it is handed out, since what is handed out is a copy.
//!
//! **Cancellation.** Every future here keeps its progress in the object it borrows, never in
//! itself: a completion polled from the CQ is buffered in the [`AsyncCq`] before the future
//! returns, a taken event is counted there, and an event queued while no future waits stays
//! queued (the fds stay readable while events wait). Dropping a pending future — a lost
//! `tokio::select!` branch, a timeout — loses nothing; the next call picks up where it left.
//!
//! # Panics
//! Creating one of these outside a tokio runtime, or on a runtime built without IO
//! (`enable_io`/`enable_all`), panics, as [`AsyncFd::register`] does.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use softroce_verbs::{Context, QpType, SendWr, WrOpcode};
//! let a = Context::open_emulated("a", "127.0.0.1".parse()?, 0)?;
//! let b = Context::open_emulated("b", "127.0.0.2".parse()?, 0)?;
//! let (pa, pb) = (a.alloc_pd()?, b.alloc_pd()?);
//! let (ca, mut cb) = (a.create_async_cq(16)?, b.create_async_cq(16)?);
//! let qa = pa.create_qp(ca.cq(), ca.cq(), QpType::Rc).build()?;
//! let qb = pb.create_qp(cb.cq(), cb.cq(), QpType::Rc).build()?;
//! let (ea, eb) = (qa.endpoint(), qb.endpoint());
//! let (qa, qb) = (qa.handshake(eb)?, qb.handshake(ea)?);
//! let (src, dst) = (pa.allocate(64)?, pb.allocate(64)?);
//! src.write(0, b"hello")?;
//! // SAFETY: both regions outlive the completions awaited below.
//! unsafe {
//!     qb.post_receive(&[dst.slice(0..64)?], 1)?;
//!     let mut wr = SendWr::new(2, WrOpcode::Send);
//!     wr.sg_list = vec![src.slice(0..5)?].into();
//!     qa.post_send(&[wr])?;
//! }
//! let wc = cb.next().await?; // sleeps in the reactor until the receive completes
//! assert_eq!((wc.wr_id, wc.byte_len), (1, 5));
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;
use softroce_emu::core::{AsyncEvent, WcOpcode, WorkCompletion};

use crate::backend::{Backend, BackendKind};
use crate::context::{CompletionChannel, CompletionQueue, Context};
use crate::error::{Error, Result};

/// Acknowledge CQ events once this many are outstanding (`ibv_ack_cq_events(3)`: it takes
/// a lock, so acknowledge several at once), and always all of them before the CQ goes.
const ACK_BATCH: u32 = 16;

/// Completions read from the CQ per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;

/// A descriptor the backend owns, registered with tokio's reactor without taking ownership:
/// the backend closes it when its object is destroyed, after the registration is dropped.
#[derive(Debug)]
struct BorrowedRawFd(RawFd);

impl AsRawFd for BorrowedRawFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Refuse backends whose fds nothing makes readable on its own.
fn check_backend(dev: &Arc<dyn Backend>, what: &'static str) -> Result<()> {
    match dev.kind() {
        BackendKind::Simulated => Err(Error::Unsupported {
            what,
            backend: BackendKind::Simulated,
        }),
        _ => Ok(()),
    }
}

/// Register `fd` for readability.
///
/// # Safety
/// `fd` must stay open, naming the same file, until the returned registration is dropped.
unsafe fn register(fd: RawFd, what: &str) -> Result<AsyncFd<BorrowedRawFd>> {
    // SAFETY: forwarded contract.
    unsafe { AsyncFd::register_with_interest(BorrowedRawFd(fd), ::tokio::io::Interest::READABLE) }
        .map_err(|e| {
            let (_, e) = e.into_parts();
            Error::io(format!("registering {what} (fd {fd}) with tokio"), e)
        })
}

fn would_block(e: &Error) -> bool {
    e.errno() == libc::EAGAIN
}

fn io_error(what: &str, e: io::Error) -> Error {
    Error::io(format!("waiting for {what} in tokio's reactor"), e)
}

/// A completion channel whose events are awaited in tokio's reactor
/// (`ibv_get_cq_event(3)` without blocking a thread).
#[derive(Debug)]
pub struct AsyncCompletionChannel {
    // Field order: the registration goes before the channel that owns the fd.
    fd: AsyncFd<BorrowedRawFd>,
    channel: CompletionChannel,
}

impl AsyncCompletionChannel {
    /// Register `channel`'s fd with the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime with IO enabled, as [`AsyncFd::register`].
    pub fn new(channel: CompletionChannel) -> Result<Self> {
        check_backend(&channel.dev, "async completion channels")?;
        // SAFETY: the channel owns the fd until it is destroyed, which happens after the
        // registration is dropped (field order).
        let fd = unsafe { register(channel.fd(), "a completion channel") }?;
        Ok(Self { fd, channel })
    }

    /// The channel, to attach CQs to ([`Context::create_cq`]).
    pub fn channel(&self) -> &CompletionChannel {
        &self.channel
    }

    /// `ibv_get_cq_event`: wait for the next completion event and return the raw handle of
    /// the CQ it is for ([`CompletionQueue::raw_handle`]). As with the blocking verb, the CQ
    /// must have been armed ([`CompletionQueue::req_notify`]) and every event returned must
    /// be acknowledged ([`CompletionQueue::ack_events`]) before that CQ is destroyed.
    ///
    /// Cancellation-safe: an event is taken only in the poll that returns it.
    pub async fn get_cq_event(&self) -> Result<u64> {
        poll_fn(|cx| self.poll_cq_event(cx)).await
    }

    /// [`AsyncCompletionChannel::get_cq_event`] as a poll function: `Pending` registers the
    /// task's waker with the reactor. One task waits on a channel at a time: as with
    /// [`AsyncFd::poll_read_ready`], only the waker of the last poll is kept.
    pub fn poll_cq_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<u64>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))
                .map_err(|e| io_error("a completion event", e))?;
            match self.channel.get_cq_event(Some(Duration::ZERO)) {
                Err(e) if would_block(&e) => {
                    // Nothing queued: forget this readiness; the next poll waits for more.
                    guard.clear_ready();
                }
                other => return Poll::Ready(other),
            }
        }
    }
}

/// A completion queue read asynchronously, on a completion channel of its own.
///
/// Make one with [`Context::create_async_cq`]; build QPs on [`AsyncCq::cq`]. Drop those QPs
/// before the `AsyncCq`: a CQ they still hold keeps its channel busy, and the channel is
/// then left to the device's close.
#[derive(Debug)]
pub struct AsyncCq {
    // Field order: the CQ (which names the channel) goes first, then the channel.
    cq: CompletionQueue,
    channel: AsyncCompletionChannel,
    /// Completions polled from the CQ and not handed out yet (kept here, not in a future,
    /// so dropping a future loses none).
    ready: VecDeque<WorkCompletion>,
    /// `ibv_req_notify_cq` was called and its event not taken yet.
    armed: bool,
    /// Events taken and not yet acknowledged.
    unacked: u32,
    /// Events taken in total.
    events: u64,
}

impl Context {
    /// A CQ of at least `cqe` entries with a completion channel of its own, read with
    /// `.await` in tokio (cargo feature `tokio`).
    ///
    /// # Panics
    /// Outside a tokio runtime with IO enabled, as [`AsyncFd::register`].
    pub fn create_async_cq(&self, cqe: u32) -> Result<AsyncCq> {
        let channel = AsyncCompletionChannel::new(self.create_comp_channel()?)?;
        let cq = self.create_cq(cqe, Some(channel.channel()))?;
        Ok(AsyncCq {
            cq,
            channel,
            ready: VecDeque::new(),
            armed: false,
            unacked: 0,
            events: 0,
        })
    }

    /// The device's async event queue as a stream (cargo feature `tokio`).
    ///
    /// # Panics
    /// Outside a tokio runtime with IO enabled, as [`AsyncFd::register`].
    pub fn async_events(&self) -> Result<AsyncEvents> {
        check_backend(&self.dev, "async event streams")?;
        // SAFETY: the device keeps its async fd open while it lives, and the stream holds the
        // device alive through its context clone (dropped after the registration).
        let fd = unsafe { register(self.async_fd(), "the async event queue") }?;
        Ok(AsyncEvents {
            fd,
            ctx: self.clone(),
        })
    }
}

impl AsyncCq {
    /// The CQ, to create QPs on. Polling it directly is allowed (completions it returns are
    /// simply not seen here).
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// How many completion events this CQ has raised and were taken so far: one wake-up
    /// each. A burst of completions arriving together costs one.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Completions already polled from the CQ and waiting here.
    pub fn buffered(&self) -> usize {
        self.ready.len()
    }

    /// The next completion, waiting in the reactor while there is none. Cancellation-safe.
    pub async fn next(&mut self) -> Result<WorkCompletion> {
        poll_fn(|cx| self.poll_completion(cx)).await
    }

    /// Wait until at least one completion is there, then move up to `out.len()` into `out`
    /// (all that one wake-up found, without waiting again); how many were moved.
    /// Cancellation-safe. An empty `out` returns 0 at once.
    pub async fn next_batch(&mut self, out: &mut [WorkCompletion]) -> Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let first = self.next().await?;
        out[0] = first;
        let mut n = 1;
        while n < out.len() {
            match self.take_ready()? {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    /// A buffered completion, else one batch polled from the CQ without waiting.
    fn take_ready(&mut self) -> Result<Option<WorkCompletion>> {
        if self.ready.is_empty() {
            self.poll_cq()?;
        }
        Ok(self.ready.pop_front())
    }

    /// One `ibv_poll_cq` into the buffer; how many it found.
    fn poll_cq(&mut self) -> Result<usize> {
        let mut buf = [WorkCompletion::success(0, 0, WcOpcode::Send, 0); POLL_BATCH];
        let n = self.cq.poll(&mut buf)?;
        self.ready.extend(&buf[..n]);
        Ok(n)
    }

    /// [`AsyncCq::next`] as a poll function: `Pending` registers the task's waker with the
    /// reactor, with the CQ armed and found empty after arming.
    pub fn poll_completion(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<WorkCompletion>> {
        // Every turn either hands out a completion, takes an event (which the CQ raises once
        // per arm), arms (once per event), or returns Pending: no busy loop.
        loop {
            if let Some(wc) = self.ready.pop_front() {
                return Poll::Ready(Ok(wc));
            }
            if self.poll_cq()? > 0 {
                continue;
            }
            if !self.armed {
                self.cq.req_notify(false)?;
                self.armed = true;
                // Poll again: what completed between the poll above and the arm raised no
                // event (ibv_get_cq_event(3)).
                continue;
            }
            ready!(self.channel.poll_cq_event(cx))?;
            self.armed = false;
            self.events += 1;
            self.unacked += 1;
            if self.unacked >= ACK_BATCH {
                self.cq.ack_events(self.unacked)?;
                self.unacked = 0;
            }
        }
    }
}

impl futures_core::Stream for AsyncCq {
    /// Completions, forever (a CQ has no end); an error is an item, after which the stream
    /// may be polled again.
    type Item = Result<WorkCompletion>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_completion(cx).map(Some)
    }
}

impl Drop for AsyncCq {
    fn drop(&mut self) {
        // ibv_destroy_cq waits for every event taken to be acknowledged.
        if self.unacked > 0 {
            let _ = self.cq.ack_events(self.unacked);
        }
    }
}

/// The device's async events (`ibv_get_async_event(3)`) as a stream.
///
/// Each event is acknowledged (`ibv_ack_async_event`) as it is handed out: the
/// [`AsyncEvent`] is a copy naming objects by handle, so nothing it refers to can be
/// destroyed under the caller. Make one with [`Context::async_events`].
#[derive(Debug)]
pub struct AsyncEvents {
    fd: AsyncFd<BorrowedRawFd>,
    /// Keeps the device (and so the fd) alive.
    ctx: Context,
}

impl AsyncEvents {
    /// The next async event, waiting in the reactor while there is none. Cancellation-safe:
    /// an event is taken only in the poll that returns it.
    pub async fn next(&mut self) -> Result<AsyncEvent> {
        poll_fn(|cx| self.poll_event(cx)).await
    }

    /// [`AsyncEvents::next`] as a poll function.
    pub fn poll_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<AsyncEvent>> {
        loop {
            let mut guard =
                ready!(self.fd.poll_read_ready(cx)).map_err(|e| io_error("an async event", e))?;
            match self.ctx.get_async_event(Some(Duration::ZERO)) {
                Ok(ev) => {
                    self.ctx.ack_async_event(&ev)?;
                    return Poll::Ready(Ok(ev));
                }
                Err(e) if would_block(&e) => guard.clear_ready(),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl futures_core::Stream for AsyncEvents {
    /// Events, for as long as the device lives.
    type Item = Result<AsyncEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.poll_event(cx).map(Some)
    }
}
