//! Which backend is in use: known to errors and backends alike, so neither imports the
//! other for it.

use std::fmt;

/// Which implementation a backend is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// The in-process softroce emulator.
    Emulated,
    /// The system's libibverbs and whatever device it drives (a NIC, rdma_rxe, siw).
    Ibverbs,
    /// A device on a simulated fabric in virtual time (`sim::Fabric`).
    Simulated,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Emulated => "emulated",
            Self::Ibverbs => "ibverbs",
            Self::Simulated => "simulated",
        })
    }
}
