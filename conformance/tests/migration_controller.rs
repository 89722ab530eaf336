//! The PtahMigration controller end to end, on a database that refuses every
//! connection, so that each History read fails where these tests need it to
//! (the runs that succeed are in `executor_migration.rs`): a real manager
//! process against the real API server, Job controller and process kubelet.
//!
//! * A ConfigMap migration directory is snapshotted by the manager (no Job),
//!   the History read is claimed and dispatched as one Job, its runner
//!   delivers its result (Ptah could not connect), and the read keeps its
//!   claim and runs again after `failureRetryInterval`.
//! * A PtahSchema and a PtahMigration on one database without `sharedRealm`
//!   are both `RealmConflict`: the census counts both families.
//! * A restore that put back the metadata without status (the test creates
//!   the object with the unresolved-run annotation) holds the resource
//!   Blocked with `status.unresolvedRun` and the journal's `RunFinished`; an
//!   acknowledgment of that run releases it (`RunAcknowledged`,
//!   `resolvedRun`) and the annotation copy goes.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::{Value, json};

use conformance::harness::Harness;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::{Operator, create_admitted};
use conformance::testkit::wait::Patience;
use operator::admission::webhook_configurations;
use operator::api::condition::{MigrationConditionType, MigrationPhase, Reason, SchemaPhase};
use operator::api::journal::JournalEntryType;
use operator::api::migration::PtahMigration;
use operator::api::schema::PtahSchema;
use operator::api::status::OperationType;
use operator::execution::job::{ANNOTATION_ATTEMPT, ANNOTATION_OPERATION_ID};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const PATIENCE: Patience = Patience::new(Duration::from_secs(120), Duration::from_millis(250));

async fn namespace(test: &str) -> anyhow::Result<TestNamespace> {
    TestNamespace::for_operator(harness().await, "migctl", test).await
}

/// A MariaDB URL whose server refuses every connection.
const UNREACHABLE_DB: &str = "mysql://ptah:never-used@127.0.0.1:1/orders";

async fn setup(ns: &TestNamespace) -> anyhow::Result<()> {
    ns.create::<Secret>(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db"},
        "stringData": {"url": UNREACHABLE_DB},
    }))
    .await?;
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "migrations"},
        "data": {
            "0000000001_orders.up.sql": "CREATE TABLE orders (id int PRIMARY KEY);",
            "0000000001_orders.down.sql": "DROP TABLE orders;",
        },
    }))
    .await?;
    Ok(())
}

fn migration(name: &str, key: &str, retry: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahMigration",
        "metadata": {"name": name},
        "spec": {
            "target": {"engine": "MariaDB", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": key},
            "source": {"configMap": {"name": "migrations"}},
            "policy": {"apply": "OnApproval"},
            "execution": {"failureRetryInterval": retry},
        },
    })
}

async fn until(
    ns: &TestNamespace,
    name: &str,
    what: &str,
    ok: impl Fn(&PtahMigration) -> bool,
) -> anyhow::Result<PtahMigration> {
    ns.until(&PATIENCE, name, what, ok).await
}

fn failed_history_reads(m: &PtahMigration) -> usize {
    m.status
        .as_ref()
        .map(|st| {
            st.journal
                .iter()
                .filter(|e| {
                    e.type_ == JournalEntryType::OperationFailed
                        && e.operation == Some(OperationType::History)
                })
                .map(|e| e.count.unwrap_or(1) as usize)
                .sum()
        })
        .unwrap_or(0)
}

async fn delete_all(ns: &TestNamespace) -> anyhow::Result<()> {
    ns.delete_all::<PtahMigration>(&PATIENCE).await?;
    ns.delete_all::<PtahSchema>(&PATIENCE).await
}

#[tokio::test]
async fn a_configmap_migration_is_snapshotted_and_each_history_attempt_has_one_job()
-> anyhow::Result<()> {
    let ns = namespace("history").await?;
    setup(&ns).await?;
    ns.create::<PtahMigration>(migration("orders", "orders", "5s"))
        .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;

    let m = until(&ns, "orders", "two failed History reads", |m| {
        failed_history_reads(m) >= 2
    })
    .await
    .with_context(|| manager.log())?;
    let st = m.status.as_ref().context("status")?;
    let src = st.source.as_ref().context("the snapshot")?;
    assert!(
        src.config_map.is_some(),
        "Resolve was the manager's snapshot"
    );
    let resolved = st
        .conditions
        .iter()
        .find(|c| c.type_ == MigrationConditionType::ArtifactResolved)
        .context("ArtifactResolved")?;
    assert_eq!(resolved.reason, Reason::SnapshotTaken);
    let claim = st
        .active_operation
        .as_ref()
        .context("the read keeps its claim")?;
    assert_eq!(claim.type_, OperationType::History);
    assert!(claim.attempt >= 2);
    let failed = st
        .conditions
        .iter()
        .find(|c| c.type_ == MigrationConditionType::ReconciliationFailed)
        .context("ReconciliationFailed")?;
    assert!(
        failed.message.contains("connection refused") && !failed.message.contains("never-used"),
        "the result delivered to the receiver names why: {}",
        failed.message
    );
    assert!(
        claim.lease_epoch.is_none(),
        "reading history takes no Lease"
    );

    let jobs = ns.api::<Job>().list(&ListParams::default()).await?;
    let per_attempt: Vec<(String, String)> = jobs
        .items
        .iter()
        .map(|j| {
            let a = j.annotations();
            (
                a.get(ANNOTATION_OPERATION_ID).cloned().unwrap_or_default(),
                a.get(ANNOTATION_ATTEMPT).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let distinct: BTreeSet<_> = per_attempt.iter().collect();
    assert_eq!(
        distinct.len(),
        per_attempt.len(),
        "one Job per attempt: {per_attempt:?}"
    );
    assert!(
        jobs.items
            .iter()
            .all(|j| j.name_any().starts_with("ptah-m-history-")),
        "every Job is a History read of the migration"
    );
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn a_schema_and_a_migration_on_one_database_conflict() -> anyhow::Result<()> {
    let ns = namespace("realm").await?;
    setup(&ns).await?;
    ns.create::<PtahMigration>(migration("orders", "shop-db", "1h"))
        .await?;
    ns.create::<PtahSchema>(json!({
        "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
        "metadata": {"name": "orders"},
        "spec": {
            "target": {"engine": "MySQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": "shop-db"},
            "source": {"configMap": {"name": "migrations"}},
        },
    }))
    .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    until(&ns, "orders", "the migration's RealmConflict", |m| {
        let st = m.status.as_ref();
        st.and_then(|s| s.phase) == Some(MigrationPhase::Blocked)
            && st.is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == MigrationConditionType::Stalled && c.reason == Reason::RealmConflict
                })
            })
    })
    .await
    .with_context(|| manager.log())?;
    let schemas = ns.api::<PtahSchema>();
    PATIENCE
        .poll("the schema's RealmConflict", || {
            let schemas = schemas.clone();
            async move {
                let s = schemas.get("orders").await?;
                anyhow::Ok(
                    (s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::Blocked))
                        .then_some(()),
                )
            }
        })
        .await?;
    assert!(
        ns.api::<Job>()
            .list(&ListParams::default())
            .await?
            .items
            .is_empty(),
        "neither read the database"
    );
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn a_hold_put_back_from_its_annotation_blocks_until_acknowledged() -> anyhow::Result<()> {
    use operator::api::annotations::UNRESOLVED_RUN;
    use operator::api::approval::PtahMigrationRunAcknowledgment;
    let ns = namespace("restore").await?;
    setup(&ns).await?;
    // What a restore puts back: the metadata with the hold's copy, no status.
    let operation = format!("sha256:{}", "ab".repeat(32));
    let run = json!({
        "operationID": operation,
        "outcome": "Unknown",
        "authorization": "Approval",
        "planName": "orders-1",
        "jobName": "ptah-m-apply-orders-abababababababab",
        "finishedAt": "2026-11-30T08:00:00Z",
        "recordedAt": "2026-11-30T08:00:01Z",
    });
    let mut manifest = migration("orders", "orders", "1h");
    manifest["metadata"]["annotations"] = json!({UNRESOLVED_RUN: run.to_string()});
    let created = ns.create::<PtahMigration>(manifest).await?;
    // Its webhooks stamp the acknowledgment, as a person's would be.
    let manager = Operator::start(&ns, webhook_configurations).await?;

    let m = until(&ns, "orders", "the hold back from its annotation", |m| {
        m.status
            .as_ref()
            .and_then(|st| st.unresolved_run.as_ref())
            .is_some_and(|r| r.operation_id == operation)
    })
    .await
    .with_context(|| manager.log())?;
    let st = m.status.as_ref().context("status")?;
    assert_eq!(st.phase, Some(MigrationPhase::Blocked));
    assert!(
        st.journal
            .iter()
            .any(|e| e.type_ == JournalEntryType::RunFinished
                && e.operation_id.as_deref() == Some(operation.as_str())),
        "the journal holds the run the lost status held: {:?}",
        st.journal
    );

    // A person establishes what the run did and acknowledges it.
    create_admitted::<PtahMigrationRunAcknowledgment>(
        &ns,
        json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahMigrationRunAcknowledgment",
            "metadata": {"name": "orders-run"},
            "spec": {
                "migrationRef": {"name": "orders", "uid": created.metadata.uid},
                "operationID": operation,
            },
        }),
    )
    .await?;
    let m = until(&ns, "orders", "the hold released", |m| {
        m.status
            .as_ref()
            .is_some_and(|st| st.unresolved_run.is_none() && st.resolved_run.is_some())
    })
    .await
    .with_context(|| manager.log())?;
    let st = m.status.as_ref().context("status")?;
    assert!(
        st.journal
            .iter()
            .any(|e| e.type_ == JournalEntryType::RunAcknowledged
                && e.operation_id.as_deref() == Some(operation.as_str())),
        "RunAcknowledged joins the run by its operationID: {:?}",
        st.journal
    );
    let api = ns.api::<PtahMigration>();
    PATIENCE
        .poll("the annotation copy removed", || {
            let api = api.clone();
            async move {
                let m = api.get("orders").await?;
                anyhow::Ok((!m.annotations().contains_key(UNRESOLVED_RUN)).then_some(()))
            }
        })
        .await?;
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}
