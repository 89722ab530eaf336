//! Every Job the builder makes is admitted under Pod Security `restricted`:
//! in a namespace that enforces it (`enforce-version: latest`), each example
//! of `operator::execution::examples` — every operation for every source
//! kind, and one with every `spec.execution` setting — is created with real
//! owners and the Secrets, ConfigMaps and ServiceAccount it names, and the
//! real Job controller's Pod for it is admitted (it exists, and no
//! `FailedCreate` Event names the Job). The Pods need not run: the runner's
//! operations come later, and the example images are digests the process
//! kubelet does not know. Two controls show the check can fail: a bare Pod
//! without a security context is refused in the namespace, and one example
//! Job with its init container's hardening removed gets a `FailedCreate`
//! Event naming Pod Security.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, ServiceAccount};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource};
use serde_json::json;

use conformance::harness::{BASE_IMAGE, Harness};
use conformance::testkit::job::{pod_spec, secret_names};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::Patience;
use operator::execution::examples;
use operator::execution::job::build_job;
use operator::testing;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Every wait of these tests: at most [`TIMEOUT`], looking every 250 ms.
const PATIENCE: Patience = Patience::new(TIMEOUT, Duration::from_millis(250));

/// The cluster-scoped objects the test made, deleted at the end, also when
/// the test fails; its namespace goes with the [`TestNamespace`].
struct Scope {
    harness: &'static Harness,
    cluster: Vec<(&'static str, String)>,
    _namespace: TestNamespace,
}

impl Drop for Scope {
    fn drop(&mut self) {
        let (harness, cluster) = (self.harness, self.cluster.clone());
        conformance::testkit::clean_up(move || async move {
            let client = harness.client().await?;
            let dp = DeleteParams::default();
            for (kind, name) in cluster {
                let _ = match kind {
                    "PriorityClass" => Api::<PriorityClass>::all(client.clone())
                        .delete(&name, &dp)
                        .await
                        .map(|_| ()),
                    _ => Api::<RuntimeClass>::all(client.clone())
                        .delete(&name, &dp)
                        .await
                        .map(|_| ()),
                };
            }
            Ok(())
        });
    }
}

async fn create_ignoring_conflict<K>(api: &Api<K>, obj: serde_json::Value) -> anyhow::Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `FailedCreate` Events of a Job: how the Job controller reports a Pod the
/// API server refused (Pod Security names itself in the message).
async fn failed_creates(client: &Client, ns: &str, job: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.name={job}"));
    Ok(events
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
        .map(|e| e.message.unwrap_or_default())
        .collect())
}

#[tokio::test]
async fn every_operation_job_and_its_pod_are_admitted_under_restricted() -> anyhow::Result<()> {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    // Pod Security `restricted`, enforced; Pods are refused until the
    // namespace has its default ServiceAccount.
    let namespace = TestNamespace::new(
        harness,
        "ja",
        "restricted",
        NamespaceSpec::default()
            .with_crds()
            .restricted()
            .with_service_account(TIMEOUT),
    )
    .await?;
    let (client, ns) = (namespace.client().clone(), namespace.name().to_owned());
    let mut scope = Scope {
        harness,
        cluster: Vec::new(),
        _namespace: namespace,
    };
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);

    // The namespace enforces: a Pod without a security context is refused.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let bare: Pod = serde_json::from_value(json!({
        "metadata": {"name": "unhardened"},
        "spec": {"containers": [{"name": "c", "image": BASE_IMAGE, "command": ["true"]}]}
    }))?;
    match pods.create(&PostParams::default(), &bare).await {
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("PodSecurity") => {}
        other => bail!("an unhardened Pod was not refused by Pod Security: {other:?}"),
    }

    // Real owners, so the garbage collector keeps the Jobs.
    let mut schema = testing::schema_example();
    schema.metadata = serde_json::from_value(json!({"name": "orders", "namespace": ns}))?;
    schema.status = None;
    let schema = Api::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &schema)
        .await
        .context("creating the PtahSchema owner")?;
    let mut migration = testing::migration_example();
    migration.metadata =
        serde_json::from_value(json!({"name": "orders-migrations", "namespace": ns}))?;
    migration.status = None;
    let migration = Api::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &migration)
        .await
        .context("creating the PtahMigration owner")?;
    let schema_uid = schema.metadata.uid.context("schema uid")?;
    let migration_uid = migration.metadata.uid.context("migration uid")?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let mut created = Vec::new();
    for (stem, mut input) in examples::goldens(&ns) {
        input.owner.uid = match input.owner.kind {
            operator::execution::job::OwnerKind::PtahSchema => schema_uid.clone(),
            operator::execution::job::OwnerKind::PtahMigration => migration_uid.clone(),
        };
        let job = build_job(&input).with_context(|| format!("{stem}: build"))?;
        let pod = pod_spec(&job)?;

        // Everything the Pod names exists.
        let mut secret_names = secret_names(pod);
        let mut config_map_names = BTreeSet::new();
        for v in pod.volumes.iter().flatten() {
            if let Some(c) = &v.config_map {
                config_map_names.insert(c.name.clone());
            }
        }
        for s in pod.image_pull_secrets.iter().flatten() {
            secret_names.insert(s.name.clone());
        }
        for name in secret_names {
            create_ignoring_conflict(
                &secrets,
                json!({"metadata": {"name": name}, "stringData": {
                    "url": "postgres://user:password@db.invalid/orders",
                    "token": "t", "username": "u", "password": "p", "registry": "registry.example.com",
                    ".dockerconfigjson": "{\"auths\":{}}",
                }}),
            )
            .await?;
        }
        for name in config_map_names {
            create_ignoring_conflict(
                &config_maps,
                json!({"metadata": {"name": name}, "data": {
                    "ca.crt": "-----BEGIN CERTIFICATE-----\n", "policy.yaml": "version: 1\n",
                    "schema.sql": "CREATE TABLE t (id int);\n",
                }}),
            )
            .await?;
        }
        if let Some(sa) = &pod.service_account_name {
            create_ignoring_conflict(&sas, json!({"metadata": {"name": sa}})).await?;
        }
        if let Some(pc) = &pod.priority_class_name {
            create_ignoring_conflict(
                &Api::<PriorityClass>::all(client.clone()),
                json!({"metadata": {"name": pc}, "value": 100}),
            )
            .await?;
            if !scope
                .cluster
                .iter()
                .any(|(k, n)| *k == "PriorityClass" && n == pc)
            {
                scope.cluster.push(("PriorityClass", pc.clone()));
            }
        }
        if let Some(rc) = &pod.runtime_class_name {
            create_ignoring_conflict(
                &Api::<RuntimeClass>::all(client.clone()),
                json!({"metadata": {"name": rc}, "handler": "runc"}),
            )
            .await?;
            if !scope
                .cluster
                .iter()
                .any(|(k, n)| *k == "RuntimeClass" && n == rc)
            {
                scope.cluster.push(("RuntimeClass", rc.clone()));
            }
        }

        let made = jobs
            .create(&PostParams::default(), &job)
            .await
            .with_context(|| format!("{stem}: the API server refused the Job"))?;
        created.push((stem, made));
    }

    // The Job controller makes each Job's Pod, and Pod Security admits it.
    for (stem, job) in &created {
        let name = job.metadata.name.clone().context("job name")?;
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
        let found = PATIENCE
            .poll(&format!("{stem}: a Pod of Job {name}"), || async {
                let failed = failed_creates(&client, &ns, &name).await?;
                if !failed.is_empty() {
                    bail!("{stem}: the Pod of Job {name} was refused: {failed:?}");
                }
                Ok(pods.list(&lp).await?.items.into_iter().next())
            })
            .await?;
        let spec = found.spec.context("pod spec")?;
        assert_eq!(spec.automount_service_account_token, Some(false), "{stem}");
        let failed = failed_creates(&client, &ns, &name).await?;
        assert!(failed.is_empty(), "{stem}: {failed:?}");
        let now = jobs.get(&name).await?;
        let pod_security_condition = now
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| {
                c.message
                    .as_deref()
                    .is_some_and(|m| m.contains("PodSecurity"))
            });
        assert!(
            pod_security_condition.is_none(),
            "{stem}: {pod_security_condition:?}"
        );
    }
    assert_eq!(created.len(), examples::goldens(&ns).len());
    assert!(created.len() >= 23, "{} Jobs admitted", created.len());

    // The check above can fail: the same Job with one container's hardening
    // removed is accepted as a Job, and its Pod is refused (FailedCreate).
    let mut weakened = examples::example(
        operator::execution::job::OwnerKind::PtahSchema,
        operator::api::status::OperationType::Observe,
        examples::Kind::ConfigMap,
        &ns,
    );
    weakened.owner.uid = schema_uid.clone();
    weakened.claim.operation_id = examples::digest(0x99);
    let mut job = build_job(&weakened)?;
    let name = job.metadata.name.clone().context("job name")?;
    if let Some(pod) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        for c in pod.init_containers.iter_mut().flatten() {
            c.security_context = None;
        }
    }
    jobs.create(&PostParams::default(), &job).await?;
    let refused = PATIENCE
        .poll(&format!("a FailedCreate Event of Job {name}"), || async {
            let failed = failed_creates(&client, &ns, &name).await?;
            Ok((!failed.is_empty()).then_some(failed))
        })
        .await?;
    assert!(
        refused.iter().any(|m| m.contains("PodSecurity")),
        "{refused:?}"
    );
    drop(scope);
    Ok(())
}
