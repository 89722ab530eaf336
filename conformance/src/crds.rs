//! The operator's CRDs on the harness API server: installed from the files
//! `crdgen` checked in under `charts/ptah-operator/crds/`, exactly as a user
//! or the Helm chart installs them, by server-side apply.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use crate::tools;

/// The field manager of everything the conformance suite applies.
pub const FIELD_MANAGER: &str = "ptah-conformance";

/// How long a CRD may take to become Established.
pub const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// The directory the CRDs are installed from.
pub fn crd_dir() -> PathBuf {
    tools::workspace_root().join("charts/ptah-operator/crds")
}

/// The CRD files of `dir`, sorted by name.
pub fn crd_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        bail!(
            "no CRD files in {}; run `cargo run -p ptah-operator --bin crdgen`",
            dir.display()
        );
    }
    Ok(files)
}

/// The CRDs held by the files of `dir`.
pub fn read_crds(dir: &Path) -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let mut crds = Vec::new();
    for path in crd_files(dir)? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let docs: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("parsing {}", path.display()))?;
        crds.extend(docs);
    }
    Ok(crds)
}

/// Installs (or updates) every CRD of `charts/ptah-operator/crds/` by
/// server-side apply (field manager [`FIELD_MANAGER`], forced) and waits until
/// each is Established. Idempotent, and safe to run from several tests at once.
/// Returns the names of the CRDs.
pub async fn install(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    install_from(client, &crd_dir()).await
}

/// [`install`] from another directory.
pub async fn install_from(client: &kube::Client, dir: &Path) -> anyhow::Result<Vec<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for mut crd in read_crds(dir)? {
        let name = crd
            .metadata
            .name
            .clone()
            .context("a CRD file holds a CRD without a name")?;
        // Server-side apply wants neither a status nor a resourceVersion.
        crd.status = None;
        crd.metadata.resource_version = None;
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        names.push(name);
    }
    for name in &names {
        tokio::time::timeout(
            ESTABLISHED_TIMEOUT,
            await_condition(api.clone(), name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("CRD {name} not Established within {ESTABLISHED_TIMEOUT:?}"))?
        .with_context(|| format!("watching CRD {name}"))?;
    }
    Ok(names)
}
