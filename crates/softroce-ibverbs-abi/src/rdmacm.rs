//! `#[repr(C)]` mirrors of librdmacm's public structs and constants (rdma-core 44,
//! `<rdma/rdma_cma.h>` and the path record of `<infiniband/sa.h>`), and the table through
//! which softroce's `librdmacm.so.1` reaches the connection manager inside the drop-in
//! `libibverbs.so.1`.
//!
//! Why a table: an `rdma_cm_id` hands out the drop-in's own `ibv_context`, `ibv_pd` and
//! `ibv_qp`, and its connections run on the drop-in's devices, so the CM has to live in the
//! same library as those objects. `librdmacm.so.1` is a thin library with rdma-core's export
//! table whose functions call through [`RdmacmEntryPoints`]; [`rdmacm_entry_points!`](crate::rdmacm_entry_points) lists
//! every function once, and both sides are generated from that list.
//!
//! Sizes and offsets are checked at compile time (`layout.rs`) and against the installed
//! header by `tests/layout_matches_verbs_h.rs`, like the verbs mirrors.

use core::ffi::{c_char, c_int, c_void};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage};

use crate::{
    __be16, __be32, __be64, ibv_ah_attr, ibv_context, ibv_gid, ibv_pd, ibv_qp, ibv_qp_attr,
    ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_srq_init_attr, ibv_srq_init_attr_ex,
};

pub use crate::layout::rdmacm::{FIELD_OFFSETS, STRUCT_SIZES};

/// `enum rdma_cm_event_type`: address resolved.
pub const RDMA_CM_EVENT_ADDR_RESOLVED: c_int = 0;
/// Address resolution failed.
pub const RDMA_CM_EVENT_ADDR_ERROR: c_int = 1;
/// Route resolved.
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: c_int = 2;
/// Route resolution failed.
pub const RDMA_CM_EVENT_ROUTE_ERROR: c_int = 3;
/// A connection request arrived on a listener.
pub const RDMA_CM_EVENT_CONNECT_REQUEST: c_int = 4;
/// A reply arrived for an id without a QP (the user sends the RTU with `rdma_accept`).
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: c_int = 5;
/// Establishing the connection failed.
pub const RDMA_CM_EVENT_CONNECT_ERROR: c_int = 6;
/// The remote side did not answer.
pub const RDMA_CM_EVENT_UNREACHABLE: c_int = 7;
/// The remote side rejected the request; `status` is the IB reject reason.
pub const RDMA_CM_EVENT_REJECTED: c_int = 8;
/// The connection is established.
pub const RDMA_CM_EVENT_ESTABLISHED: c_int = 9;
/// The connection was disconnected.
pub const RDMA_CM_EVENT_DISCONNECTED: c_int = 10;
/// The device went away.
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: c_int = 11;
/// A multicast join completed.
pub const RDMA_CM_EVENT_MULTICAST_JOIN: c_int = 12;
/// A multicast group failed.
pub const RDMA_CM_EVENT_MULTICAST_ERROR: c_int = 13;
/// The address's network device changed.
pub const RDMA_CM_EVENT_ADDR_CHANGE: c_int = 14;
/// The QP left time-wait and may be reused.
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: c_int = 15;
/// `rdma_resolve_addrinfo` finished: `rdma_query_addrinfo` has the result (RDMACM_1.4).
pub const RDMA_CM_EVENT_ADDRINFO_RESOLVED: c_int = 16;
/// `rdma_resolve_addrinfo` failed (RDMACM_1.4).
pub const RDMA_CM_EVENT_ADDRINFO_ERROR: c_int = 17;
/// An event the application wrote with `rdma_write_cm_event`; `param.arg` is its value
/// (RDMACM_1.4).
pub const RDMA_CM_EVENT_USER: c_int = 18;

/// `enum rdma_port_space`: IPoIB.
pub const RDMA_PS_IPOIB: c_int = 0x0002;
/// Reliable connected, TCP-like port numbers.
pub const RDMA_PS_TCP: c_int = 0x0106;
/// Unreliable datagram, UDP-like port numbers.
pub const RDMA_PS_UDP: c_int = 0x0111;
/// Any QP type, IB service IDs.
pub const RDMA_PS_IB: c_int = 0x013F;

/// The Q_Key rdma_cm gives UD QPs of `RDMA_PS_UDP`.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// `RDMA_MAX_RESP_RES`: the most responder resources a connection parameter may ask for.
pub const RDMA_MAX_RESP_RES: c_int = 0xFF;
/// `RDMA_MAX_INIT_DEPTH`: the most initiator depth a connection parameter may ask for.
pub const RDMA_MAX_INIT_DEPTH: c_int = 0xFF;

/// `rdma_cm_join_mc_attr_ex.addr` is set.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
/// `rdma_cm_join_mc_attr_ex.join_flags` is set.
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
/// The first `comp_mask` bit librdmacm does not know.
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
/// Join to send and receive.
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
/// Join to send only: the QP is not attached.
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
/// The first join flag librdmacm does not know.
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

/// `rdma_getaddrinfo` hint: the address is for a passive (listening) side.
pub const RAI_PASSIVE: c_int = 0x1;
/// `rdma_getaddrinfo` hint: the node is a numeric address, do not resolve names.
pub const RAI_NUMERICHOST: c_int = 0x2;
/// `rdma_getaddrinfo` hint: do not resolve a route.
pub const RAI_NOROUTE: c_int = 0x4;
/// `rdma_getaddrinfo` hint: `ai_family` holds an RDMA address family.
pub const RAI_FAMILY: c_int = 0x8;
/// `RAI_SA`: `rdma_resolve_addrinfo` asks the InfiniBand subnet administrator (RDMACM_1.4).
pub const RAI_SA: c_int = 0x10;
/// `RAI_DNS`: `rdma_resolve_addrinfo` resolves by DNS, the default (RDMACM_1.4).
pub const RAI_DNS: c_int = 0x20;

/// `rdma_set_option` level: the id itself.
pub const RDMA_OPTION_ID: c_int = 0;
/// `rdma_set_option` level: InfiniBand.
pub const RDMA_OPTION_IB: c_int = 1;
/// `RDMA_OPTION_ID` option: type of service (`u8`).
pub const RDMA_OPTION_ID_TOS: c_int = 0;
/// `RDMA_OPTION_ID` option: reuse the address (`int`).
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
/// `RDMA_OPTION_ID` option: IPv6 only (`int`).
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
/// `RDMA_OPTION_ID` option: the QP's local ACK timeout exponent (`u8`).
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
/// `RDMA_OPTION_IB` option: path records (`struct ibv_path_data[]`).
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `ibv_path_data.flags` (`<infiniband/sa.h>`): the record is for the GMP (CM) traffic.
pub const IBV_PATH_FLAG_GMP: u32 = 1 << 0;
/// `ibv_path_data.flags`: the primary path.
pub const IBV_PATH_FLAG_PRIMARY: u32 = 1 << 1;
/// `ibv_path_data.flags`: the alternate path.
pub const IBV_PATH_FLAG_ALTERNATE: u32 = 1 << 2;
/// `ibv_path_data.flags`: from this side to the peer.
pub const IBV_PATH_FLAG_OUTBOUND: u32 = 1 << 3;
/// `ibv_path_data.flags`: from the peer to this side.
pub const IBV_PATH_FLAG_INBOUND: u32 = 1 << 4;
/// `ibv_path_data.flags`: the reverse of an inbound path.
pub const IBV_PATH_FLAG_INBOUND_REVERSE: u32 = 1 << 5;
/// `ibv_path_data.flags`: both ways.
pub const IBV_PATH_FLAG_BIDIRECTIONAL: u32 = IBV_PATH_FLAG_OUTBOUND | IBV_PATH_FLAG_INBOUND_REVERSE;

/// Every constant above that `<rdma/rdma_cma.h>` defines, as `(C name, value)`: what the C
/// comparison test checks.
pub static CONSTANTS: &[(&str, i64)] = &[
    (
        "RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_RESOLVED as i64,
    ),
    ("RDMA_CM_EVENT_ADDR_ERROR", RDMA_CM_EVENT_ADDR_ERROR as i64),
    (
        "RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_RESOLVED as i64,
    ),
    (
        "RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_ROUTE_ERROR as i64,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_REQUEST as i64,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_RESPONSE as i64,
    ),
    (
        "RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_CONNECT_ERROR as i64,
    ),
    (
        "RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_UNREACHABLE as i64,
    ),
    ("RDMA_CM_EVENT_REJECTED", RDMA_CM_EVENT_REJECTED as i64),
    (
        "RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_ESTABLISHED as i64,
    ),
    (
        "RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DISCONNECTED as i64,
    ),
    (
        "RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_DEVICE_REMOVAL as i64,
    ),
    (
        "RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_JOIN as i64,
    ),
    (
        "RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_MULTICAST_ERROR as i64,
    ),
    (
        "RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_ADDR_CHANGE as i64,
    ),
    (
        "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        RDMA_CM_EVENT_TIMEWAIT_EXIT as i64,
    ),
    ("RDMA_PS_IPOIB", RDMA_PS_IPOIB as i64),
    ("RDMA_PS_TCP", RDMA_PS_TCP as i64),
    ("RDMA_PS_UDP", RDMA_PS_UDP as i64),
    ("RDMA_PS_IB", RDMA_PS_IB as i64),
    ("RDMA_UDP_QKEY", RDMA_UDP_QKEY as i64),
    ("RDMA_MAX_RESP_RES", RDMA_MAX_RESP_RES as i64),
    ("RDMA_MAX_INIT_DEPTH", RDMA_MAX_INIT_DEPTH as i64),
    ("RAI_PASSIVE", RAI_PASSIVE as i64),
    ("RAI_NUMERICHOST", RAI_NUMERICHOST as i64),
    ("RAI_NOROUTE", RAI_NOROUTE as i64),
    ("RAI_FAMILY", RAI_FAMILY as i64),
    ("RDMA_OPTION_ID", RDMA_OPTION_ID as i64),
    ("RDMA_OPTION_IB", RDMA_OPTION_IB as i64),
    ("RDMA_OPTION_ID_TOS", RDMA_OPTION_ID_TOS as i64),
    ("RDMA_OPTION_ID_REUSEADDR", RDMA_OPTION_ID_REUSEADDR as i64),
    ("RDMA_OPTION_ID_AFONLY", RDMA_OPTION_ID_AFONLY as i64),
    (
        "RDMA_OPTION_ID_ACK_TIMEOUT",
        RDMA_OPTION_ID_ACK_TIMEOUT as i64,
    ),
    ("RDMA_OPTION_IB_PATH", RDMA_OPTION_IB_PATH as i64),
    ("IBV_PATH_FLAG_GMP", IBV_PATH_FLAG_GMP as i64),
    ("IBV_PATH_FLAG_PRIMARY", IBV_PATH_FLAG_PRIMARY as i64),
    ("IBV_PATH_FLAG_ALTERNATE", IBV_PATH_FLAG_ALTERNATE as i64),
    ("IBV_PATH_FLAG_OUTBOUND", IBV_PATH_FLAG_OUTBOUND as i64),
    ("IBV_PATH_FLAG_INBOUND", IBV_PATH_FLAG_INBOUND as i64),
    (
        "IBV_PATH_FLAG_INBOUND_REVERSE",
        IBV_PATH_FLAG_INBOUND_REVERSE as i64,
    ),
    (
        "IBV_PATH_FLAG_BIDIRECTIONAL",
        IBV_PATH_FLAG_BIDIRECTIONAL as i64,
    ),
];

/// `struct rdma_ib_addr`: the GIDs and P_Key of a resolved address.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_ib_addr {
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
    /// P_Key (big-endian).
    pub pkey: __be16,
}

/// The source half of `struct rdma_addr` (an anonymous union in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_sockaddr {
    /// Generic view.
    pub addr: sockaddr,
    /// IPv4 view.
    pub sin: sockaddr_in,
    /// IPv6 view.
    pub sin6: sockaddr_in6,
    /// The storage the union is sized by.
    pub storage: sockaddr_storage,
}

impl core::fmt::Debug for rdma_sockaddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: every view starts with the family; any bit pattern is a valid u16.
        let family = unsafe { self.addr.sa_family };
        write!(f, "rdma_sockaddr(family {family})")
    }
}

/// `struct rdma_addr`: the source and destination addresses of an id.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_addr {
    /// `src_addr` / `src_sin` / `src_sin6` / `src_storage`.
    pub src: rdma_sockaddr,
    /// `dst_addr` / `dst_sin` / `dst_sin6` / `dst_storage`.
    pub dst: rdma_sockaddr,
    /// `addr.ibaddr`.
    pub ibaddr: rdma_ib_addr,
}

/// `struct ibv_path_record` (`<infiniband/sa.h>`): a path record as the SA sends it
/// (big-endian, packed fields), what `RDMA_OPTION_IB_PATH` carries.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_path_record {
    /// Service ID (big-endian).
    pub service_id: __be64,
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination LID (big-endian).
    pub dlid: __be16,
    /// Source LID (big-endian).
    pub slid: __be16,
    /// Flow label (bits 27:8) and hop limit (7:0), big-endian.
    pub flowlabel_hoplimit: __be32,
    /// Traffic class.
    pub tclass: u8,
    /// Reversible (bit 7) and number of paths (6:0).
    pub reversible_numpath: u8,
    /// P_Key (big-endian).
    pub pkey: __be16,
    /// QoS class (15:4) and SL (3:0), big-endian.
    pub qosclass_sl: __be16,
    /// MTU selector (7:6) and MTU (5:0, `enum ibv_mtu`).
    pub mtu: u8,
    /// Rate selector (7:6) and rate (5:0).
    pub rate: u8,
    /// Packet lifetime selector (7:6) and lifetime (5:0).
    pub packetlifetime: u8,
    /// Preference.
    pub preference: u8,
    /// Reserved.
    pub reserved: [u8; 6],
}

/// `struct ibv_path_data` (`<infiniband/sa.h>`): one record of `RDMA_OPTION_IB_PATH`'s array
/// and what it is for (`IBV_PATH_FLAG_*`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_path_data {
    /// `IBV_PATH_FLAG_*`.
    pub flags: u32,
    /// Reserved.
    pub reserved: u32,
    /// The record.
    pub path: ibv_path_record,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`): a path record.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_sa_path_rec {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination LID (big-endian).
    pub dlid: __be16,
    /// Source LID (big-endian).
    pub slid: __be16,
    /// Raw traffic.
    pub raw_traffic: c_int,
    /// Flow label (big-endian).
    pub flow_label: __be32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reversible.
    pub reversible: c_int,
    /// Number of paths.
    pub numb_path: u8,
    /// P_Key (big-endian).
    pub pkey: __be16,
    /// Service level.
    pub sl: u8,
    /// MTU selector.
    pub mtu_selector: u8,
    /// Path MTU (`enum ibv_mtu`).
    pub mtu: u8,
    /// Rate selector.
    pub rate_selector: u8,
    /// Static rate.
    pub rate: u8,
    /// Packet lifetime selector.
    pub packet_life_time_selector: u8,
    /// Packet lifetime.
    pub packet_life_time: u8,
    /// Preference.
    pub preference: u8,
}

/// `struct rdma_route`: the resolved addresses and path.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_route {
    /// The addresses.
    pub addr: rdma_addr,
    /// `num_paths` path records.
    pub path_rec: *mut ibv_sa_path_rec,
    /// How many path records.
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`: the file descriptor events are read from.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_event_channel {
    /// Readable while an event is pending.
    pub fd: c_int,
}

/// `struct rdma_cm_id`: an endpoint of the connection manager.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_cm_id {
    /// The device's context, once an address is bound or resolved.
    pub verbs: *mut ibv_context,
    /// The event channel.
    pub channel: *mut rdma_event_channel,
    /// The user's context pointer.
    pub context: *mut c_void,
    /// The QP `rdma_create_qp` made.
    pub qp: *mut ibv_qp,
    /// Addresses and path.
    pub route: rdma_route,
    /// `enum rdma_port_space`.
    pub ps: c_int,
    /// The device port.
    pub port_num: u8,
    /// The event of `rdma_get_request` (synchronous use).
    pub event: *mut rdma_cm_event,
    /// Send CQ's channel (`rdma_create_ep` / synchronous use).
    pub send_cq_channel: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut c_void,
    /// Receive CQ's channel.
    pub recv_cq_channel: *mut c_void,
    /// Receive CQ.
    pub recv_cq: *mut c_void,
    /// SRQ.
    pub srq: *mut c_void,
    /// PD.
    pub pd: *mut ibv_pd,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`: what a connect or accept asks for.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_conn_param {
    /// Private data sent with the request or reply.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// Incoming RDMA READs/atomics the side accepts at once.
    pub responder_resources: u8,
    /// Outgoing RDMA READs/atomics the side issues at once.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Transport retries (ignored when accepting).
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// Whether the QP uses an SRQ (without a QP on the id).
    pub srq: u8,
    /// The QP number (without a QP on the id).
    pub qp_num: u32,
}

/// `struct rdma_ud_param`: the remote UD endpoint of a SIDR exchange or multicast join.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rdma_ud_param {
    /// Private data.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// Address vector to reach the remote QP.
    pub ah_attr: ibv_ah_attr,
    /// Remote QP number.
    pub qp_num: u32,
    /// Remote Q_Key.
    pub qkey: u32,
}

/// The `param` union of [`rdma_cm_event`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    /// Connected port spaces.
    pub conn: rdma_conn_param,
    /// UD port space and multicast.
    pub ud: rdma_ud_param,
    /// `RDMA_CM_EVENT_USER`: the value `rdma_write_cm_event` wrote.
    pub arg: u64,
}

impl core::fmt::Debug for rdma_cm_event_param {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("rdma_cm_event_param")
    }
}

/// `struct rdma_cm_event`.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_cm_event {
    /// The id the event is for (a new id for a connect request).
    pub id: *mut rdma_cm_id,
    /// The listening id of a connect request.
    pub listen_id: *mut rdma_cm_id,
    /// `enum rdma_cm_event_type`.
    pub event: c_int,
    /// 0, a negative errno, or the IB reject reason of `RDMA_CM_EVENT_REJECTED`.
    pub status: c_int,
    /// Connection or UD parameters.
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_addrinfo {
    /// `RAI_*` flags.
    pub ai_flags: c_int,
    /// Address family.
    pub ai_family: c_int,
    /// `enum ibv_qp_type`.
    pub ai_qp_type: c_int,
    /// `enum rdma_port_space`.
    pub ai_port_space: c_int,
    /// Length of `ai_src_addr`.
    pub ai_src_len: libc::socklen_t,
    /// Length of `ai_dst_addr`.
    pub ai_dst_len: libc::socklen_t,
    /// Source address.
    pub ai_src_addr: *mut sockaddr,
    /// Destination address.
    pub ai_dst_addr: *mut sockaddr,
    /// Source name.
    pub ai_src_canonname: *mut c_char,
    /// Destination name.
    pub ai_dst_canonname: *mut c_char,
    /// Length of `ai_route`.
    pub ai_route_len: usize,
    /// Route data.
    pub ai_route: *mut c_void,
    /// Length of `ai_connect`.
    pub ai_connect_len: usize,
    /// Connection data.
    pub ai_connect: *mut c_void,
    /// The next result.
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_cm_join_mc_attr_ex {
    /// `RDMA_CM_JOIN_MC_ATTR_*` bits.
    pub comp_mask: u32,
    /// `enum rdma_cm_mc_join_flags`.
    pub join_flags: u32,
    /// The group's address.
    pub addr: *mut sockaddr,
}

/// `struct ibv_ece`: enhanced connection establishment options.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_ece {
    /// The vendor's IEEE OUI.
    pub vendor_id: u32,
    /// Vendor-specific options.
    pub options: u32,
    /// Reserved, 0.
    pub comp_mask: u32,
}

/// Calls `$callback!` with every function of rdma-core 44's librdmacm export table except
/// the rsocket calls, and RDMACM_1.4's three: `name(args) -> ret = value returned when the CM cannot be reached;`
/// (`-> ()` for functions returning nothing). The table type, the drop-in's table and
/// librdmacm's exports are all generated from this one list.
#[macro_export]
macro_rules! rdmacm_entry_points {
    ($callback:ident) => {
        $callback! {
            rdma_create_event_channel() -> *mut rdma_event_channel = core::ptr::null_mut();
            rdma_destroy_event_channel(channel: *mut rdma_event_channel) -> () = ();
            rdma_create_id(channel: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: c_int) -> c_int = -1;
            rdma_destroy_id(id: *mut rdma_cm_id) -> c_int = -1;
            rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int = -1;
            rdma_resolve_addr(id: *mut rdma_cm_id, src_addr: *mut sockaddr, dst_addr: *mut sockaddr, timeout_ms: c_int) -> c_int = -1;
            rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int = -1;
            rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int = -1;
            rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> c_int = -1;
            rdma_destroy_qp(id: *mut rdma_cm_id) -> () = ();
            rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int = -1;
            rdma_establish(id: *mut rdma_cm_id) -> c_int = -1;
            rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int = -1;
            rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int = -1;
            rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int = -1;
            rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int = -1;
            rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int = -1;
            rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int = -1;
            rdma_disconnect(id: *mut rdma_cm_id) -> c_int = -1;
            rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> c_int = -1;
            rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int = -1;
            rdma_join_multicast_ex(id: *mut rdma_cm_id, mc_join_attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> c_int = -1;
            rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int = -1;
            rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int = -1;
            rdma_get_src_port(id: *mut rdma_cm_id) -> u16 = 0;
            rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 = 0;
            rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context = core::ptr::null_mut();
            rdma_free_devices(list: *mut *mut ibv_context) -> () = ();
            rdma_event_str(event: c_int) -> *const c_char = c"UNKNOWN EVENT".as_ptr();
            rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int = -1;
            rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int = -1;
            rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int = -1;
            rdma_freeaddrinfo(res: *mut rdma_addrinfo) -> () = ();
            rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int = -1;
            rdma_destroy_ep(id: *mut rdma_cm_id) -> () = ();
            rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int = -1;
            rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int = -1;
            rdma_destroy_srq(id: *mut rdma_cm_id) -> () = ();
            rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int = -1;
            rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int = -1;
            rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int = -1;
            rdma_resolve_addrinfo(id: *mut rdma_cm_id, node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo) -> c_int = -1;
            rdma_query_addrinfo(id: *mut rdma_cm_id, info: *mut *mut rdma_addrinfo) -> c_int = -1;
            rdma_write_cm_event(id: *mut rdma_cm_id, event: c_int, status: c_int, arg: u64) -> c_int = -1;
        }
    };
}

/// Defines [`RdmacmEntryPoints`] from the list.
macro_rules! define_entry_point_table {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $fail:expr; )*) => {
        /// The drop-in libibverbs's connection manager, one function per librdmacm export
        /// (same names, same C signatures). The drop-in exports
        /// [`SOFTROCE_RDMACM_ENTRY_POINTS_SYMBOL`], a function returning a pointer to its
        /// table; `size` guards against a library from another softroce build.
        #[repr(C)]
        #[derive(Debug)]
        pub struct RdmacmEntryPoints {
            /// `size_of::<RdmacmEntryPoints>()` of the library that filled the table.
            pub size: usize,
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub $name: unsafe extern "C" fn($($ty),*) -> $ret,
            )*
        }
    };
}

rdmacm_entry_points!(define_entry_point_table);

/// The name of the drop-in libibverbs's private export that returns its
/// `*const RdmacmEntryPoints` (type [`RdmacmEntryPointsFn`]).
pub const SOFTROCE_RDMACM_ENTRY_POINTS_SYMBOL: &core::ffi::CStr = c"softroce_rdmacm_entry_points";

/// The type of [`SOFTROCE_RDMACM_ENTRY_POINTS_SYMBOL`].
pub type RdmacmEntryPointsFn = unsafe extern "C" fn() -> *const RdmacmEntryPoints;
