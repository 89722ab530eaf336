//! Pieces both lifecycles share, pure: instants plus durations, the digests a
//! claim is named by, the claim itself (written before its Job), a retry under
//! the same claim, and whether two resolutions are the same content. The
//! schema machine keeps private copies of some of these from before this
//! module existed; new code uses these.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

use super::read_request::sha256_hex;
use super::schema::binding_of;
use crate::api::source::SourceStatus;
use crate::api::status::{ActiveOperation, OperationType, SourceBinding};
use crate::execution::job::OwnerKind;

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

/// The claim's deterministic Job name: the Job builder's, so the name the
/// claim reserves is the name the Job is created under.
pub fn job_name(
    kind: OwnerKind,
    resource: &str,
    op: OperationType,
    operation_id: &str,
    attempt: i32,
) -> String {
    crate::execution::job::job_name(kind, op, resource, operation_id, attempt).unwrap_or_else(
        |_| {
            // Only a resource name the API server would refuse gets here.
            let short: String = operation_id
                .trim_start_matches("sha256:")
                .chars()
                .take(16)
                .collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(1_767_225_600 + s).expect("time"))
    }

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
}
