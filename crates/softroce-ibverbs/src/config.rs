//! Which devices exist: `SOFTROCE_DEVICES`, else the file named by `SOFTROCE_CONFIG`, else
//! `softroce0` on 127.0.0.1.

use std::net::{IpAddr, SocketAddr};

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
    if let Ok(spec) = std::env::var("SOFTROCE_DEVICES") {
        // Set but empty: no devices, which ibv_get_device_list(3) answers with an empty list
        // (a way to run a program's "no RDMA device" path).
        if spec.trim().is_empty() {
            return Ok(Vec::new());
        }
        return parse(&spec).map_err(|e| format!("SOFTROCE_DEVICES='{spec}': {e}"));
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
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, addr) = entry
            .split_once('=')
            .ok_or_else(|| format!("'{entry}' is not name=address[:port]"))?;
        let name = name.trim();
        if name.is_empty() || name.len() >= 64 || !name.is_ascii() || name.contains('/') {
            return Err(format!(
                "device name '{name}' must be 1-63 ASCII characters without '/'"
            ));
        }
        let addr = addr.trim();
        let (ip, udp_port) = if let Ok(sa) = addr.parse::<SocketAddr>() {
            (sa.ip(), sa.port())
        } else if let Ok(ip) = addr.parse::<IpAddr>() {
            (ip, ROCE_V2_PORT)
        } else {
            return Err(format!(
                "'{addr}' is not an IP address or address:port (device {name})"
            ));
        };
        if udp_port == 0 {
            return Err(format!("device {name}: UDP port 0 is not a fixed port"));
        }
        if out.iter().any(|d| d.name == name) {
            return Err(format!("device name {name} appears twice"));
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

#[cfg(test)]
mod tests {
    use super::*;

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
