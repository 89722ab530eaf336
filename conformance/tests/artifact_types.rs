//! An OCI artifact of the wrong type is a verdict, not a failure, tried as a
//! new user would: a PtahSchema pointed at a migrations artifact pushed with
//! `ptah migrations push`, and a PtahMigration pointed at a schema artifact
//! pushed with `ptah schema push`, each signed by the verification policy's
//! own key and with no source policy. Resolve pins the digest, Verify
//! refuses the type, the resource is `Blocked` with the verification reason,
//! and it reads again at its interval (one Resolve and one Verify Job each
//! time), not at the failure retry interval. No database operation runs.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::job::{count, operations};
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::oci::{
    Registry, key_policy_any_type, push_migrations, push_schema, signed_by_new_key,
};
use conformance::testkit::wait::Patience;
use operator::api::condition::{Reason, SchemaPhase};
use operator::api::{PtahMigration, PtahSchema};
use supplychain::oci::{MIGRATIONS_ARTIFACT_TYPE, SCHEMA_ARTIFACT_TYPE};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const PATIENCE: Patience = Patience::new(Duration::from_secs(120), Duration::from_millis(250));

/// The read interval, and the much shorter retry a failed read would use.
const INTERVAL: &str = "25s";
const RETRY: &str = "5s";

/// The resource's `status.phase` and the reason of its verdict, read
/// without its type: both families write them in the same fields.
async fn verdict(ns: &TestNamespace, plural: &str) -> anyhow::Result<(String, String, String)> {
    let (phase, reason, message) = match plural {
        "ptahschemas" => {
            let s = ns.api::<PtahSchema>().get("orders").await?;
            let st = serde_json::to_value(s.status)?;
            (
                st["phase"].clone(),
                condition(&st, "Stalled"),
                condition(&st, "ArtifactVerified"),
            )
        }
        _ => {
            let m = ns.api::<PtahMigration>().get("orders").await?;
            let st = serde_json::to_value(m.status)?;
            (
                st["phase"].clone(),
                condition(&st, "Blocked"),
                condition(&st, "ArtifactVerified"),
            )
        }
    };
    Ok((
        phase.as_str().unwrap_or_default().to_owned(),
        reason["reason"].as_str().unwrap_or_default().to_owned(),
        message["message"].as_str().unwrap_or_default().to_owned(),
    ))
}

fn condition(status: &Value, t: &str) -> Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .cloned()
        .unwrap_or(Value::Null)
}

async fn wrong_type_is_blocked_after_verify(
    engine: Engine,
    test: &str,
    (kind, plural): (&str, &str),
) -> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "types", test).await?;
    let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
    db.secret(&ns, "orders-db").await?;
    let registry = Registry::from_harness(ns.harness())?;
    let repository = format!("ptah-conformance/{}", ns.name());
    let tagged = format!("{}/{repository}:v1", registry.host);
    // The other family's artifact, as its own CLI command pushes it.
    let (pushed, declared) = if kind == "PtahSchema" {
        let files: &[(&str, &[u8])] = &[
            (
                "0000000001_orders.up.sql",
                b"CREATE TABLE orders (id bigint);\n",
            ),
            ("0000000001_orders.down.sql", b"DROP TABLE orders;\n"),
        ];
        (
            push_migrations(&tagged, files).await?,
            MIGRATIONS_ARTIFACT_TYPE,
        )
    } else {
        let hcl = b"table \"orders\" {\n  schema = schema.public\n  column \"id\" {\n    type = bigint\n  }\n}\nschema \"public\" {}\n";
        (push_schema(&tagged, hcl).await?, SCHEMA_ARTIFACT_TYPE)
    };
    let work = tempfile::tempdir()?;
    let pinned = format!("{}/{repository}@{}", registry.host, pushed.digest);
    let signer = signed_by_new_key(&registry, work.path(), "signer", &pinned)?;
    ns.create::<ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "verification"},
        "data": {"policy.yaml": key_policy_any_type(&signer.public_pem)},
    }))
    .await?;
    let resource = json!({
        "apiVersion": "operator.ptah.run/v1alpha1", "kind": kind,
        "metadata": {"name": "orders"},
        "spec": {
            "target": {
                "engine": db.engine.spec(),
                "urlFrom": {"name": "orders-db", "key": "url"},
                "coordinationKey": "orders",
            },
            "source": {
                "oci": {
                    "ociRef": format!("oci://{tagged}"),
                    "transport": {"plainHTTP": true},
                },
                "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
            },
            "interval": INTERVAL,
            "execution": {"failureRetryInterval": RETRY},
        },
    });
    if kind == "PtahSchema" {
        ns.create::<PtahSchema>(resource).await?;
    } else {
        ns.create::<PtahMigration>(resource).await?;
    }
    let manager = Manager::start(&ns, &ManagerSpec::default())?;

    let blocked = || async {
        let (phase, reason, message) = verdict(&ns, plural).await?;
        anyhow::Ok((phase == "Blocked" && reason == "PolicyRefused").then_some(message))
    };
    let message = PATIENCE
        .poll("Blocked after Verify", blocked)
        .await
        .with_context(|| manager.log())?;
    let first = Instant::now();
    assert!(
        message.contains(declared),
        "the refusal names the type: {message}"
    );
    assert_eq!(
        (count(&ns, "resolve").await?, count(&ns, "verify").await?),
        (1, 1),
        "one Resolve and one Verify: {:?}",
        operations(&ns).await?
    );
    // The digest is pinned, as what it declares itself.
    let pinned = if kind == "PtahSchema" {
        let s = ns.api::<PtahSchema>().get("orders").await?;
        assert_eq!(
            s.status.as_ref().and_then(|st| st.phase),
            Some(SchemaPhase::Blocked)
        );
        s.status.and_then(|st| st.source)
    } else {
        let m = ns.api::<PtahMigration>().get("orders").await?;
        m.status.and_then(|st| st.source)
    };
    let oci = pinned.and_then(|s| s.oci).context("status.source.oci")?;
    assert_eq!(oci.digest, pushed.digest);
    assert_eq!(oci.artifact_type.as_deref(), Some(declared));

    // The next read comes at the interval, not at the retry delay, and is
    // refused the same way.
    PATIENCE
        .poll("the read at the interval", || async {
            anyhow::Ok((count(&ns, "verify").await? == 2).then_some(()))
        })
        .await
        .with_context(|| manager.log())?;
    let waited = first.elapsed();
    assert!(
        waited >= Duration::from_secs(12),
        "read again after {waited:?}, the retry interval is {RETRY}"
    );
    PATIENCE
        .poll("Blocked again", blocked)
        .await
        .with_context(|| manager.log())?;
    let ops = operations(&ns).await?;
    assert_eq!(count(&ns, "resolve").await?, 2, "{ops:?}");
    assert!(
        ops.iter().all(|o| o == "resolve" || o == "verify"),
        "no database operation ran: {ops:?}"
    );
    let (_, reason, _) = verdict(&ns, plural).await?;
    assert_eq!(reason, format!("{:?}", Reason::PolicyRefused));
    drop(manager);
    Ok(())
}

conformance::on_both_engines!(
    a_schema_given_a_migrations_artifact_is_blocked_after_verify,
    "schema",
    wrong_type_is_blocked_after_verify,
    ("PtahSchema", "ptahschemas")
);
conformance::on_both_engines!(
    a_migration_given_a_schema_artifact_is_blocked_after_verify,
    "migration",
    wrong_type_is_blocked_after_verify,
    ("PtahMigration", "ptahmigrations")
);
