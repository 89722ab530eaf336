//! The examples of `examples/harness/`, applied as examples/README.md says
//! (`envsubst` of the file piped to `kubectl apply --server-side`), after
//! what `ptah-harness examples` prepares, with a real manager: each
//! PtahSchema, one per source kind (a ConfigMap, a Git branch, a
//! cosign-signed OCI artifact), reaches `InSync`, and each database holds the
//! table as its own client reads it.
//!
//! The walk-through of docs/migrations.md, run as it is written (the shell
//! block between its markers): a migrations artifact pushed with `ptah
//! migrations push`, signed with cosign, verified, planned, approved and
//! run, `InSync`, and both tables in the database.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;

use conformance::examples;
use conformance::testkit::manager::{Manager, ManagerSpec};
use conformance::testkit::namespace::TestNamespace;
use conformance::testkit::wait::Patience;
use conformance::tools;
use operator::api::condition::SchemaPhase;
use operator::api::schema::PtahSchema;

const PATIENCE: Patience = Patience::new(Duration::from_secs(240), Duration::from_millis(250));

/// `envsubst < file | kubectl apply --server-side -n ns -f -`, as a user runs it.
fn apply(
    ns: &TestNamespace,
    file: &std::path::Path,
    vars: &[(&str, String)],
) -> anyhow::Result<()> {
    let text = std::fs::read(file).with_context(|| file.display().to_string())?;
    let mut envsubst = Command::new("envsubst")
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("envsubst (gettext-base)")?;
    envsubst.stdin.take().context("stdin")?.write_all(&text)?;
    let rendered = envsubst.wait_with_output()?;
    anyhow::ensure!(
        rendered.status.success(),
        "envsubst failed on {}",
        file.display()
    );
    let cache = tempfile::tempdir()?;
    let mut kubectl = Command::new(tools::tool("kubectl")?)
        .env("KUBECONFIG", ns.harness().kubeconfig())
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["apply", "--server-side", "-n", ns.name(), "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    kubectl
        .stdin
        .take()
        .context("stdin")?
        .write_all(&rendered.stdout)?;
    let out = kubectl.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl apply of {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn every_harness_example_reaches_in_sync_as_the_readme_applies_it() -> anyhow::Result<()> {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    let ns = TestNamespace::for_operator(harness, "examples", "harness").await?;
    let prepared = examples::prepare(harness, ns.name()).await?;
    let vars = prepared.vars();
    let mut names = Vec::new();
    for (file, _) in examples::EXAMPLES {
        let path = examples::dir().join(file);
        apply(&ns, &path, &vars)?;
        let text = std::fs::read_to_string(&path)?;
        let name = text
            .split("kind: PtahSchema\nmetadata:\n  name: ")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .with_context(|| format!("the PtahSchema's name in {file}"))?;
        names.push(name.to_string());
    }
    // Every file of the directory is an example the test applies.
    let on_disk = std::fs::read_dir(examples::dir())?.count();
    assert_eq!(on_disk, examples::EXAMPLES.len());

    let manager = Manager::start(&ns, &ManagerSpec::default())?;
    for name in &names {
        ns.until(&PATIENCE, name, "InSync", |s: &PtahSchema| {
            s.status.as_ref().and_then(|st| st.phase) == Some(SchemaPhase::InSync)
        })
        .await
        .with_context(|| manager.log())?;
    }
    for (secret, db) in &prepared.databases {
        assert_eq!(db.tables()?, ["orders"], "the database of {secret}");
        assert_eq!(
            db.columns("orders")?.len(),
            3,
            "the database of {secret}: {:?}",
            db.columns("orders")?
        );
    }
    ns.delete_all::<PtahSchema>(&PATIENCE).await?;
    drop(manager);
    Ok(())
}

/// The shell block of `doc` between `<!-- walk-through: begin -->` and
/// `<!-- walk-through: end -->`.
fn walk_through(doc: &str) -> anyhow::Result<String> {
    let block = doc
        .split("<!-- walk-through: begin -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- walk-through: end -->").next())
        .context("the walk-through markers")?;
    let script = block
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.rsplit_once("```"))
        .map(|(script, _)| script.to_string())
        .context("the walk-through's sh block")?;
    Ok(script)
}

#[tokio::test]
async fn the_migrations_walk_through_runs_as_written() -> anyhow::Result<()> {
    let harness = conformance::env::shared(env!("CARGO_BIN_EXE_process-kubelet")).await;
    let root = tools::workspace_root();
    let script = walk_through(&std::fs::read_to_string(root.join("docs/migrations.md"))?)?;
    let out = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .current_dir(&root)
            .env("PTAH_HARNESS_DIR", &harness.state)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("the walk-through did not end in 10 minutes")??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the walk-through failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("Applied [1,2] approved by"), "{stdout}");
    assert!(
        stdout.contains("Verified InSync HistoryMatched"),
        "{stdout}"
    );
    // The database, as its own client reads it.
    let prepared_catalog = conformance::testkit::database::TestDatabase::existing(
        harness,
        conformance::testkit::database::Engine::Postgres,
        &format!("{}_catalog", examples::NAMESPACE),
    )?;
    let mut tables = prepared_catalog.tables()?;
    tables.retain(|t| t != "schema_migrations");
    assert_eq!(tables, ["prices", "products"]);
    Ok(())
}
