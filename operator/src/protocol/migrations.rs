//! What the migration operations answer the manager: the protocol for
//! History and Apply, in the style of [`super::database`]. The runner fills
//! these from Ptah's `migrations status --json` and `migrations up`
//! (`docs/executor.md`); the manager reads them from the result receiver.
//!
//! Both ends hold a document to the same rules ([`check_history`],
//! [`check_run`]: the runner before it sends its own, the manager before it
//! believes one; a document that breaks them gives no verdict), read a
//! reading's verdict the same way ([`HistoryReport::verdict`]: the runner
//! refuses a run the verdict blocks, the manager steps its lifecycle with it)
//! and compute the same [`sequence_digest`].
//!
//! The facts are Ptah's, carried as it reports them; the runner derives only
//! what Ptah does not report (a modified checksum, a version the database has
//! and the directory lacks, the failing statement's position, SQLSTATE and
//! errno) and says so in `docs/executor.md`. The manager never subtracts
//! counts: after a checkpoint bootstrap, the pending sequence is Ptah's own
//! selection, which a subtraction would get wrong.

use serde::{Deserialize, Serialize};
use supplychain::contract::{self, ContractError};

use crate::api::journal::RunFailure;
use crate::api::migration::RevisionRow;
use crate::api::plan::PlannedMigration;

/// The version of this document's shape the runner writes; the manager
/// refuses another.
pub const HISTORY_CONTRACT_VERSION: i32 = 1;

/// `status.history.revisions` keeps at most this many rows, and a History
/// result carries no more.
pub const REVISIONS_MAX: usize = 32;

/// How a dirty revision row was being applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// `migrations up`.
    Up,
    /// `migrations down`.
    Down,
}

/// Ptah's `dirty_revision`: the row a failed or interrupted run left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirtyRevision {
    /// The row's version.
    pub version: i64,
    /// Which way the run was going.
    pub direction: Direction,
    /// Ptah's `state` (`pending`, `failed`).
    pub state: String,
    /// Statements committed so far (Ptah's `applied`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statements_applied: Option<i64>,
    /// Statements in the body (Ptah's `total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statements_total: Option<i64>,
    /// Ptah's unknown-outcome marker: whether the failing statement committed
    /// is not recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outcome_unknown: bool,
}

/// History: one reading of the revision table against the directory. The
/// connection, the rows' errors and the statements never leave the Pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryReport {
    /// [`HISTORY_CONTRACT_VERSION`].
    pub contract_version: i32,
    /// Ptah's `current_version`: the newest applied version, 0 for none.
    pub current_version: i64,
    /// The checkpoint a bootstrap started from, when the table shows one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_version: Option<i64>,
    /// How many versions Ptah lists as applied.
    pub applied_count: i64,
    /// The rows read, newest first (the runner keeps at most
    /// [`REVISIONS_MAX`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<RevisionRow>,
    /// Ptah's `dirty_revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dirty_revision: Option<DirtyRevision>,
    /// Applied versions whose recorded checksum is not the directory's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modified_versions: Vec<i64>,
    /// Ptah's `out_of_order_migrations`: pending versions below the current.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub out_of_order_versions: Vec<i64>,
    /// Applied versions the directory does not have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead_versions: Vec<i64>,
    /// Ptah's own pending selection, in the order `up` would run it, with
    /// the checksum each row will record. Never a subtraction of counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PlannedMigration>,
    /// `sha256:` of this reading (rows, checksums, selection): a plan binds it.
    pub history_fingerprint: String,
    /// Credential-free identity of the database read, derived in the Pod.
    pub target_identity_digest: String,
}

/// One of the six verdicts of a history reading; the operator never guesses.
#[derive(Clone, Debug, PartialEq)]
pub enum HistoryVerdict {
    /// The revision table is dirty.
    Dirty,
    /// A recorded migration's checksum no longer matches the artifact.
    Modified,
    /// A pending version sorts below one already applied.
    OutOfOrder,
    /// The database is ahead of the artifact.
    Ahead,
    /// Nothing is pending.
    NothingPending,
    /// A sequence is ready to plan: Ptah's own selection, in order.
    Pending(Vec<PlannedMigration>),
}

impl HistoryReport {
    /// Whether the table is dirty: Ptah's `dirty_revision`, or a dirty row.
    pub fn dirty(&self) -> bool {
        self.dirty_revision.is_some() || self.revisions.iter().any(|r| r.dirty)
    }

    /// The out-of-order versions: Ptah's list, then every pending version
    /// below the newest applied one it did not list (out of order by the
    /// seed's definition, whether or not Ptah listed it so).
    pub fn out_of_order(&self) -> Vec<i64> {
        let mut out_of_order = self.out_of_order_versions.clone();
        out_of_order.extend(
            self.pending
                .iter()
                .map(|m| m.version)
                .filter(|v| *v < self.current_version && !self.out_of_order_versions.contains(v)),
        );
        out_of_order
    }

    /// The reading's verdict, in the seed's order: dirty, modified, out of
    /// order, ahead, nothing pending, ready. Pure; it never guesses: each
    /// verdict rests on a fact the report states, and the sequence is
    /// Ptah's own list.
    pub fn verdict(&self) -> HistoryVerdict {
        if self.dirty() {
            HistoryVerdict::Dirty
        } else if !self.modified_versions.is_empty() {
            HistoryVerdict::Modified
        } else if !self.out_of_order().is_empty() {
            HistoryVerdict::OutOfOrder
        } else if !self.ahead_versions.is_empty() {
            HistoryVerdict::Ahead
        } else if self.pending.is_empty() {
            HistoryVerdict::NothingPending
        } else {
            HistoryVerdict::Pending(self.pending.clone())
        }
    }
}

/// How a run ended, as the runner established it from Ptah's output and
/// the revision table read after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "end")]
pub enum RunResult {
    /// The sequence was applied.
    Applied,
    /// Ptah found nothing pending.
    NothingToDo,
    /// The run failed.
    Failed {
        /// It had selected a migration: a statement ran and failed. False
        /// when it stopped before (the exact-sequence check, the lock, the
        /// integrity gate).
        selected: bool,
        /// Where it stopped, when a statement failed at the database.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<RunFailure>,
    },
    /// Part of the sequence was applied, then a migration failed.
    Partial {
        /// Where it stopped.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<RunFailure>,
    },
    /// Nobody can tell what the run did (a MySQL statement whose failure may
    /// still have committed, an interruption).
    Unknown {
        /// The statement whose failure may have committed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<RunFailure>,
    },
}

/// Apply: what the run did. The verdict is never taken from here alone: the
/// history read back after it confirms it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOutcome {
    /// How it ended.
    pub result: RunResult,
    /// The versions it applied, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_versions: Vec<i64>,
    /// Credential-free identity of the database the run reached; absent when
    /// it reached none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_identity_digest: Option<String>,
    /// A diagnostic: never rows, values or SQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a migration step answers; the generic controller wires it into the
/// result document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MigrationOutput {
    /// `history`.
    History(HistoryReport),
    /// `apply` of a migration plan.
    Run(RunOutcome),
}

/// Why a harvested result is not read: it breaks a rule of this protocol.
/// The harvest treats it as a Job that left no usable result (a read runs
/// again; a run is `Unknown`), never as a verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// A document of another shape.
    #[error("contractVersion: {found} is not {HISTORY_CONTRACT_VERSION}")]
    ContractVersion {
        /// What the document says.
        found: i32,
    },
    /// A field breaks its rule.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The rule.
        reason: String,
    },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ReportError {
    ReportError::Invalid {
        field,
        reason: reason.into(),
    }
}

fn is_digest(value: &str) -> bool {
    value
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn check_failure(f: &RunFailure) -> Result<(), ReportError> {
    if f.version < 0 {
        return Err(invalid("failure.version", "is negative"));
    }
    if f.statement_position.is_some_and(|p| p < 1) {
        return Err(invalid("failure.statementPosition", "counts from 1"));
    }
    if f.sqlstate.as_ref().is_some_and(|s| {
        s.len() != 5
            || !s
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
    }) {
        return Err(invalid(
            "failure.sqlstate",
            "is not five digits or capitals",
        ));
    }
    if f.mysql_errno.is_some_and(|n| n < 0) {
        return Err(invalid("failure.mysqlErrno", "is negative"));
    }
    Ok(())
}

/// Checks a History result before its verdict is read (by the runner of its
/// own report, by the manager of a harvested one): the shape's version,
/// the digests, the counts, and Ptah's selection (each version once, each
/// with its checksum).
pub fn check_history(report: &HistoryReport) -> Result<(), ReportError> {
    if report.contract_version != HISTORY_CONTRACT_VERSION {
        return Err(ReportError::ContractVersion {
            found: report.contract_version,
        });
    }
    if !is_digest(&report.history_fingerprint) {
        return Err(invalid(
            "historyFingerprint",
            "is not sha256: and 64 hex digits",
        ));
    }
    if !is_digest(&report.target_identity_digest) {
        return Err(invalid(
            "targetIdentityDigest",
            "is not sha256: and 64 hex digits",
        ));
    }
    if report.current_version < 0 || report.applied_count < 0 {
        return Err(invalid(
            "currentVersion",
            "a version and a count are at least 0",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for m in &report.pending {
        if m.version < 0 || !seen.insert(m.version) {
            return Err(invalid(
                "pending",
                format!("version {} is negative or listed twice", m.version),
            ));
        }
        if m.checksum.is_empty() {
            return Err(invalid(
                "pending.checksum",
                format!("version {} has none", m.version),
            ));
        }
    }
    Ok(())
}

/// Checks an Apply result before the manager reads it.
pub fn check_run(outcome: &RunOutcome) -> Result<(), ReportError> {
    if outcome
        .target_identity_digest
        .as_deref()
        .is_some_and(|d| !is_digest(d))
    {
        return Err(invalid(
            "targetIdentityDigest",
            "is not sha256: and 64 hex digits",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(v) = outcome.applied_versions.iter().find(|v| !seen.insert(**v)) {
        return Err(invalid(
            "appliedVersions",
            format!("version {v} is listed twice"),
        ));
    }
    let failure = match &outcome.result {
        RunResult::Failed { failure, .. }
        | RunResult::Partial { failure }
        | RunResult::Unknown { failure } => failure.as_ref(),
        RunResult::Applied | RunResult::NothingToDo => None,
    };
    failure.map_or(Ok(()), check_failure)
}

/// The digest an Apply carries of the sequence it may run (`--sequence-digest`):
/// `sha256:` of the canonical JSON of each migration's version, version key,
/// checksum, checkpoint flag and transaction mode, in order — what plan
/// contract v2 binds of a migration, descriptions aside. The manager computes
/// it from the plan, the runner from Ptah's selection under the lock; any
/// difference refuses the run before it changes anything.
pub fn sequence_digest(migrations: &[PlannedMigration]) -> Result<String, ContractError> {
    if migrations.is_empty() {
        return Err(ContractError::Invalid {
            field: "migrations",
            reason: "is empty",
        });
    }
    let sequence: Vec<serde_json::Value> = migrations
        .iter()
        .map(|m| {
            serde_json::json!({
                "version": m.version,
                "versionKey": m.version_key,
                "checksum": m.checksum,
                "checkpoint": m.checkpoint,
                "transactionMode": m.transaction_mode,
            })
        })
        .collect();
    contract::canonical_digest(&sequence)
}

/// Reports and runs for the tests on both ends of the protocol.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    pub(crate) fn digest(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    pub(crate) fn planned(version: i64) -> PlannedMigration {
        PlannedMigration {
            version,
            version_key: None,
            description: Some(format!("m{version}")),
            checksum: format!("h1:{version}"),
            checkpoint: false,
            transaction_mode: None,
        }
    }

    pub(crate) fn row(version: i64, dirty: bool) -> RevisionRow {
        RevisionRow {
            version,
            description: None,
            checksum: Some(format!("h1:{version}")),
            applied_at: None,
            execution_millis: None,
            dirty,
        }
    }

    /// Every fact that makes a verdict at once: the order decides.
    pub(crate) fn everything() -> HistoryReport {
        HistoryReport {
            contract_version: HISTORY_CONTRACT_VERSION,
            current_version: 5,
            checkpoint_version: None,
            applied_count: 5,
            revisions: (1..=5).map(|v| row(v, false)).collect(),
            dirty_revision: Some(DirtyRevision {
                version: 5,
                direction: Direction::Up,
                state: "failed".into(),
                statements_applied: Some(1),
                statements_total: Some(3),
                outcome_unknown: false,
            }),
            modified_versions: vec![2],
            out_of_order_versions: vec![3],
            ahead_versions: vec![9],
            pending: vec![planned(3), planned(6)],
            history_fingerprint: digest(1),
            target_identity_digest: digest(2),
        }
    }

    pub(crate) fn clean() -> HistoryReport {
        HistoryReport {
            dirty_revision: None,
            modified_versions: vec![],
            out_of_order_versions: vec![],
            ahead_versions: vec![],
            pending: vec![],
            ..everything()
        }
    }

    pub(crate) fn run(result: RunResult, applied: Vec<i64>) -> RunOutcome {
        RunOutcome {
            result,
            applied_versions: applied,
            target_identity_digest: Some(digest(2)),
            message: Some("done".into()),
        }
    }

    pub(crate) fn failure() -> RunFailure {
        RunFailure {
            version: 6,
            statement_position: Some(2),
            sqlstate: Some("23505".into()),
            mysql_errno: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn outputs_round_trip_as_json() {
        let history = MigrationOutput::History(everything());
        let text = serde_json::to_string(&history).expect("serialize");
        assert!(text.contains(r#""type":"History""#), "{text}");
        assert!(text.contains(r#""historyFingerprint""#), "{text}");
        let back: MigrationOutput = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, history);
        let ran = MigrationOutput::Run(run(
            RunResult::Failed {
                selected: true,
                failure: Some(failure()),
            },
            vec![5],
        ));
        let text = serde_json::to_string(&ran).expect("serialize");
        assert!(text.contains(r#""end":"Failed""#), "{text}");
        assert!(text.contains(r#""statementPosition":2"#), "{text}");
        let back: MigrationOutput = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, ran);
    }

    #[test]
    fn a_report_that_breaks_the_protocol_is_refused_naming_the_field() {
        assert_eq!(check_history(&everything()), Ok(()));
        let mut r = clean();
        r.contract_version = 2;
        assert_eq!(
            check_history(&r),
            Err(ReportError::ContractVersion { found: 2 })
        );
        let field = |r: &HistoryReport| match check_history(r) {
            Err(ReportError::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let mut r = clean();
        r.history_fingerprint = "sha256:XY".into();
        assert_eq!(field(&r), "historyFingerprint");
        let mut r = clean();
        r.target_identity_digest = String::new();
        assert_eq!(field(&r), "targetIdentityDigest");
        let mut r = clean();
        r.pending = vec![planned(6), planned(6)];
        assert_eq!(field(&r), "pending");
        let mut r = clean();
        r.pending = vec![planned(6)];
        r.pending[0].checksum.clear();
        assert_eq!(field(&r), "pending.checksum");

        assert_eq!(check_run(&run(RunResult::Applied, vec![6, 7])), Ok(()));
        let twice = run(RunResult::Applied, vec![6, 6]);
        assert!(matches!(
            check_run(&twice),
            Err(ReportError::Invalid {
                field: "appliedVersions",
                ..
            })
        ));
        let mut elsewhere = run(RunResult::Applied, vec![6]);
        elsewhere.target_identity_digest = Some("db-1".into());
        assert!(check_run(&elsewhere).is_err());
        let bad_state = RunResult::Partial {
            failure: Some(RunFailure {
                sqlstate: Some("2350".into()),
                ..failure()
            }),
        };
        assert!(matches!(
            check_run(&run(bad_state, vec![6])),
            Err(ReportError::Invalid {
                field: "failure.sqlstate",
                ..
            })
        ));
        let position = RunResult::Unknown {
            failure: Some(RunFailure {
                statement_position: Some(0),
                ..failure()
            }),
        };
        assert!(check_run(&run(position, vec![])).is_err());
    }

    #[test]
    fn sequence_digest_binds_order_and_checksums_not_descriptions() {
        let a = sequence_digest(&[planned(1), planned(2)]).expect("digest");
        assert!(a.starts_with("sha256:") && a.len() == 71, "{a}");
        let mut described = planned(1);
        described.description = Some("other words".into());
        assert_eq!(
            a,
            sequence_digest(&[described, planned(2)]).expect("digest")
        );
        assert_ne!(
            a,
            sequence_digest(&[planned(2), planned(1)]).expect("digest")
        );
        let mut changed = planned(2);
        changed.checksum = "h1:other".into();
        assert_ne!(a, sequence_digest(&[planned(1), changed]).expect("digest"));
        let mut checkpoint = planned(2);
        checkpoint.checkpoint = true;
        assert_ne!(
            a,
            sequence_digest(&[planned(1), checkpoint]).expect("digest")
        );
        assert!(sequence_digest(&[]).is_err());
    }
}
