//! Prometheus's own checker on a metrics exposition: `promtool check
//! metrics`, built from its Go module (`conformance/tools/observability.env`),
//! fed the text on stdin. It parses the text format and lints it (help text,
//! counters named `_total`, unique series, ...): exit 0 when clean, 1 when
//! the text does not parse, 3 when it parses with lint problems.

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::tools;

/// What promtool said of one exposition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// promtool's exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// Its stdout and stderr: one line per problem.
    pub output: String,
}

impl Checked {
    /// Parsed, and no lint problem.
    pub fn clean(&self) -> bool {
        self.code == Some(0)
    }
    /// Did not parse as the text format.
    pub fn unparsable(&self) -> bool {
        self.code == Some(1)
    }
    /// Parsed, with lint problems.
    pub fn lint_problems(&self) -> bool {
        self.code == Some(3)
    }
}

/// `promtool check metrics` on `exposition`, with every lint.
pub fn check_metrics(exposition: &str) -> anyhow::Result<Checked> {
    check_metrics_with(exposition, &[])
}

/// The text parsed, no lint: `--lint=none` with `--extended` (promtool
/// refuses `--lint=none` alone), which prints each metric's cardinality.
pub fn parse_metrics(exposition: &str) -> anyhow::Result<Checked> {
    check_metrics_with(exposition, &["--lint=none", "--extended"])
}

/// `promtool check metrics <args>` on `exposition`.
pub fn check_metrics_with(exposition: &str, args: &[&str]) -> anyhow::Result<Checked> {
    let promtool = tools::tool("promtool")?;
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", promtool.display()))?;
    child
        .stdin
        .take()
        .context("promtool's stdin")?
        .write_all(exposition.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok(Checked {
        code: out.status.code(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}
