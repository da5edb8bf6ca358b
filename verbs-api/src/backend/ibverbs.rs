//! The hardware backend: the system's `libibverbs.so.1`, loaded at run time with
//! `libloading` (nothing from rdma-core is needed to build), driving whatever device it
//! finds — a RoCE NIC, Linux `rdma_rxe`, `siw`.
//!
//! The object tokens ([`PdHandle`] and friends) carry the C object pointers. Calls the
//! header makes inline (`ibv_post_send`, `ibv_poll_cq`, …) go through the context's `ops`
//! table exactly as `<infiniband/verbs.h>` compiles them. Struct mirrors follow rdma-core's
//! public, append-only ABI (x86_64 layouts checked at compile time below).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::RawFd;
use std::ptr;
use std::time::Duration;

use libloading::Library;
use softroce_emu::core::{
    AccessFlags, AhAttr, AhHandle, AsyncEvent, ChannelHandle, CqHandle, DeviceAttr, EventElement,
    EventType, MrHandle, MrKeys, PdHandle, PortAttr, PortState, QpAttr, QpAttrMask, QpHandle,
    QpInitAttr, QpState, RecvWr, SendWr, SrqAttr, SrqAttrMask, SrqHandle, WcFlags, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};
use softroce_ibverbs_abi as sys;
use softroce_wire::{Gid, Mtu, Qpn};

use super::{Backend, BackendKind};
use crate::error::{Error, Result};

type PostRecvFn<T> =
    unsafe extern "C" fn(*mut T, *mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> c_int;

/// The libibverbs entry points this backend calls, resolved once.
struct Fns {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void,
    free_device_list: unsafe extern "C" fn(*mut *mut c_void),
    get_device_name: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    open_device: unsafe extern "C" fn(*mut c_void) -> *mut sys::ibv_context,
    close_device: unsafe extern "C" fn(*mut sys::ibv_context) -> c_int,
    query_device: unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_device_attr) -> c_int,
    query_port: unsafe extern "C" fn(*mut sys::ibv_context, u8, *mut sys::ibv_port_attr) -> c_int,
    query_gid: unsafe extern "C" fn(*mut sys::ibv_context, u8, c_int, *mut [u8; 16]) -> c_int,
    query_gid_ex: Option<
        unsafe extern "C" fn(
            *mut sys::ibv_context,
            u32,
            u32,
            *mut sys::ibv_gid_entry,
            u32,
            usize,
        ) -> c_int,
    >,
    alloc_pd: unsafe extern "C" fn(*mut sys::ibv_context) -> *mut c_void,
    dealloc_pd: unsafe extern "C" fn(*mut c_void) -> c_int,
    reg_mr: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut sys::ibv_mr,
    dereg_mr: unsafe extern "C" fn(*mut sys::ibv_mr) -> c_int,
    create_comp_channel: unsafe extern "C" fn(*mut sys::ibv_context) -> *mut sys::ibv_comp_channel,
    destroy_comp_channel: unsafe extern "C" fn(*mut sys::ibv_comp_channel) -> c_int,
    get_cq_event: unsafe extern "C" fn(
        *mut sys::ibv_comp_channel,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> c_int,
    ack_cq_events: unsafe extern "C" fn(*mut c_void, u32),
    create_cq: unsafe extern "C" fn(
        *mut sys::ibv_context,
        c_int,
        *mut c_void,
        *mut sys::ibv_comp_channel,
        c_int,
    ) -> *mut c_void,
    destroy_cq: unsafe extern "C" fn(*mut c_void) -> c_int,
    create_srq: unsafe extern "C" fn(*mut c_void, *mut sys::ibv_srq_init_attr) -> *mut c_void,
    modify_srq: unsafe extern "C" fn(*mut c_void, *mut sys::ibv_srq_attr, c_int) -> c_int,
    destroy_srq: unsafe extern "C" fn(*mut c_void) -> c_int,
    create_qp: unsafe extern "C" fn(*mut c_void, *mut sys::ibv_qp_init_attr) -> *mut c_void,
    modify_qp: unsafe extern "C" fn(*mut c_void, *mut sys::ibv_qp_attr, c_int) -> c_int,
    query_qp: unsafe extern "C" fn(
        *mut c_void,
        *mut sys::ibv_qp_attr,
        c_int,
        *mut sys::ibv_qp_init_attr,
    ) -> c_int,
    destroy_qp: unsafe extern "C" fn(*mut c_void) -> c_int,
    create_ah: unsafe extern "C" fn(*mut c_void, *mut sys::ibv_ah_attr) -> *mut c_void,
    destroy_ah: unsafe extern "C" fn(*mut c_void) -> c_int,
    get_async_event:
        unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_async_event) -> c_int,
    ack_async_event: unsafe extern "C" fn(*mut sys::ibv_async_event),
}

impl Fns {
    /// Resolve every entry point; a missing one names itself.
    ///
    /// # Safety
    /// `lib` must be libibverbs (the signatures are taken from its header).
    unsafe fn load(lib: &Library) -> Result<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the caller guarantees the library; the type is the header's.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| Error::Io {
                    what: format!("libibverbs lacks {}", $name),
                    source: std::io::Error::other(e.to_string()),
                })?
            };
        }
        Ok(Self {
            get_device_list: sym!("ibv_get_device_list"),
            free_device_list: sym!("ibv_free_device_list"),
            get_device_name: sym!("ibv_get_device_name"),
            open_device: sym!("ibv_open_device"),
            close_device: sym!("ibv_close_device"),
            query_device: sym!("ibv_query_device"),
            query_port: sym!("ibv_query_port"),
            query_gid: sym!("ibv_query_gid"),
            // SAFETY: as above; older libraries lack it, which only loses the GID type.
            query_gid_ex: unsafe { lib.get(b"_ibv_query_gid_ex\0") }.ok().map(|s| *s),
            alloc_pd: sym!("ibv_alloc_pd"),
            dealloc_pd: sym!("ibv_dealloc_pd"),
            reg_mr: sym!("ibv_reg_mr"),
            dereg_mr: sym!("ibv_dereg_mr"),
            create_comp_channel: sym!("ibv_create_comp_channel"),
            destroy_comp_channel: sym!("ibv_destroy_comp_channel"),
            get_cq_event: sym!("ibv_get_cq_event"),
            ack_cq_events: sym!("ibv_ack_cq_events"),
            create_cq: sym!("ibv_create_cq"),
            destroy_cq: sym!("ibv_destroy_cq"),
            create_srq: sym!("ibv_create_srq"),
            modify_srq: sym!("ibv_modify_srq"),
            destroy_srq: sym!("ibv_destroy_srq"),
            create_qp: sym!("ibv_create_qp"),
            modify_qp: sym!("ibv_modify_qp"),
            query_qp: sym!("ibv_query_qp"),
            destroy_qp: sym!("ibv_destroy_qp"),
            create_ah: sym!("ibv_create_ah"),
            destroy_ah: sym!("ibv_destroy_ah"),
            get_async_event: sym!("ibv_get_async_event"),
            ack_async_event: sym!("ibv_ack_async_event"),
        })
    }
}

/// A device opened through the system's libibverbs.
pub struct Ibverbs {
    fns: Fns,
    ctx: *mut sys::ibv_context,
    name: String,
    sgid_index: usize,
    /// Keeps the entry points valid; dropped last.
    _lib: Library,
}

// SAFETY: libibverbs objects may be used from any thread (the library locks internally;
// rdma-core documents its verbs as thread-safe).
unsafe impl Send for Ibverbs {}
// SAFETY: as above.
unsafe impl Sync for Ibverbs {}

impl std::fmt::Debug for Ibverbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ibverbs")
            .field("device", &self.name)
            .field("sgid_index", &self.sgid_index)
            .finish()
    }
}

/// The errno of the last failed call (libibverbs returns it or sets errno).
fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}

fn fail(verb: &'static str, detail: impl Into<String>, errno: i32) -> Error {
    Error::Ibverbs {
        verb,
        detail: detail.into(),
        errno,
    }
}

/// A C status (0 or an errno, or -1 with errno set) as a result.
fn check(verb: &'static str, detail: impl FnOnce() -> String, rc: c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        -1 => Err(fail(verb, detail(), errno())),
        e if e < 0 => Err(fail(verb, detail(), -e)),
        e => Err(fail(verb, detail(), e)),
    }
}

fn non_null<T>(verb: &'static str, detail: impl FnOnce() -> String, p: *mut T) -> Result<*mut T> {
    if p.is_null() {
        Err(fail(verb, detail(), errno()))
    } else {
        Ok(p)
    }
}

/// The C object pointer an object token carries.
fn ptr_of<T>(raw: u64) -> *mut T {
    raw as usize as *mut T
}

impl Ibverbs {
    /// Open `device` (default: the first one libibverbs lists). The source GID is
    /// `gid_index`, or else the port's first RoCEv2 GID made from an IPv4 address (rxe's
    /// index 1), or else its first IPv4-mapped GID. `SOFTROCE_LIBIBVERBS` names another
    /// library file to load.
    pub fn open(device: Option<&str>, gid_index: Option<usize>) -> Result<Self> {
        let path =
            std::env::var("SOFTROCE_LIBIBVERBS").unwrap_or_else(|_| "libibverbs.so.1".into());
        // SAFETY: loading libibverbs runs its constructors, which only register providers.
        let lib = unsafe { Library::new(&path) }.map_err(|e| Error::Io {
            what: format!("loading {path} (install libibverbs1 / rdma-core)"),
            source: std::io::Error::other(e.to_string()),
        })?;
        // SAFETY: it is libibverbs.
        let fns = unsafe { Fns::load(&lib) }?;
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out pointer.
        let list = unsafe { (fns.get_device_list)(&mut n) };
        let list = non_null("ibv_get_device_list", || "listing devices".into(), list)?;
        let mut names = Vec::new();
        let mut chosen = None;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a listed device has a NUL-terminated name.
            let name = unsafe { CStr::from_ptr((fns.get_device_name)(dev)) }
                .to_string_lossy()
                .into_owned();
            if chosen.is_none() && device.is_none_or(|want| want == name) {
                chosen = Some((dev, name.clone()));
            }
            names.push(name);
        }
        let opened = chosen.map(|(dev, name)| {
            // SAFETY: a listed device, opened before the list is freed (as the man page allows).
            (unsafe { (fns.open_device)(dev) }, name)
        });
        // SAFETY: the list came from ibv_get_device_list.
        unsafe { (fns.free_device_list)(list) };
        let Some((ctx, name)) = opened else {
            return Err(fail(
                "ibv_open_device",
                format!(
                    "no device {} among [{}]",
                    device.unwrap_or("(any)"),
                    names.join(", ")
                ),
                libc::ENODEV,
            ));
        };
        let ctx = non_null("ibv_open_device", || format!("opening {name}"), ctx)?;
        let mut this = Self {
            fns,
            ctx,
            name,
            sgid_index: 0,
            _lib: lib,
        };
        this.sgid_index = match gid_index {
            Some(i) => i,
            None => this.find_roce_v2_ipv4_gid()?,
        };
        Ok(this)
    }

    fn find_roce_v2_ipv4_gid(&self) -> Result<usize> {
        let len = self.query_port(1)?.gid_tbl_len.min(256) as usize;
        let mut first_ipv4 = None;
        for i in 0..len {
            let Ok(gid) = self.query_gid(1, i) else {
                continue;
            };
            if !gid.is_ipv4_mapped() {
                continue;
            }
            first_ipv4.get_or_insert(i);
            if let Some(ex) = self.fns.query_gid_ex {
                // SAFETY: plain-old-data; all-zero is valid.
                let mut e: sys::ibv_gid_entry = unsafe { std::mem::zeroed() };
                // SAFETY: valid context and entry of the size passed.
                let rc = unsafe {
                    ex(
                        self.ctx,
                        1,
                        i as u32,
                        &mut e,
                        0,
                        size_of::<sys::ibv_gid_entry>(),
                    )
                };
                if rc == 0 && e.gid_type == sys::IBV_GID_TYPE_ROCE_V2 {
                    return Ok(i);
                }
            }
        }
        first_ipv4.ok_or_else(|| {
            fail(
                "ibv_query_gid",
                format!(
                    "{} has no IPv4-mapped GID on port 1: give the GID index",
                    self.name
                ),
                libc::ENOENT,
            )
        })
    }

    fn ops(&self) -> &sys::ibv_context_ops {
        // SAFETY: the context lives as long as `self`.
        unsafe { &(*self.ctx).ops }
    }
}

impl Drop for Ibverbs {
    fn drop(&mut self) {
        // SAFETY: the context came from ibv_open_device; objects were destroyed by their
        // owners (the verbs API keeps them alive through the context's `Arc`).
        unsafe { (self.fns.close_device)(self.ctx) };
    }
}

fn to_c_ah(a: &AhAttr) -> Result<sys::ibv_ah_attr> {
    if a.udp_port != 0 && a.udp_port != 4791 {
        return Err(Error::Unsupported {
            what: "a destination UDP port other than 4791",
            backend: BackendKind::Ibverbs,
        });
    }
    // SAFETY: plain-old-data; all-zero is a valid attribute set.
    let mut c: sys::ibv_ah_attr = unsafe { std::mem::zeroed() };
    c.grh.dgid.raw = a.dgid.to_bytes();
    c.grh.flow_label = a.flow_label;
    c.grh.sgid_index = a.sgid_index;
    c.grh.hop_limit = a.hop_limit;
    c.grh.traffic_class = a.traffic_class;
    c.sl = a.sl;
    c.is_global = 1;
    c.port_num = a.port_num.max(1);
    Ok(c)
}

fn from_c_wc(w: &sys::ibv_wc) -> WorkCompletion {
    let status = WcStatus::from_raw(w.status).unwrap_or(WcStatus::GeneralErr);
    // ibv_poll_cq(3): for an error status only wr_id, status, qp_num and vendor_err are
    // valid; the opcode may be anything, so it is not trusted then.
    let opcode = WcOpcode::from_raw(w.opcode).unwrap_or(WcOpcode::Send);
    WorkCompletion {
        wr_id: w.wr_id,
        status,
        opcode,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: w.imm_data,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: WcFlags(w.wc_flags),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

fn sges(list: &[softroce_emu::core::Sge]) -> Vec<sys::ibv_sge> {
    list.iter()
        .map(|s| sys::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

/// Receive work requests as a C chain; the Vecs own the memory the chain points into.
fn recv_chain(wrs: &[RecvWr]) -> (Vec<sys::ibv_recv_wr>, Vec<Vec<sys::ibv_sge>>) {
    let mut lists: Vec<Vec<sys::ibv_sge>> = wrs.iter().map(|w| sges(&w.sg_list)).collect();
    let mut chain: Vec<sys::ibv_recv_wr> = wrs
        .iter()
        .zip(lists.iter_mut())
        .map(|(w, l)| sys::ibv_recv_wr {
            wr_id: w.wr_id,
            next: ptr::null_mut(),
            sg_list: if l.is_empty() {
                ptr::null_mut()
            } else {
                l.as_mut_ptr()
            },
            num_sge: l.len() as c_int,
        })
        .collect();
    for i in 1..chain.len() {
        let next: *mut sys::ibv_recv_wr = &mut chain[i];
        chain[i - 1].next = next;
    }
    (chain, lists)
}

impl Backend for Ibverbs {
    fn kind(&self) -> BackendKind {
        BackendKind::Ibverbs
    }
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: plain-old-data out parameter.
        let mut a: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out pointer.
        let rc = unsafe { (self.fns.query_device)(self.ctx, &mut a) };
        check("ibv_query_device", || self.name.clone(), rc)?;
        // SAFETY: fw_ver is NUL-terminated within its 64 bytes (zeroed beforehand).
        let fw_ver = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let u = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok(DeviceAttr {
            fw_ver,
            node_guid: u64::from_be(a.node_guid),
            sys_image_guid: u64::from_be(a.sys_image_guid),
            max_mr_size: a.max_mr_size,
            page_size_cap: a.page_size_cap,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            max_qp: u(a.max_qp),
            max_qp_wr: u(a.max_qp_wr),
            device_cap_flags: a.device_cap_flags,
            max_sge: u(a.max_sge),
            max_sge_rd: u(a.max_sge_rd),
            max_cq: u(a.max_cq),
            max_cqe: u(a.max_cqe),
            max_mr: u(a.max_mr),
            max_pd: u(a.max_pd),
            max_qp_rd_atom: u(a.max_qp_rd_atom),
            max_qp_init_rd_atom: u(a.max_qp_init_rd_atom),
            atomic_cap: a.atomic_cap,
            max_ah: u(a.max_ah),
            max_srq: u(a.max_srq),
            max_srq_wr: u(a.max_srq_wr),
            max_srq_sge: u(a.max_srq_sge),
            max_pkeys: a.max_pkeys,
            local_ca_ack_delay: a.local_ca_ack_delay,
            phys_port_cnt: a.phys_port_cnt,
            max_inline_data: 0,
            max_msg_sz: self.query_port(1).map_or(0, |p| p.max_msg_sz),
            // SAFETY: the context lives as long as `self`.
            num_comp_vectors: u(unsafe { (*self.ctx).num_comp_vectors }),
        })
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: plain-old-data out parameter.
        let mut p: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; the export fills at most the 52 bytes given.
        let rc = unsafe { (self.fns.query_port)(self.ctx, port, &mut p) };
        check("ibv_query_port", || format!("port {port}"), rc)?;
        let mtu = |code: u32| Mtu::from_code(code as u8).unwrap_or(Mtu::Mtu1024);
        Ok(PortAttr {
            state: if p.state == 4 {
                PortState::Active
            } else {
                PortState::Down
            },
            max_mtu: mtu(p.max_mtu),
            active_mtu: mtu(p.active_mtu),
            gid_tbl_len: u32::try_from(p.gid_tbl_len).unwrap_or(0),
            port_cap_flags: p.port_cap_flags,
            max_msg_sz: p.max_msg_sz,
            bad_pkey_cntr: p.bad_pkey_cntr,
            qkey_viol_cntr: p.qkey_viol_cntr,
            pkey_tbl_len: p.pkey_tbl_len,
            link_layer_ethernet: p.link_layer == sys::IBV_LINK_LAYER_ETHERNET,
        })
    }
    fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
        let mut gid = [0u8; 16];
        let idx = c_int::try_from(index)
            .map_err(|_| fail("ibv_query_gid", format!("index {index}"), libc::EINVAL))?;
        // SAFETY: valid context and 16-byte out buffer.
        let rc = unsafe { (self.fns.query_gid)(self.ctx, port, idx, &mut gid) };
        check("ibv_query_gid", || format!("port {port} index {index}"), rc)?;
        Ok(Gid::from_bytes(gid))
    }
    fn sgid_index(&self) -> usize {
        self.sgid_index
    }
    fn udp_port(&self) -> u16 {
        softroce_wire::icrc::ROCE_V2_PORT
    }

    fn alloc_pd(&self) -> Result<PdHandle> {
        // SAFETY: valid context.
        let pd = unsafe { (self.fns.alloc_pd)(self.ctx) };
        let pd = non_null("ibv_alloc_pd", String::new, pd)?;
        Ok(PdHandle::from_raw(pd as u64))
    }
    fn dealloc_pd(&self, pd: PdHandle) -> Result<()> {
        // SAFETY: a PD this backend made.
        let rc = unsafe { (self.fns.dealloc_pd)(ptr_of(pd.to_raw())) };
        check("ibv_dealloc_pd", String::new, rc)
    }
    unsafe fn reg_mr(
        &self,
        pd: PdHandle,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<(MrHandle, MrKeys)> {
        // SAFETY: the caller keeps the memory alive until dereg_mr.
        let mr =
            unsafe { (self.fns.reg_mr)(ptr_of(pd.to_raw()), addr.cast(), len, access.0 as c_int) };
        let mr = non_null("ibv_reg_mr", || format!("{len} bytes, access {access}"), mr)?;
        // SAFETY: a live MR returned by ibv_reg_mr.
        let keys = unsafe {
            MrKeys {
                lkey: (*mr).lkey,
                rkey: (*mr).rkey,
            }
        };
        Ok((MrHandle::from_raw(mr as u64), keys))
    }
    fn dereg_mr(&self, mr: MrHandle) -> Result<()> {
        // SAFETY: an MR this backend made.
        let rc = unsafe { (self.fns.dereg_mr)(ptr_of(mr.to_raw())) };
        check("ibv_dereg_mr", String::new, rc)
    }

    fn create_comp_channel(&self) -> Result<(ChannelHandle, RawFd)> {
        // SAFETY: valid context.
        let ch = unsafe { (self.fns.create_comp_channel)(self.ctx) };
        let ch = non_null("ibv_create_comp_channel", String::new, ch)?;
        // SAFETY: a live channel.
        let fd = unsafe { (*ch).fd };
        Ok((ChannelHandle::from_raw(ch as u64), fd))
    }
    fn destroy_comp_channel(&self, ch: ChannelHandle) -> Result<()> {
        // SAFETY: a channel this backend made.
        let rc = unsafe { (self.fns.destroy_comp_channel)(ptr_of(ch.to_raw())) };
        check("ibv_destroy_comp_channel", String::new, rc)
    }
    fn get_cq_event(&self, ch: ChannelHandle, timeout: Option<Duration>) -> Result<CqHandle> {
        let chp: *mut sys::ibv_comp_channel = ptr_of(ch.to_raw());
        // SAFETY: a live channel.
        let fd = unsafe { (*chp).fd };
        wait_readable("ibv_get_cq_event", fd, timeout)?;
        let (mut cq, mut cq_ctx) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: live channel and valid out pointers.
        let rc = unsafe { (self.fns.get_cq_event)(chp, &mut cq, &mut cq_ctx) };
        check("ibv_get_cq_event", String::new, rc)?;
        Ok(CqHandle::from_raw(cq as u64))
    }

    fn create_cq(&self, cqe: u32, channel: Option<ChannelHandle>) -> Result<(CqHandle, u32)> {
        let ch = channel.map_or(ptr::null_mut(), |c| ptr_of(c.to_raw()));
        let n = c_int::try_from(cqe)
            .map_err(|_| fail("ibv_create_cq", format!("cqe {cqe}"), libc::EINVAL))?;
        // SAFETY: valid context; channel null or live.
        let cq = unsafe { (self.fns.create_cq)(self.ctx, n, ptr::null_mut(), ch, 0) };
        let cq = non_null("ibv_create_cq", || format!("cqe {cqe}"), cq)?;
        // SAFETY: a live CQ.
        let size = unsafe { (*cq.cast::<sys::ibv_cq>()).cqe };
        Ok((
            CqHandle::from_raw(cq as u64),
            u32::try_from(size).unwrap_or(cqe),
        ))
    }
    fn destroy_cq(&self, cq: CqHandle) -> Result<()> {
        // SAFETY: a CQ this backend made.
        let rc = unsafe { (self.fns.destroy_cq)(ptr_of(cq.to_raw())) };
        check("ibv_destroy_cq", String::new, rc)
    }
    fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize> {
        let poll = self.ops().poll_cq.ok_or_else(|| {
            fail(
                "ibv_poll_cq",
                "the provider has no poll_cq",
                libc::EOPNOTSUPP,
            )
        })?;
        // SAFETY: plain-old-data; all-zero is valid.
        let mut buf: [sys::ibv_wc; 32] = unsafe { std::mem::zeroed() };
        let want = out.len().min(buf.len());
        // SAFETY: a live CQ and a buffer of `want` entries.
        let n = unsafe { poll(ptr_of(cq.to_raw()), want as c_int, buf.as_mut_ptr()) };
        if n < 0 {
            return Err(fail("ibv_poll_cq", String::new(), -n));
        }
        let n = n as usize;
        for (o, w) in out.iter_mut().zip(&buf[..n]) {
            *o = from_c_wc(w);
        }
        Ok(n)
    }
    fn req_notify_cq(&self, cq: CqHandle, solicited_only: bool) -> Result<()> {
        let arm = self.ops().req_notify_cq.ok_or_else(|| {
            fail(
                "ibv_req_notify_cq",
                "the provider has none",
                libc::EOPNOTSUPP,
            )
        })?;
        // SAFETY: a live CQ.
        let rc = unsafe { arm(ptr_of(cq.to_raw()), c_int::from(solicited_only)) };
        check("ibv_req_notify_cq", String::new, rc)
    }
    fn ack_cq_events(&self, cq: CqHandle, n: u32) -> Result<()> {
        // SAFETY: a live CQ.
        unsafe { (self.fns.ack_cq_events)(ptr_of(cq.to_raw()), n) };
        Ok(())
    }

    fn create_srq(&self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle> {
        let mut init = sys::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr: attr.max_wr,
                max_sge: attr.max_sge,
                srq_limit: attr.srq_limit,
            },
        };
        // SAFETY: a live PD and a valid attribute struct.
        let srq = unsafe { (self.fns.create_srq)(ptr_of(pd.to_raw()), &mut init) };
        let srq = non_null("ibv_create_srq", || format!("{attr:?}"), srq)?;
        Ok(SrqHandle::from_raw(srq as u64))
    }
    fn modify_srq(&self, srq: SrqHandle, attr: SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let mut a = sys::ibv_srq_attr {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        };
        let m = if mask.max_wr {
            sys::IBV_SRQ_MAX_WR as c_int
        } else {
            0
        } | if mask.limit {
            sys::IBV_SRQ_LIMIT as c_int
        } else {
            0
        };
        // SAFETY: a live SRQ and a valid attribute struct.
        let rc = unsafe { (self.fns.modify_srq)(ptr_of(srq.to_raw()), &mut a, m) };
        check("ibv_modify_srq", || format!("{attr:?}"), rc)
    }
    fn destroy_srq(&self, srq: SrqHandle) -> Result<()> {
        // SAFETY: an SRQ this backend made.
        let rc = unsafe { (self.fns.destroy_srq)(ptr_of(srq.to_raw())) };
        check("ibv_destroy_srq", String::new, rc)
    }
    unsafe fn post_srq_recv(&self, srq: SrqHandle, wrs: &[RecvWr]) -> Result<()> {
        let post = self.ops().post_srq_recv.ok_or_else(|| {
            fail(
                "ibv_post_srq_recv",
                "the provider has none",
                libc::EOPNOTSUPP,
            )
        })?;
        // SAFETY: forwarded buffer contract.
        unsafe { post_recv_chain("ibv_post_srq_recv", post, ptr_of(srq.to_raw()), wrs) }
    }

    fn create_qp(&self, pd: PdHandle, init: QpInitAttr) -> Result<(QpHandle, Qpn)> {
        let mut a = sys::ibv_qp_init_attr {
            qp_context: init.qp_context as usize as *mut c_void,
            send_cq: ptr_of(init.send_cq.to_raw()),
            recv_cq: ptr_of(init.recv_cq.to_raw()),
            srq: init.srq.map_or(ptr::null_mut(), |s| ptr_of(s.to_raw())),
            cap: sys::ibv_qp_cap {
                max_send_wr: init.cap.max_send_wr,
                max_recv_wr: init.cap.max_recv_wr,
                max_send_sge: init.cap.max_send_sge,
                max_recv_sge: init.cap.max_recv_sge,
                max_inline_data: init.cap.max_inline_data,
            },
            qp_type: init.qp_type.raw(),
            sq_sig_all: c_int::from(init.sq_sig_all),
        };
        // SAFETY: a live PD; CQ/SRQ tokens from this backend.
        let qp = unsafe { (self.fns.create_qp)(ptr_of(pd.to_raw()), &mut a) };
        let qp = non_null(
            "ibv_create_qp",
            || format!("{} with {:?}", init.qp_type, init.cap),
            qp,
        )?;
        // SAFETY: a live QP.
        let qpn = unsafe { (*qp.cast::<sys::ibv_qp>()).qp_num };
        let qpn = Qpn::new(qpn).ok_or_else(|| {
            fail(
                "ibv_create_qp",
                format!("QPN {qpn:#x} out of range"),
                libc::EPROTO,
            )
        })?;
        Ok((QpHandle::from_raw(qp as u64), qpn))
    }
    fn modify_qp(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let ah = to_c_ah(&attr.ah_attr)?;
        let cap = sys::ibv_qp_cap {
            max_send_wr: attr.cap.max_send_wr,
            max_recv_wr: attr.cap.max_recv_wr,
            max_send_sge: attr.cap.max_send_sge,
            max_recv_sge: attr.cap.max_recv_sge,
            max_inline_data: attr.cap.max_inline_data,
        };
        let mut a = sys::ibv_qp_attr {
            qp_state: attr.qp_state.raw(),
            cur_qp_state: attr.cur_qp_state.raw(),
            path_mtu: u32::from(attr.path_mtu.code()),
            path_mig_state: u32::from(attr.path_mig_state),
            qkey: attr.qkey,
            rq_psn: attr.rq_psn.value(),
            sq_psn: attr.sq_psn.value(),
            dest_qp_num: attr.dest_qp_num,
            qp_access_flags: attr.qp_access_flags.0,
            cap,
            ah_attr: ah,
            alt_ah_attr: ah,
            pkey_index: attr.pkey_index,
            alt_pkey_index: 0,
            en_sqd_async_notify: u8::from(attr.en_sqd_async_notify),
            sq_draining: 0,
            max_rd_atomic: attr.max_rd_atomic,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            port_num: attr.port_num.max(1),
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            alt_port_num: 0,
            alt_timeout: 0,
            rate_limit: 0,
        };
        // SAFETY: a live QP and a valid attribute struct.
        let rc = unsafe { (self.fns.modify_qp)(ptr_of(qp.to_raw()), &mut a, mask.0 as c_int) };
        check(
            "ibv_modify_qp",
            || format!("to {} with mask {mask}", attr.qp_state),
            rc,
        )
    }
    fn qp_state(&self, qp: QpHandle) -> Result<QpState> {
        // SAFETY: plain-old-data out parameters.
        let (mut a, mut init): (sys::ibv_qp_attr, sys::ibv_qp_init_attr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: a live QP and valid out pointers.
        let rc = unsafe {
            (self.fns.query_qp)(
                ptr_of(qp.to_raw()),
                &mut a,
                QpAttrMask::STATE.0 as c_int,
                &mut init,
            )
        };
        check("ibv_query_qp", String::new, rc)?;
        QpState::from_raw(a.qp_state).ok_or_else(|| {
            fail(
                "ibv_query_qp",
                format!("unknown state {}", a.qp_state),
                libc::EPROTO,
            )
        })
    }
    fn destroy_qp(&self, qp: QpHandle) -> Result<()> {
        // SAFETY: a QP this backend made.
        let rc = unsafe { (self.fns.destroy_qp)(ptr_of(qp.to_raw())) };
        check("ibv_destroy_qp", String::new, rc)
    }
    unsafe fn post_send(&self, qp: QpHandle, wrs: &[SendWr]) -> Result<()> {
        let post = self
            .ops()
            .post_send
            .ok_or_else(|| fail("ibv_post_send", "the provider has none", libc::EOPNOTSUPP))?;
        if wrs.is_empty() {
            return Ok(());
        }
        let mut lists: Vec<Vec<sys::ibv_sge>> = wrs.iter().map(|w| sges(&w.sg_list)).collect();
        let mut chain: Vec<sys::ibv_send_wr> = wrs
            .iter()
            .zip(lists.iter_mut())
            .map(|(w, l)| {
                // SAFETY: plain-old-data; all-zero is a valid work request.
                let mut c: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
                c.wr_id = w.wr_id;
                if !l.is_empty() {
                    c.sg_list = l.as_mut_ptr();
                }
                c.num_sge = l.len() as c_int;
                c.opcode = w.opcode.raw();
                c.send_flags = w.send_flags.0;
                // SEND_WITH_INV carries the rkey in the same union slot.
                c.imm_data = if w.opcode == WrOpcode::SendWithInv {
                    w.invalidate_rkey
                } else {
                    w.imm_data
                };
                match (w.ud, w.opcode) {
                    (Some(ud), _) => {
                        c.wr.ud = sys::ibv_send_wr_ud {
                            ah: ptr_of(ud.ah.to_raw()),
                            remote_qpn: ud.remote_qpn,
                            remote_qkey: ud.remote_qkey,
                        }
                    }
                    (None, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd) => {
                        c.wr.atomic = sys::ibv_send_wr_atomic {
                            remote_addr: w.atomic.remote_addr,
                            compare_add: w.atomic.compare_add,
                            swap: w.atomic.swap,
                            rkey: w.atomic.rkey,
                        }
                    }
                    (None, _) => {
                        c.wr.rdma = sys::ibv_send_wr_rdma {
                            remote_addr: w.rdma.remote_addr,
                            rkey: w.rdma.rkey,
                        }
                    }
                }
                c
            })
            .collect();
        for i in 1..chain.len() {
            let next: *mut sys::ibv_send_wr = &mut chain[i];
            chain[i - 1].next = next;
        }
        let first: *mut sys::ibv_send_wr = &mut chain[0];
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: a live QP; the chain and its SGE lists live across the call; buffers
        // are the caller's contract.
        let rc = unsafe { post(ptr_of(qp.to_raw()), first, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(Error::IbverbsPost {
            verb: "ibv_post_send",
            index: chain_index(first, bad, chain.len()),
            errno: if rc < 0 { errno() } else { rc },
        })
    }
    unsafe fn post_recv(&self, qp: QpHandle, wrs: &[RecvWr]) -> Result<()> {
        let post = self
            .ops()
            .post_recv
            .ok_or_else(|| fail("ibv_post_recv", "the provider has none", libc::EOPNOTSUPP))?;
        // SAFETY: forwarded buffer contract.
        unsafe { post_recv_chain("ibv_post_recv", post, ptr_of(qp.to_raw()), wrs) }
    }

    fn create_ah(&self, pd: PdHandle, attr: AhAttr) -> Result<AhHandle> {
        let mut a = to_c_ah(&attr)?;
        // SAFETY: a live PD and a valid attribute struct.
        let ah = unsafe { (self.fns.create_ah)(ptr_of(pd.to_raw()), &mut a) };
        let ah = non_null("ibv_create_ah", || format!("to {}", attr.dgid), ah)?;
        Ok(AhHandle::from_raw(ah as u64))
    }
    fn destroy_ah(&self, ah: AhHandle) -> Result<()> {
        // SAFETY: an AH this backend made.
        let rc = unsafe { (self.fns.destroy_ah)(ptr_of(ah.to_raw())) };
        check("ibv_destroy_ah", String::new, rc)
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        wait_readable("ibv_get_async_event", self.async_fd(), timeout)?;
        // SAFETY: plain-old-data out parameter.
        let mut ev: sys::ibv_async_event = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out pointer.
        let rc = unsafe { (self.fns.get_async_event)(self.ctx, &mut ev) };
        check("ibv_get_async_event", String::new, rc)?;
        let event_type = EventType::from_raw(ev.event_type).ok_or_else(|| {
            fail(
                "ibv_get_async_event",
                format!("unknown event type {}", ev.event_type),
                libc::EPROTO,
            )
        })?;
        // SAFETY: the union holds a pointer or, for port events, a port number; reading the
        // pointer-sized member and then the int for port events follows the event type.
        let (raw, port) = unsafe { (ev.element.cq as u64, ev.element.port_num) };
        let element = match event_type {
            EventType::CqErr => EventElement::Cq(CqHandle::from_raw(raw)),
            EventType::SrqErr | EventType::SrqLimitReached => {
                EventElement::Srq(SrqHandle::from_raw(raw))
            }
            EventType::PortActive
            | EventType::PortErr
            | EventType::LidChange
            | EventType::PkeyChange
            | EventType::SmChange
            | EventType::ClientReregister
            | EventType::GidChange => EventElement::Port(u8::try_from(port).unwrap_or(0)),
            EventType::DeviceFatal => EventElement::Device,
            _ => EventElement::Qp(QpHandle::from_raw(raw)),
        };
        Ok(AsyncEvent {
            event_type,
            element,
        })
    }
    fn ack_async_event(&self, event: &AsyncEvent) -> Result<()> {
        // SAFETY: plain-old-data; rebuilt field for field below.
        let mut ev: sys::ibv_async_event = unsafe { std::mem::zeroed() };
        ev.event_type = event.event_type.raw();
        match event.element {
            EventElement::Cq(h) => ev.element.cq = ptr_of(h.to_raw()),
            EventElement::Qp(h) => ev.element.qp = ptr_of(h.to_raw()),
            EventElement::Srq(h) => ev.element.srq = ptr_of(h.to_raw()),
            EventElement::Port(p) => ev.element.port_num = c_int::from(p),
            EventElement::Device => {}
        }
        // SAFETY: an event this backend returned, rebuilt field for field.
        unsafe { (self.fns.ack_async_event)(&mut ev) };
        Ok(())
    }
    fn async_fd(&self) -> RawFd {
        // SAFETY: the context lives as long as `self`.
        unsafe { (*self.ctx).async_fd }
    }
}

/// Post receive work requests through a provider's `post_recv`/`post_srq_recv`.
///
/// # Safety
/// `target` is a live QP or SRQ of the right kind; the buffers are the caller's contract.
unsafe fn post_recv_chain<T>(
    verb: &'static str,
    post: PostRecvFn<T>,
    target: *mut T,
    wrs: &[RecvWr],
) -> Result<()> {
    if wrs.is_empty() {
        return Ok(());
    }
    let (mut chain, _lists) = recv_chain(wrs);
    let first: *mut sys::ibv_recv_wr = &mut chain[0];
    let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
    // SAFETY: the chain and SGE lists live across the call.
    let rc = unsafe { post(target, first, &mut bad) };
    if rc == 0 {
        return Ok(());
    }
    Err(Error::IbverbsPost {
        verb,
        index: chain_index(first, bad, chain.len()),
        errno: if rc < 0 { errno() } else { rc },
    })
}

/// Which element of a chain `bad` points at (`bad_wr`); the first one if it is unknown.
fn chain_index<T>(first: *mut T, bad: *mut T, len: usize) -> usize {
    if bad.is_null() {
        return 0;
    }
    let offset = (bad as usize).wrapping_sub(first as usize) / size_of::<T>().max(1);
    if offset < len { offset } else { 0 }
}

/// Wait until `fd` is readable for at most `timeout` (`None`: forever): the verbs
/// themselves block, and a timeout must not hang in them.
fn wait_readable(verb: &'static str, fd: RawFd, timeout: Option<Duration>) -> Result<()> {
    let Some(t) = timeout else {
        return Ok(());
    };
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = c_int::try_from(t.as_millis()).unwrap_or(c_int::MAX);
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    match rc {
        0 => Err(fail(verb, "nothing pending", libc::EAGAIN)),
        r if r < 0 => Err(fail(verb, "poll on its fd", errno())),
        _ => Ok(()),
    }
}
