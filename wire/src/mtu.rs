//! IBTA path MTU values.

use core::fmt;

/// An IBTA MTU: the largest payload of one RoCE packet (headers excluded).
///
/// The numeric codes (1..=5) are those of `enum ibv_mtu`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Mtu {
    /// 256 bytes (`IBV_MTU_256` = 1).
    Mtu256 = 1,
    /// 512 bytes (`IBV_MTU_512` = 2).
    Mtu512 = 2,
    /// 1024 bytes (`IBV_MTU_1024` = 3).
    Mtu1024 = 3,
    /// 2048 bytes (`IBV_MTU_2048` = 4).
    Mtu2048 = 4,
    /// 4096 bytes (`IBV_MTU_4096` = 5).
    Mtu4096 = 5,
}

impl Mtu {
    /// All MTUs in increasing order.
    pub const ALL: [Self; 5] = [
        Self::Mtu256,
        Self::Mtu512,
        Self::Mtu1024,
        Self::Mtu2048,
        Self::Mtu4096,
    ];

    /// Payload bytes per packet.
    pub const fn bytes(self) -> usize {
        256 << (self as u32 - 1)
    }

    /// The `enum ibv_mtu` code (1..=5).
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Parse an `enum ibv_mtu` code.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Mtu256),
            2 => Some(Self::Mtu512),
            3 => Some(Self::Mtu1024),
            4 => Some(Self::Mtu2048),
            5 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// Parse a byte count (exactly 256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(bytes: usize) -> Option<Self> {
        match bytes {
            256 => Some(Self::Mtu256),
            512 => Some(Self::Mtu512),
            1024 => Some(Self::Mtu1024),
            2048 => Some(Self::Mtu2048),
            4096 => Some(Self::Mtu4096),
            _ => None,
        }
    }

    /// The largest IBTA MTU whose RoCEv2 packet fits in an Ethernet/IP MTU of `link_mtu`
    /// bytes, as rxe computes `active_mtu` from the netdev MTU (IP + UDP + BTH + the largest
    /// extended headers + ICRC must fit).
    pub fn for_link_mtu(link_mtu: usize, ipv6: bool) -> Option<Self> {
        // rxe subtracts IP + UDP + BTH + ICRC + the largest extension stack it may send with
        // payload (RETH + ImmDt = 20 bytes, or DETH + ImmDt = 12): use the larger, 20.
        let ip = if ipv6 { 40 } else { 20 };
        let overhead = ip + 8 + 12 + 20 + 4;
        let room = link_mtu.checked_sub(overhead)?;
        Self::ALL.iter().rev().copied().find(|m| m.bytes() <= room)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_bytes_agree_with_ibv_mtu() {
        for (code, bytes) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            let mtu = Mtu::from_code(code).unwrap();
            assert_eq!(mtu.bytes(), bytes);
            assert_eq!(Mtu::from_bytes(bytes), Some(mtu));
        }
        assert_eq!(Mtu::from_code(0), None);
        assert_eq!(Mtu::from_code(6), None);
    }

    #[test]
    fn ethernet_1500_gives_1024_like_rxe() {
        assert_eq!(Mtu::for_link_mtu(1500, false), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::for_link_mtu(9000, false), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_link_mtu(65536, false), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_link_mtu(100, false), None);
    }
}
