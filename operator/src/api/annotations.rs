//! Annotation, label and finalizer names of the API. A name is an interface:
//! people, GitOps tools and restores write and read these exact strings.

/// An RFC 3339 instant asking a PtahSchema or PtahMigration for a read now.
/// Answered once no operation runs; recorded in `status.lastReadRequest`.
pub const READ_REQUESTED_AT: &str = "operator.ptah.run/read-requested-at";

/// A read request value longer than this many bytes is recorded as
/// `sha256:<hex>` of it.
pub const READ_REQUEST_MAX_BYTES: usize = 64;

/// Set by a person on a PtahSchema Blocked with `TargetIdentityChanged` to
/// settle the proof whose target moved. Its value names the Apply claim
/// (`status.pendingObservation.applyOperationID`) being given up.
pub const SETTLED_APPLY: &str = "operator.ptah.run/settled-apply";

/// The manager's JSON copy of a PtahMigration's `status.unresolvedRun`,
/// written before the status and removed after it, so a restore that drops
/// status still holds the resource.
pub const UNRESOLVED_RUN: &str = "operator.ptah.run/unresolved-run";

/// Finalizer of a PtahSchema while an operation may still be in flight.
pub const SCHEMA_FINALIZER: &str = "operator.ptah.run/active-operation";

/// Finalizer of a PtahMigration while a run may still be in flight.
pub const MIGRATION_FINALIZER: &str = "operator.ptah.run/migration-operation";

/// Label on a PtahSchemaPlanChunk naming its plan.
pub const PLAN_LABEL: &str = "operator.ptah.run/plan";

/// Label on plans and chunks naming their PtahSchema.
pub const SCHEMA_LABEL: &str = "operator.ptah.run/schema";

/// Label on migration plans naming their PtahMigration.
pub const MIGRATION_LABEL: &str = "operator.ptah.run/migration";

/// Label: UID of the resource that owns the snapshot.
pub const LABEL_OWNER_UID: &str = "operator.ptah.run/snapshot-owner";
/// Annotation: name of the source ConfigMap.
pub const ANNOTATION_SOURCE_NAME: &str = "operator.ptah.run/source-configmap";
/// Annotation: UID of the source ConfigMap.
pub const ANNOTATION_SOURCE_UID: &str = "operator.ptah.run/source-configmap-uid";

/// `app.kubernetes.io/managed-by`.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `app.kubernetes.io/component`.
pub const LABEL_COMPONENT: &str = "app.kubernetes.io/component";
/// The operation, lower case.
pub const LABEL_OPERATION: &str = "operator.ptah.run/operation";
/// The first 16 hex digits of the operation id (the label of the full id
/// would not be a valid label value).
pub const LABEL_OPERATION_ID: &str = "operator.ptah.run/operation-id";
/// The value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "ptah-operator";
/// Annotation: the full operation id.
pub const ANNOTATION_OPERATION_ID: &str = "operator.ptah.run/operation-id";
/// Annotation: the claim's input fingerprint.
pub const ANNOTATION_INPUT_FINGERPRINT: &str = "operator.ptah.run/input-fingerprint";
/// Annotation: the attempt under the claim.
pub const ANNOTATION_ATTEMPT: &str = "operator.ptah.run/attempt";
/// Annotation: the resource generation the operation was dispatched for.
pub const ANNOTATION_GENERATION: &str = "operator.ptah.run/resource-generation";
/// Annotation: the source content digest the operation reads.
pub const ANNOTATION_CONTENT_DIGEST: &str = "operator.ptah.run/source-content-digest";
/// Annotation: the plan fingerprint an Apply runs.
pub const ANNOTATION_PLAN_FINGERPRINT: &str = "operator.ptah.run/plan-fingerprint";
/// Annotation: the plan content digest a schema Apply runs.
pub const ANNOTATION_PLAN_CONTENT_DIGEST: &str = "operator.ptah.run/plan-content-digest";
/// Annotation that keeps the cluster autoscaler from evicting an Apply.
pub const ANNOTATION_SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// Label of a chunk: the UID of the plan that owns it.
pub const LABEL_PLAN_UID: &str = "operator.ptah.run/plan-uid";

/// Annotation: the epoch of the current acquisition.
pub const ANNOTATION_LEASE_EPOCH: &str = "operator.ptah.run/lease-epoch";
/// Annotation: the operation (claim) the Lease is held for.
pub const ANNOTATION_LEASE_OPERATION: &str = "operator.ptah.run/lease-operation";
/// Annotation: the coordination digest the Lease guards (its name keeps only
/// a prefix of it).
pub const ANNOTATION_COORDINATION_DIGEST: &str = "operator.ptah.run/coordination-digest";

/// Annotation: the SHA-256 of the receiver CA a namespace's CA ConfigMap
/// holds, so the manager republishes it only when it changed.
pub const RECEIVER_CA_DIGEST: &str = "operator.ptah.run/ca-digest";

/// Label of a plan preview's ConfigMap (`kubectl ptah preview`), and of its
/// Job: the preview ConfigMap's name on the Job, `"true"` on the ConfigMap.
/// Only a ConfigMap with it is read as a preview.
pub const PREVIEW_LABEL: &str = "operator.ptah.run/preview";
/// Annotation of a preview ConfigMap: the resource it previews, as
/// `PtahSchema/<name>` or `PtahMigration/<name>` (same namespace).
pub const ANNOTATION_PREVIEW_OF: &str = "operator.ptah.run/preview-of";
/// Annotation of a preview ConfigMap: that resource's UID, so a preview
/// made for a deleted and recreated resource is refused.
pub const ANNOTATION_PREVIEW_UID: &str = "operator.ptah.run/preview-uid";
/// Annotation the manager writes on a preview ConfigMap it will not run,
/// naming the field or rule.
pub const ANNOTATION_PREVIEW_REFUSED: &str = "operator.ptah.run/preview-refused";
