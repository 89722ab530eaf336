//! The process kubelet under the real control plane: Jobs run by the real
//! Job controller, Pods garbage-collected by the real garbage collector,
//! every outcome read back from the API server or the container's log.
//! Each test works in its own namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PropagationPolicy};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use serde_json::json;

use conformance::harness::{BASE_IMAGE, Harness};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::Patience;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Every wait of these tests: at most [`TIMEOUT`], looking every 200 ms.
const PATIENCE: Patience = Patience::new(TIMEOUT, Duration::from_millis(200));

/// One test's namespace on the shared harness, deleted at the end of the
/// test, also when it fails (see [`TestNamespace`]).
struct Scope {
    harness: &'static Harness,
    ns: String,
    namespace: TestNamespace,
}

impl std::ops::Deref for Scope {
    type Target = TestNamespace;
    fn deref(&self) -> &TestNamespace {
        &self.namespace
    }
}

impl Scope {
    async fn new(test: &str) -> anyhow::Result<Scope> {
        let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
        // Pods are refused until the namespace has its default ServiceAccount.
        let namespace = TestNamespace::new(
            harness,
            "kj",
            test,
            NamespaceSpec::default().with_service_account(TIMEOUT),
        )
        .await?;
        Ok(Scope {
            harness,
            ns: namespace.name().to_owned(),
            namespace,
        })
    }

    /// A Job running `containers` (and `init`) on the base image, never retried.
    async fn job(&self, name: &str, pod_spec: serde_json::Value) -> anyhow::Result<Job> {
        let mut spec = pod_spec;
        spec["restartPolicy"] = json!("Never");
        self.create(json!({
            "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": spec}}
        }))
        .await
    }

    /// The (first) Pod of a Job, once the Job controller made it.
    async fn job_pod(&self, job: &str) -> anyhow::Result<Pod> {
        let pods = self.api::<Pod>();
        let lp = ListParams::default().labels(&format!("job-name={job}"));
        PATIENCE
            .poll(&format!("a pod of job {job}"), || async {
                Ok(pods.list(&lp).await?.items.into_iter().next())
            })
            .await
    }

    async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        cond: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        let found = PATIENCE
            .wait(
                what,
                await_condition(self.api::<Pod>(), name, move |p: Option<&Pod>| {
                    p.is_some_and(&cond)
                }),
            )
            .await?;
        found.context("pod vanished")
    }

    async fn wait_job_condition(&self, name: &str, type_: &str) -> anyhow::Result<Job> {
        let t = type_.to_string();
        let job = PATIENCE
            .wait(
                &format!("job {name} {type_}"),
                await_condition(self.api::<Job>(), name, move |j: Option<&Job>| {
                    job_condition(j, &t).is_some()
                }),
            )
            .await?;
        job.context("job vanished")
    }

    fn log(&self, pod: &Pod, container: &str) -> PathBuf {
        conformance::kubelet::log_path(&self.harness.kubelet_dir(), pod, container)
    }

    fn read_log(&self, pod: &Pod, container: &str) -> anyhow::Result<String> {
        let path = self.log(pod, container);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// The end of a test: its namespace goes (see `Drop`).
    async fn end(self) -> anyhow::Result<()> {
        Ok(())
    }
}

fn job_condition<'a>(
    job: Option<&'a Job>,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job?.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

fn status_of<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    st.container_statuses
        .iter()
        .flatten()
        .chain(st.init_container_statuses.iter().flatten())
        .find(|s| s.name == container)
}

fn terminated(
    pod: &Pod,
    container: &str,
) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    status_of(pod, container)?
        .state
        .as_ref()?
        .terminated
        .clone()
}

fn waiting(
    pod: &Pod,
    container: &str,
) -> Option<k8s_openapi::api::core::v1::ContainerStateWaiting> {
    status_of(pod, container)?.state.as_ref()?.waiting.clone()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// `KEY=value` lines of a log.
fn pairs(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sh(script: &str) -> serde_json::Value {
    json!(["sh", "-c", script])
}

#[tokio::test]
async fn a_job_that_runs_a_binary_to_completion_is_complete() -> anyhow::Result<()> {
    let s = Scope::new("complete").await?;
    s.job(
        "hello",
        json!({"containers": [{"name": "main", "image": BASE_IMAGE,
            "command": ["/bin/echo", "hello from the process kubelet"]}]}),
    )
    .await?;
    s.wait_job_condition("hello", "Complete").await?;
    let pod = s.job_pod("hello").await?;
    assert_eq!(phase(&pod), "Succeeded");
    let t = terminated(&pod, "main").context("main terminated")?;
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    assert!(t.started_at.is_some() && t.finished_at.is_some());
    let st = pod.status.as_ref().context("status")?;
    // An address of its own (kubelet_network.rs shows what it is for).
    let ip = st.pod_ip.as_deref().context("podIP")?.parse()?;
    assert!(
        conformance::kubelet::network::PodNetwork::DEFAULT.contains(ip),
        "{ip}"
    );
    assert!(st.start_time.is_some());
    let ready = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .context("Ready condition")?;
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodCompleted"))
    );
    assert_eq!(
        s.read_log(&pod, "main")?,
        "hello from the process kubelet\n"
    );
    s.end().await
}

#[tokio::test]
async fn a_failing_job_fails_and_its_pod_shows_exit_codes_and_termination_messages()
-> anyhow::Result<()> {
    let s = Scope::new("failing").await?;
    s.job(
        "broken",
        json!({"containers": [
            {"name": "file", "image": BASE_IMAGE,
             "command": sh("echo 'bad input: line 3' > /dev/termination-log; exit 3")},
            {"name": "logs", "image": BASE_IMAGE, "terminationMessagePolicy": "FallbackToLogsOnError",
             "command": sh("echo first words; echo last words >&2; exit 4")},
            {"name": "custom-path", "image": BASE_IMAGE, "terminationMessagePath": "/tmp/why",
             "command": sh("printf 'custom path' > /tmp/why; exit 5")}
        ]}),
    )
    .await?;
    let job = s.wait_job_condition("broken", "Failed").await?;
    assert_eq!(
        job_condition(Some(&job), "Failed").and_then(|c| c.reason.as_deref()),
        Some("BackoffLimitExceeded")
    );
    let pod = s.job_pod("broken").await?;
    assert_eq!(phase(&pod), "Failed");
    let file = terminated(&pod, "file").context("file terminated")?;
    assert_eq!(file.exit_code, 3);
    assert_eq!(file.reason.as_deref(), Some("Error"));
    assert_eq!(file.message.as_deref(), Some("bad input: line 3\n"));
    let logs = terminated(&pod, "logs").context("logs terminated")?;
    assert_eq!(logs.exit_code, 4);
    assert_eq!(logs.message.as_deref(), Some("first words\nlast words\n"));
    let custom = terminated(&pod, "custom-path").context("custom terminated")?;
    assert_eq!(
        (custom.exit_code, custom.message.as_deref()),
        (5, Some("custom path"))
    );
    s.end().await
}

#[tokio::test]
async fn init_containers_run_in_order_and_a_failing_one_stops_the_pod() -> anyhow::Result<()> {
    let s = Scope::new("init").await?;
    let volume = json!([{"name": "work", "emptyDir": {}}]);
    let mount = json!([{"name": "work", "mountPath": "/work"}]);
    s.job(
        "ordered",
        json!({"volumes": volume, "initContainers": [
            {"name": "first", "image": BASE_IMAGE, "volumeMounts": mount,
             "command": sh("sleep 1; echo first >> /work/order")},
            {"name": "second", "image": BASE_IMAGE, "volumeMounts": mount,
             "command": sh("echo second >> /work/order")}
        ], "containers": [
            {"name": "main", "image": BASE_IMAGE, "volumeMounts": mount,
             "command": sh("echo main >> /work/order; cat /work/order")}
        ]}),
    )
    .await?;
    s.wait_job_condition("ordered", "Complete").await?;
    let pod = s.job_pod("ordered").await?;
    assert_eq!(s.read_log(&pod, "main")?, "first\nsecond\nmain\n");
    let first = terminated(&pod, "first").context("first")?;
    let second = terminated(&pod, "second").context("second")?;
    let main = terminated(&pod, "main").context("main")?;
    assert!(first.finished_at <= second.started_at);
    assert!(second.finished_at <= main.started_at);

    s.job(
        "blocked",
        json!({"initContainers": [
            {"name": "gate", "image": BASE_IMAGE, "command": sh("echo refusing; exit 7")},
            {"name": "after", "image": BASE_IMAGE, "command": sh("echo never")}
        ], "containers": [
            {"name": "main", "image": BASE_IMAGE, "command": sh("echo never")}
        ]}),
    )
    .await?;
    s.wait_job_condition("blocked", "Failed").await?;
    let pod = s.job_pod("blocked").await?;
    let pod = s
        .wait_pod(
            pod.metadata.name.as_deref().unwrap_or_default(),
            "pod Failed",
            |p| phase(p) == "Failed",
        )
        .await?;
    assert_eq!(terminated(&pod, "gate").map(|t| t.exit_code), Some(7));
    for never in ["after", "main"] {
        let w = waiting(&pod, never).with_context(|| format!("{never} waiting"))?;
        assert_eq!(w.reason.as_deref(), Some("PodInitializing"));
        assert!(!s.log(&pod, never).exists(), "{never} must never start");
    }
    let initialized = pod
        .status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Initialized"))
        .context("Initialized")?;
    assert_eq!(initialized.status, "False");
    assert_eq!(
        initialized.message.as_deref(),
        Some("containers with incomplete status: [gate after]")
    );
    s.end().await
}

#[tokio::test]
async fn env_comes_from_values_secrets_config_maps_and_the_pod() -> anyhow::Result<()> {
    let s = Scope::new("env").await?;
    s.create::<Secret>(json!({"metadata": {"name": "creds"},
        "stringData": {"password": "s3cret", "user": "ptah"}}))
        .await?;
    s.create::<ConfigMap>(json!({"metadata": {"name": "settings"},
        "data": {"color": "blue", "size": "L"}}))
        .await?;
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    s.create::<Job>(json!({
        "metadata": {"name": "env"},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"app": "env-test"}, "annotations": {"note": "hello there"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": BASE_IMAGE, "command": sh("env"),
                "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                            {"secretRef": {"name": "creds"}}],
                "env": [
                    {"name": "PLAIN", "value": "plain value"},
                    {"name": "EXPANDED", "value": "$(PLAIN) and $(CFG_color), not $$(PLAIN)"},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}},
                    {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
                    {"name": "POD_NAME", "valueFrom": field("metadata.name")},
                    {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
                    {"name": "POD_UID", "valueFrom": field("metadata.uid")},
                    {"name": "APP", "valueFrom": field("metadata.labels['app']")},
                    {"name": "NOTE", "valueFrom": field("metadata.annotations['note']")},
                    {"name": "NODE", "valueFrom": field("spec.nodeName")},
                    {"name": "SA", "valueFrom": field("spec.serviceAccountName")},
                    {"name": "POD_IP", "valueFrom": field("status.podIP")}
                ]}]}}}
    }))
    .await?;
    s.wait_job_condition("env", "Complete").await?;
    let pod = s.job_pod("env").await?;
    let env = pairs(&s.read_log(&pod, "main")?);
    let get = |k: &str| env.get(k).map(String::as_str);
    assert_eq!(get("PLAIN"), Some("plain value"));
    assert_eq!(get("EXPANDED"), Some("plain value and blue, not $(PLAIN)"));
    assert_eq!(get("PASSWORD"), Some("s3cret"));
    assert_eq!(get("user"), Some("ptah"));
    assert_eq!(get("COLOR"), Some("blue"));
    assert_eq!(get("CFG_size"), Some("L"));
    assert_eq!(get("OPTIONAL"), None);
    assert_eq!(get("POD_NAME"), pod.metadata.name.as_deref());
    assert_eq!(get("POD_NAMESPACE"), Some(s.ns.as_str()));
    assert_eq!(get("POD_UID"), pod.metadata.uid.as_deref());
    assert_eq!(get("APP"), Some("env-test"));
    assert_eq!(get("NOTE"), Some("hello there"));
    assert_eq!(get("NODE"), Some(conformance::harness::NODE_NAME));
    assert_eq!(get("SA"), Some("default"));
    let pod_ip = pod.status.as_ref().and_then(|st| st.pod_ip.as_deref());
    assert!(pod_ip.is_some_and(|ip| ip != "127.0.0.1"), "{pod_ip:?}");
    assert_eq!(get("POD_IP"), pod_ip);
    // The API server as a pod reaches it.
    assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("127.0.0.1"));
    assert_eq!(get("HOSTNAME"), pod.metadata.name.as_deref());
    s.end().await
}

#[tokio::test]
async fn volumes_appear_at_their_paths_read_only_where_asked() -> anyhow::Result<()> {
    let s = Scope::new("volumes").await?;
    s.create::<ConfigMap>(json!({"metadata": {"name": "app"},
        "data": {"app.conf": "level=debug\n", "other": "x"}}))
        .await?;
    s.create::<Secret>(json!({"metadata": {"name": "db"}, "stringData": {"password": "pw"}}))
        .await?;
    let script = r#"
        check() { if eval "$2" >/dev/null 2>&1; then echo "$1=yes"; else echo "$1=no"; fi; }
        echo "conf=$(cat /etc/app/app.conf)"
        echo "conf-mode=$(stat -L -c %a /etc/app/app.conf)"
        check other-key-absent '! test -e /etc/app/other'
        echo "subpath=$(cat /srv/only.conf)"
        echo "secret=$(cat /secrets/password)"
        echo "secret-mode=$(stat -L -c %a /secrets/password)"
        check configmap-writable 'touch /etc/app/new'
        check scratch-writable 'echo hi > /scratch/x && test "$(cat /scratch/x)" = hi'
        check scratch-ro-writable 'touch /scratch-ro/y'
        check scratch-ro-sees-write 'test -e /scratch-ro/x'
        echo "memory-fs=$(stat -f -c %T /memory)"
        echo "ns=$(cat /projected/namespace)"
        echo "tier-label=$(grep '^tier=' /projected/labels)"
        echo "ca=$(head -c 27 /projected/ca.crt)"
        echo "token=$(cat /projected/token)"
        echo "sa-token=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token)"
    "#;
    s.create::<Job>(json!({
        "metadata": {"name": "volumes"},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"tier": "test"}},
            "spec": {"restartPolicy": "Never",
            "volumes": [
                {"name": "app", "configMap": {"name": "app", "items": [{"key": "app.conf", "path": "app.conf", "mode": 0o600}]}},
                {"name": "whole-app", "configMap": {"name": "app"}},
                {"name": "db", "secret": {"secretName": "db", "defaultMode": 0o400}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "memory", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                {"name": "projected", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "ptah-test", "expirationSeconds": 600}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [
                        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
                    ]}}
                ]}}
            ],
            "containers": [{"name": "main", "image": BASE_IMAGE, "command": sh(script),
                "volumeMounts": [
                    {"name": "app", "mountPath": "/etc/app"},
                    {"name": "whole-app", "mountPath": "/srv/only.conf", "subPath": "app.conf"},
                    {"name": "db", "mountPath": "/secrets"},
                    {"name": "scratch", "mountPath": "/scratch"},
                    {"name": "scratch", "mountPath": "/scratch-ro", "readOnly": true},
                    {"name": "memory", "mountPath": "/memory"},
                    {"name": "projected", "mountPath": "/projected"}
                ]}]}}}
    }))
    .await?;
    s.wait_job_condition("volumes", "Complete").await?;
    let pod = s.job_pod("volumes").await?;
    let log = s.read_log(&pod, "main")?;
    let v = pairs(&log);
    let get = |k: &str| v.get(k).map(String::as_str).unwrap_or("<missing>");
    assert_eq!(get("conf"), "level=debug", "{log}");
    assert_eq!(get("conf-mode"), "600");
    assert_eq!(get("other-key-absent"), "yes");
    assert_eq!(get("subpath"), "level=debug");
    assert_eq!(get("secret"), "pw");
    assert_eq!(get("secret-mode"), "400");
    assert_eq!(get("configmap-writable"), "no");
    assert_eq!(get("scratch-writable"), "yes");
    assert_eq!(get("scratch-ro-writable"), "no");
    assert_eq!(get("scratch-ro-sees-write"), "yes");
    assert_eq!(get("memory-fs"), "tmpfs");
    assert_eq!(get("ns"), s.ns);
    assert_eq!(get("tier-label"), "tier=\"test\"", "{log}");
    assert_eq!(get("ca"), "-----BEGIN CERTIFICATE-----");

    // The projected token is a JWT minted for the audience asked for and
    // bound to this pod; the default one is for the API server.
    let claims = |token: &str| -> anyhow::Result<serde_json::Value> {
        let payload = token.split('.').nth(1).context("not a JWT")?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload)?;
        Ok(serde_json::from_slice(&bytes)?)
    };
    let token = claims(get("token"))?;
    assert_eq!(token["aud"], json!(["ptah-test"]), "{token}");
    assert_eq!(
        token["kubernetes.io"]["pod"]["uid"].as_str(),
        pod.metadata.uid.as_deref()
    );
    let lifetime = token["exp"].as_i64().unwrap_or(0) - token["iat"].as_i64().unwrap_or(0);
    assert_eq!(lifetime, 600);
    let default = claims(get("sa-token"))?;
    assert_eq!(
        default["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    s.end().await
}

#[tokio::test]
async fn a_missing_secret_key_leaves_the_pod_waiting_until_it_appears() -> anyhow::Result<()> {
    let s = Scope::new("configerr").await?;
    s.create::<Secret>(json!({"metadata": {"name": "partial"}, "stringData": {"a": "1"}}))
        .await?;
    s.job(
        "needs-key",
        json!({"containers": [{"name": "main", "image": BASE_IMAGE, "command": sh("echo B=$B"),
            "env": [{"name": "B", "valueFrom": {"secretKeyRef": {"name": "partial", "key": "b"}}}]}]}),
    )
    .await?;
    let pod = s.job_pod("needs-key").await?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let pod = s
        .wait_pod(&name, "CreateContainerConfigError", |p| {
            waiting(p, "main").and_then(|w| w.reason).as_deref()
                == Some("CreateContainerConfigError")
        })
        .await?;
    let w = waiting(&pod, "main").context("waiting")?;
    assert_eq!(
        w.message.as_deref(),
        Some(format!("couldn't find key b in Secret {}/partial", s.ns).as_str())
    );
    assert_eq!(phase(&pod), "Pending");
    assert!(!s.log(&pod, "main").exists());

    // The kubelet retries: once the key exists, the container runs.
    s.api::<Secret>()
        .patch(
            "partial",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"b": "2"}})),
        )
        .await?;
    s.wait_job_condition("needs-key", "Complete").await?;
    assert_eq!(s.read_log(&pod, "main")?, "B=2\n");
    s.end().await
}

#[tokio::test]
async fn job_active_deadline_stops_the_pod_and_fails_the_job() -> anyhow::Result<()> {
    let s = Scope::new("jobdeadline").await?;
    s.create::<Job>(json!({
        "metadata": {"name": "slow"},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 3, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": BASE_IMAGE,
                "command": sh("trap 'echo stopped by SIGTERM; exit 143' TERM; echo started; while true; do sleep 1; done")}]}}}
    }))
    .await?;
    let pod = s.job_pod("slow").await?;
    let job = s.wait_job_condition("slow", "Failed").await?;
    assert_eq!(
        job_condition(Some(&job), "Failed").and_then(|c| c.reason.as_deref()),
        Some("DeadlineExceeded")
    );
    // The Job controller deletes its pod; the kubelet stops it and removes it.
    PATIENCE
        .wait(
            "the job's pod to be gone",
            await_condition(
                s.api::<Pod>(),
                pod.metadata.name.as_deref().unwrap_or_default(),
                conditions::is_deleted(pod.metadata.uid.as_deref().unwrap_or_default()),
            ),
        )
        .await?;
    assert_eq!(s.read_log(&pod, "main")?, "started\nstopped by SIGTERM\n");
    s.end().await
}

#[tokio::test]
async fn pod_active_deadline_fails_the_pod_with_deadline_exceeded() -> anyhow::Result<()> {
    let s = Scope::new("poddeadline").await?;
    s.job(
        "pod-deadline",
        json!({"activeDeadlineSeconds": 4, "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": BASE_IMAGE, "command": ["sleep", "600"]}]}),
    )
    .await?;
    let pod = s.job_pod("pod-deadline").await?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    s.wait_pod(&name, "pod Running", |p| phase(p) == "Running")
        .await?;
    let pod = s
        .wait_pod(&name, "pod Failed", |p| phase(p) == "Failed")
        .await?;
    let st = pod.status.as_ref().context("status")?;
    assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
    let t = terminated(&pod, "main").context("main terminated")?;
    assert_eq!(t.exit_code, 143, "sleep dies of the SIGTERM");
    s.wait_job_condition("pod-deadline", "Failed").await?;
    s.end().await
}

async fn owner_deletion_removes_job_and_pod(
    policy: PropagationPolicy,
    tag: &str,
) -> anyhow::Result<()> {
    let s = Scope::new(tag).await?;
    let owner: ConfigMap = s.create(json!({"metadata": {"name": "owner"}})).await?;
    s.create::<Job>(json!({
        "metadata": {"name": "owned", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid, "blockOwnerDeletion": true}]},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": BASE_IMAGE, "command": ["sleep", "600"]}]}}}
    }))
    .await?;
    let pod = s.job_pod("owned").await?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let pod = s
        .wait_pod(&pod_name, "pod Running", |p| phase(p) == "Running")
        .await?;
    let job: Job = s.api::<Job>().get("owned").await?;
    s.api::<ConfigMap>()
        .delete(
            "owner",
            &DeleteParams {
                propagation_policy: Some(policy),
                ..DeleteParams::default()
            },
        )
        .await?;
    PATIENCE
        .wait(
            "the job to be collected",
            await_condition(
                s.api::<Job>(),
                "owned",
                conditions::is_deleted(job.metadata.uid.as_deref().unwrap_or_default()),
            ),
        )
        .await?;
    PATIENCE
        .wait(
            "the pod to be collected",
            await_condition(
                s.api::<Pod>(),
                &pod_name,
                conditions::is_deleted(pod.metadata.uid.as_deref().unwrap_or_default()),
            ),
        )
        .await?;
    PATIENCE
        .wait(
            "the owner to be gone",
            await_condition(
                s.api::<ConfigMap>(),
                "owner",
                conditions::is_deleted(owner.metadata.uid.as_deref().unwrap_or_default()),
            ),
        )
        .await?;
    s.end().await
}

#[tokio::test]
async fn deleting_the_owner_in_the_background_collects_job_and_pod() -> anyhow::Result<()> {
    owner_deletion_removes_job_and_pod(PropagationPolicy::Background, "gc-bg").await
}

#[tokio::test]
async fn deleting_the_owner_in_the_foreground_collects_job_and_pod() -> anyhow::Result<()> {
    owner_deletion_removes_job_and_pod(PropagationPolicy::Foreground, "gc-fg").await
}

/// Deletes a running pod and returns its last status before it vanished
/// and how long the deletion took.
async fn delete_and_watch(s: &Scope, name: &str) -> anyhow::Result<(Pod, Duration)> {
    let pods = s.api::<Pod>();
    let mut stream = Box::pin(watcher::watch_object(pods.clone(), name));
    // The current state first, so the watch is established before deleting.
    let first = PATIENCE
        .wait("the pod's watch", async {
            stream.next().await.context("watch ended")
        })
        .await??;
    let mut last = first.with_context(|| format!("pod {name} is not there"))?;
    let started = Instant::now();
    pods.delete(name, &DeleteParams::default()).await?;
    loop {
        match PATIENCE
            .wait("the pod to be gone", async {
                stream.next().await.context("watch ended")
            })
            .await??
        {
            Some(p) => last = p,
            None => return Ok((last, started.elapsed())),
        }
    }
}

#[tokio::test]
async fn deleting_a_running_pod_sends_sigterm_then_sigkill_after_the_grace_period()
-> anyhow::Result<()> {
    let s = Scope::new("delete").await?;
    let pod_with = |name: &str, grace: i64, script: &str| {
        json!({"metadata": {"name": name}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": BASE_IMAGE, "command": sh(script)}]}})
    };
    // A container that leaves on SIGTERM: gone long before its 30 s grace.
    let polite: Pod = s
        .create(pod_with(
            "polite",
            30,
            "trap 'echo got SIGTERM; exit 0' TERM; echo ready; while true; do sleep 1; done",
        ))
        .await?;
    // A container that ignores SIGTERM: killed when its 3 s grace is over.
    let stubborn: Pod = s
        .create(pod_with(
            "stubborn",
            3,
            "trap 'echo ignoring SIGTERM' TERM; echo ready; while true; do sleep 1; done",
        ))
        .await?;
    for p in [&polite, &stubborn] {
        let name = p.metadata.name.clone().unwrap_or_default();
        s.wait_pod(&name, "pod Running", |p| phase(p) == "Running")
            .await?;
        let log = s.log(p, "main");
        PATIENCE
            .poll("the container to be ready", || async {
                Ok(std::fs::read_to_string(&log)
                    .ok()
                    .filter(|l| l.contains("ready"))
                    .map(|_| ()))
            })
            .await?;
    }
    let (last, took) = delete_and_watch(&s, "polite").await?;
    let t = terminated(&last, "main").context("polite terminated before deletion")?;
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(s.read_log(&polite, "main")?, "ready\ngot SIGTERM\n");

    let (last, took) = delete_and_watch(&s, "stubborn").await?;
    let t = terminated(&last, "main").context("stubborn terminated before deletion")?;
    assert_eq!(t.exit_code, 137, "killed by SIGKILL");
    assert_eq!(phase(&last), "Failed");
    assert!(took >= Duration::from_secs(2), "took only {took:?}");
    let log = s.read_log(&stubborn, "main")?;
    assert!(
        log.starts_with("ready\n") && log.contains("ignoring SIGTERM"),
        "{log}"
    );
    s.end().await
}

#[tokio::test]
async fn security_context_sets_user_groups_and_a_read_only_root() -> anyhow::Result<()> {
    let s = Scope::new("security").await?;
    let script = r#"
        echo "uid=$(id -u)"
        echo "gid=$(id -g)"
        echo "groups=$(id -G)"
        if touch /rootfile 2>/dev/null; then echo root=writable; else echo root=read-only; fi
        if touch /tmp/x 2>/dev/null; then echo tmp=writable; else echo tmp=read-only; fi
        echo data > /data/file && echo "data-group=$(stat -c %g /data)"
    "#;
    s.job(
        "secure",
        json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{"name": "main", "image": BASE_IMAGE, "command": sh(script),
                "securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}),
    )
    .await?;
    s.wait_job_condition("secure", "Complete").await?;
    let pod = s.job_pod("secure").await?;
    let log = s.read_log(&pod, "main")?;
    let v = pairs(&log);
    let get = |k: &str| v.get(k).map(String::as_str).unwrap_or("<missing>");
    assert_eq!(get("uid"), "1000", "{log}");
    assert_eq!(get("gid"), "3000");
    assert!(get("groups").split(' ').any(|g| g == "2000"), "{log}");
    assert_eq!(get("root"), "read-only");
    assert_eq!(get("tmp"), "read-only");
    assert_eq!(get("data-group"), "2000");
    s.end().await
}

#[tokio::test]
async fn what_cannot_run_is_reported_not_hidden() -> anyhow::Result<()> {
    let s = Scope::new("cannotrun").await?;
    let pod = |name: &str, container: serde_json::Value| json!({"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}});
    s.create::<Pod>(pod(
        "no-image",
        json!({"name": "main", "image": "example.com/none:1", "command": ["true"]}),
    ))
    .await?;
    s.create::<Pod>(pod(
        "no-command",
        json!({"name": "main", "image": BASE_IMAGE}),
    ))
    .await?;
    s.create::<Pod>(pod(
        "no-binary",
        json!({"name": "main", "image": BASE_IMAGE, "command": ["no-such-program"]}),
    ))
    .await?;
    let p = s
        .wait_pod("no-image", "ErrImagePull", |p| {
            waiting(p, "main").and_then(|w| w.reason).as_deref() == Some("ErrImagePull")
        })
        .await?;
    assert!(
        waiting(&p, "main")
            .and_then(|w| w.message)
            .is_some_and(|m| m.contains("example.com/none:1"))
    );
    let p = s
        .wait_pod("no-command", "Failed", |p| phase(p) == "Failed")
        .await?;
    let t = terminated(&p, "main").context("terminated")?;
    assert_eq!(t.reason.as_deref(), Some("ContainerCannotRun"));
    assert!(t.message.is_some_and(|m| m.contains("no command")));
    let p = s
        .wait_pod("no-binary", "Failed", |p| phase(p) == "Failed")
        .await?;
    let t = terminated(&p, "main").context("terminated")?;
    assert_eq!(t.reason.as_deref(), Some("ContainerCannotRun"));
    assert_eq!(
        t.message.as_deref(),
        Some("exec: \"no-such-program\": executable file not found in $PATH")
    );
    s.end().await
}
