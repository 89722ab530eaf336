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

// ---- the directory ----

/// One migration of the directory, as Ptah loads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryMigration {
    /// The 10-digit version.
    pub version: i64,
    /// Ptah's description: the name's words, title-cased.
    pub description: String,
    /// Lowercase hex SHA-256 of the up file's bytes: what the row records.
    pub checksum: String,
    /// A `.checkpoint.` pair.
    pub checkpoint: bool,
    /// What the up file's header declares.
    pub transaction_mode: Option<MigrationTransactionMode>,
    /// The up file, relative to the directory.
    pub up_file: String,
    /// The up file's text.
    pub up_sql: String,
}

impl DirectoryMigration {
    /// The plan's view of it.
    pub fn planned(&self) -> PlannedMigration {
        PlannedMigration {
            version: self.version,
            version_key: None,
            description: Some(self.description.clone()),
            checksum: self.checksum.clone(),
            checkpoint: self.checkpoint,
            transaction_mode: self.transaction_mode,
        }
    }
}

/// A Ptah-format migration directory, by version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directory {
    /// Every migration, by version.
    pub migrations: BTreeMap<i64, DirectoryMigration>,
    /// `ptah.sum` is there.
    pub sealed: bool,
}

/// Why a directory is not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("migration directory: {file}: {reason}")]
pub struct DirectoryError {
    /// The file (or `.` for the directory).
    pub file: String,
    /// Why.
    pub reason: String,
}

fn dir_error(file: impl Into<String>, reason: impl Into<String>) -> DirectoryError {
    DirectoryError {
        file: file.into(),
        reason: reason.into(),
    }
}

/// `NNNNNNNNNN_name[.checkpoint].(up|down).sql` as Ptah parses it: the
/// version, the name, the direction and the checkpoint marker.
pub fn parse_file_name(name: &str) -> Option<(i64, String, bool, bool)> {
    let (stem, up) = if let Some(s) = name.strip_suffix(".up.sql") {
        (s, true)
    } else {
        (name.strip_suffix(".down.sql")?, false)
    };
    let (stem, checkpoint) = match stem.strip_suffix(".checkpoint") {
        Some(s) => (s, true),
        None => (stem, false),
    };
    let digits = stem.get(..10)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || stem.as_bytes().get(10) != Some(&b'_') {
        return None;
    }
    let title = stem.get(11..).filter(|n| !n.is_empty())?;
    Some((digits.parse().ok()?, title.to_string(), up, checkpoint))
}

/// Ptah's description of a file name: underscores to spaces, each word
/// title-cased (`order_index` → `Order Index`).
pub fn description_of(name: &str) -> String {
    let words: Vec<String> = name
        .replace('_', " ")
        .split(' ')
        .map(|w| {
            let mut chars = w.chars();
            match chars.next() {
                Some(first) => first
                    .to_uppercase()
                    .chain(chars.flat_map(char::to_lowercase))
                    .collect(),
                None => String::new(),
            }
        })
        .collect();
    words.join(" ").chars().take(DESCRIPTION_MAX).collect()
}

/// The transaction mode the up file's header declares: `-- +ptah
/// no_transaction` (or `=true`), or `-- atlas:txmode none|file`.
pub fn declared_transaction_mode(sql: &str) -> Option<MigrationTransactionMode> {
    let mut mode = None;
    for line in sql.lines() {
        let line = line.trim();
        let Some(comment) = line.strip_prefix("--") else {
            break;
        };
        let comment = comment.trim();
        if let Some(body) = comment.strip_prefix("+ptah") {
            for token in body.split_whitespace() {
                match token {
                    "no_transaction" | "no_transaction=true" => {
                        return Some(MigrationTransactionMode::None);
                    }
                    "no_transaction=false" => mode = Some(MigrationTransactionMode::File),
                    _ => {}
                }
            }
        } else if let Some(value) = comment.strip_prefix("atlas:txmode") {
            match value.trim() {
                "none" => return Some(MigrationTransactionMode::None),
                "file" => mode = Some(MigrationTransactionMode::File),
                _ => {}
            }
        }
    }
    mode
}

/// Reads a Ptah-format directory as Ptah does: every
/// `NNNNNNNNNN_name.(up|down).sql` below `source`, both halves required, the
/// up file's bytes hashed. Symbolic links, Atlas directories, Atlas templates
/// and txtar files are refused: Ptah would record another checksum for them.
pub fn read_directory(source: &Path) -> Result<Directory, DirectoryError> {
    let mut dir = Directory::default();
    let mut halves: BTreeMap<i64, (Option<DirectoryMigration>, bool, bool)> = BTreeMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = source.join(&rel);
        let entries = std::fs::read_dir(&here)
            .map_err(|e| dir_error(display(&rel), format!("cannot be listed: {}", e.kind())))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry
                .map_err(|e| dir_error(display(&rel), format!("cannot be listed: {}", e.kind())))?;
            names.push(entry);
        }
        names.sort_by_key(std::fs::DirEntry::file_name);
        for entry in names {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = rel.join(&name);
            let kind = entry
                .file_type()
                .map_err(|e| dir_error(display(&path), format!("cannot be read: {}", e.kind())))?;
            if kind.is_symlink() {
                return Err(dir_error(display(&path), "is a symbolic link"));
            }
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            if rel.as_os_str().is_empty() && name == "atlas.sum" {
                return Err(dir_error(
                    name,
                    "an Atlas directory: the runner reads Ptah's format only",
                ));
            }
            if rel.as_os_str().is_empty() && name == PTAH_SUM {
                dir.sealed = true;
                continue;
            }
            let Some((version, title, up, checkpoint)) = parse_file_name(&name) else {
                continue;
            };
            let slot = halves.entry(version).or_insert((None, false, checkpoint));
            if slot.2 != checkpoint {
                return Err(dir_error(
                    display(&path),
                    "mixes checkpoint and non-checkpoint halves",
                ));
            }
            if !up {
                if slot.1 {
                    return Err(dir_error(
                        display(&path),
                        format!("a second down file for version {version}"),
                    ));
                }
                slot.1 = true;
                continue;
            }
            if slot.0.is_some() {
                return Err(dir_error(
                    display(&path),
                    format!("a second up file for version {version}"),
                ));
            }
            let bytes = std::fs::read(source.join(&path))
                .map_err(|e| dir_error(display(&path), format!("cannot be read: {}", e.kind())))?;
            let sql = String::from_utf8(bytes.clone())
                .map_err(|_| dir_error(display(&path), "is not UTF-8"))?;
            if sql.contains("{{") {
                return Err(dir_error(
                    display(&path),
                    "looks like an Atlas template, which Ptah renders before hashing",
                ));
            }
            if sql.lines().any(|l| l.trim() == "-- atlas:txtar") {
                return Err(dir_error(
                    display(&path),
                    "is an Atlas txtar file, whose migration section Ptah hashes",
                ));
            }
            slot.0 = Some(DirectoryMigration {
                version,
                description: description_of(&title),
                checksum: hex::encode(sha2_digest(&bytes)),
                checkpoint,
                transaction_mode: declared_transaction_mode(&sql),
                up_file: display(&path),
                up_sql: sql,
            });
        }
    }
    for (version, (up, down, _)) in halves {
        match (up, down) {
            (Some(m), true) => {
                dir.migrations.insert(version, m);
            }
            _ => {
                return Err(dir_error(
                    ".",
                    format!(
                        "version {version} lacks its up or down file: Ptah requires both halves"
                    ),
                ));
            }
        }
    }
    Ok(dir)
}

fn display(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        ".".into()
    } else {
        path.display().to_string()
    }
}

fn sha2_digest(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}

// ---- `migrations status --json` ----

fn nullable<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<Vec<T>>::deserialize(d).map(Option::unwrap_or_default)
}

/// `migrations status --json`, as the pinned Ptah writes it
/// (`MigrationStatus`). A list Go may write as `null` must still be there.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusDocument {
    /// The newest applied version, 0 for none.
    pub current_version: i64,
    /// Present when an exact revision key applies.
    #[serde(default)]
    pub current_version_key: Option<String>,
    /// The applied versions.
    #[serde(deserialize_with = "nullable")]
    pub applied_migrations: Vec<i64>,
    /// Their keys.
    #[serde(default)]
    pub applied_migration_keys: Option<Vec<String>>,
    /// Ptah's pending selection, in order.
    #[serde(deserialize_with = "nullable")]
    pub pending_migrations: Vec<i64>,
    /// Their keys.
    #[serde(default)]
    pub pending_migration_keys: Option<Vec<String>>,
    /// Pending versions below the current one.
    #[serde(deserialize_with = "nullable")]
    pub out_of_order_migrations: Vec<i64>,
    /// Their keys.
    #[serde(default)]
    pub out_of_order_migration_keys: Option<Vec<String>>,
    /// Migrations in the directory.
    pub total_migrations: i64,
    /// Pending or dirty.
    pub has_pending_changes: bool,
    /// The row a failed or interrupted run left.
    #[serde(default)]
    pub dirty_revision: Option<StatusRevision>,
}

/// Ptah's `MigrationRevision` (the dirty row of a status document).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRevision {
    /// The version.
    pub version: i64,
    /// An Atlas revision identity (refused: native layout only).
    #[serde(default)]
    pub atlas_version: Option<String>,
    /// The description.
    pub description: String,
    /// `pending`, `failed`, `pending:down`, …
    pub state: String,
    /// `up` or `down`; absent on rows older than the column.
    #[serde(default)]
    pub direction: Option<String>,
    /// Atlas only.
    #[serde(default)]
    pub atlas_type: Option<serde_json::Value>,
    /// Statements committed.
    pub applied: i64,
    /// Statements in the body.
    pub total: i64,
    /// The error text (stays in the Pod).
    #[serde(default)]
    pub error: Option<String>,
    /// The failing statement (stays in the Pod).
    #[serde(default)]
    pub error_stmt: Option<String>,
    /// Go nanoseconds.
    pub execution_time: i64,
    /// Full or `partial:h1:` checksum.
    #[serde(default)]
    pub checksum: Option<String>,
    /// RFC 3339 (never parsed: the table's value is the one reported).
    pub applied_at: String,
    /// Atlas only.
    #[serde(default)]
    pub operator_version: Option<String>,
    /// Always true here.
    pub dirty: bool,
    /// Present when Ptah compared it.
    #[serde(default)]
    pub checksum_current: Option<String>,
}

/// Ptah's error line, cut before any driver text or statement (which can
/// hold values), redacted and bounded: what a message may say.
pub fn ptah_error(stderr: &[u8]) -> String {
    let line = last_error_line(stderr);
    // A statement's failure carries the driver's text, which can quote
    // values (MySQL's `Duplicate entry '…'`); a dirty refusal quotes the row's
    // error and statement. Connection and gate errors are kept whole.
    let cut = [
        "failed to execute migration SQL",
        "SQL execution failed",
        " error=",
        " error_stmt=",
        "SQL: ",
    ]
    .iter()
    .filter_map(|m| line.find(m))
    .min();
    match cut {
        Some(at) => format!("{}…", line[..at].trim_end_matches([' ', ':'])),
        None => line,
    }
}

/// `migrations status --json`: exit 0 and the document on stdout; exit 2
/// is Ptah's error. The document must agree with itself.
pub fn parse_status(run: &ChildRun) -> Result<StatusDocument, ReportError> {
    const WHAT: &str = "migration status";
    const COMMAND: &str = "migrations status";
    not_truncated(run)?;
    match run.exit {
        0 => {}
        2 => {
            return Err(ReportError::Failed {
                command: COMMAND,
                exit: 2,
                message: ptah_error(&run.stderr),
            });
        }
        exit => {
            return Err(ReportError::UnknownExit {
                command: COMMAND,
                exit,
            });
        }
    }
    let doc: StatusDocument = json_stdout(run, WHAT)?;
    check_status(&doc)?;
    Ok(doc)
}

fn status_invalid(field: &'static str, reason: impl Into<String>) -> ReportError {
    ReportError::Invalid {
        what: "migration status",
        field,
        reason: reason.into(),
    }
}

/// The rules a status document keeps: native keys only, versions ascending
/// and unique, the current version the newest applied one, out-of-order
/// versions among the pending ones, `has_pending_changes` as Ptah derives it.
pub fn check_status(doc: &StatusDocument) -> Result<(), ReportError> {
    let ascending = |field: &'static str, v: &[i64]| {
        if v.iter().any(|x| *x < 0) || v.windows(2).any(|w| w[0] >= w[1]) {
            return Err(status_invalid(
                field,
                "are not unique, non-negative and ascending",
            ));
        }
        Ok(())
    };
    ascending("applied_migrations", &doc.applied_migrations)?;
    ascending("pending_migrations", &doc.pending_migrations)?;
    ascending("out_of_order_migrations", &doc.out_of_order_migrations)?;
    for (field, keys, versions) in [
        (
            "applied_migration_keys",
            &doc.applied_migration_keys,
            &doc.applied_migrations,
        ),
        (
            "pending_migration_keys",
            &doc.pending_migration_keys,
            &doc.pending_migrations,
        ),
        (
            "out_of_order_migration_keys",
            &doc.out_of_order_migration_keys,
            &doc.out_of_order_migrations,
        ),
    ] {
        if let Some(keys) = keys {
            let native: Vec<String> = versions.iter().map(i64::to_string).collect();
            if *keys != native {
                return Err(status_invalid(
                    field,
                    "are not the versions: an Atlas layout, which the runner does not read",
                ));
            }
        }
    }
    let newest = doc.applied_migrations.last().copied().unwrap_or(0);
    if doc.current_version != newest {
        return Err(status_invalid(
            "current_version",
            format!(
                "is {} but the newest applied version is {newest}",
                doc.current_version
            ),
        ));
    }
    if let Some(v) = doc
        .out_of_order_migrations
        .iter()
        .find(|v| !doc.pending_migrations.contains(v))
    {
        return Err(status_invalid(
            "out_of_order_migrations",
            format!("{v} is not pending"),
        ));
    }
    if let Some(v) = doc
        .pending_migrations
        .iter()
        .find(|v| doc.applied_migrations.contains(v))
    {
        return Err(status_invalid(
            "pending_migrations",
            format!("{v} is also applied"),
        ));
    }
    let derived = !doc.pending_migrations.is_empty() || doc.dirty_revision.is_some();
    if doc.has_pending_changes != derived {
        return Err(status_invalid(
            "has_pending_changes",
            format!("is {} against the lists", doc.has_pending_changes),
        ));
    }
    if let Some(d) = &doc.dirty_revision {
        if !d.dirty || d.state == "applied" {
            return Err(status_invalid(
                "dirty_revision.state",
                format!("{:?} is not dirty", d.state),
            ));
        }
        if d.atlas_version.is_some() {
            return Err(status_invalid(
                "dirty_revision.atlas_version",
                "an Atlas layout, which the runner does not read",
            ));
        }
        if d.applied < 0 || d.total < 0 {
            return Err(status_invalid("dirty_revision.applied", "is negative"));
        }
        parse_direction(d)?;
    }
    Ok(())
}

fn parse_direction(d: &StatusRevision) -> Result<Direction, ReportError> {
    match d.direction.as_deref() {
        None | Some("up") => Ok(Direction::Up),
        Some("down") => Ok(Direction::Down),
        Some(other) => Err(status_invalid(
            "dirty_revision.direction",
            format!("{other:?} is not up or down"),
        )),
    }
}

// ---- the revision table ----

/// One row of `schema_migrations`, read with every column as text or
/// integer; a column an older layout lacks is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    /// The version.
    pub version: i64,
    /// The description.
    pub description: String,
    /// `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, UTC.
    pub applied_at: Option<String>,
    /// `applied`, or a dirty state.
    pub state: String,
    /// Statements committed.
    pub applied: Option<i64>,
    /// Statements in the body.
    pub total: Option<i64>,
    /// The error (stays in the Pod).
    pub error: Option<String>,
    /// The failing statement (stays in the Pod).
    pub error_stmt: Option<String>,
    /// Milliseconds.
    pub execution_millis: Option<i64>,
    /// Hex SHA-256, `partial:h1:…`, or empty.
    pub checksum: String,
}

impl TableRow {
    fn is_applied(&self) -> bool {
        self.state == "applied"
    }

    fn revision(&self) -> RevisionRow {
        RevisionRow {
            version: self.version,
            description: Some(self.description.chars().take(DESCRIPTION_MAX).collect())
                .filter(|d: &String| !d.is_empty()),
            checksum: Some(self.checksum.chars().take(DESCRIPTION_MAX).collect())
                .filter(|c: &String| !c.is_empty()),
            applied_at: self
                .applied_at
                .as_deref()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(Time),
            execution_millis: self.execution_millis.filter(|m| *m >= 0),
            dirty: !self.is_applied(),
        }
    }
}

// ---- History ----

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

fn history_invalid(field: &'static str, reason: impl Into<String>) -> ReportError {
    ReportError::Invalid {
        what: "history",
        field,
        reason: reason.into(),
    }
}

/// The first keyword of `statement`, comments skipped, upper-cased.
fn first_keyword(statement: &str) -> String {
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

fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn status_args(args: &DatabaseArgs, sealed: bool) -> Vec<String> {
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

// ---- check-sequence (the pre-up hook) ----

/// What Ptah runs for (current, target] of `dir` on a database whose newest
/// applied version is `current`: with no version applied, the newest
/// checkpoint at or below `target` and the ordinary migrations after it;
/// otherwise the ordinary migrations in the range (a checkpoint never runs
/// on a migrated database). Linear order, which `up` is given, refused any
/// pending version below `current` already.
pub fn hook_selection(dir: &Directory, current: i64, target: i64) -> Vec<&DirectoryMigration> {
    let in_range = |m: &&DirectoryMigration| m.version > current && m.version <= target;
    if current == 0
        && let Some(checkpoint) = dir
            .migrations
            .values()
            .rfind(|m| m.checkpoint && m.version <= target)
    {
        return std::iter::once(checkpoint)
            .chain(
                dir.migrations.values().filter(|m| {
                    !m.checkpoint && m.version > checkpoint.version && m.version <= target
                }),
            )
            .collect();
    }
    dir.migrations
        .values()
        .filter(in_range)
        .filter(|m| !m.checkpoint)
        .collect()
}

/// The pre-up hook's check, pure over the directory: the migrations Ptah
/// selected, (current, target], with the checksums History reports, must
/// hash ([`sequence_digest`]) to the approved digest.
pub fn check_sequence(
    source: &Path,
    sequence_digest_approved: &str,
    current: i64,
    target: i64,
) -> Result<(), String> {
    if current < 0 || target <= current {
        return Err(format!(
            "Ptah selected no migration (current version {current}, target {target}); the approved sequence is not empty"
        ));
    }
    let dir = read_directory(source).map_err(|e| e.to_string())?;
    let selection: Vec<PlannedMigration> = hook_selection(&dir, current, target)
        .into_iter()
        .map(DirectoryMigration::planned)
        .collect();
    let found = sequence_digest(&selection)
        .map_err(|e| format!("the selection ({current}, {target}]: {e}"))?;
    if found != sequence_digest_approved {
        return Err(format!(
            "the {} migration(s) Ptah selected under its lock, ({current}, {target}], hash to {found}, not the approved {sequence_digest_approved}",
            selection.len()
        ));
    }
    Ok(())
}

/// `ptah-runner check-sequence`: reads `PTAH_CURRENT_VERSION` and
/// `PTAH_TARGET_VERSION` (Ptah's hook environment) and answers the exit
/// code: 0 the same sequence, [`super::EXIT_REFUSED`] another, and
/// [`super::EXIT_USAGE`] when the variables are missing or not versions.
/// The reason goes to stderr, which Ptah appends to its error.
pub fn check_sequence_from_env(source: &Path, sequence_digest_approved: &str) -> i32 {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .ok_or_else(|| {
                format!("{name} is not set to a version: run me only as Ptah's pre-up hook")
            })
    };
    let versions =
        var("PTAH_CURRENT_VERSION").and_then(|c| var("PTAH_TARGET_VERSION").map(|t| (c, t)));
    match versions {
        Err(e) => {
            eprintln!("ptah-runner check-sequence: {e}");
            super::EXIT_USAGE
        }
        Ok((current, target)) => {
            match check_sequence(source, sequence_digest_approved, current, target) {
                Ok(()) => super::EXIT_OK,
                Err(e) => {
                    eprintln!("ptah-runner check-sequence: refused: {e}");
                    super::EXIT_REFUSED
                }
            }
        }
    }
}

/// A single-quoted word for `/bin/sh -c`.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The hook command Ptah runs: the runner's `check-sequence`.
pub fn hook_command(runner: &Path, sequence_digest_approved: &str, source: &Path) -> String {
    format!(
        "{} check-sequence {} {}",
        shell_quote(&runner.display().to_string()),
        shell_quote(&format!("--sequence-digest={sequence_digest_approved}")),
        shell_quote(&format!("--source={}", source.display())),
    )
}

// ---- `migrations up` ----

/// One JSON log line of `up --log-format=json`.
#[derive(Debug, Deserialize)]
struct LogLine {
    #[allow(dead_code, reason = "part of the contract; never read")]
    time: String,
    level: String,
    msg: String,
    #[allow(dead_code, reason = "part of the contract; never read")]
    correlation_id: String,
    command: String,
    #[serde(default)]
    version: Option<i64>,
}

/// What `up`'s log says it did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpLog {
    /// `Applying migration` versions, in order.
    pub started: Vec<i64>,
    /// `Applied migration` (and non-transactional) versions, in order.
    pub applied: Vec<i64>,
    /// The pre-up hook ran and passed.
    pub hook_passed: bool,
    /// The completion line.
    pub completed: bool,
    /// The up-to-date line.
    pub up_to_date: bool,
}

/// How `up` ended, as its streams say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpEnd {
    /// Exit 0 and the completion line.
    Completed(UpLog),
    /// Exit 0, nothing pending.
    UpToDate(UpLog),
    /// Exit 2 and Ptah's error.
    Failed {
        /// The log up to the error.
        log: UpLog,
        /// The failing migration, from `failed to apply migration N`.
        version: Option<i64>,
        /// The pre-up hook refused (the sequence check, or another hook).
        hook_refused: bool,
        /// SQLSTATE and errno in Ptah's line.
        codes: (Option<String>, Option<i32>),
        /// The message that may leave the Pod.
        message: String,
    },
}

/// `migrations up --log-format=json`: JSON lines on stdout; exit 0 ends with
/// the completion or up-to-date line, exit 2 with `error:` on stderr.
pub fn parse_up(run: &ChildRun) -> Result<UpEnd, ReportError> {
    const WHAT: &str = "migrate up log";
    const COMMAND: &str = "migrations up";
    not_truncated(run)?;
    if !matches!(run.exit, 0 | 2) {
        return Err(ReportError::UnknownExit {
            command: COMMAND,
            exit: run.exit,
        });
    }
    let text = std::str::from_utf8(&run.stdout).map_err(|_| ReportError::Unparsable {
        what: WHAT,
        reason: "stdout is not UTF-8".into(),
    })?;
    let mut log = UpLog::default();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let entry: LogLine = serde_json::from_str(line).map_err(|e| ReportError::Unparsable {
            what: WHAT,
            reason: format!("line {}: {e}", i + 1),
        })?;
        if entry.command != "migrations.up" {
            return Err(ReportError::Invalid {
                what: WHAT,
                field: "command",
                reason: format!("line {} is of {:?}", i + 1, entry.command),
            });
        }
        if !matches!(entry.level.as_str(), "DEBUG" | "INFO" | "WARN" | "ERROR") {
            return Err(ReportError::Invalid {
                what: WHAT,
                field: "level",
                reason: format!("line {} has {:?}", i + 1, entry.level),
            });
        }
        let version = || {
            entry.version.ok_or(ReportError::Invalid {
                what: WHAT,
                field: "version",
                reason: format!("line {} names no version", i + 1),
            })
        };
        match entry.msg.as_str() {
            "Applying migration" => log.started.push(version()?),
            "Applied migration" | "Applied non-transactional migration" => {
                log.applied.push(version()?)
            }
            "Pre-flight custom command completed" => log.hook_passed = true,
            UP_COMPLETED => log.completed = true,
            UP_TO_DATE => log.up_to_date = true,
            _ => {}
        }
    }
    if run.exit == 0 {
        if !run.stderr.iter().all(u8::is_ascii_whitespace) {
            return Err(ReportError::Invalid {
                what: WHAT,
                field: "stderr",
                reason: "holds output under exit 0".into(),
            });
        }
        return match (log.completed, log.up_to_date) {
            (true, false) => Ok(UpEnd::Completed(log)),
            (false, true) if log.started.is_empty() => Ok(UpEnd::UpToDate(log)),
            _ => Err(ReportError::Missing {
                what: "completion line",
                stream: "stdout",
                exit: 0,
            }),
        };
    }
    let stderr = String::from_utf8_lossy(&run.stderr);
    let Some(line) = stderr.lines().rev().find_map(|l| l.strip_prefix("error: ")) else {
        return Err(ReportError::Missing {
            what: "error line",
            stream: "stderr",
            exit: 2,
        });
    };
    let hook_refused = line.contains(HOOK_FAILED);
    let mut message = ptah_error(&run.stderr);
    if hook_refused {
        // The runner's own check says why, on the line after Ptah's.
        if let Some(why) = stderr
            .lines()
            .find(|l| l.starts_with("ptah-runner check-sequence: "))
        {
            message = format!("{message}: {}", super::redact::message(why));
        }
    }
    Ok(UpEnd::Failed {
        version: failed_version(line),
        hook_refused,
        codes: driver_codes(line),
        message,
        log,
    })
}

/// `failed to apply migration N` in Ptah's error.
pub fn failed_version(text: &str) -> Option<i64> {
    const MARK: &str = "failed to apply migration ";
    let at = text.find(MARK)? + MARK.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// SQLSTATE and MySQL errno in driver text: pgx's `(SQLSTATE 42P07)`,
/// go-sql-driver's `Error 1061 (42000)`.
pub fn driver_codes(text: &str) -> (Option<String>, Option<i32>) {
    let state = |s: &str| {
        Some(s.to_string()).filter(|s| {
            s.len() == 5
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        })
    };
    if let Some(at) = text.find("(SQLSTATE ") {
        let rest = &text[at + 10..];
        if let Some(code) = rest
            .get(..5)
            .filter(|_| rest.as_bytes().get(5) == Some(&b')'))
        {
            return (state(code), None);
        }
    }
    let mut rest = text;
    while let Some(at) = rest.find("Error ") {
        rest = &rest[at + 6..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = &rest[digits.len()..];
        if let (Ok(errno), Some(code)) = (
            digits.parse::<i32>(),
            after.strip_prefix(" (").and_then(|a| a.get(..5)),
        ) && after.as_bytes().get(7) == Some(&b')')
        {
            return (state(code), Some(errno));
        }
    }
    (None, None)
}

/// The statements of `sql`, split on `;` outside quotes, comments and
/// PostgreSQL dollar quotes, comments removed, white space collapsed; empty
/// ones dropped.
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = sql.chars().collect();
    let mut i = 0;
    let push = |s: &mut String, out: &mut Vec<String>| {
        let normal = normal_statement(s);
        if !normal.is_empty() {
            out.push(normal);
        }
        s.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' | '"' | '`' => {
                current.push(c);
                i += 1;
                while i < chars.len() {
                    current.push(chars[i]);
                    if chars[i] == '\\' && c == '\'' && i + 1 < chars.len() {
                        current.push(chars[i + 1]);
                        i += 2;
                        continue;
                    }
                    i += 1;
                    if chars[i - 1] == c {
                        break;
                    }
                }
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    current.push(chars[i]);
                    i += 1;
                }
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                current.push_str("/*");
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    current.push(chars[i]);
                    i += 1;
                }
                current.push_str("*/");
                i += 2;
            }
            '$' => {
                let tag_end = chars[i + 1..]
                    .iter()
                    .position(|c| !(c.is_alphanumeric() || *c == '_'))
                    .map(|p| i + 1 + p);
                match tag_end {
                    Some(end)
                        if chars[end] == '$'
                            && !chars
                                .get(i.wrapping_sub(1))
                                .is_some_and(|p| p.is_alphanumeric()) =>
                    {
                        let tag: String = chars[i..=end].iter().collect();
                        current.push_str(&tag);
                        i = end + 1;
                        let rest: String = chars[i..].iter().collect();
                        let close = rest.find(&tag).map_or(rest.len(), |p| p + tag.len());
                        current.push_str(&rest[..close]);
                        i += rest[..close].chars().count();
                    }
                    _ => {
                        current.push(c);
                        i += 1;
                    }
                }
            }
            ';' => {
                push(&mut current, &mut out);
                i += 1;
            }
            _ => {
                current.push(c);
                i += 1;
            }
        }
    }
    push(&mut current, &mut out);
    out
}

/// A statement without comments, its white space collapsed.
fn normal_statement(s: &str) -> String {
    strip_comments(s)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches(';')
        .trim()
        .to_string()
}

/// The 1-based position of the failing statement: `applied + 1` when the
/// statement there is `error_stmt` (Ptah recorded progress), else where
/// `error_stmt` occurs exactly once among the statements from `applied` on
/// (a transactional PostgreSQL file rolls back to `applied = 0`); `None`
/// when the file does not tell.
pub fn statement_position(up_sql: &str, applied: i64, error_stmt: &str) -> Option<i32> {
    let statements = split_statements(up_sql);
    let wanted = normal_statement(error_stmt);
    if wanted.is_empty() {
        return None;
    }
    let from = usize::try_from(applied).ok()?;
    // `applied > 0` is recorded progress (a rollback zeroes it): the next
    // statement is the one that failed, if it is the one Ptah names.
    if from > 0 && statements.get(from) == Some(&wanted) {
        return i32::try_from(from + 1).ok();
    }
    let mut found = statements
        .iter()
        .enumerate()
        .skip(from)
        .filter(|(_, s)| **s == wanted);
    match (found.next(), found.next()) {
        (Some((i, _)), None) => i32::try_from(i + 1).ok(),
        _ => None,
    }
}

/// The run's end, from `up`'s streams and the history before and after it.
/// Never a success the history does not show: a run is `Applied` only when
/// Ptah said so and every version of the sequence is applied after it.
pub fn decide_run(
    engine: EngineArg,
    sequence: &[PlannedMigration],
    before: &StatusDocument,
    up: Result<UpEnd, ReportError>,
    after: Result<&Reading, String>,
) -> RunOutcome {
    let was: BTreeSet<i64> = before.applied_migrations.iter().copied().collect();
    let log_applied = match &up {
        Ok(UpEnd::Completed(log) | UpEnd::UpToDate(log) | UpEnd::Failed { log, .. }) => {
            log.applied.clone()
        }
        Err(_) => Vec::new(),
    };
    // What the history shows applied now that was not before, in the
    // sequence's order (then any other, by version).
    let (applied_versions, after_reading) = match &after {
        Ok(r) => {
            let now: BTreeSet<i64> = r.status.applied_migrations.iter().copied().collect();
            let new: BTreeSet<i64> = now.difference(&was).copied().collect();
            let mut ordered: Vec<i64> = sequence
                .iter()
                .map(|m| m.version)
                .filter(|v| new.contains(v))
                .collect();
            let others: Vec<i64> = new
                .iter()
                .copied()
                .filter(|v| !ordered.contains(v))
                .collect();
            ordered.extend(others);
            (ordered, Some(*r))
        }
        Err(_) => (log_applied.clone(), None),
    };
    let outcome = |result: RunResult, message: Option<String>| RunOutcome {
        result,
        applied_versions: applied_versions.clone(),
        target_identity_digest: after_reading.map(|r| r.report.target_identity_digest.clone()),
        message: message.map(|m| super::redact::message(&m)),
    };
    let after_note = match &after {
        Err(e) => format!("; the history could not be read back: {e}"),
        Ok(_) => String::new(),
    };
    let wanted: Vec<i64> = sequence.iter().map(|m| m.version).collect();
    let failure = after_reading.and_then(|r| run_failure(engine, r));
    match up {
        Err(e) => {
            let (failure, _) = failure.unzip();
            outcome(
                RunResult::Unknown { failure },
                Some(format!(
                    "ptah's output is not the contract's, so the run's end is unknown: {e}{after_note}"
                )),
            )
        }
        Ok(UpEnd::Completed(log)) => {
            let dirty = after_reading.is_some_and(|r| r.status.dirty_revision.is_some());
            let confirmed = match after_reading {
                Some(_) => applied_versions == wanted,
                None => log.applied == wanted,
            };
            if confirmed && !dirty && log.applied == wanted {
                outcome(
                    RunResult::Applied,
                    after_reading
                        .is_none()
                        .then(|| format!("applied as Ptah reports{after_note}")),
                )
            } else {
                outcome(
                    RunResult::Unknown { failure: None },
                    Some(format!(
                        "Ptah reported success, but the history shows {applied_versions:?} applied of {wanted:?}{after_note}"
                    )),
                )
            }
        }
        Ok(UpEnd::UpToDate(_)) if applied_versions.is_empty() => outcome(
            RunResult::NothingToDo,
            Some(format!("Ptah found nothing pending{after_note}")),
        ),
        Ok(UpEnd::UpToDate(_)) => outcome(
            RunResult::Unknown { failure: None },
            Some(format!(
                "Ptah found nothing pending, yet {applied_versions:?} were applied{after_note}"
            )),
        ),
        Ok(UpEnd::Failed {
            version,
            hook_refused,
            codes,
            message,
            log,
        }) => {
            let at_statement = failure
                .as_ref()
                .filter(|(f, _)| version.is_none_or(|v| v == f.version));
            match at_statement {
                Some((failure, unknown)) => {
                    let note = format!(
                        "migration {} failed at statement {}{}{}{after_note}",
                        failure.version,
                        failure
                            .statement_position
                            .map_or("?".to_string(), |p| p.to_string()),
                        failure
                            .sqlstate
                            .as_ref()
                            .map_or(String::new(), |s| format!(", SQLSTATE {s}")),
                        failure
                            .mysql_errno
                            .map_or(String::new(), |n| format!(", error {n}")),
                    );
                    if *unknown {
                        outcome(
                            RunResult::Unknown {
                                failure: Some(failure.clone()),
                            },
                            Some(format!(
                                "{note}; whether it committed is unknown: inspect the database"
                            )),
                        )
                    } else if applied_versions.is_empty() {
                        outcome(
                            RunResult::Failed {
                                selected: true,
                                failure: Some(failure.clone()),
                            },
                            Some(note),
                        )
                    } else {
                        outcome(
                            RunResult::Partial {
                                failure: Some(failure.clone()),
                            },
                            Some(note),
                        )
                    }
                }
                None if !applied_versions.is_empty()
                    || after_reading.is_none() && !log.applied.is_empty() =>
                {
                    // Something applied, and no row says where it stopped.
                    let failure = version.map(|v| RunFailure {
                        version: v,
                        statement_position: None,
                        sqlstate: codes.0,
                        mysql_errno: codes.1,
                    });
                    outcome(
                        RunResult::Partial { failure },
                        Some(format!("{message}{after_note}")),
                    )
                }
                None if version.is_some() || !log.started.is_empty() && after_reading.is_none() => {
                    // A migration started and failed, and no row says
                    // whether any of it committed.
                    let failure = version.map(|v| RunFailure {
                        version: v,
                        statement_position: None,
                        sqlstate: codes.0,
                        mysql_errno: codes.1,
                    });
                    outcome(
                        RunResult::Unknown { failure },
                        Some(format!("{message}{after_note}")),
                    )
                }
                None => {
                    let why = if hook_refused {
                        format!("refused before any change by the pre-up hook: {message}")
                    } else {
                        format!("refused before any change: {message}")
                    };
                    outcome(
                        RunResult::Failed {
                            selected: false,
                            failure: None,
                        },
                        Some(format!("{why}{after_note}")),
                    )
                }
            }
        }
    }
}

/// Where the reading's dirty row says a run stopped, and whether that
/// statement's outcome is unknown.
fn run_failure(engine: EngineArg, reading: &Reading) -> Option<(RunFailure, bool)> {
    let dirty = reading.status.dirty_revision.as_ref()?;
    let row = reading.rows.iter().find(|r| r.version == dirty.version);
    let error = dirty
        .error
        .as_deref()
        .or(row.and_then(|r| r.error.as_deref()))
        .unwrap_or_default();
    let stmt = dirty
        .error_stmt
        .as_deref()
        .or(row.and_then(|r| r.error_stmt.as_deref()))
        .unwrap_or_default();
    let (sqlstate, mysql_errno) = driver_codes(error);
    let position = reading
        .directory
        .migrations
        .get(&dirty.version)
        .and_then(|m| statement_position(&m.up_sql, dirty.applied, stmt));
    let unknown = reading
        .report
        .dirty_revision
        .as_ref()
        .is_some_and(|d| d.outcome_unknown)
        || error == UNKNOWN_OUTCOME
        || (!stmt.is_empty() && failure_may_have_committed(engine, stmt));
    Some((
        RunFailure {
            version: dirty.version,
            statement_position: position,
            sqlstate,
            mysql_errno,
        },
        unknown,
    ))
}

fn failed_before(target: Option<String>, message: String) -> StepOutput {
    StepOutput::Ran {
        outcome: RunOutcome {
            result: RunResult::Failed {
                selected: false,
                failure: None,
            },
            applied_versions: vec![],
            target_identity_digest: target,
            message: Some(super::redact::message(&message)),
        },
    }
}

/// The longest prefix of Ptah's selection the approved digest names.
fn approved_prefix<'a>(
    pending: &'a [PlannedMigration],
    approved: &str,
) -> Option<&'a [PlannedMigration]> {
    (1..=pending.len())
        .rev()
        .map(|n| &pending[..n])
        .find(|s| sequence_digest(s).is_ok_and(|d| d == approved))
}

/// Apply of a migration plan with the runner at [`RUNNER_PATH`] as the hook.
pub async fn run_migrations(args: &ApplyArgs, exec: &Executor) -> Result<StepOutput, StepError> {
    run_migrations_with(args, exec, Path::new(RUNNER_PATH)).await
}

/// Apply of a migration plan: the History reading first, its selection
/// checked against `--sequence-digest` (a different one is refused before
/// `up` runs), then `migrations up --limit=<approved length>` with `runner
/// check-sequence` as the pre-up hook, then the history read again.
pub async fn run_migrations_with(
    args: &ApplyArgs,
    exec: &Executor,
    runner: &Path,
) -> Result<StepOutput, StepError> {
    let db = &args.database;
    let approved = args.sequence_digest.as_deref().ok_or_else(|| {
        StepError::input("--sequence-digest is required to apply a migration plan")
    })?;
    let target = Target::from_url(db.engine, exec.db_url())?.digest();
    let before = match read_history(db, exec).await {
        Ok(r) => r,
        Err(StepError::Deadline(m)) => return Err(StepError::Deadline(m)),
        Err(StepError::Terminated) => return Err(StepError::Terminated),
        Err(e) => {
            return Ok(failed_before(
                Some(target),
                format!("the history read before the run failed: {e}"),
            ));
        }
    };
    let blocked = match before.report.verdict() {
        HistoryVerdict::Dirty => Some("the history is dirty"),
        HistoryVerdict::Modified => Some("an applied migration was modified"),
        HistoryVerdict::OutOfOrder => Some("a pending migration is out of order"),
        HistoryVerdict::Ahead => Some("the database is ahead of the directory"),
        HistoryVerdict::NothingPending => Some("nothing is pending"),
        HistoryVerdict::Pending(_) => None,
    };
    if let Some(why) = blocked {
        return Ok(failed_before(
            Some(target),
            format!(
                "refused before any change: {why}, so the approved sequence is not the database's"
            ),
        ));
    }
    let Some(sequence) = approved_prefix(&before.report.pending, approved) else {
        let found = sequence_digest(&before.report.pending).unwrap_or_default();
        return Ok(failed_before(
            Some(target),
            format!(
                "refused before any change: Ptah's pending selection hashes to {found}, not the approved {approved}"
            ),
        ));
    };
    let mut argv = vec![
        "migrations".to_string(),
        "up".into(),
        format!("--migrations-dir={}", db.source.display()),
        format!("--limit={}", sequence.len()),
        "--exec-order=linear".into(),
        "--log-format=json".into(),
    ];
    if before.directory.sealed {
        argv.push("--verify-sum".into());
    }
    // This Ptah refuses tx-mode file (its default) on the MySQL family: its
    // online-DDL interceptor needs none, and MySQL's DDL commits on its own
    // anyway. An explicit mode is passed as given.
    match (&args.transaction_mode, db.engine) {
        (Some(mode), _) => argv.push(format!("--tx-mode={mode}")),
        (None, EngineArg::Mysql) => argv.push("--tx-mode=none".into()),
        (None, EngineArg::Postgresql) => {}
    }
    if !db.connect_timeout.is_zero() {
        argv.push(format!(
            "--connect-timeout={}",
            go_duration(db.connect_timeout)
        ));
    }
    if !db.lock_timeout.is_zero() {
        argv.push(format!(
            "--migration-lock-timeout={}",
            go_duration(db.lock_timeout)
        ));
    }
    argv.push(format!(
        "--pre-up-hook={}",
        hook_command(runner, approved, &db.source)
    ));
    let run = exec.run(&argv, db.common.bounds.timeout).await;
    let up = match run {
        Ok(run) => parse_up(&run),
        // The run was stopped: what it did is for the history to say.
        Err(StepError::Deadline(m)) => Err(ReportError::Failed {
            command: "migrations up",
            exit: -1,
            message: super::redact::message(&m),
        }),
        Err(StepError::Terminated) => Err(ReportError::Failed {
            command: "migrations up",
            exit: -1,
            message: "terminated by SIGTERM".into(),
        }),
        Err(e) => {
            return Ok(failed_before(
                Some(target),
                format!("ptah could not be started: {e}"),
            ));
        }
    };
    let after = read_history(db, exec).await;
    let outcome = decide_run(
        db.engine,
        sequence,
        &before.status,
        up,
        after.as_ref().map_err(ToString::to_string),
    );
    Ok(StepOutput::Ran { outcome })
}

// ---- reading the table ----

/// Reads every row of the revision table, read-only, with the URL Ptah is
/// given (its TLS modes honoured: `sslmode`/`sslrootcert` for PostgreSQL,
/// `tls` for MySQL). Errors never hold the URL.
pub async fn read_revision_table(
    engine: EngineArg,
    url: &str,
    target: &Target,
    connect_timeout: Duration,
) -> Result<Vec<TableRow>, StepError> {
    let connect_timeout = if connect_timeout.is_zero() {
        Duration::from_secs(30)
    } else {
        connect_timeout
    };
    let schema = target.default_schema(url);
    let read = async {
        match engine {
            EngineArg::Postgresql => read_postgres(url, target, &schema, connect_timeout).await,
            EngineArg::Mysql => read_mysql(url, target, connect_timeout).await,
        }
    };
    match tokio::time::timeout(connect_timeout + TABLE_READ_TIMEOUT, read).await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(e)) => Err(StepError::failed(format!(
            "reading the revision table {REVISION_TABLE}: {}",
            super::redact::message(&e)
        ))),
        Err(_) => Err(StepError::failed(format!(
            "reading the revision table {REVISION_TABLE} timed out"
        ))),
    }
}

/// The columns read, in order, with how each is selected.
const COLUMNS: [&str; 10] = [
    "version",
    "description",
    "applied_at",
    "state",
    "applied",
    "total",
    "error",
    "error_stmt",
    "execution_time_ms",
    "checksum",
];
/// Columns without which a table is not Ptah's native layout.
const REQUIRED: [&str; 4] = ["version", "description", "state", "checksum"];

fn check_columns(present: &BTreeSet<String>) -> Result<(), String> {
    if present.is_empty() {
        return Err(format!(
            "the table {REVISION_TABLE} is missing after Ptah's status read it"
        ));
    }
    if let Some(c) = REQUIRED.iter().find(|c| !present.contains(**c)) {
        return Err(format!(
            "the table {REVISION_TABLE} has no column {c}: not Ptah's native layout"
        ));
    }
    Ok(())
}

fn query_param(url: &url::Url, key: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// `s` percent-decoded, as a URL's login, password and database arrive.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn pg_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn read_postgres(
    url: &str,
    target: &Target,
    schema: &str,
    connect_timeout: Duration,
) -> Result<Vec<TableRow>, String> {
    let parsed = url::Url::parse(url.trim()).map_err(|_| "the URL does not parse".to_string())?;
    let mut config = tokio_postgres::Config::new();
    config
        .host(target.host.trim_start_matches('[').trim_end_matches(']'))
        .port(target.port)
        .user(percent_decode(&target.user))
        .dbname(percent_decode(&target.database))
        .application_name("ptah-runner")
        .connect_timeout(connect_timeout);
    if let Some(p) = parsed.password() {
        config.password(percent_decode(p));
    }
    let mode = query_param(&parsed, "sslmode").unwrap_or_else(|| "prefer".into());
    let root = query_param(&parsed, "sslrootcert");
    let client = match mode.as_str() {
        "disable" => {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            client
        }
        "allow" | "prefer" | "require" | "verify-ca" | "verify-full" => {
            config.ssl_mode(if matches!(mode.as_str(), "allow" | "prefer") {
                tokio_postgres::config::SslMode::Prefer
            } else {
                tokio_postgres::config::SslMode::Require
            });
            // libpq: require checks the chain only when a root is named.
            let verify = match (mode.as_str(), &root) {
                ("verify-full", _) => Verify::Full,
                ("verify-ca", _) | ("require", Some(_)) => Verify::Chain,
                _ => Verify::None,
            };
            let tls =
                tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(verify, root.as_deref())?);
            let (client, connection) = config.connect(tls).await.map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            client
        }
        other => return Err(format!("sslmode={other} is not a mode the runner knows")),
    };
    client
        .batch_execute(
            "SET TIME ZONE 'UTC'; START TRANSACTION READ ONLY; SET LOCAL statement_timeout = '30s'",
        )
        .await
        .map_err(|e| e.to_string())?;
    let present: BTreeSet<String> = client
        .query(
            "SELECT column_name::text FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
            &[&schema, &REVISION_TABLE],
        )
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    check_columns(&present)?;
    let select: Vec<String> = COLUMNS
        .iter()
        .map(|c| {
            let text = !matches!(*c, "version" | "applied" | "total" | "execution_time_ms");
            match (present.contains(*c), *c, text) {
                (false, _, true) => "NULL::text".to_string(),
                (false, _, false) => "NULL::bigint".to_string(),
                (true, "applied_at", _) => {
                    r#"to_char(applied_at, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"#.to_string()
                }
                (true, c, true) => format!("{}::text", pg_ident(c)),
                (true, c, false) => format!("{}::bigint", pg_ident(c)),
            }
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {}.{} ORDER BY version",
        select.join(", "),
        pg_ident(schema),
        pg_ident(REVISION_TABLE)
    );
    let rows = client.query(&sql, &[]).await.map_err(|e| e.to_string())?;
    let _ = client.batch_execute("ROLLBACK").await;
    rows.iter()
        .map(|r| {
            let text = |i: usize| r.try_get::<_, Option<String>>(i).map_err(|e| e.to_string());
            let int = |i: usize| r.try_get::<_, Option<i64>>(i).map_err(|e| e.to_string());
            Ok(TableRow {
                version: int(0)?.ok_or("a row without a version")?,
                description: text(1)?.unwrap_or_default(),
                applied_at: text(2)?,
                state: text(3)?.unwrap_or_default(),
                applied: int(4)?,
                total: int(5)?,
                error: text(6)?,
                error_stmt: text(7)?,
                execution_millis: int(8)?,
                checksum: text(9)?.unwrap_or_default(),
            })
        })
        .collect()
}

async fn read_mysql(
    url: &str,
    target: &Target,
    connect_timeout: Duration,
) -> Result<Vec<TableRow>, String> {
    use mysql_async::prelude::Queryable;
    let parsed = url::Url::parse(url.trim()).map_err(|_| "the URL does not parse".to_string())?;
    let ssl = match query_param(&parsed, "tls").as_deref() {
        None | Some("false") => None,
        Some("true") => Some(mysql_async::SslOpts::default()),
        Some("skip-verify" | "preferred") => Some(
            mysql_async::SslOpts::default()
                .with_danger_accept_invalid_certs(true)
                .with_danger_skip_domain_validation(true),
        ),
        Some(other) => {
            return Err(format!(
                "tls={other} names a configuration the runner does not have"
            ));
        }
    };
    let database = percent_decode(&target.database);
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(target.host.trim_start_matches('[').trim_end_matches(']'))
        .tcp_port(target.port)
        .user(Some(percent_decode(&target.user)))
        .pass(parsed.password().map(percent_decode))
        .db_name(Some(database.clone()))
        .prefer_socket(false)
        .ssl_opts(ssl);
    let mut conn = tokio::time::timeout(connect_timeout, mysql_async::Conn::new(opts))
        .await
        .map_err(|_| "connecting timed out".to_string())?
        .map_err(|e| e.to_string())?;
    conn.query_drop("START TRANSACTION READ ONLY")
        .await
        .map_err(|e| e.to_string())?;
    let present: BTreeSet<String> = conn
        .exec::<String, _, _>(
            "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (database.as_str(), REVISION_TABLE),
        )
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|c| c.to_ascii_lowercase())
        .collect();
    check_columns(&present)?;
    let select: Vec<String> = COLUMNS
        .iter()
        .map(|c| {
            let text = !matches!(*c, "version" | "applied" | "total" | "execution_time_ms");
            match (present.contains(*c), *c, text) {
                (false, _, _) => "NULL".to_string(),
                (true, "applied_at", _) => {
                    "DATE_FORMAT(`applied_at`, '%Y-%m-%dT%H:%i:%s.%fZ')".to_string()
                }
                (true, c, true) => format!("CAST(`{c}` AS CHAR)"),
                (true, c, false) => format!("CAST(`{c}` AS SIGNED)"),
            }
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM `{REVISION_TABLE}` ORDER BY `version`",
        select.join(", ")
    );
    let rows: Vec<mysql_async::Row> = conn.query(sql).await.map_err(|e| e.to_string())?;
    let _ = conn.query_drop("ROLLBACK").await;
    let _ = conn.disconnect().await;
    rows.into_iter()
        .map(|mut r| {
            let mut text = |i: usize| -> Result<Option<String>, String> {
                match r.take_opt::<Option<String>, usize>(i) {
                    Some(v) => v.map_err(|e| e.to_string()),
                    None => Err(format!("column {i} is missing")),
                }
            };
            let description = text(1)?.unwrap_or_default();
            let applied_at = text(2)?;
            let state = text(3)?.unwrap_or_default();
            let error = text(6)?;
            let error_stmt = text(7)?;
            let checksum = text(9)?.unwrap_or_default();
            let mut int = |i: usize| -> Result<Option<i64>, String> {
                match r.take_opt::<Option<i64>, usize>(i) {
                    Some(v) => v.map_err(|e| e.to_string()),
                    None => Err(format!("column {i} is missing")),
                }
            };
            Ok(TableRow {
                version: int(0)?.ok_or("a row without a version")?,
                description,
                applied_at,
                state,
                applied: int(4)?,
                total: int(5)?,
                error,
                error_stmt,
                execution_millis: int(8)?,
                checksum,
            })
        })
        .collect()
}

// ---- TLS for the table read ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    /// libpq's `prefer`/`require` without a root: encrypted, unauthenticated
    /// (as Ptah's own connection is).
    None,
    /// `verify-ca`: the chain, not the name.
    Chain,
    /// `verify-full`.
    Full,
}

fn tls_config(verify: Verify, root_file: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    if verify == Verify::None {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unauthenticated(provider)))
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    match root_file {
        Some(path) => {
            use rustls_pki_types::pem::PemObject;
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|_| "sslrootcert cannot be read".to_string())?;
            for cert in certs {
                roots
                    .add(cert.map_err(|_| {
                        "sslrootcert holds a certificate that does not parse".to_string()
                    })?)
                    .map_err(|e| e.to_string())?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let webpki =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| e.to_string())?;
    if verify == Verify::Full {
        return Ok(builder.with_webpki_verifier(webpki).with_no_client_auth());
    }
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
        .with_no_client_auth())
}

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts any certificate, still checking the handshake's signatures.
#[derive(Debug)]
struct Unauthenticated(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unauthenticated {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain checked against the roots, the name not (`verify-ca`).
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

// ---- goldens ----

/// What the goldens hold of an output instead of what changes on each run:
/// times (`"time"`, `"applied_at"`, `"execution_time"`), the log's
/// `correlation_id`, and loopback ports. `migrations-capture.sh` does the
/// same in `sed`; every golden is a fixed point of this function.
pub fn normalise_golden(text: &str) -> String {
    let mut out = replace_after(text, "\"time\":\"", |rest| rest.find('"'), "<time>");
    out = replace_after(&out, "\"applied_at\": \"", |rest| rest.find('"'), "<time>");
    out = replace_after(
        &out,
        "\"execution_time\": ",
        |rest| Some(rest.bytes().take_while(u8::is_ascii_digit).count()).filter(|n| *n > 0),
        "0",
    );
    out = replace_after(
        &out,
        "\"correlation_id\":\"",
        |rest| {
            Some(
                rest.bytes()
                    .take_while(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                    .count(),
            )
            .filter(|n| *n > 0)
        },
        "<id>",
    );
    for host in ["127.0.0.1:", "localhost:"] {
        out = replace_after(
            &out,
            host,
            |rest| Some(rest.bytes().take_while(u8::is_ascii_digit).count()).filter(|n| *n > 0),
            "<port>",
        );
    }
    out
}

/// Every `marker` followed by what `span` measures of the rest replaced by
/// `with` (an absent span leaves it).
fn replace_after(
    text: &str,
    marker: &str,
    span: impl Fn(&str) -> Option<usize>,
    with: &str,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let (head, tail) = rest.split_at(at + marker.len());
        out.push_str(head);
        match span(tail) {
            Some(n) => {
                out.push_str(with);
                rest = &tail[n..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! golden {
        ($engine:literal, $name:literal) => {
            (
                include_str!(concat!(
                    "../../../conformance/testdata/executor/",
                    $engine,
                    "/",
                    $name,
                    ".stdout"
                )),
                include_str!(concat!(
                    "../../../conformance/testdata/executor/",
                    $engine,
                    "/",
                    $name,
                    ".stderr"
                )),
                include_str!(concat!(
                    "../../../conformance/testdata/executor/",
                    $engine,
                    "/",
                    $name,
                    ".exit"
                )),
            )
        };
    }

    type Golden = (&'static str, &'static str, &'static str);

    /// Every golden, for the checks that hold for all of them.
    const GOLDENS: &[Golden] = &[
        golden!("postgresql", "migrations-status-ready"),
        golden!("postgresql", "migrations-status-nothing-pending"),
        golden!("postgresql", "migrations-status-modified"),
        golden!("postgresql", "migrations-status-ahead"),
        golden!("postgresql", "migrations-status-out-of-order"),
        golden!("postgresql", "migrations-status-dirty"),
        golden!("postgresql", "migrations-status-interrupted"),
        golden!("postgresql", "migrations-up-applied"),
        golden!("postgresql", "migrations-up-nothing-to-do"),
        golden!("postgresql", "migrations-up-failed-statement-3"),
        golden!("postgresql", "migrations-up-hook-refused"),
        golden!("mariadb", "migrations-status-ready"),
        golden!("mariadb", "migrations-status-nothing-pending"),
        golden!("mariadb", "migrations-status-modified"),
        golden!("mariadb", "migrations-status-ahead"),
        golden!("mariadb", "migrations-status-out-of-order"),
        golden!("mariadb", "migrations-status-dirty"),
        golden!("mariadb", "migrations-status-unknown"),
        golden!("mariadb", "migrations-up-applied"),
        golden!("mariadb", "migrations-up-nothing-to-do"),
        golden!("mariadb", "migrations-up-failed-statement-3"),
        golden!("mariadb", "migrations-up-hook-refused"),
        golden!("mariadb", "migrations-up-file-mode-refused"),
        golden!("mariadb", "migrations-up-unknown"),
        golden!("postgresql", "migrations-up-sequence-refused"),
        golden!("mariadb", "migrations-up-sequence-refused"),
    ];

    fn child(exit: i32, stdout: &str, stderr: &str) -> ChildRun {
        ChildRun {
            exit,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            stdout_truncated: false,
            stderr_truncated: false,
            limit: 1 << 20,
            elapsed: Duration::ZERO,
        }
    }

    fn of(g: Golden) -> ChildRun {
        child(g.2.trim().parse().expect("exit code"), g.0, g.1)
    }

    fn dir(engine: &str, name: &str) -> Directory {
        let path = format!(
            "{}/../conformance/testdata/executor/migrations-dirs/{engine}/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        read_directory(Path::new(&path)).expect("the golden directory reads")
    }

    fn source(engine: &str, name: &str) -> PathBuf {
        PathBuf::from(format!(
            "{}/../conformance/testdata/executor/migrations-dirs/{engine}/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
    }

    fn applied_row(version: i64, from: &Directory) -> TableRow {
        let m = &from.migrations[&version];
        TableRow {
            version,
            description: m.description.clone(),
            applied_at: Some("2026-12-01T08:20:29.149002Z".into()),
            state: "applied".into(),
            applied: Some(1),
            total: Some(1),
            error: None,
            error_stmt: None,
            execution_millis: Some(20),
            checksum: m.checksum.clone(),
        }
    }

    /// The table a status golden was read from: its applied versions (their
    /// checksums from the directory that applied them) and its dirty row.
    fn table(status: &StatusDocument, applied_from: &Directory) -> Vec<TableRow> {
        let mut rows: Vec<TableRow> = status
            .applied_migrations
            .iter()
            .map(|v| applied_row(*v, applied_from))
            .collect();
        if let Some(d) = &status.dirty_revision {
            rows.push(TableRow {
                version: d.version,
                description: d.description.clone(),
                applied_at: Some("2026-12-01T08:20:46.015955Z".into()),
                state: d.state.clone(),
                applied: Some(d.applied),
                total: Some(d.total),
                error: d.error.clone(),
                error_stmt: d.error_stmt.clone(),
                execution_millis: Some(13),
                checksum: d.checksum.clone().unwrap_or_default(),
            });
        }
        rows
    }

    const DIGEST: &str = "sha256:5757575757575757575757575757575757575757575757575757575757575757";

    fn engine_of(engine: &str) -> EngineArg {
        if engine == "mariadb" {
            EngineArg::Mysql
        } else {
            EngineArg::Postgresql
        }
    }

    /// A status golden, its table and directory, held to the protocol's
    /// checks as the manager holds it.
    fn reading(engine: &str, g: Golden, applied_from: &str, directory: &str) -> Reading {
        let status = parse_status(&of(g)).expect("the golden parses");
        let rows = table(&status, &dir(engine, applied_from));
        let directory = dir(engine, directory);
        let report =
            derive_history(engine_of(engine), &status, &rows, &directory, DIGEST).expect("derives");
        check_history(&report).expect("the manager takes it");
        Reading {
            status,
            rows,
            directory,
            report,
        }
    }

    fn versions(pending: &[PlannedMigration]) -> Vec<i64> {
        pending.iter().map(|m| m.version).collect()
    }

    #[test]
    fn every_golden_is_a_fixed_point_of_the_normaliser() {
        for g in GOLDENS {
            for text in [g.0, g.1] {
                assert_eq!(normalise_golden(text), text);
            }
        }
        let raw = r#"{"time":"2026-12-01T08:20:29.1Z","correlation_id":"7c4a59942443572b","msg":"Database: mysql://mig:***@127.0.0.1:53306/x"}"#;
        assert_eq!(
            normalise_golden(raw),
            r#"{"time":"<time>","correlation_id":"<id>","msg":"Database: mysql://mig:***@127.0.0.1:<port>/x"}"#
        );
        let revision =
            "\"execution_time\": 13000000,\n    \"applied_at\": \"2026-12-01T08:20:46.015955Z\",";
        assert_eq!(
            normalise_golden(revision),
            "\"execution_time\": 0,\n    \"applied_at\": \"<time>\","
        );
    }

    #[test]
    fn the_six_verdicts_from_the_postgresql_goldens() {
        let pg = "postgresql";
        let r = reading(
            pg,
            golden!("postgresql", "migrations-status-ready"),
            "base",
            "base",
        );
        let HistoryVerdict::Pending(seq) = r.report.verdict() else {
            panic!("ready is a sequence");
        };
        assert_eq!(versions(&seq), [1, 2, 3]);
        assert_eq!(
            seq[2].transaction_mode,
            Some(MigrationTransactionMode::None)
        );
        assert_eq!(seq[2].description.as_deref(), Some("Order Index"));
        assert_eq!(seq[0].checksum, dir(pg, "base").migrations[&1].checksum);
        assert_eq!(r.report.current_version, 0);

        let r = reading(
            pg,
            golden!("postgresql", "migrations-status-nothing-pending"),
            "base",
            "base",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::NothingPending);
        assert_eq!(r.report.applied_count, 3);
        assert_eq!(r.report.revisions[0].version, 3, "newest first");
        assert!(r.report.revisions[0].applied_at.is_some());

        let r = reading(
            pg,
            golden!("postgresql", "migrations-status-modified"),
            "base",
            "modified",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Modified);
        assert_eq!(r.report.modified_versions, [2]);

        let r = reading(
            pg,
            golden!("postgresql", "migrations-status-ahead"),
            "base",
            "ahead",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Ahead);
        assert_eq!(r.report.ahead_versions, [3]);

        let r = reading(
            pg,
            golden!("postgresql", "migrations-status-out-of-order"),
            "gap",
            "out-of-order",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::OutOfOrder);
        assert_eq!(r.report.out_of_order_versions, [2]);

        let r = reading(
            pg,
            golden!("postgresql", "migrations-status-dirty"),
            "failing",
            "failing",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
        let d = r.report.dirty_revision.as_ref().expect("dirty");
        assert_eq!(
            (d.version, d.statements_applied, d.statements_total),
            (5, Some(0), Some(3))
        );
        assert!(
            !d.outcome_unknown,
            "a rolled-back INSERT is a known failure"
        );
        assert_eq!(d.direction, Direction::Up);

        let r = reading(
            pg,
            golden!("postgresql", "migrations-status-interrupted"),
            "interrupted",
            "interrupted",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
        let d = r.report.dirty_revision.as_ref().expect("dirty");
        assert!(d.outcome_unknown, "Ptah's own marker");
        assert_eq!(d.state, "pending");
    }

    #[test]
    fn the_six_verdicts_from_the_mariadb_goldens() {
        let my = "mariadb";
        let r = reading(
            my,
            golden!("mariadb", "migrations-status-ready"),
            "base",
            "base",
        );
        assert!(
            matches!(r.report.verdict(), HistoryVerdict::Pending(s) if versions(&s) == [1, 2, 3])
        );
        let r = reading(
            my,
            golden!("mariadb", "migrations-status-nothing-pending"),
            "base",
            "base",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::NothingPending);
        let r = reading(
            my,
            golden!("mariadb", "migrations-status-modified"),
            "base",
            "modified",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Modified);
        let r = reading(
            my,
            golden!("mariadb", "migrations-status-ahead"),
            "base",
            "ahead",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Ahead);
        let r = reading(
            my,
            golden!("mariadb", "migrations-status-out-of-order"),
            "gap",
            "out-of-order",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::OutOfOrder);
        let r = reading(
            my,
            golden!("mariadb", "migrations-status-dirty"),
            "failing",
            "failing",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
        let d = r.report.dirty_revision.as_ref().expect("dirty");
        assert_eq!(
            d.statements_applied,
            Some(2),
            "tx-mode none records progress"
        );
        assert!(!d.outcome_unknown, "a failed INSERT is atomic");
        let r = reading(
            my,
            golden!("mariadb", "migrations-status-unknown"),
            "unknown",
            "unknown",
        );
        assert_eq!(r.report.verdict(), HistoryVerdict::Dirty);
        assert!(
            r.report
                .dirty_revision
                .as_ref()
                .is_some_and(|d| d.outcome_unknown),
            "CREATE UNIQUE INDEX stopped by a duplicate key may have committed"
        );
    }

    #[test]
    fn the_fingerprint_moves_with_any_row_file_or_selection() {
        let r = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-ready"),
            "base",
            "base",
        );
        let again = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-ready"),
            "base",
            "base",
        );
        assert_eq!(
            r.report.history_fingerprint,
            again.report.history_fingerprint
        );
        assert!(r.report.history_fingerprint.starts_with("sha256:"));
        let applied = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-nothing-pending"),
            "base",
            "base",
        );
        assert_ne!(
            r.report.history_fingerprint,
            applied.report.history_fingerprint
        );
        let mut rows = applied.rows.clone();
        rows[0].execution_millis = Some(99);
        assert_ne!(
            history_fingerprint(
                &rows,
                &applied.directory,
                &applied.report.pending,
                &applied.status
            ),
            applied.report.history_fingerprint
        );
        let modified = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-modified"),
            "base",
            "modified",
        );
        assert_ne!(
            modified.report.history_fingerprint,
            applied.report.history_fingerprint
        );
    }

    #[test]
    fn a_reading_whose_parts_disagree_is_refused_naming_them() {
        let g = golden!("postgresql", "migrations-status-nothing-pending");
        let status = parse_status(&of(g)).expect("parses");
        let base = dir("postgresql", "base");
        let mut rows = table(&status, &base);
        rows.pop();
        let e = derive_history(EngineArg::Postgresql, &status, &rows, &base, DIGEST).unwrap_err();
        assert!(e.to_string().contains("appliedMigrations"), "{e}");
        let mut rows = table(&status, &base);
        rows.push(TableRow {
            state: "failed".into(),
            ..applied_row(3, &base)
        });
        rows[3].version = 4;
        let e = derive_history(EngineArg::Postgresql, &status, &rows, &base, DIGEST).unwrap_err();
        assert!(e.to_string().contains("dirty row 4"), "{e}");
        // Ptah selects a version the runner's directory lacks.
        let ready =
            parse_status(&of(golden!("postgresql", "migrations-status-ready"))).expect("parses");
        let ahead = dir("postgresql", "ahead");
        let e = derive_history(EngineArg::Postgresql, &ready, &[], &ahead, DIGEST).unwrap_err();
        assert!(e.to_string().contains("version 3"), "{e}");
        let mut twice = table(&status, &base);
        twice.push(twice[0].clone());
        assert!(derive_history(EngineArg::Postgresql, &status, &twice, &base, DIGEST).is_err());
    }

    #[test]
    fn a_status_that_breaks_the_contract_is_refused_naming_what() {
        let ready = golden!("postgresql", "migrations-status-ready").0;
        let e = parse_status(&child(0, "{ nope", "")).unwrap_err();
        assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
        let e = parse_status(&child(0, "", "")).unwrap_err();
        assert!(
            matches!(
                e,
                ReportError::Missing {
                    stream: "stdout",
                    ..
                }
            ),
            "{e}"
        );
        for exit in [1, 3, -1] {
            let e = parse_status(&child(exit, ready, "")).unwrap_err();
            assert!(matches!(e, ReportError::UnknownExit { .. }), "{exit}: {e}");
        }
        let mut cut = child(0, ready, "");
        cut.stdout_truncated = true;
        assert!(matches!(
            parse_status(&cut).unwrap_err(),
            ReportError::Truncated {
                stream: "stdout",
                ..
            }
        ));
        let e = parse_status(&child(0, &ready[..ready.len() / 2], "")).unwrap_err();
        assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
        let extra = ready.replacen('{', "{\"surprise\": 1,", 1);
        assert!(
            parse_status(&child(0, &extra, ""))
                .unwrap_err()
                .to_string()
                .contains("surprise")
        );
        // A list Go may write as null must still be there.
        let absent = ready.replace("\"out_of_order_migrations\": [],", "");
        assert!(
            parse_status(&child(0, &absent, ""))
                .unwrap_err()
                .to_string()
                .contains("out_of_order_migrations")
        );
        let null = ready.replace(
            "\"out_of_order_migrations\": []",
            "\"out_of_order_migrations\": null",
        );
        parse_status(&child(0, &null, "")).expect("null is an empty list");
        let lying = ready.replace(
            "\"has_pending_changes\": true",
            "\"has_pending_changes\": false",
        );
        assert!(
            parse_status(&child(0, &lying, ""))
                .unwrap_err()
                .to_string()
                .contains("has_pending_changes")
        );
        let atlas = ready.replacen("\"1\",", "\"20260101_a\",", 1);
        assert!(
            parse_status(&child(0, &atlas, ""))
                .unwrap_err()
                .to_string()
                .contains("Atlas")
        );
        let current = ready.replace("\"current_version\": 0", "\"current_version\": 7");
        assert!(
            parse_status(&child(0, &current, ""))
                .unwrap_err()
                .to_string()
                .contains("current_version")
        );
        let e = parse_status(&child(
            2,
            "",
            "error: error connecting to database: refused postgres://u:s3cr3tpw@h/db\n",
        ))
        .unwrap_err();
        assert!(matches!(e, ReportError::Failed { exit: 2, .. }), "{e}");
        assert!(!e.to_string().contains("s3cr3tpw"), "{e}");
    }

    #[test]
    fn up_goldens_parse_to_their_ends() {
        for engine in ["postgresql", "mariadb"] {
            let (applied, nothing, failed, hook) = if engine == "postgresql" {
                (
                    golden!("postgresql", "migrations-up-applied"),
                    golden!("postgresql", "migrations-up-nothing-to-do"),
                    golden!("postgresql", "migrations-up-failed-statement-3"),
                    golden!("postgresql", "migrations-up-hook-refused"),
                )
            } else {
                (
                    golden!("mariadb", "migrations-up-applied"),
                    golden!("mariadb", "migrations-up-nothing-to-do"),
                    golden!("mariadb", "migrations-up-failed-statement-3"),
                    golden!("mariadb", "migrations-up-hook-refused"),
                )
            };
            let UpEnd::Completed(log) = parse_up(&of(applied)).expect("parses") else {
                panic!("{engine}: completed");
            };
            assert_eq!(log.applied, [1, 2, 3]);
            assert!(log.hook_passed);
            assert!(matches!(
                parse_up(&of(nothing)).expect("parses"),
                UpEnd::UpToDate(_)
            ));
            let UpEnd::Failed {
                version,
                log,
                codes,
                message,
                hook_refused,
            } = parse_up(&of(failed)).expect("parses")
            else {
                panic!("{engine}: failed");
            };
            assert_eq!(version, Some(5));
            assert_eq!(log.applied, [4]);
            assert!(!hook_refused);
            assert!(!message.contains("INSERT"), "{message}");
            assert!(!message.contains("Duplicate"), "{message}");
            let want = if engine == "postgresql" {
                (Some("23505".into()), None)
            } else {
                (Some("23000".into()), Some(1062))
            };
            assert_eq!(codes, want);
            let UpEnd::Failed {
                hook_refused, log, ..
            } = parse_up(&of(hook)).expect("parses")
            else {
                panic!("{engine}: refused");
            };
            assert!(hook_refused);
            assert!(log.started.is_empty());
        }
        let UpEnd::Failed {
            version, message, ..
        } = parse_up(&of(golden!("mariadb", "migrations-up-file-mode-refused"))).expect("parses")
        else {
            panic!("refused");
        };
        assert_eq!(version, None);
        assert!(message.contains("tx-mode none"), "{message}");
    }

    #[test]
    fn the_runners_own_refusal_under_the_lock_is_a_failure_before_any_change() {
        for g in [
            golden!("postgresql", "migrations-up-sequence-refused"),
            golden!("mariadb", "migrations-up-sequence-refused"),
        ] {
            let up = parse_up(&of(g));
            let UpEnd::Failed {
                hook_refused,
                message,
                log,
                ..
            } = up.clone().expect("parses")
            else {
                panic!("refused");
            };
            assert!(hook_refused);
            assert!(log.started.is_empty());
            assert!(message.contains("(3, 5], hash to sha256:"), "{message}");
            let done = reading(
                "postgresql",
                golden!("postgresql", "migrations-status-nothing-pending"),
                "base",
                "base",
            );
            let seq: Vec<PlannedMigration> = dir("postgresql", "failing")
                .migrations
                .range(4..)
                .map(|(_, m)| m.planned())
                .collect();
            let o = decide_run(EngineArg::Postgresql, &seq, &done.status, up, Ok(&done));
            assert_eq!(
                o.result,
                RunResult::Failed {
                    selected: false,
                    failure: None
                }
            );
            assert!(o.message.unwrap_or_default().contains("pre-up hook"));
        }
    }

    #[test]
    fn up_output_that_breaks_the_contract_is_refused_naming_what() {
        let applied = golden!("postgresql", "migrations-up-applied").0;
        let e = parse_up(&child(0, "Applying migration 1\n", "")).unwrap_err();
        assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
        for exit in [1, 3, -1, 143] {
            let e = parse_up(&child(exit, applied, "")).unwrap_err();
            assert!(matches!(e, ReportError::UnknownExit { .. }), "{exit}: {e}");
        }
        let mut cut = child(0, applied, "");
        cut.stdout_truncated = true;
        assert!(matches!(
            parse_up(&cut).unwrap_err(),
            ReportError::Truncated { .. }
        ));
        let without_end: String = applied
            .lines()
            .filter(|l| !l.contains(UP_COMPLETED))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(matches!(
            parse_up(&child(0, &without_end, "")).unwrap_err(),
            ReportError::Missing {
                what: "completion line",
                ..
            }
        ));
        assert!(matches!(
            parse_up(&child(2, applied, "")).unwrap_err(),
            ReportError::Missing {
                what: "error line",
                ..
            }
        ));
        assert!(
            parse_up(&child(0, "", "")).is_err(),
            "no log at all is no success"
        );
        let other = applied.replace("migrations.up", "migrations.down");
        assert!(
            parse_up(&child(0, &other, ""))
                .unwrap_err()
                .to_string()
                .contains("command")
        );
        assert!(
            parse_up(&child(0, applied, "warning\n"))
                .unwrap_err()
                .to_string()
                .contains("stderr")
        );
        let nameless = applied.replacen(",\"version\":1", "", 1);
        assert!(
            parse_up(&child(0, &nameless, ""))
                .unwrap_err()
                .to_string()
                .contains("version")
        );
    }

    fn sequence(r: &Reading) -> Vec<PlannedMigration> {
        r.report.pending.clone()
    }

    #[test]
    fn runs_end_as_the_goldens_and_the_history_after_them_say() {
        let pg = EngineArg::Postgresql;
        let ready = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-ready"),
            "base",
            "base",
        );
        let done = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-nothing-pending"),
            "base",
            "base",
        );
        let up = parse_up(&of(golden!("postgresql", "migrations-up-applied")));
        let o = decide_run(pg, &sequence(&ready), &ready.status, up, Ok(&done));
        assert_eq!(o.result, RunResult::Applied);
        assert_eq!(o.applied_versions, [1, 2, 3]);
        assert_eq!(o.target_identity_digest.as_deref(), Some(DIGEST));
        crate::protocol::migrations::check_run(&o).expect("the manager takes it");

        // 4 applied, 5 failed at its third statement: Partial.
        let dirty = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-dirty"),
            "failing",
            "failing",
        );
        let seq = dir("postgresql", "failing")
            .migrations
            .range(4..)
            .map(|(_, m)| m.planned())
            .collect::<Vec<_>>();
        let up = parse_up(&of(golden!(
            "postgresql",
            "migrations-up-failed-statement-3"
        )));
        let o = decide_run(pg, &seq, &done.status, up, Ok(&dirty));
        let failure = RunFailure {
            version: 5,
            statement_position: Some(3),
            sqlstate: Some("23505".into()),
            mysql_errno: None,
        };
        assert_eq!(
            o.result,
            RunResult::Partial {
                failure: Some(failure)
            }
        );
        assert_eq!(o.applied_versions, [4]);
        let message = o.message.clone().unwrap_or_default();
        assert!(
            message.contains("statement 3") && !message.contains("INSERT"),
            "{message}"
        );
        crate::protocol::migrations::check_run(&o).expect("the manager takes it");

        // The same failure with nothing applied before it: Failed, selected.
        let up = parse_up(&of(golden!(
            "postgresql",
            "migrations-up-failed-statement-3"
        )));
        let mut before = dirty.status.clone();
        before.dirty_revision = None;
        let o = decide_run(pg, &seq[1..], &before, up, Ok(&dirty));
        assert!(
            matches!(
                o.result,
                RunResult::Failed {
                    selected: true,
                    failure: Some(_)
                }
            ),
            "{:?}",
            o.result
        );

        // The hook refused: nothing ran.
        let up = parse_up(&of(golden!("postgresql", "migrations-up-hook-refused")));
        let o = decide_run(pg, &seq, &done.status, up, Ok(&done));
        assert_eq!(
            o.result,
            RunResult::Failed {
                selected: false,
                failure: None
            }
        );
        assert!(o.applied_versions.is_empty());

        // Ptah said done, the history does not show it: Unknown.
        let up = parse_up(&of(golden!("postgresql", "migrations-up-applied")));
        let o = decide_run(pg, &sequence(&ready), &ready.status, up, Ok(&ready));
        assert!(
            matches!(o.result, RunResult::Unknown { .. }),
            "{:?}",
            o.result
        );

        // Output the contract does not know: Unknown, naming it.
        let o = decide_run(
            pg,
            &sequence(&ready),
            &ready.status,
            parse_up(&child(0, "garbage\n", "")),
            Ok(&done),
        );
        assert!(matches!(o.result, RunResult::Unknown { .. }));
        assert!(o.message.unwrap_or_default().contains("does not parse"));

        // Up to date, nothing applied: nothing to do.
        let up = parse_up(&of(golden!("postgresql", "migrations-up-nothing-to-do")));
        let o = decide_run(pg, &sequence(&ready), &done.status, up, Ok(&done));
        assert_eq!(o.result, RunResult::NothingToDo);

        // No history after the run: only a complete log is believed.
        let up = parse_up(&of(golden!("postgresql", "migrations-up-applied")));
        let o = decide_run(
            pg,
            &sequence(&ready),
            &ready.status,
            up,
            Err("connection refused".into()),
        );
        assert_eq!(o.result, RunResult::Applied);
        assert_eq!(o.applied_versions, [1, 2, 3]);
        let up = parse_up(&of(golden!(
            "postgresql",
            "migrations-up-failed-statement-3"
        )));
        let o = decide_run(pg, &seq, &done.status, up, Err("connection refused".into()));
        assert!(
            matches!(o.result, RunResult::Partial { .. }),
            "{:?}",
            o.result
        );
    }

    #[test]
    fn a_mariadb_statement_that_may_have_committed_makes_the_run_unknown() {
        let my = EngineArg::Mysql;
        let ready = reading(
            "mariadb",
            golden!("mariadb", "migrations-status-ready"),
            "base",
            "base",
        );
        let after = reading(
            "mariadb",
            golden!("mariadb", "migrations-status-unknown"),
            "unknown",
            "unknown",
        );
        let up = parse_up(&of(golden!("mariadb", "migrations-up-unknown")));
        // Before the run: a fresh database.
        let mut before = after.status.clone();
        before.applied_migrations.clear();
        let seq: Vec<PlannedMigration> = after
            .directory
            .migrations
            .values()
            .map(DirectoryMigration::planned)
            .collect();
        let o = decide_run(my, &seq, &before, up, Ok(&after));
        let failure = RunFailure {
            version: 2,
            statement_position: Some(3),
            sqlstate: Some("23000".into()),
            mysql_errno: Some(1062),
        };
        assert_eq!(
            o.result,
            RunResult::Unknown {
                failure: Some(failure)
            }
        );
        assert_eq!(o.applied_versions, [1]);
        assert!(!o.message.unwrap_or_default().contains("a@example.com"));
        // The duplicate INSERT of the failing golden is atomic: Partial.
        let dirty = reading(
            "mariadb",
            golden!("mariadb", "migrations-status-dirty"),
            "failing",
            "failing",
        );
        let done = reading(
            "mariadb",
            golden!("mariadb", "migrations-status-nothing-pending"),
            "base",
            "base",
        );
        let up = parse_up(&of(golden!("mariadb", "migrations-up-failed-statement-3")));
        let o = decide_run(my, &dirty.report.pending, &done.status, up, Ok(&dirty));
        assert!(
            matches!(&o.result, RunResult::Partial { failure: Some(f) } if f.statement_position == Some(3) && f.mysql_errno == Some(1062)),
            "{:?}",
            o.result
        );
        // tx-mode file refused before any statement.
        let up = parse_up(&of(golden!("mariadb", "migrations-up-file-mode-refused")));
        let o = decide_run(my, &ready.report.pending, &before, up, Ok(&ready));
        assert_eq!(
            o.result,
            RunResult::Failed {
                selected: false,
                failure: None
            }
        );
    }

    #[test]
    fn the_hook_accepts_exactly_the_approved_sequence() {
        let base = source("postgresql", "base");
        let r = reading(
            "postgresql",
            golden!("postgresql", "migrations-status-ready"),
            "base",
            "base",
        );
        let all = sequence_digest(&r.report.pending).expect("digest");
        let two = sequence_digest(&r.report.pending[..2]).expect("digest");
        check_sequence(&base, &all, 0, 3).expect("the same sequence");
        check_sequence(&base, &two, 0, 2).expect("a prefix under --limit");
        assert!(
            check_sequence(&base, &all, 0, 2)
                .unwrap_err()
                .contains(&two)
        );
        assert!(
            check_sequence(&base, &all, 1, 3).is_err(),
            "a history moved forward"
        );
        assert!(
            check_sequence(&base, &all, 3, 3)
                .unwrap_err()
                .contains("no migration")
        );
        assert!(check_sequence(Path::new("/nonexistent/ptah"), &all, 0, 3).is_err());
        // A different file under the same versions.
        let modified = source("postgresql", "modified");
        assert!(check_sequence(&modified, &all, 0, 3).is_err());
        assert_eq!(
            approved_prefix(&r.report.pending, &two).map(<[_]>::len),
            Some(2)
        );
        assert_eq!(approved_prefix(&r.report.pending, DIGEST), None);
    }

    #[test]
    fn the_hook_follows_a_checkpoint_bootstrap_on_a_fresh_database() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pair = |name: &str, up: &str| {
            std::fs::write(tmp.path().join(format!("{name}.up.sql")), up).expect("write");
            std::fs::write(tmp.path().join(format!("{name}.down.sql")), "SELECT 1;\n")
                .expect("write");
        };
        pair("0000000001_a", "CREATE TABLE a (id int);\n");
        pair("0000000002_b", "CREATE TABLE b (id int);\n");
        pair(
            "0000000003_snapshot.checkpoint",
            "CREATE TABLE a (id int);\nCREATE TABLE b (id int);\n",
        );
        pair("0000000004_c", "CREATE TABLE c (id int);\n");
        let d = read_directory(tmp.path()).expect("reads");
        assert!(d.migrations[&3].checkpoint);
        let fresh: Vec<i64> = hook_selection(&d, 0, 4).iter().map(|m| m.version).collect();
        assert_eq!(fresh, [3, 4], "the checkpoint, then what follows it");
        let migrated: Vec<i64> = hook_selection(&d, 2, 4).iter().map(|m| m.version).collect();
        assert_eq!(
            migrated,
            [4],
            "a checkpoint never runs on a migrated database"
        );
        let planned: Vec<PlannedMigration> =
            [3, 4].iter().map(|v| d.migrations[v].planned()).collect();
        check_sequence(
            tmp.path(),
            &sequence_digest(&planned).expect("digest"),
            0,
            4,
        )
        .expect("the bootstrap");
    }

    #[test]
    fn the_table_read_takes_the_urls_tls_modes_and_credentials() {
        for verify in [Verify::None, Verify::Chain, Verify::Full] {
            tls_config(verify, None).expect("a rustls config");
        }
        let e = tls_config(Verify::Full, Some("/nonexistent/root.pem")).unwrap_err();
        assert!(e.contains("sslrootcert"), "{e}");
        assert_eq!(percent_decode("p%40ss%2Fw"), "p@ss/w");
        assert_eq!(percent_decode("100%"), "100%");
        let mut present: BTreeSet<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
        check_columns(&present).expect("Ptah's layout");
        present.remove("execution_time_ms");
        check_columns(&present).expect("an older layout, without the duration");
        present.remove("checksum");
        assert!(check_columns(&present).unwrap_err().contains("checksum"));
        assert!(
            check_columns(&BTreeSet::new())
                .unwrap_err()
                .contains("missing")
        );
    }

    #[test]
    fn the_hook_command_quotes_its_words() {
        let cmd = hook_command(
            Path::new("/usr/local/bin/ptah-runner"),
            DIGEST,
            Path::new("/source"),
        );
        assert_eq!(
            cmd,
            format!("'/usr/local/bin/ptah-runner' 'check-sequence' '--sequence-digest={DIGEST}' '--source=/source'")
                .replace("'check-sequence'", "check-sequence")
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn the_failing_statement_is_placed_or_left_unknown() {
        let sql = "CREATE TABLE carriers (id integer PRIMARY KEY);\nINSERT INTO carriers (id) VALUES (1);\nINSERT INTO carriers (id) VALUES (2), (1);\n";
        assert_eq!(
            statement_position(sql, 0, "INSERT INTO carriers (id) VALUES (2), (1)"),
            Some(3),
            "rolled back: found once"
        );
        assert_eq!(
            statement_position(sql, 2, "INSERT INTO carriers (id) VALUES (2), (1)"),
            Some(3),
            "progress recorded"
        );
        let twice = "INSERT INTO t VALUES (1);\nINSERT INTO t VALUES (1);\n";
        assert_eq!(
            statement_position(twice, 0, "INSERT INTO t VALUES (1)"),
            None,
            "ambiguous: not guessed"
        );
        assert_eq!(
            statement_position(twice, 1, "INSERT INTO t VALUES (1)"),
            Some(2)
        );
        assert_eq!(statement_position(sql, 0, "DROP TABLE x"), None);
        let tricky = "-- +ptah no_transaction\nCREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;\n/* ; */ SELECT ';';\nSELECT \"a;b\" FROM t; -- tail ;\n";
        assert_eq!(
            split_statements(tricky),
            [
                "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql",
                "SELECT ';'",
                "SELECT \"a;b\" FROM t"
            ]
        );
        assert_eq!(
            split_statements("-- only a comment\n"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn driver_codes_and_versions_are_read_from_the_text_only() {
        assert_eq!(
            driver_codes("ERROR: relation \"x\" already exists (SQLSTATE 42P07)"),
            (Some("42P07".into()), None)
        );
        assert_eq!(
            driver_codes("Error 1061 (42000): Duplicate key name 'i'"),
            (Some("42000".into()), Some(1061))
        );
        assert_eq!(driver_codes("no codes here (SQLSTATE 4"), (None, None));
        assert_eq!(
            failed_version("failed to apply migration 0000000005: x"),
            Some(5)
        );
        assert_eq!(failed_version("nothing"), None);
        let line = "error: error running migrations: failed to apply migration 2: failed to execute migration SQL: Error 1062 (23000): Duplicate entry 'a@example.com' for key 'e'\nSQL: CREATE UNIQUE INDEX e ON c (email)\n";
        let m = ptah_error(line.as_bytes());
        assert_eq!(m, "error running migrations: failed to apply migration 2…");
        let dirty = "error: migration 4 is dirty: state=failed applied=0/3 error=\"x\" error_stmt=\"INSERT INTO t VALUES (42)\"\n";
        assert!(!ptah_error(dirty.as_bytes()).contains("42"));
        assert!(failure_may_have_committed(
            EngineArg::Mysql,
            "CREATE UNIQUE INDEX e ON c (email)"
        ));
        assert!(failure_may_have_committed(
            EngineArg::Mysql,
            "-- c\nALTER TABLE t ADD x int"
        ));
        assert!(!failure_may_have_committed(
            EngineArg::Mysql,
            "INSERT INTO t VALUES (1)"
        ));
        assert!(!failure_may_have_committed(
            EngineArg::Mysql,
            "  replace into t values (1)"
        ));
        assert!(!failure_may_have_committed(
            EngineArg::Postgresql,
            "CREATE UNIQUE INDEX e ON c (email)"
        ));
    }

    #[test]
    fn file_names_descriptions_and_declared_modes_read_as_ptah_reads_them() {
        assert_eq!(
            parse_file_name("0000000003_order_index.up.sql"),
            Some((3, "order_index".into(), true, false))
        );
        assert_eq!(
            parse_file_name("0000000003_snap.checkpoint.down.sql"),
            Some((3, "snap".into(), false, true))
        );
        for bad in [
            "0003_short.up.sql",
            "0000000003_.up.sql",
            "0000000003-x.up.sql",
            "0000000003_x.sql",
            "README.md",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
        assert_eq!(description_of("order_index"), "Order Index");
        assert_eq!(description_of("ADD_users"), "Add Users");
        assert_eq!(
            declared_transaction_mode("-- +ptah no_transaction\nCREATE INDEX i ON t (x);"),
            Some(MigrationTransactionMode::None)
        );
        assert_eq!(
            declared_transaction_mode("-- atlas:txmode none\n\nSELECT 1;"),
            Some(MigrationTransactionMode::None)
        );
        assert_eq!(
            declared_transaction_mode("CREATE TABLE t (id int);\n-- +ptah no_transaction\n"),
            None,
            "only the header counts"
        );
        assert_eq!(declared_transaction_mode("SELECT 1;"), None);
    }

    #[test]
    fn a_directory_ptah_would_hash_otherwise_is_refused_naming_the_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let write =
            |name: &str, body: &str| std::fs::write(tmp.path().join(name), body).expect("write");
        write("0000000001_a.up.sql", "SELECT 1;\n");
        let e = read_directory(tmp.path()).unwrap_err();
        assert!(e.reason.contains("version 1"), "{e}");
        write("0000000001_a.down.sql", "SELECT 1;\n");
        let d = read_directory(tmp.path()).expect("reads");
        assert_eq!(
            d.migrations[&1].checksum,
            hex::encode(sha2_digest(b"SELECT 1;\n"))
        );
        assert!(!d.sealed);
        write("0000000002_t.up.sql", "SELECT {{ .Env }};\n");
        write("0000000002_t.down.sql", "SELECT 1;\n");
        assert!(
            read_directory(tmp.path())
                .unwrap_err()
                .file
                .contains("0000000002_t.up.sql")
        );
        std::fs::remove_file(tmp.path().join("0000000002_t.up.sql")).expect("rm");
        std::fs::remove_file(tmp.path().join("0000000002_t.down.sql")).expect("rm");
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("0000000003_l.up.sql"))
            .expect("symlink");
        assert!(
            read_directory(tmp.path())
                .unwrap_err()
                .reason
                .contains("symbolic link")
        );
        std::fs::remove_file(tmp.path().join("0000000003_l.up.sql")).expect("rm");
        write("atlas.sum", "h1:x\n");
        assert!(
            read_directory(tmp.path())
                .unwrap_err()
                .reason
                .contains("Atlas")
        );
        // The checksums Ptah recorded in schema_migrations for these files
        // (read from the scratch PostgreSQL after `up`).
        let base = dir("postgresql", "base");
        assert!(base.sealed);
        assert_eq!(
            base.migrations[&2].checksum,
            "5a16340fb68b54560a5800622ff3b3c60877d3526d51ff4989358bb5220c1397"
        );
        assert_eq!(
            base.migrations[&3].checksum,
            "2ddddf745c628cbbfa5dbe15101c8c5e8c070e331beb3c0f328159c42d0eb56c"
        );
    }
}
