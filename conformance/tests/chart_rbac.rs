//! The chart's RBAC and its admission policy on the harness:
//!
//! * the manager's ServiceAccount, bound as the chart binds it, may do
//!   nothing with Secrets in any namespace (`kubectl auth can-i`), and a
//!   manager running with that ServiceAccount's token brings a PtahSchema
//!   from a ConfigMap to `InSync`: the RBAC is enough;
//! * with no webhook registered, the chart's ValidatingAdmissionPolicy
//!   refuses an approval whose stamp names another user, or none; with the
//!   policy removed too, the forged approval reaches the store, and the
//!   manager refuses it at dispatch (`Accepted=False`, `StampNotSigned`): no
//!   Apply Job runs.

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use conformance::harness::Harness;
use conformance::testkit::admission::client_as;
use conformance::testkit::chart::{self, Installed};
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::{NamespaceSpec, TestNamespace};
use conformance::testkit::operator::PATIENCE;
use conformance::testkit::wait::Patience;
use operator::api::condition::{ApprovalConditionType, ConditionStatus, Reason, SchemaPhase};
use operator::api::{PtahSchema, PtahSchemaApproval};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const RBAC: [&str; 5] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// `kubectl auth can-i VERB RESOURCE --as=SA WHERE`: yes or no.
fn can_i(
    harness: &Harness,
    sa: &str,
    verb: &str,
    resource: &str,
    at: &[&str],
) -> anyhow::Result<bool> {
    let out = Command::new(conformance::tools::tool("kubectl")?)
        .arg(format!("--kubeconfig={}", harness.kubeconfig().display()))
        .args(["auth", "can-i", verb, resource, &format!("--as={sa}")])
        .args(at)
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match said.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => anyhow::bail!(
            "kubectl auth can-i {verb} {resource} said {said:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_account_reads_no_secret_and_its_rbac_is_enough_to_converge()
-> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "crbac", "sa").await?;
    let installed = Installed::apply(&ns, &RBAC, &[]).await?;
    let sa = format!(
        "system:serviceaccount:{}:{}",
        ns.name(),
        installed.service_account()
    );
    let h = ns.harness();
    for verb in [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ] {
        for at in [
            vec!["--all-namespaces"],
            vec!["-n", ns.name()],
            vec!["-n", "default"],
        ] {
            assert!(
                !can_i(h, &sa, verb, "secrets", &at)?,
                "the manager's ServiceAccount may {verb} secrets {at:?}"
            );
        }
    }
    // The same question answers yes where the chart grants: the check can fail.
    assert!(can_i(
        h,
        &sa,
        "create",
        "jobs.batch",
        &["--all-namespaces"]
    )?);
    assert!(can_i(
        h,
        &sa,
        "update",
        "leases.coordination.k8s.io",
        &["-n", ns.name()]
    )?);
    assert!(
        !can_i(
            h,
            &sa,
            "update",
            "leases.coordination.k8s.io",
            &["-n", "default"]
        )?,
        "Leases only in the release's namespace"
    );

    // A manager with the ServiceAccount's token, nothing more.
    let kubeconfig = h
        .state
        .join("managers")
        .join(format!("{}-sa.kubeconfig", ns.name()));
    std::fs::create_dir_all(kubeconfig.parent().context("a parent")?)?;
    chart::service_account_kubeconfig(h, ns.name(), &installed.service_account(), &kubeconfig)
        .await?;
    let spec = ManagerSpec {
        kubeconfig: Some(kubeconfig),
        ..Default::default()
    };
    let manager = Manager::start(&ns, &spec)?;
    let db = TestDatabase::create(h, Engine::Postgres, ns.name())?;
    executor::schema(&ns, &db, "orders").await?;
    let s: PtahSchema = ns
        .until(
            &PATIENCE,
            "orders",
            "InSync under the chart's RBAC",
            |s: &PtahSchema| s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::InSync),
        )
        .await
        .with_context(|| manager.log())?;
    assert!(s.status.is_some());
    assert!(
        db.tables()?.contains(&"orders".to_string()),
        "the table was made"
    );
    let log = manager.log();
    assert!(
        !log.contains("Forbidden"),
        "the manager was refused something:\n{log}"
    );
    Ok(())
}

/// `alice` may create and read approvals here, and nothing else.
async fn grant_alice(ns: &TestNamespace) -> anyhow::Result<Client> {
    let pp = PostParams::default();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "approver"},
        "rules": [{"apiGroups": ["operator.ptah.run"], "resources": ["ptahschemaapprovals"], "verbs": ["create", "get"]}]
    }))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "approver"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]
    }))?;
    ns.api::<Role>().create(&pp, &role).await?;
    ns.api::<RoleBinding>().create(&pp, &binding).await?;
    client_as(ns.harness(), "alice", &[]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stamp_no_webhook_wrote_is_refused_by_the_policy_and_then_at_dispatch()
-> anyhow::Result<()> {
    let spec = NamespaceSpec::default()
        .with_crds()
        .with_service_account(Duration::from_secs(60));
    let ns = TestNamespace::new(harness().await, "cvap", "stamp", spec).await?;
    // The policy only where this test's label is, so no other test meets it.
    let label = format!(
        "admissionPolicy.namespaceSelector.matchLabels.ptah-vap={}",
        ns.name()
    );
    let installed = Installed::apply(
        &ns,
        &[
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
        &["--set", &label],
    )
    .await?;
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client().clone())
        .patch(
            ns.name(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"ptah-vap": ns.name()}}})),
        )
        .await?;
    let alice = grant_alice(&ns).await?;
    let alice: Api<PtahSchemaApproval> = Api::namespaced(alice, ns.name());

    // A manager with no webhook registered for this namespace.
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let db = TestDatabase::create(ns.harness(), Engine::Postgres, ns.name())?;
    executor::schema_under(&ns, &db, "orders", json!({"apply": "OnApproval"})).await?;
    let s: PtahSchema = ns
        .until(&PATIENCE, "orders", "AwaitingApproval", |s: &PtahSchema| {
            s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::AwaitingApproval)
        })
        .await
        .with_context(|| manager.log())?;
    let plan = s
        .status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .context("status.plan")?;
    let approval = |name: &str, approver: Option<&str>| {
        let mut spec = json!({
            "schemaRef": {"name": "orders", "uid": s.uid()},
            "planRef": {"name": plan.name, "uid": plan.uid},
            "planFingerprint": plan.fingerprint,
        });
        if let Some(who) = approver {
            spec["approver"] = json!({"username": who});
            spec["approvedAt"] = json!("2026-12-02T06:00:00Z");
            spec["mutationRequestUID"] = json!("forged");
        }
        serde_json::from_value::<PtahSchemaApproval>(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchemaApproval",
            "metadata": {"name": name}, "spec": spec,
        }))
    };
    // The API server refuses it once the policy is in force (it syncs in a
    // moment); a stamp of someone else, and no stamp at all.
    let refused = Patience::new(Duration::from_secs(30), Duration::from_millis(250))
        .poll("the policy refuses a forged approver", || async {
            match alice
                .create(&PostParams::default(), &approval("forged", Some("bob"))?)
                .await
            {
                Err(kube::Error::Api(e)) => Ok(Some(e.message)),
                Ok(_) => {
                    alice.delete("forged", &Default::default()).await.ok();
                    Ok(None)
                }
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    assert!(
        refused.contains("spec.approver: names bob, but the request was made by alice"),
        "{refused}"
    );
    let Err(kube::Error::Api(e)) = alice
        .create(&PostParams::default(), &approval("bare", None)?)
        .await
    else {
        panic!("an approval without a stamp was admitted");
    };
    assert!(
        e.message.contains("spec.approver: not stamped"),
        "{}",
        e.message
    );

    // Without the policy the forged approval reaches the store...
    installed
        .remove(&[
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
        ])
        .await?;
    Patience::new(Duration::from_secs(30), Duration::from_millis(250))
        .poll("the forged approval is stored", || async {
            Ok(alice
                .create(&PostParams::default(), &approval("forged", Some("alice"))?)
                .await
                .ok())
        })
        .await?;
    // ...and the manager counts it for nothing.
    let approvals: Api<PtahSchemaApproval> = ns.api();
    let refused = Patience::new(Duration::from_secs(60), Duration::from_millis(250))
        .poll("the manager refuses the unsigned stamp", || async {
            let a = approvals.get("forged").await?;
            Ok(a.status.and_then(|st| {
                st.conditions
                    .into_iter()
                    .find(|c| c.type_ == ApprovalConditionType::Accepted)
            }))
        })
        .await
        .with_context(|| manager.log())?;
    assert_eq!(refused.status, ConditionStatus::False);
    assert_eq!(refused.reason, Reason::StampNotSigned);
    assert!(
        refused.message.contains("spec.stampSignature"),
        "{}",
        refused.message
    );
    // A while later: still waiting, and no Apply Job was ever made.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s: PtahSchema = ns.api::<PtahSchema>().get("orders").await?;
    assert_eq!(
        s.status.as_ref().and_then(|st| st.phase),
        Some(SchemaPhase::AwaitingApproval)
    );
    let jobs = ns.api::<Job>().list(&Default::default()).await?;
    let applies: Vec<String> = jobs
        .items
        .iter()
        .map(|j| j.name_any())
        .filter(|n| n.contains("-apply-"))
        .collect();
    assert!(applies.is_empty(), "an Apply Job ran: {applies:?}");
    assert!(
        !db.tables()?.contains(&"orders".to_string()),
        "the table was made"
    );
    Ok(())
}
