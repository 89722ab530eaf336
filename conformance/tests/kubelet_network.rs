//! Addresses and names on the harness, as a cluster shows them to Pods:
//! each Pod its own IP (two servers bind one port), a Service name that
//! resolves in a Pod to the ready endpoints of its EndpointSlices (filled by
//! the real EndpointSlice controller) and follows them, and the API server
//! calling a webhook at its Service's endpoint. Every Pod runs host programs
//! (`python3`, `getent`, `curl`) on the base image. Each test works in its
//! own namespace.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use conformance::harness::{BASE_IMAGE, Harness};
use conformance::kubelet::network::PodNetwork;
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::wait::Patience;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Every wait of these tests: at most [`TIMEOUT`], looking every 200 ms.
const PATIENCE: Patience = Patience::new(TIMEOUT, Duration::from_millis(200));

/// One test's namespace on the shared harness, deleted at the end.
struct Scope {
    harness: &'static Harness,
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
        let namespace = TestNamespace::new(
            harness,
            "kn",
            test,
            NamespaceSpec::default().with_service_account(TIMEOUT),
        )
        .await?;
        Ok(Scope { harness, namespace })
    }

    fn ns(&self) -> &str {
        self.namespace.name()
    }

    async fn running(&self, name: &str) -> anyhow::Result<Pod> {
        let found = PATIENCE
            .wait(
                &format!("pod {name} Running and Ready"),
                await_condition(self.api::<Pod>(), name, |p: Option<&Pod>| {
                    p.is_some_and(|p| phase(p) == "Running" && ready(p))
                }),
            )
            .await?;
        found.context("pod vanished")
    }

    fn log(&self, pod: &Pod, container: &str) -> PathBuf {
        conformance::kubelet::log_path(&self.harness.kubelet_dir(), pod, container)
    }

    fn read_log(&self, pod: &Pod, container: &str) -> String {
        std::fs::read_to_string(self.log(pod, container)).unwrap_or_default()
    }

    /// The ready addresses the EndpointSlices of Service `svc` hold, once
    /// they are exactly `want`.
    async fn endpoints_become(&self, svc: &str, want: &BTreeSet<String>) -> anyhow::Result<()> {
        let slices = self.api::<EndpointSlice>();
        let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"));
        PATIENCE
            .poll(
                &format!("EndpointSlices of {svc} ready at {want:?}"),
                || {
                    let (slices, lp) = (slices.clone(), lp.clone());
                    async move {
                        let ready: BTreeSet<String> = slices
                            .list(&lp)
                            .await?
                            .items
                            .iter()
                            .flat_map(|s| s.endpoints.iter().flatten())
                            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                            .flat_map(|e| e.addresses.iter().cloned())
                            .collect();
                        Ok((ready == *want).then_some(()))
                    }
                },
            )
            .await
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `status.podIP`, checked to be the only one of `status.podIPs`.
fn pod_ip(pod: &Pod) -> anyhow::Result<Ipv4Addr> {
    let st = pod.status.as_ref().context("no status")?;
    let ip: Ipv4Addr = st.pod_ip.as_deref().context("no podIP")?.parse()?;
    let ips: Vec<&str> = st.pod_ips.iter().flatten().map(|p| p.ip.as_str()).collect();
    assert_eq!(ips, [ip.to_string()], "podIPs is the podIP");
    Ok(ip)
}

fn env_field(name: &str, path: &str) -> serde_json::Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

/// A Pod serving `/tmp/www` over HTTP on its own IP, port 8080: `who` holds
/// its name, `ip` the POD_IP it was given.
fn web_server(name: &str) -> serde_json::Value {
    let script = "mkdir -p /tmp/www && echo \"$POD_NAME\" >/tmp/www/who && echo \"$POD_IP\" >/tmp/www/ip \
                  && exec python3 -m http.server --bind \"$POD_IP\" 8080 --directory /tmp/www";
    json!({"metadata": {"name": name, "labels": {"app": "web"}}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "main", "image": BASE_IMAGE, "command": ["sh", "-c", script],
            "env": [env_field("POD_IP", "status.podIP"), env_field("POD_NAME", "metadata.name")]}]}})
}

/// A GET from the test process (on the host, which reaches every Pod IP).
async fn get(url: &str) -> anyhow::Result<String> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()?;
    let resp = client.get(url).send().await?.error_for_status()?;
    Ok(resp.text().await?)
}

/// The client's lines of one kind (`fqdn: ...`), in order.
fn lines_of<'a>(log: &'a str, key: &str) -> Vec<&'a str> {
    let prefix = format!("{key}: ");
    log.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .map(str::trim)
        .collect()
}

/// Addresses as the client prints them: sorted as text, space-separated.
fn addr_line(ips: &[Ipv4Addr]) -> String {
    let mut v: Vec<String> = ips.iter().map(|i| i.to_string()).collect();
    v.sort();
    v.join(" ")
}

#[tokio::test]
async fn pods_get_ips_of_their_own_and_a_service_name_follows_its_ready_endpoints()
-> anyhow::Result<()> {
    let s = Scope::new("names").await?;
    let ns = s.ns().to_string();
    for name in ["web-a", "web-b"] {
        s.create::<Pod>(web_server(name)).await?;
    }
    s.create::<Service>(json!({"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": 8080}]}}))
        .await?;
    let a = s.running("web-a").await?;
    let b = s.running("web-b").await?;
    let (ip_a, ip_b) = (pod_ip(&a)?, pod_ip(&b)?);
    assert_ne!(ip_a, ip_b, "each pod its own address");
    for ip in [ip_a, ip_b] {
        assert!(PodNetwork::DEFAULT.contains(ip), "{ip} in the pod network");
    }

    // Both bind port 8080, each on the address its status reports, which
    // is also the POD_IP its env was given.
    for (ip, name) in [(ip_a, "web-a"), (ip_b, "web-b")] {
        let who = PATIENCE
            .poll(&format!("{name} serving on {ip}:8080"), || async move {
                Ok(get(&format!("http://{ip}:8080/who")).await.ok())
            })
            .await?;
        assert_eq!(who, format!("{name}\n"));
        assert_eq!(
            get(&format!("http://{ip}:8080/ip")).await?,
            format!("{ip}\n")
        );
    }

    // The real EndpointSlice controller lists both: they are Ready with an IP.
    s.endpoints_become("web", &[ip_a, ip_b].iter().map(|i| i.to_string()).collect())
        .await?;

    let script = format!(
        "echo \"self: $(getent hosts \"$(hostname)\" | awk '{{print $1}}')\"
         while true; do
           for n in web.{ns}.svc.cluster.local web.{ns}.svc web.{ns} web; do
             echo \"$n: $(getent ahostsv4 $n | awk '$2 == \"STREAM\" {{print $1}}' | sort | tr '\\n' ' ')\"
           done
           echo \"fetch: $(curl -sS --max-time 2 http://web.{ns}.svc:8080/who 2>&1)\"
           sleep 0.3
         done"
    );
    let client: Pod = s
        .create(json!({"metadata": {"name": "client"}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BASE_IMAGE, "command": ["sh", "-c", script]}]}}))
        .await?;
    let client_ip = pod_ip(&s.running("client").await?)?;
    assert!(![ip_a, ip_b].contains(&client_ip));

    let both = addr_line(&[ip_a, ip_b]);
    let fqdn = format!("web.{ns}.svc");
    PATIENCE
        .poll(
            "the client resolving the service to both endpoints and fetching",
            || {
                let log = s.read_log(&client, "main");
                let (both, fqdn) = (both.clone(), fqdn.clone());
                async move {
                    let seen = lines_of(&log, &fqdn).contains(&both.as_str())
                        && lines_of(&log, "fetch")
                            .iter()
                            .any(|f| *f == "web-a" || *f == "web-b");
                    Ok(seen.then_some(()))
                }
            },
        )
        .await?;
    let log = s.read_log(&client, "main");
    assert_eq!(lines_of(&log, "self"), [client_ip.to_string()], "{log}");
    // Every form of the name, the short one too (same namespace).
    for name in [
        format!("web.{ns}.svc.cluster.local"),
        format!("web.{ns}"),
        "web".to_string(),
    ] {
        assert!(
            lines_of(&log, &name).contains(&both.as_str()),
            "{name}: {log}"
        );
    }

    // One server goes: the name follows the EndpointSlice, and every fetch
    // after the change lands on the one left. (Fetches between the SIGTERM
    // and the new file are not judged: one may meet web-a mid-shutdown.)
    let before = s.read_log(&client, "main").len();
    s.api::<Pod>()
        .delete("web-a", &DeleteParams::default())
        .await?;
    let only_b = ip_b.to_string();
    let marker = PATIENCE
        .poll("the client resolving the service to web-b alone", || {
            let log = s.read_log(&client, "main");
            let (only_b, fqdn) = (only_b.clone(), fqdn.clone());
            async move {
                Ok(log
                    .lines()
                    .position(|l| {
                        l.strip_prefix(&format!("{fqdn}: ")).map(str::trim) == Some(&only_b)
                    })
                    .map(|_| log.len()))
            }
        })
        .await?;
    PATIENCE
        .poll("three fetches after the change", || {
            let log = s.read_log(&client, "main");
            async move { Ok((lines_of(&log[marker..], "fetch").len() >= 3).then_some(())) }
        })
        .await?;
    let log = s.read_log(&client, "main");
    let fetches = lines_of(&log[..before], "fetch");
    let first_ok = fetches
        .iter()
        .position(|f| *f == "web-a" || *f == "web-b")
        .context("a successful fetch")?;
    for f in &fetches[first_ok..] {
        assert!(
            *f == "web-a" || *f == "web-b",
            "a fetch failed: {f:?}\n{log}"
        );
    }
    assert!(
        lines_of(&log[marker..], "fetch")
            .iter()
            .all(|f| *f == "web-b"),
        "{log}"
    );
    s.endpoints_become("web", &[only_b].into()).await?;
    Ok(())
}

#[tokio::test]
async fn a_host_network_pod_keeps_the_node_address() -> anyhow::Result<()> {
    let s = Scope::new("hostnet").await?;
    let pod: Pod = s
        .create(json!({"metadata": {"name": "on-host"}, "spec": {
            "restartPolicy": "Never", "hostNetwork": true,
            "containers": [{"name": "main", "image": BASE_IMAGE,
                "command": ["sh", "-c", "echo \"ip=$POD_IP\""],
                "env": [env_field("POD_IP", "status.podIP")]}]}}))
        .await?;
    let done = PATIENCE
        .wait(
            "the host-network pod Succeeded",
            await_condition(s.api::<Pod>(), "on-host", |p: Option<&Pod>| {
                p.is_some_and(|p| phase(p) == "Succeeded")
            }),
        )
        .await?
        .context("pod vanished")?;
    assert_eq!(pod_ip(&done)?, Ipv4Addr::LOCALHOST);
    assert_eq!(s.read_log(&pod, "main"), "ip=127.0.0.1\n");
    Ok(())
}

#[tokio::test]
async fn a_restarted_container_keeps_the_pod_ip() -> anyhow::Result<()> {
    let s = Scope::new("restart").await?;
    // Fails once, then stays up: the kubelet restarts it at once.
    let script =
        "echo \"ip=$POD_IP\"; [ -e /data/again ] && exec sleep 3600; touch /data/again; exit 1";
    let pod: Pod = s
        .create(json!({"metadata": {"name": "twice"}, "spec": {
            "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BASE_IMAGE, "command": ["sh", "-c", script],
                "env": [env_field("POD_IP", "status.podIP")],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]}}))
        .await?;
    let restarted = PATIENCE
        .wait(
            "the container restarted and running",
            await_condition(s.api::<Pod>(), "twice", |p: Option<&Pod>| {
                p.is_some_and(|p| {
                    ready(p)
                        && p.status
                            .as_ref()
                            .and_then(|st| st.container_statuses.as_ref())
                            .is_some_and(|cs| cs.iter().any(|c| c.restart_count == 1))
                })
            }),
        )
        .await?
        .context("pod vanished")?;
    let ip = pod_ip(&restarted)?;
    let log = PATIENCE
        .poll("both runs in the log", || {
            let log = s.read_log(&pod, "main");
            async move { Ok((log.lines().count() >= 2).then_some(log)) }
        })
        .await?;
    assert_eq!(log, format!("ip={ip}\nip={ip}\n"));
    Ok(())
}

/// The validating webhook configuration of a test, removed when dropped.
struct Hook {
    harness: &'static Harness,
    name: String,
}

impl Drop for Hook {
    fn drop(&mut self) {
        let (harness, name) = (self.harness, self.name.clone());
        conformance::testkit::clean_up(move || async move {
            let client = harness.client().await?;
            let _ = Api::<ValidatingWebhookConfiguration>::all(client)
                .delete(&name, &DeleteParams::default())
                .await;
            Ok(())
        });
    }
}

/// Admits a ConfigMap unless it is named `deny-me`; the denial names the
/// address the hook serves on, so a test sees who answered.
const HOOK_PY: &str = r#"
import json, os, ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        name = req["object"]["metadata"].get("name", "")
        response = {"uid": req["uid"], "allowed": name != "deny-me"}
        if name == "deny-me":
            response["status"] = {"code": 403, "message": "denied by the hook at " + os.environ["POD_IP"]}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": response}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = ThreadingHTTPServer((os.environ["POD_IP"], 9443), Hook)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain("/tls/tls.crt", "/tls/tls.key")
server.socket = tls.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// A CA and a serving certificate for `names`, as PEM: (CA, cert, key).
fn serving_cert(names: &[String]) -> anyhow::Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "kubelet-network test CA");
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(names.to_vec())?.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

#[tokio::test]
async fn the_api_server_calls_a_webhook_at_its_service_endpoint() -> anyhow::Result<()> {
    let s = Scope::new("webhook").await?;
    let ns = s.ns().to_string();
    // The API server checks the certificate against the Service's name.
    let (ca, cert, key) = serving_cert(&[
        format!("hook.{ns}.svc"),
        format!("hook.{ns}.svc.cluster.local"),
    ])?;
    s.create::<Secret>(
        json!({"metadata": {"name": "hook-tls"}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert, "tls.key": key}}),
    )
    .await?;
    s.create::<ConfigMap>(json!({"metadata": {"name": "hook-code"}, "data": {"hook.py": HOOK_PY}}))
        .await?;
    let pod: Pod = s
        .create(json!({"metadata": {"name": "hook", "labels": {"app": "hook"}}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BASE_IMAGE,
                "command": ["python3", "-u", "/app/hook.py"],
                "env": [env_field("POD_IP", "status.podIP")],
                "volumeMounts": [{"name": "tls", "mountPath": "/tls"}, {"name": "code", "mountPath": "/app"}]}],
            "volumes": [{"name": "tls", "secret": {"secretName": "hook-tls"}},
                        {"name": "code", "configMap": {"name": "hook-code"}}]}}))
        .await?;
    s.create::<Service>(json!({"metadata": {"name": "hook"}, "spec": {
        "selector": {"app": "hook"}, "ports": [{"name": "https", "port": 9443, "targetPort": 9443}]}}))
        .await?;
    let ip = pod_ip(&s.running("hook").await?)?;
    s.endpoints_become("hook", &[ip.to_string()].into()).await?;

    let hook = Hook {
        harness: s.harness,
        name: conformance::testkit::unique("kn-webhook"),
    };
    let judged = json!({"kn.ptah.run/judged": "yes"});
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": hook.name},
        "webhooks": [{
            "name": "judge.kn.ptah.run",
            "clientConfig": {
                "service": {"namespace": ns, "name": "hook", "path": "/validate", "port": 9443},
                "caBundle": base64_pem(&ca),
            },
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "objectSelector": {"matchLabels": judged},
            "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail", "timeoutSeconds": 10,
        }],
    }))?;
    Api::<ValidatingWebhookConfiguration>::all(s.client().clone())
        .patch(
            &hook.name,
            &PatchParams::apply("conformance").force(),
            &Patch::Apply(&config),
        )
        .await?;

    // The configuration reaches the API server's admission a moment later:
    // until then a ConfigMap goes through unjudged and is taken back.
    let cms = s.api::<ConfigMap>();
    let judged_cm = |name: &str| -> anyhow::Result<ConfigMap> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name, "labels": judged}}),
        )?)
    };
    let deadline = Instant::now() + TIMEOUT;
    let denial = loop {
        let last = match cms
            .create(&PostParams::default(), &judged_cm("deny-me")?)
            .await
        {
            Ok(_) => {
                cms.delete("deny-me", &DeleteParams::default()).await?;
                "admitted unjudged".to_string()
            }
            Err(kube::Error::Api(e)) if e.message.contains("denied by the hook") => break e,
            // Not callable (yet): the API server says why.
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            anyhow::bail!("the webhook did not deny deny-me within {TIMEOUT:?}; last: {last}");
        }
        tokio::time::sleep(PATIENCE.interval).await;
    };
    assert_eq!(denial.code, 403);
    assert!(
        denial
            .message
            .contains(&format!("denied by the hook at {ip}")),
        "{}",
        denial.message
    );
    // And it allows the rest.
    cms.create(&PostParams::default(), &judged_cm("welcome")?)
        .await?;
    let log = s.read_log(&pod, "main");
    assert!(
        log.matches("\"POST /validate").count() >= 2,
        "both requests reached the pod: {log}"
    );
    drop(hook);
    Ok(())
}

fn base64_pem(pem: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(pem)
}
