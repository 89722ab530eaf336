//! The executor contract: every output of the pinned Ptah CLI that the
//! runner parses, produced again against the harness's PostgreSQL and
//! MariaDB, compared with the golden files in
//! `conformance/testdata/executor/<engine>/`, and fed through the runner's
//! own parsers. A Ptah version bump is a reviewable diff of those files:
//! `PTAH_BLESS=1 cargo nextest run -p conformance --test executor_contract`
//! rewrites them.
//!
//! Only what changes from run to run is normalised: times, the database
//! server's port, and the temporary directories. Ptah runs through the
//! runner's [`Executor`], with the database URL in its environment.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use conformance::harness::Harness;
use conformance::testkit::database::{Engine, TestDatabase};
use operator::runner::executor::{ChildRun, Executor};
use operator::runner::reports::{self, Planned, ReportError};

async fn harness() -> &'static Harness {
    conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await
}

const LIMIT: Duration = Duration::from_secs(120);

const SCHEMA: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL\n);\nCREATE INDEX orders_customer ON orders (customer);\n";
const SCHEMA_MORE: &str = "CREATE TABLE orders (\n  id bigint PRIMARY KEY,\n  customer varchar(64) NOT NULL,\n  note varchar(200)\n);\nCREATE INDEX orders_customer ON orders (customer);\n";
const DUPLICATES: &str = "CREATE TABLE items (\n  id bigint PRIMARY KEY,\n  code int NOT NULL\n);\nCREATE UNIQUE INDEX items_code ON items (code);\n";

fn golden_dir(engine: Engine) -> PathBuf {
    let name = match engine {
        Engine::Postgres => "postgresql",
        Engine::MariaDb => "mariadb",
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/executor")
        .join(name)
}

/// One engine's contract run: a database of its own, a source directory,
/// Ptah's working directory.
struct Contract {
    engine: Engine,
    db: TestDatabase,
    exec: Executor,
    source: tempfile::TempDir,
    work: tempfile::TempDir,
    port: String,
}

impl Contract {
    fn new(harness: &Harness, engine: Engine) -> anyhow::Result<Self> {
        let name = match engine {
            Engine::Postgres => "contract_pg",
            Engine::MariaDb => "contract_maria",
        };
        let db = TestDatabase::create(harness, engine, name)?;
        let url = db.url();
        let port = url::Url::parse(&url)?
            .port()
            .context("the harness URL names its port")?
            .to_string();
        let work = tempfile::tempdir()?;
        let exec = Executor::new(
            &conformance::tools::bin_dir()?.join("ptah"),
            work.path(),
            url,
        );
        Ok(Self {
            engine,
            db,
            exec,
            source: tempfile::tempdir()?,
            work,
            port,
        })
    }

    fn declare(&self, sql: &str) -> anyhow::Result<()> {
        std::fs::write(self.source.path().join("schema.sql"), sql)?;
        Ok(())
    }

    async fn ptah(&self, args: &[&str]) -> anyhow::Result<ChildRun> {
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                a.replace("{source}", &self.source.path().display().to_string())
                    .replace("{work}", &self.work.path().display().to_string())
            })
            .collect();
        Ok(self.exec.run(&args, LIMIT).await?)
    }

    async fn drift(&self) -> anyhow::Result<ChildRun> {
        self.ptah(&[
            "schema",
            "drift",
            "--schema-file={source}",
            "--format=json",
            "--severity=all",
        ])
        .await
    }

    async fn plan(&self) -> anyhow::Result<ChildRun> {
        self.ptah(&["schema", "plan", "--schema-file={source}", "--dry-run"])
            .await
    }

    /// Writes `run`'s stdout as the plan file `name` under the work dir.
    fn keep_plan(&self, run: &ChildRun, name: &str) -> anyhow::Result<String> {
        let path = self.work.path().join(name);
        std::fs::write(&path, &run.stdout)?;
        Ok(path.display().to_string())
    }

    async fn apply(&self, plan: &str, dry_run: bool) -> anyhow::Result<ChildRun> {
        let flag = if dry_run {
            "--dry-run"
        } else {
            "--auto-approve"
        };
        self.ptah(&[
            "schema",
            "apply",
            &format!("--plan={plan}"),
            flag,
            "--lock-timeout=30s",
        ])
        .await
    }

    /// `run` with what changes between runs replaced.
    fn normalise(&self, run: &ChildRun) -> String {
        let text = |b: &[u8]| {
            let s = String::from_utf8_lossy(b)
                .replace(&self.source.path().display().to_string(), "/source")
                .replace(&self.work.path().display().to_string(), "/work")
                .replace(&format!(":{}", self.port), ":PORT")
                .replace(&format!("port={}", self.port), "port=PORT");
            times(&s)
        };
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            run.exit,
            text(&run.stdout),
            text(&run.stderr)
        )
    }

    /// Compares `run` with the golden `name` (or writes it, blessed).
    fn golden(&self, name: &str, run: &ChildRun) -> anyhow::Result<()> {
        let path = golden_dir(self.engine).join(format!("schema-{name}.golden"));
        let got = self.normalise(run);
        assert!(
            !got.contains(&self.db.password()),
            "a golden would hold the database password: {name}"
        );
        if std::env::var_os("PTAH_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().context("dir")?)?;
            std::fs::write(&path, &got)?;
            return Ok(());
        }
        let want = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "{} is missing: run with PTAH_BLESS=1 to write it",
                path.display()
            )
        })?;
        assert!(
            want == got,
            "ptah's output moved from {}:\n--- golden\n{want}\n--- now\n{got}",
            path.display()
        );
        Ok(())
    }
}

/// RFC 3339 instants and `slog` times become `TIME`.
fn times(s: &str) -> String {
    let re =
        regex::Regex::new(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
            .expect("a valid pattern");
    re.replace_all(s, "TIME").into_owned()
}

async fn contract(engine: Engine) -> anyhow::Result<()> {
    let c = Contract::new(harness().await, engine)?;
    c.declare(SCHEMA)?;

    // Drift found, on stderr, exit 1.
    let run = c.drift().await?;
    c.golden("drift-with-drift", &run)?;
    let drift = reports::drift(&run)?;
    assert!(
        drift.summary.drift && drift.summary.finding_count >= 2,
        "{drift:?}"
    );

    // The plan document, twice byte-identical.
    let first = c.plan().await?;
    let second = c.plan().await?;
    assert_eq!(first.stdout, second.stdout, "two plans differ");
    c.golden("plan-document", &first)?;
    let Planned::Changes { document, .. } = reports::plan(&first)? else {
        panic!("expected a plan with changes");
    };
    assert_eq!(document.statements.len(), 2);
    let plan = c.keep_plan(&first, "first.plan.json")?;

    // The dry run of the exact bytes, then the Apply.
    let dry = c.apply(&plan, true).await?;
    c.golden("apply-dry-run", &dry)?;
    reports::dry_run(&dry)?;
    let applied = c.apply(&plan, false).await?;
    c.golden("apply-success", &applied)?;
    reports::applied(&applied)?;
    assert_eq!(c.db.tables()?, ["orders"]);

    // Converged: the empty plan and a clean report on stdout.
    let empty = c.plan().await?;
    c.golden("plan-empty", &empty)?;
    assert!(matches!(reports::plan(&empty)?, Planned::Synced));
    let clean = c.drift().await?;
    c.golden("drift-clean", &clean)?;
    assert!(!reports::drift(&clean)?.summary.drift);

    // A plan made stale by a change by hand: Ptah refuses it under its lock.
    c.declare(SCHEMA_MORE)?;
    let more = c.plan().await?;
    let more = c.keep_plan(&more, "more.plan.json")?;
    c.db.sql("ALTER TABLE orders ADD COLUMN extra int")?;
    let stale = c.apply(&more, false).await?;
    c.golden("apply-stale", &stale)?;
    let e = reports::applied(&stale).unwrap_err();
    assert!(e.to_string().contains("stale"), "{e}");

    // An Apply that fails at the database: a unique index over duplicates.
    c.declare(DUPLICATES)?;
    c.db.sql("DROP TABLE orders")?;
    c.db.sql("CREATE TABLE items (id bigint PRIMARY KEY, code int NOT NULL)")?;
    c.db.sql("INSERT INTO items VALUES (1, 5), (2, 5)")?;
    let dup = c.plan().await?;
    let dup = c.keep_plan(&dup, "dup.plan.json")?;
    let failed = c.apply(&dup, false).await?;
    c.golden("apply-failure", &failed)?;
    let e = reports::applied(&failed).unwrap_err();
    let ReportError::Failed {
        exit: 2, message, ..
    } = &e
    else {
        panic!("expected Ptah's failure: {e}");
    };
    let code = match engine {
        Engine::Postgres => "SQLSTATE 23505",
        Engine::MariaDb => "Error 1062",
    };
    assert!(message.contains(code), "{message}");
    assert!(!message.contains("SQL: "), "no SQL text leaves: {message}");
    Ok(())
}

/// The migration goldens (`migrations-*`, made by `migrations-capture.sh`)
/// made again on the harness's databases, with the runner's own
/// `check-sequence` as the refusing hook, and compared file by file.
#[tokio::test]
async fn ptah_migration_outputs_on_both_engines_match_their_goldens() -> anyhow::Result<()> {
    let harness = harness().await;
    let pg = url::Url::parse(&TestDatabase::admin(harness, Engine::Postgres)?.url())?;
    let my = url::Url::parse(&TestDatabase::admin(harness, Engine::MariaDb)?.url())?;
    let port = |u: &url::Url| u.port().map(|p| p.to_string()).unwrap_or_default();
    let out = tempfile::tempdir()?;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/executor");
    let runner = Path::new(env!("CARGO_BIN_EXE_process-kubelet")).with_file_name("ptah-runner");
    let script = dir.join("migrations-capture.sh");
    let bless = std::env::var_os("PTAH_BLESS").is_some();
    let status = std::process::Command::new("bash")
        .arg(&script)
        .env("PTAH", conformance::tools::bin_dir()?.join("ptah"))
        .env("RUNNER", &runner)
        .env("PG_HOST", "127.0.0.1")
        .env("PG_PORT", port(&pg))
        .env("PG_USER", pg.username())
        .env("PG_PASSWORD", pg.password().unwrap_or_default())
        .env("MY_HOST", "127.0.0.1")
        .env("MY_PORT", port(&my))
        .env("MY_USER", my.username())
        .env("MY_PASSWORD", my.password().unwrap_or_default())
        .env("MYSQL_PWD", my.password().unwrap_or_default())
        .env(
            "MY_ADMIN",
            format!(
                "mariadb --protocol=TCP -h 127.0.0.1 -P {} -u {}",
                port(&my),
                my.username()
            ),
        )
        .env("GOLDEN_OUT", if bless { dir.as_path() } else { out.path() })
        .output()?;
    let stderr = String::from_utf8_lossy(&status.stderr).into_owned();
    for secret in [pg.password(), my.password()].into_iter().flatten() {
        assert!(!stderr.contains(secret), "the capture printed a password");
    }
    anyhow::ensure!(status.status.success(), "the capture failed: {stderr}");
    if bless {
        return Ok(());
    }
    let mut compared = 0;
    for engine in ["postgresql", "mariadb"] {
        let made = out.path().join(engine);
        let mut names: Vec<_> = std::fs::read_dir(&made)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        names.sort();
        let mut kept: Vec<_> = std::fs::read_dir(dir.join(engine))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<Vec<String>, _>>()?;
        kept.retain(|n| n.starts_with("migrations-"));
        kept.sort();
        assert_eq!(names, kept, "the {engine} migration goldens made and kept");
        for name in &names {
            let got = std::fs::read_to_string(made.join(name))?;
            let want = std::fs::read_to_string(dir.join(engine).join(name))?;
            for secret in [pg.password(), my.password()].into_iter().flatten() {
                assert!(!got.contains(secret), "{engine}/{name} holds a password");
            }
            assert!(
                want == got,
                "ptah's output moved in {engine}/{name}:\n--- golden\n{want}\n--- now\n{got}"
            );
            compared += 1;
        }
    }
    assert!(compared >= 30, "{compared} goldens compared");
    Ok(())
}

#[tokio::test]
async fn ptah_outputs_on_postgresql_match_their_goldens() -> anyhow::Result<()> {
    contract(Engine::Postgres).await
}

#[tokio::test]
async fn ptah_outputs_on_mariadb_match_their_goldens() -> anyhow::Result<()> {
    contract(Engine::MariaDb).await
}
