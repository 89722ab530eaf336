//! A terminal Job's outcome as the machine reads it: the runner's result
//! document when the receiver stored one, the Job's own state otherwise.
//! Pure.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use supplychain::verification::{Signer, VerifiedEvidence};
use supplychain::{contract, git, oci};

use crate::api::condition::Reason;
use crate::api::source::{
    GitResolution, OciResolution, PolicyBinding, SignerIdentity, SourceKind, SourceStatus,
    VerificationEvidence,
};
use crate::api::status::OperationType;
use crate::execution::job::OPERATION_CONTAINER;
use crate::lifecycle::schema::Observation;
use crate::runner::{Outcome, ResultDocument, StepOutput};

/// Whether the Job ended: a `Complete` or `Failed` condition.
pub fn terminal(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// What the bindings of a result need that the result does not carry: the
/// policies the operation ran under, as the manager read them.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    /// The source policy (Git Resolve).
    pub source_policy: Option<PolicyBinding>,
    /// The verification policy (Verify).
    pub verification_policy: Option<PolicyBinding>,
}

/// The observation a stored result gives for an operation.
pub fn from_result(
    op: OperationType,
    doc: &ResultDocument,
    job_uid: Option<String>,
    bindings: &Bindings,
    now: &Time,
) -> Observation {
    let message = || {
        doc.error
            .as_ref()
            .map(|e| e.message.clone())
            .unwrap_or_else(|| format!("{} ended {:?}", doc.step, doc.outcome))
    };
    if op == OperationType::Apply {
        return Observation::ApplyEnded {
            reported_success: doc.outcome == Outcome::Succeeded,
            job_uid,
        };
    }
    match (op, doc.outcome, doc.result.as_ref()) {
        (
            OperationType::Resolve,
            Outcome::Succeeded,
            Some(StepOutput::GitResolved {
                resolution,
                source_policy_digest,
            }),
        ) => match git_status(resolution, source_policy_digest.as_deref(), bindings, now) {
            Ok(src) => Observation::SourceResolved(src),
            Err(e) => job_failed(Reason::ResolveFailed, e),
        },
        (
            OperationType::Resolve,
            Outcome::Succeeded,
            Some(StepOutput::OciResolved { resolution }),
        ) => Observation::SourceResolved(oci_status(resolution, now)),
        (OperationType::Resolve, Outcome::Refused, _) => {
            Observation::SourceRefused { message: message() }
        }
        (OperationType::Resolve, _, _) => job_failed(Reason::ResolveFailed, message()),
        (
            OperationType::Verify,
            Outcome::Succeeded,
            Some(StepOutput::OciVerified { evidence, .. }),
        ) => {
            match bindings.verification_policy.as_ref() {
                Some(policy) if policy.digest == evidence.policy_digest => {
                    Observation::VerificationSatisfied(verification(evidence, policy, now))
                }
                // Verified under a policy that is no longer the one named.
                _ => Observation::VerificationPolicyChanged,
            }
        }
        (OperationType::Verify, Outcome::Refused, _) => {
            Observation::VerificationRefused { message: message() }
        }
        (_, _, _) => job_failed(Reason::OperationFailed, message()),
    }
}

/// The observation of a terminal Job that left no stored result: an Apply
/// ended with an outcome nobody established; a read failed.
pub fn without_result(op: OperationType, job: &Job, pod: Option<&Pod>) -> Observation {
    if op == OperationType::Apply {
        return Observation::ApplyEnded {
            reported_success: false,
            job_uid: job.metadata.uid.clone(),
        };
    }
    // A lost result is safe for a read: it runs again.
    job_failed(
        Reason::OperationFailed,
        format!(
            "no result reached the receiver; {}",
            termination_message(job, pod)
        ),
    )
}

fn job_failed(reason: Reason, message: String) -> Observation {
    Observation::JobFailed { reason, message }
}

/// What the Pod's containers said when they ended (the runner's ≤ 4 KiB
/// summary), or the Job's condition message.
fn termination_message(job: &Job, pod: Option<&Pod>) -> String {
    let statuses = pod.and_then(|p| p.status.as_ref()).map(|s| {
        s.init_container_statuses
            .iter()
            .flatten()
            .chain(s.container_statuses.iter().flatten())
            .cloned()
            .collect::<Vec<_>>()
    });
    // The first container that failed says why; the operation container's
    // summary otherwise.
    let said = statuses.into_iter().flatten().find_map(|c| {
        let t = c.state.as_ref()?.terminated.as_ref()?;
        (t.exit_code != 0 || c.name == OPERATION_CONTAINER).then(|| {
            format!(
                "container {} exited {}: {}",
                c.name,
                t.exit_code,
                t.message.clone().unwrap_or_default().trim()
            )
        })
    });
    said.unwrap_or_else(|| {
        job.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Failed"))
            .map(|c| {
                format!(
                    "Job failed: {} {}",
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "the Job ended without a result".into())
    })
}

fn git_status(
    r: &git::Resolution,
    policy_digest: Option<&str>,
    bindings: &Bindings,
    now: &Time,
) -> Result<SourceStatus, String> {
    let path = (!r.path.is_empty()).then(|| r.path.clone());
    let location_digest =
        contract::git_location_digest(&r.url, path.as_deref()).map_err(|e| e.to_string())?;
    let source_policy = match (policy_digest, bindings.source_policy.as_ref()) {
        (Some(d), Some(b)) => Some(PolicyBinding {
            digest: d.to_string(),
            ..b.clone()
        }),
        _ => None,
    };
    let git_ref = match &r.git_ref {
        git::GitRef::Branch(b) => format!("refs/heads/{b}"),
        git::GitRef::Tag(t) => format!("refs/tags/{t}"),
        git::GitRef::Commit(c) => c.clone(),
    };
    Ok(SourceStatus {
        kind: SourceKind::Git,
        revision: r.revision.clone(),
        content_digest: r.content_digest.clone(),
        resolved_at: Some(now.clone()),
        config_map: None,
        git: Some(GitResolution {
            url: r.url.clone(),
            git_ref,
            path,
            commit: r.commit.clone(),
            location_digest,
        }),
        oci: None,
        source_policy,
        verification: None,
    })
}

fn oci_status(r: &oci::Resolution, now: &Time) -> SourceStatus {
    SourceStatus {
        kind: SourceKind::OCI,
        revision: r.revision.clone(),
        content_digest: r.digest.clone(),
        resolved_at: Some(now.clone()),
        config_map: None,
        git: None,
        oci: Some(OciResolution {
            requested_reference: r.reference.clone(),
            resolved_reference: r.resolved_reference.clone(),
            digest: r.digest.clone(),
            media_type: None,
            artifact_type: Some(r.artifact_type.clone()),
            size: i64::try_from(r.manifest_size).ok(),
            layer_digests: r.layers.iter().take(16).map(|l| l.digest.clone()).collect(),
        }),
        source_policy: None,
        verification: None,
    }
}

fn verification(e: &VerifiedEvidence, policy: &PolicyBinding, now: &Time) -> VerificationEvidence {
    // The first accepted signature is the evidence status names.
    let first = e.signatures.first();
    let (signer_identity, key_fingerprint) = match first.map(|s| &s.signer) {
        Some(Signer::Identity {
            issuer, subject, ..
        }) => (
            Some(SignerIdentity {
                issuer: issuer.clone(),
                subject: subject.clone(),
            }),
            None,
        ),
        Some(Signer::Key { key_fingerprint }) => (None, Some(key_fingerprint.clone())),
        None => (None, None),
    };
    VerificationEvidence {
        policy: policy.clone(),
        authority: first.map(|s| s.authority.clone()),
        signer_identity,
        key_fingerprint,
        trust_root_digest: first.and_then(|s| s.trust_root_digest.clone()),
        signature_digest: first.map(|s| s.signature_digest.clone()),
        transparency_log_verified: first.map(|s| s.transparency_log),
        verified_at: Some(now.clone()),
    }
}
