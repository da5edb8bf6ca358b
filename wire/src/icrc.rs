//! The RoCEv2 invariant CRC, computed exactly as Linux rdma_rxe does.
//!
//! ICRC = CRC-32 (zlib/Ethernet) over `8 × 0xFF` (the masked IB LRH) ‖ the IP header with its
//! variant fields set to ones (IPv4: TOS, TTL, checksum; IPv6: traffic class, flow label, hop
//! limit) ‖ the UDP header with checksum 0xFFFF ‖ the BTH with byte 4 (FECN/BECN/resv) 0xFF ‖
//! everything after the BTH up to the ICRC. It is stored least-significant byte first.
//!
//! # Two ways to verify
//! - [`verify_exact`]: the whole IP header is known (pcap, raw sockets, IPv6). A single
//!   corrupted bit is always caught.
//! - [`verify_udp_socket`]: the datagram as a UDP socket sees it. For IPv4 the 16-bit
//!   Identification (and the flags word) is covered by the ICRC but invisible to `recvfrom`.
//!   The CRC is affine over GF(2) in those 16 bits, so the ID that makes the ICRC valid is
//!   solved for in closed form: one ordinary CRC pass with ID 0, O(log n) register
//!   arithmetic to carry the difference back to the IP header, and 16 steps against a basis
//!   reduced at compile time (never 65 536 trials). The price is honesty about strength:
//!   a random corruption passes with probability about 2⁻¹⁵ instead of 2⁻³², which
//!   [`IcrcCheck::RecoveredIpv4Id`] reports.
#![cfg_attr(
    fuzzing,
    doc = "# Fuzzing\nUnder `cfg(fuzzing)` verification always succeeds so fuzzers reach the deeper layers."
)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Header, Result, WireError, need};
use crate::ip::{IPV4_DF, IPV4_HEADER_LEN, IPV6_HEADER_LEN, PROTO_UDP, UDP_HEADER_LEN};
use crate::packet::{BTH_LEN, ICRC_LEN};

/// The UDP destination port of RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;

/// The most datagrams one UDP GSO send carries (Linux's `UDP_MAX_SEGMENTS` since 5.x; 64
/// before). Segment `k` of a send through an unconnected socket leaves with IPv4 ID `k`, so
/// a GSO sender's IDs are below this, restarting at 0 with every send.
pub const UDP_MAX_SEGMENTS: usize = 128;

const LRH_MASK: [u8; 8] = [0xFF; 8];

/// Mask the variant fields of an IPv4 header (20 bytes).
fn masked_ipv4(h: &[u8]) -> [u8; IPV4_HEADER_LEN] {
    let mut m = [0u8; IPV4_HEADER_LEN];
    m.copy_from_slice(&h[..IPV4_HEADER_LEN]);
    m[1] = 0xFF;
    m[8] = 0xFF;
    m[10] = 0xFF;
    m[11] = 0xFF;
    m
}

/// Mask the variant fields of an IPv6 header (40 bytes).
fn masked_ipv6(h: &[u8]) -> [u8; IPV6_HEADER_LEN] {
    let mut m = [0u8; IPV6_HEADER_LEN];
    m.copy_from_slice(&h[..IPV6_HEADER_LEN]);
    m[0] |= 0x0F;
    m[1] = 0xFF;
    m[2] = 0xFF;
    m[3] = 0xFF;
    m[7] = 0xFF;
    m
}

fn masked_udp(h: &[u8]) -> [u8; UDP_HEADER_LEN] {
    let mut m = [0u8; UDP_HEADER_LEN];
    m.copy_from_slice(&h[..UDP_HEADER_LEN]);
    m[6] = 0xFF;
    m[7] = 0xFF;
    m
}

fn masked_bth(roce: &[u8]) -> [u8; BTH_LEN] {
    let mut m = [0u8; BTH_LEN];
    m.copy_from_slice(&roce[..BTH_LEN]);
    m[4] = 0xFF;
    m
}

/// Compute the ICRC from the raw IP header (20 bytes IPv4 or 40 bytes IPv6, chosen by its
/// version nibble), the UDP header and the RoCE packet *without* its ICRC.
pub fn compute(ip_header: &[u8], udp_header: &[u8], roce_without_icrc: &[u8]) -> Result<u32> {
    need(Header::Ipv4, ip_header.len(), 1)?;
    need(Header::Udp, udp_header.len(), UDP_HEADER_LEN)?;
    need(Header::Bth, roce_without_icrc.len(), BTH_LEN)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&LRH_MASK);
    match ip_header[0] >> 4 {
        4 => {
            need(Header::Ipv4, ip_header.len(), IPV4_HEADER_LEN)?;
            h.update(&masked_ipv4(ip_header));
        }
        6 => {
            need(Header::Ipv6, ip_header.len(), IPV6_HEADER_LEN)?;
            h.update(&masked_ipv6(ip_header));
        }
        v => return Err(WireError::BadIpVersion(v)),
    }
    h.update(&masked_udp(udp_header));
    h.update(&masked_bth(roce_without_icrc));
    h.update(&roce_without_icrc[BTH_LEN..]);
    Ok(h.finalize())
}

/// Addresses and ports of a datagram, as a UDP socket knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpEndpoints {
    /// Source IP.
    pub src: IpAddr,
    /// Destination IP.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

impl UdpEndpoints {
    /// The endpoints of a datagram from `src` to `dst`.
    pub const fn between(src: SocketAddr, dst: SocketAddr) -> Self {
        Self {
            src: src.ip(),
            dst: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
        }
    }
}

/// The masked headers a sender through an unconnected `IP_PMTUDISC_DO` socket produces
/// (IPv4: ID `ip_id`, flags `flags_frag`), in ICRC order, for a RoCE packet of `roce_len`
/// bytes including the ICRC. Returns the buffer and how many bytes of it are used.
fn masked_headers(
    ep: &UdpEndpoints,
    roce_len: usize,
    ip_id: u16,
    flags_frag: u16,
) -> ([u8; 56], usize) {
    let mut out = [0u8; 56];
    out[..8].copy_from_slice(&LRH_MASK);
    let udp_len = (UDP_HEADER_LEN + roce_len).min(0xFFFF) as u16;
    let ip_len = match (ep.src, ep.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = (IPV4_HEADER_LEN + UDP_HEADER_LEN + roce_len).min(0xFFFF) as u16;
            let h = &mut out[8..28];
            h[0] = 0x45;
            h[1] = 0xFF;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&ip_id.to_be_bytes());
            h[6..8].copy_from_slice(&flags_frag.to_be_bytes());
            h[8] = 0xFF;
            h[9] = PROTO_UDP;
            h[10] = 0xFF;
            h[11] = 0xFF;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            IPV4_HEADER_LEN
        }
        (s, d) => {
            let s = to_v6(s);
            let d = to_v6(d);
            let h = &mut out[8..48];
            h[..4].copy_from_slice(&[0x6F, 0xFF, 0xFF, 0xFF]);
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = PROTO_UDP;
            h[7] = 0xFF;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            IPV6_HEADER_LEN
        }
    };
    let u = &mut out[8 + ip_len..8 + ip_len + UDP_HEADER_LEN];
    u[0..2].copy_from_slice(&ep.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&ep.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u[6] = 0xFF;
    u[7] = 0xFF;
    (out, 8 + ip_len + UDP_HEADER_LEN)
}

fn to_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V6(v6) => v6,
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
    }
}

/// The ICRC a packet sent through our UDP socket must carry: IPv4 with ID 0 and DF (what
/// Linux sends from an unconnected socket with `IP_PMTUDISC_DO`), or IPv6.
/// `roce_without_icrc` is the packet up to (not including) its ICRC.
pub fn compute_for_udp_socket(ep: &UdpEndpoints, roce_without_icrc: &[u8]) -> Result<u32> {
    compute_for_gso_segment(ep, roce_without_icrc, 0)
}

/// The ICRC computation of [`compute_for_udp_socket`] stopped after a packet's headers, for
/// a payload hashed where it lies (in application memory, say): `head` is the packet from
/// its BTH up to where the payload starts, `roce_len` the whole packet's length with its
/// ICRC. Continue the result over the payload and the pad bytes with [`continue_crc`] (or
/// any CRC-32 that continues `crc32fast::Hasher::new_with_initial`): that is the ICRC.
pub fn head_crc_for_udp_socket(ep: &UdpEndpoints, roce_len: usize, head: &[u8]) -> Result<u32> {
    need(Header::Bth, head.len(), BTH_LEN)?;
    let mut h = after_headers(ep, roce_len, 0);
    h.update(&masked_bth(head));
    h.update(&head[BTH_LEN..]);
    Ok(h.finalize())
}

/// `crc` (a CRC-32 so far) continued over `bytes`.
pub fn continue_crc(crc: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(bytes);
    h.finalize()
}

/// How much of a packet after its BTH [`compute_for_gso_segment`] copies to hash it with the
/// headers in one call.
const SHORT_REST: usize = 64;

/// The ICRC of the `index`th datagram (from 0) of one UDP GSO send through our socket:
/// Linux numbers the IPv4 IDs of a GSO send's segments up from the first's, which is 0
/// (see [`compute_for_udp_socket`], the same for index 0); IPv6 has no ID, so the index
/// changes nothing there.
pub fn compute_for_gso_segment(
    ep: &UdpEndpoints,
    roce_without_icrc: &[u8],
    index: u16,
) -> Result<u32> {
    need(Header::Bth, roce_without_icrc.len(), BTH_LEN)?;
    let roce_len = roce_without_icrc.len() + ICRC_LEN;
    // The masked headers of a flow's packets repeat: their CRC is kept per thread, and
    // only the BTH and what follows is hashed (for short packets, one call: each call
    // costs a setup, and short inputs miss the SIMD path anyway).
    let mut h = after_headers(ep, roce_len, index);
    let mut buf = [0u8; BTH_LEN + SHORT_REST];
    buf[..BTH_LEN].copy_from_slice(&masked_bth(roce_without_icrc));
    let rest = &roce_without_icrc[BTH_LEN..];
    if rest.len() <= SHORT_REST {
        let end = BTH_LEN + rest.len();
        buf[BTH_LEN..end].copy_from_slice(rest);
        h.update(&buf[..end]);
    } else {
        h.update(&buf[..BTH_LEN]);
        h.update(rest);
    }
    Ok(h.finalize())
}

/// A CRC-32 that has hashed the masked headers (LRH mask, IP, UDP) of a `roce_len`-byte
/// packet sent between `ep` as GSO segment `index` (IPv4 ID `index`, DF), to continue
/// with the BTH.
fn after_headers(ep: &UdpEndpoints, roce_len: usize, index: u16) -> crc32fast::Hasher {
    let compute = || {
        let (hdr, n) = masked_headers(ep, roce_len, index, IPV4_DF);
        let mut h = crc32fast::Hasher::new();
        h.update(&hdr[..n]);
        h
    };
    let Ok(len) = u16::try_from(roce_len) else {
        return compute();
    };
    if index != 0 {
        return compute();
    }
    // The two directions of a flow (same ports and lengths, addresses swapped) must land
    // apart: a ping-pong sends and checks packets of one length.
    let last_octet = |ip: IpAddr| match ip {
        IpAddr::V4(a) => usize::from(a.octets()[3]),
        IpAddr::V6(a) => usize::from(a.octets()[15]),
    };
    let slot_index = usize::from(len ^ ep.dst_port ^ ep.src_port)
        ^ (3 * last_octet(ep.src) + 5 * last_octet(ep.dst));
    // The hasher itself is kept, not its CRC: a new one checks the CPU's features every
    // time (a sixth of a short packet's ICRC), a copy does not.
    HEADERS_CRCS.with_borrow_mut(|cache| {
        let slot = &mut cache[slot_index % HEADERS_CRC_SLOTS];
        match slot {
            Some(kept) if kept.len == len && kept.ep == *ep => kept.after_headers.clone(),
            _ => {
                let h = compute();
                *slot = Some(HeadersSlot {
                    ep: *ep,
                    len,
                    after_headers: h.clone(),
                });
                h
            }
        }
    })
}

/// Slots of the per-thread cache of masked-header CRCs (direct-mapped by length, ports
/// and addresses: a flow's ACKs and requests, sent and received, land apart).
const HEADERS_CRC_SLOTS: usize = 32;

/// A flow and length the per-thread cache knows, and the CRC of its masked headers.
struct HeadersSlot {
    ep: UdpEndpoints,
    len: u16,
    after_headers: crc32fast::Hasher,
}

thread_local! {
    /// Recent (endpoints, RoCE length) -> CRC of the masked headers, for ID 0 and DF (what
    /// every datagram outside GSO, and each GSO send's first, carries).
    static HEADERS_CRCS: std::cell::RefCell<[Option<HeadersSlot>; HEADERS_CRC_SLOTS]> =
        const { std::cell::RefCell::new([const { None }; HEADERS_CRC_SLOTS]) };
}

/// [`compute_for_gso_segment`] without a pass over the packet: the ICRC of the `index`th
/// segment from the ICRC of the same packet as segment 0 (`icrc_of_first`, what
/// [`compute_for_udp_socket`] gives), for a packet of `roce_len_without_icrc` bytes. Only
/// the IPv4 ID differs, and CRC is affine over GF(2): the difference is the ID's column
/// carried over the bytes after the headers. IPv6 has no ID: the ICRC is unchanged.
pub fn gso_segment_icrc(
    ep: &UdpEndpoints,
    icrc_of_first: u32,
    roce_len_without_icrc: usize,
    index: u16,
) -> u32 {
    if !matches!((ep.src, ep.dst), (IpAddr::V4(_), IpAddr::V4(_))) || index == 0 {
        return icrc_of_first;
    }
    // The differences each ID bit makes at this length are kept per thread (a ping-pong's
    // request and its ACK behind it, at index 1, come at the same few lengths).
    with_length_ids(roce_len_without_icrc, |at| {
        at.deltas.icrc(icrc_of_first, index)
    })
}

/// The ICRC differences the IPv4 ID makes at one length of body: the difference an ID makes
/// is the sum of what each of its bits makes (the product is linear), so the segments of a
/// GSO send, or the IDs guessed for received ones, cost one multiplication per ID bit used
/// (log n), not one per segment.
#[derive(Debug, Clone)]
struct IdDeltas {
    /// `x^(8·len)`.
    shift: u32,
    /// The register difference of each ID bit alone, once `known` has its bit.
    bit_deltas: [u32; 16],
    known: u16,
}

impl IdDeltas {
    fn new(roce_len_without_icrc: usize) -> Self {
        Self {
            shift: x8n(roce_len_without_icrc),
            bit_deltas: [0; 16],
            known: 0,
        }
    }

    /// The ICRC of the packet sent with IPv4 ID `index`, given its ICRC with ID 0.
    fn icrc(&mut self, icrc_of_first: u32, index: u16) -> u32 {
        let mut delta = 0;
        let mut bits = index;
        while bits != 0 {
            let bit = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if self.known & (1 << bit) == 0 {
                self.bit_deltas[bit] = mul_mod_p(ID_COLUMNS[bit], self.shift);
                self.known |= 1 << bit;
            }
            delta ^= self.bit_deltas[bit];
        }
        icrc_of_first ^ delta
    }
}

/// Store in `roce` (a whole packet, its last four bytes the ICRC) the ICRC
/// [`compute_for_udp_socket`] gives, e.g. after changing the packet on purpose.
pub fn set_icrc_for_udp_socket(ep: &UdpEndpoints, roce: &mut [u8]) -> Result<()> {
    need(Header::Icrc, roce.len(), BTH_LEN + ICRC_LEN)?;
    let (body, tail) = roce.split_at_mut(roce.len() - ICRC_LEN);
    tail.copy_from_slice(&compute_for_udp_socket(ep, body)?.to_le_bytes());
    Ok(())
}

/// How strong a successful ICRC check was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcCheck {
    /// Every covered byte was known: a random corruption passes with probability 2⁻³².
    Exact,
    /// IPv4 seen through a UDP socket: the Identification field was solved from the ICRC.
    /// Any 16-bit ID (with DF set, or else clear) is accepted, so a random corruption
    /// passes with probability 2⁻¹⁶ per DF choice, about 2⁻¹⁵ in all. IPv6 never gives this.
    RecoveredIpv4Id {
        /// The IPv4 Identification that makes the ICRC valid.
        id: u16,
        /// Whether the solution assumed DF set (rxe always sets it).
        dont_fragment: bool,
    },
}

/// Verify the ICRC of a packet whose full IP and UDP headers are known.
pub fn verify_exact(ip_header: &[u8], udp_header: &[u8], roce: &[u8]) -> Result<IcrcCheck> {
    verify_against(roce, |body| compute(ip_header, udp_header, body))
}

/// Check `roce`'s ICRC against the one `expected` computes over its body.
fn verify_against(roce: &[u8], expected: impl FnOnce(&[u8]) -> Result<u32>) -> Result<IcrcCheck> {
    need(Header::Icrc, roce.len(), BTH_LEN + ICRC_LEN)?;
    let (body, tail) = roce.split_at(roce.len() - ICRC_LEN);
    let found = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let expected = expected(body)?;
    if cfg!(fuzzing) || expected == found {
        Ok(IcrcCheck::Exact)
    } else {
        Err(WireError::IcrcMismatch { expected, found })
    }
}

/// Verify the ICRC of a datagram between `ep` whose IPv4 Identification the receiver knows
/// (`id`, DF set): a simulated network, which builds the IP header itself. Exact, as
/// [`verify_exact`]; IPv6 has no ID. Without the ID, [`verify_udp_socket`] solves for it,
/// and so takes a corrupted packet whose damage some ID would explain (2^17 of the 2^32
/// ICRC values: one bit flip in 32 768 passes).
pub fn verify_udp_socket_with_ipv4_id(
    ep: &UdpEndpoints,
    roce: &[u8],
    id: u16,
) -> Result<IcrcCheck> {
    verify_against(roce, |body| compute_for_gso_segment(ep, body, id))
}

/// Verify the ICRC of a datagram as a UDP socket received it. IPv6 (and IPv4-mapped pairs
/// that are not both IPv4) is checked exactly; IPv4 solves the hidden Identification, first
/// assuming DF set (rxe always sets it), then clear. Costs one CRC pass over the packet.
pub fn verify_udp_socket(ep: &UdpEndpoints, roce: &[u8]) -> Result<IcrcCheck> {
    need(Header::Icrc, roce.len(), BTH_LEN + ICRC_LEN)?;
    let (body, tail) = roce.split_at(roce.len() - ICRC_LEN);
    let found = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if !matches!((ep.src, ep.dst), (IpAddr::V4(_), IpAddr::V4(_))) {
        let expected = compute_for_udp_socket(ep, body)?;
        return if cfg!(fuzzing) || expected == found {
            Ok(IcrcCheck::Exact)
        } else {
            Err(WireError::IcrcMismatch { expected, found })
        };
    }
    // `found` differs from the ICRC of the same packet sent with ID 0 and DF by a linear
    // function of the ID bits (CRC is affine over GF(2)). Move that difference back to where
    // the masked headers end, then read the ID off the constant, pre-reduced basis.
    let with_id0 = compute_for_udp_socket(ep, body)?;
    if found == with_id0 {
        // What an unconnected socket sends outside GSO (and every GSO send's first
        // segment): no register arithmetic needed.
        return Ok(IcrcCheck::RecoveredIpv4Id {
            id: 0,
            dont_fragment: true,
        });
    }
    if let Some(id) = guess_id(body.len(), with_id0, found) {
        return Ok(IcrcCheck::RecoveredIpv4Id {
            id,
            dont_fragment: true,
        });
    }
    let delta = mul_mod_p(found ^ with_id0, x8n_inverse(body.len()));
    for (df_delta, dont_fragment) in [(0, true), (SOLVER.df_column, false)] {
        if let Some(id) = SOLVER.solve(delta ^ df_delta) {
            if dont_fragment {
                remember_id(body.len(), id);
            }
            return Ok(IcrcCheck::RecoveredIpv4Id { id, dont_fragment });
        }
    }
    if cfg!(fuzzing) {
        return Ok(IcrcCheck::Exact);
    }
    Err(WireError::IcrcMismatch {
        expected: with_id0,
        found,
    })
}

/// What a thread knows of the IPv4 IDs at one length of body: the ICRC difference each ID
/// bit makes (for sending GSO segments and checking received ones), and the ID it last
/// recovered from a received datagram.
struct LengthIds {
    body_len: usize,
    deltas: IdDeltas,
    last_id: u16,
}

/// Lengths a thread keeps (direct-mapped: a request and its ACK differ).
const LENGTH_ID_SLOTS: usize = 8;

thread_local! {
    static LENGTH_IDS: std::cell::RefCell<[Option<LengthIds>; LENGTH_ID_SLOTS]> =
        const { std::cell::RefCell::new([const { None }; LENGTH_ID_SLOTS]) };
}

/// Run `f` on this thread's [`LengthIds`] for `body_len` (a fresh one if its slot held
/// another length).
fn with_length_ids<R>(body_len: usize, f: impl FnOnce(&mut LengthIds) -> R) -> R {
    LENGTH_IDS.with_borrow_mut(|slots| {
        let slot = &mut slots[body_len % LENGTH_ID_SLOTS];
        let ids = match slot {
            Some(ids) if ids.body_len == body_len => ids,
            _ => slot.insert(LengthIds {
                body_len,
                deltas: IdDeltas::new(body_len),
                last_id: 0,
            }),
        };
        f(ids)
    })
}

/// The ID (DF set) of a received datagram, if it is the one expected: the segments of a
/// GSO send arrive in order with IDs counting up from 0, so the one after the last
/// recovered at this length, or 1 (a request's held ACK sent behind it). Checked exactly,
/// as the solver's answer is (the ID is unique), for a few XORs instead of its register
/// arithmetic.
fn guess_id(body_len: usize, with_id0: u32, found: u32) -> Option<u16> {
    with_length_ids(body_len, |ids| {
        for id in [ids.last_id.wrapping_add(1), 1] {
            if ids.deltas.icrc(with_id0, id) == found {
                ids.last_id = id;
                return Some(id);
            }
        }
        None
    })
}

/// The solver found `id` (DF set) at this length: guess from there next time.
fn remember_id(body_len: usize, id: u16) {
    with_length_ids(body_len, |ids| ids.last_id = id);
}

// GF(2) arithmetic on CRC-32 register values, in the reflected bit order the CRC uses:
// bit 31 is the coefficient of x^0 and bit 0 that of x^31.

/// The reflected CRC-32 polynomial (0x04C11DB7 bit-reversed, x^32 implied).
const POLY: u32 = 0xEDB8_8320;
/// The polynomial 1 in the reflected order.
const ONE: u32 = 0x8000_0000;

/// `a · x mod P`.
const fn mul_x(a: u32) -> u32 {
    if a & 1 != 0 { (a >> 1) ^ POLY } else { a >> 1 }
}

/// `a · x⁻¹ mod P` (x is invertible because P has a constant term).
const fn div_x(a: u32) -> u32 {
    if a & ONE != 0 {
        ((a ^ POLY) << 1) | 1
    } else {
        a << 1
    }
}

/// `a · b mod P`, without data-dependent branches (they mispredict half the time).
const fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut k = 0;
    while k < 32 {
        product ^= b & ((a >> (31 - k)) & 1).wrapping_neg();
        b = (b >> 1) ^ (POLY & (b & 1).wrapping_neg());
        k += 1;
    }
    product
}

/// `t[k] = byte^(2^k) mod P` for `byte` the register change of one zero byte (x^8) or its
/// undoing (x^-8): any number of bytes is then a product of O(log n) entries.
const fn byte_shift_powers(byte: u32) -> [u32; 64] {
    let mut t = [0u32; 64];
    t[0] = byte;
    let mut k = 1;
    while k < 64 {
        t[k] = mul_mod_p(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
}

/// `byte^n mod P` from [`byte_shift_powers`]'s table of `byte`.
const fn byte_shift(table: &[u32; 64], n: usize) -> u32 {
    let mut acc = ONE;
    let mut k = 0;
    while k < 64 {
        if (n as u64) & (1 << k) != 0 {
            acc = mul_mod_p(acc, table[k]);
        }
        k += 1;
    }
    acc
}

/// x^8 and x^-8: one byte of CRC register shift, done and undone.
const X8: u32 = mul_x(mul_x(mul_x(mul_x(mul_x(mul_x(mul_x(mul_x(ONE))))))));
const X8_INVERSE: u32 = div_x(div_x(div_x(div_x(div_x(div_x(div_x(div_x(ONE))))))));
static X8_POWERS: [u32; 64] = byte_shift_powers(X8);
static X8_INVERSE_POWERS: [u32; 64] = byte_shift_powers(X8_INVERSE);

/// `x^(8n) mod P`: multiplying a register difference by it carries the difference over `n`
/// more bytes of message. O(log n), once per length while it stays in [`SHIFT_CACHE`].
fn x8n(n: usize) -> u32 {
    SHIFT_CACHE.get(n, false, || byte_shift(&X8_POWERS, n))
}

/// `x^(-8n) mod P`: multiplying a register difference by it moves the difference back over
/// `n` bytes of message (a zero byte multiplies the register by x^8). O(log n), cached as
/// [`x8n`].
fn x8n_inverse(n: usize) -> u32 {
    SHIFT_CACHE.get(n, true, || byte_shift(&X8_INVERSE_POWERS, n))
}

/// The byte shifts of recent packet lengths: a flow's packets mostly share one or two
/// lengths, and a shift costs some 400 register steps to compute. Direct-mapped by length,
/// each slot one atomic word (length + 1, direction, value), so threads share it lock-free
/// and a slot another length took is only a miss.
struct ShiftCache([AtomicU64; 128]);

static SHIFT_CACHE: ShiftCache = ShiftCache([const { AtomicU64::new(0) }; 128]);

impl ShiftCache {
    fn get(&self, n: usize, inverse: bool, compute: impl FnOnce() -> u32) -> u32 {
        // Lengths past 2^30 are not packets: compute them every time.
        let Ok(tag) = u32::try_from(n + 1) else {
            return compute();
        };
        if tag >= 1 << 30 {
            return compute();
        }
        let tag = u64::from(tag << 1 | u32::from(inverse)) << 32;
        let slot = &self.0[(n ^ usize::from(inverse) << 6) % self.0.len()];
        let cached = slot.load(Ordering::Relaxed);
        if cached & !0xFFFF_FFFF == tag {
            return cached as u32;
        }
        let value = compute();
        slot.store(tag | u64::from(value), Ordering::Relaxed);
        value
    }
}

/// Length of the masked IPv4 headers in ICRC order: LRH mask, IPv4, UDP.
const IPV4_MASKED_LEN: usize = 8 + IPV4_HEADER_LEN + UDP_HEADER_LEN;
/// Offset of the IPv4 Identification in those headers.
const IPV4_ID_AT: usize = 8 + 4;
/// Offset of the IPv4 flags/fragment word in those headers.
const IPV4_FLAGS_AT: usize = 8 + 6;

/// The raw (zero-seeded, not inverted) CRC register over `IPV4_MASKED_LEN` zero bytes
/// except for the 16-bit big-endian `word` at `at`: how that word alone moves the register
/// by the end of the headers. Whatever else the headers hold only adds a constant.
const fn header_word_column(at: usize, word: u16) -> u32 {
    let bytes = word.to_be_bytes();
    let mut state = 0u32;
    let mut i = 0;
    while i < IPV4_MASKED_LEN {
        let b = if i == at {
            bytes[0]
        } else if i == at + 1 {
            bytes[1]
        } else {
            0
        };
        state = (state >> 8) ^ TABLE[((state ^ b as u32) & 0xFF) as usize];
        i += 1;
    }
    state
}

/// How each IPv4 ID bit alone moves the register by the end of the headers.
const ID_COLUMNS: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut bit = 0;
    while bit < 16 {
        t[bit] = header_word_column(IPV4_ID_AT, 1 << bit);
        bit += 1;
    }
    t
};

/// The solver for the hidden IPv4 Identification: the 16 columns (one per ID bit) of the
/// linear map from ID to register difference at the end of the headers, brought into
/// reduced echelon form once, at compile time.
struct IdSolver {
    /// (pivot bit, reduced column, ID bits that combine into it).
    basis: [(u32, u32, u16); 16],
    /// How many basis rows are used (16: CRC-32 tells any two 16-bit bursts apart).
    rank: usize,
    /// The register difference that clearing DF makes.
    df_column: u32,
}

impl IdSolver {
    const fn new() -> Self {
        let mut basis = [(0u32, 0u32, 0u16); 16];
        let mut rank = 0;
        let mut bit = 0;
        while bit < 16 {
            let mut v = header_word_column(IPV4_ID_AT, 1 << bit);
            let mut combo = 1u16 << bit;
            let mut r = 0;
            while r < rank {
                if v & basis[r].0 != 0 {
                    v ^= basis[r].1;
                    combo ^= basis[r].2;
                }
                r += 1;
            }
            if v != 0 {
                let pivot = 1u32 << (31 - v.leading_zeros());
                let mut r = 0;
                while r < rank {
                    if basis[r].1 & pivot != 0 {
                        basis[r].1 ^= v;
                        basis[r].2 ^= combo;
                    }
                    r += 1;
                }
                basis[rank] = (pivot, v, combo);
                rank += 1;
            }
            bit += 1;
        }
        Self {
            basis,
            rank,
            df_column: header_word_column(IPV4_FLAGS_AT, IPV4_DF),
        }
    }

    /// The ID whose column combination equals `delta`, if any: 16 steps.
    const fn solve(&self, mut delta: u32) -> Option<u16> {
        let mut id = 0u16;
        let mut r = 0;
        while r < self.rank {
            let (pivot, column, combo) = self.basis[r];
            if delta & pivot != 0 {
                delta ^= column;
                id ^= combo;
            }
            r += 1;
        }
        if delta == 0 { Some(id) } else { None }
    }
}

static SOLVER: IdSolver = IdSolver::new();

/// The reflected CRC-32 table (polynomial 0xEDB88320).
const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = mul_x(c);
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The ICRC endpoints of an IPv4 pair, for callers that only have addresses.
pub const fn ipv4_endpoints(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16) -> UdpEndpoints {
    UdpEndpoints {
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        src_port,
        dst_port: ROCE_V2_PORT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{Ipv4Fields, emit_udp};

    /// The NOTES.md example: tshark shows the raw bytes 21 c5 8f 4c; the CRC value is
    /// 0x4c8fc521. Rebuild a packet, compute, and check byte order end to end.
    fn sample(ep: &UdpEndpoints) -> Vec<u8> {
        let mut roce = vec![
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x07,
        ];
        roce.extend_from_slice(&[0x42; 64]);
        let icrc = compute_for_udp_socket(ep, &roce).unwrap();
        roce.extend_from_slice(&icrc.to_le_bytes());
        roce
    }

    fn ep() -> UdpEndpoints {
        ipv4_endpoints(
            "10.99.0.1".parse().unwrap(),
            "10.99.0.11".parse().unwrap(),
            49441,
        )
    }

    #[test]
    fn a_gso_segments_icrc_follows_from_the_first_without_a_pass() {
        let v6 = UdpEndpoints {
            src: "fd99::1".parse().unwrap(),
            dst: "fd99::11".parse().unwrap(),
            src_port: 49441,
            dst_port: ROCE_V2_PORT,
        };
        for ep in [ep(), v6] {
            for len in [12usize, 13, 40, 1024 + 28, 4096 + 28, 9000] {
                let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                let first = compute_for_udp_socket(&ep, &body).unwrap();
                // In an order that needs ID bits this thread already knows at this length
                // and bits it does not.
                for index in [0u16, 1, 2, 3, 17, 63, 64, 255, 0x8001, u16::MAX, 2, 17] {
                    assert_eq!(
                        gso_segment_icrc(&ep, first, len, index),
                        compute_for_gso_segment(&ep, &body, index).unwrap(),
                        "len {len} index {index}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_icrc_continued_over_the_payload_where_it_lies_is_the_whole_packets() {
        let ep = ep();
        for (payload_len, pad) in [(0usize, 0usize), (1, 3), (1024, 0), (4093, 3), (4096, 0)] {
            // A WRITE FIRST: BTH, RETH, payload, pad.
            let head_len = BTH_LEN + 16;
            let mut roce: Vec<u8> = (0..head_len + payload_len + pad)
                .map(|i| (i * 31 + 7) as u8)
                .collect();
            roce[head_len + payload_len..].fill(0);
            let whole = compute_for_udp_socket(&ep, &roce).unwrap();
            let roce_len = roce.len() + ICRC_LEN;
            let head = head_crc_for_udp_socket(&ep, roce_len, &roce[..head_len]).unwrap();
            let payload = continue_crc(head, &roce[head_len..head_len + payload_len]);
            let parts = continue_crc(payload, &roce[head_len + payload_len..]);
            assert_eq!(parts, whole, "payload {payload_len} B, pad {pad}");
        }
        assert!(
            head_crc_for_udp_socket(&ep, 100, &[0u8; 4]).is_err(),
            "no BTH, no CRC"
        );
    }

    #[test]
    fn register_arithmetic_matches_crc32fast() {
        // The check value of CRC-32 over "123456789", and the table the solver is built on.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        for a in [1u32, 0x8000_0000, 0xDEAD_BEEF, 0x1234_5678] {
            assert_eq!(div_x(mul_x(a)), a);
            assert_eq!(mul_x(div_x(a)), a);
        }
        // Two equal-length messages that differ in one byte: their CRCs differ by that
        // byte's raw column carried over the bytes after it, which x8n_inverse undoes.
        for tail in [0usize, 1, 7, 100, 1500, 4096] {
            let mut a = vec![0x5Au8; 40 + tail];
            let b = a.clone();
            a[39] ^= 0x81;
            let diff = crc32fast::hash(&a) ^ crc32fast::hash(&b);
            // One byte into a zeroed register: its table entry.
            let column = TABLE[0x81];
            assert_eq!(mul_mod_p(diff, x8n_inverse(tail)), column, "tail {tail}");
        }
    }

    #[test]
    fn cached_shifts_are_the_computed_ones_whatever_the_slots_held() {
        // Lengths that share slots, in both directions, asked twice: every answer is the
        // product computed afresh, and shifting forth and back is the identity.
        for round in 0..2 {
            for n in (0..1200).chain([4096, 9000, 65_535, 1 << 31]) {
                let forth = x8n(n);
                let back = x8n_inverse(n);
                assert_eq!(forth, byte_shift(&X8_POWERS, n), "n {n} round {round}");
                assert_eq!(
                    back,
                    byte_shift(&X8_INVERSE_POWERS, n),
                    "n {n} round {round}"
                );
                assert_eq!(mul_mod_p(forth, back), ONE, "n {n}");
            }
        }
    }

    #[test]
    fn cached_header_crcs_never_answer_for_another_flow() {
        // Flows that share cache slots (same ports and length, other addresses, either IP
        // version), interleaved and asked twice: each ICRC is the one hashed in one go.
        let flows = [
            ("10.0.0.1", "10.0.0.2"),
            ("10.0.0.2", "10.0.0.1"),
            ("10.0.0.1", "10.0.0.3"),
            ("10.0.0.9", "10.0.0.2"),
            ("fd00::1", "fd00::2"),
            ("::ffff:10.0.0.1", "::ffff:10.0.0.2"),
        ];
        let mut body = sample(&ep());
        body.truncate(body.len() - ICRC_LEN);
        for round in 0..2 {
            for (src, dst) in flows {
                for extra in [0usize, 16, 2000] {
                    let mut body = body.clone();
                    body.resize(body.len() + extra, 0x5a);
                    let ep = UdpEndpoints {
                        src: src.parse().expect("literal"),
                        dst: dst.parse().expect("literal"),
                        src_port: 49152,
                        dst_port: ROCE_V2_PORT,
                    };
                    let (hdr, n) = masked_headers(&ep, body.len() + ICRC_LEN, 0, IPV4_DF);
                    let mut h = crc32fast::Hasher::new();
                    h.update(&hdr[..n]);
                    h.update(&masked_bth(&body));
                    h.update(&body[BTH_LEN..]);
                    assert_eq!(
                        compute_for_udp_socket(&ep, &body).expect("a BTH"),
                        h.finalize(),
                        "{src} -> {dst}, {} bytes, round {round}",
                        body.len()
                    );
                }
            }
        }
    }

    #[test]
    fn id_solver_has_full_rank_so_every_id_is_unique() {
        assert_eq!(SOLVER.rank, 16);
        assert_eq!(SOLVER.solve(0), Some(0));
    }

    #[test]
    fn guessed_ids_are_the_ones_the_packets_carry() {
        // A receiving thread sees runs of IDs counting up (GSO sends), jumps, pairs (a
        // request and its ACK at index 1), DF clear, and corruption, at two lengths in
        // turn: every answer is the ID the packet was sent with, or a mismatch.
        let ep = ep();
        let short = sample(&ep);
        let long: Vec<u8> = (0..300).map(|i| (i * 13) as u8).collect();
        let with = |body: &[u8], id: u16, flags: u16| {
            let n = body.len() + 4;
            let (hdr, len) = masked_headers(&ep, n, id, flags);
            let mut h = crc32fast::Hasher::new();
            h.update(&hdr[..len]);
            h.update(&masked_bth(body));
            h.update(&body[BTH_LEN..]);
            let mut roce = body.to_vec();
            roce.extend_from_slice(&h.finalize().to_le_bytes());
            roce
        };
        let ids = (0..20u16).chain([5, 6, 300, 301, 0, 1, 0, 1, u16::MAX, 0, 0x8000, 0x8001]);
        for (round, id) in ids.enumerate() {
            for body in [&short[..short.len() - 4], &long[..]] {
                let df = round % 7 != 3;
                let roce = with(body, id, if df { IPV4_DF } else { 0 });
                assert_eq!(
                    verify_udp_socket(&ep, &roce),
                    Ok(IcrcCheck::RecoveredIpv4Id {
                        id,
                        dont_fragment: df
                    }),
                    "round {round} id {id} len {}",
                    body.len()
                );
                let mut bad = roce.clone();
                bad[BTH_LEN + 1] ^= 0x40;
                assert!(
                    !matches!(
                        verify_udp_socket(&ep, &bad),
                        Ok(IcrcCheck::RecoveredIpv4Id { id: got, .. }) if got == id
                    ),
                    "a corrupted packet passed as ID {id}"
                );
            }
        }
    }

    #[test]
    fn solver_agrees_with_trying_every_id() {
        let ep = ep();
        let clean = sample(&ep);
        let n = clean.len();
        let body = &clean[..n - 4];
        let headers = |id: u16, flags: u16| {
            let (hdr, len) = masked_headers(&ep, n, id, flags);
            let mut h = crc32fast::Hasher::new();
            h.update(&hdr[..len]);
            h.update(&masked_bth(body));
            h.update(&body[BTH_LEN..]);
            h.finalize()
        };
        // Some ICRC values an ID explains, and arbitrary ones most of which none does.
        let mut targets = vec![headers(0x0001, IPV4_DF), headers(0xfffe, 0)];
        targets.extend((0..6u32).map(|i| 0x9E37_79B9u32.wrapping_mul(i + 1)));
        for found in targets {
            let mut roce = clean.clone();
            roce[n - 4..].copy_from_slice(&found.to_le_bytes());
            let brute = [(IPV4_DF, true), (0, false)]
                .into_iter()
                .find_map(|(f, df)| {
                    (0..=u16::MAX)
                        .find(|&id| headers(id, f) == found)
                        .map(|id| IcrcCheck::RecoveredIpv4Id {
                            id,
                            dont_fragment: df,
                        })
                });
            assert_eq!(verify_udp_socket(&ep, &roce).ok(), brute, "{found:#x}");
        }
    }

    #[test]
    fn udp_socket_packet_verifies_exactly_with_the_header_linux_sends() {
        let ep = ep();
        let roce = sample(&ep);
        let mut ip = [0u8; 20];
        let (IpAddr::V4(s), IpAddr::V4(d)) = (ep.src, ep.dst) else {
            unreachable!()
        };
        Ipv4Fields::udp_socket_default(s, d).emit(roce.len(), &mut ip);
        let mut udp = [0u8; 8];
        emit_udp(ep.src_port, ep.dst_port, roce.len(), &mut udp);
        assert_eq!(verify_exact(&ip, &udp, &roce), Ok(IcrcCheck::Exact));
        // TTL, TOS and the IP checksum are masked: changing them changes nothing.
        ip[1] = 0x2e;
        ip[8] = 1;
        assert_eq!(verify_exact(&ip, &udp, &roce), Ok(IcrcCheck::Exact));
    }

    #[test]
    fn hidden_ipv4_id_is_recovered_for_any_id() {
        let ep = ep();
        let mut roce = sample(&ep);
        let n = roce.len();
        for id in [0u16, 1, 0x1234, 0xbeef, 0xffff] {
            let mut hdr_ip = [0u8; 20];
            let (IpAddr::V4(s), IpAddr::V4(d)) = (ep.src, ep.dst) else {
                unreachable!()
            };
            Ipv4Fields {
                id,
                ..Ipv4Fields::udp_socket_default(s, d)
            }
            .emit(n, &mut hdr_ip);
            let mut udp = [0u8; 8];
            emit_udp(ep.src_port, ep.dst_port, n, &mut udp);
            let icrc = compute(&hdr_ip, &udp, &roce[..n - 4]).unwrap();
            roce[n - 4..].copy_from_slice(&icrc.to_le_bytes());
            assert_eq!(
                verify_udp_socket(&ep, &roce),
                Ok(IcrcCheck::RecoveredIpv4Id {
                    id,
                    dont_fragment: true
                })
            );
        }
    }

    #[test]
    fn a_gso_segment_carries_the_icrc_of_its_own_ipv4_id() {
        // What rxe checks: the ICRC over the header the segment arrives with, whose ID the
        // kernel counted up from 0 across the send.
        let ep = ep();
        let roce = sample(&ep);
        let body = &roce[..roce.len() - 4];
        let (IpAddr::V4(s), IpAddr::V4(d)) = (ep.src, ep.dst) else {
            unreachable!()
        };
        for index in [0u16, 1, 2, 63] {
            let mut ip = [0u8; 20];
            Ipv4Fields {
                id: index,
                ..Ipv4Fields::udp_socket_default(s, d)
            }
            .emit(roce.len(), &mut ip);
            let mut udp = [0u8; 8];
            emit_udp(ep.src_port, ep.dst_port, roce.len(), &mut udp);
            assert_eq!(
                compute_for_gso_segment(&ep, body, index),
                compute(&ip, &udp, body)
            );
        }
        assert_eq!(
            compute_for_gso_segment(&ep, body, 0),
            compute_for_udp_socket(&ep, body)
        );
    }

    #[test]
    fn a_known_ipv4_id_leaves_no_id_to_explain_damage_away() {
        // The same packet sent with ID 7 instead of the 0 the receiver knows: a socket's
        // check finds an ID that fits (7) and takes it; knowing the ID, it is a mismatch,
        // as any damage an ID change would mimic is. A packet sent with the known ID passes.
        let ep = ep();
        let mut roce = sample(&ep);
        let body_len = roce.len() - 4;
        let with_id7 = compute_for_gso_segment(&ep, &roce[..body_len], 7).unwrap();
        roce[body_len..].copy_from_slice(&with_id7.to_le_bytes());
        assert!(matches!(
            verify_udp_socket(&ep, &roce),
            Ok(IcrcCheck::RecoveredIpv4Id { id: 7, .. })
        ));
        assert!(matches!(
            verify_udp_socket_with_ipv4_id(&ep, &roce, 0),
            Err(WireError::IcrcMismatch { .. })
        ));
        assert_eq!(
            verify_udp_socket_with_ipv4_id(&ep, &roce, 7),
            Ok(IcrcCheck::Exact)
        );
    }

    #[test]
    fn corrupted_bits_are_caught_in_exact_mode_and_mostly_in_socket_mode() {
        let ep = ep();
        let roce = sample(&ep);
        let mut ip = [0u8; 20];
        let (IpAddr::V4(s), IpAddr::V4(d)) = (ep.src, ep.dst) else {
            unreachable!()
        };
        Ipv4Fields::udp_socket_default(s, d).emit(roce.len(), &mut ip);
        let mut udp = [0u8; 8];
        emit_udp(ep.src_port, ep.dst_port, roce.len(), &mut udp);
        let mut socket_mode_accepts = 0;
        for bit in 0..roce.len() * 8 {
            if bit / 8 == 4 {
                continue; // BTH byte 4 is masked: ECN bits may change in flight.
            }
            let mut bad = roce.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                matches!(
                    verify_exact(&ip, &udp, &bad),
                    Err(WireError::IcrcMismatch { .. })
                ),
                "bit {bit}"
            );
            if verify_udp_socket(&ep, &bad).is_ok() {
                socket_mode_accepts += 1;
            }
        }
        // Roughly 2^-16 of corruptions pass in socket mode; with ~700 flips expect none or
        // very few, never a large share.
        assert!(socket_mode_accepts <= 2, "{socket_mode_accepts}");
    }

    #[test]
    fn ipv6_is_always_exact() {
        let ep = UdpEndpoints {
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
            src_port: 50000,
            dst_port: ROCE_V2_PORT,
        };
        let mut roce = sample(&ep);
        assert_eq!(verify_udp_socket(&ep, &roce), Ok(IcrcCheck::Exact));
        roce[20] ^= 1;
        assert!(verify_udp_socket(&ep, &roce).is_err());
    }

    #[test]
    fn short_inputs_are_errors_not_panics() {
        let ep = ep();
        for n in 0..16 {
            assert!(verify_udp_socket(&ep, &vec![0u8; n]).is_err());
            assert!(verify_exact(&[0x45; 20], &[0; 8], &vec![0u8; n]).is_err());
        }
        assert!(compute(&[], &[0; 8], &[0; 12]).is_err());
        assert!(compute(&[0x45; 10], &[0; 8], &[0; 12]).is_err());
    }
}
