//! UD multicast through rdma_cm (`rdma_join_multicast`, `rdma_join_multicast_ex`,
//! `rdma_leave_multicast`) as the kernel's rdma_cm runs it on RoCEv2 (`cma.c`
//! `cma_iboe_join_multicast`): no subnet administrator, the group's MGID is the IPv4-mapped
//! multicast address, and the join completes at once with `RDMA_CM_EVENT_MULTICAST_JOIN`.
//! As rdma-core's librdmacm (`ucma_process_join`), the id's QP is attached when the
//! application retrieves that event (not for a send-only join), and an attach that fails
//! turns it into `RDMA_CM_EVENT_MULTICAST_ERROR`.

use std::ffi::{c_int, c_void};
use std::net::SocketAddr;

use softroce_emu::core::MULTICAST_QPN;
use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::*;
use softroce_wire::Gid;

use super::channel::Event;
use super::id::{self, CmId, Phase};
use crate::objects;

/// The kernel's `-ENOTSUPP` (524), which rdma_cm answers an IPv6 group on RoCEv2 with.
const ENOTSUPP: c_int = 524;

/// One group an id joined.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Membership {
    addr: SocketAddr,
    mgid: Gid,
    send_only: bool,
}

/// What retrieving a join event does: attach the id's QP to the group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingAttach {
    addr: SocketAddr,
    /// The join's kind: one group may be joined twice (full member, then send-only).
    send_only: bool,
}

/// `rdma_join_multicast_ex`'s checks of its attribute struct, as librdmacm makes them.
///
/// # Safety
/// `attr` is NULL or the caller's struct, whose `addr` is NULL or a sockaddr.
pub(crate) unsafe fn join_ex(
    cm_id: &mut CmId,
    attr: *const rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> Result<(), c_int> {
    // SAFETY: as documented.
    let attr = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
    if attr.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
        return Err(libc::ENOTSUP);
    }
    if attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 {
        return Err(libc::EINVAL);
    }
    if attr.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0
        || attr.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED
    {
        return Err(libc::EINVAL);
    }
    // SAFETY: as documented.
    let addr = unsafe { group_addr(attr.addr) }?;
    join(
        cm_id,
        addr,
        attr.join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        context,
    )
}

/// The group's address; EINVAL for NULL or a family librdmacm has no length for.
///
/// # Safety
/// `addr` is NULL or a sockaddr of its family's size.
pub(crate) unsafe fn group_addr(addr: *const libc::sockaddr) -> Result<SocketAddr, c_int> {
    // SAFETY: as documented.
    unsafe { id::socket_addr_from_c(addr) }.map_err(|_| libc::EINVAL)
}

/// The kernel's `cma_iboe_set_mgid` for RoCEv2: an IPv4 address becomes `::ffff:a.b.c.d`
/// (a unicast one too: attaching the QP to it then fails).
fn mgid_of(addr: SocketAddr) -> Gid {
    Gid::from_ip(addr.ip())
}

/// Join the group at `addr` and report the join (the kernel's `rdma_join_multicast`).
pub(crate) fn join(
    cm_id: &mut CmId,
    addr: SocketAddr,
    send_only: bool,
    context: *mut c_void,
) -> Result<(), c_int> {
    {
        let state = cm_id.state();
        // The kernel: bound to a device, address bound or resolved, a UD id.
        let ready = matches!(state.phase, Phase::Bound | Phase::AddrResolved);
        if state.device.is_none() || !ready {
            return Err(libc::EINVAL);
        }
    }
    if cm_id.c.qp_type != IBV_QPT_UD as c_int {
        return Err(libc::EINVAL);
    }
    if addr.ip().is_unspecified() {
        return Err(libc::EINVAL);
    }
    if addr.is_ipv6() {
        // cma_iboe_join_multicast: no IPv6 groups on RoCEv2.
        return Err(ENOTSUPP);
    }
    let mgid = mgid_of(addr);
    cm_id.state().multicast.push(Membership {
        addr,
        mgid,
        send_only,
    });
    let me = std::ptr::from_mut(cm_id).cast::<rdma_cm_id>();
    let mut ev = Event::new(me, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
    // cma_make_mc_event / ib_init_ah_from_mcmember: an address vector to the group (MLID
    // 0 and SL 0 on RoCE, hop limit IPV6_DEFAULT_HOPLIMIT for RoCEv2), the multicast QPN
    // and the id's Q_Key; the join context in private_data.
    // SAFETY: ibv_ah_attr is plain data.
    let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
    ah.is_global = 1;
    ah.port_num = cm_id.c.port_num;
    ah.grh.dgid = ibv_gid {
        raw: mgid.to_bytes(),
    };
    ah.grh.sgid_index = 0;
    // Traffic class, flow label and SL stay 0: the kernel's member record starts zeroed
    // (cma_iboe_join_multicast), whatever TOS the id has.
    ah.grh.hop_limit = 64;
    ev.c.param.ud = rdma_ud_param {
        private_data: context.cast_const(),
        private_data_len: 0,
        ah_attr: ah,
        qp_num: MULTICAST_QPN,
        qkey: RDMA_UDP_QKEY,
    };
    ev.join = Some(PendingAttach { addr, send_only });
    cm_id.report(ev);
    cm_id.complete()
}

/// A join event is being handed to the application: attach the id's QP (unless send-only
/// or there is none), or turn the event into MULTICAST_ERROR with the attach's errno.
pub(crate) fn on_retrieved(event: &mut Event) {
    if event.join.is_none() {
        return;
    }
    if let Ok(cm_id) = id::id(event.c.id) {
        on_retrieved_by(cm_id, event);
    }
}

/// [`on_retrieved`] for an event of `cm_id`.
pub(crate) fn on_retrieved_by(cm_id: &CmId, event: &mut Event) {
    let Some(PendingAttach { addr, send_only }) = event.join.take() else {
        return;
    };
    let qp = cm_id.c.qp;
    let Some(m) = cm_id
        .state()
        .multicast
        .iter()
        .find(|m| m.addr == addr && m.send_only == send_only)
        .copied()
    else {
        return;
    };
    if qp.is_null() || m.send_only {
        return;
    }
    // SAFETY: the id's live QP and a GID on the stack.
    let rc = unsafe { attach(qp, m.mgid, true) };
    if rc != 0 {
        // rdma-core: status = rdma_seterrno(ret), i.e. -1 with errno set.
        event.c.event = RDMA_CM_EVENT_MULTICAST_ERROR;
        event.c.status = -1;
        crate::ffi::set_errno(rc);
    }
}

/// `ibv_attach_mcast` (`attach`) or `ibv_detach_mcast` of `qp` to `mgid`; the errno value.
///
/// # Safety
/// `qp` is a live QP of this library.
unsafe fn attach(qp: *mut ibv_qp, mgid: Gid, attach: bool) -> c_int {
    let gid = ibv_gid {
        raw: mgid.to_bytes(),
    };
    // SAFETY: as documented; a GID on the stack.
    unsafe {
        if attach {
            objects::ibv_attach_mcast(qp, &gid, 0)
        } else {
            objects::ibv_detach_mcast(qp, &gid, 0)
        }
    }
}

/// Detach the id's QP from the groups it joined to receive (the QP is going away; the
/// memberships stay until left). Errors are ignored, as librdmacm ignores them: the
/// application may have detached already.
pub(crate) fn detach_qp(cm_id: &mut CmId) {
    let qp = cm_id.c.qp;
    if qp.is_null() {
        return;
    }
    let groups: Vec<Gid> = cm_id
        .state()
        .multicast
        .iter()
        .filter(|m| !m.send_only)
        .map(|m| m.mgid)
        .collect();
    for mgid in groups {
        // SAFETY: the id's live QP.
        unsafe { attach(qp, mgid, false) };
    }
}

/// `rdma_leave_multicast`: EADDRNOTAVAIL for a group the id did not join. A join whose
/// event was not retrieved yet is cancelled (the event goes).
pub(crate) fn leave(cm_id: &mut CmId, addr: SocketAddr) -> Result<(), c_int> {
    let m = {
        let mut state = cm_id.state();
        // The newest join of the group first: librdmacm keeps an id's joins last in,
        // first out, so leaving one of two joins of a group leaves the later.
        let at = state
            .multicast
            .iter()
            .rposition(|m| m.addr == addr)
            .ok_or(libc::EADDRNOTAVAIL)?;
        state.multicast.remove(at)
    };
    let me = std::ptr::from_mut(cm_id).cast::<rdma_cm_id>();
    let cancelled = cm_id.channel().take_events_where(|e| {
        e.c.id == me
            && e.join
                .is_some_and(|j| j.addr == addr && j.send_only == m.send_only)
    });
    cm_id.discard(cancelled);
    // librdmacm detaches the id's QP whether it or the application attached it.
    if !m.send_only && !cm_id.c.qp.is_null() {
        // SAFETY: the id's live QP.
        unsafe { attach(cm_id.c.qp, m.mgid, false) };
    }
    Ok(())
}

/// `rdma_destroy_id` leaves every group.
pub(crate) fn leave_all(cm_id: &mut CmId) {
    let addrs: Vec<SocketAddr> = cm_id.state().multicast.iter().map(|m| m.addr).collect();
    for a in addrs {
        let _ = leave(cm_id, a);
    }
}
