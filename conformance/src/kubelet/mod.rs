//! The process kubelet: the one simulated part of the harness.
//!
//! It registers a Node, keeps its Lease and status fresh, watches the Pods
//! bound to it and runs each container as local processes in a bubblewrap
//! sandbox (see `harness.md`, "The process kubelet"). The pure core —
//! [`lifecycle`] (what to do next), [`status`] (the Pod status a kubelet
//! writes), [`envvars`], [`volumes`], [`downward`], [`sandbox`] (the
//! bwrap command line), [`network`] (Pod IPs) and [`hosts`] (Service names
//! in each Pod's `/etc/hosts`) — is unit-tested; [`worker`], [`node`] and
//! [`process`] do the I/O.

pub mod downward;
pub mod envvars;
pub mod hosts;
pub mod images;
pub mod lifecycle;
pub mod network;
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
use self::hosts::ServiceAddrs;
use self::network::{PodIps, PodNetwork};
use self::quantity::Nanos;
use self::worker::{Ctx, PodFeed};

/// The node's address, and the Pod IP of `hostNetwork` Pods. Other Pods get
/// their own (see [`network`]), though every sandbox shares the host's
/// network namespace.
pub const HOST_IP: &str = "127.0.0.1";

/// How the kubelet is started.
#[derive(Debug, Clone)]
pub struct Config {
    pub kubeconfig: PathBuf,
    pub node_name: String,
    pub state_dir: PathBuf,
    /// The image map (see [`images::ImageMap`]).
    pub images: PathBuf,
    /// Where Pod IPs come from (see [`network`]).
    pub pod_network: PodNetwork,
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

    let pod_network = match network::make_local(&config.pod_network) {
        Ok(()) => config.pod_network,
        Err(e) => {
            warn!(
                "{e:#}: pods get loopback addresses of {} instead, which EndpointSlices refuse \
                 (Services will have no endpoints)",
                PodNetwork::LOOPBACK
            );
            PodNetwork::LOOPBACK
        }
    };
    info!(%pod_network, "pod network");

    let memory = mem_total_bytes()?;
    let disk = disk_bytes(&state_dir);
    let facts = NodeFacts {
        node_name: config.node_name.clone(),
        host_ip: HOST_IP.into(),
        // Each pod worker puts its Pod's in its own copy.
        pod_ip: HOST_IP.into(),
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

    let (services_tx, services_rx) = watch::channel(Arc::new(ServiceAddrs::default()));
    let services = tokio::spawn(hosts::follow_endpoint_slices(client.clone(), services_tx));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        state_dir: state_dir.clone(),
        images: images::ImageMap {
            path: config.images.clone(),
        },
        facts,
        service_env,
        memory_root: memory_root.clone(),
        services: services_rx,
    });

    let pods: Api<Pod> = Api::all(client);
    let wc = watcher::Config::default().fields(&format!("spec.nodeName={}", config.node_name));
    let stream = watcher::watcher(pods, wc).default_backoff();
    futures::pin_mut!(stream);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut workers: Workers = HashMap::new();
    let mut ips = PodIps::new(pod_network);
    // The pods of a (re)list, dispatched together once it is complete.
    let mut listing: Option<Vec<Pod>> = None;

    loop {
        tokio::select! {
            ev = stream.next() => {
                let Some(ev) = ev else { break };
                match ev {
                    Ok(Event::Init) => listing = Some(Vec::new()),
                    Ok(Event::InitApply(pod)) => listing.get_or_insert_with(Vec::new).push(pod),
                    Ok(Event::Apply(pod)) => dispatch(&ctx, &mut workers, &mut ips, &shutdown_rx, pod, false),
                    Ok(Event::Delete(pod)) => dispatch(&ctx, &mut workers, &mut ips, &shutdown_rx, pod, true),
                    Ok(Event::InitDone) => {
                        let mut pods = listing.take().unwrap_or_default();
                        // Pods that already report one of our addresses first,
                        // so a restarted kubelet gives each back its own before
                        // a new pod could take it.
                        pods.sort_by_key(|p| network::reported(p, &pod_network).is_none());
                        let seen: HashSet<String> =
                            pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
                        for pod in pods {
                            dispatch(&ctx, &mut workers, &mut ips, &shutdown_rx, pod, false);
                        }
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
                workers.retain(|uid, (_, handle)| {
                    let done = handle.is_finished();
                    // The pod is gone from the API: its address is free.
                    if done {
                        ips.release(uid);
                    }
                    !done
                });
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
    services.abort();
    // Empty once every pod's memory volumes are gone.
    let _ = std::fs::remove_dir(&memory_root);
    info!("stopped");
    Ok(())
}

type Workers = HashMap<String, (watch::Sender<PodFeed>, tokio::task::JoinHandle<()>)>;

fn dispatch(
    ctx: &Arc<Ctx>,
    workers: &mut Workers,
    ips: &mut PodIps,
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
    let pod_ip = pod_ip(ips, &feed.pod, &uid);
    let (tx, rx) = watch::channel(feed);
    let handle = tokio::spawn(worker::run(ctx.clone(), rx, shutdown.clone(), pod_ip));
    workers.insert(uid, (tx, handle));
}

/// The address of a pod this kubelet starts a worker for: the node's for
/// `hostNetwork`, else one of the pod network, held until the pod is gone.
fn pod_ip(ips: &mut PodIps, pod: &Pod, uid: &str) -> String {
    if network::host_network(pod) {
        return HOST_IP.to_string();
    }
    let reported = network::reported(pod, &ips.network());
    match ips.assign(uid, reported) {
        Some(ip) => {
            if let Some(old) = reported.filter(|old| *old != ip) {
                warn!(%uid, "pod reported {old}, held by another pod; it gets {ip}");
            }
            ip.to_string()
        }
        None => {
            warn!(%uid, "no free pod IP in {}; the pod shares the node's", ips.network());
            HOST_IP.to_string()
        }
    }
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
                let _ = std::fs::remove_dir_all(e.path().join("network"));
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
