//! The executor as built: the Ptah CLI from its pinned source archive
//! (`conformance/tools/build.sh ptah`, pins in `conformance/tools/pins.env`).
//!
//! * The built `ptah --version` prints the pinned pseudo-version and commit.
//! * An archive whose SHA-256 is not the pinned one stops the build before
//!   anything is unpacked, naming the file and both digests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools")
}

/// `KEY=value` lines of `pins.env`.
fn pins() -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(tools_dir().join("pins.env"))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

#[test]
fn the_built_ptah_prints_the_pinned_version_and_commit() -> anyhow::Result<()> {
    let pins = pins()?;
    let out = Command::new(conformance::tools::bin_dir()?.join("ptah"))
        .arg("--version")
        .output()?;
    assert!(out.status.success(), "ptah --version failed");
    let text = String::from_utf8(out.stdout)?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
    };
    assert_eq!(
        field("Version").as_deref(),
        Some(pins["PTAH_VERSION"].as_str()),
        "{text}"
    );
    assert_eq!(
        field("Commit").as_deref(),
        Some(pins["PTAH_COMMIT"].as_str()),
        "{text}"
    );
    assert_eq!(
        field("Date").as_deref(),
        Some(pins["PTAH_DATE"].as_str()),
        "{text}"
    );
    Ok(())
}

#[test]
fn an_archive_whose_sha256_differs_stops_the_build_naming_the_file_and_both_digests()
-> anyhow::Result<()> {
    let pins = pins()?;
    let archives = tempfile::tempdir()?;
    let cache = tempfile::tempdir()?;
    let archive = archives.path().join(&pins["PTAH_ARCHIVE"]);
    std::fs::write(&archive, b"not the pinned archive\n")?;
    let found = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"not the pinned archive\n"))
    };
    let out = Command::new("bash")
        .arg(tools_dir().join("build.sh"))
        .arg("ptah")
        .env("PTAH_ARCHIVE_DIR", archives.path())
        .env("PTAH_TOOLS_CACHE", cache.path())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the build went on: {stderr}");
    assert!(stderr.contains(&archive.display().to_string()), "{stderr}");
    assert!(stderr.contains(&found), "{stderr}");
    assert!(stderr.contains(&pins["PTAH_ARCHIVE_SHA256"]), "{stderr}");
    // Nothing was unpacked or built.
    let built: Vec<_> = walk(cache.path())
        .into_iter()
        .filter(|p| p.ends_with("ptah") || p.join("go.mod").is_file())
        .collect();
    assert!(built.is_empty(), "{built:?}");
    Ok(())
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}
