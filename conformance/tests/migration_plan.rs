//! Migration plan storage (stage 2) on the harness API server, with a real
//! PtahMigration as the owner: `operator::execution::migration_plan`
//! publishes the sequence a history reading left pending as an immutable
//! PtahMigrationPlan (versions and checksums, never SQL), bound by plan
//! contract v2.
//!
//! Acceptance lines shown here: the plan is created owned by the migration,
//! labelled, `Current`, with the sequence and the reading it continues;
//! publishing it again writes nothing and returns the same plan; an object of
//! the plan's name that is another plan, or one the migration does not own,
//! is refused and left as it was; a plan is immutable (CEL); the Apply's read
//! of a plan checks its fingerprint; collection deletes the plans status no
//! longer names, and leaves the kept one and another migration's alone.

use anyhow::bail;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use operator::api::condition::{ConditionStatus, MigrationPlanConditionType};
use operator::api::migration::PtahMigration;
use operator::api::plan::{PlannedMigration, PtahMigrationPlan};
use operator::execution::migration_plan::{
    MigrationPlanError, PlanRequest, collect, plan_object, plan_spec, publish, read, still_named,
};

fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

/// One test's namespace on the shared harness, deleted at the end of the
/// test, also when it fails (see [`TestNamespace`]).
struct Scope(TestNamespace);

impl std::ops::Deref for Scope {
    type Target = TestNamespace;
    fn deref(&self) -> &TestNamespace {
        &self.0
    }
}

impl Scope {
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        Ok(Scope(
            TestNamespace::new(harness, "mplan", test, NamespaceSpec::default().with_crds())
                .await?,
        ))
    }

    fn plans(&self) -> Api<PtahMigrationPlan> {
        self.api()
    }

    /// A real PtahMigration whose status holds a resolved ConfigMap source,
    /// the execution binding and a reading of fingerprint `digest(reading)`,
    /// as the status write that asks for a plan leaves it.
    async fn migration(&self, name: &str, reading: u8) -> anyhow::Result<PtahMigration> {
        let created: PtahMigration = self
            .create(json!({
                "apiVersion": "operator.ptah.run/v1alpha1",
                "kind": "PtahMigration",
                "metadata": {"name": name},
                "spec": {
                    "target": {
                        "engine": "PostgreSQL",
                        "urlFrom": {"name": "db", "key": "url"},
                        "coordinationKey": "primary",
                    },
                    "source": {"configMap": {"name": "migrations"}},
                    "policy": {"apply": "OnApproval"},
                    "interval": "10m",
                },
            }))
            .await?;
        let status = json!({
            "source": {
                "kind": "ConfigMap",
                "revision": format!("migrations@{}", digest(1)),
                "contentDigest": digest(1),
                "configMap": {"name": "migrations", "uid": "cm-uid", "snapshotName": "ptah-src-1"},
            },
            "executionBinding": operator::testing::execution_binding(),
        });
        let api: Api<PtahMigration> = self.api();
        api.patch_status(
            &created.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
        self.read_again(name, reading).await
    }

    /// Records a new reading of fingerprint `digest(reading)` in status.
    async fn read_again(&self, name: &str, reading: u8) -> anyhow::Result<PtahMigration> {
        let api: Api<PtahMigration> = self.api();
        let history = json!({
            "currentVersion": 5,
            "fingerprint": digest(reading),
            "targetIdentityDigest": digest(4),
        });
        Ok(api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": {"history": history} })),
            )
            .await?)
    }
}

fn planned(version: i64) -> PlannedMigration {
    PlannedMigration {
        version,
        version_key: None,
        description: Some(format!("add table {version}")),
        checksum: format!("h1:{version:064}"),
        checkpoint: false,
        transaction_mode: None,
    }
}

fn request(reading: u8, versions: &[i64]) -> PlanRequest {
    PlanRequest {
        migrations: versions.iter().copied().map(planned).collect(),
        history_fingerprint: Some(digest(reading)),
        target_identity_digest: Some(digest(4)),
    }
}

fn current(plan: &PtahMigrationPlan) -> bool {
    plan.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == MigrationPlanConditionType::Current && c.status == ConditionStatus::True
        })
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_is_published_owned_and_current_and_publishing_again_writes_nothing()
-> anyhow::Result<()> {
    let s = Scope::new("publish").await?;
    let m = s.migration("orders", 3).await?;
    let first = publish(s.client(), &m, &request(3, &[6, 7, 8])).await?;
    assert!(first.wrote);
    let summary = &first.summary;
    assert!(summary.name.starts_with("orders-"), "{}", summary.name);
    assert_eq!(
        (summary.from_version, summary.to_version, summary.steps),
        (Some(5), Some(8), Some(3))
    );
    assert!(summary.created_at.is_some());

    let plan = s.plans().get(&summary.name).await?;
    assert!(current(&plan), "plan {} is not Current", summary.name);
    assert_eq!(plan.metadata.uid.as_deref(), Some(summary.uid.as_str()));
    assert_eq!(plan.spec.fingerprint, summary.fingerprint);
    assert_eq!(plan.spec.contract_version, 2);
    assert_eq!(plan.spec.migrations, request(3, &[6, 7, 8]).migrations);
    assert_eq!(plan.spec.history_fingerprint, digest(3));
    assert_eq!(plan.spec.current_version, 5);
    assert_eq!(plan.spec.target_identity_digest, digest(4));
    let owner = &plan.owner_references()[0];
    assert_eq!(Some(&owner.uid), m.metadata.uid.as_ref());
    assert_eq!(owner.kind, "PtahMigration");
    assert_eq!(owner.controller, Some(false));
    assert_eq!(
        plan.labels()
            .get("operator.ptah.run/migration")
            .map(String::as_str),
        Some("orders")
    );

    // Again: nothing written, the same plan.
    let again = publish(s.client(), &m, &request(3, &[6, 7, 8])).await?;
    assert!(!again.wrote, "a published plan was written again");
    assert_eq!(again.summary, first.summary);

    // A plan is immutable: the API server refuses an edit (CEL).
    let edit = s
        .plans()
        .patch(
            &summary.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"currentVersion": 4}})),
        )
        .await;
    match edit {
        Err(kube::Error::Api(e)) => assert!(e.message.contains("immutable"), "{}", e.message),
        other => bail!("an edit of a plan was not refused: {other:?}"),
    }

    // The Apply's read checks the fingerprint its claim carries.
    let read_plan = read(s.client(), &m, &summary.name, &summary.fingerprint).await?;
    assert_eq!(read_plan.metadata.uid, plan.metadata.uid);
    match read(s.client(), &m, &summary.name, &digest(9)).await {
        Err(MigrationPlanError::PlanConflict { plan, .. }) => assert_eq!(plan, summary.name),
        other => bail!("expected a fingerprint refusal, got {other:?}"),
    }
    match read(s.client(), &m, "orders-000000000000", &summary.fingerprint).await {
        Err(MigrationPlanError::PlanMissing { .. }) => {}
        other => bail!("expected a missing plan, got {other:?}"),
    }

    // A reading that moved since: the plan is refused before anything is written.
    let moved = s.read_again("orders", 5).await?;
    match publish(s.client(), &moved, &request(3, &[6, 7, 8])).await {
        Err(MigrationPlanError::Unbound { field, .. }) => {
            assert_eq!(field, "status.history.fingerprint")
        }
        other => bail!("expected the moved reading refused, got {other:?}"),
    }
    assert_eq!(s.plans().list(&Default::default()).await?.items.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_same_name_different_plan_or_foreign_plan_is_refused_never_overwritten()
-> anyhow::Result<()> {
    let s = Scope::new("conflict").await?;
    let m = s.migration("orders", 3).await?;

    // Another sequence stored under the name this plan takes.
    let (name, spec) = plan_spec(&m, &request(3, &[6, 7]))?;
    let mut other = spec.clone();
    other.migrations.pop();
    let squatter = plan_object(&name, s.name(), other.clone());
    s.plans().create(&PostParams::default(), &squatter).await?;
    match publish(s.client(), &m, &request(3, &[6, 7])).await {
        Err(MigrationPlanError::PlanConflict { plan, reason }) => {
            assert_eq!(plan, name);
            assert!(reason.contains("another sequence"), "{reason}");
        }
        other => bail!("expected a conflict, got {other:?}"),
    }
    let kept = s.plans().get(&name).await?;
    assert_eq!(kept.spec, other, "the stored plan was overwritten");
    assert!(!current(&kept), "a refused plan was marked Current");

    // The same spec, but not owned by this migration.
    let (name, spec) = plan_spec(&m, &request(3, &[6, 7, 8]))?;
    let mut foreign = plan_object(&name, s.name(), spec);
    foreign.metadata.owner_references = None;
    s.plans().create(&PostParams::default(), &foreign).await?;
    match publish(s.client(), &m, &request(3, &[6, 7, 8])).await {
        Err(MigrationPlanError::PlanConflict { plan, reason }) => {
            assert_eq!(plan, name);
            assert!(reason.contains("not owned"), "{reason}");
        }
        other => bail!("expected a conflict, got {other:?}"),
    }
    assert!(s.plans().get(&name).await?.owner_references().is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn collection_deletes_the_plans_status_no_longer_names() -> anyhow::Result<()> {
    let s = Scope::new("collect").await?;
    let m = s.migration("orders", 3).await?;
    let old = publish(s.client(), &m, &request(3, &[6, 7])).await?.summary;
    let m = s.read_again("orders", 5).await?;
    let new = publish(s.client(), &m, &request(5, &[6, 7, 8]))
        .await?
        .summary;
    assert_ne!(old.name, new.name);
    let neighbour = s.migration("invoices", 3).await?;
    let theirs = publish(s.client(), &neighbour, &request(3, &[6]))
        .await?
        .summary;

    // Status names the new plan only.
    let mut status = m.status.clone().unwrap_or_default();
    status.plan = Some(new.clone());
    let keep = still_named(&status);
    assert_eq!(keep, vec![new.name.clone()]);
    let deleted = collect(s.client(), &m, &keep).await?;
    assert_eq!(deleted, vec![old.name.clone()]);
    assert!(s.plans().get_opt(&old.name).await?.is_none());
    assert!(s.plans().get_opt(&new.name).await?.is_some());
    assert!(s.plans().get_opt(&theirs.name).await?.is_some());

    // Again: nothing left to delete.
    assert!(collect(s.client(), &m, &keep).await?.is_empty());
    Ok(())
}
