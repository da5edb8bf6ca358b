//! Errors of the verbs, each with the errno libibverbs would return and a reason that says
//! which check failed.

use super::qp_state::TransitionError;
use super::types::QpState;

/// A refused verb.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// A handle that does not name a live object (destroyed, or from another device).
    #[error("{verb}: {kind} handle is stale or unknown")]
    StaleHandle {
        /// The verb.
        verb: &'static str,
        /// The object kind.
        kind: &'static str,
    },
    /// An attribute out of range or inconsistent (EINVAL).
    #[error("{verb}: {reason}")]
    Invalid {
        /// The verb.
        verb: &'static str,
        /// Which check failed.
        reason: String,
    },
    /// modify_qp refused by the state table (EINVAL).
    #[error("modify_qp on QP {qpn:#x}: {source}")]
    Transition {
        /// The QP number.
        qpn: u32,
        /// What the table says.
        #[source]
        source: TransitionError,
    },
    /// The object is in use (EBUSY).
    #[error("{verb}: busy: {reason}")]
    Busy {
        /// The verb.
        verb: &'static str,
        /// What still uses it.
        reason: String,
    },
    /// Events about the object were retrieved and not acknowledged (EBUSY). libibverbs'
    /// destroy verbs wait for the acknowledgements (ibv_get_cq_event(3),
    /// ibv_get_async_event(3)); callers that wait tell this apart from [`Self::Busy`].
    #[error("{verb}: busy: {reason}")]
    Unacknowledged {
        /// The verb.
        verb: &'static str,
        /// Which events.
        reason: String,
    },
    /// A capacity would be exceeded (ENOMEM).
    #[error("{verb}: out of resources: {reason}")]
    NoResources {
        /// The verb.
        verb: &'static str,
        /// Which limit.
        reason: String,
    },
    /// The operation is not allowed in the QP's current state (EINVAL).
    #[error("{verb} on QP {qpn:#x}: not allowed in state {state}")]
    BadQpState {
        /// The verb.
        verb: &'static str,
        /// The QP number.
        qpn: u32,
        /// The QP's state.
        state: QpState,
    },
    /// Nothing to return right now (EAGAIN): e.g. no event pending on a non-blocking read.
    #[error("{verb}: nothing pending")]
    WouldBlock {
        /// The verb.
        verb: &'static str,
    },
    /// The CQ overran and is in error (EIO).
    #[error("poll_cq: CQ is in error after an overrun ({lost} completions lost)")]
    CqInError {
        /// Completions dropped since the overrun.
        lost: u64,
    },
    /// Memory the verb was given is not mapped, or not with the access it asks for (EFAULT),
    /// as a real HCA finds when it pins the pages.
    #[error("{verb}: bad address: {reason}")]
    BadAddress {
        /// The verb.
        verb: &'static str,
        /// Which pages and why.
        reason: String,
    },
    /// The caller may not do this to an object it can name (EPERM).
    #[error("{verb}: not permitted: {reason}")]
    NotPermitted {
        /// The verb.
        verb: &'static str,
        /// Why.
        reason: String,
    },
    /// A blocking wait ended by a signal whose handler was installed without SA_RESTART
    /// (EINTR), as the kernel's read of an event file ends.
    #[error("{verb}: interrupted by a signal")]
    Interrupted {
        /// The verb.
        verb: &'static str,
    },
    /// A feature the emulator does not implement (EOPNOTSUPP).
    #[error("{verb}: not supported: {what}")]
    Unsupported {
        /// The verb.
        verb: &'static str,
        /// What is missing.
        what: String,
    },
}

/// The Linux errno values verbs report. Written out because the core links no C library;
/// the driver's tests check them against `libc`.
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// Interrupted system call.
    pub const EINTR: i32 = 4;
    /// I/O error: the CQ is in error.
    pub const EIO: i32 = 5;
    /// Bad address.
    pub const EFAULT: i32 = 14;
    /// Try again.
    pub const EAGAIN: i32 = 11;
    /// Out of memory or resources.
    pub const ENOMEM: i32 = 12;
    /// Resource busy.
    pub const EBUSY: i32 = 16;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
}

impl VerbsError {
    /// The errno libibverbs reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Self::StaleHandle { .. }
            | Self::Invalid { .. }
            | Self::Transition { .. }
            | Self::BadQpState { .. } => errno::EINVAL,
            Self::Busy { .. } | Self::Unacknowledged { .. } => errno::EBUSY,
            Self::NoResources { .. } => errno::ENOMEM,
            Self::WouldBlock { .. } => errno::EAGAIN,
            Self::CqInError { .. } => errno::EIO,
            Self::BadAddress { .. } => errno::EFAULT,
            Self::NotPermitted { .. } => errno::EPERM,
            Self::Unsupported { .. } => errno::EOPNOTSUPP,
            Self::Interrupted { .. } => errno::EINTR,
        }
    }

    pub(crate) fn invalid(verb: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            verb,
            reason: reason.into(),
        }
    }

    pub(crate) fn busy(verb: &'static str, reason: impl Into<String>) -> Self {
        Self::Busy {
            verb,
            reason: reason.into(),
        }
    }

    pub(crate) fn unacknowledged(verb: &'static str, reason: impl Into<String>) -> Self {
        Self::Unacknowledged {
            verb,
            reason: reason.into(),
        }
    }

    pub(crate) fn no_resources(verb: &'static str, reason: impl Into<String>) -> Self {
        Self::NoResources {
            verb,
            reason: reason.into(),
        }
    }
}

/// A refused post: the index of the first work request that failed, and why. Requests before
/// it were posted; it and those after were not (the `bad_wr` contract of ibv_post_send(3)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request #{index} rejected: {error}")]
pub struct PostError {
    /// Index of the first rejected work request.
    pub index: usize,
    /// Why it was rejected.
    #[source]
    pub error: VerbsError,
}

/// Result of a verb.
pub type VerbsResult<T> = Result<T, VerbsError>;
