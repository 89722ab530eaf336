//! `kubectl ptah preview KIND/NAME --dir DIR` (a schema) or `--migrations
//! DIR` (a migration): the plan a change would get before it is merged. The
//! local files go into a preview ConfigMap (`operator::execution::preview`),
//! the manager runs the resource's read-only Plan or History reading in a
//! Job under the resource's own execution settings against its live
//! database, the receiver stores the result, and this verb reads it, judges
//! it by the resource's policy (`operator::lifecycle::preview`), prints it
//! as text or markdown and deletes the preview (its Job and result go with
//! it). Exit 0 no change, 2 a change, 3 refused by policy.
//!
//! Nothing here is the resource's: no source is changed, no snapshot, plan
//! object or approval is made, so nothing can approve a preview.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::{Client, ResourceExt};
use operator::execution::job::OwnerKind;
use operator::execution::preview::{self as request, ANNOTATION_PREVIEW_REFUSED};
use operator::execution::receiver::harvest;
use operator::lifecycle::preview::{self as judged, Verdict};
use operator::protocol::result::{Outcome, ResultDocument, StepOutput};
use serde::Serialize;
use supplychain::manifest::Limits;
use supplychain::snapshot::{self, Snapshot, SourceConfigMap};

use crate::Failure;
use crate::plan::{Statement, sql_lines};
use crate::resource::{Kind, Resource};

/// How often the preview's progress is read.
const POLL: Duration = Duration::from_millis(500);
/// A line while the preview runs, at most this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// The local files, read as a ConfigMap source holds them: every regular
/// file of `dir` (not its subdirectories, which a ConfigMap cannot hold),
/// named by its file name. Each refusal names the file.
pub fn read_dir(dir: &Path) -> Result<Snapshot, Failure> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Failure::usage(format!("reading {}: {e}", dir.display())))?;
    let mut source = SourceConfigMap::default();
    for entry in entries {
        let entry = entry.map_err(|e| Failure::usage(format!("reading {}: {e}", dir.display())))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry
            .file_type()
            .map_err(|e| Failure::usage(format!("reading {}: {e}", path.display())))?;
        if kind.is_dir() {
            return Err(Failure::usage(format!(
                "{}: a directory; a preview holds the files of one directory, as a ConfigMap source does",
                path.display()
            )));
        }
        let bytes = std::fs::read(&path)
            .map_err(|e| Failure::usage(format!("reading {}: {e}", path.display())))?;
        match String::from_utf8(bytes) {
            Ok(text) => {
                source.data.insert(name, text);
            }
            Err(e) => {
                source.binary_data.insert(name, e.into_bytes());
            }
        }
    }
    if source.data.is_empty() && source.binary_data.is_empty() {
        return Err(Failure::usage(format!("{}: no files", dir.display())));
    }
    // The snapshot's name is not used: the preview's is generated.
    snapshot::take(&source, &[], "preview", &Limits::default())
        .map_err(|e| Failure::usage(format!("{}: {e}", dir.display())))
}

/// What the preview's Job answered.
pub enum Answer {
    /// A schema's Plan.
    Planned(operator::protocol::database::PlanOutcome),
    /// A migration's History reading.
    History(operator::protocol::migrations::HistoryReport),
}

/// Creates the preview, waits for its result and deletes it (whatever
/// happened), printing a line while it runs.
pub async fn run(
    client: &Client,
    r: &Resource,
    files: &Snapshot,
    timeout: Duration,
) -> Result<Answer, Failure> {
    let ns = r.namespace();
    let kind = owner_kind(r.kind());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let made = request::config_map(&ns, kind, &r.name(), &r.uid(), files);
    let made = api
        .create(&PostParams::default(), &made)
        .await
        .map_err(|e| Failure::api(format!("creating a preview of {}", r.cli_name()), e))?;
    let name = made.name_any();
    eprintln!(
        "preview {name}: {} file(s) ({}) against {}'s database",
        files.files.len(),
        files.content_digest,
        r.cli_name()
    );
    let answer = wait(client, &ns, &made, timeout).await;
    let deleted = api
        .delete(
            &name,
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            },
        )
        .await;
    if let Err(e) = deleted {
        eprintln!(
            "preview {name} was not deleted ({e}); `kubectl delete configmap -n {ns} {name}`"
        );
    }
    answer
}

fn owner_kind(kind: Kind) -> OwnerKind {
    match kind {
        Kind::Schema => OwnerKind::PtahSchema,
        Kind::Migration => OwnerKind::PtahMigration,
    }
}

/// Waits for the preview's stored result, the manager's refusal, or the
/// Job's failure.
async fn wait(
    client: &Client,
    ns: &str,
    made: &ConfigMap,
    timeout: Duration,
) -> Result<Answer, Failure> {
    let name = made.name_any();
    let r = request::request_of(made).map_err(|e| Failure::error(e.to_string()))?;
    let operation_id = request::operation_id(&r);
    let job_name = request::job_name(&operation_id);
    let (maps, jobs): (Api<ConfigMap>, Api<Job>) = (
        Api::namespaced(client.clone(), ns),
        Api::namespaced(client.clone(), ns),
    );
    let start = Instant::now();
    let mut said = Instant::now();
    let mut failed_since: Option<Instant> = None;
    loop {
        if let Some(stored) = harvest(client, ns, &operation_id, 1)
            .await
            .map_err(|e| Failure::error(format!("reading the preview's result: {e}")))?
        {
            return answer(stored.document);
        }
        let now = maps
            .get_opt(&name)
            .await
            .map_err(|e| Failure::api(format!("reading preview {name}"), e))?
            .ok_or_else(|| Failure::error(format!("preview {name} was deleted before it ran")))?;
        if let Some(why) = now.annotations().get(ANNOTATION_PREVIEW_REFUSED) {
            return Err(Failure::error(format!(
                "the manager refused the preview: {why}"
            )));
        }
        let job = jobs
            .get_opt(&job_name)
            .await
            .map_err(|e| Failure::api(format!("reading Job {job_name}"), e))?;
        let state = job.as_ref().map_or("not created yet", job_state);
        // A failed Job's result may still be on its way: a short grace.
        if state == "failed" {
            let since = *failed_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(10) {
                let message = termination_message(client, ns, &job_name).await;
                return Err(Failure::error(format!(
                    "the preview's Job {job_name} failed without a result: {message}"
                )));
            }
        }
        if start.elapsed() > timeout {
            return Err(Failure::error(format!(
                "no result within {timeout:?}: the Job {job_name} is {state} \
                 (is the manager running, and the resource's database reachable?)"
            )));
        }
        if said.elapsed() > PROGRESS_EVERY {
            eprintln!(
                "preview {name}: Job {job_name} {state} ({}s)",
                start.elapsed().as_secs()
            );
            said = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

fn job_state(j: &Job) -> &'static str {
    let status = j.status.as_ref();
    let has = |t: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    if has("Failed") {
        "failed"
    } else if has("Complete") {
        "complete"
    } else if status.and_then(|s| s.active).unwrap_or(0) > 0 {
        "running"
    } else {
        "pending"
    }
}

/// The runner's summary on the Job's Pod, when it left one.
async fn termination_message(client: &Client, ns: &str, job: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let listed = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await;
    listed
        .ok()
        .into_iter()
        .flat_map(|l| l.items)
        .flat_map(|p| {
            let st = p.status.unwrap_or_default();
            st.init_container_statuses
                .unwrap_or_default()
                .into_iter()
                .chain(st.container_statuses.unwrap_or_default())
        })
        .filter_map(|c| c.state.and_then(|s| s.terminated))
        .filter(|t| t.exit_code != 0)
        .find_map(|t| t.message.or(t.reason))
        .unwrap_or_else(|| "no termination message".into())
}

/// The stored document's answer, or why the step did not give one.
fn answer(doc: ResultDocument) -> Result<Answer, Failure> {
    if doc.outcome != Outcome::Succeeded {
        let why = doc
            .error
            .map(|e| match e.file {
                Some(file) => format!("{file}: {}", e.message),
                None => e.message,
            })
            .unwrap_or_default();
        return Err(Failure::error(format!(
            "the preview's {} ended {:?}: {why}",
            doc.step, doc.outcome
        )));
    }
    match doc.result {
        Some(StepOutput::Planned { plan }) => Ok(Answer::Planned(plan)),
        Some(StepOutput::History { report }) => Ok(Answer::History(report)),
        _ => Err(Failure::error(format!(
            "the preview's {} answered no plan or history",
            doc.step
        ))),
    }
}

/// One version a migration preview would run.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PendingVersion {
    pub version: i64,
    pub description: Option<String>,
    pub checksum: String,
    /// The up file's SQL, from the local files.
    pub sql: Option<String>,
}

/// A preview as the verb shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PreviewView {
    /// `PtahSchema app/orders`.
    pub resource: String,
    /// `sha256:` of the local files.
    pub content_digest: String,
    /// Files previewed.
    pub files: usize,
    /// Destructive, privilege changes, protected tables; a migration's
    /// applied version.
    pub findings: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub statements: Vec<Statement>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<PendingVersion>,
    /// `NoChange`, `Change` or `Refused`.
    pub verdict: String,
    /// The reason the resource would show.
    pub reason: Option<String>,
    /// What the policy would do, in a sentence.
    pub message: String,
    /// 0, 2 or 3.
    pub exit_code: i32,
}

/// The view of an answer for `r`, judged by its policy.
pub fn view(r: &Resource, files: &Snapshot, answer: &Answer) -> PreviewView {
    let (verdict, findings, statements, versions) = match (r, answer) {
        (Resource::Schema(s), Answer::Planned(outcome)) => {
            let statement = outcome
                .change
                .as_ref()
                .and_then(|c| operator::runner::reports::first_destructive(&c.plan));
            let verdict = judged::of_schema(&s.spec.policy, outcome, statement.as_deref());
            let (findings, statements) = schema_findings(&s.spec.policy, outcome);
            (verdict, findings, statements, vec![])
        }
        (Resource::Migration(m), Answer::History(report)) => {
            let verdict = judged::of_migrations(&m.spec.policy, report);
            let findings = vec![format!(
                "database at version {} ({} applied)",
                report.current_version, report.applied_count
            )];
            let versions = report
                .pending
                .iter()
                .map(|p| PendingVersion {
                    version: p.version,
                    description: p.description.clone(),
                    checksum: p.checksum.clone(),
                    sql: up_sql(&files.files, p.version),
                })
                .collect();
            (verdict, findings, vec![], versions)
        }
        _ => (
            Verdict::Refused {
                reason: operator::api::condition::Reason::OperationFailed,
                message: "the Job answered for the other kind of resource".into(),
            },
            vec![],
            vec![],
            vec![],
        ),
    };
    let (word, reason) = match &verdict {
        Verdict::NoChange => ("NoChange", None),
        Verdict::Change { reason, .. } => ("Change", Some(crate::resource::spelled(reason))),
        Verdict::Refused { reason, .. } => ("Refused", Some(crate::resource::spelled(reason))),
    };
    PreviewView {
        resource: format!("{} {}/{}", r.kind().api_kind(), r.namespace(), r.name()),
        content_digest: files.content_digest.clone(),
        files: files.files.len(),
        findings,
        statements,
        versions,
        verdict: word.into(),
        reason,
        message: verdict.sentence(),
        exit_code: verdict.exit_code(),
    }
}

fn schema_findings(
    policy: &operator::api::common::SchemaPolicy,
    outcome: &operator::protocol::database::PlanOutcome,
) -> (Vec<String>, Vec<Statement>) {
    let Some(change) = &outcome.change else {
        return (vec!["no statements".into()], vec![]);
    };
    let mut findings = vec![
        format!(
            "{} statement(s), {}",
            change.statement_count, outcome.dialect
        ),
        if change.destructive {
            "destructive: yes (it drops or narrows what exists)".into()
        } else {
            "destructive: no".into()
        },
    ];
    findings.push(if change.privilege_changes.is_empty() {
        "privilege changes: none".into()
    } else {
        let kinds: Vec<String> = change
            .privilege_changes
            .iter()
            .map(crate::resource::spelled)
            .collect();
        format!("privilege changes: {}", kinds.join(", "))
    });
    let protected =
        operator::lifecycle::schema::policy::protected(&policy.protected_tables, &change.tables);
    findings.push(match protected {
        Some(t) => format!("protected tables: {t} (spec.policy.protectedTables)"),
        None => "protected tables: none changed".into(),
    });
    (findings, crate::plan::statements_of(change.plan.as_bytes()))
}

/// The SQL of the local up file of `version` (`<version>_<name>.up.sql`).
fn up_sql(files: &BTreeMap<String, Vec<u8>>, version: i64) -> Option<String> {
    files.iter().find_map(|(name, bytes)| {
        let (number, rest) = name.split_once('_')?;
        (rest.ends_with(".up.sql") && number.parse::<i64>().ok()? == version)
            .then(|| String::from_utf8_lossy(bytes).into_owned())
    })
}

/// Each version's up SQL under a `-- version N description (checksum)` line.
fn version_lines(versions: &[PendingVersion]) -> String {
    versions
        .iter()
        .map(|p| {
            format!(
                "-- version {}{} ({})\n{}\n",
                p.version,
                p.description
                    .as_ref()
                    .map(|d| format!(" {d}"))
                    .unwrap_or_default(),
                p.checksum,
                p.sql
                    .as_deref()
                    .unwrap_or("-- (no local up file)")
                    .trim_end()
            )
        })
        .collect()
}

fn verdict_line(v: &PreviewView) -> String {
    match &v.reason {
        Some(reason) => format!("{} ({reason}): {}", v.verdict, v.message),
        None => format!("{}: {}", v.verdict, v.message),
    }
}

/// The preview as a terminal shows it.
pub fn render(v: &PreviewView) -> String {
    let mut out = format!(
        "Preview of {} from {} file(s), {}\n",
        v.resource, v.files, v.content_digest
    );
    out.push_str("Findings:\n");
    for f in &v.findings {
        out.push_str(&format!("  {f}\n"));
    }
    if !v.statements.is_empty() {
        out.push_str("SQL:\n");
        out.push_str(&sql_lines(&v.statements));
    }
    if !v.versions.is_empty() {
        out.push_str("Versions to run:\n");
        out.push_str(&version_lines(&v.versions));
    }
    out.push_str(&format!("Verdict: {}\n", verdict_line(v)));
    out
}

/// The preview as a pull-request comment (GitHub-flavoured markdown).
pub fn markdown(v: &PreviewView) -> String {
    let icon = match v.exit_code {
        0 => "✅",
        2 => "📝",
        _ => "⛔",
    };
    let mut out = format!("### {icon} Ptah plan preview: {}\n\n", v.resource);
    out.push_str(&format!("**{}**\n\n", verdict_line(v)));
    out.push_str(&format!(
        "{} file(s), content `{}`\n\n",
        v.files, v.content_digest
    ));
    for f in &v.findings {
        out.push_str(&format!("- {f}\n"));
    }
    if !v.statements.is_empty() {
        out.push_str(&format!("\n```sql\n{}```\n", sql_lines(&v.statements)));
    }
    if !v.versions.is_empty() {
        out.push_str("\n| version | description | checksum |\n| ---: | --- | --- |\n");
        for p in &v.versions {
            out.push_str(&format!(
                "| {} | {} | `{}` |\n",
                p.version,
                p.description.as_deref().unwrap_or("-"),
                p.checksum
            ));
        }
        out.push_str(&format!("\n```sql\n{}```\n", version_lines(&v.versions)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for (name, bytes) in files {
            std::fs::write(dir.path().join(name), bytes).expect("a file");
        }
        dir
    }

    #[test]
    fn a_directory_is_read_as_a_config_map_source_holds_it() {
        let d = dir_with(&[
            ("schema.sql", b"CREATE TABLE t (id int);\n"),
            ("blob", &[0xff, 0xfe]),
        ]);
        let s = read_dir(d.path()).expect("files");
        assert_eq!(s.files.len(), 2);
        assert!(s.content_digest.starts_with("sha256:"));
        assert_eq!(
            read_dir(d.path()).expect("files").content_digest,
            s.content_digest,
            "the same files give the same digest"
        );
    }

    #[test]
    fn a_directory_a_config_map_cannot_hold_is_refused_naming_the_file() {
        let d = dir_with(&[("schema.sql", b"x")]);
        std::fs::create_dir(d.path().join("nested")).expect("a directory");
        let e = read_dir(d.path()).expect_err("refused");
        assert!(e.message.contains("nested"), "{}", e.message);
        assert_eq!(e.code, crate::exit::USAGE);

        let d = dir_with(&[("bad name.sql", b"x")]);
        let e = read_dir(d.path()).expect_err("refused");
        assert!(e.message.contains("bad name.sql"), "{}", e.message);

        let empty = tempfile::tempdir().expect("a temporary directory");
        assert!(read_dir(empty.path()).is_err());
    }

    #[test]
    fn the_up_file_of_a_version_is_found_by_its_number() {
        let files = BTreeMap::from([
            (
                "0000000002_customers.up.sql".to_string(),
                b"CREATE TABLE c ();".to_vec(),
            ),
            (
                "0000000002_customers.down.sql".to_string(),
                b"DROP TABLE c;".to_vec(),
            ),
            ("0000000003_x.up.sql".to_string(), b"SELECT 3;".to_vec()),
        ]);
        assert_eq!(up_sql(&files, 2).as_deref(), Some("CREATE TABLE c ();"));
        assert_eq!(up_sql(&files, 3).as_deref(), Some("SELECT 3;"));
        assert_eq!(up_sql(&files, 4), None);
    }

    fn sample() -> PreviewView {
        PreviewView {
            resource: "PtahSchema app/orders".into(),
            content_digest: format!("sha256:{}", "a".repeat(64)),
            files: 1,
            findings: vec!["destructive: yes (it drops or narrows what exists)".into()],
            statements: vec![Statement {
                sql: "DROP TABLE audit;".into(),
                severity: "destructive".into(),
            }],
            versions: vec![],
            verdict: "Refused".into(),
            reason: Some("DestructiveChangesDisabled".into()),
            message: "the previewed plan is destructive".into(),
            exit_code: 3,
        }
    }

    #[test]
    fn the_text_and_the_markdown_name_the_statements_and_the_verdict() {
        let v = sample();
        let text = render(&v);
        assert!(text.contains("DROP TABLE audit;"));
        assert!(text.ends_with(
            "Verdict: Refused (DestructiveChangesDisabled): the previewed plan is destructive\n"
        ));
        let md = markdown(&v);
        assert!(md.starts_with("### ⛔ Ptah plan preview: PtahSchema app/orders"));
        assert!(md.contains("```sql\n-- 1 (destructive)\nDROP TABLE audit;\n```"));
        assert!(md.contains("**Refused (DestructiveChangesDisabled):"));
    }
}
