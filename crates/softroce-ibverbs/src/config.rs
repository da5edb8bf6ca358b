//! Which devices exist: `SOFTROCE_DEVICES`, else the file named by `SOFTROCE_CONFIG`, else
//! `softroce0` on 127.0.0.1.

use std::net::{IpAddr, SocketAddr};

use softroce_emu::faults::excerpt;
use softroce_wire::ROCE_V2_PORT;

/// One configured device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceSpec {
    /// The name applications select it by (`ibv_get_device_name`, perftest `-d`).
    pub(crate) name: String,
    /// The address its GID is made from and its socket binds to.
    pub(crate) ip: IpAddr,
    /// Its UDP port (4791 unless several devices share an address).
    pub(crate) udp_port: u16,
}

/// The devices of this process, from the environment.
pub(crate) fn from_env() -> Result<Vec<DeviceSpec>, String> {
    // Lossy: a value that is not Unicode is refused by the parse below with the reason,
    // not taken for an unset variable.
    if let Some(spec) =
        std::env::var_os("SOFTROCE_DEVICES").map(|v| v.to_string_lossy().into_owned())
    {
        // Set but empty: no devices, which ibv_get_device_list(3) answers with an empty list
        // (a way to run a program's "no RDMA device" path).
        if spec.trim().is_empty() {
            return Ok(Vec::new());
        }
        return parse(&spec).map_err(|e| format!("SOFTROCE_DEVICES={:?}: {e}", excerpt(&spec)));
    }
    if let Some(path) = std::env::var_os("SOFTROCE_CONFIG") {
        return from_file(&path);
    }
    Ok(vec![DeviceSpec {
        name: "softroce0".into(),
        ip: IpAddr::from([127, 0, 0, 1]),
        udp_port: ROCE_V2_PORT,
    }])
}

/// The devices listed in the `SOFTROCE_CONFIG` file at `path`, one `name=address[:port]` a
/// line, `#` comments.
fn from_file(path: &std::ffi::OsStr) -> Result<Vec<DeviceSpec>, String> {
    // Bounded: the variable may name a device, a FIFO or a huge file by mistake.
    let text = softroce_emu::faults::read_config_file(
        std::path::Path::new(&path),
        softroce_emu::faults::MAX_CONFIG_BYTES,
    )
    .map_err(|e| format!("SOFTROCE_CONFIG={}: {e}", path.to_string_lossy()))?;
    let entries: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    parse(&entries.join(","))
        .map_err(|e| format!("SOFTROCE_CONFIG={}: {e}", path.to_string_lossy()))
}

/// Parse `name=address[:port],…` (IPv6 with a port as `[addr]:port`).
pub(crate) fn parse(spec: &str) -> Result<Vec<DeviceSpec>, String> {
    let mut out: Vec<DeviceSpec> = Vec::new();
    let mut names = std::collections::HashSet::new();
    let mut endpoints = std::collections::HashSet::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if out.len() == MAX_DEVICES {
            return Err(format!(
                "more than {MAX_DEVICES} devices (each one is a port, a socket and threads)"
            ));
        }
        let (name, addr) = entry
            .split_once('=')
            .ok_or_else(|| format!("{:?} is not name=address[:port]", excerpt(entry)))?;
        let name = name.trim();
        // Names become sysfs directory names and columns of ibv_devices: no separators,
        // blanks or control characters.
        if name.is_empty()
            || name.len() >= 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        {
            return Err(format!(
                "device name {:?} must be 1-63 characters of A-Z, a-z, 0-9, '_', '.' and '-'",
                excerpt(name)
            ));
        }
        let addr = addr.trim();
        let (ip, udp_port) = if let Ok(sa) = addr.parse::<SocketAddr>() {
            (sa.ip(), sa.port())
        } else if let Ok(ip) = addr.parse::<IpAddr>() {
            (ip, ROCE_V2_PORT)
        } else {
            return Err(format!(
                "{:?} is not an IP address or address:port (device {name})",
                excerpt(addr)
            ));
        };
        if udp_port == 0 {
            return Err(format!("device {name}: UDP port 0 is not a fixed port"));
        }
        // A device is one address of this host: a wildcard names none, and an IPv4-mapped
        // IPv6 address is an IPv4 one written the long way (its socket could not bind).
        let mapped = matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some());
        if ip.is_unspecified() || mapped {
            return Err(format!(
                "device {name}: {ip} is not one address of this host (give the address itself)"
            ));
        }
        if !names.insert(name.to_string()) {
            return Err(format!("device name {name} appears twice"));
        }
        if !endpoints.insert((ip, udp_port)) {
            return Err(format!(
                "device {name}: another device already has {}",
                SocketAddr::new(ip, udp_port)
            ));
        }
        out.push(DeviceSpec {
            name: name.to_string(),
            ip,
            udp_port,
        });
    }
    if out.is_empty() {
        return Err("no device given".into());
    }
    Ok(out)
}

/// The most devices a configuration may name: each is a UDP port, sockets and threads,
/// and a few megabytes once opened.
const MAX_DEVICES: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_names_and_addresses_are_refused_with_the_reason() {
        for (spec, why) in [
            ("a\tb=127.0.0.1", "must be 1-63 characters"),
            ("a b=127.0.0.1", "must be 1-63 characters"),
            ("a=0.0.0.0", "not one address of this host"),
            ("a=[::]:4791", "not one address of this host"),
            ("a=::ffff:127.0.0.1", "not one address of this host"),
            ("a=127.0.0.1,b=127.0.0.1:4791", "already has 127.0.0.1:4791"),
            ("a=127.0.0.1,a=127.0.0.2", "appears twice"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(why), "{spec:?}: {e}");
        }
        // Two devices on one address with their own ports are fine.
        assert_eq!(parse("a=127.0.0.1,b=127.0.0.1:4792").unwrap().len(), 2);
        let many: Vec<String> = (0..300)
            .map(|i| format!("d{i}=127.0.{}.{}", i / 200, i % 200 + 1))
            .collect();
        let e = parse(&many.join(",")).unwrap_err();
        assert!(e.contains("more than 256 devices"), "{e}");
        let long = format!("{}=127.0.0.1", "x".repeat(100_000));
        assert!(parse(&long).unwrap_err().len() < 200);
    }

    #[test]
    fn devices_with_and_without_ports_parse() {
        let d = parse("softroce0=127.0.0.1, softroce1=127.0.0.2:4792,v6=[::1]:5000").unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].udp_port, 4791);
        assert_eq!(d[1].ip, IpAddr::from([127, 0, 0, 2]));
        assert_eq!(d[1].udp_port, 4792);
        assert_eq!(d[2].ip, "::1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn config_files_are_bounded_regular_files() {
        let e = from_file("/dev/zero".as_ref()).unwrap_err();
        assert!(
            e.starts_with("SOFTROCE_CONFIG=/dev/zero: not a regular file") && e.contains("1048576"),
            "{e}"
        );
        let path = std::env::temp_dir().join(format!("softroce-config-{}", std::process::id()));
        std::fs::write(&path, "# big\n".repeat(200_000)).unwrap();
        let e = from_file(path.as_os_str()).unwrap_err();
        assert!(e.contains("larger than the limit of 1048576 bytes"), "{e}");
        std::fs::write(&path, "a=127.0.0.1 # comment\n").unwrap();
        assert_eq!(from_file(path.as_os_str()).unwrap()[0].name, "a");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        assert!(parse("softroce0").unwrap_err().contains("name=address"));
        assert!(parse("a=1.2.3").unwrap_err().contains("not an IP address"));
        assert!(
            parse("a=127.0.0.1,a=127.0.0.2")
                .unwrap_err()
                .contains("twice")
        );
        assert!(parse("").unwrap_err().contains("no device"));
        assert!(parse("a=127.0.0.1:0").unwrap_err().contains("port 0"));
    }
}
