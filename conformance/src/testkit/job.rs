//! What a Job the builder makes asks of its namespace. Tests that run those
//! Jobs must first create every Secret the Pod names, or the kubelet (and
//! the API server's admission) would stop on a missing object rather than on
//! what the test is about.

use std::collections::BTreeSet;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PodSpec;

/// The Pod template's spec of a Job.
pub fn pod_spec(job: &Job) -> anyhow::Result<&PodSpec> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .context("pod spec")
}

/// The Secrets a Pod mounts as volumes or reads into environment variables
/// (not its image pull Secrets).
pub fn secret_names(pod: &PodSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for v in pod.volumes.iter().flatten() {
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            names.insert(s);
        }
    }
    for c in pod.init_containers.iter().flatten().chain(&pod.containers) {
        for e in c.env.iter().flatten() {
            if let Some(s) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                names.insert(s.name.clone());
            }
        }
    }
    names
}

/// The operations of the Jobs in `ns`, one per Job, as their
/// `operator.ptah.run/operation` label names them (`resolve`, `observe`, …).
pub async fn operations(ns: &super::namespace::TestNamespace) -> anyhow::Result<Vec<String>> {
    let jobs = ns
        .api::<Job>()
        .list(&kube::api::ListParams::default())
        .await?;
    Ok(jobs
        .items
        .iter()
        .filter_map(|j| {
            j.metadata
                .labels
                .as_ref()?
                .get("operator.ptah.run/operation")
        })
        .map(|op| op.to_ascii_lowercase())
        .collect())
}

/// How many Jobs in `ns` run `operation` (`resolve`, `apply`, …).
pub async fn count(ns: &super::namespace::TestNamespace, operation: &str) -> anyhow::Result<usize> {
    Ok(operations(ns)
        .await?
        .iter()
        .filter(|o| *o == operation)
        .count())
}

/// Waits, within `patience`, for a running Pod of `ns` whose name starts
/// with `prefix` (`ptah-apply-`, say).
pub async fn running_pod(
    ns: &super::namespace::TestNamespace,
    prefix: &str,
    patience: &super::wait::Patience,
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    use k8s_openapi::api::core::v1::Pod;
    patience
        .poll(&format!("a {prefix}… Pod running"), || async {
            let pods = ns
                .api::<Pod>()
                .list(&kube::api::ListParams::default())
                .await?;
            anyhow::Ok(pods.items.into_iter().find(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(prefix))
                    && p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running")
            }))
        })
        .await
}

/// A token the TokenRequest API binds to `pod` for `audience` (`None`: the
/// API server's own), as the kubelet mints the one it projects.
pub async fn pod_token(
    client: &kube::Client,
    pod: &k8s_openapi::api::core::v1::Pod,
    audience: Option<&str>,
) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    use k8s_openapi::api::core::v1::ServiceAccount;
    let ns = pod.metadata.namespace.as_deref().context("pod namespace")?;
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_string()]),
            expiration_seconds: Some(600),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        }),
        ..TokenRequest::default()
    };
    let api: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), ns);
    let made = api
        .create_token_request(&sa, &Default::default(), &request)
        .await
        .with_context(|| format!("a token for Pod {ns}/{:?}", pod.metadata.name))?;
    made.status
        .and_then(|s| s.token)
        .context("the TokenRequest answered no token")
}

/// Whether `text` holds anything shaped like a JWT: every one starts with
/// the base64 of `{"`.
pub fn holds_a_jwt(text: &str) -> bool {
    text.contains("eyJ")
}
