//! One test's namespace on the shared harness. Tests run in parallel on one
//! control plane; each works in a namespace of its own, named after the test,
//! and deleted at the end — also when the test panics, so a failed run leaves
//! nothing behind for the next.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::harness::Harness;
use crate::testkit::wait::wait;

/// A namespaced kind the test kit reads, waits on and deletes: what
/// `Api::namespaced`, a typed get and a wait need of it.
pub trait Stored:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Stored for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// How a test's namespace is made.
#[derive(Debug, Clone, Default)]
pub struct NamespaceSpec {
    /// Labels of the namespace (Pod Security's `enforce` labels, say).
    pub labels: BTreeMap<String, String>,
    /// Install the Ptah CRDs first, for tests that create Ptah resources.
    pub crds: bool,
    /// Wait, at most this long, for the namespace's default ServiceAccount:
    /// the API server refuses Pods until it exists.
    pub service_account_within: Option<Duration>,
}

impl NamespaceSpec {
    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Installs the Ptah CRDs before the namespace is made.
    pub fn with_crds(mut self) -> Self {
        self.crds = true;
        self
    }

    /// Waits for the default ServiceAccount, at most `timeout`.
    pub fn with_service_account(mut self, timeout: Duration) -> Self {
        self.service_account_within = Some(timeout);
        self
    }

    /// Pod Security `restricted`, enforced and warned at `latest`: the
    /// profile every Job the builder makes must be admitted under.
    pub fn restricted(self) -> Self {
        self.label("pod-security.kubernetes.io/enforce", "restricted")
            .label("pod-security.kubernetes.io/enforce-version", "latest")
            .label("pod-security.kubernetes.io/warn", "restricted")
            .label("pod-security.kubernetes.io/warn-version", "latest")
    }
}

/// A namespace `<prefix>-<test>-<hex>` on the shared harness, deleted when
/// dropped (also while a failed test unwinds).
pub struct TestNamespace {
    harness: &'static Harness,
    client: Client,
    name: String,
}

impl TestNamespace {
    /// A namespace for a manager's resources: the CRDs installed, and the
    /// service account the operation Pods run as (tokens of a minute).
    pub async fn for_operator(
        harness: &'static Harness,
        prefix: &str,
        test: &str,
    ) -> anyhow::Result<TestNamespace> {
        let spec = NamespaceSpec::default()
            .with_crds()
            .with_service_account(std::time::Duration::from_secs(60));
        Self::new(harness, prefix, test, spec).await
    }

    /// Makes the namespace as `spec` says. `prefix` tells which test file
    /// made it when one is left over; `test` which test.
    pub async fn new(
        harness: &'static Harness,
        prefix: &str,
        test: &str,
        spec: NamespaceSpec,
    ) -> anyhow::Result<TestNamespace> {
        let client = harness.client().await?;
        if spec.crds {
            crate::crds::install(&client).await?;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos();
        let name = format!("{prefix}-{test}-{:05x}", nanos & 0xfffff);
        let mut metadata = json!({"name": name});
        if !spec.labels.is_empty() {
            metadata["labels"] = json!(spec.labels);
        }
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": metadata}))?,
            )
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        // From here on the namespace is deleted on every way out.
        let ns = TestNamespace {
            harness,
            client,
            name,
        };
        if let Some(timeout) = spec.service_account_within {
            let sas: Api<ServiceAccount> = ns.api();
            wait(
                "the default ServiceAccount",
                timeout,
                await_condition(sas, "default", |sa: Option<&ServiceAccount>| sa.is_some()),
            )
            .await?;
        }
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client of the harness API server.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The harness the namespace is on.
    pub fn harness(&self) -> &'static Harness {
        self.harness
    }

    /// The API of a namespaced kind in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates an object of a namespaced kind here from its JSON manifest,
    /// as a user would apply it.
    pub async fn create<K>(&self, value: serde_json::Value) -> anyhow::Result<K>
    where
        K: Stored + serde::Serialize,
    {
        let obj: K = serde_json::from_value(value)?;
        Ok(self.api::<K>().create(&PostParams::default(), &obj).await?)
    }

    /// Waits, within `patience`, until the stored object `name` satisfies
    /// `ok`, and answers it.
    pub async fn until<K>(
        &self,
        patience: &crate::testkit::wait::Patience,
        name: &str,
        what: &str,
        ok: impl Fn(&K) -> bool,
    ) -> anyhow::Result<K>
    where
        K: Stored,
    {
        let api = self.api::<K>();
        patience
            .poll(what, || {
                let api = api.clone();
                let ok = &ok;
                async move {
                    let obj = api.get(name).await?;
                    anyhow::Ok(ok(&obj).then_some(obj))
                }
            })
            .await
    }

    /// Deletes every object of a kind here and waits, within `patience`, until
    /// they are gone (a manager still running lets its finalizers go).
    pub async fn delete_all<K>(
        &self,
        patience: &crate::testkit::wait::Patience,
    ) -> anyhow::Result<()>
    where
        K: Stored,
    {
        let api = self.api::<K>();
        let all = kube::api::ListParams::default();
        patience
            .poll("the objects to be deleted", || {
                let (api, all) = (api.clone(), all.clone());
                async move {
                    if api.list(&all).await?.items.is_empty() {
                        return anyhow::Ok(Some(()));
                    }
                    // Asked again until none is left: the API server closed
                    // the connection on a collection of 1,000 schemas
                    // (scale.rs), and one already going is asked harmlessly.
                    match api.delete_collection(&DeleteParams::default(), &all).await {
                        Ok(_) | Err(kube::Error::Service(_)) => Ok(None),
                        Err(e) => Err(e.into()),
                    }
                }
            })
            .await
    }

    /// Sets one key of a ConfigMap's data by a merge patch: the edit a user
    /// makes to a ConfigMap source.
    pub async fn set_config_map_key(
        &self,
        name: &str,
        key: &str,
        value: &str,
    ) -> anyhow::Result<()> {
        self.api::<ConfigMap>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {key: value}})),
            )
            .await?;
        Ok(())
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Already gone is fine.
        let (harness, ns) = (self.harness, self.name.clone());
        crate::testkit::clean_up(move || async move {
            let client = harness.client().await?;
            // A manager stopped before its resources were deleted leaves
            // their finalizers: drop them, so the namespace can go.
            strip_finalizers(&client, &ns).await;
            let namespaces: Api<Namespace> = Api::all(client);
            match namespaces.delete(&ns, &DeleteParams::default()).await {
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                Err(e) => Err(e.into()),
                Ok(_) => Ok(()),
            }
        });
    }
}

/// Removes every finalizer from the namespace's PtahSchemas and
/// PtahMigrations (best effort): the manager holds one for each resource's
/// life.
async fn strip_finalizers(client: &Client, ns: &str) {
    for (kind, plural) in [
        ("PtahSchema", "ptahschemas"),
        ("PtahMigration", "ptahmigrations"),
    ] {
        let gvk = kube::core::GroupVersionKind::gvk("operator.ptah.run", "v1alpha1", kind);
        let resource = kube::core::ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<kube::core::DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &resource);
        let Ok(list) = api.list(&Default::default()).await else {
            continue;
        };
        let patch = kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}}));
        for s in list.items {
            let name = kube::ResourceExt::name_any(&s);
            let _ = api
                .patch(&name, &kube::api::PatchParams::default(), &patch)
                .await;
        }
    }
}
