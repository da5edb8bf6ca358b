//! IBTA time exponents (4.096 µs × 2^n) as the kernel CM turns them into durations.

use core::time::Duration;

/// `cm_convert_to_ms`: 4.096 µs × 2^`exponent`, approximated as 2^(`exponent` − 8) ms and
/// never less than 1 ms. The approximation (not the exact product) keeps our retry and
/// time-wait timers the same length as the kernel's on the other end of the wire.
pub fn cm_timeout(exponent: u8) -> Duration {
    // The 5-bit wire fields cap the exponent at 31; clamp so no input can overflow.
    let exponent = u32::from(exponent.min(31));
    Duration::from_millis(1u64 << exponent.saturating_sub(8))
}

/// `cm_ack_timeout`: the local ACK timeout exponent for a path, from the target's CA ACK
/// delay and the packet life time: 4.096 µs × 2^result ≥ ack delay + 2 × life time,
/// rounded up by one step only when the smaller term is within 50 % of the larger.
pub fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let ca_ack_delay = ca_ack_delay.min(31);
    let life = packet_life_time.min(31) + 1;
    let ack_timeout = if life >= ca_ack_delay {
        life + u8::from(ca_ack_delay >= life - 1)
    } else {
        ca_ack_delay + u8::from(life >= ca_ack_delay - 1)
    };
    ack_timeout.min(31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_convert_like_cm_convert_to_ms() {
        assert_eq!(cm_timeout(0), Duration::from_millis(1));
        assert_eq!(cm_timeout(8), Duration::from_millis(1));
        assert_eq!(cm_timeout(16), Duration::from_millis(256));
        // rdma_cm's CMA_CM_RESPONSE_TIMEOUT.
        assert_eq!(cm_timeout(20), Duration::from_millis(4096));
        assert_eq!(cm_timeout(31), Duration::from_millis(1 << 23));
        assert_eq!(cm_timeout(255), cm_timeout(31));
    }

    #[test]
    fn ack_timeout_rounds_up_only_when_terms_are_close() {
        // rdma_cm on RoCE (life time 16) to rxe (ACK delay 15): 17, not rounded up.
        assert_eq!(cm_ack_timeout(15, 16), 17);
        // Equal terms round up.
        assert_eq!(cm_ack_timeout(17, 16), 18);
        // A dominant ACK delay wins.
        assert_eq!(cm_ack_timeout(25, 3), 25);
        assert_eq!(cm_ack_timeout(0, 0), 2);
        assert_eq!(cm_ack_timeout(31, 31), 31);
        assert_eq!(cm_ack_timeout(255, 255), 31);
    }
}
