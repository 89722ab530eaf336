//! The executor end to end for versioned migrations: a PtahMigration from a
//! ConfigMap directory, on a database of the test's own on the harness's
//! PostgreSQL and on its MariaDB, driven by a real manager. The History Job
//! reads Ptah's status and the revision table; the Apply Job runs `ptah
//! migrations up` with the runner as its pre-up hook, which compares Ptah's
//! selection under the migration lock with the approved sequence; the
//! history read back after the run is the verdict: `InSync`, reason
//! `HistoryMatched`, the run in `status.lastRun`, the rows in
//! `status.history.revisions`, and the tables in the database.

use std::time::Duration;

use anyhow::Context;

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::wait::Patience;
use operator::api::condition::{MigrationConditionType, MigrationPhase, Reason};
use operator::api::journal::JournalEntryType;
use operator::api::migration::{PtahMigration, RunOutcome};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const PATIENCE: Patience = Patience::new(Duration::from_secs(240), Duration::from_millis(250));

async fn runs(engine: Engine, test: &str) -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "exmig", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    executor::migration(&ns, &db, "orders").await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;

    let m = ns
        .until(
            &PATIENCE,
            "orders",
            "InSync after a run",
            |m: &PtahMigration| {
                m.status.as_ref().is_some_and(|st| {
                    st.phase == Some(MigrationPhase::InSync) && st.last_run.is_some()
                })
            },
        )
        .await
        .with_context(|| manager.log())?;
    let st = m.status.as_ref().context("status")?;
    let ready = st
        .conditions
        .iter()
        .find(|c| c.type_ == MigrationConditionType::Ready)
        .context("Ready")?;
    assert_eq!(ready.reason, Reason::HistoryMatched, "{ready:?}");
    let run = st.last_run.as_ref().context("lastRun")?;
    assert_eq!(run.outcome, RunOutcome::Applied, "{run:?}");
    assert_eq!(run.applied_versions, [1, 2]);
    assert!(run.failure.is_none(), "{run:?}");
    assert!(run.target_identity_digest.is_some(), "{run:?}");
    let history = st.history.as_ref().context("status.history")?;
    assert_eq!(history.current_version, Some(2));
    assert_eq!(history.pending_count, Some(0));
    let versions: Vec<i64> = history.revisions.iter().map(|r| r.version).collect();
    assert!(
        versions.contains(&1) && versions.contains(&2),
        "{:?}",
        history.revisions
    );
    assert!(
        history
            .revisions
            .iter()
            .all(|r| r.checksum.is_some() && !r.dirty),
        "{:?}",
        history.revisions
    );
    let types: Vec<_> = st.journal.iter().map(|e| e.type_).collect();
    for want in [
        JournalEntryType::PlanPublished,
        JournalEntryType::RunFinished,
        JournalEntryType::Verified,
    ] {
        assert!(types.contains(&want), "{want:?} in the journal: {types:?}");
    }

    let mut tables = db.tables()?;
    tables.retain(|t| t != "schema_migrations");
    assert_eq!(tables, ["customers", "orders"]);
    let applied = db.sql("SELECT version FROM schema_migrations ORDER BY version")?;
    assert_eq!(applied.lines().collect::<Vec<_>>(), ["1", "2"]);

    ns.delete_all::<PtahMigration>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn a_configmap_migration_runs_on_postgresql() -> anyhow::Result<()> {
    runs(Engine::Postgres, "pg").await
}

#[tokio::test]
async fn a_configmap_migration_runs_on_mariadb() -> anyhow::Result<()> {
    runs(Engine::MariaDb, "maria").await
}
