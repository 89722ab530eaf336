//! `kubectl ptah history KIND/NAME`: the lifecycle journal as a table, with
//! how far back it is complete (`coveredSince`).

use operator::api::journal::JournalEntry;
use serde::Serialize;

use crate::resource::{Resource, spelled, when};
use crate::stages::short;

/// The journal as the verb shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryView {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub covered_since: Option<String>,
    pub entries: Vec<JournalEntry>,
}

pub fn view(r: &Resource) -> HistoryView {
    HistoryView {
        kind: r.kind().api_kind(),
        namespace: r.namespace(),
        name: r.name(),
        covered_since: r.covered_since().map(when),
        entries: r.journal().to_vec(),
    }
}

/// What an entry says beyond its type, plan and outcome, in one cell.
fn detail(e: &JournalEntry) -> String {
    let mut d = Vec::new();
    if let Some(a) = &e.approval_name {
        let who = e
            .approver
            .as_ref()
            .map(|i| format!(" by {}", i.username))
            .unwrap_or_default();
        d.push(format!("approval {a}{who}"));
    }
    if let Some(a) = &e.authorization {
        d.push(format!("authorized by {}", spelled(a)));
    }
    if let Some(r) = &e.replaced {
        d.push(format!("replaced {r}"));
    }
    if e.approval_required == Some(true) {
        d.push("approval required".to_string());
    }
    if let Some(j) = &e.job_name {
        d.push(format!("Job {j}"));
    }
    if let Some(op) = &e.operation {
        d.push(format!("{} failed", spelled(op)));
    }
    if let Some(n) = e.count.filter(|n| *n > 1) {
        let last = e
            .last_time
            .as_ref()
            .map(|t| format!(", last at {}", when(t)))
            .unwrap_or_default();
        d.push(format!("{n} times{last}"));
    }
    if let Some(n) = e.applied_count {
        d.push(format!("{n} version(s) applied"));
    }
    if let Some(f) = &e.failure {
        d.push(format!("stopped at version {}", f.version));
    }
    if let Some(s) = &e.started_at {
        let secs = e.time.0.as_second() - s.0.as_second();
        d.push(format!("took {secs}s"));
    }
    if let Some(a) = &e.acknowledgment_name {
        let who = e
            .acknowledged_by
            .as_ref()
            .map(|i| format!(" by {}", i.username))
            .unwrap_or_default();
        d.push(format!("acknowledgment {a}{who}"));
    }
    if let Some(op) = &e.operation_id {
        d.push(format!("operation {}", short(op)));
    }
    d.join("; ")
}

/// The journal's entries as rows: time, type, plan, outcome, reason, detail.
pub fn rows(v: &HistoryView) -> Vec<[String; 6]> {
    v.entries
        .iter()
        .map(|e| {
            [
                when(&e.time),
                spelled(&e.type_),
                e.plan_name.clone().unwrap_or_else(|| "-".into()),
                e.outcome.as_ref().map_or("-".to_string(), spelled),
                e.reason.as_ref().map_or("-".to_string(), spelled),
                detail(e),
            ]
        })
        .collect()
}

pub fn render(v: &HistoryView) -> String {
    let mut out = format!(
        "Journal of {} {}/{}: complete since {}\n",
        v.kind,
        v.namespace,
        v.name,
        v.covered_since.as_deref().unwrap_or("(no entries yet)")
    );
    let header = ["TIME", "TYPE", "PLAN", "OUTCOME", "REASON", "DETAIL"].map(String::from);
    out.push_str(&crate::output::table(&header, &rows(v)));
    out
}
