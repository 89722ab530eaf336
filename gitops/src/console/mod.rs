//! The web console (`ptah-console`): PtahSchemas and PtahMigrations, their
//! six stages, plans, journals and change paths in a browser, and the
//! actions a reviewer takes (approve a plan, request a read), each made as
//! the viewer.
//!
//! The console has no privilege of its own: it holds no Kubernetes
//! credentials, and every read and every write goes to the API server with
//! the viewer's bearer token (see `session`). So RBAC and the admission
//! stamps decide exactly as they do for `kubectl ptah`, and an approval made
//! here names the viewer. Pages are rendered on the server (`page`) from the
//! views `kubectl ptah` prints; no page carries a script, and every response
//! carries a Content-Security-Policy that allows none.

pub mod page;
pub mod session;
pub mod sql;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::config::AuthInfo;
use kube::{Client, Config};
use maud::{Markup, html};
use secrecy::SecretString;
use serde::Deserialize;

use crate::Failure;
use crate::plan::Which;
use crate::resource::{self, Kind, Resource, Target};
use crate::{approve, history, plan, refresh, stages, trace};
use page::{AcknowledgeForm, ApproveForm, ResourcePage, Row, Who};
use session::{Sessions, Viewer};

/// Every response's policy: no script, no inline style, nothing framed,
/// forms only to the console itself.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// How the console is run.
#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    /// The API server; without it, the kubeconfig's or the in-cluster one
    /// (its address and CA only: its credentials are dropped).
    pub api_server: Option<String>,
    /// The CA bundle of `api_server`.
    pub api_ca: Option<PathBuf>,
    /// The tracing backend's query API (Jaeger), to draw change paths.
    pub traces_url: Option<String>,
    /// Send the session cookie with `Secure` (the console behind HTTPS).
    pub secure_cookie: bool,
}

struct Inner {
    base: Config,
    sessions: Sessions,
    traces_url: Option<String>,
    secure_cookie: bool,
}

/// The console's state: where the API server is, and who is signed in.
#[derive(Clone)]
pub struct Console(Arc<Inner>);

/// The API server's address and CA from the settings, without any
/// credentials: the viewer's token is added per request.
pub async fn base_config(s: &Settings) -> anyhow::Result<Config> {
    let mut config = match &s.api_server {
        Some(url) => {
            let mut c = Config::new(
                url.parse()
                    .map_err(|e| anyhow::anyhow!("--api-server {url:?}: {e}"))?,
            );
            c.root_cert_file = s.api_ca.clone();
            c
        }
        None => Config::infer().await.map_err(|e| {
            anyhow::anyhow!("finding the API server (kubeconfig or in-cluster): {e}")
        })?,
    };
    config.auth_info = AuthInfo::default();
    config.headers.clear();
    Ok(config)
}

impl Console {
    pub fn new(base: Config, s: &Settings) -> std::io::Result<Self> {
        Ok(Console(Arc::new(Inner {
            base,
            sessions: Sessions::new()?,
            traces_url: s.traces_url.clone(),
            secure_cookie: s.secure_cookie,
        })))
    }

    /// The viewer of a request: the session cookie's, or the bearer token
    /// an authenticating proxy passed.
    fn viewer(&self, headers: &HeaderMap) -> Option<Viewer> {
        if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .filter(|t| !t.trim().is_empty())
        {
            return Some(self.0.sessions.bearer(SecretString::from(token.trim())));
        }
        let cookies = headers.get(header::COOKIE)?.to_str().ok()?;
        self.0.sessions.viewer(session::session_id(cookies)?)
    }

    /// A client that is the viewer.
    fn client(&self, v: &Viewer) -> Result<Client, Failure> {
        let mut config = self.0.base.clone();
        config.auth_info.token = Some(v.token.clone());
        Client::try_from(config).map_err(|e| Failure::error(format!("connecting: {e}")))
    }
}

/// The console's routes, with the security headers on every response.
pub fn router(console: Console) -> Router {
    Router::new()
        .route("/", get(list))
        .route("/login", get(sign_in_page).post(sign_in))
        .route("/logout", post(sign_out))
        .route("/static/console.css", get(stylesheet))
        .route("/healthz", get(|| async { "ok" }))
        .route("/{namespace}/{kind}/{name}", get(resource_page))
        .route("/{namespace}/{kind}/{name}/approve", post(approve_plan))
        .route("/{namespace}/{kind}/{name}/refresh", post(request_read))
        .route(
            "/{namespace}/{kind}/{name}/acknowledge",
            post(acknowledge_run),
        )
        .route("/{namespace}/{kind}/{name}/trace.svg", get(trace_svg))
        .layer(middleware::from_fn(secure_headers))
        .with_state(console)
}

/// Serves the console until the process is stopped.
pub async fn serve(s: Settings) -> anyhow::Result<()> {
    let console = Console::new(base_config(&s).await?, &s)?;
    let listener = tokio::net::TcpListener::bind(s.listen)
        .await
        .map_err(|e| anyhow::anyhow!("listening on {}: {e}", s.listen))?;
    tracing::info!(address = %listener.local_addr()?, "ptah-console serving");
    axum::serve(listener, router(console)).await?;
    Ok(())
}

/// The headers every response carries, and one log line a request: its
/// method, path and status (never its headers, query or body, which may
/// hold a token).
async fn secure_headers(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not no-referrer: under it a browser sends `Origin: null` with the
    // console's own forms, which the origin check refuses.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    tracing::info!(%method, path, status = res.status().as_u16(), "request");
    res
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        page::STYLESHEET,
    )
}

fn html_response(status: StatusCode, m: Markup) -> Response {
    (status, m).into_response()
}

/// Who the viewer is, as the API server authenticated them.
async fn username(client: &Client) -> Result<String, Failure> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|e| Failure::api("asking the API server who you are", e))?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_else(|| "(unnamed)".into()))
}

/// Whether RBAC lets the viewer `verb` `resource` (of our group) in `namespace`.
async fn may(client: &Client, namespace: &str, verb: &str, resource: &str) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.into()),
                verb: Some(verb.into()),
                group: Some(operator::api::GROUP.into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .ok()
        .and_then(|r| r.status)
        .is_some_and(|s| s.allowed)
}

/// The acknowledgments' plural.
const ACKNOWLEDGMENTS: &str = "ptahmigrationrunacknowledgments";

/// The HTTP status a verb's failure is sent under.
fn status_of(f: &Failure) -> StatusCode {
    match f.status {
        Some(401) => StatusCode::UNAUTHORIZED,
        Some(403) => StatusCode::FORBIDDEN,
        _ if f.code == crate::exit::NOT_FOUND => StatusCode::NOT_FOUND,
        // Admission refused it, or it conflicts with what is stored now.
        Some(400 | 409 | 422) => StatusCode::CONFLICT,
        _ => StatusCode::BAD_GATEWAY,
    }
}

/// A failure as a page; a token the API server no longer accepts signs the
/// viewer out.
fn failed(who: Option<&Who>, f: &Failure, back: Option<&str>) -> Response {
    let status = status_of(f);
    if status == StatusCode::UNAUTHORIZED {
        return Redirect::to("/login").into_response();
    }
    html_response(
        status,
        page::refusal(who, status.as_u16(), &f.message, back),
    )
}

fn refused(who: Option<&Who>, status: StatusCode, message: &str, back: &str) -> Response {
    html_response(
        status,
        page::refusal(who, status.as_u16(), message, Some(back)),
    )
}

/// The viewer and a client that is them, or the response to send instead
/// (the sign-in page).
async fn signed_in(
    console: &Console,
    headers: &HeaderMap,
) -> Result<(Viewer, Client, String), Response> {
    let Some(v) = console.viewer(headers) else {
        return Err(Redirect::to("/login").into_response());
    };
    let client = console.client(&v).map_err(|f| failed(None, &f, None))?;
    let user = username(&client)
        .await
        .map_err(|f| failed(None, &f, None))?;
    Ok((v, client, user))
}

/// A POST is the viewer's own: from a page of this console (its Origin,
/// when the browser sends one, is the console's) and with their CSRF token.
fn own_post(console: &Console, headers: &HeaderMap, v: &Viewer, csrf: &str) -> Result<(), String> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://").map(|(_, rest)| rest));
        if origin_host.is_none() || origin_host != host {
            return Err("refused: the form was not sent from this console's pages".into());
        }
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|s| s.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err("refused: the form was sent from another site".into());
    }
    if !console.0.sessions.csrf_valid(v, csrf) {
        return Err("refused: the form's CSRF token is missing or not this session's; reload the page and try again".into());
    }
    Ok(())
}

/// An action: the viewer, a client that is them, and the resource's page,
/// once the POST is checked as the viewer's own.
struct Action {
    viewer: Viewer,
    client: Client,
    user: String,
    namespace: String,
    here: String,
    target: Target,
}

impl Action {
    fn who(&self) -> Who<'_> {
        Who {
            username: &self.user,
            csrf: &self.viewer.csrf,
        }
    }

    fn refused(&self, status: StatusCode, message: &str) -> Response {
        refused(Some(&self.who()), status, message, &self.here)
    }

    fn failed(&self, f: &Failure) -> Response {
        failed(Some(&self.who()), f, Some(&self.here))
    }

    /// RBAC lets the viewer `verb` `resource` here, or the 403 naming it.
    async fn may(
        &self,
        verb: &str,
        resource: &str,
        what: &str,
        outcome: &str,
    ) -> Result<(), Response> {
        if may(&self.client, &self.namespace, verb, resource).await {
            return Ok(());
        }
        Err(self.refused(
            StatusCode::FORBIDDEN,
            &format!(
                "{} may not {verb} {what} in namespace {}: {outcome}",
                self.user, self.namespace
            ),
        ))
    }

    async fn resource(&self) -> Result<Resource, Response> {
        resource::get(&self.client, &self.namespace, &self.target)
            .await
            .map_err(|e| self.failed(&e))
    }
}

/// The action a POST to `namespace/kind/name/...` asks for, or the response
/// that refuses it.
async fn action(
    console: &Console,
    headers: &HeaderMap,
    (namespace, kind, name): (String, String, String),
    csrf: &str,
) -> Result<Action, Response> {
    let (viewer, client, user) = signed_in(console, headers).await?;
    let here = page::path(&namespace, &kind, &name);
    let who = Who {
        username: &user,
        csrf: &viewer.csrf,
    };
    if let Err(e) = own_post(console, headers, &viewer, csrf) {
        return Err(refused(Some(&who), StatusCode::FORBIDDEN, &e, &here));
    }
    let target = target(&kind, name).map_err(|e| failed(Some(&who), &e, Some("/")))?;
    Ok(Action {
        viewer,
        client,
        user,
        namespace,
        here,
        target,
    })
}

async fn sign_in_page(State(console): State<Console>, headers: HeaderMap) -> Response {
    if console.viewer(&headers).is_some() {
        return Redirect::to("/").into_response();
    }
    html_response(StatusCode::OK, page::sign_in(None))
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
}

async fn sign_in(State(console): State<Console>, Form(f): Form<SignIn>) -> Response {
    let token = SecretString::from(f.token.trim());
    let v = console.0.sessions.bearer(token.clone());
    let checked = match console.client(&v) {
        Ok(client) => username(&client).await,
        Err(f) => Err(f),
    };
    match checked {
        Ok(user) => match console.0.sessions.open(token) {
            Ok(id) => {
                tracing::info!(user, "signed in");
                (
                    StatusCode::SEE_OTHER,
                    [
                        (
                            header::SET_COOKIE,
                            session::set_cookie(&id, console.0.secure_cookie),
                        ),
                        (header::LOCATION, "/".to_string()),
                    ],
                )
                    .into_response()
            }
            Err(e) => html_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                page::sign_in(Some(&format!("no session could be made: {e}"))),
            ),
        },
        Err(f) if f.status == Some(401) => html_response(
            StatusCode::UNAUTHORIZED,
            page::sign_in(Some("The API server did not accept this token.")),
        ),
        Err(f) => html_response(StatusCode::BAD_GATEWAY, page::sign_in(Some(&f.message))),
    }
}

#[derive(Deserialize)]
struct Csrf {
    #[serde(default)]
    csrf: String,
}

async fn sign_out(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(f): Form<Csrf>,
) -> Response {
    if let Some(v) = console.viewer(&headers) {
        if let Err(e) = own_post(&console, &headers, &v, &f.csrf) {
            return refused(None, StatusCode::FORBIDDEN, &e, "/");
        }
        if let Some(id) = headers
            .get(header::COOKIE)
            .and_then(|c| c.to_str().ok())
            .and_then(session::session_id)
        {
            console.0.sessions.close(id);
        }
    }
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                session::clear_cookie(console.0.secure_cookie),
            ),
            (header::LOCATION, "/login".to_string()),
        ],
    )
        .into_response()
}

#[derive(Deserialize)]
struct ListQuery {
    namespace: Option<String>,
}

fn row(r: &Resource) -> Row {
    let o = stages::overview(r);
    let kind = r.kind();
    Row {
        kind: kind.api_kind(),
        word: kind.word(),
        namespace: o.namespace,
        name: o.name,
        phase: o.phase.unwrap_or_else(|| "-".into()),
        reason: o.reason,
        message: o.message,
        revision: r.revision().unwrap_or_else(|| "-".into()),
    }
}

async fn list(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Response {
    let (v, client, user) = match signed_in(&console, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let who = Who {
        username: &user,
        csrf: &v.csrf,
    };
    let namespace = q.namespace.filter(|n| !n.trim().is_empty());
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for kind in [Kind::Schema, Kind::Migration] {
        match resource::list(&client, kind, namespace.as_deref()).await {
            Ok(found) => rows.extend(found.iter().map(row)),
            Err(e) => {
                let f = Failure::api(format!("listing {}s", kind.api_kind()), e);
                let hint = if namespace.is_none() && f.status == Some(403) {
                    "; name a namespace you may read"
                } else {
                    ""
                };
                errors.push(format!("{}{hint}", f.message));
            }
        }
    }
    rows.sort_by(|a, b| (&a.namespace, &a.name, a.kind).cmp(&(&b.namespace, &b.name, b.kind)));
    let error = (!errors.is_empty()).then(|| errors.join(" · "));
    html_response(
        StatusCode::OK,
        page::list(&who, namespace.as_deref(), &rows, error.as_deref()),
    )
}

fn target(kind: &str, name: String) -> Result<Target, Failure> {
    Ok(Target {
        kind: kind.parse()?,
        name,
    })
}

#[derive(Deserialize)]
struct Notice {
    approval: Option<String>,
    acknowledgment: Option<String>,
    read: Option<String>,
}

/// Whether the resource's engine speaks PostgreSQL.
fn postgres(r: &Resource) -> bool {
    r.to_json()["spec"]["target"]["engine"]
        .as_str()
        .is_none_or(|e| e.eq_ignore_ascii_case("postgres"))
}

async fn resource_page(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, kind, name)): Path<(String, String, String)>,
    Query(notice): Query<Notice>,
) -> Response {
    let (v, client, user) = match signed_in(&console, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let who = Who {
        username: &user,
        csrf: &v.csrf,
    };
    let r = match target(&kind, name) {
        Ok(t) => resource::get(&client, &namespace, &t).await,
        Err(f) => Err(f),
    };
    let r = match r {
        Ok(r) => r,
        Err(f) => return failed(Some(&who), &f, Some("/")),
    };
    let overview = stages::overview(&r);
    let plan = match r.plan_ref() {
        Some(_) => Some(plan::read(&client, &r, Which::Current).await),
        None => None,
    };
    let approve = match (approve::approvable(&r), &plan) {
        (Ok((plan, uid, fingerprint)), Some(Ok(_)))
            if may(&client, &namespace, "create", r.kind().approvals_plural()).await =>
        {
            Some(ApproveForm {
                plan,
                uid,
                fingerprint,
            })
        }
        _ => None,
    };
    let acknowledge = match r.unresolved_run() {
        Some((operation_id, outcome))
            if may(&client, &namespace, "create", ACKNOWLEDGMENTS).await =>
        {
            Some(AcknowledgeForm {
                operation_id,
                outcome,
            })
        }
        _ => None,
    };
    let can_request_read = may(&client, &namespace, "patch", r.kind().plural()).await;
    let history = history::view(&r);
    let notice = match (notice.approval, notice.acknowledgment, notice.read) {
        (Some(a), ..) => Some(format!(
            "Approval {a} created as {user}; the Apply takes it from here."
        )),
        (None, Some(a), _) => Some(format!(
            "Acknowledgment {a} created as {user}; the migration reads its history again."
        )),
        (None, None, Some(at)) => Some(format!("A read was requested ({at}).")),
        _ => None,
    };
    let p = ResourcePage {
        overview: &overview,
        word: r.kind().word(),
        plan: plan
            .as_ref()
            .map(|p| p.as_ref().map_err(|f| f.message.clone())),
        postgres: postgres(&r),
        history: &history,
        approve,
        acknowledge,
        can_request_read,
        traces: console.0.traces_url.is_some(),
        notice,
    };
    html_response(StatusCode::OK, page::resource_page(&who, &p))
}

#[derive(Deserialize)]
struct Approval {
    #[serde(default)]
    csrf: String,
    plan: String,
    uid: String,
    fingerprint: String,
}

async fn approve_plan(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(at): Path<(String, String, String)>,
    Form(f): Form<Approval>,
) -> Response {
    let a = match action(&console, &headers, at, &f.csrf).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let kinds = match a.target.kind {
        Kind::Schema => "PtahSchemaApprovals",
        Kind::Migration => "PtahMigrationApprovals",
    };
    if let Err(r) = a
        .may(
            "create",
            a.target.kind.approvals_plural(),
            kinds,
            "approved nothing",
        )
        .await
    {
        return r;
    }
    let r = match a.resource().await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let shown = (f.plan, f.uid, f.fingerprint);
    let current = match approve::approvable(&r) {
        Ok(c) => c,
        Err(e) => return a.refused(StatusCode::CONFLICT, &e.message),
    };
    if current.1 != shown.1 || current.2 != shown.2 {
        let e = approve::refused(&shown, &r, "");
        return a.refused(StatusCode::CONFLICT, &e.message);
    }
    let view = match plan::read(&a.client, &r, Which::Current).await {
        Ok(view) if view.uid == shown.1 && view.fingerprint == shown.2 => view,
        Ok(_) => {
            let e = approve::refused(&shown, &r, "the plan changed while it was read");
            return a.refused(StatusCode::CONFLICT, &e.message);
        }
        Err(e) => return a.failed(&e),
    };
    match approve::create(&a.client, &r, &current, &view.approves).await {
        Ok((approval, _, approver)) => {
            tracing::info!(approval, approver, plan = current.0, "approved");
            Redirect::to(&format!("{}?approval={approval}", a.here)).into_response()
        }
        Err(e) => a.refused(StatusCode::CONFLICT, &e.message),
    }
}

async fn request_read(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(at): Path<(String, String, String)>,
    Form(f): Form<Csrf>,
) -> Response {
    let a = match action(&console, &headers, at, &f.csrf).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let kinds = format!("{}s", a.target.kind.api_kind());
    if let Err(r) = a
        .may(
            "patch",
            a.target.kind.plural(),
            &kinds,
            "no read was requested",
        )
        .await
    {
        return r;
    }
    let r = match a.resource().await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let value = refresh::spelled(refresh::next_value(
        k8s_openapi::jiff::Timestamp::now(),
        r.read_request_annotation().as_deref(),
        r.last_read_request().as_deref(),
    ));
    match refresh::write(&a.client, &r, &value).await {
        Ok(()) => Redirect::to(&format!("{}?read={value}", a.here)).into_response(),
        Err(e) => a.failed(&e),
    }
}

#[derive(Deserialize)]
struct Acknowledge {
    #[serde(default)]
    csrf: String,
    operation: String,
}

async fn acknowledge_run(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(at): Path<(String, String, String)>,
    Form(f): Form<Acknowledge>,
) -> Response {
    let a = match action(&console, &headers, at, &f.csrf).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if a.target.kind != Kind::Migration {
        return a.refused(
            StatusCode::NOT_FOUND,
            "only a PtahMigration has runs to acknowledge",
        );
    }
    if let Err(r) = a
        .may(
            "create",
            ACKNOWLEDGMENTS,
            "PtahMigrationRunAcknowledgments",
            "acknowledged nothing",
        )
        .await
    {
        return r;
    }
    let r = match a.resource().await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let now = match r.unresolved_run() {
        Some((op, _)) if op == f.operation => None,
        Some((op, _)) => Some(format!(
            "acknowledged nothing: the unresolved run of {} is now operation {op}, not the one shown; read it again",
            r.cli_name()
        )),
        None => Some(format!(
            "acknowledged nothing: {} has no unresolved run now",
            r.cli_name()
        )),
    };
    if let Some(message) = now {
        return a.refused(StatusCode::CONFLICT, &message);
    }
    let gvk = kube::core::GroupVersionKind::gvk(
        operator::api::GROUP,
        operator::api::VERSION,
        "PtahMigrationRunAcknowledgment",
    );
    let api: Api<kube::core::DynamicObject> = Api::namespaced_with(
        a.client.clone(),
        &a.namespace,
        &kube::core::ApiResource::from_gvk_with_plural(&gvk, ACKNOWLEDGMENTS),
    );
    let obj = serde_json::from_value(serde_json::json!({
        "apiVersion": operator::api::API_VERSION,
        "kind": "PtahMigrationRunAcknowledgment",
        "metadata": {"generateName": format!("{}-ack-", r.name()), "namespace": a.namespace},
        "spec": {
            "migrationRef": {"name": r.name(), "uid": r.uid()},
            "operationID": f.operation,
        },
    }));
    let created = match obj {
        Ok(obj) => api.create(&PostParams::default(), &obj).await,
        Err(e) => return a.failed(&Failure::error(e.to_string())),
    };
    match created {
        Ok(ack) => {
            let name = kube::ResourceExt::name_any(&ack);
            tracing::info!(acknowledgment = name, "acknowledged");
            Redirect::to(&format!("{}?acknowledgment={name}", a.here)).into_response()
        }
        Err(e) => a.failed(&Failure::api("creating the acknowledgment", e)),
    }
}

/// An SVG that says `message`, where a drawing could not be made.
fn svg_message(message: &str) -> String {
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width="720" height="32" {
            text x="4" y="20" font-family="sans-serif" font-size="13" { (message) }
        }
    }
    .into_string()
}

async fn trace_svg(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, kind, name)): Path<(String, String, String)>,
) -> Response {
    let (_, client, _) = match signed_in(&console, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let drawn = async {
        let base = console
            .0
            .traces_url
            .clone()
            .ok_or_else(|| Failure::error("no tracing backend is configured"))?;
        let r = resource::get(&client, &namespace, &target(&kind, name)?).await?;
        let found = trace::fetch(&base, &r, 1).await?;
        Ok::<_, Failure>(trace::svg(&trace::view(&r, &found)))
    }
    .await;
    let svg = drawn.unwrap_or_else(|f| svg_message(&f.message));
    (
        [(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8")],
        svg,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    fn console() -> Console {
        let s = Settings {
            listen: "127.0.0.1:0".parse().expect("addr"),
            api_server: None,
            api_ca: None,
            traces_url: None,
            secure_cookie: true,
        };
        Console::new(
            Config::new("https://127.0.0.1:6443".parse().expect("uri")),
            &s,
        )
        .expect("console")
    }

    #[test]
    fn a_post_needs_the_session_csrf_token_and_the_console_origin() {
        let c = console();
        let v = c.0.sessions.bearer(SecretString::from("t"));
        let own = headers(&[("host", "console:8080"), ("origin", "http://console:8080")]);
        assert!(own_post(&c, &own, &v, &v.csrf).is_ok());
        assert!(own_post(&c, &own, &v, "").is_err(), "no token");
        assert!(
            own_post(&c, &own, &v, &"0".repeat(64)).is_err(),
            "a wrong token"
        );
        let cross = headers(&[("host", "console:8080"), ("origin", "https://evil.example")]);
        assert!(own_post(&c, &cross, &v, &v.csrf).is_err(), "another origin");
        let site = headers(&[("host", "console:8080"), ("sec-fetch-site", "cross-site")]);
        assert!(own_post(&c, &site, &v, &v.csrf).is_err(), "another site");
        let none = headers(&[("host", "console:8080")]);
        assert!(
            own_post(&c, &none, &v, &v.csrf).is_ok(),
            "no Origin: the token decides"
        );
    }

    #[test]
    fn the_viewer_is_the_proxy_bearer_or_the_session_cookie() {
        let c = console();
        assert!(c.viewer(&headers(&[])).is_none());
        assert!(
            c.viewer(&headers(&[("cookie", "ptah-console=abcd")]))
                .is_none(),
            "unknown session"
        );
        let id = c.0.sessions.open(SecretString::from("t")).expect("open");
        let cookie = format!("ptah-console={id}");
        assert!(c.viewer(&headers(&[("cookie", cookie.as_str())])).is_some());
        assert!(
            c.viewer(&headers(&[("authorization", "Bearer x")]))
                .is_some()
        );
        assert!(
            c.viewer(&headers(&[("authorization", "Basic x")]))
                .is_none()
        );
    }

    #[test]
    fn failures_keep_the_api_servers_status() {
        let forbidden = Failure {
            status: Some(403),
            ..Failure::error("forbidden")
        };
        assert_eq!(status_of(&forbidden), StatusCode::FORBIDDEN);
        assert_eq!(
            status_of(&Failure::not_found("gone")),
            StatusCode::NOT_FOUND
        );
        assert_eq!(status_of(&Failure::error("other")), StatusCode::BAD_GATEWAY);
    }
}
