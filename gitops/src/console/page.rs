//! The console's pages, rendered on the server from the same views
//! `kubectl ptah` prints (the six stages, the plan, the journal, the trace).
//! Pure: every page is built from values, so each is unit-tested. No page
//! carries a script; the stylesheet is the console's own file.

use maud::{DOCTYPE, Markup, html};

use crate::history::{self, HistoryView};
use crate::plan::PlanView;
use crate::stages::Overview;

/// The signed-in viewer, as the page header shows them.
pub struct Who<'a> {
    pub username: &'a str,
    /// The CSRF token every form on the page carries.
    pub csrf: &'a str,
}

/// One row of the list.
pub struct Row {
    pub kind: &'static str,
    /// `schema` or `migration`: the resource page's path segment.
    pub word: &'static str,
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub reason: String,
    /// What the resource waits on, or why it stopped.
    pub message: String,
    pub revision: String,
}

/// The path of a resource's page.
pub fn path(namespace: &str, word: &str, name: &str) -> String {
    format!("/{namespace}/{word}/{name}")
}

fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// Every page: the header with who is signed in, and the body.
pub fn layout(
    title: &str,
    who: Option<&Who>,
    refresh_seconds: Option<u32>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(s) = refresh_seconds {
                    meta http-equiv="refresh" content=(s);
                }
                title { (title) " · Ptah console" }
                link rel="stylesheet" href="/static/console.css";
            }
            body {
                header {
                    a.home href="/" { "Ptah console" }
                    @if let Some(w) = who {
                        span.who { "signed in as " strong #viewer { (w.username) } }
                        form.inline method="post" action="/logout" {
                            (csrf_field(w.csrf))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sign-in form: a bearer token, posted, never put in a URL.
pub fn sign_in(error: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        None,
        html! {
            h1 { "Sign in" }
            p {
                "The console acts as you: paste a Kubernetes bearer token (for example "
                code { "kubectl create token NAME" }
                " or your OIDC ID token). Kubernetes RBAC and admission decide every read and every action, exactly as for "
                code { "kubectl ptah" } "."
            }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            form method="post" action="/login" {
                label for="token" { "Bearer token" }
                input #token type="password" name="token" autocomplete="off" required;
                button #sign-in type="submit" { "Sign in" }
            }
        },
    )
}

fn phase_class(phase: &str) -> &'static str {
    match phase {
        "InSync" => "phase ok",
        "Blocked" | "Failed" => "phase bad",
        "AwaitingApproval" => "phase wait",
        _ => "phase",
    }
}

/// The list of PtahSchemas and PtahMigrations.
pub fn list(who: &Who, namespace: Option<&str>, rows: &[Row], error: Option<&str>) -> Markup {
    layout(
        "Schemas and migrations",
        Some(who),
        None,
        html! {
            h1 { "Schemas and migrations" }
            form.inline method="get" action="/" {
                label for="namespace" { "Namespace" }
                input #namespace type="text" name="namespace" value=(namespace.unwrap_or(""))
                    placeholder="all you may list";
                button type="submit" { "Show" }
            }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            @if rows.is_empty() && error.is_none() {
                p { "None here." }
            } @else if !rows.is_empty() {
                table.list {
                    thead { tr { th { "Kind" } th { "Namespace" } th { "Name" } th { "Phase" } th { "Reason" } th { "Waits on / says" } th { "Revision" } } }
                    tbody {
                        @for r in rows {
                            tr {
                                td { (r.kind) }
                                td { (r.namespace) }
                                td { a href=(path(&r.namespace, r.word, &r.name)) { (r.name) } }
                                td { span class=(phase_class(&r.phase)) { (r.phase) } }
                                td { (r.reason) }
                                td.message { (r.message) }
                                td.mono { (r.revision) }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The approval a viewer may make: the plan shown, by UID and fingerprint.
pub struct ApproveForm {
    pub plan: String,
    pub uid: String,
    pub fingerprint: String,
}

/// The acknowledgment a viewer may make of an unresolved run.
pub struct AcknowledgeForm {
    pub operation_id: String,
    /// `Partial` or `Unknown`.
    pub outcome: String,
}

/// A resource's page.
pub struct ResourcePage<'a> {
    pub overview: &'a Overview,
    /// `schema` or `migration`.
    pub word: &'static str,
    /// The current plan, or why it could not be read; `None` without one.
    pub plan: Option<Result<&'a PlanView, String>>,
    /// The engine speaks PostgreSQL (else MySQL/MariaDB), for highlighting.
    pub postgres: bool,
    pub history: &'a HistoryView,
    /// Shown only when RBAC lets the viewer create the approval.
    pub approve: Option<ApproveForm>,
    /// A migration's unresolved run to acknowledge: shown only when RBAC
    /// lets the viewer create the acknowledgment.
    pub acknowledge: Option<AcknowledgeForm>,
    /// Shown only when RBAC lets the viewer patch the resource.
    pub can_request_read: bool,
    /// Whether a tracing backend is configured (the change path is drawn).
    pub traces: bool,
    /// What the last action did.
    pub notice: Option<String>,
}

fn pairs(rows: &[(String, String)]) -> Markup {
    html! {
        dl {
            @for (k, v) in rows { dt { (k) } dd.mono { (v) } }
        }
    }
}

fn plan_section(p: &PlanView, postgres: bool) -> Markup {
    html! {
        p { (p.kind) " " strong.mono #plan-name { (p.name) } " · fingerprint " span.mono { (p.fingerprint) } }
        @if !p.findings.is_empty() {
            h3 { "Findings" }
            ul.findings #findings { @for f in &p.findings { li { (f) } } }
        }
        @if !p.provenance.is_empty() {
            h3 { "Provenance" }
            div #provenance { (pairs(&p.provenance)) }
        }
        @if !p.statements.is_empty() {
            h3 { "SQL" }
            @for s in &p.statements {
                div class=(format!("statement {}", s.severity.to_ascii_lowercase())) {
                    span.severity { (s.severity) }
                    pre.sql { code { (super::sql::highlight(&s.sql, postgres)) } }
                }
            }
        }
        @if !p.versions.is_empty() {
            h3 { "Versions" }
            table {
                thead { tr { th { "Version" } th { "Description" } th { "Checksum" } } }
                tbody {
                    @for v in &p.versions {
                        tr { td { (v.version) } td { (v.description.as_deref().unwrap_or("")) } td.mono { (v.checksum) } }
                    }
                }
            }
        }
        h3 { "Identity and source" }
        (pairs(&p.identity))
        (pairs(&p.source))
    }
}

/// Whether a page in `phase` is worth reloading by itself: something is
/// under way and the viewer waits on it.
fn moving(phase: Option<&str>) -> bool {
    !matches!(
        phase,
        Some("InSync" | "Blocked" | "Failed" | "AwaitingApproval" | "Suspended")
    )
}

pub fn resource_page(who: &Who, page: &ResourcePage) -> Markup {
    let o = page.overview;
    let here = path(&o.namespace, page.word, &o.name);
    let phase = o.phase.as_deref().unwrap_or("not read yet");
    let refresh = moving(o.phase.as_deref()).then_some(5);
    layout(
        &format!("{} {}/{}", o.kind, o.namespace, o.name),
        Some(who),
        refresh,
        html! {
            h1 { (o.kind) " " (o.namespace) "/" (o.name) }
            p.verdict {
                span #phase class=(phase_class(phase)) { (phase) }
                @if !o.reason.is_empty() { " " span #reason { (o.reason) } }
                @if !o.message.is_empty() { ": " span #message { (o.message) } }
            }
            @if let Some(n) = &page.notice { p.notice role="status" #notice { (n) } }
            @if page.approve.is_some() || page.acknowledge.is_some() || page.can_request_read {
                div.actions {
                    @if let Some(a) = &page.approve {
                        form.inline method="post" action=(format!("{here}/approve")) {
                            (csrf_field(who.csrf))
                            input type="hidden" name="plan" value=(a.plan);
                            input type="hidden" name="uid" value=(a.uid);
                            input type="hidden" name="fingerprint" value=(a.fingerprint);
                            button #approve type="submit" { "Approve plan " (a.plan) }
                        }
                    }
                    @if let Some(a) = &page.acknowledge {
                        form.inline method="post" action=(format!("{here}/acknowledge")) {
                            (csrf_field(who.csrf))
                            input type="hidden" name="operation" value=(a.operation_id);
                            span { "The last run is " (a.outcome) ": acknowledge it only once you have established what it did." }
                            button #acknowledge type="submit" { "Acknowledge run " (crate::stages::short(&a.operation_id)) }
                        }
                    }
                    @if page.can_request_read {
                        form.inline method="post" action=(format!("{here}/refresh")) {
                            (csrf_field(who.csrf))
                            button #request-read type="submit" { "Request a read" }
                        }
                    }
                }
            }
            h2 { "Stages" }
            ol.stages {
                @for s in &o.stages {
                    li {
                        strong { (s.stage) } " " (s.state)
                        @if !s.detail.is_empty() {
                            ul { @for d in &s.detail { li.mono { (d) } } }
                        }
                    }
                }
            }
            @if !o.next.is_empty() {
                h2 { "Next" }
                ul { @for n in &o.next { li { (n) } } }
            }
            h2 { "Plan" }
            @match &page.plan {
                None => p { "No current plan." },
                Some(Err(e)) => p.error { (e) },
                Some(Ok(p)) => (plan_section(p, page.postgres)),
            }
            @if page.traces {
                h2 { "Change path" }
                img.trace src=(format!("{here}/trace.svg")) alt="The change's spans, from the tracing backend";
            }
            h2 { "Journal" }
            p { "Complete since " (page.history.covered_since.as_deref().unwrap_or("(no entries yet)")) "." }
            table.journal {
                thead { tr { th { "Time" } th { "Type" } th { "Plan" } th { "Outcome" } th { "Reason" } th { "Detail" } } }
                tbody {
                    @for row in history::rows(page.history) {
                        tr { @for cell in &row { td { (cell) } } }
                    }
                }
            }
        },
    )
}

/// A refusal or an error, with the HTTP status it is sent under.
pub fn refusal(who: Option<&Who>, status: u16, message: &str, back: Option<&str>) -> Markup {
    let title = match status {
        403 => "Not allowed",
        404 => "Not found",
        409 => "Not done",
        _ => "Error",
    };
    layout(
        title,
        who,
        None,
        html! {
            h1 { (title) }
            p.error role="alert" #refusal { (message) }
            @if let Some(b) = back { p { a href=(b) { "Back" } } }
        },
    )
}

/// The stylesheet, served as `/static/console.css`.
pub const STYLESHEET: &str = include_str!("console.css");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::resource;
    use crate::resource::Kind;
    use serde_json::json;

    fn who() -> Who<'static> {
        Who {
            username: "system:serviceaccount:app:reviewer",
            csrf: "c0ffee",
        }
    }

    fn awaiting() -> crate::resource::Resource {
        resource(
            Kind::Schema,
            1,
            json!({"observedGeneration": 1, "phase": "AwaitingApproval",
                   "plan": {"name": "orders-1", "uid": "p1", "fingerprint": "sha256:f"}}),
        )
    }

    fn page<'a>(
        o: &'a Overview,
        h: &'a HistoryView,
        approve: Option<ApproveForm>,
    ) -> ResourcePage<'a> {
        ResourcePage {
            overview: o,
            word: "schema",
            plan: None,
            postgres: true,
            history: h,
            approve,
            acknowledge: None,
            can_request_read: false,
            traces: false,
            notice: None,
        }
    }

    #[test]
    fn the_approve_button_is_there_only_when_the_form_is() {
        let r = awaiting();
        let o = crate::stages::overview(&r);
        let h = crate::history::view(&r);
        let form = ApproveForm {
            plan: "orders-1".into(),
            uid: "p1".into(),
            fingerprint: "sha256:f".into(),
        };
        let with = resource_html(&page(&o, &h, Some(form)));
        assert!(with.contains(r#"id="approve""#));
        assert!(with.contains(r#"action="/app/schema/orders/approve""#));
        assert!(with.contains(r#"name="csrf" value="c0ffee""#));
        assert!(with.contains(r#"name="uid" value="p1""#));
        let without = resource_html(&page(&o, &h, None));
        assert!(!without.contains(r#"id="approve""#));
        assert!(!without.contains("/approve"));
    }

    fn resource_html(p: &ResourcePage) -> String {
        resource_page(&who(), p).into_string()
    }

    #[test]
    fn an_unresolved_run_is_acknowledged_by_its_operation() {
        let r = resource(Kind::Migration, 1, json!({"phase": "Blocked"}));
        let o = crate::stages::overview(&r);
        let h = crate::history::view(&r);
        let mut p = page(&o, &h, None);
        p.word = "migration";
        p.acknowledge = Some(AcknowledgeForm {
            operation_id: format!("sha256:{}", "d".repeat(64)),
            outcome: "Unknown".into(),
        });
        let html = resource_html(&p);
        assert!(html.contains(r#"action="/app/migration/orders/acknowledge""#));
        assert!(html.contains(&format!(
            r#"name="operation" value="sha256:{}""#,
            "d".repeat(64)
        )));
        assert!(html.contains("The last run is Unknown"));
        p.acknowledge = None;
        assert!(!resource_html(&p).contains("acknowledge"));
    }

    #[test]
    fn a_page_carries_no_script_and_escapes_what_it_shows() {
        let r = resource(
            Kind::Schema,
            1,
            json!({"observedGeneration": 1, "phase": "Failed",
                   "conditions": [{"type": "Ready", "status": "False", "reason": "OperationFailed",
                     "message": "<script>alert(1)</script>", "lastTransitionTime": "2026-12-06T00:00:00Z"}]}),
        );
        let o = crate::stages::overview(&r);
        let h = crate::history::view(&r);
        let html = resource_html(&page(&o, &h, None));
        assert!(!html.contains("<script"), "{html}");
        assert!(
            !html.contains("http-equiv=\"refresh\""),
            "a Failed page stays"
        );
        let moving = resource(Kind::Schema, 1, json!({"phase": "Applying"}));
        let o = crate::stages::overview(&moving);
        let html = resource_html(&page(&o, &h, None));
        assert!(html.contains("http-equiv=\"refresh\""));
    }

    #[test]
    fn the_list_links_each_resource_and_says_what_it_waits_on() {
        let rows = [Row {
            kind: "PtahSchema",
            word: "schema",
            namespace: "app".into(),
            name: "orders".into(),
            phase: "AwaitingApproval".into(),
            reason: "AwaitingApproval".into(),
            message: "plan orders-1 waits for an approval".into(),
            revision: "sha256:ab".into(),
        }];
        let html = list(&who(), Some("app"), &rows, None).into_string();
        assert!(html.contains(r#"href="/app/schema/orders""#));
        assert!(html.contains("plan orders-1 waits for an approval"));
        assert!(html.contains("system:serviceaccount:app:reviewer"));
    }

    #[test]
    fn the_sign_in_form_posts_the_token() {
        let html = sign_in(Some("the API server did not accept this token")).into_string();
        assert!(html.contains(r#"method="post" action="/login""#));
        assert!(html.contains(r#"type="password""#));
        assert!(html.contains("did not accept"));
    }
}
