//! The harness's second OCI registry, the one that serves the OCI 1.1
//! referrers API (`GET /v2/<name>/referrers/<digest>`, with
//! `?artifactType=` filtering) natively. The first, distribution v3, has no
//! such route, so clients reach its signatures through the referrers tag
//! schema instead. Started and supervised by `ptah-harness up`.
//!
//! It is `ferro-oci-server`'s router over a filesystem blob store under
//! `--root`, with the registry's metadata (manifests, tags, the referrers
//! index) kept in `<root>/metadata.json`, so a restart loses nothing.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// Serves an OCI 1.1 registry (plain HTTP) over blobs and metadata kept
/// under --root.
#[derive(Parser)]
#[command(name = "oci-registry", version)]
struct Args {
    /// Address to listen on (loopback in the harness).
    #[arg(long)]
    listen: SocketAddr,
    /// The storage directory: blobs under `sha256/`, manifests, tags and
    /// the referrers index in `metadata.json`. Made when missing.
    #[arg(long)]
    root: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    conformance::init_logging();
    let args = Args::parse();
    let config = ferro_oci_server::Config {
        listen: args.listen.to_string(),
        storage_dir: Some(args.root.clone()),
    };
    // Returns on SIGTERM (what `ptah-harness down` sends) or SIGINT, after
    // in-flight requests end.
    ferro_oci_server::serve(&config).await.map_err(|e| {
        anyhow::anyhow!(
            "serving on {} over {}: {e}",
            args.listen,
            args.root.display()
        )
    })
}
