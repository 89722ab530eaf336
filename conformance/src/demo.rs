//! `ptah-harness demo`: shows the local control plane working — the node the
//! process kubelet registered, a Job run by the real Job controller in the
//! executor image, and both databases answering.

use std::process::Command;
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

pub async fn run(harness: &Harness) -> anyhow::Result<()> {
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

    operator(harness, &client).await?;

    step("the databases (credentials stay in the harness's secrets directory)");
    let pg = url_parts(&std::fs::read_to_string(
        harness.secret_file("postgres.url"),
    )?)?;
    // Passwords go through the environment, never a command line `ps` shows.
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port,
            "-U",
            &pg.user,
            "-d",
            "postgres",
        ])
        .args(["-At", "-c", "select version()"])
        .env("PGPASSWORD", &pg.password)
        .output()?;
    println!(
        "  PostgreSQL: {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    let maria = url_parts(&std::fs::read_to_string(
        harness.secret_file("mariadb.url"),
    )?)?;
    let out = Command::new("mariadb")
        .args([
            "-h",
            "127.0.0.1",
            "-P",
            &maria.port,
            "-u",
            &maria.user,
            "-N",
            "-e",
            "select version()",
        ])
        .env("MYSQL_PWD", &maria.password)
        .output()?;
    println!(
        "  MariaDB:    {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );

    step("next");
    println!(
        "  source {}   # KUBECONFIG and the rest",
        harness.env_file().display()
    );
    println!("  kubectl get nodes,pods -A");
    println!("  kubectl get ptah -n {NAMESPACE}   # the operator's resources");
    println!("  target/debug/ptah-harness down   # stops everything, by pid");
    Ok(())
}

/// The operator on the harness: a PtahSchema whose schema is a ConfigMap,
/// driven by a real manager process as far as the harness goes without the
/// Ptah executor (docs/executor.md).
async fn operator(harness: &Harness, client: &kube::Client) -> anyhow::Result<()> {
    use crate::testkit::manager::{Manager, ManagerSpec};
    use kube::api::{Patch, PatchParams};
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

    step("the operator: a PtahSchema whose declared schema is a ConfigMap");
    let apply = PatchParams::apply("ptah-harness-demo").force();
    let url = std::fs::read_to_string(harness.secret_file("postgres.url"))?;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), NAMESPACE);
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "orders-db"},
        "stringData": {"url": url.trim()},
    });
    secrets
        .patch("orders-db", &apply, &Patch::Apply(&secret))
        .await?;
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NAMESPACE);
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "orders-schema"},
        "data": {"schema.sql": "CREATE TABLE public.orders (id bigint PRIMARY KEY);\n"},
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
            "policy": {"apply": "OnApproval"},
            "execution": {"failureRetryInterval": "1h"},
        },
    });
    schemas
        .patch("orders", &apply, &Patch::Apply(&schema))
        .await?;
    println!("  applied secret/orders-db, configmap/orders-schema, ptahschema/orders");
    let manager = Manager::start_in(harness, NAMESPACE, &ManagerSpec::default())?;
    println!(
        "  started ptah-operator (log: {})",
        manager.log_path().display()
    );

    // The manager snapshots the ConfigMap, claims Observe, creates its one
    // Job; the runner delivers its result to the manager's receiver.
    let observed = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let s = schemas.get("orders").await?;
            let failed = s.data["status"]["journal"]
                .as_array()
                .is_some_and(|j| j.iter().any(|e| e["type"] == "OperationFailed"));
            if failed {
                return anyhow::Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await
    .with_context(|| {
        format!(
            "the Observe read did not end within 90s; see {}",
            manager.log_path().display()
        )
    })??;

    println!("  the path the machine took (from the manager's log):");
    let mut last = String::new();
    for line in manager.log().lines() {
        if let Some(job) = line.split("job=").nth(1) {
            println!(
                "    {:<60}    created job/{}",
                "",
                job.split_whitespace().next().unwrap_or_default()
            );
            continue;
        }
        let Some(obs) = line.split("observation=").nth(1) else {
            continue;
        };
        let phase = obs.rsplit("phase=").next().unwrap_or_default().trim();
        let phase = phase
            .strip_prefix("Some(")
            .and_then(|p| p.strip_suffix(')'))
            .unwrap_or("(no phase yet)");
        let what = obs.split(" phase=").next().unwrap_or_default();
        let what: String = what.chars().take(60).collect();
        if phase != last && !what.starts_with("Realm(Ok)") {
            println!("    {what:<60} -> {phase}");
            last = phase.to_string();
        }
    }
    let st = &observed.data["status"];
    println!(
        "  status.phase:            {}",
        st["phase"].as_str().unwrap_or("-")
    );
    println!(
        "  status.source.revision:  {}",
        st["source"]["revision"].as_str().unwrap_or("-")
    );
    println!(
        "  the snapshot:            configmap/{}",
        st["source"]["configMap"]["snapshotName"]
            .as_str()
            .unwrap_or("-")
    );
    for c in st["conditions"].as_array().into_iter().flatten() {
        println!(
            "  condition {:<21} {:<5} {}  {}",
            c["type"].as_str().unwrap_or_default(),
            c["status"].as_str().unwrap_or_default(),
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        );
    }
    for e in st["journal"].as_array().into_iter().flatten() {
        println!(
            "  journal {} {} {} job/{}",
            e["time"].as_str().unwrap_or_default(),
            e["type"].as_str().unwrap_or_default(),
            e["reason"].as_str().unwrap_or_default(),
            e["jobName"].as_str().unwrap_or_default()
        );
    }
    println!("  (the Observe read needs the Ptah executor, which this machine cannot fetch)");

    // Deleted while the manager runs, so it lets its finalizer go.
    schemas.delete("orders", &DeleteParams::default()).await?;
    wait_gone(&schemas, "orders").await?;
    drop(manager);
    Ok(())
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

struct UrlParts {
    user: String,
    password: String,
    port: String,
}

/// user, password and port of a `scheme://user:password@host:port/db` URL
/// (the harness writes them without escapes).
fn url_parts(url: &str) -> anyhow::Result<UrlParts> {
    let (_, rest) = url
        .trim()
        .split_once("://")
        .context("the URL file does not hold a URL")?;
    let (creds, host) = rest.split_once('@').context("no credentials in the URL")?;
    let (user, password) = creds.split_once(':').context("no password in the URL")?;
    let host = host.split('/').next().unwrap_or_default();
    let (_, port) = host.rsplit_once(':').context("no port in the URL")?;
    Ok(UrlParts {
        user: user.into(),
        password: password.into(),
        port: port.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parts_reads_user_password_and_port() {
        let p = url_parts("mysql://ptah:s3cret@127.0.0.1:3307/mysql\n").unwrap();
        assert_eq!(
            (p.user.as_str(), p.password.as_str(), p.port.as_str()),
            ("ptah", "s3cret", "3307")
        );
        let p =
            url_parts("postgres://postgres:pw@127.0.0.1:5433/postgres?sslmode=disable").unwrap();
        assert_eq!(p.port, "5433");
    }

    #[test]
    fn url_parts_refuses_a_url_without_credentials() {
        let err = url_parts("postgres://127.0.0.1:5432/db").err().unwrap();
        assert!(err.to_string().contains("credentials"), "{err}");
    }
}
