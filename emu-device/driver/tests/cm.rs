//! The connection manager on real devices: CM MADs travel between two devices' QP1s over
//! UDP on loopback, the engine threads run the retries, and the events arrive through
//! each device's pollable CM fd.

use std::net::SocketAddr;
use std::time::Duration;

use softroce_emu_cm::{
    AcceptParams, CmEvent, ConnectParams, REJ_CONSUMER_DEFINED, REJ_INVALID_SERVICE_ID,
};
use softroce_emu_driver::{Device, DeviceConfig};
use softroce_wire::{Gid, Mtu, PortSpace, Psn, Qpn};

const WAIT: Duration = Duration::from_secs(10);

fn start(ip: &str) -> Device {
    // UDP 4791 as RoCEv2 wants it (the CM reaches a peer's device on its own port), on
    // addresses of their own per test.
    let mut cfg = DeviceConfig::new("cm", ip.parse().unwrap());
    cfg.pcap = None;
    cfg.faults = None;
    cfg.cm_response_timeout = 14;
    Device::start(cfg).unwrap()
}

fn connect_params(qpn: u32, private_data: &[u8]) -> ConnectParams {
    ConnectParams {
        ece: Default::default(),
        path: None,
        qp_type: Default::default(),
        remote_gid: Gid::ZERO, // taken from the peer's address
        service_id: PortSpace::Tcp.service_id(7471),
        local_qpn: Qpn::new(qpn).unwrap(),
        starting_psn: Psn::new(0x123),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: Mtu::Mtu1024,
        srq: false,
        flow_control: true,
        private_data: private_data.to_vec(),
    }
}

fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        ece: Default::default(),
        xrc: false,
        local_qpn: Qpn::new(qpn).unwrap(),
        starting_psn: Psn::new(0x456),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        flow_control: true,
        private_data: b"welcome".to_vec(),
    }
}

fn event(dev: &Device) -> CmEvent {
    dev.cm_get_event(Some(WAIT))
        .expect("a CM event within the wait")
}

fn addr(dev: &Device) -> SocketAddr {
    dev.local_addr()
}

#[test]
fn two_devices_connect_and_disconnect_through_their_qp1s() {
    let (a, b) = (start("127.0.15.3"), start("127.0.15.4"));
    b.with_cm(|cm, _| cm.listen(PortSpace::Tcp.service_id(7471)))
        .unwrap();
    a.cm_fd().set_nonblocking(true).unwrap();
    assert!(!a.cm_fd().wait_readable(Some(Duration::ZERO)).unwrap());

    let a_id = a
        .cm_connect(addr(&b), connect_params(0x11, b"hello"))
        .unwrap();
    let CmEvent::ConnectRequest {
        id: b_id,
        params,
        private_data,
    } = event(&b)
    else {
        panic!("B expected a connect request");
    };
    assert_eq!(params.remote_qpn.value(), 0x11);
    assert_eq!(params.starting_psn, Psn::new(0x123));
    assert_eq!(params.remote_gid, Gid::from_ip(addr(&a).ip()));
    assert_eq!(&private_data[..5], b"hello");
    b.cm_accept(b_id, accept_params(0x22)).unwrap();

    // A's fd says an event waits before A asks for it.
    assert!(a.cm_fd().wait_readable(Some(WAIT)).unwrap());
    let CmEvent::ConnectResponse {
        id,
        params,
        private_data,
        ..
    } = event(&a)
    else {
        panic!("A expected a connect response");
    };
    assert_eq!(id, a_id);
    assert_eq!(params.remote_qpn.value(), 0x22);
    assert_eq!(&private_data[..7], b"welcome");
    a.with_cm(|cm, _| cm.send_rtu(a_id, &[])).unwrap();
    assert_eq!(event(&a), CmEvent::Established { id: a_id });
    assert_eq!(event(&b), CmEvent::Established { id: b_id });

    // A disconnects; B answers; both see DISCONNECTED, then time-wait ends.
    a.with_cm(|cm, now| cm.disconnect(now, a_id, &[])).unwrap();
    assert_eq!(
        event(&b),
        CmEvent::Disconnected {
            id: b_id,
            timed_out: false
        }
    );
    b.with_cm(|cm, now| cm.disconnect(now, b_id, &[])).unwrap();
    assert_eq!(
        event(&a),
        CmEvent::Disconnected {
            id: a_id,
            timed_out: false
        }
    );
    assert_eq!(event(&a), CmEvent::TimeWaitExit { id: a_id });
    assert_eq!(event(&b), CmEvent::TimeWaitExit { id: b_id });
    assert_eq!(a.with_cm(|cm, _| cm.connection_count()), 0);
    assert_eq!(b.with_cm(|cm, _| cm.connection_count()), 0);
    assert!(!a.cm_fd().wait_readable(Some(Duration::ZERO)).unwrap());

    // Every MAD went through QP1 and the device counters.
    let count = |d: &Device, name: &str| {
        d.counters()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| v)
    };
    // REQ, RTU, DREQ from A; REP, DREP from B.
    assert_eq!(count(&a, "mad_sent"), 3);
    assert_eq!(count(&b, "mad_sent"), 2);
    assert_eq!(count(&a, "mad_rcvd"), 2);
    assert_eq!(count(&b, "mad_rcvd"), 3);
}

#[test]
fn a_request_to_a_port_nobody_listens_on_is_rejected_not_timed_out() {
    let (a, b) = (start("127.0.15.5"), start("127.0.15.6"));
    let started = std::time::Instant::now();
    let a_id = a.cm_connect(addr(&b), connect_params(0x11, &[])).unwrap();
    match event(&a) {
        CmEvent::Rejected { id, reason, .. } => {
            assert_eq!(id, a_id);
            assert_eq!(reason, REJ_INVALID_SERVICE_ID);
        }
        other => panic!("expected a REJ, got {other:?}"),
    }
    // A REQ retry would take over half a second; the REJ comes back at once.
    assert!(started.elapsed() < WAIT);
    assert_eq!(b.cm_counters().0.rejected_no_listener, 1);
    assert!(
        b.cm_get_event(Some(Duration::ZERO)).is_none(),
        "B's application sees nothing"
    );
}

#[test]
fn a_consumer_reject_carries_its_private_data_to_the_requester() {
    let (a, b) = (start("127.0.15.7"), start("127.0.15.8"));
    b.with_cm(|cm, _| cm.listen(PortSpace::Tcp.service_id(7471)))
        .unwrap();
    let _ = a.cm_connect(addr(&b), connect_params(0x11, &[])).unwrap();
    let CmEvent::ConnectRequest { id, .. } = event(&b) else {
        panic!("B expected a connect request");
    };
    b.with_cm(|cm, now| cm.reject(now, id, b"go away")).unwrap();
    let CmEvent::Rejected {
        reason,
        private_data,
        ..
    } = event(&a)
    else {
        panic!("A expected a REJ");
    };
    assert_eq!(reason, REJ_CONSUMER_DEFINED);
    assert_eq!(&private_data[..7], b"go away");
}

/// The device's capture holds its CM traffic, and tshark dissects it as IB CM: the REQ with
/// our QPN, starting PSN and service ID, the REJ with its reason. tshark must be installed
/// (scripts/test-all.sh installs it); a missing tool fails the test.
#[test]
fn cm_traffic_is_captured_and_tshark_dissects_it_as_ib_cm() {
    let dir = std::env::temp_dir().join(format!("softroce-driver-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cm.pcap");
    // tshark dissects RoCEv2 on UDP port 4791: these devices use it, on addresses of
    // their own.
    let on_4791 = |ip: &str, pcap: Option<std::path::PathBuf>| {
        let mut cfg = DeviceConfig::new("cm", ip.parse().unwrap());
        cfg.faults = None;
        cfg.pcap = pcap;
        Device::start(cfg).unwrap()
    };
    let a = on_4791("127.0.15.1", Some(path.clone()));
    let b = on_4791("127.0.15.2", None);
    let _ = a.cm_connect(addr(&b), connect_params(0x11, &[])).unwrap();
    assert!(matches!(event(&a), CmEvent::Rejected { .. }));
    drop(a); // flushes the capture

    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.mad.mgmtclass",
        ])
        .args([
            "-e",
            "infiniband.cm.req.localqpn",
            "-e",
            "infiniband.cm.req.startpsn",
        ])
        .args([
            "-e",
            "infiniband.cm.req.serviceid",
            "-e",
            "infiniband.cm.rej.reason",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run tshark ({e}): run scripts/test-all.sh, which installs it")
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "REQ out, REJ in:\n{text}");
    let req: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(req[0], "0x000001", "{text}");
    assert_eq!(req[1], "0x07", "CM class: {text}");
    assert_eq!(req[2], "0x000011", "{text}");
    assert_eq!(req[3], "0x000123", "{text}");
    assert_eq!(req[4], "0x0000000001061d2f", "{text}");
    let rej: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(rej[5], "0x0008", "invalid service ID: {text}");
}
