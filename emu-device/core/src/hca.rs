//! The device: configuration, attributes, object tables, PD/MR/AH verbs, async events and
//! the transport entry points.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softroce_wire::{Gid, Mtu, Qpn};

use super::counters::Counters;
use super::error::{VerbsError, VerbsResult};
use super::handles::{
    AhHandle, ChannelHandle, CqHandle, MrHandle, PdHandle, QpHandle, SrqHandle, Table,
};
use super::objects::{Ah, AhAttr, Channel, Cq, Mr, Pd, Qp, Srq};
use super::types::{AccessFlags, EventType};

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
    /// MAC address for the link-local GID at index 0 (`None`: no link-local GID, so the
    /// IP GID is index 0).
    pub mac: Option<[u8; 6]>,
    /// Seed of every random choice (keys, initial QPNs).
    pub seed: u64,
    /// Completion vectors offered.
    pub num_comp_vectors: u32,
    /// Treat `retry_cnt` 7 as "retry forever", as rxe does (IBTA reserves that meaning for
    /// `rnr_retry` only). On by default for rxe compatibility; off gives exactly seven
    /// retries.
    pub retry_cnt_7_is_infinite: bool,
    /// The first QP number handed out (rxe starts at 0x11; 0 and 1 are the special QPs).
    pub first_qpn: u32,
    /// How long the responder may hold a positive ACK back to send it with the QP's next
    /// packet (zero: at once). Later ACKs replace a held one (an ACK covers every earlier
    /// PSN), and the QP's next request, NAK or re-ACK takes it along, so a request/response
    /// exchange costs one datagram per turn instead of two.
    pub ack_defer: std::time::Duration,
}

impl HcaConfig {
    /// A device on `ip`, UDP 4791, link MTU 1500 (active MTU 1024 like rxe), with a
    /// link-local GID at index 0 and the IP GID at index 1 (rxe's layout).
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
            retry_cnt_7_is_infinite: true,
            first_qpn: FIRST_QPN,
            ack_defer: std::time::Duration::ZERO,
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
    /// Device capability flags (rxe's set).
    pub device_cap_flags: u32,
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

/// An affiliated or unaffiliated asynchronous event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: EventType,
    /// To what.
    pub element: EventElement,
}

/// The object an async event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventElement {
    /// A CQ.
    Cq(CqHandle),
    /// A QP.
    Qp(QpHandle),
    /// An SRQ.
    Srq(SrqHandle),
    /// A port (1-based).
    Port(u8),
    /// The device itself.
    Device,
}

/// What the driver must react to, polled with [`Hca::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HcaEvent {
    /// A completion event was queued on this channel: make its fd readable.
    CompletionEvent(ChannelHandle),
    /// An async event was queued: make the async fd readable.
    AsyncEventQueued,
}

/// Keys of a registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// One emulated HCA, as a sans-IO state machine.
///
/// Methods come in four kinds (the quinn-proto taxonomy):
/// - **A. Getters** (`&self`): [`Hca::query_device`], [`Hca::query_port`], [`Hca::query_qp`],
///   [`Hca::counters`] …
/// - **B. Inputs from the network or the clock**, named `handle_*`:
///   [`Hca::handle_datagram`], [`Hca::handle_timeout`].
/// - **C. Verbs**, the application's commands: `create_*`, `destroy_*`, `modify_qp`,
///   `post_send`, `post_recv`, `req_notify_cq`, `ack_*` …
/// - **D. Outputs**, named `poll_*`: [`Hca::poll_transmit`], [`Hca::poll_timeout`],
///   [`Hca::poll_event`], [`Hca::poll_cq`], plus [`Hca::get_cq_event`] and
///   [`Hca::get_async_event`].
///
/// After each B or C call, a driver calls, in this order: `poll_transmit` until it returns
/// `None` (send each datagram), `poll_timeout` (arm one timer), `poll_event` until `None`
/// (signal the completion-channel and async-event fds). Nothing inside reads a clock,
/// touches a socket or spawns a thread; time arrives as the `now` arguments.
#[derive(Debug)]
pub struct Hca {
    pub(crate) config: HcaConfig,
    pub(crate) attr: DeviceAttr,
    pub(crate) port_state: PortState,
    pub(crate) gids: Vec<Gid>,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) pds: Table<Pd>,
    pub(crate) mrs: Table<Mr>,
    pub(crate) mr_by_key: HashMap<u32, MrHandle>,
    pub(crate) ahs: Table<Ah>,
    pub(crate) cqs: Table<Cq>,
    pub(crate) channels: Table<Channel>,
    pub(crate) srqs: Table<Srq>,
    pub(crate) qps: Table<Qp>,
    pub(crate) qp_by_qpn: HashMap<u32, QpHandle>,
    pub(crate) next_qpn: u32,
    pub(crate) async_events: VecDeque<AsyncEvent>,
    pub(crate) device_events_unacked: u32,
    pub(crate) hca_events: VecDeque<HcaEvent>,
    pub(crate) counters: Counters,
    pub(crate) tx_queue: VecDeque<super::transport::OutPacket>,
    pub(crate) active_qps: VecDeque<QpHandle>,
    /// The time of the input being handled (what deferred ACKs are timed from).
    pub(crate) input_time: Option<Instant>,
}

/// The first QPN handed out (rxe starts at 0x11; 0 and 1 are the special QPs).
const FIRST_QPN: u32 = 0x11;

impl Hca {
    /// A new device.
    pub fn new(config: HcaConfig) -> Self {
        let mut gids = Vec::new();
        if let Some(mac) = config.mac {
            gids.push(Gid::link_local_from_mac(mac));
        }
        gids.push(Gid::from_ip(config.ip));
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
            max_qp: 0x10_0000 - FIRST_QPN,
            max_qp_wr: 0x4000,
            device_cap_flags: 0x0122_3C76,
            max_sge: 32,
            max_sge_rd: 32,
            max_cq: 0x10_0000,
            max_cqe: 32767,
            max_mr: 0x7_FFFF,
            max_pd: 0x10_0000,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            atomic_cap: 1,
            max_ah: 32767,
            max_srq: 0xD_FFFF,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            max_inline_data: 256,
            max_msg_sz: 0x80_0000,
            num_comp_vectors: config.num_comp_vectors.max(1),
        };
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        let first_qpn = config.first_qpn.clamp(2, 0xFF_FFFE);
        Self {
            config,
            attr,
            port_state: PortState::Active,
            gids,
            rng,
            pds: Table::default(),
            mrs: Table::default(),
            mr_by_key: HashMap::new(),
            ahs: Table::default(),
            cqs: Table::default(),
            channels: Table::default(),
            srqs: Table::default(),
            qps: Table::default(),
            qp_by_qpn: HashMap::new(),
            next_qpn: first_qpn,
            async_events: VecDeque::new(),
            device_events_unacked: 0,
            hca_events: VecDeque::new(),
            counters: Counters::default(),
            tx_queue: VecDeque::new(),
            active_qps: VecDeque::new(),
            input_time: None,
        }
    }

    // ---- A. getters ---------------------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &HcaConfig {
        &self.config
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> &DeviceAttr {
        &self.attr
    }

    /// `ibv_query_port` (port 1 only).
    pub fn query_port(&self, port: u8) -> VerbsResult<PortAttr> {
        self.check_port("query_port", port)?;
        Ok(PortAttr {
            state: self.port_state,
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.active_mtu(),
            gid_tbl_len: self.gids.len() as u32,
            port_cap_flags: 0x0001_0000,
            max_msg_sz: self.attr.max_msg_sz,
            bad_pkey_cntr: self.counters.bad_pkey as u32,
            qkey_viol_cntr: self.counters.qkey_violation as u32,
            pkey_tbl_len: 1,
            link_layer_ethernet: true,
        })
    }

    /// The active IBTA MTU of the port.
    pub fn active_mtu(&self) -> Mtu {
        Mtu::for_link_mtu(self.config.link_mtu, self.config.ip.is_ipv6()).unwrap_or(Mtu::Mtu256)
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: usize) -> VerbsResult<Gid> {
        self.check_port("query_gid", port)?;
        self.gids.get(index).copied().ok_or_else(|| {
            VerbsError::invalid(
                "query_gid",
                format!("GID index {index} beyond the table of {}", self.gids.len()),
            )
        })
    }

    /// The GID table of port 1.
    pub fn gids(&self) -> &[Gid] {
        &self.gids
    }

    /// Index of the RoCEv2 GID made from the device's IP address.
    pub fn ip_gid_index(&self) -> usize {
        self.gids.len() - 1
    }

    /// `ibv_query_pkey`: the table holds the default P_Key only.
    pub fn query_pkey(&self, port: u8, index: u16) -> VerbsResult<u16> {
        self.check_port("query_pkey", port)?;
        if index != 0 {
            return Err(VerbsError::invalid(
                "query_pkey",
                format!("P_Key index {index} beyond the table of 1"),
            ));
        }
        Ok(0xFFFF)
    }

    /// The address and port this device receives on.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.config.ip, self.config.udp_port)
    }

    /// Counters like rxe's hw_counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
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

    // ---- PD ---------------------------------------------------------------------------

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> VerbsResult<PdHandle> {
        if self.pds.len() >= self.attr.max_pd as usize {
            return Err(VerbsError::no_resources("alloc_pd", "max_pd reached"));
        }
        let (index, generation) = self.pds.insert(Pd::default());
        Ok(PdHandle { index, generation })
    }

    /// `ibv_dealloc_pd`: refused with EBUSY while MRs, AHs, QPs or SRQs use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> VerbsResult<()> {
        let p = self.pd("dealloc_pd", pd)?;
        if p.users > 0 {
            return Err(VerbsError::busy(
                "dealloc_pd",
                format!("{} MRs/AHs/QPs/SRQs still use the PD", p.users),
            ));
        }
        self.pds.remove(pd.index, pd.generation);
        Ok(())
    }

    pub(crate) fn pd(&self, verb: &'static str, pd: PdHandle) -> VerbsResult<&Pd> {
        self.pds
            .get(pd.index, pd.generation)
            .ok_or(VerbsError::StaleHandle {
                verb,
                kind: PdHandle::KIND,
            })
    }

    pub(crate) fn pd_ref(
        &mut self,
        verb: &'static str,
        pd: PdHandle,
        delta: i32,
    ) -> VerbsResult<()> {
        let p = self
            .pds
            .get_mut(pd.index, pd.generation)
            .ok_or(VerbsError::StaleHandle {
                verb,
                kind: PdHandle::KIND,
            })?;
        p.users = p.users.saturating_add_signed(delta);
        Ok(())
    }

    // ---- MR ---------------------------------------------------------------------------

    /// `ibv_reg_mr`: register `len` bytes at `addr` with `access` rights.
    ///
    /// IBTA (and ibv_reg_mr(3)): REMOTE_WRITE or REMOTE_ATOMIC require LOCAL_WRITE.
    /// Keys are unpredictable: random index bits above an 8-bit key byte.
    ///
    /// # Safety
    /// `addr..addr+len` must be memory of this process that stays valid — not freed, not
    /// moved, not unmapped — until [`Hca::dereg_mr`] returns for this region. The device reads
    /// and writes it at any time in between (as an HCA's DMA would), including while the
    /// application accesses it; coordinating those accesses is the application's job, as
    /// with real hardware.
    pub unsafe fn reg_mr(
        &mut self,
        pd: PdHandle,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<(MrHandle, MrKeys)> {
        const VERB: &str = "reg_mr";
        self.pd(VERB, pd)?;
        if access.unknown_bits() != 0 {
            return Err(VerbsError::invalid(
                VERB,
                format!("unknown access bits {:#x}", access.unknown_bits()),
            ));
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::invalid(
                VERB,
                format!("{access} requires IBV_ACCESS_LOCAL_WRITE (IBTA 10.6.3.1)"),
            ));
        }
        if access
            .intersects(AccessFlags::ZERO_BASED | AccessFlags::ON_DEMAND | AccessFlags::MW_BIND)
        {
            return Err(VerbsError::Unsupported {
                verb: VERB,
                what: format!("access flags {access}"),
            });
        }
        if addr.is_null() && len > 0 {
            return Err(VerbsError::invalid(VERB, "null address"));
        }
        if (addr as u64).checked_add(len as u64).is_none() {
            return Err(VerbsError::invalid(VERB, "address range wraps around"));
        }
        if self.mrs.len() >= self.attr.max_mr as usize {
            return Err(VerbsError::no_resources(VERB, "max_mr reached"));
        }
        let key = self.fresh_key();
        let mr = Mr {
            pd,
            addr: addr as u64,
            len: len as u64,
            access,
            lkey: key,
            rkey: key,
            remote_valid: true,
        };
        let (index, generation) = self.mrs.insert(mr);
        let handle = MrHandle { index, generation };
        self.mr_by_key.insert(key, handle);
        self.pd_ref(VERB, pd, 1)?;
        Ok((
            handle,
            MrKeys {
                lkey: key,
                rkey: key,
            },
        ))
    }

    /// A random key not in use: 24 random index bits and an 8-bit key byte, never 0.
    fn fresh_key(&mut self) -> u32 {
        loop {
            let k: u32 = self.rng.r#gen();
            if k != 0 && !self.mr_by_key.contains_key(&k) {
                return k;
            }
        }
    }

    /// `ibv_dereg_mr`. Work requests posted earlier that still reference the region fail
    /// with a protection error when processed; remote accesses with its rkey are refused.
    pub fn dereg_mr(&mut self, mr: MrHandle) -> VerbsResult<()> {
        let m = self
            .mrs
            .remove(mr.index, mr.generation)
            .ok_or(VerbsError::StaleHandle {
                verb: "dereg_mr",
                kind: MrHandle::KIND,
            })?;
        self.mr_by_key.remove(&m.lkey);
        self.pd_ref("dereg_mr", m.pd, -1)?;
        Ok(())
    }

    /// The region a key names, if any.
    pub(crate) fn mr_by_key(&self, key: u32) -> Option<(MrHandle, &Mr)> {
        let h = *self.mr_by_key.get(&key)?;
        self.mrs.get(h.index, h.generation).map(|m| (h, m))
    }

    // ---- AH ---------------------------------------------------------------------------

    /// `ibv_create_ah`. On RoCE an address vector needs a GRH (`is_global`) whose source GID
    /// index exists.
    pub fn create_ah(&mut self, pd: PdHandle, attr: AhAttr) -> VerbsResult<AhHandle> {
        const VERB: &str = "create_ah";
        self.pd(VERB, pd)?;
        self.check_ah_attr(VERB, &attr)?;
        let (index, generation) = self.ahs.insert(Ah { pd, attr });
        self.pd_ref(VERB, pd, 1)?;
        Ok(AhHandle { index, generation })
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
        Ok(())
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> VerbsResult<()> {
        let a = self
            .ahs
            .remove(ah.index, ah.generation)
            .ok_or(VerbsError::StaleHandle {
                verb: "destroy_ah",
                kind: AhHandle::KIND,
            })?;
        self.pd_ref("destroy_ah", a.pd, -1)
    }

    pub(crate) fn ah(&self, verb: &'static str, ah: AhHandle) -> VerbsResult<&Ah> {
        self.ahs
            .get(ah.index, ah.generation)
            .ok_or(VerbsError::StaleHandle {
                verb,
                kind: AhHandle::KIND,
            })
    }

    // ---- async events ----------------------------------------------------------------

    /// Queue an async event and tell the driver.
    pub(crate) fn raise_async(&mut self, event_type: EventType, element: EventElement) {
        self.async_events.push_back(AsyncEvent {
            event_type,
            element,
        });
        self.hca_events.push_back(HcaEvent::AsyncEventQueued);
    }

    /// `ibv_get_async_event` without blocking: the oldest queued event. Each event returned
    /// must be acknowledged with [`Hca::ack_async_event`]; until then the object it names
    /// cannot be destroyed.
    pub fn get_async_event(&mut self) -> VerbsResult<AsyncEvent> {
        let ev = self
            .async_events
            .pop_front()
            .ok_or(VerbsError::WouldBlock {
                verb: "get_async_event",
            })?;
        match ev.element {
            EventElement::Cq(h) => {
                if let Some(c) = self.cqs.get_mut(h.index, h.generation) {
                    c.async_unacked += 1;
                }
            }
            EventElement::Qp(h) => {
                if let Some(q) = self.qps.get_mut(h.index, h.generation) {
                    q.async_unacked += 1;
                }
            }
            EventElement::Srq(h) => {
                if let Some(s) = self.srqs.get_mut(h.index, h.generation) {
                    s.async_unacked += 1;
                }
            }
            EventElement::Port(_) | EventElement::Device => self.device_events_unacked += 1,
        }
        Ok(ev)
    }

    /// Whether an async event is waiting.
    pub fn async_event_pending(&self) -> bool {
        !self.async_events.is_empty()
    }

    /// `ibv_ack_async_event`: acknowledge one event returned by [`Hca::get_async_event`].
    pub fn ack_async_event(&mut self, event: &AsyncEvent) -> VerbsResult<()> {
        const VERB: &str = "ack_async_event";
        let counter = match event.element {
            EventElement::Cq(h) => self
                .cqs
                .get_mut(h.index, h.generation)
                .map(|c| &mut c.async_unacked),
            EventElement::Qp(h) => self
                .qps
                .get_mut(h.index, h.generation)
                .map(|q| &mut q.async_unacked),
            EventElement::Srq(h) => self
                .srqs
                .get_mut(h.index, h.generation)
                .map(|s| &mut s.async_unacked),
            EventElement::Port(_) | EventElement::Device => Some(&mut self.device_events_unacked),
        };
        let Some(counter) = counter else {
            return Err(VerbsError::invalid(
                VERB,
                format!("{} names an object that no longer exists", event.event_type),
            ));
        };
        if *counter == 0 {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "{} was not retrieved or is already acknowledged",
                    event.event_type
                ),
            ));
        }
        *counter -= 1;
        Ok(())
    }

    /// Drop queued (not yet retrieved) events about an object being destroyed.
    pub(crate) fn purge_async(&mut self, element: EventElement) {
        self.async_events.retain(|e| e.element != element);
    }

    /// What the driver must react to next.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<HcaEvent> {
        self.hca_events.pop_front()
    }

    // ---- port / device state ------------------------------------------------------------

    /// Take the port down or up, raising PORT_ERR or PORT_ACTIVE (fault injection and
    /// tests). While down, nothing is sent or received.
    pub fn set_port_active(&mut self, active: bool) {
        let new = if active {
            PortState::Active
        } else {
            PortState::Down
        };
        if new != self.port_state {
            self.port_state = new;
            let ev = if active {
                EventType::PortActive
            } else {
                EventType::PortErr
            };
            self.raise_async(ev, EventElement::Port(1));
        }
    }

    /// A catastrophic device error (fault injection): DEVICE_FATAL is raised and every QP
    /// moves to ERR, flushing its work requests.
    pub fn inject_device_fatal(&mut self) {
        self.raise_async(EventType::DeviceFatal, EventElement::Device);
        let qps: Vec<QpHandle> = self.qp_by_qpn.values().copied().collect();
        for qp in qps {
            self.qp_to_error(qp, None);
        }
    }

    /// Allocate the next QP number (24 bits, skipping numbers in use).
    pub(crate) fn alloc_qpn(&mut self) -> Option<Qpn> {
        for _ in 0..0x10_0000 {
            let n = self.next_qpn;
            self.next_qpn = if n >= 0xFF_FFFE { FIRST_QPN } else { n + 1 };
            if !self.qp_by_qpn.contains_key(&n) {
                return Qpn::new(n);
            }
        }
        None
    }

    // ---- B / D: transport entry points -------------------------------------------------

    /// B: a datagram arrived for this device.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        datagram: super::transport::IncomingDatagram<'_>,
    ) {
        super::transport::handle_datagram(self, now, datagram);
    }

    /// D: the next datagram to send, written into `buf` (cleared first).
    #[must_use]
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
    ) -> Option<super::transport::Transmit> {
        super::transport::poll_transmit(self, now, buf)
    }

    /// D: when [`Hca::handle_timeout`] must next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        super::transport::poll_timeout(self)
    }

    /// B: timers due at or before `now` fire. Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        super::transport::handle_timeout(self, now);
    }
}
