//! `kubectl ptah refresh KIND/NAME`: writes `operator.ptah.run/read-requested-at`
//! with an instant later than any value the resource holds and than the last
//! one `status.lastReadRequest` answered, so a second request a moment after
//! the first is not taken for an answered one. `--wait` waits for the read
//! that request starts: answered (recorded in `status.lastReadRequest`), then
//! a read of the database that began after it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Patch, PatchParams};
use operator::api::annotations::READ_REQUESTED_AT;
use operator::api::status::OperationType;
use operator::lifecycle::read_request::parse_rfc3339;
use serde_json::json;

use crate::Failure;
use crate::follow::Step;
use crate::resource::Resource;

/// The value to write: `now`, or a millisecond after the latest instant the
/// annotation or `status.lastReadRequest` holds when that is not earlier.
pub fn next_value(
    now: Timestamp,
    annotation: Option<&str>,
    last_answered: Option<&str>,
) -> Timestamp {
    let held = [annotation, last_answered]
        .into_iter()
        .flatten()
        .filter_map(parse_rfc3339)
        .max();
    let now = now
        .round(k8s_openapi::jiff::Unit::Millisecond)
        .unwrap_or(now);
    match held {
        Some(h) if h >= now => h + SignedDuration::from_millis(1),
        _ => now,
    }
}

/// RFC 3339 in UTC with milliseconds, the form the annotation takes.
pub fn spelled(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Writes the annotation.
pub async fn write(client: &Client, r: &Resource, value: &str) -> Result<(), Failure> {
    let patch = Patch::Merge(json!({"metadata": {"annotations": {READ_REQUESTED_AT: value}}}));
    let res = r.patch(client, &PatchParams::default(), &patch).await;
    res.map_err(|e| {
        Failure::api(
            format!("writing {READ_REQUESTED_AT} on {}", r.cli_name()),
            e,
        )
    })
}

/// Blocked reasons under which the request waits rather than being answered.
const WAITS_BLOCKED: [&str; 4] = [
    "UnsupportedEngine",
    "RealmConflict",
    "RealmNotAuthorized",
    "TargetIdentityChanged",
];

/// `--wait`: what is known so far about the read the request starts.
#[derive(Debug)]
pub struct Waiting {
    /// The value written.
    pub value: String,
    /// When the family's read last looked at the database, before the request.
    pub read_before: Option<Time>,
    /// A read operation was seen under way after the request was answered.
    pub saw_read: bool,
    /// Why the request waits was said once.
    pub said_why: bool,
}

impl Waiting {
    pub fn new(value: String, r: &Resource) -> Self {
        Waiting {
            value,
            read_before: r.last_read_at(),
            saw_read: false,
            said_why: false,
        }
    }

    /// Done once the request was answered and a read that started after it
    /// ended: one was seen under way, or the read time moved on.
    pub fn step(&mut self, r: &Resource) -> Step {
        if r.last_read_request().as_deref() != Some(self.value.as_str()) {
            let (reason, _) = r.verdict();
            if r.phase().as_deref() == Some("Blocked")
                && WAITS_BLOCKED.contains(&reason.as_str())
                && !self.said_why
            {
                eprintln!(
                    "{} is Blocked ({reason}): the request waits until that check passes",
                    r.cli_name()
                );
                self.said_why = true;
            }
            return Step::Continue;
        }
        let reading = r.active_operation().is_some_and(|op| {
            matches!(
                op.type_,
                OperationType::Resolve
                    | OperationType::Verify
                    | OperationType::Observe
                    | OperationType::Plan
                    | OperationType::History
            )
        });
        // The read's verdict, not a step on the way to it.
        let on_the_way = matches!(
            r.phase().as_deref(),
            Some("Pending" | "Resolving" | "Verifying" | "Observing" | "Planning" | "Reading")
        ) && !(r.phase().as_deref() == Some("Planning")
            && r.verdict().0 == "ApplyDisabled");
        if reading || on_the_way {
            self.saw_read = true;
            return Step::Continue;
        }
        let moved = match (&self.read_before, r.last_read_at()) {
            (Some(before), Some(now)) => now.0 > before.0,
            (None, Some(_)) => true,
            _ => false,
        };
        if !(self.saw_read || moved) {
            return Step::Continue;
        }
        match r.phase().as_deref() {
            // A read that failed ends the wait too, as the failure it is.
            Some("Failed") => Step::Stop(crate::follow::ended(r)),
            _ => Step::Done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("instant")
    }

    fn migration(last_request: Option<&str>, read_at: &str, history_running: bool) -> Resource {
        let mut status = serde_json::json!({
            "observedGeneration": 1, "phase": "InSync",
            "history": {"observedAt": read_at},
        });
        if let Some(v) = last_request {
            status["lastReadRequest"] = v.into();
        }
        if history_running {
            status["activeOperation"] = serde_json::json!({
                "type": "History", "operationID": format!("sha256:{}", "a".repeat(64)),
                "inputFingerprint": format!("sha256:{}", "b".repeat(64)),
                "attempt": 1, "startedAt": read_at,
            });
        }
        crate::fixtures::resource(crate::resource::Kind::Migration, 1, status)
    }

    #[test]
    fn the_wait_ends_after_the_read_the_answered_request_started() {
        let v = "2026-12-01T10:00:00.000Z";
        let before = migration(None, "2026-12-01T09:59:59Z", false);
        let mut w = Waiting::new(v.to_string(), &before);
        // Not answered yet; answered but no read since.
        assert!(matches!(w.step(&before), Step::Continue));
        assert!(matches!(
            w.step(&migration(Some(v), "2026-12-01T09:59:59Z", false)),
            Step::Continue
        ));
        // The read under way, then over.
        assert!(matches!(
            w.step(&migration(Some(v), "2026-12-01T09:59:59Z", true)),
            Step::Continue
        ));
        assert!(matches!(
            w.step(&migration(Some(v), "2026-12-01T09:59:59Z", false)),
            Step::Done
        ));
        // Or the read time moved on between two events.
        let mut w = Waiting::new(v.to_string(), &before);
        assert!(matches!(
            w.step(&migration(Some(v), "2026-12-01T10:00:03Z", false)),
            Step::Done
        ));
    }

    #[test]
    fn the_value_is_now_when_nothing_later_is_held() {
        let now = at("2026-12-01T10:00:00.123456Z");
        assert_eq!(
            spelled(next_value(now, None, None)),
            "2026-12-01T10:00:00.123Z"
        );
        let v = next_value(now, Some("2026-12-01T09:00:00Z"), Some("not an instant"));
        assert_eq!(spelled(v), "2026-12-01T10:00:00.123Z");
    }

    #[test]
    fn the_value_is_later_than_the_annotation_and_the_answered_one() {
        let now = at("2026-12-01T10:00:00Z");
        let v = next_value(now, Some("2026-12-01T10:00:00Z"), None);
        assert_eq!(spelled(v), "2026-12-01T10:00:00.001Z");
        let v = next_value(
            now,
            Some("2026-12-01T09:00:00Z"),
            Some("2026-12-01T10:00:05.500Z"),
        );
        assert_eq!(spelled(v), "2026-12-01T10:00:05.501Z");
        // Twice in a row within one millisecond: the second is later.
        let first = next_value(now, None, None);
        let second = next_value(now, Some(&spelled(first)), None);
        assert!(second > first);
    }
}
