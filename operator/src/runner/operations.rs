//! The schema's database operations, each a short run of the Ptah CLI:
//!
//! * **Observe**: `ptah schema drift --schema-file=<source> --format=json`.
//!   Only the digest, dialect, total count, highest severity and bounded
//!   category aggregates leave the Pod; the report's `database_url` is
//!   compared with the URL the runner gave and dropped.
//! * **Plan**: two independent `ptah schema plan --dry-run` runs (with
//!   `spec.policy.exclude` as `--exclude`), accepted only when byte-identical, then `ptah schema apply --plan=<file>
//!   --dry-run` of those exact bytes. The synced line is the authoritative
//!   no-change result.
//! * **Apply**: the checked plan bytes (fetched, hashed and written by the
//!   step before this runs) through `ptah schema apply --plan=<file>
//!   --auto-approve`. Any error is an outcome nobody established: the
//!   manager's proof decides, and nothing here retries.
//!
//! The target identity digest is the URL's server, port, database and
//! login ([`super::identity`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::StepError;
use super::cli::{ApplyArgs, DatabaseArgs};
use super::executor::Executor;
use super::identity::Target;
use super::reports::{self, Planned, ReportError};
use crate::protocol::args::EngineArg;
use crate::protocol::database::{ApplyReport, DriftSummary, PlanOutcome, PlannedChange};
use crate::protocol::result::StepOutput;

/// The child's working directory under the Job's `work` emptyDir: empty, so
/// Ptah loads no `ptah.yaml`.
pub const CHILD_DIR: &str = "ptah";
/// Where Plan writes its bytes for the dry run.
pub const DRY_RUN_FILE: &str = "dry-run.plan.json";

/// A Go duration for Ptah's flags.
pub fn go_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The executor for one operation: Ptah at `program`, in a fresh directory
/// under `work_dir`.
pub fn executor(program: &Path, work_dir: &Path) -> Result<Executor, StepError> {
    let dir = work_dir.join(CHILD_DIR);
    std::fs::create_dir_all(&dir)
        .map_err(|e| StepError::failed(format!("cannot make {}: {}", dir.display(), e.kind())))?;
    Executor::from_env(program, &dir)
}

fn report_error(step: &str, e: ReportError) -> StepError {
    StepError::failed(format!("{step}: {e}"))
}

fn target(a: &DatabaseArgs, exec: &Executor) -> Result<Target, StepError> {
    Target::from_url(a.engine, exec.db_url())
}

/// Observe.
pub async fn observe(
    a: &DatabaseArgs,
    exec: &Executor,
    limit: Duration,
) -> Result<StepOutput, StepError> {
    let target = target(a, exec)?;
    let args = vec![
        "schema".into(),
        "drift".into(),
        format!("--schema-file={}", a.source.display()),
        "--format=json".into(),
        "--severity=all".into(),
        format!("--connect-timeout={}", go_duration(a.connect_timeout)),
    ];
    let run = exec.run(&args, limit).await?;
    let drift = reports::drift(&run).map_err(|e| report_error("observe", e))?;
    if let Some(reported) = drift.database_url.as_deref()
        && !target.matches_reported(a.engine, reported)
    {
        return Err(StepError::failed(
            "observe: ptah reports a database other than the one PTAH_DB_URL names",
        ));
    }
    Ok(StepOutput::DriftObserved {
        report: DriftSummary {
            target_identity_digest: target.digest(),
            ..drift.summary
        },
    })
}

/// Plan.
pub async fn plan(
    a: &DatabaseArgs,
    exec: &Executor,
    work_dir: &Path,
    limit: Duration,
) -> Result<StepOutput, StepError> {
    let target = target(a, exec)?;
    let mut args = vec![
        "schema".into(),
        "plan".into(),
        format!("--schema-file={}", a.source.display()),
        "--dry-run".into(),
        format!("--connect-timeout={}", go_duration(a.connect_timeout)),
    ];
    // The selectors travel in the plan document, so the dry run and the
    // Apply of those bytes keep the same scope without them.
    args.extend(a.exclude.iter().map(|s| format!("--exclude={s}")));
    let first = exec.run(&args, limit).await?;
    let second = exec.run(&args, limit).await?;
    let one = reports::plan(&first).map_err(|e| report_error("plan", e))?;
    let two = reports::plan(&second).map_err(|e| report_error("plan", e))?;
    let outcome = |dialect: String, change| PlanOutcome {
        target_identity_digest: target.digest(),
        dialect,
        change,
    };
    let (bytes, document) = match (one, two) {
        (Planned::Synced, Planned::Synced) => {
            // No document says the dialect: the engine's.
            let dialect = match a.engine {
                EngineArg::Postgresql => "postgres",
                EngineArg::Mysql => "mysql",
            };
            return Ok(StepOutput::Planned {
                plan: outcome(dialect.into(), None),
            });
        }
        (Planned::Changes { bytes, document }, Planned::Changes { bytes: again, .. })
            if bytes == again =>
        {
            (bytes, document)
        }
        _ => {
            return Err(StepError::failed(
                "plan: two independent plans of the same database differ; \
                 something changed it while it was planned, or the plan is not deterministic",
            ));
        }
    };
    // Ptah does not read a MySQL-family database's grants back: a plan of
    // grants the database holds is no change (grants.rs).
    if a.engine == EngineArg::Mysql {
        let sql: Vec<String> = document.statements.iter().map(|s| s.sql.clone()).collect();
        if super::grants::all_held(&sql, exec.db_url(), &target, a.connect_timeout).await {
            return Ok(StepOutput::Planned {
                plan: outcome(document.dialect.clone(), None),
            });
        }
    }
    let file = write_file(work_dir, DRY_RUN_FILE, &bytes)?;
    let dry = vec![
        "schema".into(),
        "apply".into(),
        format!("--plan={}", file.display()),
        "--dry-run".into(),
        format!("--lock-timeout={}", go_duration(a.lock_timeout)),
        format!("--connect-timeout={}", go_duration(a.connect_timeout)),
    ];
    let checked = exec.run(&dry, limit).await?;
    reports::dry_run(&checked)
        .map_err(|e| report_error("plan: the dry run of the exact bytes", e))?;
    let (tables, privilege_changes) =
        reports::classify(&document.statements, &target.default_schema(exec.db_url()));
    let destructive = document.destructive
        || document
            .statements
            .iter()
            .any(|s| matches!(s.severity.as_str(), "destructive" | "error"));
    let plan = String::from_utf8(bytes)
        .map_err(|_| StepError::failed("plan: ptah's plan document is not UTF-8"))?;
    let statement_count = i32::try_from(document.statements.len())
        .map_err(|_| StepError::failed("plan: more statements than a plan may hold"))?;
    let planned = outcome(
        document.dialect.clone(),
        Some(PlannedChange {
            content_digest: crate::protocol::receiver::content_sha256(plan.as_bytes()),
            plan,
            statement_count,
            destructive,
            privilege_changes,
            tables,
            actual_state_fingerprint: document.from_fingerprint.clone(),
            desired_state_fingerprint: document.to_fingerprint.clone(),
        }),
    );
    Ok(StepOutput::Planned { plan: planned })
}

/// Apply of the plan file the step checked and wrote.
pub async fn apply(
    a: &ApplyArgs,
    exec: &Executor,
    plan_file: &Path,
    statements: i32,
    limit: Duration,
) -> Result<StepOutput, StepError> {
    let target = target(&a.database, exec)?;
    let mut args = vec![
        "schema".into(),
        "apply".into(),
        format!("--plan={}", plan_file.display()),
        "--auto-approve".into(),
        format!("--lock-timeout={}", go_duration(a.database.lock_timeout)),
        format!(
            "--connect-timeout={}",
            go_duration(a.database.connect_timeout)
        ),
    ];
    if let Some(mode) = &a.transaction_mode {
        args.push(format!("--tx-mode={mode}"));
    }
    let run = exec.run(&args, limit).await?;
    reports::applied(&run).map_err(|e| report_error("apply", e))?;
    Ok(StepOutput::Applied {
        report: ApplyReport {
            target_identity_digest: target.digest(),
            statements_executed: statements,
        },
    })
}

/// The statements of a checked plan file, counted from its document.
pub fn statement_count(bytes: &[u8]) -> Result<i32, StepError> {
    let doc: reports::PlanDocument = crate::protocol::from_json(bytes).map_err(|e| {
        StepError::refused(
            "plan",
            None,
            format!("the plan's bytes are not a Ptah plan document: {e}"),
        )
    })?;
    i32::try_from(doc.statements.len())
        .map_err(|_| StepError::refused("plan", None, "more statements than a plan may hold"))
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, StepError> {
    let path = dir.join(name);
    std::fs::write(&path, bytes)
        .map_err(|e| StepError::failed(format!("cannot write {}: {}", path.display(), e.kind())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_are_what_ptah_parses() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
    }
}
