//! Stage 6, history: the lifecycle journal in `status.journal`. Bounded (64
//! entries, 30 days), written in the status write of the transition it
//! records, with reasons and object names, never messages.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Identity, pattern};
use super::condition::Reason;
use super::status::{Authorization, OperationType};

/// The journal holds at most this many entries, dropping the oldest first.
pub const JOURNAL_MAX_ENTRIES: usize = 64;
/// No entry is more than this many days older than the newest.
pub const JOURNAL_MAX_AGE_DAYS: u32 = 30;
/// What the schema allows: the bound, plus the publishing entry and the
/// newest approval of the plan nothing has carried out yet, which stay past it.
pub const JOURNAL_SCHEMA_MAX_ITEMS: usize = JOURNAL_MAX_ENTRIES + 2;

/// The type of a journal entry; `outcome` means something different on each.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum JournalEntryType {
    /// `status.plan` names a plan the journal does not hold yet.
    PlanPublished,
    /// An Apply consumed an approval.
    ApprovalAccepted,
    /// A schema Apply ended and its proof took over: `Succeeded` or `Unknown`.
    ApplyFinished,
    /// The proof settled (schema: `InSync`, `DriftRemains`, `Superseded`,
    /// `Unknown`), or the first reading after a migration run (`InSync`,
    /// `Pending`, `Blocked`).
    Verified,
    /// A migration run ended, with its outcome.
    RunFinished,
    /// A person acknowledged an unresolved run.
    RunAcknowledged,
    /// An attempt failed; repeats of the same operation and reason fold into
    /// one entry with a count.
    OperationFailed,
}

/// The outcome an entry records; which values occur depends on its type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum JournalOutcome {
    /// ApplyFinished: the Apply reported success (still to be proved).
    Succeeded,
    /// ApplyFinished, Verified, RunFinished, RunAcknowledged: nobody established it.
    Unknown,
    /// Verified: nothing left to change or apply.
    InSync,
    /// Verified (schema): the proof still found changes.
    DriftRemains,
    /// Verified (schema): a newer generation, policy or execution binding took over.
    Superseded,
    /// Verified (migration): the source has more to apply.
    Pending,
    /// Verified (migration): the reading holds the resource Blocked.
    Blocked,
    /// RunFinished: nothing was pending.
    UpToDate,
    /// RunFinished: the run applied its sequence.
    Applied,
    /// RunFinished: the run failed.
    Failed,
    /// RunFinished, RunAcknowledged: the run applied part of its sequence.
    Partial,
}

/// Where a failed or partial run stopped, when a statement reached the
/// database and failed there. It carries no SQL text.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunFailure {
    /// Version of the migration that failed.
    #[schemars(range(min = 0))]
    pub version: i64,
    /// Position of the failing statement within that migration, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub statement_position: Option<i32>,
    /// The SQLSTATE the database answered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = pattern::SQLSTATE))]
    pub sqlstate: Option<String>,
    /// The MySQL or MariaDB error number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub mysql_errno: Option<i32>,
}

/// One entry of `status.journal`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JournalEntry {
    /// What happened.
    #[serde(rename = "type")]
    pub type_: JournalEntryType,
    /// When: from the status the transition carries (a plan's creation, a run's
    /// end), else the manager's clock.
    pub time: Time,
    /// The Apply claim a migration's RunFinished, Verified, RunAcknowledged or
    /// ApprovalAccepted entry belongs to: one execution by this value, not by
    /// order or time.
    #[serde(
        rename = "operationID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = pattern::SHA256_DIGEST))]
    pub operation_id: Option<String>,
    /// Name of the plan.
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
    /// PlanPublished (schema): the plan asked for a person's approval when it
    /// was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_required: Option<bool>,
    /// PlanPublished (schema): the plan this one took the place of, when a person
    /// could approve that plan or had approved it and it never ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub replaced: Option<String>,
    /// Name of the approval, as it was called then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub approval_name: Option<String>,
    /// UID of the approval: what tells two decisions apart when a later approval
    /// takes an earlier one's name.
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
    /// What authorized the run: `Approval` or `Policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// Name of the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub job_name: Option<String>,
    /// UID of the Job.
    #[serde(rename = "jobUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub job_uid: Option<String>,
    /// The outcome; see the entry type for the values it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<JournalOutcome>,
    /// The condition reason of the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// OperationFailed: the operation that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationType>,
    /// OperationFailed: how many attempts in a row failed with the same
    /// operation and reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<i32>,
    /// OperationFailed: when the last of those attempts failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time: Option<Time>,
    /// ApplyFinished, RunFinished: when the run started, so the entry says how
    /// long it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// RunFinished: how many versions the run applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub applied_count: Option<i32>,
    /// RunFinished: where the run stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// RunAcknowledged: name of the acknowledgment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub acknowledgment_name: Option<String>,
    /// RunAcknowledged: UID of the acknowledgment.
    #[serde(
        rename = "acknowledgmentUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 128))]
    pub acknowledgment_uid: Option<String>,
    /// RunAcknowledged: who acknowledged, as admission stamped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_by: Option<Identity>,
}

impl JournalEntry {
    /// An entry of the given type and time with every other field unset.
    pub fn new(type_: JournalEntryType, time: Time) -> Self {
        Self {
            type_,
            time,
            operation_id: None,
            plan_name: None,
            plan_uid: None,
            plan_fingerprint: None,
            approval_required: None,
            replaced: None,
            approval_name: None,
            approval_uid: None,
            approver: None,
            authorization: None,
            job_name: None,
            job_uid: None,
            outcome: None,
            reason: None,
            operation: None,
            count: None,
            last_time: None,
            started_at: None,
            applied_count: None,
            failure: None,
            acknowledgment_name: None,
            acknowledgment_uid: None,
            acknowledged_by: None,
        }
    }
}
