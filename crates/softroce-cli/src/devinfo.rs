//! `softroce devinfo`: what `ibv_devinfo -v` shows, for an emulated device.
//!
//! It describes the device that would run on `--bind` without starting one: no port is
//! bound, so it works while another process owns the device. The counters live in that
//! process (see `--counters`).

use std::net::IpAddr;
use std::process::ExitCode;

use clap::Args;
use softroce_emu::Hca;
use softroce_emu::driver::{DeviceConfig, guarded_copy};

/// Arguments of `softroce devinfo`.
#[derive(Debug, Args)]
pub(crate) struct DevinfoArgs {
    /// Address of the emulated device (its GIDs and GUID are made from it).
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// UDP port (accepted for compatibility: devinfo binds no port).
    #[arg(long, default_value_t = 0)]
    udp_port: u16,
    /// Explain where a device's counters are: in the process that runs it, not here.
    #[arg(long)]
    counters: bool,
}

/// Where to find a device's counters: every device lives in the process that started it.
const COUNTERS_LIVE_ELSEWHERE: &str = "counters live in the process that runs the device: \
     `softroce pingpong|ops|perf --counters` prints them at its end, and any program \
     (the drop-in libibverbs too) prints them to stderr when the device closes with \
     SOFTROCE_COUNTERS=stderr";

pub(crate) fn run(args: &DevinfoArgs) -> ExitCode {
    if args.counters {
        eprintln!("softroce devinfo: {COUNTERS_LIVE_ELSEWHERE}");
        return ExitCode::from(1);
    }
    // As the running device would be: its link's MTU, and registered memory copied as the
    // driver copies it (which is what makes implicit on-demand paging possible).
    guarded_copy::install();
    let hca = Hca::new(DeviceConfig::new("softroce0", args.bind).hca);
    let a = hca.query_device().clone();
    let g = a.node_guid.to_be_bytes();
    let guid = format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]
    );
    println!("hca_id:\tsoftroce0");
    println!("\ttransport:\t\t\tInfiniBand (0)");
    println!("\tfw_ver:\t\t\t\t{}", a.fw_ver);
    println!("\tnode_guid:\t\t\t{guid}");
    println!("\tsys_image_guid:\t\t\t{guid}");
    println!("\tvendor_id:\t\t\t{:#x}", a.vendor_id);
    println!("\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
    println!("\thw_ver:\t\t\t\t{:#x}", a.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    println!("\tmax_mr_size:\t\t\t{:#x}", a.max_mr_size);
    println!("\tpage_size_cap:\t\t\t{:#x}", a.page_size_cap);
    for (name, v) in [
        ("max_qp", a.max_qp),
        ("max_qp_wr", a.max_qp_wr),
        ("max_sge", a.max_sge),
        ("max_sge_rd", a.max_sge_rd),
        ("max_cq", a.max_cq),
        ("max_cqe", a.max_cqe),
        ("max_mr", a.max_mr),
        ("max_pd", a.max_pd),
        ("max_qp_rd_atom", a.max_qp_rd_atom),
        ("max_qp_init_rd_atom", a.max_qp_init_rd_atom),
        ("max_mcast_grp", a.max_mcast_grp),
        ("max_mcast_qp_attach", a.max_mcast_qp_attach),
        ("max_total_mcast_qp_attach", a.max_total_mcast_qp_attach),
        ("max_ah", a.max_ah),
        ("max_srq", a.max_srq),
        ("max_srq_wr", a.max_srq_wr),
        ("max_srq_sge", a.max_srq_sge),
        ("max_inline_data", a.max_inline_data),
    ] {
        println!(
            "\t{name}:{}{v}",
            "\t".repeat(if name.len() < 7 {
                4
            } else if name.len() < 15 {
                3
            } else {
                2
            })
        );
    }
    println!("\tatomic_cap:\t\t\tATOMIC_HCA ({})", a.atomic_cap);
    println!("\tdevice_cap_flags:\t\t{:#010x}", a.device_cap_flags);
    print_flags(u64::from(a.device_cap_flags), DEVICE_CAP_FLAGS);
    println!("\tdevice_cap_flags_ex:\t\t{:#x}", a.device_cap_flags_ex);
    print_flags(a.device_cap_flags_ex >> 32 << 32, DEVICE_CAP_FLAGS_EX);
    println!("\todp_caps:");
    println!("\t\tgeneral_odp_caps:");
    print_flags(a.odp.general, ODP_GENERAL);
    for (transport, caps) in [
        ("rc", a.odp.rc),
        ("uc", a.odp.uc),
        ("ud", a.odp.ud),
        ("xrc", a.odp.xrc),
    ] {
        println!("\t\t{transport}_odp_caps:");
        print_flags(u64::from(caps), ODP_TRANSPORT);
    }
    let tm = hca.tm_caps();
    println!("\ttm_caps:");
    println!("\t\tmax_rndv_hdr_size:\t{}", tm.max_rndv_hdr_size);
    println!("\t\tmax_num_tags:\t\t{}", tm.max_num_tags);
    println!("\t\tmax_ops:\t\t{}", tm.max_ops);
    println!("\t\tmax_sge:\t\t{}", tm.max_sge);
    println!("\t\tflags:\t\t\tRC");
    println!("\tnum_comp_vectors:\t\t{}", a.num_comp_vectors);
    if let Ok(p) = hca.query_port(1) {
        println!("\t\tport:\t1");
        println!(
            "\t\t\tstate:\t\t\t{}",
            match p.state {
                softroce_emu::core::PortState::Active => "PORT_ACTIVE (4)",
                softroce_emu::core::PortState::Down => "PORT_DOWN (1)",
            }
        );
        println!(
            "\t\t\tmax_mtu:\t\t{} ({})",
            p.max_mtu.bytes(),
            p.max_mtu.code()
        );
        println!(
            "\t\t\tactive_mtu:\t\t{} ({})",
            p.active_mtu.bytes(),
            p.active_mtu.code()
        );
        println!("\t\t\tsm_lid:\t\t\t0");
        println!("\t\t\tport_lid:\t\t0");
        println!("\t\t\tlink_layer:\t\tEthernet");
        println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
        println!("\t\t\tbad_pkey_cntr:\t\t{:#x}", p.bad_pkey_cntr);
        println!("\t\t\tqkey_viol_cntr:\t\t{:#x}", p.qkey_viol_cntr);
        println!("\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
        println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
        for i in 0..p.gid_tbl_len as usize {
            if let Ok(gid) = hca.query_gid(1, i) {
                println!("\t\t\tGID[{i:>3}]:\t\t{gid}, RoCE v2");
            }
        }
    }
    ExitCode::SUCCESS
}

/// `enum ibv_device_cap_flags` (verbs.h), as ibv_devinfo names them.
const DEVICE_CAP_FLAGS: &[(u64, &str)] = &[
    (1, "RESIZE_MAX_WR"),
    (1 << 1, "BAD_PKEY_CNTR"),
    (1 << 2, "BAD_QKEY_CNTR"),
    (1 << 3, "RAW_MULTI"),
    (1 << 4, "AUTO_PATH_MIG"),
    (1 << 5, "CHANGE_PHY_PORT"),
    (1 << 6, "UD_AV_PORT_ENFORCE"),
    (1 << 7, "CURR_QP_STATE_MOD"),
    (1 << 8, "SHUTDOWN_PORT"),
    (1 << 9, "INIT_TYPE"),
    (1 << 10, "PORT_ACTIVE_EVENT"),
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 13, "SRQ_RESIZE"),
    (1 << 14, "N_NOTIFY_CQ"),
    (1 << 17, "MEM_WINDOW"),
    (1 << 18, "UD_IP_CSUM"),
    (1 << 20, "XRC"),
    (1 << 21, "MEM_MGT_EXTENSIONS"),
    (1 << 23, "MEM_WINDOW_TYPE_2A"),
    (1 << 24, "MEM_WINDOW_TYPE_2B"),
    (1 << 25, "RC_IP_CSUM"),
    (1 << 26, "RAW_IP_CSUM"),
    (1 << 29, "MANAGED_FLOW_STEERING"),
];

/// The kernel's flags above the 32 of `device_cap_flags` that softroce sets.
const DEVICE_CAP_FLAGS_EX: &[(u64, &str)] =
    &[(softroce_emu::core::DEVICE_ATOMIC_WRITE, "ATOMIC_WRITE")];

/// `enum ibv_odp_general_caps`.
const ODP_GENERAL: &[(u64, &str)] = &[(1, "ODP_SUPPORT"), (2, "ODP_SUPPORT_IMPLICIT")];

/// `enum ibv_odp_transport_cap_bits`.
const ODP_TRANSPORT: &[(u64, &str)] = &[
    (1, "SUPPORT_SEND"),
    (2, "SUPPORT_RECV"),
    (4, "SUPPORT_WRITE"),
    (8, "SUPPORT_READ"),
    (16, "SUPPORT_ATOMIC"),
    (32, "SUPPORT_SRQ"),
];

/// One line per set flag (as ibv_devinfo -v), and the bits without a name.
fn print_flags(value: u64, names: &[(u64, &str)]) {
    let mut left = value;
    for &(bit, name) in names {
        if value & bit != 0 {
            println!("\t\t\t\t\t{name}");
            left &= !bit;
        }
    }
    if left != 0 {
        println!("\t\t\t\t\tUnknown flags: {left:#x}");
    }
}
