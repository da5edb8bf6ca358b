//! The hardware backend: the system's `libibverbs.so.1`, loaded at run time with
//! `libloading` (nothing from rdma-core is needed to build), driving whatever device it
//! finds — a RoCE NIC, Linux `rdma_rxe`, `siw`.
//!
//! The object tokens ([`PdHandle`] and friends) carry the C object pointers. Calls the
//! header makes inline (`ibv_post_send`, `ibv_poll_cq`, …) go through the context's `ops`
//! table exactly as `<infiniband/verbs.h>` compiles them. The structs are the mirrors of
//! `softroce-ibverbs-abi` (whose layout and constants are checked against the header there),
//! and its `convert` module translates them to and from the core's types, the same
//! translation the drop-in `libibverbs.so.1` uses in the other direction.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::fd::RawFd;
use std::ptr;
use std::time::Duration;

use libloading::Library;
use softroce_emu::core::{
    AccessFlags, AhAttr, AhHandle, AsyncEvent, ChannelHandle, CqHandle, DeviceAttr, EventElement,
    EventType, MrHandle, MrKeys, MwBind, MwHandle, MwType, PdHandle, PortAttr, QpAttr, QpAttrMask,
    QpHandle, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, SrqAttr, SrqAttrMask,
    SrqHandle, WorkCompletion, WrOpcode,
};
use softroce_ibverbs_abi as sys;
use softroce_ibverbs_abi::convert::{self, CEventElement, WrChain};
use softroce_wire::{Gid, Qpn};

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
    query_gid: unsafe extern "C" fn(*mut sys::ibv_context, u8, c_int, *mut sys::ibv_gid) -> c_int,
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
    attach_mcast: unsafe extern "C" fn(*mut c_void, *const sys::ibv_gid, u16) -> c_int,
    detach_mcast: unsafe extern "C" fn(*mut c_void, *const sys::ibv_gid, u16) -> c_int,
    create_ah: unsafe extern "C" fn(*mut c_void, *mut sys::ibv_ah_attr) -> *mut c_void,
    destroy_ah: unsafe extern "C" fn(*mut c_void) -> c_int,
    get_async_event:
        unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_async_event) -> c_int,
    ack_async_event: unsafe extern "C" fn(*mut sys::ibv_async_event),
    /// rdma-core 24 and later: the `ibv_wr_*` view of a QP made with `send_ops_flags`.
    qp_to_qp_ex: Option<unsafe extern "C" fn(*mut c_void) -> *mut sys::ibv_qp_ex>,
}

type CreateQpExFn =
    unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_qp_init_attr_ex) -> *mut sys::ibv_qp;

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
            attach_mcast: sym!("ibv_attach_mcast"),
            detach_mcast: sym!("ibv_detach_mcast"),
            create_ah: sym!("ibv_create_ah"),
            destroy_ah: sym!("ibv_destroy_ah"),
            get_async_event: sym!("ibv_get_async_event"),
            ack_async_event: sym!("ibv_ack_async_event"),
            // SAFETY: as above; without it there is no ATOMIC WRITE, nothing else is lost.
            qp_to_qp_ex: unsafe { lib.get(b"ibv_qp_to_qp_ex\0") }.ok().map(|s| *s),
        })
    }
}

/// A device opened through the system's libibverbs.
pub struct Ibverbs {
    fns: Fns,
    ctx: *mut sys::ibv_context,
    name: String,
    sgid_index: usize,
    /// The file loaded (`SOFTROCE_LIBIBVERBS` or `libibverbs.so.1`): librdmacm is looked
    /// for next to it.
    lib_path: String,
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

/// The C objects of this backend's tokens, for work requests.
struct Tokens;

impl convert::CObjects for Tokens {
    fn ah(&mut self, h: AhHandle) -> *mut sys::ibv_ah {
        ptr_of(h.to_raw())
    }
    fn mw(&mut self, h: MwHandle) -> *mut sys::ibv_mw {
        ptr_of(h.to_raw())
    }
    fn mr(&mut self, h: MrHandle) -> *mut sys::ibv_mr {
        ptr_of(h.to_raw())
    }
}

/// Refuse a library path naming something other than a regular file before `dlopen`
/// sees it: `dlopen` of a FIFO blocks until something writes to it, and of a device or
/// directory fails with a message that does not say so. A bare name (no `/`) is the
/// loader's to search for, and a path that cannot be looked at is left to `dlopen` to
/// report.
pub(crate) fn openable_library(path: &str) -> std::io::Result<()> {
    let Some(meta) = path
        .contains('/')
        .then(|| std::fs::metadata(path).ok())
        .flatten()
    else {
        return Ok(());
    };
    if meta.is_file() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{path} is not a regular file ({:?})", meta.file_type()),
        ))
    }
}

impl Ibverbs {
    /// Open `device` (default: the first one libibverbs lists). The source GID is
    /// `gid_index`, or else the port's first RoCEv2 GID made from an IPv4 address (rxe's
    /// index 1), or else its first IPv4-mapped GID. `SOFTROCE_LIBIBVERBS` names another
    /// library file to load.
    pub fn open(device: Option<&str>, gid_index: Option<usize>) -> Result<Self> {
        let path =
            std::env::var("SOFTROCE_LIBIBVERBS").unwrap_or_else(|_| "libibverbs.so.1".into());
        let what = || format!("loading {path} (install libibverbs1 / rdma-core)");
        openable_library(&path).map_err(|source| Error::Io {
            what: what(),
            source,
        })?;
        // SAFETY: loading libibverbs runs its constructors, which only register providers.
        let lib = unsafe { Library::new(&path) }.map_err(|e| Error::Io {
            what: what(),
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
            lib_path: path,
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

    /// The provider's `verbs_context` when its library copy holds the member at
    /// `member_offset`, as verbs.h's `verbs_get_ctx_op` finds one: only an extended context
    /// large enough for it.
    fn vctx_holding(&self, member_offset: usize) -> Option<*const sys::verbs_context> {
        // SAFETY: the context lives as long as `self`.
        if unsafe { (*self.ctx).abi_compat } as usize != sys::__VERBS_ABI_IS_EXTENDED {
            return None;
        }
        let tail = std::mem::offset_of!(sys::verbs_context, context);
        // SAFETY: an extended context is the last member of its verbs_context (verbs_get_ctx).
        let vctx = unsafe { self.ctx.cast::<u8>().sub(tail) }.cast::<sys::verbs_context>();
        // It grows downwards: `sz` counts from the member the library knows first.
        let need = size_of::<sys::verbs_context>() - member_offset;
        // SAFETY: `sz` sits just before `context` in every version.
        (unsafe { (*vctx).sz } >= need).then_some(vctx.cast_const())
    }

    /// The provider's `verbs_context.create_qp_ex` (see [`Self::vctx_holding`]).
    fn create_qp_ex_op(&self) -> Option<CreateQpExFn> {
        let vctx = self.vctx_holding(std::mem::offset_of!(sys::verbs_context, create_qp_ex))?;
        // SAFETY: the library's copy holds the member.
        unsafe { (*vctx).create_qp_ex }
    }

    /// The QP number of a QP the library just made.
    fn qpn_of(qp: *mut c_void) -> Result<Qpn> {
        // SAFETY: a live QP.
        let qpn = unsafe { (*qp.cast::<sys::ibv_qp>()).qp_num };
        Qpn::new(qpn).ok_or_else(|| {
            fail(
                "ibv_create_qp",
                format!("QPN {qpn:#x} out of range"),
                libc::EPROTO,
            )
        })
    }

    /// ATOMIC WRITEs through the `ibv_wr_*` API (`ibv_send_wr` has no field for their 8
    /// bytes): one `ibv_wr_start` … `ibv_wr_complete` batch, all or nothing.
    ///
    /// # Safety
    /// As [`Backend::post_send`]: each request's one SGE names 8 readable bytes.
    unsafe fn post_atomic_writes(&self, qp: QpHandle, wrs: &[SendWr]) -> Result<()> {
        const VERB: &str = "ibv_wr_atomic_write";
        for (i, wr) in wrs.iter().enumerate() {
            if wr.opcode != WrOpcode::AtomicWrite {
                return Err(Error::Invalid {
                    what: "send work request list",
                    reason: format!(
                        "#{i} is {:?} beside ATOMIC WRITE: on libibverbs ATOMIC WRITE goes \
                         through ibv_wr_atomic_write, so post it apart from other opcodes",
                        wr.opcode
                    ),
                });
            }
            if wr.sg_list.len() != 1 || wr.sg_list[0].length != 8 {
                return Err(Error::Invalid {
                    what: "ATOMIC WRITE",
                    reason: format!(
                        "#{i} must carry its 8 bytes in exactly one SGE, not {:?}",
                        wr.sg_list
                    ),
                });
            }
        }
        let to_ex = self.fns.qp_to_qp_ex.ok_or_else(|| {
            fail(
                VERB,
                "this libibverbs predates the ibv_wr_* API (ibv_qp_to_qp_ex)",
                libc::EOPNOTSUPP,
            )
        })?;
        // SAFETY: a live QP this backend made.
        let qpx = unsafe { to_ex(ptr_of(qp.to_raw())) };
        if qpx.is_null() {
            return Err(fail(
                VERB,
                "the QP was not created with IBV_QP_EX_WITH_ATOMIC_WRITE \
                 (QueuePairBuilder::atomic_write)",
                libc::EINVAL,
            ));
        }
        // SAFETY: a live extended QP; the provider filled its function table.
        let (start, write, complete) =
            unsafe { ((*qpx).wr_start, (*qpx).wr_atomic_write, (*qpx).wr_complete) };
        let (Some(start), Some(write), Some(complete)) = (start, write, complete) else {
            return Err(fail(
                VERB,
                format!("{}'s provider has no ibv_wr_atomic_write", self.name),
                libc::EOPNOTSUPP,
            ));
        };
        // SAFETY: a live extended QP; each source is 8 readable bytes (the caller's
        // contract), which the provider copies into the work request at once.
        let rc = unsafe {
            start(qpx);
            for wr in wrs {
                (*qpx).wr_id = wr.wr_id;
                (*qpx).wr_flags = wr.send_flags.0;
                let src = wr.sg_list[0].addr as usize as *const c_void;
                write(qpx, wr.rdma.rkey, wr.rdma.remote_addr, src);
            }
            complete(qpx)
        };
        if rc == 0 {
            return Ok(());
        }
        Err(Error::IbverbsPost {
            verb: "ibv_wr_complete",
            index: 0,
            errno: if rc < 0 { errno() } else { rc },
        })
    }

    fn ops(&self) -> &sys::ibv_context_ops {
        // SAFETY: the context lives as long as `self`.
        unsafe { &(*self.ctx).ops }
    }
}

/// What the connection manager (`crate::cm`, through librdmacm) needs of the library.
impl Ibverbs {
    /// The libibverbs file this backend loaded.
    pub(crate) fn library_path(&self) -> &str {
        &self.lib_path
    }

    /// The name of the device `ctx` (another library's context, such as an
    /// `rdma_cm_id`'s `verbs`) was opened on.
    ///
    /// # Safety
    /// `ctx` must be a live context of the libibverbs this backend loaded.
    pub(crate) unsafe fn device_name_of(&self, ctx: *mut sys::ibv_context) -> String {
        // SAFETY: the caller's live context; its device has a NUL-terminated name.
        unsafe { CStr::from_ptr((self.fns.get_device_name)((*ctx).device.cast())) }
            .to_string_lossy()
            .into_owned()
    }

    /// `ibv_modify_qp` with C attributes as `rdma_init_qp_attr` produced them (nothing is
    /// lost in a translation to the core's types and back).
    pub(crate) fn modify_qp_c(
        &self,
        qp: QpHandle,
        attr: &mut sys::ibv_qp_attr,
        mask: c_int,
        detail: impl FnOnce() -> String,
    ) -> Result<()> {
        // SAFETY: a live QP of this backend and a valid attribute struct.
        let rc = unsafe { (self.fns.modify_qp)(ptr_of(qp.to_raw()), attr, mask) };
        check("ibv_modify_qp", detail, rc)
    }
}

impl Drop for Ibverbs {
    fn drop(&mut self) {
        // SAFETY: the context came from ibv_open_device; objects were destroyed by their
        // owners (the verbs API keeps them alive through the context's `Arc`).
        unsafe { (self.fns.close_device)(self.ctx) };
    }
}

/// The C address vector of `a`: C has no destination UDP port, so only the standard one can
/// be reached.
fn to_c_ah(a: &AhAttr) -> Result<sys::ibv_ah_attr> {
    if a.udp_port != 0 && a.udp_port != softroce_wire::ROCE_V2_PORT {
        return Err(Error::Unsupported {
            what: "a destination UDP port other than 4791",
            backend: BackendKind::Ibverbs,
        });
    }
    Ok(convert::ah_attr_to_c(a))
}

impl Backend for Ibverbs {
    fn kind(&self) -> BackendKind {
        BackendKind::Ibverbs
    }
    fn ibverbs(&self) -> Option<&Ibverbs> {
        Some(self)
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
        Ok(DeviceAttr {
            max_msg_sz: self.query_port(1).map_or(0, |p| p.max_msg_sz),
            // SAFETY: the context lives as long as `self`.
            num_comp_vectors: u32::try_from(unsafe { (*self.ctx).num_comp_vectors }).unwrap_or(0),
            ..convert::device_attr_from_c(&a)
        })
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: plain-old-data out parameter.
        let mut p: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; the export fills at most the 52 bytes given.
        let rc = unsafe { (self.fns.query_port)(self.ctx, port, &mut p) };
        check("ibv_query_port", || format!("port {port}"), rc)?;
        Ok(convert::port_attr_from_c(&p))
    }
    fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
        let mut gid = sys::ibv_gid { raw: [0; 16] };
        let idx = c_int::try_from(index)
            .map_err(|_| fail("ibv_query_gid", format!("index {index}"), libc::EINVAL))?;
        // SAFETY: valid context and out pointer.
        let rc = unsafe { (self.fns.query_gid)(self.ctx, port, idx, &mut gid) };
        check("ibv_query_gid", || format!("port {port} index {index}"), rc)?;
        Ok(convert::gid_from_c(&gid))
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
    fn alloc_null_mr(&self, pd: PdHandle) -> Result<(MrHandle, u32)> {
        // verbs.h's inline ibv_alloc_null_mr: the provider's op, EOPNOTSUPP without one.
        let alloc = self
            .vctx_holding(std::mem::offset_of!(sys::verbs_context, alloc_null_mr))
            // SAFETY: the library's copy holds the member.
            .and_then(|v| unsafe { (*v).alloc_null_mr })
            .ok_or_else(|| {
                fail(
                    "ibv_alloc_null_mr",
                    "the provider has none",
                    libc::EOPNOTSUPP,
                )
            })?;
        // SAFETY: a PD this backend made.
        let mr = unsafe { alloc(ptr_of(pd.to_raw())) };
        let mr = non_null("ibv_alloc_null_mr", String::new, mr)?;
        // SAFETY: a live MR.
        let lkey = unsafe { (*mr).lkey };
        Ok((MrHandle::from_raw(mr as u64), lkey))
    }
    fn alloc_mw(&self, pd: PdHandle, mw_type: MwType) -> Result<(MwHandle, u32)> {
        // verbs.h's inline ibv_alloc_mw: the provider's op, EOPNOTSUPP without one.
        let alloc = self
            .ops()
            .alloc_mw
            .ok_or_else(|| fail("ibv_alloc_mw", "the provider has none", libc::EOPNOTSUPP))?;
        // SAFETY: a PD this backend made.
        let mw = unsafe { alloc(ptr_of(pd.to_raw()), mw_type.raw()) };
        let mw = non_null("ibv_alloc_mw", || format!("{mw_type}"), mw)?;
        // SAFETY: a live window.
        let rkey = unsafe { (*mw).rkey };
        Ok((MwHandle::from_raw(mw as u64), rkey))
    }
    fn dealloc_mw(&self, mw: MwHandle) -> Result<()> {
        let dealloc = self
            .ops()
            .dealloc_mw
            .ok_or_else(|| fail("ibv_dealloc_mw", "the provider has none", libc::EOPNOTSUPP))?;
        // SAFETY: a window this backend made.
        let rc = unsafe { dealloc(ptr_of(mw.to_raw())) };
        check("ibv_dealloc_mw", String::new, rc)
    }
    fn bind_mw(
        &self,
        qp: QpHandle,
        wr_id: u64,
        send_flags: SendFlags,
        bind: MwBind,
    ) -> Result<u32> {
        let op = self
            .ops()
            .bind_mw
            .ok_or_else(|| fail("ibv_bind_mw", "the provider has none", libc::EOPNOTSUPP))?;
        let mw: *mut sys::ibv_mw = ptr_of(bind.mw.to_raw());
        let mut b = sys::ibv_mw_bind {
            wr_id,
            send_flags: send_flags.0,
            bind_info: sys::ibv_mw_bind_info {
                mr: bind.mr.map_or(ptr::null_mut(), |mr| ptr_of(mr.to_raw())),
                addr: bind.addr,
                length: bind.length,
                mw_access_flags: bind.access.0,
            },
        };
        // SAFETY: a live QP and window this backend made; the provider picks the new R_Key
        // itself (rxe and mlx5: ibv_inc_rkey of the current one, as `bind.rkey` is).
        let rc = unsafe { op(ptr_of(qp.to_raw()), mw, &mut b) };
        check("ibv_bind_mw", String::new, rc)?;
        // SAFETY: a live window; ibv_bind_mw(3) returns the new R_Key in it.
        Ok(unsafe { (*mw).rkey })
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
            *o = convert::wc_from_c(w);
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
    fn modify_cq_moderation(&self, cq: CqHandle, count: u16, period_us: u16) -> Result<()> {
        // verbs.h's inline ibv_modify_cq: the provider's op, EOPNOTSUPP without one (rxe).
        let modify = self
            .vctx_holding(std::mem::offset_of!(sys::verbs_context, modify_cq))
            // SAFETY: the library's copy holds the member.
            .and_then(|v| unsafe { (*v).modify_cq })
            .ok_or_else(|| fail("ibv_modify_cq", "the provider has none", libc::EOPNOTSUPP))?;
        let mut attr = sys::ibv_modify_cq_attr {
            attr_mask: sys::IBV_CQ_ATTR_MODERATE,
            moderate: sys::ibv_moderate_cq {
                cq_count: count,
                cq_period: period_us,
            },
        };
        // SAFETY: a live CQ and attributes for the duration of the call.
        let rc = unsafe { modify(ptr_of::<sys::ibv_cq>(cq.to_raw()), &mut attr) };
        check(
            "ibv_modify_cq",
            || format!("{count} completions, {period_us} us"),
            rc,
        )
    }

    fn create_srq(&self, pd: PdHandle, attr: SrqAttr) -> Result<SrqHandle> {
        let mut init = sys::ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: convert::srq_attr_to_c(&attr),
        };
        // SAFETY: a live PD and a valid attribute struct.
        let srq = unsafe { (self.fns.create_srq)(ptr_of(pd.to_raw()), &mut init) };
        let srq = non_null("ibv_create_srq", || format!("{attr:?}"), srq)?;
        Ok(SrqHandle::from_raw(srq as u64))
    }
    fn modify_srq(&self, srq: SrqHandle, attr: SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let mut a = convert::srq_attr_to_c(&attr);
        let m = convert::srq_attr_mask_to_c(mask);
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
        let mut a = convert::qp_init_attr_to_c(
            &init,
            ptr_of(init.send_cq.to_raw()),
            ptr_of(init.recv_cq.to_raw()),
            init.srq.map_or(ptr::null_mut(), |s| ptr_of(s.to_raw())),
        );
        // SAFETY: a live PD; CQ/SRQ tokens from this backend.
        let qp = unsafe { (self.fns.create_qp)(ptr_of(pd.to_raw()), &mut a) };
        let qp = non_null(
            "ibv_create_qp",
            || format!("{} with {:?}", init.qp_type, init.cap),
            qp,
        )?;
        Ok((QpHandle::from_raw(qp as u64), Self::qpn_of(qp)?))
    }
    fn create_qp_atomic_write(&self, pd: PdHandle, init: QpInitAttr) -> Result<(QpHandle, Qpn)> {
        const VERB: &str = "ibv_create_qp_ex";
        if init.qp_type != QpType::Rc {
            return Err(fail(
                VERB,
                format!("ATOMIC WRITE is RC only, not {}", init.qp_type),
                libc::EINVAL,
            ));
        }
        let create = self.create_qp_ex_op().ok_or_else(|| {
            fail(
                VERB,
                format!("{}'s provider has no extended QP creation", self.name),
                libc::EOPNOTSUPP,
            )
        })?;
        let base = convert::qp_init_attr_to_c(
            &init,
            ptr_of(init.send_cq.to_raw()),
            ptr_of(init.recv_cq.to_raw()),
            init.srq.map_or(ptr::null_mut(), |s| ptr_of(s.to_raw())),
        );
        // SAFETY: plain-old-data; all-zero is valid (no optional member asked for).
        let mut a: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.qp_context = base.qp_context;
        a.send_cq = base.send_cq;
        a.recv_cq = base.recv_cq;
        a.srq = base.srq;
        a.cap = base.cap;
        a.qp_type = base.qp_type;
        a.sq_sig_all = base.sq_sig_all;
        a.comp_mask = sys::IBV_QP_INIT_ATTR_PD | sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.pd = ptr_of(pd.to_raw());
        // What ibv_post_send can post on RC, and ATOMIC WRITE, which only ibv_wr_* can.
        a.send_ops_flags = u64::from(
            sys::IBV_QP_EX_WITH_RDMA_WRITE
                | sys::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | sys::IBV_QP_EX_WITH_SEND
                | sys::IBV_QP_EX_WITH_SEND_WITH_IMM
                | sys::IBV_QP_EX_WITH_RDMA_READ
                | sys::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | sys::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | sys::IBV_QP_EX_WITH_ATOMIC_WRITE,
        );
        // SAFETY: a valid context and attribute struct; tokens from this backend.
        let qp = unsafe { create(self.ctx, &mut a) }.cast::<c_void>();
        let qp = non_null(
            VERB,
            || format!("RC with {:?} and IBV_QP_EX_WITH_ATOMIC_WRITE", init.cap),
            qp,
        )?;
        Ok((QpHandle::from_raw(qp as u64), Self::qpn_of(qp)?))
    }
    fn modify_qp(&self, qp: QpHandle, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let mut a = convert::qp_attr_to_c(attr);
        a.ah_attr = to_c_ah(&attr.ah_attr)?;
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
    fn attach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()> {
        let gid = convert::gid_to_c(mgid);
        // SAFETY: a QP this backend made; a GID on the stack.
        let rc = unsafe { (self.fns.attach_mcast)(ptr_of(qp.to_raw()), &gid, 0) };
        check("ibv_attach_mcast", || format!("{mgid}"), rc)
    }
    fn detach_mcast(&self, qp: QpHandle, mgid: Gid) -> Result<()> {
        let gid = convert::gid_to_c(mgid);
        // SAFETY: a QP this backend made; a GID on the stack.
        let rc = unsafe { (self.fns.detach_mcast)(ptr_of(qp.to_raw()), &gid, 0) };
        check("ibv_detach_mcast", || format!("{mgid}"), rc)
    }
    unsafe fn post_send(&self, qp: QpHandle, wrs: &[SendWr]) -> Result<()> {
        let post = self
            .ops()
            .post_send
            .ok_or_else(|| fail("ibv_post_send", "the provider has none", libc::EOPNOTSUPP))?;
        if wrs.is_empty() {
            return Ok(());
        }
        if wrs.iter().any(|w| w.opcode == WrOpcode::AtomicWrite) {
            // SAFETY: forwarded buffer contract.
            return unsafe { self.post_atomic_writes(qp, wrs) };
        }
        let mut chain = WrChain::send(wrs, &mut Tokens);
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: a live QP; the chain and its SGE lists live across the call; buffers
        // are the caller's contract.
        let rc = unsafe { post(ptr_of(qp.to_raw()), chain.first(), &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        Err(Error::IbverbsPost {
            verb: "ibv_post_send",
            index: chain.index_of(bad),
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
        let (event_type, element) = convert::async_event_from_c(&ev)
            .map_err(|e| fail("ibv_get_async_event", e.why, libc::EPROTO))?;
        // The object's address is its handle here; the event type says which object it is.
        let element = match element {
            CEventElement::Port(p) => EventElement::Port(p),
            CEventElement::Device => EventElement::Device,
            CEventElement::Object(addr) => {
                let raw = addr as u64;
                match event_type {
                    EventType::CqErr => EventElement::Cq(CqHandle::from_raw(raw)),
                    EventType::SrqErr | EventType::SrqLimitReached => {
                        EventElement::Srq(SrqHandle::from_raw(raw))
                    }
                    _ => EventElement::Qp(QpHandle::from_raw(raw)),
                }
            }
        };
        Ok(AsyncEvent {
            event_type,
            element,
        })
    }
    fn ack_async_event(&self, event: &AsyncEvent) -> Result<()> {
        let address = |raw: u64| CEventElement::Object(raw as usize);
        let element = match event.element {
            EventElement::Cq(h) => address(h.to_raw()),
            EventElement::Qp(h) => address(h.to_raw()),
            EventElement::Srq(h) => address(h.to_raw()),
            EventElement::Port(p) => CEventElement::Port(p),
            EventElement::Device => CEventElement::Device,
        };
        let mut ev = convert::async_event_to_c(event.event_type, element);
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
    let mut chain = WrChain::recv(wrs);
    let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
    // SAFETY: the chain and SGE lists live across the call.
    let rc = unsafe { post(target, chain.first(), &mut bad) };
    if rc == 0 {
        return Ok(());
    }
    Err(Error::IbverbsPost {
        verb,
        index: chain.index_of(bad),
        errno: if rc < 0 { errno() } else { rc },
    })
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
