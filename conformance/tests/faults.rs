//! The fault suite: seeded, reproducible faults injected into whole
//! lifecycles on the harness's PostgreSQL and MariaDB, each iteration judged
//! against the database itself.
//!
//! The seed is printed first (`fault seed N`); `PTAH_FAULT_SEED=N` replays
//! a run, and `PTAH_FAULT_ITERATIONS=K` runs K iterations per test instead
//! of the bounded default (`docs/reliability.md`).
//!
//! * **The manager stopped at every write of its order.** One iteration
//!   walks a resource from its first read to `InSync` under `OnApproval`,
//!   and stops the manager right after one durable write of each stage:
//!   the claim, the Job create, the Job's UID, the harvested outcome
//!   (`--fault-point`). A schema's stages are the first Observe and Plan,
//!   the Apply, and the proof's Observe and Plan; a migration's the history
//!   read, the Apply and the reading after the run. Which write each stage
//!   stops at is a Latin square under the seed, so the default four
//!   iterations stop every stage at each of the four writes, on each engine.
//! * **The manager SIGKILLed at random moments** of each stage, and started
//!   again at once; its log says after which write it died.
//! * **Two managers without leader election** on the same resources, as two
//!   replicas of one installation (one realm holder) or two installations
//!   (two), chosen by the seed.
//! * **Something a Job needs taken away**, on a harness of the test's own:
//!   kube-apiserver, etcd or the database server stopped during an Apply;
//!   the git daemon or the registry stopped while a Resolve Job reads the
//!   source; the result receiver away while the runner reports.
//!
//! After every iteration: each approved change ran exactly once, counted in
//! the database (each migration inserts its own row into `ledger`); nothing
//! ran before its approval (the database is read before each approval is
//! given); no Apply claim had two Jobs and no plan two Apply Jobs; the
//! resource is `InSync`, or held in `unresolvedRun` until the suite, as a
//! person, read the ledger and acknowledged the run; and every
//! `ApplyFinished` or `RunFinished` entry of the journal is written once
//! and consumed an approval the suite gave.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::ResourceExt;
use kube::api::ListParams;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use conformance::env::OwnHarness;
use conformance::harness::{Harness, Parts};
use conformance::testkit::admission::Webhooks;
use conformance::testkit::database::{Engine, TestDatabase};
use conformance::testkit::executor;
use conformance::testkit::manager::{Manager, ManagerSpec, free_port};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::operator::{migration_approval, schema_approval, try_create_admitted};
use k8s_openapi::api::batch::v1::Job;
use operator::admission::webhook_configurations;
use operator::api::approval::{
    PtahMigrationApproval, PtahMigrationRunAcknowledgment, PtahSchemaApproval,
};
use operator::api::condition::{MigrationConditionType, MigrationPhase, Reason, SchemaPhase};
use operator::api::journal::{JournalEntry, JournalEntryType};
use operator::api::{PtahMigration, PtahSchema};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

/// The writes of the manager's order, as `--fault-point` names them.
const POINTS: [&str; 4] = [
    "after-claim",
    "after-job-create",
    "after-job-uid",
    "after-outcome",
];

/// The longest one iteration may take.
const ITERATION: Duration = Duration::from_secs(420);

/// The run's seed: `PTAH_FAULT_SEED`, or a new one, printed either way.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("PTAH_FAULT_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            now.as_nanos() as u64
        });
    eprintln!("{test}: fault seed {seed} (replay with PTAH_FAULT_SEED={seed})");
    seed
}

/// Iterations per test: `PTAH_FAULT_ITERATIONS`, else `default`.
fn iterations(default: usize) -> usize {
    std::env::var("PTAH_FAULT_ITERATIONS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// The two families, as the suite drives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Schema,
    Migration,
}

/// A stage of one lifecycle at which the manager is stopped: the operation
/// named to `--fault-operation`, and whether it is the read after the Apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Stage {
    operation: &'static str,
    proof: bool,
}

impl Stage {
    const fn of(operation: &'static str, proof: bool) -> Stage {
        Stage { operation, proof }
    }

    fn label(&self) -> String {
        if self.proof {
            format!("proof {}", self.operation)
        } else {
            self.operation.to_string()
        }
    }
}

impl Kind {
    /// The stages of one walk to `InSync`, in their order.
    fn stages(self) -> Vec<Stage> {
        match self {
            Kind::Schema => vec![
                Stage::of("observe", false),
                Stage::of("plan", false),
                Stage::of("apply", false),
                Stage::of("observe", true),
                Stage::of("plan", true),
            ],
            Kind::Migration => vec![
                Stage::of("history", false),
                Stage::of("apply", false),
                Stage::of("history", true),
            ],
        }
    }
}

/// The migration directory: each version inserts its own row into
/// `ledger`, so the database counts how often each ran.
fn ledger_files() -> Value {
    json!({
        "0000000001_ledger.up.sql": "CREATE TABLE ledger (version integer NOT NULL, note varchar(16) NOT NULL);\nINSERT INTO ledger (version, note) VALUES (1, 'first');\n",
        "0000000001_ledger.down.sql": "DROP TABLE ledger;\n",
        "0000000002_ledger.up.sql": "INSERT INTO ledger (version, note) VALUES (2, 'second');\n",
        "0000000002_ledger.down.sql": "DELETE FROM ledger WHERE version = 2;\n",
    })
}

/// A repository of the iteration's own on `ns`'s harness, holding `files`
/// under `path` on `main`, as a source reading that branch.
fn git_source(ns: &TestNamespace, files: &Value, path: &str) -> anyhow::Result<Value> {
    let ep = conformance::testkit::git::endpoints(ns.harness());
    let repo = format!("{}.git", ns.name());
    let bare = conformance::gitserve::create_repo(&ep.root, &repo, false)?;
    let in_repo: Vec<(String, String)> = files
        .as_object()
        .context("files by name")?
        .iter()
        .map(|(k, v)| {
            let at = if path.ends_with(".sql") {
                path.to_string()
            } else {
                format!("{path}/{k}")
            };
            (at, v.as_str().unwrap_or_default().to_string())
        })
        .collect();
    let refs: Vec<(&str, &str)> = in_repo
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    conformance::gitserve::commit_files(&bare, "main", &refs, "the declared files")?;
    Ok(json!({"git": {
        "url": format!("{}/{repo}", ep.daemon_url),
        "ref": {"branch": "main"},
        "path": path,
    }}))
}

/// An artifact of the iteration's own on `ns`'s harness's registry,
/// holding `files` (`kind`'s artifact), signed by a new key, and the policy
/// trusting that key in the ConfigMap `verification`: as a source reading
/// its tag.
async fn oci_source(ns: &TestNamespace, kind: Kind) -> anyhow::Result<Value> {
    use conformance::testkit::oci;
    use supplychain::oci::{MIGRATIONS_ARTIFACT_TYPE, SCHEMA_ARTIFACT_TYPE};
    let registry = oci::Registry::from_harness(ns.harness())?;
    let tagged = format!("{}/ptah-faults/{}:v1", registry.host, ns.name());
    let (pushed, artifact_type) = match kind {
        Kind::Schema => (
            oci::push_schema_file(&tagged, "schema.sql", executor::SCHEMA_SQL.as_bytes()).await?,
            SCHEMA_ARTIFACT_TYPE,
        ),
        Kind::Migration => {
            let files = ledger_files();
            let listed: Vec<(&str, &[u8])> = files
                .as_object()
                .context("files by name")?
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default().as_bytes()))
                .collect();
            (
                oci::push_migrations(&tagged, &listed).await?,
                MIGRATIONS_ARTIFACT_TYPE,
            )
        }
    };
    let work = tempfile::tempdir()?;
    let signer = oci::signed_by_new_key(&registry, work.path(), "signer", &pushed.pinned)?;
    ns.create::<k8s_openapi::api::core::v1::ConfigMap>(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "verification"},
        "data": {"policy.yaml": oci::key_policy_of(&signer.public_pem, artifact_type)},
    }))
    .await?;
    Ok(json!({
        "oci": {"ociRef": format!("oci://{tagged}"), "transport": {"plainHTTP": true}},
        "verificationPolicyFrom": {"name": "verification", "key": "policy.yaml"},
    }))
}

/// What one iteration saw and did.
#[derive(Default, Debug)]
struct Record {
    /// The writes the manager died after, by stage: from its log, the last
    /// `write-order point` before the kill ("before any write" when none).
    hits: BTreeMap<String, BTreeSet<String>>,
    /// Names of the approvals the suite gave.
    approvals: BTreeSet<String>,
    /// Runs (by operation) the suite acknowledged after reading the ledger.
    acknowledged: BTreeSet<String>,
    /// Dirty revision rows the suite repaired by hand, with what the
    /// ledger held before.
    repairs: Vec<String>,
    /// Managers started.
    managers: usize,
    /// How each Apply ended, from the journal (`ApplyFinished Succeeded`).
    ends: Vec<String>,
}

/// Where an iteration's resource reads its files from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    /// A ConfigMap: the manager snapshots it, no Job reads a server.
    ConfigMap,
    /// A branch of a repository on the harness's git daemon: a Resolve Job
    /// fetches it, and every later Job fetches the commit again.
    Git,
    /// A tag on the harness's registry, signed with a key the resource's
    /// policy trusts: a Resolve Job pins and verifies it, and every later
    /// Job pulls the digest again.
    Oci,
}

/// How an iteration hurts the manager.
#[derive(Clone, Debug)]
enum Fault {
    /// Stop at one write per stage: `(stage, point)`, in stage order.
    Points(Vec<(Stage, &'static str)>),
    /// SIGKILL after a delay within each stage, in milliseconds.
    Moments(Vec<(Stage, u64)>),
    /// A second manager beside the first; `true` when it is another
    /// installation (its own realm holder).
    TwoManagers { installations: bool },
    /// Something the operation `during` needs (`apply`, `resolve`) is
    /// taken away `after` ms from the moment its claim is seen, for `down`
    /// ms, and brought back.
    Outage {
        what: Outage,
        during: &'static str,
        after: u64,
        down: u64,
    },
}

/// What an outage takes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outage {
    /// A service of a harness of the test's own, named as the harness
    /// names it: kube-apiserver, etcd, the database server, the git daemon.
    Service(&'static str),
    /// The result receiver: the manager that serves it is killed and
    /// started again only after the outage.
    Receiver,
}

/// One resource's walk under a fault, on a namespace and a database of its
/// own.
struct Iteration {
    kind: Kind,
    ns: TestNamespace,
    db: TestDatabase,
    port: u16,
    record: Record,
}

impl Iteration {
    async fn start(
        kind: Kind,
        engine: Engine,
        test: &str,
        harness: &'static Harness,
        from: From,
    ) -> anyhow::Result<Iteration> {
        let ns = TestNamespace::for_operator(harness, "faults", test).await?;
        let db = TestDatabase::create(ns.harness(), engine, ns.name())?;
        let policy = json!({"apply": "OnApproval"});
        match (kind, from) {
            (Kind::Schema, From::ConfigMap) => {
                executor::schema_under(&ns, &db, "orders", policy).await?
            }
            (Kind::Migration, From::ConfigMap) => {
                executor::migration_under(&ns, &db, "orders", policy, ledger_files()).await?
            }
            (Kind::Schema, From::Git) => {
                let files = json!({"schema.sql": executor::SCHEMA_SQL});
                let source = git_source(&ns, &files, "schema.sql")?;
                executor::schema_from(&ns, &db, "orders", source, policy).await?
            }
            (Kind::Migration, From::Git) => {
                let source = git_source(&ns, &ledger_files(), "migrations")?;
                executor::migration_from(&ns, &db, "orders", source, policy).await?
            }
            (Kind::Schema, From::Oci) => {
                let source = oci_source(&ns, kind).await?;
                executor::schema_from(&ns, &db, "orders", source, policy).await?
            }
            (Kind::Migration, From::Oci) => {
                let source = oci_source(&ns, kind).await?;
                executor::migration_from(&ns, &db, "orders", source, policy).await?
            }
        }
        Ok(Iteration {
            kind,
            ns,
            db,
            port: free_port()?,
            record: Record::default(),
        })
    }

    fn manager(&mut self, spec: ManagerSpec) -> anyhow::Result<Manager> {
        self.record.managers += 1;
        Manager::start(
            &self.ns,
            &ManagerSpec {
                port: spec.port.or(Some(self.port)),
                ..spec
            },
        )
    }

    /// The resource's phase, whether an Apply ran (a proof is owed or
    /// done), and whether a run is held.
    async fn look(&self) -> anyhow::Result<Look> {
        Ok(match self.kind {
            Kind::Schema => {
                let s = self.ns.api::<PtahSchema>().get("orders").await?;
                let st = s.status.clone().unwrap_or_default();
                Look {
                    phase: st.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
                    operation: claimed(st.active_operation.as_ref()),
                    applied: st
                        .journal
                        .iter()
                        .any(|e| e.type_ == JournalEntryType::ApplyFinished),
                    held: None,
                    dirty: false,
                    plan_uid: st.plan.as_ref().map(|p| p.uid.clone()),
                    journal: st.journal.clone(),
                    done: st.phase == Some(SchemaPhase::InSync)
                        && st
                            .journal
                            .iter()
                            .any(|e| e.type_ == JournalEntryType::ApplyFinished),
                }
            }
            Kind::Migration => {
                let m = self.ns.api::<PtahMigration>().get("orders").await?;
                let st = m.status.clone().unwrap_or_default();
                Look {
                    phase: st.phase.map(|p| format!("{p:?}")).unwrap_or_default(),
                    operation: claimed(st.active_operation.as_ref()),
                    applied: st.last_run.is_some() || st.unresolved_run.is_some(),
                    held: st.unresolved_run.as_ref().map(|r| r.operation_id.clone()),
                    dirty: st.phase == Some(MigrationPhase::Blocked)
                        && st.conditions.iter().any(|c| {
                            c.type_ == MigrationConditionType::Stalled
                                && c.reason == Reason::HistoryDirty
                        }),
                    plan_uid: st.plan.as_ref().map(|p| p.uid.clone()),
                    journal: st.journal.clone(),
                    done: st.phase == Some(MigrationPhase::InSync)
                        && st.last_run.is_some()
                        && st.unresolved_run.is_none(),
                }
            }
        })
    }

    /// Acts as the person around the resource: approves a plan that waits
    /// (after checking the database holds nothing it would change), and
    /// acknowledges a held run after reading the ledger.
    async fn act(&mut self, look: &Look) -> anyhow::Result<()> {
        // A plan that waits gets an approval once every one given so far
        // was consumed: a run held and acknowledged consumed its approval,
        // and the same plan then waits for a new one (the seed).
        let consumed = look
            .journal
            .iter()
            .filter(|e| e.type_ == JournalEntryType::ApprovalAccepted)
            .count();
        if look.phase == "AwaitingApproval"
            && look.plan_uid.is_some()
            && consumed == self.record.approvals.len()
        {
            self.nothing_ran_unapproved()?;
            let name = format!("approval-{}", self.record.approvals.len() + 1);
            // One try a look: a manager that stopped after the look serves
            // no webhook until the walk starts it again.
            let created = match self.kind {
                Kind::Schema => {
                    let s = self.ns.api::<PtahSchema>().get("orders").await?;
                    let approval = schema_approval(&s, &name)?;
                    try_create_admitted::<PtahSchemaApproval>(&self.ns, approval)
                        .await?
                        .is_some()
                }
                Kind::Migration => {
                    let m = self.ns.api::<PtahMigration>().get("orders").await?;
                    let approval = migration_approval(&m, &name)?;
                    try_create_admitted::<PtahMigrationApproval>(&self.ns, approval)
                        .await?
                        .is_some()
                }
            };
            if !created {
                return Ok(());
            }
            self.record.approvals.insert(name);
        }
        if look.dirty && look.held.is_none() {
            self.repair().await?;
        }
        // A person acknowledges a run once: a look taken before the manager
        // settled an acknowledgment already given still shows the run held.
        if let Some(operation) = &look.held
            && look.phase == "Blocked"
            && !self.record.acknowledged.contains(operation)
        {
            // What the run did is established from the database: a held run
            // here never got past its claim or its statements' rollback, so
            // every version ran at most once.
            let counts = self.ledger()?;
            anyhow::ensure!(
                counts.values().all(|n| *n <= 1),
                "a held run left a version applied twice: {counts:?}"
            );
            let m = self.ns.api::<PtahMigration>().get("orders").await?;
            let name = format!("ack-{}", self.record.acknowledged.len() + 1);
            let acknowledged = try_create_admitted::<PtahMigrationRunAcknowledgment>(
                &self.ns,
                json!({
                    "apiVersion": "operator.ptah.run/v1alpha1",
                    "kind": "PtahMigrationRunAcknowledgment",
                    "metadata": {"name": name},
                    "spec": {
                        "migrationRef": {"name": "orders", "uid": m.uid()},
                        "operationID": operation,
                    },
                }),
            )
            .await?;
            if acknowledged.is_some() {
                self.record.acknowledged.insert(operation.clone());
            }
        }
        Ok(())
    }

    /// Where the newest Job of `operation` was when an outage began.
    async fn job_state(&self, operation: &str) -> anyhow::Result<String> {
        let jobs = self
            .ns
            .api::<Job>()
            .list(
                &ListParams::default().labels(&format!("operator.ptah.run/operation={operation}")),
            )
            .await?;
        let ended = |j: &Job| {
            j.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            })
        };
        let newest = jobs
            .items
            .iter()
            .max_by_key(|j| j.metadata.creation_timestamp.clone());
        Ok(match newest {
            None => format!("before the {operation} Job was made"),
            Some(j) if ended(j) => format!("after the {operation} Job ended"),
            Some(_) => format!("while the {operation} Job ran"),
        })
    }

    /// The phase and the reasons and messages of the resource's conditions
    /// that are not True: what it says it waits on.
    async fn waits_on(&self) -> anyhow::Result<String> {
        let (phase, conditions) = match self.kind {
            Kind::Schema => {
                let st = self
                    .ns
                    .api::<PtahSchema>()
                    .get("orders")
                    .await?
                    .status
                    .unwrap_or_default();
                (
                    format!("{:?}", st.phase),
                    serde_json::to_value(&st.conditions)?,
                )
            }
            Kind::Migration => {
                let st = self
                    .ns
                    .api::<PtahMigration>()
                    .get("orders")
                    .await?
                    .status
                    .unwrap_or_default();
                (
                    format!("{:?}", st.phase),
                    serde_json::to_value(&st.conditions)?,
                )
            }
        };
        let field = |c: &Value, f: &str| c[f].as_str().unwrap_or_default().to_string();
        let said: Vec<String> = conditions
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| matches!(c["type"].as_str(), Some("Ready" | "Progressing")))
            .map(|c| {
                format!(
                    "{}={} {}: {}",
                    field(c, "type"),
                    field(c, "status"),
                    field(c, "reason"),
                    field(c, "message")
                )
            })
            .collect();
        Ok(format!("phase {phase}; {}", said.join("; ")))
    }

    /// What a person does about a dirty revision row (`HistoryDirty`): undo
    /// what the interrupted version left (its down half, tolerant of what
    /// never ran), remove its row and those above it, and ask for a read.
    /// The suite never marks a version applied that it cannot see whole.
    async fn repair(&mut self) -> anyhow::Result<()> {
        let rows = self.db.sql(
            "SELECT version FROM schema_migrations WHERE state <> 'applied' ORDER BY version",
        )?;
        let Some(dirty) = rows.lines().next().map(str::trim).filter(|l| !l.is_empty()) else {
            return Ok(());
        };
        let version: i64 = dirty.parse().context("a dirty version")?;
        let before = self.ledger()?;
        match version {
            1 => self.db.sql("DROP TABLE IF EXISTS ledger")?,
            _ if self.db.tables()?.iter().any(|t| t == "ledger") => self
                .db
                .sql(&format!("DELETE FROM ledger WHERE version >= {version}"))?,
            _ => String::new(),
        };
        self.db.sql(&format!(
            "DELETE FROM schema_migrations WHERE version >= {version}"
        ))?;
        self.record
            .repairs
            .push(format!("version {version} dirty, ledger {before:?}"));
        let at = k8s_openapi::jiff::Timestamp::now().to_string();
        self.ns
            .api::<PtahMigration>()
            .patch(
                "orders",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                    operator::api::annotations::READ_REQUESTED_AT: at,
                }}})),
            )
            .await?;
        Ok(())
    }

    /// How often each version's row is in the ledger (none before the
    /// first version ran).
    fn ledger(&self) -> anyhow::Result<BTreeMap<i64, usize>> {
        let mut counts = BTreeMap::new();
        if !self.db.tables()?.iter().any(|t| t == "ledger") {
            return Ok(counts);
        }
        for line in self.db.sql("SELECT version FROM ledger")?.lines() {
            let v: i64 = line.trim().parse().context("a ledger version")?;
            *counts.entry(v).or_insert(0) += 1;
        }
        Ok(counts)
    }

    /// Before any approval of ours, nothing is applied; after one, nothing
    /// beyond what the approvals so far carried (a migration's second plan
    /// is approved only after its first ran).
    fn nothing_ran_unapproved(&self) -> anyhow::Result<()> {
        if !self.record.approvals.is_empty() {
            return Ok(());
        }
        match self.kind {
            Kind::Schema => anyhow::ensure!(
                self.db.tables()?.is_empty(),
                "tables exist before any approval: {:?}",
                self.db.tables()?
            ),
            Kind::Migration => anyhow::ensure!(
                self.ledger()?.is_empty(),
                "the ledger has rows before any approval: {:?}",
                self.ledger()?
            ),
        }
        Ok(())
    }

    /// Every check of an iteration's end, against the database and the API.
    async fn judge(&self, look: &Look) -> anyhow::Result<()> {
        match self.kind {
            Kind::Schema => {
                anyhow::ensure!(
                    self.db.tables()? == ["orders"],
                    "tables {:?}",
                    self.db.tables()?
                );
                // By name: an OCI schema artifact holds Ptah's canonical
                // `schema.hcl`, whose columns are in name order.
                let mut columns = self.db.columns("orders")?;
                columns.sort();
                anyhow::ensure!(
                    columns.len() == 2
                        && columns[0].starts_with("customer ")
                        && columns[1].starts_with("id "),
                    "orders is not as declared: {columns:?}"
                );
            }
            Kind::Migration => {
                let counts = self.ledger()?;
                anyhow::ensure!(
                    counts == BTreeMap::from([(1, 1), (2, 1)]),
                    "each version must run exactly once; the ledger counts {counts:?}"
                );
            }
        }
        // No claim with two Jobs.
        let jobs = self.ns.api::<Job>().list(&Default::default()).await?;
        let mut by_operation: BTreeMap<String, usize> = BTreeMap::new();
        for j in &jobs.items {
            if j.labels()
                .get("operator.ptah.run/operation")
                .map(String::as_str)
                != Some("apply")
            {
                continue;
            }
            let op = j
                .annotations()
                .get("operator.ptah.run/operation-id")
                .cloned()
                .unwrap_or_default();
            *by_operation.entry(op).or_insert(0) += 1;
        }
        anyhow::ensure!(
            by_operation.values().all(|n| *n == 1),
            "an Apply claim with more than one Job (a replay): {by_operation:?}"
        );
        // The journal: each Apply's end once, each consuming an approval of ours.
        let ended = match self.kind {
            Kind::Schema => JournalEntryType::ApplyFinished,
            Kind::Migration => JournalEntryType::RunFinished,
        };
        let ends: Vec<&JournalEntry> = look.journal.iter().filter(|e| e.type_ == ended).collect();
        anyhow::ensure!(!ends.is_empty(), "no {ended:?} entry: {:?}", look.journal);
        let mut seen = BTreeSet::new();
        for e in &ends {
            let op = e.operation_id.clone().unwrap_or_default();
            anyhow::ensure!(seen.insert(op.clone()), "{ended:?} twice for {op}");
        }
        for op in by_operation.keys() {
            anyhow::ensure!(
                seen.contains(op),
                "the Apply Job of {op} has no {ended:?} entry: {:?}",
                look.journal
            );
        }
        let accepted: Vec<&JournalEntry> = look
            .journal
            .iter()
            .filter(|e| e.type_ == JournalEntryType::ApprovalAccepted)
            .collect();
        // Under OnApproval every Apply spends an approval of its own: a plan
        // runs again (a held run acknowledged, a change the proof found
        // still to make) only on a new one.
        anyhow::ensure!(
            by_operation.len() <= accepted.len(),
            "{} Apply Jobs on {} approvals (a replay): {:?}",
            by_operation.len(),
            accepted.len(),
            look.journal
        );
        for a in &accepted {
            let name = a.approval_name.clone().unwrap_or_default();
            anyhow::ensure!(
                self.record.approvals.contains(&name),
                "an approval the suite never gave was consumed: {name}"
            );
        }
        for e in &ends {
            let consumed = match self.kind {
                Kind::Schema => {
                    e.plan_name.is_some() && accepted.iter().any(|a| a.plan_name == e.plan_name)
                }
                Kind::Migration => {
                    e.approval_uid.is_some()
                        && accepted.iter().any(|a| a.approval_uid == e.approval_uid)
                }
            };
            anyhow::ensure!(
                consumed,
                "{ended:?} of plan {:?} consumed no approval: {:?}",
                e.plan_name,
                look.journal
            );
        }
        Ok(())
    }

    async fn finish(self) -> anyhow::Result<Record> {
        // A manager lets the finalizers go.
        let manager = Manager::start(
            &self.ns,
            &ManagerSpec {
                port: Some(self.port),
                ..Default::default()
            },
        )?;
        let patience = conformance::testkit::operator::PATIENCE;
        match self.kind {
            Kind::Schema => self.ns.delete_all::<PtahSchema>(&patience).await?,
            Kind::Migration => self.ns.delete_all::<PtahMigration>(&patience).await?,
        }
        drop(manager);
        Ok(self.record)
    }
}

/// What the suite reads of the resource on each look.
struct Look {
    phase: String,
    /// The claim's operation (`observe`, `apply`, …), when one is in flight.
    operation: Option<String>,
    applied: bool,
    held: Option<String>,
    /// Blocked on a dirty revision row (a run stopped inside a version).
    dirty: bool,
    plan_uid: Option<String>,
    journal: Vec<JournalEntry>,
    done: bool,
}

fn claimed(claim: Option<&operator::api::status::ActiveOperation>) -> Option<String> {
    claim.map(|c| format!("{:?}", c.type_).to_ascii_lowercase())
}

/// The last write of the order a manager's log records before it ended.
fn last_write(log: &str) -> String {
    log.lines()
        .rev()
        .find(|l| l.contains("write-order point"))
        .and_then(|l| {
            let point = l.split("point=").nth(1)?.split_whitespace().next()?;
            let op = l.split("operation=").nth(1)?.split_whitespace().next()?;
            let clean = |s: &str| {
                s.chars()
                    .filter(|c| c.is_ascii_alphanumeric())
                    .collect::<String>()
            };
            Some(format!(
                "{} of {}",
                clean(point),
                clean(op).to_ascii_lowercase()
            ))
        })
        .unwrap_or_else(|| "before any write".to_string())
}

/// A manager told to stop at `next`'s write, or at none.
fn spec_for(next: Option<&(Stage, &'static str)>) -> ManagerSpec {
    match next {
        Some((stage, point)) => ManagerSpec {
            fault_point: Some(point),
            fault_operation: Some(stage.operation),
            ..Default::default()
        },
        None => ManagerSpec::default(),
    }
}

/// A manager that stopped at its fault point is started again, told to
/// stop at the next stage's write; one that ended otherwise fails the run.
fn restart_if_stopped(
    it: &mut Iteration,
    manager: &mut Manager,
    points: &mut Vec<(Stage, &'static str)>,
) -> anyhow::Result<()> {
    let Some(status) = manager.try_exit()? else {
        return Ok(());
    };
    anyhow::ensure!(
        status.code() == Some(operator::controller::FAULT_EXIT_CODE) && !points.is_empty(),
        "the manager ended by itself ({status}); its log:\n{}",
        manager.log()
    );
    let (stage, _) = points.remove(0);
    it.record
        .hits
        .entry(stage.label())
        .or_default()
        .insert(last_write(&manager.log()));
    *manager = it.manager(spec_for(points.first()))?;
    Ok(())
}

/// Runs one iteration under `fault` to its end, and judges it.
async fn run(kind: Kind, engine: Engine, test: &str, fault: Fault) -> anyhow::Result<Record> {
    run_on(harness().await, From::ConfigMap, kind, engine, test, fault).await
}

/// [`run`] on `harness`.
async fn run_on(
    harness: &'static Harness,
    from: From,
    kind: Kind,
    engine: Engine,
    test: &str,
    fault: Fault,
) -> anyhow::Result<Record> {
    let mut it = Iteration::start(kind, engine, test, harness, from).await?;
    // The stages still to hurt, and how.
    let mut points: Vec<(Stage, &'static str)> = match &fault {
        Fault::Points(p) => p.clone(),
        _ => vec![],
    };
    let mut moments: Vec<(Stage, u64)> = match &fault {
        Fault::Moments(m) => m.clone(),
        _ => vec![],
    };
    let mut manager = it.manager(spec_for(points.first()))?;
    let _webhooks =
        Webhooks::of_manager(&it.ns, webhook_configurations, it.port, manager.tls_dir()).await?;
    let mut second = match fault {
        Fault::TwoManagers { installations } => {
            let holder = format!("test-{}-b", it.ns.name());
            Some(it.manager(ManagerSpec {
                port: Some(free_port()?),
                holder: Some(holder.clone()),
                realm_holder: installations.then_some(holder),
                ..Default::default()
            })?)
        }
        _ => None,
    };
    let mut outage = match fault {
        Fault::Outage {
            what,
            during,
            after,
            down,
        } => Some((what, during, after, down)),
        _ => None,
    };
    let mut outage_at: Option<Instant> = None;
    let mut kill_at: Option<Instant> = None;
    let start = Instant::now();
    let look = loop {
        if start.elapsed() >= ITERATION {
            let said = it.waits_on().await.unwrap_or_else(|e| format!("{e:#}"));
            anyhow::bail!(
                "iteration {test} under {fault:?} did not end within {ITERATION:?}; it says {said}; \
                 the manager's log:\n{}",
                manager.log()
            );
        }
        restart_if_stopped(&mut it, &mut manager, &mut points)?;
        let look = it.look().await?;
        // A kill at a random moment of the stage whose claim is in flight;
        // the stages before it went by between two looks.
        let current = moments.iter().position(|(stage, _)| {
            look.operation.as_deref() == Some(stage.operation) && stage.proof == look.applied
        });
        let gone = if look.done {
            moments.len()
        } else {
            current.unwrap_or(0)
        };
        for (stage, _) in moments.drain(..gone) {
            kill_at = None;
            it.record
                .hits
                .entry(stage.label())
                .or_default()
                .insert("missed".to_string());
        }
        if current.is_some() && !look.done {
            let (stage, delay) = moments[0];
            let at = *kill_at.get_or_insert_with(|| Instant::now() + Duration::from_millis(delay));
            if Instant::now() >= at {
                manager.kill();
                it.record
                    .hits
                    .entry(stage.label())
                    .or_default()
                    .insert(last_write(&manager.log()));
                moments.remove(0);
                kill_at = None;
                manager = it.manager(ManagerSpec::default())?;
            }
        }
        // The outage begins a moment after the operation's claim is seen,
        // while its Job is made, runs or reports, and ends after its length.
        if let Some((what, during, after, down)) = outage
            && look.operation.as_deref() == Some(during)
        {
            let at =
                *outage_at.get_or_insert_with(|| Instant::now() + Duration::from_millis(after));
            if Instant::now() >= at {
                let when = it.job_state(during).await?;
                let label = format!("{what:?} down for {down} ms");
                it.record
                    .hits
                    .entry(label.clone())
                    .or_default()
                    .insert(when);
                match what {
                    Outage::Service(name) => {
                        conformance::service::stop(&harness.state, name, Duration::from_secs(10))?;
                        tokio::time::sleep(Duration::from_millis(down)).await;
                        // What the resource says it waits on, as the
                        // outage ends (with the API there to ask).
                        if !matches!(name, "kube-apiserver" | "etcd") {
                            let said = it.waits_on().await?;
                            it.record.hits.entry(label).or_default().insert(said);
                        }
                        harness.up().await.with_context(|| format!("{name} back"))?;
                    }
                    Outage::Receiver => {
                        manager.kill();
                        tokio::time::sleep(Duration::from_millis(down)).await;
                        manager = it.manager(ManagerSpec::default())?;
                    }
                }
                outage = None;
                continue;
            }
        }
        if look.done {
            break look;
        }
        // The person acts only while a manager serves the webhooks: one
        // that stopped since the look (a stop right after the write that
        // made the plan wait comes within milliseconds) is started again.
        if look.phase == "AwaitingApproval" || look.held.is_some() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        restart_if_stopped(&mut it, &mut manager, &mut points)?;
        it.act(&look).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // An outage whose operation went by between two looks is reported.
    if let Some((what, during, _, down)) = outage {
        it.record
            .hits
            .entry(format!("{what:?} down for {down} ms"))
            .or_default()
            .insert(format!("missed: the {during} went by between two looks"));
    }
    // A stop the walk never came to (its write did not happen, or came
    // fused with another) is reported, not hidden.
    for (stage, point) in points {
        it.record
            .hits
            .entry(stage.label())
            .or_default()
            .insert(format!("{point} not reached"));
    }
    it.judge(&look).await.with_context(|| {
        format!(
            "iteration {test} under {fault:?}; the manager's log:\n{}",
            manager.log()
        )
    })?;
    it.record.ends = look
        .journal
        .iter()
        .filter(|e| {
            matches!(
                e.type_,
                JournalEntryType::ApplyFinished | JournalEntryType::RunFinished
            )
        })
        .map(|e| format!("{:?} {:?}", e.type_, e.outcome))
        .collect();
    drop(second.take());
    drop(manager);
    it.finish().await
}

/// Prints what a test's iterations hit, for `docs/reliability.md`.
fn report(test: &str, records: &[Record]) {
    let mut hits: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in records {
        for (stage, points) in &r.hits {
            hits.entry(stage.clone())
                .or_default()
                .extend(points.iter().cloned());
        }
    }
    let managers: usize = records.iter().map(|r| r.managers).sum();
    let acks: usize = records.iter().map(|r| r.acknowledged.len()).sum();
    let approvals: usize = records.iter().map(|r| r.approvals.len()).sum();
    for repair in records.iter().flat_map(|r| &r.repairs) {
        eprintln!("{test}:   repaired by hand: {repair}");
    }
    let mut ends: BTreeMap<&str, usize> = BTreeMap::new();
    for e in records.iter().flat_map(|r| &r.ends) {
        *ends.entry(e).or_default() += 1;
    }
    eprintln!(
        "{test}: {} iterations, {managers} managers started, {approvals} approvals given, \
         {acks} held runs acknowledged, Apply ends {ends:?}",
        records.len()
    );
    for (stage, points) in hits {
        eprintln!(
            "{test}:   {stage}: {}",
            points.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
}

/// The manager stopped after one write per stage, the writes a Latin square
/// under the seed: iteration `i` stops stage `k` at point `(perm[k] + i)
/// mod 4`.
async fn stopped_at_each_write(engine: Engine, test: &str, kind: Kind) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed(test));
    let stages = kind.stages();
    let mut perm: Vec<usize> = (0..stages.len()).map(|k| k % POINTS.len()).collect();
    perm.shuffle(&mut rng);
    let mut records = vec![];
    for i in 0..iterations(POINTS.len()) {
        let points = stages
            .iter()
            .enumerate()
            .map(|(k, s)| (*s, POINTS[(perm[k] + i) % POINTS.len()]))
            .collect();
        records.push(run(kind, engine, &format!("{test}-{i}"), Fault::Points(points)).await?);
    }
    report(test, &records);
    Ok(())
}

/// The manager SIGKILLed at a random moment of each stage.
async fn killed_at_random_moments(engine: Engine, test: &str, kind: Kind) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed(test));
    let mut records = vec![];
    for i in 0..iterations(1) {
        let moments = kind
            .stages()
            .into_iter()
            .map(|s| (s, rng.random_range(0..2500)))
            .collect();
        records.push(
            run(
                kind,
                engine,
                &format!("{test}-{i}"),
                Fault::Moments(moments),
            )
            .await?,
        );
    }
    report(test, &records);
    Ok(())
}

/// Two managers without leader election on the same resources.
async fn two_managers(engine: Engine, test: &str, kind: Kind) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed(test));
    let first = rng.random_bool(0.5);
    let mut records = vec![];
    // Both kinds of second manager, the first chosen by the seed.
    for i in 0..iterations(2) {
        let installations = first ^ (i % 2 == 1);
        eprintln!(
            "{test}-{i}: two {}",
            if installations {
                "installations"
            } else {
                "replicas of one installation"
            }
        );
        records.push(
            run(
                kind,
                engine,
                &format!("{test}-{i}"),
                Fault::TwoManagers { installations },
            )
            .await?,
        );
    }
    report(test, &records);
    Ok(())
}

conformance::on_both_engines!(
    a_schema_whose_manager_stops_after_each_write_applies_once,
    "schema-points",
    stopped_at_each_write,
    Kind::Schema
);
conformance::on_both_engines!(
    a_migration_whose_manager_stops_after_each_write_runs_each_version_once,
    "mig-points",
    stopped_at_each_write,
    Kind::Migration
);
conformance::on_both_engines!(
    a_schema_whose_manager_is_killed_at_random_applies_once,
    "schema-random",
    killed_at_random_moments,
    Kind::Schema
);
conformance::on_both_engines!(
    a_migration_whose_manager_is_killed_at_random_runs_each_version_once,
    "mig-random",
    killed_at_random_moments,
    Kind::Migration
);
/// Two managers without leader election on one namespace: replicas of one
/// installation, and two installations. The claim is stored before its
/// Lease is taken, and the Lease keeps its epoch for the operation that
/// holds it, so whichever manager loses a write race takes nothing and the
/// other's claim runs once (`docs/reliability.md`).
mod two_managers_on_the_same_resources {
    use super::*;

    #[tokio::test]
    async fn a_schema_applies_once_on_postgresql() -> anyhow::Result<()> {
        two_managers(Engine::Postgres, "schema-two-pg", Kind::Schema).await
    }

    #[tokio::test]
    async fn a_schema_applies_once_on_mariadb() -> anyhow::Result<()> {
        two_managers(Engine::MariaDb, "schema-two-maria", Kind::Schema).await
    }

    #[tokio::test]
    async fn a_migration_runs_each_version_once_on_postgresql() -> anyhow::Result<()> {
        two_managers(Engine::Postgres, "mig-two-pg", Kind::Migration).await
    }

    #[tokio::test]
    async fn a_migration_runs_each_version_once_on_mariadb() -> anyhow::Result<()> {
        two_managers(Engine::MariaDb, "mig-two-maria", Kind::Migration).await
    }
}

/// A harness of the test's own: the control plane, the databases and git,
/// and the registries when `registry`.
async fn own_harness(test: &str, registry: bool) -> anyhow::Result<OwnHarness> {
    let parts = Parts {
        control_plane: true,
        databases: true,
        registry,
        git: true,
        flux: false,
        jaeger: false,
    };
    OwnHarness::up(test, env!("CARGO_BIN_EXE_process-kubelet"), parts).await
}

/// What an outage of `service` stops on `engine`: the harness's own names.
fn service_of(engine: Engine, service: &'static str) -> &'static str {
    match (service, engine) {
        ("database", Engine::Postgres) => "postgres",
        ("database", Engine::MariaDb) => "mariadb",
        (other, _) => other,
    }
}

/// `service` stopped at a random moment of an Apply (0–1.5 s after its
/// claim is seen: before its Job, while it runs, or as it reports) for
/// 2–8 s, then started again; a schema and a migration, on a harness of
/// the test's own.
async fn service_outage(engine: Engine, test: &str, service: &'static str) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed(test));
    let own = own_harness(test, false).await?;
    let what = Outage::Service(service_of(engine, service));
    let mut records = vec![];
    for i in 0..iterations(1) {
        for kind in [Kind::Schema, Kind::Migration] {
            let fault = Fault::Outage {
                what,
                during: "apply",
                after: rng.random_range(0..1500),
                down: rng.random_range(2000..8000),
            };
            let name = format!(
                "{test}-{i}-{}",
                if kind == Kind::Schema { "s" } else { "m" }
            );
            records.push(run_on(own.harness, From::ConfigMap, kind, engine, &name, fault).await?);
        }
    }
    report(test, &records);
    Ok(())
}

/// The server of `from` (the git daemon, the registry) stopped while a Job
/// reads it, for 8–14 s (longer than the retry interval of 5 s), then
/// started again: the read fails, is retried, and the resource goes on by
/// itself. The registry is read by the Resolve and by the Verify, which
/// the seed chooses between; a signature the registry could not show is a
/// failed read, never a refusal.
async fn source_outage(engine: Engine, test: &str, kind: Kind, from: From) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed(test));
    let (service, registry) = match from {
        From::Git => ("git-daemon", false),
        From::Oci => ("registry", true),
        From::ConfigMap => anyhow::bail!("a ConfigMap has no server to stop"),
    };
    let own = own_harness(test, registry).await?;
    let mut records = vec![];
    for i in 0..iterations(1) {
        // A Verify Job reads the registry within a second of its claim.
        let (during, within) = match from {
            From::Oci if rng.random_bool(0.5) => ("verify", 150),
            _ => ("resolve", 1000),
        };
        let fault = Fault::Outage {
            what: Outage::Service(service),
            during,
            after: rng.random_range(0..within),
            down: rng.random_range(8000..14000),
        };
        let name = format!("{test}-{i}");
        records.push(run_on(own.harness, from, kind, engine, &name, fault).await?);
    }
    report(test, &records);
    Ok(())
}

/// The result receiver away while an Apply's Job ends: the manager is
/// killed a moment after the claim is seen and started again only 3–10 s
/// later, so the runner's report finds nobody and is retried.
async fn receiver_outage(engine: Engine, test: &str, kind: Kind) -> anyhow::Result<()> {
    let mut rng = StdRng::seed_from_u64(seed(test));
    let mut records = vec![];
    for i in 0..iterations(1) {
        let fault = Fault::Outage {
            what: Outage::Receiver,
            during: "apply",
            after: rng.random_range(0..1500),
            down: rng.random_range(3000..10000),
        };
        records.push(run(kind, engine, &format!("{test}-{i}"), fault).await?);
    }
    report(test, &records);
    Ok(())
}

conformance::on_both_engines!(
    the_api_server_restarted_during_an_apply,
    "apiserver",
    service_outage,
    "kube-apiserver"
);
conformance::on_both_engines!(
    etcd_restarted_during_an_apply,
    "etcd",
    service_outage,
    "etcd"
);
conformance::on_both_engines!(
    the_database_stopped_during_an_apply,
    "db-down",
    service_outage,
    "database"
);
conformance::on_both_engines!(
    a_schema_whose_git_server_is_away_while_it_resolves_recovers,
    "schema-git",
    source_outage,
    Kind::Schema,
    From::Git
);
conformance::on_both_engines!(
    a_migration_whose_git_server_is_away_while_it_resolves_recovers,
    "mig-git",
    source_outage,
    Kind::Migration,
    From::Git
);
conformance::on_both_engines!(
    a_schema_whose_registry_is_away_while_it_resolves_recovers,
    "schema-oci",
    source_outage,
    Kind::Schema,
    From::Oci
);
conformance::on_both_engines!(
    a_migration_whose_registry_is_away_while_it_resolves_recovers,
    "mig-oci",
    source_outage,
    Kind::Migration,
    From::Oci
);
conformance::on_both_engines!(
    a_schema_whose_result_receiver_is_away_applies_once,
    "schema-recv",
    receiver_outage,
    Kind::Schema
);
conformance::on_both_engines!(
    a_migration_whose_result_receiver_is_away_runs_each_version_once,
    "mig-recv",
    receiver_outage,
    Kind::Migration
);

#[test]
fn the_log_tells_after_which_write_a_manager_died() {
    let log = "x\n2026 DEBUG ptah_operator: write-order point point=AfterClaim operation=Apply\n\
               2026 DEBUG ptah_operator: write-order point point=AfterJobCreate operation=Apply\nother";
    assert_eq!(last_write(log), "AfterJobCreate of apply");
    assert_eq!(last_write("nothing"), "before any write");
}
