//! `#[repr(C)]` mirrors of the public structs and constants of libibverbs as shipped by
//! rdma-core 44 (`<infiniband/verbs.h>`), for LP64 Linux with glibc.
//!
//! Two users: a replacement `libibverbs.so.1` (which hands these structs to unmodified C
//! programs) and code that calls the real libibverbs (through `libloading` or similar). Both
//! translate between these structs and the emulator core's types with [`convert`], the one
//! place that knows how each C field maps. The mirror itself is general: names are the C names, enum types are plain integers with
//! the enumerators as `pub const`s, and function-pointer fields are
//! `Option<unsafe extern "C" fn(...)>` with the C signatures (pointers to structs this crate
//! does not mirror are `*mut c_void`).
//!
//! Layout is checked twice: at compile time (`const` assertions of every size and offset in
//! `layout.rs`, taken from the x86_64 rdma-core 44 headers) and by a test that compiles a C
//! program against the installed `<infiniband/verbs.h>` and compares every figure. The same
//! test compares every constant; those the emulator's core also defines (QP states, WC
//! statuses, access flags …) are taken from `softroce_emu_core`, so the test proves the core
//! speaks the C values.
//!
//! The verbs ABI is append-only: structs grow at the end (and `verbs_context` grows
//! downwards, guarded by its `sz` field), so these mirrors stay valid for newer rdma-core
//! releases as long as nothing reads past the fields defined here.
//!
//! ```
//! use softroce_emu_core::{WcOpcode, WcStatus, WorkCompletion};
//! use softroce_ibverbs_abi::{convert, ibv_wc, IBV_WC_RECV, IBV_WC_SUCCESS};
//!
//! // A receive completion as the emulator reports it, as a C program sees it, and back.
//! let wc = WorkCompletion::success(7, 0x11, WcOpcode::Recv, 1024);
//! let c: ibv_wc = convert::wc_to_c(&wc);
//! assert_eq!((c.wr_id, c.byte_len, c.qp_num), (7, 1024, 0x11));
//! assert_eq!((c.status, c.opcode), (IBV_WC_SUCCESS, IBV_WC_RECV));
//! assert_eq!(convert::wc_from_c(&c).status, WcStatus::Success);
//! assert_eq!(std::mem::size_of::<ibv_wc>(), 48); // as gcc lays out <infiniband/verbs.h>
//! ```
#![allow(non_camel_case_types, non_snake_case, clippy::use_self)]
// Structs holding pthread objects (libc gives those no Debug without a feature) or raw
// function pointers tables have no useful Debug form.
#![allow(missing_debug_implementations)]
#![deny(missing_docs)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use libc::{pthread_cond_t, pthread_mutex_t};

mod consts;
pub mod convert;
pub mod kern;
mod layout;
pub mod rdmacm;

pub use consts::*;
pub use layout::{FIELD_OFFSETS, STRUCT_SIZES};

/// A `__be64` field: stored big-endian.
pub type __be64 = u64;
/// A `__be32` field: stored big-endian.
pub type __be32 = u32;
/// A `__be16` field: stored big-endian.
pub type __be16 = u16;

/// `union ibv_gid`: a 128-bit GID.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    /// The 16 bytes, network order.
    pub raw: [u8; 16],
    /// The two halves.
    pub global: ibv_gid_global,
}

impl core::fmt::Debug for ibv_gid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: every bit pattern is a valid byte array.
        let raw = unsafe { self.raw };
        write!(f, "ibv_gid({raw:02x?})")
    }
}

/// The `global` view of [`ibv_gid`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_gid_global {
    /// Subnet prefix (big-endian).
    pub subnet_prefix: __be64,
    /// Interface ID (big-endian).
    pub interface_id: __be64,
}

/// `struct ibv_gid_entry` (`ibv_query_gid_ex`, `ibv_query_gid_table`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_gid_entry {
    /// The GID.
    pub gid: ibv_gid,
    /// Its index in the table.
    pub gid_index: u32,
    /// Port.
    pub port_num: u32,
    /// `enum ibv_gid_type` (`IBV_GID_TYPE_*`).
    pub gid_type: u32,
    /// ifindex of the net device the GID belongs to.
    pub ndev_ifindex: u32,
}

/// The two reserved function pointers at the start of `struct ibv_device`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct _ibv_device_ops {
    /// Unused (historic `alloc_context`).
    pub _dummy1:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut ibv_context>,
    /// Unused (historic `free_context`).
    pub _dummy2: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
}

/// Maximum length of the name fields of [`ibv_device`] (`IBV_SYSFS_NAME_MAX`).
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// Maximum length of the path fields of [`ibv_device`] (`IBV_SYSFS_PATH_MAX`).
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`: an entry of `ibv_get_device_list`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device {
    /// Reserved.
    pub _ops: _ibv_device_ops,
    /// `enum ibv_node_type` (`IBV_NODE_*`).
    pub node_type: c_int,
    /// `enum ibv_transport_type` (`IBV_TRANSPORT_*`).
    pub transport_type: c_int,
    /// Name of the underlying kernel IB device (`mlx5_0`).
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// Name of the uverbs device (`uverbs0`).
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// Path to the infiniband_verbs class device in sysfs.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// Path to the infiniband class device in sysfs.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `ibv_context_ops.poll_cq`.
pub type ibv_poll_cq_fn =
    unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int;
/// `ibv_context_ops.req_notify_cq`.
pub type ibv_req_notify_cq_fn =
    unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int;
/// `ibv_context_ops.post_send`.
pub type ibv_post_send_fn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int;
/// `ibv_context_ops.post_recv`.
pub type ibv_post_recv_fn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int;
/// `ibv_context_ops.post_srq_recv`.
pub type ibv_post_srq_recv_fn = unsafe extern "C" fn(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int;
/// The type of the `_compat_*` slots of [`ibv_context_ops`] (never called by rdma-core 44).
pub type ibv_compat_fn = unsafe extern "C" fn() -> *mut c_void;

/// `struct ibv_context_ops`: the data-path entry points the inline wrappers of `verbs.h`
/// (`ibv_post_send`, `ibv_poll_cq`, …) call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context_ops {
    /// Compat slot.
    pub _compat_query_device: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_query_port: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_alloc_pd: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_dealloc_pd: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_reg_mr: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_rereg_mr: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_dereg_mr: Option<ibv_compat_fn>,
    /// `ibv_alloc_mw`.
    pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: c_uint) -> *mut ibv_mw>,
    /// `ibv_bind_mw`.
    pub bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int,
    >,
    /// `ibv_dealloc_mw`.
    pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
    /// Compat slot.
    pub _compat_create_cq: Option<ibv_compat_fn>,
    /// `ibv_poll_cq`.
    pub poll_cq: Option<ibv_poll_cq_fn>,
    /// `ibv_req_notify_cq`.
    pub req_notify_cq: Option<ibv_req_notify_cq_fn>,
    /// Compat slot.
    pub _compat_cq_event: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_resize_cq: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_destroy_cq: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_create_srq: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_modify_srq: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_query_srq: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_destroy_srq: Option<ibv_compat_fn>,
    /// `ibv_post_srq_recv`.
    pub post_srq_recv: Option<ibv_post_srq_recv_fn>,
    /// Compat slot.
    pub _compat_create_qp: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_query_qp: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_modify_qp: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_destroy_qp: Option<ibv_compat_fn>,
    /// `ibv_post_send`.
    pub post_send: Option<ibv_post_send_fn>,
    /// `ibv_post_recv`.
    pub post_recv: Option<ibv_post_recv_fn>,
    /// Compat slot.
    pub _compat_create_ah: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_destroy_ah: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_attach_mcast: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_detach_mcast: Option<ibv_compat_fn>,
    /// Compat slot.
    pub _compat_async_event: Option<ibv_compat_fn>,
}

/// `struct ibv_context`: an open device.
#[repr(C)]
pub struct ibv_context {
    /// The device.
    pub device: *mut ibv_device,
    /// Data-path entry points.
    pub ops: ibv_context_ops,
    /// The uverbs command fd (-1 when there is none).
    pub cmd_fd: c_int,
    /// The async event fd, pollable.
    pub async_fd: c_int,
    /// Number of completion vectors.
    pub num_comp_vectors: c_int,
    /// Library-owned lock.
    pub mutex: pthread_mutex_t,
    /// [`__VERBS_ABI_IS_EXTENDED`] when this context is the tail of a [`verbs_context`].
    pub abi_compat: *mut c_void,
}

/// `verbs_context.query_port`.
pub type verbs_query_port_fn = unsafe extern "C" fn(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int;
/// `verbs_context.query_device_ex`.
pub type verbs_query_device_ex_fn = unsafe extern "C" fn(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int;

/// `struct verbs_context`: the extended context. It grows *downwards*: new members are
/// added at the start, `sz` says how large the library's copy is, and `context` (the
/// [`ibv_context`] applications see) is always last.
#[repr(C)]
pub struct verbs_context {
    /// `ibv_query_port` (the `verbs.h` macro calls this first).
    pub query_port: Option<verbs_query_port_fn>,
    /// `ibv_advise_mr`.
    pub advise_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            advice: c_uint,
            flags: u32,
            sg_list: *mut ibv_sge,
            num_sges: u32,
        ) -> c_int,
    >,
    /// `ibv_alloc_null_mr`.
    pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
    /// `ibv_read_counters`.
    pub read_counters: Option<
        unsafe extern "C" fn(
            counters: *mut c_void,
            counters_value: *mut u64,
            ncounters: u32,
            flags: u32,
        ) -> c_int,
    >,
    /// `ibv_attach_counters_point_flow`.
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(counters: *mut c_void, attr: *mut c_void, flow: *mut c_void) -> c_int,
    >,
    /// `ibv_create_counters`.
    pub create_counters: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void,
    >,
    /// `ibv_destroy_counters`.
    pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut c_void) -> c_int>,
    /// `ibv_reg_dm_mr`.
    pub reg_dm_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    /// `ibv_alloc_dm`.
    pub alloc_dm: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            attr: *mut ibv_alloc_dm_attr,
        ) -> *mut ibv_dm,
    >,
    /// `ibv_free_dm`.
    pub free_dm: Option<unsafe extern "C" fn(dm: *mut ibv_dm) -> c_int>,
    /// `ibv_modify_flow_action_esp`.
    pub modify_flow_action_esp:
        Option<unsafe extern "C" fn(action: *mut c_void, attr: *mut c_void) -> c_int>,
    /// `ibv_destroy_flow_action`.
    pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut c_void) -> c_int>,
    /// `ibv_create_flow_action_esp`.
    pub create_flow_action_esp:
        Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void>,
    /// `ibv_modify_qp_rate_limit`.
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut c_void) -> c_int>,
    /// `ibv_alloc_parent_domain`.
    pub alloc_parent_domain:
        Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut ibv_pd>,
    /// `ibv_dealloc_td`.
    pub dealloc_td: Option<unsafe extern "C" fn(td: *mut c_void) -> c_int>,
    /// `ibv_alloc_td`.
    pub alloc_td: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void,
    >,
    /// `ibv_modify_cq`.
    pub modify_cq:
        Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int>,
    /// `ibv_post_srq_ops`.
    pub post_srq_ops: Option<
        unsafe extern "C" fn(srq: *mut ibv_srq, op: *mut c_void, bad_op: *mut *mut c_void) -> c_int,
    >,
    /// `ibv_destroy_rwq_ind_table`.
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(table: *mut c_void) -> c_int>,
    /// `ibv_create_rwq_ind_table`.
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void,
    >,
    /// `ibv_destroy_wq`.
    pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut c_void) -> c_int>,
    /// `ibv_modify_wq`.
    pub modify_wq: Option<unsafe extern "C" fn(wq: *mut c_void, attr: *mut c_void) -> c_int>,
    /// `ibv_create_wq`.
    pub create_wq: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void,
    >,
    /// `ibv_query_rt_values_ex`.
    pub query_rt_values:
        Option<unsafe extern "C" fn(context: *mut ibv_context, values: *mut c_void) -> c_int>,
    /// `ibv_create_cq_ex`.
    pub create_cq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_cq_init_attr_ex,
        ) -> *mut ibv_cq_ex,
    >,
    /// Library-private data.
    pub priv_: *mut c_void,
    /// `ibv_query_device_ex`.
    pub query_device_ex: Option<verbs_query_device_ex_fn>,
    /// `ibv_destroy_flow`.
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(flow: *mut c_void) -> c_int>,
    /// Reserved.
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    /// `ibv_create_flow`.
    pub ibv_create_flow:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut c_void) -> *mut c_void>,
    /// Reserved.
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    /// `ibv_open_qp`.
    pub open_qp: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp,
    >,
    /// `ibv_create_qp_ex` (for anything beyond a plain PD-only `comp_mask`).
    pub create_qp_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
        ) -> *mut ibv_qp,
    >,
    /// `ibv_get_srq_num`.
    pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
    /// `ibv_create_srq_ex` (for anything beyond a basic SRQ).
    pub create_srq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
        ) -> *mut ibv_srq,
    >,
    /// `ibv_open_xrcd`.
    pub open_xrcd: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            xrcd_init_attr: *mut ibv_xrcd_init_attr,
        ) -> *mut ibv_xrcd,
    >,
    /// `ibv_close_xrcd`.
    pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
    /// Reserved.
    pub _ABI_placeholder3: u64,
    /// Size of this struct as the library allocated it (must be set).
    pub sz: usize,
    /// The context applications see; must be last.
    pub context: ibv_context,
}

/// `struct ibv_device_attr` (`ibv_query_device`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    /// Firmware version, NUL-terminated.
    pub fw_ver: [c_char; 64],
    /// Node GUID (big-endian).
    pub node_guid: __be64,
    /// System image GUID (big-endian).
    pub sys_image_guid: __be64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor ID (IEEE OUI).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum QPs.
    pub max_qp: c_int,
    /// Maximum outstanding WRs per queue.
    pub max_qp_wr: c_int,
    /// `IBV_DEVICE_*` capability flags.
    pub device_cap_flags: c_uint,
    /// Maximum SGEs per WR.
    pub max_sge: c_int,
    /// Maximum SGEs per RDMA READ.
    pub max_sge_rd: c_int,
    /// Maximum CQs.
    pub max_cq: c_int,
    /// Maximum entries per CQ.
    pub max_cqe: c_int,
    /// Maximum MRs.
    pub max_mr: c_int,
    /// Maximum PDs.
    pub max_pd: c_int,
    /// Maximum outstanding READ/atomic per QP as responder.
    pub max_qp_rd_atom: c_int,
    /// EE equivalent.
    pub max_ee_rd_atom: c_int,
    /// Responder resources for READ/atomic.
    pub max_res_rd_atom: c_int,
    /// Maximum outstanding READ/atomic per QP as requester.
    pub max_qp_init_rd_atom: c_int,
    /// EE equivalent.
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: c_uint,
    /// Maximum EE contexts.
    pub max_ee: c_int,
    /// Maximum RDDs.
    pub max_rdd: c_int,
    /// Maximum memory windows.
    pub max_mw: c_int,
    /// Maximum raw IPv6 QPs.
    pub max_raw_ipv6_qp: c_int,
    /// Maximum raw Ethertype QPs.
    pub max_raw_ethy_qp: c_int,
    /// Maximum multicast groups.
    pub max_mcast_grp: c_int,
    /// Maximum QPs per multicast group.
    pub max_mcast_qp_attach: c_int,
    /// Maximum QPs attached to multicast groups.
    pub max_total_mcast_qp_attach: c_int,
    /// Maximum AHs.
    pub max_ah: c_int,
    /// Maximum FMRs.
    pub max_fmr: c_int,
    /// Maximum remaps per FMR.
    pub max_map_per_fmr: c_int,
    /// Maximum SRQs.
    pub max_srq: c_int,
    /// Maximum WRs per SRQ.
    pub max_srq_wr: c_int,
    /// Maximum SGEs per SRQ WR.
    pub max_srq_sge: c_int,
    /// Maximum P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_query_device_ex_input {
    /// Must be 0.
    pub comp_mask: u32,
}

/// Per-transport ODP capabilities.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_odp_caps_per_transport {
    /// RC.
    pub rc_odp_caps: u32,
    /// UC.
    pub uc_odp_caps: u32,
    /// UD.
    pub ud_odp_caps: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_odp_caps {
    /// General capabilities.
    pub general_caps: u64,
    /// Per transport.
    pub per_transport_caps: ibv_odp_caps_per_transport,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_tso_caps {
    /// Maximum TSO payload.
    pub max_tso: u32,
    /// QP types supporting TSO.
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_rss_caps {
    /// QP types supporting RSS.
    pub supported_qpts: u32,
    /// Maximum indirection tables.
    pub max_rwq_indirection_tables: u32,
    /// Maximum indirection table size.
    pub max_rwq_indirection_table_size: u32,
    /// Hashable fields.
    pub rx_hash_fields_mask: u64,
    /// Hash functions.
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_packet_pacing_caps {
    /// Minimum rate (kbps).
    pub qp_rate_limit_min: u32,
    /// Maximum rate (kbps).
    pub qp_rate_limit_max: u32,
    /// QP types supporting pacing.
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_tm_caps {
    /// Maximum rendezvous header size.
    pub max_rndv_hdr_size: u32,
    /// Maximum tags.
    pub max_num_tags: u32,
    /// `IBV_TM_CAP_*`.
    pub flags: u32,
    /// Maximum outstanding operations.
    pub max_ops: u32,
    /// Maximum SGEs.
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_cq_moderation_caps {
    /// Maximum completion count.
    pub max_cq_count: u16,
    /// Maximum period (µs).
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_pci_atomic_caps {
    /// Fetch-and-add sizes.
    pub fetch_add: u16,
    /// Compare-and-swap sizes.
    pub compare_swap: u16,
    /// Swap sizes.
    pub swap: u16,
}

/// `struct ibv_device_attr_ex` (`ibv_query_device_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr_ex {
    /// The basic attributes.
    pub orig_attr: ibv_device_attr,
    /// Which extended fields are valid.
    pub comp_mask: u32,
    /// ODP.
    pub odp_caps: ibv_odp_caps,
    /// Completion timestamp mask.
    pub completion_timestamp_mask: u64,
    /// HCA core clock (kHz).
    pub hca_core_clock: u64,
    /// Extended capability flags.
    pub device_cap_flags_ex: u64,
    /// TSO.
    pub tso_caps: ibv_tso_caps,
    /// RSS.
    pub rss_caps: ibv_rss_caps,
    /// Maximum WQs of type RQ.
    pub max_wq_type_rq: u32,
    /// Packet pacing.
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    /// `IBV_RAW_PACKET_CAP_*`.
    pub raw_packet_caps: u32,
    /// Tag matching.
    pub tm_caps: ibv_tm_caps,
    /// CQ moderation.
    pub cq_mod_caps: ibv_cq_moderation_caps,
    /// Device memory size.
    pub max_dm_size: u64,
    /// PCIe atomics.
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    /// XRC ODP.
    pub xrc_odp_caps: u32,
    /// Port count beyond 255.
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr` (`ibv_query_port`). Programs built against older headers pass the
/// 48-byte prefix ending before `port_cap_flags2`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// `IBV_PORT_*` capability flags.
    pub port_cap_flags: u32,
    /// Maximum message size.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID.
    pub lid: u16,
    /// SM LID.
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// Maximum VLs.
    pub max_vl_num: u8,
    /// SM SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active width code.
    pub active_width: u8,
    /// Active speed code.
    pub active_speed: u8,
    /// Physical state (5 = LinkUp).
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// `IBV_QPF_*`.
    pub flags: u8,
    /// `IBV_PORT_*2` capability flags.
    pub port_cap_flags2: u16,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    /// The context.
    pub context: *mut ibv_context,
    /// The pollable fd.
    pub fd: c_int,
    /// CQs using the channel (library-owned).
    pub refcnt: c_int,
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    /// The context.
    pub context: *mut ibv_context,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_td`: a thread domain.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_td {
    /// The context.
    pub context: *mut ibv_context,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_td_init_attr {
    /// No optional fields exist.
    pub comp_mask: u32,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_parent_domain_init_attr {
    /// The protection domain the parent domain extends.
    pub pd: *mut ibv_pd,
    /// A thread domain, or NULL.
    pub td: *mut ibv_td,
    /// `IBV_PARENT_DOMAIN_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// Custom allocator.
    pub alloc: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            size: usize,
            alignment: usize,
            resource_type: u64,
        ) -> *mut c_void,
    >,
    /// Custom free.
    pub free: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            pd_context: *mut c_void,
            ptr: *mut c_void,
            resource_type: u64,
        ),
    >,
    /// The application's context for the allocators.
    pub pd_context: *mut c_void,
}

/// `struct ibv_xrcd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_xrcd {
    /// The context.
    pub context: *mut ibv_context,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    /// The context.
    pub context: *mut ibv_context,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Start address.
    pub addr: *mut c_void,
    /// Length in bytes.
    pub length: usize,
    /// Kernel handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mw {
    /// The context.
    pub context: *mut ibv_context,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Remote key.
    pub rkey: u32,
    /// Kernel handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: u32,
}

/// `struct ibv_moderate_cq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_moderate_cq {
    /// Completions per event.
    pub cq_count: u16,
    /// Period (µs).
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr`: `ibv_modify_cq`'s argument.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_modify_cq_attr {
    /// `IBV_CQ_ATTR_MODERATE`: `moderate` is set.
    pub attr_mask: u32,
    /// Event moderation.
    pub moderate: ibv_moderate_cq,
}

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_alloc_dm_attr {
    /// Bytes.
    pub length: usize,
    /// Log2 of the alignment of the memory's start.
    pub log_align_req: u32,
    /// Valid fields beyond these (none).
    pub comp_mask: u32,
}

/// `struct ibv_dm`: verbs.h's inline `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm` call its
/// function pointers.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_dm {
    /// The context.
    pub context: *mut ibv_context,
    /// `ibv_memcpy_to_dm`.
    pub memcpy_to_dm: Option<
        unsafe extern "C" fn(
            dm: *mut ibv_dm,
            dm_offset: u64,
            host_addr: *const c_void,
            length: usize,
        ) -> c_int,
    >,
    /// `ibv_memcpy_from_dm`.
    pub memcpy_from_dm: Option<
        unsafe extern "C" fn(
            host_addr: *mut c_void,
            dm: *mut ibv_dm,
            dm_offset: u64,
            length: usize,
        ) -> c_int,
    >,
    /// Valid fields beyond these (none).
    pub comp_mask: u32,
    /// Kernel handle (`ibv_import_dm`).
    pub handle: u32,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind_info {
    /// The MR the window lies in.
    pub mr: *mut ibv_mr,
    /// Start.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// Access flags.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind {
    /// Work request ID.
    pub wr_id: u64,
    /// `IBV_SEND_*`.
    pub send_flags: c_uint,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_global_route`: the GRH part of an address vector.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_global_route {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_grh`: the 40-byte GRH at the start of a UD receive buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_grh {
    /// Version, traffic class, flow label (big-endian).
    pub version_tclass_flow: __be32,
    /// Payload length (big-endian).
    pub paylen: __be16,
    /// Next header.
    pub next_hdr: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
}

/// `struct ibv_ah_attr`: an address vector.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_ah_attr {
    /// GRH fields (used when `is_global`).
    pub grh: ibv_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate (`enum ibv_rate`).
    pub static_rate: u8,
    /// Whether `grh` is used.
    pub is_global: u8,
    /// Port.
    pub port_num: u8,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    /// The context.
    pub context: *mut ibv_context,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    /// The context.
    pub context: *mut ibv_context,
    /// The completion channel, if any.
    pub channel: *mut ibv_comp_channel,
    /// The user's context pointer.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Number of entries.
    pub cqe: c_int,
    /// Library-owned lock.
    pub mutex: pthread_mutex_t,
    /// Library-owned condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged (library-owned).
    pub comp_events_completed: u32,
    /// Async events acknowledged (library-owned).
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_poll_cq_attr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_values_ex` (`ibv_query_rt_values_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_values_ex {
    /// `IBV_VALUES_MASK_*` asked for on input, answered on output.
    pub comp_mask: u32,
    /// The device's raw clock, in HCA clock units split as a timespec.
    pub raw_clock: libc::timespec,
}

/// `struct ibv_cq_init_attr_ex` (`ibv_create_cq_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    /// Minimum entries.
    pub cqe: u32,
    /// The user's context pointer.
    pub cq_context: *mut c_void,
    /// Completion channel, or NULL.
    pub channel: *mut ibv_comp_channel,
    /// Completion vector.
    pub comp_vector: u32,
    /// `IBV_WC_EX_WITH_*` fields wanted.
    pub wc_flags: u64,
    /// `IBV_CQ_INIT_ATTR_MASK_*`.
    pub comp_mask: u32,
    /// `IBV_CREATE_CQ_ATTR_*`.
    pub flags: u32,
    /// Parent domain.
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_cq_ex`: a CQ polled with `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll`.
#[repr(C)]
pub struct ibv_cq_ex {
    /// The context.
    pub context: *mut ibv_context,
    /// The completion channel, if any.
    pub channel: *mut ibv_comp_channel,
    /// The user's context pointer.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Number of entries.
    pub cqe: c_int,
    /// Library-owned lock.
    pub mutex: pthread_mutex_t,
    /// Library-owned condition.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
    /// Which optional members are valid.
    pub comp_mask: u32,
    /// Status of the current completion.
    pub status: u32,
    /// WR ID of the current completion.
    pub wr_id: u64,
    /// Start polling.
    pub start_poll:
        Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int>,
    /// Next completion.
    pub next_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_int>,
    /// End polling.
    pub end_poll: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex)>,
    /// Opcode (`enum ibv_wc_opcode`).
    pub read_opcode: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_uint>,
    /// Vendor error.
    pub read_vendor_err: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    /// Byte length.
    pub read_byte_len: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    /// Immediate data.
    pub read_imm_data: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> __be32>,
    /// QP number.
    pub read_qp_num: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    /// Source QP.
    pub read_src_qp: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    /// Flags.
    pub read_wc_flags: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> c_uint>,
    /// Source LID.
    pub read_slid: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    /// SL.
    pub read_sl: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
    /// DLID path bits.
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u8>,
    /// Completion timestamp.
    pub read_completion_ts: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
    /// CVLAN.
    pub read_cvlan: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u16>,
    /// Flow tag.
    pub read_flow_tag: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u32>,
    /// Tag-matching info.
    pub read_tm_info: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex, tm_info: *mut c_void)>,
    /// Wall-clock timestamp.
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(current: *mut ibv_cq_ex) -> u64>,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_srq_attr {
    /// Maximum outstanding WRs.
    pub max_wr: u32,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Limit event threshold.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_srq_init_attr {
    /// The user's context pointer.
    pub srq_context: *mut c_void,
    /// Requested attributes (updated with the real ones).
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_tm_cap {
    /// Maximum tags.
    pub max_num_tags: u32,
    /// Maximum operations.
    pub max_ops: u32,
}

/// `struct ibv_ops_wr`'s `tm.add`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_ops_wr_tm_add {
    /// Returned in the tagged receive's completion.
    pub recv_wr_id: u64,
    /// The tag's buffer.
    pub sg_list: *mut ibv_sge,
    /// Entries of `sg_list`.
    pub num_sge: c_int,
    /// Matching value.
    pub tag: u64,
    /// Matching mask.
    pub mask: u64,
}

/// `struct ibv_ops_wr`'s `tm`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_ops_wr_tm {
    /// Unexpected messages handled by software (`IBV_OPS_TM_SYNC`).
    pub unexpected_cnt: u32,
    /// Input of DEL, output of ADD.
    pub handle: u32,
    /// ADD.
    pub add: ibv_ops_wr_tm_add,
}

/// `struct ibv_ops_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_ops_wr {
    /// User's identifier.
    pub wr_id: u64,
    /// Next in the list.
    pub next: *mut ibv_ops_wr,
    /// `enum ibv_ops_wr_opcode`.
    pub opcode: u32,
    /// `IBV_OPS_*`.
    pub flags: c_int,
    /// Tag matching operands.
    pub tm: ibv_ops_wr_tm,
}

/// `struct ibv_wc_tm_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_wc_tm_info {
    /// The message's tag.
    pub tag: u64,
    /// The TMH's `app_ctx`.
    pub priv_: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    /// The user's context pointer.
    pub srq_context: *mut c_void,
    /// Requested attributes.
    pub attr: ibv_srq_attr,
    /// `IBV_SRQ_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: u32,
    /// PD.
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// CQ (XRC).
    pub cq: *mut ibv_cq,
    /// Tag matching.
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    /// The context.
    pub context: *mut ibv_context,
    /// The user's context pointer.
    pub srq_context: *mut c_void,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
    /// Library-owned lock.
    pub mutex: pthread_mutex_t,
    /// Library-owned condition.
    pub cond: pthread_cond_t,
    /// Async events acknowledged (library-owned).
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_cap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (`ibv_create_qp`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    /// The user's context pointer.
    pub qp_context: *mut c_void,
    /// CQ for send completions.
    pub send_cq: *mut ibv_cq,
    /// CQ for receive completions.
    pub recv_cq: *mut ibv_cq,
    /// SRQ, or NULL.
    pub srq: *mut ibv_srq,
    /// Requested capacities (updated with the real ones).
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Every send WR generates a completion.
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_rx_hash_conf {
    /// Hash function.
    pub rx_hash_function: u8,
    /// Key length.
    pub rx_hash_key_len: u8,
    /// Key.
    pub rx_hash_key: *mut u8,
    /// Hashed fields.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex` (`ibv_create_qp_ex`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    /// The user's context pointer.
    pub qp_context: *mut c_void,
    /// CQ for send completions.
    pub send_cq: *mut ibv_cq,
    /// CQ for receive completions.
    pub recv_cq: *mut ibv_cq,
    /// SRQ, or NULL.
    pub srq: *mut ibv_srq,
    /// Requested capacities.
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Every send WR generates a completion.
    pub sq_sig_all: c_int,
    /// `IBV_QP_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// PD.
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// `IBV_QP_CREATE_*`.
    pub create_flags: u32,
    /// TSO header size.
    pub max_tso_header: u16,
    /// RSS indirection table.
    pub rwq_ind_tbl: *mut c_void,
    /// RSS hash.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// Source QPN.
    pub source_qpn: u32,
    /// `IBV_QP_EX_WITH_*`.
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_open_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_open_attr {
    /// `IBV_QP_OPEN_ATTR_*`.
    pub comp_mask: u32,
    /// QP number.
    pub qp_num: u32,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// The user's context pointer.
    pub qp_context: *mut c_void,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_xrcd_init_attr {
    /// `IBV_XRCD_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// File the domain is tied to.
    pub fd: c_int,
    /// `O_CREAT` etc.
    pub oflags: c_int,
}

/// `struct ibv_qp_attr` (`ibv_modify_qp`, `ibv_query_qp`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// `IBV_ACCESS_*` for remote operations.
    pub qp_access_flags: c_uint,
    /// Capacities.
    pub cap: ibv_qp_cap,
    /// Primary path.
    pub ah_attr: ibv_ah_attr,
    /// Alternate path.
    pub alt_ah_attr: ibv_ah_attr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD async notification.
    pub en_sqd_async_notify: u8,
    /// SQ draining (query).
    pub sq_draining: u8,
    /// Outstanding READ/atomic as requester.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit (kbps).
    pub rate_limit: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    /// The context.
    pub context: *mut ibv_context,
    /// The user's context pointer.
    pub qp_context: *mut c_void,
    /// The PD.
    pub pd: *mut ibv_pd,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ, or NULL.
    pub srq: *mut ibv_srq,
    /// Kernel handle.
    pub handle: u32,
    /// QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state` as last set through the library.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Library-owned lock.
    pub mutex: pthread_mutex_t,
    /// Library-owned condition.
    pub cond: pthread_cond_t,
    /// Async events acknowledged (library-owned).
    pub events_completed: u32,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_data_buf {
    /// Start.
    pub addr: *mut c_void,
    /// Length.
    pub length: usize,
}

/// `struct ibv_qp_ex`: a QP posted with the `ibv_wr_*` functions (`ibv_qp_to_qp_ex`).
#[repr(C)]
pub struct ibv_qp_ex {
    /// The QP.
    pub qp_base: ibv_qp,
    /// Which optional members are valid.
    pub comp_mask: u64,
    /// WR ID of the WR being built (written by the application).
    pub wr_id: u64,
    /// `IBV_SEND_*` of the WR being built (written by the application).
    pub wr_flags: c_uint,
    /// `ibv_wr_atomic_cmp_swp`.
    pub wr_atomic_cmp_swp: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            compare: u64,
            swap: u64,
        ),
    >,
    /// `ibv_wr_atomic_fetch_add`.
    pub wr_atomic_fetch_add:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64)>,
    /// `ibv_wr_bind_mw`.
    pub wr_bind_mw: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            mw: *mut ibv_mw,
            rkey: u32,
            bind_info: *const ibv_mw_bind_info,
        ),
    >,
    /// `ibv_wr_local_inv`.
    pub wr_local_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    /// `ibv_wr_rdma_read`.
    pub wr_rdma_read: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    /// `ibv_wr_rdma_write`.
    pub wr_rdma_write:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64)>,
    /// `ibv_wr_rdma_write_imm`.
    pub wr_rdma_write_imm: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm_data: __be32),
    >,
    /// `ibv_wr_send`.
    pub wr_send: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    /// `ibv_wr_send_imm`.
    pub wr_send_imm: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, imm_data: __be32)>,
    /// `ibv_wr_send_inv`.
    pub wr_send_inv: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, invalidate_rkey: u32)>,
    /// `ibv_wr_send_tso`.
    pub wr_send_tso:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16)>,
    /// `ibv_wr_set_ud_addr`.
    pub wr_set_ud_addr: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            ah: *mut ibv_ah,
            remote_qpn: u32,
            remote_qkey: u32,
        ),
    >,
    /// `ibv_wr_set_xrc_srqn`.
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, remote_srqn: u32)>,
    /// `ibv_wr_set_inline_data`.
    pub wr_set_inline_data:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize)>,
    /// `ibv_wr_set_inline_data_list`.
    pub wr_set_inline_data_list: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf),
    >,
    /// `ibv_wr_set_sge`.
    pub wr_set_sge:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32)>,
    /// `ibv_wr_set_sge_list`.
    pub wr_set_sge_list:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge)>,
    /// `ibv_wr_start`.
    pub wr_start: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    /// `ibv_wr_complete`.
    pub wr_complete: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex) -> c_int>,
    /// `ibv_wr_abort`.
    pub wr_abort: Option<unsafe extern "C" fn(qp: *mut ibv_qp_ex)>,
    /// `ibv_wr_atomic_write`.
    pub wr_atomic_write: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp_ex,
            rkey: u32,
            remote_addr: u64,
            atomic_wr: *const c_void,
        ),
    >,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_sge {
    /// Start address.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// `wr.rdma` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_rdma {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.atomic` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_atomic {
    /// Remote address.
    pub remote_addr: u64,
    /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD) operand.
    pub compare_add: u64,
    /// Swap operand.
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.ud` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_ud {
    /// Address handle.
    pub ah: *mut ibv_ah,
    /// Destination QP.
    pub remote_qpn: u32,
    /// Q_Key.
    pub remote_qkey: u32,
}

/// The `wr` union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    /// RDMA WRITE/READ.
    pub rdma: ibv_send_wr_rdma,
    /// Atomics.
    pub atomic: ibv_send_wr_atomic,
    /// UD.
    pub ud: ibv_send_wr_ud,
}

/// `qp_type.xrc` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_send_wr_xrc {
    /// Remote SRQ number.
    pub remote_srqn: u32,
}

/// The `qp_type` union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    /// XRC.
    pub xrc: ibv_send_wr_xrc,
}

/// `bind_mw` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    /// The window.
    pub mw: *mut ibv_mw,
    /// Its new rkey.
    pub rkey: u32,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_tso {
    /// Header.
    pub hdr: *mut c_void,
    /// Header size.
    pub hdr_sz: u16,
    /// MSS.
    pub mss: u16,
}

/// The `bind_mw`/`tso` union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ext {
    /// Memory window bind.
    pub bind_mw: ibv_send_wr_bind_mw,
    /// TSO.
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    /// Caller's ID.
    pub wr_id: u64,
    /// Next WR, or NULL.
    pub next: *mut ibv_send_wr,
    /// Scatter/gather list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    /// `IBV_SEND_*`.
    pub send_flags: c_uint,
    /// Immediate data (big-endian), or the rkey to invalidate.
    pub imm_data: __be32,
    /// Operation-specific fields.
    pub wr: ibv_send_wr_wr,
    /// Transport-specific fields.
    pub qp_type: ibv_send_wr_qp_type,
    /// Memory window bind / TSO.
    pub ext: ibv_send_wr_ext,
}

impl core::fmt::Debug for ibv_send_wr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_send_wr")
            .field("wr_id", &self.wr_id)
            .field("opcode", &self.opcode)
            .field("num_sge", &self.num_sge)
            .field("send_flags", &self.send_flags)
            .finish_non_exhaustive()
    }
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_recv_wr {
    /// Caller's ID.
    pub wr_id: u64,
    /// Next WR, or NULL.
    pub next: *mut ibv_recv_wr,
    /// Scatter/gather list.
    pub sg_list: *mut ibv_sge,
    /// Entries in `sg_list`.
    pub num_sge: c_int,
}

/// `struct ibv_wc`: a work completion.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_wc {
    /// Caller's ID of the WR.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Immediate data (big-endian) or the invalidated rkey (a union in C).
    pub imm_data: __be32,
    /// Local QP number.
    pub qp_num: u32,
    /// Remote QP number (UD).
    pub src_qp: u32,
    /// `IBV_WC_*` flags.
    pub wc_flags: c_uint,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
}

/// The `element` union of [`ibv_async_event`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    /// CQ events.
    pub cq: *mut ibv_cq,
    /// QP events.
    pub qp: *mut ibv_qp,
    /// SRQ events.
    pub srq: *mut ibv_srq,
    /// WQ events.
    pub wq: *mut c_void,
    /// Port events.
    pub port_num: c_int,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    /// What the event is about.
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

impl core::fmt::Debug for ibv_async_event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_async_event")
            .field("event_type", &self.event_type)
            .finish_non_exhaustive()
    }
}
