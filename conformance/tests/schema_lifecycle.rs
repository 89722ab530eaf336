//! The schema lifecycle end to end on real databases, each line on the
//! harness's PostgreSQL and on its MariaDB: a real manager, its own
//! admission webhooks registered for the test's namespace, Jobs whose runner
//! drives the pinned Ptah CLI, and the database read back with its own
//! client.
//!
//! * Under `OnApproval` a first schema waits in `AwaitingApproval` with no
//!   Apply Job and no table; an approval of another fingerprint is refused
//!   at admission; the exact approval is stamped and leads to `InSync`, and
//!   the journal's entries name the same plan, approval and Apply. The same
//!   from a ConfigMap, a Git branch, a Git tag, a commit by id, and a
//!   cosign-signed OCI artifact pushed with `ptah schema push`, whose plan
//!   is another plan (another fingerprint, the same SQL) once only the
//!   signer the policy accepts changes.
//! * Policies on real plans: `Always` applies a non-destructive change with
//!   no approval, a destructive plan without `allowDestructive` is
//!   `Blocked`, a protected table is `Blocked` with `ProtectedTable`, and
//!   `Never` publishes its plan and applies none. `status.applied` records
//!   the plan the last confirmed Apply ran.
//! * Drift made by hand (a column dropped with `psql` or `mariadb`) shows
//!   `DriftDetected` and a new plan at once after a read request, and at the
//!   next interval without one; put back by hand, the next interval finds
//!   the schema `InSync` again.
//! * An edit of the source while `AwaitingApproval` retires the plan: the
//!   new plan's `PlanPublished` names the old one as `replaced`, a
//!   `PlanStale` Warning says which, an approval of the old plan is refused
//!   at admission and runs nothing, and the new plan's approval converges.
//! * The Apply Pod deleted mid-run (its statement waiting on a lock a test
//!   session holds): `ApplyOutcomeUnknown`, then the proof, then a new plan
//!   and `InSync`, and never a replay: no two Apply Jobs carry one plan.
//! * The database stopped (the relay the Secret names stopped): the read
//!   fails, is retried after `failureRetryInterval` under the same claim,
//!   changes nothing, and the schema is `InSync` again once the database is
//!   back at the same address.
//! * The manager killed right after each durable write of an Apply's
//!   dispatch (the claim, the Job create, its UID, the outcome) and started
//!   again: one Job for the claim at most, the claim never lost, no second
//!   Apply, and the schema `InSync`.
//! * A privilege change (a `GRANT`) under `Always` waits for an approval
//!   (`ApprovalRequired` with `PrivilegeChanges`); approved, it runs once,
//!   its proof finds it held on both engines (on MariaDB, whose grants Ptah
//!   does not read back, through `SHOW GRANTS`), and three more intervals
//!   publish no plan and ask for no second approval.
//! * The Secret pointed at another database between an Apply and its
//!   proof: `Blocked` with `TargetIdentityChanged`, claim and Lease kept,
//!   read again after `failureRetryInterval`; put back, the proof verifies
//!   the Apply; settled with the settled-apply annotation, the proof is
//!   dropped unverified and the next read plans the database the Secret
//!   names, with no Apply.
//! * Two schemas of one database, each excluding the other's table: both
//!   `RealmConflict` without `sharedRealm`, both `InSync` with it on both.
//! * `bench_schema_paths` (once here; N times by `conformance/bench/schema-paths.sh`):
//!   an edit to its plan, and an approval to `InSync`, timed.

use std::time::Duration;

use anyhow::Context;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use conformance::gitserve::repo::tag;
use conformance::gitserve::{commit_files, create_repo};
use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::git::endpoints;
use conformance::testkit::job::{count, operations, running_pod};
use conformance::testkit::journal::newest;
use conformance::testkit::manager::{Manager, ManagerSpec, free_port};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::oci::{Registry, key_policy, push_schema_file, signed_by_new_key};
use conformance::testkit::operator::{Operator, PATIENCE, create_admitted};
use k8s_openapi::api::core::v1::ConfigMap;
use operator::admission::webhook_configurations;
use operator::api::PtahSchemaApproval;
use operator::api::condition::{ConditionStatus, Reason, SchemaConditionType, SchemaPhase};
use operator::api::journal::{JournalEntry, JournalEntryType};
use operator::api::schema::{PtahSchema, SchemaPlanSummary};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// A test's namespace, its database, `orders` declared there, and the
/// operator running for it.
struct Scene {
    ns: TestNamespace,
    db: TestDatabase,
    operator: Operator,
    signed: Option<Signed>,
}

impl Scene {
    /// `orders` from a ConfigMap under `OnApproval`, its first plan
    /// approved and `InSync`.
    async fn approved(engine: Engine, test: &str) -> anyhow::Result<(Scene, PtahSchema)> {
        let scene = Self::start(
            engine,
            test,
            From::ConfigMap,
            json!({"apply": "OnApproval"}),
        )
        .await?;
        let s = scene
            .operator
            .until(&scene.ns, "orders", "AwaitingApproval", |s: &PtahSchema| {
                phase(s) == Some(SchemaPhase::AwaitingApproval)
            })
            .await?;
        approve(&scene.ns, &s, "first").await?;
        let s = scene
            .operator
            .until(&scene.ns, "orders", "InSync", |s: &PtahSchema| {
                phase(s) == Some(SchemaPhase::InSync)
            })
            .await?;
        Ok((scene, s))
    }

    async fn start(engine: Engine, test: &str, from: From, policy: Value) -> anyhow::Result<Scene> {
        let ns = TestNamespace::for_operator(harness().await, "lifecycle", test).await?;
        let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
        let signed = declare(&ns, &db, from, policy).await?;
        let operator = Operator::start(&ns, webhook_configurations).await?;
        Ok(Scene {
            ns,
            db,
            operator,
            signed,
        })
    }
}

fn phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn condition(s: &PtahSchema, t: SchemaConditionType) -> Option<(ConditionStatus, Reason)> {
    let st = s.status.as_ref()?;
    let c = st.conditions.iter().find(|c| c.type_ == t)?;
    Some((c.status, c.reason))
}

fn plan_of(s: &PtahSchema) -> anyhow::Result<SchemaPlanSummary> {
    s.status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("status.plan")
}

fn entry(s: &PtahSchema, t: JournalEntryType) -> anyhow::Result<JournalEntry> {
    newest(&s.status.as_ref().context("status")?.journal, t)
}

/// An approval of `plan` of `schema`, with the fingerprint given.
fn approval(name: &str, schema: &PtahSchema, plan: &SchemaPlanSummary, fingerprint: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchemaApproval",
        "metadata": {"name": name},
        "spec": {
            "schemaRef": {"name": schema.name_any(), "uid": schema.uid().unwrap_or_default()},
            "planRef": {"name": plan.name, "uid": plan.uid},
            "planFingerprint": fingerprint,
        }
    })
}

async fn create_approval(ns: &TestNamespace, value: Value) -> anyhow::Result<PtahSchemaApproval> {
    create_admitted(ns, value).await
}

/// Where a first schema's [`executor::SCHEMA_SQL`] comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum From {
    ConfigMap,
    GitBranch,
    GitTag,
    GitCommit,
    Oci,
}

/// A signed OCI artifact, and what signs it again.
struct Signed {
    registry: Registry,
    work: tempfile::TempDir,
    /// `host/repository@digest`.
    pinned: String,
}

impl Signed {
    /// Signs the artifact with a new key and makes the verification policy
    /// trust only that key.
    async fn resign(&self, ns: &TestNamespace, name: &str) -> anyhow::Result<()> {
        let key = signed_by_new_key(&self.registry, self.work.path(), name, &self.pinned)?;
        ns.api::<ConfigMap>()
            .patch(
                "verification",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"policy.yaml": key_policy(&key.public_pem)}})),
            )
            .await?;
        Ok(())
    }
}

/// The source of `orders` as `from` says, holding [`executor::SCHEMA_SQL`],
/// and the PtahSchema under `policy`.
async fn declare(
    ns: &TestNamespace,
    db: &TestDatabase,
    from: From,
    policy: Value,
) -> anyhow::Result<Option<Signed>> {
    let git = |reference: Value| {
        let ep = endpoints(ns.harness());
        let repo = conformance::testkit::unique("lifecycle");
        let bare = create_repo(&ep.root, &format!("{repo}.git"), false)?;
        let commit = commit_files(
            &bare,
            "main",
            &[("db/schema.sql", executor::SCHEMA_SQL)],
            "first",
        )?;
        let reference = match reference {
            Value::String(kind) if kind == "tag" => {
                tag(&bare, "v1", &commit, Some("release v1"))?;
                json!({"tag": "v1"})
            }
            Value::String(kind) if kind == "commit" => json!({"commit": commit}),
            other => other,
        };
        anyhow::Ok(json!({"git": {
            "url": format!("{}/{repo}.git", ep.daemon_url),
            "ref": reference,
            "path": "db",
        }}))
    };
    let source = match from {
        From::ConfigMap => {
            executor::schema_under(ns, db, "orders", policy).await?;
            return Ok(None);
        }
        From::GitBranch => git(json!({"branch": "main"}))?,
        From::GitTag => git(json!("tag"))?,
        From::GitCommit => git(json!("commit"))?,
        From::Oci => {
            let registry = Registry::from_harness(ns.harness())?;
            let repository = format!("ptah-conformance/{}", ns.name());
            let tagged = format!("{}/{repository}:v1", registry.host);
            let pushed =
                push_schema_file(&tagged, "schema.sql", executor::SCHEMA_SQL.as_bytes()).await?;
            let work = tempfile::tempdir()?;
            let pinned = format!("{}/{repository}@{}", registry.host, pushed.digest);
            let signer = signed_by_new_key(&registry, work.path(), "signer", &pinned)?;
            ns.create::<ConfigMap>(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "verification"},
                "data": {"policy.yaml": key_policy(&signer.public_pem)},
            }))
            .await?;
            let source = json!({
                "oci": {"ociRef": format!("oci://{tagged}"), "transport": {"plainHTTP": true}},
                "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
            });
            executor::schema_from(ns, db, "orders", source, policy).await?;
            return Ok(Some(Signed {
                registry,
                work,
                pinned,
            }));
        }
    };
    executor::schema_from(ns, db, "orders", source, policy).await?;
    Ok(None)
}

async fn first_schema_waits_for_its_exact_approval(
    engine: Engine,
    test: &str,
    from: From,
) -> anyhow::Result<()> {
    let Scene {
        ns,
        db,
        operator,
        signed,
    } = Scene::start(engine, test, from, json!({"apply": "OnApproval"})).await?;

    let awaiting = |s: &PtahSchema| phase(s) == Some(SchemaPhase::AwaitingApproval);
    let mut s = operator
        .until(&ns, "orders", "AwaitingApproval", awaiting)
        .await?;
    if let Some(signed) = &signed {
        // The same bytes signed by someone else are another plan.
        let first = plan_of(&s)?;
        signed.resign(&ns, "second").await?;
        s = operator
            .until(
                &ns,
                "orders",
                "the plan of the new signer",
                |s: &PtahSchema| awaiting(s) && plan_uid(s).is_some_and(|u| u != first.uid),
            )
            .await?;
        let second = plan_of(&s)?;
        assert_ne!(second.fingerprint, first.fingerprint);
        assert_eq!(second.content_digest, first.content_digest, "the same SQL");
    }
    let plan = plan_of(&s)?;
    assert!(plan.approval_required, "{plan:?}");
    assert_eq!(
        condition(&s, SchemaConditionType::ApprovalRequired).map(|c| c.0),
        Some(ConditionStatus::True)
    );
    let published = entry(&s, JournalEntryType::PlanPublished)?;
    assert_eq!(published.plan_uid.as_deref(), Some(plan.uid.as_str()));
    assert_eq!(published.approval_required, Some(true));
    // Nothing ran yet: no Apply Job, no table.
    assert!(!operations(&ns).await?.contains(&"apply".to_string()));
    assert_eq!(db.tables()?, Vec::<String>::new());

    // An approval of another fingerprint of this plan is refused, naming it.
    let other = format!("sha256:{}", "0".repeat(64));
    let refused = create_approval(&ns, approval("wrong", &s, &plan, &other)).await;
    let message = format!(
        "{:#}",
        refused.err().context("a forged fingerprint was admitted")?
    );
    assert!(message.contains("planFingerprint"), "{message}");

    let approved = create_approval(&ns, approval("orders-1", &s, &plan, &plan.fingerprint)).await?;
    let approver = approved
        .spec
        .approver
        .clone()
        .context("admission stamped the approver")?;
    assert!(approved.spec.approved_at.is_some());

    let s = operator
        .until(&ns, "orders", "InSync", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    assert_eq!(
        condition(&s, SchemaConditionType::InSync),
        Some((ConditionStatus::True, Reason::ScopedConverged))
    );
    let accepted = entry(&s, JournalEntryType::ApprovalAccepted)?;
    let finished = entry(&s, JournalEntryType::ApplyFinished)?;
    let verified = entry(&s, JournalEntryType::Verified)?;
    let approval_uid = approved.uid();
    for e in [&accepted, &finished, &verified] {
        assert_eq!(e.plan_uid.as_deref(), Some(plan.uid.as_str()), "{e:?}");
        assert_eq!(
            e.plan_fingerprint.as_deref(),
            Some(plan.fingerprint.as_str()),
            "{e:?}"
        );
    }
    for e in [&accepted, &finished] {
        assert_eq!(e.approval_uid, approval_uid, "{e:?}");
        assert_eq!(e.approver.as_ref(), Some(&approver), "{e:?}");
    }
    assert!(accepted.operation_id.is_some());
    assert_eq!(finished.operation_id, accepted.operation_id);
    assert_eq!(verified.operation_id, accepted.operation_id);
    let applied = s
        .status
        .as_ref()
        .and_then(|st| st.applied.clone())
        .context("status.applied")?;
    assert_eq!(applied.plan_uid, plan.uid);

    // The database, as its own client sees it.
    assert_eq!(db.tables()?, ["orders"]);
    assert_eq!(
        operations(&ns)
            .await?
            .iter()
            .filter(|o| *o == "apply")
            .count(),
        1,
        "one Apply Job"
    );
    operator.finish::<PtahSchema>(&ns).await
}

fn stalled_reason(s: &PtahSchema) -> Option<Reason> {
    (phase(s) == Some(SchemaPhase::Blocked))
        .then(|| condition(s, SchemaConditionType::Stalled).map(|c| c.1))
        .flatten()
}

/// The `Stalled` condition's message, which names the plan, what holds it
/// and the way out.
fn stalled_message(s: &PtahSchema) -> String {
    s.status
        .as_ref()
        .and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == SchemaConditionType::Stalled)
        })
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn says_all(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part:?} is not in {message:?}");
    }
}

fn applied_plan(s: &PtahSchema) -> Option<String> {
    s.status
        .as_ref()
        .and_then(|st| st.applied.as_ref())
        .map(|a| a.plan_uid.clone())
}

async fn apply_jobs(ns: &TestNamespace) -> anyhow::Result<usize> {
    count(ns, "apply").await
}

/// `orders` as the ConfigMap declares it, with `extra` columns.
fn orders(extra: &[&str]) -> String {
    let mut columns = vec!["  id bigint PRIMARY KEY", "  customer varchar(64) NOT NULL"];
    columns.extend(extra);
    format!("CREATE TABLE orders (\n{}\n);\n", columns.join(",\n"))
}

async fn set_policy(ns: &TestNamespace, policy: Value) -> anyhow::Result<()> {
    ns.api::<PtahSchema>()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"policy": policy}})),
        )
        .await?;
    Ok(())
}

async fn policies_hold(engine: Engine, test: &str) -> anyhow::Result<()> {
    let Scene {
        ns, db, operator, ..
    } = Scene::start(engine, test, From::ConfigMap, json!({"apply": "Always"})).await?;
    let in_sync = |after: Option<String>| {
        move |s: &PtahSchema| phase(s) == Some(SchemaPhase::InSync) && applied_plan(s) != after
    };
    let s = operator
        .until(&ns, "orders", "InSync", in_sync(None))
        .await?;
    let first = applied_plan(&s);

    // Always, nothing destructive: the change is applied with no approval.
    let widened = orders(&["  note varchar(32)"]);
    ns.set_config_map_key("orders-schema", "schema.sql", &widened)
        .await?;
    let s = operator
        .until(&ns, "orders", "InSync after a new column", in_sync(first))
        .await?;
    assert_eq!(
        db.columns("orders")?.len(),
        3,
        "{:?}",
        db.columns("orders")?
    );
    assert_eq!(apply_jobs(&ns).await?, 2);
    let plan = entry(&s, JournalEntryType::PlanPublished)?;
    assert_eq!(plan.approval_required, Some(false), "{plan:?}");
    assert_eq!(
        applied_plan(&s),
        plan.plan_uid,
        "status.applied is the last Apply's plan"
    );
    assert!(entry(&s, JournalEntryType::ApprovalAccepted).is_err());

    // A destructive plan without allowDestructive: Blocked, nothing runs.
    ns.set_config_map_key("orders-schema", "schema.sql", &orders(&[]))
        .await?;
    let s = operator
        .until(&ns, "orders", "Blocked, destructive", |s: &PtahSchema| {
            stalled_reason(s) == Some(Reason::DestructiveChangesDisabled)
        })
        .await?;
    let plan = plan_of(&s)?;
    assert!(plan.destructive);
    // The message names the plan, the statement and the way out.
    says_all(
        &stalled_message(&s),
        &[
            &plan.name,
            "DROP COLUMN",
            "note",
            "spec.policy.allowDestructive",
        ],
    );
    assert_eq!(db.columns("orders")?.len(), 3);

    // A protected table: Blocked with ProtectedTable, whatever else allows it.
    set_policy(
        &ns,
        json!({"apply": "Always", "allowDestructive": true, "protectedTables": ["orders"]}),
    )
    .await?;
    let s = operator
        .until(&ns, "orders", "Blocked, protected", |s: &PtahSchema| {
            stalled_reason(s) == Some(Reason::ProtectedTable)
        })
        .await?;
    says_all(
        &stalled_message(&s),
        &[&plan_of(&s)?.name, "orders", "spec.policy.protectedTables"],
    );
    assert_eq!(db.columns("orders")?.len(), 3);

    // Never: the plan is published and nothing is applied.
    set_policy(
        &ns,
        json!({"apply": "Never", "allowDestructive": true, "protectedTables": null}),
    )
    .await?;
    let s = operator
        .until(&ns, "orders", "Blocked, apply: Never", |s: &PtahSchema| {
            stalled_reason(s) == Some(Reason::ApplyDisabled)
        })
        .await?;
    let plan = plan_of(&s)?;
    assert!(plan.destructive && !plan.approval_required, "{plan:?}");
    says_all(
        &stalled_message(&s),
        &[
            &plan.name,
            "spec.policy.apply is Never",
            "OnApproval or Always",
        ],
    );
    assert_eq!(db.columns("orders")?.len(), 3);
    assert_eq!(apply_jobs(&ns).await?, 2, "no Apply ran after the second");

    operator.finish::<PtahSchema>(&ns).await
}

fn generation_seen(s: &PtahSchema) -> bool {
    s.status.as_ref().and_then(|st| st.observed_generation) == s.metadata.generation
}

fn drift(s: &PtahSchema) -> bool {
    condition(s, SchemaConditionType::DriftDetected).map(|c| c.0) == Some(ConditionStatus::True)
}

fn plan_uid(s: &PtahSchema) -> Option<String> {
    s.status
        .as_ref()
        .and_then(|st| st.plan.as_ref())
        .map(|p| p.uid.clone())
}

async fn patch_spec(ns: &TestNamespace, spec: Value) -> anyhow::Result<()> {
    ns.api::<PtahSchema>()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await?;
    Ok(())
}

async fn drift_by_hand(engine: Engine, test: &str) -> anyhow::Result<()> {
    let Scene {
        ns, db, operator, ..
    } = Scene::start(engine, test, From::ConfigMap, json!({"apply": "Always"})).await?;
    let in_sync = |s: &PtahSchema| phase(s) == Some(SchemaPhase::InSync) && generation_seen(s);
    operator.until(&ns, "orders", "InSync", in_sync).await?;
    // From here on plans are published and none is applied, read every hour.
    patch_spec(&ns, json!({"policy": {"apply": "Never"}, "interval": "1h"})).await?;
    operator
        .until(&ns, "orders", "InSync under Never", in_sync)
        .await?;
    let jobs_before = operations(&ns).await?.len();

    let drop_customer = "ALTER TABLE orders DROP COLUMN customer";
    db.sql(drop_customer)?;
    // Nothing reads the database before the interval ends…
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet = ns.api::<PtahSchema>().get("orders").await?;
    assert_eq!(phase(&quiet), Some(SchemaPhase::InSync));
    assert_eq!(operations(&ns).await?.len(), jobs_before);
    // … unless a person asks for a read.
    let at = jiff::Timestamp::now().to_string();
    ns.api::<PtahSchema>()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "operator.ptah.run/read-requested-at": at
            }}})),
        )
        .await?;
    let s = operator
        .until(
            &ns,
            "orders",
            "drift after a read request",
            |s: &PtahSchema| stalled_reason(s) == Some(Reason::ApplyDisabled) && drift(s),
        )
        .await?;
    let answered = s
        .status
        .as_ref()
        .and_then(|st| st.last_read_request.clone());
    assert_eq!(answered.as_deref(), Some(at.as_str()));
    let drift_plan = plan_uid(&s).context("a new plan")?;
    let published = entry(&s, JournalEntryType::PlanPublished)?;
    assert_eq!(published.plan_uid.as_deref(), Some(drift_plan.as_str()));
    assert_eq!(db.columns("orders")?.len(), 1, "nothing was applied");

    // The interval alone: put back by hand, the next read finds no drift;
    // dropped again, the read after that finds it and plans it.
    patch_spec(&ns, json!({"interval": "15s"})).await?;
    ns.until(&PATIENCE, "orders", "the edit read", generation_seen)
        .await?;
    db.sql("ALTER TABLE orders ADD COLUMN customer varchar(64) NOT NULL")?;
    operator
        .until(&ns, "orders", "InSync at the interval", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync) && !drift(s)
        })
        .await?;
    db.sql(drop_customer)?;
    let s = operator
        .until(&ns, "orders", "drift at the interval", |s: &PtahSchema| {
            stalled_reason(s) == Some(Reason::ApplyDisabled) && drift(s)
        })
        .await?;
    assert!(plan_uid(&s).is_some());
    assert_eq!(
        s.status
            .as_ref()
            .and_then(|st| st.last_read_request.clone()),
        answered,
        "no read request since"
    );
    assert_eq!(apply_jobs(&ns).await?, 1, "only the first Apply ran");

    operator.finish::<PtahSchema>(&ns).await
}

/// The reasons of the Events about `name`.
async fn event_reasons(ns: &TestNamespace, name: &str) -> anyhow::Result<Vec<(String, String)>> {
    let events = ns
        .api::<k8s_openapi::api::core::v1::Event>()
        .list(&ListParams::default())
        .await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

async fn edit_retires_the_awaited_plan(engine: Engine, test: &str) -> anyhow::Result<()> {
    let Scene {
        ns, db, operator, ..
    } = Scene::start(
        engine,
        test,
        From::ConfigMap,
        json!({"apply": "OnApproval"}),
    )
    .await?;
    let awaiting = |s: &PtahSchema| phase(s) == Some(SchemaPhase::AwaitingApproval);
    let s = operator
        .until(&ns, "orders", "AwaitingApproval", awaiting)
        .await?;
    let old = plan_of(&s)?;

    ns.set_config_map_key(
        "orders-schema",
        "schema.sql",
        &orders(&["  note varchar(32)"]),
    )
    .await?;
    let s = operator
        .until(&ns, "orders", "the new plan awaited", |s: &PtahSchema| {
            awaiting(s) && plan_uid(s).is_some_and(|u| u != old.uid)
        })
        .await?;
    let new = plan_of(&s)?;
    let published = entry(&s, JournalEntryType::PlanPublished)?;
    assert_eq!(published.plan_uid.as_deref(), Some(new.uid.as_str()));
    assert_eq!(
        published.replaced.as_deref(),
        Some(old.name.as_str()),
        "{published:?}"
    );
    let stale = event_reasons(&ns, "orders")
        .await?
        .into_iter()
        .find(|(reason, _)| reason == "PlanStale")
        .context("a PlanStale Event")?;
    assert!(stale.1.contains(&old.name), "{stale:?}");

    // The old plan's approval is refused, naming why; nothing runs.
    let refused = create_approval(&ns, approval("late", &s, &old, &old.fingerprint)).await;
    let message = format!(
        "{:#}",
        refused
            .err()
            .context("an approval of a retired plan was admitted")?
    );
    assert!(message.contains("planRef"), "{message}");
    assert_eq!(apply_jobs(&ns).await?, 0);
    assert_eq!(db.tables()?, Vec::<String>::new());

    // The plan that replaced it is the one a person can approve.
    create_approval(&ns, approval("orders-2", &s, &new, &new.fingerprint)).await?;
    let s = operator
        .until(&ns, "orders", "InSync", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    assert_eq!(applied_plan(&s), Some(new.uid.clone()));
    assert_eq!(db.columns("orders")?.len(), 3);
    assert_eq!(apply_jobs(&ns).await?, 1);
    operator.finish::<PtahSchema>(&ns).await
}

/// The operation ids of the namespace's Apply Jobs, one per Job.
async fn apply_operations(ns: &TestNamespace) -> anyhow::Result<Vec<String>> {
    let jobs = ns
        .api::<k8s_openapi::api::batch::v1::Job>()
        .list(&ListParams::default())
        .await?;
    Ok(jobs
        .items
        .iter()
        .filter(|j| {
            j.labels()
                .get("operator.ptah.run/operation")
                .map(String::as_str)
                == Some("apply")
        })
        .filter_map(|j| {
            j.annotations()
                .get("operator.ptah.run/operation-id")
                .cloned()
        })
        .collect())
}

/// Approves the plan `s` awaits.
async fn approve(ns: &TestNamespace, s: &PtahSchema, name: &str) -> anyhow::Result<()> {
    let plan = plan_of(s)?;
    create_approval(ns, approval(name, s, &plan, &plan.fingerprint)).await?;
    Ok(())
}

async fn apply_pod_deleted(engine: Engine, test: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    let (
        Scene {
            ns, db, operator, ..
        },
        s,
    ) = Scene::approved(engine, test).await?;
    let awaiting = |s: &PtahSchema| phase(s) == Some(SchemaPhase::AwaitingApproval);
    let first = applied_plan(&s);

    // A new column planned and awaiting approval; then a session takes the
    // table, the approval starts the Apply, whose ALTER waits on the lock.
    ns.set_config_map_key(
        "orders-schema",
        "schema.sql",
        &orders(&["  note varchar(32)"]),
    )
    .await?;
    let s = operator
        .until(
            &ns,
            "orders",
            "the new column awaiting",
            |s: &PtahSchema| awaiting(s) && plan_uid(s) != first,
        )
        .await?;
    let mut lock = db.lock_table("orders", 20)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    approve(&ns, &s, "second").await?;
    // The first Apply's Pod has ended: a running one is the second's.
    let pod = running_pod(&ns, "ptah-apply-", &PATIENCE)
        .await
        .with_context(|| operator.log())?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ns.api::<Pod>()
        .delete(&pod.name_any(), &Default::default())
        .await?;

    let s = operator
        .until(&ns, "orders", "the outcome unknown", |s: &PtahSchema| {
            entry(s, JournalEntryType::ApplyFinished)
                .is_ok_and(|e| e.reason == Some(Reason::ApplyOutcomeUnknown))
        })
        .await?;
    let unknown = entry(&s, JournalEntryType::ApplyFinished)?;
    let _ = lock.kill();
    let _ = lock.wait();

    // The proof reads the database again: either the ALTER did commit
    // (ConvergedAfterUnknownOutcome), or changes remain and a new plan
    // waits for its own approval and its own Apply.
    let proved = operator
        .until(&ns, "orders", "the proof", |s: &PtahSchema| {
            s.status.as_ref().is_some_and(|st| {
                st.journal.iter().any(|e| {
                    e.type_ == JournalEntryType::Verified && e.operation_id == unknown.operation_id
                })
            }) && matches!(
                phase(s),
                Some(SchemaPhase::InSync | SchemaPhase::AwaitingApproval)
            )
        })
        .await?;
    let settled = if phase(&proved) == Some(SchemaPhase::AwaitingApproval) {
        assert_ne!(
            plan_uid(&proved),
            unknown.plan_uid.clone().filter(|_| false)
        );
        approve(&ns, &proved, "third").await?;
        operator
            .until(
                &ns,
                "orders",
                "InSync after the new plan",
                |s: &PtahSchema| phase(s) == Some(SchemaPhase::InSync),
            )
            .await?
    } else {
        assert_eq!(
            condition(&proved, SchemaConditionType::InSync),
            Some((ConditionStatus::True, Reason::ConvergedAfterUnknownOutcome)),
            "{:?}",
            proved.status.as_ref().map(|st| st
                .journal
                .iter()
                .map(|e| (e.type_, e.reason, e.outcome, e.operation_id.clone()))
                .collect::<Vec<_>>())
        );
        proved
    };
    // Never a replay: the unknown Apply's claim had one Job, and every
    // Apply Job is a claim of its own.
    let ops = apply_operations(&ns).await?;
    let unknown_op = unknown
        .operation_id
        .clone()
        .context("the Apply's operation")?;
    assert_eq!(
        ops.iter().filter(|o| **o == unknown_op).count(),
        1,
        "{ops:?}"
    );
    let mut distinct = ops.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ops.len(), "{ops:?}");
    assert_eq!(phase(&settled), Some(SchemaPhase::InSync));
    assert_eq!(db.columns("orders")?.len(), 3);
    operator.finish::<PtahSchema>(&ns).await
}

/// Points the Secret `orders-db` at `url`.
async fn set_url(ns: &TestNamespace, url: &str) -> anyhow::Result<()> {
    ns.api::<k8s_openapi::api::core::v1::Secret>()
        .patch(
            "orders-db",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"url": url}})),
        )
        .await?;
    Ok(())
}

fn failed_attempts(s: &PtahSchema) -> i32 {
    s.status
        .as_ref()
        .map(|st| {
            st.journal
                .iter()
                .filter(|e| e.type_ == JournalEntryType::OperationFailed)
                .map(|e| e.count.unwrap_or(1))
                .sum()
        })
        .unwrap_or(0)
}

async fn database_unreachable(engine: Engine, test: &str) -> anyhow::Result<()> {
    use conformance::testkit::relay::Relay;
    // The Secret names a relay to the database, which the test stops and
    // starts again: the database gone, and back at the same address.
    let ns = TestNamespace::for_operator(harness().await, "lifecycle", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    let mut relay = Relay::start(db.addr()?).await?;
    declare(
        &ns,
        &db.through(relay.port())?,
        From::ConfigMap,
        json!({"apply": "Always"}),
    )
    .await?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    operator
        .until(&ns, "orders", "InSync", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    let applies = apply_jobs(&ns).await?;

    // The database stops: every connection is refused.
    relay.stop().await;
    patch_spec(&ns, json!({"interval": "1h"})).await?;
    let s = operator
        .until(&ns, "orders", "the read failed twice", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::Failed) && failed_attempts(s) >= 2
        })
        .await?;
    let claim = s
        .status
        .as_ref()
        .and_then(|st| st.active_operation.clone())
        .context("the claim stays for the next attempt")?;
    assert_eq!(claim.type_, operator::api::status::OperationType::Observe);
    assert!(
        claim.attempt >= 2,
        "retried under the same claim: {claim:?}"
    );
    assert_eq!(
        condition(&s, SchemaConditionType::ReconciliationFailed).map(|c| c.0),
        Some(ConditionStatus::True)
    );
    assert_eq!(
        apply_jobs(&ns).await?,
        applies,
        "a failed read applies nothing"
    );
    assert_eq!(db.tables()?, ["orders"]);
    // The failure says why without the URL's credentials.
    let password = db.password();
    let events = event_reasons(&ns, "orders").await?;
    for (what, text) in [
        ("status", serde_json::to_string(&s.status)?),
        ("the manager's log", operator.log()),
        ("the Events", format!("{events:?}")),
    ] {
        assert!(
            !text.contains(&password),
            "the database password is in {what}"
        );
    }

    // Back: the next attempt reads it and finds nothing to do.
    relay.resume().await?;
    let s = operator
        .until(&ns, "orders", "InSync again", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    assert_eq!(
        condition(&s, SchemaConditionType::ReconciliationFailed).map(|c| c.0),
        Some(ConditionStatus::False)
    );
    assert_eq!(apply_jobs(&ns).await?, applies);
    operator.finish::<PtahSchema>(&ns).await
}

async fn killed_during_apply(
    engine: Engine,
    test: &str,
    point: &'static str,
) -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "lifecycle", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    executor::schema(&ns, &db, "orders").await?;
    let port = Some(free_port()?);
    let mut killed = Manager::start(
        &ns,
        &ManagerSpec {
            fault_point: Some(point),
            fault_operation: Some("apply"),
            port,
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
    let s = ns.api::<PtahSchema>().get("orders").await?;
    let st = s.status.as_ref().context("status")?;
    let operation = if point == "after-outcome" {
        // The Apply's end is written: its proof is owed, no Apply claim.
        let finished = entry(&s, JournalEntryType::ApplyFinished)?;
        finished.operation_id.context("the Apply's operation")?
    } else {
        let claim = st.active_operation.clone().context("the Apply claim")?;
        assert_eq!(claim.type_, operator::api::status::OperationType::Apply);
        assert!(claim.dispatch_started, "dispatchStarted precedes the Job");
        claim.operation_id
    };

    let manager = Manager::start(
        &ns,
        &ManagerSpec {
            port,
            ..ManagerSpec::default()
        },
    )?;
    let s = ns
        .until(
            &PATIENCE,
            "orders",
            "InSync after the restart",
            |s: &PtahSchema| phase(s) == Some(SchemaPhase::InSync),
        )
        .await
        .with_context(|| manager.log())?;
    let ops = apply_operations(&ns).await?;
    let of_claim = ops.iter().filter(|o| **o == operation).count();
    if point == "after-claim" {
        // No Job existed: the Apply's outcome is unknown, never dispatched
        // again, and a proof and a new plan follow.
        assert_eq!(of_claim, 0, "{ops:?}");
    } else {
        assert_eq!(of_claim, 1, "one Job for the claim: {ops:?}");
    }
    assert_eq!(ops.len(), 1, "no second Apply: {ops:?}");
    let ended = s
        .status
        .as_ref()
        .map(|st| {
            st.journal
                .iter()
                .filter(|e| {
                    e.type_ == JournalEntryType::ApplyFinished
                        && e.operation_id.as_deref() == Some(operation.as_str())
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(ended, 1, "the claim's end is written once");
    assert_eq!(db.tables()?, ["orders"]);
    ns.delete_all::<PtahSchema>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}

async fn killed_after_the_apply_claim(engine: Engine, test: &str) -> anyhow::Result<()> {
    killed_during_apply(engine, test, "after-claim").await
}

async fn killed_after_the_apply_job_create(engine: Engine, test: &str) -> anyhow::Result<()> {
    killed_during_apply(engine, test, "after-job-create").await
}

async fn killed_after_the_apply_job_uid(engine: Engine, test: &str) -> anyhow::Result<()> {
    killed_during_apply(engine, test, "after-job-uid").await
}

async fn killed_after_the_apply_outcome(engine: Engine, test: &str) -> anyhow::Result<()> {
    killed_during_apply(engine, test, "after-outcome").await
}

/// A role `name` that plans may grant to, made by the harness's
/// administrator (roles outlive the test's database).
fn create_role(ns: &TestNamespace, engine: Engine, name: &str) -> anyhow::Result<()> {
    let admin = TestDatabase::admin(ns.harness(), engine)?;
    admin.sql(&match engine {
        Engine::Postgres => format!(
            "DO $$BEGIN CREATE ROLE \"{name}\"; EXCEPTION WHEN duplicate_object THEN NULL; END$$"
        ),
        Engine::MariaDb => format!("CREATE USER IF NOT EXISTS '{name}'@'%'"),
    })?;
    Ok(())
}

async fn privilege_change_waits(engine: Engine, test: &str) -> anyhow::Result<()> {
    let Scene {
        ns, db, operator, ..
    } = Scene::start(engine, test, From::ConfigMap, json!({"apply": "Always"})).await?;
    operator
        .until(&ns, "orders", "InSync", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    let role = format!("reader_{}", ns.name().replace('-', "_"));
    create_role(&ns, engine, &role)?;

    // Always, and nothing destructive: a GRANT still waits for a person.
    let granted = format!("{}GRANT SELECT ON orders TO {role};\n", orders(&[]));
    ns.set_config_map_key("orders-schema", "schema.sql", &granted)
        .await?;
    let s = operator
        .until(
            &ns,
            "orders",
            "the grant awaiting approval",
            |s: &PtahSchema| phase(s) == Some(SchemaPhase::AwaitingApproval),
        )
        .await?;
    let plan = plan_of(&s)?;
    assert_eq!(
        plan.privilege_changes,
        [operator::api::plan::PrivilegeChange::Grant],
        "{plan:?}"
    );
    assert!(plan.approval_required && !plan.destructive, "{plan:?}");
    assert_eq!(
        condition(&s, SchemaConditionType::ApprovalRequired),
        Some((ConditionStatus::True, Reason::PrivilegeChanges))
    );
    assert_eq!(
        apply_jobs(&ns).await?,
        1,
        "nothing ran without the approval"
    );

    approve(&ns, &s, "grant").await?;
    let proved = |s: &PtahSchema| {
        let ran = entry(s, JournalEntryType::ApplyFinished)
            .ok()
            .filter(|e| e.plan_uid.as_ref() == Some(&plan.uid));
        ran.zip(entry(s, JournalEntryType::Verified).ok())
            .is_some_and(|(ran, proof)| ran.operation_id == proof.operation_id)
            && matches!(
                phase(s),
                Some(SchemaPhase::InSync | SchemaPhase::AwaitingApproval)
            )
    };
    let s = operator
        .until(&ns, "orders", "the grant applied and proved", proved)
        .await?;
    assert_eq!(apply_jobs(&ns).await?, 2);
    // On both engines the proof finds the grant held: on MariaDB, whose
    // grants Ptah does not read back, the runner compares `SHOW GRANTS`.
    assert_eq!(phase(&s), Some(SchemaPhase::InSync), "{:?}", s.status);
    assert_eq!(applied_plan(&s), Some(plan.uid.clone()));
    assert_eq!(
        entry(&s, JournalEntryType::Verified)?.outcome,
        Some(operator::api::journal::JournalOutcome::InSync)
    );
    match engine {
        Engine::Postgres => assert_eq!(
            db.sql(&format!(
                "SELECT has_table_privilege('{role}', 'orders', 'SELECT')"
            ))?
            .trim(),
            "t"
        ),
        Engine::MariaDb => {
            let grants = db.sql(&format!("SHOW GRANTS FOR '{role}'@'%'"))?;
            assert!(grants.contains("SELECT"), "{grants}");
        }
    }
    // Three intervals read again: a converged grant stays converged, with
    // no second plan and no second approval asked for.
    let published = |s: &PtahSchema| {
        s.status.as_ref().map_or(0, |st| {
            st.journal
                .iter()
                .filter(|e| e.type_ == JournalEntryType::PlanPublished)
                .count()
        })
    };
    let before = published(&s);
    patch_spec(&ns, json!({"interval": "10s"})).await?;
    let reads = |s: &PtahSchema| {
        s.status
            .as_ref()
            .and_then(|st| st.target.as_ref())
            .and_then(|t| t.last_observed_at.clone())
    };
    let mut seen = reads(&s);
    for n in 1..=3 {
        let s = operator
            .until(
                &ns,
                "orders",
                &format!("read again at interval {n}"),
                |s: &PtahSchema| reads(s) != seen && phase(s) == Some(SchemaPhase::InSync),
            )
            .await?;
        seen = reads(&s);
        assert_eq!(published(&s), before, "no plan published at interval {n}");
        assert_ne!(phase(&s), Some(SchemaPhase::AwaitingApproval));
    }
    assert_eq!(apply_jobs(&ns).await?, 2, "nothing ran again");
    operator.finish::<PtahSchema>(&ns).await
}

/// The owed proof, with its Lease held by the manager.
async fn proof_and_lease_kept(ns: &TestNamespace, s: &PtahSchema) -> anyhow::Result<String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let st = s.status.as_ref().context("status")?;
    let claim = st.active_operation.as_ref().context("the claim is kept")?;
    let owed = st
        .pending_observation
        .as_ref()
        .context("the proof is still owed")?;
    assert!(claim.lease_epoch.is_some(), "{claim:?}");
    let digest = owed
        .coordination_digest
        .as_deref()
        .context("the realm digest")?;
    let lease = ns
        .api::<Lease>()
        .get(&operator::execution::lease::lease_name(digest))
        .await?;
    assert!(
        lease
            .spec
            .as_ref()
            .and_then(|l| l.holder_identity.as_ref())
            .is_some(),
        "the Lease is still held: {lease:?}"
    );
    Ok(owed.apply_operation_id.clone())
}

/// Approves the awaited plan while a session holds `orders`, and points the
/// Secret at `elsewhere` while the Apply waits, so its proof reads that.
async fn apply_then_move_the_secret(
    ns: &TestNamespace,
    operator: &Operator,
    db: &TestDatabase,
    elsewhere: &TestDatabase,
    column: &str,
    approval: &str,
) -> anyhow::Result<PtahSchema> {
    let before = operator
        .until(ns, "orders", "InSync", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    let applied = applied_plan(&before);
    ns.set_config_map_key("orders-schema", "schema.sql", &orders(&[column]))
        .await?;
    let s = operator
        .until(ns, "orders", "the new column awaiting", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::AwaitingApproval) && plan_uid(s) != applied
        })
        .await?;
    let mut lock = db.lock_table("orders", 20)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    approve(ns, &s, approval).await?;
    running_pod(ns, "ptah-apply-", &PATIENCE)
        .await
        .with_context(|| operator.log())?;
    set_url(ns, &elsewhere.url()).await?;
    let _ = lock.kill();
    let _ = lock.wait();
    operator
        .until(
            ns,
            "orders",
            "Blocked, TargetIdentityChanged",
            |s: &PtahSchema| stalled_reason(s) == Some(Reason::TargetIdentityChanged),
        )
        .await
}

async fn target_moved_before_the_proof(engine: Engine, test: &str) -> anyhow::Result<()> {
    let (
        Scene {
            ns, db, operator, ..
        },
        _,
    ) = Scene::approved(engine, test).await?;
    let elsewhere =
        TestDatabase::create(ns.harness(), engine, &format!("{}-elsewhere", ns.name()))?;

    // The Apply ran on the plan's database; its proof read another one.
    let s = apply_then_move_the_secret(
        &ns,
        &operator,
        &db,
        &elsewhere,
        "  note varchar(32)",
        "second",
    )
    .await?;
    let apply = proof_and_lease_kept(&ns, &s).await?;
    assert_eq!(
        db.columns("orders")?.len(),
        3,
        "the Apply ran where it was planned"
    );
    assert!(elsewhere.tables()?.is_empty(), "nothing ran elsewhere");
    let blocked_applies = apply_jobs(&ns).await?;
    // It stays Blocked while the Secret names the other database: its proof
    // reads again after failureRetryInterval and is refused again.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let s = ns.api::<PtahSchema>().get("orders").await?;
    assert_eq!(stalled_reason(&s), Some(Reason::TargetIdentityChanged));
    assert_eq!(proof_and_lease_kept(&ns, &s).await?, apply);

    // Put back: the proof finishes and verifies that Apply.
    set_url(&ns, &db.url()).await?;
    let s = operator
        .until(&ns, "orders", "InSync, proved", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    let verified = entry(&s, JournalEntryType::Verified)?;
    assert_eq!(verified.operation_id.as_deref(), Some(apply.as_str()));
    assert_eq!(
        verified.reason,
        Some(Reason::ScopedConverged),
        "{verified:?}"
    );
    assert_eq!(apply_jobs(&ns).await?, blocked_applies);

    // Again, and this time a person settles it with the annotation: the
    // proof is dropped unverified, the claim and Lease are released, and the
    // next read is of the database the Secret now names.
    let s = apply_then_move_the_secret(
        &ns,
        &operator,
        &db,
        &elsewhere,
        "  note varchar(32),\n  shipped boolean",
        "third",
    )
    .await?;
    let apply = proof_and_lease_kept(&ns, &s).await?;
    let applies = apply_jobs(&ns).await?;
    ns.api::<PtahSchema>()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "operator.ptah.run/settled-apply": apply,
            }}})),
        )
        .await?;
    let s = operator
        .until(
            &ns,
            "orders",
            "a plan for the database the Secret names",
            |s: &PtahSchema| {
                phase(s) == Some(SchemaPhase::AwaitingApproval)
                    && s.status
                        .as_ref()
                        .is_some_and(|st| st.pending_observation.is_none())
            },
        )
        .await?;
    let settled = s
        .status
        .as_ref()
        .map(|st| st.journal.clone())
        .unwrap_or_default()
        .into_iter()
        .rfind(|e| e.type_ == JournalEntryType::Verified)
        .context("a Verified entry")?;
    assert_eq!(settled.operation_id.as_deref(), Some(apply.as_str()));
    assert_eq!(settled.reason, Some(Reason::TargetIdentityChanged));
    // The empty database needs the whole table: a new plan, and no Apply
    // without its own approval.
    assert!(plan_of(&s)?.statement_count.unwrap_or(0) >= 1);
    assert_eq!(apply_jobs(&ns).await?, applies);
    assert!(elsewhere.tables()?.is_empty());
    operator.finish::<PtahSchema>(&ns).await
}

/// Two PtahSchemas of one database, each declaring its own table and
/// excluding the other's.
async fn two_claimants(ns: &TestNamespace, db: &TestDatabase) -> anyhow::Result<()> {
    db.secret(ns, "shop-db").await?;
    for (name, table, other) in [
        ("orders", "orders", "customers"),
        ("customers", "customers", "orders"),
    ] {
        ns.create::<ConfigMap>(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-schema")},
            "data": {"schema.sql": format!("CREATE TABLE {table} (\n  id bigint PRIMARY KEY\n);\n")},
        }))
        .await?;
        ns.create::<PtahSchema>(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
            "metadata": {"name": name},
            "spec": {
                "target": {
                    "engine": db.engine.spec(),
                    "urlFrom": {"name": "shop-db", "key": "url"},
                    "coordinationKey": "shop",
                },
                "source": {"configMap": {"name": format!("{name}-schema"), "keys": ["schema.sql"]}},
                "policy": {"apply": "Always", "exclude": [other]},
                "execution": {"failureRetryInterval": "5s"},
            },
        }))
        .await?;
    }
    Ok(())
}

async fn shared_realm_converges(engine: Engine, test: &str) -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "lifecycle", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    two_claimants(&ns, &db).await?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    for name in ["orders", "customers"] {
        ns.until(&PATIENCE, name, "RealmConflict", |s: &PtahSchema| {
            stalled_reason(s) == Some(Reason::RealmConflict)
        })
        .await
        .with_context(|| operator.log())?;
    }
    assert!(db.tables()?.is_empty(), "neither read nor changed it");

    let shared = Patch::Merge(json!({"spec": {"target": {"sharedRealm": true}}}));
    for name in ["orders", "customers"] {
        ns.api::<PtahSchema>()
            .patch(name, &PatchParams::default(), &shared)
            .await?;
    }
    for name in ["orders", "customers"] {
        let s = ns
            .until(&PATIENCE, name, "InSync", |s: &PtahSchema| {
                phase(s) == Some(SchemaPhase::InSync)
            })
            .await
            .with_context(|| operator.log())?;
        assert!(applied_plan(&s).is_some(), "{name} applied its own plan");
    }
    assert_eq!(db.tables()?, ["customers", "orders"]);
    assert_eq!(
        apply_jobs(&ns).await?,
        2,
        "one Apply each, none undoing the other"
    );
    operator.finish::<PtahSchema>(&ns).await
}

/// (a) a ConfigMap edit to its plan published, and (b) that plan's
/// approval to `InSync`, on PostgreSQL, `BENCH_RUNS` times (default 1),
/// beside the empty-Job floor: once in the test command, asserting only
/// what it measured, `BENCH_RUNS` times by `conformance/bench/schema-paths.sh`;
/// the numbers are in docs/performance.md.
#[tokio::test]
async fn bench_schema_paths() -> anyhow::Result<()> {
    use conformance::testkit::bench::{
        FAST, Stretch, floor_ms, jobs_ended, new_runner_timings, report, runs,
    };
    let runs = runs(1);
    let (Scene { ns, operator, .. }, _) = Scene::approved(Engine::Postgres, "bench-paths").await?;
    let awaiting = |s: &PtahSchema| phase(s) == Some(SchemaPhase::AwaitingApproval);
    let (floor, floors) = floor_ms(&ns, runs).await?;
    let mut seen = std::collections::BTreeSet::new();
    new_runner_timings(&ns, &mut seen)?;

    let mut edits = Vec::new();
    let mut approvals = Vec::new();
    let mut columns = Vec::new();
    for i in 1..=runs {
        let s = ns.api::<PtahSchema>().get("orders").await?;
        let before = plan_uid(&s);
        columns.push(format!("  c{i} integer"));
        let extra: Vec<&str> = columns.iter().map(String::as_str).collect();
        let t0 = std::time::Instant::now();
        ns.set_config_map_key("orders-schema", "schema.sql", &orders(&extra))
            .await?;
        let s = FAST
            .poll("the plan published", || async {
                let s = ns.api::<PtahSchema>().get("orders").await?;
                anyhow::Ok((awaiting(&s) && plan_uid(&s) != before).then_some(s))
            })
            .await
            .with_context(|| operator.log())?;
        let total_ms = t0.elapsed().as_millis() as u64;
        jobs_ended(&ns).await?;
        let (jobs, ptah_ms) = new_runner_timings(&ns, &mut seen)?;
        edits.push(Stretch {
            total_ms,
            jobs,
            ptah_ms,
        });

        let plan = plan_uid(&s);
        let t0 = std::time::Instant::now();
        approve(&ns, &s, &format!("run-{i}")).await?;
        FAST.poll("InSync", || async {
            let s = ns.api::<PtahSchema>().get("orders").await?;
            anyhow::Ok(
                (phase(&s) == Some(SchemaPhase::InSync) && applied_plan(&s) == plan).then_some(()),
            )
        })
        .await
        .with_context(|| operator.log())?;
        let total_ms = t0.elapsed().as_millis() as u64;
        jobs_ended(&ns).await?;
        let (jobs, ptah_ms) = new_runner_timings(&ns, &mut seen)?;
        approvals.push(Stretch {
            total_ms,
            jobs,
            ptah_ms,
        });
    }

    println!("empty-Job floor: median {floor} ms of {floors:?}");
    report("(a) edit -> plan published", &edits, floor);
    report("(b) approval -> InSync", &approvals, floor);
    // What was measured, never how fast: the Jobs each path ran, and Ptah's
    // time read from their runners.
    for st in &edits {
        assert!(
            st.jobs == 2 && st.ptah_ms > 0,
            "Observe and Plan: {} Jobs",
            st.jobs
        );
    }
    for st in &approvals {
        assert!(
            st.jobs == 3 && st.ptah_ms > 0,
            "Apply and the proof: {} Jobs",
            st.jobs
        );
    }
    operator.finish::<PtahSchema>(&ns).await
}

conformance::on_both_engines!(
    a_first_schema_under_on_approval_converges_only_after_its_exact_approval,
    "approval",
    first_schema_waits_for_its_exact_approval,
    From::ConfigMap
);
conformance::on_both_engines!(
    a_first_schema_from_a_git_branch_converges_after_its_approval,
    "branch",
    first_schema_waits_for_its_exact_approval,
    From::GitBranch
);
conformance::on_both_engines!(
    a_first_schema_from_a_git_tag_converges_after_its_approval,
    "tag",
    first_schema_waits_for_its_exact_approval,
    From::GitTag
);
conformance::on_both_engines!(
    a_first_schema_from_a_commit_by_id_converges_after_its_approval,
    "commit",
    first_schema_waits_for_its_exact_approval,
    From::GitCommit
);
conformance::on_both_engines!(
    a_first_schema_from_a_signed_oci_artifact_converges_after_its_approval,
    "oci",
    first_schema_waits_for_its_exact_approval,
    From::Oci
);
conformance::on_both_engines!(policies_hold_on_real_plans, "policy", policies_hold);
conformance::on_both_engines!(
    drift_made_by_hand_is_planned_at_a_read_request_and_at_the_interval,
    "drift",
    drift_by_hand
);
conformance::on_both_engines!(
    an_edit_while_awaiting_approval_retires_the_plan_and_its_approval,
    "stale",
    edit_retires_the_awaited_plan
);
conformance::on_both_engines!(
    an_apply_pod_deleted_mid_run_is_proved_and_never_replayed,
    "podgone",
    apply_pod_deleted
);
conformance::on_both_engines!(
    a_stopped_database_is_retried_and_recovers,
    "dbdown",
    database_unreachable
);
conformance::on_both_engines!(
    a_manager_killed_after_the_apply_claim_applies_once,
    "kill-claim",
    killed_after_the_apply_claim
);
conformance::on_both_engines!(
    a_manager_killed_after_the_apply_job_create_applies_once,
    "kill-create",
    killed_after_the_apply_job_create
);
conformance::on_both_engines!(
    a_manager_killed_after_the_apply_job_uid_applies_once,
    "kill-uid",
    killed_after_the_apply_job_uid
);
conformance::on_both_engines!(
    a_manager_killed_after_the_apply_outcome_applies_once,
    "kill-outcome",
    killed_after_the_apply_outcome
);
conformance::on_both_engines!(
    a_privilege_change_under_always_waits_for_an_approval,
    "grant",
    privilege_change_waits
);
conformance::on_both_engines!(
    a_proof_that_reads_another_database_blocks_until_put_back_or_settled,
    "target",
    target_moved_before_the_proof
);
conformance::on_both_engines!(
    two_schemas_sharing_a_realm_both_converge,
    "shared",
    shared_realm_converges
);
