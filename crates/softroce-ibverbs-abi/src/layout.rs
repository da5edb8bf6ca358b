//! Sizes, alignments and offsets of the x86_64 rdma-core 44 headers (from pahole + offsetof),
//! written once: `layout!` turns the list into compile-time assertions and into the tables
//! the C comparison test (`tests/layout_matches_verbs_h.rs`) re-derives from the installed
//! header.

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

/// The C name of a field: the Rust path unless given (`"priv" = priv_`, fields of C's
/// anonymous unions).
macro_rules! c_field_name {
    ($c:literal; $($path:tt)+) => {
        $c
    };
    (; $first:ident $(. $rest:ident)*) => {
        concat!(stringify!($first) $(, ".", stringify!($rest))*)
    };
}

/// `struct size align { field offset size, … }`, each field as `rust.path` or
/// `"c.path" = rust.path`.
macro_rules! layout {
    ($(
        $s:ident $size:literal $align:literal {
            $( $($c:literal =)? $first:ident $(. $rest:ident)* $off:literal $fsize:literal ),* $(,)?
        }
    )*) => {
        /// Every mirrored struct, as `(C name, size, alignment)`: what the C comparison test
        /// checks.
        pub static STRUCT_SIZES: &[(&str, usize, usize)] = &[
            $( (stringify!($s), size_of::<$s>(), align_of::<$s>()), )*
        ];

        /// Every checked field, as `(C struct name, C field path, offset, size)`.
        pub static FIELD_OFFSETS: &[(&str, &str, usize, usize)] = &[
            $($(
                (
                    stringify!($s),
                    c_field_name!($($c)?; $first $(. $rest)*),
                    offset_of!($s, $first $(. $rest)*),
                    field_size!($s, $first $(. $rest)*),
                ),
            )*)*
        ];

        const _: () = {
            $(
                assert!(size_of::<$s>() == $size, concat!("size of ", stringify!($s)));
                assert!(align_of::<$s>() == $align, concat!("alignment of ", stringify!($s)));
                $(
                    assert!(
                        offset_of!($s, $first $(. $rest)*) == $off,
                        concat!("offset of ", stringify!($s), ".", stringify!($first $(. $rest)*))
                    );
                    assert!(
                        field_size!($s, $first $(. $rest)*) == $fsize,
                        concat!("size of ", stringify!($s), ".", stringify!($first $(. $rest)*))
                    );
                )*
            )*
        };
    };
}

layout! {
    // struct size align { field offset size }
    ibv_device 664 8 {
        _ops              0   16,
        node_type        16    4,
        transport_type   20    4,
        name             24   64,
        dev_name         88   64,
        dev_path        152  256,
        ibdev_path      408  256,
    }
    ibv_context 328 8 {
        device              0    8,
        ops                 8  256,
        cmd_fd            264    4,
        async_fd          268    4,
        num_comp_vectors  272    4,
        mutex             280   40,
        abi_compat        320    8,
    }
    ibv_context_ops 256 8 {
        _compat_query_device    0    8,
        _compat_query_port      8    8,
        _compat_alloc_pd       16    8,
        _compat_dealloc_pd     24    8,
        _compat_reg_mr         32    8,
        _compat_rereg_mr       40    8,
        _compat_dereg_mr       48    8,
        alloc_mw               56    8,
        bind_mw                64    8,
        dealloc_mw             72    8,
        _compat_create_cq      80    8,
        poll_cq                88    8,
        req_notify_cq          96    8,
        _compat_cq_event      104    8,
        _compat_resize_cq     112    8,
        _compat_destroy_cq    120    8,
        _compat_create_srq    128    8,
        _compat_modify_srq    136    8,
        _compat_query_srq     144    8,
        _compat_destroy_srq   152    8,
        post_srq_recv         160    8,
        _compat_create_qp     168    8,
        _compat_query_qp      176    8,
        _compat_modify_qp     184    8,
        _compat_destroy_qp    192    8,
        post_send             200    8,
        post_recv             208    8,
        _compat_create_ah     216    8,
        _compat_destroy_ah    224    8,
        _compat_attach_mcast  232    8,
        _compat_detach_mcast  240    8,
        _compat_async_event   248    8,
    }
    verbs_context 648 8 {
        query_port                    0    8,
        advise_mr                     8    8,
        alloc_null_mr                16    8,
        read_counters                24    8,
        attach_counters_point_flow   32    8,
        create_counters              40    8,
        destroy_counters             48    8,
        reg_dm_mr                    56    8,
        alloc_dm                     64    8,
        free_dm                      72    8,
        modify_flow_action_esp       80    8,
        destroy_flow_action          88    8,
        create_flow_action_esp       96    8,
        modify_qp_rate_limit        104    8,
        alloc_parent_domain         112    8,
        dealloc_td                  120    8,
        alloc_td                    128    8,
        modify_cq                   136    8,
        post_srq_ops                144    8,
        destroy_rwq_ind_table       152    8,
        create_rwq_ind_table        160    8,
        destroy_wq                  168    8,
        modify_wq                   176    8,
        create_wq                   184    8,
        query_rt_values             192    8,
        create_cq_ex                200    8,
        "priv" = priv_              208    8,
        query_device_ex             216    8,
        ibv_destroy_flow            224    8,
        ABI_placeholder2            232    8,
        ibv_create_flow             240    8,
        ABI_placeholder1            248    8,
        open_qp                     256    8,
        create_qp_ex                264    8,
        get_srq_num                 272    8,
        create_srq_ex               280    8,
        open_xrcd                   288    8,
        close_xrcd                  296    8,
        _ABI_placeholder3           304    8,
        sz                          312    8,
        context                     320  328,
    }
    ibv_device_attr 232 8 {
        fw_ver                       0   64,
        node_guid                   64    8,
        sys_image_guid              72    8,
        max_mr_size                 80    8,
        page_size_cap               88    8,
        vendor_id                   96    4,
        vendor_part_id             100    4,
        hw_ver                     104    4,
        max_qp                     108    4,
        max_qp_wr                  112    4,
        device_cap_flags           116    4,
        max_sge                    120    4,
        max_sge_rd                 124    4,
        max_cq                     128    4,
        max_cqe                    132    4,
        max_mr                     136    4,
        max_pd                     140    4,
        max_qp_rd_atom             144    4,
        max_ee_rd_atom             148    4,
        max_res_rd_atom            152    4,
        max_qp_init_rd_atom        156    4,
        max_ee_init_rd_atom        160    4,
        atomic_cap                 164    4,
        max_ee                     168    4,
        max_rdd                    172    4,
        max_mw                     176    4,
        max_raw_ipv6_qp            180    4,
        max_raw_ethy_qp            184    4,
        max_mcast_grp              188    4,
        max_mcast_qp_attach        192    4,
        max_total_mcast_qp_attach  196    4,
        max_ah                     200    4,
        max_fmr                    204    4,
        max_map_per_fmr            208    4,
        max_srq                    212    4,
        max_srq_wr                 216    4,
        max_srq_sge                220    4,
        max_pkeys                  224    2,
        local_ca_ack_delay         226    1,
        phys_port_cnt              227    1,
    }
    ibv_device_attr_ex 400 8 {
        orig_attr                    0  232,
        comp_mask                  232    4,
        odp_caps                   240   24,
        completion_timestamp_mask  264    8,
        hca_core_clock             272    8,
        device_cap_flags_ex        280    8,
        tso_caps                   288    8,
        rss_caps                   296   32,
        max_wq_type_rq             328    4,
        packet_pacing_caps         332   12,
        raw_packet_caps            344    4,
        tm_caps                    348   20,
        cq_mod_caps                368    4,
        max_dm_size                376    8,
        pci_atomic_caps            384    6,
        xrc_odp_caps               392    4,
        phys_port_cnt_ex           396    4,
    }
    ibv_port_attr 52 4 {
        state              0    4,
        max_mtu            4    4,
        active_mtu         8    4,
        gid_tbl_len       12    4,
        port_cap_flags    16    4,
        max_msg_sz        20    4,
        bad_pkey_cntr     24    4,
        qkey_viol_cntr    28    4,
        pkey_tbl_len      32    2,
        lid               34    2,
        sm_lid            36    2,
        lmc               38    1,
        max_vl_num        39    1,
        sm_sl             40    1,
        subnet_timeout    41    1,
        init_type_reply   42    1,
        active_width      43    1,
        active_speed      44    1,
        phys_state        45    1,
        link_layer        46    1,
        flags             47    1,
        port_cap_flags2   48    2,
    }
    ibv_gid_entry 32 8 {
        gid             0   16,
        gid_index      16    4,
        port_num       20    4,
        gid_type       24    4,
        ndev_ifindex   28    4,
    }
    ibv_pd 16 8 {
        context    0    8,
        handle     8    4,
    }
    ibv_mr 48 8 {
        context    0    8,
        pd         8    8,
        addr      16    8,
        length    24    8,
        handle    32    4,
        lkey      36    4,
        rkey      40    4,
    }
    ibv_cq 128 8 {
        context                   0    8,
        channel                   8    8,
        cq_context               16    8,
        handle                   24    4,
        cqe                      28    4,
        mutex                    32   40,
        cond                     72   48,
        comp_events_completed   120    4,
        async_events_completed  124    4,
    }
    ibv_cq_ex 288 8 {
        context                         0    8,
        channel                         8    8,
        cq_context                     16    8,
        handle                         24    4,
        cqe                            28    4,
        mutex                          32   40,
        cond                           72   48,
        comp_events_completed         120    4,
        async_events_completed        124    4,
        comp_mask                     128    4,
        status                        132    4,
        wr_id                         136    8,
        start_poll                    144    8,
        next_poll                     152    8,
        end_poll                      160    8,
        read_opcode                   168    8,
        read_vendor_err               176    8,
        read_byte_len                 184    8,
        read_imm_data                 192    8,
        read_qp_num                   200    8,
        read_src_qp                   208    8,
        read_wc_flags                 216    8,
        read_slid                     224    8,
        read_sl                       232    8,
        read_dlid_path_bits           240    8,
        read_completion_ts            248    8,
        read_cvlan                    256    8,
        read_flow_tag                 264    8,
        read_tm_info                  272    8,
        read_completion_wallclock_ns  280    8,
    }
    ibv_qp 160 8 {
        context             0    8,
        qp_context          8    8,
        pd                 16    8,
        send_cq            24    8,
        recv_cq            32    8,
        srq                40    8,
        handle             48    4,
        qp_num             52    4,
        state              56    4,
        qp_type            60    4,
        mutex              64   40,
        cond              104   48,
        events_completed  152    4,
    }
    ibv_qp_ex 352 8 {
        qp_base                    0  160,
        comp_mask                160    8,
        wr_id                    168    8,
        wr_flags                 176    4,
        wr_atomic_cmp_swp        184    8,
        wr_atomic_fetch_add      192    8,
        wr_bind_mw               200    8,
        wr_local_inv             208    8,
        wr_rdma_read             216    8,
        wr_rdma_write            224    8,
        wr_rdma_write_imm        232    8,
        wr_send                  240    8,
        wr_send_imm              248    8,
        wr_send_inv              256    8,
        wr_send_tso              264    8,
        wr_set_ud_addr           272    8,
        wr_set_xrc_srqn          280    8,
        wr_set_inline_data       288    8,
        wr_set_inline_data_list  296    8,
        wr_set_sge               304    8,
        wr_set_sge_list          312    8,
        wr_start                 320    8,
        wr_complete              328    8,
        wr_abort                 336    8,
        wr_atomic_write          344    8,
    }
    ibv_srq 128 8 {
        context             0    8,
        srq_context         8    8,
        pd                 16    8,
        handle             24    4,
        mutex              32   40,
        cond               72   48,
        events_completed  120    4,
    }
    ibv_ah 24 8 {
        context    0    8,
        pd         8    8,
        handle    16    4,
    }
    ibv_comp_channel 16 8 {
        context    0    8,
        fd         8    4,
        refcnt    12    4,
    }
    ibv_qp_init_attr 64 8 {
        qp_context    0    8,
        send_cq       8    8,
        recv_cq      16    8,
        srq          24    8,
        cap          32   20,
        qp_type      52    4,
        sq_sig_all   56    4,
    }
    ibv_qp_init_attr_ex 136 8 {
        qp_context        0    8,
        send_cq           8    8,
        recv_cq          16    8,
        srq              24    8,
        cap              32   20,
        qp_type          52    4,
        sq_sig_all       56    4,
        comp_mask        60    4,
        pd               64    8,
        xrcd             72    8,
        create_flags     80    4,
        max_tso_header   84    2,
        rwq_ind_tbl      88    8,
        rx_hash_conf     96   24,
        source_qpn      120    4,
        send_ops_flags  128    8,
    }
    ibv_qp_attr 144 8 {
        qp_state               0    4,
        cur_qp_state           4    4,
        path_mtu               8    4,
        path_mig_state        12    4,
        qkey                  16    4,
        rq_psn                20    4,
        sq_psn                24    4,
        dest_qp_num           28    4,
        qp_access_flags       32    4,
        cap                   36   20,
        ah_attr               56   32,
        alt_ah_attr           88   32,
        pkey_index           120    2,
        alt_pkey_index       122    2,
        en_sqd_async_notify  124    1,
        sq_draining          125    1,
        max_rd_atomic        126    1,
        max_dest_rd_atomic   127    1,
        min_rnr_timer        128    1,
        port_num             129    1,
        timeout              130    1,
        retry_cnt            131    1,
        rnr_retry            132    1,
        alt_port_num         133    1,
        alt_timeout          134    1,
        rate_limit           136    4,
    }
    ibv_qp_cap 20 4 {
        max_send_wr        0    4,
        max_recv_wr        4    4,
        max_send_sge       8    4,
        max_recv_sge      12    4,
        max_inline_data   16    4,
    }
    ibv_ah_attr 32 8 {
        grh              0   24,
        dlid            24    2,
        sl              26    1,
        src_path_bits   27    1,
        static_rate     28    1,
        is_global       29    1,
        port_num        30    1,
    }
    ibv_global_route 24 8 {
        dgid             0   16,
        flow_label      16    4,
        sgid_index      20    1,
        hop_limit       21    1,
        traffic_class   22    1,
    }
    ibv_send_wr 128 8 {
        wr_id                      0    8,
        next                       8    8,
        sg_list                   16    8,
        num_sge                   24    4,
        opcode                    28    4,
        send_flags                32    4,
        wr                        40   32,
        qp_type                   72    4,
        imm_data                  36    4,
        wr.rdma.remote_addr       40    8,
        wr.rdma.rkey              48    4,
        wr.atomic.remote_addr     40    8,
        wr.atomic.compare_add     48    8,
        wr.atomic.swap            56    8,
        wr.atomic.rkey            64    4,
        wr.ud.ah                  40    8,
        wr.ud.remote_qpn          48    4,
        wr.ud.remote_qkey         52    4,
        qp_type.xrc.remote_srqn   72    4,
        "bind_mw" = ext.bind_mw   80   48,
        "tso" = ext.tso           80   16,
    }
    ibv_recv_wr 32 8 {
        wr_id      0    8,
        next       8    8,
        sg_list   16    8,
        num_sge   24    4,
    }
    ibv_sge 16 8 {
        addr      0    8,
        length    8    4,
        lkey     12    4,
    }
    ibv_wc 48 8 {
        wr_id             0    8,
        status            8    4,
        opcode           12    4,
        vendor_err       16    4,
        byte_len         20    4,
        qp_num           28    4,
        src_qp           32    4,
        wc_flags         36    4,
        pkey_index       40    2,
        slid             42    2,
        sl               44    1,
        dlid_path_bits   45    1,
        imm_data         24    4,
    }
    ibv_srq_init_attr 24 8 {
        srq_context    0    8,
        attr           8   12,
    }
    ibv_srq_init_attr_ex 64 8 {
        srq_context    0    8,
        attr           8   12,
        comp_mask     20    4,
        srq_type      24    4,
        pd            32    8,
        xrcd          40    8,
        cq            48    8,
        tm_cap        56    8,
    }
    ibv_ops_wr 72 8 {
        wr_id                 0    8,
        next                  8    8,
        opcode               16    4,
        flags                20    4,
        tm.unexpected_cnt    24    4,
        tm.handle            28    4,
        tm.add.recv_wr_id    32    8,
        tm.add.sg_list       40    8,
        tm.add.num_sge       48    4,
        tm.add.tag           56    8,
        tm.add.mask          64    8,
    }
    ibv_wc_tm_info 16 8 {
        tag                   0    8,
        "priv" = priv_        8    4,
    }
    ibv_srq_attr 12 4 {
        max_wr       0    4,
        max_sge      4    4,
        srq_limit    8    4,
    }
    ibv_cq_init_attr_ex 56 8 {
        cqe              0    4,
        cq_context       8    8,
        channel         16    8,
        comp_vector     24    4,
        wc_flags        32    8,
        comp_mask       40    4,
        flags           44    4,
        parent_domain   48    8,
    }
    ibv_xrcd 8 8 {
        context    0    8,
    }
    ibv_async_event 16 8 {
        element       0    8,
        event_type    8    4,
    }
    ibv_poll_cq_attr 4 4 {
        comp_mask    0    4,
    }
    ibv_values_ex 24 8 {
        comp_mask    0    4,
        raw_clock    8   16,
    }
    ibv_grh 40 8 {
        version_tclass_flow    0    4,
        paylen                 4    2,
        next_hdr               6    1,
        hop_limit              7    1,
        sgid                   8   16,
        dgid                  24   16,
    }
    ibv_td 8 8 {
        context 0 8,
    }
    ibv_td_init_attr 4 4 {
        comp_mask 0 4,
    }
    ibv_parent_domain_init_attr 48 8 {
        pd           0    8,
        td           8    8,
        comp_mask   16    4,
        alloc       24    8,
        free        32    8,
        pd_context  40    8,
    }
    ibv_moderate_cq 4 2 {
        cq_count   0    2,
        cq_period  2    2,
    }
    ibv_modify_cq_attr 8 4 {
        attr_mask  0    4,
        moderate   4    4,
    }
    ibv_alloc_dm_attr 16 8 {
        length          0    8,
        log_align_req   8    4,
        comp_mask      12    4,
    }
    ibv_dm 32 8 {
        context          0    8,
        memcpy_to_dm     8    8,
        memcpy_from_dm  16    8,
        comp_mask       24    4,
        handle          28    4,
    }
    ibv_mw 32 8 {
        context           0    8,
        pd                8    8,
        rkey             16    4,
        handle           20    4,
        "type" = type_   24    4,
    }
    ibv_qp_open_attr 32 8 {
        comp_mask     0    4,
        qp_num        4    4,
        xrcd          8    8,
        qp_context   16    8,
        qp_type      24    4,
    }
    ibv_xrcd_init_attr 12 4 {
        comp_mask    0    4,
        fd           4    4,
        oflags       8    4,
    }
}

/// The librdmacm mirrors (`<rdma/rdma_cma.h>`), checked the same way against that header.
pub(crate) mod rdmacm {
    use super::*;
    use crate::rdmacm::*;

    layout! {
        rdma_ib_addr 40 8 {
            sgid    0 16,
            dgid   16 16,
            pkey   32  2,
        }
        rdma_addr 296 8 {
            "src_addr" = src.addr       0  16,
            "src_sin" = src.sin         0  16,
            "src_sin6" = src.sin6       0  28,
            "src_storage" = src.storage 0 128,
            "dst_addr" = dst.addr     128  16,
            "dst_sin" = dst.sin       128  16,
            "dst_sin6" = dst.sin6     128  28,
            "dst_storage" = dst.storage 128 128,
            "addr.ibaddr" = ibaddr    256  40,
        }
        rdma_route 312 8 {
            addr        0 296,
            path_rec  296   8,
            num_paths 304   4,
        }
        rdma_event_channel 4 4 {
            fd 0 4,
        }
        rdma_cm_id 416 8 {
            verbs             0   8,
            channel           8   8,
            context          16   8,
            qp               24   8,
            route            32 312,
            ps              344   4,
            port_num        348   1,
            event           352   8,
            send_cq_channel 360   8,
            send_cq         368   8,
            recv_cq_channel 376   8,
            recv_cq         384   8,
            srq             392   8,
            pd              400   8,
            qp_type         408   4,
        }
        rdma_conn_param 24 8 {
            private_data         0 8,
            private_data_len     8 1,
            responder_resources  9 1,
            initiator_depth     10 1,
            flow_control        11 1,
            retry_count         12 1,
            rnr_retry_count     13 1,
            srq                 14 1,
            qp_num              16 4,
        }
        rdma_ud_param 56 8 {
            private_data      0  8,
            private_data_len  8  1,
            ah_attr          16 32,
            qp_num           48  4,
            qkey             52  4,
        }
        rdma_cm_event 80 8 {
            id          0  8,
            listen_id   8  8,
            event      16  4,
            status     20  4,
            param.conn 24 24,
            param.ud   24 56,
        }
        rdma_addrinfo 96 8 {
            ai_flags          0 4,
            ai_family         4 4,
            ai_qp_type        8 4,
            ai_port_space    12 4,
            ai_src_len       16 4,
            ai_dst_len       20 4,
            ai_src_addr      24 8,
            ai_dst_addr      32 8,
            ai_src_canonname 40 8,
            ai_dst_canonname 48 8,
            ai_route_len     56 8,
            ai_route         64 8,
            ai_connect_len   72 8,
            ai_connect       80 8,
            ai_next          88 8,
        }
        rdma_cm_join_mc_attr_ex 16 8 {
            comp_mask  0 4,
            join_flags 4 4,
            addr       8 8,
        }
        ibv_sa_path_rec 64 8 {
            dgid                       0 16,
            sgid                      16 16,
            dlid                      32  2,
            slid                      34  2,
            raw_traffic               36  4,
            flow_label                40  4,
            hop_limit                 44  1,
            traffic_class             45  1,
            reversible                48  4,
            numb_path                 52  1,
            pkey                      54  2,
            sl                        56  1,
            mtu_selector              57  1,
            mtu                       58  1,
            rate_selector             59  1,
            rate                      60  1,
            packet_life_time_selector 61  1,
            packet_life_time          62  1,
            preference                63  1,
        }
        ibv_path_record 64 8 {
            service_id          0 8,
            dgid                8 16,
            sgid               24 16,
            dlid               40 2,
            slid               42 2,
            flowlabel_hoplimit 44 4,
            tclass             48 1,
            reversible_numpath 49 1,
            pkey               50 2,
            qosclass_sl        52 2,
            mtu                54 1,
            rate               55 1,
            packetlifetime     56 1,
            preference         57 1,
            reserved           58 6,
        }
        ibv_path_data 72 8 {
            flags     0 4,
            reserved  4 4,
            path      8 64,
        }
        ibv_ece 12 4 {
            vendor_id 0 4,
            options   4 4,
            comp_mask 8 4,
        }
    }
}

/// The kernel's verbs ABI structs the marshalling helpers convert (`<rdma/ib_user_verbs.h>`),
/// checked the same way against that header.
pub(crate) mod kern {
    use super::*;
    use crate::kern::*;

    layout! {
        ib_uverbs_global_route 24 4 {
            dgid           0 16,
            flow_label    16  4,
            sgid_index    20  1,
            hop_limit     21  1,
            traffic_class 22  1,
        }
        ib_uverbs_ah_attr 32 4 {
            grh            0 24,
            dlid          24  2,
            sl            26  1,
            src_path_bits 27  1,
            static_rate   28  1,
            is_global     29  1,
            port_num      30  1,
        }
        ib_uverbs_qp_attr 144 4 {
            qp_attr_mask          0  4,
            qp_state              4  4,
            cur_qp_state          8  4,
            path_mtu             12  4,
            path_mig_state       16  4,
            qkey                 20  4,
            rq_psn               24  4,
            sq_psn               28  4,
            dest_qp_num          32  4,
            qp_access_flags      36  4,
            ah_attr              40 32,
            alt_ah_attr          72 32,
            max_send_wr         104  4,
            max_recv_wr         108  4,
            max_send_sge        112  4,
            max_recv_sge        116  4,
            max_inline_data     120  4,
            pkey_index          124  2,
            alt_pkey_index      126  2,
            en_sqd_async_notify 128  1,
            sq_draining         129  1,
            max_rd_atomic       130  1,
            max_dest_rd_atomic  131  1,
            min_rnr_timer       132  1,
            port_num            133  1,
            timeout             134  1,
            retry_cnt           135  1,
            rnr_retry           136  1,
            alt_port_num        137  1,
            alt_timeout         138  1,
        }
    }
}

/// `<rdma/ib_user_sa.h>`'s path record, checked against that header.
pub(crate) mod kern_sa {
    use super::*;
    use crate::kern::*;

    layout! {
        ib_user_path_rec 64 4 {
            dgid                       0 16,
            sgid                      16 16,
            dlid                      32  2,
            slid                      34  2,
            raw_traffic               36  4,
            flow_label                40  4,
            reversible                44  4,
            mtu                       48  4,
            pkey                      52  2,
            hop_limit                 54  1,
            traffic_class             55  1,
            numb_path                 56  1,
            sl                        57  1,
            mtu_selector              58  1,
            rate_selector             59  1,
            rate                      60  1,
            packet_life_time_selector 61  1,
            packet_life_time          62  1,
            preference                63  1,
        }
    }
}
