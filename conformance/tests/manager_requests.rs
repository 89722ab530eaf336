//! What a manager asks of the API server while its resources sit `InSync`
//! between intervals, read from the harness's audit log (every request of
//! the managers' user, at metadata level): a pass reads its caches, not the
//! cluster. Twenty PtahSchemas converge on databases of their own (the
//! declared table is there already, so Observe and Plan find nothing to
//! do); then an edit of a key their shared source ConfigMap does not select
//! wakes every one of them for a pass that changes nothing.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use anyhow::Context;
use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor::SCHEMA_SQL;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::wait::Patience;
use operator::api::condition::SchemaPhase;
use operator::api::schema::PtahSchema;
use serde_json::{Value, json};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const SCHEMAS: usize = 20;
/// Forty Jobs (an Observe and a Plan each) through the process kubelet.
const CONVERGE: Patience = Patience::new(Duration::from_secs(420), Duration::from_millis(500));
const PASSES: Patience = Patience::new(Duration::from_secs(60), Duration::from_millis(250));

/// The kinds a pass must find in the manager's stores.
const CACHED: [&str; 6] = [
    "ptahschemas",
    "ptahmigrations",
    "ptahrealms",
    "ptahschemaapprovals",
    "ptahmigrationapprovals",
    "ptahmigrationrunacknowledgments",
];

/// The audit events from `offset` on of the manager whose holder is
/// `test-<ns>`.
fn events_since(harness: &Harness, offset: u64, ns: &str) -> anyhow::Result<Vec<Value>> {
    let mut f = std::fs::File::open(harness.audit_log()).context("the audit log")?;
    f.seek(SeekFrom::Start(offset))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let agent = format!("(test-{ns})");
    let mut out = Vec::new();
    for line in text.lines() {
        let e: Value = serde_json::from_str(line).context("an audit event")?;
        if e["userAgent"].as_str().is_some_and(|a| a.ends_with(&agent)) {
            out.push(e);
        }
    }
    Ok(out)
}

fn verb_and_resource(e: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&e["verb"]),
        s(&e["objectRef"]["resource"]),
        s(&e["objectRef"]["name"]),
    )
}

#[tokio::test]
async fn in_sync_schemas_pass_on_their_caches_without_listing_or_reading_the_kinds_they_watch()
-> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "requests", "idle").await?;
    ns.create::<k8s_openapi::api::core::v1::ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "schema"},
        "data": {"schema.sql": SCHEMA_SQL, "note": "first"},
    }))
    .await?;
    let mut dbs = Vec::new();
    for i in 0..SCHEMAS {
        let name = format!("s{i:02}");
        let db = TestDatabase::create(
            ns.harness(),
            Engine::Postgres,
            &format!("{}-{name}", ns.name()),
        )?;
        db.sql(SCHEMA_SQL)?;
        db.secret(&ns, &format!("{name}-db")).await?;
        ns.create::<PtahSchema>(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
            "metadata": {"name": name},
            "spec": {
                "target": {
                    "engine": db.engine.spec(),
                    "urlFrom": {"name": format!("{name}-db"), "key": "url"},
                    "coordinationKey": name,
                },
                "source": {"configMap": {"name": "schema", "keys": ["schema.sql"]}},
                "interval": "1h",
                "policy": {"apply": "Always"},
            },
        }))
        .await?;
        dbs.push(db);
    }
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    for i in 0..SCHEMAS {
        ns.until(
            &CONVERGE,
            &format!("s{i:02}"),
            "InSync",
            |s: &PtahSchema| s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::InSync),
        )
        .await
        .with_context(|| manager.log())?;
    }
    // Let the passes that harvested the last Plans end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let offset = std::fs::metadata(ns.harness().audit_log())?.len();

    ns.set_config_map_key("schema", "note", "second").await?;
    // Each pass reads the source ConfigMap it names once: twenty reads are
    // twenty passes.
    let harness = ns.harness();
    let name = ns.name().to_string();
    PASSES
        .poll("a pass of every schema", || {
            let name = name.clone();
            async move {
                let reads = events_since(harness, offset, &name)?
                    .iter()
                    .map(verb_and_resource)
                    .filter(|(v, r, n)| v == "get" && r == "configmaps" && n == "schema")
                    .count();
                anyhow::Ok((reads >= SCHEMAS).then_some(()))
            }
        })
        .await
        .with_context(|| manager.log())?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let events = events_since(harness, offset, ns.name())?;
    eprintln!("the manager's requests after the edit: {}", events.len());
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &events {
        let (verb, resource, _) = verb_and_resource(e);
        *seen.entry((verb, resource)).or_default() += 1;
    }
    eprintln!("{seen:?}");
    for ((verb, resource), n) in &seen {
        assert!(
            !(matches!(verb.as_str(), "list" | "get") && CACHED.contains(&resource.as_str())),
            "a pass asked the API server to {verb} {resource} ({n}×): {seen:?}"
        );
        assert!(
            !matches!(verb.as_str(), "create" | "update" | "patch" | "delete"),
            "a pass that changes nothing wrote: {verb} {resource} ({n}×): {seen:?}"
        );
    }
    assert!(
        !seen.contains_key(&("list".into(), "jobs".into())),
        "the sweep reads the Job store: {seen:?}"
    );
    for s in ns.api::<PtahSchema>().list(&Default::default()).await? {
        assert_eq!(
            s.status.as_ref().and_then(|st| st.phase),
            Some(SchemaPhase::InSync),
            "{} stayed InSync",
            s.metadata.name.unwrap_or_default()
        );
    }

    ns.delete_all::<PtahSchema>(&CONVERGE).await?;
    drop(manager);
    drop(dbs);
    Ok(())
}
