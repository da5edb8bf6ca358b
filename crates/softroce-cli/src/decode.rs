//! `softroce decode`: a tcpdump-style RoCEv2 decoder with ICRC verification. UD SENDs to
//! QP1 also show the CM MAD they carry (message type, comm IDs, QPNs, PSN, service ID,
//! private data length), through the wire crate's summary.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use softroce_wire::icrc;
use softroce_wire::pcap::{CaptureReader, FrameKind};
use softroce_wire::pretty::Summary;
use softroce_wire::{CmAttr, CmMadRepr, Mad, Opcode, Qpn, RocePacket};

/// Arguments of `softroce decode`.
#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// Print one `opcode NAME COUNT` line per opcode, then one `cm NAME COUNT` line per CM
    /// message type, seen before the summary.
    #[arg(long)]
    stats: bool,
    /// Only print the statistics and summary, not every packet.
    #[arg(long, short)]
    quiet: bool,
    /// Capture files: pcap or pcapng (Ethernet, Linux cooked or raw IP).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Debug, Default)]
struct Totals {
    packets: u64,
    roce: u64,
    icrc_ok: u64,
    icrc_bad: u64,
    malformed: u64,
    opcodes: BTreeMap<u8, u64>,
    cm: BTreeMap<CmAttr, u64>,
}

pub(crate) fn run(args: &DecodeArgs) -> ExitCode {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut totals = Totals::default();
    let mut unreadable = false;
    for path in &args.files {
        // A file that is not a capture, or is damaged part way (a capture cut short while
        // being written), is reported; what was read of it still counts, and the other
        // files are still decoded.
        if let Err(e) = decode_file(path, args, &mut totals, &mut out) {
            let _ = out.flush();
            eprintln!("softroce decode: {e}");
            unreadable = true;
        }
    }
    if args.stats {
        for (&op, &count) in &totals.opcodes {
            let _ = writeln!(out, "opcode {} {count}", Opcode(op));
        }
        for (&attr, &count) in &totals.cm {
            let _ = writeln!(out, "cm {attr} {count}");
        }
    }
    let _ = writeln!(
        out,
        "packets={} roce={} icrc_ok={} icrc_bad={} malformed={}",
        totals.packets, totals.roce, totals.icrc_ok, totals.icrc_bad, totals.malformed
    );
    let _ = out.flush();
    if unreadable {
        ExitCode::from(2)
    } else if totals.icrc_bad == 0 && totals.malformed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn decode_file(
    path: &PathBuf,
    args: &DecodeArgs,
    totals: &mut Totals,
    out: &mut impl Write,
) -> Result<(), softroce_wire::pcap::CaptureError> {
    let mut reader = CaptureReader::open(path)?;
    while let Some(frame) = reader.next_frame() {
        let frame = frame?;
        totals.packets += 1;
        let FrameKind::Roce(d) = reader.classify(&frame) else {
            continue;
        };
        totals.roce += 1;
        let ts = frame.timestamp;
        // SocketAddr brackets IPv6 addresses, so the port stays unambiguous.
        let prefix = format!(
            "{}.{:06} {} > {}",
            ts.as_secs(),
            ts.subsec_micros(),
            SocketAddr::new(d.src, d.src_port),
            SocketAddr::new(d.dst, d.dst_port)
        );
        let packet = match RocePacket::new_checked(d.payload) {
            Ok(p) => p,
            Err(e) => {
                totals.malformed += 1;
                if !args.quiet {
                    let _ = writeln!(out, "{prefix} malformed: {e}");
                }
                continue;
            }
        };
        *totals.opcodes.entry(packet.opcode().0).or_default() += 1;
        if packet.bth().dest_qpn() == Qpn::GSI && packet.deth().is_some() {
            if let Ok(cm) = Mad::new_checked(packet.payload()).and_then(|m| CmMadRepr::parse(&m)) {
                *totals.cm.entry(cm.message.attr()).or_default() += 1;
            }
        }
        let icrc_status = match icrc::verify_exact(d.ip_header, d.udp_header, d.payload) {
            Ok(_) => {
                totals.icrc_ok += 1;
                "icrc=ok".to_string()
            }
            Err(e) => {
                totals.icrc_bad += 1;
                format!("icrc=bad ({e})")
            }
        };
        if !args.quiet {
            let _ = writeln!(out, "{prefix} {} {icrc_status}", Summary(&packet));
        }
    }
    Ok(())
}
