//! Names of enum values (`ibv_wc_status_str` …) and static-rate conversions.

use std::ffi::{CStr, c_char, c_int};

use softroce_emu::core::{EventType, WcStatus};
use softroce_ibverbs_abi::*;

use crate::ffi::guard;

symver_directives!();

/// A static string export: its text, "unknown" should it panic.
fn guard_str(verb: &str, f: impl FnOnce() -> &'static CStr) -> *const c_char {
    guard(verb, c"unknown".as_ptr(), || f().as_ptr())
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_wc_status_str(status: u32) -> *const c_char {
    guard_str("ibv_wc_status_str", || wc_status_str(status))
}

fn wc_status_str(status: u32) -> &'static CStr {
    let Some(s) = WcStatus::from_raw(status) else {
        return c"unknown";
    };
    match s {
        WcStatus::Success => c"success",
        WcStatus::LocLenErr => c"local length error",
        WcStatus::LocQpOpErr => c"local QP operation error",
        WcStatus::LocEecOpErr => c"local EE context operation error",
        WcStatus::LocProtErr => c"local protection error",
        WcStatus::WrFlushErr => c"Work Request Flushed Error",
        WcStatus::MwBindErr => c"memory management operation error",
        WcStatus::BadRespErr => c"bad response error",
        WcStatus::LocAccessErr => c"local access error",
        WcStatus::RemInvReqErr => c"remote invalid request error",
        WcStatus::RemAccessErr => c"remote access error",
        WcStatus::RemOpErr => c"remote operation error",
        WcStatus::RetryExcErr => c"transport retry counter exceeded",
        WcStatus::RnrRetryExcErr => c"RNR retry counter exceeded",
        WcStatus::LocRddViolErr => c"local RDD violation error",
        WcStatus::RemInvRdReqErr => c"remote invalid RD request",
        WcStatus::RemAbortErr => c"aborted error",
        WcStatus::InvEecnErr => c"invalid EE context number",
        WcStatus::InvEecStateErr => c"invalid EE context state",
        WcStatus::FatalErr => c"fatal error",
        WcStatus::RespTimeoutErr => c"response timeout error",
        WcStatus::GeneralErr => c"general error",
        WcStatus::TmErr => c"TM error",
        WcStatus::TmRndvIncomplete => c"TM software rendezvous",
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_event_type_str(event: u32) -> *const c_char {
    guard_str("ibv_event_type_str", || event_type_str(event))
}

fn event_type_str(event: u32) -> &'static CStr {
    let Some(e) = EventType::from_raw(event) else {
        return c"unknown";
    };
    match e {
        EventType::CqErr => c"CQ error",
        EventType::QpFatal => c"local work queue catastrophic error",
        EventType::QpReqErr => c"invalid request local work queue error",
        EventType::QpAccessErr => c"local access violation work queue error",
        EventType::CommEst => c"communication established",
        EventType::SqDrained => c"send queue drained",
        EventType::PathMig => c"path migrated",
        EventType::PathMigErr => c"path migration request error",
        EventType::DeviceFatal => c"local catastrophic error",
        EventType::PortActive => c"port active",
        EventType::PortErr => c"port error",
        EventType::LidChange => c"LID change",
        EventType::PkeyChange => c"P_Key change",
        EventType::SmChange => c"SM change",
        EventType::SrqErr => c"SRQ catastrophic error",
        EventType::SrqLimitReached => c"SRQ limit reached",
        EventType::QpLastWqeReached => c"last WQE reached",
        EventType::ClientReregister => c"client reregistration",
        EventType::GidChange => c"GID table change",
        EventType::WqFatal => c"WQ fatal",
    }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    guard_str("ibv_node_type_str", || match node_type {
        IBV_NODE_CA => c"InfiniBand channel adapter",
        IBV_NODE_SWITCH => c"InfiniBand switch",
        IBV_NODE_ROUTER => c"InfiniBand router",
        IBV_NODE_RNIC => c"iWARP NIC",
        IBV_NODE_USNIC => c"usNIC",
        IBV_NODE_USNIC_UDP => c"usNIC UDP",
        IBV_NODE_UNSPECIFIED => c"unspecified",
        _ => c"unknown",
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_port_state_str(state: u32) -> *const c_char {
    guard_str("ibv_port_state_str", || match state {
        // rdma-core's words (ibv_devinfo prints its own PORT_* names).
        IBV_PORT_NOP => c"no state change (NOP)",
        IBV_PORT_DOWN => c"down",
        IBV_PORT_INIT => c"init",
        IBV_PORT_ARMED => c"armed",
        IBV_PORT_ACTIVE => c"active",
        IBV_PORT_ACTIVE_DEFER => c"active defer",
        _ => c"unknown",
    })
}

/// `enum ibv_rate` value, multiple of 2.5 Gb/s, Mb/s.
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    guard("ibv_rate_to_mult", -1, || {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    guard("mult_to_ibv_rate", 0, || {
        RATES
            .iter()
            .find(|r| r.1 == mult && mult > 0)
            .map_or(0, |r| r.0)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    guard("ibv_rate_to_mbps", -1, || {
        RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    guard("mbps_to_ibv_rate", 0, || {
        RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
    })
}
