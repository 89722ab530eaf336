//! Jaeger v2 on the harness: the all-in-one backend built from its Go module
//! (`conformance/tools/observability.env`), run as a host process with a
//! YAML config written into the state dir. It receives OTLP (gRPC and
//! HTTP), keeps traces in memory, and answers Jaeger's query API
//! (`/api/services`, `/api/traces`, `/api/traces/<id>`;
//! [`crate::testkit::traces`] reads it).
//!
//! Every listener it opens is named in the config and bound to a loopback
//! port of the harness's own ([`Ports`]): the two OTLP receivers, the query
//! API's HTTP and gRPC servers, the health check, and its own metrics. The
//! components that would listen on Jaeger's default ports (the Jaeger and
//! Zipkin receivers, remote sampling, expvar, zpages) are not configured,
//! so several harnesses run side by side. Jaeger traces nothing of its own:
//! the collector's internal traces are off and the query server's tracer
//! (on by default in v2, exporting to localhost:4317) is disabled.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::harness::{Harness, Ports};
use crate::service::{self, ServiceSpec};
use crate::tools;

/// The service name, as `status` lists it.
pub const SERVICE: &str = "jaeger";

/// The name of the memory store in the config (queried and written).
const STORE: &str = "harness_memory";

/// The built `jaeger` binary, or `None` when it is not built
/// (`bash conformance/tools/build.sh jaeger` builds it).
pub fn binary() -> anyhow::Result<Option<PathBuf>> {
    let path = tools::observability_bin_dir()?.join("jaeger");
    Ok(path.is_file().then_some(path))
}

/// Where Jaeger's config lives under a harness state dir.
pub fn config_path(harness: &Harness) -> PathBuf {
    harness.state.join("jaeger").join("config.yaml")
}

/// The base URL an OTLP/HTTP exporter takes as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (it appends `/v1/traces`).
pub fn otlp_endpoint(ports: &Ports) -> String {
    format!("http://127.0.0.1:{}", ports.jaeger_otlp_http)
}

/// The OTLP/gRPC receiver's address, as a gRPC exporter takes it.
pub fn otlp_grpc_endpoint(ports: &Ports) -> String {
    format!("http://127.0.0.1:{}", ports.jaeger_otlp_grpc)
}

/// The base URL of Jaeger's query API (`<base>/api/traces`, ...).
pub fn traces_url(ports: &Ports) -> String {
    format!("http://127.0.0.1:{}", ports.jaeger_query_http)
}

/// The health check's status URL: 200 with `"healthy":true` once every
/// component runs.
pub fn health_url(ports: &Ports) -> String {
    format!("http://127.0.0.1:{}/status", ports.jaeger_health)
}

/// Every port Jaeger listens on, and nothing else: what `up` binds, and what
/// the tests check it binds.
pub fn listening_ports(ports: &Ports) -> [u16; 6] {
    [
        ports.jaeger_otlp_grpc,
        ports.jaeger_otlp_http,
        ports.jaeger_query_http,
        ports.jaeger_query_grpc,
        ports.jaeger_health,
        ports.jaeger_metrics,
    ]
}

/// The config `up` writes: memory storage, OTLP in, the query API out, the
/// health check, and Jaeger's own metrics (Prometheus, pulled), each on a
/// harness port of 127.0.0.1. No processor: a span is stored when the OTLP
/// request that carried it is answered.
pub fn config(ports: &Ports) -> String {
    format!(
        "\
# Written by `ptah-harness up`. Every listener is named here, on 127.0.0.1.
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    # Jaeger's own traces go nowhere.
    traces:
      level: none
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {metrics}
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      {STORE}:
        memory:
          max_traces: 100000
  jaeger_query:
    # On by default in v2: the query server would export its own traces
    # to the default OTLP/gRPC port.
    enable_tracing: false
    storage:
      traces: {STORE}
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:{health}

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}

exporters:
  jaeger_storage_exporter:
    trace_storage: {STORE}
",
        metrics = ports.jaeger_metrics,
        query_http = ports.jaeger_query_http,
        query_grpc = ports.jaeger_query_grpc,
        health = ports.jaeger_health,
        otlp_grpc = ports.jaeger_otlp_grpc,
        otlp_http = ports.jaeger_otlp_http,
    )
}

/// Jaeger's service, ready (listening) once its OTLP/HTTP receiver, the
/// last component it starts, accepts connections.
pub fn service(harness: &Harness, ports: &Ports, program: &Path) -> ServiceSpec {
    ServiceSpec::new(SERVICE, program)
        .args([format!("--config=file:{}", config_path(harness).display())])
        // Belt and braces: no OpenTelemetry SDK in it exports traces.
        .env("OTEL_TRACES_EXPORTER", "none")
        .cwd(harness.state.join("jaeger"))
        .port(ports.jaeger_otlp_http)
}

/// Writes the config and starts Jaeger (unless it runs); returns its service
/// for `up` to wait on. Without a built `jaeger` it says so and starts
/// nothing: only the tracing tests need it.
pub fn start(harness: &Harness, ports: &Ports) -> anyhow::Result<Vec<ServiceSpec>> {
    let Some(program) = binary()? else {
        eprintln!(
            "[harness] Jaeger is not built in {}; skipping it (`bash conformance/tools/build.sh jaeger` builds it)",
            tools::observability_bin_dir()?.display()
        );
        return Ok(Vec::new());
    };
    let path = config_path(harness);
    std::fs::create_dir_all(path.parent().expect("the config has a directory"))?;
    let text = config(ports);
    // A config that changed (ports added on an older state dir) means a restart.
    let changed = std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str());
    if changed {
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        service::stop(&harness.state, SERVICE, Duration::from_secs(15))?;
    }
    let spec = service(harness, ports, &program);
    service::start(&harness.state, &spec)?;
    Ok(vec![spec])
}

/// Waits until Jaeger's health check says every component runs, failing
/// early with the end of its log when it exits.
pub async fn wait_healthy(
    harness: &Harness,
    ports: &Ports,
    timeout: Duration,
) -> anyhow::Result<()> {
    crate::install_crypto_provider();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()?;
    let url = health_url(ports);
    let deadline = Instant::now() + timeout;
    loop {
        let last = match client.get(&url).send().await {
            Ok(resp) => {
                let status = resp.status();
                let body = resp.text().await.unwrap_or_default();
                let healthy = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("healthy").and_then(|h| h.as_bool()))
                    == Some(true);
                if status.is_success() && healthy {
                    return Ok(());
                }
                format!("{status}: {body}")
            }
            Err(e) => e.to_string(),
        };
        service::ensure_alive(&harness.state, SERVICE)?;
        if Instant::now() > deadline {
            bail!(
                "Jaeger not healthy within {timeout:?} at {url}: {last}\n{}",
                service::log_tail(&harness.state, SERVICE, 20)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fails, naming the command that fixes it, unless Jaeger runs on
/// `harness`: for the tests that need it.
pub fn require(harness: &Harness) -> anyhow::Result<()> {
    if service::running(&harness.state, SERVICE).is_none() {
        bail!(
            "Jaeger is not running on the harness in {}; build it with \
             `bash conformance/tools/build.sh jaeger` and run `ptah-harness up`",
            harness.state.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_only_harness_ports_on_loopback() {
        let ports = Ports {
            jaeger_otlp_grpc: 40001,
            jaeger_otlp_http: 40002,
            jaeger_query_http: 40003,
            jaeger_query_grpc: 40004,
            jaeger_health: 40005,
            jaeger_metrics: 40006,
            ..Ports::default()
        };
        let text = config(&ports);
        for port in listening_ports(&ports) {
            assert!(
                text.contains(&format!("127.0.0.1:{port}"))
                    || text.contains(&format!("port: {port}"))
            );
        }
        for default in [
            "4317", "4318", "16686", "16685", "13133", "8888", "5778", "9411", "14250",
        ] {
            assert!(
                !text.contains(default),
                "the config names default port {default}"
            );
        }
        assert!(!text.contains("localhost"));
        assert!(text.contains("enable_tracing: false"));
    }
}
