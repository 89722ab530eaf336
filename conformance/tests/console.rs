//! The web console in a real browser: Debian's chromium, headless, driven
//! through chromium-driver (WebDriver) by fantoccini, against `ptah-console`
//! on the harness.
//!
//! * A reviewer (a ServiceAccount that may read schemas and plans, create
//!   approvals and ask for reads) signs in with their own token, opens a
//!   schema awaiting approval, reads the plan (highlighted SQL, findings,
//!   provenance) and approves it with the button; the page reaches `InSync`.
//!   The approval names the reviewer as admission stamped it, the manager
//!   accepted it, and the table is in the database.
//! * A viewer who may only read sees no approve button, and the approve form
//!   posted with their own session and CSRF token is refused with 403:
//!   nothing is created.
//! * The change path is drawn from the harness's Jaeger, and a migration's
//!   page shows its stages and journal.
//! * Security: a POST without the session's CSRF token, or from another
//!   origin, is refused (403) and creates nothing; every response carries
//!   the Content-Security-Policy; the token is in no URL the browser visited
//!   and in no line the console logged.
//!
//! Screenshots are saved under `<target>/console-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use fantoccini::{Client as Browser, ClientBuilder, Locator};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::PostParams;
use serde_json::json;

use conformance::harness::Harness;
use conformance::testkit::chart::service_account_token;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::manager::free_port;
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::Operator;
use conformance::testkit::wait::Patience;
use gitops::console::CONTENT_SECURITY_POLICY;
use operator::admission::webhook_configurations;
use operator::api::condition::SchemaPhase;
use operator::api::{PtahMigration, PtahSchema, PtahSchemaApproval};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const PATIENCE: Patience = Patience::new(Duration::from_secs(120), Duration::from_millis(500));

/// A child process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ptah-console` on a free port, with the harness's API server (its
/// address and CA; the console drops the kubeconfig's credentials) and its
/// Jaeger, logging to `log`.
fn start_console(h: &Harness, log: &Path, traces_url: &str) -> anyhow::Result<(Running, String)> {
    let exe = h.target_dir.join("ptah-console");
    anyhow::ensure!(
        exe.is_file(),
        "{} is not built: run `cargo build --workspace --bins`",
        exe.display()
    );
    let port = free_port()?;
    let out = std::fs::File::create(log)?;
    let child = Command::new(exe)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--insecure-cookie",
            "--traces-url",
            traces_url,
        ])
        .env("KUBECONFIG", h.kubeconfig())
        .env("RUST_LOG", "debug")
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("starting ptah-console")?;
    Ok((Running(child), format!("http://127.0.0.1:{port}")))
}

/// chromium-driver on a free port, and a headless chromium session.
async fn start_browser() -> anyhow::Result<(Running, Browser)> {
    let driver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .context("chromedriver is not installed (Debian's chromium-driver; conformance/setup.sh installs it)")?;
    let port = free_port()?;
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting chromedriver")?;
    let running = Running(child);
    let url = format!("http://127.0.0.1:{port}");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            // Root in a VM: no user namespace sandbox to drop into.
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1700"],
        }),
    );
    let browser = Patience::new(Duration::from_secs(60), Duration::from_millis(250))
        .poll("chromium-driver to open a session", || async {
            Ok(ClientBuilder::rustls()?
                .capabilities(caps.clone())
                .connect(&url)
                .await
                .ok())
        })
        .await?;
    Ok((running, browser))
}

/// A ServiceAccount `name` of `ns` bound to a Role of `rules`; its token.
async fn person(
    ns: &TestNamespace,
    name: &str,
    rules: serde_json::Value,
) -> anyhow::Result<String> {
    let pp = PostParams::default();
    ns.api::<ServiceAccount>()
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
    ns.api::<Role>()
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}))?,
        )
        .await?;
    ns.api::<RoleBinding>()
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns.name()}],
            }))?,
        )
        .await?;
    service_account_token(ns.harness(), ns.name(), name).await
}

/// What a viewer needs to read schemas, their plans and plan chunks.
fn reading() -> serde_json::Value {
    json!({
        "apiGroups": ["operator.ptah.run"],
        "resources": ["ptahschemas", "ptahschemaplans", "ptahschemaplanchunks", "ptahmigrations", "ptahmigrationplans"],
        "verbs": ["get", "list", "watch"],
    })
}

async fn until_phase(
    ns: &TestNamespace,
    name: &str,
    phase: SchemaPhase,
) -> anyhow::Result<PtahSchema> {
    ns.until(&PATIENCE, name, &format!("{phase:?}"), |s: &PtahSchema| {
        s.status.as_ref().and_then(|st| st.phase) == Some(phase)
    })
    .await
}

async fn screenshot(browser: &Browser, dir: &Path, name: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let png = browser.screenshot().await?;
    std::fs::write(dir.join(format!("{name}.png")), png)?;
    Ok(())
}

async fn text_of(browser: &Browser, css: &str) -> anyhow::Result<String> {
    Ok(browser.find(Locator::Css(css)).await?.text().await?)
}

async fn sign_in(browser: &Browser, console: &str, token: &str) -> anyhow::Result<()> {
    browser.goto(&format!("{console}/")).await?;
    let field = browser.wait().for_element(Locator::Css("#token")).await?;
    field.send_keys(token).await?;
    browser
        .find(Locator::Css("#sign-in"))
        .await?
        .click()
        .await?;
    browser.wait().for_element(Locator::Css("#viewer")).await?;
    Ok(())
}

const FORM: &str = "application/x-www-form-urlencoded";

/// `pairs` as a form body.
fn encoded(pairs: &[(&str, String)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// A session of the console for `token`, outside the browser: its cookie.
async fn session(http: &reqwest::Client, console: &str, token: &str) -> anyhow::Result<String> {
    let res = http
        .post(format!("{console}/login"))
        .header("content-type", FORM)
        .body(encoded(&[("token", token.to_string())]))
        .send()
        .await?;
    anyhow::ensure!(res.status() == 303, "sign-in answered {}", res.status());
    let cookie = res
        .headers()
        .get("set-cookie")
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .context("a session cookie")?
        .to_string();
    Ok(cookie)
}

/// The CSRF token in a page's forms.
fn csrf_in(page: &str) -> anyhow::Result<String> {
    let at = page
        .find(r#"name="csrf" value=""#)
        .context("a form with a CSRF token")?;
    let rest = &page[at + r#"name="csrf" value=""#.len()..];
    Ok(rest[..rest.find('"').context("the token's end")?].to_string())
}

async fn approvals(ns: &TestNamespace) -> anyhow::Result<usize> {
    Ok(ns
        .api::<PtahSchemaApproval>()
        .list(&Default::default())
        .await?
        .items
        .len())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reviewer_approves_in_the_browser_and_a_viewer_is_refused() -> anyhow::Result<()> {
    let h = harness().await;
    let ns = TestNamespace::for_operator(h, "console", "review").await?;
    let db = TestDatabase::create(h, Engine::Postgres, ns.name())?;
    let other = TestDatabase::create(h, Engine::Postgres, &format!("{}-b", ns.name()))?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    executor::schema_under(&ns, &db, "orders", json!({"apply": "OnApproval"})).await?;
    executor::schema_under(&ns, &other, "customers", json!({"apply": "OnApproval"})).await?;
    let third = TestDatabase::create(h, Engine::Postgres, &format!("{}-c", ns.name()))?;
    executor::migration(&ns, &third, "shop").await?;
    until_phase(&ns, "orders", SchemaPhase::AwaitingApproval).await?;
    until_phase(&ns, "customers", SchemaPhase::AwaitingApproval).await?;

    let mut reviewer_rules = vec![reading()];
    reviewer_rules.push(json!({"apiGroups": ["operator.ptah.run"], "resources": ["ptahschemaapprovals"], "verbs": ["create", "get", "list"]}));
    reviewer_rules.push(json!({"apiGroups": ["operator.ptah.run"], "resources": ["ptahschemas"], "verbs": ["patch"]}));
    let reviewer = person(&ns, "reviewer", json!(reviewer_rules)).await?;
    let viewer = person(&ns, "viewer", json!([reading()])).await?;

    let work = tempfile::tempdir()?;
    let log = work.path().join("console.log");
    let (_console, base) = start_console(h, &log, &h.traces_url()?)?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    Patience::new(Duration::from_secs(30), Duration::from_millis(100))
        .poll("the console to answer", || async {
            Ok(http
                .get(format!("{base}/healthz"))
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success()))
        })
        .await?;
    let shots = h.target_dir.join("console-screenshots");
    let (_driver, browser) = start_browser().await?;
    let mut visited = Vec::new();

    // The reviewer: sign in, open the schema, read the plan, approve.
    sign_in(&browser, &base, &reviewer).await?;
    visited.push(browser.current_url().await?.to_string());
    let me = format!("system:serviceaccount:{}:reviewer", ns.name());
    assert_eq!(text_of(&browser, "#viewer").await?, me);
    browser
        .goto(&format!("{base}/?namespace={}", ns.name()))
        .await?;
    screenshot(&browser, &shots, "list").await?;
    browser
        .find(Locator::LinkText("orders"))
        .await?
        .click()
        .await?;
    browser.wait().for_element(Locator::Css("#phase")).await?;
    visited.push(browser.current_url().await?.to_string());
    assert_eq!(text_of(&browser, "#phase").await?, "AwaitingApproval");
    let sql = text_of(&browser, "pre.sql").await?;
    assert!(sql.contains("CREATE TABLE"), "the plan's SQL: {sql}");
    let keywords = browser.find_all(Locator::Css("pre.sql .kw")).await?;
    assert!(!keywords.is_empty(), "the SQL is highlighted");
    let findings = text_of(&browser, "#findings").await?;
    assert!(!findings.is_empty());
    let plan_name = text_of(&browser, "#plan-name").await?;
    screenshot(&browser, &shots, "awaiting-approval").await?;
    browser
        .find(Locator::Css("#approve"))
        .await?
        .click()
        .await?;
    let answered = browser
        .wait()
        .for_element(Locator::Css("#notice, #refusal"))
        .await?;
    let said = answered.text().await?;
    screenshot(&browser, &shots, "approved").await?;
    assert_eq!(
        answered.attr("id").await?.as_deref(),
        Some("notice"),
        "{said}"
    );
    assert!(said.contains(&me), "{said}");
    visited.push(browser.current_url().await?.to_string());
    // The page reloads itself while the Apply runs; read it until InSync.
    let page = format!("{base}/{}/schema/orders", ns.name());
    Patience::new(Duration::from_secs(180), Duration::from_secs(2))
        .poll("the page to show InSync", || async {
            browser.goto(&page).await?;
            let phase = text_of(&browser, "#phase").await?;
            Ok((phase == "InSync").then_some(()))
        })
        .await
        .with_context(|| operator.log())?;
    screenshot(&browser, &shots, "in-sync").await?;
    browser.find(Locator::Css("img.trace")).await?;

    // The change path, drawn from Jaeger once the change's spans are there.
    let as_reviewer = session(&http, &base, &reviewer).await?;
    let drawn = Patience::new(Duration::from_secs(90), Duration::from_secs(2))
        .poll("the change path drawn", || async {
            let svg = http
                .get(format!("{base}/{}/schema/orders/trace.svg", ns.name()))
                .header("cookie", &as_reviewer)
                .send()
                .await?
                .text()
                .await?;
            Ok((svg.contains("Decision") && svg.contains("Execution")).then_some(svg))
        })
        .await?;
    assert!(drawn.starts_with("<svg"), "{drawn}");

    // A migration's page: its stages and journal.
    let shop = format!("{base}/{}/migration/shop", ns.name());
    Patience::new(Duration::from_secs(120), Duration::from_secs(2))
        .poll("the migration's page to show InSync", || async {
            browser.goto(&shop).await?;
            Ok((text_of(&browser, "#phase").await? == "InSync").then_some(()))
        })
        .await
        .with_context(|| operator.log())?;
    let journal = browser
        .find_all(Locator::Css("table.journal tbody tr"))
        .await?;
    assert!(!journal.is_empty(), "the migration's journal");
    let stages = text_of(&browser, "ol.stages").await?;
    assert!(stages.contains("History"), "{stages}");
    screenshot(&browser, &shots, "migration").await?;
    let approval = ns
        .api::<PtahSchemaApproval>()
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .next()
        .context("the approval")?;
    assert_eq!(approval.spec.plan_ref.name, plan_name);
    let stamped = approval.spec.approver.as_ref().context("spec.approver")?;
    assert_eq!(stamped.username, me, "the approval names the viewer");
    assert!(db.tables()?.contains(&"orders".to_string()));

    // The viewer: no approve button, and the form refused when posted.
    browser
        .find(Locator::Css("header form button"))
        .await?
        .click()
        .await?;
    browser.wait().for_element(Locator::Css("#token")).await?;
    sign_in(&browser, &base, &viewer).await?;
    browser
        .goto(&format!("{base}/{}/schema/customers", ns.name()))
        .await?;
    assert_eq!(text_of(&browser, "#phase").await?, "AwaitingApproval");
    assert!(
        browser.find(Locator::Css("#approve")).await.is_err(),
        "a viewer who may not approve sees no approve button"
    );
    assert!(browser.find(Locator::Css("#request-read")).await.is_err());
    screenshot(&browser, &shots, "viewer").await?;
    let customers: PtahSchema = ns.api().get("customers").await?;
    let plan = customers
        .status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("status.plan")?;
    let form = |csrf: &str| {
        vec![
            ("csrf", csrf.to_string()),
            ("plan", plan.name.clone()),
            ("uid", plan.uid.clone()),
            ("fingerprint", plan.fingerprint.clone()),
        ]
    };
    let approve = format!("{base}/{}/schema/customers/approve", ns.name());
    let before = approvals(&ns).await?;
    let as_viewer = session(&http, &base, &viewer).await?;
    let page = http
        .get(format!("{base}/{}/schema/customers", ns.name()))
        .header("cookie", &as_viewer)
        .send()
        .await?;
    assert_eq!(
        page.headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok()),
        Some(CONTENT_SECURITY_POLICY)
    );
    let csrf = csrf_in(&page.text().await?)?;
    let res = http
        .post(&approve)
        .header("cookie", &as_viewer)
        .header("content-type", FORM)
        .body(encoded(&form(&csrf)))
        .send()
        .await?;
    assert_eq!(res.status(), 403, "a viewer's approval is refused");
    let body = res.text().await?;
    assert!(
        body.contains("may not create PtahSchemaApprovals"),
        "{body}"
    );

    // CSRF: the reviewer's own session, without the token, with another
    // session's, and from another origin.
    for (what, csrf, origin) in [
        ("no CSRF token", String::new(), None),
        ("the viewer's CSRF token", csrf.clone(), None),
        (
            "another origin",
            String::new(),
            Some("https://evil.example"),
        ),
    ] {
        let mut req = http
            .post(&approve)
            .header("cookie", &as_reviewer)
            .header("content-type", FORM)
            .body(encoded(&form(&csrf)));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let res = req.send().await?;
        assert_eq!(res.status(), 403, "{what}");
    }
    // Nor may a page of another site post with a valid token.
    let reviewer_page = http
        .get(format!("{base}/{}/schema/customers", ns.name()))
        .header("cookie", &as_reviewer)
        .send()
        .await?
        .text()
        .await?;
    let own = csrf_in(&reviewer_page)?;
    let res = http
        .post(&approve)
        .header("cookie", &as_reviewer)
        .header("origin", "https://evil.example")
        .header("content-type", FORM)
        .body(encoded(&form(&own)))
        .send()
        .await?;
    assert_eq!(res.status(), 403, "another origin with a valid token");
    assert_eq!(approvals(&ns).await?, before, "nothing was approved");
    until_phase(&ns, "customers", SchemaPhase::AwaitingApproval).await?;

    // Every response carries the policy, the sign-in page and the stylesheet too.
    for path in ["/login", "/static/console.css", "/"] {
        let res = http.get(format!("{base}{path}")).send().await?;
        assert_eq!(
            res.headers()
                .get("content-security-policy")
                .and_then(|v| v.to_str().ok()),
            Some(CONTENT_SECURITY_POLICY),
            "{path}"
        );
    }

    // No token in any URL the browser was at, nor in the console's log.
    visited.push(browser.current_url().await?.to_string());
    browser.close().await?;
    for url in &visited {
        assert!(!url.contains(&reviewer) && !url.contains(&viewer), "{url}");
    }
    let logged = std::fs::read_to_string(&log)?;
    assert!(
        logged.contains("approved"),
        "the console logs its actions:\n{logged}"
    );
    assert!(
        !logged.contains(&reviewer),
        "the reviewer's token in the log"
    );
    assert!(!logged.contains(&viewer), "the viewer's token in the log");
    ns.delete_all::<PtahMigration>(&PATIENCE).await?;
    operator.finish::<PtahSchema>(&ns).await
}
