//! The conformance harness: a local Kubernetes control plane made of the real
//! upstream programs (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler), the real databases, git servers and OCI registry, and one
//! simulated part, the process kubelet. Every stage of the operator — Source,
//! Plan, Decision, Execution, Verification, History — is tested end to end on
//! it; nothing in the product knows it runs here.

pub mod certs;
pub mod crds;
pub mod demo;
pub mod env;
pub mod examples;
pub mod flux;
pub mod gitserve;
pub mod harness;
pub mod jaeger;
pub mod kubelet;
pub mod service;
pub mod testkit;
pub mod tools;

/// Installs the one rustls crypto provider of the workspace (aws-lc-rs).
/// Idempotent: a second call finds the provider already installed.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Logs of the harness's own programs to stderr, filtered by `RUST_LOG`
/// (default `info`): plain text in a harness log file, colours on a terminal.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
