//! Flux sources by reference (`spec.source.flux`), end to end with the
//! harness's pinned source-controller: it fetches a repository from the
//! harness's git HTTP server (or an artifact from its registry), and the
//! manager takes the revision and artifact digest from the Flux object's
//! status, fetches the tarball from source-controller in the Resolve Job,
//! checks its digest, snapshots the files at the path and binds Flux's
//! revision into the plan.
//!
//! * A schema from a `GitRepository`, on PostgreSQL and MariaDB: `InSync`
//!   with `status.source` naming Flux's revision and artifact digest, the
//!   plan bound to that revision, the snapshot holding only the path's
//!   files; a new commit, once Flux has it, is read at once (the manager
//!   watches the object; the interval is 10 minutes) and is a new plan bound
//!   to the new revision, applied.
//! * A migration from a `GitRepository`, on PostgreSQL and MariaDB: the
//!   History and the Apply read the snapshot; both versions applied.
//! * Verdicts naming the object: a `GitRepository` that does not exist, one
//!   that is not Ready, and one whose status names another digest than its
//!   artifact has (the status altered while Flux is suspended).
//! * An `OCIRepository` under a sigstore policy: the manifest Flux named is
//!   verified by the operator's own Verify Job (signed: `InSync` with the
//!   signer bound; unsigned: `Blocked`, `PolicyRefused`), and the signed
//!   layer is checked to give the files source-controller served.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use conformance::gitserve::{Endpoints, commit_files, create_repo};
use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::git::endpoints;
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::oci::{self, Registry};
use conformance::testkit::operator::Operator;
use conformance::testkit::wait::Patience;
use operator::admission::webhook_configurations;
use operator::api::condition::{Reason, SchemaConditionType, SchemaPhase};
use operator::api::migration::PtahMigration;
use operator::api::schema::PtahSchema;
use operator::api::source::{SourceKind, SourceStatus};
use operator::api::{PtahMigrationPlan, PtahSchemaPlan};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const PATIENCE: Patience = Patience::new(Duration::from_secs(120), Duration::from_millis(250));

const ORDERS: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY\n);\n";
const ORDERS_NOTE: &str =
    "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  note varchar(32)\n);\n";

fn flux_api(ns: &TestNamespace, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", kind);
    Api::namespaced_with(
        ns.client().clone(),
        ns.name(),
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

fn git_repositories(ns: &TestNamespace) -> Api<DynamicObject> {
    flux_api(ns, "GitRepository", "gitrepositories")
}

/// `status.artifact.<field>` of a Flux object.
fn artifact(obj: &DynamicObject, field: &str) -> String {
    obj.data["status"]["artifact"][field]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn ready(obj: &DynamicObject) -> bool {
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Waits until the Flux object `name` is Ready with a revision ending in
/// `suffix`.
async fn flux_ready_at(
    api: &Api<DynamicObject>,
    name: &str,
    suffix: &str,
) -> anyhow::Result<DynamicObject> {
    PATIENCE
        .poll(&format!("{name} Ready at …{suffix}"), || async {
            let obj = api.get(name).await?;
            anyhow::Ok((ready(&obj) && artifact(&obj, "revision").ends_with(suffix)).then_some(obj))
        })
        .await
}

/// What `flux reconcile source` does: fetch now.
async fn fetch_now(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    let at = jiff::Timestamp::now().to_string();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": at}}}),
        ),
    )
    .await?;
    Ok(())
}

/// The harness's git credentials as a Secret, and the `GitRepository`
/// `name` on `url`, branch `main`.
async fn git_repository(
    ns: &TestNamespace,
    ep: &Endpoints,
    name: &str,
    url: &str,
) -> anyhow::Result<()> {
    let (user, password) = ep.http_credentials()?;
    let secret = format!("{name}-git");
    ns.create::<Secret>(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret},
        "stringData": {"username": user, "password": password},
    }))
    .await?;
    git_repositories(ns)
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "GitRepository",
                "metadata": {"name": name},
                "spec": {
                    "interval": "10m",
                    "url": url,
                    "ref": {"branch": "main"},
                    "secretRef": {"name": secret},
                },
            }))?,
        )
        .await?;
    Ok(())
}

/// A repository whose `db/` holds `files`, beside a README outside the path.
fn commit(bare: &std::path::Path, files: &[(&str, &str)], message: &str) -> anyhow::Result<String> {
    let mut all: Vec<(String, &str)> = vec![("README.md".into(), "not selected\n")];
    all.extend(files.iter().map(|(p, t)| (format!("db/{p}"), *t)));
    let refs: Vec<(&str, &str)> = all.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    commit_files(bare, "main", &refs, message)
}

fn source_of(st: Option<&SourceStatus>) -> anyhow::Result<&SourceStatus> {
    st.context("status.source")
}

/// `status.source` names the Flux object's artifact now: Flux's revision,
/// its digest and UID, and a snapshot holding exactly `files`.
async fn names_the_artifact(
    ns: &TestNamespace,
    src: &SourceStatus,
    obj: &DynamicObject,
    files: &[&str],
) -> anyhow::Result<()> {
    eprintln!("status.source: {}", serde_json::to_string_pretty(src)?);
    assert_eq!(src.kind, SourceKind::Flux);
    assert_eq!(src.revision, artifact(obj, "revision"));
    let flux = src.flux.as_ref().context("status.source.flux")?;
    assert_eq!(flux.artifact_digest, artifact(obj, "digest"));
    assert_eq!(Some(&flux.uid), obj.metadata.uid.as_ref());
    let snapshot: ConfigMap = ns.api().get(&flux.snapshot_name).await?;
    let mut keys: Vec<String> = snapshot
        .data
        .unwrap_or_default()
        .into_keys()
        .chain(snapshot.binary_data.unwrap_or_default().into_keys())
        .filter(|k| !k.starts_with('.'))
        .collect();
    keys.sort();
    assert_eq!(keys, files, "the snapshot holds the path's files only");
    Ok(())
}

/// The column names of `table` (`columns` gives name and type).
fn column_names(db: &TestDatabase, table: &str) -> anyhow::Result<Vec<String>> {
    Ok(db
        .columns(table)?
        .iter()
        .filter_map(|c| c.split_whitespace().next().map(str::to_string))
        .collect())
}

fn schema_phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn in_sync_at(s: &PtahSchema, revision: &str) -> bool {
    schema_phase(s) == Some(SchemaPhase::InSync)
        && s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .is_some_and(|src| src.revision == revision)
}

/// The plan `s` last applied, as stored.
async fn applied_plan(ns: &TestNamespace, s: &PtahSchema) -> anyhow::Result<PtahSchemaPlan> {
    let name = s
        .status
        .as_ref()
        .and_then(|st| st.applied.as_ref())
        .map(|a| a.plan_name.clone())
        .context("status.applied")?;
    Ok(ns.api::<PtahSchemaPlan>().get(&name).await?)
}

/// Waits until `name` is `InSync` at the revision of the Flux object `obj`,
/// checks `status.source` names its artifact (snapshot holding only
/// `schema.sql`) and that the applied plan is bound to Flux's revision;
/// returns the applied plan.
async fn converged_at(
    ns: &TestNamespace,
    operator: &Operator,
    name: &str,
    obj: &DynamicObject,
) -> anyhow::Result<(PtahSchema, PtahSchemaPlan)> {
    let revision = artifact(obj, "revision");
    let s = operator
        .until(ns, name, "InSync at Flux's revision", |s: &PtahSchema| {
            in_sync_at(s, &revision)
        })
        .await?;
    let src = source_of(s.status.as_ref().and_then(|st| st.source.as_ref()))?;
    names_the_artifact(ns, src, obj, &["schema.sql"]).await?;
    let plan = applied_plan(ns, &s).await?;
    assert_eq!(plan.spec.source.kind, SourceKind::Flux);
    assert_eq!(
        plan.spec.source.flux_revision.as_deref(),
        Some(revision.as_str())
    );
    assert_eq!(plan.spec.source.flux_object_uid, obj.metadata.uid);
    Ok((s, plan))
}

async fn a_schema_follows_a_git_repository(engine: Engine, label: &str) -> anyhow::Result<()> {
    let h = harness().await;
    conformance::flux::require(h)?;
    let ns = TestNamespace::for_operator(h, "flux-src", label).await?;
    let db = TestDatabase::create(h, engine, ns.name())?;
    let ep = endpoints(h);
    let repo = conformance::testkit::unique("fluxsrc");
    let bare = create_repo(&ep.root, &repo, false)?;
    let first = commit(&bare, &[("schema.sql", ORDERS)], "orders")?;
    git_repository(&ns, &ep, "orders", &ep.http_repo(&repo)).await?;
    let git = git_repositories(&ns);
    let obj = flux_ready_at(&git, "orders", &first).await?;

    let operator = Operator::start(&ns, webhook_configurations).await?;
    executor::schema_from(
        &ns,
        &db,
        "orders",
        json!({"flux": {"kind": "GitRepository", "name": "orders", "path": "db"}}),
        json!({"apply": "Always"}),
    )
    .await?;
    converged_at(&ns, &operator, "orders", &obj).await?;
    assert_eq!(column_names(&db, "orders")?, ["id"]);

    // A new commit: Flux fetches it, a read is asked for, and the new
    // revision is planned and applied.
    let second = commit(&bare, &[("schema.sql", ORDERS_NOTE)], "a note")?;
    fetch_now(&git, "orders").await?;
    let obj = flux_ready_at(&git, "orders", &second).await?;
    // The manager watches the GitRepository: no read request, no interval.
    converged_at(&ns, &operator, "orders", &obj).await?;
    assert_eq!(column_names(&db, "orders")?, ["id", "note"]);
    operator.finish::<PtahSchema>(&ns).await
}

conformance::on_both_engines!(
    a_schema_from_a_flux_git_repository_binds_flux_revision,
    "schema",
    a_schema_follows_a_git_repository
);

async fn a_migration_follows_a_git_repository(engine: Engine, label: &str) -> anyhow::Result<()> {
    let h = harness().await;
    conformance::flux::require(h)?;
    let ns = TestNamespace::for_operator(h, "flux-mig", label).await?;
    let db = TestDatabase::create(h, engine, ns.name())?;
    let ep = endpoints(h);
    let repo = conformance::testkit::unique("fluxmig");
    let bare = create_repo(&ep.root, &repo, false)?;
    let files = executor::migration_files();
    let files: Vec<(&str, &str)> = files
        .as_object()
        .context("files")?
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
        .collect();
    let head = commit(&bare, &files, "two versions")?;
    git_repository(&ns, &ep, "orders", &ep.http_repo(&repo)).await?;
    let obj = flux_ready_at(&git_repositories(&ns), "orders", &head).await?;

    let operator = Operator::start(&ns, webhook_configurations).await?;
    executor::migration_from(
        &ns,
        &db,
        "orders",
        json!({"flux": {"kind": "GitRepository", "name": "orders", "path": "db"}}),
        json!({"apply": "Always"}),
    )
    .await?;
    let m = operator
        .until(
            &ns,
            "orders",
            "both versions applied",
            |m: &PtahMigration| {
                m.status.as_ref().is_some_and(|st| {
                    st.phase == Some(operator::api::condition::MigrationPhase::InSync)
                        && st.last_run.is_some()
                })
            },
        )
        .await?;
    let st = m.status.as_ref().context("status")?;
    let mut names: Vec<&str> = files.iter().map(|(p, _)| *p).collect();
    names.sort();
    names_the_artifact(&ns, source_of(st.source.as_ref())?, &obj, &names).await?;
    let mut tables = db.tables()?;
    tables.retain(|t| t == "orders" || t == "customers");
    tables.sort();
    assert_eq!(tables, ["customers", "orders"]);
    let run = st.last_run.as_ref().context("lastRun")?;
    let plan_name = run.plan_name.as_deref().context("lastRun.planName")?;
    let plan: PtahMigrationPlan = ns.api().get(plan_name).await?;
    assert_eq!(plan.spec.source.kind, SourceKind::Flux);
    assert_eq!(
        plan.spec.source.flux_revision.as_deref(),
        Some(artifact(&obj, "revision").as_str())
    );
    operator.finish::<PtahMigration>(&ns).await
}

conformance::on_both_engines!(
    a_migration_from_a_flux_git_repository_runs_the_snapshot,
    "migration",
    a_migration_follows_a_git_repository
);

/// The `ReconciliationFailed` condition of `s`: reason and message.
fn failure(s: &PtahSchema) -> Option<(Reason, String)> {
    let c = s
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == SchemaConditionType::ReconciliationFailed)?;
    Some((c.reason, c.message.clone()))
}

#[tokio::test]
async fn a_flux_source_missing_not_ready_or_altered_is_a_verdict_naming_it() -> anyhow::Result<()> {
    let h = harness().await;
    conformance::flux::require(h)?;
    let ns = TestNamespace::for_operator(h, "flux-src", "verdicts").await?;
    let db = TestDatabase::create(h, Engine::Postgres, ns.name())?;
    let ep = endpoints(h);
    let operator = Operator::start(&ns, webhook_configurations).await?;
    let source =
        |name: &str| json!({"flux": {"kind": "GitRepository", "name": name, "path": "db"}});
    let policy = json!({"apply": "Always"});

    // No such object.
    executor::schema_from(&ns, &db, "missing", source("missing"), policy.clone()).await?;
    let missing = format!("GitRepository/{}/missing does not exist", ns.name());
    let s = operator
        .until(&ns, "missing", "FluxSourceNotReady", |s: &PtahSchema| {
            failure(s).is_some_and(|(r, m)| r == Reason::FluxSourceNotReady && m.contains(&missing))
        })
        .await?;
    eprintln!("missing: {:?}", failure(&s));

    // An object Flux cannot make Ready: a repository that is not there.
    git_repository(&ns, &ep, "absent", &ep.http_repo("no-such-repository")).await?;
    executor::schema_from(&ns, &db, "absent", source("absent"), policy.clone()).await?;
    let s = operator
        .until(&ns, "absent", "not Ready, named", |s: &PtahSchema| {
            failure(s).is_some_and(|(r, m)| {
                r == Reason::FluxSourceNotReady
                    && m.contains("GitRepository/")
                    && m.contains("is not Ready")
            })
        })
        .await?;
    eprintln!("not ready: {:?}", failure(&s));
    assert!(
        !db.tables()?.contains(&"orders".to_string()),
        "nothing was applied"
    );

    // A Ready object whose status names another digest than its artifact
    // has: Flux suspended, so it keeps the altered status.
    let repo = conformance::testkit::unique("fluxalt");
    let bare = create_repo(&ep.root, &repo, false)?;
    let head = commit(&bare, &[("schema.sql", ORDERS)], "orders")?;
    git_repository(&ns, &ep, "altered", &ep.http_repo(&repo)).await?;
    let git = git_repositories(&ns);
    let obj = flux_ready_at(&git, "altered", &head).await?;
    git.patch(
        "altered",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": true}})),
    )
    .await?;
    let wrong = format!("sha256:{}", "0".repeat(64));
    // A reconcile under way when the suspend landed may still write its
    // status: alter it until it stays altered.
    PATIENCE
        .poll("the altered status to stay", || async {
            let now = git.get("altered").await?;
            let mut status: Value = obj.data["status"].clone();
            status["artifact"]["digest"] = json!(wrong);
            status["observedGeneration"] = json!(now.metadata.generation);
            git.patch_status(
                "altered",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let after = git.get("altered").await?;
            anyhow::Ok(
                (artifact(&after, "digest") == wrong
                    && after.data["status"]["observedGeneration"]
                        == json!(after.metadata.generation))
                .then_some(()),
            )
        })
        .await?;
    executor::schema_from(&ns, &db, "altered", source("altered"), policy).await?;
    let s = operator
        .until(
            &ns,
            "altered",
            "a digest mismatch, named",
            |s: &PtahSchema| {
                failure(s).is_some_and(|(r, m)| {
                    r == Reason::ResolveFailed
                        && m.contains("GitRepository/altered")
                        && m.contains(&wrong)
                })
            },
        )
        .await?;
    eprintln!("altered: {:?}", failure(&s));
    assert!(
        s.status
            .as_ref()
            .and_then(|st| st.source.as_ref())
            .is_none(),
        "nothing was resolved from an artifact of another digest"
    );
    assert!(
        !db.tables()?.contains(&"orders".to_string()),
        "nothing was applied"
    );
    operator.finish::<PtahSchema>(&ns).await
}

/// A gzip tarball of `files` under `db/`, as `flux push artifact` packs a
/// directory.
fn tarball(files: &[(&str, &str)]) -> anyhow::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (name, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, format!("db/{name}"), text.as_bytes())?;
    }
    Ok(tar.into_inner()?.finish()?)
}

/// Pushes a Flux artifact of `sql` as `<registry>/<repository>:v1`.
async fn push_flux_artifact(
    registry: &Registry,
    repository: &str,
    sql: &str,
) -> anyhow::Result<oci::Pushed> {
    oci::push_config_typed(
        &format!("{}/{repository}:v1", registry.host),
        supplychain::oci::FLUX_CONFIG_TYPE,
        supplychain::oci::FLUX_CONTENT_LAYER_TYPE,
        "artifact.tgz",
        &tarball(&[("schema.sql", sql)])?,
    )
    .await
}

#[tokio::test]
async fn a_flux_oci_repository_is_verified_by_the_operator_not_trusted() -> anyhow::Result<()> {
    let h = harness().await;
    conformance::flux::require(h)?;
    let registry = Registry::from_harness(h)?;
    let ns = TestNamespace::for_operator(h, "flux-src", "oci").await?;
    let db = TestDatabase::create(h, Engine::Postgres, ns.name())?;
    let work = tempfile::tempdir()?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    let ocirepositories = flux_api(&ns, "OCIRepository", "ocirepositories");

    // Two artifacts: one signed by the key the policy trusts, one unsigned.
    let signed_repo = conformance::testkit::unique("flux-signed");
    let signed = push_flux_artifact(&registry, &signed_repo, ORDERS).await?;
    let key = oci::signed_by_new_key(&registry, work.path(), "release", &signed.pinned)?;
    let unsigned_repo = conformance::testkit::unique("flux-unsigned");
    let unsigned = push_flux_artifact(&registry, &unsigned_repo, ORDERS).await?;
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "verification"},
        "data": {"policy.yaml": oci::key_policy_any_type(&key.public_pem)},
    }))
    .await?;
    for (name, repository) in [("signed", &signed_repo), ("unsigned", &unsigned_repo)] {
        ocirepositories
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "source.toolkit.fluxcd.io/v1",
                    "kind": "OCIRepository",
                    "metadata": {"name": name},
                    "spec": {
                        "interval": "10m",
                        "url": format!("oci://{}/{repository}", registry.host),
                        "ref": {"tag": "v1"},
                        "insecure": true,
                    },
                }))?,
            )
            .await?;
    }
    let obj = flux_ready_at(&ocirepositories, "signed", &signed.digest).await?;
    flux_ready_at(&ocirepositories, "unsigned", &unsigned.digest).await?;
    let source = |name: &str| {
        json!({
            "flux": {"kind": "OCIRepository", "name": name, "path": "db"},
            "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
        })
    };
    executor::schema_from(
        &ns,
        &db,
        "signed",
        source("signed"),
        json!({"apply": "Always"}),
    )
    .await?;
    executor::schema_from(
        &ns,
        &db,
        "unsigned",
        source("unsigned"),
        json!({"apply": "Always"}),
    )
    .await?;

    let (s, plan) = converged_at(&ns, &operator, "signed", &obj).await?;
    let src = source_of(s.status.as_ref().and_then(|st| st.source.as_ref()))?;
    let verified = src
        .verification
        .as_ref()
        .context("status.source.verification")?;
    assert_eq!(verified.authority.as_deref(), Some("release"));
    assert_eq!(
        src.oci.as_ref().map(|o| o.digest.as_str()),
        Some(signed.digest.as_str()),
        "Verify checked the manifest Flux named"
    );
    assert!(plan.spec.source.signer_evidence_digest.is_some());
    assert_eq!(column_names(&db, "orders")?, ["id"]);

    let s = operator
        .until(
            &ns,
            "unsigned",
            "Blocked by the policy",
            |s: &PtahSchema| schema_phase(s) == Some(SchemaPhase::Blocked),
        )
        .await?;
    let stalled = s
        .status
        .as_ref()
        .and_then(|st| {
            st.conditions
                .iter()
                .find(|c| c.type_ == SchemaConditionType::Stalled)
        })
        .map(|c| (c.reason, c.message.clone()));
    eprintln!("unsigned: {stalled:?}");
    assert_eq!(stalled.map(|s| s.0), Some(Reason::PolicyRefused));
    operator.finish::<PtahSchema>(&ns).await
}
