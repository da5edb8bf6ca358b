//! A user's RC request/response service, tested the way its author would: on a simulated
//! fabric, under loss, reordering and a partition, across a thousand seeds.
//!
//! The service is ordinary `softroce-verbs` code. The client sends numbered requests
//! carrying a few numbers; the server replies with their sum. One thread runs both ends as
//! an event loop: every empty poll moves the simulated fabric one step.

use std::time::Duration;

use softroce_verbs::sim::{self, Fabric};
use softroce_verbs::{
    CompletionQueue, Context, MemoryRegion, QpType, QueuePair, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// Requests per run: enough for faults to hit several of them.
const REQUESTS: u64 = 12;
/// Bytes of one message: request number, then four numbers (or the sum).
const MSG: usize = 40;
/// Receive buffers each side keeps posted.
const RECV_SLOTS: usize = 4;

type BoxError = Box<dyn std::error::Error>;

/// One end of the service: a QP, its CQ, a ring of receive slots and a send buffer.
struct End {
    qp: QueuePair,
    cq: CompletionQueue,
    recv: MemoryRegion,
    send: MemoryRegion,
}

impl End {
    /// Bring up one end per context and connect them (the endpoint exchange is out of band).
    fn pair(a: &Context, b: &Context) -> Result<(Self, Self), BoxError> {
        let prepare = |ctx: &Context| -> Result<_, BoxError> {
            let pd = ctx.alloc_pd()?;
            let cq = ctx.create_cq(32, None)?;
            let qp = pd
                .create_qp(&cq, &cq, QpType::Rc)
                .sq_sig_all(true)
                .build()?;
            let recv = pd.allocate(MSG * RECV_SLOTS)?;
            for slot in 0..RECV_SLOTS {
                // SAFETY: `recv` lives in the `End` with the QP, past every completion.
                unsafe {
                    qp.post_receive(&[recv.slice(slot * MSG..(slot + 1) * MSG)?], slot as u64)?
                };
            }
            Ok((qp, cq, recv, pd.allocate(MSG)?))
        };
        let (qa, ca, ra, sa) = prepare(a)?;
        let (qb, cb, rb, sb) = prepare(b)?;
        let (ea, eb) = (qa.endpoint(), qb.endpoint());
        let client = Self {
            qp: qa.handshake(eb)?,
            cq: ca,
            recv: ra,
            send: sa,
        };
        let server = Self {
            qp: qb.handshake(ea)?,
            cq: cb,
            recv: rb,
            send: sb,
        };
        Ok((client, server))
    }

    /// Send the eight-byte words in `words` (the send buffer is free: the caller waited
    /// for the previous send's completion).
    fn send(&self, id: u64, words: &[u64]) -> Result<(), BoxError> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.send.write(0, &bytes)?;
        let mut wr = SendWr::new(id, WrOpcode::Send);
        wr.sg_list = vec![self.send.slice(0..bytes.len())?].into();
        // SAFETY: `send` outlives the QP; nothing writes it again before this completes.
        unsafe { self.qp.post_send(&[wr])? };
        Ok(())
    }

    /// Poll once: a received message (its words; the slot is posted again) or a send
    /// completion (`None`). Failed completions are errors.
    fn poll(&self) -> Result<Option<Event>, BoxError> {
        let mut wc = [WorkCompletion::success(0, 0, WcOpcode::Send, 0)];
        if self.cq.poll(&mut wc)? == 0 {
            return Ok(None);
        }
        let wc = wc[0];
        if wc.status != WcStatus::Success {
            return Err(format!("completion of wr {} failed: {}", wc.wr_id, wc.status).into());
        }
        if wc.opcode != WcOpcode::Recv {
            return Ok(Some(Event::Sent));
        }
        let slot = wc.wr_id as usize;
        let mut bytes = vec![0u8; wc.byte_len as usize];
        self.recv.read(slot * MSG, &mut bytes)?;
        let words = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        // SAFETY: as when first posted.
        unsafe {
            self.qp
                .post_receive(&[self.recv.slice(slot * MSG..(slot + 1) * MSG)?], wc.wr_id)?
        };
        Ok(Some(Event::Received(words)))
    }
}

enum Event {
    Sent,
    Received(Vec<u64>),
}

/// The service: the client asks for REQUESTS sums, one at a time, and checks each answer.
/// Polls are bounded; running out means the service hung.
fn run_service(client: &End, server: &End) -> Result<(), BoxError> {
    for id in 0..REQUESTS {
        let numbers = [id, id * 3, 7, 1000 + id];
        let mut request = vec![id];
        request.extend_from_slice(&numbers);
        client.send(id, &request)?;
        let (mut sent, mut answered) = (false, false);
        let mut server_sent = true;
        for _ in 0..200_000 {
            match server.poll()? {
                Some(Event::Received(words)) => {
                    let sum: u64 = words[1..].iter().sum();
                    if !server_sent {
                        return Err(
                            "server: a request arrived before its last reply went out".into()
                        );
                    }
                    server.send(words[0], &[words[0], sum])?;
                    server_sent = false;
                }
                Some(Event::Sent) => server_sent = true,
                None => {}
            }
            match client.poll()? {
                Some(Event::Received(words)) => {
                    let want = numbers.iter().sum::<u64>();
                    if words != [id, want] {
                        return Err(
                            format!("request {id}: answer {words:?}, want [{id}, {want}]").into(),
                        );
                    }
                    answered = true;
                }
                Some(Event::Sent) => sent = true,
                None => {}
            }
            if sent && answered && server_sent {
                break;
            }
        }
        if !(sent && answered && server_sent) {
            return Err(format!("request {id} never completed").into());
        }
    }
    Ok(())
}

/// The scenario: 2 % loss and 5 % reordering between client and server, and a 150 ms
/// partition somewhere in the first 20 ms (placed by the seed).
fn lossy_partitioned_run(fabric: &Fabric) -> Result<(), BoxError> {
    let a = fabric.device("client", "10.0.0.1".parse()?)?;
    let b = fabric.device("server", "10.0.0.2".parse()?)?;
    fabric.set_link_faults("client", "server", "drop=0.02,reorder=0.05")?;
    let cut = Duration::from_micros(fabric.seed() % 20_000);
    fabric.at(cut, |f| f.partition("client", "server"));
    fabric.at(cut + Duration::from_millis(150), |f| {
        f.heal("client", "server")
    });
    let (client, server) = End::pair(&a, &b)?;
    run_service(&client, &server)
}

#[test]
fn the_service_answers_every_request_under_loss_reordering_and_a_partition_for_1000_seeds() {
    sim::check(1000, lossy_partitioned_run);
}

#[test]
fn the_same_seed_replays_the_same_packets_byte_for_byte() {
    let trace = |seed| {
        let fabric = Fabric::new(seed);
        fabric.capture(true);
        lossy_partitioned_run(&fabric).expect("the service works");
        (fabric.pcap(), fabric.now(), fabric.stats())
    };
    let first = trace(42);
    eprintln!("seed 42: {:?} of virtual time, {}", first.1, first.2);
    assert!(
        first.2.dropped_partition > 0,
        "the partition cut traffic: {}",
        first.2
    );
    assert!(
        first.1 > Duration::from_millis(150),
        "the service waited out the partition"
    );
    assert!(first.0.len() > 24, "packets were captured");
    assert_eq!(trace(42), first, "same seed, same trace");
    assert_ne!(trace(43).0, first.0, "another seed meets other faults");
}
