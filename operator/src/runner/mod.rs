//! The runner (`ptah-runner`): PID 1 of every operation container and of the
//! source init containers. It performs exactly one step and reports one
//! result.
//!
//! # Command lines
//!
//! Exactly those the Job builder writes ([`crate::execution::job`], whose
//! module doc defines them); every value is one `--flag=value` argument and
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
//! Each step writes one typed [`ResultDocument`] (JSON, `apiVersion:
//! runner.ptah.run/v1alpha1`, `kind: StepResult`) to stdout — the container
//! log — and to `--result-file` when given. Resolve's result is the
//! supplychain [`git::Resolution`] (with `sourcePolicyDigest` when
//! `--source-policy` checked it: a Git source's selected files are checked
//! against the policy before the commit is reported, and a refusal names the
//! rule, `rules[<i>] (git.<field>)`, and reports no commit) or
//! [`oci::Resolution`], Verify's the
//! [`verification::VerifiedEvidence`]. An operation container also delivers
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

pub mod cli;
pub mod credentials;
pub mod database;
pub mod deliver;
pub mod executor;
pub mod history;
pub mod identity;
pub mod migrations;
pub mod operations;
pub mod redact;
pub mod reports;
mod steps;

use std::borrow::Cow;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use supplychain::{git, oci, verification};

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

/// Every step's name, as result documents spell it.
pub const STEPS: &[&str] = &[
    "source check",
    "source fetch git",
    "source fetch oci",
    "resolve git",
    "resolve oci",
    "verify oci",
    "observe",
    "plan",
    "history",
    "apply",
];

/// The file under `--work-dir` a schema Apply writes its checked plan to.
pub const PLAN_FILE: &str = "plan.sql";

/// The largest termination message the kubelet keeps.
pub const MAX_SUMMARY_BYTES: usize = 4096;
/// `apiVersion` of the result document.
pub const RESULT_API_VERSION: &str = "runner.ptah.run/v1alpha1";

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

    fn outcome(&self) -> Outcome {
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

/// How the step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The step did what it was asked.
    Succeeded,
    /// The source was refused.
    Refused,
    /// An input was invalid.
    InvalidInput,
    /// The step could not finish.
    Failed,
    /// A deadline passed.
    DeadlineExceeded,
    /// SIGTERM.
    Terminated,
}

/// One file written to `--out`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileResult {
    /// Path under `--out`.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// `sha256:<hex>`.
    pub sha256: String,
}

/// What a successful step answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum StepOutput {
    /// `source check`: the snapshot gave the bound digest.
    #[serde(rename_all = "camelCase")]
    SnapshotChecked {
        /// The bound (and found) content digest.
        content_digest: String,
        /// The files copied.
        files: Vec<FileResult>,
    },
    /// `source fetch git`: the recorded commit, with the bound digest.
    #[serde(rename_all = "camelCase")]
    GitFetched {
        /// How it was fetched, and what it gave.
        resolution: git::Resolution,
        /// The files written.
        files: Vec<FileResult>,
    },
    /// `source fetch oci`: the artifact by digest, every layer checked.
    #[serde(rename_all = "camelCase")]
    OciFetched {
        /// The reference, pinned.
        reference: String,
        /// The manifest digest.
        digest: String,
        /// The artifact type.
        artifact_type: String,
        /// The layers written, each under its title.
        layers: Vec<oci::LayerDigest>,
    },
    /// `resolve git`.
    #[serde(rename_all = "camelCase")]
    GitResolved {
        /// The supplychain resolution.
        resolution: git::Resolution,
        /// `sha256:<hex>` of the source policy the commit's selected files
        /// were checked against (`--source-policy`), for the evidence binding;
        /// absent when the source names none.
        #[serde(skip_serializing_if = "Option::is_none")]
        source_policy_digest: Option<String>,
    },
    /// `resolve oci`.
    #[serde(rename_all = "camelCase")]
    OciResolved {
        /// The supplychain resolution.
        resolution: oci::Resolution,
    },
    /// `observe`: the drift summary (the report stays in the Pod).
    #[serde(rename_all = "camelCase")]
    DriftObserved {
        /// The bounded summary.
        report: database::DriftSummary,
    },
    /// `plan`: no change, or the published bytes with their findings.
    #[serde(rename_all = "camelCase")]
    Planned {
        /// The outcome.
        plan: database::PlanOutcome,
    },
    /// `apply`: what ran (the proof decides what it did).
    #[serde(rename_all = "camelCase")]
    Applied {
        /// The report.
        report: database::ApplyReport,
    },
    /// `history`: the revision table as Ptah reads it.
    #[serde(rename_all = "camelCase")]
    History {
        /// The reading.
        report: migrations::HistoryReport,
    },
    /// `apply` of a migration plan: how the run ended.
    #[serde(rename_all = "camelCase")]
    Ran {
        /// The outcome.
        outcome: migrations::RunOutcome,
    },
    /// `verify oci`.
    #[serde(rename_all = "camelCase")]
    OciVerified {
        /// The reference, pinned.
        reference: String,
        /// The evidence bound into every plan made from it.
        evidence: verification::VerifiedEvidence,
    },
}

impl StepOutput {
    /// What the summary says of a success: a digest or commit.
    fn headline(&self) -> (Option<String>, Option<String>) {
        match self {
            Self::SnapshotChecked { content_digest, .. } => (Some(content_digest.clone()), None),
            Self::GitFetched { resolution, .. } | Self::GitResolved { resolution, .. } => (
                Some(resolution.content_digest.clone()),
                Some(resolution.commit.clone()),
            ),
            Self::OciFetched { digest, .. } => (Some(digest.clone()), None),
            Self::OciResolved { resolution } => (Some(resolution.digest.clone()), None),
            Self::OciVerified { evidence, .. } => (Some(evidence.artifact_digest.clone()), None),
            Self::DriftObserved { report } => (Some(report.report_digest.clone()), None),
            Self::Planned { plan } => {
                (plan.change.as_ref().map(|c| c.content_digest.clone()), None)
            }
            Self::Applied { .. } | Self::History { .. } | Self::Ran { .. } => (None, None),
        }
    }
}

/// The operation a step of an operation container belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationRef {
    /// `--operation-id`.
    pub operation_id: String,
    /// `--attempt`.
    pub attempt: i32,
    /// `--resource`.
    pub resource: cli::ResourceRef,
    /// `--resource-uid`.
    pub resource_uid: String,
    /// `--generation`.
    pub generation: i64,
    /// `--input-fingerprint`.
    pub input_fingerprint: String,
    /// `PTAH_POD_NAME`, `PTAH_POD_UID`, `PTAH_JOB_UID` (downward API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// The Pod's UID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The Job's UID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_uid: Option<String>,
}

/// Why a step did not succeed, in the result document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDoc {
    /// The refusing rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The failing file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The whole message.
    pub message: String,
}

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

/// The typed result document of one step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultDocument {
    /// [`RESULT_API_VERSION`].
    pub api_version: Cow<'static, str>,
    /// `StepResult`.
    pub kind: Cow<'static, str>,
    /// `source check`, `source fetch git`, `resolve oci`, … (one of [`STEPS`]).
    pub step: Cow<'static, str>,
    /// The operation (operation containers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationRef>,
    /// How it ended.
    pub outcome: Outcome,
    /// When the step started (RFC 3339).
    pub started_at: String,
    /// When it ended.
    pub finished_at: String,
    /// What it answered, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<StepOutput>,
    /// Why not, otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDoc>,
}

impl ResultDocument {
    /// The document of a finished step.
    pub fn new(
        step: &'static str,
        operation: Option<OperationRef>,
        started_at: Timestamp,
        result: &Result<StepOutput, StepError>,
    ) -> Self {
        let (outcome, output, error) = match result {
            Ok(o) => (Outcome::Succeeded, Some(o.clone()), None),
            Err(e) => (e.outcome(), None, Some(ErrorDoc::from(e))),
        };
        ResultDocument {
            api_version: Cow::Borrowed(RESULT_API_VERSION),
            kind: Cow::Borrowed("StepResult"),
            step: Cow::Borrowed(step),
            operation,
            outcome,
            started_at: started_at.to_string(),
            finished_at: Timestamp::now().to_string(),
            result: output,
            error,
        }
    }

    /// The step as one of [`STEPS`] (`unknown` for a document read back
    /// with another).
    pub fn step_name(&self) -> &'static str {
        match &self.step {
            Cow::Borrowed(s) => s,
            Cow::Owned(s) => STEPS
                .iter()
                .find(|k| **k == s.as_str())
                .copied()
                .unwrap_or("unknown"),
        }
    }

    /// The termination-message summary of this document.
    pub fn summary(&self) -> Summary {
        let (digest, commit) = self
            .result
            .as_ref()
            .map(StepOutput::headline)
            .unwrap_or_default();
        Summary {
            outcome: self.outcome,
            step: self.step_name(),
            digest,
            commit,
            rule: self.error.as_ref().and_then(|e| e.rule.clone()),
            file: self.error.as_ref().and_then(|e| e.file.clone()),
            message: self.error.as_ref().map(|e| e.message.clone()),
        }
    }
}

/// What the termination message says: at most [`MAX_SUMMARY_BYTES`] of
/// compact JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// How it ended.
    pub outcome: Outcome,
    /// The step.
    pub step: &'static str,
    /// The content or manifest digest, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The Git commit, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The refusing rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The failing file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The message, cut to fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Summary {
    /// Compact JSON of at most [`MAX_SUMMARY_BYTES`]: the message (then the
    /// file) is cut until it fits.
    pub fn render(&self) -> String {
        let mut s = self.clone();
        loop {
            let text = serde_json::to_string(&s).unwrap_or_default();
            if text.len() <= MAX_SUMMARY_BYTES {
                return text;
            }
            let over = text.len() - MAX_SUMMARY_BYTES;
            if let Some(m) = s.message.as_mut().filter(|m| !m.is_empty()) {
                cut(m, over + 8);
            } else if let Some(f) = s.file.as_mut().filter(|f| !f.is_empty()) {
                cut(f, over + 8);
            } else {
                // Only fixed-size fields are left (digests, the step).
                return text.chars().take(MAX_SUMMARY_BYTES).collect();
            }
        }
    }
}

/// Drops at least `bytes` bytes from the end of `s` (on a char boundary) and
/// marks the cut.
fn cut(s: &mut String, bytes: usize) {
    let mut keep = s.len().saturating_sub(bytes + 3);
    while !s.is_char_boundary(keep) {
        keep -= 1;
    }
    s.truncate(keep);
    s.push('…');
}

/// Writes the summary where the kubelet reads the termination message.
/// A missing path (a run outside a Pod) is reported on stderr only.
pub fn write_summary(path: &Path, summary: &Summary) {
    if let Err(e) = std::fs::write(path, summary.render()) {
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
    fn the_summary_fits_in_four_kibibytes_and_keeps_rule_and_file() {
        let s = Summary {
            outcome: Outcome::Refused,
            step: "source check",
            digest: None,
            commit: None,
            rule: Some("contentDigest".into()),
            file: Some("002_more.sql".into()),
            message: Some("é".repeat(5000)),
        };
        let text = s.render();
        assert!(text.len() <= MAX_SUMMARY_BYTES, "{}", text.len());
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["file"], "002_more.sql");
        assert_eq!(back["rule"], "contentDigest");
        assert_eq!(back["outcome"], "Refused");
    }

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
