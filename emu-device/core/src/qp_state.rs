//! The one QP state machine: which transitions IBTA allows for each QP type, and which
//! attributes each transition requires and permits (the kernel's `qp_state_table`, for RC,
//! UC, UD and the XRC initiator and target). The core enforces it in `modify_qp`; the verbs API uses it to explain a
//! failed modify in terms of the offending `IBV_QP_*` bits.

use core::fmt;

use super::types::{QpAttrMask as M, QpState, QpType};

/// Required and optional attribute bits of one transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionRule {
    /// Bits that must be in the mask (besides `IBV_QP_STATE`).
    pub required: M,
    /// Bits that may be in the mask.
    pub optional: M,
}

const fn rule(required: M, optional: M) -> Option<TransitionRule> {
    Some(TransitionRule { required, optional })
}

const fn bits(list: &[M]) -> M {
    let mut acc = 0;
    let mut i = 0;
    while i < list.len() {
        acc |= list[i].0;
        i += 1;
    }
    M(acc)
}

const NONE: M = M::EMPTY;

/// The rule for `cur → next` on a QP of `qp_type`, or `None` if IBTA forbids the transition.
pub const fn transition_rule(
    qp_type: QpType,
    cur: QpState,
    next: QpState,
) -> Option<TransitionRule> {
    use QpState::*;
    use QpType::*;
    match (cur, next) {
        // A QP never brought up has nothing to fail: the kernel's table (so rxe and mlx5)
        // has no RESET → ERR.
        (Reset, Err) => None,
        // Any other state may go to RESET or ERR (or stay there) with no attributes.
        (_, Reset) | (_, Err) => rule(NONE, NONE),
        (Reset, Init) => match qp_type {
            Ud => rule(bits(&[M::PKEY_INDEX, M::PORT, M::QKEY]), NONE),
            Uc | Rc | XrcSend | XrcRecv => {
                rule(bits(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]), NONE)
            }
        },
        (Init, Init) => match qp_type {
            Ud => rule(NONE, bits(&[M::PKEY_INDEX, M::PORT, M::QKEY])),
            Uc | Rc | XrcSend | XrcRecv => {
                rule(NONE, bits(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]))
            }
        },
        (Init, Rtr) => match qp_type {
            Ud => rule(NONE, bits(&[M::PKEY_INDEX, M::QKEY])),
            // The initiator receives no requests: no responder resources, no RNR timer.
            Uc | XrcSend => rule(
                bits(&[M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN]),
                bits(&[M::ALT_PATH, M::ACCESS_FLAGS, M::PKEY_INDEX]),
            ),
            Rc | XrcRecv => rule(
                bits(&[
                    M::AV,
                    M::PATH_MTU,
                    M::DEST_QPN,
                    M::RQ_PSN,
                    M::MAX_DEST_RD_ATOMIC,
                    M::MIN_RNR_TIMER,
                ]),
                bits(&[M::ALT_PATH, M::ACCESS_FLAGS, M::PKEY_INDEX]),
            ),
        },
        (Rtr, Rts) => match qp_type {
            Ud => rule(M::SQ_PSN, bits(&[M::CUR_STATE, M::QKEY])),
            Uc => rule(
                M::SQ_PSN,
                bits(&[
                    M::CUR_STATE,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PATH_MIG_STATE,
                ]),
            ),
            Rc => rule(
                bits(&[
                    M::TIMEOUT,
                    M::RETRY_CNT,
                    M::RNR_RETRY,
                    M::SQ_PSN,
                    M::MAX_QP_RD_ATOMIC,
                ]),
                bits(&[
                    M::CUR_STATE,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::MIN_RNR_TIMER,
                    M::PATH_MIG_STATE,
                ]),
            ),
            XrcSend => rule(
                bits(&[
                    M::TIMEOUT,
                    M::RETRY_CNT,
                    M::RNR_RETRY,
                    M::SQ_PSN,
                    M::MAX_QP_RD_ATOMIC,
                ]),
                bits(&[
                    M::CUR_STATE,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PATH_MIG_STATE,
                ]),
            ),
            // The target sends only responses: no retries of its own.
            XrcRecv => rule(
                bits(&[M::TIMEOUT, M::SQ_PSN]),
                bits(&[
                    M::CUR_STATE,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::MIN_RNR_TIMER,
                    M::PATH_MIG_STATE,
                ]),
            ),
        },
        (Rts, Rts) | (Sqd, Rts) => match qp_type {
            Ud => rule(NONE, bits(&[M::CUR_STATE, M::QKEY])),
            Uc | XrcSend => rule(
                NONE,
                bits(&[
                    M::CUR_STATE,
                    M::ACCESS_FLAGS,
                    M::ALT_PATH,
                    M::PATH_MIG_STATE,
                ]),
            ),
            Rc | XrcRecv => rule(
                NONE,
                bits(&[
                    M::CUR_STATE,
                    M::ACCESS_FLAGS,
                    M::ALT_PATH,
                    M::PATH_MIG_STATE,
                    M::MIN_RNR_TIMER,
                ]),
            ),
        },
        (Rts, Sqd) => rule(NONE, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => match qp_type {
            Ud => rule(NONE, bits(&[M::PKEY_INDEX, M::QKEY])),
            Uc => rule(
                NONE,
                bits(&[
                    M::AV,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PKEY_INDEX,
                    M::PATH_MIG_STATE,
                ]),
            ),
            Rc => rule(
                NONE,
                bits(&[
                    M::PORT,
                    M::AV,
                    M::TIMEOUT,
                    M::RETRY_CNT,
                    M::RNR_RETRY,
                    M::MAX_QP_RD_ATOMIC,
                    M::MAX_DEST_RD_ATOMIC,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PKEY_INDEX,
                    M::MIN_RNR_TIMER,
                    M::PATH_MIG_STATE,
                ]),
            ),
            XrcSend => rule(
                NONE,
                bits(&[
                    M::PORT,
                    M::AV,
                    M::TIMEOUT,
                    M::RETRY_CNT,
                    M::RNR_RETRY,
                    M::MAX_QP_RD_ATOMIC,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PKEY_INDEX,
                    M::PATH_MIG_STATE,
                ]),
            ),
            XrcRecv => rule(
                NONE,
                bits(&[
                    M::PORT,
                    M::AV,
                    M::TIMEOUT,
                    M::MAX_DEST_RD_ATOMIC,
                    M::ALT_PATH,
                    M::ACCESS_FLAGS,
                    M::PKEY_INDEX,
                    M::MIN_RNR_TIMER,
                    M::PATH_MIG_STATE,
                ]),
            ),
        },
        // SQE exists for UD and UC only: an RC send error moves the QP to ERR.
        (Sqe, Rts) => match qp_type {
            Ud => rule(NONE, bits(&[M::CUR_STATE, M::QKEY])),
            Uc => rule(NONE, bits(&[M::CUR_STATE, M::ACCESS_FLAGS])),
            Rc | XrcSend | XrcRecv => None,
        },
        _ => None,
    }
}

/// The mask a `cur → next` modify needs at least: `IBV_QP_STATE` plus the required
/// attributes. `None` if the transition is not allowed.
pub const fn required_mask(qp_type: QpType, cur: QpState, next: QpState) -> Option<M> {
    match transition_rule(qp_type, cur, next) {
        Some(r) => Some(M(r.required.0 | M::STATE.0)),
        None => None,
    }
}

/// Why a modify_qp attribute mask was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitionError {
    /// IBTA does not allow this transition for this QP type.
    InvalidTransition {
        /// QP type.
        qp_type: QpType,
        /// Current state.
        cur: QpState,
        /// Requested state.
        next: QpState,
    },
    /// Required attributes are missing from the mask.
    MissingAttributes {
        /// Current state.
        cur: QpState,
        /// Requested state.
        next: QpState,
        /// The missing bits.
        missing: M,
    },
    /// The mask has bits this transition does not accept.
    UnexpectedAttributes {
        /// Current state.
        cur: QpState,
        /// Requested state.
        next: QpState,
        /// The bits not allowed.
        unexpected: M,
    },
    /// `IBV_QP_CUR_STATE` named a state the QP is not in.
    CurrentStateMismatch {
        /// The state the caller claimed.
        claimed: QpState,
        /// The real state.
        actual: QpState,
    },
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::InvalidTransition { qp_type, cur, next } => {
                write!(f, "{cur} -> {next} is not a valid transition for {qp_type}")
            }
            Self::MissingAttributes { cur, next, missing } => {
                write!(
                    f,
                    "{cur} -> {next} requires {missing} in the attribute mask"
                )
            }
            Self::UnexpectedAttributes {
                cur,
                next,
                unexpected,
            } => write!(f, "{cur} -> {next} does not accept {unexpected}"),
            Self::CurrentStateMismatch { claimed, actual } => write!(
                f,
                "IBV_QP_CUR_STATE says {claimed} but the QP is in {actual}"
            ),
        }
    }
}

impl std::error::Error for TransitionError {}

/// The mask `ibv_modify_qp` hands on for a QP of `qp_type`: the kernel's uverbs layer
/// (`modify_qp_mask`) drops the attributes an XRC QP ignores before the table is checked,
/// the responder's on an initiator, the requester's on a target (perftest's `-c XRC` sets
/// them all). The table itself ([`check_transition`]) stays strict, as the kernel's.
pub const fn without_ignored_xrc_attributes(qp_type: QpType, mask: M) -> M {
    let ignored = match qp_type {
        QpType::XrcSend => M::MAX_DEST_RD_ATOMIC.0 | M::MIN_RNR_TIMER.0,
        QpType::XrcRecv => M::MAX_QP_RD_ATOMIC.0 | M::RETRY_CNT.0 | M::RNR_RETRY.0,
        _ => 0,
    };
    M(mask.0 & !ignored)
}

/// Check a modify_qp mask: the transition implied by `IBV_QP_STATE` (or staying in `cur`
/// without it) must be allowed, and the mask must hold every required bit and only
/// required or optional ones.
pub fn check_transition(
    qp_type: QpType,
    cur: QpState,
    next: QpState,
    mask: M,
) -> Result<(), TransitionError> {
    let Some(r) = transition_rule(qp_type, cur, next) else {
        return Err(TransitionError::InvalidTransition { qp_type, cur, next });
    };
    let given = mask.difference(M::STATE);
    let missing = r.required.difference(given);
    if !missing.is_empty() {
        return Err(TransitionError::MissingAttributes { cur, next, missing });
    }
    let unexpected = given.difference(r.required.union(r.optional));
    if !unexpected.is_empty() {
        return Err(TransitionError::UnexpectedAttributes {
            cur,
            next,
            unexpected,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_init_to_rtr_names_every_missing_bit() {
        let err = check_transition(QpType::Rc, QpState::Init, QpState::Rtr, M::STATE).unwrap_err();
        assert_eq!(
            err.to_string(),
            "IBV_QPS_INIT -> IBV_QPS_RTR requires IBV_QP_AV|IBV_QP_PATH_MTU|IBV_QP_RQ_PSN|IBV_QP_MIN_RNR_TIMER|IBV_QP_MAX_DEST_RD_ATOMIC|IBV_QP_DEST_QPN in the attribute mask"
        );
    }

    #[test]
    fn ud_rejects_rc_only_attributes() {
        let mask = M::STATE | M::SQ_PSN | M::TIMEOUT;
        assert_eq!(
            check_transition(QpType::Ud, QpState::Rtr, QpState::Rts, mask),
            Err(TransitionError::UnexpectedAttributes {
                cur: QpState::Rtr,
                next: QpState::Rts,
                unexpected: M::TIMEOUT
            })
        );
    }

    /// The kernel's table: the XRC initiator's RTR needs no responder attributes and its
    /// RTS the requester's; the target's RTS needs only the timeout and SQ PSN.
    #[test]
    fn xrc_initiator_and_target_follow_the_kernel_table() {
        let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        let responder = M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        assert!(check_transition(QpType::XrcSend, QpState::Init, QpState::Rtr, rtr).is_ok());
        assert_eq!(
            check_transition(
                QpType::XrcSend,
                QpState::Init,
                QpState::Rtr,
                rtr | responder
            ),
            Err(TransitionError::UnexpectedAttributes {
                cur: QpState::Init,
                next: QpState::Rtr,
                unexpected: responder
            })
        );
        assert!(
            check_transition(
                QpType::XrcRecv,
                QpState::Init,
                QpState::Rtr,
                rtr | responder
            )
            .is_ok()
        );
        let rts = M::STATE | M::TIMEOUT | M::SQ_PSN;
        assert!(check_transition(QpType::XrcRecv, QpState::Rtr, QpState::Rts, rts).is_ok());
        // What ibv_modify_qp passes on (uverbs' modify_qp_mask) fits the table.
        let ini = without_ignored_xrc_attributes(QpType::XrcSend, rtr | responder);
        assert_eq!(ini, rtr);
        let requester = M::MAX_QP_RD_ATOMIC | M::RETRY_CNT | M::RNR_RETRY;
        let tgt = without_ignored_xrc_attributes(QpType::XrcRecv, rts | requester);
        assert_eq!(tgt, rts);
        assert_eq!(
            without_ignored_xrc_attributes(QpType::Rc, rts | requester),
            rts | requester
        );
        assert!(matches!(
            check_transition(QpType::XrcSend, QpState::Rtr, QpState::Rts, rts),
            Err(TransitionError::MissingAttributes { .. })
        ));
        assert_eq!(
            transition_rule(QpType::XrcSend, QpState::Sqe, QpState::Rts),
            None
        );
    }

    #[test]
    fn rc_has_no_sqe_recovery() {
        assert_eq!(
            transition_rule(QpType::Rc, QpState::Sqe, QpState::Rts),
            None
        );
        assert!(transition_rule(QpType::Uc, QpState::Sqe, QpState::Rts).is_some());
    }
}
