//! UD datagrams and the 40-byte GRH area: answering a sender you only know from its packet.
//!
//! The story: a time `server` (127.0.0.152) has one UD queue pair and knows nobody. A
//! `client` (127.0.0.151) sends it a request. On UD, every receive buffer starts with 40
//! bytes the device fills with the packet's global route header; over RoCEv2/IPv4 that is
//! the IPv4 header, in the last 20 of the 40 bytes. The server reads the client's address
//! out of it, takes the sender's QP number from the completion (`src_qp`), makes an address
//! handle from the two and answers — as a UD server does with `ibv_create_ah_from_wc`.
//! (Two devices in one process, for brevity. Both use RoCEv2's port 4791: the answer goes
//! to the address found in the GRH, and the well-known port is all the server can assume.)
//!
//! Run it with `cargo run -p softroce-verbs --example ud_grh`.

use std::time::Duration;

use softroce_verbs::grh::{GRH_LEN, parse_grh};
use softroce_verbs::{
    Context, QpType, QueuePairEndpoint, SendWr, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

type BoxError = Box<dyn std::error::Error>;

const WAIT: Duration = Duration::from_secs(10);
/// Both sides agree on the Q_Key, the UD password.
const QKEY: u32 = 0x1111_1111;
const REQUEST: &[u8] = b"what time is it?";

fn main() -> Result<(), BoxError> {
    let server = Context::open_emulated("server", "127.0.0.152".parse()?, 4791)?;
    let client = Context::open_emulated("client", "127.0.0.151".parse()?, 4791)?;
    let (sp, cp) = (server.alloc_pd()?, client.alloc_pd()?);
    let (scq, ccq) = (server.create_cq(8, None)?, client.create_cq(8, None)?);
    let (smr, cmr) = (sp.allocate(4096)?, cp.allocate(4096)?);

    // A UD QP is ready to send after build + handshake; the endpoint given to handshake
    // is not a peer (UD has none), any will do: the destination is chosen per send.
    let sq = sp.create_qp(&scq, &scq, QpType::Ud).qkey(QKEY).build()?;
    let cq = cp.create_qp(&ccq, &ccq, QpType::Ud).qkey(QKEY).build()?;
    let (se, ce) = (sq.endpoint(), cq.endpoint());
    let (sq, cq) = (sq.handshake(ce)?, cq.handshake(se)?);

    // Receive buffers are 40 bytes longer than the largest message: the GRH area first.
    // SAFETY (this and every post below): both regions live to the end of main, after every
    // completion was polled.
    unsafe {
        sq.post_receive(&[smr.slice(0..GRH_LEN + 256)?], 1)?;
        cq.post_receive(&[cmr.slice(0..GRH_LEN + 256)?], 1)?;
    }

    // The client knows the server's address and QPN (a well-known service).
    cmr.write(1024, REQUEST)?;
    let mut request = SendWr::new(2, WrOpcode::Send);
    request.sg_list = vec![cmr.slice(1024..1024 + REQUEST.len())?].into();
    request.ud = Some(cq.ud_target(se, QKEY)?);
    unsafe { cq.post_send(&[request])? };

    // The server's receive: byte_len counts the GRH area too.
    let wc = expect(&scq, WcOpcode::Recv)?;
    if !wc.wc_flags.contains(WcFlags::GRH) || wc.byte_len as usize != GRH_LEN + REQUEST.len() {
        return Err(format!("server: unexpected completion {wc:?}").into());
    }
    let mut area = [0u8; GRH_LEN];
    smr.read(0, &mut area)?;
    let grh = parse_grh(&area)?;
    let mut text = vec![0u8; REQUEST.len()];
    smr.read(GRH_LEN, &mut text)?;
    println!(
        "server: {:?} from {} (GID {}), QPN {:#x}, TTL {}",
        String::from_utf8_lossy(&text),
        grh.sgid.to_ip(),
        grh.sgid,
        wc.src_qp,
        grh.hop_limit
    );

    // Answer whoever asked: the GRH's source GID and the completion's source QPN.
    let sender = QueuePairEndpoint {
        qpn: wc.src_qp,
        psn: 0, // UD has no PSN state to agree on
        gid: grh.sgid,
        udp_port: 4791,
    };
    let answer = b"it is noon";
    smr.write(2048, answer)?;
    let mut reply = SendWr::new(3, WrOpcode::Send);
    reply.sg_list = vec![smr.slice(2048..2048 + answer.len())?].into();
    reply.ud = Some(sq.ud_target(sender, QKEY)?);
    unsafe { sq.post_send(&[reply])? };
    expect(&scq, WcOpcode::Send)?;

    expect(&ccq, WcOpcode::Send)?;
    let wc = expect(&ccq, WcOpcode::Recv)?;
    let mut got = vec![0u8; wc.byte_len as usize - GRH_LEN];
    cmr.read(GRH_LEN, &mut got)?;
    if got != answer || wc.src_qp != se.qpn {
        return Err(format!("client: {wc:?} {:?}", String::from_utf8_lossy(&got)).into());
    }
    println!(
        "client: {:?} from QPN {:#x}",
        String::from_utf8_lossy(&got),
        wc.src_qp
    );
    Ok(())
}

/// The next completion, which must succeed and be of `opcode`.
fn expect(
    cq: &softroce_verbs::CompletionQueue,
    opcode: WcOpcode,
) -> Result<softroce_verbs::WorkCompletion, BoxError> {
    let wc = cq.poll_wait(1, WAIT)?;
    match wc.first() {
        Some(wc) if wc.status == WcStatus::Success && wc.opcode == opcode => Ok(*wc),
        other => Err(format!("expected a {opcode:?} completion, got {other:?}").into()),
    }
}
