//! Where the pinned Go tools live: `conformance/tools/build.sh` builds them
//! into directories keyed by their pins files (`pins.env` for the control
//! plane, `gitops.env` for Flux and Argo CD's health engine,
//! `observability.env` for Jaeger and promtool).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The workspace root (the directory holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("conformance/ sits inside the workspace")
        .to_path_buf()
}

/// The build script of the pinned tools.
pub fn build_script() -> PathBuf {
    workspace_root().join("conformance/tools/build.sh")
}

/// The directory the pinned control-plane tools are (or will be) built into.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("PTAH_TOOLS_BIN") {
        return Ok(PathBuf::from(dir));
    }
    print_dir(&[])
}

/// The directory of the GitOps tools (Flux, `argocd-health`).
pub fn gitops_bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("PTAH_GITOPS_TOOLS_BIN") {
        return Ok(PathBuf::from(dir));
    }
    print_dir(&["gitops"])
}

/// The directory of the observability tools (Jaeger, promtool).
pub fn observability_bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("PTAH_OBSERVABILITY_TOOLS_BIN") {
        return Ok(PathBuf::from(dir));
    }
    print_dir(&["observability"])
}

fn print_dir(set: &[&str]) -> anyhow::Result<PathBuf> {
    let out = Command::new("bash")
        .arg(build_script())
        .arg("--print-dir")
        .args(set)
        .output()
        .context("running conformance/tools/build.sh --print-dir")?;
    if !out.status.success() {
        bail!(
            "conformance/tools/build.sh --print-dir failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// The path of one built tool, looked for in each set (control plane,
/// GitOps, observability), refusing a missing one with the command that
/// builds it.
pub fn tool(name: &str) -> anyhow::Result<PathBuf> {
    let mut path = bin_dir()?.join(name);
    if !path.is_file() {
        path = gitops_bin_dir()?.join(name);
    }
    if !path.is_file() {
        path = observability_bin_dir()?.join(name);
    }
    if !path.is_file() {
        bail!(
            "tool {name} is not built at {}; run `bash conformance/tools/build.sh`",
            path.display()
        );
    }
    Ok(path)
}
