//! Pieces both lifecycles share, pure: instants plus durations and the next
//! timer, the digests a claim is named by, the claim itself (written before
//! its Job), its authorization, a retry under the same claim, the journal
//! entries of a spent approval, an Apply and a failed operation, whether two
//! resolutions are the same content, the words both machines observe and ask
//! in ([`Seen`], [`Shared`]), and the sub-machines both call ([`Machinery`]:
//! claim and Lease, retry and give-way, read request, realm, resolution and
//! verification).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::SignedDuration;

use super::read_request::sha256_hex;
use crate::api::annotations::READ_REQUESTED_AT;
use crate::api::common::{GoDuration, Identity};
use crate::api::condition::Reason;
use crate::api::journal::{JournalEntry, JournalEntryType};
use crate::api::source::{SourceKind, SourceStatus};
use crate::api::status::{ActiveOperation, Authorization, OperationType, SourceBinding};
use crate::protocol::naming::OwnerKind;

mod machinery;
pub(crate) use machinery::machinery;
pub use machinery::{ClaimExtras, InputMove, Machinery, SpecCommon};

/// A realm re-check is due at least this often while a realm refuses.
pub const REALM_RECHECK: Duration = Duration::from_secs(60);

/// An approval as the controller sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalSeen {
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// UID of the plan it names.
    pub plan_uid: String,
    /// Fingerprint of the plan it names.
    pub plan_fingerprint: String,
    /// Who approved, as admission stamped it.
    pub approver: Option<Identity>,
    /// When admission stamped it.
    pub approved_at: Option<Time>,
}

/// The realm census's verdict for this resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealmVerdict {
    /// Admitted.
    Ok,
    /// Another resource claims the database incompatibly.
    Conflict,
    /// The PtahRealm does not admit this resource.
    NotAuthorized,
}

impl RealmVerdict {
    /// The reason a resource the census refuses is blocked for; `None` when
    /// it is admitted.
    pub fn refusal(self) -> Option<Reason> {
        match self {
            RealmVerdict::Ok => None,
            RealmVerdict::Conflict => Some(Reason::RealmConflict),
            RealmVerdict::NotAuthorized => Some(Reason::RealmNotAuthorized),
        }
    }
}

/// Why a resource the realm census refuses is blocked.
pub const REALM_REFUSED: &str = "the database realm does not admit this resource";

/// `spec.interval`; ten minutes if it does not fit a duration.
pub fn interval(spec: &GoDuration) -> Duration {
    spec.to_std().unwrap_or(Duration::from_secs(600))
}

/// `spec.execution.failureRetryInterval`; thirty seconds if it does not fit
/// a duration.
pub fn retry_interval(spec: &GoDuration) -> Duration {
    spec.to_std().unwrap_or(Duration::from_secs(30))
}

/// The value of annotation `key`, if set.
pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// `t + d`, saturating at `t` when the sum leaves the representable range.
pub fn plus(t: &Time, d: Duration) -> Time {
    let d = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    Time(t.0.checked_add(d).unwrap_or(t.0))
}

/// Whether a timer set to `at` has fired by `now`; no timer fires at once.
pub fn due(at: Option<&Time>, now: &Time) -> bool {
    at.is_none_or(|t| t.0 <= now.0)
}

/// `sha256:<hex>` of `parts`, joined by a separator no part holds.
pub fn hex_digest(parts: &[&str]) -> String {
    sha256_hex(parts.join("\u{1f}").as_bytes())
}

pub use crate::api::status::binding_of;

/// Whether two resolutions are the same content under the same policy and
/// location (what a plan binds, verification aside).
pub fn same_source(a: &SourceStatus, b: &SourceStatus) -> bool {
    let (x, y) = (binding_of(a), binding_of(b));
    x.kind == y.kind
        && x.content_digest == y.content_digest
        && x.config_map_uid == y.config_map_uid
        && x.location_digest == y.location_digest
        && x.source_policy_digest == y.source_policy_digest
}

/// A Resolve's resolution as status records it (stamped `now` unless the
/// Job stamped it), and the reason `ArtifactResolved` gives: a pinned OCI
/// digest or a resolved Git commit.
pub fn resolution(src: &SourceStatus, now: &Time) -> (SourceStatus, Reason) {
    let mut src = src.clone();
    if src.resolved_at.is_none() {
        src.resolved_at = Some(now.clone());
    }
    let reason = match src.kind {
        SourceKind::OCI => Reason::DigestPinned,
        // A Flux artifact is fetched and snapshotted by the Resolve Job.
        SourceKind::Flux | SourceKind::ConfigMap => Reason::SnapshotTaken,
        SourceKind::Git => Reason::CommitResolved,
    };
    (src, reason)
}

/// The Warning for a read-request annotation that holds no instant.
pub fn invalid_read_request(recorded: &str) -> String {
    format!("{READ_REQUESTED_AT}={recorded:?} is not an RFC 3339 instant")
}

/// The claim's deterministic Job name: the Job builder's, so the name the
/// claim reserves is the name the Job is created under.
pub fn job_name(
    kind: OwnerKind,
    resource: &str,
    op: OperationType,
    operation_id: &str,
    attempt: i32,
) -> String {
    crate::protocol::naming::job_name(kind, op, resource, operation_id, attempt).unwrap_or_else(
        |_| {
            // Only a resource name the API server would refuse gets here.
            let short = crate::protocol::naming::short_id(operation_id);
            format!(
                "ptah-{}-{short}-{attempt}",
                format!("{op:?}").to_ascii_lowercase()
            )
        },
    )
}

/// What a new claim is computed from.
#[derive(Clone, Debug)]
pub struct ClaimInputs<'a> {
    /// Which resource kind owns the Job.
    pub owner: OwnerKind,
    /// The resource's name.
    pub resource: &'a str,
    /// The resource's UID.
    pub uid: &'a str,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The operation.
    pub op: OperationType,
    /// The source the operation reads.
    pub source: Option<SourceBinding>,
    /// The execution epoch it runs under.
    pub execution_epoch: Option<String>,
    /// The plan an Apply runs (its fingerprint is bound into the claim's).
    pub plan_fingerprint: Option<&'a str>,
    /// The database realm's coordination digest.
    pub coordination_digest: Option<String>,
    /// The database an earlier operation read.
    pub target_identity_digest: Option<String>,
}

/// A claim for `inputs.op`, attempt 1, not yet dispatched. The operation ID
/// binds the kind, the resource, the input fingerprint and the instant, so
/// two claims are never one.
pub fn new_claim(inputs: ClaimInputs<'_>, now: &Time) -> ActiveOperation {
    let op_name = format!("{:?}", inputs.op);
    let generation = inputs.generation.unwrap_or(0).to_string();
    let src = inputs
        .source
        .as_ref()
        .map(|s| s.content_digest.as_str())
        .unwrap_or_default();
    let plan = if inputs.op == OperationType::Apply {
        inputs.plan_fingerprint.unwrap_or_default()
    } else {
        ""
    };
    let fingerprint = hex_digest(&[
        &op_name,
        &generation,
        src,
        inputs.execution_epoch.as_deref().unwrap_or(""),
        plan,
    ]);
    let when = now.0.to_string();
    let operation_id = hex_digest(&[&op_name, inputs.uid, &fingerprint, &when]);
    let job = job_name(inputs.owner, inputs.resource, inputs.op, &operation_id, 1);
    ActiveOperation {
        type_: inputs.op,
        operation_id,
        input_fingerprint: fingerprint,
        job_name: Some(job),
        job_uid: None,
        attempt: 1,
        started_at: now.clone(),
        retry_not_before: None,
        dispatch_started: false,
        dispatch_not_after: None,
        execution_not_after: None,
        execution_epoch: inputs.execution_epoch,
        source: inputs.source,
        coordination_digest: inputs.coordination_digest,
        target_identity_digest: inputs.target_identity_digest,
        lease_epoch: None,
        lease_duration_seconds: None,
        lease_continuity_lost: false,
        plan_name: None,
        plan_uid: None,
        plan_fingerprint: None,
        authorization: None,
        approval_name: None,
        approval_uid: None,
        approver: None,
        admission_snapshot_digest: None,
    }
}

/// The same operation again under the same claim: the next attempt, under
/// the next reserved Job name, with no Job and no result of its own yet.
pub fn next_attempt(mut c: ActiveOperation, owner: OwnerKind, resource: &str) -> ActiveOperation {
    c.attempt = c.attempt.saturating_add(1);
    c.job_name = Some(job_name(
        owner,
        resource,
        c.type_,
        &c.operation_id,
        c.attempt,
    ));
    c.retry_not_before = None;
    c.job_uid = None;
    c.lease_continuity_lost = false;
    c
}

/// Binds an Apply claim to the plan it runs and to what authorizes it: the
/// approval seen, or the policy when there is none.
pub fn authorize(
    c: &mut ActiveOperation,
    plan: (&str, &str, &str),
    approval: Option<&ApprovalSeen>,
) {
    let (name, uid, fingerprint) = plan;
    c.plan_name = Some(name.to_owned());
    c.plan_uid = Some(uid.to_owned());
    c.plan_fingerprint = Some(fingerprint.to_owned());
    match approval {
        Some(a) => {
            c.authorization = Some(Authorization::Approval);
            c.approval_name = Some(a.name.clone());
            c.approval_uid = Some(a.uid.clone());
            c.approver = a.approver.clone();
        }
        None => c.authorization = Some(Authorization::Policy),
    }
}

/// The journal entry of an approval spent at dispatch by Apply claim `c`.
pub fn approval_accepted(c: &ActiveOperation, name: &str, uid: &str, now: &Time) -> JournalEntry {
    let mut e = JournalEntry::new(JournalEntryType::ApprovalAccepted, now.clone());
    e.operation_id = Some(c.operation_id.clone());
    e.plan_name = c.plan_name.clone();
    e.plan_uid = c.plan_uid.clone();
    e.plan_fingerprint = c.plan_fingerprint.clone();
    e.approval_name = Some(name.to_owned());
    e.approval_uid = Some(uid.to_owned());
    e.approver = c.approver.clone();
    e.authorization = Some(Authorization::Approval);
    e
}

/// A journal entry of `type_` about Apply claim `c`: the operation, the plan
/// it ran, what authorized it, and its Job.
pub fn apply_entry(type_: JournalEntryType, c: &ActiveOperation, now: &Time) -> JournalEntry {
    let mut e = JournalEntry::new(type_, now.clone());
    e.operation_id = Some(c.operation_id.clone());
    e.plan_name = c.plan_name.clone();
    e.plan_uid = c.plan_uid.clone();
    e.plan_fingerprint = c.plan_fingerprint.clone();
    e.authorization = c.authorization;
    e.approval_name = c.approval_name.clone();
    e.approval_uid = c.approval_uid.clone();
    e.approver = c.approver.clone();
    e.job_name = c.job_name.clone();
    e.started_at = Some(c.started_at.clone());
    e
}

/// Whether the journal records an Apply spending the approval `uid`: a
/// spent approval authorizes nothing more, even the same plan published
/// again after a proof found its changes remaining.
pub fn spent_in(journal: &[JournalEntry], uid: &str) -> bool {
    journal.iter().any(|e| {
        e.type_ == JournalEntryType::ApprovalAccepted && e.approval_uid.as_deref() == Some(uid)
    })
}

/// The `PlanPublished` entry of the plan `(name, uid, fingerprint)`, at its
/// creation when the plan records one.
pub fn plan_published(
    plan: (&str, &str, &str),
    created_at: Option<&Time>,
    now: &Time,
) -> JournalEntry {
    let (name, uid, fingerprint) = plan;
    let mut e = JournalEntry::new(
        JournalEntryType::PlanPublished,
        created_at.cloned().unwrap_or_else(|| now.clone()),
    );
    e.plan_name = Some(name.to_owned());
    e.plan_uid = Some(uid.to_owned());
    e.plan_fingerprint = Some(fingerprint.to_owned());
    e
}

/// The journal entry of operation `op` failing for `reason`.
pub fn operation_failed(op: OperationType, reason: Reason, now: &Time) -> JournalEntry {
    let mut e = JournalEntry::new(JournalEntryType::OperationFailed, now.clone());
    e.operation = Some(op);
    e.reason = Some(reason);
    e
}

/// Claim `c` between attempts: no Job of its own, dispatched again at
/// `retry_not_before`.
pub fn between_attempts(c: &mut ActiveOperation, retry_not_before: Time) {
    c.dispatch_started = false;
    c.job_uid = None;
    c.retry_not_before = Some(retry_not_before);
}

/// When a status's next timer fires: an undispatched claim's retry delay, or
/// with no claim the next reconciliation (none while suspended); a
/// dispatched claim waits for its Job.
pub fn next_timer(
    claim: Option<&ActiveOperation>,
    suspended: bool,
    next_reconciliation: Option<&Time>,
) -> Option<Time> {
    match claim {
        Some(c) if !c.dispatch_started => c.retry_not_before.clone(),
        Some(_) => None,
        None if suspended => None,
        None => next_reconciliation.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::test_support::{approval, at, git_source, oci_source};

    fn inputs(op: OperationType, plan: Option<&str>) -> ClaimInputs<'_> {
        ClaimInputs {
            owner: OwnerKind::PtahMigration,
            resource: "orders",
            uid: "uid-1",
            generation: Some(1),
            op,
            source: None,
            execution_epoch: None,
            plan_fingerprint: plan,
            coordination_digest: None,
            target_identity_digest: None,
        }
    }

    #[test]
    fn claim_ids_differ_by_instant_and_apply_binds_its_plan() {
        let a = new_claim(inputs(OperationType::History, None), &at(0));
        let b = new_claim(inputs(OperationType::History, None), &at(1));
        assert_ne!(a.operation_id, b.operation_id);
        assert_eq!(a.input_fingerprint, b.input_fingerprint);
        let x = new_claim(inputs(OperationType::Apply, Some("p1")), &at(0));
        let y = new_claim(inputs(OperationType::Apply, Some("p2")), &at(0));
        assert_ne!(x.input_fingerprint, y.input_fingerprint);
        assert!(x.job_name.as_deref().is_some_and(|n| n.len() <= 63));
    }

    #[test]
    fn next_attempt_renames_the_job_and_clears_its_result() {
        let mut c = new_claim(inputs(OperationType::History, None), &at(0));
        c.job_uid = Some("j".into());
        c.retry_not_before = Some(at(30));
        let n = next_attempt(c.clone(), OwnerKind::PtahMigration, "orders");
        assert_eq!(n.attempt, 2);
        assert_eq!(n.operation_id, c.operation_id);
        assert_ne!(n.job_name, c.job_name);
        assert_eq!((n.job_uid, n.retry_not_before), (None, None));
    }

    #[test]
    fn due_and_plus() {
        assert!(due(None, &at(0)));
        assert!(due(Some(&at(0)), &at(0)));
        assert!(!due(Some(&at(1)), &at(0)));
        assert_eq!(plus(&at(0), Duration::from_secs(30)), at(30));
    }

    #[test]
    fn next_timer_is_the_retry_delay_or_the_next_reconciliation() {
        let mut c = new_claim(inputs(OperationType::History, None), &at(0));
        c.retry_not_before = Some(at(30));
        let next = Some(at(600));
        assert_eq!(next_timer(Some(&c), false, next.as_ref()), Some(at(30)));
        c.dispatch_started = true;
        assert_eq!(next_timer(Some(&c), false, next.as_ref()), None);
        assert_eq!(next_timer(None, false, next.as_ref()), Some(at(600)));
        assert_eq!(next_timer(None, true, next.as_ref()), None);
    }

    #[test]
    fn resolution_stamps_the_instant_and_names_what_was_pinned() {
        let (src, reason) = resolution(&oci_source("schema", 1), &at(3));
        assert_eq!(
            (src.resolved_at, reason),
            (Some(at(3)), Reason::DigestPinned)
        );
        let mut stamped = git_source(1);
        stamped.resolved_at = Some(at(1));
        let (src, reason) = resolution(&stamped, &at(3));
        assert_eq!(
            (src.resolved_at, reason),
            (Some(at(1)), Reason::CommitResolved)
        );
    }

    #[test]
    fn authorize_binds_the_plan_and_the_approval_or_the_policy() {
        let mut c = new_claim(inputs(OperationType::Apply, Some("fp")), &at(0));
        authorize(&mut c, ("plan", "plan-uid", "fp"), None);
        assert_eq!(c.authorization, Some(Authorization::Policy));
        assert_eq!(c.approval_name, None);
        let seen = approval("approval-uid", "plan-uid", "fp");
        authorize(&mut c, ("plan", "plan-uid", "fp"), Some(&seen));
        assert_eq!(c.authorization, Some(Authorization::Approval));
        assert_eq!(c.approval_uid.as_deref(), Some("approval-uid"));
        let e = approval_accepted(&c, "approve-orders", "approval-uid", &at(1));
        assert_eq!(e.type_, JournalEntryType::ApprovalAccepted);
        assert_eq!(e.plan_uid.as_deref(), Some("plan-uid"));
        assert_eq!(e.approver, seen.approver);
    }

    #[test]
    fn an_oci_binding_carries_the_signer_evidence_and_another_signer_is_another_binding() {
        use crate::api::source::SignerIdentity;
        use crate::lifecycle::test_support::evidence;
        let mut src = oci_source("schema", 1);
        assert_eq!(
            binding_of(&src).signer_evidence_digest,
            None,
            "not verified yet"
        );
        let mut accepted = evidence(2);
        accepted.signer_identity = Some(SignerIdentity {
            issuer: "https://issuer.example".into(),
            subject: "ci@example.com".into(),
        });
        src.verification = Some(accepted.clone());
        let one = binding_of(&src).signer_evidence_digest;
        assert!(
            one.as_deref().is_some_and(|d| d.starts_with("sha256:")),
            "{one:?}"
        );
        accepted.signer_identity = Some(SignerIdentity {
            issuer: "https://issuer.example".into(),
            subject: "someone-else@example.com".into(),
        });
        src.verification = Some(accepted);
        assert_ne!(binding_of(&src).signer_evidence_digest, one);
    }

    #[test]
    fn realm_refusals_name_their_reason() {
        assert_eq!(RealmVerdict::Ok.refusal(), None);
        assert_eq!(
            RealmVerdict::Conflict.refusal(),
            Some(Reason::RealmConflict)
        );
        assert_eq!(
            RealmVerdict::NotAuthorized.refusal(),
            Some(Reason::RealmNotAuthorized)
        );
    }
}

/// `sha256:` of `spec` without `suspend`: what tells a suspend or a resume
/// from an edit, recorded in status beside the generation it describes.
pub fn spec_digest<S: serde::Serialize>(spec: &S) -> Option<String> {
    let mut v = serde_json::to_value(spec).ok()?;
    if let Some(o) = v.as_object_mut() {
        o.remove("suspend");
    }
    Some(super::read_request::sha256_hex(v.to_string().as_bytes()))
}

#[cfg(test)]
mod spec_digest_tests {
    use super::spec_digest;

    #[test]
    fn the_spec_digest_ignores_suspend_alone() {
        let a = serde_json::json!({"interval": "5m", "suspend": false});
        let b = serde_json::json!({"interval": "5m", "suspend": true});
        let c = serde_json::json!({"interval": "6m", "suspend": false});
        assert_eq!(spec_digest(&a), spec_digest(&b));
        assert_ne!(spec_digest(&a), spec_digest(&c));
        let d = spec_digest(&a).expect("a digest");
        assert!(d.starts_with("sha256:") && d.len() == 7 + 64, "{d}");
    }
}

/// Declares an observation enum: the words both families share (the
/// variants of [`Seen`]), then the family's own.
macro_rules! with_seen {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($own:tt)* }) => {
        $(#[$m])*
        $vis enum $name {
            /// A pass with nothing new: timers (interval, retry delay, the pass after
            /// Pending), `spec.suspend` and a read request are looked at.
            Pass,
            /// The manager took the ConfigMap source's snapshot (Resolve, no Job).
            SnapshotTaken($crate::api::source::SourceStatus),
            /// A Resolve Job pinned the Git commit or the OCI digest.
            SourceResolved($crate::api::source::SourceStatus),
            /// The source was refused (the source policy, a Git host), the rule named.
            SourceRefused {
                /// The message naming the rule.
                message: String,
            },
            /// An input of the source changed: the source ConfigMap or the source
            /// policy. Read at once.
            SourceChanged,
            /// Verify accepted the artifact.
            VerificationSatisfied($crate::api::source::VerificationEvidence),
            /// Verify refused the artifact.
            VerificationRefused {
                /// Why.
                message: String,
            },
            /// The verification policy ConfigMap changed.
            VerificationPolicyChanged,
            /// A read's Job failed (or its result was refused).
            JobFailed {
                /// The reason of the failure.
                reason: $crate::api::condition::Reason,
                /// A diagnostic.
                message: String,
            },
            /// The claim's Job could not be built, or was held to its admission
            /// snapshot: none exists.
            JobNotBuilt {
                /// `PodAdmissionRefused`, `ConfigurationError`, …
                reason: $crate::api::condition::Reason,
                /// A diagnostic.
                message: String,
            },
            /// The claim's dispatched Job is gone, or its result unreadable.
            JobLost,
            /// An approval of some plan of this resource exists.
            ApprovalExists($crate::lifecycle::common::ApprovalSeen),
            /// The approval the Apply claim names no longer exists.
            ApprovalAbsent,
            /// The claim's realm Lease was acquired with a new epoch.
            LeaseAcquired {
                /// The epoch.
                epoch: String,
                /// Its duration in seconds.
                duration_seconds: i32,
            },
            /// The realm Lease is held by another holder, or was lost.
            LeaseLost,
            /// The persisted epoch no longer owns an uninterrupted lock interval.
            LeaseContinuityLost,
            /// The realm census's verdict.
            Realm($crate::lifecycle::common::RealmVerdict),
            /// `spec.target.engine` is not one the operator implements.
            EngineUnsupported,
            /// `spec.suspend` changed.
            SuspendChanged,
            /// `metadata.generation` moved.
            GenerationMoved,
            /// The execution components changed: a new epoch.
            ExecutionBindingChanged($crate::api::status::ExecutionBinding),
            /// The resource or something it names is misconfigured.
            ConfigurationError {
                /// Which field or rule.
                message: String,
            },
            $($own)*
        }
    };
}
pub(crate) use with_seen;

/// Declares an effect enum: the words both families share (the variants of
/// [`Shared`]), then the family's own.
macro_rules! with_shared {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($own:tt)* }) => {
        $(#[$m])*
        $vis enum $name {
            /// Take the ConfigMap snapshot (a Resolve in the manager) and step again
            /// with `SnapshotTaken`.
            TakeSnapshot,
            /// Acquire the database-realm Lease for the claim and step again with
            /// `LeaseAcquired` or `LeaseLost`.
            AcquireLease {
                /// The claim.
                operation_id: String,
            },
            /// Create the claim's Job (dispatch protocol: `dispatchStarted` is in the
            /// status just written; one create; adopt by name).
            StartJob {
                /// The operation.
                operation: $crate::api::status::OperationType,
                /// The reserved name.
                job_name: String,
            },
            /// Retire the plan: it authorizes nothing any more.
            RetirePlan {
                /// The plan's name.
                name: String,
                /// Why.
                reason: $crate::api::condition::Reason,
            },
            /// Mark the approval consumed, at dispatch.
            SpendApproval {
                /// The approval's name.
                name: String,
                /// Its UID.
                uid: String,
            },
            /// Release the Lease (also staged in `status.pendingLockRelease`).
            ReleaseLease($crate::api::status::PendingLockRelease),
            /// Emit an Event.
            Event {
                /// A Warning rather than Normal.
                warning: bool,
                /// The reason.
                reason: $crate::api::condition::Reason,
                /// The note.
                message: String,
            },
            /// Step again no later than this instant.
            RequeueAt(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
            $($own)*
        }
    };
}
pub(crate) use with_shared;

with_seen! {
    /// What either family's machine observes in the same words: the controller's
    /// one pass builds these, and each machine takes them as its own
    /// observation of the same name ([`shared_words!`]).
    #[derive(Clone, Debug, PartialEq)]
    pub enum Seen {}
}

with_shared! {
    /// What either family's machine asks of the controller in the same words;
    /// the rest of a family's effects are its own.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Shared {}
}

/// Takes [`Seen`] into a family's `Observation`, and gives a family's
/// `Effect` as [`Shared`] where it is one: the shared words are written once,
/// for both machines.
macro_rules! shared_words {
    ($obs:ident, $fx:ident) => {
        impl From<$crate::lifecycle::common::Seen> for $obs {
            fn from(s: $crate::lifecycle::common::Seen) -> Self {
                use $crate::lifecycle::common::Seen as S;
                match s {
                    S::Pass => $obs::Pass,
                    S::SnapshotTaken(s) => $obs::SnapshotTaken(s),
                    S::SourceResolved(s) => $obs::SourceResolved(s),
                    S::SourceRefused { message } => $obs::SourceRefused { message },
                    S::SourceChanged => $obs::SourceChanged,
                    S::VerificationSatisfied(e) => $obs::VerificationSatisfied(e),
                    S::VerificationRefused { message } => $obs::VerificationRefused { message },
                    S::VerificationPolicyChanged => $obs::VerificationPolicyChanged,
                    S::JobFailed { reason, message } => $obs::JobFailed { reason, message },
                    S::JobNotBuilt { reason, message } => $obs::JobNotBuilt { reason, message },
                    S::JobLost => $obs::JobLost,
                    S::ApprovalExists(a) => $obs::ApprovalExists(a),
                    S::ApprovalAbsent => $obs::ApprovalAbsent,
                    S::LeaseAcquired {
                        epoch,
                        duration_seconds,
                    } => $obs::LeaseAcquired {
                        epoch,
                        duration_seconds,
                    },
                    S::LeaseLost => $obs::LeaseLost,
                    S::LeaseContinuityLost => $obs::LeaseContinuityLost,
                    S::Realm(v) => $obs::Realm(v),
                    S::EngineUnsupported => $obs::EngineUnsupported,
                    S::SuspendChanged => $obs::SuspendChanged,
                    S::GenerationMoved => $obs::GenerationMoved,
                    S::ExecutionBindingChanged(b) => $obs::ExecutionBindingChanged(b),
                    S::ConfigurationError { message } => $obs::ConfigurationError { message },
                }
            }
        }

        impl From<$crate::lifecycle::common::Shared> for $fx {
            fn from(s: $crate::lifecycle::common::Shared) -> Self {
                use $crate::lifecycle::common::Shared as S;
                match s {
                    S::TakeSnapshot => $fx::TakeSnapshot,
                    S::AcquireLease { operation_id } => $fx::AcquireLease { operation_id },
                    S::StartJob {
                        operation,
                        job_name,
                    } => $fx::StartJob {
                        operation,
                        job_name,
                    },
                    S::RetirePlan { name, reason } => $fx::RetirePlan { name, reason },
                    S::SpendApproval { name, uid } => $fx::SpendApproval { name, uid },
                    S::ReleaseLease(r) => $fx::ReleaseLease(r),
                    S::Event {
                        warning,
                        reason,
                        message,
                    } => $fx::Event {
                        warning,
                        reason,
                        message,
                    },
                    S::RequeueAt(t) => $fx::RequeueAt(t),
                }
            }
        }

        impl $fx {
            /// Whether the controller may perform this effect only once the
            /// status that asks it is stored. A snapshot (named by its
            /// content), an Event and a requeue need nothing stored: the
            /// status that follows them carries what they did. A Lease is
            /// taken only for a claim already stored: a manager whose claim
            /// lost the write race to another's takes none, and so leaves no
            /// Lease that no claim names (held for its whole duration).
            /// Everything else follows its status.
            pub fn needs_stored_status(&self) -> bool {
                !matches!(
                    self,
                    $fx::TakeSnapshot | $fx::Event { .. } | $fx::RequeueAt(_)
                )
            }

            /// This effect in the words both families share, or itself when
            /// it is the family's own.
            #[allow(
                clippy::result_large_err,
                reason = "the effect is moved, not copied, once per step"
            )]
            pub fn shared(self) -> Result<$crate::lifecycle::common::Shared, Self> {
                use $crate::lifecycle::common::Shared as S;
                Ok(match self {
                    $fx::TakeSnapshot => S::TakeSnapshot,
                    $fx::AcquireLease { operation_id } => S::AcquireLease { operation_id },
                    $fx::StartJob {
                        operation,
                        job_name,
                    } => S::StartJob {
                        operation,
                        job_name,
                    },
                    $fx::RetirePlan { name, reason } => S::RetirePlan { name, reason },
                    $fx::SpendApproval { name, uid } => S::SpendApproval { name, uid },
                    $fx::ReleaseLease(r) => S::ReleaseLease(r),
                    $fx::Event {
                        warning,
                        reason,
                        message,
                    } => S::Event {
                        warning,
                        reason,
                        message,
                    },
                    $fx::RequeueAt(t) => S::RequeueAt(t),
                    own => return Err(own),
                })
            }
        }
    };
}
pub(crate) use shared_words;
