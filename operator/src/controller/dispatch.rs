//! The Job of a claim: what the builder is given, from the schema's spec, its
//! status and the claim. Pure; the create itself is in [`super::schema`].

use crate::api::annotations::SCHEMA_LABEL;
use crate::api::common::{ConfigMapKeyRef, DatabaseEngine};
use crate::api::schema::PtahSchema;
use crate::api::source::SourceKind;
use crate::api::status::{ActiveOperation, OperationType};
use crate::execution::job::{
    ClaimInput, GitInput, JobInput, OciInput, Owner, OwnerKind, ResultDelivery, SourceInput,
    TargetInput,
};
use crate::execution::receiver::{RECEIVER_CA_CONFIGMAP, RECEIVER_CA_KEY, token_secret_name};

use super::Config;

/// Why a claim's Job cannot be built: names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {reason}")]
pub struct NotBuildable {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn missing(field: &'static str, reason: &str) -> NotBuildable {
    NotBuildable {
        field,
        reason: reason.to_string(),
    }
}

/// The builder's input for `claim` of `schema`.
pub fn job_input(
    schema: &PtahSchema,
    claim: &ActiveOperation,
    config: &Config,
) -> Result<JobInput, NotBuildable> {
    let meta = &schema.metadata;
    let owner = Owner {
        kind: OwnerKind::PtahSchema,
        name: meta.name.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        generation: meta.generation.unwrap_or(0),
    };
    let job_name = claim
        .job_name
        .clone()
        .ok_or_else(|| missing("status.activeOperation.jobName", "not reserved"))?;
    let spec = &schema.spec;
    let engine = DatabaseEngine::from_spec(&spec.target.engine).ok_or_else(|| NotBuildable {
        field: "spec.target.engine",
        reason: format!("{:?} is not supported", spec.target.engine),
    })?;
    Ok(JobInput {
        operation: claim.type_,
        owner,
        claim: ClaimInput {
            operation_id: claim.operation_id.clone(),
            input_fingerprint: claim.input_fingerprint.clone(),
            attempt: claim.attempt,
            dispatch_not_after: claim.dispatch_not_after.clone(),
            execution_not_after: claim.execution_not_after.clone(),
        },
        execution: spec.execution.clone(),
        target: TargetInput {
            engine,
            url_from: spec.target.url_from.clone(),
            dev_url_from: spec.dev.as_ref().map(|d| d.url_from.clone()),
            lock_timeout: spec.policy.lock_timeout.clone(),
        },
        source: source_input(schema, claim)?,
        // Apply reads its plan from the receiver: it arrives with plans.
        apply: None,
        images: config.images.clone(),
        result: ResultDelivery {
            receiver_url: config.receiver_url.clone(),
            token_secret_name: token_secret_name(&job_name),
            receiver_ca: Some(ConfigMapKeyRef {
                name: RECEIVER_CA_CONFIGMAP.into(),
                key: RECEIVER_CA_KEY.into(),
            }),
        },
    })
}

/// What the operation reads: the spec for Resolve, the claim's binding for
/// everything after it.
fn source_input(schema: &PtahSchema, claim: &ActiveOperation) -> Result<SourceInput, NotBuildable> {
    let src = &schema.spec.source;
    let resolve = claim.type_ == OperationType::Resolve;
    let bound = claim.source.as_ref();
    match src.kind() {
        Some(SourceKind::ConfigMap) => {
            let b = bound.ok_or_else(|| missing("status.activeOperation.source", "not bound"))?;
            Ok(SourceInput::ConfigMap {
                snapshot_name: b.snapshot_name.clone().ok_or_else(|| {
                    missing(
                        "status.activeOperation.source.snapshotName",
                        "no snapshot bound",
                    )
                })?,
                content_digest: b.content_digest.clone(),
            })
        }
        Some(SourceKind::Git) => {
            let git = src
                .git
                .as_ref()
                .ok_or_else(|| missing("spec.source.git", "absent"))?;
            let (commit, content_digest) = if resolve {
                (None, None)
            } else {
                let b =
                    bound.ok_or_else(|| missing("status.activeOperation.source", "not bound"))?;
                (b.commit.clone(), Some(b.content_digest.clone()))
            };
            Ok(SourceInput::Git(GitInput {
                url: git.url.clone(),
                git_ref: git.git_ref.clone(),
                commit,
                path: git.path.clone(),
                content_digest,
                secret_name: git.secret_ref.as_ref().map(|s| s.name.clone()),
                source_policy: if resolve {
                    src.source_policy_from.clone()
                } else {
                    None
                },
            }))
        }
        Some(SourceKind::OCI) => {
            let oci = src
                .oci
                .as_ref()
                .ok_or_else(|| missing("spec.source.oci", "absent"))?;
            let reference = if resolve {
                oci.oci_ref.clone()
            } else {
                bound
                    .and_then(|b| b.resolved_reference.clone())
                    .ok_or_else(|| {
                        missing(
                            "status.activeOperation.source.resolvedReference",
                            "no digest pinned",
                        )
                    })?
            };
            Ok(SourceInput::Oci(OciInput {
                reference,
                auth: oci.registry_auth_from.clone(),
                transport: oci.transport.clone(),
                verification_policy: if claim.type_ == OperationType::Verify {
                    Some(src.verification_policy_from.clone().ok_or_else(|| {
                        missing(
                            "spec.source.verificationPolicyFrom",
                            "an OCI source needs a verification policy",
                        )
                    })?)
                } else {
                    None
                },
            }))
        }
        None => Err(missing(
            "spec.source",
            "set exactly one of configMap, git or oci",
        )),
    }
}

/// The label selector of a schema's Jobs.
pub fn jobs_of(schema_name: &str) -> String {
    format!("{SCHEMA_LABEL}={schema_name}")
}
