//! Flux on the harness: source-controller and kustomize-controller, built
//! from their Go modules (`conformance/tools/gitops.env`), run as host
//! processes beside the control plane with the harness admin's kubeconfig,
//! watching every namespace, leader election off. Their CRDs come from the
//! same module zips (`<gitops tools>/../crds/`) and are installed before they
//! start. source-controller serves its artifacts on a loopback port and
//! advertises that address, so kustomize-controller fetches them over
//! 127.0.0.1 as it would over a Service in a cluster.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::harness::{Harness, Ports};
use crate::service::ServiceSpec;
use crate::{crds, tools};

/// The service names, as `status` lists them.
pub const SOURCE_CONTROLLER: &str = "flux-source-controller";
pub const KUSTOMIZE_CONTROLLER: &str = "flux-kustomize-controller";

/// `RUNTIME_NAMESPACE`: the namespace a Flux controller believes it runs
/// in (its leases and its fallback watch namespace; neither is used here).
pub const RUNTIME_NAMESPACE: &str = "flux-system";

/// The built controllers and their CRDs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub source_controller: PathBuf,
    pub kustomize_controller: PathBuf,
    pub crds: PathBuf,
}

impl Binaries {
    /// The controllers in the GitOps tools directory, or `None` when they
    /// are not built (`bash conformance/tools/build.sh flux` builds them).
    pub fn find() -> anyhow::Result<Option<Binaries>> {
        let bin = tools::gitops_bin_dir()?;
        let found = Binaries {
            source_controller: bin.join("source-controller"),
            kustomize_controller: bin.join("kustomize-controller"),
            crds: bin
                .parent()
                .map(|dir| dir.join("crds"))
                .unwrap_or_else(|| bin.join("crds")),
        };
        let built = found.source_controller.is_file()
            && found.kustomize_controller.is_file()
            && found.crds.is_dir();
        Ok(built.then_some(found))
    }
}

/// Where source-controller keeps its artifacts.
pub fn storage_dir(harness: &Harness) -> PathBuf {
    harness.state.join("flux").join("source-storage")
}

/// The address source-controller serves and advertises its artifacts on.
pub fn storage_addr(ports: &Ports) -> String {
    format!("127.0.0.1:{}", ports.flux_source_storage)
}

/// Installs the Flux CRDs (server-side apply, forced) and waits until each
/// is Established. Idempotent.
pub async fn install_crds(client: &kube::Client, dir: &Path) -> anyhow::Result<Vec<String>> {
    crds::install_from(client, dir)
        .await
        .with_context(|| format!("installing the Flux CRDs from {}", dir.display()))
}

/// The two controllers' services. Each is ready once it listens: the
/// source-controller on its artifact server, the kustomize-controller on
/// its health endpoint.
pub fn services(harness: &Harness, ports: &Ports, bin: &Binaries) -> Vec<ServiceSpec> {
    let common = |metrics: u16, health: u16| {
        vec![
            "--watch-all-namespaces=true".to_string(),
            "--enable-leader-election=false".to_string(),
            format!("--metrics-addr=127.0.0.1:{metrics}"),
            format!("--health-addr=127.0.0.1:{health}"),
            // No notification-controller: events go to the API server only.
            "--events-addr=".to_string(),
            "--log-level=info".to_string(),
        ]
    };
    let kubeconfig = harness.kubeconfig().display().to_string();
    let mut source_args = common(ports.flux_source_metrics, ports.flux_source_health);
    source_args.extend([
        format!("--storage-path={}", storage_dir(harness).display()),
        format!("--storage-addr={}", storage_addr(ports)),
        format!("--storage-adv-addr={}", storage_addr(ports)),
    ]);
    let mut kustomize_args = common(ports.flux_kustomize_metrics, ports.flux_kustomize_health);
    kustomize_args.extend([
        // A Kustomization whose source has no artifact yet looks again soon.
        "--requeue-dependency=5s".to_string(),
        "--no-remote-bases=true".to_string(),
    ]);
    let source = ServiceSpec::new(SOURCE_CONTROLLER, &bin.source_controller)
        .args(source_args)
        .env("KUBECONFIG", &kubeconfig)
        .env("RUNTIME_NAMESPACE", RUNTIME_NAMESPACE)
        .cwd(harness.state.join("flux"))
        .port(ports.flux_source_storage);
    let kustomize = ServiceSpec::new(KUSTOMIZE_CONTROLLER, &bin.kustomize_controller)
        .args(kustomize_args)
        .env("KUBECONFIG", &kubeconfig)
        .env("RUNTIME_NAMESPACE", RUNTIME_NAMESPACE)
        .cwd(harness.state.join("flux"))
        .port(ports.flux_kustomize_health);
    vec![source, kustomize]
}

/// Installs the CRDs and starts both controllers (those not running yet);
/// returns their services for `up` to wait on. Without built controllers
/// it says so and starts nothing: only the Flux tests need them.
pub async fn start(harness: &Harness, ports: &Ports) -> anyhow::Result<Vec<ServiceSpec>> {
    let Some(bin) = Binaries::find()? else {
        eprintln!(
            "[harness] Flux is not built in {}; skipping it (`bash conformance/tools/build.sh flux` builds it)",
            tools::gitops_bin_dir()?.display()
        );
        return Ok(Vec::new());
    };
    std::fs::create_dir_all(storage_dir(harness))?;
    install_crds(&harness.client().await?, &bin.crds).await?;
    let specs = services(harness, ports, &bin);
    for spec in &specs {
        crate::service::start(&harness.state, spec)?;
    }
    Ok(specs)
}

/// Fails, naming the command that fixes it, unless both controllers of
/// `harness` run: for the tests that need Flux.
pub fn require(harness: &Harness) -> anyhow::Result<()> {
    for name in [SOURCE_CONTROLLER, KUSTOMIZE_CONTROLLER] {
        if crate::service::running(&harness.state, name).is_none() {
            anyhow::bail!(
                "{name} is not running on the harness in {}; build Flux with \
                 `bash conformance/tools/build.sh flux` and run `ptah-harness up`",
                harness.state.display()
            );
        }
    }
    Ok(())
}
