//! Errors of the verbs API: what failed, with the device's reason and errno.

use softroce_emu::core::{PostError, VerbsError};

/// A failed verb.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device refused the verb; the message says which check failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// A post was refused at the work request with this index (earlier ones were posted).
    #[error(transparent)]
    Post(#[from] PostError),
    /// The device could not be started or an fd operation failed.
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
            Self::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
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
