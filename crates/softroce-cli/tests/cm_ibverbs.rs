//! The Rust connection manager on the libibverbs backend, told as stories: librdmacm and
//! libibverbs are loaded at run time, here softroce's drop-in `librdmacm.so.1` and
//! `libibverbs.so.1` that cargo built (devices `hw*` of `SOFTROCE_DEVICES`), and the peer is
//! the emulator's own CM on another loopback address of the same process. Every step of
//! the hardware path runs: the event channel, address and route resolution, REQ/REP/RTU,
//! the application's QP moved by `rdma_init_qp_attr`, REJ with private data, DREQ/DREP,
//! and UD address resolution (ids of `RDMA_PS_UDP`: SIDR_REQ/SIDR_REP, the peer's address
//! vector from `param.ud`).
//! Against rdma_rxe the same calls reach the kernel's rdma_cm.
//!
//! One process, the stories in turn (`harness = false`): the environment that names the
//! libraries and devices is set once, before any thread exists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use softroce_verbs::cm::{CmFailure, ConnectOptions, Connection, RDMA_UDP_QKEY};
use softroce_verbs::grh::{GRH_LEN, parse_grh};
use softroce_verbs::{
    CompletionQueue, Context, Error, MemoryRegion, PreparedQueuePair, QpState, QpType, QueuePair,
    QueuePairEndpoint, SendWr, UdTarget, WcOpcode, WcStatus, WrOpcode,
};

const WAIT: Duration = Duration::from_secs(20);
const PORT: u16 = 7471;

/// The libibverbs device names of `SOFTROCE_DEVICES` and their addresses.
const DEVICES: &str = "hw0=127.0.21.1,hw1=127.0.21.3,hw2=127.0.21.5,hw3=127.0.21.7,hw4=127.0.21.11,\
                       hw5=127.0.24.1,hw6=127.0.24.3";

/// The drop-in libraries cargo built for these tests (dependencies of the CLI).
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    [deps.clone(), deps.join("..")]
        .into_iter()
        .find(|d| d.join("libibverbs.so").is_file() && d.join("librdmacm.so").is_file())
        .unwrap_or_else(|| panic!("libibverbs.so and librdmacm.so not built next to {deps:?}"))
}

fn hardware(device: &str) -> Context {
    Context::open_ibverbs(Some(device), None).unwrap()
}

fn emulated(ip: &str) -> Context {
    let mut cfg = softroce_emu::driver::DeviceConfig::new("cm", ip.parse().unwrap());
    cfg.pcap = None;
    cfg.faults = None;
    Context::open_emulated_with(cfg).unwrap()
}

fn options(private_data: &[u8]) -> ConnectOptions {
    ConnectOptions {
        private_data: private_data.to_vec(),
        timeout: WAIT,
        ..ConnectOptions::default()
    }
}

/// A QP, its CQ and a 128-byte buffer (receive at 0..16, RDMA WRITE target at 64..96,
/// sends from 32..48), one receive posted.
struct Endpoint {
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn endpoint(ctx: &Context) -> (Endpoint, PreparedQueuePair) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let mr = pd.allocate(128).unwrap();
    // SAFETY: `mr` lives in the returned Endpoint, which outlives the QP's completions.
    unsafe { qp.post_receive(&[mr.slice(0..16).unwrap()], 1).unwrap() };
    (Endpoint { cq, mr }, qp)
}

/// Where a peer may RDMA WRITE into `ep`'s buffer: address and R_Key, as private data.
fn write_target(ep: &Endpoint) -> Vec<u8> {
    let mut v = ep.mr.addr(64).to_le_bytes().to_vec();
    v.extend_from_slice(&ep.mr.rkey().to_le_bytes());
    v
}

fn parse_target(private_data: &[u8]) -> (u64, u32) {
    let addr = u64::from_le_bytes(private_data[..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(private_data[8..12].try_into().unwrap());
    (addr, rkey)
}

fn post(conn: &Connection, wr: SendWr) {
    // SAFETY: the buffers stay registered until the completions are polled by the caller.
    unsafe { conn.qp().post_send(&[wr]).unwrap() };
}

/// The client's half: RDMA WRITE 32 bytes into the server's buffer, then a SEND; wait for
/// both and for the server's answer; disconnect.
fn client_half(conn: &Connection, ep: &Endpoint, what: &str) {
    let (addr, rkey) = parse_target(conn.private_data());
    let payload = [0xA5u8; 32];
    ep.mr.write(64, &payload).unwrap();
    let mut write = SendWr::new(10, WrOpcode::RdmaWrite);
    write.sg_list = vec![ep.mr.slice(64..96).unwrap()].into();
    write.rdma.remote_addr = addr;
    write.rdma.rkey = rkey;
    post(conn, write);
    ep.mr.write(32, b"after the write!").unwrap();
    let mut send = SendWr::new(11, WrOpcode::Send);
    send.sg_list = vec![ep.mr.slice(32..48).unwrap()].into();
    post(conn, send);
    let mut kinds = Vec::new();
    let deadline = Instant::now() + WAIT;
    // Bounded by the deadline: the WRITE and SEND complete, the answer arrives.
    while kinds.len() < 3 && Instant::now() < deadline {
        for wc in ep.cq.poll_wait(1, WAIT).unwrap() {
            assert_eq!(wc.status, WcStatus::Success, "{what}: {wc:?}");
            kinds.push(wc.opcode);
        }
    }
    assert!(
        kinds.contains(&WcOpcode::RdmaWrite)
            && kinds.contains(&WcOpcode::Send)
            && kinds.contains(&WcOpcode::Recv),
        "{what}: {kinds:?}"
    );
    let mut answer = [0u8; 16];
    ep.mr.read(0, &mut answer).unwrap();
    assert_eq!(&answer, b"server got 32 B!", "{what}");
    conn.disconnect(WAIT).unwrap();
    assert_eq!(conn.qp().state().unwrap(), QpState::Err, "{what}");
}

/// The server's half: the SEND arrives after the WRITE, whose bytes are then in place;
/// answer, and see the client disconnect.
fn server_half(conn: &Connection, ep: &Endpoint, what: &str) {
    let wcs = ep.cq.poll_wait(1, WAIT).unwrap();
    assert_eq!(wcs.len(), 1, "{what}");
    assert_eq!(
        (wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 16),
        "{what}"
    );
    let mut msg = [0u8; 16];
    ep.mr.read(0, &mut msg).unwrap();
    assert_eq!(&msg, b"after the write!", "{what}");
    let mut written = [0u8; 32];
    ep.mr.read(64, &mut written).unwrap();
    assert_eq!(written, [0xA5u8; 32], "{what}: the RDMA WRITE landed");
    ep.mr.write(32, b"server got 32 B!").unwrap();
    let mut send = SendWr::new(2, WrOpcode::Send);
    send.sg_list = vec![ep.mr.slice(32..48).unwrap()].into();
    post(conn, send);
    let wcs = ep.cq.poll_wait(1, WAIT).unwrap();
    assert_eq!(wcs[0].status, WcStatus::Success, "{what}");
    conn.wait_disconnected(WAIT).unwrap();
    assert_eq!(conn.qp().state().unwrap(), QpState::Err, "{what}");
}

/// `server` listens, `client` connects; private data both ways, a WRITE and two SENDs,
/// the client disconnects and the server sees it.
fn story(server: &Context, client: &Context, what: &'static str) {
    let server_cm = server.connection_manager().unwrap();
    let listen_at = SocketAddr::new(server_addr(server), PORT);
    let listener = server_cm.listen(listen_at).unwrap();
    assert_eq!(listener.local_addr(), listen_at);
    let client_ip = client_addr(client);
    let server_side = {
        let server = server.clone();
        std::thread::spawn(move || {
            let req = listener.get_request(WAIT).unwrap();
            assert_eq!(&req.private_data()[..5], b"hello", "{what}");
            assert_eq!(req.peer_addr().ip(), client_ip, "{what}");
            let (ep, qp) = endpoint(&server);
            let conn = req.accept(qp, &write_target(&ep), WAIT).unwrap();
            assert_eq!(conn.qp().state().unwrap(), QpState::Rts, "{what}");
            server_half(&conn, &ep, what);
        })
    };
    let (ep, qp) = endpoint(client);
    let conn = client
        .connection_manager()
        .unwrap()
        .connect(qp, listen_at, &options(b"hello"))
        .unwrap();
    assert_eq!(conn.qp().state().unwrap(), QpState::Rts, "{what}");
    client_half(&conn, &ep, what);
    server_side.join().unwrap();
    drop(conn);
}

fn server_addr(ctx: &Context) -> std::net::IpAddr {
    ctx.gid(ctx.ip_gid_index()).unwrap().to_ip()
}

fn client_addr(ctx: &Context) -> std::net::IpAddr {
    server_addr(ctx)
}

fn a_program_on_the_ibverbs_backend_accepts_an_emulated_client() {
    let (hw, emu) = (hardware("hw0"), emulated("127.0.21.2"));
    story(&hw, &emu, "ibverbs server, emulated client");
    // Every id was destroyed with its connection (the listener with its Listener).
    assert_eq!(hw.connection_manager().unwrap().connection_count(), 0);
}

fn a_program_on_the_ibverbs_backend_connects_to_an_emulated_server() {
    let (hw, emu) = (hardware("hw1"), emulated("127.0.21.4"));
    story(&emu, &hw, "emulated server, ibverbs client");
    assert_eq!(hw.connection_manager().unwrap().connection_count(), 0);
}

fn connecting_from_the_ibverbs_backend_to_a_port_nobody_listens_on_is_refused_at_once() {
    let (hw, emu) = (hardware("hw2"), emulated("127.0.21.6"));
    let (_ep, qp) = endpoint(&hw);
    let started = Instant::now();
    let err = hw
        .connection_manager()
        .unwrap()
        .connect(qp, SocketAddr::new(server_addr(&emu), 7000), &options(&[]))
        .unwrap_err();
    match &err {
        Error::ConnectFailed {
            failure: CmFailure::Rejected { reason: 8, .. },
            ..
        } => {}
        other => panic!("expected a REJ with reason 8, got {other:?} ({other})"),
    }
    assert!(err.to_string().contains("nobody listens"), "{err}");
    println!("  {err} after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

fn a_rejection_carries_its_private_data_both_ways() {
    let (hw, emu) = (hardware("hw3"), emulated("127.0.21.8"));
    // The ibverbs side rejects the emulated client.
    let listener = hw
        .connection_manager()
        .unwrap()
        .listen(SocketAddr::new(server_addr(&hw), PORT))
        .unwrap();
    let rejecter = std::thread::spawn(move || {
        let req = listener.get_request(WAIT).unwrap();
        assert_eq!(&req.private_data()[..4], b"may ");
        req.reject(b"not today").unwrap();
    });
    let (_ep, qp) = endpoint(&emu);
    let err = emu
        .connection_manager()
        .unwrap()
        .connect(
            qp,
            SocketAddr::new(server_addr(&hw), PORT),
            &options(b"may I?"),
        )
        .unwrap_err();
    rejecter.join().unwrap();
    match err {
        Error::ConnectFailed {
            failure:
                CmFailure::Rejected {
                    reason: 28,
                    private_data,
                },
            ..
        } => assert_eq!(&private_data[..9], b"not today"),
        other => panic!("expected a REJ with reason 28, got {other:?}"),
    }
    // The emulated side rejects the ibverbs client.
    let listener = emu
        .connection_manager()
        .unwrap()
        .listen(SocketAddr::new(server_addr(&emu), PORT))
        .unwrap();
    let rejecter = std::thread::spawn(move || {
        let req = listener.get_request(WAIT).unwrap();
        req.reject(b"full up").unwrap();
    });
    let (_ep, qp) = endpoint(&hw);
    let err = hw
        .connection_manager()
        .unwrap()
        .connect(
            qp,
            SocketAddr::new(server_addr(&emu), PORT),
            &options(b"me?"),
        )
        .unwrap_err();
    rejecter.join().unwrap();
    match err {
        Error::ConnectFailed {
            failure:
                CmFailure::Rejected {
                    reason: 28,
                    private_data,
                },
            ..
        } => assert_eq!(&private_data[..7], b"full up"),
        other => panic!("expected a REJ with reason 28, got {other:?}"),
    }
    assert_eq!(hw.connection_manager().unwrap().connection_count(), 0);

    // A QP of another context (here the emulator's) cannot be connected by this manager.
    let (_ep, qp) = endpoint(&emu);
    let err = hw
        .connection_manager()
        .unwrap()
        .connect(qp, SocketAddr::new(server_addr(&emu), PORT), &options(&[]))
        .unwrap_err();
    assert!(
        matches!(err, Error::Invalid { .. }) && err.to_string().contains("emulated backend"),
        "{err}"
    );
}

fn a_connect_nobody_answers_times_out_when_asked() {
    // A host at 127.0.21.9 that takes RoCEv2 datagrams and never answers: the REQ goes
    // unanswered, and the caller's timeout ends it. (A loopback address where nothing
    // listens on port 4791 is this host, as the kernel's rdma_cm has all of 127/8, and its
    // own device refuses at once.)
    let _silent = std::net::UdpSocket::bind("127.0.21.9:4791").expect("a silent peer's port");
    let hw = hardware("hw2");
    let (_ep, qp) = endpoint(&hw);
    let started = Instant::now();
    let opts = ConnectOptions {
        timeout: Duration::from_millis(800),
        ..options(&[])
    };
    let err = hw
        .connection_manager()
        .unwrap()
        .connect(qp, "127.0.21.9:7471".parse().unwrap(), &opts)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ConnectFailed {
                failure: CmFailure::TimedOut(t),
                ..
            } if t == Duration::from_millis(800)
        ),
        "{err:?}"
    );
    let took = started.elapsed();
    println!("  {err} after {took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    // The abandoned attempt's id is gone.
    assert_eq!(hw.connection_manager().unwrap().connection_count(), 0);
}

/// The async calls on the libibverbs backend wait on librdmacm's event channel fd: an
/// ibverbs server awaits a request and accepts it, an ibverbs client awaits its connect,
/// a SEND each way, the disconnect awaited on both sides.
fn the_async_calls_work_on_the_ibverbs_backend() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (hw, emu) = (hardware("hw3"), emulated("127.0.21.10"));
    rt.block_on(async {
        for (server, client) in [(&hw, &emu), (&emu, &hw)] {
            let addr = SocketAddr::new(server_addr(server), PORT + 1);
            let listener = server.connection_manager().unwrap().listen(addr).unwrap();
            let (sep, sqp) = endpoint(server);
            let (cep, cqp) = endpoint(client);
            let ccm = client.connection_manager().unwrap();
            let opts = options(b"async");
            let (accepted, connected) = tokio::join!(
                async {
                    let req = tokio::time::timeout(WAIT, listener.next_request())
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(&req.private_data()[..5], b"async");
                    req.accept_async(sqp, b"ok", WAIT).await
                },
                ccm.connect_async(cqp, addr, &opts)
            );
            let (sconn, cconn) = (accepted.unwrap(), connected.unwrap());
            assert_eq!(&cconn.private_data()[..2], b"ok");
            for (conn, ep, peer) in [(&cconn, &cep, &sep), (&sconn, &sep, &cep)] {
                ep.mr.write(32, b"sixteen bytes!!\0").unwrap();
                let mut wr = SendWr::new(2, WrOpcode::Send);
                wr.sg_list = vec![ep.mr.slice(32..48).unwrap()].into();
                post(conn, wr);
                let wcs = peer.cq.poll_wait(1, WAIT).unwrap();
                assert_eq!(
                    (wcs[0].status, wcs[0].opcode),
                    (WcStatus::Success, WcOpcode::Recv)
                );
                let wcs = ep.cq.poll_wait(1, WAIT).unwrap();
                assert_eq!(wcs[0].status, WcStatus::Success);
                // SAFETY: the buffer outlives the receive's completion (polled above next
                // round, or left to flush when the QP goes).
                unsafe { conn.qp().post_receive(&[ep.mr.slice(0..16).unwrap()], 1) }.unwrap();
            }
            let (a, b) = tokio::join!(cconn.disconnect_async(WAIT), async {
                tokio::time::timeout(WAIT, sconn.disconnected())
                    .await
                    .unwrap()
            });
            a.unwrap();
            b.unwrap();
        }
    });
    assert_eq!(hw.connection_manager().unwrap().connection_count(), 0);
}

/// Threads of one program on the ibverbs backend connect at once, round after round: each
/// call gets its own answer from the shared event channel (the server answers each request
/// with the requester's own private data), and nothing is left behind.
fn concurrent_connects_each_get_their_own_answer() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 5;
    let (hw, emu) = (hardware("hw4"), emulated("127.0.21.12"));
    let addr = SocketAddr::new(server_addr(&emu), PORT);
    let listener = emu.connection_manager().unwrap().listen(addr).unwrap();
    let server = {
        let emu = emu.clone();
        std::thread::spawn(move || {
            let mut accepting = Vec::new();
            for _ in 0..THREADS * ROUNDS {
                let req = listener.get_request(WAIT).unwrap();
                let answer = req.private_data()[..2].to_vec();
                let (ep, qp) = endpoint(&emu);
                let emu_accept = req.start_accept(qp, &answer).unwrap();
                accepting.push((emu_accept, ep));
                if accepting.len() == THREADS {
                    for (a, _ep) in accepting.drain(..) {
                        let conn = a.wait(WAIT).unwrap();
                        conn.wait_disconnected(WAIT).unwrap();
                    }
                }
            }
        })
    };
    let cm = hw.connection_manager().unwrap();
    for round in 0..ROUNDS {
        let clients: Vec<_> = (0..THREADS)
            .map(|t| {
                let (hw, cm) = (hw.clone(), cm.clone());
                std::thread::spawn(move || {
                    let (_ep, qp) = endpoint(&hw);
                    let me = [round as u8, t as u8];
                    let conn = cm.connect(qp, addr, &options(&me)).unwrap();
                    assert_eq!(&conn.private_data()[..2], &me);
                    assert_eq!(conn.qp().state().unwrap(), QpState::Rts);
                    conn.disconnect(WAIT).unwrap();
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
    }
    server.join().unwrap();
    assert_eq!(cm.connection_count(), 0);
}

/// A UD QP with rdma_cm's Q_Key in RTS, its CQ and a buffer: four receives (GRH area and
/// 64 bytes each) posted, sends from offset 512.
struct Ud {
    qp: QueuePair,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

const SLOT: usize = GRH_LEN + 64;

fn ud(ctx: &Context) -> Ud {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let mr = pd.allocate(1024).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, QpType::Ud)
        .qkey(RDMA_UDP_QKEY)
        .build()
        .unwrap();
    let e = qp.endpoint();
    let qp = qp.handshake(e).unwrap();
    for i in 0..4 {
        // SAFETY: the region lives in the returned Ud, which outlives the completions.
        unsafe { qp.post_receive(&[mr.slice(i * SLOT..(i + 1) * SLOT).unwrap()], i as u64) }
            .unwrap();
    }
    Ud { qp, cq, mr }
}

fn ud_send(from: &Ud, target: UdTarget, msg: &[u8]) {
    from.mr.write(512, msg).unwrap();
    let mut wr = SendWr::new(9, WrOpcode::Send);
    wr.sg_list = vec![from.mr.slice(512..512 + msg.len()).unwrap()].into();
    wr.ud = Some(target);
    // SAFETY: the region outlives the completion polled below.
    unsafe { from.qp.post_send(&[wr]).unwrap() };
    let wcs = from.cq.poll_wait(1, WAIT).unwrap();
    assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
}

/// One datagram received on `to`: its source QPN, the GRH's source GID, the payload.
fn ud_receive(to: &Ud) -> (u32, softroce_verbs::Gid, Vec<u8>) {
    let wcs = to.cq.poll_wait(1, WAIT).unwrap();
    assert_eq!(wcs.len(), 1, "no datagram arrived");
    let wc = wcs[0];
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
    let mut area = vec![0u8; wc.byte_len as usize];
    to.mr.read(wc.wr_id as usize * SLOT, &mut area).unwrap();
    let grh = parse_grh(&area[..GRH_LEN]).unwrap();
    (wc.src_qp, grh.sgid, area[GRH_LEN..].to_vec())
}

/// `server` listens for UD address resolution, `client` resolves it (private data both
/// ways), sends a datagram to the QP it was given, and gets one back from it (the server
/// answers where the datagram came from, as udaddy's server does).
fn ud_story(server: &Context, client: &Context, what: &'static str) {
    let addr = SocketAddr::new(server_addr(server), PORT);
    let listener = server
        .connection_manager()
        .unwrap()
        .listen_ud(addr)
        .unwrap();
    let client_ip = client_addr(client);
    let s = ud(server);
    let server_qpn = s.qp.qpn();
    let server_side = std::thread::spawn(move || {
        let req = listener.get_request(WAIT).unwrap();
        assert_eq!(&req.private_data()[..4], b"UD? ", "{what}");
        assert_eq!(req.peer_addr().ip(), client_ip, "{what}");
        req.accept(&s.qp, b"UD here").unwrap();
        let (src_qp, sgid, data) = ud_receive(&s);
        assert_eq!(&data, b"datagram", "{what}");
        let back =
            s.qp.ud_target(
                QueuePairEndpoint {
                    qpn: src_qp,
                    psn: 0,
                    gid: sgid,
                    udp_port: 4791,
                },
                RDMA_UDP_QKEY,
            )
            .unwrap();
        ud_send(&s, back, b"answer");
        src_qp
    });
    let c = ud(client);
    let cm = client.connection_manager().unwrap();
    let peer = cm.resolve_ud(&c.qp, addr, &options(b"UD? ")).unwrap();
    assert_eq!(
        (peer.qpn(), peer.qkey()),
        (server_qpn, RDMA_UDP_QKEY),
        "{what}"
    );
    assert_eq!(&peer.private_data()[..7], b"UD here", "{what}");
    ud_send(&c, peer.target(), b"datagram");
    assert_eq!(
        server_side.join().unwrap(),
        c.qp.qpn(),
        "{what}: the sender's QP"
    );
    let (from, _, data) = ud_receive(&c);
    assert_eq!(
        (from, data.as_slice()),
        (server_qpn, &b"answer"[..]),
        "{what}"
    );
    assert_eq!(cm.connection_count(), 0, "{what}");
}

/// UD address resolution between an ibverbs program and an emulated one, each role on each
/// side, blocking and awaited; a datagram to the resolved QP arrives from the resolver's.
fn ud_peers_resolve_each_other_between_the_ibverbs_backend_and_the_emulator() {
    let (hw, emu) = (hardware("hw5"), emulated("127.0.24.2"));
    ud_story(&hw, &emu, "ibverbs UD listener, emulated client");
    ud_story(&emu, &hw, "emulated UD listener, ibverbs client");
    // Awaited on librdmacm's event channel fd: the request and the resolution, both ways.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for (server, client) in [(&hw, &emu), (&emu, &hw)] {
            let addr = SocketAddr::new(server_addr(server), PORT + 1);
            let listener = server
                .connection_manager()
                .unwrap()
                .listen_ud(addr)
                .unwrap();
            let (s, c) = (ud(server), ud(client));
            let ccm = client.connection_manager().unwrap();
            let opts = options(b"async UD");
            let (answered, resolved) = tokio::join!(
                async {
                    let req = tokio::time::timeout(WAIT, listener.next_request())
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(&req.private_data()[..8], b"async UD");
                    req.accept(&s.qp, b"awaited")
                },
                ccm.resolve_ud_async(&c.qp, addr, &opts)
            );
            answered.unwrap();
            let peer = resolved.unwrap();
            assert_eq!(peer.qpn(), s.qp.qpn());
            assert_eq!(&peer.private_data()[..7], b"awaited");
            ud_send(&c, peer.target(), b"awaited datagram");
            let (src_qp, _, data) = ud_receive(&s);
            assert_eq!(
                (src_qp, data.as_slice()),
                (c.qp.qpn(), &b"awaited datagram"[..])
            );
        }
    });
    assert_eq!(hw.connection_manager().unwrap().connection_count(), 0);
}

fn ud_resolution_refusals_on_the_ibverbs_backend_say_why() {
    let (hw, emu) = (hardware("hw6"), emulated("127.0.24.4"));
    let c = ud(&hw);
    let cm = hw.connection_manager().unwrap();
    // Nobody listens on the emulated side's UDP port: its CM answers status 1 at once.
    let started = Instant::now();
    let err = cm
        .resolve_ud(
            &c.qp,
            SocketAddr::new(server_addr(&emu), 7000),
            &options(&[]),
        )
        .unwrap_err();
    match &err {
        Error::ConnectFailed {
            failure: CmFailure::UdRejected { status: 1, .. },
            ..
        } => {}
        other => panic!("expected a SIDR_REP with status 1, got {other:?} ({other})"),
    }
    assert!(err.to_string().contains("nobody listens"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // The emulated listener rejects the ibverbs client, with private data.
    let addr = SocketAddr::new(server_addr(&emu), PORT);
    let listener = emu.connection_manager().unwrap().listen_ud(addr).unwrap();
    let rejecter = std::thread::spawn(move || {
        listener
            .get_request(WAIT)
            .unwrap()
            .reject(b"not for you")
            .unwrap();
    });
    let err = cm.resolve_ud(&c.qp, addr, &options(b"me")).unwrap_err();
    rejecter.join().unwrap();
    match err {
        Error::ConnectFailed {
            failure:
                CmFailure::UdRejected {
                    status: 2,
                    private_data,
                },
            ..
        } => assert_eq!(&private_data[..11], b"not for you"),
        other => panic!("expected a SIDR_REP with status 2, got {other:?}"),
    }

    // The ibverbs listener: a QP without rdma_cm's Q_Key cannot answer (librdmacm names
    // RDMA_UDP_QKEY), and the requester is refused rather than left waiting.
    let addr = SocketAddr::new(server_addr(&hw), PORT);
    let listener = cm.listen_ud(addr).unwrap();
    let pd = hw.alloc_pd().unwrap();
    let cq = hw.create_cq(4, None).unwrap();
    let other = pd
        .create_qp(&cq, &cq, QpType::Ud)
        .qkey(0x1111)
        .build()
        .unwrap();
    let e = other.endpoint();
    let other = other.handshake(e).unwrap();
    let answer = std::thread::spawn(move || {
        let err = listener
            .get_request(WAIT)
            .unwrap()
            .accept(&other, &[])
            .unwrap_err();
        assert!(err.to_string().contains("RDMA_UDP_QKEY"), "{err}");
    });
    let e = ud(&emu);
    let err = emu
        .connection_manager()
        .unwrap()
        .resolve_ud(&e.qp, addr, &options(&[]))
        .unwrap_err();
    answer.join().unwrap();
    assert!(
        matches!(
            err,
            Error::ConnectFailed {
                failure: CmFailure::UdRejected { status: 2, .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(cm.connection_count(), 0);
}

/// Run in a child whose librdmacm cannot be loaded: the error says so, nothing panics.
fn without_librdmacm_the_connection_manager_says_why() {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child-without-librdmacm")
        .env("SOFTROCE_LIBRDMACM", "/nonexistent/librdmacm.so.1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!("errno {}: ", libc::EOPNOTSUPP))
            && stdout.contains("/nonexistent/librdmacm.so.1")
            && stdout.contains("install librdmacm1"),
        "{stdout}"
    );
}

/// SOFTROCE_LIBRDMACM naming a FIFO: refused at once as not a regular file (dlopen of a
/// FIFO would block until something wrote to it).
fn a_librdmacm_path_that_is_a_fifo_is_refused_not_waited_on() {
    let fifo = std::env::temp_dir().join(format!("cm-ibverbs-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--child-without-librdmacm")
        .env("SOFTROCE_LIBRDMACM", &fifo)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&fifo);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("errno {}: ", libc::EINVAL))
            && stdout.contains("is not a regular file"),
        "{stdout}"
    );
}

/// The system's librdmacm (if any) on a machine without a kernel RDMA CM: the error names
/// the call that failed, nothing panics. (Where the kernel has one, it opens.)
fn the_system_librdmacm_without_a_kernel_cm_says_why() {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child-without-librdmacm")
        .env("SOFTROCE_LIBRDMACM", "librdmacm.so.1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        (stdout.contains("rdma_create_event_channel failed (librdmacm.so.1)")
            && stdout.contains("rdma_ucm"))
            || stdout.contains("loading librdmacm.so.1 failed")
            || stdout.starts_with("opened"),
        "{stdout}"
    );
    println!("  {}", stdout.trim());
}

fn child_without_librdmacm() {
    let hw = hardware("hw0");
    match hw.connection_manager() {
        Ok(_) => println!("opened"),
        Err(e) => println!("errno {}: {e}", e.errno()),
    }
}

/// Verbs that are calls of the provider's `verbs_context` (verbs.h's inline
/// ibv_alloc_null_mr and ibv_modify_cq) reach it through the backend: a SEND gathered from
/// a null region delivers zeros, and moderation is set, or refused for a period the device
/// cannot time (EINVAL from the provider, so the attributes arrived).
fn context_ops_reach_the_provider_through_the_ibverbs_backend() {
    let hw = hardware("hw2");
    let pd = hw.alloc_pd().unwrap();
    let cq = hw.create_cq(16, None).unwrap();
    cq.moderate(4, 10).unwrap();
    assert_eq!(cq.moderate(0, u16::MAX).unwrap_err().errno(), libc::EINVAL);
    cq.moderate(0, 0).unwrap();
    let null = pd.alloc_null_mr().unwrap();
    let mr = pd.allocate(64).unwrap();
    mr.write(0, &[0xAB; 64]).unwrap();
    let a = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let b = pd.create_qp(&cq, &cq, QpType::Rc).build().unwrap();
    let (ae, be) = (a.endpoint(), b.endpoint());
    let (a, b) = (a.handshake(be).unwrap(), b.handshake(ae).unwrap());
    // SAFETY: the region outlives the completions polled below.
    unsafe { b.post_receive(&[mr.slice(0..64).unwrap()], 1).unwrap() };
    let mut wr = SendWr::new(2, WrOpcode::Send);
    wr.sg_list = vec![null.sge(16)].into();
    // SAFETY: as above (the null region has no memory).
    unsafe { a.post_send(&[wr]).unwrap() };
    let wcs = cq.poll_wait(2, WAIT).unwrap();
    assert!(
        wcs.len() == 2 && wcs.iter().all(|w| w.status == WcStatus::Success),
        "{wcs:?}"
    );
    let mut got = [0u8; 64];
    mr.read(0, &mut got).unwrap();
    assert!(got[..16].iter().all(|&x| x == 0) && got[16..].iter().all(|&x| x == 0xAB));
}

fn main() {
    let deps = deps_dir();
    // SAFETY: no other thread exists yet (harness = false; nothing was started).
    unsafe {
        std::env::set_var("SOFTROCE_LIBIBVERBS", deps.join("libibverbs.so"));
        // librdmacm is found next to it (SOFTROCE_LIBRDMACM unset).
        std::env::set_var("SOFTROCE_DEVICES", DEVICES);
    }
    if std::env::args().any(|a| a == "--child-without-librdmacm") {
        child_without_librdmacm();
        return;
    }
    let stories: [(&str, fn()); 13] = [
        (
            "a_program_on_the_ibverbs_backend_accepts_an_emulated_client",
            a_program_on_the_ibverbs_backend_accepts_an_emulated_client,
        ),
        (
            "a_program_on_the_ibverbs_backend_connects_to_an_emulated_server",
            a_program_on_the_ibverbs_backend_connects_to_an_emulated_server,
        ),
        (
            "connecting_from_the_ibverbs_backend_to_a_port_nobody_listens_on_is_refused_at_once",
            connecting_from_the_ibverbs_backend_to_a_port_nobody_listens_on_is_refused_at_once,
        ),
        (
            "a_rejection_carries_its_private_data_both_ways",
            a_rejection_carries_its_private_data_both_ways,
        ),
        (
            "a_connect_nobody_answers_times_out_when_asked",
            a_connect_nobody_answers_times_out_when_asked,
        ),
        (
            "the_async_calls_work_on_the_ibverbs_backend",
            the_async_calls_work_on_the_ibverbs_backend,
        ),
        (
            "concurrent_connects_each_get_their_own_answer",
            concurrent_connects_each_get_their_own_answer,
        ),
        (
            "ud_peers_resolve_each_other_between_the_ibverbs_backend_and_the_emulator",
            ud_peers_resolve_each_other_between_the_ibverbs_backend_and_the_emulator,
        ),
        (
            "ud_resolution_refusals_on_the_ibverbs_backend_say_why",
            ud_resolution_refusals_on_the_ibverbs_backend_say_why,
        ),
        (
            "without_librdmacm_the_connection_manager_says_why",
            without_librdmacm_the_connection_manager_says_why,
        ),
        (
            "a_librdmacm_path_that_is_a_fifo_is_refused_not_waited_on",
            a_librdmacm_path_that_is_a_fifo_is_refused_not_waited_on,
        ),
        (
            "the_system_librdmacm_without_a_kernel_cm_says_why",
            the_system_librdmacm_without_a_kernel_cm_says_why,
        ),
        (
            "context_ops_reach_the_provider_through_the_ibverbs_backend",
            context_ops_reach_the_provider_through_the_ibverbs_backend,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, story) in stories {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        println!("story {name} ...");
        story();
        println!("story {name} ok");
    }
}
