//! `kubectl ptah` as a person runs it: the pinned kubectl finding the
//! plugin binary on PATH (kubectl's own plugin discovery), with the
//! harness's kubeconfig and the test's namespace.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use super::namespace::TestNamespace;
use crate::tools;

/// The plugin, for one namespace.
pub struct Plugin {
    kubectl: PathBuf,
    path: OsString,
    kubeconfig: PathBuf,
    namespace: String,
}

/// What one run said.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Ran {
    fn from(o: Output) -> Self {
        Ran {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Plugin {
    /// The plugin built beside the harness's binaries, for `ns`.
    pub fn new(ns: &TestNamespace) -> anyhow::Result<Self> {
        let harness = ns.harness();
        let plugin = harness.target_dir.join("kubectl-ptah");
        anyhow::ensure!(
            plugin.is_file(),
            "{} is not built: run `cargo build --workspace --bins`",
            plugin.display()
        );
        let mut dirs = vec![harness.target_dir.clone()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        Ok(Plugin {
            kubectl: tools::tool("kubectl")?,
            path: std::env::join_paths(dirs)?,
            kubeconfig: harness.kubeconfig(),
            namespace: ns.name().to_string(),
        })
    }

    /// `kubectl ptah ARGS -n NS`.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_in(&self.namespace, args)
    }

    /// `kubectl ptah ARGS -n NAMESPACE`, in another namespace.
    pub fn command_in(&self, namespace: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("ptah")
            .args(args)
            .args(["-n", namespace])
            .env("PATH", &self.path)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `kubectl ptah ARGS -n NS` to its end.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<Ran> {
        Ok(self.command(args).output()?.into())
    }

    /// Starts it with stdin and stderr piped, for a verb that asks.
    pub fn spawn(&self, args: &[&str]) -> anyhow::Result<Child> {
        Ok(self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?)
    }
}

/// Reads `child`'s stderr until it contains `prompt`; returns what was read.
pub fn read_until(child: &mut Child, prompt: &str) -> anyhow::Result<String> {
    let err = child
        .stderr
        .as_mut()
        .ok_or_else(|| anyhow::anyhow!("stderr not piped"))?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains(prompt) {
        let n = err.read(&mut buf)?;
        anyhow::ensure!(
            n > 0,
            "ended before {prompt:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&seen).into_owned())
}

/// Answers `line` on `child`'s stdin and waits for its end.
pub fn answer(mut child: Child, line: &str, before: String) -> anyhow::Result<Ran> {
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("stdin not piped"))?
        .write_all(format!("{line}\n").as_bytes())?;
    let mut ran: Ran = child.wait_with_output()?.into();
    ran.stderr = before + &ran.stderr;
    Ok(ran)
}
