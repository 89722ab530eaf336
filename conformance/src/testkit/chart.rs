//! The Helm chart as the tests use it: rendered with the pinned helm
//! (`helm template`, `helm lint`), its documents as JSON values, and the
//! generated values (keys, certificates) masked so a render compares with a
//! golden file.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::tools;

/// `charts/ptah-operator`.
pub fn dir() -> PathBuf {
    tools::workspace_root().join("charts/ptah-operator")
}

/// The file of every knob set: `charts/ptah-operator/ci/all-knobs-values.yaml`.
pub fn all_knobs() -> PathBuf {
    dir().join("ci/all-knobs-values.yaml")
}

/// The pinned helm.
pub fn helm() -> anyhow::Result<Command> {
    let mut cmd = Command::new(tools::tool("helm")?);
    // Helm's own state stays out of the user's home.
    let home = std::env::temp_dir().join("ptah-conformance-helm");
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    Ok(cmd)
}

/// What a helm run printed, or its error output as the error.
pub fn run(mut cmd: Command) -> anyhow::Result<String> {
    let out = cmd.output().context("running helm")?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `helm template ptah-operator charts/ptah-operator -n ptah-system` with
/// these extra arguments (`-f FILE`, `--set k=v`).
pub fn template(extra: &[&str]) -> anyhow::Result<String> {
    template_as("ptah-operator", "ptah-system", extra)
}

/// `helm template RELEASE charts/ptah-operator -n NAMESPACE` with `extra`.
pub fn template_as(release: &str, namespace: &str, extra: &[&str]) -> anyhow::Result<String> {
    let mut cmd = helm()?;
    cmd.args(["template", release])
        .arg(dir())
        .args(["--namespace", namespace])
        .args(extra);
    run(cmd)
}

/// The API of `doc`'s kind where it lives (its namespace, or cluster-wide);
/// `None` when the API server serves no such kind.
fn api_of(
    client: &kube::Client,
    discovery: &kube::discovery::Discovery,
    doc: &Value,
) -> Option<kube::Api<kube::api::DynamicObject>> {
    use kube::discovery::Scope;
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = doc["kind"].as_str().unwrap_or_default();
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = discovery.resolve_gvk(&gvk)?;
    Some(match (caps.scope, doc["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => kube::Api::namespaced_with(client.clone(), ns, &resource),
        _ => kube::Api::all_with(client.clone(), &resource),
    })
}

/// Applies `docs` (server-side, as `ptah-conformance`): each in its own
/// namespace, or cluster-wide.
pub async fn apply(client: &kube::Client, docs: &[Value]) -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await?;
    let pp = PatchParams::apply("ptah-conformance").force();
    for doc in docs {
        let (kind, name) = (
            &doc["kind"],
            doc["metadata"]["name"].as_str().unwrap_or_default(),
        );
        let api = api_of(client, &discovery, doc)
            .with_context(|| format!("the API server serves no {kind} of {}", doc["apiVersion"]))?;
        api.patch(name, &pp, &Patch::Apply(doc))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
    }
    Ok(())
}

/// Deletes `docs` where they are, ignoring those already gone.
pub async fn delete(client: &kube::Client, docs: &[Value]) -> anyhow::Result<()> {
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await?;
    for doc in docs {
        if let Some(api) = api_of(client, &discovery, doc) {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let _ = api.delete(name, &Default::default()).await;
        }
    }
    Ok(())
}

/// A token of an hour for the ServiceAccount `sa` of `namespace`, from the
/// TokenRequest API.
pub async fn service_account_token(
    harness: &crate::harness::Harness,
    namespace: &str,
    sa: &str,
) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let client = harness.client().await?;
    let api: kube::Api<ServiceAccount> = kube::Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    api.create_token_request(sa, &Default::default(), &request)
        .await
        .with_context(|| format!("a token of ServiceAccount {namespace}/{sa}"))?
        .status
        .and_then(|st| st.token)
        .context("the TokenRequest's status.token")
}

/// A kubeconfig at `path` for the ServiceAccount `sa` of `namespace`: the
/// harness's cluster and a token of an hour from the TokenRequest API.
pub async fn service_account_kubeconfig(
    harness: &crate::harness::Harness,
    namespace: &str,
    sa: &str,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let token = service_account_token(harness, namespace, sa).await?;
    let mut kc = kube::config::Kubeconfig::read_from(harness.kubeconfig())?;
    for auth in &mut kc.auth_infos {
        auth.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        });
    }
    let text = serde_json::to_string(&kc)?;
    // 0600: it holds a token.
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?
        .write_all(text.as_bytes())?;
    Ok(())
}

/// The documents of a render, without empty ones.
pub fn documents(rendered: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(rendered).context("the render's YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The one document of `kind` named `name`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> anyhow::Result<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .with_context(|| format!("the render has no {kind} {name}"))
}

/// A render with what is generated anew each time (the token key, the
/// certificates and the CA bundle) replaced by `<generated>`, line by line.
pub fn masked(rendered: &str) -> String {
    const GENERATED: [&str; 5] = ["token.key:", "tls.crt:", "tls.key:", "ca.crt:", "caBundle:"];
    rendered
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            match GENERATED.iter().find(|k| trimmed.starts_with(*k)) {
                Some(k) => format!("{}{k} <generated>", &line[..line.len() - trimmed.len()]),
                None => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The chart's documents of `kinds`, rendered as release `ptah-operator-<ns>`
/// into `ns`, and removed (cluster-scoped ones too) when dropped.
pub struct Installed {
    harness: &'static crate::harness::Harness,
    docs: Vec<Value>,
    release: String,
}

impl Installed {
    pub async fn apply(
        ns: &crate::testkit::namespace::TestNamespace,
        kinds: &[&str],
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        // The release name holds the chart's, so its objects keep it as is.
        let release = format!(
            "ptah-operator-{}",
            ns.name().rsplit('-').next().unwrap_or("x")
        );
        let rendered = template_as(&release, ns.name(), extra)?;
        let docs: Vec<Value> = documents(&rendered)?
            .into_iter()
            .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
            .collect();
        let installed = Installed {
            harness: ns.harness(),
            docs,
            release,
        };
        apply(ns.client(), &installed.docs).await?;
        Ok(installed)
    }

    pub fn service_account(&self) -> String {
        self.release.clone()
    }

    pub async fn remove(&self, kinds: &[&str]) -> anyhow::Result<()> {
        let docs: Vec<Value> = self
            .docs
            .iter()
            .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
            .cloned()
            .collect();
        delete(&self.harness.client().await?, &docs).await
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let (harness, docs) = (self.harness, self.docs.clone());
        crate::testkit::clean_up(
            move || async move { delete(&harness.client().await?, &docs).await },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_values_are_masked_and_the_rest_kept() {
        let text = "data:\n  token.key: abc\n  tls.crt: LS0t\nclientConfig:\n    caBundle: LS0t\nname: x\n";
        assert_eq!(
            masked(text),
            "data:\n  token.key: <generated>\n  tls.crt: <generated>\nclientConfig:\n    caBundle: <generated>\nname: x\n"
        );
    }
}
