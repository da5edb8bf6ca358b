//! One way to bring a QP from RESET to RTS, for tests, the simulator and tools: the
//! attributes of each step, with the masks the state table requires.

use softroce_wire::{Mtu, Psn};

use crate::{
    AccessFlags, AhAttr, Hca, QpAttr, QpAttrMask, QpCap, QpHandle, QpState, QpType, VerbsResult,
    required_mask,
};

impl QpCap {
    /// `max_send_wr` sends and `max_recv_wr` receives of one SGE each, no inline data.
    pub const fn new(max_send_wr: u32, max_recv_wr: u32) -> Self {
        Self {
            max_send_wr,
            max_recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }

    /// With `sges` SGEs per send and per receive.
    #[must_use]
    pub const fn with_sges(self, sges: u32) -> Self {
        Self {
            max_send_sge: sges,
            max_recv_sge: sges,
            ..self
        }
    }

    /// With `bytes` of inline data per send.
    #[must_use]
    pub const fn with_inline(self, bytes: u32) -> Self {
        Self {
            max_inline_data: bytes,
            ..self
        }
    }
}

/// The peer a QP connects to (RC/UC; UD picks its peer per send and takes the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpPeer {
    /// Its QP number.
    pub qpn: u32,
    /// The first PSN it sends: this QP's expected receive PSN.
    pub psn: Psn,
    /// The path to it.
    pub av: AhAttr,
}

/// What a QP's RESET → INIT → RTR → RTS steps set, apart from its peer and first PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpBringup {
    /// Transport.
    pub qp_type: QpType,
    /// Remote access the responder grants (RC/UC).
    pub access: AccessFlags,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Path MTU (RC/UC).
    pub mtu: Mtu,
    /// RNR NAK timer code sent to requesters (RC).
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (RC).
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries (RC, 7 = infinite).
    pub rnr_retry: u8,
    /// READs and atomics outstanding, as requester and as responder (RC).
    pub rd_atomic: u8,
}

impl QpBringup {
    /// Remote WRITE, READ and atomics allowed, MTU 1024, Q_Key 0x11111111, ACK timeout
    /// 14 (67 ms), seven retries of each kind, RNR timer 12 (0.64 ms), 16 READs/atomics.
    pub const fn new(qp_type: QpType) -> Self {
        Self {
            qp_type,
            access: AccessFlags::REMOTE_WRITE
                .union(AccessFlags::REMOTE_READ)
                .union(AccessFlags::REMOTE_ATOMIC),
            qkey: 0x1111_1111,
            mtu: Mtu::Mtu1024,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rd_atomic: 16,
        }
    }

    /// RESET → INIT.
    pub fn init(&self) -> (QpAttr, QpAttrMask) {
        let attr = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: self.qkey,
            qp_access_flags: self.access,
            ..QpAttr::default()
        };
        (attr, self.mask(QpState::Reset, QpState::Init))
    }

    /// INIT → RTR, receiving from `peer`.
    pub fn rtr(&self, peer: &QpPeer) -> (QpAttr, QpAttrMask) {
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: self.mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: self.rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            ah_attr: peer.av,
            ..QpAttr::default()
        };
        (attr, self.mask(QpState::Init, QpState::Rtr))
    }

    /// RTR → RTS, sending from `sq_psn`.
    pub fn rts(&self, sq_psn: Psn) -> (QpAttr, QpAttrMask) {
        let attr = QpAttr {
            qp_state: QpState::Rts,
            sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.rd_atomic,
            ..QpAttr::default()
        };
        (attr, self.mask(QpState::Rtr, QpState::Rts))
    }

    /// Take `qp` from RESET to RTR, receiving from `peer`.
    pub fn to_rtr(&self, hca: &mut Hca, qp: QpHandle, peer: &QpPeer) -> VerbsResult<()> {
        for (attr, mask) in [self.init(), self.rtr(peer)] {
            hca.modify_qp(qp, &attr, mask)?;
        }
        Ok(())
    }

    /// Take `qp` from RESET to RTS, connected to `peer` and sending from `sq_psn`.
    pub fn to_rts(
        &self,
        hca: &mut Hca,
        qp: QpHandle,
        peer: &QpPeer,
        sq_psn: Psn,
    ) -> VerbsResult<()> {
        self.to_rtr(hca, qp, peer)?;
        let (attr, mask) = self.rts(sq_psn);
        hca.modify_qp(qp, &attr, mask)
    }

    /// What the state table requires of `cur → next`; every step above is a transition it
    /// allows, and should it not, `modify_qp` explains the refusal.
    fn mask(&self, cur: QpState, next: QpState) -> QpAttrMask {
        required_mask(self.qp_type, cur, next).unwrap_or(QpAttrMask::STATE)
    }
}
