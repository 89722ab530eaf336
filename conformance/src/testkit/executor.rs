//! Resources that drive the executor end to end: a PtahSchema from a
//! ConfigMap and a PtahMigration from a ConfigMap directory, each with
//! `apply: Always` on a [`TestDatabase`] of the test's own, so that every
//! database operation (Observe, Plan, Apply, History, a migration's Apply)
//! runs as a Job through the pinned Ptah CLI.

use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::database::TestDatabase;
use super::namespace::TestNamespace;

/// The declared schema: one table.
pub const SCHEMA_SQL: &str =
    "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL\n);\n";

/// The migration directory: two versions, each with both halves.
pub fn migration_files() -> Value {
    json!({
        "0000000001_orders.up.sql": "CREATE TABLE orders (id bigint PRIMARY KEY);\n",
        "0000000001_orders.down.sql": "DROP TABLE orders;\n",
        "0000000002_customers.up.sql": "CREATE TABLE customers (id bigint PRIMARY KEY, name varchar(64) NOT NULL);\n",
        "0000000002_customers.down.sql": "DROP TABLE customers;\n",
    })
}

async fn create(ns: &TestNamespace, kind: &str, plural: &str, obj: Value) -> anyhow::Result<()> {
    let gvk = GroupVersionKind::gvk("operator.ptah.run", "v1alpha1", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client().clone(), ns.name(), &resource);
    api.create(&PostParams::default(), &serde_json::from_value(obj)?)
        .await?;
    Ok(())
}

/// `spec.target` on `db`, through the Secret `<name>-db`.
fn target(db: &TestDatabase, name: &str) -> Value {
    json!({
        "engine": db.engine.spec(),
        "urlFrom": {"name": format!("{name}-db"), "key": "url"},
        "coordinationKey": name,
    })
}

/// The Secret `<name>-db`, the ConfigMap `<name>-schema` holding
/// [`SCHEMA_SQL`], and the PtahSchema `name` (`apply: Always`).
pub async fn schema(ns: &TestNamespace, db: &TestDatabase, name: &str) -> anyhow::Result<()> {
    schema_under(ns, db, name, json!({"apply": "Always"})).await
}

/// [`schema`] under `spec.policy` = `policy`.
pub async fn schema_under(
    ns: &TestNamespace,
    db: &TestDatabase,
    name: &str,
    policy: Value,
) -> anyhow::Result<()> {
    ns.create::<k8s_openapi::api::core::v1::ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-schema")},
        "data": {"schema.sql": SCHEMA_SQL},
    }))
    .await?;
    let source = json!({"configMap": {"name": format!("{name}-schema"), "keys": ["schema.sql"]}});
    schema_from(ns, db, name, source, policy).await
}

/// The Secret `<name>-db` and the PtahSchema `name` reading `spec.source` =
/// `source` under `spec.policy` = `policy`.
pub async fn schema_from(
    ns: &TestNamespace,
    db: &TestDatabase,
    name: &str,
    source: Value,
    policy: Value,
) -> anyhow::Result<()> {
    declared(ns, db, "PtahSchema", "ptahschemas", name, source, policy).await
}

/// The Secret `<name>-db`, the ConfigMap `<name>-migrations` holding
/// [`migration_files`], and the PtahMigration `name` (`apply: Always`).
pub async fn migration(ns: &TestNamespace, db: &TestDatabase, name: &str) -> anyhow::Result<()> {
    migration_under(ns, db, name, json!({"apply": "Always"}), migration_files()).await
}

/// The ConfigMap `<name>-migrations` holding `files`, and [`migration_from`]
/// it under `spec.policy` = `policy`.
pub async fn migration_under(
    ns: &TestNamespace,
    db: &TestDatabase,
    name: &str,
    policy: Value,
    files: Value,
) -> anyhow::Result<()> {
    ns.create::<k8s_openapi::api::core::v1::ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-migrations")},
        "data": files,
    }))
    .await?;
    let source = json!({"configMap": {"name": format!("{name}-migrations")}});
    migration_from(ns, db, name, source, policy).await
}

/// The Secret `<name>-db` and the PtahMigration `name` reading
/// `spec.source` = `source` under `spec.policy` = `policy`.
pub async fn migration_from(
    ns: &TestNamespace,
    db: &TestDatabase,
    name: &str,
    source: Value,
    policy: Value,
) -> anyhow::Result<()> {
    declared(
        ns,
        db,
        "PtahMigration",
        "ptahmigrations",
        name,
        source,
        policy,
    )
    .await
}

/// The Secret `<name>-db` and the `kind` `name` on it, reading `source`
/// under `policy`, retried 5 s after a failure.
async fn declared(
    ns: &TestNamespace,
    db: &TestDatabase,
    kind: &str,
    plural: &str,
    name: &str,
    source: Value,
    policy: Value,
) -> anyhow::Result<()> {
    db.secret(ns, &format!("{name}-db")).await?;
    let obj = json!({
        "apiVersion": "operator.ptah.run/v1alpha1", "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "target": target(db, name),
            "source": source,
            "policy": policy,
            "execution": {"failureRetryInterval": "5s"},
        },
    });
    create(ns, kind, plural, obj).await
}
