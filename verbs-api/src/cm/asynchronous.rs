//! The connection manager's waits as futures on tokio's reactor (cargo feature `tokio`).
//!
//! Each wait sleeps on the emulated device's CM fd (readable exactly while CM events are
//! queued) through [`AsyncFd`], on a `dup` of it so that any number of waits, on any
//! runtime, register independently. No thread, no busy loop. No lost wake-up either: an
//! event queued after a wait drained the queue makes the fd readable again, which tokio
//! reports as new readiness even if the wait is clearing the old one; an event another
//! thread files for us wakes us through the dispatch tables' wakers, registered under the
//! same lock the filing takes.
//!
//! Cancellation: a future takes an event out of the dispatch tables only in the poll that
//! returns it, so a dropped future (a lost `select!` branch, a `tokio::time::timeout`)
//! loses nothing. Dropping a pending connect or accept abandons that connection as
//! dropping a [`Connecting`] or an [`Accepting`] does.
//!
//! Simulated devices are refused ([`Error::Unsupported`]): their fabric runs only inside
//! the blocking calls, which there cost no wall time; use those. On the libibverbs
//! backend the wait sleeps on librdmacm's event channel fd the same way.

use std::future::{Future, poll_fn};
use std::os::fd::AsFd;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::{
    Accepting, CmDev, CmShared, ConnectOptions, Connecting, Connection, ConnectionManager,
    ConnectionRequest, Dispatch, Listener, Resolving, UdListener, UdPeer, UdRequest, lock,
};
use crate::backend::BackendKind;
use crate::error::{Error, Result};
use crate::qp::{PreparedQueuePair, QueuePair};

/// Async waiters remembered at most per device: beyond, all are woken (a spurious wake-up
/// costs one re-poll) so the list stays bounded however many futures were dropped.
const MAX_WAKERS: usize = 64;

impl CmShared {
    /// The async [`CmShared::wait`]: until `take` finds what it wants, at most `timeout`
    /// (`None`: no limit, for callers who bound it themselves).
    async fn wait_async<T>(
        &self,
        what: &'static str,
        timeout: Option<Duration>,
        mut take: impl FnMut(&mut Dispatch) -> Option<T>,
    ) -> Result<Option<T>> {
        let fd = match &self.dev {
            CmDev::Emulated(dev) => dev.cm_fd().as_fd().try_clone_to_owned(),
            // librdmacm's event channel (non-blocking, readable while events are queued).
            #[cfg(feature = "ibverbs")]
            CmDev::Hardware(hw) => {
                // SAFETY: the channel's fd stays open as long as `self` (borrowed here).
                unsafe { std::os::fd::BorrowedFd::borrow_raw(hw.fd()) }.try_clone_to_owned()
            }
            CmDev::Simulated(_) => {
                return Err(Error::Unsupported {
                    what: "async connection management (use the blocking calls: they run \
                           the simulated fabric in virtual time)",
                    backend: BackendKind::Simulated,
                });
            }
        };
        let fd = fd.map_err(|e| Error::io(format!("{what}: duplicating the CM fd"), e))?;
        // SAFETY: the registration owns the (duplicated) fd, so it stays open, naming the
        // same file, as long as the registration lives.
        let fd =
            unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| {
                let (_, e) = e.into_parts();
                Error::io(format!("{what}: registering the CM fd with tokio"), e)
            })?;
        let mut sleep = pin!(tokio::time::sleep(timeout.unwrap_or(Duration::MAX)));
        poll_fn(|cx| {
            // Bounded: each round ends, or consumed a readiness tokio reported.
            for _ in 0..1024 {
                {
                    let mut d = lock(&self.dispatch);
                    while let Some(ev) = self.dev.try_event() {
                        self.file(&mut d, ev);
                    }
                    if let Some(t) = take(&mut d) {
                        return Poll::Ready(Ok(Some(t)));
                    }
                    if !d.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                        if d.wakers.len() >= MAX_WAKERS {
                            d.wakers.drain(..).for_each(|w| w.wake());
                        }
                        d.wakers.push(cx.waker().clone());
                    }
                }
                if timeout.is_some() && sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ok(None));
                }
                match fd.poll_read_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    // Cleared only if no newer readiness came; then drain again.
                    Poll::Ready(Ok(mut guard)) => guard.clear_ready(),
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Err(Error::io(format!("{what}: the CM fd"), e)));
                    }
                }
            }
            // The fd keeps reporting readiness with nothing to take: let others run.
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }
}

impl ConnectionManager {
    /// [`ConnectionManager::connect`] as a future: the REQ goes out at once, the answer is
    /// awaited (at most `options.timeout`). Dropping the future abandons the attempt.
    pub async fn connect_async(
        &self,
        qp: PreparedQueuePair,
        to: std::net::SocketAddr,
        options: &ConnectOptions,
    ) -> Result<Connection> {
        self.start_connect(qp, to, options)?.finish().await
    }
}

impl ConnectionManager {
    /// [`ConnectionManager::resolve_ud`] as a future: the SIDR_REQ goes out at once, the
    /// answer is awaited (at most `options.timeout`). Dropping the future abandons the
    /// attempt.
    pub async fn resolve_ud_async(
        &self,
        qp: &QueuePair,
        to: std::net::SocketAddr,
        options: &ConnectOptions,
    ) -> Result<UdPeer> {
        self.start_resolve_ud(qp, to, options)?.finish().await
    }
}

impl Resolving<'_> {
    /// [`Resolving::wait`] as a future.
    pub async fn finish(self) -> Result<UdPeer> {
        let (id, left) = (self.res_id(), self.time_left());
        let ev = self
            .cm
            .shared
            .wait_async("resolve_ud", Some(left), |d| {
                d.mailboxes.get_mut(&id)?.pop_front()
            })
            .await?;
        self.conclude(ev)
    }
}

impl UdListener {
    /// [`UdListener::get_request`] as a future, without a timeout of its own (wrap it in
    /// `tokio::time::timeout`: a request is never lost to a dropped future).
    pub async fn next_request(&self) -> Result<UdRequest> {
        let service = self.service_id;
        let ev = self
            .cm
            .shared
            .wait_async("next_request", None, |d| {
                d.listeners.get_mut(&service)?.pop_front()
            })
            .await?;
        match ev {
            Some(ev) => Ok(self.request(ev)),
            None => unreachable!("a wait without a timeout ends with a request"),
        }
    }
}

impl Connecting {
    /// [`Connecting::wait`] as a future.
    pub async fn finish(self) -> Result<Connection> {
        let (id, left) = (self.conn_id(), self.time_left());
        let ev = self
            .cm
            .shared
            .wait_async("connect", Some(left), |d| {
                d.mailboxes.get_mut(&id)?.pop_front()
            })
            .await?;
        self.conclude(ev)
    }
}

impl Listener {
    /// [`Listener::get_request`] as a future, without a timeout of its own (wrap it in
    /// `tokio::time::timeout`: a request is never lost to a dropped future).
    pub async fn next_request(&self) -> Result<ConnectionRequest> {
        let service = self.service_id;
        let ev = self
            .cm
            .shared
            .wait_async("next_request", None, |d| {
                d.listeners.get_mut(&service)?.pop_front()
            })
            .await?;
        match ev {
            Some(ev) => Ok(self.request(ev)),
            None => unreachable!("a wait without a timeout ends with a request"),
        }
    }
}

impl ConnectionRequest {
    /// [`ConnectionRequest::accept`] as a future: the REP goes out at once, the RTU is
    /// awaited (at most `timeout`).
    pub async fn accept_async(
        self,
        qp: PreparedQueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Connection> {
        self.start_accept(qp, private_data)?.finish(timeout).await
    }
}

impl Accepting {
    /// [`Accepting::wait`] as a future.
    pub async fn finish(self, timeout: Duration) -> Result<Connection> {
        let id = self.conn.id;
        let first = self
            .conn
            .cm
            .shared
            .wait_async("accept", Some(timeout), |d| Self::first_event(d, id))
            .await?;
        self.conclude(first, timeout)
    }
}

impl Connection {
    /// [`Connection::disconnect`] as a future.
    pub async fn disconnect_async(&self, timeout: Duration) -> Result<()> {
        self.start_disconnect()?;
        if self
            .disconnect_seen
            .load(std::sync::atomic::Ordering::Acquire)
            || self.take_disconnected_async(Some(timeout)).await?
        {
            return Ok(());
        }
        Err(Error::Cm {
            what: "disconnect",
            reason: format!("no DREP from {} within {timeout:?}", self.peer_addr),
            errno: libc::ETIMEDOUT,
        })
    }

    /// [`Connection::wait_disconnected`] as a future, without a timeout of its own: the
    /// peer disconnected (DREQ, or our own DREQ's DREP), and we answered.
    pub async fn disconnected(&self) -> Result<()> {
        if !self
            .disconnect_seen
            .load(std::sync::atomic::Ordering::Acquire)
        {
            self.take_disconnected_async(None).await?;
        }
        self.start_disconnect()
    }

    async fn take_disconnected_async(&self, timeout: Option<Duration>) -> Result<bool> {
        let id = self.id;
        let got = self
            .cm
            .shared
            .wait_async("disconnect", timeout, |d| Self::disconnected_event(d, id))
            .await?;
        if got.is_some() {
            self.disconnect_seen
                .store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(got.is_some())
    }
}
