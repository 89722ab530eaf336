//! The migration lifecycle end to end on real revision tables, each line on
//! the harness's PostgreSQL and on its MariaDB: a real manager, its own
//! admission webhooks registered for the test's namespace, History and
//! Apply Jobs whose runner drives the pinned Ptah CLI, and the database read
//! back with its own client.
//!
//! * Under `OnApproval` a fresh database waits in `AwaitingApproval` with
//!   every version pending and no Apply Job; an approval of another
//!   fingerprint is refused at admission; the exact approval runs the
//!   plan, `VerifyingHistory` reads it back, and the migration is `InSync`
//!   (`HistoryMatched`), with `lastRun`, the journal and the revision table
//!   agreeing. The same from a ConfigMap, a Git tag, and a cosign-signed OCI
//!   artifact pushed with `ptah migrations push`.
//! * `apply: Always` runs without an approval and records authorization
//!   `Policy`.
//! * A migration failing at its third statement: `lastRun.outcome: Failed`
//!   with the version, the statement and the SQLSTATE (and MariaDB's errno);
//!   the dirty revision row holds the migration `Blocked` (`HistoryDirty`)
//!   until a person clears it with `ptah migrations set` and asks for a
//!   read; then the run goes on to `InSync`.
//! * An applied file edited (`HistoryModified`), the database ahead of the
//!   directory (`HistoryAhead`) and a version added below the applied ones
//!   (`HistoryOutOfOrder`) are each `Blocked`, and nothing runs.
//! * An unknown outcome (the Apply Pod deleted while its statement waits on
//!   a lock; on MariaDB a unique index over duplicate rows) is `Blocked`
//!   with `status.unresolvedRun` and its annotation copy; a restore that
//!   drops status puts the hold back from the annotation; an acknowledgment
//!   releases it (`RunAcknowledged`, joined to `RunFinished` by
//!   `operationID`), and the next plan needs an approval of its own.
//! * `apply: Never` rests in `Planning`, `Ready=False`, `ApplyDisabled`.
//! * A checkpoint bootstrap on a fresh database: the plan is Ptah's own
//!   selection (the checkpoint and what follows), and the squashed history
//!   gets no rows.
//! * A version applied by hand between the approval and the run: the run is
//!   refused under Ptah's lock with nothing applied, and `lastRun` says so.
//! * The manager killed right after each durable write of an Apply's
//!   dispatch: one Job for the claim at most, and every version runs once.

use std::time::Duration;

use anyhow::Context;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use conformance::gitserve::repo::tag;
use conformance::gitserve::{commit_files, create_repo};
use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::git::endpoints;
use conformance::testkit::job::{count, running_pod};
use conformance::testkit::journal::newest;
use conformance::testkit::manager::{Manager, ManagerSpec, free_port};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::oci::{Registry, key_policy_of, push_migrations, signed_by_new_key};
use conformance::testkit::operator::{Operator, PATIENCE, create_admitted};
use conformance::tools;
use k8s_openapi::api::core::v1::ConfigMap;
use operator::admission::webhook_configurations;
use operator::api::PtahMigrationApproval;
use operator::api::condition::{ConditionStatus, MigrationConditionType, MigrationPhase, Reason};
use operator::api::journal::{JournalEntry, JournalEntryType};
use operator::api::migration::{MigrationPlanSummary, MigrationRun, PtahMigration, RunOutcome};
use operator::api::status::Authorization;
use supplychain::oci::MIGRATIONS_ARTIFACT_TYPE;

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// Where the migration directory comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum From {
    ConfigMap,
    GitTag,
    Oci,
}

/// A test's namespace, its database, `orders` declared there, and the
/// operator running for it.
struct Scene {
    ns: TestNamespace,
    db: TestDatabase,
    operator: Operator,
}

impl Scene {
    /// `orders` reading `files` from `from`, under `policy`.
    async fn start(
        engine: Engine,
        test: &str,
        from: From,
        policy: Value,
        files: Value,
    ) -> anyhow::Result<Scene> {
        let ns = TestNamespace::for_operator(harness().await, "miglife", test).await?;
        let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
        declare(&ns, &db, from, policy, files).await?;
        let operator = Operator::start(&ns, webhook_configurations).await?;
        Ok(Scene { ns, db, operator })
    }

    /// `orders` reading [`executor::migration_files`] from a ConfigMap,
    /// under `policy`.
    async fn of_two_versions(engine: Engine, test: &str, policy: Value) -> anyhow::Result<Scene> {
        Self::start(
            engine,
            test,
            From::ConfigMap,
            policy,
            executor::migration_files(),
        )
        .await
    }

    async fn until(
        &self,
        what: &str,
        done: impl Fn(&PtahMigration) -> bool,
    ) -> anyhow::Result<PtahMigration> {
        self.operator.until(&self.ns, "orders", what, done).await
    }

    async fn finish(self) -> anyhow::Result<()> {
        self.operator.finish::<PtahMigration>(&self.ns).await
    }

    /// The database's tables, the revision table aside.
    fn tables(&self) -> anyhow::Result<Vec<String>> {
        let mut tables = self.db.tables()?;
        tables.retain(|t| t != "schema_migrations");
        Ok(tables)
    }

    /// The versions the revision table holds, in order.
    fn revisions(&self) -> anyhow::Result<Vec<i64>> {
        let rows = self
            .db
            .sql("SELECT version FROM schema_migrations ORDER BY version")?;
        rows.lines()
            .map(|l| l.trim().parse::<i64>().context("a version"))
            .collect()
    }

    /// Replaces the directory with `files`: keys not in it are gone.
    async fn set_files(&self, files: Value) -> anyhow::Result<()> {
        let api = self.ns.api::<ConfigMap>();
        let mut cm = api.get("orders-migrations").await?;
        cm.data = Some(serde_json::from_value(files)?);
        api.replace("orders-migrations", &Default::default(), &cm)
            .await?;
        Ok(())
    }

    /// Writes a read request later than any before.
    async fn request_read(&self) -> anyhow::Result<()> {
        let at = k8s_openapi::jiff::Timestamp::now().to_string();
        self.ns
            .api::<PtahMigration>()
            .patch(
                "orders",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    operator::api::annotations::READ_REQUESTED_AT: at,
                }}})),
            )
            .await?;
        Ok(())
    }
}

/// The source of `orders` as `from` says, holding `files`, and the
/// PtahMigration under `policy`.
async fn declare(
    ns: &TestNamespace,
    db: &TestDatabase,
    from: From,
    policy: Value,
    files: Value,
) -> anyhow::Result<()> {
    let listed: Vec<(String, String)> = files
        .as_object()
        .context("files by name")?
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let source = match from {
        From::ConfigMap => {
            return executor::migration_under(ns, db, "orders", policy, files).await;
        }
        From::GitTag => {
            let ep = endpoints(ns.harness());
            let repo = conformance::testkit::unique("miglife");
            let bare = create_repo(&ep.root, &format!("{repo}.git"), false)?;
            let in_repo: Vec<(String, String)> = listed
                .iter()
                .map(|(k, v)| (format!("db/migrations/{k}"), v.clone()))
                .collect();
            let refs: Vec<(&str, &str)> = in_repo
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let commit = commit_files(&bare, "main", &refs, "migrations")?;
            tag(&bare, "v1", &commit, Some("release v1"))?;
            json!({"git": {
                "url": format!("{}/{repo}.git", ep.daemon_url),
                "ref": {"tag": "v1"},
                "path": "db/migrations",
            }})
        }
        From::Oci => {
            let registry = Registry::from_harness(ns.harness())?;
            let repository = format!("ptah-conformance/{}", ns.name());
            let tagged = format!("{}/{repository}:v1", registry.host);
            let refs: Vec<(&str, &[u8])> = listed
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_bytes()))
                .collect();
            let pushed = push_migrations(&tagged, &refs).await?;
            let work = tempfile::tempdir()?;
            let pinned = format!("{}/{repository}@{}", registry.host, pushed.digest);
            let signer = signed_by_new_key(&registry, work.path(), "signer", &pinned)?;
            ns.create::<ConfigMap>(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "verification"},
                "data": {"policy.yaml": key_policy_of(&signer.public_pem, MIGRATIONS_ARTIFACT_TYPE)},
            }))
            .await?;
            json!({
                "oci": {"ociRef": format!("oci://{tagged}"), "transport": {"plainHTTP": true}},
                "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
            })
        }
    };
    executor::migration_from(ns, db, "orders", source, policy).await
}

fn phase(m: &PtahMigration) -> Option<MigrationPhase> {
    m.status.as_ref().and_then(|st| st.phase)
}

fn condition(m: &PtahMigration, t: MigrationConditionType) -> Option<(ConditionStatus, Reason)> {
    let st = m.status.as_ref()?;
    let c = st.conditions.iter().find(|c| c.type_ == t)?;
    Some((c.status, c.reason))
}

fn stalled_reason(m: &PtahMigration) -> Option<Reason> {
    (phase(m) == Some(MigrationPhase::Blocked))
        .then(|| condition(m, MigrationConditionType::Stalled).map(|c| c.1))
        .flatten()
}

fn plan_of(m: &PtahMigration) -> anyhow::Result<MigrationPlanSummary> {
    m.status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("status.plan")
}

fn last_run(m: &PtahMigration) -> anyhow::Result<MigrationRun> {
    m.status
        .as_ref()
        .and_then(|st| st.last_run.clone())
        .context("status.lastRun")
}

fn entry(m: &PtahMigration, t: JournalEntryType) -> anyhow::Result<JournalEntry> {
    newest(&m.status.as_ref().context("status")?.journal, t)
}

fn in_sync_after_a_run(m: &PtahMigration) -> bool {
    phase(m) == Some(MigrationPhase::InSync)
        && m.status.as_ref().is_some_and(|st| st.last_run.is_some())
}

/// An approval of `plan` of `migration`, with the fingerprint given.
fn approval(
    name: &str,
    m: &PtahMigration,
    plan: &MigrationPlanSummary,
    fingerprint: &str,
) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigrationApproval",
        "metadata": {"name": name},
        "spec": {
            "migrationRef": {"name": m.name_any(), "uid": m.uid().unwrap_or_default()},
            "planRef": {"name": plan.name, "uid": plan.uid},
            "planFingerprint": fingerprint,
        }
    })
}

async fn apply_jobs(ns: &TestNamespace) -> anyhow::Result<usize> {
    count(ns, "apply").await
}

async fn first_migration_waits_for_its_exact_approval(
    engine: Engine,
    test: &str,
    from: From,
) -> anyhow::Result<()> {
    let scene = Scene::start(
        engine,
        test,
        from,
        json!({"apply": "OnApproval"}),
        executor::migration_files(),
    )
    .await?;
    let ns = &scene.ns;
    let m = scene
        .until("AwaitingApproval", |m| {
            phase(m) == Some(MigrationPhase::AwaitingApproval)
        })
        .await?;
    let plan = plan_of(&m)?;
    assert!(plan.approval_required, "{plan:?}");
    assert_eq!(
        (plan.steps, plan.to_version),
        (Some(2), Some(2)),
        "{plan:?}"
    );
    let history = m
        .status
        .as_ref()
        .and_then(|st| st.history.clone())
        .context("status.history")?;
    assert_eq!(history.pending_count, Some(2), "every version pending");
    assert_eq!(apply_jobs(ns).await?, 0);
    assert!(scene.tables()?.is_empty());

    let other = format!("sha256:{}", "0".repeat(64));
    let refused =
        create_admitted::<PtahMigrationApproval>(ns, approval("wrong", &m, &plan, &other)).await;
    let message = format!(
        "{:#}",
        refused.err().context("a forged fingerprint was admitted")?
    );
    assert!(message.contains("planFingerprint"), "{message}");

    let approved: PtahMigrationApproval =
        create_admitted(ns, approval("orders-1", &m, &plan, &plan.fingerprint)).await?;
    let approver = approved
        .spec
        .approver
        .clone()
        .context("admission stamped the approver")?;
    let m = scene
        .until("InSync after the run", in_sync_after_a_run)
        .await?;
    assert_eq!(
        condition(&m, MigrationConditionType::Ready),
        Some((ConditionStatus::True, Reason::HistoryMatched))
    );
    let run = last_run(&m)?;
    assert_eq!(run.outcome, RunOutcome::Applied, "{run:?}");
    assert_eq!(run.authorization, Some(Authorization::Approval));
    assert_eq!(run.approval_uid, approved.uid());
    assert_eq!(run.approval_name.as_deref(), Some("orders-1"));
    assert_eq!(run.approver.as_ref(), Some(&approver));
    assert_eq!(run.plan_uid.as_deref(), Some(plan.uid.as_str()));
    assert_eq!(
        run.plan_fingerprint.as_deref(),
        Some(plan.fingerprint.as_str())
    );
    assert_eq!(run.applied_versions, [1, 2]);
    assert!(run.job_name.is_some() && run.job_uid.is_some(), "{run:?}");
    assert!(run.verification.is_some(), "{run:?}");
    // The run's whole identity: where it read from, which database, under
    // which execution binding.
    assert!(
        run.source.is_some() && run.execution_binding.is_some(),
        "{run:?}"
    );
    assert!(
        run.target_identity_digest.is_some() && run.coordination_digest.is_some(),
        "{run:?}"
    );
    assert!(
        run.started_at.is_some() && run.finished_at.is_some(),
        "{run:?}"
    );
    let accepted = entry(&m, JournalEntryType::ApprovalAccepted)?;
    let finished = entry(&m, JournalEntryType::RunFinished)?;
    let verified = entry(&m, JournalEntryType::Verified)?;
    for e in [&accepted, &finished, &verified] {
        assert_eq!(
            e.operation_id.as_deref(),
            Some(run.operation_id.as_str()),
            "{e:?}"
        );
        assert_eq!(e.plan_uid.as_deref(), Some(plan.uid.as_str()), "{e:?}");
    }
    assert_eq!(
        entry(&m, JournalEntryType::PlanPublished)?.plan_uid,
        Some(plan.uid)
    );
    assert_eq!(scene.tables()?, ["customers", "orders"]);
    assert_eq!(scene.revisions()?, [1, 2]);
    assert_eq!(apply_jobs(ns).await?, 1);
    scene.finish().await
}

async fn always_runs_under_its_policy(engine: Engine, test: &str) -> anyhow::Result<()> {
    let scene = Scene::of_two_versions(engine, test, json!({"apply": "Always"})).await?;
    let m = scene
        .until("InSync after the run", in_sync_after_a_run)
        .await?;
    let run = last_run(&m)?;
    assert_eq!(run.authorization, Some(Authorization::Policy), "{run:?}");
    assert_eq!(
        (run.approval_name, run.approval_uid, run.approver),
        (None, None, None)
    );
    assert!(entry(&m, JournalEntryType::ApprovalAccepted).is_err());
    assert_eq!(
        entry(&m, JournalEntryType::RunFinished)?.operation_id,
        Some(run.operation_id)
    );
    assert_eq!(scene.revisions()?, [1, 2]);
    scene.finish().await
}

/// [`executor::migration_files`] and a third version of three statements,
/// the third of which meets a row a person wrote into `orders` (a duplicate
/// key: a statement whose failure commits nothing, on either engine).
fn with_third() -> Value {
    let mut files = executor::migration_files();
    files["0000000003_carriers.up.sql"] = json!(
        "CREATE TABLE carriers (id bigint PRIMARY KEY);\nINSERT INTO carriers (id) VALUES (1);\nINSERT INTO orders (id) VALUES (1);\n"
    );
    files["0000000003_carriers.down.sql"] = json!("DROP TABLE carriers;\n");
    files
}

/// `ptah migrations <args>` of the directory `files` against `db`, as a
/// person runs it (the URL goes to Ptah's environment only).
fn ptah_migrations(db: &TestDatabase, files: &Value, args: &[&str]) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let dir = work.path().join("migrations");
    std::fs::create_dir_all(&dir)?;
    for (name, content) in files.as_object().context("files by name")? {
        std::fs::write(dir.join(name), content.as_str().unwrap_or_default())?;
    }
    let out = std::process::Command::new(tools::tool("ptah")?)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", work.path())
        .env("PTAH_DB_URL", db.url())
        .current_dir(work.path())
        .arg("migrations")
        .args(args)
        .arg(format!("--migrations-dir={}", dir.display()))
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "ptah migrations {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `ptah migrations set --version=<version>`: a person clears a dirty row.
fn migrations_set(db: &TestDatabase, files: &Value, version: i64) -> anyhow::Result<()> {
    ptah_migrations(db, files, &["set", &format!("--version={version}")])
}

/// What a person does to clear the dirty rows above `version`: `ptah
/// migrations set`, except on PostgreSQL, where this Ptah commit's `set`
/// cannot remove a row (`operator does not exist: bigint ~~ unknown`;
/// docs/migrations.md), so the row is deleted with `psql`.
fn clear_rows_above(db: &TestDatabase, files: &Value, version: i64) -> anyhow::Result<()> {
    match db.engine {
        Engine::MariaDb => migrations_set(db, files, version),
        Engine::Postgres => {
            db.sql(&format!(
                "DELETE FROM schema_migrations WHERE version > {version}"
            ))?;
            Ok(())
        }
    }
}

async fn failure_at_the_third_statement(engine: Engine, test: &str) -> anyhow::Result<()> {
    let scene = Scene::of_two_versions(engine, test, json!({"apply": "Always"})).await?;
    scene
        .until("InSync after the run", in_sync_after_a_run)
        .await?;
    // A row the third version's third statement will meet.
    scene.db.sql("INSERT INTO orders (id) VALUES (1)")?;
    scene.set_files(with_third()).await?;

    let m = scene
        .until("Blocked by the dirty row", |m| {
            stalled_reason(m) == Some(Reason::HistoryDirty)
        })
        .await?;
    let run = last_run(&m)?;
    assert_eq!(run.outcome, RunOutcome::Failed, "{run:?}");
    assert!(run.applied_versions.is_empty(), "{run:?}");
    let failure = run.failure.clone().context("lastRun.failure")?;
    assert_eq!(failure.version, 3, "{failure:?}");
    assert_eq!(failure.statement_position, Some(3), "{failure:?}");
    match engine {
        Engine::Postgres => {
            assert_eq!(failure.sqlstate.as_deref(), Some("23505"), "{failure:?}");
            assert_eq!(failure.mysql_errno, None, "{failure:?}");
        }
        Engine::MariaDb => {
            assert_eq!(failure.mysql_errno, Some(1062), "{failure:?}");
            assert_eq!(failure.sqlstate.as_deref(), Some("23000"), "{failure:?}");
        }
    }
    // No SQL text anywhere in the run.
    let text = serde_json::to_string(&run)?;
    assert!(!text.contains("INSERT"), "{text}");
    assert_eq!(apply_jobs(&scene.ns).await?, 2);

    // It stays there: nothing runs again by itself.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let m = scene.ns.api::<PtahMigration>().get("orders").await?;
    assert_eq!(stalled_reason(&m), Some(Reason::HistoryDirty));
    assert_eq!(apply_jobs(&scene.ns).await?, 2);

    // A person puts the database right, clears the row, and asks for a read.
    scene.db.sql("DELETE FROM orders WHERE id = 1")?;
    if engine == Engine::MariaDb {
        // Without a transaction the first two statements stayed.
        scene.db.sql("DROP TABLE carriers")?;
    }
    clear_rows_above(&scene.db, &with_third(), 2)?;
    scene.request_read().await?;
    let m = scene
        .until("InSync after the cleared row", |m| {
            in_sync_after_a_run(m) && last_run(m).is_ok_and(|r| r.outcome == RunOutcome::Applied)
        })
        .await?;
    assert_eq!(last_run(&m)?.applied_versions, [3]);
    assert_eq!(scene.revisions()?, [1, 2, 3]);
    assert_eq!(apply_jobs(&scene.ns).await?, 3);
    scene.finish().await
}

async fn history_verdicts_block(engine: Engine, test: &str) -> anyhow::Result<()> {
    let files = |versions: &[(i64, &str)]| {
        let mut out = serde_json::Map::new();
        for (v, table) in versions {
            out.insert(
                format!("{v:010}_{table}.up.sql"),
                json!(format!("CREATE TABLE {table} (id bigint PRIMARY KEY);\n")),
            );
            out.insert(
                format!("{v:010}_{table}.down.sql"),
                json!(format!("DROP TABLE {table};\n")),
            );
        }
        Value::Object(out)
    };
    let base = [(10, "orders"), (30, "customers")];
    let scene = Scene::start(
        engine,
        test,
        From::ConfigMap,
        json!({"apply": "Always"}),
        files(&base),
    )
    .await?;
    scene
        .until("InSync after the run", in_sync_after_a_run)
        .await?;
    let applies = apply_jobs(&scene.ns).await?;

    // A version below the applied ones.
    scene
        .set_files(files(&[
            (10, "orders"),
            (20, "carriers"),
            (30, "customers"),
        ]))
        .await?;
    scene
        .until("Blocked, out of order", |m| {
            stalled_reason(m) == Some(Reason::HistoryOutOfOrder)
        })
        .await?;

    // An applied file edited.
    let mut edited = files(&base);
    edited["0000000010_orders.up.sql"] =
        json!("CREATE TABLE orders (id bigint PRIMARY KEY, note text);\n");
    scene.set_files(edited).await?;
    let m = scene
        .until("Blocked, modified", |m| {
            stalled_reason(m) == Some(Reason::HistoryModified)
        })
        .await?;
    let modified = m
        .status
        .as_ref()
        .and_then(|st| st.history.as_ref())
        .map(|h| h.modified_versions.clone())
        .unwrap_or_default();
    assert_eq!(modified, [10]);

    // The database ahead of the directory.
    scene.set_files(files(&[(10, "orders")])).await?;
    scene
        .until("Blocked, ahead", |m| {
            stalled_reason(m) == Some(Reason::HistoryAhead)
        })
        .await?;

    // None of them ran anything.
    assert_eq!(apply_jobs(&scene.ns).await?, applies);
    assert_eq!(scene.revisions()?, [10, 30]);
    assert_eq!(scene.tables()?, ["customers", "orders"]);

    // Back to the directory the database has: InSync again.
    scene.set_files(files(&base)).await?;
    scene
        .until("InSync again", |m| phase(m) == Some(MigrationPhase::InSync))
        .await?;
    scene.finish().await
}

/// How a run's outcome becomes one nobody established.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Unknown {
    /// The Apply Pod deleted while its statement waits on a lock.
    PodDeleted,
    /// MariaDB: a unique index over duplicate rows, whose failure may still
    /// have committed.
    UniqueIndexOverDuplicates,
}

/// The first version, and a second as `how` needs it.
fn orders_then(second: Option<&str>) -> Value {
    let mut files = json!({
        "0000000001_orders.up.sql": "CREATE TABLE orders (id bigint PRIMARY KEY, customer varchar(64) NOT NULL);\n",
        "0000000001_orders.down.sql": "DROP TABLE orders;\n",
    });
    if let Some(up) = second {
        files["0000000002_second.up.sql"] = json!(up);
        files["0000000002_second.down.sql"] = json!("SELECT 1;\n");
    }
    files
}

async fn approve(
    scene: &Scene,
    m: &PtahMigration,
    name: &str,
) -> anyhow::Result<PtahMigrationApproval> {
    let plan = plan_of(m)?;
    create_admitted(&scene.ns, approval(name, m, &plan, &plan.fingerprint)).await
}

async fn unknown_outcome_held_until_acknowledged(
    engine: Engine,
    test: &str,
    how: Unknown,
) -> anyhow::Result<()> {
    // Its future holds a dozen migrations across awaits: on the heap, not
    // on the test thread's 2 MiB stack, which a debug build overflows.
    Box::pin(held_until_acknowledged(engine, test, how)).await
}

async fn held_until_acknowledged(engine: Engine, test: &str, how: Unknown) -> anyhow::Result<()> {
    use operator::api::annotations::UNRESOLVED_RUN;
    use operator::api::approval::PtahMigrationRunAcknowledgment;
    let scene = Scene::start(
        engine,
        test,
        From::ConfigMap,
        json!({"apply": "OnApproval"}),
        orders_then(None),
    )
    .await?;
    let awaiting = |m: &PtahMigration| phase(m) == Some(MigrationPhase::AwaitingApproval);
    let m = scene.until("AwaitingApproval", awaiting).await?;
    approve(&scene, &m, "first").await?;
    let m = scene
        .until("InSync after the first run", in_sync_after_a_run)
        .await?;
    let first_plan = plan_of(&m).ok().map(|p| p.uid);
    scene
        .db
        .sql("INSERT INTO orders (id, customer) VALUES (1, 'ada'), (2, 'ada')")?;

    let second = match how {
        Unknown::PodDeleted => "ALTER TABLE orders ADD COLUMN note varchar(32);\n",
        Unknown::UniqueIndexOverDuplicates => {
            "CREATE UNIQUE INDEX orders_customer ON orders (customer);\n"
        }
    };
    scene.set_files(orders_then(Some(second))).await?;
    let m = scene
        .until("the second version awaiting", |m| {
            awaiting(m) && plan_of(m).ok().map(|p| p.uid) != first_plan
        })
        .await?;
    let applies = apply_jobs(&scene.ns).await?;
    match how {
        Unknown::PodDeleted => {
            use k8s_openapi::api::core::v1::Pod;
            let mut lock = scene.db.lock_table("orders", 30)?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            approve(&scene, &m, "second").await?;
            let pod = running_pod(&scene.ns, "ptah-m-apply-", &PATIENCE)
                .await
                .with_context(|| scene.operator.log())?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            scene
                .ns
                .api::<Pod>()
                .delete(&pod.name_any(), &Default::default())
                .await?;
            let held = scene
                .until("the run held", |m| {
                    m.status
                        .as_ref()
                        .is_some_and(|st| st.unresolved_run.is_some())
                })
                .await;
            let _ = lock.kill();
            let _ = lock.wait();
            held?;
        }
        Unknown::UniqueIndexOverDuplicates => {
            approve(&scene, &m, "second").await?;
        }
    }
    let m = scene
        .until("Blocked with the run unresolved", |m| {
            phase(m) == Some(MigrationPhase::Blocked)
                && m.status
                    .as_ref()
                    .is_some_and(|st| st.unresolved_run.is_some())
        })
        .await?;
    let held = m
        .status
        .as_ref()
        .and_then(|st| st.unresolved_run.clone())
        .context("status.unresolvedRun")?;
    assert!(
        matches!(held.outcome, RunOutcome::Unknown | RunOutcome::Partial),
        "{held:?}"
    );
    // The hold's copy is on the object, where a restore finds it.
    let copy = m
        .annotations()
        .get(UNRESOLVED_RUN)
        .context("the unresolved-run annotation")?;
    assert!(copy.contains(&held.operation_id), "{copy}");
    assert_eq!(apply_jobs(&scene.ns).await?, applies + 1);

    // Nothing runs while it is held, whatever the interval brings.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(apply_jobs(&scene.ns).await?, applies + 1);

    // A restore that drops status (the object deleted and made again from
    // its metadata and spec): the hold is back from its annotation.
    let m = if how == Unknown::PodDeleted {
        let api = scene.ns.api::<PtahMigration>();
        api.delete("orders", &Default::default()).await?;
        PATIENCE
            .poll("the migration gone", || async {
                anyhow::Ok(api.get_opt("orders").await?.is_none().then_some(()))
            })
            .await?;
        api.create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahMigration",
                "metadata": {"name": "orders", "annotations": m.annotations()},
                "spec": m.spec,
            }))?,
        )
        .await?;
        let restored = scene
            .until("the hold back from its annotation", |m| {
                phase(m) == Some(MigrationPhase::Blocked)
                    && m.status.as_ref().is_some_and(|st| {
                        st.unresolved_run
                            .as_ref()
                            .is_some_and(|r| r.operation_id == held.operation_id)
                    })
            })
            .await?;
        // Its Jobs went with the deleted object; the restored one starts none.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(apply_jobs(&scene.ns).await?, 0, "the restore ran nothing");
        restored
    } else {
        m
    };

    let ran = apply_jobs(&scene.ns).await?;

    // A person establishes what the run did and acknowledges it.
    let ack: PtahMigrationRunAcknowledgment = create_admitted(
        &scene.ns,
        json!({
            "apiVersion": "operator.ptah.run/v1alpha1",
            "kind": "PtahMigrationRunAcknowledgment",
            "metadata": {"name": "orders-second"},
            "spec": {
                "migrationRef": {"name": "orders", "uid": m.uid()},
                "operationID": held.operation_id,
            },
        }),
    )
    .await?;
    assert!(ack.spec.acknowledged_by.is_some(), "admission stamped who");
    // The status write releases the hold; the manager's copy of it goes in
    // the write after that (removed after the status, as it was written
    // before it), so both are waited for.
    let m = scene
        .until("the hold released and its copy removed", |m| {
            let released = m
                .status
                .as_ref()
                .is_some_and(|st| st.unresolved_run.is_none() && st.resolved_run.is_some());
            released && !m.annotations().contains_key(UNRESOLVED_RUN)
        })
        .await?;
    let acknowledged = entry(&m, JournalEntryType::RunAcknowledged)?;
    assert_eq!(
        acknowledged.operation_id.as_deref(),
        Some(held.operation_id.as_str())
    );
    assert_eq!(
        entry(&m, JournalEntryType::RunFinished)?.operation_id,
        acknowledged.operation_id
    );

    // What the run left decides what comes next; a dirty row is a person's
    // to clear, and the next plan needs its own approval.
    let m = scene
        .until("the next verdict", |m| {
            awaiting(m) || stalled_reason(m) == Some(Reason::HistoryDirty) || in_sync_after_a_run(m)
        })
        .await?;
    if stalled_reason(&m) == Some(Reason::HistoryDirty) {
        scene.db.sql("DELETE FROM orders WHERE id = 2")?;
        clear_rows_above(&scene.db, &orders_then(Some(second)), 1)?;
        scene.request_read().await?;
    }
    if !in_sync_after_a_run(&m) || last_run(&m)?.applied_versions != [2] {
        let m = scene
            .until("a new plan awaiting its approval", awaiting)
            .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            apply_jobs(&scene.ns).await?,
            ran,
            "the spent approval ran nothing"
        );
        approve(&scene, &m, "third").await?;
        let m = scene
            .until("InSync after the new approval", |m| {
                in_sync_after_a_run(m) && last_run(m).is_ok_and(|r| r.applied_versions == [2])
            })
            .await?;
        assert_eq!(last_run(&m)?.approval_name.as_deref(), Some("third"));
    }
    assert_eq!(scene.revisions()?, [1, 2]);
    scene.finish().await
}

async fn never_rests_in_planning(engine: Engine, test: &str) -> anyhow::Result<()> {
    let scene = Scene::of_two_versions(engine, test, json!({"apply": "Never"})).await?;
    let m = scene
        .until("Planning with ApplyDisabled", |m| {
            phase(m) == Some(MigrationPhase::Planning)
                && condition(m, MigrationConditionType::Ready)
                    == Some((ConditionStatus::False, Reason::ApplyDisabled))
        })
        .await?;
    assert_eq!(plan_of(&m)?.steps, Some(2), "the plan is published");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(apply_jobs(&scene.ns).await?, 0, "and never applied");
    assert!(scene.tables()?.is_empty());
    scene.finish().await
}

/// `ptah migrations up --limit=1`: a person applying a version by hand.
fn up_by_hand(db: &TestDatabase, files: &Value) -> anyhow::Result<()> {
    match db.engine {
        Engine::Postgres => ptah_migrations(db, files, &["up", "--limit=1"]),
        // This commit refuses its default tx-mode there (docs/executor.md).
        Engine::MariaDb => ptah_migrations(db, files, &["up", "--limit=1", "--tx-mode=none"]),
    }
}

async fn history_moved_after_the_approval(engine: Engine, test: &str) -> anyhow::Result<()> {
    let scene = Scene::of_two_versions(engine, test, json!({"apply": "OnApproval"})).await?;
    let m = scene
        .until("AwaitingApproval", |m| {
            phase(m) == Some(MigrationPhase::AwaitingApproval)
        })
        .await?;
    // Between the approval and the run, a person applies the first version.
    up_by_hand(&scene.db, &executor::migration_files())?;
    assert_eq!(scene.revisions()?, [1]);
    approve(&scene, &m, "orders-1").await?;
    let m = scene
        .until("the run refused", |m| {
            last_run(m).is_ok_and(|r| r.outcome == RunOutcome::Failed)
        })
        .await?;
    let run = last_run(&m)?;
    assert!(run.applied_versions.is_empty(), "{run:?}");
    let message = run.message.clone().unwrap_or_default();
    assert!(message.contains("refused before any change"), "{message}");
    // Nothing of the approved sequence ran: only the version run by hand.
    assert_eq!(scene.revisions()?, [1]);
    assert_eq!(scene.tables()?, ["orders"]);
    // The history read after it sees the second version pending: a new plan,
    // for its own approval.
    let m = scene
        .until("a new plan awaiting", |m| {
            phase(m) == Some(MigrationPhase::AwaitingApproval)
                && plan_of(m).is_ok_and(|p| p.steps == Some(1))
        })
        .await?;
    assert_eq!(plan_of(&m)?.from_version, Some(1));
    assert_eq!(apply_jobs(&scene.ns).await?, 1);
    scene.finish().await
}

async fn killed_during_the_apply(
    engine: Engine,
    test: &str,
    point: &'static str,
) -> anyhow::Result<()> {
    use operator::api::approval::PtahMigrationRunAcknowledgment;
    let ns = TestNamespace::for_operator(harness().await, "miglife", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    executor::migration(&ns, &db, "orders").await?;
    let port = free_port()?;
    let mut killed = Manager::start(
        &ns,
        &ManagerSpec {
            fault_point: Some(point),
            fault_operation: Some("apply"),
            port: Some(port),
            ..ManagerSpec::default()
        },
    )?;
    let exit = killed.exited(Duration::from_secs(180)).await?;
    assert_eq!(
        exit.code(),
        Some(86),
        "stopped at {point}: {}",
        killed.log()
    );
    let m = ns.api::<PtahMigration>().get("orders").await?;
    let operation = match point {
        "after-outcome" => entry(&m, JournalEntryType::RunFinished)?
            .operation_id
            .context("the run's operation")?,
        _ => {
            let claim = m
                .status
                .as_ref()
                .and_then(|st| st.active_operation.clone())
                .context("the Apply claim")?;
            assert_eq!(claim.type_, operator::api::status::OperationType::Apply);
            assert!(claim.dispatch_started, "dispatchStarted precedes the Job");
            claim.operation_id
        }
    };

    let operator = Operator::start_on(&ns, webhook_configurations, port).await?;
    let m = operator
        .until(
            &ns,
            "orders",
            "InSync, or the run held",
            |m: &PtahMigration| {
                in_sync_after_a_run(m)
                    || m.status
                        .as_ref()
                        .is_some_and(|st| st.unresolved_run.is_some())
            },
        )
        .await?;
    if let Some(held) = m.status.as_ref().and_then(|st| st.unresolved_run.clone()) {
        // A claim whose run nobody saw end is held for a person, who finds
        // nothing ran and says so.
        assert_eq!(held.operation_id, operation);
        create_admitted::<PtahMigrationRunAcknowledgment>(
            &ns,
            json!({
                "apiVersion": "operator.ptah.run/v1alpha1",
                "kind": "PtahMigrationRunAcknowledgment",
                "metadata": {"name": "orders-killed"},
                "spec": {
                    "migrationRef": {"name": "orders", "uid": m.uid()},
                    "operationID": held.operation_id,
                },
            }),
        )
        .await?;
        operator
            .until(
                &ns,
                "orders",
                "InSync after the acknowledgment",
                in_sync_after_a_run,
            )
            .await?;
    }
    // Every version ran exactly once, and the killed claim had one Job at most.
    let jobs = ns
        .api::<k8s_openapi::api::batch::v1::Job>()
        .list(&Default::default())
        .await?;
    let of_claim = jobs
        .items
        .iter()
        .filter(|j| j.annotations().get("operator.ptah.run/operation-id") == Some(&operation))
        .count();
    assert!(of_claim <= 1, "one Job for the claim at most: {of_claim}");
    let applies = apply_jobs(&ns).await?;
    if point == "after-claim" {
        assert!(applies <= 1, "{applies}");
    } else {
        assert_eq!(applies, 1, "no second Apply");
    }
    let rows = db.sql("SELECT version FROM schema_migrations ORDER BY version")?;
    assert_eq!(rows.lines().collect::<Vec<_>>(), ["1", "2"]);
    operator.finish::<PtahMigration>(&ns).await
}

async fn checkpoint_bootstrap(engine: Engine, test: &str) -> anyhow::Result<()> {
    // Two versions squashed into a checkpoint at 3, and one after it.
    let mut files = executor::migration_files();
    files["0000000003_base.checkpoint.up.sql"] = json!(
        "CREATE TABLE orders (id bigint PRIMARY KEY);\nCREATE TABLE customers (id bigint PRIMARY KEY, name varchar(64) NOT NULL);\n"
    );
    files["0000000003_base.checkpoint.down.sql"] =
        json!("DROP TABLE customers;\nDROP TABLE orders;\n");
    files["0000000004_carriers.up.sql"] = json!("CREATE TABLE carriers (id bigint PRIMARY KEY);\n");
    files["0000000004_carriers.down.sql"] = json!("DROP TABLE carriers;\n");
    let scene = Scene::start(
        engine,
        test,
        From::ConfigMap,
        json!({"apply": "OnApproval"}),
        files,
    )
    .await?;
    let m = scene
        .until("AwaitingApproval", |m| {
            phase(m) == Some(MigrationPhase::AwaitingApproval)
        })
        .await?;
    // Ptah's own selection on a fresh database: the checkpoint, then what
    // follows it; never four files less nothing applied.
    let plan = plan_of(&m)?;
    assert_eq!(
        (plan.steps, plan.to_version),
        (Some(2), Some(4)),
        "{plan:?}"
    );
    assert_eq!(
        m.status
            .as_ref()
            .and_then(|st| st.history.as_ref())
            .and_then(|h| h.pending_count),
        Some(2)
    );
    approve(&scene, &m, "bootstrap").await?;
    let m = scene
        .until("InSync after the run", in_sync_after_a_run)
        .await?;
    assert_eq!(last_run(&m)?.applied_versions, [3, 4]);
    assert_eq!(
        scene.revisions()?,
        [3, 4],
        "the squashed history gets no rows"
    );
    assert_eq!(
        m.status
            .as_ref()
            .and_then(|st| st.history.as_ref())
            .and_then(|h| h.checkpoint_version),
        Some(3)
    );
    assert_eq!(scene.tables()?, ["carriers", "customers", "orders"]);
    scene.finish().await
}

/// Versions `from..from + 10`, each creating its own table.
fn ten_versions(files: &mut Value, from: i64) {
    for v in from..from + 10 {
        files[format!("{v:010}_t{v}.up.sql")] =
            json!(format!("CREATE TABLE t{v} (id bigint PRIMARY KEY);\n"));
        files[format!("{v:010}_t{v}.down.sql")] = json!(format!("DROP TABLE t{v};\n"));
    }
}

/// An approval to `InSync` for ten new versions at a time, on PostgreSQL,
/// `BENCH_RUNS` times (default 1: the test command runs it once, asserting
/// only what it measured), beside the empty-Job floor. Run N times by
/// `conformance/bench/migration-run.sh`; the numbers are in
/// docs/performance.md.
#[tokio::test]
async fn bench_migration_run() -> anyhow::Result<()> {
    use conformance::testkit::bench::{
        FAST, Stretch, floor_ms, jobs_ended, new_runner_timings, report, runs,
    };
    let runs = runs(1);
    let mut files = json!({});
    ten_versions(&mut files, 1);
    let scene = Scene::start(
        Engine::Postgres,
        "bench-run",
        From::ConfigMap,
        json!({"apply": "OnApproval"}),
        files.clone(),
    )
    .await?;
    let (floor, floors) = floor_ms(&scene.ns, runs).await?;
    let mut seen = std::collections::BTreeSet::new();
    let mut stretches = Vec::new();
    for i in 0..runs as i64 {
        if i > 0 {
            ten_versions(&mut files, 1 + 10 * i);
            scene.set_files(files.clone()).await?;
        }
        let m = scene
            .until("ten versions awaiting", |m| {
                phase(m) == Some(MigrationPhase::AwaitingApproval)
                    && plan_of(m).is_ok_and(|p| p.to_version == Some(10 * (i + 1)))
            })
            .await?;
        new_runner_timings(&scene.ns, &mut seen)?;
        let t0 = std::time::Instant::now();
        approve(&scene, &m, &format!("run-{i}")).await?;
        FAST.poll("InSync", || async {
            let m = scene.ns.api::<PtahMigration>().get("orders").await?;
            anyhow::Ok(
                (phase(&m) == Some(MigrationPhase::InSync)
                    && last_run(&m).is_ok_and(|r| {
                        r.applied_versions.len() == 10
                            && r.applied_versions.last() == Some(&(10 * (i + 1)))
                    }))
                .then_some(()),
            )
        })
        .await
        .with_context(|| scene.operator.log())?;
        let total_ms = t0.elapsed().as_millis() as u64;
        jobs_ended(&scene.ns).await?;
        let (jobs, ptah_ms) = new_runner_timings(&scene.ns, &mut seen)?;
        stretches.push(Stretch {
            total_ms,
            jobs,
            ptah_ms,
        });
    }
    println!("empty-Job floor: median {floor} ms of {floors:?}");
    report("approval -> InSync, ten versions", &stretches, floor);
    // What was measured, never how fast: the Apply and the history read
    // back, and Ptah's time read from their runners.
    for st in &stretches {
        assert!(
            st.jobs == 2 && st.ptah_ms > 0,
            "Apply and History: {} Jobs",
            st.jobs
        );
    }
    scene.finish().await
}

conformance::on_both_engines!(
    a_fresh_database_from_a_configmap_runs_only_after_its_exact_approval,
    "approval",
    first_migration_waits_for_its_exact_approval,
    From::ConfigMap
);
conformance::on_both_engines!(
    a_fresh_database_from_a_git_tag_runs_after_its_approval,
    "tag",
    first_migration_waits_for_its_exact_approval,
    From::GitTag
);
conformance::on_both_engines!(
    a_fresh_database_from_a_signed_oci_artifact_runs_after_its_approval,
    "oci",
    first_migration_waits_for_its_exact_approval,
    From::Oci
);
conformance::on_both_engines!(
    apply_always_runs_without_an_approval_under_policy,
    "always",
    always_runs_under_its_policy
);
conformance::on_both_engines!(
    a_failure_at_the_third_statement_is_blocked_dirty_until_a_person_clears_it,
    "failed",
    failure_at_the_third_statement
);
conformance::on_both_engines!(
    modified_ahead_and_out_of_order_histories_are_blocked,
    "verdicts",
    history_verdicts_block
);
conformance::on_both_engines!(
    an_apply_pod_deleted_mid_run_is_held_until_acknowledged,
    "podgone",
    unknown_outcome_held_until_acknowledged,
    Unknown::PodDeleted
);

#[tokio::test]
async fn a_unique_index_over_duplicates_on_mariadb_is_held_until_acknowledged() -> anyhow::Result<()>
{
    unknown_outcome_held_until_acknowledged(
        Engine::MariaDb,
        "unique-maria",
        Unknown::UniqueIndexOverDuplicates,
    )
    .await
}
conformance::on_both_engines!(
    apply_never_rests_in_planning_with_its_plan_published,
    "never",
    never_rests_in_planning
);
conformance::on_both_engines!(
    a_history_moved_after_the_approval_is_refused_with_nothing_applied,
    "moved",
    history_moved_after_the_approval
);
conformance::on_both_engines!(
    a_manager_killed_after_the_apply_claim_runs_nothing_twice,
    "kill-claim",
    killed_during_the_apply,
    "after-claim"
);
conformance::on_both_engines!(
    a_manager_killed_after_the_apply_job_create_runs_nothing_twice,
    "kill-create",
    killed_during_the_apply,
    "after-job-create"
);
conformance::on_both_engines!(
    a_manager_killed_after_the_apply_job_uid_runs_nothing_twice,
    "kill-uid",
    killed_during_the_apply,
    "after-job-uid"
);
conformance::on_both_engines!(
    a_manager_killed_after_the_run_outcome_runs_nothing_twice,
    "kill-outcome",
    killed_during_the_apply,
    "after-outcome"
);
conformance::on_both_engines!(
    a_checkpoint_bootstrap_plans_ptahs_own_selection,
    "checkpoint",
    checkpoint_bootstrap
);
