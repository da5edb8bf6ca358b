//! What the commands check of every work completion.

use anyhow::ensure;
use softroce_verbs::{WcStatus, WorkCompletion};

/// Fail unless `wc` succeeded, saying which `what` completed with which status.
pub(crate) fn check_success(wc: &WorkCompletion, what: &str) -> anyhow::Result<()> {
    ensure!(
        wc.status == WcStatus::Success,
        "{what} completed with {} (vendor_err {:#x})",
        wc.status,
        wc.vendor_err
    );
    Ok(())
}
