//! `softroce soak`: the seeded simulator soak (mixed RC operations over a faulty fabric).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use softroce_emu::sim::LinkFaults;
use softroce_emu::sim::soak::{SoakConfig, timed};

use crate::limits::{self, MAX_ITERS, MAX_TIMEOUT_SECS, ranged};

/// Arguments of `softroce soak`.
#[derive(Debug, Args)]
pub(crate) struct SoakArgs {
    /// Messages to complete and verify, 1 to 10^9.
    #[arg(short = 'n', long, default_value_t = 100_000, value_parser = ranged::<u64>(1..=MAX_ITERS))]
    messages: u64,
    /// Seed: the same seed replays the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Probability a datagram is dropped.
    #[arg(long, default_value_t = 0.2, value_parser = limits::probability)]
    drop: f64,
    /// Probability a datagram is duplicated.
    #[arg(long, default_value_t = 0.05, value_parser = limits::probability)]
    dup: f64,
    /// Probability a datagram is delayed so that others overtake it.
    #[arg(long, default_value_t = 0.05, value_parser = limits::probability)]
    reorder: f64,
    /// Probability one bit of a datagram is flipped.
    #[arg(long, default_value_t = 0.01, value_parser = limits::probability)]
    corrupt: f64,
    /// The faults as one compact spec (`drop=P,dup=P,reorder=P,corrupt=P,delay=MS,seed=N`),
    /// overriding the single options.
    #[arg(long)]
    faults: Option<String>,
    /// Run between two processes over real UDP sockets on loopback (this process is the
    /// requester and starts the responder) instead of in the simulator.
    #[arg(long)]
    processes: bool,
    /// Two-process mode: the requester's and the responder's device addresses.
    #[arg(long, num_args = 2, default_values = ["127.0.0.141", "127.0.0.142"])]
    addresses: Vec<std::net::IpAddr>,
    /// Two-process mode: give up after this many seconds (1 to 86400).
    #[arg(long, default_value_t = 900, value_parser = ranged::<u64>(1..=MAX_TIMEOUT_SECS))]
    timeout: u64,
    /// Internal: run as the responder process of `--processes`.
    #[arg(long, hide = true)]
    responder: bool,
    /// Internal: the responder's address.
    #[arg(long, hide = true)]
    bind: Option<std::net::IpAddr>,
}

pub(crate) fn run(args: &SoakArgs) -> ExitCode {
    if args.responder || args.processes {
        return two_processes(args);
    }
    let mut cfg = SoakConfig {
        messages: args.messages,
        seed: args.seed,
        faults: LinkFaults {
            drop: args.drop,
            duplicate: args.dup,
            reorder: args.reorder,
            reorder_delay: Duration::from_micros(50),
            corrupt: args.corrupt,
        },
        ..SoakConfig::default()
    };
    if let Some(spec) = &args.faults {
        match spec.parse::<softroce_emu::faults::FaultSpec>() {
            Ok(f) if !f.events.is_empty() => {
                eprintln!(
                    "softroce soak: --faults {spec}: {} is a device event; the simulated soak's \
                     links take packet faults only (two processes, --processes, take both)",
                    f.events[0].event.name()
                );
                return ExitCode::from(2);
            }
            Ok(f) => {
                cfg.faults = f.link_faults();
                cfg.seed = f.seed;
            }
            Err(e) => {
                eprintln!("softroce soak: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let (result, wall) = timed(cfg);
    match result {
        Ok(r) => {
            println!(
                "soak ok: messages={} send={} write_imm={} read={} fetch_add={} virtual_time={:?} wall_time={:.2?}",
                r.messages, r.by_op[0], r.by_op[1], r.by_op[2], r.by_op[3], r.virtual_time, wall
            );
            println!("fabric: {}", r.fabric);
            println!("requester: {}", r.requester);
            println!("responder: {}", r.responder);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softroce soak: {e}");
            ExitCode::from(1)
        }
    }
}

/// The compact spec both processes use: `--faults`, or the single options.
fn spec_of(args: &SoakArgs) -> String {
    args.faults.clone().unwrap_or_else(|| {
        format!(
            "drop={},dup={},reorder={},corrupt={},seed={}",
            args.drop, args.dup, args.reorder, args.corrupt, args.seed
        )
    })
}

fn two_processes(args: &SoakArgs) -> ExitCode {
    let spec = spec_of(args);
    if let Err(e) = softroce_emu::faults::FaultPlan::parse(&spec) {
        eprintln!("softroce soak: {e}");
        return ExitCode::from(2);
    }
    let timeout = Duration::from_secs(args.timeout);
    if args.responder {
        let ip = args.bind.unwrap_or_else(|| args.addresses[1]);
        return match crate::soak_procs::responder(
            args.messages,
            args.seed,
            Some(&spec),
            ip,
            timeout,
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("softroce soak (responder): {e:#}");
                ExitCode::from(1)
            }
        };
    }
    let ips = (args.addresses[0], args.addresses[1]);
    match crate::soak_procs::run(args.messages, args.seed, Some(&spec), ips, timeout) {
        Ok(f) => {
            println!(
                "soak ok (two processes, real UDP): messages={} send={} write_imm={} read={} fetch_add={} wall_time={:.2?} ({:.0} msg/s) faults: {spec}",
                f.messages,
                f.by_op[0],
                f.by_op[1],
                f.by_op[2],
                f.by_op[3],
                f.elapsed,
                f.messages as f64 / f.elapsed.as_secs_f64().max(1e-9)
            );
            println!("requester: {}", f.requester);
            println!("responder: {}", f.responder);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softroce soak: {e:#}");
            ExitCode::from(1)
        }
    }
}
