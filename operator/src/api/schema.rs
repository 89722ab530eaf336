//! PtahSchema: a declared schema, the database it converges and the policy
//! that decides what may change there.

#![allow(
    clippy::duplicated_attributes,
    reason = "each printcolumn(...) of the kube derive repeats type_ = \"string\" by design"
)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    DevDatabase, Execution, GoDuration, Identity, SchemaPolicy, Target, default_interval,
    duration_rule, lock_timeout_rule, name_length_rule, pattern,
};
use super::condition::{Condition, SchemaConditionType, SchemaPhase};
use super::journal::{JOURNAL_SCHEMA_MAX_ITEMS, JournalEntry};
use super::plan::PrivilegeChange;
use super::source::{Source, SourceStatus};
use super::status::{
    ActiveOperation, Authorization, ExecutionBinding, PendingLockRelease, SourceBinding,
};

/// The declared schema, the database it converges and the policy that decides
/// what may change there.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahSchema",
    plural = "ptahschemas",
    namespaced,
    status = "PtahSchemaStatus",
    derive = "PartialEq",
    shortname = "ptahs",
    category = "ptah",
    doc = "PtahSchema keeps a database schema converged on a declared schema: the operator observes the database, publishes an immutable plan, applies it when the policy (and, if asked, a person) allows, and proves the result by a fresh read.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.source.revision"),
    printcolumn(name = "Drift", type_ = "string", json_path = ".status.conditions[?(@.type==\"DriftDetected\")].status"),
    printcolumn(name = "Approval", type_ = "string", json_path = ".status.conditions[?(@.type==\"ApprovalRequired\")].status"),
    printcolumn(name = "In Sync", type_ = "string", json_path = ".status.conditions[?(@.type==\"InSync\")].status"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = name_length_rule(),
)]
#[x_kube(validation = lock_timeout_rule())]
#[serde(rename_all = "camelCase")]
pub struct PtahSchemaSpec {
    /// The database to converge.
    pub target: Target,
    /// Where the declared schema comes from: exactly one of `configMap`, `git`,
    /// `oci` and `flux`.
    pub source: Source,
    /// What may be applied, and how.
    #[serde(default)]
    pub policy: SchemaPolicy,
    /// An optional scratch database for planning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<DevDatabase>,
    /// How often the source and the database are read again (10s to 24h).
    /// Editing it does not retire a plan.
    #[serde(default = "default_interval")]
    #[x_kube(validation = duration_rule("spec.interval", "10s", "24h"))]
    pub interval: GoDuration,
    /// No new Jobs while true. An Apply already running, and the read that
    /// proves it, are still followed to their end.
    #[serde(default)]
    pub suspend: bool,
    /// How operation Jobs are shaped and scheduled.
    #[serde(default)]
    pub execution: Execution,
}

/// Severity of a drift finding.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DriftSeverity {
    /// Safe to apply.
    Safe,
    /// Informational.
    Info,
    /// Worth a look.
    Warning,
    /// An error.
    Error,
    /// Loses data or objects.
    Destructive,
}

/// A category of drift, as Ptah's report aggregates it. Closed: an unknown
/// category fails the operation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DriftCategory {
    ColumnsAdded,
    ColumnsModified,
    ColumnsRemoved,
    ConstraintsAdded,
    ConstraintsRemoved,
    DataRowsDeleted,
    DataRowsInserted,
    DataRowsUpdated,
    EnumValuesAdded,
    EnumValuesRemoved,
    EnumsAdded,
    EnumsRemoved,
    ExtensionsAdded,
    ExtensionsModified,
    ExtensionsRemoved,
    FunctionsAdded,
    FunctionsModified,
    FunctionsRemoved,
    IndexesAdded,
    IndexesRemoved,
    RlsEnabledTablesAdded,
    RlsEnabledTablesRemoved,
    RlsPoliciesAdded,
    RlsPoliciesModified,
    RlsPoliciesRemoved,
    RolesAdded,
    RolesModified,
    RolesRemoved,
    TableConstraintsAdded,
    TableConstraintsRemoved,
    TablesAdded,
    TablesRemoved,
    UniqueProtectionsRemoved,
    VectorDimensionChanged,
}

/// The count and highest severity of one drift category.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftFinding {
    /// The category.
    pub category: DriftCategory,
    /// How many findings of it.
    #[schemars(range(min = 1))]
    pub count: i64,
    /// The highest severity among them.
    pub severity: DriftSeverity,
}

/// `status.target`: a bounded summary of the database as last observed. Never
/// object names, SQL or values.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetStatus {
    /// The engine, canonicalised (`postgresql`, `mysql`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub engine: Option<String>,
    /// Digest of the coordination identity (key or realm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: Option<String>,
    /// Credential-free identity of the database the last observation reached,
    /// derived in the Pod from the URL, never by the manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub identity_digest: Option<String>,
    /// Digest of the drift report, which stays inside the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub drift_report_digest: Option<String>,
    /// The SQL dialect of the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub dialect: Option<String>,
    /// When the database was last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_at: Option<Time>,
    /// Total number of findings in the whole report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub drift_finding_count: Option<i64>,
    /// The highest severity of any finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_drift_severity: Option<DriftSeverity>,
    /// Findings by category, at most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["category"]))]
    pub drift_findings: Vec<DriftFinding>,
    /// More categories than `driftFindings` holds were found.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drift_findings_truncated: bool,
}

/// An approval as an Apply consumed it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumedApproval {
    /// Name of the approval.
    #[schemars(length(max = 253))]
    pub name: String,
    /// UID of the approval.
    #[schemars(length(max = 128))]
    pub uid: String,
    /// Who approved, as admission stamped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<Identity>,
    /// When admission stamped the approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<Time>,
}

/// `status.plan`: the plan published for the current inputs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaPlanSummary {
    /// Name of the PtahSchemaPlan.
    #[schemars(length(max = 253))]
    pub name: String,
    /// UID of the PtahSchemaPlan.
    #[schemars(length(max = 128))]
    pub uid: String,
    /// The plan's fingerprint: what an approval names.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub fingerprint: String,
    /// SHA-256 of the plan bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub content_digest: Option<String>,
    /// When the plan was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// Number of statements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub statement_count: Option<i32>,
    /// The plan is destructive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub destructive: bool,
    /// Kinds of privilege changes the operator's reading found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub privilege_changes: Vec<PrivilegeChange>,
    /// The plan asks for a person's approval.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approval_required: bool,
    /// The approval an Apply consumed for this plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ConsumedApproval>,
}

/// `status.applied`: what the last Apply that was proved converged ran.
/// `kubectl ptah plan --applied` prints that plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedStatus {
    /// The Apply claim.
    #[serde(rename = "operationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: String,
    /// Name of the plan it ran.
    #[schemars(length(max = 253))]
    pub plan_name: String,
    /// UID of the plan.
    #[serde(rename = "planUID")]
    #[schemars(length(max = 128))]
    pub plan_uid: String,
    /// Fingerprint of the plan.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub plan_fingerprint: String,
    /// The source the plan was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceBinding>,
    /// The source revision, in Flux's form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub source_revision: Option<String>,
    /// Digest of the coordination identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: Option<String>,
    /// The database the proof read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: Option<String>,
    /// The execution components it ran under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_binding: Option<ExecutionBinding>,
    /// What authorized it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// The approval it consumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ConsumedApproval>,
    /// Name of the Apply Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub job_name: Option<String>,
    /// UID of the Apply Job.
    #[serde(rename = "jobUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub job_uid: Option<String>,
    /// When the Apply started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When convergence was observed (not when the Job exited).
    pub completed_at: Time,
}

/// How the Apply a proof is owed for ended, as far as anybody knows.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ApplyOutcome {
    /// The Apply reported success.
    ApplySucceeded,
    /// Nobody established the outcome (any Apply error counts).
    OutcomeUnknown,
}

/// `status.pendingObservation`: the proof owed after an Apply. It outranks
/// phase changes, retries, suspension and newer generations.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingObservation {
    /// How the Apply ended.
    pub outcome: ApplyOutcome,
    /// The Apply claim.
    #[serde(rename = "applyOperationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub apply_operation_id: String,
    /// Name of the Apply Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub apply_job_name: Option<String>,
    /// UID of the Apply Job.
    #[serde(
        rename = "applyJobUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub apply_job_uid: Option<String>,
    /// The generation the Apply ran for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_generation: Option<i64>,
    /// The proof starts no earlier: until no Pod of the Apply can still run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe_after: Option<Time>,
    /// Name of the plan the Apply ran.
    #[schemars(length(max = 253))]
    pub plan_name: String,
    /// UID of that plan.
    #[serde(rename = "planUID")]
    #[schemars(length(max = 128))]
    pub plan_uid: String,
    /// Fingerprint of that plan.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub plan_fingerprint: String,
    /// The source the Apply ran from; the proof reads the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceBinding>,
    /// Digest of the coordination identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: Option<String>,
    /// The database the plan was computed against; a proof that reads another
    /// stops, `TargetIdentityChanged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: Option<String>,
    /// Epoch of the Lease the proof keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::EXECUTION_EPOCH))]
    pub lease_epoch: Option<String>,
    /// Duration of that Lease, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 86460))]
    pub lease_duration_seconds: Option<i32>,
    /// When the obligation was recorded.
    pub recorded_at: Time,
}

/// What the operator has observed and decided about a PtahSchema.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// A resource the manager has not read yet is served with
// `observedGeneration: 0`, which kstatus readers (Flux's health checks) take
// as in progress; without any status they would take it as current.
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct PtahSchemaStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `sha256:` of the spec this status describes, `spec.suspend` aside:
    /// a generation that moved with this digest unchanged was a suspend or a
    /// resume, which keeps a proof owed, whichever manager sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_spec_digest: Option<String>,
    /// Where the resource is; unset until its first read starts. A summary:
    /// decisions read the conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SchemaPhase>,
    /// Conditions, one per type, each with `observedGeneration`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition<SchemaConditionType>>,
    /// The source as resolved: what every later operation is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStatus>,
    /// The execution components operations run under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_binding: Option<ExecutionBinding>,
    /// The database as last observed: a bounded drift summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetStatus>,
    /// The plan published for the current inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<SchemaPlanSummary>,
    /// What the last Apply proved converged ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedStatus>,
    /// The claim: the operation in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_operation: Option<ActiveOperation>,
    /// The proof owed after an Apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_observation: Option<PendingObservation>,
    /// A Lease release owed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_lock_release: Option<PendingLockRelease>,
    /// The lifecycle journal, oldest first: at most 64 entries (plus the
    /// publishing entry and newest approval of a plan nothing has carried out
    /// yet), none more than 30 days older than the newest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = JOURNAL_SCHEMA_MAX_ITEMS))]
    pub journal: Vec<JournalEntry>,
    /// The instant from which the journal is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_since: Option<Time>,
    /// The last `operator.ptah.run/read-requested-at` value answered, as
    /// written, or `sha256:<hex>` of a value longer than 64 bytes. A value here
    /// that is not an instant was answered and started no read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 71))]
    pub last_read_request: Option<String>,
    /// The earliest time of the next scheduled read; survives restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_reconciliation_time: Option<Time>,
    /// When an operation was last attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_time: Option<Time>,
    /// The change under way, for its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<super::trace::ChangeTrace>,
}

super::status::operation_status!(PtahSchemaStatus);
