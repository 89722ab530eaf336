//! The harness's smart HTTP git server: basic auth in front of
//! `git http-backend` (CGI). Started and supervised by `ptah-harness up`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use conformance::gitserve::http::{Config, read_credentials, serve};

/// Serves the bare repositories under --project-root over smart HTTP, to
/// clients that present the credential in --credentials-file.
#[derive(Parser)]
#[command(name = "git-http-server", version)]
struct Args {
    /// Address to listen on (loopback in the harness).
    #[arg(long)]
    listen: SocketAddr,
    /// The directory of bare repositories (GIT_PROJECT_ROOT).
    #[arg(long)]
    project_root: PathBuf,
    /// A file (mode 0600) holding one line `user:password`.
    #[arg(long)]
    credentials_file: PathBuf,
    /// The realm named in the `WWW-Authenticate: Basic` challenge.
    #[arg(long, default_value = "git")]
    realm: String,
    /// The git program.
    #[arg(long, default_value = "git")]
    git: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args = Args::parse();
    if !args.project_root.is_dir() {
        anyhow::bail!(
            "--project-root {} is not a directory",
            args.project_root.display()
        );
    }
    let (user, password) = read_credentials(&args.credentials_file)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(listen = %args.listen, root = %args.project_root.display(), %user, "serving git over smart HTTP");
    serve(
        listener,
        Config {
            project_root: args.project_root,
            user,
            password,
            realm: args.realm,
            git: args.git,
        },
    )
    .await
}
