//! Flux syncing a PtahSchema end to end: the harness's source-controller
//! fetches a repository from the harness's git HTTP server, its
//! kustomize-controller applies a directory (a `configMapGenerator` for the
//! schema's SQL and the PtahSchema under `OnApproval`, PostgreSQL) and
//! health-checks the PtahSchema through kstatus, with a real manager and
//! its admission webhooks running for the namespace.
//!
//! * Applied before the manager runs, the PtahSchema has no status the
//!   manager wrote: the Kustomization is not Ready (kstatus must not read it
//!   Current).
//! * While the first plan awaits its approval the Kustomization is not
//!   Ready and is progressing (`Progressing`, never `HealthCheckFailed`
//!   before its timeout); approved, the schema reaches `InSync` and only then
//!   is the Kustomization Ready for that revision.
//! * A commit that drops a column (destructive, no `allowDestructive`):
//!   the schema is `Blocked` (`Stalled=True`, `DestructiveChangesDisabled`)
//!   and the health check fails early, naming the PtahSchema as `Failed`.
//! * A commit that adds a column instead: a new plan, approved, the new
//!   `InSync`, and the Kustomization Ready for the new revision.
//! * Field ownership: kustomize-controller owns the spec it applied, the
//!   manager's status writes own only `status`, and no field has two owners.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use conformance::gitserve::{commit_files, create_repo};
use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::git::endpoints;
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::{Operator, approve_schema};
use conformance::testkit::plugin::Plugin;
use conformance::testkit::wait::Patience;
use operator::admission::webhook_configurations;
use operator::api::condition::{ConditionStatus, Reason, SchemaConditionType, SchemaPhase};
use operator::api::schema::PtahSchema;

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// Every wait of this file: a plan and an Apply are two or three Jobs.
const PATIENCE: Patience = Patience::new(Duration::from_secs(120), Duration::from_millis(250));

/// The Kustomization's health-check timeout.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(45);

const KUSTOMIZATION_YAML: &str = "\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ptahschema.yaml
configMapGenerator:
  - name: orders-schema
    files:
      - schema.sql
configurations:
  - kustomizeconfig.yaml
";

/// Lets kustomize rename the generated ConfigMap inside the PtahSchema too:
/// a new SQL is a new ConfigMap name, so a new generation of the schema.
const KUSTOMIZECONFIG_YAML: &str = "\
nameReference:
  - kind: ConfigMap
    version: v1
    fieldSpecs:
      - kind: PtahSchema
        group: operator.ptah.run
        path: spec/source/configMap/name
";

const PTAHSCHEMA_YAML: &str = "\
apiVersion: operator.ptah.run/v1alpha1
kind: PtahSchema
metadata:
  name: orders
spec:
  target:
    engine: PostgreSQL
    urlFrom:
      name: orders-db
      key: url
    coordinationKey: orders
  source:
    configMap:
      name: orders-schema
      keys:
        - schema.sql
  policy:
    apply: OnApproval
  execution:
    failureRetryInterval: 5s
";

/// `orders` with `columns`.
fn orders(columns: &[&str]) -> String {
    format!("CREATE TABLE orders (\n  {}\n);\n", columns.join(",\n  "))
}

const ID: &str = "id bigint PRIMARY KEY";
const CUSTOMER: &str = "customer varchar(64) NOT NULL";
const NOTE: &str = "note varchar(32)";

fn flux_api(ns: &TestNamespace, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(ns.client().clone(), ns.name(), &resource)
}

/// A condition of a Flux object: (status, reason, message).
fn flux_condition(obj: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let c = obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// `status.lastAppliedRevision` (a success) or `lastAttemptedRevision`.
fn revision(obj: &DynamicObject, field: &str) -> String {
    obj.data["status"][field]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn last_applied(obj: &DynamicObject) -> String {
    revision(obj, "lastAppliedRevision")
}

/// Ready=True for the revision of `commit`.
fn ready_at(obj: &DynamicObject, commit: &str) -> bool {
    flux_condition(obj, "Ready").is_some_and(|c| c.0 == "True")
        && last_applied(obj).ends_with(commit)
}

fn phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn condition(s: &PtahSchema, t: SchemaConditionType) -> Option<(ConditionStatus, Reason)> {
    let c = s
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == t)?;
    Some((c.status, c.reason))
}

/// The generation this status describes is the stored one.
fn current(s: &PtahSchema) -> bool {
    s.status.as_ref().and_then(|st| st.observed_generation) == s.metadata.generation
}

fn plan_uid(s: &PtahSchema) -> Option<String> {
    s.status.as_ref()?.plan.as_ref().map(|p| p.uid.clone())
}

async fn get(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<DynamicObject> {
    Ok(api.get(name).await?)
}

/// Waits until the Flux object `name` satisfies `ok`.
async fn until_flux(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    ok: impl Fn(&DynamicObject) -> bool,
) -> anyhow::Result<DynamicObject> {
    let last = std::sync::Mutex::new(None);
    let found = PATIENCE
        .poll(what, || async {
            let obj = get(api, name).await?;
            let done = ok(&obj);
            *last.lock().expect("lock") = Some(obj.data["status"].clone());
            anyhow::Ok(done.then_some(obj))
        })
        .await;
    found.with_context(|| format!("last status of {name}: {:?}", last.lock().expect("lock")))
}

/// The status of the Kustomization `orders`, for a failure's message.
fn flux_status(api: &Api<DynamicObject>) -> String {
    let api = api.clone();
    let status = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async { api.get("orders").await.ok() })
    })
    .join()
    .ok()
    .flatten();
    format!("{:?}", status.map(|k| k.data["status"].clone()))
}

/// The GitRepository fetches now (what `flux reconcile source git` does).
async fn fetch_now(git: &Api<DynamicObject>) -> anyhow::Result<()> {
    let at = jiff::Timestamp::now().to_string();
    git.patch(
        "orders",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": at}}}),
        ),
    )
    .await?;
    Ok(())
}

/// The paths a managedFields entry owns: its leaves (`.` is the node itself).
fn owned(fields: &Value) -> BTreeSet<String> {
    fn walk(prefix: &str, v: &Value, out: &mut BTreeSet<String>) {
        match v.as_object() {
            Some(map) if !map.is_empty() => {
                for (k, child) in map {
                    if k == "." {
                        out.insert(prefix.to_string());
                    } else {
                        let path = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}/{k}")
                        };
                        walk(&path, child, out);
                    }
                }
            }
            _ => {
                out.insert(prefix.to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk("", fields, &mut out);
    out
}

/// The Secret of the harness's git HTTP credentials, a `GitRepository`
/// `orders` on `url` (branch `main`) and a `Kustomization` `orders` applying
/// its `./deploy` into the namespace with `health_checks`: the GitRepository
/// and Kustomization APIs.
async fn flux_syncs(
    ns: &TestNamespace,
    ep: &conformance::gitserve::Endpoints,
    url: &str,
    health_checks: Value,
) -> anyhow::Result<(Api<DynamicObject>, Api<DynamicObject>)> {
    let (user, password) = ep.http_credentials()?;
    ns.create::<Secret>(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "git-credentials"},
        "stringData": {"username": user, "password": password},
    }))
    .await?;

    let git = flux_api(
        ns,
        "source.toolkit.fluxcd.io",
        "GitRepository",
        "gitrepositories",
    );
    let kustomizations = flux_api(
        ns,
        "kustomize.toolkit.fluxcd.io",
        "Kustomization",
        "kustomizations",
    );
    git.create(
        &Default::default(),
        &serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {"name": "orders"},
            "spec": {
                "interval": "1m",
                "url": url,
                "ref": {"branch": "main"},
                "secretRef": {"name": "git-credentials"},
            },
        }))?,
    )
    .await?;
    kustomizations
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization",
                "metadata": {"name": "orders"},
                "spec": {
                    "interval": "1m",
                    "retryInterval": "5s",
                    "timeout": format!("{}s", HEALTH_TIMEOUT.as_secs()),
                    "sourceRef": {"kind": "GitRepository", "name": "orders"},
                    "path": "./deploy",
                    "prune": true,
                    "wait": false,
                    "targetNamespace": ns.name(),
                    "healthChecks": health_checks,
                },
            }))?,
        )
        .await?;

    Ok((git, kustomizations))
}

#[tokio::test]
async fn flux_health_checks_follow_the_schema() -> anyhow::Result<()> {
    let started = Instant::now();
    let h = harness().await;
    conformance::flux::require(h)?;
    let ns = TestNamespace::for_operator(h, "flux", "sync").await?;
    let db = TestDatabase::create(h, Engine::Postgres, ns.name())?;
    db.secret(&ns, "orders-db").await?;

    // The repository, served by the harness's git HTTP server (basic auth).
    let ep = endpoints(h);
    let repo = conformance::testkit::unique("flux");
    let bare = create_repo(&ep.root, &repo, false)?;
    let files = |sql: &str| {
        [
            ("deploy/kustomization.yaml", KUSTOMIZATION_YAML.to_string()),
            (
                "deploy/kustomizeconfig.yaml",
                KUSTOMIZECONFIG_YAML.to_string(),
            ),
            ("deploy/ptahschema.yaml", PTAHSCHEMA_YAML.to_string()),
            ("deploy/schema.sql", sql.to_string()),
        ]
    };
    let commit = |sql: &str, message: &str| {
        let files = files(sql);
        let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
        commit_files(&bare, "main", &refs, message)
    };
    let first = commit(&orders(&[ID, CUSTOMER]), "orders")?;
    let schemas = ns.api::<PtahSchema>();
    let health = json!([{
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchema",
        "name": "orders",
        "namespace": ns.name(),
    }]);
    let (git, kustomizations) = flux_syncs(&ns, &ep, &ep.http_repo(&repo), health).await?;

    // Flux applies the PtahSchema.
    PATIENCE
        .poll("Flux to apply the PtahSchema", || async {
            anyhow::Ok(schemas.get_opt("orders").await?)
        })
        .await
        .with_context(|| format!("{:?}", flux_status(&kustomizations)))?;
    let applied_at = Instant::now();

    // The manager is not running yet (still starting, say): a PtahSchema
    // nobody has read is not healthy, so Flux's health check keeps
    // progressing rather than reading it Current.
    let k = until_flux(
        &kustomizations,
        "orders",
        "the health check of the first revision",
        |k| {
            flux_condition(k, "Healthy").is_some_and(|c| c.1 == "Progressing" || c.0 == "True")
                && revision(k, "lastAttemptedRevision").ends_with(&first)
        },
    )
    .await?;
    // Its first poll is immediate; give it that moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let k = get(&kustomizations, "orders").await.unwrap_or(k);
    let ready = flux_condition(&k, "Ready").context("Ready")?;
    eprintln!("before the manager's first read, Kustomization Ready: {ready:?}");
    assert_ne!(
        ready.0, "True",
        "the Kustomization is Ready before the manager read the schema: {ready:?}; \
         kstatus reads a PtahSchema without status.observedGeneration Current"
    );
    let operator = Operator::start(&ns, webhook_configurations).await?;

    // The first plan waits for its approval: the Kustomization is not Ready
    // and is progressing, not failed, well within its timeout.
    let s = operator
        .until(&ns, "orders", "AwaitingApproval", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::AwaitingApproval)
        })
        .await?;
    assert_eq!(
        condition(&s, SchemaConditionType::Reconciling),
        Some((ConditionStatus::True, Reason::AwaitingApproval)),
        "kstatus reads AwaitingApproval as InProgress"
    );
    // Still health-checking the first revision: never Ready so far, and
    // progressing.
    let k = get(&kustomizations, "orders").await?;
    let ready = flux_condition(&k, "Ready").context("Ready")?;
    eprintln!("awaiting approval, Kustomization Ready: {ready:?}");
    assert_ne!(
        ready.0, "True",
        "the Kustomization is Ready while the schema awaits its approval: {ready:?}"
    );
    assert_eq!(ready.1, "Progressing", "{ready:?}");
    let healthy = flux_condition(&k, "Healthy").context("Healthy")?;
    assert_eq!(healthy.1, "Progressing", "{healthy:?}");
    assert!(healthy.2.contains(&first), "{healthy:?}");
    assert_eq!(
        flux_condition(&k, "Reconciling").map(|c| c.0).as_deref(),
        Some("True")
    );
    // Still so a moment later (a health check polls every 5 s).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let k = get(&kustomizations, "orders").await?;
    let ready = flux_condition(&k, "Ready").context("Ready")?;
    assert_eq!(ready.1, "Progressing", "{ready:?}");
    assert!(
        applied_at.elapsed() < HEALTH_TIMEOUT,
        "checked after the health check's timeout"
    );

    // Approved: InSync, and only then the Kustomization is Ready.
    approve_schema(&ns, &s, "orders-1").await?;
    let k = until_flux(
        &kustomizations,
        "orders",
        "Ready at the first revision",
        |k| ready_at(k, &first),
    )
    .await?;
    let s = schemas.get("orders").await?;
    assert_eq!(phase(&s), Some(SchemaPhase::InSync), "{:?}", s.status);
    assert!(current(&s));
    eprintln!(
        "approved, Kustomization Ready: {:?}",
        flux_condition(&k, "Ready")
    );
    assert_eq!(db.columns("orders")?.len(), 2);
    let generation = s.metadata.generation;

    // A destructive commit: Blocked, and the health check fails early,
    // naming the PtahSchema as Failed.
    let blocked_at = Instant::now();
    let second = commit(&orders(&[ID]), "drop customer")?;
    fetch_now(&git).await?;
    let k = until_flux(
        &kustomizations,
        "orders",
        "the health check to fail on Blocked",
        |k| {
            flux_condition(k, "Ready").is_some_and(|c| c.1 == "HealthCheckFailed")
                && revision(k, "lastAttemptedRevision").ends_with(&second)
        },
    )
    .await;
    let k = match k {
        Ok(k) => k,
        Err(e) => {
            let s = schemas.get("orders").await?;
            return Err(e.context(format!("schema status: {:?}", s.status)));
        }
    };
    let failed_in = blocked_at.elapsed();
    let ready = flux_condition(&k, "Ready").context("Ready")?;
    eprintln!("blocked in {failed_in:?}, Kustomization Ready: {ready:?}");
    assert_eq!(ready.0, "False");
    assert!(
        ready
            .2
            .contains(&format!("PtahSchema/{}/orders status: 'Failed'", ns.name())),
        "{ready:?}"
    );
    assert!(failed_in < HEALTH_TIMEOUT, "failed only at the timeout");
    let s = schemas.get("orders").await?;
    assert_ne!(
        s.metadata.generation, generation,
        "the commit changed the spec"
    );
    assert!(current(&s));
    assert_eq!(phase(&s), Some(SchemaPhase::Blocked));
    // The reason the kstatus reader found Failed by.
    assert_eq!(
        condition(&s, SchemaConditionType::Stalled),
        Some((ConditionStatus::True, Reason::DestructiveChangesDisabled))
    );
    assert_eq!(db.columns("orders")?.len(), 2, "nothing was dropped");

    // A fix: a column added instead. A new plan, approved, the new InSync.
    let blocked_plan = plan_uid(&s);
    let third = commit(&orders(&[ID, CUSTOMER, NOTE]), "add note")?;
    fetch_now(&git).await?;
    let s = operator
        .until(&ns, "orders", "the new plan awaiting", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::AwaitingApproval)
                && current(s)
                && plan_uid(s) != blocked_plan
        })
        .await?;
    let k = get(&kustomizations, "orders").await?;
    assert!(!ready_at(&k, &third), "Ready before the second approval");
    approve_schema(&ns, &s, "orders-3").await?;
    let k = until_flux(&kustomizations, "orders", "Ready at the fix", |k| {
        ready_at(k, &third)
    })
    .await?;
    let s = schemas.get("orders").await?;
    assert_eq!(phase(&s), Some(SchemaPhase::InSync), "{:?}", s.status);
    assert!(current(&s));
    assert_eq!(db.columns("orders")?.len(), 3);
    eprintln!(
        "fixed, Kustomization Ready: {:?}",
        flux_condition(&k, "Ready")
    );

    // Field ownership: Flux's apply owns the spec, the manager's status
    // writes own only status, and nothing has two owners.
    let entries = s.metadata.managed_fields.clone().unwrap_or_default();
    let mut flux = BTreeSet::new();
    let mut others: Vec<(String, BTreeSet<String>)> = Vec::new();
    for e in &entries {
        let manager = e.manager.clone().unwrap_or_default();
        let fields = owned(
            &e.fields_v1
                .as_ref()
                .map(|f| f.0.clone())
                .unwrap_or_default(),
        );
        let shown = if fields.len() <= 12 {
            format!("{fields:?}")
        } else {
            format!("{} fields", fields.len())
        };
        eprintln!(
            "managedFields: {manager} {:?} {:?}: {shown}",
            e.operation, e.subresource
        );
        if manager == "kustomize-controller" {
            assert_eq!(e.operation.as_deref(), Some("Apply"), "{e:?}");
            assert_eq!(e.subresource, None, "{e:?}");
            flux.extend(fields);
        } else {
            if e.subresource.as_deref() == Some("status") {
                assert!(
                    fields.iter().all(|f| f.starts_with("f:status")),
                    "{fields:?}"
                );
            } else {
                assert!(
                    !fields.iter().any(|f| f.starts_with("f:spec")),
                    "{manager}: {fields:?}"
                );
            }
            others.push((manager, fields));
        }
    }
    for path in [
        "f:spec/f:source/f:configMap/f:name",
        "f:spec/f:policy/f:apply",
        "f:spec/f:target/f:urlFrom/f:name",
    ] {
        assert!(
            flux.contains(path),
            "kustomize-controller owns {path}: {flux:?}"
        );
    }
    assert!(!flux.iter().any(|f| f.starts_with("f:status")), "{flux:?}");
    assert!(
        others
            .iter()
            .any(|(_, f)| f.iter().any(|p| p.starts_with("f:status"))),
        "the manager's status writes are recorded: {others:?}"
    );
    for (manager, fields) in &others {
        let shared: Vec<&String> = flux.intersection(fields).collect();
        assert!(shared.is_empty(), "{manager} and Flux both own {shared:?}");
    }

    // Flux prunes what it applied; the manager, still running, lets go.
    kustomizations
        .delete("orders", &DeleteParams::default())
        .await?;
    operator.finish::<PtahSchema>(&ns).await?;
    eprintln!("flux_sync took {:?}", started.elapsed());
    Ok(())
}

const OCI_SCHEMA_YAML: &str = "\
apiVersion: operator.ptah.run/v1alpha1
kind: PtahSchema
metadata:
  name: orders
spec:
  target:
    engine: PostgreSQL
    urlFrom:
      name: orders-db
      key: url
    coordinationKey: orders
  source:
    oci:
      ociRef: oci://127.0.0.1:5000/shop/orders:v1
    verificationPolicyFrom:
      name: verification
      key: policy.yaml
  policy:
    apply: OnApproval
";

/// `kubectl ptah set-source` on a PtahSchema Flux applied: refused by
/// default, naming kustomize-controller and the Kustomization and printing
/// the change to make in Git; `--force` takes the field. No manager is
/// needed: the verb is about who owns `spec.source.oci.ociRef`.
#[tokio::test]
async fn set_source_refuses_a_field_flux_owns() -> anyhow::Result<()> {
    let h = harness().await;
    conformance::flux::require(h)?;
    let ns = TestNamespace::for_operator(h, "flux", "set-source").await?;
    let ep = endpoints(h);
    let repo = conformance::testkit::unique("flux-oci");
    let bare = create_repo(&ep.root, &repo, false)?;
    let kustomization = "resources:\n  - ptahschema.yaml\n";
    commit_files(
        &bare,
        "main",
        &[
            ("deploy/kustomization.yaml", kustomization),
            ("deploy/ptahschema.yaml", OCI_SCHEMA_YAML),
        ],
        "orders from OCI",
    )?;
    let (_git, kustomizations) = flux_syncs(&ns, &ep, &ep.http_repo(&repo), json!([])).await?;
    until_flux(
        &kustomizations,
        "orders",
        "Flux to apply the PtahSchema",
        |k| flux_condition(k, "Ready").is_some_and(|c| c.0 == "True"),
    )
    .await?;

    let k = Plugin::new(&ns)?;
    let v2 = "oci://127.0.0.1:5000/shop/orders:v2";
    let ran = k.run(&["set-source", "schema/orders", v2])?;
    assert_eq!(ran.code, 1, "{ran:?}");
    let says = &ran.stderr;
    assert!(
        says.contains("spec.source.oci.ociRef of schema/orders")
            && says.contains("is owned by kustomize-controller (Flux")
            && says.contains(&format!("Kustomization {}/orders", ns.name())),
        "{says}"
    );
    assert!(
        says.contains("Make the change in Git instead")
            && says.contains("-       ociRef: oci://127.0.0.1:5000/shop/orders:v1")
            && says.contains(&format!("+       ociRef: {v2}")),
        "{says}"
    );
    let s: PtahSchema = ns.api().get("orders").await?;
    assert_eq!(
        s.spec.source.oci.map(|o| o.oci_ref).as_deref(),
        Some("oci://127.0.0.1:5000/shop/orders:v1")
    );

    let ran = k.run(&["set-source", "schema/orders", v2, "--force"])?;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.contains("(taken from kustomize-controller)"),
        "{}",
        ran.stdout
    );
    let s: PtahSchema = ns.api().get("orders").await?;
    assert_eq!(
        s.spec.source.oci.as_ref().map(|o| o.oci_ref.as_str()),
        Some(v2)
    );
    let owners: Vec<String> = s
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| {
            e.fields_v1
                .as_ref()
                .and_then(|f| f.0.pointer("/f:spec/f:source/f:oci/f:ociRef"))
                .is_some()
        })
        .filter_map(|e| e.manager.clone())
        .collect();
    assert_eq!(owners, ["kubectl-ptah"], "--force took the field");
    kustomizations
        .delete("orders", &DeleteParams::default())
        .await?;
    Ok(())
}

/// People copy the layout of `docs/gitops.md`, so it must be what this
/// test syncs.
#[test]
fn the_docs_show_the_synced_layout() -> anyhow::Result<()> {
    let doc = std::fs::read_to_string(conformance::tools::workspace_root().join("docs/gitops.md"))?;
    for (file, text) in [
        ("kustomization.yaml", KUSTOMIZATION_YAML),
        ("kustomizeconfig.yaml", KUSTOMIZECONFIG_YAML),
    ] {
        assert!(
            doc.contains(text),
            "docs/gitops.md does not show {file} as tested:\n{text}"
        );
    }
    Ok(())
}
