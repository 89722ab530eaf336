//! A terminal Job's outcome as the machine reads it: the runner's result
//! document when the receiver stored one, the Job's own state otherwise.
//! Pure.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use supplychain::verification::{Signer, VerifiedEvidence};
use supplychain::{contract, git, oci};

use crate::api::condition::Reason;
use crate::api::schema::TargetStatus;
use crate::api::source::{
    FluxResolution, FluxSource, GitResolution, OciResolution, PolicyBinding, SignerIdentity,
    SourceKind, SourceStatus, VerificationEvidence,
};
use crate::api::status::OperationType;
use crate::execution::job::OPERATION_CONTAINER;
use crate::lifecycle::common::Seen;
use crate::lifecycle::schema::{Observation, PlanVerdict};
use crate::protocol::database::{DriftSummary, MAX_FINDINGS, PlanOutcome};
use crate::protocol::result::{Outcome, ResultDocument, StepOutput};

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

/// What a stored result asks of the controller.
#[derive(Clone, Debug, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one short-lived value per harvested Job"
)]
pub enum Harvest {
    /// Step the machine with this.
    Observed(Observation),
    /// A plan with changes: publish its bytes, then step
    /// [`Observation::Planned`] with what was published.
    Publish(Box<PlanOutcome>),
}

/// What a stored result gives for the claim's operation. `claimed_target`
/// is the database the claim is bound to (a Plan's, from its Observe).
pub fn from_result(
    op: OperationType,
    doc: &ResultDocument,
    job_uid: Option<String>,
    claimed_target: Option<&str>,
    bindings: &Bindings,
    now: &Time,
) -> Harvest {
    if let (OperationType::Plan, Outcome::Succeeded, Some(StepOutput::Planned { plan })) =
        (op, doc.outcome, doc.result.as_ref())
    {
        return Harvest::Observed(match (claimed_target, &plan.change) {
            (Some(t), _) if t != plan.target_identity_digest => {
                Observation::Planned(PlanVerdict::TargetMoved)
            }
            (_, None) => Observation::Planned(PlanVerdict::NoChange {
                target_identity_digest: Some(plan.target_identity_digest.clone()),
            }),
            (_, Some(_)) => return Harvest::Publish(Box::new(plan.clone())),
        });
    }
    Harvest::Observed(observation(op, doc, job_uid, bindings, now))
}

/// What a Resolve or Verify result says, for either family's machine.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceRead {
    /// Resolve pinned the commit or digest.
    Resolved(Box<SourceStatus>),
    /// Resolve refused the source, naming the rule.
    Refused(String),
    /// Verify accepted the artifact.
    Verified(Box<VerificationEvidence>),
    /// Verify refused it, naming the rule.
    VerificationRefused(String),
    /// Verified under a policy that is no longer the one named.
    PolicyChanged,
    /// The read failed.
    Failed {
        /// `ResolveFailed`, `OperationFailed`.
        reason: Reason,
        /// Why.
        message: String,
    },
}

impl From<SourceRead> for Seen {
    /// The same read in the words both machines take.
    fn from(read: SourceRead) -> Self {
        match read {
            SourceRead::Resolved(src) => Seen::SourceResolved(*src),
            SourceRead::Refused(message) => Seen::SourceRefused { message },
            SourceRead::Verified(e) => Seen::VerificationSatisfied(*e),
            SourceRead::VerificationRefused(message) => Seen::VerificationRefused { message },
            SourceRead::PolicyChanged => Seen::VerificationPolicyChanged,
            SourceRead::Failed { reason, message } => Seen::JobFailed { reason, message },
        }
    }
}

/// The message of a result that did not succeed.
pub fn message_of(doc: &ResultDocument) -> String {
    doc.error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_else(|| format!("{} ended {:?}", doc.step, doc.outcome))
}

/// What a Resolve or Verify result says; `None` for other operations.
pub fn source_read(
    op: OperationType,
    doc: &ResultDocument,
    bindings: &Bindings,
    now: &Time,
) -> Option<SourceRead> {
    Some(match (op, doc.outcome, doc.result.as_ref()) {
        (
            OperationType::Resolve,
            Outcome::Succeeded,
            Some(StepOutput::GitResolved {
                resolution,
                source_policy_digest,
            }),
        ) => match git_status(resolution, source_policy_digest.as_deref(), bindings, now) {
            Ok(src) => SourceRead::Resolved(Box::new(src)),
            Err(message) => SourceRead::Failed {
                reason: Reason::ResolveFailed,
                message,
            },
        },
        (
            OperationType::Resolve,
            Outcome::Succeeded,
            Some(StepOutput::OciResolved { resolution }),
        ) => SourceRead::Resolved(Box::new(oci_status(resolution, now))),
        (OperationType::Resolve, Outcome::Refused, _) => SourceRead::Refused(message_of(doc)),
        (OperationType::Resolve, _, _) => SourceRead::Failed {
            reason: Reason::ResolveFailed,
            message: message_of(doc),
        },
        (
            OperationType::Verify,
            Outcome::Succeeded,
            Some(StepOutput::OciVerified { evidence, .. }),
        ) => match bindings.verification_policy.as_ref() {
            Some(policy) if policy.digest == evidence.policy_digest => {
                SourceRead::Verified(Box::new(verification(evidence, policy, now)))
            }
            _ => SourceRead::PolicyChanged,
        },
        (OperationType::Verify, Outcome::Refused, _) => {
            SourceRead::VerificationRefused(message_of(doc))
        }
        (OperationType::Verify, _, _) => SourceRead::Failed {
            reason: Reason::OperationFailed,
            message: message_of(doc),
        },
        _ => return None,
    })
}

fn observation(
    op: OperationType,
    doc: &ResultDocument,
    job_uid: Option<String>,
    bindings: &Bindings,
    now: &Time,
) -> Observation {
    if op == OperationType::Apply {
        return Observation::ApplyEnded {
            reported_success: doc.outcome == Outcome::Succeeded,
            job_uid,
        };
    }
    if let Some(read) = source_read(op, doc, bindings, now) {
        return Seen::from(read).into();
    }
    match (op, doc.outcome, doc.result.as_ref()) {
        (
            OperationType::Observe,
            Outcome::Succeeded,
            Some(StepOutput::DriftObserved { report }),
        ) => Observation::DriftObserved(target_status(report, now)),
        _ => Observation::JobFailed {
            reason: Reason::OperationFailed,
            message: message_of(doc),
        },
    }
}

/// Why a read's Job left no result: a lost result is safe for a read, which
/// runs again.
pub fn lost_result(job: &Job, pod: Option<&Pod>) -> String {
    format!(
        "no result reached the receiver; {}",
        termination_message(job, pod)
    )
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

/// The observed database as status holds it: the engine and coordination
/// identity are the controller's to fill.
fn target_status(r: &DriftSummary, now: &Time) -> TargetStatus {
    let mut findings = r.findings.clone();
    let truncated = r.truncated || findings.len() > MAX_FINDINGS;
    findings.truncate(MAX_FINDINGS);
    TargetStatus {
        engine: None,
        coordination_digest: None,
        identity_digest: Some(r.target_identity_digest.clone()),
        drift_report_digest: Some(r.report_digest.clone()),
        dialect: r.dialect.clone(),
        last_observed_at: Some(now.clone()),
        drift_finding_count: Some(r.finding_count),
        highest_drift_severity: r.highest_severity,
        drift_findings: findings,
        drift_findings_truncated: truncated,
    }
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
        flux: None,
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

/// A Flux artifact the Resolve Job fetched, as it reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluxFetched {
    /// The files, decoded.
    pub files: std::collections::BTreeMap<String, Vec<u8>>,
    /// Their content digest, as the Job reported it.
    pub content_digest: String,
    /// The Flux object's UID the Job was built for.
    pub object_uid: String,
}

/// The files of a `resolve flux` result, or why they cannot be read.
pub fn flux_fetched(out: &StepOutput) -> Option<Result<FluxFetched, String>> {
    use base64::Engine as _;
    let StepOutput::FluxResolved {
        files,
        content_digest,
        object_uid,
        ..
    } = out
    else {
        return None;
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    Some(
        files
            .iter()
            .map(|(name, text)| {
                b64.decode(text)
                    .map(|bytes| (name.clone(), bytes))
                    .map_err(|e| format!("result.files[{name:?}]: not base64: {e}"))
            })
            .collect::<Result<_, _>>()
            .map(|files| FluxFetched {
                files,
                content_digest: content_digest.clone(),
                object_uid: object_uid.clone(),
            }),
    )
}

/// `status.source` for a Flux artifact snapshotted as `snapshot` (its name
/// and UID): Flux's revision, and for a verified `OCIRepository` the
/// manifest Verify checks next.
pub fn flux_status(
    flux: &FluxSource,
    out: &StepOutput,
    snapshot: (String, Option<String>),
    now: &Time,
) -> Option<SourceStatus> {
    let StepOutput::FluxResolved {
        object_uid,
        revision,
        artifact_digest,
        reference,
        content_digest,
        ..
    } = out
    else {
        return None;
    };
    let oci = reference.as_ref().and_then(|r| {
        let (repository, digest) = r.rsplit_once('@')?;
        Some(OciResolution {
            requested_reference: repository.to_string(),
            resolved_reference: r.clone(),
            digest: digest.to_string(),
            media_type: None,
            artifact_type: None,
            size: None,
            layer_digests: Vec::new(),
        })
    });
    Some(SourceStatus {
        kind: SourceKind::Flux,
        revision: revision.clone(),
        content_digest: content_digest.clone(),
        resolved_at: Some(now.clone()),
        config_map: None,
        git: None,
        oci,
        flux: Some(FluxResolution {
            kind: flux.kind,
            name: flux.name.clone(),
            uid: object_uid.clone(),
            artifact_digest: artifact_digest.clone(),
            path: flux.path.clone(),
            snapshot_name: snapshot.0,
            snapshot_uid: snapshot.1,
        }),
        source_policy: None,
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
        flux: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::schema::{DriftCategory, DriftFinding, DriftSeverity};
    use crate::protocol::database::{ApplyReport, PlannedChange};
    use crate::protocol::result::{ErrorDoc, RESULT_API_VERSION};

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn doc(outcome: Outcome, result: Option<StepOutput>, error: Option<&str>) -> ResultDocument {
        ResultDocument {
            api_version: RESULT_API_VERSION.into(),
            kind: "StepResult".into(),
            step: "test".into(),
            operation: None,
            outcome,
            started_at: "2026-11-30T00:00:00Z".into(),
            finished_at: "2026-11-30T00:00:01Z".into(),
            result,
            error: error.map(|m| ErrorDoc {
                rule: None,
                file: None,
                message: m.into(),
            }),
        }
    }

    fn observed(h: Harvest) -> Observation {
        match h {
            Harvest::Observed(o) => o,
            Harvest::Publish(p) => panic!("expected an observation, got a plan to publish: {p:?}"),
        }
    }

    fn plan(target: &str, change: Option<PlannedChange>) -> StepOutput {
        StepOutput::Planned {
            plan: PlanOutcome {
                target_identity_digest: target.into(),
                dialect: "postgres".into(),
                change,
            },
        }
    }

    fn change() -> PlannedChange {
        PlannedChange {
            plan: "CREATE TABLE t (id int);".into(),
            content_digest: "sha256:cc".into(),
            statement_count: 1,
            destructive: false,
            privilege_changes: Vec::new(),
            tables: vec!["public.t".into()],
            actual_state_fingerprint: "sha256:aa".into(),
            desired_state_fingerprint: "sha256:bb".into(),
        }
    }

    #[test]
    fn every_end_of_an_apply_is_an_apply_ended_never_a_failure() {
        let b = Bindings::default();
        let ok = doc(
            Outcome::Succeeded,
            Some(StepOutput::Applied {
                report: ApplyReport {
                    target_identity_digest: "sha256:t".into(),
                    statements_executed: 1,
                },
            }),
            None,
        );
        let failed = doc(Outcome::Failed, None, Some("boom"));
        for (d, success) in [(ok, true), (failed, false)] {
            let o = observed(from_result(
                OperationType::Apply,
                &d,
                Some("uid".into()),
                None,
                &b,
                &now(),
            ));
            assert_eq!(
                o,
                Observation::ApplyEnded {
                    reported_success: success,
                    job_uid: Some("uid".into())
                }
            );
        }
    }

    #[test]
    fn a_resolve_refusal_is_a_source_refusal_and_a_failure_a_failed_read() {
        let b = Bindings::default();
        let refused = doc(Outcome::Refused, None, Some("rules[0] (git.hosts): no"));
        assert!(matches!(
            observed(from_result(OperationType::Resolve, &refused, None, None, &b, &now())),
            Observation::SourceRefused { message } if message.contains("rules[0]")
        ));
        let failed = doc(Outcome::Failed, None, Some("connection refused"));
        assert!(matches!(
            observed(from_result(
                OperationType::Resolve,
                &failed,
                None,
                None,
                &b,
                &now()
            )),
            Observation::JobFailed {
                reason: Reason::ResolveFailed,
                ..
            }
        ));
    }

    #[test]
    fn an_observe_result_keeps_only_bounded_aggregates() {
        let findings: Vec<DriftFinding> = (0..70)
            .map(|i| DriftFinding {
                category: DriftCategory::TablesAdded,
                count: i + 1,
                severity: DriftSeverity::Safe,
            })
            .collect();
        let d = doc(
            Outcome::Succeeded,
            Some(StepOutput::DriftObserved {
                report: DriftSummary {
                    report_digest: "sha256:r".into(),
                    drift: true,
                    dialect: Some("postgres".into()),
                    finding_count: 2485,
                    highest_severity: Some(DriftSeverity::Safe),
                    findings,
                    truncated: false,
                    target_identity_digest: "sha256:t".into(),
                },
            }),
            None,
        );
        let Observation::DriftObserved(t) = observed(from_result(
            OperationType::Observe,
            &d,
            None,
            None,
            &Bindings::default(),
            &now(),
        )) else {
            panic!("expected DriftObserved");
        };
        assert_eq!(t.drift_findings.len(), MAX_FINDINGS);
        assert!(t.drift_findings_truncated);
        assert_eq!(t.identity_digest.as_deref(), Some("sha256:t"));
        assert_eq!(t.drift_report_digest.as_deref(), Some("sha256:r"));
        assert_eq!(t.drift_finding_count, Some(2485));
    }

    #[test]
    fn a_plan_is_no_change_a_publication_or_a_moved_target() {
        let b = Bindings::default();
        let none = doc(Outcome::Succeeded, Some(plan("sha256:t", None)), None);
        assert_eq!(
            observed(from_result(
                OperationType::Plan,
                &none,
                None,
                Some("sha256:t"),
                &b,
                &now()
            )),
            Observation::Planned(PlanVerdict::NoChange {
                target_identity_digest: Some("sha256:t".into())
            })
        );
        let changes = doc(
            Outcome::Succeeded,
            Some(plan("sha256:t", Some(change()))),
            None,
        );
        assert!(matches!(
            from_result(
                OperationType::Plan,
                &changes,
                None,
                Some("sha256:t"),
                &b,
                &now()
            ),
            Harvest::Publish(_)
        ));
        // Planned against another database than its Observe read.
        assert_eq!(
            observed(from_result(
                OperationType::Plan,
                &changes,
                None,
                Some("sha256:other"),
                &b,
                &now()
            )),
            Observation::Planned(PlanVerdict::TargetMoved)
        );
        let failed = doc(Outcome::Failed, None, Some("lock timeout"));
        assert!(matches!(
            observed(from_result(
                OperationType::Plan,
                &failed,
                None,
                None,
                &b,
                &now()
            )),
            Observation::JobFailed {
                reason: Reason::OperationFailed,
                ..
            }
        ));
    }

    #[test]
    fn a_verification_under_a_policy_no_longer_named_is_a_policy_change() {
        let evidence = VerifiedEvidence {
            policy_digest: "sha256:old".into(),
            artifact_digest: "sha256:a".into(),
            artifact_type: "t".into(),
            signatures: Vec::new(),
        };
        let d = doc(
            Outcome::Succeeded,
            Some(StepOutput::OciVerified {
                reference: "oci://r/x@sha256:a".into(),
                evidence,
            }),
            None,
        );
        let binding = |digest: &str| Bindings {
            source_policy: None,
            verification_policy: Some(PolicyBinding {
                name: "p".into(),
                key: "policy.yaml".into(),
                uid: "u".into(),
                digest: digest.into(),
            }),
        };
        assert_eq!(
            observed(from_result(
                OperationType::Verify,
                &d,
                None,
                None,
                &binding("sha256:new"),
                &now()
            )),
            Observation::VerificationPolicyChanged
        );
        assert!(matches!(
            observed(from_result(OperationType::Verify, &d, None, None, &binding("sha256:old"), &now())),
            Observation::VerificationSatisfied(e) if e.policy.digest == "sha256:old"
        ));
    }
}
