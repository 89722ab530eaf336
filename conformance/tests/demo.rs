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
        let setups: Vec<&str> = text.lines().filter(|l| l.contains("setup.sh")).collect();
        assert_eq!(
            setups,
            [format!("bash conformance/setup.sh {command}")],
            "{script}"
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
    conformance::demo::run(own.harness).await
}
