//! The manager: watches PtahSchema resources and drives them through the six
//! stages. It serves the result receiver (and the admission webhooks) on one
//! TLS listener, and creates every Job, Lease and plan itself.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use ptah_operator::api::status::ExecutionBinding;
use ptah_operator::controller::{self, Config, Context, FaultPoint, Telemetry};
use ptah_operator::execution::job::Images;
use ptah_operator::execution::receiver::{Inbox, Receiver, TokenKey};
use ptah_operator::protocol::receiver::{PLANS_PATH, RESULTS_PATH};
use ptah_operator::server::{self, Routes, Tls};
use ptah_operator::telemetry::export::{self, Spans};
use sha2::{Digest, Sha256};

/// Keeps PostgreSQL and MySQL/MariaDB schemas converged on what PtahSchema
/// resources declare.
#[derive(Parser)]
#[command(name = "ptah-operator", version = ptah_operator::VERSION)]
struct Args {
    /// Address the result receiver and the admission webhooks listen on.
    #[arg(long, default_value = "0.0.0.0:9443", env = "PTAH_LISTEN")]
    listen: SocketAddr,
    /// Address Prometheus metrics are served on, plain HTTP, at `/metrics`
    /// (`none`: not served).
    #[arg(long, default_value = "0.0.0.0:8080", env = "PTAH_METRICS_LISTEN", value_parser = metrics_listen)]
    metrics_listen: MetricsListen,
    /// The receiver's URL as Pods reach it (default: https://<listen>/v1/results).
    #[arg(long, env = "PTAH_RECEIVER_URL")]
    receiver_url: Option<String>,
    /// Host names or IP addresses of a self-signed serving certificate, used
    /// when no --tls-cert is given.
    #[arg(long = "tls-host", default_value = "127.0.0.1")]
    tls_hosts: Vec<String>,
    /// Where the self-signed certificate is kept across restarts (made once).
    #[arg(long, env = "PTAH_TLS_DIR")]
    tls_dir: Option<PathBuf>,
    /// Serving certificate chain (PEM); with --tls-key and --tls-ca.
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// Serving key (PEM).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// The CA Pods trust the receiver by (PEM).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// The manager's key, from which the key approvals' stamps are signed
    /// with is derived; created (0600) when absent.
    #[arg(long, env = "PTAH_TOKEN_KEY_FILE")]
    token_key_file: PathBuf,
    /// The operator image (holds ptah-runner), by digest.
    #[arg(long, env = "PTAH_RUNNER_IMAGE")]
    runner_image: String,
    /// The executor image (Ptah CLI and ptah-runner), by digest.
    #[arg(long, env = "PTAH_EXECUTOR_IMAGE")]
    executor_image: String,
    /// Version of Ptah in the executor image (the pinned build's, as
    /// `conformance/tools/pins.env` names it).
    #[arg(
        long,
        default_value = "v0.2.1-0.20260822223425-58c9f30d305f",
        env = "PTAH_VERSION"
    )]
    ptah_version: String,
    /// Namespace of the realm Leases.
    #[arg(
        long,
        default_value = "ptah-system",
        env = "PTAH_COORDINATION_NAMESPACE"
    )]
    coordination_namespace: String,
    /// Watch only this namespace (default: all).
    #[arg(long, env = "PTAH_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// This manager's identity on Events and the leader Lease (default: host
    /// and pid).
    #[arg(long, env = "PTAH_HOLDER")]
    holder: Option<String>,
    /// Who holds realm Leases: the same for every replica and restart of one
    /// installation, so that the manager that takes over goes on under the
    /// Leases its predecessor took (default: `ptah-operator/` and the
    /// coordination namespace).
    #[arg(long, env = "PTAH_REALM_HOLDER")]
    realm_holder: Option<String>,
    /// Reconcile only while holding the leader Lease (`--leader-election-lease`):
    /// for two or more replicas. Without it this process always reconciles.
    #[arg(long, env = "PTAH_LEADER_ELECT")]
    leader_elect: bool,
    /// Name of the leader Lease.
    #[arg(long, default_value = "ptah-operator-leader")]
    leader_election_lease: String,
    /// Namespace of the leader Lease (default: the coordination namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// How long a leader holds its Lease without renewing, in seconds.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=300))]
    leader_election_duration_seconds: u64,
    /// The shortest a realm Lease lasts without renewal, in seconds; each
    /// lasts at least its Job's activeDeadlineSeconds and a minute, so that
    /// nothing renews it while its Job runs.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(i32).range(5..=86460))]
    lease_duration_seconds: i32,
    /// How long a harvested Job is kept, in seconds.
    #[arg(long, default_value_t = 300)]
    harvested_ttl_seconds: i32,
    /// How many passes of each family run at once; the others wait their
    /// turn, first come, first served. Bounded so that a cold start of many
    /// resources does not hold a pass in memory for each. A pass holds its
    /// turn through its API round trips: at 1,000 schemas on two cores a
    /// pass that creates a Job took 2.3 s on average, 23 passes a second
    /// came, and 16 turns made a due pass wait 22 s (p99)
    /// (docs/reliability.md).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_reconciles: u16,
    /// Test-only: exit with code 86 right after this durable write.
    #[arg(long, value_enum, hide = true)]
    fault_point: Option<FaultPoint>,
    /// Test-only: the fault point stops only at this operation's claim
    /// (`observe`, `plan`, `apply`, …); every operation's without it.
    #[arg(long, value_parser = parse_operation, hide = true)]
    fault_operation: Option<ptah_operator::api::status::OperationType>,
    /// Test-only: let this many matching writes pass before the fault point
    /// stops the process.
    #[arg(long, default_value_t = 0, hide = true)]
    fault_skip: u32,
}

fn parse_operation(s: &str) -> Result<ptah_operator::api::status::OperationType, String> {
    serde_json::from_value(serde_json::Value::String(
        s.chars()
            .next()
            .map(|c| c.to_ascii_uppercase())
            .into_iter()
            .chain(s.chars().skip(1))
            .collect(),
    ))
    .map_err(|_| {
        format!("{s:?} is not an operation (resolve, verify, observe, plan, history, apply)")
    })
}

/// `--metrics-listen`: an address, or none.
#[derive(Clone, Copy, Debug)]
struct MetricsListen(Option<SocketAddr>);

fn metrics_listen(s: &str) -> Result<MetricsListen, String> {
    if s == "none" {
        return Ok(MetricsListen(None));
    }
    s.parse()
        .map(|a| MetricsListen(Some(a)))
        .map_err(|_| format!("{s:?} is not an address (host:port) or none"))
}

/// The execution epoch of a set of components: `v1-` and 32 hex digits of
/// their digest, so every component change starts a new epoch.
fn epoch_of(parts: &[&str]) -> String {
    let digest = Sha256::digest(parts.join("\u{1f}").as_bytes());
    format!("v1-{}", &hex::encode(digest)[..32])
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into())
                // The SDK logs every failed export; `SayOnce` says it once.
                .add_directive("opentelemetry_sdk=off".parse().expect("a directive"))
                .add_directive("opentelemetry_otlp=off".parse().expect("a directive"))
                .add_directive("opentelemetry-otlp=off".parse().expect("a directive")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let holder = args
        .holder
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let mut kube_config = kube::Config::infer()
        .await
        .context("connecting to the API server (KUBECONFIG or in-cluster)")?;
    // Audit logs and API server metrics tell this manager's requests apart.
    let agent = format!("ptah-operator/{} ({holder})", env!("CARGO_PKG_VERSION"));
    kube_config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&agent).context("--holder is not a header value")?,
    ));
    let client = kube::Client::try_from(kube_config).context("building the API client")?;
    let tls = match (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        (Some(cert), Some(key), Some(ca)) => Tls::from_files(cert, key, ca)?,
        _ => {
            let hosts: Vec<&str> = args.tls_hosts.iter().map(String::as_str).collect();
            match &args.tls_dir {
                Some(dir) => Tls::self_signed_in(dir, &hosts)?,
                None => Tls::self_signed(&hosts)?,
            }
        }
    };
    let key = Arc::new(
        TokenKey::load_or_create(&args.token_key_file)
            .with_context(|| format!("token key {}", args.token_key_file.display()))?,
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let local = listener.local_addr()?;
    let receiver_url = args
        .receiver_url
        .clone()
        .unwrap_or_else(|| format!("https://{local}{RESULTS_PATH}"));
    let inbox = Arc::new(Inbox::new());
    let receiver = Arc::new(Receiver::new(client.clone(), inbox.clone()));
    // The approvals' stamps and checks are served beside the receiver; the
    // chart registers them (`admission::webhook_configurations`).
    let routes = Routes::new()
        .route(RESULTS_PATH, receiver.clone().handler())
        .route(
            "/admission/",
            ptah_operator::admission::handler(
                client.clone(),
                Arc::new(ptah_operator::admission::StampKey::of(&key)),
            ),
        );
    let routes = routes.route(PLANS_PATH, receiver.clone().plan_handler());
    let ca_handle = tls.ca.clone();
    // A certificate from files (a mounted Secret) is followed as it rotates.
    if let (Some(cert), Some(key), Some(ca)) = (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        tokio::spawn(tls.clone().reload_from(
            cert.clone(),
            key.clone(),
            ca.clone(),
            std::time::Duration::from_secs(5),
        ));
    }
    let server = tokio::spawn(async move { server::serve(listener, &tls, routes, 9 << 20).await });
    let execution = ExecutionBinding {
        epoch: epoch_of(&[
            "1",
            &args.ptah_version,
            &args.executor_image,
            &args.runner_image,
            "1",
        ]),
        controller_state_version: 1,
        ptah_version: args.ptah_version.clone(),
        executor_image: args.executor_image.clone(),
        runner_protocol_version: 1,
    };
    let config = Config {
        images: Images {
            runner: args.runner_image.clone(),
            executor: args.executor_image.clone(),
        },
        receiver_url,
        coordination_namespace: args.coordination_namespace.clone(),
        holder,
        realm_holder: args.realm_holder.clone().unwrap_or_else(|| {
            format!(
                "{}/{}",
                ptah_operator::execution::job::MANAGED_BY,
                args.coordination_namespace
            )
        }),
        lease_duration_seconds: args.lease_duration_seconds,
        execution,
        harvested_ttl_seconds: args.harvested_ttl_seconds,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
        fault_point: args.fault_point,
        fault_operation: args.fault_operation,
        fault_skip: args.fault_skip,
        watch_namespace: args.watch_namespace.clone(),
    };
    let spans = Spans::from_env("ptah-operator").map_err(anyhow::Error::msg)?;
    let telemetry = Telemetry {
        job_exporter: if spans.enabled() {
            export::endpoint_env(|k| std::env::var(k).ok())
        } else {
            Vec::new()
        },
        spans,
        metrics: Default::default(),
    };
    tracing::info!(
        listen = %local,
        receiver = %config.receiver_url,
        traces = telemetry.spans.enabled(),
        "manager starting"
    );
    let ctx =
        Arc::new(Context::new(client, config, key, inbox, ca_handle).with_telemetry(telemetry));
    let metrics = match args.metrics_listen.0 {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr} for metrics"))?;
            tracing::info!(metrics = %listener.local_addr()?, "serving /metrics");
            let routes = Routes::new()
                .route("/metrics", controller::metrics_handler(ctx.clone()))
                .route("/healthz", server::healthz());
            tokio::spawn(server::serve_plain(listener, routes))
        }
        None => tokio::spawn(std::future::pending()),
    };
    let election = args.leader_elect.then(|| controller::leader::Election {
        lease: args.leader_election_lease.clone(),
        namespace: args
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| args.coordination_namespace.clone()),
        identity: ctx.config.holder.clone(),
        duration_seconds: args.leader_election_duration_seconds,
    });
    let reconcile = async {
        match &election {
            Some(election) => {
                controller::leader::lead(
                    ctx.client.clone(),
                    election,
                    controller::run(ctx.clone()),
                    terminated(),
                )
                .await
            }
            None => {
                tokio::select! {
                    () = controller::run(ctx.clone()) => {}
                    () = terminated() => {}
                }
                Ok(())
            }
        }
    };
    let done = tokio::select! {
        res = reconcile => res.map_err(anyhow::Error::from),
        res = server => res.context("the server task")?.context("serving"),
        res = metrics => res.context("the metrics task")?.context("serving metrics"),
    };
    ctx.telemetry.spans.flush();
    done
}

/// SIGTERM or SIGINT: the kubelet stopping the Pod, or a person.
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("stopping on a signal");
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "ptah-operator".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let runner = format!("--runner-image=ghcr.io/ptah-run/ptah-operator@{digest}");
        let executor = format!("--executor-image=ghcr.io/ptah-run/ptah-executor@{digest}");
        let mut argv = vec![
            "ptah-operator",
            "--token-key-file=/tmp/key",
            runner.as_str(),
            executor.as_str(),
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv)
    }

    #[test]
    fn the_metrics_address_is_an_address_or_none() {
        let a = parse(&[]).expect("the defaults parse");
        assert_eq!(
            a.metrics_listen.0,
            Some("0.0.0.0:8080".parse().expect("addr"))
        );
        let a = parse(&["--metrics-listen=127.0.0.1:0"]).expect("an address");
        assert_eq!(
            a.metrics_listen.0,
            Some("127.0.0.1:0".parse().expect("addr"))
        );
        assert!(
            parse(&["--metrics-listen=none"])
                .expect("none")
                .metrics_listen
                .0
                .is_none()
        );
        let Err(e) = parse(&["--metrics-listen=nowhere"]) else {
            panic!("an address that is none was taken");
        };
        assert!(e.to_string().contains("is not an address"), "{e}");
    }
}
