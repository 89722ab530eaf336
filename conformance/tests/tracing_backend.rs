//! The observability tools of the harness, shown to work before anything of
//! ours is traced or scraped:
//!
//! * Jaeger takes one OTLP/HTTP JSON trace (a parent and a child span with
//!   attributes, an event, a resource) at `PTAH_OTLP_ENDPOINT` and gives both
//!   spans back through its query API (`PTAH_TRACES_URL`, read with
//!   `testkit::traces`): names, parent and child, attributes with their
//!   types, durations, the service and its resource attributes.
//! * Jaeger listens on the harness's ports only, all of them on 127.0.0.1.
//! * promtool accepts a clean exposition, refuses one whose counter lacks
//!   `_total` (a lint problem) and one that does not parse, and parses
//!   Jaeger's own metrics.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{Value, json};

use conformance::gitserve::parse_env_file;
use conformance::harness::Harness;
use conformance::testkit::promtool::{check_metrics, parse_metrics};
use conformance::testkit::traces::{RefType, TraceQuery, TracesClient, ValueType, find_tag};
use conformance::testkit::unique;
use conformance::testkit::wait::Patience;
use conformance::{jaeger, service};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// A span is stored when its OTLP request is answered; the search may still
/// take a moment.
const PATIENCE: Patience = Patience::new(Duration::from_secs(20), Duration::from_millis(100));

/// `n` random bytes as hex: trace and span ids.
fn random_hex(n: usize) -> String {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom");
    hex::encode(bytes)
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

fn string_attr(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

#[tokio::test]
async fn an_otlp_trace_is_read_back_with_its_parent_child_names_attributes_and_durations()
-> anyhow::Result<()> {
    let harness = harness().await;
    jaeger::require(harness)?;
    let service_name = unique("tracing-backend");
    let run = unique("run");
    let trace_id = random_hex(16);
    let (parent_id, child_id) = (random_hex(8), random_hex(8));
    // Whole microseconds: Jaeger keeps µs, so the read-back compares exactly.
    let start = nanos(SystemTime::now()) / 1000 * 1000;
    let ms = 1_000_000u128;
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [
            string_attr("service.name", &service_name),
            string_attr("service.version", "1.2.3"),
        ]},
        "scopeSpans": [{
            "scope": {"name": "tracing-backend-test", "version": "0.1.0"},
            "spans": [
                {
                    "traceId": trace_id,
                    "spanId": parent_id,
                    "name": "checkout",
                    "kind": 2,
                    "startTimeUnixNano": start.to_string(),
                    "endTimeUnixNano": (start + 80 * ms).to_string(),
                    "attributes": [
                        string_attr("test.run", &run),
                        {"key": "http.response.status_code", "value": {"intValue": "200"}},
                        {"key": "cart.empty", "value": {"boolValue": false}},
                        {"key": "cart.ratio", "value": {"doubleValue": 0.25}},
                    ],
                    "events": [{
                        "timeUnixNano": (start + 5 * ms).to_string(),
                        "name": "cart-loaded",
                        "attributes": [{"key": "cart.items", "value": {"intValue": "3"}}],
                    }],
                },
                {
                    "traceId": trace_id,
                    "spanId": child_id,
                    "parentSpanId": parent_id,
                    "name": "load cart",
                    "kind": 3,
                    "startTimeUnixNano": (start + 10 * ms).to_string(),
                    "endTimeUnixNano": (start + 40 * ms).to_string(),
                    "attributes": [
                        string_attr("test.run", &run),
                        string_attr("db.system.name", "postgresql"),
                        {"key": "db.response.returned_rows", "value": {"intValue": "3"}},
                    ],
                },
            ],
        }],
    }]});

    let endpoint = harness.otlp_endpoint()?;
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .post(format!("{endpoint}/v1/traces"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body)?)
        .send()
        .await
        .context("POST /v1/traces")?;
    let status = resp.status();
    let answer: Value = serde_json::from_slice(&resp.bytes().await?)?;
    assert!(status.is_success(), "POST /v1/traces: {status}: {answer}");
    // A partial success would count rejected spans (an int64, as a string
    // in JSON); there is none.
    let rejected = answer.pointer("/partialSuccess/rejectedSpans");
    assert!(
        rejected.is_none_or(|n| *n == json!(0) || *n == json!("0")),
        "{answer}"
    );

    let traces = TracesClient::of(harness)?;
    let query = TraceQuery::service(&service_name)
        .tag("test.run", &run)
        .limit(5)
        .lookback(Duration::from_secs(600));
    let trace = traces
        .wait_for_trace_where(&query, PATIENCE, "both spans", |t| t.spans.len() == 2)
        .await?;
    assert_eq!(trace.trace_id, trace_id);

    let parent = trace.span_named("checkout").context("the parent span")?;
    let child = trace.span_named("load cart").context("the child span")?;
    assert_eq!(parent.span_id, parent_id);
    assert_eq!(child.span_id, child_id);
    assert_eq!(trace.roots(), vec![parent]);
    assert_eq!(trace.parent_of(child), Some(parent));
    assert_eq!(trace.children_of(parent), vec![child]);
    assert_eq!(child.references.len(), 1);
    assert_eq!(child.references[0].ref_type, RefType::ChildOf);
    assert_eq!(child.references[0].trace_id, trace_id);

    // Attributes, with their types.
    assert_eq!(parent.tag_str("test.run"), Some(run.as_str()));
    assert_eq!(parent.tag_i64("http.response.status_code"), Some(200));
    assert_eq!(
        parent.tag("http.response.status_code").unwrap().value_type,
        ValueType::Int64
    );
    assert_eq!(parent.tag_bool("cart.empty"), Some(false));
    assert_eq!(parent.tag_f64("cart.ratio"), Some(0.25));
    assert_eq!(parent.tag_str("span.kind"), Some("server"));
    assert_eq!(child.tag_str("db.system.name"), Some("postgresql"));
    assert_eq!(child.tag_i64("db.response.returned_rows"), Some(3));
    assert_eq!(child.tag_str("span.kind"), Some("client"));
    assert_eq!(
        child.tag("cart.ratio"),
        None,
        "attributes stay on their span"
    );

    // Times: microseconds, exactly as sent.
    let start_us = (start / 1000) as u64;
    assert_eq!(parent.start_time, start_us);
    assert_eq!(parent.duration(), Duration::from_millis(80));
    assert_eq!(child.start_time, start_us + 10_000);
    assert_eq!(child.duration(), Duration::from_millis(30));
    assert!(child.start() >= parent.start());

    // The event is a log; the resource is the process.
    let logs = parent.logs_named("cart-loaded");
    assert_eq!(logs.len(), 1, "{:?}", parent.logs);
    assert_eq!(logs[0].timestamp, start_us + 5_000);
    assert_eq!(
        find_tag(&logs[0].fields, "cart.items").and_then(|f| f.as_i64()),
        Some(3)
    );
    for span in [parent, child] {
        assert_eq!(trace.service_of(span), Some(service_name.as_str()));
    }
    let process = trace.process_of(parent).unwrap();
    assert_eq!(
        find_tag(&process.tags, "service.version").and_then(|t| t.as_str()),
        Some("1.2.3")
    );

    // The same trace by id, the service and its operations.
    let by_id = traces.trace(&trace_id).await?.context("the trace by id")?;
    assert_eq!(by_id.spans.len(), 2);
    assert_eq!(
        by_id
            .spans
            .iter()
            .map(|s| s.span_id.as_str())
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([parent_id.as_str(), child_id.as_str()])
    );
    assert!(traces.services().await?.contains(&service_name));
    assert_eq!(
        traces
            .operations(&service_name)
            .await?
            .into_iter()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["checkout".to_string(), "load cart".to_string()])
    );

    // Searches that must not find it: another run's tag, another operation.
    let other = TraceQuery::service(&service_name).tag("test.run", unique("other"));
    assert!(traces.find(&other).await?.is_empty());
    let op = TraceQuery::service(&service_name).operation("no such operation");
    assert!(traces.find(&op).await?.is_empty());
    // A trace Jaeger never had.
    assert_eq!(traces.trace(&random_hex(16)).await?, None);
    Ok(())
}

#[tokio::test]
async fn the_env_file_and_the_harness_name_the_same_jaeger() -> anyhow::Result<()> {
    let harness = harness().await;
    jaeger::require(harness)?;
    let vars = parse_env_file(&harness.env()?)?;
    assert_eq!(
        vars.get("PTAH_OTLP_ENDPOINT"),
        Some(&harness.otlp_endpoint()?)
    );
    assert_eq!(vars.get("PTAH_TRACES_URL"), Some(&harness.traces_url()?));
    assert!(harness.otlp_endpoint()?.starts_with("http://127.0.0.1:"));
    Ok(())
}

/// The (address, port) of every TCP socket `pid` listens on and every UDP
/// socket it bound, from /proc: its socket inodes matched in the tables.
fn sockets_of(pid: i32) -> anyhow::Result<Vec<(String, String, u16)>> {
    let mut inodes = BTreeSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        if let Ok(target) = std::fs::read_link(fd?.path()) {
            let target = target.display().to_string();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
            {
                inodes.insert(inode.to_string());
            }
        }
    }
    let mut out = Vec::new();
    for table in ["tcp", "tcp6", "udp", "udp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields[1], fields[3], fields[9]);
            // TCP: listening sockets only (0A); UDP: every bound one.
            if !inodes.contains(inode) || (table.starts_with("tcp") && state != "0A") {
                continue;
            }
            let (addr, port) = local.split_once(':').context("local address")?;
            out.push((
                table.to_string(),
                addr.to_string(),
                u16::from_str_radix(port, 16)?,
            ));
        }
    }
    Ok(out)
}

#[tokio::test]
async fn jaeger_listens_on_the_harness_ports_only_and_only_on_loopback() -> anyhow::Result<()> {
    let harness = harness().await;
    jaeger::require(harness)?;
    let pid = service::running(&harness.state, jaeger::SERVICE)
        .context("Jaeger's pid")?
        .pid;
    let sockets = sockets_of(pid)?;
    let ports = harness.recorded_ports()?;
    let want: BTreeSet<u16> = jaeger::listening_ports(&ports).into_iter().collect();
    let got: BTreeSet<u16> = sockets.iter().map(|(_, _, port)| *port).collect();
    assert_eq!(got, want, "Jaeger's sockets: {sockets:?}");
    for (table, addr, port) in &sockets {
        // 127.0.0.1 as /proc/net/tcp writes it (little-endian hex).
        assert_eq!(
            (table.as_str(), addr.as_str()),
            ("tcp", "0100007F"),
            "port {port} is not bound to 127.0.0.1 over TCP: {sockets:?}"
        );
    }
    Ok(())
}

const CLEAN: &str = "\
# HELP ptah_reconciles_total Reconciliations, by result.
# TYPE ptah_reconciles_total counter
ptah_reconciles_total{result=\"ok\"} 3
ptah_reconciles_total{result=\"error\"} 0
# HELP ptah_plan_seconds Time to plan.
# TYPE ptah_plan_seconds histogram
ptah_plan_seconds_bucket{le=\"0.5\"} 1
ptah_plan_seconds_bucket{le=\"+Inf\"} 2
ptah_plan_seconds_sum 1.7
ptah_plan_seconds_count 2
# HELP ptah_schemas Schemas, by phase.
# TYPE ptah_schemas gauge
ptah_schemas{phase=\"InSync\"} 2
";

#[test]
fn promtool_accepts_a_clean_exposition() -> anyhow::Result<()> {
    let checked = check_metrics(CLEAN)?;
    assert!(checked.clean(), "{checked:?}");
    assert_eq!(checked.output.trim(), "");
    Ok(())
}

#[test]
fn promtool_refuses_a_counter_without_total_as_a_lint_problem() -> anyhow::Result<()> {
    let text = "\
# HELP ptah_reconciles Reconciliations.
# TYPE ptah_reconciles counter
ptah_reconciles 3
";
    let checked = check_metrics(text)?;
    assert!(checked.lint_problems(), "{checked:?}");
    assert!(
        checked
            .output
            .contains("ptah_reconciles counter metrics should have \"_total\" suffix"),
        "{checked:?}"
    );
    // Without the lints it parses.
    let parsed = parse_metrics(text)?;
    assert!(parsed.clean(), "{parsed:?}");
    Ok(())
}

#[test]
fn promtool_refuses_an_exposition_that_does_not_parse() -> anyhow::Result<()> {
    let unclosed_label = "\
# HELP ptah_reconciles_total Reconciliations.
# TYPE ptah_reconciles_total counter
ptah_reconciles_total{result=\"ok\" 3
";
    let checked = check_metrics(unclosed_label)?;
    assert!(checked.unparsable(), "{checked:?}");
    assert!(
        checked
            .output
            .contains("text format parsing error in line 3"),
        "{checked:?}"
    );
    let not_a_number = CLEAN.replace(
        "ptah_schemas{phase=\"InSync\"} 2",
        "ptah_schemas{phase=\"InSync\"} two",
    );
    let checked = parse_metrics(&not_a_number)?;
    assert!(checked.unparsable(), "{checked:?}");
    assert!(
        checked
            .output
            .contains("expected float as value, got \"two\""),
        "{checked:?}"
    );
    Ok(())
}

#[tokio::test]
async fn jaeger_serves_its_own_metrics_on_the_harness_port_and_promtool_parses_them()
-> anyhow::Result<()> {
    let harness = harness().await;
    jaeger::require(harness)?;
    let ports = harness.recorded_ports()?;
    let text = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(format!("http://127.0.0.1:{}/metrics", ports.jaeger_metrics))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    assert!(text.contains("# TYPE "), "{text}");
    // Jaeger's own metrics lack help text (a lint problem), but they parse.
    let checked = parse_metrics(&text)?;
    assert!(checked.clean(), "{checked:?}");
    assert!(
        checked.output.contains("otelcol_process_uptime"),
        "{checked:?}"
    );
    Ok(())
}
