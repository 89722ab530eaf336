//! Writes the CRDs and the API reference from the Rust types, or with
//! `--check` says which checked-in file is stale.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use ptah_operator::api::generate;

/// Generates charts/ptah-operator/crds/*.yaml (one CRD per kind) and
/// docs/api.md from the API types in operator/src/api.
#[derive(Parser)]
#[command(name = "crdgen", version = ptah_operator::VERSION)]
struct Args {
    /// Compare the files instead of writing them; exit non-zero naming each
    /// stale or missing file.
    #[arg(long)]
    check: bool,
    /// The workspace root the paths are relative to.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/.."))]
    root: PathBuf,
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let files = generate::files()?;
    let mut stale = Vec::new();
    for file in &files {
        let path = args.root.join(&file.path);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(file.contents.as_str()) {
            continue;
        }
        if args.check {
            stale.push(file.path.as_str());
            continue;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        std::fs::write(&path, &file.contents)
            .with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", file.path);
    }
    if !stale.is_empty() {
        for path in &stale {
            eprintln!("stale: {path}");
        }
        eprintln!("regenerate with: {}", generate::REGENERATE);
        return Ok(ExitCode::FAILURE);
    }
    if args.check {
        println!("{} generated files are current", files.len());
    }
    Ok(ExitCode::SUCCESS)
}
