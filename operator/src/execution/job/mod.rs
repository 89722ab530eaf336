//! The Job builder: one deterministic, hardened Pod per operation.
//!
//! [`build_job`] is pure: the same [`JobInput`] always gives the same Job,
//! byte for byte once rendered, and nothing here reads a clock or the API.
//! The goldens in `operator/tests/golden/jobs/` show every operation for every
//! source kind; `PTAH_BLESS=1 cargo test -p ptah-operator --test job_golden`
//! rewrites them.
//!
//! The files: `input.rs` (what the builder is given), `checks.rs` (every
//! refusal), `pod.rs` (containers, volumes, where secrets go), `argv.rs`
//! (the runner command lines); the build, adoption and cleanup are here.
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
//!   the Pod. **An Apply gets no `ttlSecondsAfterFinished` at creation**: a
//!   Job deleted before the manager harvested it would turn a known outcome
//!   into an unknown one, so the manager sets the TTL with a patch after
//!   harvest ([`harvested_ttl_patch`]). A read's Job gets it at creation
//!   (`result.finishedTtlSeconds`): its runner is answered only once the
//!   outcome is recorded or stored, and a lost read runs again. A Job found under the reserved name is
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
    ProjectedVolumeSource, ResourceRequirements, SeccompProfile, SecretKeySelector,
    SecretVolumeSource, SecurityContext, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
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
use crate::protocol::receiver::RESULT_AUDIENCE;

/// The uid, gid and fsGroup every operation Pod runs as (the distroless
/// `nonroot` user).
pub const RUN_AS: i64 = 65532;
/// The runner inside both images.
pub const RUNNER_PATH: &str = "/usr/local/bin/ptah-runner";
/// Name of the operation container.
pub const OPERATION_CONTAINER: &str = "ptah";
/// Name of the source init container.
pub const SOURCE_CONTAINER: &str = "source";
/// How [`secrets_by_container`] names a projected ServiceAccount token:
/// this, then its audience.
pub const SERVICE_ACCOUNT_TOKEN: &str = "serviceaccount-token:";
/// The file of the result token in its projected volume.
pub const RESULT_TOKEN_FILE: &str = "token";
/// The result token outlives the Pod's deadline by this much.
const RESULT_TOKEN_SLACK_SECONDS: i64 = 600;
/// The result token lives at least an hour (the API server grants no less
/// than ten minutes).
const MIN_RESULT_TOKEN_SECONDS: i64 = 3600;
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

mod argv;
mod checks;
mod input;
mod pod;

use argv::*;
pub use checks::*;
pub use input::*;
use pod::*;

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
    let trace_env: Vec<EnvVar> = input
        .trace
        .iter()
        .flat_map(|t| {
            [
                env("TRACEPARENT", t.traceparent.clone()),
                env("TRACESTATE", t.tracestate.clone()),
                // Every span of the Pod, Ptah's own too, names its operation.
                env(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    format!("ptah.operation.id={}", input.claim.operation_id),
                ),
            ]
            .into_iter()
            .chain(t.exporter.iter().map(|(k, v)| env(k, v.clone())))
        })
        .collect();
    operation
        .env
        .get_or_insert_default()
        .extend(trace_env.iter().cloned());
    let init = init.map(|mut c| {
        c.env.get_or_insert_default().extend(trace_env);
        c
    });
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
            // A read's at creation; an Apply's by the manager after harvest.
            ttl_seconds_after_finished: input
                .result
                .finished_ttl_seconds
                .filter(|_| input.operation != OperationType::Apply)
                .map(|s| s.max(0)),
            ..Default::default()
        }),
        status: None,
    })
}

/// Labels or annotations.
pub(super) type Metadata = BTreeMap<String, String>;

/// What the operation container and the Pod accumulate while the Job is built.
pub(super) struct Parts {
    pub(super) args: Vec<String>,
    pub(super) env: Vec<EnvVar>,
    pub(super) mounts: Vec<VolumeMount>,
    pub(super) volumes: Vec<Volume>,
    pub(super) annotations: BTreeMap<String, String>,
    pub(super) init: Option<Container>,
    /// Arguments after the common ones (Apply's plan).
    pub(super) tail: Vec<String>,
}

impl Parts {
    fn hand_over(&mut self, (args, mounts, volumes): Handover) {
        self.args.extend(args);
        self.mounts.extend(mounts);
        self.volumes.extend(volumes);
    }
}

/// Every Secret a container can read, by container name: env `secretKeyRef`,
/// `envFrom` and mounted Secret volumes (plain and projected), and each
/// projected ServiceAccount token ([`SERVICE_ACCOUNT_TOKEN`] and its
/// audience). The tests use it to show that each reaches one container only.
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
            // A projected token is a credential as much as a Secret is.
            if let Some(t) = &p.service_account_token {
                names.push(format!(
                    "{SERVICE_ACCOUNT_TOKEN}{}",
                    t.audience.as_deref().unwrap_or_default()
                ));
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
mod tests;
