//! What a manager asks of the API server while its resources sit `InSync`
//! between intervals, read from the harness's audit log (every request of
//! the managers' user, at metadata level): a pass reads its caches, not the
//! cluster. Twenty PtahSchemas converge on databases of their own (the
//! declared table is there already, so Observe and Plan find nothing to
//! do); then an edit of a key their shared source ConfigMap does not select
//! wakes every one of them for a pass that changes nothing: its only request
//! is a read of the edited ConfigMap's content (at most one each; a pass that
//! finds it cached at the new resourceVersion reads nothing).

use std::time::Duration;

use anyhow::Context;
use conformance::harness::Harness;
use conformance::testkit::audit::{self, events_since, is_write, tally, verb_and_resource};
use conformance::testkit::bench::{env_or, late_ms, memory_kib, quantile};
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor::SCHEMA_SQL;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::wait::Patience;
use operator::api::condition::SchemaPhase;
use operator::api::schema::PtahSchema;
use serde_json::json;

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

/// `n` PtahSchemas on databases of their own that hold the declared table
/// already, sharing one source ConfigMap, read every `interval`; answers the
/// manager once every one is `InSync`.
async fn in_sync(
    ns: &TestNamespace,
    n: usize,
    interval: &str,
    patience: &Patience,
) -> anyhow::Result<(Manager, Vec<TestDatabase>)> {
    ns.create::<k8s_openapi::api::core::v1::ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "schema"},
        "data": {"schema.sql": SCHEMA_SQL, "note": "first"},
    }))
    .await?;
    let mut dbs = Vec::new();
    for i in 0..n {
        let name = format!("s{i:03}");
        let db = TestDatabase::create(
            ns.harness(),
            Engine::Postgres,
            &format!("{}-{name}", ns.name()),
        )?;
        db.sql(SCHEMA_SQL)?;
        db.secret(ns, &format!("{name}-db")).await?;
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
                "interval": interval,
                "policy": {"apply": "Always"},
            },
        }))
        .await?;
        dbs.push(db);
    }
    let manager = Manager::start(ns, &ManagerSpec::default())?;
    for i in 0..n {
        ns.until(patience, &format!("s{i:03}"), "InSync", |s: &PtahSchema| {
            s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::InSync)
        })
        .await
        .with_context(|| manager.log())?;
    }
    Ok((manager, dbs))
}

#[tokio::test]
async fn in_sync_schemas_pass_on_their_caches_without_listing_or_reading_the_kinds_they_watch()
-> anyhow::Result<()> {
    let ns = TestNamespace::for_operator(harness().await, "requests", "idle").await?;
    let (manager, dbs) = in_sync(&ns, SCHEMAS, "1h", &CONVERGE).await?;
    // Let the passes that harvested the last Plans end.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let since = audit::mark(ns.harness())?;

    let log_offset = manager.log().len();
    ns.set_config_map_key("schema", "note", "second").await?;
    // Every schema steps at least once: twenty passes (their log lines).
    let harness = ns.harness();
    PASSES
        .poll("a pass of every schema", || {
            let log = manager.log();
            async move {
                let passed: std::collections::BTreeSet<&str> = log[log_offset..]
                    .lines()
                    .filter(|l| l.contains(" step kind=\"PtahSchema\""))
                    .filter_map(|l| l.split(" name=").nth(1)?.split_whitespace().next())
                    .collect();
                anyhow::Ok((passed.len() >= SCHEMAS).then_some(()))
            }
        })
        .await
        .with_context(|| manager.log())?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let events = events_since(harness, since, ns.name())?;
    eprintln!("the manager's requests after the edit: {}", events.len());
    let seen = tally(&events);
    eprintln!("{seen:?}");
    for ((verb, resource), n) in &seen {
        assert!(
            !(matches!(verb.as_str(), "list" | "get") && CACHED.contains(&resource.as_str())),
            "a pass asked the API server to {verb} {resource} ({n}×): {seen:?}"
        );
        assert!(
            !is_write(verb),
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

/// Waits for one read cycle of each of the `n` schemas after the audit log's
/// `since`: an Observe and a Plan Job per schema, then every one `InSync`
/// with no claim.
async fn read_cycle(
    ns: &TestNamespace,
    since: audit::Mark,
    n: usize,
    patience: &Patience,
) -> anyhow::Result<()> {
    let harness = ns.harness();
    patience
        .poll("a read cycle of every schema", || async move {
            let jobs = events_since(harness, since, ns.name())?
                .iter()
                .map(verb_and_resource)
                .filter(|(v, r, _)| v == "create" && r == "jobs")
                .count();
            if jobs < 2 * n {
                return anyhow::Ok(None);
            }
            let all = ns.api::<PtahSchema>().list(&Default::default()).await?;
            let settled = all.items.iter().all(|s| {
                let st = s.status.as_ref();
                st.and_then(|st| st.phase) == Some(SchemaPhase::InSync)
                    && st.is_some_and(|st| st.active_operation.is_none())
            });
            anyhow::Ok(settled.then_some(()))
        })
        .await
}

/// The writes of one idle read cycle, per schema: two status writes per
/// operation at most (its claim and the write that harvests it, the
/// Observe's harvest sharing the Plan's claim), one Job create per
/// operation and no Secret (its runner presents its Pod's own token), and
/// the Plan's Lease (acquired and released, never renewed: it outlasts
/// the Plan's Job). Nothing is stored for a read's
/// result, no Job is patched and nothing is deleted: a read's Job carries
/// its TTL from creation.
#[tokio::test]
async fn an_idle_read_cycle_writes_claims_jobs_and_the_plans_lease_and_stores_no_result()
-> anyhow::Result<()> {
    const N: usize = 3;
    let ns = TestNamespace::for_operator(harness().await, "requests", "cycle").await?;
    let (manager, dbs) = in_sync(&ns, N, "1m", &CONVERGE).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let harness = ns.harness();
    let since = audit::mark(harness)?;
    let cycle = Patience::new(Duration::from_secs(300), Duration::from_secs(1));
    read_cycle(&ns, since, N, &cycle)
        .await
        .with_context(|| manager.log())?;
    // The passes the Jobs' ends wake.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let events = events_since(harness, since, ns.name())?;
    let mut writes = tally(&events);
    writes.retain(|(verb, _), _| is_write(verb));
    eprintln!("the writes of one read cycle of {N} schemas: {writes:?}");
    let count = |verb: &str, resource: &str| {
        writes
            .get(&(verb.to_string(), resource.to_string()))
            .copied()
            .unwrap_or(0)
    };
    // One cycle each, and perhaps the start of a second for a schema
    // whose interval came round again while the others finished.
    let jobs = count("create", "jobs");
    assert!(jobs >= 2 * N && jobs % 2 == 0, "{writes:?}");
    let cycles = jobs / 2;
    assert!(
        count("update", "ptahschemas/status") + count("patch", "ptahschemas/status") <= 4 * cycles,
        "at most two status writes per operation: {writes:?}"
    );
    // The Plan's Lease outlasts the Plan's Job: acquired and released,
    // never renewed while it runs.
    assert!(
        count("create", "leases") + count("update", "leases") <= 2 * cycles,
        "at most two Lease writes per Plan: {writes:?}"
    );
    for (verb, resource) in writes.keys() {
        assert!(
            matches!(resource.as_str(), "ptahschemas/status" | "jobs" | "leases")
                && verb != "delete"
                && !(resource == "jobs" && verb != "create"),
            "an idle read cycle wrote {verb} {resource}: {writes:?}"
        );
    }

    ns.delete_all::<PtahSchema>(&CONVERGE).await?;
    drop(manager);
    drop(dbs);
    Ok(())
}

/// The benchmark of docs/performance.md (`conformance/bench/idle-schemas.sh`):
/// `BENCH_SCHEMAS` InSync schemas (200) read every `BENCH_INTERVAL` (2m) by
/// one manager; over one read cycle of every schema it prints the manager's
/// requests and writes per resource from the audit log, its memory, and the
/// reconcile queue's wait (how late each due pass started, from its log).
#[tokio::test]
#[ignore = "a benchmark: conformance/bench/idle-schemas.sh"]
async fn bench_idle_schemas() -> anyhow::Result<()> {
    let n: usize = env_or("BENCH_SCHEMAS", 200);
    let interval: String = env_or("BENCH_INTERVAL", "2m".to_string());
    let long = Patience::new(Duration::from_secs(3600), Duration::from_secs(2));
    let ns = TestNamespace::for_operator(harness().await, "bench", "idle").await?;
    let started = std::time::Instant::now();
    let (manager, dbs) = in_sync(&ns, n, &interval, &long).await?;
    eprintln!(
        "{n} schemas InSync in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let harness = ns.harness();
    let since = audit::mark(harness)?;
    let log_offset = manager.log().len();
    let window = std::time::Instant::now();
    read_cycle(&ns, since, n, &long)
        .await
        .with_context(|| manager.log())?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cycle = window.elapsed();
    let memory = memory_kib(manager.pid())?;
    let events = events_since(harness, since, ns.name())?;
    let seen = tally(&events);
    let late = late_ms(&manager.log()[log_offset..]);
    let p = |q: f64| quantile(&late, q);
    let per = |k: usize| k as f64 / n as f64;
    println!(
        "schemas: {n}, interval: {interval}, one read cycle of each in {:.0}s",
        cycle.as_secs_f64()
    );
    println!(
        "manager memory: VmRSS {} KiB (RssAnon {} KiB), VmHWM {} KiB",
        memory.rss, memory.anon, memory.hwm
    );
    println!(
        "requests per schema per cycle: {:.2} ({} in all)",
        per(events.len()),
        events.len()
    );
    for ((verb, resource), k) in &seen {
        println!("  {verb:>6} {resource:<34} {:.2} per schema", per(*k));
    }
    println!(
        "due passes: {}, late p50 {:?} ms, p99 {:?} ms, max {:?} ms",
        late.len(),
        p(0.5),
        p(0.99),
        late.last()
    );
    ns.delete_all::<PtahSchema>(&long).await?;
    drop(manager);
    drop(dbs);
    Ok(())
}
