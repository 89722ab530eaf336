//! A row of the revision table as the runner reads it.

use super::*;

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
    pub(crate) fn is_applied(&self) -> bool {
        self.state == "applied"
    }

    pub(crate) fn revision(&self) -> RevisionRow {
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
