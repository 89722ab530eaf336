//! `kubectl ptah preview` end to end, on the harness's PostgreSQL and
//! MariaDB: a person's local files planned against the resource's live
//! database before they are merged, by the pinned kubectl and the plugin as
//! a person runs them.
//!
//! * A schema InSync (`apply: Always`, `protectedTables: [audit]`): its own
//!   files preview as no change (exit 0); an added column as a change that
//!   would apply at once (exit 2, the statement shown, and as markdown for
//!   a pull request); a dropped column as refused, destructive (exit 3,
//!   naming the statement); a new `audit` table as refused, protected
//!   (exit 3).
//! * A migration at version 2: its own files as no change (exit 0); a third
//!   version as a change waiting for an approval (`OnApproval`, exit 2, its
//!   SQL shown); an edited version 1 as refused by the history (exit 3).
//! * Nothing a preview ran reached the database (read with its own
//!   client), the resource is as it was (phase, source digest, no plan),
//!   and the API server's audit log shows the previews' ConfigMaps created
//!   and no approval, plan object or snapshot created while they ran; the
//!   previews are deleted after.

use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use serde_json::{Value, json};

use conformance::harness::Harness;
use conformance::testkit::audit;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor::{self, SCHEMA_SQL};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::{Operator, PATIENCE};
use conformance::testkit::plugin::{Plugin, Ran};
use operator::admission::webhook_configurations;
use operator::api::{PtahMigration, PtahSchema};
use operator::execution::preview::PREVIEW_LABEL;

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const WITH_NOTE: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL,\n  note text\n);\n";
const WITHOUT_CUSTOMER: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY\n);\n";
const WITH_AUDIT: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL\n);\nCREATE TABLE audit (\n  id bigint PRIMARY KEY\n);\n";

/// A directory holding `files` (name → text).
fn dir_of(files: &Value) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, text) in files.as_object().context("files")? {
        std::fs::write(dir.path().join(name), text.as_str().context("text")?)?;
    }
    Ok(dir)
}

/// `kubectl ptah preview KIND/orders --FLAG DIR [more]`, which must exit
/// `code`; its output.
fn preview(
    k: &Plugin,
    target: &str,
    flag: &str,
    dir: &Path,
    more: &[&str],
    code: i32,
) -> anyhow::Result<Ran> {
    let dir = dir.to_str().context("a path")?;
    let mut args = vec!["preview", target, flag, dir, "--timeout", "180s"];
    args.extend(more);
    let ran = k.run(&args)?;
    anyhow::ensure!(
        ran.code == code,
        "preview {target} {flag} exited {} (want {code}):\n{}\n{}",
        ran.code,
        ran.stdout,
        ran.stderr
    );
    Ok(ran)
}

/// What the audit log shows was created in the namespace since `since`:
/// (resource, name).
fn created(
    harness: &Harness,
    since: audit::Mark,
    ns: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    Ok(audit::events_in(harness, since, ns)?
        .iter()
        .map(audit::verb_and_resource)
        .filter(|(verb, ..)| verb == "create")
        .map(|(_, resource, name)| (resource, name))
        .collect())
}

/// The previews' ConfigMaps were created, and nothing else a plan or a
/// decision is made of; and they are gone.
async fn nothing_stored(
    ns: &TestNamespace,
    since: audit::Mark,
    previews: usize,
) -> anyhow::Result<()> {
    let made = created(ns.harness(), since, ns.name())?;
    let config_maps: Vec<&String> = made
        .iter()
        .filter(|(r, _)| r == "configmaps")
        .map(|(_, n)| n)
        .collect();
    // A create by generateName may be audited before its name is known.
    let preview_maps = config_maps
        .iter()
        .filter(|n| n.is_empty() || n.starts_with("ptah-preview-"))
        .count();
    anyhow::ensure!(
        preview_maps == previews,
        "the audit log shows {preview_maps} preview ConfigMaps created, not {previews}: {made:?}"
    );
    anyhow::ensure!(
        !config_maps.iter().any(|n| n.starts_with("ptah-src-")),
        "a preview made a snapshot: {made:?}"
    );
    let decided: Vec<&(String, String)> = made
        .iter()
        .filter(|(r, _)| r.ends_with("approvals") || r.contains("plan"))
        .collect();
    anyhow::ensure!(
        decided.is_empty(),
        "a preview made an approval or a plan: {decided:?}"
    );
    PATIENCE
        .poll("the previews to be deleted", || async {
            let left = ns
                .api::<ConfigMap>()
                .list(&ListParams::default().labels(&format!("{PREVIEW_LABEL}=true")))
                .await?;
            Ok(left.items.is_empty().then_some(()))
        })
        .await
}

/// A namespace of the test's own and a database on `engine`.
async fn on(engine: Engine, prefix: &str) -> anyhow::Result<(TestNamespace, TestDatabase)> {
    let test = engine.spec().to_ascii_lowercase();
    let ns = TestNamespace::for_operator(harness().await, prefix, &test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    Ok((ns, db))
}

/// A manager and the plugin, once `target` is `InSync`.
async fn started(ns: &TestNamespace, target: &str) -> anyhow::Result<(Operator, Plugin)> {
    let operator = Operator::start(ns, webhook_configurations).await?;
    let k = Plugin::new(ns)?;
    in_sync(&k, &operator, target)?;
    Ok((operator, k))
}

fn in_sync(k: &Plugin, operator: &Operator, target: &str) -> anyhow::Result<()> {
    let waited = k.run(&["wait", target, "--timeout", "180s"])?;
    anyhow::ensure!(waited.code == 0, "{}\n{}", waited.stderr, operator.log());
    Ok(())
}

async fn schema_previews(engine: Engine) -> anyhow::Result<()> {
    let (ns, db) = on(engine, "preview").await?;
    executor::schema_under(
        &ns,
        &db,
        "orders",
        json!({"apply": "Always", "protectedTables": ["audit"]}),
    )
    .await?;
    let (operator, k) = started(&ns, "schema/orders").await?;
    let before: PtahSchema = ns.api().get("orders").await?;
    let since = audit::mark(ns.harness())?;

    let same = dir_of(&json!({"schema.sql": SCHEMA_SQL}))?;
    let ran = preview(&k, "schema/orders", "--dir", same.path(), &[], 0)
        .with_context(|| operator.log())?;
    assert!(ran.stdout.contains("Verdict: NoChange"), "{}", ran.stdout);

    let note = dir_of(&json!({"schema.sql": WITH_NOTE}))?;
    let ran = preview(&k, "schema/orders", "--dir", note.path(), &[], 2)?;
    assert!(
        ran.stdout.contains("note"),
        "the statement is shown:\n{}",
        ran.stdout
    );
    assert!(ran.stdout.contains("destructive: no"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("Verdict: Change (NotRequired)"),
        "{}",
        ran.stdout
    );
    let md = preview(
        &k,
        "schema/orders",
        "--dir",
        note.path(),
        &["-o", "markdown"],
        2,
    )?;
    assert!(
        md.stdout.starts_with(&format!(
            "### 📝 Ptah plan preview: PtahSchema {}/orders",
            ns.name()
        )),
        "{}",
        md.stdout
    );
    assert!(md.stdout.contains("```sql\n"), "{}", md.stdout);

    let dropped = dir_of(&json!({"schema.sql": WITHOUT_CUSTOMER}))?;
    let ran = preview(&k, "schema/orders", "--dir", dropped.path(), &[], 3)?;
    assert!(
        ran.stdout.contains("Refused (DestructiveChangesDisabled)")
            && ran.stdout.to_lowercase().contains("customer"),
        "{}",
        ran.stdout
    );

    let audited = dir_of(&json!({"schema.sql": WITH_AUDIT}))?;
    let ran = preview(&k, "schema/orders", "--dir", audited.path(), &[], 3)?;
    assert!(
        ran.stdout.contains("Refused (ProtectedTable)") && ran.stdout.contains("audit"),
        "{}",
        ran.stdout
    );

    // Nothing reached the database or the resource.
    let columns = db.columns("orders")?;
    let has = |c: &str| columns.iter().any(|l| l.split(' ').next() == Some(c));
    assert!(has("customer") && !has("note"), "{columns:?}");
    assert!(!db.tables()?.contains(&"audit".to_string()));
    let after: PtahSchema = ns.api().get("orders").await?;
    let (b, a) = (
        before.status.unwrap_or_default(),
        after.status.unwrap_or_default(),
    );
    assert_eq!(a.phase, b.phase);
    assert_eq!(
        a.source.map(|s| s.content_digest),
        b.source.map(|s| s.content_digest)
    );
    assert!(a.plan.is_none(), "a preview published a plan");
    nothing_stored(&ns, since, 5).await?;
    operator.finish::<PtahSchema>(&ns).await
}

async fn migration_previews(engine: Engine) -> anyhow::Result<()> {
    let (ns, db) = on(engine, "preview-m").await?;
    executor::migration_under(
        &ns,
        &db,
        "orders",
        json!({"apply": "Always"}),
        executor::migration_files(),
    )
    .await?;
    let (operator, k) = started(&ns, "migration/orders").await?;
    // Later plans wait for an approval: what the third version previews as.
    ns.api::<PtahMigration>()
        .patch(
            "orders",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"policy": {"apply": "OnApproval"}}})),
        )
        .await?;
    in_sync(&k, &operator, "migration/orders")?;
    let before: PtahMigration = ns.api().get("orders").await?;
    let since = audit::mark(ns.harness())?;

    let same = dir_of(&executor::migration_files())?;
    let ran = preview(&k, "migration/orders", "--migrations", same.path(), &[], 0)
        .with_context(|| operator.log())?;
    assert!(
        ran.stdout.contains("database at version 2"),
        "{}",
        ran.stdout
    );

    let mut third = executor::migration_files();
    third["0000000003_notes.up.sql"] = json!("CREATE TABLE notes (id bigint PRIMARY KEY);\n");
    third["0000000003_notes.down.sql"] = json!("DROP TABLE notes;\n");
    let third = dir_of(&third)?;
    let ran = preview(&k, "migration/orders", "--migrations", third.path(), &[], 2)?;
    assert!(
        ran.stdout.contains("-- version 3") && ran.stdout.contains("CREATE TABLE notes"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("Verdict: Change (AwaitingApproval)"),
        "{}",
        ran.stdout
    );

    let mut edited = executor::migration_files();
    edited["0000000001_orders.up.sql"] =
        json!("CREATE TABLE orders (id bigint PRIMARY KEY, note text);\n");
    let edited = dir_of(&edited)?;
    let ran = preview(
        &k,
        "migration/orders",
        "--migrations",
        edited.path(),
        &[],
        3,
    )?;
    assert!(
        ran.stdout.contains("Refused (HistoryModified)") && ran.stdout.contains("version(s) 1 "),
        "{}",
        ran.stdout
    );

    assert!(!db.tables()?.contains(&"notes".to_string()));
    let after: PtahMigration = ns.api().get("orders").await?;
    let (b, a) = (
        before.status.unwrap_or_default(),
        after.status.unwrap_or_default(),
    );
    assert_eq!(a.phase, b.phase);
    assert_eq!(
        a.source.map(|s| s.content_digest),
        b.source.map(|s| s.content_digest)
    );
    assert_eq!(a.plan, b.plan, "a preview published a plan");
    nothing_stored(&ns, since, 3).await?;
    operator.finish::<PtahMigration>(&ns).await
}

#[tokio::test]
async fn a_schema_preview_on_postgresql_plans_and_judges_without_storing() -> anyhow::Result<()> {
    schema_previews(Engine::Postgres).await
}

#[tokio::test]
async fn a_schema_preview_on_mariadb_plans_and_judges_without_storing() -> anyhow::Result<()> {
    schema_previews(Engine::MariaDb).await
}

#[tokio::test]
async fn a_migration_preview_on_postgresql_reads_the_history_without_storing() -> anyhow::Result<()>
{
    migration_previews(Engine::Postgres).await
}

#[tokio::test]
async fn a_migration_preview_on_mariadb_reads_the_history_without_storing() -> anyhow::Result<()> {
    migration_previews(Engine::MariaDb).await
}
