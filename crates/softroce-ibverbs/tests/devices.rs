//! Unmodified `ibv_devices` and `ibv_devinfo -v` list the emulated devices like RoCE
//! devices, configured from SOFTROCE_DEVICES.

mod common;

use std::time::Duration;

#[test]
fn ibv_devices_lists_every_configured_device() {
    common::require_tools(&["ibv_devices"]);
    let out = common::spawn(
        "ibv_devices",
        "softroce0=127.77.1.1,softroce1=127.77.1.2:4792",
        "ibv_devices",
        &[],
    )
    .finish(Duration::from_secs(30));
    assert!(out.ok(), "{}", out.report());
    let names: Vec<&str> = out
        .stdout
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["softroce0", "softroce1"], "{}", out.report());
    // Node GUID: EUI-64 of the MAC 02:00:<first four bytes of the address>, local bit flipped.
    assert!(out.stdout.contains("00007ffffe4d0101"), "{}", out.report());
}

#[test]
fn ibv_devinfo_shows_an_active_roce_port_with_the_rocev2_gid() {
    common::require_tools(&["ibv_devinfo"]);
    let out = common::spawn(
        "ibv_devinfo -v",
        "softroce3=127.77.2.1",
        "ibv_devinfo",
        &["-v"],
    )
    .finish(Duration::from_secs(30));
    assert!(out.ok(), "{}", out.report());
    let text = &out.stdout;
    for want in [
        "hca_id:\tsoftroce3",
        "transport:\t\t\tInfiniBand (0)",
        "vendor_part_id:\t\t\t0",
        "board_id:\t\t\tsoftroce",
        "state:\t\t\tPORT_ACTIVE (4)",
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t::ffff:127.77.2.1, RoCE v2",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
    ] {
        assert!(text.contains(want), "missing {want:?}:\n{}", out.report());
    }
}

#[test]
fn a_bad_device_spec_is_refused_with_the_reason() {
    common::require_tools(&["ibv_devinfo"]);
    let out = common::spawn("ibv_devinfo", "softroce0=not-an-ip", "ibv_devinfo", &[])
        .finish(Duration::from_secs(30));
    assert!(!out.ok(), "{}", out.report());
    assert!(
        out.stderr
            .contains("SOFTROCE_DEVICES=\"softroce0=not-an-ip\"")
            && out.stderr.contains("not an IP address"),
        "{}",
        out.report()
    );
}

#[test]
fn ibv_devinfo_still_answers_while_another_process_uses_the_device() {
    common::require_tools(&["ibv_devinfo", "ibv_rc_pingpong"]);
    let dev = "softroce0=127.77.3.1";
    let port = common::free_tcp_port().to_string();
    // A pingpong server owns the device's UDP socket while it waits for a client.
    let mut server = common::spawn(
        "ibv_rc_pingpong server",
        dev,
        "ibv_rc_pingpong",
        &["-g", "0", "-p", &port],
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !server.exited(),
        "the pingpong server should wait for a client"
    );
    let out = common::spawn("ibv_devinfo", dev, "ibv_devinfo", &[]).finish(Duration::from_secs(30));
    drop(server);
    assert!(out.ok(), "{}", out.report());
    assert!(
        out.stdout.contains("PORT_ACTIVE") && out.stdout.contains("hca_id:\tsoftroce0"),
        "{}",
        out.report()
    );
}
