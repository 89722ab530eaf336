//! The hand-over: a read's result, checked by the receiver of the manager
//! that reconciles, goes to the resource's pass in memory, and the runner is
//! answered once the status write that records the outcome is made. Nothing
//! is stored in between, so an idle read cycle writes no result objects.
//!
//! Why this is safe (architecture.md, "Results from Jobs": a lost read is
//! retried): the runner holds its result until it is answered. A manager
//! stopped before the write breaks the connection, and the runner delivers
//! again to the one that takes over; one stopped after it has recorded the
//! outcome already. A pass that does not record it in time
//! ([`HAND_OVER_WAIT`]) gives the result back, and the receiver stores it as
//! before. An Apply's result is always stored first: its outcome is never
//! left to a connection.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use tokio::sync::oneshot;

use super::StoredResult;

/// How long the receiver waits for a pass to record a handed-over result
/// before it stores it instead (well inside the runner's attempt timeout).
pub const HAND_OVER_WAIT: Duration = Duration::from_secs(10);

/// A resource, as the receiver and the pass both name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Addressee {
    /// `PtahSchema` or `PtahMigration`.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

struct Held {
    operation_id: String,
    attempt: i32,
    sha256: String,
    result: StoredResult,
    answered: Vec<oneshot::Sender<()>>,
}

/// How a hand-over ended.
#[derive(Debug, PartialEq, Eq)]
pub enum HandOver {
    /// A status write recorded the claim as over: the runner is answered.
    Recorded,
    /// Nobody took it (this manager does not reconcile, or no pass wrote in
    /// time): store it.
    NotTaken,
    /// Other bytes are held for the same operation and attempt.
    Conflict,
}

/// Results handed from the receiver to the passes, one per resource.
#[derive(Default)]
pub struct Inbox {
    open: AtomicBool,
    held: Mutex<HashMap<Addressee, Held>>,
    wakers: Mutex<HashMap<String, UnboundedSender<(String, String)>>>,
}

impl Inbox {
    /// An inbox nobody takes from yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The controller of `kind` takes results from now on: the stream wakes
    /// the pass of the resource (namespace, name) a result is held for.
    pub fn take_for(&self, kind: &str) -> UnboundedReceiver<(String, String)> {
        let (tx, rx) = unbounded();
        lock(&self.wakers).insert(kind.to_string(), tx);
        self.open.store(true, Ordering::Release);
        rx
    }

    /// Holds `result` of (operation, attempt) for `to`'s pass, wakes it, and
    /// waits up to `wait` for the status write that records the claim as
    /// over.
    pub async fn hand_over(
        &self,
        to: &Addressee,
        operation_id: &str,
        attempt: i32,
        sha256: &str,
        result: StoredResult,
        wait: Duration,
    ) -> HandOver {
        if !self.open.load(Ordering::Acquire) {
            return HandOver::NotTaken;
        }
        let Some(waker) = lock(&self.wakers).get(&to.kind).cloned() else {
            return HandOver::NotTaken;
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut held = lock(&self.held);
            match held.get_mut(to) {
                Some(h) if h.operation_id == operation_id && h.attempt == attempt => {
                    if h.sha256 != sha256 {
                        return HandOver::Conflict;
                    }
                    h.answered.push(tx);
                }
                _ => {
                    held.insert(
                        to.clone(),
                        Held {
                            operation_id: operation_id.to_string(),
                            attempt,
                            sha256: sha256.to_string(),
                            result,
                            answered: vec![tx],
                        },
                    );
                }
            }
        }
        if waker
            .unbounded_send((to.namespace.clone(), to.name.clone()))
            .is_err()
        {
            self.give_back(to, operation_id, attempt);
            return HandOver::NotTaken;
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(())) => HandOver::Recorded,
            _ => {
                self.give_back(to, operation_id, attempt);
                HandOver::NotTaken
            }
        }
    }

    /// Wakes `to`'s pass with nothing handed over (a realm Lease it waits
    /// for is free); `false` when its kind's controller does not take.
    pub fn wake(&self, to: &Addressee) -> bool {
        let waker = lock(&self.wakers).get(&to.kind).cloned();
        waker.is_some_and(|w| {
            w.unbounded_send((to.namespace.clone(), to.name.clone()))
                .is_ok()
        })
    }

    /// The result held for `to`'s claim (operation, attempt), if any.
    pub fn result(&self, to: &Addressee, operation_id: &str, attempt: i32) -> Option<StoredResult> {
        lock(&self.held)
            .get(to)
            .filter(|h| h.operation_id == operation_id && h.attempt == attempt)
            .map(|h| h.result.clone())
    }

    /// A status write of `to` is stored with `claim` (operation, attempt) as
    /// its claim: a result held for any other claim is recorded or no
    /// longer wanted, and its runner is answered.
    pub fn written(&self, to: &Addressee, claim: Option<(&str, i32)>) {
        let mut held = lock(&self.held);
        let over = held
            .get(to)
            .is_some_and(|h| claim != Some((h.operation_id.as_str(), h.attempt)));
        if over && let Some(h) = held.remove(to) {
            for tx in h.answered {
                let _ = tx.send(());
            }
        }
    }

    /// Takes back an unrecorded result (its waiters store it themselves).
    fn give_back(&self, to: &Addressee, operation_id: &str, attempt: i32) {
        let mut held = lock(&self.held);
        if held
            .get(to)
            .is_some_and(|h| h.operation_id == operation_id && h.attempt == attempt)
        {
            held.remove(to);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::StreamExt;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::protocol::result::ResultDocument;

    fn to() -> Addressee {
        Addressee {
            kind: "PtahSchema".into(),
            namespace: "shop".into(),
            name: "orders".into(),
        }
    }

    fn result() -> StoredResult {
        let mut document = ResultDocument::new(
            "observe",
            None,
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            Err((
                crate::protocol::result::Outcome::Failed,
                crate::protocol::result::ErrorDoc {
                    rule: None,
                    file: None,
                    message: "failed".into(),
                },
            )),
        );
        document.finished_at = document.started_at.clone();
        StoredResult {
            document,
            pod_uid: Some("pod".into()),
            job_uid: Some("job".into()),
            received_at: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[tokio::test]
    async fn nothing_is_handed_over_before_a_controller_takes_results() {
        let inbox = Inbox::new();
        let r = inbox
            .hand_over(&to(), "op", 1, "sha", result(), Duration::from_secs(5))
            .await;
        assert_eq!(r, HandOver::NotTaken);
        assert_eq!(inbox.result(&to(), "op", 1), None);
    }

    #[tokio::test]
    async fn the_runner_is_answered_once_a_write_records_the_claim_over() {
        let inbox = Arc::new(Inbox::new());
        let mut woken = inbox.take_for("PtahSchema");
        let giver = inbox.clone();
        let handed = tokio::spawn(async move {
            giver
                .hand_over(&to(), "op", 1, "sha", result(), Duration::from_secs(30))
                .await
        });
        assert_eq!(woken.next().await, Some(("shop".into(), "orders".into())));
        // The pass reads it; a write that still holds the claim answers
        // nothing, one that ended it does.
        assert_eq!(inbox.result(&to(), "op", 1), Some(result()));
        assert_eq!(inbox.result(&to(), "op", 2), None);
        inbox.written(&to(), Some(("op", 1)));
        assert!(!handed.is_finished());
        inbox.written(&to(), Some(("next", 1)));
        assert_eq!(handed.await.expect("joined"), HandOver::Recorded);
        assert_eq!(inbox.result(&to(), "op", 1), None);
    }

    #[tokio::test]
    async fn an_unrecorded_result_is_given_back_to_be_stored() {
        let inbox = Inbox::new();
        let _woken = inbox.take_for("PtahSchema");
        let r = inbox
            .hand_over(&to(), "op", 1, "sha", result(), Duration::from_millis(20))
            .await;
        assert_eq!(r, HandOver::NotTaken);
        assert_eq!(inbox.result(&to(), "op", 1), None);
        // Another kind's controller takes nothing for this one.
        let other = Addressee {
            kind: "PtahMigration".into(),
            ..to()
        };
        let r = inbox
            .hand_over(&other, "op", 1, "sha", result(), Duration::from_millis(20))
            .await;
        assert_eq!(r, HandOver::NotTaken);
    }

    #[tokio::test]
    async fn a_second_delivery_waits_with_the_first_and_other_bytes_conflict() {
        let inbox = Arc::new(Inbox::new());
        let mut woken = inbox.take_for("PtahSchema");
        let spawn = |sha: &'static str| {
            let giver = inbox.clone();
            tokio::spawn(async move {
                giver
                    .hand_over(&to(), "op", 1, sha, result(), Duration::from_secs(30))
                    .await
            })
        };
        let first = spawn("sha");
        woken.next().await;
        let again = spawn("sha");
        woken.next().await;
        let other = spawn("other");
        assert_eq!(other.await.expect("joined"), HandOver::Conflict);
        inbox.written(&to(), None);
        assert_eq!(first.await.expect("joined"), HandOver::Recorded);
        assert_eq!(again.await.expect("joined"), HandOver::Recorded);
    }

    #[tokio::test]
    async fn a_wake_reaches_the_controller_of_its_kind() {
        let inbox = Inbox::new();
        assert!(!inbox.wake(&to()), "no controller takes yet");
        let mut woken = inbox.take_for("PtahSchema");
        assert!(inbox.wake(&to()));
        assert_eq!(
            woken.next().await,
            Some(("shop".to_string(), "orders".to_string()))
        );
        let other = Addressee {
            kind: "PtahMigration".into(),
            ..to()
        };
        assert!(
            !inbox.wake(&other),
            "another kind's controller does not take"
        );
    }
}
