//! A UD service found by address and port, as rdma_cm's `RDMA_PS_UDP` finds it (SIDR).
//!
//! The story: an echo `server` (127.0.0.153) serves datagrams on one UD queue pair and
//! listens on UDP-space port 7174. A `client` (127.0.0.154) knows only that address and
//! port: `resolve_ud` asks the server's connection manager, whose application answers with
//! its QP (number and Q_Key) and a greeting; the client gets an address handle to it and
//! sends. The server echoes each datagram to whoever sent it (the completion's `src_qp`,
//! the GRH's source), as udaddy's server does. Then a client asking for a port nobody
//! listens on is refused at once, and one the server turns away learns why.
//!
//! Run it with `cargo run -p softroce-verbs --example ud_service`.

use std::net::SocketAddr;
use std::time::Duration;

use softroce_verbs::cm::{CmFailure, ConnectOptions, RDMA_UDP_QKEY};
use softroce_verbs::grh::{GRH_LEN, parse_grh};
use softroce_verbs::{
    CompletionQueue, Context, Error, MemoryRegion, QpType, QueuePair, QueuePairEndpoint, SendWr,
    WcOpcode, WcStatus, WrOpcode,
};

type BoxError = Box<dyn std::error::Error>;

const WAIT: Duration = Duration::from_secs(10);
const SERVICE: &str = "127.0.0.153:7174";

/// A UD QP with rdma_cm's Q_Key, ready to send, with its CQ and a buffer whose first
/// `GRH_LEN + 64` bytes take one receive (posted) and whose second half is for sends.
fn ud_qp(ctx: &Context) -> Result<(QueuePair, CompletionQueue, MemoryRegion), BoxError> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(8, None)?;
    let mr = pd.allocate(512)?;
    let qp = pd
        .create_qp(&cq, &cq, QpType::Ud)
        .qkey(RDMA_UDP_QKEY)
        .sq_sig_all(true)
        .build()?;
    let e = qp.endpoint();
    let qp = qp.handshake(e)?;
    // SAFETY: the region is returned with the QP and outlives its completions.
    unsafe { qp.post_receive(&[mr.slice(0..GRH_LEN + 64)?], 1)? };
    Ok((qp, cq, mr))
}

fn send(
    qp: &QueuePair,
    cq: &CompletionQueue,
    mr: &MemoryRegion,
    wr_ud: softroce_verbs::UdTarget,
    msg: &[u8],
) -> Result<(), BoxError> {
    mr.write(256, msg)?;
    let mut wr = SendWr::new(2, WrOpcode::Send);
    wr.sg_list = vec![mr.slice(256..256 + msg.len())?].into();
    wr.ud = Some(wr_ud);
    // SAFETY: the region outlives the completion polled below.
    unsafe { qp.post_send(&[wr])? };
    let wc = cq.poll_wait(1, WAIT)?;
    match wc.first() {
        Some(w) if w.status == WcStatus::Success && w.opcode == WcOpcode::Send => Ok(()),
        other => Err(format!("send: {other:?}").into()),
    }
}

fn main() -> Result<(), BoxError> {
    let server = Context::open_emulated("server", "127.0.0.153".parse()?, 4791)?;
    let client = Context::open_emulated("client", "127.0.0.154".parse()?, 4791)?;
    let service: SocketAddr = SERVICE.parse()?;

    let listener = server.connection_manager()?.listen_ud(service)?;
    let (sqp, scq, smr) = ud_qp(&server)?;
    let server_side = std::thread::spawn(move || -> Result<(), String> {
        let run = || -> Result<(), BoxError> {
            // The first request is answered with the service's QP, the second turned away.
            let req = listener.get_request(WAIT)?;
            println!("server: request from {}", req.peer_addr());
            req.accept(&sqp, b"echo service, v1")?;
            let wc = scq.poll_wait(1, WAIT)?;
            let wc = wc.first().ok_or("server: no datagram")?;
            let mut area = [0u8; GRH_LEN + 64];
            smr.read(0, &mut area)?;
            let sender = QueuePairEndpoint {
                qpn: wc.src_qp,
                psn: 0,
                gid: parse_grh(&area[..GRH_LEN])?.sgid,
                udp_port: 4791,
            };
            let text = &area[GRH_LEN..wc.byte_len as usize];
            println!(
                "server: {:?} from QPN {:#x}",
                String::from_utf8_lossy(text),
                wc.src_qp
            );
            let back = sqp.ud_target(sender, RDMA_UDP_QKEY)?;
            send(&sqp, &scq, &smr, back, text)?;
            listener
                .get_request(WAIT)?
                .reject(b"one client at a time")?;
            Ok(())
        };
        run().map_err(|e| e.to_string())
    });

    let (cqp, ccq, cmr) = ud_qp(&client)?;
    let cm = client.connection_manager()?;
    let options = ConnectOptions {
        timeout: WAIT,
        ..ConnectOptions::default()
    };
    let peer = cm.resolve_ud(&cqp, service, &options)?;
    println!(
        "client: {SERVICE} is QPN {:#x}, Q_Key {:#x}: {:?}",
        peer.qpn(),
        peer.qkey(),
        String::from_utf8_lossy(peer.private_data().split(|&b| b == 0).next().unwrap_or(&[]))
    );
    send(&cqp, &ccq, &cmr, peer.target(), b"hello, echo")?;
    let wc = ccq.poll_wait(1, WAIT)?;
    let wc = wc.first().ok_or("client: no echo")?;
    let mut echo = vec![0u8; wc.byte_len as usize - GRH_LEN];
    cmr.read(GRH_LEN, &mut echo)?;
    if echo != b"hello, echo" || wc.src_qp != peer.qpn() {
        return Err(format!("client: echo {echo:?} from {:#x}", wc.src_qp).into());
    }
    println!("client: echoed by QPN {:#x}", wc.src_qp);

    for (to, what) in [
        ("127.0.0.153:7175", "nobody listens"),
        (SERVICE, "turned away"),
    ] {
        match cm.resolve_ud(&cqp, to.parse()?, &options) {
            Err(Error::ConnectFailed {
                failure: failure @ CmFailure::UdRejected { .. },
                ..
            }) => println!("client: {to} ({what}): {failure}"),
            other => return Err(format!("{to}: expected a refusal, got {other:?}").into()),
        }
    }
    server_side.join().map_err(|_| "server panicked")??;
    Ok(())
}
