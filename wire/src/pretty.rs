//! A tcpdump-style one-line summary of a RoCE packet.
//!
//! ```
//! use softroce_wire::{BthRepr, ExtRepr, Opcode, Psn, Qpn, RocePacket, RoceRepr};
//! use softroce_wire::pretty::Summary;
//!
//! let mut bth = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::from_wire(0x11), Psn::new(42));
//! bth.ack_req = true;
//! let repr = RoceRepr::new(bth, ExtRepr::default(), 3);
//! let mut buf = vec![0; repr.buffer_len()];
//! repr.emit_with_payload(&[1, 2, 3], &mut buf).unwrap();
//! let p = RocePacket::new_checked(&buf[..]).unwrap();
//! assert_eq!(Summary(&p).to_string(), "RC_SEND_ONLY dqpn=0x11 psn=42 ackreq payload=3 pad=1");
//! ```
//!
//! A UD SEND to QP1 also shows the management datagram it carries: `cm{REQ lcid=… sid=…
//! qpn=… psn=… pd=92 …}` for Communication Management MADs (see [`crate::cm`]),
//! `mad{class=… attr=…}` for other classes, `mad=malformed(…)` when it does not parse.

use core::fmt;

use crate::cm::CmMadRepr;
use crate::error::WireError;
use crate::ext::Syndrome;
use crate::mad::{Mad, MadRepr};
use crate::packet::RocePacket;
use crate::psn::Qpn;

/// Formats a checked packet on one line.
#[derive(Debug, Clone, Copy)]
pub struct Summary<'a, T: AsRef<[u8]>>(pub &'a RocePacket<T>);

impl<T: AsRef<[u8]>> fmt::Display for Summary<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        let bth = p.bth();
        write!(
            f,
            "{} dqpn={} psn={}",
            p.opcode(),
            bth.dest_qpn(),
            bth.psn()
        )?;
        if bth.ack_req() {
            f.write_str(" ackreq")?;
        }
        if bth.solicited() {
            f.write_str(" se")?;
        }
        if bth.mig_req() {
            f.write_str(" m")?;
        }
        if bth.fecn() {
            f.write_str(" fecn")?;
        }
        if bth.becn() {
            f.write_str(" becn")?;
        }
        if bth.pkey() != 0xFFFF {
            write!(f, " pkey={:#06x}", bth.pkey())?;
        }
        if let Some(x) = p.xrceth() {
            write!(f, " xrceth{{srqn={:#x}}}", x.srqn())?;
        }
        if let Some(d) = p.deth() {
            write!(f, " deth{{qkey={:#x} srcqp={}}}", d.qkey(), d.src_qpn())?;
        }
        if let Some(x) = p.feth() {
            write!(f, " feth{{{:#x}}}", x.raw())?;
        }
        if let Some(r) = p.reth() {
            write!(
                f,
                " reth{{va={:#x} rkey={:#x} len={}}}",
                r.va(),
                r.rkey(),
                r.dma_len()
            )?;
        }
        if let Some(a) = p.atomic_eth() {
            write!(
                f,
                " atomiceth{{va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}}}",
                a.va(),
                a.rkey(),
                a.swap_add(),
                a.compare()
            )?;
        }
        if let Some(a) = p.aeth() {
            write!(
                f,
                " aeth{{{} msn={}}}",
                Syndrome::from_byte(a.syndrome_raw()),
                a.msn_raw()
            )?;
        }
        if let Some(a) = p.atomic_ack_eth() {
            write!(f, " atomicacketh{{orig={:#x}}}", a.orig())?;
        }
        if let Some(i) = p.imm() {
            write!(f, " imm={:#010x}", i.imm())?;
        }
        if let Some(i) = p.ieth() {
            write!(f, " ieth{{rkey={:#x}}}", i.rkey())?;
        }
        let len = p.payload_len();
        if len > 0 || p.opcode().info().is_some_and(|i| i.has_payload) {
            write!(f, " payload={len}")?;
        }
        if p.pad_len() > 0 {
            write!(f, " pad={}", p.pad_len())?;
        }
        if bth.dest_qpn() == Qpn::GSI && p.deth().is_some() {
            write!(f, " {}", GsiSummary(p.payload()))?;
        }
        Ok(())
    }
}

/// Formats the MAD in the payload of a UD SEND to QP1 (the general services interface).
#[derive(Debug, Clone, Copy)]
pub struct GsiSummary<'a>(pub &'a [u8]);

impl fmt::Display for GsiSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mad = match Mad::new_checked(self.0) {
            Ok(m) => m,
            Err(e) => return write!(f, "mad=malformed({e})"),
        };
        match CmMadRepr::parse(&mad) {
            Ok(cm) => write!(f, "cm{{{}}}", cm.message),
            // Another management class on QP1 (SA, performance, …): name it and move on.
            Err(WireError::NotCmMad { .. }) => match MadRepr::parse(&mad) {
                Ok(h) => write!(
                    f,
                    "mad{{class={:#04x} version={} method={:#04x} attr={:#06x}}}",
                    h.mgmt_class, h.class_version, h.method, h.attr_id
                ),
                Err(e) => write!(f, "mad=malformed({e})"),
            },
            Err(e) => write!(f, "mad=malformed({e})"),
        }
    }
}
