//! The runner command lines of each operation, from the typed flags of
//! `crate::protocol::args`.

use super::*;

/// The arguments every operation container starts with.
pub(super) fn common_args(input: &JobInput) -> [String; 6] {
    let owner = &input.owner;
    OperationFlags {
        operation_id: input.claim.operation_id.clone(),
        attempt: input.claim.attempt,
        resource: ResourceRef {
            kind: owner.kind.kind(),
            namespace: owner.namespace.clone(),
            name: owner.name.clone(),
        },
        resource_uid: owner.uid.clone(),
        generation: owner.generation,
        input_fingerprint: input.claim.input_fingerprint.clone(),
    }
    .render()
}

/// Resolve and Verify: the step reads the source itself, so the Git or
/// registry credential is in the operation container, and no database URL
/// is anywhere in the Pod.
pub(super) fn source_operation(input: &JobInput, parts: &mut Parts) -> Result<(), JobBuildError> {
    let op = input.operation;
    match &input.source {
        SourceInput::Git(git) => {
            check_text("spec.source.git.url", &git.url)?;
            parts.args.push(command::GIT.into());
            parts.args.extend(common_args(input));
            parts.args.push(arg(flag::URL, &git.url));
            let chosen: Vec<String> = [
                git.git_ref.branch.as_ref().map(|b| arg(flag::BRANCH, b)),
                git.git_ref.tag.as_ref().map(|t| arg(flag::TAG, t)),
                git.git_ref.commit.as_ref().map(|c| arg(flag::COMMIT, c)),
            ]
            .into_iter()
            .flatten()
            .collect();
            if chosen.len() != 1 {
                return Err(invalid(
                    "spec.source.git.ref",
                    &chosen.join(" "),
                    "must set exactly one of branch, tag or commit",
                ));
            }
            parts.args.extend(chosen);
            if let Some(p) = &git.path {
                check_text("spec.source.git.path", p)?;
                parts.args.push(arg(flag::PATH, p));
            }
            if let Some(policy) = &git.source_policy {
                check_subdomain("spec.source.sourcePolicyFrom.name", &policy.name)?;
                let (arg, m, v) = config_map_file(
                    "source-policy",
                    SOURCE_POLICY_DIR,
                    (&policy.name, &policy.key),
                    "policy.yaml",
                    flag::SOURCE_POLICY,
                );
                parts.hand_over((vec![arg], vec![m], vec![v]));
            }
            parts.hand_over(git_credentials(git)?);
        }
        SourceInput::Oci(oci) => {
            check_oci_reference(&oci.reference, op == OperationType::Verify)?;
            parts.args.push(command::OCI.into());
            parts.args.extend(common_args(input));
            parts.args.push(arg(flag::REFERENCE, &oci.reference));
            if op == OperationType::Verify {
                let policy = oci
                    .verification_policy
                    .as_ref()
                    .ok_or(JobBuildError::Missing {
                        field: "spec.source.verificationPolicyFrom",
                        operation: op,
                    })?;
                check_subdomain("spec.source.verificationPolicyFrom.name", &policy.name)?;
                parts.volumes.push(config_map_volume(
                    "verification-policy",
                    &policy.name,
                    item(&policy.key, "policy.yaml"),
                ));
                parts
                    .mounts
                    .push(mount("verification-policy", POLICY_DIR, true));
                parts
                    .args
                    .push(arg(flag::POLICY, format!("{POLICY_DIR}/policy.yaml")));
                if let Some(flux) = &oci.flux_content {
                    check_digest("source.flux.contentDigest", &flux.content_digest)?;
                    parts
                        .args
                        .push(arg(flag::CONTENT_DIGEST, &flux.content_digest));
                    if let Some(p) = &flux.path {
                        check_text("spec.source.flux.path", p)?;
                        parts.args.push(arg(flag::PATH, p));
                    }
                }
            }
            let access = registry_access(oci)?;
            parts.env.extend(access.env);
            parts.hand_over((access.args, access.mounts, access.volumes));
        }
        SourceInput::Flux(flux) => {
            let a = flux.artifact.as_ref().ok_or(JobBuildError::Missing {
                field: "the Flux object's status.artifact",
                operation: op,
            })?;
            check_subdomain("spec.source.flux.name", &flux.name)?;
            check_text("status.artifact.url", &a.url)?;
            check_text("status.artifact.revision", &a.revision)?;
            check_text("metadata.uid", &a.uid)?;
            check_digest("status.artifact.digest", &a.digest)?;
            parts.args.push(command::FLUX.into());
            parts.args.extend(common_args(input));
            parts.args.extend([
                arg(flag::FLUX_KIND, flux.kind.as_str()),
                arg(flag::FLUX_NAME, &flux.name),
                arg(flag::FLUX_UID, &a.uid),
                arg(flag::URL, &a.url),
                arg(flag::ARTIFACT_DIGEST, &a.digest),
                arg(flag::REVISION, &a.revision),
            ]);
            if let Some(p) = &flux.path {
                check_text("spec.source.flux.path", p)?;
                parts.args.push(arg(flag::PATH, p));
            }
            if let Some(r) = &a.reference {
                check_oci_reference(r, true)?;
                parts.args.push(arg(flag::REFERENCE, r));
            }
        }
        SourceInput::ConfigMap { .. } => {
            return Err(JobBuildError::SourceNotForOperation {
                operation: op,
                source_kind: SourceKind::ConfigMap,
            });
        }
    }
    Ok(())
}

/// Observe, Plan, History, Apply: the source init container checks or
/// fetches, the operation container reads `/source` read-only and alone holds
/// the database URL.
pub(super) fn database_operation(input: &JobInput, parts: &mut Parts) -> Result<(), JobBuildError> {
    let op = input.operation;
    let target = &input.target;
    check_subdomain("spec.target.urlFrom.name", &target.url_from.name)?;
    check_text("spec.target.urlFrom.key", &target.url_from.key)?;
    if target.lock_timeout.to_std().is_err() {
        return Err(invalid(
            "spec.policy.lockTimeout",
            target.lock_timeout.as_str(),
            "must be a Go duration",
        ));
    }
    if input.execution.connect_timeout.to_std().is_err() {
        return Err(invalid(
            "spec.execution.connectTimeout",
            input.execution.connect_timeout.as_str(),
            "must be a Go duration",
        ));
    }
    let (content_digest, step) = source_step(input)?;
    parts
        .annotations
        .insert(ANNOTATION_CONTENT_DIGEST.into(), content_digest.clone());
    parts.volumes.push(empty_dir("source", "128Mi"));
    parts.volumes.push(empty_dir("source-tmp", "256Mi"));
    parts.volumes.extend(step.volumes);
    parts.init = Some(step.container);

    parts.args.extend(common_args(input));
    parts.args.extend(
        DatabaseFlags {
            engine: target.engine.into(),
            source: SOURCE_DIR.into(),
            source_kind: input.source.kind().into(),
            content_digest: content_digest.clone(),
            connect_timeout: input.execution.connect_timeout.clone(),
            lock_timeout: target.lock_timeout.clone(),
        }
        .render(),
    );
    if op == OperationType::Plan {
        parts.args.extend(
            target
                .exclude
                .iter()
                .map(|selector| arg(flag::EXCLUDE, selector)),
        );
    }
    parts.mounts.push(mount("source", SOURCE_DIR, true));
    parts.env.push(env_secret(
        "PTAH_DB_URL",
        &target.url_from.name,
        &target.url_from.key,
        false,
    ));
    if op == OperationType::Plan
        && let Some(dev) = &target.dev_url_from
    {
        check_subdomain("spec.dev.urlFrom.name", &dev.name)?;
        parts
            .env
            .push(env_secret("PTAH_DEV_URL", &dev.name, &dev.key, false));
    }
    match &input.apply {
        Some(ApplyInput::Schema {
            plan_name,
            plan_fingerprint,
            content_digest,
            transaction_mode,
        }) => {
            check_subdomain("apply.planName", plan_name)?;
            check_digest("apply.planFingerprint", plan_fingerprint)?;
            check_digest("apply.planContentDigest", content_digest)?;
            parts.tail.extend(
                PlanFlags::Schema {
                    plan: plan_name.clone(),
                    plan_fingerprint: plan_fingerprint.clone(),
                    plan_content_digest: content_digest.clone(),
                    transaction_mode: (*transaction_mode).into(),
                }
                .render(),
            );
            parts
                .annotations
                .insert(ANNOTATION_PLAN_FINGERPRINT.into(), plan_fingerprint.clone());
            parts.annotations.insert(
                ANNOTATION_PLAN_CONTENT_DIGEST.into(),
                content_digest.clone(),
            );
        }
        Some(ApplyInput::Migration {
            plan_name,
            plan_fingerprint,
            sequence_digest,
            transaction_mode,
        }) => {
            check_subdomain("apply.planName", plan_name)?;
            check_digest("apply.planFingerprint", plan_fingerprint)?;
            check_digest("apply.sequenceDigest", sequence_digest)?;
            parts.tail.extend(
                PlanFlags::Migration {
                    plan: plan_name.clone(),
                    plan_fingerprint: plan_fingerprint.clone(),
                    sequence_digest: sequence_digest.clone(),
                    transaction_mode: transaction_mode.map(Into::into),
                }
                .render(),
            );
            parts
                .annotations
                .insert(ANNOTATION_PLAN_FINGERPRINT.into(), plan_fingerprint.clone());
        }
        None => {}
    }
    if op == OperationType::Apply {
        parts
            .annotations
            .insert(ANNOTATION_SAFE_TO_EVICT.into(), "false".into());
    }
    Ok(())
}

/// The result token (the Pod's own ServiceAccount token for the receiver,
/// mounted in the operation container only), the receiver, its CA and the
/// claim's deadlines.
pub(super) fn result_delivery(input: &JobInput, parts: &mut Parts) -> Result<(), JobBuildError> {
    let result = &input.result;
    parts.volumes.push(result_token_volume(
        "result-token",
        RESULT_TOKEN_FILE,
        input.execution.active_deadline_seconds,
    ));
    parts
        .mounts
        .push(mount("result-token", RESULT_TOKEN_DIR, true));
    let mut flags = ResultFlags {
        result_url: result.receiver_url.clone(),
        result_token_file: format!("{RESULT_TOKEN_DIR}/{RESULT_TOKEN_FILE}"),
        result_ca_file: None,
        // jiff prints RFC 3339 in UTC with a `Z`, as the API server writes it.
        dispatch_not_after: input.claim.dispatch_not_after.as_ref().map(|t| t.0),
        execution_not_after: input.claim.execution_not_after.as_ref().map(|t| t.0),
    };
    if let Some(ca) = &result.receiver_ca {
        check_subdomain("result.receiverCA.name", &ca.name)?;
        parts.volumes.push(config_map_volume(
            "receiver-ca",
            &ca.name,
            item(&ca.key, "ca.pem"),
        ));
        parts
            .mounts
            .push(mount("receiver-ca", RECEIVER_CA_DIR, true));
        flags.result_ca_file = Some(format!("{RECEIVER_CA_DIR}/ca.pem"));
    }
    parts.args.extend(flags.render());
    Ok(())
}
pub(super) struct SourceStep {
    pub(super) container: Container,
    pub(super) volumes: Vec<Volume>,
}

/// The `source` init container of a database operation, and the content
/// digest the operation container is told to expect.
pub(super) fn source_step(input: &JobInput) -> Result<(String, SourceStep), JobBuildError> {
    let op = input.operation;
    let mut args = vec![command::SOURCE.to_string()];
    let mut env_vars = vec![env("HOME", TMP_DIR), env("TMPDIR", TMP_DIR)];
    let mut mounts = vec![
        mount("source", SOURCE_DIR, false),
        mount("source-tmp", TMP_DIR, false),
    ];
    let mut volumes = Vec::new();
    let digest = match &input.source {
        SourceInput::ConfigMap {
            snapshot_name,
            content_digest,
        } => {
            check_subdomain("source.configMap.snapshotName", snapshot_name)?;
            check_digest("source.configMap.contentDigest", content_digest)?;
            volumes.push(config_map_volume("snapshot", snapshot_name, None));
            mounts.push(mount("snapshot", SNAPSHOT_DIR, true));
            args.push(command::CHECK.into());
            args.push(arg(flag::SNAPSHOT, SNAPSHOT_DIR));
            args.push(arg(flag::CONTENT_DIGEST, content_digest));
            content_digest.clone()
        }
        SourceInput::Git(git) => {
            check_text("spec.source.git.url", &git.url)?;
            let commit = git.commit.as_deref().ok_or(JobBuildError::Missing {
                field: "source.git.commit",
                operation: op,
            })?;
            if commit.len() != 40
                || !commit
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                return Err(invalid(
                    "source.git.commit",
                    commit,
                    "must be 40 lowercase hex digits",
                ));
            }
            let digest = git
                .content_digest
                .as_deref()
                .ok_or(JobBuildError::Missing {
                    field: "source.git.contentDigest",
                    operation: op,
                })?;
            check_digest("source.git.contentDigest", digest)?;
            args.extend([command::FETCH.into(), command::GIT.into()]);
            args.push(arg(flag::URL, &git.url));
            args.push(arg(flag::COMMIT, commit));
            if let Some(b) = &git.git_ref.branch {
                args.push(arg(flag::REF, format!("refs/heads/{b}")));
            } else if let Some(t) = &git.git_ref.tag {
                args.push(arg(flag::REF, format!("refs/tags/{t}")));
            }
            if let Some(p) = &git.path {
                check_text("spec.source.git.path", p)?;
                args.push(arg(flag::PATH, p));
            }
            args.push(arg(flag::CONTENT_DIGEST, digest));
            let (a, m, v) = git_credentials(git)?;
            args.extend(a);
            mounts.extend(m);
            volumes.extend(v);
            digest.to_string()
        }
        SourceInput::Oci(oci) => {
            check_oci_reference(&oci.reference, true)?;
            let digest = oci
                .reference
                .rsplit_once('@')
                .map(|(_, d)| d.to_string())
                .ok_or_else(|| {
                    invalid(
                        "source.oci.reference",
                        &oci.reference,
                        "must be pinned by digest",
                    )
                })?;
            args.extend([command::FETCH.into(), command::OCI.into()]);
            args.push(arg(flag::REFERENCE, &oci.reference));
            let access = registry_access(oci)?;
            args.extend(access.args);
            env_vars.extend(access.env);
            mounts.extend(access.mounts);
            volumes.extend(access.volumes);
            digest
        }
        SourceInput::Flux(_) => {
            return Err(JobBuildError::SourceNotForOperation {
                operation: op,
                source_kind: SourceKind::Flux,
            });
        }
    };
    args.push(arg(flag::OUT, SOURCE_DIR));
    let mut c = container(SOURCE_CONTAINER, &input.images.runner, args);
    c.env = Some(env_vars);
    c.volume_mounts = Some(mounts);
    c.resources = Some(init_resources());
    Ok((
        digest,
        SourceStep {
            container: c,
            volumes,
        },
    ))
}
