//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: getaddrinfo(3) with RDMA hints, as rdma-core
//! 44's `librdmacm/addrinfo.c` maps them (QP type ↔ socket type, port space ↔ protocol,
//! the address as source for RAI_PASSIVE and as destination otherwise). There is no ibacm
//! here, so no route data is added.

use std::ffi::{c_char, c_int};

use softroce_ibverbs_abi::rdmacm::*;
use softroce_ibverbs_abi::*;

/// `Ok(list)`, or `Err((return value, errno))`: -1 with errno, or a getaddrinfo EAI_* code.
pub(crate) type AddrInfoResult = Result<*mut rdma_addrinfo, (c_int, c_int)>;

/// Copies `len` bytes of a sockaddr into malloc'd memory (freed by `rdma_freeaddrinfo`).
///
/// # Safety
///
/// `src` points at `len` readable bytes.
unsafe fn copy_addr(
    src: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Option<*mut libc::sockaddr> {
    // SAFETY: malloc of the given size; NULL is handled.
    let dst = unsafe { libc::malloc(len as usize) }.cast::<libc::sockaddr>();
    if dst.is_null() {
        return None;
    }
    // SAFETY: both hold `len` bytes and do not overlap (fresh allocation).
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst.cast::<u8>(), len as usize) };
    Some(dst)
}

/// # Safety
///
/// `node`/`service` are NULL or NUL-terminated; `hints` is NULL or a valid rdma_addrinfo.
pub(crate) unsafe fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> AddrInfoResult {
    if node.is_null() && service.is_null() && hints.is_null() {
        return Err((-1, libc::EINVAL));
    }
    if crate::devices::entries().is_none_or(|list| list.is_empty()) {
        return Err((-1, libc::ENODEV));
    }
    // SAFETY: rdma_addrinfo is plain data; zero is calloc's answer.
    let zero_hints: rdma_addrinfo = unsafe { std::mem::zeroed() };
    // SAFETY: NULL or valid, per the caller.
    let hints_given = !hints.is_null();
    let hints = if hints_given {
        unsafe { &*hints }
    } else {
        &zero_hints
    };
    // SAFETY: calloc; freed by rdma_freeaddrinfo.
    let rai = unsafe { libc::calloc(1, size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
    if rai.is_null() {
        return Err((-1, libc::ENOMEM));
    }
    // SAFETY: freshly allocated and zeroed.
    let out = unsafe { &mut *rai };
    let result = if !node.is_null() || !service.is_null() {
        // SAFETY: forwarded from the caller.
        unsafe { lookup(node, service, hints_given.then_some(hints), out) }
    } else {
        out.ai_flags = hints.ai_flags;
        out.ai_family = hints.ai_family;
        out.ai_qp_type = hints.ai_qp_type;
        out.ai_port_space = hints.ai_port_space;
        if hints.ai_dst_len != 0 {
            // SAFETY: the hints' address holds ai_dst_len bytes.
            match unsafe { copy_addr(hints.ai_dst_addr, hints.ai_dst_len) } {
                Some(a) => {
                    out.ai_dst_addr = a;
                    out.ai_dst_len = hints.ai_dst_len;
                    Ok(())
                }
                None => Err((-1, libc::ENOMEM)),
            }
        } else {
            Ok(())
        }
    };
    let result = result.and_then(|()| {
        if out.ai_src_len == 0 && hints.ai_src_len != 0 {
            // SAFETY: the hints' address holds ai_src_len bytes.
            let a = unsafe { copy_addr(hints.ai_src_addr, hints.ai_src_len) }
                .ok_or((-1, libc::ENOMEM))?;
            out.ai_src_addr = a;
            out.ai_src_len = hints.ai_src_len;
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(rai),
        Err(e) => {
            // SAFETY: ours, allocated above.
            unsafe { freeaddrinfo(rai) };
            Err(e)
        }
    }
}

/// getaddrinfo(3) with the hints translated, its first answer copied into `out`.
///
/// # Safety
///
/// As [`getaddrinfo`].
unsafe fn lookup(
    node: *const c_char,
    service: *const c_char,
    hints: Option<&rdma_addrinfo>,
    out: &mut rdma_addrinfo,
) -> Result<(), (c_int, c_int)> {
    let mut found: *mut libc::addrinfo = std::ptr::null_mut();
    let ai_hints = hints.map(to_socket_hints);
    let hints_ptr = ai_hints
        .as_ref()
        .map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: NUL-terminated strings or NULL, hints NULL or valid, an out pointer.
    let rc = unsafe { libc::getaddrinfo(node, service, hints_ptr, &raw mut found) };
    if rc != 0 {
        return Err((rc, crate::ffi::errno()));
    }
    // SAFETY: getaddrinfo succeeded: `found` is a non-empty list.
    let ai = unsafe { &*found };
    let zero: rdma_addrinfo = unsafe { std::mem::zeroed() };
    let hints = hints.unwrap_or(&zero);
    out.ai_qp_type = if hints.ai_qp_type != 0 {
        hints.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC as c_int,
            libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
            _ => 0,
        }
    };
    out.ai_port_space = if hints.ai_port_space != 0 {
        hints.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP,
            libc::IPPROTO_UDP => RDMA_PS_UDP,
            _ => 0,
        }
    };
    out.ai_family = ai.ai_family;
    let passive = ai.ai_flags & libc::AI_PASSIVE != 0;
    // SAFETY: ai_addr holds ai_addrlen bytes.
    let copied = unsafe { copy_addr(ai.ai_addr, ai.ai_addrlen) };
    let canon = (!ai.ai_canonname.is_null())
        // SAFETY: a NUL-terminated string from getaddrinfo.
        .then(|| unsafe { libc::strdup(ai.ai_canonname) });
    // SAFETY: the list from getaddrinfo, freed once.
    unsafe { libc::freeaddrinfo(found) };
    let addr = copied.ok_or((-1, libc::ENOMEM))?;
    if passive {
        out.ai_flags = RAI_PASSIVE;
        out.ai_src_addr = addr;
        out.ai_src_len = ai_len(addr);
        out.ai_src_canonname = canon.unwrap_or(std::ptr::null_mut());
    } else {
        out.ai_dst_addr = addr;
        out.ai_dst_len = ai_len(addr);
        out.ai_dst_canonname = canon.unwrap_or(std::ptr::null_mut());
    }
    Ok(())
}

/// The length of a sockaddr of its family.
fn ai_len(addr: *const libc::sockaddr) -> libc::socklen_t {
    // SAFETY: a sockaddr we copied from getaddrinfo's answer.
    let family = c_int::from(unsafe { (*addr).sa_family });
    let len = if family == libc::AF_INET6 {
        size_of::<libc::sockaddr_in6>()
    } else {
        size_of::<libc::sockaddr_in>()
    };
    len as libc::socklen_t
}

/// The getaddrinfo(3) hints of RDMA hints (rdma-core's `ucma_convert_to_ai`).
fn to_socket_hints(rai: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: addrinfo is plain data.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if rai.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags = libc::AI_PASSIVE;
    }
    if rai.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    ai.ai_family = rai.ai_family;
    ai.ai_socktype = match rai.ai_qp_type as u32 {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match rai.ai_port_space {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_IPOIB | RDMA_PS_UDP => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    if rai.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_addrlen = rai.ai_src_len;
        ai.ai_addr = rai.ai_src_addr;
    } else {
        ai.ai_addrlen = rai.ai_dst_len;
        ai.ai_addr = rai.ai_dst_addr;
    }
    ai.ai_canonname = rai.ai_dst_canonname;
    ai
}

/// # Safety
///
/// `res` is NULL or a list from [`getaddrinfo`] not yet freed.
pub(crate) unsafe fn freeaddrinfo(mut res: *mut rdma_addrinfo) {
    while !res.is_null() {
        // SAFETY: a node of our list; each pointer is malloc'd or NULL (free(NULL) is fine).
        unsafe {
            let node = &*res;
            let next = node.ai_next;
            libc::free(node.ai_connect);
            libc::free(node.ai_route);
            libc::free(node.ai_src_canonname.cast());
            libc::free(node.ai_dst_canonname.cast());
            libc::free(node.ai_src_addr.cast());
            libc::free(node.ai_dst_addr.cast());
            libc::free(res.cast());
            res = next;
        }
    }
}

// ---- asynchronous resolution (RDMACM_1.4) ------------------------------------------------

/// `rdma_resolve_addrinfo` (rdma_resolve_addrinfo(3)): resolves as `rdma_getaddrinfo` and
/// reports RDMA_CM_EVENT_ADDRINFO_RESOLVED on the id's channel, whose result
/// `rdma_query_addrinfo` hands out. A failure to resolve fails the call (no event), as the
/// man page has it. RAI_SA asks the InfiniBand subnet administrator, which a RoCE port does
/// not have.
///
/// # Safety
/// `node`/`service` are NULL or NUL-terminated; `hints` is NULL or a valid rdma_addrinfo.
pub(crate) unsafe fn resolve_addrinfo(
    cm_id: &mut super::id::CmId,
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> Result<(), c_int> {
    // SAFETY: NULL or valid, per the caller.
    let flags = if hints.is_null() {
        0
    } else {
        unsafe { (*hints).ai_flags }
    };
    {
        let mut state = cm_id.state();
        // One resolution at a time, until its result is taken (rdma_query_addrinfo).
        if state.resolving_ai {
            return Err(libc::EBUSY);
        }
        if flags & RAI_SA != 0 && flags & RAI_DNS != 0 {
            return Err(libc::ENOTSUP);
        }
        if flags & RAI_SA != 0 {
            if !node.is_null() {
                return Err(libc::ENOTSUP);
            }
            if service.is_null() || state.device.is_none() {
                // "must be bound to an Infiniband port"; the service names what to find.
                return Err(libc::EINVAL);
            }
            // Bound to a softroce port: RoCE, no subnet administrator to ask.
            return Err(libc::EOPNOTSUPP);
        }
        state.resolving_ai = true;
    }
    // SAFETY: forwarded from the caller.
    let list = match unsafe { getaddrinfo(node, service, hints) } {
        Ok(list) => list,
        Err((_, errno)) => {
            cm_id.state().resolving_ai = false;
            return Err(if errno > 0 {
                errno
            } else {
                libc::EADDRNOTAVAIL
            });
        }
    };
    cm_id.state().resolved_ai = list as usize;
    let id_ptr = std::ptr::from_mut(&mut cm_id.c);
    cm_id.report(super::channel::Event::new(
        id_ptr,
        RDMA_CM_EVENT_ADDRINFO_RESOLVED,
        0,
    ));
    cm_id.complete()
}

/// `rdma_query_addrinfo` (rdma_query_addrinfo(3)): the list a resolution produced, once;
/// ENOENT when none is waiting.
pub(crate) fn query_addrinfo(
    cm_id: &super::id::CmId,
    info: *mut *mut rdma_addrinfo,
) -> Result<(), c_int> {
    if info.is_null() {
        return Err(libc::EINVAL);
    }
    let mut state = cm_id.state();
    if !state.resolving_ai || state.resolved_ai == 0 {
        return Err(libc::ENOENT);
    }
    // SAFETY: checked non-NULL; the caller frees the list with rdma_freeaddrinfo.
    unsafe { *info = state.resolved_ai as *mut rdma_addrinfo };
    state.resolved_ai = 0;
    state.resolving_ai = false;
    Ok(())
}

/// Frees a resolution's result nobody took (the id is being destroyed).
pub(crate) fn forget_resolved(cm_id: &super::id::CmId) {
    let list = std::mem::take(&mut cm_id.state().resolved_ai);
    // SAFETY: a list from getaddrinfo, handed to nobody.
    unsafe { freeaddrinfo(list as *mut rdma_addrinfo) };
}
