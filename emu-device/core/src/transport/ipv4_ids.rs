//! Which IPv4 IDs a sender's datagrams can carry, learnt per sender. A UDP socket hides the
//! IP header the ICRC covers, so the receive check solves for the IPv4 Identification: any
//! of the 2^16 IDs passes, and a corrupted datagram whose damage some ID explains is taken
//! (one in 32 768; a fault plan corrupting a few percent of a stream delivered bad bytes
//! within seconds). Senders differ in the IDs they use. A GSO sender (softroce, any
//! unconnected socket) numbers the segments of each send from 0, so its IDs are small and
//! restart at 0 again and again; rxe counts a per-host counter up (IDs anywhere, one zero
//! per wrap). A sender seen restarting at small IDs is held to them: a datagram from it
//! that solves only for a larger ID is dropped as a bad ICRC (a false accept becomes one in
//! 2^25). Nothing is learnt for senders that count up, which are checked as before.

use std::net::{IpAddr, SocketAddr};

use softroce_wire::icrc::UDP_MAX_SEGMENTS;

/// Senders the table keeps, direct-mapped: one that loses its slot is learnt again (and
/// checked as loosely as a new sender meanwhile).
const SLOTS: usize = 1 << u8::BITS;

/// Datagrams in a row with IDs below [`UDP_MAX_SEGMENTS`] before a sender can be held to
/// them...
const SMALL_TO_LEARN: u16 = 32;

/// ...of which this many came with ID 0 after another datagram of the run: restarts, which
/// a counter (rxe's) makes once per wrap of 2^16 datagrams.
const RESTARTS_TO_LEARN: u16 = 2;

/// Datagrams in a row from a held sender that solve only for larger IDs before it is taken
/// to number them otherwise after all (each one alone is most likely a corrupted datagram:
/// this many in a row of those never come).
const LARGE_TO_UNLEARN: u8 = 4;

#[derive(Debug, Clone, Copy, Default)]
struct Sender {
    /// Whose this slot is ([`key_of`]; 0: nobody's).
    key: u64,
    small_in_a_row: u16,
    restarts: u16,
    large_in_a_row: u8,
    restarts_at_zero: bool,
}

/// What the device knows of its senders' IPv4 IDs (see the module's text).
#[derive(Debug)]
pub(crate) struct Ipv4Ids {
    senders: Box<[Sender; SLOTS]>,
}

impl Default for Ipv4Ids {
    fn default() -> Self {
        Self {
            senders: Box::new([Sender::default(); SLOTS]),
        }
    }
}

impl Ipv4Ids {
    /// Whether a datagram from `from` whose ICRC holds if it came with IPv4 ID `id` (and
    /// `dont_fragment`) is taken, learning from it. Only for IDs solved from the ICRC: a
    /// known ID is checked exactly. Runs for every datagram received: a few compares.
    pub(crate) fn plausible(&mut self, from: SocketAddr, id: u16, dont_fragment: bool) -> bool {
        let key = key_of(from);
        // SLOTS is 256: the top byte of the product indexes without a bounds check.
        let s =
            &mut self.senders[usize::from((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)];
        if s.key != key {
            *s = Sender {
                key,
                ..Sender::default()
            };
        }
        if dont_fragment && usize::from(id) < UDP_MAX_SEGMENTS {
            s.large_in_a_row = 0;
            if !s.restarts_at_zero {
                if id == 0 && s.small_in_a_row > 0 {
                    s.restarts = s.restarts.saturating_add(1);
                }
                s.small_in_a_row = s.small_in_a_row.saturating_add(1);
                s.restarts_at_zero =
                    s.small_in_a_row >= SMALL_TO_LEARN && s.restarts >= RESTARTS_TO_LEARN;
            }
            return true;
        }
        if s.restarts_at_zero {
            s.large_in_a_row += 1;
            if s.large_in_a_row < LARGE_TO_UNLEARN {
                return false;
            }
            *s = Sender {
                key,
                ..Sender::default()
            };
            return true;
        }
        s.small_in_a_row = 0;
        s.restarts = 0;
        true
    }
}

/// A sender's address and port in 64 bits, never 0: exact for IPv4, folded for IPv6 (two
/// senders folding alike share what is learnt, one chance in 2^47).
fn key_of(from: SocketAddr) -> u64 {
    let address = match from.ip() {
        IpAddr::V4(a) => u64::from(u32::from(a)),
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let folded = (bits as u64) ^ ((bits >> 64) as u64);
            (folded ^ (folded >> 47)) & ((1 << 47) - 1) | (1 << 47)
        }
    };
    (1 << 63) | (address << 16) | u64::from(from.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 9], port))
    }

    /// A GSO sender's IDs: sends of `per_send` datagrams, each numbered from 0.
    fn gso_ids(sends: usize, per_send: u16) -> impl Iterator<Item = u16> {
        (0..sends).flat_map(move |_| 0..per_send)
    }

    #[test]
    fn a_sender_restarting_at_zero_is_held_to_small_ids() {
        let mut ids = Ipv4Ids::default();
        for id in gso_ids(8, 8) {
            assert!(ids.plausible(from(4791), id, true));
        }
        assert!(
            !ids.plausible(from(4791), 5000, true),
            "a corrupted datagram"
        );
        assert!(
            !ids.plausible(from(4791), 3, false),
            "DF clear: not a GSO segment"
        );
        assert!(
            ids.plausible(from(4791), 3, true),
            "the sender's next datagram"
        );
        assert!(
            ids.plausible(from(4792), 5000, true),
            "another sender is its own"
        );
    }

    #[test]
    fn single_datagram_sends_restart_at_zero_too() {
        let mut ids = Ipv4Ids::default();
        for _ in 0..SMALL_TO_LEARN {
            assert!(ids.plausible(from(4791), 0, true));
        }
        assert!(!ids.plausible(from(4791), 200, true));
    }

    #[test]
    fn a_counter_crossing_zero_is_never_held_to_small_ids() {
        let mut ids = Ipv4Ids::default();
        // rxe's per-host counter, through its wrap and well past the small IDs.
        for id in (65_000..=u16::MAX).chain(0..=2000) {
            assert!(ids.plausible(from(49_152), id, true), "id {id}");
        }
    }

    #[test]
    fn larger_ids_in_a_row_unlearn_a_held_sender() {
        let mut ids = Ipv4Ids::default();
        for id in gso_ids(8, 8) {
            ids.plausible(from(4791), id, true);
        }
        let taken: Vec<bool> = (9000..9000 + u16::from(LARGE_TO_UNLEARN) + 2)
            .map(|id| ids.plausible(from(4791), id, true))
            .collect();
        assert_eq!(taken, [false, false, false, true, true, true]);
    }

    #[test]
    fn a_corrupted_datagram_between_good_ones_does_not_unlearn() {
        let mut ids = Ipv4Ids::default();
        for id in gso_ids(8, 8) {
            ids.plausible(from(4791), id, true);
        }
        for round in 0..10u16 {
            assert!(!ids.plausible(from(4791), 7000 + round, true));
            assert!(ids.plausible(from(4791), 0, true));
        }
    }
}
