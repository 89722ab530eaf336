//! The process kubelet: the one simulated part of the harness.
//!
//! It registers a Node, keeps its Lease and status fresh, watches the Pods
//! bound to it and runs each container as local processes in a bubblewrap
//! sandbox (see `harness.md`, "The process kubelet"). The pure core —
//! [`lifecycle`] (what to do next), [`status`] (the Pod status a kubelet
//! writes), [`envvars`], [`volumes`], [`downward`] and [`sandbox`] (the
//! bwrap command line) — is unit-tested; [`worker`], [`node`] and
//! [`process`] do the I/O.

pub mod downward;
pub mod envvars;
pub mod images;
pub mod lifecycle;
pub mod node;
pub mod process;
pub mod quantity;
pub mod sandbox;
pub mod status;
pub mod volumes;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{info, warn};

use self::downward::NodeFacts;
use self::quantity::Nanos;
use self::worker::{Ctx, PodFeed};

/// The node's address, which is also every pod's: sandboxes share the
/// host's network.
pub const HOST_IP: &str = "127.0.0.1";

/// How the kubelet is started.
#[derive(Debug, Clone)]
pub struct Config {
    pub kubeconfig: PathBuf,
    pub node_name: String,
    pub state_dir: PathBuf,
    /// The image map (see [`images::ImageMap`]).
    pub images: PathBuf,
}

/// Where a container's stdout and stderr go:
/// `<state-dir>/pods/<namespace>_<pod-name>_<pod-uid>/<container>.log`.
/// The file outlives the pod, so a test can read it after deletion.
pub fn log_path(state_dir: &Path, pod: &Pod, container: &str) -> PathBuf {
    worker::pod_dir(state_dir, pod).join(format!("{container}.log"))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

fn mem_total_bytes() -> anyhow::Result<i128> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    let kib: i128 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no MemTotal in /proc/meminfo")?;
    Ok(kib * 1024)
}

fn disk_bytes(dir: &Path) -> i128 {
    nix::sys::statvfs::statvfs(dir)
        .map(|s| s.blocks() as i128 * s.fragment_size() as i128)
        .unwrap_or(100 << 30)
}

/// The API server's address as pods see it: `KUBERNETES_SERVICE_HOST` and
/// friends point at the real (loopback) API server, since there is no
/// kube-proxy for the `kubernetes` Service's cluster IP.
pub fn service_env(cluster_url: &http::Uri) -> Vec<(String, String)> {
    let host = cluster_url.host().unwrap_or(HOST_IP).to_string();
    let port = cluster_url.port_u16().unwrap_or(443).to_string();
    let p = &port;
    vec![
        ("KUBERNETES_SERVICE_HOST".into(), host.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), port.clone()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.clone()),
        ("KUBERNETES_PORT".into(), format!("tcp://{host}:{p}")),
        (
            format!("KUBERNETES_PORT_{p}_TCP"),
            format!("tcp://{host}:{p}"),
        ),
        (format!("KUBERNETES_PORT_{p}_TCP_PROTO"), "tcp".into()),
        (format!("KUBERNETES_PORT_{p}_TCP_PORT"), port.clone()),
        (format!("KUBERNETES_PORT_{p}_TCP_ADDR"), host.clone()),
    ]
}

/// Runs the kubelet until SIGTERM or SIGINT, then kills every sandbox.
pub async fn run(config: Config) -> anyhow::Result<()> {
    if !on_path("bwrap") {
        bail!("bwrap (bubblewrap) is not on PATH; the process kubelet needs it");
    }
    if !Path::new(sandbox::SETPRIV).is_file() {
        bail!(
            "{} (util-linux) is missing; the process kubelet needs it",
            sandbox::SETPRIV
        );
    }
    std::fs::create_dir_all(config.state_dir.join("pods"))
        .with_context(|| format!("creating {}", config.state_dir.display()))?;
    let state_dir = std::fs::canonicalize(&config.state_dir)?;

    crate::install_crypto_provider();
    let kc = kube::config::Kubeconfig::read_from(&config.kubeconfig)
        .with_context(|| format!("reading {}", config.kubeconfig.display()))?;
    let kconfig =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    let service_env = service_env(&kconfig.cluster_url);
    let client = kube::Client::try_from(kconfig)?;

    let memory = mem_total_bytes()?;
    let disk = disk_bytes(&state_dir);
    let facts = NodeFacts {
        node_name: config.node_name.clone(),
        host_ip: HOST_IP.into(),
        cpu: Nanos::units(2),
        memory: Nanos::units(memory),
        ephemeral_storage: Nanos::units(disk),
    };
    let info = node::NodeInfo {
        name: config.node_name.clone(),
        host_ip: HOST_IP.into(),
        cpu: "2".into(),
        memory: format!("{}Ki", memory / 1024),
        ephemeral_storage: format!("{}Ki", disk / 1024),
        pods: "110".into(),
        since: Timestamp::now(),
    };
    // Memory-backed emptyDirs live on the host's tmpfs, one tree per state dir.
    let memory_root = {
        let tag = hex::encode(
            &<sha2::Sha256 as sha2::Digest>::digest(state_dir.as_os_str().as_encoded_bytes())[..6],
        );
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            shm.join(format!("ptah-kubelet-{tag}"))
        } else {
            warn!("/dev/shm is missing: memory emptyDirs are kept on disk");
            state_dir.join("memory")
        }
    };
    std::fs::create_dir_all(&memory_root)?;

    let node = node::register(&client, &info).await?;
    info!(node = %config.node_name, "node registered and Ready");
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let heartbeat = tokio::spawn(node::heartbeat(
        client.clone(),
        node,
        info,
        shutdown_rx.clone(),
    ));

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        state_dir: state_dir.clone(),
        images: images::ImageMap {
            path: config.images.clone(),
        },
        facts,
        service_env,
        memory_root: memory_root.clone(),
    });

    let pods: Api<Pod> = Api::all(client);
    let wc = watcher::Config::default().fields(&format!("spec.nodeName={}", config.node_name));
    let stream = watcher::watcher(pods, wc).default_backoff();
    futures::pin_mut!(stream);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut workers: HashMap<String, (watch::Sender<PodFeed>, tokio::task::JoinHandle<()>)> =
        HashMap::new();
    let mut listing: Option<HashSet<String>> = None;

    loop {
        tokio::select! {
            ev = stream.next() => {
                let Some(ev) = ev else { break };
                match ev {
                    Ok(Event::Init) => listing = Some(HashSet::new()),
                    Ok(Event::InitApply(pod)) => {
                        if let (Some(seen), Some(uid)) = (listing.as_mut(), pod.metadata.uid.clone()) {
                            seen.insert(uid);
                        }
                        dispatch(&ctx, &mut workers, &shutdown_rx, pod, false);
                    }
                    Ok(Event::Apply(pod)) => dispatch(&ctx, &mut workers, &shutdown_rx, pod, false),
                    Ok(Event::Delete(pod)) => dispatch(&ctx, &mut workers, &shutdown_rx, pod, true),
                    Ok(Event::InitDone) => {
                        let seen = listing.take().unwrap_or_default();
                        // Pods deleted while the watch was down.
                        for (uid, (tx, _)) in &workers {
                            if !seen.contains(uid) {
                                tx.send_modify(|f| f.gone = true);
                            }
                        }
                        remove_orphans(&state_dir, &memory_root, &seen);
                    }
                    Err(e) => warn!("watching pods: {e}"),
                }
                workers.retain(|_, (_, handle)| !handle.is_finished());
            }
            _ = sigterm.recv() => { info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { info!("SIGINT: stopping"); break; }
        }
    }

    let _ = shutdown_tx.send(true);
    let handles: Vec<_> = workers.into_values().map(|(_, h)| h).collect();
    let all = futures::future::join_all(handles);
    if tokio::time::timeout(Duration::from_secs(10), all)
        .await
        .is_err()
    {
        warn!("some pod workers did not stop within 10 s");
    }
    heartbeat.abort();
    // Empty once every pod's memory volumes are gone.
    let _ = std::fs::remove_dir(&memory_root);
    info!("stopped");
    Ok(())
}

fn dispatch(
    ctx: &Arc<Ctx>,
    workers: &mut HashMap<String, (watch::Sender<PodFeed>, tokio::task::JoinHandle<()>)>,
    shutdown: &watch::Receiver<bool>,
    pod: Pod,
    gone: bool,
) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    let feed = PodFeed {
        pod: Arc::new(pod),
        gone,
    };
    if let Some((tx, handle)) = workers.get(&uid)
        && !handle.is_finished()
    {
        let _ = tx.send(feed);
        return;
    }
    if gone {
        // Deleted before (or after) this kubelet ran anything of it.
        return;
    }
    let (tx, rx) = watch::channel(feed);
    let handle = tokio::spawn(worker::run(ctx.clone(), rx, shutdown.clone()));
    workers.insert(uid, (tx, handle));
}

/// Volumes of pods that no longer exist (deleted while the kubelet was
/// down); their logs stay.
fn remove_orphans(state_dir: &Path, memory_root: &Path, live: &HashSet<String>) {
    if let Ok(entries) = std::fs::read_dir(state_dir.join("pods")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let uid = name.rsplit('_').next().unwrap_or_default();
            if !live.contains(uid) {
                let _ = std::fs::remove_dir_all(e.path().join("volumes"));
                let _ = std::fs::remove_dir_all(e.path().join("containers"));
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(memory_root) {
        for e in entries.flatten() {
            if !live.contains::<str>(&e.file_name().to_string_lossy()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_path_is_per_pod_and_container() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "job-x", "namespace": "t1", "uid": "abc"}
        }))
        .unwrap();
        assert_eq!(
            log_path(Path::new("/state/kubelet"), &pod, "main"),
            PathBuf::from("/state/kubelet/pods/t1_job-x_abc/main.log")
        );
    }

    #[test]
    fn pods_reach_the_real_api_server() {
        let env = service_env(&"https://127.0.0.1:6443".parse().unwrap());
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("127.0.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("6443"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://127.0.0.1:6443"));
    }
}
