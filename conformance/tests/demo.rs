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
    for (script, command, parts) in [
        ("demo.sh", "demo", &["base", "tools", "later"][..]),
        ("test.sh", "test", &["base", "tools"][..]),
    ] {
        let text = std::fs::read_to_string(root.join("conformance").join(script))?;
        // Each call without what follows it (` &`, a redirect).
        let setups: Vec<String> = text
            .lines()
            .filter(|l| l.contains("setup.sh"))
            .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
            .collect();
        let asked: Vec<String> = parts
            .iter()
            .map(|p| format!("bash conformance/setup.sh {command} {p}"))
            .collect();
        assert_eq!(setups, asked, "{script}");
        assert!(!text.contains("build.sh"), "{script} builds tools itself");
    }
    let setup = std::fs::read_to_string(root.join("conformance/setup.sh"))?;
    let builds: Vec<&str> = setup.lines().filter(|l| l.contains("build.sh")).collect();
    assert_eq!(
        builds,
        [
            r#"read -ra listed <<<"$(bash "$here/tools/build.sh" --list "$command")""#,
            r#"bash "$here/tools/build.sh" "${tools[@]}" >/dev/null"#
        ]
    );
    // The demo's parts split its set: InSync's tools, then kubectl and the
    // tracing backend while the demo runs.
    assert_eq!(set_up("demo", "tools")?, ["etcd", "kubernetes", "ptah"]);
    assert_eq!(set_up("demo", "later")?, ["kubectl", "jaeger"]);
    Ok(())
}

/// The tools `setup.sh COMMAND PART` builds, from its own line (they are
/// built: the test command built them before its tests).
fn set_up(command: &str, part: &str) -> anyhow::Result<Vec<String>> {
    let out = Command::new("bash")
        .arg(tools::workspace_root().join("conformance/setup.sh"))
        .args([command, part])
        .output()?;
    let text = String::from_utf8(out.stderr)?;
    anyhow::ensure!(out.status.success(), "setup.sh {command} {part}: {text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("[setup") && l.contains("pinned Go tools"))
        .with_context(|| format!("no tools line in {text}"))?;
    let (_, names) = line.rsplit_once(": ").context("no list")?;
    Ok(names.split_whitespace().map(str::to_string).collect())
}

/// The demo as `demo.sh` runs it on a machine without kubectl and the
/// tracing backend: `up` skips the backend, the schema goes `InSync` while
/// `setup.sh demo later` builds both (for real, into an empty tools cache;
/// Go's build cache makes that a link), and the demo then starts the
/// backend, so the closing commands run with the kubectl just built and the
/// closing edit's trace is read from it by `kubectl ptah trace`.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_ends_in_sync_on_the_demo_tools_alone() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("tools-cache");
    let print_dir = |set: &str| -> anyhow::Result<PathBuf> {
        let out = Command::new("bash")
            .arg(tools::build_script())
            .args(["--print-dir", set])
            .env("PTAH_TOOLS_CACHE", &cache)
            .output()?;
        anyhow::ensure!(out.status.success(), "build.sh --print-dir {set} failed");
        Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
    };
    let sets: [(&str, PathBuf); 3] = [
        ("PTAH_TOOLS_BIN", print_dir("control-plane")?),
        ("PTAH_GITOPS_TOOLS_BIN", dir.path().join("gitops")),
        ("PTAH_OBSERVABILITY_TOOLS_BIN", print_dir("observability")?),
    ];
    // The control plane's set holds what the demo's tools part makes, and
    // the later part builds kubectl beside it; the others are empty.
    let demo = listed("demo")?;
    let (later, control): (BTreeSet<String>, BTreeSet<String>) = demo
        .into_iter()
        .partition(|t| t == "kubectl" || t == "jaeger");
    assert_eq!(later.len(), 2, "{later:?}");
    link_tools(&sets[0].1, &control)?;
    for (var, path) in &sets {
        std::fs::create_dir_all(path)?;
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
    let running = |harness: &conformance::harness::Harness| -> Vec<String> {
        harness
            .status()
            .into_iter()
            .filter(|(_, pid)| pid.is_some())
            .map(|(name, _)| name)
            .collect()
    };
    for skipped in ["registry", "flux-source-controller", "jaeger"] {
        assert!(
            !running(own.harness).iter().any(|n| n == skipped),
            "{skipped}"
        );
    }
    // demo.sh's later part, beside the demo.
    let log = dir.path().join("later-build.log");
    let output = std::fs::File::create(&log)?;
    let mut build = Command::new("bash")
        .arg(tools::workspace_root().join("conformance/setup.sh"))
        .args(["demo", "later"])
        .env("PTAH_TOOLS_CACHE", &cache)
        .stdout(output.try_clone()?)
        .stderr(output)
        .spawn()?;
    let pid = build.id() as i32;
    // Reaped as the shell in demo.sh reaps it: when it ends.
    let built = std::thread::spawn(move || build.wait());
    let later_build = conformance::demo::LaterBuild { pid, log };
    let next = conformance::demo::run(own.harness, Some(&later_build)).await?;
    let status = built.join().expect("the build's waiter")?;
    anyhow::ensure!(status.success(), "setup.sh demo later: {status}");
    assert!(sets[0].1.join("kubectl").is_file(), "kubectl not built");
    assert!(running(own.harness).iter().any(|n| n == "jaeger"));
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
