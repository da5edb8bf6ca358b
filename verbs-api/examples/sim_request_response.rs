//! A request/response service tested against faults, deterministically.
//!
//! The story: a client connects to a server through the connection manager (rdma_cm's
//! listen / connect / accept, over the IB CM on QP1) and asks it to upper-case short
//! strings over the connected RC queue pair, then hangs up. We want to know it survives a
//! lossy, reordering link and a 100 ms partition, in setup and teardown too. Rather than
//! hoping a flaky CI network shows us the bad cases, we run the very same verbs code on a
//! simulated fabric, in virtual time, across 200 seeds; each seed places the faults
//! differently. If a seed fails, `sim::check` names it, and `SOFTROCE_SIM_SEED=<seed>`
//! replays exactly that run.
//!
//! Run it with `cargo run -p softroce-verbs --example sim_request_response`; add
//! `-- /tmp/service.pcap` to keep the packets of seed 0 for Wireshark.

use std::time::Duration;

use softroce_verbs::cm::ConnectOptions;
use softroce_verbs::sim::{self, Fabric};
use softroce_verbs::{Context, QpType, SendWr, WcStatus, WrOpcode};

type BoxError = Box<dyn std::error::Error>;

const WORDS: [&str; 5] = ["remote", "direct", "memory", "access", "works"];

/// The code under test: ordinary softroce-verbs calls, nothing simulation-specific.
fn upper_case_service(client: &Context, server: &Context) -> Result<(), BoxError> {
    // Each side: a PD, a CQ, a QP and one 64-byte buffer to send from and one to receive in.
    let (cp, sp) = (client.alloc_pd()?, server.alloc_pd()?);
    let (ccq, scq) = (client.create_cq(16, None)?, server.create_cq(16, None)?);
    let cqp = cp.create_qp(&ccq, &ccq, QpType::Rc).build()?;
    let sqp = sp.create_qp(&scq, &scq, QpType::Rc).build()?;
    let (cbuf, sbuf) = (cp.allocate(128)?, sp.allocate(128)?);
    // Connect through the CM. One thread plays both sides, so each side's blocking call
    // is split in two: every wait runs the fabric while the other side's CM answers.
    let addr = "10.0.0.2:7471".parse()?;
    let listener = server.connection_manager()?.listen(addr)?;
    let connecting =
        client
            .connection_manager()?
            .start_connect(cqp, addr, &ConnectOptions::default())?;
    let accepting = listener
        .get_request(Duration::from_secs(30))?
        .start_accept(sqp, b"")?;
    let to_server = connecting.wait()?; // REP taken, RTU sent
    let to_client = accepting.wait(Duration::from_secs(30))?; // RTU (or first data) seen
    let (cqp, sqp) = (to_server.qp(), to_client.qp());

    for word in WORDS {
        // Both sides post their receive first (bytes 64..128), then the client sends the
        // word from bytes 0..64.
        // SAFETY: the buffers outlive the QPs; each is reused only after its completion.
        unsafe {
            sqp.post_receive(&[sbuf.slice(64..128)?], 1)?;
            cqp.post_receive(&[cbuf.slice(64..128)?], 1)?;
        }
        cbuf.write(0, word.as_bytes())?;
        let mut request = SendWr::new(2, WrOpcode::Send);
        request.sg_list = vec![cbuf.slice(0..word.len())?].into();
        // SAFETY: as above.
        unsafe { cqp.post_send(&[request])? };

        // The server waits for the request (in virtual time: a timeout costs nothing),
        // answers, and waits for its reply to be acknowledged.
        let got = scq.poll_wait(1, Duration::from_secs(5))?;
        let request = got.first().ok_or("server: no request within 5 s")?;
        let mut text = vec![0u8; request.byte_len as usize];
        sbuf.read(64, &mut text)?;
        sbuf.write(0, &text.to_ascii_uppercase())?;
        let mut reply = SendWr::new(3, WrOpcode::Send);
        reply.sg_list = vec![sbuf.slice(0..text.len())?].into();
        // SAFETY: as above.
        unsafe { sqp.post_send(&[reply])? };
        let sent = scq.poll_wait(1, Duration::from_secs(5))?;
        if sent.first().map(|wc| wc.status) != Some(WcStatus::Success) {
            return Err(format!("server: reply to {word:?} not acknowledged: {sent:?}").into());
        }

        // The client collects its send completion and the answer, in either order.
        let done = ccq.poll_wait(2, Duration::from_secs(5))?;
        if done.len() != 2 || done.iter().any(|wc| wc.status != WcStatus::Success) {
            return Err(format!("client: {word:?} got {done:?}").into());
        }
        let mut answer = vec![0u8; word.len()];
        cbuf.read(64, &mut answer)?;
        if answer != word.to_ascii_uppercase().as_bytes() {
            return Err(format!("client: {word:?} came back as {answer:?}").into());
        }
    }
    // The client hangs up (DREQ); the server sees it and answers (DREP).
    to_server.start_disconnect()?;
    to_client.wait_disconnected(Duration::from_secs(30))?;
    to_server.disconnect(Duration::from_secs(30))?;
    Ok(())
}

/// One simulated world per seed: two devices, a bad link, a partition, then the service.
fn scenario(fabric: &Fabric) -> Result<(), BoxError> {
    let client = fabric.device("client", "10.0.0.1".parse()?)?;
    let server = fabric.device("server", "10.0.0.2".parse()?)?;
    // The same fault language as SOFTROCE_FAULTS; the fabric's seed drives it.
    fabric.set_link_faults("client", "server", "drop=0.03,reorder=0.05,dup=0.01")?;
    // Cut the link for 100 ms at a moment chosen by the seed (in the first 5 ms).
    let cut = Duration::from_micros(fabric.seed() * 37 % 5_000);
    fabric.at(cut, |f| f.partition("client", "server"));
    fabric.at(cut + Duration::from_millis(100), |f| {
        f.heal("client", "server")
    });
    upper_case_service(&client, &server)
}

fn main() -> Result<(), BoxError> {
    // 200 seeds; a failure panics with the seed and the end of the event log.
    sim::check(200, scenario);
    println!("200 seeds passed");

    // Look at one run in detail: what the fabric did and, if asked, its packets.
    let fabric = Fabric::new(0);
    fabric.capture(true);
    scenario(&fabric)?;
    println!(
        "seed 0: {:?} of virtual time; {}",
        fabric.now(),
        fabric.stats()
    );
    for event in fabric.log() {
        println!("  {event}");
    }
    if let Some(path) = std::env::args().nth(1) {
        fabric.write_pcap(&path)?;
        println!("packets of seed 0 written to {path}");
    }
    Ok(())
}
