//! What the builder is given: the resource, the claim, the target, the
//! source, what an Apply runs, the images and where the result goes.

use super::*;
use crate::api::source::FluxSourceKind;

impl OwnerKind {
    pub fn kind(self) -> String {
        match self {
            Self::PtahSchema => PtahSchema::kind(&()).into_owned(),
            Self::PtahMigration => PtahMigration::kind(&()).into_owned(),
        }
    }

    pub(super) fn api_version(self) -> String {
        match self {
            Self::PtahSchema => PtahSchema::api_version(&()).into_owned(),
            Self::PtahMigration => PtahMigration::api_version(&()).into_owned(),
        }
    }

    pub(super) fn resource_label(self) -> &'static str {
        match self {
            Self::PtahSchema => crate::api::annotations::SCHEMA_LABEL,
            Self::PtahMigration => crate::api::annotations::MIGRATION_LABEL,
        }
    }

    pub(super) fn component(self) -> &'static str {
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
    /// `spec.policy.exclude`: Ptah's `--exclude` selectors, for Plan only.
    pub exclude: Vec<String>,
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
    /// A Flux `OCIRepository`'s Verify: the files source-controller served,
    /// which the signed artifact's layer must give.
    pub flux_content: Option<FluxContent>,
}

/// What a Flux artifact's snapshot holds, for Verify to compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluxContent {
    /// The snapshot's content digest.
    pub content_digest: String,
    /// `spec.source.flux.path`.
    pub path: Option<String>,
}

/// A Flux source's artifact, as Resolve fetches it: read from the object's
/// status by the manager at dispatch, so the Job is bound to that artifact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluxInput {
    /// `spec.source.flux.kind`.
    pub kind: FluxSourceKind,
    /// `spec.source.flux.name`.
    pub name: String,
    /// `spec.source.flux.path`.
    pub path: Option<String>,
    /// What the object's status names; the manager fills it at dispatch.
    pub artifact: Option<FluxArtifact>,
}

/// A Flux object's artifact as its status names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FluxArtifact {
    /// UID of the object.
    pub uid: String,
    /// `status.artifact.url`: source-controller's HTTP address of the tarball.
    pub url: String,
    /// `status.artifact.digest`: SHA-256 of the tarball.
    pub digest: String,
    /// `status.artifact.revision`.
    pub revision: String,
    /// An `OCIRepository` under a verification policy: its manifest pinned
    /// by digest (`oci://…@sha256:…`), what Verify checks.
    pub reference: Option<String>,
    /// An `OCIRepository`'s `spec.insecure`: its registry speaks plain HTTP.
    pub insecure: bool,
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
    /// A Flux source's artifact (Resolve only: later operations mount its
    /// snapshot).
    Flux(FluxInput),
}

impl SourceInput {
    pub(super) fn kind(&self) -> SourceKind {
        match self {
            Self::ConfigMap { .. } => SourceKind::ConfigMap,
            Self::Git(_) => SourceKind::Git,
            Self::Oci(_) => SourceKind::OCI,
            Self::Flux(_) => SourceKind::Flux,
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
    /// A ConfigMap key with the CA that signs the receiver's certificate.
    pub receiver_ca: Option<ConfigMapKeyRef>,
    /// `ttlSecondsAfterFinished` of a read's Job, set at creation: its
    /// result was answered before it ended, and a lost one is safe (the
    /// read runs again). An Apply's Job never gets it at creation.
    pub finished_ttl_seconds: Option<i32>,
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
    /// The change's trace context, and where spans go: every container's
    /// environment carries it.
    pub trace: Option<TraceInput>,
}

/// What a Job's spans need: the W3C context of the stage span they hang
/// under (the OpenTelemetry environment carrier) and the exporter's
/// endpoint variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceInput {
    /// `TRACEPARENT`.
    pub traceparent: String,
    /// `TRACESTATE`.
    pub tracestate: String,
    /// `OTEL_EXPORTER_OTLP_*` variables, as the manager has them.
    pub exporter: Vec<(String, String)>,
}
