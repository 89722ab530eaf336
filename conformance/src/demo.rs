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
    println!("  target/debug/ptah-harness down   # stops everything, by pid");
    Ok(())
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
