//! The process kubelet (see `conformance::kubelet`): registers a Node and
//! runs the Pods bound to it as bubblewrap sandboxes.

use std::path::PathBuf;

use clap::Parser;

/// A kubelet that runs Pods as local processes in bubblewrap sandboxes.
#[derive(Parser)]
#[command(name = "process-kubelet", version)]
struct Args {
    /// Kubeconfig with the node's identity (CN=system:node:<name>).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The Node to register and whose Pods to run.
    #[arg(long)]
    node_name: String,
    /// Where pod volumes and container logs live.
    #[arg(long)]
    state_dir: PathBuf,
    /// JSON map of image reference to directory.
    #[arg(long)]
    images: PathBuf,
    /// The /16 Pod IPs come from; the kubelet routes it to lo.
    #[arg(long, default_value_t = conformance::kubelet::network::PodNetwork::DEFAULT)]
    pod_network: conformance::kubelet::network::PodNetwork,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    conformance::init_logging();
    let args = Args::parse();
    conformance::kubelet::run(conformance::kubelet::Config {
        kubeconfig: args.kubeconfig,
        node_name: args.node_name,
        state_dir: args.state_dir,
        images: args.images,
        pod_network: args.pod_network,
    })
    .await
}
