//! Sizes and offsets of the x86_64 rdma-core 44 headers (from pahole + offsetof), checked
//! at compile time; the C comparison test re-derives them from the installed header.

use crate::*;
use core::mem::{align_of, offset_of, size_of};

const fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! field_size {
    ($t:ty, $($f:tt)+) => {{
        let u = core::mem::MaybeUninit::<$t>::uninit();
        let p = u.as_ptr();
        // SAFETY: only the address of the field is taken, nothing is read.
        size_of_pointee(unsafe { core::ptr::addr_of!((*p).$($f)+) })
    }};
}

pub(crate) static STRUCT_SIZES: [(&str, usize, usize); 38] = [
    (
        "ibv_device",
        size_of::<ibv_device>(),
        align_of::<ibv_device>(),
    ),
    (
        "ibv_context",
        size_of::<ibv_context>(),
        align_of::<ibv_context>(),
    ),
    (
        "ibv_context_ops",
        size_of::<ibv_context_ops>(),
        align_of::<ibv_context_ops>(),
    ),
    (
        "verbs_context",
        size_of::<verbs_context>(),
        align_of::<verbs_context>(),
    ),
    (
        "ibv_device_attr",
        size_of::<ibv_device_attr>(),
        align_of::<ibv_device_attr>(),
    ),
    (
        "ibv_device_attr_ex",
        size_of::<ibv_device_attr_ex>(),
        align_of::<ibv_device_attr_ex>(),
    ),
    (
        "ibv_port_attr",
        size_of::<ibv_port_attr>(),
        align_of::<ibv_port_attr>(),
    ),
    (
        "ibv_gid_entry",
        size_of::<ibv_gid_entry>(),
        align_of::<ibv_gid_entry>(),
    ),
    ("ibv_pd", size_of::<ibv_pd>(), align_of::<ibv_pd>()),
    ("ibv_mr", size_of::<ibv_mr>(), align_of::<ibv_mr>()),
    ("ibv_cq", size_of::<ibv_cq>(), align_of::<ibv_cq>()),
    ("ibv_cq_ex", size_of::<ibv_cq_ex>(), align_of::<ibv_cq_ex>()),
    ("ibv_qp", size_of::<ibv_qp>(), align_of::<ibv_qp>()),
    ("ibv_qp_ex", size_of::<ibv_qp_ex>(), align_of::<ibv_qp_ex>()),
    ("ibv_srq", size_of::<ibv_srq>(), align_of::<ibv_srq>()),
    ("ibv_ah", size_of::<ibv_ah>(), align_of::<ibv_ah>()),
    (
        "ibv_comp_channel",
        size_of::<ibv_comp_channel>(),
        align_of::<ibv_comp_channel>(),
    ),
    (
        "ibv_qp_init_attr",
        size_of::<ibv_qp_init_attr>(),
        align_of::<ibv_qp_init_attr>(),
    ),
    (
        "ibv_qp_init_attr_ex",
        size_of::<ibv_qp_init_attr_ex>(),
        align_of::<ibv_qp_init_attr_ex>(),
    ),
    (
        "ibv_qp_attr",
        size_of::<ibv_qp_attr>(),
        align_of::<ibv_qp_attr>(),
    ),
    (
        "ibv_qp_cap",
        size_of::<ibv_qp_cap>(),
        align_of::<ibv_qp_cap>(),
    ),
    (
        "ibv_ah_attr",
        size_of::<ibv_ah_attr>(),
        align_of::<ibv_ah_attr>(),
    ),
    (
        "ibv_global_route",
        size_of::<ibv_global_route>(),
        align_of::<ibv_global_route>(),
    ),
    (
        "ibv_send_wr",
        size_of::<ibv_send_wr>(),
        align_of::<ibv_send_wr>(),
    ),
    (
        "ibv_recv_wr",
        size_of::<ibv_recv_wr>(),
        align_of::<ibv_recv_wr>(),
    ),
    ("ibv_sge", size_of::<ibv_sge>(), align_of::<ibv_sge>()),
    ("ibv_wc", size_of::<ibv_wc>(), align_of::<ibv_wc>()),
    (
        "ibv_srq_init_attr",
        size_of::<ibv_srq_init_attr>(),
        align_of::<ibv_srq_init_attr>(),
    ),
    (
        "ibv_srq_init_attr_ex",
        size_of::<ibv_srq_init_attr_ex>(),
        align_of::<ibv_srq_init_attr_ex>(),
    ),
    (
        "ibv_srq_attr",
        size_of::<ibv_srq_attr>(),
        align_of::<ibv_srq_attr>(),
    ),
    (
        "ibv_cq_init_attr_ex",
        size_of::<ibv_cq_init_attr_ex>(),
        align_of::<ibv_cq_init_attr_ex>(),
    ),
    ("ibv_xrcd", size_of::<ibv_xrcd>(), align_of::<ibv_xrcd>()),
    (
        "ibv_async_event",
        size_of::<ibv_async_event>(),
        align_of::<ibv_async_event>(),
    ),
    (
        "ibv_poll_cq_attr",
        size_of::<ibv_poll_cq_attr>(),
        align_of::<ibv_poll_cq_attr>(),
    ),
    ("ibv_grh", size_of::<ibv_grh>(), align_of::<ibv_grh>()),
    ("ibv_mw", size_of::<ibv_mw>(), align_of::<ibv_mw>()),
    (
        "ibv_qp_open_attr",
        size_of::<ibv_qp_open_attr>(),
        align_of::<ibv_qp_open_attr>(),
    ),
    (
        "ibv_xrcd_init_attr",
        size_of::<ibv_xrcd_init_attr>(),
        align_of::<ibv_xrcd_init_attr>(),
    ),
];

pub(crate) static FIELD_OFFSETS: [(&str, &str, usize, usize); 421] = [
    (
        "ibv_device",
        "_ops",
        offset_of!(ibv_device, _ops),
        field_size!(ibv_device, _ops),
    ),
    (
        "ibv_device",
        "node_type",
        offset_of!(ibv_device, node_type),
        field_size!(ibv_device, node_type),
    ),
    (
        "ibv_device",
        "transport_type",
        offset_of!(ibv_device, transport_type),
        field_size!(ibv_device, transport_type),
    ),
    (
        "ibv_device",
        "name",
        offset_of!(ibv_device, name),
        field_size!(ibv_device, name),
    ),
    (
        "ibv_device",
        "dev_name",
        offset_of!(ibv_device, dev_name),
        field_size!(ibv_device, dev_name),
    ),
    (
        "ibv_device",
        "dev_path",
        offset_of!(ibv_device, dev_path),
        field_size!(ibv_device, dev_path),
    ),
    (
        "ibv_device",
        "ibdev_path",
        offset_of!(ibv_device, ibdev_path),
        field_size!(ibv_device, ibdev_path),
    ),
    (
        "ibv_context",
        "device",
        offset_of!(ibv_context, device),
        field_size!(ibv_context, device),
    ),
    (
        "ibv_context",
        "ops",
        offset_of!(ibv_context, ops),
        field_size!(ibv_context, ops),
    ),
    (
        "ibv_context",
        "cmd_fd",
        offset_of!(ibv_context, cmd_fd),
        field_size!(ibv_context, cmd_fd),
    ),
    (
        "ibv_context",
        "async_fd",
        offset_of!(ibv_context, async_fd),
        field_size!(ibv_context, async_fd),
    ),
    (
        "ibv_context",
        "num_comp_vectors",
        offset_of!(ibv_context, num_comp_vectors),
        field_size!(ibv_context, num_comp_vectors),
    ),
    (
        "ibv_context",
        "mutex",
        offset_of!(ibv_context, mutex),
        field_size!(ibv_context, mutex),
    ),
    (
        "ibv_context",
        "abi_compat",
        offset_of!(ibv_context, abi_compat),
        field_size!(ibv_context, abi_compat),
    ),
    (
        "ibv_context_ops",
        "_compat_query_device",
        offset_of!(ibv_context_ops, _compat_query_device),
        field_size!(ibv_context_ops, _compat_query_device),
    ),
    (
        "ibv_context_ops",
        "_compat_query_port",
        offset_of!(ibv_context_ops, _compat_query_port),
        field_size!(ibv_context_ops, _compat_query_port),
    ),
    (
        "ibv_context_ops",
        "_compat_alloc_pd",
        offset_of!(ibv_context_ops, _compat_alloc_pd),
        field_size!(ibv_context_ops, _compat_alloc_pd),
    ),
    (
        "ibv_context_ops",
        "_compat_dealloc_pd",
        offset_of!(ibv_context_ops, _compat_dealloc_pd),
        field_size!(ibv_context_ops, _compat_dealloc_pd),
    ),
    (
        "ibv_context_ops",
        "_compat_reg_mr",
        offset_of!(ibv_context_ops, _compat_reg_mr),
        field_size!(ibv_context_ops, _compat_reg_mr),
    ),
    (
        "ibv_context_ops",
        "_compat_rereg_mr",
        offset_of!(ibv_context_ops, _compat_rereg_mr),
        field_size!(ibv_context_ops, _compat_rereg_mr),
    ),
    (
        "ibv_context_ops",
        "_compat_dereg_mr",
        offset_of!(ibv_context_ops, _compat_dereg_mr),
        field_size!(ibv_context_ops, _compat_dereg_mr),
    ),
    (
        "ibv_context_ops",
        "alloc_mw",
        offset_of!(ibv_context_ops, alloc_mw),
        field_size!(ibv_context_ops, alloc_mw),
    ),
    (
        "ibv_context_ops",
        "bind_mw",
        offset_of!(ibv_context_ops, bind_mw),
        field_size!(ibv_context_ops, bind_mw),
    ),
    (
        "ibv_context_ops",
        "dealloc_mw",
        offset_of!(ibv_context_ops, dealloc_mw),
        field_size!(ibv_context_ops, dealloc_mw),
    ),
    (
        "ibv_context_ops",
        "_compat_create_cq",
        offset_of!(ibv_context_ops, _compat_create_cq),
        field_size!(ibv_context_ops, _compat_create_cq),
    ),
    (
        "ibv_context_ops",
        "poll_cq",
        offset_of!(ibv_context_ops, poll_cq),
        field_size!(ibv_context_ops, poll_cq),
    ),
    (
        "ibv_context_ops",
        "req_notify_cq",
        offset_of!(ibv_context_ops, req_notify_cq),
        field_size!(ibv_context_ops, req_notify_cq),
    ),
    (
        "ibv_context_ops",
        "_compat_cq_event",
        offset_of!(ibv_context_ops, _compat_cq_event),
        field_size!(ibv_context_ops, _compat_cq_event),
    ),
    (
        "ibv_context_ops",
        "_compat_resize_cq",
        offset_of!(ibv_context_ops, _compat_resize_cq),
        field_size!(ibv_context_ops, _compat_resize_cq),
    ),
    (
        "ibv_context_ops",
        "_compat_destroy_cq",
        offset_of!(ibv_context_ops, _compat_destroy_cq),
        field_size!(ibv_context_ops, _compat_destroy_cq),
    ),
    (
        "ibv_context_ops",
        "_compat_create_srq",
        offset_of!(ibv_context_ops, _compat_create_srq),
        field_size!(ibv_context_ops, _compat_create_srq),
    ),
    (
        "ibv_context_ops",
        "_compat_modify_srq",
        offset_of!(ibv_context_ops, _compat_modify_srq),
        field_size!(ibv_context_ops, _compat_modify_srq),
    ),
    (
        "ibv_context_ops",
        "_compat_query_srq",
        offset_of!(ibv_context_ops, _compat_query_srq),
        field_size!(ibv_context_ops, _compat_query_srq),
    ),
    (
        "ibv_context_ops",
        "_compat_destroy_srq",
        offset_of!(ibv_context_ops, _compat_destroy_srq),
        field_size!(ibv_context_ops, _compat_destroy_srq),
    ),
    (
        "ibv_context_ops",
        "post_srq_recv",
        offset_of!(ibv_context_ops, post_srq_recv),
        field_size!(ibv_context_ops, post_srq_recv),
    ),
    (
        "ibv_context_ops",
        "_compat_create_qp",
        offset_of!(ibv_context_ops, _compat_create_qp),
        field_size!(ibv_context_ops, _compat_create_qp),
    ),
    (
        "ibv_context_ops",
        "_compat_query_qp",
        offset_of!(ibv_context_ops, _compat_query_qp),
        field_size!(ibv_context_ops, _compat_query_qp),
    ),
    (
        "ibv_context_ops",
        "_compat_modify_qp",
        offset_of!(ibv_context_ops, _compat_modify_qp),
        field_size!(ibv_context_ops, _compat_modify_qp),
    ),
    (
        "ibv_context_ops",
        "_compat_destroy_qp",
        offset_of!(ibv_context_ops, _compat_destroy_qp),
        field_size!(ibv_context_ops, _compat_destroy_qp),
    ),
    (
        "ibv_context_ops",
        "post_send",
        offset_of!(ibv_context_ops, post_send),
        field_size!(ibv_context_ops, post_send),
    ),
    (
        "ibv_context_ops",
        "post_recv",
        offset_of!(ibv_context_ops, post_recv),
        field_size!(ibv_context_ops, post_recv),
    ),
    (
        "ibv_context_ops",
        "_compat_create_ah",
        offset_of!(ibv_context_ops, _compat_create_ah),
        field_size!(ibv_context_ops, _compat_create_ah),
    ),
    (
        "ibv_context_ops",
        "_compat_destroy_ah",
        offset_of!(ibv_context_ops, _compat_destroy_ah),
        field_size!(ibv_context_ops, _compat_destroy_ah),
    ),
    (
        "ibv_context_ops",
        "_compat_attach_mcast",
        offset_of!(ibv_context_ops, _compat_attach_mcast),
        field_size!(ibv_context_ops, _compat_attach_mcast),
    ),
    (
        "ibv_context_ops",
        "_compat_detach_mcast",
        offset_of!(ibv_context_ops, _compat_detach_mcast),
        field_size!(ibv_context_ops, _compat_detach_mcast),
    ),
    (
        "ibv_context_ops",
        "_compat_async_event",
        offset_of!(ibv_context_ops, _compat_async_event),
        field_size!(ibv_context_ops, _compat_async_event),
    ),
    (
        "verbs_context",
        "query_port",
        offset_of!(verbs_context, query_port),
        field_size!(verbs_context, query_port),
    ),
    (
        "verbs_context",
        "advise_mr",
        offset_of!(verbs_context, advise_mr),
        field_size!(verbs_context, advise_mr),
    ),
    (
        "verbs_context",
        "alloc_null_mr",
        offset_of!(verbs_context, alloc_null_mr),
        field_size!(verbs_context, alloc_null_mr),
    ),
    (
        "verbs_context",
        "read_counters",
        offset_of!(verbs_context, read_counters),
        field_size!(verbs_context, read_counters),
    ),
    (
        "verbs_context",
        "attach_counters_point_flow",
        offset_of!(verbs_context, attach_counters_point_flow),
        field_size!(verbs_context, attach_counters_point_flow),
    ),
    (
        "verbs_context",
        "create_counters",
        offset_of!(verbs_context, create_counters),
        field_size!(verbs_context, create_counters),
    ),
    (
        "verbs_context",
        "destroy_counters",
        offset_of!(verbs_context, destroy_counters),
        field_size!(verbs_context, destroy_counters),
    ),
    (
        "verbs_context",
        "reg_dm_mr",
        offset_of!(verbs_context, reg_dm_mr),
        field_size!(verbs_context, reg_dm_mr),
    ),
    (
        "verbs_context",
        "alloc_dm",
        offset_of!(verbs_context, alloc_dm),
        field_size!(verbs_context, alloc_dm),
    ),
    (
        "verbs_context",
        "free_dm",
        offset_of!(verbs_context, free_dm),
        field_size!(verbs_context, free_dm),
    ),
    (
        "verbs_context",
        "modify_flow_action_esp",
        offset_of!(verbs_context, modify_flow_action_esp),
        field_size!(verbs_context, modify_flow_action_esp),
    ),
    (
        "verbs_context",
        "destroy_flow_action",
        offset_of!(verbs_context, destroy_flow_action),
        field_size!(verbs_context, destroy_flow_action),
    ),
    (
        "verbs_context",
        "create_flow_action_esp",
        offset_of!(verbs_context, create_flow_action_esp),
        field_size!(verbs_context, create_flow_action_esp),
    ),
    (
        "verbs_context",
        "modify_qp_rate_limit",
        offset_of!(verbs_context, modify_qp_rate_limit),
        field_size!(verbs_context, modify_qp_rate_limit),
    ),
    (
        "verbs_context",
        "alloc_parent_domain",
        offset_of!(verbs_context, alloc_parent_domain),
        field_size!(verbs_context, alloc_parent_domain),
    ),
    (
        "verbs_context",
        "dealloc_td",
        offset_of!(verbs_context, dealloc_td),
        field_size!(verbs_context, dealloc_td),
    ),
    (
        "verbs_context",
        "alloc_td",
        offset_of!(verbs_context, alloc_td),
        field_size!(verbs_context, alloc_td),
    ),
    (
        "verbs_context",
        "modify_cq",
        offset_of!(verbs_context, modify_cq),
        field_size!(verbs_context, modify_cq),
    ),
    (
        "verbs_context",
        "post_srq_ops",
        offset_of!(verbs_context, post_srq_ops),
        field_size!(verbs_context, post_srq_ops),
    ),
    (
        "verbs_context",
        "destroy_rwq_ind_table",
        offset_of!(verbs_context, destroy_rwq_ind_table),
        field_size!(verbs_context, destroy_rwq_ind_table),
    ),
    (
        "verbs_context",
        "create_rwq_ind_table",
        offset_of!(verbs_context, create_rwq_ind_table),
        field_size!(verbs_context, create_rwq_ind_table),
    ),
    (
        "verbs_context",
        "destroy_wq",
        offset_of!(verbs_context, destroy_wq),
        field_size!(verbs_context, destroy_wq),
    ),
    (
        "verbs_context",
        "modify_wq",
        offset_of!(verbs_context, modify_wq),
        field_size!(verbs_context, modify_wq),
    ),
    (
        "verbs_context",
        "create_wq",
        offset_of!(verbs_context, create_wq),
        field_size!(verbs_context, create_wq),
    ),
    (
        "verbs_context",
        "query_rt_values",
        offset_of!(verbs_context, query_rt_values),
        field_size!(verbs_context, query_rt_values),
    ),
    (
        "verbs_context",
        "create_cq_ex",
        offset_of!(verbs_context, create_cq_ex),
        field_size!(verbs_context, create_cq_ex),
    ),
    (
        "verbs_context",
        "priv",
        offset_of!(verbs_context, priv_),
        field_size!(verbs_context, priv_),
    ),
    (
        "verbs_context",
        "query_device_ex",
        offset_of!(verbs_context, query_device_ex),
        field_size!(verbs_context, query_device_ex),
    ),
    (
        "verbs_context",
        "ibv_destroy_flow",
        offset_of!(verbs_context, ibv_destroy_flow),
        field_size!(verbs_context, ibv_destroy_flow),
    ),
    (
        "verbs_context",
        "ABI_placeholder2",
        offset_of!(verbs_context, ABI_placeholder2),
        field_size!(verbs_context, ABI_placeholder2),
    ),
    (
        "verbs_context",
        "ibv_create_flow",
        offset_of!(verbs_context, ibv_create_flow),
        field_size!(verbs_context, ibv_create_flow),
    ),
    (
        "verbs_context",
        "ABI_placeholder1",
        offset_of!(verbs_context, ABI_placeholder1),
        field_size!(verbs_context, ABI_placeholder1),
    ),
    (
        "verbs_context",
        "open_qp",
        offset_of!(verbs_context, open_qp),
        field_size!(verbs_context, open_qp),
    ),
    (
        "verbs_context",
        "create_qp_ex",
        offset_of!(verbs_context, create_qp_ex),
        field_size!(verbs_context, create_qp_ex),
    ),
    (
        "verbs_context",
        "get_srq_num",
        offset_of!(verbs_context, get_srq_num),
        field_size!(verbs_context, get_srq_num),
    ),
    (
        "verbs_context",
        "create_srq_ex",
        offset_of!(verbs_context, create_srq_ex),
        field_size!(verbs_context, create_srq_ex),
    ),
    (
        "verbs_context",
        "open_xrcd",
        offset_of!(verbs_context, open_xrcd),
        field_size!(verbs_context, open_xrcd),
    ),
    (
        "verbs_context",
        "close_xrcd",
        offset_of!(verbs_context, close_xrcd),
        field_size!(verbs_context, close_xrcd),
    ),
    (
        "verbs_context",
        "_ABI_placeholder3",
        offset_of!(verbs_context, _ABI_placeholder3),
        field_size!(verbs_context, _ABI_placeholder3),
    ),
    (
        "verbs_context",
        "sz",
        offset_of!(verbs_context, sz),
        field_size!(verbs_context, sz),
    ),
    (
        "verbs_context",
        "context",
        offset_of!(verbs_context, context),
        field_size!(verbs_context, context),
    ),
    (
        "ibv_device_attr",
        "fw_ver",
        offset_of!(ibv_device_attr, fw_ver),
        field_size!(ibv_device_attr, fw_ver),
    ),
    (
        "ibv_device_attr",
        "node_guid",
        offset_of!(ibv_device_attr, node_guid),
        field_size!(ibv_device_attr, node_guid),
    ),
    (
        "ibv_device_attr",
        "sys_image_guid",
        offset_of!(ibv_device_attr, sys_image_guid),
        field_size!(ibv_device_attr, sys_image_guid),
    ),
    (
        "ibv_device_attr",
        "max_mr_size",
        offset_of!(ibv_device_attr, max_mr_size),
        field_size!(ibv_device_attr, max_mr_size),
    ),
    (
        "ibv_device_attr",
        "page_size_cap",
        offset_of!(ibv_device_attr, page_size_cap),
        field_size!(ibv_device_attr, page_size_cap),
    ),
    (
        "ibv_device_attr",
        "vendor_id",
        offset_of!(ibv_device_attr, vendor_id),
        field_size!(ibv_device_attr, vendor_id),
    ),
    (
        "ibv_device_attr",
        "vendor_part_id",
        offset_of!(ibv_device_attr, vendor_part_id),
        field_size!(ibv_device_attr, vendor_part_id),
    ),
    (
        "ibv_device_attr",
        "hw_ver",
        offset_of!(ibv_device_attr, hw_ver),
        field_size!(ibv_device_attr, hw_ver),
    ),
    (
        "ibv_device_attr",
        "max_qp",
        offset_of!(ibv_device_attr, max_qp),
        field_size!(ibv_device_attr, max_qp),
    ),
    (
        "ibv_device_attr",
        "max_qp_wr",
        offset_of!(ibv_device_attr, max_qp_wr),
        field_size!(ibv_device_attr, max_qp_wr),
    ),
    (
        "ibv_device_attr",
        "device_cap_flags",
        offset_of!(ibv_device_attr, device_cap_flags),
        field_size!(ibv_device_attr, device_cap_flags),
    ),
    (
        "ibv_device_attr",
        "max_sge",
        offset_of!(ibv_device_attr, max_sge),
        field_size!(ibv_device_attr, max_sge),
    ),
    (
        "ibv_device_attr",
        "max_sge_rd",
        offset_of!(ibv_device_attr, max_sge_rd),
        field_size!(ibv_device_attr, max_sge_rd),
    ),
    (
        "ibv_device_attr",
        "max_cq",
        offset_of!(ibv_device_attr, max_cq),
        field_size!(ibv_device_attr, max_cq),
    ),
    (
        "ibv_device_attr",
        "max_cqe",
        offset_of!(ibv_device_attr, max_cqe),
        field_size!(ibv_device_attr, max_cqe),
    ),
    (
        "ibv_device_attr",
        "max_mr",
        offset_of!(ibv_device_attr, max_mr),
        field_size!(ibv_device_attr, max_mr),
    ),
    (
        "ibv_device_attr",
        "max_pd",
        offset_of!(ibv_device_attr, max_pd),
        field_size!(ibv_device_attr, max_pd),
    ),
    (
        "ibv_device_attr",
        "max_qp_rd_atom",
        offset_of!(ibv_device_attr, max_qp_rd_atom),
        field_size!(ibv_device_attr, max_qp_rd_atom),
    ),
    (
        "ibv_device_attr",
        "max_ee_rd_atom",
        offset_of!(ibv_device_attr, max_ee_rd_atom),
        field_size!(ibv_device_attr, max_ee_rd_atom),
    ),
    (
        "ibv_device_attr",
        "max_res_rd_atom",
        offset_of!(ibv_device_attr, max_res_rd_atom),
        field_size!(ibv_device_attr, max_res_rd_atom),
    ),
    (
        "ibv_device_attr",
        "max_qp_init_rd_atom",
        offset_of!(ibv_device_attr, max_qp_init_rd_atom),
        field_size!(ibv_device_attr, max_qp_init_rd_atom),
    ),
    (
        "ibv_device_attr",
        "max_ee_init_rd_atom",
        offset_of!(ibv_device_attr, max_ee_init_rd_atom),
        field_size!(ibv_device_attr, max_ee_init_rd_atom),
    ),
    (
        "ibv_device_attr",
        "atomic_cap",
        offset_of!(ibv_device_attr, atomic_cap),
        field_size!(ibv_device_attr, atomic_cap),
    ),
    (
        "ibv_device_attr",
        "max_ee",
        offset_of!(ibv_device_attr, max_ee),
        field_size!(ibv_device_attr, max_ee),
    ),
    (
        "ibv_device_attr",
        "max_rdd",
        offset_of!(ibv_device_attr, max_rdd),
        field_size!(ibv_device_attr, max_rdd),
    ),
    (
        "ibv_device_attr",
        "max_mw",
        offset_of!(ibv_device_attr, max_mw),
        field_size!(ibv_device_attr, max_mw),
    ),
    (
        "ibv_device_attr",
        "max_raw_ipv6_qp",
        offset_of!(ibv_device_attr, max_raw_ipv6_qp),
        field_size!(ibv_device_attr, max_raw_ipv6_qp),
    ),
    (
        "ibv_device_attr",
        "max_raw_ethy_qp",
        offset_of!(ibv_device_attr, max_raw_ethy_qp),
        field_size!(ibv_device_attr, max_raw_ethy_qp),
    ),
    (
        "ibv_device_attr",
        "max_mcast_grp",
        offset_of!(ibv_device_attr, max_mcast_grp),
        field_size!(ibv_device_attr, max_mcast_grp),
    ),
    (
        "ibv_device_attr",
        "max_mcast_qp_attach",
        offset_of!(ibv_device_attr, max_mcast_qp_attach),
        field_size!(ibv_device_attr, max_mcast_qp_attach),
    ),
    (
        "ibv_device_attr",
        "max_total_mcast_qp_attach",
        offset_of!(ibv_device_attr, max_total_mcast_qp_attach),
        field_size!(ibv_device_attr, max_total_mcast_qp_attach),
    ),
    (
        "ibv_device_attr",
        "max_ah",
        offset_of!(ibv_device_attr, max_ah),
        field_size!(ibv_device_attr, max_ah),
    ),
    (
        "ibv_device_attr",
        "max_fmr",
        offset_of!(ibv_device_attr, max_fmr),
        field_size!(ibv_device_attr, max_fmr),
    ),
    (
        "ibv_device_attr",
        "max_map_per_fmr",
        offset_of!(ibv_device_attr, max_map_per_fmr),
        field_size!(ibv_device_attr, max_map_per_fmr),
    ),
    (
        "ibv_device_attr",
        "max_srq",
        offset_of!(ibv_device_attr, max_srq),
        field_size!(ibv_device_attr, max_srq),
    ),
    (
        "ibv_device_attr",
        "max_srq_wr",
        offset_of!(ibv_device_attr, max_srq_wr),
        field_size!(ibv_device_attr, max_srq_wr),
    ),
    (
        "ibv_device_attr",
        "max_srq_sge",
        offset_of!(ibv_device_attr, max_srq_sge),
        field_size!(ibv_device_attr, max_srq_sge),
    ),
    (
        "ibv_device_attr",
        "max_pkeys",
        offset_of!(ibv_device_attr, max_pkeys),
        field_size!(ibv_device_attr, max_pkeys),
    ),
    (
        "ibv_device_attr",
        "local_ca_ack_delay",
        offset_of!(ibv_device_attr, local_ca_ack_delay),
        field_size!(ibv_device_attr, local_ca_ack_delay),
    ),
    (
        "ibv_device_attr",
        "phys_port_cnt",
        offset_of!(ibv_device_attr, phys_port_cnt),
        field_size!(ibv_device_attr, phys_port_cnt),
    ),
    (
        "ibv_device_attr_ex",
        "orig_attr",
        offset_of!(ibv_device_attr_ex, orig_attr),
        field_size!(ibv_device_attr_ex, orig_attr),
    ),
    (
        "ibv_device_attr_ex",
        "comp_mask",
        offset_of!(ibv_device_attr_ex, comp_mask),
        field_size!(ibv_device_attr_ex, comp_mask),
    ),
    (
        "ibv_device_attr_ex",
        "odp_caps",
        offset_of!(ibv_device_attr_ex, odp_caps),
        field_size!(ibv_device_attr_ex, odp_caps),
    ),
    (
        "ibv_device_attr_ex",
        "completion_timestamp_mask",
        offset_of!(ibv_device_attr_ex, completion_timestamp_mask),
        field_size!(ibv_device_attr_ex, completion_timestamp_mask),
    ),
    (
        "ibv_device_attr_ex",
        "hca_core_clock",
        offset_of!(ibv_device_attr_ex, hca_core_clock),
        field_size!(ibv_device_attr_ex, hca_core_clock),
    ),
    (
        "ibv_device_attr_ex",
        "device_cap_flags_ex",
        offset_of!(ibv_device_attr_ex, device_cap_flags_ex),
        field_size!(ibv_device_attr_ex, device_cap_flags_ex),
    ),
    (
        "ibv_device_attr_ex",
        "tso_caps",
        offset_of!(ibv_device_attr_ex, tso_caps),
        field_size!(ibv_device_attr_ex, tso_caps),
    ),
    (
        "ibv_device_attr_ex",
        "rss_caps",
        offset_of!(ibv_device_attr_ex, rss_caps),
        field_size!(ibv_device_attr_ex, rss_caps),
    ),
    (
        "ibv_device_attr_ex",
        "max_wq_type_rq",
        offset_of!(ibv_device_attr_ex, max_wq_type_rq),
        field_size!(ibv_device_attr_ex, max_wq_type_rq),
    ),
    (
        "ibv_device_attr_ex",
        "packet_pacing_caps",
        offset_of!(ibv_device_attr_ex, packet_pacing_caps),
        field_size!(ibv_device_attr_ex, packet_pacing_caps),
    ),
    (
        "ibv_device_attr_ex",
        "raw_packet_caps",
        offset_of!(ibv_device_attr_ex, raw_packet_caps),
        field_size!(ibv_device_attr_ex, raw_packet_caps),
    ),
    (
        "ibv_device_attr_ex",
        "tm_caps",
        offset_of!(ibv_device_attr_ex, tm_caps),
        field_size!(ibv_device_attr_ex, tm_caps),
    ),
    (
        "ibv_device_attr_ex",
        "cq_mod_caps",
        offset_of!(ibv_device_attr_ex, cq_mod_caps),
        field_size!(ibv_device_attr_ex, cq_mod_caps),
    ),
    (
        "ibv_device_attr_ex",
        "max_dm_size",
        offset_of!(ibv_device_attr_ex, max_dm_size),
        field_size!(ibv_device_attr_ex, max_dm_size),
    ),
    (
        "ibv_device_attr_ex",
        "pci_atomic_caps",
        offset_of!(ibv_device_attr_ex, pci_atomic_caps),
        field_size!(ibv_device_attr_ex, pci_atomic_caps),
    ),
    (
        "ibv_device_attr_ex",
        "xrc_odp_caps",
        offset_of!(ibv_device_attr_ex, xrc_odp_caps),
        field_size!(ibv_device_attr_ex, xrc_odp_caps),
    ),
    (
        "ibv_device_attr_ex",
        "phys_port_cnt_ex",
        offset_of!(ibv_device_attr_ex, phys_port_cnt_ex),
        field_size!(ibv_device_attr_ex, phys_port_cnt_ex),
    ),
    (
        "ibv_port_attr",
        "state",
        offset_of!(ibv_port_attr, state),
        field_size!(ibv_port_attr, state),
    ),
    (
        "ibv_port_attr",
        "max_mtu",
        offset_of!(ibv_port_attr, max_mtu),
        field_size!(ibv_port_attr, max_mtu),
    ),
    (
        "ibv_port_attr",
        "active_mtu",
        offset_of!(ibv_port_attr, active_mtu),
        field_size!(ibv_port_attr, active_mtu),
    ),
    (
        "ibv_port_attr",
        "gid_tbl_len",
        offset_of!(ibv_port_attr, gid_tbl_len),
        field_size!(ibv_port_attr, gid_tbl_len),
    ),
    (
        "ibv_port_attr",
        "port_cap_flags",
        offset_of!(ibv_port_attr, port_cap_flags),
        field_size!(ibv_port_attr, port_cap_flags),
    ),
    (
        "ibv_port_attr",
        "max_msg_sz",
        offset_of!(ibv_port_attr, max_msg_sz),
        field_size!(ibv_port_attr, max_msg_sz),
    ),
    (
        "ibv_port_attr",
        "bad_pkey_cntr",
        offset_of!(ibv_port_attr, bad_pkey_cntr),
        field_size!(ibv_port_attr, bad_pkey_cntr),
    ),
    (
        "ibv_port_attr",
        "qkey_viol_cntr",
        offset_of!(ibv_port_attr, qkey_viol_cntr),
        field_size!(ibv_port_attr, qkey_viol_cntr),
    ),
    (
        "ibv_port_attr",
        "pkey_tbl_len",
        offset_of!(ibv_port_attr, pkey_tbl_len),
        field_size!(ibv_port_attr, pkey_tbl_len),
    ),
    (
        "ibv_port_attr",
        "lid",
        offset_of!(ibv_port_attr, lid),
        field_size!(ibv_port_attr, lid),
    ),
    (
        "ibv_port_attr",
        "sm_lid",
        offset_of!(ibv_port_attr, sm_lid),
        field_size!(ibv_port_attr, sm_lid),
    ),
    (
        "ibv_port_attr",
        "lmc",
        offset_of!(ibv_port_attr, lmc),
        field_size!(ibv_port_attr, lmc),
    ),
    (
        "ibv_port_attr",
        "max_vl_num",
        offset_of!(ibv_port_attr, max_vl_num),
        field_size!(ibv_port_attr, max_vl_num),
    ),
    (
        "ibv_port_attr",
        "sm_sl",
        offset_of!(ibv_port_attr, sm_sl),
        field_size!(ibv_port_attr, sm_sl),
    ),
    (
        "ibv_port_attr",
        "subnet_timeout",
        offset_of!(ibv_port_attr, subnet_timeout),
        field_size!(ibv_port_attr, subnet_timeout),
    ),
    (
        "ibv_port_attr",
        "init_type_reply",
        offset_of!(ibv_port_attr, init_type_reply),
        field_size!(ibv_port_attr, init_type_reply),
    ),
    (
        "ibv_port_attr",
        "active_width",
        offset_of!(ibv_port_attr, active_width),
        field_size!(ibv_port_attr, active_width),
    ),
    (
        "ibv_port_attr",
        "active_speed",
        offset_of!(ibv_port_attr, active_speed),
        field_size!(ibv_port_attr, active_speed),
    ),
    (
        "ibv_port_attr",
        "phys_state",
        offset_of!(ibv_port_attr, phys_state),
        field_size!(ibv_port_attr, phys_state),
    ),
    (
        "ibv_port_attr",
        "link_layer",
        offset_of!(ibv_port_attr, link_layer),
        field_size!(ibv_port_attr, link_layer),
    ),
    (
        "ibv_port_attr",
        "flags",
        offset_of!(ibv_port_attr, flags),
        field_size!(ibv_port_attr, flags),
    ),
    (
        "ibv_port_attr",
        "port_cap_flags2",
        offset_of!(ibv_port_attr, port_cap_flags2),
        field_size!(ibv_port_attr, port_cap_flags2),
    ),
    (
        "ibv_gid_entry",
        "gid",
        offset_of!(ibv_gid_entry, gid),
        field_size!(ibv_gid_entry, gid),
    ),
    (
        "ibv_gid_entry",
        "gid_index",
        offset_of!(ibv_gid_entry, gid_index),
        field_size!(ibv_gid_entry, gid_index),
    ),
    (
        "ibv_gid_entry",
        "port_num",
        offset_of!(ibv_gid_entry, port_num),
        field_size!(ibv_gid_entry, port_num),
    ),
    (
        "ibv_gid_entry",
        "gid_type",
        offset_of!(ibv_gid_entry, gid_type),
        field_size!(ibv_gid_entry, gid_type),
    ),
    (
        "ibv_gid_entry",
        "ndev_ifindex",
        offset_of!(ibv_gid_entry, ndev_ifindex),
        field_size!(ibv_gid_entry, ndev_ifindex),
    ),
    (
        "ibv_pd",
        "context",
        offset_of!(ibv_pd, context),
        field_size!(ibv_pd, context),
    ),
    (
        "ibv_pd",
        "handle",
        offset_of!(ibv_pd, handle),
        field_size!(ibv_pd, handle),
    ),
    (
        "ibv_mr",
        "context",
        offset_of!(ibv_mr, context),
        field_size!(ibv_mr, context),
    ),
    (
        "ibv_mr",
        "pd",
        offset_of!(ibv_mr, pd),
        field_size!(ibv_mr, pd),
    ),
    (
        "ibv_mr",
        "addr",
        offset_of!(ibv_mr, addr),
        field_size!(ibv_mr, addr),
    ),
    (
        "ibv_mr",
        "length",
        offset_of!(ibv_mr, length),
        field_size!(ibv_mr, length),
    ),
    (
        "ibv_mr",
        "handle",
        offset_of!(ibv_mr, handle),
        field_size!(ibv_mr, handle),
    ),
    (
        "ibv_mr",
        "lkey",
        offset_of!(ibv_mr, lkey),
        field_size!(ibv_mr, lkey),
    ),
    (
        "ibv_mr",
        "rkey",
        offset_of!(ibv_mr, rkey),
        field_size!(ibv_mr, rkey),
    ),
    (
        "ibv_cq",
        "context",
        offset_of!(ibv_cq, context),
        field_size!(ibv_cq, context),
    ),
    (
        "ibv_cq",
        "channel",
        offset_of!(ibv_cq, channel),
        field_size!(ibv_cq, channel),
    ),
    (
        "ibv_cq",
        "cq_context",
        offset_of!(ibv_cq, cq_context),
        field_size!(ibv_cq, cq_context),
    ),
    (
        "ibv_cq",
        "handle",
        offset_of!(ibv_cq, handle),
        field_size!(ibv_cq, handle),
    ),
    (
        "ibv_cq",
        "cqe",
        offset_of!(ibv_cq, cqe),
        field_size!(ibv_cq, cqe),
    ),
    (
        "ibv_cq",
        "mutex",
        offset_of!(ibv_cq, mutex),
        field_size!(ibv_cq, mutex),
    ),
    (
        "ibv_cq",
        "cond",
        offset_of!(ibv_cq, cond),
        field_size!(ibv_cq, cond),
    ),
    (
        "ibv_cq",
        "comp_events_completed",
        offset_of!(ibv_cq, comp_events_completed),
        field_size!(ibv_cq, comp_events_completed),
    ),
    (
        "ibv_cq",
        "async_events_completed",
        offset_of!(ibv_cq, async_events_completed),
        field_size!(ibv_cq, async_events_completed),
    ),
    (
        "ibv_cq_ex",
        "context",
        offset_of!(ibv_cq_ex, context),
        field_size!(ibv_cq_ex, context),
    ),
    (
        "ibv_cq_ex",
        "channel",
        offset_of!(ibv_cq_ex, channel),
        field_size!(ibv_cq_ex, channel),
    ),
    (
        "ibv_cq_ex",
        "cq_context",
        offset_of!(ibv_cq_ex, cq_context),
        field_size!(ibv_cq_ex, cq_context),
    ),
    (
        "ibv_cq_ex",
        "handle",
        offset_of!(ibv_cq_ex, handle),
        field_size!(ibv_cq_ex, handle),
    ),
    (
        "ibv_cq_ex",
        "cqe",
        offset_of!(ibv_cq_ex, cqe),
        field_size!(ibv_cq_ex, cqe),
    ),
    (
        "ibv_cq_ex",
        "mutex",
        offset_of!(ibv_cq_ex, mutex),
        field_size!(ibv_cq_ex, mutex),
    ),
    (
        "ibv_cq_ex",
        "cond",
        offset_of!(ibv_cq_ex, cond),
        field_size!(ibv_cq_ex, cond),
    ),
    (
        "ibv_cq_ex",
        "comp_events_completed",
        offset_of!(ibv_cq_ex, comp_events_completed),
        field_size!(ibv_cq_ex, comp_events_completed),
    ),
    (
        "ibv_cq_ex",
        "async_events_completed",
        offset_of!(ibv_cq_ex, async_events_completed),
        field_size!(ibv_cq_ex, async_events_completed),
    ),
    (
        "ibv_cq_ex",
        "comp_mask",
        offset_of!(ibv_cq_ex, comp_mask),
        field_size!(ibv_cq_ex, comp_mask),
    ),
    (
        "ibv_cq_ex",
        "status",
        offset_of!(ibv_cq_ex, status),
        field_size!(ibv_cq_ex, status),
    ),
    (
        "ibv_cq_ex",
        "wr_id",
        offset_of!(ibv_cq_ex, wr_id),
        field_size!(ibv_cq_ex, wr_id),
    ),
    (
        "ibv_cq_ex",
        "start_poll",
        offset_of!(ibv_cq_ex, start_poll),
        field_size!(ibv_cq_ex, start_poll),
    ),
    (
        "ibv_cq_ex",
        "next_poll",
        offset_of!(ibv_cq_ex, next_poll),
        field_size!(ibv_cq_ex, next_poll),
    ),
    (
        "ibv_cq_ex",
        "end_poll",
        offset_of!(ibv_cq_ex, end_poll),
        field_size!(ibv_cq_ex, end_poll),
    ),
    (
        "ibv_cq_ex",
        "read_opcode",
        offset_of!(ibv_cq_ex, read_opcode),
        field_size!(ibv_cq_ex, read_opcode),
    ),
    (
        "ibv_cq_ex",
        "read_vendor_err",
        offset_of!(ibv_cq_ex, read_vendor_err),
        field_size!(ibv_cq_ex, read_vendor_err),
    ),
    (
        "ibv_cq_ex",
        "read_byte_len",
        offset_of!(ibv_cq_ex, read_byte_len),
        field_size!(ibv_cq_ex, read_byte_len),
    ),
    (
        "ibv_cq_ex",
        "read_imm_data",
        offset_of!(ibv_cq_ex, read_imm_data),
        field_size!(ibv_cq_ex, read_imm_data),
    ),
    (
        "ibv_cq_ex",
        "read_qp_num",
        offset_of!(ibv_cq_ex, read_qp_num),
        field_size!(ibv_cq_ex, read_qp_num),
    ),
    (
        "ibv_cq_ex",
        "read_src_qp",
        offset_of!(ibv_cq_ex, read_src_qp),
        field_size!(ibv_cq_ex, read_src_qp),
    ),
    (
        "ibv_cq_ex",
        "read_wc_flags",
        offset_of!(ibv_cq_ex, read_wc_flags),
        field_size!(ibv_cq_ex, read_wc_flags),
    ),
    (
        "ibv_cq_ex",
        "read_slid",
        offset_of!(ibv_cq_ex, read_slid),
        field_size!(ibv_cq_ex, read_slid),
    ),
    (
        "ibv_cq_ex",
        "read_sl",
        offset_of!(ibv_cq_ex, read_sl),
        field_size!(ibv_cq_ex, read_sl),
    ),
    (
        "ibv_cq_ex",
        "read_dlid_path_bits",
        offset_of!(ibv_cq_ex, read_dlid_path_bits),
        field_size!(ibv_cq_ex, read_dlid_path_bits),
    ),
    (
        "ibv_cq_ex",
        "read_completion_ts",
        offset_of!(ibv_cq_ex, read_completion_ts),
        field_size!(ibv_cq_ex, read_completion_ts),
    ),
    (
        "ibv_cq_ex",
        "read_cvlan",
        offset_of!(ibv_cq_ex, read_cvlan),
        field_size!(ibv_cq_ex, read_cvlan),
    ),
    (
        "ibv_cq_ex",
        "read_flow_tag",
        offset_of!(ibv_cq_ex, read_flow_tag),
        field_size!(ibv_cq_ex, read_flow_tag),
    ),
    (
        "ibv_cq_ex",
        "read_tm_info",
        offset_of!(ibv_cq_ex, read_tm_info),
        field_size!(ibv_cq_ex, read_tm_info),
    ),
    (
        "ibv_cq_ex",
        "read_completion_wallclock_ns",
        offset_of!(ibv_cq_ex, read_completion_wallclock_ns),
        field_size!(ibv_cq_ex, read_completion_wallclock_ns),
    ),
    (
        "ibv_qp",
        "context",
        offset_of!(ibv_qp, context),
        field_size!(ibv_qp, context),
    ),
    (
        "ibv_qp",
        "qp_context",
        offset_of!(ibv_qp, qp_context),
        field_size!(ibv_qp, qp_context),
    ),
    (
        "ibv_qp",
        "pd",
        offset_of!(ibv_qp, pd),
        field_size!(ibv_qp, pd),
    ),
    (
        "ibv_qp",
        "send_cq",
        offset_of!(ibv_qp, send_cq),
        field_size!(ibv_qp, send_cq),
    ),
    (
        "ibv_qp",
        "recv_cq",
        offset_of!(ibv_qp, recv_cq),
        field_size!(ibv_qp, recv_cq),
    ),
    (
        "ibv_qp",
        "srq",
        offset_of!(ibv_qp, srq),
        field_size!(ibv_qp, srq),
    ),
    (
        "ibv_qp",
        "handle",
        offset_of!(ibv_qp, handle),
        field_size!(ibv_qp, handle),
    ),
    (
        "ibv_qp",
        "qp_num",
        offset_of!(ibv_qp, qp_num),
        field_size!(ibv_qp, qp_num),
    ),
    (
        "ibv_qp",
        "state",
        offset_of!(ibv_qp, state),
        field_size!(ibv_qp, state),
    ),
    (
        "ibv_qp",
        "qp_type",
        offset_of!(ibv_qp, qp_type),
        field_size!(ibv_qp, qp_type),
    ),
    (
        "ibv_qp",
        "mutex",
        offset_of!(ibv_qp, mutex),
        field_size!(ibv_qp, mutex),
    ),
    (
        "ibv_qp",
        "cond",
        offset_of!(ibv_qp, cond),
        field_size!(ibv_qp, cond),
    ),
    (
        "ibv_qp",
        "events_completed",
        offset_of!(ibv_qp, events_completed),
        field_size!(ibv_qp, events_completed),
    ),
    (
        "ibv_qp_ex",
        "qp_base",
        offset_of!(ibv_qp_ex, qp_base),
        field_size!(ibv_qp_ex, qp_base),
    ),
    (
        "ibv_qp_ex",
        "comp_mask",
        offset_of!(ibv_qp_ex, comp_mask),
        field_size!(ibv_qp_ex, comp_mask),
    ),
    (
        "ibv_qp_ex",
        "wr_id",
        offset_of!(ibv_qp_ex, wr_id),
        field_size!(ibv_qp_ex, wr_id),
    ),
    (
        "ibv_qp_ex",
        "wr_flags",
        offset_of!(ibv_qp_ex, wr_flags),
        field_size!(ibv_qp_ex, wr_flags),
    ),
    (
        "ibv_qp_ex",
        "wr_atomic_cmp_swp",
        offset_of!(ibv_qp_ex, wr_atomic_cmp_swp),
        field_size!(ibv_qp_ex, wr_atomic_cmp_swp),
    ),
    (
        "ibv_qp_ex",
        "wr_atomic_fetch_add",
        offset_of!(ibv_qp_ex, wr_atomic_fetch_add),
        field_size!(ibv_qp_ex, wr_atomic_fetch_add),
    ),
    (
        "ibv_qp_ex",
        "wr_bind_mw",
        offset_of!(ibv_qp_ex, wr_bind_mw),
        field_size!(ibv_qp_ex, wr_bind_mw),
    ),
    (
        "ibv_qp_ex",
        "wr_local_inv",
        offset_of!(ibv_qp_ex, wr_local_inv),
        field_size!(ibv_qp_ex, wr_local_inv),
    ),
    (
        "ibv_qp_ex",
        "wr_rdma_read",
        offset_of!(ibv_qp_ex, wr_rdma_read),
        field_size!(ibv_qp_ex, wr_rdma_read),
    ),
    (
        "ibv_qp_ex",
        "wr_rdma_write",
        offset_of!(ibv_qp_ex, wr_rdma_write),
        field_size!(ibv_qp_ex, wr_rdma_write),
    ),
    (
        "ibv_qp_ex",
        "wr_rdma_write_imm",
        offset_of!(ibv_qp_ex, wr_rdma_write_imm),
        field_size!(ibv_qp_ex, wr_rdma_write_imm),
    ),
    (
        "ibv_qp_ex",
        "wr_send",
        offset_of!(ibv_qp_ex, wr_send),
        field_size!(ibv_qp_ex, wr_send),
    ),
    (
        "ibv_qp_ex",
        "wr_send_imm",
        offset_of!(ibv_qp_ex, wr_send_imm),
        field_size!(ibv_qp_ex, wr_send_imm),
    ),
    (
        "ibv_qp_ex",
        "wr_send_inv",
        offset_of!(ibv_qp_ex, wr_send_inv),
        field_size!(ibv_qp_ex, wr_send_inv),
    ),
    (
        "ibv_qp_ex",
        "wr_send_tso",
        offset_of!(ibv_qp_ex, wr_send_tso),
        field_size!(ibv_qp_ex, wr_send_tso),
    ),
    (
        "ibv_qp_ex",
        "wr_set_ud_addr",
        offset_of!(ibv_qp_ex, wr_set_ud_addr),
        field_size!(ibv_qp_ex, wr_set_ud_addr),
    ),
    (
        "ibv_qp_ex",
        "wr_set_xrc_srqn",
        offset_of!(ibv_qp_ex, wr_set_xrc_srqn),
        field_size!(ibv_qp_ex, wr_set_xrc_srqn),
    ),
    (
        "ibv_qp_ex",
        "wr_set_inline_data",
        offset_of!(ibv_qp_ex, wr_set_inline_data),
        field_size!(ibv_qp_ex, wr_set_inline_data),
    ),
    (
        "ibv_qp_ex",
        "wr_set_inline_data_list",
        offset_of!(ibv_qp_ex, wr_set_inline_data_list),
        field_size!(ibv_qp_ex, wr_set_inline_data_list),
    ),
    (
        "ibv_qp_ex",
        "wr_set_sge",
        offset_of!(ibv_qp_ex, wr_set_sge),
        field_size!(ibv_qp_ex, wr_set_sge),
    ),
    (
        "ibv_qp_ex",
        "wr_set_sge_list",
        offset_of!(ibv_qp_ex, wr_set_sge_list),
        field_size!(ibv_qp_ex, wr_set_sge_list),
    ),
    (
        "ibv_qp_ex",
        "wr_start",
        offset_of!(ibv_qp_ex, wr_start),
        field_size!(ibv_qp_ex, wr_start),
    ),
    (
        "ibv_qp_ex",
        "wr_complete",
        offset_of!(ibv_qp_ex, wr_complete),
        field_size!(ibv_qp_ex, wr_complete),
    ),
    (
        "ibv_qp_ex",
        "wr_abort",
        offset_of!(ibv_qp_ex, wr_abort),
        field_size!(ibv_qp_ex, wr_abort),
    ),
    (
        "ibv_qp_ex",
        "wr_atomic_write",
        offset_of!(ibv_qp_ex, wr_atomic_write),
        field_size!(ibv_qp_ex, wr_atomic_write),
    ),
    (
        "ibv_srq",
        "context",
        offset_of!(ibv_srq, context),
        field_size!(ibv_srq, context),
    ),
    (
        "ibv_srq",
        "srq_context",
        offset_of!(ibv_srq, srq_context),
        field_size!(ibv_srq, srq_context),
    ),
    (
        "ibv_srq",
        "pd",
        offset_of!(ibv_srq, pd),
        field_size!(ibv_srq, pd),
    ),
    (
        "ibv_srq",
        "handle",
        offset_of!(ibv_srq, handle),
        field_size!(ibv_srq, handle),
    ),
    (
        "ibv_srq",
        "mutex",
        offset_of!(ibv_srq, mutex),
        field_size!(ibv_srq, mutex),
    ),
    (
        "ibv_srq",
        "cond",
        offset_of!(ibv_srq, cond),
        field_size!(ibv_srq, cond),
    ),
    (
        "ibv_srq",
        "events_completed",
        offset_of!(ibv_srq, events_completed),
        field_size!(ibv_srq, events_completed),
    ),
    (
        "ibv_ah",
        "context",
        offset_of!(ibv_ah, context),
        field_size!(ibv_ah, context),
    ),
    (
        "ibv_ah",
        "pd",
        offset_of!(ibv_ah, pd),
        field_size!(ibv_ah, pd),
    ),
    (
        "ibv_ah",
        "handle",
        offset_of!(ibv_ah, handle),
        field_size!(ibv_ah, handle),
    ),
    (
        "ibv_comp_channel",
        "context",
        offset_of!(ibv_comp_channel, context),
        field_size!(ibv_comp_channel, context),
    ),
    (
        "ibv_comp_channel",
        "fd",
        offset_of!(ibv_comp_channel, fd),
        field_size!(ibv_comp_channel, fd),
    ),
    (
        "ibv_comp_channel",
        "refcnt",
        offset_of!(ibv_comp_channel, refcnt),
        field_size!(ibv_comp_channel, refcnt),
    ),
    (
        "ibv_qp_init_attr",
        "qp_context",
        offset_of!(ibv_qp_init_attr, qp_context),
        field_size!(ibv_qp_init_attr, qp_context),
    ),
    (
        "ibv_qp_init_attr",
        "send_cq",
        offset_of!(ibv_qp_init_attr, send_cq),
        field_size!(ibv_qp_init_attr, send_cq),
    ),
    (
        "ibv_qp_init_attr",
        "recv_cq",
        offset_of!(ibv_qp_init_attr, recv_cq),
        field_size!(ibv_qp_init_attr, recv_cq),
    ),
    (
        "ibv_qp_init_attr",
        "srq",
        offset_of!(ibv_qp_init_attr, srq),
        field_size!(ibv_qp_init_attr, srq),
    ),
    (
        "ibv_qp_init_attr",
        "cap",
        offset_of!(ibv_qp_init_attr, cap),
        field_size!(ibv_qp_init_attr, cap),
    ),
    (
        "ibv_qp_init_attr",
        "qp_type",
        offset_of!(ibv_qp_init_attr, qp_type),
        field_size!(ibv_qp_init_attr, qp_type),
    ),
    (
        "ibv_qp_init_attr",
        "sq_sig_all",
        offset_of!(ibv_qp_init_attr, sq_sig_all),
        field_size!(ibv_qp_init_attr, sq_sig_all),
    ),
    (
        "ibv_qp_init_attr_ex",
        "qp_context",
        offset_of!(ibv_qp_init_attr_ex, qp_context),
        field_size!(ibv_qp_init_attr_ex, qp_context),
    ),
    (
        "ibv_qp_init_attr_ex",
        "send_cq",
        offset_of!(ibv_qp_init_attr_ex, send_cq),
        field_size!(ibv_qp_init_attr_ex, send_cq),
    ),
    (
        "ibv_qp_init_attr_ex",
        "recv_cq",
        offset_of!(ibv_qp_init_attr_ex, recv_cq),
        field_size!(ibv_qp_init_attr_ex, recv_cq),
    ),
    (
        "ibv_qp_init_attr_ex",
        "srq",
        offset_of!(ibv_qp_init_attr_ex, srq),
        field_size!(ibv_qp_init_attr_ex, srq),
    ),
    (
        "ibv_qp_init_attr_ex",
        "cap",
        offset_of!(ibv_qp_init_attr_ex, cap),
        field_size!(ibv_qp_init_attr_ex, cap),
    ),
    (
        "ibv_qp_init_attr_ex",
        "qp_type",
        offset_of!(ibv_qp_init_attr_ex, qp_type),
        field_size!(ibv_qp_init_attr_ex, qp_type),
    ),
    (
        "ibv_qp_init_attr_ex",
        "sq_sig_all",
        offset_of!(ibv_qp_init_attr_ex, sq_sig_all),
        field_size!(ibv_qp_init_attr_ex, sq_sig_all),
    ),
    (
        "ibv_qp_init_attr_ex",
        "comp_mask",
        offset_of!(ibv_qp_init_attr_ex, comp_mask),
        field_size!(ibv_qp_init_attr_ex, comp_mask),
    ),
    (
        "ibv_qp_init_attr_ex",
        "pd",
        offset_of!(ibv_qp_init_attr_ex, pd),
        field_size!(ibv_qp_init_attr_ex, pd),
    ),
    (
        "ibv_qp_init_attr_ex",
        "xrcd",
        offset_of!(ibv_qp_init_attr_ex, xrcd),
        field_size!(ibv_qp_init_attr_ex, xrcd),
    ),
    (
        "ibv_qp_init_attr_ex",
        "create_flags",
        offset_of!(ibv_qp_init_attr_ex, create_flags),
        field_size!(ibv_qp_init_attr_ex, create_flags),
    ),
    (
        "ibv_qp_init_attr_ex",
        "max_tso_header",
        offset_of!(ibv_qp_init_attr_ex, max_tso_header),
        field_size!(ibv_qp_init_attr_ex, max_tso_header),
    ),
    (
        "ibv_qp_init_attr_ex",
        "rwq_ind_tbl",
        offset_of!(ibv_qp_init_attr_ex, rwq_ind_tbl),
        field_size!(ibv_qp_init_attr_ex, rwq_ind_tbl),
    ),
    (
        "ibv_qp_init_attr_ex",
        "rx_hash_conf",
        offset_of!(ibv_qp_init_attr_ex, rx_hash_conf),
        field_size!(ibv_qp_init_attr_ex, rx_hash_conf),
    ),
    (
        "ibv_qp_init_attr_ex",
        "source_qpn",
        offset_of!(ibv_qp_init_attr_ex, source_qpn),
        field_size!(ibv_qp_init_attr_ex, source_qpn),
    ),
    (
        "ibv_qp_init_attr_ex",
        "send_ops_flags",
        offset_of!(ibv_qp_init_attr_ex, send_ops_flags),
        field_size!(ibv_qp_init_attr_ex, send_ops_flags),
    ),
    (
        "ibv_qp_attr",
        "qp_state",
        offset_of!(ibv_qp_attr, qp_state),
        field_size!(ibv_qp_attr, qp_state),
    ),
    (
        "ibv_qp_attr",
        "cur_qp_state",
        offset_of!(ibv_qp_attr, cur_qp_state),
        field_size!(ibv_qp_attr, cur_qp_state),
    ),
    (
        "ibv_qp_attr",
        "path_mtu",
        offset_of!(ibv_qp_attr, path_mtu),
        field_size!(ibv_qp_attr, path_mtu),
    ),
    (
        "ibv_qp_attr",
        "path_mig_state",
        offset_of!(ibv_qp_attr, path_mig_state),
        field_size!(ibv_qp_attr, path_mig_state),
    ),
    (
        "ibv_qp_attr",
        "qkey",
        offset_of!(ibv_qp_attr, qkey),
        field_size!(ibv_qp_attr, qkey),
    ),
    (
        "ibv_qp_attr",
        "rq_psn",
        offset_of!(ibv_qp_attr, rq_psn),
        field_size!(ibv_qp_attr, rq_psn),
    ),
    (
        "ibv_qp_attr",
        "sq_psn",
        offset_of!(ibv_qp_attr, sq_psn),
        field_size!(ibv_qp_attr, sq_psn),
    ),
    (
        "ibv_qp_attr",
        "dest_qp_num",
        offset_of!(ibv_qp_attr, dest_qp_num),
        field_size!(ibv_qp_attr, dest_qp_num),
    ),
    (
        "ibv_qp_attr",
        "qp_access_flags",
        offset_of!(ibv_qp_attr, qp_access_flags),
        field_size!(ibv_qp_attr, qp_access_flags),
    ),
    (
        "ibv_qp_attr",
        "cap",
        offset_of!(ibv_qp_attr, cap),
        field_size!(ibv_qp_attr, cap),
    ),
    (
        "ibv_qp_attr",
        "ah_attr",
        offset_of!(ibv_qp_attr, ah_attr),
        field_size!(ibv_qp_attr, ah_attr),
    ),
    (
        "ibv_qp_attr",
        "alt_ah_attr",
        offset_of!(ibv_qp_attr, alt_ah_attr),
        field_size!(ibv_qp_attr, alt_ah_attr),
    ),
    (
        "ibv_qp_attr",
        "pkey_index",
        offset_of!(ibv_qp_attr, pkey_index),
        field_size!(ibv_qp_attr, pkey_index),
    ),
    (
        "ibv_qp_attr",
        "alt_pkey_index",
        offset_of!(ibv_qp_attr, alt_pkey_index),
        field_size!(ibv_qp_attr, alt_pkey_index),
    ),
    (
        "ibv_qp_attr",
        "en_sqd_async_notify",
        offset_of!(ibv_qp_attr, en_sqd_async_notify),
        field_size!(ibv_qp_attr, en_sqd_async_notify),
    ),
    (
        "ibv_qp_attr",
        "sq_draining",
        offset_of!(ibv_qp_attr, sq_draining),
        field_size!(ibv_qp_attr, sq_draining),
    ),
    (
        "ibv_qp_attr",
        "max_rd_atomic",
        offset_of!(ibv_qp_attr, max_rd_atomic),
        field_size!(ibv_qp_attr, max_rd_atomic),
    ),
    (
        "ibv_qp_attr",
        "max_dest_rd_atomic",
        offset_of!(ibv_qp_attr, max_dest_rd_atomic),
        field_size!(ibv_qp_attr, max_dest_rd_atomic),
    ),
    (
        "ibv_qp_attr",
        "min_rnr_timer",
        offset_of!(ibv_qp_attr, min_rnr_timer),
        field_size!(ibv_qp_attr, min_rnr_timer),
    ),
    (
        "ibv_qp_attr",
        "port_num",
        offset_of!(ibv_qp_attr, port_num),
        field_size!(ibv_qp_attr, port_num),
    ),
    (
        "ibv_qp_attr",
        "timeout",
        offset_of!(ibv_qp_attr, timeout),
        field_size!(ibv_qp_attr, timeout),
    ),
    (
        "ibv_qp_attr",
        "retry_cnt",
        offset_of!(ibv_qp_attr, retry_cnt),
        field_size!(ibv_qp_attr, retry_cnt),
    ),
    (
        "ibv_qp_attr",
        "rnr_retry",
        offset_of!(ibv_qp_attr, rnr_retry),
        field_size!(ibv_qp_attr, rnr_retry),
    ),
    (
        "ibv_qp_attr",
        "alt_port_num",
        offset_of!(ibv_qp_attr, alt_port_num),
        field_size!(ibv_qp_attr, alt_port_num),
    ),
    (
        "ibv_qp_attr",
        "alt_timeout",
        offset_of!(ibv_qp_attr, alt_timeout),
        field_size!(ibv_qp_attr, alt_timeout),
    ),
    (
        "ibv_qp_attr",
        "rate_limit",
        offset_of!(ibv_qp_attr, rate_limit),
        field_size!(ibv_qp_attr, rate_limit),
    ),
    (
        "ibv_qp_cap",
        "max_send_wr",
        offset_of!(ibv_qp_cap, max_send_wr),
        field_size!(ibv_qp_cap, max_send_wr),
    ),
    (
        "ibv_qp_cap",
        "max_recv_wr",
        offset_of!(ibv_qp_cap, max_recv_wr),
        field_size!(ibv_qp_cap, max_recv_wr),
    ),
    (
        "ibv_qp_cap",
        "max_send_sge",
        offset_of!(ibv_qp_cap, max_send_sge),
        field_size!(ibv_qp_cap, max_send_sge),
    ),
    (
        "ibv_qp_cap",
        "max_recv_sge",
        offset_of!(ibv_qp_cap, max_recv_sge),
        field_size!(ibv_qp_cap, max_recv_sge),
    ),
    (
        "ibv_qp_cap",
        "max_inline_data",
        offset_of!(ibv_qp_cap, max_inline_data),
        field_size!(ibv_qp_cap, max_inline_data),
    ),
    (
        "ibv_ah_attr",
        "grh",
        offset_of!(ibv_ah_attr, grh),
        field_size!(ibv_ah_attr, grh),
    ),
    (
        "ibv_ah_attr",
        "dlid",
        offset_of!(ibv_ah_attr, dlid),
        field_size!(ibv_ah_attr, dlid),
    ),
    (
        "ibv_ah_attr",
        "sl",
        offset_of!(ibv_ah_attr, sl),
        field_size!(ibv_ah_attr, sl),
    ),
    (
        "ibv_ah_attr",
        "src_path_bits",
        offset_of!(ibv_ah_attr, src_path_bits),
        field_size!(ibv_ah_attr, src_path_bits),
    ),
    (
        "ibv_ah_attr",
        "static_rate",
        offset_of!(ibv_ah_attr, static_rate),
        field_size!(ibv_ah_attr, static_rate),
    ),
    (
        "ibv_ah_attr",
        "is_global",
        offset_of!(ibv_ah_attr, is_global),
        field_size!(ibv_ah_attr, is_global),
    ),
    (
        "ibv_ah_attr",
        "port_num",
        offset_of!(ibv_ah_attr, port_num),
        field_size!(ibv_ah_attr, port_num),
    ),
    (
        "ibv_global_route",
        "dgid",
        offset_of!(ibv_global_route, dgid),
        field_size!(ibv_global_route, dgid),
    ),
    (
        "ibv_global_route",
        "flow_label",
        offset_of!(ibv_global_route, flow_label),
        field_size!(ibv_global_route, flow_label),
    ),
    (
        "ibv_global_route",
        "sgid_index",
        offset_of!(ibv_global_route, sgid_index),
        field_size!(ibv_global_route, sgid_index),
    ),
    (
        "ibv_global_route",
        "hop_limit",
        offset_of!(ibv_global_route, hop_limit),
        field_size!(ibv_global_route, hop_limit),
    ),
    (
        "ibv_global_route",
        "traffic_class",
        offset_of!(ibv_global_route, traffic_class),
        field_size!(ibv_global_route, traffic_class),
    ),
    (
        "ibv_send_wr",
        "wr_id",
        offset_of!(ibv_send_wr, wr_id),
        field_size!(ibv_send_wr, wr_id),
    ),
    (
        "ibv_send_wr",
        "next",
        offset_of!(ibv_send_wr, next),
        field_size!(ibv_send_wr, next),
    ),
    (
        "ibv_send_wr",
        "sg_list",
        offset_of!(ibv_send_wr, sg_list),
        field_size!(ibv_send_wr, sg_list),
    ),
    (
        "ibv_send_wr",
        "num_sge",
        offset_of!(ibv_send_wr, num_sge),
        field_size!(ibv_send_wr, num_sge),
    ),
    (
        "ibv_send_wr",
        "opcode",
        offset_of!(ibv_send_wr, opcode),
        field_size!(ibv_send_wr, opcode),
    ),
    (
        "ibv_send_wr",
        "send_flags",
        offset_of!(ibv_send_wr, send_flags),
        field_size!(ibv_send_wr, send_flags),
    ),
    (
        "ibv_send_wr",
        "wr",
        offset_of!(ibv_send_wr, wr),
        field_size!(ibv_send_wr, wr),
    ),
    (
        "ibv_send_wr",
        "qp_type",
        offset_of!(ibv_send_wr, qp_type),
        field_size!(ibv_send_wr, qp_type),
    ),
    (
        "ibv_recv_wr",
        "wr_id",
        offset_of!(ibv_recv_wr, wr_id),
        field_size!(ibv_recv_wr, wr_id),
    ),
    (
        "ibv_recv_wr",
        "next",
        offset_of!(ibv_recv_wr, next),
        field_size!(ibv_recv_wr, next),
    ),
    (
        "ibv_recv_wr",
        "sg_list",
        offset_of!(ibv_recv_wr, sg_list),
        field_size!(ibv_recv_wr, sg_list),
    ),
    (
        "ibv_recv_wr",
        "num_sge",
        offset_of!(ibv_recv_wr, num_sge),
        field_size!(ibv_recv_wr, num_sge),
    ),
    (
        "ibv_sge",
        "addr",
        offset_of!(ibv_sge, addr),
        field_size!(ibv_sge, addr),
    ),
    (
        "ibv_sge",
        "length",
        offset_of!(ibv_sge, length),
        field_size!(ibv_sge, length),
    ),
    (
        "ibv_sge",
        "lkey",
        offset_of!(ibv_sge, lkey),
        field_size!(ibv_sge, lkey),
    ),
    (
        "ibv_wc",
        "wr_id",
        offset_of!(ibv_wc, wr_id),
        field_size!(ibv_wc, wr_id),
    ),
    (
        "ibv_wc",
        "status",
        offset_of!(ibv_wc, status),
        field_size!(ibv_wc, status),
    ),
    (
        "ibv_wc",
        "opcode",
        offset_of!(ibv_wc, opcode),
        field_size!(ibv_wc, opcode),
    ),
    (
        "ibv_wc",
        "vendor_err",
        offset_of!(ibv_wc, vendor_err),
        field_size!(ibv_wc, vendor_err),
    ),
    (
        "ibv_wc",
        "byte_len",
        offset_of!(ibv_wc, byte_len),
        field_size!(ibv_wc, byte_len),
    ),
    (
        "ibv_wc",
        "qp_num",
        offset_of!(ibv_wc, qp_num),
        field_size!(ibv_wc, qp_num),
    ),
    (
        "ibv_wc",
        "src_qp",
        offset_of!(ibv_wc, src_qp),
        field_size!(ibv_wc, src_qp),
    ),
    (
        "ibv_wc",
        "wc_flags",
        offset_of!(ibv_wc, wc_flags),
        field_size!(ibv_wc, wc_flags),
    ),
    (
        "ibv_wc",
        "pkey_index",
        offset_of!(ibv_wc, pkey_index),
        field_size!(ibv_wc, pkey_index),
    ),
    (
        "ibv_wc",
        "slid",
        offset_of!(ibv_wc, slid),
        field_size!(ibv_wc, slid),
    ),
    (
        "ibv_wc",
        "sl",
        offset_of!(ibv_wc, sl),
        field_size!(ibv_wc, sl),
    ),
    (
        "ibv_wc",
        "dlid_path_bits",
        offset_of!(ibv_wc, dlid_path_bits),
        field_size!(ibv_wc, dlid_path_bits),
    ),
    (
        "ibv_srq_init_attr",
        "srq_context",
        offset_of!(ibv_srq_init_attr, srq_context),
        field_size!(ibv_srq_init_attr, srq_context),
    ),
    (
        "ibv_srq_init_attr",
        "attr",
        offset_of!(ibv_srq_init_attr, attr),
        field_size!(ibv_srq_init_attr, attr),
    ),
    (
        "ibv_srq_init_attr_ex",
        "srq_context",
        offset_of!(ibv_srq_init_attr_ex, srq_context),
        field_size!(ibv_srq_init_attr_ex, srq_context),
    ),
    (
        "ibv_srq_init_attr_ex",
        "attr",
        offset_of!(ibv_srq_init_attr_ex, attr),
        field_size!(ibv_srq_init_attr_ex, attr),
    ),
    (
        "ibv_srq_init_attr_ex",
        "comp_mask",
        offset_of!(ibv_srq_init_attr_ex, comp_mask),
        field_size!(ibv_srq_init_attr_ex, comp_mask),
    ),
    (
        "ibv_srq_init_attr_ex",
        "srq_type",
        offset_of!(ibv_srq_init_attr_ex, srq_type),
        field_size!(ibv_srq_init_attr_ex, srq_type),
    ),
    (
        "ibv_srq_init_attr_ex",
        "pd",
        offset_of!(ibv_srq_init_attr_ex, pd),
        field_size!(ibv_srq_init_attr_ex, pd),
    ),
    (
        "ibv_srq_init_attr_ex",
        "xrcd",
        offset_of!(ibv_srq_init_attr_ex, xrcd),
        field_size!(ibv_srq_init_attr_ex, xrcd),
    ),
    (
        "ibv_srq_init_attr_ex",
        "cq",
        offset_of!(ibv_srq_init_attr_ex, cq),
        field_size!(ibv_srq_init_attr_ex, cq),
    ),
    (
        "ibv_srq_init_attr_ex",
        "tm_cap",
        offset_of!(ibv_srq_init_attr_ex, tm_cap),
        field_size!(ibv_srq_init_attr_ex, tm_cap),
    ),
    (
        "ibv_srq_attr",
        "max_wr",
        offset_of!(ibv_srq_attr, max_wr),
        field_size!(ibv_srq_attr, max_wr),
    ),
    (
        "ibv_srq_attr",
        "max_sge",
        offset_of!(ibv_srq_attr, max_sge),
        field_size!(ibv_srq_attr, max_sge),
    ),
    (
        "ibv_srq_attr",
        "srq_limit",
        offset_of!(ibv_srq_attr, srq_limit),
        field_size!(ibv_srq_attr, srq_limit),
    ),
    (
        "ibv_cq_init_attr_ex",
        "cqe",
        offset_of!(ibv_cq_init_attr_ex, cqe),
        field_size!(ibv_cq_init_attr_ex, cqe),
    ),
    (
        "ibv_cq_init_attr_ex",
        "cq_context",
        offset_of!(ibv_cq_init_attr_ex, cq_context),
        field_size!(ibv_cq_init_attr_ex, cq_context),
    ),
    (
        "ibv_cq_init_attr_ex",
        "channel",
        offset_of!(ibv_cq_init_attr_ex, channel),
        field_size!(ibv_cq_init_attr_ex, channel),
    ),
    (
        "ibv_cq_init_attr_ex",
        "comp_vector",
        offset_of!(ibv_cq_init_attr_ex, comp_vector),
        field_size!(ibv_cq_init_attr_ex, comp_vector),
    ),
    (
        "ibv_cq_init_attr_ex",
        "wc_flags",
        offset_of!(ibv_cq_init_attr_ex, wc_flags),
        field_size!(ibv_cq_init_attr_ex, wc_flags),
    ),
    (
        "ibv_cq_init_attr_ex",
        "comp_mask",
        offset_of!(ibv_cq_init_attr_ex, comp_mask),
        field_size!(ibv_cq_init_attr_ex, comp_mask),
    ),
    (
        "ibv_cq_init_attr_ex",
        "flags",
        offset_of!(ibv_cq_init_attr_ex, flags),
        field_size!(ibv_cq_init_attr_ex, flags),
    ),
    (
        "ibv_cq_init_attr_ex",
        "parent_domain",
        offset_of!(ibv_cq_init_attr_ex, parent_domain),
        field_size!(ibv_cq_init_attr_ex, parent_domain),
    ),
    (
        "ibv_xrcd",
        "context",
        offset_of!(ibv_xrcd, context),
        field_size!(ibv_xrcd, context),
    ),
    (
        "ibv_async_event",
        "element",
        offset_of!(ibv_async_event, element),
        field_size!(ibv_async_event, element),
    ),
    (
        "ibv_async_event",
        "event_type",
        offset_of!(ibv_async_event, event_type),
        field_size!(ibv_async_event, event_type),
    ),
    (
        "ibv_poll_cq_attr",
        "comp_mask",
        offset_of!(ibv_poll_cq_attr, comp_mask),
        field_size!(ibv_poll_cq_attr, comp_mask),
    ),
    (
        "ibv_grh",
        "version_tclass_flow",
        offset_of!(ibv_grh, version_tclass_flow),
        field_size!(ibv_grh, version_tclass_flow),
    ),
    (
        "ibv_grh",
        "paylen",
        offset_of!(ibv_grh, paylen),
        field_size!(ibv_grh, paylen),
    ),
    (
        "ibv_grh",
        "next_hdr",
        offset_of!(ibv_grh, next_hdr),
        field_size!(ibv_grh, next_hdr),
    ),
    (
        "ibv_grh",
        "hop_limit",
        offset_of!(ibv_grh, hop_limit),
        field_size!(ibv_grh, hop_limit),
    ),
    (
        "ibv_grh",
        "sgid",
        offset_of!(ibv_grh, sgid),
        field_size!(ibv_grh, sgid),
    ),
    (
        "ibv_grh",
        "dgid",
        offset_of!(ibv_grh, dgid),
        field_size!(ibv_grh, dgid),
    ),
    (
        "ibv_mw",
        "context",
        offset_of!(ibv_mw, context),
        field_size!(ibv_mw, context),
    ),
    (
        "ibv_mw",
        "pd",
        offset_of!(ibv_mw, pd),
        field_size!(ibv_mw, pd),
    ),
    (
        "ibv_mw",
        "rkey",
        offset_of!(ibv_mw, rkey),
        field_size!(ibv_mw, rkey),
    ),
    (
        "ibv_mw",
        "handle",
        offset_of!(ibv_mw, handle),
        field_size!(ibv_mw, handle),
    ),
    (
        "ibv_mw",
        "type",
        offset_of!(ibv_mw, type_),
        field_size!(ibv_mw, type_),
    ),
    (
        "ibv_qp_open_attr",
        "comp_mask",
        offset_of!(ibv_qp_open_attr, comp_mask),
        field_size!(ibv_qp_open_attr, comp_mask),
    ),
    (
        "ibv_qp_open_attr",
        "qp_num",
        offset_of!(ibv_qp_open_attr, qp_num),
        field_size!(ibv_qp_open_attr, qp_num),
    ),
    (
        "ibv_qp_open_attr",
        "xrcd",
        offset_of!(ibv_qp_open_attr, xrcd),
        field_size!(ibv_qp_open_attr, xrcd),
    ),
    (
        "ibv_qp_open_attr",
        "qp_context",
        offset_of!(ibv_qp_open_attr, qp_context),
        field_size!(ibv_qp_open_attr, qp_context),
    ),
    (
        "ibv_qp_open_attr",
        "qp_type",
        offset_of!(ibv_qp_open_attr, qp_type),
        field_size!(ibv_qp_open_attr, qp_type),
    ),
    (
        "ibv_xrcd_init_attr",
        "comp_mask",
        offset_of!(ibv_xrcd_init_attr, comp_mask),
        field_size!(ibv_xrcd_init_attr, comp_mask),
    ),
    (
        "ibv_xrcd_init_attr",
        "fd",
        offset_of!(ibv_xrcd_init_attr, fd),
        field_size!(ibv_xrcd_init_attr, fd),
    ),
    (
        "ibv_xrcd_init_attr",
        "oflags",
        offset_of!(ibv_xrcd_init_attr, oflags),
        field_size!(ibv_xrcd_init_attr, oflags),
    ),
    (
        "ibv_wc",
        "imm_data",
        offset_of!(ibv_wc, imm_data),
        field_size!(ibv_wc, imm_data),
    ),
    (
        "ibv_send_wr",
        "imm_data",
        offset_of!(ibv_send_wr, imm_data),
        field_size!(ibv_send_wr, imm_data),
    ),
    (
        "ibv_send_wr",
        "wr.rdma.remote_addr",
        offset_of!(ibv_send_wr, wr.rdma.remote_addr),
        field_size!(ibv_send_wr, wr.rdma.remote_addr),
    ),
    (
        "ibv_send_wr",
        "wr.rdma.rkey",
        offset_of!(ibv_send_wr, wr.rdma.rkey),
        field_size!(ibv_send_wr, wr.rdma.rkey),
    ),
    (
        "ibv_send_wr",
        "wr.atomic.remote_addr",
        offset_of!(ibv_send_wr, wr.atomic.remote_addr),
        field_size!(ibv_send_wr, wr.atomic.remote_addr),
    ),
    (
        "ibv_send_wr",
        "wr.atomic.compare_add",
        offset_of!(ibv_send_wr, wr.atomic.compare_add),
        field_size!(ibv_send_wr, wr.atomic.compare_add),
    ),
    (
        "ibv_send_wr",
        "wr.atomic.swap",
        offset_of!(ibv_send_wr, wr.atomic.swap),
        field_size!(ibv_send_wr, wr.atomic.swap),
    ),
    (
        "ibv_send_wr",
        "wr.atomic.rkey",
        offset_of!(ibv_send_wr, wr.atomic.rkey),
        field_size!(ibv_send_wr, wr.atomic.rkey),
    ),
    (
        "ibv_send_wr",
        "wr.ud.ah",
        offset_of!(ibv_send_wr, wr.ud.ah),
        field_size!(ibv_send_wr, wr.ud.ah),
    ),
    (
        "ibv_send_wr",
        "wr.ud.remote_qpn",
        offset_of!(ibv_send_wr, wr.ud.remote_qpn),
        field_size!(ibv_send_wr, wr.ud.remote_qpn),
    ),
    (
        "ibv_send_wr",
        "wr.ud.remote_qkey",
        offset_of!(ibv_send_wr, wr.ud.remote_qkey),
        field_size!(ibv_send_wr, wr.ud.remote_qkey),
    ),
    (
        "ibv_send_wr",
        "qp_type.xrc.remote_srqn",
        offset_of!(ibv_send_wr, qp_type.xrc.remote_srqn),
        field_size!(ibv_send_wr, qp_type.xrc.remote_srqn),
    ),
    (
        "ibv_send_wr",
        "bind_mw",
        offset_of!(ibv_send_wr, ext.bind_mw),
        field_size!(ibv_send_wr, ext.bind_mw),
    ),
    (
        "ibv_send_wr",
        "tso",
        offset_of!(ibv_send_wr, ext.tso),
        field_size!(ibv_send_wr, ext.tso),
    ),
];

// The figures of the x86_64 rdma-core 44 headers.
const _: () = {
    assert!(size_of::<ibv_device>() == 664);
    assert!(align_of::<ibv_device>() == 8);
    assert!(size_of::<ibv_context>() == 328);
    assert!(align_of::<ibv_context>() == 8);
    assert!(size_of::<ibv_context_ops>() == 256);
    assert!(align_of::<ibv_context_ops>() == 8);
    assert!(size_of::<verbs_context>() == 648);
    assert!(align_of::<verbs_context>() == 8);
    assert!(size_of::<ibv_device_attr>() == 232);
    assert!(align_of::<ibv_device_attr>() == 8);
    assert!(size_of::<ibv_device_attr_ex>() == 400);
    assert!(align_of::<ibv_device_attr_ex>() == 8);
    assert!(size_of::<ibv_port_attr>() == 52);
    assert!(align_of::<ibv_port_attr>() == 4);
    assert!(size_of::<ibv_gid_entry>() == 32);
    assert!(align_of::<ibv_gid_entry>() == 8);
    assert!(size_of::<ibv_pd>() == 16);
    assert!(align_of::<ibv_pd>() == 8);
    assert!(size_of::<ibv_mr>() == 48);
    assert!(align_of::<ibv_mr>() == 8);
    assert!(size_of::<ibv_cq>() == 128);
    assert!(align_of::<ibv_cq>() == 8);
    assert!(size_of::<ibv_cq_ex>() == 288);
    assert!(align_of::<ibv_cq_ex>() == 8);
    assert!(size_of::<ibv_qp>() == 160);
    assert!(align_of::<ibv_qp>() == 8);
    assert!(size_of::<ibv_qp_ex>() == 352);
    assert!(align_of::<ibv_qp_ex>() == 8);
    assert!(size_of::<ibv_srq>() == 128);
    assert!(align_of::<ibv_srq>() == 8);
    assert!(size_of::<ibv_ah>() == 24);
    assert!(align_of::<ibv_ah>() == 8);
    assert!(size_of::<ibv_comp_channel>() == 16);
    assert!(align_of::<ibv_comp_channel>() == 8);
    assert!(size_of::<ibv_qp_init_attr>() == 64);
    assert!(align_of::<ibv_qp_init_attr>() == 8);
    assert!(size_of::<ibv_qp_init_attr_ex>() == 136);
    assert!(align_of::<ibv_qp_init_attr_ex>() == 8);
    assert!(size_of::<ibv_qp_attr>() == 144);
    assert!(align_of::<ibv_qp_attr>() == 8);
    assert!(size_of::<ibv_qp_cap>() == 20);
    assert!(align_of::<ibv_qp_cap>() == 4);
    assert!(size_of::<ibv_ah_attr>() == 32);
    assert!(align_of::<ibv_ah_attr>() == 8);
    assert!(size_of::<ibv_global_route>() == 24);
    assert!(align_of::<ibv_global_route>() == 8);
    assert!(size_of::<ibv_send_wr>() == 128);
    assert!(align_of::<ibv_send_wr>() == 8);
    assert!(size_of::<ibv_recv_wr>() == 32);
    assert!(align_of::<ibv_recv_wr>() == 8);
    assert!(size_of::<ibv_sge>() == 16);
    assert!(align_of::<ibv_sge>() == 8);
    assert!(size_of::<ibv_wc>() == 48);
    assert!(align_of::<ibv_wc>() == 8);
    assert!(size_of::<ibv_srq_init_attr>() == 24);
    assert!(align_of::<ibv_srq_init_attr>() == 8);
    assert!(size_of::<ibv_srq_init_attr_ex>() == 64);
    assert!(align_of::<ibv_srq_init_attr_ex>() == 8);
    assert!(size_of::<ibv_srq_attr>() == 12);
    assert!(align_of::<ibv_srq_attr>() == 4);
    assert!(size_of::<ibv_cq_init_attr_ex>() == 56);
    assert!(align_of::<ibv_cq_init_attr_ex>() == 8);
    assert!(size_of::<ibv_xrcd>() == 8);
    assert!(align_of::<ibv_xrcd>() == 8);
    assert!(size_of::<ibv_async_event>() == 16);
    assert!(align_of::<ibv_async_event>() == 8);
    assert!(size_of::<ibv_poll_cq_attr>() == 4);
    assert!(align_of::<ibv_poll_cq_attr>() == 4);
    assert!(size_of::<ibv_grh>() == 40);
    assert!(align_of::<ibv_grh>() == 8);
    assert!(size_of::<ibv_mw>() == 32);
    assert!(align_of::<ibv_mw>() == 8);
    assert!(size_of::<ibv_qp_open_attr>() == 32);
    assert!(align_of::<ibv_qp_open_attr>() == 8);
    assert!(size_of::<ibv_xrcd_init_attr>() == 12);
    assert!(align_of::<ibv_xrcd_init_attr>() == 4);
    assert!(offset_of!(ibv_device, _ops) == 0);
    assert!(field_size!(ibv_device, _ops) == 16);
    assert!(offset_of!(ibv_device, node_type) == 16);
    assert!(field_size!(ibv_device, node_type) == 4);
    assert!(offset_of!(ibv_device, transport_type) == 20);
    assert!(field_size!(ibv_device, transport_type) == 4);
    assert!(offset_of!(ibv_device, name) == 24);
    assert!(field_size!(ibv_device, name) == 64);
    assert!(offset_of!(ibv_device, dev_name) == 88);
    assert!(field_size!(ibv_device, dev_name) == 64);
    assert!(offset_of!(ibv_device, dev_path) == 152);
    assert!(field_size!(ibv_device, dev_path) == 256);
    assert!(offset_of!(ibv_device, ibdev_path) == 408);
    assert!(field_size!(ibv_device, ibdev_path) == 256);
    assert!(offset_of!(ibv_context, device) == 0);
    assert!(field_size!(ibv_context, device) == 8);
    assert!(offset_of!(ibv_context, ops) == 8);
    assert!(field_size!(ibv_context, ops) == 256);
    assert!(offset_of!(ibv_context, cmd_fd) == 264);
    assert!(field_size!(ibv_context, cmd_fd) == 4);
    assert!(offset_of!(ibv_context, async_fd) == 268);
    assert!(field_size!(ibv_context, async_fd) == 4);
    assert!(offset_of!(ibv_context, num_comp_vectors) == 272);
    assert!(field_size!(ibv_context, num_comp_vectors) == 4);
    assert!(offset_of!(ibv_context, mutex) == 280);
    assert!(field_size!(ibv_context, mutex) == 40);
    assert!(offset_of!(ibv_context, abi_compat) == 320);
    assert!(field_size!(ibv_context, abi_compat) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_query_device) == 0);
    assert!(field_size!(ibv_context_ops, _compat_query_device) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_query_port) == 8);
    assert!(field_size!(ibv_context_ops, _compat_query_port) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_alloc_pd) == 16);
    assert!(field_size!(ibv_context_ops, _compat_alloc_pd) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_dealloc_pd) == 24);
    assert!(field_size!(ibv_context_ops, _compat_dealloc_pd) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_reg_mr) == 32);
    assert!(field_size!(ibv_context_ops, _compat_reg_mr) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_rereg_mr) == 40);
    assert!(field_size!(ibv_context_ops, _compat_rereg_mr) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_dereg_mr) == 48);
    assert!(field_size!(ibv_context_ops, _compat_dereg_mr) == 8);
    assert!(offset_of!(ibv_context_ops, alloc_mw) == 56);
    assert!(field_size!(ibv_context_ops, alloc_mw) == 8);
    assert!(offset_of!(ibv_context_ops, bind_mw) == 64);
    assert!(field_size!(ibv_context_ops, bind_mw) == 8);
    assert!(offset_of!(ibv_context_ops, dealloc_mw) == 72);
    assert!(field_size!(ibv_context_ops, dealloc_mw) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_create_cq) == 80);
    assert!(field_size!(ibv_context_ops, _compat_create_cq) == 8);
    assert!(offset_of!(ibv_context_ops, poll_cq) == 88);
    assert!(field_size!(ibv_context_ops, poll_cq) == 8);
    assert!(offset_of!(ibv_context_ops, req_notify_cq) == 96);
    assert!(field_size!(ibv_context_ops, req_notify_cq) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_cq_event) == 104);
    assert!(field_size!(ibv_context_ops, _compat_cq_event) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_resize_cq) == 112);
    assert!(field_size!(ibv_context_ops, _compat_resize_cq) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_destroy_cq) == 120);
    assert!(field_size!(ibv_context_ops, _compat_destroy_cq) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_create_srq) == 128);
    assert!(field_size!(ibv_context_ops, _compat_create_srq) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_modify_srq) == 136);
    assert!(field_size!(ibv_context_ops, _compat_modify_srq) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_query_srq) == 144);
    assert!(field_size!(ibv_context_ops, _compat_query_srq) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_destroy_srq) == 152);
    assert!(field_size!(ibv_context_ops, _compat_destroy_srq) == 8);
    assert!(offset_of!(ibv_context_ops, post_srq_recv) == 160);
    assert!(field_size!(ibv_context_ops, post_srq_recv) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_create_qp) == 168);
    assert!(field_size!(ibv_context_ops, _compat_create_qp) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_query_qp) == 176);
    assert!(field_size!(ibv_context_ops, _compat_query_qp) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_modify_qp) == 184);
    assert!(field_size!(ibv_context_ops, _compat_modify_qp) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_destroy_qp) == 192);
    assert!(field_size!(ibv_context_ops, _compat_destroy_qp) == 8);
    assert!(offset_of!(ibv_context_ops, post_send) == 200);
    assert!(field_size!(ibv_context_ops, post_send) == 8);
    assert!(offset_of!(ibv_context_ops, post_recv) == 208);
    assert!(field_size!(ibv_context_ops, post_recv) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_create_ah) == 216);
    assert!(field_size!(ibv_context_ops, _compat_create_ah) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_destroy_ah) == 224);
    assert!(field_size!(ibv_context_ops, _compat_destroy_ah) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_attach_mcast) == 232);
    assert!(field_size!(ibv_context_ops, _compat_attach_mcast) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_detach_mcast) == 240);
    assert!(field_size!(ibv_context_ops, _compat_detach_mcast) == 8);
    assert!(offset_of!(ibv_context_ops, _compat_async_event) == 248);
    assert!(field_size!(ibv_context_ops, _compat_async_event) == 8);
    assert!(offset_of!(verbs_context, query_port) == 0);
    assert!(field_size!(verbs_context, query_port) == 8);
    assert!(offset_of!(verbs_context, advise_mr) == 8);
    assert!(field_size!(verbs_context, advise_mr) == 8);
    assert!(offset_of!(verbs_context, alloc_null_mr) == 16);
    assert!(field_size!(verbs_context, alloc_null_mr) == 8);
    assert!(offset_of!(verbs_context, read_counters) == 24);
    assert!(field_size!(verbs_context, read_counters) == 8);
    assert!(offset_of!(verbs_context, attach_counters_point_flow) == 32);
    assert!(field_size!(verbs_context, attach_counters_point_flow) == 8);
    assert!(offset_of!(verbs_context, create_counters) == 40);
    assert!(field_size!(verbs_context, create_counters) == 8);
    assert!(offset_of!(verbs_context, destroy_counters) == 48);
    assert!(field_size!(verbs_context, destroy_counters) == 8);
    assert!(offset_of!(verbs_context, reg_dm_mr) == 56);
    assert!(field_size!(verbs_context, reg_dm_mr) == 8);
    assert!(offset_of!(verbs_context, alloc_dm) == 64);
    assert!(field_size!(verbs_context, alloc_dm) == 8);
    assert!(offset_of!(verbs_context, free_dm) == 72);
    assert!(field_size!(verbs_context, free_dm) == 8);
    assert!(offset_of!(verbs_context, modify_flow_action_esp) == 80);
    assert!(field_size!(verbs_context, modify_flow_action_esp) == 8);
    assert!(offset_of!(verbs_context, destroy_flow_action) == 88);
    assert!(field_size!(verbs_context, destroy_flow_action) == 8);
    assert!(offset_of!(verbs_context, create_flow_action_esp) == 96);
    assert!(field_size!(verbs_context, create_flow_action_esp) == 8);
    assert!(offset_of!(verbs_context, modify_qp_rate_limit) == 104);
    assert!(field_size!(verbs_context, modify_qp_rate_limit) == 8);
    assert!(offset_of!(verbs_context, alloc_parent_domain) == 112);
    assert!(field_size!(verbs_context, alloc_parent_domain) == 8);
    assert!(offset_of!(verbs_context, dealloc_td) == 120);
    assert!(field_size!(verbs_context, dealloc_td) == 8);
    assert!(offset_of!(verbs_context, alloc_td) == 128);
    assert!(field_size!(verbs_context, alloc_td) == 8);
    assert!(offset_of!(verbs_context, modify_cq) == 136);
    assert!(field_size!(verbs_context, modify_cq) == 8);
    assert!(offset_of!(verbs_context, post_srq_ops) == 144);
    assert!(field_size!(verbs_context, post_srq_ops) == 8);
    assert!(offset_of!(verbs_context, destroy_rwq_ind_table) == 152);
    assert!(field_size!(verbs_context, destroy_rwq_ind_table) == 8);
    assert!(offset_of!(verbs_context, create_rwq_ind_table) == 160);
    assert!(field_size!(verbs_context, create_rwq_ind_table) == 8);
    assert!(offset_of!(verbs_context, destroy_wq) == 168);
    assert!(field_size!(verbs_context, destroy_wq) == 8);
    assert!(offset_of!(verbs_context, modify_wq) == 176);
    assert!(field_size!(verbs_context, modify_wq) == 8);
    assert!(offset_of!(verbs_context, create_wq) == 184);
    assert!(field_size!(verbs_context, create_wq) == 8);
    assert!(offset_of!(verbs_context, query_rt_values) == 192);
    assert!(field_size!(verbs_context, query_rt_values) == 8);
    assert!(offset_of!(verbs_context, create_cq_ex) == 200);
    assert!(field_size!(verbs_context, create_cq_ex) == 8);
    assert!(offset_of!(verbs_context, priv_) == 208);
    assert!(field_size!(verbs_context, priv_) == 8);
    assert!(offset_of!(verbs_context, query_device_ex) == 216);
    assert!(field_size!(verbs_context, query_device_ex) == 8);
    assert!(offset_of!(verbs_context, ibv_destroy_flow) == 224);
    assert!(field_size!(verbs_context, ibv_destroy_flow) == 8);
    assert!(offset_of!(verbs_context, ABI_placeholder2) == 232);
    assert!(field_size!(verbs_context, ABI_placeholder2) == 8);
    assert!(offset_of!(verbs_context, ibv_create_flow) == 240);
    assert!(field_size!(verbs_context, ibv_create_flow) == 8);
    assert!(offset_of!(verbs_context, ABI_placeholder1) == 248);
    assert!(field_size!(verbs_context, ABI_placeholder1) == 8);
    assert!(offset_of!(verbs_context, open_qp) == 256);
    assert!(field_size!(verbs_context, open_qp) == 8);
    assert!(offset_of!(verbs_context, create_qp_ex) == 264);
    assert!(field_size!(verbs_context, create_qp_ex) == 8);
    assert!(offset_of!(verbs_context, get_srq_num) == 272);
    assert!(field_size!(verbs_context, get_srq_num) == 8);
    assert!(offset_of!(verbs_context, create_srq_ex) == 280);
    assert!(field_size!(verbs_context, create_srq_ex) == 8);
    assert!(offset_of!(verbs_context, open_xrcd) == 288);
    assert!(field_size!(verbs_context, open_xrcd) == 8);
    assert!(offset_of!(verbs_context, close_xrcd) == 296);
    assert!(field_size!(verbs_context, close_xrcd) == 8);
    assert!(offset_of!(verbs_context, _ABI_placeholder3) == 304);
    assert!(field_size!(verbs_context, _ABI_placeholder3) == 8);
    assert!(offset_of!(verbs_context, sz) == 312);
    assert!(field_size!(verbs_context, sz) == 8);
    assert!(offset_of!(verbs_context, context) == 320);
    assert!(field_size!(verbs_context, context) == 328);
    assert!(offset_of!(ibv_device_attr, fw_ver) == 0);
    assert!(field_size!(ibv_device_attr, fw_ver) == 64);
    assert!(offset_of!(ibv_device_attr, node_guid) == 64);
    assert!(field_size!(ibv_device_attr, node_guid) == 8);
    assert!(offset_of!(ibv_device_attr, sys_image_guid) == 72);
    assert!(field_size!(ibv_device_attr, sys_image_guid) == 8);
    assert!(offset_of!(ibv_device_attr, max_mr_size) == 80);
    assert!(field_size!(ibv_device_attr, max_mr_size) == 8);
    assert!(offset_of!(ibv_device_attr, page_size_cap) == 88);
    assert!(field_size!(ibv_device_attr, page_size_cap) == 8);
    assert!(offset_of!(ibv_device_attr, vendor_id) == 96);
    assert!(field_size!(ibv_device_attr, vendor_id) == 4);
    assert!(offset_of!(ibv_device_attr, vendor_part_id) == 100);
    assert!(field_size!(ibv_device_attr, vendor_part_id) == 4);
    assert!(offset_of!(ibv_device_attr, hw_ver) == 104);
    assert!(field_size!(ibv_device_attr, hw_ver) == 4);
    assert!(offset_of!(ibv_device_attr, max_qp) == 108);
    assert!(field_size!(ibv_device_attr, max_qp) == 4);
    assert!(offset_of!(ibv_device_attr, max_qp_wr) == 112);
    assert!(field_size!(ibv_device_attr, max_qp_wr) == 4);
    assert!(offset_of!(ibv_device_attr, device_cap_flags) == 116);
    assert!(field_size!(ibv_device_attr, device_cap_flags) == 4);
    assert!(offset_of!(ibv_device_attr, max_sge) == 120);
    assert!(field_size!(ibv_device_attr, max_sge) == 4);
    assert!(offset_of!(ibv_device_attr, max_sge_rd) == 124);
    assert!(field_size!(ibv_device_attr, max_sge_rd) == 4);
    assert!(offset_of!(ibv_device_attr, max_cq) == 128);
    assert!(field_size!(ibv_device_attr, max_cq) == 4);
    assert!(offset_of!(ibv_device_attr, max_cqe) == 132);
    assert!(field_size!(ibv_device_attr, max_cqe) == 4);
    assert!(offset_of!(ibv_device_attr, max_mr) == 136);
    assert!(field_size!(ibv_device_attr, max_mr) == 4);
    assert!(offset_of!(ibv_device_attr, max_pd) == 140);
    assert!(field_size!(ibv_device_attr, max_pd) == 4);
    assert!(offset_of!(ibv_device_attr, max_qp_rd_atom) == 144);
    assert!(field_size!(ibv_device_attr, max_qp_rd_atom) == 4);
    assert!(offset_of!(ibv_device_attr, max_ee_rd_atom) == 148);
    assert!(field_size!(ibv_device_attr, max_ee_rd_atom) == 4);
    assert!(offset_of!(ibv_device_attr, max_res_rd_atom) == 152);
    assert!(field_size!(ibv_device_attr, max_res_rd_atom) == 4);
    assert!(offset_of!(ibv_device_attr, max_qp_init_rd_atom) == 156);
    assert!(field_size!(ibv_device_attr, max_qp_init_rd_atom) == 4);
    assert!(offset_of!(ibv_device_attr, max_ee_init_rd_atom) == 160);
    assert!(field_size!(ibv_device_attr, max_ee_init_rd_atom) == 4);
    assert!(offset_of!(ibv_device_attr, atomic_cap) == 164);
    assert!(field_size!(ibv_device_attr, atomic_cap) == 4);
    assert!(offset_of!(ibv_device_attr, max_ee) == 168);
    assert!(field_size!(ibv_device_attr, max_ee) == 4);
    assert!(offset_of!(ibv_device_attr, max_rdd) == 172);
    assert!(field_size!(ibv_device_attr, max_rdd) == 4);
    assert!(offset_of!(ibv_device_attr, max_mw) == 176);
    assert!(field_size!(ibv_device_attr, max_mw) == 4);
    assert!(offset_of!(ibv_device_attr, max_raw_ipv6_qp) == 180);
    assert!(field_size!(ibv_device_attr, max_raw_ipv6_qp) == 4);
    assert!(offset_of!(ibv_device_attr, max_raw_ethy_qp) == 184);
    assert!(field_size!(ibv_device_attr, max_raw_ethy_qp) == 4);
    assert!(offset_of!(ibv_device_attr, max_mcast_grp) == 188);
    assert!(field_size!(ibv_device_attr, max_mcast_grp) == 4);
    assert!(offset_of!(ibv_device_attr, max_mcast_qp_attach) == 192);
    assert!(field_size!(ibv_device_attr, max_mcast_qp_attach) == 4);
    assert!(offset_of!(ibv_device_attr, max_total_mcast_qp_attach) == 196);
    assert!(field_size!(ibv_device_attr, max_total_mcast_qp_attach) == 4);
    assert!(offset_of!(ibv_device_attr, max_ah) == 200);
    assert!(field_size!(ibv_device_attr, max_ah) == 4);
    assert!(offset_of!(ibv_device_attr, max_fmr) == 204);
    assert!(field_size!(ibv_device_attr, max_fmr) == 4);
    assert!(offset_of!(ibv_device_attr, max_map_per_fmr) == 208);
    assert!(field_size!(ibv_device_attr, max_map_per_fmr) == 4);
    assert!(offset_of!(ibv_device_attr, max_srq) == 212);
    assert!(field_size!(ibv_device_attr, max_srq) == 4);
    assert!(offset_of!(ibv_device_attr, max_srq_wr) == 216);
    assert!(field_size!(ibv_device_attr, max_srq_wr) == 4);
    assert!(offset_of!(ibv_device_attr, max_srq_sge) == 220);
    assert!(field_size!(ibv_device_attr, max_srq_sge) == 4);
    assert!(offset_of!(ibv_device_attr, max_pkeys) == 224);
    assert!(field_size!(ibv_device_attr, max_pkeys) == 2);
    assert!(offset_of!(ibv_device_attr, local_ca_ack_delay) == 226);
    assert!(field_size!(ibv_device_attr, local_ca_ack_delay) == 1);
    assert!(offset_of!(ibv_device_attr, phys_port_cnt) == 227);
    assert!(field_size!(ibv_device_attr, phys_port_cnt) == 1);
    assert!(offset_of!(ibv_device_attr_ex, orig_attr) == 0);
    assert!(field_size!(ibv_device_attr_ex, orig_attr) == 232);
    assert!(offset_of!(ibv_device_attr_ex, comp_mask) == 232);
    assert!(field_size!(ibv_device_attr_ex, comp_mask) == 4);
    assert!(offset_of!(ibv_device_attr_ex, odp_caps) == 240);
    assert!(field_size!(ibv_device_attr_ex, odp_caps) == 24);
    assert!(offset_of!(ibv_device_attr_ex, completion_timestamp_mask) == 264);
    assert!(field_size!(ibv_device_attr_ex, completion_timestamp_mask) == 8);
    assert!(offset_of!(ibv_device_attr_ex, hca_core_clock) == 272);
    assert!(field_size!(ibv_device_attr_ex, hca_core_clock) == 8);
    assert!(offset_of!(ibv_device_attr_ex, device_cap_flags_ex) == 280);
    assert!(field_size!(ibv_device_attr_ex, device_cap_flags_ex) == 8);
    assert!(offset_of!(ibv_device_attr_ex, tso_caps) == 288);
    assert!(field_size!(ibv_device_attr_ex, tso_caps) == 8);
    assert!(offset_of!(ibv_device_attr_ex, rss_caps) == 296);
    assert!(field_size!(ibv_device_attr_ex, rss_caps) == 32);
    assert!(offset_of!(ibv_device_attr_ex, max_wq_type_rq) == 328);
    assert!(field_size!(ibv_device_attr_ex, max_wq_type_rq) == 4);
    assert!(offset_of!(ibv_device_attr_ex, packet_pacing_caps) == 332);
    assert!(field_size!(ibv_device_attr_ex, packet_pacing_caps) == 12);
    assert!(offset_of!(ibv_device_attr_ex, raw_packet_caps) == 344);
    assert!(field_size!(ibv_device_attr_ex, raw_packet_caps) == 4);
    assert!(offset_of!(ibv_device_attr_ex, tm_caps) == 348);
    assert!(field_size!(ibv_device_attr_ex, tm_caps) == 20);
    assert!(offset_of!(ibv_device_attr_ex, cq_mod_caps) == 368);
    assert!(field_size!(ibv_device_attr_ex, cq_mod_caps) == 4);
    assert!(offset_of!(ibv_device_attr_ex, max_dm_size) == 376);
    assert!(field_size!(ibv_device_attr_ex, max_dm_size) == 8);
    assert!(offset_of!(ibv_device_attr_ex, pci_atomic_caps) == 384);
    assert!(field_size!(ibv_device_attr_ex, pci_atomic_caps) == 6);
    assert!(offset_of!(ibv_device_attr_ex, xrc_odp_caps) == 392);
    assert!(field_size!(ibv_device_attr_ex, xrc_odp_caps) == 4);
    assert!(offset_of!(ibv_device_attr_ex, phys_port_cnt_ex) == 396);
    assert!(field_size!(ibv_device_attr_ex, phys_port_cnt_ex) == 4);
    assert!(offset_of!(ibv_port_attr, state) == 0);
    assert!(field_size!(ibv_port_attr, state) == 4);
    assert!(offset_of!(ibv_port_attr, max_mtu) == 4);
    assert!(field_size!(ibv_port_attr, max_mtu) == 4);
    assert!(offset_of!(ibv_port_attr, active_mtu) == 8);
    assert!(field_size!(ibv_port_attr, active_mtu) == 4);
    assert!(offset_of!(ibv_port_attr, gid_tbl_len) == 12);
    assert!(field_size!(ibv_port_attr, gid_tbl_len) == 4);
    assert!(offset_of!(ibv_port_attr, port_cap_flags) == 16);
    assert!(field_size!(ibv_port_attr, port_cap_flags) == 4);
    assert!(offset_of!(ibv_port_attr, max_msg_sz) == 20);
    assert!(field_size!(ibv_port_attr, max_msg_sz) == 4);
    assert!(offset_of!(ibv_port_attr, bad_pkey_cntr) == 24);
    assert!(field_size!(ibv_port_attr, bad_pkey_cntr) == 4);
    assert!(offset_of!(ibv_port_attr, qkey_viol_cntr) == 28);
    assert!(field_size!(ibv_port_attr, qkey_viol_cntr) == 4);
    assert!(offset_of!(ibv_port_attr, pkey_tbl_len) == 32);
    assert!(field_size!(ibv_port_attr, pkey_tbl_len) == 2);
    assert!(offset_of!(ibv_port_attr, lid) == 34);
    assert!(field_size!(ibv_port_attr, lid) == 2);
    assert!(offset_of!(ibv_port_attr, sm_lid) == 36);
    assert!(field_size!(ibv_port_attr, sm_lid) == 2);
    assert!(offset_of!(ibv_port_attr, lmc) == 38);
    assert!(field_size!(ibv_port_attr, lmc) == 1);
    assert!(offset_of!(ibv_port_attr, max_vl_num) == 39);
    assert!(field_size!(ibv_port_attr, max_vl_num) == 1);
    assert!(offset_of!(ibv_port_attr, sm_sl) == 40);
    assert!(field_size!(ibv_port_attr, sm_sl) == 1);
    assert!(offset_of!(ibv_port_attr, subnet_timeout) == 41);
    assert!(field_size!(ibv_port_attr, subnet_timeout) == 1);
    assert!(offset_of!(ibv_port_attr, init_type_reply) == 42);
    assert!(field_size!(ibv_port_attr, init_type_reply) == 1);
    assert!(offset_of!(ibv_port_attr, active_width) == 43);
    assert!(field_size!(ibv_port_attr, active_width) == 1);
    assert!(offset_of!(ibv_port_attr, active_speed) == 44);
    assert!(field_size!(ibv_port_attr, active_speed) == 1);
    assert!(offset_of!(ibv_port_attr, phys_state) == 45);
    assert!(field_size!(ibv_port_attr, phys_state) == 1);
    assert!(offset_of!(ibv_port_attr, link_layer) == 46);
    assert!(field_size!(ibv_port_attr, link_layer) == 1);
    assert!(offset_of!(ibv_port_attr, flags) == 47);
    assert!(field_size!(ibv_port_attr, flags) == 1);
    assert!(offset_of!(ibv_port_attr, port_cap_flags2) == 48);
    assert!(field_size!(ibv_port_attr, port_cap_flags2) == 2);
    assert!(offset_of!(ibv_gid_entry, gid) == 0);
    assert!(field_size!(ibv_gid_entry, gid) == 16);
    assert!(offset_of!(ibv_gid_entry, gid_index) == 16);
    assert!(field_size!(ibv_gid_entry, gid_index) == 4);
    assert!(offset_of!(ibv_gid_entry, port_num) == 20);
    assert!(field_size!(ibv_gid_entry, port_num) == 4);
    assert!(offset_of!(ibv_gid_entry, gid_type) == 24);
    assert!(field_size!(ibv_gid_entry, gid_type) == 4);
    assert!(offset_of!(ibv_gid_entry, ndev_ifindex) == 28);
    assert!(field_size!(ibv_gid_entry, ndev_ifindex) == 4);
    assert!(offset_of!(ibv_pd, context) == 0);
    assert!(field_size!(ibv_pd, context) == 8);
    assert!(offset_of!(ibv_pd, handle) == 8);
    assert!(field_size!(ibv_pd, handle) == 4);
    assert!(offset_of!(ibv_mr, context) == 0);
    assert!(field_size!(ibv_mr, context) == 8);
    assert!(offset_of!(ibv_mr, pd) == 8);
    assert!(field_size!(ibv_mr, pd) == 8);
    assert!(offset_of!(ibv_mr, addr) == 16);
    assert!(field_size!(ibv_mr, addr) == 8);
    assert!(offset_of!(ibv_mr, length) == 24);
    assert!(field_size!(ibv_mr, length) == 8);
    assert!(offset_of!(ibv_mr, handle) == 32);
    assert!(field_size!(ibv_mr, handle) == 4);
    assert!(offset_of!(ibv_mr, lkey) == 36);
    assert!(field_size!(ibv_mr, lkey) == 4);
    assert!(offset_of!(ibv_mr, rkey) == 40);
    assert!(field_size!(ibv_mr, rkey) == 4);
    assert!(offset_of!(ibv_cq, context) == 0);
    assert!(field_size!(ibv_cq, context) == 8);
    assert!(offset_of!(ibv_cq, channel) == 8);
    assert!(field_size!(ibv_cq, channel) == 8);
    assert!(offset_of!(ibv_cq, cq_context) == 16);
    assert!(field_size!(ibv_cq, cq_context) == 8);
    assert!(offset_of!(ibv_cq, handle) == 24);
    assert!(field_size!(ibv_cq, handle) == 4);
    assert!(offset_of!(ibv_cq, cqe) == 28);
    assert!(field_size!(ibv_cq, cqe) == 4);
    assert!(offset_of!(ibv_cq, mutex) == 32);
    assert!(field_size!(ibv_cq, mutex) == 40);
    assert!(offset_of!(ibv_cq, cond) == 72);
    assert!(field_size!(ibv_cq, cond) == 48);
    assert!(offset_of!(ibv_cq, comp_events_completed) == 120);
    assert!(field_size!(ibv_cq, comp_events_completed) == 4);
    assert!(offset_of!(ibv_cq, async_events_completed) == 124);
    assert!(field_size!(ibv_cq, async_events_completed) == 4);
    assert!(offset_of!(ibv_cq_ex, context) == 0);
    assert!(field_size!(ibv_cq_ex, context) == 8);
    assert!(offset_of!(ibv_cq_ex, channel) == 8);
    assert!(field_size!(ibv_cq_ex, channel) == 8);
    assert!(offset_of!(ibv_cq_ex, cq_context) == 16);
    assert!(field_size!(ibv_cq_ex, cq_context) == 8);
    assert!(offset_of!(ibv_cq_ex, handle) == 24);
    assert!(field_size!(ibv_cq_ex, handle) == 4);
    assert!(offset_of!(ibv_cq_ex, cqe) == 28);
    assert!(field_size!(ibv_cq_ex, cqe) == 4);
    assert!(offset_of!(ibv_cq_ex, mutex) == 32);
    assert!(field_size!(ibv_cq_ex, mutex) == 40);
    assert!(offset_of!(ibv_cq_ex, cond) == 72);
    assert!(field_size!(ibv_cq_ex, cond) == 48);
    assert!(offset_of!(ibv_cq_ex, comp_events_completed) == 120);
    assert!(field_size!(ibv_cq_ex, comp_events_completed) == 4);
    assert!(offset_of!(ibv_cq_ex, async_events_completed) == 124);
    assert!(field_size!(ibv_cq_ex, async_events_completed) == 4);
    assert!(offset_of!(ibv_cq_ex, comp_mask) == 128);
    assert!(field_size!(ibv_cq_ex, comp_mask) == 4);
    assert!(offset_of!(ibv_cq_ex, status) == 132);
    assert!(field_size!(ibv_cq_ex, status) == 4);
    assert!(offset_of!(ibv_cq_ex, wr_id) == 136);
    assert!(field_size!(ibv_cq_ex, wr_id) == 8);
    assert!(offset_of!(ibv_cq_ex, start_poll) == 144);
    assert!(field_size!(ibv_cq_ex, start_poll) == 8);
    assert!(offset_of!(ibv_cq_ex, next_poll) == 152);
    assert!(field_size!(ibv_cq_ex, next_poll) == 8);
    assert!(offset_of!(ibv_cq_ex, end_poll) == 160);
    assert!(field_size!(ibv_cq_ex, end_poll) == 8);
    assert!(offset_of!(ibv_cq_ex, read_opcode) == 168);
    assert!(field_size!(ibv_cq_ex, read_opcode) == 8);
    assert!(offset_of!(ibv_cq_ex, read_vendor_err) == 176);
    assert!(field_size!(ibv_cq_ex, read_vendor_err) == 8);
    assert!(offset_of!(ibv_cq_ex, read_byte_len) == 184);
    assert!(field_size!(ibv_cq_ex, read_byte_len) == 8);
    assert!(offset_of!(ibv_cq_ex, read_imm_data) == 192);
    assert!(field_size!(ibv_cq_ex, read_imm_data) == 8);
    assert!(offset_of!(ibv_cq_ex, read_qp_num) == 200);
    assert!(field_size!(ibv_cq_ex, read_qp_num) == 8);
    assert!(offset_of!(ibv_cq_ex, read_src_qp) == 208);
    assert!(field_size!(ibv_cq_ex, read_src_qp) == 8);
    assert!(offset_of!(ibv_cq_ex, read_wc_flags) == 216);
    assert!(field_size!(ibv_cq_ex, read_wc_flags) == 8);
    assert!(offset_of!(ibv_cq_ex, read_slid) == 224);
    assert!(field_size!(ibv_cq_ex, read_slid) == 8);
    assert!(offset_of!(ibv_cq_ex, read_sl) == 232);
    assert!(field_size!(ibv_cq_ex, read_sl) == 8);
    assert!(offset_of!(ibv_cq_ex, read_dlid_path_bits) == 240);
    assert!(field_size!(ibv_cq_ex, read_dlid_path_bits) == 8);
    assert!(offset_of!(ibv_cq_ex, read_completion_ts) == 248);
    assert!(field_size!(ibv_cq_ex, read_completion_ts) == 8);
    assert!(offset_of!(ibv_cq_ex, read_cvlan) == 256);
    assert!(field_size!(ibv_cq_ex, read_cvlan) == 8);
    assert!(offset_of!(ibv_cq_ex, read_flow_tag) == 264);
    assert!(field_size!(ibv_cq_ex, read_flow_tag) == 8);
    assert!(offset_of!(ibv_cq_ex, read_tm_info) == 272);
    assert!(field_size!(ibv_cq_ex, read_tm_info) == 8);
    assert!(offset_of!(ibv_cq_ex, read_completion_wallclock_ns) == 280);
    assert!(field_size!(ibv_cq_ex, read_completion_wallclock_ns) == 8);
    assert!(offset_of!(ibv_qp, context) == 0);
    assert!(field_size!(ibv_qp, context) == 8);
    assert!(offset_of!(ibv_qp, qp_context) == 8);
    assert!(field_size!(ibv_qp, qp_context) == 8);
    assert!(offset_of!(ibv_qp, pd) == 16);
    assert!(field_size!(ibv_qp, pd) == 8);
    assert!(offset_of!(ibv_qp, send_cq) == 24);
    assert!(field_size!(ibv_qp, send_cq) == 8);
    assert!(offset_of!(ibv_qp, recv_cq) == 32);
    assert!(field_size!(ibv_qp, recv_cq) == 8);
    assert!(offset_of!(ibv_qp, srq) == 40);
    assert!(field_size!(ibv_qp, srq) == 8);
    assert!(offset_of!(ibv_qp, handle) == 48);
    assert!(field_size!(ibv_qp, handle) == 4);
    assert!(offset_of!(ibv_qp, qp_num) == 52);
    assert!(field_size!(ibv_qp, qp_num) == 4);
    assert!(offset_of!(ibv_qp, state) == 56);
    assert!(field_size!(ibv_qp, state) == 4);
    assert!(offset_of!(ibv_qp, qp_type) == 60);
    assert!(field_size!(ibv_qp, qp_type) == 4);
    assert!(offset_of!(ibv_qp, mutex) == 64);
    assert!(field_size!(ibv_qp, mutex) == 40);
    assert!(offset_of!(ibv_qp, cond) == 104);
    assert!(field_size!(ibv_qp, cond) == 48);
    assert!(offset_of!(ibv_qp, events_completed) == 152);
    assert!(field_size!(ibv_qp, events_completed) == 4);
    assert!(offset_of!(ibv_qp_ex, qp_base) == 0);
    assert!(field_size!(ibv_qp_ex, qp_base) == 160);
    assert!(offset_of!(ibv_qp_ex, comp_mask) == 160);
    assert!(field_size!(ibv_qp_ex, comp_mask) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_id) == 168);
    assert!(field_size!(ibv_qp_ex, wr_id) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_flags) == 176);
    assert!(field_size!(ibv_qp_ex, wr_flags) == 4);
    assert!(offset_of!(ibv_qp_ex, wr_atomic_cmp_swp) == 184);
    assert!(field_size!(ibv_qp_ex, wr_atomic_cmp_swp) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_atomic_fetch_add) == 192);
    assert!(field_size!(ibv_qp_ex, wr_atomic_fetch_add) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_bind_mw) == 200);
    assert!(field_size!(ibv_qp_ex, wr_bind_mw) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_local_inv) == 208);
    assert!(field_size!(ibv_qp_ex, wr_local_inv) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_rdma_read) == 216);
    assert!(field_size!(ibv_qp_ex, wr_rdma_read) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_rdma_write) == 224);
    assert!(field_size!(ibv_qp_ex, wr_rdma_write) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_rdma_write_imm) == 232);
    assert!(field_size!(ibv_qp_ex, wr_rdma_write_imm) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_send) == 240);
    assert!(field_size!(ibv_qp_ex, wr_send) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_send_imm) == 248);
    assert!(field_size!(ibv_qp_ex, wr_send_imm) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_send_inv) == 256);
    assert!(field_size!(ibv_qp_ex, wr_send_inv) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_send_tso) == 264);
    assert!(field_size!(ibv_qp_ex, wr_send_tso) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_set_ud_addr) == 272);
    assert!(field_size!(ibv_qp_ex, wr_set_ud_addr) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_set_xrc_srqn) == 280);
    assert!(field_size!(ibv_qp_ex, wr_set_xrc_srqn) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_set_inline_data) == 288);
    assert!(field_size!(ibv_qp_ex, wr_set_inline_data) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_set_inline_data_list) == 296);
    assert!(field_size!(ibv_qp_ex, wr_set_inline_data_list) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_set_sge) == 304);
    assert!(field_size!(ibv_qp_ex, wr_set_sge) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_set_sge_list) == 312);
    assert!(field_size!(ibv_qp_ex, wr_set_sge_list) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_start) == 320);
    assert!(field_size!(ibv_qp_ex, wr_start) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_complete) == 328);
    assert!(field_size!(ibv_qp_ex, wr_complete) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_abort) == 336);
    assert!(field_size!(ibv_qp_ex, wr_abort) == 8);
    assert!(offset_of!(ibv_qp_ex, wr_atomic_write) == 344);
    assert!(field_size!(ibv_qp_ex, wr_atomic_write) == 8);
    assert!(offset_of!(ibv_srq, context) == 0);
    assert!(field_size!(ibv_srq, context) == 8);
    assert!(offset_of!(ibv_srq, srq_context) == 8);
    assert!(field_size!(ibv_srq, srq_context) == 8);
    assert!(offset_of!(ibv_srq, pd) == 16);
    assert!(field_size!(ibv_srq, pd) == 8);
    assert!(offset_of!(ibv_srq, handle) == 24);
    assert!(field_size!(ibv_srq, handle) == 4);
    assert!(offset_of!(ibv_srq, mutex) == 32);
    assert!(field_size!(ibv_srq, mutex) == 40);
    assert!(offset_of!(ibv_srq, cond) == 72);
    assert!(field_size!(ibv_srq, cond) == 48);
    assert!(offset_of!(ibv_srq, events_completed) == 120);
    assert!(field_size!(ibv_srq, events_completed) == 4);
    assert!(offset_of!(ibv_ah, context) == 0);
    assert!(field_size!(ibv_ah, context) == 8);
    assert!(offset_of!(ibv_ah, pd) == 8);
    assert!(field_size!(ibv_ah, pd) == 8);
    assert!(offset_of!(ibv_ah, handle) == 16);
    assert!(field_size!(ibv_ah, handle) == 4);
    assert!(offset_of!(ibv_comp_channel, context) == 0);
    assert!(field_size!(ibv_comp_channel, context) == 8);
    assert!(offset_of!(ibv_comp_channel, fd) == 8);
    assert!(field_size!(ibv_comp_channel, fd) == 4);
    assert!(offset_of!(ibv_comp_channel, refcnt) == 12);
    assert!(field_size!(ibv_comp_channel, refcnt) == 4);
    assert!(offset_of!(ibv_qp_init_attr, qp_context) == 0);
    assert!(field_size!(ibv_qp_init_attr, qp_context) == 8);
    assert!(offset_of!(ibv_qp_init_attr, send_cq) == 8);
    assert!(field_size!(ibv_qp_init_attr, send_cq) == 8);
    assert!(offset_of!(ibv_qp_init_attr, recv_cq) == 16);
    assert!(field_size!(ibv_qp_init_attr, recv_cq) == 8);
    assert!(offset_of!(ibv_qp_init_attr, srq) == 24);
    assert!(field_size!(ibv_qp_init_attr, srq) == 8);
    assert!(offset_of!(ibv_qp_init_attr, cap) == 32);
    assert!(field_size!(ibv_qp_init_attr, cap) == 20);
    assert!(offset_of!(ibv_qp_init_attr, qp_type) == 52);
    assert!(field_size!(ibv_qp_init_attr, qp_type) == 4);
    assert!(offset_of!(ibv_qp_init_attr, sq_sig_all) == 56);
    assert!(field_size!(ibv_qp_init_attr, sq_sig_all) == 4);
    assert!(offset_of!(ibv_qp_init_attr_ex, qp_context) == 0);
    assert!(field_size!(ibv_qp_init_attr_ex, qp_context) == 8);
    assert!(offset_of!(ibv_qp_init_attr_ex, send_cq) == 8);
    assert!(field_size!(ibv_qp_init_attr_ex, send_cq) == 8);
    assert!(offset_of!(ibv_qp_init_attr_ex, recv_cq) == 16);
    assert!(field_size!(ibv_qp_init_attr_ex, recv_cq) == 8);
    assert!(offset_of!(ibv_qp_init_attr_ex, srq) == 24);
    assert!(field_size!(ibv_qp_init_attr_ex, srq) == 8);
    assert!(offset_of!(ibv_qp_init_attr_ex, cap) == 32);
    assert!(field_size!(ibv_qp_init_attr_ex, cap) == 20);
    assert!(offset_of!(ibv_qp_init_attr_ex, qp_type) == 52);
    assert!(field_size!(ibv_qp_init_attr_ex, qp_type) == 4);
    assert!(offset_of!(ibv_qp_init_attr_ex, sq_sig_all) == 56);
    assert!(field_size!(ibv_qp_init_attr_ex, sq_sig_all) == 4);
    assert!(offset_of!(ibv_qp_init_attr_ex, comp_mask) == 60);
    assert!(field_size!(ibv_qp_init_attr_ex, comp_mask) == 4);
    assert!(offset_of!(ibv_qp_init_attr_ex, pd) == 64);
    assert!(field_size!(ibv_qp_init_attr_ex, pd) == 8);
    assert!(offset_of!(ibv_qp_init_attr_ex, xrcd) == 72);
    assert!(field_size!(ibv_qp_init_attr_ex, xrcd) == 8);
    assert!(offset_of!(ibv_qp_init_attr_ex, create_flags) == 80);
    assert!(field_size!(ibv_qp_init_attr_ex, create_flags) == 4);
    assert!(offset_of!(ibv_qp_init_attr_ex, max_tso_header) == 84);
    assert!(field_size!(ibv_qp_init_attr_ex, max_tso_header) == 2);
    assert!(offset_of!(ibv_qp_init_attr_ex, rwq_ind_tbl) == 88);
    assert!(field_size!(ibv_qp_init_attr_ex, rwq_ind_tbl) == 8);
    assert!(offset_of!(ibv_qp_init_attr_ex, rx_hash_conf) == 96);
    assert!(field_size!(ibv_qp_init_attr_ex, rx_hash_conf) == 24);
    assert!(offset_of!(ibv_qp_init_attr_ex, source_qpn) == 120);
    assert!(field_size!(ibv_qp_init_attr_ex, source_qpn) == 4);
    assert!(offset_of!(ibv_qp_init_attr_ex, send_ops_flags) == 128);
    assert!(field_size!(ibv_qp_init_attr_ex, send_ops_flags) == 8);
    assert!(offset_of!(ibv_qp_attr, qp_state) == 0);
    assert!(field_size!(ibv_qp_attr, qp_state) == 4);
    assert!(offset_of!(ibv_qp_attr, cur_qp_state) == 4);
    assert!(field_size!(ibv_qp_attr, cur_qp_state) == 4);
    assert!(offset_of!(ibv_qp_attr, path_mtu) == 8);
    assert!(field_size!(ibv_qp_attr, path_mtu) == 4);
    assert!(offset_of!(ibv_qp_attr, path_mig_state) == 12);
    assert!(field_size!(ibv_qp_attr, path_mig_state) == 4);
    assert!(offset_of!(ibv_qp_attr, qkey) == 16);
    assert!(field_size!(ibv_qp_attr, qkey) == 4);
    assert!(offset_of!(ibv_qp_attr, rq_psn) == 20);
    assert!(field_size!(ibv_qp_attr, rq_psn) == 4);
    assert!(offset_of!(ibv_qp_attr, sq_psn) == 24);
    assert!(field_size!(ibv_qp_attr, sq_psn) == 4);
    assert!(offset_of!(ibv_qp_attr, dest_qp_num) == 28);
    assert!(field_size!(ibv_qp_attr, dest_qp_num) == 4);
    assert!(offset_of!(ibv_qp_attr, qp_access_flags) == 32);
    assert!(field_size!(ibv_qp_attr, qp_access_flags) == 4);
    assert!(offset_of!(ibv_qp_attr, cap) == 36);
    assert!(field_size!(ibv_qp_attr, cap) == 20);
    assert!(offset_of!(ibv_qp_attr, ah_attr) == 56);
    assert!(field_size!(ibv_qp_attr, ah_attr) == 32);
    assert!(offset_of!(ibv_qp_attr, alt_ah_attr) == 88);
    assert!(field_size!(ibv_qp_attr, alt_ah_attr) == 32);
    assert!(offset_of!(ibv_qp_attr, pkey_index) == 120);
    assert!(field_size!(ibv_qp_attr, pkey_index) == 2);
    assert!(offset_of!(ibv_qp_attr, alt_pkey_index) == 122);
    assert!(field_size!(ibv_qp_attr, alt_pkey_index) == 2);
    assert!(offset_of!(ibv_qp_attr, en_sqd_async_notify) == 124);
    assert!(field_size!(ibv_qp_attr, en_sqd_async_notify) == 1);
    assert!(offset_of!(ibv_qp_attr, sq_draining) == 125);
    assert!(field_size!(ibv_qp_attr, sq_draining) == 1);
    assert!(offset_of!(ibv_qp_attr, max_rd_atomic) == 126);
    assert!(field_size!(ibv_qp_attr, max_rd_atomic) == 1);
    assert!(offset_of!(ibv_qp_attr, max_dest_rd_atomic) == 127);
    assert!(field_size!(ibv_qp_attr, max_dest_rd_atomic) == 1);
    assert!(offset_of!(ibv_qp_attr, min_rnr_timer) == 128);
    assert!(field_size!(ibv_qp_attr, min_rnr_timer) == 1);
    assert!(offset_of!(ibv_qp_attr, port_num) == 129);
    assert!(field_size!(ibv_qp_attr, port_num) == 1);
    assert!(offset_of!(ibv_qp_attr, timeout) == 130);
    assert!(field_size!(ibv_qp_attr, timeout) == 1);
    assert!(offset_of!(ibv_qp_attr, retry_cnt) == 131);
    assert!(field_size!(ibv_qp_attr, retry_cnt) == 1);
    assert!(offset_of!(ibv_qp_attr, rnr_retry) == 132);
    assert!(field_size!(ibv_qp_attr, rnr_retry) == 1);
    assert!(offset_of!(ibv_qp_attr, alt_port_num) == 133);
    assert!(field_size!(ibv_qp_attr, alt_port_num) == 1);
    assert!(offset_of!(ibv_qp_attr, alt_timeout) == 134);
    assert!(field_size!(ibv_qp_attr, alt_timeout) == 1);
    assert!(offset_of!(ibv_qp_attr, rate_limit) == 136);
    assert!(field_size!(ibv_qp_attr, rate_limit) == 4);
    assert!(offset_of!(ibv_qp_cap, max_send_wr) == 0);
    assert!(field_size!(ibv_qp_cap, max_send_wr) == 4);
    assert!(offset_of!(ibv_qp_cap, max_recv_wr) == 4);
    assert!(field_size!(ibv_qp_cap, max_recv_wr) == 4);
    assert!(offset_of!(ibv_qp_cap, max_send_sge) == 8);
    assert!(field_size!(ibv_qp_cap, max_send_sge) == 4);
    assert!(offset_of!(ibv_qp_cap, max_recv_sge) == 12);
    assert!(field_size!(ibv_qp_cap, max_recv_sge) == 4);
    assert!(offset_of!(ibv_qp_cap, max_inline_data) == 16);
    assert!(field_size!(ibv_qp_cap, max_inline_data) == 4);
    assert!(offset_of!(ibv_ah_attr, grh) == 0);
    assert!(field_size!(ibv_ah_attr, grh) == 24);
    assert!(offset_of!(ibv_ah_attr, dlid) == 24);
    assert!(field_size!(ibv_ah_attr, dlid) == 2);
    assert!(offset_of!(ibv_ah_attr, sl) == 26);
    assert!(field_size!(ibv_ah_attr, sl) == 1);
    assert!(offset_of!(ibv_ah_attr, src_path_bits) == 27);
    assert!(field_size!(ibv_ah_attr, src_path_bits) == 1);
    assert!(offset_of!(ibv_ah_attr, static_rate) == 28);
    assert!(field_size!(ibv_ah_attr, static_rate) == 1);
    assert!(offset_of!(ibv_ah_attr, is_global) == 29);
    assert!(field_size!(ibv_ah_attr, is_global) == 1);
    assert!(offset_of!(ibv_ah_attr, port_num) == 30);
    assert!(field_size!(ibv_ah_attr, port_num) == 1);
    assert!(offset_of!(ibv_global_route, dgid) == 0);
    assert!(field_size!(ibv_global_route, dgid) == 16);
    assert!(offset_of!(ibv_global_route, flow_label) == 16);
    assert!(field_size!(ibv_global_route, flow_label) == 4);
    assert!(offset_of!(ibv_global_route, sgid_index) == 20);
    assert!(field_size!(ibv_global_route, sgid_index) == 1);
    assert!(offset_of!(ibv_global_route, hop_limit) == 21);
    assert!(field_size!(ibv_global_route, hop_limit) == 1);
    assert!(offset_of!(ibv_global_route, traffic_class) == 22);
    assert!(field_size!(ibv_global_route, traffic_class) == 1);
    assert!(offset_of!(ibv_send_wr, wr_id) == 0);
    assert!(field_size!(ibv_send_wr, wr_id) == 8);
    assert!(offset_of!(ibv_send_wr, next) == 8);
    assert!(field_size!(ibv_send_wr, next) == 8);
    assert!(offset_of!(ibv_send_wr, sg_list) == 16);
    assert!(field_size!(ibv_send_wr, sg_list) == 8);
    assert!(offset_of!(ibv_send_wr, num_sge) == 24);
    assert!(field_size!(ibv_send_wr, num_sge) == 4);
    assert!(offset_of!(ibv_send_wr, opcode) == 28);
    assert!(field_size!(ibv_send_wr, opcode) == 4);
    assert!(offset_of!(ibv_send_wr, send_flags) == 32);
    assert!(field_size!(ibv_send_wr, send_flags) == 4);
    assert!(offset_of!(ibv_send_wr, wr) == 40);
    assert!(field_size!(ibv_send_wr, wr) == 32);
    assert!(offset_of!(ibv_send_wr, qp_type) == 72);
    assert!(field_size!(ibv_send_wr, qp_type) == 4);
    assert!(offset_of!(ibv_recv_wr, wr_id) == 0);
    assert!(field_size!(ibv_recv_wr, wr_id) == 8);
    assert!(offset_of!(ibv_recv_wr, next) == 8);
    assert!(field_size!(ibv_recv_wr, next) == 8);
    assert!(offset_of!(ibv_recv_wr, sg_list) == 16);
    assert!(field_size!(ibv_recv_wr, sg_list) == 8);
    assert!(offset_of!(ibv_recv_wr, num_sge) == 24);
    assert!(field_size!(ibv_recv_wr, num_sge) == 4);
    assert!(offset_of!(ibv_sge, addr) == 0);
    assert!(field_size!(ibv_sge, addr) == 8);
    assert!(offset_of!(ibv_sge, length) == 8);
    assert!(field_size!(ibv_sge, length) == 4);
    assert!(offset_of!(ibv_sge, lkey) == 12);
    assert!(field_size!(ibv_sge, lkey) == 4);
    assert!(offset_of!(ibv_wc, wr_id) == 0);
    assert!(field_size!(ibv_wc, wr_id) == 8);
    assert!(offset_of!(ibv_wc, status) == 8);
    assert!(field_size!(ibv_wc, status) == 4);
    assert!(offset_of!(ibv_wc, opcode) == 12);
    assert!(field_size!(ibv_wc, opcode) == 4);
    assert!(offset_of!(ibv_wc, vendor_err) == 16);
    assert!(field_size!(ibv_wc, vendor_err) == 4);
    assert!(offset_of!(ibv_wc, byte_len) == 20);
    assert!(field_size!(ibv_wc, byte_len) == 4);
    assert!(offset_of!(ibv_wc, qp_num) == 28);
    assert!(field_size!(ibv_wc, qp_num) == 4);
    assert!(offset_of!(ibv_wc, src_qp) == 32);
    assert!(field_size!(ibv_wc, src_qp) == 4);
    assert!(offset_of!(ibv_wc, wc_flags) == 36);
    assert!(field_size!(ibv_wc, wc_flags) == 4);
    assert!(offset_of!(ibv_wc, pkey_index) == 40);
    assert!(field_size!(ibv_wc, pkey_index) == 2);
    assert!(offset_of!(ibv_wc, slid) == 42);
    assert!(field_size!(ibv_wc, slid) == 2);
    assert!(offset_of!(ibv_wc, sl) == 44);
    assert!(field_size!(ibv_wc, sl) == 1);
    assert!(offset_of!(ibv_wc, dlid_path_bits) == 45);
    assert!(field_size!(ibv_wc, dlid_path_bits) == 1);
    assert!(offset_of!(ibv_srq_init_attr, srq_context) == 0);
    assert!(field_size!(ibv_srq_init_attr, srq_context) == 8);
    assert!(offset_of!(ibv_srq_init_attr, attr) == 8);
    assert!(field_size!(ibv_srq_init_attr, attr) == 12);
    assert!(offset_of!(ibv_srq_init_attr_ex, srq_context) == 0);
    assert!(field_size!(ibv_srq_init_attr_ex, srq_context) == 8);
    assert!(offset_of!(ibv_srq_init_attr_ex, attr) == 8);
    assert!(field_size!(ibv_srq_init_attr_ex, attr) == 12);
    assert!(offset_of!(ibv_srq_init_attr_ex, comp_mask) == 20);
    assert!(field_size!(ibv_srq_init_attr_ex, comp_mask) == 4);
    assert!(offset_of!(ibv_srq_init_attr_ex, srq_type) == 24);
    assert!(field_size!(ibv_srq_init_attr_ex, srq_type) == 4);
    assert!(offset_of!(ibv_srq_init_attr_ex, pd) == 32);
    assert!(field_size!(ibv_srq_init_attr_ex, pd) == 8);
    assert!(offset_of!(ibv_srq_init_attr_ex, xrcd) == 40);
    assert!(field_size!(ibv_srq_init_attr_ex, xrcd) == 8);
    assert!(offset_of!(ibv_srq_init_attr_ex, cq) == 48);
    assert!(field_size!(ibv_srq_init_attr_ex, cq) == 8);
    assert!(offset_of!(ibv_srq_init_attr_ex, tm_cap) == 56);
    assert!(field_size!(ibv_srq_init_attr_ex, tm_cap) == 8);
    assert!(offset_of!(ibv_srq_attr, max_wr) == 0);
    assert!(field_size!(ibv_srq_attr, max_wr) == 4);
    assert!(offset_of!(ibv_srq_attr, max_sge) == 4);
    assert!(field_size!(ibv_srq_attr, max_sge) == 4);
    assert!(offset_of!(ibv_srq_attr, srq_limit) == 8);
    assert!(field_size!(ibv_srq_attr, srq_limit) == 4);
    assert!(offset_of!(ibv_cq_init_attr_ex, cqe) == 0);
    assert!(field_size!(ibv_cq_init_attr_ex, cqe) == 4);
    assert!(offset_of!(ibv_cq_init_attr_ex, cq_context) == 8);
    assert!(field_size!(ibv_cq_init_attr_ex, cq_context) == 8);
    assert!(offset_of!(ibv_cq_init_attr_ex, channel) == 16);
    assert!(field_size!(ibv_cq_init_attr_ex, channel) == 8);
    assert!(offset_of!(ibv_cq_init_attr_ex, comp_vector) == 24);
    assert!(field_size!(ibv_cq_init_attr_ex, comp_vector) == 4);
    assert!(offset_of!(ibv_cq_init_attr_ex, wc_flags) == 32);
    assert!(field_size!(ibv_cq_init_attr_ex, wc_flags) == 8);
    assert!(offset_of!(ibv_cq_init_attr_ex, comp_mask) == 40);
    assert!(field_size!(ibv_cq_init_attr_ex, comp_mask) == 4);
    assert!(offset_of!(ibv_cq_init_attr_ex, flags) == 44);
    assert!(field_size!(ibv_cq_init_attr_ex, flags) == 4);
    assert!(offset_of!(ibv_cq_init_attr_ex, parent_domain) == 48);
    assert!(field_size!(ibv_cq_init_attr_ex, parent_domain) == 8);
    assert!(offset_of!(ibv_xrcd, context) == 0);
    assert!(field_size!(ibv_xrcd, context) == 8);
    assert!(offset_of!(ibv_async_event, element) == 0);
    assert!(field_size!(ibv_async_event, element) == 8);
    assert!(offset_of!(ibv_async_event, event_type) == 8);
    assert!(field_size!(ibv_async_event, event_type) == 4);
    assert!(offset_of!(ibv_poll_cq_attr, comp_mask) == 0);
    assert!(field_size!(ibv_poll_cq_attr, comp_mask) == 4);
    assert!(offset_of!(ibv_grh, version_tclass_flow) == 0);
    assert!(field_size!(ibv_grh, version_tclass_flow) == 4);
    assert!(offset_of!(ibv_grh, paylen) == 4);
    assert!(field_size!(ibv_grh, paylen) == 2);
    assert!(offset_of!(ibv_grh, next_hdr) == 6);
    assert!(field_size!(ibv_grh, next_hdr) == 1);
    assert!(offset_of!(ibv_grh, hop_limit) == 7);
    assert!(field_size!(ibv_grh, hop_limit) == 1);
    assert!(offset_of!(ibv_grh, sgid) == 8);
    assert!(field_size!(ibv_grh, sgid) == 16);
    assert!(offset_of!(ibv_grh, dgid) == 24);
    assert!(field_size!(ibv_grh, dgid) == 16);
    assert!(offset_of!(ibv_mw, context) == 0);
    assert!(field_size!(ibv_mw, context) == 8);
    assert!(offset_of!(ibv_mw, pd) == 8);
    assert!(field_size!(ibv_mw, pd) == 8);
    assert!(offset_of!(ibv_mw, rkey) == 16);
    assert!(field_size!(ibv_mw, rkey) == 4);
    assert!(offset_of!(ibv_mw, handle) == 20);
    assert!(field_size!(ibv_mw, handle) == 4);
    assert!(offset_of!(ibv_mw, type_) == 24);
    assert!(field_size!(ibv_mw, type_) == 4);
    assert!(offset_of!(ibv_qp_open_attr, comp_mask) == 0);
    assert!(field_size!(ibv_qp_open_attr, comp_mask) == 4);
    assert!(offset_of!(ibv_qp_open_attr, qp_num) == 4);
    assert!(field_size!(ibv_qp_open_attr, qp_num) == 4);
    assert!(offset_of!(ibv_qp_open_attr, xrcd) == 8);
    assert!(field_size!(ibv_qp_open_attr, xrcd) == 8);
    assert!(offset_of!(ibv_qp_open_attr, qp_context) == 16);
    assert!(field_size!(ibv_qp_open_attr, qp_context) == 8);
    assert!(offset_of!(ibv_qp_open_attr, qp_type) == 24);
    assert!(field_size!(ibv_qp_open_attr, qp_type) == 4);
    assert!(offset_of!(ibv_xrcd_init_attr, comp_mask) == 0);
    assert!(field_size!(ibv_xrcd_init_attr, comp_mask) == 4);
    assert!(offset_of!(ibv_xrcd_init_attr, fd) == 4);
    assert!(field_size!(ibv_xrcd_init_attr, fd) == 4);
    assert!(offset_of!(ibv_xrcd_init_attr, oflags) == 8);
    assert!(field_size!(ibv_xrcd_init_attr, oflags) == 4);
    assert!(offset_of!(ibv_wc, imm_data) == 24);
    assert!(field_size!(ibv_wc, imm_data) == 4);
    assert!(offset_of!(ibv_send_wr, imm_data) == 36);
    assert!(field_size!(ibv_send_wr, imm_data) == 4);
    assert!(offset_of!(ibv_send_wr, wr.rdma.remote_addr) == 40);
    assert!(field_size!(ibv_send_wr, wr.rdma.remote_addr) == 8);
    assert!(offset_of!(ibv_send_wr, wr.rdma.rkey) == 48);
    assert!(field_size!(ibv_send_wr, wr.rdma.rkey) == 4);
    assert!(offset_of!(ibv_send_wr, wr.atomic.remote_addr) == 40);
    assert!(field_size!(ibv_send_wr, wr.atomic.remote_addr) == 8);
    assert!(offset_of!(ibv_send_wr, wr.atomic.compare_add) == 48);
    assert!(field_size!(ibv_send_wr, wr.atomic.compare_add) == 8);
    assert!(offset_of!(ibv_send_wr, wr.atomic.swap) == 56);
    assert!(field_size!(ibv_send_wr, wr.atomic.swap) == 8);
    assert!(offset_of!(ibv_send_wr, wr.atomic.rkey) == 64);
    assert!(field_size!(ibv_send_wr, wr.atomic.rkey) == 4);
    assert!(offset_of!(ibv_send_wr, wr.ud.ah) == 40);
    assert!(field_size!(ibv_send_wr, wr.ud.ah) == 8);
    assert!(offset_of!(ibv_send_wr, wr.ud.remote_qpn) == 48);
    assert!(field_size!(ibv_send_wr, wr.ud.remote_qpn) == 4);
    assert!(offset_of!(ibv_send_wr, wr.ud.remote_qkey) == 52);
    assert!(field_size!(ibv_send_wr, wr.ud.remote_qkey) == 4);
    assert!(offset_of!(ibv_send_wr, qp_type.xrc.remote_srqn) == 72);
    assert!(field_size!(ibv_send_wr, qp_type.xrc.remote_srqn) == 4);
    assert!(offset_of!(ibv_send_wr, ext.bind_mw) == 80);
    assert!(field_size!(ibv_send_wr, ext.bind_mw) == 48);
    assert!(offset_of!(ibv_send_wr, ext.tso) == 80);
    assert!(field_size!(ibv_send_wr, ext.tso) == 16);
};
