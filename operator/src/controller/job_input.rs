//! What a claim's Job is built from, whatever its family: the pieces of the
//! spec ([`JobSpec`]), the claim, the manager's configuration and the
//! source binding; each family's own parts (a schema's dev database and
//! plan, a migration's sequence) are in `dispatch.rs` and
//! `migration_dispatch.rs`. Pure; the create itself is in `runtime.rs`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::common::{ConfigMapKeyRef, DatabaseEngine, Execution, GoDuration, Target};
use crate::api::source::{Source, SourceKind};
use crate::api::status::{ActiveOperation, OperationType};
use crate::execution::job::{
    ClaimInput, FluxContent, FluxInput, GitInput, JobInput, OciInput, Owner, OwnerKind,
    ResultDelivery, SourceInput, TargetInput,
};
use crate::execution::receiver::{RECEIVER_CA_CONFIGMAP, RECEIVER_CA_KEY};

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

/// A field the Job needs, missing or wrong.
pub fn missing(field: &'static str, reason: impl Into<String>) -> NotBuildable {
    NotBuildable {
        field,
        reason: reason.into(),
    }
}

/// The pieces of a resource's spec a Job is built from, whatever its family.
pub struct JobSpec<'a> {
    /// `spec.target`.
    pub target: &'a Target,
    /// `spec.source`.
    pub source: &'a Source,
    /// `spec.execution`.
    pub execution: &'a Execution,
    /// `spec.policy.lockTimeout`.
    pub lock_timeout: &'a GoDuration,
}

/// The plan status holds, if it is the one the Apply claim names.
pub fn current_plan<'a, P>(
    plan: Option<&'a P>,
    name: impl Fn(&P) -> &String,
    claim: &ActiveOperation,
) -> Result<&'a P, NotBuildable> {
    plan.filter(|p| Some(name(p)) == claim.plan_name.as_ref())
        .ok_or_else(|| {
            missing(
                "status.plan",
                "the plan the Apply claim names is not current",
            )
        })
}

/// Everything of a Job's input but what an Apply runs (`apply` is `None`),
/// for either family. A schema would set `target.dev_url_from` and
/// `target.exclude` after it.
pub fn common_input(
    kind: OwnerKind,
    meta: &ObjectMeta,
    claim: &ActiveOperation,
    config: &Config,
    family: JobSpec<'_>,
) -> Result<JobInput, NotBuildable> {
    let owner = Owner {
        kind,
        name: meta.name.clone().unwrap_or_default(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        generation: meta.generation.unwrap_or(0),
    };
    // The Job is built under the name the claim reserved, never another.
    claim
        .job_name
        .as_ref()
        .ok_or_else(|| missing("status.activeOperation.jobName", "not reserved"))?;
    let engine = DatabaseEngine::from_spec(&family.target.engine).ok_or_else(|| NotBuildable {
        field: "spec.target.engine",
        reason: format!("{:?} is not supported", family.target.engine),
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
        execution: family.execution.clone(),
        target: TargetInput {
            engine,
            url_from: family.target.url_from.clone(),
            dev_url_from: None,
            lock_timeout: family.lock_timeout.clone(),
            exclude: Vec::new(),
        },
        source: source_input(family.source, claim)?,
        apply: None,
        images: config.images.clone(),
        result: ResultDelivery {
            receiver_url: config.receiver_url.clone(),
            receiver_ca: Some(ConfigMapKeyRef {
                name: RECEIVER_CA_CONFIGMAP.into(),
                key: RECEIVER_CA_KEY.into(),
            }),
            finished_ttl_seconds: Some(config.harvested_ttl_seconds)
                .filter(|_| claim.type_ != OperationType::Apply),
        },
        trace: None,
    })
}

/// What the operation reads: the spec for Resolve, the claim's binding for
/// everything after it (the same rules as the schema's).
pub fn source_input(src: &Source, claim: &ActiveOperation) -> Result<SourceInput, NotBuildable> {
    let resolve = claim.type_ == OperationType::Resolve;
    let bound = claim.source.as_ref();
    match src.kind() {
        Some(SourceKind::Flux) if resolve => {
            let flux = src
                .flux
                .as_ref()
                .ok_or_else(|| missing("spec.source.flux", "absent"))?;
            // The artifact is read from the Flux object at dispatch.
            Ok(SourceInput::Flux(FluxInput {
                kind: flux.kind,
                name: flux.name.clone(),
                path: flux.path.clone(),
                artifact: None,
            }))
        }
        Some(SourceKind::Flux) if claim.type_ == OperationType::Verify => {
            let reference = bound
                .and_then(|b| b.resolved_reference.clone())
                .ok_or_else(|| {
                    missing(
                        "status.activeOperation.source.resolvedReference",
                        "no manifest pinned for the OCIRepository",
                    )
                })?;
            let content_digest = bound
                .map(|b| b.content_digest.clone())
                .ok_or_else(|| missing("status.activeOperation.source", "not bound"))?;
            Ok(SourceInput::Oci(OciInput {
                reference,
                // Anonymous; the transport is the object's, set at dispatch.
                auth: None,
                transport: None,
                flux_content: Some(FluxContent {
                    content_digest,
                    path: src.flux.as_ref().and_then(|f| f.path.clone()),
                }),
                verification_policy: Some(src.verification_policy_from.clone().ok_or_else(
                    || {
                        missing(
                            "spec.source.verificationPolicyFrom",
                            "Verify needs a verification policy",
                        )
                    },
                )?),
            }))
        }
        // Every later operation mounts the snapshot, as for a ConfigMap.
        Some(SourceKind::ConfigMap | SourceKind::Flux) => {
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
                flux_content: None,
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
            "set exactly one of configMap, git, oci or flux",
        )),
    }
}

/// A manager's configuration with these images, for the families' tests.
#[cfg(test)]
pub fn test_config(runner: String, executor: String) -> Config {
    Config {
        images: crate::execution::job::Images {
            runner,
            executor: executor.clone(),
        },
        receiver_url: "https://127.0.0.1:9443/v1/results".into(),
        coordination_namespace: "ptah-system".into(),
        holder: "test".into(),
        realm_holder: "ptah-operator/ptah-system".into(),
        lease_duration_seconds: 15,
        execution: crate::api::status::ExecutionBinding {
            epoch: format!("v1-{}", "0".repeat(32)),
            controller_state_version: 1,
            ptah_version: "v0.23.0".into(),
            executor_image: executor,
            runner_protocol_version: 1,
        },
        harvested_ttl_seconds: 300,
        max_concurrent_reconciles: 16,
        fault_point: None,
        fault_operation: None,
        fault_skip: 0,
        watch_namespace: None,
    }
}
