//! `ptah-console`: the web console. It holds no credentials of its own:
//! viewers sign in with their own bearer token, and every call to the API
//! server is theirs (see `gitops::console`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use gitops::console::{Settings, serve};

/// The Ptah web console: plans, approvals and change paths, as the viewer.
#[derive(Parser, Debug)]
#[command(name = "ptah-console", version)]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// The API server (default: the kubeconfig's, or in-cluster); only its
    /// address and CA are used, never credentials.
    #[arg(long, env = "PTAH_CONSOLE_API_SERVER")]
    api_server: Option<String>,
    /// The API server's CA bundle (PEM).
    #[arg(long, env = "PTAH_CONSOLE_API_CA", requires = "api_server")]
    api_ca: Option<PathBuf>,
    /// The tracing backend's query API (Jaeger), to draw change paths.
    #[arg(long, env = "PTAH_TRACES_URL")]
    traces_url: Option<String>,
    /// Send the session cookie without `Secure`: only for a console reached
    /// over plain HTTP on this machine.
    #[arg(long)]
    insecure_cookie: bool,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let a = Args::parse();
    let settings = Settings {
        listen: a.listen,
        api_server: a.api_server,
        api_ca: a.api_ca,
        traces_url: a.traces_url,
        secure_cookie: !a.insecure_cookie,
    };
    if let Err(e) = serve(settings).await {
        eprintln!("ptah-console: {e:#}");
        std::process::exit(1);
    }
}
