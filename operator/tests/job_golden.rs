//! The Job builder's goldens and the properties every Job must have.
//!
//! Each example of `ptah_operator::execution::examples` ([`examples::goldens`]:
//! every operation and source kind, and those under a source policy) renders to
//! `tests/golden/jobs/<stem>.yaml`; a difference fails with the file named.
//! `PTAH_BLESS=1 cargo test -p ptah-operator --test job_golden` rewrites them
//! (review the diff: a golden change is a Pod spec change).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use ptah_operator::api::common::PodMetadata;
use ptah_operator::api::status::OperationType;
use ptah_operator::execution::examples::{self, Kind};
use ptah_operator::execution::job::{
    self, JobBuildError, JobInput, OPERATION_CONTAINER, OwnerKind, SERVICE_ACCOUNT_TOKEN,
    SOURCE_CONTAINER, SourceInput, build_job, secrets_by_container,
};

const NAMESPACE: &str = "shop";

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/jobs")
}

fn render(input: &JobInput) -> String {
    let job = build_job(input).expect("the example builds");
    job::to_yaml(&job).expect("yaml")
}

fn pod(job: &Job) -> &PodSpec {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

fn containers(job: &Job) -> Vec<&Container> {
    let p = pod(job);
    p.init_containers
        .iter()
        .flatten()
        .chain(p.containers.iter())
        .collect()
}

#[test]
fn every_example_matches_its_golden() {
    let dir = golden_dir();
    let bless = std::env::var_os("PTAH_BLESS").is_some_and(|v| v == "1");
    if bless {
        std::fs::create_dir_all(&dir).expect("golden dir");
    }
    let mut stems = BTreeSet::new();
    let mut failures = Vec::new();
    for (stem, input) in examples::goldens(NAMESPACE) {
        let yaml = render(&input);
        // The YAML is the Job: it reads back to the same object.
        let back: Job = serde_saphyr::from_str(&yaml).expect("golden parses as a Job");
        assert_eq!(Some(back), build_job(&input).ok(), "{stem}: round trip");
        let path = dir.join(format!("{stem}.yaml"));
        stems.insert(format!("{stem}.yaml"));
        if bless {
            std::fs::write(&path, &yaml).expect("write golden");
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == yaml => {}
            Ok(_) => failures.push(format!("{} differs", path.display())),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    // No stale golden stays behind.
    for entry in std::fs::read_dir(&dir).expect("golden dir") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if !stems.contains(&name) {
            if bless {
                std::fs::remove_file(dir.join(&name)).expect("remove stale golden");
            } else {
                failures.push(format!("{name} has no example"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "goldens out of date (PTAH_BLESS=1 rewrites them):\n{}",
        failures.join("\n")
    );
    // 12 schema + 9 migration examples, the full-execution one, the Git
    // Resolve under a source policy, and a Flux source's Resolve and Verify.
    assert_eq!(stems.len(), 25);
}

#[test]
fn the_same_input_renders_byte_identical_yaml() {
    for (stem, input) in examples::goldens(NAMESPACE) {
        let a = render(&input);
        let b = render(&input.clone());
        assert_eq!(a, b, "{stem}");
    }
}

#[test]
fn every_container_and_pod_is_hardened() {
    for (stem, input) in examples::goldens(NAMESPACE) {
        let job = build_job(&input).expect("builds");
        let spec = job.spec.as_ref().expect("spec");
        assert_eq!(spec.backoff_limit, Some(0), "{stem}");
        assert_eq!(
            spec.ttl_seconds_after_finished, None,
            "{stem}: TTL only after harvest"
        );
        assert_eq!(
            spec.active_deadline_seconds,
            Some(input.execution.active_deadline_seconds),
            "{stem}"
        );
        let p = pod(&job);
        assert_eq!(p.restart_policy.as_deref(), Some("Never"), "{stem}");
        assert_eq!(p.automount_service_account_token, Some(false), "{stem}");
        let psc = p.security_context.as_ref().expect("pod security context");
        assert_eq!(psc.run_as_non_root, Some(true), "{stem}");
        assert!(psc.run_as_user.is_some_and(|u| u > 0), "{stem}");
        assert!(psc.fs_group.is_some_and(|g| g > 0), "{stem}");
        assert_eq!(
            psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault"),
            "{stem}"
        );
        // Only volume kinds Pod Security `restricted` allows, and no host path.
        for v in p.volumes.iter().flatten() {
            assert!(
                v.empty_dir.is_some()
                    || v.secret.is_some()
                    || v.config_map.is_some()
                    || v.projected.is_some(),
                "{stem}: volume {} of a kind restricted forbids",
                v.name
            );
        }
        for c in containers(&job) {
            let sc = c
                .security_context
                .as_ref()
                .expect("container security context");
            let what = format!("{stem}/{}", c.name);
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{what}");
            assert_eq!(sc.read_only_root_filesystem, Some(true), "{what}");
            assert_eq!(sc.privileged, Some(false), "{what}");
            let caps = sc.capabilities.as_ref().expect("capabilities");
            assert_eq!(
                caps.drop.as_deref(),
                Some(&["ALL".to_string()][..]),
                "{what}"
            );
            assert!(caps.add.is_none(), "{what}");
            assert_eq!(
                c.termination_message_policy.as_deref(),
                Some("FallbackToLogsOnError"),
                "{what}"
            );
            assert!(
                c.image.as_deref().is_some_and(|i| i.contains("@sha256:")),
                "{what}"
            );
            // Every writable mount is an emptyDir.
            for m in c.volume_mounts.iter().flatten() {
                if m.read_only != Some(true) {
                    let vol = p.volumes.iter().flatten().find(|v| v.name == m.name);
                    assert!(
                        vol.is_some_and(|v| v.empty_dir.is_some()),
                        "{what}: writable mount {} is not an emptyDir",
                        m.name
                    );
                }
            }
        }
    }
}

/// The one container each Secret of the examples may reach.
/// The result token as [`secrets_by_container`] names it.
fn result_token() -> String {
    format!(
        "{SERVICE_ACCOUNT_TOKEN}{}",
        ptah_operator::protocol::receiver::RESULT_AUDIENCE
    )
}

fn allowed_container(secret: &str, op: OperationType) -> &'static str {
    let reads_itself = matches!(op, OperationType::Resolve | OperationType::Verify);
    match secret {
        "orders-db" | "orders-dev-db" => OPERATION_CONTAINER,
        s if s == result_token() => OPERATION_CONTAINER,
        "git-credentials" | "registry-credentials" if reads_itself => OPERATION_CONTAINER,
        "git-credentials" | "registry-credentials" => SOURCE_CONTAINER,
        other => panic!("unexpected Secret {other}"),
    }
}

#[test]
fn every_secret_reaches_exactly_its_one_container() {
    for (stem, input) in examples::goldens(NAMESPACE) {
        let job = build_job(&input).expect("builds");
        let by_container = secrets_by_container(&job);
        let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (container, secrets) in &by_container {
            for s in secrets {
                seen.entry(s.clone()).or_default().insert(container.clone());
            }
        }
        for (secret, holders) in &seen {
            let want = allowed_container(secret, input.operation);
            assert_eq!(
                holders,
                &BTreeSet::from([want.to_string()]),
                "{stem}: Secret {secret}"
            );
        }
        // The result token is always there; the database URL exactly where a
        // database is touched; a source credential always (every example has one).
        assert!(seen.contains_key(&result_token()), "{stem}");
        let db_op = !matches!(
            input.operation,
            OperationType::Resolve | OperationType::Verify
        );
        assert_eq!(
            seen.contains_key("orders-db"),
            db_op,
            "{stem}: database URL"
        );
        let credential = match &input.source {
            SourceInput::ConfigMap { .. } => None,
            SourceInput::Git(_) => Some("git-credentials"),
            SourceInput::Oci(o) => o.auth.as_ref().map(|_| "registry-credentials"),
            SourceInput::Flux(_) => None,
        };
        if let Some(c) = credential {
            assert!(seen.contains_key(c), "{stem}: {c}");
        }
        // The source step finishes before the database URL exists: it is an
        // init container, and the operation container reads /source read-only.
        let p = pod(&job);
        if db_op {
            let init: Vec<_> = p
                .init_containers
                .iter()
                .flatten()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(init, [SOURCE_CONTAINER], "{stem}");
            let op = &p.containers[0];
            let source = op
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.mount_path == "/source")
                .expect("source mount");
            assert_eq!(source.read_only, Some(true), "{stem}");
        } else {
            assert!(p.init_containers.is_none(), "{stem}");
        }
        assert_eq!(p.containers.len(), 1, "{stem}");
    }
}

#[test]
fn job_names_are_dns_labels_of_at_most_63_characters() {
    let id = examples::digest(0xab);
    for len in 1..=63 {
        // Names with dots and dashes in awkward places.
        let resource: String = (0..len)
            .map(|i| match i % 7 {
                3 if i + 1 < len => '.',
                5 if i + 1 < len => '-',
                _ => 'a',
            })
            .collect();
        for kind in [OwnerKind::PtahSchema, OwnerKind::PtahMigration] {
            for op in [
                OperationType::Resolve,
                OperationType::Verify,
                OperationType::Observe,
                OperationType::Plan,
                OperationType::History,
                OperationType::Apply,
            ] {
                for attempt in [1, 2, 99, i32::MAX] {
                    let name = job::job_name(kind, op, &resource, &id, attempt).expect("name");
                    assert!(name.len() <= 63, "{name}");
                    assert!(
                        name.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                            && !name.starts_with('-')
                            && !name.ends_with('-')
                            && !name.contains("--"),
                        "{name}"
                    );
                    assert!(name.contains(&id[7..23]), "{name}");
                    // Deterministic, and attempts never share a name.
                    assert_eq!(
                        job::job_name(kind, op, &resource, &id, attempt).ok(),
                        Some(name.clone())
                    );
                    if attempt > 1 {
                        assert_ne!(job::job_name(kind, op, &resource, &id, 1).ok(), Some(name));
                    }
                }
            }
        }
    }
    assert_eq!(
        job::job_name(OwnerKind::PtahSchema, OperationType::Plan, "orders", &id, 1).ok(),
        Some("ptah-plan-orders-abababababababab".into())
    );
    assert_eq!(
        job::job_name(
            OwnerKind::PtahMigration,
            OperationType::Apply,
            "orders",
            &id,
            3
        )
        .ok(),
        Some("ptah-m-apply-orders-abababababababab-3".into())
    );
    assert!(
        job::job_name(
            OwnerKind::PtahSchema,
            OperationType::Plan,
            "orders",
            "sha256:xyz",
            1
        )
        .is_err()
    );
    assert!(job::job_name(OwnerKind::PtahSchema, OperationType::Plan, "orders", &id, 0).is_err());
}

#[test]
fn pod_metadata_adds_to_our_keys_and_cannot_replace_them() {
    let mut input = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Observe,
        Kind::ConfigMap,
        NAMESPACE,
    );
    input.execution.pod_metadata = Some(PodMetadata {
        labels: BTreeMap::from([("team".into(), "payments".into())]),
        annotations: BTreeMap::from([("example.com/owner".into(), "payments".into())]),
    });
    let job = build_job(&input).expect("builds");
    let meta = job
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .expect("pod metadata");
    let labels = meta.labels.as_ref().expect("labels");
    assert_eq!(labels.get("team").map(String::as_str), Some("payments"));
    assert_eq!(
        labels.get(job::LABEL_MANAGED_BY).map(String::as_str),
        Some("ptah-operator")
    );
    assert_eq!(
        meta.annotations
            .as_ref()
            .and_then(|a| a.get("example.com/owner"))
            .map(String::as_str),
        Some("payments")
    );
    // The Job itself carries only ours.
    assert!(
        !job.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("team"))
    );

    for key in [
        job::LABEL_MANAGED_BY,
        job::LABEL_OPERATION,
        job::LABEL_OPERATION_ID,
        "operator.ptah.run/schema",
        "ptah.run/anything",
        "batch.kubernetes.io/job-name",
        "kubernetes.io/metadata.name",
        "k8s.io/x",
        "job-name",
        "controller-uid",
    ] {
        for labels in [true, false] {
            let mut bad = input.clone();
            let map = BTreeMap::from([(key.to_string(), "mine".to_string())]);
            bad.execution.pod_metadata = Some(if labels {
                PodMetadata {
                    labels: map,
                    annotations: BTreeMap::new(),
                }
            } else {
                PodMetadata {
                    labels: BTreeMap::new(),
                    annotations: map,
                }
            });
            match build_job(&bad) {
                Err(JobBuildError::ReservedPodMetadataKey { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }
}

#[test]
fn inputs_that_cannot_run_are_refused_with_the_field_named() {
    let base = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Observe,
        Kind::ConfigMap,
        NAMESPACE,
    );
    let cases: Vec<(&str, JobInput)> = vec![
        ("images.executor", {
            let mut i = base.clone();
            i.images.executor = "ghcr.io/ptah-run/ptah-executor:dev".into();
            i
        }),
        ("claim.operationID", {
            let mut i = base.clone();
            i.claim.operation_id = "abc".into();
            i
        }),
        ("spec.execution.activeDeadlineSeconds", {
            let mut i = base.clone();
            i.execution.active_deadline_seconds = 5;
            i
        }),
        ("metadata.name", {
            let mut i = base.clone();
            i.owner.name = "a".repeat(64);
            i
        }),
        ("source.configMap.contentDigest", {
            let mut i = base.clone();
            i.source = SourceInput::ConfigMap {
                snapshot_name: "ptah-src-1".into(),
                content_digest: "sha256:short".into(),
            };
            i
        }),
        ("source.oci.reference", {
            let mut i = examples::example(
                OwnerKind::PtahSchema,
                OperationType::Observe,
                Kind::Oci,
                NAMESPACE,
            );
            if let SourceInput::Oci(o) = &mut i.source {
                o.reference = "oci://registry.example.com/shop/schema:v1".into();
            }
            i
        }),
    ];
    for (field, input) in cases {
        let err = build_job(&input).expect_err(field);
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
    // Operations that do not exist for the kind or the source.
    let mut i = base.clone();
    i.operation = OperationType::History;
    assert!(matches!(
        build_job(&i),
        Err(JobBuildError::OperationNotOfKind { .. })
    ));
    let i = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Resolve,
        Kind::ConfigMap,
        NAMESPACE,
    );
    assert!(matches!(
        build_job(&i),
        Err(JobBuildError::SourceNotForOperation { .. })
    ));
    let i = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Verify,
        Kind::Git,
        NAMESPACE,
    );
    assert!(matches!(
        build_job(&i),
        Err(JobBuildError::SourceNotForOperation { .. })
    ));
    let mut i = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Apply,
        Kind::Git,
        NAMESPACE,
    );
    i.apply = None;
    assert!(matches!(
        build_job(&i),
        Err(JobBuildError::Missing { field: "apply", .. })
    ));
    let mut i = examples::example(
        OwnerKind::PtahSchema,
        OperationType::Observe,
        Kind::Git,
        NAMESPACE,
    );
    if let SourceInput::Git(g) = &mut i.source {
        g.commit = None;
    }
    assert!(matches!(
        build_job(&i),
        Err(JobBuildError::Missing {
            field: "source.git.commit",
            ..
        })
    ));
}
