//! The entry point of the `cm` cargo-fuzz target, shared with the stable test that replays
//! its corpus: two endpoints, one listening and one connecting, whose MADs cross a wire the
//! input drives. The input is a script: each byte picks what happens next (deliver, change a
//! byte of, drop or duplicate the MAD at the head of the wire, inject raw bytes, let time
//! pass, have the application answer its events, or call a verb on an arbitrary ID), and
//! the bytes after it are that step's arguments.
//!
//! Whatever the script, nothing may panic, every verb refused must change nothing that
//! shows (`connection_count`), and the endpoints must stay bounded: a handful of
//! connections, and nothing left once the peers hung up and time-wait passed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use softroce_wire::mad::{MAD_LEN, Mad};
use softroce_wire::{Gid, Mtu, PortSpace, Psn, Qpn};

use softroce_emu_cm::{
    AcceptParams, CmConfig, CmEndpoint, CmEvent, ConnId, ConnectParams, SidrParams, SidrReply,
};

/// Steps a script may take (the input is cut there).
const MAX_STEPS: usize = 512;
/// MADs the wire holds; more are dropped, as a full receive queue would.
const WIRE_CAPACITY: usize = 64;
/// Connections one endpoint may hold at once under any script: each script step makes at
/// most one (a `connect`, a `sidr_resolve` or a REQ received), so this bounds what the
/// endpoint keeps, not what the script asks for.
const MAX_CONNECTIONS: usize = MAX_STEPS + 2;

struct Side {
    cm: CmEndpoint,
    gid: Gid,
    /// Connections the events named, newest last, for the verbs the script calls.
    known: Vec<ConnId>,
    /// `Established` events taken.
    established: usize,
}

impl Side {
    fn new(last_octet: u8, ca_guid: u64, seed: u64) -> Self {
        let gid = Gid::from_ipv4([10, 0, 0, last_octet].into());
        Self {
            cm: CmEndpoint::new(CmConfig::new(gid, ca_guid, seed)),
            gid,
            known: Vec::new(),
            established: 0,
        }
    }

    /// One of the last four connections the events named, or a made-up ID.
    fn conn(&self, pick: u8) -> ConnId {
        self.known
            .len()
            .checked_sub(1 + usize::from(pick % 8))
            .map_or_else(|| ConnId(u32::from(pick) << 8 | 0x5a), |i| self.known[i])
    }
}

/// Bytes of the script, read one argument at a time (zeros once it ran out).
struct Script<'a>(std::slice::Iter<'a, u8>);

impl Script<'_> {
    fn byte(&mut self) -> u8 {
        self.0.next().copied().unwrap_or(0)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

fn connect_params(remote_gid: Gid, service_id: u64, qpn: u32) -> ConnectParams {
    ConnectParams {
        ece: Default::default(),
        path: None,
        remote_gid,
        service_id,
        local_qpn: Qpn::from_wire(qpn.max(2)),
        starting_psn: Psn::new(1),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        srq: false,
        qp_type: Default::default(),
        flow_control: true,
        private_data: Vec::new(),
    }
}

fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        ece: Default::default(),
        local_qpn: Qpn::from_wire(qpn.max(2)),
        starting_psn: Psn::new(2),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        xrc: false,
        flow_control: true,
        private_data: Vec::new(),
    }
}

/// What a script came to: how many `Established` events each side (the connecting one
/// first) took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// `Established` events of the connecting side and of the listening side.
    pub established: [usize; 2],
}

/// Run one script (see the module documentation). Panics if an invariant breaks.
pub fn exchange(data: &[u8]) -> Outcome {
    let service = PortSpace::Tcp.service_id(7471);
    let mut sides = [Side::new(1, 0xa, 1), Side::new(2, 0xb, 2)];
    let start = Instant::now();
    let mut now = start;
    let _ = sides[1].cm.listen(service);
    let b_gid = sides[1].gid;
    if let Ok(id) = sides[0]
        .cm
        .connect(now, connect_params(b_gid, service, 0x11))
    {
        sides[0].known.push(id);
    }
    let gids = [sides[0].gid, sides[1].gid];
    // (to side, MAD bytes)
    let mut wire: VecDeque<(usize, Vec<u8>)> = VecDeque::new();
    send(&mut sides, &mut wire, gids);
    let mut script = Script(data.iter());
    for _ in 0..MAX_STEPS {
        let Some(&op) = script.0.next() else {
            break;
        };
        let to = usize::from(op >> 7);
        match op % 8 {
            // The MAD at the head of the wire: delivered, changed, dropped or duplicated.
            0..=3 => {
                if let Some((dest, mut mad)) = wire.pop_front() {
                    match op % 4 {
                        1 => {
                            let at = usize::from(script.byte()) % mad.len().max(1);
                            if let Some(b) = mad.get_mut(at) {
                                *b ^= script.byte() | 1;
                            }
                        }
                        2 => continue,
                        3 => wire.push_back((dest, mad.clone())),
                        _ => {}
                    }
                    let from = sides[1 - dest].gid;
                    sides[dest].cm.handle_mad_bytes(now, from, &mad);
                }
            }
            // Raw bytes of the script's choosing, from the peer's GID or another.
            4 => {
                let len = usize::from(script.byte());
                let bytes = script.bytes(len);
                let from = if op & 0x40 != 0 {
                    Gid::from_ipv4([10, 0, 0, 9].into())
                } else {
                    sides[1 - to].gid
                };
                sides[to].cm.handle_mad_bytes(now, from, &bytes);
            }
            // Time passes: up to 255 ms, or that many seconds.
            5 => {
                let n = u64::from(script.byte());
                now += if op & 0x40 != 0 {
                    Duration::from_secs(n)
                } else {
                    Duration::from_millis(n)
                };
                for side in &mut sides {
                    side.cm.handle_timeout(now);
                }
            }
            // The application answers the events it got.
            6 => {
                let choice = script.byte();
                answer_events(&mut sides[to], now, choice);
            }
            // A verb on an arbitrary connection: refused calls change nothing.
            _ => {
                let verb = script.byte();
                let pick = script.byte();
                verb_on(&mut sides, to, now, verb, pick);
            }
        }
        send(&mut sides, &mut wire, gids);
        for side in &sides {
            // Deadlines come from the times the endpoint was given, never from before.
            if let Some(t) = side.cm.poll_timeout() {
                assert!(t >= start, "a deadline before the endpoint existed");
            }
            assert!(
                side.cm.connection_count() <= MAX_CONNECTIONS,
                "{} connections remembered",
                side.cm.connection_count()
            );
        }
    }
    // The peers hang up, the wire delivers everything and time-wait passes: nothing stays.
    for round in 0..32 {
        for side in &mut sides {
            let ids: Vec<ConnId> = side.known.clone();
            for id in ids {
                let _ = side.cm.disconnect(now, id, &[]);
                if round > 0 {
                    let _ = side.cm.destroy(id);
                }
            }
            while let Some(event) = side.cm.poll_event() {
                side.established += usize::from(matches!(event, CmEvent::Established { .. }));
                if !side.known.contains(&event.id()) {
                    side.known.push(event.id());
                }
            }
        }
        while let Some((dest, mad)) = wire.pop_front() {
            let from = sides[1 - dest].gid;
            sides[dest].cm.handle_mad_bytes(now, from, &mad);
        }
        now += Duration::from_secs(60);
        for side in &mut sides {
            side.cm.handle_timeout(now);
        }
        send(&mut sides, &mut wire, gids);
        if sides.iter().all(|s| s.cm.connection_count() == 0) {
            return Outcome {
                established: [sides[0].established, sides[1].established],
            };
        }
    }
    panic!(
        "connections left after hanging up and time-wait: {} and {}",
        sides[0].cm.connection_count(),
        sides[1].cm.connection_count()
    );
}

/// Put what the endpoints send on the wire (up to its capacity; a MAD for neither side,
/// an answer to an injected one, is lost).
fn send(sides: &mut [Side; 2], wire: &mut VecDeque<(usize, Vec<u8>)>, gids: [Gid; 2]) {
    for side in sides {
        while let Some(t) = side.cm.poll_transmit() {
            if let Some(dest) = gids.iter().position(|&g| g == t.dest)
                && wire.len() < WIRE_CAPACITY
            {
                let mut bytes = vec![0u8; MAD_LEN];
                t.mad.emit(&mut Mad::new_unchecked(&mut bytes[..]));
                wire.push_back((dest, bytes));
            }
        }
    }
}

/// The application of `side` takes its events and answers each as `choice` says.
fn answer_events(side: &mut Side, now: Instant, choice: u8) {
    let mut bounded = 0;
    while let Some(event) = side.cm.poll_event() {
        bounded += 1;
        // A connection has a handful of events in its life, and a step makes one at most.
        assert!(bounded <= 8 * MAX_CONNECTIONS, "events without end");
        let id = event.id();
        side.established += usize::from(matches!(event, CmEvent::Established { .. }));
        if !side.known.contains(&id) {
            side.known.push(id);
        }
        let _ = match (event, choice % 4) {
            (CmEvent::ConnectRequest { .. }, 0 | 1) => side.cm.accept(now, id, accept_params(0x22)),
            (CmEvent::ConnectRequest { .. }, 2) => side.cm.reject(now, id, b"no"),
            (CmEvent::ConnectRequest { .. }, _) => side.cm.delay_response(id, 20, &[]),
            (CmEvent::ConnectResponse { .. }, 0..=2) => side.cm.send_rtu(id, &[]),
            (CmEvent::ConnectResponse { .. }, _) => side.cm.reject(now, id, &[]),
            (CmEvent::Disconnected { .. }, _) => side.cm.disconnect(now, id, &[]),
            (CmEvent::SidrRequest { .. }, _) => side.cm.sidr_reply(
                id,
                SidrReply {
                    status: choice >> 4,
                    qpn: Qpn::from_wire(0x33),
                    qkey: 0x1111_1111,
                    private_data: vec![choice; usize::from(choice)],
                },
            ),
            _ => Ok(()),
        };
    }
}

/// Call verb `verb` of side `to` on its `pick`th known connection (or a made-up one).
fn verb_on(sides: &mut [Side; 2], to: usize, now: Instant, verb: u8, pick: u8) {
    let peer_gid = sides[1 - to].gid;
    let side = &mut sides[to];
    let id = side.conn(pick);
    let before = side.cm.connection_count();
    let data = vec![pick; usize::from(pick)];
    let result = match verb % 12 {
        0 => side.cm.accept(now, id, accept_params(u32::from(pick) + 1)),
        1 => side.cm.reject(now, id, &data),
        2 => side.cm.delay_response(id, pick, &data),
        3 => side.cm.send_rtu(id, &data),
        4 => side.cm.establish(id),
        5 => side.cm.disconnect(now, id, &data),
        6 => side.cm.destroy(id),
        7 => side.cm.listen(u64::from(pick)),
        8 => side.cm.stop_listening(u64::from(pick)),
        9 => {
            let mut params = connect_params(peer_gid, PortSpace::Tcp.service_id(7471), 0x40);
            params.private_data = data;
            side.cm.connect(now, params).map(|id| side.known.push(id))
        }
        10 => side
            .cm
            .sidr_resolve(
                now,
                SidrParams {
                    remote_gid: peer_gid,
                    service_id: PortSpace::Udp.service_id(u16::from(pick)),
                    private_data: data,
                },
            )
            .map(|id| side.known.push(id)),
        _ => side.cm.sidr_reply(
            id,
            SidrReply {
                status: pick,
                qpn: Qpn::from_wire(u32::from(pick)),
                qkey: 0,
                private_data: data,
            },
        ),
    };
    if result.is_err() {
        assert_eq!(
            side.cm.connection_count(),
            before,
            "a refused verb ({}) changed the connections",
            verb % 12
        );
    }
}
