//! The runner (`ptah-runner`): PID 1 of every operation container and of the
//! source init containers. It performs exactly one step and reports one
//! result.
//!
//! # Command lines
//!
//! Exactly those the Job builder writes (`execution::job`, whose module doc
//! defines them), from the flags and value types both take from
//! [`crate::protocol::args`]; every value is one `--flag=value` argument and
//! is checked while parsing, so a bad value is refused naming its flag
//! ([`cli`]). Source steps, in the `source` init container:
//!
//! ```text
//! ptah-runner source check --snapshot=/snapshot --content-digest=sha256:… --out=/source
//! ptah-runner source fetch git --url=… --commit=<40 hex> [--ref=refs/heads/…|refs/tags/…]
//!     [--path=…] --content-digest=sha256:… [--credentials=/credentials/git] --out=/source
//! ptah-runner source fetch oci --reference=oci://…@sha256:… [--plain-http]
//!     [--ca-file=…] [--docker-config=…] [--artifact-kind=schema|migrations] --out=/source
//! ```
//!
//! Resolve and Verify, in the operation container, with the common flags
//! (`--operation-id= --attempt= --resource=<Kind>/<ns>/<name> --resource-uid=
//! --generation= --input-fingerprint= --result-url= --result-token-file=
//! [--result-ca-file=] [--dispatch-not-after=] [--execution-not-after=]`):
//!
//! ```text
//! ptah-runner resolve git --url=… (--branch=…|--tag=…|--commit=…) [--path=…] [--credentials=…]
//! ptah-runner resolve oci --reference=oci://…[:tag] [registry flags]
//! ptah-runner verify oci --reference=oci://…@sha256:… --policy=/policy/policy.yaml [registry flags]
//! ```
//!
//! Every step also takes `--timeout=<Go duration>` (default `10m`) and
//! `--result-file=<path>`; neither is written by the Job builder today.
//!
//! # The database operations
//!
//! `observe`, `plan`, `history` and `apply` drive the Ptah CLI as a child
//! ([`executor`]: argv only, the database URL from the container's own
//! `PTAH_DB_URL` and nothing else of its environment, both streams captured
//! and bounded, deadlines, SIGTERM forwarded), parse every output strictly
//! ([`reports`], [`history`]) and deliver only bounded, credential-free
//! facts ([`operations`], [`redact`], [`identity`]).
//!
//! A schema's `apply` (`--plan-content-digest`) first fetches the plan's
//! bytes from the receiver with its token ([`deliver::fetch_plan`]: `GET`
//! the plans path beside `--result-url`, naming the Pod), before anything
//! else: the answer must name `--plan-fingerprint`, and the bytes must have
//! the declared length and the SHA-256 of `--plan-content-digest`, or the
//! step is refused ([`EXIT_REFUSED`], rule `planContentDigest` naming both
//! digests, or `planFingerprint`; a plan the receiver could not read back is
//! refused under rule `plan`, naming the chunk). The checked bytes are
//! written to `<--work-dir>/`[`PLAN_FILE`] (`/work`, the Job's `work`
//! emptyDir), read back and hashed, and only that file is given to `ptah
//! schema apply --plan`.
//!
//! # Credentials
//!
//! Read only where the Job builder mounts them ([`credentials`]): the Git
//! Secret at `--credentials` (keys `username`/`password`, `bearerToken`,
//! `identity` + `known_hosts`), registry credentials from
//! `PTAH_REGISTRY_USERNAME`/`PTAH_REGISTRY_PASSWORD`/`PTAH_REGISTRY_TOKEN` or
//! `--docker-config`, sent only to the registry `PTAH_REGISTRY_AUTHORITY`
//! names. They are never printed: the supplychain errors are redacted, and
//! the runner's own messages name files and variables, never values.
//!
//! # Deadlines
//!
//! A step starting after `--dispatch-not-after` does nothing and fails with
//! [`EXIT_DEADLINE`]. A running step is stopped at the earlier of
//! `--execution-not-after` and `--timeout` after its start, with the same
//! exit code; SIGTERM (the runner is PID 1, so it must handle it) ends it
//! with [`EXIT_TERMINATED`]. The Pod's `activeDeadlineSeconds` still bounds
//! all of it.
//!
//! # Results
//!
//! Each step writes one typed [`ResultDocument`] ([`crate::protocol::result`]:
//! JSON, `apiVersion: runner.ptah.run/v1alpha1`, `kind: StepResult`) to
//! stdout — the container log — and to `--result-file` when given.
//! Resolve's result is the supplychain [`supplychain::git::Resolution`] (with
//! `sourcePolicyDigest` when `--source-policy` checked it: a Git source's
//! selected files are checked against the policy before the commit is
//! reported, and a refusal names the rule, `rules[<i>] (git.<field>)`, and
//! reports no commit) or [`supplychain::oci::Resolution`], Verify's the
//! [`supplychain::verification::VerifiedEvidence`]. An operation container also delivers
//! the document to the manager's result receiver ([`deliver`]): `POST
//! --result-url` with the token of `--result-token-file`, trusting only
//! `--result-ca-file`, retrying transient failures for up to two minutes
//! (never past `--execution-not-after`). A failed delivery is reported on
//! stderr and changes neither the exit code nor the summary.
//!
//! Every step also writes a summary of at most 4 KiB ([`Summary`], compact
//! JSON) to the container's `terminationMessagePath` (`/dev/termination-log`),
//! so the Pod's status says what happened: the outcome, the step, the digest
//! or commit on success, and on refusal the failing `rule` and `file`.
//!
//! # Exit codes
//!
//! | Code | Meaning |
//! | --- | --- |
//! | 0 ([`EXIT_OK`]) | the step succeeded |
//! | 1 ([`EXIT_REFUSED`]) | the source was refused: content, reachability or policy; the summary names the rule and the file; or an Apply's plan bytes were refused (rule `plan`, `planFingerprint`, `planContentDigest`) |
//! | 2 ([`EXIT_USAGE`]) | an argument, file or credential given to the step is invalid; the message names the flag |
//! | 3 ([`EXIT_FAILED`]) | the step could not finish (network, registry, I/O) |
//! | 4 ([`EXIT_DEADLINE`]) | a deadline passed before or during the step |
//! | 143 ([`EXIT_TERMINATED`]) | SIGTERM |

pub mod awaiting;
pub mod cli;
pub mod credentials;
pub mod deliver;
pub mod executor;
pub mod grants;
pub mod history;
pub mod identity;
pub mod operations;
pub mod redact;
pub mod reports;
mod steps;

use std::fmt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::protocol::result::{
    ErrorDoc, OperationRef, Outcome, ResultDocument, StepOutput, Summary,
};

pub use steps::{Finished, run_step};

/// Success.
pub const EXIT_OK: i32 = 0;
/// The source was refused.
pub const EXIT_REFUSED: i32 = 1;
/// An invalid input (clap uses 2 for its own refusals too).
pub const EXIT_USAGE: i32 = 2;
/// The step could not finish.
pub const EXIT_FAILED: i32 = 3;
/// A deadline passed.
pub const EXIT_DEADLINE: i32 = 4;
/// Stopped by SIGTERM.
pub const EXIT_TERMINATED: i32 = 143;

/// The file under `--work-dir` a schema Apply writes its checked plan to.
pub const PLAN_FILE: &str = "plan.sql";

/// Why a step did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepError {
    /// An input given to the step is invalid.
    Input(String),
    /// The source is refused by `rule`, at `file` where one failed.
    Refused {
        /// The rule: `contentDigest`, `manifest`, `reachability`, a policy
        /// rule such as `authorities[release]`, …
        rule: String,
        /// The failing file, when one did.
        file: Option<String>,
        /// Why.
        reason: String,
    },
    /// The step could not finish.
    Failed(String),
    /// A deadline passed.
    Deadline(String),
    /// SIGTERM.
    Terminated,
}

impl StepError {
    pub(crate) fn input(message: impl Into<String>) -> Self {
        Self::Input(message.into())
    }

    pub(crate) fn refused(
        rule: impl Into<String>,
        file: Option<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::Refused {
            rule: rule.into(),
            file,
            reason: reason.into(),
        }
    }

    pub(crate) fn failed(message: impl Into<String>) -> Self {
        Self::Failed(message.into())
    }

    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Input(_) => EXIT_USAGE,
            Self::Refused { .. } => EXIT_REFUSED,
            Self::Failed(_) => EXIT_FAILED,
            Self::Deadline(_) => EXIT_DEADLINE,
            Self::Terminated => EXIT_TERMINATED,
        }
    }

    /// How the result document says the step ended.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Input(_) => Outcome::InvalidInput,
            Self::Refused { .. } => Outcome::Refused,
            Self::Failed(_) => Outcome::Failed,
            Self::Deadline(_) => Outcome::DeadlineExceeded,
            Self::Terminated => Outcome::Terminated,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input(m) => write!(f, "invalid input: {m}"),
            Self::Refused { rule, file, reason } => {
                write!(f, "refused by {rule}")?;
                if let Some(file) = file {
                    write!(f, ", file {file:?}")?;
                }
                write!(f, ": {reason}")
            }
            Self::Failed(m) => write!(f, "failed: {m}"),
            Self::Deadline(m) => write!(f, "deadline exceeded: {m}"),
            Self::Terminated => f.write_str("terminated by SIGTERM"),
        }
    }
}

impl std::error::Error for StepError {}

impl From<&StepError> for ErrorDoc {
    fn from(e: &StepError) -> Self {
        let (rule, file) = match e {
            StepError::Refused { rule, file, .. } => (Some(rule.clone()), file.clone()),
            _ => (None, None),
        };
        ErrorDoc {
            rule,
            file,
            message: e.to_string(),
        }
    }
}

/// The result document of a step that ends now.
pub fn result_document(
    step: &'static str,
    operation: Option<OperationRef>,
    started_at: Timestamp,
    result: &Result<StepOutput, StepError>,
) -> ResultDocument {
    let result = match result {
        Ok(o) => Ok(o.clone()),
        Err(e) => Err((e.outcome(), ErrorDoc::from(e))),
    };
    ResultDocument::new(step, operation, started_at, result)
}

/// Writes the summary where the kubelet reads the termination message.
/// A missing path (a run outside a Pod) is reported on stderr only.
pub fn write_summary(path: &Path, summary: &Summary) {
    write_termination_message(path, &summary.render());
}

/// Writes `text`, cut at a character to the kubelet's
/// [`MAX_SUMMARY_BYTES`](crate::protocol::result::MAX_SUMMARY_BYTES), where
/// the kubelet reads the termination message.
pub fn write_termination_message(path: &Path, text: &str) {
    let mut end = text.len().min(crate::protocol::result::MAX_SUMMARY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if let Err(e) = std::fs::write(path, &text[..end]) {
        eprintln!(
            "ptah-runner: cannot write the termination message to {}: {e}",
            path.display()
        );
    }
}

/// The earliest of `timeout` from now and `not_after`, as a duration from now.
pub(crate) fn budget(timeout: Duration, not_after: Option<Timestamp>) -> Duration {
    match not_after {
        None => timeout,
        Some(t) => {
            let left = t.duration_since(Timestamp::now());
            let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
            left.min(timeout)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct() {
        let codes = [
            StepError::input("x").exit_code(),
            StepError::refused("r", None, "x").exit_code(),
            StepError::failed("x").exit_code(),
            StepError::Deadline("x".into()).exit_code(),
            StepError::Terminated.exit_code(),
        ];
        let set: std::collections::BTreeSet<_> = codes.iter().collect();
        assert_eq!(set.len(), codes.len());
        assert!(!codes.contains(&EXIT_OK));
    }
}
