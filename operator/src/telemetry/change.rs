//! A change's trace, pure: from the status as stored to the status about to
//! be written, which stage the change is in and which spans ended. The I/O
//! (`export.rs`) only sends what this returns.
//!
//! One trace per change: it begins when a read starts, and it is worth a
//! trace once the change reaches a decision, or ends on another verdict than
//! the one it started from. Until then its ended stages are held in status,
//! so a read that finds nothing to do leaves no trace. Span ids derive from
//! the trace id and the stage, so a Job can name its parent span before that
//! span is exported, and a restart changes nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};

use crate::api::journal::{JournalEntry, JournalEntryType};
use crate::api::source::SourceStatus;
use crate::api::trace::{ChangeTrace, HeldStage, Stage};

/// At most this many Jobs are named per stage.
const MAX_JOBS: usize = 8;
/// At most this many ended stages are held for a change not yet worth a trace.
const MAX_HELD: usize = 16;

/// Where a status puts its resource, as a change sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    /// A verdict: no change is under way.
    Rest,
    /// A stage of a change.
    In(Stage),
    /// Wherever the change was (Suspended, Pending).
    Hold,
}

/// Where a change is, given whether its claim has dispatched its Job: an
/// Apply claimed but not yet dispatched (its realm Lease still to take) is
/// still the Decision, for its approval is spent, and `ApprovalAccepted`
/// written, only at dispatch.
pub fn until_dispatch(at: Where, dispatched: bool) -> Where {
    match at {
        Where::In(Stage::Execution) if !dispatched => Where::In(Stage::Decision),
        other => other,
    }
}

/// What a status says that a trace needs.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// `PtahSchema` or `PtahMigration`.
    pub family: &'static str,
    /// The resource's namespace.
    pub namespace: &'a str,
    /// The resource's name.
    pub name: &'a str,
    /// Where the status puts it.
    pub at: Where,
    /// `phase/reason`.
    pub verdict: String,
    /// The plan status names: name and fingerprint.
    pub plan: Option<(&'a str, &'a str)>,
    /// The claim: its operation id and Job name.
    pub claim: Option<(&'a str, Option<&'a str>)>,
    /// The journal.
    pub journal: &'a [JournalEntry],
    /// Where the source came from and who signed it ([`provenance`]).
    pub provenance: Vec<(&'static str, String)>,
}

/// The source's provenance as the Decision span carries it: the revision,
/// the Git commit or the artifact digest, and the signer Verify accepted
/// (never a secret: identities, fingerprints and digests).
pub fn provenance(src: Option<&SourceStatus>) -> Vec<(&'static str, String)> {
    let Some(src) = src else {
        return Vec::new();
    };
    let mut a = vec![
        ("ptah.source.kind", tag(&src.kind)),
        ("ptah.source.revision", src.revision.clone()),
        ("ptah.source.digest", src.content_digest.clone()),
    ];
    if let Some(g) = &src.git {
        a.push(("ptah.source.commit", g.commit.clone()));
    }
    if let Some(o) = &src.oci {
        a.push(("ptah.source.artifact", o.resolved_reference.clone()));
    }
    if let Some(v) = &src.verification {
        if let Some(id) = &v.signer_identity {
            a.push(("ptah.signer.subject", id.subject.clone()));
            a.push(("ptah.signer.issuer", id.issuer.clone()));
        }
        if let Some(k) = &v.key_fingerprint {
            a.push(("ptah.signer.key", k.clone()));
        }
        if let Some(d) = crate::api::status::signer_evidence_digest(v) {
            a.push(("ptah.signer.evidence", d));
        }
    }
    a
}

/// A span to export, with its ids and times fixed.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    /// The trace's id.
    pub trace_id: [u8; 16],
    /// The span's id.
    pub span_id: [u8; 8],
    /// The parent's span id (none for the change's root span).
    pub parent: Option<[u8; 8]>,
    /// The span's name.
    pub name: String,
    /// When it began.
    pub start: Timestamp,
    /// When it ended.
    pub end: Timestamp,
    /// Its attributes: bounded, never a secret or SQL.
    pub attributes: Vec<(&'static str, String)>,
    /// The journal entries it holds (stage 6).
    pub events: Vec<EventRecord>,
    /// It ended on a failure.
    pub error: bool,
}

/// A journal entry on a span.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    /// The entry's type.
    pub name: String,
    /// The entry's time.
    pub time: Timestamp,
    /// Its attributes.
    pub attributes: Vec<(&'static str, String)>,
}

/// The name of a change's root span.
pub const ROOT_SPAN: &str = "change";

/// The trace id of `trace`, parsed.
pub fn trace_id(trace: &ChangeTrace) -> [u8; 16] {
    let mut id = [0u8; 16];
    if hex::decode_to_slice(&trace.trace_id, &mut id).is_err() {
        // Written by this module only; a hand-edited one still gives ids.
        id.copy_from_slice(&Sha256::digest(trace.trace_id.as_bytes())[..16]);
    }
    id
}

fn derived(trace_id: &[u8; 16], what: &str) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(trace_id);
    h.update(what.as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&h.finalize()[..8]);
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

/// The change's root span id.
pub fn root_span_id(trace_id: &[u8; 16]) -> [u8; 8] {
    derived(trace_id, "/change")
}

/// The span id of a stage in a round.
pub fn stage_span_id(trace_id: &[u8; 16], stage: Stage, round: i32) -> [u8; 8] {
    derived(trace_id, &format!("/{}/{round}", stage.as_str()))
}

/// W3C context a Job of the current stage carries: `traceparent`, and
/// `tracestate` saying whether the change is known to be worth a trace yet.
pub fn job_context(trace: &ChangeTrace) -> (String, String) {
    let id = trace_id(trace);
    let span = stage_span_id(&id, trace.stage, trace.round);
    let parent = format!("00-{}-{}-01", hex::encode(id), hex::encode(span));
    let state = if trace.exported {
        "ptah=change"
    } else {
        "ptah=tentative"
    };
    (parent, state.to_string())
}

fn micro(t: Timestamp) -> MicroTime {
    MicroTime(t)
}

/// Steps the change from the stored status's trace to the one about to be
/// written. `before` is the stored trace and `before_verdict` the stored
/// verdict (where a new change starts from); `new_trace_id` is used only if
/// a change begins. Returns the trace to write and the spans to export once
/// it is written.
pub fn advance(
    before: Option<ChangeTrace>,
    before_verdict: &str,
    facts: &Facts<'_>,
    now: Timestamp,
    new_trace_id: [u8; 16],
) -> (Option<ChangeTrace>, Vec<SpanRecord>) {
    let mut out = Vec::new();
    let trace = match (before, facts.at) {
        (None, Where::Rest | Where::Hold) => return (None, out),
        (None, Where::In(stage)) => {
            let mut t = ChangeTrace {
                trace_id: hex::encode(new_trace_id),
                started_at: micro(now),
                from: Some(before_verdict.to_string()),
                stage: Stage::Source,
                round: 0,
                stage_started_at: micro(now),
                jobs: Vec::new(),
                exported: false,
                held: Vec::new(),
            };
            enter(&mut t, stage, facts, now, &mut out);
            t
        }
        (Some(t), Where::Hold) => t,
        (Some(mut t), Where::In(stage)) => {
            // Reads while a plan waits are the wait, and the proof's own
            // reads (a migration's history read) are the proof: neither is a
            // step back.
            let rereads = (t.stage == Stage::Decision && stage < Stage::Decision)
                || (t.stage == Stage::Verification && stage == Stage::Source);
            if !rereads {
                enter(&mut t, stage, facts, now, &mut out);
            }
            t
        }
        (Some(mut t), Where::Rest) => {
            let worth = t.exported || t.from.as_deref() != Some(facts.verdict.as_str());
            if !worth {
                return (None, out);
            }
            finish(&mut t, facts, now, &mut out);
            release(&mut t, facts, &mut out);
            out.push(root(&t, facts, now));
            return (None, out);
        }
    };
    let mut trace = trace;
    if let Some((_, Some(job))) = facts.claim
        && !trace.jobs.iter().any(|j| j == job)
        && trace.jobs.len() < MAX_JOBS
    {
        trace.jobs.push(job.to_string());
    }
    if !trace.exported && trace.stage >= Stage::Decision {
        trace.exported = true;
        release(&mut trace, facts, &mut out);
    }
    (Some(trace), out)
}

/// Moves `t` into `stage`: the current stage ends now, any stage skipped
/// over is a span of no length, and a step back starts a new round.
fn enter(
    t: &mut ChangeTrace,
    stage: Stage,
    facts: &Facts<'_>,
    now: Timestamp,
    out: &mut Vec<SpanRecord>,
) {
    if stage == t.stage {
        return;
    }
    let back = stage < t.stage;
    let from = t.stage;
    finish(t, facts, now, out);
    if back {
        t.round = t.round.saturating_add(1);
    } else {
        for skipped in Stage::ALL.into_iter().filter(|s| *s > from && *s < stage) {
            t.stage = skipped;
            t.stage_started_at = micro(now);
            finish(t, facts, now, out);
        }
    }
    t.stage = stage;
    t.stage_started_at = micro(now);
    t.jobs.clear();
}

/// Ends the current stage now: exported if the change is worth a trace,
/// held otherwise.
fn finish(t: &mut ChangeTrace, facts: &Facts<'_>, now: Timestamp, out: &mut Vec<SpanRecord>) {
    let ended = HeldStage {
        stage: t.stage,
        round: t.round,
        started_at: t.stage_started_at.clone(),
        ended_at: micro(now),
        jobs: std::mem::take(&mut t.jobs),
    };
    if t.exported {
        out.push(stage_span(t, &ended, facts));
    } else if t.held.len() < MAX_HELD {
        t.held.push(ended);
    }
}

/// Exports what was held.
fn release(t: &mut ChangeTrace, facts: &Facts<'_>, out: &mut Vec<SpanRecord>) {
    for held in std::mem::take(&mut t.held) {
        out.push(stage_span(t, &held, facts));
    }
}

fn common(facts: &Facts<'_>) -> Vec<(&'static str, String)> {
    vec![
        ("k8s.namespace.name", facts.namespace.to_string()),
        ("ptah.family", facts.family.to_string()),
        (
            "ptah.resource",
            format!("{}/{}", facts.namespace, facts.name),
        ),
    ]
}

/// The stage a journal entry of this type belongs to.
fn entry_stage(e: &JournalEntry) -> Option<Stage> {
    Some(match e.type_ {
        JournalEntryType::PlanPublished => Stage::Plan,
        JournalEntryType::ApprovalAccepted => Stage::Decision,
        JournalEntryType::ApplyFinished | JournalEntryType::RunFinished => Stage::Execution,
        JournalEntryType::Verified => Stage::Verification,
        JournalEntryType::RunAcknowledged | JournalEntryType::OperationFailed => return None,
    })
}

fn tag<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn entry_attributes(e: &JournalEntry) -> Vec<(&'static str, String)> {
    let mut a = Vec::new();
    let mut put = |k: &'static str, v: Option<String>| {
        if let Some(v) = v {
            a.push((k, v));
        }
    };
    put("ptah.plan.name", e.plan_name.clone());
    put("ptah.plan.fingerprint", e.plan_fingerprint.clone());
    put("ptah.approval.name", e.approval_name.clone());
    put("ptah.approval.uid", e.approval_uid.clone());
    put(
        "ptah.approver",
        e.approver.as_ref().map(|i| i.username.clone()),
    );
    put("ptah.authorization", e.authorization.as_ref().map(tag));
    put("ptah.job.name", e.job_name.clone());
    put("ptah.operation.id", e.operation_id.clone());
    put("ptah.operation", e.operation.as_ref().map(tag));
    put("ptah.outcome", e.outcome.as_ref().map(tag));
    put("ptah.reason", e.reason.as_ref().map(tag));
    put("ptah.count", e.count.map(|c| c.to_string()));
    a
}

/// A stage's span: the journal entries of its window are its events, and
/// those of its own kind lend it their attributes (an approval's approver,
/// an Apply's outcome).
fn stage_span(t: &ChangeTrace, s: &HeldStage, facts: &Facts<'_>) -> SpanRecord {
    let id = trace_id(t);
    let start = s.started_at.0;
    let end = s.ended_at.0.max(start);
    // Journal times are whole seconds.
    let from = Timestamp::from_second(start.as_second()).unwrap_or(start);
    let mut attributes = common(facts);
    attributes.push(("ptah.stage", s.stage.as_str().to_string()));
    if !s.jobs.is_empty() {
        attributes.push(("ptah.job.name", s.jobs.join(",")));
    }
    if s.stage >= Stage::Plan
        && let Some((name, fingerprint)) = facts.plan
    {
        attributes.push(("ptah.plan.name", name.to_string()));
        attributes.push(("ptah.plan.fingerprint", fingerprint.to_string()));
    }
    // A reviewer's decision is about where the plan came from.
    if s.stage == Stage::Decision {
        attributes.extend(facts.provenance.iter().cloned());
    }
    let mut events = Vec::new();
    let mut error = false;
    for e in facts
        .journal
        .iter()
        .filter(|e| e.time.0 >= from && e.time.0 <= end)
    {
        let own = entry_stage(e);
        if own.is_some() && own != Some(s.stage) {
            continue;
        }
        let attrs = entry_attributes(e);
        if own == Some(s.stage) {
            for (k, v) in &attrs {
                if let Some(slot) = attributes.iter_mut().find(|(key, _)| key == k) {
                    slot.1 = v.clone();
                } else {
                    attributes.push((k, v.clone()));
                }
            }
        }
        error |= e.type_ == JournalEntryType::OperationFailed;
        events.push(EventRecord {
            name: tag(&e.type_),
            time: e.last_time.as_ref().unwrap_or(&e.time).0,
            attributes: attrs,
        });
    }
    SpanRecord {
        trace_id: id,
        span_id: stage_span_id(&id, s.stage, s.round),
        parent: Some(root_span_id(&id)),
        name: s.stage.as_str().to_string(),
        start,
        end,
        attributes,
        events,
        error,
    }
}

/// The change's root span, from its first read to its verdict.
fn root(t: &ChangeTrace, facts: &Facts<'_>, now: Timestamp) -> SpanRecord {
    let id = trace_id(t);
    let mut attributes = common(facts);
    let (phase, reason) = facts
        .verdict
        .split_once('/')
        .unwrap_or((facts.verdict.as_str(), ""));
    attributes.push(("ptah.outcome", phase.to_string()));
    if !reason.is_empty() {
        attributes.push(("ptah.reason", reason.to_string()));
    }
    if let Some(from) = &t.from {
        attributes.push(("ptah.from", from.clone()));
    }
    if let Some((name, fingerprint)) = facts.plan {
        attributes.push(("ptah.plan.name", name.to_string()));
        attributes.push(("ptah.plan.fingerprint", fingerprint.to_string()));
    }
    SpanRecord {
        trace_id: id,
        span_id: root_span_id(&id),
        parent: None,
        name: ROOT_SPAN.to_string(),
        start: t.started_at.0,
        end: now.max(t.started_at.0),
        attributes,
        events: Vec::new(),
        error: phase == "Failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::Identity;
    use crate::api::journal::JournalOutcome;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const ID: [u8; 16] = [7; 16];
    const IN_SYNC: &str = "InSync/ScopedConverged";

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("time")
    }

    fn facts<'a>(at: Where, verdict: &str, journal: &'a [JournalEntry]) -> Facts<'a> {
        Facts {
            family: "PtahSchema",
            namespace: "shop",
            name: "orders",
            at,
            verdict: verdict.to_string(),
            plan: None,
            claim: None,
            journal,
            provenance: vec![("ptah.signer.key", "sha256:k".into())],
        }
    }

    /// Walks a change through `(where, verdict, second)` steps; returns the
    /// last trace and every span exported on the way.
    fn walk(
        steps: &[(Where, &str, i64)],
        journal: &[JournalEntry],
    ) -> (Option<ChangeTrace>, Vec<SpanRecord>) {
        let mut trace = None;
        let mut verdict = IN_SYNC.to_string();
        let mut all = Vec::new();
        for (at, v, s) in steps {
            let (next, spans) = advance(trace, &verdict, &facts(*at, v, journal), t(*s), ID);
            trace = next;
            verdict = v.to_string();
            all.extend(spans);
        }
        (trace, all)
    }

    fn names(spans: &[SpanRecord]) -> Vec<&str> {
        spans.iter().map(|s| s.name.as_str()).collect()
    }

    fn entry(type_: JournalEntryType, s: i64) -> JournalEntry {
        JournalEntry::new(type_, Time(t(s)))
    }

    use Where::{Hold, In, Rest};

    #[test]
    fn a_read_that_finds_nothing_leaves_no_trace() {
        let (trace, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Plan), "Planning/", 2),
                (Rest, IN_SYNC, 3),
            ],
            &[],
        );
        assert_eq!(trace, None);
        assert!(spans.is_empty(), "{spans:?}");
    }

    #[test]
    fn a_change_is_held_until_it_reaches_a_decision_then_exported_stage_by_stage() {
        let (trace, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Plan), "Planning/", 2),
            ],
            &[],
        );
        let trace = trace.expect("a change under way");
        assert!(spans.is_empty());
        assert_eq!(trace.held.len(), 1);
        assert!(!trace.exported);
        let (trace, spans) = advance(
            Some(trace),
            "Planning/",
            &facts(
                In(Stage::Decision),
                "AwaitingApproval/ApprovalRequired",
                &[],
            ),
            t(5),
            [9; 16],
        );
        let trace = trace.expect("still under way");
        assert!(trace.exported && trace.held.is_empty());
        assert_eq!(names(&spans), ["Source", "Plan"]);
        assert_eq!((spans[0].start, spans[0].end), (t(0), t(2)));
        assert_eq!((spans[1].start, spans[1].end), (t(2), t(5)));
        // The id the change began with, not the one offered later.
        assert!(spans.iter().all(|s| s.trace_id == ID));
        assert!(spans.iter().all(|s| s.parent == Some(root_span_id(&ID))));
    }

    #[test]
    fn the_decision_span_is_the_wait_and_the_root_spans_the_change() {
        let (trace, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Plan), "Planning/", 2),
                (In(Stage::Decision), "AwaitingApproval/ApprovalRequired", 5),
                (In(Stage::Execution), "Applying/ApplyPending", 2285),
                (
                    In(Stage::Verification),
                    "VerifyingConvergence/ApplyPending",
                    2326,
                ),
                (Rest, IN_SYNC, 2330),
            ],
            &[],
        );
        assert_eq!(trace, None);
        assert_eq!(
            names(&spans),
            [
                "Source",
                "Plan",
                "Decision",
                "Execution",
                "Verification",
                ROOT_SPAN
            ]
        );
        let decision = &spans[2];
        assert_eq!(decision.end.duration_since(decision.start).as_secs(), 2280);
        // The decision carries the source's provenance; no other stage does.
        assert!(
            decision
                .attributes
                .contains(&("ptah.signer.key", "sha256:k".into()))
        );
        assert!(
            spans
                .iter()
                .filter(|s| s.name != "Decision")
                .all(|s| s.attributes.iter().all(|(k, _)| *k != "ptah.signer.key"))
        );
        let root = &spans[5];
        assert_eq!((root.start, root.end, root.parent), (t(0), t(2330), None));
        assert!(root.attributes.contains(&("ptah.outcome", "InSync".into())));
        assert!(
            root.attributes
                .contains(&("ptah.reason", "ScopedConverged".into()))
        );
        assert!(root.attributes.contains(&("ptah.from", IN_SYNC.into())));
        assert!(
            root.attributes
                .contains(&("ptah.resource", "shop/orders".into()))
        );
    }

    #[test]
    fn reads_while_a_plan_waits_are_part_of_the_wait() {
        let (trace, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Decision), "AwaitingApproval/ApprovalRequired", 5),
                (In(Stage::Source), "Observing/", 600),
                (In(Stage::Plan), "Planning/", 601),
                (
                    In(Stage::Decision),
                    "AwaitingApproval/ApprovalRequired",
                    602,
                ),
            ],
            &[],
        );
        let trace = trace.expect("under way");
        assert_eq!(trace.stage, Stage::Decision);
        assert_eq!(trace.stage_started_at.0, t(5));
        assert_eq!(trace.round, 0);
        assert_eq!(names(&spans), ["Source", "Plan"]);
    }

    #[test]
    fn the_proofs_own_read_is_the_proof() {
        let (trace, spans) = walk(
            &[
                (In(Stage::Source), "Reading/", 0),
                (In(Stage::Decision), "AwaitingApproval/", 1),
                (In(Stage::Execution), "Applying/", 2),
                (In(Stage::Verification), "VerifyingHistory/", 3),
                (In(Stage::Source), "Reading/", 4),
            ],
            &[],
        );
        let trace = trace.expect("under way");
        assert_eq!((trace.stage, trace.round), (Stage::Verification, 0));
        assert!(!names(&spans).contains(&"Verification"), "{spans:?}");
        // A proof that finds more to do plans again: a step back.
        let (trace, _) = advance(
            Some(trace),
            "Reading/",
            &facts(In(Stage::Decision), "AwaitingApproval/", &[]),
            t(5),
            ID,
        );
        assert_eq!(trace.expect("under way").round, 1);
    }

    #[test]
    fn a_stage_skipped_over_is_a_span_of_no_length() {
        let (_, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Plan), "Planning/", 2),
                (In(Stage::Execution), "Applying/ApplyPending", 4),
            ],
            &[],
        );
        assert_eq!(names(&spans), ["Source", "Plan", "Decision"]);
        assert_eq!((spans[2].start, spans[2].end), (t(4), t(4)));
    }

    #[test]
    fn a_step_back_starts_a_new_round_with_its_own_span_ids() {
        let (trace, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Decision), "ReadyToApply/", 3),
                (In(Stage::Execution), "Applying/", 4),
                (In(Stage::Source), "Observing/", 5),
            ],
            &[],
        );
        let trace = trace.expect("under way");
        assert_eq!((trace.stage, trace.round), (Stage::Source, 1));
        let first_source = spans.iter().find(|s| s.name == "Source").expect("source");
        assert_ne!(
            first_source.span_id,
            stage_span_id(&ID, Stage::Source, trace.round)
        );
        let (parent, _) = job_context(&trace);
        assert!(parent.ends_with(&format!(
            "{}-01",
            hex::encode(stage_span_id(&ID, Stage::Source, 1))
        )));
    }

    #[test]
    fn a_read_that_ends_on_another_verdict_is_a_change() {
        let (trace, spans) = walk(
            &[
                (In(Stage::Source), "Verifying/", 0),
                (Rest, "Blocked/VerificationFailed", 3),
            ],
            &[],
        );
        assert_eq!(trace, None);
        assert_eq!(names(&spans), ["Source", ROOT_SPAN]);
        assert!(
            spans[1]
                .attributes
                .contains(&("ptah.outcome", "Blocked".into()))
        );
    }

    #[test]
    fn a_failed_verdict_marks_the_root_span_an_error() {
        let (_, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (Rest, "Failed/OperationFailed", 3),
            ],
            &[],
        );
        assert!(spans.last().expect("root").error);
    }

    #[test]
    fn hold_keeps_the_stage_it_was_in() {
        let (trace, _) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Execution), "Applying/", 2),
                (Hold, "Suspended/Suspended", 3),
            ],
            &[],
        );
        let trace = trace.expect("under way");
        assert_eq!(
            (trace.stage, trace.stage_started_at.0),
            (Stage::Execution, t(2))
        );
    }

    #[test]
    fn nothing_under_way_and_nothing_begun_is_no_trace() {
        assert_eq!(
            walk(&[(Rest, IN_SYNC, 0), (Hold, "Pending/", 1)], &[]),
            (None, Vec::new())
        );
    }

    #[test]
    fn jobs_of_a_stage_are_named_on_its_span() {
        let journal = [];
        let mut f = facts(In(Stage::Source), "Observing/", &journal);
        let (trace, _) = advance(None, IN_SYNC, &f, t(0), ID);
        f.at = In(Stage::Decision);
        f.claim = None;
        let (trace, _) = advance(trace, "Observing/", &f, t(1), ID);
        f.at = In(Stage::Execution);
        f.claim = Some(("sha256:op", Some("orders-apply-1")));
        let (trace, _) = advance(trace, "AwaitingApproval/", &f, t(2), ID);
        assert_eq!(trace.as_ref().expect("trace").jobs, ["orders-apply-1"]);
        f.at = In(Stage::Verification);
        f.claim = None;
        let (_, spans) = advance(trace, "Applying/", &f, t(3), ID);
        let execution = spans.iter().find(|s| s.name == "Execution").expect("span");
        assert!(
            execution
                .attributes
                .contains(&("ptah.job.name", "orders-apply-1".into()))
        );
    }

    #[test]
    fn journal_entries_are_events_of_their_stage_and_lend_it_their_attributes() {
        let mut accepted = entry(JournalEntryType::ApprovalAccepted, 40);
        accepted.approval_uid = Some("approval-uid".into());
        accepted.approver = Some(Identity {
            username: "alice".into(),
            uid: None,
            groups: Vec::new(),
        });
        let mut published = entry(JournalEntryType::PlanPublished, 4);
        published.plan_name = Some("orders-plan-1".into());
        let mut finished = entry(JournalEntryType::ApplyFinished, 45);
        finished.outcome = Some(JournalOutcome::Succeeded);
        let journal = [published, accepted, finished];
        let (_, spans) = walk(
            &[
                (In(Stage::Source), "Observing/", 0),
                (In(Stage::Plan), "Planning/", 2),
                (In(Stage::Decision), "AwaitingApproval/", 4),
                (In(Stage::Execution), "Applying/", 40),
                (In(Stage::Verification), "VerifyingConvergence/", 45),
            ],
            &journal,
        );
        let span = |n: &str| spans.iter().find(|s| s.name == n).expect(n);
        assert_eq!(span("Plan").events[0].name, "PlanPublished");
        assert!(
            span("Plan")
                .attributes
                .contains(&("ptah.plan.name", "orders-plan-1".into()))
        );
        let decision = span("Decision");
        assert_eq!(decision.events.len(), 1, "{:?}", decision.events);
        assert!(
            decision
                .attributes
                .contains(&("ptah.approver", "alice".into()))
        );
        assert!(
            decision
                .attributes
                .contains(&("ptah.approval.uid", "approval-uid".into()))
        );
        assert!(
            span("Execution")
                .attributes
                .contains(&("ptah.outcome", "Succeeded".into()))
        );
        assert!(span("Source").events.is_empty());
    }

    #[test]
    fn an_apply_claimed_but_not_dispatched_is_still_the_decision_that_spends_its_approval() {
        // The claim is stored at 40, its realm Lease taken after, and the
        // Job dispatched (the approval spent) at 42.
        let mut accepted = entry(JournalEntryType::ApprovalAccepted, 42);
        accepted.approval_uid = Some("approval-uid".into());
        let journal = [accepted];
        let (_, spans) = walk(
            &[
                (In(Stage::Decision), "AwaitingApproval/", 4),
                (until_dispatch(In(Stage::Execution), false), "Applying/", 40),
                (until_dispatch(In(Stage::Execution), true), "Applying/", 42),
                (In(Stage::Verification), "VerifyingConvergence/", 45),
            ],
            &journal,
        );
        let decision = spans.iter().find(|s| s.name == "Decision").expect("span");
        assert_eq!((decision.start, decision.end), (t(4), t(42)));
        assert!(
            decision
                .attributes
                .contains(&("ptah.approval.uid", "approval-uid".into()))
        );
        assert_eq!(until_dispatch(In(Stage::Plan), false), In(Stage::Plan));
        assert_eq!(until_dispatch(Rest, false), Rest);
    }

    #[test]
    fn the_job_context_names_the_stage_span_and_says_whether_the_change_is_known_yet() {
        let (trace, _) = walk(&[(In(Stage::Plan), "Planning/", 0)], &[]);
        let trace = trace.expect("trace");
        let (parent, state) = job_context(&trace);
        assert_eq!(
            parent,
            format!(
                "00-{}-{}-01",
                hex::encode(ID),
                hex::encode(stage_span_id(&ID, Stage::Plan, 0))
            )
        );
        assert_eq!(state, "ptah=tentative");
        let (trace, _) = walk(&[(In(Stage::Decision), "AwaitingApproval/", 0)], &[]);
        assert_eq!(job_context(&trace.expect("trace")).1, "ptah=change");
    }

    #[test]
    fn span_ids_depend_only_on_the_trace_stage_and_round() {
        assert_eq!(
            stage_span_id(&ID, Stage::Execution, 0),
            stage_span_id(&ID, Stage::Execution, 0)
        );
        let ids: std::collections::HashSet<_> = Stage::ALL
            .iter()
            .map(|s| stage_span_id(&ID, *s, 0))
            .chain([root_span_id(&ID)])
            .collect();
        assert_eq!(ids.len(), 6);
    }
}
