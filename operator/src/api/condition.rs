//! Phases, conditions and reasons: the closed vocabulary tools read. Tools
//! read `(type, status, reason)` and compare `observedGeneration`; messages
//! are diagnostics only.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition in the shape of Kubernetes' `metav1.Condition`, with the type
/// and reason closed to this API's vocabulary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition<T> {
    /// Type of the condition.
    #[serde(rename = "type")]
    pub type_: T,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// The `metadata.generation` this condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the status last changed.
    pub last_transition_time: Time,
    /// Why, in one word of the closed vocabulary.
    pub reason: Reason,
    /// A human-readable diagnostic; never SQL, values or credentials.
    #[serde(default)]
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// Status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Nobody can tell yet.
    Unknown,
}

/// Where a PtahSchema is (`status.phase`). A new resource has none until its
/// first read starts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SchemaPhase {
    /// A discarded claim leaves the resource here for one pass.
    Pending,
    /// A Job reads the Git or OCI source.
    Resolving,
    /// A Job evaluates the verification policy against the pinned artifact.
    Verifying,
    /// A Job reads the database's drift.
    Observing,
    /// A Job computes the plan under the database-realm Lease.
    Planning,
    /// A plan that needs no approval waits for its gates.
    ReadyToApply,
    /// A plan waits for a person's approval of that exact plan.
    AwaitingApproval,
    /// An Apply Job runs the plan.
    Applying,
    /// A fresh observation and plan prove what the Apply did.
    VerifyingConvergence,
    /// The last read found nothing to change.
    InSync,
    /// An answer that will not change until somebody changes an input.
    Blocked,
    /// Something went wrong and a retry is reasonable.
    Failed,
    /// `spec.suspend`: no new Jobs.
    Suspended,
}

/// Where a PtahMigration is (`status.phase`). A new resource has none until its
/// first read starts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MigrationPhase {
    /// A discarded claim leaves the resource here for one pass.
    Pending,
    /// A Job reads the Git or OCI source.
    Resolving,
    /// A Job evaluates the verification policy against the pinned artifact.
    Verifying,
    /// A Job reads the revision table.
    Reading,
    /// A plan is published, or rests under `apply: Never`.
    Planning,
    /// A plan waits for a person's approval of that exact sequence.
    AwaitingApproval,
    /// An Apply Job runs the approved sequence.
    Applying,
    /// The run ended; the next pass reads the history back.
    VerifyingHistory,
    /// The history has nothing pending.
    InSync,
    /// A verdict about the database or the artifact that will not change on
    /// its own, or an unsettled run.
    Blocked,
    /// A configuration or dispatch failure, or a run that stopped before it
    /// selected a migration.
    Failed,
    /// `spec.suspend`: no new Jobs.
    Suspended,
}

/// Condition types of a PtahSchema.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SchemaConditionType {
    /// The source is pinned (snapshot, commit or digest).
    ArtifactResolved,
    /// The verification policy accepted the OCI artifact (OCI only).
    ArtifactVerified,
    /// The engine is one the operator implements.
    EngineSupported,
    /// The last observation found differences.
    DriftDetected,
    /// A plan with changes is published.
    PlanReady,
    /// The current plan waits for a person's approval.
    ApprovalRequired,
    /// An Apply is under way.
    Applying,
    /// The managed scope has no changes.
    InSync,
    /// The resource is where it was asked to be.
    Ready,
    /// `spec.suspend` holds.
    Suspended,
    /// The last attempt failed; the reason and message say why.
    ReconciliationFailed,
    /// kstatus: work is under way for the current generation.
    Reconciling,
    /// kstatus: no progress until an input changes.
    Stalled,
}

/// Condition types of a PtahMigration.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MigrationConditionType {
    /// The history matches the source and nothing is pending.
    Ready,
    /// Something is coming: an operation runs, a plan is published, an Apply is
    /// next, a run is being confirmed.
    Progressing,
    /// A verdict holds the resource until a person or an input acts.
    Blocked,
    /// The current plan waits for a person's approval.
    ApprovalRequired,
    /// The source is pinned (snapshot, commit or digest).
    ArtifactResolved,
    /// The verification policy accepted the OCI artifact (OCI only).
    ArtifactVerified,
    /// The last attempt failed; the reason and message say why.
    ReconciliationFailed,
    /// kstatus: work is under way for the current generation.
    Reconciling,
    /// kstatus: no progress until an input changes.
    Stalled,
}

/// Condition types of a PtahSchemaPlan.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SchemaPlanConditionType {
    /// Every chunk is stored and verified; only then may a plan be approved or applied.
    Ready,
}

/// Condition types of a PtahMigrationPlan.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum MigrationPlanConditionType {
    /// The plan still fits the source and the history.
    Current,
    /// A run carried the plan out.
    Executed,
}

/// Condition types of PtahSchemaApproval and PtahMigrationApproval.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ApprovalConditionType {
    /// The approval names the current plan.
    Accepted,
    /// An Apply spent the approval at its dispatch.
    Consumed,
    /// The plan it names is no longer current: it authorizes nothing.
    Stale,
}

/// Condition types of a PtahMigrationRunAcknowledgment.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AcknowledgmentConditionType {
    /// The acknowledgment settled the unresolved run it names.
    Consumed,
    /// The run it names is not the unresolved one: it settles nothing.
    Stale,
}

/// The reasons of conditions, journal entries and Events: one closed
/// vocabulary, never repurposed; additions are compatible.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Reason {
    /// The condition is active.
    Active,
    /// `apply: Never`: plans are recorded, none is applied.
    ApplyDisabled,
    /// An Apply ended without an established outcome (every Apply error
    /// counts); a fresh read comes first, and the plan is never replayed.
    ApplyOutcomeUnknown,
    /// An Apply is next.
    ApplyPending,
    /// An approval was withdrawn.
    ApprovalRevoked,
    /// The plan was approved.
    ApprovedPlan,
    /// The artifact is not verified.
    ArtifactUnverified,
    /// The plan waits for a person's approval.
    AwaitingApproval,
    /// A Git ref was resolved to a commit (the message names it).
    CommitResolved,
    /// The resource or something it names is misconfigured.
    ConfigurationError,
    /// After an Apply of unknown outcome, a fresh read found nothing to change.
    ConvergedAfterUnknownOutcome,
    /// The approval or plan is the current one.
    CurrentPlan,
    /// The desired state changed.
    DesiredStateChanged,
    /// The plan is destructive and the policy does not allow it.
    DestructiveChangesDisabled,
    /// The OCI reference was pinned to a digest.
    DigestPinned,
    /// An Apply spent the approval at its dispatch.
    DispatchCommitted,
    /// The Flux source object is missing, not Ready, behind its generation,
    /// or names no artifact (the message names it and what Flux says).
    FluxSourceNotReady,
    /// The execution binding (executor, Ptah, runner protocol, state version) changed.
    ExecutionBindingChanged,
    /// The database records versions the source does not have.
    HistoryAhead,
    /// The revision table is dirty: a person repairs it with Ptah.
    HistoryDirty,
    /// The history matches the source and nothing is pending.
    HistoryMatched,
    /// A recorded migration's checksum no longer matches the source.
    HistoryModified,
    /// A pending version sorts below one already applied.
    HistoryOutOfOrder,
    /// Inputs changed under an operation; its result was discarded.
    InputsChanged,
    /// The database has nothing to change.
    InSync,
    /// The Apply Job ended; the proof is pending.
    JobCompleted,
    /// The Lease was not held without interruption; the result was discarded.
    LeaseContinuityLost,
    /// Versions are pending.
    MigrationsPending,
    /// The plan has no changes.
    NoChanges,
    /// Not required.
    NotRequired,
    /// The database was observed.
    Observed,
    /// An operation failed.
    OperationFailed,
    /// An operation is under way.
    OperationInProgress,
    /// The outcome is unknown.
    OutcomeUnknown,
    /// Waiting.
    Pending,
    /// The plan no longer fits its inputs.
    PlanNoLongerCurrent,
    /// A plan is ready.
    PlanReady,
    /// A plan that could be approved, or was approved, was replaced before it ran.
    PlanStale,
    /// Admission refused the operation Pod.
    PodAdmissionRefused,
    /// The policy blocks the plan.
    PolicyBlocked,
    /// The policy changed.
    PolicyChanged,
    /// The verification policy refused the artifact.
    PolicyRefused,
    /// The verification policy accepted the artifact.
    PolicySatisfied,
    /// The plan changes privileges, which always needs an approval.
    PrivilegeChanges,
    /// The inputs of a proof changed.
    ProofInputsChanged,
    /// The plan would change a protected table.
    ProtectedTable,
    /// The plan is published.
    Published,
    /// A read request was answered; the next pass starts the read.
    ReadRequested,
    /// A read request was not an RFC 3339 instant; recorded as answered.
    ReadRequestInvalid,
    /// A failed read gave way to a new Resolve.
    ReadRestarted,
    /// Another resource claims the same database incompatibly.
    RealmConflict,
    /// The PtahRealm does not admit this resource.
    RealmNotAuthorized,
    /// A refresh of the source failed.
    RefreshFailed,
    /// The source is being refreshed.
    Refreshing,
    /// Refreshes are suspended.
    RefreshSuspended,
    /// Requested.
    Requested,
    /// Resolving the source failed.
    ResolveFailed,
    /// A person acknowledged the unresolved run.
    RunAcknowledged,
    /// The acknowledgment names a run that is not the unresolved one.
    RunNotUnresolved,
    /// The runner speaks another protocol version.
    RunnerProtocolMismatch,
    /// Satisfied.
    Satisfied,
    /// The managed scope has changes.
    ScopedChanges,
    /// The managed scope has no changes.
    ScopedConverged,
    /// A scoped plan is pending.
    ScopedPlanPending,
    /// A ConfigMap source was copied into its snapshot.
    SnapshotTaken,
    /// Whether the source is fresh cannot be told.
    SourceFreshnessUnknown,
    /// The source policy refused the source (the message names the rule).
    SourcePolicyRefused,
    /// A refresh of the source is pending.
    SourceRefreshPending,
    /// The resolution of the source cannot be told.
    SourceResolutionUnknown,
    /// The source is not resolved.
    SourceUnresolved,
    /// Stale.
    Stale,
    /// The observation is stale.
    StaleObservation,
    /// The plan is stale.
    StalePlan,
    /// An approval's or acknowledgment's stamp carries no signature of this
    /// operator's admission webhook: it authorizes nothing.
    StampNotSigned,
    /// Succeeded.
    Succeeded,
    /// A newer approval superseded this one.
    SupersededApproval,
    /// The engine is supported.
    SupportedEngine,
    /// `spec.suspend` holds.
    Suspended,
    /// The proof read another database than the plan's: blocked until the first
    /// target is back or a person settles it.
    TargetIdentityChanged,
    /// The engine is not one the operator implements.
    UnsupportedEngine,
    /// The Apply's proof is under way.
    VerifyingConvergence,
    /// Waiting.
    Waiting,
}
