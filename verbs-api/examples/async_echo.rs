//! An async echo server on tokio (feature `tokio`): one task per connection, no thread
//! blocked in a verb, no busy polling.
//!
//! The story: an `echo` device (127.0.0.2) serves three clients (127.0.0.21-23), one RC
//! queue pair each. Each connection gets a task that awaits its receive completions with
//! `AsyncCq::next().await` — under the hood: arm the CQ, poll it once more, then sleep in
//! tokio's reactor on the completion channel's fd — and sends every message back
//! upper-cased. The clients are tasks too, each awaiting its own answers, all on one
//! single-threaded runtime. (Devices in one process, for brevity; the test
//! `verbs-api/tests/async_processes.rs` runs the same echo between two processes.)
//!
//! Run it with `cargo run -p softroce-verbs --features tokio --example async_echo`.

use softroce_verbs::{AsyncCq, Context, MemoryRegion, QpType, QueuePair, SendWr, WcOpcode};
use softroce_verbs::{WcStatus, WrOpcode};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CLIENTS: usize = 3;
const MESSAGES: usize = 50;

/// One end of a connection: its CQ (awaited), QP and a 128-byte buffer: bytes 0..64
/// receive, 64..128 send.
struct End {
    cq: AsyncCq,
    qp: QueuePair,
    mr: MemoryRegion,
    /// Sends whose completion has not been seen yet.
    in_flight: usize,
}

impl End {
    fn post_receive(&self) -> Result<(), BoxError> {
        // SAFETY: `mr` lives in the same `End` as the QP, so past every completion; the
        // receive half is reposted only after its completion and after it was read.
        unsafe { self.qp.post_receive(&[self.mr.slice(0..64)?], 0)? };
        Ok(())
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), BoxError> {
        self.mr.write(64, bytes)?;
        let mut wr = SendWr::new(1, WrOpcode::Send);
        wr.sg_list = vec![self.mr.slice(64..64 + bytes.len())?];
        // SAFETY: as above; the send half is rewritten only after the peer answered, so
        // after this send completed.
        unsafe { self.qp.post_send(&[wr])? };
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

/// A connected pair of ends on `server` and `client`.
fn connect(server: &Context, client: &Context) -> Result<(End, End), BoxError> {
    let mut ends = Vec::new();
    for ctx in [server, client] {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_async_cq(16)?;
        let qp = pd.create_qp(cq.cq(), cq.cq(), QpType::Rc).build()?;
        let mr = pd.allocate(128)?;
        ends.push((cq, qp, mr));
    }
    let (c, s) = (
        ends.pop().ok_or("client end")?,
        ends.pop().ok_or("server end")?,
    );
    let (se, ce) = (s.1.endpoint(), c.1.endpoint());
    let server_end = End {
        cq: s.0,
        qp: s.1.handshake(ce)?,
        mr: s.2,
        in_flight: 0,
    };
    let client_end = End {
        cq: c.0,
        qp: c.1.handshake(se)?,
        mr: c.2,
        in_flight: 0,
    };
    // Receives first, so no message meets an empty queue.
    server_end.post_receive()?;
    client_end.post_receive()?;
    Ok((server_end, client_end))
}

/// The server side of one connection: echo `MESSAGES` messages upper-cased.
async fn serve(mut end: End) -> Result<u64, BoxError> {
    for _ in 0..MESSAGES {
        let request = end.receive().await?;
        end.send(&request.to_ascii_uppercase())?;
    }
    end.flush().await?;
    Ok(end.cq.events())
}

/// A client: send each message, await the echo, check it.
async fn client(id: usize, mut end: End) -> Result<(), BoxError> {
    for n in 0..MESSAGES {
        let text = format!("client {id} says hello #{n}");
        end.send(text.as_bytes())?;
        let answer = end.receive().await?;
        if answer != text.to_ascii_uppercase().as_bytes() {
            return Err(format!("client {id}: {:?}", String::from_utf8_lossy(&answer)).into());
        }
    }
    end.flush().await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let server = Context::open_emulated("echo", "127.0.0.2".parse()?, 0)?;
    let mut tasks = tokio::task::JoinSet::new();
    let mut servers = tokio::task::JoinSet::new();
    let mut devices = Vec::new();
    for id in 0..CLIENTS {
        let device = Context::open_emulated("client", format!("127.0.0.{}", 21 + id).parse()?, 0)?;
        let (server_end, client_end) = connect(&server, &device)?;
        servers.spawn(serve(server_end));
        tasks.spawn(client(id, client_end));
        devices.push(device);
    }
    // Bound the whole run: an example must not hang CI.
    let run = async {
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        let mut wakeups = 0;
        while let Some(done) = servers.join_next().await {
            wakeups += done??;
        }
        Ok::<_, BoxError>(wakeups)
    };
    let wakeups = tokio::time::timeout(std::time::Duration::from_secs(30), run).await??;
    println!(
        "{CLIENTS} clients x {MESSAGES} messages echoed by one task per connection; the server's CQs woke {wakeups} times for {} completions",
        CLIENTS * MESSAGES * 2
    );
    Ok(())
}
