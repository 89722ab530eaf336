//! The Pod: hardened containers, the volumes and mounts each one gets, and
//! where each secret goes (the credential handovers).

use super::*;

pub(super) fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

pub(super) fn env_secret(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: optional.then_some(true),
            }),
            ..Default::default()
        }),
    }
}

pub(super) fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: path.into(),
            }),
            ..Default::default()
        }),
    }
}

pub(super) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

pub(super) fn empty_dir(name: &str, size: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: None,
            size_limit: Some(Quantity(size.into())),
        }),
        ..Default::default()
    }
}

pub(super) fn secret_volume(name: &str, secret: &str, items: Option<Vec<KeyToPath>>) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items,
            default_mode: Some(SECRET_MODE),
            optional: None,
        }),
        ..Default::default()
    }
}

/// The Pod's own ServiceAccount token for the receiver: audience
/// [`RESULT_AUDIENCE`], bound to the Pod, valid at least as long as the Pod
/// may run (a kubelet refreshes it before it expires anyway).
pub(super) fn result_token_volume(name: &str, path: &str, active_deadline_seconds: i64) -> Volume {
    Volume {
        name: name.into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(SECRET_MODE),
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(RESULT_AUDIENCE.into()),
                    expiration_seconds: Some(
                        active_deadline_seconds
                            .saturating_add(RESULT_TOKEN_SLACK_SECONDS)
                            .max(MIN_RESULT_TOKEN_SECONDS),
                    ),
                    path: path.into(),
                }),
                ..Default::default()
            }]),
        }),
        ..Default::default()
    }
}

pub(super) fn config_map_volume(
    name: &str,
    config_map: &str,
    items: Option<Vec<KeyToPath>>,
) -> Volume {
    Volume {
        name: name.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.into(),
            items,
            default_mode: Some(SECRET_MODE),
            optional: None,
        }),
        ..Default::default()
    }
}

pub(super) fn item(key: &str, path: &str) -> Option<Vec<KeyToPath>> {
    Some(vec![KeyToPath {
        key: key.into(),
        path: path.into(),
        mode: None,
    }])
}

pub(super) fn hardened() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".into()]),
        }),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS),
        run_as_group: Some(RUN_AS),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

pub(super) fn container(name: &str, image: &str, args: Vec<String>) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![RUNNER_PATH.into()]),
        args: Some(args),
        security_context: Some(hardened()),
        termination_message_path: Some("/dev/termination-log".into()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

pub(super) fn init_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("50m".into())),
            ("memory".into(), Quantity("64Mi".into())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".into(),
            Quantity("512Mi".into()),
        )])),
        ..Default::default()
    }
}

/// One ConfigMap key mounted read-only as `<dir>/<file>`, and the runner flag
/// that names it: the registry CA and the source policy arrive this way.
pub(super) fn config_map_file(
    volume: &str,
    dir: &str,
    (config_map, key): (&str, &str),
    file: &str,
    flag: &str,
) -> (String, VolumeMount, Volume) {
    (
        arg(flag, format!("{dir}/{file}")),
        mount(volume, dir, true),
        config_map_volume(volume, config_map, item(key, file)),
    )
}

/// Volumes, mounts and env that carry registry credentials and transport to
/// whichever container reaches the registry.
pub(super) struct RegistryAccess {
    pub(super) args: Vec<String>,
    pub(super) env: Vec<EnvVar>,
    pub(super) mounts: Vec<VolumeMount>,
    pub(super) volumes: Vec<Volume>,
}

pub(super) fn registry_access(oci: &OciInput) -> Result<RegistryAccess, JobBuildError> {
    let mut access = RegistryAccess {
        args: Vec::new(),
        env: Vec::new(),
        mounts: Vec::new(),
        volumes: Vec::new(),
    };
    if let Some(t) = &oci.transport {
        if t.plain_http {
            access.args.push(switch(flag::PLAIN_HTTP));
        }
        if let Some(ca) = &t.ca_from {
            check_subdomain("spec.source.oci.transport.caFrom.name", &ca.name)?;
            let (arg, m, v) = config_map_file(
                "registry-ca",
                REGISTRY_CA_DIR,
                (&ca.name, &ca.key),
                "ca.pem",
                flag::CA_FILE,
            );
            access.args.push(arg);
            access.mounts.push(m);
            access.volumes.push(v);
        }
    }
    if let Some(auth) = &oci.auth {
        check_subdomain("spec.source.oci.registryAuthFrom.name", &auth.name)?;
        access.env.push(env_secret(
            "PTAH_REGISTRY_AUTHORITY",
            &auth.name,
            "registry",
            true,
        ));
        match auth.mode {
            RegistryAuthMode::Environment => {
                access.env.push(env_secret(
                    "PTAH_REGISTRY_USERNAME",
                    &auth.name,
                    &auth.username_key,
                    true,
                ));
                access.env.push(env_secret(
                    "PTAH_REGISTRY_PASSWORD",
                    &auth.name,
                    &auth.password_key,
                    true,
                ));
                access.env.push(env_secret(
                    "PTAH_REGISTRY_TOKEN",
                    &auth.name,
                    &auth.token_key,
                    true,
                ));
            }
            RegistryAuthMode::DockerConfigJSON => {
                access.volumes.push(secret_volume(
                    "registry-credentials",
                    &auth.name,
                    item(&auth.docker_config_json_key, "config.json"),
                ));
                access
                    .mounts
                    .push(mount("registry-credentials", REGISTRY_CONFIG_DIR, true));
                access.args.push(arg(
                    flag::DOCKER_CONFIG,
                    format!("{REGISTRY_CONFIG_DIR}/config.json"),
                ));
            }
        }
    }
    Ok(access)
}

/// Runner arguments, mounts and volumes that hand a credential to one container.
pub(super) type Handover = (Vec<String>, Vec<VolumeMount>, Vec<Volume>);

pub(super) fn git_credentials(git: &GitInput) -> Result<Handover, JobBuildError> {
    match &git.secret_name {
        None => Ok((Vec::new(), Vec::new(), Vec::new())),
        Some(secret) => {
            check_subdomain("spec.source.git.secretRef.name", secret)?;
            Ok((
                vec![arg(flag::CREDENTIALS, GIT_CREDENTIALS_DIR)],
                vec![mount("git-credentials", GIT_CREDENTIALS_DIR, true)],
                vec![secret_volume("git-credentials", secret, None)],
            ))
        }
    }
}
/// The Pod's labels and annotations: the user's `podMetadata`, refused if it
/// uses a reserved key, then ours written over them.
pub(super) fn pod_metadata(
    input: &JobInput,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<(Metadata, Metadata), JobBuildError> {
    let mut pod_labels = BTreeMap::new();
    let mut pod_annotations = BTreeMap::new();
    if let Some(pm) = &input.execution.pod_metadata {
        for (map, entries, into) in [
            ("labels", &pm.labels, &mut pod_labels),
            ("annotations", &pm.annotations, &mut pod_annotations),
        ] {
            for (k, v) in entries {
                if is_reserved_key(k) {
                    return Err(JobBuildError::ReservedPodMetadataKey {
                        map,
                        key: k.clone(),
                    });
                }
                into.insert(k.clone(), v.clone());
            }
        }
    }
    pod_labels.extend(labels.clone());
    pod_annotations.extend(annotations.clone());
    Ok((pod_labels, pod_annotations))
}

/// The hardened Pod around the containers, with the scheduling knobs of
/// `spec.execution` passed through.
pub(super) fn pod_spec(
    input: &JobInput,
    operation: Container,
    init: Option<Container>,
    volumes: Vec<Volume>,
) -> PodSpec {
    let exec = &input.execution;
    let grace = if input.operation == OperationType::Apply {
        45
    } else {
        30
    };
    PodSpec {
        active_deadline_seconds: Some(exec.active_deadline_seconds),
        affinity: exec.affinity.clone(),
        automount_service_account_token: Some(false),
        containers: vec![operation],
        enable_service_links: Some(false),
        image_pull_secrets: (!exec.image_pull_secrets.is_empty())
            .then(|| exec.image_pull_secrets.clone()),
        init_containers: init.map(|c| vec![c]),
        node_selector: (!exec.node_selector.is_empty()).then(|| exec.node_selector.clone()),
        priority_class_name: exec.priority_class_name.clone(),
        restart_policy: Some("Never".into()),
        runtime_class_name: exec.runtime_class_name.clone(),
        security_context: Some(PodSecurityContext {
            fs_group: Some(RUN_AS),
            fs_group_change_policy: Some("OnRootMismatch".into()),
            run_as_group: Some(RUN_AS),
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        service_account_name: exec.service_account_name.clone(),
        termination_grace_period_seconds: Some(grace),
        tolerations: (!exec.tolerations.is_empty()).then(|| exec.tolerations.clone()),
        volumes: Some(volumes),
        ..Default::default()
    }
}
