//! The Helm chart as the tests use it: rendered with the pinned helm
//! (`helm template`, `helm lint`), its documents as JSON values, and the
//! generated values (keys, certificates) masked so a render compares with a
//! golden file.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::tools;

/// `charts/ptah-operator`.
pub fn dir() -> PathBuf {
    tools::workspace_root().join("charts/ptah-operator")
}

/// The file of every knob set: `charts/ptah-operator/ci/all-knobs-values.yaml`.
pub fn all_knobs() -> PathBuf {
    dir().join("ci/all-knobs-values.yaml")
}

/// The pinned helm.
pub fn helm() -> anyhow::Result<Command> {
    let mut cmd = Command::new(tools::tool("helm")?);
    // Helm's own state stays out of the user's home.
    let home = std::env::temp_dir().join("ptah-conformance-helm");
    cmd.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    Ok(cmd)
}

/// What a helm run printed, or its error output as the error.
pub fn run(mut cmd: Command) -> anyhow::Result<String> {
    let out = cmd.output().context("running helm")?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `helm template ptah-operator charts/ptah-operator -n ptah-system` with
/// these extra arguments (`-f FILE`, `--set k=v`).
pub fn template(extra: &[&str]) -> anyhow::Result<String> {
    let mut cmd = helm()?;
    cmd.args(["template", "ptah-operator"])
        .arg(dir())
        .args(["--namespace", "ptah-system"])
        .args(extra);
    run(cmd)
}

/// The documents of a render, without empty ones.
pub fn documents(rendered: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(rendered).context("the render's YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The one document of `kind` named `name`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> anyhow::Result<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .with_context(|| format!("the render has no {kind} {name}"))
}

/// A render with what is generated anew each time (the token key, the
/// certificates and the CA bundle) replaced by `<generated>`, line by line.
pub fn masked(rendered: &str) -> String {
    const GENERATED: [&str; 5] = ["token.key:", "tls.crt:", "tls.key:", "ca.crt:", "caBundle:"];
    rendered
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            match GENERATED.iter().find(|k| trimmed.starts_with(*k)) {
                Some(k) => format!("{}{k} <generated>", &line[..line.len() - trimmed.len()]),
                None => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_values_are_masked_and_the_rest_kept() {
        let text = "data:\n  token.key: abc\n  tls.crt: LS0t\nclientConfig:\n    caBundle: LS0t\nname: x\n";
        assert_eq!(
            masked(text),
            "data:\n  token.key: <generated>\n  tls.crt: <generated>\nclientConfig:\n    caBundle: <generated>\nname: x\n"
        );
    }
}
