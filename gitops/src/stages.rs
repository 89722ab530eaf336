//! `kubectl ptah schema NAME` / `migration NAME`: the resource through its
//! six stages (Source, Plan, Decision, Execution, Verification, History),
//! what happens next and what a person can do. Pure: built from the object.

use operator::api::common::ApplyPolicy;
use operator::api::{PtahMigration, PtahSchema};
use serde::Serialize;

use crate::resource::{Resource, spelled, when};

/// One stage as the overview shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Stage {
    pub stage: &'static str,
    /// One line: where the stage stands.
    pub state: String,
    /// Further lines (identities, digests, times).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<String>,
}

/// The whole overview.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Overview {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub phase: Option<String>,
    pub reason: String,
    pub message: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub stages: Vec<Stage>,
    /// What happens next, and the commands a person can run.
    pub next: Vec<String>,
}

fn stage(stage: &'static str, state: impl Into<String>, detail: Vec<String>) -> Stage {
    Stage {
        stage,
        state: state.into(),
        detail,
    }
}

/// The overview of `r`.
pub fn overview(r: &Resource) -> Overview {
    let (reason, message) = r.verdict();
    let stages = match r {
        Resource::Schema(s) => schema_stages(s),
        Resource::Migration(m) => migration_stages(m),
    };
    let mut stages = stages;
    stages.push(history_stage(r));
    Overview {
        kind: r.kind().api_kind(),
        namespace: r.namespace(),
        name: r.name(),
        phase: r.phase(),
        reason,
        message,
        generation: r.generation(),
        observed_generation: r.observed_generation(),
        stages,
        next: next(r),
    }
}

fn source_stage(status_source: Option<&operator::api::source::SourceStatus>) -> Stage {
    let Some(src) = status_source else {
        return stage("Source", "not resolved yet", vec![]);
    };
    let mut detail = Vec::new();
    if let Some(cm) = &src.config_map {
        detail.push(format!(
            "ConfigMap {} (UID {}), snapshot {}",
            cm.name, cm.uid, cm.snapshot_name
        ));
    }
    if let Some(git) = &src.git {
        let path = git
            .path
            .as_deref()
            .map(|p| format!(", path {p}"))
            .unwrap_or_default();
        detail.push(format!(
            "Git {} {}{path}, commit {}",
            git.url, git.git_ref, git.commit
        ));
    }
    if let Some(oci) = &src.oci {
        detail.push(format!(
            "OCI {} → {}",
            oci.requested_reference, oci.resolved_reference
        ));
    }
    if let Some(v) = &src.verification {
        let signer = match (&v.signer_identity, &v.key_fingerprint) {
            (Some(id), _) => format!("signed by {} (issuer {})", id.subject, id.issuer),
            (None, Some(key)) => format!("signed by key {key}"),
            (None, None) => "verified".to_string(),
        };
        let at = v
            .verified_at
            .as_ref()
            .map(|t| format!(" at {}", when(t)))
            .unwrap_or_default();
        detail.push(format!("verified: {signer}{at}"));
    }
    if let Some(t) = &src.resolved_at {
        detail.push(format!("resolved at {}", when(t)));
    }
    stage(
        "Source",
        format!("{} {}", spelled(&src.kind), src.revision),
        detail,
    )
}

fn operation_detail(op: &operator::api::status::ActiveOperation) -> Vec<String> {
    let mut d = vec![format!(
        "{} operation {} (attempt {}) since {}",
        spelled(&op.type_),
        short(&op.operation_id),
        op.attempt,
        when(&op.started_at)
    )];
    if let Some(job) = &op.job_name {
        d.push(format!("Job {job}"));
    }
    if let Some(t) = &op.retry_not_before {
        d.push(format!("retries at {}", when(t)));
    }
    d
}

/// The Decision stage where no approval was consumed: `apply` and whether
/// the plan (if any) asked for a person.
fn decision(apply: ApplyPolicy, approval_required: Option<bool>, carried_out: &str) -> Stage {
    let policy = spelled(&apply);
    let state = match approval_required {
        None => format!("nothing to decide (apply: {policy})"),
        Some(_) if apply == ApplyPolicy::Never => {
            format!("apply: Never: the plan is recorded and not {carried_out}")
        }
        Some(true) => format!("waits for a person's approval of this exact plan (apply: {policy})"),
        Some(false) => format!("no approval needed (apply: {policy})"),
    };
    stage("Decision", state, vec![])
}

/// The Execution stage while an operation runs.
fn running(op: &operator::api::status::ActiveOperation) -> Stage {
    stage(
        "Execution",
        format!("{} running", spelled(&op.type_)),
        operation_detail(op),
    )
}

/// One drift finding, in one line.
pub fn drift(f: &operator::api::schema::DriftFinding) -> String {
    format!(
        "drift: {} × {} ({})",
        spelled(&f.category),
        f.count,
        spelled(&f.severity)
    )
}

/// `sha256:0123456789ab…`: enough to tell digests apart on a terminal.
pub fn short(digest: &str) -> String {
    let cut = digest.find(':').map_or(0, |i| i + 1) + 12;
    if digest.len() > cut {
        format!("{}…", &digest[..cut])
    } else {
        digest.to_string()
    }
}

fn schema_stages(s: &PtahSchema) -> Vec<Stage> {
    let st = s.status.clone().unwrap_or_default();
    let mut out = vec![source_stage(st.source.as_ref())];
    // Plan
    out.push(match &st.plan {
        Some(p) => {
            let mut state = format!(
                "{}: {} statement(s){}",
                p.name,
                p.statement_count.unwrap_or(0),
                if p.destructive { ", destructive" } else { "" }
            );
            if !p.privilege_changes.is_empty() {
                let kinds: Vec<String> = p.privilege_changes.iter().map(spelled).collect();
                state.push_str(&format!(", privilege changes: {}", kinds.join(", ")));
            }
            let mut detail = vec![format!("fingerprint {}", p.fingerprint)];
            if let Some(t) = &p.created_at {
                detail.push(format!("published at {}", when(t)));
            }
            stage("Plan", state, detail)
        }
        None => {
            let state = match &st.target {
                Some(t) if t.last_observed_at.is_some() => {
                    "no plan: the database matches the source".to_string()
                }
                _ => "no plan yet".to_string(),
            };
            stage("Plan", state, vec![])
        }
    });
    // Decision
    let approved = st.plan.as_ref().and_then(|p| p.approval.as_ref());
    out.push(match approved {
        Some(a) => {
            let who = a
                .approver
                .as_ref()
                .map_or("?".to_string(), |i| i.username.clone());
            let at = a
                .approved_at
                .as_ref()
                .map(|t| format!(" at {}", when(t)))
                .unwrap_or_default();
            stage(
                "Decision",
                format!("approved by {who}{at}"),
                vec![format!("approval {} (UID {})", a.name, a.uid)],
            )
        }
        None => decision(
            s.spec.policy.apply,
            st.plan.as_ref().map(|p| p.approval_required),
            "applied",
        ),
    });
    // Execution
    out.push(match (&st.active_operation, &st.applied) {
        (Some(op), _) => running(op),
        (None, Some(a)) => {
            let by = match &a.approval {
                Some(ap) => format!(
                    ", approved by {}",
                    ap.approver.as_ref().map_or("?", |i| i.username.as_str())
                ),
                None => a
                    .authorization
                    .as_ref()
                    .map(|x| format!(", by {}", spelled(x)))
                    .unwrap_or_default(),
            };
            stage(
                "Execution",
                format!(
                    "last Apply ran plan {} at {}{by}",
                    a.plan_name,
                    when(&a.completed_at)
                ),
                a.job_name.iter().map(|j| format!("Job {j}")).collect(),
            )
        }
        (None, None) => stage("Execution", "no Apply has run", vec![]),
    });
    // Verification
    let insync = s
        .status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| spelled(&c.type_) == "InSync"))
        .map(|c| (spelled(&c.status), spelled(&c.reason), c.message.clone()));
    let mut detail = Vec::new();
    if let Some(t) = &st.target {
        if let Some(at) = &t.last_observed_at {
            detail.push(format!("database read at {}", when(at)));
        }
        detail.extend(t.drift_findings.iter().map(drift));
    }
    if let Some(p) = &st.pending_observation {
        detail.push(format!(
            "proof owed for the Apply of plan {} ({})",
            p.plan_name,
            spelled(&p.outcome)
        ));
    }
    let state = match insync {
        Some((status, reason, msg)) if msg.is_empty() => format!("InSync={status} ({reason})"),
        Some((status, reason, msg)) => format!("InSync={status} ({reason}): {msg}"),
        None => "not read yet".to_string(),
    };
    out.push(stage("Verification", state, detail));
    out
}

fn migration_stages(m: &PtahMigration) -> Vec<Stage> {
    let st = m.status.clone().unwrap_or_default();
    let mut out = vec![source_stage(st.source.as_ref())];
    out.push(match &st.plan {
        Some(p) => {
            let range = match (p.from_version, p.to_version) {
                (Some(f), Some(t)) => format!("versions after {f} up to {t}"),
                (None, Some(t)) => format!("up to version {t}"),
                _ => "pending versions".to_string(),
            };
            stage(
                "Plan",
                format!("{}: {} step(s), {range}", p.name, p.steps.unwrap_or(0)),
                vec![format!("fingerprint {}", p.fingerprint)],
            )
        }
        None => stage("Plan", "no plan: nothing pending", vec![]),
    });
    out.push(decision(
        m.spec.policy.apply,
        st.plan.as_ref().map(|p| p.approval_required),
        "run",
    ));
    out.push(match (&st.active_operation, &st.last_run) {
        (Some(op), _) => running(op),
        (None, Some(run)) => {
            let mut detail = Vec::new();
            if let Some(j) = &run.job_name {
                detail.push(format!("Job {j}"));
            }
            if let Some(who) = &run.approver {
                detail.push(format!("approved by {}", who.username));
            }
            if let Some(f) = &run.failure {
                let mut at = format!("failed at version {}", f.version);
                if let Some(p) = f.statement_position {
                    at.push_str(&format!(", statement {p}"));
                }
                if let Some(s) = &f.sqlstate {
                    at.push_str(&format!(", SQLSTATE {s}"));
                }
                if let Some(e) = f.mysql_errno {
                    at.push_str(&format!(", errno {e}"));
                }
                detail.push(at);
            }
            let versions: Vec<String> = run.applied_versions.iter().map(i64::to_string).collect();
            stage(
                "Execution",
                format!(
                    "last run {}: applied [{}]{}",
                    spelled(&run.outcome),
                    versions.join(", "),
                    run.finished_at
                        .as_ref()
                        .map(|t| format!(" at {}", when(t)))
                        .unwrap_or_default()
                ),
                detail,
            )
        }
        (None, None) => stage("Execution", "no run yet", vec![]),
    });
    let mut detail = Vec::new();
    let state = match &st.history {
        Some(h) => {
            if let Some(at) = &h.observed_at {
                detail.push(format!("history read at {}", when(at)));
            }
            for (what, list) in [
                ("modified", &h.modified_versions),
                ("out of order", &h.out_of_order_versions),
                ("ahead of the source", &h.ahead_versions),
            ] {
                if !list.is_empty() {
                    let v: Vec<String> = list.iter().map(i64::to_string).collect();
                    detail.push(format!("{what}: {}", v.join(", ")));
                }
            }
            format!(
                "at version {}, {} applied, {} pending{}",
                h.current_version
                    .map_or("none".to_string(), |v| v.to_string()),
                h.applied_count.unwrap_or(0),
                h.pending_count.unwrap_or(0),
                if h.dirty {
                    ", a dirty revision row"
                } else {
                    ""
                }
            )
        }
        None => "history not read yet".to_string(),
    };
    if let Some(u) = &st.unresolved_run {
        detail.push(format!(
            "unresolved run {} ({}) holds the resource until acknowledged",
            short(&u.operation_id),
            spelled(&u.outcome)
        ));
    }
    out.push(stage("Verification", state, detail));
    out
}

fn history_stage(r: &Resource) -> Stage {
    let journal = r.journal();
    let since = r
        .covered_since()
        .map(|t| format!(" since {}", when(t)))
        .unwrap_or_default();
    let detail = journal
        .last()
        .map(|e| {
            vec![format!(
                "newest: {} at {}",
                spelled(&e.type_),
                when(&e.time)
            )]
        })
        .unwrap_or_default();
    stage(
        "History",
        format!(
            "{} journal entr{}{since}",
            journal.len(),
            if journal.len() == 1 { "y" } else { "ies" }
        ),
        detail,
    )
}

/// What happens next, and the commands a person can run.
pub fn next(r: &Resource) -> Vec<String> {
    let who = r.cli_name();
    let (reason, message) = r.verdict();
    let mut out = Vec::new();
    if !r.observed_current() && r.generation().is_some() {
        out.push(format!(
            "the manager has not observed generation {} yet",
            r.generation().unwrap_or_default()
        ));
    }
    match r.phase().as_deref() {
        None => out.push("the manager has not read this resource yet".to_string()),
        Some("AwaitingApproval") => {
            out.push(format!("read the plan: kubectl ptah plan {who}"));
            out.push(format!("approve it: kubectl ptah approve {who} --wait"));
        }
        Some("InSync") => {
            out.push("nothing to do: the database matches the source".to_string());
            if let Some(at) = next_read(r) {
                out.push(format!(
                    "next read at {at}; read now: kubectl ptah refresh {who}"
                ));
            }
        }
        Some("Blocked") => {
            out.push(format!(
                "blocked ({reason}){}",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                }
            ));
            if reason == "TargetIdentityChanged" {
                out.push("put the database Secret back, or settle the proof with the settled-apply annotation (docs/executor.md)".to_string());
            } else {
                out.push("fix the input it names (spec, source, policy or database); the next read picks it up".to_string());
                out.push(format!("read now: kubectl ptah refresh {who}"));
            }
        }
        Some("Failed") => {
            out.push(format!(
                "failed ({reason}){}",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                }
            ));
            if let Some(t) = r
                .active_operation()
                .and_then(|o| o.retry_not_before.as_ref())
            {
                out.push(format!("retries at {}", when(t)));
            }
            out.push(format!("attempts so far: kubectl ptah history {who}"));
        }
        Some("Suspended") => {
            out.push("spec.suspend is true: set it to false to resume".to_string())
        }
        Some("Planning") if reason == "ApplyDisabled" => {
            out.push(
                "apply: Never: the plan is recorded for a person to run; nothing will run it here"
                    .to_string(),
            );
        }
        Some(phase) => out.push(format!(
            "{phase}: wait for the verdict: kubectl ptah wait {who}"
        )),
    }
    if let Resource::Migration(m) = r
        && let Some(u) = m.status.as_ref().and_then(|s| s.unresolved_run.as_ref())
    {
        out.push(format!(
            "acknowledge the unresolved run (operation {}, Job {}) with a PtahMigrationRunAcknowledgment once the database is checked",
            u.operation_id,
            u.job_name.as_deref().unwrap_or("?")
        ));
    }
    out
}

fn next_read(r: &Resource) -> Option<String> {
    match r {
        Resource::Schema(s) => s
            .status
            .as_ref()?
            .next_reconciliation_time
            .as_ref()
            .map(when),
        Resource::Migration(m) => m
            .status
            .as_ref()?
            .next_reconciliation_time
            .as_ref()
            .map(when),
    }
}

/// The overview as a terminal shows it.
pub fn render(o: &Overview) -> String {
    let mut out = String::new();
    let phase = o.phase.as_deref().unwrap_or("(no phase yet)");
    out.push_str(&format!("{} {}/{}: {phase}", o.kind, o.namespace, o.name));
    if !o.reason.is_empty() {
        out.push_str(&format!(" ({})", o.reason));
    }
    if !o.message.is_empty() {
        out.push_str(&format!(": {}", o.message));
    }
    out.push('\n');
    out.push('\n');
    for s in &o.stages {
        out.push_str(&format!("{:<13} {}\n", s.stage, s.state));
        for d in &s.detail {
            out.push_str(&format!("{:<13}   {d}\n", ""));
        }
    }
    out.push_str("\nNext:\n");
    for n in &o.next {
        out.push_str(&format!("  {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(status: serde_json::Value) -> Resource {
        crate::fixtures::resource(crate::resource::Kind::Schema, 2, status)
    }

    #[test]
    fn digests_shorten_after_the_algorithm() {
        assert_eq!(short("sha256:0123456789abcdef0123"), "sha256:0123456789ab…");
        assert_eq!(short("abc"), "abc");
    }

    #[test]
    fn a_new_resource_says_it_was_not_read() {
        let r = schema(serde_json::json!({}));
        let o = overview(&r);
        assert_eq!(o.stages.len(), 6);
        let names: Vec<_> = o.stages.iter().map(|s| s.stage).collect();
        assert_eq!(
            names,
            [
                "Source",
                "Plan",
                "Decision",
                "Execution",
                "Verification",
                "History"
            ]
        );
        assert!(
            o.next.iter().any(|n| n.contains("has not read")),
            "{:?}",
            o.next
        );
    }

    #[test]
    fn awaiting_approval_names_plan_and_approve_commands() {
        let r = schema(serde_json::json!({
            "observedGeneration": 2,
            "phase": "AwaitingApproval",
            "plan": {"name": "orders-0123456789ab", "uid": "p1", "fingerprint": "sha256:00", "statementCount": 2, "approvalRequired": true},
        }));
        let o = overview(&r);
        assert!(
            o.stages[2].state.contains("waits for a person's approval"),
            "{:?}",
            o.stages[2]
        );
        assert!(
            o.next
                .iter()
                .any(|n| n == "approve it: kubectl ptah approve schema/orders -n app --wait"),
            "{:?}",
            o.next
        );
        let text = render(&o);
        assert!(
            text.starts_with("PtahSchema app/orders: AwaitingApproval"),
            "{text}"
        );
    }

    #[test]
    fn an_unobserved_generation_is_said() {
        let r = schema(serde_json::json!({"observedGeneration": 1, "phase": "InSync"}));
        assert!(
            next(&r)[0].contains("not observed generation 2"),
            "{:?}",
            next(&r)
        );
    }
}
