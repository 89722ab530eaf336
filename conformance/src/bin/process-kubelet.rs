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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Plain text in the harness's log file, colours on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    conformance::kubelet::run(conformance::kubelet::Config {
        kubeconfig: args.kubeconfig,
        node_name: args.node_name,
        state_dir: args.state_dir,
        images: args.images,
    })
    .await
}
