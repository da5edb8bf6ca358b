//! rxe's choice of UDP source port, so our packets look like rxe's on the wire.
//! Receivers ignore the source port; it only spreads flows over ECMP paths.

/// `rdma_calc_flow_label(lqpn, rqpn)`: the 20-bit flow label the kernel derives for an RC
/// QP pair.
pub const fn rc_flow_label(local_qpn: u32, remote_qpn: u32) -> u32 {
    let mut v = (local_qpn as u64) * (remote_qpn as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// The RC source port: `0xC000 | fold(flow_label)` (`rdma_flow_label_to_udp_sport`).
pub const fn rc_source_port(local_qpn: u32, remote_qpn: u32) -> u16 {
    let fl = rc_flow_label(local_qpn, remote_qpn);
    let fold = (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14);
    (0xC000 | fold) as u16
}

/// The UD (and QP1) source port: `0xC000 + hash_32(lqpn, 14)`.
pub const fn ud_source_port(local_qpn: u32) -> u16 {
    let hash = local_qpn.wrapping_mul(0x61C8_8647) >> (32 - 14);
    (0xC000 + hash) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_ports_match_what_rxe_sent() {
        assert_eq!(rc_source_port(0x11, 0x11), 49441);
        assert_eq!(rc_source_port(0x24, 0x24), 50448);
        assert_eq!(rc_source_port(0x28, 0xcf8), 50888);
    }

    #[test]
    fn ud_ports_match_what_rxe_sent() {
        assert_eq!(ud_source_port(1), 55410);
        assert_eq!(ud_source_port(0x13), 53368);
    }
}
