//! The device as the application and the driver see it: [`Hca`] composes the pieces (device
//! identity, object store, completions, events, the transport's outbox, counters) and keeps
//! the public verbs. QP and SRQ verbs are in `qp`.

mod qp;
mod tm;

use std::net::SocketAddr;
use std::time::Instant;

use softroce_wire::mad::MAD_LEN;
use softroce_wire::{Gid, Mtu, Qpn};

use super::counters::Counters;
use super::cq::Completions;
use super::device::{Device, DeviceAttr, HcaConfig, PortAttr, PortState};
use super::error::{VerbsError, VerbsResult};
use super::events::{AsyncEvent, EventElement, Events, HcaEvent};
use super::handles::{
    AhHandle, ChannelHandle, CqHandle, DmHandle, MrHandle, MwHandle, PdHandle, QpHandle,
};
use super::multicast::Multicast;
use super::objects::{Ah, AhAttr, CqModeration, Dm, Mr, Mw};
use super::store::Store;
use super::transport::gsi::{self, Gsi, ReceivedMad};
use super::transport::{self, Engine, IncomingDatagram, Outbox, Timers, Transmit, TransmitToken};
use super::types::{AccessFlags, EventType, MwType, SendFlags, WrOpcode};
use super::wr::{MwBind, SendWr, Sge, WorkCompletion};

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
    device: Device,
    store: Store,
    cqs: Completions,
    events: Events,
    outbox: Outbox,
    timers: Timers,
    counters: Counters,
    gsi: Gsi,
    multicast: Multicast,
    /// The IPv4 IDs each sender numbers its datagrams with (the receive ICRC check).
    ipv4_ids: transport::ipv4_ids::Ipv4Ids,
    /// Signaled send requests posted so far (see [`Hca::signaled_posts`]).
    signaled_posts: u64,
}

impl Hca {
    /// A new device.
    pub fn new(config: HcaConfig) -> Self {
        Self {
            store: Store::new(
                config.first_qpn,
                match config.qpn_slot {
                    Some(slot) => super::device::qpn_slot_range(slot),
                    None => super::device::FIRST_QPN..0xFF_FFFF,
                },
            ),
            cqs: Completions::new(config.clock_epoch),
            device: Device::new(config),
            events: Events::default(),
            outbox: Outbox::default(),
            timers: Timers::default(),
            counters: Counters::default(),
            gsi: Gsi::default(),
            multicast: Multicast::default(),
            ipv4_ids: Default::default(),
            signaled_posts: 0,
        }
    }

    /// How many send requests that generate a completion (`IBV_SEND_SIGNALED`, or any on
    /// a QP with `sq_sig_all`) were posted so far: a driver that holds packets back to
    /// batch them sends such a request's at once, the application waiting for its
    /// completion.
    #[must_use]
    pub fn signaled_posts(&self) -> u64 {
        self.signaled_posts
    }

    /// The transport engine over this device's pieces.
    pub(crate) fn engine(&mut self) -> Engine<'_> {
        Engine {
            device: &self.device,
            store: &mut self.store,
            cqs: &mut self.cqs,
            events: &mut self.events,
            outbox: &mut self.outbox,
            counters: &mut self.counters,
            gsi: &mut self.gsi,
            multicast: &self.multicast,
            timers: &mut self.timers,
            ipv4_ids: &mut self.ipv4_ids,
        }
    }

    // ---- A. getters ---------------------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &HcaConfig {
        self.device.config()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> &DeviceAttr {
        self.device.attr()
    }

    /// `ibv_query_port` (port 1 only).
    pub fn query_port(&self, port: u8) -> VerbsResult<PortAttr> {
        self.device.check_port("query_port", port)?;
        Ok(PortAttr {
            state: self.device.port_state(),
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.active_mtu(),
            gid_tbl_len: self.gids().len() as u32,
            port_cap_flags: 0x0001_0000,
            max_msg_sz: self.device.attr().max_msg_sz,
            bad_pkey_cntr: self.counters.bad_pkey as u32,
            qkey_viol_cntr: self.counters.qkey_violation as u32,
            pkey_tbl_len: 1,
            link_layer_ethernet: true,
        })
    }

    /// The active IBTA MTU of the port.
    pub fn active_mtu(&self) -> Mtu {
        self.device.active_mtu()
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: usize) -> VerbsResult<Gid> {
        self.device.check_port("query_gid", port)?;
        let gids = self.gids();
        gids.get(index).copied().ok_or_else(|| {
            VerbsError::invalid(
                "query_gid",
                format!("GID index {index} beyond the table of {}", gids.len()),
            )
        })
    }

    /// The GID table of port 1.
    pub fn gids(&self) -> &[Gid] {
        self.device.gids()
    }

    /// Index of the RoCEv2 GID made from the device's IP address.
    pub fn ip_gid_index(&self) -> usize {
        self.gids().len() - 1
    }

    /// `ibv_query_pkey`: the table holds the default P_Key only.
    pub fn query_pkey(&self, port: u8, index: u16) -> VerbsResult<u16> {
        self.device.check_port("query_pkey", port)?;
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
        self.device.local_addr()
    }

    /// QPs that exist (leak checks; `ibv_query_device`'s `max_qp` bounds it).
    pub fn qp_count(&self) -> usize {
        self.store.count::<QpHandle>()
    }

    /// Counters like rxe's hw_counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    // ---- PD ---------------------------------------------------------------------------

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> VerbsResult<PdHandle> {
        if self.store.count::<PdHandle>() >= self.device.attr().max_pd as usize {
            return Err(VerbsError::no_resources("alloc_pd", "max_pd reached"));
        }
        Ok(self.store.insert_pd())
    }

    /// `ibv_dealloc_pd`: refused with EBUSY while MRs, MWs, AHs, QPs or SRQs use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> VerbsResult<()> {
        const VERB: &str = "dealloc_pd";
        let p = self.store.lookup(VERB, pd)?;
        if p.users > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{} MRs/MWs/AHs/QPs/SRQs still use the PD", p.users),
            ));
        }
        self.store.remove_pd(VERB, pd)?;
        Ok(())
    }

    /// `ibv_alloc_parent_domain` over `pd`: the parent domain names the same PD
    /// (ibv_alloc_parent_domain(3): "completely interchangeable" with it) and counts as one
    /// of its users, so the PD is not deallocated under it.
    pub fn alloc_parent_domain(&mut self, pd: PdHandle) -> VerbsResult<()> {
        self.store.add_pd_users("alloc_parent_domain", pd, 1)
    }

    /// `ibv_dealloc_pd` of a parent domain over `pd`.
    pub fn dealloc_parent_domain(&mut self, pd: PdHandle) -> VerbsResult<()> {
        self.store.add_pd_users("dealloc_pd", pd, -1)
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
        self.store.lookup(VERB, pd)?;
        Self::check_registration(VERB, addr, len, access)?;
        let (handle, key) = self.insert_region(VERB, pd, |key| Mr {
            pd,
            addr: addr as u64,
            len: len as u64,
            iova: Self::default_iova(addr as u64, access),
            access,
            lkey: key,
            rkey: key,
            remote_valid: true,
            windows: 0,
            dm: None,
            null: false,
        })?;
        Ok((
            handle,
            MrKeys {
                lkey: key,
                rkey: key,
            },
        ))
    }

    /// A new region of `pd` under a fresh key (`max_mr` permitting), built by `region`
    /// from the key; the PD counts it as a user.
    fn insert_region(
        &mut self,
        verb: &'static str,
        pd: PdHandle,
        region: impl FnOnce(u32) -> Mr,
    ) -> VerbsResult<(MrHandle, u32)> {
        if self.store.count::<MrHandle>() >= self.device.attr().max_mr as usize {
            return Err(VerbsError::no_resources(verb, "max_mr reached"));
        }
        let store = &self.store;
        let key = self.device.draw_key(|k| store.key_in_use(k));
        let handle = self.store.insert_mr(region(key));
        self.store.add_pd_users(verb, pd, 1)?;
        Ok((handle, key))
    }

    /// `ibv_alloc_null_mr` (ibv_alloc_null_mr(3)): a region of `pd` with the maximum length
    /// that reads as zeros and discards what is written to it, for gather and scatter lists
    /// whose data nobody needs. Only its lkey is valid: the keys returned carry rkey 0, and
    /// a peer naming its key is refused as an unknown key. It counts toward `max_mr` and
    /// keeps `pd` busy; it cannot be re-registered, nor can a window bind to it.
    pub fn alloc_null_mr(&mut self, pd: PdHandle) -> VerbsResult<(MrHandle, MrKeys)> {
        const VERB: &str = "alloc_null_mr";
        self.store.lookup(VERB, pd)?;
        let (handle, key) = self.insert_region(VERB, pd, |key| Mr {
            pd,
            addr: 0,
            len: u64::MAX,
            iova: 0,
            // Written to by receives and READ responses (their data discarded); no remote
            // right and no MW_BIND.
            access: AccessFlags::LOCAL_WRITE,
            lkey: key,
            rkey: key,
            remote_valid: false,
            windows: 0,
            dm: None,
            null: true,
        })?;
        Ok((handle, MrKeys { lkey: key, rkey: 0 }))
    }

    /// `ibv_rereg_mr`: change the region's PD, range (`addr`, `len`) and/or access, each
    /// when given, as a deregistration and registration would (ibv_rereg_mr(3)), keeping
    /// its keys. Refused with EBUSY while a memory window is bound to it (ibv_dereg_mr
    /// would be); on any error the region is unchanged.
    ///
    /// # Safety
    /// A new range is memory of this process under the contract of [`Hca::reg_mr`]; the old
    /// one is no longer accessed once this returns.
    pub unsafe fn rereg_mr(
        &mut self,
        mr: MrHandle,
        pd: Option<PdHandle>,
        range: Option<(*mut u8, usize)>,
        access: Option<AccessFlags>,
    ) -> VerbsResult<MrKeys> {
        const VERB: &str = "rereg_mr";
        let m = self.store.lookup(VERB, mr)?;
        if m.windows > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{} memory windows are bound to the region", m.windows),
            ));
        }
        if m.null {
            return Err(VerbsError::invalid(
                VERB,
                "a null MR cannot be re-registered (ibv_alloc_null_mr(3))",
            ));
        }
        if m.dm.is_some() && range.is_some() {
            return Err(VerbsError::invalid(
                VERB,
                "a device memory region's translation is its device memory",
            ));
        }
        let old_pd = m.pd;
        let new_pd = pd.unwrap_or(old_pd);
        let (addr, len) = range.unwrap_or((m.addr as *mut u8, m.len as usize));
        let access = access.unwrap_or(m.access);
        self.store.lookup(VERB, new_pd)?;
        Self::check_registration(VERB, addr, len, access)?;
        let m = self.store.lookup_mut(VERB, mr)?;
        m.pd = new_pd;
        let zero_based = AccessFlags::ZERO_BASED;
        if range.is_some() || m.access.contains(zero_based) != access.contains(zero_based) {
            // A new translation is addressed by its address (or from 0), as a new
            // registration would be.
            m.iova = Self::default_iova(addr as u64, access);
        }
        m.addr = addr as u64;
        m.len = len as u64;
        m.access = access;
        let keys = MrKeys {
            lkey: m.lkey,
            rkey: m.rkey,
        };
        if new_pd != old_pd {
            self.store.add_pd_users(VERB, old_pd, -1)?;
            self.store.add_pd_users(VERB, new_pd, 1)?;
        }
        Ok(keys)
    }

    /// `ibv_advise_mr` (ibv_advise_mr(3)): `advice` 0 (PREFETCH), 1 (PREFETCH_WRITE) or 2
    /// (PREFETCH_NO_FAULT), `flags` 0 or IBV_ADVISE_MR_FLAG_FLUSH (1), over ranges of ODP
    /// regions of `pd`. Nothing needs paging in (every region's pages were checked at
    /// registration), so a valid advice succeeds at once, synchronous or not.
    pub fn advise_mr(
        &self,
        pd: PdHandle,
        advice: u32,
        flags: u32,
        sges: &[Sge],
    ) -> VerbsResult<()> {
        const VERB: &str = "advise_mr";
        self.store.lookup(VERB, pd)?;
        if advice > 2 {
            return Err(VerbsError::Unsupported {
                verb: VERB,
                what: format!("advice {advice}"),
            });
        }
        if flags & !1 != 0 || sges.is_empty() {
            return Err(VerbsError::invalid(
                VERB,
                format!("flags {flags:#x} (only IBV_ADVISE_MR_FLAG_FLUSH) or no SGE"),
            ));
        }
        for (i, sge) in sges.iter().enumerate() {
            let Some(mr) = self.store.mr_by_key(sge.lkey) else {
                return Err(VerbsError::BadAddress {
                    verb: VERB,
                    reason: format!("sge[{i}]: lkey {:#x} names no region", sge.lkey),
                });
            };
            if mr.pd != pd {
                return Err(VerbsError::NotPermitted {
                    verb: VERB,
                    reason: format!("sge[{i}]: the region belongs to another PD"),
                });
            }
            if !mr.access.contains(AccessFlags::ON_DEMAND) {
                return Err(VerbsError::invalid(
                    VERB,
                    format!("sge[{i}]: not an on-demand paging region"),
                ));
            }
            if !mr.contains(sge.addr, u64::from(sge.length)) {
                return Err(VerbsError::BadAddress {
                    verb: VERB,
                    reason: format!("sge[{i}]: range outside the region"),
                });
            }
            if advice == 1 && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
                return Err(VerbsError::NotPermitted {
                    verb: VERB,
                    reason: format!("sge[{i}]: PREFETCH_WRITE of a region without local write"),
                });
            }
        }
        Ok(())
    }

    /// The iova a registration gets (ibv_reg_mr(3)): 0 for `IBV_ACCESS_ZERO_BASED` (keys
    /// address byte offsets), else the region's address.
    fn default_iova(addr: u64, access: AccessFlags) -> u64 {
        if access.contains(AccessFlags::ZERO_BASED) {
            0
        } else {
            addr
        }
    }

    /// `ibv_reg_mr_iova`: let the region's keys address it from `iova` ("the offset in the
    /// memory region is computed as addr + (iova - hca_va)", ibv_reg_mr(3)). Refused while
    /// a window is bound (its range was fixed in the old addressing).
    pub fn set_mr_iova(&mut self, mr: MrHandle, iova: u64) -> VerbsResult<()> {
        const VERB: &str = "reg_mr_iova";
        let m = self.store.lookup_mut(VERB, mr)?;
        if m.windows > 0 {
            return Err(VerbsError::busy(
                VERB,
                "memory windows are bound to the region",
            ));
        }
        if iova.checked_add(m.len).is_none() {
            return Err(VerbsError::invalid(
                VERB,
                format!("iova {iova:#x} + {} wraps around", m.len),
            ));
        }
        // As the kernel's ib_uverbs_reg_mr: the HCA maps pages, so iova and address must
        // sit at the same offset in their pages.
        const PAGE: u64 = 4096;
        if (iova ^ m.addr) % PAGE != 0 {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "iova {iova:#x} and address {:#x} lie at different offsets in their pages",
                    m.addr
                ),
            ));
        }
        m.iova = iova;
        Ok(())
    }

    /// A region's registration: address, length and access.
    pub fn mr_registration(&self, mr: MrHandle) -> VerbsResult<(u64, usize, AccessFlags)> {
        let m = self.store.lookup("query_mr", mr)?;
        Ok((m.addr, m.len as usize, m.access))
    }

    /// An implicit on-demand paging registration: the whole address space.
    pub fn is_implicit_odp(addr: *mut u8, len: usize, access: AccessFlags) -> bool {
        access.contains(AccessFlags::ON_DEMAND) && addr.is_null() && len == usize::MAX
    }

    /// The checks a registration's range and access must pass (ibv_reg_mr(3)).
    fn check_registration(
        verb: &'static str,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<()> {
        if access.unknown_bits() != 0 {
            return Err(VerbsError::invalid(
                verb,
                format!("unknown access bits {:#x}", access.unknown_bits()),
            ));
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::invalid(
                verb,
                format!("{access} requires IBV_ACCESS_LOCAL_WRITE (IBTA 10.6.3.1)"),
            ));
        }
        if Self::is_implicit_odp(addr, len, access) {
            // ibv_reg_mr(3): "To create an implicit ODP MR, IBV_ACCESS_ON_DEMAND should be
            // set, addr should be 0 and length should be SIZE_MAX."
            if !crate::memory::fault_safe() {
                return Err(VerbsError::invalid(
                    verb,
                    "implicit on-demand paging needs copies that survive unmapped pages, \
                     which this platform lacks (IBV_ODP_SUPPORT_IMPLICIT is not reported)",
                ));
            }
            if access.contains(AccessFlags::ZERO_BASED) {
                return Err(VerbsError::invalid(
                    verb,
                    "an implicit ODP region spans the address space: it cannot be zero-based",
                ));
            }
            return Ok(());
        }
        if addr.is_null() && len > 0 {
            // EFAULT, as the kernel's ib_umem_get finds page 0 unmapped.
            return Err(VerbsError::BadAddress {
                verb,
                reason: "address 0 is not mapped".into(),
            });
        }
        if (addr as u64).checked_add(len as u64).is_none() {
            return Err(VerbsError::invalid(verb, "address range wraps around"));
        }
        Ok(())
    }

    /// `ibv_dereg_mr`. Work requests posted earlier that still reference the region fail
    /// with a protection error when processed; remote accesses with its rkey are refused.
    pub fn dereg_mr(&mut self, mr: MrHandle) -> VerbsResult<()> {
        const VERB: &str = "dereg_mr";
        let windows = self.store.lookup(VERB, mr)?.windows;
        if windows > 0 {
            // EINVAL as rxe's rxe_dereg_mr (ibv_alloc_mw(3) names no errno).
            return Err(VerbsError::invalid(
                VERB,
                format!("{windows} memory windows are still bound to the region (ibv_alloc_mw(3))"),
            ));
        }
        let m = self.store.remove_mr(VERB, mr)?;
        if let Some(dm) = m.dm
            && let Some(d) = self.store.get_mut(dm)
        {
            d.regions -= 1;
        }
        self.store.add_pd_users(VERB, m.pd, -1)
    }

    // ---- DM ---------------------------------------------------------------------------

    /// `ibv_alloc_dm`: account `len` bytes of device memory (the caller provides them).
    /// ENOMEM beyond what `max_dm_size` leaves (ibv_alloc_dm(3), NOTES); EINVAL for an
    /// empty allocation or an alignment above a page (an allocation is page-aligned at
    /// most, as a BAR mapping is).
    pub fn alloc_dm(&mut self, len: u64, log_align_req: u32) -> VerbsResult<DmHandle> {
        const VERB: &str = "alloc_dm";
        if len == 0 {
            return Err(VerbsError::invalid(VERB, "length is 0"));
        }
        if log_align_req > 12 {
            return Err(VerbsError::invalid(
                VERB,
                format!("log_align_req {log_align_req}: alignment above 4096 bytes"),
            ));
        }
        let max = self.device.attr().max_dm_size;
        let in_use = self.store.dm_in_use();
        if len > max - in_use.min(max) {
            return Err(VerbsError::no_resources(
                VERB,
                format!(
                    "{len} bytes of device memory asked, {} of max_dm_size {max} free",
                    max - in_use.min(max)
                ),
            ));
        }
        Ok(self.store.insert_dm(Dm { len, regions: 0 }))
    }

    /// `ibv_free_dm`: EBUSY while a region covers it (ibv_alloc_dm(3), NOTES).
    pub fn free_dm(&mut self, dm: DmHandle) -> VerbsResult<()> {
        const VERB: &str = "free_dm";
        let regions = self.store.lookup(VERB, dm)?.regions;
        if regions > 0 {
            return Err(VerbsError::busy(
                VERB,
                format!("{regions} memory regions are registered over the device memory"),
            ));
        }
        self.store.remove_dm(VERB, dm).map(drop)
    }

    /// `ibv_reg_dm_mr`'s checks before the region is registered: the range lies inside the
    /// allocation and the access is zero-based, as the man page requires (ibv_alloc_dm(3),
    /// "Device memory registration").
    pub fn check_dm_range(
        &self,
        dm: DmHandle,
        offset: u64,
        len: u64,
        access: AccessFlags,
    ) -> VerbsResult<()> {
        const VERB: &str = "reg_dm_mr";
        let d = self.store.lookup(VERB, dm)?;
        if !access.contains(AccessFlags::ZERO_BASED) {
            return Err(VerbsError::invalid(
                VERB,
                "a device memory region must be registered with IBV_ACCESS_ZERO_BASED",
            ));
        }
        if offset.checked_add(len).is_none_or(|end| end > d.len) {
            return Err(VerbsError::invalid(
                VERB,
                format!(
                    "offset {offset} + length {len} exceeds the device memory's {} bytes",
                    d.len
                ),
            ));
        }
        Ok(())
    }

    /// Record that region `mr`, registered over part of `dm`, covers it: `dm` cannot be
    /// freed until the region is deregistered.
    pub fn tie_mr_to_dm(&mut self, mr: MrHandle, dm: DmHandle) -> VerbsResult<()> {
        const VERB: &str = "reg_dm_mr";
        self.store.lookup(VERB, dm)?;
        let m = self.store.lookup_mut(VERB, mr)?;
        if m.dm.is_some() {
            return Err(VerbsError::invalid(
                VERB,
                "the region already covers device memory",
            ));
        }
        m.dm = Some(dm);
        self.store.lookup_mut(VERB, dm)?.regions += 1;
        Ok(())
    }

    // ---- MW ---------------------------------------------------------------------------

    /// `ibv_alloc_mw`: an unbound window of `mw_type` in `pd`, and its first R_Key.
    pub fn alloc_mw(&mut self, pd: PdHandle, mw_type: MwType) -> VerbsResult<(MwHandle, u32)> {
        const VERB: &str = "alloc_mw";
        self.store.lookup(VERB, pd)?;
        if self.store.count::<MwHandle>() >= self.device.attr().max_mw as usize {
            return Err(VerbsError::no_resources(VERB, "max_mw reached"));
        }
        let store = &self.store;
        let rkey = self.device.draw_key(|k| store.key_index_in_use(k));
        let handle = self.store.insert_mw(Mw {
            pd,
            mw_type,
            rkey,
            binding: None,
        });
        self.store.add_pd_users(VERB, pd, 1)?;
        Ok((handle, rkey))
    }

    /// `ibv_dealloc_mw`: unbinds the window if bound, then frees it (ibv_alloc_mw(3)); its
    /// R_Key opens nothing afterwards.
    pub fn dealloc_mw(&mut self, mw: MwHandle) -> VerbsResult<()> {
        const VERB: &str = "dealloc_mw";
        self.store.lookup(VERB, mw)?;
        self.store.unbind_mw(mw);
        let w = self.store.remove_mw(VERB, mw)?;
        self.store.add_pd_users(VERB, w.pd, -1)
    }

    /// A window's current R_Key.
    pub fn mw_rkey(&self, mw: MwHandle) -> VerbsResult<u32> {
        Ok(self.store.lookup("query_mw", mw)?.rkey)
    }

    /// `ibv_bind_mw`: posts the bind of type-1 window `bind.mw` to `qp`'s send queue as a
    /// work request (`wr_id`, `send_flags`: FENCE, SIGNALED); the bind happens, and
    /// completes, in the queue's order. Type 2 windows are bound by posting
    /// `IBV_WR_BIND_MW` (ibv_bind_mw(3), NOTES): EINVAL here.
    pub fn bind_mw(
        &mut self,
        qp: QpHandle,
        wr_id: u64,
        send_flags: SendFlags,
        bind: MwBind,
    ) -> VerbsResult<()> {
        const VERB: &str = "bind_mw";
        let w = self.store.lookup(VERB, bind.mw)?;
        if w.mw_type != MwType::Type1 {
            return Err(VerbsError::invalid(
                VERB,
                "a type 2 window is bound by posting IBV_WR_BIND_MW (ibv_bind_mw(3))",
            ));
        }
        let mut wr = SendWr::new(wr_id, WrOpcode::BindMw);
        wr.send_flags = send_flags;
        wr.bind = Some(Box::new(bind));
        // SAFETY: a bind work request has no scatter/gather list, inline or not.
        unsafe { self.post_send(qp, std::slice::from_ref(&wr)) }.map_err(|e| e.error)
    }

    // ---- AH ---------------------------------------------------------------------------

    /// `ibv_create_ah`. On RoCE an address vector needs a GRH (`is_global`) whose source GID
    /// index exists.
    pub fn create_ah(&mut self, pd: PdHandle, attr: AhAttr) -> VerbsResult<AhHandle> {
        const VERB: &str = "create_ah";
        self.store.lookup(VERB, pd)?;
        self.device.check_ah_attr(VERB, &attr)?;
        // The advertised limit holds (rxe's AH pool is capped at it too).
        if self.store.count::<AhHandle>() >= self.device.attr().max_ah as usize {
            return Err(VerbsError::no_resources(VERB, "max_ah reached"));
        }
        let handle = self.store.insert_ah(Ah { pd, attr });
        self.store.add_pd_users(VERB, pd, 1)?;
        Ok(handle)
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> VerbsResult<()> {
        const VERB: &str = "destroy_ah";
        let a = self.store.remove_ah(VERB, ah)?;
        self.store.add_pd_users(VERB, a.pd, -1)
    }

    // ---- CQ and completion channel ------------------------------------------------------

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&mut self) -> ChannelHandle {
        self.cqs.create_channel()
    }

    /// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
    pub fn destroy_comp_channel(&mut self, ch: ChannelHandle) -> VerbsResult<()> {
        self.cqs.destroy_channel(ch)
    }

    /// `ibv_create_cq`: at least `cqe` entries. The real size (reported to the caller) is the
    /// next power of two minus one, as rxe's queues are sized.
    pub fn create_cq(
        &mut self,
        cqe: u32,
        channel: Option<ChannelHandle>,
        comp_vector: u32,
        context: u64,
    ) -> VerbsResult<(CqHandle, u32)> {
        self.cqs
            .create(self.device.attr(), cqe, channel, comp_vector, context)
    }

    /// Fault injection: make `cq` overrun once it holds `depth` completions (`None`: at its
    /// real capacity again), to produce IBV_EVENT_CQ_ERR on demand.
    pub fn limit_cq_depth(&mut self, cq: CqHandle, depth: Option<u32>) -> VerbsResult<()> {
        self.cqs.lookup_mut("limit_cq_depth", cq)?.depth_limit = depth;
        Ok(())
    }

    /// Entries the CQ holds at most (`ibv_cq.cqe`).
    pub fn cq_capacity(&self, cq: CqHandle) -> VerbsResult<u32> {
        Ok(self.cqs.lookup("cq_capacity", cq)?.capacity)
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqHandle) -> VerbsResult<usize> {
        Ok(self.cqs.lookup("cq_len", cq)?.entries.len())
    }

    /// `ibv_resize_cq`: cannot shrink below the completions it holds.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> VerbsResult<u32> {
        self.cqs.resize(cq, cqe, self.device.attr().max_cqe)
    }

    /// `ibv_modify_cq` with IBV_CQ_ATTR_MODERATE (ibv_modify_cq(3)): once armed, the CQ's
    /// completion event waits for `count` completions or for `period_us` microseconds after
    /// the first of them, whichever comes first (a zero leaves its condition out; both zero
    /// turn moderation off). EINVAL beyond the device's `max_cq_moderation_period`.
    pub fn modify_cq_moderation(
        &mut self,
        cq: CqHandle,
        count: u16,
        period_us: u16,
    ) -> VerbsResult<()> {
        let max_period = self.device.attr().max_cq_moderation_period;
        self.cqs.moderate(
            &mut self.events,
            cq,
            CqModeration { count, period_us },
            max_period,
        )
    }

    /// `ibv_destroy_cq`: EBUSY while QPs or SRQs use the CQ, or while completion events
    /// retrieved from its channel are unacknowledged, or while its async events are
    /// unacknowledged. Events queued but never retrieved are discarded.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> VerbsResult<()> {
        self.cqs.destroy(&mut self.events, cq)?;
        self.events.purge(EventElement::Cq(cq));
        Ok(())
    }

    /// `ibv_req_notify_cq`: arm the CQ for one completion event: the next completion, or with
    /// `solicited_only` the next solicited or error completion.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> VerbsResult<()> {
        self.cqs.req_notify(cq, solicited_only)
    }

    /// `ibv_poll_cq`: move up to `out.len()` completions into `out`, oldest first.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> VerbsResult<usize> {
        self.cqs.poll(cq, out)
    }

    /// `ibv_get_cq_event` without blocking: the CQ (and its context) of the oldest event on
    /// the channel, or EAGAIN. Each event must be acknowledged with [`Hca::ack_cq_events`].
    pub fn get_cq_event(&mut self, ch: ChannelHandle) -> VerbsResult<(CqHandle, u64)> {
        self.cqs.take_event(ch)
    }

    /// Events waiting on a channel (what its fd's readiness reflects).
    pub fn channel_pending(&self, ch: ChannelHandle) -> VerbsResult<usize> {
        self.cqs.channel_pending(ch)
    }

    /// `ibv_ack_cq_events`: acknowledge `n` events retrieved for `cq`.
    pub fn ack_cq_events(&mut self, cq: CqHandle, n: u32) -> VerbsResult<()> {
        self.cqs.ack_events(cq, n)
    }

    // ---- async events ----------------------------------------------------------------

    /// `ibv_get_async_event` without blocking: the oldest queued event. Each event returned
    /// must be acknowledged with [`Hca::ack_async_event`]; until then the object it names
    /// cannot be destroyed.
    pub fn get_async_event(&mut self) -> VerbsResult<AsyncEvent> {
        let ev = self.events.take_async().ok_or(VerbsError::WouldBlock {
            verb: "get_async_event",
        })?;
        if let Some(unacked) = self.async_unacked(ev.element) {
            *unacked += 1;
        }
        Ok(ev)
    }

    /// Whether an async event is waiting.
    pub fn async_event_pending(&self) -> bool {
        self.events.async_pending()
    }

    /// `ibv_ack_async_event`: acknowledge one event returned by [`Hca::get_async_event`].
    pub fn ack_async_event(&mut self, event: &AsyncEvent) -> VerbsResult<()> {
        const VERB: &str = "ack_async_event";
        let Some(counter) = self.async_unacked(event.element) else {
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

    /// Forget the events about `element` retrieved and never acknowledged (a CQ's
    /// completion events too), so that it can be destroyed: what closing the context that
    /// made it does (the kernel's uverbs file release destroys its objects regardless).
    pub fn forget_unacknowledged(&mut self, element: EventElement) {
        if let Some(unacked) = self.async_unacked(element) {
            *unacked = 0;
        }
        if let EventElement::Cq(h) = element
            && let Some(c) = self.cqs.get_mut(h)
        {
            c.events_unacked = 0;
        }
    }

    /// The count of retrieved, unacknowledged async events about `element` (`None`: the
    /// object no longer exists). Port and device events are counted by [`Events`]; the
    /// others on their objects, which cannot be destroyed while it is non-zero.
    fn async_unacked(&mut self, element: EventElement) -> Option<&mut u32> {
        match element {
            EventElement::Cq(h) => self.cqs.get_mut(h).map(|c| &mut c.async_unacked),
            EventElement::Qp(h) => self.store.get_mut(h).map(|q| &mut q.async_unacked),
            EventElement::Srq(h) => self.store.get_mut(h).map(|s| &mut s.async_unacked),
            EventElement::Port(_) | EventElement::Device => Some(self.events.device_unacked_mut()),
        }
    }

    /// What the driver must react to next.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<HcaEvent> {
        self.events.poll()
    }

    // ---- port / device state ------------------------------------------------------------

    /// Take the port down or up, raising PORT_ERR or PORT_ACTIVE (fault injection and
    /// tests). While down, nothing is sent or received.
    pub fn set_port_active(&mut self, active: bool) {
        let (state, event) = if active {
            (PortState::Active, EventType::PortActive)
        } else {
            (PortState::Down, EventType::PortErr)
        };
        if self.device.set_port_state(state) {
            self.events.raise(event, EventElement::Port(1));
        }
    }

    /// A catastrophic device error (fault injection): DEVICE_FATAL is raised and every QP
    /// moves to ERR, flushing its work requests.
    pub fn inject_device_fatal(&mut self) {
        self.events
            .raise(EventType::DeviceFatal, EventElement::Device);
        let qps: Vec<QpHandle> = self.store.qp_handles().collect();
        let mut engine = self.engine();
        for qp in qps {
            engine.qp_to_error(qp, None);
        }
    }

    // ---- B / D: transport entry points -------------------------------------------------

    /// B: a datagram arrived for this device.
    pub fn handle_datagram(&mut self, now: Instant, datagram: IncomingDatagram<'_>) {
        self.advance_clock(now);
        transport::handle_datagram(&mut self.engine(), now, datagram);
    }

    /// D: the next datagram to send, in `buf` (whose old contents are gone; its allocation
    /// may be kept for a later packet).
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.advance_clock(now);
        transport::poll_transmit(&mut self.engine(), now, buf)
    }

    /// B: the host sent the packet [`Hca::poll_transmit`] gave with `token` (see
    /// [`HcaConfig::transmit_feedback`]): a UC/UD request whose last packet it was
    /// completes.
    pub fn handle_sent(&mut self, now: Instant, token: TransmitToken) {
        self.advance_clock(now);
        transport::on_sent(&mut self.engine(), token);
    }

    /// B: the host refused to send a packet [`Hca::poll_transmit`] gave (the socket call
    /// failed). Counted as rxe counts it (`send_err`, and not in `sent_pkts`); with its
    /// `token`, the UC/UD request it belongs to completes with IBV_WC_LOC_QP_OP_ERR (rxe's
    /// status for a failed transmit) and the QP enters SQE. Without one (RC, responses)
    /// only counted: RC sends it again when its retransmit timer fires.
    pub fn handle_send_failure(&mut self, now: Instant, token: Option<TransmitToken>) {
        self.advance_clock(now);
        transport::on_send_failure(&mut self.engine(), token);
    }

    /// Bytes of packets built and waiting for [`Hca::poll_transmit`]. Packets are built a
    /// bounded batch at a time (a READ of any length included), so this stays small.
    #[must_use]
    pub fn transmit_backlog(&self) -> usize {
        self.outbox.queued_bytes()
    }

    /// D: when [`Hca::handle_timeout`] must next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let transport = transport::poll_timeout(&self.timers);
        match (transport, self.cqs.next_moderation_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// B: timers due at or before `now` fire. Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance_clock(now);
        transport::handle_timeout(&mut self.engine(), now);
        self.cqs.handle_moderation_timeout(&mut self.events, now);
    }

    /// B: time has come to `now` without a datagram or timer: a driver calls this before
    /// verbs that may complete work (a flush, a local operation) so their completions carry
    /// the time they happen, and before reading [`Hca::clock`]. An earlier `now` than one
    /// already seen is ignored: the clock never goes back.
    pub fn advance_clock(&mut self, now: Instant) {
        self.cqs.clock.advance(now);
    }

    /// The device clock (`ibv_query_rt_values_ex`'s raw clock), as of the latest `now`
    /// given: nanoseconds since [`HcaConfig::clock_epoch`] (or the first `now` when that is
    /// `None`), so it ticks at [`DeviceAttr::hca_core_clock`] kHz. Completions are stamped
    /// with it when generated ([`WorkCompletion::completion_ts`]).
    #[must_use]
    pub fn clock(&self) -> u64 {
        self.cqs.clock.ns()
    }

    // ---- QP1 (GSI): management datagrams -------------------------------------------

    /// D: the oldest MAD received on QP1 (UD SEND_ONLY with Q_Key 0x80010000, checked as
    /// rxe checks GSI packets), for the management layer above (the CM). At most
    /// [`gsi::GSI_RX_QUEUE_LEN`] wait; more are dropped and counted (`mad_rx_overflow`).
    pub fn poll_mad(&mut self) -> Option<ReceivedMad> {
        self.gsi.poll()
    }

    /// Whether [`Hca::poll_mad`] has a MAD to give (the management layer has work).
    #[must_use]
    pub fn has_mads(&self) -> bool {
        !self.gsi.is_empty()
    }

    /// B: every ACK held back for a QP's next packet (`HcaConfig::ack_defer`) goes now. A
    /// driver calls this when its application turns to connection management: it is not
    /// about to answer on its QPs, and its peer may be waiting for those ACKs to complete
    /// the work it will act on next (perftest's `-R` handshake, then its listen).
    pub fn send_held_acks(&mut self) {
        self.engine().flush_held_acks();
    }

    /// C: send `mad` from QP1 to QP `remote_qpn` (1 for a peer's GSI agent) at `dst`, as
    /// the kernel's MAD layer does through rxe (see [`gsi`]). It leaves with the next
    /// `poll_transmit`, like every other packet; nothing is sent while the port is down.
    pub fn send_mad(&mut self, dst: SocketAddr, remote_qpn: Qpn, mad: &[u8; MAD_LEN]) {
        gsi::send(&mut self.engine(), dst, remote_qpn, mad);
    }
}
