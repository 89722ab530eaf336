//! The executor end to end: a PtahSchema from a ConfigMap, on a database of
//! the test's own on the harness's PostgreSQL and on its MariaDB, driven by
//! a real manager. Each database operation is a Job whose runner drives the
//! pinned Ptah CLI and delivers its result to the manager's receiver:
//!
//! * Observe reads the drift report (tables added);
//! * Plan runs two byte-identical plans and dry-runs the bytes; the manager
//!   publishes the plan (`apply: Always`, nothing destructive: ReadyToApply);
//! * Apply runs exactly those bytes;
//! * the proof (Observe and Plan again) finds no change: `InSync`, reason
//!   `ScopedConverged`, and the table is in the database as its client sees
//!   it.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::ListParams;

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::wait::Patience;
use operator::api::condition::{ConditionStatus, Reason, SchemaConditionType, SchemaPhase};
use operator::api::journal::JournalEntryType;
use operator::api::schema::PtahSchema;

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// Six Jobs one after the other, each run by the process kubelet.
const PATIENCE: Patience = Patience::new(Duration::from_secs(240), Duration::from_millis(250));

fn target_digest(t: &Option<operator::api::schema::TargetStatus>) -> Option<String> {
    t.as_ref().and_then(|t| t.identity_digest.clone())
}

async fn converges(engine: Engine, test: &str) -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "executor", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    executor::schema(&ns, &db, "orders").await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;

    let s = ns
        .until(&PATIENCE, "orders", "InSync", |s: &PtahSchema| {
            s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::InSync)
        })
        .await
        .with_context(|| manager.log())?;
    let st = s.status.as_ref().context("status")?;
    let in_sync = st
        .conditions
        .iter()
        .find(|c| c.type_ == SchemaConditionType::InSync)
        .context("InSync condition")?;
    assert_eq!(in_sync.status, ConditionStatus::True);
    assert_eq!(in_sync.reason, Reason::ScopedConverged);
    let types: Vec<_> = st.journal.iter().map(|e| e.type_).collect();
    for want in [
        JournalEntryType::PlanPublished,
        JournalEntryType::ApplyFinished,
        JournalEntryType::Verified,
    ] {
        assert!(types.contains(&want), "{want:?} in the journal: {types:?}");
    }
    assert!(
        !types.contains(&JournalEntryType::OperationFailed),
        "no attempt failed: {:?}",
        st.journal
    );
    let applied = st.applied.as_ref().context("status.applied")?;
    assert!(applied.plan_name.starts_with("orders-"), "{applied:?}");
    assert!(applied.target_identity_digest.is_some(), "{applied:?}");
    assert_eq!(applied.target_identity_digest, target_digest(&st.target));

    // The database, as its own client sees it.
    assert_eq!(db.tables()?, ["orders"]);
    let columns = db.columns("orders")?;
    assert_eq!(columns.len(), 2, "{columns:?}");
    assert!(columns[0].starts_with("id "), "{columns:?}");
    assert!(columns[1].starts_with("customer "), "{columns:?}");

    // No credential anywhere the operation left words: the Pods' logs, the
    // stored results, the status, the manager's log.
    let password = db.password();
    assert!(password.len() >= 8, "the harness's passwords are long");
    let mut texts = vec![("the manager's log".to_string(), manager.log())];
    texts.push(("status".into(), serde_json::to_string(&s.status)?));
    for pod in ns.api::<Pod>().list(&ListParams::default()).await? {
        let spec = pod.spec.clone().unwrap_or_default();
        let containers = spec
            .init_containers
            .unwrap_or_default()
            .into_iter()
            .chain(spec.containers);
        for c in containers {
            let path = conformance::kubelet::log_path(&ns.harness().kubelet_dir(), &pod, &c.name);
            texts.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap_or_default(),
            ));
        }
    }
    for cm in ns.api::<ConfigMap>().list(&ListParams::default()).await? {
        texts.push((
            format!("configmap/{}", cm.name_any()),
            serde_json::to_string(&cm.data)?,
        ));
    }
    let operation_logs = texts
        .iter()
        .filter(|(_, t)| t.contains("StepResult"))
        .count();
    assert!(
        operation_logs >= 5,
        "the operations' logs were read: {operation_logs}"
    );
    for (what, text) in &texts {
        assert!(
            !text.contains(&password),
            "the database password is in {what}"
        );
    }

    ns.delete_all::<PtahSchema>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn a_configmap_schema_converges_on_postgresql() -> anyhow::Result<()> {
    converges(Engine::Postgres, "pg").await
}

#[tokio::test]
async fn a_configmap_schema_converges_on_mariadb() -> anyhow::Result<()> {
    converges(Engine::MariaDb, "maria").await
}

/// `spec.suspend` during a real Apply lets it finish and starts no Job; a
/// manager restarted while the schema is Suspended with the proof owed
/// resumes into the proof (`VerifyingConvergence`), never a fresh read
/// (status records what tells a resume from an edit, not the manager's
/// memory), and the Apply is never dispatched again.
#[tokio::test]
async fn a_restarted_manager_resumes_a_suspended_proof_into_verifying_convergence()
-> anyhow::Result<()> {
    resumes_a_suspended_proof(Engine::Postgres, "resume").await
}

/// The same on MariaDB.
#[tokio::test]
async fn a_restarted_manager_resumes_a_suspended_proof_into_verifying_convergence_on_mariadb()
-> anyhow::Result<()> {
    resumes_a_suspended_proof(Engine::MariaDb, "resume-maria").await
}

async fn resumes_a_suspended_proof(engine: Engine, test: &str) -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    let ns = TestNamespace::for_operator(harness().await, "executor", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    executor::schema(&ns, &db, "orders").await?;
    let quick = Patience::new(Duration::from_secs(120), Duration::from_millis(50));
    let phase_of = |s: &PtahSchema| s.status.as_ref().and_then(|st| st.phase);

    // Suspended while its Apply runs: a manager stops right after creating
    // the Apply's Job, the schema is suspended, and the next manager finds
    // the Apply ended with the proof owed. (Suspending a running manager's
    // Apply would race the Apply's few seconds.)
    // One receiver address for every manager, as a Service keeps it, so the
    // Apply's result reaches the manager that runs when it ends.
    let same_port = ManagerSpec {
        port: Some(conformance::testkit::manager::free_port()?),
        ..ManagerSpec::default()
    };
    let mut stopped = Manager::start(
        &ns,
        &ManagerSpec {
            fault_point: Some("after-job-create"),
            fault_operation: Some("apply"),
            ..same_port.clone()
        },
    )?;
    let code = stopped.exited(Duration::from_secs(180)).await?.code();
    assert_eq!(
        code,
        Some(86),
        "stopped at the fault point: {}",
        stopped.log()
    );
    let suspend = |on: bool| serde_json::json!({"spec": {"suspend": on}});
    let schemas = ns.api::<PtahSchema>();
    schemas
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(suspend(true)),
        )
        .await?;
    let mut manager = Manager::start(&ns, &same_port)?;
    let s = ns
        .until(
            &PATIENCE,
            "orders",
            "Suspended with a proof owed",
            |s: &PtahSchema| {
                phase_of(s) == Some(SchemaPhase::Suspended)
                    && s.status
                        .as_ref()
                        .is_some_and(|st| st.pending_observation.is_some())
            },
        )
        .await
        .with_context(|| manager.log())?;
    let owed = s
        .status
        .as_ref()
        .and_then(|st| st.pending_observation.clone())
        .context("the proof owed")?;
    let st = s.status.as_ref().context("status")?;
    assert!(st.active_operation.is_none(), "suspended with no claim");
    assert!(
        st.journal
            .iter()
            .any(|e| e.type_ == JournalEntryType::ApplyFinished),
        "the Apply ran to its end and its end is in the journal"
    );
    let jobs_suspended = job_names(&ns).await?;

    // Another manager process, which never saw the spec before the resume.
    manager.kill();
    let manager = Manager::start(&ns, &same_port)?;
    assert_eq!(
        job_names(&ns).await?,
        jobs_suspended,
        "no Job started while suspended"
    );
    schemas
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(suspend(false)),
        )
        .await?;
    let seen = std::sync::Mutex::new(Vec::new());
    ns.until(
        &quick,
        "orders",
        "InSync after the proof",
        |s: &PtahSchema| {
            let mut seen = seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(p) = phase_of(s)
                && seen.last() != Some(&p)
            {
                seen.push(p);
            }
            phase_of(s) == Some(SchemaPhase::InSync)
        },
    )
    .await
    .with_context(|| manager.log())?;
    let seen = seen
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(
        seen.contains(&SchemaPhase::VerifyingConvergence),
        "the resume went to the proof: {seen:?}"
    );
    assert!(
        !seen.contains(&SchemaPhase::Observing) && !seen.contains(&SchemaPhase::Planning),
        "no fresh read after the resume: {seen:?}"
    );
    let s = get_schema(&ns).await?;
    let st = s.status.as_ref().context("status")?;
    let verified = st
        .journal
        .iter()
        .rev()
        .find(|e| e.type_ == JournalEntryType::Verified)
        .context("Verified")?;
    assert_eq!(
        verified.reason,
        Some(Reason::ScopedConverged),
        "{verified:?}"
    );
    assert_eq!(
        verified.operation_id.as_deref(),
        Some(owed.apply_operation_id.as_str()),
        "the proof verified the Apply it was owed for: {verified:?}"
    );
    // One Apply Job, never dispatched again: every other Job is a read.
    let applies: Vec<_> = job_names(&ns)
        .await?
        .into_iter()
        .filter(|n| n.starts_with("ptah-apply-"))
        .collect();
    assert_eq!(applies.len(), 1, "{applies:?}");
    ns.delete_all::<PtahSchema>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}

/// The names of the namespace's Jobs, sorted.
async fn job_names(ns: &TestNamespace) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = ns
        .api::<k8s_openapi::api::batch::v1::Job>()
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    names.sort();
    Ok(names)
}

async fn get_schema(ns: &TestNamespace) -> anyhow::Result<PtahSchema> {
    Ok(ns.api::<PtahSchema>().get("orders").await?)
}

/// The manager killed right after it created a real Apply Job, and that Job
/// deleted before the manager comes back: the dispatched Apply is never
/// dispatched again. Its outcome is unknown (`ApplyFinished` Unknown), the
/// read-only proof comes next, and the schema ends `InSync`.
#[tokio::test]
async fn a_dispatched_real_apply_whose_job_is_gone_is_never_replayed() -> anyhow::Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    use kube::api::DeleteParams;
    use operator::api::journal::JournalOutcome;
    use operator::api::status::OperationType;
    use operator::execution::job::ANNOTATION_OPERATION_ID;
    let ns = TestNamespace::for_operator(harness().await, "executor", "lostapply").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    executor::schema(&ns, &db, "orders").await?;
    let mut killed = Manager::start(
        &ns,
        &ManagerSpec {
            fault_point: Some("after-job-create"),
            fault_operation: Some("apply"),
            ..ManagerSpec::default()
        },
    )?;
    let status = killed.exited(Duration::from_secs(120)).await?;
    assert_eq!(
        status.code(),
        Some(86),
        "stopped at the fault point: {}",
        killed.log()
    );
    let s = get_schema(&ns).await?;
    let claim = s
        .status
        .as_ref()
        .and_then(|st| st.active_operation.clone())
        .context("the Apply claim")?;
    assert_eq!(claim.type_, OperationType::Apply);
    assert!(claim.dispatch_started);
    let job = claim.job_name.clone().context("the reserved Job name")?;
    let jobs = ns.api::<Job>();
    jobs.delete(&job, &DeleteParams::foreground()).await?;
    PATIENCE
        .poll(&format!("Job {job} to go"), || {
            let jobs = jobs.clone();
            let job = job.clone();
            async move { anyhow::Ok(jobs.get_opt(&job).await?.is_none().then_some(())) }
        })
        .await?;

    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let s = ns
        .until(
            &PATIENCE,
            "orders",
            "InSync after the lost Apply",
            |s: &PtahSchema| s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::InSync),
        )
        .await
        .with_context(|| manager.log())?;
    let st = s.status.as_ref().context("status")?;
    let lost = st
        .journal
        .iter()
        .find(|e| {
            e.type_ == JournalEntryType::ApplyFinished
                && e.operation_id.as_deref() == Some(claim.operation_id.as_str())
        })
        .context("the lost Apply's end")?;
    assert_eq!(lost.outcome, Some(JournalOutcome::Unknown), "{lost:?}");
    let replays: Vec<String> = jobs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|j| j.annotations().get(ANNOTATION_OPERATION_ID) == Some(&claim.operation_id))
        .map(|j| j.name_any())
        .collect();
    assert!(
        replays.is_empty(),
        "the lost Apply was dispatched again: {replays:?}"
    );
    assert_eq!(
        db.tables()?,
        ["orders"],
        "the database converged all the same"
    );
    ns.delete_all::<PtahSchema>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}
