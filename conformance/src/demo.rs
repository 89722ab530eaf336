//! `ptah-harness demo`: shows the local control plane working — the node the
//! process kubelet registered, a Job run by the real Job controller in the
//! executor image, and both databases answering.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};

use crate::harness::{EXECUTOR_IMAGE, Harness};

const NAMESPACE: &str = "ptah-demo";

fn step(msg: &str) {
    println!("\n==> {msg}");
}

/// Whether a Job has a terminal condition (Complete or Failed) set to True.
fn job_finished() -> impl Condition<Job> {
    |job: Option<&Job>| {
        job.and_then(|j| j.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            })
    }
}

/// The demo on `harness`: the control plane's processes, a Job, and the
/// operator taking a PtahSchema to `InSync`, its manager left running.
/// Answers the commands it tells the reader to try next. `later_build` is
/// the build of kubectl and the tracing backend running beside it, if any.
pub async fn run(
    harness: &Harness,
    later_build: Option<&LaterBuild>,
) -> anyhow::Result<Vec<String>> {
    let client = harness.client().await?;

    step("the processes of the local control plane");
    for (name, pid) in harness.status() {
        match pid {
            Some(pid) => println!("  {name:<26} running (pid {pid})"),
            None => println!("  {name:<26} STOPPED"),
        }
    }

    step("the node registered by the process kubelet");
    let version = client.apiserver_version().await?;
    println!("  kube-apiserver {}", version.git_version);
    for node in Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone())
            .unwrap_or_else(|| "Unknown".into());
        println!(
            "  node {} Ready={ready}",
            node.metadata.name.unwrap_or_default()
        );
    }

    step(&format!(
        "a Job in namespace {NAMESPACE}, run by the real Job controller in the executor image"
    ));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await?.is_none() {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": NAMESPACE}
                }))?,
            )
            .await?;
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), NAMESPACE);
    let name = format!("hello-{}", jiff::Timestamp::now().as_second());
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 600,
            "template": {"spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": false,
                "containers": [{
                    "name": "runner",
                    "image": EXECUTOR_IMAGE,
                    "command": ["sh", "-c",
                        "echo \"hello from pod $POD_NAME on $NODE_NAME\"; ptah-runner --version"],
                    "env": [
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                    ],
                    "securityContext": {"readOnlyRootFilesystem": true}
                }]
            }}
        }
    }))?;
    jobs.create(&PostParams::default(), &job).await?;
    println!("  created job/{name}; waiting for it to finish");
    let finished = tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(jobs.clone(), &name, job_finished()),
    )
    .await
    .context("the demo Job did not finish within 90s")??
    .context("the demo Job disappeared")?;
    let conditions = finished
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    for c in conditions.iter().filter(|c| c.status == "True") {
        println!("  job/{name}: {}", c.type_);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = format!("job-name={name}");
    for pod in pods.list(&ListParams::default().labels(&selector)).await? {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let log = crate::kubelet::log_path(&harness.kubelet_dir(), &pod, "runner");
        println!("  pod/{pod_name} log ({}):", log.display());
        for line in std::fs::read_to_string(&log).unwrap_or_default().lines() {
            println!("    {line}");
        }
    }
    if !conditions
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True")
    {
        bail!("the demo Job did not complete");
    }
    jobs.delete(&name, &DeleteParams::background()).await?;

    operator(harness, &client, later_build).await?;

    step("the databases (credentials stay in the harness's secrets directory)");
    use crate::testkit::database::{Engine, TestDatabase};
    for (name, engine) in [
        ("PostgreSQL", Engine::Postgres),
        ("MariaDB", Engine::MariaDb),
    ] {
        let version = TestDatabase::admin(harness, engine)?.sql("select version()")?;
        println!("  {name:<11} {}", version.trim());
    }

    let next = next_steps(harness)?;
    step("try next (the operator keeps running; from the repository's root)");
    let width = next.iter().map(|(c, _)| c.len()).max().unwrap_or(0).min(60);
    for (command, why) in &next {
        println!("  {command:<width$}   # {why}");
    }
    Ok(next.into_iter().map(|(c, _)| c).collect())
}

/// The demo's closing commands, each with what it shows: they work as
/// printed, in order, in a shell at the repository's root
/// (`conformance/tests/demo.rs` runs them).
fn next_steps(harness: &Harness) -> anyhow::Result<Vec<(String, String)>> {
    // The declared schema with one more column, as a file to put in the
    // ConfigMap.
    let dir = harness.state.join("demo");
    std::fs::create_dir_all(&dir)?;
    let edited = dir.join("orders-v2.sql");
    std::fs::write(
        &edited,
        DEMO_SCHEMA.replace("DEFAULT 0\n", "DEFAULT 0,\n  note text\n"),
    )?;
    let schema = format!("schema/orders -n {NAMESPACE}");
    Ok(vec![
        (
            format!("source {}", harness.env_file().display()),
            "KUBECONFIG, and the pinned kubectl and kubectl-ptah on PATH".into(),
        ),
        (
            format!("kubectl ptah schema orders -n {NAMESPACE}"),
            "the six stages of the schema".into(),
        ),
        (
            format!(
                "kubectl create configmap orders-schema -n {NAMESPACE} --from-file=schema.sql={} \
                 --dry-run=client -o yaml | kubectl apply --server-side --force-conflicts -f -",
                edited.display()
            ),
            "declare a new column: the ConfigMap edited".into(),
        ),
        (
            format!("kubectl ptah wait {schema} --timeout 2m"),
            "until it is InSync again".into(),
        ),
        (
            format!("kubectl ptah plan {schema} --applied"),
            "the ALTER TABLE it applied".into(),
        ),
        (
            format!("kubectl ptah trace {schema}"),
            "that change's path through the stages".into(),
        ),
        (
            "target/debug/ptah-harness down".into(),
            "stops everything, the operator too, by pid".into(),
        ),
    ])
}

/// The declared schema of the demo.
const DEMO_SCHEMA: &str = "CREATE TABLE orders (
  id bigint PRIMARY KEY,
  customer text NOT NULL,
  total numeric(12,2) NOT NULL DEFAULT 0
);
CREATE INDEX orders_customer ON orders (customer);
";

/// What each phase means, in the seed's words.
fn phase_words(phase: &str) -> &'static str {
    match phase {
        "Resolving" => "a Job reads the source",
        "Verifying" => "a Job verifies the artifact",
        "Observing" => "a Job reads the database's drift (Observe)",
        "Planning" => "a Job plans twice and dry-runs the plan (Plan)",
        "ReadyToApply" => "a plan is published; no approval is needed",
        "AwaitingApproval" => "a plan is published; it waits for an approval",
        "Applying" => "a Job applies the plan's exact bytes (Apply)",
        "VerifyingConvergence" => "a Job reads the database again (the proof)",
        "InSync" => "a fresh no-change plan: converged",
        "Blocked" => "blocked until an input changes",
        "Failed" => "an attempt failed; it is retried",
        "Pending" => "a claim was discarded; the next pass reads again",
        "Suspended" => "spec.suspend holds",
        _ => "",
    }
}

/// The operator on the harness: a PtahSchema whose schema is a ConfigMap,
/// driven by a real manager process to `InSync` on a PostgreSQL database
/// of its own.
async fn operator(
    harness: &Harness,
    client: &kube::Client,
    later_build: Option<&LaterBuild>,
) -> anyhow::Result<()> {
    use crate::testkit::database::{Engine, TestDatabase};
    use futures::StreamExt;
    use kube::api::{Patch, PatchParams};
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    use kube::runtime::watcher;

    step("the operator: a PtahSchema whose declared schema is a ConfigMap");
    let db = TestDatabase::create(harness, Engine::Postgres, "ptah_demo")?;
    println!("  made an empty PostgreSQL database {}", db.name);
    let apply = PatchParams::apply("ptah-harness-demo").force();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), NAMESPACE);
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "orders-db"},
        "stringData": {"url": db.url()},
    });
    secrets
        .patch("orders-db", &apply, &Patch::Apply(&secret))
        .await?;
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NAMESPACE);
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "orders-schema"},
        "data": {"schema.sql": DEMO_SCHEMA},
    });
    config_maps
        .patch("orders-schema", &apply, &Patch::Apply(&cm))
        .await?;
    crate::crds::install(client).await?;
    let gvk = GroupVersionKind::gvk("operator.ptah.run", "v1alpha1", "PtahSchema");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "ptahschemas");
    let schemas: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
    // A demo run before this one may have left its schema: start afresh.
    if schemas.get_opt("orders").await?.is_some() {
        let unfinalized = serde_json::json!({"metadata": {"finalizers": null}});
        schemas
            .patch(
                "orders",
                &PatchParams::default(),
                &Patch::Merge(&unfinalized),
            )
            .await?;
        schemas.delete("orders", &DeleteParams::default()).await?;
        wait_gone(&schemas, "orders").await?;
    }
    let schema = serde_json::json!({
        "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
        "metadata": {"name": "orders"},
        "spec": {
            "target": {
                "engine": "PostgreSQL",
                "urlFrom": {"name": "orders-db", "key": "url"},
                "coordinationKey": "orders-primary",
            },
            "source": {"configMap": {"name": "orders-schema", "keys": ["schema.sql"]}},
            "policy": {"apply": "Always"},
            "execution": {"failureRetryInterval": "10s"},
        },
    });
    println!("  schema.sql in configmap/orders-schema:");
    for line in DEMO_SCHEMA.lines() {
        println!("    {line}");
    }
    let manager_log = start_manager(harness)?;
    println!(
        "  started ptah-operator; it runs on after the demo (log: {})",
        manager_log.display()
    );
    // Every status write the manager makes, from before the resource exists.
    let config = watcher::Config::default().fields("metadata.name=orders");
    let mut changes = watcher::watcher(schemas.clone(), config).boxed();
    schemas
        .patch("orders", &apply, &Patch::Apply(&schema))
        .await?;
    println!("  applied ptahschema/orders (policy apply: Always)");

    step("the path of phases, as the manager wrote them");
    let started = std::time::Instant::now();
    let mut last = String::new();
    let done = tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(event) = changes.next().await {
            let obj = match event? {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o,
                _ => continue,
            };
            let st = &obj.data["status"];
            let phase = st["phase"].as_str().unwrap_or_default().to_string();
            if !phase.is_empty() && phase != last {
                println!(
                    "  {:>6.1}s  {phase:<21} {}",
                    started.elapsed().as_secs_f64(),
                    phase_words(&phase)
                );
                last = phase.clone();
            }
            if phase == "InSync" || phase == "Blocked" {
                return anyhow::Ok(obj);
            }
        }
        bail!("the watch ended")
    })
    .await
    .with_context(|| {
        format!(
            "ptahschema/orders did not converge within 240s; see {}",
            manager_log.display()
        )
    })??;
    let st = &done.data["status"];

    step("the plan it applied");
    let plan_name = st["applied"]["planName"].as_str().unwrap_or_default();
    println!("  ptahschemaplan/{plan_name}");
    match applied_statements(client, plan_name).await {
        Ok(statements) => {
            for sql in statements {
                for line in sql.lines() {
                    println!("    {line}");
                }
                println!("    ;");
            }
        }
        Err(e) => println!("    (could not read the plan back: {e:#})"),
    }

    step("status: conditions and journal");
    for c in st["conditions"].as_array().into_iter().flatten() {
        println!(
            "  {:<21} {:<5} {:<26} {}",
            c["type"].as_str().unwrap_or_default(),
            c["status"].as_str().unwrap_or_default(),
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        );
    }
    println!();
    for e in st["journal"].as_array().into_iter().flatten() {
        let detail = [
            e["operation"].as_str().map(|o| format!("operation {o}")),
            e["outcome"].as_str().map(|o| format!("outcome {o}")),
            e["reason"].as_str().map(|r| format!("reason {r}")),
            e["planName"].as_str().map(|p| format!("plan {p}")),
            e["jobName"].as_str().map(|j| format!("job {j}")),
        ];
        let detail: Vec<String> = detail.into_iter().flatten().collect();
        println!(
            "  {}  {:<16} {}",
            e["time"].as_str().unwrap_or_default(),
            e["type"].as_str().unwrap_or_default(),
            detail.join(", ")
        );
    }

    step("the change, as its trace (kubectl ptah trace)");
    match tracing_backend(harness, later_build).await? {
        Tracing::Ran => match change_trace(harness, client).await {
            Ok((text, picture)) => {
                for line in text.lines() {
                    println!("  {line}");
                }
                println!("  picture: {}", picture.display());
            }
            Err(e) => println!("  (no trace to show: {e:#})"),
        },
        Tracing::StartedAfter => println!(
            "  the tracing backend runs now; this change's spans left the manager before it \
             did, so the change you make next (below) is the first one traced"
        ),
        Tracing::Absent => println!(
            "  (no tracing backend: `bash conformance/setup.sh demo later` builds it, \
             and `target/debug/ptah-harness up` starts it)"
        ),
    }

    step(&format!(
        "the table, as psql sees it in database {}",
        db.name
    ));
    for line in db.describe("orders")?.lines() {
        println!("  {line}");
    }
    if last != "InSync" {
        bail!("ptahschema/orders ended {last}, not InSync");
    }
    if !db.tables()?.iter().any(|t| t == "orders") {
        bail!(
            "ptahschema/orders is InSync but database {} has no table orders",
            db.name
        );
    }

    Ok(())
}

/// Where the tracing backend was while the demo's change ran.
enum Tracing {
    /// It ran: the change's trace is there to read.
    Ran,
    /// It was built beside the demo and started after the change.
    StartedAfter,
    /// It is not built.
    Absent,
}

/// The build of what the demo uses only after `InSync` (kubectl and the
/// tracing backend) that `demo.sh` runs beside the demo (`setup.sh demo
/// later`): its pid and its log.
pub struct LaterBuild {
    pub pid: i32,
    pub log: std::path::PathBuf,
}

impl LaterBuild {
    /// What `demo.sh` exports: `PTAH_DEMO_LATER_BUILD` (the pid) and
    /// `PTAH_DEMO_LATER_LOG`.
    pub fn from_env() -> Option<Self> {
        Some(Self {
            pid: std::env::var("PTAH_DEMO_LATER_BUILD").ok()?.parse().ok()?,
            log: std::env::var_os("PTAH_DEMO_LATER_LOG")?.into(),
        })
    }
}

/// Where the tracing backend was while the change ran. With a build
/// beside the demo, this waits for it, showing its progress, and starts
/// what it built with `up`.
async fn tracing_backend(harness: &Harness, build: Option<&LaterBuild>) -> anyhow::Result<Tracing> {
    if crate::service::running(&harness.state, crate::jaeger::SERVICE).is_some() {
        return Ok(Tracing::Ran);
    }
    let Some(LaterBuild { pid, log }) = build else {
        return Ok(Tracing::Absent);
    };
    // A build that ended is reaped by the shell that started it.
    let alive = || nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), None).is_ok();
    let started = std::time::Instant::now();
    if alive() {
        println!(
            "  kubectl and the tracing backend (Jaeger) are still building beside the demo, \
             about 6 minutes cold on 2 cores (log: {})",
            log.display()
        );
    }
    let mut shown = String::new();
    while alive() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // build.sh's own progress line, every 15 s.
        let last = std::fs::read_to_string(log)
            .ok()
            .and_then(|text| {
                text.lines()
                    .rev()
                    .find(|l| l.starts_with("[tools"))
                    .map(str::to_string)
            })
            .unwrap_or_default();
        if last != shown {
            println!("  {:>4} s  {last}", started.elapsed().as_secs());
            shown = last;
        }
    }
    if crate::jaeger::binary()?.is_none() {
        bail!("the tracing backend's build failed; see {}", log.display());
    }
    println!("  built; starting it");
    harness.up().await?;
    Ok(Tracing::StartedAfter)
}

/// The service name of the demo's manager.
const MANAGER: &str = "ptah-operator-demo";

/// The demo's manager, as a process of the harness: it runs on after the
/// demo, for the commands the demo ends with, until `ptah-harness down`.
fn start_manager(harness: &Harness) -> anyhow::Result<std::path::PathBuf> {
    use crate::testkit::manager::{ManagerSpec, start_recorded};
    start_recorded(harness, NAMESPACE, MANAGER, &ManagerSpec::default())?;
    Ok(crate::service::log_path(&harness.state, MANAGER))
}

/// The demo's change as `kubectl ptah trace` draws it, read from the
/// harness's Jaeger once its root span arrived; its picture is written to
/// `<state>/demo/change-path.svg`.
async fn change_trace(
    harness: &Harness,
    client: &kube::Client,
) -> anyhow::Result<(String, std::path::PathBuf)> {
    use gitops::resource::Resource;
    use gitops::trace;
    let base = harness.traces_url()?;
    let schemas: Api<operator::api::PtahSchema> = Api::namespaced(client.clone(), NAMESPACE);
    let r = Resource::Schema(Box::new(schemas.get("orders").await?));
    // Spans leave the manager in batches, every few seconds.
    let mut last = None;
    for _ in 0..40 {
        match trace::fetch(&base, &r, 1).await {
            Ok(found) if found.spans.iter().any(|s| s.operation_name == "change") => {
                let view = trace::view(&r, &found);
                let dir = harness.state.join("demo");
                std::fs::create_dir_all(&dir)?;
                let picture = dir.join("change-path.svg");
                std::fs::write(&picture, trace::svg(&view))?;
                return Ok((trace::render(&view), picture));
            }
            Ok(_) => {}
            Err(e) => last = Some(e.message),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!(
        "the trace did not reach {base} within 20s{}",
        last.map(|l| format!(": {l}")).unwrap_or_default()
    )
}

/// The statements of a stored plan, read back from its chunks.
async fn applied_statements(client: &kube::Client, plan: &str) -> anyhow::Result<Vec<String>> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let kind = |k: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("operator.ptah.run", "v1alpha1", k),
            plural,
        )
    };
    let plans: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &kind("PtahSchemaPlan", "ptahschemaplans"),
    );
    let chunks: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &kind("PtahSchemaPlanChunk", "ptahschemaplanchunks"),
    );
    let plan = plans.get(plan).await?;
    let mut bytes = Vec::new();
    for c in plan.data["spec"]["chunks"].as_array().into_iter().flatten() {
        let chunk = chunks.get(c["name"].as_str().unwrap_or_default()).await?;
        let data = chunk.data["spec"]["data"].as_str().unwrap_or_default();
        use base64::Engine as _;
        bytes.extend(base64::engine::general_purpose::STANDARD.decode(data)?);
    }
    let doc: serde_json::Value = serde_json::from_slice(&bytes)?;
    Ok(doc["statements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["sql"].as_str().map(str::to_string))
        .collect())
}

async fn wait_gone(api: &Api<kube::core::DynamicObject>, name: &str) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(60), async {
        while api.get_opt(name).await?.is_some() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::Ok(())
    })
    .await
    .with_context(|| format!("{name} was not deleted within 60s"))?
}
