//! The sysfs and `/dev` entries a kernel provider's device has, for our devices: what
//! `ibv_read_sysfs_file` answers for them, and the tree `softroce exec` mounts (in a private
//! mount namespace) for libraries that read the files themselves.
//!
//! UCX 1.13 skips a device whose `/dev/infiniband/<dev_name>` is not a read-writable
//! character device (`uct_ib_device_is_accessible`, `src/uct/ib/base/ib_md.c`), takes a
//! GID's RoCE version from `ports/1/gid_attrs/types/N` (missing: RoCE v1) and its netdev from
//! `gid_attrs/ndevs/N`, and its locality from `device/numa_node` and `device/local_cpus`
//! (`src/uct/ib/base/ib_device.c`); rdma-core's tests find the netdev under `device/net/`.
//!
//! `softroce exec` gets the tree from the library it runs the program on by reading the
//! virtual file [`TREE_FILE`] of `/sys/class`, so the files always say what the verbs
//! answer. One entry a line, fields separated by tabs: `F path content` (a file),
//! `L path target` (a symbolic link), `C path` (a character device: `/dev/null` bound there,
//! which is never opened: the library does not use the node).

use std::fmt::Write as _;

use softroce_emu::Hca;
use softroce_emu::driver::DeviceConfig;
use softroce_emu::driver::link::interface_of;

use crate::devices::DeviceEntry;

/// The virtual file of `/sys/class` that lists the whole tree.
pub(crate) const TREE_FILE: &str = ".softroce-tree";

/// One entry of the tree, by absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    File(String, String),
    Link(String, String),
    CharDevice(String),
}

/// The entries of one device (`/sys/class/infiniband/<name>/…`, its
/// `/sys/class/infiniband_verbs/uverbsN` and `/dev/infiniband/uverbsN`).
pub(crate) fn device_nodes(e: &DeviceEntry) -> Vec<Node> {
    let name = &e.spec.name;
    let ib = format!("/sys/class/infiniband/{name}");
    let uverbs = format!("uverbs{}", e.index);
    let verbs = format!("/sys/class/infiniband_verbs/{uverbs}");
    let mut cfg = DeviceConfig::new(name, e.spec.ip);
    cfg.hca.udp_port = e.spec.udp_port;
    let hca = Hca::new(cfg.hca);
    let attr = hca.query_device();
    let guid = guid_str(attr.node_guid);
    let mut out = vec![];
    let mut file = |path: String, content: String| out.push(Node::File(path, content));
    file(format!("{ib}/node_type"), "1: CA".into());
    file(format!("{ib}/node_guid"), guid.clone());
    file(
        format!("{ib}/sys_image_guid"),
        guid_str(attr.sys_image_guid),
    );
    file(format!("{ib}/node_desc"), name.clone());
    file(format!("{ib}/fw_ver"), attr.fw_ver.clone());
    file(format!("{ib}/hw_rev"), attr.hw_ver.to_string());
    file(format!("{ib}/hca_type"), "softroce".into());
    file(format!("{ib}/board_id"), "softroce".into());
    // Loopback has no NUMA placement: every CPU is as close as any other.
    file(format!("{ib}/device/numa_node"), "-1".into());
    file(format!("{ib}/device/local_cpus"), all_cpus_mask());
    let ndev = interface_of(e.spec.ip);
    if let Ok(port) = hca.query_port(1) {
        let p = format!("{ib}/ports/1");
        file(format!("{p}/state"), "4: ACTIVE".into());
        file(format!("{p}/phys_state"), "5: LinkUp".into());
        file(format!("{p}/link_layer"), "Ethernet".into());
        file(format!("{p}/lid"), "0x0".into());
        file(format!("{p}/sm_lid"), "0x0".into());
        file(format!("{p}/lid_mask_count"), "0".into());
        file(format!("{p}/sm_sl"), "0".into());
        file(
            format!("{p}/cap_mask"),
            format!("0x{:08x}", port.port_cap_flags),
        );
        file(format!("{p}/pkeys/0"), "0xffff".into());
        for i in 0..port.gid_tbl_len as usize {
            let Ok(gid) = hca.query_gid(1, i) else { break };
            file(format!("{p}/gids/{i}"), gid_str(gid.as_bytes()));
            file(format!("{p}/gid_attrs/types/{i}"), "RoCE v2".into());
            if let Some(n) = &ndev {
                file(format!("{p}/gid_attrs/ndevs/{i}"), n.clone());
            }
        }
    }
    file(format!("{verbs}/ibdev"), name.clone());
    file(format!("{verbs}/abi_version"), "1".into());
    if let Some(n) = &ndev {
        out.push(Node::Link(
            format!("{ib}/device/net/{n}"),
            format!("/sys/class/net/{n}"),
        ));
    }
    out.push(Node::CharDevice(format!("/dev/infiniband/{uverbs}")));
    out
}

/// The tree of every device, in the line format of the module documentation.
pub(crate) fn tree_text(entries: &[&DeviceEntry]) -> String {
    let mut s = String::from("F\t/sys/class/infiniband_verbs/abi_version\t6\n");
    for e in entries {
        for n in device_nodes(e) {
            match n {
                Node::File(p, c) => writeln!(s, "F\t{p}\t{c}"),
                Node::Link(p, t) => writeln!(s, "L\t{p}\t{t}"),
                Node::CharDevice(p) => writeln!(s, "C\t{p}"),
            }
            .expect("writing to a String");
        }
    }
    s
}

/// The content of file `path` of `e`'s tree, if it has that file.
pub(crate) fn file_of(e: &DeviceEntry, path: &str) -> Option<String> {
    device_nodes(e).into_iter().find_map(|n| match n {
        Node::File(p, c) if p == path => Some(c),
        _ => None,
    })
}

/// A GUID as sysfs writes it: four groups of four hex digits.
fn guid_str(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// A GID as sysfs writes it: eight groups of four hex digits.
fn gid_str(b: &[u8; 16]) -> String {
    b.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// A cpumask of every configured CPU, as sysfs writes one: 32-bit hex words, most
/// significant first, separated by commas.
fn all_cpus_mask() -> String {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.clamp(1, 8192) as usize;
    let words = n.div_ceil(32);
    (0..words)
        .rev()
        .map(|w| {
            let bits = (n - w * 32).min(32);
            let v: u32 = if bits == 32 {
                u32::MAX
            } else {
                (1 << bits) - 1
            };
            format!("{v:08x}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_match_the_kernels() {
        assert_eq!(guid_str(0x0200_7f00_0001_0000), "0200:7f00:0001:0000");
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(gid_str(&g), "0000:0000:0000:0000:0000:ffff:7f00:0001");
        let m = all_cpus_mask();
        assert!(m.split(',').all(|w| w.len() == 8), "{m}");
    }
}
