//! What the database operations answer the manager: the protocol for
//! Observe, Plan and Apply. The runner fills these from the Ptah executor's
//! outputs (`runner::operations`); the manager reads them from the result
//! receiver. Bounded by design: the drift report and the connection never
//! leave the Pod, only their digests and aggregates do.

use serde::{Deserialize, Serialize};

use crate::api::plan::PrivilegeChange;
use crate::api::schema::{DriftFinding, DriftSeverity};

/// Most finding categories a result carries; more set `truncated`.
pub const MAX_FINDINGS: usize = 64;

/// Observe: the drift report, reduced to what status may hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftSummary {
    /// SHA-256 of the raw report, which stays in the Pod.
    pub report_digest: String,
    /// Any difference at all, classified or not.
    pub drift: bool,
    /// The SQL dialect Ptah read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    /// Total findings across every category.
    pub finding_count: i64,
    /// The highest severity of any finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_severity: Option<DriftSeverity>,
    /// Findings by category, at most [`MAX_FINDINGS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<DriftFinding>,
    /// More categories were found than `findings` holds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Credential-free identity of the database read, derived in the Pod.
    pub target_identity_digest: String,
}

/// Plan: two independent scoped plans, byte-identical, dry-run checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanOutcome {
    /// Credential-free identity of the database planned against.
    pub target_identity_digest: String,
    /// The SQL dialect.
    pub dialect: String,
    /// The change, or `None`: the authoritative statement that the database
    /// converged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<PlannedChange>,
}

/// A plan with changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedChange {
    /// The plan's exact bytes (Ptah's plan document), as UTF-8.
    pub plan: String,
    /// `sha256:<hex>` of those bytes.
    pub content_digest: String,
    /// Statements in the plan.
    pub statement_count: i32,
    /// Any statement classified destructive.
    pub destructive: bool,
    /// Kinds of privilege change the plan makes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub privilege_changes: Vec<PrivilegeChange>,
    /// Every table the plan changes, schema-qualified, for the manager's
    /// protected-table rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<String>,
    /// Fingerprint of the live schema the plan was computed from (Ptah's
    /// `from_fingerprint`, which its Apply checks under its lock).
    pub actual_state_fingerprint: String,
    /// Fingerprint of the declared schema (Ptah's `to_fingerprint`).
    pub desired_state_fingerprint: String,
}

/// Apply: what ran. The outcome is never taken from here alone: the proof
/// reads the database again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    /// Credential-free identity of the database changed.
    pub target_identity_digest: String,
    /// Statements executed before the end.
    pub statements_executed: i32,
}
