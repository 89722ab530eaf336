//! Status pieces both families share: the execution binding, the source
//! binding of an operation or a plan, and the claim (`status.activeOperation`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Identity, pattern};
use super::source::SourceKind;

/// The execution components an operation runs under. Any change (a rollback
/// to identical values too) starts a new epoch, and a plan bound to the old
/// epoch authorizes nothing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionBinding {
    /// The epoch: `v1-` and 32 hex digits, new whenever a component changes.
    #[schemars(regex(pattern = pattern::EXECUTION_EPOCH))]
    pub epoch: String,
    /// Version of the manager's state semantics.
    #[schemars(range(min = 1))]
    pub controller_state_version: i64,
    /// Version of Ptah in the executor image.
    #[schemars(length(min = 1, max = 128))]
    pub ptah_version: String,
    /// The executor image, by digest.
    #[schemars(length(min = 1, max = 1024))]
    pub executor_image: String,
    /// Version of the protocol between manager and runner.
    #[schemars(range(min = 1))]
    pub runner_protocol_version: i64,
}

/// The source as an operation or a plan is bound to it (plan contract v2): a
/// ConfigMap by UID and content digest, Git by the digest of URL and path and
/// the content digest, OCI by artifact digest and verification evidence; the
/// source policy beside ConfigMap and Git.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceBinding {
    /// `ConfigMap`, `Git`, `OCI` or `Flux`.
    pub kind: SourceKind,
    /// Content digest of the selected files (ConfigMap, Git, Flux) or the
    /// manifest digest (OCI).
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub content_digest: String,
    /// UID of the source ConfigMap (ConfigMap).
    #[serde(
        rename = "configMapUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub config_map_uid: Option<String>,
    /// Name of the snapshot ConfigMap the operation mounts (ConfigMap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub snapshot_name: Option<String>,
    /// SHA-256 of repository URL and path (Git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub location_digest: Option<String>,
    /// The commit (Git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::GIT_COMMIT))]
    pub commit: Option<String>,
    /// The reference pinned by digest (OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub resolved_reference: Option<String>,
    /// UID of the source policy ConfigMap (ConfigMap, Git).
    #[serde(
        rename = "sourcePolicyUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub source_policy_uid: Option<String>,
    /// Digest of the source policy (ConfigMap, Git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub source_policy_digest: Option<String>,
    /// UID of the verification policy ConfigMap (OCI).
    #[serde(
        rename = "verificationPolicyUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub verification_policy_uid: Option<String>,
    /// Digest of the verification policy (OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub verification_policy_digest: Option<String>,
    /// Digest of the verified signer evidence (OCI): signer identity or key,
    /// trust root and signature, as canonical JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub signer_evidence_digest: Option<String>,
    /// UID of the Flux object (Flux).
    #[serde(
        rename = "fluxObjectUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub flux_object_uid: Option<String>,
    /// Flux's revision of the artifact (Flux): `main@sha1:…`, `v1@sha256:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub flux_revision: Option<String>,
}

impl SourceBinding {
    /// The binding of files a ConfigMap gave (`config_map_uid`), mounted
    /// from the snapshot `snapshot_name`.
    pub fn of_config_map(
        content_digest: String,
        config_map_uid: Option<String>,
        snapshot_name: Option<String>,
    ) -> Self {
        SourceBinding {
            kind: SourceKind::ConfigMap,
            content_digest,
            config_map_uid,
            snapshot_name,
            location_digest: None,
            commit: None,
            resolved_reference: None,
            source_policy_uid: None,
            source_policy_digest: None,
            verification_policy_uid: None,
            verification_policy_digest: None,
            signer_evidence_digest: None,
            flux_object_uid: None,
            flux_revision: None,
        }
    }
}

/// An operation the operator runs as a Job (or, for a ConfigMap Resolve, in
/// the manager).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum OperationType {
    /// Pin the source: snapshot, commit or digest.
    Resolve,
    /// Evaluate the verification policy (OCI).
    Verify,
    /// Read the database's drift (schema).
    Observe,
    /// Compute the plan (schema).
    Plan,
    /// Read the revision table (migration).
    History,
    /// Change the database.
    Apply,
}

/// What authorized an Apply.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Authorization {
    /// A person's approval of that exact plan.
    Approval,
    /// `apply: Always`.
    Policy,
}

/// The claim: the operation in flight, written before its Job and outliving
/// it. A Job under the claim's reserved name is an attempt under way.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveOperation {
    /// The operation.
    #[serde(rename = "type")]
    pub type_: OperationType,
    /// Identity of the operation: SHA-256 of its kind and bound inputs.
    #[serde(rename = "operationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: String,
    /// SHA-256 of the inputs the operation is bound to; a change discards it.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub input_fingerprint: String,
    /// The Job's name, reserved before the Job is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub job_name: Option<String>,
    /// The Job's UID, once it is known.
    #[serde(rename = "jobUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub job_uid: Option<String>,
    /// Attempt number under this claim, from 1.
    #[schemars(range(min = 1))]
    pub attempt: i32,
    /// When the claim was made.
    pub started_at: Time,
    /// No new attempt before this instant (the failure retry delay, kept across
    /// restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_not_before: Option<Time>,
    /// Set immediately before the one permitted Job create; never cleared for
    /// a mutating claim.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dispatch_started: bool,
    /// The Job must start before this instant, or the runner refuses to act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_not_after: Option<Time>,
    /// The operation must end before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_not_after: Option<Time>,
    /// The execution epoch the operation runs under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::EXECUTION_EPOCH))]
    pub execution_epoch: Option<String>,
    /// The source the operation reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceBinding>,
    /// Digest of the coordination identity (key or realm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: Option<String>,
    /// The target identity the operation is bound to, as an earlier operation
    /// derived it in its Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: Option<String>,
    /// Epoch of the database-realm Lease held (Plan and Apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::EXECUTION_EPOCH))]
    pub lease_epoch: Option<String>,
    /// Duration of the Lease, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 86460))]
    pub lease_duration_seconds: Option<i32>,
    /// The Lease was not held without interruption: any result is discarded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lease_continuity_lost: bool,
    /// Name of the plan an Apply runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub plan_name: Option<String>,
    /// UID of that plan.
    #[serde(rename = "planUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub plan_uid: Option<String>,
    /// Fingerprint of that plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub plan_fingerprint: Option<String>,
    /// What authorized the Apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Name of the approval an Apply spends, recorded before dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub approval_name: Option<String>,
    /// UID of that approval.
    #[serde(
        rename = "approvalUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub approval_uid: Option<String>,
    /// Who approved, as admission stamped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<Identity>,
    /// Digest of the Pod admission snapshot the Job is held to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub admission_snapshot_digest: Option<String>,
}

/// A Lease release owed: retried first on every pass.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingLockRelease {
    /// Digest of the coordination identity the Lease guards.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: String,
    /// The operation that held the Lease.
    #[serde(rename = "operationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: String,
    /// Epoch of the Lease.
    #[schemars(regex(pattern = pattern::EXECUTION_EPOCH))]
    pub lease_epoch: String,
    /// Duration of the Lease, in seconds.
    #[schemars(range(min = 5, max = 86460))]
    pub lease_duration_seconds: i32,
}

/// The binding a claim records, from the resolution in status.
pub fn binding_of(src: &crate::api::source::SourceStatus) -> SourceBinding {
    SourceBinding {
        kind: src.kind,
        content_digest: src.content_digest.clone(),
        config_map_uid: src.config_map.as_ref().map(|c| c.uid.clone()),
        snapshot_name: src
            .config_map
            .as_ref()
            .map(|c| c.snapshot_name.clone())
            .or_else(|| src.flux.as_ref().map(|f| f.snapshot_name.clone())),
        location_digest: src.git.as_ref().map(|g| g.location_digest.clone()),
        commit: src.git.as_ref().map(|g| g.commit.clone()),
        resolved_reference: src.oci.as_ref().map(|o| o.resolved_reference.clone()),
        source_policy_uid: src.source_policy.as_ref().map(|p| p.uid.clone()),
        source_policy_digest: src.source_policy.as_ref().map(|p| p.digest.clone()),
        verification_policy_uid: src.verification.as_ref().map(|v| v.policy.uid.clone()),
        verification_policy_digest: src.verification.as_ref().map(|v| v.policy.digest.clone()),
        signer_evidence_digest: src.verification.as_ref().and_then(signer_evidence_digest),
        flux_object_uid: src.flux.as_ref().map(|f| f.uid.clone()),
        flux_revision: src.flux.as_ref().map(|_| src.revision.clone()),
    }
}

/// The digest plan contract v2 binds of what Verify accepted: the signer's
/// identity or key, the trust root and the signature. A plan of the same
/// bytes signed by someone else is another plan.
pub fn signer_evidence_digest(v: &crate::api::source::VerificationEvidence) -> Option<String> {
    let identity = v.signer_identity.as_ref();
    supplychain::contract::SignerEvidence {
        authority: v.authority.clone(),
        issuer: identity.map(|i| i.issuer.clone()),
        subject: identity.map(|i| i.subject.clone()),
        key_fingerprint: v.key_fingerprint.clone(),
        trust_root_digest: v.trust_root_digest.clone(),
        signature_digest: v.signature_digest.clone(),
        transparency_log_verified: v.transparency_log_verified,
    }
    .digest()
    .ok()
}

/// What both families' statuses record in the same fields: the claim, the
/// Lease release owed, the source, the execution binding and what the spec
/// was when status last observed it. The controller's one pass reads and
/// edits these through this trait.
pub trait OperationStatus:
    Clone + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static
{
    /// `status.activeOperation`.
    fn active_operation(&self) -> Option<&ActiveOperation>;
    /// `status.activeOperation`, to edit.
    fn active_operation_mut(&mut self) -> &mut Option<ActiveOperation>;
    /// `status.pendingLockRelease`.
    fn pending_lock_release(&self) -> Option<&PendingLockRelease>;
    /// `status.pendingLockRelease`, to edit.
    fn pending_lock_release_mut(&mut self) -> &mut Option<PendingLockRelease>;
    /// `status.source`.
    fn source(&self) -> Option<&crate::api::source::SourceStatus>;
    /// `status.executionBinding`.
    fn execution_binding(&self) -> Option<&ExecutionBinding>;
    /// `status.executionBinding`, to edit.
    fn execution_binding_mut(&mut self) -> &mut Option<ExecutionBinding>;
    /// `status.nextReconciliationTime`.
    fn next_reconciliation_time(&self) -> Option<&Time>;
    /// `status.observedGeneration` and `status.observedSpecDigest`.
    fn observed(&self) -> (Option<i64>, Option<&str>);
    /// `status.trace`.
    fn trace(&self) -> Option<&super::trace::ChangeTrace>;
    /// `status.trace`, to edit.
    fn trace_mut(&mut self) -> &mut Option<super::trace::ChangeTrace>;
}

/// Implements [`OperationStatus`] on a family's status by its field names.
macro_rules! operation_status {
    ($st:ty) => {
        impl $crate::api::status::OperationStatus for $st {
            fn active_operation(&self) -> Option<&$crate::api::status::ActiveOperation> {
                self.active_operation.as_ref()
            }
            fn active_operation_mut(
                &mut self,
            ) -> &mut Option<$crate::api::status::ActiveOperation> {
                &mut self.active_operation
            }
            fn pending_lock_release(&self) -> Option<&$crate::api::status::PendingLockRelease> {
                self.pending_lock_release.as_ref()
            }
            fn pending_lock_release_mut(
                &mut self,
            ) -> &mut Option<$crate::api::status::PendingLockRelease> {
                &mut self.pending_lock_release
            }
            fn source(&self) -> Option<&$crate::api::source::SourceStatus> {
                self.source.as_ref()
            }
            fn execution_binding(&self) -> Option<&$crate::api::status::ExecutionBinding> {
                self.execution_binding.as_ref()
            }
            fn execution_binding_mut(
                &mut self,
            ) -> &mut Option<$crate::api::status::ExecutionBinding> {
                &mut self.execution_binding
            }
            fn next_reconciliation_time(
                &self,
            ) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
                self.next_reconciliation_time.as_ref()
            }
            fn observed(&self) -> (Option<i64>, Option<&str>) {
                (
                    self.observed_generation,
                    self.observed_spec_digest.as_deref(),
                )
            }
            fn trace(&self) -> Option<&$crate::api::trace::ChangeTrace> {
                self.trace.as_ref()
            }
            fn trace_mut(&mut self) -> &mut Option<$crate::api::trace::ChangeTrace> {
                &mut self.trace
            }
        }
    };
}
pub(crate) use operation_status;
