//! Where the pinned Go tools live: `conformance/tools/build.sh` builds them
//! into a directory keyed by `conformance/tools/pins.env` and prints it.

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

/// The directory the pinned tools are (or will be) built into.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("PTAH_TOOLS_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let out = Command::new("bash")
        .arg(build_script())
        .arg("--print-dir")
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

/// The path of one built tool, refusing a missing one with the command that
/// builds it.
pub fn tool(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir()?.join(name);
    if !path.is_file() {
        bail!(
            "tool {name} is not built at {}; run `bash conformance/tools/build.sh`",
            path.display()
        );
    }
    Ok(path)
}
