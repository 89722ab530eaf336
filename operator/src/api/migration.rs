//! PtahMigration: a migration directory, the database whose revision table it
//! continues, and the policy that decides when a sequence runs.

#![allow(
    clippy::duplicated_attributes,
    reason = "each printcolumn(...) of the kube derive repeats type_ = \"string\" by design"
)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    Execution, GoDuration, Identity, MigrationPolicy, Target, default_interval, duration_rule,
    lock_timeout_rule, name_length_rule, pattern,
};
use super::condition::{Condition, MigrationConditionType, MigrationPhase};
use super::journal::{JOURNAL_SCHEMA_MAX_ITEMS, JournalEntry, RunFailure};
use super::source::{Source, SourceStatus};
use super::status::{
    ActiveOperation, Authorization, ExecutionBinding, PendingLockRelease, SourceBinding,
};

/// A migration directory, the database whose revision table it continues, and
/// the policy that decides when a sequence runs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "operator.ptah.run",
    version = "v1alpha1",
    kind = "PtahMigration",
    plural = "ptahmigrations",
    namespaced,
    status = "PtahMigrationStatus",
    derive = "PartialEq",
    shortname = "ptahm",
    category = "ptah",
    doc = "PtahMigration applies a directory of versioned migrations: the operator reads the database's revision table, publishes the ordered sequence still pending (versions and checksums, never SQL), runs it when the policy (and, if asked, a person) allows, and confirms it by reading the history back.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Current", type_ = "integer", json_path = ".status.history.currentVersion"),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.history.pendingCount"),
    printcolumn(name = "Outcome", type_ = "string", json_path = ".status.lastRun.outcome"),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.source.revision", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = name_length_rule(),
)]
#[x_kube(validation = lock_timeout_rule())]
#[serde(rename_all = "camelCase")]
pub struct PtahMigrationSpec {
    /// The database whose revision table the migrations continue.
    pub target: Target,
    /// Where the migration directory comes from: exactly one of `configMap`,
    /// `git`, `oci` and `flux`.
    pub source: Source,
    /// When a pending sequence may run, and how.
    #[serde(default)]
    pub policy: MigrationPolicy,
    /// How often the source and the history are read again (10s to 24h).
    /// Editing it does not retire a plan.
    #[serde(default = "default_interval")]
    #[x_kube(validation = duration_rule("spec.interval", "10s", "24h"))]
    pub interval: GoDuration,
    /// No new Jobs while true. A run already under way is followed to its end.
    #[serde(default)]
    pub suspend: bool,
    /// How operation Jobs are shaped and scheduled.
    #[serde(default)]
    pub execution: Execution,
}

/// One row of the revision table.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRow {
    /// The migration's version.
    #[schemars(range(min = 0))]
    pub version: i64,
    /// The migration's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub description: Option<String>,
    /// The checksum the row records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub checksum: Option<String>,
    /// When it was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<Time>,
    /// How long it ran, in milliseconds; absent when the table is too old to
    /// record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub execution_millis: Option<i64>,
    /// The row is dirty: the migration failed part way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dirty: bool,
}

/// `status.history`: the last reading of the revision table.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationHistory {
    /// When the history was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
    /// Version of Ptah's status document; unknown versions are refused before
    /// the database is touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub contract_version: Option<i32>,
    /// The newest applied version (0 for an empty table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub current_version: Option<i64>,
    /// The checkpoint a bootstrap started from; stays set after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub checkpoint_version: Option<i64>,
    /// How many versions are applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub applied_count: Option<i64>,
    /// How many versions Ptah selects as pending (its own selection, not a
    /// subtraction of counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pending_count: Option<i64>,
    /// SHA-256 of this reading; a plan binds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub fingerprint: Option<String>,
    /// The database the reading reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: Option<String>,
    /// The revision table is dirty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dirty: bool,
    /// Recorded versions whose checksum no longer matches the source (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub modified_versions: Vec<i64>,
    /// Pending versions that sort below one already applied (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub out_of_order_versions: Vec<i64>,
    /// Recorded versions the source does not have (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub ahead_versions: Vec<i64>,
    /// The newest rows of the revision table, newest first (at most 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub revisions: Vec<RevisionRow>,
}

/// `status.plan`: the PtahMigrationPlan published for the current history.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationPlanSummary {
    /// Name of the PtahMigrationPlan.
    #[schemars(length(max = 253))]
    pub name: String,
    /// UID of the PtahMigrationPlan.
    #[schemars(length(max = 128))]
    pub uid: String,
    /// The plan's fingerprint: what an approval names.
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub fingerprint: String,
    /// The version the sequence starts after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub from_version: Option<i64>,
    /// The last version of the sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub to_version: Option<i64>,
    /// How many migrations the sequence holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub steps: Option<i32>,
    /// The plan asks for a person's approval.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approval_required: bool,
    /// When the plan was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
}

/// Ptah's own verdict on a run, read from the revision table, not the exit code.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RunOutcome {
    /// Nothing was pending.
    UpToDate,
    /// The sequence was applied.
    Applied,
    /// The run failed: at a statement (a dirty row holds the resource Blocked)
    /// or before it selected a migration (retried).
    Failed,
    /// Part of the sequence was applied; no further Apply until it is settled.
    Partial,
    /// Nobody can tell what the run did; no further Apply until it is settled.
    Unknown,
}

/// `status.lastRun.verification`: the first reading after the run of the
/// database the run named.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunVerification {
    /// `InSync`, `Pending` (the source has more) or `Blocked`.
    pub outcome: VerificationOutcome,
    /// The condition reason of that reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<super::condition::Reason>,
    /// Fingerprint of that reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub history_fingerprint: Option<String>,
    /// When it was read.
    pub read_at: Time,
}

/// The verdict of the first reading after a run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum VerificationOutcome {
    /// Nothing pending.
    InSync,
    /// The source has more to apply.
    Pending,
    /// The reading holds the resource Blocked.
    Blocked,
}

/// `status.lastRun`: the last run, with the identity its Apply claim carried.
/// A later run replaces it; the journal still names the one before.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationRun {
    /// The Apply claim: joins the run's journal entries.
    #[serde(rename = "operationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: String,
    /// The verdict.
    pub outcome: RunOutcome,
    /// What authorized the run: `Approval` or `Policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Name of the plan it carried out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub plan_name: Option<String>,
    /// UID of the plan.
    #[serde(rename = "planUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub plan_uid: Option<String>,
    /// Fingerprint of the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub plan_fingerprint: Option<String>,
    /// Name of the approval it spent.
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
    /// Name of the Apply Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub job_name: Option<String>,
    /// UID of the Apply Job.
    #[serde(rename = "jobUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub job_uid: Option<String>,
    /// The versions it applied, in order (at most 256).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub applied_versions: Vec<i64>,
    /// Where a failed or partial run stopped, when a statement failed at the
    /// database; unset when no statement can be pointed at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// The first reading after the run of the database it named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<RunVerification>,
    /// The database the run's result named, and nothing else; unset when the
    /// run left no result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: Option<String>,
    /// Digest of the coordination identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub coordination_digest: Option<String>,
    /// The source it ran from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceBinding>,
    /// The execution components it ran under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_binding: Option<ExecutionBinding>,
    /// When the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// A diagnostic: never rows, values or SQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// `status.unresolvedRun`: a run that ended `Partial` or `Unknown`. No plan is
/// published and no Apply dispatched until a clean history reading or a
/// PtahMigrationRunAcknowledgment settles it. Mirrored in the annotation
/// `operator.ptah.run/unresolved-run`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnresolvedRun {
    /// The Apply claim; an acknowledgment names it.
    #[serde(rename = "operationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: String,
    /// `Partial` or `Unknown`.
    pub outcome: RunOutcome,
    /// What authorized the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Name of the plan it carried out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub plan_name: Option<String>,
    /// UID of the plan.
    #[serde(rename = "planUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub plan_uid: Option<String>,
    /// Fingerprint of the plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub plan_fingerprint: Option<String>,
    /// Name of the approval it spent.
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
    /// Name of the Apply Job; unset if its creation was never confirmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub job_name: Option<String>,
    /// UID of the Apply Job.
    #[serde(rename = "jobUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub job_uid: Option<String>,
    /// The database the run named, or the planned one when it left no result:
    /// somewhere to start looking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub target_identity_digest: Option<String>,
    /// When the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// When the hold was recorded.
    pub recorded_at: Time,
}

/// How an unresolved run was settled.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Resolution {
    /// A history reading of that database with nothing pending.
    HistoryRead,
    /// A person's PtahMigrationRunAcknowledgment.
    Acknowledged,
}

/// `status.resolvedRun`: the last unresolved run that was settled, so a
/// leftover annotation copy is told from a restored one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("(self.resolution == 'Acknowledged') == (has(self.acknowledgmentName) && has(self.acknowledgedBy))")
    .message("status.resolvedRun names an acknowledgment and its author exactly when resolution is Acknowledged"))]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRun {
    /// The settled run's Apply claim.
    #[serde(rename = "operationID")]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: String,
    /// The outcome it had ended with.
    pub outcome: RunOutcome,
    /// `HistoryRead` or `Acknowledged`.
    pub resolution: Resolution,
    /// Name of the acknowledgment (`Acknowledged` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub acknowledgment_name: Option<String>,
    /// UID of the acknowledgment.
    #[serde(
        rename = "acknowledgmentUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub acknowledgment_uid: Option<String>,
    /// Who acknowledged, as admission stamped it (`Acknowledged` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_by: Option<Identity>,
    /// When it was settled.
    pub resolved_at: Time,
}

/// What the operator has observed and decided about a PtahMigration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
// A resource the manager has not read yet is served with
// `observedGeneration: 0`, which kstatus readers (Flux's health checks) take
// as in progress; without any status they would take it as current.
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct PtahMigrationStatus {
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
    pub phase: Option<MigrationPhase>,
    /// Conditions, one per type, each with `observedGeneration`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition<MigrationConditionType>>,
    /// The source as resolved: what every later operation is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStatus>,
    /// The execution components operations run under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_binding: Option<ExecutionBinding>,
    /// The last reading of the revision table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<MigrationHistory>,
    /// The plan published for the current history; unset when nothing is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<MigrationPlanSummary>,
    /// The claim: the operation in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_operation: Option<ActiveOperation>,
    /// The last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<MigrationRun>,
    /// A `Partial` or `Unknown` run that holds every later Apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unresolved_run: Option<UnresolvedRun>,
    /// The last unresolved run that was settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_run: Option<ResolvedRun>,
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
    /// written, or `sha256:<hex>` of a value longer than 64 bytes.
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

super::status::operation_status!(PtahMigrationStatus);
