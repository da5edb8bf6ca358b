//! `ibv_create_cq_ex` and the `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` +
//! `ibv_wc_read_*` polling API of `ibv_cq_ex`, for the fields of `ibv_wc`.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};

use softroce_emu::core::{WcOpcode, WorkCompletion};
use softroce_ibverbs_abi::*;

use crate::ffi::{fail, guard, guard_ptr};
use crate::objects::{self, EmuCq, create_cq, peek, resolve, with_roce_packet_type};

/// `verbs_context.create_cq_ex`: completions carry the fields of `ibv_wc` and the time
/// they were generated (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` in the device clock,
/// `…_WALLCLOCK` in wall-clock nanoseconds) and tag matching's `tm_info`
/// (`IBV_WC_EX_WITH_TM_INFO`); no CVLAN or flow tags.
pub(crate) unsafe extern "C" fn vctx_create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    const VERB: &str = "ibv_create_cq_ex";
    guard_ptr(VERB, || {
        if attr.is_null() {
            return Err(fail(VERB, libc::EINVAL, "cq_init_attr_ex is NULL"));
        }
        // SAFETY: non-NULL from the caller.
        let a = unsafe { &*attr };
        let supported = u64::from(
            IBV_WC_STANDARD_FLAGS
                | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
                | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
                | IBV_WC_EX_WITH_TM_INFO,
        );
        if a.wc_flags & !supported != 0 {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!(
                    "wc_flags {:#x}: CVLAN and flow tags are not emulated",
                    a.wc_flags & !supported
                ),
            ));
        }
        let flags = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0
            || flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            return Err(fail(
                VERB,
                libc::EOPNOTSUPP,
                format!(
                    "comp_mask {:#x} / flags {flags:#x}: ignoring overruns is not emulated",
                    a.comp_mask
                ),
            ));
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            // A CQ of a parent domain (its allocators are never needed: see
            // ibv_alloc_parent_domain); the domain must be of this context.
            // SAFETY: a PD or parent domain of this library, or rejected.
            let p = unsafe { objects::pd_context(VERB, a.parent_domain) }?;
            if p != context {
                return Err(fail(
                    VERB,
                    libc::EINVAL,
                    "the parent domain belongs to another context",
                ));
            }
        }
        // SAFETY: context and channel from this library, or rejected.
        let p = unsafe { create_cq(VERB, context, a.cqe, a.cq_context, a.channel, a.comp_vector) }?;
        // SAFETY: freshly created, not yet handed out.
        unsafe { (*p).single_threaded = flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0 };
        // SAFETY: as above.
        let cqx = unsafe { &mut (*p).cqx };
        cqx.start_poll = Some(start_poll);
        cqx.next_poll = Some(next_poll);
        cqx.end_poll = Some(end_poll);
        cqx.read_opcode = Some(read_opcode);
        cqx.read_vendor_err = Some(read_vendor_err);
        cqx.read_byte_len = Some(read_byte_len);
        cqx.read_imm_data = Some(read_imm_data);
        cqx.read_qp_num = Some(read_qp_num);
        cqx.read_src_qp = Some(read_src_qp);
        cqx.read_wc_flags = Some(read_wc_flags);
        cqx.read_slid = Some(read_slid);
        cqx.read_sl = Some(read_sl);
        cqx.read_dlid_path_bits = Some(read_dlid_path_bits);
        cqx.read_completion_ts = Some(read_completion_ts);
        cqx.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
        cqx.read_tm_info = Some(read_tm_info);
        // Not requestable (refused above), set anyway so a stray call reads 0.
        cqx.read_cvlan = Some(read_zero_u16);
        cqx.read_flow_tag = Some(read_zero_u32);
        Ok(p.cast::<ibv_cq_ex>())
    })
}

/// The completion an extended CQ's poll is at.
///
/// # Safety
/// `cq` must be a CQ from ibv_create_cq_ex.
unsafe fn current<'a>(cq: *mut ibv_cq_ex) -> MutexGuard<'a, Option<WorkCompletion>> {
    // SAFETY: such a CQ is the first field of an EmuCq. Only this field is borrowed: the
    // library writes `wr_id` and `status` for the application to read.
    let m: &Mutex<_> = unsafe { &*std::ptr::addr_of!((*cq.cast::<EmuCq>()).current) };
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Move to the next completion: 0, ENOENT when there is none, another errno on error.
///
/// # Safety
/// `cq` must be NULL or a CQ from ibv_create_cq_ex.
unsafe fn advance(verb: &str, cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: forwarded; its ibv_cq is the prefix.
    let c = match unsafe { resolve::<EmuCq>(verb, cq.cast()) } {
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut buf = [WorkCompletion::success(0, 0, WcOpcode::Send, 0)];
    match peek(c.dev, |h| h.poll_cq(c.handle, &mut buf)).unwrap_or(Ok(0)) {
        Ok(1) => {
            let w = with_roce_packet_type(buf[0], c.ctx);
            // SAFETY: as above; the application reads these two fields directly.
            unsafe {
                std::ptr::addr_of_mut!((*cq).wr_id).write(w.wr_id);
                std::ptr::addr_of_mut!((*cq).status).write(w.status.raw());
                *current(cq) = Some(w);
            }
            0
        }
        Ok(_) => {
            std::thread::yield_now();
            libc::ENOENT
        }
        Err(e) => fail(verb, e.errno(), e),
    }
}

/// The CQ's `ibv_start_poll` … `ibv_end_poll` section, unless the CQ was created
/// single-threaded (the application then promises one poller).
///
/// # Safety
/// `cq` must be a CQ from ibv_create_cq_ex.
unsafe fn polling<'a>(cq: *mut ibv_cq_ex) -> Option<&'a crate::section::Section> {
    let p = cq.cast::<EmuCq>();
    // SAFETY: such a CQ is the first field of an EmuCq; only these fields are read.
    unsafe {
        (!std::ptr::addr_of!((*p).single_threaded).read())
            .then(|| &*std::ptr::addr_of!((*p).polling))
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    const VERB: &str = "ibv_start_poll";
    guard(VERB, libc::EIO, || {
        // SAFETY: the attribute struct, if given, is readable.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return fail(VERB, libc::EINVAL, "poll attr comp_mask must be 0");
        }
        if cq.is_null() {
            return fail(VERB, libc::EINVAL, "cq is NULL");
        }
        // One poller between start and end, as providers lock the CQ (rxe's cq->lock):
        // another's start_poll would move `current` (and wr_id, status) under this one.
        // SAFETY: the CQ this entry point was installed on.
        let section = unsafe { polling(cq) };
        if let Some(s) = section {
            s.enter();
        }
        // SAFETY: as above.
        let r = unsafe { advance(VERB, cq) };
        if r != 0 {
            // ENOENT or an error: no poll to end (ibv_end_poll is not called then).
            if let Some(s) = section {
                s.leave();
            }
        }
        r
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    const VERB: &str = "ibv_next_poll";
    // SAFETY: the CQ this entry point was installed on.
    guard(VERB, libc::EIO, || unsafe { advance(VERB, cq) })
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    guard("ibv_end_poll", (), || {
        if !cq.is_null() {
            // SAFETY: the CQ this entry point was installed on.
            *unsafe { current(cq) } = None;
            // SAFETY: as above.
            if let Some(s) = unsafe { polling(cq) } {
                s.leave();
            }
        }
    })
}

/// A field of the current completion (0 when there is none).
fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&WorkCompletion) -> T) -> T {
    guard("ibv_wc_read", T::default(), || {
        if cq.is_null() {
            return T::default();
        }
        // SAFETY: the CQ the reading entry point was installed on.
        unsafe { current(cq) }.as_ref().map(f).unwrap_or_default()
    })
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> c_uint {
    read(cq, |w| w.opcode.raw())
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.vendor_err)
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.byte_len)
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    read(cq, |w| w.imm_data)
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.qp_num)
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.src_qp)
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    read(cq, |w| w.wc_flags.0)
}

unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| u32::from(w.slid))
}

unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.sl)
}

unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.dlid_path_bits)
}

unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    read(cq, |w| w.completion_ts)
}

unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    read(cq, |w| {
        softroce_emu::driver::clock::wallclock_ns(w.completion_ts)
    })
}

unsafe extern "C" fn read_zero_u32(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |_| 0)
}

unsafe extern "C" fn read_zero_u16(cq: *mut ibv_cq_ex) -> u16 {
    read(cq, |_| 0)
}

/// `ibv_wc_read_tm_info`: the tag and `app_ctx` of a message that matched a posted tag
/// (`IBV_WC_TM_MATCH`), zeros otherwise.
unsafe extern "C" fn read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut c_void) {
    read(cq, |w| {
        if !tm_info.is_null() {
            let info = ibv_wc_tm_info {
                tag: w.tm_tag,
                priv_: w.tm_priv,
            };
            // SAFETY: the caller's struct ibv_wc_tm_info.
            unsafe { tm_info.cast::<ibv_wc_tm_info>().write(info) };
        }
    })
}
