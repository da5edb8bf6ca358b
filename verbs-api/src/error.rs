//! Errors of the verbs API: what failed, with the device's reason and errno.

use softroce_emu::core::{PostError, VerbsError};

use crate::backend_kind::BackendKind;

/// A failed verb.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The emulated device refused the verb; the message says which check failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// A post was refused at the work request with this index (earlier ones were posted).
    #[error(transparent)]
    Post(#[from] PostError),
    /// A libibverbs call failed (ibverbs backend): the errno it set.
    #[error("{verb}: {detail}: {}", std::io::Error::from_raw_os_error(*errno))]
    Ibverbs {
        /// The verb.
        verb: &'static str,
        /// What was asked of it.
        detail: String,
        /// The errno.
        errno: i32,
    },
    /// libibverbs refused a post at the work request with this index (ibverbs backend).
    #[error("{verb}: work request #{index} rejected: {}", std::io::Error::from_raw_os_error(*errno))]
    IbverbsPost {
        /// The verb.
        verb: &'static str,
        /// Index of the first rejected work request (`bad_wr`).
        index: usize,
        /// The errno.
        errno: i32,
    },
    /// An argument the API itself refuses (before any device sees it).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was given.
        what: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// The operation exists only on another backend.
    #[error("{what} is not available on the {backend} backend")]
    Unsupported {
        /// What was asked.
        what: &'static str,
        /// The backend in use.
        backend: BackendKind,
    },
    /// A verb waited without a timeout on a simulated fabric where nothing is left to happen
    /// (no datagram in flight, no timer, no scheduled action): it would hang forever.
    #[error(
        "{verb}: would wait forever: nothing is left to happen on the simulated fabric at {at:?} of virtual time"
    )]
    SimIdle {
        /// The verb that waited.
        verb: &'static str,
        /// Virtual time when the fabric went idle.
        at: std::time::Duration,
    },
    /// The device could not be started or opened, or an fd operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The errno libibverbs would report.
    pub fn errno(&self) -> i32 {
        match self {
            Self::Verbs(e) => e.errno(),
            Self::Post(p) => p.error.errno(),
            Self::Ibverbs { errno, .. } | Self::IbverbsPost { errno, .. } => *errno,
            Self::Unsupported { .. } => libc::EOPNOTSUPP,
            Self::Invalid { .. } => libc::EINVAL,
            Self::SimIdle { .. } => libc::EDEADLK,
            Self::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// For a refused post, the index of the first rejected work request (`bad_wr`).
    pub fn bad_wr(&self) -> Option<usize> {
        match self {
            Self::Post(p) => Some(p.index),
            Self::IbverbsPost { index, .. } => Some(*index),
            _ => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result of the verbs API.
pub type Result<T> = std::result::Result<T, Error>;
