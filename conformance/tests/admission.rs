//! The approval webhooks on the harness API server: the manager's admission
//! handler is served in-process over TLS on 127.0.0.1, and the two webhook
//! configurations of `operator::admission` are installed pointing at it,
//! scoped to the test's namespace (a label only that namespace has) so tests
//! running beside it are not reviewed. A person (`alice`, impersonated, with
//! RBAC to create approvals and nothing else) then approves: admission stamps
//! her identity over a forged one, refuses an approval of another plan UID or
//! fingerprint naming the field, and after `status.plan` moves refuses an
//! approval of the old plan. The same for a PtahMigrationApproval and a
//! PtahMigrationRunAcknowledgment bound to `status.unresolvedRun`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use conformance::harness::Harness;
use conformance::testkit::admission::{Webhooks, client_as};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::Patience;
use operator::admission::{StampKey, handler, webhook_configurations};
use operator::api::{
    PtahMigration, PtahMigrationApproval, PtahMigrationPlan, PtahMigrationRunAcknowledgment,
    PtahSchema, PtahSchemaApproval, PtahSchemaPlan,
};
use operator::server::{Routes, Tls, serve};
use operator::testing;

/// Every wait of these tests: at most a minute, looking every 250 ms.
const PATIENCE: Patience = Patience::new(Duration::from_secs(60), Duration::from_millis(250));

/// The person who approves.
const APPROVER: &str = "alice";
/// A group she is impersonated with.
const APPROVER_GROUP: &str = "ptah-approvers";

/// The test's namespace, the webhook server and the two configurations,
/// all removed at the end, also when the test fails.
struct Scope {
    harness: &'static Harness,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    _webhooks: Webhooks,
    namespace: TestNamespace,
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Scope {
    /// A namespace with the CRDs, the handler served on 127.0.0.1, the
    /// webhooks installed for this namespace only and answering, and RBAC for
    /// the approver.
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        conformance::install_crypto_provider();
        let namespace =
            TestNamespace::new(harness, "adm", test, NamespaceSpec::default().with_crds()).await?;
        let client = namespace.client().clone();

        let tls = Tls::self_signed(&["127.0.0.1"])?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let key = StampKey::of(&operator::execution::receiver::TokenKey::generate());
        let routes = Routes::new().route("/admission/", handler(client.clone(), Arc::new(key)));
        let ca_pem = tls.ca_pem.clone();
        let server = tokio::spawn(async move { serve(listener, &tls, routes, 1 << 20).await });
        let url = format!("https://127.0.0.1:{port}");
        let webhooks = Webhooks::install(&namespace, webhook_configurations, url, &ca_pem).await?;
        let scope = Scope {
            harness,
            server,
            _webhooks: webhooks,
            namespace,
        };
        scope.grant_approver().await?;
        Ok(scope)
    }

    fn ns(&self) -> &str {
        self.namespace.name()
    }

    /// `alice` may create and read approvals and acknowledgments here, and
    /// nothing else.
    async fn grant_approver(&self) -> anyhow::Result<()> {
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "ptah-approver"},
            "rules": [{
                "apiGroups": ["operator.ptah.run"],
                "resources": [
                    "ptahschemaapprovals",
                    "ptahmigrationapprovals",
                    "ptahmigrationrunacknowledgments"
                ],
                "verbs": ["create", "get"]
            }]
        }))?;
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "ptah-approver"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ptah-approver"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": APPROVER}]
        }))?;
        let pp = PostParams::default();
        self.namespace.api::<Role>().create(&pp, &role).await?;
        self.namespace
            .api::<RoleBinding>()
            .create(&pp, &binding)
            .await?;
        Ok(())
    }

    /// A client of the harness acting as `alice` (group `ptah-approvers`).
    async fn approver(&self) -> anyhow::Result<Client> {
        client_as(self.harness, APPROVER, &[APPROVER_GROUP]).await
    }

    /// Creates an object here as the cluster admin (what the operator writes).
    async fn create<K>(&self, value: Value) -> anyhow::Result<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug,
    {
        self.namespace.create(value).await
    }

    /// Writes `status` of a resource through the status subresource, as the
    /// operator does.
    async fn set_status<K>(&self, name: &str, status: Value) -> anyhow::Result<()>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        self.namespace
            .api::<K>()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .with_context(|| format!("writing status of {name}"))?;
        Ok(())
    }

    /// Waits until the API server calls both webhooks: a dry-run creation of
    /// `probe` (forged stamps, the current plan) by the admin is admitted and
    /// comes back stamped. A refusal means only the validating webhook is in
    /// place yet: it refuses the forged stamp.
    async fn wait_for_webhooks<K>(&self, probe: Value) -> anyhow::Result<()>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug,
    {
        let api = self.namespace.api::<K>();
        let obj: K = serde_json::from_value(probe)?;
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        PATIENCE
            .poll("the approval webhooks to answer", || {
                let (api, obj, dry) = (api.clone(), obj.clone(), dry.clone());
                async move {
                    match api.create(&dry, &obj).await {
                        Ok(created) => {
                            let spec = serde_json::to_value(&created)?["spec"].clone();
                            Ok((spec["mutationRequestUID"] != json!("forged")).then_some(()))
                        }
                        Err(kube::Error::Api(e)) if e.message.contains("admission webhook") => {
                            Ok(None)
                        }
                        Err(e) => Err(e.into()),
                    }
                }
            })
            .await
    }
}

/// The API server's refusal of a creation, or a failure if it was admitted.
async fn refused<K>(api: &Api<K>, value: Value) -> anyhow::Result<String>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value)?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(created) => bail!("{} was admitted", created.name_any()),
        Err(kube::Error::Api(e)) => Ok(e.message),
        Err(e) => Err(e.into()),
    }
}

fn uid<K: Resource>(obj: &K) -> anyhow::Result<String> {
    obj.meta().uid.clone().context("no metadata.uid")
}

fn schema_manifest(name: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchema",
        "metadata": {"name": name},
        "spec": {
            "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": name},
            "source": {"configMap": {"name": "orders-schema"}},
            "policy": {"apply": "OnApproval"}
        }
    })
}

fn migration_manifest(name: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigration",
        "metadata": {"name": name},
        "spec": {
            "target": {"engine": "PostgreSQL", "urlFrom": {"name": "db", "key": "url"}, "coordinationKey": name},
            "source": {"configMap": {"name": "orders-migrations"}},
            "policy": {"apply": "OnApproval"}
        }
    })
}

/// A schema plan for `schema` with `fingerprint`, as the operator publishes it.
fn schema_plan_manifest(
    name: &str,
    schema: (&str, &str),
    fingerprint: &str,
) -> anyhow::Result<Value> {
    let mut plan = testing::schema_plan_example();
    plan.metadata = Default::default();
    plan.metadata.name = Some(name.to_owned());
    plan.status = None;
    plan.spec.schema_ref.name = schema.0.to_owned();
    plan.spec.schema_ref.uid = schema.1.to_owned();
    plan.spec.fingerprint = fingerprint.to_owned();
    Ok(serde_json::to_value(plan)?)
}

fn migration_plan_manifest(
    name: &str,
    migration: (&str, &str),
    fingerprint: &str,
) -> anyhow::Result<Value> {
    let mut plan = testing::migration_plan_example();
    plan.metadata = Default::default();
    plan.metadata.name = Some(name.to_owned());
    plan.status = None;
    plan.spec.migration_ref.name = migration.0.to_owned();
    plan.spec.migration_ref.uid = migration.1.to_owned();
    plan.spec.fingerprint = fingerprint.to_owned();
    Ok(serde_json::to_value(plan)?)
}

/// A spec with the stamps a client might forge.
fn forged() -> Value {
    json!({
        "approver": {"username": "mallory", "groups": ["system:masters"]},
        "approvedAt": "2020-01-01T00:00:00Z",
        "mutationRequestUID": "forged"
    })
}

fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

fn schema_approval(name: &str, schema: (&str, &str), plan: (&str, &str), fp: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahSchemaApproval",
        "metadata": {"name": name},
        "spec": with(forged(), json!({
            "schemaRef": {"name": schema.0, "uid": schema.1},
            "planRef": {"name": plan.0, "uid": plan.1},
            "planFingerprint": fp
        }))
    })
}

fn migration_approval(name: &str, migration: (&str, &str), plan: (&str, &str), fp: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigrationApproval",
        "metadata": {"name": name},
        "spec": with(forged(), json!({
            "migrationRef": {"name": migration.0, "uid": migration.1},
            "planRef": {"name": plan.0, "uid": plan.1},
            "planFingerprint": fp
        }))
    })
}

fn acknowledgment(name: &str, migration: (&str, &str), operation: &str) -> Value {
    json!({
        "apiVersion": "operator.ptah.run/v1alpha1",
        "kind": "PtahMigrationRunAcknowledgment",
        "metadata": {"name": name},
        "spec": {
            "migrationRef": {"name": migration.0, "uid": migration.1},
            "operationID": operation,
            "acknowledgedBy": {"username": "mallory"},
            "acknowledgedAt": "2020-01-01T00:00:00Z",
            "mutationRequestUID": "forged"
        }
    })
}

/// The stamps in a stored spec are alice's and admission's, not the forged ones.
fn assert_stamped(spec: &Value, who: &str, when: &str) {
    assert_eq!(spec[who]["username"], json!(APPROVER), "{spec}");
    let groups = spec[who]["groups"].as_array().cloned().unwrap_or_default();
    assert!(groups.contains(&json!(APPROVER_GROUP)), "{spec}");
    assert!(!groups.contains(&json!("system:masters")), "{spec}");
    let at = spec[when].as_str().unwrap_or_default();
    assert!(!at.is_empty() && at != "2020-01-01T00:00:00Z", "{spec}");
    let request = spec["mutationRequestUID"].as_str().unwrap_or_default();
    assert!(!request.is_empty() && request != "forged", "{spec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_approval_is_stamped_and_admitted_only_for_the_current_plan() -> anyhow::Result<()>
{
    let scope = Scope::new("schema").await?;
    let schema: PtahSchema = scope.create(schema_manifest("orders")).await?;
    let schema_uid = uid(&schema)?;
    let s = ("orders", schema_uid.as_str());
    let fp1 = testing::digest(15);
    let plan1: PtahSchemaPlan = scope
        .create(schema_plan_manifest("orders-plan-1", s, &fp1)?)
        .await?;
    let plan1_uid = uid(&plan1)?;
    let p1 = ("orders-plan-1", plan1_uid.as_str());
    scope
        .set_status::<PtahSchema>(
            "orders",
            json!({"plan": {"name": p1.0, "uid": p1.1, "fingerprint": fp1}}),
        )
        .await?;
    scope
        .wait_for_webhooks::<PtahSchemaApproval>(schema_approval("probe", s, p1, &fp1))
        .await?;

    let alice: Api<PtahSchemaApproval> = Api::namespaced(scope.approver().await?, scope.ns());

    // The approval of the current plan is admitted, stamped with alice over
    // the forged approver.
    let obj: PtahSchemaApproval =
        serde_json::from_value(schema_approval("approve-1", s, p1, &fp1))?;
    let created = alice.create(&PostParams::default(), &obj).await?;
    let stored = scope
        .namespace
        .api::<PtahSchemaApproval>()
        .get(&created.name_any())
        .await?;
    assert_stamped(
        &serde_json::to_value(&stored)?["spec"],
        "approver",
        "approvedAt",
    );

    // Another plan UID under the current name: refused, naming spec.planRef.
    let m = refused(
        &alice,
        schema_approval("approve-2", s, (p1.0, "another-uid"), &fp1),
    )
    .await?;
    assert!(m.contains("spec.planRef"), "{m}");
    assert!(
        m.contains(&format!("current: orders-plan-1 (UID {plan1_uid})")),
        "{m}"
    );
    // Another fingerprint: refused, naming spec.planFingerprint.
    let m = refused(
        &alice,
        schema_approval("approve-3", s, p1, &testing::digest(16)),
    )
    .await?;
    assert!(m.contains("spec.planFingerprint"), "{m}");
    // Another schema UID: refused, naming spec.schemaRef.uid.
    let m = refused(
        &alice,
        schema_approval("approve-4", ("orders", "gone"), p1, &fp1),
    )
    .await?;
    assert!(m.contains("spec.schemaRef.uid"), "{m}");

    // status.plan moves to a new plan: the old one approves nothing.
    let fp2 = testing::digest(17);
    let plan2: PtahSchemaPlan = scope
        .create(schema_plan_manifest("orders-plan-2", s, &fp2)?)
        .await?;
    let plan2_uid = uid(&plan2)?;
    scope
        .set_status::<PtahSchema>(
            "orders",
            json!({"plan": {"name": "orders-plan-2", "uid": plan2_uid, "fingerprint": fp2}}),
        )
        .await?;
    let m = refused(&alice, schema_approval("approve-5", s, p1, &fp1)).await?;
    assert!(
        m.contains(&format!(
            "spec.planRef: plan orders-plan-1 (UID {plan1_uid}) is not the current plan of PtahSchema orders (current: orders-plan-2 (UID {plan2_uid}))"
        )),
        "{m}"
    );
    let obj: PtahSchemaApproval = serde_json::from_value(schema_approval(
        "approve-6",
        s,
        ("orders-plan-2", &plan2_uid),
        &fp2,
    ))?;
    alice.create(&PostParams::default(), &obj).await?;

    // The stale approval stays editable in its metadata (a label, a
    // finalizer's removal), never in its spec.
    let admin = scope.namespace.api::<PtahSchemaApproval>();
    admin
        .patch(
            "approve-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"reviewed": "true"}}})),
        )
        .await?;
    let restamp = admin
        .patch(
            "approve-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"approver": {"username": "mallory"}}})),
        )
        .await;
    assert!(
        restamp.is_err(),
        "the approver of a stored approval changed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_approval_and_an_acknowledgment_are_stamped_and_bound_to_the_current_state()
-> anyhow::Result<()> {
    let scope = Scope::new("migration").await?;
    let migration: PtahMigration = scope.create(migration_manifest("orders")).await?;
    let migration_uid = uid(&migration)?;
    let m_ref = ("orders", migration_uid.as_str());
    let fp1 = testing::digest(15);
    let plan1: PtahMigrationPlan = scope
        .create(migration_plan_manifest("orders-mplan-1", m_ref, &fp1)?)
        .await?;
    let plan1_uid = uid(&plan1)?;
    let p1 = ("orders-mplan-1", plan1_uid.as_str());
    scope
        .set_status::<PtahMigration>(
            "orders",
            json!({"plan": {"name": p1.0, "uid": p1.1, "fingerprint": fp1}}),
        )
        .await?;
    scope
        .wait_for_webhooks::<PtahMigrationApproval>(migration_approval("probe", m_ref, p1, &fp1))
        .await?;

    let approver = scope.approver().await?;
    let alice: Api<PtahMigrationApproval> = Api::namespaced(approver.clone(), scope.ns());

    let obj: PtahMigrationApproval =
        serde_json::from_value(migration_approval("approve-1", m_ref, p1, &fp1))?;
    alice.create(&PostParams::default(), &obj).await?;
    let stored = scope
        .namespace
        .api::<PtahMigrationApproval>()
        .get("approve-1")
        .await?;
    assert_stamped(
        &serde_json::to_value(&stored)?["spec"],
        "approver",
        "approvedAt",
    );

    let m = refused(
        &alice,
        migration_approval("approve-2", m_ref, (p1.0, "another-uid"), &fp1),
    )
    .await?;
    assert!(m.contains("spec.planRef"), "{m}");
    let m = refused(
        &alice,
        migration_approval("approve-3", m_ref, p1, &testing::digest(16)),
    )
    .await?;
    assert!(m.contains("spec.planFingerprint"), "{m}");

    // A new history reading, a new plan: the old approval does not carry over.
    let fp2 = testing::digest(17);
    let plan2: PtahMigrationPlan = scope
        .create(migration_plan_manifest("orders-mplan-2", m_ref, &fp2)?)
        .await?;
    let plan2_uid = uid(&plan2)?;
    scope
        .set_status::<PtahMigration>(
            "orders",
            json!({"plan": {"name": "orders-mplan-2", "uid": plan2_uid, "fingerprint": fp2}}),
        )
        .await?;
    let m = refused(&alice, migration_approval("approve-4", m_ref, p1, &fp1)).await?;
    assert!(
        m.contains(&format!(
            "spec.planRef: plan orders-mplan-1 (UID {plan1_uid}) is not the current plan of PtahMigration orders (current: orders-mplan-2 (UID {plan2_uid}))"
        )),
        "{m}"
    );

    // A run ended Partial: no plan, an unresolved run to acknowledge.
    let acks: Api<PtahMigrationRunAcknowledgment> = Api::namespaced(approver, scope.ns());
    let operation = testing::digest(30);
    let m = refused(&acks, acknowledgment("ack-0", m_ref, &operation)).await?;
    assert!(
        m.contains("spec.operationID: PtahMigration orders has no unresolved run"),
        "{m}"
    );
    scope
        .set_status::<PtahMigration>(
            "orders",
            json!({
                "plan": null,
                "unresolvedRun": {
                    "operationID": operation,
                    "outcome": "Partial",
                    "planName": "orders-mplan-2",
                    "planUID": plan2_uid,
                    "planFingerprint": fp2,
                    "jobName": "orders-apply-1",
                    "recordedAt": "2026-01-01T00:00:00Z"
                }
            }),
        )
        .await?;
    let m = refused(&acks, acknowledgment("ack-1", m_ref, &testing::digest(31))).await?;
    assert!(
        m.contains(&format!(
            "spec.operationID: run {} is not the unresolved run of PtahMigration orders (unresolved: operation {operation}, plan orders-mplan-2, Job orders-apply-1)",
            testing::digest(31)
        )),
        "{m}"
    );
    let m = refused(
        &acks,
        acknowledgment("ack-2", ("orders", "gone"), &operation),
    )
    .await?;
    assert!(m.contains("spec.migrationRef.uid"), "{m}");
    let obj: PtahMigrationRunAcknowledgment =
        serde_json::from_value(acknowledgment("ack-3", m_ref, &operation))?;
    acks.create(&PostParams::default(), &obj).await?;
    let stored = scope
        .namespace
        .api::<PtahMigrationRunAcknowledgment>()
        .get("ack-3")
        .await?;
    assert_stamped(
        &serde_json::to_value(&stored)?["spec"],
        "acknowledgedBy",
        "acknowledgedAt",
    );
    Ok(())
}
