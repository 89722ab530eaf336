//! History and a migration's Apply, through the Ptah CLI: `migrations status
//! --json` read strictly, the revision table read read-only where Ptah gives
//! no command for a fact, and `migrations up` with the runner itself as the
//! pre-up hook that compares the sequence Ptah selected, under Ptah's
//! migration lock, with the approved one ([`check_sequence`]).
//!
//! # Where each fact comes from
//!
//! | Fact | Source |
//! | --- | --- |
//! | `currentVersion`, the applied versions and their count | Ptah: `status` `current_version`, `applied_migrations` |
//! | the pending sequence, in order (a checkpoint bootstrap included) | Ptah: `status` `pending_migrations`, never a subtraction |
//! | out-of-order versions | Ptah: `status` `out_of_order_migrations` |
//! | the dirty row: version, state, direction, statements applied/total | Ptah: `status` `dirty_revision` |
//! | `outcomeUnknown` | Ptah's marker in `dirty_revision.error`; on MySQL/MariaDB also a failed statement that is not `INSERT`/`UPDATE`/`DELETE`/`REPLACE` (Ptah's later rule, which this commit lacks) |
//! | each row: version, description, checksum, `appliedAt`, `executionMillis`, dirty | the table `schema_migrations` (Ptah prints no row) |
//! | `modifiedVersions`: applied rows whose checksum is not the file's | the table's `checksum` against the directory |
//! | `aheadVersions`: applied versions the directory lacks | Ptah's `applied_migrations` against the directory |
//! | the checksum a pending row will record, its description, checkpoint flag and declared transaction mode | the directory: lowercase hex SHA-256 of the up file's bytes, as Ptah records it (and as `ptah.sum` seals it) |
//! | `checkpointVersion` | the table's applied versions that the directory marks as checkpoints |
//! | the run's end, the failing version | Ptah: `up`'s exit code, its JSON log lines on stdout and the `error:` line on stderr |
//! | the versions a run applied | Ptah's `applied_migrations` read after the run, against the one before |
//! | the failing statement's position | the row's `applied` + 1 when Ptah records progress (tx-mode none, MySQL), else the row's `error_stmt` found once among the up file's statements |
//! | SQLSTATE and MySQL errno | the driver text in the row's `error` (`(SQLSTATE 42P07)`, `Error 1061 (42000)`), else Ptah's `error:` line |
//!
//! The runner reads only the native layout (`schema_migrations`, Ptah's
//! format directories); an Atlas directory or revision key is refused, never
//! guessed at. No SQL text, row error or value leaves the Pod: a message is
//! the runner's own sentence or Ptah's error line cut before any driver text,
//! through [`super::redact::message`].
//!
//! The files follow those seams: `directory` (what Ptah reads of the
//! migration files), `status` (`migrations status --json`), `rows`, `table`
//! and `tls` (the revision table read), `hook` (the exact sequence under the
//! lock), `run` (`migrations up` and how it ended), `golden` (the goldens'
//! normaliser); the History reading itself is here.
//!
//! Streams and exit codes, as the pinned Ptah writes them (the goldens in
//! `conformance/testdata/executor/<engine>/migrations-*`): `status --json`
//! exits 0 with one document on stdout and nothing on stderr, 2 with `error:`
//! on stderr; `up --log-format=json` writes JSON lines on stdout, exit 0 ends
//! with `✅ Migrations completed successfully!` or `✅ Database is already up
//! to date!`, exit 2 puts `error: …` on stderr (a driver error on the next
//! line is `SQL: <statement>`, a hook's output follows its line).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Deserializer};

use crate::api::common::MigrationTransactionMode;
use crate::api::journal::RunFailure;
use crate::api::migration::RevisionRow;
use crate::api::plan::PlannedMigration;

use super::StepError;
use super::cli::{ApplyArgs, DatabaseArgs};
use super::executor::{ChildRun, Executor};
use super::identity::Target;
use super::reports::strip_comments;
use super::reports::{ReportError, json_stdout, last_error_line, not_truncated};
use crate::protocol::args::EngineArg;
use crate::protocol::from_json;
use crate::protocol::migrations::{
    Direction, DirtyRevision, HISTORY_CONTRACT_VERSION, HistoryReport, HistoryVerdict,
    REVISIONS_MAX, RunOutcome, RunResult, check_history, sequence_digest,
};
use crate::protocol::receiver::content_sha256;
use crate::protocol::result::StepOutput;

/// Ptah's revision table (native layout, default name).
pub const REVISION_TABLE: &str = "schema_migrations";
/// Ptah's `error` of a row whose last statement's outcome was never recorded.
pub const UNKNOWN_OUTCOME: &str =
    "statement execution outcome is unknown after process interruption";
/// Where the runner image keeps the runner: the pre-up hook runs it.
pub const RUNNER_PATH: &str = "/usr/local/bin/ptah-runner";
/// `up`'s line when it ran everything it selected.
pub const UP_COMPLETED: &str = "✅ Migrations completed successfully!";
/// `up`'s line when nothing was pending.
pub const UP_TO_DATE: &str = "✅ Database is already up to date!";
/// What Ptah's error says when the pre-up hook refused.
const HOOK_FAILED: &str = "pre-flight custom command hook failed";
/// The file that seals a Ptah-format directory.
const PTAH_SUM: &str = "ptah.sum";
/// The longest description a row or plan carries.
const DESCRIPTION_MAX: usize = 128;
/// How long the read of the revision table may take.
const TABLE_READ_TIMEOUT: Duration = Duration::from_secs(60);

mod directory;
mod golden;
mod hook;
mod rows;
mod run;
mod status;
mod table;
pub(crate) use table::{connect_mysql, percent_decode};
mod tls;
pub use directory::*;
pub use golden::*;
pub use hook::*;
pub use rows::*;
pub use run::*;
pub use status::*;
pub use table::*;
use tls::*;

/// One reading: what Ptah said, what the table holds, the directory, and the
/// report derived from them.
#[derive(Debug, Clone)]
pub struct Reading {
    /// Ptah's status.
    pub status: StatusDocument,
    /// The rows, by version.
    pub rows: Vec<TableRow>,
    /// The directory.
    pub directory: Directory,
    /// The report.
    pub report: HistoryReport,
}

pub(crate) fn history_invalid(field: &'static str, reason: impl Into<String>) -> ReportError {
    ReportError::Invalid {
        what: "history",
        field,
        reason: reason.into(),
    }
}

/// The first keyword of `statement`, comments skipped, upper-cased.
pub(crate) fn first_keyword(statement: &str) -> String {
    strip_comments(statement)
        .split(|c: char| c.is_whitespace() || c == '(')
        .find(|w| !w.is_empty())
        .unwrap_or_default()
        .to_ascii_uppercase()
}

/// Whether a failure of `statement` on `engine` may still have committed:
/// on MySQL and MariaDB every statement but `INSERT`, `UPDATE`, `DELETE` and
/// `REPLACE` (atomic on failure) — Ptah's own later rule, which the pinned
/// commit applies only inside tx-mode file.
pub fn failure_may_have_committed(engine: EngineArg, statement: &str) -> bool {
    engine == EngineArg::Mysql
        && !matches!(
            first_keyword(statement).as_str(),
            "INSERT" | "UPDATE" | "DELETE" | "REPLACE"
        )
}

/// The report of one reading: Ptah's facts, the table's rows, the
/// directory's checksums (module doc). Refuses a reading whose parts do not
/// agree (a run between them), never guesses.
pub fn derive_history(
    engine: EngineArg,
    status: &StatusDocument,
    rows: &[TableRow],
    dir: &Directory,
    target_identity_digest: &str,
) -> Result<HistoryReport, ReportError> {
    let mut rows: Vec<TableRow> = rows.to_vec();
    rows.sort_by_key(|r| r.version);
    if rows.windows(2).any(|w| w[0].version == w[1].version) {
        return Err(history_invalid("revisions", "a version is listed twice"));
    }
    let table_applied: Vec<i64> = rows
        .iter()
        .filter(|r| r.is_applied())
        .map(|r| r.version)
        .collect();
    if table_applied != status.applied_migrations {
        return Err(history_invalid(
            "appliedMigrations",
            "Ptah's status and the revision table disagree: the history moved while it was read",
        ));
    }
    let dirty = match &status.dirty_revision {
        None => {
            if let Some(r) = rows.iter().find(|r| !r.is_applied()) {
                return Err(history_invalid(
                    "dirtyRevision",
                    format!(
                        "the table holds dirty row {} that Ptah did not report",
                        r.version
                    ),
                ));
            }
            None
        }
        Some(d) => {
            let Some(row) = rows
                .iter()
                .find(|r| r.version == d.version && !r.is_applied())
            else {
                return Err(history_invalid(
                    "dirtyRevision",
                    format!(
                        "Ptah reports version {} dirty; the table does not",
                        d.version
                    ),
                ));
            };
            let statement = d
                .error_stmt
                .as_deref()
                .or(row.error_stmt.as_deref())
                .unwrap_or_default();
            let marker = d.error.as_deref() == Some(UNKNOWN_OUTCOME);
            Some(DirtyRevision {
                version: d.version,
                direction: parse_direction(d)?,
                state: d.state.clone(),
                statements_applied: Some(d.applied),
                statements_total: Some(d.total),
                outcome_unknown: marker
                    || (d.state.starts_with("failed")
                        && !statement.is_empty()
                        && failure_may_have_committed(engine, statement)),
            })
        }
    };
    let mut pending = Vec::with_capacity(status.pending_migrations.len());
    for v in &status.pending_migrations {
        let Some(m) = dir.migrations.get(v) else {
            return Err(history_invalid(
                "pending",
                format!("Ptah lists version {v}, which the directory the runner read lacks"),
            ));
        };
        pending.push(m.planned());
    }
    let modified_versions: Vec<i64> = rows
        .iter()
        .filter(|r| r.is_applied() && !r.checksum.is_empty())
        .filter(|r| {
            dir.migrations
                .get(&r.version)
                .is_some_and(|m| r.checksum.trim_start_matches("h1:") != m.checksum)
        })
        .map(|r| r.version)
        .collect();
    let ahead_versions: Vec<i64> = status
        .applied_migrations
        .iter()
        .copied()
        .filter(|v| !dir.migrations.contains_key(v))
        .collect();
    let checkpoint_version = status
        .applied_migrations
        .iter()
        .copied()
        .filter(|v| dir.migrations.get(v).is_some_and(|m| m.checkpoint))
        .max();
    let history_fingerprint = history_fingerprint(&rows, dir, &pending, status);
    let mut revisions: Vec<RevisionRow> = rows.iter().rev().map(TableRow::revision).collect();
    revisions.truncate(REVISIONS_MAX);
    Ok(HistoryReport {
        contract_version: HISTORY_CONTRACT_VERSION,
        current_version: status.current_version,
        checkpoint_version,
        applied_count: status.applied_migrations.len() as i64,
        revisions,
        dirty_revision: dirty,
        modified_versions,
        out_of_order_versions: status.out_of_order_migrations.clone(),
        ahead_versions,
        pending,
        history_fingerprint,
        target_identity_digest: target_identity_digest.to_string(),
    })
}

/// `sha256:` of the canonical JSON of every row as read, the directory's
/// checksums and Ptah's selection: equal readings give equal fingerprints,
/// and any moved row, changed file or other selection another.
pub fn history_fingerprint(
    rows: &[TableRow],
    dir: &Directory,
    pending: &[PlannedMigration],
    status: &StatusDocument,
) -> String {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "version": r.version,
                "description": r.description,
                "appliedAt": r.applied_at,
                "state": r.state,
                "applied": r.applied,
                "total": r.total,
                "error": r.error,
                "errorStatement": r.error_stmt,
                "executionMillis": r.execution_millis,
                "checksum": r.checksum,
            })
        })
        .collect();
    let checksums: Vec<serde_json::Value> = dir
        .migrations
        .values()
        .map(|m| serde_json::json!({"version": m.version, "checksum": m.checksum, "checkpoint": m.checkpoint}))
        .collect();
    let selection: Vec<serde_json::Value> = pending
        .iter()
        .map(|m| {
            serde_json::json!({
                "version": m.version,
                "checksum": m.checksum,
                "checkpoint": m.checkpoint,
                "transactionMode": m.transaction_mode,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "contractVersion": HISTORY_CONTRACT_VERSION,
        "rows": rows,
        "directory": checksums,
        "pending": selection,
        "outOfOrder": status.out_of_order_migrations,
    });
    content_sha256(&serde_json::to_vec(&doc).unwrap_or_default())
}

pub(crate) fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

pub(crate) fn status_args(args: &DatabaseArgs, sealed: bool) -> Vec<String> {
    let mut argv = vec![
        "migrations".to_string(),
        "status".into(),
        "--json".into(),
        format!("--migrations-dir={}", args.source.display()),
    ];
    if sealed {
        argv.push("--verify-sum".into());
    }
    if !args.connect_timeout.is_zero() {
        argv.push(format!(
            "--connect-timeout={}",
            go_duration(args.connect_timeout)
        ));
    }
    argv
}

/// One full reading: the directory, Ptah's status, the table.
pub async fn read_history(args: &DatabaseArgs, exec: &Executor) -> Result<Reading, StepError> {
    let target = Target::from_url(args.engine, exec.db_url())?;
    let directory = read_directory(&args.source).map_err(|e| StepError::failed(e.to_string()))?;
    let run = exec
        .run(
            &status_args(args, directory.sealed),
            args.common.bounds.timeout,
        )
        .await?;
    let status = parse_status(&run).map_err(|e| StepError::failed(e.to_string()))?;
    let rows =
        read_revision_table(args.engine, exec.db_url(), &target, args.connect_timeout).await?;
    let report = derive_history(args.engine, &status, &rows, &directory, &target.digest())
        .map_err(|e| StepError::failed(e.to_string()))?;
    check_history(&report)
        .map_err(|e| StepError::failed(format!("the runner's own report: {e}")))?;
    Ok(Reading {
        status,
        rows,
        directory,
        report,
    })
}

/// History: the reading of the revision table against the directory.
pub async fn history(args: &DatabaseArgs, exec: &Executor) -> Result<StepOutput, StepError> {
    let reading = read_history(args, exec).await?;
    Ok(StepOutput::History {
        report: reading.report,
    })
}

#[cfg(test)]
mod tests;
