//! What one manager asked of the API server, from the harness's audit log
//! (every request of the managers' user, at metadata level, one JSON event
//! a line): the events of the manager whose holder is `test-<ns>` (its
//! user agent ends `(test-<ns>)`), read from a byte offset on, and counted
//! by verb and resource.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

use anyhow::Context;
use serde_json::Value;

use crate::harness::Harness;

/// The audit log's length now: where a measured stretch starts.
pub fn offset(harness: &Harness) -> anyhow::Result<u64> {
    Ok(std::fs::metadata(harness.audit_log())
        .context("the audit log")?
        .len())
}

/// The audit events from `offset` on of the manager whose holder is
/// `test-<ns>`.
pub fn events_since(harness: &Harness, offset: u64, ns: &str) -> anyhow::Result<Vec<Value>> {
    let agent = format!("(test-{ns})");
    events_from(harness, offset, |e| {
        e["userAgent"].as_str().is_some_and(|a| a.ends_with(&agent))
    })
}

/// The audit events from `offset` on about objects in namespace `ns`,
/// whoever made them.
pub fn events_in(harness: &Harness, offset: u64, ns: &str) -> anyhow::Result<Vec<Value>> {
    events_from(harness, offset, |e| {
        e["objectRef"]["namespace"].as_str() == Some(ns)
    })
}

fn events_from(
    harness: &Harness,
    offset: u64,
    keep: impl Fn(&Value) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let mut f = std::fs::File::open(harness.audit_log()).context("the audit log")?;
    f.seek(SeekFrom::Start(offset))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let e: Value = serde_json::from_str(line).context("an audit event")?;
        if keep(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

/// An event's verb, resource (with its subresource: `ptahschemas/status`)
/// and object name.
pub fn verb_and_resource(e: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut resource = s(&e["objectRef"]["resource"]);
    if let Some(sub) = e["objectRef"]["subresource"].as_str() {
        resource = format!("{resource}/{sub}");
    }
    (s(&e["verb"]), resource, s(&e["objectRef"]["name"]))
}

/// Whether a verb writes.
pub fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "delete")
}

/// The events counted by (verb, resource).
pub fn tally(events: &[Value]) -> BTreeMap<(String, String), usize> {
    let mut seen = BTreeMap::new();
    for e in events {
        let (verb, resource, _) = verb_and_resource(e);
        *seen.entry((verb, resource)).or_default() += 1;
    }
    seen
}

/// When the API server received the event's request.
pub fn received(e: &Value) -> Option<jiff::Timestamp> {
    e["requestReceivedTimestamp"].as_str()?.parse().ok()
}

/// The names of the Jobs the events create, with when each was asked for.
pub fn job_creates(events: &[Value]) -> Vec<(String, Option<jiff::Timestamp>)> {
    events
        .iter()
        .filter_map(|e| {
            let (verb, resource, name) = verb_and_resource(e);
            (verb == "create" && resource == "jobs").then(|| (name, received(e)))
        })
        .collect()
}
