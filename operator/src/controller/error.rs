//! Why a pass did not finish, by class, and how long the object waits
//! before its next pass: exponentially longer per consecutive failure of
//! that object, capped; a conflict on a guarded write is retried at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Why a pass did not finish; the pass is retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done, naming the object.
        what: String,
        /// The error.
        #[source]
        source: Box<kube::Error>,
    },
    /// A realm Lease request failed.
    #[error("the realm Lease: {0}")]
    Lease(#[from] crate::execution::lease::LeaseError),
    /// Reading or deleting a stored result failed.
    #[error("the receiver's result store: {0}")]
    Receiver(#[from] crate::execution::receiver::ReceiverError),
    /// A schema plan could not be stored or collected for a moment.
    #[error("the schema plan: {0}")]
    Plan(#[from] crate::execution::plan::PlanError),
    /// A migration plan could not be stored or collected for a moment.
    #[error("the migration plan: {0}")]
    MigrationPlan(#[from] crate::execution::migration_plan::MigrationPlanError),
    /// The annotation copy of an unresolved run could not be written out.
    #[error("the unresolved run's annotation copy: {0}")]
    UnresolvedCopy(#[source] serde_json::Error),
    /// The resource has no UID: it was never stored.
    #[error("{0} has no UID: it was never stored")]
    NotStored(String),
}

impl Error {
    /// The class, as the log line and metrics name it.
    pub fn class(&self) -> &'static str {
        match self {
            Error::Kube { .. } if self.is_conflict() => "Conflict",
            Error::Kube { .. } => "ApiRequest",
            Error::Lease(_) => "Lease",
            Error::Receiver(_) => "ResultStore",
            Error::Plan(_) | Error::MigrationPlan(_) => "PlanStorage",
            Error::UnresolvedCopy(_) => "UnresolvedCopy",
            Error::NotStored(_) => "NotStored",
        }
    }

    /// A guarded write met a newer version: the next pass reads it.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if matches!(&**source, kube::Error::Api(e) if e.code == 409))
    }
}

/// Wraps a kube error with what was being done.
pub fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube {
        what,
        source: Box::new(source),
    }
}

/// The first retry after a failed pass.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest an object waits after failed passes.
const MAX_RETRY: Duration = Duration::from_secs(300);
/// A conflict is retried this soon, whatever came before.
const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// How long to wait after the `n`th consecutive failure (1-based).
pub fn retry_after(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// Consecutive failed passes per object.
#[derive(Debug, Default)]
pub struct Backoff(Mutex<HashMap<String, u32>>);

impl Backoff {
    /// Counts a failure of `object`; answers how long it waits.
    pub fn failed(&self, object: &str, error: &Error) -> (Duration, u32) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if error.is_conflict() {
            return (CONFLICT_RETRY, m.get(object).copied().unwrap_or(0));
        }
        let n = m.entry(object.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        (retry_after(*n), *n)
    }

    /// A pass of `object` finished: the next failure starts afresh.
    pub fn succeeded(&self, object: &str) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(object);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict() -> Error {
        let status =
            kube::core::Status::failure("the object has been modified", "Conflict").with_code(409);
        kube_err("writing the status of s")(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn the_wait_doubles_per_consecutive_failure_up_to_a_cap() {
        assert_eq!(retry_after(1), Duration::from_secs(1));
        assert_eq!(retry_after(2), Duration::from_secs(2));
        assert_eq!(retry_after(5), Duration::from_secs(16));
        assert_eq!(retry_after(9), Duration::from_secs(256));
        assert_eq!(retry_after(10), MAX_RETRY);
        assert_eq!(retry_after(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn each_object_backs_off_on_its_own_and_a_success_starts_afresh() {
        let b = Backoff::default();
        let e = Error::NotStored("PtahSchema a/s".into());
        assert_eq!(b.failed("a/s", &e), (Duration::from_secs(1), 1));
        assert_eq!(b.failed("a/s", &e), (Duration::from_secs(2), 2));
        assert_eq!(b.failed("a/t", &e), (Duration::from_secs(1), 1));
        b.succeeded("a/s");
        assert_eq!(b.failed("a/s", &e), (Duration::from_secs(1), 1));
    }

    #[test]
    fn a_conflict_is_retried_at_once_and_does_not_grow_the_wait() {
        let b = Backoff::default();
        let e = Error::NotStored("x".into());
        b.failed("a/s", &e);
        assert_eq!(conflict().class(), "Conflict");
        assert_eq!(b.failed("a/s", &conflict()), (CONFLICT_RETRY, 1));
        assert_eq!(b.failed("a/s", &e).1, 2);
    }
}
