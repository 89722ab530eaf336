//! `migrations status --json`, parsed strictly.

use super::*;

pub(crate) fn nullable<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
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

pub(crate) fn status_invalid(field: &'static str, reason: impl Into<String>) -> ReportError {
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

pub(crate) fn parse_direction(d: &StatusRevision) -> Result<Direction, ReportError> {
    match d.direction.as_deref() {
        None | Some("up") => Ok(Direction::Up),
        Some("down") => Ok(Direction::Down),
        Some(other) => Err(status_invalid(
            "dirty_revision.direction",
            format!("{other:?} is not up or down"),
        )),
    }
}
