//! Exports the emulator does not implement. They exist because programs and the provider
//! libraries perftest links (libmlx5, libefa) import them and are bound at load time
//! (BIND_NOW); calling one returns the documented failure instead of crashing. None takes
//! arguments here: on x86-64 a callee may ignore the arguments it is passed.

use std::ffi::{c_int, c_void};

use crate::ffi::{fail, guard};

symver_directives!();

fn unsupported(name: &str) -> c_int {
    fail(
        name,
        libc::EOPNOTSUPP,
        "not supported by the softroce emulator",
    )
}

/// Functions returning 0 or an errno value.
macro_rules! errno_stubs {
    ($($name:ident),* $(,)?) => {
        $(
            #[unsafe(no_mangle)]
            unsafe extern "C" fn $name() -> c_int {
                guard(stringify!($name), libc::EOPNOTSUPP, || unsupported(stringify!($name)))
            }
        )*
    };
}

/// Functions returning -1 with errno.
macro_rules! minus_one_stubs {
    ($($name:ident),* $(,)?) => {
        $(
            #[unsafe(no_mangle)]
            unsafe extern "C" fn $name() -> c_int {
                guard(stringify!($name), -1, || {
                    unsupported(stringify!($name));
                    -1
                })
            }
        )*
    };
}

/// Functions returning a pointer: NULL with errno.
macro_rules! null_stubs {
    ($($name:ident),* $(,)?) => {
        $(
            #[unsafe(no_mangle)]
            unsafe extern "C" fn $name() -> *mut c_void {
                guard(stringify!($name), std::ptr::null_mut(), || {
                    unsupported(stringify!($name));
                    std::ptr::null_mut()
                })
            }
        )*
    };
}

/// Functions returning nothing.
macro_rules! void_stubs {
    ($($name:ident),* $(,)?) => {
        $(
            #[unsafe(no_mangle)]
            unsafe extern "C" fn $name() {
                guard(stringify!($name), (), || {
                    unsupported(stringify!($name));
                })
            }
        )*
    };
}

// Public verbs: ECE, dma-buf and importing objects from another process need a kernel.
errno_stubs!(ibv_query_ece, ibv_set_ece, ibv_resolve_eth_l2_from_gid,);
minus_one_stubs!(ibv_read_ibdev_sysfs_file);
null_stubs!(
    ibv_reg_dmabuf_mr,
    ibv_import_device,
    ibv_import_pd,
    ibv_import_mr,
    ibv_import_dm,
);
void_stubs!(ibv_unimport_pd, ibv_unimport_mr, ibv_unimport_dm,);

// The private provider ABI (IBVERBS_PRIVATE_34): only kernel providers call these.
errno_stubs!(
    __ioctl_final_num_attrs,
    execute_ioctl,
    verbs_init_cq,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);
null_stubs!(_verbs_init_and_alloc_context, verbs_open_device);
void_stubs!(verbs_set_ops, verbs_uninit_context);

/// rdma-core's provider log (`__verbs_log(ctx, level, fmt, ...)`), which prints only when
/// `VERBS_LOG_LEVEL` asks for it. Only providers call it and none runs on this library, so
/// it prints nothing; it must not report itself as unsupported either (libmlx5 is loaded by
/// perftest and UCX and may log through it).
#[unsafe(no_mangle)]
unsafe extern "C" fn __verbs_log() {
    guard("__verbs_log", (), || {})
}
