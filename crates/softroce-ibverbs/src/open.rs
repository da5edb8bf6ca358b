//! `ibv_open_device` and `ibv_close_device`: the top layer of the crate (see its
//! documentation), where a new context gets the entry points of the layers below.

use std::ffi::c_int;

use softroce_ibverbs_abi::*;

use crate::context::EmuContext;
use crate::ffi::{guard_errno, guard_ptr};
use crate::{cq_ex, objects, qp_ex};

symver_directives!();

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    const VERB: &str = "ibv_open_device";
    guard_ptr(VERB, || {
        EmuContext::open(VERB, device, |vctx| {
            objects::fill_ops(&mut vctx.context.ops);
            vctx.create_qp_ex = Some(qp_ex::vctx_create_qp_ex);
            vctx.create_cq_ex = Some(cq_ex::vctx_create_cq_ex);
            vctx.alloc_td = Some(objects::vctx_alloc_td);
            vctx.advise_mr = Some(objects::vctx_advise_mr);
            vctx.dealloc_td = Some(objects::vctx_dealloc_td);
            vctx.alloc_parent_domain = Some(objects::vctx_alloc_parent_domain);
            vctx.alloc_dm = Some(objects::vctx_alloc_dm);
            vctx.free_dm = Some(objects::vctx_free_dm);
            vctx.reg_dm_mr = Some(objects::vctx_reg_dm_mr);
            vctx.alloc_null_mr = Some(objects::vctx_alloc_null_mr);
            vctx.modify_cq = Some(objects::vctx_modify_cq);
            vctx.open_xrcd = Some(objects::vctx_open_xrcd);
            vctx.close_xrcd = Some(objects::vctx_close_xrcd);
            vctx.create_srq_ex = Some(objects::vctx_create_srq_ex);
            vctx.get_srq_num = Some(objects::vctx_get_srq_num);
            vctx.post_srq_ops = Some(objects::vctx_post_srq_ops);
            vctx.open_qp = Some(objects::vctx_open_qp);
            vctx.modify_qp_rate_limit = Some(objects::vctx_modify_qp_rate_limit);
        })
    })
}

#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    const VERB: &str = "ibv_close_device";
    // SAFETY: an ibv_context from ibv_open_device, or rejected; the application promises not
    // to use it (or objects of it) any more.
    guard_errno(VERB, || {
        // SAFETY: as above.
        unsafe { EmuContext::close(VERB, context) }?;
        // A later context at the same address must not find this one's domains.
        objects::forget_xrcd_files(context);
        Ok(())
    })
}
