//! The manager at scale (issue 26, `conformance/bench/scale.sh`): N
//! PtahSchemas with ConfigMap sources, half on PostgreSQL and half on
//! MariaDB, spread over D databases (several schemas a database, each with
//! `spec.target.sharedRealm`, owning a table of its own and excluding the
//! others'), all under `policy.apply: Always`, on one manager started after
//! they exist (a cold start) until every one has been `InSync`; then three
//! intervals idle; then an edit to a tenth of them (their ConfigMaps gain
//! a column) until those are `InSync` again with the column in the
//! database. It prints, as lines to paste into docs/performance.md:
//!
//! * the manager's memory (`VmRSS`, `VmHWM`) and CPU time at each phase;
//! * its API requests and writes per schema per interval over the idle
//!   window, from the audit log;
//! * the reconcile queue's wait (how late each due pass started, from the
//!   manager's `due pass ... late_ms=` lines), p50 and p99;
//! * the time to all `InSync`, and the edit's, beside the floor: the Jobs
//!   the run created × the empty-Job throughput measured in the same run
//!   (K empty Jobs at once until all `Complete`, ÷ K: the process kubelet
//!   runs every Pod at once and the manager has no limit of its own, so
//!   the platform's concurrency is in that figure).
//!
//! The test command runs a small scale (`a_small_scale_run_...`), which
//! asserts only that what it measured exists and is sane, never a time;
//! `bench_scale` is the benchmark, sized by `BENCH_SCHEMAS` (100),
//! `BENCH_DATABASES` (20), `BENCH_INTERVAL` (5m) and `BENCH_BURST` (20, the
//! empty Jobs of the floor).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use conformance::harness::{Harness, Parts};
use conformance::testkit::audit::{self, events_since, is_write, job_creates, tally};
use conformance::testkit::bench::{
    Memory, count_by, cpu_seconds, empty_jobs_at_once, env_or, floor_ms, late_ms, memory_kib,
    quantile, turn_wait_ms,
};
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::wait::Patience;
use k8s_openapi::api::core::v1::ConfigMap;
use operator::api::condition::SchemaPhase;
use operator::api::schema::PtahSchema;
use serde_json::json;

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// A run's size.
#[derive(Clone, Debug)]
struct Shape {
    schemas: usize,
    /// Even: half of them on each engine.
    databases: usize,
    /// `spec.interval`, as written.
    interval: String,
    /// The empty Jobs of the throughput floor.
    burst: usize,
    /// The longest any phase may take.
    patience: Duration,
    /// How often the schemas are listed.
    every: Duration,
}

/// One schema of the run.
#[derive(Clone, Debug)]
struct Member {
    name: String,
    table: String,
    db: usize,
}

impl Member {
    fn config_map(&self) -> String {
        format!("{}-schema", self.name)
    }
}

fn engine_of_db(j: usize) -> Engine {
    if j.is_multiple_of(2) {
        Engine::Postgres
    } else {
        Engine::MariaDb
    }
}

/// Schema `i` is on PostgreSQL when `i` is even, MariaDB when odd, and on
/// that engine's databases in turn.
fn members(shape: &Shape) -> Vec<Member> {
    let per_engine = shape.databases / 2;
    (0..shape.schemas)
        .map(|i| Member {
            name: format!("s{i:04}"),
            table: format!("t{i:04}"),
            db: 2 * ((i / 2) % per_engine) + i % 2,
        })
        .collect()
}

/// The declaration of `table`, with the edit's column when `edited`.
fn declaration(table: &str, edited: bool) -> String {
    let mut columns = vec!["  id bigint PRIMARY KEY", "  name varchar(64) NOT NULL"];
    if edited {
        columns.push("  note varchar(32)");
    }
    format!("CREATE TABLE {table} (\n{}\n);\n", columns.join(",\n"))
}

/// A tenth of the schemas (at least two, one on each engine), spread
/// through them and alternating engines.
fn edited(n: usize) -> Vec<usize> {
    let m = n.div_ceil(10).max(2).min(n);
    let stride = n / m;
    (0..m)
        .map(|k| {
            let i = k * stride;
            if i % 2 == k % 2 {
                i
            } else {
                (i + 1).min(n - 1)
            }
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `10s`, `5m`, `1h30m`, `2m30s`: what `spec.interval` takes.
fn parse_interval(text: &str) -> anyhow::Result<Duration> {
    let mut total = Duration::ZERO;
    let mut digits = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: u64 = digits.parse().with_context(|| format!("interval {text}"))?;
        digits.clear();
        total += match c {
            'h' => Duration::from_secs(3600 * n),
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                Duration::from_millis(n)
            }
            'm' => Duration::from_secs(60 * n),
            's' => Duration::from_secs(n),
            _ => anyhow::bail!("interval {text}: unit {c}"),
        };
    }
    anyhow::ensure!(
        digits.is_empty() && !total.is_zero(),
        "interval {text}: a unit after each number"
    );
    Ok(total)
}

/// The manager's memory and CPU time at one moment.
#[derive(Clone, Copy, Debug)]
struct Sample {
    memory: Memory,
    cpu_s: f64,
}

/// How many of the shape's intervals `window` spans (one interval when the
/// interval does not parse).
fn intervals_in(shape: &Shape, window: Duration) -> f64 {
    window.as_secs_f64() / parse_interval(&shape.interval).map_or(1.0, |d| d.as_secs_f64())
}

fn sample(manager: &Manager) -> anyhow::Result<Sample> {
    Ok(Sample {
        memory: memory_kib(manager.pid())?,
        cpu_s: cpu_seconds(manager.pid())?,
    })
}

/// What one run measured.
#[derive(Debug)]
struct Figures {
    /// Schemas and when each was first `InSync` after the manager started.
    cold_ms: BTreeMap<String, u64>,
    cold: Sample,
    /// The Jobs each schema needed: created by the manager before that
    /// schema was first `InSync`.
    cold_jobs: Vec<String>,
    /// Every Job the manager created until the last was `InSync`.
    cold_created: usize,
    /// One empty Job alone (median of three), in ms.
    single_job_ms: u64,
    /// `burst` empty Jobs at once until all `Complete`, in ms.
    burst_ms: u64,
    idle_window: Duration,
    /// The idle window's requests by (verb, resource).
    idle: BTreeMap<(String, String), usize>,
    idle_jobs: usize,
    /// How late each due pass of the idle window started, sorted, in ms.
    idle_late: Vec<u64>,
    /// How long each pass of the idle window waited for its turn, sorted, in ms.
    idle_turns: Vec<u64>,
    /// The idle window's realm Lease reads, by why the manager read.
    idle_lease_reads: BTreeMap<String, usize>,
    idle_end: Sample,
    /// Every due pass of the run.
    all_late: Vec<u64>,
    edited: Vec<String>,
    /// When each edited schema was `InSync` again with the edit applied.
    edit_ms: BTreeMap<String, u64>,
    /// The edited schemas' Jobs until each was `InSync` again.
    edit_jobs: Vec<String>,
    /// Every Job the manager created until the last edit was `InSync`.
    edit_created: usize,
    edit_end: Sample,
    /// The phase of each schema at the end.
    final_phases: BTreeMap<String, Option<SchemaPhase>>,
}

fn phase(s: &PtahSchema) -> Option<SchemaPhase> {
    s.status.as_ref().and_then(|st| st.phase)
}

fn applied_plan(s: &PtahSchema) -> Option<String> {
    s.status
        .as_ref()
        .and_then(|st| st.applied.as_ref())
        .map(|a| a.plan_uid.clone())
}

/// Lists the schemas every `shape.every` until `done` holds for each of
/// `names`, and answers when (since `t0`) it was first seen to.
async fn first_seen(
    ns: &TestNamespace,
    manager: &Manager,
    shape: &Shape,
    what: &str,
    names: &BTreeSet<String>,
    t0: Instant,
    done: impl Fn(&PtahSchema) -> bool,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let seen = std::cell::RefCell::new(BTreeMap::new());
    // Progress: a line at each tenth of `names` reached.
    let tenths = std::cell::Cell::new(0);
    let patience = Patience::new(shape.patience, shape.every);
    let result = patience
        .poll(what, || {
            let (seen, done, tenths) = (&seen, &done, &tenths);
            async move {
                let listed = ns.api::<PtahSchema>().list(&Default::default()).await?;
                let mut seen = seen.borrow_mut();
                for s in listed {
                    let name = s.metadata.name.clone().unwrap_or_default();
                    if names.contains(&name) && !seen.contains_key(&name) && done(&s) {
                        seen.insert(name, t0.elapsed().as_millis() as u64);
                    }
                }
                let now = seen.len() * 10 / names.len().max(1);
                if now > tenths.get() {
                    tenths.set(now);
                    eprintln!(
                        "scale: {what}: {} of {} after {:.0} s",
                        seen.len(),
                        names.len(),
                        t0.elapsed().as_secs_f64()
                    );
                }
                anyhow::Ok((seen.len() == names.len()).then_some(()))
            }
        })
        .await;
    let seen = seen.into_inner();
    if let Err(e) = result {
        let missing: Vec<&String> = names.iter().filter(|n| !seen.contains_key(*n)).collect();
        let log = manager.log();
        let tail: String = log
            .lines()
            .rev()
            .take(80)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        return Err(e)
            .with_context(|| format!("not yet: {missing:?}; the manager's log ends:\n{tail}"));
    }
    Ok(seen)
}

/// The run: sets the scene in a namespace of its own, measures, prints the
/// report and answers the figures.
async fn scale(harness: &'static Harness, label: &str, shape: &Shape) -> anyhow::Result<Figures> {
    anyhow::ensure!(
        shape.databases >= 2
            && shape.databases.is_multiple_of(2)
            && shape.schemas >= shape.databases,
        "an even number of databases, at least two, and a schema for each: {shape:?}"
    );
    let interval = parse_interval(&shape.interval)?;
    let ns = TestNamespace::for_operator(harness, "scale", label).await?;
    let members = members(shape);
    let mut dbs = Vec::new();
    for j in 0..shape.databases {
        let db = TestDatabase::create(
            ns.harness(),
            engine_of_db(j),
            &format!("{}-db{j:02}", ns.name()),
        )?;
        db.secret(&ns, &format!("db{j:02}")).await?;
        dbs.push(db);
    }
    for m in &members {
        let others: Vec<&str> = members
            .iter()
            .filter(|o| o.db == m.db && o.name != m.name)
            .map(|o| o.table.as_str())
            .collect();
        ns.create::<ConfigMap>(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": m.config_map()},
            "data": {"schema.sql": declaration(&m.table, false)},
        }))
        .await?;
        ns.create::<PtahSchema>(json!({
            "apiVersion": "operator.ptah.run/v1alpha1", "kind": "PtahSchema",
            "metadata": {"name": m.name},
            "spec": {
                "target": {
                    "engine": engine_of_db(m.db).spec(),
                    "urlFrom": {"name": format!("db{:02}", m.db), "key": "url"},
                    "coordinationKey": format!("db{:02}", m.db),
                    "sharedRealm": true,
                },
                "source": {"configMap": {"name": m.config_map(), "keys": ["schema.sql"]}},
                "interval": shape.interval,
                "policy": {"apply": "Always", "exclude": others},
            },
        }))
        .await?;
    }

    // The floor, before the manager starts: one empty Job alone, and
    // `burst` of them at once.
    let (single_job_ms, _) = floor_ms(&ns, 3).await?;
    let burst_ms = empty_jobs_at_once(&ns, shape.burst).await?;

    // Cold start.
    let harness = ns.harness();
    let start_mark = audit::mark(harness)?;
    let t0 = Instant::now();
    let t0_wall = jiff::Timestamp::now();
    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    let all: BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();
    let cold_ms = first_seen(&ns, &manager, shape, "every schema InSync", &all, t0, |s| {
        phase(s) == Some(SchemaPhase::InSync)
    })
    .await?;
    let cold = sample(&manager)?;
    let created = job_creates(&events_since(harness, start_mark, ns.name())?);
    let (cold_created, cold_jobs) = (created.len(), needed(&created, &cold_ms, t0_wall));
    // A run of 1,000 idles for an hour from here: what the cold start
    // measured, at once.
    let cold_s = cold_ms.values().max().copied().unwrap_or(0) as f64 / 1000.0;
    let floor_s = cold_jobs.len() as f64 * burst_ms as f64 / shape.burst as f64 / 1000.0;
    eprintln!(
        "scale: every schema InSync after {cold_s:.1} s; {} Jobs needed ({cold_created} created), floor {floor_s:.1} s ({:.2}x); manager VmRSS {:.1} MiB, VmHWM {:.1} MiB, {:.1} CPU s; idle for three intervals now",
        cold_jobs.len(),
        cold_s / floor_s,
        mib(cold.memory.rss),
        mib(cold.memory.hwm),
        cold.cpu_s
    );

    // Idle: three intervals.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle_mark = audit::mark(harness)?;
    let idle_log = manager.log().len();
    let t1 = Instant::now();
    tokio::time::sleep(3 * interval).await;
    let idle_window = t1.elapsed();
    let idle_events = events_since(harness, idle_mark, ns.name())?;
    let idle = tally(&idle_events);
    let idle_jobs = job_creates(&idle_events).len();
    let idle_text = manager.log().get(idle_log..).unwrap_or_default().to_owned();
    let idle_late = late_ms(&idle_text);
    let idle_turns = turn_wait_ms(&idle_text);
    let idle_lease_reads = count_by(&idle_text, "reading a realm Lease", "why");
    let idle_end = sample(&manager)?;
    // Printed now as well: a long run stopped during the edit keeps them.
    let intervals = intervals_in(shape, idle_window);
    let per = |k: usize| k as f64 / shape.schemas as f64 / intervals;
    let by = |verb: &str| -> String {
        idle.iter()
            .filter(|((v, _), _)| v == verb)
            .map(|((_, r), k)| format!("{r} {:.2}", per(*k)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "scale: idle window over: requests per schema per interval {:.2} (gets: {}), Jobs {:.2}; due passes late p99 {} ms; turn wait p99 {} ms",
        per(idle.values().sum()),
        by("get"),
        per(idle_jobs),
        quantile(&idle_late, 0.99).unwrap_or(0),
        quantile(&idle_turns, 0.99).unwrap_or(0)
    );

    // The edit: a tenth of the ConfigMaps gain a column.
    let chosen: Vec<&Member> = edited(shape.schemas)
        .into_iter()
        .map(|i| &members[i])
        .collect();
    let mut before = BTreeMap::new();
    for s in ns.api::<PtahSchema>().list(&Default::default()).await? {
        before.insert(
            s.metadata.name.clone().unwrap_or_default(),
            applied_plan(&s),
        );
    }
    let edit_mark = audit::mark(harness)?;
    let t2 = Instant::now();
    let t2_wall = jiff::Timestamp::now();
    for m in &chosen {
        ns.set_config_map_key(&m.config_map(), "schema.sql", &declaration(&m.table, true))
            .await?;
    }
    let names: BTreeSet<String> = chosen.iter().map(|m| m.name.clone()).collect();
    let edit_ms = first_seen(&ns, &manager, shape, "every edit InSync", &names, t2, |s| {
        let name = s.metadata.name.as_deref().unwrap_or_default();
        phase(s) == Some(SchemaPhase::InSync)
            && applied_plan(s).is_some()
            && before.get(name).cloned().flatten() != applied_plan(s)
    })
    .await?;
    let edit_end = sample(&manager)?;
    let created = job_creates(&events_since(harness, edit_mark, ns.name())?);
    let (edit_created, edit_jobs) = (created.len(), needed(&created, &edit_ms, t2_wall));

    // The databases say the same: every table there, the edited ones with
    // the column.
    for m in &members {
        anyhow::ensure!(
            dbs[m.db].tables()?.contains(&m.table),
            "{} has no table {} in {}",
            m.name,
            m.table,
            dbs[m.db].name
        );
    }
    for m in &chosen {
        let columns = dbs[m.db].columns(&m.table)?;
        anyhow::ensure!(
            columns.iter().any(|c| c.starts_with("note ")),
            "{} InSync without the edit's column: {columns:?}",
            m.name
        );
    }
    let final_phases = ns
        .api::<PtahSchema>()
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap_or_default(), phase(s)))
        .collect();
    let all_late = late_ms(&manager.log());

    let figures = Figures {
        cold_ms,
        cold,
        cold_jobs,
        cold_created,
        single_job_ms,
        burst_ms,
        idle_window,
        idle,
        idle_jobs,
        idle_late,
        idle_turns,
        idle_lease_reads,
        idle_end,
        all_late,
        edited: chosen.iter().map(|m| m.name.clone()).collect(),
        edit_ms,
        edit_jobs,
        edit_created,
        edit_end,
        final_phases,
    };
    report(shape, &members, &figures);

    let cleanup = Patience::new(shape.patience, shape.every);
    ns.delete_all::<PtahSchema>(&cleanup)
        .await
        .with_context(|| manager.log())?;
    drop(manager);
    drop(dbs);
    Ok(figures)
}

/// The operation of a schema Job (`ptah-<op>-<schema>-<hex>`) and its
/// schema.
fn job_parts(job: &str) -> (&str, &str) {
    let mut parts = job.strip_prefix("ptah-").unwrap_or(job).splitn(3, '-');
    let op = parts.next().unwrap_or_default();
    (op, parts.next().unwrap_or_default())
}

/// The Jobs of the schemas in `done` created before each was done (`done`
/// holds ms since `since`): what reaching that state needed, without the
/// next read cycles of schemas done early.
fn needed(
    created: &[(String, Option<jiff::Timestamp>)],
    done: &BTreeMap<String, u64>,
    since: jiff::Timestamp,
) -> Vec<String> {
    created
        .iter()
        .filter(|(job, at)| {
            done.get(job_parts(job).1).is_some_and(|ms| {
                let by = since + jiff::SignedDuration::from_millis(*ms as i64);
                at.is_none_or(|at| at <= by)
            })
        })
        .map(|(job, _)| job.clone())
        .collect()
}

/// Jobs by operation: `apply 12, observe 24, plan 12`.
fn by_operation(jobs: &[String]) -> String {
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for j in jobs {
        *ops.entry(job_parts(j).0).or_default() += 1;
    }
    ops.iter()
        .map(|(op, k)| format!("{op} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The most Plans and Applies any one database ran: the realm Lease runs
/// them one after another.
fn busiest_realm(jobs: &[String], members: &[Member]) -> usize {
    let db_of: BTreeMap<&str, usize> = members.iter().map(|m| (m.name.as_str(), m.db)).collect();
    let mut per_db: BTreeMap<usize, usize> = BTreeMap::new();
    for j in jobs {
        let (op, schema) = job_parts(j);
        if matches!(op, "plan" | "apply")
            && let Some(db) = db_of.get(schema)
        {
            *per_db.entry(*db).or_default() += 1;
        }
    }
    per_db.values().copied().max().unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn report(shape: &Shape, members: &[Member], f: &Figures) {
    let n = shape.schemas;
    let pg = members
        .iter()
        .filter(|m| engine_of_db(m.db) == Engine::Postgres)
        .count();
    let per_job = f.burst_ms as f64 / shape.burst as f64;
    let cold_s = f.cold_ms.values().max().copied().unwrap_or(0) as f64 / 1000.0;
    let edit_s = f.edit_ms.values().max().copied().unwrap_or(0) as f64 / 1000.0;
    let intervals = intervals_in(shape, f.idle_window);
    let per = |k: usize| k as f64 / n as f64 / intervals;
    let requests: usize = f.idle.values().sum();
    let writes: usize = f
        .idle
        .iter()
        .filter(|((v, _), _)| is_write(v))
        .map(|(_, k)| k)
        .sum();
    let q = |late: &[u64], x: f64| quantile(late, x).map_or("-".to_string(), |v| v.to_string());

    println!();
    println!(
        "scale: {n} PtahSchemas ({pg} PostgreSQL, {} MariaDB) over {} databases ({} schemas a database at most), interval {}, one manager",
        n - pg,
        shape.databases,
        n.div_ceil(shape.databases),
        shape.interval
    );
    println!("| phase | wall s | VmRSS MiB | VmHWM MiB | CPU s in the phase |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    println!(
        "| cold start to all InSync | {cold_s:.1} | {:.1} | {:.1} | {:.1} |",
        mib(f.cold.memory.rss),
        mib(f.cold.memory.hwm),
        f.cold.cpu_s
    );
    println!(
        "| idle, {intervals:.1} intervals | {:.1} | {:.1} | {:.1} | {:.1} |",
        f.idle_window.as_secs_f64(),
        mib(f.idle_end.memory.rss),
        mib(f.idle_end.memory.hwm),
        f.idle_end.cpu_s - f.cold.cpu_s
    );
    println!(
        "| edit of {} to InSync | {edit_s:.1} | {:.1} | {:.1} | {:.1} |",
        f.edited.len(),
        mib(f.edit_end.memory.rss),
        mib(f.edit_end.memory.hwm),
        f.edit_end.cpu_s - f.idle_end.cpu_s
    );
    let floor = |jobs: usize| jobs as f64 * per_job / 1000.0;
    let ratio = |t: f64, fl: f64| if fl > 0.0 { t / fl } else { f64::NAN };
    println!(
        "floor: {} empty Jobs at once all Complete in {:.1} s = {per_job:.0} ms a Job; one empty Job alone {} ms",
        shape.burst,
        f.burst_ms as f64 / 1000.0,
        f.single_job_ms
    );
    let cold_floor = floor(f.cold_jobs.len());
    println!(
        "time to all InSync: {cold_s:.1} s; Jobs needed {} ({}; {} created in all); floor {} × {per_job:.0} ms = {cold_floor:.1} s; time/floor {:.2}",
        f.cold_jobs.len(),
        by_operation(&f.cold_jobs),
        f.cold_created,
        f.cold_jobs.len(),
        ratio(cold_s, cold_floor)
    );
    let busiest = busiest_realm(&f.cold_jobs, members);
    println!(
        "  the realm Lease runs a database's Plans and Applies one at a time: the busiest ran {busiest}, ≥ {busiest} × {} ms = {:.1} s in a row",
        f.single_job_ms,
        busiest as f64 * f.single_job_ms as f64 / 1000.0
    );
    let edit_floor = floor(f.edit_jobs.len());
    println!(
        "edit of {} ({}): InSync again in {edit_s:.1} s; Jobs needed {} ({}; {} created in all); floor {edit_floor:.1} s; time/floor {:.2}",
        f.edited.len(),
        f.edited.join(" "),
        f.edit_jobs.len(),
        by_operation(&f.edit_jobs),
        f.edit_created,
        ratio(edit_s, edit_floor)
    );
    println!(
        "idle: {:.0} s; requests per schema per interval {:.2} ({requests} in all), writes {:.2} ({writes}), Jobs {:.2} ({})",
        f.idle_window.as_secs_f64(),
        per(requests),
        per(writes),
        per(f.idle_jobs),
        f.idle_jobs
    );
    println!("| verb | resource | per schema per interval |");
    println!("| --- | --- | ---: |");
    for ((verb, resource), k) in &f.idle {
        println!("| {verb} | {resource} | {:.3} |", per(*k));
    }
    println!(
        "reconcile queue, idle: {} due passes, late p50 {} ms, p99 {} ms, max {} ms; whole run: {} due passes, p99 {} ms, max {} ms",
        f.idle_late.len(),
        q(&f.idle_late, 0.5),
        q(&f.idle_late, 0.99),
        q(&f.idle_late, 1.0),
        f.all_late.len(),
        q(&f.all_late, 0.99),
        q(&f.all_late, 1.0)
    );
    println!(
        "turns, idle: {} passes, wait p50 {} ms, p99 {} ms, max {} ms",
        f.idle_turns.len(),
        q(&f.idle_turns, 0.5),
        q(&f.idle_turns, 0.99),
        q(&f.idle_turns, 1.0)
    );
    for (why, k) in &f.idle_lease_reads {
        println!(
            "realm Lease reads, idle, {why}: {:.3} per schema per interval",
            per(*k)
        );
    }
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    for p in f.final_phases.values() {
        *phases.entry(format!("{p:?}")).or_default() += 1;
    }
    println!("phases at the end: {phases:?}");
    println!(
        "| schemas | to all InSync s | floor s | time/floor | VmHWM MiB | CPU s | requests /schema/interval | writes /schema/interval | queue p99 ms |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {n} | {cold_s:.1} | {cold_floor:.1} | {:.2} | {:.1} | {:.1} | {:.2} | {:.2} | {} |",
        ratio(cold_s, cold_floor),
        mib(f.edit_end.memory.hwm),
        f.edit_end.cpu_s,
        per(requests),
        per(writes),
        q(&f.idle_late, 0.99)
    );
}

/// The test command's scale: twelve schemas over four databases, three to
/// a database, on both engines. It asserts what it measured, never a time.
/// On a harness of its own (control plane and databases): the MariaDB that
/// once segfaulted under several schemas planning at once
/// (`docs/reliability.md`) would otherwise take every other MariaDB test
/// with it.
#[tokio::test]
async fn a_small_scale_run_converges_idles_and_takes_an_edit_on_both_engines() -> anyhow::Result<()>
{
    let own = conformance::env::OwnHarness::up(
        "scale-small",
        env!("CARGO_BIN_EXE_process-kubelet"),
        Parts {
            control_plane: true,
            databases: true,
            registry: false,
            git: false,
            flux: false,
            jaeger: false,
        },
    )
    .await?;
    let shape = Shape {
        schemas: 12,
        databases: 4,
        interval: "30s".to_string(),
        burst: 8,
        patience: Duration::from_secs(600),
        every: Duration::from_secs(1),
    };
    let f = scale(own.harness, "small", &shape).await?;
    assert_eq!(f.cold_ms.len(), shape.schemas, "every schema InSync");
    assert_eq!(f.edit_ms.len(), f.edited.len(), "every edit applied");
    assert!(f.edited.len() >= 2);
    assert!(
        f.final_phases
            .values()
            .all(|p| !matches!(p, Some(SchemaPhase::Failed | SchemaPhase::Blocked) | None)),
        "{:?}",
        f.final_phases
    );
    // Every schema ran at least an Observe, a Plan and an Apply.
    for op in ["observe", "plan", "apply"] {
        let k = f.cold_jobs.iter().filter(|j| job_parts(j).0 == op).count();
        assert!(k >= shape.schemas, "{op}: {k} Jobs for {}", shape.schemas);
    }
    let applies = f.edit_jobs.iter().filter(|j| job_parts(j).0 == "apply");
    assert!(applies.count() >= f.edited.len(), "{:?}", f.edit_jobs);
    assert!(f.burst_ms > 0 && f.single_job_ms > 0);
    assert!(f.cold.memory.rss > 0 && f.cold.memory.hwm >= f.cold.memory.rss);
    assert!(f.edit_end.cpu_s >= f.idle_end.cpu_s && f.idle_end.cpu_s >= f.cold.cpu_s);
    assert!(f.cold.cpu_s > 0.0);
    // Three intervals idle: every schema read again, with its passes.
    assert!(f.idle_jobs >= shape.schemas, "{:?}", f.idle);
    assert!(!f.idle_late.is_empty(), "due passes in the idle window");
    assert!(f.idle.values().sum::<usize>() > 0);
    Ok(())
}

/// The benchmark: `conformance/bench/scale.sh [N] [INTERVAL]`.
#[tokio::test]
#[ignore = "a benchmark: conformance/bench/scale.sh"]
async fn bench_scale() -> anyhow::Result<()> {
    let schemas: usize = env_or("BENCH_SCHEMAS", 100);
    let databases: usize = env_or("BENCH_DATABASES", 20);
    let shape = Shape {
        schemas,
        // Even, so each engine has half.
        databases: databases.max(2).div_ceil(2) * 2,
        interval: env_or("BENCH_INTERVAL", "5m".to_string()),
        burst: env_or("BENCH_BURST", 20),
        patience: Duration::from_secs(3 * 3600),
        every: Duration::from_secs(2),
    };
    scale(harness().await, "bench", &shape).await?;
    Ok(())
}
