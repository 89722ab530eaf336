//! The Node object and its heartbeats: the kubelet registers its Node,
//! renews its Lease in `kube-node-lease` every 10 s (what the node-lifecycle
//! controller watches) and refreshes the Node's status every minute.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

/// The lease's duration; renewed every [`LEASE_RENEW`].
const LEASE_SECONDS: i32 = 40;
const LEASE_RENEW: Duration = Duration::from_secs(10);
const STATUS_EVERY: Duration = Duration::from_secs(60);
pub const KUBELET_VERSION: &str = "v1.36.3";

/// What the node reports about itself.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: String,
    pub host_ip: String,
    pub cpu: String,
    pub memory: String,
    pub ephemeral_storage: String,
    pub pods: String,
    /// When this kubelet started: the conditions' last transition.
    pub since: Timestamp,
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".to_string())
}

/// The Node's status: capacity, the Ready condition and its friends.
pub fn node_status(info: &NodeInfo, now: Timestamp) -> NodeStatus {
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", &info.cpu),
        ("memory", &info.memory),
        ("ephemeral-storage", &info.ephemeral_storage),
        ("pods", &info.pods),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Quantity(v.clone())))
    .collect();
    let secs = |t: Timestamp| Time(Timestamp::from_second(t.as_second()).unwrap_or(t));
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(secs(now)),
        last_transition_time: Some(secs(info.since)),
    };
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(vec![
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            cond(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            cond(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: info.host_ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: info.name.clone(),
            },
        ]),
        node_info: Some(NodeSystemInfo {
            architecture: arch().into(),
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
            container_runtime_version: "bwrap://process-kubelet".into(),
            kernel_version: read_trim("/proc/sys/kernel/osrelease"),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: read_trim("/etc/machine-id"),
            operating_system: "linux".into(),
            os_image: os_image(),
            system_uuid: read_trim("/etc/machine-id"),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}

/// Creates the Node (or finds it from an earlier run) and marks it Ready.
pub async fn register(client: &kube::Client, info: &NodeInfo) -> anyhow::Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", info.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if nodes.get_opt(&info.name).await?.is_none() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(info.name.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => info!(node = %info.name, "node registered"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    update_status(client, info).await
}

async fn update_status(client: &kube::Client, info: &NodeInfo) -> anyhow::Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = serde_json::json!({"status": node_status(info, Timestamp::now())});
    Ok(nodes
        .patch_status(&info.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?)
}

async fn renew_lease(client: &kube::Client, node: &Node, info: &NodeInfo) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = MicroTime(Timestamp::now());
    match leases.get_opt(&info.name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(info.name.clone());
            spec.lease_duration_seconds = Some(LEASE_SECONDS);
            spec.renew_time = Some(now);
            leases
                .replace(&info.name, &PostParams::default(), &lease)
                .await?;
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(info.name.clone()),
                    namespace: Some("kube-node-lease".into()),
                    owner_references: node.metadata.uid.as_ref().map(|uid| {
                        vec![OwnerReference {
                            api_version: "v1".into(),
                            kind: "Node".into(),
                            name: info.name.clone(),
                            uid: uid.clone(),
                            ..OwnerReference::default()
                        }]
                    }),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(info.name.clone()),
                    lease_duration_seconds: Some(LEASE_SECONDS),
                    renew_time: Some(now),
                    ..LeaseSpec::default()
                }),
            };
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

/// Renews the lease and the node status until shutdown.
pub async fn heartbeat(
    client: kube::Client,
    mut node: Node,
    info: NodeInfo,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut lease_tick = tokio::time::interval(LEASE_RENEW);
    let mut status_tick = tokio::time::interval(STATUS_EVERY);
    loop {
        tokio::select! {
            _ = lease_tick.tick() => {
                if let Err(e) = renew_lease(&client, &node, &info).await {
                    warn!("renewing the node lease: {e}");
                }
            }
            _ = status_tick.tick() => {
                match update_status(&client, &info).await {
                    Ok(n) => node = n,
                    Err(e) => warn!("updating the node status: {e}"),
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_ready_with_its_capacity() {
        let info = NodeInfo {
            name: "ptah-node".into(),
            host_ip: "127.0.0.1".into(),
            cpu: "2".into(),
            memory: "1024Ki".into(),
            ephemeral_storage: "10Gi".into(),
            pods: "110".into(),
            since: Timestamp::from_second(1_600_000_000).unwrap(),
        };
        let s = node_status(&info, Timestamp::from_second(1_700_000_000).unwrap());
        let cap = s.capacity.unwrap();
        assert_eq!(cap["cpu"].0, "2");
        assert_eq!(cap["pods"].0, "110");
        assert_eq!(s.allocatable.unwrap()["memory"].0, "1024Ki");
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(s.node_info.unwrap().kubelet_version, KUBELET_VERSION);
    }
}
