//! Async connection management between two processes over real UDP on loopback (feature
//! `tokio`): this test starts itself a second time as the server. The server listens and
//! accepts every request in a task of its own (`next_request`, `accept_async`), echoes one
//! message per connection and waits for the client to hang up (`disconnected`). The client
//! opens three connections at once (`connect_async`), sends on each, awaits the echoes
//! with `AsyncCq::next` and disconnects (`disconnect_async`). No address or QP number is
//! exchanged out of band: the CM carries it all.
//!
//! The server waits for requests through a 1 ms `tokio::time::timeout` in a loop, so most
//! of its waits are cancelled, some while a request is arriving: every request must still
//! be served (a dropped wait loses nothing).
//!
//! `harness = false`: the binary's `main` is the test; `SOFTROCE_ASYNC_CM_ROLE=server`
//! makes it the server.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use softroce_emu::driver::DeviceConfig;
use softroce_verbs::cm::{ConnectOptions, Connection, ConnectionRequest};
use softroce_verbs::tokio::AsyncCq;
use softroce_verbs::{Context, Error, MemoryRegion, QpType, SendWr, WcOpcode, WcStatus, WrOpcode};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ROLE: &str = "SOFTROCE_ASYNC_CM_ROLE";
const SERVER_IP: &str = "127.78.17.2";
const CLIENT_IP: &str = "127.78.17.1";
const PORT: u16 = 7471;
const CONNECTIONS: usize = 3;
/// Each side gives up after this (a hang bound, not a performance claim).
const BOUND: Duration = Duration::from_secs(30);
/// Cancelled waits the server may go through before it has served everyone.
const MAX_WAITS: u32 = 20_000;

fn main() -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let server = std::env::var(ROLE).as_deref() == Ok("server");
    rt.block_on(async {
        let run = async {
            if server {
                serve().await
            } else {
                client().await
            }
        };
        tokio::time::timeout(BOUND, run)
            .await
            .map_err(|_| format!("gave up after {BOUND:?}"))?
    })?;
    if !server {
        a_simulated_device_refuses_async_waits()?;
        println!("async CM between two processes: {CONNECTIONS} connections made, used, closed");
    }
    Ok(())
}

fn device(name: &str, ip: &str) -> Result<Context, BoxError> {
    // UDP 4791 on addresses of their own: the CM reaches a peer's device on its own port.
    let mut cfg = DeviceConfig::new(name, ip.parse()?);
    cfg.pcap = None;
    cfg.faults = None;
    // A lost CM message is retried after 64 ms instead of rdma_cm's 4 s.
    cfg.cm_response_timeout = 14;
    Ok(Context::open_emulated_with(cfg)?)
}

/// A QP's CQ (awaitable) and a 128-byte buffer: receive into 0..64, send from 64..128.
struct End {
    cq: AsyncCq,
    mr: MemoryRegion,
}

/// An RC QP in INIT with one receive posted.
fn prepare(ctx: &Context) -> Result<(End, softroce_verbs::PreparedQueuePair), BoxError> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_async_cq(8)?;
    let qp = pd.create_qp(cq.cq(), cq.cq(), QpType::Rc).build()?;
    let mr = pd.allocate(128)?;
    // SAFETY: `mr` lives in the returned End, past every completion of the QP.
    unsafe { qp.post_receive(&[mr.slice(0..64)?], 0)? };
    Ok((End { cq, mr }, qp))
}

/// Send `text` from 64.. and await `want` completions (the send's, and a receive's if
/// `want` is 2), returning what was received.
async fn send(
    conn: &Connection,
    end: &mut End,
    text: &[u8],
    want: usize,
) -> Result<Vec<u8>, BoxError> {
    end.mr.write(64, text)?;
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sg_list = vec![end.mr.slice(64..64 + text.len())?].into();
    // SAFETY: the buffer outlives the completion awaited below.
    unsafe { conn.qp().post_send(&[wr])? };
    let mut received = Vec::new();
    for _ in 0..want {
        let wc = end.cq.next().await?;
        if wc.status != WcStatus::Success {
            return Err(format!("{wc:?}").into());
        }
        if wc.opcode == WcOpcode::Recv {
            received = vec![0u8; wc.byte_len as usize];
            end.mr.read(0, &mut received)?;
        }
    }
    Ok(received)
}

async fn serve() -> Result<(), BoxError> {
    let ctx = device("cm-server", SERVER_IP)?;
    let listener = ctx
        .connection_manager()?
        .listen(SocketAddr::new(SERVER_IP.parse()?, PORT))?;
    println!("listening");
    let mut tasks = Vec::new();
    let mut waits = 0;
    while tasks.len() < CONNECTIONS {
        waits += 1;
        if waits > MAX_WAITS {
            return Err(format!("only {} requests after {MAX_WAITS} waits", tasks.len()).into());
        }
        // Dropped after 1 ms unless a request is there: cancellation must lose nothing.
        let Ok(request) =
            tokio::time::timeout(Duration::from_millis(1), listener.next_request()).await
        else {
            continue;
        };
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(echo_once(ctx, request?)));
    }
    for task in tasks {
        task.await??;
    }
    eprintln!("server: {waits} waits for {CONNECTIONS} requests");
    Ok(())
}

/// Accept, echo one message upper-cased, then wait for the client to hang up.
async fn echo_once(ctx: Context, request: ConnectionRequest) -> Result<(), BoxError> {
    let hello = request.private_data()[..6].to_vec();
    if hello != b"client" {
        return Err(format!("request private data {hello:?}").into());
    }
    let (mut end, qp) = prepare(&ctx)?;
    let conn = request.accept_async(qp, b"server", BOUND).await?;
    let wc = end.cq.next().await?;
    if wc.status != WcStatus::Success || wc.opcode != WcOpcode::Recv {
        return Err(format!("server: {wc:?}").into());
    }
    let mut text = vec![0u8; wc.byte_len as usize];
    end.mr.read(0, &mut text)?;
    send(&conn, &mut end, &text.to_ascii_uppercase(), 1).await?;
    conn.disconnected().await?;
    Ok(())
}

async fn client() -> Result<(), BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(ROLE, "server")
        .stdout(Stdio::piped())
        .spawn()?;
    let result = talk(&mut child).await;
    if result.is_err() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    result?;
    if !status.success() {
        return Err(format!("the server process failed: {status}").into());
    }
    Ok(())
}

async fn talk(child: &mut std::process::Child) -> Result<(), BoxError> {
    let stdout = child.stdout.take().ok_or("no server stdout")?;
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await??;
    if line.trim() != "listening" {
        return Err(format!("server said {line:?}").into());
    }
    let ctx = device("cm-client", CLIENT_IP)?;
    let cm = ctx.connection_manager()?;
    let to = SocketAddr::new(SERVER_IP.parse()?, PORT);
    let conversations = (0..CONNECTIONS).map(move |i| {
        let (ctx, cm) = (ctx.clone(), cm.clone());
        async move {
            // Staggered, so the server's waits time out (are cancelled) in between.
            tokio::time::sleep(Duration::from_millis(20 * i as u64)).await;
            let (mut end, qp) = prepare(&ctx)?;
            let options = ConnectOptions {
                private_data: b"client".to_vec(),
                timeout: BOUND,
                ..ConnectOptions::default()
            };
            let conn = cm.connect_async(qp, to, &options).await?;
            if &conn.private_data()[..6] != b"server" {
                return Err::<(), BoxError>("the REP's private data".into());
            }
            let text = format!("connection {i}");
            let echo = send(&conn, &mut end, text.as_bytes(), 2).await?;
            if echo != text.to_ascii_uppercase().as_bytes() {
                return Err(format!("{text:?} came back as {echo:?}").into());
            }
            conn.disconnect_async(BOUND).await?;
            Ok(())
        }
    });
    // All three at once, each in a task of its own.
    let tasks: Vec<_> = conversations.map(tokio::spawn).collect();
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// On a simulated fabric the async waits are refused with the reason (its fabric runs only
/// inside the blocking calls).
fn a_simulated_device_refuses_async_waits() -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let fabric = softroce_verbs::sim::Fabric::new(1);
    let (a, b) = (
        fabric.device("a", "10.0.0.1".parse()?)?,
        fabric.device("b", "10.0.0.2".parse()?)?,
    );
    let listener = b.connection_manager()?.listen("10.0.0.2:7471".parse()?)?;
    let err = rt
        .block_on(listener.next_request())
        .expect_err("refused on a simulated device");
    if !matches!(err, Error::Unsupported { .. }) || !err.to_string().contains("blocking calls") {
        return Err(format!("unexpected: {err}").into());
    }
    drop(a);
    Ok(())
}
