//! Device identity: owns the configuration, the attributes, the port state, the GID table
//! and the random source of keys.

use std::net::{IpAddr, SocketAddr};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softroce_wire::{Gid, Mtu};

use super::error::{VerbsError, VerbsResult};
use super::objects::AhAttr;

/// How a device is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaConfig {
    /// Device name (`softroce0`).
    pub name: String,
    /// The address the device's RoCEv2 GID is made from.
    pub ip: IpAddr,
    /// UDP port it receives on (4791 unless a private setup needs another).
    pub udp_port: u16,
    /// Ethernet/IP MTU of the link; the active IBTA MTU follows from it as in rxe.
    pub link_mtu: usize,
    /// MAC address the node GUID is made from (EUI-64), as rxe's comes from its netdev
    /// (`None`: node GUID 0). It makes no GID: see [`HcaConfig::new`].
    pub mac: Option<[u8; 6]>,
    /// Seed of every random choice (keys, initial QPNs).
    pub seed: u64,
    /// Completion vectors offered.
    pub num_comp_vectors: u32,
    /// Treat `retry_cnt` 7 as "retry forever", as rxe does. Off by default: ibv_modify_qp(3)
    /// and IBTA give `retry_cnt` no such meaning (only `rnr_retry` 7 is infinite), so 7
    /// means seven retries and then IBV_WC_RETRY_EXC_ERR — what a program on hardware sees
    /// when its peer dies, and what middleware relies on to notice it.
    pub retry_cnt_7_is_infinite: bool,
    /// Adaptive retransmission, as ConnectX offers it: once an RC requester's path has shown
    /// loss, a stall of a few measured round trips resends from the oldest unacknowledged
    /// PSN instead of waiting out the local ACK timeout (`transport::recovery`). Off by
    /// default: ibv_modify_qp(3) makes `timeout` "the minimal timeout that a QP waits for
    /// ACK/NACK from remote QP before retransmitting the packet", and an early resend waits
    /// less. Against softroce's own responder the sequence NAKs already cover all but a
    /// lost last packet; against rxe (one NAK per gap) this also covers a lost NAK or a
    /// lost resend. The early resends are not retries (`retry_cnt` still counts ACK
    /// timeouts and sequence NAKs only).
    pub adaptive_retransmit: bool,
    /// RC request PSNs the device may have unacknowledged at once to one peer, over all its
    /// QPs to that peer (each QP also keeps rxe's window of 128). A peer's receive buffer
    /// holds only so many packets; past that, loss and go-back-N feed each other under
    /// load. Per peer, so a dead peer holds back only the QPs that talk to it. The UDP
    /// driver sizes it from its socket's receive buffer; the default suits a 16 MiB one.
    pub max_outstanding_psns: u32,
    /// The first QP number handed out (rxe starts at 0x11; 0 and 1 are the special QPs).
    pub first_qpn: u32,
    /// How long the responder may hold a positive ACK back to send it with the QP's next
    /// packet (zero: at once). Later ACKs replace a held one (an ACK covers every earlier
    /// PSN), and the QP's next request, NAK or re-ACK takes it along, so a request/response
    /// exchange costs one datagram per turn instead of two.
    pub ack_defer: std::time::Duration,
    /// The slot of this process when several share the device (`None`: alone, every QPN
    /// is ours). Its QPNs then lie in [`qpn_slot_range`], so the QPNs of all processes on
    /// the device are distinct and the one receiving on the device's port can route a
    /// packet by its destination QPN alone.
    pub qpn_slot: Option<u8>,
    /// The UDP port this process's packets leave from when it is not `udp_port` (a process
    /// sharing the device sends from a socket of its own; the ICRC covers the port).
    pub source_port: Option<u16>,
    /// The instant the device clock ([`Hca::clock`](crate::Hca::clock)) reads 0 (`None`:
    /// the first `now` the device is given). The UDP driver sets CLOCK_MONOTONIC's zero, so
    /// completion timestamps are CLOCK_MONOTONIC nanoseconds; the simulator sets the
    /// fabric's start, so they are virtual nanoseconds.
    pub clock_epoch: Option<std::time::Instant>,
    /// The caller reports what became of each packet given with a [`TransmitToken`]
    /// (`crate::Hca::handle_sent`, `crate::Hca::handle_send_failure`): a UC/UD request then
    /// completes once its last packet has left, and one the host refused to send completes
    /// in error. Off (the simulator): such a request completes as its last packet is
    /// handed out, as nothing can refuse it.
    ///
    /// [`TransmitToken`]: crate::TransmitToken
    pub transmit_feedback: bool,
    /// Let a request packet's payload stay where it lies: a SEND or WRITE packet whose
    /// payload is one piece of registered memory of at least [`PAYLOAD_BY_REFERENCE_MIN`]
    /// bytes is built without it, its ICRC computed over the memory in place, and
    /// [`Hca::poll_transmit`](crate::Hca::poll_transmit) names the piece in
    /// [`Transmit::payload`](crate::Transmit::payload) for the caller to send from there
    /// (one copy per byte, the kernel's, instead of two). Takes effect only with a fault-safe
    /// copier installed ([`install_copier`](crate::install_copier)), which reads the memory
    /// for the ICRC. Off by default: the packet is then whole in the buffer.
    pub payload_by_reference: bool,
}

/// The smallest payload [`HcaConfig::payload_by_reference`] leaves in place: below it,
/// copying costs less than the extra piece a send then gathers.
pub const PAYLOAD_BY_REFERENCE_MIN: usize = 1024;

/// [`HcaConfig::max_outstanding_psns`] by default: 2048 packets of up to 4 KiB.
pub(crate) const DEFAULT_MAX_OUTSTANDING_PSNS: u32 = 2048;

/// Bits of a QPN above the per-slot range: `MAX_SLOTS` slots of 2^18 QPNs each.
pub const QPN_SLOT_SHIFT: u32 = 18;
/// Processes that can share one device.
pub const MAX_SLOTS: usize = 1 << (24 - QPN_SLOT_SHIFT);

/// The slot a QPN of a shared device belongs to.
pub const fn qpn_slot(qpn: u32) -> u8 {
    ((qpn & 0xFF_FFFF) >> QPN_SLOT_SHIFT) as u8
}

/// The QPNs slot `slot` hands out (QPN 0 and 1 excluded, the last QPN of the space too:
/// 0xFFFFFF is the multicast QPN).
pub const fn qpn_slot_range(slot: u8) -> std::ops::Range<u32> {
    let start = (slot as u32) << QPN_SLOT_SHIFT;
    let end = start + (1 << QPN_SLOT_SHIFT);
    let start = if start < FIRST_QPN { FIRST_QPN } else { start };
    let end = if end > 0xFF_FFFF { 0xFF_FFFF } else { end };
    start..end
}

impl HcaConfig {
    /// A device on `ip`, UDP 4791, link MTU 1500 (active MTU 1024 like rxe), whose GID
    /// table holds the RoCEv2 GID of `ip` at indexes 0 and 1.
    ///
    /// rxe lists the default GID `fe80::<EUI-64 of the MAC>` at index 0 and the address's
    /// GID at index 1; the link-local one travels as IPv6 link-local traffic on the netdev.
    /// This device sends from one UDP socket bound to `ip`: a link-local GID could carry
    /// nothing (no link-local address exists on loopback, and the socket's family is
    /// `ip`'s), and every GID the port advertises must carry traffic. So both places hold
    /// the address's GID: programs that take the first GID (rdma-core's defaults, pyverbs)
    /// and scripts written for rxe's layout (`-g 1`, `-x 1`) both reach the address.
    pub fn new(name: impl Into<String>, ip: IpAddr) -> Self {
        let o = match ip {
            IpAddr::V4(v4) => v4.octets(),
            IpAddr::V6(v6) => {
                let b = v6.octets();
                [b[12], b[13], b[14], b[15]]
            }
        };
        Self {
            name: name.into(),
            ip,
            udp_port: softroce_wire::icrc::ROCE_V2_PORT,
            link_mtu: 1500,
            mac: Some([0x02, 0x00, o[0], o[1], o[2], o[3]]),
            seed: 0x5eed,
            num_comp_vectors: 1,
            retry_cnt_7_is_infinite: false,
            adaptive_retransmit: false,
            max_outstanding_psns: DEFAULT_MAX_OUTSTANDING_PSNS,
            first_qpn: FIRST_QPN,
            ack_defer: std::time::Duration::ZERO,
            qpn_slot: None,
            source_port: None,
            clock_epoch: None,
            transmit_feedback: false,
            payload_by_reference: false,
        }
    }
}

/// Device attributes (`ibv_device_attr`), with rxe's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (EUI-64 of the MAC).
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor ID.
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Maximum outstanding WRs per queue.
    pub max_qp_wr: u32,
    /// Device capability flags: rxe's set but MEM_MGT_EXTENSIONS (bit 21: fast-registration
    /// work requests are not emulated) and AUTO_PATH_MIG (bit 4: no alternate paths on
    /// RoCE), with XRC (bit 20); memory windows of type 1 and 2B (bits 17, 24).
    pub device_cap_flags: u32,
    /// `ibv_device_attr_ex.device_cap_flags_ex`: the kernel's 64-bit flags, whose low half
    /// is `device_cap_flags`; above it [`DEVICE_ATOMIC_WRITE`], as rxe sets it.
    pub device_cap_flags_ex: u64,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Maximum SGEs per READ.
    pub max_sge_rd: u32,
    /// Maximum CQs.
    pub max_cq: u32,
    /// Maximum entries per CQ.
    pub max_cqe: u32,
    /// Maximum MRs.
    pub max_mr: u32,
    /// Maximum memory windows.
    pub max_mw: u32,
    /// Device memory, in bytes, all `ibv_alloc_dm` allocations together may take
    /// (`ibv_device_attr_ex.max_dm_size`).
    pub max_dm_size: u64,
    /// On-demand paging (`ibv_device_attr_ex.odp_caps`).
    pub odp: OdpCaps,
    /// Maximum PDs.
    pub max_pd: u32,
    /// Maximum outstanding READ/atomic as responder, per QP.
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding READ/atomic as requester, per QP.
    pub max_qp_init_rd_atom: u32,
    /// Atomic guarantees (`IBV_ATOMIC_HCA` = 1).
    pub atomic_cap: u32,
    /// Maximum AHs.
    pub max_ah: u32,
    /// Maximum multicast groups.
    pub max_mcast_grp: u32,
    /// Maximum QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Maximum QP attachments over all multicast groups.
    pub max_total_mcast_qp_attach: u32,
    /// Maximum SRQs.
    pub max_srq: u32,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: u32,
    /// Maximum SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// Maximum P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Maximum inline data per send WR.
    pub max_inline_data: u32,
    /// Maximum message size.
    pub max_msg_sz: u32,
    /// Completion vectors.
    pub num_comp_vectors: u32,
    /// Frequency of the device clock in kHz (`ibv_device_attr_ex.hca_core_clock`): it
    /// counts nanoseconds, so 1 GHz.
    pub hca_core_clock: u64,
    /// Valid bits of a completion timestamp
    /// (`ibv_device_attr_ex.completion_timestamp_mask`): all 64, the clock never wraps.
    pub completion_timestamp_mask: u64,
    /// Completion event moderation (`ibv_device_attr_ex.cq_mod_caps`): the most
    /// completions per event and the longest period (microseconds) `ibv_modify_cq` takes.
    pub max_cq_moderation_count: u16,
    /// See `max_cq_moderation_count`.
    pub max_cq_moderation_period: u16,
}

/// On-demand paging capabilities (`struct ibv_odp_caps`): the general bits
/// (`IBV_ODP_SUPPORT` = 1, `IBV_ODP_SUPPORT_IMPLICIT` = 2) and, per transport, the
/// operations that may use ODP regions (`IBV_ODP_SUPPORT_SEND` = 1, `RECV` = 2, `WRITE` = 4,
/// `READ` = 8, `ATOMIC` = 16, `SRQ_RECV` = 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OdpCaps {
    /// `general_caps`.
    pub general: u64,
    /// `per_transport_caps.rc_odp_caps`.
    pub rc: u32,
    /// `per_transport_caps.uc_odp_caps`.
    pub uc: u32,
    /// `per_transport_caps.ud_odp_caps`.
    pub ud: u32,
    /// `xrc_odp_caps`.
    pub xrc: u32,
}

impl OdpCaps {
    /// What the emulator offers. It pins nothing for any region, so an ODP region is one
    /// more region and every operation of every QP type may use it. Implicit ODP (a region
    /// over the whole address space, pages mapped later) is added by
    /// [`OdpCaps::emulated`] where copies survive unmapped pages.
    pub const EMULATED: Self = Self {
        general: 1,
        rc: 0x3F,
        // UC: no READ, atomics or SRQ (only RC and UD QPs take an SRQ).
        uc: 0x07,
        // UD: SEND, RECV, SRQ_RECV.
        ud: 0x23,
        // XRC: as RC (its receives are all SRQ receives).
        xrc: 0x3F,
    };

    /// `IBV_ODP_SUPPORT_IMPLICIT`.
    pub const IMPLICIT: u64 = 2;

    /// [`OdpCaps::EMULATED`], with implicit ODP when `fault_safe` (an access to a page the
    /// process has not mapped then fails the work request instead of the process).
    pub const fn emulated(fault_safe: bool) -> Self {
        let mut caps = Self::EMULATED;
        if fault_safe {
            caps.general |= Self::IMPLICIT;
        }
        caps
    }
}

/// Port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// Link down.
    Down = 1,
    /// Active.
    Active = 4,
}

/// Port attributes (`ibv_port_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// State.
    pub state: PortState,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Port capability flags.
    pub port_cap_flags: u32,
    /// Maximum message size.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Link layer is Ethernet.
    pub link_layer_ethernet: bool,
}

/// `device_cap_flags`: what the device does (see [`DeviceAttr::device_cap_flags`]).
const DEVICE_CAP_FLAGS: u32 = 0x0112_3C66;

/// `IB_UVERBS_DEVICE_ATOMIC_WRITE` (kernel uapi `ib_user_verbs.h`, Linux 6.2; not in
/// rdma-core 44's headers): the device executes RDMA ATOMIC WRITE.
pub const DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

/// The first QPN handed out (rxe starts at 0x11; 0 and 1 are the special QPs).
pub(crate) const FIRST_QPN: u32 = 0x11;

/// `max_cqe`: mlx5's (rxe's is 32767). Middleware sized for hardware asks for more than
/// rxe's: libfabric 1.17's ofi_rxm opens a 262144-entry CQ and does not clamp it to the
/// device's limit. A CQ's storage grows only with the completions it holds, so the larger
/// limit costs nothing until used.
pub const MAX_CQE: u32 = 0x3F_FFFF;

/// XRC domains open at once on one device (ibv_open_xrcd(3) then fails with ENOMEM). No
/// attribute reports it; as many as protection domains (`max_pd`).
pub const MAX_XRCDS: usize = 0x10_0000;

/// `max_dm_size`: 256 KiB.
pub(crate) const MAX_DM_SIZE: u64 = 256 * 1024;

/// The longest completion event moderation period, in microseconds (mlx5's 0xFFF).
pub(crate) const MAX_CQ_MODERATION_PERIOD_US: u16 = 0xFFF;

/// What the device is: its setup, limits, port and GIDs.
#[derive(Debug)]
pub(crate) struct Device {
    config: HcaConfig,
    attr: DeviceAttr,
    port_state: PortState,
    gids: Vec<Gid>,
    rng: ChaCha8Rng,
}

impl Device {
    pub(crate) fn new(config: HcaConfig) -> Self {
        // The one GID that can carry traffic, where programs look for it (HcaConfig::new).
        let gids = vec![Gid::from_ip(config.ip); 2];
        let node_guid = config.mac.map_or(0, |m| {
            u64::from_be_bytes([m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
        });
        let attr = DeviceAttr {
            fw_ver: "softroce-0.1".into(),
            node_guid,
            sys_image_guid: node_guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xFFFF_F000,
            vendor_id: 0xFFFFFF,
            vendor_part_id: 0,
            hw_ver: 0,
            // A process sharing the device has its slot's QPNs only: no more QPs than that.
            max_qp: config.qpn_slot.map_or(0x10_0000 - FIRST_QPN, |slot| {
                let r = qpn_slot_range(slot);
                r.end - r.start
            }),
            max_qp_wr: 0x4000,
            // rxe's flags plus IBV_DEVICE_XRC (1 << 20): XRC domains, SRQs and QPs; less
            // IBV_DEVICE_AUTO_PATH_MIG (1 << 4), which rxe sets though RoCE refuses every
            // alternate path: ibv_modify_qp(3) has programs check that bit to learn whether
            // alternate paths are supported.
            device_cap_flags: DEVICE_CAP_FLAGS,
            device_cap_flags_ex: DEVICE_CAP_FLAGS as u64 | DEVICE_ATOMIC_WRITE,
            max_sge: 32,
            max_sge_rd: 32,
            max_cq: 0x10_0000,
            max_cqe: MAX_CQE,
            max_mr: 0x7_FFFF,
            // rxe's RXE_MAX_MW.
            max_mw: 0x7_FFFF,
            // rxe has no device memory. Ours is process memory, so any bound would do; this
            // one is the size of a ConnectX-5's MEMIC (an application sizing its use by the
            // attribute sees a realistic figure) and makes running out testable.
            max_dm_size: MAX_DM_SIZE,
            odp: OdpCaps::emulated(crate::memory::fault_safe()),
            max_pd: 0x10_0000,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            atomic_cap: 1,
            max_ah: 32767,
            // rxe_param.h: RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH,
            // RXE_MAX_TOT_MCAST_QP_ATTACH.
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 0x7_0000,
            max_srq: 0xD_FFFF,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            // rxe's RXE_MAX_INLINE_DATA: a send WQE's room for its 32 SGEs (32 x 16 bytes).
            // Libraries probe it by creating QPs from 512 down (libfabric's verbs provider).
            max_inline_data: 512,
            max_msg_sz: 0x80_0000,
            num_comp_vectors: config.num_comp_vectors.max(1),
            hca_core_clock: 1_000_000,
            completion_timestamp_mask: u64::MAX,
            // mlx5's (MLX5_MAX_CQ_COUNT, MLX5_MAX_CQ_PERIOD); rxe has no moderation.
            max_cq_moderation_count: u16::MAX,
            max_cq_moderation_period: MAX_CQ_MODERATION_PERIOD_US,
        };
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        Self {
            config,
            attr,
            port_state: PortState::Active,
            gids,
            rng,
        }
    }

    pub(crate) fn config(&self) -> &HcaConfig {
        &self.config
    }

    pub(crate) fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    pub(crate) fn port_state(&self) -> PortState {
        self.port_state
    }

    /// Set the port state; whether it changed.
    pub(crate) fn set_port_state(&mut self, state: PortState) -> bool {
        let changed = state != self.port_state;
        self.port_state = state;
        changed
    }

    pub(crate) fn gids(&self) -> &[Gid] {
        &self.gids
    }

    /// The active IBTA MTU of the port.
    pub(crate) fn active_mtu(&self) -> Mtu {
        Mtu::for_link_mtu(self.config.link_mtu, self.config.ip.is_ipv6()).unwrap_or(Mtu::Mtu256)
    }

    /// The address and port this device receives on.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.config.ip, self.config.udp_port)
    }

    /// The address and port this process's packets leave from.
    pub(crate) fn source_addr(&self) -> SocketAddr {
        let port = self.config.source_port.unwrap_or(self.config.udp_port);
        SocketAddr::new(self.config.ip, port)
    }

    /// A random key for which `in_use` is false: 24 random index bits and an 8-bit key
    /// byte, never 0.
    pub(crate) fn draw_key(&mut self, in_use: impl Fn(u32) -> bool) -> u32 {
        loop {
            let k: u32 = self.rng.r#gen();
            if k != 0 && !in_use(k) {
                return k;
            }
        }
    }

    pub(crate) fn check_port(&self, verb: &'static str, port: u8) -> VerbsResult<()> {
        if port == 1 {
            Ok(())
        } else {
            Err(VerbsError::invalid(
                verb,
                format!("port {port} does not exist (the device has port 1)"),
            ))
        }
    }

    pub(crate) fn check_ah_attr(&self, verb: &'static str, attr: &AhAttr) -> VerbsResult<()> {
        if !attr.is_global {
            return Err(VerbsError::invalid(
                verb,
                "RoCE address vectors need a GRH: set is_global and the destination GID",
            ));
        }
        if usize::from(attr.sgid_index) >= self.gids.len() {
            return Err(VerbsError::invalid(
                verb,
                format!(
                    "sgid_index {} beyond the GID table of {}",
                    attr.sgid_index,
                    self.gids.len()
                ),
            ));
        }
        if attr.port_num != 1 {
            return Err(VerbsError::invalid(
                verb,
                format!("port_num {} does not exist", attr.port_num),
            ));
        }
        if attr.dgid == Gid::ZERO {
            return Err(VerbsError::invalid(verb, "destination GID is zero"));
        }
        self.check_reachable(verb, attr.dgid)
    }

    /// Whether packets from this device's address can reach `dgid`'s, refused at
    /// address-vector creation as the kernel's route resolution refuses an unroutable AH:
    /// a send that cannot leave must never be queued to be lost silently.
    fn check_reachable(&self, verb: &'static str, dgid: Gid) -> VerbsResult<()> {
        let (ours, theirs) = (self.config.ip, dgid.to_ip());
        if ours.is_ipv4() != theirs.is_ipv4() {
            return Err(VerbsError::invalid(
                verb,
                format!(
                    "destination GID {dgid} is {} but the device sends from {ours}: no route between the address families",
                    if theirs.is_ipv4() { "IPv4" } else { "IPv6" },
                ),
            ));
        }
        // The kernel routes nothing from a loopback source to another host (EINVAL). An
        // IPv4 multicast group is reached on the device's own interface (the driver sends
        // with IP_MULTICAST_IF set to the device's address); Linux has no IPv6 multicast
        // route on lo, so there an IPv6 group is unreachable too.
        let group_on_lo = theirs.is_multicast() && theirs.is_ipv4();
        if ours.is_loopback() && !theirs.is_loopback() && !group_on_lo {
            return Err(VerbsError::invalid(
                verb,
                format!(
                    "destination GID {dgid} is not a loopback address, which a device on {ours} cannot reach"
                ),
            ));
        }
        Ok(())
    }
}
