//! An async echo between two processes over real UDP on loopback (feature `tokio`): this
//! test starts itself a second time as the server. The two exchange their QP endpoints as
//! lines on the server's stdin and stdout (out of band), then the client sends messages and
//! awaits each reply with `AsyncCq::next`, while the server awaits requests the same way.
//!
//! `harness = false`: the binary's `main` is the test, and the environment variable
//! `SOFTROCE_ASYNC_ECHO_ROLE=server` makes it the server.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use softroce_verbs::{Context, QpType, QueuePairEndpoint, SendWr, WcOpcode, WcStatus, WrOpcode};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ROLE: &str = "SOFTROCE_ASYNC_ECHO_ROLE";
const MESSAGES: u32 = 100;
/// Each side gives up after this (a hang bound, not a performance claim).
const BOUND: Duration = Duration::from_secs(30);

fn main() -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let server = std::env::var(ROLE).as_deref() == Ok("server");
    let run = async {
        if server {
            serve("127.0.0.72").await
        } else {
            client("127.0.0.71").await
        }
    };
    rt.block_on(async {
        tokio::time::timeout(BOUND, run)
            .await
            .map_err(|_| format!("gave up after {BOUND:?}"))?
    })?;
    if !server {
        println!("async echo between two processes: {MESSAGES} messages echoed");
    }
    Ok(())
}

/// The server: prints its endpoint, reads the client's, then echoes `MESSAGES` messages
/// upper-cased.
async fn serve(ip: &str) -> Result<(), BoxError> {
    let ctx = Context::open_emulated("echo-server", ip.parse()?, 0)?;
    let pd = ctx.alloc_pd()?;
    let mut cq = ctx.create_async_cq(16)?;
    let qp = pd.create_qp(cq.cq(), cq.cq(), QpType::Rc).build()?;
    let mr = pd.allocate(128)?;
    // SAFETY (this and the posts below): `mr` outlives the QP; the receive slot (0..64) is
    // reposted only after its completion, the send slot (64..128) rewritten only after the
    // client answered, which it does after our reply arrived.
    unsafe { qp.post_receive(&[mr.slice(0..64)?], 0)? };
    println!("endpoint {}", qp.endpoint());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let qp = qp.handshake(line.parse()?)?;
    let mut echoed = 0;
    while echoed < MESSAGES {
        let wc = cq.next().await?;
        if wc.status != WcStatus::Success {
            return Err(format!("server: {wc:?}").into());
        }
        if wc.opcode != WcOpcode::Recv {
            continue; // a reply's acknowledgement
        }
        let mut text = vec![0u8; wc.byte_len as usize];
        mr.read(0, &mut text)?;
        unsafe { qp.post_receive(&[mr.slice(0..64)?], 0)? };
        mr.write(64, &text.to_ascii_uppercase())?;
        let mut reply = SendWr::new(1, WrOpcode::Send);
        reply.sg_list = vec![mr.slice(64..64 + text.len())?].into();
        unsafe { qp.post_send(&[reply])? };
        echoed += 1;
    }
    // The last reply's acknowledgement, so nothing is in flight when the device closes.
    loop {
        let wc = cq.next().await?;
        if wc.opcode == WcOpcode::Send {
            return Ok(());
        }
    }
}

/// The client: starts the server, exchanges endpoints, sends and checks every echo.
async fn client(ip: &str) -> Result<(), BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(ROLE, "server")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let result = talk_to(ip, &mut child).await;
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

async fn talk_to(ip: &str, child: &mut std::process::Child) -> Result<(), BoxError> {
    let ctx = Context::open_emulated("echo-client", ip.parse()?, 0)?;
    let pd = ctx.alloc_pd()?;
    let mut cq = ctx.create_async_cq(16)?;
    let qp = pd.create_qp(cq.cq(), cq.cq(), QpType::Rc).build()?;
    let mr = pd.allocate(128)?;

    // The server's first line names its endpoint (read on a blocking thread: a pipe).
    let stdout = child.stdout.take().ok_or("no server stdout")?;
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await??;
    let server: QueuePairEndpoint = line
        .strip_prefix("endpoint ")
        .ok_or_else(|| format!("server said {line:?}, not its endpoint"))?
        .parse()?;
    let mut stdin = child.stdin.take().ok_or("no server stdin")?;
    writeln!(stdin, "{}", qp.endpoint())?;
    let qp = qp.handshake(server)?;

    for i in 0..MESSAGES {
        let text = format!("async message {i}");
        // SAFETY: `mr` outlives the QP; each slot is reused only after its completions.
        unsafe { qp.post_receive(&[mr.slice(0..64)?], 0)? };
        mr.write(64, text.as_bytes())?;
        let mut wr = SendWr::new(1, WrOpcode::Send);
        wr.sg_list = vec![mr.slice(64..64 + text.len())?].into();
        // SAFETY: as above.
        unsafe { qp.post_send(&[wr])? };
        let (mut sent, mut replied) = (false, false);
        while !(sent && replied) {
            let wc = cq.next().await?;
            if wc.status != WcStatus::Success {
                return Err(format!("client: {wc:?}").into());
            }
            match wc.opcode {
                WcOpcode::Send => sent = true,
                _ => replied = true,
            }
        }
        let mut got = vec![0u8; text.len()];
        mr.read(0, &mut got)?;
        if got != text.to_ascii_uppercase().as_bytes() {
            return Err(
                format!("{text:?} came back as {:?}", String::from_utf8_lossy(&got)).into(),
            );
        }
    }
    Ok(())
}
