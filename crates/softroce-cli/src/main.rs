//! The `softroce` command: a demo of every verb on two emulated devices, rdma-core's
//! pingpong protocol, every operation × size class between two processes (`ops`, on the
//! emulator or real libibverbs devices), perftest-like measurements next to raw UDP
//! (`perf`), error paths checked against the man pages (`inject`), `ibv_devinfo` for an
//! emulated device, a RoCEv2 capture decoder, the soak, and `exec`, which runs an
//! unmodified rdma-core program on the drop-in `libibverbs.so.1` (crate `softroce-ibverbs`).
//!
//! ```sh
//! cargo install --path crates/softroce-cli    # installs softroce and, beside it, the drop-in
//! softroce demo
//! softroce exec --devices softroce0=127.0.0.1 -- ibv_devices
//! softroce decode --stats testdata/captures/rc_pingpong.pcap
//! softroce --help
//! ```

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod completion;
mod decode;
mod demo;
mod devinfo;
mod exec;
mod inject;
mod limits;
mod ops;
mod perf;
mod pingpong;
mod rdmacm;
mod sidechannel;
mod soak;
mod soak_procs;

/// softroce: a userspace soft-RoCE device.
#[derive(Debug, Parser)]
#[command(name = "softroce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode RoCEv2 packets in pcap or pcapng files, verifying every ICRC.
    ///
    /// Prints one line per RoCE packet, then `packets=N roce=N icrc_ok=N icrc_bad=N
    /// malformed=N`. Exit status 0 when nothing is bad or malformed, 1 otherwise, 2 when a
    /// file cannot be read (or is damaged part way; what was read still counts).
    Decode(decode::DecodeArgs),
    /// Start two emulated devices on loopback and walk through RC SEND, WRITE with
    /// immediate, READ, atomics, UD with its GRH area, an SRQ, a non-blocking completion
    /// channel and an induced CQ overrun, printing counters.
    Demo(demo::DemoArgs),
    /// Show an emulated device's attributes like `ibv_devinfo -v`.
    Devinfo(devinfo::DevinfoArgs),
    /// Run an unmodified libibverbs program (ibv_devinfo, ibv_rc_pingpong, ib_write_bw …) on
    /// the emulator: `softroce exec [--devices softroce0=127.0.0.1] -- PROGRAM ARGS…`.
    Exec(exec::ExecArgs),
    /// rdma-core's ibv_{rc,uc,ud}_pingpong on an emulated device, with the same TCP side
    /// channel, so it pairs with the real tools too.
    Pingpong(pingpong::PingpongArgs),
    /// Drive one error path (CQ overrun, QP errors, port down/up, device fatal, RNR, retry
    /// exhaustion, remote access) between two emulated devices and print every completion
    /// and async event next to what the verbs promise; exit 1 on any difference.
    Inject(inject::InjectArgs),
    /// Every RC/UC/UD/SRQ operation at sizes 0, 1, MTU, MTU+1, 64 KiB and 1 MiB between two
    /// processes, verified byte for byte on both sides; the client is the requester. Runs on
    /// the emulator or (`--backend ibverbs`) on real libibverbs devices such as rdma_rxe.
    Ops(ops::OpsArgs),
    /// Bandwidth and latency between two emulated devices on loopback, measured next to raw
    /// UDP in the same run and reported as ratios.
    Perf(perf::PerfArgs),
    /// rdma-core's `rdma_server` on an emulated device: listen on an rdma_cm port (7471),
    /// accept one connection through the CM, receive 16 bytes, answer with 16, disconnect.
    /// Pairs with the real `rdma_client` on rdma_rxe.
    RdmaServer(rdmacm::ServerArgs),
    /// rdma-core's `rdma_client` on an emulated device: connect through the CM to
    /// `-s SERVER` port 7471, send 16 bytes, receive 16, disconnect. Pairs with the real
    /// `rdma_server`.
    RdmaClient(rdmacm::ClientArgs),
    /// Run the seeded soak: mixed RC operations (SEND, WRITE with immediate, READ,
    /// FETCH_ADD) between two devices over a faulty network, every message verified exactly
    /// once and in order; in the deterministic simulator, or with `--processes` between
    /// two processes over real UDP sockets.
    Soak(soak::SoakArgs),
}

fn main() -> ExitCode {
    // Behave like C tools when the reader goes away (`softroce decode x.pcap | head`):
    // end quietly on SIGPIPE instead of panicking on a failed print.
    // SAFETY: setting a signal disposition to its default before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // `RUST_LOG` shows what the devices log (drops, send failures) on stderr; warnings
    // without it. A malformed filter is reported rather than silently ignored.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|e| {
        if std::env::var_os("RUST_LOG").is_some() {
            eprintln!("softroce: RUST_LOG ignored: {e}");
        }
        tracing_subscriber::EnvFilter::new("warn")
    });
    // Colours only for a terminal: logs piped to a file or a CI log stay plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
    let cli = Cli::parse();
    // Limits that tie arguments together: usage errors like clap's own (exit status 2).
    let checked = match &cli.command {
        Command::Pingpong(args) => args.check(),
        Command::Perf(args) => args.check(),
        _ => Ok(()),
    };
    if let Err(msg) = checked {
        Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, msg)
            .exit();
    }
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Devinfo(args) => devinfo::run(&args),
        Command::Exec(args) => exec::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Inject(args) => inject::run(&args),
        Command::Ops(args) => ops::run(&args),
        Command::Perf(args) => perf::run(&args),
        Command::RdmaServer(args) => rdmacm::server(&args),
        Command::RdmaClient(args) => rdmacm::client(&args),
        Command::Soak(args) => soak::run(&args),
    }
}
