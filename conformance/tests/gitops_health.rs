//! Argo CD's reading of PtahSchema and PtahMigration, by Argo CD's own Lua
//! health engine (`argocd-health`, built from `util/lua` at the pinned
//! version) running the script we ship in `gitops/argocd/` over objects
//! exactly as the API server returns them, taken from the harness in each
//! phase a real manager drives them to on PostgreSQL.
//!
//! * A schema: no status yet, `AwaitingApproval`, `InSync`, `Applying`
//!   (held on a table lock), `Blocked` (a destructive change),
//!   `Failed` (the database gone behind a stopped relay) and `Suspended`.
//! * A migration: no status yet, `Planning` under `Never`,
//!   `AwaitingApproval`, `InSync`, `Blocked` (a failing statement leaves a
//!   dirty row), `Failed` (its source ConfigMap gone) and `Suspended`.
//! * Written by hand, as no harness run holds it still: a status older than
//!   `metadata.generation` reads `Progressing` whatever its phase.
//! * The `argocd-cm` of `docs/gitops.md` holds the script as shipped, under both keys.
//!
//! Each table below is the documented phase → health reading
//! (`docs/gitops.md`); every row must be taken, and the phase of each object
//! is checked before its health, so no row passes on the wrong object.

use std::time::Duration;

use anyhow::Context;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::{Operator, PATIENCE, approve_schema, create_admitted};
use conformance::testkit::relay::Relay;
use conformance::tools;
use k8s_openapi::api::core::v1::ConfigMap;
use operator::admission::webhook_configurations;
use operator::api::PtahMigrationApproval;
use operator::api::condition::{
    ConditionStatus, MigrationConditionType, MigrationPhase, Reason, SchemaConditionType,
    SchemaPhase,
};
use operator::api::migration::PtahMigration;
use operator::api::schema::PtahSchema;

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// One row of a reading table: the case, the phase its object is in
/// (`None`: no phase yet), the health Argo CD must give, and a word its
/// message must hold (compared without case).
type Row = (
    &'static str,
    Option<&'static str>,
    &'static str,
    &'static str,
);

#[rustfmt::skip]
const SCHEMA_READINGS: &[Row] = &[
    // case                phase                     Argo CD        the message says
    ("declared",           None,                     "Progressing", "first read"),
    ("awaiting approval",  Some("AwaitingApproval"), "Suspended",   "approval"),
    ("in sync",            Some("InSync"),           "Healthy",     "ScopedConverged"),
    ("applying",           Some("Applying"),         "Progressing", "OperationInProgress"),
    ("destructive",        Some("Blocked"),          "Degraded",    "DestructiveChangesDisabled"),
    ("database gone",      Some("Failed"),           "Degraded",    "OperationFailed"),
    ("suspended",          Some("Suspended"),        "Suspended",   "spec.suspend"),
];

#[rustfmt::skip]
const MIGRATION_READINGS: &[Row] = &[
    // case                phase                     Argo CD        the message says
    ("declared",           None,                     "Progressing", "first read"),
    ("never",              Some("Planning"),         "Suspended",   "spec.policy.apply is Never"),
    ("awaiting approval",  Some("AwaitingApproval"), "Suspended",   "approval"),
    ("in sync",            Some("InSync"),           "Healthy",     "HistoryMatched"),
    ("dirty row",          Some("Blocked"),          "Degraded",    "HistoryDirty"),
    ("source gone",        Some("Failed"),           "Degraded",    "ConfigurationError"),
    ("suspended",          Some("Suspended"),        "Suspended",   "spec.suspend"),
];

/// The one script, registered under the key of each kind.
const SCRIPT: &str = "gitops/argocd/health.lua";

/// What Argo CD's engine made of one object.
#[derive(Debug, serde::Deserialize)]
struct Health {
    status: String,
    message: String,
}

/// Runs `argocd-health` with `script` over `objects`, one answer each.
fn argo_health(script: &str, objects: &[&Value]) -> anyhow::Result<Vec<Health>> {
    let dir = tempfile::tempdir()?;
    let mut files = Vec::new();
    for (i, obj) in objects.iter().enumerate() {
        let file = dir.path().join(format!("{i}.json"));
        std::fs::write(&file, serde_json::to_vec(obj)?)?;
        files.push(file);
    }
    let out = std::process::Command::new(tools::tool("argocd-health")?)
        .arg(tools::workspace_root().join(script))
        .args(&files)
        .output()
        .context("running argocd-health")?;
    anyhow::ensure!(
        out.status.success(),
        "argocd-health {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers = String::from_utf8(out.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<Vec<Health>, _>>()?;
    anyhow::ensure!(answers.len() == objects.len(), "{answers:?}");
    Ok(answers)
}

/// A reading table and the rows taken so far.
struct Readings {
    script: &'static str,
    table: &'static [Row],
    taken: Vec<&'static str>,
}

impl Readings {
    fn of(script: &'static str, table: &'static [Row]) -> Self {
        Readings {
            script,
            table,
            taken: Vec::new(),
        }
    }

    /// Checks `obj` against the row of `case`: its phase, then what Argo
    /// CD's engine says of it.
    fn take(&mut self, case: &'static str, obj: &Value) -> anyhow::Result<()> {
        let &(_, phase, health, says) = self
            .table
            .iter()
            .find(|r| r.0 == case)
            .with_context(|| format!("no row {case:?}"))?;
        let status = obj.get("status");
        assert_eq!(
            status.and_then(|s| s.get("phase")).and_then(Value::as_str),
            phase,
            "{case}: the object's phase: {status:#?}"
        );
        let read = argo_health(self.script, &[obj])?
            .pop()
            .context("an answer")?;
        assert_eq!(read.status, health, "{case}: {read:?} of {status:#?}");
        assert!(
            !read.message.is_empty() && read.message.to_lowercase().contains(&says.to_lowercase()),
            "{case}: the message should say {says:?}: {read:?}"
        );
        // The readings, for a person reading a failed run's output.
        eprintln!("{case}: {} {:?}", read.status, read.message);
        self.taken.push(case);
        Ok(())
    }

    /// Every row was taken.
    fn all_taken(&self) {
        let missing: Vec<_> = self
            .table
            .iter()
            .map(|r| r.0)
            .filter(|c| !self.taken.contains(c))
            .collect();
        assert!(missing.is_empty(), "rows never taken: {missing:?}");
    }
}

/// The object `orders` of kind `K` as the API server returns it, once the
/// typed reading of it passes `ok`.
async fn capture<K>(
    ns: &TestNamespace,
    operator: &Operator,
    what: &str,
    ok: impl Fn(&K) -> bool,
) -> anyhow::Result<Value>
where
    K: kube::Resource<DynamicType = ()> + DeserializeOwned,
{
    let api = untyped::<K>(ns);
    PATIENCE
        .poll(what, || {
            let api = api.clone();
            let ok = &ok;
            async move {
                let raw = serde_json::to_value(api.get("orders").await?)?;
                let typed: K = serde_json::from_value(raw.clone())?;
                anyhow::Ok(ok(&typed).then_some(raw))
            }
        })
        .await
        .with_context(|| operator.log())
}

/// The object `orders` of kind `K` as it is now.
async fn current<K>(ns: &TestNamespace) -> anyhow::Result<Value>
where
    K: kube::Resource<DynamicType = ()>,
{
    Ok(serde_json::to_value(untyped::<K>(ns).get("orders").await?)?)
}

/// The API of kind `K` in `ns`, answering objects untyped: every field the
/// API server returns, as Argo CD would read them.
fn untyped<K>(ns: &TestNamespace) -> Api<DynamicObject>
where
    K: kube::Resource<DynamicType = ()>,
{
    Api::namespaced_with(
        ns.client().clone(),
        ns.name(),
        &ApiResource::erase::<K>(&()),
    )
}

async fn patch_spec<K>(ns: &TestNamespace, spec: Value) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    ns.api::<K>()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await?;
    Ok(())
}

fn schema_phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn schema_stalled(s: &PtahSchema) -> Option<Reason> {
    let st = s.status.as_ref()?;
    (st.phase == Some(SchemaPhase::Blocked))
        .then(|| {
            st.conditions
                .iter()
                .find(|c| c.type_ == SchemaConditionType::Stalled)
                .map(|c| c.reason)
        })
        .flatten()
}

fn schema_plan_uid(s: &PtahSchema) -> Option<String> {
    s.status
        .as_ref()
        .and_then(|st| st.plan.as_ref())
        .map(|p| p.uid.clone())
}

/// [`executor::SCHEMA_SQL`] and a new column.
const ORDERS_WITH_NOTE: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL,\n  note varchar(32)\n);\n";

#[tokio::test]
async fn a_schema_reads_in_argo_cd_as_its_phase_says() -> anyhow::Result<()> {
    let mut argo = Readings::of(SCRIPT, SCHEMA_READINGS);
    let ns = TestNamespace::for_operator(harness().await, "gitops", "schema").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    // The Secret names a relay, so the test can take the database away.
    let mut relay = Relay::start(db.addr()?).await?;
    executor::schema_under(
        &ns,
        &db.through(relay.port())?,
        "orders",
        json!({"apply": "OnApproval"}),
    )
    .await?;
    // No manager yet: the object as a fresh sync leaves it.
    argo.take("declared", &current::<PtahSchema>(&ns).await?)?;
    let operator = Operator::start(&ns, webhook_configurations).await?;

    let awaiting = |s: &PtahSchema| schema_phase(s) == Some(SchemaPhase::AwaitingApproval);
    let obj = capture(&ns, &operator, "AwaitingApproval", awaiting).await?;
    argo.take("awaiting approval", &obj)?;
    let s: PtahSchema = serde_json::from_value(obj)?;
    approve_schema(&ns, &s, "first").await?;
    let in_sync = |s: &PtahSchema| schema_phase(s) == Some(SchemaPhase::InSync);
    let obj = capture(&ns, &operator, "InSync", in_sync).await?;
    argo.take("in sync", &obj)?;

    // A new column, approved while a session holds the table: the Apply
    // waits on the lock, and Applying lasts until the test lets it go.
    let first = schema_plan_uid(&serde_json::from_value(obj)?);
    ns.set_config_map_key("orders-schema", "schema.sql", ORDERS_WITH_NOTE)
        .await?;
    let obj = capture(&ns, &operator, "the new column awaiting", |s| {
        awaiting(s) && schema_plan_uid(s) != first
    })
    .await?;
    let mut lock = db.lock_table("orders", 25)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    approve_schema(&ns, &serde_json::from_value(obj)?, "second").await?;
    let applying = capture(&ns, &operator, "Applying", |s: &PtahSchema| {
        schema_phase(s) == Some(SchemaPhase::Applying)
    })
    .await;
    // The server session would sleep on with the lock after its client is
    // killed: end it there.
    db.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND query LIKE '%pg_sleep%'",
    )?;
    let _ = lock.kill();
    let _ = lock.wait();
    argo.take("applying", &applying?)?;
    capture(&ns, &operator, "InSync with the new column", |s| {
        in_sync(s)
            && s.status
                .as_ref()
                .and_then(|st| st.applied.as_ref())
                .is_some_and(|a| Some(&a.plan_uid) != first.as_ref())
    })
    .await?;

    // The column dropped again, with no allowDestructive: Blocked.
    ns.set_config_map_key("orders-schema", "schema.sql", executor::SCHEMA_SQL)
        .await?;
    let obj = capture(&ns, &operator, "Blocked, destructive", |s| {
        schema_stalled(s) == Some(Reason::DestructiveChangesDisabled)
    })
    .await?;
    argo.take("destructive", &obj)?;

    // The database gone, and a read asked for by an edit: Failed.
    relay.stop().await;
    patch_spec::<PtahSchema>(&ns, json!({"interval": "1h"})).await?;
    let obj = capture(&ns, &operator, "Failed", |s: &PtahSchema| {
        schema_phase(s) == Some(SchemaPhase::Failed)
    })
    .await?;
    argo.take("database gone", &obj)?;

    patch_spec::<PtahSchema>(&ns, json!({"suspend": true})).await?;
    let obj = capture(&ns, &operator, "Suspended", |s: &PtahSchema| {
        schema_phase(s) == Some(SchemaPhase::Suspended)
    })
    .await?;
    argo.take("suspended", &obj)?;

    argo.all_taken();
    relay.resume().await?;
    operator.finish::<PtahSchema>(&ns).await
}

fn migration_phase(m: &PtahMigration) -> Option<MigrationPhase> {
    m.status.as_ref().and_then(|st| st.phase)
}

fn migration_ready(m: &PtahMigration) -> Option<(ConditionStatus, Reason)> {
    let st = m.status.as_ref()?;
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == MigrationConditionType::Ready)?;
    Some((c.status, c.reason))
}

fn migration_stalled(m: &PtahMigration) -> Option<Reason> {
    let st = m.status.as_ref()?;
    (st.phase == Some(MigrationPhase::Blocked))
        .then(|| {
            st.conditions
                .iter()
                .find(|c| c.type_ == MigrationConditionType::Stalled)
                .map(|c| c.reason)
        })
        .flatten()
}

fn generation_seen(m: &PtahMigration) -> bool {
    m.status.as_ref().and_then(|st| st.observed_generation) == m.metadata.generation
}

#[tokio::test]
async fn a_migration_reads_in_argo_cd_as_its_phase_says() -> anyhow::Result<()> {
    let mut argo = Readings::of(SCRIPT, MIGRATION_READINGS);
    let ns = TestNamespace::for_operator(harness().await, "gitops", "migration").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    executor::migration_under(
        &ns,
        &db,
        "orders",
        json!({"apply": "Never"}),
        executor::migration_files(),
    )
    .await?;
    argo.take("declared", &current::<PtahMigration>(&ns).await?)?;
    let operator = Operator::start(&ns, webhook_configurations).await?;

    let obj = capture(
        &ns,
        &operator,
        "Planning under Never",
        |m: &PtahMigration| {
            migration_phase(m) == Some(MigrationPhase::Planning)
                && migration_ready(m) == Some((ConditionStatus::False, Reason::ApplyDisabled))
        },
    )
    .await?;
    argo.take("never", &obj)?;

    patch_spec::<PtahMigration>(&ns, json!({"policy": {"apply": "OnApproval"}})).await?;
    let obj = capture(&ns, &operator, "AwaitingApproval", |m: &PtahMigration| {
        migration_phase(m) == Some(MigrationPhase::AwaitingApproval) && generation_seen(m)
    })
    .await?;
    argo.take("awaiting approval", &obj)?;
    let m: PtahMigration = serde_json::from_value(obj)?;
    let plan = m
        .status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("status.plan")?;
    create_admitted::<PtahMigrationApproval>(
        &ns,
        json!({
            "apiVersion": "operator.ptah.run/v1alpha1",
            "kind": "PtahMigrationApproval",
            "metadata": {"name": "first"},
            "spec": {
                "migrationRef": {"name": m.name_any(), "uid": m.uid().unwrap_or_default()},
                "planRef": {"name": plan.name, "uid": plan.uid},
                "planFingerprint": plan.fingerprint,
            }
        }),
    )
    .await?;
    let obj = capture(
        &ns,
        &operator,
        "InSync after the run",
        |m: &PtahMigration| {
            migration_phase(m) == Some(MigrationPhase::InSync)
                && m.status.as_ref().is_some_and(|st| st.last_run.is_some())
        },
    )
    .await?;
    argo.take("in sync", &obj)?;

    // A third version whose third statement fails (a duplicate key), run
    // under Always: its dirty row holds the migration Blocked.
    patch_spec::<PtahMigration>(&ns, json!({"policy": {"apply": "Always"}})).await?;
    capture(&ns, &operator, "the policy read", |m: &PtahMigration| {
        migration_phase(m) == Some(MigrationPhase::InSync) && generation_seen(m)
    })
    .await?;
    let mut files = executor::migration_files();
    files["0000000003_carriers.up.sql"] = json!(
        "CREATE TABLE carriers (id bigint PRIMARY KEY);\nINSERT INTO carriers (id) VALUES (1);\nINSERT INTO carriers (id) VALUES (1);\n"
    );
    files["0000000003_carriers.down.sql"] = json!("DROP TABLE carriers;\n");
    let cms = ns.api::<ConfigMap>();
    let mut cm = cms.get("orders-migrations").await?;
    cm.data = Some(serde_json::from_value(files)?);
    cms.replace("orders-migrations", &Default::default(), &cm)
        .await?;
    let obj = capture(&ns, &operator, "Blocked by the dirty row", |m| {
        migration_stalled(m) == Some(Reason::HistoryDirty)
    })
    .await?;
    argo.take("dirty row", &obj)?;

    // The source named is no ConfigMap: a configuration error, Failed.
    patch_spec::<PtahMigration>(
        &ns,
        json!({"source": {"configMap": {"name": "orders-gone"}}}),
    )
    .await?;
    let obj = capture(&ns, &operator, "Failed", |m: &PtahMigration| {
        migration_phase(m) == Some(MigrationPhase::Failed) && generation_seen(m)
    })
    .await?;
    argo.take("source gone", &obj)?;

    patch_spec::<PtahMigration>(&ns, json!({"suspend": true})).await?;
    let obj = capture(&ns, &operator, "Suspended", |m: &PtahMigration| {
        migration_phase(m) == Some(MigrationPhase::Suspended)
    })
    .await?;
    argo.take("suspended", &obj)?;

    argo.all_taken();
    operator.finish::<PtahMigration>(&ns).await
}

/// A status as the manager writes it, in `phase` with `Ready` set for
/// generation `seen`, on an object at `generation`.
fn hand_written(kind: &str, phase: &str, generation: i64, seen: i64) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": kind,
        "metadata": {"name": "orders", "namespace": "shop", "generation": generation},
        "status": {
            "observedGeneration": seen,
            "phase": phase,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "InSync", "message": "",
                "observedGeneration": seen, "lastTransitionTime": "2026-12-01T00:00:00Z",
            }],
        },
    })
}

/// No run of the manager holds a status behind its spec for long enough to
/// take it, so this one is written by hand: an edit not yet observed reads
/// Progressing, naming the generation, in any phase; the same status once
/// observed reads as its phase.
#[test]
fn a_status_behind_the_spec_reads_progressing() -> anyhow::Result<()> {
    for kind in ["PtahSchema", "PtahMigration"] {
        let behind = [
            hand_written(kind, "InSync", 3, 2),
            hand_written(kind, "Blocked", 3, 2),
            hand_written(kind, "AwaitingApproval", 3, 2),
        ];
        let seen = hand_written(kind, "InSync", 3, 3);
        let mut objects: Vec<&Value> = behind.iter().collect();
        objects.push(&seen);
        let read = argo_health(SCRIPT, &objects)?;
        for (obj, r) in behind.iter().zip(&read) {
            assert_eq!(r.status, "Progressing", "{kind} {obj}: {r:?}");
            assert_eq!(
                r.message, "waiting for the operator to observe generation 3",
                "{kind}: {r:?}"
            );
        }
        assert_eq!(read[3].status, "Healthy", "{kind}: {:?}", read[3]);
    }
    Ok(())
}

/// The block of `docs/gitops.md` under the `argocd-cm` key `key`, without
/// its YAML indentation.
fn documented_script(doc: &str, key: &str) -> Option<String> {
    let mut lines = doc.lines().skip_while(|l| l.trim() != format!("{key}: |"));
    lines.next()?;
    let block: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect();
    Some(block.join("\n").trim_end().to_string())
}

/// People copy the `argocd-cm` of the docs, so it must be the scripts
/// tested here.
#[test]
fn the_argocd_cm_of_the_docs_holds_the_tested_scripts() -> anyhow::Result<()> {
    let root = tools::workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/gitops.md"))?;
    let shipped = std::fs::read_to_string(root.join(SCRIPT))?;
    for kind in ["PtahSchema", "PtahMigration"] {
        let key = format!("resource.customizations.health.operator.ptah.run_{kind}");
        let documented =
            documented_script(&doc, &key).with_context(|| format!("{key} in docs/gitops.md"))?;
        assert_eq!(documented, shipped.trim_end(), "{key} is not {SCRIPT}");
    }
    Ok(())
}
