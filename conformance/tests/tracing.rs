//! Traces of changes, end to end on the harness: a real manager and real
//! Jobs exporting over OTLP to the harness's Jaeger, read back through
//! Jaeger's query API.
//!
//! * A PtahSchema from a ConfigMap under `OnApproval`, approved, applied and
//!   proved, is one trace: a `change` root and the five stage spans in
//!   order, the Decision span as long as the wait for the approval, the
//!   runner's spans (each with the Ptah child) as children of the Plan,
//!   Execution and Verification spans, and the attributes a user filters
//!   on. A second change of the same resource is a second trace, and
//!   `kubectl ptah trace` draws both (`--last 2`), also as an SVG picture.
//! * The same for a PtahMigration run.
//! * The manager restarted while a plan waits: the approval, the Apply and
//!   the proof land in the trace the change began.
//! * No span or attribute holds the database URL, its password or SQL.
//! * With no exporter set nothing is exported, no Job carries a trace
//!   context, and the schema still converges; the metrics endpoint passes
//!   `promtool check metrics` and its counters move. With the backend down
//!   the manager converges too and says so once.
//! * `bench_tracing_overhead` (once here; N times by
//!   `conformance/bench/tracing-overhead.sh`): edits under tracing on and
//!   off, side by side.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use serde_json::json;

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::manager::{Manager, ManagerSpec, Traces, free_port};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::{Operator, PATIENCE, approve_migration, approve_schema};
use conformance::testkit::plugin::Plugin;
use conformance::testkit::traces::{Span, Trace, TraceQuery, TracesClient};
use conformance::testkit::wait::Patience;
use operator::admission::webhook_configurations;
use operator::api::condition::{MigrationPhase, SchemaPhase};
use operator::api::{PtahMigration, PtahSchema};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// Spans arrive in batches (the SDK's, every few seconds).
const ARRIVAL: Patience = Patience::new(Duration::from_secs(60), Duration::from_millis(500));

const STAGES: [&str; 5] = ["Source", "Plan", "Decision", "Execution", "Verification"];

fn schema_phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn migration_phase(m: &PtahMigration) -> Option<MigrationPhase> {
    m.status.as_ref().and_then(|st| st.phase)
}

/// The trace id `status.trace` names.
fn trace_id_of(trace: Option<&operator::api::trace::ChangeTrace>) -> anyhow::Result<String> {
    Ok(trace
        .context("status.trace: a change under way")?
        .trace_id
        .clone())
}

/// A trace that holds its root and every stage span, with the runner's
/// spans under the Verification span (the last to arrive).
fn whole(t: &Trace) -> bool {
    let Some(verification) = t.span_named("Verification") else {
        return false;
    };
    t.span_named("change").is_some()
        && STAGES.iter().all(|s| t.span_named(s).is_some())
        && !t.children_of(verification).is_empty()
}

fn micros(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The stage spans, in the order they started; each a child of the root.
fn stages_in_order(t: &Trace) -> anyhow::Result<Vec<&Span>> {
    let root = t.span_named("change").context("the change's root span")?;
    assert!(root.parent_span_id().is_none(), "the root has no parent");
    let mut stages: Vec<&Span> = STAGES
        .iter()
        .map(|s| t.span_named(s).with_context(|| format!("the {s} span")))
        .collect::<anyhow::Result<_>>()?;
    stages.sort_by_key(|s| (s.start_time, s.duration));
    let names: Vec<&str> = stages.iter().map(|s| s.operation_name.as_str()).collect();
    assert_eq!(names, STAGES, "the stages in the order they began");
    for s in &stages {
        assert_eq!(s.parent_span_id(), Some(root.span_id.as_str()), "{s:?}");
        assert!(
            s.start_time >= root.start_time
                && s.start_time + s.duration <= root.start_time + root.duration,
            "{} lies within the change",
            s.operation_name
        );
    }
    for pair in stages.windows(2) {
        assert!(
            pair[0].start_time + pair[0].duration <= pair[1].start_time + 1,
            "{} ends before {} begins",
            pair[0].operation_name,
            pair[1].operation_name
        );
    }
    Ok(stages)
}

/// The runner's spans under `stage`, each with the Ptah child (its exit
/// code) or the delivery below it.
fn runner_children<'t>(t: &'t Trace, stage: &str) -> anyhow::Result<Vec<&'t Span>> {
    let span = t
        .span_named(stage)
        .with_context(|| format!("the {stage} span"))?;
    let children: Vec<&Span> = t
        .children_of(span)
        .into_iter()
        .filter(|c| t.service_of(c) == Some("ptah-runner"))
        .collect();
    anyhow::ensure!(
        !children.is_empty(),
        "no runner span under {stage}: {:?}",
        t.operation_names()
    );
    Ok(children)
}

fn has_ptah_child(t: &Trace, runner: &Span) -> bool {
    t.children_of(runner)
        .iter()
        .any(|c| c.operation_name == "ptah" && c.tag_i64("process.exit.code") == Some(0))
}

/// Every attribute, event field and process tag of `t`, as text.
fn all_text(t: &Trace) -> String {
    let mut out = String::new();
    for s in &t.spans {
        out.push_str(&s.operation_name);
        for kv in s.tags.iter().chain(s.logs.iter().flat_map(|l| &l.fields)) {
            out.push_str(&format!("\n{}={}", kv.key, kv.value));
        }
    }
    for p in t.processes.values() {
        for kv in &p.tags {
            out.push_str(&format!("\n{}={}", kv.key, kv.value));
        }
    }
    out
}

/// What must never be in a span: the URL, its password, the SQL.
fn assert_clean(t: &Trace, db: &TestDatabase) {
    let text = all_text(t);
    let url = db.url();
    assert!(
        !text.contains(url.as_str()),
        "a span holds the database URL"
    );
    if let Some(password) = url::Url::parse(&url)
        .ok()
        .and_then(|u| u.password().map(str::to_string))
        .filter(|p| p.len() >= 8)
    {
        assert!(!text.contains(&password), "a span holds the password");
    }
    for sql in ["CREATE TABLE", "customer varchar", "ALTER TABLE"] {
        assert!(!text.contains(sql), "a span holds SQL ({sql})");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schema_change_is_one_trace_through_the_five_stages() -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "tracing", "schema").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    let traces = TracesClient::of(ns.harness())?;
    executor::schema_under(&ns, &db, "orders", json!({"apply": "OnApproval"})).await?;

    let awaiting = |s: &PtahSchema| schema_phase(s) == Some(SchemaPhase::AwaitingApproval);
    let s = operator
        .until(&ns, "orders", "AwaitingApproval", awaiting)
        .await?;
    let first_id = trace_id_of(s.status.as_ref().and_then(|st| st.trace.as_ref()))?;
    let plan = s
        .status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("status.plan")?;
    let waited_from = SystemTime::now();
    // A wait a person takes, long enough to tell apart from the passes.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let approved_at = SystemTime::now();
    let approval = approve_schema(&ns, &s, "orders-1").await?;
    let approver = approval
        .spec
        .approver
        .clone()
        .context("the stamped approver")?
        .username;
    let s = operator
        .until(&ns, "orders", "InSync", |s: &PtahSchema| {
            schema_phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    assert!(
        s.status.as_ref().is_some_and(|st| st.trace.is_none()),
        "the change ended"
    );

    let t = traces.wait_for_trace_id(&first_id, ARRIVAL, whole).await?;
    let stages = stages_in_order(&t)?;
    let decision = stages[2];
    assert!(
        decision.start_time <= micros(waited_from)
            && decision.start_time + decision.duration >= micros(approved_at),
        "the Decision span holds the wait for the approval"
    );
    assert!(decision.duration >= 4_000_000, "{decision:?}");
    assert_eq!(decision.tag_str("ptah.approver"), Some(approver.as_str()));
    assert_eq!(
        decision.tag_str("ptah.approval.uid"),
        approval.uid().as_deref()
    );
    // The decision carries where the plan's source came from.
    let source = s
        .status
        .as_ref()
        .and_then(|st| st.source.as_ref())
        .context("status.source")?;
    assert_eq!(decision.tag_str("ptah.source.kind"), Some("ConfigMap"));
    assert_eq!(
        decision.tag_str("ptah.source.digest"),
        Some(source.content_digest.as_str())
    );
    assert!(
        !decision.logs_named("ApprovalAccepted").is_empty(),
        "{decision:?}"
    );
    let plan_span = stages[1];
    assert_eq!(
        plan_span.tag_str("ptah.plan.name"),
        Some(plan.name.as_str())
    );
    assert_eq!(
        plan_span.tag_str("ptah.plan.fingerprint"),
        Some(plan.fingerprint.as_str())
    );
    assert!(!plan_span.logs_named("PlanPublished").is_empty());
    let execution = stages[3];
    assert!(
        execution
            .tag_str("ptah.job.name")
            .is_some_and(|j| j.contains("apply"))
    );
    assert!(
        execution
            .tag_str("ptah.operation.id")
            .is_some_and(|o| o.starts_with("sha256:"))
    );
    assert_eq!(execution.tag_str("ptah.outcome"), Some("Succeeded"));
    assert_eq!(stages[4].tag_str("ptah.outcome"), Some("InSync"));
    let root = t.span_named("change").context("root")?;
    let resource = format!("{}/orders", ns.name());
    assert_eq!(root.tag_str("ptah.resource"), Some(resource.as_str()));
    assert_eq!(root.tag_str("ptah.family"), Some("PtahSchema"));
    assert_eq!(root.tag_str("k8s.namespace.name"), Some(ns.name()));
    assert_eq!(root.tag_str("ptah.outcome"), Some("InSync"));
    assert!(root.tag_str("ptah.reason").is_some());
    for stage in ["Plan", "Execution", "Verification"] {
        let runners = runner_children(&t, stage)?;
        assert!(
            runners.iter().any(|r| has_ptah_child(&t, r)),
            "the runner under {stage} ran Ptah: {:?}",
            t.operation_names()
        );
        assert!(
            runners.iter().any(|r| t
                .children_of(r)
                .iter()
                .any(|c| c.operation_name == "deliver")),
            "the runner under {stage} delivered its result"
        );
    }
    // The runner's spans name their operation, as a Ptah built with its
    // `observability` tag would.
    let operation = execution
        .tag_str("ptah.operation.id")
        .context("operation id")?;
    let runner = runner_children(&t, "Execution")?[0];
    let process = t.process_of(runner).context("the runner's process")?;
    assert!(
        process
            .tags
            .iter()
            .any(|kv| kv.key == "ptah.operation.id" && kv.value.as_str() == Some(operation)),
        "{process:?}"
    );
    assert_clean(&t, &db);

    // A second change of the same resource: a second trace.
    ns.set_config_map_key(
        "orders-schema",
        "schema.sql",
        "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL,\n  note text\n);\n",
    )
    .await?;
    let s = operator
        .until(
            &ns,
            "orders",
            "the second plan awaiting",
            |s: &PtahSchema| {
                awaiting(s)
                    && s.status
                        .as_ref()
                        .and_then(|st| st.plan.as_ref())
                        .is_some_and(|p| p.uid != plan.uid)
            },
        )
        .await?;
    let second_id = trace_id_of(s.status.as_ref().and_then(|st| st.trace.as_ref()))?;
    assert_ne!(second_id, first_id);
    approve_schema(&ns, &s, "orders-2").await?;
    operator
        .until(&ns, "orders", "InSync again", |s: &PtahSchema| {
            schema_phase(s) == Some(SchemaPhase::InSync)
                && s.status
                    .as_ref()
                    .and_then(|st| st.applied.as_ref())
                    .is_some_and(|a| a.plan_uid != plan.uid)
        })
        .await?;
    let second = traces.wait_for_trace_id(&second_id, ARRIVAL, whole).await?;
    stages_in_order(&second)?;
    let found = traces
        .find(
            &TraceQuery::service("ptah-operator")
                .operation("change")
                .tag("ptah.resource", &resource)
                .limit(20),
        )
        .await?;
    let ids: HashSet<&str> = found.iter().map(|t| t.trace_id.as_str()).collect();
    assert_eq!(
        ids,
        HashSet::from([first_id.as_str(), second_id.as_str()]),
        "two changes, two traces"
    );

    // kubectl ptah trace draws them.
    let k = Plugin::new(&ns)?;
    let url = ns.harness().traces_url()?;
    let picture = tempfile::NamedTempFile::new()?;
    let svg = picture.path().display().to_string();
    let newest = k.run(&[
        "trace",
        "schema/orders",
        "--traces-url",
        &url,
        "--svg",
        &svg,
    ])?;
    assert_eq!(newest.code, 0, "{newest:?}");
    for line in [
        second_id.as_str(),
        "Decision",
        "Execution",
        "Verification",
        "(ptah-runner)",
        "ptah schema",
        "ended InSync",
    ] {
        assert!(
            newest.stdout.contains(line),
            "{line} in:\n{}",
            newest.stdout
        );
    }
    assert!(
        newest.stdout.contains(&format!("approved by {approver}")),
        "{}",
        newest.stdout
    );
    let drawn = std::fs::read_to_string(picture.path())?;
    assert!(
        drawn.starts_with("<svg") && drawn.contains("Decision"),
        "{drawn}"
    );
    let earlier = k.run(&[
        "trace",
        "schema/orders",
        "--traces-url",
        &url,
        "--last",
        "2",
        "-o",
        "json",
    ])?;
    assert_eq!(earlier.code, 0, "{earlier:?}");
    let v: serde_json::Value = serde_json::from_str(&earlier.stdout)?;
    assert_eq!(v["traceId"], json!(first_id));
    let none = k.run(&[
        "trace",
        "schema/orders",
        "--traces-url",
        &url,
        "--last",
        "3",
    ])?;
    assert_eq!(none.code, 4, "{none:?}");
    assert!(none.stderr.contains("--last 3"), "{none:?}");
    operator.finish::<PtahSchema>(&ns).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_migration_run_is_one_trace_through_the_five_stages() -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "tracing", "migration").await?;
    let db = TestDatabase::create(ns.harness(), Engine::MariaDb, ns.name())?;
    let operator = Operator::start(&ns, webhook_configurations).await?;
    let traces = TracesClient::of(ns.harness())?;
    executor::migration_under(
        &ns,
        &db,
        "orders",
        json!({"apply": "OnApproval"}),
        executor::migration_files(),
    )
    .await?;
    let m = operator
        .until(&ns, "orders", "AwaitingApproval", |m: &PtahMigration| {
            migration_phase(m) == Some(MigrationPhase::AwaitingApproval)
        })
        .await?;
    let id = trace_id_of(m.status.as_ref().and_then(|st| st.trace.as_ref()))?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let approval = approve_migration(&ns, &m, "orders-1").await?;
    operator
        .until(
            &ns,
            "orders",
            "InSync after the run",
            |m: &PtahMigration| {
                migration_phase(m) == Some(MigrationPhase::InSync)
                    && m.status.as_ref().is_some_and(|st| st.last_run.is_some())
            },
        )
        .await?;
    let t = traces.wait_for_trace_id(&id, ARRIVAL, whole).await?;
    let stages = stages_in_order(&t)?;
    assert!(
        stages[2].duration >= 2_000_000,
        "the Decision span holds the wait"
    );
    assert_eq!(
        stages[2].tag_str("ptah.approval.uid"),
        approval.uid().as_deref()
    );
    assert_eq!(stages[3].tag_str("ptah.outcome"), Some("Applied"));
    let root = t.span_named("change").context("root")?;
    assert_eq!(root.tag_str("ptah.family"), Some("PtahMigration"));
    assert_eq!(root.tag_str("ptah.outcome"), Some("InSync"));
    for stage in ["Execution", "Verification"] {
        let runners = runner_children(&t, stage)?;
        assert!(
            runners.iter().any(|r| has_ptah_child(&t, r)),
            "Ptah under {stage}"
        );
    }
    assert_clean(&t, &db);
    operator.finish::<PtahMigration>(&ns).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_while_the_plan_waits_keeps_the_change_in_one_trace() -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "tracing", "restart").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    let port = free_port()?;
    let operator = Operator::start_on(&ns, webhook_configurations, port).await?;
    let traces = TracesClient::of(ns.harness())?;
    executor::schema_under(&ns, &db, "orders", json!({"apply": "OnApproval"})).await?;
    let s = operator
        .until(&ns, "orders", "AwaitingApproval", |s: &PtahSchema| {
            schema_phase(s) == Some(SchemaPhase::AwaitingApproval)
        })
        .await?;
    let id = trace_id_of(s.status.as_ref().and_then(|st| st.trace.as_ref()))?;
    // Source and Plan are exported before the restart.
    traces
        .wait_for_trace_id(&id, ARRIVAL, |t| t.span_named("Plan").is_some())
        .await?;
    drop(operator);
    let operator = Operator::start_on(&ns, webhook_configurations, port).await?;
    approve_schema(&ns, &s, "orders-1").await?;
    operator
        .until(&ns, "orders", "InSync", |s: &PtahSchema| {
            schema_phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    let t = traces.wait_for_trace_id(&id, ARRIVAL, whole).await?;
    stages_in_order(&t)?;
    let found = traces
        .find(
            &TraceQuery::service("ptah-operator")
                .operation("change")
                .tag("ptah.resource", format!("{}/orders", ns.name()))
                .limit(10),
        )
        .await?;
    assert_eq!(found.len(), 1, "one change, one trace: {found:?}");
    operator.finish::<PtahSchema>(&ns).await
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_exporter_nothing_is_exported_and_the_metrics_still_move() -> anyhow::Result<()>
{
    let ns = TestNamespace::for_operator(harness().await, "tracing", "off").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    let manager = Manager::start(
        &ns,
        &ManagerSpec {
            traces: Traces::Off,
            ..Default::default()
        },
    )?;
    let before = manager.scrape().await?;
    promtool_accepts(&before)?;
    executor::schema(&ns, &db, "orders").await?;
    ns.until(&PATIENCE, "orders", "InSync", |s: &PtahSchema| {
        schema_phase(s) == Some(SchemaPhase::InSync)
    })
    .await
    .with_context(|| manager.log())?;
    let after = manager.scrape().await?;
    promtool_accepts(&after)?;
    let value = series;
    assert!(
        value(
            &after,
            r#"ptah_reconciles_total{family="PtahSchema",outcome="ok"}"#
        ) > value(
            &before,
            r#"ptah_reconciles_total{family="PtahSchema",outcome="ok"}"#
        ),
        "{after}"
    );
    assert_eq!(
        value(
            &after,
            r#"ptah_jobs_created_total{family="PtahSchema",operation="Apply"}"#
        ),
        1.0,
        "{after}"
    );
    assert!(
        value(
            &after,
            r#"ptah_changes_total{family="PtahSchema",outcome="InSync"}"#
        ) >= 1.0,
        "{after}"
    );
    assert!(
        value(
            &after,
            r#"ptah_stage_duration_seconds_count{family="PtahSchema",stage="Execution"}"#
        ) >= 1.0,
        "{after}"
    );
    assert_eq!(
        value(
            &after,
            r#"ptah_resources{family="PtahSchema",phase="InSync"}"#
        ),
        1.0,
        "{after}"
    );
    assert!(
        after.contains(
            r#"ptah_operations_total{family="PtahSchema",operation="Apply",outcome="Succeeded"} 1"#
        ),
        "{after}"
    );

    // No Job carried a trace context, and Jaeger holds nothing of it.
    let jobs = ns.api::<Job>().list(&Default::default()).await?;
    assert!(!jobs.items.is_empty());
    for job in &jobs.items {
        let text = serde_json::to_string(&job.spec)?;
        assert!(
            !text.contains("TRACEPARENT"),
            "{} carries a trace context",
            job.name_any()
        );
        assert!(
            !text.contains("OTEL_EXPORTER"),
            "{} names an exporter",
            job.name_any()
        );
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    let traces = TracesClient::of(ns.harness())?;
    let found = traces
        .find(
            &TraceQuery::service("ptah-operator")
                .tag("ptah.resource", format!("{}/orders", ns.name()))
                .limit(5),
        )
        .await?;
    assert!(found.is_empty(), "exported with no exporter set: {found:?}");
    // While the manager runs: its finalizer goes with it.
    ns.delete_all::<PtahSchema>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_backend_down_the_manager_converges_and_says_so_once() -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "tracing", "down").await?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    // A port nothing listens on.
    let closed = format!("http://127.0.0.1:{}", free_port()?);
    let manager = Manager::start(
        &ns,
        &ManagerSpec {
            traces: Traces::To(closed),
            ..Default::default()
        },
    )?;
    executor::schema(&ns, &db, "orders").await?;
    ns.until(&PATIENCE, "orders", "InSync", |s: &PtahSchema| {
        schema_phase(s) == Some(SchemaPhase::InSync)
    })
    .await
    .with_context(|| manager.log())?;
    // The batch is sent every few seconds: give it two tries.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let log = manager.log();
    assert_eq!(
        log.matches("cannot export traces").count(),
        1,
        "said once:\n{log}"
    );
    ns.delete_all::<PtahSchema>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}

fn promtool_accepts(text: &str) -> anyhow::Result<()> {
    let checked = conformance::testkit::promtool::check_metrics(text)?;
    anyhow::ensure!(
        checked.clean(),
        "promtool check metrics refused the exposition:\n{}\n{text}",
        checked.output
    );
    Ok(())
}

/// The manager's CPU time so far (user and system), from `/proc`.
fn cpu_ms(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // After the command's `(...)`: fields 14 and 15 of stat(5) are 12 and 13 here.
    let rest = stat.rsplit_once(')').context("a stat line")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // USER_HZ is 100 on Linux.
    Ok(ticks * 10)
}

/// A series' value in a scrape (0 when absent).
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// `bench_tracing_overhead` (once in the test command; `BENCH_RUNS` times by
/// `conformance/bench/tracing-overhead.sh`): one schema under `Always`
/// edited again and again, under a manager exporting traces to the harness's
/// Jaeger and under one exporting none, side by side: edit → plan published,
/// edit → `InSync`, and the manager's CPU per pass.
#[tokio::test(flavor = "multi_thread")]
async fn bench_tracing_overhead() -> anyhow::Result<()> {
    use conformance::testkit::bench::{FAST, median, runs};
    let runs = runs(1);
    let mut rows = Vec::new();
    for (label, traces) in [("on", Traces::Harness), ("off", Traces::Off)] {
        let ns = TestNamespace::for_operator(harness().await, "tracing", &format!("bench-{label}"))
            .await?;
        let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
        let manager = Manager::start(
            &ns,
            &ManagerSpec {
                traces,
                ..Default::default()
            },
        )?;
        executor::schema(&ns, &db, "orders").await?;
        let in_sync = |s: &PtahSchema| schema_phase(s) == Some(SchemaPhase::InSync);
        ns.until(&PATIENCE, "orders", "InSync", in_sync)
            .await
            .with_context(|| manager.log())?;
        let scrape = manager.scrape().await?;
        let passes0 = series(
            &scrape,
            r#"ptah_reconciles_total{family="PtahSchema",outcome="ok"}"#,
        );
        let cpu0 = cpu_ms(manager.pid())?;
        let (mut to_plan, mut to_sync) = (Vec::new(), Vec::new());
        let mut columns = String::new();
        for i in 1..=runs {
            let before = ns.api::<PtahSchema>().get("orders").await?;
            let applied = |s: &PtahSchema| {
                s.status
                    .as_ref()
                    .and_then(|st| st.applied.as_ref())
                    .map(|a| a.plan_uid.clone())
            };
            let was = applied(&before);
            // Published: status names a plan the last Apply did not run
            // (or it already ran, when a poll fell between the two).
            let published = |s: &PtahSchema| {
                let plan = s
                    .status
                    .as_ref()
                    .and_then(|st| st.plan.as_ref())
                    .map(|p| p.uid.clone());
                (plan.is_some() && plan != was) || applied(s) != was
            };
            columns.push_str(&format!(",\n  c{i} integer"));
            let sql = format!(
                "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL{columns}\n);\n"
            );
            let t0 = std::time::Instant::now();
            ns.set_config_map_key("orders-schema", "schema.sql", &sql)
                .await?;
            FAST.poll("the plan published", || async {
                let s = ns.api::<PtahSchema>().get("orders").await?;
                anyhow::Ok(published(&s).then_some(()))
            })
            .await
            .with_context(|| manager.log())?;
            to_plan.push(t0.elapsed().as_millis() as u64);
            FAST.poll("InSync on the new plan", || async {
                let s = ns.api::<PtahSchema>().get("orders").await?;
                anyhow::Ok((in_sync(&s) && applied(&s) != was).then_some(()))
            })
            .await
            .with_context(|| manager.log())?;
            to_sync.push(t0.elapsed().as_millis() as u64);
        }
        let cpu = cpu_ms(manager.pid())? - cpu0;
        let scrape = manager.scrape().await?;
        let passes = series(
            &scrape,
            r#"ptah_reconciles_total{family="PtahSchema",outcome="ok"}"#,
        ) - passes0;
        rows.push((label, median(to_plan), median(to_sync), passes, cpu));
        ns.delete_all::<PtahSchema>(&PATIENCE).await?;
        drop(manager);
    }
    println!("tracing  changes  edit→plan p50  edit→InSync p50  passes  manager CPU  CPU/pass");
    for (label, plan, sync, passes, cpu) in &rows {
        let per = if *passes > 0.0 {
            *cpu as f64 / passes
        } else {
            0.0
        };
        println!(
            "{label:<7}  {runs:>7}  {plan:>10} ms  {sync:>12} ms  {passes:>6}  {cpu:>8} ms  {per:>5.2} ms"
        );
    }
    assert!(
        rows.iter().all(|r| r.3 > 0.0),
        "passes were counted: {rows:?}"
    );
    Ok(())
}
