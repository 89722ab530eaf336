//! The chart installed on the harness with the real helm, the manager
//! running as Pods the process kubelet runs from the operator image (mapped
//! to the built binary, as an operation's image is), in a namespace that
//! enforces Pod Security `restricted`:
//!
//! * both replicas run and one holds the leader Lease;
//! * a PtahSchema from a ConfigMap reaches `InSync`; the leader Pod is
//!   deleted as its Apply Job runs, the other replica takes the Lease, and
//!   the schema reaches `InSync` with that one Apply Job;
//! * the webhook certificate is rotated (the Secret replaced, the CA bundle
//!   trusting both CAs meanwhile): an approval created during the rotation
//!   is stamped and signed, the new certificate is served without a restart,
//!   and with the old CA gone an approval is still stamped and applied.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

use conformance::harness::Harness;
use conformance::testkit::chart;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::operator::{PATIENCE, create_admitted};
use conformance::testkit::wait::Patience;
use operator::api::condition::SchemaPhase;
use operator::api::{PtahSchema, PtahSchemaApproval};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// A release of the chart in the test's namespace, uninstalled when dropped.
struct Release {
    harness: &'static Harness,
    name: String,
    namespace: String,
}

impl Release {
    /// `helm install` scoped to `ns`: it watches only `ns`, and its webhooks
    /// and admission policy review only namespaces labelled `scope`.
    fn install(ns: &TestNamespace, scope: &str) -> anyhow::Result<Release> {
        let h = ns.harness();
        let name = format!(
            "ptah-operator-{}",
            ns.name().rsplit('-').next().unwrap_or("x")
        );
        let release = Release {
            harness: h,
            name: name.clone(),
            namespace: ns.name().to_string(),
        };
        let mut cmd = chart::helm()?;
        cmd.arg(format!("--kubeconfig={}", h.kubeconfig().display()))
            .args(["install", &name])
            .arg(chart::dir())
            .args(["--namespace", ns.name(), "--skip-crds"])
            .args(["--set", &format!("watchNamespace={}", ns.name())])
            .args([
                "--set",
                &format!("webhooks.namespaceSelector.matchLabels.ptah-chart={scope}"),
            ])
            .args([
                "--set",
                &format!("admissionPolicy.namespaceSelector.matchLabels.ptah-chart={scope}"),
            ])
            // The harness's loopback API server: a shorter Lease, a quick test.
            .args(["--set", "leaderElection.leaseDurationSeconds=6"]);
        chart::run(cmd).context("helm install")?;
        Ok(release)
    }

    fn service_host(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let Ok(mut cmd) = chart::helm() else { return };
        cmd.arg(format!(
            "--kubeconfig={}",
            self.harness.kubeconfig().display()
        ))
        .args(["uninstall", &self.name, "--namespace", &self.namespace]);
        let _ = chart::run(cmd);
    }
}

/// The manager Pods that run and are ready.
async fn ready_pods(ns: &TestNamespace, release: &Release) -> anyhow::Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={}", release.name));
    let pods = ns.api::<Pod>().list(&lp).await?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status.as_ref().is_some_and(|st| {
                st.phase.as_deref() == Some("Running")
                    && st
                        .conditions
                        .iter()
                        .flatten()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
        .collect())
}

async fn leader(ns: &TestNamespace, release: &Release) -> anyhow::Result<Option<String>> {
    let lease = ns
        .api::<Lease>()
        .get_opt(&format!("{}-leader", release.name))
        .await?;
    Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity))
}

/// A fresh CA and a leaf for `host`: (leaf chain PEM, key PEM, CA PEM).
fn certificate(host: &str) -> anyhow::Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec![host.to_string()])?.signed_by(&key, &issuer)?;
    Ok((leaf.pem(), key.serialize_pem(), ca.pem()))
}

/// Whether `addr` serves `host` under a certificate of `ca_pem`.
async fn serves_under(addr: SocketAddr, host: &str, ca_pem: &str) -> bool {
    let Ok(ca) = reqwest::Certificate::from_pem(ca_pem.as_bytes()) else {
        return false;
    };
    let Ok(client) = reqwest::Client::builder()
        .tls_certs_only([ca])
        .resolve(host, addr)
        .timeout(Duration::from_secs(3))
        .build()
    else {
        return false;
    };
    // Any answer is a handshake that succeeded; only TLS decides here.
    client
        .get(format!("https://{host}:{}/", addr.port()))
        .send()
        .await
        .is_ok()
}

async fn set_ca_bundle(ns: &TestNamespace, release: &Release, pem: &str) -> anyhow::Result<()> {
    let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
    let patch = Patch::<()>::Json(serde_json::from_value(json!([
        {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": b64}
    ]))?);
    let name = format!("{}-approvals", release.name);
    let pp = PatchParams::default();
    Api::<MutatingWebhookConfiguration>::all(ns.client().clone())
        .patch(&name, &pp, &patch)
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(ns.client().clone())
        .patch(&name, &pp, &patch)
        .await?;
    Ok(())
}

fn phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_installed_chart_leads_with_one_replica_survives_its_loss_and_rotates_its_certificate()
-> anyhow::Result<()> {
    let scope = conformance::testkit::unique("c").replace('-', "");
    let scope = &scope[scope.len().saturating_sub(20)..];
    let spec = NamespaceSpec::default()
        .with_crds()
        .with_service_account(Duration::from_secs(60))
        .restricted()
        .label("ptah-chart", scope);
    let ns = TestNamespace::new(harness().await, "chart", "install", spec).await?;
    let release = Release::install(&ns, scope)?;

    // Both replicas run (admitted under `restricted`); one leads.
    let patience = Patience::new(Duration::from_secs(120), Duration::from_millis(500));
    let pods = patience
        .poll("both replicas ready", || async {
            let pods = ready_pods(&ns, &release).await?;
            Ok((pods.len() == 2).then_some(pods))
        })
        .await?;
    let names: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();
    let first = patience
        .poll("a leader", || async { leader(&ns, &release).await })
        .await?;
    assert!(
        names.contains(&first),
        "the leader {first} is one of {names:?}"
    );

    // Every Apply Job the schema ever has.
    let applies = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = applies.clone();
    let jobs = watcher(ns.api::<Job>(), watcher::Config::default());
    let watching = tokio::spawn(async move {
        let mut jobs = std::pin::pin!(jobs);
        while let Some(event) = jobs.next().await {
            if let Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = event
                && j.name_any().contains("-apply-")
            {
                seen.lock().expect("lock").insert(j.name_any());
            }
        }
    });

    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    executor::schema(&ns, &db, "orders").await?;
    // The leader goes as its Apply Job runs.
    patience
        .poll("the Apply Job", || async {
            Ok((!applies.lock().expect("lock").is_empty()).then_some(()))
        })
        .await?;
    ns.api::<Pod>()
        .delete(&first, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting the leader {first}"))?;
    let second = patience
        .poll("another replica leads", || async {
            Ok(leader(&ns, &release).await?.filter(|h| *h != first))
        })
        .await?;
    // The standby, or the Pod the Deployment made in the leader's place,
    // whichever saw the released Lease first.
    let now: BTreeSet<String> = ready_pods(&ns, &release)
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(
        now.contains(&second) || names.contains(&second),
        "{second} is a replica of the release: {now:?}"
    );
    let s: PtahSchema = ns
        .until(
            &PATIENCE,
            "orders",
            "InSync after the leader left",
            |s: &PtahSchema| phase(s) == Some(SchemaPhase::InSync),
        )
        .await?;
    assert!(s.status.is_some());
    assert!(db.tables()?.contains(&"orders".to_string()));
    let ran = applies.lock().expect("lock").clone();
    assert_eq!(ran.len(), 1, "one Apply Job: {ran:?}");

    // The certificate rotates: the CA bundle trusts both CAs meanwhile.
    let tls_name = format!("{}-tls", release.name);
    let old = ns.api::<Secret>().get(&tls_name).await?;
    let old_ca = String::from_utf8(
        old.data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .context("ca.crt")?
            .0
            .clone(),
    )?;
    let host = release.service_host();
    let (cert, key, new_ca) = certificate(&host)?;
    set_ca_bundle(&ns, &release, &format!("{old_ca}{new_ca}")).await?;
    // Two more databases, two plans to approve: one during the rotation and
    // one after it (the first already holds the declared table).
    let mut awaiting_plans = Vec::new();
    let mut dbs = Vec::new();
    for name in ["during", "after"] {
        let db = TestDatabase::create(
            ns.harness(),
            Engine::Postgres,
            &format!("{}{name}", ns.name()),
        )?;
        executor::schema_under(&ns, &db, name, json!({"apply": "OnApproval"})).await?;
        dbs.push(db);
    }
    for name in ["during", "after"] {
        let awaiting = |s: &PtahSchema| phase(s) == Some(SchemaPhase::AwaitingApproval);
        let s: PtahSchema = ns
            .until(&PATIENCE, name, "AwaitingApproval", awaiting)
            .await?;
        let plan = s
            .status
            .as_ref()
            .and_then(|st| st.plan.clone())
            .context("status.plan")?;
        awaiting_plans.push((s.uid().unwrap_or_default(), plan));
    }
    ns.api::<Secret>()
        .patch(
            &tls_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {
                "tls.crt": cert, "tls.key": key, "ca.crt": format!("{new_ca}{old_ca}")
            }})),
        )
        .await?;
    let approve = |i: usize, name: &str| {
        let (uid, plan) = &awaiting_plans[i];
        json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchemaApproval",
            "metadata": {"name": name},
            "spec": {
                "schemaRef": {"name": name, "uid": uid},
                "planRef": {"name": plan.name, "uid": plan.uid},
                "planFingerprint": plan.fingerprint,
            }
        })
    };
    // During the rotation: stamped and signed.
    let during: PtahSchemaApproval = create_admitted(&ns, approve(0, "during")).await?;
    assert!(
        during.spec.approver.is_some(),
        "stamped during the rotation"
    );
    assert!(
        during.spec.stamp_signature.is_some(),
        "signed during the rotation"
    );
    // Every running replica serves the new certificate, without a restart.
    let pods = ready_pods(&ns, &release).await?;
    for pod in &pods {
        let ip = pod
            .status
            .as_ref()
            .and_then(|st| st.pod_ip.clone())
            .context("podIP")?;
        let addr: SocketAddr = format!("{ip}:9443").parse()?;
        Patience::new(Duration::from_secs(150), Duration::from_secs(1))
            .poll("the new certificate served", || async {
                Ok(serves_under(addr, &host, &new_ca).await.then_some(()))
            })
            .await
            .with_context(|| format!("replica {}", pod.name_any()))?;
        let statuses = pod
            .status
            .as_ref()
            .and_then(|st| st.container_statuses.clone())
            .unwrap_or_default();
        let restarts: i32 = statuses.iter().map(|c| c.restart_count).sum();
        // Why it exited, from the manager's last lines (the chart's
        // FallbackToLogsOnError).
        let last: Vec<_> = statuses
            .iter()
            .filter_map(|c| c.last_state.as_ref()?.terminated.as_ref())
            .map(|t| (t.exit_code, t.message.clone().unwrap_or_default()))
            .collect();
        assert_eq!(restarts, 0, "{} restarted: {last:?}", pod.name_any());
    }
    // The old CA gone: approvals are still stamped, and one is applied.
    set_ca_bundle(&ns, &release, &new_ca).await?;
    let after: PtahSchemaApproval = create_admitted(&ns, approve(1, "after")).await?;
    assert!(
        after.spec.stamp_signature.is_some(),
        "signed after the rotation"
    );
    for name in ["during", "after"] {
        ns.until(&PATIENCE, name, "InSync, approved", |s: &PtahSchema| {
            phase(s) == Some(SchemaPhase::InSync)
        })
        .await?;
    }
    watching.abort();
    Ok(())
}
