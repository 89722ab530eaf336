//! Readiness for applications, on the harness's PostgreSQL and MariaDB: an
//! application's Deployment whose init container runs `ptah-runner await
//! migration/orders --for=version=2` (the operator image, as a person would
//! run it) under a ServiceAccount holding only the Role the chart's
//! `awaitAccess` value renders.
//!
//! * While the migration waits in `AwaitingApproval`, the Pod's init
//!   container runs, says what it waits on (the phase, the reason, the plan
//!   and the `kubectl ptah approve` command), and the application container
//!   has not started.
//! * `kubectl ptah wait migration/orders --for=version=2`, started then, is
//!   still waiting; asked of a schema, `--for=version=` is a bad command line.
//! * Once `kubectl ptah approve --yes` approves the plan, the run applies
//!   both versions, the init container exits 0 naming the version it saw,
//!   and the application container starts no earlier than the run finished;
//!   the tables are in the database, read with its own client; the wait
//!   exits 0.
//! * The ServiceAccount may get, list and watch that one migration and
//!   nothing else (SubjectAccessReviews against the API server).

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, ServiceAccount};
use kube::api::{ListParams, PostParams};
use serde_json::json;

use conformance::harness::{BASE_IMAGE, Harness, OPERATOR_IMAGE};
use conformance::testkit::chart;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::{Operator, PATIENCE};
use conformance::testkit::plugin::{Plugin, Ran};
use operator::admission::webhook_configurations;
use operator::api::PtahMigration;
use operator::api::condition::MigrationPhase;

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const APP: &str = "orders-api";

/// The Role and RoleBinding the chart renders for `awaitAccess` naming
/// `orders` in `ns`, applied.
async fn await_access(ns: &TestNamespace) -> anyhow::Result<()> {
    let set = format!(
        "awaitAccess[0].namespace={},awaitAccess[0].serviceAccount={APP},awaitAccess[0].migrations={{orders}}",
        ns.name()
    );
    let docs = chart::documents(&chart::template(&["--set", &set])?)?;
    let ours: Vec<serde_json::Value> = docs
        .into_iter()
        .filter(|d| {
            matches!(d["kind"].as_str(), Some("Role" | "RoleBinding"))
                && d["metadata"]["namespace"].as_str() == Some(ns.name())
        })
        .collect();
    anyhow::ensure!(
        ours.len() == 2,
        "the chart rendered {} objects for awaitAccess",
        ours.len()
    );
    chart::apply(ns.client(), &ours).await
}

/// Whether the ServiceAccount may `verb` `resource` (named `name`).
async fn may(
    ns: &TestNamespace,
    verb: &str,
    resource: &str,
    name: Option<&str>,
) -> anyhow::Result<bool> {
    let group = if resource == "secrets" {
        ""
    } else {
        "operator.ptah.run"
    };
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{}:{APP}", ns.name()),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", ns.name())],
            "resourceAttributes": {
                "namespace": ns.name(), "verb": verb, "group": group,
                "resource": resource, "name": name.unwrap_or_default(),
            },
        }
    }))?;
    let api: kube::Api<SubjectAccessReview> = kube::Api::all(ns.client().clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The application: an init container awaiting version 2 of `orders`, then
/// a container that only runs.
fn deployment() -> serde_json::Value {
    let restricted = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": true,
    });
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "serviceAccountName": APP,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "initContainers": [{
                        "name": "schema",
                        "image": OPERATOR_IMAGE,
                        "command": ["ptah-runner", "await", "migration/orders",
                                    "--for=version=2", "--timeout=10m"],
                        "securityContext": restricted,
                    }],
                    "containers": [{
                        "name": "app",
                        "image": BASE_IMAGE,
                        "command": ["sh", "-c", "echo started; exec sleep 3600"],
                        "securityContext": restricted,
                    }],
                },
            },
        },
    })
}

async fn the_pod(ns: &TestNamespace) -> anyhow::Result<Option<Pod>> {
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("app={APP}")))
        .await?;
    Ok(pods.items.into_iter().next())
}

fn status_of<'a>(
    statuses: &'a Option<Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    statuses.as_ref()?.iter().find(|c| c.name == name)
}

fn log_of(ns: &TestNamespace, pod: &Pod, container: &str) -> String {
    let path = conformance::kubelet::log_path(&ns.harness().kubelet_dir(), pod, container);
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `child`'s end, killed after `within`.
fn ended(mut child: std::process::Child, within: Duration) -> anyhow::Result<Ran> {
    let until = std::time::Instant::now() + within;
    while child.try_wait()?.is_none() {
        if std::time::Instant::now() > until {
            child.kill()?;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(child.wait_with_output()?.into())
}

async fn pods_start_after_the_approved_migration(engine: Engine, test: &str) -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "ready", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    executor::migration_under(
        &ns,
        &db,
        "orders",
        json!({"apply": "OnApproval"}),
        executor::migration_files(),
    )
    .await?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    operator
        .until(&ns, "orders", "AwaitingApproval", |m: &PtahMigration| {
            m.status.as_ref().and_then(|s| s.phase) == Some(MigrationPhase::AwaitingApproval)
        })
        .await?;

    ns.create::<ServiceAccount>(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": APP},
    }))
    .await?;
    await_access(&ns).await?;
    // The authorizer reads RBAC from its own watch: the Role takes effect a
    // moment after it is created.
    PATIENCE
        .poll("the awaitAccess Role to take effect", || async {
            Ok(may(&ns, "get", "ptahmigrations", Some("orders"))
                .await?
                .then_some(()))
        })
        .await?;
    assert!(may(&ns, "watch", "ptahmigrations", Some("orders")).await?);
    assert!(may(&ns, "list", "ptahmigrations", Some("orders")).await?);
    assert!(!may(&ns, "get", "ptahmigrations", Some("other")).await?);
    assert!(!may(&ns, "list", "ptahmigrations", None).await?);
    assert!(!may(&ns, "get", "ptahschemas", Some("orders")).await?);
    assert!(!may(&ns, "patch", "ptahmigrations", Some("orders")).await?);
    assert!(!may(&ns, "get", "secrets", Some("orders-db")).await?);

    ns.create::<Deployment>(deployment()).await?;
    // The init container says what it waits on, and the application has
    // not started.
    let pod = PATIENCE
        .poll("the init container to say what it waits on", || async {
            let Some(pod) = the_pod(&ns).await? else {
                return Ok(None);
            };
            let log = log_of(&ns, &pod, "schema");
            Ok(
                (log.contains("waits for version 2") && log.contains("AwaitingApproval"))
                    .then_some(pod),
            )
        })
        .await
        .with_context(|| operator.log())?;
    let log = log_of(&ns, &pod, "schema");
    assert!(
        log.contains(&format!(
            "migration/orders -n {}: waits for version 2; the database has no version applied; it is AwaitingApproval (AwaitingApproval): plan orders-",
            ns.name()
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "waits for an approval; approve it with: kubectl ptah approve migration/orders -n {}",
            ns.name()
        )),
        "{log}"
    );
    let pod = ns
        .api::<Pod>()
        .get(&pod.metadata.name.clone().unwrap_or_default())
        .await?;
    let st = pod.status.clone().context("the Pod's status")?;
    let app = status_of(&st.container_statuses, "app");
    assert!(
        app.is_none_or(|c| c
            .state
            .as_ref()
            .is_none_or(|s| s.running.is_none() && s.terminated.is_none())),
        "the application started before its migration ran: {app:?}"
    );
    assert!(
        log_of(&ns, &pod, "app").is_empty(),
        "the application container ran"
    );

    // A script's wait, and the same question asked of the wrong kind.
    let k = Plugin::new(&ns)?;
    let wrong = k.run(&["wait", "schema/orders", "--for=version=2", "--timeout=10s"])?;
    assert_eq!(wrong.code, 64, "{wrong:?}");
    assert!(
        wrong
            .stderr
            .contains("--for=version=N is for a PtahMigration"),
        "{wrong:?}"
    );
    let waiter = k.spawn(&[
        "wait",
        "migration/orders",
        "--for=version=2",
        "--timeout=4m",
    ])?;

    let approved = k.run(&["approve", "migration/orders", "--yes"])?;
    assert_eq!(approved.code, 0, "{approved:?}");

    let pod = PATIENCE
        .poll("the application container to run", || async {
            let Some(pod) = the_pod(&ns).await? else {
                return Ok(None);
            };
            let running = pod
                .status
                .as_ref()
                .and_then(|s| status_of(&s.container_statuses, "app"))
                .and_then(|c| c.state.as_ref()?.running.clone());
            Ok(running.map(|r| (pod, r)))
        })
        .await
        .with_context(|| operator.log())?;
    let (pod, running) = pod;
    let m: PtahMigration = ns.api().get("orders").await?;
    let run = m
        .status
        .as_ref()
        .and_then(|s| s.last_run.clone())
        .context("status.lastRun")?;
    assert_eq!(run.applied_versions, [1, 2], "{run:?}");
    let finished = run.finished_at.context("lastRun.finishedAt")?;
    let started = running.started_at.context("the app's startedAt")?;
    // The kubelet writes whole seconds.
    assert!(
        started.0.as_second() >= finished.0.as_second(),
        "the application started at {} before the run finished at {}",
        started.0,
        finished.0
    );
    let init = pod
        .status
        .as_ref()
        .and_then(|s| status_of(&s.init_container_statuses, "schema"))
        .and_then(|c| c.state.as_ref()?.terminated.clone())
        .context("the init container terminated")?;
    assert_eq!(init.exit_code, 0, "{init:?}");
    let said = init.message.unwrap_or_default();
    assert!(
        said.contains("the database is at version 2 (version 2 or later was asked for)"),
        "{said}"
    );
    let mut tables = db.tables()?;
    tables.retain(|t| t != "schema_migrations");
    assert_eq!(tables, ["customers", "orders"]);

    let waited = ended(waiter, Duration::from_secs(60))?;
    assert_eq!(waited.code, 0, "{waited:?}");
    assert!(
        waited.stderr.contains("the database is at version 2"),
        "{waited:?}"
    );
    ns.delete_all::<Deployment>(&PATIENCE).await?;
    operator.finish::<PtahMigration>(&ns).await
}

#[tokio::test]
async fn pods_start_after_the_approved_migration_on_postgres() -> anyhow::Result<()> {
    pods_start_after_the_approved_migration(Engine::Postgres, "pg").await
}

#[tokio::test]
async fn pods_start_after_the_approved_migration_on_mariadb() -> anyhow::Result<()> {
    pods_start_after_the_approved_migration(Engine::MariaDb, "maria").await
}
