//! The PtahSchema controller end to end, on a database that refuses every
//! connection, so that each read fails where these tests need it to: a real
//! manager process
//! (`ptah-operator`, scoped to the test's namespace) against the real API
//! server, Job controller, process kubelet, git daemon and the manager's own
//! result receiver.
//!
//! * A ConfigMap source is snapshotted by the manager (no Job), the Observe
//!   claim is written before its one Job, the runner delivers its result to
//!   the receiver, and the failed read keeps its claim and runs again after
//!   `failureRetryInterval` as attempt 2 — one Job per attempt.
//! * An edit of a selected key is read at once: a new snapshot, the old one
//!   collected.
//! * A Git source is resolved by a Resolve Job that pins the commit.
//! * Two schemas on one database without `sharedRealm` are both Blocked with
//!   `RealmConflict`; with it on both, both go on.
//! * A read request that is not an instant, and one longer than 64 bytes,
//!   are answered as the seed says; a valid one answers a resource Blocked
//!   by its verification policy with `ReadRequested` and a new Resolve.
//! * `spec.suspend` drops a read between attempts and starts no new Job.
//! * The manager killed right after each durable write of the dispatch
//!   protocol leaves one Job per attempt and no lost claim.
//!
//! `spec.suspend` during a real Apply, and a real Apply whose Job is lost
//! after a kill, are in `executor_schema.rs`.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use conformance::gitserve::{commit_files, create_repo};
use conformance::harness::Harness;
use conformance::testkit::git::endpoints;
use conformance::testkit::manager::{Manager, ManagerSpec, free_port};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::unique;
use conformance::testkit::wait::Patience;
use operator::api::condition::{Reason, SchemaConditionType, SchemaPhase};
use operator::api::journal::JournalEntryType;
use operator::api::schema::PtahSchema;
use operator::api::status::OperationType;
use operator::execution::job::{ANNOTATION_ATTEMPT, ANNOTATION_OPERATION_ID};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// Long enough for a Job to be created, run by the process kubelet and
/// harvested several times over.
const PATIENCE: Patience = Patience::new(Duration::from_secs(120), Duration::from_millis(250));

async fn namespace(test: &str) -> anyhow::Result<TestNamespace> {
    TestNamespace::for_operator(harness().await, "schemactl", test).await
}

/// A database URL whose server refuses every connection: each read these
/// tests make fails at Ptah's connect, which is what they are about (the
/// reads that succeed are in `executor_schema.rs`).
const UNREACHABLE_DB: &str = "postgres://ptah:never-used@127.0.0.1:1/orders?sslmode=disable";

/// The database Secret: [`UNREACHABLE_DB`] under `url`.
async fn db_secret(ns: &TestNamespace) -> anyhow::Result<()> {
    ns.create::<Secret>(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db"},
        "stringData": {"url": UNREACHABLE_DB},
    }))
    .await?;
    Ok(())
}

async fn config_map(ns: &TestNamespace, name: &str, sql: &str) -> anyhow::Result<()> {
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"schema.sql": sql, "README.md": "not selected"},
    }))
    .await?;
    Ok(())
}

/// A PtahSchema on the harness PostgreSQL with `source`, reading again after
/// `retry` when a read fails.
fn schema(name: &str, source: Value, key: &str, retry: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
        "metadata": {"name": name},
        "spec": {
            "target": {
                "engine": "postgresql",
                "urlFrom": {"name": "db", "key": "url"},
                "coordinationKey": key,
            },
            "source": source,
            "policy": {"apply": "OnApproval"},
            "execution": {"failureRetryInterval": retry},
        },
    })
}

fn cm_source(name: &str) -> Value {
    json!({"configMap": {"name": name, "keys": ["schema.sql"]}})
}

async fn get(ns: &TestNamespace, name: &str) -> anyhow::Result<PtahSchema> {
    Ok(ns.api::<PtahSchema>().get(name).await?)
}

/// Waits until the schema's stored state satisfies `ok`.
async fn until(
    ns: &TestNamespace,
    name: &str,
    what: &str,
    ok: impl Fn(&PtahSchema) -> bool,
) -> anyhow::Result<PtahSchema> {
    ns.until(&PATIENCE, name, what, ok).await
}

fn phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn stalled_reason(s: &PtahSchema) -> Option<Reason> {
    s.status.as_ref().and_then(|st| {
        st.conditions
            .iter()
            .find(|c| c.type_ == SchemaConditionType::Stalled)
            .map(|c| c.reason)
    })
}

fn failed_observe_attempts(s: &PtahSchema) -> usize {
    s.status
        .as_ref()
        .map(|st| {
            st.journal
                .iter()
                .filter(|e| {
                    e.type_ == JournalEntryType::OperationFailed
                        && e.operation == Some(OperationType::Observe)
                })
                .map(|e| e.count.unwrap_or(1) as usize)
                .sum()
        })
        .unwrap_or(0)
}

/// Every Job in the namespace, as (operation id, attempt, name).
async fn jobs(ns: &TestNamespace) -> anyhow::Result<Vec<(String, String, String)>> {
    let list = ns.api::<Job>().list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .map(|j| {
            let a = j.annotations();
            (
                a.get(ANNOTATION_OPERATION_ID).cloned().unwrap_or_default(),
                a.get(ANNOTATION_ATTEMPT).cloned().unwrap_or_default(),
                j.name_any(),
            )
        })
        .collect())
}

/// Fails unless every (operation, attempt) has exactly one Job.
fn one_job_per_attempt(jobs: &[(String, String, String)]) -> anyhow::Result<()> {
    let distinct: BTreeSet<(&str, &str)> = jobs
        .iter()
        .map(|(op, attempt, _)| (op.as_str(), attempt.as_str()))
        .collect();
    anyhow::ensure!(
        distinct.len() == jobs.len(),
        "more than one Job for an attempt: {jobs:?}"
    );
    Ok(())
}

/// Deletes the schemas while the manager runs, so its finalizer goes with it.
async fn delete_all(ns: &TestNamespace) -> anyhow::Result<()> {
    ns.delete_all::<PtahSchema>(&PATIENCE).await
}

#[tokio::test]
async fn configmap_source_is_snapshotted_and_each_observe_attempt_has_one_job() -> anyhow::Result<()>
{
    let ns = namespace("cm").await?;
    db_secret(&ns).await?;
    config_map(&ns, "schema", "CREATE TABLE orders (id int PRIMARY KEY);").await?;
    ns.create::<PtahSchema>(schema("orders", cm_source("schema"), "orders", "5s"))
        .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;

    // Resolve is the manager's snapshot: ArtifactResolved says SnapshotTaken.
    let s = until(&ns, "orders", "the snapshot", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .is_some_and(|src| src.config_map.is_some())
    })
    .await?;
    let src = s
        .status
        .as_ref()
        .and_then(|st| st.source.clone())
        .context("source")?;
    let snapshot_name = src
        .config_map
        .as_ref()
        .context("configMap")?
        .snapshot_name
        .clone();
    let snap = ns.api::<ConfigMap>().get(&snapshot_name).await?;
    assert_eq!(snap.immutable, Some(true), "the snapshot is immutable");
    assert!(
        snap.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == s.metadata.uid.as_ref()),
        "the snapshot is owned by the schema"
    );
    let resolved = s
        .status
        .as_ref()
        .and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == SchemaConditionType::ArtifactResolved)
        })
        .context("ArtifactResolved")?;
    assert_eq!(resolved.reason, Reason::SnapshotTaken);

    // The Observe read fails (the database refuses connections): its result
    // comes through the receiver, the claim stays, and a second attempt
    // follows.
    let s = until(&ns, "orders", "two failed Observe attempts", |s| {
        failed_observe_attempts(s) >= 2
    })
    .await
    .with_context(|| manager.log())?;
    let st = s.status.as_ref().context("status")?;
    let failed = st
        .conditions
        .iter()
        .find(|c| c.type_ == SchemaConditionType::ReconciliationFailed)
        .context("ReconciliationFailed")?;
    assert!(
        failed.message.contains("connection refused")
            && !failed.message.contains("no result reached")
            && !failed.message.contains("never-used"),
        "the result delivered to the receiver names why: {}",
        failed.message
    );
    let claim = st.active_operation.as_ref().context("the claim stays")?;
    assert_eq!(claim.type_, OperationType::Observe);
    assert!(claim.attempt >= 2);
    let all = jobs(&ns).await?;
    one_job_per_attempt(&all)?;
    let observe: Vec<_> = all
        .iter()
        .filter(|(op, _, _)| *op == claim.operation_id)
        .collect();
    assert!(
        observe.len() >= 2,
        "one Job per attempt of the claim: {all:?}"
    );

    // A harvested read's Job has its TTL, and no token Secret was ever made
    // for it: its runner presented its Pod's own token.
    let first = observe
        .iter()
        .find(|(_, attempt, _)| attempt == "1")
        .context("attempt 1")?
        .2
        .clone();
    PATIENCE
        .poll("attempt 1 to be cleaned up", || {
            let jobs = ns.api::<Job>();
            let secrets = ns.api::<Secret>();
            let first = first.clone();
            async move {
                let job = jobs.get_opt(&first).await?;
                let ttl = job
                    .as_ref()
                    .and_then(|j| j.spec.as_ref())
                    .and_then(|s| s.ttl_seconds_after_finished);
                let secret = secrets.get_opt(&format!("{first}-result")).await?;
                anyhow::ensure!(secret.is_none(), "a token Secret exists for {first}");
                anyhow::Ok(ttl.is_some().then_some(()))
            }
        })
        .await?;

    // An edit of the selected key is read at once: a new snapshot, the old
    // one collected.
    ns.set_config_map_key(
        "schema",
        "schema.sql",
        "CREATE TABLE orders (id bigint PRIMARY KEY);",
    )
    .await?;
    let s = until(&ns, "orders", "a new content digest", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .is_some_and(|new| new.content_digest != src.content_digest)
    })
    .await
    .with_context(|| manager.log())?;
    let new_snapshot = s
        .status
        .as_ref()
        .and_then(|st| st.source.as_ref())
        .and_then(|src| src.config_map.as_ref())
        .context("configMap")?
        .snapshot_name
        .clone();
    assert_ne!(new_snapshot, snapshot_name);
    PATIENCE
        .poll("the old snapshot to be collected", || {
            let cms = ns.api::<ConfigMap>();
            let old = snapshot_name.clone();
            async move { anyhow::Ok(cms.get_opt(&old).await?.is_none().then_some(())) }
        })
        .await?;
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn git_source_is_resolved_by_a_job_that_pins_the_commit() -> anyhow::Result<()> {
    let ns = namespace("git").await?;
    db_secret(&ns).await?;
    let ep = endpoints(ns.harness());
    let repo = unique("schemactl");
    let bare = create_repo(&ep.root, &format!("{repo}.git"), false)?;
    let commit = commit_files(
        &bare,
        "main",
        &[("db/schema.sql", "CREATE TABLE orders (id int PRIMARY KEY);")],
        "first",
    )?;
    let source = json!({"git": {
        "url": format!("{}/{repo}.git", ep.daemon_url),
        "ref": {"branch": "main"},
        "path": "db",
    }});
    ns.create::<PtahSchema>(schema("orders", source, "orders", "1h"))
        .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let s = until(&ns, "orders", "the resolved commit", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .and_then(|src| src.git.as_ref())
            .is_some_and(|g| g.commit == commit)
    })
    .await
    .with_context(|| manager.log())?;
    let st = s.status.as_ref().context("status")?;
    let resolved = st
        .conditions
        .iter()
        .find(|c| c.type_ == SchemaConditionType::ArtifactResolved)
        .context("ArtifactResolved")?;
    assert_eq!(resolved.reason, Reason::CommitResolved);
    let src = st.source.as_ref().context("source")?;
    assert!(src.revision.contains(&commit), "revision {}", src.revision);
    // The Resolve Job ran once, and the read after it (Observe) was claimed.
    let all = jobs(&ns).await?;
    one_job_per_attempt(&all)?;
    assert!(
        all.iter()
            .any(|(_, _, name)| name.starts_with("ptah-resolve-")),
        "a Resolve Job: {all:?}"
    );
    until(&ns, "orders", "the Observe claim", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.active_operation.as_ref())
            .is_some_and(|c| {
                c.type_ == OperationType::Observe
                    && c.source.as_ref().and_then(|b| b.commit.as_deref()) == Some(commit.as_str())
            })
    })
    .await?;
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn two_schemas_on_one_database_conflict_unless_both_share_the_realm() -> anyhow::Result<()> {
    let ns = namespace("realm").await?;
    db_secret(&ns).await?;
    config_map(&ns, "schema", "CREATE TABLE a (id int);").await?;
    for name in ["first", "second"] {
        ns.create::<PtahSchema>(schema(name, cm_source("schema"), "shared-db", "1h"))
            .await?;
    }
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    for name in ["first", "second"] {
        until(&ns, name, "RealmConflict", |s| {
            phase(s) == Some(SchemaPhase::Blocked)
                && stalled_reason(s) == Some(Reason::RealmConflict)
        })
        .await
        .with_context(|| manager.log())?;
    }
    // Blocked by the realm, neither read the database: no Job at all.
    assert!(jobs(&ns).await?.is_empty());

    let shared = Patch::Merge(json!({"spec": {"target": {"sharedRealm": true}}}));
    for name in ["first", "second"] {
        ns.api::<PtahSchema>()
            .patch(name, &PatchParams::default(), &shared)
            .await?;
    }
    for name in ["first", "second"] {
        until(
            &ns,
            name,
            "the realm to admit it and a read to start",
            |s| {
                phase(s) != Some(SchemaPhase::Blocked)
                    && s.status.as_ref().is_some_and(|st| {
                        st.active_operation.is_some() || failed_observe_attempts(s) > 0
                    })
            },
        )
        .await
        .with_context(|| manager.log())?;
    }
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

/// A schema whose Observe has failed once and waits an hour for its retry.
async fn failed_between_attempts(ns: &TestNamespace, name: &str) -> anyhow::Result<PtahSchema> {
    until(ns, name, "a failed Observe between attempts", |s| {
        phase(s) == Some(SchemaPhase::Failed)
            && s.status
                .as_ref()
                .and_then(|st| st.active_operation.as_ref())
                .is_some_and(|c| c.retry_not_before.is_some() && !c.dispatch_started)
    })
    .await
}

async fn annotate(ns: &TestNamespace, name: &str, value: &str) -> anyhow::Result<()> {
    let patch = Patch::Merge(json!({"metadata": {"annotations": {
        operator::api::annotations::READ_REQUESTED_AT: value,
    }}}));
    ns.api::<PtahSchema>()
        .patch(name, &PatchParams::default(), &patch)
        .await?;
    Ok(())
}

#[tokio::test]
async fn read_requests_that_are_not_instants_are_answered_once() -> anyhow::Result<()> {
    let ns = namespace("readreq").await?;
    db_secret(&ns).await?;
    config_map(&ns, "schema", "CREATE TABLE a (id int);").await?;
    ns.create::<PtahSchema>(schema("orders", cm_source("schema"), "orders", "1h"))
        .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let before = failed_between_attempts(&ns, "orders")
        .await
        .with_context(|| manager.log())?;
    let claim = before
        .status
        .as_ref()
        .and_then(|st| st.active_operation.clone())
        .context("claim")?;

    // Not an instant: recorded as answered, a ReadRequestInvalid Warning,
    // and the read between attempts goes on retrying under its claim.
    annotate(&ns, "orders", "yesterday").await?;
    let s = until(&ns, "orders", "the invalid request recorded", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.last_read_request.as_deref())
            == Some("yesterday")
    })
    .await
    .with_context(|| manager.log())?;
    let st = s.status.as_ref().context("status")?;
    assert_eq!(st.phase, Some(SchemaPhase::Failed));
    assert_eq!(
        st.active_operation
            .as_ref()
            .map(|c| (&c.operation_id, c.attempt)),
        Some((&claim.operation_id, claim.attempt)),
        "the claim and its retry delay are untouched"
    );
    PATIENCE
        .poll("the ReadRequestInvalid Event", || {
            let events: Api<Event> = ns.api();
            async move {
                let found = events
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .any(|e| {
                        e.reason.as_deref() == Some("ReadRequestInvalid")
                            && e.type_.as_deref() == Some("Warning")
                            && e.note.as_deref().is_some_and(|n| n.contains("yesterday"))
                    });
                anyhow::Ok(found.then_some(()))
            }
        })
        .await?;

    // Longer than 64 bytes: recorded as its SHA-256.
    let long = "x".repeat(100);
    annotate(&ns, "orders", &long).await?;
    let digest = conformance::testkit::oci::sha256(long.as_bytes());
    until(
        &ns,
        "orders",
        "the long request recorded as its digest",
        |s| {
            s.status
                .as_ref()
                .and_then(|st| st.last_read_request.as_deref())
                == Some(digest.as_str())
        },
    )
    .await
    .with_context(|| manager.log())?;
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn suspend_drops_a_read_between_attempts_and_starts_no_job() -> anyhow::Result<()> {
    let ns = namespace("suspend").await?;
    db_secret(&ns).await?;
    config_map(&ns, "schema", "CREATE TABLE a (id int);").await?;
    ns.create::<PtahSchema>(schema("held", cm_source("schema"), "held", "5s"))
        .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    failed_between_attempts(&ns, "held")
        .await
        .with_context(|| manager.log())?;
    ns.api::<PtahSchema>()
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await?;
    let s = until(&ns, "held", "Suspended", |s| {
        phase(s) == Some(SchemaPhase::Suspended)
    })
    .await
    .with_context(|| manager.log())?;
    assert!(
        s.status
            .as_ref()
            .is_some_and(|st| st.active_operation.is_none()),
        "spec.suspend drops the read's claim"
    );
    let held_jobs = jobs(&ns).await?.len();

    // A witness on the same manager and retry delay: by the time it has
    // failed twice more, the suspended schema would have retried too.
    ns.create::<PtahSchema>(schema("witness", cm_source("schema"), "witness", "5s"))
        .await?;
    until(&ns, "witness", "the witness to fail three times", |s| {
        failed_observe_attempts(s) >= 3
    })
    .await
    .with_context(|| manager.log())?;
    let witness_jobs = jobs(&ns).await?.len() - held_jobs;
    assert!(witness_jobs >= 3);
    let s = get(&ns, "held").await?;
    assert_eq!(phase(&s), Some(SchemaPhase::Suspended));
    let now_held = jobs(&ns)
        .await?
        .iter()
        .filter(|(_, _, name)| name.contains("-held-"))
        .count();
    assert_eq!(now_held, held_jobs, "no Job was started while suspended");

    // Resumed: the edit moved the generation, and a read starts again.
    ns.api::<PtahSchema>()
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await?;
    until(&ns, "held", "a read after the resume", |s| {
        phase(s) != Some(SchemaPhase::Suspended)
            && s.status
                .as_ref()
                .is_some_and(|st| st.active_operation.is_some())
    })
    .await
    .with_context(|| manager.log())?;
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

/// Stops the manager right after one durable write of the dispatch
/// protocol, starts it again, and checks the claim carried on with one Job
/// per attempt.
async fn killed_after(point: &'static str) -> anyhow::Result<()> {
    let ns = namespace(point).await?;
    db_secret(&ns).await?;
    config_map(&ns, "schema", "CREATE TABLE a (id int);").await?;
    ns.create::<PtahSchema>(schema("orders", cm_source("schema"), "orders", "1h"))
        .await?;
    let port = Some(free_port()?);
    let mut first = Manager::start(
        &ns,
        &ManagerSpec {
            fault_point: Some(point),
            port,
            ..Default::default()
        },
    )?;
    let exit = first.exited(Duration::from_secs(120)).await?;
    assert_eq!(exit.code(), Some(86), "stopped at {point}: {}", first.log());
    let claim = get(&ns, "orders")
        .await?
        .status
        .and_then(|st| st.active_operation)
        .context("the claim was written before the fault")?;
    if point == "after-outcome" {
        // The outcome is written: the read failed and waits for its retry.
        assert!(!claim.dispatch_started && claim.retry_not_before.is_some());
    } else {
        assert!(claim.dispatch_started, "dispatchStarted precedes the Job");
    }

    let second = Manager::start(
        &ns,
        &ManagerSpec {
            port,
            ..Default::default()
        },
    )?;
    let s = failed_between_attempts(&ns, "orders")
        .await
        .with_context(|| second.log())?;
    let after = s
        .status
        .as_ref()
        .and_then(|st| st.active_operation.clone())
        .context("claim")?;
    assert_eq!(
        after.operation_id, claim.operation_id,
        "the claim was not lost"
    );
    assert_eq!(after.attempt, 1, "no attempt was added by the restart");
    let all = jobs(&ns).await?;
    one_job_per_attempt(&all)?;
    assert_eq!(
        all.iter()
            .filter(|(op, _, _)| *op == claim.operation_id)
            .count(),
        1,
        "exactly one Job for the claim: {all:?}"
    );
    // The outcome is harvested and the Job cleaned on the next pass's sweep.
    assert_eq!(failed_observe_attempts(&s), 1);
    delete_all(&ns).await?;
    drop(second);
    Ok(())
}

#[tokio::test]
async fn manager_killed_after_the_claim_leaves_one_job() -> anyhow::Result<()> {
    killed_after("after-claim").await
}

#[tokio::test]
async fn manager_killed_after_the_job_create_leaves_one_job() -> anyhow::Result<()> {
    killed_after("after-job-create").await
}

#[tokio::test]
async fn manager_killed_after_the_job_uid_leaves_one_job() -> anyhow::Result<()> {
    killed_after("after-job-uid").await
}

#[tokio::test]
async fn manager_killed_after_the_outcome_leaves_one_job() -> anyhow::Result<()> {
    killed_after("after-outcome").await
}

#[tokio::test]
async fn oci_source_is_resolved_verified_and_a_replaced_policy_is_read_at_once()
-> anyhow::Result<()> {
    use conformance::testkit::oci::{
        Registry, key_pair, key_policy, push_schema, run_ok, sha256, sign_command,
    };
    let ns = namespace("oci").await?;
    db_secret(&ns).await?;
    let registry = Registry::from_harness(ns.harness())?;
    let repository = format!("ptah-conformance/{}", ns.name());
    let digest = push_schema(
        &format!("{}/{repository}:v1", registry.host),
        b"table \"orders\" { schema = schema.public }\n",
    )
    .await?
    .digest;
    let work = tempfile::tempdir()?;
    let signer = key_pair(&registry.cosign, &work.path().join("signer"), "pw")?;
    let other = key_pair(&registry.cosign, &work.path().join("other"), "pw")?;
    run_ok(
        "cosign sign",
        &mut sign_command(
            &registry.cosign,
            work.path(),
            &signer,
            &format!("{}/{repository}@{digest}", registry.host),
            true,
            None,
        ),
    )?;
    let policy = key_policy(&signer.public_pem);
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "verification"},
        "data": {"policy.yaml": policy},
    }))
    .await?;
    let source = json!({
        "oci": {
            "ociRef": format!("oci://{}/{repository}:v1", registry.host),
            "transport": {"plainHTTP": true},
        },
        "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
    });
    ns.create::<PtahSchema>(schema("orders", source, "orders", "1h"))
        .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;

    // Resolve pins the digest, Verify accepts the signer, Observe reads it.
    let s = until(&ns, "orders", "the verified artifact", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .is_some_and(|src| src.verification.is_some())
    })
    .await
    .with_context(|| manager.log())?;
    let st = s.status.as_ref().context("status")?;
    let src = st.source.as_ref().context("source")?;
    assert_eq!(src.content_digest, digest);
    assert_eq!(
        src.oci.as_ref().map(|o| o.digest.as_str()),
        Some(digest.as_str())
    );
    let evidence = src.verification.as_ref().context("verification")?;
    assert_eq!(evidence.policy.digest, sha256(policy.as_bytes()));
    assert_eq!(evidence.authority.as_deref(), Some("release"));
    let reason = |t: SchemaConditionType| {
        st.conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.reason)
    };
    assert_eq!(
        reason(SchemaConditionType::ArtifactResolved),
        Some(Reason::DigestPinned)
    );
    assert_eq!(
        reason(SchemaConditionType::ArtifactVerified),
        Some(Reason::PolicySatisfied)
    );
    until(
        &ns,
        "orders",
        "the Observe claim on the pinned digest",
        |s| {
            s.status
                .as_ref()
                .and_then(|st| st.active_operation.as_ref())
                .is_some_and(|c| {
                    c.type_ == OperationType::Observe
                        && c.source
                            .as_ref()
                            .and_then(|b| b.resolved_reference.as_deref())
                            .is_some_and(|r| r.ends_with(&digest))
                })
        },
    )
    .await?;

    // The policy replaced by one trusting another key: read at once, the
    // artifact verified again, and refused — Blocked, naming the rule.
    let patch = Patch::Merge(json!({"data": {"policy.yaml": key_policy(&other.public_pem)}}));
    ns.api::<ConfigMap>()
        .patch("verification", &PatchParams::default(), &patch)
        .await?;
    let s = until(&ns, "orders", "PolicyRefused", |s| {
        phase(s) == Some(SchemaPhase::Blocked) && stalled_reason(s) == Some(Reason::PolicyRefused)
    })
    .await
    .with_context(|| manager.log())?;
    let verified = s
        .status
        .as_ref()
        .and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == SchemaConditionType::ArtifactVerified)
        })
        .context("ArtifactVerified")?;
    assert_eq!(verified.reason, Reason::PolicyRefused);
    assert!(
        verified.message.contains("authorities[release]"),
        "{}",
        verified.message
    );
    one_job_per_attempt(&jobs(&ns).await?)?;

    // Blocked by a policy answers a read request: recorded, a ReadRequested
    // Event, and the read the interval would start (a Resolve) starts now.
    let resolves = |all: &[(String, String, String)]| {
        all.iter()
            .filter(|(_, _, name)| name.starts_with("ptah-resolve-"))
            .count()
    };
    let before = resolves(&jobs(&ns).await?);
    let requested = "2026-11-30T09:00:00Z";
    annotate(&ns, "orders", requested).await?;
    until(&ns, "orders", "the request answered", |s| {
        s.status
            .as_ref()
            .and_then(|st| st.last_read_request.as_deref())
            == Some(requested)
    })
    .await
    .with_context(|| manager.log())?;
    PATIENCE
        .poll("a new Resolve Job and the ReadRequested Event", || {
            let ns = &ns;
            async move {
                let more = resolves(&jobs(ns).await?) > before;
                let events: Api<Event> = ns.api();
                let evented = events
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("ReadRequested"));
                anyhow::Ok((more && evented).then_some(()))
            }
        })
        .await
        .with_context(|| manager.log())?;
    one_job_per_attempt(&jobs(&ns).await?)?;
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn a_git_host_the_source_policy_refuses_fails_before_any_job() -> anyhow::Result<()> {
    let ns = namespace("githost").await?;
    db_secret(&ns).await?;
    let ep = endpoints(ns.harness());
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "sources"},
        "data": {"policy.yaml": "version: 1\nrules:\n  - git:\n      hosts: [git.example.com]\n"},
    }))
    .await?;
    let source = json!({
        "git": {"url": format!("{}/any.git", ep.daemon_url), "ref": {"branch": "main"}},
        "sourcePolicyFrom": {"name": "sources", "key": "policy.yaml"},
    });
    ns.create::<PtahSchema>(schema("orders", source, "orders", "1h"))
        .await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let s = until(&ns, "orders", "SourcePolicyRefused", |s| {
        phase(s) == Some(SchemaPhase::Failed)
            && s.status.as_ref().is_some_and(|st| {
                st.conditions.iter().any(|c| {
                    c.type_ == SchemaConditionType::ReconciliationFailed
                        && c.reason == Reason::SourcePolicyRefused
                })
            })
    })
    .await
    .with_context(|| manager.log())?;
    let message = s
        .status
        .as_ref()
        .and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == SchemaConditionType::ReconciliationFailed)
        })
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("rules"),
        "the refusal names the rule: {message}"
    );
    assert!(jobs(&ns).await?.is_empty(), "no Resolve Job was made");
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}

#[tokio::test]
async fn a_git_branch_is_read_again_at_its_interval() -> anyhow::Result<()> {
    let ns = namespace("gitint").await?;
    db_secret(&ns).await?;
    let ep = endpoints(ns.harness());
    let repo = unique("schemactl");
    let bare = create_repo(&ep.root, &format!("{repo}.git"), false)?;
    let first = commit_files(
        &bare,
        "main",
        &[("schema.sql", "CREATE TABLE a (id int);")],
        "one",
    )?;
    let source = json!({"git": {
        "url": format!("{}/{repo}.git", ep.daemon_url),
        "ref": {"branch": "main"},
    }});
    let mut manifest = schema("orders", source, "orders", "5s");
    manifest["spec"]["interval"] = json!("10s");
    ns.create::<PtahSchema>(manifest).await?;
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let commit_of = |s: &PtahSchema| {
        s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .and_then(|src| src.git.as_ref())
            .map(|g| g.commit.clone())
    };
    until(&ns, "orders", "the first commit", |s| {
        commit_of(s).as_deref() == Some(first.as_str())
    })
    .await
    .with_context(|| manager.log())?;
    // A push the manager is not told about: only the interval's Resolve
    // can see it.
    let second = commit_files(
        &bare,
        "main",
        &[("schema.sql", "CREATE TABLE b (id int);")],
        "two",
    )?;
    let s = until(&ns, "orders", "the pushed commit", |s| {
        commit_of(s).as_deref() == Some(second.as_str())
    })
    .await
    .with_context(|| manager.log())?;
    let resolves = jobs(&ns)
        .await?
        .into_iter()
        .filter(|(_, _, name)| name.starts_with("ptah-resolve-"))
        .count();
    assert!(resolves >= 2, "a Resolve Job per read of the branch");
    assert!(
        s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .is_some_and(|src| src.revision.contains(&second)),
        "the revision names the new commit"
    );
    delete_all(&ns).await?;
    drop(manager);
    Ok(())
}
