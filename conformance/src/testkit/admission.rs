//! The approval webhooks (`operator::admission::webhook_configurations`,
//! which the test passes in as [`Configurations`]) registered on the harness
//! API server for one test namespace only (a label only that namespace
//! carries), pointing at a server the test names: the manager's own, which
//! serves them beside its receiver, or one the test runs in-process. With
//! them in place an approval is stamped by admission as a person's would be,
//! and one of a plan that is not current is refused.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::namespace::TestNamespace;
use super::wait::Patience;
use crate::harness::Harness;

/// The label that scopes the webhooks to the test's namespace.
pub const SCOPE_LABEL: &str = "conformance.ptah.run/admission";

/// Makes the two webhook configurations for a client config.
pub type Configurations =
    fn(WebhookClientConfig) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration);

/// The two webhook configurations, removed when dropped (also when the
/// test fails).
pub struct Webhooks {
    harness: &'static Harness,
    name: String,
}

impl Drop for Webhooks {
    fn drop(&mut self) {
        let (harness, name) = (self.harness, self.name.clone());
        super::clean_up(move || async move {
            let client = harness.client().await?;
            let dp = DeleteParams::default();
            let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
                .delete(&name, &dp)
                .await;
            let _ = Api::<ValidatingWebhookConfiguration>::all(client)
                .delete(&name, &dp)
                .await;
            Ok(())
        });
    }
}

impl Webhooks {
    /// Registers the webhooks for `ns` only, served at `url` under a
    /// certificate of the CA `ca_pem`.
    pub async fn install(
        ns: &TestNamespace,
        configurations: Configurations,
        url: String,
        ca_pem: &str,
    ) -> anyhow::Result<Self> {
        let name = super::unique("ptah-operator-approvals");
        let hooks = Webhooks {
            harness: ns.harness(),
            name: name.clone(),
        };
        register(ns.client(), ns.name(), &name, configurations, url, ca_pem).await?;
        Ok(hooks)
    }

    /// Registers the webhooks the manager serves on `port` for `ns` only,
    /// once its CA is in `tls_dir` (the manager writes it when it starts).
    pub async fn of_manager(
        ns: &TestNamespace,
        configurations: Configurations,
        port: u16,
        tls_dir: &Path,
    ) -> anyhow::Result<Self> {
        let pem = manager_ca(tls_dir).await?;
        let url = format!("https://127.0.0.1:{port}");
        Self::install(ns, configurations, url, &pem).await
    }
}

/// A client of the harness acting as `user` in `groups`, as a person's
/// request reaches admission.
pub async fn client_as(
    harness: &Harness,
    user: &str,
    groups: &[&str],
) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(harness.kubeconfig())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    config.auth_info.impersonate = Some(user.to_owned());
    if !groups.is_empty() {
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    }
    Ok(kube::Client::try_from(config)?)
}

/// Registers the two webhook configurations `name` for the namespace `ns`
/// only (labelling it), served at `url` under a certificate of the CA
/// `ca_pem`; ones of that name already there are replaced.
pub async fn register(
    client: &kube::Client,
    ns: &str,
    name: &str,
    configurations: Configurations,
    url: String,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let label = json!({"metadata": {"labels": {SCOPE_LABEL: name}}});
    Api::<Namespace>::all(client.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .context("labelling the namespace for the webhooks")?;
    let (mut mutating, mut validating) = configurations(WebhookClientConfig {
        url: Some(url),
        ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
        service: None,
    });
    let only_here = LabelSelector {
        match_labels: Some([(SCOPE_LABEL.to_owned(), name.to_owned())].into()),
        ..Default::default()
    };
    mutating.metadata.name = Some(name.to_owned());
    validating.metadata.name = Some(name.to_owned());
    for hook in mutating.webhooks.iter_mut().flatten() {
        hook.namespace_selector = Some(only_here.clone());
    }
    for hook in validating.webhooks.iter_mut().flatten() {
        hook.namespace_selector = Some(only_here.clone());
    }
    let apply = PatchParams::apply("conformance").force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(name, &apply, &Patch::Apply(&mutating))
        .await
        .context("installing the mutating webhook configuration")?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(name, &apply, &Patch::Apply(&validating))
        .await
        .context("installing the validating webhook configuration")?;
    Ok(())
}

/// The manager's CA once it has written it to `tls_dir` (it does when it
/// starts).
pub async fn manager_ca(tls_dir: &Path) -> anyhow::Result<String> {
    let ca = tls_dir.join("ca.crt");
    let patience = Patience::new(Duration::from_secs(60), Duration::from_millis(200));
    patience
        .poll("the manager's CA", || {
            let ca = ca.clone();
            async move { Ok(std::fs::read_to_string(&ca).ok().filter(|p| !p.is_empty())) }
        })
        .await
}
