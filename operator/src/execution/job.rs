//! The Job builder: one deterministic, hardened Pod per operation.
//!
//! [`build_job`] is pure: the same [`JobInput`] always gives the same Job,
//! byte for byte once rendered, and nothing here reads a clock or the API.
//! The goldens in `operator/tests/golden/jobs/` show every operation for every
//! source kind; `PTAH_BLESS=1 cargo test -p ptah-operator --test job_golden`
//! rewrites them.
//!
//! # Shape
//!
//! * **Name**: `ptah-<op>-<resource>-<16 hex>` for a PtahSchema and
//!   `ptah-m-<op>-<resource>-<16 hex>` for a PtahMigration, where the hex is the
//!   start of the operation id and `<resource>` is the resource name with dots
//!   made dashes, cut so the whole name is at most 63 characters (the Job
//!   controller copies it into the Pod's `job-name` label). Attempts after the
//!   first add `-<attempt>`: a retried read-only operation under the same claim
//!   never meets the Job of the attempt before it.
//! * **Labels** (Job and Pod): `app.kubernetes.io/managed-by: ptah-operator`,
//!   `app.kubernetes.io/component: schema-operation|migration-operation`,
//!   `operator.ptah.run/operation`, `operator.ptah.run/operation-id` (16 hex),
//!   `operator.ptah.run/schema|migration` (the resource name). The Pod also gets
//!   `spec.execution.podMetadata`; a reserved key there is refused
//!   ([`JobBuildError::ReservedPodMetadataKey`]) rather than dropped, and ours
//!   are written last, so a user key can never replace one of ours.
//! * **Annotations**: the full operation id, the input fingerprint, the
//!   attempt, the resource generation, the source content digest, and for an
//!   Apply the plan fingerprint and content digest plus
//!   `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`.
//! * **Owner**: the resource, `controller: true`, `blockOwnerDeletion: true`.
//! * **Job spec**: `backoffLimit: 0` (a failed Pod is an outcome, never a
//!   silent retry), `parallelism`/`completions` 1, `podReplacementPolicy:
//!   Failed`, `activeDeadlineSeconds` from `spec.execution` on the Job and on
//!   the Pod. **No `ttlSecondsAfterFinished` at creation**: a Job deleted
//!   before the manager harvested it would turn a known outcome into an
//!   unknown one, so the manager sets the TTL with a patch after harvest
//!   ([`harvested_ttl_patch`]). A Job found under the reserved name is
//!   adopted only if [`is_job_of_claim`] says it carries this claim.
//! * **Pod**: `restartPolicy: Never`, `automountServiceAccountToken: false`,
//!   `enableServiceLinks: false`, uid/gid/fsGroup [`RUN_AS`] with
//!   `runAsNonRoot`, seccomp `RuntimeDefault`; every container drops ALL
//!   capabilities, forbids privilege escalation, has a read-only root
//!   filesystem, writes only to emptyDirs, and uses
//!   `terminationMessagePolicy: FallbackToLogsOnError`. Grace period 30 s,
//!   45 s for an Apply (the runner forwards SIGTERM and lets Ptah stop).
//!
//! # Containers and where secrets go
//!
//! | Operation | Init container (operator image) | Operation container `ptah` |
//! | --- | --- | --- |
//! | Resolve (Git, OCI) | none | operator image; Git or registry credential, a Git source's source policy (`spec.source.sourcePolicyFrom`, read-only at `/source-policy`); no database URL |
//! | Verify (OCI) | none | operator image; registry credential, verification policy; no database URL |
//! | Observe, Plan, History, Apply | `source` (check or fetch; holds the Git/registry credential) | executor image; database URL (`PTAH_DB_URL`), dev URL (Plan) |
//!
//! The result token Secret is mounted only in the operation container. The
//! source init container writes the checked files into the `source` emptyDir,
//! which the operation container mounts read-only at `/source`; it runs to
//! completion (and refuses mismatched content) before the container holding
//! the database URL starts.
//!
//! # Runner command lines
//!
//! Rendered from the typed flags of [`crate::protocol::args`], which the
//! runner's parser reads: every value is one `--flag=value` argument (no
//! shell, and a value can never read as a flag). Source steps, in the
//! `source` init container:
//!
//! ```text
//! ptah-runner source check --snapshot=/snapshot --content-digest=sha256:… --out=/source
//! ptah-runner source fetch git --url=… --commit=<40 hex> [--ref=refs/heads/…] [--path=…]
//!     --content-digest=sha256:… [--credentials=/credentials/git] --out=/source
//! ptah-runner source fetch oci --reference=oci://…@sha256:… [--plain-http]
//!     [--ca-file=/credentials/registry-ca/ca.pem]
//!     [--docker-config=/credentials/registry/config.json] --out=/source
//! ```
//!
//! (Environment-mode registry credentials arrive as `PTAH_REGISTRY_USERNAME`,
//! `PTAH_REGISTRY_PASSWORD`, `PTAH_REGISTRY_TOKEN`, all optional; the Secret's
//! `registry` key arrives as `PTAH_REGISTRY_AUTHORITY`, the only authority the
//! credentials may be sent to.)
//!
//! Operations, in the `ptah` container, with the common flags
//! `--operation-id= --attempt= --resource=<Kind>/<namespace>/<name>
//! --resource-uid= --generation= --input-fingerprint= --result-url=
//! --result-token-file=/var/run/ptah/result/token [--result-ca-file=]
//! [--dispatch-not-after=<RFC 3339>] [--execution-not-after=<RFC 3339>]`:
//!
//! ```text
//! ptah-runner resolve git --url=… (--branch=…|--tag=…|--commit=…) [--path=…]
//!     [--source-policy=/source-policy/policy.yaml] [--credentials=/credentials/git]
//! ptah-runner resolve oci --reference=oci://…:<tag> [registry flags as above]
//! ptah-runner verify oci --reference=oci://…@sha256:… --policy=/policy/<key> [registry flags]
//! ptah-runner observe|plan|history --engine=postgresql|mysql --source=/source
//!     --source-kind=ConfigMap|Git|OCI --content-digest=sha256:…
//!     --connect-timeout=10s --lock-timeout=30s
//! ptah-runner apply  … the same, plus --plan=<name> --plan-fingerprint=sha256:…
//!     and --plan-content-digest=sha256:… --transaction-mode=… (schema: the
//!     runner fetches the plan bytes from the receiver with its token and
//!     checks the digest) or --sequence-digest=sha256:… (migration)
//! ```
//!
//! The operation container also gets the Pod's identity from the downward API
//! (`PTAH_POD_NAME`, `PTAH_POD_NAMESPACE`, `PTAH_POD_UID`, `PTAH_JOB_UID`), to
//! bind its result to this Pod and this Job.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    KeyToPath, ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;

use crate::api::common::{
    ConfigMapKeyRef, DatabaseEngine, Execution, GoDuration, MigrationTransactionMode,
    SchemaTransactionMode, SecretKeyRef,
};
use crate::api::migration::PtahMigration;
use crate::api::schema::PtahSchema;
use crate::api::source::{GitRef, OciTransport, RegistryAuth, RegistryAuthMode, SourceKind};
use crate::api::status::OperationType;
use crate::protocol::args::{
    DatabaseFlags, OperationFlags, PlanFlags, ResourceRef, ResultFlags, arg, command, flag, switch,
};

/// The uid, gid and fsGroup every operation Pod runs as (the distroless
/// `nonroot` user).
pub const RUN_AS: i64 = 65532;
/// The runner inside both images.
pub const RUNNER_PATH: &str = "/usr/local/bin/ptah-runner";
/// Name of the operation container.
pub const OPERATION_CONTAINER: &str = "ptah";
/// Name of the source init container.
pub const SOURCE_CONTAINER: &str = "source";
/// The key of the per-operation result token Secret.
pub const RESULT_TOKEN_KEY: &str = "token";
use crate::protocol::naming::{self, is_dns_label, is_dns_subdomain, sha256_hex};
pub use crate::protocol::naming::{MAX_JOB_NAME, OwnerKind, job_name, operation_name};

// The names live with every other label and annotation name.
pub use crate::api::annotations::{
    ANNOTATION_ATTEMPT, ANNOTATION_CONTENT_DIGEST, ANNOTATION_GENERATION,
    ANNOTATION_INPUT_FINGERPRINT, ANNOTATION_OPERATION_ID, ANNOTATION_PLAN_CONTENT_DIGEST,
    ANNOTATION_PLAN_FINGERPRINT, ANNOTATION_SAFE_TO_EVICT, LABEL_COMPONENT, LABEL_MANAGED_BY,
    LABEL_OPERATION, LABEL_OPERATION_ID, MANAGED_BY,
};

const SECRET_MODE: i32 = 0o440;
const SOURCE_DIR: &str = "/source";
const SNAPSHOT_DIR: &str = "/snapshot";
const WORK_DIR: &str = "/work";
const TMP_DIR: &str = "/tmp";
const GIT_CREDENTIALS_DIR: &str = "/credentials/git";
const REGISTRY_CONFIG_DIR: &str = "/credentials/registry";
const REGISTRY_CA_DIR: &str = "/credentials/registry-ca";
const POLICY_DIR: &str = "/policy";
const SOURCE_POLICY_DIR: &str = "/source-policy";
const RESULT_TOKEN_DIR: &str = "/var/run/ptah/result";
const RECEIVER_CA_DIR: &str = "/var/run/ptah/receiver-ca";

impl OwnerKind {
    fn kind(self) -> String {
        match self {
            Self::PtahSchema => PtahSchema::kind(&()).into_owned(),
            Self::PtahMigration => PtahMigration::kind(&()).into_owned(),
        }
    }

    fn api_version(self) -> String {
        match self {
            Self::PtahSchema => PtahSchema::api_version(&()).into_owned(),
            Self::PtahMigration => PtahMigration::api_version(&()).into_owned(),
        }
    }

    fn resource_label(self) -> &'static str {
        match self {
            Self::PtahSchema => crate::api::annotations::SCHEMA_LABEL,
            Self::PtahMigration => crate::api::annotations::MIGRATION_LABEL,
        }
    }

    fn component(self) -> &'static str {
        match self {
            Self::PtahSchema => "schema-operation",
            Self::PtahMigration => "migration-operation",
        }
    }
}

/// The resource an operation belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// PtahSchema or PtahMigration.
    pub kind: OwnerKind,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`: the Job's namespace.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.generation` the operation was dispatched for.
    pub generation: i64,
}

/// The part of the claim (`status.activeOperation`) the Job carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimInput {
    /// `sha256:<64 hex>`.
    pub operation_id: String,
    /// `sha256:<64 hex>`.
    pub input_fingerprint: String,
    /// From 1.
    pub attempt: i32,
    /// The runner refuses to start after this instant.
    pub dispatch_not_after: Option<Time>,
    /// The runner stops the operation at this instant.
    pub execution_not_after: Option<Time>,
}

/// The database the operation reads or changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInput {
    /// The engine, already known to be supported.
    pub engine: DatabaseEngine,
    /// `spec.target.urlFrom`: becomes `PTAH_DB_URL` in the operation container only.
    pub url_from: SecretKeyRef,
    /// `spec.dev.urlFrom`: becomes `PTAH_DEV_URL`, for Plan only.
    pub dev_url_from: Option<SecretKeyRef>,
    /// `spec.policy.lockTimeout`.
    pub lock_timeout: GoDuration,
}

/// A Git repository, as Resolve reads it or as a later operation fetches the
/// resolved commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitInput {
    /// Repository URL (never with credentials).
    pub url: String,
    /// What the spec asks for (Resolve reads it; a fetch uses it while the ref
    /// still points at the commit).
    pub git_ref: GitRef,
    /// The resolved commit: required for every operation but Resolve.
    pub commit: Option<String>,
    /// Directory or file in the repository.
    pub path: Option<String>,
    /// Content digest of the selected files: required for every operation but Resolve.
    pub content_digest: Option<String>,
    /// `spec.source.git.secretRef`.
    pub secret_name: Option<String>,
    /// `spec.source.sourcePolicyFrom`: Resolve mounts it read-only and checks
    /// the commit's selected files against it; unused otherwise (the manager
    /// checks the URL's host before it builds the Job).
    pub source_policy: Option<ConfigMapKeyRef>,
}

/// An OCI artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciInput {
    /// `oci://…:<tag>` for Resolve, `oci://…@sha256:…` for everything else.
    pub reference: String,
    /// `spec.source.oci.registryAuthFrom`.
    pub auth: Option<RegistryAuth>,
    /// `spec.source.oci.transport`.
    pub transport: Option<OciTransport>,
    /// `spec.source.verificationPolicyFrom`: required for Verify, unused otherwise.
    pub verification_policy: Option<ConfigMapKeyRef>,
}

/// What the operation reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceInput {
    /// The manager's snapshot of a ConfigMap source.
    ConfigMap {
        /// Name of the snapshot ConfigMap (`ptah-src-…`).
        snapshot_name: String,
        /// Content digest of the selected files.
        content_digest: String,
    },
    /// A Git repository.
    Git(GitInput),
    /// An OCI artifact.
    Oci(OciInput),
}

impl SourceInput {
    fn kind(&self) -> SourceKind {
        match self {
            Self::ConfigMap { .. } => SourceKind::ConfigMap,
            Self::Git(_) => SourceKind::Git,
            Self::Oci(_) => SourceKind::OCI,
        }
    }
}

/// What an Apply runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyInput {
    /// A schema plan; the runner fetches its bytes from the receiver and
    /// checks `content_digest` before Ptah sees them.
    Schema {
        /// Name of the PtahSchemaPlan.
        plan_name: String,
        /// Its fingerprint.
        plan_fingerprint: String,
        /// SHA-256 of its bytes.
        content_digest: String,
        /// `spec.policy.transactionMode`.
        transaction_mode: SchemaTransactionMode,
    },
    /// A migration plan: the ordered versions, checked against the fetched directory.
    Migration {
        /// Name of the PtahMigrationPlan.
        plan_name: String,
        /// Its fingerprint.
        plan_fingerprint: String,
        /// Digest of the ordered versions and checksums.
        sequence_digest: String,
        /// `spec.policy.transactionMode`.
        transaction_mode: Option<MigrationTransactionMode>,
    },
}

/// The images, by digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Images {
    /// The operator image (holds `ptah-runner`): source steps, Resolve, Verify.
    pub runner: String,
    /// The executor image (Ptah CLI + `ptah-runner`): database operations.
    pub executor: String,
}

/// Where and how the runner delivers its one result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultDelivery {
    /// The manager's receiver (`https://…`).
    pub receiver_url: String,
    /// The per-operation Secret holding the token under [`RESULT_TOKEN_KEY`].
    pub token_secret_name: String,
    /// A ConfigMap key with the CA that signs the receiver's certificate.
    pub receiver_ca: Option<ConfigMapKeyRef>,
}

/// Everything a Job is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct JobInput {
    /// The operation.
    pub operation: OperationType,
    /// The resource.
    pub owner: Owner,
    /// The claim.
    pub claim: ClaimInput,
    /// `spec.execution`.
    pub execution: Execution,
    /// The database (ignored by Resolve and Verify, which never get its URL).
    pub target: TargetInput,
    /// What the operation reads.
    pub source: SourceInput,
    /// What an Apply runs; must be set for Apply and only for Apply.
    pub apply: Option<ApplyInput>,
    /// The images.
    pub images: Images,
    /// Result delivery.
    pub result: ResultDelivery,
}

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

fn invalid(field: &'static str, value: &str, reason: &'static str) -> JobBuildError {
    JobBuildError::Invalid {
        field,
        value: value.to_string(),
        reason,
    }
}

fn check_digest<'a>(field: &'static str, value: &'a str) -> Result<&'a str, JobBuildError> {
    sha256_hex(value)
        .ok_or_else(|| invalid(field, value, "must be sha256: and 64 lowercase hex digits"))
}

fn check_subdomain(field: &'static str, value: &str) -> Result<(), JobBuildError> {
    if is_dns_subdomain(value) {
        Ok(())
    } else {
        Err(invalid(field, value, "must be a DNS-1123 subdomain"))
    }
}

fn check_image(field: &'static str, value: &str) -> Result<(), JobBuildError> {
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
fn is_reserved_key(k: &str) -> bool {
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

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn env_secret(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
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

fn env_field(name: &str, path: &str) -> EnvVar {
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

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str, size: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: None,
            size_limit: Some(Quantity(size.into())),
        }),
        ..Default::default()
    }
}

fn secret_volume(name: &str, secret: &str, items: Option<Vec<KeyToPath>>) -> Volume {
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

fn config_map_volume(name: &str, config_map: &str, items: Option<Vec<KeyToPath>>) -> Volume {
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

fn item(key: &str, path: &str) -> Option<Vec<KeyToPath>> {
    Some(vec![KeyToPath {
        key: key.into(),
        path: path.into(),
        mode: None,
    }])
}

fn hardened() -> SecurityContext {
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

fn container(name: &str, image: &str, args: Vec<String>) -> Container {
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

fn init_resources() -> ResourceRequirements {
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
fn config_map_file(
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
struct RegistryAccess {
    args: Vec<String>,
    env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
    volumes: Vec<Volume>,
}

fn registry_access(oci: &OciInput) -> Result<RegistryAccess, JobBuildError> {
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
type Handover = (Vec<String>, Vec<VolumeMount>, Vec<Volume>);

fn git_credentials(git: &GitInput) -> Result<Handover, JobBuildError> {
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

fn check_oci_reference(value: &str, by_digest: bool) -> Result<(), JobBuildError> {
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

fn check_text(field: &'static str, value: &str) -> Result<(), JobBuildError> {
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

/// Builds the Job of one operation. Pure and deterministic.
pub fn build_job(input: &JobInput) -> Result<Job, JobBuildError> {
    let checked = check_input(input)?;
    let op = input.operation;
    let owner = &input.owner;

    let mut parts = Parts {
        args: vec![operation_name(op).to_string()],
        env: vec![
            env("HOME", WORK_DIR),
            env("TMPDIR", TMP_DIR),
            env_field("PTAH_POD_NAME", "metadata.name"),
            env_field("PTAH_POD_NAMESPACE", "metadata.namespace"),
            env_field("PTAH_POD_UID", "metadata.uid"),
            env_field(
                "PTAH_JOB_UID",
                "metadata.labels['batch.kubernetes.io/controller-uid']",
            ),
        ],
        mounts: vec![mount("work", WORK_DIR, false), mount("tmp", TMP_DIR, false)],
        volumes: vec![empty_dir("work", "256Mi"), empty_dir("tmp", "64Mi")],
        annotations: BTreeMap::from([
            (
                ANNOTATION_OPERATION_ID.to_string(),
                input.claim.operation_id.clone(),
            ),
            (
                ANNOTATION_INPUT_FINGERPRINT.to_string(),
                input.claim.input_fingerprint.clone(),
            ),
            (
                ANNOTATION_ATTEMPT.to_string(),
                input.claim.attempt.to_string(),
            ),
            (
                ANNOTATION_GENERATION.to_string(),
                owner.generation.to_string(),
            ),
        ]),
        init: None,
        tail: Vec::new(),
    };
    let image = match op {
        OperationType::Resolve | OperationType::Verify => {
            source_operation(input, &mut parts)?;
            &input.images.runner
        }
        OperationType::Observe
        | OperationType::Plan
        | OperationType::History
        | OperationType::Apply => {
            database_operation(input, &mut parts)?;
            &input.images.executor
        }
    };
    result_delivery(input, &mut parts)?;

    let labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (
            LABEL_COMPONENT.to_string(),
            owner.kind.component().to_string(),
        ),
        (LABEL_OPERATION.to_string(), operation_name(op).to_string()),
        (LABEL_OPERATION_ID.to_string(), checked.id_hex16),
        (owner.kind.resource_label().to_string(), owner.name.clone()),
    ]);
    let (pod_labels, pod_annotations) = pod_metadata(input, &labels, &parts.annotations)?;

    let Parts {
        mut args,
        env: op_env,
        mounts,
        volumes,
        annotations,
        init,
        tail,
    } = parts;
    args.extend(tail);
    let mut operation = container(OPERATION_CONTAINER, image, args);
    operation.env = Some(op_env);
    operation.volume_mounts = Some(mounts);
    operation.resources = input.execution.resources.clone();
    let pod = pod_spec(input, operation, init, volumes);

    let owner_ref = OwnerReference {
        api_version: owner.kind.api_version(),
        block_owner_deletion: Some(true),
        controller: Some(true),
        kind: owner.kind.kind(),
        name: owner.name.clone(),
        uid: owner.uid.clone(),
    };
    // The Job carries our labels only; the user's go on the Pod.
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(checked.name),
            namespace: Some(owner.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_ref]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            active_deadline_seconds: Some(input.execution.active_deadline_seconds),
            backoff_limit: Some(0),
            completion_mode: Some("NonIndexed".into()),
            completions: Some(1),
            manual_selector: None,
            parallelism: Some(1),
            pod_replacement_policy: Some("Failed".into()),
            suspend: Some(false),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(pod_annotations),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            // Set by the manager after harvest, never at creation.
            ttl_seconds_after_finished: None,
            ..Default::default()
        }),
        status: None,
    })
}

/// Labels or annotations.
type Metadata = BTreeMap<String, String>;

/// What the operation container and the Pod accumulate while the Job is built.
struct Parts {
    args: Vec<String>,
    env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
    volumes: Vec<Volume>,
    annotations: BTreeMap<String, String>,
    init: Option<Container>,
    /// Arguments after the common ones (Apply's plan).
    tail: Vec<String>,
}

impl Parts {
    fn hand_over(&mut self, (args, mounts, volumes): Handover) {
        self.args.extend(args);
        self.mounts.extend(mounts);
        self.volumes.extend(volumes);
    }
}

/// What [`check_input`] derived.
struct Checked {
    name: String,
    id_hex16: String,
}

/// The checks that do not depend on the operation's family: the operation
/// exists for the kind and the source, identities, names, images, deadline,
/// result delivery, the Apply input.
fn check_input(input: &JobInput) -> Result<Checked, JobBuildError> {
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
        _ => true,
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
    check_subdomain("result.tokenSecretName", &result.token_secret_name)?;
    Ok(Checked {
        name,
        id_hex16: id_hex[..16].to_string(),
    })
}

/// The arguments every operation container starts with.
fn common_args(input: &JobInput) -> [String; 6] {
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
fn source_operation(input: &JobInput, parts: &mut Parts) -> Result<(), JobBuildError> {
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
            }
            let access = registry_access(oci)?;
            parts.env.extend(access.env);
            parts.hand_over((access.args, access.mounts, access.volumes));
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
fn database_operation(input: &JobInput, parts: &mut Parts) -> Result<(), JobBuildError> {
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

/// The result token (mounted in the operation container only), the
/// receiver, its CA and the claim's deadlines.
fn result_delivery(input: &JobInput, parts: &mut Parts) -> Result<(), JobBuildError> {
    let result = &input.result;
    parts.volumes.push(secret_volume(
        "result-token",
        &result.token_secret_name,
        item(RESULT_TOKEN_KEY, RESULT_TOKEN_KEY),
    ));
    parts
        .mounts
        .push(mount("result-token", RESULT_TOKEN_DIR, true));
    let mut flags = ResultFlags {
        result_url: result.receiver_url.clone(),
        result_token_file: format!("{RESULT_TOKEN_DIR}/{RESULT_TOKEN_KEY}"),
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

/// The Pod's labels and annotations: the user's `podMetadata`, refused if it
/// uses a reserved key, then ours written over them.
fn pod_metadata(
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
fn pod_spec(
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

struct SourceStep {
    container: Container,
    volumes: Vec<Volume>,
}

/// The `source` init container of a database operation, and the content
/// digest the operation container is told to expect.
fn source_step(input: &JobInput) -> Result<(String, SourceStep), JobBuildError> {
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

/// Every Secret a container can read, by container name: env `secretKeyRef`,
/// `envFrom` and mounted Secret volumes (plain and projected). The tests use
/// it to show that each Secret reaches one container only.
pub fn secrets_by_container(job: &Job) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let Some(pod) = job.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
        return out;
    };
    let mut secret_volumes: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for v in pod.volumes.iter().flatten() {
        let mut names = Vec::new();
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            names.push(name);
        }
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &p.secret {
                names.push(s.name.clone());
            }
        }
        secret_volumes.insert(v.name.as_str(), names);
    }
    for c in pod
        .init_containers
        .iter()
        .flatten()
        .chain(pod.containers.iter())
    {
        let entry = out.entry(c.name.clone()).or_default();
        for e in c.env.iter().flatten() {
            if let Some(s) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                entry.insert(s.name.clone());
            }
        }
        for e in c.env_from.iter().flatten() {
            if let Some(s) = &e.secret_ref {
                entry.insert(s.name.clone());
            }
        }
        for m in c.volume_mounts.iter().flatten() {
            if let Some(names) = secret_volumes.get(m.name.as_str()) {
                entry.extend(names.iter().cloned());
            }
        }
    }
    out
}

/// Whether an existing Job is the one this claim dispatched: the dispatch
/// protocol adopts a Job found under the reserved name only when it carries
/// the claim's full operation id and attempt and is controlled by the same
/// resource (by UID). Anything else under that name is not ours to harvest.
pub fn is_job_of_claim(job: &Job, claim: &ClaimInput, owner_uid: &str) -> bool {
    let annotations = job.metadata.annotations.as_ref();
    let annotation = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    let controlled = job.metadata.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.uid == owner_uid
            && (o.kind == OwnerKind::PtahSchema.kind() || o.kind == OwnerKind::PtahMigration.kind())
    });
    controlled
        && annotation(ANNOTATION_OPERATION_ID) == Some(claim.operation_id.as_str())
        && annotation(ANNOTATION_ATTEMPT) == Some(claim.attempt.to_string().as_str())
}

/// The merge patch that sets a harvested Job's cleanup TTL. A Job has no TTL
/// at creation: the manager applies this only after the result is stored and
/// the claim cleared, so the Job controller never deletes an unharvested Job.
pub fn harvested_ttl_patch(seconds: i32) -> serde_json::Value {
    serde_json::json!({ "spec": { "ttlSecondsAfterFinished": seconds.max(0) } })
}

/// A Job as YAML, the way the goldens hold it: plain scalars (no folding), so
/// a long digest stays on one greppable line.
pub fn to_yaml(job: &Job) -> Result<String, serde_saphyr::SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(job, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::RESERVED_POD_METADATA_RULE;

    #[test]
    fn the_reserved_keys_are_the_api_rule_s() {
        // Same prefixes and bare keys as the CRD's CEL rule.
        for prefix in ["ptah.run/", "kubernetes.io/", "k8s.io/"] {
            assert!(RESERVED_POD_METADATA_RULE.contains(&format!("k.startsWith('{prefix}')")));
            assert!(is_reserved_key(&format!("{prefix}x")));
            assert!(is_reserved_key(&format!("sub.{prefix}x")));
        }
        for bare in ["controller-uid", "job-name"] {
            assert!(RESERVED_POD_METADATA_RULE.contains(&format!("k == '{bare}'")));
            assert!(is_reserved_key(bare));
        }
        for free in [
            "team",
            "example.com/owner",
            "sidecar.istio.io/inject",
            "notkubernetes.io/x",
        ] {
            assert!(!is_reserved_key(free), "{free}");
        }
    }

    #[test]
    fn digests_and_images_are_checked_exactly() {
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(sha256_hex(&format!("sha256:{hex}")), Some(hex.as_str()));
        for bad in [
            format!("sha256:{}", hex.to_uppercase()),
            format!("sha256:{}", &hex[1..]),
            format!("sha512:{hex}"),
            hex.clone(),
        ] {
            assert_eq!(sha256_hex(&bad), None, "{bad}");
        }
        assert!(check_image("i", &format!("ghcr.io/a/b@sha256:{hex}")).is_ok());
        assert!(check_image("i", &format!("ghcr.io/a/b:v1@sha256:{hex}")).is_ok());
        assert!(check_image("i", "ghcr.io/a/b:v1").is_err());
        assert!(check_image("i", &format!("@sha256:{hex}")).is_err());
    }

    #[test]
    fn oci_references_must_be_pinned_except_for_resolve() {
        let hex = "ab".repeat(32);
        assert!(check_oci_reference("oci://r.example/x:v1", false).is_ok());
        assert!(check_oci_reference("oci://r.example/x:v1", true).is_err());
        assert!(check_oci_reference(&format!("oci://r.example/x@sha256:{hex}"), true).is_ok());
        assert!(check_oci_reference("https://r.example/x:v1", false).is_err());
        assert!(check_oci_reference("oci://r.example/x:v1 --flag", false).is_err());
    }

    fn example_job() -> (Job, ClaimInput, String) {
        let hex = "ab".repeat(32);
        let input = JobInput {
            operation: OperationType::Observe,
            owner: Owner {
                kind: OwnerKind::PtahSchema,
                name: "orders".into(),
                namespace: "shop".into(),
                uid: "uid-1".into(),
                generation: 1,
            },
            claim: ClaimInput {
                operation_id: format!("sha256:{hex}"),
                input_fingerprint: format!("sha256:{hex}"),
                attempt: 1,
                dispatch_not_after: None,
                execution_not_after: None,
            },
            execution: Execution::default(),
            target: TargetInput {
                engine: DatabaseEngine::MySQL,
                url_from: SecretKeyRef {
                    name: "db".into(),
                    key: "url".into(),
                },
                dev_url_from: None,
                lock_timeout: GoDuration::new("30s"),
            },
            source: SourceInput::ConfigMap {
                snapshot_name: "ptah-src-1".into(),
                content_digest: format!("sha256:{hex}"),
            },
            apply: None,
            images: Images {
                runner: format!("r@sha256:{hex}"),
                executor: format!("e@sha256:{hex}"),
            },
            result: ResultDelivery {
                receiver_url: "https://ptah.example:9443/v1/results".into(),
                token_secret_name: "ptah-result-1".into(),
                receiver_ca: None,
            },
        };
        let job = build_job(&input).expect("builds");
        (job, input.claim, input.owner.uid)
    }

    #[test]
    fn a_job_is_adopted_only_for_its_own_claim_and_owner() {
        let (job, claim, uid) = example_job();
        assert!(is_job_of_claim(&job, &claim, &uid));
        assert!(!is_job_of_claim(&job, &claim, "another-uid"));
        let mut other = claim.clone();
        other.attempt = 2;
        assert!(!is_job_of_claim(&job, &other, &uid));
        let mut other = claim.clone();
        other.operation_id = format!("sha256:{}", "cd".repeat(32));
        assert!(!is_job_of_claim(&job, &other, &uid));
        let mut foreign = job.clone();
        foreign.metadata.annotations = None;
        assert!(!is_job_of_claim(&foreign, &claim, &uid));
    }

    #[test]
    fn the_ttl_is_a_patch_after_harvest_not_part_of_the_job() {
        let (job, _, _) = example_job();
        assert_eq!(job.spec.and_then(|s| s.ttl_seconds_after_finished), None);
        assert_eq!(
            harvested_ttl_patch(600),
            serde_json::json!({"spec": {"ttlSecondsAfterFinished": 600}})
        );
        assert_eq!(
            harvested_ttl_patch(-5),
            serde_json::json!({"spec": {"ttlSecondsAfterFinished": 0}})
        );
    }
}
