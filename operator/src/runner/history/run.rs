//! `migrations up`: the run, its end, and where it stopped.

use super::*;

/// One JSON log line of `up --log-format=json`.
#[derive(Debug, Deserialize)]
pub(crate) struct LogLine {
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
        let entry: LogLine = from_json(line.as_bytes()).map_err(|e| ReportError::Unparsable {
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
            message = format!("{message}: {}", crate::runner::redact::message(why));
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
pub(crate) fn normal_statement(s: &str) -> String {
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
        message: message.map(|m| crate::runner::redact::message(&m)),
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
pub(crate) fn run_failure(engine: EngineArg, reading: &Reading) -> Option<(RunFailure, bool)> {
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

pub(crate) fn failed_before(target: Option<String>, message: String) -> StepOutput {
    StepOutput::Ran {
        outcome: RunOutcome {
            result: RunResult::Failed {
                selected: false,
                failure: None,
            },
            applied_versions: vec![],
            target_identity_digest: target,
            message: Some(crate::runner::redact::message(&message)),
        },
    }
}

/// The longest prefix of Ptah's selection the approved digest names.
pub(crate) fn approved_prefix<'a>(
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
            message: crate::runner::redact::message(&m),
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
