//! UD multicast groups: which QPs of this device are attached to which MGID, with rxe's
//! limits (`rxe_mcast.c`). The transport delivers a packet for [`MULTICAST_QPN`] to every
//! member of the group its destination address names; the driver joins the IP group while
//! the group has members ([`Multicast::groups`]).

use std::collections::{BTreeMap, HashSet};

use softroce_wire::Gid;

use super::device::DeviceAttr;
use super::error::{VerbsError, VerbsResult};
use super::handles::QpHandle;

/// The destination QPN of a multicast packet (IBTA 9.8.1.2: the "permissive" QPN).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// Group membership of one device.
#[derive(Debug, Default)]
pub(crate) struct Multicast {
    /// Members of each group, in attach order (the order copies are delivered in).
    groups: BTreeMap<Gid, Vec<QpHandle>>,
    /// Attachments over all groups (rxe's `mcg_attach`).
    attachments: usize,
    /// QPs created with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`.
    blocks_own: HashSet<QpHandle>,
}

impl Multicast {
    /// Attach `qp` to `mgid`: idempotent for a QP already attached; ENOMEM beyond
    /// `max_mcast_grp` groups, `max_mcast_qp_attach` QPs per group or
    /// `max_total_mcast_qp_attach` attachments, as rxe.
    pub(crate) fn attach(&mut self, attr: &DeviceAttr, qp: QpHandle, mgid: Gid) -> VerbsResult<()> {
        const VERB: &str = "attach_mcast";
        match self.groups.get(&mgid) {
            Some(members) if members.contains(&qp) => return Ok(()),
            Some(members) if members.len() >= attr.max_mcast_qp_attach as usize => {
                return Err(VerbsError::no_resources(
                    VERB,
                    format!(
                        "group {mgid} already has max_mcast_qp_attach ({}) QPs",
                        attr.max_mcast_qp_attach
                    ),
                ));
            }
            None if self.groups.len() >= attr.max_mcast_grp as usize => {
                return Err(VerbsError::no_resources(
                    VERB,
                    format!("max_mcast_grp ({}) groups exist", attr.max_mcast_grp),
                ));
            }
            _ => {}
        }
        if self.attachments >= attr.max_total_mcast_qp_attach as usize {
            return Err(VerbsError::no_resources(
                VERB,
                format!(
                    "max_total_mcast_qp_attach ({}) attachments exist",
                    attr.max_total_mcast_qp_attach
                ),
            ));
        }
        self.groups.entry(mgid).or_default().push(qp);
        self.attachments += 1;
        Ok(())
    }

    /// Detach `qp` from `mgid` (EINVAL when it is not attached); a group without members
    /// ceases to exist.
    pub(crate) fn detach(&mut self, qp: QpHandle, mgid: Gid) -> VerbsResult<()> {
        let members = self.groups.get_mut(&mgid);
        let Some((members, at)) =
            members.and_then(|m| m.iter().position(|&q| q == qp).map(|i| (m, i)))
        else {
            return Err(VerbsError::invalid(
                "detach_mcast",
                format!("the QP is not attached to {mgid}"),
            ));
        };
        members.remove(at);
        if members.is_empty() {
            self.groups.remove(&mgid);
        }
        self.attachments -= 1;
        Ok(())
    }

    /// The QPs attached to `mgid`.
    pub(crate) fn members(&self, mgid: Gid) -> &[QpHandle] {
        self.groups.get(&mgid).map_or(&[], Vec::as_slice)
    }

    /// How many groups `qp` is attached to.
    pub(crate) fn groups_of(&self, qp: QpHandle) -> usize {
        self.groups.values().filter(|m| m.contains(&qp)).count()
    }

    /// `qp` no longer receives the multicast it sent itself (or, with `false`, does again).
    pub(crate) fn set_block_own(&mut self, qp: QpHandle, block: bool) {
        if block {
            self.blocks_own.insert(qp);
        } else {
            self.blocks_own.remove(&qp);
        }
    }

    /// Whether `qp` refuses the multicast it sent itself.
    pub(crate) fn blocks_own(&self, qp: QpHandle) -> bool {
        self.blocks_own.contains(&qp)
    }

    /// The groups with members.
    pub(crate) fn groups(&self) -> impl Iterator<Item = Gid> + '_ {
        self.groups.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, HcaConfig};
    use crate::error::errno;

    fn attr(groups: u32, per_group: u32, total: u32) -> DeviceAttr {
        let mut a = Device::new(HcaConfig::new("t", "127.79.0.1".parse().unwrap()))
            .attr()
            .clone();
        a.max_mcast_grp = groups;
        a.max_mcast_qp_attach = per_group;
        a.max_total_mcast_qp_attach = total;
        a
    }

    fn group(i: u8) -> Gid {
        Gid::from_ip(std::net::Ipv4Addr::new(239, 79, 0, i).into())
    }

    #[test]
    fn a_group_is_reachable_from_loopback_over_ipv4_only() {
        use crate::objects::AhAttr;
        let v4 = Device::new(HcaConfig::new("t", "127.79.0.1".parse().unwrap()));
        assert!(
            v4.check_ah_attr("create_ah", &AhAttr::new(group(1), 0))
                .is_ok()
        );
        // Linux routes no IPv6 multicast on lo: refused as unreachable, not lost later.
        let v6 = Device::new(HcaConfig::new("t", "::1".parse().unwrap()));
        let ff0e = Gid::from_ip("ff0e::79".parse().unwrap());
        let e = v6
            .check_ah_attr("create_ah", &AhAttr::new(ff0e, 0))
            .unwrap_err();
        assert_eq!(e.errno(), errno::EINVAL, "{e}");
    }

    #[test]
    fn every_limit_is_enomem_and_a_detach_frees_its_place() {
        let a = attr(2, 2, 3);
        let mut m = Multicast::default();
        let qp = |i| QpHandle::from_raw(i);
        m.attach(&a, qp(1), group(1)).unwrap();
        m.attach(&a, qp(2), group(1)).unwrap();
        let per_group = m.attach(&a, qp(3), group(1)).unwrap_err();
        assert_eq!(per_group.errno(), errno::ENOMEM, "{per_group}");
        m.attach(&a, qp(3), group(2)).unwrap();
        let groups = m.attach(&a, qp(4), group(3)).unwrap_err();
        assert_eq!(groups.errno(), errno::ENOMEM, "{groups}");
        let total = m.attach(&a, qp(4), group(2)).unwrap_err();
        assert_eq!(total.errno(), errno::ENOMEM, "{total}");
        // Idempotent, and costs nothing.
        m.attach(&a, qp(1), group(1)).unwrap();
        m.detach(qp(3), group(2)).unwrap();
        assert_eq!(m.groups().collect::<Vec<_>>(), [group(1)]);
        m.attach(&a, qp(4), group(3)).unwrap();
        assert_eq!(m.members(group(1)), [qp(1), qp(2)]);
        assert_eq!(m.groups_of(qp(1)), 1);
        let again = m.detach(qp(3), group(2)).unwrap_err();
        assert_eq!(again.errno(), errno::EINVAL, "{again}");
    }
}
