//! The one result document a step delivers (JSON, `apiVersion:
//! runner.ptah.run/v1alpha1`, `kind: StepResult`), on stdout, to
//! `--result-file` and to the receiver; and the summary of at most
//! [`MAX_SUMMARY_BYTES`] the runner writes as the container's termination
//! message, the fallback when no document reached the receiver.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use supplychain::{git, oci, verification};

use super::args::ResourceRef;
use super::{database, migrations};

/// `apiVersion` of the result document.
pub const RESULT_API_VERSION: &str = "runner.ptah.run/v1alpha1";
/// `kind` of the result document.
pub const RESULT_KIND: &str = "StepResult";

/// Every step's name, as result documents spell it.
pub const STEPS: &[&str] = &[
    "source check",
    "source fetch git",
    "source fetch oci",
    "resolve git",
    "resolve oci",
    "resolve flux",
    "verify oci",
    "observe",
    "plan",
    "history",
    "apply",
];

/// The largest termination message the kubelet keeps.
pub const MAX_SUMMARY_BYTES: usize = 4096;

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
    /// `resolve flux`: the artifact the Flux object named, its digest
    /// checked, and the files at the path, for the manager to snapshot.
    #[serde(rename_all = "camelCase")]
    FluxResolved {
        /// UID of the Flux object the Job was built for.
        object_uid: String,
        /// Flux's revision of the artifact.
        revision: String,
        /// SHA-256 of the tarball, as found (equal to the one named).
        artifact_digest: String,
        /// `oci://…@sha256:…` of a verified `OCIRepository`'s manifest.
        #[serde(skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
        /// Content digest of the files (the snapshot's manifest digest).
        content_digest: String,
        /// The files, by name, base64.
        files: BTreeMap<String, String>,
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
            Self::FluxResolved { content_digest, .. } => (Some(content_digest.clone()), None),
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
    pub resource: ResourceRef,
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

/// The typed result document of one step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultDocument {
    /// [`RESULT_API_VERSION`].
    pub api_version: Cow<'static, str>,
    /// [`RESULT_KIND`].
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
    /// The document of a step that ends now: what it answered, or how it
    /// ended and why.
    pub fn new(
        step: &'static str,
        operation: Option<OperationRef>,
        started_at: Timestamp,
        result: Result<StepOutput, (Outcome, ErrorDoc)>,
    ) -> Self {
        let (outcome, output, error) = match result {
            Ok(o) => (Outcome::Succeeded, Some(o), None),
            Err((outcome, e)) => (outcome, None, Some(e)),
        };
        ResultDocument {
            api_version: Cow::Borrowed(RESULT_API_VERSION),
            kind: Cow::Borrowed(RESULT_KIND),
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
}
