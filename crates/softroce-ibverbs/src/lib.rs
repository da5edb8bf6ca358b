//! A drop-in `libibverbs.so.1`: unmodified rdma-core programs (`ibv_devinfo`,
//! `ibv_rc_pingpong`, perftest's `ib_write_bw`, …) run on the emulated soft-RoCE device when
//! this library is found first (`LD_LIBRARY_PATH=<dir holding libibverbs.so.1>`, or
//! `softroce exec -- PROGRAM`).
//!
//! - Every symbol of rdma-core 44's export table is exported with its version node
//!   (`exports.txt`, bound by `build.rs`), because the Debian binaries are linked with
//!   BIND_NOW and also pull in libmlx5/libefa/librdmacm, which import private symbols.
//!   What the emulator cannot do returns the documented error (EOPNOTSUPP, or NULL with
//!   errno) instead of crashing.
//! - Devices come from `SOFTROCE_DEVICES` (`softroce0=127.0.0.1,softroce1=127.0.0.2:4792`),
//!   else from the file named by `SOFTROCE_CONFIG` (one `name=address[:port]` a line), else
//!   one device `softroce0` on 127.0.0.1. Opening one starts a
//!   [`softroce_emu::driver::Device`]: a UDP socket and an engine thread that makes progress
//!   while the application does not call in (passive RDMA WRITE/READ targets).
//! - The inline wrappers of `<infiniband/verbs.h>` call through `ibv_context.ops` and the
//!   `verbs_context` in front of it; both are filled here (`query_port`, `query_device_ex`,
//!   `create_qp_ex` with the `ibv_wr_*` send API, `create_cq_ex` with the `ibv_start_poll`
//!   API; the rest are NULL, which the header turns into EOPNOTSUPP).
//! - No panic crosses the C boundary: every `extern "C" fn` (exports and the entry points
//!   installed in C structs) is one call of `ffi::guard` (`catch_unwind`) or of a `guard_*`
//!   form of it; a unit test in `ffi` checks the source for it.
//! - Values cross between C and the emulator through `softroce_ibverbs_abi::convert`, the
//!   converter the libibverbs backend of `softroce-verbs` uses too.
//!
//! The modules are layers, each using only those above it in this list:
//! 1. `ffi`: the panic guard and failure reports at the C boundary;
//! 2. `config`, `devices`, `sysfs`: the configured devices, the device list and the
//!    sysfs files a kernel device would have; `strings` and `stubs`, exports that need
//!    nothing else;
//! 3. `context`: an open device's state. An `ibv_context` pointer is the tail of our
//!    `EmuContext`, so the state is found from the pointer alone; the context keeps the
//!    addresses of its CQs, QPs and SRQs by device handle for async events, without
//!    knowing their types;
//! 4. `objects`: PDs, MRs, channels, CQs, QPs, SRQs, AHs and the data path, one template
//!    for all; each object reaches its context through its C struct's `context` field;
//! 5. `qp_ex`, `cq_ex`: the `ibv_wr_*` and `ibv_start_poll` APIs on those QPs and CQs;
//! 6. `open`: `ibv_open_device`/`ibv_close_device`, which give a new context the entry
//!    points of layers 4 and 5;
//! 7. `rdmacm`: the RDMA connection manager that softroce's `librdmacm.so.1` forwards to,
//!    on the contexts and objects of the layers above;
//! 8. `fork`: the process-wide locks of the layers above, held across `fork()` so that a
//!    child never inherits one another thread held.
//!
//! # Example
//! The library is used from C, not from Rust: build it and put it first on the loader's
//! path, or let `softroce exec` (crate `softroce-cli`) do that, with a private
//! `/dev/infiniband` and sysfs view for libraries that look there:
//!
//! ```sh
//! cargo build --release -p softroce-ibverbs -p softroce-cli   # target/release/libibverbs.so
//! target/release/softroce exec --devices softroce0=127.0.0.1 -- ibv_devinfo -v
//! # by hand: a directory whose libibverbs.so.1 is this library
//! mkdir -p /tmp/sr && ln -sf "$PWD/target/release/libibverbs.so" /tmp/sr/libibverbs.so.1
//! LD_LIBRARY_PATH=/tmp/sr SOFTROCE_DEVICES=softroce0=127.0.0.1 ibv_rc_pingpong -d softroce0 -g 0
//! ```
//!
//! # Safety
//! Every export is an `unsafe extern "C" fn` whose contract is the libibverbs man page of
//! the verb (`ibv_post_send(3)`, …): pointers are those this library handed out (contexts,
//! PDs, CQs, QPs, …) and not yet destroyed, or point to valid structs of the C layout
//! `softroce-ibverbs-abi` mirrors; memory registered with `ibv_reg_mr` stays allocated
//! until `ibv_dereg_mr` returns. Within that contract no call is undefined behaviour: bad
//! handles and arguments the library can detect fail with the errno the man page names.

/// Binds every export to its version node (see build.rs): `.symver` directives apply only
/// to symbols defined in the same object file, so every module that defines exports
/// invokes this (rustc keeps a module's items in one codegen unit; directives for symbols
/// an object does not define are dropped). Test builds are executables without the
/// version script, where the nodes do not exist.
macro_rules! symver_directives {
    () => {
        #[cfg(not(test))]
        core::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/symver.s")));
    };
}

mod config;
mod context;
mod cq_ex;
mod devices;
mod ffi;
mod fork;
mod marshall;
mod objects;
mod open;
mod qp_ex;
mod rdmacm;
mod section;
mod strings;
mod stubs;
mod sysfs;
