//! The Job builder's example inputs: every operation of each kind for every
//! source kind it runs on, plus one with every `spec.execution` setting. The
//! goldens (`operator/tests/golden/jobs/`) are these rendered, and the
//! conformance suite creates them under Pod Security `restricted`. Compiled
//! only with the `testing` feature.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::job::{
    ApplyInput, ClaimInput, FluxArtifact, FluxContent, FluxInput, GitInput, Images, JobInput,
    OciInput, Owner, OwnerKind, ResultDelivery, SourceInput, TargetInput,
};
use crate::api::common::{
    ConfigMapKeyRef, DatabaseEngine, Execution, GoDuration, MigrationTransactionMode, PodMetadata,
    SchemaTransactionMode, SecretKeyRef,
};
use crate::api::source::{FluxSourceKind, GitRef, OciTransport, RegistryAuth, RegistryAuthMode};
use crate::api::status::OperationType;

/// `sha256:` and 64 hex digits made of `n`.
pub fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

/// The runner (operator) image of the examples.
pub const RUNNER_IMAGE: &str = "ghcr.io/ptah-run/ptah-operator@sha256:1111111111111111111111111111111111111111111111111111111111111111";
/// The executor image of the examples.
pub const EXECUTOR_IMAGE: &str = "ghcr.io/ptah-run/ptah-executor@sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn at(second: i64) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_second(1_767_225_600 + second)
        .ok()
        .map(Time)
}

/// The source kinds of the examples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A ConfigMap snapshot.
    ConfigMap,
    /// A Git commit.
    Git,
    /// An OCI artifact.
    Oci,
}

impl Kind {
    fn file_part(self) -> &'static str {
        match self {
            Self::ConfigMap => "configmap",
            Self::Git => "git",
            Self::Oci => "oci",
        }
    }
}

fn source(kind: Kind, op: OperationType, family: OwnerKind) -> SourceInput {
    let resolve = op == OperationType::Resolve;
    match kind {
        Kind::ConfigMap => SourceInput::ConfigMap {
            snapshot_name: "ptah-src-3f2a9c1d".into(),
            content_digest: digest(0x33),
        },
        Kind::Git => SourceInput::Git(GitInput {
            url: "https://git.example.com/shop/schema.git".into(),
            git_ref: GitRef {
                branch: Some("main".into()),
                tag: None,
                commit: None,
            },
            commit: (!resolve).then(|| "0123456789abcdef0123456789abcdef01234567".into()),
            path: Some(match family {
                OwnerKind::PtahSchema => "db/schema".into(),
                OwnerKind::PtahMigration => "db/migrations".into(),
            }),
            content_digest: (!resolve).then(|| digest(0x44)),
            secret_name: Some("git-credentials".into()),
            source_policy: None,
        }),
        Kind::Oci => SourceInput::Oci(OciInput {
            reference: if resolve {
                "oci://registry.example.com/shop/schema:v1".into()
            } else {
                format!("oci://registry.example.com/shop/schema@{}", digest(0x55))
            },
            auth: Some(RegistryAuth {
                name: "registry-credentials".into(),
                mode: RegistryAuthMode::Environment,
                username_key: "username".into(),
                password_key: "password".into(),
                token_key: "token".into(),
                docker_config_json_key: ".dockerconfigjson".into(),
            }),
            transport: Some(OciTransport {
                plain_http: false,
                ca_from: Some(ConfigMapKeyRef {
                    name: "registry-ca".into(),
                    key: "ca.crt".into(),
                }),
            }),
            flux_content: None,
            verification_policy: (op == OperationType::Verify).then(|| ConfigMapKeyRef {
                name: "schema-verification".into(),
                key: "policy.yaml".into(),
            }),
        }),
    }
}

/// A distinct operation id per example: real ids hash the operation and its
/// inputs, so two operations never share a Job name.
pub fn operation_id(family: OwnerKind, op: OperationType, kind: Kind) -> String {
    let f = match family {
        OwnerKind::PtahSchema => 0x5c,
        OwnerKind::PtahMigration => 0x3a,
    };
    let o = op as u8;
    let k = kind as u8;
    format!("sha256:{f:02x}{o:02x}{k:02x}{}", "ab".repeat(29))
}

/// One example's input.
pub fn example(family: OwnerKind, op: OperationType, kind: Kind, namespace: &str) -> JobInput {
    let (name, uid) = match family {
        OwnerKind::PtahSchema => ("orders", "6f1c2d3e-0000-4000-8000-000000000001"),
        OwnerKind::PtahMigration => ("orders-migrations", "6f1c2d3e-0000-4000-8000-000000000002"),
    };
    let apply = (op == OperationType::Apply).then(|| match family {
        OwnerKind::PtahSchema => ApplyInput::Schema {
            plan_name: "orders-plan-7c1e".into(),
            plan_fingerprint: digest(0x66),
            content_digest: digest(0x77),
            transaction_mode: SchemaTransactionMode::File,
        },
        OwnerKind::PtahMigration => ApplyInput::Migration {
            plan_name: "orders-migrations-plan-7c1e".into(),
            plan_fingerprint: digest(0x66),
            sequence_digest: digest(0x88),
            transaction_mode: Some(MigrationTransactionMode::File),
        },
    });
    JobInput {
        operation: op,
        owner: Owner {
            kind: family,
            name: name.into(),
            namespace: namespace.into(),
            uid: uid.into(),
            generation: 3,
        },
        claim: ClaimInput {
            operation_id: operation_id(family, op, kind),
            input_fingerprint: digest(0xcd),
            attempt: 1,
            dispatch_not_after: at(300),
            execution_not_after: at(1200),
        },
        execution: Execution::default(),
        target: TargetInput {
            engine: DatabaseEngine::PostgreSQL,
            url_from: SecretKeyRef {
                name: "orders-db".into(),
                key: "url".into(),
            },
            dev_url_from: (op == OperationType::Plan && family == OwnerKind::PtahSchema).then(
                || SecretKeyRef {
                    name: "orders-dev-db".into(),
                    key: "url".into(),
                },
            ),
            lock_timeout: GoDuration::new("30s"),
            // A schema's Plan leaves another claimant's table out of scope.
            exclude: if op == OperationType::Plan && family == OwnerKind::PtahSchema {
                vec!["audit_log".into()]
            } else {
                Vec::new()
            },
        },
        source: source(kind, op, family),
        apply,
        images: Images {
            runner: RUNNER_IMAGE.into(),
            executor: EXECUTOR_IMAGE.into(),
        },
        result: ResultDelivery {
            receiver_url: "https://ptah-operator.ptah-system.svc:9443/v1/results".into(),
            receiver_ca: Some(ConfigMapKeyRef {
                name: "ptah-receiver-ca".into(),
                key: "ca.crt".into(),
            }),
            finished_ttl_seconds: None,
        },
        trace: None,
    }
}

/// Every `spec.execution` field set.
pub fn full_execution() -> Execution {
    Execution {
        failure_retry_interval: GoDuration::new("45s"),
        active_deadline_seconds: 1200,
        connect_timeout: GoDuration::new("20s"),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("250m".into())),
                ("memory".into(), Quantity("256Mi".into())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".into(),
                Quantity("512Mi".into()),
            )])),
            ..Default::default()
        }),
        service_account_name: Some("ptah-ops".into()),
        image_pull_secrets: vec![LocalObjectReference {
            name: "regcred".into(),
        }],
        node_selector: BTreeMap::from([("kubernetes.io/os".into(), "linux".into())]),
        tolerations: vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        affinity: Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "topology.kubernetes.io/zone".into(),
                            operator: "Exists".into(),
                            values: None,
                        }]),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        priority_class_name: Some("ptah-batch-low".into()),
        runtime_class_name: Some("ptah-runc".into()),
        pod_metadata: Some(PodMetadata {
            labels: BTreeMap::from([("sidecar.istio.io/inject".into(), "false".into())]),
            annotations: BTreeMap::from([("linkerd.io/inject".into(), "disabled".into())]),
        }),
    }
}

/// Every example, with the stem of its golden file, in `namespace`.
pub fn all(namespace: &str) -> Vec<(String, JobInput)> {
    use OperationType::*;
    let mut out = Vec::new();
    for (family, prefix, ops) in [
        (
            OwnerKind::PtahSchema,
            "schema",
            &[Resolve, Verify, Observe, Plan, Apply][..],
        ),
        (
            OwnerKind::PtahMigration,
            "migration",
            &[Resolve, Verify, History, Apply][..],
        ),
    ] {
        for &op in ops {
            for kind in [Kind::ConfigMap, Kind::Git, Kind::Oci] {
                let runs = match op {
                    Resolve => kind != Kind::ConfigMap,
                    Verify => kind == Kind::Oci,
                    _ => true,
                };
                if runs {
                    out.push((
                        format!(
                            "{prefix}-{}-{}",
                            super::job::operation_name(op),
                            kind.file_part()
                        ),
                        example(family, op, kind, namespace),
                    ));
                }
            }
        }
    }
    let mut full = example(OwnerKind::PtahSchema, Apply, Kind::Oci, namespace);
    full.execution = full_execution();
    full.claim.attempt = 2;
    if let SourceInput::Oci(oci) = &mut full.source
        && let Some(auth) = &mut oci.auth
    {
        auth.mode = RegistryAuthMode::DockerConfigJSON;
    }
    out.push(("schema-apply-oci-full-execution".into(), full));
    out
}

/// The examples of inputs that name a source policy
/// (`spec.source.sourcePolicyFrom`), with the stems of their golden files:
/// a Git Resolve that mounts the policy and passes `--source-policy`.
pub fn under_source_policy(namespace: &str) -> Vec<(String, JobInput)> {
    let mut policed = example(
        OwnerKind::PtahSchema,
        OperationType::Resolve,
        Kind::Git,
        namespace,
    );
    // Its own operation id, so its Job never shares a name with the plain
    // Git Resolve's.
    policed.claim.operation_id = format!("sha256:5c0101{}", "cd".repeat(29));
    if let SourceInput::Git(git) = &mut policed.source {
        git.source_policy = Some(ConfigMapKeyRef {
            name: "source-policy".into(),
            key: "policy.yaml".into(),
        });
    }
    vec![("schema-resolve-git-source-policy".into(), policed)]
}

/// The example of a Flux source's Resolve: an `OCIRepository` under a
/// verification policy, bound to the artifact its status named.
pub fn of_flux(namespace: &str) -> Vec<(String, JobInput)> {
    let mut flux = example(
        OwnerKind::PtahSchema,
        OperationType::Resolve,
        Kind::Git,
        namespace,
    );
    flux.claim.operation_id = format!("sha256:5c0104{}", "ef".repeat(29));
    flux.source = SourceInput::Flux(FluxInput {
        kind: FluxSourceKind::OCIRepository,
        name: "shop-schema".into(),
        path: Some("db".into()),
        artifact: Some(FluxArtifact {
            uid: "6a1c2f0e-0000-4000-8000-0000000000f1".into(),
            url: format!(
                "http://source-controller.flux-system.svc.cluster.local./ocirepository/{namespace}/shop-schema/{}.tar.gz",
                "6".repeat(64)
            ),
            digest: digest(0x66),
            revision: format!("v1@{}", digest(0x77)),
            reference: Some(format!(
                "oci://registry.example.com/shop/schema@{}",
                digest(0x77)
            )),
            insecure: false,
        }),
    });
    let mut verify = example(
        OwnerKind::PtahSchema,
        OperationType::Verify,
        Kind::Oci,
        namespace,
    );
    verify.claim.operation_id = format!("sha256:5c0204{}", "ef".repeat(29));
    if let SourceInput::Oci(oci) = &mut verify.source {
        oci.reference = format!("oci://registry.example.com/shop/schema@{}", digest(0x77));
        oci.auth = None;
        oci.transport = Some(OciTransport {
            plain_http: true,
            ca_from: None,
        });
        oci.flux_content = Some(FluxContent {
            content_digest: digest(0x33),
            path: Some("db".into()),
        });
    }
    vec![
        ("schema-resolve-flux".into(), flux),
        ("schema-verify-flux-oci".into(), verify),
    ]
}

/// Every example with a golden file: [`all`], [`under_source_policy`] and
/// [`of_flux`].
pub fn goldens(namespace: &str) -> Vec<(String, JobInput)> {
    let mut out = all(namespace);
    out.extend(under_source_policy(namespace));
    out.extend(of_flux(namespace));
    out
}
