//! The link under a device's address: its interface and MTU, so the port's active MTU
//! follows the link as rxe's does (4096 on loopback, whose MTU is 65536; 1024 on a 1500-byte
//! Ethernet).

use std::ffi::CStr;
use std::net::IpAddr;

/// The interface a device bound to `ip` sends on: the one holding `ip`, else the one whose
/// subnet contains it (127.0.0.2 is on `lo`, which holds 127.0.0.1/8). None when no
/// interface matches (an address not configured here: the bind will fail anyway).
pub fn interface_of(ip: IpAddr) -> Option<String> {
    interface_holding(ip).map(|(name, _)| name)
}

/// Whether the interface [`interface_of`] finds for `ip` is a loopback interface
/// (`IFF_LOOPBACK`, as `lo`): programs that look for RDMA devices by scanning interfaces
/// (libfabric's verbs provider) pass such interfaces over.
pub fn on_loopback_interface(ip: IpAddr) -> bool {
    interface_holding(ip).is_some_and(|(_, flags)| flags & libc::IFF_LOOPBACK as u32 != 0)
}

/// The name and flags of the interface holding `ip`, else of the one whose subnet holds it.
fn interface_holding(ip: IpAddr) -> Option<(String, u32)> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `addrs` with a list freed below.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        return None;
    }
    let mut exact = None;
    let mut subnet = None;
    let mut p = addrs;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        // SAFETY: sockaddrs of the list, read according to their family.
        let (addr, mask) = unsafe { (sockaddr_ip(ifa.ifa_addr), sockaddr_ip(ifa.ifa_netmask)) };
        let Some(addr) = addr else { continue };
        // SAFETY: a NUL-terminated interface name.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        if addr == ip {
            exact = Some((name, ifa.ifa_flags));
            break;
        }
        if subnet.is_none() && mask.is_some_and(|m| same_subnet(addr, ip, m)) {
            subnet = Some((name, ifa.ifa_flags));
        }
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(addrs) };
    exact.or(subnet)
}

/// The MTU of interface `name` (SIOCGIFMTU), or None.
pub fn interface_mtu(name: &str) -> Option<usize> {
    // SAFETY: ifreq is plain data for which all-zero bytes are valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a datagram socket only to ask the kernel; closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: SIOCGIFMTU reads ifr_name and writes ifr_mtu of `req`.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) };
    // SAFETY: the socket opened above.
    unsafe { libc::close(fd) };
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    (rc == 0).then_some(usize::try_from(mtu).ok()).flatten()
}

/// The MTU of the link `ip` is on, or None when no interface holds it.
pub fn link_mtu(ip: IpAddr) -> Option<usize> {
    interface_mtu(&interface_of(ip)?)
}

/// The address in a sockaddr, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` must be NULL or point to a sockaddr of the size its family implies.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: per the contract, the family tells the real type.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let v4 = &*sa.cast::<libc::sockaddr_in>();
                Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
            }
            libc::AF_INET6 => {
                let v6 = &*sa.cast::<libc::sockaddr_in6>();
                Some(IpAddr::from(v6.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

fn same_subnet(a: IpAddr, b: IpAddr, mask: IpAddr) -> bool {
    match (a, b, mask) {
        (IpAddr::V4(a), IpAddr::V4(b), IpAddr::V4(m)) => {
            let m = u32::from(m);
            m != 0 && u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b), IpAddr::V6(m)) => {
            let m = u128::from(m);
            m != 0 && u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_on_lo_with_its_mtu() {
        for ip in ["127.0.0.1", "127.0.0.2", "127.77.1.1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(interface_of(ip).as_deref(), Some("lo"), "{ip}");
        }
        let mtu = link_mtu("127.0.0.1".parse().unwrap()).expect("lo has an MTU");
        assert!(mtu >= 1280, "lo's MTU {mtu}");
    }

    #[test]
    fn an_address_on_no_interface_has_no_link() {
        // Class E (reserved): configured on no test machine.
        assert_eq!(interface_of("240.0.0.77".parse().unwrap()), None);
        assert_eq!(interface_mtu("no-such-if0"), None);
    }
}
