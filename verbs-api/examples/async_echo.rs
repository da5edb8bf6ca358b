//! An async echo server on tokio (feature `tokio`): one task per connection, no thread
//! blocked in a verb, no busy polling.
//!
//! The story: an `echo` device (127.78.17.10) listens on port 7471 and serves three
//! clients (127.78.17.11-13), one RC connection each, made through the connection manager
//! as with rdma_cm: the clients `connect_async`, the server awaits `next_request` and
//! `accept_async`s each in a task of its own. Each connection's task awaits its receive
//! completions with `AsyncCq::next().await` — under the hood: arm the CQ, poll it once
//! more, then sleep in tokio's reactor on the completion channel's fd — and sends every
//! message back upper-cased; at the end the client hangs up and the server sees it. All
//! on one single-threaded runtime. (Devices in one process, for brevity; the tests
//! `verbs-api/tests/async_processes.rs` and `async_cm_processes.rs` run between two.)
//!
//! Run it with `cargo run -p softroce-verbs --features tokio --example async_echo`.

use std::net::SocketAddr;
use std::time::Duration;

use softroce_verbs::cm::{ConnectOptions, Connection};
use softroce_verbs::{AsyncCq, Context, MemoryRegion, PreparedQueuePair, QpType, SendWr};
use softroce_verbs::{WcOpcode, WcStatus, WrOpcode};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CLIENTS: usize = 3;
const MESSAGES: usize = 50;
/// The server's rdma_cm address.
const SERVER: &str = "127.78.17.10:7471";
/// How long a connection step may take (a hang bound for CI, not a performance claim).
const PATIENCE: Duration = Duration::from_secs(10);

/// One end of a connection: its CQ (awaited), the connection (with its QP) and a 128-byte
/// buffer: bytes 0..64 receive, 64..128 send.
struct End {
    cq: AsyncCq,
    conn: Connection,
    mr: MemoryRegion,
    /// Sends whose completion has not been seen yet.
    in_flight: usize,
}

impl End {
    fn post_receive(&self) -> Result<(), BoxError> {
        // SAFETY: `mr` lives in the same `End` as the QP, so past every completion; the
        // receive half is reposted only after its completion and after it was read.
        unsafe { self.conn.qp().post_receive(&[self.mr.slice(0..64)?], 0)? };
        Ok(())
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), BoxError> {
        self.mr.write(64, bytes)?;
        let mut wr = SendWr::new(1, WrOpcode::Send);
        wr.sg_list = vec![self.mr.slice(64..64 + bytes.len())?].into();
        // SAFETY: as above; the send half is rewritten only after the peer answered, so
        // after this send completed.
        unsafe { self.conn.qp().post_send(&[wr])? };
        self.in_flight += 1;
        Ok(())
    }

    /// Await the next message (skipping our sends' completions) and repost the buffer.
    async fn receive(&mut self) -> Result<Vec<u8>, BoxError> {
        loop {
            let wc = self.cq.next().await?;
            if wc.status != WcStatus::Success {
                return Err(format!("{wc:?}").into());
            }
            if wc.opcode == WcOpcode::Send {
                self.in_flight = self.in_flight.saturating_sub(1);
            } else {
                let mut bytes = vec![0u8; wc.byte_len as usize];
                self.mr.read(0, &mut bytes)?;
                self.post_receive()?;
                return Ok(bytes);
            }
        }
    }

    /// Await our sends' completions, so nothing is in flight when we drop.
    async fn flush(&mut self) -> Result<(), BoxError> {
        while self.in_flight > 0 {
            let wc = self.cq.next().await?;
            if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Send {
                return Err(format!("flush: {wc:?}").into());
            }
            self.in_flight -= 1;
        }
        Ok(())
    }
}

/// A QP (in INIT) on `ctx` with its CQ and buffer, a receive already posted so no
/// message meets an empty queue.
fn prepare(ctx: &Context) -> Result<(PreparedQueuePair, AsyncCq, MemoryRegion), BoxError> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_async_cq(16)?;
    let qp = pd.create_qp(cq.cq(), cq.cq(), QpType::Rc).build()?;
    let mr = pd.allocate(128)?;
    // SAFETY: `mr` goes into the connection's `End`, with the QP, past every completion.
    unsafe { qp.post_receive(&[mr.slice(0..64)?], 0)? };
    Ok((qp, cq, mr))
}

/// A device on UDP 4791 (the CM reaches a peer's device on its own port).
fn device(name: &str, ip: &str) -> Result<Context, BoxError> {
    Ok(Context::open_emulated(name, ip.parse()?, 4791)?)
}

/// The server side of one connection: echo `MESSAGES` messages upper-cased, then wait
/// for the client to hang up.
async fn serve(mut end: End) -> Result<u64, BoxError> {
    for _ in 0..MESSAGES {
        let request = end.receive().await?;
        end.send(&request.to_ascii_uppercase())?;
    }
    end.flush().await?;
    end.conn.disconnected().await?;
    Ok(end.cq.events())
}

/// The server: accept `CLIENTS` connections, each served by a task of its own.
async fn accept_all(server: Context) -> Result<u64, BoxError> {
    let listener = server.connection_manager()?.listen(SERVER.parse()?)?;
    let mut servers = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let request = listener.next_request().await?;
        let (qp, cq, mr) = prepare(&server)?;
        servers.spawn(async move {
            let conn = request.accept_async(qp, b"", PATIENCE).await?;
            serve(End {
                cq,
                conn,
                mr,
                in_flight: 0,
            })
            .await
        });
    }
    let mut wakeups = 0;
    while let Some(done) = servers.join_next().await {
        wakeups += done??;
    }
    Ok(wakeups)
}

/// A client: connect, send each message, await the echo, check it, hang up.
async fn client(id: usize) -> Result<(), BoxError> {
    let ctx = device("client", &format!("127.78.17.{}", 11 + id))?;
    let (qp, cq, mr) = prepare(&ctx)?;
    let to: SocketAddr = SERVER.parse()?;
    let options = ConnectOptions {
        timeout: PATIENCE,
        ..ConnectOptions::default()
    };
    let conn = ctx
        .connection_manager()?
        .connect_async(qp, to, &options)
        .await?;
    let mut end = End {
        cq,
        conn,
        mr,
        in_flight: 0,
    };
    for n in 0..MESSAGES {
        let text = format!("client {id} says hello #{n}");
        end.send(text.as_bytes())?;
        let answer = end.receive().await?;
        if answer != text.to_ascii_uppercase().as_bytes() {
            return Err(format!("client {id}: {:?}", String::from_utf8_lossy(&answer)).into());
        }
    }
    end.flush().await?;
    end.conn.disconnect_async(PATIENCE).await?;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    // The listener is up before the clients start (all on this one thread).
    let server = device("echo", "127.78.17.10")?;
    let acceptor = tokio::spawn(accept_all(server));
    tokio::task::yield_now().await;
    let mut clients = tokio::task::JoinSet::new();
    for id in 0..CLIENTS {
        clients.spawn(client(id));
    }
    // Bound the whole run: an example must not hang CI.
    let run = async {
        while let Some(done) = clients.join_next().await {
            done??;
        }
        acceptor.await?
    };
    let wakeups = tokio::time::timeout(Duration::from_secs(30), run).await??;
    println!(
        "{CLIENTS} clients x {MESSAGES} messages echoed by one task per connection; the server's CQs woke {wakeups} times for {} completions",
        CLIENTS * MESSAGES * 2
    );
    Ok(())
}
