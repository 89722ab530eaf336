//! Every check of the input before anything is built, each refusal naming
//! the field.

use super::*;

/// An input the builder refuses; each names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JobBuildError {
    /// A value does not have its required form.
    #[error("{field}: {reason} (got {value:?})")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The value.
        value: String,
        /// What was expected.
        reason: &'static str,
    },
    /// The operation does not exist for the resource's kind.
    #[error("{operation:?} is not an operation of a {kind:?}")]
    OperationNotOfKind {
        /// The operation.
        operation: OperationType,
        /// The kind.
        kind: OwnerKind,
    },
    /// The operation cannot read this kind of source.
    #[error("{operation:?} does not run as a Job for a {source_kind:?} source")]
    SourceNotForOperation {
        /// The operation.
        operation: OperationType,
        /// The source kind.
        source_kind: SourceKind,
    },
    /// A field the operation needs is missing.
    #[error("{field} is required for {operation:?}")]
    Missing {
        /// The field.
        field: &'static str,
        /// The operation.
        operation: OperationType,
    },
    /// An Apply input on another operation, or one of the wrong kind.
    #[error("the apply input does not belong to a {operation:?} of a {kind:?}")]
    UnexpectedApply {
        /// The operation.
        operation: OperationType,
        /// The kind.
        kind: OwnerKind,
    },
    /// `spec.execution.podMetadata` uses a key the operator reserves.
    #[error("spec.execution.podMetadata.{map} uses the reserved key {key:?}")]
    ReservedPodMetadataKey {
        /// `labels` or `annotations`.
        map: &'static str,
        /// The key.
        key: String,
    },
}

pub(super) fn invalid(field: &'static str, value: &str, reason: &'static str) -> JobBuildError {
    JobBuildError::Invalid {
        field,
        value: value.to_string(),
        reason,
    }
}

pub(super) fn check_digest<'a>(
    field: &'static str,
    value: &'a str,
) -> Result<&'a str, JobBuildError> {
    sha256_hex(value)
        .ok_or_else(|| invalid(field, value, "must be sha256: and 64 lowercase hex digits"))
}

pub(super) fn check_subdomain(field: &'static str, value: &str) -> Result<(), JobBuildError> {
    if is_dns_subdomain(value) {
        Ok(())
    } else {
        Err(invalid(field, value, "must be a DNS-1123 subdomain"))
    }
}

pub(super) fn check_image(field: &'static str, value: &str) -> Result<(), JobBuildError> {
    let ok = value
        .rsplit_once('@')
        .is_some_and(|(repo, digest)| !repo.is_empty() && sha256_hex(digest).is_some())
        && !value.chars().any(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            value,
            "must be an image reference by digest (…@sha256:<64 hex>)",
        ))
    }
}

/// Reserved like `RESERVED_POD_METADATA_RULE` in the API: the CRD refuses
/// these keys already; the builder refuses them again so no path around
/// admission can replace one of the operator's keys.
pub(super) fn is_reserved_key(k: &str) -> bool {
    ["ptah.run/", "kubernetes.io/", "k8s.io/"]
        .iter()
        .any(|p| k.starts_with(p) || k.contains(&format!(".{p}")))
        || k == "controller-uid"
        || k == "job-name"
}

impl From<naming::NameError> for JobBuildError {
    fn from(e: naming::NameError) -> Self {
        JobBuildError::Invalid {
            field: e.field,
            value: e.value,
            reason: e.reason,
        }
    }
}
pub(super) fn check_oci_reference(value: &str, by_digest: bool) -> Result<(), JobBuildError> {
    let rest = value
        .strip_prefix("oci://")
        .ok_or_else(|| invalid("source.oci.reference", value, "must start with oci://"))?;
    if rest.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            "source.oci.reference",
            value,
            "must be a reference without spaces",
        ));
    }
    if by_digest {
        let pinned = rest
            .rsplit_once('@')
            .is_some_and(|(_, d)| sha256_hex(d).is_some());
        if !pinned {
            return Err(invalid(
                "source.oci.reference",
                value,
                "must be pinned by digest (…@sha256:<64 hex>) for every operation but Resolve",
            ));
        }
    }
    Ok(())
}

pub(super) fn check_text(field: &'static str, value: &str) -> Result<(), JobBuildError> {
    if value.is_empty() || value.chars().any(char::is_control) {
        Err(invalid(
            field,
            value,
            "must be non-empty text without control characters",
        ))
    } else {
        Ok(())
    }
}
/// What [`check_input`] derived.
pub(super) struct Checked {
    pub(super) name: String,
    pub(super) id_hex16: String,
}

/// The checks that do not depend on the operation's family: the operation
/// exists for the kind and the source, identities, names, images, deadline,
/// result delivery, the Apply input.
pub(super) fn check_input(input: &JobInput) -> Result<Checked, JobBuildError> {
    let op = input.operation;
    let owner = &input.owner;
    let of_kind = matches!(
        (owner.kind, op),
        (
            _,
            OperationType::Resolve | OperationType::Verify | OperationType::Apply
        ) | (
            OwnerKind::PtahSchema,
            OperationType::Observe | OperationType::Plan
        ) | (OwnerKind::PtahMigration, OperationType::History)
    );
    if !of_kind {
        return Err(JobBuildError::OperationNotOfKind {
            operation: op,
            kind: owner.kind,
        });
    }
    let source_kind = input.source.kind();
    let source_ok = match op {
        OperationType::Resolve => source_kind != SourceKind::ConfigMap,
        OperationType::Verify => source_kind == SourceKind::OCI,
        // A Flux source is fetched by Resolve alone; later operations mount
        // its snapshot.
        _ => source_kind != SourceKind::Flux,
    };
    if !source_ok {
        return Err(JobBuildError::SourceNotForOperation {
            operation: op,
            source_kind,
        });
    }
    match (&input.apply, op, owner.kind) {
        (None, OperationType::Apply, _) => {
            return Err(JobBuildError::Missing {
                field: "apply",
                operation: op,
            });
        }
        (None, _, _)
        | (Some(ApplyInput::Schema { .. }), OperationType::Apply, OwnerKind::PtahSchema)
        | (Some(ApplyInput::Migration { .. }), OperationType::Apply, OwnerKind::PtahMigration) => {}
        (Some(_), _, _) => {
            return Err(JobBuildError::UnexpectedApply {
                operation: op,
                kind: owner.kind,
            });
        }
    }

    check_subdomain("metadata.name", &owner.name)?;
    if owner.name.len() > 63 {
        return Err(invalid(
            "metadata.name",
            &owner.name,
            "must be at most 63 characters (it is a label value)",
        ));
    }
    if !is_dns_label(&owner.namespace) {
        return Err(invalid(
            "metadata.namespace",
            &owner.namespace,
            "must be a DNS-1123 label",
        ));
    }
    check_text("metadata.uid", &owner.uid)?;
    let name = job_name(
        owner.kind,
        op,
        &owner.name,
        &input.claim.operation_id,
        input.claim.attempt,
    )?;
    let id_hex = check_digest("claim.operationID", &input.claim.operation_id)?;
    check_digest("claim.inputFingerprint", &input.claim.input_fingerprint)?;
    check_image("images.runner", &input.images.runner)?;
    check_image("images.executor", &input.images.executor)?;
    let exec = &input.execution;
    let deadline = exec.active_deadline_seconds;
    if !(30..=86400).contains(&deadline) {
        return Err(invalid(
            "spec.execution.activeDeadlineSeconds",
            &deadline.to_string(),
            "must be from 30 to 86400",
        ));
    }
    for s in &exec.image_pull_secrets {
        check_subdomain("spec.execution.imagePullSecrets", &s.name)?;
    }
    let result = &input.result;
    if !(result.receiver_url.starts_with("https://") || result.receiver_url.starts_with("http://"))
    {
        return Err(invalid(
            "result.receiverURL",
            &result.receiver_url,
            "must be an http(s) URL",
        ));
    }
    check_text("result.receiverURL", &result.receiver_url)?;
    Ok(Checked {
        name,
        id_hex16: id_hex[..16].to_string(),
    })
}
