//! The README's demo, as the test command runs it: `ptah-harness demo` ends
//! with its PtahSchema `InSync` and the table in the database (it fails
//! otherwise: `demo::run` refuses any other end, and reads the table back
//! with `psql`), on a harness of its own that sees only the tools
//! `conformance/tools/build.sh --for demo` builds. So the demo's tool set is
//! shown to be enough, and the tools only tests use (Flux, Argo CD's health
//! engine, helm, promtool, cosign, the registry) to be left out of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use conformance::env::OwnHarness;
use conformance::harness::Parts;
use conformance::tools;

/// `build.sh --list COMMAND`: the tools a command builds.
fn listed(command: &str) -> anyhow::Result<BTreeSet<String>> {
    let out = Command::new("bash")
        .arg(tools::build_script())
        .args(["--list", command])
        .output()?;
    anyhow::ensure!(out.status.success(), "build.sh --list {command} failed");
    Ok(String::from_utf8(out.stdout)?
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// The binaries a tool of `build.sh` makes.
fn binaries(tool: &str) -> Vec<&str> {
    match tool {
        "kubernetes" => vec![
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
        ],
        "flux" => vec!["source-controller", "kustomize-controller"],
        other => vec![other],
    }
}

/// Links each of `tools`' binaries, as built, into `dir`.
fn link_tools(dir: &Path, tools: &BTreeSet<String>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for tool in tools {
        for name in binaries(tool) {
            let built = tools::tool(name).with_context(|| format!("the demo's {tool}"))?;
            std::os::unix::fs::symlink(built, dir.join(name))?;
        }
    }
    Ok(())
}

#[test]
fn the_demo_builds_none_of_the_tools_only_tests_use() -> anyhow::Result<()> {
    let demo = listed("demo")?;
    let test = listed("test")?;
    for only_tests in [
        "flux",
        "argocd-health",
        "helm",
        "promtool",
        "cosign",
        "registry",
    ] {
        assert!(!demo.contains(only_tests), "{only_tests} in {demo:?}");
        assert!(test.contains(only_tests), "{only_tests} not in {test:?}");
    }
    assert!(demo.is_subset(&test), "{demo:?} ⊄ {test:?}");
    // Each README command asks setup for its own set, and nothing else
    // starts a tool build.
    let root = tools::workspace_root();
    for (script, command) in [("demo.sh", "demo"), ("test.sh", "test")] {
        let text = std::fs::read_to_string(root.join("conformance").join(script))?;
        let setups: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("setup.sh"))
            .map(|l| l.trim_end_matches(" &"))
            .collect();
        // Either the whole setup, or its base and then its tools (which
        // the test command builds beside its Rust build).
        let asked = format!("bash conformance/setup.sh {command}");
        let parts = [format!("{asked} base"), format!("{asked} tools")];
        assert!(
            setups == [asked.as_str()] || setups == parts.each_ref().map(String::as_str),
            "{script}: {setups:?}"
        );
        assert!(!text.contains("build.sh"), "{script} builds tools itself");
    }
    let setup = std::fs::read_to_string(root.join("conformance/setup.sh"))?;
    let builds: Vec<&str> = setup.lines().filter(|l| l.contains("build.sh")).collect();
    assert_eq!(
        builds,
        [r#"bash "$here/tools/build.sh" --for "$command" >/dev/null"#]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_ends_in_sync_on_the_demo_tools_alone() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let sets: [(&str, PathBuf); 3] = [
        ("PTAH_TOOLS_BIN", dir.path().join("control-plane")),
        ("PTAH_GITOPS_TOOLS_BIN", dir.path().join("gitops")),
        (
            "PTAH_OBSERVABILITY_TOOLS_BIN",
            dir.path().join("observability"),
        ),
    ];
    // The three sets' directories, holding what the demo's build makes.
    let demo = listed("demo")?;
    let (observability, control): (BTreeSet<String>, BTreeSet<String>) =
        demo.into_iter().partition(|t| t == "jaeger");
    link_tools(&sets[0].1, &control)?;
    link_tools(&sets[2].1, &observability)?;
    std::fs::create_dir_all(&sets[1].1)?;
    for (var, path) in &sets {
        // SAFETY: nextest runs this test alone in its process, and the
        // runtime's workers read no environment before the harness starts.
        unsafe { std::env::set_var(var, path) };
    }
    // What `ptah-harness up` starts: everything, the parts whose tools
    // were not built skipped.
    let own = OwnHarness::up(
        "demo",
        env!("CARGO_BIN_EXE_process-kubelet"),
        Parts::default(),
    )
    .await?;
    let running: Vec<String> = own
        .harness
        .status()
        .into_iter()
        .filter(|(_, pid)| pid.is_some())
        .map(|(name, _)| name)
        .collect();
    for skipped in ["registry", "flux-source-controller"] {
        assert!(!running.iter().any(|n| n == skipped), "{running:?}");
    }
    assert!(running.iter().any(|n| n == "jaeger"), "{running:?}");
    let next = conformance::demo::run(own.harness).await?;
    try_next(own.harness, &next).await
}

/// Runs the demo's closing commands as printed, in order, each in a shell
/// at the repository's root after the first (`source …/env`), a moment
/// apart as a person types them; every one must succeed. The edit must
/// reach the database, and the applied plan must be its ALTER.
async fn try_next(harness: &conformance::harness::Harness, next: &[String]) -> anyhow::Result<()> {
    let (source, rest) = next.split_first().context("no commands")?;
    anyhow::ensure!(source.starts_with("source "), "{source}");
    let root = tools::workspace_root();
    let mut printed = Vec::new();
    for command in rest {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let out = Command::new("bash")
            .args(["-c", &format!("set -eo pipefail; {source}; {command}")])
            .current_dir(&root)
            .output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("$ {command}\n{text}");
        anyhow::ensure!(out.status.success(), "`{command}` failed: {text}");
        printed.push((command.clone(), text));
        if command.contains("configmap") {
            // The manager read the edit: the column is in the database.
            let db = conformance::testkit::database::TestDatabase::existing(
                harness,
                conformance::testkit::database::Engine::Postgres,
                "ptah_demo",
            )?;
            let start = std::time::Instant::now();
            while !db.columns("orders")?.iter().any(|c| c.starts_with("note ")) {
                anyhow::ensure!(
                    start.elapsed() < std::time::Duration::from_secs(120),
                    "the edited ConfigMap never reached the database"
                );
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    }
    let applied = printed
        .iter()
        .find(|(c, _)| c.contains("--applied"))
        .context("no `plan --applied` among the commands")?;
    anyhow::ensure!(
        applied.1.contains("ALTER TABLE") && applied.1.contains("note"),
        "{}",
        applied.1
    );
    let last = rest.last().context("no commands")?;
    anyhow::ensure!(last.ends_with("ptah-harness down"), "{last}");
    Ok(())
}
