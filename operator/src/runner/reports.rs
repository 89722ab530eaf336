//! Ptah's outputs, parsed strictly: the drift report of `schema drift
//! --format json`, the plan document of `schema plan --dry-run`, the ends of
//! `schema apply`, and what the runner derives from a plan's statements
//! that Ptah does not classify (the tables touched, privilege changes).
//!
//! Pure: every function takes what the child wrote and its exit code, and
//! answers a typed value or a [`ReportError`] that names what was wrong. A
//! stream that does not parse, an exit code the contract does not know, a
//! truncated stream or a missing report is an error, never a success. The
//! golden files in `conformance/testdata/executor/` hold what the pinned Ptah
//! writes; `conformance/tests/executor_contract.rs` feeds them through here.

use crate::protocol::from_json;
use std::collections::BTreeSet;

use serde::Deserialize;

use crate::api::plan::PrivilegeChange;
use crate::api::schema::{DriftCategory, DriftFinding, DriftSeverity};

use super::executor::ChildRun;
use crate::protocol::database::{DriftSummary, MAX_FINDINGS};

/// What `schema plan` prints when the database already converged.
pub const SYNCED: &str = "Schema is synced, no changes to be made.";
/// What `schema apply` prints when the plan ran to its end.
pub const APPLY_COMPLETED: &str = "Schema apply completed successfully.";

/// Why an output of Ptah is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The child wrote more than the runner keeps.
    #[error("ptah's {stream} was cut at {limit} bytes: the report is incomplete")]
    Truncated {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The bound.
        limit: usize,
    },
    /// No document where the contract puts one.
    #[error("ptah wrote no {what} on {stream} (exit {exit})")]
    Missing {
        /// The document.
        what: &'static str,
        /// Where it should be.
        stream: &'static str,
        /// The exit code.
        exit: i32,
    },
    /// A document that does not parse as its contract says.
    #[error("ptah's {what} does not parse: {reason}")]
    Unparsable {
        /// The document.
        what: &'static str,
        /// serde's reason (names the field, never a value of it).
        reason: String,
    },
    /// A field that parses but breaks its rule.
    #[error("ptah's {what}: {field} {reason}")]
    Invalid {
        /// The document.
        what: &'static str,
        /// The field.
        field: &'static str,
        /// The rule.
        reason: String,
    },
    /// An exit code this contract does not know for the command.
    #[error("ptah {command} exited {exit}, which the executor contract does not know")]
    UnknownExit {
        /// The command.
        command: &'static str,
        /// The code (`-1` for a signal).
        exit: i32,
    },
    /// Ptah reported an error of its own.
    #[error("ptah {command} failed (exit {exit}): {message}")]
    Failed {
        /// The command.
        command: &'static str,
        /// The code.
        exit: i32,
        /// Its message, redacted and bounded.
        message: String,
    },
}

// ---- drift (Observe) ----

/// `schema drift --format json`, as the pinned Ptah writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DriftReport {
    drift: bool,
    failed: bool,
    failure_threshold: String,
    highest_severity: String,
    #[serde(default)]
    dialect: Option<String>,
    #[serde(default)]
    #[allow(dead_code, reason = "part of the contract; never read")]
    sources: Option<String>,
    /// Redacted by Ptah, and never copied anywhere by the runner.
    #[serde(default)]
    database_url: Option<String>,
    #[serde(default)]
    #[allow(dead_code, reason = "part of the contract; never read")]
    ignored_tables: Option<Vec<String>>,
    #[serde(default)]
    findings: Option<Vec<Finding>>,
    #[serde(default)]
    #[allow(dead_code, reason = "the detail stays in the Pod")]
    diff: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Finding {
    category: String,
    count: i64,
    severity: String,
}

/// A drift report, reduced to what may leave the Pod, with the redacted URL
/// Ptah says it opened (for the runner's identity check only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// The bounded summary (its target identity is filled by the caller).
    pub summary: DriftSummary,
    /// Ptah's redacted `database_url`.
    pub database_url: Option<String>,
}

/// The severity Ptah names, or an error naming it.
pub fn severity(
    what: &'static str,
    field: &'static str,
    s: &str,
) -> Result<DriftSeverity, ReportError> {
    Ok(match s {
        "safe" => DriftSeverity::Safe,
        "info" => DriftSeverity::Info,
        "warning" => DriftSeverity::Warning,
        "error" => DriftSeverity::Error,
        "destructive" => DriftSeverity::Destructive,
        other => {
            return Err(ReportError::Invalid {
                what,
                field,
                reason: format!("{other:?} is not a severity the contract knows"),
            });
        }
    })
}

/// The first JSON object in `stream`: Ptah may write `slog` lines before it
/// on stderr. The object must run to the end of the stream (trailing white
/// space aside), so a cut stream never parses.
fn json_document(stream: &[u8]) -> Option<&[u8]> {
    let text = std::str::from_utf8(stream).ok()?;
    // Offsets of whole lines, their `\n` (and any `\r`) included: a line
    // ended by `\r\n` is one byte longer than `str::lines` shows it.
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('{') {
            return Some(text[at..].trim_end().as_bytes());
        }
        at += line.len();
    }
    None
}

/// Refuses a run either of whose streams went past the bound.
pub(crate) fn not_truncated(run: &ChildRun) -> Result<(), ReportError> {
    if run.stdout_truncated {
        return Err(ReportError::Truncated {
            stream: "stdout",
            limit: run.limit,
        });
    }
    if run.stderr_truncated {
        return Err(ReportError::Truncated {
            stream: "stderr",
            limit: run.limit,
        });
    }
    Ok(())
}

/// Observe: exit 0 puts a clean report on stdout, exit 1 a report with drift
/// on stderr, exit 2 an error report on stderr. The report's digest is of the
/// document's exact bytes.
pub fn drift(run: &ChildRun) -> Result<Drift, ReportError> {
    const WHAT: &str = "drift report";
    not_truncated(run)?;
    let (stream, name) = match run.exit {
        0 => (&run.stdout, "stdout"),
        1 | 2 => (&run.stderr, "stderr"),
        exit => {
            return Err(ReportError::UnknownExit {
                command: "schema drift",
                exit,
            });
        }
    };
    let Some(doc) = json_document(stream) else {
        if run.exit == 2 {
            return Err(ReportError::Failed {
                command: "schema drift",
                exit: 2,
                message: last_error_line(&run.stderr),
            });
        }
        return Err(ReportError::Missing {
            what: WHAT,
            stream: name,
            exit: run.exit,
        });
    };
    let report: DriftReport =
        from_json(doc).map_err(|reason| ReportError::Unparsable { what: WHAT, reason })?;
    if let Some(error) = report.error.as_deref().filter(|e| !e.is_empty()) {
        return Err(ReportError::Failed {
            command: "schema drift",
            exit: run.exit,
            message: super::redact::message(error),
        });
    }
    if run.exit == 2 {
        return Err(ReportError::Failed {
            command: "schema drift",
            exit: 2,
            message: "an error report without an error".into(),
        });
    }
    let invalid = |field, reason: &str| ReportError::Invalid {
        what: WHAT,
        field,
        reason: reason.into(),
    };
    // The exit code and the document must tell the same story.
    if (run.exit == 1) != (report.drift && report.failed) {
        return Err(invalid(
            "drift",
            &format!(
                "is {} with failed {} under exit {}",
                report.drift, report.failed, run.exit
            ),
        ));
    }
    if report.failure_threshold != "all" {
        return Err(invalid(
            "failure_threshold",
            "is not \"all\", which the runner asks for",
        ));
    }
    let highest = severity(WHAT, "highest_severity", &report.highest_severity)?;
    let mut findings = Vec::new();
    let mut total = 0i64;
    for f in report.findings.unwrap_or_default() {
        let category: DriftCategory = serde_json::from_value(serde_json::Value::String(
            f.category.clone(),
        ))
        .map_err(|_| {
            invalid(
                "findings.category",
                &format!("{:?} is not a category the contract knows", f.category),
            )
        })?;
        if f.count < 1 {
            return Err(invalid("findings.count", "is below 1"));
        }
        total = total.saturating_add(f.count);
        findings.push(DriftFinding {
            category,
            count: f.count,
            severity: severity(WHAT, "findings.severity", &f.severity)?,
        });
    }
    if !report.drift && !findings.is_empty() {
        return Err(invalid("findings", "are listed for a report without drift"));
    }
    let truncated = findings.len() > MAX_FINDINGS;
    findings.truncate(MAX_FINDINGS);
    Ok(Drift {
        summary: DriftSummary {
            report_digest: crate::protocol::receiver::content_sha256(doc),
            drift: report.drift,
            dialect: report.dialect.filter(|d| !d.is_empty()),
            finding_count: total,
            highest_severity: report.drift.then_some(highest),
            findings,
            truncated,
            target_identity_digest: String::new(),
        },
        database_url: report.database_url,
    })
}

// ---- plan (Plan) ----

/// Ptah's plan document (`format_version` 1).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanDocument {
    /// Always 1.
    pub format_version: i32,
    /// `plan_<12 hex>` unless named.
    pub name: String,
    /// The connection's dialect.
    pub dialect: String,
    /// SHA-256 of the live schema the plan was computed from.
    pub from_fingerprint: String,
    /// SHA-256 of the declared schema.
    pub to_fingerprint: String,
    /// Exclude selectors (the runner passes none).
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
    /// Any destructive statement.
    pub destructive: bool,
    /// The statements, in order.
    pub statements: Vec<PlanStatement>,
}

/// One statement of a plan document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStatement {
    /// The SQL.
    pub sql: String,
    /// `safe`, `warning`, `destructive`, …
    pub severity: String,
    /// Why it has that severity.
    #[allow(dead_code, reason = "part of the contract; the plan carries it")]
    pub reason: String,
}

/// The first statement Ptah's plan document classes destructive, for the
/// message of a plan `allowDestructive` holds back.
pub fn first_destructive(plan: &str) -> Option<String> {
    let doc: PlanDocument = serde_json::from_str(plan).ok()?;
    doc.statements
        .into_iter()
        .find(|s| s.severity == "destructive")
        .map(|s| s.sql)
}

/// What one `schema plan --dry-run` said.
#[derive(Debug, Clone)]
pub enum Planned {
    /// The database converged.
    Synced,
    /// A plan: its exact bytes and what they say.
    Changes {
        /// The document's exact bytes.
        bytes: Vec<u8>,
        /// The document.
        document: Box<PlanDocument>,
    },
}

fn is_sha256(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `schema plan --dry-run`: exit 0 with the synced line or the document on
/// stdout; exit 2 is Ptah's error.
pub fn plan(run: &ChildRun) -> Result<Planned, ReportError> {
    const WHAT: &str = "plan document";
    not_truncated(run)?;
    match run.exit {
        0 => {}
        2 => {
            return Err(ReportError::Failed {
                command: "schema plan",
                exit: 2,
                message: last_error_line(&run.stderr),
            });
        }
        exit => {
            return Err(ReportError::UnknownExit {
                command: "schema plan",
                exit,
            });
        }
    }
    let text = String::from_utf8_lossy(&run.stdout);
    if text.trim() == SYNCED {
        return Ok(Planned::Synced);
    }
    let document: PlanDocument = json_stdout(run, WHAT)?;
    let invalid = |field, reason: &str| ReportError::Invalid {
        what: WHAT,
        field,
        reason: reason.into(),
    };
    if document.format_version != 1 {
        return Err(invalid("format_version", "is not 1"));
    }
    if document.dialect.is_empty() {
        return Err(invalid("dialect", "is empty"));
    }
    if !is_sha256(&document.from_fingerprint) {
        return Err(invalid(
            "from_fingerprint",
            "is not sha256: and 64 hex digits",
        ));
    }
    if !is_sha256(&document.to_fingerprint) {
        return Err(invalid(
            "to_fingerprint",
            "is not sha256: and 64 hex digits",
        ));
    }
    if document.statements.is_empty() || document.statements.iter().any(|s| s.sql.trim().is_empty())
    {
        return Err(invalid("statements", "are empty, or one is"));
    }
    for s in &document.statements {
        severity(WHAT, "statements.severity", &s.severity)?;
    }
    Ok(Planned::Changes {
        bytes: run.stdout.clone(),
        document: Box::new(document),
    })
}

/// The JSON document `what` that a run with exit 0 wrote on stdout.
pub(crate) fn json_stdout<T: serde::de::DeserializeOwned>(
    run: &ChildRun,
    what: &'static str,
) -> Result<T, ReportError> {
    if !String::from_utf8_lossy(&run.stdout)
        .trim_start()
        .starts_with('{')
    {
        return Err(ReportError::Missing {
            what,
            stream: "stdout",
            exit: run.exit,
        });
    }
    from_json(&run.stdout).map_err(|reason| ReportError::Unparsable { what, reason })
}

/// `schema apply --plan … --dry-run` of the exact bytes: exit 0 and the
/// plan printed. A stale plan or any other error is Ptah's refusal.
pub fn dry_run(run: &ChildRun) -> Result<(), ReportError> {
    not_truncated(run)?;
    match run.exit {
        0 if String::from_utf8_lossy(&run.stdout).contains("Planned schema changes") => Ok(()),
        0 => Err(ReportError::Missing {
            what: "dry-run preview",
            stream: "stdout",
            exit: 0,
        }),
        2 => Err(ReportError::Failed {
            command: "schema apply --dry-run",
            exit: 2,
            message: last_error_line(&run.stderr),
        }),
        exit => Err(ReportError::UnknownExit {
            command: "schema apply --dry-run",
            exit,
        }),
    }
}

/// `schema apply --plan … --auto-approve`: exit 0 and the completion line,
/// or Ptah's error. Anything else is not a success.
pub fn applied(run: &ChildRun) -> Result<(), ReportError> {
    match run.exit {
        0 if String::from_utf8_lossy(&run.stdout).contains(APPLY_COMPLETED) => Ok(()),
        0 => Err(ReportError::Missing {
            what: "completion line",
            stream: "stdout",
            exit: 0,
        }),
        2 => Err(ReportError::Failed {
            command: "schema apply",
            exit: 2,
            message: last_error_line(&run.stderr),
        }),
        exit => Err(ReportError::UnknownExit {
            command: "schema apply",
            exit,
        }),
    }
}

/// Ptah's error, as a message that may leave the Pod: its `error:` line
/// without the `SQL:` tail (SQL text stays in the Pod), redacted, bounded.
pub fn last_error_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("no message on stderr");
    super::redact::message(line)
}

// ---- what the runner derives from a plan's statements ----

/// What a plan changes beyond what Ptah classifies: the tables its
/// statements touch (schema-qualified with `default_schema` where
/// unqualified) and the kinds of privilege change. `docs/executor.md` says
/// which statement shapes are read.
pub fn classify(
    statements: &[PlanStatement],
    default_schema: &str,
) -> (Vec<String>, Vec<PrivilegeChange>) {
    let mut tables = BTreeSet::new();
    let mut privileges = BTreeSet::new();
    for s in statements {
        let words = words(&strip_comments(&s.sql));
        let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
        let at = |i: usize| upper.get(i).map(String::as_str).unwrap_or("");
        if let Some(t) = table_of(&words, &upper) {
            tables.insert(qualify(&t, default_schema));
        }
        match (at(0), at(1)) {
            ("GRANT", _) => {
                privileges.insert(if upper.iter().any(|w| w == "ON") {
                    PrivilegeChange::Grant
                } else {
                    PrivilegeChange::RoleMembership
                });
            }
            ("REVOKE", _) => {
                privileges.insert(if upper.iter().any(|w| w == "ON") {
                    PrivilegeChange::Revoke
                } else {
                    PrivilegeChange::RoleMembership
                });
            }
            ("DROP", "OWNED") => {
                privileges.insert(PrivilegeChange::Revoke);
            }
            ("REASSIGN", "OWNED") => {
                privileges.insert(PrivilegeChange::Ownership);
            }
            ("CREATE" | "ALTER" | "DROP", "ROLE" | "USER") | ("SET", "ROLE") => {
                privileges.insert(PrivilegeChange::Role);
            }
            ("ALTER", "DEFAULT") => {
                privileges.insert(if upper.iter().any(|w| w == "REVOKE") {
                    PrivilegeChange::Revoke
                } else {
                    PrivilegeChange::Grant
                });
            }
            ("CREATE" | "ALTER" | "DROP", "POLICY") => {
                privileges.insert(PrivilegeChange::RowSecurityPolicy);
            }
            _ => {}
        }
        if upper.windows(2).any(|w| w[0] == "OWNER" && w[1] == "TO")
            || (at(0) == "CREATE"
                && at(1) == "SCHEMA"
                && upper.iter().any(|w| w == "AUTHORIZATION"))
        {
            privileges.insert(PrivilegeChange::Ownership);
        }
        if upper
            .windows(2)
            .any(|w| w[0] == "SECURITY" && w[1] == "DEFINER")
        {
            privileges.insert(PrivilegeChange::SecurityDefiner);
        }
        if upper
            .iter()
            .any(|w| w.starts_with("DEFINER=") || w == "DEFINER")
        {
            privileges.insert(PrivilegeChange::Definer);
        }
        if upper
            .windows(3)
            .any(|w| w[0] == "ROW" && w[1] == "LEVEL" && w[2] == "SECURITY")
        {
            privileges.insert(PrivilegeChange::RowSecurityPolicy);
        }
    }
    (
        tables.into_iter().collect(),
        privileges.into_iter().collect(),
    )
}

/// The table a statement names: `CREATE|ALTER|DROP TABLE [IF [NOT] EXISTS] t`,
/// `CREATE [UNIQUE] INDEX … ON t`, `DROP INDEX … ON t` (MySQL), `COMMENT ON
/// TABLE|COLUMN t[.c]`, `CREATE|DROP TRIGGER … ON t`, `CREATE|ALTER|DROP
/// POLICY … ON t`, `TRUNCATE [TABLE] t`, `RENAME TABLE t`.
fn table_of(words: &[String], upper: &[String]) -> Option<String> {
    let at = |i: usize| upper.get(i).map(String::as_str).unwrap_or("");
    let after_if = |mut i: usize| {
        if at(i) == "IF" {
            i += if at(i + 1) == "NOT" { 3 } else { 2 };
        }
        if at(i) == "ONLY" {
            i += 1;
        }
        words.get(i).cloned()
    };
    let on = || {
        upper
            .iter()
            .position(|w| w == "ON")
            .and_then(|i| {
                if at(i + 1) == "ONLY" {
                    words.get(i + 2)
                } else {
                    words.get(i + 1)
                }
            })
            .cloned()
    };
    match (at(0), at(1)) {
        ("CREATE" | "ALTER" | "DROP", "TABLE") => after_if(2),
        ("CREATE", "UNLOGGED" | "TEMPORARY" | "TEMP") if at(2) == "TABLE" => after_if(3),
        ("CREATE", "INDEX" | "UNIQUE") | ("DROP", "INDEX") => on(),
        ("CREATE" | "ALTER" | "DROP", "POLICY" | "TRIGGER") => on(),
        ("CREATE", "OR") if at(2) == "REPLACE" && at(3) == "TRIGGER" => on(),
        ("COMMENT", "ON") if at(2) == "TABLE" => words.get(3).cloned(),
        ("COMMENT", "ON") if at(2) == "COLUMN" => words.get(3).map(|c| {
            let parts = split_qualified(c);
            parts[..parts.len().saturating_sub(1)].join(".")
        }),
        ("TRUNCATE", "TABLE") | ("RENAME", "TABLE") => after_if(2),
        ("TRUNCATE", _) => after_if(1),
        _ => None,
    }
    .map(|t| t.trim_end_matches(['(', ';', ',']).to_string())
    .filter(|t| !t.is_empty())
}

/// `schema.table` without quotes; an unqualified name gets `default_schema`.
fn qualify(name: &str, default_schema: &str) -> String {
    let parts = split_qualified(name);
    match parts.as_slice() {
        [table] => format!("{default_schema}.{table}"),
        [.., schema, table] => format!("{schema}.{table}"),
        [] => format!("{default_schema}.{name}"),
    }
}

/// The dot-separated parts of an identifier, quotes (`"` and `` ` ``) removed.
fn split_qualified(name: &str) -> Vec<String> {
    split_unquoted(name, '.', &['"', '`'])
}

/// The parts of `name` between the `sep`s outside `quotes`, each with its
/// quotes removed; a `(` outside quotes ends the name.
pub(crate) fn split_unquoted(name: &str, sep: char, quotes: &[char]) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut quote: Option<char> = None;
    for c in name.chars() {
        match (quote, c) {
            (None, c) if quotes.contains(&c) => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c == sep => parts.push(String::new()),
            (None, '(') => break,
            (_, c) => parts.last_mut().expect("one part").push(c),
        }
    }
    parts
}

/// The statement without `--` and `/* */` comments (quotes kept).
pub(crate) fn strip_comments(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), c) => out.push(c),
            (None, '\'' | '"' | '`') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '-') if chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            (None, '/') if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
                out.push(' ');
            }
            (None, c) => out.push(c),
        }
    }
    out
}

/// Words split on white space, with a quoted identifier kept whole and an
/// opening parenthesis split off.
fn words(sql: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                word.push(c);
            }
            (Some(_), c) => word.push(c),
            (None, '"' | '`') => {
                quote = Some(c);
                word.push(c);
            }
            (None, c) if c.is_whitespace() || c == '(' || c == ';' || c == ',' => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(exit: i32, stdout: &str, stderr: &str) -> ChildRun {
        ChildRun {
            exit,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            stdout_truncated: false,
            stderr_truncated: false,
            limit: 1024,
            elapsed: std::time::Duration::ZERO,
        }
    }

    const CLEAN: &str = r#"{
  "drift": false,
  "failed": false,
  "failure_threshold": "all",
  "highest_severity": "safe",
  "dialect": "postgres",
  "database_url": "postgres://ptah:***@127.0.0.1:5432/app"
}
"#;

    const DRIFTED: &str = r#"{
  "drift": true,
  "failed": true,
  "failure_threshold": "all",
  "highest_severity": "destructive",
  "dialect": "postgres",
  "findings": [
    {"category": "tables_removed", "count": 1, "severity": "destructive"},
    {"category": "tables_added", "count": 2, "severity": "safe"}
  ],
  "diff": {"tables_added": ["a", "b"]}
}
"#;

    #[test]
    fn a_clean_report_is_read_from_stdout_and_drift_from_stderr() {
        let clean = drift(&run(0, CLEAN, "")).unwrap();
        assert!(!clean.summary.drift);
        assert_eq!(clean.summary.finding_count, 0);
        assert_eq!(clean.summary.highest_severity, None);
        assert_eq!(clean.summary.dialect.as_deref(), Some("postgres"));
        assert!(clean.database_url.is_some());
        let warn = "time=x level=WARN msg=\"slow\"\n";
        let drifted = drift(&run(1, "", &format!("{warn}{DRIFTED}"))).unwrap();
        assert!(drifted.summary.drift);
        assert_eq!(drifted.summary.finding_count, 3);
        assert_eq!(
            drifted.summary.highest_severity,
            Some(DriftSeverity::Destructive)
        );
        assert_eq!(
            drifted.summary.findings[0].category,
            DriftCategory::TablesRemoved
        );
        assert!(drifted.summary.report_digest.starts_with("sha256:"));
    }

    #[test]
    fn a_drift_report_that_breaks_the_contract_is_refused_naming_what() {
        // Not JSON.
        let e = drift(&run(0, "{ nope", "")).unwrap_err();
        assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
        // Missing report.
        let e = drift(&run(1, "", "")).unwrap_err();
        assert!(
            matches!(
                e,
                ReportError::Missing {
                    stream: "stderr",
                    ..
                }
            ),
            "{e}"
        );
        // An exit code the contract does not know.
        let e = drift(&run(3, CLEAN, "")).unwrap_err();
        assert!(matches!(e, ReportError::UnknownExit { exit: 3, .. }), "{e}");
        // A truncated stream.
        let mut cut = run(1, "", DRIFTED);
        cut.stderr_truncated = true;
        assert!(matches!(
            drift(&cut).unwrap_err(),
            ReportError::Truncated { .. }
        ));
        // A report cut in the middle does not parse.
        let e = drift(&run(1, "", &DRIFTED[..DRIFTED.len() / 2])).unwrap_err();
        assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
        // Exit and document disagree.
        let e = drift(&run(0, DRIFTED, "")).unwrap_err();
        assert!(e.to_string().contains("drift"), "{e}");
        // An unknown category, an unknown field.
        let odd = DRIFTED.replace("tables_added", "tables_teleported");
        let e = drift(&run(1, "", &odd)).unwrap_err();
        assert!(e.to_string().contains("tables_teleported"), "{e}");
        let extra = CLEAN.replace("\"drift\"", "\"surprise\": 1, \"drift\"");
        let e = drift(&run(0, &extra, "")).unwrap_err();
        assert!(e.to_string().contains("surprise"), "{e}");
    }

    #[test]
    fn log_lines_ended_by_crlf_before_the_report_are_skipped_whole() {
        // Each `\r\n` is one byte more than `str::lines` shows: counted from
        // those, the report would start inside the last `é` (a panic).
        let stderr = format!("é\r\né\r\né\r\n{DRIFTED}");
        let drifted = drift(&run(1, "", &stderr)).unwrap();
        assert_eq!(drifted.summary.finding_count, 3);
        assert_eq!(
            drifted.summary.report_digest,
            crate::protocol::receiver::content_sha256(DRIFTED.trim_end().as_bytes())
        );
    }

    #[test]
    fn a_broken_field_is_named_by_its_path() {
        let e = drift(&run(
            1,
            "",
            &DRIFTED.replace("\"count\": 2", "\"count\": \"two\""),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("findings[1].count"), "{e}");
        let e = plan(&run(
            0,
            &PLAN.replace("\"destructive\": false", "\"destructive\": 0"),
            "",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("destructive: invalid type"), "{e}");
    }

    #[test]
    fn a_drift_error_report_is_a_failure_with_the_url_redacted() {
        let report = r#"{"drift": false, "failed": false, "failure_threshold": "all", "highest_severity": "safe", "error": "connect to postgres://u:secret@h/db: refused"}"#;
        let e = drift(&run(2, "", report)).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ReportError::Failed { exit: 2, .. }));
        assert!(!text.contains("secret"), "{text}");
    }

    const PLAN: &str = r#"{
  "format_version": 1,
  "name": "plan_0123456789ab",
  "dialect": "postgres",
  "from_fingerprint": "sha256:1111111111111111111111111111111111111111111111111111111111111111",
  "to_fingerprint": "sha256:2222222222222222222222222222222222222222222222222222222222222222",
  "destructive": false,
  "statements": [
    {"sql": "CREATE TABLE \"public\".\"orders\" (\"id\" integer NOT NULL)", "severity": "safe", "reason": ""}
  ]
}
"#;

    #[test]
    fn a_plan_is_the_synced_line_or_a_strict_document() {
        assert!(matches!(
            plan(&run(0, &format!("{SYNCED}\n"), "")).unwrap(),
            Planned::Synced
        ));
        let Planned::Changes { bytes, document } = plan(&run(0, PLAN, "")).unwrap() else {
            panic!("expected changes");
        };
        assert_eq!(bytes, PLAN.as_bytes());
        assert_eq!(document.statements.len(), 1);
    }

    #[test]
    fn a_plan_that_breaks_the_contract_is_refused_naming_what() {
        let e = plan(&run(0, "", "")).unwrap_err();
        assert!(matches!(e, ReportError::Missing { .. }), "{e}");
        let e = plan(&run(
            0,
            &PLAN.replace("\"format_version\": 1", "\"format_version\": 2"),
            "",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("format_version"), "{e}");
        let e = plan(&run(0, &PLAN.replace("sha256:1111", "md5:1111"), "")).unwrap_err();
        assert!(e.to_string().contains("from_fingerprint"), "{e}");
        let e = plan(&run(0, &PLAN[..PLAN.len() - 20], "")).unwrap_err();
        assert!(matches!(e, ReportError::Unparsable { .. }), "{e}");
        let e = plan(&run(0, &PLAN.replace("\"safe\"", "\"spicy\""), "")).unwrap_err();
        assert!(e.to_string().contains("spicy"), "{e}");
        let e = plan(&run(2, "", "error: connect: refused\n")).unwrap_err();
        assert!(matches!(e, ReportError::Failed { exit: 2, .. }), "{e}");
        let e = plan(&run(1, PLAN, "")).unwrap_err();
        assert!(matches!(e, ReportError::UnknownExit { exit: 1, .. }), "{e}");
    }

    #[test]
    fn an_apply_succeeds_only_with_exit_zero_and_the_completion_line() {
        applied(&run(
            0,
            &format!("Planned schema changes:\n…\n{APPLY_COMPLETED}\n"),
            "",
        ))
        .unwrap();
        assert!(matches!(
            applied(&run(0, "", "")).unwrap_err(),
            ReportError::Missing { .. }
        ));
        let e = applied(&run(
            2,
            "",
            "error: apply schema changes: failed: ERROR: relation \"x\" exists (SQLSTATE 42P07)\nSQL: CREATE TABLE x ()\n",
        ))
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("42P07"), "{text}");
        assert!(!text.contains("SQL: CREATE"), "{text}");
        assert!(matches!(
            applied(&run(-1, "", "")).unwrap_err(),
            ReportError::UnknownExit { .. }
        ));
    }

    #[test]
    fn a_dry_run_must_print_the_plan() {
        dry_run(&run(0, "Planned schema changes:\nCREATE TABLE x ();\n", "")).unwrap();
        let e = dry_run(&run(
            2,
            "",
            "error: pre-planned migration is stale: fingerprint moved\n",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("stale"), "{e}");
    }

    fn stmts(sql: &[&str]) -> Vec<PlanStatement> {
        sql.iter()
            .map(|s| PlanStatement {
                sql: (*s).into(),
                severity: "safe".into(),
                reason: String::new(),
            })
            .collect()
    }

    #[test]
    fn tables_and_privilege_changes_are_read_from_the_statements() {
        let (tables, privileges) = classify(
            &stmts(&[
                "-- create it\nCREATE TABLE IF NOT EXISTS \"public\".\"orders\" (id int)",
                "ALTER TABLE ONLY customers ADD COLUMN x int",
                "CREATE UNIQUE INDEX idx ON app.items (id)",
                "COMMENT ON COLUMN billing.invoices.total IS 'x'",
                "DROP TABLE `shop`.`carts`",
                "GRANT SELECT ON orders TO reader",
                "GRANT reader TO app",
                "ALTER TABLE orders OWNER TO app",
                "CREATE ROLE reader",
            ]),
            "public",
        );
        assert_eq!(
            tables,
            [
                "app.items",
                "billing.invoices",
                "public.customers",
                "public.orders",
                "shop.carts"
            ]
        );
        assert_eq!(
            privileges,
            [
                PrivilegeChange::Grant,
                PrivilegeChange::RoleMembership,
                PrivilegeChange::Role,
                PrivilegeChange::Ownership
            ]
        );
    }

    #[test]
    fn the_first_destructive_statement_is_named() {
        let plan = r#"{"format_version": 1, "name": "plan_0123456789ab", "dialect": "postgres",
            "from_fingerprint": "a", "to_fingerprint": "b", "destructive": true,
            "statements": [
              {"sql": "ALTER TABLE orders ADD COLUMN a int", "severity": "safe", "reason": ""},
              {"sql": "ALTER TABLE orders DROP COLUMN note", "severity": "destructive", "reason": "drops a column"},
              {"sql": "DROP TABLE t", "severity": "destructive", "reason": "drops a table"}]}"#;
        assert_eq!(
            first_destructive(plan).as_deref(),
            Some("ALTER TABLE orders DROP COLUMN note")
        );
        assert_eq!(first_destructive("not a plan"), None);
    }
}
