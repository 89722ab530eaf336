//! Stage 3, the decision: a person approves one exact plan, or acknowledges one
//! exact unresolved run. Admission stamps who and when; the spec is immutable.

#![allow(
    clippy::duplicated_attributes,
    reason = "each printcolumn(...) of the kube derive repeats type_ = \"string\" by design"
)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Identity, ObjectRef, pattern};
use super::condition::{AcknowledgmentConditionType, ApprovalConditionType, Condition};
use super::source::{SignerIdentity, SourceKind, VerificationEvidence};
use super::status::SourceBinding;

/// What an approval approved, in the words of the plan's source binding:
/// where the plan's desired state came from and, for a signed artifact, who
/// signed it. `kubectl ptah approve` writes it from the plan it showed;
/// admission refuses one that is not the plan's, so an approval that names
/// its source names the right one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovedSource {
    /// `ConfigMap`, `Git`, `OCI` or `Flux`.
    pub kind: SourceKind,
    /// The content digest of the files (ConfigMap, Git, Flux) or the
    /// manifest digest (OCI) the plan was computed from.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub content_digest: String,
    /// The commit (Git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::GIT_COMMIT))]
    pub commit: Option<String>,
    /// The artifact pinned by digest (OCI, a verified Flux `OCIRepository`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub resolved_reference: Option<String>,
    /// Flux's revision of the artifact (Flux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub flux_revision: Option<String>,
    /// Digest of the verified signer evidence the plan bound (OCI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub signer_evidence_digest: Option<String>,
    /// The keyless signer of that evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer_identity: Option<SignerIdentity>,
    /// SHA-256 fingerprint of the key or certificate of that evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub key_fingerprint: Option<String>,
}

impl ApprovedSource {
    /// The plan's source `b`, with the signer named from `verified` (the
    /// resource's current evidence) only when it is the evidence `b` bound.
    pub fn of(b: &SourceBinding, verified: Option<&VerificationEvidence>) -> Self {
        let evidence = b.signer_evidence_digest.as_ref().and_then(|bound| {
            verified.filter(|v| super::status::signer_evidence_digest(v).as_ref() == Some(bound))
        });
        ApprovedSource {
            kind: b.kind,
            content_digest: b.content_digest.clone(),
            commit: b.commit.clone(),
            resolved_reference: b.resolved_reference.clone(),
            flux_revision: b.flux_revision.clone(),
            signer_evidence_digest: b.signer_evidence_digest.clone(),
            signer_identity: evidence.and_then(|v| v.signer_identity.clone()),
            key_fingerprint: evidence.and_then(|v| v.key_fingerprint.clone()),
        }
    }

    /// The first field where `self` (what an approval names) differs from
    /// `plan` (what the plan bound): its path under `spec.source`, and the
    /// two values. A field the approval leaves out is not compared.
    pub fn differs_from(&self, plan: &ApprovedSource) -> Option<(&'static str, String, String)> {
        fn show<T: Serialize>(v: &T) -> String {
            match serde_json::to_value(v) {
                Ok(serde_json::Value::String(s)) => s,
                Ok(serde_json::Value::Null) => "(none)".into(),
                Ok(other) => other.to_string(),
                Err(_) => "?".into(),
            }
        }
        // What the approval names is compared; what it leaves out is not a
        // claim (the kind and the digest it always names).
        let named = |v: &Option<String>| v.as_ref().map(show);
        let pairs = [
            ("spec.source.kind", Some(show(&self.kind)), show(&plan.kind)),
            (
                "spec.source.contentDigest",
                Some(show(&self.content_digest)),
                show(&plan.content_digest),
            ),
            (
                "spec.source.commit",
                named(&self.commit),
                show(&plan.commit),
            ),
            (
                "spec.source.resolvedReference",
                named(&self.resolved_reference),
                show(&plan.resolved_reference),
            ),
            (
                "spec.source.fluxRevision",
                named(&self.flux_revision),
                show(&plan.flux_revision),
            ),
            (
                "spec.source.signerEvidenceDigest",
                named(&self.signer_evidence_digest),
                show(&plan.signer_evidence_digest),
            ),
            (
                "spec.source.signerIdentity",
                self.signer_identity.as_ref().map(show),
                show(&plan.signer_identity),
            ),
            (
                "spec.source.keyFingerprint",
                named(&self.key_fingerprint),
                show(&plan.key_fingerprint),
            ),
        ];
        pairs
            .into_iter()
            .filter_map(|(f, a, b)| a.map(|a| (f, a, b)))
            .find(|(_, a, b)| a != b)
    }
}

/// A person's approval of one exact schema plan.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahSchemaApproval",
    plural = "ptahschemaapprovals",
    namespaced,
    status = "ApprovalStatus",
    derive = "PartialEq",
    shortname = "ptahapprove",
    category = "ptah",
    doc = "PtahSchemaApproval approves one exact PtahSchemaPlan, named by UID and fingerprint, for one PtahSchema, named by UID. Admission stamps the approver and the time; an approval of a plan that was replaced authorizes nothing.",
    printcolumn(name = "Schema", type_ = "string", json_path = ".spec.schemaRef.name"),
    printcolumn(name = "Plan", type_ = "string", json_path = ".spec.planRef.name"),
    printcolumn(
        name = "Approver",
        type_ = "string",
        json_path = ".spec.approver.username"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Stale",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Stale\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("spec of a PtahSchemaApproval is immutable: approve a new plan with a new approval"))]
#[serde(rename_all = "camelCase")]
pub struct PtahSchemaApprovalSpec {
    /// The PtahSchema, by name and UID.
    pub schema_ref: ObjectRef,
    /// The PtahSchemaPlan approved, by name and UID.
    pub plan_ref: ObjectRef,
    /// The plan's `spec.fingerprint`: every binding the plan carries.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub plan_fingerprint: String,
    /// The plan's source and signer, as the approver saw them: optional, and
    /// refused by admission unless it is the plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ApprovedSource>,
    /// Who approved: stamped by admission from the authenticated request; a
    /// client's value is overwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<Identity>,
    /// When: stamped by admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Time>,
    /// UID of the admission request that stamped the approval.
    #[serde(
        rename = "mutationRequestUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub mutation_request_uid: Option<String>,
    /// The admission webhook's signature of this stamp, with a key only the
    /// manager holds: a stamp it cannot verify authorizes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub stamp_signature: Option<String>,
}

/// A person's approval of one exact migration sequence against one history.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahMigrationApproval",
    plural = "ptahmigrationapprovals",
    namespaced,
    status = "ApprovalStatus",
    derive = "PartialEq",
    shortname = "ptahmapprove",
    category = "ptah",
    doc = "PtahMigrationApproval approves one exact PtahMigrationPlan, named by UID and fingerprint (which binds the history it continues), for one PtahMigration. Admission stamps the approver and the time; one run spends it.",
    printcolumn(
        name = "Migration",
        type_ = "string",
        json_path = ".spec.migrationRef.name"
    ),
    printcolumn(name = "Plan", type_ = "string", json_path = ".spec.planRef.name"),
    printcolumn(
        name = "Approver",
        type_ = "string",
        json_path = ".spec.approver.username"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Stale",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Stale\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("spec of a PtahMigrationApproval is immutable: approve a new plan with a new approval"))]
#[serde(rename_all = "camelCase")]
pub struct PtahMigrationApprovalSpec {
    /// The PtahMigration, by name and UID.
    pub migration_ref: ObjectRef,
    /// The PtahMigrationPlan approved, by name and UID.
    pub plan_ref: ObjectRef,
    /// The plan's `spec.fingerprint`: the sequence, the history it continues
    /// and every other binding.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub plan_fingerprint: String,
    /// The plan's source and signer, as the approver saw them: optional, and
    /// refused by admission unless it is the plan's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ApprovedSource>,
    /// Who approved: stamped by admission from the authenticated request; a
    /// client's value is overwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<Identity>,
    /// When: stamped by admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Time>,
    /// UID of the admission request that stamped the approval.
    #[serde(
        rename = "mutationRequestUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub mutation_request_uid: Option<String>,
    /// The admission webhook's signature of this stamp, with a key only the
    /// manager holds: a stamp it cannot verify authorizes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub stamp_signature: Option<String>,
}

/// What became of an approval.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Consumed` and `Stale`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition<ApprovalConditionType>>,
}

/// A person's statement that they established what an unresolved run did.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahMigrationRunAcknowledgment",
    plural = "ptahmigrationrunacknowledgments",
    namespaced,
    status = "AcknowledgmentStatus",
    derive = "PartialEq",
    shortname = "ptahmack",
    category = "ptah",
    doc = "PtahMigrationRunAcknowledgment settles a PtahMigration's unresolved run (status.unresolvedRun), named by its operationID, after a person established what the run did. Admission stamps who and when; the migration then reads its history again and plans what is still pending.",
    printcolumn(
        name = "Migration",
        type_ = "string",
        json_path = ".spec.migrationRef.name"
    ),
    printcolumn(
        name = "Acknowledged By",
        type_ = "string",
        json_path = ".spec.acknowledgedBy.username"
    ),
    printcolumn(
        name = "Consumed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Consumed\")].status"
    ),
    printcolumn(
        name = "Stale",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Stale\")].status"
    ),
    printcolumn(
        name = "Operation",
        type_ = "string",
        json_path = ".spec.operationID",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("spec of a PtahMigrationRunAcknowledgment is immutable"))]
#[serde(rename_all = "camelCase")]
pub struct PtahMigrationRunAcknowledgmentSpec {
    /// The PtahMigration, by name and UID.
    pub migration_ref: ObjectRef,
    /// The run acknowledged: its `status.unresolvedRun.operationID`.
    #[serde(rename = "operationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: String,
    /// Who acknowledged: stamped by admission from the authenticated request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_by: Option<Identity>,
    /// When: stamped by admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Time>,
    /// UID of the admission request that stamped it.
    #[serde(
        rename = "mutationRequestUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub mutation_request_uid: Option<String>,
    /// The admission webhook's signature of this stamp, with a key only the
    /// manager holds: a stamp it cannot verify authorizes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 80))]
    pub stamp_signature: Option<String>,
}

/// What became of an acknowledgment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcknowledgmentStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Consumed` or `Stale`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition<AcknowledgmentConditionType>>,
}

/// What both families' approvals say in the same words: the resource and
/// the one plan they approve, who approved and when, and their status.
pub trait Approval:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Serialize
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// Its spec's type, which admission's signature covers.
    type Spec: Serialize;
    /// Its spec.
    fn spec(&self) -> &Self::Spec;
    /// The resource it approves a plan of.
    fn owner(&self) -> &ObjectRef;
    /// The plan it approves.
    fn plan_ref(&self) -> &ObjectRef;
    /// The fingerprint of that plan.
    fn plan_fingerprint(&self) -> &str;
    /// Who approved, as admission stamped it.
    fn approver(&self) -> Option<&Identity>;
    /// When admission stamped it.
    fn approved_at(&self) -> Option<&Time>;
    /// Its status.
    fn status(&self) -> Option<&ApprovalStatus>;
    /// Its status, to edit.
    fn status_mut(&mut self) -> &mut Option<ApprovalStatus>;
    /// An Apply spent it at its dispatch (`Consumed=True`): it authorizes
    /// nothing more, not even the same plan published again.
    fn consumed(&self) -> bool {
        self.status().is_some_and(|st| {
            crate::api::conditions::is_true(&st.conditions, ApprovalConditionType::Consumed)
        })
    }
}

/// Implements [`Approval`] on an approval kind by the field naming its
/// resource.
macro_rules! approval {
    ($kind:ty, $spec:ty, $owner:ident) => {
        impl Approval for $kind {
            type Spec = $spec;
            fn spec(&self) -> &$spec {
                &self.spec
            }
            fn owner(&self) -> &ObjectRef {
                &self.spec.$owner
            }
            fn plan_ref(&self) -> &ObjectRef {
                &self.spec.plan_ref
            }
            fn plan_fingerprint(&self) -> &str {
                &self.spec.plan_fingerprint
            }
            fn approver(&self) -> Option<&Identity> {
                self.spec.approver.as_ref()
            }
            fn approved_at(&self) -> Option<&Time> {
                self.spec.approved_at.as_ref()
            }
            fn status(&self) -> Option<&ApprovalStatus> {
                self.status.as_ref()
            }
            fn status_mut(&mut self) -> &mut Option<ApprovalStatus> {
                &mut self.status
            }
        }
    };
}

approval!(PtahSchemaApproval, PtahSchemaApprovalSpec, schema_ref);
approval!(
    PtahMigrationApproval,
    PtahMigrationApprovalSpec,
    migration_ref
);
