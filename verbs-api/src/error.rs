//! Errors of the verbs API: what failed, with the device's reason and errno.

use softroce_emu::core::{PostError, VerbsError};

use crate::backend_kind::BackendKind;

/// A failed verb.
///
/// Every message is complete on its own (an [`Error::Io`] includes the OS error), so none
/// has a `source()`: reporters that print the chain (anyhow's `{:#}`) would say it twice.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The emulated device refused the verb; the message says which check failed.
    Verbs(VerbsError),
    /// A post was refused at the work request with this index (earlier ones were posted).
    Post(PostError),
    /// A libibverbs call failed (ibverbs backend): the errno it set.
    Ibverbs {
        /// The verb.
        verb: &'static str,
        /// What was asked of it.
        detail: String,
        /// The errno.
        errno: i32,
    },
    /// libibverbs refused a post at the work request with this index (ibverbs backend).
    IbverbsPost {
        /// The verb.
        verb: &'static str,
        /// Index of the first rejected work request (`bad_wr`).
        index: usize,
        /// The errno.
        errno: i32,
    },
    /// An argument the API itself refuses (before any device sees it).
    Invalid {
        /// What was given.
        what: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// The operation exists only on another backend.
    Unsupported {
        /// What was asked.
        what: &'static str,
        /// The backend in use.
        backend: BackendKind,
    },
    /// A verb waited without a timeout on a simulated fabric where nothing is left to happen
    /// (no datagram in flight, no timer, no scheduled action): it would hang forever.
    SimIdle {
        /// The verb that waited.
        verb: &'static str,
        /// Virtual time when the fabric went idle.
        at: std::time::Duration,
    },
    /// A connection manager call was refused or its wait ran out.
    Cm {
        /// The call.
        what: &'static str,
        /// Why.
        reason: String,
        /// The errno rdma_cm would report.
        errno: i32,
    },
    /// `connect` did not get a connection.
    ConnectFailed {
        /// The listener's address.
        to: std::net::SocketAddr,
        /// What happened.
        failure: crate::cm::CmFailure,
    },
    /// `accept` sent its REP but the connection was not established.
    AcceptFailed {
        /// The requester's address.
        from: std::net::SocketAddr,
        /// What happened.
        failure: crate::cm::CmFailure,
    },
    /// The device could not be started or opened, or an fd operation failed.
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let os = |errno: i32| std::io::Error::from_raw_os_error(errno);
        match self {
            Self::Verbs(e) => e.fmt(f),
            Self::Post(e) => e.fmt(f),
            Self::Ibverbs {
                verb,
                detail,
                errno,
            } => write!(f, "{verb}: {detail}: {}", os(*errno)),
            Self::IbverbsPost { verb, index, errno } => {
                write!(f, "{verb}: work request #{index} rejected: {}", os(*errno))
            }
            Self::Invalid { what, reason } => write!(f, "invalid {what}: {reason}"),
            Self::Unsupported { what, backend } => {
                write!(f, "{what} is not available on the {backend} backend")
            }
            Self::SimIdle { verb, at } => write!(
                f,
                "{verb}: would wait forever: nothing is left to happen on the simulated fabric at {at:?} of virtual time"
            ),
            Self::Cm { what, reason, .. } => write!(f, "{what}: {reason}"),
            Self::ConnectFailed { to, failure } => write!(f, "connect to {to}: {failure}"),
            Self::AcceptFailed { from, failure } => {
                write!(f, "accept from {from}: {failure}")
            }
            Self::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

/// No `source()`: every message already says its cause (the core's `PostError` includes its
/// `VerbsError` too).
impl std::error::Error for Error {}

impl From<VerbsError> for Error {
    fn from(e: VerbsError) -> Self {
        Self::Verbs(e)
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Self {
        Self::Post(e)
    }
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
            Self::Cm { errno, .. } => *errno,
            Self::ConnectFailed { failure, .. } | Self::AcceptFailed { failure, .. } => {
                failure.errno()
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_is_said_once() {
        let e = Error::io("starting device", std::io::Error::other("bad fault spec"));
        assert_eq!(e.to_string(), "starting device: bad fault spec");
        // A reporter walking the chain must not find the OS error a second time.
        assert!(std::error::Error::source(&e).is_none());
        let post = Error::from(PostError {
            index: 0,
            error: VerbsError::WouldBlock { verb: "post_send" },
        });
        assert!(std::error::Error::source(&post).is_none());
    }
}
